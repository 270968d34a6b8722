/* Noisy full-batch gradient descent (Eq. 4 / Theorem E.1 of Ye et al., "Initialization
 * Matters") with the streaming KL estimator over every candidate neighbour, and the
 * linearized-network option. See include/dptrain/train.h for the contract and
 * docs/kl_privacy.md for the math.
 *
 * One step (the full sampler hands over all n records, in chunks of max_batch):
 *   begin       linearized: theta <- W0 for the whole step (delta = W - W0 kept aside);
 *               replace: the k candidates' layer inputs and cotangents at this W, and
 *               their gradients g_z (k x P) only if a layer has no cross op (Linear has)
 *   accumulate  forward (+ JVP along delta), per-example loss cotangents, backward,
 *               SUM into grad; with the estimator also ||g_i||^2 (SQNORM) and <g_i, g_z>
 *               (dpt_model_param_cross: for a Linear layer (dv_i . dv_z)(x_i . x_z), from
 *               the candidates' kept layer inputs and cotangents) per record; with several
 *               chunks, each chunk's layer inputs and cotangents are kept (kl_keep_bytes)
 *   finish      gbar = sum / n; <g_i, gbar> (DOT mode: for a Linear layer dv_i . (Gbar x_i),
 *               one GEMM per layer) from the model's activations (one chunk), the kept ones
 *               (several chunks), or a second forward and backward per chunk (over the
 *               memory budget); the held-out pass for "add"; the per-candidate KL sums;
 *               then grad = gbar + sqrt(2 sigma^2/eta) Z and, linearized, theta <- W, so
 *               the SGD step W - eta grad is Eq. 4.
 * The step without the estimator is a plain gradient step plus the noise; the estimator
 * adds about one forward's worth of GEMMs (the DOT pass) plus the held-out records' pass
 * (bench/kl_estimator). */
#include <dptrain/train.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

/* Copies of the model's layer inputs act[l] [rows, D_l] and output cotangents dact[l + 1]
 * [rows, K_l] for every layer l with parameters (NULL for the others), so that DOT and
 * cross products can run after the model has moved on to other records. With no_input,
 * the model's input act[0] (the records themselves) is not copied: x[0] stays NULL and
 * the caller points the view at the data. */
typedef struct {
    float *buf;
    float **x, **dv; /* [n_layers] */
    const float **vx, **vdv; /* [n_layers]: views of a block of rows (act_rows_view) */
    size_t rows;
} act_rows;

static size_t act_rows_floats(const dpt_model *m, int no_input) {
    size_t f = 0;
    for (size_t l = 0; l < m->n_layers; l++)
        if (m->layers[l].n_params) f += (l == 0 && no_input ? 0 : m->layers[l].in_dim) + m->layers[l].out_dim;
    return f;
}

static void act_rows_free(act_rows *a) {
    dpt_free(a->buf);
    free(a->x);
    free(a->dv);
    free(a->vx);
    free(a->vdv);
    memset(a, 0, sizeof *a);
}

static dpt_status act_rows_alloc(act_rows *a, const dpt_model *m, size_t rows, int no_input) {
    memset(a, 0, sizeof *a);
    const size_t L = m->n_layers;
    a->buf = dpt_alloc2(rows, act_rows_floats(m, no_input), sizeof(float), "kept activations");
    a->x = calloc(L, sizeof *a->x);
    a->dv = calloc(L, sizeof *a->dv);
    a->vx = calloc(L, sizeof *a->vx);
    a->vdv = calloc(L, sizeof *a->vdv);
    if (!a->buf || !a->x || !a->dv || !a->vx || !a->vdv) {
        act_rows_free(a);
        return dpt_set_error(DPT_ENOMEM, "noisy-gd: out of memory for the kept activations (%zu records)", rows);
    }
    a->rows = rows;
    float *p = a->buf;
    for (size_t l = 0; l < L; l++) {
        const dpt_layer *Ly = &m->layers[l];
        if (!Ly->n_params) continue;
        if (!(l == 0 && no_input)) {
            a->x[l] = p;
            p += rows * Ly->in_dim;
        }
        a->dv[l] = p;
        p += rows * Ly->out_dim;
    }
    return DPT_OK;
}

/* rows [row0, row0 + bc) <- act[l] and dact[l + 1] of the model's last forward/backward */
static void act_rows_save(act_rows *a, const dpt_model *m, size_t row0, size_t bc) {
    DPT_ASSERT(row0 + bc <= a->rows);
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *Ly = &m->layers[l];
        if (!Ly->n_params) continue;
        if (a->x[l]) memcpy(a->x[l] + row0 * Ly->in_dim, m->act[l], bc * Ly->in_dim * sizeof(float));
        memcpy(a->dv[l] + row0 * Ly->out_dim, m->dact[l + 1], bc * Ly->out_dim * sizeof(float));
    }
}

/* a->vx, a->vdv <- views of the rows from row0 on */
static void act_rows_view(act_rows *a, const dpt_model *m, size_t row0) {
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *Ly = &m->layers[l];
        a->vx[l] = Ly->n_params && a->x[l] ? a->x[l] + row0 * Ly->in_dim : NULL;
        a->vdv[l] = Ly->n_params ? a->dv[l] + row0 * Ly->out_dim : NULL;
    }
}

typedef struct {
    dpt_noisy_gd_config cfg;
    double c;             /* KL constant */
    dpt_chunk_bufs buf;
    size_t n, nh, k, P, K, mb;
    int checked;          /* the trainer's settings were validated at the first step */
    uint64_t steps;
    /* linearized */
    float *theta0, *cur, *delta, *olin; /* [P], [P], [P], [mb, K] */
    /* estimator */
    float *sq, *ipf;      /* [mb], [mb] */
    act_rows keep;        /* [n] rows of this step's records (several chunks, within budget) */
    act_rows zkeep;       /* [k] rows of the replacement candidates at this step's W */
    double *crossc;       /* [mb, k] one chunk's <g_i, g_zj> */
    double *sq_i, *ip_i;  /* [n] this step, by record index */
    double *cross;        /* [n, k] <g_i, g_zj> this step */
    float *gz;            /* [k, P] candidates' gradients this step */
    size_t *zidx;         /* [k] held-out indices of the replacement candidates */
    double *sq_z;         /* [k] ||g_zj||^2 this step */
    float *zx;            /* [k, D] */
    int32_t *zy;          /* [k] */
    double *kl_rm, *kl_add, *kl_rep; /* [n], [nh], [n, k] running sums */
    size_t pos;           /* records accumulated in this step */
} ngd_state;

dpt_noisy_gd_config dpt_noisy_gd_config_defaults(void) {
    dpt_noisy_gd_config c;
    memset(&c, 0, sizeof c);
    c.eta = 0.01;
    c.sigma = 0.01;
    c.kl = 0;
    c.constant = DPT_KL_EXACT;
    c.replace_candidates = 1;
    c.kl_keep_bytes = (size_t)1 << 30;
    return c;
}

static void ngd_free_state(ngd_state *s) {
    if (!s) return;
    dpt_chunk_bufs_free(&s->buf);
    dpt_free(s->theta0);
    dpt_free(s->cur);
    dpt_free(s->delta);
    dpt_free(s->olin);
    dpt_free(s->sq);
    dpt_free(s->ipf);
    act_rows_free(&s->keep);
    act_rows_free(&s->zkeep);
    dpt_free(s->crossc);
    dpt_free(s->sq_i);
    dpt_free(s->ip_i);
    dpt_free(s->cross);
    dpt_free(s->gz);
    dpt_free(s->zidx);
    dpt_free(s->sq_z);
    dpt_free(s->zx);
    dpt_free(s->zy);
    dpt_free(s->kl_rm);
    dpt_free(s->kl_add);
    dpt_free(s->kl_rep);
    free(s);
}

static double dot_f(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t j = 0; j < n; j++) s += (double)a[j] * (double)b[j];
    return s;
}

/* Forward of x [bc] at the current theta (linearized: theta = W0, plus the JVP along
 * delta), per-example losses into buf.loss and unscaled cotangents dl_i/do into buf.dout,
 * and the backward pass when `backward`. */
static dpt_status chunk_forward(ngd_state *s, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                int backward, double *loss_sum) {
    dpt_model *m = t->model;
    DPT_TRY(dpt_model_forward(m, x, bc));
    const float *o = dpt_model_output(m);
    if (s->cfg.linearized) {
        DPT_TRY(dpt_model_jvp(m, s->delta, NULL, bc, s->olin));
        for (size_t i = 0; i < bc * s->K; i++) s->olin[i] += o[i];
        o = s->olin;
    }
    DPT_TRY(dpt_loss(t->cfg.loss, o, bc, s->K, y, NULL, s->buf.loss, s->buf.dout));
    if (loss_sum) {
        double ls = 0;
        for (size_t i = 0; i < bc; i++) ls += s->buf.loss[i];
        *loss_sum = ls;
    }
    return backward ? dpt_model_backward(m, s->buf.dout, bc) : DPT_OK;
}

/* The trainer's settings Eq. 4 needs (no state changes: bind and begin both call it). */
static dpt_status check_settings(const ngd_state *s, const dpt_trainer *t) {
    const dpt_train_config *c = &t->cfg;
    DPT_CHECK(c->sampler == DPT_SAMPLER_FULL, DPT_EINVAL,
              "noisy-gd: needs the full-batch sampler (dpt_train_config.sampler = DPT_SAMPLER_FULL): Eq. 4 is "
              "full-batch gradient descent");
    DPT_CHECK(c->optim.kind == DPT_OPT_SGD && c->optim.momentum == 0.0 && c->optim.weight_decay == 0.0, DPT_EINVAL,
              "noisy-gd: needs plain SGD (dpt_optim_config.kind = DPT_OPT_SGD, no momentum, no weight_decay): the "
              "noise scale assumes W - eta * direction");
    DPT_CHECK(c->optim.lr == s->cfg.eta, DPT_EINVAL,
              "noisy-gd: dpt_optim_config.lr = %g differs from dpt_noisy_gd_config.eta = %g", c->optim.lr, s->cfg.eta);
    DPT_CHECK(c->schedule.kind == DPT_SCHED_CONSTANT, DPT_EINVAL,
              "noisy-gd: needs a constant step size (dpt_train_config.schedule of kind DPT_SCHED_CONSTANT)");
    const dpt_dataset *h = s->cfg.heldout;
    if (h) DPT_CHECK(h->dim == t->model->in_dim, DPT_EINVAL,
                     "noisy-gd: held-out records have %zu features, the model takes %zu", h->dim, t->model->in_dim);
    DPT_CHECK(!(s->cfg.kl & DPT_KL_REMOVE) || t->train->n >= 2, DPT_EINVAL, "noisy-gd: removing a record needs n >= 2");
    return DPT_OK;
}

static dpt_status check_trainer(ngd_state *s, dpt_trainer *t) {
    DPT_TRY(check_settings(s, t));
    dpt_model *m = t->model;
    const dpt_dataset *h = s->cfg.heldout;
    s->n = t->train->n;
    s->P = m->n_params;
    s->K = m->out_dim;
    s->mb = m->max_batch;
    s->nh = (s->cfg.kl & (DPT_KL_ADD | DPT_KL_REPLACE)) ? h->n : 0;
    s->k = (s->cfg.kl & DPT_KL_REPLACE) ? s->cfg.replace_candidates : 0;
    if (s->k > s->nh) s->k = s->nh;
    if (s->k > s->mb) s->k = s->mb;
    DPT_TRY(dpt_chunk_bufs_reserve(&s->buf, m));
    const size_t P = s->P, K = s->K, mb = s->mb, n = s->n;
    if (s->cfg.linearized) {
        s->theta0 = dpt_alloc(P, sizeof(float), "W0");
        s->cur = dpt_alloc(P, sizeof(float), "W");
        s->delta = dpt_alloc(P, sizeof(float), "W - W0");
        s->olin = dpt_alloc2(mb, K, sizeof(float), "linearized outputs");
        if (!s->theta0 || !s->cur || !s->delta || !s->olin) return DPT_ENOMEM;
        memcpy(s->theta0, m->theta, P * sizeof(float));
    }
    if (s->cfg.kl) {
        s->sq = dpt_alloc(mb, sizeof(float), "squared norms");
        s->ipf = dpt_alloc(mb, sizeof(float), "inner products");
        s->sq_i = dpt_alloc(n, sizeof(double), "squared norms");
        s->ip_i = dpt_alloc(n, sizeof(double), "inner products");
        if (!s->sq || !s->ipf || !s->sq_i || !s->ip_i) return DPT_ENOMEM;
        /* several chunks: keep their layer inputs and cotangents for the <g_i, gbar> pass
         * when they fit the budget (else each chunk runs forward and backward again) */
        const size_t row_bytes = act_rows_floats(m, 1) * sizeof(float);
        if (n > mb && row_bytes && s->cfg.kl_keep_bytes / row_bytes >= n)
            if (act_rows_alloc(&s->keep, m, n, 1) != DPT_OK) dpt_clear_error(); /* recompute instead */
        if (s->cfg.kl & DPT_KL_REMOVE) {
            if (!(s->kl_rm = dpt_alloc(n, sizeof(double), "KL remove"))) return DPT_ENOMEM;
        }
        if (s->cfg.kl & DPT_KL_ADD) {
            if (!(s->kl_add = dpt_alloc(s->nh, sizeof(double), "KL add"))) return DPT_ENOMEM;
        }
        if (s->k) {
            s->kl_rep = dpt_alloc2(n, s->k, sizeof(double), "KL replace");
            s->cross = dpt_alloc2(n, s->k, sizeof(double), "cross inner products");
            /* the candidates' gradients only for layers without a cross op (Linear has one) */
            if (!dpt_model_has_cross(m)) s->gz = dpt_alloc2(s->k, P, sizeof(float), "candidate gradients");
            s->zidx = dpt_alloc(s->k, sizeof(size_t), "candidates");
            s->sq_z = dpt_alloc(s->k, sizeof(double), "candidate norms");
            s->zx = dpt_alloc2(s->k, h->dim, sizeof(float), "candidate records");
            s->zy = dpt_alloc(s->k, sizeof(int32_t), "candidate labels");
            s->crossc = dpt_alloc2(mb, s->k, sizeof(double), "cross inner products");
            if (!s->kl_rep || !s->cross || (!s->gz && !dpt_model_has_cross(m)) || !s->zidx || !s->sq_z || !s->zx || !s->zy || !s->crossc)
                return DPT_ENOMEM;
            DPT_TRY(act_rows_alloc(&s->zkeep, m, s->k, 0));
        }
    }
    return DPT_OK;
}

/* The k held-out records with the largest gradient norm at W0 become the replacements. */
static dpt_status choose_candidates(ngd_state *s, dpt_trainer *t) {
    const dpt_dataset *h = s->cfg.heldout;
    dpt_model *m = t->model;
    double *nz = dpt_alloc(h->n, sizeof(double), "candidate norms");
    if (!nz) return DPT_ENOMEM;
    dpt_status st = DPT_OK;
    for (size_t lo = 0; lo < h->n && st == DPT_OK; lo += s->mb) {
        size_t bc = h->n - lo < s->mb ? h->n - lo : s->mb;
        st = chunk_forward(s, t, h->x + lo * h->dim, h->y + lo, bc, 1, NULL);
        if (st == DPT_OK) st = dpt_model_param_grad(m, bc, DPT_GRAD_SQNORM, NULL, s->sq, 0, 0);
        for (size_t i = 0; st == DPT_OK && i < bc; i++) nz[lo + i] = s->sq[i];
    }
    for (size_t j = 0; st == DPT_OK && j < s->k; j++) {
        size_t best = 0;
        double bv = -1;
        for (size_t z = 0; z < h->n; z++)
            if (nz[z] > bv) {
                bv = nz[z];
                best = z;
            }
        s->zidx[j] = best;
        nz[best] = -2; /* taken */
        memcpy(s->zx + j * h->dim, h->x + best * h->dim, h->dim * sizeof(float));
        s->zy[j] = h->y[best];
    }
    dpt_free(nz);
    return st;
}

/* The settings refused when the trainer is made, not in the first step. */
static dpt_status ngd_bind(dpt_algo *a, dpt_trainer *t) { return check_settings(a->state, t); }

static dpt_status ngd_begin(dpt_algo *a, dpt_trainer *t, size_t batch) {
    ngd_state *s = a->state;
    dpt_model *m = t->model;
    if (!s->checked) {
        DPT_TRY(check_trainer(s, t));
        s->checked = 1;
        if (s->k) DPT_TRY(choose_candidates(s, t));
    }
    DPT_CHECK(batch == s->n, DPT_EINVAL, "noisy-gd: got a batch of %zu records, expected the full %zu", batch, s->n);
    if (s->cfg.linearized) {
        memcpy(s->cur, m->theta, s->P * sizeof(float));
        for (size_t j = 0; j < s->P; j++) s->delta[j] = s->cur[j] - s->theta0[j];
        memcpy(m->theta, s->theta0, s->P * sizeof(float));
    }
    if (s->k) {
        /* the candidates' gradients at this W (linearized: J(W0)^T dl/do) */
        DPT_TRY(chunk_forward(s, t, s->zx, s->zy, s->k, 1, NULL));
        if (s->gz) {
            DPT_TRY(dpt_model_param_grad(m, s->k, DPT_GRAD_PER_EXAMPLE, NULL, s->gz, s->P, 0));
            for (size_t j = 0; j < s->k; j++) s->sq_z[j] = dot_f(s->gz + j * s->P, s->gz + j * s->P, s->P);
        } else {
            DPT_TRY(dpt_model_param_grad(m, s->k, DPT_GRAD_SQNORM, NULL, s->sq, 0, 0));
            for (size_t j = 0; j < s->k; j++) s->sq_z[j] = s->sq[j];
        }
        act_rows_save(&s->zkeep, m, 0, s->k);
    }
    memset(m->grad, 0, s->P * sizeof(float));
    s->pos = 0;
    return DPT_OK;
}

static dpt_status ngd_accumulate(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                 double *loss_sum) {
    ngd_state *s = a->state;
    dpt_model *m = t->model;
    DPT_TRY(chunk_forward(s, t, x, y, bc, 1, loss_sum));
    DPT_TRY(dpt_model_param_grad(m, bc, DPT_GRAD_SUM, NULL, m->grad, 0, 1));
    if (s->cfg.kl) {
        DPT_TRY(dpt_model_param_grad(m, bc, DPT_GRAD_SQNORM, NULL, s->sq, 0, 0));
        for (size_t i = 0; i < bc; i++) s->sq_i[t->idx[s->pos + i]] = s->sq[i];
        if (s->k) {
            /* <g_i, g_zj> from the candidates' kept rows (Linear: no gradient formed) */
            act_rows_view(&s->zkeep, m, 0);
            DPT_TRY(dpt_model_param_cross(m, NULL, NULL, bc, s->k, s->zkeep.vx, s->zkeep.vdv, s->gz, s->P,
                                          s->crossc));
            for (size_t i = 0; i < bc; i++)
                memcpy(s->cross + t->idx[s->pos + i] * s->k, s->crossc + i * s->k, s->k * sizeof(double));
        }
        if (s->keep.buf) act_rows_save(&s->keep, m, s->pos, bc);
    }
    s->pos += bc;
    return DPT_OK;
}

static double nonneg(double v) { return v > 0 ? v : 0; }

static dpt_status estimate(ngd_state *s, dpt_trainer *t) {
    dpt_model *m = t->model;
    const float *gbar = m->grad;
    const size_t n = s->n;
    const double gg = dot_f(gbar, gbar, s->P);
    /* <g_i, gbar> (DOT): from the model's activations when all records fit in one chunk
     * (the last accumulate left them there), from the kept rows, or by running each chunk
     * forward and backward again */
    for (size_t lo = 0; lo < n; lo += s->mb) {
        size_t bc = n - lo < s->mb ? n - lo : s->mb;
        if (n <= s->mb) {
            DPT_TRY(dpt_model_param_grad(m, bc, DPT_GRAD_DOT, gbar, s->ipf, 0, 0));
        } else if (s->keep.buf) {
            act_rows_view(&s->keep, m, lo);
            if (m->layers[0].n_params) { /* the records themselves: in place when contiguous */
                int contiguous = 1;
                for (size_t i = 1; i < bc && contiguous; i++) contiguous = t->idx[lo + i] == t->idx[lo] + i;
                if (contiguous) {
                    s->keep.vx[0] = t->train->x + (size_t)t->idx[lo] * t->train->dim;
                } else {
                    dpt_dataset_gather(t->train, t->idx + lo, bc, t->xb, t->yb);
                    s->keep.vx[0] = t->xb;
                }
            }
            DPT_TRY(dpt_model_param_grad_from(m, s->keep.vx, s->keep.vdv, bc, DPT_GRAD_DOT, gbar, s->ipf, 0, 0));
        } else {
            dpt_dataset_gather(t->train, t->idx + lo, bc, t->xb, t->yb);
            DPT_TRY(chunk_forward(s, t, t->xb, t->yb, bc, 1, NULL));
            DPT_TRY(dpt_model_param_grad(m, bc, DPT_GRAD_DOT, gbar, s->ipf, 0, 0));
        }
        for (size_t i = 0; i < bc; i++) s->ip_i[t->idx[lo + i]] = s->ipf[i];
    }
    const double c = s->c;
    if (s->kl_rm) {
        const double f = c / ((double)(n - 1) * (double)(n - 1));
        for (size_t i = 0; i < n; i++) s->kl_rm[i] += f * nonneg(s->sq_i[i] - 2 * s->ip_i[i] + gg);
    }
    if (s->k) {
        const double f = c / ((double)n * (double)n);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < s->k; j++)
                s->kl_rep[i * s->k + j] += f * nonneg(s->sq_i[i] + s->sq_z[j] - 2 * s->cross[i * s->k + j]);
    }
    if (s->kl_add) {
        const dpt_dataset *h = s->cfg.heldout;
        const double f = c / ((double)(n + 1) * (double)(n + 1));
        for (size_t lo = 0; lo < h->n; lo += s->mb) {
            size_t bc = h->n - lo < s->mb ? h->n - lo : s->mb;
            DPT_TRY(chunk_forward(s, t, h->x + lo * h->dim, h->y + lo, bc, 1, NULL));
            DPT_TRY(dpt_model_param_grad(m, bc, DPT_GRAD_SQNORM, NULL, s->sq, 0, 0));
            DPT_TRY(dpt_model_param_grad(m, bc, DPT_GRAD_DOT, gbar, s->ipf, 0, 0));
            for (size_t i = 0; i < bc; i++) s->kl_add[lo + i] += f * nonneg((double)s->sq[i] - 2.0 * s->ipf[i] + gg);
        }
    }
    s->steps++;
    return DPT_OK;
}

static dpt_status ngd_finish(dpt_algo *a, dpt_trainer *t, size_t batch) {
    ngd_state *s = a->state;
    dpt_model *m = t->model;
    DPT_CHECK(s->pos == s->n, DPT_EINVAL, "noisy-gd: %zu of %zu records accumulated", s->pos, s->n);
    const float inv = (float)(1.0 / (double)s->n);
    for (size_t j = 0; j < s->P; j++) m->grad[j] *= inv;
    if (s->cfg.kl) DPT_TRY(estimate(s, t));
    /* W - eta (gbar + sqrt(2 sigma^2 / eta) Z) = W - eta gbar + sqrt(2 eta sigma^2) Z */
    const double sd = sqrt(2.0 * s->cfg.sigma * s->cfg.sigma / s->cfg.eta);
    DPT_TRY(dpt_privacy_noise_add(&t->rng_noise, m->grad, s->P, sd, 1.0, t->threads));
    if (s->cfg.linearized) memcpy(m->theta, s->cur, s->P * sizeof(float));
    return DPT_OK;
}

static void worst(const double *v, size_t n, double *best, size_t *arg) {
    *best = NAN;
    *arg = 0;
    if (!v || !n) return;
    *best = v[0];
    for (size_t i = 1; i < n; i++)
        if (v[i] > *best) {
            *best = v[i];
            *arg = i;
        }
}

static int is_ngd(const dpt_algo *a) { return a && a->name && !strcmp(a->name, "noisy-gd") && a->state; }

dpt_status dpt_noisy_gd_kl(const dpt_algo *a, dpt_kl_report *r) {
    DPT_CHECK(is_ngd(a) && r, DPT_EINVAL, "noisy-gd KL: not a noisy-gd algorithm");
    const ngd_state *s = a->state;
    memset(r, 0, sizeof *r);
    r->steps = s->steps;
    r->c = s->c;
    size_t arg = 0;
    worst(s->kl_rm, s->kl_rm ? s->n : 0, &r->remove, &r->remove_arg);
    worst(s->kl_add, s->kl_add ? s->nh : 0, &r->add, &r->add_arg);
    worst(s->kl_rep, s->kl_rep ? s->n * s->k : 0, &r->replace, &arg);
    if (s->k) {
        r->replace_arg_i = arg / s->k;
        r->replace_arg_z = s->zidx[arg % s->k];
    }
    r->worst = NAN;
    const double v[3] = {r->remove, r->add, r->replace};
    for (int i = 0; i < 3; i++)
        if (!isnan(v[i]) && (isnan(r->worst) || v[i] > r->worst)) r->worst = v[i];
    return DPT_OK;
}

dpt_status dpt_noisy_gd_kl_values(const dpt_algo *a, int which, const double **v, size_t *n) {
    DPT_CHECK(is_ngd(a) && v && n, DPT_EINVAL, "noisy-gd KL: not a noisy-gd algorithm");
    const ngd_state *s = a->state;
    *v = NULL;
    *n = 0;
    switch (which) {
    case DPT_KL_REMOVE: *v = s->kl_rm; *n = s->kl_rm ? s->n : 0; break;
    case DPT_KL_ADD: *v = s->kl_add; *n = s->kl_add ? s->nh : 0; break;
    case DPT_KL_REPLACE: *v = s->kl_rep; *n = s->kl_rep ? s->n * s->k : 0; break;
    default: return dpt_set_error(DPT_EINVAL, "noisy-gd KL: unknown neighbour kind %d", which);
    }
    return DPT_OK;
}

dpt_status dpt_noisy_gd_replace_candidates(const dpt_algo *a, const size_t **idx, size_t *k) {
    DPT_CHECK(is_ngd(a) && idx && k, DPT_EINVAL, "noisy-gd KL: not a noisy-gd algorithm");
    const ngd_state *s = a->state;
    *idx = s->zidx;
    *k = s->checked ? s->k : 0;
    return DPT_OK;
}

static dpt_status ngd_epoch_metrics(dpt_algo *a, dpt_trainer *t, cJSON *o, char *line, size_t n) {
    (void)t;
    ngd_state *s = a->state;
    if (!s->cfg.kl) return DPT_OK;
    dpt_kl_report r;
    DPT_TRY(dpt_noisy_gd_kl(a, &r));
    snprintf(line, n, "KL estimate %.4g (%s constant; not an epsilon)", r.worst,
             s->cfg.constant == DPT_KL_EXACT ? "exact" : "paper's");
    if (!o) return DPT_OK;
    cJSON_AddStringToObject(o, "kl_note", "KL divergence estimated along this run's trajectory (Theorem E.1); "
                                          "an estimate, not an (epsilon, delta) guarantee");
    cJSON_AddStringToObject(o, "kl_constant", s->cfg.constant == DPT_KL_EXACT ? "exact eta/(4 sigma^2)"
                                                                              : "paper eta/(2 sigma^2)");
    cJSON_AddNumberToObject(o, "kl_c", r.c);
    cJSON_AddNumberToObject(o, "kl_steps", (double)r.steps);
    /* the sizes the estimate is for: KL scales like 1/n^2 at a fixed gradient scale */
    cJSON_AddNumberToObject(o, "kl_records", (double)s->n);
    if (s->nh) cJSON_AddNumberToObject(o, "kl_heldout_records", (double)s->nh);
    cJSON_AddNumberToObject(o, "kl_worst", r.worst);
    if (!isnan(r.remove)) {
        cJSON_AddNumberToObject(o, "kl_remove", r.remove);
        cJSON_AddNumberToObject(o, "kl_remove_record", (double)r.remove_arg);
    }
    if (!isnan(r.add)) {
        cJSON_AddNumberToObject(o, "kl_add", r.add);
        cJSON_AddNumberToObject(o, "kl_add_heldout_record", (double)r.add_arg);
    }
    if (!isnan(r.replace)) {
        cJSON_AddNumberToObject(o, "kl_replace", r.replace);
        cJSON_AddNumberToObject(o, "kl_replace_record", (double)r.replace_arg_i);
        cJSON_AddNumberToObject(o, "kl_replace_by_heldout", (double)r.replace_arg_z);
    }
    /* Pinsker: TV <= sqrt(KL / 2) -- of the estimate, so itself only an estimate */
    cJSON_AddNumberToObject(o, "tv_pinsker_of_estimate", dpt_pinsker_tv(r.worst)); /* capped at 1 */
    return DPT_OK;
}

static void ngd_free(dpt_algo *a) {
    if (!a) return;
    ngd_free_state(a->state);
    free(a);
}

dpt_status dpt_algo_noisy_gd_new(const dpt_noisy_gd_config *cfg, dpt_algo **out) {
    DPT_CHECK(cfg && out, DPT_EINVAL, "dpt_algo_noisy_gd_new: %s is NULL", cfg ? "out" : "cfg");
    DPT_CHECK(isfinite(cfg->eta) && cfg->eta > 0, DPT_EINVAL, "dpt_noisy_gd_config.eta must be > 0, got %g", cfg->eta);
    DPT_CHECK(isfinite(cfg->sigma) && cfg->sigma > 0, DPT_EINVAL, "dpt_noisy_gd_config.sigma must be > 0, got %g",
              cfg->sigma);
    DPT_CHECK(cfg->kl >= 0 && cfg->kl <= DPT_KL_ALL, DPT_EINVAL,
              "dpt_noisy_gd_config.kl: unknown neighbour set %d (DPT_KL_* bits)", cfg->kl);
    DPT_CHECK(cfg->constant == DPT_KL_EXACT || cfg->constant == DPT_KL_PAPER, DPT_EINVAL,
              "dpt_noisy_gd_config.constant: unknown KL constant %d", (int)cfg->constant);
    if (cfg->kl & (DPT_KL_ADD | DPT_KL_REPLACE))
        DPT_CHECK(cfg->heldout && cfg->heldout->n >= 1, DPT_EINVAL,
                  "dpt_noisy_gd_config.heldout: the add/replace neighbours need held-out records (a non-empty "
                  "dataset)");
    DPT_CHECK(!cfg->heldout || !cfg->heldout->t, DPT_ENOTSUP,
              "dpt_noisy_gd_config.heldout has regression targets; noisy-gd trains classifiers only");
    DPT_CHECK(!cfg->heldout || cfg->heldout->y, DPT_EINVAL, "dpt_noisy_gd_config.heldout has no labels");
    if (cfg->kl & DPT_KL_REPLACE)
        DPT_CHECK(cfg->replace_candidates >= 1, DPT_EINVAL, "dpt_noisy_gd_config.replace_candidates must be >= 1");
    dpt_algo *a = calloc(1, sizeof *a);
    ngd_state *s = calloc(1, sizeof *s);
    if (!a || !s) {
        free(a);
        free(s);
        return dpt_set_error(DPT_ENOMEM, "noisy-gd: out of memory");
    }
    s->cfg = *cfg;
    s->c = cfg->eta / ((cfg->constant == DPT_KL_EXACT ? 4.0 : 2.0) * cfg->sigma * cfg->sigma);
    a->name = "noisy-gd";
    a->is_private = 0; /* no (epsilon, delta) accountant: the KL estimate is not a guarantee */
    a->begin = ngd_begin;
    a->bind = ngd_bind;
    a->accumulate = ngd_accumulate;
    a->finish = ngd_finish;
    a->record = NULL;
    a->free = ngd_free;
    a->epoch_metrics = ngd_epoch_metrics;
    a->state = s;
    *out = a;
    return DPT_OK;
}
