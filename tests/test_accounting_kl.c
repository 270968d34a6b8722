/* accounting/kl: closed forms of "Initialization Matters". Eq. 7 equals Table 1's printed
 * forms for every initialization (and a direct product computed here without logs), shows
 * the paper's stated trends (LeCun/Xavier improve with depth, He/NTK worsen, all worsen with
 * width); Eq. 8 numbers by hand and the constant conventions; Lemma 3.2 against its
 * formula evaluated directly and its small-T behaviour; Eq. 9 reproduces Table 1's R for
 * LeCun; Corollary 6.4's sigma and T give exactly eps under Eq. 8; bad input errors. */
#include <dptrain/accounting.h>

#include <math.h>
#include <stdio.h>

#include "testutil.h"

static void widths_of(size_t d, size_t m, size_t o, size_t L, size_t *w) {
    w[0] = d, w[L] = o;
    for (size_t l = 1; l < L; l++) w[l] = m;
}

static double B_of(dpt_kl_init ki, size_t d, size_t m, size_t o, size_t L) {
    size_t w[80];
    double beta[80], B = NAN;
    widths_of(d, m, o, L, w);
    CHECK_OK(dpt_kl_init_variances(ki, w, L, beta));
    CHECK_OK(dpt_kl_gradient_constant(w, L, beta, &B));
    return B;
}

static void test_table1(void) {
    const size_t cases[][4] = {{3072, 1024, 2, 10}, {3072, 1024, 1, 2}, {10, 64, 3, 5}, {784, 100, 10, 3},
                               {5, 7, 1, 12},       {3072, 256, 2, 60}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int ki = 0; ki < 4; ki++) {
            const size_t d = cases[c][0], m = cases[c][1], o = cases[c][2], L = cases[c][3];
            double t1, B = B_of((dpt_kl_init)ki, d, m, o, L);
            CHECK_OK(dpt_kl_gradient_constant_table1((dpt_kl_init)ki, d, o, m, L, &t1));
            CHECK_CLOSE(B, t1, 0, 1e-11);
            /* direct evaluation of Eq. 7 (plain product, no logs) */
            size_t w[80];
            double beta[80];
            widths_of(d, m, o, L, w);
            dpt_kl_init_variances((dpt_kl_init)ki, w, L, beta);
            double p = 1, s = 0;
            for (size_t i = 1; i < L; i++) p *= beta[i - 1] * (double)w[i] / 2.0;
            for (size_t l = 1; l <= L; l++) s += beta[L - 1] / beta[l - 1];
            CHECK_CLOSE(B, (double)d * (double)o * p * s, 0, 1e-11);
        }
    /* variances by hand: Xavier at (d, m, o) = (10, 20, 3), L = 3 */
    size_t w[4] = {10, 20, 20, 3};
    double beta[3];
    CHECK_OK(dpt_kl_init_variances(DPT_KLI_XAVIER, w, 3, beta));
    CHECK_CLOSE(beta[0], 2.0 / 30, 0, 1e-15);
    CHECK_CLOSE(beta[1], 2.0 / 40, 0, 1e-15);
    CHECK_CLOSE(beta[2], 2.0 / 23, 0, 1e-15);
    CHECK_OK(dpt_kl_init_variances(DPT_KLI_NTK, w, 3, beta));
    CHECK_CLOSE(beta[0], 2.0 / 20, 0, 1e-15);
    CHECK_CLOSE(beta[2], 1.0 / 3, 0, 1e-15);
    /* He at d = m: B = o m L exactly (Table 1: o m (L - 1 + d/m)) */
    CHECK_CLOSE(B_of(DPT_KLI_HE, 64, 64, 2, 5), 2.0 * 64 * 5, 0, 1e-13);
}

static void test_trends(void) {
    /* the paper's Section 4: at d = 3072, o = 2 (CIFAR-10 car/plane), width 1024 */
    for (size_t L = 2; L < 12; L++) {
        CHECK(B_of(DPT_KLI_LECUN, 3072, 1024, 2, L + 1) < B_of(DPT_KLI_LECUN, 3072, 1024, 2, L));
        CHECK(B_of(DPT_KLI_HE, 3072, 1024, 2, L + 1) > B_of(DPT_KLI_HE, 3072, 1024, 2, L));
        CHECK(B_of(DPT_KLI_NTK, 3072, 1024, 2, L + 1) > B_of(DPT_KLI_NTK, 3072, 1024, 2, L));
        CHECK(B_of(DPT_KLI_XAVIER, 3072, 1024, 2, L + 1) < B_of(DPT_KLI_XAVIER, 3072, 1024, 2, L));
    }
    for (size_t m = 64; m < 2048; m *= 2)
        for (int ki = 0; ki < 4; ki++)
            CHECK(B_of((dpt_kl_init)ki, 3072, 2 * m, 2, 10) > B_of((dpt_kl_init)ki, 3072, m, 2, 10));
}

static void test_eq8(void) {
    dpt_kl_bound_result r;
    CHECK_OK(dpt_kl_linearized_bound(3.0, 1, 100, 0.01, 0.1, 10, &r));
    CHECK_CLOSE(r.T, 1.0, 0, 1e-15);
    CHECK_CLOSE(r.kl_bound_paper, 6.0, 0, 1e-14); /* 2 * 3 * 1 / (100 * 0.01) */
    CHECK_CLOSE(r.kl_bound, 3.0, 0, 1e-14);       /* exact constant, r = 1 (logistic) */
    CHECK(r.pinsker_tv == 1.0); /* sqrt(3 / 2) > 1: a TV distance is at most 1 (issue 18) */
    CHECK_OK(dpt_kl_linearized_bound(3.0, 1, 100, 0.01, 1.0, 10, &r));
    CHECK_CLOSE(r.pinsker_tv, sqrt(0.03 / 2), 0, 1e-14); /* below the cap: Pinsker as is */
    CHECK_CLOSE(dpt_pinsker_tv(0.02), 0.1, 0, 1e-15);
    CHECK(dpt_pinsker_tv(0) == 0 && dpt_pinsker_tv(2.0) == 1.0 && dpt_pinsker_tv(8.0) == 1.0);
    CHECK(dpt_pinsker_tv(INFINITY) == 1.0 && isnan(dpt_pinsker_tv(-1)) && isnan(dpt_pinsker_tv(NAN)));
    CHECK_OK(dpt_kl_linearized_bound(3.0, 2, 100, 0.01, 0.1, 10, &r));
    CHECK_CLOSE(r.kl_bound, 6.0, 0, 1e-14);       /* r = 2 for softmax with o >= 2 */
    CHECK_CLOSE(r.r, 2.0, 0, 0);
    /* per-step sum: steps * eta/(4 sigma^2) * 4 r B / n^2 */
    CHECK_OK(dpt_kl_linearized_bound(7.5, 3, 37, 0.003, 0.02, 123, &r));
    CHECK_CLOSE(r.kl_bound, 37 * (0.003 / (4 * 0.02 * 0.02)) * 4 * 2 * 7.5 / (123.0 * 123.0), 0, 1e-13);
    CHECK_STATUS(dpt_kl_linearized_bound(3.0, 1, 10, 0.01, 0.0, 10, &r), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_kl_linearized_bound: sigma must be > 0");
    CHECK_STATUS(dpt_kl_linearized_bound(3.0, 1, 10, -1, 0.1, 10, &r), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_kl_linearized_bound: eta must be > 0");
    CHECK_STATUS(dpt_kl_linearized_bound(3.0, 1, 10, 0.1, 0.1, 0, &r), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_kl_linearized_bound: n (the number of records) must be >= 1");
}

static void test_lemma32(void) {
    dpt_kl_lemma32_args a = {.T = 0.7, .sigma = 0.3, .n = 50, .b = 1.5, .c = 0.2, .rank = 40, .G0 = 0.01, .N0 = 2.0};
    double I, ke, kp;
    CHECK_OK(dpt_kl_lemma32(&a, &I, &ke, &kp));
    const double k = 2 + a.b * a.b;
    const double direct = 2 * a.T * a.G0 +
                          2 * a.b * a.b / (a.n * a.n * k) * ((exp(k * a.T) - 1) / k - a.T) *
                              (a.N0 + 2 * a.sigma * a.sigma * a.rank + a.c * a.c) +
                          2 * a.c * a.c * a.T / (a.n * a.n);
    CHECK_CLOSE(I, direct, 0, 1e-12);
    CHECK_CLOSE(ke, I / (4 * 0.09), 0, 1e-14);
    CHECK_CLOSE(kp, 2 * ke, 0, 1e-14);
    /* b = 0, c = 0: only the term linear in T remains */
    dpt_kl_lemma32_args z = a;
    z.b = 0, z.c = 0;
    CHECK_OK(dpt_kl_lemma32(&z, &I, NULL, NULL));
    CHECK_CLOSE(I, 2 * a.T * a.G0, 0, 1e-15);
    /* small T: the fluctuation term is o(T) (its ratio to T vanishes) */
    dpt_kl_lemma32_args s = a;
    s.G0 = 0, s.c = 0;
    double i1, i2;
    s.T = 1e-3;
    CHECK_OK(dpt_kl_lemma32(&s, &i1, NULL, NULL));
    s.T = 1e-4;
    CHECK_OK(dpt_kl_lemma32(&s, &i2, NULL, NULL));
    CHECK(i1 > 0 && i2 > 0);
    CHECK_CLOSE(i1 / i2, 100.0, 0, 0.01); /* ~ k T^2 / 2: quadratic */
    s.sigma = 0;
    CHECK_STATUS(dpt_kl_lemma32(&s, &i1, NULL, NULL), DPT_EINVAL);
}

static void test_section6(void) {
    size_t w[12];
    double beta[12], R, B;
    const size_t d = 3072, m = 4096, L = 6, n = 1000;
    widths_of(d, m, 1, L, w);
    CHECK_OK(dpt_kl_init_variances(DPT_KLI_LECUN, w, L, beta));
    CHECK_OK(dpt_kl_lazy_distance(w, L, beta, n, &R));
    /* Table 1, LeCun: R = (n/m) / (L - 1 + d/m) (the max{.} factor is exactly 1) */
    CHECK_CLOSE(R, ((double)n / m) / (L - 1 + (double)d / m), 0, 1e-12);
    CHECK_OK(dpt_kl_gradient_constant(w, L, beta, &B));
    double T, sigma, ex;
    const double eps = 0.5;
    CHECK_OK(dpt_kl_tradeoff(B, R, n, eps, &T, &sigma, &ex));
    dpt_kl_bound_result r;
    /* with T = eta * steps at eta = T: Eq. 8 as printed gives exactly eps */
    CHECK_OK(dpt_kl_linearized_bound(B, 1, 1, T, sigma, n, &r));
    CHECK_CLOSE(r.kl_bound_paper, eps, 0, 1e-12);
    CHECK_CLOSE(ex, 1.0 / (n * (double)n) + sqrt(B * R / (eps * n)), 0, 1e-13);
    CHECK_STATUS(dpt_kl_tradeoff(B, R, n, 0.0, &T, &sigma, &ex), DPT_EINVAL);
}

static void test_errors(void) {
    size_t w[3] = {10, 5, 2};
    double beta[2] = {0.1, 0.1}, B;
    CHECK_STATUS(dpt_kl_gradient_constant(w, 1, beta, &B), DPT_EINVAL);
    CHECK_ERR_HAS("L (the depth) must be >= 2");
    CHECK_STATUS(dpt_kl_init_variances(DPT_KLI_HE, w, 1, beta), DPT_EINVAL);
    CHECK_STATUS(dpt_kl_gradient_constant_table1(DPT_KLI_HE, 10, 2, 5, 1, &B), DPT_EINVAL);
    beta[1] = 0;
    CHECK_STATUS(dpt_kl_gradient_constant(w, 2, beta, &B), DPT_EINVAL);
    CHECK_ERR_HAS("beta_2");
    dpt_kl_init ki;
    CHECK_STATUS(dpt_kl_init_parse("kaiming-uniform", &ki), DPT_EINVAL);
    CHECK_ERR_HAS("lecun|he|xavier|ntk");
    CHECK_OK(dpt_kl_init_parse("xavier", &ki));
    CHECK(ki == DPT_KLI_XAVIER);
}

int main(void) {
    test_table1();
    test_trends();
    test_eq8();
    test_lemma32();
    test_section6();
    test_errors();
    TEST_MAIN_END();
}
