/* DP normalization of features (dpt_trainer_feature_norm, dpt_dp_channel_sums,
 * dpt_dp_channel_affine; Tramer & Boneh 2021's frozen BatchNorm). The mechanism: a
 * neighbouring dataset moves each pre-noise sum by exactly the removed example's clipped
 * vector (norm min(||v||, C) <= C), with the clip below and above the norm; the noise the
 * trainer adds (recovered from the layer's scale and shift) has std sigma C_p and mean 0.
 * The accounting: two Gaussian events in the ledger before anything else, composed into
 * the run's epsilon; a target that they alone exceed is refused before anything is
 * released. A resumed run keeps the statistics bit for bit (and continues bit-identically);
 * the feature cache built from the kept features equals the model's forward pass. Misuse
 * (no fbn, not frozen, twice, non-private) is refused by name. */
#include <dptrain/accounting.h>
#include <dptrain/privacy.h>
#include <dptrain/train.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testdata.h"
#include "testutil.h"
#include "train/train_internal.h"

/* n examples of K channels of m values: x = mu + sd N(0, 1), labels i mod 2 */
static void make_data(dpt_dataset *d, size_t n, size_t K, size_t m, double mu, double sd, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->n = n, d->dim = K * m, d->n_classes = 2;
    d->shape[0] = K, d->shape[1] = 1, d->shape[2] = m;
    d->x = dpt_alloc(n * K * m, sizeof(float), "x");
    d->y = dpt_alloc(n, sizeof(int32_t), "y");
    strcpy(d->source, "synthetic");
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t i = 0; i < n * K * m; i++) d->x[i] = (float)(mu + sd * dpt_rng_gauss_ref(&r));
    for (size_t i = 0; i < n; i++) d->y[i] = (int32_t)(i % 2);
    dpt_rng_free(&r);
}

/* ==== Sensitivity of the clipped sums ==== */

static void check_sensitivity(void) {
    const size_t n = 9, K = 5, m = 3;
    dpt_dataset d;
    make_data(&d, n, K, m, 0.5, 1.0, 3);
    double full[5], minus[5];
    for (int p = 1; p <= 2; p++)
        for (int ci = 0; ci < 2; ci++) {
            const double C = ci ? 50.0 : 0.3; /* above every example's norm, then below */
            size_t clipped = 0, cm = 0;
            CHECK_OK(dpt_dp_channel_sums(d.x, n, K, m, p, C, full, &clipped));
            CHECK(ci ? clipped == 0 : clipped == n);
            for (size_t j = 0; j < n; j++) {
                /* the neighbour without example j: rows [0, j) and (j, n) */
                float *x2 = malloc((n - 1) * K * m * sizeof *x2);
                memcpy(x2, d.x, j * K * m * sizeof *x2);
                memcpy(x2 + j * K * m, d.x + (j + 1) * K * m, (n - 1 - j) * K * m * sizeof *x2);
                CHECK_OK(dpt_dp_channel_sums(x2, n - 1, K, m, p, C, minus, &cm));
                double v[5], vn = 0, dn = 0;
                for (size_t c = 0; c < K; c++) {
                    double s = 0;
                    for (size_t t = 0; t < m; t++) {
                        const double x = d.x[(j * K + c) * m + t];
                        s += p == 1 ? x : x * x;
                    }
                    v[c] = s / (double)m;
                    vn += v[c] * v[c];
                    dn += (full[c] - minus[c]) * (full[c] - minus[c]);
                }
                /* ||S(D) - S(D')|| = ||clip_C(v_j)|| = min(||v_j||, C) <= C */
                CHECK_CLOSE(sqrt(dn), fmin(sqrt(vn), C), 1e-12, 1e-9);
                CHECK(sqrt(dn) <= C * (1 + 1e-12));
                free(x2);
            }
        }
    /* bad input */
    CHECK_STATUS(dpt_dp_channel_sums(d.x, n, K, m, 3, 1.0, full, NULL), DPT_EINVAL);
    CHECK_STATUS(dpt_dp_channel_sums(d.x, n, K, m, 1, 0.0, full, NULL), DPT_EINVAL);
    d.x[4] = NAN;
    CHECK_STATUS(dpt_dp_channel_sums(d.x, n, K, m, 1, 1.0, full, NULL), DPT_EINVAL);
    dpt_dataset_free(&d);
    /* the map: (x - mu) / sqrt(var + 1e-5); a variance <= 0 gives 0 */
    const double s1[2] = {4.0, 2.0}, s2[2] = {12.0, 0.5};
    float sc[2], sh[2];
    CHECK_OK(dpt_dp_channel_affine(s1, s2, 2, 2.0, sc, sh));
    CHECK_CLOSE(sc[0], 1.0 / sqrt(6.0 - 4.0 + 1e-5), 0, 1e-6);
    CHECK_CLOSE(sh[0], -2.0 / sqrt(6.0 - 4.0 + 1e-5), 0, 1e-6);
    CHECK(sc[1] == 0.0f && sh[1] == 0.0f); /* 0.25 - 1 < 0 */
}

/* ==== The trainer ==== */

static dpt_train_config cfg_for(const char *spec, uint64_t seed) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.freeze = "fbn1";
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = 0.2;
    c.epochs = 2;
    c.seed = seed;
    c.threads = 1;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.1;
    return c;
}

static dpt_trainer *new_dp(const dpt_train_config *c, const dpt_dataset *tr) {
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.0, d.clip = 1.0;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(c, tr, NULL, a, &t));
    return t;
}

static const dpt_layer *fbn_of(const dpt_trainer *t) {
    for (size_t l = 0; l < t->model->n_layers; l++)
        if (t->model->layers[l].kind == DPT_LAYER_CHANNEL_AFFINE) return &t->model->layers[l];
    return NULL;
}

/* The noise the trainer added, recovered from the layer's scale and shift, has std sigma C_p. */
static void check_noise(void) {
    enum { K = 128, SEEDS = 6 };
    const size_t n = 2000, m = 2;
    const double sigma = 1.0, C1 = 200.0, C2 = 4000.0; /* about the norms: noise small beside var ~100 */
    dpt_dataset d;
    make_data(&d, n, K, m, 10.0, 10.0, 5); /* var ~100 >> the noise on it */
    double s1[K], s2[K], e[2][SEEDS * K];
    CHECK_OK(dpt_dp_channel_sums(d.x, n, K, m, 1, C1, s1, NULL));
    CHECK_OK(dpt_dp_channel_sums(d.x, n, K, m, 2, C2, s2, NULL));
    for (int s = 0; s < SEEDS; s++) {
        dpt_train_config c = cfg_for("cnn:128x1x2:fbn,fc2", 100 + (uint64_t)s);
        dpt_trainer *t = new_dp(&c, &d);
        if (!t) break;
        CHECK_OK(dpt_trainer_feature_norm(t, sigma, C1, C2));
        const dpt_layer *L = fbn_of(t);
        for (size_t k = 0; k < K; k++) {
            const double sc = L->w[k], sh = L->w[K + k];
            CHECK(sc > 0);
            const double mu = -sh / sc, var = 1.0 / (sc * sc) - 1e-5;
            e[0][s * K + k] = mu * (double)n - s1[k];
            e[1][s * K + k] = (var + mu * mu) * (double)n - s2[k];
        }
        dpt_trainer_free(t);
    }
    for (int p = 0; p < 2; p++) {
        double mean = 0, sq = 0;
        const double want = sigma * (p ? C2 : C1);
        for (int i = 0; i < SEEDS * K; i++) mean += e[p][i], sq += e[p][i] * e[p][i];
        mean /= SEEDS * K;
        const double sd = sqrt(sq / (SEEDS * K) - mean * mean);
        /* 768 draws: the std within 10% (about 4 standard errors), the mean within 4 */
        CHECK_CLOSE(sd, want, 0, 0.10);
        CHECK(fabs(mean) < 4.0 * want / sqrt((double)(SEEDS * K)));
    }
    dpt_dataset_free(&d);
}

/* Ledger, composition, refusal, misuse. */
static void check_ledger(void) {
    dpt_dataset d;
    make_data(&d, 50, 4, 4, 0.0, 1.0, 7);
    dpt_train_config c = cfg_for("cnn:4x2x2:fbn,fc2", 9);
    dpt_trainer *t = new_dp(&c, &d);
    if (!t) return;
    CHECK_OK(dpt_trainer_feature_norm(t, 8.0, 1.0, 2.0));
    const dpt_ledger *l = dpt_trainer_ledger(t);
    CHECK(dpt_ledger_n_events(l) == 2);
    CHECK_STATUS(dpt_trainer_feature_norm(t, 8.0, 1.0, 2.0), DPT_EINVAL); /* only once */
    CHECK_OK(dpt_trainer_run(t, NULL));
    /* the run's epsilon = the two Gaussian(8) releases composed with its SGM steps */
    dpt_ledger *ref = NULL;
    CHECK_OK(dpt_ledger_new(&ref));
    CHECK_OK(dpt_ledger_add_gaussian(ref, 1.0, 8.0, NULL));
    CHECK_OK(dpt_ledger_add_gaussian(ref, 1.0, 8.0, NULL));
    CHECK_OK(dpt_ledger_add_sgm(ref, 0.2, 1.0, dpt_trainer_step(t)));
    double e1 = 0, e2 = 0, e0 = 0;
    CHECK_OK(dpt_ledger_epsilon(dpt_trainer_ledger(t), 1e-5, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &e1));
    CHECK_OK(dpt_ledger_epsilon(ref, 1e-5, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &e2));
    CHECK_CLOSE(e1, e2, 1e-12, 1e-9);
    dpt_ledger *sgm = NULL;
    CHECK_OK(dpt_ledger_new(&sgm));
    CHECK_OK(dpt_ledger_add_sgm(sgm, 0.2, 1.0, dpt_trainer_step(t)));
    CHECK_OK(dpt_ledger_epsilon(sgm, 1e-5, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &e0));
    CHECK(e1 > e0 * 1.001); /* the releases cost something */
    dpt_ledger_free(sgm);
    dpt_ledger_free(ref);
    dpt_trainer_free(t);

    /* a target the releases alone exceed (two Gaussian(8): epsilon ~0.63 at 1e-5) */
    c.target_epsilon = 0.5;
    t = new_dp(&c, &d);
    if (t) {
        CHECK_STATUS(dpt_trainer_feature_norm(t, 8.0, 1.0, 2.0), DPT_ERANGE);
        CHECK_ERR_HAS("feature normalization");
        CHECK(dpt_ledger_n_events(dpt_trainer_ledger(t)) == 0);
        const dpt_layer *L = fbn_of(t);
        CHECK(L->w[0] == 1.0f && L->w[4] == 0.0f); /* untouched: the identity */
        CHECK_OK(dpt_trainer_feature_norm(t, 30.0, 1.0, 2.0)); /* more noise fits */
    }
    dpt_trainer_free(t);
    c.target_epsilon = 0;

    /* misuse */
    dpt_train_config u = cfg_for("cnn:4x2x2:fbn,fc2", 9);
    u.freeze = NULL; /* fbn trains */
    t = new_dp(&u, &d);
    if (t) {
        CHECK_STATUS(dpt_trainer_feature_norm(t, 8.0, 1.0, 1.0), DPT_EINVAL);
        CHECK_ERR_HAS("not frozen");
    }
    dpt_trainer_free(t);
    u = cfg_for("cnn:4x2x2:gn1,fc2", 9);
    u.freeze = "gn1";
    t = new_dp(&u, &d);
    if (t) {
        CHECK_STATUS(dpt_trainer_feature_norm(t, 8.0, 1.0, 1.0), DPT_EINVAL);
        CHECK_ERR_HAS("fbn layers");
    }
    dpt_trainer_free(t);
    u = cfg_for("cnn:4x2x2:fbn,fc2", 9);
    t = new_dp(&u, &d);
    if (t) {
        CHECK_STATUS(dpt_trainer_feature_norm(t, 0.0, 1.0, 1.0), DPT_EINVAL);
        CHECK_STATUS(dpt_trainer_feature_norm(t, 8.0, -1.0, 1.0), DPT_EINVAL);
    }
    dpt_trainer_free(t);
    u.sampler = DPT_SAMPLER_SHUFFLE;
    u.batch_size = 10;
    dpt_algo *a = NULL;
    t = NULL;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_OK(dpt_trainer_new(&u, &d, NULL, a, &t));
    if (t) CHECK_STATUS(dpt_trainer_feature_norm(t, 8.0, 1.0, 1.0), DPT_EINVAL); /* no ledger */
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* A resumed run keeps the statistics bit for bit, continues bit-identically, and does not
 * release again; the feature cache built from the kept features is the forward pass. */
static void check_resume_and_cache(void) {
    dpt_dataset d;
    make_data(&d, 60, 4, 4, 1.0, 2.0, 13);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/run", tu_tmpdir());
    const char *specs[2] = {"cnn:4x2x2:fbn,flatten,fc2", "cnn:4x2x2:fbn,maxpool2,fc2"};
    for (int sp = 0; sp < 2; sp++) {
        /* uninterrupted: 6 steps */
        dpt_train_config c = cfg_for(specs[sp], 21);
        c.max_steps = 6;
        dpt_trainer *t = new_dp(&c, &d);
        if (!t) return;
        CHECK_OK(dpt_trainer_feature_norm(t, 8.0, 2.0, 8.0));
        CHECK_OK(dpt_trainer_run(t, NULL));
        CHECK(t->fc_state == 1 && t->fn_feat == NULL);
        if (t->fc_state == 1) { /* the cache holds the trunk's output of every example */
            double worst = 0;
            for (size_t e = 0; e < d.n; e++) {
                CHECK_OK(dpt_model_forward(t->model, d.x + e * d.dim, 1));
                for (size_t j = 0; j < t->fc_dim; j++)
                    worst = fmax(worst, fabs((double)t->model->act[t->fc_layer][j] - t->fc[e * t->fc_dim + j]));
            }
            CHECK(worst == 0.0);
        }
        const size_t P = t->model->n_params;
        float *full = malloc(P * sizeof *full);
        memcpy(full, t->model->theta, P * sizeof *full);
        dpt_trainer_free(t);

        /* 3 steps, then a resume to 6 */
        c.out_dir = dir;
        c.overwrite = 1;
        c.max_steps = 3;
        t = new_dp(&c, &d);
        if (!t) return;
        CHECK_OK(dpt_trainer_feature_norm(t, 8.0, 2.0, 8.0));
        const dpt_layer *L = fbn_of(t);
        float stats[8];
        memcpy(stats, L->w, sizeof stats);
        CHECK(!memcmp(stats, full + L->param_offset, sizeof stats)); /* the same release */
        CHECK_OK(dpt_trainer_run(t, NULL));
        dpt_trainer_free(t);
        c.overwrite = 0;
        c.max_steps = 6;
        t = new_dp(&c, &d);
        if (!t) return;
        CHECK_OK(dpt_trainer_resume(t));
        L = fbn_of(t);
        CHECK(!memcmp(stats, L->w, sizeof stats)); /* the checkpoint's, bit for bit */
        CHECK_STATUS(dpt_trainer_feature_norm(t, 8.0, 2.0, 8.0), DPT_EINVAL); /* never released again */
        CHECK(dpt_ledger_n_events(dpt_trainer_ledger(t)) == 3); /* two Gaussians + the SGM steps */
        CHECK_OK(dpt_trainer_run(t, NULL));
        CHECK(dpt_trainer_step(t) == 6);
        CHECK(!memcmp(full, t->model->theta, P * sizeof *full)); /* bit-identical continuation */
        dpt_trainer_free(t);
        free(full);
    }
    dpt_dataset_free(&d);
}

int main(void) {
    check_sensitivity();
    check_noise();
    check_ledger();
    check_resume_and_cache();
    TEST_MAIN_END();
}
