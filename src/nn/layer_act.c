/* Elementwise activations (ReLU, GELU, tanh, sigmoid, identity): no parameters.
 * n = B * K elements; x, v, dv, dx: [B, K] with K = D. Loops are plain and independent
 * per element (vectorizable, bit-identical for any thread count). Built twice on x86-64
 * (core/isa.h): baseline and x86-64-v3 (layer_act_v3.c), where fmaf is one instruction and
 * the loops use 8-float vectors; dpt_layer_act_setup gives a layer the CPU's kernels. The
 * two agree bit for bit (fmaf is exactly rounded in both). */
#include "nn_internal.h"
#include "fastmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define SQRT1_2 0.70710678118654752440f   /* 1/sqrt(2) */
#define INV_SQRT2PI 0.39894228040143267794f /* 1/sqrt(2 pi) */

/* ==== GELU kernels ====
 * libm's erff/expf are scalar calls; at -O2 (no -ffast-math) they are the whole cost of a
 * GELU network's step. These are plain float code that GCC vectorizes (omp simd); the
 * scalar remainder runs the same IEEE operations, so every element gets the same bits
 * wherever it sits. The multiply-adds are explicit fmaf (ISO C mode does not contract
 * a * b + c): one rounding instead of two and half the latency, and the polynomials use
 * Estrin's scheme: the kernels are latency bound (DP-ULR evaluates millions per step), so
 * a shorter dependent chain is what makes them faster. fmaf is exactly rounded wherever it
 * runs (an instruction with -march=x86-64-v3, libm otherwise), so builds agree bit for bit.
 * Accuracy (tested against double erf): relative ~1e-6 on Phi, also in the negative tail,
 * where a 1 - erf form would lose everything. The helpers are always_inline: GCC's -O2
 * inliner otherwise leaves gauss_cdf a call, and a call does not vectorize. exp_neg and
 * sel are in fastmath.h (the softmax cross-entropy uses them too). */
#define ACT_INLINE DPT_FAST_INLINE

/* Phi(x) = erfc(-x / sqrt 2) / 2 with erfc(z), z >= 0, from the Chebyshev fit of
 * Numerical Recipes (erfcc, fractional error < 1.2e-7): erfc(z) = t exp(-z^2 + P(t)),
 * t = 1 / (1 + z / 2), P of degree 9 (evaluated by Estrin's scheme); erfc(-z) = 2 - erfc(z). */
ACT_INLINE float gauss_cdf(float x) {
    const float z = fabsf(x) * SQRT1_2;
    const float t = 1.0f / fmaf(0.5f, z, 1.0f);
    const float t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
    const float p01 = fmaf(1.00002368f, t, -1.26551223f);
    const float p23 = fmaf(0.09678418f, t, 0.37409196f);
    const float p45 = fmaf(0.27886807f, t, -0.18628806f);
    const float p67 = fmaf(1.48851587f, t, -1.13520398f);
    const float p89 = fmaf(0.17087277f, t, -0.82215223f);
    const float p03 = fmaf(p23, t2, p01), p47 = fmaf(p67, t2, p45);
    const float p = fmaf(p89, t8, fmaf(p47, t4, p03));
    const float half_erfc = 0.5f * t * exp_neg(fmaf(-z, z, p));
    return sel(x < 0.0f, half_erfc, 1.0f - half_erfc);
}

ACT_INLINE float gelu_f(float x) { return x * gauss_cdf(x); }
ACT_INLINE float gelu_df(float x) { return fmaf(x, INV_SQRT2PI * exp_neg(-0.5f * x * x), gauss_cdf(x)); }

/* tanh(x): libm's tanhf is a scalar call (with expm1f inside), a third of a tanh CNN's
 * DP-SGD step (cifar_cnn_tanh, perf 2026-12-07). For |x| < 0.625 the odd polynomial of
 * Cephes' tanhf, x + x^3 P(x^2) (no cancellation near 0, so tiny x gives x and -0 stays -0);
 * above, (1 - e) / (1 + e) with e = e^{-2|x|} <= 0.29 (exp_neg; no cancellation either),
 * which reaches 1 where e is below half an ulp of 1 and for +-inf; the sign copied from x,
 * NaN stays NaN. Accuracy against double tanh: a few ulp (tests/test_nn.c). */
ACT_INLINE float tanh_f(float x) {
    const float a = fabsf(x), z = x * x;
    const float p = fmaf(fmaf(fmaf(fmaf(-5.70498872745e-3f, z, 2.06390887954e-2f), z, -5.37397155531e-2f), z,
                              1.33314422036e-1f), z, -3.33332819422e-1f);
    const float e = exp_neg(-2.0f * a);
    return copysignf(sel(a < 0.625f, fmaf(p * z, a, a), (1.0f - e) / (1.0f + e)), x);
}

/* v[j] = gelu(x[j]) for j in [lo, hi) */
static void gelu_fwd(const float *restrict x, float *restrict v, size_t lo, size_t hi) {
#pragma omp simd
    for (size_t j = lo; j < hi; j++) v[j] = gelu_f(x[j]);
}
/* out[j] = gelu'(x[j]) t[j] for j in [lo, hi) */
static void gelu_bwd(const float *restrict x, const float *restrict t, float *restrict out, size_t lo,
                     size_t hi) {
#pragma omp simd
    for (size_t j = lo; j < hi; j++) out[j] = t[j] * gelu_df(x[j]);
}
/* Splits [0, n) over threads in blocks of 4096 when n is large. */
#define GELU_BLOCK 4096

/* ==== forward ==== */

static dpt_status act_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const long long n = (long long)(B * L->in_dim);
    switch (L->kind) {
    case DPT_LAYER_RELU:
#pragma omp parallel for simd num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) v[j] = x[j] > 0.0f ? x[j] : 0.0f;
        break;
    case DPT_LAYER_GELU: /* x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2 (exact, not tanh) */
{
        const long long nb = (n + GELU_BLOCK - 1) / GELU_BLOCK;
#pragma omp parallel for num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long b = 0; b < nb; b++)
            gelu_fwd(x, v, (size_t)b * GELU_BLOCK, (size_t)(b + 1 == nb ? n : (b + 1) * GELU_BLOCK));
        break;
    }
    case DPT_LAYER_TANH:
#pragma omp parallel for simd num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) v[j] = tanh_f(x[j]);
        break;
    case DPT_LAYER_SIGMOID: /* 1 / (1 + e^{-x}); for x < 0 as e^x / (1 + e^x) (no overflow) */
#pragma omp parallel for simd num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) {
            const float e = exp_neg(-fabsf(x[j])), r = 1.0f / (1.0f + e);
            v[j] = sel(x[j] >= 0.0f, r, e * r);
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
#pragma omp parallel for simd num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) out[j] = x[j] > 0.0f ? t[j] : 0.0f;
        break;
    case DPT_LAYER_GELU: /* f' = Phi(x) + x phi(x) */
{
        const long long nb = (n + GELU_BLOCK - 1) / GELU_BLOCK;
#pragma omp parallel for num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long b = 0; b < nb; b++)
            gelu_bwd(x, t, out, (size_t)b * GELU_BLOCK, (size_t)(b + 1 == nb ? n : (b + 1) * GELU_BLOCK));
        break;
    }
    case DPT_LAYER_TANH: /* f' = 1 - v^2 */
#pragma omp parallel for simd num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
        for (long long j = 0; j < n; j++) out[j] = t[j] * (1.0f - v[j] * v[j]);
        break;
    case DPT_LAYER_SIGMOID: /* f' = v (1 - v) */
#pragma omp parallel for simd num_threads(L->threads) if (n > DPT_NN_PAR_MIN)
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
    act_forward, act_backward_input, NULL, act_jvp, act_n_tensors, NULL, NULL, NULL, NULL,
};

#if !DPT_ISA_V3_TU
const char *dpt_layer_kind_name(dpt_layer_kind kind) {
    switch (kind) {
    case DPT_LAYER_LINEAR: return "linear";
    case DPT_LAYER_RELU: return "relu";
    case DPT_LAYER_GELU: return "gelu";
    case DPT_LAYER_TANH: return "tanh";
    case DPT_LAYER_SIGMOID: return "sigmoid";
    case DPT_LAYER_IDENTITY: return "identity";
    case DPT_LAYER_CONV2D: return "conv";
    case DPT_LAYER_MAXPOOL: return "maxpool";
    case DPT_LAYER_AVGPOOL: return "avgpool";
    case DPT_LAYER_FLATTEN: return "flatten";
    case DPT_LAYER_GROUPNORM: return "groupnorm";
    case DPT_LAYER_SCATTER: return "scatter";
    case DPT_LAYER_EMBEDDING: return "embedding";
    case DPT_LAYER_LAYERNORM: return "layernorm";
    case DPT_LAYER_RMSNORM: return "rmsnorm";
    case DPT_LAYER_SEQLINEAR: return "plinear";
    case DPT_LAYER_MEANPOOL: return "meanpool";
    case DPT_LAYER_CLSPOOL: return "clspool";
    case DPT_LAYER_ATTENTION: return "attention";
    case DPT_LAYER_CHANNEL_AFFINE: return "fbn";
    case DPT_LAYER_TOSEQ: return "toseq";
    }
    return "?";
}
#endif

void DPT_ISA_NAME(dpt_layer_act_setup)(dpt_layer *L, dpt_layer_kind kind, size_t n) {
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

#if DPT_ISA_DISPATCH && !DPT_ISA_V3_TU
void dpt_layer_act_setup(dpt_layer *L, dpt_layer_kind kind, size_t n) {
    (dpt_isa_v3() ? dpt_layer_act_setup_v3 : dpt_layer_act_setup_base)(L, kind, n);
}
#endif
