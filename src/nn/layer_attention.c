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
 * P is recomputed in every pass, never stored: O(T^2 D) per example in each pass. The
 * forward and backward_input run per example and head as small GEMMs (dpt_small_gemm: S, O,
 * dP, dQ, dK, dV, the T x T blocks in scratch [2 T^2 + 2 T dh]); the row-by-row loops they
 * replaced (P one row at a time, dot products in double, scratch [2 T]) are kept as the
 * reference (dpt_attention_*_ref, compared by tests/test_nn_seq.c) and still do the jvp.
 * Softmax: max and exp per row, the normalizer summed in double.
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

dpt_status dpt_attention_forward_ref(const dpt_layer *L, const float *x, float *v, size_t B) {
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

dpt_status dpt_attention_backward_input_ref(const dpt_layer *L, const float *x, const float *v, const float *dv,
                                           float *dx, size_t B) {
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

/* ==== GEMM kernels (forward, backward_input) ====
 * Per example i and head h, with Q, K, V [T, dh] the head's columns of x_i (row stride 3D),
 * dO [T, dh] its columns of dv_i (row stride D):
 *   S = Q K^T / sqrt(dh)  (Kt = K^T copied to scratch [dh, T], so the product reads rows)
 *   P = rowwise softmax of S over the allowed keys (others exactly 0)
 *   forward:   O = P V
 *   backward:  dP = dO V^T (Vt = V^T [dh, T]),  dS = P * (dP - rowsum(P * dP)) / sqrt(dh),
 *              dQ = dS K,  dK = dS^T Q,  dV = P^T dO
 * Causal rows still multiply the masked keys (P_tj = 0 there): the full T x T blocks keep
 * the products regular, at most twice the needed work in that one O(T^2) part. */

/* S [T, T] in place -> P: row t over its allowed keys (causal: j <= t; mk: not padded), the
 * others set to 0; a row without an allowed key is all 0. */
static void softmax_rows(const att_dims *a, const unsigned char *mk, float *S) {
    const size_t T = a->T;
    for (size_t t = 0; t < T; t++) {
        float *r = S + t * T;
        const size_t n = a->lim_causal ? t + 1 : T;
        float mx = -INFINITY;
        for (size_t j = 0; j < n; j++)
            if (!(mk && mk[j]) && r[j] > mx) mx = r[j];
        double z = 0.0;
        for (size_t j = 0; j < n; j++) {
            const float e = mk && mk[j] ? 0.0f : expf(r[j] - mx);
            r[j] = e;
            z += e;
        }
        const float iz = z > 0.0 ? (float)(1.0 / z) : 0.0f;
        for (size_t j = 0; j < n; j++) r[j] *= iz;
        for (size_t j = n; j < T; j++) r[j] = 0.0f;
    }
}

/* P [T, T] of head h of example xi [T, 3D] into P; kt: scratch [dh, T] */
static void probs(const att_dims *a, const float *xi, const unsigned char *mk, size_t h, float *P, float *kt) {
    const size_t T = a->T, W = 3 * a->D, dh = a->dh;
    const float *k = xi + a->D + h * dh;
    for (size_t t = 0; t < T; t++)
        for (size_t e = 0; e < dh; e++) kt[e * T + t] = (float)a->scale * k[t * W + e]; /* K^T / sqrt(dh) */
    dpt_small_gemm(T, T, dh, xi + h * dh, W, 1, kt, T, P, T, 1, 0);                   /* S = Q (K^T / sqrt(dh)) */
    softmax_rows(a, mk, P);
}

static dpt_status att_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const att_dims a = dims(L);
    const size_t T = a.T, W = 3 * a.D, dh = a.dh;
    float *P = L->scratch, *kt = P + T * T; /* [T, T], [dh, T] */
    for (size_t i = 0; i < B; i++) {
        const float *xi = x + i * T * W;
        float *vi = v + i * T * a.D;
        for (size_t h = 0; h < a.H; h++) {
            probs(&a, xi, mask_of(L, &a, i), h, P, kt);
            dpt_small_gemm(T, dh, T, P, T, 1, xi + 2 * a.D + h * dh, W, vi + h * dh, a.D, 1, 0); /* O = P V */
        }
    }
    return DPT_OK;
}

static dpt_status att_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv, float *dx,
                                     size_t B) {
    const att_dims a = dims(L);
    const size_t T = a.T, W = 3 * a.D, dh = a.dh;
    float *P = L->scratch, *dS = P + T * T, *kt = dS + T * T, *vt = kt + dh * T; /* [T,T], [T,T], [dh,T], [dh,T] */
    for (size_t i = 0; i < B; i++) {
        const float *xi = x + i * T * W, *dvi = dv + i * T * a.D;
        float *dxi = dx + i * T * W;
        for (size_t h = 0; h < a.H; h++) {
            const float *q = xi + h * dh, *k = xi + a.D + h * dh, *vv = xi + 2 * a.D + h * dh, *dO = dvi + h * dh;
            probs(&a, xi, mask_of(L, &a, i), h, P, kt);
            for (size_t t = 0; t < T; t++)
                for (size_t e = 0; e < dh; e++) vt[e * T + t] = vv[t * W + e];
            dpt_small_gemm(T, T, dh, dO, a.D, 1, vt, T, dS, T, 1, 0); /* dP = dO V^T */
            for (size_t t = 0; t < T; t++) { /* dS = P * (dP - rowsum(P * dP)) / sqrt(dh) */
                float *d = dS + t * T;
                const float *p = P + t * T;
                double r = 0.0;
                for (size_t j = 0; j < T; j++) r += (double)p[j] * d[j];
                const float rf = (float)r, sc = (float)a.scale;
                for (size_t j = 0; j < T; j++) d[j] = p[j] * (d[j] - rf) * sc;
            }
            dpt_small_gemm(T, dh, T, dS, T, 1, k, W, dxi + h * dh, W, 1, 0);                  /* dQ = dS K */
            dpt_small_gemm(T, dh, T, dS, 1, T, q, W, dxi + a.D + h * dh, W, 1, 0);            /* dK = dS^T Q */
            dpt_small_gemm(T, dh, T, P, 1, T, dO, a.D, dxi + 2 * a.D + h * dh, W, 1, 0);      /* dV = P^T dO */
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
    const size_t T = in_shape[1], dh = in_shape[2] / 3 / heads;
    L->scratch_need = 2 * T * T + 2 * T * dh; /* GEMM kernels; the reference and jvp use [2 T] of it */
    return DPT_OK;
}
