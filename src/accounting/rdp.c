/* Renyi DP of the Poisson-sampled Gaussian mechanism, RDP -> (eps, delta) conversions and
 * noise calibration. Notation of Mironov, Talwar, Zhang 2019 ("Renyi Differential Privacy
 * of the Sampled Gaussian Mechanism", hereafter MTZ): q sampling rate, s = sigma noise
 * multiplier, alpha order, mu0 = N(0, s^2), mu1 = N(1, s^2), mu = (1-q) mu0 + q mu1,
 * A_alpha = E_{z~mu0}[(mu(z)/mu0(z))^alpha], RDP = log(A_alpha) / (alpha - 1). */
#include <math.h>
#include <string.h>

#include "dptrain/accounting.h"

/* Shared with pld.c / ledger.c (module-internal, not in the public header). */
double dpt_acct_log_erfc(double x);
double dpt_acct_rdp_to_eps_one(double alpha, double rdp, double log_delta, dpt_conversion conv);
dpt_status dpt_acct_check_common(double q, double sigma, uint64_t steps, double delta);
dpt_status dpt_acct_rdp_curve(double q, double sigma, const double *orders, size_t n, double *out);

/* ==== log-space helpers ==== */

/* Streaming log-sum-exp accumulator: value = exp(m) * s. */
typedef struct {
    double m, s;
} lse_acc;

static void lse_init(lse_acc *a) {
    a->m = -INFINITY;
    a->s = 0.0;
}

static void lse_add(lse_acc *a, double x) {
    if (x == -INFINITY) return;
    if (x <= a->m) {
        a->s += exp(x - a->m);
    } else {
        a->s = a->s * exp(a->m - x) + 1.0;
        a->m = x;
    }
}

static double lse_value(const lse_acc *a) { return a->s > 0 ? a->m + log(a->s) : -INFINITY; }

/* log(erfc(x)) without underflow: erfc(x) ~ exp(-x^2)/(x sqrt(pi)) (1 - 1/(2x^2) + ...)
 * (Abramowitz & Stegun 7.1.23) beyond x = 25, where erfc itself is still > 1e-275. */
double dpt_acct_log_erfc(double x) {
    if (x < 25.0) return log(erfc(x));
    double r = 1.0 / (2.0 * x * x);
    double series = 1.0 - r * (1.0 - 3.0 * r * (1.0 - 5.0 * r * (1.0 - 7.0 * r)));
    return -x * x - log(x) - 0.5 * log(M_PI) + log(series);
}

/* log(expm1(x)) for x > 0. */
static double log_expm1(double x) {
    if (x > 40.0) return x; /* log1p(-e^-x) < 5e-18: below double resolution of x */
    return log(expm1(x));
}

/* ==== RDP of the sampled Gaussian mechanism ==== */

static dpt_status check_q_sigma(double q, double sigma) {
    DPT_CHECK(isfinite(q) && q > 0.0 && q <= 1.0, DPT_EINVAL,
              "sampling rate q must be in (0, 1], got %g", q);
    DPT_CHECK(isfinite(sigma) && sigma > 0.0, DPT_EINVAL,
              "noise multiplier sigma must be > 0, got %g", sigma);
    return DPT_OK;
}

/* Integer alpha >= 2, q < 1 (MTZ Sec. 3.2, binomial expansion of (1 - q + q e^u)^alpha):
 *   A = sum_k C(alpha,k) (1-q)^(alpha-k) q^k exp((k^2 - k) / (2 s^2)).
 * The k = 0, 1 terms have exponent 0 and the binomial weights sum to 1, so
 *   A - 1 = sum_{k>=2} C(alpha,k) (1-q)^(alpha-k) q^k expm1((k^2 - k) / (2 s^2)),
 * a sum of positive terms: log(A) = log1p(A - 1) keeps full relative precision even
 * when A - 1 is 1e-12. logtab[j] = log(j) for j <= alpha (or NULL). */
static double log_a_int(double q, double s, int alpha, const double *logtab) {
    double lq = log(q), l1q = log1p(-q), inv2s2 = 0.5 / (s * s);
    /* t_k without the exp; two passes so only terms near the maximum call exp(). */
    double tk_stack[1100];
    double *tk = alpha <= 1100 ? tk_stack : NULL; /* cache of t_k for the second pass */
    /* C(alpha, 2) in double: alpha (alpha - 1) overflows an int from alpha = 46342 on (it
     * made the log NaN and the RDP 0) */
    double log_binom = log((double)alpha * (alpha - 1.0) / 2.0);
    double tmax = -INFINITY;
    double lb = log_binom;
    for (int k = 2; k <= alpha; k++) {
        double t = lb + (alpha - k) * l1q + k * lq + log_expm1((double)k * (k - 1) * inv2s2);
        if (tk) tk[k - 2] = t;
        if (t > tmax) tmax = t;
        /* C(alpha, k+1) = C(alpha, k) (alpha - k) / (k + 1) */
        if (k < alpha)
            lb += (logtab ? logtab[alpha - k] - logtab[k + 1] : log((double)(alpha - k)) - log(k + 1.0));
    }
    if (tmax == INFINITY) return INFINITY; /* sigma so small that a term overflows: no bound at this order */
    double sum = 0.0;
    lb = log_binom;
    for (int k = 2; k <= alpha; k++) {
        double t;
        if (tk) {
            t = tk[k - 2];
        } else {
            t = lb + (alpha - k) * l1q + k * lq + log_expm1((double)k * (k - 1) * inv2s2);
            if (k < alpha)
                lb += (logtab ? logtab[alpha - k] - logtab[k + 1] : log((double)(alpha - k)) - log(k + 1.0));
        }
        if (t > tmax - 40.0) sum += exp(t - tmax);
    }
    double log_am1 = tmax + log(sum); /* log(A - 1) */
    /* log1p(exp(x)) without overflow */
    return log_am1 > 0 ? log_am1 + log1p(exp(-log_am1)) : log1p(exp(log_am1));
}

/* Any alpha > 1, q < 1 (MTZ Sec. 3.3). Split the integral at z0, where the two mixture
 * components are equal, (1-q) = q exp((2 z0 - 1) / (2 s^2)), and expand each side in the
 * smaller component (generalized binomial series, alternating for i > alpha):
 *   A1 = sum_i C(alpha,i) (1-q)^(alpha-i) q^i exp((i^2-i)/(2s^2)) erfc((i-z0)/(sqrt2 s))/2
 *   A2 = sum_i C(alpha,i) q^(alpha-i) (1-q)^i exp(((alpha-i)^2-(alpha-i))/(2s^2))
 *                                                   erfc((z0-(alpha-i))/(sqrt2 s))/2
 * Signed terms go into two log-sum-exp accumulators. Returns 0 or -1 (no convergence). */
static int log_a_series(double q, double s, double alpha, double *log_a) {
    double lq = log(q), l1q = log1p(-q), s2 = s * s;
    double z0 = s2 * (log1p(-q) - log(q)) + 0.5;
    double sq2s = M_SQRT2 * s;
    lse_acc pos, neg;
    lse_init(&pos);
    lse_init(&neg);
    double log_c = 0.0; /* log|C(alpha, i)| */
    int sign = 1;
    const long max_terms = 2000000;
    /* sigma so small that 1 / (2 sigma^2) overflows: A is infinite (no bound at this order) */
    if (!isfinite(0.5 / s2)) {
        *log_a = INFINITY;
        return 0;
    }
    /* it can only stop past z0 and alpha: fail at once rather than after max_terms terms */
    if (!(z0 < (double)max_terms - 2.0 && alpha < (double)max_terms - 2.0)) return -1;
    for (long i = 0; i < max_terms; i++) {
        double di = (double)i, j = alpha - di;
        double t1 = log_c + (alpha - di) * l1q + di * lq + (di * di - di) / (2.0 * s2) +
                    dpt_acct_log_erfc((di - z0) / sq2s) - M_LN2;
        double t2 = log_c + j * lq + di * l1q + (j * j - j) / (2.0 * s2) +
                    dpt_acct_log_erfc((z0 - j) / sq2s) - M_LN2;
        if (isnan(t1) || isnan(t2)) return -1; /* overflowed terms: it cannot converge */
        lse_add(sign > 0 ? &pos : &neg, t1);
        lse_add(sign > 0 ? &pos : &neg, t2);
        /* Stop once past alpha and z0 with both terms negligible (the tail alternates with
         * decreasing magnitude, so its sum is below the last term). */
        double cur = lse_value(&pos);
        if (di > alpha + 1 && di > z0 && t1 < cur - 38.0 && t2 < cur - 38.0) {
            double lp = lse_value(&pos), ln = lse_value(&neg);
            if (!(ln < lp)) return -1;
            *log_a = lp + log1p(-exp(ln - lp));
            return 0;
        }
        double f = alpha - di;
        if (f == 0.0) { /* integer alpha reached: all further coefficients vanish */
            double lp = lse_value(&pos), ln = lse_value(&neg);
            if (!(ln < lp)) return -1;
            *log_a = lp + log1p(-exp(ln - lp));
            return 0;
        }
        log_c += log(fabs(f)) - log(di + 1.0);
        if (f < 0) sign = -sign;
    }
    return -1;
}

static dpt_status rdp_sgm_impl(double q, double sigma, double alpha, int force_series,
                               const double *logtab, double *rdp) {
    DPT_TRY(check_q_sigma(q, sigma));
    DPT_CHECK(isfinite(alpha) && alpha > 1.0, DPT_EINVAL, "RDP order alpha must be > 1 and finite, got %g", alpha);
    DPT_CHECK(rdp != NULL, DPT_EINVAL, "rdp output is NULL");
    if (q == 1.0) { /* Gaussian mechanism: D_alpha(N(1,s^2) || N(0,s^2)) = alpha / (2 s^2) */
        *rdp = alpha / (2.0 * sigma * sigma);
        return DPT_OK;
    }
    double log_a;
    if (!force_series && alpha == floor(alpha) && alpha <= 1e6) {
        log_a = log_a_int(q, sigma, (int)alpha, logtab);
    } else if (log_a_series(q, sigma, alpha, &log_a) != 0) {
        return dpt_set_error(DPT_ERANGE, "RDP series did not converge (q=%g, sigma=%g, alpha=%g)",
                             q, sigma, alpha);
    }
    if (log_a < 0) log_a = 0; /* A >= 1 mathematically; guards rounding */
    *rdp = log_a / (alpha - 1.0);
    return DPT_OK;
}

dpt_status dpt_rdp_sgm(double q, double sigma, double alpha, double *rdp) {
    return rdp_sgm_impl(q, sigma, alpha, 0, NULL, rdp);
}

dpt_status dpt_rdp_sgm_series(double q, double sigma, double alpha, double *rdp) {
    return rdp_sgm_impl(q, sigma, alpha, 1, NULL, rdp);
}

/* ==== Order grid ==== */

#define N_DEFAULT_ORDERS (99 + 54 + 8 + 8 + 8 + 8)
static const double DEFAULT_ORDERS[N_DEFAULT_ORDERS] = {
    /* 1.1 .. 10.9 step 0.1 */
    1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7, 2.8,
    2.9, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5, 3.6, 3.7, 3.8, 3.9, 4.0, 4.1, 4.2, 4.3, 4.4, 4.5, 4.6,
    4.7, 4.8, 4.9, 5.0, 5.1, 5.2, 5.3, 5.4, 5.5, 5.6, 5.7, 5.8, 5.9, 6.0, 6.1, 6.2, 6.3, 6.4,
    6.5, 6.6, 6.7, 6.8, 6.9, 7.0, 7.1, 7.2, 7.3, 7.4, 7.5, 7.6, 7.7, 7.8, 7.9, 8.0, 8.1, 8.2,
    8.3, 8.4, 8.5, 8.6, 8.7, 8.8, 8.9, 9.0, 9.1, 9.2, 9.3, 9.4, 9.5, 9.6, 9.7, 9.8, 9.9, 10.0,
    10.1, 10.2, 10.3, 10.4, 10.5, 10.6, 10.7, 10.8, 10.9,
    /* 11 .. 64 */
    11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
    33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54,
    55, 56, 57, 58, 59, 60, 61, 62, 63, 64,
    /* sparser up to 1024 */
    72, 80, 88, 96, 104, 112, 120, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320,
    352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 832, 896, 960, 1024};

const double *dpt_rdp_default_orders(size_t *n) {
    if (n) *n = N_DEFAULT_ORDERS;
    return DEFAULT_ORDERS;
}

/* ==== RDP -> (epsilon, delta) ==== */

double dpt_acct_rdp_to_eps_one(double alpha, double rdp, double log_delta, dpt_conversion conv) {
    if (!(rdp < INFINITY)) return INFINITY;
    if (conv == DPT_CONV_CLASSIC) /* Mironov 2017, Prop. 3 */
        return rdp - log_delta / (alpha - 1.0);
    /* Balle, Barthe, Gaboardi, Hsu, Sato 2020, Thm. 21 */
    return rdp + log1p(-1.0 / alpha) - (log_delta + log(alpha)) / (alpha - 1.0);
}

dpt_status dpt_rdp_to_epsilon(const double *orders, const double *rdp, size_t n, double delta,
                              dpt_conversion conv, double *eps, double *best_order,
                              int *at_edge) {
    DPT_CHECK(orders && rdp && eps, DPT_EINVAL, "rdp_to_epsilon: NULL argument");
    DPT_CHECK(n >= 1, DPT_EINVAL, "rdp_to_epsilon: empty order grid");
    DPT_CHECK(isfinite(delta) && delta > 0.0 && delta < 1.0, DPT_EINVAL,
              "delta must be in (0, 1), got %g", delta);
    DPT_CHECK(conv == DPT_CONV_BALLE || conv == DPT_CONV_CLASSIC, DPT_EINVAL,
              "unknown RDP conversion %d", (int)conv);
    double ld = log(delta), best = INFINITY;
    size_t bi = 0;
    for (size_t i = 0; i < n; i++) {
        DPT_CHECK(isfinite(orders[i]) && orders[i] > 1.0, DPT_EINVAL,
                  "RDP order %zu must be > 1 and finite, got %g", i, orders[i]);
        DPT_CHECK(!isnan(rdp[i]) && rdp[i] >= 0.0, DPT_EINVAL,
                  "RDP value at order %g must be >= 0, got %g", orders[i], rdp[i]);
        double e = dpt_acct_rdp_to_eps_one(orders[i], rdp[i], ld, conv);
        if (e < best) {
            best = e;
            bi = i;
        }
    }
    *eps = best < 0 ? 0.0 : best;
    if (best_order) *best_order = best < INFINITY ? orders[bi] : 0.0;
    if (at_edge) *at_edge = best < INFINITY && n > 1 && (bi == 0 || bi == n - 1);
    return DPT_OK;
}

dpt_status dpt_acct_check_common(double q, double sigma, uint64_t steps, double delta) {
    DPT_TRY(check_q_sigma(q, sigma));
    DPT_CHECK(steps >= 1, DPT_EINVAL, "steps must be >= 1, got %llu", (unsigned long long)steps);
    DPT_CHECK(isfinite(delta) && delta > 0.0 && delta < 1.0, DPT_EINVAL,
              "delta must be in (0, 1), got %g", delta);
    return DPT_OK;
}

/* One order of a grid. A fractional order whose series does not converge within its term
 * budget (a large sigma against q puts the split point z0 ~ sigma^2 log(1/q) beyond it)
 * gets +inf: that order gives no bound and the epsilon is the minimum over the others,
 * still an upper bound for exactly this mechanism (integer orders have a closed form).
 * *done counts the orders evaluated; the caller refuses a grid where none was. */
static dpt_status rdp_order(double q, double sigma, double alpha, const double *tab, double *r, size_t *done) {
    dpt_status st = rdp_sgm_impl(q, sigma, alpha, 0, tab, r);
    if (st == DPT_ERANGE && alpha != floor(alpha)) {
        dpt_clear_error();
        *r = INFINITY;
        return DPT_OK;
    }
    if (st == DPT_OK) (*done)++;
    return st;
}

static dpt_status none_evaluated(double q, double sigma) {
    return dpt_set_error(DPT_ERANGE, "RDP accountant: the series did not converge at any order of the grid (q=%g, "
                                     "sigma=%g); include integer orders", q, sigma);
}

/* Per-step RDP of SGM at every order, with one shared table of log(j). */
dpt_status dpt_acct_rdp_curve(double q, double sigma, const double *orders, size_t n, double *out) {
    double maxint = 0;
    for (size_t i = 0; i < n; i++)
        if (orders[i] == floor(orders[i]) && orders[i] > maxint && orders[i] <= 1e6) maxint = orders[i];
    double stack_tab[1100];
    double *tab = NULL;
    if (q < 1.0 && maxint >= 2) {
        size_t m = (size_t)maxint + 2;
        tab = m <= 1100 ? stack_tab : dpt_alloc(m, sizeof(double), "RDP log table");
        if (!tab) return DPT_ENOMEM;
        tab[0] = -INFINITY;
        for (size_t j = 1; j < m; j++) tab[j] = log((double)j);
    }
    dpt_status st = DPT_OK;
    size_t done = 0;
    for (size_t i = 0; i < n && st == DPT_OK; i++)
        st = rdp_order(q, sigma, orders[i], tab, &out[i], &done);
    if (tab && tab != stack_tab) dpt_free(tab);
    return st == DPT_OK && n && !done ? none_evaluated(q, sigma) : st;
}

/* Total RDP (steps x per-step) at every order, skipping orders that provably cannot give
 * the smallest epsilon (skipped orders get +inf). K(alpha) = (alpha - 1) RDP(alpha) =
 * log A_alpha is a cumulant generating function: convex in alpha, K(1) = 0, increasing.
 * Outside an interval [a1, a2] a convex function lies above the secant through its ends,
 * so K at a non-evaluated order is bounded below by the secants of the evaluated
 * neighbours on either side, and by K at the evaluated order just below it.
 * First every 8th order is evaluated, then the others only when the epsilon of that lower
 * bound does not already exceed the best epsilon. The minimum and its order are exactly
 * those of the full computation. */
#define PRUNE_STRIDE 8
static dpt_status total_rdp_pruned(double q, double sigma, uint64_t steps, double delta,
                                   dpt_conversion conv, const double *orders, size_t n,
                                   double *out) {
    int sorted = 1;
    for (size_t i = 1; i < n; i++)
        if (!(orders[i] > orders[i - 1])) sorted = 0;
    double T = (double)steps;
    if (!sorted || n <= 2 * PRUNE_STRIDE) {
        DPT_TRY(dpt_acct_rdp_curve(q, sigma, orders, n, out));
        for (size_t i = 0; i < n; i++) out[i] *= T;
        return DPT_OK;
    }
    double maxint = 0;
    for (size_t i = 0; i < n; i++)
        if (orders[i] == floor(orders[i]) && orders[i] > maxint && orders[i] <= 1e6) maxint = orders[i];
    double stack_tab[1100];
    double *tab = NULL;
    if (q < 1.0 && maxint >= 2) {
        size_t m = (size_t)maxint + 2;
        tab = m <= 1100 ? stack_tab : dpt_alloc(m, sizeof(double), "RDP log table");
        if (!tab) return DPT_ENOMEM;
        tab[0] = -INFINITY;
        for (size_t j = 1; j < m; j++) tab[j] = log((double)j);
    }
    double ld = log(delta), best = INFINITY;
    dpt_status st = DPT_OK;
    size_t done = 0;
    /* pass 1: anchors */
    for (size_t i = 0; i < n && st == DPT_OK; i++) {
        if (i % PRUNE_STRIDE != 0 && i != n - 1) continue;
        double r;
        st = rdp_order(q, sigma, orders[i], tab, &r, &done);
        if (st != DPT_OK) break;
        out[i] = T * r;
        double e = dpt_acct_rdp_to_eps_one(orders[i], out[i], ld, conv);
        if (e < best) best = e;
    }
    /* pass 2: the orders between anchors */
    for (size_t i = 0; i < n && st == DPT_OK; i++) {
        if (i % PRUNE_STRIDE == 0 || i == n - 1) continue;
        size_t j = i - i % PRUNE_STRIDE;               /* anchor below */
        size_t k = j + PRUNE_STRIDE < n ? j + PRUNE_STRIDE : n - 1; /* anchor above */
        double a = orders[i];
#define KOF(idx) (out[idx] * (orders[idx] - 1.0))
        double klb = KOF(j); /* K increasing */
        if (j >= PRUNE_STRIDE) { /* secant of the two anchors below, extended right */
            size_t j0 = j - PRUNE_STRIDE;
            double s = klb + (KOF(j) - KOF(j0)) * (a - orders[j]) / (orders[j] - orders[j0]);
            if (s > klb) klb = s;
        }
        if (k < n - 1) { /* the two anchors above, extended left */
            size_t k2 = k + PRUNE_STRIDE < n ? k + PRUNE_STRIDE : n - 1;
            double s = KOF(k) - (KOF(k2) - KOF(k)) * (orders[k] - a) / (orders[k2] - orders[k]);
            if (s > klb) klb = s;
        }
#undef KOF
        if (isfinite(best) && isfinite(klb)) {
            double elb = dpt_acct_rdp_to_eps_one(a, klb / (a - 1.0), ld, conv);
            if (elb > best + 1e-9 * (1.0 + fabs(best))) {
                out[i] = INFINITY;
                continue;
            }
        }
        double r;
        st = rdp_order(q, sigma, a, tab, &r, &done);
        if (st != DPT_OK) break;
        out[i] = T * r;
        double e = dpt_acct_rdp_to_eps_one(a, out[i], ld, conv);
        if (e < best) best = e;
    }
    if (tab && tab != stack_tab) dpt_free(tab);
    return st == DPT_OK && !done ? none_evaluated(q, sigma) : st;
}

dpt_status dpt_rdp_sgm_epsilon_ex(double q, double sigma, uint64_t steps, double delta,
                                  dpt_conversion conv, const double *orders, size_t n_orders,
                                  double *eps, double *best_order, int *at_edge) {
    DPT_TRY(dpt_acct_check_common(q, sigma, steps, delta));
    DPT_CHECK(eps != NULL, DPT_EINVAL, "eps output is NULL");
    if (!orders) orders = dpt_rdp_default_orders(&n_orders);
    DPT_CHECK(n_orders >= 1, DPT_EINVAL, "empty RDP order grid");
    double stack_rdp[256];
    double *rdp = n_orders <= 256 ? stack_rdp : dpt_alloc(n_orders, sizeof(double), "RDP curve");
    if (!rdp) return DPT_ENOMEM;
    dpt_status st = DPT_OK;
    for (size_t i = 0; i < n_orders && st == DPT_OK; i++)
        if (!(isfinite(orders[i]) && orders[i] > 1.0))
            st = dpt_set_error(DPT_EINVAL, "RDP order %zu must be > 1 and finite, got %g", i, orders[i]);
    if (st == DPT_OK) st = total_rdp_pruned(q, sigma, steps, delta, conv, orders, n_orders, rdp);
    if (st == DPT_OK)
        st = dpt_rdp_to_epsilon(orders, rdp, n_orders, delta, conv, eps, best_order, at_edge);
    if (rdp != stack_rdp) dpt_free(rdp);
    return st;
}

dpt_status dpt_rdp_sgm_epsilon(double q, double sigma, uint64_t steps, double delta,
                               dpt_conversion conv, const double *orders, size_t n_orders,
                               double *eps, double *best_order) {
    return dpt_rdp_sgm_epsilon_ex(q, sigma, steps, delta, conv, orders, n_orders, eps,
                                  best_order, NULL);
}

/* ==== Noise calibration ==== */

/* The accountant that reports: calibration evaluates exactly this (same orders, same
 * conversion), so the calibrated sigma never reports an epsilon above the target. */
typedef struct {
    dpt_accountant acct;
    dpt_conversion conv;
    const double *orders; /* NULL: the default grid */
    size_t n_orders;
} acct_conf;

static dpt_status eps_at_conf(double q, double sigma, uint64_t steps, double delta, const acct_conf *a, double *eps) {
    if (a->acct == DPT_ACCT_PLD) return dpt_pld_sgm_epsilon(q, sigma, steps, delta, eps);
    DPT_TRY(dpt_rdp_sgm_epsilon(q, sigma, steps, delta, a->conv, a->orders, a->n_orders, eps, NULL));
    if (a->acct == DPT_ACCT_DEFAULT) { /* the smaller of two upper bounds (accounting.h) */
        double p;
        DPT_TRY(dpt_pld_sgm_epsilon(q, sigma, steps, delta, &p));
        if (!(*eps < p)) *eps = p;
    }
    return DPT_OK;
}

dpt_status dpt_calibrate_sigma(double q, uint64_t steps, double delta, double target_eps,
                               dpt_accountant acct, dpt_conversion conv, double tol,
                               double *sigma) {
    return dpt_calibrate_sigma_ex(q, steps, delta, target_eps, acct, conv, NULL, 0, tol, sigma);
}

dpt_status dpt_calibrate_sigma_ex(double q, uint64_t steps, double delta, double target_eps,
                                  dpt_accountant acct, dpt_conversion conv, const double *orders,
                                  size_t n_orders, double tol, double *sigma) {
    const acct_conf A = {acct, conv, orders, n_orders};
    DPT_CHECK(!orders || n_orders > 0, DPT_EINVAL, "n_orders must be > 0 when orders is given");
    DPT_CHECK(!orders || acct == DPT_ACCT_RDP, DPT_EINVAL, "orders: only the RDP accountant uses an order grid");
    DPT_CHECK(acct != DPT_ACCT_DEFAULT || conv == DPT_CONV_BALLE, DPT_EINVAL,
              "the default accountant uses Balle et al.'s conversion for its RDP part");
    DPT_TRY(dpt_acct_check_common(q, 1.0, steps, delta));
    DPT_CHECK(isfinite(target_eps) && target_eps > 0.0, DPT_EINVAL,
              "target epsilon must be > 0, got %g", target_eps);
    DPT_CHECK(isfinite(tol) && tol > 0.0, DPT_EINVAL, "tolerance must be > 0, got %g", tol);
    DPT_CHECK(acct == DPT_ACCT_RDP || acct == DPT_ACCT_PLD || acct == DPT_ACCT_DEFAULT, DPT_EINVAL,
              "unknown accountant %d", (int)acct);
    DPT_CHECK(sigma != NULL, DPT_EINVAL, "sigma output is NULL");
    const double s_min = 0.05, s_max = 1e4;
    /* Invariant: eps(hi) <= target < eps(lo); epsilon decreases with sigma. */
    double lo = 0, hi = 1.0, e = 0, shrink = 0.5;
    if (acct != DPT_ACCT_RDP) {
        /* The PLD bound is tighter than RDP, so the (cheap) RDP sigma is a good upper
         * start and the bracket is narrow; it is still verified under the PLD. */
        double s_rdp;
        if (dpt_calibrate_sigma(q, steps, delta, target_eps, DPT_ACCT_RDP, DPT_CONV_BALLE, tol, &s_rdp) == DPT_OK) {
            hi = s_rdp;
            shrink = 0.85;
        }
    }
    DPT_TRY(eps_at_conf(q, hi, steps, delta, &A, &e));
    if (e <= target_eps) {
        lo = hi;
        for (;;) {
            lo *= shrink;
            if (lo < s_min) {
                lo = s_min;
                DPT_TRY(eps_at_conf(q, lo, steps, delta, &A, &e));
                if (e <= target_eps)
                    return dpt_set_error(DPT_ERANGE, "target epsilon %g is met even at sigma = %g "
                                         "(the smallest sigma searched)", target_eps, s_min);
                break;
            }
            DPT_TRY(eps_at_conf(q, lo, steps, delta, &A, &e));
            if (e > target_eps) break;
            hi = lo;
        }
    } else {
        lo = hi;
        for (;;) {
            hi *= 2.0;
            if (hi > s_max)
                return dpt_set_error(DPT_ERANGE, "target epsilon %g needs sigma > %g", target_eps, s_max);
            DPT_TRY(eps_at_conf(q, hi, steps, delta, &A, &e));
            if (e <= target_eps) break;
            lo = hi;
        }
    }
    while (hi - lo > tol) {
        double mid = 0.5 * (lo + hi);
        if (!(mid > lo && mid < hi)) break; /* tol below the spacing of doubles here: as close as it gets */
        DPT_TRY(eps_at_conf(q, mid, steps, delta, &A, &e));
        if (e <= target_eps)
            hi = mid;
        else
            lo = mid;
    }
    *sigma = hi;
    return DPT_OK;
}
