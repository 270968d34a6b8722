/* bench/act_kernels: ns per element of the GELU forward and backward kernels and ns per row
 * of the softmax cross-entropy (10 classes; values alone and values + gradients), each next
 * to a naive double libm reference (erfc/exp/log) measured in the same run. One thread, CPU
 * time, median of the repeats; then the largest relative error of both on the same inputs.
 * Usage: act_kernels [repeats] */
#include <dptrain/nn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

#define N 32768  /* GELU elements per call (128 KiB of floats: cache resident) */
#define ROWS 4096 /* CE rows per call */
#define K 10
#define INNER 20 /* calls per timed sample */

static volatile float sink;

static void ref_gelu_fwd(const float *x, float *v, size_t n) {
    for (size_t j = 0; j < n; j++) v[j] = (float)(0.5 * x[j] * erfc(-x[j] / sqrt(2.0)));
}
static void ref_gelu_bwd(const float *x, const float *t, float *o, size_t n) {
    for (size_t j = 0; j < n; j++) {
        const double xd = x[j];
        o[j] = (float)(t[j] * (0.5 * erfc(-xd / sqrt(2.0)) + xd * exp(-0.5 * xd * xd) / sqrt(2.0 * M_PI)));
    }
}
static void ref_ce(const float *o, const int32_t *y, size_t B, float *loss, float *d) {
    for (size_t i = 0; i < B; i++) {
        const float *r = o + i * K;
        double m = r[0], s = 0.0;
        for (size_t k = 1; k < K; k++) m = r[k] > m ? r[k] : m;
        for (size_t k = 0; k < K; k++) s += exp(r[k] - m);
        loss[i] = (float)(m + log(s) - r[y[i]]);
        if (d)
            for (size_t k = 0; k < K; k++) d[i * K + k] = (float)(exp(r[k] - m) / s - (k == (size_t)y[i]));
    }
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1) {
        fprintf(stderr, "act_kernels: repeats must be >= 1\n");
        return 2;
    }
    dpt_model *m = NULL;
    if (dpt_model_new("mlp:1-4096-1:gelu", N / 4096, 1, &m) != DPT_OK) {
        fprintf(stderr, "act_kernels: %s\n", dpt_last_error());
        return 1;
    }
    const dpt_layer *L = &m->layers[1];
    float *x = malloc(N * sizeof *x), *v = malloc(N * sizeof *v), *t = malloc(N * sizeof *t);
    float *o = malloc(ROWS * K * sizeof *o), *loss = malloc(ROWS * sizeof *loss), *d = malloc(ROWS * K * sizeof *d);
    int32_t *y = malloc(ROWS * sizeof *y);
    dpt_rng r;
    dpt_rng_init(&r, 7, DPT_STREAM_AUX);
    for (size_t j = 0; j < N; j++) x[j] = (float)(3.0 * dpt_rng_gauss(&r)), t[j] = 1.0f;
    for (size_t j = 0; j < ROWS * K; j++) o[j] = (float)(4.0 * dpt_rng_gauss(&r));
    for (size_t i = 0; i < ROWS; i++) y[i] = (int32_t)(i % K);
    dpt_rng_free(&r);

    double *s[8];
    for (int c = 0; c < 8; c++) s[c] = malloc(reps * sizeof(double));
    for (int rep = 0; rep < reps; rep++) { /* interleaved: the load affects all alike */
        double t0 = bench_cpu_now();
        for (int i = 0; i < INNER; i++) L->ops->forward(L, x, v, N / 4096);
        double t1 = bench_cpu_now();
        for (int i = 0; i < INNER; i++) ref_gelu_fwd(x, v, N);
        double t2 = bench_cpu_now();
        for (int i = 0; i < INNER; i++) L->ops->backward_input(L, x, v, t, v, N / 4096);
        double t3 = bench_cpu_now();
        for (int i = 0; i < INNER; i++) ref_gelu_bwd(x, t, v, N);
        double t4 = bench_cpu_now();
        for (int i = 0; i < INNER; i++) dpt_loss(DPT_LOSS_SOFTMAX_CE, o, ROWS, K, y, NULL, loss, NULL);
        double t5 = bench_cpu_now();
        for (int i = 0; i < INNER; i++) ref_ce(o, y, ROWS, loss, NULL);
        double t6 = bench_cpu_now();
        for (int i = 0; i < INNER; i++) dpt_loss(DPT_LOSS_SOFTMAX_CE, o, ROWS, K, y, NULL, loss, d);
        double t7 = bench_cpu_now();
        for (int i = 0; i < INNER; i++) ref_ce(o, y, ROWS, loss, d);
        double t8 = bench_cpu_now();
        const double ge = 1e9 / ((double)INNER * N), ce = 1e9 / ((double)INNER * ROWS);
        s[0][rep] = (t1 - t0) * ge, s[1][rep] = (t2 - t1) * ge, s[2][rep] = (t3 - t2) * ge;
        s[3][rep] = (t4 - t3) * ge, s[4][rep] = (t5 - t4) * ce, s[5][rep] = (t6 - t5) * ce;
        s[6][rep] = (t7 - t6) * ce, s[7][rep] = (t8 - t7) * ce;
        sink = v[0] + loss[0] + d[0];
    }
    double md[8];
    for (int c = 0; c < 8; c++) md[c] = bench_median(s[c], reps);
    printf("act_kernels: 1 thread, CPU time, median of %d repeats\n", reps);
    printf("%-28s %10s %14s %8s\n", "kernel", "ours", "double libm", "ratio");
    printf("%-28s %7.3f ns %11.3f ns %8.2f\n", "gelu forward (per element)", md[0], md[1], md[1] / md[0]);
    printf("%-28s %7.3f ns %11.3f ns %8.2f\n", "gelu backward (per element)", md[2], md[3], md[3] / md[2]);
    printf("%-28s %7.3f ns %11.3f ns %8.2f\n", "ce 10 classes, loss (row)", md[4], md[5], md[5] / md[4]);
    printf("%-28s %7.3f ns %11.3f ns %8.2f\n", "ce 10 classes, +grad (row)", md[6], md[7], md[7] / md[6]);
    /* accuracy on the same inputs against the double reference (loss: error / max(1, loss)) */
    double eg = 0.0, el = 0.0;
    L->ops->forward(L, x, v, N / 4096);
    for (size_t j = 0; j < N; j++) {
        const double xd = x[j], ref = 0.5 * xd * erfc(-xd / sqrt(2.0));
        const double e = fabs(v[j] - ref) / fmax(fabs(ref), 1e-30);
        eg = e > eg ? e : eg;
    }
    dpt_loss(DPT_LOSS_SOFTMAX_CE, o, ROWS, K, y, NULL, loss, NULL);
    for (size_t i = 0; i < ROWS; i++) {
        const float *ri = o + i * K;
        double mx = ri[0], sum = 0.0;
        for (size_t k = 1; k < K; k++) mx = ri[k] > mx ? ri[k] : mx;
        for (size_t k = 0; k < K; k++) sum += exp((double)ri[k] - mx);
        const double l = mx + log(sum) - ri[y[i]], e = fabs(loss[i] - l) / fmax(1.0, l);
        el = e > el ? e : el;
    }
    printf("max relative error vs double: gelu forward %.2e, ce loss %.2e (of max(1, loss))\n", eg, el);
    for (int c = 0; c < 8; c++) free(s[c]);
    free(x), free(v), free(t), free(o), free(loss), free(d), free(y);
    dpt_model_free(m);
    return 0;
}
