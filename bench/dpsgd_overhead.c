/* DP-SGD overhead: seconds per epoch of non-private SGD and of DP-SGD (ghost norms +
 * weighted GEMM + ziggurat noise; and the secure discrete-Gaussian noise) for
 * MLP 784-128-64-32-10 (GELU) and MLP 784-1000-10 (ReLU) at (expected) batch 256 on
 * synthetic 60000 x 784 data, the ratio DP / non-private, and the peak memory (maxrss) of
 * each configuration, each run in its own forked child so the peaks do not mix.
 * Also the CPU-time ratio of the training (robust to a busy machine at threads=1).
 * usage: dpsgd_overhead [epochs=1] [threads=0] [repeats=3] [--no-secure] */
#include <dptrain/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"


static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* mode 0: sgd shuffle, 1: dpsgd fast noise, 2: dpsgd secure noise */
static int child(const char *spec, int mode, uint64_t epochs, int threads, int fd) {
    dpt_dataset d;
    bench_mnist_like(&d, 60000);
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec, c.epochs = epochs, c.threads = threads, c.quiet = 1, c.batch_size = 256;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.1;
    dpt_algo *a = NULL;
    if (mode == 0) {
        dpt_algo_sgd_new(&a);
    } else {
        c.sampler = DPT_SAMPLER_POISSON;
        c.sample_rate = 256.0 / 60000.0;
        dpt_dpsgd_config dc = dpt_dpsgd_config_defaults();
        dc.sigma = 1.0, dc.clip = 1.0, dc.secure = mode == 2;
        c.secure = mode == 2;
        dpt_algo_dpsgd_new(&dc, &a);
    }
    dpt_trainer *t;
    if (dpt_trainer_new(&c, &d, NULL, a, &t) != DPT_OK) {
        fprintf(stderr, "%s\n", dpt_last_error());
        return 1;
    }
    dpt_epoch_result r;
    double cpu0 = cpu_seconds();
    if (dpt_trainer_run(t, &r) != DPT_OK) {
        fprintf(stderr, "%s\n", dpt_last_error());
        return 1;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double out[3] = {r.wall_s / (double)epochs, ru.ru_maxrss / 1024.0, (cpu_seconds() - cpu0) / (double)epochs};
    if (write(fd, out, sizeof out) != (ssize_t)sizeof out) return 1;
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
    return 0;
}

/* sec: training wall time per epoch; mb: peak RSS; cpu (may be NULL): CPU seconds per epoch
 * of the training (all threads; less sensitive than wall time to other processes). */
static int measure(const char *spec, int mode, uint64_t epochs, int threads, double *sec, double *mb, double *cpu) {
    int p[2];
    if (pipe(p)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        _exit(child(spec, mode, epochs, threads, p[1]));
    }
    close(p[1]);
    double out[3] = {0, 0, 0};
    ssize_t n = read(p[0], out, sizeof out);
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    if (n != (ssize_t)sizeof out || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    *sec = out[0], *mb = out[1];
    if (cpu) *cpu = out[2];
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* On a shared machine one pair of runs can land on a busy moment: the non-private and
 * DP-SGD runs alternate `repeats` times and the ratio is the median of the per-pair
 * ratios (each pair ran back to back); the secure sampler runs once (it is 10x+ slower). */
int main(int argc, char **argv) {
    uint64_t epochs = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    int secure = !(argc > 4 && !strcmp(argv[4], "--no-secure"));
    if (repeats < 1 || repeats > 64) repeats = 3;
    const char *specs[2] = {"mlp:784-128-64-32-10:gelu", "mlp:784-1000-10:relu"};
    printf("usage: dpsgd_overhead [epochs=1] [threads=0] [repeats=3] [--no-secure]; epochs %llu, %d repeats\n",
           (unsigned long long)epochs, repeats);
    printf("%-28s %-16s %10s %8s %10s %8s\n", "model", "algorithm", "s/epoch", "ratio", "peak MB", "ratio");
    for (int k = 0; k < 2; k++) {
        double s0[64], s1[64], ratio[64], cratio[64], c0, c1, m0 = 0, m1 = 0;
        int ok = 1;
        for (int r = 0; r < repeats && ok; r++) {
            if (measure(specs[k], 0, epochs, threads, &s0[r], &m0, &c0) ||
                measure(specs[k], 1, epochs, threads, &s1[r], &m1, &c1))
                ok = 0;
            else
                ratio[r] = s1[r] / s0[r], cratio[r] = c1 / c0;
        }
        if (!ok) {
            printf("%-28s failed\n", specs[k]);
            continue;
        }
        qsort(s0, (size_t)repeats, sizeof(double), cmp_d);
        qsort(s1, (size_t)repeats, sizeof(double), cmp_d);
        qsort(ratio, (size_t)repeats, sizeof(double), cmp_d);
        qsort(cratio, (size_t)repeats, sizeof(double), cmp_d);
        double med0 = s0[repeats / 2], med1 = s1[repeats / 2];
        printf("%-28s %-16s %10.3f %7.2fx %10.1f %7.2fx\n", specs[k], "non-private", med0, 1.0, m0, 1.0);
        printf("%-28s %-16s %10.3f %7.2fx %10.1f %7.2fx   (per-pair ratios %.2f..%.2f; CPU-time ratio %.2f)\n", specs[k], "DP-SGD", med1, ratio[repeats / 2], m1, m1 / m0, ratio[0],
               ratio[repeats - 1], cratio[repeats / 2]);
        fflush(stdout);
        if (secure) {
            double s, mb;
            if (measure(specs[k], 2, epochs, threads, &s, &mb, NULL))
                printf("%-28s %-16s failed\n", specs[k], "DP-SGD --secure");
            else
                printf("%-28s %-16s %10.3f %7.2fx %10.1f %7.2fx   (vs the median non-private)\n", specs[k],
                       "DP-SGD --secure", s, s / med0, mb, mb / m0);
            fflush(stdout);
        }
    }
    return 0;
}
