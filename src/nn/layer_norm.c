/* GroupNorm (Wu & He 2018): per example i and group g of Cg = C / G channels,
 *   xhat = (x - mu_ig) / sqrt(var_ig + eps),  v[c] = gamma_c xhat[c] + beta_c
 * with mu, var over the Cg H W values of the group (population variance). Statistics are
 * per example, so an example's output never depends on another's: unlike BatchNorm this
 * is compatible with per-example clipping. Channel-major layout makes each group a
 * contiguous run of n = Cg H W floats. Parameters: gamma [C] (a scale, starts at 1), then
 * beta [C]. Per-example gradients: dgamma_i[c] = sum_hw dv xhat, dbeta_i[c] = sum_hw dv
 * (2C numbers per example: every mode computes them, then sums, weights or squares them). */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GN_EPS 1e-5

/* mean and 1/sqrt(var + eps) of x[0..n) in double */
static void stats(const float *x, size_t n, double *mu, double *rstd) {
    double s = 0.0, s2 = 0.0;
    for (size_t j = 0; j < n; j++) s += x[j];
    const double m = s / (double)n;
    for (size_t j = 0; j < n; j++) s2 += ((double)x[j] - m) * ((double)x[j] - m);
    *mu = m;
    *rstd = 1.0 / sqrt(s2 / (double)n + GN_EPS);
}

static dpt_status gn_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const size_t C = L->in_shape[0], HW = L->in_shape[1] * L->in_shape[2], G = L->groups, Cg = C / G;
    const size_t D = L->in_dim, n = Cg * HW;
    const float *gamma = L->w, *beta = L->w + C;
    for (size_t i = 0; i < B; i++)
        for (size_t g = 0; g < G; g++) {
            const float *xg = x + i * D + g * n;
            float *vg = v + i * D + g * n;
            double mu, rs;
            stats(xg, n, &mu, &rs);
            for (size_t c = 0; c < Cg; c++) {
                const size_t ch = g * Cg + c;
                for (size_t t = 0; t < HW; t++)
                    vg[c * HW + t] = (float)(((double)xg[c * HW + t] - mu) * rs) * gamma[ch] + beta[ch];
            }
        }
    return DPT_OK;
}

/* dx of one group: rstd (u - mean(u) - xhat mean(u xhat)) with u = dv gamma (backward) or
 * u = t (jvp, where the map is the same symmetric projection). */
static void gn_group_back(const float *xg, const float *u, size_t n, float *dxg) {
    double mu, rs;
    stats(xg, n, &mu, &rs);
    double su = 0.0, sux = 0.0;
    for (size_t j = 0; j < n; j++) {
        const double xh = ((double)xg[j] - mu) * rs;
        su += u[j];
        sux += u[j] * xh;
    }
    su /= (double)n;
    sux /= (double)n;
    for (size_t j = 0; j < n; j++) {
        const double xh = ((double)xg[j] - mu) * rs;
        dxg[j] = (float)(rs * ((double)u[j] - su - xh * sux));
    }
}

static dpt_status gn_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv,
                                    float *dx, size_t B) {
    const size_t C = L->in_shape[0], HW = L->in_shape[1] * L->in_shape[2], G = L->groups, Cg = C / G;
    const size_t D = L->in_dim, n = Cg * HW;
    float *u = L->scratch; /* [n]: the group's dv gamma */
    for (size_t i = 0; i < B; i++)
        for (size_t g = 0; g < G; g++) {
            const float *dvg = dv + i * D + g * n;
            for (size_t c = 0; c < Cg; c++)
                for (size_t t = 0; t < HW; t++) u[c * HW + t] = dvg[c * HW + t] * L->w[g * Cg + c];
            gn_group_back(x + i * D + g * n, u, n, dx + i * D + g * n);
        }
    return DPT_OK;
}

static dpt_status gn_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx,
                         const float *dtheta, float *dv, size_t B) {
    /* dv = gamma dxhat + dgamma xhat + dbeta, dxhat = rstd (dx - mean dx - xhat mean(xhat dx)) */
    const size_t C = L->in_shape[0], HW = L->in_shape[1] * L->in_shape[2], G = L->groups, Cg = C / G;
    const size_t D = L->in_dim, n = Cg * HW;
    for (size_t i = 0; i < B; i++)
        for (size_t g = 0; g < G; g++) {
            const float *xg = x + i * D + g * n;
            float *dvg = dv + i * D + g * n;
            if (dx) gn_group_back(xg, dx + i * D + g * n, n, dvg);
            else memset(dvg, 0, n * sizeof *dvg);
            double mu, rs;
            stats(xg, n, &mu, &rs);
            for (size_t c = 0; c < Cg; c++) {
                const size_t ch = g * Cg + c;
                for (size_t t = 0; t < HW; t++) {
                    float r = dvg[c * HW + t] * L->w[ch];
                    if (dtheta) r += (float)(((double)xg[c * HW + t] - mu) * rs) * dtheta[ch] + dtheta[C + ch];
                    dvg[c * HW + t] = r;
                }
            }
        }
    return DPT_OK;
}

void dpt_grad_emit_row(dpt_grad_mode mode, const double *gi, size_t P, size_t i, const float *weights, float *out,
                       size_t ld, int accumulate) {
    switch (mode) {
    case DPT_GRAD_SUM:
        for (size_t p = 0; p < P; p++) out[p] += (float)gi[p];
        break;
    case DPT_GRAD_WEIGHTED:
        for (size_t p = 0; p < P; p++) out[p] += (float)(weights[i] * gi[p]);
        break;
    case DPT_GRAD_PER_EXAMPLE:
        for (size_t p = 0; p < P; p++) out[i * ld + p] = (float)(accumulate ? out[i * ld + p] + gi[p] : gi[p]);
        break;
    case DPT_GRAD_SQNORM: {
        double s = 0.0;
        for (size_t p = 0; p < P; p++) s += gi[p] * gi[p];
        out[i] = (float)(accumulate ? out[i] + s : s);
        break;
    }
    case DPT_GRAD_DOT: {
        double s = 0.0;
        for (size_t p = 0; p < P; p++) s += weights[p] * gi[p];
        out[i] = (float)(accumulate ? out[i] + s : s);
        break;
    }
    }
}

static dpt_status gn_backward_params(const dpt_layer *L, const float *x, const float *dv, size_t B,
                                     dpt_grad_mode mode, const float *weights, float *out, size_t ld,
                                     int accumulate) {
    const size_t C = L->in_shape[0], HW = L->in_shape[1] * L->in_shape[2], G = L->groups, Cg = C / G;
    const size_t D = L->in_dim, n = Cg * HW, P = 2 * C;
    DPT_CHECK(mode != DPT_GRAD_WEIGHTED || weights, DPT_EINVAL, "%s: weighted gradient needs weights", L->name);
    DPT_CHECK(mode != DPT_GRAD_PER_EXAMPLE || ld >= P, DPT_EINVAL, "%s: per-example row stride %zu < %zu parameters",
              L->name, ld, P);
    DPT_CHECK(mode != DPT_GRAD_DOT || weights, DPT_EINVAL, "%s: inner products need a vector", L->name);
    DPT_CHECK(mode >= DPT_GRAD_SUM && mode <= DPT_GRAD_DOT, DPT_EINVAL, "%s: unknown gradient mode %d", L->name,
              (int)mode);
    if (!accumulate && (mode == DPT_GRAD_SUM || mode == DPT_GRAD_WEIGHTED)) memset(out, 0, P * sizeof *out);
    double gi[2 * 1024]; /* C <= 1024 (checked at setup) */
    for (size_t i = 0; i < B; i++) {
        for (size_t g = 0; g < G; g++) {
            const float *xg = x + i * D + g * n, *dvg = dv + i * D + g * n;
            double mu, rs;
            stats(xg, n, &mu, &rs);
            for (size_t c = 0; c < Cg; c++) {
                double sg = 0.0, sb = 0.0;
                for (size_t t = 0; t < HW; t++) {
                    sg += (double)dvg[c * HW + t] * (((double)xg[c * HW + t] - mu) * rs);
                    sb += dvg[c * HW + t];
                }
                gi[g * Cg + c] = sg;
                gi[C + g * Cg + c] = sb;
            }
        }
        dpt_grad_emit_row(mode, gi, P, i, weights, out, ld, accumulate);
    }
    return DPT_OK;
}

static size_t gn_n_tensors(const dpt_layer *L) { return 2; }

static void gn_tensor(const dpt_layer *L, size_t j, dpt_param_tensor *t) {
    memset(t, 0, sizeof *t);
    DPT_ASSERT(j < 2);
    const size_t C = L->in_shape[0];
    snprintf(t->name, sizeof t->name, "%s.%s", L->name, j == 0 ? "weight" : "bias");
    t->ndim = 1;
    t->shape[0] = C;
    t->offset = L->param_offset + j * C;
    t->size = C;
    t->role = j == 0 ? DPT_TENSOR_SCALE : DPT_TENSOR_BIAS;
}

static const dpt_layer_ops gn_ops = {
    gn_forward, gn_backward_input, gn_backward_params, gn_jvp, gn_n_tensors, gn_tensor, NULL, NULL, NULL,
};

dpt_status dpt_layer_groupnorm_setup(dpt_layer *L, const size_t in_shape[3], size_t groups) {
    const size_t C = in_shape[0];
    DPT_CHECK(groups >= 1 && C % groups == 0, DPT_EINVAL, "groupnorm: %zu groups do not divide %zu channels", groups,
              C);
    DPT_CHECK(C <= 1024, DPT_EINVAL, "groupnorm: at most 1024 channels, got %zu", C);
    L->kind = DPT_LAYER_GROUPNORM;
    L->ops = &gn_ops;
    L->groups = groups;
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    memcpy(L->out_shape, in_shape, sizeof L->out_shape);
    L->in_dim = L->out_dim = C * in_shape[1] * in_shape[2];
    L->has_bias = 1;
    L->n_params = 2 * C;
    return DPT_OK;
}

/* ==== Frozen BatchNorm ("fbn"): a fixed per-channel affine ====
 * v[c, hw] = s_c x[c, hw] + b_c for every example alike: BatchNorm's inference form, whose
 * s_c = 1 / sqrt(var_c + eps) and b_c = -mu_c s_c come from statistics of the whole training
 * set released once with DP (dpt_trainer_feature_norm; Tramer & Boneh 2021's "frozen BN" on
 * ScatterNet features), not from the batch, so an example's output depends on no other
 * example. Parameters: s [C] (starts at 1), then b [C] (starts at 0): the identity until
 * set. Trainable like any layer (ds_c = sum_hw dv x, db_c = sum_hw dv per example); the DP
 * statistics are kept fixed by freezing it. C = channels, HW = positions per channel. */

static dpt_status fbn_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const size_t C = L->in_shape[0], HW = L->in_shape[1] * L->in_shape[2], D = L->in_dim;
    const float *s = L->w, *b = L->w + C;
    for (size_t i = 0; i < B; i++)
        for (size_t c = 0; c < C; c++) {
            const float *xc = x + i * D + c * HW;
            float *vc = v + i * D + c * HW;
            for (size_t t = 0; t < HW; t++) vc[t] = s[c] * xc[t] + b[c];
        }
    return DPT_OK;
}

static dpt_status fbn_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv,
                                     float *dx, size_t B) {
    const size_t C = L->in_shape[0], HW = L->in_shape[1] * L->in_shape[2], D = L->in_dim;
    for (size_t i = 0; i < B; i++)
        for (size_t c = 0; c < C; c++)
            for (size_t t = 0; t < HW; t++) dx[i * D + c * HW + t] = L->w[c] * dv[i * D + c * HW + t];
    return DPT_OK;
}

static dpt_status fbn_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx, const float *dtheta,
                          float *dv, size_t B) {
    /* dv = s dx + ds x + db */
    const size_t C = L->in_shape[0], HW = L->in_shape[1] * L->in_shape[2], D = L->in_dim;
    for (size_t i = 0; i < B; i++)
        for (size_t c = 0; c < C; c++)
            for (size_t t = 0; t < HW; t++) {
                const size_t j = i * D + c * HW + t;
                float r = dx ? L->w[c] * dx[j] : 0.0f;
                if (dtheta) r += dtheta[c] * x[j] + dtheta[C + c];
                dv[j] = r;
            }
    return DPT_OK;
}

static dpt_status fbn_backward_params(const dpt_layer *L, const float *x, const float *dv, size_t B,
                                      dpt_grad_mode mode, const float *weights, float *out, size_t ld,
                                      int accumulate) {
    const size_t C = L->in_shape[0], HW = L->in_shape[1] * L->in_shape[2], D = L->in_dim, P = 2 * C;
    DPT_CHECK(mode != DPT_GRAD_WEIGHTED || weights, DPT_EINVAL, "%s: weighted gradient needs weights", L->name);
    DPT_CHECK(mode != DPT_GRAD_PER_EXAMPLE || ld >= P, DPT_EINVAL, "%s: per-example row stride %zu < %zu parameters",
              L->name, ld, P);
    DPT_CHECK(mode != DPT_GRAD_DOT || weights, DPT_EINVAL, "%s: inner products need a vector", L->name);
    DPT_CHECK(mode >= DPT_GRAD_SUM && mode <= DPT_GRAD_DOT, DPT_EINVAL, "%s: unknown gradient mode %d", L->name,
              (int)mode);
    if (!accumulate && (mode == DPT_GRAD_SUM || mode == DPT_GRAD_WEIGHTED)) memset(out, 0, P * sizeof *out);
    for (size_t i = 0; i < B; i++) {
        double sq = 0.0, dot = 0.0;
        for (size_t c = 0; c < C; c++) {
            double g[2] = {0.0, 0.0}; /* ds_ic = sum_hw dv x, db_ic = sum_hw dv */
            for (size_t t = 0; t < HW; t++) {
                const size_t j = i * D + c * HW + t;
                g[0] += (double)dv[j] * x[j];
                g[1] += dv[j];
            }
            for (int k = 0; k < 2; k++) {
                const size_t p = (size_t)k * C + c;
                switch (mode) {
                case DPT_GRAD_SUM: out[p] += (float)g[k]; break;
                case DPT_GRAD_WEIGHTED: out[p] += (float)(weights[i] * g[k]); break;
                case DPT_GRAD_PER_EXAMPLE:
                    out[i * ld + p] = (float)(accumulate ? out[i * ld + p] + g[k] : g[k]);
                    break;
                case DPT_GRAD_SQNORM: sq += g[k] * g[k]; break;
                case DPT_GRAD_DOT: dot += weights[p] * g[k]; break;
                }
            }
        }
        if (mode == DPT_GRAD_SQNORM) out[i] = (float)(accumulate ? out[i] + sq : sq);
        if (mode == DPT_GRAD_DOT) out[i] = (float)(accumulate ? out[i] + dot : dot);
    }
    return DPT_OK;
}

static const dpt_layer_ops fbn_ops = {
    fbn_forward, fbn_backward_input, fbn_backward_params, fbn_jvp, gn_n_tensors, gn_tensor, NULL, NULL, NULL,
};

dpt_status dpt_layer_channel_affine_setup(dpt_layer *L, const size_t in_shape[3]) {
    const size_t C = in_shape[0];
    DPT_CHECK(C >= 1, DPT_EINVAL, "fbn: no channels");
    L->kind = DPT_LAYER_CHANNEL_AFFINE;
    L->ops = &fbn_ops;
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    memcpy(L->out_shape, in_shape, sizeof L->out_shape);
    L->in_dim = L->out_dim = C * in_shape[1] * in_shape[2];
    L->has_bias = 1;
    L->n_params = 2 * C;
    return DPT_OK;
}
