/* dpt_sgm's virtual batches (dpt_sgm_accumulate, dpt_sgm_release_accumulated) and per-layer
 * clipping (dpt_sgm_config.clip_mode DPT_CLIP_PER_LAYER): a batch released from micro-
 * batches equals one release of the same rows bit for bit (the same additions in the same
 * order, the same noise stream), a row count other than the sampled one is refused with
 * nothing charged or added, the handle's buffers do not grow with the batch, neighbouring
 * logical batches are at most C apart before noise, per-layer sums against a naive
 * reference with each group's norm min(||g_l||, C / sqrt(G)), and the noise's std through
 * the accumulated path.
 * Letter key: n = examples, P = dim, B = batch, G = layers, C = clip norm. */
#include <dptrain/mechanism.h>
#include <dptrain/accounting.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/mechanism_internal.h"

static dpt_sgm_config base(size_t n, size_t P, double q, double sigma, double C, uint64_t seed) {
    dpt_sgm_config c = dpt_sgm_config_defaults();
    c.n = n;
    c.dim = P;
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

/* row i of the logical batch: a deterministic function of (i, step), of norm between 0.1 C
 * and 10 C, with some layers far below their bound and some far above */
static void row_fill(float *g, size_t P, size_t i, int step, double C) {
    uint64_t s = 0x9E3779B97F4A7C15ull * (i + 1) + 0xD1B54A32D192ED03ull * (uint64_t)(step + 1);
    const double scale = C * (0.1 + 0.5 * (double)(i % 21)) / sqrt((double)P);
    for (size_t j = 0; j < P; j++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(s >> 11) / 9007199254740992.0 - 0.5;
        g[j] = (float)(u * 3.4 * scale * (j % 7 == 0 ? 8.0 : 1.0));
    }
}

/* naive reference: sum_i over rows of each group l of row i scaled by min(1, C_l / ||g_{i,l}||) */
static void ref_sum(const float *g, size_t B, size_t P, const size_t *sizes, size_t G, double C_l, double *sum) {
    memset(sum, 0, P * sizeof *sum);
    for (size_t i = 0; i < B; i++) {
        size_t o = 0;
        for (size_t l = 0; l < G; l++) {
            double sq = 0;
            for (size_t j = o; j < o + sizes[l]; j++) sq += (double)g[i * P + j] * g[i * P + j];
            const double f = sqrt(sq) > C_l ? C_l / sqrt(sq) : 1.0;
            for (size_t j = o; j < o + sizes[l]; j++) sum[j] += f * g[i * P + j];
            o += sizes[l];
        }
    }
}

static double norm_range(const double *v, size_t lo, size_t hi) {
    double s = 0;
    for (size_t j = lo; j < hi; j++) s += v[j] * v[j];
    return sqrt(s);
}

/* ==== (a) micro-batches equal one release of the same rows ==== */
/* Two handles of one seed draw the same batches and noise; one releases whole batches, the
 * other the same rows in micro-batches of `mb` from one reused [mb, P] buffer. The sums see
 * the same additions in the same order, so the outputs are equal bit for bit. */
static void equal_to_one_release(int per_layer, size_t mb) {
    const size_t n = 2000, P = 3000;
    const double q = 0.1, C = 0.8;
    size_t sizes[100];
    dpt_sgm_config c = base(n, P, q, 1.1, C, 4242);
    if (per_layer) { /* 100 layers of 30 values: 40 rows per pass of the sum, so passes are crossed */
        for (size_t l = 0; l < 100; l++) sizes[l] = 30;
        c.clip_mode = DPT_CLIP_PER_LAYER;
        c.layer_sizes = sizes;
        c.n_layers = 100;
    }
    dpt_sgm *whole = make(&c), *micro = make(&c);
    const size_t cap = dpt_sgm_batch_cap(whole);
    uint32_t *i1 = malloc(cap * sizeof *i1), *i2 = malloc(cap * sizeof *i2);
    float *g = malloc(cap * P * sizeof *g), *buf = malloc(mb * P * sizeof *buf);
    float *o1 = malloc(P * sizeof *o1), *o2 = malloc(P * sizeof *o2);
    for (int step = 0; step < 2; step++) {
        size_t b1 = 0, b2 = 0;
        CHECK_OK(dpt_sgm_sample(whole, i1, cap, &b1));
        CHECK_OK(dpt_sgm_sample(micro, i2, cap, &b2));
        CHECK(b1 == b2 && b1 > mb && !memcmp(i1, i2, b1 * sizeof *i1));
        for (size_t i = 0; i < b1; i++) row_fill(g + i * P, P, i, step, C);
        CHECK_OK(dpt_sgm_release(whole, g, b1, o1));
        for (size_t lo = 0; lo < b2; lo += mb) {
            const size_t r = b2 - lo < mb ? b2 - lo : mb;
            for (size_t i = 0; i < r; i++) row_fill(buf + i * P, P, lo + i, step, C); /* the buffer reused */
            CHECK_OK(dpt_sgm_accumulate(micro, buf, r));
        }
        CHECK_OK(dpt_sgm_release_accumulated(micro, o2));
        CHECK(!memcmp(o1, o2, P * sizeof *o1)); /* bitwise */
        double d = 0, s = 0;
        for (size_t j = 0; j < P; j++) {
            d = fmax(d, fabs((double)o1[j] - o2[j]));
            s += fabs(o1[j]);
        }
        CHECK(d == 0 && s > 0);
    }
    CHECK(dpt_sgm_steps(whole) == 2 && dpt_sgm_steps(micro) == 2);
    double e1 = 0, e2 = 0;
    CHECK_OK(dpt_sgm_epsilon(whole, 0, DPT_ACCT_RDP, &e1));
    CHECK_OK(dpt_sgm_epsilon(micro, 0, DPT_ACCT_RDP, &e2));
    CHECK(e1 == e2 && e1 > 0);
    free(i1);
    free(i2);
    free(g);
    free(buf);
    free(o1);
    free(o2);
    dpt_sgm_free(whole);
    dpt_sgm_free(micro);
}

/* The secure mechanism is OS-seeded (no twin draws its noise): with sigma tiny its
 * accumulated release is the clipped sum / (q n) to the lattice's resolution. */
static void test_secure(void) {
    const size_t n = 500, P = 300, mb = 7;
    const double q = 0.04, C = 1.5;
    dpt_sgm_config c = base(n, P, q, 1e-6, C, 0);
    c.secure = 1;
    c.seed = 0; /* secure mode uses no seed */
    dpt_sgm *m = make(&c);
    const size_t cap = dpt_sgm_batch_cap(m);
    uint32_t *idx = malloc(cap * sizeof *idx);
    float *g = malloc(cap * P * sizeof *g), *out = malloc(P * sizeof *out);
    double *ref = malloc(P * sizeof *ref);
    size_t b = 0;
    const size_t whole[1] = {P};
    CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
    CHECK(b > mb);
    for (size_t i = 0; i < b; i++) row_fill(g + i * P, P, i, 0, C);
    for (size_t lo = 0; lo < b; lo += mb) CHECK_OK(dpt_sgm_accumulate(m, g + lo * P, b - lo < mb ? b - lo : mb));
    CHECK_OK(dpt_sgm_release_accumulated(m, out));
    ref_sum(g, b, P, whole, 1, C, ref);
    double worst = 0;
    for (size_t j = 0; j < P; j++) {
        const double want = ref[j] / (q * (double)n);
        worst = fmax(worst, fabs(out[j] - want) / (1e-5 * C + 1e-6 * fabs(want)));
    }
    CHECK(worst <= 1.0);
    CHECK(dpt_sgm_steps(m) == 1);
    free(idx);
    free(g);
    free(out);
    free(ref);
    dpt_sgm_free(m);
}

/* ==== (b) a row count other than the sampled one is refused; nothing is charged ==== */
static void test_mismatch(void) {
    const size_t n = 1000, P = 16;
    dpt_sgm_config c = base(n, P, 0.05, 1.0, 1.0, 77);
    dpt_sgm *m = make(&c), *twin = make(&c);
    const size_t cap = dpt_sgm_batch_cap(m);
    uint32_t *idx = malloc(cap * sizeof *idx);
    float *g = malloc(cap * P * sizeof *g), out[16], ref[16];
    size_t b = 0, bt = 0, rows = 0;
    CHECK_STATUS(dpt_sgm_accumulate(m, g, 0), DPT_EINVAL); /* nothing sampled */
    CHECK_ERR_HAS("no batch is pending");
    CHECK_STATUS(dpt_sgm_release_accumulated(m, out), DPT_EINVAL);
    CHECK_ERR_HAS("no batch is pending");
    CHECK(dpt_sgm_steps(m) == 0);
    CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
    CHECK_OK(dpt_sgm_sample(twin, idx, cap, &bt));
    CHECK(b == bt && b >= 3);
    for (size_t i = 0; i < b; i++) row_fill(g + i * P, P, i, 0, 1.0);
    CHECK_OK(dpt_sgm_release(twin, g, b, ref));
    /* no rows yet: the release is refused, not pure noise */
    CHECK_STATUS(dpt_sgm_release_accumulated(m, out), DPT_EINVAL);
    CHECK_ERR_HAS("0 rows were accumulated");
    CHECK_OK(dpt_sgm_accumulate(m, g, b - 1));
    for (int k = 0; k < 16; k++) out[k] = -7.0f;
    CHECK_STATUS(dpt_sgm_release_accumulated(m, out), DPT_EINVAL); /* one row short */
    CHECK_ERR_HAS("sampled batch has");
    CHECK(out[0] == -7.0f && out[15] == -7.0f); /* out untouched */
    CHECK_STATUS(dpt_sgm_release(m, g, b, out), DPT_EINVAL);      /* no mixing of the two releases */
    CHECK_ERR_HAS("dpt_sgm_release_accumulated");
    CHECK_STATUS(dpt_sgm_accumulate(m, g + (b - 1) * P, 2), DPT_EINVAL); /* one row too many */
    CHECK_ERR_HAS("nothing was added");
    CHECK_STATUS(dpt_sgm_accumulate(m, NULL, 1), DPT_EINVAL);
    float bad[16];
    memcpy(bad, g + (b - 1) * P, sizeof bad);
    bad[5] = NAN;
    CHECK_STATUS(dpt_sgm_accumulate(m, bad, 1), DPT_ERANGE); /* refused whole, its position in the batch */
    char need[32];
    snprintf(need, sizeof need, "row %zu", b - 1);
    CHECK_ERR_HAS(need);
    (void)dpt_sgm_accumulated(m, &rows);
    CHECK(rows == b - 1); /* none of the refused calls added a row */
    CHECK(dpt_sgm_steps(m) == 1 && dpt_ledger_steps(dpt_sgm_ledger(m)) == 1); /* nor charged a step */
    CHECK_OK(dpt_sgm_accumulate(m, g + (b - 1) * P, 1)); /* the missing row */
    CHECK_OK(dpt_sgm_accumulate(m, NULL, 0));            /* zero rows: allowed, nothing */
    CHECK_OK(dpt_sgm_release_accumulated(m, out));
    CHECK(!memcmp(out, ref, sizeof out)); /* exactly the whole batch's release */
    CHECK_STATUS(dpt_sgm_release_accumulated(m, out), DPT_EINVAL); /* once per sample */
    CHECK_STATUS(dpt_sgm_accumulate(m, g, 1), DPT_EINVAL);
    /* a batch sampled again mid-accumulation is spent; the new one starts from zero */
    CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
    CHECK_OK(dpt_sgm_sample(twin, idx, cap, &bt));
    CHECK_OK(dpt_sgm_accumulate(m, g, b > 0 ? 1 : 0));
    CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
    CHECK_OK(dpt_sgm_sample(twin, idx, cap, &bt));
    CHECK(b == bt);
    for (size_t i = 0; i < b; i++) row_fill(g + i * P, P, i, 1, 1.0);
    CHECK_OK(dpt_sgm_release(twin, g, b, ref));
    CHECK_OK(dpt_sgm_accumulate(m, g, b));
    CHECK_OK(dpt_sgm_release_accumulated(m, out));
    CHECK(!memcmp(out, ref, sizeof out));
    CHECK(dpt_sgm_steps(m) == 3 && dpt_sgm_steps(twin) == 3);
    free(idx);
    free(g);
    dpt_sgm_free(m);
    dpt_sgm_free(twin);
    /* an empty batch releases pure noise through the accumulated path too */
    c = base(50, 16, 0.002, 1.0, 1.0, 3); /* q n = 0.1: most batches are empty */
    c.force = 1;
    m = make(&c);
    uint32_t id[64];
    int empty = 0;
    for (int t = 0; t < 50 && !empty; t++) {
        CHECK_OK(dpt_sgm_sample(m, id, 64, &b));
        if (b == 0) {
            empty = 1;
            CHECK_OK(dpt_sgm_release_accumulated(m, out));
            int nz = 0;
            for (int j = 0; j < 16; j++) nz += out[j] != 0;
            CHECK(nz == 16);
        }
    }
    CHECK(empty);
    dpt_sgm_free(m);
    CHECK_STATUS(dpt_sgm_accumulate(NULL, NULL, 0), DPT_EINVAL);
    CHECK_STATUS(dpt_sgm_release_accumulated(NULL, out), DPT_EINVAL);
}

/* ==== (c) the handle's buffers do not grow with the logical batch ==== */
static void test_memory_bound(void) {
    const size_t n = 20000, P = 5000;
    dpt_sgm_config small = base(n, P, 0.005, 1.0, 1.0, 1), large = small;
    large.sample_rate = 0.9; /* expected batch 18000 rows, 180x the small one */
    dpt_sgm *ms = make(&small), *ml = make(&large);
    CHECK(dpt_sgm_batch_cap(ml) > 100 * dpt_sgm_batch_cap(ms));
    CHECK(dpt_sgm_scratch_bytes(ms) == dpt_sgm_scratch_bytes(ml));
    /* indices [n], factors [4096], two sums [P], offsets: never a [B, P] term */
    const size_t bound = n * 4 + 4096 * 8 + P * (8 + 4) + 64;
    CHECK(dpt_sgm_scratch_bytes(ml) <= bound);
    if (dpt_sgm_scratch_bytes(ml) > bound)
        fprintf(stderr, "scratch %zu bytes > %zu\n", dpt_sgm_scratch_bytes(ml), bound);
    dpt_sgm_free(ms);
    dpt_sgm_free(ml);
}

/* ==== (d) sensitivity: neighbouring logical batches, accumulated in micro-batches ==== */
/* D and D' = D without row k (a huge one), the same seed and the same micro-batch size: the
 * pre-noise sums differ by exactly C (flat) or by the removed row's per-layer clip, each
 * group by at most C / sqrt(G), the whole by at most C. C below and above 1. */
static void test_sensitivity(void) {
    const size_t P = 120, B = 50, k = 23, mb = 8;
    const size_t sizes[4] = {10, 50, 1, 59};
    const double Cs[2] = {0.5, 3.0};
    for (int per_layer = 0; per_layer < 2; per_layer++)
        for (int t = 0; t < 2; t++) {
            const double C = Cs[t];
            dpt_sgm_config c = base(100, P, 1.0, 1.0, C, 9); /* q = 1: batch = every example */
            c.force = 1;
            if (per_layer) {
                c.clip_mode = DPT_CLIP_PER_LAYER;
                c.layer_sizes = sizes;
                c.n_layers = 4;
            }
            dpt_sgm *m1 = make(&c), *m2 = make(&c);
            uint32_t idx[100];
            size_t b = 0, rows = 0;
            CHECK_OK(dpt_sgm_sample(m1, idx, 100, &b));
            CHECK_OK(dpt_sgm_sample(m2, idx, 100, &b));
            float *g = malloc(B * P * sizeof *g), *h = malloc((B - 1) * P * sizeof *h);
            for (size_t i = 0; i < B; i++) row_fill(g + i * P, P, i, 3, C);
            for (size_t j = 0; j < P; j++) g[k * P + j] = j % 2 ? -1e30f : 3e30f; /* every layer far above */
            memcpy(h, g, k * P * sizeof *h);
            memcpy(h + k * P, g + (k + 1) * P, (B - 1 - k) * P * sizeof *h);
            for (size_t lo = 0; lo < B; lo += mb) CHECK_OK(dpt_sgm_accumulate(m1, g + lo * P, B - lo < mb ? B - lo : mb));
            for (size_t lo = 0; lo < B - 1; lo += mb)
                CHECK_OK(dpt_sgm_accumulate(m2, h + lo * P, B - 1 - lo < mb ? B - 1 - lo : mb));
            const double *s1 = dpt_sgm_accumulated(m1, &rows);
            CHECK(rows == B);
            const double *s2 = dpt_sgm_accumulated(m2, &rows);
            CHECK(rows == B - 1);
            double *d = malloc(P * sizeof *d);
            for (size_t j = 0; j < P; j++) d[j] = s1[j] - s2[j];
            if (!per_layer) {
                CHECK_CLOSE(norm_range(d, 0, P), C, 0, 1e-12); /* exactly the removed row's clip */
            } else {
                const double C_l = C / 2.0; /* C / sqrt(4) */
                size_t o = 0;
                for (size_t l = 0; l < 4; l++) {
                    CHECK_CLOSE(norm_range(d, o, o + sizes[l]), C_l, 0, 1e-12); /* each group at its share */
                    o += sizes[l];
                }
                CHECK(norm_range(d, 0, P) <= C * (1 + 1e-12));
            }
            free(d);
            free(g);
            free(h);
            dpt_sgm_free(m1);
            dpt_sgm_free(m2);
        }
}

/* ==== per-layer clipping: the naive reference, each group's norm, the refusals ==== */
static void test_per_layer(void) {
    const size_t P = 2500, G = 5, B = 60;
    const size_t sizes[5] = {1, 1200, 37, 1100, 162}; /* a layer across the 1024-value blocks */
    const double Cs[2] = {0.3, 4.0};
    for (int t = 0; t < 2; t++) {
        const double C = Cs[t], C_l = C / sqrt((double)G);
        dpt_sgm_config c = base(1000, P, 0.05, 1.0, C, 5);
        c.clip_mode = DPT_CLIP_PER_LAYER;
        c.layer_sizes = sizes;
        c.n_layers = G;
        dpt_sgm *m = make(&c);
        float *g = malloc(B * P * sizeof *g);
        for (size_t i = 0; i < B; i++) row_fill(g + i * P, P, i, 5, C);
        double *s = malloc(P * sizeof *s), *ref = malloc(P * sizeof *ref);
        CHECK_OK(dpt_sgm_clipped_sum(m, g, B, s));
        ref_sum(g, B, P, sizes, G, C_l, ref);
        double worst = 0;
        for (size_t j = 0; j < P; j++) worst = fmax(worst, fabs(s[j] - ref[j]) / (1e-12 * C * (double)B));
        CHECK(worst <= 1.0);
        /* one row at a time: each group's norm is min(||g_l||, C_l), so some are kept as they
         * are and some cut; the whole row's at most C */
        int kept = 0, cut = 0;
        for (size_t i = 0; i < B; i++) {
            CHECK_OK(dpt_sgm_clipped_sum(m, g + i * P, 1, s));
            size_t o = 0;
            for (size_t l = 0; l < G; l++) {
                double sq = 0;
                for (size_t j = o; j < o + sizes[l]; j++) sq += (double)g[i * P + j] * g[i * P + j];
                const double raw = sqrt(sq);
                CHECK_CLOSE(norm_range(s, o, o + sizes[l]), fmin(raw, C_l), 0, 1e-12);
                kept += raw < C_l;
                cut += raw > C_l;
                o += sizes[l];
            }
            CHECK(norm_range(s, 0, P) <= C * (1 + 1e-12));
        }
        CHECK(kept > 0 && cut > 0);
        free(g);
        free(s);
        free(ref);
        dpt_sgm_free(m);
    }
    /* the events, hence epsilon, are the flat mode's: the sensitivity is C either way */
    dpt_sgm_config f = base(1000, P, 0.05, 1.0, 1.0, 5), pl = f;
    pl.clip_mode = DPT_CLIP_PER_LAYER;
    pl.layer_sizes = sizes;
    pl.n_layers = G;
    dpt_sgm *mf = make(&f), *mp = make(&pl);
    uint32_t idx[200];
    size_t b = 0;
    for (int s = 0; s < 3; s++) {
        CHECK_OK(dpt_sgm_sample(mf, idx, 200, &b));
        CHECK_OK(dpt_sgm_sample(mp, idx, 200, &b));
    }
    double ef = 0, ep = 0;
    CHECK_OK(dpt_sgm_epsilon(mf, 0, DPT_ACCT_RDP, &ef));
    CHECK_OK(dpt_sgm_epsilon(mp, 0, DPT_ACCT_RDP, &ep));
    CHECK(ef == ep && ef > 0);
    dpt_sgm_free(mf);
    dpt_sgm_free(mp);
    /* refusals, each naming the field */
    dpt_sgm *m = (dpt_sgm *)&m;
    const size_t short_sizes[2] = {10, 20}, zero_sizes[2] = {0, 2500}, long_sizes[2] = {2000, 600};
    dpt_sgm_config c = pl;
    c.layer_sizes = NULL;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_sgm_config.layer_sizes");
    CHECK(m == NULL);
    c = pl;
    c.n_layers = 0;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS("n_layers >= 1");
    c = pl;
    c.layer_sizes = short_sizes;
    c.n_layers = 2;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS("hold 30 values, dim is 2500");
    c.layer_sizes = zero_sizes;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS("layer_sizes[0] is 0");
    c.layer_sizes = long_sizes;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS("more than dim");
    c = f;
    c.layer_sizes = sizes;
    c.n_layers = G;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL); /* layers given, flat clipping asked */
    CHECK_ERR_HAS("clip_mode is DPT_CLIP_FLAT");
    c = pl;
    c.clip_mode = (dpt_clip_mode)5;
    CHECK_STATUS(dpt_sgm_new(&c, &m), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_sgm_config.clip_mode");
    /* the caller's array is copied: changing it after dpt_sgm_new changes nothing */
    size_t mine[5];
    memcpy(mine, sizes, sizeof mine);
    c = pl;
    c.layer_sizes = mine;
    dpt_sgm *m1 = make(&c);
    memset(mine, 0, sizeof mine);
    float *g = malloc(P * sizeof *g);
    double *s = malloc(P * sizeof *s), *ref = malloc(P * sizeof *ref);
    row_fill(g, P, 7, 9, 1.0);
    for (size_t j = 0; j < P; j++) g[j] *= 50.0f;
    CHECK_OK(dpt_sgm_clipped_sum(m1, g, 1, s));
    ref_sum(g, 1, P, sizes, G, 1.0 / sqrt((double)G), ref);
    double w = 0;
    for (size_t j = 0; j < P; j++) w = fmax(w, fabs(s[j] - ref[j]));
    CHECK(w <= 1e-12);
    free(g);
    free(s);
    free(ref);
    dpt_sgm_free(m1);
}

/* ==== the noise through the accumulated path: std sigma C per coordinate ==== */
static void test_noise_std(int per_layer) {
    const size_t P = 200000, n = 1000;
    const double sigma = 1.3, C = 0.7, q = 0.01;
    size_t sizes[2] = {150000, 50000};
    dpt_sgm_config c = base(n, P, q, sigma, C, 5);
    if (per_layer) {
        c.clip_mode = DPT_CLIP_PER_LAYER;
        c.layer_sizes = sizes;
        c.n_layers = 2;
    }
    dpt_sgm *m = make(&c);
    const size_t cap = dpt_sgm_batch_cap(m);
    uint32_t *idx = malloc(cap * sizeof *idx);
    size_t b = 0;
    CHECK_OK(dpt_sgm_sample(m, idx, cap, &b));
    float *zeros = calloc(4 * P, sizeof *zeros), *out = malloc(P * sizeof *out);
    for (size_t lo = 0; lo < b; lo += 4) CHECK_OK(dpt_sgm_accumulate(m, zeros, b - lo < 4 ? b - lo : 4));
    CHECK_OK(dpt_sgm_release_accumulated(m, out)); /* zero rows: out q n is the noise alone */
    double s = 0, ss = 0;
    for (size_t j = 0; j < P; j++) {
        const double e = out[j] * q * (double)n;
        s += e;
        ss += e * e;
    }
    const double mean = s / (double)P, sd = sqrt(ss / (double)P - mean * mean);
    CHECK_CLOSE(sd, sigma * C, 0, 6.0 / sqrt(2.0 * (double)P)); /* the sd's standard error: sd / sqrt(2 P) */
    CHECK(fabs(mean) <= 6 * sigma * C / sqrt((double)P));
    free(idx);
    free(zeros);
    free(out);
    dpt_sgm_free(m);
}

int main(void) {
    equal_to_one_release(0, 37);
    equal_to_one_release(0, 1);
    equal_to_one_release(1, 64);
    test_secure();
    test_mismatch();
    test_memory_bound();
    test_sensitivity();
    test_per_layer();
    test_noise_std(0);
    test_noise_std(1);
    TEST_MAIN_END();
}
