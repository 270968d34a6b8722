/* bench/train_step: time of one non-private training step (forward, softmax cross-entropy,
 * backward, batch-sum gradient, Adam update) at batch 256 for MLP 784-128-64-32-10 (GELU)
 * and MLP 784-1000-10 (ReLU), the FLOP rate reached, and the sgemm FLOP rate of the same
 * GEMM shapes measured in the same run. Usage: train_step [threads] [repeats] */
#include <dptrain/nn.h>
#include <dptrain/optim.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define B 256

/* GEMMs of one step: forward v = x W^T, weight gradient dW = dv^T x, input gradient
 * dx = dv W (not for the first layer). */
static double gemm_flops(const size_t *dims, int nl) {
    double f = 0;
    for (int l = 0; l < nl; l++) {
        double dk = (double)dims[l] * dims[l + 1];
        f += 2.0 * B * dk * (l == 0 ? 2 : 3);
    }
    return f;
}

static double sgemm_seconds(const size_t *dims, int nl, float **bufs, int reps) {
    double *t = malloc(reps * sizeof *t);
    for (int r = 0; r < reps; r++) {
        double t0 = dpt_now();
        for (int l = 0; l < nl; l++) {
            size_t D = dims[l], K = dims[l + 1];
            dpt_sgemm(0, 1, B, K, D, 1.0f, bufs[0], D, bufs[1], D, 0.0f, bufs[2], K);      /* v  [B,K] */
            dpt_sgemm(1, 0, K, D, B, 1.0f, bufs[2], K, bufs[0], D, 0.0f, bufs[3], D);      /* dW [K,D] */
            if (l > 0) dpt_sgemm(0, 0, B, D, K, 1.0f, bufs[2], K, bufs[1], D, 0.0f, bufs[4], D); /* dx */
        }
        t[r] = dpt_now() - t0;
    }
    double m = bench_median(t, reps);
    free(t);
    return m;
}

static int bench(const char *spec, const size_t *dims, int nl, int threads, int reps) {
    dpt_model *m;
    if (dpt_model_new(spec, B, threads, &m) != DPT_OK) {
        fprintf(stderr, "train_step: %s\n", dpt_last_error());
        return 1;
    }
    dpt_rng r;
    dpt_rng_init(&r, 1, DPT_STREAM_INIT);
    dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &r);
    dpt_optim_config oc = dpt_optim_defaults(DPT_OPT_ADAM);
    dpt_optim opt;
    dpt_optim_init(&opt, &oc, m->n_params);
    float *x = malloc(B * dims[0] * sizeof(float)), *dout = malloc(B * 10 * sizeof(float));
    int32_t *y = malloc(B * sizeof(int32_t));
    for (size_t i = 0; i < B * dims[0]; i++) x[i] = (float)dpt_rng_uniform(&r);
    for (int i = 0; i < B; i++) y[i] = i % 10;
    double *t = malloc(reps * sizeof *t);
    for (int rep = -3; rep < reps; rep++) { /* 3 warm-up steps */
        double t0 = dpt_now();
        dpt_model_forward(m, x, B);
        dpt_loss(DPT_LOSS_SOFTMAX_CE, dpt_model_output(m), B, 10, y, NULL, NULL, dout);
        for (int i = 0; i < B * 10; i++) dout[i] *= 1.0f / B;
        dpt_model_backward(m, dout, B);
        dpt_model_param_grad(m, B, DPT_GRAD_SUM, NULL, m->grad, 0, 0);
        dpt_optim_step(&opt, m->theta, m->grad, 1e-3);
        if (rep >= 0) t[rep] = dpt_now() - t0;
    }
    double step = bench_median(t, reps);
    size_t maxd = 0;
    for (int l = 0; l <= nl; l++) maxd = dims[l] > maxd ? dims[l] : maxd;
    float *bufs[5];
    for (int i = 0; i < 5; i++) bufs[i] = calloc(B * maxd > maxd * maxd ? B * maxd : maxd * maxd, sizeof(float));
    double gs = sgemm_seconds(dims, nl, bufs, reps);
    double fl = gemm_flops(dims, nl);
    double steps_per_epoch = 235.0; /* ceil(60000 / 256) */
    printf("%-28s params %8zu  step %7.3f ms  %6.1f GFLOP/s  | sgemm alone %7.3f ms %6.1f GFLOP/s  "
           "| step/sgemm %.2fx  | est. MNIST epoch %.2f s\n",
           spec, m->n_params, 1e3 * step, fl / step * 1e-9, 1e3 * gs, fl / gs * 1e-9, step / gs,
           step * steps_per_epoch);
    for (int i = 0; i < 5; i++) free(bufs[i]);
    free(t), free(x), free(dout), free(y);
    dpt_optim_free(&opt);
    dpt_model_free(m);
    dpt_rng_free(&r);
    return 0;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int reps = argc > 2 ? atoi(argv[2]) : 200;
    threads = dpt_threads_resolve(threads);
    dpt_threads_set_blas(threads);
    printf("train_step: batch %d, %d threads, median of %d steps (FLOPs counted for the GEMMs only)\n", B, threads,
           reps);
    static const size_t mlp1[] = {784, 128, 64, 32, 10}, mlp2[] = {784, 1000, 10};
    int rc = bench("mlp:784-128-64-32-10:gelu", mlp1, 4, threads, reps);
    rc |= bench("mlp:784-1000-10:relu", mlp2, 2, threads, reps);
    printf("reference (issue 3, PyTorch 1.13 on this machine): 0.53 s and 1.73 s per MNIST epoch\n");
    return rc;
}
