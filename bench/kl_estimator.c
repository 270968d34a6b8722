/* KL estimator overhead: seconds per full-batch step of noisy GD with the KL estimator
 * (ghost norms + JVP inner products; remove / add / replace neighbours) divided by the
 * seconds per step of plain full-batch gradient descent (the same trainer with the
 * non-private SGD strategy), measured in this one run on synthetic CIFAR-sized records
 * (3072 features, 2 classes) for an MLP 3072-256-256-256-2 (ReLU, no biases):
 *   n = 512  (all records in one chunk: no second forward pass for <g_i, gbar>)
 *   n = 2048 (two chunks: each chunk runs forward again with the JVP along gbar)
 * and 64 held-out records for add/replace. Target (issue 9): ratio <= 2.
 * usage: kl_estimator [steps=5] [threads=1] */
#include <dptrain/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * Seconds per step of a fresh trainer over `steps` steps (first-step allocations included);
 * the best of `reps` runs, since the machine is shared. */
static double secs_per_step(const dpt_dataset *tr, const dpt_dataset *h, int kl, uint64_t steps, int threads,
                            int reps) {
    double best = -1;
    for (int rep = 0; rep < reps; rep++) {
        dpt_train_config c = dpt_train_config_defaults();
        c.model_spec = "mlp:3072-256-256-256-2:relu:nobias";
        c.init = DPT_INIT_LECUN;
        c.sampler = DPT_SAMPLER_FULL;
        c.epochs = steps;
        c.threads = threads;
        c.quiet = 1;
        c.optim = dpt_optim_defaults(DPT_OPT_SGD);
        c.optim.lr = 0.01;
        dpt_algo *a = NULL;
        if (kl < 0) {
            if (dpt_algo_sgd_new(&a) != DPT_OK) return -1;
        } else {
            dpt_noisy_gd_config nc = dpt_noisy_gd_config_defaults();
            nc.eta = 0.01, nc.sigma = 0.01, nc.kl = kl, nc.heldout = h;
            if (dpt_algo_noisy_gd_new(&nc, &a) != DPT_OK) return -1;
        }
        dpt_trainer *t = NULL;
        if (dpt_trainer_new(&c, tr, NULL, a, &t) != DPT_OK) return -1;
        double t0 = dpt_now();
        dpt_status s = dpt_trainer_run(t, NULL);
        double el = (dpt_now() - t0) / (double)steps;
        dpt_trainer_free(t);
        if (s != DPT_OK) return -1;
        if (best < 0 || el < best) best = el;
    }
    return best;
}

int main(int argc, char **argv) {
    uint64_t steps = argc > 1 ? strtoull(argv[1], NULL, 10) : 5;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (steps < 1) steps = 1;
    dpt_dataset h;
    make_data(&h, 64, 2);
    const size_t ns[] = {512, 2048};
    printf("model mlp:3072-256-256-256-2:relu:nobias, %llu steps, %d threads, 64 held-out records, best of 3\n",
           (unsigned long long)steps, threads);
    printf("%6s %10s %10s %10s %10s | ratios to plain GD: %s\n", "n", "plain", "noisy", "+remove", "+all",
           "noisy  +remove  +all");
    for (size_t k = 0; k < 2; k++) {
        dpt_dataset tr;
        make_data(&tr, ns[k], 1);
        double p = secs_per_step(&tr, &h, -1, steps, threads, 3);
        double nz = secs_per_step(&tr, &h, 0, steps, threads, 3);
        double rm = secs_per_step(&tr, &h, DPT_KL_REMOVE, steps, threads, 3);
        double all = secs_per_step(&tr, &h, DPT_KL_ALL, steps, threads, 3);
        printf("%6zu %9.4fs %9.4fs %9.4fs %9.4fs |                    %5.2f  %6.2f  %5.2f\n", ns[k], p, nz, rm, all,
               nz / p, rm / p, all / p);
        dpt_dataset_free(&tr);
    }
    dpt_dataset_free(&h);
    return 0;
}
