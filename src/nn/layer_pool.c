/* Pooling and flatten: no parameters. Per example x_i: [C, H, W], v_i: [C, Ho, Wo] with
 * Ho = (H - k) / s + 1 (no padding). Max-pooling routes the cotangent to the first maximum
 * of each window (recomputed from x, so nothing is stored between forward and backward;
 * argmax_block below);
 * average-pooling spreads it as 1/k^2. Flatten changes only the shape (C, H, W) -> (1, 1,
 * C H W): activations are always stored flat, so it copies. */
#include "nn_internal.h"

#include <stdint.h>
#include <string.h>

/* Max-pooling's windows a row of outputs at a time: for output row (c, oh) and the columns
 * [o0, o0 + n), n <= POOL_BLOCK, idx[j] = the index into x_i of window (c, oh, o0 + j)'s first
 * maximum and best[j] its value. "First" is max_at's rule (tests/test_nn_conv.c keeps it as
 * the reference): the window is scanned in row-major order and an element replaces the best
 * only when it is strictly greater, so ties go to the earliest and a NaN never replaces
 * (a leading NaN stays). Scanning the k^2 window offsets in the outer loops and the columns
 * in the inner one makes that loop a branch-free select over contiguous (s = 1) or strided
 * columns, which the compiler vectorizes; the per-window scalar scan it replaces was a
 * quarter of mnist_cnn's training time (perf, 2026-11-25). */
#define POOL_BLOCK 64
static inline __attribute__((always_inline)) void argmax_block(const dpt_layer *L, const float *xi, size_t c,
                                                               size_t oh, size_t o0, size_t n,
                                                               uint32_t *restrict idx, float *restrict best) {
    const size_t H = L->in_shape[1], W = L->in_shape[2], k = L->k, s = L->stride;
    const size_t top = (c * H + oh * s) * W + o0 * s;
    if (k == 2) { /* the common window, its four elements in one pass over the columns */
        const float *restrict r0 = xi + top, *restrict r1 = r0 + W;
#pragma omp simd
        for (size_t j = 0; j < n; j++) {
            const size_t e = j * s;
            float bv = r0[e];
            uint32_t bi = (uint32_t)(top + e);
            int gt = r0[e + 1] > bv;
            bv = gt ? r0[e + 1] : bv, bi = gt ? (uint32_t)(top + e + 1) : bi;
            gt = r1[e] > bv;
            bv = gt ? r1[e] : bv, bi = gt ? (uint32_t)(top + W + e) : bi;
            gt = r1[e + 1] > bv;
            bv = gt ? r1[e + 1] : bv, bi = gt ? (uint32_t)(top + W + e + 1) : bi;
            best[j] = bv, idx[j] = bi;
        }
        return;
    }
    for (size_t j = 0; j < n; j++) {
        idx[j] = (uint32_t)(top + j * s);
        best[j] = xi[top + j * s];
    }
    for (size_t a = 0; a < k; a++)
        for (size_t b = a ? 0 : 1; b < k; b++) {
            const size_t off = top + a * W + b;
            const float *restrict xr = xi + off;
#pragma omp simd
            for (size_t j = 0; j < n; j++) {
                const float v = xr[j * s];
                const int gt = v > best[j];
                best[j] = gt ? v : best[j];
                idx[j] = gt ? (uint32_t)(off + j * s) : idx[j];
            }
        }
}

/* v = pool(x) for max and average; for max, `route` (not NULL) is used instead to gather:
 * v[o] = t[argmax] (the jvp). */
static void pool_apply(const dpt_layer *L, const float *x, const float *t, float *v, size_t B) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], k = L->k, s = L->stride;
    const size_t Ho = L->out_shape[1], Wo = L->out_shape[2], D = L->in_dim, K = L->out_dim;
    const float inv = 1.0f / (float)(k * k);
    const long long nB = (long long)B;
#pragma omp parallel for num_threads(L->threads) if (B * D > DPT_NN_PAR_MIN)
    for (long long ii = 0; ii < nB; ii++) {
        const size_t i = (size_t)ii;
        const float *xi = x + i * D, *ti = t ? t + i * D : NULL;
        float *vi = v + i * K;
        uint32_t idx[POOL_BLOCK];
        float best[POOL_BLOCK];
        for (size_t c = 0; c < C; c++)
            for (size_t oh = 0; oh < Ho; oh++) {
                float *vr = vi + (c * Ho + oh) * Wo;
                if (L->kind == DPT_LAYER_MAXPOOL) {
                    for (size_t o0 = 0; o0 < Wo; o0 += POOL_BLOCK) {
                        const size_t n = Wo - o0 < POOL_BLOCK ? Wo - o0 : POOL_BLOCK;
                        argmax_block(L, xi, c, oh, o0, n, idx, best);
                        if (ti)
                            for (size_t j = 0; j < n; j++) vr[o0 + j] = ti[idx[j]];
                        else
                            memcpy(vr + o0, best, n * sizeof *vr);
                    }
                    continue;
                }
                const float *src = ti ? ti : xi;
                for (size_t ow = 0; ow < Wo; ow++) {
                    float sum = 0.0f;
                    for (size_t a = 0; a < k; a++)
                        for (size_t b = 0; b < k; b++) sum += src[(c * H + oh * s + a) * W + ow * s + b];
                    vr[ow] = sum * inv;
                }
            }
    }
}

static dpt_status pool_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    pool_apply(L, x, NULL, v, B);
    return DPT_OK;
}

static dpt_status pool_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv,
                                      float *dx, size_t B) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], k = L->k, s = L->stride;
    const size_t Ho = L->out_shape[1], Wo = L->out_shape[2], D = L->in_dim, K = L->out_dim;
    const float inv = 1.0f / (float)(k * k);
    const long long nB = (long long)B;
#pragma omp parallel for num_threads(L->threads) if (B * D > DPT_NN_PAR_MIN)
    for (long long ii = 0; ii < nB; ii++) {
        const size_t i = (size_t)ii;
        const float *xi = x + i * D, *dvi = dv + i * K;
        float *dxi = dx + i * D;
        uint32_t idx[POOL_BLOCK];
        float best[POOL_BLOCK];
        memset(dxi, 0, D * sizeof *dxi);
        /* in (c, oh, ow) order either way: overlapping windows (s < k) add into one input in
         * a fixed order */
        for (size_t c = 0; c < C; c++)
            for (size_t oh = 0; oh < Ho; oh++) {
                const float *gr = dvi + (c * Ho + oh) * Wo;
                if (L->kind == DPT_LAYER_MAXPOOL) {
                    for (size_t o0 = 0; o0 < Wo; o0 += POOL_BLOCK) {
                        const size_t n = Wo - o0 < POOL_BLOCK ? Wo - o0 : POOL_BLOCK;
                        argmax_block(L, xi, c, oh, o0, n, idx, best);
                        for (size_t j = 0; j < n; j++) dxi[idx[j]] += gr[o0 + j];
                    }
                    continue;
                }
                for (size_t ow = 0; ow < Wo; ow++)
                    for (size_t a = 0; a < k; a++)
                        for (size_t b = 0; b < k; b++) dxi[(c * H + oh * s + a) * W + ow * s + b] += gr[ow] * inv;
            }
    }
    return DPT_OK;
}

static dpt_status pool_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx,
                           const float *dtheta, float *dv, size_t B) {
    if (!dx) {
        memset(dv, 0, B * L->out_dim * sizeof *dv);
        return DPT_OK;
    }
    pool_apply(L, x, dx, dv, B);
    return DPT_OK;
}

static size_t no_tensors(const dpt_layer *L) { return 0; }

static const dpt_layer_ops pool_ops = {
    pool_forward, pool_backward_input, NULL, pool_jvp, no_tensors, NULL, NULL, NULL, NULL,
};

dpt_status dpt_layer_pool_setup(dpt_layer *L, dpt_layer_kind kind, const size_t in_shape[3], size_t k,
                                size_t stride) {
    DPT_ASSERT(kind == DPT_LAYER_MAXPOOL || kind == DPT_LAYER_AVGPOOL);
    DPT_CHECK(k >= 1 && stride >= 1, DPT_EINVAL, "pool: window and stride must be >= 1 (got %zu, %zu)", k, stride);
    DPT_CHECK(in_shape[1] >= k && in_shape[2] >= k, DPT_EINVAL, "pool: window %zu is larger than the %zux%zu input",
              k, in_shape[1], in_shape[2]);
    L->kind = kind;
    L->ops = &pool_ops;
    L->k = k;
    L->stride = stride;
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    L->out_shape[0] = in_shape[0];
    L->out_shape[1] = (in_shape[1] - k) / stride + 1;
    L->out_shape[2] = (in_shape[2] - k) / stride + 1;
    L->in_dim = in_shape[0] * in_shape[1] * in_shape[2];
    L->out_dim = L->out_shape[0] * L->out_shape[1] * L->out_shape[2];
    L->n_params = 0;
    DPT_CHECK(L->in_dim <= UINT32_MAX, DPT_EINVAL, "pool: input of %zu values per example is too large (at most %u)",
              L->in_dim, (unsigned)UINT32_MAX);
    return DPT_OK;
}

/* ==== flatten ==== */

static dpt_status flat_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    if (v != x) memcpy(v, x, B * L->in_dim * sizeof *v);
    return DPT_OK;
}
static dpt_status flat_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv,
                                      float *dx, size_t B) {
    if (dx != dv) memcpy(dx, dv, B * L->in_dim * sizeof *dx);
    return DPT_OK;
}
static dpt_status flat_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx,
                           const float *dtheta, float *dv, size_t B) {
    if (dx) memcpy(dv, dx, B * L->in_dim * sizeof *dv);
    else memset(dv, 0, B * L->in_dim * sizeof *dv);
    return DPT_OK;
}

static const dpt_layer_ops flat_ops = {
    flat_forward, flat_backward_input, NULL, flat_jvp, no_tensors, NULL, NULL, NULL, NULL,
};

void dpt_layer_flatten_setup(dpt_layer *L, const size_t in_shape[3]) {
    L->kind = DPT_LAYER_FLATTEN;
    L->ops = &flat_ops;
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    L->in_dim = L->out_dim = in_shape[0] * in_shape[1] * in_shape[2];
    L->out_shape[0] = L->out_shape[1] = 1;
    L->out_shape[2] = L->out_dim;
    L->n_params = 0;
}
