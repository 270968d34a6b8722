/* Pooling and flatten: no parameters. Per example x_i: [C, H, W], v_i: [C, Ho, Wo] with
 * Ho = (H - k) / s + 1 (no padding). Max-pooling routes the cotangent to the first maximum
 * of each window (recomputed from x, so nothing is stored between forward and backward;
 * argmax_block below);
 * average-pooling spreads it as 1/k^2. Flatten changes only the shape (C, H, W) -> (1, 1,
 * C H W): activations are always stored flat, so it copies. */
#include "core/isa.h"
#include "nn_internal.h"

#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
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
/* The 2 x 2 window (k = 2) at stride s for columns [0, n) of one output row: rows r0 and
 * r1 of x_i, window j starting at column j s (top: r0's index into x_i). Called with s a
 * literal where it is 1 or 2, so that the loads are contiguous or evenly strided vectors
 * (with s only known at run time the compiler gathered one float at a time: pooling was a
 * third of mnist_cnn's DP-SGD step, perf 2026-12-07). idx NULL: the maxima only. */
static inline __attribute__((always_inline)) void argmax2(const float *restrict r0, const float *restrict r1,
                                                          size_t top, size_t W, size_t n, size_t s,
                                                          uint32_t *restrict idx, float *restrict best) {
    if (!idx) {
#pragma omp simd
        for (size_t j = 0; j < n; j++) {
            const size_t e = j * s;
            float bv = r0[e];
            bv = r0[e + 1] > bv ? r0[e + 1] : bv;
            bv = r1[e] > bv ? r1[e] : bv;
            bv = r1[e + 1] > bv ? r1[e + 1] : bv;
            best[j] = bv;
        }
        return;
    }
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
}

/* idx NULL: only best is written (the forward pass needs no indices) */
static inline __attribute__((always_inline)) void argmax_block(const dpt_layer *L, const float *xi, size_t c,
                                                               size_t oh, size_t o0, size_t n,
                                                               uint32_t *restrict idx, float *restrict best) {
    const size_t H = L->in_shape[1], W = L->in_shape[2], k = L->k, s = L->stride;
    const size_t top = (c * H + oh * s) * W + o0 * s;
    if (k == 2) { /* the common window, its four elements in one pass over the columns */
        const float *restrict r0 = xi + top, *restrict r1 = r0 + W;
        if (s == 1)
            argmax2(r0, r1, top, W, n, 1, idx, best);
        else if (s == 2)
            argmax2(r0, r1, top, W, n, 2, idx, best);
        else
            argmax2(r0, r1, top, W, n, s, idx, best);
        return;
    }
    uint32_t tmp[POOL_BLOCK];
    if (!idx) idx = tmp;
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
                        if (!ti) { /* the maxima straight into the output row */
                            argmax_block(L, xi, c, oh, o0, n, NULL, vr + o0);
                            continue;
                        }
                        argmax_block(L, xi, c, oh, o0, n, idx, best);
                        for (size_t j = 0; j < n; j++) vr[o0 + j] = ti[idx[j]];
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

/* the float with the bits `bits` when sel, else +0.0f: a select written as a mask, since GCC
 * -O2 turned `sel ? g : 0.0f` into a branch and left the loop scalar */
static inline float pick(int sel, uint32_t bits) {
    const uint32_t u = bits & (0u - (uint32_t)sel);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* code[p] = which element of the 2 x 2 window with top-left x[p] (rows W apart) is its first
 * maximum, p in [0, n): 0 top left, 1 top right, 2 bottom left, 3 bottom right (argmax2's
 * rule). Floats, so that every select is of one type and the loop vectorizes. */
static void codes2(const float *restrict x, size_t W, size_t n, float *restrict code) {
#pragma omp simd
    for (size_t p = 0; p < n; p++) {
        const float a = x[p], b = x[p + 1], c = x[p + W], d = x[p + W + 1];
        float bv = a, bc = 0.0f;
        const int gb = b > bv;
        bv = gb ? b : bv;
        bc = gb ? 1.0f : bc;
        const int gc = c > bv;
        bv = gc ? c : bv;
        bc = gc ? 2.0f : bc;
        bc = d > bv ? 3.0f : bc;
        code[p] = bc;
    }
}

/* Floats of scratch pool2s1_backward needs per example: codes and cotangent bits, each N + 2
 * (W + 1) for N = C H W */
static size_t pool2s1_scratch(const dpt_layer *L) {
    return 2 * (L->in_dim + 2 * (L->in_shape[2] + 1));
}

/* Max-pooling's input gradient for a 2 x 2 window at stride 1 (mnist_cnn's), one example
 * x_i [C, H, W] (H = Ho + 1, W = Wo + 1), as a gather over the example seen as C H rows of
 * W: input q = (row, w) lies in the windows whose top-left is q - W - 1, q - W, q - 1 and q,
 * and takes the cotangent of each whose maximum it is, added in that order, which is the
 * (c, oh, ow) order of the scatter in pool_backward_input, so the sums are the same bit for
 * bit (the windows it is not the maximum of add +0.0f, which changes no partial sum: the
 * sum starts at +0.0f and so is never -0.0f). Positions that top-left no window (the last
 * column of every row, the last row of every channel, outside the example) get code -1.
 * One vector loop over the whole example instead of a scatter whose stores into
 * neighbouring inputs serialized it (pooling was a third of mnist_cnn's DP-SGD step, perf
 * 2026-12-07). buf: pool2s1_scratch(L) floats. */
static void pool2s1_backward(size_t C, size_t Ho, size_t Wo, const float *xi, const float *dvi, float *dxi,
                             float *buf) {
    const size_t W = Wo + 1, H = Ho + 1, N = C * H * W, off = W + 1;
    float *code = buf + off;                    /* code[-off, N + off) */
    uint32_t *g = (uint32_t *)(void *)(buf + N + 3 * off); /* g[-off, N + off): the cotangents' bits */
    for (size_t j = 1; j <= off; j++) code[-(ptrdiff_t)j] = -1.0f, g[-(ptrdiff_t)j] = 0u;
    codes2(xi, W, N - off, code); /* every read inside x_i */
    for (size_t p = N - off; p < N + off; p++) code[p] = -1.0f, g[p] = 0u;
    for (size_t c = 0; c < C; c++) {
        for (size_t oh = 0; oh < Ho; oh++) {
            const size_t r = (c * H + oh) * W;
            memcpy(g + r, dvi + (c * Ho + oh) * Wo, Wo * sizeof *g);
            code[r + Wo] = -1.0f, g[r + Wo] = 0u;
        }
        for (size_t w = 0; w < W; w++) code[(c * H + Ho) * W + w] = -1.0f, g[(c * H + Ho) * W + w] = 0u;
    }
    float *restrict d = dxi;
    const float *restrict cd = code;
    const uint32_t *restrict gd = g;
#pragma omp simd
    for (size_t q = 0; q < N; q++) {
        const float t0 = pick(cd[q - W - 1] == 3.0f, gd[q - W - 1]), t1 = pick(cd[q - W] == 2.0f, gd[q - W]);
        const float t2 = pick(cd[q - 1] == 1.0f, gd[q - 1]), t3 = pick(cd[q] == 0.0f, gd[q]);
        d[q] = 0.0f + t0 + t1 + t2 + t3;
    }
}

/* Max-pooling's input gradient for 2 x 2 windows at stride 2 (resnet5's; windows do not
 * overlap), one example x_i [C, H, W], as one pass that writes every input's cotangent:
 * the first maximum of its window (argmax2's rule: a later element replaces only when
 * strictly greater, so ties and a leading NaN stay first) takes the window's cotangent, the
 * other three +0.0f, and a last odd row or column (in no window) 0. Each value is 0.0f plus
 * the cotangent, which is what the scatter below adds into its zeroed input, so the two
 * agree bit for bit (-0.0f becomes +0.0f in both). It replaces the memset and the scatter,
 * two passes over the input with stores one float at a time (resnet5's pooling backward
 * was 5% of its DP-SGD step, perf 2026-12-07). */
static void pool2s2_backward(size_t C, size_t H, size_t W, size_t Ho, size_t Wo, const float *xi, const float *dvi,
                             float *dxi) {
    for (size_t c = 0; c < C; c++) {
        for (size_t oh = 0; oh < Ho; oh++) {
            const float *restrict r0 = xi + (c * H + 2 * oh) * W, *restrict r1 = r0 + W;
            const uint32_t *restrict gb = (const uint32_t *)(const void *)(dvi + (c * Ho + oh) * Wo);
            float *restrict d0 = dxi + (c * H + 2 * oh) * W, *restrict d1 = d0 + W;
#pragma omp simd
            for (size_t ow = 0; ow < Wo; ow++) {
                const size_t e = 2 * ow;
                float bv = r0[e], code = 0.0f;
                const int g1 = r0[e + 1] > bv;
                bv = g1 ? r0[e + 1] : bv;
                code = g1 ? 1.0f : code;
                const int g2 = r1[e] > bv;
                bv = g2 ? r1[e] : bv;
                code = g2 ? 2.0f : code;
                code = r1[e + 1] > bv ? 3.0f : code;
                const uint32_t g = gb[ow];
                d0[e] = 0.0f + pick(code == 0.0f, g);
                d0[e + 1] = 0.0f + pick(code == 1.0f, g);
                d1[e] = 0.0f + pick(code == 2.0f, g);
                d1[e + 1] = 0.0f + pick(code == 3.0f, g);
            }
            if (W > 2 * Wo) d0[W - 1] = d1[W - 1] = 0.0f; /* odd width: the last column */
        }
        if (H > 2 * Ho) memset(dxi + (c * H + H - 1) * W, 0, W * sizeof *dxi); /* odd height: the last row */
    }
}

static dpt_status pool_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv,
                                      float *dx, size_t B) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], k = L->k, s = L->stride;
    const size_t Ho = L->out_shape[1], Wo = L->out_shape[2], D = L->in_dim, K = L->out_dim;
    const float inv = 1.0f / (float)(k * k);
    const long long nB = (long long)B;
    /* 2 x 2 at stride 1: the gather form, with a buffer per thread (the scatter below if
     * there is no memory for it) */
    const size_t per = pool2s1_scratch(L), nt = L->threads > 1 ? (size_t)L->threads : 1;
    float *gbuf = L->kind == DPT_LAYER_MAXPOOL && k == 2 && s == 1 ? malloc(nt * per * sizeof(float)) : NULL;
#pragma omp parallel for num_threads(L->threads) if (B * D > DPT_NN_PAR_MIN)
    for (long long ii = 0; ii < nB; ii++) {
        const size_t i = (size_t)ii;
        const float *xi = x + i * D, *dvi = dv + i * K;
        float *dxi = dx + i * D;
        if (gbuf) {
            pool2s1_backward(C, Ho, Wo, xi, dvi, dxi, gbuf + (size_t)omp_get_thread_num() * per);
            continue;
        }
        if (L->kind == DPT_LAYER_MAXPOOL && k == 2 && s == 2) {
            pool2s2_backward(C, H, W, Ho, Wo, xi, dvi, dxi);
            continue;
        }
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
    free(gbuf);
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

dpt_status DPT_ISA_NAME(dpt_layer_pool_setup)(dpt_layer *L, dpt_layer_kind kind, const size_t in_shape[3],
                                              size_t k, size_t stride) {
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

#if DPT_ISA_DISPATCH && !DPT_ISA_V3_TU
dpt_status dpt_layer_pool_setup(dpt_layer *L, dpt_layer_kind kind, const size_t in_shape[3], size_t k,
                                size_t stride) {
    return (dpt_isa_v3() ? dpt_layer_pool_setup_v3 : dpt_layer_pool_setup_base)(L, kind, in_shape, k, stride);
}
#endif

#if !DPT_ISA_V3_TU
/* ==== flatten (a copy: nothing to gain from a second build) ==== */

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
#endif
