/* Sequence pooling (1, T, D) -> (1, 1, D), no parameters. B = batch, T = positions,
 * D = features.
 *   meanpool: v = (1/T) sum_t x_t      dx_t = dv / T
 *   clspool:  v = x_0 (a CLS token)    dx_0 = dv, dx_t = 0 for t > 0
 * Padding (a model whose embedding has a pad id; L->pad_mask [B, T], 1 = padded): meanpool
 * averages over the n_i valid positions only (v = 0 when n_i = 0), and clspool gives 0 when
 * position 0 is padded, so padded positions never reach the output (docs/nn.md). */
#include "nn_internal.h"

#include <string.h>

/* example i's padding mask [T] (NULL = none) and its count of valid positions */
static const unsigned char *mask_of(const dpt_layer *L, size_t i, size_t *n_valid) {
    const size_t T = L->in_shape[1];
    const unsigned char *mk = L->pad_mask ? L->pad_mask + i * T : NULL;
    size_t n = T;
    if (mk)
        for (size_t t = 0; t < T; t++) n -= mk[t];
    *n_valid = n;
    return mk;
}

static dpt_status sp_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const size_t T = L->in_shape[1], D = L->in_shape[2];
    for (size_t i = 0; i < B; i++) {
        const float *xi = x + i * T * D;
        float *vi = v + i * D;
        size_t n;
        const unsigned char *mk = mask_of(L, i, &n);
        if (L->kind == DPT_LAYER_CLSPOOL) {
            if (mk && mk[0]) memset(vi, 0, D * sizeof *vi);
            else memcpy(vi, xi, D * sizeof *vi);
            continue;
        }
        for (size_t d = 0; d < D; d++) {
            double s = 0.0;
            for (size_t t = 0; t < T; t++)
                if (!mk || !mk[t]) s += xi[t * D + d];
            vi[d] = n ? (float)(s / (double)n) : 0.0f;
        }
    }
    return DPT_OK;
}

/* the adjoint: dx_t = dv / n_i at valid positions (mean) or dx_0 = dv (CLS), else 0 */
static dpt_status sp_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv, float *dx,
                                    size_t B) {
    const size_t T = L->in_shape[1], D = L->in_shape[2];
    for (size_t i = 0; i < B; i++) {
        float *dxi = dx + i * T * D;
        const float *dvi = dv + i * D;
        size_t n;
        const unsigned char *mk = mask_of(L, i, &n);
        if (L->kind == DPT_LAYER_CLSPOOL) {
            if (mk && mk[0]) memset(dxi, 0, D * sizeof *dxi);
            else memcpy(dxi, dvi, D * sizeof *dxi);
            memset(dxi + D, 0, (T - 1) * D * sizeof *dxi);
            continue;
        }
        const float inv = n ? 1.0f / (float)n : 0.0f;
        for (size_t t = 0; t < T; t++)
            for (size_t d = 0; d < D; d++) dxi[t * D + d] = mk && mk[t] ? 0.0f : dvi[d] * inv;
    }
    return DPT_OK;
}

static dpt_status sp_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx, const float *dtheta,
                         float *dv, size_t B) {
    if (!dx) {
        memset(dv, 0, B * L->out_dim * sizeof *dv);
        return DPT_OK;
    }
    return sp_forward(L, dx, dv, B); /* linear: the tangent map is the layer itself */
}

static size_t sp_n_tensors(const dpt_layer *L) { return 0; }

static const dpt_layer_ops sp_ops = {
    sp_forward, sp_backward_input, NULL, sp_jvp, sp_n_tensors, NULL, NULL, NULL, NULL,
};

dpt_status dpt_layer_seqpool_setup(dpt_layer *L, dpt_layer_kind kind, const size_t in_shape[3]) {
    DPT_ASSERT(kind == DPT_LAYER_MEANPOOL || kind == DPT_LAYER_CLSPOOL);
    DPT_CHECK(in_shape[0] == 1, DPT_EINVAL, "%s: the input must be a sequence of shape (1, T, D), got %zux%zux%zu",
              dpt_layer_kind_name(kind), in_shape[0], in_shape[1], in_shape[2]);
    L->kind = kind;
    L->ops = &sp_ops;
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    L->out_shape[0] = L->out_shape[1] = 1;
    L->out_shape[2] = in_shape[2];
    L->in_dim = in_shape[1] * in_shape[2];
    L->out_dim = in_shape[2];
    L->n_params = 0;
    return DPT_OK;
}
