/* --algo dpsgd: DP-SGD (Abadi et al. 2016) with Poisson sampling, per-example clipping and
 * the RDP/PLD accountants. Its epsilon is computed for Poisson sampling only, so any other
 * --sampler is refused rather than silently replaced. */
#include <dptrain/accounting.h>
#include <dptrain/privacy.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "train_algos.h"

typedef struct {
    dpt_clip_mode mode;
    double sigma; /* given or calibrated */
} dpsgd_cli;
static dpsgd_cli S;

static int dpsgd_check(cli_algo_ctx *c) {
    const cli_privacy_flags *p = c->priv;
    if (c->sampler_seen && strcmp(c->sampler, "poisson"))
        return cli_error("--sampler %s: --algo dpsgd needs --sampler poisson (its epsilon is computed for "
                         "Poisson sampling)", c->sampler);
    c->sampler = "poisson";
    if (!(p->clip > 0) || !isfinite(p->clip)) return cli_error("--clip: the clipping norm C must be > 0, got %g", p->clip);
    if (p->sigma_seen && (!(p->sigma > 0) || !isfinite(p->sigma)))
        return cli_error("--sigma: the noise multiplier must be > 0, got %g (for training without noise use "
                         "--algo sgd)", p->sigma);
    if (!p->sigma_seen && !(p->target_eps > 0)) return cli_error("--algo dpsgd needs --sigma or --target-epsilon");
    if (p->target_eps != 0 && !(p->target_eps > 0 && isfinite(p->target_eps)))
        return cli_error("--target-epsilon must be > 0, got %g", p->target_eps);
    if (!(p->delta > 0 && p->delta < 1)) return cli_error("--delta must be in (0, 1), got %g", p->delta);
    if (dpt_clip_mode_parse(p->clip_mode, &S.mode) != DPT_OK) return cli_error("--clip-mode: %s", dpt_last_error());
    c->state = &S;
    return 0;
}

static int dpsgd_make(cli_algo_ctx *c, dpt_algo **out) {
    const cli_privacy_flags *p = c->priv;
    dpt_train_config *cfg = c->cfg;
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
    return dpt_algo_dpsgd_new(&d, out) == DPT_OK ? 0 : cli_fail("--algo dpsgd");
}

static void dpsgd_describe(const cli_algo_ctx *c, FILE *f) {
    const cli_privacy_flags *p = c->priv;
    fprintf(f, "  algorithm dpsgd (sigma %g, C %g, %s clipping, q %g = expected batch %.1f, delta %g), "
               "%s lr %g, %ld epochs, seed %s, %d threads, run dir %s%s\n",
            S.sigma, p->clip, p->clip_mode, c->cfg->sample_rate, c->cfg->sample_rate * (double)c->train->n, p->delta,
            c->optimizer, c->cfg->optim.lr, c->epochs, cli_seed_text(c->cfg), dpt_threads_resolve(c->cfg->threads), c->out,
            c->resume ? " (resumed)" : "");
}

static int dpsgd_report(const cli_algo_ctx *c, dpt_trainer *t) {
    if (c->priv->secure) {
        size_t trained = 0;
        dpt_trainer_frozen(t, &trained);
        double eff = dpt_privacy_secure_sigma_eff(S.sigma, trained);
        printf("secure mode: noise sigma %g on the lattice-rounded sum; accounted as sigma %.6g (sensitivity C + "
               "sqrt(trained parameters) x lattice step)\n", S.sigma, eff);
        return cli_report_ledger(c, t, eff);
    }
    return cli_report_ledger(c, t, S.sigma);
}

const cli_algo CLI_ALGO_DPSGD = {
    .name = "dpsgd",
    .summary = "DP-SGD (Abadi et al. 2016): Poisson sampling, per-example clipping, Gaussian noise, RDP/PLD epsilon",
    .uses_privacy_flags = 1,
    .freezable = 1,
    .regression = 1,
    .opts = NULL,
    .check = dpsgd_check,
    .make = dpsgd_make,
    .describe = dpsgd_describe,
    .report = dpsgd_report,
    .tag = "DP-SGD",
};
