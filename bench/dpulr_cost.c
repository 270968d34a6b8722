/* DP-ULR cost: seconds per epoch of DP-ULR (controller noise, K = 8, 32, 128; K = 32 with
 * --ulr-noise explicit, no controller eigenproblems; K = 32 explicit with --antithetic
 * --baseline, the setting of our first Table 1 runs; and K = 32 explicit with --baseline
 * alone, the configuration docs/dpulr.md recommends) and of DP-SGD on MLP
 * 784-128-64-32-10 (GELU), both with Poisson sampling at expected batch B on synthetic
 * 60000 x 784 data, and the ratio DP-ULR / DP-SGD, measured in one run. Each configuration
 * runs `steps` steps (default 40) and its time per step is scaled to the 60000/B steps of
 * an epoch (the cost per step does not depend on the step number). The configurations run
 * interleaved `rounds` times (default 3) and each prints its median.
 * Two clocks: process CPU seconds (all threads; robust to other jobs on a shared machine,
 * but it charges a parallel algorithm for its idle spinning) and wall seconds (what a user
 * waits for an epoch on `threads` threads; it also measures the machine's load).
 * The explicit rows run twice: with the perturbations from the fast stream (now) and from
 * the noise stream's ChaCha20 ("old z", the path before issue 21; --no-old leaves them out).
 * Ratios are taken within each round, then the median over the rounds.
 * usage: dpulr_cost [steps=40] [threads=1] [batch=256] [rounds=3] [--main] [--no-old] */
#include <dptrain/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#define N_CFG 9
#define MAX_ROUNDS 99

/* K = 0: DP-SGD; explicit: 1 = --ulr-noise explicit, 2 = also --antithetic --baseline, 3 = also
 * --baseline alone;
 * old: the explicit perturbations from the noise stream's ChaCha20 (before issue 21);
 * sets CPU and wall seconds per epoch; returns 0 or -1 */
static int run(const dpt_dataset *d, size_t K, int explicit_, int old, uint64_t steps, int threads, size_t batch,
               double *cpu, double *wall) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:784-128-64-32-10:gelu";
    c.epochs = 1000, c.max_steps = steps, c.threads = threads;
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
        /* every row spells out its mode and tricks (the defaults are explicit + baseline) */
        u.noise = explicit_ ? DPT_ULR_EXPLICIT : DPT_ULR_CONTROLLER;
        u.perturb_std = explicit_ ? 0.1 : 0.0;
        u.antithetic = explicit_ == 2;
        u.baseline = explicit_ == 2 || explicit_ == 3;
        u.perturb_noise_stream = old;
        dpt_algo_dpulr_new(&u, &a);
    }
    dpt_trainer *t;
    if (!a || dpt_trainer_new(&c, d, NULL, a, &t) != DPT_OK) {
        fprintf(stderr, "%s\n", dpt_last_error());
        return -1;
    }
    dpt_epoch_result r;
    double c0 = bench_cpu_now(), w0 = bench_wall_now();
    dpt_status s = dpt_trainer_run(t, &r);
    double ce = bench_cpu_now() - c0, we = bench_wall_now() - w0;
    dpt_trainer_free(t);
    if (s != DPT_OK) {
        fprintf(stderr, "%s\n", dpt_last_error());
        return -1;
    }
    double per_epoch = (double)d->n / (double)batch / (double)steps;
    *cpu = ce * per_epoch;
    *wall = we * per_epoch;
    return 0;
}

int main(int argc, char **argv) {
    uint64_t steps = 40;
    int threads = 1, rounds = 3, pos = 0, main_only = 0, want_old = 1;
    size_t batch = 256;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--main")) main_only = 1;
        else if (!strcmp(argv[a], "--no-old")) want_old = 0;
        else if (argv[a][0] == '-') {
            fprintf(stderr, "usage: dpulr_cost [steps>=1] [threads>=0, 0 = all cores] [batch>=4] [rounds 1..%d] "
                            "[--main] [--no-old]\n"
                            "  --main: DP-SGD and the K = 32 rows of the targets only; --no-old: without the rows "
                            "whose explicit perturbations come from the noise stream (the path before issue 21)\n",
                    MAX_ROUNDS);
            return 2;
        } else if (pos == 0) steps = strtoull(argv[a], NULL, 10), pos++;
        else if (pos == 1) threads = atoi(argv[a]), pos++;
        else if (pos == 2) batch = (size_t)atol(argv[a]), pos++;
        else if (pos == 3) rounds = atoi(argv[a]), pos++;
    }
    if (steps < 1 || batch < 4 || threads < 0 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: dpulr_cost [steps>=1] [threads>=0, 0 = all cores] [batch>=4] [rounds 1..%d] "
                        "[--main] [--no-old]\n", MAX_ROUNDS);
        return 2;
    }
    dpt_dataset d;
    bench_mnist_like(&d, 60000);
    printf("MLP 784-128-64-32-10 GELU, expected batch %zu, %d thread(s), %llu steps each, scaled to an epoch, "
           "median of %d interleaved rounds (ratios taken within each round)\n",
           batch, threads, (unsigned long long)steps, rounds);
    /* configurations: K (0 = DP-SGD), mode (0 controller, 1 explicit, 2 explicit anti+base,
     * 3 explicit baseline alone), old z */
    const size_t Ks[N_CFG] = {0, 8, 32, 128, 32, 32, 32, 32, 32};
    const int mode[N_CFG] = {0, 0, 0, 0, 1, 2, 3, 1, 2}, old[N_CFG] = {0, 0, 0, 0, 0, 0, 0, 1, 1};
    int use[N_CFG];
    for (int i = 0; i < N_CFG; i++)
        use[i] = !(main_only && (Ks[i] == 8 || Ks[i] == 128)) && !(old[i] && !want_old);
    static double cpu[N_CFG][MAX_ROUNDS], wall[N_CFG][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < N_CFG; i++)
            if (use[i] && run(&d, Ks[i], mode[i], old[i], steps, threads, batch, &cpu[i][r], &wall[i][r])) {
                printf("configuration %d failed\n", i);
                dpt_dataset_free(&d);
                return 1;
            }
    printf("%-36s %12s %10s %13s %10s %14s\n", "algorithm", "CPU s/epoch", "vs DP-SGD", "wall s/epoch", "vs DP-SGD",
           "(rounds, wall)");
    for (int i = 0; i < N_CFG; i++) {
        if (!use[i]) continue;
        char name[48];
        static const char *suffix[4] = {"", " explicit", " expl. anti+base", " expl. baseline"};
        if (i == 0) snprintf(name, sizeof name, "DP-SGD");
        else snprintf(name, sizeof name, "DP-ULR K=%zu%s%s", Ks[i], suffix[mode[i]], old[i] ? " (old z)" : "");
        double rc[MAX_ROUNDS], rw[MAX_ROUNDS], c[MAX_ROUNDS], w[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            rc[r] = cpu[i][r] / cpu[0][r], rw[r] = wall[i][r] / wall[0][r];
            c[r] = cpu[i][r], w[r] = wall[i][r];
        }
        double cm = bench_median(c, rounds), wm = bench_median(w, rounds);
        double rcm = bench_median(rc, rounds), rwm = bench_median(rw, rounds);
        char range[32];
        snprintf(range, sizeof range, "%.2f..%.2f", rw[0], rw[rounds - 1]);
        printf("%-36s %12.2f %9.2fx %13.2f %9.2fx %14s\n", name, cm, rcm, wm, rwm, range);
    }
    dpt_dataset_free(&d);
    return 0;
}
