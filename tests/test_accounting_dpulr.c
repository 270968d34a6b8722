/* accounting/dpulr: the rejection term of DP-ULR's sampled-with-rejection Gaussian
 * mechanism against its closed form at N_B = 1, an independent direct summation (pmf by
 * the multiplicative recurrence in long double, no lgamma), the paper's Section 3.4 example
 * (Nbar = 1e4, q = 0.01, N_B = 50: below 1e-10); the ledger event against the two terms
 * added by hand, its JSON round trip and step count; the default N_B rule; clear errors. */
#include <dptrain/accounting.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Independent: pmf(k) by p(0) = (1-q)^n, p(k+1) = p(k) (n-k)/(k+1) q/(1-q), all summed,
 * at Nbar = n. */
static double direct_term_n(double q, unsigned n, unsigned nb) {
    long double p = powl(1.0L - q, n), cdf = 0, pm1 = 0;
    for (unsigned k = 0; k < nb; k++) {
        cdf += p;
        if (k == nb - 1) pm1 = p;
        p = p * (long double)(n - k) / (long double)(k + 1) * q / (1.0L - q);
    }
    return (double)log1pl(q * pm1 / (1.0L - cdf));
}

/* The ratio of normalizers it stands for (Appendix B, Eq. 38): c0 / c1 = P_{n+1}(|B| >= N_B)
 * / P_n(|B| >= N_B), the acceptance probabilities with one example more and without it. */
static double accept_ratio_log(double q, unsigned n, unsigned nb) {
    long double acc[2];
    for (int w = 0; w < 2; w++) {
        unsigned m = n + (unsigned)w;
        long double p = powl(1.0L - q, m), cdf = 0;
        for (unsigned k = 0; k < nb; k++) {
            cdf += p;
            p = p * (long double)(m - k) / (long double)(k + 1) * q / (1.0L - q);
        }
        acc[w] = 1.0L - cdf;
    }
    return (double)logl(acc[1] / acc[0]);
}

/* the term charged: the larger of Nbar = N - 1 and Nbar = N */
static double direct_term(double q, unsigned n_data, unsigned nb) {
    double a = direct_term_n(q, n_data - 1, nb), b = direct_term_n(q, n_data, nb);
    return a > b ? a : b;
}

static void test_closed_form_and_direct(void) {
    const double qs[3] = {0.01, 0.1, 0.3};
    const unsigned Ns[3] = {50, 301, 2000};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            double q = qs[a], t = 0;
            unsigned N = Ns[b];
            if (q * N < 1) continue;
            /* N_B = 1: p(0) = P(0) = (1-q)^Nbar, largest at Nbar = N - 1 */
            double p0 = pow(1 - q, N - 1);
            CHECK_OK(dpt_dpulr_rejection_term(q, N, 1, &t));
            CHECK_CLOSE(t, log1p(q * p0 / (1 - p0)), 1e-300, 1e-10);
            /* Eq. 38 is the log-ratio of the acceptance probabilities */
            unsigned top0 = (unsigned)floor(q * N);
            for (unsigned nb = 1; nb <= top0; nb += (top0 / 5 ? top0 / 5 : 1))
                CHECK_CLOSE(direct_term_n(q, N - 1, nb), accept_ratio_log(q, N - 1, nb), 1e-15, 1e-6); /* log of a ratio near 1: cancellation */
            unsigned top = (unsigned)floor(q * N);
            for (unsigned nb = 1; nb <= top; nb += (top / 7 ? top / 7 : 1)) {
                CHECK_OK(dpt_dpulr_rejection_term(q, N, nb, &t));
                CHECK_CLOSE(t, direct_term(q, N, nb), 1e-300, 1e-9);
            }
        }
    /* grows with N_B (a higher threshold rejects more) */
    double prev = -1, t;
    for (unsigned nb = 1; nb <= 30; nb++) {
        CHECK_OK(dpt_dpulr_rejection_term(0.1, 301, nb, &t));
        CHECK(t > prev);
        prev = t;
    }
}

static void test_paper_example(void) {
    /* Section 3.4: Nbar = 10000, q = 0.01, N_B = 50 -> impairment below 1e-10, while the
     * second term is above 1e-6 */
    double t = 0, g = 0, s = 0;
    CHECK_OK(dpt_dpulr_rejection_term(0.01, 10001, 50, &t));
    CHECK(t > 0 && t < 1e-10);
    printf("paper example: rejection term %.4g\n", t);
    CHECK_OK(dpt_dpulr_rdp(0.01, 4.0, 10001, 50, 2.0, &g, NULL, &s));
    CHECK(s > 1e-6);
    CHECK_CLOSE(g, s + t, 0, 1e-15);
    /* with N_B at qN about half the batches are rejected: the term is large */
    CHECK_OK(dpt_dpulr_rejection_term(0.01, 10001, 100, &t));
    CHECK(t > 1e-4 && t > 1e4 * 5.377e-11);
    /* MNIST, batch 500: q = 1/120 with N_B = qN: the "not negligible" case */
    CHECK_OK(dpt_dpulr_rejection_term(1.0 / 120, 60000, 500, &t));
    CHECK(t > 1e-4);
}

static void test_errors(void) {
    double t;
    CHECK_STATUS(dpt_dpulr_rejection_term(0.01, 1000, 11, &t), DPT_EINVAL); /* qN = 10 */
    CHECK_ERR_HAS("N_B = 11 must be in [1, qN]");
    CHECK_STATUS(dpt_dpulr_rejection_term(0.01, 1000, 0, &t), DPT_EINVAL);
    CHECK_ERR_HAS("N_B = 0 must be in [1, qN]");
    CHECK_STATUS(dpt_dpulr_rejection_term(0.0, 1000, 1, &t), DPT_EINVAL);
    CHECK_STATUS(dpt_dpulr_rejection_term(1.5, 1000, 1, &t), DPT_EINVAL);
    CHECK_OK(dpt_dpulr_rejection_term(0.01, 1000, 10, &t)); /* N_B = qN is allowed */
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_STATUS(dpt_ledger_add_dpulr(l, 0.01, 0.0, 1000, 5, 1), DPT_EINVAL);
    CHECK_STATUS(dpt_ledger_add_dpulr(l, 0.01, 1.0, 1000, 50, 1), DPT_EINVAL);
    dpt_ledger_free(l);
}

static void test_ledger(void) {
    const double q = 0.02, sigma = 1.1, delta = 1e-5;
    const uint64_t N = 2000, NB = 30, T = 700;
    dpt_ledger *l = NULL, *h = NULL, *back = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_dpulr(l, q, sigma, N, NB, 300));
    CHECK_OK(dpt_ledger_add_dpulr(l, q, sigma, N, NB, T - 300)); /* merged */
    CHECK(dpt_ledger_n_events(l) == 1);
    CHECK(dpt_ledger_steps(l) == T);
    CHECK(!dpt_ledger_pld_applies(l));
    double e = 0, e2 = 0, eh = 0, rej = 0;
    CHECK_STATUS(dpt_ledger_epsilon(l, delta, DPT_ACCT_PLD, DPT_CONV_BALLE, &e), DPT_ENOTSUP);
    CHECK_OK(dpt_ledger_epsilon(l, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &e));
    CHECK_OK(dpt_dpulr_epsilon(q, sigma, N, NB, T, delta, DPT_CONV_BALLE, &e2, NULL));
    CHECK_CLOSE(e, e2, 0, 1e-12);
    /* the same by hand: a curve of rej + RDP_SGM at every default order */
    size_t n = 0;
    const double *ord = dpt_rdp_default_orders(&n);
    double *curve = malloc(n * sizeof(double));
    CHECK_OK(dpt_dpulr_rejection_term(q, N, NB, &rej));
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        CHECK_OK(dpt_rdp_sgm(q, sigma, ord[i], &s));
        curve[i] = rej + s;
    }
    CHECK_OK(dpt_ledger_new(&h));
    CHECK_OK(dpt_ledger_add_rdp_curve(h, ord, curve, n, T, "by hand"));
    CHECK_OK(dpt_ledger_epsilon(h, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &eh));
    CHECK_CLOSE(e, eh, 0, 1e-12);
    /* it is more than the plain SGM by at most T * rej (added to every order) */
    double es = 0;
    CHECK_OK(dpt_rdp_sgm_epsilon(q, sigma, T, delta, DPT_CONV_BALLE, NULL, 0, &es, NULL));
    CHECK(e >= es && e <= es + T * rej + 1e-12);
    /* JSON round trip keeps the event */
    char *js = NULL;
    CHECK_OK(dpt_ledger_to_json(l, &js));
    CHECK(js && strstr(js, "\"dpulr\"") && strstr(js, "\"min_batch\""));
    CHECK_OK(dpt_ledger_from_json(js, &back));
    double eb = 0;
    if (back) CHECK_OK(dpt_ledger_epsilon(back, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &eb));
    CHECK_CLOSE(eb, e, 0, 0);
    CHECK(dpt_ledger_steps(back) == T);
    free(js);
    free(curve);
    dpt_ledger_free(l);
    dpt_ledger_free(h);
    dpt_ledger_free(back);
}

static void test_default_min_batch(void) {
    /* MNIST sizes: the default keeps the ratio to the SGM term at alpha 1.1 below 1e-3 and
     * the next threshold would not */
    const double qs[3] = {64.0 / 60000, 200.0 / 60000, 500.0 / 60000};
    for (int i = 0; i < 3; i++) {
        uint64_t nb = 0;
        double r = 0, rej = 0, sgm = 0;
        CHECK_OK(dpt_dpulr_default_min_batch(qs[i], 4.0, 60000, 1e-3, &nb, &r));
        CHECK(nb >= 1 && (double)nb <= qs[i] * 60000);
        CHECK(r <= 1e-3);
        CHECK_OK(dpt_dpulr_rdp(qs[i], 4.0, 60000, nb + 1, DPT_DPULR_RATIO_ALPHA, NULL, &rej, &sgm));
        CHECK(rej / sgm > 1e-3);
        printf("q = %.6g: default N_B = %llu of qN = %.1f (ratio %.3g)\n", qs[i], (unsigned long long)nb,
               qs[i] * 60000, r);
    }
}

/* The rejection term with the upper tail summed one value at a time up to 40 sd above
 * the mean (the terms beyond are below e^-800 of the largest): the reference for the
 * blocked lower bound. */
static double slow_term(double q, uint64_t N, uint64_t N_B) {
    double best = 0;
    for (uint64_t nbar = N - 1; nbar <= N; nbar++) {
        if (N_B - 1 > nbar) continue;
        double top = (double)nbar * q + 40 * sqrt((double)nbar * q * (1 - q)) + 40;
        uint64_t hi = top < (double)nbar ? (uint64_t)top : nbar;
        double mx = -INFINITY;
        for (uint64_t j = N_B; j <= hi; j++) mx = fmax(mx, dpt_binom_logpmf(nbar, q, j));
        double s = 0;
        for (uint64_t j = N_B; j <= hi; j++) s += exp(dpt_binom_logpmf(nbar, q, j) - mx);
        double lu = mx + log(s), lp = dpt_binom_logpmf(nbar, q, N_B - 1);
        best = fmax(best, log1p(exp(log(q) + lp - lu)));
    }
    return best;
}

/* issue 18: the tail walked one value at a time (n = 1e14 took 42 s). The blocked sum is a
 * lower bound of the tail (so the charged term is never smaller than the exact one) and
 * within 1e-5 of it; huge n is fast. */
static void test_tail_blocks(void) {
    /* the saddle-point pmf against the lgamma form (exact enough for n <= 1e6) */
    uint64_t ns[] = {1, 2, 7, 16, 40, 100, 1000, 123457, 1000000};
    double qs[] = {1e-4, 0.01, 0.3, 0.5, 0.97};
    double worst = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof qs / sizeof qs[0]; b++)
            for (int f = 0; f <= 20; f++) {
                uint64_t n = ns[a], k = (uint64_t)((double)n * f / 20.0);
                double N = (double)n, K = (double)k, q = qs[b];
                double ref = lgamma(N + 1) - lgamma(K + 1) - lgamma(N - K + 1) + K * log(q) + (N - K) * log1p(-q);
                /* the reference itself is off by a few ulps of lgamma(n + 1) */
                double tol = 1e-12 * fmax(1.0, fabs(ref)) + 16 * DBL_EPSILON * lgamma(N + 1);
                worst = fmax(worst, fabs(dpt_binom_logpmf(n, q, k) - ref) / tol);
            }
    CHECK(worst <= 1.0);
    /* log(C(1e6, 5e5) / 2^1e6) to 40 digits (mpmath), where the lgamma form has 9 */
    CHECK_CLOSE(dpt_binom_logpmf(1000000, 0.5, 500000), -7.133546881626864484, 0, 1e-14);
    CHECK_CLOSE(exp(dpt_binom_logpmf(10, 0.3, 3)), 120 * 0.027 * 0.0823543, 0, 1e-12);
    struct {
        double q;
        uint64_t N, N_B;
    } c[] = {{0.01, 2000, 5}, {0.01, 2000, 20}, {0.3, 500, 150}, {0.05, 200000, 9900}, {0.05, 200000, 9990},
             {0.5, 3000000, 1499000}, {0.2, 1000000, 199500}, {0.001, 5000000, 4950},
             {0.5, 20000000, 9995000} /* sd 2236: blocks of 8 */};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        double fast, ref = slow_term(c[i].q, c[i].N, c[i].N_B);
        CHECK_OK(dpt_dpulr_rejection_term(c[i].q, c[i].N, c[i].N_B, &fast));
        CHECK(fast >= ref * (1 - 1e-13));  /* conservative: never below the exact term */
        CHECK_CLOSE(fast, ref, 0, 1e-5);
    }
    /* n = 1e14 with the threshold a few sd below qN, in well under a second */
    double t0 = dpt_now(), term = 0;
    uint64_t N = 100000000000000ull;
    double q = 0.5, sd = sqrt((double)N * q * (1 - q));
    CHECK_OK(dpt_dpulr_rejection_term(q, N, (uint64_t)((double)N * q - 3 * sd), &term));
    double dt = dpt_now() - t0;
    printf("rejection term at N = 1e14, N_B = qN - 3 sd: %.6g (%.3f s)\n", term, dt);
    CHECK(term > 0 && isfinite(term));
    CHECK(dt < 2.0);
    /* the term depends on N only through (N_B - qN) / sd here: compare with a small N at
     * the same standardized threshold (normal limit, loose) */
    double small;
    uint64_t n2 = 4000000;
    double sd2 = sqrt((double)n2 * q * (1 - q));
    CHECK_OK(dpt_dpulr_rejection_term(q, n2, (uint64_t)((double)n2 * q - 3 * sd2), &small));
    CHECK_CLOSE(term * sd, small * sd2, 0, 0.02);
}

int main(void) {
    test_closed_form_and_direct();
    test_paper_example();
    test_errors();
    test_ledger();
    test_default_min_batch();
    test_tail_blocks();
    TEST_MAIN_END();
}
