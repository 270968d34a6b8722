/* DP-PCA by Analyze Gauss (Dwork, Talwar, Thakurta and Zhang 2014), as DP-MAC's MNIST
 * pipeline uses it: unit-norm rows, Gram matrix plus symmetric Gaussian noise (sensitivity
 * 1 for add/remove neighbours), top-k eigenvectors by LAPACKE (dpt_syev). See privacy.h. */
#include <dptrain/privacy.h>

#include <math.h>
#include <string.h>

#define PCA_CHUNK 2048

/* rows [lo, lo + c) of X scaled to unit norm into buf [c, d] (zero rows stay zero) */
static void unit_rows(const float *X, size_t lo, size_t c, size_t d, float *buf) {
    for (size_t i = 0; i < c; i++) {
        const float *x = X + (lo + i) * d;
        double s = 0;
        for (size_t j = 0; j < d; j++) s += (double)x[j] * x[j];
        const double inv = s > 0 ? 1.0 / sqrt(s) : 0.0;
        for (size_t j = 0; j < d; j++) buf[i * d + j] = (float)(x[j] * inv);
    }
}

dpt_status dpt_dp_pca_gram(const float *X, size_t n, size_t d, double *G) {
    DPT_CHECK((X || n == 0) && G && d >= 1, DPT_EINVAL, "dp_pca: NULL argument or zero dimension");
    DPT_CHECK(dpt_all_finite(X, n * d), DPT_EINVAL, "dp_pca: the data contain NaN or infinite values");
    const size_t c0 = n < PCA_CHUNK ? (n ? n : 1) : PCA_CHUNK;
    float *buf = dpt_alloc2(c0, d, sizeof(float), "dp_pca rows");
    float *g = dpt_alloc2(d, d, sizeof(float), "dp_pca partial Gram");
    if (!buf || !g) {
        dpt_free(buf), dpt_free(g);
        return DPT_ENOMEM;
    }
    memset(G, 0, d * d * sizeof(double));
    /* float GEMM per chunk of <= 2048 rows, summed across chunks in double */
    for (size_t lo = 0; lo < n; lo += c0) {
        size_t c = n - lo < c0 ? n - lo : c0;
        unit_rows(X, lo, c, d, buf);
        dpt_sgemm(1, 0, d, d, c, 1.0f, buf, d, buf, d, 0.0f, g, d);
        for (size_t j = 0; j < d * d; j++) G[j] += g[j];
    }
    /* exact symmetry (the GEMM need not return a bit-symmetric result) */
    for (size_t i = 0; i < d; i++)
        for (size_t j = i + 1; j < d; j++) G[j * d + i] = G[i * d + j];
    dpt_free(buf), dpt_free(g);
    return DPT_OK;
}

dpt_status dpt_dp_pca_noisy_gram(const float *X, size_t n, size_t d, double sigma, dpt_rng *noise, int secure,
                                 int threads, double *A) {
    DPT_CHECK(isfinite(sigma) && sigma >= 0, DPT_EINVAL, "dpt_dp_pca_noisy_gram: sigma (the noise std) must be >= 0, got %g",
              sigma);
    DPT_CHECK(noise || sigma == 0, DPT_EINVAL, "dp_pca: NULL noise stream");
    DPT_TRY(dpt_dp_pca_gram(X, n, d, A));
    if (sigma == 0) return DPT_OK;
    const size_t m = d * (d + 1) / 2; /* the upper triangle, diagonal included */
    float *e = dpt_alloc(m, sizeof(float), "dp_pca noise");
    if (!e) return DPT_ENOMEM;
    /* secure: the released entries themselves go through the lattice mechanism (rounded to
     * the lattice, then lattice noise), so the output is a function of a lattice point and
     * does not reveal where G lies between lattice points; fast: noise drawn alone, added
     * in double */
    size_t p = 0;
    for (size_t i = 0; i < d; i++)
        for (size_t j = i; j < d; j++, p++) e[p] = secure ? (float)A[i * d + j] : 0.0f;
    dpt_status s = secure ? dpt_privacy_noise_add_secure(noise, e, m, sigma, 1.0, threads)
                          : dpt_privacy_noise_add(noise, e, m, sigma, 1.0, threads);
    if (s == DPT_OK) {
        p = 0;
        for (size_t i = 0; i < d; i++)
            for (size_t j = i; j < d; j++, p++) {
                A[i * d + j] = secure ? (double)e[p] : A[i * d + j] + e[p];
                if (j != i) A[j * d + i] = A[i * d + j];
            }
    }
    dpt_free(e);
    return s;
}

dpt_status dpt_dp_pca_fit(const float *X, size_t n, size_t d, size_t k, double sigma, dpt_rng *noise, int secure,
                          int threads, double *V, double *evals) {
    DPT_CHECK(k >= 1 && k <= d, DPT_EINVAL, "dpt_dp_pca_fit: k = %zu components requested from d = %zu dimensions", k,
              d);
    DPT_CHECK(n >= 1 && V, DPT_EINVAL, "dp_pca: empty data or NULL output");
    double *A = dpt_alloc2(d, d, sizeof(double), "dp_pca matrix");
    double *Z = dpt_alloc2(d, d, sizeof(double), "dp_pca eigenvectors");
    double *w = dpt_alloc(d, sizeof(double), "dp_pca eigenvalues");
    dpt_status s = DPT_ENOMEM;
    if (A && Z && w) s = dpt_dp_pca_noisy_gram(X, n, d, sigma, noise, secure, threads, A);
    if (s == DPT_OK) {
        for (size_t j = 0; j < d * d; j++) A[j] /= (double)n;
        s = dpt_syev(d, A, w, Z);
    }
    if (s == DPT_OK) {
        for (size_t c = 0; c < k; c++) {
            const size_t col = d - 1 - c; /* ascending eigenvalues: the largest last */
            size_t arg = 0;
            for (size_t j = 1; j < d; j++)
                if (fabs(Z[j * d + col]) > fabs(Z[arg * d + col])) arg = j;
            const double sg = Z[arg * d + col] < 0 ? -1.0 : 1.0;
            for (size_t j = 0; j < d; j++) V[j * k + c] = sg * Z[j * d + col];
            if (evals) evals[c] = w[col];
        }
    }
    dpt_free(A), dpt_free(Z), dpt_free(w);
    return s;
}

dpt_status dpt_dp_pca_project(const float *X, size_t n, size_t d, const double *V, size_t k, float *out) {
    DPT_CHECK((X || n == 0) && V && out && k >= 1 && d >= 1, DPT_EINVAL, "dp_pca_project: NULL argument");
    const size_t c0 = n < PCA_CHUNK ? (n ? n : 1) : PCA_CHUNK;
    float *buf = dpt_alloc2(c0, d, sizeof(float), "dp_pca rows");
    float *Vf = dpt_alloc2(d, k, sizeof(float), "dp_pca components");
    if (!buf || !Vf) {
        dpt_free(buf), dpt_free(Vf);
        return DPT_ENOMEM;
    }
    for (size_t j = 0; j < d * k; j++) Vf[j] = (float)V[j];
    for (size_t lo = 0; lo < n; lo += c0) { /* out rows = unit rows [c, d] x V [d, k] */
        size_t c = n - lo < c0 ? n - lo : c0;
        unit_rows(X, lo, c, d, buf);
        dpt_sgemm(0, 0, c, k, d, 1.0f, buf, d, Vf, k, 0.0f, out + lo * k, k);
    }
    dpt_free(buf), dpt_free(Vf);
    return DPT_OK;
}

/* ==== DP mean (centring before DP-PCA) ==== */

dpt_status dpt_dp_mean_sum(const float *X, size_t n, size_t d, double C, double *sum, size_t *clipped) {
    DPT_CHECK((X || n == 0) && sum && d >= 1, DPT_EINVAL, "dp_mean: NULL argument or zero dimension");
    DPT_CHECK(isfinite(C) && C > 0, DPT_EINVAL, "dpt_dp_mean_sum: C (the row norm bound) must be > 0, got %g", C);
    DPT_CHECK(dpt_all_finite(X, n * d), DPT_EINVAL, "dp_mean: the data contain NaN or infinite values");
    memset(sum, 0, d * sizeof(double));
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) {
        const float *x = X + i * d;
        double s = 0;
        for (size_t j = 0; j < d; j++) s += (double)x[j] * x[j];
        const double nrm = sqrt(s);
        double f = 1.0;
        if (nrm > C) f = C / nrm, nc++;
        for (size_t j = 0; j < d; j++) sum[j] += f * x[j];
    }
    if (clipped) *clipped = nc;
    return DPT_OK;
}

dpt_status dpt_dp_mean(const float *X, size_t n, size_t d, double C, double sigma, dpt_rng *noise, int secure,
                       int threads, double *mu, size_t *clipped) {
    DPT_CHECK(n >= 1 && mu, DPT_EINVAL, "dp_mean: empty data or NULL output");
    DPT_CHECK(isfinite(C) && C > 0, DPT_EINVAL, "dpt_dp_mean: C (the row norm bound) must be > 0, got %g", C);
    DPT_CHECK(isfinite(sigma) && sigma >= 0, DPT_EINVAL, "dpt_dp_mean: sigma (the noise multiplier) must be >= 0, got %g",
              sigma);
    DPT_CHECK(noise || sigma == 0, DPT_EINVAL, "dp_mean: NULL noise stream");
    DPT_TRY(dpt_dp_mean_sum(X, n, d, C, mu, clipped));
    DPT_TRY(dpt_privacy_noise_add_sum(noise, mu, d, sigma, C, secure, threads));
    for (size_t j = 0; j < d; j++) mu[j] /= (double)n;
    return DPT_OK;
}

dpt_status dpt_dp_center(float *X, size_t n, size_t d, const double *mu) {
    DPT_CHECK((X || n == 0) && mu && d >= 1, DPT_EINVAL, "dp_center: NULL argument");
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++) X[i * d + j] = (float)((double)X[i * d + j] - mu[j]);
    return DPT_OK;
}
