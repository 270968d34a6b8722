/* Pooling and flatten: no parameters. Per example x_i: [C, H, W], v_i: [C, Ho, Wo] with
 * Ho = (H - k) / s + 1 (no padding). Max-pooling routes the cotangent to the first maximum
 * of each window (recomputed from x, so nothing is stored between forward and backward);
 * average-pooling spreads it as 1/k^2. Flatten changes only the shape (C, H, W) -> (1, 1,
 * C H W): activations are always stored flat, so it copies. */
#include "nn_internal.h"

#include <string.h>

/* index into x_i of the first maximum of window (c, oh, ow) */
static size_t max_at(const dpt_layer *L, const float *xi, size_t c, size_t oh, size_t ow) {
    const size_t H = L->in_shape[1], W = L->in_shape[2], k = L->k, s = L->stride;
    size_t best = (c * H + oh * s) * W + ow * s;
    for (size_t a = 0; a < k; a++)
        for (size_t b = 0; b < k; b++) {
            size_t idx = (c * H + oh * s + a) * W + ow * s + b;
            if (xi[idx] > xi[best]) best = idx;
        }
    return best;
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
        for (size_t c = 0; c < C; c++)
            for (size_t oh = 0; oh < Ho; oh++)
                for (size_t ow = 0; ow < Wo; ow++) {
                    float r;
                    if (L->kind == DPT_LAYER_MAXPOOL) {
                        size_t m = max_at(L, xi, c, oh, ow);
                        r = ti ? ti[m] : xi[m];
                    } else {
                        const float *src = ti ? ti : xi;
                        float sum = 0.0f;
                        for (size_t a = 0; a < k; a++)
                            for (size_t b = 0; b < k; b++) sum += src[(c * H + oh * s + a) * W + ow * s + b];
                        r = sum * inv;
                    }
                    vi[(c * Ho + oh) * Wo + ow] = r;
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
        memset(dxi, 0, D * sizeof *dxi);
        for (size_t c = 0; c < C; c++)
            for (size_t oh = 0; oh < Ho; oh++)
                for (size_t ow = 0; ow < Wo; ow++) {
                    const float g = dvi[(c * Ho + oh) * Wo + ow];
                    if (L->kind == DPT_LAYER_MAXPOOL) {
                        dxi[max_at(L, xi, c, oh, ow)] += g;
                    } else {
                        for (size_t a = 0; a < k; a++)
                            for (size_t b = 0; b < k; b++) dxi[(c * H + oh * s + a) * W + ow * s + b] += g * inv;
                    }
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
    pool_forward, pool_backward_input, NULL, pool_jvp, no_tensors, NULL, NULL,
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
    flat_forward, flat_backward_input, NULL, flat_jvp, no_tensors, NULL, NULL,
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
