/* The sampled Gaussian release (Abadi et al. 2016, Algorithm 1 with Poisson sampling), one
 * object for every mechanism that releases a clipped sum under an SGM(q, sigma) event:
 * DP-SGD, DP-MAC (its stacked first-order coefficients) and dpt_sgm. It holds the noise
 * multiplier drawn (sigma), the one the ledger records (sigma_acct: sigma, or the secure
 * lattice's effective multiplier for `coords` noised coordinates), the sensitivity and the
 * scale, fixed at init, so the noise added and the event recorded cannot disagree.
 * Letter key: q = Poisson rate, P = coords, C = sens (the L2 sensitivity of the sum). */
#include <math.h>

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

/* sum [P] in double (kept: it holds the noisy sum after a fast release), out [P] float:
 * (sum + noise) * scale */
dpt_status dpt_gauss_release_apply_sum(const dpt_gauss_release *r, dpt_rng *noise, double *sum, float *out,
                                       int threads) {
    if (r->secure) {
        for (size_t j = 0; j < r->coords; j++) out[j] = (float)sum[j];
        return dpt_gauss_release_apply(r, noise, out, threads);
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
