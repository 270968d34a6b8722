/* train/dpsgd: the DP-SGD strategy on synthetic blobs made here. The ghost-norm +
 * weighted-GEMM path equals the materialized reference (flat and per-layer); the
 * pre-noise clipped sums of two neighbouring batches (one example removed, same Poisson
 * sampling of the rest) differ by exactly min(||g||, C) <= C; with gradients forced to
 * zero the released update is pure noise N(0, sigma^2 C^2) / qN; with |B| != qN the SGD
 * step is -lr (clipped sum + noise) / qN; empty Poisson batches
 * still add noise; and a DP run learns. */
#include <dptrain/accounting.h>
#include <dptrain/optim.h>
#include <dptrain/privacy.h>
#include <dptrain/train.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testdata.h"
#include "testalgo.h"
#include "testutil.h"
#include "train/train_internal.h"


static dpt_train_config dp_cfg(const char *spec, double q) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = q;
    c.epochs = 1;
    c.seed = 3;
    c.threads = 2;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.5;
    return c;
}

static dpt_trainer *make_trainer(const dpt_train_config *c, const dpt_dataset *tr, double sigma, double C,
                                 dpt_clip_mode mode, int reference, dpt_algo **algo) {
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = sigma, d.clip = C, d.clip_mode = mode, d.reference = reference, d.ref_chunk = 5;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    if (!a) return NULL;
    CHECK_OK(dpt_trainer_new(c, tr, NULL, a, &t));
    if (algo) *algo = a;
    return t;
}

/* ==== fast path == reference path ==== */
#define KEEP_DEFAULT ((size_t)-1)
/* keep: the budget of kept per-example conv gradients in floats per example of the model's
 * batch capacity (0 forces SQNORM + WEIGHTED for every layer; KEEP_DEFAULT leaves the
 * library's), with passes of the whole capacity (pass 0) or, pass > 0, a budget of keep *
 * pass floats and passes split down to `pass` examples */
static void set_keep(dpt_algo *a, dpt_trainer *t, size_t keep, size_t pass) {
    if (keep == KEEP_DEFAULT) return;
    const size_t cap = dpt_trainer_model(t)->max_batch;
    dpt_dpsgd_set_keep_budget(a, keep * (pass ? pass : cap), pass ? pass : cap);
}

static void test_fast_vs_reference_pass(const dpt_dataset *tr, dpt_clip_mode mode, double C, const char *spec,
                                        size_t keep, size_t pass) {
    dpt_train_config c = dp_cfg(spec, 0.1);
    dpt_algo *af, *ar;
    dpt_trainer *tf = make_trainer(&c, tr, 1.0, C, mode, 0, &af);
    dpt_trainer *tref = make_trainer(&c, tr, 1.0, C, mode, 1, &ar);
    if (!tf || !tref) return;
    set_keep(af, tf, keep, pass);
    size_t P = dpt_trainer_model(tf)->n_params, b = 57;
    float *gf = malloc(P * sizeof(float)), *gr = malloc(P * sizeof(float));
    tu_algo_grad(tf, af, tr->x, tr->y, b, 0, gf);
    /* the passes asked for are the ones run (whole chunks unless pass > 0) */
    const size_t cap = dpt_trainer_model(tf)->max_batch;
    if (keep != KEEP_DEFAULT && mode == DPT_CLIP_FLAT) CHECK(dpt_dpsgd_pass(af) == (pass ? pass : cap));
    tu_algo_grad(tref, ar, tr->x, tr->y, b, 0, gr);
    double nr = 0, nd = 0;
    for (size_t j = 0; j < P; j++) nr += (double)gr[j] * gr[j], nd += ((double)gf[j] - gr[j]) * ((double)gf[j] - gr[j]);
    CHECK(nr > 0);
    CHECK_CLOSE(sqrt(nd), 0.0, 2e-5 * sqrt(nr), 0); /* float tolerance relative to the sum's norm */
    for (size_t j = 0; j < P; j++) CHECK_CLOSE(gf[j], gr[j], 1e-5 * C * b, 1e-4);
    /* a few whole steps: same noise stream, same sampling -> same parameters */
    dpt_train_config c2 = c;
    c2.max_steps = 4;
    dpt_trainer_free(tf);
    dpt_trainer_free(tref);
    tf = make_trainer(&c2, tr, 1.0, C, mode, 0, &af);
    tref = make_trainer(&c2, tr, 1.0, C, mode, 1, NULL);
    set_keep(af, tf, keep, pass);
    CHECK_OK(dpt_trainer_run(tf, NULL));
    CHECK_OK(dpt_trainer_run(tref, NULL));
    const float *a = dpt_trainer_model(tf)->theta, *r = dpt_trainer_model(tref)->theta;
    for (size_t j = 0; j < P; j++) CHECK_CLOSE(a[j], r[j], 1e-5, 1e-4);
    free(gf);
    free(gr);
    dpt_trainer_free(tf);
    dpt_trainer_free(tref);
}

static void test_fast_vs_reference(const dpt_dataset *tr, dpt_clip_mode mode, double C, const char *spec,
                                   size_t keep) {
    test_fast_vs_reference_pass(tr, mode, C, spec, keep, 0);
}

/* The pass a chunk is split into: the shortest that keeps every keepable conv within the
 * budget, not below min_pass, and whole chunks when a shorter pass keeps no more layers
 * (conv1 27 and conv3 435 parameters per example) */
static void test_pass_choice(const dpt_dataset *tr, const char *spec) {
    const struct { size_t budget, min_pass, want; } cases[] = {
        {462 * 5, 1, 5},   /* both kept in passes of 5 */
        {462 * 5 + 461, 1, 5},
        {27 * 7, 7, 7},    /* conv1 alone, at the floor */
        {10 * 7, 7, 0},    /* nothing fits at the floor: whole chunks (0 = cap) */
        {0, 1, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dpt_train_config c = dp_cfg(spec, 0.1);
        dpt_algo *a;
        dpt_trainer *t = make_trainer(&c, tr, 1.0, 0.05, DPT_CLIP_FLAT, 0, &a);
        if (!t) return;
        const size_t cap = dpt_trainer_model(t)->max_batch, P = dpt_trainer_model(t)->n_params;
        dpt_dpsgd_set_keep_budget(a, cases[k].budget, cases[k].min_pass);
        float *g = malloc(P * sizeof(float));
        tu_algo_grad(t, a, tr->x, tr->y, 20, 0, g);
        CHECK(cap > 5 * 2);
        CHECK(dpt_dpsgd_pass(a) == (cases[k].want ? cases[k].want : cap));
        free(g);
        dpt_trainer_free(t);
    }
}

/* ==== sensitivity: neighbouring datasets ==== */
static void test_sensitivity(const dpt_dataset *tr, const char *spec, double C, int reference, dpt_clip_mode mode) {
    /* D = tr, D' = tr without its last example. The Poisson sampler decides example by
     * example, in order, from the data stream: with the same seed, D' samples exactly the
     * remaining examples of D's first batch. Find a seed whose first batch contains the
     * removed example. */
    size_t n = tr->n, removed = n - 1, b = 0, b2 = 0;
    uint32_t *idx = malloc(n * sizeof *idx), *idx2 = malloc(n * sizeof *idx2);
    int found = 0;
    for (uint64_t seed = 1; seed < 200 && !found; seed++) {
        dpt_sampler *sp, *sp2;
        CHECK_OK(dpt_sampler_new(DPT_SAMPLER_POISSON, n, 0, 0.1, 0, seed, &sp));
        CHECK_OK(dpt_sampler_new(DPT_SAMPLER_POISSON, n - 1, 0, 0.1, 0, seed, &sp2));
        CHECK_OK(dpt_sampler_next(sp, idx, &b));
        CHECK_OK(dpt_sampler_next(sp2, idx2, &b2));
        found = b > 0 && idx[b - 1] == removed;
        if (!found) CHECK(b2 == b && !memcmp(idx, idx2, b * sizeof *idx)); /* same sampling */
        dpt_sampler_free(sp);
        dpt_sampler_free(sp2);
    }
    CHECK(found);
    if (!found) return;
    CHECK(b2 == b - 1 && !memcmp(idx, idx2, b2 * sizeof *idx));
    float *x = malloc(b * 8 * sizeof(float));
    int32_t *y = malloc(b * sizeof(int32_t));
    dpt_dataset_gather(tr, idx, b, x, y);
    dpt_train_config c = dp_cfg(spec, 0.1);
    dpt_algo *a;
    dpt_trainer *t = make_trainer(&c, tr, 1.0, C, mode, reference, &a);
    size_t P = dpt_trainer_model(t)->n_params;
    float *s1 = malloc(P * sizeof(float)), *s2 = malloc(P * sizeof(float)), *g = malloc(P * sizeof(float));
    tu_algo_grad(t, a, x, y, b, 0, s1);
    tu_algo_grad(t, a, x, y, b - 1, 0, s2);
    tu_algo_grad(t, a, x + (b - 1) * 8, y + b - 1, 1, 0, g); /* the removed example alone, clipped */
    double d = 0, ng = 0;
    for (size_t j = 0; j < P; j++) d += ((double)s1[j] - s2[j]) * ((double)s1[j] - s2[j]), ng += (double)g[j] * g[j];
    d = sqrt(d), ng = sqrt(ng);
    CHECK(d <= C * (1 + 1e-5));
    CHECK_CLOSE(d, ng, 1e-5 * C * b, 1e-3);
    /* the removed example's own gradient is larger than C here, so the bound is tight */
    if (mode == DPT_CLIP_FLAT) CHECK_CLOSE(ng, C, 0, 1e-5);
    free(s1), free(s2), free(g), free(x), free(y), free(idx), free(idx2);
    dpt_trainer_free(t);
}

/* ==== noise with zero gradients ==== */
/* z: zero inputs and t's model without biases, so every per-example gradient is exactly 0
 * and the release is the noise alone. 25 releases of the first b examples; the update
 * divides the noisy sum by `divisor` (qN accounted, B shuffled), so grad * divisor is the
 * noise added to the sum: its mean must be 0 and its std sigma * C, each within 5 standard
 * errors (n = 25 P draws: se(mean) = sigma C / sqrt(n), se(std) ~ sigma C / sqrt(2n)).
 * `what` names the caller in a failure (the CHECKs print this helper's lines). */
static void check_noise_moments(const char *what, dpt_algo *a, dpt_trainer *t, const dpt_dataset *z, size_t b,
                                double divisor, double sigma, double C) {
    const int failed_before = tu_fail_;
    dpt_model *m = dpt_trainer_model(t);
    double s1 = 0, s2 = 0;
    size_t cnt = 0;
    for (int rep = 0; rep < 25; rep++) {
        double ls;
        CHECK_OK(a->begin(a, t, b));
        CHECK_OK(a->accumulate(a, t, z->x, z->y, b, &ls));
        for (size_t j = 0; j < m->n_params; j++) CHECK(m->grad[j] == 0.0f);
        CHECK_OK(a->finish(a, t, b));
        for (size_t j = 0; j < m->n_params; j++) {
            double v = m->grad[j] * divisor; /* the noise added to the sum */
            s1 += v, s2 += v * v;
        }
        cnt += m->n_params;
    }
    double mean = s1 / cnt, sd = sqrt(s2 / cnt - mean * mean), want = sigma * C;
    CHECK_CLOSE(mean, 0.0, 5 * want / sqrt((double)cnt), 0);
    CHECK_CLOSE(sd, want, 5 * want / sqrt(2.0 * cnt), 0);
    if (tu_fail_ != failed_before) fprintf(stderr, "  (the noise moments of %s)\n", what);
}

static void test_noise_only(void) {
    dpt_dataset z;
    tu_make_blobs(&z, 300, 4, 0.0f);
    dpt_train_config c = dp_cfg("mlp:8-1000:relu:nobias", 0.1);
    const double sigma = 1.7, C = 0.6, qN = 0.1 * 300;
    dpt_algo *a;
    dpt_trainer *t = make_trainer(&c, &z, sigma, C, DPT_CLIP_FLAT, 0, &a);
    if (t) check_noise_moments("test_noise_only", a, t, &z, 30, qN, sigma, C);
    dpt_trainer_free(t);
    dpt_dataset_free(&z);
}

/* ==== the update divides by the expected batch size qN, not |B| ==== */
/* Batches of |B| = 23 and 97 with qN = 60 (issue 38.8: the tests that used |B| = qN let a
 * division by |B| survive): three trainers on one seed draw the same noise z; the first
 * gives the clipped sum S, the third z alone (dpt_privacy_noise_add_scaled on zeros), and
 * the second's SGD step must move theta by exactly -lr (S + z) / qN. */
static void test_update_divides_by_qN(const dpt_dataset *tr) {
    const double q = 0.1, qN = q * (double)tr->n, sigma = 1.3, C = 0.7;
    const size_t sizes[2] = {23, 97};
    dpt_train_config c = dp_cfg("mlp:8-16-3:gelu", q);
    c.optim.momentum = 0;
    for (int k = 0; k < 2; k++) {
        const size_t b = sizes[k];
        CHECK((double)b != qN);
        dpt_algo *a1, *a2, *a3;
        dpt_trainer *t1 = make_trainer(&c, tr, sigma, C, DPT_CLIP_FLAT, 0, &a1);
        dpt_trainer *t2 = make_trainer(&c, tr, sigma, C, DPT_CLIP_FLAT, 0, &a2);
        dpt_trainer *t3 = make_trainer(&c, tr, sigma, C, DPT_CLIP_FLAT, 0, &a3);
        if (!t1 || !t2 || !t3) return;
        dpt_model *m2 = dpt_trainer_model(t2);
        const size_t P = m2->n_params;
        float *S = malloc(P * sizeof *S), *G = malloc(P * sizeof *G), *z = calloc(P, sizeof *z);
        float *theta0 = malloc(P * sizeof *theta0);
        memcpy(theta0, m2->theta, P * sizeof *theta0);
        tu_algo_grad(t1, a1, tr->x, tr->y, b, 0, S); /* the clipped sum, before noise */
        tu_algo_grad(t2, a2, tr->x, tr->y, b, 1, G); /* the released gradient */
        CHECK_OK(dpt_privacy_noise_add_scaled(dpt_trainer_noise_rng(t3), z, P, sigma, C, 1.0, t3->threads));
        CHECK_OK(dpt_optim_step(&t2->opt, m2->theta, m2->grad, c.optim.lr));
        double worst = 0, zz = 0;
        for (size_t j = 0; j < P; j++) {
            const double want = ((double)S[j] + z[j]) / qN; /* float rounding of S, z, G and theta */
            const double tol = 2e-7 * (fabs(S[j]) + fabs(z[j])) / qN + 1e-12;
            worst = fmax(worst, fabs(G[j] - want) / tol);
            const double step = (double)m2->theta[j] - theta0[j], want_step = -c.optim.lr * want;
            worst = fmax(worst, fabs(step - want_step) / (c.optim.lr * tol + 2e-7 * fabs(theta0[j])));
            zz += (double)z[j] * z[j];
        }
        CHECK(worst <= 1.0);
        if (!(worst <= 1.0)) fprintf(stderr, "|B| = %zu: update off by %g tolerances from -lr (S + z) / qN\n", b, worst);
        CHECK_CLOSE(sqrt(zz / (double)P), sigma * C, 0, 0.3); /* the noise is there */
        free(S), free(G), free(z), free(theta0);
        dpt_trainer_free(t1), dpt_trainer_free(t2), dpt_trainer_free(t3);
    }
}

/* ==== empty Poisson batches, and learning ==== */
static void test_empty_batches_and_learning(const dpt_dataset *tr, const dpt_dataset *te) {
    dpt_train_config c = dp_cfg("mlp:8-16-3:gelu", 0.001); /* qN = 0.6: most batches empty */
    c.max_steps = 40;
    dpt_trainer *t = make_trainer(&c, tr, 1.0, 1.0, DPT_CLIP_FLAT, 0, NULL);
    dpt_model *m = dpt_trainer_model(t);
    float *th0 = malloc(m->n_params * sizeof(float));
    memcpy(th0, m->theta, m->n_params * sizeof(float));
    CHECK_OK(dpt_trainer_run(t, NULL));
    CHECK(dpt_trainer_step(t) == 40);
    size_t changed = 0;
    for (size_t j = 0; j < m->n_params; j++) changed += m->theta[j] != th0[j];
    CHECK(changed == m->n_params); /* every step released noise, empty batches included */
    CHECK(dpt_all_finite(m->theta, m->n_params));
    free(th0);
    dpt_trainer_free(t);

    c = dp_cfg("mlp:8-16-3:gelu", 0.05);
    c.epochs = 4;
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.optim.lr = 0.02;
    t = make_trainer(&c, tr, 0.8, 1.0, DPT_CLIP_FLAT, 0, NULL);
    dpt_epoch_result r;
    CHECK_OK(dpt_trainer_run(t, &r));
    CHECK(r.test_accuracy != r.test_accuracy || 1); /* no test set given to the trainer */
    double loss, acc;
    CHECK_OK(dpt_evaluate(dpt_trainer_model(t), c.loss, te, &loss, &acc));
    CHECK(acc > 0.85);
    if (!(acc > 0.85)) fprintf(stderr, "dpsgd accuracy %g\n", acc);
    dpt_trainer_free(t);
}

/* ==== ledger: continues across resume, refuses mismatches, budget, calibration ==== */
static uint64_t sidecar_steps(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/ledger.json", dir);
    dpt_ledger *l = NULL;
    if (dpt_ledger_load(p, &l) != DPT_OK) return 0;
    uint64_t n = dpt_ledger_steps(l);
    dpt_ledger_free(l);
    return n;
}

/* epsilon of T steps of SGM(q, sigma) under the default (headline) accountant, the one a run
 * reports, calibrates with and stops its budget at (accounting.h) */
static double def_eps(double q, double sigma, uint64_t T) {
    dpt_ledger *l = NULL;
    double e = NAN;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, q, sigma, T));
    CHECK_OK(dpt_ledger_epsilon(l, 1e-5, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &e));
    dpt_ledger_free(l);
    return e;
}

static dpt_status run_dp(const dpt_train_config *c, const dpt_dataset *tr, double sigma, int resume,
                         uint64_t *steps, uint64_t *ledger_steps, double *eps, char *meta, size_t meta_n) {
    dpt_algo *a;
    dpt_trainer *t = NULL;
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = sigma;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    dpt_status s = dpt_trainer_new(c, tr, NULL, a, &t);
    if (s == DPT_OK && resume) s = dpt_trainer_resume(t);
    if (s == DPT_OK) s = dpt_trainer_run(t, NULL);
    if (s == DPT_OK) {
        const dpt_ledger *l = dpt_trainer_ledger(t);
        if (steps) *steps = dpt_trainer_step(t);
        if (ledger_steps) *ledger_steps = dpt_ledger_steps(l);
        if (eps) CHECK_OK(dpt_ledger_epsilon(l, c->delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, eps));
        if (meta) {
            char key[64];
            snprintf(key, sizeof key, "mismatch_allowed_at_step_%d", 20);
            const char *v = dpt_ledger_get_meta(l, key);
            snprintf(meta, meta_n, "%s", v ? v : "");
        }
    }
    dpt_trainer_free(t);
    return s;
}

static void test_ledger(const dpt_dataset *tr) {
    const char *dir = tu_tmpdir();
    dpt_train_config c = dp_cfg("mlp:8-16-3:gelu", 0.05); /* 20 steps per epoch */
    c.out_dir = dir;
    c.epochs = 1;
    uint64_t st = 0, ls = 0;
    CHECK_OK(run_dp(&c, tr, 1.1, 0, &st, &ls, NULL, NULL, 0));
    CHECK(st == 20 && ls == 20 && sidecar_steps(dir) == 20);
    /* resume for a second epoch: the ledger continues (40), it never restarts (20) */
    c.epochs = 2;
    double eps2 = 0, direct = 0;
    CHECK_OK(run_dp(&c, tr, 1.1, 1, &st, &ls, &eps2, NULL, 0));
    CHECK(st == 40 && ls == 40 && sidecar_steps(dir) == 40);
    direct = def_eps(0.05, 1.1, 40);
    CHECK_CLOSE(eps2, direct, 0, 1e-12);
    /* different sigma / q / data: refused */
    c.epochs = 3;
    CHECK_STATUS(run_dp(&c, tr, 1.3, 1, NULL, NULL, NULL, NULL, 0), DPT_EMISMATCH);
    CHECK_ERR_HAS("sigma was");
    CHECK_ERR_HAS("allow_ledger_mismatch");
    dpt_train_config c2 = c;
    c2.sample_rate = 0.1;
    CHECK_STATUS(run_dp(&c2, tr, 1.1, 1, NULL, NULL, NULL, NULL, 0), DPT_EMISMATCH);
    dpt_dataset other;
    tu_make_blobs(&other, 600, 9, 1.0f);
    CHECK_STATUS(run_dp(&c, &other, 1.1, 1, NULL, NULL, NULL, NULL, 0), DPT_EMISMATCH);
    dpt_dataset_free(&other);
    CHECK(sidecar_steps(dir) == 40); /* refused resumes spent nothing */
    /* allowed: continues and the ledger metadata records the change */
    c.allow_ledger_mismatch = 1;
    c.epochs = 3;
    c.max_steps = 45;
    CHECK_OK(run_dp(&c, tr, 1.3, 1, &st, &ls, NULL, NULL, 0));
    CHECK(ls == 45 && st == 45);
    if (!(ls == 45 && st == 45)) fprintf(stderr, "allowed resume: steps %llu ledger %llu\n", (unsigned long long)st, (unsigned long long)ls);
}

static void test_ledger_meta(const dpt_dataset *tr) {
    const char *dir = tu_tmpdir();
    dpt_train_config c = dp_cfg("mlp:8-16-3:gelu", 0.05);
    c.out_dir = dir;
    c.overwrite = 1; /* the directory holds test_resume_ledger's run */
    c.epochs = 1;
    CHECK_OK(run_dp(&c, tr, 1.1, 0, NULL, NULL, NULL, NULL, 0));
    c.epochs = 2;
    c.allow_ledger_mismatch = 1;
    char meta[512] = "";
    uint64_t ls = 0;
    CHECK_OK(run_dp(&c, tr, 0.9, 1, NULL, &ls, NULL, meta, sizeof meta));
    CHECK(ls == 40);
    CHECK(strstr(meta, "sigma was") != NULL);
    if (!strstr(meta, "sigma was")) fprintf(stderr, "ledger meta: '%s'\n", meta);
}

/* --secure wiring in the trainer: the batch sampler is OS-seeded too (a logged seed would
 * make the batches predictable), and the ledger carries the lattice mechanism's effective
 * multiplier, not the nominal sigma; a run with mismatched secure flags is refused. */
static void test_secure_wiring(const dpt_dataset *tr) {
    dpt_train_config c = dp_cfg("mlp:8-16-3:gelu", 0.05);
    c.secure = 1;
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.3, d.clip = 1.0, d.secure = 1;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
    if (t) {
        dpt_sampler_state st;
        dpt_sampler_get_state(t->sampler, &st);
        CHECK(st.rng.secure == 1);
        CHECK(t->rng_noise.secure == 1);
        double eff = dpt_privacy_secure_sigma_eff(1.3, t->model->n_params);
        CHECK(eff < 1.3 && t->algo->sigma == eff);
        dpt_epoch_result r;
        c.max_steps = 3;
        t->cfg.max_steps = 3;
        CHECK_OK(dpt_trainer_run(t, &r));
        /* the default secure sampler is the table: its steps are sgm_dgauss events with its
         * verified distance on the model's coordinates, and the epsilon is that ledger's */
        double e = 0, e_ref = 0, mu = 0, tv = 0;
        CHECK_OK(dpt_ledger_epsilon(dpt_trainer_ledger(t), 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e));
        CHECK_OK(dpt_privacy_secure_distance(DPT_DGAUSS_TABLE, &mu, &tv));
        dpt_ledger *l = NULL;
        CHECK_OK(dpt_ledger_new(&l));
        CHECK_OK(dpt_ledger_add_sgm_dgauss(l, 0.05, eff, t->model->n_params, mu, tv, 3));
        CHECK_OK(dpt_ledger_epsilon(l, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_ref));
        CHECK(e == e_ref);
        char *js = NULL;
        CHECK_OK(dpt_ledger_to_json(dpt_trainer_ledger(t), &js));
        CHECK(js && strstr(js, "\"sgm_dgauss\"") && !strstr(js, "\"sgm\""));
        free(js);
        dpt_ledger_free(l);
        /* ... and above the exact mechanism's by a negligible amount */
        CHECK_OK(dpt_rdp_sgm_epsilon(0.05, eff, 3, 1e-5, DPT_CONV_BALLE, NULL, 0, &e_ref, NULL));
        CHECK(e > e_ref && e < e_ref * (1 + 1e-9));
    }
    dpt_trainer_free(t);
    /* the exact CKS sampler: plain SGM events */
    d.secure_sampler = DPT_DGAUSS_CKS;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    t = NULL;
    CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
    if (t) {
        dpt_epoch_result r;
        t->cfg.max_steps = 2;
        CHECK_OK(dpt_trainer_run(t, &r));
        double e = 0, e_ref = 0, eff = dpt_privacy_secure_sigma_eff(1.3, t->model->n_params);
        CHECK_OK(dpt_ledger_epsilon(dpt_trainer_ledger(t), 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e));
        CHECK_OK(dpt_rdp_sgm_epsilon(0.05, eff, 2, 1e-5, DPT_CONV_BALLE, NULL, 0, &e_ref, NULL));
        CHECK_CLOSE(e, e_ref, 0, 1e-12);
    }
    dpt_trainer_free(t);
    d.secure_sampler = (dpt_dgauss_method)5;
    CHECK_STATUS(dpt_algo_dpsgd_new(&d, &a), DPT_EINVAL);
    CHECK_ERR_HAS("secure_sampler");
    d.secure_sampler = DPT_DGAUSS_TABLE;
    /* the batches come from the OS-seeded stream: two secure trainers with the same seed
     * draw different batches, two reproducible ones the same */
    for (int secure = 0; secure < 2; secure++) {
        dpt_train_config cc = dp_cfg("mlp:8-16-3:gelu", 0.3);
        cc.secure = secure;
        d.secure = secure;
        dpt_trainer *t1 = NULL, *t2 = NULL;
        dpt_algo *a1 = NULL, *a2 = NULL;
        CHECK_OK(dpt_algo_dpsgd_new(&d, &a1));
        CHECK_OK(dpt_algo_dpsgd_new(&d, &a2));
        CHECK_OK(dpt_trainer_new(&cc, tr, NULL, a1, &t1));
        CHECK_OK(dpt_trainer_new(&cc, tr, NULL, a2, &t2));
        if (t1 && t2) {
            static uint32_t i1[4096], i2[4096];
            size_t b1 = 0, b2 = 0;
            int same = 1;
            for (int k = 0; k < 3; k++) {
                CHECK_OK(dpt_sampler_next(t1->sampler, i1, &b1));
                CHECK_OK(dpt_sampler_next(t2->sampler, i2, &b2));
                same &= b1 == b2 && !memcmp(i1, i2, b1 * sizeof *i1);
            }
            CHECK(same == !secure);
        }
        dpt_trainer_free(t1);
        dpt_trainer_free(t2);
    }
    d.secure = 1;
    d.secure = 0; /* the algorithm and the run disagree: refused */
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    t = NULL;
    CHECK_STATUS(dpt_trainer_new(&c, tr, NULL, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("secure");
    dpt_trainer_free(t);
}

static void test_budget(const dpt_dataset *tr) {
    /* sigma given with a target: stops BEFORE the step that would exceed it */
    dpt_train_config c = dp_cfg("mlp:8-16-3:gelu", 0.05);
    c.epochs = 10;
    double target = 0, eps = 0, next = 0;
    target = def_eps(0.05, 1.5, 100); /* the budget's accountant: the default one */
    c.target_epsilon = target * (1 + 1e-9); /* exactly 100 steps fit */
    uint64_t st = 0, ls = 0;
    CHECK_OK(run_dp(&c, tr, 1.5, 0, &st, &ls, &eps, NULL, 0));
    CHECK(st == 100 && ls == 100);
    if (!(st == 100 && ls == 100)) fprintf(stderr, "budget: steps %llu ledger %llu eps %g\n", (unsigned long long)st, (unsigned long long)ls, eps);
    CHECK(eps <= c.target_epsilon);
    next = def_eps(0.05, 1.5, st + 1);
    CHECK(next > c.target_epsilon);
    /* and the run reports that accountant's epsilon, PLD here, below RDP's */
    double e_rdp = 0;
    CHECK_OK(dpt_rdp_sgm_epsilon(0.05, 1.5, st, 1e-5, DPT_CONV_BALLE, NULL, 0, &e_rdp, NULL));
    CHECK(eps < e_rdp);
    /* calibration as the CLI and Python plan it: the run's steps (dpt_sampler_steps_for_epochs,
     * 10 x round(1/q)) and dpt_train_calibrate_sigma (dpt_calibrate_sigma under the default
     * accountant, tol 1e-4 without a prior); eps <= target, and the whole run fits in the
     * budget (the calibration and the budget use one accountant) */
    double sigma = 0, plain = 0;
    uint64_t steps = 0;
    CHECK_OK(dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, tr->n, 0, 0.05, c.epochs, &steps));
    CHECK(steps == 10 * 20);
    CHECK_OK(dpt_train_calibrate_sigma(NULL, 0.05, steps, 1e-5, 2.0, &sigma));
    CHECK_OK(dpt_calibrate_sigma(0.05, steps, 1e-5, 2.0, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, 1e-4, &plain));
    CHECK(sigma == plain);
    c.target_epsilon = 2.0;
    CHECK_OK(run_dp(&c, tr, sigma, 0, &st, &ls, &eps, NULL, 0));
    CHECK(st == steps && ls == steps);
    CHECK(eps <= 2.0 && eps > 1.99);
    /* on top of a release before training: the ledger search with the same settings */
    dpt_ledger *prior = NULL;
    double with_prior = 0, want = 0;
    CHECK_OK(dpt_ledger_new(&prior));
    CHECK_OK(dpt_ledger_add_gaussian(prior, 1.0, 4.0, "dp-normalize"));
    CHECK_OK(dpt_train_calibrate_sigma(prior, 0.05, steps, 1e-5, 2.0, &with_prior));
    CHECK_OK(dpt_ledger_calibrate_sgm(prior, 0.05, steps, 1e-5, 2.0, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, 1e-4, &want));
    CHECK(with_prior == want && with_prior > sigma);
    CHECK_OK(dpt_ledger_add_gaussian(prior, 1.0, 0.3, "large")); /* alone above the target */
    CHECK_STATUS(dpt_train_calibrate_sigma(prior, 0.05, steps, 1e-5, 2.0, &with_prior), DPT_ERANGE);
    CHECK_ERR_HAS("already in the ledger");
    dpt_ledger_free(prior);
}

/* Releases before training under a budget (issue 38.5): a DP normalization release that
 * alone spends 4.377 (the default accountant, PLD; 4.729 under RDP) > target 3 (noise multiplier 1, delta 1e-5) is refused when recorded,
 * leaving the ledger as it was; one within the target whose run cannot afford its first
 * step writes nothing into out_dir (no checkpoint with the statistics, no ledger, no
 * metrics), and out_dir, which the trainer created, is gone. */
static void test_budget_before_training(const dpt_dataset *tr) {
    char dir[320], p[400];
    snprintf(dir, sizeof dir, "%s/prerelease", tu_tmpdir());
    dpt_train_config c = dp_cfg("mlp:8-16-3:gelu", 0.05);
    c.target_epsilon = 3.0;
    c.out_dir = dir;
    dpt_trainer *t = make_trainer(&c, tr, 1.0, 1.0, DPT_CLIP_FLAT, 0, NULL);
    if (!t) return;
    CHECK_STATUS(dpt_trainer_add_gaussian_release(t, 1.0, 1.0, "dp-normalize"), DPT_ERANGE);
    CHECK_ERR_HAS("spend epsilon 4.377");
    CHECK(dpt_ledger_n_events(dpt_trainer_ledger(t)) == 0);
    dpt_trainer_free(t);
    CHECK(access(dir, F_OK) != 0); /* nothing was written */
    /* within the target alone (2.7), but the first step at sigma 0.3 would exceed it */
    t = make_trainer(&c, tr, 0.3, 1.0, DPT_CLIP_FLAT, 0, NULL);
    if (!t) return;
    CHECK_OK(dpt_trainer_add_gaussian_release(t, 1.0, 1.6, "dp-normalize"));
    dpt_epoch_result r;
    CHECK_OK(dpt_trainer_run(t, &r));
    CHECK(dpt_trainer_step(t) == 0 && dpt_trainer_stop_reason(t) == DPT_STOP_BUDGET && r.epoch == 0);
    const char *files[] = {"checkpoint.safetensors", "ledger.json", "metrics.jsonl", DPT_RUN_KEY_FILE};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        CHECK(access(p, F_OK) != 0);
        if (access(p, F_OK) == 0) fprintf(stderr, "a run that took no step wrote %s\n", p);
    }
    dpt_trainer_free(t);
    CHECK(access(dir, F_OK) != 0);
}

static void test_bad_config(void) {
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    dpt_algo *a;
    d.clip = 0;
    CHECK_STATUS(dpt_algo_dpsgd_new(&d, &a), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dpsgd_config.clip: the clipping norm C must be > 0, got 0");
    d.clip = 1, d.sigma = -1;
    CHECK_STATUS(dpt_algo_dpsgd_new(&d, &a), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dpsgd_config.sigma: the noise multiplier must be > 0, got -1");
    d.sigma = 0; /* no noise: no finite epsilon, refused up front */
    CHECK_STATUS(dpt_algo_dpsgd_new(&d, &a), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dpsgd_config.sigma");
    CHECK_STATUS(dpt_algo_dpsgd_new(&d, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_algo_dpsgd_new: out is NULL");
    CHECK_STATUS(dpt_algo_dpsgd_new(NULL, &a), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_algo_dpsgd_new: cfg is NULL");
}

/* Refused when the trainer is made: a sampler the accountant does not cover. A diverged
 * model (NaN / inf per-example gradients) is DPT_ERANGE naming the cause, flat and
 * per-layer, fast path and reference mode alike (the reference clips materialized rows
 * with dpt_privacy_clip_rows_ref, not the clip factors), as for the non-private optimizer;
 * per-layer clipping names the layer as the model does: fc1, or with fc1 of 8-16-16-3
 * frozen fc2 (the first trained layer, parameter layer 0 of the clipping; with fc1 of
 * 8-16-3 frozen, fc2's gradient (p - y) h stays finite whatever lr). One example whose features
 * overflow the forward pass (3e38, finite) in a batch of all 12 (q = 1, in order) is named
 * by its index: 7 on the fast path; on the reference path, which clips chunks of 5, row 2
 * of the chunk from example 5. */
static void test_trainer_refusals(const dpt_dataset *tr) {
    dpt_train_config c = dp_cfg("mlp:8-16-3:gelu", 0.1);
    c.sampler = DPT_SAMPLER_SHUFFLE;
    c.batch_size = 20;
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1, d.clip = 1;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_STATUS(dpt_trainer_new(&c, tr, NULL, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("dpsgd needs dpt_train_config.sampler = DPT_SAMPLER_POISSON, not DPT_SAMPLER_SHUFFLE");
    CHECK(t == NULL);
    for (int mode = 0; mode < 2; mode++)
        for (int reference = 0; reference < 2; reference++)
            for (int frozen = 0; frozen < 1 + mode; frozen++) {
                c = dp_cfg(frozen ? "mlp:8-16-16-3:gelu" : "mlp:8-16-3:gelu", 0.1);
                c.optim.lr = 1e30;
                c.max_steps = 10;
                c.freeze = frozen ? "fc1" : NULL;
                t = make_trainer(&c, tr, 1.0, 1.0, mode ? DPT_CLIP_PER_LAYER : DPT_CLIP_FLAT, reference, NULL);
                if (!t) return;
                CHECK_STATUS(dpt_trainer_run(t, NULL), DPT_ERANGE);
                CHECK_ERR_HAS("the model diverged; lower the learning rate");
                CHECK_ERR_HAS(reference ? "dpsgd (reference): " : "dpsgd: ");
                if (mode) CHECK_ERR_HAS(frozen ? ": layer fc2: clip factors: " : ": layer fc1: clip factors: ");
                else CHECK(!strstr(dpt_last_error(), "layer"));
                dpt_trainer_free(t);
            }
    dpt_dataset one;
    tu_make_blobs(&one, 12, 4, 1.0f);
    for (size_t j = 0; j < one.dim; j++) one.x[7 * one.dim + j] = 3e38f;
    for (int mode = 0; mode < 2; mode++)
        for (int reference = 0; reference < 2; reference++) {
            c = dp_cfg("mlp:8-16-3:gelu", 1.0);
            c.max_steps = 1;
            t = make_trainer(&c, &one, 1.0, 1.0, mode ? DPT_CLIP_PER_LAYER : DPT_CLIP_FLAT, reference, NULL);
            if (!t) break;
            CHECK_STATUS(dpt_trainer_run(t, NULL), DPT_ERANGE);
            CHECK_ERR_HAS(reference ? "dpsgd (reference): " : "dpsgd: ");
            if (mode) CHECK_ERR_HAS("layer fc1: clip factors: ");
            /* example 7 diverged: the message says neither its place in the batch nor its value */
            CHECK_ERR_HAS("a per-example gradient's squared norm is not finite: the model diverged");
            CHECK(!strstr(dpt_last_error(), "7") && !strstr(dpt_last_error(), "inf") &&
                  !strstr(dpt_last_error(), "nan"));
            dpt_trainer_free(t);
        }
    dpt_dataset_free(&one);
}

/* ==== the non-accounted mode: shuffled fixed-size batches (the paper-reproduction mode) ==== */
/* on_step of the non-accounted run: counts the steps that carried a loss or a batch size */
static int count_step_stats(void *user, const dpt_step_info *in) {
    int *shown = user;
    if (!isnan(in->loss) || in->batch) (*shown)++;
    return 0;
}

/* dpt_dpsgd_config.unaccounted: only with DPT_SAMPLER_SHUFFLE, never with secure noise or
 * adaptive clipping; no ledger, is_private 0, a privacy note; the released update of a
 * zero-gradient batch of B = 30 is N(0, sigma^2 C^2) / B (divided by B, as the accounted
 * mode divides by qN); and a short run trains without a ledger. */
static void test_unaccounted_shuffle(const dpt_dataset *tr) {
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.7, d.clip = 0.6, d.unaccounted = 1;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    d.secure = 1;
    CHECK_STATUS(dpt_algo_dpsgd_new(&d, &a), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dpsgd_config.unaccounted");
    d.secure = 0, d.adaptive_quantile = 0.5;
    CHECK_STATUS(dpt_algo_dpsgd_new(&d, &a), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dpsgd_config.unaccounted");
    d.adaptive_quantile = 0;
    dpt_train_config c = dp_cfg("mlp:8-16-3:gelu", 0.1); /* Poisson: refused */
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_STATUS(dpt_trainer_new(&c, tr, NULL, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("the non-accounted mode is for shuffled fixed-size batches");
    CHECK(t == NULL);

    dpt_dataset z; /* zero inputs and no biases: every per-example gradient is exactly 0 */
    tu_make_blobs(&z, 300, 4, 0.0f);
    c = dp_cfg("mlp:8-1000:relu:nobias", 0);
    c.sampler = DPT_SAMPLER_SHUFFLE;
    c.batch_size = 30;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(&c, &z, NULL, a, &t));
    if (!t) return;
    CHECK(dpt_trainer_ledger(t) == NULL);
    CHECK(!a->is_private && a->record == NULL && a->add_events == NULL);
    CHECK(!strcmp(a->name, "dpsgd-unaccounted"));
    CHECK(a->privacy_note && strstr(a->privacy_note, "non-accounted"));
    check_noise_moments("test_unaccounted_shuffle", a, t, &z, c.batch_size, (double)c.batch_size, d.sigma, d.clip);
    dpt_trainer_free(t);
    dpt_dataset_free(&z);

    /* still clipped and noised (a DP mechanism, dp_mechanism 1): like accounted DP-SGD it
     * publishes no noiseless statistic of its batches, no train_loss and no step loss or
     * batch size (the progress bars), though no accountant covers it */
    c = dp_cfg("mlp:8-16-3:gelu", 0);
    c.sampler = DPT_SAMPLER_SHUFFLE;
    c.batch_size = 50;
    c.max_steps = 15;
    int shown = 0;
    c.on_step = count_step_stats;
    c.user = &shown;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK(a && a->dp_mechanism);
    CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
    if (!t) return;
    dpt_epoch_result r;
    CHECK_OK(dpt_trainer_run(t, &r));
    CHECK(dpt_trainer_ledger(t) == NULL);
    if (!isnan(r.train_loss) || shown)
        fprintf(stderr, "FAIL test_unaccounted_shuffle: train_loss %g (want NaN), %d of 15 steps carried a loss or "
                        "batch size (want 0)\n", r.train_loss, shown);
    CHECK(isnan(r.train_loss) && shown == 0);
    dpt_trainer_free(t);
}

int main(void) {
    dpt_dataset tr, te;
    tu_make_blobs(&tr, 600, 1, 1.0f);
    tu_make_blobs(&te, 300, 2, 1.0f);
    test_fast_vs_reference(&tr, DPT_CLIP_FLAT, 0.05, "mlp:8-16-16-3:gelu", KEEP_DEFAULT);
    test_fast_vs_reference(&tr, DPT_CLIP_FLAT, 5.0, "mlp:8-16-16-3:gelu", KEEP_DEFAULT);
    test_fast_vs_reference(&tr, DPT_CLIP_PER_LAYER, 0.2, "mlp:8-16-16-3:gelu", KEEP_DEFAULT);
    /* a CNN on the 8 features seen as 2x2x2: materialized convs (conv1: T (C k^2 + O) = 99 >
     * O C k^2 = 24; conv3: 1323 > 432), a ghost conv (conv2: 387 < 432), GroupNorm, a
     * residual group. Flat clipping keeps the per-example gradients of the convs with O <= T
     * (conv1, O = 3 <= T = 9, and conv3, O = 3 <= 9; not conv2, O = 16 > 9), or with a budget
     * of 27 floats per example only conv1's 27 parameters (conv3 has 435), or, with no
     * budget, takes SQNORM + WEIGHTED for every layer: each equals the reference. */
    const char *cnn = "cnn:2x2x2:conv3k2p1,relu,[conv16k3p1,gn2,relu,conv3k3p1],relu,maxpool2s1,fc3";
    test_fast_vs_reference(&tr, DPT_CLIP_FLAT, 0.05, cnn, KEEP_DEFAULT);
    test_fast_vs_reference(&tr, DPT_CLIP_FLAT, 0.05, cnn, 27);
    test_fast_vs_reference(&tr, DPT_CLIP_FLAT, 0.05, cnn, 0);
    test_fast_vs_reference(&tr, DPT_CLIP_PER_LAYER, 0.2, cnn, KEEP_DEFAULT);
    /* a chunk split into passes so that the kept rows fit: 462 floats per example (conv1 27
     * + conv3 435) over passes of 5 keeps both (57 examples: 12 passes, the last of 2); 27
     * floats per example with passes of at least 7 keeps conv1 alone */
    test_fast_vs_reference_pass(&tr, DPT_CLIP_FLAT, 0.05, cnn, 462, 5);
    test_fast_vs_reference_pass(&tr, DPT_CLIP_FLAT, 0.05, cnn, 27, 7);
    test_pass_choice(&tr, cnn);
    test_sensitivity(&tr, "mlp:8-16-3:tanh", 0.05, 1, DPT_CLIP_FLAT);
    test_sensitivity(&tr, "mlp:8-16-3:tanh", 0.05, 0, DPT_CLIP_FLAT);
    test_sensitivity(&tr, "mlp:8-16-3:tanh", 0.3, 0, DPT_CLIP_PER_LAYER);
    test_sensitivity(&tr, cnn, 0.05, 0, DPT_CLIP_FLAT); /* kept conv gradients */
    /* a conv with T = 81 >= 32 positions (padding 7 around 2x2): its per-example gradients
     * come from the unpacked product (dpt_small_gemm), kept (O = 2 <= 81) or not */
    const char *wide = "cnn:2x2x2:conv2k8p7,relu,maxpool2s1,fc3";
    test_fast_vs_reference(&tr, DPT_CLIP_FLAT, 0.05, wide, KEEP_DEFAULT);
    test_fast_vs_reference(&tr, DPT_CLIP_FLAT, 0.05, wide, 0);
    test_sensitivity(&tr, wide, 0.05, 0, DPT_CLIP_FLAT);
    test_noise_only();
    test_update_divides_by_qN(&tr);
    test_empty_batches_and_learning(&tr, &te);
    test_bad_config();
    test_trainer_refusals(&tr);
    test_unaccounted_shuffle(&tr);
    test_ledger(&tr);
    test_ledger_meta(&tr);
    test_budget(&tr);
    test_budget_before_training(&tr);
    test_secure_wiring(&tr);
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);
    TEST_MAIN_END();
}
