/* A floating-point attack on dpt_sgm's releases (Mironov 2012), as an adversary who knows
 * every example but the target would run it: why dpt_sgm defaults to the secure lattice
 * mechanism and labels floating-point noise (secure = 0) in its ledger.
 *
 * n = 2, q = 1: each release is (row 0 + row 1 + noise) / 2. Row 0 is known; the target
 * row 1 is either zeros (H0) or a known vector of norm < C (H1), so the two hypotheses are
 * neighbouring datasets. The stated epsilon of one release at sigma 100 is about 0.03. The
 * ziggurat of src/core/rng.c emits, near zero, only the floats u w_i (fast path, in float)
 * and fl(u w_i) (slow path, in double) for integers u and its layer widths w_i; a released
 * coordinate out is consistent with a sum S when fl32(S + sigma e) == 2 out for some such e.
 * The attacker counts, over the coordinates near zero, those impossible under each
 * hypothesis and answers the one with fewer.
 *
 * With secure = 0 this classifies every trial correctly: the label is warranted (if the
 * sampler changes, this test says so). With the default (secure) every released value
 * is h k / (q n) for an integer k, h = sigma C 2^-14, whatever the data: the lattice point
 * round(S / h) + Z carries everything the release says. */
#include <dptrain/accounting.h>
#include <dptrain/mechanism.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* the ziggurat's layers, computed as src/core/rng.c computes them (zig_tables) */
#define ZIG_N 256
#define ZIG_R 3.6541528853610088
#define ZIG_V 4.92867323399e-3
#define ZIG_M 8388608.0 /* 2^23 */
static uint32_t zk[ZIG_N];
static double zw[ZIG_N];
static float zwf[ZIG_N];

static void zig_tables(void) {
    double dn = ZIG_R, tn = dn, q = ZIG_V / exp(-0.5 * dn * dn);
    zk[0] = (uint32_t)((dn / q) * ZIG_M);
    zk[1] = 0;
    zw[0] = q / ZIG_M;
    zw[ZIG_N - 1] = dn / ZIG_M;
    for (int i = ZIG_N - 2; i >= 1; i--) {
        dn = sqrt(-2.0 * log(ZIG_V / dn + exp(-0.5 * dn * dn)));
        zk[i + 1] = (uint32_t)((dn / tn) * ZIG_M);
        tn = dn;
        zw[i] = dn / ZIG_M;
    }
    for (int i = 0; i < ZIG_N; i++) zwf[i] = (float)zw[i];
}

/* can fl32(S + sd e) == y for a value e the sampler emits? */
static int possible(double S, float y, float sd) {
    const double a = fabs((double)y - S);
    for (int i = 0; i < ZIG_N; i++) {
        const long u0 = (long)(a / ((double)sd * zw[i]));
        for (long u = u0 - 3; u <= u0 + 3; u++) {
            if (u < 0 || u >= (1L << 23)) continue;
            float v[2];
            int nv = 0;
            if ((uint32_t)u < zk[i]) v[nv++] = (float)u * zwf[i];                   /* fast path */
            if ((uint32_t)u >= zk[i] || i == 1) v[nv++] = (float)((double)u * zw[i]); /* slow path */
            for (int k = 0; k < nv; k++)
                for (int sg = -1; sg <= 1; sg += 2)
                    if ((float)(S + (double)(sg * (sd * v[k]))) == y) return 1;
        }
    }
    return 0;
}

enum { P = 20000, TRIALS = 6 };

/* one release of rows g[2][P] (row 1: the target or zeros); out[P] */
static int release(int secure, double sigma, const float *g, float *out) {
    dpt_sgm_config c = dpt_sgm_config_defaults();
    c.n = 2, c.dim = P, c.sample_rate = 1.0, c.sigma = sigma, c.clip = 1.0, c.delta = 1e-6, c.threads = 1;
    c.secure = secure;
    dpt_sgm *m = NULL;
    uint32_t idx[2];
    size_t b = 0;
    if (dpt_sgm_new(&c, &m) != DPT_OK || dpt_sgm_sample(m, idx, 2, &b) != DPT_OK || b != 2) {
        fprintf(stderr, "setup: %s\n", dpt_last_error());
        dpt_sgm_free(m);
        return 0;
    }
    float *rows = malloc(2 * P * sizeof *rows);
    memcpy(rows, g + (size_t)idx[0] * P, P * sizeof *rows);
    memcpy(rows + P, g + (size_t)idx[1] * P, P * sizeof *rows);
    const int ok = dpt_sgm_release(m, rows, 2, out) == DPT_OK;
    free(rows);
    dpt_sgm_free(m);
    return ok;
}

int main(void) {
    zig_tables();
    const double sigma = 100.0;
    const float sd = (float)sigma;
    float *g = calloc(2 * P, sizeof *g), *tgt = malloc(P * sizeof *tgt), *out = malloc(P * sizeof *out);
    double *S0 = malloc(P * sizeof *S0), *S1 = malloc(P * sizeof *S1);
    uint64_t st = 1;
    double n0 = 0;
    for (size_t j = 0; j < P; j++) { /* the known example: norm 0.5 (not clipped) */
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        g[j] = (float)((double)(st >> 11) / 9007199254740992.0 - 0.5);
        n0 += (double)g[j] * g[j];
    }
    for (size_t j = 0; j < P; j++) {
        g[j] = (float)(g[j] * 0.5 / sqrt(n0));
        tgt[j] = (float)((j % 2 ? 1.0 : -1.0) * 0.999 / sqrt((double)P)); /* the target: norm < C = 1 */
        S0[j] = (double)g[j];
        S1[j] = (double)g[j] + (double)tgt[j];
    }
    /* the epsilon such a release states */
    dpt_ledger *l = NULL;
    double eps = 0;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, 1.0, sigma, 1));
    CHECK_OK(dpt_ledger_epsilon(l, 1e-6, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &eps));
    dpt_ledger_free(l);
    CHECK(eps < 0.05);

    int right = 0, trials = 0;
    for (int h = 0; h <= 1; h++) {
        for (size_t j = 0; j < P; j++) g[P + j] = h ? tgt[j] : 0.0f;
        for (int t = 0; t < TRIALS; t++) {
            if (!release(0, sigma, g, out)) {
                CHECK(0);
                continue;
            }
            int small = 0, rej0 = 0, rej1 = 0;
            for (size_t j = 0; j < P; j++) {
                const float y = out[j] * 2.0f; /* 1 / (q n) = 1/2: undone exactly */
                if (fabsf(y) > 0.02f * sd) continue;
                small++;
                rej0 += !possible(S0[j], y, sd);
                rej1 += !possible(S1[j], y, sd);
            }
            CHECK(small > 50);
            trials++;
            right += (rej0 > rej1 ? 1 : 0) == h;
        }
    }
    printf("floating-point noise (secure = 0), sigma %g, stated epsilon %.3f at delta 1e-6: the attack is right in "
           "%d of %d releases\n", sigma, eps, right, trials);
    CHECK(right == trials); /* a test with no false positive beats (eps, delta)-DP by far */

    /* the default: every value is h k / (q n), h = sigma C 2^-14, k an integer */
    const double h = sigma * 1.0 / 16384.0;
    for (int t = 0; t < 2; t++) {
        for (size_t j = 0; j < P; j++) g[P + j] = t ? tgt[j] : 0.0f;
        if (!release(1, sigma, g, out)) {
            CHECK(0);
            continue;
        }
        int on = 1;
        for (size_t j = 0; j < P; j++) {
            const double k = (double)out[j] * 2.0 / h;
            on &= fabs(k - nearbyint(k)) <= 1e-6 * fmax(1.0, fabs(k));
        }
        CHECK(on);
    }
    free(g), free(tgt), free(out), free(S0), free(S1);
    TEST_MAIN_END();
}
