/* DP-MAC cost: seconds per epoch of DP-MAC (30 z-steps, the paper's setting), of DP-MAC
 * with 0 z-steps (forward + W-step only: the rest is the z-step's share) and of DP-SGD, on
 * the paper's MNIST classifier after PCA (mlp:60-300-10:relu, sigmoid/BCE outputs) at
 * expected batch 1000 (Poisson, q = 1/60) on synthetic 60000 x 60 data, all in one run;
 * prints each time and the ratios DP-MAC / DP-SGD.
 * usage: dpmac_cost [epochs=1] [threads=1] [z_steps=30] */
#include <dptrain/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void make_data(dpt_dataset *d, size_t n) {
    memset(d, 0, sizeof *d);
    d->n = n, d->dim = 60, d->n_classes = 10;
    d->shape[0] = 1, d->shape[1] = 1, d->shape[2] = 60;
    d->x = dpt_alloc(n * 60, sizeof(float), "x");
    d->y = dpt_alloc(n, sizeof(int32_t), "y");
    dpt_rng r;
    dpt_rng_init(&r, 1, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++) {
        d->y[i] = (int32_t)(i % 10);
        for (size_t j = 0; j < 60; j++)
            d->x[i * 60 + j] = (float)(dpt_rng_gauss_ref(&r) * 0.1 + (j % 10 == i % 10 ? 0.2 : 0.0));
    }
    dpt_rng_free(&r);
}

/* algo 0: dpsgd, 1: dpmac with z_steps */
static double run(const dpt_dataset *d, int algo, unsigned z_steps, uint64_t epochs, int threads) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:60-300-10:relu", c.loss = DPT_LOSS_SIGMOID_BCE;
    c.epochs = epochs, c.threads = threads;
    c.sampler = DPT_SAMPLER_POISSON, c.batch_size = 1000, c.sample_rate = 1000.0 / (double)d->n;
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.optim.lr = 0.01;
    dpt_algo *a = NULL;
    if (algo == 0) {
        dpt_dpsgd_config p = dpt_dpsgd_config_defaults();
        p.sigma = 1.0, p.clip = 1.0;
        if (dpt_algo_dpsgd_new(&p, &a) != DPT_OK) return -1;
    } else {
        dpt_dpmac_config p = dpt_dpmac_config_defaults();
        p.sigma = 1.0, p.clip = 0.3, p.z_steps = z_steps;
        if (dpt_algo_dpmac_new(&p, &a) != DPT_OK) return -1;
    }
    dpt_trainer *t = NULL;
    if (dpt_trainer_new(&c, d, NULL, a, &t) != DPT_OK) return -1;
    double t0 = dpt_now();
    dpt_status s = dpt_trainer_run(t, NULL);
    double dt = dpt_now() - t0;
    dpt_trainer_free(t);
    return s == DPT_OK ? dt / (double)epochs : -1;
}

int main(int argc, char **argv) {
    uint64_t epochs = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    unsigned zs = argc > 3 ? (unsigned)atoi(argv[3]) : 30;
    if (epochs < 1) epochs = 1;
    dpt_dataset d;
    make_data(&d, 60000);
    double sgd = run(&d, 0, 0, epochs, threads);
    double mac0 = run(&d, 1, 0, epochs, threads);
    double mac = run(&d, 1, zs, epochs, threads);
    if (sgd < 0 || mac0 < 0 || mac < 0) {
        fprintf(stderr, "dpmac_cost: %s\n", dpt_last_error());
        return 1;
    }
    printf("mlp:60-300-10:relu, BCE, Poisson q = 1/60 (expected batch 1000), 60000 x 60 synthetic, %d thread(s), "
           "%llu epoch(s)\n", threads, (unsigned long long)epochs);
    printf("  DP-SGD                    %8.3f s/epoch\n", sgd);
    printf("  DP-MAC, 0 z-steps         %8.3f s/epoch  (%.2fx DP-SGD)\n", mac0, mac0 / sgd);
    printf("  DP-MAC, %2u z-steps        %8.3f s/epoch  (%.2fx DP-SGD)\n", zs, mac, mac / sgd);
    printf("  z-step share of DP-MAC    %7.1f %%  (%.3f s per z-step per epoch)\n", 100.0 * (mac - mac0) / mac,
           zs ? (mac - mac0) / zs : 0.0);
    dpt_dataset_free(&d);
    return 0;
}
