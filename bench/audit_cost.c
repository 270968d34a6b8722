/* bench/audit_cost: what LiRA's shadow models cost. Times, in one run on synthetic data
 * made here (N examples, 100 features, 10 classes), one normal training run on all N
 * examples and S shadow runs (train on a random half + score all N, as `dptrain audit`
 * does), and prints the shadow time per model relative to the normal run, for non-private
 * SGD and for DP-SGD. Usage: audit_cost [N] [shadows] [epochs] */
#include <dptrain/audit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void make_data(dpt_dataset *d, size_t n) {
    memset(d, 0, sizeof *d);
    d->n = n, d->dim = 100, d->n_classes = 10;
    d->shape[0] = 1, d->shape[1] = 1, d->shape[2] = 100;
    d->x = dpt_alloc(n * 100, sizeof(float), "x");
    d->y = dpt_alloc(n, sizeof(int32_t), "y");
    dpt_rng r;
    dpt_rng_init(&r, 1, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++) {
        d->y[i] = (int32_t)(i % 10);
        for (size_t j = 0; j < 100; j++) d->x[i * 100 + j] = (float)(dpt_rng_gauss_ref(&r) + (j % 10 == i % 10 ? 1.0 : 0.0));
    }
    dpt_rng_free(&r);
}

int main(int argc, char **argv) {
    size_t N = argc > 1 ? (size_t)atol(argv[1]) : 4000;
    size_t S = argc > 2 ? (size_t)atol(argv[2]) : 4;
    uint64_t E = argc > 3 ? (uint64_t)atol(argv[3]) : 5;
    if (N < 100 || S < 1 || E < 1) {
        fprintf(stderr, "usage: audit_cost [N >= 100] [shadows >= 1] [epochs >= 1]\n");
        return 2;
    }
    dpt_dataset pop;
    make_data(&pop, N);
    uint8_t *all = malloc(N), *half = malloc(N);
    double *phi = malloc(N * sizeof *phi);
    memset(all, 1, N);
    printf("audit_cost: N %zu, model mlp:100-128-10:relu, %llu epochs, batch 64, 1 thread, %zu shadows\n", N,
           (unsigned long long)E, S);
    for (int dp = 0; dp < 2; dp++) {
        dpt_audit_job job;
        memset(&job, 0, sizeof job);
        job.cfg = dpt_train_config_defaults();
        job.cfg.model_spec = "mlp:100-128-10:relu";
        job.cfg.batch_size = 64;
        job.cfg.epochs = E;
        job.cfg.optim.lr = 1e-3;
        job.cfg.threads = 1;
        job.algo = dp ? DPT_AUDIT_DPSGD : DPT_AUDIT_SGD;
        if (dp) {
            job.cfg.sampler = DPT_SAMPLER_POISSON;
            job.cfg.sample_rate = 64.0 / (double)N;
            job.dpsgd = dpt_dpsgd_config_defaults();
        }
        double t0 = dpt_now();
        if (dpt_audit_train_and_score(&job, &pop, all, NULL, 1, NULL, phi, NULL) != DPT_OK) {
            fprintf(stderr, "audit_cost: %s\n", dpt_last_error());
            return 1;
        }
        double t_full = dpt_now() - t0;
        dpt_rng r;
        dpt_rng_init(&r, 2, DPT_STREAM_AUX);
        t0 = dpt_now();
        for (size_t s = 0; s < S; s++) {
            for (size_t i = 0; i < N; i++) half[i] = (uint8_t)dpt_rng_bernoulli(&r, 0.5);
            if (dpt_audit_train_and_score(&job, &pop, half, NULL, 10 + s, NULL, phi, NULL) != DPT_OK) {
                fprintf(stderr, "audit_cost: %s\n", dpt_last_error());
                return 1;
            }
        }
        double t_sh = (dpt_now() - t0) / (double)S;
        dpt_rng_free(&r);
        printf("%-6s normal run (N examples) %.3fs; shadow (N/2 + scoring N) %.3fs per model = %.2fx of a normal run; "
               "a 16-shadow LiRA costs %.1f normal runs\n", dp ? "dpsgd" : "sgd", t_full, t_sh, t_sh / t_full,
               16 * t_sh / t_full);
    }
    free(all), free(half), free(phi);
    dpt_dataset_free(&pop);
    return 0;
}
