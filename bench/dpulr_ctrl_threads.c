/* The DP-ULR controller's BLAS/LAPACK work on one vs two OpenBLAS threads: the Gram GEMM
 * Y Y^T of b rows of width n and dsyevr (eigenvalues only) on it, the controller's usual
 * route, repeated `reps` times with the two settings interleaved. Prints wall ms per call
 * for each and their ratio (two threads / one), and whether the eigenvalues agree bit for
 * bit (they do not: the reason the controller runs on one thread, docs/dpulr.md "Threads").
 * usage: dpulr_ctrl_threads [reps=10] [b=256] [n=785] */
#include <dptrain/core.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    size_t b = argc > 2 ? (size_t)atol(argv[2]) : 256, n = argc > 3 ? (size_t)atol(argv[3]) : 785;
    if (reps < 1 || b < 1 || n < 1) {
        fprintf(stderr, "usage: dpulr_ctrl_threads [reps>=1] [b>=1] [n>=1]\n");
        return 2;
    }
    float *Y = dpt_alloc(b * n, sizeof(float), "Y"), *G = dpt_alloc(b * b, sizeof(float), "G");
    double *A = dpt_alloc(b * b, sizeof(double), "A"), *w[2];
    w[0] = dpt_alloc(b, sizeof(double), "w"), w[1] = dpt_alloc(b, sizeof(double), "w");
    if (!Y || !G || !A || !w[0] || !w[1]) return 1;
    dpt_rng r;
    dpt_rng_init(&r, 1, DPT_STREAM_AUX);
    for (size_t i = 0; i < b * n; i++) Y[i] = (float)dpt_rng_gauss_ref(&r);
    dpt_rng_free(&r);
    double t[2] = {0, 0};
    for (int k = 0; k < reps; k++)
        for (int th = 1; th <= 2; th++) {
            dpt_threads_set_blas(th);
            double t0 = now();
            dpt_sgemm(0, 1, b, b, n, 1.0f, Y, n, Y, n, 0.0f, G, b);
            for (size_t i = 0; i < b * b; i++) A[i] = G[i];
            if (dpt_syev(b, A, w[th - 1], NULL) != DPT_OK) {
                fprintf(stderr, "%s\n", dpt_last_error());
                return 1;
            }
            t[th - 1] += now() - t0;
        }
    printf("Gram GEMM (%zu x %zu x %zu) + dsyevr (%zu), wall ms per call over %d calls:\n", b, b, n, b, reps);
    printf("  1 OpenBLAS thread: %.2f   2 threads: %.2f   ratio 2/1: %.2f\n", 1e3 * t[0] / reps, 1e3 * t[1] / reps,
           t[1] / t[0]);
    printf("  eigenvalues bit-identical for 1 and 2 threads: %s\n", memcmp(w[0], w[1], b * sizeof(double)) ? "no" : "yes");
    dpt_free(Y), dpt_free(G), dpt_free(A), dpt_free(w[0]), dpt_free(w[1]);
    return 0;
}
