/* DP-ULR cost: seconds per epoch of DP-ULR (controller noise, K = 8, 32, 128) and of
 * DP-SGD on MLP 784-128-64-32-10 (GELU), both with Poisson sampling at expected batch B
 * on synthetic 60000 x 784 data, and the ratio DP-ULR / DP-SGD, measured in one run. Each
 * configuration runs `steps` steps (default 40) and its time per step is scaled to the
 * 60000/B steps of an epoch (the cost per step does not depend on the step number).
 * The last row is K = 32 with --ulr-noise explicit (no controller eigenproblems).
 * Times are process CPU seconds (the machine is shared; wall time would measure the load).
 * usage: dpulr_cost [steps=40] [threads=1] [batch=256] */
#include <dptrain/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"


/* K = 0: DP-SGD; explicit: --ulr-noise explicit (no controller eigenproblems); returns
 * CPU seconds per epoch or -1 */
static double run(const dpt_dataset *d, size_t K, int explicit_, uint64_t steps, int threads, size_t batch) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:784-128-64-32-10:gelu";
    c.epochs = 1000, c.max_steps = steps, c.threads = threads, c.quiet = 1;
    c.sample_rate = (double)batch / (double)d->n;
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.optim.lr = 0.01;
    dpt_algo *a = NULL;
    if (K == 0) {
        c.sampler = DPT_SAMPLER_POISSON;
        dpt_dpsgd_config dc = dpt_dpsgd_config_defaults();
        dpt_algo_dpsgd_new(&dc, &a);
    } else {
        c.sampler = DPT_SAMPLER_POISSON_REJECT;
        c.min_batch = batch * 3 / 4;
        dpt_dpulr_config u = dpt_dpulr_config_defaults();
        u.copies = K;
        if (explicit_) u.noise = DPT_ULR_EXPLICIT, u.perturb_std = 0.1;
        dpt_algo_dpulr_new(&u, &a);
    }
    dpt_trainer *t;
    if (!a || dpt_trainer_new(&c, d, NULL, a, &t) != DPT_OK) {
        fprintf(stderr, "%s\n", dpt_last_error());
        return -1;
    }
    dpt_epoch_result r;
    double t0 = bench_cpu_now();
    dpt_status s = dpt_trainer_run(t, &r);
    double el = bench_cpu_now() - t0;
    dpt_trainer_free(t);
    if (s != DPT_OK) {
        fprintf(stderr, "%s\n", dpt_last_error());
        return -1;
    }
    return el / (double)steps * ((double)d->n / (double)batch);
}

int main(int argc, char **argv) {
    uint64_t steps = argc > 1 ? strtoull(argv[1], NULL, 10) : 40;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    size_t batch = argc > 3 ? (size_t)atol(argv[3]) : 256;
    if (steps < 1 || batch < 4) {
        fprintf(stderr, "usage: dpulr_cost [steps>=1] [threads] [batch>=4]\n");
        return 2;
    }
    dpt_dataset d;
    bench_mnist_like(&d, 60000);
    printf("MLP 784-128-64-32-10 GELU, expected batch %zu, %d thread(s), %llu steps each, scaled to an epoch\n", batch,
           threads, (unsigned long long)steps);
    printf("%-22s %12s %10s\n", "algorithm", "CPU s/epoch", "vs DP-SGD");
    double base = run(&d, 0, 0, steps, threads, batch);
    printf("%-22s %12.2f %9.2fx\n", "DP-SGD", base, 1.0);
    fflush(stdout);
    const size_t Ks[4] = {8, 32, 128, 32};
    for (int i = 0; i < 4; i++) {
        double s = run(&d, Ks[i], i == 3, steps, threads, batch);
        char name[40];
        snprintf(name, sizeof name, "DP-ULR K=%zu%s", Ks[i], i == 3 ? " explicit" : "");
        if (s < 0) printf("%-22s failed\n", name);
        else printf("%-22s %12.2f %9.2fx\n", name, s, s / base);
        fflush(stdout);
    }
    dpt_dataset_free(&d);
    return 0;
}
