/* privacy/dp_norm: DP normalization statistics. The clipped per-example statistics equal
 * a naive reference for every mode; neighbouring datasets (one example added, same seed)
 * move the release by exactly that example's clipped statistics (norm <= C, = C when
 * clipping is active); the noise added has std sigma C (fast and secure) and the released
 * means std sigma C / n; without noise and clipping the fit equals dpt_normalizer_fit; the
 * same seed gives the same statistics; bad arguments are clear errors. */
#include <dptrain/privacy.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testdata.h"
#include "testutil.h"

static const int MODES[3] = {DPT_NORM_SCALAR, DPT_NORM_PER_CHANNEL, DPT_NORM_PER_FEATURE};

/* Reference: per example, the group means and mean squares, clipped as one vector. */
static size_t naive_sums(const dpt_dataset *d, int mode, double C, double *sums) {
    size_t K = mode == DPT_NORM_SCALAR ? 1 : mode == DPT_NORM_PER_CHANNEL ? d->shape[0] : d->dim;
    size_t m = d->dim / K, clipped = 0;
    double *v = malloc(2 * K * sizeof(double));
    memset(sums, 0, 2 * K * sizeof(double));
    for (size_t i = 0; i < d->n; i++) {
        for (size_t c = 0; c < K; c++) {
            double a = 0, b = 0;
            for (size_t j = 0; j < m; j++) {
                double x = d->x[i * d->dim + c * m + j];
                a += x / (double)m;
                b += x * x / (double)m;
            }
            v[c] = a, v[K + c] = b;
        }
        double nrm = 0;
        for (size_t k = 0; k < 2 * K; k++) nrm += v[k] * v[k];
        nrm = sqrt(nrm);
        double f = nrm > C ? C / nrm : 1.0;
        clipped += nrm > C;
        for (size_t k = 0; k < 2 * K; k++) sums[k] += f * v[k];
    }
    free(v);
    return clipped;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the median over examples of ||v_i|| (the unclipped statistics) */
static double median_norm(const dpt_dataset *d, int mode) {
    size_t K = dpt_dp_norm_pairs(d, mode);
    double *v = malloc(2 * K * sizeof(double)), *nrm = malloc(d->n * sizeof(double));
    for (size_t i = 0; i < d->n; i++) {
        dpt_dataset one = *d;
        one.x = d->x + i * d->dim;
        one.n = 1;
        naive_sums(&one, mode, INFINITY, v);
        double s = 0;
        for (size_t k = 0; k < 2 * K; k++) s += v[k] * v[k];
        nrm[i] = sqrt(s);
    }
    qsort(nrm, d->n, sizeof(double), cmp_double);
    double med = nrm[d->n / 2];
    free(v), free(nrm);
    return med;
}

/* 3 channels of 2 x 3 pixels, values around 0.5 with channel-dependent offsets */
static void make_images(dpt_dataset *d, size_t n, uint64_t seed) {
    tu_make_clusters(d, n, 3, 2, 3, 3, seed, 0.4, 0.8, 1.0f);
}

static void test_sums_reference(void) {
    dpt_dataset d;
    make_images(&d, 400, 5);
    for (int mi = 0; mi < 3; mi++) {
        const int mode = MODES[mi];
        const size_t K = dpt_dp_norm_pairs(&d, mode);
        CHECK(K == (mode == DPT_NORM_SCALAR ? 1u : mode == DPT_NORM_PER_CHANNEL ? 3u : 18u));
        double *S = malloc(2 * K * sizeof(double)), *R = malloc(2 * K * sizeof(double));
        /* C = the median norm of the examples' statistics: about half are clipped */
        double C = median_norm(&d, mode);
        size_t nc = 0;
        CHECK_OK(dpt_dp_norm_sums(&d, mode, C, S, &nc));
        size_t rc = naive_sums(&d, mode, C, R);
        CHECK(nc == rc);
        CHECK(nc > 20 && nc < d.n - 20);
        for (size_t k = 0; k < 2 * K; k++) CHECK_CLOSE(S[k], R[k], 1e-9, 1e-12);
        free(S), free(R);
    }
    dpt_dataset_free(&d);
}

static void test_sensitivity(void) {
    const size_t n = 300;
    dpt_dataset big;
    make_images(&big, n + 1, 11); /* D' = D + the last example */
    for (int mi = 0; mi < 3; mi++) {
        const int mode = MODES[mi];
        const size_t K = dpt_dp_norm_pairs(&big, mode);
        const double C = 1.5;
        double *S = malloc(2 * K * sizeof(double)), *S2 = malloc(2 * K * sizeof(double)),
               *v = malloc(2 * K * sizeof(double));
        for (int longrow = 1; longrow >= 0; longrow--) {
            /* the added example: far out (clipped) or small (kept as it is) */
            for (size_t j = 0; j < big.dim; j++)
                big.x[n * big.dim + j] = longrow ? (float)(30.0 + j) : (float)(0.05 * (double)(j % 4));
            dpt_dataset small = big;
            small.n = n;
            /* the reference statistics of the added example alone */
            dpt_dataset one = big;
            one.x = big.x + n * big.dim;
            one.n = 1;
            naive_sums(&one, mode, INFINITY, v);
            double nrm = 0;
            for (size_t k = 0; k < 2 * K; k++) nrm += v[k] * v[k];
            nrm = sqrt(nrm);
            CHECK(longrow ? nrm > 2 * C : nrm < C);
            /* same seed: the noise cancels, the difference is the pre-noise difference */
            dpt_rng r1, r2;
            dpt_rng_init(&r1, dpt_dp_norm_seed(7), DPT_STREAM_NOISE);
            dpt_rng_init(&r2, dpt_dp_norm_seed(7), DPT_STREAM_NOISE);
            CHECK_OK(dpt_dp_norm_release(&small, mode, C, 2.0, &r1, 0, 1, S, NULL));
            CHECK_OK(dpt_dp_norm_release(&big, mode, C, 2.0, &r2, 0, 1, S2, NULL));
            dpt_rng_free(&r1), dpt_rng_free(&r2);
            double diff = 0;
            for (size_t k = 0; k < 2 * K; k++) {
                double dk = S2[k] - S[k];
                diff += dk * dk;
                CHECK_CLOSE(dk, v[k] * (nrm > C ? C / nrm : 1.0), 1e-6, 1e-6);
            }
            diff = sqrt(diff);
            CHECK(diff <= C * (1 + 1e-6));
            if (longrow) CHECK_CLOSE(diff, C, 1e-6, 1e-6);
            else CHECK_CLOSE(diff, nrm, 1e-6, 1e-6);
        }
        free(S), free(S2), free(v);
    }
    dpt_dataset_free(&big);
}

static void test_noise(void) {
    /* zero data: the release is pure noise, std sigma C; the means are noise / n */
    const size_t n = 3, dim = 20000;
    const double C = 2.0, sigma = 1.5;
    dpt_dataset d;
    tu_make_clusters(&d, n, 1, 1, dim, 2, 1, 1.0, 0.0, 0.0f);
    double *R = malloc(2 * dim * sizeof(double));
    dpt_rng r;
    dpt_rng_init(&r, dpt_dp_norm_seed(3), DPT_STREAM_NOISE);
    for (int secure = 0; secure <= 1; secure++) {
        CHECK_OK(dpt_dp_norm_release(&d, DPT_NORM_PER_FEATURE, C, sigma, &r, secure, 2, R, NULL));
        double s1 = 0, s2 = 0;
        for (size_t k = 0; k < 2 * dim; k++) s1 += R[k], s2 += R[k] * R[k];
        const double N = 2.0 * dim, mean = s1 / N, sd = sqrt(s2 / N - mean * mean), want = sigma * C;
        CHECK_CLOSE(mean, 0.0, 5 * want / sqrt(N), 0);
        CHECK_CLOSE(sd, want, 5 * want / sqrt(2 * N), 0);
        /* the fitted means: std sigma C / n; the variances are mostly below the noise floor */
        dpt_normalizer nz;
        CHECK_OK(dpt_dp_normalizer_fit(&d, DPT_NORM_PER_FEATURE, C, sigma, &r, secure, 2, &nz, NULL));
        CHECK(nz.dim == dim && nz.channels == 0);
        double m1 = 0, m2 = 0;
        size_t ones = 0;
        for (size_t c = 0; c < dim; c++) m1 += nz.mean[c], m2 += (double)nz.mean[c] * nz.mean[c], ones += nz.std[c] == 1.0f;
        const double msd = sqrt(m2 / dim - (m1 / dim) * (m1 / dim)), mwant = want / (double)n;
        CHECK_CLOSE(msd, mwant, 5 * mwant / sqrt(2.0 * dim), 0);
        CHECK(ones > dim * 99 / 100);
        dpt_normalizer_free(&nz);
    }
    dpt_rng_free(&r);
    free(R);
    dpt_dataset_free(&d);
}

/* Secure mode: the lattice point is round(S / h) of the double-precision sum itself. A sum
 * over a whole training set can be far above 2^24 lattice steps h, where float32 cannot
 * hold it to within h: rounded to float first, sums one step apart fell on the same point
 * (or a float ulp apart), an error up to |S| 2^-24 per coordinate outside the accounted
 * C + sqrt(n) h. With the same seed, S and S + h must give outputs exactly h apart, on the
 * lattice, and the draw must stay the one of the float path for small sums. */
static void test_secure_double_sum(void) {
    const double sigma = 1.0, C = 1.0, h = sigma * C / (double)(1u << DPT_DGAUSS_LOG2_SCALE);
    const size_t n = 3;
    const double base[3] = {3e8 * h + 0.25 * h, -7.5e8 * h + 0.4 * h, 1e9 * h - 0.3 * h};
    double a[3], b[3];
    for (size_t j = 0; j < n; j++) a[j] = base[j], b[j] = base[j] + h;
    dpt_rng r1, r2;
    dpt_rng_init(&r1, dpt_dp_norm_seed(11), DPT_STREAM_NOISE);
    dpt_rng_init(&r2, dpt_dp_norm_seed(11), DPT_STREAM_NOISE);
    CHECK_OK(dpt_privacy_noise_add_sum(&r1, a, n, sigma, C, 1, 1));
    CHECK_OK(dpt_privacy_noise_add_sum(&r2, b, n, sigma, C, 1, 1));
    for (size_t j = 0; j < n; j++) {
        const double ka = a[j] / h, kb = b[j] / h;
        CHECK_CLOSE(ka, nearbyint(ka), 1e-6, 0); /* on the lattice h Z */
        CHECK_CLOSE(kb - ka, 1.0, 1e-6, 0);      /* one step apart, as the sums */
        /* Z = k_out - round(S / h): a draw of std s = 2^14 (not the float rounding) */
        CHECK(fabs(ka - nearbyint(base[j] / h)) < 8.0 * (double)(1u << DPT_DGAUSS_LOG2_SCALE));
    }
    dpt_rng_free(&r1);
    dpt_rng_free(&r2);
    /* small sums (exact in float): the same output as dpt_privacy_noise_add_secure */
    double d[4] = {0.5, -1.25, 3.0, 1e-3};
    float f[4] = {0.5f, -1.25f, 3.0f, 1e-3f};
    dpt_rng_init(&r1, dpt_dp_norm_seed(12), DPT_STREAM_NOISE);
    dpt_rng_init(&r2, dpt_dp_norm_seed(12), DPT_STREAM_NOISE);
    d[3] = (double)f[3];
    CHECK_OK(dpt_privacy_noise_add_sum(&r1, d, 4, 2.0, 0.5, 1, 1));
    CHECK_OK(dpt_privacy_noise_add_secure(&r2, f, 4, 2.0, 0.5, 1));
    for (size_t j = 0; j < 4; j++) CHECK_CLOSE(d[j], (double)f[j], 1e-6 * fabs((double)f[j]) + 1e-12, 0);
    dpt_rng_free(&r1);
    dpt_rng_free(&r2);
}

static void test_fit_matches_exact(void) {
    dpt_dataset d;
    make_images(&d, 500, 21);
    for (int mi = 0; mi < 3; mi++) {
        const int mode = MODES[mi];
        dpt_normalizer ex, dp;
        CHECK_OK(dpt_normalizer_fit(&d, mode, &ex));
        /* no noise, no clipping: the same statistics */
        CHECK_OK(dpt_dp_normalizer_fit(&d, mode, 1e6, 0.0, NULL, 0, 1, &dp, NULL));
        const size_t K = ex.channels ? ex.channels : ex.dim;
        CHECK(dp.channels == ex.channels && dp.dim == ex.dim);
        for (size_t c = 0; c < K; c++) {
            CHECK_CLOSE(dp.mean[c], ex.mean[c], 1e-5, 1e-5);
            CHECK_CLOSE(dp.std[c], ex.std[c], 1e-5, 1e-5);
        }
        dpt_normalizer_free(&dp);
        /* with noise: within a few noise standard deviations (sigma C / n on each moment) */
        dpt_rng r;
        dpt_rng_init(&r, dpt_dp_norm_seed(5), DPT_STREAM_NOISE);
        const double C = 1e3, sigma = 0.5, tol = 6 * sigma * C / (double)d.n;
        CHECK_OK(dpt_dp_normalizer_fit(&d, mode, C, sigma, &r, 0, 1, &dp, NULL));
        for (size_t c = 0; c < K; c++) {
            CHECK_CLOSE(dp.mean[c], ex.mean[c], tol, 0);
            /* var error <= (1 + 2 |mean|) tol; std error = var error / (2 std) */
            CHECK_CLOSE(dp.std[c], ex.std[c], (1 + 2 * fabs(ex.mean[c])) * tol / ex.std[c], 0);
        }
        /* the same seed gives the same statistics, another seed others */
        dpt_normalizer again, other;
        dpt_rng_free(&r);
        dpt_rng_init(&r, dpt_dp_norm_seed(5), DPT_STREAM_NOISE);
        CHECK_OK(dpt_dp_normalizer_fit(&d, mode, C, sigma, &r, 0, 1, &again, NULL));
        dpt_rng_free(&r);
        dpt_rng_init(&r, dpt_dp_norm_seed(6), DPT_STREAM_NOISE);
        CHECK_OK(dpt_dp_normalizer_fit(&d, mode, C, sigma, &r, 0, 1, &other, NULL));
        CHECK(!memcmp(again.mean, dp.mean, K * sizeof(float)) && !memcmp(again.std, dp.std, K * sizeof(float)));
        CHECK(memcmp(other.mean, dp.mean, K * sizeof(float)) != 0);
        dpt_rng_free(&r);
        dpt_normalizer_free(&ex), dpt_normalizer_free(&dp), dpt_normalizer_free(&again), dpt_normalizer_free(&other);
    }
    /* a constant feature (std 0) is divided by 1, as in the exact fit */
    for (size_t i = 0; i < d.n; i++) d.x[i * d.dim + 4] = 0.25f;
    dpt_normalizer dp;
    CHECK_OK(dpt_dp_normalizer_fit(&d, DPT_NORM_PER_FEATURE, 1e6, 0.0, NULL, 0, 1, &dp, NULL));
    CHECK(dp.std[4] == 1.0f);
    CHECK_CLOSE(dp.mean[4], 0.25, 1e-6, 0);
    dpt_normalizer_free(&dp);
    dpt_dataset_free(&d);
}

static void test_errors(void) {
    dpt_dataset d;
    make_images(&d, 50, 2);
    dpt_normalizer nz;
    double S[64];
    dpt_rng r;
    dpt_rng_init(&r, dpt_dp_norm_seed(1), DPT_STREAM_NOISE);
    CHECK_STATUS(dpt_dp_normalizer_fit(&d, DPT_NORM_SCALAR, 0.0, 1.0, &r, 0, 1, &nz, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("C must be");
    CHECK_STATUS(dpt_dp_normalizer_fit(&d, DPT_NORM_SCALAR, INFINITY, 1.0, &r, 0, 1, &nz, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("C must be");
    CHECK_STATUS(dpt_dp_normalizer_fit(&d, DPT_NORM_SCALAR, 1.0, -1.0, &r, 0, 1, &nz, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("sigma");
    CHECK_STATUS(dpt_dp_normalizer_fit(&d, DPT_NORM_SCALAR, 1.0, NAN, &r, 0, 1, &nz, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("sigma");
    CHECK_STATUS(dpt_dp_normalizer_fit(&d, DPT_NORM_SCALAR, 1.0, 1.0, NULL, 0, 1, &nz, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("noise");
    CHECK_STATUS(dpt_dp_normalizer_fit(&d, 7, 1.0, 1.0, &r, 0, 1, &nz, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("mode");
    CHECK_STATUS(dpt_dp_normalizer_fit(NULL, DPT_NORM_SCALAR, 1.0, 1.0, &r, 0, 1, &nz, NULL), DPT_EINVAL);
    CHECK_STATUS(dpt_dp_norm_sums(&d, DPT_NORM_SCALAR, 1.0, NULL, NULL), DPT_EINVAL);
    d.shape[0] = 7; /* 7 channels do not divide 18 features */
    CHECK(dpt_dp_norm_pairs(&d, DPT_NORM_PER_CHANNEL) == 0);
    CHECK_STATUS(dpt_dp_norm_sums(&d, DPT_NORM_PER_CHANNEL, 1.0, S, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("channels");
    d.shape[0] = 3;
    d.x[7] = NAN;
    CHECK_STATUS(dpt_dp_norm_sums(&d, DPT_NORM_SCALAR, 1.0, S, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("NaN");
    dpt_rng_free(&r);
    dpt_dataset_free(&d);
}

int main(void) {
    test_sums_reference();
    test_sensitivity();
    test_noise();
    test_secure_double_sum();
    test_fit_matches_exact();
    test_errors();
    TEST_MAIN_END();
}
