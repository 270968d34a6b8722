/* Adaptive clipping (Andrew et al. 2021) in dpt_sgm and DP-SGD: sigma_Delta's closed form
 * and its refusal; the joint release's sensitivity on neighbouring batches (gradient sum <=
 * C_t apart, centred count exactly 1/2 apart, joint contribution <= 1/sigma in noise units);
 * the gradient noise's std sigma_Delta C_t and the count noise's std sigma_b; C_t converging
 * to the gamma-quantile of known norms; the ledger's epsilon = T steps of SGM(q, sigma); the
 * dpt_sgm ledger file and the DP-SGD checkpoint continuing C_t on resume; the engine's fast
 * and reference paths (flat and per-layer) moving C_t alike; the metrics' "clip"; refusals. */
#include <dptrain/accounting.h>
#include <dptrain/mechanism.h>
#include <dptrain/train.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testdata.h"
#include "testutil.h"
#include "train/mechanism_internal.h"

static dpt_sgm_config ada_cfg(size_t n, size_t dim, double q, double sigma, double C, double gamma, double sb) {
    dpt_sgm_config c = dpt_sgm_config_defaults();
    c.n = n;
    c.dim = dim;
    c.sample_rate = q;
    c.sigma = sigma;
    c.clip = C;
    c.seed = 17;
    c.secure = 0; /* adaptive clipping runs on floating-point noise only */
    c.threads = 2;
    c.adaptive_quantile = gamma;
    c.adaptive_sigma_b = sb;
    return c;
}

static dpt_sgm *make(const dpt_sgm_config *c) {
    dpt_sgm *m = NULL;
    if (dpt_sgm_new(c, &m) != DPT_OK) {
        fprintf(stderr, "dpt_sgm_new: %s\n", dpt_last_error());
        exit(1);
    }
    return m;
}

/* a row of norm `norm` in a pseudo-random direction */
static void row_of_norm(float *g, size_t P, double norm, uint64_t *st) {
    double sq = 0;
    for (size_t j = 0; j < P; j++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        g[j] = (float)((double)(*st >> 11) / 9007199254740992.0 - 0.5);
        sq += (double)g[j] * g[j];
    }
    for (size_t j = 0; j < P; j++) g[j] = (float)(g[j] * norm / sqrt(sq));
}

/* ==== sigma_Delta = (sigma^-2 - (2 sigma_b)^-2)^(-1/2), and its refusal ==== */
static void test_sigma_delta(void) {
    double sd = 0;
    CHECK_OK(dpt_privacy_adaptive_sigma(1.0, 1.0, &sd));
    CHECK_CLOSE(sd, 1.0 / sqrt(0.75), 0, 1e-15);
    CHECK_OK(dpt_privacy_adaptive_sigma(0.65, 12.8, &sd)); /* the quick start's: 0.03% more noise */
    CHECK_CLOSE(1 / (sd * sd) + 1 / (4 * 12.8 * 12.8), 1 / (0.65 * 0.65), 0, 1e-14);
    CHECK_STATUS(dpt_privacy_adaptive_sigma(1.0, 0.5, &sd), DPT_EINVAL); /* 2 sigma_b = sigma: nothing left */
    CHECK_ERR_HAS("sigma / 2 = 0.5");
    CHECK_STATUS(dpt_privacy_adaptive_sigma(1.0, 0.3, &sd), DPT_EINVAL);
    CHECK_STATUS(dpt_privacy_adaptive_sigma(0, 1, &sd), DPT_EINVAL);
}

/* ==== sensitivity of the joint release (add/remove one example, same C_t) ==== */
static void test_sensitivity(void) {
    const size_t P = 30, b = 25;
    const double sigma = 1.2, sb = 0.9;
    double sd = 0;
    CHECK_OK(dpt_privacy_adaptive_sigma(sigma, sb, &sd));
    for (int k = 0; k < 2; k++) {
        dpt_sgm_config c = ada_cfg(500, P, 0.05, sigma, k ? 4.0 : 0.3, 0.5, sb);
        static const size_t layers[2] = {10, 20};
        if (k) c.clip_mode = DPT_CLIP_PER_LAYER, c.layer_sizes = layers, c.n_layers = 2;
        dpt_sgm *m = make(&c);
        /* move C_t off its start first: huge rows push it up, so the bound tested is C_t */
        const size_t cap = dpt_sgm_batch_cap(m);
        uint32_t *idx = malloc(cap * sizeof *idx);
        float *g = malloc((cap + 1) * P * sizeof *g), *out = malloc(P * sizeof *out);
        uint64_t st = 5 + (uint64_t)k;
        for (size_t i = 0; i < cap; i++) row_of_norm(g + i * P, P, 100.0, &st);
        for (int t = 0; t < 3; t++) {
            size_t bb = 0;
            CHECK_OK(dpt_sgm_sample(m, idx, cap, &bb));
            CHECK_OK(dpt_sgm_release(m, g, bb, out));
        }
        const double C = dpt_sgm_clip(m);
        CHECK(C != c.clip);
        for (size_t i = 0; i < b; i++) row_of_norm(g + i * P, P, C * (0.1 + 0.08 * (double)i), &st);
        double *s0 = malloc(P * sizeof *s0), *s1 = malloc(P * sizeof *s1);
        double c0 = 0, c1 = 0;
        for (int added = 0; added < 2; added++) { /* the added row: below C_t, then huge */
            row_of_norm(g + b * P, P, added ? 1e12 : 0.5 * C, &st);
            CHECK_OK(dpt_sgm_clipped_sum_count(m, g, b, s0, &c0));
            CHECK_OK(dpt_sgm_clipped_sum_count(m, g, b + 1, s1, &c1));
            double d2 = 0;
            for (size_t j = 0; j < P; j++) d2 += (s1[j] - s0[j]) * (s1[j] - s0[j]);
            CHECK(sqrt(d2) <= C * (1 + 1e-12));
            CHECK(fabs(c1 - c0) == 0.5); /* centred: the count moves by exactly 1/2 */
            CHECK(c1 - c0 == (added ? -0.5 : 0.5));
            /* the joint contribution in units of each part's noise std: at most 1 / sigma */
            const double joint = sqrt(d2 / (sd * sd * C * C) + 0.25 / (sb * sb));
            CHECK(joint <= (1 / sigma) * (1 + 1e-12));
        }
        /* the count of the b rows: norms 0.1 C .. 2.02 C, those <= C counted */
        size_t below = 0;
        for (size_t i = 0; i < b; i++) below += 0.1 + 0.08 * (double)i <= 1.0;
        CHECK_OK(dpt_sgm_clipped_sum_count(m, g, b, s0, &c0));
        CHECK(c0 == (double)below - 0.5 * (double)b);
        free(s0);
        free(s1);
        free(idx);
        free(g);
        free(out);
        dpt_sgm_free(m);
    }
}

/* ==== the gradient noise has std sigma_Delta C_t, the count noise std sigma_b ==== */
static void test_noise_std(void) {
    /* gradient: zero rows, out q n is the noise alone */
    const size_t n = 1000, P = 200000;
    const double q = 0.01, sigma = 1.3, sb = 0.8;
    dpt_sgm_config c = ada_cfg(n, P, q, sigma, 0.7, 0.5, sb);
    dpt_sgm *m = make(&c);
    double sd = 0;
    CHECK_OK(dpt_privacy_adaptive_sigma(sigma, sb, &sd));
    CHECK_CLOSE(dpt_sgm_sigma(m), sd, 0, 1e-15);
    CHECK(dpt_sgm_sigma_accounted(m) == sigma);
    uint32_t *idx = malloc(dpt_sgm_batch_cap(m) * sizeof *idx);
    size_t b = 0;
    for (int t = 0; t < 2; t++) { /* the second step, at C_1 != C_0 */
        CHECK_OK(dpt_sgm_sample(m, idx, dpt_sgm_batch_cap(m), &b));
        const double C = dpt_sgm_clip(m);
        float *z = calloc(b * P + 1, sizeof *z), *out = malloc(P * sizeof *out);
        CHECK_OK(dpt_sgm_release(m, z, b, out));
        double s = 0, ss = 0;
        for (size_t j = 0; j < P; j++) {
            const double e = out[j] * q * (double)n;
            s += e, ss += e * e;
        }
        const double mean = s / (double)P, sdev = sqrt(ss / (double)P - mean * mean);
        CHECK_CLOSE(sdev, sd * C, 0, 6.0 / sqrt(2.0 * (double)P));
        free(z);
        free(out);
    }
    CHECK(dpt_sgm_clip(m) != 0.7);
    free(idx);
    dpt_sgm_free(m);

    /* count: half the rows 0 (counted), half huge (not), so the centred count is known and
     * b~ stays inside (0, 1); the noise is read back from C_{t+1} / C_t */
    const size_t n2 = 2000, P2 = 4, T = 3000;
    const double q2 = 0.05, sb2 = 3.0, lr = 0.1, gamma = 0.5;
    dpt_sgm_config c2 = ada_cfg(n2, P2, q2, 1.0, 1.0, gamma, sb2);
    c2.adaptive_lr = lr;
    dpt_sgm *m2 = make(&c2);
    const size_t cap = dpt_sgm_batch_cap(m2);
    uint32_t *idx2 = malloc(cap * sizeof *idx2);
    float *g = calloc(cap * P2, sizeof *g), *out = malloc(P2 * sizeof *out);
    double s = 0, ss = 0;
    size_t used = 0;
    for (size_t t = 0; t < T; t++) {
        size_t bb = 0;
        CHECK_OK(dpt_sgm_sample(m2, idx2, cap, &bb));
        double cnt = 0;
        for (size_t i = 0; i < bb; i++) {
            const int huge = idx2[i] % 2;
            for (size_t j = 0; j < P2; j++) g[i * P2 + j] = huge ? 1e20f : 0.0f;
            cnt += huge ? -0.5 : 0.5;
        }
        const double C0 = dpt_sgm_clip(m2);
        CHECK_OK(dpt_sgm_release(m2, g, bb, out));
        const double f = gamma - log(dpt_sgm_clip(m2) / C0) / lr; /* the released b~ */
        if (f <= 0 || f >= 1) continue;                            /* clamped: not invertible */
        const double e = (f - 0.5) * q2 * (double)n2 - cnt;
        s += e, ss += e * e;
        used++;
    }
    CHECK(used > T - 10);
    const double mean = s / (double)used, sdev = sqrt(ss / (double)used - mean * mean);
    CHECK_CLOSE(sdev, sb2, 0, 6.0 * sb2 / sqrt(2.0 * (double)used));
    CHECK(fabs(mean) <= 6 * sb2 / sqrt((double)used));
    free(idx2);
    free(g);
    free(out);
    dpt_sgm_free(m2);
}

/* ==== C_t converges to the gamma-quantile of known norms (sigma_b small) ==== */
static void test_convergence(void) {
    /* example i has norm 0.1 + 2 i / n: uniform on [0.1, 2.1], so the 0.3-quantile is 0.7 */
    const size_t n = 4000, P = 8, T = 1500;
    const double gamma = 0.3, want = 0.1 + 2 * gamma;
    dpt_sgm_config c = ada_cfg(n, P, 0.05, 1.0, 0.02, gamma, 1.0); /* sigma_b 1 against q n = 200 */
    dpt_sgm *m = make(&c);
    const size_t cap = dpt_sgm_batch_cap(m);
    uint32_t *idx = malloc(cap * sizeof *idx);
    float *g = malloc(cap * P * sizeof *g), *out = malloc(P * sizeof *out);
    double late = 0;
    for (size_t t = 0; t < T; t++) {
        size_t b = 0;
        CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
        for (size_t i = 0; i < b; i++) {
            uint64_t st = idx[i] + 1;
            row_of_norm(g + i * P, P, 0.1 + 2.0 * idx[i] / (double)n, &st);
        }
        CHECK_OK(dpt_sgm_release(m, g, b, out));
        if (t >= T - 300) late += log(dpt_sgm_clip(m));
    }
    const double C = exp(late / 300);
    if (!(fabs(C - want) <= 0.05 * want)) fprintf(stderr, "adaptive clip %g, quantile %g\n", C, want);
    CHECK_CLOSE(C, want, 0, 0.05);
    free(idx);
    free(g);
    free(out);
    dpt_sgm_free(m);
}

/* ==== the ledger: T events of SGM(q, sigma), sigma the total; the file continues C_t ==== */
static void test_ledger_and_resume(void) {
    const size_t n = 600, P = 20;
    const double q = 0.05, sigma = 0.9, delta = 1e-5;
    const uint64_t T = 30;
    const char *dir = tu_tmpdir();
    char path[256];
    snprintf(path, sizeof path, "%s/sgm_ledger.json", dir);
    dpt_sgm_config c = ada_cfg(n, P, q, sigma, 1.0, 0.5, 0); /* sigma_b: q n / 20 = 1.5 */
    c.ledger_path = path;
    dpt_sgm *m = make(&c);
    const size_t cap = dpt_sgm_batch_cap(m);
    uint32_t *idx = malloc(cap * sizeof *idx);
    float *g = malloc(cap * P * sizeof *g), *out = malloc(P * sizeof *out);
    uint64_t st = 3;
    for (size_t i = 0; i < cap; i++) row_of_norm(g + i * P, P, 5.0, &st); /* all clipped: C_t grows */
    for (uint64_t t = 0; t < T; t++) {
        size_t b = 0;
        CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
        CHECK_OK(dpt_sgm_release(m, g, b, out));
    }
    double eps = 0, want = 0;
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, q, sigma, T));
    for (int a = 0; a < 2; a++) {
        const dpt_accountant acct = a ? DPT_ACCT_PLD : DPT_ACCT_RDP;
        CHECK_OK(dpt_sgm_epsilon(m, delta, acct, &eps));
        CHECK_OK(dpt_ledger_epsilon(l, delta, acct, DPT_CONV_BALLE, &want));
        CHECK_CLOSE(eps, want, 0, 1e-14);
    }
    dpt_ledger_free(l);
    CHECK(dpt_ledger_get_meta(dpt_sgm_ledger(m), "adaptive") != NULL);
    /* sample once more: the file records C_T with the step; then resume from it */
    size_t b = 0;
    const double C_T = dpt_sgm_clip(m);
    CHECK(C_T > 1.5);
    CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
    dpt_sgm_free(m);
    c.resume = 1;
    m = make(&c);
    CHECK(dpt_sgm_clip(m) == C_T); /* bit for bit: %.17g */
    CHECK(dpt_sgm_steps(m) == T + 1);
    dpt_sgm_free(m);
    /* another quantile, or a fixed clip, on this ledger: refused */
    c.adaptive_quantile = 0.6;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EMISMATCH);
    CHECK_ERR_HAS("adaptive clipping was quantile 0.5");
    c.adaptive_quantile = 0;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EMISMATCH);
    CHECK_ERR_HAS("now off");
    free(idx);
    free(g);
    free(out);
}

static void test_sgm_refusals(void) {
    dpt_sgm *m = NULL;
    dpt_sgm_config c = ada_cfg(1000, 10, 0.01, 1.0, 1.0, 1.5, 0);
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_sgm_config.adaptive_quantile");
    c.adaptive_quantile = 0.5;
    c.adaptive_lr = 0;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_sgm_config.adaptive_lr");
    c.adaptive_lr = 0.2;
    c.adaptive_sigma_b = 0.4; /* <= sigma / 2 */
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_sgm_config.adaptive_sigma_b");
    c.adaptive_sigma_b = -1;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    c.adaptive_sigma_b = 0;
    c.secure = 1;
    c.seed = 0; /* secure mode uses no seed */
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_ENOTSUP);
    CHECK(m == NULL);
}

/* ==== DP-SGD ==== */

static dpt_train_config dp_cfg(void) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:8-16-3:gelu";
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = 0.05;
    c.epochs = 2;
    c.seed = 3;
    c.threads = 2;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.5;
    return c;
}

/* a run of DP-SGD with adaptive clipping; *C the final C_t, theta [P] the parameters */
static dpt_status run(const dpt_train_config *c, const dpt_dataset *tr, dpt_clip_mode mode, int reference,
                      double sb, int resume, double *C, float *theta, double *eps) {
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.0, d.clip = 0.05, d.clip_mode = mode, d.reference = reference, d.ref_chunk = 7;
    d.adaptive_quantile = 0.5, d.adaptive_sigma_b = sb;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    dpt_status s = dpt_trainer_new(c, tr, NULL, a, &t);
    if (s == DPT_OK && resume) s = dpt_trainer_resume(t);
    if (s == DPT_OK) s = dpt_trainer_run(t, NULL);
    if (s == DPT_OK) {
        *C = dpt_algo_dpsgd_clip(a);
        if (theta) memcpy(theta, dpt_trainer_model(t)->theta, dpt_trainer_model(t)->n_params * sizeof *theta);
        if (eps) CHECK_OK(dpt_ledger_epsilon(dpt_trainer_ledger(t), 1e-5, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, eps));
    }
    dpt_trainer_free(t);
    return s;
}

static void test_dpsgd(const dpt_dataset *tr) {
    dpt_train_config c = dp_cfg();
    double C_fast = 0, C_ref = 0, eps = 0;
    /* fast and reference paths count alike: the same C_t (the noise is the same stream) */
    for (int mode = 0; mode < 2; mode++) {
        const dpt_clip_mode cm = mode ? DPT_CLIP_PER_LAYER : DPT_CLIP_FLAT;
        CHECK_OK(run(&c, tr, cm, 0, 0, 0, &C_fast, NULL, mode ? NULL : &eps));
        CHECK_OK(run(&c, tr, cm, 1, 0, 0, &C_ref, NULL, NULL));
        CHECK(C_fast != 0.05);
        CHECK_CLOSE(C_fast, C_ref, 0, 1e-5);
    }
    /* the ledger: 2 epochs of 20 steps of SGM(q, sigma), sigma the total */
    dpt_ledger *l = NULL;
    double want = 0;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, 0.05, 1.0, 40));
    CHECK_OK(dpt_ledger_epsilon(l, 1e-5, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &want));
    CHECK_CLOSE(eps, want, 0, 1e-14);
    dpt_ledger_free(l);
    /* sigma_b too small for sigma 1: refused at dpt_trainer_new, naming the field */
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.adaptive_quantile = 0.5, d.adaptive_sigma_b = 0.5;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_STATUS(dpt_trainer_new(&c, tr, NULL, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dpsgd_config.adaptive_sigma_b");
    d.adaptive_sigma_b = 0, d.adaptive_quantile = 1;
    CHECK_STATUS(dpt_algo_dpsgd_new(&d, &a), DPT_EINVAL);
    CHECK_ERR_HAS("adaptive_quantile");
    d.adaptive_quantile = 0.5, d.secure = 1;
    CHECK_STATUS(dpt_algo_dpsgd_new(&d, &a), DPT_ENOTSUP);
    d.secure = 0;
    CHECK(isnan(dpt_algo_dpsgd_clip(NULL)));
}

/* a resumed run continues C_t from the checkpoint: bit-identical to an uninterrupted one */
static void test_dpsgd_resume(const dpt_dataset *tr) {
    const char *root = tu_tmpdir();
    char d1[256], d2[256], mp[300];
    snprintf(d1, sizeof d1, "%s/whole", root);
    snprintf(d2, sizeof d2, "%s/resumed", root);
    dpt_train_config c = dp_cfg();
    const size_t P = 8 * 16 + 16 + 16 * 3 + 3;
    float *w = malloc(P * sizeof *w), *r = malloc(P * sizeof *r);
    double Cw = 0, C1 = 0, Cr = 0;
    c.out_dir = d1;
    CHECK_OK(run(&c, tr, DPT_CLIP_FLAT, 0, 0, 0, &Cw, w, NULL));
    c.out_dir = d2;
    c.epochs = 1;
    CHECK_OK(run(&c, tr, DPT_CLIP_FLAT, 0, 0, 0, &C1, NULL, NULL));
    /* the epoch's metrics line carries C_t */
    snprintf(mp, sizeof mp, "%s/metrics.jsonl", d2);
    FILE *f = fopen(mp, "r");
    char line[4096] = "";
    CHECK(f && fgets(line, sizeof line, f));
    if (f) fclose(f);
    char want[64];
    snprintf(want, sizeof want, "\"clip\":%.17g", C1);
    const char *at = strstr(line, "\"clip\":");
    CHECK(at != NULL);
    CHECK(at && fabs(strtod(at + 7, NULL) - C1) <= 1e-15 * C1);
    c.epochs = 2;
    CHECK_OK(run(&c, tr, DPT_CLIP_FLAT, 0, 0, 1, &Cr, r, NULL));
    CHECK(Cr == Cw);
    CHECK(!memcmp(w, r, P * sizeof *w));
    /* a resume with another quantile setting is refused (the settings differ) */
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.clip = 0.05, d.adaptive_quantile = 0.6;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
    CHECK_STATUS(dpt_trainer_resume(t), DPT_EMISMATCH);
    CHECK_ERR_HAS("adaptive quantile 0.5");
    dpt_trainer_free(t);
    free(w);
    free(r);
}

int main(void) {
    test_sigma_delta();
    test_sensitivity();
    test_noise_std();
    test_convergence();
    test_ledger_and_resume();
    test_sgm_refusals();
    dpt_dataset tr;
    tu_make_blobs(&tr, 400, 9, 1.0f);
    test_dpsgd(&tr);
    test_dpsgd_resume(&tr);
    dpt_dataset_free(&tr);
    TEST_MAIN_END();
}
