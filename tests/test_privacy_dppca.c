/* privacy/dp_pca: Analyze Gauss. The Gram matrix of unit-normalized rows equals a naive
 * double loop; neighbouring data (one row added) change its released upper triangle by
 * exactly ||x/||x|| x^T/||x|| ||_upper <= 1; the noise is symmetric with the configured std;
 * without noise the top eigenvectors match an independent power iteration with deflation
 * and the projection equals a naive product; bad arguments are clear errors. The secure
 * path keeps the data (A - G is pure noise of the configured std on non-zero data too).
 * DP mean: the clipped sum equals a naive loop, a neighbour (one row added) changes it by
 * that row clipped to C (norm <= C, = C when clipping is active), the noise of the released
 * mean has std sigma C / n (fast and secure), centring subtracts mu from every row, bad
 * arguments name the flag. */
#include <dptrain/privacy.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static float *make_data(size_t n, size_t d, uint64_t seed) {
    /* variance concentrated on a few directions, distinct scales */
    float *X = malloc(n * d * sizeof(float));
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++) X[i * d + j] = (float)(dpt_rng_gauss_ref(&r) * (j < 4 ? 4.0 - j : 0.3) + 0.1);
    dpt_rng_free(&r);
    return X;
}

static void naive_gram(const float *X, size_t n, size_t d, double *G) {
    memset(G, 0, d * d * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (size_t j = 0; j < d; j++) s += (double)X[i * d + j] * X[i * d + j];
        double inv = s > 0 ? 1 / sqrt(s) : 0;
        for (size_t a = 0; a < d; a++)
            for (size_t b = 0; b < d; b++) G[a * d + b] += X[i * d + a] * inv * X[i * d + b] * inv;
    }
}

static void test_gram_and_sensitivity(void) {
    const size_t n = 300, d = 12;
    float *X = make_data(n + 1, d, 3);
    X[(n - 1) * d + 2] = 0; /* harmless */
    for (size_t j = 0; j < d; j++) X[5 * d + j] = 0; /* a zero row stays zero */
    double *G = malloc(d * d * sizeof(double)), *R = malloc(d * d * sizeof(double)), *G2 = malloc(d * d * sizeof(double));
    CHECK_OK(dpt_dp_pca_gram(X, n, d, G));
    naive_gram(X, n, d, R);
    for (size_t j = 0; j < d * d; j++) CHECK_CLOSE(G[j], R[j], 1e-4, 1e-5);
    for (size_t a = 0; a < d; a++)
        for (size_t b = 0; b < d; b++) CHECK(G[a * d + b] == G[b * d + a]);
    /* neighbour: one more row (scaled up: normalization removes the scale) */
    for (size_t j = 0; j < d; j++) X[n * d + j] *= 100.0f;
    CHECK_OK(dpt_dp_pca_gram(X, n + 1, d, G2));
    double up = 0, full = 0;
    for (size_t a = 0; a < d; a++)
        for (size_t b = 0; b < d; b++) {
            double v = G2[a * d + b] - G[a * d + b];
            full += v * v;
            if (b >= a) up += v * v;
        }
    CHECK(sqrt(up) <= 1.0 + 1e-4);      /* the released entries: sensitivity 1 */
    CHECK_CLOSE(sqrt(full), 1.0, 1e-4, 0); /* ||x x^T||_F = ||x||^2 = 1 for a unit row */
    CHECK(sqrt(up) > 0.5);
    free(X), free(G), free(R), free(G2);
}

static void test_noise(void) {
    const size_t d = 150, n = 10;
    float *X = calloc(n * d, sizeof(float)); /* zero rows: G = 0, A = pure noise */
    double *A = malloc(d * d * sizeof(double));
    const double sigma = 2.5;
    dpt_rng r;
    dpt_rng_init(&r, dpt_dp_pca_seed(9), DPT_STREAM_NOISE);
    for (int secure = 0; secure <= 1; secure++) {
        CHECK_OK(dpt_dp_pca_noisy_gram(X, n, d, sigma, &r, secure, 2, A));
        double s1 = 0, s2 = 0;
        size_t cnt = 0, asym = 0;
        for (size_t a = 0; a < d; a++)
            for (size_t b = a; b < d; b++) {
                s1 += A[a * d + b], s2 += A[a * d + b] * A[a * d + b], cnt++;
                asym += A[a * d + b] != A[b * d + a];
            }
        CHECK(asym == 0);
        double mean = s1 / cnt, sd = sqrt(s2 / cnt - mean * mean);
        CHECK_CLOSE(mean, 0.0, 5 * sigma / sqrt((double)cnt), 0);
        CHECK_CLOSE(sd, sigma, 5 * sigma / sqrt(2.0 * cnt), 0);
        /* diagonal entries have the same std (one draw each, not two) */
        double dd = 0;
        for (size_t a = 0; a < d; a++) dd += A[a * d + a] * A[a * d + a];
        CHECK_CLOSE(sqrt(dd / d), sigma, 6 * sigma / sqrt(2.0 * d), 0);
    }
    dpt_rng_free(&r);
    free(X), free(A);
}

/* power iteration with deflation on the naive Gram / n */
static void power_top(const double *G0, size_t d, size_t k, double *V, double *ev) {
    double *G = malloc(d * d * sizeof(double)), *v = malloc(d * sizeof(double)), *w = malloc(d * sizeof(double));
    memcpy(G, G0, d * d * sizeof(double));
    for (size_t c = 0; c < k; c++) {
        for (size_t j = 0; j < d; j++) v[j] = 1.0 + 0.01 * (double)j;
        double lam = 0;
        for (int it = 0; it < 5000; it++) {
            double nn = 0;
            for (size_t a = 0; a < d; a++) {
                w[a] = 0;
                for (size_t b = 0; b < d; b++) w[a] += G[a * d + b] * v[b];
                nn += w[a] * w[a];
            }
            nn = sqrt(nn);
            lam = nn;
            for (size_t a = 0; a < d; a++) v[a] = w[a] / nn;
        }
        size_t arg = 0;
        for (size_t j = 1; j < d; j++)
            if (fabs(v[j]) > fabs(v[arg])) arg = j;
        double sg = v[arg] < 0 ? -1 : 1;
        for (size_t j = 0; j < d; j++) V[j * k + c] = sg * v[j];
        ev[c] = lam;
        for (size_t a = 0; a < d; a++)
            for (size_t b = 0; b < d; b++) G[a * d + b] -= lam * v[a] * v[b];
    }
    free(G), free(v), free(w);
}

static void test_eigenvectors_and_projection(void) {
    const size_t n = 400, d = 10, k = 3;
    float *X = make_data(n, d, 21);
    double *G = malloc(d * d * sizeof(double)), *Vr = malloc(d * k * sizeof(double)), evr[3];
    double *V = malloc(d * k * sizeof(double)), ev[3];
    naive_gram(X, n, d, G);
    for (size_t j = 0; j < d * d; j++) G[j] /= (double)n;
    power_top(G, d, k, Vr, evr);
    CHECK_OK(dpt_dp_pca_fit(X, n, d, k, 0.0, NULL, 0, 1, V, ev));
    for (size_t c = 0; c < k; c++) {
        CHECK_CLOSE(ev[c], evr[c], 1e-5, 1e-4);
        for (size_t j = 0; j < d; j++) CHECK_CLOSE(V[j * k + c], Vr[j * k + c], 1e-3, 0);
    }
    CHECK(ev[0] > ev[1] && ev[1] > ev[2]);
    float *P = malloc(n * k * sizeof(float));
    CHECK_OK(dpt_dp_pca_project(X, n, d, V, k, P));
    for (size_t i = 0; i < n; i += 37) {
        double s = 0;
        for (size_t j = 0; j < d; j++) s += (double)X[i * d + j] * X[i * d + j];
        for (size_t c = 0; c < k; c++) {
            double acc = 0;
            for (size_t j = 0; j < d; j++) acc += X[i * d + j] / sqrt(s) * V[j * k + c];
            CHECK_CLOSE(P[i * k + c], acc, 1e-6, 1e-5);
        }
    }
    /* the raw projection keeps each row's scale: rows as given times V (no unit norm) */
    for (size_t j = 0; j < n * d; j++) X[j] *= 3.0f;
    CHECK_OK(dpt_dp_pca_project_raw(X, n, d, V, k, P));
    for (size_t i = 0; i < n; i += 37) {
        double s = 0;
        for (size_t j = 0; j < d; j++) s += (double)X[i * d + j] * X[i * d + j];
        CHECK(s > 1.5); /* not unit rows: the test below separates the two projections */
        for (size_t c = 0; c < k; c++) {
            double acc = 0;
            for (size_t j = 0; j < d; j++) acc += (double)X[i * d + j] * V[j * k + c];
            CHECK_CLOSE(P[i * k + c], acc, 1e-6, 1e-5);
        }
    }
    for (size_t j = 0; j < n * d; j++) X[j] /= 3.0f;
    /* with noise the subspace moves, but a little noise keeps the top direction */
    dpt_rng r;
    dpt_rng_init(&r, dpt_dp_pca_seed(1), DPT_STREAM_NOISE);
    double *Vn = malloc(d * k * sizeof(double));
    CHECK_OK(dpt_dp_pca_fit(X, n, d, k, 1.0, &r, 0, 1, Vn, NULL));
    double dot = 0;
    for (size_t j = 0; j < d; j++) dot += Vn[j * k] * V[j * k];
    CHECK(fabs(dot) > 0.95);
    /* errors */
    CHECK_STATUS(dpt_dp_pca_fit(X, n, d, 0, 1.0, &r, 0, 1, Vn, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dp_pca_fit: k = 0 components requested");
    CHECK_STATUS(dpt_dp_pca_fit(X, n, d, d + 1, 1.0, &r, 0, 1, Vn, NULL), DPT_EINVAL);
    CHECK_STATUS(dpt_dp_pca_fit(X, n, d, 2, -1.0, &r, 0, 1, Vn, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dp_pca_noisy_gram: sigma (the noise std) must be >= 0");
    X[3] = NAN;
    CHECK_STATUS(dpt_dp_pca_fit(X, n, d, 2, 1.0, &r, 0, 1, Vn, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("NaN");
    dpt_rng_free(&r);
    free(X), free(G), free(Vr), free(V), free(P), free(Vn);
}

/* secure mode on non-zero data: the released entries are G (rounded to the lattice) plus
 * noise of std sigma, not noise alone */
static void test_secure_keeps_data(void) {
    const size_t n = 200, d = 60;
    float *X = make_data(n, d, 5);
    double *G = malloc(d * d * sizeof(double)), *A = malloc(d * d * sizeof(double));
    CHECK_OK(dpt_dp_pca_gram(X, n, d, G));
    const double sigma = 0.5;
    dpt_rng r;
    dpt_rng_init(&r, dpt_dp_pca_seed(4), DPT_STREAM_NOISE);
    for (int secure = 0; secure <= 1; secure++) {
        CHECK_OK(dpt_dp_pca_noisy_gram(X, n, d, sigma, &r, secure, 1, A));
        double s1 = 0, s2 = 0;
        size_t cnt = 0;
        for (size_t a = 0; a < d; a++)
            for (size_t b = a; b < d; b++) {
                double v = A[a * d + b] - G[a * d + b];
                s1 += v, s2 += v * v, cnt++;
            }
        double mean = s1 / cnt, sd = sqrt(s2 / cnt - mean * mean);
        CHECK_CLOSE(mean, 0.0, 5 * sigma / sqrt((double)cnt), 0);
        CHECK_CLOSE(sd, sigma, 5 * sigma / sqrt(2.0 * cnt), 0);
        if (secure) {
            /* every released entry is a lattice point h k, h = sigma 2^-14 (= 2^-15 here, exact
             * in float): the data were rounded to the lattice, not added to lattice noise */
            const double h = sigma * ldexp(1.0, -DPT_DGAUSS_LOG2_SCALE);
            size_t off = 0;
            for (size_t a = 0; a < d; a++)
                for (size_t b = a; b < d; b++) off += A[a * d + b] / h != floor(A[a * d + b] / h);
            CHECK(off == 0);
        }
    }
    dpt_rng_free(&r);
    free(X), free(G), free(A);
}

static void test_dp_mean_sensitivity(void) {
    const size_t n = 250, d = 7;
    const double C = 3.0;
    float *X = make_data(n + 1, d, 17); /* row norms around 3-5: some clipped, some not */
    double *S = malloc(d * sizeof(double)), *R = malloc(d * sizeof(double)), *S2 = malloc(d * sizeof(double));
    size_t nc = 0, rc = 0;
    CHECK_OK(dpt_dp_mean_sum(X, n, d, C, S, &nc));
    tu_clipped_sum(X, n, d, C, R, &rc);
    CHECK(nc == rc && nc > 10 && nc < n - 10);
    for (size_t j = 0; j < d; j++) CHECK_CLOSE(S[j], R[j], 1e-9, 1e-12);
    /* neighbour: one row added, long (clipped) then short (kept as it is) */
    for (int longrow = 1; longrow >= 0; longrow--) {
        double nrm = 0;
        for (size_t j = 0; j < d; j++) {
            X[n * d + j] = (float)(longrow ? 40.0 * (j + 1) : 0.2 * (j % 3));
            nrm += (double)X[n * d + j] * X[n * d + j];
        }
        nrm = sqrt(nrm);
        CHECK_OK(dpt_dp_mean_sum(X, n + 1, d, C, S2, NULL));
        double diff = 0;
        for (size_t j = 0; j < d; j++) {
            double v = S2[j] - S[j];
            diff += v * v;
            double want = X[n * d + j] * (nrm > C ? C / nrm : 1.0);
            CHECK_CLOSE(v, want, 1e-9, 1e-9);
        }
        diff = sqrt(diff);
        CHECK(diff <= C * (1 + 1e-12));
        if (longrow) CHECK_CLOSE(diff, C, 1e-9, 1e-9);
        else CHECK_CLOSE(diff, nrm, 1e-9, 1e-9);
    }
    /* no noise: the clipped mean itself; centring subtracts it from every row */
    double *mu = malloc(d * sizeof(double));
    CHECK_OK(dpt_dp_mean(X, n, d, C, 0.0, NULL, 0, 1, mu, NULL));
    for (size_t j = 0; j < d; j++) CHECK_CLOSE(mu[j], R[j] / n, 1e-12, 1e-12);
    float *Y = malloc(n * d * sizeof(float));
    memcpy(Y, X, n * d * sizeof(float));
    CHECK_OK(dpt_dp_center(Y, n, d, mu));
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++) CHECK_CLOSE(Y[i * d + j], X[i * d + j] - mu[j], 1e-6, 1e-6);
    /* errors name the flag */
    dpt_rng r;
    dpt_rng_init(&r, dpt_dp_mean_seed(1), DPT_STREAM_NOISE);
    CHECK_STATUS(dpt_dp_mean(X, n, d, 0.0, 1.0, &r, 0, 1, mu, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dp_mean: C (the row norm bound) must be > 0");
    CHECK_STATUS(dpt_dp_mean(X, n, d, INFINITY, 1.0, &r, 0, 1, mu, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dp_mean: C (the row norm bound) must be > 0");
    CHECK_STATUS(dpt_dp_mean(X, n, d, C, -1.0, &r, 0, 1, mu, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dp_mean: sigma (the noise multiplier) must be >= 0");
    CHECK_STATUS(dpt_dp_mean(X, n, d, C, NAN, &r, 0, 1, mu, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dp_mean: sigma (the noise multiplier) must be >= 0");
    CHECK_STATUS(dpt_dp_mean_sum(X, n, d, -1.0, mu, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dp_mean_sum: C (the row norm bound) must be > 0, got -1");
    CHECK_STATUS(dpt_dp_mean(X, 0, d, C, 1.0, &r, 0, 1, mu, NULL), DPT_EINVAL);
    CHECK_STATUS(dpt_dp_mean(X, n, d, C, 1.0, NULL, 0, 1, mu, NULL), DPT_EINVAL);
    X[4] = NAN;
    CHECK_STATUS(dpt_dp_mean(X, n, d, C, 1.0, &r, 0, 1, mu, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("NaN");
    dpt_rng_free(&r);
    free(X), free(S), free(R), free(S2), free(mu), free(Y);
}

static void test_dp_mean_noise(void) {
    /* zero rows: the released mean is pure noise / n, std sigma C / n per coordinate */
    const size_t n = 4, d = 60000;
    const double C = 2.0, sigma = 1.5, want = sigma * C / (double)n;
    float *X = calloc(n * d, sizeof(float));
    double *mu = malloc(d * sizeof(double));
    dpt_rng r;
    dpt_rng_init(&r, dpt_dp_mean_seed(3), DPT_STREAM_NOISE);
    for (int secure = 0; secure <= 1; secure++) {
        CHECK_OK(dpt_dp_mean(X, n, d, C, sigma, &r, secure, 2, mu, NULL));
        double s1 = 0, s2 = 0;
        for (size_t j = 0; j < d; j++) s1 += mu[j], s2 += mu[j] * mu[j];
        double mean = s1 / d, sd = sqrt(s2 / d - mean * mean);
        CHECK_CLOSE(mean, 0.0, 5 * want / sqrt((double)d), 0);
        CHECK_CLOSE(sd, want, 5 * want / sqrt(2.0 * d), 0);
    }
    dpt_rng_free(&r);
    free(X), free(mu);
}

int main(void) {
    test_gram_and_sensitivity();
    test_noise();
    test_eigenvectors_and_projection();
    test_secure_keeps_data();
    test_dp_mean_sensitivity();
    test_dp_mean_noise();
    TEST_MAIN_END();
}
