/* privacy/dgauss.c, the table sampler of the discrete Gaussian N_Z(0, sigma^2):
 * - its own verification (the exact pmf of each table, by enumeration) finds it within
 *   mu = 2^-45 pointwise and tv = 2^-55 at sigma from 0.5 to 2^14, and refuses broken tables;
 * - samples pass chi-square and moment tests against the exact pmf at sigma 0.5 ... 2^14,
 *   and a table off by one entry (its selector thresholds shifted one cell) FAILS them;
 * - against the exact CKS reference (dpt_privacy_discrete_gauss) a two-sample chi-square
 *   does not tell them apart, at sigma 3 and at the secure scale;
 * - the secure mechanism with it keeps the floating-point-attack properties (every output
 *   a lattice point, neighbouring sums within C + sqrt(n) h), does not depend on the
 *   thread count, and adds noise of std sigma C. */
#include <dptrain/privacy.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "privacy/dgauss.h"
#include "testutil.h"

/* ==== The exact pmf ==== */

/* p[k] = P(z = k - R) of N_Z(0, sigma^2) for |z| <= R, in long double */
static long double *exact_pmf(double sigma, int64_t R) {
    long double *p = malloc((size_t)(2 * R + 1) * sizeof *p), S = 0;
    for (int64_t z = -R; z <= R; z++) S += p[z + R] = expl(-(long double)z * z / (2.0L * sigma * sigma));
    for (int64_t z = -R; z <= R; z++) p[z + R] /= S;
    return p;
}

/* upper 0.1% point of chi-square with df degrees of freedom (Wilson-Hilferty) */
static double chi2_crit(int df) {
    double a = 2.0 / (9.0 * df);
    return df * pow(1 - a + 3.0902 * sqrt(a), 3);
}

/* Bins of about equal exact probability (at most nbins, at least 5 expected per bin), the
 * chi-square statistic of the n draws z against the exact pmf, and the moment tests: mean
 * and variance within 5 standard errors of the exact ones. Returns 1 if all passed. */
static int fits_exact(const int32_t *z, size_t n, double sigma, int nbins, const char *what) {
    const int64_t R = (int64_t)ceil(40 * sigma) + 40;
    long double *p = exact_pmf(sigma, R);
    /* bin edges: cumulative probability crosses k / nbins */
    int *bin = malloc((size_t)(2 * R + 1) * sizeof *bin);
    double *e = calloc((size_t)nbins, sizeof *e), *o = calloc((size_t)nbins, sizeof *o);
    long double cum = 0;
    int nb = 0;
    for (int64_t k = 0; k <= 2 * R; k++) {
        bin[k] = nb;
        e[nb] += (double)(p[k] * n);
        cum += p[k];
        if (cum >= (long double)(nb + 1) / nbins && nb < nbins - 1 && e[nb] >= 5) nb++;
    }
    nb++;
    double m = 0, v = 0, var = 0, m4 = 0;
    for (int64_t k = 0; k <= 2 * R; k++) {
        double x = (double)(k - R);
        var += (double)p[k] * x * x;
        m4 += (double)p[k] * x * x * x * x;
    }
    int out_of_range = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t k = (int64_t)z[i] + R;
        if (k < 0 || k > 2 * R) out_of_range++;
        else o[bin[k]]++;
        m += z[i];
        v += (double)z[i] * z[i];
    }
    m /= (double)n, v /= (double)n;
    double chi2 = 0;
    for (int b = 0; b < nb; b++) chi2 += (o[b] - e[b]) * (o[b] - e[b]) / e[b];
    int ok = chi2 < chi2_crit(nb - 1) && !out_of_range && fabs(m) <= 5 * sqrt(var / (double)n) &&
             fabs(v - var) <= 5 * sqrt((m4 - var * var) / (double)n);
    printf("%s: sigma %g, %zu draws: chi2 %.1f on %d df (critical %.1f), mean %.4g (se %.3g), variance / exact %.6f "
           "(se %.2g)%s\n",
           what, sigma, n, chi2, nb - 1, chi2_crit(nb - 1), m, sqrt(var / n), v / var, sqrt((m4 - var * var) / n) / var,
           ok ? "" : "  <-- does not fit");
    free(p);
    free(bin);
    free(e);
    free(o);
    return ok;
}

static int32_t *draw(const dg_table *T, uint64_t seed, size_t n) {
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, seed, DPT_STREAM_NOISE));
    int32_t *z = malloc((n + DG_GROUP) * sizeof *z);
    /* in chunks of 4096 on their own substreams, as the secure mechanism draws them */
    for (size_t lo = 0; lo < n; lo += 4096) {
        size_t len = n - lo < 4096 ? n - lo : 4096;
        CHECK_OK(dg_sample(T, &r, dpt_rng_reserve_substreams(&r, 1), z + lo, len, z + lo));
    }
    dpt_rng_free(&r);
    return z;
}

/* ==== The verification ==== */

static void test_verified_distance(void) {
    const double sigmas[] = {0.5, 1.0, 3.0, 7.3, 100.0, 1000.5, 16384.0};
    for (size_t i = 0; i < sizeof sigmas / sizeof *sigmas; i++) {
        dg_table T;
        CHECK_OK(dg_table_build(sigmas[i], &T));
        printf("table sigma %g: %d cells of 2^%d, tail cells 2^%d, acceptance %.4f, p_tail %.2g, mu %.3g (2^%.1f), "
               "tv %.3g (2^%.1f)\n",
               sigmas[i], T.nb, T.kw, T.kv, T.p_accept, T.p_tail, T.mu, log2(T.mu), T.tv, log2(T.tv));
        /* small sigma: the negative values' acceptance is small in the last cells (fewer
         * significant bits of U below it) */
        CHECK(T.mu > 0 && T.mu < (sigmas[i] < 2 ? 0x1p-38 : 0x1p-45));
        CHECK(T.tv > 0 && T.tv < 0x1p-55);
        CHECK(T.p_accept > (sigmas[i] < 2 ? 0.5 : 0.85) && T.p_accept <= 1);
        /* the variance of the exact discrete Gaussian (through the verified pmf) */
        if (sigmas[i] >= 3) CHECK_CLOSE(T.var, sigmas[i] * sigmas[i], 0, 1e-9);
    }
    /* the secure scale's table is the one the library uses */
    const dg_table *S = dg_table_secure();
    CHECK(S && S->sigma == ldexp(1.0, DPT_DGAUSS_LOG2_SCALE));
    double mu, tv;
    CHECK_OK(dpt_privacy_secure_distance(DPT_DGAUSS_TABLE, &mu, &tv));
    CHECK(mu == S->mu && tv == S->tv && mu < 0x1p-48);
    CHECK_OK(dpt_privacy_secure_distance(DPT_DGAUSS_CKS, &mu, &tv));
    CHECK(mu == 0 && tv == 0);
    CHECK_STATUS(dpt_privacy_secure_distance((dpt_dgauss_method)7, &mu, &tv), DPT_EINVAL);
    dg_table T;
    CHECK_STATUS(dg_table_build(0.1, &T), DPT_EINVAL);
    CHECK_ERR_HAS("sigma");
    CHECK_STATUS(dg_table_build(NAN, &T), DPT_EINVAL);
    /* broken tables are refused by the verification: a threshold out of order, and an
     * acceptance above 1 (a cell constant too large) */
    CHECK_OK(dg_table_build(3.0, &T));
    dg_table B = T;
    B.t[2] = B.t[1];
    dg_table_prepare(&B);
    CHECK_STATUS(dg_table_verify(&B), DPT_ERANGE);
    B = T;
    B.L[4] += 0.01;
    dg_table_prepare(&B);
    CHECK_STATUS(dg_table_verify(&B), DPT_ERANGE);
    /* a small change that keeps every acceptance below 1 is measured, not refused */
    B = T;
    B.L[4] -= 1e-6;
    dg_table_prepare(&B);
    CHECK_OK(dg_table_verify(&B));
    CHECK(B.mu > 0.9e-6 && B.mu < 1.1e-6);
}

/* ==== Statistical tests against the exact pmf ==== */

static void test_fit(void) {
    const double sigmas[] = {0.5, 1.7, 3.0, 37.5, 16384.0};
    const int bins[] = {9, 13, 27, 60, 100};
    for (size_t i = 0; i < sizeof sigmas / sizeof *sigmas; i++) {
        dg_table T;
        CHECK_OK(dg_table_build(sigmas[i], &T));
        size_t n = 250000;
        int32_t *z = draw(&T, 100 + i, n);
        CHECK(fits_exact(z, n, sigmas[i], bins[i], "table sampler"));
        free(z);
    }
}

/* The same tests fail for a table off by one entry: the selector thresholds shifted by one
 * cell (cell c gets the weight of cell c + 1, the last body cell none). */
static void test_broken_table_fails(void) {
    const double sigmas[] = {3.0, 16384.0};
    const int bins[] = {27, 100};
    for (size_t i = 0; i < 2; i++) {
        dg_table T;
        CHECK_OK(dg_table_build(sigmas[i], &T));
        for (int c = 1; c < T.nb; c++) T.t[c] = T.t[c + 1];
        dg_table_prepare(&T);
        size_t n = 250000;
        int32_t *z = draw(&T, 200 + i, n);
        CHECK(!fits_exact(z, n, sigmas[i], bins[i], "table off by one entry (must not fit)"));
        free(z);
    }
}

/* Two samples, table and CKS, against each other: a two-sample chi-square over bins of
 * equal exact probability, below its 0.1% point. */
static void test_against_cks(void) {
    const uint32_t scales[] = {3, 1u << DPT_DGAUSS_LOG2_SCALE};
    for (size_t i = 0; i < 2; i++) {
        const double sigma = scales[i];
        const size_t n = scales[i] < 100 ? 200000 : 100000;
        dg_table T;
        CHECK_OK(dg_table_build(sigma, &T));
        int32_t *a = draw(&T, 300 + i, n), *b = malloc(n * sizeof *b);
        dpt_rng r;
        CHECK_OK(dpt_rng_init(&r, 400 + i, DPT_STREAM_NOISE));
        for (size_t k = 0; k < n; k++) b[k] = (int32_t)dpt_privacy_discrete_gauss(&r, scales[i]);
        dpt_rng_free(&r);
        /* 40 bins of about equal exact probability */
        const int64_t R = (int64_t)ceil(40 * sigma) + 40;
        long double *p = exact_pmf(sigma, R), cum = 0;
        int *bin = malloc((size_t)(2 * R + 1) * sizeof *bin), nb = 40;
        for (int64_t k = 0; k <= 2 * R; k++) {
            int b0 = (int)(cum * nb);
            bin[k] = b0 < nb ? b0 : nb - 1;
            cum += p[k];
        }
        double oa[40] = {0}, ob[40] = {0}, chi2 = 0;
        for (size_t k = 0; k < n; k++) oa[bin[a[k] + R]]++, ob[bin[b[k] + R]]++;
        int used = 0;
        for (int k = 0; k < nb; k++)
            if (oa[k] + ob[k] > 0) chi2 += (oa[k] - ob[k]) * (oa[k] - ob[k]) / (oa[k] + ob[k]), used++;
        printf("table vs CKS at sigma %g: two-sample chi2 %.1f on %d df (critical %.1f)\n", sigma, chi2, used - 1,
               chi2_crit(used - 1));
        CHECK(chi2 < chi2_crit(used - 1));
        free(p);
        free(bin);
        free(a);
        free(b);
    }
}

/* ==== The secure mechanism with the table sampler ==== */

/* noise std sigma C on zeros; the lattice: outputs on h Z, neighbouring sums within
 * C + sqrt(n) h (the floating-point-attack tests of test_privacy.c, for both samplers);
 * 1 and 3 threads give the same noise, a second call fresh noise. */
static void test_secure_mechanism(dpt_dgauss_method m) {
    const size_t n = 2 * DPT_RNG_CHUNK + 3001;
    const double sigma = 1.5, C = 2.0, h = sigma * C / (double)(1u << DPT_DGAUSS_LOG2_SCALE);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    dpt_rng r1, r2, r3;
    CHECK_OK(dpt_rng_init(&r1, 21, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&r2, 21, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&r3, 21, DPT_STREAM_NOISE));
    double d2 = 0;
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(0.123456 + 0.001 * (double)(i % 3000));
        double delta = (i % 3 == 0) ? C / sqrt(n / 3.0) : 0.0; /* ||delta|| = C */
        b[i] = (float)((double)a[i] + delta);
        c[i] = a[i];
        d2 += ((double)b[i] - a[i]) * ((double)b[i] - a[i]);
    }
    CHECK(sqrt(d2) <= C * (1 + 1e-6));
    CHECK_OK(dpt_privacy_noise_add_secure_ex(&r1, a, n, sigma, C, 1.0, m, 3));
    CHECK_OK(dpt_privacy_noise_add_secure_ex(&r2, b, n, sigma, C, 1.0, m, 1));
    CHECK_OK(dpt_privacy_noise_add_secure_ex(&r3, c, n, sigma, C, 1.0, m, 1));
    CHECK(memcmp(a, c, n * sizeof *a) == 0); /* thread count */
    double worst_off = 0, diff2 = 0, mean = 0, var = 0;
    for (size_t i = 0; i < n; i++) {
        double k = (double)a[i] / h;
        worst_off = fmax(worst_off, fabs(k - nearbyint(k)));
        diff2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        double z = (double)a[i] - (0.123456 + 0.001 * (double)(i % 3000));
        mean += z, var += z * z;
    }
    mean /= (double)n, var /= (double)n;
    CHECK(worst_off < 0.01); /* float rounding of h k: at most ulp(|a|) / h lattice units */
    CHECK(sqrt(diff2) <= C + sqrt((double)n) * h + 1e-4);
    CHECK_CLOSE(mean, 0.0, 5 * sigma * C / sqrt((double)n), 0);
    CHECK_CLOSE(sqrt(var), sigma * C, 5 * sigma * C / sqrt(2.0 * (double)n), 0);
    CHECK_OK(dpt_privacy_noise_add_secure_ex(&r3, c, n, sigma, C, 1.0, m, 2));
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += (a[i] - (float)(0.123456 + 0.001 * (double)(i % 3000))) ==
                                           (c[i] - a[i]);
    CHECK(same < n / 20); /* fresh substreams: new noise */
    /* the fused scale: the same lattice points times the scale */
    float *s1 = malloc(n * sizeof *s1), *s2 = malloc(n * sizeof *s2);
    for (size_t i = 0; i < n; i++) s1[i] = s2[i] = (float)((int)(i % 17) - 8);
    dpt_rng q1, q2;
    CHECK_OK(dpt_rng_init(&q1, 5, DPT_STREAM_NOISE));
    CHECK_OK(dpt_rng_init(&q2, 5, DPT_STREAM_NOISE));
    CHECK_OK(dpt_privacy_noise_add_secure_ex(&q1, s1, n, sigma, C, 1.0, m, 2));
    CHECK_OK(dpt_privacy_noise_add_secure_ex(&q2, s2, n, sigma, C, 1.0 / 256, m, 2));
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)s2[i] - (double)s1[i] / 256) / (fabs(s1[i]) + 1e-3));
    CHECK(worst < 1e-6);
    dpt_rng_free(&q1);
    dpt_rng_free(&q2);
    free(s1);
    free(s2);
    /* errors name the parameter */
    CHECK_STATUS(dpt_privacy_noise_add_secure_ex(&r1, a, n, sigma, C, NAN, m, 1), DPT_EINVAL);
    CHECK_ERR_HAS("scale");
    CHECK_STATUS(dpt_privacy_noise_add_secure_ex(&r1, a, n, sigma, C, 1.0, (dpt_dgauss_method)9, 1), DPT_EINVAL);
    CHECK_ERR_HAS("method");
    a[7] = 1e30f;
    CHECK_STATUS(dpt_privacy_noise_add_secure_ex(&r1, a, n, sigma, C, 1.0, m, 1), DPT_ERANGE);
    CHECK_ERR_HAS("coordinate 7");
    dpt_rng_free(&r1);
    dpt_rng_free(&r2);
    dpt_rng_free(&r3);
    free(a);
    free(b);
    free(c);
}

static void test_method_names(void) {
    dpt_dgauss_method m;
    CHECK_OK(dpt_dgauss_method_parse("table", &m));
    CHECK(m == DPT_DGAUSS_TABLE && !strcmp(dpt_dgauss_method_name(m), "table"));
    CHECK_OK(dpt_dgauss_method_parse("cks", &m));
    CHECK(m == DPT_DGAUSS_CKS && !strcmp(dpt_dgauss_method_name(m), "cks"));
    CHECK_STATUS(dpt_dgauss_method_parse("ziggurat", &m), DPT_EINVAL);
    CHECK_ERR_HAS("'table' or 'cks'");
}


/* The baseline and x86-64-v3 builds of the group kernel (core/isa.h) accept the same
 * candidates with the same values, so one verification covers both: 3000 groups of the
 * secure table, tail candidates forced in some; the two builds of the verification agree,
 * and so do those of the secure mechanism (the lattice rounding around the sampler). */
static void test_isa_builds_agree(void) {
#if DPT_ISA_DISPATCH
    if (!dpt_isa_v3()) {
        printf("this CPU does not run x86-64-v3: one build of dg_group to check\n");
        return;
    }
    const dg_table *T = dg_table_secure();
    CHECK(T != NULL);
    if (!T) return;
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 77, DPT_STREAM_NOISE));
    static uint8_t rec[DG_GROUP_BYTES];
    int32_t a[DG_GROUP], b[DG_GROUP];
    size_t differ = 0, accepted = 0;
    for (int g = 0; g < 3000; g++) {
        for (size_t k = 0; k < sizeof rec; k += 4) {
            uint32_t w = dpt_rng_u32(&r);
            memcpy(rec + k, &w, 4);
        }
        if (g % 3 == 0) memset(rec + 4 * (g % DG_GROUP), 0xff, 4); /* a tail candidate */
        int na = dg_group_base(T, rec, a), nb = dg_group_v3(T, rec, b);
        differ += na != nb || memcmp(a, b, (size_t)(na > 0 ? na : 0) * sizeof *a);
        accepted += (size_t)na;
    }
    if (differ) fprintf(stderr, "dg_group: the baseline and v3 builds differ in %zu of 3000 groups\n", differ);
    CHECK(differ == 0);
    CHECK(accepted > 3000 * DG_GROUP * 8 / 10);
    dpt_rng_free(&r);
    /* and both verifications find the same distance, to the bit */
    static dg_table a0, a1;
    a0 = a1 = *T;
    CHECK_OK(dg_table_verify_base(&a0));
    CHECK_OK(dg_table_verify_v3(&a1));
    CHECK(!memcmp(&a0, &a1, sizeof a0));
    CHECK(a0.mu == T->mu && a0.tv == T->tv && a0.p_accept == T->p_accept);
    /* the secure mechanism's two builds (src/privacy/noise.c): the same outputs, both samplers */
    const size_t n = 70000; /* several chunks */
    for (int m = 0; m < 2; m++) {
        float *s0 = malloc(n * sizeof *s0), *s1 = malloc(n * sizeof *s1);
        for (size_t j = 0; j < n; j++) s0[j] = s1[j] = (float)((double)j / n - 0.5) * 3.0f;
        dpt_rng r0, r1;
        CHECK_OK(dpt_rng_init(&r0, 31, DPT_STREAM_NOISE));
        CHECK_OK(dpt_rng_init(&r1, 31, DPT_STREAM_NOISE));
        const dpt_dgauss_method meth = m ? DPT_DGAUSS_CKS : DPT_DGAUSS_TABLE;
        CHECK_OK(dpt_privacy_noise_add_secure_ex_base(&r0, s0, m ? 3000 : n, 1.1, 0.7, 0.5, meth, 2));
        CHECK_OK(dpt_privacy_noise_add_secure_ex_v3(&r1, s1, m ? 3000 : n, 1.1, 0.7, 0.5, meth, 2));
        CHECK(!memcmp(s0, s1, n * sizeof *s0));
        dpt_rng_free(&r0);
        dpt_rng_free(&r1);
        free(s0), free(s1);
    }
#endif
}

int main(void) {
    test_isa_builds_agree();
    test_verified_distance();
    test_fit();
    test_broken_table_fails();
    test_against_cks();
    test_secure_mechanism(DPT_DGAUSS_TABLE);
    test_secure_mechanism(DPT_DGAUSS_CKS);
    test_method_names();
    TEST_MAIN_END();
}
