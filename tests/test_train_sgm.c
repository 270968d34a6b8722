/* dpt_sgm (mechanism.h), the sampled Gaussian mechanism over the caller's gradients:
 * sensitivity of the clipped sum, the noise's standard deviation, the scaling by q n, the
 * ledger's events (fast and secure), the ledger file written before sample returns and
 * resumed, the budget stop, the Poisson batch sizes, and every refusal. */
#include <dptrain/mechanism.h>
#include <dptrain/accounting.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/mechanism_internal.h"
#include "train/train_internal.h"

static dpt_sgm_config base(size_t n, size_t dim, double q, double sigma, double C, uint64_t seed) {
    dpt_sgm_config c = dpt_sgm_config_defaults();
    c.n = n;
    c.dim = dim;
    c.sample_rate = q;
    c.sigma = sigma;
    c.clip = C;
    c.seed = seed;
    c.secure = 0; /* seeded, reproducible streams (a test sets secure = 1 and seed 0 itself) */
    c.threads = 2;
    return c;
}

static dpt_sgm *make(const dpt_sgm_config *c) {
    dpt_sgm *m = NULL;
    dpt_status s = dpt_sgm_new(c, &m);
    if (s != DPT_OK) {
        fprintf(stderr, "dpt_sgm_new: %s\n", dpt_last_error());
        exit(1);
    }
    return m;
}

/* a gradient row of norm `norm` (a fixed random direction from `state`) */
static void row_of_norm(float *g, size_t P, double norm, uint64_t *state) {
    double sq = 0;
    for (size_t j = 0; j < P; j++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        g[j] = (float)((double)(*state >> 11) / 9007199254740992.0 - 0.5);
        sq += (double)g[j] * g[j];
    }
    for (size_t j = 0; j < P; j++) g[j] = (float)(g[j] * norm / sqrt(sq));
}

static double norm_d(const double *v, size_t P) {
    double s = 0;
    for (size_t j = 0; j < P; j++) s += v[j] * v[j];
    return sqrt(s);
}

/* ==== (1) sensitivity: neighbouring batches, clipped sums at most C apart ==== */
static void test_sensitivity(void) {
    const size_t P = 40, b = 30;
    const double Cs[2] = {0.5, 3.0}; /* C below and above 1: a clip to norm 1 fails one of them */
    for (int k = 0; k < 2; k++) {
        const double C = Cs[k];
        dpt_sgm_config c = base(1000, P, 0.05, 1.0, C, 7);
        dpt_sgm *m = make(&c);
        float *g = malloc((b + 1) * P * sizeof *g);
        double *s0 = malloc(P * sizeof *s0), *s1 = malloc(P * sizeof *s1), *d = malloc(P * sizeof *d);
        uint64_t st = 11 + (uint64_t)k;
        for (size_t i = 0; i < b; i++) row_of_norm(g + i * P, P, C * (0.2 + 0.1 * (double)i), &st);
        /* add/remove: the batch with one more row, arbitrary and huge (norm ~1e31) */
        for (size_t j = 0; j < P; j++) g[b * P + j] = (j % 2 ? -1e30f : 3e30f);
        CHECK_OK(dpt_sgm_clipped_sum(m, g, b, s0));
        CHECK_OK(dpt_sgm_clipped_sum(m, g, b + 1, s1));
        for (size_t j = 0; j < P; j++) d[j] = s1[j] - s0[j];
        /* the added example moves the sum by exactly C (its clipped norm), never more */
        CHECK_CLOSE(norm_d(d, P), C, 0, 1e-12);
        /* replace-one: the row swapped for the huge one, at most 2C apart */
        float *g2 = malloc(b * P * sizeof *g2);
        memcpy(g2, g, b * P * sizeof *g2);
        memcpy(g2 + 3 * P, g + b * P, P * sizeof *g2);
        CHECK_OK(dpt_sgm_clipped_sum(m, g2, b, s1));
        for (size_t j = 0; j < P; j++) d[j] = s1[j] - s0[j];
        CHECK(norm_d(d, P) <= 2 * C * (1 + 1e-12));
        /* a row below C is kept as it is: ||clip(g)|| == min(||g||, C) */
        CHECK_OK(dpt_sgm_clipped_sum(m, g, 1, s1)); /* row 0 has norm 0.2 C */
        CHECK_CLOSE(norm_d(s1, P), 0.2 * C, 0, 1e-6);
        for (size_t j = 0; j < P; j++) CHECK_CLOSE(s1[j], g[j], 0, 1e-15);
        /* the sum against the naive reference */
        double *ref = malloc(P * sizeof *ref);
        tu_clipped_sum(g, b + 1, P, C, ref, NULL);
        CHECK_OK(dpt_sgm_clipped_sum(m, g, b + 1, s1));
        double worst = 0;
        for (size_t j = 0; j < P; j++) worst = fmax(worst, fabs(s1[j] - ref[j]));
        CHECK(worst <= 1e-12 * C * (double)b);
        free(ref);
        free(g2);
        free(g);
        free(s0);
        free(s1);
        free(d);
        dpt_sgm_free(m);
    }
}

/* ==== (2) the noise added has standard deviation sigma C per coordinate ==== */
static void noise_std(int secure, dpt_dgauss_method method, size_t P) {
    const double sigma = 1.3, C = 0.7, q = 0.01;
    const size_t n = 1000;
    dpt_sgm_config c = base(n, P, q, sigma, C, 5);
    c.secure = secure;
    if (secure) c.seed = 0; /* secure mode uses no seed */
    c.secure_sampler = method;
    dpt_sgm *m = make(&c);
    uint32_t *idx = malloc(dpt_sgm_batch_cap(m) * sizeof *idx);
    size_t b = 0;
    CHECK_OK(dpt_sgm_sample(m, idx, dpt_sgm_batch_cap(m), &b));
    float *zeros = calloc(b * P + 1, sizeof *zeros), *out = malloc(P * sizeof *out);
    CHECK_OK(dpt_sgm_release(m, zeros, b, out)); /* zero gradients: out q n is the noise alone */
    double s = 0, ss = 0;
    for (size_t j = 0; j < P; j++) {
        double e = out[j] * q * (double)n;
        s += e;
        ss += e * e;
    }
    const double mean = s / (double)P, sd = sqrt(ss / (double)P - mean * mean);
    /* the standard error of a sample sd is sd / sqrt(2 P): 0.16% at P = 2e5 */
    CHECK_CLOSE(sd, sigma * C, 0, 6.0 / sqrt(2.0 * (double)P));
    CHECK(fabs(mean) <= 6 * sigma * C / sqrt((double)P));
    free(idx);
    free(zeros);
    free(out);
    dpt_sgm_free(m);
}

/* ==== (3) out = (clipped sum + noise) / (q n): against the naive reference ==== */
static void test_scaling(void) {
    const size_t n = 500, P = 300;
    const double q = 0.04, sigma = 0.8, C = 1.5;
    dpt_sgm_config c = base(n, P, q, sigma, C, 99);
    dpt_sgm *m1 = make(&c), *m2 = make(&c); /* the same seed: the same batches and noise */
    size_t cap = dpt_sgm_batch_cap(m1);
    uint32_t *i1 = malloc(cap * sizeof *i1), *i2 = malloc(cap * sizeof *i2);
    float *o1 = malloc(P * sizeof *o1), *o2 = malloc(P * sizeof *o2);
    double *ref = malloc(P * sizeof *ref);
    uint64_t st = 3;
    int off_qn = 0; /* steps whose |B| differs from q n (a division by |B| must show) */
    for (int step = 0; step < 3; step++) {
        size_t b1 = 0, b2 = 0;
        CHECK_OK(dpt_sgm_sample(m1, i1, cap, &b1));
        CHECK_OK(dpt_sgm_sample(m2, i2, cap, &b2));
        CHECK(b1 == b2 && !memcmp(i1, i2, b1 * sizeof *i1));
        off_qn += (double)b1 != q * (double)n;
        float *g = malloc((b1 + 1) * P * sizeof *g), *z = calloc(b1 * P + 1, sizeof *z);
        for (size_t i = 0; i < b1; i++) row_of_norm(g + i * P, P, C * (0.5 + 0.25 * (double)(i % 5)), &st);
        CHECK_OK(dpt_sgm_release(m1, g, b1, o1));
        CHECK_OK(dpt_sgm_release(m2, z, b1, o2)); /* the same noise on a zero sum */
        tu_clipped_sum(g, b1, P, C, ref, NULL);
        double worst = 0;
        for (size_t j = 0; j < P; j++) {
            double want = ref[j] / (q * (double)n), got = (double)o1[j] - (double)o2[j];
            double tol = 1.2e-7 * (fabs(o1[j]) + fabs(o2[j])) + 1e-12; /* float rounding of each output */
            if (fabs(got - want) > tol) worst = fmax(worst, fabs(got - want) / tol);
        }
        CHECK(worst == 0);
        /* and the noise is there: o2 is not zero, with std sigma C / (q n) */
        double ss = 0;
        for (size_t j = 0; j < P; j++) ss += (double)o2[j] * o2[j];
        CHECK_CLOSE(sqrt(ss / (double)P), sigma * C / (q * (double)n), 0, 0.3);
        free(g);
        free(z);
    }
    CHECK(off_qn > 0);
    /* the secure mechanism's scaling: sigma tiny, out ~ clipped sum / (q n) */
    c.secure = 1;
    c.seed = 0; /* secure mode uses no seed */
    c.sigma = 1e-6;
    dpt_sgm *ms = make(&c);
    size_t b = 0;
    CHECK_OK(dpt_sgm_sample(ms, i1, cap, &b));
    float *g = malloc((b + 1) * P * sizeof *g);
    for (size_t i = 0; i < b; i++) row_of_norm(g + i * P, P, C * (0.5 + 0.5 * (double)(i % 4)), &st);
    CHECK_OK(dpt_sgm_release(ms, g, b, o1));
    tu_clipped_sum(g, b, P, C, ref, NULL);
    double worst = 0;
    for (size_t j = 0; j < P; j++) {
        double want = ref[j] / (q * (double)n);
        worst = fmax(worst, fabs(o1[j] - want) / (1e-5 * C + 1e-6 * fabs(want)));
    }
    CHECK(worst <= 1.0);
    free(g);
    dpt_sgm_free(ms);
    free(i1);
    free(i2);
    free(o1);
    free(o2);
    free(ref);
    dpt_sgm_free(m1);
    dpt_sgm_free(m2);
}

/* ==== (3b) secure: the lattice rounds the double sum, not a float32 copy ==== */
/* dpt_sgm's release (dpt_gauss_release_apply_sum; dpt_sgm's own secure streams come from
 * the OS, so the test drives the release with a seeded noise stream). Two sums
 * S = 1 + 1.5 h -+ 2^-35, h = sigma C 2^-14 = 2^-13: in double they lie on either side of
 * the lattice midpoint (k = 2^13 + 1, 2^13 + 2), while their float32 copies are both the
 * tie 1 + 1.5 h (k = 2^13 + 2). Same noise: the outputs must be h scale apart, not equal. */
static void test_secure_double_sum(void) {
    const double h = 2.0 / 16384.0, scale = 0.25;
    const dpt_dgauss_method methods[2] = {DPT_DGAUSS_TABLE, DPT_DGAUSS_CKS};
    for (int mi = 0; mi < 2; mi++) {
        dpt_gauss_release r;
        CHECK_OK(dpt_gauss_release_init(&r, 0.5, 1.0, 2.0, scale, 1, 1, methods[mi]));
        float o[2];
        for (int v = 0; v < 2; v++) {
            double sum = 1.0 + 1.5 * h + (v ? 1 : -1) * ldexp(1.0, -35);
            CHECK((float)sum == (float)(1.0 + 1.5 * h));
            dpt_rng noise;
            CHECK_OK(dpt_rng_init(&noise, 5, DPT_STREAM_NOISE));
            CHECK_OK(dpt_gauss_release_apply_sum(&r, &noise, &sum, &o[v], 2));
            dpt_rng_free(&noise);
        }
        CHECK_CLOSE((double)o[1] - (double)o[0], h * scale, 0, 1e-3);
        /* a NaN or a sum beyond the lattice's range is refused, not released */
        const double bad[2] = {NAN, 1e300};
        for (int k = 0; k < 2; k++) {
            double sum = bad[k];
            float out = 0.0f;
            dpt_rng noise;
            CHECK_OK(dpt_rng_init(&noise, 5, DPT_STREAM_NOISE));
            CHECK(dpt_gauss_release_apply_sum(&r, &noise, &sum, &out, 1) == DPT_ERANGE);
            dpt_rng_free(&noise);
        }
    }
}

/* T steps of a mechanism of dim P: each sampled, and released with zero gradients unless
 * release is 0 (sampled only) */
static void run_steps(dpt_sgm *m, size_t P, uint64_t T, int release) {
    size_t cap = dpt_sgm_batch_cap(m);
    uint32_t *idx = malloc(cap * sizeof *idx);
    float *z = calloc(cap * P, sizeof *z), *out = malloc(P * sizeof *out);
    for (uint64_t t = 0; t < T; t++) {
        size_t b = 0;
        CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
        if (release) CHECK_OK(dpt_sgm_release(m, z, b, out));
    }
    free(idx);
    free(z);
    free(out);
}

/* ==== (4) the ledger's epsilon is that of T steps of SGM(q, sigma) (secure: as DP-SGD) ==== */
static void test_ledger_epsilon(void) {
    const size_t n = 600, P = 50;
    const double q = 0.05, sigma = 1.1, delta = 1e-5;
    const uint64_t T = 25;
    double eps, want;
    /* fast */
    dpt_sgm_config c = base(n, P, q, sigma, 1.0, 4);
    dpt_sgm *m = make(&c);
    run_steps(m, P, T, 1);
    CHECK(dpt_sgm_steps(m) == T);
    CHECK(dpt_ledger_steps(dpt_sgm_ledger(m)) == T);
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, q, sigma, T));
    CHECK_OK(dpt_sgm_epsilon(m, delta, DPT_ACCT_RDP, &eps));
    CHECK_OK(dpt_ledger_epsilon(l, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &want));
    CHECK_CLOSE(eps, want, 0, 1e-14);
    CHECK(eps > 0);
    CHECK_OK(dpt_sgm_epsilon(m, 0, DPT_ACCT_RDP, &eps)); /* 0: the config's delta (1e-5) */
    CHECK_CLOSE(eps, want, 0, 1e-14);
    CHECK_OK(dpt_sgm_epsilon(m, delta, DPT_ACCT_PLD, &eps));
    CHECK_OK(dpt_ledger_epsilon(l, delta, DPT_ACCT_PLD, DPT_CONV_BALLE, &want));
    CHECK_CLOSE(eps, want, 0, 1e-14);
    CHECK(dpt_sgm_sigma(m) == sigma && dpt_sgm_sigma_accounted(m) == sigma);
    /* a batch sampled and never released still counts */
    run_steps(m, P, 2, 0);
    CHECK(dpt_sgm_steps(m) == T + 2);
    dpt_ledger_free(l);
    dpt_sgm_free(m);

    /* secure, table sampler: sgm_dgauss at the effective sigma over the dim coordinates */
    double mu, tv;
    CHECK_OK(dpt_privacy_secure_distance(DPT_DGAUSS_TABLE, &mu, &tv));
    c.secure = 1;
    c.seed = 0; /* secure mode uses no seed */
    m = make(&c);
    run_steps(m, P, T, 1);
    const double eff = dpt_privacy_secure_sigma_eff(sigma, P);
    CHECK(eff < sigma);
    CHECK(dpt_sgm_sigma_accounted(m) == eff && dpt_sgm_sigma(m) == sigma);
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm_dgauss(l, q, eff, P, mu, tv, T));
    CHECK_OK(dpt_sgm_epsilon(m, delta, DPT_ACCT_RDP, &eps));
    CHECK_OK(dpt_ledger_epsilon(l, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &want));
    CHECK_CLOSE(eps, want, 0, 1e-14);
    dpt_ledger_free(l);
    dpt_sgm_free(m);
    /* secure, the exact CKS sampler: plain SGM at the effective sigma */
    c.secure_sampler = DPT_DGAUSS_CKS;
    m = make(&c);
    run_steps(m, P, T, 1);
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, q, eff, T));
    CHECK_OK(dpt_sgm_epsilon(m, delta, DPT_ACCT_RDP, &eps));
    CHECK_OK(dpt_ledger_epsilon(l, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &want));
    CHECK_CLOSE(eps, want, 0, 1e-14);
    dpt_ledger_free(l);
    dpt_sgm_free(m);

    /* calibration: sigma 0 with target_epsilon and steps, as dpt_calibrate_sigma gives it */
    c = base(n, P, q, 0, 1.0, 4);
    c.target_epsilon = 2.0;
    c.steps = 40;
    m = make(&c);
    double s_want;
    /* the default accountant (the smaller of PLD and RDP): calibration and budget agree */
    CHECK_OK(dpt_calibrate_sigma(q, 40, 1e-5, 2.0, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, 1e-4, &s_want));
    CHECK(dpt_sgm_sigma(m) == s_want);
    run_steps(m, P, 40, 1); /* the planned steps all fit the budget */
    CHECK_OK(dpt_sgm_epsilon(m, 0, DPT_ACCT_DEFAULT, &eps));
    CHECK(eps <= 2.0 && eps > 1.99);
    dpt_sgm_free(m);
    /* secure calibration: the effective multiplier is the calibrated one */
    c.secure = 1;
    c.seed = 0; /* secure mode uses no seed */
    m = make(&c);
    CHECK_CLOSE(dpt_sgm_sigma_accounted(m), s_want, 0, 1e-9);
    CHECK(dpt_sgm_sigma(m) > s_want);
    run_steps(m, P, 40, 1); /* the table sampler's distance leaves the planned steps in the budget */
    CHECK_OK(dpt_sgm_epsilon(m, 0, DPT_ACCT_DEFAULT, &eps));
    CHECK(eps <= 2.0);
    dpt_sgm_free(m);
}

/* ==== (5) the ledger file: written before sample returns; resume ==== */
static uint64_t file_steps(const char *path) {
    dpt_ledger *l = NULL;
    if (dpt_ledger_load(path, &l) != DPT_OK) {
        fprintf(stderr, "load %s: %s\n", path, dpt_last_error());
        return UINT64_MAX;
    }
    uint64_t s = dpt_ledger_steps(l);
    dpt_ledger_free(l);
    return s;
}

static void test_ledger_file(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/sgm-ledger.json", tu_tmpdir());
    const size_t n = 400, P = 20;
    dpt_sgm_config c = base(n, P, 0.05, 1.0, 1.0, 21);
    c.ledger_path = path;
    dpt_sgm *m = make(&c);
    CHECK(file_steps(path) == 0); /* the file exists from the start */
    size_t cap = dpt_sgm_batch_cap(m), b = 0;
    uint32_t *idx = malloc(cap * sizeof *idx), *first = malloc(3 * cap * sizeof *first);
    size_t first_b[3];
    float *g = calloc(cap * P, sizeof *g), out[20], out_first[20];
    for (int t = 0; t < 3; t++) {
        CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
        /* before any release: the file already records this step */
        CHECK(file_steps(path) == (uint64_t)t + 1);
        memcpy(first + (size_t)t * cap, idx, b * sizeof *idx);
        first_b[t] = b;
        CHECK_OK(dpt_sgm_release(m, g, b, out));
        if (t == 0) memcpy(out_first, out, sizeof out);
    }
    dpt_sgm_free(m);
    /* without resume, the existing file is refused (and kept) */
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS("exists");
    CHECK(file_steps(path) == 3);
    /* resume continues the count */
    c.resume = 1;
    m = make(&c);
    CHECK(dpt_sgm_steps(m) == 3);
    CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
    CHECK(file_steps(path) == 4);
    /* the resumed session draws other batches and noise than the first one's (same seed):
     * reusing a noise draw on another gradient would release their difference noiselessly */
    int same_batch = b == first_b[0] && !memcmp(idx, first, b * sizeof *idx);
    CHECK_OK(dpt_sgm_release(m, g, b, out));
    CHECK(!(same_batch && !memcmp(out, out_first, sizeof out)));
    CHECK(!same_batch || b == 0);
    double eps, want;
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, 0.05, 1.0, 4));
    CHECK_OK(dpt_sgm_epsilon(m, 1e-5, DPT_ACCT_RDP, &eps));
    CHECK_OK(dpt_ledger_epsilon(l, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &want));
    CHECK_CLOSE(eps, want, 0, 1e-14);
    dpt_ledger_free(l);
    dpt_sgm_free(m);
    /* one handle per ledger file: a second one (a resume while the first runs) is refused
     * while the first holds it, and allowed once it is freed */
    m = make(&c);
    dpt_sgm *m2 = NULL;
    CHECK_STATUS(dpt_sgm_new(&c, &m2), DPT_EBUSY);
    CHECK_ERR_HAS("in use by another dpt_sgm");
    CHECK(m2 == NULL);
    dpt_sgm_free(m);
    m = make(&c);
    CHECK(dpt_sgm_steps(m) == 4);
    dpt_sgm_free(m);
    /* resume with other settings: refused, naming each */
    dpt_sgm_config bad = c;
    bad.clip = 2.0;
    CHECK_STATUS(dpt_sgm_new(&bad, &m), DPT_EMISMATCH);
    CHECK_ERR_HAS("clip was 1, now 2");
    CHECK(m == NULL);
    bad = c;
    bad.sigma = 1.5;
    CHECK_STATUS(dpt_sgm_new(&bad, &m), DPT_EMISMATCH);
    CHECK_ERR_HAS("sigma was 1, now 1.5");
    bad = c;
    bad.dim = 21;
    bad.sample_rate = 0.1;
    CHECK_STATUS(dpt_sgm_new(&bad, &m), DPT_EMISMATCH);
    CHECK_ERR_HAS("dim was 20, now 21");
    CHECK_ERR_HAS("q was 0.050000000000000003, now 0.10000000000000001");
    bad = c;
    bad.secure = 1;
    bad.seed = 0; /* secure mode uses no seed */
    CHECK_STATUS(dpt_sgm_new(&bad, &m), DPT_EMISMATCH);
    CHECK_ERR_HAS("secure was 0, now table");
    CHECK(file_steps(path) == 4); /* untouched by the refusals */
    /* resume of a ledger that no dpt_sgm wrote, and of a missing file */
    char other[256];
    snprintf(other, sizeof other, "%s/other.json", tu_tmpdir());
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, 0.05, 1.0, 1));
    CHECK_OK(dpt_ledger_save(l, other));
    dpt_ledger_free(l);
    bad = c;
    bad.ledger_path = other;
    CHECK_STATUS(dpt_sgm_new(&bad, &m), DPT_EMISMATCH);
    CHECK_ERR_HAS("not the ledger of a dpt_sgm");
    snprintf(other, sizeof other, "%s/missing.json", tu_tmpdir());
    CHECK_STATUS(dpt_sgm_new(&bad, &m), DPT_EIO);
    CHECK_ERR_HAS("missing.json");
    /* an unwritable path fails at construction, not at the first step */
    bad = c;
    bad.resume = 0;
    bad.ledger_path = "/nonexistent-dir/ledger.json";
    CHECK_STATUS(dpt_sgm_new(&bad, &m), DPT_EIO);
    free(idx);
    free(first);
    free(g);
}

/* ==== (6) the budget: sample refuses the step that would exceed target_epsilon ==== */
static void test_budget(void) {
    const size_t n = 1000, P = 10;
    const double q = 0.1, sigma = 2.0, target = 1.0, delta = 1e-5;
    /* the naive count: steps while epsilon stays <= target */
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    uint64_t T = 0;
    for (;;) {
        double e;
        CHECK_OK(dpt_ledger_add_sgm(l, q, sigma, 1));
        CHECK_OK(dpt_ledger_epsilon(l, delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &e)); /* the budget's */
        if (e > target || T > 10000) break;
        T++;
    }
    dpt_ledger_free(l);
    CHECK(T >= 3 && T < 200);
    char path[256];
    snprintf(path, sizeof path, "%s/budget.json", tu_tmpdir());
    dpt_sgm_config c = base(n, P, q, sigma, 1.0, 2);
    c.target_epsilon = target;
    c.ledger_path = path;
    dpt_sgm *m = make(&c);
    run_steps(m, P, T, 1);
    CHECK(dpt_sgm_steps(m) == T);
    size_t cap = dpt_sgm_batch_cap(m), b = 12345;
    uint32_t *idx = malloc(cap * sizeof *idx);
    CHECK_STATUS(dpt_sgm_sample(m, idx, cap, &b), DPT_EBUDGET);
    CHECK_ERR_HAS("target_epsilon 1");
    CHECK(b == 12345);               /* nothing drawn */
    CHECK(dpt_sgm_steps(m) == T);    /* nor recorded */
    CHECK(file_steps(path) == T);
    float out[10];
    CHECK_STATUS(dpt_sgm_release(m, NULL, 0, out), DPT_EINVAL); /* no batch pending */
    double eps;
    CHECK_OK(dpt_sgm_epsilon(m, 0, DPT_ACCT_DEFAULT, &eps));
    CHECK(eps <= target);
    dpt_sgm_free(m);
    /* a resumed mechanism keeps the budget spent */
    c.resume = 1;
    m = make(&c);
    CHECK_STATUS(dpt_sgm_sample(m, idx, cap, &b), DPT_EBUDGET);
    c.target_epsilon = 2 * target; /* a larger budget allows more steps on the same ledger */
    dpt_sgm_free(m);
    m = make(&c);
    CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
    CHECK(file_steps(path) == T + 1);
    dpt_sgm_free(m);
    free(idx);
}

/* ==== (7) Poisson batches: size Binomial(n, q), distinct ascending indices ==== */
static void batch_sizes(int secure, int steps) {
    const size_t n = 2000;
    const double q = 0.05;
    dpt_sgm_config c = base(n, 4, q, 1.0, 1.0, 17);
    c.secure = secure;
    if (secure) c.seed = 0; /* secure mode uses no seed */
    dpt_sgm *m = make(&c);
    size_t cap = dpt_sgm_batch_cap(m);
    CHECK(cap == (size_t)ceil(100 + 6 * 10 + 8));
    uint32_t *idx = malloc(cap * sizeof *idx);
    double s = 0, ss = 0;
    int ordered = 1;
    for (int t = 0; t < steps; t++) {
        size_t b = 0;
        CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
        for (size_t i = 0; i < b; i++)
            if (idx[i] >= n || (i && idx[i] <= idx[i - 1])) ordered = 0;
        s += (double)b;
        ss += (double)b * (double)b;
    }
    CHECK(ordered);
    const double mean = s / steps, var = ss / steps - mean * mean, mu = q * (double)n, v = mu * (1 - q);
    CHECK(fabs(mean - mu) <= 5 * sqrt(v / steps));
    CHECK_CLOSE(var, v, 0, 0.35);
    free(idx);
    dpt_sgm_free(m);
}

/* ==== (8) refusals ==== */
static void refused(dpt_sgm_config c, const char *needle) {
    dpt_sgm *m = (dpt_sgm *)&m;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS(needle);
    CHECK(m == NULL);
}

static void test_refusals(void) {
    const dpt_sgm_config ok = base(1000, 8, 0.05, 1.0, 1.0, 1);
    dpt_sgm_config c;
    c = ok; c.n = 0; refused(c, "dpt_sgm_config.n");
    c = ok; c.n = (size_t)UINT32_MAX + 1; refused(c, "dpt_sgm_config.n");
    c = ok; c.dim = 0; refused(c, "dpt_sgm_config.dim");
    c = ok; c.sample_rate = 0; refused(c, "dpt_sgm_config.sample_rate");
    c = ok; c.sample_rate = 1.5; refused(c, "dpt_sgm_config.sample_rate");
    c = ok; c.sample_rate = NAN; refused(c, "dpt_sgm_config.sample_rate");
    c = ok; c.sigma = 0; refused(c, "dpt_sgm_config.sigma");      /* and no target */
    c = ok; c.sigma = 0; c.target_epsilon = 1; refused(c, "steps"); /* target without steps */
    c = ok; c.sigma = -1; refused(c, "dpt_sgm_config.sigma");
    c = ok; c.sigma = INFINITY; refused(c, "dpt_sgm_config.sigma");
    c = ok; c.clip = 0; refused(c, "dpt_sgm_config.clip");
    c = ok; c.clip = -1; refused(c, "dpt_sgm_config.clip");
    c = ok; c.delta = 0; refused(c, "dpt_sgm_config.delta");
    c = ok; c.delta = 1e-3; refused(c, "1/n");                     /* delta >= 1/n */
    c = ok; c.target_epsilon = -1; refused(c, "dpt_sgm_config.target_epsilon");
    c = ok; c.resume = 1; refused(c, "dpt_sgm_config.ledger_path");
    c = ok; c.secure_sampler = (dpt_dgauss_method)7; refused(c, "dpt_sgm_config.secure_sampler");
    dpt_sgm *m = NULL;
    CHECK_STATUS(dpt_sgm_new(NULL, &m), DPT_EINVAL);
    CHECK_ERR_HAS("cfg");
    CHECK_STATUS(dpt_sgm_new(&ok, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("out");
    /* force accepts delta >= 1/n */
    c = ok;
    c.delta = 1e-3;
    c.force = 1;
    CHECK_OK(dpt_sgm_new(&c, &m));
    dpt_sgm_free(m);
    /* an unreachable calibration target */
    c = ok;
    c.sigma = 0;
    c.target_epsilon = 1e-9;
    c.steps = 1000000;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_ERANGE);
    CHECK_ERR_HAS("target_epsilon");

    m = make(&ok);
    size_t cap = dpt_sgm_batch_cap(m), b = 0;
    uint32_t *idx = malloc(cap * sizeof *idx);
    float *g = calloc(cap * 8, sizeof *g), out[8] = {0};
    char need[32];
    snprintf(need, sizeof need, "up to %zu entries", cap);
    CHECK_STATUS(dpt_sgm_sample(m, idx, cap - 1, &b), DPT_EINVAL); /* the capacity needed is named */
    CHECK_ERR_HAS(need);
    CHECK_STATUS(dpt_sgm_sample(m, NULL, cap, &b), DPT_EINVAL);
    CHECK_ERR_HAS("idx");
    CHECK_STATUS(dpt_sgm_sample(m, idx, cap, NULL), DPT_EINVAL);
    CHECK_STATUS(dpt_sgm_sample(NULL, idx, cap, &b), DPT_EINVAL);
    CHECK(dpt_sgm_steps(m) == 0); /* refusals record nothing */
    CHECK_STATUS(dpt_sgm_release(m, g, 0, out), DPT_EINVAL);     /* release without sample */
    CHECK_ERR_HAS("no batch is pending");
    CHECK_STATUS(dpt_sgm_batch(m, idx, cap, &b), DPT_EINVAL);
    do CHECK_OK(dpt_sgm_sample(m, idx, cap, &b)); while (b < 2); /* a batch of two or more rows */
    uint32_t again[2048];
    size_t b2 = 0;
    CHECK_OK(dpt_sgm_batch(m, again, 2048, &b2));                  /* the pending batch again */
    CHECK(b2 == b && !memcmp(again, idx, b * sizeof *idx));
    CHECK_STATUS(dpt_sgm_batch(m, again, b - 1, &b2), DPT_EINVAL);
    CHECK_STATUS(dpt_sgm_release(m, g, b + 1, out), DPT_EINVAL);   /* b mismatch */
    CHECK_ERR_HAS("sampled batch has");
    CHECK_STATUS(dpt_sgm_release(m, NULL, b, out), DPT_EINVAL);
    CHECK_ERR_HAS("grads");
    CHECK_STATUS(dpt_sgm_release(m, g, b, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("out");
    g[1 * 8 + 3] = NAN; /* row 1 */
    CHECK_STATUS(dpt_sgm_release(m, g, b, out), DPT_ERANGE);
    CHECK_ERR_HAS("row 1");
    CHECK(strstr(dpt_last_error(), "example") == NULL); /* which example was sampled is secret */
    CHECK(out[0] == 0); /* no output */
    g[1 * 8 + 3] = INFINITY;
    CHECK_STATUS(dpt_sgm_release(m, g, b, out), DPT_ERANGE);
    g[1 * 8 + 3] = 0;
    CHECK_OK(dpt_sgm_release(m, g, b, out));                     /* still pending after the errors */
    CHECK(out[0] != 0);
    CHECK_STATUS(dpt_sgm_release(m, g, b, out), DPT_EINVAL);     /* once */
    CHECK(dpt_sgm_steps(m) >= 1);
    dpt_sgm_free(m);
    dpt_sgm_free(NULL);
    CHECK(dpt_sgm_ledger(NULL) == NULL && dpt_sgm_batch_cap(NULL) == 0 && dpt_sgm_steps(NULL) == 0);
    CHECK(isnan(dpt_sgm_sigma(NULL)));
    free(idx);
    free(g);
}

/* an empty batch releases pure noise, and the step counts */
static void test_empty_batch(void) {
    dpt_sgm_config c = base(50, 16, 0.002, 1.0, 1.0, 3); /* q n = 0.1: most batches are empty */
    c.force = 1;
    dpt_sgm *m = make(&c);
    size_t cap = dpt_sgm_batch_cap(m), b = 1;
    uint32_t *idx = malloc(cap * sizeof *idx);
    float out[16] = {0};
    int empty = 0;
    for (int t = 0; t < 50 && !empty; t++) {
        CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
        if (b == 0) {
            empty = 1;
            CHECK_OK(dpt_sgm_release(m, NULL, 0, out));
            int nz = 0;
            for (int j = 0; j < 16; j++) nz += out[j] != 0;
            CHECK(nz == 16);
        }
    }
    CHECK(empty);
    free(idx);
    dpt_sgm_free(m);
}

/* the default is the secure mode (lattice noise, OS streams): a seed with it is refused, and
 * floating-point noise (secure = 0) is labelled wherever the ledger's epsilon goes */
static void test_secure_default(void) {
    dpt_sgm_config d = dpt_sgm_config_defaults();
    CHECK(d.secure == 1 && d.seed == 0);
    d.n = 64, d.dim = 8, d.sample_rate = 0.5, d.sigma = 1.0;
    dpt_sgm *m = NULL;
    CHECK_OK(dpt_sgm_new(&d, &m));
    char lab[512];
    dpt_ledger_label(dpt_sgm_ledger(m), 0, lab, sizeof lab);
    CHECK(!strstr(lab, "float"));
    CHECK(!dpt_ledger_get_meta(dpt_sgm_ledger(m), "noise_float"));
    dpt_sgm_free(m);
    m = NULL;
    d.seed = 5;
    CHECK_STATUS(dpt_sgm_new(&d, &m), DPT_EINVAL);
    CHECK_ERR_HAS("set secure = 0");
    CHECK(m == NULL);
    d.secure = 0;
    CHECK_OK(dpt_sgm_new(&d, &m));
    dpt_ledger_label(dpt_sgm_ledger(m), 0, lab, sizeof lab);
    CHECK(strstr(lab, "[float noise]") && strstr(lab, "[SEEDED]"));
    dpt_ledger_label(dpt_sgm_ledger(m), 1, lab, sizeof lab);
    CHECK(strstr(lab, "floating-point noise (secure = 0)") != NULL);
    dpt_sgm_free(m);
}

/* seed 0 (the default): each mechanism draws its own from the OS, so two of them with the
 * same settings sample other batches (P[equal] = 2^-n at q 1/2) and add other noise */
static void test_os_seed(void) {
    dpt_sgm_config c = base(64, 8, 0.5, 1.0, 1.0, 0);
    CHECK(dpt_sgm_config_defaults().seed == 0);
    dpt_sgm *a = make(&c), *b = make(&c);
    size_t cap = dpt_sgm_batch_cap(a), ba = 0, bb = 0;
    uint32_t *ia = malloc(cap * sizeof *ia), *ib = malloc(cap * sizeof *ib);
    CHECK_OK(dpt_sgm_sample(a, ia, cap, &ba));
    CHECK_OK(dpt_sgm_sample(b, ib, cap, &bb));
    CHECK(ba != bb || memcmp(ia, ib, ba * sizeof *ia) != 0);
    free(ia), free(ib);
    dpt_sgm_free(a), dpt_sgm_free(b);
    /* the noise: fresh mechanisms, zero gradients of the batch */
    a = make(&c), b = make(&c);
    cap = dpt_sgm_batch_cap(a);
    float *g = calloc(cap * 8, sizeof *g), oa[8], ob[8];
    ia = malloc(cap * sizeof *ia);
    CHECK_OK(dpt_sgm_sample(a, ia, cap, &ba));
    CHECK_OK(dpt_sgm_release(a, g, ba, oa));
    CHECK_OK(dpt_sgm_sample(b, ia, cap, &bb));
    CHECK_OK(dpt_sgm_release(b, g, bb, ob));
    CHECK(memcmp(oa, ob, sizeof oa) != 0);
    free(g), free(ia);
    dpt_sgm_free(a), dpt_sgm_free(b);
}

/* ==== (9) copies and rollbacks of a ledger file (issue 38, item 4) ==== */
/* one step of a resumed handle on zero gradients: its batch and its release */
static void resumed_step(const char *path, uint64_t seed, uint32_t *idx, size_t *b, float *out) {
    dpt_sgm_config c = base(200, 8, 0.1, 1.0, 1.0, seed);
    c.ledger_path = path;
    c.resume = 1;
    dpt_sgm *m = make(&c);
    size_t cap = dpt_sgm_batch_cap(m);
    float *g = calloc(cap * 8, sizeof *g);
    CHECK_OK(dpt_sgm_sample(m, idx, cap, b));
    CHECK_OK(dpt_sgm_release(m, g, *b, out));
    free(g);
    const char *src = dpt_ledger_get_meta(dpt_sgm_ledger(m), "seed_source");
    CHECK(src && !strcmp(src, seed ? "caller" : "os"));
    dpt_sgm_free(m);
}

static void test_copies_and_rollback(void) {
    char a[256], b[256], tmp[300];
    snprintf(a, sizeof a, "%s/copy-a.json", tu_tmpdir());
    snprintf(b, sizeof b, "%s/copy-b.json", tu_tmpdir());
    dpt_sgm_config c = base(200, 8, 0.1, 1.0, 1.0, 0);
    c.ledger_path = a;
    dpt_sgm *m = make(&c);
    run_steps(m, 8, 2, 1);
    dpt_sgm_free(m);
    /* two handles resumed from copies of one ledger (default seed): new streams at every
     * open, so neither the batch nor the noise repeats (the difference of two releases
     * would otherwise be the difference of the gradient sums, unnoised) */
    tu_copy_file(a, b);
    uint32_t ia[200], ib[200];
    size_t na = 0, nb = 0;
    float oa[8], ob[8];
    resumed_step(a, 0, ia, &na, oa);
    resumed_step(b, 0, ib, &nb, ob);
    CHECK(memcmp(oa, ob, sizeof oa) != 0);
    CHECK(na != nb || memcmp(ia, ib, na * sizeof *ia) != 0);
    /* a chosen seed is reproducible, so copies replay: documented, and labelled in the
     * ledger (seed_source "caller", checked by resumed_step) */
    tu_copy_file(a, b);
    resumed_step(a, 9, ia, &na, oa);
    resumed_step(b, 9, ib, &nb, ob);
    CHECK(memcmp(oa, ob, sizeof oa) == 0 && na == nb);
    /* rolling the file back to an older copy is refused: its epsilon would leave out
     * spent steps (the lock file beside it keeps the most steps it recorded) */
    tu_copy_file(a, b); /* b: 4 steps */
    c.resume = 1;
    c.seed = 0;
    m = make(&c);
    run_steps(m, 8, 3, 1);
    CHECK(dpt_sgm_steps(m) == 7);
    dpt_sgm_free(m);
    tu_copy_file(b, a);
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EMISMATCH);
    CHECK_ERR_HAS("an older copy was put back");
    CHECK(m == NULL);
    /* a temporary left by a process killed mid-write goes at the next open */
    snprintf(tmp, sizeof tmp, "%s/.copy-b.json.tmp-AbC123", tu_tmpdir());
    FILE *f = fopen(tmp, "w");
    CHECK(f != NULL);
    if (f) fclose(f);
    dpt_sgm_config cb = c;
    cb.ledger_path = b;
    m = make(&cb);
    CHECK(fopen(tmp, "r") == NULL);
    dpt_sgm_free(m);
}

int main(void) {
    test_sensitivity();
    test_os_seed();
    test_secure_default();
    noise_std(0, DPT_DGAUSS_TABLE, 200000);
    noise_std(1, DPT_DGAUSS_TABLE, 200000);
    noise_std(1, DPT_DGAUSS_CKS, 20000);
    test_scaling();
    test_secure_double_sum();
    test_ledger_epsilon();
    test_ledger_file();
    test_budget();
    batch_sizes(0, 400);
    batch_sizes(1, 200);
    test_refusals();
    test_empty_batch();
    test_copies_and_rollback();
    TEST_MAIN_END();
}
