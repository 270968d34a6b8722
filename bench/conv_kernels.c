/* bench/conv_kernels: the direct convolution kernels of src/nn/small_gemm.c, one example at a
 * time, on resnet5's four convolutions (3x3, padding 1), each build this CPU runs called by
 * name and timed interleaved in this one run: dpt_conv_direct (the forward pass; the input
 * gradient runs the same kernel on flipped weights) and dpt_conv_pe_grad (one example's
 * weight gradient). Prints microseconds per example and the speed-up of the x86-64-v4
 * (AVX-512) build over the v3 (AVX2) one, the builds a run picks on a CPU with and without
 * AVX-512. Usage: conv_kernels [rounds=20] [examples per round=64] */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "core/isa.h"
#include "nn/nn_internal.h"

typedef void (*conv_fn)(size_t, size_t, size_t, size_t, size_t, const float *, const float *, const size_t *,
                        const float *, float *, int);
typedef void (*pe_fn)(size_t, size_t, size_t, size_t, size_t, const size_t *, const float *, const float *, float *,
                      int);

int main(int argc, char **argv) {
#if DPT_ISA_DISPATCH
    const int rounds = argc > 1 ? atoi(argv[1]) : 20, n = argc > 2 ? atoi(argv[2]) : 64;
    if (rounds < 1 || n < 1) {
        fprintf(stderr, "usage: conv_kernels [rounds>=1] [examples>=1]\n");
        return 2;
    }
    if (!dpt_isa_v3()) {
        printf("this CPU does not run x86-64-v3: nothing to compare\n");
        return 0;
    }
    const int v4 = dpt_isa_v4();
    const conv_fn cf[3] = {dpt_conv_direct_base, dpt_conv_direct_v3, dpt_conv_direct_v4};
    const pe_fn pf[3] = {dpt_conv_pe_grad_base, dpt_conv_pe_grad_v3, dpt_conv_pe_grad_v4};
    static const size_t L[4][4] = {{3, 8, 32, 32}, {8, 16, 16, 16}, {16, 32, 8, 8}, {32, 32, 8, 8}}; /* C O H W */
    printf("resnet5's convolutions, %d rounds of %d examples, one thread; us per example (median)%s\n", rounds, n,
           v4 ? "" : "; this CPU has no AVX-512: v4 not run");
    printf("%-16s %-9s %9s %9s %9s %9s\n", "layer", "kernel", "base", "v3", "v4", "v3/v4");
    for (int l = 0; l < 4; l++) {
        const size_t C = L[l][0], O = L[l][1], H = L[l][2], W = L[l][3], k = 3, Hp = H + 2, Wp = W + 2;
        const size_t K = C * k * k, T = H * W;
        size_t *koff = malloc(K * sizeof *koff);
        float *w = malloc(O * K * sizeof *w), *xp = malloc(C * Hp * Wp * sizeof *xp), *out = malloc(O * T * sizeof *out);
        float *dv = malloc(O * T * sizeof *dv), *g = malloc(O * K * sizeof *g);
        double *t[2][3];
        if (!koff || !w || !xp || !out || !dv || !g) return 1;
        for (size_t c = 0, j = 0; c < C; c++)
            for (size_t ki = 0; ki < k; ki++)
                for (size_t kj = 0; kj < k; kj++) koff[j++] = (c * Hp + ki) * Wp + kj;
        unsigned s = 7;
        for (size_t i = 0; i < O * K; i++) s = s * 1103515245u + 12345u, w[i] = (float)(s >> 16) / 65536.0f - 0.5f;
        for (size_t i = 0; i < C * Hp * Wp; i++) s = s * 1103515245u + 12345u, xp[i] = (float)(s >> 16) / 65536.0f;
        for (size_t i = 0; i < O * T; i++) s = s * 1103515245u + 12345u, dv[i] = (float)(s >> 16) / 65536.0f - 0.5f;
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++) t[a][b] = calloc((size_t)rounds, sizeof(double));
        for (int r = -1; r < rounds; r++) /* round -1: warm-up */
            for (int b = 0; b < (v4 ? 3 : 2); b++) {
                double t0 = dpt_now();
                for (int i = 0; i < n; i++) cf[b](O, K, T, W, Wp, w, NULL, koff, xp, out, 0);
                double t1 = dpt_now();
                for (int i = 0; i < n; i++) pf[b](O, K, H, W, Wp, koff, xp, dv, g, 0);
                double t2 = dpt_now();
                if (r >= 0) t[0][b][r] = 1e6 * (t1 - t0) / n, t[1][b][r] = 1e6 * (t2 - t1) / n;
            }
        for (int a = 0; a < 2; a++) {
            double m[3] = {0, 0, 0};
            for (int b = 0; b < (v4 ? 3 : 2); b++) m[b] = bench_median(t[a][b], rounds);
            char name[32];
            snprintf(name, sizeof name, "%zux%zu %zu->%zu", H, W, C, O);
            printf("%-16s %-9s %9.2f %9.2f ", name, a ? "pe_grad" : "direct", m[0], m[1]);
            if (v4) printf("%9.2f %8.2fx\n", m[2], m[1] / m[2]);
            else printf("%9s %9s\n", "-", "-");
        }
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++) free(t[a][b]);
        free(koff), free(w), free(xp), free(out), free(dv), free(g);
    }
    return 0;
#else
    (void)argc, (void)argv;
    printf("one build of the kernels (no run-time dispatch in this build): nothing to compare\n");
    return 0;
#endif
}
