/* DP-ULR on resnet5 / CIFAR-10 (docs/cnn.md): for the controller and for explicit noise,
 * runs `steps` steps at Poisson rate q (sigma0, C = 1, K copies, LeCun init, per-channel
 * normalization) and prints, per module, the perturbation std s, the controller's
 * lambda_min / lambda_max and rank of the last step, and the fraction of clipped LR
 * estimates; then the CPU seconds per step and per epoch (50000 q examples per step).
 * usage: dpulr_conv_probe DATA_DIR [steps=2] [K=4] [q=0.02] [sigma0=5] [threads=1] */
#include <dptrain/accounting.h>
#include <dptrain/data.h>
#include <dptrain/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int run(const dpt_dataset *d, int controller, uint64_t steps, size_t K, double q, double sigma0,
               int threads) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "resnet5";
    c.init = DPT_INIT_LECUN;
    c.epochs = 1000, c.max_steps = steps, c.threads = threads, c.seed = 1;
    c.sample_rate = q;
    c.sampler = DPT_SAMPLER_POISSON_REJECT;
    uint64_t nb = 1;
    double ratio;
    if (dpt_dpulr_default_min_batch(q, sigma0, d->n, 1e-3, &nb, &ratio) != DPT_OK) return 1;
    c.min_batch = nb; /* the CLI's default N_B */
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.optim.lr = 0.001;
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.copies = K;
    u.sigma0 = sigma0;
    u.noise = controller ? DPT_ULR_CONTROLLER : DPT_ULR_EXPLICIT; /* spelled out: the default is explicit */
    if (!controller) u.perturb_std = 0.1, u.antithetic = K % 2 == 0, u.baseline = 1;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    if (dpt_algo_dpulr_new(&u, &a) != DPT_OK || dpt_trainer_new(&c, d, NULL, a, &t) != DPT_OK) {
        fprintf(stderr, "dpulr_conv_probe: %s\n", dpt_last_error());
        return 1;
    }
    clock_t t0 = clock();
    if (dpt_trainer_run(t, NULL) != DPT_OK) {
        fprintf(stderr, "dpulr_conv_probe: %s\n", dpt_last_error());
        dpt_trainer_free(t);
        return 1;
    }
    double cpu = (double)(clock() - t0) / CLOCKS_PER_SEC / (double)steps;
    printf("%s noise, K %zu, q %g, sigma0 %g:\n", controller ? "controller" : "explicit (s 0.1, antithetic + baseline)",
           K, q, sigma0);
    printf("  module  s          lambda_min   lambda_max   rank/dim   clipped\n");
    for (size_t l = 0; l < dpt_algo_dpulr_n_modules(a); l++) {
        dpt_dpulr_module_info info;
        dpt_algo_dpulr_module_info(a, l, &info);
        printf("  %-6zu  %-9.4g  %-11.4g  %-11.4g  %4zu/%-4zu  %.3f\n", l, info.s, info.lambda_min, info.lambda_max,
               info.rank, info.dim, info.examples ? (double)info.clipped / (double)info.examples : 0.0);
    }
    printf("  CPU s per step %.2f, per epoch (%.0f steps) %.0f\n", cpu, 1.0 / q, cpu / q);
    dpt_trainer_free(t);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: dpulr_conv_probe DATA_DIR [steps=2] [K=4] [q=0.02] [sigma0=5] [threads=1]\n");
        return 2;
    }
    uint64_t steps = argc > 2 ? strtoull(argv[2], NULL, 10) : 2;
    size_t K = argc > 3 ? strtoull(argv[3], NULL, 10) : 4;
    double q = argc > 4 ? atof(argv[4]) : 0.02, sigma0 = argc > 5 ? atof(argv[5]) : 5.0;
    int threads = argc > 6 ? atoi(argv[6]) : 1;
    dpt_dataset d;
    dpt_normalizer nz;
    if (dpt_data_load("cifar10", argv[1], DPT_SPLIT_TRAIN, &d) != DPT_OK ||
        dpt_normalizer_fit(&d, DPT_NORM_PER_CHANNEL, &nz) != DPT_OK || dpt_normalizer_apply(&nz, &d) != DPT_OK) {
        fprintf(stderr, "dpulr_conv_probe: %s\n", dpt_last_error());
        return 1;
    }
    int rc = run(&d, 1, steps, K, q, sigma0, threads) || run(&d, 0, steps, K, q, sigma0, threads);
    dpt_normalizer_free(&nz);
    dpt_dataset_free(&d);
    return rc;
}
