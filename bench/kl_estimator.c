/* KL estimator overhead: seconds per full-batch step of noisy GD with the KL estimator
 * (ghost norms + inner products; remove / add / replace neighbours) divided by the
 * seconds per step of plain full-batch gradient descent (the same trainer with the
 * non-private SGD strategy), measured in this one run on synthetic CIFAR-sized records
 * (3072 features, 2 classes) for an MLP 3072-256-256-256-2 (ReLU, no biases):
 *   n = 512  (all records in one chunk: no second forward pass for <g_i, gbar>)
 *   n = 2048 (two chunks: the inner products read each chunk's kept activations)
 * and 64 held-out records for add/replace (one replacement candidate). Target (issue 9):
 * ratio <= 2. The configurations alternate `reps` times and each reports its best wall
 * time and its best CPU time (the process's, all threads: at threads=1 it is what a busy
 * shared machine perturbs least); "+all(rec)" is the estimator with kl_keep_bytes = 0
 * (each chunk run forward and backward again instead of keeping its activations).
 * usage: kl_estimator [steps=5] [threads=1] [reps=3] */
#include <dptrain/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static void make_data(dpt_dataset *d, size_t n, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->n = n, d->dim = 3072, d->n_classes = 2;
    d->shape[0] = 3, d->shape[1] = 32, d->shape[2] = 32;
    d->x = dpt_alloc(n * 3072, sizeof(float), "x");
    d->y = dpt_alloc(n, sizeof(int32_t), "y");
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++) {
        d->y[i] = (int32_t)(i % 2);
        for (size_t j = 0; j < 3072; j++) d->x[i * 3072 + j] = (float)dpt_rng_uniform(&r);
    }
    dpt_rng_free(&r);
}

/* kl = -1: plain full-batch GD (the non-private SGD strategy on the full sampler);
 * kl = 0: noisy GD without the estimator; kl > 0: noisy GD with these neighbour bits.
 * Wall and CPU seconds per step of a fresh trainer over `steps` steps (first-step
 * allocations included); keep = the estimator's kl_keep_bytes. */
static int run_once(const dpt_dataset *tr, const dpt_dataset *h, int kl, uint64_t steps, int threads, size_t keep,
                    double *wall, double *cpu) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:3072-256-256-256-2:relu:nobias";
    c.init = DPT_INIT_LECUN;
    c.sampler = DPT_SAMPLER_FULL;
    c.epochs = steps;
    c.threads = threads;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.01;
    dpt_algo *a = NULL;
    if (kl < 0) {
        if (dpt_algo_sgd_new(&a) != DPT_OK) return -1;
    } else {
        dpt_noisy_gd_config nc = dpt_noisy_gd_config_defaults();
        nc.eta = 0.01, nc.sigma = 0.01, nc.kl = kl, nc.heldout = h, nc.kl_keep_bytes = keep;
        if (dpt_algo_noisy_gd_new(&nc, &a) != DPT_OK) return -1;
    }
    dpt_trainer *t = NULL;
    if (dpt_trainer_new(&c, tr, NULL, a, &t) != DPT_OK) return -1;
    double t0 = dpt_now(), c0 = bench_cpu_now();
    dpt_status s = dpt_trainer_run(t, NULL);
    *wall = (dpt_now() - t0) / (double)steps;
    *cpu = (bench_cpu_now() - c0) / (double)steps;
    dpt_trainer_free(t);
    return s == DPT_OK ? 0 : -1;
}

#define NCONF 5
int main(int argc, char **argv) {
    uint64_t steps = argc > 1 ? strtoull(argv[1], NULL, 10) : 5;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    if (steps < 1) steps = 1;
    if (reps < 1) reps = 1;
    dpt_dataset h;
    make_data(&h, 64, 2);
    const size_t ns[] = {512, 2048};
    /* plain, noisy, +remove, +all, +all recomputing each chunk (kl_keep_bytes 0) */
    const int kls[NCONF] = {-1, 0, DPT_KL_REMOVE, DPT_KL_ALL, DPT_KL_ALL};
    const size_t keeps[NCONF] = {0, 0, (size_t)1 << 30, (size_t)1 << 30, 0};
    printf("model mlp:3072-256-256-256-2:relu:nobias, %llu steps, %d threads, 64 held-out records, best of %d "
           "(configurations interleaved)\n",
           (unsigned long long)steps, threads, reps);
    printf("%6s %5s %10s %10s %10s %10s %10s | ratios to plain GD: %s\n", "n", "clock", "plain", "noisy", "+remove",
           "+all", "+all(rec)", "noisy  +remove  +all  +all(rec)");
    for (size_t k = 0; k < 2; k++) {
        dpt_dataset tr;
        make_data(&tr, ns[k], 1);
        double w[NCONF], cp[NCONF];
        for (int q = 0; q < NCONF; q++) w[q] = cp[q] = -1;
        /* interleaved: a load change on the shared machine hits every configuration alike */
        for (int r = 0; r < reps; r++)
            for (int q = 0; q < NCONF; q++) {
                if (ns[k] <= 1024 && q == 4) continue; /* one chunk: nothing to keep */
                double a, b;
                if (run_once(&tr, &h, kls[q], steps, threads, keeps[q], &a, &b)) {
                    fprintf(stderr, "kl_estimator: %s\n", dpt_last_error());
                    return 1;
                }
                if (w[q] < 0 || a < w[q]) w[q] = a;
                if (cp[q] < 0 || b < cp[q]) cp[q] = b;
            }
        for (int c = 0; c < 2; c++) {
            const double *v = c ? cp : w;
            printf("%6zu %5s", ns[k], c ? "CPU" : "wall");
            for (int q = 0; q < NCONF; q++)
                if (v[q] < 0) printf(" %10s", "-");
                else printf(" %9.4fs", v[q]);
            printf(" |                    %5.2f  %6.2f  %5.2f", v[1] / v[0], v[2] / v[0], v[3] / v[0]);
            if (v[4] < 0) printf("  %9s\n", "-");
            else printf("  %9.2f\n", v[4] / v[0]);
        }
        fflush(stdout);
        dpt_dataset_free(&tr);
    }
    dpt_dataset_free(&h);
    return 0;
}
