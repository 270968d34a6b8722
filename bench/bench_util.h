/* Shared by the benchmark programs: synthetic MNIST-shaped data and a CPU clock. */
#ifndef DPT_BENCH_UTIL_H
#define DPT_BENCH_UTIL_H

#include <stdlib.h>
#include <dptrain/data.h>
#include <string.h>
#include <time.h>

/* n images of c x h x w features in 10 classes (class k brighter in features j = k mod 10),
 * deterministic; free with dpt_dataset_free. */
static inline void bench_images_like(dpt_dataset *d, size_t n, size_t c, size_t h, size_t w) {
    const size_t dim = c * h * w;
    memset(d, 0, sizeof *d);
    d->n = n, d->dim = dim, d->n_classes = 10;
    d->shape[0] = c, d->shape[1] = h, d->shape[2] = w;
    d->x = dpt_alloc(n * dim, sizeof(float), "x");
    d->y = dpt_alloc(n, sizeof(int32_t), "y");
    dpt_rng r;
    dpt_rng_init(&r, 1, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++) {
        d->y[i] = (int32_t)(i % 10);
        for (size_t j = 0; j < dim; j++) d->x[i * dim + j] = (float)dpt_rng_uniform(&r) * (j % 10 == i % 10 ? 1.0f : 0.3f);
    }
    dpt_rng_free(&r);
}

/* MNIST-shaped (1 x 28 x 28) */
static inline void bench_mnist_like(dpt_dataset *d, size_t n) { bench_images_like(d, n, 1, 28, 28); }

/* CPU seconds of the process (all threads): less sensitive than wall time to other jobs. */
static inline double bench_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* qsort comparator for doubles, and the median of v[0, n) (sorts v) */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Wall-clock seconds (monotonic): what a user waits, but it also measures the load. */
static inline double bench_wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif
