/* Linear layer v = x W^T + b with the four parameter-gradient modes of DESIGN.md.
 * B = batch, D = d_in, K = d_out, P = K*D (+ K with bias).
 * w: [K, D] row-major view into theta, b: [K] right after it. Every matmul is dpt_sgemm;
 * the per-example loops are independent across examples, so any thread count gives the
 * same bits as long as the BLAS thread count is the same. */
#include "nn_internal.h"

#include <stdio.h>
#include <string.h>

/* ==== forward / backward_input ==== */

static dpt_status linear_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const size_t D = L->in_dim, K = L->out_dim;
    /* v = 1 b^T (broadcast copy), then v += X W^T: the bias add is fused as beta = 1 */
    if (L->b) {
        for (size_t i = 0; i < B; i++) memcpy(v + i * K, L->b, K * sizeof *v);
    }
    dpt_sgemm(0, 1, B, K, D, 1.0f, x, D, L->w, D, L->b ? 1.0f : 0.0f, v, K);
    return DPT_OK;
}

static dpt_status linear_backward_input(const dpt_layer *L, const float *x, const float *v,
                                        const float *dv, float *dx, size_t B) {
    const size_t D = L->in_dim, K = L->out_dim;
    /* dX [B, D] = dV [B, K] W [K, D] */
    dpt_sgemm(0, 0, B, D, K, 1.0f, dv, K, L->w, D, 0.0f, dx, D);
    return DPT_OK;
}

/* ==== backward_params ==== */

/* db[k] (+)= sum_i a[i, k], summed over i in order (vectorized over k) */
static void colsum(const float *a, size_t B, size_t K, float *db, int accumulate) {
    if (!accumulate) memset(db, 0, K * sizeof *db);
    for (size_t i = 0; i < B; i++) {
        const float *r = a + i * K;
        for (size_t k = 0; k < K; k++) db[k] += r[k];
    }
}

static dpt_status linear_backward_params(const dpt_layer *L, const float *x, const float *dv,
                                         size_t B, dpt_grad_mode mode, const float *weights,
                                         float *out, size_t ld, int accumulate) {
    const size_t D = L->in_dim, K = L->out_dim, KD = K * D;
    const float beta = accumulate ? 1.0f : 0.0f;
    switch (mode) {
    case DPT_GRAD_SUM:
        /* dW = dV^T X (sum over the batch: one GEMM), db = column sums of dV */
        dpt_sgemm(1, 0, K, D, B, 1.0f, dv, K, x, D, beta, out, D);
        if (L->has_bias) colsum(dv, B, K, out + KD, accumulate);
        return DPT_OK;
    case DPT_GRAD_WEIGHTED: {
        DPT_CHECK(weights, DPT_EINVAL, "%s: weighted gradient needs weights", L->name);
        /* S = diag(w) dV in scratch [B, K]; dW = S^T X (one GEMM); db = column sums of S */
        float *s = L->scratch;
        for (size_t i = 0; i < B; i++) {
            const float wi = weights[i];
            const float *r = dv + i * K;
            float *o = s + i * K;
            for (size_t k = 0; k < K; k++) o[k] = wi * r[k];
        }
        dpt_sgemm(1, 0, K, D, B, 1.0f, s, K, x, D, beta, out, D);
        if (L->has_bias) colsum(s, B, K, out + KD, accumulate);
        return DPT_OK;
    }
    case DPT_GRAD_PER_EXAMPLE: {
        DPT_CHECK(ld >= L->n_params, DPT_EINVAL, "%s: per-example row stride %zu < %zu parameters",
                  L->name, ld, L->n_params);
        /* dW_i = dv_i x_i^T at out[i*ld + 0 .. K*D), db_i = dv_i at out[i*ld + K*D ..) */
        const long long nB = (long long)B;
#pragma omp parallel for num_threads(L->threads) if (B * L->n_params > DPT_NN_PAR_MIN)
        for (long long ii = 0; ii < nB; ii++) {
            const size_t i = (size_t)ii;
            const float *xi = x + i * D, *dvi = dv + i * K;
            float *o = out + i * ld;
            for (size_t k = 0; k < K; k++) {
                const float g = dvi[k];
                float *ok = o + k * D;
                if (accumulate)
                    for (size_t d = 0; d < D; d++) ok[d] += g * xi[d];
                else
                    for (size_t d = 0; d < D; d++) ok[d] = g * xi[d];
            }
            if (L->has_bias) {
                if (accumulate)
                    for (size_t k = 0; k < K; k++) o[KD + k] += dvi[k];
                else
                    memcpy(o + KD, dvi, K * sizeof *o);
            }
        }
        return DPT_OK;
    }
    case DPT_GRAD_SQNORM: {
        /* Ghost norm (Goodfellow 2015): ||dv_i x_i^T||_F^2 = ||x_i||^2 ||dv_i||^2, plus
         * ||dv_i||^2 for the bias; O(B (D + K)), accumulated in double. */
        for (size_t i = 0; i < B; i++) {
            const float *xi = x + i * D, *dvi = dv + i * K;
            double sx = 0.0, sv = 0.0;
            /* reordered (vector lanes) but still double: a serial double chain cost more
               than the rest of the clipping */
#pragma omp simd reduction(+ : sx)
            for (size_t d = 0; d < D; d++) sx += (double)xi[d] * xi[d];
#pragma omp simd reduction(+ : sv)
            for (size_t k = 0; k < K; k++) sv += (double)dvi[k] * dvi[k];
            double n2 = sx * sv + (L->has_bias ? sv : 0.0);
            out[i] = accumulate ? (float)((double)out[i] + n2) : (float)n2;
        }
        return DPT_OK;
    }
    case DPT_GRAD_DOT: {
        DPT_CHECK(weights, DPT_EINVAL, "%s: inner products need a vector", L->name);
        /* <dv_i x_i^T, V> + <dv_i, v_b> = dv_i . (V x_i + v_b): Y = X V^T [B, K] in scratch
         * (one GEMM, the cost of a forward), then B dot products of length K in double */
        float *y = L->scratch;
        const float *vb = L->has_bias ? weights + KD : NULL;
        dpt_sgemm(0, 1, B, K, D, 1.0f, x, D, weights, D, 0.0f, y, K);
        for (size_t i = 0; i < B; i++) {
            const float *yi = y + i * K, *dvi = dv + i * K;
            double s = 0.0;
            if (vb) {
#pragma omp simd reduction(+ : s)
                for (size_t k = 0; k < K; k++) s += (double)dvi[k] * ((double)yi[k] + vb[k]);
            } else {
#pragma omp simd reduction(+ : s)
                for (size_t k = 0; k < K; k++) s += (double)dvi[k] * yi[k];
            }
            out[i] = accumulate ? (float)((double)out[i] + s) : (float)s;
        }
        return DPT_OK;
    }
    }
    return dpt_set_error(DPT_EINVAL, "%s: unknown gradient mode %d", L->name, (int)mode);
}

/* out[i k + j] += <dv_i x_i^T, dvz_j xz_j^T>_F (+ <dv_i, dvz_j> for the bias)
 *              = (dv_i . dvz_j) (x_i . xz_j + [bias]): O(B k (D + K)), in double */
static dpt_status linear_cross(const dpt_layer *L, const float *x, const float *dv, size_t B, const float *xz,
                               const float *dvz, size_t k, double *out) {
    const size_t D = L->in_dim, K = L->out_dim;
    for (size_t i = 0; i < B; i++) {
        const float *xi = x + i * D, *dvi = dv + i * K;
        for (size_t j = 0; j < k; j++) {
            const float *xj = xz + j * D, *dvj = dvz + j * K;
            double sx = 0.0, sv = 0.0;
#pragma omp simd reduction(+ : sx)
            for (size_t d = 0; d < D; d++) sx += (double)xi[d] * xj[d];
#pragma omp simd reduction(+ : sv)
            for (size_t q = 0; q < K; q++) sv += (double)dvi[q] * dvj[q];
            out[i * k + j] += sv * (sx + (L->has_bias ? 1.0 : 0.0));
        }
    }
    return DPT_OK;
}

/* ==== jvp ==== */

static dpt_status linear_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx,
                             const float *dtheta, float *dv, size_t B) {
    const size_t D = L->in_dim, K = L->out_dim;
    /* dV = dX W^T + X dW^T + 1 db^T */
    float beta = 0.0f;
    if (dtheta && L->has_bias) {
        for (size_t i = 0; i < B; i++) memcpy(dv + i * K, dtheta + K * D, K * sizeof *dv);
        beta = 1.0f;
    }
    if (dx) {
        dpt_sgemm(0, 1, B, K, D, 1.0f, dx, D, L->w, D, beta, dv, K);
        beta = 1.0f;
    }
    if (dtheta) {
        dpt_sgemm(0, 1, B, K, D, 1.0f, x, D, dtheta, D, beta, dv, K);
        beta = 1.0f;
    }
    if (beta == 0.0f) memset(dv, 0, B * K * sizeof *dv);
    return DPT_OK;
}

/* ==== tensor table ==== */

static size_t linear_n_tensors(const dpt_layer *L) { return L->has_bias ? 2 : 1; }

static void linear_tensor(const dpt_layer *L, size_t j, dpt_param_tensor *t) {
    memset(t, 0, sizeof *t);
    if (j == 0) {
        snprintf(t->name, sizeof t->name, "%s.weight", L->name);
        t->ndim = 2;
        t->shape[0] = L->out_dim;
        t->shape[1] = L->in_dim;
        t->offset = L->param_offset;
        t->size = L->out_dim * L->in_dim;
        t->role = DPT_TENSOR_WEIGHT;
    } else {
        DPT_ASSERT(j == 1 && L->has_bias);
        snprintf(t->name, sizeof t->name, "%s.bias", L->name);
        t->ndim = 1;
        t->shape[0] = L->out_dim;
        t->offset = L->param_offset + L->out_dim * L->in_dim;
        t->size = L->out_dim;
        t->role = DPT_TENSOR_BIAS;
    }
}

static const dpt_layer_ops linear_ops = {
    linear_forward, linear_backward_input, linear_backward_params, linear_jvp,
    linear_n_tensors, linear_tensor, linear_cross, NULL, NULL,
};

void dpt_layer_linear_setup(dpt_layer *L, size_t D, size_t K, int has_bias) {
    L->kind = DPT_LAYER_LINEAR;
    L->ops = &linear_ops;
    L->in_dim = D;
    L->out_dim = K;
    L->in_shape[0] = L->in_shape[1] = 1;
    L->in_shape[2] = D;
    L->out_shape[0] = L->out_shape[1] = 1;
    L->out_shape[2] = K;
    L->has_bias = has_bias;
    L->n_params = K * D + (has_bias ? K : 0);
}
