/* Losses over outputs o [B, K]: per-example loss[i] and dout[i, :] = d loss_i / d o_i
 * (not divided by B). Sums run in double (the softmax's exponentials in float, see
 * softmax_ce_rows). NaN in o propagates into the results (the caller
 * checks with dpt_all_finite); a label out of range is DPT_EINVAL. Built twice on x86-64
 * (core/isa.h): baseline and x86-64-v3 (loss_v3.c; the same bits, fmaf exactly rounded). */
#include "nn_internal.h"
#include "fastmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* log(1 + e^x) without overflow: max(x, 0) + log1p(e^{-|x|}) */
static double softplus(double x) { return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x))); }

/* ==== softmax cross-entropy ==== */

/* Rows are done in blocks so the exponentials of a whole block run as one vectorized loop
 * (a row of 10 classes alone is one 8-wide vector and a scalar remainder: the remainder's
 * latency-bound exp was most of a row's time). */
#define CE_ROWS 64    /* rows per block */
#define CE_BUF 2048   /* floats of the stack block for the exponentials (loss values only) */

/* nb <= CE_ROWS rows of o [nb, K] with labels y; e [nb, K] receives the gradients (when
 * grad) or is scratch. Per row, with m = max o (first at index a): e_k = e^(o_k - m) in
 * (0, 1] from the vectorized float exp_neg (~1 ulp; terms below e^-87.3 of the largest
 * count as 0), e_a = 1, and r = sum_{k != a} e_k in double, so s = sum_k e_k = 1 + r.
 * loss = logsumexp(o) - o_y = (m - o_y) + log1p(r); d_k = e_k / s - [k = y], the label's
 * entry as -(sum_{k != y} e_k) / s = -(r + (1 - e_y)) / s. Summing r apart from the 1 keeps
 * a confident row's small loss and gradient accurate (adding each tiny e_k to 1 would round
 * every time; 1 - p_y would lose them outright). Every row runs the same operations
 * wherever it sits (the exp loop's vector body and remainder agree bit for bit), and the
 * same as softmax_ce_values, so a loss is the same with or without its gradient.
 * Accuracy against a double (long double) reference: the loss within 2e-7 of max(1, loss)
 * (tested; bench/act_kernels measures ~7e-8 on 4096 random rows of scale 4), gradients
 * within ~1e-6 relative plus 1.2e-7 per unit of the logit's gap below the max (tested). */
static void softmax_ce_rows(const float *o, size_t nb, size_t K, const int32_t *y, float *loss, float *e,
                            int grad) {
    float mx[CE_ROWS];
    size_t am[CE_ROWS];
    for (size_t i = 0; i < nb; i++) {
        const float *oi = o + i * K;
        /* branch-free (random logits mispredict a branchy arg-max): the max, NaN if any
         * logit is NaN, then its first index */
        float m = oi[0];
        int nan = 0;
        for (size_t k = 1; k < K; k++) {
            m = oi[k] > m ? oi[k] : m;
            nan |= oi[k] != oi[k];
        }
        m = nan ? NAN : m;
        size_t a = 0;
        for (size_t k = K; k-- > 1;) a = oi[k] == m ? k : a;
        mx[i] = m, am[i] = a;
        float *ei = e + i * K;
#pragma omp simd
        for (size_t k = 0; k < K; k++) ei[k] = oi[k] - m;
    }
    const size_t n = nb * K;
#pragma omp simd
    for (size_t j = 0; j < n; j++) e[j] = exp_neg(e[j]);
    for (size_t i = 0; i < nb; i++) {
        float *ei = e + i * K;
        const size_t a = am[i];
        double r = 0.0; /* in order of k, as softmax_ce_values: the same bits with or without d */
        for (size_t k = 0; k < K; k++) r += sel(k == a, 0.0f, ei[k]);
        /* a NaN (or +inf: inf - inf) logit makes every e_k NaN, r with them (K = 1: m - o_y) */
        if (loss) loss[i] = (float)(((double)mx[i] - (double)o[i * K + y[i]]) + log1p(r));
        if (grad) {
            const double ea = ei[a], s = ea + r, others = r + (ea - (double)ei[y[i]]);
            for (size_t k = 0; k < K; k++) ei[k] = (float)((double)ei[k] / s);
            ei[y[i]] = (float)(-others / s);
        }
    }
}

/* Loss values only (no gradient) for K <= CE_LANE_K classes, 8 rows at a time with the rows
 * in vector lanes (a row of 10 classes is too short to vectorize on its own, and DP-ULR asks
 * for tens of thousands of such rows per step): the same formula and order of operations as softmax_ce_rows, m and
 * its first index a per lane, r = sum_{k != a} e_k in double, loss = (m - o_y) + log1p(r).
 * Every lane runs the same operations whatever its position, so a row's loss does not
 * depend on which rows share its block. */
#define CE_LANES 8
#define CE_LANE_K 32
static void softmax_ce_values(const float *o, size_t B, size_t K, const int32_t *y, float *loss) {
    float t[CE_LANE_K][CE_LANES], mx[CE_LANES];
    int32_t am[CE_LANES];
    double r[CE_LANES];
    for (size_t i0 = 0; i0 < B; i0 += CE_LANES) {
        const size_t nb = B - i0 < CE_LANES ? B - i0 : CE_LANES;
        for (size_t k = 0; k < K; k++)
            for (size_t j = 0; j < CE_LANES; j++) t[k][j] = j < nb ? o[(i0 + j) * K + k] : 0.0f;
#pragma omp simd
        for (size_t j = 0; j < CE_LANES; j++) {
            mx[j] = t[0][j];
            am[j] = 0;
            r[j] = 0.0;
        }
        for (size_t k = 1; k < K; k++) {
#pragma omp simd
            for (size_t j = 0; j < CE_LANES; j++) {
                const float v = t[k][j];
                const int c = v > mx[j] || v != v; /* a NaN becomes the max and spreads */
                mx[j] = sel(c, v, mx[j]);
                am[j] = c ? (int32_t)k : am[j];
            }
        }
        for (size_t k = 0; k < K; k++) {
#pragma omp simd
            for (size_t j = 0; j < CE_LANES; j++) r[j] += sel(am[j] == (int32_t)k, 0.0f, exp_neg(t[k][j] - mx[j]));
        }
        for (size_t j = 0; j < nb; j++) {
            const size_t i = i0 + j;
            loss[i] = (float)(((double)mx[j] - (double)o[i * K + (size_t)y[i]]) + log1p(r[j]));
        }
    }
}

/* ==== sigmoid binary cross-entropy ==== */

/* BCE(sigmoid(o), t) = softplus(o) - t o; derivative sigmoid(o) - t */
static void bce_one(float o, double t, double *l, float *d) {
    *l += softplus(o) - t * o;
    if (d) {
        double e = exp(-fabs((double)o));
        double sg = o >= 0.0f ? 1.0 / (1.0 + e) : e / (1.0 + e);
        if (isnan(o)) sg = o;
        *d = (float)(sg - t);
    }
}

dpt_status DPT_ISA_NAME(dpt_loss)(dpt_loss_kind kind, const float *o, size_t B, size_t K, const int32_t *labels,
                                  const float *targets, float *loss, float *dout) {
    DPT_CHECK(o || B == 0, DPT_EINVAL, "loss: NULL output");
    DPT_CHECK(K >= 1, DPT_EINVAL, "loss: output width must be at least 1");
    switch (kind) {
    case DPT_LOSS_SOFTMAX_CE:
        DPT_CHECK(labels || B == 0, DPT_EINVAL, "cross-entropy loss needs labels");
        for (size_t i = 0; i < B; i++)
            DPT_CHECK(labels[i] >= 0 && (size_t)labels[i] < K, DPT_EINVAL,
                      "cross-entropy loss: label %d of example %zu outside 0..%zu", (int)labels[i], i, K - 1);
        if (!dout && K <= CE_LANE_K) {
            if (loss) softmax_ce_values(o, B, K, labels, loss);
            return DPT_OK;
        }
        if (dout) {
            for (size_t i = 0; i < B; i += CE_ROWS) {
                const size_t nb = B - i < CE_ROWS ? B - i : CE_ROWS;
                softmax_ce_rows(o + i * K, nb, K, labels + i, loss ? loss + i : NULL, dout + i * K, 1);
            }
        } else if (loss) {
            float buf[CE_BUF], *e = buf;
            if (K > CE_BUF) {
                e = calloc(K, sizeof *e);
                DPT_CHECK(e, DPT_ENOMEM, "cross-entropy loss: out of memory for %zu classes", K);
            }
            const size_t rows = K > CE_BUF ? 1 : (CE_BUF / K < CE_ROWS ? CE_BUF / K : CE_ROWS);
            for (size_t i = 0; i < B; i += rows) {
                const size_t nb = B - i < rows ? B - i : rows;
                softmax_ce_rows(o + i * K, nb, K, labels + i, loss + i, e, 0);
            }
            if (e != buf) free(e);
        }
        return DPT_OK;
    case DPT_LOSS_SIGMOID_BCE: {
        DPT_CHECK(labels || B == 0, DPT_EINVAL, "binary cross-entropy loss needs labels");
        const size_t ny = K == 1 ? 2 : K; /* K = 1: y in {0, 1}; K > 1: one-vs-all, y in 0..K-1 */
        for (size_t i = 0; i < B; i++)
            DPT_CHECK(labels[i] >= 0 && (size_t)labels[i] < ny, DPT_EINVAL,
                      "binary cross-entropy loss: label %d of example %zu outside 0..%zu", (int)labels[i], i, ny - 1);
        for (size_t i = 0; i < B; i++) {
            double l = 0.0;
            for (size_t k = 0; k < K; k++) {
                double t = K == 1 ? (double)labels[i] : (labels[i] == (int32_t)k ? 1.0 : 0.0);
                bce_one(o[i * K + k], t, &l, dout ? dout + i * K + k : NULL);
            }
            if (loss) loss[i] = (float)l;
        }
        return DPT_OK;
    }
    case DPT_LOSS_TOKEN_CE:
        return dpt_set_error(DPT_EINVAL, "token cross-entropy loss: the number of positions is not known here: call "
                                         "dpt_loss_tokens");
    case DPT_LOSS_SQUARED:
        DPT_CHECK(targets || B == 0, DPT_EINVAL, "squared-error loss needs targets");
        for (size_t i = 0; i < B; i++) {
            double l = 0.0;
            for (size_t k = 0; k < K; k++) {
                double r = (double)o[i * K + k] - targets[i * K + k];
                l += 0.5 * r * r;
                if (dout) dout[i * K + k] = (float)r;
            }
            if (loss) loss[i] = (float)l;
        }
        return DPT_OK;
    }
    return dpt_set_error(DPT_EINVAL, "loss: unknown kind %d", (int)kind);
}

#if DPT_ISA_DISPATCH && !DPT_ISA_V3_TU
dpt_status dpt_loss(dpt_loss_kind kind, const float *o, size_t B, size_t K, const int32_t *labels,
                    const float *targets, float *loss, float *dout) {
    return (dpt_isa_v3() ? dpt_loss_v3 : dpt_loss_base)(kind, o, B, K, labels, targets, loss, dout);
}
#endif

#if !DPT_ISA_V3_TU
/* ==== per-token cross-entropy ==== */

/* Each example's T rows of V logits through the softmax cross-entropy above (dpt_loss, in
 * blocks of TOK_ROWS positions with their labels on the stack: no allocation), then the
 * mean over its n_i counted positions: loss_i = (1/n_i) sum_t l_t in double, dout rows
 * scaled by 1/n_i. Positions whose target is pad_id are not counted (their rows go through
 * the softmax with label 0 and are then zeroed), so n_i = T without padding. */
#define TOK_ROWS 256
dpt_status dpt_loss_tokens_pad(const float *o, size_t B, size_t T, size_t V, const float *targets, long long pad_id,
                               float *loss, float *dout) {
    DPT_CHECK(T >= 1 && V >= 1, DPT_EINVAL, "token cross-entropy loss: %s is 0", T ? "the vocabulary" : "T");
    DPT_CHECK(targets || B == 0, DPT_EINVAL, "token cross-entropy loss needs targets (the token ids)");
    int32_t lab[TOK_ROWS];
    float lrow[TOK_ROWS];
    unsigned char skip[TOK_ROWS];
    const float pad = pad_id >= 0 ? (float)pad_id : -1.0f;
    for (size_t i = 0; i < B; i++) {
        double s = 0.0;
        size_t n_i = 0;
        for (size_t t0 = 0; t0 < T; t0 += TOK_ROWS) {
            const size_t n = T - t0 < TOK_ROWS ? T - t0 : TOK_ROWS;
            for (size_t t = 0; t < n; t++) {
                const float y = targets[i * T + t0 + t];
                skip[t] = pad_id >= 0 && y == pad;
                DPT_CHECK(skip[t] || (y >= 0.0f && y < (float)V && y == floorf(y)), DPT_EINVAL, /* NaN fails too */
                          "token cross-entropy loss: target %g of example %zu, position %zu is not a token id in "
                          "[0, %zu)", (double)y, i, t0 + t, V);
                lab[t] = skip[t] ? 0 : (int32_t)y;
            }
            const size_t r = i * T + t0; /* first row */
            DPT_TRY(dpt_loss(DPT_LOSS_SOFTMAX_CE, o + r * V, n, V, lab, NULL, lrow, dout ? dout + r * V : NULL));
            for (size_t t = 0; t < n; t++) {
                if (skip[t]) {
                    if (dout) memset(dout + (r + t) * V, 0, V * sizeof *dout);
                    continue;
                }
                s += lrow[t];
                n_i++;
            }
        }
        if (loss) loss[i] = n_i ? (float)(s / (double)n_i) : 0.0f;
        if (dout && n_i) {
            const float inv = 1.0f / (float)n_i;
            for (size_t j = i * T * V; j < (i + 1) * T * V; j++) dout[j] *= inv;
        }
    }
    return DPT_OK;
}

dpt_status dpt_loss_tokens(const float *o, size_t B, size_t T, size_t V, const float *targets, float *loss,
                           float *dout) {
    return dpt_loss_tokens_pad(o, B, T, V, targets, -1, loss, dout);
}

dpt_status dpt_loss_parse(const char *s, dpt_loss_kind *out) {
    static const struct {
        const char *name;
        dpt_loss_kind v;
    } t[] = {{"ce", DPT_LOSS_SOFTMAX_CE},         {"softmax-ce", DPT_LOSS_SOFTMAX_CE},
             {"softmax_ce", DPT_LOSS_SOFTMAX_CE}, {"cross-entropy", DPT_LOSS_SOFTMAX_CE},
             {"bce", DPT_LOSS_SIGMOID_BCE},       {"sigmoid-bce", DPT_LOSS_SIGMOID_BCE},
             {"sigmoid_bce", DPT_LOSS_SIGMOID_BCE}, {"binary-cross-entropy", DPT_LOSS_SIGMOID_BCE},
             {"mse", DPT_LOSS_SQUARED},           {"squared", DPT_LOSS_SQUARED},
             {"squared-error", DPT_LOSS_SQUARED}, {"squared_error", DPT_LOSS_SQUARED},
             {"token-ce", DPT_LOSS_TOKEN_CE},     {"token_ce", DPT_LOSS_TOKEN_CE}};
    DPT_CHECK(s && out, DPT_EINVAL, "loss: NULL argument");
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(s, t[i].name)) {
            *out = t[i].v;
            return DPT_OK;
        }
    return dpt_set_error(DPT_EINVAL, "unknown loss '%s' (expected ce|bce|mse|token-ce)", s);
}
#endif
