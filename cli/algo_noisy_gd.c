/* --algo noisy-gd: noisy full-batch gradient descent (Langevin training, Eq. 4 of Ye et al.,
 * "Initialization Matters") with the KL estimator over every candidate neighbour. It has
 * NO (epsilon, delta) guarantee: what it reports is an estimate of a KL divergence along
 * the run's own trajectory, labelled as such everywhere (stdout, stderr, metrics). */
#include <cjson/cJSON.h>
#include <dptrain/comm.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_algos.h"

static double eta = 0.01, lsigma = 0.0;
static const char *neighbours = "all", *constant = "exact";
static int linearized = 0, lsigma_seen = 0;
static long replace_k = 1, runs = 1;

static struct {
    dpt_noisy_gd_config cfg;
    dpt_algo *algo;        /* run 1's, owned by the trainer; valid until the report */
    dpt_train_config tcfg; /* run 1's settings (--runs > 1: copied for runs 2..R) */
    char dir1[1024];       /* --runs > 1: OUT/run1 */
} S;

static cli_option NGD_OPTS[] = {
    {"--eta", CLI_DOUBLE, &eta, "E", "step size (> 0); noisy-gd runs plain SGD with this lr", NULL},
    {"--langevin-sigma", CLI_DOUBLE, &lsigma, "S",
     "noise scale sigma (> 0; required): each step adds N(0, 2 eta sigma^2) per parameter", &lsigma_seen},
    {"--linearized", CLI_FLAG, &linearized, NULL, "train the linearization f(W0) + J(W0)(W - W0) (Eq. 3)", NULL},
    {"--neighbours", CLI_STR, &neighbours, "SET",
     "KL estimate over all | none | a list of remove,add,replace (add/replace: test records)", NULL},
    {"--kl-constant", CLI_STR, &constant, "C", "exact (eta/(4 sigma^2)) | paper (eta/(2 sigma^2), 2x larger)", NULL},
    {"--replace-candidates", CLI_LONG, &replace_k, "K", "held-out records tried as replacements (largest "
                                                        "gradient norm at W0)", NULL},
    {"--runs", CLI_LONG, &runs, "R", "independent runs; run k uses seed --seed + k - 1 (fresh init and "
                                     "noise) and writes OUT/run<k>/, OUT/metrics.jsonl gets the mean and sample std over runs",
     NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

/* "all" | "none" | a comma list of remove, add, replace */
static int parse_neighbours(const char *s, int *out) {
    if (!strcmp(s, "all")) {
        *out = DPT_KL_ALL;
        return 0;
    }
    if (!strcmp(s, "none")) {
        *out = 0;
        return 0;
    }
    *out = 0;
    const char *p = s;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len == 6 && !strncmp(p, "remove", 6)) *out |= DPT_KL_REMOVE;
        else if (len == 3 && !strncmp(p, "add", 3)) *out |= DPT_KL_ADD;
        else if (len == 7 && !strncmp(p, "replace", 7)) *out |= DPT_KL_REPLACE;
        else return cli_error("--neighbours: expected all|none or a comma list of remove,add,replace, got '%s'", s);
        p += len;
        if (*p == ',') p++;
    }
    return 0;
}

static int ngd_check(cli_algo_ctx *c) {
    if (c->sampler_seen && strcmp(c->sampler, "full"))
        return cli_error("--sampler %s: --algo noisy-gd is full-batch gradient descent (--sampler full)", c->sampler);
    c->sampler = "full";
    if (c->resume)
        return cli_error("--resume: --algo noisy-gd does not checkpoint its KL sums and W0; start a fresh run");
    if (!(eta > 0) || !isfinite(eta)) return cli_error("--eta: the step size must be > 0, got %g", eta);
    if (!lsigma_seen) return cli_error("--algo noisy-gd needs --langevin-sigma (the noise scale sigma > 0)");
    if (!(lsigma > 0) || !isfinite(lsigma))
        return cli_error("--langevin-sigma: must be > 0, got %g (for noiseless training use --algo sgd)", lsigma);
    memset(&S, 0, sizeof S);
    S.cfg = dpt_noisy_gd_config_defaults();
    if (parse_neighbours(neighbours, &S.cfg.kl)) return 2;
    if (!strcmp(constant, "exact")) S.cfg.constant = DPT_KL_EXACT;
    else if (!strcmp(constant, "paper")) S.cfg.constant = DPT_KL_PAPER;
    else return cli_error("--kl-constant: expected exact|paper, got '%s'", constant);
    if (replace_k < 1) return cli_error("--replace-candidates: must be >= 1, got %ld", replace_k);
    if (runs < 1 || runs > 1000) return cli_error("--runs: must be in [1, 1000], got %ld", runs);
    if (runs > 1 && dpt_comm_size() > 1)
        return cli_error("--runs %ld: several runs are not supported under mpirun (run them one by one)", runs);
    S.cfg.eta = eta;
    S.cfg.sigma = lsigma;
    S.cfg.linearized = linearized;
    S.cfg.replace_candidates = (size_t)replace_k;
    c->state = &S;
    return 0;
}

static int ngd_make(cli_algo_ctx *c, dpt_algo **out) {
    dpt_train_config *cfg = c->cfg;
    /* Eq. 4 is W - eta (grad + noise): plain SGD at lr = eta, nothing else */
    const double lr_default = dpt_optim_defaults(cfg->optim.kind).lr;
    if (cfg->optim.lr != lr_default)
        return cli_error("--lr: --algo noisy-gd takes its step size from --eta (got --lr %g)", cfg->optim.lr);
    if (cfg->optim.momentum != 0 || cfg->optim.weight_decay != 0)
        return cli_error("--momentum/--weight-decay: --algo noisy-gd is plain gradient descent (Eq. 4)");
    if (cfg->schedule.kind != DPT_SCHED_CONSTANT)
        return cli_error("--lr-schedule: --algo noisy-gd uses a constant step size");
    cfg->optim = dpt_optim_defaults(DPT_OPT_SGD);
    cfg->optim.lr = eta;
    if ((S.cfg.kl & (DPT_KL_ADD | DPT_KL_REPLACE)) && (!c->test || c->test->n == 0))
        return cli_error("--neighbours %s: the add/replace neighbours are test records, and the test set is empty",
                         neighbours);
    S.cfg.heldout = c->test;
    if (dpt_algo_noisy_gd_new(&S.cfg, out) != DPT_OK) return cli_fail("--algo noisy-gd");
    S.algo = *out;
    if (runs > 1) {
        /* run 1 is the trainer cmd_train builds next; it writes OUT/run1 */
        snprintf(S.dir1, sizeof S.dir1, "%s/run1", c->out);
        cfg->out_dir = S.dir1;
    }
    S.tcfg = *cfg;
    if (!c->quiet)
        fprintf(stderr, "dptrain: noisy-gd has NO (epsilon, delta) guarantee; it reports an ESTIMATE of the KL "
                        "divergence along this run's trajectory%s\n",
                S.cfg.kl ? "" : " (estimator off: --neighbours none)");
    return 0;
}

static void ngd_describe(const cli_algo_ctx *c, FILE *f) {
    fprintf(f, "  algorithm noisy-gd (full batch, eta %g, sigma %g: step noise std %.4g per parameter%s), "
               "KL over %s neighbours with the %s constant, %ld epochs (= steps), seed %s, %d threads, "
               "run dir %s\n",
            eta, lsigma, sqrt(2.0 * eta) * lsigma, linearized ? ", linearized network" : "", neighbours, constant,
            c->epochs, cli_seed_text(c->cfg), dpt_threads_resolve(c->cfg->threads), c->out);
    if (runs > 1)
        fprintf(f, "  %ld runs: run k uses seed %s + k - 1 and writes %s/run<k>/; %s/metrics.jsonl gets "
                   "the mean and std over runs\n",
                runs, cli_seed_text(c->cfg), c->out, c->out);
}

/* --overwrite: the trainer removes its own files from its directory (OUT, or OUT/run1 with
 * --runs > 1); what else a previous noisy-gd run wrote into OUT goes here: kl_candidates.csv,
 * the other run<k>/ directories and, with --runs > 1, OUT's own files of a single run. */
static int remove_if_present(const char *path) {
    if (unlink(path) != 0 && errno != ENOENT) return cli_error("--overwrite: cannot remove %s: %s", path, strerror(errno));
    return 0;
}
/* the secret file of the run in dir (outside it: dpt_run_secret_remove), before its
 * checkpoint, which names the run, goes */
static int remove_secret(const cli_algo_ctx *c, const char *dir) {
    char note[1600];
    if (dpt_run_secret_remove(dir, c->cfg->secret_dir, note, sizeof note) != DPT_OK) return cli_fail("--overwrite");
    if (note[0] && !c->quiet) fprintf(stderr, "dptrain: overwrite: the secret of the run in %s: %s\n", dir, note);
    return 0;
}
static int ngd_started(cli_algo_ctx *c, dpt_trainer *t) {
    (void)t;
    if (!c->overwrite) return 0;
    /* [0, 4): a run's files; [4]: noisy-gd's own; the lock last (only in run<k>/) */
    static const char *const files[] = {"checkpoint.safetensors", "ledger.json", "metrics.jsonl", DPT_RUN_KEY_FILE,
                                        "kl_candidates.csv", DPT_RUN_LOCK_FILE, NULL};
    char p[1400];
    int rc = runs > 1 ? remove_secret(c, c->out) : 0;
    for (int i = runs > 1 ? 0 : 4; files[i] && i < 5 && !rc; i++) {
        snprintf(p, sizeof p, "%s/%s", c->out, files[i]);
        rc = remove_if_present(p);
    }
    if (!rc && runs > 1) {
        snprintf(p, sizeof p, "%s/kl_candidates.csv", S.dir1);
        rc = remove_if_present(p);
    }
    DIR *d = rc ? NULL : opendir(c->out);
    struct dirent *e;
    while (d && !rc && (e = readdir(d))) {
        const char *n = e->d_name;
        if (strncmp(n, "run", 3) || !n[3] || strspn(n + 3, "0123456789") != strlen(n + 3)) continue;
        if (runs > 1 && !strcmp(n, "run1")) continue; /* the trainer's own directory */
        snprintf(p, sizeof p, "%s/%s", c->out, n);
        rc = remove_secret(c, p);
        for (int i = 0; files[i] && !rc; i++) {
            snprintf(p, sizeof p, "%s/%s/%s", c->out, n, files[i]);
            rc = remove_if_present(p);
        }
        snprintf(p, sizeof p, "%s/%s", c->out, n);
        if (!rc && rmdir(p) != 0 && errno != ENOENT)
            rc = cli_error("--overwrite: cannot remove %s (it holds files of no run): %s", p, strerror(errno));
    }
    if (d) closedir(d);
    return rc;
}

/* Per-candidate final values of one run (for worst-case-of-the-mean over several runs).
 * Written after the run trained: a failure is the work's (exit status 1), as is every
 * failure of the --runs aggregate below. */
static int write_candidates(const dpt_algo *a, const char *dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/kl_candidates.csv", dir);
    FILE *f = fopen(path, "w");
    if (!f) return cli_failf("%s: cannot write: %s", path, strerror(errno));
    fprintf(f, "kind,record,heldout,kl\n");
    const double *v;
    size_t n;
    if (dpt_noisy_gd_kl_values(a, DPT_KL_REMOVE, &v, &n) == DPT_OK)
        for (size_t i = 0; i < n; i++) fprintf(f, "remove,%zu,,%.9g\n", i, v[i]);
    if (dpt_noisy_gd_kl_values(a, DPT_KL_ADD, &v, &n) == DPT_OK)
        for (size_t i = 0; i < n; i++) fprintf(f, "add,,%zu,%.9g\n", i, v[i]);
    const size_t *zi;
    size_t k;
    if (dpt_noisy_gd_kl_values(a, DPT_KL_REPLACE, &v, &n) == DPT_OK &&
        dpt_noisy_gd_replace_candidates(a, &zi, &k) == DPT_OK && k)
        for (size_t i = 0; i < n; i++) fprintf(f, "replace,%zu,%zu,%.9g\n", i / k, zi[i % k], v[i]);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return cli_failf("%s: write failed", path);
    return 0;
}

/* One run's KL report on stdout and its kl_candidates.csv in dir. */
static int report_one(const dpt_algo *a, const char *dir, const char *label) {
    dpt_kl_report r;
    if (dpt_noisy_gd_kl(a, &r) != DPT_OK) return cli_fail("KL estimate");
    printf("%sKL estimate (an estimate along this run's trajectory, NOT an (epsilon, delta) guarantee): worst %.6g "
           "after %" PRIu64 " steps, constant %s = %.6g\n",
           label, r.worst, r.steps, S.cfg.constant == DPT_KL_EXACT ? "eta/(4 sigma^2)" : "eta/(2 sigma^2) (paper)",
           r.c);
    if (!isnan(r.remove)) printf("  remove one training record: %.6g (record %zu)\n", r.remove, r.remove_arg);
    if (!isnan(r.add)) printf("  add one test record:        %.6g (test record %zu)\n", r.add, r.add_arg);
    const size_t *zi;
    size_t k = 0, nh = S.cfg.heldout ? S.cfg.heldout->n : 0;
    if (!isnan(r.replace) && dpt_noisy_gd_replace_candidates(a, &zi, &k) == DPT_OK)
        printf("  replace record by test:     %.6g (record %zu by test record %zu; %zu of %zu test records as "
               "candidates%s)\n",
               r.replace, r.replace_arg_i, r.replace_arg_z, k, nh, k == nh ? ": every pair, exact worst case" : "");
    int rc = write_candidates(a, dir);
    if (!rc) printf("  per-epoch: %s/metrics.jsonl (kl_*); per-candidate: %s/kl_candidates.csv\n", dir, dir);
    return rc;
}

/* ---- --runs R > 1 ---- */

/* Sums over runs of each candidate's final KL (remove: training record i, add: held-out
 * record z; the same candidates in every run), for worst_of_mean. Replace candidates are
 * chosen per run at that run's W0, so they are not summed. */
static struct {
    double *sum[2];
    size_t n[2];
} C;

static int sum_candidates(const dpt_algo *a) {
    const int kinds[2] = {DPT_KL_REMOVE, DPT_KL_ADD};
    for (int j = 0; j < 2; j++) {
        const double *v;
        size_t n;
        if (dpt_noisy_gd_kl_values(a, kinds[j], &v, &n) != DPT_OK || !n) continue;
        if (!C.sum[j]) {
            if (!(C.sum[j] = calloc(n, sizeof(double)))) return cli_failf("--runs: out of memory");
            C.n[j] = n;
        }
        for (size_t i = 0; i < n && i < C.n[j]; i++) C.sum[j][i] += v[i];
    }
    return 0;
}

/* Every line of dir/metrics.jsonl, parsed into *out: 0, or the exit status after printing
 * the error. */
static int read_metrics(const char *dir, cJSON **out) {
    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    *out = NULL;
    FILE *f = NULL; /* a regular file only: opening a FIFO would wait for a writer forever */
    if (dpt_open_regular(path, &f, NULL) != DPT_OK) return cli_fail("--runs");
    cJSON *arr = cJSON_CreateArray();
    int rc = arr ? 0 : cli_failf("--runs: %s: out of memory", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while (!rc && (len = getline(&line, &cap, f)) > 0) {
        if (len <= 1) continue;
        cJSON *o = cJSON_Parse(line);
        if (!o) rc = cli_failf("--runs: %s: a line is not JSON", path);
        else cJSON_AddItemToArray(arr, o);
    }
    free(line);
    fclose(f);
    if (rc) cJSON_Delete(arr);
    else *out = arr;
    return rc;
}

/* mean and sample standard deviation (denominator R - 1) of key over the runs' line e;
 * 0 if some run lacks it */
static int mean_std(cJSON *const *runs_m, long R, int e, const char *key, double *mean, double *sd) {
    double v[1000], s = 0, q = 0;
    for (long k = 0; k < R; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(runs_m[k], e), key);
        if (!cJSON_IsNumber(x)) return 0;
        v[k] = x->valuedouble;
        s += v[k];
    }
    *mean = s / (double)R;
    for (long k = 0; k < R; k++) q += (v[k] - *mean) * (v[k] - *mean);
    *sd = sqrt(q / (double)(R - 1));
    return 1;
}

static void worst_of_mean(cJSON *o, int j, const char *key, long R) {
    if (!C.sum[j]) return;
    size_t arg = 0;
    for (size_t i = 1; i < C.n[j]; i++)
        if (C.sum[j][i] > C.sum[j][arg]) arg = i;
    char k1[64], k2[64];
    snprintf(k1, sizeof k1, "%s_worst_of_mean", key);
    snprintf(k2, sizeof k2, "%s_worst_of_mean_%s", key, j == 0 ? "record" : "heldout_record");
    cli_json_number(o, k1, C.sum[j][arg] / (double)R);
    cli_json_number(o, k2, (double)arg);
}

/* OUT/metrics.jsonl: per epoch, <key>_mean and <key>_std over the runs of each run's
 * value of key (kl_*: that run's worst case over the candidates of the kind); the last
 * epoch also worst_of_mean. Prints the summary of the last epoch. */
static int write_aggregate(const cli_algo_ctx *c) {
    static const char *keys[] = {"kl_worst", "kl_remove", "kl_add", "kl_replace", "train_loss", "test_loss",
                                 "test_accuracy"};
    cJSON *m[1000] = {0};
    int rc = 0;
    char dir[1100], path[1200];
    for (long k = 0; k < runs && !rc; k++) {
        snprintf(dir, sizeof dir, "%s/run%ld", c->out, k + 1);
        if ((rc = read_metrics(dir, &m[k])) == 0 && cJSON_GetArraySize(m[k]) != cJSON_GetArraySize(m[0]))
            rc = cli_failf("--runs: %s/metrics.jsonl has %d epochs, run 1 has %d", dir, cJSON_GetArraySize(m[k]),
                           cJSON_GetArraySize(m[0]));
    }
    FILE *f = NULL;
    if (!rc) {
        snprintf(path, sizeof path, "%s/metrics.jsonl", c->out);
        if (!(f = fopen(path, "w"))) rc = cli_failf("%s: cannot write: %s", path, strerror(errno));
    }
    const int E = rc ? 0 : cJSON_GetArraySize(m[0]);
    for (int e = 0; e < E && !rc; e++) {
        const cJSON *first = cJSON_GetArrayItem(m[0], e);
        cJSON *o = cJSON_CreateObject();
        static const char *copy[] = {"epoch", "step", "kl_note", "kl_constant", "kl_c", "kl_steps", "kl_records",
                                     "kl_heldout_records"};
        for (size_t j = 0; j < sizeof copy / sizeof *copy; j++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(first, copy[j]);
            if (x) cJSON_AddItemToObject(o, copy[j], cJSON_Duplicate(x, 1));
        }
        cli_json_number(o, "runs", (double)runs);
        char sb[32];
        if (!S.tcfg.seed_from_os) snprintf(sb, sizeof sb, "%" PRIu64, S.tcfg.seed);
        else snprintf(sb, sizeof sb, "os"); /* every run drew its own seed from the OS */
        cJSON_AddStringToObject(o, "seed_first", sb);
        cJSON_AddStringToObject(o, "runs_note", "run k (1..runs) used seed seed_first + k - 1 and wrote run<k>/; "
                                                "<key>_mean / <key>_std: mean and sample standard deviation "
                                                "(denominator runs - 1) over the runs of each run's <key> "
                                                "(kl_*: that run's worst case over its candidates)");
        for (size_t j = 0; j < sizeof keys / sizeof *keys; j++) {
            double mu, sd;
            if (!mean_std(m, runs, e, keys[j], &mu, &sd)) continue;
            char k1[64], k2[64];
            snprintf(k1, sizeof k1, "%s_mean", keys[j]);
            snprintf(k2, sizeof k2, "%s_std", keys[j]);
            cli_json_number(o, k1, mu);
            cli_json_number(o, k2, sd);
        }
        if (e == E - 1) {
            worst_of_mean(o, 0, "kl_remove", runs);
            worst_of_mean(o, 1, "kl_add", runs);
        }
        char *line = cJSON_PrintUnformatted(o);
        if (!line) rc = cli_failf("%s: out of memory", path);
        else if (fprintf(f, "%s\n", line) < 0) rc = cli_failf("%s: write failed", path);
        if (e == E - 1 && !rc) {
            double mu, sd;
            if (!S.tcfg.seed_from_os)
                printf("over %ld runs (seeds %" PRIu64 "..%" PRIu64 "), mean and std of each run's worst case: ", runs,
                       S.tcfg.seed, S.tcfg.seed + (uint64_t)runs - 1);
            else printf("over %ld runs (seeds from the OS), mean and std of each run's worst case: ", runs);
            if (mean_std(m, runs, e, "kl_worst", &mu, &sd)) printf("KL estimate %.6g +- %.6g", mu, sd);
            if (mean_std(m, runs, e, "test_accuracy", &mu, &sd))
                printf("%stest accuracy %.2f%% +- %.2f%%", S.cfg.kl ? ", " : "", 100 * mu, 100 * sd);
            printf("\n  aggregate: %s (<key>_mean, <key>_std); the test accuracy line below is run 1's\n", path);
        }
        free(line);
        cJSON_Delete(o);
    }
    if (f) {
        int bad = ferror(f);
        if ((fclose(f) != 0 || bad) && !rc) rc = cli_failf("%s: write failed", path);
    }
    for (long k = 0; k < runs; k++) cJSON_Delete(m[k]);
    return rc;
}

/* Runs 2..R: the same settings as run 1 but seed --seed + k - 1 and directory OUT/run<k>. */
static int more_runs(const cli_algo_ctx *c) {
    char dir[1100], label[64];
    for (long k = 2; k <= runs; k++) {
        dpt_train_config tc = S.tcfg;
        /* an OS seed: each run draws its own */
        tc.seed = S.tcfg.seed_from_os ? 0 : S.tcfg.seed + (uint64_t)(k - 1);
        tc.seed_from_os = 0;
        snprintf(dir, sizeof dir, "%s/run%ld", c->out, k);
        tc.out_dir = dir;
        if (!c->quiet) fprintf(stderr, "dptrain: noisy-gd run %ld of %ld (seed %s)\n", k, runs, cli_seed_text(&tc));
        dpt_algo *a = NULL;
        dpt_trainer *t = NULL;
        dpt_epoch_result r;
        if (dpt_algo_noisy_gd_new(&S.cfg, &a) != DPT_OK) return cli_fail("--algo noisy-gd");
        if (dpt_trainer_new(&tc, c->train, c->test, a, &t) != DPT_OK) return cli_fail("train");
        int rc = dpt_trainer_run(t, &r) != DPT_OK ? cli_fail("train") : 0;
        snprintf(label, sizeof label, "run %ld (seed %s): ", k, cli_seed_text(&tc));
        if (!rc && S.cfg.kl) rc = report_one(a, dir, label);
        if (!rc && S.cfg.kl) rc = sum_candidates(a);
        dpt_trainer_free(t);
        if (rc) return rc;
    }
    return 0;
}

static int ngd_report(const cli_algo_ctx *c, dpt_trainer *t) {
    (void)t;
    if (!S.cfg.kl) printf("privacy: none (noisy-gd without the KL estimator; no (epsilon, delta) guarantee)\n");
    int rc = 0;
    if (S.cfg.kl) {
        char label[64] = "";
        if (runs > 1) snprintf(label, sizeof label, "run 1 (seed %s): ", cli_seed_text(&S.tcfg));
        rc = report_one(S.algo, runs > 1 ? S.dir1 : c->out, label);
        if (!rc && linearized) printf("  (linearized network; the test accuracy below is of the ReLU network at W)\n");
    }
    if (runs > 1) {
        if (!rc && S.cfg.kl) rc = sum_candidates(S.algo);
        if (!rc) rc = more_runs(c);
        if (!rc) rc = write_aggregate(c);
        for (int j = 0; j < 2; j++) {
            free(C.sum[j]);
            C.sum[j] = NULL;
        }
    }
    return rc;
}

const cli_algo CLI_ALGO_NOISY_GD = {
    .name = "noisy-gd",
    .summary = "noisy full-batch GD (Langevin, 'Initialization Matters') with a KL estimate: no (epsilon, delta) guarantee",
    .uses_privacy_flags = 0,
    .states_privacy = 1,
    .random_init_only = 1,
    .opts = NGD_OPTS,
    .check = ngd_check,
    .make = ngd_make,
    .started = ngd_started,
    .describe = ngd_describe,
    .report = ngd_report,
    .tag = "noisy-gd: no DP guarantee",
};
