/* Losses over outputs o [B, K]: per-example loss[i] and dout[i, :] = d loss_i / d o_i
 * (not divided by B). Sums run in double. NaN in o propagates into the results (the caller
 * checks with dpt_all_finite); a label out of range is DPT_EINVAL. */
#include "nn_internal.h"

#include <math.h>
#include <string.h>

/* log(1 + e^x) without overflow: max(x, 0) + log1p(e^{-|x|}) */
static double softplus(double x) { return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x))); }

/* ==== softmax cross-entropy ==== */

static void softmax_ce_row(const float *o, size_t K, int32_t y, float *loss, float *d) {
    /* loss = logsumexp(o) - o_y, computed as m + log sum exp(o - m) with m = max o */
    double mx = o[0];
    for (size_t k = 1; k < K; k++)
        if (o[k] > mx || isnan(o[k])) mx = o[k];
    double s = 0.0;
    for (size_t k = 0; k < K; k++) s += exp((double)o[k] - mx);
    if (loss) loss[0] = (float)(mx + log(s) - (double)o[y]);
    if (d)
        for (size_t k = 0; k < K; k++) d[k] = (float)(exp((double)o[k] - mx) / s - (k == (size_t)y ? 1.0 : 0.0));
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

dpt_status dpt_loss(dpt_loss_kind kind, const float *o, size_t B, size_t K, const int32_t *labels,
                    const float *targets, float *loss, float *dout) {
    DPT_CHECK(o || B == 0, DPT_EINVAL, "loss: NULL output");
    DPT_CHECK(K >= 1, DPT_EINVAL, "loss: output width must be at least 1");
    switch (kind) {
    case DPT_LOSS_SOFTMAX_CE:
        DPT_CHECK(labels || B == 0, DPT_EINVAL, "cross-entropy loss needs labels");
        for (size_t i = 0; i < B; i++)
            DPT_CHECK(labels[i] >= 0 && (size_t)labels[i] < K, DPT_EINVAL,
                      "cross-entropy loss: label %d of example %zu outside 0..%zu", (int)labels[i], i, K - 1);
        for (size_t i = 0; i < B; i++)
            softmax_ce_row(o + i * K, K, labels[i], loss ? loss + i : NULL, dout ? dout + i * K : NULL);
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

dpt_status dpt_loss_parse(const char *s, dpt_loss_kind *out) {
    static const struct {
        const char *name;
        dpt_loss_kind v;
    } t[] = {{"ce", DPT_LOSS_SOFTMAX_CE},         {"softmax-ce", DPT_LOSS_SOFTMAX_CE},
             {"softmax_ce", DPT_LOSS_SOFTMAX_CE}, {"cross-entropy", DPT_LOSS_SOFTMAX_CE},
             {"bce", DPT_LOSS_SIGMOID_BCE},       {"sigmoid-bce", DPT_LOSS_SIGMOID_BCE},
             {"sigmoid_bce", DPT_LOSS_SIGMOID_BCE}, {"binary-cross-entropy", DPT_LOSS_SIGMOID_BCE},
             {"mse", DPT_LOSS_SQUARED},           {"squared", DPT_LOSS_SQUARED},
             {"squared-error", DPT_LOSS_SQUARED}, {"squared_error", DPT_LOSS_SQUARED}};
    DPT_CHECK(s && out, DPT_EINVAL, "loss: NULL argument");
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(s, t[i].name)) {
            *out = t[i].v;
            return DPT_OK;
        }
    return dpt_set_error(DPT_EINVAL, "unknown loss '%s' (expected ce|bce|mse)", s);
}
