/* What the training algorithms share: chunk buffers and the forward/loss/backward prologue. */
#include <dptrain/privacy.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "train_internal.h"
#include "data/augment.h"

dpt_status dpt_chunk_bufs_reserve(dpt_chunk_bufs *b, const dpt_model *m) {
    if (b->cap >= m->max_batch && b->dout && b->loss) return DPT_OK;
    dpt_free(b->dout);
    dpt_free(b->loss);
    b->cap = 0;
    b->dout = dpt_alloc2(m->max_batch, m->out_dim, sizeof(float), "loss gradients");
    b->loss = dpt_alloc(m->max_batch, sizeof(float), "losses");
    if (!b->dout || !b->loss) return DPT_ENOMEM;
    b->cap = m->max_batch;
    return DPT_OK;
}

void dpt_chunk_bufs_free(dpt_chunk_bufs *b) {
    dpt_free(b->dout);
    dpt_free(b->loss);
    memset(b, 0, sizeof *b);
}

dpt_status dpt_train_forward_backward(dpt_trainer *t, dpt_chunk_bufs *b, const float *x, const int32_t *y,
                                      const float *tg, size_t bc, float scale, double *loss_sum) {
    dpt_model *m = t->model;
    DPT_ASSERT(bc <= b->cap);
    DPT_ASSERT(!t->train->t == !tg); /* regression data: the chunk's targets (dpt_trainer_new checked the loss) */
    if (t->fc_state == 1) { /* x: the frozen trunk's cached output */
        memcpy(m->act[t->fc_layer], x, bc * t->fc_dim * sizeof *x);
        DPT_TRY(dpt_model_forward_from(m, t->fc_layer, bc));
    } else {
        DPT_TRY(dpt_model_forward(m, x, bc));
    }
    /* squared error on classification data: an autoencoder, the targets are the inputs
     * (the feature cache is not used then) */
    if (!tg && t->cfg.loss == DPT_LOSS_SQUARED) tg = x;
    DPT_CHECK(!tg || tg != x || m->in_dim == m->out_dim, DPT_EINVAL,
              "squared-error loss reconstructs the input, but the model maps %zu inputs to %zu outputs", m->in_dim,
              m->out_dim);
    size_t pad;
    if (t->cfg.loss == DPT_LOSS_TOKEN_CE) /* T = t_dim target tokens, V = out_dim / T (dpt_trainer_new checked);
                                           * a padding model's pad targets are ignored */
        DPT_TRY(dpt_loss_tokens_pad(dpt_model_output(m), bc, t->train->t_dim, m->out_dim / t->train->t_dim, tg,
                                    dpt_model_pad_id(m, &pad) ? (long long)pad : -1, b->loss, b->dout));
    else
        DPT_TRY(dpt_loss(t->cfg.loss, dpt_model_output(m), bc, m->out_dim, y, tg, b->loss, b->dout));
    double ls = 0;
    for (size_t i = 0; i < bc; i++) ls += b->loss[i];
    *loss_sum = ls;
    if (scale != 1.0f)
        for (size_t i = 0; i < bc * m->out_dim; i++) b->dout[i] *= scale;
    /* frozen layers below the lowest trained one need no cotangents */
    return dpt_model_backward_to(m, b->dout, bc, t->frozen ? t->first_trained + 1 : 1);
}

dpt_status dpt_train_param_grad(dpt_trainer *t, size_t bc, dpt_grad_mode mode, float *out, size_t ld,
                                int accumulate) {
    dpt_model *m = t->model;
    DPT_ASSERT(mode == DPT_GRAD_SUM || mode == DPT_GRAD_PER_EXAMPLE);
    if (!t->frozen) return dpt_model_param_grad(m, bc, mode, NULL, out, ld, accumulate);
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (dpt_train_layer_trains(t, l))
            DPT_TRY(L->ops->backward_params(L, m->act[l], m->dact[l + 1], bc, mode, NULL, out + L->param_offset, ld,
                                            accumulate));
    }
    return DPT_OK;
}

dpt_status dpt_algo_record_sgm(dpt_algo *a, dpt_trainer *t, size_t batch) {
    (void)batch;
    DPT_ASSERT(t->ledger); /* created by dpt_trainer_new for every private algorithm */
    return dpt_ledger_add_sgm(t->ledger, t->cfg.sample_rate, a->sigma, 1);
}

dpt_status dpt_sgm_ledger_events(dpt_ledger *l, double q, double sigma_acct, size_t coords, int secure,
                                 dpt_dgauss_method sampler, uint64_t count) {
    if (secure && sampler == DPT_DGAUSS_TABLE) {
        double mu, tv;
        DPT_TRY(dpt_privacy_secure_distance(sampler, &mu, &tv));
        return dpt_ledger_add_sgm_dgauss(l, q, sigma_acct, coords, mu, tv, count);
    }
    return dpt_ledger_add_sgm(l, q, sigma_acct, count);
}

double dpt_sgm_accounted_sigma(double sigma, int secure, size_t coords) {
    return secure ? dpt_privacy_secure_sigma_eff(sigma, coords) : sigma;
}

size_t dpt_poisson_batch_bound(size_t n, double q) {
    const double mean = q * (double)n, c = ceil(mean + 6.0 * sqrt(mean) + 8.0);
    return c >= (double)n ? n : (size_t)c;
}

dpt_status dpt_budget_steps_left(dpt_eps_after_fn eps, const void *ctx, double target, uint64_t cap,
                                 uint64_t *left) {
    double e;
    *left = 0;
    DPT_TRY(eps(ctx, 0, &e));
    if (e > target) return DPT_OK;
    uint64_t lo = 0, hi = 1; /* eps(lo) <= target */
    for (;;) {
        if (hi > cap) {
            DPT_TRY(eps(ctx, cap, &e));
            if (e <= target) {
                *left = cap;
                return DPT_OK;
            }
            hi = cap;
            break;
        }
        DPT_TRY(eps(ctx, hi, &e));
        if (e > target) break;
        lo = hi;
        hi *= 2;
    }
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        DPT_TRY(eps(ctx, mid, &e));
        if (e <= target) lo = mid;
        else hi = mid;
    }
    *left = lo;
    return DPT_OK;
}


const char *dpt_sampler_enum_name(dpt_sampler_kind k) {
    switch (k) {
    case DPT_SAMPLER_SHUFFLE: return "DPT_SAMPLER_SHUFFLE";
    case DPT_SAMPLER_POISSON: return "DPT_SAMPLER_POISSON";
    case DPT_SAMPLER_FULL: return "DPT_SAMPLER_FULL";
    case DPT_SAMPLER_POISSON_REJECT: return "DPT_SAMPLER_POISSON_REJECT";
    }
    return "an unknown sampler";
}

dpt_status dpt_algo_bind_sgm(dpt_algo *a, const dpt_trainer *t, const char *name, double sigma, double sens,
                             double div, int secure, dpt_dgauss_method sampler, dpt_gauss_release *rel) {
    /* checked here, when the trainer is made, not in the first step */
    DPT_CHECK(t->cfg.sampler == DPT_SAMPLER_POISSON, DPT_EINVAL,
              "%s needs dpt_train_config.sampler = DPT_SAMPLER_POISSON, not %s (its epsilon is computed for Poisson "
              "sampling)", name, dpt_sampler_enum_name(t->cfg.sampler));
    DPT_CHECK(secure == t->cfg.secure, DPT_EINVAL, "%s: the algorithm's secure flag (%d) differs from the run's (%d)",
              name, secure, t->cfg.secure);
    /* divide by the expected batch size q N, never |B|: the batch size is private */
    const double qN = t->cfg.sample_rate * (double)t->train->n;
    DPT_CHECK(qN > 0, DPT_EINVAL, "%s: expected batch size qN = %g must be > 0", name, qN);
    /* the noised coordinates: the trained parameters (frozen ones are exactly 0, never
     * rounded or noised; the lattice rounding's sensitivity grows with their number) */
    DPT_TRY(dpt_error_context(dpt_gauss_release_init(rel, t->cfg.sample_rate, sigma, sens, 1.0 / (div * qN),
                                                     t->n_trained, secure, sampler), "%s", name));
    a->sigma = rel->sigma_acct;
    return DPT_OK;
}

void dpt_algo_free(dpt_algo *a) {
    if (a && a->free) a->free(a);
}

void dpt_train_gather(dpt_trainer *t, const uint32_t *idx, size_t bc) {
    if (t->fc_state == 1) {
        for (size_t i = 0; i < bc; i++) {
            DPT_ASSERT(idx[i] < t->train->n);
            memcpy(t->xb + i * t->fc_dim, t->fc + (size_t)idx[i] * t->fc_dim, t->fc_dim * sizeof *t->xb);
        }
        for (size_t i = 0; t->train->y && i < bc; i++) t->yb[i] = t->train->y[idx[i]];
    } else {
        dpt_dataset_gather(t->train, idx, bc, t->xb, t->yb);
    }
    dpt_dataset_gather_targets(t->train, idx, bc, t->tb);
}

/* ==== Augmentation ==== */

dpt_status dpt_train_augment(dpt_trainer *t, const float *x, const uint32_t *idx, size_t n, size_t K, float *out) {
    const size_t C = t->aug_shape[0], H = t->aug_shape[1], W = t->aug_shape[2], D = C * H * W;
    DPT_ASSERT(t->cfg.augment != DPT_AUGMENT_NONE && D == t->model->in_dim && K >= 1 &&
               K * DPT_AUGMENT_WORDS <= DPT_RNG_BUF_WORDS);
    /* keyed by the run's seed, which a resume may restore after the trainer was made */
    if (t->rng_aug_live && t->rng_aug.seed != t->cfg.seed) {
        dpt_rng_free(&t->rng_aug);
        t->rng_aug_live = 0;
    }
    if (!t->rng_aug_live) {
        DPT_TRY(dpt_rng_init(&t->rng_aug, t->cfg.seed, DPT_STREAM_AUGMENT));
        t->rng_aug_live = 1;
    }
    uint32_t words[DPT_RNG_BUF_WORDS];
    dpt_rng *r = &t->rng_aug;
    for (size_t i = 0; i < n; i++) {
        /* substream idx + 1 (substream 0 is the stream's sequential one, unused here), from
         * block 16 step: the refill reads 16 blocks (256 words), of which K * 3 are used, so
         * no two (example, step) pairs share a word */
        r->sub = (uint64_t)idx[i] + 1;
        r->block = 16 * t->step;
        r->pos = DPT_RNG_BUF_WORDS;
        dpt_rng_fill_u32(r, words, K * DPT_AUGMENT_WORDS);
        dpt_augment_copies(x + i * D, C, H, W, 4, t->cfg.augment == DPT_AUGMENT_CROP_FLIP, K, words,
                           out + i * K * D);
    }
    return DPT_OK;
}

/* Why the features of the layers below l0 (the lowest trained one) are not cached, or NULL
 * when they can be. */
static const char *cache_refusal(const dpt_trainer *t, size_t l0) {
    const dpt_model *m = t->model;
    if (t->cfg.no_feature_cache) return "no_feature_cache is set";
    if (!t->algo->cacheable) return "the algorithm runs the model itself";
    if (t->cfg.augment != DPT_AUGMENT_NONE) return "augmentation changes the inputs at every step";
    if (t->cfg.loss == DPT_LOSS_SQUARED && !t->train->t) return "the loss reconstructs the input";
    if (dpt_model_pad_id(m, NULL) && l0 > 0)
        return "the model masks padding, and the masks come from the token ids, which the cached features lack";
    for (size_t r = l0; r < m->n_layers; r++)
        if (m->layers[r].residual_from && m->layers[r].residual_from - 1 < l0)
            return "a residual connection skips from below the lowest trained layer into the trained ones";
    return NULL;
}

void dpt_train_feature_cache_check(dpt_trainer *t) {
    if (t->fc_state != 1 || !t->fc_trunk_n ||
        !memcmp(t->fc_trunk, t->model->theta, t->fc_trunk_n * sizeof *t->fc_trunk))
        return;
    dpt_free(t->fc);
    dpt_free(t->fc_test);
    dpt_free(t->fc_trunk);
    t->fc = t->fc_trunk = t->fc_test = NULL;
    t->fc_state = 0;
    dpt_trainer_log(t, DPT_LOG_NOTE, "frozen layers: their parameters changed since their output was cached: "
                    "computing it again");
}

/* out [n, dim] = the output of layers [first, l0) for their input x [n, xdim] (act[first]),
 * in chunks of the trainer's batch buffers; out may be x when dim == xdim (each chunk is
 * copied in before its rows are written) */
static dpt_status trunk_forward_from(const dpt_trainer *t, dpt_model *m, size_t first, size_t l0, const float *x,
                                     size_t xdim, size_t n, float *out, size_t dim) {
    dpt_status st = DPT_OK;
    for (size_t lo = 0; lo < n && st == DPT_OK; lo += t->max_batch) {
        const size_t bc = n - lo < t->max_batch ? n - lo : t->max_batch;
        memcpy(m->act[first], x + lo * xdim, bc * xdim * sizeof(float));
        st = dpt_model_forward_range(m, first, l0, bc);
        if (st == DPT_OK) memcpy(out + lo * dim, m->act[l0], bc * dim * sizeof *out);
    }
    return st;
}

/* out [n, dim] = the trunk's output (layers before l0) for x [n, xdim] */
static dpt_status trunk_forward(const dpt_trainer *t, dpt_model *m, size_t l0, const float *x, size_t xdim, size_t n,
                                float *out, size_t dim) {
    return trunk_forward_from(t, m, 0, l0, x, xdim, n, out, dim);
}

dpt_status dpt_train_feature_cache(dpt_trainer *t) {
    if (t->fc_state) return DPT_OK;
    t->fc_state = -1;
    dpt_model *m = t->model;
    /* the trunk: the layers below the lowest trained one. Its output is worth keeping when it
     * holds frozen parameters or a fixed transform (a scattering layer), whose output never
     * changes either; a trunk of cheap parameter-free layers (pooling, flatten) is not. */
    size_t l0 = t->first_trained;
    if (!t->frozen)
        for (l0 = 0; l0 < m->n_layers && !m->layers[l0].n_params; l0++) continue;
    if (l0 == m->n_layers) return DPT_OK;
    size_t trunk_n = 0; /* the frozen layers' parameters below the lowest trained one: theta[0, trunk_n) */
    int fixed = 0;
    for (size_t l = 0; l < l0; l++) {
        if (m->layers[l].n_params && m->layers[l].param_offset + m->layers[l].n_params > trunk_n)
            trunk_n = m->layers[l].param_offset + m->layers[l].n_params;
        fixed |= m->layers[l].kind == DPT_LAYER_SCATTER;
    }
    if (!trunk_n && !fixed) return DPT_OK;
    const char *what = trunk_n ? "frozen layers" : "fixed layers";
    const char *why = cache_refusal(t, l0);
    const size_t n = t->train->n, dim = m->layers[l0].in_dim;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double bytes = (double)n * (double)dim * sizeof(float);
    const double have = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (!why && have > 0 && 4 * bytes > have) why = "it would take more than a quarter of the machine's memory";
    float *fc = NULL, *xb = NULL, *trunk = NULL;
    /* the fbn layer's input kept by dpt_trainer_feature_norm: the trunk continues from it */
    float *fn = t->fn_feat;
    const size_t fn_l = t->fn_layer, fn_dim = fn ? m->layers[fn_l].in_dim : 0;
    t->fn_feat = NULL;
    if (fn && (why || fn_l >= l0)) dpt_free(fn), fn = NULL;
    int in_place = 0;
    if (!why && fn && fn_dim == dim) fc = fn, fn = NULL, in_place = 1; /* computed in place */
    if (!why && ((!fc && !(fc = dpt_alloc2(n, dim, sizeof *fc, "frozen layers' features"))) ||
                 (trunk_n && !(trunk = dpt_alloc2(trunk_n, 1, sizeof *trunk, "frozen layers' parameters")))))
        why = "out of memory";
    if (!why && dim > t->xb_cap && !(xb = dpt_alloc2(t->max_batch, dim, sizeof *xb, "batch features")))
        why = "out of memory";
    if (why) {
        dpt_free(fc);
        dpt_free(trunk);
        dpt_free(fn);
        fc = trunk = fn = NULL;
    }
    if (why) {
        dpt_clear_error(); /* an allocation failure falls back to running the frozen layers */
        dpt_trainer_log(t, DPT_LOG_NOTE, "%s: their output is not cached (%s): they run at every step", what,
                        why);
        return DPT_OK;
    }
    /* the trunk's forward pass over the training set, in chunks of the batch buffers (from
     * the fbn layer's kept input when there is one) */
    dpt_status st;
    if (in_place) st = trunk_forward_from(t, m, fn_l, l0, fc, dim, n, fc, dim);
    else if (fn) st = trunk_forward_from(t, m, fn_l, l0, fn, fn_dim, n, fc, dim);
    else st = trunk_forward(t, m, l0, t->train->x, t->train->dim, n, fc, dim);
    dpt_free(fn);
    if (st != DPT_OK) {
        dpt_free(fc);
        dpt_free(xb);
        dpt_free(trunk);
        return st;
    }
    if (trunk_n) memcpy(trunk, m->theta, trunk_n * sizeof *trunk);
    /* the test set's features too (evaluated every epoch): when they fit beside the training
     * set's, and the run is not split into shards (those evaluate from the inputs) */
    const size_t nt = t->test && !t->dist ? t->test->n : 0;
    float *ft = NULL;
    if (nt && t->test->dim == t->train->dim && (have <= 0 || 4 * (bytes + (double)nt * dim * sizeof(float)) <= have) &&
        (ft = dpt_alloc2(nt, dim, sizeof *ft, "test features")) != NULL) {
        st = trunk_forward(t, m, l0, t->test->x, t->test->dim, nt, ft, dim);
        if (st != DPT_OK) {
            dpt_free(ft), dpt_free(fc), dpt_free(xb), dpt_free(trunk);
            return st;
        }
    }
    dpt_clear_error(); /* a failed allocation of the test features: evaluated from the inputs */
    t->fc_test = ft;
    if (xb) {
        dpt_free(t->xb);
        t->xb = xb;
        t->xb_cap = dim;
    }
    t->fc = fc;
    t->fc_trunk = trunk;
    t->fc_trunk_n = trunk_n;
    t->fc_dim = dim;
    t->fc_layer = l0;
    t->fc_state = 1;
    dpt_trainer_log(t, DPT_LOG_INFO, "%s: their output for the %zu training examples is computed once and "
                    "kept (%.3g MB; no_feature_cache runs them at every step instead)", what, n, bytes / 1e6);
    return DPT_OK;
}
