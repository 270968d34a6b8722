/* core: errors, allocation, RNG streams and samplers (statistical checks), bulk fills that
 * do not depend on the thread count, sgemm against the naive loop, syev, SHA-256, files. */
#include <dptrain/core.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static void test_errors(void) {
    CHECK_STATUS(dpt_set_error(DPT_EINVAL, "--lr: %s", "negative"), DPT_EINVAL);
    CHECK(strcmp(dpt_last_error(), "--lr: negative") == 0);
    dpt_error_context(DPT_EINVAL, "train");
    CHECK(strcmp(dpt_last_error(), "train: --lr: negative") == 0);
    CHECK(strcmp(dpt_status_name(DPT_EFORMAT), "malformed input") == 0);
    void *p = dpt_alloc(SIZE_MAX / 2, 4, "huge");
    CHECK(p == NULL);
    CHECK_ERR_HAS("huge: size overflow");
    float *f = dpt_alloc(100, sizeof(float), "x");
    CHECK(f && ((uintptr_t)f % 64) == 0 && f[99] == 0.0f);
    dpt_free(f);
    dpt_free(NULL);
}

static void test_rng_streams(void) {
    dpt_rng a, b, c;
    CHECK_OK(dpt_rng_init(&a, 42, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&b, 42, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&c, 42, DPT_STREAM_DATA));
    int same = 1, diff_stream = 0;
    for (int i = 0; i < 1000; i++) {
        uint32_t x = dpt_rng_u32(&a), y = dpt_rng_u32(&b), z = dpt_rng_u32(&c);
        same &= x == y;
        diff_stream += x != z;
    }
    CHECK(same);
    CHECK(diff_stream > 990);
    /* save / restore mid-buffer continues identically */
    dpt_rng_state st;
    for (int i = 0; i < 77; i++) (void)dpt_rng_u32(&a);
    CHECK_OK(dpt_rng_gauss_fill(&a, (float[8]){0}, 8, 1.0f, 0, 1));
    dpt_rng_get_state(&a, &st);
    uint32_t want[600];
    for (int i = 0; i < 600; i++) want[i] = dpt_rng_u32(&a);
    float fa[10], fb[10];
    CHECK_OK(dpt_rng_gauss_fill(&a, fa, 10, 1.0f, 0, 1));
    dpt_rng d;
    CHECK_OK(dpt_rng_init(&d, 1, 1));
    CHECK_OK(dpt_rng_set_state(&d, &st));
    int ok = 1;
    for (int i = 0; i < 600; i++) ok &= dpt_rng_u32(&d) == want[i];
    CHECK(ok);
    CHECK_OK(dpt_rng_gauss_fill(&d, fb, 10, 1.0f, 0, 1));
    CHECK(memcmp(fa, fb, sizeof fa) == 0);
    /* a corrupted state is refused */
    st.pos = 100000;
    CHECK_STATUS(dpt_rng_set_state(&d, &st), DPT_EFORMAT);
    dpt_rng s1, s2;
    CHECK_OK(dpt_rng_init_secure(&s1, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init_secure(&s2, DPT_STREAM_NOISE));
    CHECK(s1.secure == 1 && dpt_rng_u64(&s1) != dpt_rng_u64(&s2));
    dpt_rng_get_state(&s1, &st);
    CHECK_STATUS(dpt_rng_set_state(&d, &st), DPT_EINVAL);
    CHECK_ERR_HAS("secure");
    dpt_rng_free(&a), dpt_rng_free(&b), dpt_rng_free(&c), dpt_rng_free(&d);
    dpt_rng_free(&s1), dpt_rng_free(&s2);
    dpt_rng_free(NULL);
}

/* Moments of n draws: mean, variance, 4th standardized moment, and the Kolmogorov-Smirnov
 * distance to N(0,1) (sorted). */
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static void check_normal(const double *v0, size_t n, const char *what) {
    double *v = malloc(n * sizeof *v);
    memcpy(v, v0, n * sizeof *v);
    double m = 0, m2 = 0, m4 = 0;
    for (size_t i = 0; i < n; i++) m += v[i];
    m /= n;
    for (size_t i = 0; i < n; i++) {
        double d = v[i] - m;
        m2 += d * d;
        m4 += d * d * d * d;
    }
    m2 /= n;
    m4 /= n;
    qsort(v, n, sizeof *v, cmp_d);
    double ks = 0;
    for (size_t i = 0; i < n; i++) {
        double F = 0.5 * erfc(-v[i] / sqrt(2.0));
        double d1 = fabs(F - (double)i / n), d2 = fabs(F - (double)(i + 1) / n);
        if (d1 > ks) ks = d1;
        if (d2 > ks) ks = d2;
    }
    /* 5-sigma bounds: mean se 1/sqrt(n); var se sqrt(2/n); kurtosis se sqrt(24/n);
       KS critical value at p = 1e-6 is about 1.95 / sqrt(n) */
    printf("%s: mean %.5f var %.5f kurt %.4f KS %.5f\n", what, m, m2, m4 / (m2 * m2), ks);
    CHECK_CLOSE(m, 0.0, 5.0 / sqrt(n), 0);
    CHECK_CLOSE(m2, 1.0, 5.0 * sqrt(2.0 / n), 0);
    CHECK_CLOSE(m4 / (m2 * m2), 3.0, 5.0 * sqrt(24.0 / n), 0);
    CHECK(ks < 1.95 / sqrt(n));
    free(v);
}

/* Chi-square of n draws over bins of width 0.05 on [-6, 6] (beyond +-6 in the end bins;
 * adjacent bins merged until each group expects >= 20), against the normal CDF: a wrong
 * ziggurat table entry, wedge test or tail moves mass between nearby bins, which the
 * moments and KS above see only at the margin (a 0.6% error in the layer area: chi2 553
 * against a threshold of 279, the KS statistic just over its bound for one of the two
 * samplers). Threshold: df + 6 sqrt(2 df)
 * (the statistic's mean plus 6 of its standard deviations). */
static void check_chi2(const float *v, size_t n, const char *what) {
    enum { NB = 240 };
    double lo = -6.0, w = 0.05, cnt[NB] = {0}, pr[NB];
    for (size_t i = 0; i < n; i++) {
        double x = v[i];
        long b = (long)floor((x - lo) / w);
        if (b < 0) b = 0;
        if (b >= NB) b = NB - 1;
        cnt[b]++;
    }
    for (int b = 0; b < NB; b++) {
        double a = b == 0 ? -INFINITY : lo + b * w, c = b == NB - 1 ? INFINITY : lo + (b + 1) * w;
        pr[b] = 0.5 * erfc(-c / sqrt(2.0)) - 0.5 * erfc(-a / sqrt(2.0));
    }
    /* groups of adjacent bins, each expecting >= 20 (a thin right end joins the last) */
    double ge[NB], go[NB], e = 0, o = 0;
    int ng = 0;
    for (int b = 0; b < NB; b++) {
        e += pr[b] * n;
        o += cnt[b];
        if (e >= 20) ge[ng] = e, go[ng] = o, ng++, e = o = 0;
    }
    if (ng > 0) ge[ng - 1] += e, go[ng - 1] += o;
    double chi2 = 0;
    for (int g = 0; g < ng; g++) chi2 += (go[g] - ge[g]) * (go[g] - ge[g]) / ge[g];
    int df = ng - 1;
    double thr = df + 6.0 * sqrt(2.0 * df);
    printf("%s: chi2 %.1f on %d df (threshold %.1f)\n", what, chi2, df, thr);
    CHECK(chi2 < thr);
}

static void test_gauss_chi2(void) {
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 12, DPT_STREAM_NOISE));
    size_t n = 4000000;
    float *f = malloc(n * sizeof *f);
    CHECK_OK(dpt_rng_gauss_fill(&r, f, n, 1.0f, 0, 2));
    check_chi2(f, n, "gauss_fill chi2");
    /* beyond the ziggurat's base (R = 3.654, the exact tail) and deep in it */
    const double cut[2] = {3.6541528853610088, 4.5};
    for (int c = 0; c < 2; c++) {
        size_t t = 0;
        for (size_t i = 0; i < n; i++) t += fabsf(f[i]) > cut[c];
        double p = erfc(cut[c] / sqrt(2.0));
        CHECK_CLOSE((double)t / n, p, 5.0 * sqrt(p / n), 0);
    }
    for (size_t i = 0; i < n; i++) f[i] = dpt_rng_gauss(&r);
    check_chi2(f, n, "dpt_rng_gauss chi2");
    free(f);
    dpt_rng_free(&r);
}

static void test_samplers(void) {
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 7, DPT_STREAM_NOISE));
    size_t n = 400000;
    double *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = dpt_rng_gauss_ref(&r);
    check_normal(v, n, "gauss_ref");
    for (size_t i = 0; i < n; i++) v[i] = dpt_rng_gauss(&r);
    check_normal(v, n, "ziggurat");
    /* the tail beyond the ziggurat's R = 3.44 is sampled: its mass 5.8e-4 within 5 sigma */
    size_t tail = 0;
    for (size_t i = 0; i < n; i++) tail += fabs(v[i]) > 3.6;
    double p_tail = erfc(3.6 / sqrt(2.0));
    CHECK_CLOSE((double)tail / n, p_tail, 5.0 * sqrt(p_tail / n), 0);
    float *f = malloc(n * sizeof *f);
    CHECK_OK(dpt_rng_gauss_fill(&r, f, n, 2.5f, 0, 2));
    for (size_t i = 0; i < n; i++) v[i] = f[i] / 2.5;
    check_normal(v, n, "gauss_fill");
    /* the fill finishes rejected draws in a second pass (wedges and the tail): its tail
       mass beyond 3.6 too, and an exact copy of the fast path would miss it entirely */
    size_t tail_f = 0;
    for (size_t i = 0; i < n; i++) tail_f += fabs(v[i]) > 3.6;
    CHECK_CLOSE((double)tail_f / n, p_tail, 5.0 * sqrt(p_tail / n), 0);
    CHECK_OK(dpt_rng_gauss_fill_ref(&r, f, n, 1.0f, 0));
    for (size_t i = 0; i < n; i++) v[i] = f[i];
    check_normal(v, n, "gauss_fill_ref");
    /* uniform: mean 1/2, variance 1/12; below(n) unbiased over 3 buckets */
    double m = 0, m2 = 0;
    size_t cnt[3] = {0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        double u = dpt_rng_uniform(&r);
        CHECK(u >= 0.0 && u < 1.0);
        m += u;
        m2 += u * u;
        cnt[dpt_rng_below(&r, 3)]++;
    }
    m /= n;
    CHECK_CLOSE(m, 0.5, 5.0 * sqrt(1.0 / 12 / n), 0);
    CHECK_CLOSE(m2 / n - m * m, 1.0 / 12, 5.0 * sqrt(1.0 / 180 / n), 0);
    for (int k = 0; k < 3; k++) CHECK_CLOSE(cnt[k], n / 3.0, 5.0 * sqrt(n * 2.0 / 9), 0);
    free(v);
    free(f);
    dpt_rng_free(&r);
}

static void test_fill_threads(void) {
    size_t n = 3 * DPT_RNG_CHUNK + 123;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    dpt_rng r1, r2;
    CHECK_OK(dpt_rng_init(&r1, 99, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&r2, 99, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_gauss_fill(&r1, a, n, 1.0f, 0, 1));
    CHECK_OK(dpt_rng_gauss_fill(&r2, b, n, 1.0f, 0, 4));
    CHECK(memcmp(a, b, n * sizeof *a) == 0);
    /* accumulate adds to what is there */
    for (size_t i = 0; i < n; i++) a[i] = 1.0f, b[i] = 0.0f;
    CHECK_OK(dpt_rng_gauss_fill(&r1, a, n, 0.5f, 1, 2));
    CHECK_OK(dpt_rng_gauss_fill(&r2, b, n, 0.5f, 0, 1));
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= a[i] == 1.0f + b[i];
    CHECK(ok);
    CHECK_STATUS(dpt_rng_gauss_fill(&r1, a, n, NAN, 0, 1), DPT_EINVAL);
    /* a shorter fill is a prefix of a longer one (same stream position), within a chunk
       and across chunks: draws stay coupled when a batch size changes */
    dpt_rng p1, p2;
    CHECK_OK(dpt_rng_init(&p1, 5, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&p2, 5, DPT_STREAM_NOISE));
    size_t short_n = DPT_RNG_CHUNK + 1000;
    CHECK_OK(dpt_rng_gauss_fill(&p1, a, n, 1.0f, 0, 2));
    CHECK_OK(dpt_rng_gauss_fill(&p2, b, short_n, 1.0f, 0, 1));
    CHECK(memcmp(a, b, short_n * sizeof *a) == 0);
    CHECK_OK(dpt_rng_gauss_fill(&p1, a, 37, 1.0f, 0, 1));
    CHECK_OK(dpt_rng_gauss_fill(&p2, b, 3000, 1.0f, 0, 1));
    CHECK(memcmp(a, b, 37 * sizeof *a) == 0);
    /* gauss_fill_at: any chunk range of a filled substream, by itself, gives exactly the
       fill's values there (whole chunks, a partial last chunk, from chunk 0 and later) */
    uint64_t sub = dpt_rng_reserve_substreams(&p1, 0) - 1; /* the substream of the last fill */
    CHECK_OK(dpt_rng_gauss_fill(&p1, a, n, 0.75f, 0, 2));
    sub++;
    CHECK_OK(dpt_rng_gauss_fill_at(&p1, sub, 0, b, n, 0.75f, 2));
    CHECK(memcmp(a, b, n * sizeof *a) == 0);
    CHECK_OK(dpt_rng_gauss_fill_at(&p1, sub, 2, b, DPT_RNG_CHUNK + 50, 0.75f, 1));
    CHECK(memcmp(a + 2 * DPT_RNG_CHUNK, b, (DPT_RNG_CHUNK + 50) * sizeof *a) == 0);
    CHECK_OK(dpt_rng_gauss_fill_at(&p1, sub, 1, b, 77, 0.75f, 1));
    CHECK(memcmp(a + DPT_RNG_CHUNK, b, 77 * sizeof *a) == 0);
    CHECK_STATUS(dpt_rng_gauss_fill_at(&p1, sub + 1, 0, b, 8, 1.0f, 1), DPT_EINVAL); /* not reserved */
    CHECK_STATUS(dpt_rng_gauss_fill_at(&p1, sub, 0, b, 8, -1.0f, 1), DPT_EINVAL);
    dpt_rng_free(&p1);
    dpt_rng_free(&p2);
    dpt_rng_free(&r1);
    dpt_rng_free(&r2);
    free(a);
    free(b);
}

/* The fast stream (dpt_rng_gauss_fill_fast_at, AES-128-CTR under a key derived from the
 * stream's key) for the estimator's randomness: moments, KS and the binned chi-square of
 * N(0, 1); the same values for 1 and 3 threads and for any chunk range read alone (the
 * layout of gauss_fill_at); no correlation between neighbouring chunks, between two
 * substreams, and with the ChaCha20 fill of the same substream; another seed differs. */
static double corr(const float *a, const float *b, size_t n) {
    double sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < n; i++) sab += (double)a[i] * b[i], saa += (double)a[i] * a[i], sbb += (double)b[i] * b[i];
    return sab / sqrt(saa * sbb);
}

static void test_fast_fill(void) {
    const size_t nc = 250 * DPT_RNG_CHUNK, n = nc;
    dpt_rng r, r2;
    CHECK_OK(dpt_rng_init(&r, 31, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&r2, 32, DPT_STREAM_NOISE));
    uint64_t sub = dpt_rng_reserve_substreams(&r, 2);
    dpt_rng_reserve_substreams(&r2, 2);
    float *a = malloc(nc * sizeof *a), *b = malloc(nc * sizeof *b);
    double *d = malloc(n * sizeof *d);
    CHECK_OK(dpt_rng_gauss_fill_fast_at(&r, sub, 0, a, nc, 1.0f, 3));
    for (size_t i = 0; i < n; i++) d[i] = a[i];
    check_normal(d, n, "fast fill");
    check_chi2(a, nc, "fast fill chi2");
    CHECK_OK(dpt_rng_gauss_fill_fast_at(&r, sub, 0, b, nc, 1.0f, 1));
    CHECK(memcmp(a, b, nc * sizeof *a) == 0); /* thread count */
    CHECK_OK(dpt_rng_gauss_fill_fast_at(&r, sub, 7, b, DPT_RNG_CHUNK + 9, 1.0f, 1));
    CHECK(memcmp(a + 7 * DPT_RNG_CHUNK, b, (DPT_RNG_CHUNK + 9) * sizeof *a) == 0); /* a chunk range alone */
    /* independence: the 5 sd bound on a correlation of n pairs is 5 / sqrt(n) */
    const size_t half = nc / 2;
    double c_chunks = corr(a, a + DPT_RNG_CHUNK, nc - DPT_RNG_CHUNK);
    CHECK_OK(dpt_rng_gauss_fill_fast_at(&r, sub + 1, 0, b, half, 1.0f, 2));
    double c_subs = corr(a, b, half);
    CHECK_OK(dpt_rng_gauss_fill_at(&r, sub, 0, b, half, 1.0f, 2));
    double c_chacha = corr(a, b, half);
    size_t same = 0;
    for (size_t i = 0; i < half; i++) same += a[i] == b[i];
    CHECK_OK(dpt_rng_gauss_fill_fast_at(&r2, sub, 0, b, half, 1.0f, 2));
    double c_seed = corr(a, b, half);
    printf("fast fill correlations: next chunk %.2e, next substream %.2e, ChaCha20 fill %.2e, other seed %.2e "
           "(5 sd: %.1e)\n", c_chunks, c_subs, c_chacha, c_seed, 5 / sqrt((double)half));
    CHECK(fabs(c_chunks) < 5 / sqrt((double)(nc - DPT_RNG_CHUNK)));
    CHECK(fabs(c_subs) < 5 / sqrt((double)half) && fabs(c_chacha) < 5 / sqrt((double)half));
    CHECK(fabs(c_seed) < 5 / sqrt((double)half));
    CHECK(same < half / 1000);
    CHECK_STATUS(dpt_rng_gauss_fill_fast_at(&r, sub + 2, 0, b, 8, 1.0f, 1), DPT_EINVAL); /* not reserved */
    CHECK_STATUS(dpt_rng_gauss_fill_fast_at(&r, sub, 0, b, 8, NAN, 1), DPT_EINVAL);
    dpt_rng_free(&r);
    dpt_rng_free(&r2);
    free(a);
    free(b);
    free(d);
}

static void test_blas(void) {
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 3, DPT_STREAM_AUX));
    size_t M = 37, N = 29, K = 53;
    float *A = malloc(M * K * 4), *B = malloc(K * N * 4), *C1 = malloc(M * N * 4), *C2 = malloc(M * N * 4);
    for (size_t i = 0; i < M * K; i++) A[i] = dpt_rng_gauss(&r);
    for (size_t i = 0; i < K * N; i++) B[i] = dpt_rng_gauss(&r);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            for (size_t i = 0; i < M * N; i++) C1[i] = C2[i] = (float)i * 0.01f;
            size_t lda = ta ? M : K, ldb = tb ? K : N;
            dpt_sgemm(ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.3f, C1, N);
            dpt_sgemm_ref(ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.3f, C2, N);
            double worst = 0;
            for (size_t i = 0; i < M * N; i++) worst = fmax(worst, fabs(C1[i] - C2[i]) / (1e-4 + 1e-5 * fabs(C2[i])));
            CHECK(worst <= 1.0);
        }
    /* ssyrk_gram: both triangles of op(A) op(A)^T against the naive reference, with a
       leading dimension larger than the row (A [M, K] as op(A) [M, K], or as A^T) */
    for (int tr = 0; tr < 2; tr++) {
        size_t n = tr ? K : M, k = tr ? M : K, ldc = n + 3;
        float *G1 = malloc(n * ldc * 4), *G2 = malloc(n * n * 4);
        for (size_t i = 0; i < n * ldc; i++) G1[i] = NAN; /* every entry must be written */
        dpt_ssyrk_gram(tr, n, k, A, K, G1, ldc);
        dpt_sgemm_ref(tr, !tr, n, n, k, 1.0f, A, K, A, K, 0.0f, G2, n);
        double worst = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++)
                worst = fmax(worst, fabs(G1[i * ldc + j] - G2[i * n + j]) / (1e-4 + 1e-5 * fabs(G2[i * n + j])));
        CHECK(worst <= 1.0);
        free(G1);
        free(G2);
    }
    /* K = 0: C = beta C */
    for (size_t i = 0; i < M * N; i++) C1[i] = 2.0f;
    dpt_sgemm(0, 0, M, N, 0, 1.0f, A, 1, B, N, 0.5f, C1, N);
    CHECK(C1[0] == 1.0f && C1[M * N - 1] == 1.0f);
    /* syev: diag(1,2,3) rotated; eigenvalues ascending */
    double S[9] = {2, 1, 0, 1, 2, 0, 0, 0, 3}, w[3], Z[9];
    CHECK_OK(dpt_syev(3, S, w, Z));
    CHECK_CLOSE(w[0], 1.0, 1e-12, 0);
    CHECK_CLOSE(w[1], 3.0, 1e-12, 0);
    CHECK_CLOSE(w[2], 3.0, 1e-12, 0);
    CHECK_CLOSE(fabs(Z[0 * 3 + 0]), sqrt(0.5), 1e-12, 0); /* eigvec of 1: (1,-1,0)/sqrt 2 */
    /* chol / chol_solve against naive products: A = G G^T + I (SPD), L L^T = A on the
     * lower triangle (the upper one untouched), A X = B for 3 right-hand sides */
    {
        enum { NC = 7, R = 3 };
        double G[NC * NC], Am[NC * NC], L[NC * NC], Bm[R * NC], X[R * NC];
        for (size_t i = 0; i < NC * NC; i++) G[i] = dpt_rng_gauss(&r);
        for (size_t i = 0; i < NC; i++)
            for (size_t j = 0; j < NC; j++) {
                double v = i == j ? 1.0 : 0.0;
                for (size_t k = 0; k < NC; k++) v += G[i * NC + k] * G[j * NC + k];
                Am[i * NC + j] = v;
            }
        memcpy(L, Am, sizeof L);
        for (size_t i = 0; i < NC; i++)
            for (size_t j = i + 1; j < NC; j++) L[i * NC + j] = -7.0; /* must stay as it is */
        CHECK_OK(dpt_chol(NC, L));
        double worst = 0;
        for (size_t i = 0; i < NC; i++)
            for (size_t j = 0; j <= i; j++) {
                double v = 0;
                for (size_t k = 0; k <= j; k++) v += L[i * NC + k] * L[j * NC + k];
                worst = fmax(worst, fabs(v - Am[i * NC + j]));
            }
        CHECK(worst < 1e-10);
        for (size_t i = 0; i < NC; i++)
            for (size_t j = i + 1; j < NC; j++) CHECK(L[i * NC + j] == -7.0);
        for (size_t i = 0; i < R * NC; i++) Bm[i] = X[i] = dpt_rng_gauss(&r);
        CHECK_OK(dpt_chol_solve(NC, L, R, X)); /* reads only the lower triangle (-7 above) */
        worst = 0;
        for (size_t c = 0; c < R; c++)
            for (size_t i = 0; i < NC; i++) {
                double v = 0;
                for (size_t k = 0; k < NC; k++) v += Am[i * NC + k] * X[c * NC + k];
                worst = fmax(worst, fabs(v - Bm[c * NC + i]));
            }
        CHECK(worst < 1e-9);
        double Ind[4] = {1, 2, 2, 1}; /* eigenvalues 3, -1: not positive definite */
        CHECK(dpt_chol(2, Ind) == DPT_ERANGE);
    }
    free(A), free(B), free(C1), free(C2);
    dpt_rng_free(&r);
}

static void test_hash_files(void) {
    dpt_hash h;
    uint8_t d[32];
    char hex[65];
    CHECK_OK(dpt_hash_init(&h));
    CHECK_OK(dpt_hash_update(&h, "abc", 3));
    CHECK_OK(dpt_hash_final(&h, d));
    dpt_hex(d, 32, hex);
    CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    char path[256];
    snprintf(path, sizeof path, "%s/f.bin", tu_tmpdir());
    CHECK_OK(dpt_write_file_atomic(path, "hello", 5));
    CHECK_OK(dpt_write_file_atomic(path, "world!", 6));
    uint8_t *buf;
    size_t n;
    CHECK_OK(dpt_read_file(path, &buf, &n));
    CHECK(n == 6 && memcmp(buf, "world!", 6) == 0);
    dpt_free(buf);
    CHECK_STATUS(dpt_read_file("/nonexistent/x", &buf, &n), DPT_EIO);
    CHECK_ERR_HAS("/nonexistent/x");
    CHECK_STATUS(dpt_write_file_atomic("/nonexistent/dir/x", "a", 1), DPT_EIO);
}

/* Files the project did not make: devices, FIFOs and oversized files are refused, never
 * read without end (`account --ledger /dev/zero` grew to 9 GB) or waited on (a FIFO). */
static void test_read_regular(void) {
    uint8_t *buf = NULL;
    size_t n = 0;
    alarm(20); /* a hang on the FIFO below fails the test instead of stalling ctest */
    CHECK_STATUS(dpt_read_file("/dev/zero", &buf, &n), DPT_EIO);
    CHECK_ERR_HAS("not a regular file");
    CHECK(buf == NULL && n == 0);
    CHECK_STATUS(dpt_read_file("/dev/urandom", &buf, &n), DPT_EIO);
    CHECK_STATUS(dpt_read_file(tu_tmpdir(), &buf, &n), DPT_EIO);
    CHECK_ERR_HAS("a directory");
    char path[256];
    snprintf(path, sizeof path, "%s/fifo", tu_tmpdir());
    CHECK(mkfifo(path, 0600) == 0);
    CHECK_STATUS(dpt_read_file(path, &buf, &n), DPT_EIO);
    CHECK_ERR_HAS("a FIFO");
    FILE *f = NULL;
    CHECK_STATUS(dpt_open_regular(path, &f, NULL), DPT_EIO);
    CHECK(f == NULL);
    unlink(path);
    snprintf(path, sizeof path, "%s/hundred.bin", tu_tmpdir());
    char data[100];
    memset(data, 'x', sizeof data);
    CHECK_OK(dpt_write_file_atomic(path, data, sizeof data));
    CHECK_STATUS(dpt_read_file_max(path, 99, &buf, &n), DPT_EFORMAT);
    CHECK_ERR_HAS("more than the 99");
    CHECK_OK(dpt_read_file_max(path, 100, &buf, &n));
    CHECK(n == 100 && buf[100] == 0 && memcmp(buf, data, 100) == 0);
    dpt_free(buf);
    size_t sz = 0;
    CHECK_OK(dpt_open_regular(path, &f, &sz));
    CHECK(f && sz == 100);
    if (f) fclose(f);
    unlink(path);
    alarm(0);
}

/* Checked size products (issue 18: every allocation of a product goes through them). */
static void test_checked_products(void) {
    size_t r = 7;
    CHECK(dpt_mul_overflow(SIZE_MAX / 2, 3, &r) == -1 && r == 7);
    CHECK(dpt_mul_overflow(SIZE_MAX / 3, 3, &r) == 0 && r == SIZE_MAX / 3 * 3);
    CHECK(dpt_mul3_overflow((size_t)1 << 30, (size_t)1 << 30, (size_t)1 << 4, &r) == -1);
    CHECK(dpt_mul3_overflow((size_t)1 << 30, (size_t)1 << 30, (size_t)1 << 3, &r) == 0 && r == (size_t)1 << 63);
    CHECK(dpt_mul3_overflow(0, SIZE_MAX, SIZE_MAX, &r) == 0 && r == 0);
    /* 2^58 x 64 x 1 wraps to 0: refused, never a tiny buffer */
    CHECK(dpt_alloc2((size_t)1 << 58, 64, 1, "masks") == NULL);
    CHECK_ERR_HAS("masks: size overflow");
    CHECK(dpt_alloc2(3, (size_t)1 << 61, sizeof(double), "bootstrap") == NULL);
    CHECK_ERR_HAS("size overflow");
    CHECK(dpt_alloc3(1 << 20, 1 << 20, (size_t)1 << 24, 1, "rows") == NULL);
    CHECK_ERR_HAS("rows: size overflow");
    float *p = dpt_alloc3(2, 3, 4, sizeof(float), "small");
    CHECK(p != NULL);
    if (p) {
        for (int i = 0; i < 24; i++) CHECK(p[i] == 0.0f); /* zero-filled */
        p[23] = 1;
    }
    dpt_free(p);
    double *q = dpt_alloc2(5, 7, sizeof(double), "small");
    CHECK(q != NULL);
    if (q) q[34] = 1;
    dpt_free(q);
}

/* dpt_text_char_len against a decoder written from the definition (RFC 3629 Table 3 of
 * well-formed byte sequences, plus the control characters), over every 1- and 2-byte input
 * and every 3-byte one with a lead byte of E0, ED or EF, and 4-byte edge cases */
static size_t ref_char_len(const unsigned char *p) {
    static const struct { unsigned char lo, hi, n, lo2, hi2; } T[] = {
        {0x00, 0x7f, 1, 0, 0},    {0xc2, 0xdf, 2, 0x80, 0xbf}, {0xe0, 0xe0, 3, 0xa0, 0xbf},
        {0xe1, 0xec, 3, 0x80, 0xbf}, {0xed, 0xed, 3, 0x80, 0x9f}, {0xee, 0xef, 3, 0x80, 0xbf},
        {0xf0, 0xf0, 4, 0x90, 0xbf}, {0xf1, 0xf3, 4, 0x80, 0xbf}, {0xf4, 0xf4, 4, 0x80, 0x8f}};
    for (size_t r = 0; r < sizeof T / sizeof *T; r++) {
        if (p[0] < T[r].lo || p[0] > T[r].hi) continue;
        if (T[r].n == 1) return p[0] >= 0x20 && p[0] != 0x7f ? 1 : 0;
        if (p[1] < T[r].lo2 || p[1] > T[r].hi2) return 0;
        for (unsigned i = 2; i < T[r].n; i++)
            if (p[i] < 0x80 || p[i] > 0xbf) return 0;
        if (p[0] == 0xc2 && p[1] <= 0x9f) return 0; /* U+0080..U+009F: C1 controls */
        return T[r].n;
    }
    return 0;
}

static void test_text_chars(void) {
    unsigned char b[5] = {0};
    size_t bad = 0;
    for (unsigned x = 0; x < 256; x++)
        for (unsigned y = 0; y < 256; y++) {
            b[0] = (unsigned char)x, b[1] = (unsigned char)y, b[2] = 0;
            bad += dpt_text_char_len((const char *)b) != ref_char_len(b);
            if (x == 0xe0 || x == 0xed || x == 0xef)
                for (unsigned z = 0; z < 256; z++) {
                    b[2] = (unsigned char)z, b[3] = 0;
                    bad += dpt_text_char_len((const char *)b) != ref_char_len(b);
                }
        }
    CHECK(bad == 0);
    static const char *const FOUR[] = {"\xf0\x9f\x99\x82", "\xf0\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf", "\xf4\x90\x80\x80",
                                       "\xf5\x80\x80\x80", "\xf0\x9f\x99"};
    static const size_t LEN[] = {4, 0, 4, 0, 0, 0};
    for (size_t i = 0; i < 6; i++) CHECK(dpt_text_char_len(FOUR[i]) == LEN[i]);
    CHECK(dpt_text_char_len("") == 0 && dpt_text_char_len("a") == 1 && dpt_text_char_len("\t") == 0);
}

/* Caller errors in functions that return a value have defined results (core.h), never an
 * abort: dpt_rng_below(r, 0) reads n modulo 2^64, a uniform 64-bit value and the same draw
 * as dpt_rng_u64 (it asserted n >= 1); a view with an ndim outside 1..DPT_MAX_DIMS, a NULL
 * shape or a size that overflows is the empty tensor (the ndim was asserted, a NULL shape
 * dereferenced). dpt_tensor_alloc refuses the same with a status naming the argument. */
static void test_caller_errors(void) {
    dpt_rng a, b;
    CHECK_OK(dpt_rng_init(&a, 7, DPT_STREAM_AUX));
    CHECK_OK(dpt_rng_init(&b, 7, DPT_STREAM_AUX));
    int same = 1, top = 0;
    for (int i = 0; i < 200; i++) {
        uint64_t x = dpt_rng_below(&a, 0);
        same &= x == dpt_rng_u64(&b);
        top += (int)(x >> 63); /* the whole range: about half have the top bit */
    }
    CHECK(same);
    CHECK(top > 60 && top < 140);
    CHECK(dpt_rng_below(&a, 1) == 0);
    dpt_rng_free(&a), dpt_rng_free(&b);

    float buf[6];
    size_t shape[2] = {2, 3}, huge[2] = {SIZE_MAX / 2, 3};
    dpt_tensor v = dpt_tensor_view(buf, 2, shape);
    CHECK(v.ndim == 2 && v.size == 6 && v.shape[1] == 3 && v.data == buf && !v.owns);
    const dpt_tensor bad[4] = {dpt_tensor_view(buf, 0, shape), dpt_tensor_view(buf, DPT_MAX_DIMS + 1, shape),
                               dpt_tensor_view(buf, 2, NULL), dpt_tensor_view(buf, 2, huge)};
    for (int i = 0; i < 4; i++) {
        CHECK(bad[i].ndim == 0 && bad[i].size == 0 && bad[i].data == NULL && bad[i].shape[0] == 0);
        if (bad[i].ndim) fprintf(stderr, "bad view %d: ndim %d, size %zu\n", i, bad[i].ndim, bad[i].size);
    }
    dpt_tensor t;
    CHECK_STATUS(dpt_tensor_alloc(NULL, 2, shape), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_tensor_alloc: t is NULL");
    CHECK_STATUS(dpt_tensor_alloc(&t, DPT_MAX_DIMS + 1, shape), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_tensor_alloc: ndim 5 outside 1..4");
    CHECK_STATUS(dpt_tensor_alloc(&t, 2, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_tensor_alloc: shape is NULL");
    CHECK_STATUS(dpt_tensor_alloc(&t, 2, huge), DPT_ENOMEM);
    CHECK_ERR_HAS("size overflow");
    CHECK_OK(dpt_tensor_alloc(&t, 2, shape));
    CHECK(t.ndim == 2 && t.size == 6 && t.owns && t.data);
    dpt_tensor_free(&t);
}

/* The vectorized dpt_all_finite and dpt_sqnorm_double against naive loops: every length
 * around the block sizes, a non-finite value at every position of a short row and at the
 * edges of the blocks, values whose float squares overflow. */
static void test_finite_and_sqnorm(void) {
    enum { N = 2100 };
    float *x = malloc(N * sizeof *x);
    for (size_t i = 0; i < N; i++) x[i] = (float)((double)((i * 7919) % 1000) / 997.0 - 0.5) * (i % 3 ? 1.0f : 3e20f);
    int ok = 1;
    for (size_t n = 0; n <= N; n += (n < 40 ? 1 : 97)) {
        double ref = 0;
        for (size_t j = 0; j < n; j++) ref += (double)x[j] * x[j];
        const double got = dpt_sqnorm_double(x, n);
        ok &= isfinite(got) && fabs(got - ref) <= 1e-12 * ref;
        ok &= dpt_all_finite(x, n) == 1;
    }
    CHECK(ok);
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const size_t pos[] = {0, 1, 7, 8, 1023, 1024, 1025, 2047, 2048, 2099};
    for (size_t b = 0; b < 3; b++)
        for (size_t p = 0; p < sizeof pos / sizeof *pos; p++) {
            const float keep = x[pos[p]];
            x[pos[p]] = bad[b];
            CHECK(dpt_all_finite(x, N) == 0 && dpt_all_finite(x, pos[p]) == 1);
            CHECK(!isfinite(dpt_sqnorm_double(x, N)));
            x[pos[p]] = keep;
        }
    x[5] = 3.4e38f; /* the largest floats: the double sum stays finite */
    CHECK(isfinite(dpt_sqnorm_double(x, N)) && dpt_all_finite(x, N));
    free(x);
}

int main(void) {
    test_finite_and_sqnorm();
    test_errors();
    test_caller_errors();
    test_rng_streams();
    test_samplers();
    test_gauss_chi2();
    test_fill_threads();
    test_fast_fill();
    test_blas();
    test_hash_files();
    test_read_regular();
    test_checked_products();
    test_text_chars();
    TEST_MAIN_END();
}
