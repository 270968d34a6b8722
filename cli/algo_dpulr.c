/* --algo dpulr (DP-ULR: backprop-free DP training with likelihood-ratio gradients) and
 * --algo ulr (the non-private forward-learning baseline). The two share their estimator
 * flags (--copies, --ulr-std, --modules, --antithetic, --[no-]baseline). DP-ULR's epsilon is
 * computed only for Poisson sampling with rejection (--sampler poisson-reject, the
 * default); --sampler shuffle (the paper's experiments) runs without an accountant and
 * says so. See docs/dpulr.md. */
#include <dptrain/accounting.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "train_algos.h"

#define MAX_REJECTION_RATIO 1e-3

static long K = 32;
/* strings (NULL = not given), so --help shows no made-up numeric default */
static const char *SIGMA0_S = NULL, *ULR_STD_S = NULL, *MIN_BATCH_S = NULL;
static double SIGMA0 = 0.0, ULR_STD = 0.0;
static long MIN_BATCH = 0;
static const char *NOISE = "explicit", *MODULES = "auto";
static int ANTITHETIC = 0, BASELINE = 0, NO_BASELINE = 0, SIGMA0_SEEN = 0, STD_SEEN = 0, NB_SEEN = 0;

typedef struct {
    dpt_ulr_noise noise;
    int accounted;
    int baseline; /* as run (dpt_dpulr_config_resolve): --baseline, --no-baseline or the default */
    double std;   /* as run: --ulr-std or the mode's default */
    uint64_t nb;
    double ratio;
} ulr_cli;
static ulr_cli S;

#define SHARED_OPTS                                                                                                 \
    {"--copies", CLI_LONG, &K, "K", "perturbed copies per example and module (>= 1)", NULL},                        \
        {"--ulr-std", CLI_STR, &ULR_STD_S, "S",                                                                     \
         "perturbation std s (ulr / --ulr-noise explicit: default 0.1; controller: a floor on s_l, default none)",  \
         &STD_SEEN},                                                                                                \
        {"--modules", CLI_STR, &MODULES, "SPEC",                                                                    \
         "auto (each Linear or Conv2d layer with the parameter-free layers after it) or start layers, e.g. 0,2,4", NULL},               \
        {"--antithetic", CLI_FLAG, &ANTITHETIC, NULL, "pair copies z, -z (K even; not with the controller)", NULL}, \
        {"--baseline", CLI_FLAG, &BASELINE, NULL,                                                                   \
         "use L_k - L0 (clean loss): the default except with the controller, which refuses it", NULL},               \
        {"--no-baseline", CLI_FLAG, &NO_BASELINE, NULL, "use L_k itself (no clean-loss baseline)", NULL}

static cli_option DPULR_OPTS[] = {
    {"--sigma0", CLI_STR, &SIGMA0_S, "X",
     "required: target noise multiplier sigma0 (> 0), noise std >= sigma0*C per direction", &SIGMA0_SEEN},
    {"--min-batch", CLI_STR, &MIN_BATCH_S, "N_B",
     "rejection threshold in [1, qN] (default: largest with rejection cost <= 1e-3 x SGM term at order 1.1)", &NB_SEEN},
    {"--ulr-noise", CLI_STR, &NOISE, "MODE",
     "explicit (clip + N(0, sigma0^2 C^2): the standard analysis) | controller (the paper's Eq. 7 + top-up; "
     "Gaussian approximation)", NULL},
    SHARED_OPTS,
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static cli_option ULR_OPTS[] = {
    SHARED_OPTS,
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static int check_shared(void) {
    if (ULR_STD_S && cli_parse_double("--ulr-std", ULR_STD_S, &ULR_STD)) return 2;
    if (SIGMA0_S && cli_parse_double("--sigma0", SIGMA0_S, &SIGMA0)) return 2;
    if (MIN_BATCH_S && cli_parse_long("--min-batch", MIN_BATCH_S, &MIN_BATCH)) return 2;
    if (K < 1) return cli_error("--copies: K must be >= 1, got %ld", K);
    if (!(ULR_STD >= 0) || !isfinite(ULR_STD)) return cli_error("--ulr-std must be >= 0, got %g", ULR_STD);
    if (ANTITHETIC && K % 2) return cli_error("--antithetic needs an even --copies (pairs z, -z), got %ld", K);
    if (BASELINE && NO_BASELINE) return cli_error("--baseline and --no-baseline: give one of them");
    return 0;
}

/* u from the flags (u's mode already set), the unset ones (--ulr-std, --[no-]baseline)
 * left to the library's defaults; S.std / S.baseline become what the run uses (for the
 * header, which describe prints after make) */
static void fill_config(dpt_dpulr_config *u) {
    u->copies = (size_t)K;
    u->perturb_std = STD_SEEN ? ULR_STD : 0.0;
    u->antithetic = ANTITHETIC;
    u->baseline = BASELINE ? 1 : NO_BASELINE ? 0 : DPT_ULR_AUTO;
    u->modules = MODULES;
    dpt_dpulr_config r = *u;
    dpt_dpulr_config_resolve(&r);
    S.std = r.perturb_std;
    S.baseline = r.baseline;
}

/* ==== dpulr ==== */

static int dpulr_check(cli_algo_ctx *c) {
    const cli_privacy_flags *p = c->priv;
    int rc = check_shared();
    if (rc) return rc;
    if (c->sampler_seen && strcmp(c->sampler, "poisson-reject") && strcmp(c->sampler, "shuffle"))
        return cli_error("--sampler %s: --algo dpulr takes --sampler poisson-reject (accounted) or shuffle "
                         "(the paper's fixed-size batches, NOT accounted)", c->sampler);
    if (!c->sampler_seen) c->sampler = "poisson-reject";
    S.accounted = !strcmp(c->sampler, "poisson-reject");
    if (p->sigma_seen) return cli_error("--sigma: --algo dpulr takes its noise multiplier as --sigma0");
    if (strcmp(p->clip_mode, "flat"))
        return cli_error("--clip-mode: --algo dpulr always clips module l to C_l = C / sqrt(modules)");
    if (p->secure) return cli_error("--secure is not implemented for --algo dpulr (its perturbations and noise use the "
                                    "reproducible float stream)");
    if (!SIGMA0_SEEN) return cli_error("--algo dpulr needs --sigma0 (target noise multiplier)");
    if (!(SIGMA0 > 0) || !isfinite(SIGMA0)) return cli_error("--sigma0 must be > 0, got %g", SIGMA0);
    if (!(p->clip > 0) || !isfinite(p->clip)) return cli_error("--clip: the clipping norm C must be > 0, got %g", p->clip);
    if (p->target_eps_seen && !S.accounted)
        return cli_error("--target-epsilon: --sampler shuffle has no accountant, so no budget can be enforced");
    if (p->target_eps_seen && !(p->target_eps > 0 && isfinite(p->target_eps)))
        return cli_error("--target-epsilon must be > 0, got %g", p->target_eps);
    if (!(p->delta > 0 && p->delta < 1)) return cli_error("--delta must be in (0, 1), got %g", p->delta);
    if (!strcmp(NOISE, "controller")) S.noise = DPT_ULR_CONTROLLER;
    else if (!strcmp(NOISE, "explicit")) S.noise = DPT_ULR_EXPLICIT;
    else return cli_error("--ulr-noise: expected controller or explicit, got '%s'", NOISE);
    if (S.noise == DPT_ULR_CONTROLLER && (ANTITHETIC || BASELINE))
        return cli_error("%s breaks the privacy controller's variance assumption: use --ulr-noise explicit (or --algo "
                         "ulr)", ANTITHETIC ? "--antithetic" : "--baseline");
    if (S.noise == DPT_ULR_EXPLICIT && STD_SEEN && !(ULR_STD > 0))
        return cli_error("--ulr-std: --ulr-noise explicit needs a perturbation std > 0");
    if (NB_SEEN && !S.accounted) return cli_error("--min-batch: only with --sampler poisson-reject");
    if (NB_SEEN && MIN_BATCH < 1) return cli_error("--min-batch: N_B must be >= 1, got %ld", MIN_BATCH);
    c->state = &S;
    return 0;
}

static int dpulr_make(cli_algo_ctx *c, dpt_algo **out) {
    const cli_privacy_flags *p = c->priv;
    dpt_train_config *cfg = c->cfg;
    const size_t N = c->train->n;
    cfg->delta = p->delta;
    cfg->allow_ledger_mismatch = p->allow_mismatch;
    if (S.accounted) {
        double q = c->sample_rate_seen ? cfg->sample_rate : (double)cfg->batch_size / (double)N;
        if (!(q > 0 && q < 1))
            return cli_error("--batch-size %zu: the sampling rate q = B/N = %g is outside (0, 1) (N = %zu)",
                             cfg->batch_size, q, N);
        if (p->delta >= 1.0 / (double)N && !p->force)
            return cli_error("--delta %g >= 1/N = %g: such a delta allows releasing a whole example; pass --force "
                             "to accept it", p->delta, 1.0 / (double)N);
        double rej = 0, sgm = 0;
        if (NB_SEEN) {
            if ((double)MIN_BATCH > q * (double)N * (1 + 1e-12))
                return cli_error("--min-batch %ld exceeds qN = %.6g (q %g, N %zu): the rejection theory needs "
                                 "1 <= N_B <= qN", MIN_BATCH, q * (double)N, q, N);
            S.nb = (uint64_t)MIN_BATCH;
            dpt_status st = dpt_dpulr_rdp(q, SIGMA0, N, S.nb, DPT_DPULR_RATIO_ALPHA, NULL, &rej, &sgm);
            if (st != DPT_OK) return cli_refuse(st, "--min-batch");
            S.ratio = rej / sgm;
            if (S.ratio > MAX_REJECTION_RATIO)
                fprintf(stderr, "dptrain: warning: --min-batch %ld: the rejection cost %.3g is %.3g x the SGM term at "
                                "order %g (> %g): it adds noticeably to epsilon; a smaller N_B costs less\n",
                        MIN_BATCH, rej, S.ratio, DPT_DPULR_RATIO_ALPHA, MAX_REJECTION_RATIO);
        } else {
            dpt_status st = dpt_dpulr_default_min_batch(q, SIGMA0, N, MAX_REJECTION_RATIO, &S.nb, &S.ratio);
            if (st != DPT_OK) return cli_refuse(st, "--min-batch");
            if (!c->quiet)
                fprintf(stderr, "dptrain: --min-batch %" PRIu64 " (of qN = %.1f): rejection cost %.3g x the SGM term "
                                "at order %g\n", S.nb, q * (double)N, S.ratio, DPT_DPULR_RATIO_ALPHA);
        }
        cfg->sample_rate = q;
        cfg->min_batch = (size_t)S.nb;
        cfg->sampler = DPT_SAMPLER_POISSON_REJECT;
        cfg->target_epsilon = p->target_eps_seen ? p->target_eps : 0.0;
    } else if (!c->quiet) {
        fprintf(stderr, "dptrain: NOT ACCOUNTED: --sampler shuffle (fixed-size batches, as in the paper's "
                        "experiments) is not covered by the DP-ULR analysis: no epsilon will be reported\n");
    }
    if (!c->quiet && S.noise == DPT_ULR_CONTROLLER)
        fprintf(stderr, "dptrain: --ulr-noise controller: the noise level rests on the paper's Gaussian approximation "
                        "(CLT over K) and on s_l chosen from the batch, not on a standard DP proof; "
                        "--ulr-noise explicit (the default) is the mode a standard analysis covers (with its "
                        "baseline it beat the controller in every Table 1 cell: docs/dpulr.md \"What to run\")\n");
    cli_print_noise_mode(c);
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.private_ = 1;
    u.noise = S.noise;
    fill_config(&u);
    u.sigma0 = SIGMA0;
    u.clip = p->clip;
    u.accounted = S.accounted;
    return dpt_algo_dpulr_new(&u, out) == DPT_OK ? 0 : cli_fail("--algo dpulr");
}

static void dpulr_describe(const cli_algo_ctx *c, FILE *f) {
    const cli_privacy_flags *p = c->priv;
    if (S.accounted)
        fprintf(f, "  algorithm dpulr (%s noise, sigma0 %g, C %g, K %ld%s%s, s %s%g, q %g = expected batch %.1f, N_B %" PRIu64
                   ", delta %g), %s lr %g, %ld epochs, seed %s, %d threads, run dir %s%s\n",
                NOISE, SIGMA0, p->clip, K, ANTITHETIC ? ", antithetic" : "", S.baseline ? ", baseline" : "",
                S.noise == DPT_ULR_CONTROLLER ? "floor " : "", S.std, c->cfg->sample_rate,
                c->cfg->sample_rate * (double)c->train->n, S.nb, p->delta, c->optimizer, c->cfg->optim.lr, c->epochs,
                cli_seed_text(c->cfg), dpt_threads_resolve(c->cfg->threads), c->out, c->resume ? " (resumed)" : "");
    else
        fprintf(f, "  algorithm dpulr NOT ACCOUNTED (shuffled batches of %zu; %s noise, sigma0 %g, C %g, K %ld%s%s), %s lr "
                   "%g, %ld epochs, seed %s, run dir %s%s\n",
                c->cfg->batch_size, NOISE, SIGMA0, p->clip, K, ANTITHETIC ? ", antithetic" : "",
                S.baseline ? ", baseline" : "", c->optimizer, c->cfg->optim.lr, c->epochs, cli_seed_text(c->cfg),
                c->out, c->resume ? " (resumed)" : "");
}

static int dpulr_report(const cli_algo_ctx *c, dpt_trainer *t) {
    if (!S.accounted) {
        printf("privacy: NOT ACCOUNTED (--sampler shuffle: fixed-size shuffled batches, which the DP-ULR analysis "
               "does not cover); no epsilon is reported\n");
        return 0;
    }
    const dpt_ledger *l = dpt_trainer_ledger(t);
    if (!l) return cli_fail("epsilon: no privacy ledger");
    double delta = c->priv->delta, eb = NAN, ec = NAN, e_next = 0;
    if (dpt_ledger_epsilon(l, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &eb) != DPT_OK ||
        dpt_ledger_epsilon(l, delta, DPT_ACCT_RDP, DPT_CONV_CLASSIC, &ec) != DPT_OK)
        return cli_fail("epsilon");
    if (dpt_trainer_budget_stopped(t, &e_next))
        printf("stopped by the privacy budget: the next step would reach epsilon %.4g > %g\n", e_next,
               c->priv->target_eps);
    char ex[320];
    cli_ledger_excludes(l, ex, sizeof ex);
    printf("privacy: epsilon %.4g (RDP, Balle conversion) / %.4g (classic conversion, as in the paper) at delta %g "
           "after %" PRIu64 " steps (Poisson q %g with rejection below N_B %" PRIu64 ", sigma0 %g; rejection cost "
           "%.3g x the SGM term at order %g)%s%s  ledger: %s/ledger.json\n",
           eb, ec, delta, dpt_ledger_steps(l), c->cfg->sample_rate, S.nb, SIGMA0, S.ratio, DPT_DPULR_RATIO_ALPHA,
           S.noise == DPT_ULR_CONTROLLER ? " [controller: under the paper's Gaussian approximation]" : "", ex, c->out);
    return 0;
}

const cli_algo CLI_ALGO_DPULR = {
    .name = "dpulr",
    .summary = "DP-ULR: backprop-free likelihood-ratio gradients, Poisson sampling with rejection, its own RDP epsilon",
    .uses_privacy_flags = 1,
    .opts = DPULR_OPTS,
    .check = dpulr_check,
    .make = dpulr_make,
    .describe = dpulr_describe,
    .report = dpulr_report,
    .tag = "DP-ULR",
};

/* ==== ulr ==== */

static int ulr_check(cli_algo_ctx *c) {
    (void)c;
    int rc = check_shared();
    if (rc) return rc;
    if (STD_SEEN && !(ULR_STD > 0)) return cli_error("--ulr-std: the perturbation std must be > 0, got %g", ULR_STD);
    return 0;
}

static int ulr_make(cli_algo_ctx *c, dpt_algo **out) {
    (void)c;
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.private_ = 0;
    fill_config(&u);
    return dpt_algo_dpulr_new(&u, out) == DPT_OK ? 0 : cli_fail("--algo ulr");
}

static void ulr_describe(const cli_algo_ctx *c, FILE *f) {
    fprintf(f, "  algorithm ulr (non-private forward learning: no privacy guarantee; K %ld, s %g%s%s), %s lr %g, %s "
               "batches of %zu, %ld epochs, seed %s, %d threads, run dir %s%s\n",
            K, S.std, ANTITHETIC ? ", antithetic" : "", S.baseline ? ", baseline" : "", c->optimizer, c->cfg->optim.lr,
            c->sampler, c->cfg->batch_size, c->epochs, cli_seed_text(c->cfg), dpt_threads_resolve(c->cfg->threads), c->out,
            c->resume ? " (resumed)" : "");
}

const cli_algo CLI_ALGO_ULR = {
    .name = "ulr",
    .summary = "non-private forward learning with likelihood-ratio gradients (no privacy guarantee)",
    .uses_privacy_flags = 0,
    .opts = ULR_OPTS,
    .check = ulr_check,
    .make = ulr_make,
    .describe = ulr_describe,
    .report = NULL,
    .tag = "non-private ULR",
};
