/* Transformer DP-SGD step cost and memory (issue 39 item 6): for each named transformer
 * (gpt_tiny, bert_tiny, vit_mnist, vit_cifar; src/nn/spec.c) at batch B on random inputs,
 *   non-private  forward, loss, backward, summed gradient (DPT_GRAD_SUM)
 *   DP-SGD       the same forward, loss and backward, per-example squared norms by each
 *                layer's chosen path (SQNORM: position-wise Linear by Gram (ghost) or
 *                materialized per layer, the embedding by token co-occurrence, LayerNorm
 *                and toseq from their O(T D) numbers, the patch convolution by its own
 *                choice), clip factors, the clipped sum (WEIGHTED GEMMs), Gaussian noise
 * Time: one process per model, both steps on the same model and batch, alternating: each
 * round runs S steps of one then S of the other (the order alternates between rounds), so a
 * change of load on the shared machine falls on both alike; printed are the medians over
 * the rounds of the ms per step (CPU time of the process and wall time) and of the ratio
 * DP / non-private within each round.
 * Memory: peak resident set (getrusage ru_maxrss) of a fresh forked child per model and
 * step kind that builds the model for batch B, fills the batch and runs 3 steps of that
 * kind only, so the peaks do not mix. "peak MB" is the child's whole maxrss (program,
 * libraries, BLAS buffers, batch, model, what the steps touch); "model MB" is that minus
 * the child's resident size at the fork, before it builds anything (the parent forks
 * before it builds its own model): the memory the model and its steps take. The model
 * allocates the same buffers for both kinds (activations, cotangents and one shared layer
 * scratch for batch B); DP-SGD adds 2 B floats (squared norms, factors) and uses more of
 * the scratch (the weighted cotangent [B T, K]), which this counts if it is touched.
 * Writes a CSV (--out) with one row per model and step kind.
 * usage: xformer_step [--batch B] [--rounds R] [--steps S] [--threads N] [--models a,b]
 *                     [--out FILE] [--quick] */
#include <dptrain/nn.h>
#include <dptrain/privacy.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "nn/nn_internal.h"

enum { K_SGD = 0, K_DP, N_KINDS };
static const char *const KIND_NAMES[N_KINDS] = {"non-private", "DP-SGD"};

#define MAX_ROUNDS 64
#define MAX_MODELS 8

/* One model with a batch of B inputs and what a step needs: x [B, in_dim] (token ids as
 * floats for the text models), labels y [B] or token targets tt [B, T] (gpt_tiny: the
 * next tokens), dout [B, out_dim], per-example loss, squared norms and clip factors [B]. */
typedef struct {
    dpt_model *m;
    float *x, *dout, *loss, *sq, *c, *tt;
    int32_t *y;
    size_t B, T, V; /* T, V: token LM (gpt_tiny), else V = 0 */
    int threads;
    dpt_rng noise;
} ctx;

static void ctx_free(ctx *k) {
    dpt_free(k->x), dpt_free(k->dout), dpt_free(k->loss), dpt_free(k->sq), dpt_free(k->c), dpt_free(k->tt);
    dpt_free(k->y);
    dpt_rng_free(&k->noise);
    dpt_model_free(k->m);
    memset(k, 0, sizeof *k);
}

/* Builds spec for batch B, initializes it and fills a random batch: token ids uniform in
 * [0, V) for the text models, N(0, 1) pixels for the ViTs. */
static int ctx_init(ctx *k, const char *spec, size_t B, int threads) {
    memset(k, 0, sizeof *k);
    k->B = B, k->threads = threads;
    if (dpt_model_new(spec, B, threads, &k->m)) {
        fprintf(stderr, "xformer_step: %s\n", dpt_last_error());
        return 1;
    }
    dpt_model *m = k->m;
    dpt_rng r;
    dpt_rng_init(&r, 1, DPT_STREAM_INIT);
    const dpt_status st = dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &r);
    dpt_rng_free(&r);
    if (st != DPT_OK) {
        fprintf(stderr, "xformer_step: %s\n", dpt_last_error());
        return 1;
    }
    const dpt_layer *L0 = &m->layers[0], *Ln = &m->layers[m->n_layers - 1];
    const int text = L0->kind == DPT_LAYER_EMBEDDING;
    size_t V = 0;
    if (text) {
        const size_t T = L0->in_shape[1];
        V = (size_t)L0->k; /* the embedding's vocabulary */
        if (Ln->kind == DPT_LAYER_SEQLINEAR && Ln->out_shape[1] == T) k->T = T, k->V = Ln->out_shape[2];
    }
    dpt_rng_init(&k->noise, 2, DPT_STREAM_NOISE);
    k->x = dpt_alloc(B * m->in_dim, sizeof(float), "x");
    k->dout = dpt_alloc(B * m->out_dim, sizeof(float), "dout");
    k->loss = dpt_alloc(B, sizeof(float), "loss");
    k->sq = dpt_alloc(B, sizeof(float), "sq");
    k->c = dpt_alloc(B, sizeof(float), "c");
    k->y = dpt_alloc(B, sizeof(int32_t), "y");
    k->tt = k->V ? dpt_alloc(B * k->T, sizeof(float), "token targets") : NULL;
    if (!k->x || !k->dout || !k->loss || !k->sq || !k->c || !k->y || (k->V && !k->tt)) {
        fprintf(stderr, "xformer_step: %s\n", dpt_last_error());
        return 1;
    }
    dpt_rng_init(&r, 3, DPT_STREAM_AUX);
    for (size_t j = 0; j < B * m->in_dim; j++)
        k->x[j] = text ? (float)(dpt_rng_u64(&r) % V) : (float)dpt_rng_gauss_ref(&r);
    for (size_t i = 0; i < B; i++) k->y[i] = (int32_t)(i % (Ln->out_dim < 10 ? Ln->out_dim : 10));
    if (k->V) /* next-token targets: the input shifted by one, a random last one */
        for (size_t i = 0; i < B; i++)
            for (size_t t = 0; t < k->T; t++)
                k->tt[i * k->T + t] = t + 1 < k->T ? k->x[i * k->T + t + 1] : (float)(dpt_rng_u64(&r) % k->V);
    dpt_rng_free(&r);
    return 0;
}

/* One step of `kind`; 0 on success */
static int step(ctx *k, int kind) {
    dpt_model *m = k->m;
    const size_t B = k->B;
    if (dpt_model_forward(m, k->x, B)) return 1;
    const dpt_status ls = k->V ? dpt_loss_tokens(dpt_model_output(m), B, k->T, k->V, k->tt, k->loss, k->dout)
                               : dpt_loss(DPT_LOSS_SOFTMAX_CE, dpt_model_output(m), B, m->out_dim, k->y, NULL,
                                          k->loss, k->dout);
    if (ls || dpt_model_backward(m, k->dout, B)) return 1;
    if (kind == K_SGD) return dpt_model_param_grad(m, B, DPT_GRAD_SUM, NULL, m->grad, 0, 0) != DPT_OK;
    /* ||g_i||^2 by each layer's path, c_i = min(1, C / ||g_i||), grad = sum_i c_i g_i + N(0, sigma^2 C^2) */
    if (dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, k->sq, 0, 0) ||
        dpt_privacy_clip_factors(k->sq, B, 1.0, k->c) ||
        dpt_model_param_grad(m, B, DPT_GRAD_WEIGHTED, k->c, m->grad, 0, 0))
        return 1;
    return dpt_privacy_noise_add(&k->noise, m->grad, m->n_params, 1.0, 1.0, k->threads) != DPT_OK;
}

/* ==== memory: one forked child per model and kind ==== */

/* out: {peak MB, MB at the start of the child} of 3 steps of kind in a fresh process */
static int measure_memory(const char *spec, int kind, size_t B, int threads, double out[2]) {
    int p[2];
    if (pipe(p)) return -1;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(p[0]);
        ctx k;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru); /* the parent's resident pages at the fork (it holds no model then) */
        double v[2] = {0, ru.ru_maxrss / 1024.0};
        if (ctx_init(&k, spec, B, threads)) _exit(1);
        for (int s = 0; s < 3; s++)
            if (step(&k, kind)) {
                fprintf(stderr, "xformer_step: %s\n", dpt_last_error());
                _exit(1);
            }
        getrusage(RUSAGE_SELF, &ru);
        v[0] = ru.ru_maxrss / 1024.0;
        ctx_free(&k);
        _exit(write(p[1], v, sizeof v) == (ssize_t)sizeof v ? 0 : 1);
    }
    close(p[1]);
    const ssize_t n = read(p[0], out, 2 * sizeof(double));
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return n == (ssize_t)(2 * sizeof(double)) && WIFEXITED(st) && !WEXITSTATUS(st) ? 0 : -1;
}

/* ==== time: both kinds in one process, alternating ==== */

typedef struct {
    double cpu_ms, wall_ms, lo_ms, hi_ms; /* medians over rounds (CPU), CPU range */
    double ratio_cpu, ratio_wall, rlo, rhi; /* DP / non-private: medians of the within-round ratios, range */
    double peak_mb, step_mb;
} result;

static int measure_time(ctx *k, int rounds, int steps, result res[N_KINDS]) {
    static double cpu[N_KINDS][MAX_ROUNDS], wall[N_KINDS][MAX_ROUNDS];
    for (int kind = 0; kind < N_KINDS; kind++)
        if (step(k, kind)) return 1; /* warm-up: first touches, BLAS buffers */
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < N_KINDS; j++) {
            const int kind = (r % 2) ? N_KINDS - 1 - j : j;
            const double c0 = bench_cpu_now(), w0 = bench_wall_now();
            for (int s = 0; s < steps; s++)
                if (step(k, kind)) return 1;
            cpu[kind][r] = (bench_cpu_now() - c0) / steps;
            wall[kind][r] = (bench_wall_now() - w0) / steps;
        }
    double rc[MAX_ROUNDS], rw[MAX_ROUNDS], v[MAX_ROUNDS];
    for (int kind = 0; kind < N_KINDS; kind++) {
        result *o = &res[kind];
        for (int r = 0; r < rounds; r++) {
            rc[r] = cpu[kind][r] / cpu[K_SGD][r];
            rw[r] = wall[kind][r] / wall[K_SGD][r];
        }
        o->ratio_cpu = bench_median(rc, rounds);
        o->rlo = rc[0], o->rhi = rc[rounds - 1]; /* sorted by bench_median */
        o->ratio_wall = bench_median(rw, rounds);
        memcpy(v, cpu[kind], rounds * sizeof *v);
        o->cpu_ms = 1e3 * bench_median(v, rounds);
        o->lo_ms = 1e3 * v[0], o->hi_ms = 1e3 * v[rounds - 1];
        memcpy(v, wall[kind], rounds * sizeof *v);
        o->wall_ms = 1e3 * bench_median(v, rounds);
    }
    return 0;
}

/* "plin: 5 ghost / 5 materialized, conv1 ghost" for the header line of a model */
static void paths(const dpt_model *m, char *buf, size_t cap) {
    size_t ghost = 0, mat = 0, w = 0;
    buf[0] = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (L->kind == DPT_LAYER_SEQLINEAR) L->ghost ? ghost++ : mat++;
    }
    w += (size_t)snprintf(buf + w, cap - w, "plin %zu Gram / %zu materialized", ghost, mat);
    for (size_t l = 0; l < m->n_layers && w < cap; l++) {
        const dpt_layer *L = &m->layers[l];
        if (L->kind == DPT_LAYER_CONV2D)
            w += (size_t)snprintf(buf + w, cap - w, ", %s %s", L->name, L->ghost ? "Gram" : "materialized");
    }
}

int main(int argc, char **argv) {
    size_t B = 64;
    int rounds = 5, steps = 2, threads = 1, quick = 0, n_models = 0;
    const char *out = "xformer_step.csv", *models_arg = NULL;
    const char *usage = "usage: xformer_step [--batch B=64] [--rounds R=5] [--steps S=2] [--threads N=1] "
                        "[--models a,b,...] [--out FILE=xformer_step.csv] [--quick]\n"
                        "  DP-SGD / non-private time per step (alternating rounds, medians) and peak memory (maxrss\n"
                        "  of a forked child per model and step kind) of the transformers gpt_tiny, bert_tiny,\n"
                        "  vit_mnist, vit_cifar (any model spec in --models); --quick: a smoke run of tiny\n"
                        "  configurations (batch 4, 2 rounds of 1 step)\n";
    for (int a = 1; a < argc; a++) {
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(argv[a], "--batch") && v) B = (size_t)strtoull(argv[++a], NULL, 10);
        else if (!strcmp(argv[a], "--rounds") && v) rounds = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--steps") && v) steps = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--threads") && v) threads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--models") && v) models_arg = argv[++a];
        else if (!strcmp(argv[a], "--out") && v) out = argv[++a];
        else if (!strcmp(argv[a], "--quick")) quick = 1;
        else if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            printf("%s", usage);
            return 0;
        } else {
            fprintf(stderr, "xformer_step: unknown or incomplete option %s\n%s", argv[a], usage);
            return 2;
        }
    }
    const char *defaults = "gpt_tiny,bert_tiny,vit_mnist,vit_cifar";
    if (quick) {
        B = 4, rounds = 2, steps = 1;
        if (!models_arg) models_arg = "gpt_tiny:t8:v16,bert_tiny:t8:v16,vit_mnist";
    }
    if (B < 1 || B > 4096 || rounds < 1 || rounds > MAX_ROUNDS || steps < 1 || threads < 1) {
        fprintf(stderr, "xformer_step: need 1 <= batch <= 4096, 1 <= rounds <= %d, steps >= 1, threads >= 1\n%s",
                MAX_ROUNDS, usage);
        return 2;
    }
    char list[512], *models[MAX_MODELS];
    snprintf(list, sizeof list, "%s", models_arg ? models_arg : defaults);
    for (char *s = strtok(list, ","); s && n_models < MAX_MODELS; s = strtok(NULL, ",")) models[n_models++] = s;
    dpt_threads_set_blas(threads);
    FILE *csv = fopen(out, "w");
    if (!csv) {
        fprintf(stderr, "xformer_step: cannot write %s\n", out);
        return 1;
    }
    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    printf("xformer_step: batch %zu, %d rounds of %d steps per kind, %d thread%s, load average %.2f %.2f %.2f\n", B,
           rounds, steps, threads, threads == 1 ? "" : "s", load[0], load[1], load[2]);
    printf("  time: medians over the rounds (CPU ms of the process; wall ms); ratio = DP-SGD / non-private within a "
           "round\n  memory: maxrss of a forked child per model and kind (3 steps); model MB = above the "
           "child's size at the fork\n");
    printf("%-16s %-12s %9s %15s %9s %7s %13s %7s %8s %7s %8s %7s\n", "model", "step", "CPU ms", "(range)",
           "wall ms", "ratio", "(rounds)", "wall", "peak MB", "ratio", "model MB", "ratio");
    fprintf(csv, "model,spec_params,batch,threads,rounds,steps_per_round,step,cpu_ms_median,cpu_ms_min,cpu_ms_max,"
                 "wall_ms_median,ratio_cpu_median,ratio_cpu_min,ratio_cpu_max,ratio_wall_median,peak_mb,model_mb,"
                 "peak_ratio,model_ratio,load_1min_start\n");
    int rc = 0;
    for (int s = 0; s < n_models; s++) {
        result res[N_KINDS];
        ctx k;
        if (ctx_init(&k, models[s], B, threads)) {
            rc = 1;
            continue;
        }
        char pth[256];
        paths(k.m, pth, sizeof pth);
        const size_t P = k.m->n_params;
        printf("%s: %zu parameters, %s\n", models[s], P, pth);
        fflush(stdout);
        ctx_free(&k);
        int bad = 0;
        for (int kind = 0; kind < N_KINDS && !bad; kind++) { /* forked while this process holds no model */
            double mm[2];
            if (measure_memory(models[s], kind, B, threads, mm)) bad = 1;
            res[kind].peak_mb = mm[0];
            res[kind].step_mb = mm[0] - mm[1];
        }
        if (!bad && ctx_init(&k, models[s], B, threads)) bad = 1;
        if (!bad && measure_time(&k, rounds, steps, res)) {
            fprintf(stderr, "xformer_step: %s: %s\n", models[s], dpt_last_error());
            bad = 1;
        }
        ctx_free(&k);
        if (bad) {
            printf("%-16s failed\n", models[s]);
            rc = 1;
            continue;
        }
        for (int kind = 0; kind < N_KINDS; kind++) {
            const result *o = &res[kind];
            char range[40], rr[40];
            snprintf(range, sizeof range, "%.1f..%.1f", o->lo_ms, o->hi_ms);
            snprintf(rr, sizeof rr, "%.2f..%.2f", o->rlo, o->rhi);
            const double pr = o->peak_mb / res[K_SGD].peak_mb;
            const double mr = o->step_mb / res[K_SGD].step_mb;
            printf("%-16s %-12s %9.2f %15s %9.2f %6.2fx %13s %6.2fx %8.1f %6.2fx %8.1f %6.2fx\n", models[s],
                   KIND_NAMES[kind], o->cpu_ms, range, o->wall_ms, o->ratio_cpu, rr, o->ratio_wall, o->peak_mb, pr,
                   o->step_mb, mr);
            fprintf(csv, "%s,%zu,%zu,%d,%d,%d,%s,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f,%.1f,%.1f,%.4f,%.4f,%.2f\n",
                    models[s], P, B, threads, rounds, steps, KIND_NAMES[kind], o->cpu_ms, o->lo_ms, o->hi_ms,
                    o->wall_ms, o->ratio_cpu, o->rlo, o->rhi, o->ratio_wall, o->peak_mb, o->step_mb, pr, mr, load[0]);
        }
        const result *d = &res[K_DP];
        printf("%-16s targets: time %.2fx <= 1.3x %s, peak memory %.2fx <= 1.2x %s\n", models[s], d->ratio_cpu,
               d->ratio_cpu <= 1.3 ? "met" : "NOT met", d->peak_mb / res[K_SGD].peak_mb,
               d->peak_mb / res[K_SGD].peak_mb <= 1.2 ? "met" : "NOT met");
        fflush(stdout);
    }
    getloadavg(load, 3);
    printf("load average at end %.2f %.2f %.2f; wrote %s\n", load[0], load[1], load[2], out);
    if (fclose(csv)) {
        fprintf(stderr, "xformer_step: cannot write %s\n", out);
        return 1;
    }
    return rc;
}
