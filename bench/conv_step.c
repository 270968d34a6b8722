/* Convolutional DP-SGD step cost: seconds per step of a non-private step (forward, loss,
 * backward, summed gradient) and of a DP-SGD step (the same backward, per-example squared
 * norms by each conv layer's chosen path, clipping factors, the clipped sum as weighted
 * GEMMs, Gaussian noise) for the MNIST CNN (mnist_cnn) and ResNet-5 (resnet5) at batch 64
 * on random inputs, and their ratio, all measured in this one run. Also the materialized
 * per-example path (PER_EXAMPLE rows, what the reference path of DP-SGD does) for scale.
 * usage: conv_step [steps=20] [threads=0] [batch=64] */
#include <dptrain/nn.h>
#include <dptrain/privacy.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    dpt_model *m;
    float *x, *dout, *loss, *sq, *c, *pe;
    int32_t *y;
    size_t B;
    dpt_rng noise;
} ctx;

static int fwd_bwd(ctx *k) {
    dpt_model *m = k->m;
    if (dpt_model_forward(m, k->x, k->B) || dpt_loss(DPT_LOSS_SOFTMAX_CE, dpt_model_output(m), k->B, m->out_dim, k->y,
                                                      NULL, k->loss, k->dout) ||
        dpt_model_backward(m, k->dout, k->B))
        return 1;
    return 0;
}

/* 0 non-private, 1 DP-SGD (ghost/materialized norms + weighted GEMM), 2 materialized rows */
static int step(ctx *k, int mode, int threads) {
    dpt_model *m = k->m;
    if (fwd_bwd(k)) return 1;
    if (mode == 0) return dpt_model_param_grad(m, k->B, DPT_GRAD_SUM, NULL, m->grad, 0, 0) != DPT_OK;
    if (mode == 1) {
        if (dpt_model_param_grad(m, k->B, DPT_GRAD_SQNORM, NULL, k->sq, 0, 0) ||
            dpt_privacy_clip_factors(k->sq, k->B, 1.0, k->c) ||
            dpt_model_param_grad(m, k->B, DPT_GRAD_WEIGHTED, k->c, m->grad, 0, 0))
            return 1;
    } else {
        const size_t P = m->n_params;
        if (dpt_model_param_grad(m, k->B, DPT_GRAD_PER_EXAMPLE, NULL, k->pe, P, 0) ||
            dpt_privacy_clip_rows_ref(k->pe, k->B, P, P, 1.0, NULL))
            return 1;
        memset(m->grad, 0, P * sizeof(float));
        for (size_t i = 0; i < k->B; i++)
            for (size_t j = 0; j < P; j++) m->grad[j] += k->pe[i * P + j];
    }
    return dpt_privacy_noise_add(&k->noise, m->grad, m->n_params, 1.0, 1.0, threads) != DPT_OK;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 20, threads = argc > 2 ? atoi(argv[2]) : 0;
    size_t B = argc > 3 ? (size_t)atol(argv[3]) : 64;
    if (steps < 1 || B < 1) {
        fprintf(stderr, "usage: conv_step [steps>=1] [threads] [batch>=1]\n");
        return 2;
    }
    threads = dpt_threads_resolve(threads);
    dpt_threads_set_blas(threads);
    const char *specs[2] = {"mnist_cnn", "resnet5"};
    const char *names[3] = {"non-private", "DP-SGD", "DP-SGD materialized"};
    printf("batch %zu, %d steps, %d threads\n", B, steps, threads);
    printf("%-10s %-20s %12s %8s\n", "model", "step", "ms/step", "ratio");
    for (int s = 0; s < 2; s++) {
        ctx k;
        memset(&k, 0, sizeof k);
        k.B = B;
        if (dpt_model_new(specs[s], B, threads, &k.m)) {
            fprintf(stderr, "conv_step: %s\n", dpt_last_error());
            return 1;
        }
        dpt_model *m = k.m;
        dpt_rng r;
        dpt_rng_init(&r, 1, DPT_STREAM_INIT);
        dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &r);
        dpt_rng_free(&r);
        dpt_rng_init(&k.noise, 2, DPT_STREAM_NOISE);
        k.x = dpt_alloc(B * m->in_dim, sizeof(float), "x");
        k.dout = dpt_alloc(B * m->out_dim, sizeof(float), "dout");
        k.loss = dpt_alloc(B, sizeof(float), "loss");
        k.sq = dpt_alloc(B, sizeof(float), "sq");
        k.c = dpt_alloc(B, sizeof(float), "c");
        k.pe = dpt_alloc(B * m->n_params, sizeof(float), "per-example");
        k.y = dpt_alloc(B, sizeof(int32_t), "y");
        if (!k.x || !k.dout || !k.loss || !k.sq || !k.c || !k.pe || !k.y) return 1;
        dpt_rng_init(&r, 3, DPT_STREAM_AUX);
        for (size_t j = 0; j < B * m->in_dim; j++) k.x[j] = (float)dpt_rng_gauss_ref(&r);
        for (size_t i = 0; i < B; i++) k.y[i] = (int32_t)(i % 10);
        dpt_rng_free(&r);
        double t[3] = {0, 0, 0};
        for (int mode = 0; mode < 3; mode++) step(&k, mode, threads); /* warm-up */
        /* interleaved, so a load change on the shared machine hits every mode alike */
        for (int it = 0; it < steps; it++)
            for (int mode = 0; mode < 3; mode++) {
                double t0 = dpt_now();
                if (step(&k, mode, threads)) {
                    fprintf(stderr, "conv_step: %s\n", dpt_last_error());
                    return 1;
                }
                t[mode] += dpt_now() - t0;
            }
        for (int mode = 0; mode < 3; mode++)
            printf("%-10s %-20s %12.2f %7.2fx\n", specs[s], names[mode], 1e3 * t[mode] / steps, t[mode] / t[0]);
        fflush(stdout);
        dpt_free(k.x), dpt_free(k.dout), dpt_free(k.loss), dpt_free(k.sq), dpt_free(k.c), dpt_free(k.pe),
            dpt_free(k.y);
        dpt_rng_free(&k.noise);
        dpt_model_free(m);
    }
    return 0;
}
