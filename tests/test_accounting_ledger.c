/* Tests of the privacy ledger: merging, metadata, composition under both accountants
 * against the direct functions, JSON round trip, and refusal of truncated or edited
 * files with a message naming the file and the problem. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/accounting.h"
#include "testutil.h"

static dpt_ledger *sample_ledger(void) {
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, 0.004, 1.1, 100));
    CHECK_OK(dpt_ledger_add_sgm(l, 0.004, 1.1, 50)); /* merged */
    CHECK_OK(dpt_ledger_add_gaussian(l, 1.0, 20.0, "pca"));
    CHECK_OK(dpt_ledger_add_sgm(l, 0.01, 0.9, 7));
    CHECK_OK(dpt_ledger_set_meta(l, "run_id", "abc \"quoted\" \\ 123"));
    CHECK_OK(dpt_ledger_set_meta(l, "dataset_sha256", "00ff"));
    return l;
}

static void test_merge_and_meta(void) {
    dpt_ledger *l = sample_ledger();
    CHECK(dpt_ledger_n_events(l) == 3);
    CHECK(dpt_ledger_steps(l) == 157);
    CHECK(strcmp(dpt_ledger_get_meta(l, "dataset_sha256"), "00ff") == 0);
    CHECK_OK(dpt_ledger_set_meta(l, "dataset_sha256", "11ee")); /* set replaces */
    CHECK(strcmp(dpt_ledger_get_meta(l, "dataset_sha256"), "11ee") == 0);
    CHECK(dpt_ledger_get_meta(l, "absent") == NULL);
    CHECK(dpt_ledger_pld_applies(l) == 1);
    dpt_ledger_free(l);
    dpt_ledger_free(NULL);
}

static void test_epsilon_matches_direct(void) {
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    double e0 = -1;
    CHECK_OK(dpt_ledger_epsilon(l, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e0));
    CHECK(e0 == 0); /* nothing spent */
    for (int i = 0; i < 1000; i++) CHECK_OK(dpt_ledger_add_sgm(l, 0.004, 1.1, 15));
    CHECK(dpt_ledger_n_events(l) == 1);
    double e_l, e_d, p_l, p_d;
    CHECK_OK(dpt_ledger_epsilon(l, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_l));
    CHECK_OK(dpt_rdp_sgm_epsilon(0.004, 1.1, 15000, 1e-5, DPT_CONV_BALLE, NULL, 0, &e_d, NULL));
    CHECK_CLOSE(e_l, e_d, 0, 1e-12);
    CHECK_OK(dpt_ledger_epsilon(l, 1e-5, DPT_ACCT_PLD, DPT_CONV_BALLE, &p_l));
    CHECK_OK(dpt_pld_sgm_epsilon(0.004, 1.1, 15000, 1e-5, &p_d));
    CHECK_CLOSE(p_l, p_d, 0, 1e-12);
    dpt_ledger_free(l);

    /* a Gaussian with sensitivity 2 and std 6 is SGM with q = 1, sigma = 3 */
    dpt_ledger *g = NULL;
    CHECK_OK(dpt_ledger_new(&g));
    CHECK_OK(dpt_ledger_add_gaussian(g, 2.0, 6.0, NULL));
    CHECK_OK(dpt_ledger_add_gaussian(g, 2.0, 6.0, NULL));
    CHECK(dpt_ledger_n_events(g) == 1);
    CHECK(dpt_ledger_steps(g) == 0);
    CHECK_OK(dpt_ledger_epsilon(g, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_l));
    CHECK_OK(dpt_rdp_sgm_epsilon(1.0, 3.0, 2, 1e-5, DPT_CONV_BALLE, NULL, 0, &e_d, NULL));
    CHECK_CLOSE(e_l, e_d, 0, 1e-12);
    CHECK_OK(dpt_ledger_epsilon(g, 1e-5, DPT_ACCT_PLD, DPT_CONV_BALLE, &p_l));
    CHECK_OK(dpt_pld_sgm_epsilon(1.0, 3.0, 2, 1e-5, &p_d));
    CHECK_CLOSE(p_l, p_d, 0, 1e-12);
    dpt_ledger_free(g);

    /* an RDP-curve event equal to the SGM curve at the default orders composes like SGM */
    size_t n;
    const double *ord = dpt_rdp_default_orders(&n);
    double *curve = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) CHECK_OK(dpt_rdp_sgm(0.01, 1.0, ord[i], &curve[i]));
    dpt_ledger *c = NULL;
    CHECK_OK(dpt_ledger_new(&c));
    CHECK_OK(dpt_ledger_add_rdp_curve(c, ord, curve, n, 1000, "custom"));
    CHECK_OK(dpt_ledger_epsilon(c, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_l));
    CHECK_OK(dpt_rdp_sgm_epsilon(0.01, 1.0, 1000, 1e-5, DPT_CONV_BALLE, NULL, 0, &e_d, NULL));
    CHECK_CLOSE(e_l, e_d, 0, 1e-12);
    CHECK(dpt_ledger_pld_applies(c) == 0);
    CHECK_STATUS(dpt_ledger_epsilon(c, 1e-5, DPT_ACCT_PLD, DPT_CONV_BALLE, &p_l), DPT_ENOTSUP);
    CHECK_ERR_HAS("PLD");
    /* a coarser curve is used at the next larger order: never smaller than exact */
    double co[] = {2, 8, 32}, cr[3];
    for (int i = 0; i < 3; i++) CHECK_OK(dpt_rdp_sgm(0.01, 1.0, co[i], &cr[i]));
    dpt_ledger *c2 = NULL;
    CHECK_OK(dpt_ledger_new(&c2));
    CHECK_OK(dpt_ledger_add_rdp_curve(c2, co, cr, 3, 1000, NULL));
    double e_coarse;
    CHECK_OK(dpt_ledger_epsilon(c2, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_coarse));
    CHECK(e_coarse >= e_d && e_coarse < 1.5 * e_d);
    dpt_ledger_free(c2);
    free(curve);

    /* (eps, delta) events: basic composition on top of the RDP part */
    CHECK_OK(dpt_ledger_add_eps_delta(c, 0.5, 1e-6, "dp-pca"));
    double e_mix;
    CHECK_OK(dpt_ledger_epsilon(c, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_mix));
    CHECK_OK(dpt_rdp_sgm_epsilon(0.01, 1.0, 1000, 9e-6, DPT_CONV_BALLE, NULL, 0, &e_d, NULL));
    CHECK_CLOSE(e_mix, e_d + 0.5, 0, 1e-12);
    CHECK_STATUS(dpt_ledger_epsilon(c, 1e-6, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_mix), DPT_ERANGE);
    dpt_ledger_free(c);

    /* heterogeneous SGM under PLD stays below RDP */
    dpt_ledger *h = sample_ledger();
    CHECK_OK(dpt_ledger_epsilon(h, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_l));
    CHECK_OK(dpt_ledger_epsilon(h, 1e-5, DPT_ACCT_PLD, DPT_CONV_BALLE, &p_l));
    CHECK(p_l <= e_l && p_l > 0);
    dpt_ledger_free(h);
}

/* sgm_dgauss events (SGM whose noise came from the secure table sampler, at a per-coordinate
 * distance (mu, tv) from the exact mechanism): the RDP epsilon is that of the SGM curve plus
 * coords mu (2 alpha - 1) / (alpha - 1) per step, at delta minus (1 + e^eps) coords tv per
 * step (eps bounded by its value at half the delta); the PLD epsilon is the exact
 * mechanism's at (delta - that) e^-M plus 2 M, M = steps coords mu. mu is exaggerated here
 * (2^-40) so the terms show; 0 gives plain SGM. */
static void test_sgm_dgauss(void) {
    const double q = 0.004, sg = 1.1, mu = 0x1p-40, tv = 1e-22, delta = 1e-5;
    const uint64_t P = 795010, T = 15000;
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    for (int i = 0; i < 3; i++) CHECK_OK(dpt_ledger_add_sgm_dgauss(l, q, sg, P, mu, tv, T / 3));
    CHECK(dpt_ledger_n_events(l) == 1 && dpt_ledger_steps(l) == T);
    CHECK(dpt_ledger_pld_applies(l));
    size_t n;
    const double *ord = dpt_rdp_default_orders(&n);
    double *tot = malloc(n * sizeof *tot);
    for (size_t i = 0; i < n; i++) {
        double r = 0;
        CHECK_OK(dpt_rdp_sgm(q, sg, ord[i], &r));
        tot[i] = (double)T * (r + (double)P * mu * (2 * ord[i] - 1) / (ord[i] - 1));
    }
    double e_half = 0, e_ref = 0, e = 0, e_sgm = 0;
    CHECK_OK(dpt_rdp_to_epsilon(ord, tot, n, delta / 2, DPT_CONV_BALLE, &e_half, NULL, NULL));
    const double dtv = (double)T * (double)P * tv, spend = (1 + exp(e_half)) * dtv;
    CHECK_OK(dpt_rdp_to_epsilon(ord, tot, n, delta - spend, DPT_CONV_BALLE, &e_ref, NULL, NULL));
    CHECK_OK(dpt_ledger_epsilon(l, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &e));
    CHECK_CLOSE(e, e_ref, 0, 1e-12);
    CHECK_OK(dpt_rdp_sgm_epsilon(q, sg, T, delta, DPT_CONV_BALLE, NULL, 0, &e_sgm, NULL));
    CHECK(e > e_sgm * 1.001); /* visible at mu = 2^-40 */
    printf("sgm_dgauss at mu 2^-40: epsilon %.6f, exact mechanism %.6f\n", e, e_sgm);
    /* PLD */
    const double M = (double)T * (double)P * mu;
    double p_half = 0, p_ref = 0, p = 0;
    CHECK_OK(dpt_pld_sgm_epsilon(q, sg, T, delta / 2 * exp(-M), &p_half));
    CHECK_OK(dpt_pld_sgm_epsilon(q, sg, T, (delta - (1 + exp(p_half + 2 * M)) * dtv) * exp(-M), &p_ref));
    CHECK_OK(dpt_ledger_epsilon(l, delta, DPT_ACCT_PLD, DPT_CONV_BALLE, &p));
    CHECK_CLOSE(p, p_ref + 2 * M, 0, 1e-12);
    /* JSON round trip */
    char *js = NULL;
    CHECK_OK(dpt_ledger_to_json(l, &js));
    CHECK(js && strstr(js, "\"sgm_dgauss\"") && strstr(js, "\"coords\""));
    dpt_ledger *back = NULL;
    CHECK_OK(dpt_ledger_from_json(js, &back));
    double eb = 0;
    if (back) CHECK_OK(dpt_ledger_epsilon(back, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &eb));
    CHECK(eb == e);
    /* an edited coords is named */
    char *ed = js ? strstr(js, "\"coords\":") : NULL;
    if (ed) {
        char *bad = malloc(strlen(js) + 8);
        size_t k = (size_t)(ed - js) + strlen("\"coords\":");
        memcpy(bad, js, k);
        strcpy(bad + k, "\t0.5");
        strcat(bad, strchr(js + k, ','));
        dpt_ledger *x = NULL;
        CHECK_STATUS(dpt_ledger_from_json(bad, &x), DPT_EFORMAT);
        CHECK_ERR_HAS("coords");
        dpt_ledger_free(x);
        free(bad);
    }
    free(js);
    dpt_ledger_free(back);
    /* mu = tv = 0: plain SGM */
    dpt_ledger *z = NULL;
    CHECK_OK(dpt_ledger_new(&z));
    CHECK_OK(dpt_ledger_add_sgm_dgauss(z, q, sg, P, 0, 0, T));
    CHECK_OK(dpt_ledger_epsilon(z, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &e));
    CHECK_CLOSE(e, e_sgm, 0, 1e-12);
    /* bad arguments name the parameter; a total variation eating the delta is refused */
    CHECK_STATUS(dpt_ledger_add_sgm_dgauss(z, q, sg, P, -1e-20, 0, 1), DPT_EINVAL);
    CHECK_ERR_HAS("mu");
    CHECK_STATUS(dpt_ledger_add_sgm_dgauss(z, q, sg, P, 0, 1.0, 1), DPT_EINVAL);
    CHECK_ERR_HAS("tv");
    CHECK_STATUS(dpt_ledger_add_sgm_dgauss(z, q, sg, 0, 0, 0, 1), DPT_EINVAL);
    CHECK_ERR_HAS("coords");
    CHECK_OK(dpt_ledger_add_sgm_dgauss(z, q, sg, P, 0, 1e-12, T));
    CHECK_STATUS(dpt_ledger_epsilon(z, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &e), DPT_ERANGE);
    CHECK_ERR_HAS("total variation");
    dpt_ledger_free(z);
    dpt_ledger_free(l);
    free(tot);
}

static void test_bad_events(void) {
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_STATUS(dpt_ledger_add_sgm(l, 0.0, 1.0, 1), DPT_EINVAL);
    CHECK_ERR_HAS("q must be in (0, 1]");
    CHECK_STATUS(dpt_ledger_add_sgm(l, 1.5, 1.0, 1), DPT_EINVAL);
    CHECK_STATUS(dpt_ledger_add_sgm(l, 0.5, 0.0, 1), DPT_EINVAL);
    CHECK_ERR_HAS("sigma");
    CHECK_STATUS(dpt_ledger_add_sgm(l, 0.5, 1.0, 0), DPT_EINVAL);
    CHECK_ERR_HAS("count");
    CHECK_STATUS(dpt_ledger_add_gaussian(l, 0.0, 1.0, NULL), DPT_EINVAL);
    CHECK_STATUS(dpt_ledger_add_eps_delta(l, -1.0, 0.0, NULL), DPT_EINVAL);
    CHECK_STATUS(dpt_ledger_add_eps_delta(l, 1.0, 1.0, NULL), DPT_EINVAL);
    double o[] = {2, 1.5}, r[] = {0.1, 0.2};
    CHECK_STATUS(dpt_ledger_add_rdp_curve(l, o, r, 2, 1, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("increasing");
    CHECK_STATUS(dpt_ledger_set_meta(l, "", "x"), DPT_EINVAL);
    double e;
    CHECK_STATUS(dpt_ledger_epsilon(l, 0.0, DPT_ACCT_RDP, DPT_CONV_BALLE, &e), DPT_EINVAL);
    CHECK(dpt_ledger_n_events(l) == 0);
    dpt_ledger_free(l);
}

/* ==== JSON ==== */

static char *to_json(const dpt_ledger *l) {
    char *s = NULL;
    CHECK_OK(dpt_ledger_to_json(l, &s));
    return s;
}

static void test_round_trip(void) {
    dpt_ledger *a = sample_ledger();
    double co[] = {1.5, 2, 64}, cr[] = {0.001, 0.0025, 0.3};
    CHECK_OK(dpt_ledger_add_rdp_curve(a, co, cr, 3, 4, "dp-ulr rejection"));
    CHECK_OK(dpt_ledger_add_eps_delta(a, 0.1 + 0.2, 1e-9, NULL)); /* non-short double */
    char *ja = to_json(a);
    CHECK(strstr(ja, "\"format\"") && strstr(ja, "dptrain-ledger") && strstr(ja, "\"version\""));
    CHECK(strstr(ja, "sha256:") != NULL);
    dpt_ledger *b = NULL;
    CHECK_OK(dpt_ledger_from_json(ja, &b));
    char *jb = b ? to_json(b) : NULL;
    CHECK(jb && strcmp(ja, jb) == 0);
    double ea, eb;
    CHECK_OK(dpt_ledger_epsilon(a, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &ea));
    CHECK_OK(dpt_ledger_epsilon(b, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &eb));
    CHECK(ea == eb);
    CHECK(dpt_ledger_steps(b) == dpt_ledger_steps(a));
    CHECK(strcmp(dpt_ledger_get_meta(b, "run_id"), "abc \"quoted\" \\ 123") == 0);

    /* equal ledgers built in a different meta order serialize identically */
    dpt_ledger *c = NULL;
    CHECK_OK(dpt_ledger_new(&c));
    CHECK_OK(dpt_ledger_set_meta(c, "dataset_sha256", "00ff"));
    CHECK_OK(dpt_ledger_set_meta(c, "run_id", "abc \"quoted\" \\ 123"));
    CHECK_OK(dpt_ledger_add_sgm(c, 0.004, 1.1, 150));
    CHECK_OK(dpt_ledger_add_gaussian(c, 1.0, 20.0, "pca"));
    CHECK_OK(dpt_ledger_add_sgm(c, 0.01, 0.9, 7));
    CHECK_OK(dpt_ledger_add_rdp_curve(c, co, cr, 3, 4, "dp-ulr rejection"));
    CHECK_OK(dpt_ledger_add_eps_delta(c, 0.1 + 0.2, 1e-9, NULL));
    char *jc = to_json(c);
    CHECK(strcmp(ja, jc) == 0);

    /* doubles survive bit-exactly (0.1 + 0.2 != 0.3) */
    dpt_ledger *x = NULL, *y = NULL;
    CHECK_OK(dpt_ledger_new(&x));
    CHECK_OK(dpt_ledger_add_eps_delta(x, 0.1 + 0.2, 1e-9, NULL));
    char *jx = to_json(x);
    CHECK_OK(dpt_ledger_from_json(jx, &y));
    double ex = 0, ey = 1;
    CHECK_OK(dpt_ledger_epsilon(x, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &ex));
    if (y) CHECK_OK(dpt_ledger_epsilon(y, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &ey));
    CHECK(ex == 0.1 + 0.2 && ey == ex);
    free(jx);
    dpt_ledger_free(x);
    dpt_ledger_free(y);

    /* file round trip */
    char path[256];
    snprintf(path, sizeof path, "%s/ledger.json", tu_tmpdir());
    CHECK_OK(dpt_ledger_save(a, path));
    dpt_ledger *d = NULL;
    CHECK_OK(dpt_ledger_load(path, &d));
    char *jd = d ? to_json(d) : NULL;
    CHECK(jd && strcmp(ja, jd) == 0);
    free(ja);
    free(jb);
    free(jc);
    free(jd);
    dpt_ledger_free(a);
    dpt_ledger_free(b);
    dpt_ledger_free(c);
    dpt_ledger_free(d);
}

/* Replaces the first occurrence of `from` by `to` in a malloc'd copy. */
static char *edit(const char *s, const char *from, const char *to) {
    const char *p = strstr(s, from);
    CHECK(p != NULL);
    if (!p) return strdup(s);
    size_t n = strlen(s) - strlen(from) + strlen(to);
    char *out = malloc(n + 1);
    size_t k = (size_t)(p - s);
    memcpy(out, s, k);
    strcpy(out + k, to);
    strcat(out, p + strlen(from));
    return out;
}

static void expect_refused(const char *json, const char *needle) {
    dpt_ledger *l = NULL;
    CHECK_STATUS(dpt_ledger_from_json(json, &l), DPT_EFORMAT);
    CHECK_ERR_HAS(needle);
    CHECK(l == NULL);
    dpt_ledger_free(l);
}

static void test_refused(void) {
    dpt_ledger *a = NULL;
    CHECK_OK(dpt_ledger_new(&a));
    CHECK_OK(dpt_ledger_add_sgm(a, 0.004, 1.1, 1500));
    CHECK_OK(dpt_ledger_add_gaussian(a, 1.0, 20.0, "pca"));
    char *j = to_json(a);

    /* truncated */
    char *t = strdup(j);
    t[strlen(t) / 2] = 0;
    expect_refused(t, "truncated");
    free(t);
    /* a valid edit (sigma 1.1 -> 1.2) no longer matches the checksum */
    char *e1 = edit(j, "\"sigma\":\t1.1", "\"sigma\":\t1.2");
    expect_refused(e1, "checksum mismatch");
    free(e1);
    /* edited to invalid values: named precisely */
    char *e2 = edit(j, "\"q\":\t0.004", "\"q\":\t1.5");
    expect_refused(e2, "q must be in (0, 1]");
    free(e2);
    char *e3 = edit(j, "\"sigma\":\t1.1", "\"sigma\":\t-1");
    expect_refused(e3, "sigma must be > 0");
    free(e3);
    char *e4 = edit(j, "\"count\":\t1500", "\"count\":\t0");
    expect_refused(e4, "count");
    free(e4);
    char *e5 = edit(j, "\"count\":\t1500", "\"count\":\t1.5");
    expect_refused(e5, "count");
    free(e5);
    char *e6 = edit(j, "\"q\":\t0.004", "\"q\":\t\"0.004\"");
    expect_refused(e6, "must be a number");
    free(e6);
    char *e7 = edit(j, "dptrain-ledger", "other-format");
    expect_refused(e7, "not a dptrain ledger");
    free(e7);
    char *e8 = edit(j, "\"version\":\t1", "\"version\":\t2");
    expect_refused(e8, "version");
    free(e8);
    char *e9 = edit(j, "\"type\":\t\"sgm\"", "\"type\":\t\"laplace\"");
    expect_refused(e9, "unknown type");
    free(e9);
    char *e10 = edit(j, "\"total_sgm_steps\":\t1500", "\"total_sgm_steps\":\t1499");
    expect_refused(e10, "total_sgm_steps");
    free(e10);
    char *e11 = edit(j, "\"checksum\"", "\"checksum_x\"");
    expect_refused(e11, "checksum");
    free(e11);

    /* files: errors name the path */
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/ledger2.json", tu_tmpdir());
    snprintf(bad, sizeof bad, "%s/ledger_truncated.json", tu_tmpdir());
    CHECK_OK(dpt_ledger_save(a, path));
    FILE *f = fopen(bad, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(j, 1, strlen(j) - 40, f);
        fclose(f);
    }
    dpt_ledger *l = NULL;
    CHECK_STATUS(dpt_ledger_load(bad, &l), DPT_EFORMAT);
    CHECK_ERR_HAS(bad);
    CHECK_ERR_HAS("truncated");
    snprintf(bad, sizeof bad, "%s/does_not_exist.json", tu_tmpdir());
    CHECK(dpt_ledger_load(bad, &l) != DPT_OK);
    CHECK_ERR_HAS("does_not_exist.json");
    free(j);
    dpt_ledger_free(a);
}

/* Consecutive SGM events merge only when q AND sigma are equal (issue 38.8: a merge on q
 * alone survived the suite): equal q with sigma 1.0 then 2.0 stays two events, whose RDP
 * epsilon is that of the summed curves (an RDP-curve event of 100 rdp(q, 1) + 100
 * rdp(q, 2) on the default grid), and under both accountants strictly between 200 steps
 * at sigma 2 and 200 at sigma 1. The same for Gaussian releases of equal sensitivity. */
static void test_merge_needs_equal_sigma(void) {
    const double q = 0.01, delta = 1e-5;
    dpt_ledger *l = NULL, *ref = NULL, *lo = NULL, *hi = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, q, 1.0, 100));
    CHECK_OK(dpt_ledger_add_sgm(l, q, 2.0, 100));
    CHECK(dpt_ledger_n_events(l) == 2);
    CHECK(dpt_ledger_steps(l) == 200);
    size_t n = 0;
    const double *orders = dpt_rdp_default_orders(&n);
    double *curve = malloc(n * sizeof *curve);
    for (size_t i = 0; i < n; i++) {
        double r1 = 0, r2 = 0;
        CHECK_OK(dpt_rdp_sgm(q, 1.0, orders[i], &r1));
        CHECK_OK(dpt_rdp_sgm(q, 2.0, orders[i], &r2));
        curve[i] = 100 * r1 + 100 * r2;
    }
    CHECK_OK(dpt_ledger_new(&ref));
    CHECK_OK(dpt_ledger_add_rdp_curve(ref, orders, curve, n, 1, "sum"));
    double e = 0, e_ref = 0, e_lo = 0, e_hi = 0;
    CHECK_OK(dpt_ledger_epsilon(l, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &e));
    CHECK_OK(dpt_ledger_epsilon(ref, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_ref));
    CHECK_CLOSE(e, e_ref, 0, 1e-12);
    CHECK_OK(dpt_ledger_new(&lo));
    CHECK_OK(dpt_ledger_new(&hi));
    CHECK_OK(dpt_ledger_add_sgm(lo, q, 2.0, 200));
    CHECK_OK(dpt_ledger_add_sgm(hi, q, 1.0, 200));
    for (int acct = DPT_ACCT_RDP; acct <= DPT_ACCT_PLD; acct++) {
        CHECK_OK(dpt_ledger_epsilon(l, delta, (dpt_accountant)acct, DPT_CONV_BALLE, &e));
        CHECK_OK(dpt_ledger_epsilon(lo, delta, (dpt_accountant)acct, DPT_CONV_BALLE, &e_lo));
        CHECK_OK(dpt_ledger_epsilon(hi, delta, (dpt_accountant)acct, DPT_CONV_BALLE, &e_hi));
        CHECK(e_lo < e && e < e_hi);
        if (!(e_lo < e && e < e_hi)) fprintf(stderr, "acct %d: epsilon %g not in (%g, %g)\n", acct, e, e_lo, e_hi);
    }
    dpt_ledger_free(l), dpt_ledger_free(lo), dpt_ledger_free(hi);
    /* Gaussian releases: equal sensitivity, different noise std */
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_new(&lo));
    CHECK_OK(dpt_ledger_add_gaussian(l, 1.0, 3.0, NULL));
    CHECK_OK(dpt_ledger_add_gaussian(l, 1.0, 6.0, NULL));
    CHECK(dpt_ledger_n_events(l) == 2);
    CHECK_OK(dpt_ledger_add_gaussian(lo, 1.0, 6.0, NULL));
    CHECK_OK(dpt_ledger_add_gaussian(lo, 1.0, 6.0, NULL));
    CHECK(dpt_ledger_n_events(lo) == 1);
    CHECK_OK(dpt_ledger_epsilon(l, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &e));
    CHECK_OK(dpt_ledger_epsilon(lo, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_lo));
    CHECK(e > e_lo);
    free(curve);
    dpt_ledger_free(l), dpt_ledger_free(lo), dpt_ledger_free(ref);
}

/* Calibration on top of earlier releases: with no prior (or an empty one) exactly the
 * sigma of dpt_calibrate_sigma; with a Gaussian release recorded first, the returned sigma meets
 * the target for the composition and sigma - tol does not, it is larger than without
 * the release, and the prior is left unchanged; a prior that alone spends the budget is
 * DPT_ERANGE. The copy serializes like the original. */
static void test_calibrate_on_prior(void) {
    const double q = 0.01, delta = 1e-5, target = 2.0, tol = 1e-4;
    const uint64_t T = 1000;
    double s_plain = 0, s_empty = 0, s_prior = 0, e = 0;
    CHECK_OK(dpt_calibrate_sigma(q, T, delta, target, DPT_ACCT_RDP, DPT_CONV_BALLE, tol, &s_plain));
    CHECK_OK(dpt_ledger_calibrate_sgm(NULL, q, T, delta, target, DPT_ACCT_RDP, DPT_CONV_BALLE, tol, &s_empty));
    CHECK(s_empty == s_plain); /* nothing recorded: exactly dpt_calibrate_sigma's sigma */
    dpt_ledger *prior = NULL, *l = NULL;
    CHECK_OK(dpt_ledger_new(&prior));
    CHECK_OK(dpt_ledger_add_gaussian(prior, 1.0, 4.0, "dp-normalize"));
    CHECK_OK(dpt_ledger_set_meta(prior, "note", "kept"));
    char *before = NULL, *after = NULL, *copied = NULL;
    CHECK_OK(dpt_ledger_to_json(prior, &before));
    for (int acct = DPT_ACCT_RDP; acct <= DPT_ACCT_PLD; acct++) {
        CHECK_OK(dpt_ledger_calibrate_sgm(prior, q, T, delta, target, (dpt_accountant)acct, DPT_CONV_BALLE, tol,
                                          &s_prior));
        for (int k = 0; k < 2; k++) {
            CHECK_OK(dpt_ledger_copy(prior, &l));
            CHECK_OK(dpt_ledger_add_sgm(l, q, k ? s_prior - tol : s_prior, T));
            CHECK_OK(dpt_ledger_epsilon(l, delta, (dpt_accountant)acct, DPT_CONV_BALLE, &e));
            if (k) CHECK(e > target);
            else CHECK(e <= target);
            dpt_ledger_free(l);
            l = NULL;
        }
        if (acct == DPT_ACCT_RDP) CHECK(s_prior > s_plain + 10 * tol);
    }
    CHECK_OK(dpt_ledger_to_json(prior, &after));
    CHECK(!strcmp(before, after));
    CHECK_OK(dpt_ledger_copy(prior, &l));
    CHECK_OK(dpt_ledger_to_json(l, &copied));
    CHECK(!strcmp(before, copied));
    CHECK(dpt_ledger_get_meta(l, "note") && !strcmp(dpt_ledger_get_meta(l, "note"), "kept"));
    dpt_ledger_free(l);
    /* a release that alone spends more than the target */
    CHECK_OK(dpt_ledger_add_gaussian(prior, 1.0, 0.2, "large"));
    CHECK_STATUS(dpt_ledger_calibrate_sgm(prior, q, T, delta, target, DPT_ACCT_RDP, DPT_CONV_BALLE, tol, &s_prior),
                 DPT_ERANGE);
    CHECK_ERR_HAS("already in the ledger");
    CHECK_STATUS(dpt_ledger_calibrate_sgm(NULL, 0.0, T, delta, target, DPT_ACCT_RDP, DPT_CONV_BALLE, tol, &s_prior),
                 DPT_EINVAL);
    CHECK_STATUS(dpt_ledger_calibrate_sgm(NULL, q, T, delta, -1, DPT_ACCT_RDP, DPT_CONV_BALLE, tol, &s_prior),
                 DPT_EINVAL);
    CHECK_STATUS(dpt_ledger_copy(NULL, &l), DPT_EINVAL);
    free(before), free(after), free(copied);
    dpt_ledger_free(prior);
}

/* dpt_ledger_label: every qualification the ledger records, compact and full, in order */
static void expect_label(const dpt_ledger *l, int full, const char *want) {
    char buf[640];
    dpt_ledger_label(l, full, buf, sizeof buf);
    if (strcmp(buf, want)) fprintf(stderr, "FAIL dpt_ledger_label(full %d): got '%s', want '%s'\n", full, buf, want);
    CHECK(!strcmp(buf, want));
}

static void test_label(void) {
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    if (!l) return;
    expect_label(l, 0, "");
    CHECK_OK(dpt_ledger_set_meta(l, "seed_source", "caller"));
    expect_label(l, 0, "  [SEEDED]");
    CHECK_OK(dpt_ledger_set_meta(l, "delta_forced", "0.01"));
    CHECK_OK(dpt_ledger_set_meta(l, "mismatch_allowed_at_step_20", "sigma was 1.2, now 1.5"));
    expect_label(l, 0, "  [SEEDED]  [delta >= 1/N (forced)]  [ledger mismatch allowed]");
    expect_label(l, 1, "  [SEEDED run (a chosen seed): holds only while the seed stays secret and no other run uses it]  [delta 0.01 >= 1/N "
                       "accepted (force): such a delta allows releasing a whole example]  [ledger mismatch allowed: "
                       "resumed although the ledger recorded other settings or data (mismatch_allowed_at_step_* in "
                       "the ledger)]");
    CHECK_OK(dpt_ledger_set_meta(l, "seed_source", "os"));
    CHECK_OK(dpt_ledger_set_meta(l, "epsilon_excludes", "X"));
    expect_label(l, 0, "  [epsilon does NOT cover: X]  [delta >= 1/N (forced)]  [ledger mismatch allowed]");
    char small[12];
    dpt_ledger_label(l, 0, small, sizeof small); /* truncated, terminated */
    CHECK(strlen(small) == sizeof small - 1 && !strncmp(small, "  [", 3));
    /* too long for the buffer: the exclusions are shortened ("...]"), the short labels kept whole */
    char longer[101], mid[100];
    memset(longer, 'Y', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    CHECK_OK(dpt_ledger_set_meta(l, "epsilon_excludes", longer));
    dpt_ledger_label(l, 0, mid, sizeof mid);
    static const char *tail = "...]  [delta >= 1/N (forced)]  [ledger mismatch allowed]";
    CHECK(strlen(mid) == sizeof mid - 1 && !strncmp(mid, "  [epsilon does NOT cover: YYYY", 31) &&
          !strcmp(mid + strlen(mid) - strlen(tail), tail));
    dpt_ledger_free(l);
}

int main(void) {
    test_label();
    test_sgm_dgauss();
    test_merge_and_meta();
    test_merge_needs_equal_sigma();
    test_epsilon_matches_direct();
    test_bad_events();
    test_round_trip();
    test_refused();
    test_calibrate_on_prior();
    TEST_MAIN_END();
}
