/* DP-ULR on convolutions: the controller matrix of a conv module, its eigenproblem and the
 * per-example clipping of the conv LR estimates (see dpulr_conv.h and docs/dpulr.md). */
#include "dpulr_conv.h"

#include <math.h>
#include <string.h>

#define CTRL_CHUNK_FLOATS ((size_t)1 << 20) /* rows of patches per GEMM: about 4 MB */

static size_t conv_T(const dpt_layer *L) { return L->out_shape[1] * L->out_shape[2]; }
static size_t conv_n(const dpt_layer *L) { return L->in_shape[0] * L->k * L->k + (L->has_bias ? 1 : 0); }

/* examples per controller GEMM (>= 1) */
static size_t ctrl_examples(const dpt_layer *L) {
    size_t per = conv_T(L) * conv_n(L), e = CTRL_CHUNK_FLOATS / per;
    return e ? e : 1;
}

size_t dpt_ulr_conv_ctrl_work(const dpt_layer *L) {
    size_t n = conv_n(L);
    return ctrl_examples(L) * conv_T(L) * n + n * n;
}

/* rows [T, n] of example x: row t = a [patch_t; 1] (patch in the layer's unfold order
 * (c, ki, kj), zero padding) */
static void patch_rows(const dpt_layer *L, const float *x, float a, float *rows) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], k = L->k, s = L->stride;
    const size_t Wo = L->out_shape[2], T = conv_T(L), n = conv_n(L);
    const long p = (long)L->pad;
    for (size_t t = 0; t < T; t++) {
        const size_t oh = t / Wo, ow = t % Wo;
        float *r = rows + t * n;
        for (size_t c = 0; c < C; c++)
            for (size_t ki = 0; ki < k; ki++) {
                const long ih = (long)(oh * s) - p + (long)ki;
                for (size_t kj = 0; kj < k; kj++) {
                    const long iw = (long)(ow * s) - p + (long)kj;
                    float v = ih >= 0 && ih < (long)H && iw >= 0 && iw < (long)W
                                  ? x[(c * H + (size_t)ih) * W + (size_t)iw]
                                  : 0.0f;
                    r[(c * k + ki) * k + kj] = a * v;
                }
            }
        if (L->has_bias) r[n - 1] = a;
    }
}

void dpt_ulr_conv_ctrl_add(const dpt_layer *L, const float *x, const float *L0, size_t bc, double *A, float *work) {
    const size_t n = conv_n(L), T = conv_T(L), E = ctrl_examples(L);
    float *Y = work, *G = work + E * T * n;
    for (size_t lo = 0; lo < bc; lo += E) {
        size_t ne = bc - lo < E ? bc - lo : E;
        for (size_t j = 0; j < ne; j++) patch_rows(L, x + (lo + j) * L->in_dim, fabsf(L0[lo + j]), Y + j * T * n);
        /* G = Y^T Y over the ne T rows (float GEMM), accumulated in double */
        dpt_sgemm(1, 0, n, n, ne * T, 1.0f, Y, n, Y, n, 0.0f, G, n);
        for (size_t e = 0; e < n * n; e++) A[e] += G[e];
    }
}

dpt_status dpt_ulr_sym_eig(size_t n, double *A, double *wev, double *Z, double rel_tol, float *U, float *lam,
                           size_t *rank, double *lmin, double *lmax) {
    /* symmetrize (the GEMM's two triangles agree only to rounding) */
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) A[i * n + j] = A[j * n + i] = 0.5 * (A[i * n + j] + A[j * n + i]);
    DPT_TRY(dpt_syev(n, A, wev, Z));
    double mx = wev[n - 1] > 0 ? wev[n - 1] : 0, tol = rel_tol * mx;
    size_t r = 0;
    for (size_t j = 0; j < n; j++) {
        if (!(wev[j] > tol && mx > 0)) continue;
        for (size_t i = 0; i < n; i++) U[i * n + r] = (float)Z[i * n + j];
        lam[r++] = (float)wev[j];
    }
    *rank = r;
    *lmax = mx;
    *lmin = r == n ? wev[0] : 0.0;
    return DPT_OK;
}
