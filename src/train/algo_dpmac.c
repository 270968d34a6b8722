/* DP-MAC (the differentially private method of auxiliary coordinates) as a strategy of the
 * training loop; see train.h and docs/dpmac.md. Per chunk of the sampled batch:
 *   1. z_k = f_k(W_k z_{k-1}) by a forward pass (k < K: the hidden layers' outputs);
 *   2. z_steps Adam steps on the per-example objective
 *        e_n = loss(out_n) + sum_{k<K} mu/2 ||z_{k,n} - f_k(W_k z_{k-1,n} + b_k)||^2,
 *      every operation elementwise or per example row (no statistic over the batch), so
 *      z_n is a function of example n and the parameters only; z lives in this state's
 *      buffers and is never written anywhere;
 *   3. per weight layer k: cotangent g_k (2 (f(a) - z) f'(a), or the output's), squared
 *      Frobenius norms of [z_{k-1}; 1] g_k^T per example (ghost norms, SQNORM), factors
 *      min(1, Theta / ||.||), weighted sum into grad (one GEMM per layer, WEIGHTED).
 * finish: + N(0, sigma^2 K Theta^2) once, divided by 2 q N (expected batch size: the
 * sensitivity of the released sum is sqrt(K) Theta for every batch, empty ones included).
 * Second order (taylor_order 2): per layer also the clipped Hessian coefficients
 * sum_n s_n c_{n,h} zhat_n zhat_n^T (one GEMM per sub-chunk of examples), both sums noised
 * with sqrt(2K) times their bound, and after the loop's optimizer step w_steps - 1 more
 * steps on the released quadratic (after_update). */
#include <dptrain/train.h>

#include <dptrain/accounting.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dpmac_internal.h"
#include "train_internal.h"

#define DPMAC_MAX_LAYERS 64
#define DPMAC_H_SUB 32              /* examples per GEMM of the Hessian coefficients */
#define DPMAC_H_MAX_ENTRIES (1u << 26) /* largest total sum_k K_k (D_k + 1)^2 of order 2 */

typedef struct {
    dpt_dpmac_config cfg;
    int structured;               /* model layout analysed */
    size_t K;                     /* weight layers */
    size_t lin[DPMAC_MAX_LAYERS]; /* model layer index of weight layer k */
    size_t act[DPMAC_MAX_LAYERS]; /* its activation layer (n_layers: none) */
    size_t width[DPMAC_MAX_LAYERS];
    size_t cap, maxw;
    float *z[DPMAC_MAX_LAYERS];   /* [cap, width[k]] auxiliary coordinates, k < K - 1 */
    float *zm[DPMAC_MAX_LAYERS], *zv[DPMAC_MAX_LAYERS]; /* Adam moments of z */
    float *gz[DPMAC_MAX_LAYERS];  /* z gradients */
    float *tmp, *tmp2;            /* [cap, maxw] */
    dpt_chunk_bufs buf;           /* loss cotangents, per-example losses */
    float *sq, *c;                /* [cap] */
    /* taylor_order 2 */
    float *S2[DPMAC_MAX_LAYERS];  /* [width_k, D_k + 1, D_k + 1]: sum_n s_n c_{n,h} zhat zhat^T, then released */
    size_t din[DPMAC_MAX_LAYERS]; /* D_k + 1 */
    float *curv;                  /* [cap, maxw] c_{n,h} */
    float *outer, *coef;          /* [DPMAC_H_SUB, max (D+1)^2], [DPMAC_H_SUB, maxw] */
    float *w0, *g1;               /* [P] w_hat and the released first-order direction */
    int has_quadratic;            /* finish() released a quadratic for after_update */
    char settings[256];           /* dpt_algo.settings: what a resumed run must keep */
    dpt_gauss_release rel;        /* private: the first-order release and the step's ledger
                                     event (made at bind; its sigma also noises the Hessian) */
} dpmac_state;

dpt_dpmac_config dpt_dpmac_config_defaults(void) {
    dpt_dpmac_config c;
    memset(&c, 0, sizeof c);
    c.sigma = 1.0;
    c.clip = 0.3;
    c.z_steps = 30;
    c.z_lr = 0.003;
    c.z_beta1 = 0.9;
    c.z_beta2 = 0.999;
    c.z_eps = 1e-8;
    c.z_mu = 1.0;
    c.taylor_order = 1;
    c.clip2 = 0.3;
    c.w_steps = 1;
    c.private_ = 1;
    return c;
}

static int is_activation(dpt_layer_kind k) {
    return k == DPT_LAYER_RELU || k == DPT_LAYER_GELU || k == DPT_LAYER_TANH || k == DPT_LAYER_SIGMOID ||
           k == DPT_LAYER_IDENTITY;
}

/* Linear [activation] Linear [activation] ... Linear (no activation after the last). */
static dpt_status analyse_model(dpmac_state *s, const dpt_model *m, dpt_loss_kind loss) {
    size_t K = 0, l = 0;
    while (l < m->n_layers) {
        const dpt_layer *L = &m->layers[l];
        DPT_CHECK(L->kind == DPT_LAYER_LINEAR && L->n_params > 0, DPT_EINVAL,
                  "dpmac: model '%s': layer %zu (%s) is not a Linear layer where one is expected (DP-MAC needs "
                  "Linear layers with elementwise activations between them: an mlp: or ae: spec)",
                  m->spec, l, L->name);
        DPT_CHECK(K < DPMAC_MAX_LAYERS, DPT_EINVAL, "dpmac: model '%s' has more than %d weight layers", m->spec,
                  DPMAC_MAX_LAYERS);
        s->lin[K] = l;
        s->act[K] = m->n_layers;
        s->width[K] = L->out_dim;
        l++;
        if (l < m->n_layers && is_activation(m->layers[l].kind)) s->act[K] = l++;
        K++;
    }
    DPT_CHECK(K >= 1, DPT_EINVAL, "dpmac: model '%s' has no weight layer", m->spec);
    DPT_CHECK(s->act[K - 1] == m->n_layers, DPT_EINVAL,
              "dpmac: model '%s' ends with an activation; the output nonlinearity belongs to the loss", m->spec);
    DPT_CHECK(loss == DPT_LOSS_SIGMOID_BCE || loss == DPT_LOSS_SOFTMAX_CE || loss == DPT_LOSS_SQUARED, DPT_EINVAL,
              "dpmac: unsupported loss %d", (int)loss);
    DPT_CHECK(loss != DPT_LOSS_SQUARED || m->in_dim == m->out_dim, DPT_EINVAL,
              "dpmac: squared-error loss reconstructs the input (an autoencoder), but model '%s' maps %zu inputs "
              "to %zu outputs",
              m->spec, m->in_dim, m->out_dim);
    s->K = K;
    s->maxw = m->in_dim;
    for (size_t k = 0; k < K; k++)
        if (s->width[k] > s->maxw) s->maxw = s->width[k];
    s->structured = 1;
    return DPT_OK;
}

static void free_bufs(dpmac_state *s) {
    for (size_t k = 0; k < DPMAC_MAX_LAYERS; k++) {
        dpt_free(s->z[k]), dpt_free(s->zm[k]), dpt_free(s->zv[k]), dpt_free(s->gz[k]);
        s->z[k] = s->zm[k] = s->zv[k] = s->gz[k] = NULL;
    }
    dpt_free(s->tmp), dpt_free(s->tmp2), dpt_free(s->sq), dpt_free(s->c);
    s->tmp = s->tmp2 = s->sq = s->c = NULL;
    for (size_t k = 0; k < DPMAC_MAX_LAYERS; k++) dpt_free(s->S2[k]), s->S2[k] = NULL;
    dpt_free(s->curv), dpt_free(s->outer), dpt_free(s->coef), dpt_free(s->w0), dpt_free(s->g1);
    s->curv = s->outer = s->coef = s->w0 = s->g1 = NULL;
    dpt_chunk_bufs_free(&s->buf);
    s->cap = 0;
}

/* Buffers of the second-order variant; refuses activations without a second derivative
 * here and models whose Hessian coefficients would not fit. */
static dpt_status reserve_order2(dpmac_state *s, const dpt_model *m, dpt_loss_kind loss, size_t cap) {
    size_t total = 0, maxd2 = 0;
    DPT_CHECK(loss == DPT_LOSS_SIGMOID_BCE || loss == DPT_LOSS_SQUARED, DPT_EINVAL,
              "dpmac: taylor_order 2 needs an output loss that is separable over the outputs (bce or mse; softmax "
              "cross-entropy couples them)");
    for (size_t k = 0; k < s->K; k++) {
        const dpt_layer *L = &m->layers[s->lin[k]];
        DPT_CHECK(L->b, DPT_EINVAL, "dpmac: taylor_order 2 needs biases (model '%s', layer %zu)", m->spec, s->lin[k]);
        if (s->act[k] < m->n_layers) {
            dpt_layer_kind a = m->layers[s->act[k]].kind;
            DPT_CHECK(a == DPT_LAYER_RELU || a == DPT_LAYER_TANH || a == DPT_LAYER_SIGMOID || a == DPT_LAYER_IDENTITY,
                      DPT_EINVAL, "dpmac: taylor_order 2: activation '%s' of model '%s' has no second derivative here "
                      "(relu, tanh, sigmoid or none)", m->layers[s->act[k]].name, m->spec);
        }
        s->din[k] = L->in_dim + 1;
        const size_t d2 = s->din[k] * s->din[k];
        total += L->out_dim * d2;
        if (d2 > maxd2) maxd2 = d2;
        DPT_CHECK(total <= DPMAC_H_MAX_ENTRIES, DPT_EINVAL,
                  "dpmac: taylor_order 2: the Hessian coefficients of model '%s' have more than %u entries (sum over "
                  "layers of out (in + 1)^2); use taylor_order 1", m->spec, DPMAC_H_MAX_ENTRIES);
    }
    for (size_t k = 0; k < s->K; k++) {
        s->S2[k] = dpt_alloc2(m->layers[s->lin[k]].out_dim, s->din[k] * s->din[k], sizeof(float),
                              "dpmac Hessian coefficients");
        if (!s->S2[k]) return DPT_ENOMEM;
    }
    s->curv = dpt_alloc2(cap, s->maxw, sizeof(float), "dpmac curvatures");
    s->outer = dpt_alloc2(DPMAC_H_SUB, maxd2, sizeof(float), "dpmac outer products");
    s->coef = dpt_alloc2(DPMAC_H_SUB, s->maxw, sizeof(float), "dpmac curvature weights");
    s->w0 = dpt_alloc(m->n_params, sizeof(float), "dpmac w_hat");
    s->g1 = dpt_alloc(m->n_params, sizeof(float), "dpmac first-order direction");
    if (!s->curv || !s->outer || !s->coef || !s->w0 || !s->g1) return DPT_ENOMEM;
    return DPT_OK;
}

static dpt_status reserve(dpmac_state *s, dpt_trainer *t) {
    dpt_model *m = t->model;
    if (!s->structured) DPT_TRY(analyse_model(s, m, t->cfg.loss));
    if (s->cap >= m->max_batch) return DPT_OK;
    free_bufs(s);
    size_t cap = m->max_batch;
    for (size_t k = 0; k + 1 < s->K; k++) {
        size_t n = cap * s->width[k];
        s->z[k] = dpt_alloc(n, sizeof(float), "dpmac auxiliary coordinates");
        s->zm[k] = dpt_alloc(n, sizeof(float), "dpmac z Adam moments");
        s->zv[k] = dpt_alloc(n, sizeof(float), "dpmac z Adam moments");
        s->gz[k] = dpt_alloc(n, sizeof(float), "dpmac z gradients");
        if (!s->z[k] || !s->zm[k] || !s->zv[k] || !s->gz[k]) return DPT_ENOMEM;
    }
    s->tmp = dpt_alloc2(cap, s->maxw, sizeof(float), "dpmac scratch");
    s->tmp2 = dpt_alloc2(cap, s->maxw, sizeof(float), "dpmac scratch");
    s->sq = dpt_alloc(cap, sizeof(float), "dpmac squared norms");
    s->c = dpt_alloc(cap, sizeof(float), "dpmac clipping factors");
    if (!s->tmp || !s->tmp2 || !s->sq || !s->c) return DPT_ENOMEM;
    DPT_TRY(dpt_chunk_bufs_reserve(&s->buf, m));
    if (s->cfg.taylor_order == 2) DPT_TRY(reserve_order2(s, m, t->cfg.loss, cap));
    s->cap = cap;
    return DPT_OK;
}

/* ==== Layer views ==== */
static const float *layer_in(const dpmac_state *s, const float *x, size_t k) { return k ? s->z[k - 1] : x; }
static float *pre_act(const dpmac_state *s, const dpt_model *m, size_t k) { return m->act[s->lin[k] + 1]; }
static float *post_act(const dpmac_state *s, const dpt_model *m, size_t k) {
    return s->act[k] < m->n_layers ? m->act[s->act[k] + 1] : pre_act(s, m, k);
}

/* a_k = W_k in_k + b_k, f_k(a_k) for every weight layer, from the current z. */
static dpt_status forward_layers(dpmac_state *s, dpt_model *m, const float *x, size_t bc) {
    for (size_t k = 0; k < s->K; k++) {
        const dpt_layer *L = &m->layers[s->lin[k]];
        DPT_TRY(L->ops->forward(L, layer_in(s, x, k), pre_act(s, m, k), bc));
        if (s->act[k] < m->n_layers) {
            const dpt_layer *A = &m->layers[s->act[k]];
            DPT_TRY(A->ops->forward(A, pre_act(s, m, k), post_act(s, m, k), bc));
        }
    }
    return DPT_OK;
}

/* Output loss and its cotangent (targets = the inputs for squared error). */
static dpt_status output_loss(dpmac_state *s, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                              double *loss_sum) {
    dpt_model *m = t->model;
    const float *targets = t->cfg.loss == DPT_LOSS_SQUARED ? x : NULL;
    DPT_TRY(dpt_loss(t->cfg.loss, post_act(s, m, s->K - 1), bc, m->out_dim, y, targets, s->buf.loss, s->buf.dout));
    if (loss_sum) {
        double ls = 0;
        for (size_t i = 0; i < bc; i++) ls += s->buf.loss[i];
        *loss_sum = ls;
    }
    return DPT_OK;
}

static double expected_batch(const dpt_trainer *t) {
    double q = t->cfg.sample_rate > 0 ? t->cfg.sample_rate : (double)t->cfg.batch_size / (double)t->train->n;
    return q * (double)t->train->n;
}

/* ==== z-step ==== */

/* gz_k = s mu (z_k - f_k(a_k)) + s d/dz_k [next layer's term]. Needs forward_layers and
 * output_loss of the current z. */
static dpt_status z_gradient(dpmac_state *s, dpt_model *m, size_t bc, float scale) {
    const size_t K = s->K;
    const float mu = (float)s->cfg.z_mu;
    for (size_t k = 0; k + 1 < K; k++) {
        const size_t w = s->width[k], n = bc * w;
        const float *p = post_act(s, m, k), *z = s->z[k];
        float *g = s->gz[k];
        for (size_t i = 0; i < n; i++) g[i] = scale * mu * (z[i] - p[i]);
        const size_t k1 = k + 1;
        const dpt_layer *L1 = &m->layers[s->lin[k1]];
        const float *dv; /* cotangent at a_{k+1} */
        if (k1 == K - 1) {
            dv = s->buf.dout; /* d loss / d out; out = a_{K-1} */
        } else {
            /* d/da_{k+1} mu/2 ||z_{k+1} - f(a_{k+1})||^2 = -mu (z_{k+1} - f(a_{k+1})) f'(a_{k+1}) */
            const size_t n1 = bc * s->width[k1];
            const float *p1 = post_act(s, m, k1), *z1 = s->z[k1];
            for (size_t i = 0; i < n1; i++) s->tmp2[i] = mu * (p1[i] - z1[i]);
            if (s->act[k1] < m->n_layers) {
                const dpt_layer *A = &m->layers[s->act[k1]];
                DPT_TRY(A->ops->backward_input(A, pre_act(s, m, k1), p1, s->tmp2, s->tmp, bc));
                dv = s->tmp;
            } else {
                dv = s->tmp2;
            }
        }
        float *dz = dv == s->tmp ? s->tmp2 : s->tmp;
        DPT_TRY(L1->ops->backward_input(L1, z, pre_act(s, m, k1), dv, dz, bc));
        for (size_t i = 0; i < n; i++) g[i] += scale * dz[i];
    }
    return DPT_OK;
}

/* Forward init + z_steps Adam steps; leaves a_k, f_k(a_k) and the loss cotangent of the
 * final z in the model/state buffers. *loss_sum: the output loss at the initial z (the
 * model's own prediction). */
static dpt_status z_step(dpmac_state *s, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                         double *loss_sum) {
    dpt_model *m = t->model;
    const size_t K = s->K;
    for (size_t k = 0; k < K; k++) { /* forward pass, layer by layer: z_k = f_k(a_k) */
        const dpt_layer *L = &m->layers[s->lin[k]];
        DPT_TRY(L->ops->forward(L, layer_in(s, x, k), pre_act(s, m, k), bc));
        if (s->act[k] < m->n_layers) {
            const dpt_layer *A = &m->layers[s->act[k]];
            DPT_TRY(A->ops->forward(A, pre_act(s, m, k), post_act(s, m, k), bc));
        }
        if (k + 1 < K) {
            memcpy(s->z[k], post_act(s, m, k), bc * s->width[k] * sizeof(float));
            memset(s->zm[k], 0, bc * s->width[k] * sizeof(float));
            memset(s->zv[k], 0, bc * s->width[k] * sizeof(float));
        }
    }
    DPT_TRY(output_loss(s, t, x, y, bc, loss_sum));
    const float scale = (float)(1.0 / expected_batch(t));
    const double b1 = s->cfg.z_beta1, b2 = s->cfg.z_beta2, eps = s->cfg.z_eps, lr = s->cfg.z_lr;
    double b1t = 1, b2t = 1;
    for (unsigned it = 0; it < s->cfg.z_steps && K > 1; it++) {
        DPT_TRY(z_gradient(s, m, bc, scale));
        b1t *= b1, b2t *= b2;
        const float c1 = (float)(1.0 / (1.0 - b1t)), c2 = (float)(1.0 / (1.0 - b2t));
        const float fb1 = (float)b1, fb2 = (float)b2, flr = (float)lr, feps = (float)eps;
        for (size_t k = 0; k + 1 < K; k++) {
            const size_t n = bc * s->width[k];
            float *z = s->z[k], *mo = s->zm[k], *vo = s->zv[k];
            const float *g = s->gz[k];
            for (size_t i = 0; i < n; i++) { /* elementwise: per example */
                mo[i] = fb1 * mo[i] + (1.0f - fb1) * g[i];
                vo[i] = fb2 * vo[i] + (1.0f - fb2) * g[i] * g[i];
                z[i] -= flr * (mo[i] * c1) / (sqrtf(vo[i] * c2) + feps);
            }
        }
        DPT_TRY(forward_layers(s, m, x, bc));
        DPT_TRY(output_loss(s, t, x, y, bc, NULL));
    }
    return DPT_OK;
}

/* Cotangent g_k [bc, width_k] of weight layer k's Taylor coefficient into out. */
static dpt_status coefficient_cotangent(dpmac_state *s, dpt_trainer *t, size_t k, size_t bc, float *out) {
    dpt_model *m = t->model;
    if (k == s->K - 1) {
        const float f = t->cfg.loss == DPT_LOSS_SQUARED ? 2.0f : 1.0f; /* d ||o - x||^2 / d o = 2 (o - x) */
        for (size_t i = 0; i < bc * m->out_dim; i++) out[i] = f * s->buf.dout[i];
        return DPT_OK;
    }
    const size_t n = bc * s->width[k];
    const float *p = post_act(s, m, k), *z = s->z[k];
    float *r = s->act[k] < m->n_layers ? s->tmp2 : out;
    for (size_t i = 0; i < n; i++) r[i] = 2.0f * (p[i] - z[i]);
    if (s->act[k] < m->n_layers) {
        const dpt_layer *A = &m->layers[s->act[k]];
        DPT_TRY(A->ops->backward_input(A, pre_act(s, m, k), p, r, out, bc));
    }
    return DPT_OK;
}

/* ==== Second order: Hessian coefficients ==== */

/* c [bc, width_k]: the second derivative of weight layer k's per-example objective T with
 * respect to its pre-activation a (per output unit h; T is separable in h):
 *   hidden, T = (z - f(a))^2:        c = 2 f'(a)^2 + 2 (f(a) - z) f''(a)
 *   squared-error output, T = (o - x)^2:  c = 2
 *   BCE output, T = softplus(o) - y o:    c = sigmoid(o) (1 - sigmoid(o)) */
static void curvature(dpmac_state *s, dpt_trainer *t, size_t k, size_t bc, float *c) {
    dpt_model *m = t->model;
    const size_t w = s->width[k], n = bc * w;
    if (k == s->K - 1) {
        const float *o = pre_act(s, m, k);
        for (size_t i = 0; i < n; i++) {
            if (t->cfg.loss == DPT_LOSS_SQUARED) {
                c[i] = 2.0f;
            } else {
                const double p = 1.0 / (1.0 + exp(-(double)o[i]));
                c[i] = (float)(p * (1.0 - p));
            }
        }
        return;
    }
    const dpt_layer_kind kind = s->act[k] < m->n_layers ? m->layers[s->act[k]].kind : DPT_LAYER_IDENTITY;
    const float *a = pre_act(s, m, k), *f = post_act(s, m, k), *z = s->z[k];
    for (size_t i = 0; i < n; i++) {
        double d1 = 1, d2 = 0;
        const double fv = f[i];
        switch (kind) {
        case DPT_LAYER_RELU: d1 = a[i] > 0 ? 1 : 0; break; /* f'' = 0 away from the kink */
        case DPT_LAYER_TANH: d1 = 1 - fv * fv, d2 = -2 * fv * d1; break;
        case DPT_LAYER_SIGMOID: d1 = fv * (1 - fv), d2 = d1 * (1 - 2 * fv); break;
        default: break;
        }
        c[i] = (float)(2 * d1 * d1 + 2 * (fv - z[i]) * d2);
    }
}

/* S2_k += sum_n s_n c_{n,h} zhat_n zhat_n^T with s_n = min(1, clip2 / ||d2T_{n,k}||_F),
 * ||d2T_{n,k}||_F = ||c_n||_2 ||zhat_n||^2 (a sum of rank-one blocks, one per h). */
static void hessian_accumulate(dpmac_state *s, size_t k, const float *in, size_t bc, const float *c) {
    const size_t w = s->width[k], D1 = s->din[k], D = D1 - 1, d2 = D1 * D1;
    for (size_t lo = 0; lo < bc; lo += DPMAC_H_SUB) {
        const size_t nb = bc - lo < DPMAC_H_SUB ? bc - lo : DPMAC_H_SUB;
        for (size_t r = 0; r < nb; r++) {
            const float *x = in + (lo + r) * D;
            const float *cr = c + (lo + r) * w;
            double zz = 1, cc = 0;
            for (size_t i = 0; i < D; i++) zz += (double)x[i] * x[i];
            for (size_t h = 0; h < w; h++) cc += (double)cr[h] * cr[h];
            const double norm = sqrt(cc) * zz;
            const double f = norm > s->cfg.clip2 ? s->cfg.clip2 / norm : 1.0;
            for (size_t h = 0; h < w; h++) s->coef[r * w + h] = (float)(f * cr[h]);
            float *o = s->outer + r * d2; /* zhat zhat^T, zhat = [x; 1] */
            for (size_t i = 0; i < D1; i++) {
                const float xi = i < D ? x[i] : 1.0f;
                for (size_t j = 0; j < D1; j++) o[i * D1 + j] = xi * (j < D ? x[j] : 1.0f);
            }
        }
        /* S2 [w, d2] += coef^T [w, nb] x outer [nb, d2] */
        dpt_sgemm(1, 0, w, d2, nb, 1.0f, s->coef, w, s->outer, d2, 1.0f, s->S2[k], d2);
    }
}

static dpt_status dpmac_begin(dpt_algo *a, dpt_trainer *t, size_t batch) {
    (void)batch;
    dpmac_state *s = a->state;
    DPT_TRY(reserve(s, t));
    memset(t->model->grad, 0, t->model->n_params * sizeof(float));
    if (s->cfg.taylor_order == 2)
        for (size_t k = 0; k < s->K; k++)
            memset(s->S2[k], 0, s->width[k] * s->din[k] * s->din[k] * sizeof(float));
    s->has_quadratic = 0;
    return DPT_OK;
}

static dpt_status dpmac_accumulate(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                   double *loss_sum) {
    dpmac_state *s = a->state;
    dpt_model *m = t->model;
    *loss_sum = 0;
    if (bc == 0) return DPT_OK;
    DPT_TRY(z_step(s, t, x, y, bc, loss_sum));
    for (size_t k = 0; k < s->K; k++) {
        const dpt_layer *L = &m->layers[s->lin[k]];
        DPT_TRY(coefficient_cotangent(s, t, k, bc, s->tmp));
        const float *in = layer_in(s, x, k);
        if (!s->cfg.private_) { /* non-private MAC: the plain sum of the coefficients */
            DPT_TRY(L->ops->backward_params(L, in, s->tmp, bc, DPT_GRAD_SUM, NULL, m->grad + L->param_offset, 0, 1));
            continue;
        }
        /* ||[z_{k-1}; 1] g^T||_F^2 per example, then sum_n min(1, Theta/||.||) dT_n */
        DPT_TRY(L->ops->backward_params(L, in, s->tmp, bc, DPT_GRAD_SQNORM, NULL, s->sq, 0, 0));
        dpt_status st = dpt_privacy_clip_factors(s->sq, bc, s->cfg.clip, s->c);
        if (st != DPT_OK) return dpt_error_context(st, "dpmac"); /* NaN/inf: DPT_ERANGE, diverged */
        DPT_TRY(L->ops->backward_params(L, in, s->tmp, bc, DPT_GRAD_WEIGHTED, s->c, m->grad + L->param_offset, 0, 1));
        if (s->cfg.taylor_order == 2) {
            curvature(s, t, k, bc, s->curv);
            hessian_accumulate(s, k, in, bc, s->curv);
        }
    }
    return DPT_OK;
}

static dpt_status dpmac_finish(dpt_algo *a, dpt_trainer *t, size_t batch) {
    dpmac_state *s = a->state;
    dpt_model *m = t->model;
    if (!s->cfg.private_) { /* non-private MAC: mean over the actual batch, no noise */
        const float inv = batch > 0 ? (float)(1.0 / (2.0 * (double)batch)) : 0.0f;
        for (size_t j = 0; j < m->n_params; j++) m->grad[j] *= inv;
        return DPT_OK;
    }
    DPT_TRY(reserve(s, t)); /* K is known even if no chunk ran */
    dpt_rng *noise = dpt_trainer_noise_rng(t);
    /* (sum + N(0, sigma^2 C^2)) / (2 qN), C = sqrt(M K) Theta (dpmac_bind); secure: the
     * lattice mechanism with the division fused into it */
    DPT_ASSERT(s->rel.coords == m->n_params);
    DPT_TRY(dpt_gauss_release_apply(&s->rel, noise, m->grad, t->threads));
    if (s->cfg.secure) return DPT_OK;
    const double M = s->cfg.taylor_order == 2 ? 2.0 : 1.0;
    const float inv = (float)s->rel.scale;
    if (s->cfg.taylor_order == 2) {
        const double C2 = sqrt(M * (double)s->K) * s->cfg.clip2;
        for (size_t k = 0; k < s->K; k++) {
            const size_t D1 = s->din[k], d2 = D1 * D1;
            float *H = s->S2[k];
            DPT_TRY(dpt_privacy_noise_add(noise, H, s->width[k] * d2, s->rel.sigma, C2, t->threads));
            for (size_t h = 0; h < s->width[k]; h++) { /* scale and symmetrize (post-processing) */
                float *Hh = H + h * d2;
                for (size_t i = 0; i < D1; i++) {
                    Hh[i * D1 + i] *= inv;
                    for (size_t j = i + 1; j < D1; j++) {
                        const float v = 0.5f * (Hh[i * D1 + j] + Hh[j * D1 + i]) * inv;
                        Hh[i * D1 + j] = Hh[j * D1 + i] = v;
                    }
                }
            }
        }
        memcpy(s->w0, m->theta, m->n_params * sizeof(float));
        memcpy(s->g1, m->grad, m->n_params * sizeof(float));
        s->has_quadratic = 1;
    }
    return DPT_OK;
}

/* grad = g1 + H (theta - w0), per layer and output unit h on [W_h; b_h]: the gradient of the
 * released quadratic (1/(2qN)) [w^T b~ + w^T C~ w] at theta. */
static void quadratic_gradient(dpmac_state *s, const dpt_model *m, float *grad) {
    memcpy(grad, s->g1, m->n_params * sizeof(float));
    for (size_t k = 0; k < s->K; k++) {
        const dpt_layer *L = &m->layers[s->lin[k]];
        const size_t D1 = s->din[k], D = D1 - 1, d2 = D1 * D1;
        const size_t ow = (size_t)(L->w - m->theta), ob = (size_t)(L->b - m->theta);
        for (size_t h = 0; h < s->width[k]; h++) {
            const float *Hh = s->S2[k] + h * d2;
            for (size_t i = 0; i < D1; i++) {
                const size_t pi = i < D ? ow + h * D + i : ob + h;
                double acc = 0;
                for (size_t j = 0; j < D1; j++) {
                    const size_t pj = j < D ? ow + h * D + j : ob + h;
                    acc += (double)Hh[i * D1 + j] * ((double)m->theta[pj] - s->w0[pj]);
                }
                grad[pi] += (float)acc;
            }
        }
    }
}

/* The remaining w_steps - 1 optimizer steps on the released quadratic (post-processing). */
static dpt_status dpmac_after_update(dpt_algo *a, dpt_trainer *t) {
    dpmac_state *s = a->state;
    if (!s->has_quadratic) return DPT_OK;
    dpt_model *m = t->model;
    const double lr = dpt_schedule_lr(&t->cfg.schedule, t->cfg.optim.lr, t->epoch);
    for (unsigned it = 1; it < s->cfg.w_steps; it++) {
        quadratic_gradient(s, m, m->grad);
        DPT_TRY(dpt_optim_step(&t->opt, m->theta, m->grad, lr));
    }
    s->has_quadratic = 0;
    return DPT_OK;
}

/* SGM events, with the secure table sampler's distance when it drew the noise */
static dpt_status dpmac_add_events(dpt_algo *a, const dpt_trainer *t, dpt_ledger *l, uint64_t count) {
    const dpmac_state *s = a->state;
    (void)t;
    return dpt_gauss_release_record(&s->rel, l, count);
}

static dpt_status dpmac_record(dpt_algo *a, dpt_trainer *t, size_t batch) {
    (void)batch;
    DPT_ASSERT(t->ledger);
    return dpmac_add_events(a, t, t->ledger, 1);
}

/* One SGM event per step; a->sigma as DP-SGD's (dpt_algo_bind_sgm). M partitions per layer
 * (b; b and C for order 2), each noised with sqrt(M K) times its own bound: the stacked
 * release has sensitivity 1 in units of the noise std / sigma. */
static dpt_status dpmac_bind(dpt_algo *a, dpt_trainer *t) {
    dpmac_state *s = a->state;
    if (!s->structured) DPT_TRY(analyse_model(s, t->model, t->cfg.loss)); /* K */
    const double M = s->cfg.taylor_order == 2 ? 2.0 : 1.0;
    return dpt_algo_bind_sgm(a, t, "dpmac", s->cfg.sigma, sqrt(M * (double)s->K) * s->cfg.clip, 2.0, s->cfg.secure,
                             s->cfg.secure_sampler, &s->rel);
}

static void dpmac_free(dpt_algo *a) {
    if (!a) return;
    dpmac_state *s = a->state;
    if (s) {
        free_bufs(s);
        free(s);
    }
    free(a);
}

dpt_status dpt_algo_dpmac_new(const dpt_dpmac_config *cfg, dpt_algo **out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_algo_dpmac_new: out is NULL");
    *out = NULL;
    DPT_CHECK(cfg, DPT_EINVAL, "dpt_algo_dpmac_new: cfg is NULL");
    DPT_CHECK(!cfg->private_ || (isfinite(cfg->clip) && cfg->clip > 0), DPT_EINVAL,
              "dpt_dpmac_config.clip: the coefficient bound Theta must be > 0, got %g", cfg->clip);
    DPT_CHECK(cfg->secure_sampler == DPT_DGAUSS_TABLE || cfg->secure_sampler == DPT_DGAUSS_CKS, DPT_EINVAL,
              "dpt_dpmac_config.secure_sampler: unknown discrete Gaussian sampler %d", (int)cfg->secure_sampler);
    DPT_CHECK(!cfg->private_ || (isfinite(cfg->sigma) && cfg->sigma > 0), DPT_EINVAL,
              "dpt_dpmac_config.sigma: the noise multiplier must be > 0, got %g (DP-MAC without noise has no finite "
              "epsilon)",
              cfg->sigma);
    DPT_CHECK(cfg->z_steps <= 100000, DPT_EINVAL, "dpt_dpmac_config.z_steps: %u is more than 100000", cfg->z_steps);
    DPT_CHECK(isfinite(cfg->z_lr) && cfg->z_lr > 0, DPT_EINVAL,
              "dpt_dpmac_config.z_lr: the z-step learning rate must be > 0, got %g", cfg->z_lr);
    DPT_CHECK(isfinite(cfg->z_mu) && cfg->z_mu > 0, DPT_EINVAL,
              "dpt_dpmac_config.z_mu: the weight of the hidden layers' z terms must be > 0, got %g", cfg->z_mu);
    DPT_CHECK(cfg->taylor_order == 1 || cfg->taylor_order == 2, DPT_EINVAL,
              "dpt_dpmac_config.taylor_order: 1 or 2, got %u", cfg->taylor_order);
    DPT_CHECK(cfg->taylor_order == 1 || (cfg->private_ && !cfg->secure), DPT_EINVAL,
              "dpt_dpmac_config.taylor_order 2 is implemented for private, non-secure runs only");
    DPT_CHECK(cfg->taylor_order == 1 || (isfinite(cfg->clip2) && cfg->clip2 > 0), DPT_EINVAL,
              "dpt_dpmac_config.clip2: the Hessian coefficient bound must be > 0, got %g", cfg->clip2);
    DPT_CHECK(cfg->w_steps >= 1 && cfg->w_steps <= 1000, DPT_EINVAL,
              "dpt_dpmac_config.w_steps: must be in [1, 1000], got %u", cfg->w_steps);
    DPT_CHECK(cfg->w_steps == 1 || cfg->taylor_order == 2, DPT_EINVAL,
              "dpt_dpmac_config.w_steps > 1 needs taylor_order 2 (on the first-order expansion every step would "
              "repeat the same direction)");
    DPT_CHECK(cfg->z_beta1 >= 0 && cfg->z_beta1 < 1 && cfg->z_beta2 >= 0 && cfg->z_beta2 < 1 && cfg->z_eps > 0,
              DPT_EINVAL,
              "dpt_dpmac_config.z_beta1, z_beta2, z_eps: the z-step Adam constants need 0 <= beta1, beta2 < 1 and "
              "eps > 0");
    dpt_algo *a = calloc(1, sizeof *a);
    dpmac_state *s = calloc(1, sizeof *s);
    if (!a || !s) {
        free(a);
        free(s);
        return dpt_set_error(DPT_ENOMEM, "dpmac: out of memory");
    }
    s->cfg = *cfg;
    const int priv = cfg->private_ != 0;
    /* sigma is checked against the ledger */
    snprintf(s->settings, sizeof s->settings,
             "clip %.9g, z_steps %u, z_lr %.9g, z_mu %.9g, Taylor order %u, clip2 %.9g, w_steps %u",
             priv ? cfg->clip : 0.0, cfg->z_steps, cfg->z_lr, cfg->z_mu, cfg->taylor_order,
             cfg->taylor_order == 2 ? cfg->clip2 : 0.0, cfg->w_steps);
    a->settings = s->settings;
    a->name = priv ? "dpmac" : "mac";
    a->is_private = priv;
    a->dp_mechanism = priv;
    a->sigma = priv ? cfg->sigma : 0.0;
    a->begin = dpmac_begin;
    a->accumulate = dpmac_accumulate;
    a->finish = dpmac_finish;
    a->record = priv ? dpmac_record : NULL;
    a->add_events = priv ? dpmac_add_events : NULL;
    a->bind = priv ? dpmac_bind : NULL;
    a->after_update = cfg->taylor_order == 2 ? dpmac_after_update : NULL;
    a->privacy_note = priv ? NULL : "non-private: MAC without clipping or noise, no privacy guarantee";
    a->free = dpmac_free;
    a->state = s;
    *out = a;
    return DPT_OK;
}

/* ==== For tests ==== */

size_t dpt_dpmac_n_weight_layers(const dpt_algo *a) { return ((const dpmac_state *)a->state)->K; }

dpt_status dpt_dpmac_debug_chunk(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                 float *z_out, float *coef_out) {
    dpmac_state *s = a->state;
    dpt_model *m = t->model;
    DPT_CHECK(bc >= 1 && bc <= m->max_batch, DPT_EINVAL, "dpmac debug: chunk of %zu examples", bc);
    DPT_TRY(reserve(s, t));
    double ls;
    DPT_TRY(z_step(s, t, x, y, bc, &ls));
    if (z_out) {
        size_t H = 0;
        for (size_t k = 0; k + 1 < s->K; k++) H += s->width[k];
        for (size_t i = 0; i < bc; i++) {
            size_t o = 0;
            for (size_t k = 0; k + 1 < s->K; k++) {
                memcpy(z_out + i * H + o, s->z[k] + i * s->width[k], s->width[k] * sizeof(float));
                o += s->width[k];
            }
        }
    }
    if (coef_out) {
        for (size_t k = 0; k < s->K; k++) {
            const dpt_layer *L = &m->layers[s->lin[k]];
            DPT_TRY(coefficient_cotangent(s, t, k, bc, s->tmp));
            DPT_TRY(L->ops->backward_params(L, layer_in(s, x, k), s->tmp, bc, DPT_GRAD_PER_EXAMPLE, NULL,
                                            coef_out + L->param_offset, m->n_params, 0));
        }
    }
    return DPT_OK;
}

dpt_status dpt_dpmac_debug_zobjective(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                      const float *z_in, double *obj, float *gz_out) {
    dpmac_state *s = a->state;
    dpt_model *m = t->model;
    DPT_CHECK(bc >= 1 && bc <= m->max_batch && z_in && obj && gz_out, DPT_EINVAL, "dpmac debug: bad arguments");
    DPT_TRY(reserve(s, t));
    size_t H = 0;
    for (size_t k = 0; k + 1 < s->K; k++) H += s->width[k];
    for (size_t i = 0, o = 0; i < bc; i++, o = 0)
        for (size_t k = 0; k + 1 < s->K; k++) {
            memcpy(s->z[k] + i * s->width[k], z_in + i * H + o, s->width[k] * sizeof(float));
            o += s->width[k];
        }
    double ls = 0;
    DPT_TRY(forward_layers(s, m, x, bc));
    DPT_TRY(output_loss(s, t, x, y, bc, &ls));
    for (size_t k = 0; k + 1 < s->K; k++) {
        const float *p = post_act(s, m, k), *z = s->z[k];
        for (size_t i = 0; i < bc * s->width[k]; i++) ls += 0.5 * s->cfg.z_mu * ((double)z[i] - p[i]) * ((double)z[i] - p[i]);
    }
    *obj = ls;
    DPT_TRY(z_gradient(s, m, bc, 1.0f));
    for (size_t i = 0, o = 0; i < bc; i++, o = 0)
        for (size_t k = 0; k + 1 < s->K; k++) {
            memcpy(gz_out + i * H + o, s->gz[k] + i * s->width[k], s->width[k] * sizeof(float));
            o += s->width[k];
        }
    return DPT_OK;
}

const float *dpt_dpmac_debug_hessian(const dpt_algo *a, size_t k, size_t *rows, size_t *d1) {
    const dpmac_state *s = a->state;
    if (k >= s->K || !s->S2[k]) return NULL;
    *rows = s->width[k], *d1 = s->din[k];
    return s->S2[k];
}

const float *dpt_dpmac_debug_g1(const dpt_algo *a) { return ((const dpmac_state *)a->state)->g1; }

dpt_status dpt_trainer_add_gaussian_release(dpt_trainer *t, double sensitivity, double sigma, const char *label) {
    DPT_CHECK(t, DPT_EINVAL, "add_gaussian_release: NULL trainer");
    DPT_CHECK(t->ledger, DPT_EINVAL, "a pre-training release (%s) needs a private algorithm's ledger",
              label ? label : "gaussian");
    DPT_CHECK(t->step == 0 && !t->resumed, DPT_EINVAL,
              "a pre-training release (%s) can only be recorded before the first step of a fresh run",
              label ? label : "gaussian");
    if (t->cfg.target_epsilon > 0) {
        /* a budget that the releases before training alone exceed: refused before the
         * caller publishes the release (the run could take no step) */
        dpt_ledger *l = NULL;
        double e = 0;
        dpt_status s = dpt_ledger_copy(t->ledger, &l);
        if (s == DPT_OK) s = dpt_ledger_add_gaussian(l, sensitivity, sigma, label);
        if (s == DPT_OK) s = dpt_ledger_epsilon(l, t->cfg.delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &e);
        dpt_ledger_free(l);
        DPT_TRY(s);
        DPT_CHECK(!(e > t->cfg.target_epsilon), DPT_ERANGE,
                  "target_epsilon %g: the releases before training alone (%s included: sensitivity %g, noise std %g) "
                  "spend epsilon %.4g at delta %g: refused before anything was released; raise their noise or the "
                  "target", t->cfg.target_epsilon, label ? label : "a Gaussian release", sensitivity, sigma, e,
                  t->cfg.delta);
    }
    return dpt_ledger_add_gaussian(t->ledger, sensitivity, sigma, label);
}
