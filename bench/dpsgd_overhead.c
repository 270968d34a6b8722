/* DP-SGD overhead: seconds per epoch of non-private SGD and of DP-SGD (ghost norms +
 * weighted GEMM + ziggurat noise; and the secure discrete-Gaussian noise) at (expected)
 * batch 256, the ratio DP / non-private, and the peak memory (maxrss) of each
 * configuration, each run in its own forked child so the peaks do not mix:
 *   MLP 784-128-64-32-10 (GELU) and MLP 784-1000-10 (ReLU) on synthetic 60000 x 784 data,
 *   mnist_cnn on the same data as 1x28x28 images, resnet5 on synthetic 50000 x 3x32x32
 *   (CIFAR-10-shaped) data (issue 10).
 * Also the CPU-time ratio of the training (robust to a busy machine at threads=1), and the
 * peak memory above the synthetic data set ("train MB": maxrss at the end minus maxrss
 * once the data exist), which the data set (188 MB, 614 MB) would otherwise dilute.
 * Secure noise: the table sampler (the default), and with --cks also the old exact CKS
 * sampler, each in the same rounds as the non-private run it is compared with.
 * --interleave N: the time ratios only, every configuration of a model in one process taking
 * turns of N steps (see interleaved()), which a changing load on the shared machine moves
 * far less than the forked runs.
 * usage: dpsgd_overhead [epochs=1] [threads=0] [repeats=3] [--steps S] [--no-secure] [--cks]
 *                       [--mlp|--cnn|--model SPEC] [--interleave N] */
#include <dptrain/train.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"


/* The configurations of one model, in the order each round runs them. */
enum { M_SGD = 0, M_DPSGD, M_TABLE, M_CKS, N_MODES };
static const char *const MODE_NAMES[N_MODES] = {"non-private", "DP-SGD", "DP-SGD --secure", "  (old: CKS)"};

/* One configuration in this (forked) process: trains `steps` steps (0: `epochs` epochs)
 * and writes {wall s/epoch, peak MB, CPU s/epoch, train MB} to fd. Times are scaled from
 * the steps run to an epoch (the cost per step does not depend on the step). The secure
 * table is built before the clock starts (once per process, ~0.1 s: not a per-epoch cost). */
/* The synthetic data set of a model: CIFAR-10-shaped for resnet5, MNIST-shaped otherwise. */
static void bench_data(const char *spec, dpt_dataset *d) {
    if (!strcmp(spec, "resnet5"))
        bench_images_like(d, 50000, 3, 32, 32);
    else
        bench_mnist_like(d, 60000);
}

/* A trainer of configuration `mode` on d at batch 256 (expected batch for DP-SGD), SGD lr
 * 0.1, sigma 1, C 1; epochs and max_steps as dpt_train_config's, on_step / user as given.
 * Prints the library's message on failure. The secure table is built here (once per
 * process, ~0.1 s), before any clock starts. */
static int make_trainer(const char *spec, int mode, const dpt_dataset *d, uint64_t epochs, uint64_t max_steps,
                        int threads, dpt_step_fn on_step, void *user, dpt_trainer **out) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec, c.epochs = epochs, c.max_steps = max_steps, c.threads = threads;
    c.batch_size = 256;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.1;
    c.on_step = on_step, c.user = user;
    dpt_algo *a = NULL;
    if (mode == M_SGD) {
        dpt_algo_sgd_new(&a);
    } else {
        c.sampler = DPT_SAMPLER_POISSON;
        c.sample_rate = 256.0 / (double)d->n;
        dpt_dpsgd_config dc = dpt_dpsgd_config_defaults();
        dc.sigma = 1.0, dc.clip = 1.0, dc.secure = mode >= M_TABLE;
        dc.secure_sampler = mode == M_CKS ? DPT_DGAUSS_CKS : DPT_DGAUSS_TABLE;
        c.secure = mode >= M_TABLE;
        dpt_algo_dpsgd_new(&dc, &a);
        double mu, tv;
        if (mode == M_TABLE && dpt_privacy_secure_distance(DPT_DGAUSS_TABLE, &mu, &tv) != DPT_OK) {
            fprintf(stderr, "%s\n", dpt_last_error());
            dpt_algo_free(a);
            return 1;
        }
    }
    if (dpt_trainer_new(&c, d, NULL, a, out) != DPT_OK) {
        fprintf(stderr, "%s\n", dpt_last_error());
        return 1;
    }
    return 0;
}

static int child(const char *spec, int mode, uint64_t epochs, uint64_t steps, int threads, int fd) {
    dpt_dataset d;
    bench_data(spec, &d);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double data_mb = ru.ru_maxrss / 1024.0;
    const double n = (double)d.n;
    dpt_trainer *t;
    if (make_trainer(spec, mode, &d, steps ? 1000000 : epochs, steps, threads, NULL, NULL, &t)) return 1;
    dpt_epoch_result r;
    double cpu0 = bench_cpu_now(), w0 = bench_wall_now();
    if (dpt_trainer_run(t, &r) != DPT_OK) {
        fprintf(stderr, "%s\n", dpt_last_error());
        return 1;
    }
    double wall = bench_wall_now() - w0, cpu = bench_cpu_now() - cpu0;
    /* steps of an epoch: ceil(n / 256) shuffled batches, round(1 / q) Poisson ones */
    double spe = mode == M_SGD ? ceil(n / 256.0) : floor(n / 256.0 + 0.5);
    double scale = steps ? spe / (double)steps : 1.0 / (double)epochs; /* max_steps: exactly `steps` run */
    getrusage(RUSAGE_SELF, &ru);
    double out[4] = {wall * scale, ru.ru_maxrss / 1024.0, cpu * scale, ru.ru_maxrss / 1024.0 - data_mb};
    if (write(fd, out, sizeof out) != (ssize_t)sizeof out) return 1;
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
    return 0;
}

#define MAX_REPEATS 64

/* ==== --interleave N: all configurations of a model in ONE process, taking turns ====
 * Each configuration's trainer runs N steps, then the next one's, round after round, so a
 * change of load on the shared machine falls on every configuration alike (the forked
 * runs above take seconds each, and the load changes between them). Only whole steps
 * are timed: an on_step callback reads the clocks after every step, and a turn's first
 * step (which follows the other trainers' turns and dpt_trainer_run's re-entry) is not
 * counted. No memory figures: the trainers share the process. */
typedef struct {
    uint64_t left;              /* steps left in this turn */
    double cpu, wall;           /* clocks at the last step's end; cpu < 0: turn start */
    double cpu_sum, wall_sum;   /* this turn's timed steps */
    uint64_t timed;
} turn_clock;

static int turn_step(void *user, const dpt_step_info *info) {
    (void)info;
    turn_clock *c = user;
    const double cpu = bench_cpu_now(), wall = bench_wall_now();
    if (c->cpu >= 0) {
        c->cpu_sum += cpu - c->cpu;
        c->wall_sum += wall - c->wall;
        c->timed++;
    }
    c->cpu = cpu;
    c->wall = wall;
    return --c->left == 0;
}

/* Turns of `block` steps, `rounds` rounds, of the wanted configurations of spec: prints
 * CPU and wall ms per step and the ratios to non-private (median over rounds of the
 * ratio within a round, with the range). */
static int interleaved(const char *spec, const int want[N_MODES], uint64_t block, int rounds, int threads) {
    dpt_dataset d;
    bench_data(spec, &d);
    dpt_trainer *t[N_MODES] = {NULL};
    turn_clock clk[N_MODES];
    static double cpu[N_MODES][MAX_REPEATS], wall[N_MODES][MAX_REPEATS];
    int ok = 1;
    for (int m = 0; m < N_MODES && ok; m++) {
        if (!want[m] && m != M_SGD) continue;
        memset(&clk[m], 0, sizeof clk[m]);
        if (make_trainer(spec, m, &d, 1000000, 0, threads, turn_step, &clk[m], &t[m])) ok = 0;
    }
    for (int r = 0; r < rounds && ok; r++)
        for (int m = 0; m < N_MODES && ok; m++) {
            if (!t[m]) continue;
            turn_clock *c = &clk[m];
            c->left = block + 1, c->cpu = -1, c->cpu_sum = c->wall_sum = 0, c->timed = 0;
            if (dpt_trainer_run(t[m], NULL) != DPT_OK || c->timed == 0) {
                ok = 0;
            } else {
                cpu[m][r] = c->cpu_sum / (double)c->timed;
                wall[m][r] = c->wall_sum / (double)c->timed;
            }
        }
    if (!ok && t[M_SGD]) fprintf(stderr, "dpsgd_overhead: %s: %s\n", spec, dpt_last_error());
    for (int m = 0; m < N_MODES && ok; m++) {
        if (!t[m]) continue;
        double cr[MAX_REPEATS], wr[MAX_REPEATS], cm[MAX_REPEATS], wm[MAX_REPEATS];
        for (int r = 0; r < rounds; r++) {
            cr[r] = cpu[m][r] / cpu[M_SGD][r];
            wr[r] = wall[m][r] / wall[M_SGD][r];
            cm[r] = cpu[m][r];
            wm[r] = wall[m][r];
        }
        const double c_ms = 1e3 * bench_median(cm, rounds), w_ms = 1e3 * bench_median(wm, rounds);
        const double c_ratio = bench_median(cr, rounds), w_ratio = bench_median(wr, rounds);
        char range[32];
        snprintf(range, sizeof range, "%.2f..%.2f", cr[0], cr[rounds - 1]); /* sorted by bench_median */
        printf("%-28s %-16s %9.2f %6.2fx %15s %9.2f %6.2fx\n", spec, MODE_NAMES[m], c_ms, c_ratio, range, w_ms,
               w_ratio);
    }
    for (int m = 0; m < N_MODES; m++) dpt_trainer_free(t[m]);
    dpt_dataset_free(&d);
    fflush(stdout);
    return ok ? 0 : 1;
}

/* out: {wall s/epoch, peak MB, CPU s/epoch, train MB} of one configuration, in a fresh
 * process (so the peaks do not mix) */
static int measure(const char *spec, int mode, uint64_t epochs, uint64_t steps, int threads, double out[4]) {
    int p[2];
    if (pipe(p)) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        _exit(child(spec, mode, epochs, steps, threads, p[1]));
    }
    close(p[1]);
    ssize_t n = read(p[0], out, 4 * sizeof(double));
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    if (n != (ssize_t)(4 * sizeof(double)) || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    return 0;
}

/* On a shared machine one run can land on a busy moment: every round runs all the
 * configurations of a model back to back (interleaved), each ratio is taken within its
 * round, and the medians over the rounds are printed with their range. */
int main(int argc, char **argv) {
    int want[N_MODES] = {1, 1, 1, 0}, want_mlp = 1, want_cnn = 1, pos = 0;
    const char *only = NULL; /* --model SPEC: that model alone */
    uint64_t epochs = 1, steps = 0, block = 0;
    int threads = 0, repeats = 3;
    const char *usage = "usage: dpsgd_overhead [epochs=1] [threads=0] [repeats=3] [--steps S] [--no-secure] [--cks] "
                        "[--mlp|--cnn|--model SPEC] [--interleave N]\n"
                        "  DP-SGD / non-private time and peak memory per epoch, MLPs and CNNs (batch 256);\n"
                        "  --steps S: S steps per run, scaled to an epoch; --cks: also the old exact CKS sampler;\n"
                        "  --model SPEC: only this model (one of the four, or any spec of 784 inputs);\n"
                        "  --interleave N: time only, every configuration in one process taking turns of N\n"
                        "    steps, `repeats` rounds (robust to a changing load; no memory figures)\n";
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--no-secure")) want[M_TABLE] = 0;
        else if (!strcmp(argv[a], "--cks")) want[M_CKS] = 1;
        else if (!strcmp(argv[a], "--mlp")) want_cnn = 0;
        else if (!strcmp(argv[a], "--cnn")) want_mlp = 0;
        else if (!strcmp(argv[a], "--steps") && a + 1 < argc) steps = strtoull(argv[++a], NULL, 10);
        else if (!strcmp(argv[a], "--model") && a + 1 < argc) only = argv[++a];
        else if (!strcmp(argv[a], "--interleave") && a + 1 < argc) {
            block = strtoull(argv[++a], NULL, 10);
            if (block < 1 || block > 1000000) {
                fprintf(stderr, "dpsgd_overhead: --interleave needs a step count in [1, 1000000], got '%s'\n", argv[a]);
                return 2;
            }
        }
        else if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            printf("%s", usage);
            return 0;
        } else if (argv[a][0] == '-' && argv[a][1] == '-') {
            fprintf(stderr, "dpsgd_overhead: unknown flag %s\n%s", argv[a], usage);
            return 2;
        } else if (pos == 0) epochs = strtoull(argv[a], NULL, 10), pos++;
        else if (pos == 1) threads = atoi(argv[a]), pos++;
        else if (pos == 2) repeats = atoi(argv[a]), pos++;
    }
    if (epochs < 1) epochs = 1;
    if (repeats < 1 || repeats > MAX_REPEATS) repeats = 3;
    const char *specs[4] = {"mlp:784-128-64-32-10:gelu", "mlp:784-1000-10:relu", "mnist_cnn", "resnet5"};
    const int n_specs = only ? 1 : 4;
    if (only) specs[0] = only, want_mlp = want_cnn = 1;
    if (block) {
        printf("dpsgd_overhead --interleave: turns of %llu steps (the first of each not timed), %d rounds, %d "
               "threads, one process per model\n",
               (unsigned long long)block, repeats, threads);
        printf("%-28s %-16s %9s %7s %15s %9s %7s\n", "model", "algorithm", "CPU ms", "ratio", "(rounds)", "wall ms",
               "ratio");
        int rc = 0;
        for (int k = 0; k < n_specs; k++) {
            if ((k < 2 && !want_mlp) || (k >= 2 && !want_cnn)) continue;
            if (interleaved(specs[k], want, block, repeats, threads)) {
                printf("%-28s failed\n", specs[k]);
                rc = 1;
            }
        }
        return rc;
    }
    if (steps)
        printf("dpsgd_overhead: %llu steps per run scaled to an epoch, %d threads, %d interleaved rounds\n",
               (unsigned long long)steps, threads, repeats);
    else
        printf("dpsgd_overhead: epochs %llu, %d threads, %d interleaved rounds\n", (unsigned long long)epochs,
               threads, repeats);
    printf("%-28s %-16s %9s %7s %15s %7s %9s %7s %8s %7s\n", "model", "algorithm", "s/epoch", "ratio", "(rounds)",
           "CPU", "peak MB", "ratio", "train MB", "ratio");
    for (int k = 0; k < n_specs; k++) {
        if ((k < 2 && !want_mlp) || (k >= 2 && !want_cnn)) continue;
        static double v[N_MODES][MAX_REPEATS][4], ratio[N_MODES][MAX_REPEATS], cratio[N_MODES][MAX_REPEATS];
        int ok = 1;
        for (int r = 0; r < repeats && ok; r++)
            for (int m = 0; m < N_MODES && ok; m++) {
                if (!want[m] && m != M_SGD) continue;
                if (measure(specs[k], m, epochs, steps, threads, v[m][r])) ok = 0;
                ratio[m][r] = v[m][r][0] / v[M_SGD][r][0];
                cratio[m][r] = v[m][r][2] / v[M_SGD][r][2];
            }
        if (!ok) {
            printf("%-28s failed\n", specs[k]);
            continue;
        }
        double w0 = 0, m0 = v[M_SGD][0][1], t0 = v[M_SGD][0][3];
        for (int m = 0; m < N_MODES; m++) {
            if (!want[m] && m != M_SGD) continue;
            double w[MAX_REPEATS], rr[MAX_REPEATS], cr[MAX_REPEATS];
            for (int r = 0; r < repeats; r++) w[r] = v[m][r][0], rr[r] = ratio[m][r], cr[r] = cratio[m][r];
            double wm = bench_median(w, repeats), rm = bench_median(rr, repeats), cm = bench_median(cr, repeats);
            if (m == M_SGD) w0 = wm;
            char range[32];
            snprintf(range, sizeof range, "%.2f..%.2f", rr[0], rr[repeats - 1]); /* sorted by bench_median */
            printf("%-28s %-16s %9.3f %6.2fx %15s %6.2fx %9.1f %6.2fx %8.1f %6.2fx\n", specs[k], MODE_NAMES[m], wm, rm,
                   range, cm, v[m][0][1], v[m][0][1] / m0, v[m][0][3], v[m][0][3] / t0);
        }
        (void)w0;
        fflush(stdout);
    }
    return 0;
}
