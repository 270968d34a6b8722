/* bench/freeze_speed: what freezing a trunk saves in DP-SGD. The same DP-SGD steps (Poisson
 * batches of expected size 256, synthetic MNIST-shaped data, 6000 examples) with every layer
 * training, with the first layers frozen and their forward pass run at every step
 * (no_feature_cache), and frozen with their output cached (the default), interleaved in one
 * run; prints the median seconds of CPU per step of each, their ratios to training every
 * layer, and the one-time cost of building the cache (a forward pass of the trunk over the
 * training set), for mnist_cnn with conv1,conv2 frozen and the default MLP with fc1,fc2
 * frozen. A step's time is measured between the first and the last step's callback of a
 * run, so the start (and the cache's build) is not in it.
 * Usage: freeze_speed [threads] [repeats] [steps] */
#include <dptrain/train.h>

#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

/* CPU time at each step's callback */
typedef struct {
    double first, last;
    int n;
} step_clock;
static int on_step(void *user, const dpt_step_info *info) {
    (void)info;
    step_clock *c = user;
    double now = bench_cpu_now();
    if (c->n++ == 0) c->first = now;
    c->last = now;
    return 0;
}

/* CPU seconds per DP-SGD step of model `spec` with `freeze` (NULL: none) frozen, between the
 * first and the last of 1 + steps steps, and of the run's start until its first step ended
 * less one step (the cache's build, when there is one). */
static int per_step(const char *spec, const char *freeze, int no_cache, const dpt_dataset *d, int threads, int steps,
                    double *step, double *start) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.freeze = freeze;
    c.no_feature_cache = no_cache;
    c.sampler = DPT_SAMPLER_POISSON;
    c.batch_size = 256;
    c.epochs = 1;
    c.max_steps = (uint64_t)steps + 1;
    c.threads = threads;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    step_clock clk = {0, 0, 0};
    c.on_step = on_step;
    c.user = &clk;
    dpt_dpsgd_config p = dpt_dpsgd_config_defaults();
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    if (dpt_algo_dpsgd_new(&p, &a) != DPT_OK || dpt_trainer_new(&c, d, NULL, a, &t) != DPT_OK) {
        fprintf(stderr, "freeze_speed: %s\n", dpt_last_error());
        return 1;
    }
    double t0 = bench_cpu_now();
    dpt_status s = dpt_trainer_run(t, NULL);
    dpt_trainer_free(t);
    if (s != DPT_OK) fprintf(stderr, "freeze_speed: %s\n", dpt_last_error());
    *step = (clk.last - clk.first) / steps;
    *start = clk.first - t0 - *step;
    return s != DPT_OK;
}

static int bench(const char *spec, const char *freeze, const dpt_dataset *d, int threads, int reps, int steps) {
    double *all = malloc(reps * sizeof *all), *fz = malloc(reps * sizeof *fz), *fc = malloc(reps * sizeof *fc);
    double *r1 = malloc(reps * sizeof *r1), *r2 = malloc(reps * sizeof *r2), *build = malloc(reps * sizeof *build);
    int rc = 0;
    double warm, s0, s1, s2;
    rc |= per_step(spec, NULL, 0, d, threads, 2, &warm, &s0) | per_step(spec, freeze, 0, d, threads, 2, &warm, &s0);
    for (int r = 0; r < reps && !rc; r++) {
        rc |= per_step(spec, NULL, 0, d, threads, steps, &all[r], &s0);
        rc |= per_step(spec, freeze, 1, d, threads, steps, &fz[r], &s1);
        rc |= per_step(spec, freeze, 0, d, threads, steps, &fc[r], &s2);
        build[r] = s2 - s0; /* what the cache adds to the start */
        r1[r] = fz[r] / all[r];
        r2[r] = fc[r] / all[r];
    }
    if (!rc) {
        dpt_model *m = NULL;
        size_t trained = 0;
        if (dpt_model_new(spec, 1, 1, &m) == DPT_OK) dpt_model_freeze_parse(m, freeze, NULL, &trained);
        printf("%-28s frozen %-10s (%zu of %zu parameters train): all %.4f s/step; frozen, run every step %.4f "
               "(%.3f of all); frozen, cached %.4f (%.3f of all), the cache's build %.3f s (median of %d)\n",
               spec, freeze, trained, m ? m->n_params : 0, bench_median(all, reps), bench_median(fz, reps),
               bench_median(r1, reps), bench_median(fc, reps), bench_median(r2, reps), bench_median(build, reps),
               reps);
        dpt_model_free(m);
    }
    free(all), free(fz), free(fc), free(r1), free(r2), free(build);
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
