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
/* n examples of c x h x w features in `classes` classes, labels i mod classes: feature j is
 * scale * (N(0, 1) sd + (j mod classes == label ? shift : 0)), drawn in example order from
 * the AUX stream of `seed` (the same values for the same arguments). Free with
 * dpt_dataset_free. */
static inline void tu_make_clusters(dpt_dataset *d, size_t n, size_t c, size_t h, size_t w, size_t classes,
                                    uint64_t seed, double sd, double shift, float scale) {
    const size_t dim = c * h * w;
    memset(d, 0, sizeof *d);
    d->n = n;
    d->dim = dim;
    d->n_classes = (int)classes;
    d->shape[0] = c, d->shape[1] = h, d->shape[2] = w;
    d->x = dpt_alloc(n * dim, sizeof(float), "x");
    d->y = dpt_alloc(n, sizeof(int32_t), "y");
    strcpy(d->source, "synthetic clusters");
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++) {
        const size_t cl = i % classes;
        d->y[i] = (int32_t)cl;
        for (size_t j = 0; j < dim; j++)
            d->x[i * dim + j] = scale * (float)(dpt_rng_gauss_ref(&r) * sd + (j % classes == cl ? shift : 0.0));
    }
    dpt_rng_free(&r);
}
#endif
