/* DP normalization of features inside the model (Tramer & Boneh 2021's "frozen BatchNorm"
 * on ScatterNet features): per-channel DP mean and variance of the input of the model's fbn
 * layer over the whole training set, released before training with noise from the run's
 * noise stream, recorded in the ledger, and set as the layer's fixed scale and shift. See
 * dpt_trainer_feature_norm (train.h) and docs/nn.md "Frozen BatchNorm". */
#include <dptrain/comm.h>
#include <dptrain/privacy.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "train_internal.h"

#define FN_LABEL_MEAN "dp-feature-norm-mean"
#define FN_LABEL_SQ "dp-feature-norm-sq"

/* The fbn layer that the statistics set: exactly one, frozen, with nothing trained below it
 * (its input must not change during training). */
static dpt_status find_layer(const dpt_trainer *t, size_t *out) {
    const dpt_model *m = t->model;
    size_t n = 0, lf = 0;
    for (size_t l = 0; l < m->n_layers; l++)
        if (m->layers[l].kind == DPT_LAYER_CHANNEL_AFFINE) lf = l, n++;
    DPT_CHECK(n == 1, DPT_EINVAL, "feature normalization: the model %s has %zu fbn layers; it needs exactly one (its "
              "input's channel statistics set it)", m->spec, n);
    DPT_CHECK(t->frozen && t->frozen[lf], DPT_EINVAL, "feature normalization: layer %s is not frozen: add it to "
              "dpt_train_config.freeze (\"%s\") so that training keeps the DP statistics", m->layers[lf].name,
              m->layers[lf].name);
    for (size_t l = 0; l < lf; l++)
        DPT_CHECK(!dpt_train_layer_trains(t, l), DPT_EINVAL, "feature normalization: layer %s below %s trains, so "
                  "the statistics of %s's input would go stale; freeze it too", m->layers[l].name, m->layers[lf].name,
                  m->layers[lf].name);
    *out = lf;
    return DPT_OK;
}

/* The two releases as ledger events, or the refusal when they alone exceed the target. */
static dpt_status record(dpt_trainer *t, double mult) {
    if (t->cfg.target_epsilon > 0) {
        dpt_ledger *l = NULL;
        double e = 0;
        dpt_status s = dpt_ledger_copy(t->ledger, &l);
        if (s == DPT_OK) s = dpt_ledger_add_gaussian(l, 1.0, mult, FN_LABEL_MEAN);
        if (s == DPT_OK) s = dpt_ledger_add_gaussian(l, 1.0, mult, FN_LABEL_SQ);
        if (s == DPT_OK) s = dpt_ledger_epsilon(l, t->cfg.delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &e);
        dpt_ledger_free(l);
        DPT_TRY(s);
        DPT_CHECK(!(e > t->cfg.target_epsilon), DPT_ERANGE,
                  "target_epsilon %g: the releases before training alone (the feature normalization's two Gaussian "
                  "releases at noise multiplier %g included) spend epsilon %.4g at delta %g: refused before "
                  "anything was released; raise the feature normalization's sigma or the target",
                  t->cfg.target_epsilon, mult, e, t->cfg.delta);
    }
    DPT_TRY(dpt_ledger_add_gaussian(t->ledger, 1.0, mult, FN_LABEL_MEAN));
    return dpt_ledger_add_gaussian(t->ledger, 1.0, mult, FN_LABEL_SQ);
}

dpt_status dpt_trainer_feature_norm(dpt_trainer *t, double sigma, double clip_mean, double clip_sq) {
    DPT_CHECK(t, DPT_EINVAL, "feature normalization: NULL trainer");
    DPT_CHECK(t->ledger, DPT_EINVAL, "feature normalization: DP statistics need a private algorithm's ledger");
    DPT_CHECK(t->step == 0 && !t->resumed && !t->fn_done, DPT_EINVAL, "feature normalization: only once, before "
              "the first step of a fresh run (a resumed run keeps the statistics its checkpoint holds)");
    DPT_CHECK(isfinite(sigma) && sigma > 0, DPT_EINVAL, "feature normalization: sigma must be finite and > 0, got %g "
              "(statistics without noise are not private)", sigma);
    DPT_CHECK(isfinite(clip_mean) && clip_mean > 0 && isfinite(clip_sq) && clip_sq > 0, DPT_EINVAL,
              "feature normalization: the clips must be finite and > 0, got %g and %g", clip_mean, clip_sq);
    size_t lf = 0;
    DPT_TRY(find_layer(t, &lf));
    dpt_model *m = t->model;
    dpt_layer *L = &m->layers[lf];
    const size_t K = L->in_shape[0], mm = L->in_shape[1] * L->in_shape[2], d = L->in_dim, n = t->train->n;
    const int secure = t->cfg.secure;
    const double mult = secure ? dpt_privacy_secure_sigma_eff(sigma, K) : sigma;
    DPT_TRY(record(t, mult)); /* in the ledger before anything derived from the release exists */
    t->fn_done = 1;

    /* the features entering fbn for every training example, kept for the feature cache when
     * they fit in a quarter of the memory (dpt_train_feature_cache takes them) */
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double bytes = (double)n * (double)d * sizeof(float);
    const double have = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    float *F = !t->cfg.no_feature_cache && (have <= 0 || 4 * bytes <= have)
                   ? dpt_alloc2(n, d, sizeof(float), "fbn input features") : NULL;
    dpt_clear_error(); /* without F: the cache computes them again */
    double *s = dpt_alloc(4 * K, sizeof(double), "feature normalization sums");
    float *aff = dpt_alloc(2 * K, sizeof(float), "feature normalization scale and shift");
    dpt_status st = s && aff ? DPT_OK : DPT_ENOMEM;
    double *s1 = s, *s2 = s ? s + K : NULL, *tmp = s ? s + 2 * K : NULL;
    if (st == DPT_OK) memset(s, 0, 2 * K * sizeof *s);
    /* chunks of the batch buffers; the sums run in example order within a chunk and chunk
     * by chunk, so they do not depend on the thread count */
    for (size_t lo = 0; lo < n && st == DPT_OK; lo += t->max_batch) {
        const size_t bc = n - lo < t->max_batch ? n - lo : t->max_batch;
        memcpy(m->act[0], t->train->x + lo * t->train->dim, bc * t->train->dim * sizeof(float));
        st = dpt_model_forward_range(m, 0, lf, bc);
        const float *x = m->act[lf];
        for (int p = 1; p <= 2 && st == DPT_OK; p++) {
            st = dpt_dp_channel_sums(x, bc, K, mm, p, p == 1 ? clip_mean : clip_sq, tmp, NULL);
            for (size_t c = 0; st == DPT_OK && c < K; c++) (p == 1 ? s1 : s2)[c] += tmp[c];
        }
        if (st == DPT_OK && F) memcpy(F + lo * d, x, bc * d * sizeof *F);
    }
    /* Gaussian noise N(0, (sigma C_p)^2) on each sum, from the run's noise stream */
    if (st == DPT_OK) st = dpt_privacy_noise_add_sum(&t->rng_noise, s1, K, sigma, clip_mean, secure, t->threads);
    if (st == DPT_OK) st = dpt_privacy_noise_add_sum(&t->rng_noise, s2, K, sigma, clip_sq, secure, t->threads);
    if (st == DPT_OK) st = dpt_dp_channel_affine(s1, s2, K, (double)n, aff, aff + K);
    /* secure noise is each rank's own: rank 0's release is the run's */
    if (st == DPT_OK && t->nranks > 1 && secure) st = dpt_comm_bcast(aff, 2 * K * sizeof *aff, 0);
    if (st == DPT_OK) memcpy(m->theta + L->param_offset, aff, 2 * K * sizeof *aff);
    dpt_free(s);
    dpt_free(aff);
    if (st != DPT_OK) {
        dpt_free(F);
        return st;
    }
    dpt_free(t->fn_feat);
    t->fn_feat = F;
    t->fn_layer = lf;
    dpt_trainer_log(t, DPT_LOG_INFO, "feature normalization: %s set from DP channel statistics of its input over the "
                    "%zu training examples (%zu channels; clips %g and %g, noise multiplier %g; two Gaussian "
                    "releases in the ledger as \"%s\" and \"%s\")", L->name, n, K, clip_mean, clip_sq, sigma,
                    FN_LABEL_MEAN, FN_LABEL_SQ);
    return DPT_OK;
}
