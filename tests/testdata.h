/* Small synthetic datasets made inside the tests (never files from outside). */
#ifndef DPT_TESTDATA_H
#define DPT_TESTDATA_H
#include <dptrain/data.h>
#include <string.h>

/* 3 Gaussian blobs in 8 dimensions (class c is 2 higher in dimensions j = c mod 3, noise
 * std 0.7), features times `scale` (0 gives all-zero features); separable. Free with
 * dpt_dataset_free. */
static inline void tu_make_blobs(dpt_dataset *d, size_t n, uint64_t seed, float scale) {
    memset(d, 0, sizeof *d);
    d->n = n;
    d->dim = 8;
    d->n_classes = 3;
    d->shape[0] = 1, d->shape[1] = 1, d->shape[2] = 8;
    d->x = dpt_alloc(n * 8, sizeof(float), "x");
    d->y = dpt_alloc(n, sizeof(int32_t), "y");
    strcpy(d->source, "synthetic blobs");
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i % 3);
        d->y[i] = c;
        for (int j = 0; j < 8; j++)
            d->x[i * 8 + j] = scale * (float)(dpt_rng_gauss_ref(&r) * 0.7 + (j % 3 == c ? 2.0 : 0.0));
    }
    dpt_rng_free(&r);
}
#endif
