/* The Gaussian mechanism of DP-SGD: noise N(0, sigma^2 C^2) added once to the clipped sum
 * (Abadi et al. 2016, Algorithm 1, "add noise"). Samplers over the ChaCha20 noise stream:
 * the fast ziggurat fill, the Box-Muller reference, and for --secure the discrete Gaussian
 * on a lattice, either the exact one of Canonne, Kamath and Steinke 2020 (the reference) or
 * the constant-time table sampler of dgauss.c (fast, at an accounted distance). The secure
 * lattice mechanism is built twice on x86-64 (core/isa.h; noise_v3.c): its per-coordinate
 * rounding is a libm call in the baseline build, one instruction in the x86-64-v3 one. */
#include <dptrain/privacy.h>

#include <math.h>
#include <openssl/crypto.h>
#include <string.h>

#include "core/keystream.h"
#include "privacy/dgauss.h"
#include "privacy/lattice.h"


#if !DPT_ISA_V3_TU
static dpt_status check_args(float *sum, size_t n, double sigma, double C) {
    DPT_CHECK(isfinite(sigma) && sigma >= 0, DPT_EINVAL, "sigma: the noise multiplier must be >= 0, got %g", sigma);
    DPT_CHECK(isfinite(C) && C > 0, DPT_EINVAL, "C: the clipping norm must be > 0, got %g", C);
    DPT_CHECK(n == 0 || sum, DPT_EINVAL, "noise: sum is NULL");
    return DPT_OK;
}

/* ==== Fast: ziggurat ==== */

dpt_status dpt_privacy_noise_add(dpt_rng *noise, float *sum, size_t n, double sigma, double C, int threads) {
    DPT_TRY(check_args(sum, n, sigma, C));
    if (sigma == 0 || n == 0) return DPT_OK;
    DPT_CHECK(noise && noise->stream_id == DPT_STREAM_NOISE, DPT_EINVAL, "noise: not drawn from the noise stream");
    return dpt_rng_gauss_fill(noise, sum, n, (float)(sigma * C), 1, threads);
}

dpt_status dpt_privacy_noise_add_scaled(dpt_rng *noise, float *sum, size_t n, double sigma, double C,
                                        double scale, int threads) {
    DPT_TRY(check_args(sum, n, sigma, C));
    DPT_CHECK(isfinite(scale), DPT_EINVAL, "noise: scale %g must be finite", scale);
    if (n == 0) return DPT_OK;
    if (sigma == 0) {
        for (size_t j = 0; j < n; j++) sum[j] = (float)(scale * sum[j]);
        return DPT_OK;
    }
    DPT_CHECK(noise && noise->stream_id == DPT_STREAM_NOISE, DPT_EINVAL, "noise: not drawn from the noise stream");
    return dpt_rng_gauss_fill_scaled(noise, sum, n, (float)(sigma * C), (float)scale, threads);
}

/* ==== Reference: Box-Muller in double ==== */

dpt_status dpt_privacy_noise_add_ref(dpt_rng *noise, float *sum, size_t n, double sigma, double C) {
    DPT_TRY(check_args(sum, n, sigma, C));
    if (sigma == 0 || n == 0) return DPT_OK;
    DPT_CHECK(noise && noise->stream_id == DPT_STREAM_NOISE, DPT_EINVAL, "noise: not drawn from the noise stream");
    return dpt_rng_gauss_fill_ref(noise, sum, n, (float)(sigma * C), 1);
}

/* ==== Secure: exact discrete Gaussian (Canonne, Kamath, Steinke 2020) ==== */

/* Bernoulli(num/den), exact: one unbiased uniform integer below den. */
static int bern_frac(dpt_rng *r, uint64_t num, uint64_t den) { return dpt_rng_below(r, den) < num; }

/* Bernoulli(exp(-num/den)) for num/den in [0, 1] (CKS 2020, Algorithm 1, first case):
 * K = 1, 2, ... while Bernoulli(gamma / K); the answer is 1 when the final K is odd. */
static int bern_exp_le1(dpt_rng *r, uint64_t num, uint64_t den) {
    uint64_t k = 1; /* Bernoulli(gamma / K) as Bernoulli(gamma) and Bernoulli(1 / K): no overflow */
    while (bern_frac(r, num, den) && bern_frac(r, 1, k)) k++;
    return (int)(k & 1);
}

/* Bernoulli(exp(-num/den)) for any num/den >= 0 (Algorithm 1, second case). */
static int bern_exp(dpt_rng *r, uint64_t num, uint64_t den) {
    while (num > den) {
        if (!bern_exp_le1(r, 1, 1)) return 0;
        num -= den;
    }
    return bern_exp_le1(r, num, den);
}

/* Discrete Laplace with scale t (Algorithm 2): P(x) proportional to exp(-|x| / t). */
static int64_t discrete_laplace(dpt_rng *r, uint64_t t) {
    for (;;) {
        uint64_t u = dpt_rng_below(r, t);
        if (!bern_exp(r, u, t)) continue;
        uint64_t v = 0;
        while (bern_exp_le1(r, 1, 1)) v++;
        uint64_t x = u + t * v;
        int neg = (int)(dpt_rng_u32(r) & 1);
        if (neg && x == 0) continue;
        return neg ? -(int64_t)x : (int64_t)x;
    }
}

int64_t dpt_privacy_discrete_gauss(dpt_rng *r, uint32_t s) {
    if (s == 0) return 0; /* N_Z(0, 0) is the point mass at 0 (privacy.h) */
    DPT_ASSERT(s <= (1u << 14)); /* documented in privacy.h: no status to return */
    /* Algorithm 3 with sigma^2 = s^2: t = floor(s) + 1, Y ~ DLap(t), accept with
     * probability exp(-(|Y| - s^2/t)^2 / (2 s^2)) = exp(-(|Y| t - s^2)^2 / (2 t^2 s^2)).
     * All integers: for s <= 2^14 the denominator is < 2^58 and, with |Y| t <= 2^30, the
     * numerator < 2^60, so every Bernoulli below is exact. */
    uint64_t t = (uint64_t)s + 1, s2 = (uint64_t)s * s;
    const uint64_t den = 2 * t * t * s2;
    for (;;) {
        int64_t y = discrete_laplace(r, t);
        uint64_t ay = (uint64_t)(y < 0 ? -y : y);
        if (ay > (1ull << 30) / t) continue; /* beyond 2^14 standard deviations: probability ~0 */
        uint64_t a = ay * t, d = a > s2 ? a - s2 : s2 - a;
        uint64_t num = d * d;
        if (bern_exp(r, num, den)) return y;
    }
}

/* ==== Secure: the lattice mechanism ==== */

dpt_status dpt_dgauss_method_parse(const char *name, dpt_dgauss_method *out) {
    DPT_CHECK(name && out, DPT_EINVAL, "dpt_dgauss_method_parse: NULL argument");
    if (!strcmp(name, "table")) *out = DPT_DGAUSS_TABLE;
    else if (!strcmp(name, "cks")) *out = DPT_DGAUSS_CKS;
    else return dpt_set_error(DPT_EINVAL, "secure sampler '%s': expected 'table' or 'cks'", name);
    return DPT_OK;
}

const char *dpt_dgauss_method_name(dpt_dgauss_method m) {
    return m == DPT_DGAUSS_TABLE ? "table" : m == DPT_DGAUSS_CKS ? "cks" : "unknown";
}

dpt_status dpt_privacy_secure_distance(dpt_dgauss_method method, double *mu, double *tv) {
    DPT_CHECK(mu && tv, DPT_EINVAL, "dpt_privacy_secure_distance: NULL argument");
    if (method == DPT_DGAUSS_CKS) {
        *mu = *tv = 0;
        return DPT_OK;
    }
    DPT_CHECK(method == DPT_DGAUSS_TABLE, DPT_EINVAL, "method: unknown secure sampler %d", (int)method);
    const dg_table *T = dg_table_secure();
    if (!T) return DPT_ERANGE;
    *mu = T->mu;
    *tv = T->tv;
    return DPT_OK;
}

#endif /* !DPT_ISA_V3_TU */

/* The sum a secure release rounds onto its lattice: float32 (DP-SGD's clipped sums) or
 * double (sums over a whole training set, or dpt_sgm's, which a float32 copy would round
 * more coarsely than the lattice step; see lattice.h). Exactly one of f, d is set. */
typedef struct {
    float *f;
    double *d;
} lattice_sum;

/* out_j = scale h (round(x_j / h) + z_j) for the chunk x = s[lo, hi) */
static void lattice_points(lattice_sum s, size_t lo, size_t hi, double h, double scale, const int32_t *z) {
    if (s.d) {
        double *restrict sj = s.d + lo;
#pragma omp simd
        for (size_t j = 0; j < hi - lo; j++) {
            double k = nearbyint(sj[j] / h); /* ties to even: deterministic */
            sj[j] = scale * (h * (k + (double)z[j]));
        }
        return;
    }
    float *restrict sj = s.f + lo;
#pragma omp simd
    for (size_t j = 0; j < hi - lo; j++) {
        double k = nearbyint((double)sj[j] / h);
        sj[j] = (float)(scale * (h * (k + (double)z[j])));
    }
}

/* The lattice points k_j + Z_j of one chunk [lo, hi), Z_j from its own substream `sub`:
 * the table sampler reads it through the thread's keystream reader ks, CKS through the
 * child stream c (both into zbuf). */
static dpt_status secure_chunk(const dg_table *T, const dpt_rng *noise, dpt_keystream *ks, uint64_t sub,
                               lattice_sum sum, size_t lo, size_t hi, double h, double scale, int32_t *zbuf) {
    if (T) {
        DPT_TRY(dpt_keystream_seek(ks, noise, sub, 0));
        DPT_TRY(dg_sample_from(T, ks, zbuf, hi - lo, zbuf));
    } else {
        dpt_rng c;
        DPT_TRY(dpt_rng_child(noise, sub, &c));
        const uint32_t s = 1u << DPT_DGAUSS_LOG2_SCALE;
        int wide = 0;
        for (size_t j = 0; j < hi - lo; j++) {
            const int64_t z = dpt_privacy_discrete_gauss(&c, s);
            wide |= z > INT32_MAX || z < INT32_MIN; /* 2^17 standard deviations: never in practice */
            zbuf[j] = (int32_t)z;
        }
        dpt_rng_free(&c);
        if (wide) {
            OPENSSL_cleanse(zbuf, (hi - lo) * sizeof *zbuf);
            return dpt_set_error(DPT_ERANGE, "exact discrete Gaussian: a draw beyond 32 bits");
        }
    }
    lattice_points(sum, lo, hi, h, scale, zbuf);
    OPENSSL_cleanse(zbuf, (hi - lo) * sizeof *zbuf); /* the noise */
    return DPT_OK;
}

static double lattice_coord(lattice_sum s, size_t j) {
    return s.d ? s.d[j] : (double)s.f[j];
}

static dpt_status lattice_release(dpt_rng *noise, lattice_sum sum, size_t n, double sigma, double C, double scale,
                                  dpt_dgauss_method method, int threads) {
    DPT_CHECK(isfinite(sigma) && sigma >= 0, DPT_EINVAL, "sigma: the noise multiplier must be >= 0, got %g", sigma);
    DPT_CHECK(isfinite(C) && C > 0, DPT_EINVAL, "C: the clipping norm must be > 0, got %g", C);
    DPT_CHECK(n == 0 || sum.f || sum.d, DPT_EINVAL, "noise: sum is NULL");
    DPT_CHECK(isfinite(scale), DPT_EINVAL, "scale must be finite, got %g", scale);
    DPT_CHECK(method == DPT_DGAUSS_TABLE || method == DPT_DGAUSS_CKS, DPT_EINVAL,
              "method: unknown secure sampler %d", (int)method);
    if (n == 0) return DPT_OK;
    if (sigma == 0) {
        for (size_t j = 0; j < n; j++) {
            if (sum.d) sum.d[j] *= scale;
            else sum.f[j] = (float)(scale * sum.f[j]);
        }
        return DPT_OK;
    }
    DPT_CHECK(noise && noise->stream_id == DPT_STREAM_NOISE, DPT_EINVAL, "noise: not drawn from the noise stream");
    const dg_table *T = NULL;
    if (method == DPT_DGAUSS_TABLE && !(T = dg_table_secure())) return DPT_ERANGE;
    /* out = h (k + Z): k = round(sum / h) the sum on the lattice h Z (L2 sensitivity at
     * most C/h + sqrt(n) lattice units), Z ~ N_Z(0, s^2), s = 2^DPT_DGAUSS_LOG2_SCALE,
     * h = sigma C / s. The output is a deterministic function of the lattice point k + Z,
     * whose every value has its exact probability (CKS) or one within the table's
     * accounted distance. Chunks of DPT_RNG_CHUNK coordinates each read their own reserved
     * substream, so the threads share nothing and the result does not depend on their
     * number. */
    const double h = sigma * C / (double)(1u << DPT_DGAUSS_LOG2_SCALE);
    const double kmax = 4503599627370496.0; /* 2^52: |k| below it, k + Z exact in double */
    /* one vectorized pass finds whether any coordinate is off the lattice's range (NaN
     * included: !(v < kmax) holds for it), a second names the first such coordinate */
    int bad = 0;
    if (sum.d) {
#pragma omp simd reduction(| : bad)
        for (size_t j = 0; j < n; j++) bad |= !(fabs(sum.d[j] / h) < kmax);
    } else {
#pragma omp simd reduction(| : bad)
        for (size_t j = 0; j < n; j++) bad |= !(fabs((double)sum.f[j] / h) < kmax);
    }
    for (size_t j = 0; bad && j < n; j++) {
        double v = lattice_coord(sum, j) / h;
        DPT_CHECK(isfinite(v) && fabs(v) < kmax, DPT_ERANGE,
                  "secure noise: coordinate %zu of the clipped sum (%g) is not finite or too large for the lattice "
                  "(step %g)", j, lattice_coord(sum, j), h);
    }
    const size_t n_chunks = (n + DPT_RNG_CHUNK - 1) / DPT_RNG_CHUNK;
    const uint64_t base = dpt_rng_reserve_substreams(noise, n_chunks);
    int nt = dpt_threads_resolve(threads);
    if ((size_t)nt > n_chunks) nt = (int)n_chunks;
    int failed = 0;
    dpt_status first = DPT_OK;
    char why[256] = "";
#pragma omp parallel num_threads(nt) reduction(| : failed)
    {
        int32_t zbuf[DPT_RNG_CHUNK + DG_GROUP];
        dpt_keystream ks = {NULL};
        dpt_status st0 = T ? dpt_keystream_open(&ks, noise, base, 0) : DPT_OK;
#pragma omp for schedule(dynamic)
        for (size_t ch = 0; ch < n_chunks; ch++) {
            if (failed) continue;
            size_t lo = ch * DPT_RNG_CHUNK, hi = lo + DPT_RNG_CHUNK < n ? lo + DPT_RNG_CHUNK : n;
            dpt_status st = st0 != DPT_OK ? st0 : secure_chunk(T, noise, &ks, base + ch, sum, lo, hi, h, scale, zbuf);
            if (st != DPT_OK) {
                failed = 1;
#pragma omp critical(dpt_secure_noise_error)
                if (first == DPT_OK) {
                    first = st;
                    snprintf(why, sizeof why, "%s", dpt_last_error());
                }
            }
        }
        dpt_keystream_close(&ks);
    }
    if (failed) return dpt_set_error(first, "secure noise: %s", why);
    return DPT_OK;
}

dpt_status DPT_ISA_NAME(dpt_privacy_noise_add_secure_ex)(dpt_rng *noise, float *sum, size_t n, double sigma,
                                                         double C, double scale, dpt_dgauss_method method,
                                                         int threads) {
    return lattice_release(noise, (lattice_sum){.f = sum}, n, sigma, C, scale, method, threads);
}

dpt_status DPT_ISA_NAME(dpt_lattice_release_double)(dpt_rng *noise, double *sum, size_t n, double sigma, double C,
                                                     double scale, dpt_dgauss_method method, int threads) {
    return lattice_release(noise, (lattice_sum){.d = sum}, n, sigma, C, scale, method, threads);
}

#if !DPT_ISA_V3_TU
#if DPT_ISA_DISPATCH
dpt_status dpt_privacy_noise_add_secure_ex(dpt_rng *noise, float *sum, size_t n, double sigma, double C,
                                           double scale, dpt_dgauss_method method, int threads) {
    return (dpt_isa_v3() ? dpt_privacy_noise_add_secure_ex_v3 : dpt_privacy_noise_add_secure_ex_base)(
        noise, sum, n, sigma, C, scale, method, threads);
}

dpt_status dpt_lattice_release_double(dpt_rng *noise, double *sum, size_t n, double sigma, double C, double scale,
                                      dpt_dgauss_method method, int threads) {
    return (dpt_isa_v3() ? dpt_lattice_release_double_v3 : dpt_lattice_release_double_base)(
        noise, sum, n, sigma, C, scale, method, threads);
}
#endif

dpt_status dpt_privacy_noise_add_secure(dpt_rng *noise, float *sum, size_t n, double sigma, double C,
                                        int threads) {
    return dpt_privacy_noise_add_secure_ex(noise, sum, n, sigma, C, 1.0, DPT_DGAUSS_CKS, threads);
}

double dpt_privacy_secure_sigma_eff(double sigma, size_t n) {
    return sigma / (1.0 + sqrt((double)n) * sigma / (double)(1u << DPT_DGAUSS_LOG2_SCALE));
}

dpt_status dpt_privacy_secure_sigma_for(double sigma_eff, size_t n, double *sigma) {
    double r = sqrt((double)n) * sigma_eff / (double)(1u << DPT_DGAUSS_LOG2_SCALE);
    DPT_CHECK(isfinite(sigma_eff) && sigma_eff > 0 && r < 1, DPT_ERANGE,
              "dpt_privacy_secure_sigma_for: no noise multiplier reaches sigma_eff = %g with n = %zu values (the "
              "lattice rounding "
              "adds sqrt(n) h to the sensitivity; at most %g is reachable)", sigma_eff, n,
              (double)(1u << DPT_DGAUSS_LOG2_SCALE) / sqrt((double)n));
    *sigma = sigma_eff / (1.0 - r);
    return DPT_OK;
}
#endif /* !DPT_ISA_V3_TU */
