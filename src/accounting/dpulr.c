/* Accountant of DP-ULR's sampled-with-rejection Gaussian mechanism: each example is drawn
 * with probability q, the batch is redrawn while it has fewer than N_B examples, and the
 * clipped sum (each example's estimate of norm <= C) plus N(0, sigma0^2 C^2 I) is released.
 * The bound and its proof are in docs/dpulr.md ("The accountant"); in short, for a pair of
 * neighbouring datasets of sizes n and n + 1 (the target x in the larger one) we reveal
 * m' = max(m, N_B), m the number of OTHER examples in the batch. Conditioned on m' > N_B the
 * pair is the plain add-one sampled Gaussian at (q, sigma0); conditioned on m' = N_B it
 * also holds the batches of N_B - 1 others completed by x, coupled to N_B-subsets by
 * dropping one uniform element (a replace-one difference, norm <= 2C), and is bounded by
 * the sampled Gaussian at (p*, sigma0 / 2). With b_j the Binomial(n, q) pmf, Z = P(X_n >=
 * N_B), u = b_{N_B} / Z, r = q b_{N_B - 1} / b_{N_B} = N_B (1 - q) / (n - N_B + 1),
 * p* = (q + r) / (1 + r), A = e^{(a-1) RDP_SGM(q, sigma0, a)}, B = e^{(a-1) RDP_SGM(p*, sigma0/2, a)}:
 *   e^{(a-1) D_a(larger || smaller)} <= (1 + r u)^{-a}  [(1 - u) A + u (1 + r)^a     B]
 *   e^{(a-1) D_a(smaller || larger)} <= (1 + r u)^{a-1} [(1 - u) A + u (1 + r)^{1-a} B]
 * taken at n = N - 1 and n = N (both neighbours of a dataset of N), the largest of the
 * four charged. This replaces the paper's ln(c0/c1) + RDP_SGM(q, sigma0) (Theorems
 * 3.5-3.6 of "Forward Learning with Differential Privacy"), which is not an upper bound
 * when N_B is near qN (issue 38). Everything is computed in log space. */
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

/* log f(j+1)/f(j) for the Binomial(n, q) pmf f, j < n. The ratio is non-increasing in j
 * (log-concavity), which gives the upper bounds below. */
static double log_step(uint64_t n, double q, uint64_t j) {
    return log((double)(n - j)) - log((double)j + 1.0) + log(q) - log1p(-q);
}

/* Bounds lo <= log P(X >= k) <= hi for X ~ Binomial(n, q), 1 <= k <= n, summed outward
 * from the largest term (the mode or k) in blocks of L consecutive values until the terms
 * fall below 1e-40 of that term. On a block [a, b] log f lies on or above the chord between
 * log f(a) and log f(b) (log-concavity): the geometric sum along the chord is a lower
 * bound of the block's mass. It lies below the tangent at the block's end nearer the
 * start, f(a + t) <= f(a) rho_a^t (upward) and f(b - t) <= f(b) / rho_{b-1}^t (downward),
 * with rho_j = f(j+1)/f(j) non-increasing: an upper bound. Both are exact for L = 1. What
 * the walk leaves out is at most (values left) x (the last term), f being monotone beyond
 * the mode: added to the upper bound. L = sd / 256 (sd = sqrt(n q (1 - q))) keeps both
 * within ~1e-6 relative and the walk at ~3,600 blocks per side whatever n (issue 18:
 * summing one value at a time took 42 s at n = 1e14). */
static void log_upper_tail(uint64_t n, double q, uint64_t k, double *lo, double *hi) {
    double mode = floor((double)(n + 1) * q);
    if (mode > (double)n) mode = (double)n;
    uint64_t start = (double)k > mode ? k : (uint64_t)mode;
    double sd = sqrt((double)n * q * (1.0 - q));
    uint64_t L = sd > 256.0 ? (uint64_t)(sd / 256.0) : 1;
    double m = dpt_binom_logpmf(n, q, start), slo = 1.0, shi = 1.0;
    /* upward: blocks [a, b] above start */
    for (uint64_t a = start + 1; a <= n;) {
        uint64_t b = n - a + 1 > L ? a + L - 1 : n, len = b - a + 1;
        double ga = dpt_binom_logpmf(n, q, a) - m, gb = b > a ? dpt_binom_logpmf(n, q, b) - m : ga;
        slo += exp(ga + log_geom(len, b > a ? (gb - ga) / (double)(b - a) : 0.0));
        shi += exp(ga + log_geom(len, b > a ? log_step(n, q, a) : 0.0));
        if (gb < -92.0) { /* exp(-92) ~ 1e-40; the values above b are each below f(b) */
            shi += (double)(n - b) * exp(gb);
            break;
        }
        a = b + 1;
    }
    /* downward: blocks [a, b] from start - 1 down to k */
    for (uint64_t b = start; b > k;) {
        b--;
        uint64_t a = b - k + 1 > L ? b - L + 1 : k, len = b - a + 1;
        double gb = dpt_binom_logpmf(n, q, b) - m, ga = b > a ? dpt_binom_logpmf(n, q, a) - m : gb;
        slo += exp(gb + log_geom(len, b > a ? (ga - gb) / (double)(b - a) : 0.0));
        shi += exp(gb + log_geom(len, b > a ? -log_step(n, q, b - 1) : 0.0));
        if (ga < -92.0 && (double)a < mode) { /* the values in [k, a) are each below f(a) */
            shi += (double)(a - k) * exp(ga);
            break;
        }
        b = a;
    }
    /* the pmf itself is accurate to ~1e-13 relative: widen by that much */
    *lo = m + log(slo) - 1e-12;
    *hi = m + log(shi) + 1e-12;
}

/* ==== The bound ==== */

dpt_status dpt_dpulr_check(double q, uint64_t N, uint64_t N_B) {
    DPT_CHECK(isfinite(q) && q > 0 && q < 1, DPT_EINVAL, "dpulr accountant: the sampling rate q must be in (0, 1), got %g",
              q);
    DPT_CHECK(N >= 2, DPT_EINVAL, "dpulr accountant: the dataset needs at least 2 examples, got %llu",
              (unsigned long long)N);
    DPT_CHECK(N_B >= 1 && (double)N_B <= q * (double)N * (1.0 + 1e-12), DPT_EINVAL,
              "N_B = %llu must be in [1, qN] = [1, %.6g] (q %g, N %llu)", (unsigned long long)N_B,
              q * (double)N, q, (unsigned long long)N);
    return DPT_OK;
}

/* The quantities of the pair (n, n + 1) that do not depend on the order. */
typedef struct {
    double log1p_r;    /* log(1 + r), r = q b_{N_B-1} / b_{N_B} */
    double lu_lo, lu_hi; /* bounds on log u, u = b_{N_B} / P(X_n >= N_B) */
    double r, pstar;   /* pstar = (q + r) / (1 + r): the target's rate given m' = N_B */
} pair_terms;

static dpt_status pair_setup(double q, uint64_t n, uint64_t N_B, pair_terms *p) {
    DPT_CHECK(N_B <= n, DPT_EINVAL, "dpulr accountant: N_B = %llu exceeds the %llu other examples (q %g)",
              (unsigned long long)N_B, (unsigned long long)n, q);
    double lo, hi;
    log_upper_tail(n, q, N_B, &lo, &hi);
    double lb = dpt_binom_logpmf(n, q, N_B);
    DPT_CHECK(isfinite(lo) && isfinite(lb), DPT_ERANGE,
              "dpulr accountant: P(|B| >= N_B) underflows (N_B %llu, q %g, n %llu)", (unsigned long long)N_B, q,
              (unsigned long long)n);
    p->lu_lo = fmin(0.0, lb - hi);
    p->lu_hi = fmin(0.0, lb - lo);
    p->r = (double)N_B * (1.0 - q) / ((double)(n - N_B) + 1.0);
    p->log1p_r = log1p(p->r);
    p->pstar = (q + p->r) / (1.0 + p->r);
    return DPT_OK;
}

/* log(e^x + e^y) */
static double lse2(double x, double y) {
    double mx = fmax(x, y);
    if (mx == -INFINITY) return -INFINITY;
    if (mx == INFINITY) return INFINITY;
    return mx + log1p(exp(fmin(x, y) - mx));
}

/* log max over u in [u_lo, u_hi] of (1 - u) e^{la} + u e^{lb}: linear in u, so at an end */
static double log_lin_max(const pair_terms *p, double la, double lb) {
    double best = -INFINITY;
    for (int e = 0; e < 2; e++) {
        double lu = e ? p->lu_hi : p->lu_lo;
        double l1u = lu < -1e-300 ? log1p(-exp(lu)) : -INFINITY; /* log(1 - u) */
        best = fmax(best, lse2(l1u + la, lu + lb));
    }
    return best;
}

/* The per-step bound at order a for the pair (n, n + 1), both directions, given
 * S = RDP_SGM(q, sigma0, a) and S2 = RDP_SGM(pstar, sigma0 / 2, a). */
static double pair_rdp(const pair_terms *p, double a, double S, double S2) {
    double la = (a - 1.0) * S, lb = (a - 1.0) * S2;
    /* larger || smaller: (1 + r u)^{-a}, largest at u_lo */
    double l1 = -a * log1p(p->r * exp(p->lu_lo)) + log_lin_max(p, la, lb + a * p->log1p_r);
    /* smaller || larger: (1 + r u)^{a-1}, largest at u_hi */
    double l2 = (a - 1.0) * log1p(p->r * exp(p->lu_hi)) + log_lin_max(p, la, lb + (1.0 - a) * p->log1p_r);
    double g = fmax(l1, l2) / (a - 1.0);
    return g > S ? g : S; /* >= S mathematically (convexity); guards rounding */
}

dpt_status dpt_dpulr_rdp_curve(double q, double sigma0, uint64_t N, uint64_t N_B, const double *orders, size_t n,
                                double *out) {
    DPT_CHECK(out && (orders || n == 0), DPT_EINVAL, "dpulr accountant: NULL argument");
    DPT_CHECK(isfinite(sigma0) && sigma0 > 0, DPT_EINVAL, "dpulr accountant: sigma0 must be > 0, got %g", sigma0);
    DPT_TRY(dpt_dpulr_check(q, N, N_B));
    pair_terms pt[2];
    DPT_TRY(pair_setup(q, N - 1, N_B, &pt[0]));
    DPT_TRY(pair_setup(q, N, N_B, &pt[1]));
    double *tmp = dpt_alloc2(3, n ? n : 1, sizeof(double), "dpulr RDP curve");
    if (!tmp) return DPT_ENOMEM;
    double *s1 = tmp, *s2a = tmp + n, *s2b = tmp + 2 * n;
    dpt_status st = dpt_acct_rdp_curve(q, sigma0, orders, n, s1);
    if (st == DPT_OK) st = dpt_acct_rdp_curve(pt[0].pstar, sigma0 / 2.0, orders, n, s2a);
    if (st == DPT_OK) st = dpt_acct_rdp_curve(pt[1].pstar, sigma0 / 2.0, orders, n, s2b);
    for (size_t j = 0; j < n && st == DPT_OK; j++) {
        if (!(s1[j] < INFINITY)) {
            out[j] = INFINITY;
            continue;
        }
        out[j] = fmax(pair_rdp(&pt[0], orders[j], s1[j], s2a[j]), pair_rdp(&pt[1], orders[j], s1[j], s2b[j]));
        if (isnan(out[j])) out[j] = INFINITY; /* no bound at this order */
    }
    dpt_free(tmp);
    return st;
}

dpt_status dpt_dpulr_rdp(double q, double sigma0, uint64_t N, uint64_t N_B, double alpha, double *gamma,
                         double *rejection, double *sgm) {
    DPT_CHECK(isfinite(alpha) && alpha > 1.0, DPT_EINVAL, "RDP order alpha must be > 1 and finite, got %g", alpha);
    double g = 0, s = 0;
    DPT_TRY(dpt_dpulr_rdp_curve(q, sigma0, N, N_B, &alpha, 1, &g));
    DPT_TRY(dpt_rdp_sgm(q, sigma0, alpha, &s));
    if (gamma) *gamma = g;
    if (rejection) *rejection = g - s;
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
    /* the excess of the bound over the SGM grows with N_B (the boundary mass u does): the
     * largest N_B with excess / sgm <= max_ratio by bisection. Any N_B it returns is
     * accounted exactly; the rule only picks a cheap one. */
    uint64_t lo = 1;
    double r = 0, sgm = 0;
    DPT_TRY(dpt_dpulr_rdp(q, sigma0, N, 1, DPT_DPULR_RATIO_ALPHA, NULL, &r, &sgm));
    if (r / sgm > max_ratio) {
        *N_B = 1;
        if (ratio) *ratio = r / sgm;
        return DPT_OK;
    }
    while (hi > lo) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        DPT_TRY(dpt_dpulr_rdp(q, sigma0, N, mid, DPT_DPULR_RATIO_ALPHA, NULL, &r, &sgm));
        if (r / sgm <= max_ratio) lo = mid;
        else hi = mid - 1;
    }
    DPT_TRY(dpt_dpulr_rdp(q, sigma0, N, lo, DPT_DPULR_RATIO_ALPHA, NULL, &r, &sgm));
    *N_B = lo;
    if (ratio) *ratio = r / sgm;
    return DPT_OK;
}
