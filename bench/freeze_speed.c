/* bench/freeze_speed: what freezing a trunk saves in DP-SGD. The same DP-SGD steps (Poisson
 * batches of expected size 256, synthetic MNIST-shaped data) with every layer training and
 * with the first layers frozen (dpt_train_config.freeze), interleaved A B A B in one run;
 * prints the median seconds of CPU per step of each and their ratio (frozen / all), for
 * mnist_cnn with conv1,conv2 frozen and the default MLP with fc1,fc2 frozen.
 * Usage: freeze_speed [threads] [repeats] [steps] */
#include <dptrain/train.h>

#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

/* CPU seconds of `steps` DP-SGD steps of model `spec` with `freeze` (NULL: none) frozen. */
static int run_steps(const char *spec, const char *freeze, const dpt_dataset *d, int threads, int steps,
                     double *cpu) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.freeze = freeze;
    c.sampler = DPT_SAMPLER_POISSON;
    c.batch_size = 256;
    c.epochs = 1;
    c.max_steps = (uint64_t)steps;
    c.threads = threads;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    dpt_dpsgd_config p = dpt_dpsgd_config_defaults();
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    if (dpt_algo_dpsgd_new(&p, &a) != DPT_OK || dpt_trainer_new(&c, d, NULL, a, &t) != DPT_OK) {
        fprintf(stderr, "freeze_speed: %s\n", dpt_last_error());
        return 1;
    }
    double t0 = bench_cpu_now();
    dpt_status s = dpt_trainer_run(t, NULL);
    *cpu = bench_cpu_now() - t0;
    dpt_trainer_free(t);
    if (s != DPT_OK) fprintf(stderr, "freeze_speed: %s\n", dpt_last_error());
    return s != DPT_OK;
}

static int bench(const char *spec, const char *freeze, const dpt_dataset *d, int threads, int reps, int steps) {
    double *all = malloc(reps * sizeof *all), *fz = malloc(reps * sizeof *fz), *ratio = malloc(reps * sizeof *ratio);
    int rc = 0;
    double warm;
    rc |= run_steps(spec, NULL, d, threads, 2, &warm) | run_steps(spec, freeze, d, threads, 2, &warm);
    for (int r = 0; r < reps && !rc; r++) {
        rc |= run_steps(spec, NULL, d, threads, steps, &all[r]);
        rc |= run_steps(spec, freeze, d, threads, steps, &fz[r]);
        ratio[r] = fz[r] / all[r];
    }
    if (!rc) {
        dpt_model *m = NULL;
        size_t trained = 0;
        if (dpt_model_new(spec, 1, 1, &m) == DPT_OK) dpt_model_freeze_parse(m, freeze, NULL, &trained);
        printf("%-28s frozen %-10s (%zu of %zu parameters train): all %.4f s/step, frozen %.4f s/step, "
               "frozen / all %.3f (median of %d pairs)\n",
               spec, freeze, trained, m ? m->n_params : 0, bench_median(all, reps) / steps,
               bench_median(fz, reps) / steps, bench_median(ratio, reps), reps);
        dpt_model_free(m);
    }
    free(all), free(fz), free(ratio);
    return rc;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 5;
    int steps = argc > 3 ? atoi(argv[3]) : 10;
    if (threads < 0 || reps < 1 || steps < 1) {
        fprintf(stderr, "usage: freeze_speed [threads >= 0] [repeats >= 1] [steps >= 1]\n");
        return 2;
    }
    dpt_dataset d;
    bench_mnist_like(&d, 6000);
    printf("DP-SGD steps (Poisson, expected batch 256, CPU seconds, %d thread%s)\n", threads, threads == 1 ? "" : "s");
    int rc = bench("mnist_cnn", "conv1,conv2", &d, threads, reps, steps);
    rc |= bench("mlp:784-128-64-32-10:gelu", "fc1,fc2", &d, threads, reps, steps);
    dpt_dataset_free(&d);
    return rc;
}
