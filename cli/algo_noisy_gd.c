/* --algo noisy-gd: noisy full-batch gradient descent (Langevin training, Eq. 4 of Ye et al.,
 * "Initialization Matters") with the KL estimator over every candidate neighbour. It has
 * NO (epsilon, delta) guarantee: what it reports is an estimate of a KL divergence along
 * the run's own trajectory, labelled as such everywhere (stdout, stderr, metrics). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train_algos.h"

static double eta = 0.01, lsigma = 0.0;
static const char *neighbours = "all", *constant = "exact";
static int linearized = 0, lsigma_seen = 0;
static long replace_k = 1;

static struct {
    dpt_noisy_gd_config cfg;
    dpt_algo *algo; /* owned by the trainer; valid until the report */
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
    if (!c->quiet)
        fprintf(stderr, "dptrain: noisy-gd has NO (epsilon, delta) guarantee; it reports an ESTIMATE of the KL "
                        "divergence along this run's trajectory%s\n",
                S.cfg.kl ? "" : " (estimator off: --neighbours none)");
    return 0;
}

static void ngd_describe(const cli_algo_ctx *c, FILE *f) {
    fprintf(f, "  algorithm noisy-gd (full batch, eta %g, sigma %g: step noise std %.4g per parameter%s), "
               "KL over %s neighbours with the %s constant, %ld epochs (= steps), seed %" PRIu64 ", %d threads, "
               "run dir %s\n",
            eta, lsigma, sqrt(2.0 * eta) * lsigma, linearized ? ", linearized network" : "", neighbours, constant,
            c->epochs, c->cfg->seed, dpt_threads_resolve(c->cfg->threads), c->out);
}

/* Per-candidate final values (for worst-case-of-the-mean over several runs). */
static int write_candidates(const cli_algo_ctx *c) {
    char path[1024];
    snprintf(path, sizeof path, "%s/kl_candidates.csv", c->out);
    FILE *f = fopen(path, "w");
    if (!f) return cli_error("%s: cannot write", path);
    fprintf(f, "kind,record,heldout,kl\n");
    const double *v;
    size_t n;
    if (dpt_noisy_gd_kl_values(S.algo, DPT_KL_REMOVE, &v, &n) == DPT_OK)
        for (size_t i = 0; i < n; i++) fprintf(f, "remove,%zu,,%.9g\n", i, v[i]);
    if (dpt_noisy_gd_kl_values(S.algo, DPT_KL_ADD, &v, &n) == DPT_OK)
        for (size_t i = 0; i < n; i++) fprintf(f, "add,,%zu,%.9g\n", i, v[i]);
    const size_t *zi;
    size_t k;
    if (dpt_noisy_gd_kl_values(S.algo, DPT_KL_REPLACE, &v, &n) == DPT_OK &&
        dpt_noisy_gd_replace_candidates(S.algo, &zi, &k) == DPT_OK && k)
        for (size_t i = 0; i < n; i++) fprintf(f, "replace,%zu,%zu,%.9g\n", i / k, zi[i % k], v[i]);
    if (fclose(f) != 0) return cli_error("%s: write failed", path);
    return 0;
}

static int ngd_report(const cli_algo_ctx *c, dpt_trainer *t) {
    (void)t;
    if (!S.cfg.kl) {
        printf("privacy: none (noisy-gd without the KL estimator; no (epsilon, delta) guarantee)\n");
        return 0;
    }
    dpt_kl_report r;
    if (dpt_noisy_gd_kl(S.algo, &r) != DPT_OK) return cli_fail("KL estimate");
    printf("KL estimate (an estimate along this run's trajectory, NOT an (epsilon, delta) guarantee): worst %.6g "
           "after %" PRIu64 " steps, constant %s = %.6g\n",
           r.worst, r.steps, S.cfg.constant == DPT_KL_EXACT ? "eta/(4 sigma^2)" : "eta/(2 sigma^2) (paper)", r.c);
    if (!isnan(r.remove)) printf("  remove one training record: %.6g (record %zu)\n", r.remove, r.remove_arg);
    if (!isnan(r.add)) printf("  add one test record:        %.6g (test record %zu)\n", r.add, r.add_arg);
    if (!isnan(r.replace))
        printf("  replace record by test:     %.6g (record %zu by test record %zu; %zu candidate%s)\n", r.replace,
               r.replace_arg_i, r.replace_arg_z, S.cfg.replace_candidates, S.cfg.replace_candidates > 1 ? "s" : "");
    if (linearized) printf("  (linearized network; the test accuracy below is of the ReLU network at W)\n");
    int rc = write_candidates(c);
    if (!rc) printf("  per-epoch: %s/metrics.jsonl (kl_*); per-candidate: %s/kl_candidates.csv\n", c->out, c->out);
    return rc;
}

const cli_algo CLI_ALGO_NOISY_GD = {
    .name = "noisy-gd",
    .summary = "noisy full-batch GD (Langevin, 'Initialization Matters') with a KL estimate: no (epsilon, delta) guarantee",
    .uses_privacy_flags = 0,
    .opts = NGD_OPTS,
    .check = ngd_check,
    .make = ngd_make,
    .describe = ngd_describe,
    .report = ngd_report,
    .tag = "noisy-gd: no DP guarantee",
};
