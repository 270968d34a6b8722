/* Image to sequence (ViT's patch tokens): a (C, H, W) feature map, such as the output of a
 * convolution with stride = kernel = patch size, read as the sequence of its N = H W
 * positions of D = C features, with an optional learned CLS vector in front and an optional
 * learned position table added (Dosovitskiy et al. 2021, "An image is worth 16x16 words",
 * Eq. 1: z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos; the patch projection E is the
 * convolution before this layer, which keeps its own per-example gradients and norms).
 * B = batch, N = H W patches, T = N + c positions (c = 1 with a CLS vector), D = C.
 *   x_i [D, N]  channel-major, as the convolution writes it
 *   v_i [T, D]  v_i,c+n = x_i[:, n] + Pos[c + n];  v_i,0 = cls + Pos[0] with a CLS vector
 *   parameters: cls [D] "toseqN.cls" (with `cls`), then Pos [T, D] "toseqN.position"
 *               (unless `nopos`); none without either (a pure transpose)
 * Example i's gradient is (dv_i,0, dV_i): ||g_i||^2 = ||dv_i,0||^2 + ||dV_i||_F^2, O(T D),
 * the cost of the forward. */
#include "nn_internal.h"

#include <stdio.h>
#include <string.h>

static size_t ts_N(const dpt_layer *L) { return L->in_shape[1] * L->in_shape[2]; }
static size_t ts_D(const dpt_layer *L) { return L->in_shape[0]; }
static size_t ts_c(const dpt_layer *L) { return L->k; } /* 1 with a CLS vector */
static int ts_pos(const dpt_layer *L) { return L->has_bias; }

/* ==== forward / backward_input / jvp ==== */

/* v_i [T, D] = [cls; x_i^T] + Pos, any of cls, x, pos NULL = 0 (cls: the CLS row) */
static void ts_apply(const dpt_layer *L, const float *x, const float *cls, const float *pos, float *v, size_t B) {
    const size_t N = ts_N(L), D = ts_D(L), c = ts_c(L), T = N + c;
    for (size_t i = 0; i < B; i++) {
        float *vi = v + i * T * D;
        const float *xi = x ? x + i * N * D : NULL;
        if (c)
            for (size_t d = 0; d < D; d++) vi[d] = cls ? cls[d] : 0.0f;
        for (size_t n = 0; n < N; n++)
            for (size_t d = 0; d < D; d++) vi[(c + n) * D + d] = xi ? xi[d * N + n] : 0.0f;
        if (pos)
            for (size_t j = 0; j < T * D; j++) vi[j] += pos[j];
    }
}

static dpt_status ts_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const float *cls = ts_c(L) ? L->w : NULL, *pos = ts_pos(L) ? L->w + ts_c(L) * ts_D(L) : NULL;
    ts_apply(L, x, cls, pos, v, B);
    return DPT_OK;
}

/* dx_i[d, n] = dv_i[c + n, d] (the CLS row and the positions do not depend on x) */
static dpt_status ts_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv, float *dx,
                                    size_t B) {
    const size_t N = ts_N(L), D = ts_D(L), c = ts_c(L), T = N + c;
    for (size_t i = 0; i < B; i++)
        for (size_t d = 0; d < D; d++)
            for (size_t n = 0; n < N; n++) dx[i * N * D + d * N + n] = dv[i * T * D + (c + n) * D + d];
    return DPT_OK;
}

static dpt_status ts_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx, const float *dtheta,
                         float *dv, size_t B) {
    const float *cls = dtheta && ts_c(L) ? dtheta : NULL;
    const float *pos = dtheta && ts_pos(L) ? dtheta + ts_c(L) * ts_D(L) : NULL;
    ts_apply(L, dx, cls, pos, dv, B); /* affine in (x, cls, Pos): the tangent map is the layer without offsets */
    return DPT_OK;
}

/* ==== backward_params ==== */

static dpt_status ts_backward_params(const dpt_layer *L, const float *x, const float *dv, size_t B,
                                     dpt_grad_mode mode, const float *weights, float *out, size_t ld,
                                     int accumulate) {
    const size_t N = ts_N(L), D = ts_D(L), c = ts_c(L), T = N + c, P = L->n_params;
    const size_t pos0 = c * D; /* Pos's offset in the layer's parameters */
    const int pos = ts_pos(L);
    DPT_CHECK(mode != DPT_GRAD_WEIGHTED || weights, DPT_EINVAL, "%s: weighted gradient needs weights", L->name);
    DPT_CHECK(mode != DPT_GRAD_DOT || weights, DPT_EINVAL, "%s: inner products need a vector", L->name);
    DPT_CHECK(mode != DPT_GRAD_PER_EXAMPLE || ld >= P, DPT_EINVAL, "%s: per-example row stride %zu < %zu parameters",
              L->name, ld, P);
    switch (mode) {
    case DPT_GRAD_SUM:
    case DPT_GRAD_WEIGHTED:
        /* dcls = sum_i w_i dv_i,0, dPos = sum_i w_i dV_i (w_i = 1 for SUM), examples in order */
        if (!accumulate) memset(out, 0, P * sizeof *out);
        for (size_t i = 0; i < B; i++) {
            const float wi = mode == DPT_GRAD_WEIGHTED ? weights[i] : 1.0f, *dvi = dv + i * T * D;
            for (size_t d = 0; d < c * D; d++) out[d] += wi * dvi[d];
            if (pos)
                for (size_t j = 0; j < T * D; j++) out[pos0 + j] += wi * dvi[j];
        }
        return DPT_OK;
    case DPT_GRAD_PER_EXAMPLE:
        /* g_i = (dv_i,0, dV_i) */
        for (size_t i = 0; i < B; i++) {
            const float *dvi = dv + i * T * D;
            float *o = out + i * ld;
            for (size_t d = 0; d < c * D; d++) o[d] = (accumulate ? o[d] : 0.0f) + dvi[d];
            if (pos)
                for (size_t j = 0; j < T * D; j++) o[pos0 + j] = (accumulate ? o[pos0 + j] : 0.0f) + dvi[j];
        }
        return DPT_OK;
    case DPT_GRAD_SQNORM:
    case DPT_GRAD_DOT:
        /* ||dv_i,0||^2 + ||dV_i||^2, or <dv_i,0, v_cls> + <dV_i, v_Pos>, in double */
        for (size_t i = 0; i < B; i++) {
            const float *dvi = dv + i * T * D;
            double s = 0.0;
            for (size_t d = 0; d < c * D; d++) s += (double)dvi[d] * (mode == DPT_GRAD_DOT ? weights[d] : dvi[d]);
            if (pos)
                for (size_t j = 0; j < T * D; j++)
                    s += (double)dvi[j] * (mode == DPT_GRAD_DOT ? weights[pos0 + j] : dvi[j]);
            out[i] = accumulate ? (float)((double)out[i] + s) : (float)s;
        }
        return DPT_OK;
    }
    return dpt_set_error(DPT_EINVAL, "%s: unknown gradient mode %d", L->name, (int)mode);
}

/* ==== tensor table ==== */

static size_t ts_n_tensors(const dpt_layer *L) { return ts_c(L) + (size_t)(ts_pos(L) != 0); }

static void ts_tensor(const dpt_layer *L, size_t j, dpt_param_tensor *t) {
    memset(t, 0, sizeof *t);
    DPT_ASSERT(j < ts_n_tensors(L));
    const size_t D = ts_D(L), c = ts_c(L);
    const int is_cls = c && j == 0;
    snprintf(t->name, sizeof t->name, "%s.%s", L->name, is_cls ? "cls" : "position");
    if (is_cls) {
        t->ndim = 1;
        t->shape[0] = D;
        t->offset = L->param_offset;
        t->size = D;
    } else {
        t->ndim = 2;
        t->shape[0] = ts_N(L) + c;
        t->shape[1] = D;
        t->offset = L->param_offset + c * D;
        t->size = t->shape[0] * D;
    }
    t->role = DPT_TENSOR_EMBEDDING; /* N(0, 1) like the embedding's tables */
}

static const dpt_layer_ops ts_ops = {
    ts_forward, ts_backward_input, ts_backward_params, ts_jvp, ts_n_tensors, ts_tensor, NULL, NULL, NULL,
};

dpt_status dpt_layer_toseq_setup(dpt_layer *L, const size_t in_shape[3], int cls, int positions) {
    const size_t D = in_shape[0], N = in_shape[1] * in_shape[2], T = N + (cls ? 1 : 0);
    size_t TD;
    DPT_CHECK(!dpt_mul_overflow(T, D, &TD) && TD <= DPT_SPEC_MAX_WIDTH, DPT_EINVAL,
              "toseq: %zu positions of %zu features are more than %zu values", T, D, DPT_SPEC_MAX_WIDTH);
    L->kind = DPT_LAYER_TOSEQ;
    L->ops = &ts_ops;
    L->k = cls ? 1 : 0;
    L->has_bias = positions; /* the position table, like the embedding's: optional, per output */
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    L->out_shape[0] = 1;
    L->out_shape[1] = T;
    L->out_shape[2] = D;
    L->in_dim = N * D;
    L->out_dim = TD;
    L->n_params = (cls ? D : 0) + (positions ? TD : 0);
    return DPT_OK;
}
