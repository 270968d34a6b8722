/* Synthetic classification data for the examples: K classes in D dimensions, each class a
 * Gaussian blob (standard deviation 1) around its own centre, the centres drawn once from
 * N(0, 0.5^2) with a fixed seed, so every program that includes this sees the same
 * problem. The arrays are the caller's own memory, as data already in a program would be.
 * Uses the library's seeded random streams (dpt_rng), so the data are reproducible. */
#ifndef DPTRAIN_EXAMPLE_SYNTHETIC_H
#define DPTRAIN_EXAMPLE_SYNTHETIC_H

#include <dptrain/dptrain.h>
#include <stdlib.h>

#define SYN_DIM 16
#define SYN_CLASSES 4

/* x [n, SYN_DIM] row-major and y [n] (malloc'ed, the caller frees them); examples drawn
 * from stream `stream` (use different streams for training and test data). */
static inline dpt_status synthetic_arrays(size_t n, uint32_t stream, float **x_out, int32_t **y_out) {
    float centre[SYN_CLASSES][SYN_DIM];
    dpt_rng r;
    dpt_status s = dpt_rng_init(&r, 2024, 0);
    if (s != DPT_OK) return s;
    for (int k = 0; k < SYN_CLASSES; k++)
        for (int j = 0; j < SYN_DIM; j++) centre[k][j] = 0.5f * dpt_rng_gauss(&r);
    dpt_rng_free(&r);

    float *x = malloc(n * SYN_DIM * sizeof *x);
    int32_t *y = malloc(n * sizeof *y);
    if (!x || !y || (s = dpt_rng_init(&r, 2024, stream)) != DPT_OK) {
        free(x);
        free(y);
        return s != DPT_OK ? s : DPT_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        y[i] = (int32_t)dpt_rng_below(&r, SYN_CLASSES);
        for (int j = 0; j < SYN_DIM; j++) x[i * SYN_DIM + j] = centre[y[i]][j] + dpt_rng_gauss(&r);
    }
    dpt_rng_free(&r);
    *x_out = x;
    *y_out = y;
    return DPT_OK;
}

/* A dpt_dataset holding a copy of the arrays (free it with dpt_dataset_free). */
static inline dpt_status synthetic_dataset(size_t n, uint32_t stream, dpt_dataset *d) {
    float *x = NULL;
    int32_t *y = NULL;
    dpt_status s = synthetic_arrays(n, stream, &x, &y);
    if (s == DPT_OK) s = dpt_dataset_from_arrays(x, y, n, SYN_DIM, SYN_CLASSES, d); /* copies */
    free(x);
    free(y);
    return s;
}

#endif
