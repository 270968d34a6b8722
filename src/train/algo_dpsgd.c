/* DP-SGD (Abadi et al. 2016, Algorithm 1) as a strategy of the training loop. The loop's
 * Poisson sampler draws each example with probability q; per chunk of the batch:
 *   g_i   = grad l_i (per-example loss gradients, NOT divided by the batch size)
 *   c_i   = min(1, C / ||g_i||)      ||g_i||^2 from the ghost path (SQNORM: for a Linear
 *                                    layer ||x_i||^2 ||dv_i||^2, nothing materialized)
 *   grad += sum_i c_i g_i            one weighted GEMM per layer (WEIGHTED)
 * and once per step: grad = (grad + N(0, sigma^2 C^2 I)) / (q N). Dividing by the
 * expected batch size qN (not |B|) keeps the sensitivity of the released sum at C for
 * every batch, empty ones included. Per-layer clipping (McMahan et al. 2018) clips layer
 * l to C_l = C / sqrt(G), so the whole clipped gradient still has norm <= C.
 * A convolution's per-example gradient is small (O C k^2 values) while its weighted GEMM
 * costs as much as its whole weight gradient; with flat clipping the per-example gradients
 * of a Conv2d layer with O <= T (rows no longer than its unfold cache, C k^2 T per example)
 * are therefore materialized once (PER_EXAMPLE, kept in s->keep), their squared norms read
 * off the rows, and the clipped sum taken from the same rows (sum_i c_i g_i, a pass over
 * memory), instead of SQNORM and then a WEIGHTED GEMM over the unfolded input. Linear
 * layers and wide convolutions on small maps keep the ghost norms. The kept rows live
 * only inside one pass, so they can never be stale; a chunk whose kept rows would pass the
 * memory budget runs in several passes of fewer examples (forward, backward, clipped sum
 * each) rather than dropping layers from the kept set (DPSGD_MIN_PASS).
 * The reference path materializes per-example gradients in chunks of ref_chunk examples
 * (memory ref_chunk x P), clips them in double and sums them: the tests compare the two.
 * Frozen layers (dpt_train_config.freeze) take no part: every loop below runs over the
 * trained layers (dpt_train_layer_trains), so g_i, its norm and the per-layer split
 * C_l = C / sqrt(G) are those of the trained layers, and finish noises the trained
 * coordinates only (packed: the secure mode's lattice has their dimension).
 * Adaptive clipping (Andrew et al. 2021, dpt_dpsgd_config.adaptive_quantile): the clip of a
 * step is C_t (s->ada.C); accumulate also counts sum_i (1[||g_i|| <= C_t] - 1/2) into
 * a->sums[0] (reduced over shards like the gradient), and finish releases the gradient with
 * sigma_Delta C_t, then the count with sigma_b, and moves C_t (dpt_adaclip_step). */
#include <dptrain/train.h>

#include <dptrain/accounting.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

typedef struct {
    dpt_dpsgd_config cfg;
    size_t cap;     /* buffers sized for this many examples */
    size_t G;       /* trained parameter layers (all but the frozen ones) */
    dpt_chunk_bufs buf; /* loss cotangents and per-example losses */
    float *sq;      /* [G, cap] per-example squared norms (flat: [cap]) */
    float *c;       /* [G, cap] clipping factors (flat: [cap]) */
    double *C_l;    /* [G] per-layer clipping norms */
    float *pe;      /* reference: [ref_chunk, P] materialized per-example gradients */
    float **keep;   /* [G]: [cap, P_l] per-example gradients of a Conv2d layer kept between its
                       norms and its clipped sum (flat clipping), or NULL (that layer uses
                       SQNORM + WEIGHTED) */
    size_t keep_budget; /* floats all kept layers may take together */
    size_t min_pass;    /* the fewest examples a pass of the fast path is split down to */
    size_t pass;        /* examples per pass of the fast path (<= cap): the kept rows' capacity */
    char settings[192]; /* dpt_algo.settings: the clipping a resumed run must keep */
    int adaptive;       /* cfg.adaptive_quantile > 0 */
    dpt_adaclip ada;    /* adaptive: C_t and the quantile estimate's settings (set at bind) */
    double sums[1];     /* a->sums: adaptive, the batch's centred count sum_i (b_i - 1/2) */
    float *packed;  /* with frozen layers: [trained parameters] the noised coordinates, packed */
    dpt_gauss_release rel; /* the noise and the ledger event of a step (made at bind) */
    /* augmentation (dpt_train_config.augment), sized at begin for the model's max_batch M
     * and K copies: */
    size_t aug_cap;  /* M when allocated */
    float *xa;       /* [M, D] augmented copies, example-major */
    int32_t *ya;     /* [M] their labels */
    float *rows;     /* K > 1: [M / K, P] each example's mean gradient over its copies */
    float *tmp;      /* K > 1: [M, max_l P_l] one layer's per-copy gradients */
} dpsgd_state;

/* 32 M floats (128 MB) for the kept per-example gradients of all layers together: at the
 * Poisson capacity of batch 256 (360 examples) mnist_cnn keeps 0.37 M (conv1), ResNet-5
 * 5.5 M (all four convolutions); a layer that would pass the budget falls back to SQNORM +
 * WEIGHTED (same result up to float rounding). */
#define DPSGD_KEEP_BUDGET ((size_t)32 << 20)
/* A chunk whose kept rows would pass the budget is split into passes of fewer examples
 * (each a forward, backward and clipped sum into the same gradient), down to 128: kept rows
 * save the weighted GEMM and its unfold, which costs as much as the rows' own product, and
 * at batch 8192 the ScatterNet + CNN of CIFAR-10 (conv1: 140 k parameters) would keep none.
 * Below 128 the GEMMs of a pass lose efficiency; the layers that do not fit then take SQNORM +
 * WEIGHTED as before. */
#define DPSGD_MIN_PASS ((size_t)128)

static void keep_free(dpsgd_state *s) {
    if (s->keep)
        for (size_t g = 0; g < s->G; g++) dpt_free(s->keep[g]);
    dpt_free(s->keep);
    s->keep = NULL;
}

void dpt_dpsgd_set_keep_budget(dpt_algo *a, size_t floats, size_t min_pass) {
    dpsgd_state *s = a->state;
    keep_free(s);
    s->keep_budget = floats;
    s->min_pass = min_pass ? min_pass : 1;
    s->cap = 0; /* the next begin allocates again under the new budget */
}

size_t dpt_dpsgd_pass(const dpt_algo *a) {
    const dpsgd_state *s = a->state;
    return s->pass;
}

/* rows of O C k^2 no longer than the layer's unfold (C k^2 T, which the model keeps per
 * example anyway): O <= T */
static int keepable(const dpt_layer *L) {
    return L->kind == DPT_LAYER_CONV2D && L->out_shape[0] <= L->out_shape[1] * L->out_shape[2];
}

/* The greedy keep rule (layers in order): trained layer l is kept when it is keepable and
 * the rows of `pass` examples fit what the budget has left after `used` floats */
static int keeps(const dpsgd_state *s, const dpt_trainer *t, size_t l, size_t used, size_t pass) {
    const dpt_layer *L = &t->model->layers[l];
    return keepable(L) && L->n_params <= (s->keep_budget - used) / pass;
}

/* How many layers the greedy rule keeps with passes of `pass` examples */
static size_t kept_layers(const dpsgd_state *s, const dpt_trainer *t, size_t pass) {
    const dpt_model *m = t->model;
    size_t used = 0, k = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (dpt_train_layer_trains(t, l) && keeps(s, t, l, used, pass)) {
            used += pass * L->n_params;
            k++;
        }
    }
    return k;
}

dpt_dpsgd_config dpt_dpsgd_config_defaults(void) {
    dpt_dpsgd_config c;
    memset(&c, 0, sizeof c);
    c.sigma = 1.0;
    c.clip = 1.0;
    c.clip_mode = DPT_CLIP_FLAT;
    c.ref_chunk = 16;
    c.adaptive_lr = 0.2;
    return c;
}

static void aug_free(dpsgd_state *s) {
    dpt_free(s->xa);
    dpt_free(s->ya);
    dpt_free(s->rows);
    dpt_free(s->tmp);
    s->xa = s->rows = s->tmp = NULL;
    s->ya = NULL;
    s->aug_cap = 0;
}

static dpt_status aug_reserve(dpsgd_state *s, const dpt_trainer *t) {
    const dpt_model *m = t->model;
    const size_t M = m->max_batch, K = t->cfg.aug_mult ? t->cfg.aug_mult : 1;
    if (s->aug_cap == M) return DPT_OK;
    aug_free(s);
    size_t maxPl = 1;
    for (size_t l = 0; l < m->n_layers; l++)
        if (m->layers[l].n_params > maxPl) maxPl = m->layers[l].n_params;
    s->xa = dpt_alloc2(M, m->in_dim, sizeof *s->xa, "dpsgd augmented copies");
    s->ya = dpt_alloc(M, sizeof *s->ya, "dpsgd augmented labels");
    if (K > 1) {
        s->rows = dpt_alloc2(M / K, m->n_params, sizeof *s->rows, "dpsgd mean gradients over copies");
        s->tmp = dpt_alloc2(M, maxPl, sizeof *s->tmp, "dpsgd per-copy gradients");
    }
    if (!s->xa || !s->ya || (K > 1 && (!s->rows || !s->tmp))) {
        aug_free(s);
        return DPT_ENOMEM;
    }
    s->aug_cap = M;
    return DPT_OK;
}

static dpt_status dpsgd_begin(dpt_algo *a, dpt_trainer *t, size_t batch) {
    dpsgd_state *s = a->state;
    dpt_model *m = t->model;
    if (t->cfg.augment != DPT_AUGMENT_NONE) DPT_TRY(aug_reserve(s, t));
    if (s->cap < m->max_batch) {
        size_t G = 0, cap = m->max_batch;
        for (size_t l = 0; l < m->n_layers; l++) G += (size_t)dpt_train_layer_trains(t, l);
        dpt_free(s->sq);
        dpt_free(s->c);
        dpt_free(s->C_l);
        dpt_free(s->pe);
        s->pe = NULL;
        DPT_TRY(dpt_chunk_bufs_reserve(&s->buf, m));
        s->sq = dpt_alloc2(cap, (G ? G : 1), sizeof(float), "dpsgd squared norms");
        s->c = dpt_alloc2(cap, (G ? G : 1), sizeof(float), "dpsgd clipping factors");
        s->C_l = dpt_alloc(G ? G : 1, sizeof(double), "dpsgd per-layer norms");
        if (!s->sq || !s->c || !s->C_l) return DPT_ENOMEM;
        keep_free(s); /* sized by the old s->G */
        s->G = G;
        s->pass = cap;
        if (s->cfg.clip_mode == DPT_CLIP_FLAT && !s->cfg.reference && G) {
            s->keep = dpt_alloc(G, sizeof *s->keep, "dpsgd kept per-example gradients");
            if (!s->keep) return DPT_ENOMEM;
            /* the pass: all keepable layers' rows within the budget, if that leaves at
             * least min_pass examples (else min_pass, and the layers that fit); whole
             * chunks when a shorter pass would keep no more layers */
            size_t rows = 0;
            for (size_t l = 0; l < m->n_layers; l++)
                if (dpt_train_layer_trains(t, l) && keepable(&m->layers[l])) rows += m->layers[l].n_params;
            size_t pass = rows ? s->keep_budget / rows : cap;
            if (pass < s->min_pass) pass = s->min_pass;
            if (pass > cap) pass = cap;
            if (kept_layers(s, t, pass) <= kept_layers(s, t, cap)) pass = cap;
            s->pass = pass;
            size_t used = 0, g = 0;
            for (size_t l = 0; l < m->n_layers; l++) {
                const dpt_layer *L = &m->layers[l];
                if (!dpt_train_layer_trains(t, l)) continue;
                if (keeps(s, t, l, used, pass)) {
                    s->keep[g] = dpt_alloc2(pass, L->n_params, sizeof(float), "dpsgd kept per-example gradients");
                    if (!s->keep[g]) {
                        keep_free(s);
                        return DPT_ENOMEM;
                    }
                    used += pass * L->n_params;
                }
                g++;
            }
        }
        if (s->cfg.reference) {
            s->pe = dpt_alloc2(s->cfg.ref_chunk, m->n_params, sizeof(float), "dpsgd per-example gradients");
            if (!s->pe) return DPT_ENOMEM;
        }
        if (t->frozen && !s->packed) {
            s->packed = dpt_alloc(t->n_trained, sizeof(float), "dpsgd noised coordinates");
            if (!s->packed) return DPT_ENOMEM;
        }
        s->G = G;
        s->cap = cap;
    }
    /* C_l = C_t / sqrt(G): every layer's share scaled by the same factor as C_t */
    if (s->cfg.clip_mode == DPT_CLIP_PER_LAYER) DPT_TRY(dpt_privacy_split_equal(s->ada.C, s->G, s->C_l));
    s->sums[0] = 0;
    memset(m->grad, 0, m->n_params * sizeof(float));
    return DPT_OK;
}

/* ==== Fast path: ghost norms + weighted GEMM ==== */

/* adaptive: a->sums[0] += sum_i (1[||g_i|| <= C_t] - 1/2) from the chunk's squared norms
 * sq [G, bc] (flat: G = 1), summed over the layers first (||g_i||^2 = sum_l ||g_{i,l}||^2) */
static void count_unclipped(dpsgd_state *s, const float *sq, size_t G, size_t bc) {
    if (!s->adaptive) return;
    const double C2 = s->ada.C * s->ada.C;
    double c = 0;
    for (size_t i = 0; i < bc; i++) {
        double n2 = 0;
        for (size_t g = 0; g < G; g++) n2 += (double)sq[g * bc + i];
        c += (n2 <= C2 ? 1.0 : 0.0) - 0.5;
    }
    s->sums[0] += c;
}

/* One pass of bc <= s->pass examples (targets tg: regression, else NULL) */
static dpt_status accumulate_pass(dpsgd_state *s, dpt_trainer *t, const float *x, const int32_t *y, const float *tg,
                                  size_t bc, double *loss_sum) {
    dpt_model *m = t->model;
    DPT_ASSERT(bc <= s->pass);
    DPT_TRY(dpt_train_forward_backward(t, &s->buf, x, y, tg, bc, 1.0f, loss_sum));
    if (s->cfg.clip_mode == DPT_CLIP_FLAT) {
        /* ||g_i||^2 = sum_l ||g_{i,l}||^2: a kept layer's from its materialized rows, the
         * others' by SQNORM (Linear: ||x_{i,l}||^2 ||dv_{i,l}||^2, + ||dv_{i,l}||^2 for the
         * bias) */
        const int nt = dpt_threads_resolve(t->threads);
        size_t g = 0;
        for (size_t l = 0; l < m->n_layers; l++) {
            const dpt_layer *L = &m->layers[l];
            if (!dpt_train_layer_trains(t, l)) continue; /* frozen: no gradient, not in the norm */
            const int acc = g > 0;
            if (s->keep && s->keep[g]) {
                const size_t Pl = L->n_params;
                float *Gl = s->keep[g];
                DPT_TRY(L->ops->backward_params(L, m->act[l], m->dact[l + 1], bc, DPT_GRAD_PER_EXAMPLE, NULL, Gl, Pl,
                                                0));
                const long long nb = (long long)bc;
#pragma omp parallel for num_threads(nt) if (bc * Pl > (1u << 16))
                for (long long ii = 0; ii < nb; ii++) {
                    const float *row = Gl + (size_t)ii * Pl;
                    double q = 0.0;
#pragma omp simd reduction(+ : q)
                    for (size_t j = 0; j < Pl; j++) q += (double)row[j] * row[j];
                    s->sq[ii] = acc ? (float)((double)s->sq[ii] + q) : (float)q;
                }
            } else {
                DPT_TRY(L->ops->backward_params(L, m->act[l], m->dact[l + 1], bc, DPT_GRAD_SQNORM, NULL, s->sq, 0,
                                                acc));
            }
            g++;
        }
        dpt_status st = dpt_privacy_clip_factors(s->sq, bc, s->ada.C, s->c);
        if (st != DPT_OK) return dpt_error_context(st, "dpsgd"); /* NaN/inf: DPT_ERANGE, diverged */
        count_unclipped(s, s->sq, 1, bc);
        /* grad_l += sum_i c_i g_{i,l}: kept rows summed in example order (each coordinate's
         * sum in the same order whatever the thread count), the others by a weighted GEMM
         * dW += dV^T diag(c) X */
        g = 0;
        for (size_t l = 0; l < m->n_layers; l++) {
            const dpt_layer *L = &m->layers[l];
            if (!dpt_train_layer_trains(t, l)) continue;
            float *out = m->grad + L->param_offset;
            if (s->keep && s->keep[g]) {
                const size_t Pl = L->n_params, blk = 1024, nblk = (Pl + blk - 1) / blk;
                const float *Gl = s->keep[g], *c = s->c;
                const long long nbk = (long long)nblk;
#pragma omp parallel for num_threads(nt) if (bc * Pl > (1u << 16))
                for (long long b = 0; b < nbk; b++) {
                    const size_t lo = (size_t)b * blk, hi = lo + blk < Pl ? lo + blk : Pl;
                    float *restrict o = out + lo;
                    for (size_t i = 0; i < bc; i++) {
                        const float ci = c[i];
                        const float *restrict r = Gl + i * Pl + lo;
#pragma omp simd
                        for (size_t j = 0; j < hi - lo; j++) o[j] += ci * r[j];
                    }
                }
            } else {
                DPT_TRY(L->ops->backward_params(L, m->act[l], m->dact[l + 1], bc, DPT_GRAD_WEIGHTED, s->c, out, 0, 1));
            }
            g++;
        }
        return DPT_OK;
    }
    /* ||g_{i,l}||^2 of each trained layer l, then its factors c_{i,l} = min(1, C_l / ||g_{i,l}||)
     * (dpt_privacy_clip_factors_layers one layer at a time, so that a diverged layer is
     * named as the model names it, as the reference path does) */
    size_t g = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (!dpt_train_layer_trains(t, l)) continue;
        DPT_TRY(L->ops->backward_params(L, m->act[l], m->dact[l + 1], bc, DPT_GRAD_SQNORM, NULL, s->sq + g * bc, 0, 0));
        dpt_status st = dpt_privacy_clip_factors(s->sq + g * bc, bc, s->C_l[g], s->c + g * bc);
        if (st != DPT_OK) return dpt_error_context(st, "dpsgd: layer %s", L->name); /* NaN/inf: DPT_ERANGE */
        g++;
    }
    count_unclipped(s, s->sq, g, bc);
    g = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (!dpt_train_layer_trains(t, l)) continue;
        /* dW_l += dV_l^T diag(c_l) X_l: each layer with its own factors */
        DPT_TRY(L->ops->backward_params(L, m->act[l], m->dact[l + 1], bc, DPT_GRAD_WEIGHTED, s->c + g * bc,
                                        m->grad + L->param_offset, 0, 1));
        g++;
    }
    return DPT_OK;
}

/* The chunk's bc examples in passes of at most s->pass (dpsgd_begin): every pass adds its
 * clipped sum to the same gradient, so the release is the chunk's. x's rows are the model's
 * inputs, or the frozen trunk's cached output when the trainer hands that. */
static dpt_status accumulate_fast(dpsgd_state *s, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                  double *loss_sum) {
    const size_t D = t->fc_state == 1 ? t->fc_dim : t->model->in_dim;
    const float *tg = dpt_trainer_batch_targets(t);
    const size_t td = tg ? t->train->t_dim : 0;
    double ls = 0;
    for (size_t lo = 0; lo < bc; lo += s->pass) {
        const size_t n = bc - lo < s->pass ? bc - lo : s->pass;
        double part = 0;
        DPT_TRY(accumulate_pass(s, t, x + lo * D, y ? y + lo : NULL, tg ? tg + lo * td : NULL, n, &part));
        ls += part;
    }
    *loss_sum = ls;
    return DPT_OK;
}

/* ==== Reference path: materialized per-example gradients, in chunks ==== */

/* An error of dpt_privacy_clip_rows_ref (NaN/inf: DPT_ERANGE, diverged), with the layer it
 * clipped (per-layer mode; NULL: flat). Like the message itself, it does not say which
 * example of the batch (a fact about one private example, published before the ledger
 * covers the step). */
static dpt_status ref_clip_error(dpt_status st, const char *layer) {
    if (layer) st = dpt_error_context(st, "layer %s", layer);
    return dpt_error_context(st, "dpsgd (reference)");
}

static dpt_status accumulate_ref(dpsgd_state *s, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                 double *loss_sum) {
    dpt_model *m = t->model;
    size_t P = m->n_params, D = dpt_train_x_dim(t), rc = s->cfg.ref_chunk; /* D: x's row (inputs or cached) */
    double ls = 0;
    for (size_t lo = 0; lo < bc; lo += rc) {
        size_t n = bc - lo < rc ? bc - lo : rc;
        double part = 0;
        const float *tg = dpt_trainer_batch_targets(t); /* regression: [bc, t_dim], else NULL (and y) */
        DPT_TRY(dpt_train_forward_backward(t, &s->buf, x + lo * D, y ? y + lo : NULL,
                                           tg ? tg + lo * t->train->t_dim : NULL, n, 1.0f, &part));
        ls += part;
        /* g_i = per-example gradient rows [n, P]; a frozen layer's columns are 0 */
        if (t->frozen) memset(s->pe, 0, n * P * sizeof *s->pe);
        DPT_TRY(dpt_train_param_grad(t, n, DPT_GRAD_PER_EXAMPLE, s->pe, P, 0));
        if (s->adaptive) /* ||g_i|| before clipping, in double (frozen columns are 0) */
            for (size_t i = 0; i < n; i++) {
                double n2 = 0;
                for (size_t j = 0; j < P; j++) n2 += (double)s->pe[i * P + j] * s->pe[i * P + j];
                s->sums[0] += (n2 <= s->ada.C * s->ada.C ? 1.0 : 0.0) - 0.5;
            }
        if (s->cfg.clip_mode == DPT_CLIP_FLAT) {
            dpt_status st = dpt_privacy_clip_rows_ref(s->pe, n, P, P, s->ada.C, NULL);
            if (st != DPT_OK) return ref_clip_error(st, NULL);
        } else {
            size_t g = 0;
            for (size_t l = 0; l < m->n_layers; l++) {
                const dpt_layer *L = &m->layers[l];
                if (!dpt_train_layer_trains(t, l)) continue;
                dpt_status st = dpt_privacy_clip_rows_ref(s->pe + L->param_offset, n, L->n_params, P, s->C_l[g], NULL);
                if (st != DPT_OK) return ref_clip_error(st, L->name);
                g++;
            }
        }
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < P; j++) m->grad[j] += s->pe[i * P + j];
    }
    *loss_sum = ls;
    return DPT_OK;
}

/* ==== Augmentation multiplicity (De et al. 2022, Section 3.1) ====
 * Example i of the batch has K augmented copies x_{i,1..K} (dpt_train_augment); its
 * contribution is the clipped mean of their gradients,
 *   gbar_i = (1/K) sum_k grad l(x_{i,k}),   grad += min(1, C / ||gbar_i||) gbar_i,
 * so each example still moves the sum by at most C and the accounting is unchanged.
 * K = 1 is plain augmentation: the copies go through the usual paths above. For K > 1
 * the norm needed is that of the mean, which the per-copy ghost norms do not give (it has
 * the K^2 cross terms <g_{i,k}, g_{i,k'}>), so the K copies of n = M / K examples go
 * through the model together (one forward and backward pass of n K rows), each trained
 * layer's per-copy gradients are materialized (PER_EXAMPLE, [n K, P_l]) and averaged per
 * example into rows [n, P], and the rows are clipped in double and summed as the
 * reference path does (docs/dpsgd.md has the measured cost). */
static dpt_status accumulate_mult(dpsgd_state *s, dpt_trainer *t, const int32_t *y, size_t n, size_t K,
                                  double *loss_sum) {
    dpt_model *m = t->model;
    const size_t P = m->n_params, nK = n * K;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < K; k++) s->ya[i * K + k] = y ? y[i] : 0;
    double part = 0;
    DPT_TRY(dpt_train_forward_backward(t, &s->buf, s->xa, y ? s->ya : NULL, NULL, nK, 1.0f, &part));
    *loss_sum = part / (double)K;
    memset(s->rows, 0, n * P * sizeof *s->rows); /* frozen layers' columns stay 0 */
    const double invK = 1.0 / (double)K;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (!dpt_train_layer_trains(t, l)) continue;
        const size_t Pl = L->n_params;
        /* g_{i,k} for the n K copies: [n K, P_l] */
        DPT_TRY(L->ops->backward_params(L, m->act[l], m->dact[l + 1], nK, DPT_GRAD_PER_EXAMPLE, NULL, s->tmp, Pl, 0));
        for (size_t i = 0; i < n; i++) {
            float *r = s->rows + i * P + L->param_offset;
            const float *g = s->tmp + i * K * Pl;
            for (size_t j = 0; j < Pl; j++) {
                double acc = 0.0;
                for (size_t k = 0; k < K; k++) acc += g[k * Pl + j];
                r[j] = (float)(acc * invK);
            }
        }
    }
    if (s->adaptive) /* ||gbar_i|| of the mean before clipping, in double (frozen columns are 0) */
        for (size_t i = 0; i < n; i++) {
            double n2 = 0;
            for (size_t j = 0; j < P; j++) n2 += (double)s->rows[i * P + j] * s->rows[i * P + j];
            s->sums[0] += (n2 <= s->ada.C * s->ada.C ? 1.0 : 0.0) - 0.5;
        }
    if (s->cfg.clip_mode == DPT_CLIP_FLAT) {
        /* C_t (fixed clipping: cfg.clip): the clip the noise sigma_Delta C_t is drawn for */
        dpt_status st = dpt_privacy_clip_rows_ref(s->rows, n, P, P, s->ada.C, NULL);
        if (st != DPT_OK) return dpt_error_context(st, "dpsgd (augmentation multiplicity %zu)", K);
    } else {
        size_t g = 0;
        for (size_t l = 0; l < m->n_layers; l++) {
            const dpt_layer *L = &m->layers[l];
            if (!dpt_train_layer_trains(t, l)) continue;
            dpt_status st = dpt_privacy_clip_rows_ref(s->rows + L->param_offset, n, L->n_params, P, s->C_l[g], NULL);
            if (st != DPT_OK)
                return dpt_error_context(st, "dpsgd (augmentation multiplicity %zu): layer %s", K, L->name);
            g++;
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < P; j++) m->grad[j] += s->rows[i * P + j];
    return DPT_OK;
}

static dpt_status accumulate_aug(dpsgd_state *s, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                 double *loss_sum) {
    const dpt_model *m = t->model;
    const size_t K = t->cfg.aug_mult ? t->cfg.aug_mult : 1, D = m->in_dim, nmax = m->max_batch / K;
    DPT_ASSERT(nmax >= 1 && t->chunk_idx && s->aug_cap == m->max_batch);
    double ls = 0;
    for (size_t lo = 0; lo < bc; lo += nmax) {
        const size_t n = bc - lo < nmax ? bc - lo : nmax;
        double part = 0;
        DPT_TRY(dpt_train_augment(t, x + lo * D, t->chunk_idx + lo, n, K, s->xa));
        if (K == 1) {
            for (size_t i = 0; i < n; i++) s->ya[i] = y ? y[lo + i] : 0;
            const int32_t *yy = y ? s->ya : NULL;
            DPT_TRY(s->cfg.reference ? accumulate_ref(s, t, s->xa, yy, n, &part)
                                     : accumulate_fast(s, t, s->xa, yy, n, &part));
        } else {
            DPT_TRY(accumulate_mult(s, t, y ? y + lo : NULL, n, K, &part));
        }
        ls += part;
    }
    *loss_sum = ls;
    return DPT_OK;
}

static dpt_status dpsgd_accumulate(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                   double *loss_sum) {
    dpsgd_state *s = a->state;
    *loss_sum = 0;
    if (bc == 0) return DPT_OK;
    if (t->cfg.augment != DPT_AUGMENT_NONE) return accumulate_aug(s, t, x, y, bc, loss_sum);
    return s->cfg.reference ? accumulate_ref(s, t, x, y, bc, loss_sum) : accumulate_fast(s, t, x, y, bc, loss_sum);
}

/* Noise once on the sum, then divide by the expected batch size qN (also when the
 * sampled batch is empty: the release is still noisy and still accounted). */
static dpt_status dpsgd_finish(dpt_algo *a, dpt_trainer *t, size_t batch) {
    dpsgd_state *s = a->state;
    dpt_model *m = t->model;
    dpt_rng *noise = dpt_trainer_noise_rng(t);
    /* (sum + noise) / qN in one pass over the gradient; with frozen layers over the trained
     * coordinates only (packed, so the secure mode's lattice dimension is theirs; the
     * frozen slices of grad stay 0 and the optimizer skips them) */
    float *v = t->frozen ? s->packed : m->grad;
    const size_t n = t->n_trained;
    if (t->frozen) {
        size_t k = 0;
        for (size_t r = 0; r < t->n_train_ranges; r++) {
            const size_t lo = t->train_ranges[2 * r], len = t->train_ranges[2 * r + 1] - lo;
            memcpy(s->packed + k, m->grad + lo, len * sizeof *v);
            k += len;
        }
        DPT_ASSERT(k == n);
    }
    DPT_ASSERT(n == s->rel.coords);
    dpt_gauss_release_set_clip(&s->rel, s->ada.C); /* std sigma_Delta C_t (fixed: sigma C) */
    dpt_status st = dpt_gauss_release_apply(&s->rel, noise, v, t->threads);
    if (st != DPT_OK) return st;
    /* the count half of the joint release, then C_{t+1} from it (post-processing) */
    if (s->adaptive) DPT_TRY(dpt_adaclip_step(&s->ada, noise, s->sums[0]));
    if (!t->frozen) return DPT_OK;
    for (size_t r = 0, k = 0; r < t->n_train_ranges; r++) {
        const size_t lo = t->train_ranges[2 * r], len = t->train_ranges[2 * r + 1] - lo;
        memcpy(m->grad + lo, s->packed + k, len * sizeof *v);
        k += len;
    }
    return DPT_OK;
}

/* The step's privacy event: SGM, or in secure mode with the table sampler SGM with the
 * sampler's distance (dpt_algo_sgm_events); add_events gives the budget look-ahead the same. */
static dpt_status dpsgd_add_events(dpt_algo *a, const dpt_trainer *t, dpt_ledger *l, uint64_t count) {
    const dpsgd_state *s = a->state;
    (void)t;
    return dpt_gauss_release_record(&s->rel, l, count);
}

static dpt_status dpsgd_record(dpt_algo *a, dpt_trainer *t, size_t batch) {
    (void)batch;
    DPT_ASSERT(t->ledger);
    const dpsgd_state *s = a->state;
    if (s->adaptive && !dpt_ledger_get_meta(t->ledger, "adaptive_clipping")) {
        /* what each SGM(q, sigma) event of this run covers (docs/dpsgd.md, "Adaptive clipping") */
        char note[320];
        snprintf(note, sizeof note, "Andrew et al. 2021, quantile %.9g, lr %.9g: each SGM(q, sigma %.9g) event is the "
                 "joint release of the gradient sum (noise multiplier sigma_Delta %.9g) and the centred unclipped "
                 "count (noise std sigma_b %.9g, sensitivity 1/2)", s->ada.quantile, s->ada.lr, s->rel.sigma_acct,
                 s->rel.sigma, s->ada.sigma_b);
        DPT_TRY(dpt_ledger_set_meta(t->ledger, "adaptive_clipping", note));
    }
    return dpsgd_add_events(a, t, t->ledger, 1);
}

/* One SGM event (q, a->sigma) per step, before the optimizer changes the parameters;
 * a->sigma is sigma, or the secure mode's effective multiplier (dpt_algo_bind_sgm). */
static dpt_status dpsgd_bind(dpt_algo *a, dpt_trainer *t) {
    dpsgd_state *s = a->state;
    if (s->cfg.unaccounted) {
        /* the paper's fixed-size batches (no ledger): the same noise, divided by B as the
         * accounted mode divides by qN (Opacus' expected batch size is B without Poisson) */
        DPT_CHECK(t->cfg.sampler == DPT_SAMPLER_SHUFFLE, DPT_EINVAL,
                  "dpsgd: the non-accounted mode is for shuffled fixed-size batches (dpt_train_config.sampler = "
                  "DPT_SAMPLER_SHUFFLE), not %s", dpt_sampler_enum_name(t->cfg.sampler));
        const double B = (double)t->cfg.batch_size, n = (double)t->train->n;
        return dpt_error_context(dpt_gauss_release_init(&s->rel, B / n, s->cfg.sigma, s->cfg.clip, 1.0 / B,
                                                        t->n_trained, 0, s->cfg.secure_sampler),
                                 "dpsgd (non-accounted)");
    }
    DPT_TRY(dpt_algo_bind_sgm(a, t, "dpsgd", s->cfg.sigma, s->cfg.clip, 1.0, s->cfg.secure, s->cfg.secure_sampler,
                              &s->rel));
    if (!s->adaptive) return DPT_OK;
    /* sigma is the joint release's: the ledger records it (a->sigma unchanged), the
     * gradient draws sigma_Delta */
    s->ada.expected = t->cfg.sample_rate * (double)t->train->n;
    if (s->ada.sigma_b == 0) s->ada.sigma_b = s->ada.expected / 20;
    return dpt_gauss_release_adaptive(&s->rel, s->ada.sigma_b, "dpt_dpsgd_config.adaptive_sigma_b");
}

/* ==== Adaptive clipping: metrics and checkpoint ==== */

double dpt_algo_dpsgd_clip(const dpt_algo *a) {
    if (!a || !a->name || strcmp(a->name, "dpsgd")) return NAN;
    const dpsgd_state *s = a->state;
    return s->ada.C;
}

/* Numbers written bit-exactly (a resume continues with the same C_t) */
static void add_exact(cJSON *o, const char *key, double v) {
    char buf[DPT_DOUBLE_TEXT];
    dpt_format_double(v, buf);
    cJSON_AddRawToObject(o, key, buf);
}

static dpt_status dpsgd_epoch_metrics(dpt_algo *a, dpt_trainer *t, cJSON *obj, char *line, size_t n) {
    (void)t;
    const dpsgd_state *s = a->state;
    add_exact(obj, "clip", s->ada.C);
    snprintf(line, n, "clip %.4g (adaptive, quantile %g)", s->ada.C, s->ada.quantile);
    return DPT_OK;
}

static dpt_status dpsgd_state_save(dpt_algo *a, cJSON *obj) {
    const dpsgd_state *s = a->state;
    add_exact(obj, "clip", s->ada.C); /* a function of the released counts */
    return DPT_OK;
}

static dpt_status dpsgd_state_load(dpt_algo *a, const cJSON *obj) {
    dpsgd_state *s = a->state;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(obj, "clip");
    DPT_CHECK(cJSON_IsNumber(c) && isfinite(c->valuedouble) && c->valuedouble > 0, DPT_EFORMAT,
              "checkpoint: algorithm_state.clip (the adaptive clip C_t) is missing or not a positive number");
    s->ada.C = c->valuedouble;
    return DPT_OK;
}

static void dpsgd_free(dpt_algo *a) {
    if (!a) return;
    dpsgd_state *s = a->state;
    if (s) {
        dpt_chunk_bufs_free(&s->buf);
        dpt_free(s->sq);
        dpt_free(s->c);
        dpt_free(s->C_l);
        dpt_free(s->pe);
        dpt_free(s->packed);
        keep_free(s);
        aug_free(s);
        free(s);
    }
    free(a);
}

dpt_status dpt_algo_dpsgd_new(const dpt_dpsgd_config *cfg, dpt_algo **out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_algo_dpsgd_new: out is NULL");
    *out = NULL;
    DPT_CHECK(cfg, DPT_EINVAL, "dpt_algo_dpsgd_new: cfg is NULL");
    DPT_CHECK(isfinite(cfg->clip) && cfg->clip > 0, DPT_EINVAL,
              "dpt_dpsgd_config.clip: the clipping norm C must be > 0, got %g", cfg->clip);
    /* sigma = 0 releases the clipped sum itself: no accountant gives it a finite epsilon,
     * so it is refused here rather than at the first ledger event. */
    DPT_CHECK(isfinite(cfg->sigma) && cfg->sigma > 0, DPT_EINVAL,
              "dpt_dpsgd_config.sigma: the noise multiplier must be > 0, got %g (for training without noise use "
              "dpt_algo_sgd_new)",
              cfg->sigma);
    DPT_CHECK(cfg->clip_mode == DPT_CLIP_FLAT || cfg->clip_mode == DPT_CLIP_PER_LAYER, DPT_EINVAL,
              "dpt_dpsgd_config.clip_mode: unknown mode %d", (int)cfg->clip_mode);
    DPT_CHECK(cfg->secure_sampler == DPT_DGAUSS_TABLE || cfg->secure_sampler == DPT_DGAUSS_CKS, DPT_EINVAL,
              "dpt_dpsgd_config.secure_sampler: unknown discrete Gaussian sampler %d", (int)cfg->secure_sampler);
    DPT_CHECK(isfinite(cfg->adaptive_quantile) && cfg->adaptive_quantile >= 0 && cfg->adaptive_quantile < 1,
              DPT_EINVAL, "dpt_dpsgd_config.adaptive_quantile: the target quantile must be in (0, 1), or 0 for a "
              "fixed clip; got %g", cfg->adaptive_quantile);
    DPT_CHECK(!cfg->unaccounted || (!cfg->secure && cfg->adaptive_quantile == 0), DPT_EINVAL,
              "dpt_dpsgd_config.unaccounted: the non-accounted mode (shuffled fixed-size batches) takes neither "
              "secure noise nor adaptive clipping");
    if (cfg->adaptive_quantile > 0) {
        DPT_TRY(dpt_adaclip_check(cfg->adaptive_quantile, cfg->adaptive_lr, cfg->adaptive_sigma_b,
                                  "dpt_dpsgd_config.adaptive_"));
        DPT_CHECK(!cfg->secure, DPT_ENOTSUP, "dpt_dpsgd_config.adaptive_quantile: adaptive clipping is not available "
                  "with secure (lattice) noise");
    }
    dpt_algo *a = calloc(1, sizeof *a);
    dpsgd_state *s = calloc(1, sizeof *s);
    if (!a || !s) {
        free(a);
        free(s);
        return dpt_set_error(DPT_ENOMEM, "dpsgd: out of memory");
    }
    s->cfg = *cfg;
    s->keep_budget = DPSGD_KEEP_BUDGET;
    s->min_pass = DPSGD_MIN_PASS;
    if (!s->cfg.ref_chunk) s->cfg.ref_chunk = 16;
    int w = snprintf(s->settings, sizeof s->settings, "C %.9g, clip mode %s", cfg->clip,
                     cfg->clip_mode == DPT_CLIP_FLAT ? "flat" : "per-layer");
    s->adaptive = cfg->adaptive_quantile > 0;
    s->ada.C = cfg->clip;
    s->ada.frac = NAN;
    if (s->adaptive) {
        s->ada.quantile = cfg->adaptive_quantile;
        s->ada.lr = cfg->adaptive_lr;
        s->ada.sigma_b = cfg->adaptive_sigma_b;
        snprintf(s->settings + w, sizeof s->settings - (size_t)w, ", adaptive quantile %.9g lr %.9g sigma_b %.9g",
                 cfg->adaptive_quantile, cfg->adaptive_lr, cfg->adaptive_sigma_b);
    }
    a->settings = s->settings;
    a->name = cfg->unaccounted ? "dpsgd-unaccounted" : "dpsgd";
    a->is_private = !cfg->unaccounted;
    a->dp_mechanism = 1; /* clipped and noised in both modes: no train_loss either way */
    a->sigma = cfg->sigma;
    a->begin = dpsgd_begin;
    a->accumulate = dpsgd_accumulate;
    a->finish = dpsgd_finish;
    a->record = cfg->unaccounted ? NULL : dpsgd_record;
    a->add_events = cfg->unaccounted ? NULL : dpsgd_add_events;
    a->privacy_note = cfg->unaccounted ? "non-accounted: DP-SGD on shuffled fixed-size batches (no accountant covers "
                                         "this sampling)"
                                       : NULL;
    a->bind = dpsgd_bind;
    a->distributable = 1; /* accumulate only adds into model->grad (docs/distributed.md) */
    a->freezable = 1;     /* the trained layers alone are clipped, summed and noised */
    a->regression = 1;    /* the prologue's squared error against the targets: the same clipping */
    a->cacheable = 1;     /* the prologue runs the model (a frozen trunk's features may be cached) */
    a->augmentable = 1;   /* accumulate_aug: the clipped mean over each example's copies */
    a->free = dpsgd_free;
    a->state = s;
    if (s->adaptive) {
        a->n_sums = 1; /* the centred count, reduced over shards with the gradient */
        a->sums = s->sums;
        a->epoch_metrics = dpsgd_epoch_metrics;
        a->state_save = dpsgd_state_save;
        a->state_load = dpsgd_state_load;
    }
    *out = a;
    return DPT_OK;
}
