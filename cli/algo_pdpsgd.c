/* --algo pdp-sgd and --algo proportional-noise: the proportional "DP regularization" of
 * docs/pdpsgd.md and the multiplicative weight noise it is derived from. Neither has a
 * privacy theorem or an accountant: they never print an epsilon, only "no formal DP
 * guarantee" and a pointer to `dptrain audit`, which measures what they leak. */
#include <inttypes.h>
#include <math.h>

#include "train_algos.h"

static double g_kappa = 0.0, g_pdp_sigma = 0.0, g_lambda = 0.0, g_prop_sigma = 0.0;
static int g_kappa_seen, g_pdp_sigma_seen, g_prop_sigma_seen;
static double g_kappa_used; /* given, or (lr * pdp-sigma)^2 at the base lr */

/* The paper derives kappa = (eta sigma)^2 for plain SGD (theta -= eta g~, Section IV);
 * anything else given --pdp-sigma is our mapping of that optimizer's lr. */
static int pdp_paper_form(const cli_algo_ctx *c) {
    return c->cfg->optim.kind == DPT_OPT_SGD && c->cfg->optim.momentum == 0;
}

static cli_option PDP_OPTS[] = {
    {"--kappa", CLI_DOUBLE, &g_kappa, "K", "proportional coefficient: + K sum W_jk^2 mean_n(x_nk^2) (>= 0)", &g_kappa_seen},
    {"--pdp-sigma", CLI_DOUBLE, &g_pdp_sigma, "S",
     "instead of --kappa: K = (eta_t * S)^2 each step, eta_t the scheduled lr: the paper's value for --optimizer sgd "
     "(momentum 0); with adam or momentum our mapping of its lr, not the paper's",
     &g_pdp_sigma_seen},
    {"--lambda", CLI_DOUBLE, &g_lambda, "L", "plain L2 coefficient: + L sum theta^2 (>= 0)", NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static cli_option PROP_OPTS[] = {
    {"--prop-sigma", CLI_DOUBLE, &g_prop_sigma, "S",
     "relative weight noise: theta <- theta (1 + lr S e), e ~ N(0,1), after every step (> 0)", &g_prop_sigma_seen},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static const char *NO_DP = "privacy: no formal DP guarantee (no theorem, no accountant, no epsilon); "
                           "measure its leakage with `dptrain audit`";

static int pdp_check(cli_algo_ctx *c) {
    if (g_kappa_seen && g_pdp_sigma_seen) return cli_error("--kappa and --pdp-sigma: give one of them, not both");
    if (g_kappa_seen && !(isfinite(g_kappa) && g_kappa >= 0)) return cli_error("--kappa must be >= 0, got %g", g_kappa);
    if (g_pdp_sigma_seen && !(isfinite(g_pdp_sigma) && g_pdp_sigma >= 0))
        return cli_error("--pdp-sigma must be >= 0, got %g", g_pdp_sigma);
    if (!(isfinite(g_lambda) && g_lambda >= 0)) return cli_error("--lambda must be >= 0, got %g", g_lambda);
    return 0;
}

static int pdp_make(cli_algo_ctx *c, dpt_algo **out) {
    g_kappa_used = g_pdp_sigma_seen ? dpt_pdp_kappa(c->cfg->optim.lr, g_pdp_sigma) : g_kappa;
    if (!c->quiet) fprintf(stderr, "dptrain: pdp-sgd: %s\n", NO_DP);
    if (!c->quiet && g_pdp_sigma_seen && !pdp_paper_form(c))
        fprintf(stderr, "dptrain: pdp-sgd: --pdp-sigma with --optimizer %s%s: kappa = (lr * S)^2 is OUR mapping of its "
                        "lr; the paper derives kappa = (eta sigma)^2 for plain SGD only (docs/pdpsgd.md)\n",
                c->optimizer, c->cfg->optim.momentum != 0 ? " and momentum" : "");
    dpt_pdp_config pc = {g_lambda, g_pdp_sigma_seen ? 0.0 : g_kappa, g_pdp_sigma_seen ? g_pdp_sigma : 0.0};
    return dpt_algo_pdpsgd_new(&pc, out) == DPT_OK ? 0 : cli_fail("--algo pdp-sgd");
}

static void pdp_describe(const cli_algo_ctx *c, FILE *f) {
    fprintf(f, "  algorithm pdp-sgd (kappa %g%s, lambda %g; no formal DP guarantee), %s lr %g, %s batches of %zu, "
               "%ld epochs, seed %s, %d threads, run dir %s%s\n",
            g_kappa_used,
            !g_pdp_sigma_seen   ? ""
            : pdp_paper_form(c) ? " = (eta_t*pdp-sigma)^2 at the first epoch's lr, the paper's plain-SGD form"
                                : " = (lr*pdp-sigma)^2 at the first epoch's lr, our mapping (the paper's form is for plain SGD)",
            g_lambda, c->optimizer, c->cfg->optim.lr,
            c->sampler, c->cfg->batch_size, c->epochs, cli_seed_text(c->cfg), dpt_threads_resolve(c->cfg->threads), c->out,
            c->resume ? " (resumed)" : "");
}

static int no_dp_report(const cli_algo_ctx *c, dpt_trainer *t) {
    (void)c, (void)t;
    printf("%s\n", NO_DP);
    return 0;
}

const cli_algo CLI_ALGO_PDPSGD = {
    .name = "pdp-sgd",
    .regression = 1,
    .summary = "proportional DP regularizer (PDP-SGD paper): NOT differentially private, no epsilon",
    .uses_privacy_flags = 0,
    .opts = PDP_OPTS,
    .check = pdp_check,
    .make = pdp_make,
    .describe = pdp_describe,
    .report = no_dp_report,
    .tag = "PDP-SGD, no formal DP guarantee",
};

static int prop_check(cli_algo_ctx *c) {
    if (!g_prop_sigma_seen) return cli_error("--algo proportional-noise needs --prop-sigma");
    if (!(isfinite(g_prop_sigma) && g_prop_sigma > 0)) return cli_error("--prop-sigma must be > 0, got %g", g_prop_sigma);
    return 0;
}

static int prop_make(cli_algo_ctx *c, dpt_algo **out) {
    if (!c->quiet) fprintf(stderr, "dptrain: proportional-noise: %s\n", NO_DP);
    dpt_propnoise_config pc = {g_prop_sigma, 0.0};
    if (dpt_algo_propnoise_new(&pc, out) != DPT_OK) return cli_fail("--algo proportional-noise");
    return 0;
}

static void prop_describe(const cli_algo_ctx *c, FILE *f) {
    fprintf(f, "  algorithm proportional-noise (relative weight noise lr*%g = %g per step; no formal DP guarantee), "
               "%s lr %g, %s batches of %zu, %ld epochs, seed %s, %d threads, run dir %s%s\n",
            g_prop_sigma, g_prop_sigma * c->cfg->optim.lr, c->optimizer, c->cfg->optim.lr, c->sampler,
            c->cfg->batch_size, c->epochs, cli_seed_text(c->cfg), dpt_threads_resolve(c->cfg->threads), c->out,
            c->resume ? " (resumed)" : "");
}

const cli_algo CLI_ALGO_PROPNOISE = {
    .name = "proportional-noise",
    .regression = 1,
    .summary = "SGD + multiplicative weight noise theta(1 + lr*S*e) (PDP-SGD's origin): NOT DP, no epsilon",
    .uses_privacy_flags = 0,
    .opts = PROP_OPTS,
    .check = prop_check,
    .make = prop_make,
    .describe = prop_describe,
    .report = no_dp_report,
    .tag = "proportional noise, no formal DP guarantee",
};
