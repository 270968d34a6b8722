/* dptrain train --trace FILE (see train_trace.h). */
#include "train_trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_util.h"

struct cli_trace {
    FILE *f;
    char *path;
    dpt_trainer *t;
    const dpt_algo *algo;
    float *prev;        /* theta before the step [P] */
    int prev_valid;     /* prev holds the parameters the step started from */
    const char *unnoised; /* non-NULL: what in the file no epsilon covers (the header and a warning say it) */
    /* A run with a privacy ledger: the lines of steps the ledger on disk does not yet
     * record wait here, and reach the file only at the next publication (cli_trace_publish,
     * called from on_epoch, after the ledger was saved); lines of steps never recorded (a
     * run that failed) are dropped. Without a ledger the lines go straight to the file. */
    FILE *mem;
    char *mem_buf;
    size_t mem_len;
    uint64_t pending;   /* steps whose lines wait in mem */
};

/* What a trace of `algo` holds, for its header. Fail-safe: only the algorithms whose
 * direction (m->grad after the step) is known to be the noisy released gradient, and the
 * plainly non-private ones, are exempt; every other algorithm (DP-ULR in any mode, with its
 * unnoised module statistics; PDP-SGD and proportional noise, whose gradient is unnoised
 * and whose noise goes onto the parameters; noisy GD; any algorithm added later) gets the
 * warning. *unnoised is set to the warning's text or NULL. */
static const char *trace_privacy(const dpt_algo *algo, const char **unnoised) {
    static const char *const released[] = {"dpsgd", "dpmac"};
    static const char *const nonprivate[] = {"sgd", "mac", "ulr"};
    const char *name = algo && algo->name ? algo->name : "";
    *unnoised = NULL;
    for (size_t i = 0; i < sizeof released / sizeof *released; i++)
        if (algo && algo->is_private && !strcmp(name, released[i]))
            return "norms of the released parameters and of the noisy released gradient only (post-processing)";
    for (size_t i = 0; i < sizeof nonprivate / sizeof *nonprivate; i++)
        if (algo && !algo->is_private && !strcmp(name, nonprivate[i]))
            return "non-private run: no privacy claim to cover";
    if (!strncmp(name, "dpulr", 5))
        *unnoised = "holds unnoised statistics of the private batches (DP-ULR's s_l, lambda_min, lambda_max, rank, "
                    "clip counts and batch sizes) that NO epsilon covers: a debugging aid, never to be released "
                    "with the model";
    else
        *unnoised = "holds norms that are NOT post-processing of this algorithm's noisy release (the direction norm "
                    "is of the gradient before any noise the algorithm adds) and that NO epsilon covers: a "
                    "debugging aid, never to be released with the model";
    return *unnoised;
}

/* sum of squares in double, so norms of 1e5-1e6 floats keep their digits */
static double sumsq(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

static double sumsq_diff(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        s += d * d;
    }
    return s;
}

#define TRACE_HEAD "{\"trace\":\"dptrain per-step diagnostics\""

/* 1: path does not exist or is a trace this command wrote (its first line says so), or a
 * device or FIFO, which is written in place (reading a FIFO to check it would wait for a
 * writer forever) */
static int replaceable(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return errno == ENOENT;
    if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) return 1;
    if (!S_ISREG(sb.st_mode)) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT;
    char head[sizeof TRACE_HEAD] = "";
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    return n == 0 || (n == sizeof head - 1 && !memcmp(head, TRACE_HEAD, n));
}

int cli_trace_open(const char *path, int append, dpt_trainer *t, const dpt_algo *algo, cli_trace **out) {
    *out = NULL;
    if (!path || !*path) return cli_error("--trace: empty file name");
    /* never over (or onto) a file that is not a trace: it could be a run's ledger */
    if (!replaceable(path))
        return cli_error("--trace %s: the file exists and is not a dptrain trace: refusing to %s it (choose another "
                         "path)", path, append ? "append to" : "overwrite");
    cli_trace *tr = calloc(1, sizeof *tr);
    dpt_model *m = dpt_trainer_model(t);
    if (!tr || !(tr->path = strdup(path)) || !(tr->prev = malloc((m->n_params ? m->n_params : 1) * sizeof(float)))) {
        if (tr) free(tr->path);
        free(tr);
        return cli_failf("--trace: out of memory");
    }
    tr->f = fopen(path, append ? "a" : "w");
    if (!tr->f) {
        int r = cli_error("--trace %s: cannot open for writing: %s", path, strerror(errno));
        free(tr->prev);
        free(tr->path);
        free(tr);
        return r;
    }
    tr->t = t;
    tr->algo = algo;
    if (dpt_trainer_ledger(t) && !(tr->mem = open_memstream(&tr->mem_buf, &tr->mem_len))) {
        int r = cli_failf("--trace: out of memory");
        fclose(tr->f);
        free(tr->prev);
        free(tr->path);
        free(tr);
        return r;
    }
    const char *privacy = trace_privacy(algo, &tr->unnoised);
    memcpy(tr->prev, m->theta, m->n_params * sizeof(float));
    tr->prev_valid = 1;
    fprintf(tr->f, TRACE_HEAD ",\"algorithm\":\"%s\",\"parameters\":%zu,\"privacy\":\"%s\"}\n",
            algo && algo->name ? algo->name : "?", m->n_params, privacy);
    if (tr->unnoised) /* never silently: the run's stderr says it too */
        fprintf(stderr, "dptrain: warning: --trace %s (algorithm %s) %s\n", path,
                algo && algo->name ? algo->name : "?", tr->unnoised);
    *out = tr;
    return 0;
}

int cli_trace_step(cli_trace *tr, const dpt_step_info *in) {
    if (!tr) return 0;
    dpt_model *m = dpt_trainer_model(tr->t);
    const dpt_train_config *cfg = dpt_trainer_config(tr->t);
    /* in->epoch counts the epochs completed before this step's epoch: the one whose
     * learning rate the step used */
    double lr = dpt_schedule_lr(&cfg->schedule, cfg->optim.lr, in->epoch);
    FILE *f = tr->mem ? tr->mem : tr->f;
    fprintf(f, "{\"step\":%llu,\"epoch\":%llu,\"step_in_epoch\":%zu,\"lr\":%.9g,\"param_norm\":%.9g", (unsigned long long)in->step,
            (unsigned long long)in->epoch, in->step_in_epoch, lr, sqrt(sumsq(m->theta, m->n_params)));
    if (tr->prev_valid)
        fprintf(f, ",\"update_norm\":%.9g", sqrt(sumsq_diff(m->theta, tr->prev, m->n_params)));
    fprintf(f, ",\"direction_norm\":%.9g,\"layers\":[", sqrt(sumsq(m->grad, m->n_params)));
    int first = 1;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (!L->n_params) continue;
        const float *th = m->theta + L->param_offset, *g = m->grad + L->param_offset;
        fprintf(f, "%s{\"layer\":%zu,\"params\":%zu,\"param_norm\":%.9g,\"update_norm\":%.9g,\"direction_norm\":%.9g}",
                first ? "" : ",", l, L->n_params, sqrt(sumsq(th, L->n_params)),
                sqrt(sumsq_diff(th, tr->prev + L->param_offset, L->n_params)), sqrt(sumsq(g, L->n_params)));
        first = 0;
    }
    fprintf(f, "]");
    size_t nm = dpt_algo_dpulr_n_modules(tr->algo);
    if (nm) {
        fprintf(f, ",\"dpulr\":[");
        for (size_t l = 0; l < nm; l++) {
            dpt_dpulr_module_info mi;
            if (dpt_algo_dpulr_module_info(tr->algo, l, &mi) != DPT_OK) return cli_fail("--trace");
            fprintf(f, "%s{\"s\":%.9g,\"lambda_min\":%.9g,\"lambda_max\":%.9g,\"rank\":%zu,\"dim\":%zu,\"clipped\":%zu,"
                       "\"examples\":%zu}",
                    l ? "," : "", mi.s, mi.lambda_min, mi.lambda_max, mi.rank, mi.dim, mi.clipped, mi.examples);
        }
        fprintf(f, "]");
    }
    fprintf(f, "}\n");
    memcpy(tr->prev, m->theta, m->n_params * sizeof(float));
    tr->prev_valid = 1;
    if (tr->mem) {
        tr->pending++;
        if (ferror(f)) return cli_failf("--trace: out of memory");
        return 0;
    }
    fflush(f); /* whole lines for a reader watching a running (or crashed) run */
    if (ferror(f)) return cli_error("--trace %s: write failed: %s", tr->path, strerror(errno));
    return 0;
}

int cli_trace_publish(cli_trace *tr) {
    if (!tr || !tr->mem) return 0;
    if (fflush(tr->mem) != 0) return cli_failf("--trace: out of memory");
    if (tr->mem_len && fwrite(tr->mem_buf, 1, tr->mem_len, tr->f) != tr->mem_len)
        return cli_error("--trace %s: write failed: %s", tr->path, strerror(errno));
    fflush(tr->f);
    if (ferror(tr->f)) return cli_error("--trace %s: write failed: %s", tr->path, strerror(errno));
    rewind(tr->mem); /* the buffer is reused from its start; mem_len follows the position */
    fflush(tr->mem);
    tr->pending = 0;
    return 0;
}

int cli_trace_close(cli_trace *tr) {
    if (!tr) return 0;
    int r = 0;
    if (tr->mem) {
        if (tr->pending)
            fprintf(stderr, "dptrain: note: --trace %s: the last %llu step(s) are not in it: the run stopped before "
                            "its ledger recorded them\n", tr->path, (unsigned long long)tr->pending);
        fclose(tr->mem);
        free(tr->mem_buf);
    }
    if (fclose(tr->f) != 0) r = cli_error("--trace %s: write failed: %s", tr->path, strerror(errno));
    free(tr->prev);
    free(tr->path);
    free(tr);
    return r;
}
