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
 * usage: dpsgd_overhead [epochs=1] [threads=0] [repeats=3] [--no-secure] [--mlp|--cnn] */
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
    if (!strcmp(spec, "resnet5"))
        bench_images_like(&d, 50000, 3, 32, 32); /* CIFAR-10-shaped */
    else
        bench_mnist_like(&d, 60000);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double data_mb = ru.ru_maxrss / 1024.0;
    const double n = (double)d.n;
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec, c.epochs = epochs, c.threads = threads, c.batch_size = 256;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.1;
    dpt_algo *a = NULL;
    if (mode == 0) {
        dpt_algo_sgd_new(&a);
    } else {
        c.sampler = DPT_SAMPLER_POISSON;
        c.sample_rate = 256.0 / n;
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
    getrusage(RUSAGE_SELF, &ru);
    double out[4] = {r.wall_s / (double)epochs, ru.ru_maxrss / 1024.0, (cpu_seconds() - cpu0) / (double)epochs,
                     ru.ru_maxrss / 1024.0 - data_mb};
    if (write(fd, out, sizeof out) != (ssize_t)sizeof out) return 1;
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
    return 0;
}

/* sec: training wall time per epoch; mb: peak RSS; cpu (may be NULL): CPU seconds per epoch
 * of the training (all threads; less sensitive than wall time to other processes);
 * tmb (may be NULL): peak RSS above the data set. */
static int measure(const char *spec, int mode, uint64_t epochs, int threads, double *sec, double *mb, double *cpu,
                   double *tmb) {
    int p[2];
    if (pipe(p)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        _exit(child(spec, mode, epochs, threads, p[1]));
    }
    close(p[1]);
    double out[4] = {0, 0, 0, 0};
    ssize_t n = read(p[0], out, sizeof out);
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    if (n != (ssize_t)sizeof out || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    *sec = out[0], *mb = out[1];
    if (cpu) *cpu = out[2];
    if (tmb) *tmb = out[3];
    return 0;
}

/* On a shared machine one pair of runs can land on a busy moment: the non-private and
 * DP-SGD runs alternate `repeats` times and the ratio is the median of the per-pair
 * ratios (each pair ran back to back); the secure sampler runs once (it is 10x+ slower). */
int main(int argc, char **argv) {
    /* positional [epochs] [threads] [repeats], then flags in any order */
    int secure = 1, want_mlp = 1, want_cnn = 1, pos = 0;
    uint64_t epochs = 1;
    int threads = 0, repeats = 3;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--no-secure")) secure = 0;
        else if (!strcmp(argv[a], "--mlp")) want_cnn = 0;
        else if (!strcmp(argv[a], "--cnn")) want_mlp = 0;
        else if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            printf("usage: dpsgd_overhead [epochs=1] [threads=0] [repeats=3] [--no-secure] [--mlp|--cnn]\n"
                   "  DP-SGD / non-private time and peak memory per epoch, MLPs and CNNs (batch 256)\n");
            return 0;
        } else if (argv[a][0] == '-' && argv[a][1] == '-') {
            fprintf(stderr, "dpsgd_overhead: unknown flag %s\n", argv[a]);
            return 2;
        } else if (pos == 0) epochs = strtoull(argv[a], NULL, 10), pos++;
        else if (pos == 1) threads = atoi(argv[a]), pos++;
        else if (pos == 2) repeats = atoi(argv[a]), pos++;
    }
    if (epochs < 1) epochs = 1;
    if (repeats < 1 || repeats > 64) repeats = 3;
    const char *specs[4] = {"mlp:784-128-64-32-10:gelu", "mlp:784-1000-10:relu", "mnist_cnn", "resnet5"};
    printf("usage: dpsgd_overhead [epochs=1] [threads=0] [repeats=3] [--no-secure] [--mlp|--cnn]; epochs %llu, "
           "%d threads, %d repeats\n",
           (unsigned long long)epochs, threads, repeats);
    printf("%-28s %-16s %10s %8s %10s %8s %9s %8s\n", "model", "algorithm", "s/epoch", "ratio", "peak MB", "ratio",
           "train MB", "ratio");
    for (int k = 0; k < 4; k++) {
        if ((k < 2 && !want_mlp) || (k >= 2 && !want_cnn)) continue;
        double s0[64], s1[64], ratio[64], cratio[64], c0, c1, m0 = 0, m1 = 0, t0 = 0, t1 = 0;
        int ok = 1;
        for (int r = 0; r < repeats && ok; r++) {
            if (measure(specs[k], 0, epochs, threads, &s0[r], &m0, &c0, &t0) ||
                measure(specs[k], 1, epochs, threads, &s1[r], &m1, &c1, &t1))
                ok = 0;
            else
                ratio[r] = s1[r] / s0[r], cratio[r] = c1 / c0;
        }
        if (!ok) {
            printf("%-28s failed\n", specs[k]);
            continue;
        }
        qsort(s0, (size_t)repeats, sizeof(double), bench_cmp_double);
        qsort(s1, (size_t)repeats, sizeof(double), bench_cmp_double);
        qsort(ratio, (size_t)repeats, sizeof(double), bench_cmp_double);
        qsort(cratio, (size_t)repeats, sizeof(double), bench_cmp_double);
        double med0 = s0[repeats / 2], med1 = s1[repeats / 2];
        printf("%-28s %-16s %10.3f %7.2fx %10.1f %7.2fx %9.1f %7.2fx\n", specs[k], "non-private", med0, 1.0, m0, 1.0,
               t0, 1.0);
        printf("%-28s %-16s %10.3f %7.2fx %10.1f %7.2fx %9.1f %7.2fx   (per-pair ratios %.2f..%.2f; CPU-time ratio "
               "%.2f)\n",
               specs[k], "DP-SGD", med1, ratio[repeats / 2], m1, m1 / m0, t1, t1 / t0, ratio[0], ratio[repeats - 1],
               cratio[repeats / 2]);
        fflush(stdout);
        if (secure) {
            double s, mb, tmb;
            if (measure(specs[k], 2, epochs, threads, &s, &mb, NULL, &tmb))
                printf("%-28s %-16s failed\n", specs[k], "DP-SGD --secure");
            else
                printf("%-28s %-16s %10.3f %7.2fx %10.1f %7.2fx %9.1f %7.2fx   (vs the median non-private)\n",
                       specs[k], "DP-SGD --secure", s, s / med0, mb, mb / m0, tmb, tmb / t0);
            fflush(stdout);
        }
    }
    return 0;
}
