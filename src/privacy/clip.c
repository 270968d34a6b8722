/* Per-example clipping factors for DP-SGD (Abadi et al. 2016, Algorithm 1, "clip
 * gradient": g_i / max(1, ||g_i|| / C)). The norms come from the layer contract's SQNORM
 * mode (ghost norms), so clipping never needs the per-example gradients themselves: the
 * clipped sum is then sum_i c_i g_i, one weighted GEMM per layer. */
#include <dptrain/privacy.h>

#include <math.h>
#include <string.h>

dpt_status dpt_clip_mode_parse(const char *s, dpt_clip_mode *out) {
    DPT_CHECK(s && out, DPT_EINVAL, "dpt_clip_mode_parse: %s is NULL", s ? "out" : "s");
    if (!strcmp(s, "flat")) *out = DPT_CLIP_FLAT;
    else if (!strcmp(s, "per-layer")) *out = DPT_CLIP_PER_LAYER;
    else return dpt_set_error(DPT_EINVAL, "dpt_clip_mode_parse: expected flat or per-layer, got '%s'", s);
    return DPT_OK;
}

static dpt_status check_c(double C) {
    DPT_CHECK(isfinite(C) && C > 0, DPT_EINVAL, "C: the clipping norm must be > 0, got %g", C);
    return DPT_OK;
}

/* A non-finite squared norm comes from a diverged model (the layers compute it from finite
 * inputs otherwise), so it is the caller's training that is wrong, not an argument:
 * DPT_ERANGE, as for non-finite parameters. This is the only scan of the norms. The
 * message names neither the example's place in the batch nor whether it was NaN or Inf:
 * it leaves the process before the ledger covers the step (docs/checkpoints.md), and those
 * are facts about one private example. A negative one is a bug of whoever computed it. */
static dpt_status check_sqnorm(double s, size_t i) {
    DPT_CHECK(isfinite(s), DPT_ERANGE,
              "clip factors: a per-example gradient's squared norm is not finite: the model diverged; "
              "lower the learning rate (dpt_optim_config.lr)");
    DPT_CHECK(s >= 0, DPT_EINVAL, "clip factors: squared norm %zu is %g (< 0)", i, s);
    return DPT_OK;
}

/* ==== Flat clipping ==== */

dpt_status dpt_privacy_clip_factors(const float *sqnorm, size_t B, double C, float *c) {
    DPT_TRY(check_c(C));
    DPT_CHECK(B == 0 || (sqnorm && c), DPT_EINVAL, "clip factors: NULL argument");
    /* Computed in double: c_i = C / sqrt(s_i) must not exceed C/||g_i|| by rounding, or a
     * clipped norm would exceed C by more than one float ulp. */
    for (size_t i = 0; i < B; i++) {
        double s = sqnorm[i];
        DPT_TRY(check_sqnorm(s, i));
        c[i] = s > C * C ? (float)(C / sqrt(s)) : 1.0f;
    }
    return DPT_OK;
}

dpt_status dpt_privacy_clip_factors_ref(const float *sqnorm, size_t B, double C, float *c) {
    DPT_TRY(check_c(C));
    for (size_t i = 0; i < B; i++) {
        DPT_TRY(check_sqnorm(sqnorm[i], i));
        double norm = sqrt((double)sqnorm[i]);
        double f = norm / C;
        c[i] = (float)(1.0 / (f > 1.0 ? f : 1.0)); /* 1 / max(1, ||g|| / C) as in Abadi et al. */
    }
    return DPT_OK;
}

/* ==== Per-layer clipping ==== */

dpt_status dpt_privacy_split_equal(double C, size_t G, double *C_l) {
    DPT_TRY(check_c(C));
    DPT_CHECK(G >= 1 && C_l, DPT_EINVAL, "per-layer clipping: no parameter layers");
    for (size_t g = 0; g < G; g++) C_l[g] = C / sqrt((double)G);
    return DPT_OK;
}

/* The joint release's per-example contribution, in units of each part's noise std, has
 * squared norm at most (C / (sigma_Delta C))^2 + ((1/2) / sigma_b)^2 = 1 / sigma^2 (Andrew et
 * al. 2021, Section 3): solved for sigma_Delta. */
dpt_status dpt_privacy_adaptive_sigma(double sigma, double sigma_b, double *sigma_grad) {
    DPT_CHECK(sigma_grad, DPT_EINVAL, "adaptive clipping: sigma_grad is NULL");
    DPT_CHECK(isfinite(sigma) && sigma > 0, DPT_EINVAL, "adaptive clipping: the noise multiplier sigma must be > 0, "
              "got %g", sigma);
    DPT_CHECK(isfinite(sigma_b) && sigma_b > 0, DPT_EINVAL, "adaptive clipping: the count's noise std sigma_b must "
              "be > 0, got %g", sigma_b);
    const double rest = 1.0 / (sigma * sigma) - 1.0 / (4.0 * sigma_b * sigma_b); /* 1 / sigma_Delta^2 */
    DPT_CHECK(rest > 0 && isfinite(1.0 / sqrt(rest)), DPT_EINVAL,
              "adaptive clipping: the count's noise std sigma_b = %g is too small for sigma %g: the count alone would "
              "spend the whole budget (1/sigma^2 = 1/sigma_Delta^2 + 1/(2 sigma_b)^2 leaves nothing for the "
              "gradient); sigma_b must be above sigma / 2 = %g (Andrew et al. use the expected batch / 20)",
              sigma_b, sigma, sigma / 2);
    *sigma_grad = 1.0 / sqrt(rest);
    return DPT_OK;
}

dpt_status dpt_privacy_clip_factors_layers(const float *sqnorms, size_t G, size_t B, const double *C_l, float *c) {
    DPT_CHECK(G == 0 || B == 0 || (sqnorms && C_l && c), DPT_EINVAL, "per-layer clip factors: NULL argument");
    for (size_t g = 0; g < G; g++) {
        dpt_status st = dpt_privacy_clip_factors(sqnorms + g * B, B, C_l[g], c + g * B);
        if (st != DPT_OK) return dpt_error_context(st, "parameter layer %zu", g);
    }
    return DPT_OK;
}

/* ==== Reference: materialized rows ==== */

dpt_status dpt_privacy_clip_rows_ref(float *g, size_t B, size_t P, size_t ld, double C, double *norms) {
    DPT_TRY(check_c(C));
    DPT_CHECK(ld >= P, DPT_EINVAL, "clip rows: stride %zu < %zu", ld, P);
    for (size_t i = 0; i < B; i++) {
        float *row = g + i * ld;
        double s = 0;
        for (size_t j = 0; j < P; j++) s += (double)row[j] * row[j];
        DPT_TRY(check_sqnorm(s, i)); /* non-finite: DPT_ERANGE, as the fast path */
        double norm = sqrt(s);
        if (norms) norms[i] = norm;
        double f = norm / C;
        if (f > 1.0)
            for (size_t j = 0; j < P; j++) row[j] = (float)(row[j] / f);
    }
    return DPT_OK;
}
