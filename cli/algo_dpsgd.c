/* --algo dpsgd: DP-SGD (Abadi et al. 2016) with Poisson sampling, per-example clipping and
 * the RDP/PLD accountants. Its epsilon is computed for Poisson sampling only, so any other
 * --sampler is refused rather than silently replaced, except --sampler shuffle: the
 * explicitly NOT accounted mode for reproducing papers run on fixed-size batches. */
#include <dptrain/accounting.h>
#include <dptrain/privacy.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "train_algos.h"

typedef struct {
    int unaccounted; /* --sampler shuffle: the paper-reproduction mode, no epsilon */
    dpt_clip_mode mode;
    double sigma; /* given or calibrated */
    dpt_algo *algo; /* the trainer's (owned by it): the final adaptive clip */
} dpsgd_cli;
static dpsgd_cli S;

/* Adaptive clipping (Andrew et al. 2021): --adaptive-clip QUANTILE and its two settings */
static double g_ada_q = 0.0, g_ada_lr = 0.2, g_ada_sb = 0.0;
static int g_ada_q_seen, g_ada_lr_seen, g_ada_sb_seen;
static double g_ada_sigma_grad; /* sigma_Delta, for the description */

static cli_option DPSGD_OPTS[] = {
    {"--adaptive-clip", CLI_DOUBLE, &g_ada_q, "QUANTILE",
     "adaptive clipping (Andrew et al. 2021): the clip starts at --clip and follows this quantile of the per-example "
     "gradient norms (0.5: the median), estimated from a noisy count released with the gradient; --sigma (or the "
     "calibrated sigma) stays the step's total noise multiplier, one SGM event per step (docs/dpsgd.md)",
     &g_ada_q_seen},
    {"--adaptive-clip-lr", CLI_DOUBLE, &g_ada_lr, "ETA",
     "with --adaptive-clip: the clip's geometric learning rate, C <- C exp(-ETA (unclipped fraction - QUANTILE)) "
     "(default 0.2)", &g_ada_lr_seen},
    {"--adaptive-clip-sigma", CLI_DOUBLE, &g_ada_sb, "SIGMA_B",
     "with --adaptive-clip: std of the noise on the count of unclipped examples (default the expected batch / 20); "
     "the gradient's multiplier is then (sigma^-2 - (2 SIGMA_B)^-2)^-1/2, so SIGMA_B must exceed sigma / 2",
     &g_ada_sb_seen},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static int dpsgd_check(cli_algo_ctx *c) {
    const cli_privacy_flags *p = c->priv;
    if (c->sampler_seen && strcmp(c->sampler, "poisson") && strcmp(c->sampler, "shuffle"))
        return cli_error("--sampler %s: --algo dpsgd takes --sampler poisson (accounted: its epsilon is computed "
                         "for Poisson sampling) or shuffle (fixed-size batches as in Opacus without Poisson "
                         "sampling, NOT accounted)", c->sampler);
    S.unaccounted = c->sampler_seen && !strcmp(c->sampler, "shuffle");
    if (!S.unaccounted) c->sampler = "poisson";
    if (S.unaccounted && (p->secure || g_ada_q_seen || p->target_eps_seen))
        return cli_error("--sampler shuffle: --algo dpsgd then has no accountant, so it takes neither %s",
                         "--secure, --adaptive-clip nor --target-epsilon");
    if (S.unaccounted && !p->sigma_seen) return cli_error("--sampler shuffle: --algo dpsgd needs --sigma");
    if (!(p->clip > 0) || !isfinite(p->clip)) return cli_error("--clip: the clipping norm C must be > 0, got %g", p->clip);
    if (p->sigma_seen && (!(p->sigma > 0) || !isfinite(p->sigma)))
        return cli_error("--sigma: the noise multiplier must be > 0, got %g (for training without noise use "
                         "--algo sgd)", p->sigma);
    if (!p->sigma_seen && !(p->target_eps > 0)) return cli_error("--algo dpsgd needs --sigma or --target-epsilon");
    if (p->target_eps != 0 && !(p->target_eps > 0 && isfinite(p->target_eps)))
        return cli_error("--target-epsilon must be > 0, got %g", p->target_eps);
    if (!(p->delta > 0 && p->delta < 1)) return cli_error("--delta must be in (0, 1), got %g", p->delta);
    if (dpt_clip_mode_parse(p->clip_mode, &S.mode) != DPT_OK) return cli_error("--clip-mode: %s", dpt_last_error());
    if ((g_ada_lr_seen || g_ada_sb_seen) && !g_ada_q_seen)
        return cli_error("%s: only with --adaptive-clip QUANTILE", g_ada_lr_seen ? "--adaptive-clip-lr"
                                                                                 : "--adaptive-clip-sigma");
    if (g_ada_q_seen) {
        if (!(isfinite(g_ada_q) && g_ada_q > 0 && g_ada_q < 1))
            return cli_error("--adaptive-clip: the target quantile must be in (0, 1) (0.5: the median norm), got %g",
                             g_ada_q);
        if (!(isfinite(g_ada_lr) && g_ada_lr > 0 && g_ada_lr <= 10))
            return cli_error("--adaptive-clip-lr: the clip's learning rate must be in (0, 10] (Andrew et al.: 0.2), "
                             "got %g", g_ada_lr);
        if (g_ada_sb_seen && !(isfinite(g_ada_sb) && g_ada_sb > 0))
            return cli_error("--adaptive-clip-sigma: the count's noise std must be > 0, got %g", g_ada_sb);
        if (p->secure) return cli_error("--adaptive-clip: not with --secure (the joint accounting of the count and "
                                        "the lattice noise is not implemented)");
    }
    c->state = &S;
    return 0;
}

static int dpsgd_make(cli_algo_ctx *c, dpt_algo **out) {
    const cli_privacy_flags *p = c->priv;
    dpt_train_config *cfg = c->cfg;
    if (S.unaccounted) {
        if (!c->quiet)
            fprintf(stderr, "dptrain: NOT ACCOUNTED: --sampler shuffle (fixed-size shuffled batches, the protocol of "
                            "papers that ran Opacus without Poisson sampling) is not covered by DP-SGD's "
                            "accountant: no epsilon will be reported\n");
        cfg->delta = p->delta;
        S.sigma = p->sigma;
        cli_print_noise_mode(c);
        dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
        d.sigma = S.sigma;
        d.clip = p->clip;
        d.clip_mode = S.mode;
        d.unaccounted = 1;
        if (dpt_algo_dpsgd_new(&d, out) != DPT_OK) return cli_fail("--algo dpsgd");
        S.algo = *out;
        return 0;
    }
    int rc = cli_poisson_privacy_setup(c);
    if (rc) return rc;
    const double q = cfg->sample_rate;
    S.sigma = p->sigma;
    size_t P = 0;
    if (p->secure) { /* the accounted multiplier depends on the noised (trained) parameter count */
        dpt_model *m = NULL;
        dpt_status ms = dpt_model_new(cfg->model_spec, 1, 1, &m);
        if (ms != DPT_OK) return cli_refuse(ms, "--model");
        dpt_status fs = dpt_model_freeze_parse(m, cfg->freeze ? cfg->freeze : "", NULL, &P);
        dpt_model_free(m);
        if (fs != DPT_OK) return cli_refuse(fs, "--freeze");
    }
    if (!p->sigma_seen) {
        /* calibrate for the steps the trainer will take, on top of the releases made before
         * training (DP normalization statistics): the library's planning functions, which
         * Python's train() calls too */
        uint64_t T = 0;
        dpt_status cs = dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, c->train->n, cfg->batch_size, q,
                                                     (uint64_t)c->epochs, &T);
        if (cs != DPT_OK) return cli_refuse(cs, "--epochs");
        const uint64_t spe = T / (uint64_t)c->epochs;
        if ((cs = dpt_train_calibrate_sigma(c->prior, q, T, p->delta, p->target_eps, &S.sigma)) != DPT_OK)
            return cli_refuse(cs, "--target-epsilon");
        if (p->secure) {
            double eff = S.sigma;
            if ((cs = dpt_privacy_secure_sigma_for(eff, P, &S.sigma)) != DPT_OK)
                return cli_refuse(cs, "--target-epsilon");
            if (!c->quiet)
                fprintf(stderr, "dptrain: --secure: the lattice rounding raises the sensitivity to C + sqrt(%zu) h, so "
                                "sigma %.6g is needed for an effective %.6g\n", P, S.sigma, eff);
        }
        if (!c->quiet)
            fprintf(stderr, "dptrain: calibrated sigma %.6g for epsilon %g at delta %g after %ld epochs of "
                            "%" PRIu64 " steps (q %g, default accountant: min(PLD, RDP)%s)\n",
                    S.sigma, p->target_eps, p->delta, c->epochs, spe, q,
                    c->prior ? ", DP normalization statistics included" : "");
    }
    cli_print_noise_mode(c);
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = S.sigma;
    d.clip = p->clip;
    d.clip_mode = S.mode;
    d.secure = p->secure;
    if ((rc = cli_secure_sampler(c, &d.secure_sampler))) return rc;
    if (g_ada_q_seen) {
        d.adaptive_quantile = g_ada_q;
        d.adaptive_lr = g_ada_lr;
        /* the default, q N / 20, written out so that the check below names the flag */
        d.adaptive_sigma_b = g_ada_sb_seen ? g_ada_sb : q * (double)c->train->n / 20;
        if (dpt_privacy_adaptive_sigma(S.sigma, d.adaptive_sigma_b, &g_ada_sigma_grad) != DPT_OK)
            return cli_error("--adaptive-clip-sigma %g%s: %s", d.adaptive_sigma_b,
                             g_ada_sb_seen ? "" : " (the default, expected batch / 20)", dpt_last_error());
    }
    if (dpt_algo_dpsgd_new(&d, out) != DPT_OK) return cli_fail("--algo dpsgd");
    S.algo = *out;
    return 0;
}

static void dpsgd_describe(const cli_algo_ctx *c, FILE *f) {
    const cli_privacy_flags *p = c->priv;
    if (S.unaccounted) {
        fprintf(f, "  algorithm dpsgd NOT ACCOUNTED (shuffled batches of %zu; sigma %g, C %g, %s clipping), %s lr %g, "
                   "%ld epochs, seed %s, %d threads, run dir %s%s\n",
                c->cfg->batch_size, S.sigma, p->clip, p->clip_mode, c->optimizer, c->cfg->optim.lr, c->epochs,
                cli_seed_text(c->cfg), dpt_threads_resolve(c->cfg->threads), c->out, c->resume ? " (resumed)" : "");
        return;
    }
    fprintf(f, "  algorithm dpsgd (sigma %g, C %g, %s clipping, q %g = expected batch %.1f, delta %g), "
               "%s lr %g, %ld epochs, seed %s, %d threads, run dir %s%s\n",
            S.sigma, p->clip, p->clip_mode, c->cfg->sample_rate, c->cfg->sample_rate * (double)c->train->n, p->delta,
            c->optimizer, c->cfg->optim.lr, c->epochs, cli_seed_text(c->cfg), dpt_threads_resolve(c->cfg->threads), c->out,
            c->resume ? " (resumed)" : "");
    if (g_ada_q_seen)
        fprintf(f, "  adaptive clipping (Andrew et al. 2021): C from %g toward the %g-quantile of the gradient norms, "
                   "lr %g; count noise std sigma_b %g, gradient noise multiplier sigma_Delta %.6g (total sigma %g: one "
                   "SGM event per step)\n",
                p->clip, g_ada_q, g_ada_lr, g_ada_sb_seen ? g_ada_sb : c->cfg->sample_rate * (double)c->train->n / 20,
                g_ada_sigma_grad, S.sigma);
}

static int dpsgd_report(const cli_algo_ctx *c, dpt_trainer *t) {
    if (S.unaccounted) {
        printf("privacy: NOT ACCOUNTED (--sampler shuffle: fixed-size shuffled batches, which DP-SGD's accountant "
               "does not cover); no epsilon is reported\n");
        return 0;
    }
    if (c->priv->secure) {
        size_t trained = 0;
        dpt_trainer_frozen(t, &trained);
        double eff = dpt_privacy_secure_sigma_eff(S.sigma, trained);
        printf("secure mode: noise sigma %g on the lattice-rounded sum; accounted as sigma %.6g (sensitivity C + "
               "sqrt(trained parameters) x lattice step)\n", S.sigma, eff);
        return cli_report_ledger(c, t, eff);
    }
    if (g_ada_q_seen) printf("adaptive clipping: final clip C %.6g\n", dpt_algo_dpsgd_clip(S.algo));
    return cli_report_ledger(c, t, S.sigma);
}

const cli_algo CLI_ALGO_DPSGD = {
    .name = "dpsgd",
    .summary = "DP-SGD (Abadi et al. 2016): Poisson sampling, per-example clipping, Gaussian noise, RDP/PLD epsilon",
    .uses_privacy_flags = 1,
    .freezable = 1,
    .regression = 1,
    .opts = DPSGD_OPTS,
    .check = dpsgd_check,
    .make = dpsgd_make,
    .describe = dpsgd_describe,
    .report = dpsgd_report,
    .tag = "DP-SGD",
};
