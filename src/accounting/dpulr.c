/* Accountant of DP-ULR's sampled-with-rejection Gaussian mechanism (Theorems 3.5 / 3.6 and
 * Appendix B of "Forward Learning with Differential Privacy", ICML version). Per step
 *   gamma(alpha) = ln(1 + q p(N_B - 1; Nbar, q) / (1 - P(N_B - 1; Nbar, q)))
 *                + RDP_SGM(q, sigma0, alpha)
 * with p / P the Binomial(Nbar, q) pmf / cdf and Nbar the smaller dataset of a neighbouring
 * pair: N - 1 or N for a dataset of N examples (the larger term of the two is used).
 * The paper states the second term as 2 q^2 alpha / sigma0^2 under its conditions
 * (q <= 1/5, sigma0 >= 4, bounded alpha); we use the exact SGM RDP of rdp.c instead,
 * which is at least as large where that closed form holds and also covers sigma0 < 4
 * (our inference, see docs/dpulr.md). Everything is computed in log space. */
#include <math.h>

#include "dptrain/accounting.h"

dpt_status dpt_acct_rdp_curve(double q, double sigma, const double *orders, size_t n, double *out);

/* log Binomial(n, q) pmf at k (0 <= k <= n, 0 < q < 1). */
double dpt_binom_logpmf(uint64_t n, double q, uint64_t k) {
    double nn = (double)n, kk = (double)k;
    return lgamma(nn + 1.0) - lgamma(kk + 1.0) - lgamma(nn - kk + 1.0) + kk * log(q) + (nn - kk) * log1p(-q);
}

/* log P(X >= k) for X ~ Binomial(n, q): log-sum-exp of the pmf from k up, summed outward
 * from the largest term (the mode or k) until the terms are below 1e-40 of the running
 * sum. */
static double log_upper_tail(uint64_t n, double q, uint64_t k) {
    if (k == 0) return 0.0;
    if (k > n) return -INFINITY;
    double mode = floor((double)(n + 1) * q);
    uint64_t start = (double)k > mode ? k : (uint64_t)mode;
    if (start > n) start = n;
    double m = dpt_binom_logpmf(n, q, start), s = 1.0;
    for (uint64_t j = start + 1; j <= n; j++) {
        double d = dpt_binom_logpmf(n, q, j) - m;
        s += exp(d);
        if (d < -92.0) break; /* exp(-92) ~ 1e-40 */
    }
    for (uint64_t j = start; j > k;) {
        j--;
        double d = dpt_binom_logpmf(n, q, j) - m;
        s += exp(d);
        if (d < -92.0 && (double)j < mode) break;
    }
    return m + log(s);
}

dpt_status dpt_dpulr_rejection_term(double q, uint64_t N, uint64_t N_B, double *term) {
    DPT_CHECK(term, DPT_EINVAL, "dpulr accountant: NULL output");
    DPT_CHECK(isfinite(q) && q > 0 && q < 1, DPT_EINVAL, "dpulr accountant: the sampling rate q must be in (0, 1), got %g",
              q);
    DPT_CHECK(N >= 2, DPT_EINVAL, "dpulr accountant: the dataset needs at least 2 examples, got %llu",
              (unsigned long long)N);
    DPT_CHECK(N_B >= 1 && (double)N_B <= q * (double)N * (1.0 + 1e-12), DPT_EINVAL,
              "N_B = %llu must be in [1, qN] = [1, %.6g] (q %g, N %llu)", (unsigned long long)N_B,
              q * (double)N, q, (unsigned long long)N);
    /* ln(1 + q p(N_B-1) / (1 - P(N_B-1))) with 1 - P(N_B-1) = P(X >= N_B), for the smaller
     * dataset of each neighbouring pair: N - 1 (a removal) and N (an addition); the larger
     * of the two is charged */
    double best = 0;
    for (uint64_t nbar = N - 1; nbar <= N; nbar++) {
        if (N_B - 1 > nbar) continue;
        double lp = dpt_binom_logpmf(nbar, q, N_B - 1), lu = log_upper_tail(nbar, q, N_B);
        DPT_CHECK(isfinite(lu), DPT_ERANGE, "dpulr accountant: P(|B| >= N_B) underflows (N_B %llu, q %g, N %llu)",
                  (unsigned long long)N_B, q, (unsigned long long)N);
        double t = log1p(exp(log(q) + lp - lu));
        if (t > best) best = t;
    }
    *term = best;
    return DPT_OK;
}

dpt_status dpt_dpulr_rdp(double q, double sigma0, uint64_t N, uint64_t N_B, double alpha, double *gamma,
                         double *rejection, double *sgm) {
    double rej = 0, s = 0;
    DPT_TRY(dpt_dpulr_rejection_term(q, N, N_B, &rej));
    DPT_TRY(dpt_rdp_sgm(q, sigma0, alpha, &s));
    if (gamma) *gamma = rej + s;
    if (rejection) *rejection = rej;
    if (sgm) *sgm = s;
    return DPT_OK;
}

dpt_status dpt_dpulr_epsilon(double q, double sigma0, uint64_t N, uint64_t N_B, uint64_t steps, double delta,
                             dpt_conversion conv, double *eps, double *best_order) {
    dpt_ledger *l = NULL;
    DPT_TRY(dpt_ledger_new(&l));
    dpt_status s = dpt_ledger_add_dpulr(l, q, sigma0, N, N_B, steps);
    if (s == DPT_OK) s = dpt_ledger_epsilon_rdp(l, delta, conv, NULL, 0, eps, best_order, NULL);
    dpt_ledger_free(l);
    return s;
}

dpt_status dpt_dpulr_default_min_batch(double q, double sigma0, uint64_t N, double max_ratio, uint64_t *N_B,
                                       double *ratio) {
    DPT_CHECK(N_B, DPT_EINVAL, "dpulr: NULL output");
    DPT_CHECK(isfinite(max_ratio) && max_ratio > 0, DPT_EINVAL, "dpulr: ratio bound must be > 0");
    uint64_t hi = (uint64_t)floor(q * (double)N * (1.0 + 1e-12));
    DPT_CHECK(hi >= 1, DPT_EINVAL, "dpulr: the expected batch qN = %g is below 1: no rejection threshold fits",
              q * (double)N);
    double sgm = 0;
    DPT_TRY(dpt_rdp_sgm(q, sigma0, DPT_DPULR_RATIO_ALPHA, &sgm));
    /* the rejection term grows with N_B: the largest N_B with term/sgm <= max_ratio */
    uint64_t lo = 1;
    double r = 0;
    DPT_TRY(dpt_dpulr_rejection_term(q, N, 1, &r));
    if (r / sgm > max_ratio) {
        *N_B = 1;
        if (ratio) *ratio = r / sgm;
        return DPT_OK;
    }
    while (hi > lo) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        DPT_TRY(dpt_dpulr_rejection_term(q, N, mid, &r));
        if (r / sgm <= max_ratio) lo = mid;
        else hi = mid - 1;
    }
    DPT_TRY(dpt_dpulr_rejection_term(q, N, lo, &r));
    *N_B = lo;
    if (ratio) *ratio = r / sgm;
    return DPT_OK;
}
