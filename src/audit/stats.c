/* Statistics of membership-inference attacks: ROC, AUC, TPR at low FPR, bootstrap
 * intervals, the regularized incomplete beta function and its inverse, Clopper-Pearson
 * intervals and the epsilon lower bound they give. */
#include <dptrain/audit.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==== Incomplete beta ==== */

/* Continued fraction for I_x(a, b) / (x^a (1-x)^b / (a B(a,b))), valid for
 * x < (a+1)/(a+b+2):  1/(1 + d_1/(1 + d_2/(1 + ...))) with
 *   d_{2k+1} = -(a+k)(a+b+k) x / ((a+2k)(a+2k+1)),  d_{2k} = k(b-k) x / ((a+2k-1)(a+2k)),
 * evaluated front to back by the modified Lentz method. */
static double betacf(double a, double b, double x) {
    const double tiny = 1e-300;
    double f = tiny, C = tiny, Dv = 0.0;
    for (int j = 1; j <= 4000; j++) {
        double num;
        int m = j - 1; /* a_j = d_{j-1}; a_1 = 1 */
        if (j == 1) num = 1.0;
        else if (m % 2) {
            int k = (m - 1) / 2;
            num = -((a + k) * (a + b + k) * x) / ((a + 2.0 * k) * (a + 2.0 * k + 1.0));
        } else {
            int k = m / 2;
            num = (k * (b - k) * x) / ((a + 2.0 * k - 1.0) * (a + 2.0 * k));
        }
        Dv = 1.0 + num * Dv;
        if (fabs(Dv) < tiny) Dv = tiny;
        Dv = 1.0 / Dv;
        C = 1.0 + num / C;
        if (fabs(C) < tiny) C = tiny;
        double cd = C * Dv;
        f *= cd;
        if (fabs(cd - 1.0) < 1e-16) break;
    }
    return f;
}

double dpt_betainc(double a, double b, double x) {
    if (!(a > 0) || !(b > 0) || !(x >= 0 && x <= 1) || !isfinite(a) || !isfinite(b)) return NAN;
    if (x == 0) return 0.0;
    if (x == 1) return 1.0;
    /* log of x^a (1-x)^b / (a B(a, b)) */
    double lbeta = lgamma(a) + lgamma(b) - lgamma(a + b);
    if (x < (a + 1.0) / (a + b + 2.0)) {
        double front = exp(a * log(x) + b * log1p(-x) - lbeta) / a;
        return front * betacf(a, b, x);
    }
    double front = exp(b * log1p(-x) + a * log(x) - lbeta) / b;
    return 1.0 - front * betacf(b, a, 1.0 - x);
}

double dpt_betainc_inv(double a, double b, double p) {
    if (!(a > 0) || !(b > 0) || !(p >= 0 && p <= 1)) return NAN;
    if (p == 0) return 0.0;
    if (p == 1) return 1.0;
    double lo = 0.0, hi = 1.0;
    /* to full double resolution (also for quantiles far below 1e-16 when a is small) */
    for (int it = 0; it < 1200; it++) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi) break;
        if (dpt_betainc(a, b, mid) < p) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

dpt_status dpt_clopper_pearson(uint64_t k, uint64_t n, double alpha, double *lo, double *hi) {
    DPT_CHECK(n > 0 && k <= n, DPT_EINVAL, "clopper-pearson: need 0 <= k <= n, n > 0 (k %llu, n %llu)",
              (unsigned long long)k, (unsigned long long)n);
    DPT_CHECK(alpha > 0 && alpha < 1, DPT_EINVAL, "clopper-pearson: alpha must be in (0, 1), got %g", alpha);
    double K = (double)k, N = (double)n;
    *lo = k == 0 ? 0.0 : dpt_betainc_inv(K, N - K + 1.0, alpha / 2.0);
    *hi = k == n ? 1.0 : dpt_betainc_inv(K + 1.0, N - K, 1.0 - alpha / 2.0);
    return DPT_OK;
}

dpt_status dpt_audit_eps_lower_bound(uint64_t tp, uint64_t fn, uint64_t fp, uint64_t tn, double delta,
                                     double alpha, double *eps_lb) {
    DPT_CHECK(tp + fn > 0 && fp + tn > 0, DPT_EINVAL, "epsilon lower bound: needs member and non-member trials");
    DPT_CHECK(delta >= 0 && delta < 1, DPT_EINVAL, "epsilon lower bound: delta must be in [0, 1), got %g", delta);
    double tpr_lo, tpr_hi, fpr_lo, fpr_hi;
    DPT_TRY(dpt_clopper_pearson(tp, tp + fn, alpha, &tpr_lo, &tpr_hi));
    DPT_TRY(dpt_clopper_pearson(fp, fp + tn, alpha, &fpr_lo, &fpr_hi));
    double fnr_hi = 1.0 - tpr_lo, tnr_lo = 1.0 - fpr_hi;
    double e = 0.0;
    if (tpr_lo - delta > 0 && fpr_hi > 0) e = fmax(e, log((tpr_lo - delta) / fpr_hi));
    if (tnr_lo - delta > 0 && fnr_hi > 0) e = fmax(e, log((tnr_lo - delta) / fnr_hi));
    *eps_lb = e;
    return DPT_OK;
}

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Confusion counts of the test "score >= t". */
/* DPT_EINVAL naming the first NaN score. A NaN compares unequal to itself, so the
 * tie-grouping walks below would never advance past it (AUC, TPR) or would write one ROC
 * point per step beyond the n_in + n_out + 1 the caller sized (ROC): refuse it first.
 * Infinite scores are ordered and tie with themselves, so they are fine. */
static dpt_status check_scores(const char *fn, const double *in, size_t n_in, const double *out, size_t n_out) {
    for (size_t i = 0; i < n_in; i++) DPT_CHECK(!isnan(in[i]), DPT_EINVAL, "%s: member score in[%zu] is NaN", fn, i);
    for (size_t i = 0; i < n_out; i++)
        DPT_CHECK(!isnan(out[i]), DPT_EINVAL, "%s: non-member score out[%zu] is NaN", fn, i);
    return DPT_OK;
}

static void counts_at(const double *in, size_t n_in, const double *out, size_t n_out, double t, uint64_t *tp,
                      uint64_t *fp) {
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i < n_in; i++) a += in[i] >= t;
    for (size_t i = 0; i < n_out; i++) b += out[i] >= t;
    *tp = a, *fp = b;
}

dpt_status dpt_audit_eps_from_scores(const double *in, size_t n_in, const double *out, size_t n_out,
                                     double delta, double alpha, double *eps_lb, double *threshold) {
    DPT_CHECK(n_in >= 2 && n_out >= 2, DPT_EINVAL, "epsilon lower bound: needs at least 2 member and 2 non-member "
              "scores (got %zu and %zu)", n_in, n_out);
    DPT_TRY(check_scores("epsilon lower bound", in, n_in, out, n_out));
    size_t a_in = (n_in + 1) / 2, a_out = (n_out + 1) / 2, b_in = n_in / 2, b_out = n_out / 2;
    double *si = dpt_alloc(a_in, sizeof *si, "epsilon lower bound"), *so = dpt_alloc(a_out, sizeof *so, "epsilon lower bound");
    double *ti = dpt_alloc(b_in, sizeof *ti, "epsilon lower bound"), *to = dpt_alloc(b_out, sizeof *to, "epsilon lower bound");
    if (!si || !so || !ti || !to) {
        dpt_free(si), dpt_free(so), dpt_free(ti), dpt_free(to);
        return dpt_set_error(DPT_ENOMEM, "epsilon lower bound: out of memory");
    }
    for (size_t i = 0; i < n_in; i++) (i % 2 ? ti : si)[i / 2] = in[i];
    for (size_t i = 0; i < n_out; i++) (i % 2 ? to : so)[i / 2] = out[i];
    /* candidate thresholds: every selection-half score; pick the best point estimate */
    double best = -1, best_t = INFINITY;
    dpt_status st = DPT_OK;
    for (size_t c = 0; c < a_in + a_out && st == DPT_OK; c++) {
        double t = c < a_in ? si[c] : so[c - a_in];
        uint64_t tp, fp;
        counts_at(si, a_in, so, a_out, t, &tp, &fp);
        double e = 0;
        st = dpt_audit_eps_lower_bound(tp, a_in - tp, fp, a_out - fp, delta, alpha, &e);
        if (e > best) best = e, best_t = t;
    }
    if (st == DPT_OK) {
        uint64_t tp, fp;
        counts_at(ti, b_in, to, b_out, best_t, &tp, &fp);
        st = dpt_audit_eps_lower_bound(tp, b_in - tp, fp, b_out - fp, delta, alpha, eps_lb);
        if (threshold) *threshold = best_t;
    }
    dpt_free(si), dpt_free(so), dpt_free(ti), dpt_free(to);
    return st;
}

/* ==== ROC ==== */

typedef struct {
    double s;
    int member;
} scored;

static int cmp_scored_desc(const void *a, const void *b) {
    double x = ((const scored *)a)->s, y = ((const scored *)b)->s;
    return (x < y) - (x > y);
}

/* Sorted (descending) union; caller frees. */
static scored *merge_sorted(const double *in, size_t n_in, const double *out, size_t n_out) {
    if (n_in > SIZE_MAX - n_out) return NULL;
    scored *v = dpt_alloc(n_in + n_out, sizeof *v, "audit scores");
    if (!v) return NULL;
    for (size_t i = 0; i < n_in; i++) v[i] = (scored){in[i], 1};
    for (size_t i = 0; i < n_out; i++) v[n_in + i] = (scored){out[i], 0};
    qsort(v, n_in + n_out, sizeof *v, cmp_scored_desc);
    return v;
}

dpt_status dpt_audit_roc(const double *in, size_t n_in, const double *out, size_t n_out, double *fpr, double *tpr,
                         size_t *n) {
    DPT_CHECK(n_in > 0 && n_out > 0, DPT_EINVAL, "roc: needs member and non-member scores");
    DPT_TRY(check_scores("roc", in, n_in, out, n_out));
    scored *v = merge_sorted(in, n_in, out, n_out);
    DPT_CHECK(v, DPT_ENOMEM, "roc: out of memory");
    size_t N = n_in + n_out, k = 0, tp = 0, fp = 0;
    fpr[k] = 0, tpr[k] = 0, k++;
    for (size_t i = 0; i < N;) {
        size_t j = i;
        while (j < N && v[j].s == v[i].s) {
            tp += v[j].member;
            fp += !v[j].member;
            j++;
        }
        fpr[k] = (double)fp / (double)n_out, tpr[k] = (double)tp / (double)n_in, k++;
        i = j;
    }
    dpt_free(v);
    *n = k;
    return DPT_OK;
}

double dpt_audit_auc(const double *in, size_t n_in, const double *out, size_t n_out) {
    if (!n_in || !n_out) {
        dpt_set_error(DPT_EINVAL, "auc: needs member and non-member scores");
        return NAN;
    }
    if (check_scores("auc", in, n_in, out, n_out) != DPT_OK) return NAN;
    scored *v = merge_sorted(in, n_in, out, n_out);
    if (!v) return NAN;
    /* walk from the highest score: each non-member counts the members above it (+1/2 ties) */
    size_t N = n_in + n_out, above = 0;
    double acc = 0;
    for (size_t i = 0; i < N;) {
        size_t j = i, m = 0, o = 0;
        while (j < N && v[j].s == v[i].s) {
            m += v[j].member;
            o += !v[j].member;
            j++;
        }
        acc += (double)o * ((double)above + 0.5 * (double)m);
        above += m;
        i = j;
    }
    dpt_free(v);
    return acc / ((double)n_in * (double)n_out);
}

double dpt_audit_tpr_at_fpr(const double *in, size_t n_in, const double *out, size_t n_out, double max_fpr) {
    if (!n_in || !n_out) {
        dpt_set_error(DPT_EINVAL, "tpr_at_fpr: needs member and non-member scores");
        return NAN;
    }
    if (check_scores("tpr_at_fpr", in, n_in, out, n_out) != DPT_OK) return NAN;
    scored *v = merge_sorted(in, n_in, out, n_out);
    if (!v) return NAN;
    size_t N = n_in + n_out, tp = 0, fp = 0;
    double best = 0;
    for (size_t i = 0; i < N;) {
        size_t j = i;
        while (j < N && v[j].s == v[i].s) {
            tp += v[j].member;
            fp += !v[j].member;
            j++;
        }
        if ((double)fp / (double)n_out <= max_fpr + 1e-15) best = fmax(best, (double)tp / (double)n_in);
        i = j;
    }
    dpt_free(v);
    return best;
}

dpt_status dpt_audit_summarize(const double *in, size_t n_in, const double *out, size_t n_out, size_t n_boot,
                               double alpha, uint64_t seed, dpt_audit_summary *s) {
    DPT_CHECK(n_in > 0 && n_out > 0, DPT_EINVAL, "audit: needs member and non-member scores");
    DPT_CHECK(alpha > 0 && alpha < 1, DPT_EINVAL, "audit: alpha must be in (0, 1)");
    DPT_TRY(check_scores("audit", in, n_in, out, n_out));
    memset(s, 0, sizeof *s);
    s->fpr_levels[0] = 1e-3, s->fpr_levels[1] = 1e-2;
    s->auc = dpt_audit_auc(in, n_in, out, n_out);
    for (int l = 0; l < 2; l++) s->tpr[l] = dpt_audit_tpr_at_fpr(in, n_in, out, n_out, s->fpr_levels[l]);
    if (n_boot < 2) {
        s->auc_lo = s->auc_hi = s->auc;
        for (int l = 0; l < 2; l++) s->tpr_lo[l] = s->tpr_hi[l] = s->tpr[l];
        return DPT_OK;
    }
    /* n_boot comes from the caller: 3 * n_boot doubles is a checked product */
    double *bi = dpt_alloc(n_in, sizeof *bi, "audit bootstrap"), *bo = dpt_alloc(n_out, sizeof *bo, "audit bootstrap");
    double *res = dpt_alloc2(3, n_boot, sizeof *res, "audit bootstrap statistics (3 x n_boot)");
    dpt_rng r;
    int rl = 0;
    dpt_status st = DPT_OK;
    if (!bi || !bo || !res) st = DPT_ENOMEM;
    if (st == DPT_OK && (st = dpt_rng_init(&r, seed, DPT_STREAM_AUX)) == DPT_OK) rl = 1;
    for (size_t b = 0; st == DPT_OK && b < n_boot; b++) {
        for (size_t i = 0; i < n_in; i++) bi[i] = in[dpt_rng_below(&r, n_in)];
        for (size_t i = 0; i < n_out; i++) bo[i] = out[dpt_rng_below(&r, n_out)];
        res[b] = dpt_audit_auc(bi, n_in, bo, n_out);
        for (int l = 0; l < 2; l++) res[(1 + l) * n_boot + b] = dpt_audit_tpr_at_fpr(bi, n_in, bo, n_out, s->fpr_levels[l]);
    }
    if (st == DPT_OK) {
        double *lo[3] = {&s->auc_lo, &s->tpr_lo[0], &s->tpr_lo[1]}, *hi[3] = {&s->auc_hi, &s->tpr_hi[0], &s->tpr_hi[1]};
        for (int q = 0; q < 3; q++) {
            double *x = res + (size_t)q * n_boot;
            qsort(x, n_boot, sizeof *x, cmp_desc); /* descending */
            size_t ih = (size_t)floor(alpha / 2 * (double)(n_boot - 1));
            size_t il = (size_t)ceil((1 - alpha / 2) * (double)(n_boot - 1));
            *hi[q] = x[ih];
            *lo[q] = x[il];
        }
    }
    if (rl) dpt_rng_free(&r);
    dpt_free(bi), dpt_free(bo), dpt_free(res);
    return st;
}

/* ==== One-run audit ==== */

static double binom_pmf(uint64_t n, uint64_t k, double q) {
    if (q <= 0) return k == 0 ? 1.0 : 0.0;
    if (q >= 1) return k == n ? 1.0 : 0.0;
    double N = (double)n, K = (double)k;
    return exp(lgamma(N + 1) - lgamma(K + 1) - lgamma(N - K + 1) + K * log(q) + (N - K) * log1p(-q));
}

double dpt_audit_one_run_pvalue(uint64_t m, uint64_t r, uint64_t v, double eps, double delta) {
    if (v > r || r > m || !(eps >= 0) || !(delta >= 0 && delta <= 1)) return NAN;
    if (v == 0) return 1.0;
    double q = 1.0 / (1.0 + exp(-eps));
    double tail = dpt_betainc((double)v, (double)(r - v) + 1.0, q); /* P[Bin(r, q) >= v] */
    double best = 0, cum = 0;
    if (delta > 0)
        for (uint64_t i = 1; i <= v; i++) {
            cum += binom_pmf(r, v - i, q); /* P[v - i <= Bin < v] */
            double a = cum / (double)i;
            if (a > best) best = a;
        }
    double p = tail + 2.0 * (double)m * delta * best;
    return p < 1.0 ? p : 1.0;
}

dpt_status dpt_audit_one_run_eps(uint64_t m, uint64_t r, uint64_t v, double delta, double alpha, double *eps_lb) {
    DPT_CHECK(v <= r && r <= m && m > 0, DPT_EINVAL, "one-run audit: need v <= r <= m, m > 0 (m %llu, r %llu, v %llu)",
              (unsigned long long)m, (unsigned long long)r, (unsigned long long)v);
    DPT_CHECK(alpha > 0 && alpha < 1 && delta >= 0 && delta < 1, DPT_EINVAL, "one-run audit: alpha in (0,1), delta in [0,1)");
    /* the p-value grows with eps (q grows): find sup{eps : p(eps) < alpha} */
    if (!(dpt_audit_one_run_pvalue(m, r, v, 0.0, delta) < alpha)) {
        *eps_lb = 0;
        return DPT_OK;
    }
    double lo = 0, hi = 1;
    while (dpt_audit_one_run_pvalue(m, r, v, hi, delta) < alpha && hi < 1e3) lo = hi, hi *= 2;
    while (hi - lo > 1e-6) {
        double mid = 0.5 * (lo + hi);
        if (dpt_audit_one_run_pvalue(m, r, v, mid, delta) < alpha) lo = mid;
        else hi = mid;
    }
    *eps_lb = lo;
    return DPT_OK;
}

typedef struct {
    double s;
    size_t i;
} ranked;

static int cmp_ranked_desc(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->s != y->s) return (x->s < y->s) - (x->s > y->s);
    return (x->i > y->i) - (x->i < y->i); /* deterministic order for ties */
}

dpt_status dpt_audit_one_run_guess(const double *score, const uint8_t *is_member, size_t n, size_t k, uint64_t *r,
                                   uint64_t *v) {
    DPT_CHECK(k >= 1 && 2 * k <= n, DPT_EINVAL, "one-run audit: %zu guesses per side need at least %zu canaries (have %zu)",
              k, 2 * k, n);
    /* a NaN makes the comparator inconsistent, which qsort does not allow */
    for (size_t i = 0; i < n; i++) DPT_CHECK(!isnan(score[i]), DPT_EINVAL, "one-run audit: score[%zu] is NaN", i);
    ranked *a = dpt_alloc(n, sizeof *a, "one-run audit");
    DPT_CHECK(a, DPT_ENOMEM, "one-run audit: out of memory");
    for (size_t i = 0; i < n; i++) a[i] = (ranked){score[i], i};
    qsort(a, n, sizeof *a, cmp_ranked_desc);
    uint64_t ok = 0;
    for (size_t j = 0; j < k; j++) ok += is_member[a[j].i] != 0;         /* guessed member */
    for (size_t j = n - k; j < n; j++) ok += is_member[a[j].i] == 0;     /* guessed non-member */
    dpt_free(a);
    *r = 2 * k;
    *v = ok;
    return DPT_OK;
}
