/* Data-parallel scaling over MPI: examples per second of DP-SGD (MLP 784-128-64-32-10 GELU,
 * Poisson q = 256/60000 on synthetic 60000 x 784 data) with R = 1 and R = 2 ranks of one
 * thread each, and R = 1 with 2 threads (the OpenMP alternative on the same 2 cores), plus
 * the bytes communicated per step (all ranks' sends: the tree reduction of the shard sums
 * and the broadcast of the total, P floats each) next to the cost model's 2 4 P.
 * CPU time per step summed over ranks (and threads) is printed too: on a shared machine the
 * wall-clock numbers mostly measure the other jobs, the CPU time much less so.
 * Every configuration runs under the MPI launcher in one invocation of this program, so
 * the ratios are measured on the same machine at the same time.
 * Ranks yield their core while waiting (OMPI_MCA_mpi_yield_when_idle=1 unless set).
 * usage: mpi_scaling [steps=200]      (child mode, used internally: --child STEPS THREADS) */
#include <dptrain/comm.h>
#include <dptrain/train.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#define N_EX 60000
#define SPEC "mlp:784-128-64-32-10:gelu"


static int child(int argc, char **argv, uint64_t steps, int threads) {
    if (dpt_comm_init(&argc, &argv) != DPT_OK) return 1;
    int rank = dpt_comm_rank(), R = dpt_comm_size();
    dpt_dataset d;
    bench_mnist_like(&d, N_EX);
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = SPEC, c.epochs = 1000, c.max_steps = steps, c.threads = threads, c.seed = 1;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.1;
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = 256.0 / N_EX;
    dpt_dpsgd_config dc = dpt_dpsgd_config_defaults();
    dc.sigma = 1.0, dc.clip = 1.0;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    dpt_epoch_result r;
    if (dpt_algo_dpsgd_new(&dc, &a) != DPT_OK || dpt_trainer_new(&c, &d, NULL, a, &t) != DPT_OK) goto fail;
    uint64_t b0 = dpt_comm_bytes_sent();
    if (dpt_comm_barrier() != DPT_OK) goto fail;
    double t0 = dpt_now(), c0 = bench_cpu_now();
    if (dpt_trainer_run(t, &r) != DPT_OK) goto fail;
    double cpu = bench_cpu_now() - c0, cpu_total = cpu;
    if (dpt_comm_barrier() != DPT_OK) goto fail;
    double el = dpt_now() - t0;
    uint64_t sent = dpt_comm_bytes_sent() - b0, total = sent;
    if (rank != 0) {
        if (dpt_comm_send(&sent, sizeof sent, 0, 99) != DPT_OK) goto fail;
        if (dpt_comm_send(&cpu, sizeof cpu, 0, 98) != DPT_OK) goto fail;
    } else {
        for (int k = 1; k < R; k++) {
            uint64_t v = 0;
            if (dpt_comm_recv(&v, sizeof v, k, 99) != DPT_OK) goto fail;
            total += v;
            double cv = 0;
            if (dpt_comm_recv(&cv, sizeof cv, k, 98) != DPT_OK) goto fail;
            cpu_total += cv;
        }
        /* the exact examples of these steps: the same Poisson draws, replayed */
        dpt_sampler *s = NULL;
        uint32_t *idx = malloc(N_EX * sizeof *idx);
        uint64_t ex = 0;
        if (!idx || dpt_sampler_new(DPT_SAMPLER_POISSON, N_EX, 0, c.sample_rate, 0, c.seed, &s) != DPT_OK) goto fail;
        for (uint64_t i = 0; i < steps; i++) {
            size_t b = 0;
            dpt_sampler_next(s, idx, &b);
            ex += b;
        }
        dpt_sampler_free(s);
        free(idx);
        printf("RESULT %d %d %.1f %.1f %zu %.4f %.4f\n", R, threads, (double)ex / el, (double)total / (double)steps,
               dpt_trainer_model(t)->n_params, el / (double)steps * 1e3, cpu_total / (double)steps * 1e3);
    }
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
    dpt_comm_finalize();
    return 0;
fail:
    fprintf(stderr, "mpi_scaling (rank %d): %s\n", rank, dpt_last_error());
    dpt_comm_abort(1);
    return 1;
}

typedef struct {
    int ranks, threads;
    double ex_s, bytes, ms, cpu_ms;
    size_t P;
} result;

static int measure(const char *self, int ranks, int threads, uint64_t steps, result *out) {
    const char *mpiexec = getenv("DPT_MPIEXEC");
    if (!mpiexec || !*mpiexec) mpiexec = "mpiexec";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s -np %d -x OMP_NUM_THREADS=%d %s --child %" PRIu64 " %d", mpiexec, ranks, threads,
             self, steps, threads);
    FILE *p = popen(cmd, "r");
    if (!p) return 1;
    char line[512];
    int ok = 0;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "RESULT %d %d %lf %lf %zu %lf %lf", &out->ranks, &out->threads, &out->ex_s, &out->bytes,
                   &out->P, &out->ms, &out->cpu_ms) == 7)
            ok = 1;
    int rc = pclose(p);
    if (!ok || rc != 0) {
        fprintf(stderr, "mpi_scaling: '%s' failed (exit %d)\n", cmd, rc);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "--child")) return child(argc, argv, strtoull(argv[2], NULL, 10), atoi(argv[3]));
    uint64_t steps = argc > 1 ? strtoull(argv[1], NULL, 10) : 200;
    if (!dpt_comm_compiled()) {
        fprintf(stderr, "mpi_scaling: this build has no MPI (install libopenmpi-dev, re-run cmake)\n");
        return 1;
    }
    if (geteuid() == 0) { /* containers often run as root; Open MPI refuses that by default */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    }
    /* a waiting rank yields its core (default: busy polling, which on a shared 2-core
     * machine steals the core from the rank still computing); override in the environment */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    const int cfg[3][2] = {{1, 1}, {2, 1}, {1, 2}};
    result r[3];
    printf("DP-SGD %s, Poisson q = 256/%d, %" PRIu64 " steps per configuration, %s\n", SPEC, N_EX, steps,
           dpt_comm_library());
    printf("%-6s %-8s %12s %10s %14s %16s %18s\n", "ranks", "threads", "examples/s", "ms/step", "CPU ms/step",
           "bytes/step", "model 2(R-1)4P");
    for (int i = 0; i < 3; i++) {
        if (measure(self, cfg[i][0], cfg[i][1], steps, &r[i])) return 1;
        printf("%-6d %-8d %12.0f %10.2f %14.2f %16.0f %18.0f\n", r[i].ranks, r[i].threads, r[i].ex_s, r[i].ms,
               r[i].cpu_ms, r[i].bytes, 2.0 * (r[i].ranks - 1) * 4.0 * (double)r[i].P);
        fflush(stdout);
    }
    printf("speedup R=2 (1 thread each) over R=1 (1 thread): %.2fx;  R=1 with 2 threads over 1 thread: %.2fx\n",
           r[1].ex_s / r[0].ex_s, r[2].ex_s / r[0].ex_s);
    printf("CPU time per step, all ranks/threads, relative to R=1 x 1 thread: R=2 %.2fx, 2 threads %.2fx "
           "(1.00 = no overhead; load-independent unlike wall time, but includes time spent polling)\n",
           r[1].cpu_ms / r[0].cpu_ms, r[2].cpu_ms / r[0].cpu_ms);
    return 0;
}
