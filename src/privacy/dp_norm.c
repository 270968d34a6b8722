/* Differentially private normalization statistics: per-group mean and standard deviation
 * of a training set released through one Gaussian mechanism on clipped per-example
 * statistics, as the DP mean of dp_pca.c does for a mean vector. See privacy.h. */
#include <dptrain/privacy.h>

#include <math.h>
#include <string.h>

#include "privacy/lattice.h"

/* Groups of a mode: K (mean, std) pairs, each over a contiguous run of m = dim / K
 * features (per feature: K = dim, m = 1). 0 on a bad mode or shape. */
static size_t groups_of(const dpt_dataset *d, int mode) {
    if (!d || d->dim == 0) return 0;
    if (mode == DPT_NORM_SCALAR) return 1;
    if (mode == DPT_NORM_PER_FEATURE) return d->dim;
    if (mode == DPT_NORM_PER_CHANNEL) {
        size_t C = d->shape[0];
        return C >= 1 && d->dim % C == 0 ? C : 0;
    }
    return 0;
}

size_t dpt_dp_norm_pairs(const dpt_dataset *d, int mode) { return groups_of(d, mode); }

static dpt_status check_common(const dpt_dataset *d, int mode, double C, size_t *K) {
    DPT_CHECK(d && d->x && d->n >= 1 && d->dim >= 1, DPT_EINVAL, "dp normalizer: train is NULL or empty");
    DPT_CHECK(mode >= DPT_NORM_SCALAR && mode <= DPT_NORM_PER_FEATURE, DPT_EINVAL,
              "dp normalizer: mode must be DPT_NORM_SCALAR, DPT_NORM_PER_CHANNEL or DPT_NORM_PER_FEATURE, got %d",
              mode);
    *K = groups_of(d, mode);
    DPT_CHECK(*K >= 1, DPT_EINVAL, "dp normalizer: %zu channels (shape[0]) do not divide dim %zu", d->shape[0],
              d->dim);
    DPT_CHECK(isfinite(C) && C > 0, DPT_EINVAL, "dp normalizer: C must be finite and > 0, got %g", C);
    return DPT_OK;
}

/* ==== Noise on a double-precision sum ==== */

dpt_status dpt_privacy_noise_add_sum(dpt_rng *noise, double *sum, size_t n, double sigma, double C, int secure,
                                     int threads) {
    DPT_CHECK(sum || n == 0, DPT_EINVAL, "noise_add_sum: sum is NULL");
    DPT_CHECK(isfinite(sigma) && sigma >= 0, DPT_EINVAL, "noise_add_sum: sigma must be finite and >= 0, got %g",
              sigma);
    if (sigma == 0 || n == 0) return DPT_OK;
    DPT_CHECK(noise, DPT_EINVAL, "noise_add_sum: noise is NULL");
    /* secure: the lattice mechanism (CKS draws) on the double sum itself, whose float32
     * copy would be coarser than the lattice step (privacy/lattice.h) */
    if (secure) return dpt_lattice_release_double(noise, sum, n, sigma, C, 1.0, DPT_DGAUSS_CKS, threads);
    float *e = dpt_alloc(n, sizeof(float), "released sum noise");
    if (!e) return DPT_ENOMEM;
    memset(e, 0, n * sizeof *e);
    dpt_status s = dpt_privacy_noise_add(noise, e, n, sigma, C, threads);
    if (s == DPT_OK)
        for (size_t k = 0; k < n; k++) sum[k] += e[k];
    dpt_free(e);
    return s;
}

/* ==== Clipped per-example statistics (the pre-noise release) ==== */

dpt_status dpt_dp_norm_sums(const dpt_dataset *d, int mode, double C, double *sums, size_t *clipped) {
    size_t K;
    DPT_TRY(check_common(d, mode, C, &K));
    DPT_CHECK(sums, DPT_EINVAL, "dp normalizer: sums is NULL");
    DPT_CHECK(dpt_all_finite(d->x, d->n * d->dim), DPT_EINVAL, "dp normalizer: train contains NaN or infinite values");
    const size_t dim = d->dim, m = dim / K;
    double *v = dpt_alloc(2 * K, sizeof(double), "dp normalizer statistics");
    if (!v) return DPT_ENOMEM;
    memset(sums, 0, 2 * K * sizeof(double));
    size_t nc = 0;
    for (size_t i = 0; i < d->n; i++) {
        /* v_i = (a_i1 .. a_iK, b_i1 .. b_iK): a = mean, b = mean square of each group */
        const float *x = d->x + i * dim;
        double nrm2 = 0;
        for (size_t c = 0; c < K; c++) {
            double s1 = 0, s2 = 0;
            for (size_t j = c * m; j < (c + 1) * m; j++) {
                s1 += x[j];
                s2 += (double)x[j] * x[j];
            }
            v[c] = s1 / (double)m;
            v[K + c] = s2 / (double)m;
            nrm2 += v[c] * v[c] + v[K + c] * v[K + c];
        }
        /* clip_C(v_i) = v_i min(1, C / ||v_i||): a neighbour moves the sum by <= C */
        const double nrm = sqrt(nrm2);
        double f = 1.0;
        if (nrm > C) f = C / nrm, nc++;
        for (size_t k = 0; k < 2 * K; k++) sums[k] += f * v[k];
    }
    dpt_free(v);
    if (clipped) *clipped = nc;
    return DPT_OK;
}

/* ==== Gaussian release ==== */

dpt_status dpt_dp_norm_release(const dpt_dataset *d, int mode, double C, double sigma, dpt_rng *noise, int secure,
                               int threads, double *released, size_t *clipped) {
    DPT_CHECK(isfinite(sigma) && sigma >= 0, DPT_EINVAL, "dp normalizer: sigma must be finite and >= 0, got %g",
              sigma);
    DPT_CHECK(noise || sigma == 0, DPT_EINVAL, "dp normalizer: noise is NULL");
    DPT_TRY(dpt_dp_norm_sums(d, mode, C, released, clipped));
    return dpt_privacy_noise_add_sum(noise, released, 2 * groups_of(d, mode), sigma, C, secure, threads);
}

/* ==== Statistics from the release (post-processing) ==== */

dpt_status dpt_dp_normalizer_fit(const dpt_dataset *train, int mode, double C, double sigma, dpt_rng *noise,
                                 int secure, int threads, dpt_normalizer *out, size_t *clipped) {
    DPT_CHECK(out, DPT_EINVAL, "dp normalizer: out is NULL");
    memset(out, 0, sizeof *out);
    size_t K;
    DPT_TRY(check_common(train, mode, C, &K));
    double *r = dpt_alloc(2 * K, sizeof(double), "dp normalizer release");
    float *mean = dpt_alloc(K, sizeof(float), "dp normalizer mean");
    float *sd = dpt_alloc(K, sizeof(float), "dp normalizer std");
    dpt_status s = r && mean && sd ? DPT_OK : DPT_ENOMEM;
    if (s == DPT_OK) s = dpt_dp_norm_release(train, mode, C, sigma, noise, secure, threads, r, clipped);
    if (s == DPT_OK) {
        const double n = (double)train->n;
        /* a variance within three noise standard deviations (sigma C / n on the second
         * moment) of 0 cannot be told from a constant group: divide it by 1, as the exact
         * fit does below 1e-12 */
        const double floor = fmax(1e-24, 3.0 * sigma * C / n);
        for (size_t c = 0; c < K; c++) {
            const double mu = r[c] / n, var = r[K + c] / n - mu * mu;
            mean[c] = (float)mu;
            sd[c] = var > floor ? (float)sqrt(var) : 1.0f;
        }
        s = dpt_normalizer_from_values(train->dim, mean, sd, K, mode == DPT_NORM_PER_FEATURE, out);
    }
    dpt_free(r), dpt_free(mean), dpt_free(sd);
    return s;
}

/* ==== Channel statistics of features (frozen BatchNorm) ==== */

dpt_status dpt_dp_channel_sums(const float *x, size_t n, size_t K, size_t m, int p, double C, double *sums,
                               size_t *clipped) {
    DPT_CHECK(x && sums && n >= 1 && K >= 1 && m >= 1, DPT_EINVAL,
              "dp channel statistics: empty or NULL features (n %zu, K %zu, m %zu)", n, K, m);
    DPT_CHECK(p == 1 || p == 2, DPT_EINVAL, "dp channel statistics: power must be 1 or 2, got %d", p);
    DPT_CHECK(isfinite(C) && C > 0, DPT_EINVAL, "dp channel statistics: the clip must be finite and > 0, got %g", C);
    DPT_CHECK(dpt_all_finite(x, n * K * m), DPT_EINVAL, "dp channel statistics: the features contain NaN or "
              "infinite values");
    double *v = dpt_alloc(K, sizeof(double), "dp channel statistics");
    if (!v) return DPT_ENOMEM;
    memset(sums, 0, K * sizeof *sums);
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) {
        /* v_ic = mean_j x_icj^p over channel c's m values */
        double nrm2 = 0;
        for (size_t c = 0; c < K; c++) {
            const float *xc = x + (i * K + c) * m;
            double s = 0;
            for (size_t j = 0; j < m; j++) s += p == 1 ? (double)xc[j] : (double)xc[j] * xc[j];
            v[c] = s / (double)m;
            nrm2 += v[c] * v[c];
        }
        /* u_i = v_i min(1, C / ||v_i||): one example moves the sum by ||u_i|| <= C */
        const double nrm = sqrt(nrm2);
        double f = 1.0;
        if (nrm > C) f = C / nrm, nc++;
        for (size_t c = 0; c < K; c++) sums[c] += f * v[c];
    }
    dpt_free(v);
    if (clipped) *clipped = nc;
    return DPT_OK;
}

dpt_status dpt_dp_channel_affine(const double *s1, const double *s2, size_t K, double n, float *scale,
                                 float *shift) {
    DPT_CHECK(s1 && s2 && scale && shift && K >= 1, DPT_EINVAL, "dp channel affine: NULL or empty argument");
    DPT_CHECK(isfinite(n) && n >= 1, DPT_EINVAL, "dp channel affine: n must be >= 1, got %g", n);
    for (size_t c = 0; c < K; c++) {
        DPT_CHECK(isfinite(s1[c]) && isfinite(s2[c]), DPT_EINVAL, "dp channel affine: released sum %zu is not "
                  "finite", c);
        const double mu = s1[c] / n, var = fmax(s2[c] / n - mu * mu, 0.0);
        /* BatchNorm's eps (PyTorch's default, as in Tramer & Boneh's standardize); a channel
         * whose noisy variance is not positive carries nothing usable: its output is 0 */
        const double r = var > 0 ? 1.0 / sqrt(var + 1e-5) : 0.0;
        scale[c] = (float)r;
        shift[c] = (float)(-mu * r);
    }
    return DPT_OK;
}
