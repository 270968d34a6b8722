/* audit statistics against closed forms and brute force:
 *  - incomplete beta: Beta(1,b) and Beta(a,1) closed forms, the binomial tail identity,
 *    symmetry; its inverse round-trips; Clopper-Pearson against published intervals;
 *  - the epsilon lower bound against hand-computed values; the one-run audit bound
 *    (delta = 0) against its binomial closed form;
 *  - AUC / TPR-at-FPR against O(n^2) brute force (with ties) and against the closed form
 *    for two Gaussians; bootstrap interval coverage over repeated experiments;
 *  - LiRA on synthetic shadow statistics where per-example offsets hide membership from
 *    a global threshold but not from the per-example likelihood ratio;
 *  - loss attack on a model that memorized random labels (AUC near 1) and on an
 *    untrained model (AUC near 0.5). */
#include <dptrain/audit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static double Phi(double z) { return 0.5 * erfc(-z / sqrt(2.0)); }
static double Phi_inv(double p) {
    double lo = -40, hi = 40;
    for (int i = 0; i < 200; i++) {
        double m = 0.5 * (lo + hi);
        if (Phi(m) < p) lo = m;
        else hi = m;
    }
    return 0.5 * (lo + hi);
}

static double binom_tail(int n, int k, double p) { /* P[Bin(n,p) >= k] by direct sum */
    double s = 0;
    for (int j = k; j <= n; j++) s += exp(lgamma(n + 1.0) - lgamma(j + 1.0) - lgamma(n - j + 1.0) + j * log(p) + (n - j) * log1p(-p));
    return s;
}

static void test_betainc(void) {
    double xs[] = {1e-6, 0.01, 0.2, 0.5, 0.77, 0.999};
    for (int i = 0; i < 6; i++) {
        double x = xs[i];
        for (double b = 0.5; b < 40; b *= 2.3) {
            CHECK_CLOSE(dpt_betainc(1.0, b, x), -expm1(b * log1p(-x)), 1e-15, 1e-12);
            CHECK_CLOSE(dpt_betainc(b, 1.0, x), pow(x, b), 1e-15, 1e-12);
            CHECK_CLOSE(dpt_betainc(b, 2.7, x) + dpt_betainc(2.7, b, 1 - x), 1.0, 1e-13, 0);
        }
        for (int n = 1; n <= 60; n += 7)
            for (int k = 1; k <= n; k += 3) CHECK_CLOSE(dpt_betainc(k, n - k + 1, x), binom_tail(n, k, x), 1e-14, 1e-11);
    }
    CHECK_CLOSE(dpt_betainc(2, 3, 0.5), 11.0 / 16.0, 1e-15, 1e-13);
    CHECK(isnan(dpt_betainc(-1, 2, 0.5)));
    CHECK(isnan(dpt_betainc(1, 2, 1.5)));
    /* inverse */
    double ps[] = {1e-9, 0.025, 0.3, 0.5, 0.975, 1 - 1e-9};
    for (int i = 0; i < 6; i++)
        for (double a = 0.3; a < 300; a *= 3.1)
            for (double b = 0.7; b < 300; b *= 4.3) {
                double x = dpt_betainc_inv(a, b, ps[i]);
                CHECK_CLOSE(dpt_betainc(a, b, x), ps[i], 1e-12, 1e-7);
            }
    CHECK_CLOSE(dpt_betainc_inv(1, 10, 0.5), 1 - pow(0.5, 0.1), 1e-14, 0);
    /* Clopper-Pearson: published 95% interval for 5/10 is (0.187086, 0.812914); 0/10 and
     * 10/10 have the closed forms (0, 1 - 0.025^(1/10)) and (0.025^(1/10), 1) */
    double lo, hi;
    CHECK_OK(dpt_clopper_pearson(5, 10, 0.05, &lo, &hi));
    CHECK_CLOSE(lo, 0.187086, 1e-6, 0);
    CHECK_CLOSE(hi, 0.812914, 1e-6, 0);
    CHECK_OK(dpt_clopper_pearson(0, 10, 0.05, &lo, &hi));
    CHECK(lo == 0);
    CHECK_CLOSE(hi, 1 - pow(0.025, 0.1), 1e-12, 0);
    CHECK_OK(dpt_clopper_pearson(10, 10, 0.05, &lo, &hi));
    CHECK_CLOSE(lo, pow(0.025, 0.1), 1e-12, 0);
    CHECK(hi == 1);
    CHECK_STATUS(dpt_clopper_pearson(11, 10, 0.05, &lo, &hi), DPT_EINVAL);
}

static void test_eps_bound(void) {
    double e;
    /* perfect attack on 50 + 50 trials: TPR_lo = 0.025^(1/50), FPR_hi = 1 - 0.025^(1/50) */
    double r = pow(0.025, 1.0 / 50);
    CHECK_OK(dpt_audit_eps_lower_bound(50, 0, 0, 50, 0.0, 0.05, &e));
    CHECK_CLOSE(e, log(r / (1 - r)), 1e-10, 0);
    CHECK_CLOSE(e, 2.56958, 1e-4, 0); /* by hand: ln(0.928878 / 0.071122) */
    CHECK_OK(dpt_audit_eps_lower_bound(50, 0, 0, 50, 1e-2, 0.05, &e));
    CHECK_CLOSE(e, log((r - 1e-2) / (1 - r)), 1e-10, 0);
    /* chance-level attack: no evidence */
    CHECK_OK(dpt_audit_eps_lower_bound(25, 25, 25, 25, 0.0, 0.05, &e));
    CHECK(e == 0);
    /* 40/50 vs 5/50: log(CP_lo(40,50) / CP_hi(5,50)) with the CP values from the inverse beta */
    double tl = dpt_betainc_inv(40, 11, 0.025), fh = dpt_betainc_inv(6, 45, 0.975);
    CHECK_OK(dpt_audit_eps_lower_bound(40, 10, 5, 45, 0.0, 0.05, &e));
    CHECK_CLOSE(e, log(tl / fh), 1e-10, 0);
    CHECK(e > 0.9 && e < 1.6);
    /* from scores: perfectly separated 100 + 100 scores -> the 50 + 50 evaluation half */
    double in[100], out[100], thr;
    for (int i = 0; i < 100; i++) in[i] = 10 + i, out[i] = -i;
    CHECK_OK(dpt_audit_eps_from_scores(in, 100, out, 100, 0.0, 0.05, &e, &thr));
    CHECK_CLOSE(e, log(r / (1 - r)), 1e-10, 0);
    CHECK_STATUS(dpt_audit_eps_lower_bound(0, 0, 1, 1, 0, 0.05, &e), DPT_EINVAL);
}


static void test_one_run(void) {
    /* delta = 0: p = P[Bin(r, q) >= v] = I_q(v, r-v+1), so the bound is logit(I^-1(alpha; v, r-v+1)) */
    double e;
    CHECK_OK(dpt_audit_one_run_eps(100, 100, 100, 0.0, 0.05, &e));
    double q = pow(0.05, 0.01); /* all 100 right: P = q^100 */
    CHECK_CLOSE(e, log(q / (1 - q)), 1e-5, 0);
    CHECK_CLOSE(e, 3.4928, 1e-3, 0); /* by hand: ln(0.970487 / 0.029513) */
    CHECK_OK(dpt_audit_one_run_eps(1000, 200, 150, 0.0, 0.05, &e));
    double q2 = dpt_betainc_inv(150, 51, 0.05);
    CHECK_CLOSE(e, log(q2 / (1 - q2)), 1e-5, 0);
    /* brute-force binomial tail at that eps equals alpha */
    double tail = 0;
    for (int j = 150; j <= 200; j++)
        tail += exp(lgamma(201.0) - lgamma(j + 1.0) - lgamma(201.0 - j) + j * log(q2) + (200 - j) * log1p(-q2));
    CHECK_CLOSE(tail, 0.05, 1e-9, 0);
    /* delta > 0 only weakens the bound, a little for small delta */
    double e0 = e;
    CHECK_OK(dpt_audit_one_run_eps(1000, 200, 150, 1e-5, 0.05, &e));
    CHECK(e <= e0 && e > e0 - 0.3);
    CHECK(dpt_audit_one_run_pvalue(1000, 200, 150, 1.0, 1e-5) >= dpt_audit_one_run_pvalue(1000, 200, 150, 1.0, 0.0));
    /* half right: no evidence */
    CHECK_OK(dpt_audit_one_run_eps(100, 100, 50, 0.0, 0.05, &e));
    CHECK(e == 0);
    CHECK_STATUS(dpt_audit_one_run_eps(10, 20, 5, 0, 0.05, &e), DPT_EINVAL);
    /* guesses: top-k members, bottom-k non-members */
    double sc[8] = {0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4};
    uint8_t mem[8] = {1, 0, 1, 0, 0, 1, 1, 0};
    uint64_t r, v;
    CHECK_OK(dpt_audit_one_run_guess(sc, mem, 8, 2, &r, &v)); /* top: 0.9 (1), 0.8 (1); bottom: 0.1 (0), 0.2 (0) */
    CHECK(r == 4 && v == 4);
    CHECK_OK(dpt_audit_one_run_guess(sc, mem, 8, 4, &r, &v)); /* + 0.7 (0 wrong), 0.6 (1); 0.3 (1 wrong), 0.4 (0) */
    CHECK(r == 8 && v == 6);
    CHECK_STATUS(dpt_audit_one_run_guess(sc, mem, 8, 5, &r, &v), DPT_EINVAL);
}

static double auc_brute(const double *a, size_t na, const double *b, size_t nb) {
    double s = 0;
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++) s += a[i] > b[j] ? 1.0 : a[i] == b[j] ? 0.5 : 0.0;
    return s / ((double)na * (double)nb);
}
static double tpr_brute(const double *a, size_t na, const double *b, size_t nb, double f) {
    double best = 0;
    for (size_t c = 0; c < na + nb; c++) {
        double t = c < na ? a[c] : b[c - na];
        size_t tp = 0, fp = 0;
        for (size_t i = 0; i < na; i++) tp += a[i] >= t;
        for (size_t j = 0; j < nb; j++) fp += b[j] >= t;
        if ((double)fp / (double)nb <= f) best = fmax(best, (double)tp / (double)na);
    }
    return best;
}

static void test_roc(void) {
    dpt_rng r;
    dpt_rng_init(&r, 9, DPT_STREAM_AUX);
    /* small with ties: integer scores */
    double a[37], b[41];
    for (int i = 0; i < 37; i++) a[i] = (double)dpt_rng_below(&r, 8) + 1;
    for (int i = 0; i < 41; i++) b[i] = (double)dpt_rng_below(&r, 8);
    CHECK_CLOSE(dpt_audit_auc(a, 37, b, 41), auc_brute(a, 37, b, 41), 1e-14, 0);
    for (double f = 0; f <= 1.0; f += 0.1) CHECK_CLOSE(dpt_audit_tpr_at_fpr(a, 37, b, 41, f), tpr_brute(a, 37, b, 41, f), 1e-14, 0);
    double fpr[79], tpr[79];
    size_t n;
    CHECK_OK(dpt_audit_roc(a, 37, b, 41, fpr, tpr, &n));
    CHECK(n >= 2 && fpr[0] == 0 && tpr[0] == 0 && fpr[n - 1] == 1 && tpr[n - 1] == 1);
    double trap = 0;
    for (size_t i = 1; i < n; i++) trap += (fpr[i] - fpr[i - 1]) * 0.5 * (tpr[i] + tpr[i - 1]);
    CHECK_CLOSE(trap, dpt_audit_auc(a, 37, b, 41), 1e-12, 0); /* trapezoids = Mann-Whitney with ties */
    /* two Gaussians, shift d: AUC = Phi(d / sqrt 2), TPR at FPR f = 1 - Phi(Phi^-1(1 - f) - d) */
    enum { NG = 20000 };
    double *gi = malloc(NG * sizeof *gi), *go = malloc(NG * sizeof *go);
    const double d = 1.0;
    for (int i = 0; i < NG; i++) gi[i] = dpt_rng_gauss_ref(&r) + d, go[i] = dpt_rng_gauss_ref(&r);
    CHECK_CLOSE(dpt_audit_auc(gi, NG, go, NG), Phi(d / sqrt(2.0)), 0.01, 0);
    CHECK_CLOSE(dpt_audit_tpr_at_fpr(gi, NG, go, NG, 0.01), 1 - Phi(Phi_inv(0.99) - d), 0.015, 0);
    CHECK_CLOSE(dpt_audit_tpr_at_fpr(gi, NG, go, NG, 0.001), 1 - Phi(Phi_inv(0.999) - d), 0.01, 0);
    /* bootstrap coverage of the AUC interval (nominal 90%) over 60 experiments of 150 + 150 */
    int covered = 0, reps = 60;
    for (int rep = 0; rep < reps; rep++) {
        for (int i = 0; i < 150; i++) gi[i] = dpt_rng_gauss_ref(&r) + d, go[i] = dpt_rng_gauss_ref(&r);
        dpt_audit_summary s;
        CHECK_OK(dpt_audit_summarize(gi, 150, go, 150, 200, 0.1, 100 + (uint64_t)rep, &s));
        double truth = Phi(d / sqrt(2.0));
        covered += s.auc_lo <= truth && truth <= s.auc_hi;
        if (rep == 0) CHECK(s.auc_lo < s.auc && s.auc < s.auc_hi && s.tpr_lo[1] <= s.tpr[1] && s.tpr[1] <= s.tpr_hi[1]);
    }
    /* Binomial(60, 0.9): P[covered < 47] < 0.5%; a broken interval (e.g. too narrow x2) covers ~60% */
    CHECK(covered >= 47);
    free(gi);
    free(go);
    dpt_rng_free(&r);
}

static void test_lira_synthetic(void) {
    enum { S = 32, N = 400 };
    dpt_rng r;
    dpt_rng_init(&r, 21, DPT_STREAM_AUX);
    double *phi = malloc(S * N * sizeof *phi), mu[N], tgt[N], sc[N], in_s[N], out_s[N], raw_in[N], raw_out[N];
    uint8_t *mask = malloc(S * N);
    const double gap = 1.0, sd = 0.5;
    for (int i = 0; i < N; i++) mu[i] = 3.0 * dpt_rng_gauss_ref(&r); /* hard vs easy examples */
    for (int s = 0; s < S; s++)
        for (int i = 0; i < N; i++) {
            mask[s * N + i] = (uint8_t)dpt_rng_bernoulli(&r, 0.5);
            phi[s * N + i] = mu[i] + (mask[s * N + i] ? gap : 0) + sd * dpt_rng_gauss_ref(&r);
        }
    for (int i = 0; i < N; i++) tgt[i] = mu[i] + (i % 2 ? 0 : gap) + sd * dpt_rng_gauss_ref(&r); /* even = member */
    size_t ni = 0, no = 0;
    for (int online = 0; online < 2; online++) {
        CHECK_OK(dpt_audit_lira(phi, mask, S, N, tgt, online, sc));
        ni = no = 0;
        for (int i = 0; i < N; i++) {
            if (i % 2) out_s[no] = sc[i], raw_out[no++] = tgt[i];
            else in_s[ni] = sc[i], raw_in[ni++] = tgt[i];
        }
        double auc = dpt_audit_auc(in_s, ni, out_s, no);
        /* ideal: Phi(gap / (sd sqrt 2)) = 0.921; 200 + 200 examples: sd of the AUC ~0.015 */
        CHECK_CLOSE(auc, Phi(gap / (sd * sqrt(2.0))), 0.06, 0);
    }
    /* the global threshold on phi is near chance here */
    CHECK(dpt_audit_auc(raw_in, ni, raw_out, no) < 0.7);
    memset(mask, 1, S * N);
    CHECK_STATUS(dpt_audit_lira(phi, mask, S, N, tgt, 1, sc), DPT_EINVAL);
    free(phi);
    free(mask);
    dpt_rng_free(&r);
}

static void make_random_labels(dpt_dataset *d, size_t n, size_t dim, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->n = n, d->dim = dim, d->n_classes = 4;
    d->shape[0] = 1, d->shape[1] = 1, d->shape[2] = dim;
    d->x = dpt_alloc(n * dim, sizeof(float), "x");
    d->y = dpt_alloc(n, sizeof(int32_t), "y");
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t i = 0; i < n * dim; i++) d->x[i] = (float)dpt_rng_gauss_ref(&r);
    for (size_t i = 0; i < n; i++) d->y[i] = (int32_t)dpt_rng_below(&r, 4);
    dpt_rng_free(&r);
}

static void test_loss_attack_memorize(void) {
    dpt_dataset pop;
    make_random_labels(&pop, 120, 16, 4);
    uint8_t member[120];
    for (int i = 0; i < 120; i++) member[i] = (uint8_t)(i % 2 == 0);
    dpt_audit_job job;
    memset(&job, 0, sizeof job);
    job.cfg = dpt_train_config_defaults();
    job.cfg.model_spec = "mlp:16-128-4:relu";
    job.cfg.batch_size = 20;
    job.cfg.epochs = 150;
    job.cfg.optim.lr = 3e-3;
    job.cfg.threads = 1;
    job.algo = DPT_AUDIT_SGD;
    double loss[120], in[60], out[60];
    dpt_audit_run_info info;
    CHECK_OK(dpt_audit_train_and_score(&job, &pop, member, NULL, 3, loss, NULL, &info));
    CHECK(isnan(info.epsilon));
    for (int i = 0; i < 120; i++) (i % 2 ? out : in)[i / 2] = -loss[i];
    double auc = dpt_audit_auc(in, 60, out, 60);
    CHECK(auc > 0.95); /* random labels can only be fit by memorizing */
    /* untrained model: membership is invisible */
    dpt_model *m;
    dpt_rng r;
    CHECK_OK(dpt_model_new("mlp:16-128-4:relu", 32, 1, &m));
    dpt_rng_init(&r, 5, DPT_STREAM_INIT);
    CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &r));
    CHECK_OK(dpt_audit_scores(m, &pop, NULL, 120, loss, NULL));
    for (int i = 0; i < 120; i++) (i % 2 ? out : in)[i / 2] = -loss[i];
    auc = dpt_audit_auc(in, 60, out, 60);
    CHECK(auc > 0.35 && auc < 0.65); /* sd of the AUC under the null ~0.053 */
    dpt_rng_free(&r);
    dpt_model_free(m);
    dpt_dataset_free(&pop);
}

/* dpt_audit_scores refuses what the caller got wrong, before any forward pass (it asserted
 * the indices and labels, aborting the caller): a NULL model or dataset, an index beyond
 * the data, n beyond the data without idx, a label that is not one of the model's classes. */
static void test_scores_errors(void) {
    dpt_dataset d;
    make_random_labels(&d, 10, 8, 3);
    dpt_model *m;
    dpt_rng r;
    CHECK_OK(dpt_model_new("mlp:8-16-4:relu", 4, 1, &m));
    dpt_rng_init(&r, 5, DPT_STREAM_INIT);
    CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &r));
    double loss[11];
    uint32_t idx[3] = {1, 10, 2};
    CHECK_STATUS(dpt_audit_scores(NULL, &d, NULL, 10, loss, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_audit_scores: m is NULL");
    CHECK_STATUS(dpt_audit_scores(m, NULL, NULL, 10, loss, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_audit_scores: d is NULL");
    CHECK_STATUS(dpt_audit_scores(m, &d, idx, 3, loss, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_audit_scores: idx[1] = 10 is not an example of d (10 examples)");
    CHECK_STATUS(dpt_audit_scores(m, &d, NULL, 11, loss, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_audit_scores: n = 11 with idx NULL (d's first n examples), but d has 10");
    idx[1] = 3;
    const int32_t y2 = d.y[2];
    d.y[2] = 4;
    CHECK_STATUS(dpt_audit_scores(m, &d, idx, 3, loss, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_audit_scores: example 2 of d has label 4, not one of the model's 4 classes");
    d.y[2] = -1;
    CHECK_STATUS(dpt_audit_scores(m, &d, NULL, 10, loss, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("example 2 of d has label -1");
    d.y[2] = y2;
    CHECK_OK(dpt_audit_scores(m, &d, idx, 3, loss, NULL));
    CHECK(isfinite(loss[0]) && isfinite(loss[1]) && isfinite(loss[2]) && loss[2] > 0);
    dpt_rng_free(&r);
    dpt_model_free(m);
    dpt_dataset_free(&d);
}

/* ==== dpt_audit_run (the whole audit in the library) ==== */

typedef struct {
    size_t start, target, shadow, canary, last_shadow, last_canary;
} progress_count;

static void count_progress(void *user, const dpt_audit_progress *p) {
    progress_count *c = user;
    switch (p->stage) {
    case DPT_AUDIT_STAGE_START: c->start++; break;
    case DPT_AUDIT_STAGE_TARGET: c->target++; break;
    case DPT_AUDIT_STAGE_SHADOW: c->shadow++, c->last_shadow = p->done; break;
    case DPT_AUDIT_STAGE_CANARY: c->canary++, c->last_canary = p->done; break;
    }
}

static dpt_audit_config small_audit(void) {
    dpt_audit_config c = dpt_audit_config_defaults();
    c.job.cfg.model_spec = "mlp:8-32-4:relu";
    c.job.cfg.batch_size = 8;
    c.job.cfg.epochs = 15;
    c.job.cfg.optim.lr = 3e-3;
    c.job.cfg.threads = 1;
    c.shadows = 4;
    c.bootstrap = 20;
    c.seed = 11;
    return c;
}

static void test_audit_run(void) {
    dpt_dataset pop, test;
    make_random_labels(&pop, 64, 8, 21);
    make_random_labels(&test, 40, 8, 22);
    dpt_audit_config c = small_audit();
    c.canaries = 20;
    progress_count pc;
    memset(&pc, 0, sizeof pc);
    c.progress = count_progress;
    c.user = &pc;
    dpt_audit_result r1, r2;
    CHECK_OK(dpt_audit_run(&c, &pop, &test, &r1));
    CHECK(r1.population == 64 && r1.members == 32 && r1.shadows == 4 && r1.n_attacks == 3);
    CHECK(pc.start == 1 && pc.target == 1 && pc.shadow == 4 && pc.last_shadow == 4);
    CHECK(pc.canary == 1 && pc.last_canary == 1);
    CHECK(isnan(r1.epsilon) && isnan(r1.sample_rate)); /* sgd: no accountant */
    CHECK(r1.test_accuracy >= 0 && r1.test_accuracy <= 1);
    CHECK(r1.canaries == 20 && r1.canary_in + r1.canary_out == 20 && r1.canary_delta == 0);
    CHECK(r1.one_run_guesses == 4 && r1.one_run_correct <= 4 && isfinite(r1.one_run_eps_lb));
    for (size_t k = 0; k < r1.n_attacks; k++) {
        const dpt_audit_attack *a = &r1.attack[k];
        CHECK(a->n_in == 32 && a->n_out == 32);
        dpt_audit_summary s;
        CHECK_OK(dpt_audit_summarize(a->in, a->n_in, a->out, a->n_out, c.bootstrap, c.alpha, c.seed + 7, &s));
        CHECK(s.auc == a->s.auc && s.auc_lo == a->s.auc_lo && s.tpr_hi[1] == a->s.tpr_hi[1]);
    }
    CHECK(!strcmp(r1.attack[0].name, "loss") && !strcmp(r1.attack[2].name, "lira-online"));
    /* the shadows' results do not depend on how many are trained at once */
    c.jobs = 2;
    c.progress = NULL;
    CHECK_OK(dpt_audit_run(&c, &pop, &test, &r2));
    for (size_t k = 0; k < 3; k++)
        CHECK(!memcmp(r1.attack[k].in, r2.attack[k].in, 32 * sizeof(double)) &&
              !memcmp(r1.attack[k].out, r2.attack[k].out, 32 * sizeof(double)));
    CHECK(r1.canary_eps_lb == r2.canary_eps_lb);
    dpt_audit_result_free(&r2);
    dpt_audit_result_free(&r1);
    dpt_audit_result_free(&r1); /* freeing twice is harmless: it zeroes */

    /* DP-SGD: Poisson rate batch/members and the accountant's epsilon; parallel shadows
     * each run the accountant (PLD too, which must be safe from several threads) */
    c = small_audit();
    c.job.algo = DPT_AUDIT_DPSGD;
    c.job.cfg.epochs = 2;
    c.job.cfg.delta = 1e-3;
    c.jobs = 2;
    c.bootstrap = 0;
    CHECK_OK(dpt_audit_run(&c, &pop, &test, &r1));
    CHECK_CLOSE(r1.sample_rate, 8.0 / 32.0, 0, 1e-15);
    CHECK(r1.epsilon > 0 && isfinite(r1.epsilon));
    dpt_audit_result_free(&r1);

    /* a given target: members from pop, as many non-members from test, max_pairs of each */
    dpt_model *m;
    dpt_rng rr;
    CHECK_OK(dpt_model_new("mlp:8-32-4:relu", 32, 1, &m));
    dpt_rng_init(&rr, 5, DPT_STREAM_INIT);
    CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &rr));
    dpt_rng_free(&rr);
    c = small_audit();
    c.shadows = 0;
    c.target = m;
    c.max_pairs = 12;
    CHECK_OK(dpt_audit_run(&c, &pop, &test, &r1));
    CHECK(r1.population == 24 && r1.members == 12 && r1.n_attacks == 1 && r1.attack[0].n_in == 12);
    CHECK(isnan(r1.epsilon));
    dpt_audit_result_free(&r1);
    c.canaries = 10;
    CHECK_STATUS(dpt_audit_run(&c, &pop, &test, &r1), DPT_EINVAL);
    dpt_model_free(m);

    /* errors name the config field */
    c = small_audit();
    c.shadows = 1;
    CHECK_STATUS(dpt_audit_run(&c, &pop, &test, &r1), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "dpt_audit_config.shadows") != NULL);
    c = small_audit();
    c.canaries = 41;
    CHECK_STATUS(dpt_audit_run(&c, &pop, &test, &r1), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "dpt_audit_config.canaries") != NULL);
    c = small_audit();
    c.job.cfg.batch_size = 33;
    CHECK_STATUS(dpt_audit_run(&c, &pop, &test, &r1), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "dpt_train_config.batch_size") != NULL);
    c = small_audit();
    c.jobs = 0;
    CHECK_STATUS(dpt_audit_run(&c, &pop, &test, &r1), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "dpt_audit_config.jobs") != NULL);

    /* sizes whose product wraps (issue 18: S x N masks and scores) are refused, not
     * allocated short: 2^58 shadows x 64 examples = 2^64 */
    c = small_audit();
    c.shadows = (size_t)1 << 58;
    CHECK_STATUS(dpt_audit_run(&c, &pop, &test, &r1), DPT_ENOMEM);
    CHECK(strstr(dpt_last_error(), "overflow") != NULL);
    CHECK(r1.n_attacks == 0 && r1.attack[0].in == NULL);
    /* a canary is a test example given another class's label: data of one class have none
     * to give (it drew the label with dpt_rng_below(r, 0), which asserted and aborted) */
    for (size_t i = 0; i < pop.n; i++) pop.y[i] = 0;
    for (size_t i = 0; i < test.n; i++) test.y[i] = 0;
    pop.n_classes = test.n_classes = 1;
    c = small_audit();
    c.canaries = 10;
    CHECK_STATUS(dpt_audit_run(&c, &pop, &test, &r1), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_audit_config.canaries 10: a canary is mislabelled, and the data have 1 class");
    dpt_dataset_free(&pop);
    dpt_dataset_free(&test);
}

/* dpt_audit_summarize with a bootstrap count whose 3 x n_boot x 8 bytes wraps to 0 wrote
 * far past a tiny buffer (issue 18); it must refuse. */
static void test_summarize_overflow(void) {
    double in[4] = {1, 2, 3, 4}, out[4] = {0, 1, 2, 3};
    dpt_audit_summary s;
    CHECK_STATUS(dpt_audit_summarize(in, 4, out, 4, (size_t)1 << 61, 0.05, 1, &s), DPT_ENOMEM);
    CHECK(strstr(dpt_last_error(), "overflow") != NULL);
    CHECK_STATUS(dpt_audit_summarize(in, 4, out, 4, SIZE_MAX / 2, 0.05, 1, &s), DPT_ENOMEM);
    CHECK_STATUS(dpt_audit_lira(in, (const uint8_t *)"abcd", SIZE_MAX / 2, 4, in, 0, out), DPT_EINVAL);
}

/* A NaN score compares unequal to itself: the tie-grouping walks of AUC and TPR never
 * advanced past it and ROC wrote points past its n_in + n_out + 1 entries (issue 38, item
 * 10). Every score function must refuse it, naming the score. The alarm turns a
 * regression (a hang) into a failure. */
static void test_nan_scores(void) {
    alarm(20);
    double in[4] = {1, NAN, 3, 4}, out[3] = {0, 1, 2}, inf_in[2] = {INFINITY, 1}, inf_out[2] = {-INFINITY, 1};
    double fpr[8], tpr[8];
    size_t n = 99;
    dpt_clear_error();
    CHECK(isnan(dpt_audit_auc(in, 4, out, 3)));
    CHECK_ERR_HAS("auc: member score in[1] is NaN");
    dpt_clear_error();
    CHECK(isnan(dpt_audit_auc(out, 3, in, 4)));
    CHECK_ERR_HAS("auc: non-member score out[1] is NaN");
    dpt_clear_error();
    CHECK(isnan(dpt_audit_tpr_at_fpr(in, 4, out, 3, 0.5)));
    CHECK_ERR_HAS("tpr_at_fpr: member score in[1] is NaN");
    CHECK_STATUS(dpt_audit_roc(in, 4, out, 3, fpr, tpr, &n), DPT_EINVAL);
    CHECK_ERR_HAS("roc: member score in[1] is NaN");
    CHECK(n == 99);
    dpt_audit_summary s;
    CHECK_STATUS(dpt_audit_summarize(in, 4, out, 3, 10, 0.1, 1, &s), DPT_EINVAL);
    CHECK_ERR_HAS("member score in[1] is NaN");
    double eps = -1, thr = -1;
    CHECK_STATUS(dpt_audit_eps_from_scores(out, 3, in, 4, 1e-5, 0.05, &eps, &thr), DPT_EINVAL);
    CHECK_ERR_HAS("non-member score out[1] is NaN");
    uint8_t mem[4] = {1, 0, 1, 0};
    uint64_t r = 0, v = 0;
    CHECK_STATUS(dpt_audit_one_run_guess(in, mem, 4, 1, &r, &v), DPT_EINVAL);
    CHECK_ERR_HAS("score[1] is NaN");
    /* infinities are ordered: still accepted, with the usual answers */
    CHECK_CLOSE(dpt_audit_auc(inf_in, 2, inf_out, 2), 0.875, 0, 0);
    CHECK_OK(dpt_audit_roc(inf_in, 2, inf_out, 2, fpr, tpr, &n));
    CHECK(n == 4);
    alarm(0);
}

int main(void) {
    test_betainc();
    test_eps_bound();
    test_one_run();
    test_roc();
    test_lira_synthetic();
    test_loss_attack_memorize();
    test_scores_errors();
    test_summarize_overflow();
    test_nan_scores();
    test_audit_run();
    TEST_MAIN_END();
}
