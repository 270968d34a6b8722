/* Scaled dot-product multi-head attention core (Vaswani et al. 2017), no parameters:
 * (1, T, 3D) -> (1, T, D). B = batch, T = positions, D = model width, H = heads,
 * dh = D / H. Input row t of example i is [q_t, k_t, v_t] (3D floats, each D split into H
 * heads of dh: torch nn.MultiheadAttention's in_proj order), output row t is
 * [o_t^1 .. o_t^H] with, per head,
 *   S = Q K^T / sqrt(dh),  P = softmax over the keys j allowed for query t,  O = P V
 * where bidirectional attention allows every j and causal attention j <= t.
 * Self-attention is this layer between two position-wise Linear layers,
 *   plin<3D>, attn<H>[c], plin<D>
 * so that its parameters (the QKV and output projections) are position-wise Linear
 * layers with their own per-example gradients and ghost norms (docs/nn.md), and the
 * attention core only passes cotangents and tangents through:
 *   backward:  dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),
 *              dQ = dS K / sqrt(dh),  dK = dS^T Q / sqrt(dh)
 *   jvp:       dS = (dQ K^T + Q dK^T) / sqrt(dh),  dP = P * (dS - rowsum(P * dS)),
 *              dO = dP V + P dV
 * P is recomputed row by row (scratch [2 T]), never stored: O(T^2 D) per example in each
 * pass, memory O(T). Softmax sums in double.
 * Padding (a model whose embedding has a pad id): the keys at padded positions of example i
 * (L->pad_mask) are left out of every query's softmax, for both kinds of attention. */
#include "nn_internal.h"

#include <math.h>
#include <string.h>

typedef struct {
    size_t T, D, H, dh, lim_causal;
    double scale;
} att_dims;

static att_dims dims(const dpt_layer *L) {
    att_dims a;
    a.T = L->in_shape[1];
    a.D = L->out_shape[2];
    a.H = L->groups;
    a.dh = a.D / a.H;
    a.lim_causal = (size_t)L->k; /* 1 = causal */
    a.scale = 1.0 / sqrt((double)a.dh);
    return a;
}

/* q . k over dh floats, in double */
static double dot(const float *q, const float *k, size_t n) {
    double s = 0.0;
    for (size_t e = 0; e < n; e++) s += (double)q[e] * k[e];
    return s;
}

/* Row t of P for head h of one example xi [T, 3D]: p[0..n) with n = t + 1 (causal) or T.
 * mk [T] (NULL = none): the example's padding mask; a padded key j gets p[j] = 0 exactly
 * (torch's key_padding_mask), and a row without any allowed key is all 0 (torch: NaN), so
 * its output, cotangents and tangents are 0. */
static size_t prob_row(const att_dims *a, const float *xi, const unsigned char *mk, size_t h, size_t t, float *p) {
    const size_t n = a->lim_causal ? t + 1 : a->T, W = 3 * a->D;
    const float *q = xi + t * W + h * a->dh;
    double mx = -INFINITY, z = 0.0;
    for (size_t j = 0; j < n; j++) {
        if (mk && mk[j]) continue;
        const double s = a->scale * dot(q, xi + j * W + a->D + h * a->dh, a->dh);
        p[j] = (float)s;
        if (s > mx) mx = s;
    }
    for (size_t j = 0; j < n; j++) {
        if (mk && mk[j]) {
            p[j] = 0.0f;
            continue;
        }
        const double ej = exp((double)p[j] - mx);
        z += ej;
        p[j] = (float)ej;
    }
    if (z > 0.0)
        for (size_t j = 0; j < n; j++) p[j] = (float)((double)p[j] / z);
    return n;
}

/* example i's padding mask [T], or NULL */
static const unsigned char *mask_of(const dpt_layer *L, const att_dims *a, size_t i) {
    return L->pad_mask ? L->pad_mask + i * a->T : NULL;
}

static dpt_status att_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const att_dims a = dims(L);
    const size_t W = 3 * a.D;
    float *p = L->scratch; /* [T] */
    for (size_t i = 0; i < B; i++) {
        const float *xi = x + i * a.T * W;
        float *vi = v + i * a.T * a.D;
        for (size_t h = 0; h < a.H; h++)
            for (size_t t = 0; t < a.T; t++) {
                const size_t n = prob_row(&a, xi, mask_of(L, &a, i), h, t, p);
                float *o = vi + t * a.D + h * a.dh;
                for (size_t e = 0; e < a.dh; e++) {
                    double s = 0.0;
                    for (size_t j = 0; j < n; j++) s += (double)p[j] * xi[j * W + 2 * a.D + h * a.dh + e];
                    o[e] = (float)s;
                }
            }
    }
    return DPT_OK;
}

static dpt_status att_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv, float *dx,
                                     size_t B) {
    const att_dims a = dims(L);
    const size_t W = 3 * a.D, dh = a.dh;
    float *p = L->scratch, *ds = L->scratch + a.T; /* [T] each */
    memset(dx, 0, B * L->in_dim * sizeof *dx);
    for (size_t i = 0; i < B; i++) {
        const float *xi = x + i * a.T * W, *dvi = dv + i * a.T * a.D;
        float *dxi = dx + i * a.T * W;
        for (size_t h = 0; h < a.H; h++)
            for (size_t t = 0; t < a.T; t++) {
                const size_t n = prob_row(&a, xi, mask_of(L, &a, i), h, t, p);
                const float *dO = dvi + t * a.D + h * dh, *q = xi + t * W + h * dh;
                /* dP_tj = dO_t . V_j; dS_tj = P_tj (dP_tj - sum_k P_tk dP_tk) */
                double r = 0.0;
                for (size_t j = 0; j < n; j++) {
                    ds[j] = (float)dot(dO, xi + j * W + 2 * a.D + h * dh, dh);
                    r += (double)p[j] * ds[j];
                }
                for (size_t j = 0; j < n; j++) ds[j] = (float)((double)p[j] * ((double)ds[j] - r) * a.scale);
                float *dq = dxi + t * W + h * dh;
                for (size_t j = 0; j < n; j++) {
                    const float *k = xi + j * W + a.D + h * dh;
                    float *dk = dxi + j * W + a.D + h * dh, *dvv = dxi + j * W + 2 * a.D + h * dh;
                    for (size_t e = 0; e < dh; e++) {
                        dq[e] += ds[j] * k[e];   /* dQ_t += dS_tj K_j / sqrt(dh) */
                        dk[e] += ds[j] * q[e];   /* dK_j += dS_tj Q_t / sqrt(dh) */
                        dvv[e] += p[j] * dO[e];  /* dV_j += P_tj dO_t */
                    }
                }
            }
    }
    return DPT_OK;
}

static dpt_status att_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx, const float *dtheta,
                          float *dv, size_t B) {
    const att_dims a = dims(L);
    const size_t W = 3 * a.D, dh = a.dh;
    float *p = L->scratch, *ds = L->scratch + a.T;
    if (!dx) {
        memset(dv, 0, B * L->out_dim * sizeof *dv);
        return DPT_OK;
    }
    for (size_t i = 0; i < B; i++) {
        const float *xi = x + i * a.T * W, *ti = dx + i * a.T * W;
        float *oi = dv + i * a.T * a.D;
        for (size_t h = 0; h < a.H; h++)
            for (size_t t = 0; t < a.T; t++) {
                const size_t n = prob_row(&a, xi, mask_of(L, &a, i), h, t, p);
                const float *q = xi + t * W + h * dh, *dq = ti + t * W + h * dh;
                /* dS_tj = (dq_t . K_j + Q_t . dk_j) / sqrt(dh); dP = P (dS - sum P dS) */
                double r = 0.0;
                for (size_t j = 0; j < n; j++) {
                    ds[j] = (float)(a.scale * (dot(dq, xi + j * W + a.D + h * dh, dh) +
                                               dot(q, ti + j * W + a.D + h * dh, dh)));
                    r += (double)p[j] * ds[j];
                }
                for (size_t j = 0; j < n; j++) ds[j] = (float)((double)p[j] * ((double)ds[j] - r));
                float *o = oi + t * a.D + h * dh;
                for (size_t e = 0; e < dh; e++) {
                    double s = 0.0; /* dO_t = sum_j dP_tj V_j + P_tj dV_j */
                    for (size_t j = 0; j < n; j++)
                        s += (double)ds[j] * xi[j * W + 2 * a.D + h * dh + e] +
                             (double)p[j] * ti[j * W + 2 * a.D + h * dh + e];
                    o[e] = (float)s;
                }
            }
    }
    return DPT_OK;
}

static size_t att_n_tensors(const dpt_layer *L) { return 0; }

static const dpt_layer_ops att_ops = {
    att_forward, att_backward_input, NULL, att_jvp, att_n_tensors, NULL, NULL, NULL, NULL,
};

dpt_status dpt_layer_attention_setup(dpt_layer *L, const size_t in_shape[3], size_t heads, int causal) {
    DPT_CHECK(in_shape[0] == 1, DPT_EINVAL,
              "attention: the input must be a sequence of shape (1, T, 3D) (queries, keys, values: put plin<3D> "
              "before it), got %zux%zux%zu",
              in_shape[0], in_shape[1], in_shape[2]);
    DPT_CHECK(heads >= 1 && in_shape[2] % (3 * heads) == 0, DPT_EINVAL,
              "attention: %zu features per position are not queries, keys and values of %zu heads (3 x heads must "
              "divide them; put plin<3D> before it)",
              in_shape[2], heads);
    L->kind = DPT_LAYER_ATTENTION;
    L->ops = &att_ops;
    L->groups = heads;
    L->k = causal ? 1 : 0;
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    L->out_shape[0] = 1;
    L->out_shape[1] = in_shape[1];
    L->out_shape[2] = in_shape[2] / 3;
    L->in_dim = in_shape[1] * in_shape[2];
    L->out_dim = in_shape[1] * L->out_shape[2];
    L->n_params = 0;
    L->scratch_need = 2 * in_shape[1];
    return DPT_OK;
}
