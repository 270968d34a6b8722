/* Conv2d layer: v = W * x + b (cross-correlation, zero padding), through im2col + GEMM.
 * B = batch, C = C_in, H x W input, k x k kernel, s = stride, p = padding,
 * O = C_out, Ho x Wo output, T = Ho * Wo positions, Dk = C k^2 (unfolded patch size).
 * x_i: [C, H, W], v_i: [O, Ho, Wo] = [O, T] (channel-major, as every activation here);
 * w: [O, C, k, k] = [O, Dk] view into theta, b: [O] right after it.
 * U_i = im2col(x_i): [Dk, T] with row r = (c k + ki) k + kj, column t = oh Wo + ow; then
 * v_i = W U_i + b 1^T and the per-example gradient is g_i = (dV_i U_i^T, dV_i 1).
 * A chunk of n <= L->chunk examples is unfolded side by side into cols [Dk, n T], so every
 * product over the batch is ONE GEMM per chunk with inner dimension n T:
 *   forward        Y [O, n T]  = W cols
 *   backward_input dcols       = W^T dY, folded back (col2im)
 *   SUM/WEIGHTED   dW (+)= dY_w cols^T with dY_w = [w_i dV_i]_i (the clipped sum of DP-SGD)
 * Per-example squared norms (SQNORM), two ways, chosen per layer at setup like mixed ghost
 * clipping (Bu et al. 2022), but by arithmetic rather than memory: the ghost path costs
 * T^2 (Dk + O) multiply-adds per example, the materialized one T O Dk, so ghost when
 * T (Dk + O) < O Dk (Bu et al. compare the memory, 2 T^2 against O Dk; on ResNet-5's
 * conv 4, T = 64, their rule picks ghost and bench/conv_step measured it slower):
 *   ghost         ||dV_i U_i^T||_F^2 = <U_i^T U_i, dV_i^T dV_i>_F (two T x T Grams)
 *   materialized  g_i = dV_i U_i^T [O, Dk], then its squared entries
 * plus ||dV_i 1||^2 for the bias. Scratch layout: cols [Dk, chunk T] | Y [O, chunk T] |
 * aux [max(2 T^2, O Dk)].
 * Unfold cache (L->ucache, set by the model when it fits its budget): forward unfolds into
 * it instead of scratch and records (x, B); backward_params and jvp's dtheta term called
 * with that same x and B read the chunks from it instead of unfolding again. DP-SGD's step
 * (forward, SQNORM, WEIGHTED) then unfolds once instead of three times.
 * Weight standardization (spec suffix "ws", L->wstd; Qiao et al. 2019, used for DP by De et
 * al. 2022): the layer convolves with W^ instead of W, each filter o standardized over its
 * fan-in n = Dk: mu_o = mean(w_o), s_o = sqrt(var(w_o) + 1e-5), w^_o = (w_o - mu_o) / s_o
 * (the bias is not standardized). W^ is a function of the weights only, so every
 * parameter gradient is the one of an ordinary convolution with weights W^, mapped back
 * through the Jacobian of the standardization, which is symmetric (docs/nn.md derives it):
 *   J_o = (1 / s_o) (I - 1 1^T / n - w^_o w^_o^T / n),  g_{w_o} = J_o g_{w^_o}
 * per example as well as summed (J is the same for every example). W^ and s are recomputed
 * from theta at every call (O Dk work, nothing stale between calls) into the scratch after
 * aux: W^ [O, Dk] | s [O] | a second [O, Dk] for the summed or tangent weights. */
#include "nn_internal.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONV_CHUNK_FLOATS ((size_t)1 << 22) /* 16 MB of cols + Y per chunk */

static size_t conv_T(const dpt_layer *L) { return L->out_shape[1] * L->out_shape[2]; }
static size_t conv_Dk(const dpt_layer *L) { return L->in_shape[0] * L->k * L->k; }

/* ==== Weight standardization ==== */

#define WS_EPS 1e-5

/* Floats of scratch before the standardization's region: cols | Y | aux */
static size_t ws_offset(const dpt_layer *L) {
    const size_t O = L->out_shape[0], T = conv_T(L), Dk = conv_Dk(L);
    const size_t aux = 2 * T * T > O * Dk ? 2 * T * T : O * Dk;
    return L->chunk * (Dk + O) * T + aux;
}
static float *ws_what(const dpt_layer *L) { return L->scratch + ws_offset(L); }
static float *ws_s(const dpt_layer *L) { return ws_what(L) + L->out_shape[0] * conv_Dk(L); }
static float *ws_tmp(const dpt_layer *L) { return ws_s(L) + L->out_shape[0]; }

/* The weights the layer convolves with: W^ (computed now from theta, with s) when the
 * layer standardizes, else W itself. Means and variances in double. */
static const float *conv_weights(const dpt_layer *L) {
    if (!L->wstd) return L->w;
    const size_t O = L->out_shape[0], n = conv_Dk(L);
    float *wh = ws_what(L), *sd = ws_s(L);
    for (size_t o = 0; o < O; o++) {
        const float *w = L->w + o * n;
        double mu = 0.0, var = 0.0;
        for (size_t j = 0; j < n; j++) mu += w[j];
        mu /= (double)n;
        for (size_t j = 0; j < n; j++) var += ((double)w[j] - mu) * ((double)w[j] - mu);
        var /= (double)n;
        const double s = sqrt(var + WS_EPS);
        sd[o] = (float)s;
        for (size_t j = 0; j < n; j++) wh[o * n + j] = (float)(((double)w[j] - mu) / s);
    }
    return wh;
}

/* g [O, Dk] <- J g filter by filter: g_o <- (g_o - mean(g_o) 1 - w^_o mean(w^_o * g_o)) / s_o
 * (J symmetric, so this is also J^T g: a gradient with respect to W^ becomes one with
 * respect to W). Needs conv_weights called since theta last changed. */
static void ws_jacobian(const dpt_layer *L, float *g) {
    const size_t O = L->out_shape[0], n = conv_Dk(L);
    const float *wh = ws_what(L), *sd = ws_s(L);
    for (size_t o = 0; o < O; o++) {
        float *go = g + o * n;
        const float *ho = wh + o * n;
        double a = 0.0, b = 0.0;
        for (size_t j = 0; j < n; j++) a += go[j], b += (double)ho[j] * go[j];
        a /= (double)n, b /= (double)n;
        const double inv = 1.0 / (double)sd[o];
        for (size_t j = 0; j < n; j++) go[j] = (float)(((double)go[j] - a - (double)ho[j] * b) * inv);
    }
}

/* Naive reference (tests): the same map written out as the matrix J_o applied to g_o,
 * J_o[j, k] = (delta_jk - 1/n - w^_j w^_k / n) / s_o, in double; out [O, Dk]. */
void dpt_conv_ws_jacobian_ref(const dpt_layer *L, const float *g, double *out) {
    const size_t O = L->out_shape[0], n = conv_Dk(L);
    (void)conv_weights(L);
    const float *wh = ws_what(L), *sd = ws_s(L);
    for (size_t o = 0; o < O; o++)
        for (size_t j = 0; j < n; j++) {
            double r = 0.0;
            for (size_t k = 0; k < n; k++) {
                const double J = ((j == k) - 1.0 / (double)n - (double)wh[o * n + j] * wh[o * n + k] / (double)n) /
                                 (double)sd[o];
                r += J * g[o * n + k];
            }
            out[o * n + j] = r;
        }
}

/* ==== im2col / col2im ==== */

/* The output columns ow whose input column iw = ow s - p + kj lies inside [0, W): the range
 * [*lo, *hi) (empty when *lo == *hi). Found once per kernel column, so the loops below copy
 * or add a contiguous (s = 1) or strided run without a bounds test per element. */
static void valid_cols(const dpt_layer *L, size_t kj, size_t *lo, size_t *hi) {
    const size_t W = L->in_shape[2], s = L->stride, Wo = L->out_shape[2], p = L->pad;
    /* ow s + kj >= p  and  ow s + kj <= p + W - 1 */
    size_t a = kj >= p ? 0 : (p - kj + s - 1) / s;
    size_t b = p + W - 1 >= kj ? (p + W - 1 - kj) / s + 1 : 0;
    if (b > Wo) b = Wo;
    if (a > b) a = b;
    *lo = a, *hi = b;
}

/* cols[r, t] (row stride ldc) = x[c, oh s - p + ki, ow s - p + kj] or 0 outside. */
static void im2col(const dpt_layer *L, const float *x, float *cols, size_t ldc) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], k = L->k, s = L->stride;
    const size_t Ho = L->out_shape[1], Wo = L->out_shape[2];
    const long p = (long)L->pad;
    for (size_t c = 0; c < C; c++)
        for (size_t ki = 0; ki < k; ki++)
            for (size_t kj = 0; kj < k; kj++) {
                float *row = cols + ((c * k + ki) * k + kj) * ldc;
                size_t lo, hi;
                valid_cols(L, kj, &lo, &hi);
                for (size_t oh = 0; oh < Ho; oh++) {
                    const long ih = (long)(oh * s) - p + (long)ki;
                    float *restrict r = row + oh * Wo;
                    if (ih < 0 || ih >= (long)H || lo == hi) {
                        memset(r, 0, Wo * sizeof *r);
                        continue;
                    }
                    /* xr[j] = x[c, ih, (lo + j) s - p + kj] for j in [0, hi - lo); the rows are
                     * short (Wo = 5-32 in our models), so plain loops, no library calls */
                    const float *restrict xr = x + (c * H + (size_t)ih) * W + (lo * s + kj - (size_t)p);
                    for (size_t ow = 0; ow < lo; ow++) r[ow] = 0.0f;
                    if (s == 1) {
#pragma omp simd
                        for (size_t j = 0; j < hi - lo; j++) r[lo + j] = xr[j];
                    } else if (s == 2) { /* a literal stride: vector loads and shuffles, not gathers */
#pragma omp simd
                        for (size_t j = 0; j < hi - lo; j++) r[lo + j] = xr[2 * j];
                    } else {
#pragma omp simd
                        for (size_t j = 0; j < hi - lo; j++) r[lo + j] = xr[j * s];
                    }
                    for (size_t ow = hi; ow < Wo; ow++) r[ow] = 0.0f;
                }
            }
}

/* dx[c, ih, iw] += cols[r, t] over every (r, t) that im2col read from (c, ih, iw); dx is
 * zeroed first. The sum over (ki, kj) runs in a fixed order (deterministic). */
static void col2im(const dpt_layer *L, const float *cols, size_t ldc, float *dx) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], k = L->k, s = L->stride;
    const size_t Ho = L->out_shape[1], Wo = L->out_shape[2];
    const long p = (long)L->pad;
    memset(dx, 0, C * H * W * sizeof *dx);
    for (size_t c = 0; c < C; c++)
        for (size_t ki = 0; ki < k; ki++)
            for (size_t kj = 0; kj < k; kj++) {
                const float *row = cols + ((c * k + ki) * k + kj) * ldc;
                size_t lo, hi;
                valid_cols(L, kj, &lo, &hi);
                if (lo == hi) continue;
                for (size_t oh = 0; oh < Ho; oh++) {
                    const long ih = (long)(oh * s) - p + (long)ki;
                    if (ih < 0 || ih >= (long)H) continue;
                    float *restrict xr = dx + (c * H + (size_t)ih) * W + (lo * s + kj - (size_t)p);
                    const float *restrict r = row + oh * Wo + lo;
                    /* within one row the targets are distinct (s >= 1), so the order of
                     * these additions is the same as the element-wise loop's */
                    if (s == 1) {
#pragma omp simd
                        for (size_t j = 0; j < hi - lo; j++) xr[j] += r[j];
                    } else if (s == 2) {
#pragma omp simd
                        for (size_t j = 0; j < hi - lo; j++) xr[2 * j] += r[j];
                    } else {
#pragma omp simd
                        for (size_t j = 0; j < hi - lo; j++) xr[j * s] += r[j];
                    }
                }
            }
}

/* dst row i (stride ldd) = src row i (stride lds), rows of w floats. The widths of our
 * models' planes get a constant-size copy (a few vector moves) instead of a call to memcpy
 * with a variable size (those calls were 5% of a DP-ULR step on resnet5). */
static inline __attribute__((always_inline)) void copy_rows(float *restrict dst, size_t ldd, const float *restrict src,
                                                            size_t lds, size_t rows, size_t w) {
#define DPT_COPY_ROWS(WW)                                                                                              \
    for (size_t i = 0; i < rows; i++) memcpy(dst + i * ldd, src + i * lds, (WW) * sizeof(float));                     \
    return
    switch (w) {
    case 4: DPT_COPY_ROWS(4);
    case 8: DPT_COPY_ROWS(8);
    case 16: DPT_COPY_ROWS(16);
    case 28: DPT_COPY_ROWS(28);
    case 32: DPT_COPY_ROWS(32);
    default: DPT_COPY_ROWS(w);
    }
#undef DPT_COPY_ROWS
}

/* The interior of a zero-padded copy: dst [C, H + 2p, W + 2p] (border already 0) <- src
 * [C, H, W]. */
static void pad_into(float *dst, const float *src, size_t C, size_t H, size_t W, size_t p) {
    const size_t Hp = H + 2 * p, Wp = W + 2 * p;
    for (size_t c = 0; c < C; c++) copy_rows(dst + (c * Hp + p) * Wp + p, Wp, src + c * H * W, W, H, W);
}

/* im2col for stride 1 through a zero-padded copy xp [C, H + 2p, W + 2p] of the example
 * (its border must already be 0; only the interior is written here): with stride 1 every
 * row of every (c, ki, kj) plane is then one contiguous run of Wo floats of xp, no bounds
 * tests and no zero fill. The same values as im2col (a copy), in the same places. */
static void im2col_s1(const dpt_layer *L, const float *x, float *xp, float *cols, size_t ldc) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], k = L->k, p = L->pad;
    const size_t Ho = L->out_shape[1], Wo = L->out_shape[2], Hp = H + 2 * p, Wp = W + 2 * p;
    pad_into(xp, x, C, H, W, p);
    for (size_t c = 0; c < C; c++)
        for (size_t ki = 0; ki < k; ki++)
            for (size_t kj = 0; kj < k; kj++)
                copy_rows(cols + ((c * k + ki) * k + kj) * ldc, Wo, xp + (c * Hp + ki) * Wp + kj, Wp, Ho, Wo);
}

/* im2col for stride s > 1 through the zero-padded copy xp (as im2col_s1): with tbl[t] =
 * oh s (W + 2p) + ow s, the row of kernel position (c, ki, kj) is xp[base + tbl[t]] for every
 * t, one loop of T indexed loads instead of Ho rows of Wo strided ones with bounds tests
 * (rows of 5-14 outputs in mnist_cnn, where im2col was 15% of a DP-SGD step, perf
 * 2026-12-07; this made its second convolution's forward 1.3x faster; splitting xp into
 * its s x s phases to copy contiguous rows instead was slower there). The same values as
 * im2col (a copy), in the same places. */
/* tbl[t] = oh s Wp + ow s for the T output positions (Wp = W + 2p): where output t's window
 * starts in the padded example. NULL when out of memory or the offsets do not fit 32 bits. */
static uint32_t *conv_tbl(const dpt_layer *L) {
    const size_t s = L->stride, Hp = L->in_shape[1] + 2 * L->pad, Wp = L->in_shape[2] + 2 * L->pad;
    if (L->in_shape[0] * Hp * Wp > UINT32_MAX) return NULL;
    uint32_t *tbl = malloc(conv_T(L) * sizeof *tbl);
    if (tbl)
        for (size_t oh = 0, t = 0; oh < L->out_shape[1]; oh++)
            for (size_t ow = 0; ow < L->out_shape[2]; ow++) tbl[t++] = (uint32_t)(oh * s * Wp + ow * s);
    return tbl;
}

/* col2im through a zero-padded accumulator dxp [C, Hp, Wp] and conv_tbl's offsets: row r =
 * (c, ki, kj) of cols adds into dxp[(c Hp + ki) Wp + kj + tbl[t]] for every t, rows in
 * order, then dx is dxp's interior. Within a row the targets are distinct, so every input
 * receives the same additions in the same order as col2im's (which skips the ones that fall
 * on the padding): the same bits, without col2im's per-row bounds tests on rows of 5-14
 * outputs. */
static void col2im_tbl(const dpt_layer *L, const float *cols, size_t ldc, const uint32_t *restrict tbl, float *dxp,
                       float *dx) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], k = L->k, p = L->pad;
    const size_t T = conv_T(L), Hp = H + 2 * p, Wp = W + 2 * p;
    memset(dxp, 0, C * Hp * Wp * sizeof *dxp);
    for (size_t c = 0; c < C; c++)
        for (size_t ki = 0; ki < k; ki++)
            for (size_t kj = 0; kj < k; kj++) {
                float *restrict dst = dxp + (c * Hp + ki) * Wp + kj;
                const float *restrict src = cols + ((c * k + ki) * k + kj) * ldc;
                for (size_t t = 0; t < T; t++) dst[tbl[t]] += src[t];
            }
    for (size_t c = 0; c < C; c++) copy_rows(dx + c * H * W, W, dxp + (c * Hp + p) * Wp + p, Wp, H, W);
}

static void im2col_tbl(const dpt_layer *L, const float *x, float *xp, const uint32_t *restrict tbl, float *cols,
                       size_t ldc) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], k = L->k, p = L->pad;
    const size_t T = conv_T(L), Hp = H + 2 * p, Wp = W + 2 * p;
    pad_into(xp, x, C, H, W, p);
    for (size_t c = 0; c < C; c++)
        for (size_t ki = 0; ki < k; ki++)
            for (size_t kj = 0; kj < k; kj++) {
                const float *restrict src = xp + (c * Hp + ki) * Wp + kj;
                float *restrict dst = cols + ((c * k + ki) * k + kj) * ldc;
                for (size_t t = 0; t < T; t++) dst[t] = src[tbl[t]];
            }
}

/* cols [Dk, n T] for examples x[0..n). Every stride goes through a padded copy per example
 * (im2col_s1 for stride 1: perf put im2col's per-row bounds tests and short zero fills at
 * ~45% of a DP-ULR step on resnet5; im2col_tbl for larger strides); each thread takes a
 * contiguous block of examples and its own padded buffer, zeroed once. */
static void unfold_chunk(const dpt_layer *L, const float *x, size_t n, float *cols) {
    const size_t D = L->in_dim, T = conv_T(L), nT = n * T, s = L->stride;
    const int par = n * conv_Dk(L) * T > DPT_NN_PAR_MIN;
    const size_t blocks = par && L->threads > 1 ? (size_t)L->threads : 1;
    const size_t Hp = L->in_shape[1] + 2 * L->pad, Wp = L->in_shape[2] + 2 * L->pad, P = L->in_shape[0] * Hp * Wp;
    float *xp = calloc(blocks * P, sizeof(float));
    uint32_t *tbl = s > 1 ? conv_tbl(L) : NULL;
    if (xp && (s == 1 || tbl)) {
        const long long nb = (long long)blocks;
#pragma omp parallel for num_threads(L->threads) if (par)
        for (long long b = 0; b < nb; b++)
            for (size_t j = n * (size_t)b / blocks; j < n * (size_t)(b + 1) / blocks; j++) {
                if (tbl)
                    im2col_tbl(L, x + j * D, xp + (size_t)b * P, tbl, cols + j * T, nT);
                else
                    im2col_s1(L, x + j * D, xp + (size_t)b * P, cols + j * T, nT);
            }
        free(xp);
        free(tbl);
        return;
    }
    free(xp);
    free(tbl);
    /* no memory for the padded copy: the general im2col */
    const long long nn = (long long)n;
#pragma omp parallel for num_threads(L->threads) if (par)
    for (long long j = 0; j < nn; j++) im2col(L, x + (size_t)j * D, cols + (size_t)j * T, nT);
}

size_t dpt_layer_conv_unfold_floats(const dpt_layer *L) {
    return L->kind == DPT_LAYER_CONV2D ? conv_Dk(L) * conv_T(L) : 0;
}

/* Convolutions whose forward skips the unfold (dpt_conv_direct): stride 1 and output rows
 * of a multiple of 8 positions (all of resnet5's). */
static int direct_ok(const dpt_layer *L) { return L->stride == 1 && L->out_shape[2] % 8 == 0; }

/* The k x k, stride-1 convolution of each example in[j] [Ci, Hi, Wi], zero-padded by p,
 * into out[j] [Co, Ho, Wo] (Ho = Hi + 2p - k + 1, likewise Wo; a multiple of 8) by
 * dpt_conv_direct: out (+)= w [Co, Ci k k] x patches + b (b NULL: none). Examples are
 * in_stride / out_stride floats apart; each thread block takes a contiguous run of them and
 * its own padded copy, zeroed once (as unfold_chunk). Serves the direct forward and the
 * direct input gradient. 0 when out of memory (the callers then take the unfold path). */
static int direct_batch(const dpt_layer *L, size_t Ci, size_t Hi, size_t Wi, size_t p, size_t Co, const float *w,
                        const float *b, const float *in, size_t in_stride, float *out, size_t out_stride, size_t B,
                        int accumulate) {
    const size_t k = L->k, Hp = Hi + 2 * p, Wp = Wi + 2 * p, P = Ci * Hp * Wp, Dk = Ci * k * k;
    const size_t Wo = Wp - k + 1, T = (Hp - k + 1) * Wo;
    const int par = B * Dk * T > DPT_NN_PAR_MIN;
    const size_t blocks = par && L->threads > 1 ? (size_t)L->threads : 1;
    size_t *koff = malloc(Dk * sizeof *koff);
    float *xp = calloc(blocks * P, sizeof(float));
    if (!koff || !xp) {
        free(koff);
        free(xp);
        return 0;
    }
    for (size_t c = 0; c < Ci; c++)
        for (size_t ki = 0; ki < k; ki++)
            for (size_t kj = 0; kj < k; kj++) koff[(c * k + ki) * k + kj] = (c * Hp + ki) * Wp + kj;
    const long long nb = (long long)blocks;
#pragma omp parallel for num_threads(L->threads) if (par)
    for (long long bb = 0; bb < nb; bb++) {
        float *xb = xp + (size_t)bb * P;
        for (size_t j = B * (size_t)bb / blocks; j < B * (size_t)(bb + 1) / blocks; j++) {
            pad_into(xb, in + j * in_stride, Ci, Hi, Wi, p);
            dpt_conv_direct(Co, Dk, T, Wo, Wp, w, b, koff, xb, out + j * out_stride, accumulate);
        }
    }
    free(koff);
    free(xp);
    return 1;
}

/* v [B, O, T] (+)= conv(x; w) + b by the direct convolution */
static int conv_direct_batch(const dpt_layer *L, const float *w, const float *b, const float *x, float *v, size_t B,
                             int accumulate) {
    return direct_batch(L, L->in_shape[0], L->in_shape[1], L->in_shape[2], L->pad, L->out_shape[0], w, b, x,
                        L->in_dim, v, L->out_dim, B, accumulate);
}

/* ==== strided convolutions through their s x s phases (polyphase) ====
 * With xp the zero-padded example and s > 1, the phase images
 *   xq[(c s + a) s + b][i, j] = xp[c, s i + a, s j + b]     (a, b in [0, s))
 * turn the stride-s, k x k convolution into a stride-1 one over C s^2 channels with a
 * kq x kq kernel (kq = ceil(k / s)):  W'[o, (c s + a) s + b, u, v] = W[o, c, s u + a, s v + b]
 * (0 where s u + a >= k or s v + b >= k). Computed on Wo8 = Wo rounded up to 8 columns
 * (the direct kernels' vectors), the extra columns dropped (forward) or given a zero
 * cotangent (per-example gradients), it needs no unfold: mnist_cnn's conv1 (k 8, s 2,
 * 14 x 14 outputs) unfolded 64 x 196 floats per example from 784 inputs, its forward's
 * largest cost. Taken when windows overlap (k > s: the unfold repeats each input
 * (k / s)^2 times) and the rounding wastes at most a quarter (Wo8 <= 1.25 Wo; not conv2's
 * 5 x 5 outputs). Phase rows, images and columns past xp are 0.
 * Tried for conv2 and dropped (2026-12-07): its phase rows laid end to end (6 wide, so one
 * run of 32 positions for 25 outputs) made its forward about 1.6x faster than unfold + GEMM,
 * but its per-example products through dpt_conv_pe_grad 2x slower (a run of 32 positions
 * is mostly the kernel's lane sums), and DP-SGD's products need the unfold anyway: a net
 * loss for the DP-SGD step (layer timings of forward + PER_EXAMPLE at batch 256). Its
 * products through small_gemm.c's pe_grad_t instead (vectors over the 32 outputs, the
 * phase images read in place, W's own tap order) were 1.9x slower than OpenBLAS on the
 * cached unfold too (6.3 against 3.3 ms per 256 examples): at 25 positions the block's
 * transposed store costs more than its products. pe_grad_t beat OpenBLAS only from about
 * 48 positions (T = 49: 0.85x, T = 144: 0.46x; T = 16: 1.8x), shapes no model here has. */
typedef struct {
    size_t s, kq, Cq, Hq, Wq, Wo8, Kq, Pq; /* Kq = Cq kq^2, Pq = Cq Hq Wq */
} poly_geom;

static int poly_ok(const dpt_layer *L, poly_geom *g) {
    const size_t s = L->stride, k = L->k, Wo = L->out_shape[2];
    if (s < 2 || k <= s) return 0;
    g->s = s;
    g->kq = (k + s - 1) / s;
    g->Cq = L->in_shape[0] * s * s;
    g->Hq = L->out_shape[1] + g->kq - 1;
    g->Wo8 = (Wo + 7) / 8 * 8;
    g->Wq = g->Wo8 + g->kq - 1;
    g->Kq = g->Cq * g->kq * g->kq;
    g->Pq = g->Cq * g->Hq * g->Wq;
    return 4 * g->Wo8 <= 5 * Wo;
}

/* xq [Cq, Hq, Wq] <- the phase images of example x [C, H, W] */
static void poly_split(const dpt_layer *L, const poly_geom *g, const float *x, float *xq) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], s = g->s;
    const long p = (long)L->pad;
    for (size_t c = 0; c < C; c++)
        for (size_t a = 0; a < s; a++)
            for (size_t b = 0; b < s; b++) {
                float *q = xq + ((c * s + a) * s + b) * g->Hq * g->Wq;
                for (size_t i = 0; i < g->Hq; i++) {
                    const long ih = (long)(s * i + a) - p;
                    float *qr = q + i * g->Wq;
                    if (ih < 0 || ih >= (long)H) {
                        memset(qr, 0, g->Wq * sizeof *qr);
                        continue;
                    }
                    const float *xr = x + (c * H + (size_t)ih) * W;
                    for (size_t j = 0; j < g->Wq; j++) {
                        const long iw = (long)(s * j + b) - p;
                        qr[j] = iw >= 0 && iw < (long)W ? xr[iw] : 0.0f;
                    }
                }
            }
}

/* koff[r'] of patch row r' = (c', u, v) in xq */
static void poly_koff(const poly_geom *g, size_t *koff) {
    for (size_t c = 0; c < g->Cq; c++)
        for (size_t u = 0; u < g->kq; u++)
            for (size_t v = 0; v < g->kq; v++) koff[(c * g->kq + u) * g->kq + v] = (c * g->Hq + u) * g->Wq + v;
}

/* the index into W's row [Dk] of W'[o]'s entry r' = (c', u, v), or Dk where W' is 0 */
static size_t poly_src(const dpt_layer *L, const poly_geom *g, size_t r) {
    const size_t k = L->k, s = g->s, kq = g->kq;
    const size_t v = r % kq, u = (r / kq) % kq, cq = r / (kq * kq);
    const size_t c = cq / (s * s), a = (cq / s) % s, b = cq % s, ki = s * u + a, kj = s * v + b;
    return ki < k && kj < k ? (c * k + ki) * k + kj : conv_Dk(L);
}

/* v [B, O, T] (+)= conv(x; w) + b through the phases; 0 when out of memory */
static int poly_batch(const dpt_layer *L, const poly_geom *g, const float *w, const float *bias, const float *x,
                      float *v, size_t B, int accumulate) {
    const size_t O = L->out_shape[0], Ho = L->out_shape[1], Wo = L->out_shape[2], Dk = conv_Dk(L);
    const size_t T8 = Ho * g->Wo8, per = g->Pq + O * T8;
    const int par = B * g->Kq * T8 > DPT_NN_PAR_MIN;
    const size_t blocks = par && L->threads > 1 ? (size_t)L->threads : 1;
    size_t *koff = malloc(g->Kq * sizeof *koff);
    float *wq = malloc(O * g->Kq * sizeof *wq), *buf = malloc(blocks * per * sizeof *buf);
    if (!koff || !wq || !buf) {
        free(koff), free(wq), free(buf);
        return 0;
    }
    poly_koff(g, koff);
    for (size_t r = 0; r < g->Kq; r++) {
        const size_t src = poly_src(L, g, r);
        for (size_t o = 0; o < O; o++) wq[o * g->Kq + r] = src < Dk ? w[o * Dk + src] : 0.0f;
    }
    const long long nb = (long long)blocks;
#pragma omp parallel for num_threads(L->threads) if (par)
    for (long long bb = 0; bb < nb; bb++) {
        float *xq = buf + (size_t)bb * per, *y = xq + g->Pq;
        for (size_t j = B * (size_t)bb / blocks; j < B * (size_t)(bb + 1) / blocks; j++) {
            poly_split(L, g, x + j * L->in_dim, xq);
            dpt_conv_direct(O, g->Kq, T8, g->Wo8, g->Wq, wq, bias, koff, xq, y, 0);
            float *vj = v + j * L->out_dim;
            for (size_t o = 0; o < O; o++)
                for (size_t i = 0; i < Ho; i++) {
                    float *dst = vj + (o * Ho + i) * Wo;
                    const float *src = y + (o * Ho + i) * g->Wo8;
                    /* rows of 7-16 floats: a loop, not a call to memcpy with a variable size */
                    if (accumulate)
                        for (size_t c = 0; c < Wo; c++) dst[c] += src[c];
                    else
                        for (size_t c = 0; c < Wo; c++) dst[c] = src[c];
                }
        }
    }
    free(koff), free(wq), free(buf);
    return 1;
}

/* 1 when the cache holds the unfold of exactly this x and B, in this layer's chunking */
static int cache_hit(const dpt_layer *L, const float *x, size_t B) {
    return L->ucache && L->ucache->x && L->ucache->x == x && L->ucache->B == B && L->ucache->chunk == L->chunk;
}

/* After a direct forward of this x and B (which unfolded nothing), unfolds it into the
 * cache now, as that forward would have: DP-SGD's per-example norms and clipped sum then
 * still share one unfold. 1 when the cache now holds it. */
static int fill_pending(const dpt_layer *L, const float *x, size_t B) {
    struct dpt_unfold_cache *u = L->ucache;
    if (!u || !u->pend || u->pend != x || u->pend_B != B || B > u->cap) return 0;
    const size_t Dk = conv_Dk(L), T = conv_T(L), D = L->in_dim;
    for (size_t lo = 0; lo < B; lo += L->chunk) {
        const size_t n = B - lo < L->chunk ? B - lo : L->chunk;
        unfold_chunk(L, x + lo * D, n, u->cols + lo * Dk * T);
    }
    u->x = x;
    u->B = B;
    u->chunk = L->chunk;
    u->pend = NULL;
    return 1;
}

/* cols [Dk, n T] of the chunk x[lo, lo + n) of a batch: the cached unfold on a hit, else
 * unfolded into the scratch */
static const float *chunk_cols(const dpt_layer *L, const float *x, size_t lo, size_t n, int hit) {
    if (hit) return L->ucache->cols + lo * conv_Dk(L) * conv_T(L);
    unfold_chunk(L, x + lo * L->in_dim, n, L->scratch);
    return L->scratch;
}

/* Y [O, n T] <- scale_i * dv_i [O, T] side by side (scale NULL = 1) */
static void gather_out(const dpt_layer *L, const float *dv, size_t n, const float *scale, float *Y) {
    const size_t O = L->out_shape[0], T = conv_T(L), nT = n * T;
    for (size_t j = 0; j < n; j++) {
        const float w = scale ? scale[j] : 1.0f;
        for (size_t o = 0; o < O; o++) {
            const float *src = dv + (j * O + o) * T;
            float *dst = Y + o * nT + j * T;
            for (size_t t = 0; t < T; t++) dst[t] = w * src[t];
        }
    }
}

/* ==== forward / backward_input / jvp ==== */

/* v [B, O, T] (+)= conv(x; w) + b (b NULL: no bias); accumulate = 1 adds to v.
 * cache: 1 = unfold into the layer's cache and record (x, B) (forward), 0 = read the cache
 * only on a hit. */
static void conv_apply(const dpt_layer *L, const float *w, const float *b, const float *x, float *v, size_t B,
                       int accumulate, int cache) {
    const size_t O = L->out_shape[0], T = conv_T(L), Dk = conv_Dk(L), D = L->in_dim, K = L->out_dim;
    float *Y = L->scratch + Dk * L->chunk * T;
    if (L->ucache && cache) {
        L->ucache->x = NULL; /* invalid until the new unfold is complete */
        L->ucache->pend = NULL;
    }
    poly_geom pg;
    if ((direct_ok(L) && conv_direct_batch(L, w, b, x, v, B, accumulate)) ||
        (poly_ok(L, &pg) && poly_batch(L, &pg, w, b, x, v, B, accumulate))) {
        if (L->ucache && cache) { /* backward_params unfolds x into the cache if it needs it */
            L->ucache->pend = x;
            L->ucache->pend_B = B;
        }
        return;
    }
    const int fill = cache && L->ucache && B <= L->ucache->cap, hit = !cache && cache_hit(L, x, B);
    for (size_t lo = 0; lo < B; lo += L->chunk) {
        const size_t n = B - lo < L->chunk ? B - lo : L->chunk, nT = n * T;
        const float *cols;
        if (fill) {
            float *c = L->ucache->cols + lo * Dk * T;
            unfold_chunk(L, x + lo * D, n, c);
            cols = c;
        } else {
            cols = chunk_cols(L, x, lo, n, hit);
        }
        /* Y [O, n T] = W [O, Dk] cols [Dk, n T] */
        dpt_sgemm(0, 0, O, nT, Dk, 1.0f, w, Dk, cols, nT, 0.0f, Y, nT);
        for (size_t j = 0; j < n; j++)
            for (size_t o = 0; o < O; o++) {
                float *dst = v + (lo + j) * K + o * T;
                const float *src = Y + o * nT + j * T;
                const float bo = b ? b[o] : 0.0f;
                if (accumulate)
                    for (size_t t = 0; t < T; t++) dst[t] += src[t] + bo;
                else
                    for (size_t t = 0; t < T; t++) dst[t] = src[t] + bo;
            }
    }
    if (fill) {
        L->ucache->x = x;
        L->ucache->B = B;
        L->ucache->chunk = L->chunk;
    }
}

static dpt_status conv_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    conv_apply(L, conv_weights(L), L->b, x, v, B, 0, 1);
    return DPT_OK;
}

/* backward_input of a stride-1 convolution as a direct convolution (dpt_conv_direct): with
 * dv zero-padded by p' = k - 1 - p, dx[c, ih, iw] = sum_{o, ki, kj} W'[c, (o, ki, kj)]
 * dvp[o, ih + ki, iw + kj] where W'[c, (o, ki, kj)] = W[o, c, k-1-ki, k-1-kj] (the kernel
 * flipped and its channels swapped). Needs p <= k - 1 and input rows of a multiple of 8.
 * 0 when out of memory (the caller takes the GEMM + col2im path). */
static int backward_input_direct(const dpt_layer *L, const float *w, const float *dv, float *dx, size_t B) {
    const size_t C = L->in_shape[0], k = L->k, p = L->pad, O = L->out_shape[0], Kt = O * k * k;
    float *wt = malloc(C * Kt * sizeof *wt);
    if (!wt) return 0;
    for (size_t o = 0; o < O; o++)
        for (size_t ki = 0; ki < k; ki++)
            for (size_t kj = 0; kj < k; kj++)
                for (size_t c = 0; c < C; c++)
                    wt[c * Kt + (o * k + ki) * k + kj] = w[((o * C + c) * k + (k - 1 - ki)) * k + (k - 1 - kj)];
    const int ok = direct_batch(L, O, L->out_shape[1], L->out_shape[2], k - 1 - p, C, wt, NULL, dv, L->out_dim, dx,
                                L->in_dim, B, 0);
    free(wt);
    return ok;
}

static dpt_status conv_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv,
                                      float *dx, size_t B) {
    const float *w = conv_weights(L);
    if (L->stride == 1 && L->pad + 1 <= L->k && L->in_shape[2] % 8 == 0 && backward_input_direct(L, w, dv, dx, B))
        return DPT_OK;
    const size_t O = L->out_shape[0], T = conv_T(L), Dk = conv_Dk(L), D = L->in_dim, K = L->out_dim;
    float *cols = L->scratch, *Y = L->scratch + Dk * L->chunk * T;
    /* strided: col2im_tbl with a padded accumulator per thread (col2im without the memory) */
    const size_t P = L->in_shape[0] * (L->in_shape[1] + 2 * L->pad) * (L->in_shape[2] + 2 * L->pad);
    uint32_t *tbl = L->stride > 1 ? conv_tbl(L) : NULL;
    float *dxp = tbl ? malloc((L->threads > 1 ? (size_t)L->threads : 1) * P * sizeof *dxp) : NULL;
    for (size_t lo = 0; lo < B; lo += L->chunk) {
        const size_t n = B - lo < L->chunk ? B - lo : L->chunk, nT = n * T;
        gather_out(L, dv + lo * K, n, NULL, Y);
        /* dcols [Dk, n T] = W^T [Dk, O] dY [O, n T] */
        dpt_sgemm(1, 0, Dk, nT, O, 1.0f, w, Dk, Y, nT, 0.0f, cols, nT);
        const long long nn = (long long)n;
        const int par = n * Dk * T > DPT_NN_PAR_MIN;
        if (tbl && dxp) {
#pragma omp parallel for num_threads(L->threads) if (par)
            for (long long j = 0; j < nn; j++)
                col2im_tbl(L, cols + (size_t)j * T, nT, tbl, dxp + (size_t)omp_get_thread_num() * P,
                           dx + (lo + (size_t)j) * D);
            continue;
        }
#pragma omp parallel for num_threads(L->threads) if (par)
        for (long long j = 0; j < nn; j++) col2im(L, cols + (size_t)j * T, nT, dx + (lo + (size_t)j) * D);
    }
    free(tbl);
    free(dxp);
    return DPT_OK;
}

static dpt_status conv_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx,
                           const float *dtheta, float *dv, size_t B) {
    /* dV = conv(dx; W) + conv(x; dW) + db */
    const size_t Dk = conv_Dk(L), O = L->out_shape[0];
    int acc = 0;
    const float *w = conv_weights(L);
    if (dx) {
        conv_apply(L, w, NULL, dx, dv, B, 0, 0);
        acc = 1;
    }
    if (dtheta) {
        /* standardized: the weights' tangent is dW^ = J dW */
        const float *dw = dtheta;
        if (L->wstd) {
            float *tmp = ws_tmp(L);
            memcpy(tmp, dtheta, O * Dk * sizeof *tmp);
            ws_jacobian(L, tmp);
            dw = tmp;
        }
        conv_apply(L, dw, L->has_bias ? dtheta + O * Dk : NULL, x, dv, B, acc, 0);
        acc = 1;
    }
    if (!acc) memset(dv, 0, B * L->out_dim * sizeof *dv);
    return DPT_OK;
}

/* ==== backward_params ==== */

/* out[o] (+)= sum_t dv_i[o, t] for one example */
/* out[o] (+)= sum_t dV_i[o, t]: 8 partial sums (position t into sum t mod 8, added up in a
 * fixed tree), so the loop vectorizes; one running sum was a chain of dependent scalar adds
 * (3% of resnet5's DP-SGD step at T = 1024, perf 2026-12-07). Same bits whatever the
 * thread count. */
static void bias_rows(const float *dvi, size_t O, size_t T, float *out, int accumulate) {
    const size_t T8 = T & ~(size_t)7;
    for (size_t o = 0; o < O; o++) {
        const float *r = dvi + o * T;
        float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (size_t t = 0; t < T8; t += 8)
#pragma omp simd
            for (size_t u = 0; u < 8; u++) p[u] += r[t + u];
        for (size_t t = T8; t < T; t++) p[t - T8] += r[t];
        const float s = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
        out[o] = accumulate ? out[o] + s : s;
    }
}

/* Positions from which one example's product goes through dpt_small_gemm: it stores its
 * O Dk outputs one float at a time (transposed), which a sum over fewer positions does not
 * repay (T = 25 at O 32, Dk 256 measured slower than OpenBLAS; 36, 49, 196 and 1024
 * faster, a throwaway loop over 128-256 examples, 2026-11-25). */
#define SMALL_GEMM_MIN_T 32

/* g_i [O, Dk] (+)= dV_i [O, T] U_i^T, U_i = cols [Dk, T] with row stride ldu. From
 * SMALL_GEMM_MIN_T positions on, through dvt [T, O] = dV_i^T (scratch of O T floats): as
 * g_i^T [Dk, O] = U_i dV_i^T by dpt_small_gemm (elements of U_i broadcast, rows of dvt
 * read as vectors), stored transposed into g_i. OpenBLAS packs both operands on every
 * call, which at one example's size costs as much as the product (small_gemm.c). */
static void per_example_product(const dpt_layer *L, const float *dvi, const float *Ui, size_t ldu, float *dvt,
                                float *gi, int accumulate) {
    const size_t O = L->out_shape[0], T = conv_T(L), Dk = conv_Dk(L);
    if (T < SMALL_GEMM_MIN_T) {
        dpt_sgemm(0, 1, O, Dk, T, 1.0f, dvi, T, Ui, ldu, accumulate ? 1.0f : 0.0f, gi, Dk);
        return;
    }
    for (size_t o = 0; o < O; o++)
        for (size_t t = 0; t < T; t++) dvt[t * O + o] = dvi[o * T + t];
    dpt_small_gemm(Dk, O, T, Ui, ldu, 1, dvt, O, gi, 1, Dk, accumulate);
}

/* Per-example weight gradients without the unfold (dpt_conv_pe_grad), for the convolutions
 * whose forward is direct too (direct_ok: stride 1, Wo % 8 == 0, all of resnet5's): each
 * example is zero-padded into its thread's xp and g_i read off it and dV_i in place, where
 * the unfold path wrote C k^2 T floats per example (into the cache, after a direct
 * forward), read them back and transposed dV_i. */
typedef struct {
    size_t *koff; /* [Dk] offset of patch row (c, ki, kj) in the padded example; poly: [Kq] in xq */
    float *xp;    /* [threads, P] padded examples, borders zero; poly: per thread xq | dv' | g' */
    size_t P;     /* floats of one padded example, C (H + 2p) (W + 2p); poly: of one thread's slice */
    int poly;     /* strided: through the phase images (poly_geom), g' permuted into g */
    poly_geom g;
    size_t *src;  /* poly: [Kq] poly_src of each r' */
} pe_direct;

/* 1 when d is ready (free it with pe_direct_free); 0 when the layer does not qualify or
 * memory is short (the caller takes the unfold path) */
static int pe_direct_init(const dpt_layer *L, pe_direct *d) {
    memset(d, 0, sizeof *d);
    if (!direct_ok(L)) {
        /* strided: dv' [O, Ho, Wo8] (its extra columns stay 0) and g' [O, Kq] per thread */
        if (!poly_ok(L, &d->g)) return 0;
        const size_t O = L->out_shape[0], nt = L->threads > 1 ? (size_t)L->threads : 1;
        d->poly = 1;
        d->P = d->g.Pq + O * L->out_shape[1] * d->g.Wo8 + O * d->g.Kq;
        d->koff = malloc(d->g.Kq * sizeof *d->koff);
        d->src = malloc(d->g.Kq * sizeof *d->src);
        d->xp = calloc(nt * d->P, sizeof *d->xp);
        if (!d->koff || !d->src || !d->xp) {
            free(d->koff), free(d->src), free(d->xp);
            return 0;
        }
        poly_koff(&d->g, d->koff);
        for (size_t r = 0; r < d->g.Kq; r++) d->src[r] = poly_src(L, &d->g, r);
        return 1;
    }
    const size_t C = L->in_shape[0], k = L->k, Hp = L->in_shape[1] + 2 * L->pad, Wp = L->in_shape[2] + 2 * L->pad;
    const size_t nt = L->threads > 1 ? (size_t)L->threads : 1;
    d->P = C * Hp * Wp;
    d->koff = malloc(conv_Dk(L) * sizeof *d->koff);
    d->xp = calloc(nt * d->P, sizeof *d->xp);
    if (!d->koff || !d->xp) {
        free(d->koff);
        free(d->xp);
        return 0;
    }
    for (size_t c = 0; c < C; c++)
        for (size_t ki = 0; ki < k; ki++)
            for (size_t kj = 0; kj < k; kj++) d->koff[(c * k + ki) * k + kj] = (c * Hp + ki) * Wp + kj;
    return 1;
}

static void pe_direct_free(pe_direct *d) {
    free(d->src);
    free(d->koff);
    free(d->xp);
}

/* g_i [O, Dk] (+)= dV_i U_i^T for example x_i on thread tid */
static void pe_direct_example(const dpt_layer *L, const pe_direct *d, int tid, const float *xi, const float *dvi,
                              float *gi, int accumulate) {
    const size_t p = L->pad, Wp = L->in_shape[2] + 2 * p;
    float *xp = d->xp + (size_t)tid * d->P;
    if (d->poly) {
        /* g' = dV' U'^T over the phases, then g[o, src(r')] = g'[o, r'] (each (ki, kj) is
         * exactly one r'; the r' of zero weights are dropped) */
        const poly_geom *g = &d->g;
        const size_t O = L->out_shape[0], Ho = L->out_shape[1], Wo = L->out_shape[2], Dk = conv_Dk(L);
        float *dvp = xp + g->Pq, *gq = dvp + O * Ho * g->Wo8;
        poly_split(L, g, xi, xp);
        for (size_t r = 0; r < O * Ho; r++)
            for (size_t c = 0; c < Wo; c++) dvp[r * g->Wo8 + c] = dvi[r * Wo + c];
        dpt_conv_pe_grad(O, g->Kq, Ho, g->Wo8, g->Wq, d->koff, xp, dvp, gq, 0);
        for (size_t o = 0; o < O; o++)
            for (size_t r = 0; r < g->Kq; r++) {
                const size_t j = d->src[r];
                if (j == Dk) continue;
                gi[o * Dk + j] = accumulate ? gi[o * Dk + j] + gq[o * g->Kq + r] : gq[o * g->Kq + r];
            }
        return;
    }
    pad_into(xp, xi, L->in_shape[0], L->in_shape[1], L->in_shape[2], p);
    dpt_conv_pe_grad(L->out_shape[0], conv_Dk(L), L->out_shape[1], L->out_shape[2], Wp, d->koff, xp, dvi, gi,
                     accumulate);
}

static dpt_status conv_backward_params(const dpt_layer *L, const float *x, const float *dv, size_t B,
                                       dpt_grad_mode mode, const float *weights, float *out, size_t ld,
                                       int accumulate) {
    const size_t O = L->out_shape[0], T = conv_T(L), Dk = conv_Dk(L), K = L->out_dim;
    const size_t ODk = O * Dk;
    float *Y = L->scratch + Dk * L->chunk * T, *aux = Y + O * L->chunk * T;
    /* the materialized per-example products read the padded examples in place when they
     * can; only the other modes (or a layer that cannot) need the unfold */
    DPT_CHECK(mode != DPT_GRAD_PER_EXAMPLE || ld >= L->n_params, DPT_EINVAL,
              "%s: per-example row stride %zu < %zu parameters", L->name, ld, L->n_params);
    pe_direct pd;
    const int direct = (mode == DPT_GRAD_PER_EXAMPLE || (mode == DPT_GRAD_SQNORM && !L->ghost)) &&
                       pe_direct_init(L, &pd);
    const int hit = !direct && (cache_hit(L, x, B) || fill_pending(L, x, B));
    const size_t D = L->in_dim;
    dpt_status st = DPT_OK;
    switch (mode) {
    case DPT_GRAD_SUM:
    case DPT_GRAD_WEIGHTED: {
        DPT_CHECK(mode == DPT_GRAD_SUM || weights, DPT_EINVAL, "%s: weighted gradient needs weights", L->name);
        const float *wts = mode == DPT_GRAD_WEIGHTED ? weights : NULL;
        if (!accumulate) memset(out, 0, L->n_params * sizeof *out);
        /* standardized: the sum with respect to W^ first, then J once (it is linear and the
         * same for every example: sum_i w_i J g^_i = J sum_i w_i g^_i) */
        float *dw = out;
        if (L->wstd) {
            (void)conv_weights(L);
            dw = ws_tmp(L);
            memset(dw, 0, ODk * sizeof *dw);
        }
        for (size_t lo = 0; lo < B; lo += L->chunk) {
            const size_t n = B - lo < L->chunk ? B - lo : L->chunk, nT = n * T;
            const float *cols = chunk_cols(L, x, lo, n, hit);
            gather_out(L, dv + lo * K, n, wts ? wts + lo : NULL, Y);
            /* dW [O, Dk] += dY_w [O, n T] cols^T [n T, Dk]: one GEMM per chunk */
            dpt_sgemm(0, 1, O, Dk, nT, 1.0f, Y, nT, cols, nT, 1.0f, dw, Dk);
            /* db += row sums of dY_w */
            if (L->has_bias) bias_rows(Y, O, nT, out + ODk, 1);
        }
        if (L->wstd) {
            ws_jacobian(L, dw);
            for (size_t e = 0; e < ODk; e++) out[e] += dw[e];
        }
        return DPT_OK;
    }
    case DPT_GRAD_PER_EXAMPLE:
        if (L->wstd) (void)conv_weights(L);
        if (L->wstd && accumulate) {
            /* g_i (+)= J g^_i: g^_i formed in aux, one example at a time */
            for (size_t lo = 0; lo < B; lo += L->chunk) {
                const size_t n = B - lo < L->chunk ? B - lo : L->chunk, nT = n * T;
                const float *cols = direct ? NULL : chunk_cols(L, x, lo, n, hit);
                for (size_t j = 0; j < n; j++) {
                    const float *dvi = dv + (lo + j) * K;
                    float *gi = out + (lo + j) * ld;
                    if (direct) pe_direct_example(L, &pd, 0, x + (lo + j) * D, dvi, aux, 0);
                    else per_example_product(L, dvi, cols + j * T, nT, Y, aux, 0);
                    ws_jacobian(L, aux);
                    for (size_t e = 0; e < ODk; e++) gi[e] += aux[e];
                    if (L->has_bias) bias_rows(dvi, O, T, gi + ODk, 1);
                }
            }
            break;
        }
        for (size_t lo = 0; lo < B; lo += L->chunk) {
            const size_t n = B - lo < L->chunk ? B - lo : L->chunk, nT = n * T;
            const float *cols = direct ? NULL : chunk_cols(L, x, lo, n, hit);
            const long long nn = (long long)n;
            /* each example on one thread, its dV_i^T in its own [T, O] slice of Y (direct:
             * its padded copy in its own slice of pd.xp); below SMALL_GEMM_MIN_T positions
             * the products are OpenBLAS calls, which thread themselves, so the loop stays
             * serial */
#pragma omp parallel for num_threads(L->threads) if ((direct || T >= SMALL_GEMM_MIN_T) && n * ODk * T > DPT_NN_PAR_MIN)
            for (long long jj = 0; jj < nn; jj++) {
                const size_t j = (size_t)jj;
                const float *dvi = dv + (lo + j) * K;
                float *gi = out + (lo + j) * ld;
                if (direct) pe_direct_example(L, &pd, omp_get_thread_num(), x + (lo + j) * D, dvi, gi, accumulate);
                else per_example_product(L, dvi, cols + j * T, nT, Y + j * O * T, gi, accumulate);
                if (L->wstd) ws_jacobian(L, gi); /* g_i = J g^_i in place (accumulate is 0 here) */
                if (L->has_bias) bias_rows(dvi, O, T, gi + ODk, accumulate);
            }
        }
        break;
    case DPT_GRAD_SQNORM:
        /* standardized layers never take the Gram path (L->ghost = 0, set by
         * dpt_layer_conv_set_ws): ||J g^_i||^2 needs w^_o^T g^_{i,o} = <(W^ U_i)_o, dv_{i,o}>,
         * a forward pass per example (O Dk T), which is what materializing g^_i costs */
        if (L->wstd) (void)conv_weights(L);
        for (size_t lo = 0; lo < B; lo += L->chunk) {
            const size_t n = B - lo < L->chunk ? B - lo : L->chunk, nT = n * T;
            const float *cols = direct ? NULL : chunk_cols(L, x, lo, n, hit);
            for (size_t j = 0; j < n; j++) {
                const float *dvi = dv + (lo + j) * K;
                const float *Ui = direct ? NULL : cols + j * T;
                double s = 0.0;
                if (L->ghost) {
                    /* <U_i^T U_i, dV_i^T dV_i>_F: two T x T Gram matrices */
                    float *Gu = aux, *Gv = aux + T * T;
                    dpt_sgemm(1, 0, T, T, Dk, 1.0f, Ui, nT, Ui, nT, 0.0f, Gu, T);
                    dpt_sgemm(1, 0, T, T, O, 1.0f, dvi, T, dvi, T, 0.0f, Gv, T);
                    for (size_t e = 0; e < T * T; e++) s += (double)Gu[e] * Gv[e];
                } else {
                    /* g_i = dV_i U_i^T [O, Dk], then its squared entries */
                    if (direct) pe_direct_example(L, &pd, 0, x + (lo + j) * D, dvi, aux, 0);
                    else per_example_product(L, dvi, Ui, nT, Y, aux, 0);
                    if (L->wstd) ws_jacobian(L, aux);
                    s = dpt_sqnorm_double(aux, ODk);
                }
                if (L->has_bias)
                    for (size_t o = 0; o < O; o++) {
                        double r = 0.0;
                        for (size_t t = 0; t < T; t++) r += dvi[o * T + t];
                        s += r * r;
                    }
                if (s < 0.0) s = 0.0; /* a Gram product can round below 0 for a zero gradient */
                out[lo + j] = accumulate ? (float)((double)out[lo + j] + s) : (float)s;
            }
        }
        break;
    case DPT_GRAD_DOT: {
        DPT_CHECK(weights, DPT_EINVAL, "%s: inner products need a vector", L->name);
        /* <dV_i U_i^T, V_w> + <dV_i 1, v_b> = <dV_i, V_w U_i + v_b 1^T>_F: one GEMM per chunk
         * (the cost of a forward), then the dot products in double */
        const float *vb = L->has_bias ? weights + ODk : NULL;
        const float *vw = weights;
        if (L->wstd) { /* <J g^_i, V_w> = <g^_i, J V_w> (J symmetric) */
            (void)conv_weights(L);
            float *tmp = ws_tmp(L);
            memcpy(tmp, weights, ODk * sizeof *tmp);
            ws_jacobian(L, tmp);
            vw = tmp;
        }
        for (size_t lo = 0; lo < B; lo += L->chunk) {
            const size_t n = B - lo < L->chunk ? B - lo : L->chunk, nT = n * T;
            const float *cols = chunk_cols(L, x, lo, n, hit);
            /* Y [O, n T] = V_w [O, Dk] cols [Dk, n T] */
            dpt_sgemm(0, 0, O, nT, Dk, 1.0f, vw, Dk, cols, nT, 0.0f, Y, nT);
            for (size_t j = 0; j < n; j++) {
                const float *dvi = dv + (lo + j) * K;
                double s = 0.0;
                for (size_t o = 0; o < O; o++) {
                    const float *yo = Y + o * nT + j * T, *dvo = dvi + o * T;
                    const double bo = vb ? vb[o] : 0.0;
                    double so = 0.0;
#pragma omp simd reduction(+ : so)
                    for (size_t t = 0; t < T; t++) so += (double)dvo[t] * ((double)yo[t] + bo);
                    s += so;
                }
                out[lo + j] = accumulate ? (float)((double)out[lo + j] + s) : (float)s;
            }
        }
        return DPT_OK;
    }
    default:
        st = dpt_set_error(DPT_EINVAL, "%s: unknown gradient mode %d", L->name, (int)mode);
    }
    if (direct) pe_direct_free(&pd);
    return st;
}

/* ==== tensor table ==== */

static size_t conv_n_tensors(const dpt_layer *L) { return L->has_bias ? 2 : 1; }

static void conv_tensor(const dpt_layer *L, size_t j, dpt_param_tensor *t) {
    memset(t, 0, sizeof *t);
    const size_t O = L->out_shape[0], Dk = conv_Dk(L);
    if (j == 0) {
        snprintf(t->name, sizeof t->name, "%s.weight", L->name);
        t->ndim = 4;
        t->shape[0] = O;
        t->shape[1] = L->in_shape[0];
        t->shape[2] = t->shape[3] = L->k;
        t->offset = L->param_offset;
        t->size = O * Dk;
        t->role = DPT_TENSOR_WEIGHT;
    } else {
        DPT_ASSERT(j == 1 && L->has_bias);
        snprintf(t->name, sizeof t->name, "%s.bias", L->name);
        t->ndim = 1;
        t->shape[0] = O;
        t->offset = L->param_offset + O * Dk;
        t->size = O;
        t->role = DPT_TENSOR_BIAS;
    }
}

static const dpt_layer_ops conv_ops = {
    conv_forward, conv_backward_input, conv_backward_params, conv_jvp, conv_n_tensors, conv_tensor, NULL, NULL, NULL,
};

dpt_status dpt_layer_conv_setup(dpt_layer *L, const size_t in_shape[3], size_t O, size_t k, size_t stride,
                                size_t pad, int has_bias, size_t max_batch) {
    const size_t C = in_shape[0], H = in_shape[1], W = in_shape[2];
    DPT_CHECK(O >= 1 && k >= 1 && stride >= 1, DPT_EINVAL,
              "conv: channels, kernel and stride must be >= 1 (got %zu, %zu, %zu)", O, k, stride);
    DPT_CHECK(k <= 64 && pad < k, DPT_EINVAL, "conv: kernel %zu must be <= 64 and padding %zu < kernel", k, pad);
    DPT_CHECK(H + 2 * pad >= k && W + 2 * pad >= k, DPT_EINVAL,
              "conv: kernel %zu does not fit the padded %zux%zu input (padding %zu)", k, H, W, pad);
    L->kind = DPT_LAYER_CONV2D;
    L->ops = &conv_ops;
    L->k = k;
    L->stride = stride;
    L->pad = pad;
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    L->out_shape[0] = O;
    L->out_shape[1] = (H + 2 * pad - k) / stride + 1;
    L->out_shape[2] = (W + 2 * pad - k) / stride + 1;
    L->in_dim = C * H * W;
    L->out_dim = O * L->out_shape[1] * L->out_shape[2];
    L->has_bias = has_bias;
    const size_t T = conv_T(L), Dk = conv_Dk(L);
    L->n_params = O * Dk + (has_bias ? O : 0);
    /* ghost when the two Gram matrices cost less to form than the gradient itself */
    L->ghost = T * (Dk + O) < O * Dk;
    size_t per = (Dk + O) * T, chunk = CONV_CHUNK_FLOATS / per;
    if (chunk < 1) chunk = 1;
    if (chunk > max_batch) chunk = max_batch;
    L->chunk = chunk;
    const size_t aux = 2 * T * T > O * Dk ? 2 * T * T : O * Dk;
    L->scratch_need = chunk * per + aux;
    return DPT_OK;
}

void dpt_layer_conv_set_ws(dpt_layer *L) {
    DPT_ASSERT(L->kind == DPT_LAYER_CONV2D);
    L->wstd = 1;
    L->ghost = 0; /* see SQNORM */
    L->scratch_need = ws_offset(L) + 2 * L->out_shape[0] * conv_Dk(L) + L->out_shape[0];
}
