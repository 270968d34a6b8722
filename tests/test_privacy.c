/* privacy: clipping factors give clipped norms exactly min(||g||, C) (C below and above 1,
 * flat and per layer, fast and reference), noise added to zeros has mean 0 and standard
 * deviation sigma C within tight statistical bounds for the fast, reference and secure
 * samplers, the exact discrete Gaussian passes a chi-square goodness-of-fit test against
 * its pmf and the secure noise a Kolmogorov-Smirnov test against N(0, (sigma C)^2), and
 * bad arguments are refused naming the flag. */
#include <dptrain/privacy.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ==== Clipping ==== */

static void test_clip_equality(double C) {
    enum { B = 64, P = 37 };
    float g[B * P], sq[B], c[B], cr[B];
    dpt_rng r;
    dpt_rng_init(&r, 7, DPT_STREAM_AUX);
    for (size_t i = 0; i < B; i++) {
        /* norms spread over [C/50, 50 C] so both sides of C are covered */
        double target = C * exp(((double)i / (B - 1) - 0.5) * 2 * log(50.0)), s = 0;
        for (size_t j = 0; j < P; j++) {
            g[i * P + j] = (float)dpt_rng_gauss_ref(&r);
            s += (double)g[i * P + j] * g[i * P + j];
        }
        for (size_t j = 0; j < P; j++) g[i * P + j] = (float)(g[i * P + j] * target / sqrt(s));
        s = 0;
        for (size_t j = 0; j < P; j++) s += (double)g[i * P + j] * g[i * P + j];
        sq[i] = (float)s;
    }
    CHECK_OK(dpt_privacy_clip_factors(sq, B, C, c));
    CHECK_OK(dpt_privacy_clip_factors_ref(sq, B, C, cr));
    int below = 0, above = 0;
    for (size_t i = 0; i < B; i++) {
        double n0 = 0, n1 = 0;
        for (size_t j = 0; j < P; j++) {
            double v = g[i * P + j];
            n0 += v * v;
            n1 += (c[i] * v) * (c[i] * v);
        }
        n0 = sqrt(n0), n1 = sqrt(n1);
        below += n0 < C, above += n0 > C;
        /* equality, not "<= C": a clip that always scales to norm 1 fails here */
        CHECK_CLOSE(n1, fmin(n0, C), 0, 2e-6);
        CHECK_CLOSE(c[i], cr[i], 0, 1e-6);
    }
    CHECK(below > 10 && above > 10);
    /* materialized reference rows */
    double norms[B];
    float gr[B * P];
    memcpy(gr, g, sizeof g);
    CHECK_OK(dpt_privacy_clip_rows_ref(gr, B, P, P, C, norms));
    for (size_t i = 0; i < B; i++) {
        double n1 = 0;
        for (size_t j = 0; j < P; j++) n1 += (double)gr[i * P + j] * gr[i * P + j];
        CHECK_CLOSE(sqrt(n1), fmin(norms[i], C), 0, 2e-6);
    }
    dpt_rng_free(&r);
}

static void test_clip_layers(void) {
    const double C = 0.3;
    double C_l[3];
    CHECK_OK(dpt_privacy_split_equal(C, 3, C_l));
    double ss = 0;
    for (int g = 0; g < 3; g++) ss += C_l[g] * C_l[g];
    CHECK_CLOSE(sqrt(ss), C, 0, 1e-12);
    float sq[3 * 4] = {0, 0.001f, 0.03f, 4, 1, 0.01f, 0.02f, 0.029f, 9, 0.0299f, 0.5f, 0};
    float c[12];
    CHECK_OK(dpt_privacy_clip_factors_layers(sq, 3, 4, C_l, c));
    for (int k = 0; k < 12; k++) CHECK_CLOSE(sqrt((double)sq[k]) * c[k], fmin(sqrt((double)sq[k]), C_l[k / 4]), 0, 1e-6);
    CHECK(c[0] == 1.0f); /* zero gradient: factor 1, no division by zero */
}

static void test_clip_errors(void) {
    float sq[2] = {1, 2}, c[2];
    CHECK_STATUS(dpt_privacy_clip_factors(sq, 2, 0.0, c), DPT_EINVAL);
    CHECK_ERR_HAS("C: the clipping norm must be > 0, got 0");
    CHECK_STATUS(dpt_privacy_clip_factors(sq, 2, -1.0, c), DPT_EINVAL);
    /* a NaN or infinite squared norm is a diverged model, DPT_ERANGE saying so, in this one
     * scan (the algorithms have no scan of their own), without naming the example's place in
     * the batch or its value (facts about one private example, published before the ledger
     * covers the step); a negative one is a caller's bug, DPT_EINVAL */
    sq[1] = NAN;
    CHECK_STATUS(dpt_privacy_clip_factors(sq, 2, 1.0, c), DPT_ERANGE);
    CHECK_ERR_HAS("clip factors: a per-example gradient's squared norm is not finite: the model diverged; "
                  "lower the learning rate (dpt_optim_config.lr)");
    CHECK(!strstr(dpt_last_error(), "1") && !strstr(dpt_last_error(), "nan"));
    CHECK_STATUS(dpt_privacy_clip_factors_ref(sq, 2, 1.0, c), DPT_ERANGE);
    CHECK_ERR_HAS("a per-example gradient's squared norm is not finite: the model diverged");
    CHECK(!strstr(dpt_last_error(), "1") && !strstr(dpt_last_error(), "nan"));
    sq[1] = -INFINITY;
    CHECK_STATUS(dpt_privacy_clip_factors(sq, 2, 1.0, c), DPT_ERANGE);
    CHECK(!strstr(dpt_last_error(), "1") && !strstr(dpt_last_error(), "inf ") && !strstr(dpt_last_error(), "-inf"));
    sq[1] = -1;
    CHECK_STATUS(dpt_privacy_clip_factors(sq, 2, 1.0, c), DPT_EINVAL);
    CHECK_ERR_HAS("clip factors: squared norm 1 is -1 (< 0)");
    CHECK_STATUS(dpt_privacy_clip_factors_ref(sq, 2, 1.0, c), DPT_EINVAL);
    float sql[2 * 2] = {1, 2, 3, INFINITY}, cl[4];
    const double C_l[2] = {1, 1};
    CHECK_STATUS(dpt_privacy_clip_factors_layers(sql, 2, 2, C_l, cl), DPT_ERANGE);
    CHECK_ERR_HAS("parameter layer 1: clip factors: a per-example gradient's squared norm is not finite");
    /* the reference rows (DP-SGD's reference mode) say the same */
    float rows[2 * 3] = {1, 2, 3, 4, NAN, 6};
    CHECK_STATUS(dpt_privacy_clip_rows_ref(rows, 2, 3, 3, 1.0, NULL), DPT_ERANGE);
    CHECK_ERR_HAS("a per-example gradient's squared norm is not finite: the model diverged");
    dpt_clip_mode m;
    CHECK_OK(dpt_clip_mode_parse("per-layer", &m));
    CHECK(m == DPT_CLIP_PER_LAYER);
    CHECK_STATUS(dpt_clip_mode_parse("layer", &m), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_clip_mode_parse: expected flat or per-layer, got 'layer'");
}

/* ==== Noise ==== */

enum { NOISE_FAST, NOISE_REF, NOISE_SECURE };

/* Noise added to zeros: sample mean within 5 standard errors of 0 and sample standard
 * deviation within 5 standard errors (sd / sqrt(2n)) of sigma C. */
static void noise_stats(int kind, size_t n, double sigma, double C, float *x) {
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 11 + kind, DPT_STREAM_NOISE));
    memset(x, 0, n * sizeof *x);
    if (kind == NOISE_FAST) CHECK_OK(dpt_privacy_noise_add(&r, x, n, sigma, C, 2));
    if (kind == NOISE_REF) CHECK_OK(dpt_privacy_noise_add_ref(&r, x, n, sigma, C));
    if (kind == NOISE_SECURE) CHECK_OK(dpt_privacy_noise_add_secure(&r, x, n, sigma, C, 2));
    double m = 0, v = 0, sd = sigma * C;
    for (size_t i = 0; i < n; i++) m += x[i];
    m /= (double)n;
    for (size_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    double s = sqrt(v / (double)(n - 1));
    CHECK_CLOSE(m, 0.0, 5 * sd / sqrt((double)n), 0);
    CHECK_CLOSE(s, sd, 5 * sd / sqrt(2.0 * (double)n), 0);
    dpt_rng_free(&r);
}

static double norm_cdf(double z) { return 0.5 * erfc(-z / sqrt(2.0)); }

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void test_noise(void) {
    size_t n = 400000;
    float *x = malloc(n * sizeof *x);
    noise_stats(NOISE_FAST, n, 1.3, 0.7, x);
    noise_stats(NOISE_FAST, n, 0.5, 4.0, x);
    noise_stats(NOISE_REF, n, 1.3, 0.7, x);
    noise_stats(NOISE_SECURE, n, 1.3, 0.7, x);
    noise_stats(NOISE_SECURE, n, 0.5, 4.0, x);
    /* Kolmogorov-Smirnov of the secure noise against N(0, (sigma C)^2): D below the 0.1%
     * critical value 1.95 / sqrt(n) */
    size_t nk = 100000;
    qsort(x, nk, sizeof *x, cmp_float);
    double D = 0;
    for (size_t i = 0; i < nk; i++) {
        double F = norm_cdf(x[i] / (0.5 * 4.0));
        D = fmax(D, fmax(fabs(F - (double)i / nk), fabs(F - (double)(i + 1) / nk)));
    }
    CHECK(D < 1.95 / sqrt((double)nk));
    if (!(D < 1.95 / sqrt((double)nk))) fprintf(stderr, "KS D = %g\n", D);
    /* sigma = 0 adds nothing; bad sigma/C refused */
    dpt_rng r;
    dpt_rng_init(&r, 1, DPT_STREAM_NOISE);
    memset(x, 0, 16 * sizeof *x);
    CHECK_OK(dpt_privacy_noise_add(&r, x, 16, 0.0, 1.0, 1));
    for (int i = 0; i < 16; i++) CHECK(x[i] == 0.0f);
    CHECK_STATUS(dpt_privacy_noise_add(&r, x, 16, -0.1, 1.0, 1), DPT_EINVAL);
    CHECK_ERR_HAS("sigma: the noise multiplier must be >= 0, got -0.1");
    CHECK_STATUS(dpt_privacy_noise_add_secure(&r, x, 16, 1.0, 0.0, 1), DPT_EINVAL);
    CHECK_ERR_HAS("C: the clipping norm must be > 0, got 0");
    dpt_rng_free(&r);
    dpt_rng_init(&r, 1, DPT_STREAM_DATA); /* noise only from the noise stream */
    CHECK_STATUS(dpt_privacy_noise_add(&r, x, 16, 1.0, 1.0, 1), DPT_EINVAL);
    dpt_rng_free(&r);
    free(x);
}

/* The fused noise-and-rescale DP-SGD uses equals noise_add followed by a separate scaling
 * (same draws, float tolerance), sigma = 0 only rescales, and a NaN scale is refused. */
static void test_noise_scaled(void) {
    size_t n = 3 * DPT_RNG_CHUNK + 77;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (float)((int)(i % 13) - 6) * 0.25f;
    dpt_rng r1, r2;
    CHECK_OK(dpt_rng_init(&r1, 5, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&r2, 5, DPT_STREAM_NOISE));
    const double scale = 1.0 / 256.0;
    CHECK_OK(dpt_privacy_noise_add_scaled(&r1, a, n, 1.3, 0.7, scale, 2));
    CHECK_OK(dpt_privacy_noise_add(&r2, b, n, 1.3, 0.7, 1));
    double worst = 0, var = 0;
    for (size_t i = 0; i < n; i++) {
        double ref = (double)b[i] * scale;
        worst = fmax(worst, fabs(a[i] - ref) / (fabs(ref) + 1e-6));
        double z = (double)a[i] / scale - (double)((int)(i % 13) - 6) * 0.25;
        var += z * z;
    }
    CHECK(worst < 1e-5);
    var /= (double)n; /* the noise really is N(0, (1.3 * 0.7)^2) before scaling */
    CHECK_CLOSE(var, 0.91 * 0.91, 5.0 * sqrt(2.0 / n) * 0.91 * 0.91, 0);
    for (size_t i = 0; i < 16; i++) a[i] = 2.0f;
    CHECK_OK(dpt_privacy_noise_add_scaled(&r1, a, 16, 0.0, 1.0, 0.5, 1));
    for (size_t i = 0; i < 16; i++) CHECK(a[i] == 1.0f);
    CHECK_STATUS(dpt_privacy_noise_add_scaled(&r1, a, 16, 1.0, 1.0, NAN, 1), DPT_EINVAL);
    dpt_rng_free(&r1);
    dpt_rng_free(&r2);
    free(a);
    free(b);
}

/* The secure sampler's chunks read their own substreams: 1 and 3 threads give the same
 * noise, and two calls draw different noise (fresh substreams). */
static void test_secure_threads(void) {
    size_t n = 2 * DPT_RNG_CHUNK + 5;
    float *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
    dpt_rng r1, r2;
    CHECK_OK(dpt_rng_init(&r1, 11, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&r2, 11, DPT_STREAM_NOISE));
    CHECK_OK(dpt_privacy_noise_add_secure(&r1, a, n, 1.0, 1.0, 1));
    CHECK_OK(dpt_privacy_noise_add_secure(&r2, b, n, 1.0, 1.0, 3));
    CHECK(memcmp(a, b, n * sizeof *a) == 0);
    CHECK_OK(dpt_privacy_noise_add_secure(&r2, b, n, 1.0, 1.0, 3));
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += a[i] == b[i];
    CHECK(same < n / 100);
    dpt_rng_free(&r1);
    dpt_rng_free(&r2);
    free(a);
    free(b);
}

/* The secure mechanism releases h (round(sum / h) + Z): every output is a lattice point
 * (an arbitrary sum no longer shows through between lattice points), neighbouring sums
 * (||a - b|| <= C) with the same stream differ by at most C + sqrt(n) h, the accounted
 * multiplier is sigma / (1 + sqrt(n) sigma / s), its inverse holds, and a sum too large for
 * the lattice is an error. */
static void test_secure_lattice(void) {
    const size_t n = 3000;
    const double sigma = 1.5, C = 2.0, h = sigma * C / (double)(1u << DPT_DGAUSS_LOG2_SCALE);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    dpt_rng r1, r2;
    CHECK_OK(dpt_rng_init(&r1, 21, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&r2, 21, DPT_STREAM_NOISE));
    double d2 = 0;
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(0.123456 + 0.001 * (double)i);
        double delta = (i % 3 == 0) ? 1.0 * C / sqrt(n / 3.0) : 0.0; /* ||delta|| = C */
        b[i] = (float)((double)a[i] + delta);
        d2 += ((double)b[i] - a[i]) * ((double)b[i] - a[i]);
    }
    CHECK(sqrt(d2) <= C * (1 + 1e-6));
    CHECK_OK(dpt_privacy_noise_add_secure(&r1, a, n, sigma, C, 2));
    CHECK_OK(dpt_privacy_noise_add_secure(&r2, b, n, sigma, C, 1));
    double worst_off = 0, diff2 = 0;
    for (size_t i = 0; i < n; i++) {
        double k = (double)a[i] / h;
        worst_off = fmax(worst_off, fabs(k - nearbyint(k)));
        diff2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    }
    /* float rounding of h k moves it by at most ulp(|a|)/h lattice units (< 0.01 here) */
    CHECK(worst_off < 0.01);
    CHECK(sqrt(diff2) <= C + sqrt((double)n) * h + 1e-4);
    double eff = dpt_privacy_secure_sigma_eff(sigma, n), back = 0;
    CHECK_CLOSE(eff, sigma * C / (C + sqrt((double)n) * h), 0, 1e-12);
    CHECK_OK(dpt_privacy_secure_sigma_for(eff, n, &back));
    CHECK_CLOSE(back, sigma, 0, 1e-12);
    CHECK_STATUS(dpt_privacy_secure_sigma_for(1e6, n, &back), DPT_ERANGE);
    a[7] = 1e30f;
    CHECK_STATUS(dpt_privacy_noise_add_secure(&r1, a, n, sigma, C, 1), DPT_ERANGE);
    CHECK_ERR_HAS("coordinate 7");
    dpt_rng_free(&r1);
    dpt_rng_free(&r2);
    free(a);
    free(b);
}

/* Chi-square goodness of fit of N_Z(0, s^2) against its pmf exp(-x^2 / 2s^2) / Z for
 * s = 3 and s = 1: bins |x| <= 4s, tails pooled; statistic below the 0.1% critical value. */
static void test_discrete_gauss_gof(uint32_t s, double chi2_crit) {
    const size_t n = 200000;
    int lim = 4 * (int)s, nb = 2 * lim + 3;
    double *obs = calloc(nb, sizeof *obs), *pmf = calloc(nb, sizeof *pmf);
    dpt_rng r;
    dpt_rng_init(&r, 99, DPT_STREAM_NOISE);
    double m = 0, m2 = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t z = dpt_privacy_discrete_gauss(&r, s);
        m += (double)z, m2 += (double)z * z;
        int b = z < -lim ? 0 : z > lim ? nb - 1 : (int)z + lim + 1;
        obs[b]++;
    }
    double Z = 0;
    for (int x = -60 * (int)s; x <= 60 * (int)s; x++) Z += exp(-(double)x * x / (2.0 * s * s));
    for (int x = -60 * (int)s; x <= 60 * (int)s; x++) {
        int b = x < -lim ? 0 : x > lim ? nb - 1 : x + lim + 1;
        pmf[b] += exp(-(double)x * x / (2.0 * s * s)) / Z;
    }
    double chi2 = 0;
    for (int b = 0; b < nb; b++) chi2 += (obs[b] - n * pmf[b]) * (obs[b] - n * pmf[b]) / (n * pmf[b]);
    CHECK(chi2 < chi2_crit);
    if (!(chi2 < chi2_crit)) fprintf(stderr, "discrete Gaussian s=%u: chi2 = %g (critical %g)\n", s, chi2, chi2_crit);
    CHECK_CLOSE(m / n, 0.0, 5 * s / sqrt((double)n), 0);
    free(obs);
    free(pmf);
    dpt_rng_free(&r);
}

/* s = 0: N_Z(0, 0) is the point mass at 0 and nothing is drawn (it asserted s >= 1,
 * aborting the caller; privacy.h) */
static void test_discrete_gauss_zero(void) {
    dpt_rng a, b;
    CHECK_OK(dpt_rng_init(&a, 5, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&b, 5, DPT_STREAM_NOISE));
    int zero = 1;
    for (int i = 0; i < 100; i++) zero &= dpt_privacy_discrete_gauss(&a, 0) == 0;
    CHECK(zero);
    CHECK(dpt_rng_u64(&a) == dpt_rng_u64(&b));
    dpt_rng_free(&a), dpt_rng_free(&b);
}

int main(void) {
    test_discrete_gauss_zero();
    test_clip_equality(0.05);
    test_clip_equality(3.0);
    test_clip_layers();
    test_clip_errors();
    test_noise();
    test_noise_scaled();
    test_secure_threads();
    test_secure_lattice();
    test_discrete_gauss_gof(3, 54.05); /* 27 bins, df 26: chi2_{0.999} = 54.05 */
    test_discrete_gauss_gof(1, 31.3);  /* 11 bins, df 10: chi2_{0.999} = 29.59 */
    TEST_MAIN_END();
}
