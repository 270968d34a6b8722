/* bench/noise: Gaussian noise throughput (million draws per second) of every sampler
 * DP-SGD can use, measured in one run on the same buffer size as MLP 784-1000-10's
 * gradient (795,010 parameters): the ziggurat bulk fill on 1 thread and on all threads,
 * the exact double Box-Muller reference, the secure discrete Gaussian (the exact CKS
 * sampler and the table sampler), and the fast AES-CTR fill of DP-ULR's explicit-mode
 * perturbations. The last
 * column is the time per DP-SGD step that sampler costs for that model.
 * usage: noise [repeats=20] [threads=0] */
#include <dptrain/privacy.h>

#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

#define P 795010

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20, threads = argc > 2 ? atoi(argv[2]) : 0;
    if (reps < 1) reps = 1;
    int nt = dpt_threads_resolve(threads);
    float *g = dpt_alloc(P, sizeof *g, "buffer");
    double *t = malloc((size_t)reps * sizeof *t);
    dpt_rng r;
    if (!g || !t || dpt_rng_init(&r, 1, DPT_STREAM_NOISE) != DPT_OK) return 1;
    printf("%-40s %10s %14s\n", "sampler", "M draws/s", "ms per step");
    double mu, tv; /* the secure table is built once per process: not timed */
    if (dpt_privacy_secure_distance(DPT_DGAUSS_TABLE, &mu, &tv) != DPT_OK) return 1;
    for (int mode = 0; mode < 9; mode++) {
        int rr = mode == 2 || mode == 3 || mode == 4 ? (reps + 9) / 10 : reps; /* the slow ones: fewer repeats */
        for (int i = 0; i < rr; i++) {
            double t0 = dpt_now();
            dpt_status s = DPT_OK;
            switch (mode) {
            case 0: s = dpt_privacy_noise_add(&r, g, P, 1.0, 1.0, 1); break;
            case 1: s = dpt_privacy_noise_add(&r, g, P, 1.0, 1.0, nt); break;
            case 2: s = dpt_privacy_noise_add_ref(&r, g, P, 1.0, 1.0); break;
            case 3: s = dpt_privacy_noise_add_secure(&r, g, P, 1.0, 1.0, 1); break;
            case 4: s = dpt_privacy_noise_add_secure(&r, g, P, 1.0, 1.0, nt); break;
            case 5: s = dpt_privacy_noise_add_secure_ex(&r, g, P, 1.0, 1.0, 1.0, DPT_DGAUSS_TABLE, 1); break;
            case 6: s = dpt_privacy_noise_add_secure_ex(&r, g, P, 1.0, 1.0, 1.0, DPT_DGAUSS_TABLE, nt); break;
            case 7:
            case 8:
                s = dpt_rng_gauss_fill_fast_at(&r, dpt_rng_reserve_substreams(&r, 1), 0, g, P, 1.0f, mode == 7 ? 1 : nt);
                break;
            }
            if (s != DPT_OK) {
                fprintf(stderr, "noise: %s\n", dpt_last_error());
                return 1;
            }
            t[i] = dpt_now() - t0;
        }
        qsort(t, (size_t)rr, sizeof *t, bench_cmp_double);
        double med = t[rr / 2];
        char name[64];
        static const char *names[] = {"ziggurat fill, 1 thread", "ziggurat fill, %d threads",
                                      "Box-Muller reference (double)", "secure CKS (exact, old), 1 thread",
                                      "secure CKS (exact, old), %d threads", "secure table sampler, 1 thread",
                                      "secure table sampler, %d threads", "fast fill (AES-CTR, DP-ULR z), 1 thread",
                                      "fast fill (AES-CTR, DP-ULR z), %d threads"};
        snprintf(name, sizeof name, names[mode], nt);
        printf("%-40s %10.1f %14.3f\n", name, P / med / 1e6, med * 1e3);
    }
    dpt_rng_free(&r);
    dpt_free(g);
    free(t);
    return 0;
}
