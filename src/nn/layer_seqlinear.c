/* Position-wise Linear: the same v_t = W x_t + b at each of the T positions of a sequence,
 * (1, T, D) -> (1, T, K). B = batch, T = positions, D = d_in, K = d_out, P = K D (+ K).
 *   w: [K, D] view into theta ("plinN.weight"), b: [K] after it ("plinN.bias")
 *   X_i [T, D], dV_i [T, K]: example i's input and output cotangent
 * Batch products treat the B T positions as rows of one GEMM. Example i's gradient is
 *   g_i = (dV_i^T X_i, dV_i^T 1)
 * and its squared norm has two paths, chosen per layer at setup (the layer's `ghost` flag;
 * tests force both):
 *   ghost (Bu et al. 2022, "Scalable and efficient training of large convolutional neural
 *   networks with differential privacy", mixed ghost clipping; Li et al. 2022 for
 *   sequences): ||dV_i^T X_i||_F^2 = <X_i X_i^T, dV_i dV_i^T>_F, two T x T Gram matrices,
 *   O(T^2 (D + K)) per example, the gradient never formed;
 *   materialized: M = dV_i^T X_i [K, D], then its squared entries, O(T D K).
 * plus ||dV_i^T 1||^2 for the bias. Ghost iff T (D + K) < D K: operation counts, the rule
 * Conv2d uses (docs/nn.md). */
#include "nn_internal.h"

#include <stdio.h>
#include <string.h>

static size_t pl_T(const dpt_layer *L) { return L->in_shape[1]; }
static size_t pl_D(const dpt_layer *L) { return L->in_shape[2]; }
static size_t pl_K(const dpt_layer *L) { return L->out_shape[2]; }

/* ==== forward / backward_input / jvp ==== */

static dpt_status pl_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const size_t R = B * pl_T(L), D = pl_D(L), K = pl_K(L);
    /* V [R, K] = 1 b^T + X W^T over all R = B T positions */
    if (L->b)
        for (size_t r = 0; r < R; r++) memcpy(v + r * K, L->b, K * sizeof *v);
    dpt_sgemm(0, 1, R, K, D, 1.0f, x, D, L->w, D, L->b ? 1.0f : 0.0f, v, K);
    return DPT_OK;
}

static dpt_status pl_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv, float *dx,
                                    size_t B) {
    const size_t R = B * pl_T(L), D = pl_D(L), K = pl_K(L);
    /* dX [R, D] = dV [R, K] W [K, D] */
    dpt_sgemm(0, 0, R, D, K, 1.0f, dv, K, L->w, D, 0.0f, dx, D);
    return DPT_OK;
}

static dpt_status pl_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx, const float *dtheta,
                         float *dv, size_t B) {
    const size_t R = B * pl_T(L), D = pl_D(L), K = pl_K(L);
    /* dV = dX W^T + X dW^T + 1 db^T */
    float beta = 0.0f;
    if (dtheta && L->has_bias) {
        for (size_t r = 0; r < R; r++) memcpy(dv + r * K, dtheta + K * D, K * sizeof *dv);
        beta = 1.0f;
    }
    if (dx) {
        dpt_sgemm(0, 1, R, K, D, 1.0f, dx, D, L->w, D, beta, dv, K);
        beta = 1.0f;
    }
    if (dtheta) {
        dpt_sgemm(0, 1, R, K, D, 1.0f, x, D, dtheta, D, beta, dv, K);
        beta = 1.0f;
    }
    if (beta == 0.0f) memset(dv, 0, R * K * sizeof *dv);
    return DPT_OK;
}

/* ==== backward_params ==== */

/* db[k] (+)= sum_r a[r, k] over R rows, in order */
static void colsum(const float *a, size_t R, size_t K, float *db, int accumulate) {
    if (!accumulate) memset(db, 0, K * sizeof *db);
    for (size_t r = 0; r < R; r++)
        for (size_t k = 0; k < K; k++) db[k] += a[r * K + k];
}

/* ||dV_i^T 1||^2 in double */
static double bias_sqnorm(const float *dvi, size_t T, size_t K) {
    double s = 0.0;
    for (size_t k = 0; k < K; k++) {
        double c = 0.0;
        for (size_t t = 0; t < T; t++) c += dvi[t * K + k];
        s += c * c;
    }
    return s;
}

/* ||g_i||^2 by the Gram path: sum_{t,t'} (X X^T)_{tt'} (dV dV^T)_{tt'}; g: scratch [2 T^2] */
static double sqnorm_ghost(const float *xi, const float *dvi, size_t T, size_t D, size_t K, float *g) {
    float *gx = g, *gv = g + T * T;
    dpt_sgemm(0, 1, T, T, D, 1.0f, xi, D, xi, D, 0.0f, gx, T);   /* X_i X_i^T [T, T] */
    dpt_sgemm(0, 1, T, T, K, 1.0f, dvi, K, dvi, K, 0.0f, gv, T); /* dV_i dV_i^T [T, T] */
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t j = 0; j < T * T; j++) s += (double)gx[j] * gv[j];
    return s;
}

/* ||g_i||^2 by forming M = dV_i^T X_i [K, D] in g (scratch [K D]) */
static double sqnorm_materialized(const float *xi, const float *dvi, size_t T, size_t D, size_t K, float *g) {
    dpt_sgemm(1, 0, K, D, T, 1.0f, dvi, K, xi, D, 0.0f, g, D);
    double s = 0.0; /* a vector of partial sums (one serial double sum was a third of gpt_tiny's DP-SGD overhead) */
#pragma omp simd reduction(+ : s)
    for (size_t j = 0; j < K * D; j++) s += (double)g[j] * g[j];
    return s;
}

static dpt_status pl_backward_params(const dpt_layer *L, const float *x, const float *dv, size_t B,
                                     dpt_grad_mode mode, const float *weights, float *out, size_t ld,
                                     int accumulate) {
    const size_t T = pl_T(L), D = pl_D(L), K = pl_K(L), KD = K * D, R = B * T;
    const float beta = accumulate ? 1.0f : 0.0f;
    switch (mode) {
    case DPT_GRAD_SUM:
        /* dW = dV^T X over all R positions (one GEMM), db = column sums of dV */
        dpt_sgemm(1, 0, K, D, R, 1.0f, dv, K, x, D, beta, out, D);
        if (L->has_bias) colsum(dv, R, K, out + KD, accumulate);
        return DPT_OK;
    case DPT_GRAD_WEIGHTED: {
        DPT_CHECK(weights, DPT_EINVAL, "%s: weighted gradient needs weights", L->name);
        /* S = diag(w_i repeated over example i's T rows) dV in scratch [R, K]; dW = S^T X */
        float *s = L->scratch;
        for (size_t r = 0; r < R; r++) {
            const float wi = weights[r / T];
            for (size_t k = 0; k < K; k++) s[r * K + k] = wi * dv[r * K + k];
        }
        dpt_sgemm(1, 0, K, D, R, 1.0f, s, K, x, D, beta, out, D);
        if (L->has_bias) colsum(s, R, K, out + KD, accumulate);
        return DPT_OK;
    }
    case DPT_GRAD_PER_EXAMPLE:
        DPT_CHECK(ld >= L->n_params, DPT_EINVAL, "%s: per-example row stride %zu < %zu parameters", L->name, ld,
                  L->n_params);
        /* dW_i = dV_i^T X_i (one small GEMM per example), db_i = dV_i^T 1 */
        for (size_t i = 0; i < B; i++) {
            const float *xi = x + i * T * D, *dvi = dv + i * T * K;
            dpt_sgemm(1, 0, K, D, T, 1.0f, dvi, K, xi, D, beta, out + i * ld, D);
            if (L->has_bias) colsum(dvi, T, K, out + i * ld + KD, accumulate);
        }
        return DPT_OK;
    case DPT_GRAD_SQNORM:
        for (size_t i = 0; i < B; i++) {
            const float *xi = x + i * T * D, *dvi = dv + i * T * K;
            double n2 = L->ghost ? sqnorm_ghost(xi, dvi, T, D, K, L->scratch)
                                 : sqnorm_materialized(xi, dvi, T, D, K, L->scratch);
            if (L->has_bias) n2 += bias_sqnorm(dvi, T, K);
            out[i] = accumulate ? (float)((double)out[i] + n2) : (float)n2;
        }
        return DPT_OK;
    case DPT_GRAD_DOT: {
        DPT_CHECK(weights, DPT_EINVAL, "%s: inner products need a vector", L->name);
        /* <g_i, (Vw, vb)> = sum_t dv_t . (Vw x_t + vb): Y = X Vw^T [R, K] in scratch (one GEMM) */
        float *y = L->scratch;
        const float *vb = L->has_bias ? weights + KD : NULL;
        dpt_sgemm(0, 1, R, K, D, 1.0f, x, D, weights, D, 0.0f, y, K);
        for (size_t i = 0; i < B; i++) {
            double s = 0.0;
            for (size_t j = i * T * K; j < (i + 1) * T * K; j++)
                s += (double)dv[j] * ((double)y[j] + (vb ? vb[j % K] : 0.0f));
            out[i] = accumulate ? (float)((double)out[i] + s) : (float)s;
        }
        return DPT_OK;
    }
    }
    return dpt_set_error(DPT_EINVAL, "%s: unknown gradient mode %d", L->name, (int)mode);
}

/* ==== tensor table ==== */

static size_t pl_n_tensors(const dpt_layer *L) { return L->has_bias ? 2 : 1; }

static void pl_tensor(const dpt_layer *L, size_t j, dpt_param_tensor *t) {
    memset(t, 0, sizeof *t);
    const size_t D = pl_D(L), K = pl_K(L);
    if (j == 0) {
        snprintf(t->name, sizeof t->name, "%s.weight", L->name);
        t->ndim = 2;
        t->shape[0] = K;
        t->shape[1] = D;
        t->offset = L->param_offset;
        t->size = K * D;
        t->role = DPT_TENSOR_WEIGHT;
    } else {
        DPT_ASSERT(j == 1 && L->has_bias);
        snprintf(t->name, sizeof t->name, "%s.bias", L->name);
        t->ndim = 1;
        t->shape[0] = K;
        t->offset = L->param_offset + K * D;
        t->size = K;
        t->role = DPT_TENSOR_BIAS;
    }
}

static const dpt_layer_ops pl_ops = {
    pl_forward, pl_backward_input, pl_backward_params, pl_jvp, pl_n_tensors, pl_tensor, NULL, NULL, NULL,
};

dpt_status dpt_layer_seqlinear_setup(dpt_layer *L, const size_t in_shape[3], size_t K, int has_bias) {
    DPT_CHECK(in_shape[0] == 1, DPT_EINVAL, "plinear: the input must be a sequence of shape (1, T, D), got %zux%zux%zu",
              in_shape[0], in_shape[1], in_shape[2]);
    const size_t T = in_shape[1], D = in_shape[2];
    L->kind = DPT_LAYER_SEQLINEAR;
    L->ops = &pl_ops;
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    L->out_shape[0] = 1;
    L->out_shape[1] = T;
    L->out_shape[2] = K;
    L->in_dim = T * D;
    L->out_dim = T * K;
    L->has_bias = has_bias;
    L->n_params = K * D + (has_bias ? K : 0);
    L->ghost = T * (D + K) < D * K;
    /* SQNORM scratch for either path (tests switch them): 2 T^2 (Gram) or K D (materialized) */
    L->scratch_need = 2 * T * T > K * D ? 2 * T * T : K * D;
    return DPT_OK;
}
