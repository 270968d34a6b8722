/* LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019) over the D features of
 * each position of a sequence (1, T, D). B = batch, T = positions, D = features.
 *   LayerNorm: xhat = (x - mu) / sqrt(var + 1e-5),  v = gamma * xhat + beta   (torch's
 *              nn.LayerNorm(D): population variance, eps 1e-5)
 *   RMSNorm:   xhat = x / sqrt(mean(x^2) + 1e-6),   v = gamma * xhat           (LLaMA/T5)
 * with mu, var, mean(x^2) over the D features of one position, in double. Parameters:
 * gamma [D] ("lnN.weight", a scale starting at 1), then beta [D] ("lnN.bias", LayerNorm
 * only). Statistics are per position of one example: no example's output depends on
 * another's. Per-example gradients: dgamma_i = sum_t dv_t * xhat_t, dbeta_i = sum_t dv_t
 * (P = 2D or D numbers, O(T D) to form, the cost of the forward: every mode forms them in
 * double, then sums, weights, squares or dots them; nothing cheaper exists). */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LN_EPS 1e-5
#define RMS_EPS 1e-6

static int is_ln(const dpt_layer *L) { return L->kind == DPT_LAYER_LAYERNORM; }

/* mean (0 for RMSNorm) and 1/sqrt(var + eps) (RMSNorm: 1/sqrt(mean(x^2) + eps)) of one row */
static void row_stats(const dpt_layer *L, const float *x, size_t D, double *mu, double *rs) {
    double m = 0.0, s2 = 0.0;
    /* vector reductions (partial sums in a fixed order): the serial double sums were ~8% of a gpt_tiny step */
    if (is_ln(L)) {
#pragma omp simd reduction(+ : m)
        for (size_t d = 0; d < D; d++) m += x[d];
        m /= (double)D;
    }
#pragma omp simd reduction(+ : s2)
    for (size_t d = 0; d < D; d++) s2 += ((double)x[d] - m) * ((double)x[d] - m);
    *mu = m;
    *rs = 1.0 / sqrt(s2 / (double)D + (is_ln(L) ? LN_EPS : RMS_EPS));
}

static dpt_status sn_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const size_t D = L->in_shape[2], rows = B * L->in_shape[1];
    const float *gamma = L->w, *beta = is_ln(L) ? L->w + D : NULL;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * D;
        float *vr = v + r * D;
        double mu, rs;
        row_stats(L, xr, D, &mu, &rs);
        for (size_t d = 0; d < D; d++) {
            const float xh = (float)(((double)xr[d] - mu) * rs);
            vr[d] = beta ? xh * gamma[d] + beta[d] : xh * gamma[d];
        }
    }
    return DPT_OK;
}

/* dxhat -> dx for one row, the symmetric projection of the normalization (u = dv gamma in
 * the backward, u = the input tangent in the jvp):
 *   LayerNorm: rs (u - mean(u) - xhat mean(u xhat)),  RMSNorm: rs (u - xhat mean(u xhat)) */
static void row_back(const dpt_layer *L, const float *x, const float *u, size_t D, float *out) {
    double mu, rs, su = 0.0, sux = 0.0;
    row_stats(L, x, D, &mu, &rs);
#pragma omp simd reduction(+ : su, sux)
    for (size_t d = 0; d < D; d++) {
        su += u[d];
        sux += u[d] * (((double)x[d] - mu) * rs);
    }
    su = is_ln(L) ? su / (double)D : 0.0;
    sux /= (double)D;
    for (size_t d = 0; d < D; d++) {
        const double xh = ((double)x[d] - mu) * rs;
        out[d] = (float)(rs * ((double)u[d] - su - xh * sux));
    }
}

static dpt_status sn_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv, float *dx,
                                    size_t B) {
    const size_t D = L->in_shape[2], rows = B * L->in_shape[1];
    float *u = L->scratch; /* [D] */
    for (size_t r = 0; r < rows; r++) {
        for (size_t d = 0; d < D; d++) u[d] = dv[r * D + d] * L->w[d];
        row_back(L, x + r * D, u, D, dx + r * D);
    }
    return DPT_OK;
}

static dpt_status sn_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx, const float *dtheta,
                         float *dv, size_t B) {
    /* dv = gamma dxhat + dgamma xhat (+ dbeta) */
    const size_t D = L->in_shape[2], rows = B * L->in_shape[1];
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * D;
        float *o = dv + r * D;
        if (dx) {
            row_back(L, xr, dx + r * D, D, o);
            for (size_t d = 0; d < D; d++) o[d] *= L->w[d];
        } else {
            memset(o, 0, D * sizeof *o);
        }
        if (!dtheta) continue;
        double mu, rs;
        row_stats(L, xr, D, &mu, &rs);
        for (size_t d = 0; d < D; d++) {
            o[d] += (float)(((double)xr[d] - mu) * rs) * dtheta[d];
            if (is_ln(L)) o[d] += dtheta[D + d];
        }
    }
    return DPT_OK;
}

static dpt_status sn_backward_params(const dpt_layer *L, const float *x, const float *dv, size_t B,
                                     dpt_grad_mode mode, const float *weights, float *out, size_t ld,
                                     int accumulate) {
    const size_t T = L->in_shape[1], D = L->in_shape[2], P = L->n_params;
    DPT_CHECK(mode != DPT_GRAD_WEIGHTED || weights, DPT_EINVAL, "%s: weighted gradient needs weights", L->name);
    DPT_CHECK(mode != DPT_GRAD_PER_EXAMPLE || ld >= P, DPT_EINVAL, "%s: per-example row stride %zu < %zu parameters",
              L->name, ld, P);
    DPT_CHECK(mode != DPT_GRAD_DOT || weights, DPT_EINVAL, "%s: inner products need a vector", L->name);
    DPT_CHECK(mode >= DPT_GRAD_SUM && mode <= DPT_GRAD_DOT, DPT_EINVAL, "%s: unknown gradient mode %d", L->name,
              (int)mode);
    if (!accumulate && (mode == DPT_GRAD_SUM || mode == DPT_GRAD_WEIGHTED)) memset(out, 0, P * sizeof *out);
    double *gi = (double *)L->scratch; /* [P]: example i's (dgamma, dbeta) */
    for (size_t i = 0; i < B; i++) {
        memset(gi, 0, P * sizeof *gi);
        for (size_t t = 0; t < T; t++) {
            const float *xr = x + (i * T + t) * D, *dr = dv + (i * T + t) * D;
            double mu, rs;
            row_stats(L, xr, D, &mu, &rs);
            for (size_t d = 0; d < D; d++) gi[d] += (double)dr[d] * (((double)xr[d] - mu) * rs);
            if (is_ln(L))
                for (size_t d = 0; d < D; d++) gi[D + d] += dr[d];
        }
        dpt_grad_emit_row(mode, gi, P, i, weights, out, ld, accumulate);
    }
    return DPT_OK;
}

static size_t sn_n_tensors(const dpt_layer *L) { return is_ln(L) ? 2 : 1; }

static void sn_tensor(const dpt_layer *L, size_t j, dpt_param_tensor *t) {
    memset(t, 0, sizeof *t);
    DPT_ASSERT(j < sn_n_tensors(L));
    const size_t D = L->in_shape[2];
    snprintf(t->name, sizeof t->name, "%s.%s", L->name, j == 0 ? "weight" : "bias");
    t->ndim = 1;
    t->shape[0] = D;
    t->offset = L->param_offset + j * D;
    t->size = D;
    t->role = j == 0 ? DPT_TENSOR_SCALE : DPT_TENSOR_BIAS;
}

static const dpt_layer_ops sn_ops = {
    sn_forward, sn_backward_input, sn_backward_params, sn_jvp, sn_n_tensors, sn_tensor, NULL, NULL, NULL,
};

dpt_status dpt_layer_seqnorm_setup(dpt_layer *L, dpt_layer_kind kind, const size_t in_shape[3]) {
    DPT_ASSERT(kind == DPT_LAYER_LAYERNORM || kind == DPT_LAYER_RMSNORM);
    DPT_CHECK(in_shape[0] == 1, DPT_EINVAL,
              "%s: the input must be a sequence of shape (1, T, D), got %zux%zux%zu (use gn<groups> on channels)",
              kind == DPT_LAYER_LAYERNORM ? "layernorm" : "rmsnorm", in_shape[0], in_shape[1], in_shape[2]);
    L->kind = kind;
    L->ops = &sn_ops;
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    memcpy(L->out_shape, in_shape, sizeof L->out_shape);
    L->in_dim = L->out_dim = in_shape[1] * in_shape[2];
    L->has_bias = kind == DPT_LAYER_LAYERNORM;
    L->n_params = (kind == DPT_LAYER_LAYERNORM ? 2 : 1) * in_shape[2];
    L->scratch_need = 2 * L->n_params + 2; /* P doubles */
    return DPT_OK;
}
