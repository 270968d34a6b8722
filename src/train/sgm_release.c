/* The sampled Gaussian release (Abadi et al. 2016, Algorithm 1 with Poisson sampling), one
 * object for every mechanism that releases a clipped sum under an SGM(q, sigma) event:
 * DP-SGD, DP-MAC (its stacked first-order coefficients) and dpt_sgm. It holds the noise
 * multiplier drawn (sigma), the one the ledger records (sigma_acct: sigma, or the secure
 * lattice's effective multiplier for `coords` noised coordinates), the sensitivity and the
 * scale, fixed at init, so the noise added and the event recorded cannot disagree.
 * Letter key: q = Poisson rate, P = coords, C = sens (the L2 sensitivity of the sum). */
#include <dptrain/privacy.h>
#include <math.h>

#include "privacy/lattice.h"
#include "train_internal.h"

dpt_status dpt_gauss_release_init(dpt_gauss_release *r, double q, double sigma, double sens, double scale,
                                  size_t coords, int secure, dpt_dgauss_method sampler) {
    DPT_CHECK(r, DPT_EINVAL, "dpt_gauss_release_init: r is NULL");
    DPT_CHECK(q > 0 && q <= 1, DPT_EINVAL, "sampled Gaussian release: the Poisson rate q must be in (0, 1], got %g", q);
    DPT_CHECK(isfinite(sigma) && sigma > 0, DPT_EINVAL,
              "sampled Gaussian release: the noise multiplier must be > 0, got %g", sigma);
    DPT_CHECK(isfinite(sens) && sens > 0, DPT_EINVAL, "sampled Gaussian release: the sensitivity must be > 0, got %g",
              sens);
    DPT_CHECK(isfinite(scale) && scale > 0, DPT_EINVAL, "sampled Gaussian release: the scale must be > 0, got %g",
              scale);
    DPT_CHECK(coords >= 1, DPT_EINVAL, "sampled Gaussian release: no coordinates to noise");
    r->q = q;
    r->sigma = sigma;
    r->sigma_acct = dpt_sgm_accounted_sigma(sigma, secure, coords);
    r->sens = sens;
    r->scale = scale;
    r->coords = coords;
    r->secure = secure;
    r->sampler = sampler;
    return DPT_OK;
}

/* v [P]: the clipped sum in, (sum + N(0, sigma^2 C^2 I)) * scale out; secure: the lattice
 * mechanism with the scale fused into its last pass */
dpt_status dpt_gauss_release_apply(const dpt_gauss_release *r, dpt_rng *noise, float *v, int threads) {
    if (r->secure)
        return dpt_privacy_noise_add_secure_ex(noise, v, r->coords, r->sigma, r->sens, r->scale, r->sampler, threads);
    return dpt_privacy_noise_add_scaled(noise, v, r->coords, r->sigma, r->sens, r->scale, threads);
}

/* sum [P] in double (overwritten: it holds the noisy sum after the release, scaled in
 * secure mode), out [P] float: (sum + noise) * scale. Secure: the lattice rounds the double
 * sum itself, never a float32 copy (coarser than the lattice step for sums over a large
 * batch; privacy/lattice.h). */
dpt_status dpt_gauss_release_apply_sum(const dpt_gauss_release *r, dpt_rng *noise, double *sum, float *out,
                                       int threads) {
    if (r->secure) {
        DPT_TRY(dpt_lattice_release_double(noise, sum, r->coords, r->sigma, r->sens, r->scale, r->sampler, threads));
        for (size_t j = 0; j < r->coords; j++) out[j] = (float)sum[j];
        return DPT_OK;
    }
    DPT_TRY(dpt_privacy_noise_add_sum(noise, sum, r->coords, r->sigma, r->sens, 0, threads));
    for (size_t j = 0; j < r->coords; j++) out[j] = (float)(sum[j] * r->scale);
    return DPT_OK;
}

/* `count` steps of this release in ledger l (with the table sampler's distance in secure
 * mode) */
dpt_status dpt_gauss_release_record(const dpt_gauss_release *r, dpt_ledger *l, uint64_t count) {
    return dpt_sgm_ledger_events(l, r->q, r->sigma_acct, r->coords, r->secure, r->sampler, count);
}

/* ==== Adaptive clipping (Andrew et al. 2021) ==== */

dpt_status dpt_gauss_release_adaptive(dpt_gauss_release *r, double sigma_b, const char *field) {
    DPT_CHECK(!r->secure, DPT_ENOTSUP, "%s: adaptive clipping is not available with secure (lattice) noise: the "
              "joint accounting of the count and the lattice-rounded gradient is not implemented", field);
    double sd = 0;
    DPT_TRY(dpt_error_context(dpt_privacy_adaptive_sigma(r->sigma, sigma_b, &sd), "%s", field));
    r->sigma_acct = r->sigma; /* the joint mechanism's multiplier: what the ledger records */
    r->sigma = sd;            /* the gradient's share: what is drawn */
    return DPT_OK;
}

void dpt_gauss_release_set_clip(dpt_gauss_release *r, double C) {
    r->sens = C;
}

dpt_status dpt_adaclip_check(double quantile, double lr, double sigma_b, const char *prefix) {
    DPT_CHECK(isfinite(quantile) && quantile > 0 && quantile < 1, DPT_EINVAL,
              "%squantile: the target quantile gamma must be in (0, 1) (0.5: the median norm), got %g", prefix,
              quantile);
    DPT_CHECK(isfinite(lr) && lr > 0 && lr <= 10, DPT_EINVAL,
              "%slr: the clip's learning rate eta_C must be in (0, 10] (Andrew et al.: 0.2), got %g", prefix, lr);
    DPT_CHECK(isfinite(sigma_b) && sigma_b >= 0, DPT_EINVAL,
              "%ssigma_b: the count's noise std must be >= 0 (0: the expected batch / 20), got %g", prefix, sigma_b);
    return DPT_OK;
}

dpt_status dpt_adaclip_step(dpt_adaclip *a, dpt_rng *noise, double count_centred) {
    double v = count_centred; /* sum_i (b_i - 1/2): sensitivity 1/2 */
    DPT_TRY(dpt_privacy_noise_add_sum(noise, &v, 1, a->sigma_b, 1.0, 0, 1));
    /* post-processing of the released v: the expected batch q N is public, the batch size
     * is not (1/2 + v / qN has the expectation of the unclipped fraction) */
    double f = 0.5 + v / a->expected;
    f = f < 0 ? 0 : f > 1 ? 1 : f;
    a->frac = f;
    const double C = a->C * exp(-a->lr * (f - a->quantile));
    /* |f - quantile| < 1 and lr <= 10: C stays finite and > 0 but for underflow over very
     * many steps, which the bounds below stop (a clip of 1e-30 or 1e30 is no clip) */
    a->C = C < 1e-30 ? 1e-30 : C > 1e30 ? 1e30 : C;
    return DPT_OK;
}
