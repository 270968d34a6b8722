/* Calibration on top of a ledger: the noise multiplier of T sampled Gaussian steps that
 * keeps the composition with releases already recorded (DP normalization statistics,
 * DP-PCA, ...) within a target epsilon. See accounting.h. */
#include <dptrain/accounting.h>

#include <math.h>
#include <stdlib.h>

dpt_status dpt_ledger_copy(const dpt_ledger *l, dpt_ledger **out) {
    DPT_CHECK(l && out, DPT_EINVAL, "dpt_ledger_copy: NULL argument");
    *out = NULL;
    /* the canonical serialization round-trips every event and metadata entry exactly */
    char *js = NULL;
    DPT_TRY(dpt_ledger_to_json(l, &js));
    dpt_status s = dpt_ledger_from_json(js, out);
    free(js);
    return s;
}

/* epsilon of `base` (NULL: empty) plus `steps` steps of SGM(q, sigma) */
static dpt_status eps_with(const char *base_json, double q, double sigma, uint64_t steps, double delta,
                           dpt_accountant acct, dpt_conversion conv, double *eps) {
    dpt_ledger *l = NULL;
    dpt_status s = base_json ? dpt_ledger_from_json(base_json, &l) : dpt_ledger_new(&l);
    if (s == DPT_OK) s = dpt_ledger_add_sgm(l, q, sigma, steps);
    if (s == DPT_OK) s = dpt_ledger_epsilon(l, delta, acct, conv, eps);
    dpt_ledger_free(l);
    return s;
}

dpt_status dpt_ledger_calibrate_sgm(const dpt_ledger *prior, double q, uint64_t steps, double delta,
                                    double target_eps, dpt_accountant acct, dpt_conversion conv, double tol,
                                    double *sigma) {
    DPT_CHECK(q > 0 && q <= 1, DPT_EINVAL, "q must be in (0, 1], got %g", q);
    DPT_CHECK(steps >= 1, DPT_EINVAL, "steps must be >= 1, got 0");
    DPT_CHECK(delta > 0 && delta < 1, DPT_EINVAL, "delta must be in (0, 1), got %g", delta);
    DPT_CHECK(isfinite(target_eps) && target_eps > 0, DPT_EINVAL, "target_eps must be > 0, got %g", target_eps);
    DPT_CHECK(isfinite(tol) && tol > 0, DPT_EINVAL, "tol must be > 0, got %g", tol);
    DPT_CHECK(acct == DPT_ACCT_RDP || acct == DPT_ACCT_PLD || acct == DPT_ACCT_DEFAULT, DPT_EINVAL,
              "acct: unknown accountant %d", (int)acct);
    DPT_CHECK(sigma, DPT_EINVAL, "sigma is NULL");
    /* nothing recorded: exactly dpt_calibrate_sigma's sigma (what `dptrain account
     * --target-epsilon` prints for the same q, steps and delta) */
    if (!prior || dpt_ledger_n_events(prior) == 0)
        return dpt_calibrate_sigma(q, steps, delta, target_eps, acct, conv, tol, sigma);
    char *base = NULL;
    {
        double e0;
        DPT_TRY(dpt_ledger_epsilon(prior, delta, acct, conv, &e0));
        DPT_CHECK(e0 < target_eps, DPT_ERANGE,
                  "target_eps %g is unreachable: the releases already in the ledger spend epsilon %.6g", target_eps, e0);
        DPT_TRY(dpt_ledger_to_json(prior, &base));
    }
    /* the search of dpt_calibrate_sigma: sigma in [0.05, 1e4], epsilon decreasing in
     * sigma; invariant eps(hi) <= target < eps(lo) */
    const double s_min = 0.05, s_max = 1e4;
    double lo = 1.0, hi = 1.0, e = 0;
    dpt_status s = eps_with(base, q, hi, steps, delta, acct, conv, &e);
    if (s == DPT_OK && e <= target_eps) {
        for (;;) {
            lo = hi * 0.5;
            if (lo < s_min) lo = s_min;
            if ((s = eps_with(base, q, lo, steps, delta, acct, conv, &e)) != DPT_OK) break;
            if (e > target_eps) break;
            if (lo == s_min) {
                s = dpt_set_error(DPT_ERANGE, "target_eps %g is met even at sigma = %g (the smallest sigma searched)",
                                  target_eps, s_min);
                break;
            }
            hi = lo;
        }
    } else if (s == DPT_OK) {
        for (;;) {
            lo = hi;
            hi *= 2.0;
            if (hi > s_max) {
                s = dpt_set_error(DPT_ERANGE, "target_eps %g needs sigma > %g", target_eps, s_max);
                break;
            }
            if ((s = eps_with(base, q, hi, steps, delta, acct, conv, &e)) != DPT_OK) break;
            if (e <= target_eps) break;
        }
    }
    while (s == DPT_OK && hi - lo > tol) {
        const double mid = 0.5 * (lo + hi);
        if (!(mid > lo && mid < hi)) break; /* tol below the spacing of doubles: as close as it gets */
        if ((s = eps_with(base, q, mid, steps, delta, acct, conv, &e)) != DPT_OK) break;
        if (e <= target_eps) hi = mid;
        else lo = mid;
    }
    free(base);
    if (s == DPT_OK) *sigma = hi;
    return s;
}
