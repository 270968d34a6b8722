/* --algo dpmac: DP-MAC (method of auxiliary coordinates; docs/dpmac.md) with Poisson
 * sampling, optionally after DP-PCA of the inputs (--pca-dims, --pca-sigma). Both releases
 * are in the run's ledger (DP-PCA as one Gaussian mechanism of sensitivity 1), so the
 * printed epsilon covers PCA + training; the paper's own accounting is printed beside it
 * for comparison only. --algo mac: the same z-step and W-step without clipping, noise or
 * accountant (the paper's non-private row), labelled non-private. */
#include <dptrain/accounting.h>
#include <dptrain/privacy.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <limits.h>
#include "train_algos.h"

static long z_steps = 30, pca_dims = 0, taylor_order = 1, w_steps = 1;
static double clip2 = 0.0;
static int clip2_seen = 0;
static double z_lr = 0.003, z_mu = 1.0, pca_sigma = 0.0, center_clip = 0.0, center_sigma = 0.0;
static const char *pca_project = "unit";
static int pca_sigma_seen = 0, center_clip_seen = 0, center_sigma_seen = 0;

static cli_option OPTS[] = {
    {"--z-steps", CLI_LONG, &z_steps, "N", "Adam steps on the auxiliary coordinates per batch", NULL},
    {"--z-lr", CLI_DOUBLE, &z_lr, "X", "learning rate of the z-step's Adam", NULL},
    {"--z-mu", CLI_DOUBLE, &z_mu, "MU", "weight mu of the hidden layers' terms mu/2 ||z - f||^2 in the z-objective "
                                       "(the authors' classifier code: 2)", NULL},
    {"--taylor-order", CLI_LONG, &taylor_order, "N", "1 (the paper's experiments) | 2: also release the clipped, "
                                                    "noised Hessian coefficients (Eq. 3-5; needs --clip2)", NULL},
    {"--clip2", CLI_DOUBLE, &clip2, "T", "--taylor-order 2: Frobenius bound of each example's per-layer Hessian "
                                        "coefficient", &clip2_seen},
    {"--w-steps", CLI_LONG, &w_steps, "N", "--taylor-order 2: optimizer steps on the released quadratic per batch",
     NULL},
    {"--pca-dims", CLI_LONG, &pca_dims, "K", "DP-PCA of the inputs to K dimensions first (0 = none); the model "
                                              "then takes K inputs", NULL},
    {"--pca-sigma", CLI_DOUBLE, &pca_sigma, "S", "DP-PCA noise std on the Gram matrix of unit-norm rows "
                                                 "(sensitivity 1; in the ledger)", &pca_sigma_seen},
    {"--pca-project", CLI_STR, &pca_project, "MODE", "unit (project the unit-norm rows, as the fit sees them) | "
                                                    "rows (project the rows as they are: features keep the data's "
                                                    "scale, as the authors' code)", NULL},
    {"--center-clip", CLI_DOUBLE, &center_clip, "C", "with --pca-dims: centre train and test by a DP mean of the "
                                                     "training rows, each clipped to L2 norm C (choose C near the "
                                                     "largest row norm: longer rows are shrunk)", &center_clip_seen},
    {"--center-sigma", CLI_DOUBLE, &center_sigma, "S", "noise multiplier of that DP mean (noise std S*C on the sum "
                                                       "of clipped rows; a Gaussian mechanism in the ledger)",
     &center_sigma_seen},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

typedef struct {
    double sigma;
    size_t pca_released; /* entries of the released noisy Gram matrix, d (d + 1) / 2 */
    size_t mean_released; /* entries of the released noisy sum (DP mean), d */
    char *run_json;       /* the run's description with the released projection ("pca"), which
                             cfg.run_json points to (kept for the process's life) */
} dpmac_cli;
static dpmac_cli S;

static int dpmac_check(cli_algo_ctx *c) {
    const cli_privacy_flags *p = c->priv;
    if (c->sampler_seen && strcmp(c->sampler, "poisson"))
        return cli_error("--sampler %s: --algo dpmac needs --sampler poisson (its epsilon is computed for "
                         "Poisson sampling)", c->sampler);
    c->sampler = "poisson";
    if (!(p->clip > 0) || !isfinite(p->clip))
        return cli_error("--clip: the coefficient bound Theta must be > 0, got %g", p->clip);
    if (p->sigma_seen && (!(p->sigma > 0) || !isfinite(p->sigma)))
        return cli_error("--sigma: the noise multiplier must be > 0, got %g (for training without noise use "
                         "--algo sgd)", p->sigma);
    if (!p->sigma_seen && !(p->target_eps > 0)) return cli_error("--algo dpmac needs --sigma or --target-epsilon");
    if (p->target_eps != 0 && !(p->target_eps > 0 && isfinite(p->target_eps)))
        return cli_error("--target-epsilon must be > 0, got %g", p->target_eps);
    if (!(p->delta > 0 && p->delta < 1)) return cli_error("--delta must be in (0, 1), got %g", p->delta);
    if (strcmp(p->clip_mode, "flat"))
        return cli_error("--clip-mode %s: --algo dpmac clips every layer's coefficient to Theta (--clip); "
                         "--clip-mode does not apply", p->clip_mode);
    if (z_steps < 0 || z_steps > 100000) return cli_error("--z-steps must be in [0, 100000], got %ld", z_steps);
    if (!(z_lr > 0) || !isfinite(z_lr)) return cli_error("--z-lr must be > 0, got %g", z_lr);
    if (!(z_mu > 0) || !isfinite(z_mu)) return cli_error("--z-mu must be > 0, got %g", z_mu);
    if (taylor_order != 1 && taylor_order != 2) return cli_error("--taylor-order must be 1 or 2, got %ld", taylor_order);
    if (taylor_order == 2 && !clip2_seen) return cli_error("--taylor-order 2 needs --clip2 (the Hessian coefficient bound)");
    if (taylor_order == 1 && clip2_seen) return cli_error("--clip2 applies to --taylor-order 2 only");
    if (clip2_seen && (!(clip2 > 0) || !isfinite(clip2))) return cli_error("--clip2 must be > 0, got %g", clip2);
    if (w_steps < 1 || w_steps > 1000) return cli_error("--w-steps must be in [1, 1000], got %ld", w_steps);
    if (w_steps > 1 && taylor_order != 2)
        return cli_error("--w-steps %ld needs --taylor-order 2 (on the linear expansion every step would repeat the "
                         "same direction)", w_steps);
    if (taylor_order == 2 && p->secure) return cli_error("--taylor-order 2 is not implemented with --secure");
    if (strcmp(pca_project, "unit") && strcmp(pca_project, "rows"))
        return cli_error("--pca-project: expected unit or rows, got '%s'", pca_project);
    if (pca_dims < 0) return cli_error("--pca-dims must be >= 0, got %ld", pca_dims);
    if (pca_dims > 0 && !pca_sigma_seen)
        return cli_error("--pca-dims %ld needs --pca-sigma (the DP-PCA noise std; the paper uses 4 / 8 / 16)",
                         pca_dims);
    if (pca_sigma_seen && pca_dims == 0) return cli_error("--pca-sigma needs --pca-dims K > 0");
    if (pca_dims > 0 && (!(pca_sigma > 0) || !isfinite(pca_sigma)))
        return cli_error("--pca-sigma must be > 0, got %g (DP-PCA without noise is not private)", pca_sigma);
    if ((center_clip_seen || center_sigma_seen) && pca_dims == 0)
        return cli_error("--center-clip/--center-sigma centre the data before DP-PCA: they need --pca-dims K > 0");
    if (center_clip_seen != center_sigma_seen)
        return cli_error("%s: the DP mean needs both --center-clip (row norm bound) and --center-sigma (noise "
                         "multiplier)", center_clip_seen ? "--center-clip" : "--center-sigma");
    if (center_clip_seen && (!(center_clip > 0) || !isfinite(center_clip)))
        return cli_error("--center-clip must be > 0, got %g", center_clip);
    if (center_sigma_seen && (!(center_sigma > 0) || !isfinite(center_sigma)))
        return cli_error("--center-sigma must be > 0, got %g (a mean without noise is not private)", center_sigma);
    if (p->secure && !p->sigma_seen)
        return cli_error("--secure with --target-epsilon: calibration for the secure mechanisms of --algo dpmac is "
                         "not implemented; give --sigma (the ledger then records the secure mode's effective "
                         "multipliers)");
    if (pca_dims > 0 && c->resume && p->secure)
        return cli_error("--resume with --pca-dims in --secure mode would release a second, different DP-PCA "
                         "(its noise cannot be regenerated); start a new run");
    c->state = &S;
    return 0;
}

/* *out = the releases before training: [DP normalization statistics (prior)] + [DP mean]
 * + [DP-PCA], as the run's ledger will hold them before step 1 (non-secure multipliers:
 * calibration is refused in secure mode) */
static int pre_training_ledger(const dpt_ledger *prior, dpt_ledger **out) {
    dpt_ledger *l = NULL;
    dpt_status s = prior ? dpt_ledger_copy(prior, &l) : dpt_ledger_new(&l);
    if (s == DPT_OK && pca_dims > 0 && center_sigma_seen) s = dpt_ledger_add_gaussian(l, 1.0, center_sigma, "dp-mean");
    if (s == DPT_OK && pca_dims > 0) s = dpt_ledger_add_gaussian(l, 1.0, pca_sigma, "dp-pca");
    if (s != DPT_OK) {
        dpt_ledger_free(l);
        return -1;
    }
    *out = l;
    return 0;
}

/* The DP mean and DP-PCA this run will release before training (cli_algo.planned_releases):
 * their cost is known from their noise before the data is read (secure mode: a lower
 * bound, the accounted multipliers are smaller) */
static int dpmac_planned(const cli_algo_ctx *c, dpt_ledger *l, char *what, size_t n) {
    if (pca_dims <= 0 || c->resume) return 0; /* a resumed run's ledger holds them already */
    if (center_sigma_seen && dpt_ledger_add_gaussian(l, 1.0, center_sigma, "dp-mean") != DPT_OK)
        return cli_fail("--center-sigma");
    if (dpt_ledger_add_gaussian(l, 1.0, pca_sigma, "dp-pca") != DPT_OK) return cli_fail("--pca-sigma");
    if (center_sigma_seen) snprintf(what, n, "DP mean (--center-sigma %g) and DP-PCA (--pca-sigma %g)", center_sigma,
                                    pca_sigma);
    else snprintf(what, n, "DP-PCA (--pca-sigma %g)", pca_sigma);
    return 0;
}

/* Adds the released DP-PCA (and DP mean) to the run's description, so that dptrain eval can
 * map a test split's raw features as training did. Both are DP releases in the ledger: the
 * checkpoint may hold them. */
static int record_pca(cli_algo_ctx *c, const double *V, size_t d, size_t k, const double *mu, int raw) {
    if (d * k > INT_MAX) return cli_error("--pca-dims: %zu x %zu components are too many to record", d, k);
    cJSON *run = c->cfg->run_json ? cJSON_Parse(c->cfg->run_json) : cJSON_CreateObject();
    cJSON *pca = cJSON_CreateObject();
    cJSON *comp = cJSON_CreateDoubleArray(V, (int)(d * k));
    cJSON *mean = mu ? cJSON_CreateDoubleArray(mu, (int)d) : NULL;
    int ok = run && pca && comp && (!mu || mean);
    if (ok) {
        cJSON_AddNumberToObject(pca, "features", (double)d);
        cJSON_AddNumberToObject(pca, "dims", (double)k);
        cJSON_AddStringToObject(pca, "project", raw ? "rows" : "unit");
        cJSON_AddNumberToObject(pca, "sigma", pca_sigma); /* the noise they were released with */
        if (mu) cJSON_AddNumberToObject(pca, "mean_sigma", center_sigma);
        if (mu) cJSON_AddNumberToObject(pca, "mean_clip", center_clip);
        cJSON_AddItemToObject(pca, "components", comp), comp = NULL;
        if (mean) cJSON_AddItemToObject(pca, "mean", mean), mean = NULL;
        cJSON_DeleteItemFromObjectCaseSensitive(run, "pca");
        cJSON_AddItemToObject(run, "pca", pca), pca = NULL;
    }
    char *text = ok ? cJSON_PrintUnformatted(run) : NULL;
    cJSON_Delete(run), cJSON_Delete(pca), cJSON_Delete(comp), cJSON_Delete(mean);
    if (!text) return cli_failf("--pca-dims: out of memory recording the projection");
    free(S.run_json);
    S.run_json = text;
    c->cfg->run_json = S.run_json;
    return 0;
}

/* [DP mean of train, centring of train and test,] DP-PCA of train (fit) and projection of
 * train and test, in place. The datasets are the caller's (cmd_train's) own buffers,
 * handed to the algorithm before the trainer exists. */
/* A resumed run: the DP mean and DP-PCA its checkpoint recorded (run.pca), the same ones
 * the ledger holds: computing them again would release a second, unrecorded DP mean and
 * DP-PCA (fresh noise), or the same noise on other data (a seeded run): either would let
 * the difference of two published releases reveal the data. Refused unless the record
 * matches these flags exactly. */
static int stored_pca(const cli_algo_ctx *c, size_t d, size_t k, int raw, double *V, double *mu) {
    cJSON *run = c->resume_run ? cJSON_Parse(c->resume_run) : NULL;
    const cJSON *pca = run ? cJSON_GetObjectItemCaseSensitive(run, "pca") : NULL;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(pca, "features");
    const cJSON *dm = cJSON_GetObjectItemCaseSensitive(pca, "dims");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(pca, "project");
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(pca, "components");
    const cJSON *mean = cJSON_GetObjectItemCaseSensitive(pca, "mean");
    int rc = 0;
    if (!cJSON_IsObject(pca) || !cJSON_IsNumber(f) || !cJSON_IsNumber(dm) || !cJSON_IsString(pr) ||
        !cJSON_IsArray(comp))
        rc = cli_error("--resume: the checkpoint in %s records no DP-PCA (run.pca), and computing it again would be a "
                       "new release its ledger does not hold", c->out);
    else if ((size_t)f->valuedouble != d || (size_t)dm->valuedouble != k ||
             strcmp(pr->valuestring, raw ? "rows" : "unit"))
        rc = cli_error("--pca-dims %zu / --pca-project %s: the checkpoint's DP-PCA maps %g features to %g dimensions "
                       "(project %s); resume with the same", k, raw ? "rows" : "unit", f->valuedouble, dm->valuedouble,
                       pr->valuestring);
    else if ((size_t)cJSON_GetArraySize(comp) != d * k)
        rc = cli_error("--resume: the checkpoint's DP-PCA has %d values, expected %zu", cJSON_GetArraySize(comp), d * k);
    else if (center_sigma_seen != cJSON_IsArray(mean))
        rc = cli_error("--center-sigma: the checkpoint's run %s a DP mean; resume with the same centring",
                       cJSON_IsArray(mean) ? "released" : "did not release");
    else if (cJSON_IsArray(mean) && (size_t)cJSON_GetArraySize(mean) != d)
        rc = cli_error("--resume: the checkpoint's DP mean has %d values, expected %zu", cJSON_GetArraySize(mean), d);
    /* the noise they were released with (absent in checkpoints before it was recorded) */
    static const char *const key[] = {"sigma", "mean_sigma", "mean_clip"};
    static const char *const flag[] = {"--pca-sigma", "--center-sigma", "--center-clip"};
    const double now[] = {pca_sigma, center_sigma, center_clip};
    for (int j = 0; !rc && j < 3; j++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(pca, key[j]);
        if (cJSON_IsNumber(x) && x->valuedouble != now[j])
            rc = cli_error("%s %g: the checkpoint's %s was released with %s %g; resume with the same", flag[j], now[j],
                           j ? "DP mean" : "DP-PCA", flag[j], x->valuedouble);
    }
    for (size_t i = 0; !rc && i < d * k; i++) {
        const cJSON *x = cJSON_GetArrayItem(comp, (int)i);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
            rc = cli_error("--resume: the checkpoint's DP-PCA value %zu is not a finite number", i);
        else V[i] = x->valuedouble;
    }
    for (size_t i = 0; !rc && cJSON_IsArray(mean) && i < d; i++) {
        const cJSON *x = cJSON_GetArrayItem(mean, (int)i);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
            rc = cli_error("--resume: the checkpoint's DP mean value %zu is not a finite number", i);
        else mu[i] = x->valuedouble;
    }
    cJSON_Delete(run);
    return rc;
}

/* project train and test (in place) with V [d, k] after centring by mu (NULL: none) */
static int apply_pca(cli_algo_ctx *c, const double *V, size_t d, size_t k, const double *mu, int raw) {
    dpt_dataset *tr = (dpt_dataset *)c->train, *te = (dpt_dataset *)c->test;
    float *ptr = dpt_alloc2(tr->n, k, sizeof(float), "projected train");
    float *pte = te && te->n ? dpt_alloc2(te->n, k, sizeof(float), "projected test") : NULL;
    dpt_status s = ptr && (pte || !(te && te->n)) ? DPT_OK : DPT_ENOMEM;
    if (s == DPT_OK && mu) s = dpt_dp_center(tr->x, tr->n, d, mu);
    if (s == DPT_OK && mu && te && te->n) s = dpt_dp_center(te->x, te->n, d, mu);
    if (s == DPT_OK) s = (raw ? dpt_dp_pca_project_raw : dpt_dp_pca_project)(tr->x, tr->n, d, V, k, ptr);
    if (s == DPT_OK && pte) s = (raw ? dpt_dp_pca_project_raw : dpt_dp_pca_project)(te->x, te->n, d, V, k, pte);
    if (s != DPT_OK) {
        dpt_free(ptr), dpt_free(pte);
        return cli_fail("--pca-dims");
    }
    dpt_free(tr->x), tr->x = ptr;
    tr->dim = k, tr->shape[0] = 1, tr->shape[1] = 1, tr->shape[2] = k;
    if (pte) {
        dpt_free(te->x), te->x = pte;
        te->dim = k, te->shape[0] = 1, te->shape[1] = 1, te->shape[2] = k;
    }
    return 0;
}

/* --resume: the checkpoint's DP mean and DP-PCA, applied again; nothing is released */
static int reuse_pca(cli_algo_ctx *c, size_t d, size_t k) {
    const int raw = !strcmp(pca_project, "rows");
    double *V = dpt_alloc2(d, k, sizeof(double), "pca components");
    double *mu = dpt_alloc(d, sizeof(double), "dp mean");
    int rc = V && mu ? stored_pca(c, d, k, raw, V, mu) : cli_fail("--pca-dims");
    if (!rc) rc = apply_pca(c, V, d, k, center_sigma_seen ? mu : NULL, raw);
    if (!rc && !c->quiet)
        fprintf(stderr, "dptrain: resumed with the checkpoint's %sDP-PCA to %zu dimensions (no new release)\n",
                center_sigma_seen ? "DP mean and " : "", k);
    if (!rc) rc = record_pca(c, V, d, k, center_sigma_seen ? mu : NULL, raw);
    dpt_free(V), dpt_free(mu);
    return rc;
}

static int run_pca(cli_algo_ctx *c) {
    dpt_dataset *tr = (dpt_dataset *)c->train, *te = (dpt_dataset *)c->test;
    const size_t d = tr->dim, k = (size_t)pca_dims;
    S.pca_released = d * (d + 1) / 2;
    S.mean_released = d;
    if (k > d) return cli_error("--pca-dims %ld: the data have only %zu features", pca_dims, d);
    if (c->resume) return reuse_pca(c, d, k);
    double *V = dpt_alloc2(d, k, sizeof(double), "pca components");
    double *mu = dpt_alloc(d, sizeof(double), "dp mean");
    float *ptr = dpt_alloc2(tr->n, k, sizeof(float), "projected train");
    float *pte = te && te->n ? dpt_alloc2(te->n, k, sizeof(float), "projected test") : NULL;
    dpt_rng r;
    int live = 0, rc = 0;
    dpt_status s = DPT_ENOMEM;
    double t0 = dpt_now();
    if (center_sigma_seen && V && mu && ptr && (pte || !(te && te->n))) {
        /* DP mean on its own noise stream (independent of the PCA's and the training's) */
        s = c->priv->secure || !c->cfg->seed ? dpt_rng_init_secure(&r, DPT_STREAM_NOISE)
                            : dpt_rng_init(&r, dpt_dp_mean_seed(c->cfg->seed), DPT_STREAM_NOISE);
        if (s == DPT_OK) {
            s = dpt_dp_mean(tr->x, tr->n, d, center_clip, center_sigma, &r, c->priv->secure, c->cfg->threads, mu,
                            NULL);
            dpt_rng_free(&r);
        }
        if (s == DPT_OK) s = dpt_dp_center(tr->x, tr->n, d, mu);
        if (s == DPT_OK && te && te->n) s = dpt_dp_center(te->x, te->n, d, mu);
        if (s != DPT_OK) {
            rc = cli_fail("--center-clip/--center-sigma");
            dpt_free(V), dpt_free(mu), dpt_free(ptr), dpt_free(pte);
            return rc;
        }
        s = DPT_ENOMEM;
        if (!c->quiet)
            fprintf(stderr, "dptrain: centred train and test by a DP mean of the training rows (rows clipped to L2 "
                            "norm %g, noise multiplier %g, Gaussian mechanism in the ledger)\n", center_clip,
                    center_sigma);
    }
    if (V && mu && ptr && (pte || !(te && te->n))) {
        s = c->priv->secure || !c->cfg->seed ? dpt_rng_init_secure(&r, DPT_STREAM_NOISE)
                            : dpt_rng_init(&r, dpt_dp_pca_seed(c->cfg->seed), DPT_STREAM_NOISE);
        live = s == DPT_OK;
    }
    if (s == DPT_OK) s = dpt_dp_pca_fit(tr->x, tr->n, d, k, pca_sigma, &r, c->priv->secure, c->cfg->threads, V, NULL);
    const int raw = !strcmp(pca_project, "rows");
    if (s == DPT_OK) s = (raw ? dpt_dp_pca_project_raw : dpt_dp_pca_project)(tr->x, tr->n, d, V, k, ptr);
    if (s == DPT_OK && pte) s = (raw ? dpt_dp_pca_project_raw : dpt_dp_pca_project)(te->x, te->n, d, V, k, pte);
    if (live) dpt_rng_free(&r);
    if (s != DPT_OK) {
        rc = cli_fail("--pca-dims");
    } else {
        dpt_free(tr->x), tr->x = ptr, ptr = NULL;
        tr->dim = k, tr->shape[0] = 1, tr->shape[1] = 1, tr->shape[2] = k;
        if (pte) {
            dpt_free(te->x), te->x = pte, pte = NULL;
            te->dim = k, te->shape[0] = 1, te->shape[1] = 1, te->shape[2] = k;
        }
        if (!c->quiet)
            fprintf(stderr, "dptrain: DP-PCA to %zu dimensions (noise std %g on the Gram matrix of unit-norm rows, "
                            "sensitivity 1; %s projected; %.1fs)\n", k, pca_sigma,
                    raw ? "rows as they are" : "unit-norm rows", dpt_now() - t0);
        rc = record_pca(c, V, d, k, center_sigma_seen ? mu : NULL, raw);
    }
    dpt_free(V), dpt_free(mu), dpt_free(ptr), dpt_free(pte);
    return rc;
}

static int dpmac_make(cli_algo_ctx *c, dpt_algo **out) {
    const cli_privacy_flags *p = c->priv;
    dpt_train_config *cfg = c->cfg;
    int rc = cli_poisson_privacy_setup(c);
    if (rc) return rc;
    const double q = cfg->sample_rate;
    S.sigma = p->sigma;
    if (!p->sigma_seen) {
        /* calibrate sigma so that [DP normalization +] [DP mean +] DP-PCA + the trainer's
         * steps reach the target: the library's planning functions, as dpsgd and Python */
        uint64_t T = 0;
        dpt_status cs = dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, c->train->n, cfg->batch_size, q,
                                                     (uint64_t)c->epochs, &T);
        if (cs != DPT_OK) return cli_refuse(cs, "--epochs");
        const uint64_t spe = T / (uint64_t)c->epochs;
        dpt_ledger *pre = NULL;
        if (pre_training_ledger(c->prior, &pre) != 0) return cli_fail("--target-epsilon");
        cs = dpt_train_calibrate_sigma(pre, q, T, p->delta, p->target_eps, &S.sigma);
        dpt_ledger_free(pre);
        if (cs == DPT_ERANGE)
            return cli_error("--target-epsilon %g is unreachable: %s (the releases before training alone may exceed "
                             "it; raise --pca-sigma, --center-sigma or --normalize-sigma)", p->target_eps,
                             dpt_last_error());
        if (cs != DPT_OK) return cli_refuse(cs, "--target-epsilon");
        if (!c->quiet)
            fprintf(stderr, "dptrain: calibrated sigma %.6g for epsilon %g at delta %g after %ld epochs of "
                            "%" PRIu64 " steps (q %g%s, default accountant: min(PLD, RDP))\n",
                    S.sigma, p->target_eps, p->delta, c->epochs, spe, q,
                    pca_dims <= 0 ? "" : center_sigma_seen ? ", DP mean and DP-PCA included" : ", DP-PCA included");
        if (!c->quiet && c->prior)
            fprintf(stderr, "dptrain: that calibration includes the DP normalization statistics\n");
    }
    if (pca_dims > 0 && (rc = run_pca(c)) != 0) return rc;
    cli_print_noise_mode(c);
    dpt_dpmac_config d = dpt_dpmac_config_defaults();
    d.sigma = S.sigma;
    d.clip = p->clip;
    d.z_steps = (unsigned)z_steps;
    d.z_lr = z_lr;
    d.z_mu = z_mu;
    d.secure = p->secure;
    d.taylor_order = (unsigned)taylor_order;
    d.clip2 = clip2_seen ? clip2 : d.clip2;
    d.w_steps = (unsigned)w_steps;
    if ((rc = cli_secure_sampler(c, &d.secure_sampler))) return rc;
    return dpt_algo_dpmac_new(&d, out) == DPT_OK ? 0 : cli_fail("--algo dpmac");
}

/* The DP mean and DP-PCA releases go into the fresh run's ledger before the first step (a
 * resumed run's ledger holds them already). */
static int dpmac_started(cli_algo_ctx *c, dpt_trainer *t) {
    if (pca_dims <= 0 || c->resume) return 0;
    if (center_sigma_seen) {
        /* sensitivity C, std sigma C: multiplier sigma (secure: the lattice rounding of the d
         * released sums raises the sensitivity) */
        double mm = c->priv->secure ? dpt_privacy_secure_sigma_eff(center_sigma, S.mean_released) : center_sigma;
        if (dpt_trainer_add_gaussian_release(t, 1.0, mm, "dp-mean") != DPT_OK) return cli_fail("--center-sigma");
    }
    /* secure mode: the lattice rounding of the d(d+1)/2 released entries raises the
     * sensitivity; record the effective multiplier (sensitivity 1) */
    double mult = c->priv->secure ? dpt_privacy_secure_sigma_eff(pca_sigma, S.pca_released) : pca_sigma;
    if (dpt_trainer_add_gaussian_release(t, 1.0, mult, "dp-pca") != DPT_OK) return cli_fail("--pca-sigma");
    return 0;
}

static void dpmac_describe(const cli_algo_ctx *c, FILE *f) {
    const cli_privacy_flags *p = c->priv;
    char pca[160] = "no PCA";
    if (pca_dims > 0 && center_sigma_seen)
        snprintf(pca, sizeof pca, "DP mean (clip %g, sigma %g) + DP-PCA %ld dims, sigma_pca %g", center_clip,
                 center_sigma, pca_dims, pca_sigma);
    else if (pca_dims > 0)
        snprintf(pca, sizeof pca, "DP-PCA %ld dims, sigma_pca %g", pca_dims, pca_sigma);
    char order2[96] = "";
    if (taylor_order == 2)
        snprintf(order2, sizeof order2, ", second order: Theta2 %g, %ld W-steps per batch", clip2, w_steps);
    fprintf(f, "  algorithm dpmac (sigma %g, Theta %g%s, %ld z-steps at lr %g, mu %g, %s, q %g = expected batch %.1f, "
               "delta %g), %s lr %g, %ld epochs, seed %s, %d threads, run dir %s%s\n",
            S.sigma, p->clip, order2, z_steps, z_lr, z_mu, pca, c->cfg->sample_rate, c->cfg->sample_rate * (double)c->train->n,
            p->delta, c->optimizer, c->cfg->optim.lr, c->epochs, cli_seed_text(c->cfg), dpt_threads_resolve(c->cfg->threads),
            c->out, c->resume ? " (resumed)" : "");
}

static int dpmac_report(const cli_algo_ctx *c, dpt_trainer *t) {
    int rc = cli_report_ledger(c, t, S.sigma);
    if (rc || pca_dims <= 0) return rc;
    if (center_sigma_seen)
        printf("privacy: that epsilon covers the DP mean (Gaussian, multiplier %g, rows clipped to %g), DP-PCA "
               "(Gaussian, multiplier %g) and the training steps, composed by the accountant\n", center_sigma, center_clip,
               pca_sigma);
    else
        printf("privacy: that epsilon covers DP-PCA (Gaussian, multiplier %g) and the training steps, composed by "
               "the accountant\n", pca_sigma);
    /* The paper's accounting, for comparison only: classic Gaussian-mechanism epsilon of the
     * PCA at delta 1e-6 (valid only for epsilon < 1) plus the SGM epsilon at delta, deltas
     * added. */
    const dpt_ledger *l = dpt_trainer_ledger(t);
    double e_sgm = NAN;
    uint64_t T = dpt_ledger_steps(l);
    if (T > 0 &&
        dpt_rdp_sgm_epsilon(c->cfg->sample_rate, S.sigma, T, c->priv->delta, DPT_CONV_CLASSIC, NULL, 0, &e_sgm, NULL) !=
            DPT_OK)
        e_sgm = NAN;
    if (T == 0) e_sgm = 0;
    double e_pca = sqrt(2.0 * log(1.25 / 1e-6)) / pca_sigma;
    printf("paper's accounting (comparison only, not this run's guarantee): DP-PCA %.4g at delta 1e-6 (classic "
           "formula%s) + training %.4g at delta %g = %.4g at delta %g%s\n",
           e_pca, e_pca < 1 ? "" : ", NOT valid: it needs epsilon < 1", e_sgm, c->priv->delta, e_pca + e_sgm,
           c->priv->delta + 1e-6, center_sigma_seen ? " (the DP mean is not in the paper's pipeline: not included)" : "");
    return 0;
}

const cli_algo CLI_ALGO_DPMAC = {
    .name = "dpmac",
    .summary = "DP-MAC (auxiliary coordinates): per-example z-step, clipped per-layer Taylor coefficients, "
               "optional DP-PCA; RDP/PLD epsilon",
    .uses_privacy_flags = 1,
    .opts = OPTS,
    .check = dpmac_check,
    .planned_releases = dpmac_planned,
    .make = dpmac_make,
    .started = dpmac_started,
    .describe = dpmac_describe,
    .report = dpmac_report,
    .tag = "DP-MAC",
};

/* ==== mac: the non-private baseline ==== */

static cli_option MAC_OPTS[] = {
    {"--z-steps", CLI_LONG, &z_steps, "N", "Adam steps on the auxiliary coordinates per batch", NULL},
    {"--z-lr", CLI_DOUBLE, &z_lr, "X", "learning rate of the z-step's Adam", NULL},
    {"--z-mu", CLI_DOUBLE, &z_mu, "MU", "weight mu of the hidden layers' terms in the z-objective", NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static int mac_check(cli_algo_ctx *c) {
    (void)c;
    if (z_steps < 0 || z_steps > 100000) return cli_error("--z-steps must be in [0, 100000], got %ld", z_steps);
    if (!(z_lr > 0) || !isfinite(z_lr)) return cli_error("--z-lr must be > 0, got %g", z_lr);
    if (!(z_mu > 0) || !isfinite(z_mu)) return cli_error("--z-mu must be > 0, got %g", z_mu);
    return 0;
}

static int mac_make(cli_algo_ctx *c, dpt_algo **out) {
    (void)c;
    dpt_dpmac_config d = dpt_dpmac_config_defaults();
    d.private_ = 0;
    d.z_steps = (unsigned)z_steps;
    d.z_lr = z_lr;
    d.z_mu = z_mu;
    return dpt_algo_dpmac_new(&d, out) == DPT_OK ? 0 : cli_fail("--algo mac");
}

static void mac_describe(const cli_algo_ctx *c, FILE *f) {
    fprintf(f, "  algorithm mac (non-private method of auxiliary coordinates: no clipping, no noise, no privacy "
               "guarantee; %ld z-steps at lr %g), %s lr %g, %s batches of %zu, %ld epochs, seed %s"
               ", %d threads, run dir %s%s\n",
            z_steps, z_lr, c->optimizer, c->cfg->optim.lr, c->sampler, c->cfg->batch_size, c->epochs, cli_seed_text(c->cfg),
            dpt_threads_resolve(c->cfg->threads), c->out, c->resume ? " (resumed)" : "");
}

const cli_algo CLI_ALGO_MAC = {
    .name = "mac",
    .summary = "non-private MAC (auxiliary coordinates, DP-MAC without clipping or noise; no privacy guarantee)",
    .uses_privacy_flags = 0,
    .opts = MAC_OPTS,
    .check = mac_check,
    .make = mac_make,
    .describe = mac_describe,
    .report = NULL,
    .tag = "non-private MAC",
};
