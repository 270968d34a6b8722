/* PDP-SGD (the proportional "DP regularization" of the paper in docs/pdpsgd.md) and the
 * proportional-noise variant it is derived from. Neither is differentially private: there
 * is no sensitivity bound and no accountant, so both are non-private strategies
 * (is_private = 0, no ledger, no epsilon; metrics carry privacy_note "no formal DP
 * guarantee"); their leakage is measured by `dptrain audit`.
 *
 * PDP-SGD per step, for the sampled batch B:
 *   grad = (1/|B|) sum_n grad l_n                        (as non-private SGD)
 *   for every Linear layer with weight W [K, D] and input x [n, D]:
 *     m_k   = (1/|B|) sum_n x_{n,k}^2                     (mean of squares, in double)
 *     dW_jk += 2 kappa m_k W_jk + 2 lambda W_jk
 *     db_j  += 2 (kappa + lambda) b_j                     (a bias multiplies x = 1)
 * x is the layer's input as computed in the forward pass, treated as a constant.
 * With cfg.sigma > 0, kappa is the paper's (eta_t sigma)^2 for this step's learning rate
 * eta_t (Section IV: E[(y~ - t)^2] = (y - t)^2 + eta^2 sigma^2 sum_i theta_i^2 x_i^2 after the
 * plain SGD step theta -= eta (g + eps), eps_i ~ N(0, (sigma theta_i)^2)). */
#include <dptrain/train.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

typedef struct {
    dpt_pdp_config cfg;
    dpt_chunk_bufs buf;
    double inv_b;
    double *sumsq;   /* [sum of Linear in_dims] sum over the batch of x_{n,k}^2 */
    size_t n_sumsq;
    /* proportional noise */
    double sigma;
    float *e;        /* [P] standard normal draws */
    size_t n_e;
} pdp_state;

double dpt_pdp_kappa(double eta, double sigma) { return (eta * sigma) * (eta * sigma); }

static dpt_status pdp_reserve(pdp_state *s, const dpt_model *m) {
    size_t n = 0;
    for (size_t l = 0; l < m->n_layers; l++)
        if (m->layers[l].kind == DPT_LAYER_LINEAR) n += m->layers[l].in_dim;
    if (n > s->n_sumsq) {
        dpt_free(s->sumsq);
        s->sumsq = dpt_alloc(n, sizeof(double), "pdp-sgd input second moments");
        if (!s->sumsq) return DPT_ENOMEM;
        s->n_sumsq = n;
    }
    return DPT_OK;
}

static dpt_status pdp_begin(dpt_algo *a, dpt_trainer *t, size_t batch) {
    pdp_state *s = a->state;
    DPT_TRY(dpt_chunk_bufs_reserve(&s->buf, t->model));
    DPT_TRY(pdp_reserve(s, t->model));
    memset(t->model->grad, 0, t->model->n_params * sizeof(float));
    if (s->n_sumsq) memset(s->sumsq, 0, s->n_sumsq * sizeof(double));
    s->inv_b = batch ? 1.0 / (double)batch : 0.0;
    return DPT_OK;
}

static dpt_status pdp_accumulate(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                 double *loss_sum) {
    pdp_state *s = a->state;
    dpt_model *m = t->model;
    DPT_TRY(dpt_train_forward_backward(t, &s->buf, x, y, dpt_trainer_batch_targets(t), bc, (float)s->inv_b, loss_sum));
    DPT_TRY(dpt_model_param_grad(m, bc, DPT_GRAD_SUM, NULL, m->grad, 0, 1));
    if (s->cfg.kappa == 0 && s->cfg.sigma == 0) return DPT_OK;
    size_t off = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (L->kind != DPT_LAYER_LINEAR) continue;
        const float *xl = m->act[l]; /* this layer's input, [bc, D] */
        size_t D = L->in_dim;
        double *ss = s->sumsq + off;
        for (size_t n = 0; n < bc; n++)
            for (size_t k = 0; k < D; k++) {
                double v = xl[n * D + k];
                ss[k] += v * v;
            }
        off += D;
    }
    return DPT_OK;
}

/* Adds the regularizer's gradient (needs sumsq of the whole batch). */
static dpt_status pdp_finish(dpt_algo *a, dpt_trainer *t, size_t batch) {
    pdp_state *s = a->state;
    dpt_model *m = t->model;
    if (batch == 0) return DPT_OK; /* no examples: no step is taken */
    double kappa = s->cfg.kappa;
    if (s->cfg.sigma > 0) /* eta_t: the lr the optimizer uses for this step */
        kappa = dpt_pdp_kappa(dpt_schedule_lr(&t->cfg.schedule, t->cfg.optim.lr, t->epoch), s->cfg.sigma);
    double lam2 = 2.0 * s->cfg.lambda, kap2 = 2.0 * kappa;
    if (lam2 == 0 && kap2 == 0) return DPT_OK;
    size_t off = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (!L->n_params) continue;
        if (L->kind != DPT_LAYER_LINEAR) {
            /* no other parameterized layer exists yet; refuse rather than silently skip */
            return dpt_set_error(DPT_EINVAL, "pdp-sgd: layer %s has parameters but is not Linear: the proportional "
                                 "regularizer is defined for Linear layers only", L->name);
        }
        size_t K = L->out_dim, D = L->in_dim;
        float *gw = m->grad + (size_t)(L->w - m->theta);
        const double *ss = s->sumsq ? s->sumsq + off : NULL;
        for (size_t j = 0; j < K; j++)
            for (size_t k = 0; k < D; k++) {
                double mk = kap2 != 0 ? ss[k] * s->inv_b : 0.0;
                gw[j * D + k] += (float)((lam2 + kap2 * mk) * (double)L->w[j * D + k]);
            }
        if (L->b) {
            float *gb = m->grad + (size_t)(L->b - m->theta);
            for (size_t j = 0; j < K; j++) gb[j] += (float)((lam2 + kap2) * (double)L->b[j]);
        }
        off += D;
    }
    return DPT_OK;
}

/* theta_i <- theta_i (1 + eta sigma e_i) after the optimizer step. */
static dpt_status propnoise_after_update(dpt_algo *a, dpt_trainer *t) {
    pdp_state *s = a->state;
    dpt_model *m = t->model;
    size_t P = m->n_params;
    if (s->n_e < P) {
        dpt_free(s->e);
        s->e = dpt_alloc(P, sizeof(float), "proportional noise draws");
        if (!s->e) return DPT_ENOMEM;
        s->n_e = P;
    }
    double eta = dpt_schedule_lr(&t->cfg.schedule, t->cfg.optim.lr, t->epoch);
    double rel = eta * s->sigma;
    DPT_TRY(dpt_rng_gauss_fill(dpt_trainer_noise_rng(t), s->e, P, 1.0f, 0, t->threads));
    for (size_t i = 0; i < P; i++) m->theta[i] = (float)((double)m->theta[i] * (1.0 + rel * (double)s->e[i]));
    return DPT_OK;
}

static void pdp_free(dpt_algo *a) {
    if (!a) return;
    pdp_state *s = a->state;
    if (s) {
        dpt_chunk_bufs_free(&s->buf);
        dpt_free(s->sumsq);
        dpt_free(s->e);
        free(s);
    }
    free(a);
}

static dpt_status pdp_alloc(dpt_algo **out, pdp_state **st) {
    dpt_algo *a = calloc(1, sizeof *a);
    pdp_state *s = calloc(1, sizeof *s);
    if (!a || !s) {
        free(a);
        free(s);
        return dpt_set_error(DPT_ENOMEM, "pdp-sgd: out of memory");
    }
    a->is_private = 0;
    a->privacy_note = "no formal DP guarantee";
    a->begin = pdp_begin;
    a->accumulate = pdp_accumulate;
    a->regression = 1; /* the prologue's squared error against the targets */
    a->finish = pdp_finish;
    a->record = NULL;
    a->free = pdp_free;
    a->state = s;
    *out = a;
    *st = s;
    return DPT_OK;
}

dpt_status dpt_algo_pdpsgd_new(const dpt_pdp_config *cfg, dpt_algo **out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_algo_pdpsgd_new: out is NULL");
    *out = NULL;
    DPT_CHECK(cfg, DPT_EINVAL, "dpt_algo_pdpsgd_new: cfg is NULL");
    DPT_CHECK(isfinite(cfg->lambda) && cfg->lambda >= 0, DPT_EINVAL, "dpt_pdp_config.lambda: must be >= 0, got %g",
              cfg->lambda);
    DPT_CHECK(isfinite(cfg->kappa) && cfg->kappa >= 0, DPT_EINVAL, "dpt_pdp_config.kappa: must be >= 0, got %g",
              cfg->kappa);
    DPT_CHECK(isfinite(cfg->sigma) && cfg->sigma >= 0, DPT_EINVAL, "dpt_pdp_config.sigma: must be >= 0, got %g",
              cfg->sigma);
    DPT_CHECK(!(cfg->sigma > 0 && cfg->kappa > 0), DPT_EINVAL,
              "dpt_pdp_config.sigma: kappa = (eta sigma)^2 is derived from sigma; give kappa or sigma, not both");
    dpt_algo *a;
    pdp_state *s;
    DPT_TRY(pdp_alloc(&a, &s));
    s->cfg = *cfg;
    a->name = "pdp-sgd";
    *out = a;
    return DPT_OK;
}

dpt_status dpt_algo_propnoise_new(const dpt_propnoise_config *cfg, dpt_algo **out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_algo_propnoise_new: out is NULL");
    *out = NULL;
    DPT_CHECK(cfg, DPT_EINVAL, "dpt_algo_propnoise_new: cfg is NULL");
    DPT_CHECK(isfinite(cfg->sigma) && cfg->sigma > 0, DPT_EINVAL,
              "dpt_propnoise_config.sigma: the relative noise must be > 0, got %g", cfg->sigma);
    DPT_CHECK(isfinite(cfg->lambda) && cfg->lambda >= 0, DPT_EINVAL,
              "dpt_propnoise_config.lambda: must be >= 0, got %g", cfg->lambda);
    dpt_algo *a;
    pdp_state *s;
    DPT_TRY(pdp_alloc(&a, &s));
    s->cfg.lambda = cfg->lambda;
    s->cfg.kappa = 0;
    s->cfg.sigma = 0;
    s->sigma = cfg->sigma;
    a->name = "proportional-noise";
    a->after_update = propnoise_after_update;
    *out = a;
    return DPT_OK;
}
