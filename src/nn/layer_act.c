/* Elementwise activations (ReLU, GELU, tanh, sigmoid, identity): no parameters.
 * n = B * K elements; x, v, dv, dx: [B, K] with K = D. Loops are plain and independent
 * per element (vectorizable, bit-identical for any thread count). */
#include "nn_internal.h"

#include <math.h>
#include <string.h>

#define SQRT1_2 0.70710678118654752440f   /* 1/sqrt(2) */
#define INV_SQRT2PI 0.39894228040143267794f /* 1/sqrt(2 pi) */

/* ==== forward ==== */

static dpt_status act_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const long long n = (long long)(B * L->in_dim);
    switch (L->kind) {
    case DPT_LAYER_RELU:
#pragma omp parallel for num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) v[j] = x[j] > 0.0f ? x[j] : 0.0f;
        break;
    case DPT_LAYER_GELU: /* x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2 (exact, not tanh) */
#pragma omp parallel for num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) v[j] = x[j] * (0.5f + 0.5f * erff(x[j] * SQRT1_2));
        break;
    case DPT_LAYER_TANH:
#pragma omp parallel for num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) v[j] = tanhf(x[j]);
        break;
    case DPT_LAYER_SIGMOID: /* 1 / (1 + e^{-x}); for x < 0 as e^x / (1 + e^x) (no overflow) */
#pragma omp parallel for num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) {
            float e = expf(-fabsf(x[j]));
            v[j] = x[j] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        }
        break;
    case DPT_LAYER_IDENTITY:
        if (v != x) memcpy(v, x, (size_t)n * sizeof *v);
        break;
    default:
        return dpt_set_error(DPT_EINVAL, "%s: not an activation (kind %d)", L->name, (int)L->kind);
    }
    return DPT_OK;
}

/* ==== derivative times a vector: out = f'(x) * t (backward and jvp are the same) ==== */

static dpt_status act_scale(const dpt_layer *L, const float *x, const float *v, const float *t,
                            float *out, size_t B) {
    const long long n = (long long)(B * L->in_dim);
    switch (L->kind) {
    case DPT_LAYER_RELU: /* f' = [x > 0] (0 at the kink) */
#pragma omp parallel for num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) out[j] = x[j] > 0.0f ? t[j] : 0.0f;
        break;
    case DPT_LAYER_GELU: /* f' = Phi(x) + x phi(x) */
#pragma omp parallel for num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) {
            const float xj = x[j];
            const float cdf = 0.5f + 0.5f * erff(xj * SQRT1_2);
            const float pdf = INV_SQRT2PI * expf(-0.5f * xj * xj);
            out[j] = t[j] * (cdf + xj * pdf);
        }
        break;
    case DPT_LAYER_TANH: /* f' = 1 - v^2 */
#pragma omp parallel for num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) out[j] = t[j] * (1.0f - v[j] * v[j]);
        break;
    case DPT_LAYER_SIGMOID: /* f' = v (1 - v) */
#pragma omp parallel for num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) out[j] = t[j] * (v[j] * (1.0f - v[j]));
        break;
    case DPT_LAYER_IDENTITY:
        if (out != t) memcpy(out, t, (size_t)n * sizeof *out);
        break;
    default:
        return dpt_set_error(DPT_EINVAL, "%s: not an activation (kind %d)", L->name, (int)L->kind);
    }
    return DPT_OK;
}

static dpt_status act_backward_input(const dpt_layer *L, const float *x, const float *v,
                                     const float *dv, float *dx, size_t B) {
    return act_scale(L, x, v, dv, dx, B);
}

static dpt_status act_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx,
                          const float *dtheta, float *dv, size_t B) {
    if (!dx) {
        memset(dv, 0, B * L->out_dim * sizeof *dv);
        return DPT_OK;
    }
    return act_scale(L, x, v, dx, dv, B);
}

static size_t act_n_tensors(const dpt_layer *L) { return 0; }

static const dpt_layer_ops act_ops = {
    act_forward, act_backward_input, NULL, act_jvp, act_n_tensors, NULL,
};

const char *dpt_layer_kind_name(dpt_layer_kind kind) {
    switch (kind) {
    case DPT_LAYER_LINEAR: return "linear";
    case DPT_LAYER_RELU: return "relu";
    case DPT_LAYER_GELU: return "gelu";
    case DPT_LAYER_TANH: return "tanh";
    case DPT_LAYER_SIGMOID: return "sigmoid";
    case DPT_LAYER_IDENTITY: return "identity";
    }
    return "?";
}

void dpt_layer_act_setup(dpt_layer *L, dpt_layer_kind kind, size_t n) {
    DPT_ASSERT(kind != DPT_LAYER_LINEAR);
    L->kind = kind;
    L->ops = &act_ops;
    L->in_dim = L->out_dim = n;
    L->in_shape[0] = L->in_shape[1] = 1;
    L->in_shape[2] = n;
    L->out_shape[0] = L->out_shape[1] = 1;
    L->out_shape[2] = n;
    L->n_params = 0;
}
