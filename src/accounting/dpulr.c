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

/* ==== Binomial pmf, accurate for any n ==== */

/* stirlerr(n) = log(n!) - log(sqrt(2 pi n) (n/e)^n), n >= 1: the Stirling series for
 * n > 15 (the terms 1/12n - 1/360n^3 + ...), lgamma below, where it is exact enough. */
static double stirlerr(double n) {
    const double S0 = 1.0 / 12, S1 = 1.0 / 360, S2 = 1.0 / 1260, S3 = 1.0 / 1680, S4 = 1.0 / 1188;
    if (n <= 15.0) return lgamma(n + 1.0) - (n + 0.5) * log(n) + n - 0.5 * log(2.0 * M_PI);
    double nn = n * n;
    if (n > 500) return (S0 - S1 / nn) / n;
    if (n > 80) return (S0 - (S1 - S2 / nn) / nn) / n;
    if (n > 35) return (S0 - (S1 - (S2 - S3 / nn) / nn) / nn) / n;
    return (S0 - (S1 - (S2 - (S3 - S4 / nn) / nn) / nn) / nn) / n;
}

/* bd0(x, m) = x log(x / m) + m - x >= 0, by its series in v = (x - m) / (x + m) when x is
 * near m (where the direct form cancels), else directly. */
static double bd0(double x, double m) {
    if (fabs(x - m) < 0.1 * (x + m)) {
        double v = (x - m) / (x + m), s = (x - m) * v, ej = 2.0 * x * v;
        v *= v;
        for (int j = 1; j < 1000; j++) {
            ej *= v;
            double s1 = s + ej / (double)(2 * j + 1);
            if (s1 == s) return s1;
            s = s1;
        }
        return s;
    }
    return x * log(x / m) + m - x;
}

/* log Binomial(n, q) pmf at k (0 <= k <= n, 0 < q < 1), by Loader's saddle-point form
 * ("Fast and accurate computation of binomial probabilities", 2000): the difference of
 * three lgamma values of size n log n loses all precision at n ~ 1e14 (an ulp of
 * lgamma(1e14) is 0.5), this form keeps full relative precision. */
double dpt_binom_logpmf(uint64_t n, double q, uint64_t k) {
    double N = (double)n, K = (double)k;
    if (k == 0) return N * log1p(-q);
    if (k == n) return N * log(q);
    double lc = stirlerr(N) - stirlerr(K) - stirlerr(N - K) - bd0(K, N * q) - bd0(N - K, N * (1.0 - q));
    return lc - 0.5 * (log(2.0 * M_PI) + log(K) + log1p(-K / N));
}

/* log of sum_{t=0}^{L-1} e^{t s}: the geometric sum along a chord of slope s. */
static double log_geom(uint64_t L, double s) {
    if (L == 1) return 0.0;
    double Ls = (double)L * s;
    if (fabs(s) < 1e-300) return log((double)L);
    if (s < 0) return log(-expm1(Ls)) - log(-expm1(s)); /* (1 - e^{Ls}) / (1 - e^s) */
    return Ls - s + log(-expm1(-Ls)) - log(-expm1(-s));  /* same, factored for s > 0 */
}

/* A LOWER bound on log P(X >= k) for X ~ Binomial(n, q), summed outward from the largest
 * term (the mode or k) in blocks of L consecutive values until the terms fall below 1e-40
 * of the running maximum. The binomial pmf is log-concave in j, so on each block [a, b]
 * log p(j) lies on or above the chord between log p(a) and log p(b): the geometric sum
 * along the chord is a lower bound of the block's mass, exact for L = 1. With
 * L = sd / 256 (sd = sqrt(n q (1 - q))) the bound is within ~1e-6 relative of the sum
 * and the walk takes ~3,600 blocks per side whatever n: summing one value at a time took
 * 42 s at n = 1e14 (issue 18). The caller divides by this tail, so under-estimating it
 * (the chord, the truncation) only makes the charged rejection term larger. */
static double log_upper_tail(uint64_t n, double q, uint64_t k) {
    if (k == 0) return 0.0;
    if (k > n) return -INFINITY;
    double mode = floor((double)(n + 1) * q);
    uint64_t start = (double)k > mode ? k : (uint64_t)mode;
    if (start > n) start = n;
    double sd = sqrt((double)n * q * (1.0 - q));
    uint64_t L = sd > 256.0 ? (uint64_t)(sd / 256.0) : 1;
    double m = dpt_binom_logpmf(n, q, start), s = 1.0;
    /* upward: blocks [a, b] above start */
    for (uint64_t a = start + 1; a <= n;) {
        uint64_t b = n - a + 1 > L ? a + L - 1 : n;
        double ga = dpt_binom_logpmf(n, q, a) - m, gb = b > a ? dpt_binom_logpmf(n, q, b) - m : ga;
        s += exp(ga + log_geom(b - a + 1, b > a ? (gb - ga) / (double)(b - a) : 0.0));
        if (gb < -92.0) break; /* exp(-92) ~ 1e-40 */
        a = b + 1;
    }
    /* downward: blocks [a, b] from start - 1 down to k */
    for (uint64_t b = start; b > k;) {
        b--;
        uint64_t a = b - k + 1 > L ? b - L + 1 : k;
        double gb = dpt_binom_logpmf(n, q, b) - m, ga = b > a ? dpt_binom_logpmf(n, q, a) - m : gb;
        s += exp(gb + log_geom(b - a + 1, b > a ? (ga - gb) / (double)(b - a) : 0.0));
        if (ga < -92.0 && (double)a < mode) break;
        b = a;
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
