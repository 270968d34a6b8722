/* train: the frozen trunk's feature cache (dpt_train_config.no_feature_cache). A run that
 * trains from the cached output of its frozen layers ends at the parameters of the same run
 * that computes them at every step, up to float rounding (the trunk's forward pass runs on
 * other batches, and a GEMM's rounding depends on the batch's size: a wrong row, stride or
 * layer would differ by orders of magnitude more): DP-SGD on the fast and the reference path
 * (whose chunks index x by the cached row width), flat and per-layer clipping, 3 shards,
 * regression targets, a convolutional trunk. A resumed run rebuilds the cache in the same
 * chunks and continues bit-identically; a run whose frozen parameters changed after the
 * cache was built computes it again. The cache is used only where it applies (a note says
 * why not: a residual connection from below the trained layers, the switch) and holds the
 * trunk's output for every example. */
#include <dptrain/train.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testdata.h"
#include "testutil.h"
#include "train/train_internal.h"

static char last_note[512];
static void on_log(void *user, dpt_log_level level, const char *msg) {
    (void)user, (void)level;
    if (strstr(msg, "frozen layers") || strstr(msg, "fixed layers")) snprintf(last_note, sizeof last_note, "%s", msg);
}

static dpt_train_config cfg_for(const char *spec, const char *freeze) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.freeze = freeze;
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = 0.1;
    c.epochs = 2;
    c.seed = 11;
    c.threads = 2;
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.optim.lr = 0.01;
    c.log = on_log;
    return c;
}

/* A DP-SGD run; *state receives its cache state, theta its final parameters (malloc'd). */
static float *dp_run(dpt_train_config c, const dpt_dataset *tr, int reference, dpt_clip_mode mode, int *state,
                     size_t *P) {
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.0, d.clip = 0.5, d.reference = reference, d.ref_chunk = 7, d.clip_mode = mode;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
    if (!t) return NULL;
    CHECK_OK(dpt_trainer_run(t, NULL));
    *state = t->fc_state;
    *P = t->model->n_params;
    float *theta = malloc(*P * sizeof *theta);
    memcpy(theta, t->model->theta, *P * sizeof *theta);
    if (t->fc_state == 1) { /* the cache holds the trunk's output of every example */
        dpt_model *m = t->model;
        double worst = 0;
        for (size_t e = 0; e < t->train->n; e += 37) {
            CHECK_OK(dpt_model_forward(m, t->train->x + e * t->train->dim, 1));
            for (size_t j = 0; j < t->fc_dim; j++)
                worst = fmax(worst, fabs((double)m->act[t->fc_layer][j] - t->fc[e * t->fc_dim + j]) /
                                        (1 + fabs((double)m->act[t->fc_layer][j])));
        }
        CHECK(worst < 1e-6);
    }
    dpt_trainer_free(t);
    return theta;
}

/* The cached and the uncached run of c end at the same parameters up to rounding (and
 * bit for bit when the cache is not used); the cache is used (want_state 1) or not (-1)
 * with `note` in the log. */
static void same_run(dpt_train_config c, const dpt_dataset *tr, int reference, dpt_clip_mode mode, int want_state,
                     const char *note) {
    int s1 = 0, s2 = 0;
    size_t P = 0;
    last_note[0] = 0;
    float *a = dp_run(c, tr, reference, mode, &s1, &P);
    if (!strstr(last_note, note)) {
        fprintf(stderr, "%s (freeze %s): note '%s' lacks '%s'\n", c.model_spec, c.freeze, last_note, note);
        CHECK(0);
    }
    c.no_feature_cache = 1;
    float *b = dp_run(c, tr, reference, mode, &s2, &P);
    CHECK(s1 == want_state && s2 == -1);
    if (a && b) {
        double worst = 0, moved = 0;
        for (size_t j = 0; j < P; j++) worst = fmax(worst, fabs((double)a[j] - b[j]));
        for (size_t j = 0; j < P; j++) moved = fmax(moved, fabs((double)b[j]));
        if (want_state == -1) CHECK(worst == 0);
        if (worst > 1e-6 * moved)
            fprintf(stderr, "%s (freeze %s, reference %d): parameters differ by %g (largest %g)\n", c.model_spec,
                    c.freeze, reference, worst, moved);
        CHECK(worst <= 1e-6 * moved);
    }
    free(a), free(b);
}

static const char *CNN = "cnn:2x2x2:conv3k2p1,relu,[conv16k3p1,gn2,relu,conv3k3p1],relu,maxpool2s1,fc3";

static int stop_at_2(void *user, const dpt_step_info *info) {
    (void)user;
    return info->step == 2;
}

/* The frozen trunk's parameters change after its features were cached: a first run fails at
 * its first step (the head's values overflow the loss; the cache is already built and the
 * run is still fresh), dpt_trainer_set_initial_params gives other values, trunk included;
 * that run stops after 2 steps and the caller scales the trunk's weights before running on.
 * Returns the final parameters (malloc'd): a run must compute the trunk from the values it
 * has, so they equal those of the same calls without the cache. */
static float *changed_trunk(const dpt_dataset *tr, int no_cache, size_t *P) {
    dpt_train_config c = cfg_for("mlp:8-16-16-3:gelu", "fc1");
    c.no_feature_cache = no_cache;
    c.max_steps = 6;
    c.on_step = stop_at_2;
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.0, d.clip = 0.5;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
    if (!t) return NULL;
    dpt_model *m = t->model;
    *P = m->n_params;
    const size_t trunk = m->layers[0].n_params, head = m->layers[m->n_layers - 1].param_offset;
    float *v = malloc(*P * sizeof *v);
    memcpy(v, m->theta, *P * sizeof *v);
    for (size_t j = 0; j < trunk; j++) v[j] *= 2;
    for (size_t j = head; j < *P; j++) v[j] = 3e38f;
    CHECK_OK(dpt_trainer_set_initial_params(t, v, *P, "overflowing head"));
    CHECK(dpt_trainer_run(t, NULL) == DPT_ERANGE && dpt_trainer_step(t) == 0);
    CHECK(t->fc_state == (no_cache ? -1 : 1)); /* built before the step failed */
    for (size_t j = 0; j < trunk; j++) v[j] *= 0.25f;
    for (size_t j = head; j < *P; j++) v[j] = 0.01f * (float)(j % 7);
    CHECK_OK(dpt_trainer_set_initial_params(t, v, *P, "other values"));
    CHECK_OK(dpt_trainer_run(t, NULL));
    CHECK(dpt_trainer_step(t) == 2);
    for (size_t j = 0; j < trunk; j++) m->theta[j] *= 3; /* behind the API, between runs */
    c.on_step = NULL;
    t->cfg.on_step = NULL;
    CHECK_OK(dpt_trainer_run(t, NULL));
    CHECK(dpt_trainer_step(t) == 6 && t->fc_state == (no_cache ? -1 : 1));
    memcpy(v, m->theta, *P * sizeof *v);
    dpt_trainer_free(t);
    return v;
}

/* A scattering trunk (nothing frozen: the layer is fixed): a DP-SGD run with a test set, its
 * last epoch's result in *r; *state its cache state, *kept whether the test features were
 * kept. Returns its final parameters (malloc'd). */
static float *scatter_run(dpt_train_config c, const dpt_dataset *tr, const dpt_dataset *te, dpt_epoch_result *r,
                          int *state, int *kept, size_t *P) {
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.0, d.clip = 0.5;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(&c, tr, te, a, &t));
    if (!t) return NULL;
    CHECK_OK(dpt_trainer_run(t, r));
    *state = t->fc_state;
    *kept = t->fc_test != NULL;
    *P = t->model->n_params;
    float *theta = malloc(*P * sizeof *theta);
    memcpy(theta, t->model->theta, *P * sizeof *theta);
    dpt_trainer_free(t);
    return theta;
}

/* scatter + linear and scatter + GroupNorm + linear: trained from the cached scattering
 * features (training and test sets), they end where the uncached run ends and report the same
 * test loss and accuracy */
static void scatter_cases(void) {
    dpt_dataset tr, te;
    tu_make_clusters(&tr, 300, 1, 8, 8, 3, 21, 1.0, 0.8, 1.0f);
    tu_make_clusters(&te, 90, 1, 8, 8, 3, 22, 1.0, 0.8, 1.0f);
    /* classes apart in brightness, which the low-pass path S0 sees */
    for (int k = 0; k < 2; k++) {
        dpt_dataset *d = k ? &te : &tr;
        for (size_t i = 0; i < d->n * d->dim; i++) d->x[i] += 1.5f * (float)d->y[i / d->dim];
    }
    const char *specs[] = {"cnn:1x8x8:scatter,fc3", "cnn:1x8x8:scatter,gn27,fc3", "cnn:1x8x8:scatter,gn27,fc3"};
    const char *freeze[] = {NULL, NULL, "gn1"};
    for (int k = 0; k < 3; k++) {
        dpt_train_config c = cfg_for(specs[k], freeze[k]);
        dpt_epoch_result r1, r2;
        int s1 = 0, s2 = 0, kept1 = 0, kept2 = 0;
        size_t P = 0;
        last_note[0] = 0;
        float *a = scatter_run(c, &tr, &te, &r1, &s1, &kept1, &P);
        CHECK(s1 == 1 && kept1 && strstr(last_note, k == 2 ? "frozen layers" : "fixed layers") &&
              strstr(last_note, "computed once"));
        c.no_feature_cache = 1;
        float *b = scatter_run(c, &tr, &te, &r2, &s2, &kept2, &P);
        CHECK(s2 == -1 && !kept2);
        if (a && b) {
            double worst = 0, moved = 0;
            for (size_t j = 0; j < P; j++) worst = fmax(worst, fabs((double)a[j] - b[j])), moved = fmax(moved, fabs(b[j]));
            if (!(worst <= 1e-6 * moved))
                fprintf(stderr, "%s: cached and uncached parameters differ by %g (largest %g)\n", specs[k], worst, moved);
            CHECK(worst <= 1e-6 * moved && moved > 0);
            CHECK_CLOSE(r1.test_loss, r2.test_loss, 1e-6, 1e-5);
            printf("%s: test accuracy %.4f (cached) %.4f (uncached), loss %.6f %.6f\n", specs[k], r1.test_accuracy,
                   r2.test_accuracy, r1.test_loss, r2.test_loss);
            CHECK(r1.test_accuracy == r2.test_accuracy);
            if (k == 0) CHECK(r1.test_accuracy > 0.6); /* it learned (GroupNorm removes the brightness these classes differ by) */
        }
        free(a), free(b);
    }
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);
}

int main(void) {
    scatter_cases();
    dpt_dataset tr;
    tu_make_blobs(&tr, 400, 3, 1.0f);
    const char *MLP = "mlp:8-16-16-3:gelu";
    for (int reference = 0; reference < 2; reference++)
        for (int mode = 0; mode < 2; mode++) {
            same_run(cfg_for(MLP, "fc1"), &tr, reference, mode ? DPT_CLIP_PER_LAYER : DPT_CLIP_FLAT, 1,
                     "computed once");
            same_run(cfg_for(MLP, "fc1,fc2"), &tr, reference, mode ? DPT_CLIP_PER_LAYER : DPT_CLIP_FLAT, 1,
                     "computed once");
        }
    /* 3 shards */
    dpt_train_config c = cfg_for(MLP, "fc1");
    c.shards = 3;
    same_run(c, &tr, 0, DPT_CLIP_FLAT, 1, "computed once");
    /* a convolutional trunk: conv1 cached (the residual group starts at the trained conv2);
     * conv1 and conv2 frozen: gn1 trains inside the group, whose skip starts below it */
    CHECK_OK(dpt_dataset_set_shape(&tr, 2, 2, 2));
    same_run(cfg_for(CNN, "conv1"), &tr, 0, DPT_CLIP_FLAT, 1, "computed once");
    same_run(cfg_for(CNN, "conv1"), &tr, 1, DPT_CLIP_FLAT, 1, "computed once");
    same_run(cfg_for(CNN, "conv1,conv2"), &tr, 0, DPT_CLIP_FLAT, -1, "a residual connection skips");
    /* the switch itself: the note says why */
    c = cfg_for(MLP, "fc1");
    c.no_feature_cache = 1;
    int st = 0;
    size_t P = 0;
    last_note[0] = 0;
    free(dp_run(c, &tr, 0, DPT_CLIP_FLAT, &st, &P));
    CHECK(st == -1 && strstr(last_note, "no_feature_cache is set"));
    /* nothing frozen below the trained layers (fc3 frozen only): nothing to cache, no note */
    last_note[0] = 0;
    free(dp_run(cfg_for(MLP, "fc3"), &tr, 0, DPT_CLIP_FLAT, &st, &P));
    CHECK(st == -1 && last_note[0] == 0);

    /* regression targets */
    dpt_dataset rg;
    float *t = malloc(400 * 2 * sizeof *t);
    for (size_t i = 0; i < 400; i++) t[2 * i] = tr.x[8 * i] - tr.x[8 * i + 3], t[2 * i + 1] = 0.5f * tr.x[8 * i + 1];
    CHECK_OK(dpt_dataset_from_targets(tr.x, t, 400, 8, 2, &rg));
    c = cfg_for("mlp:8-16-16-2:tanh", "fc1");
    c.loss = DPT_LOSS_SQUARED;
    same_run(c, &rg, 0, DPT_CLIP_FLAT, 1, "computed once");
    same_run(c, &rg, 1, DPT_CLIP_FLAT, 1, "computed once");

    /* the trunk's parameters changed after the cache was built */
    last_note[0] = 0;
    float *ch = changed_trunk(&tr, 0, &P), *un = changed_trunk(&tr, 1, &P);
    if (ch && un) {
        double worst = 0, moved = 0;
        for (size_t j = 0; j < P; j++) worst = fmax(worst, fabs((double)ch[j] - un[j]));
        for (size_t j = 0; j < P; j++) moved = fmax(moved, fabs((double)un[j]));
        if (worst > 1e-6 * moved) fprintf(stderr, "changed trunk: parameters differ by %g (largest %g)\n", worst, moved);
        CHECK(worst <= 1e-6 * moved);
    }
    free(ch), free(un);

    /* a resumed run rebuilds the cache and continues bit-identically */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/fc_run", tu_tmpdir());
    c = cfg_for(MLP, "fc1");
    c.out_dir = dir;
    c.max_steps = 5;
    int s1 = 0;
    free(dp_run(c, &tr, 0, DPT_CLIP_FLAT, &s1, &P));
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.0, d.clip = 0.5;
    dpt_algo *a = NULL;
    dpt_trainer *tn = NULL;
    c.max_steps = 12;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(&c, &tr, NULL, a, &tn));
    CHECK_OK(dpt_trainer_resume(tn));
    CHECK_OK(dpt_trainer_run(tn, NULL));
    c.out_dir = NULL;
    float *whole = dp_run(c, &tr, 0, DPT_CLIP_FLAT, &s1, &P); /* cached, uninterrupted */
    if (tn && whole) CHECK(tn->fc_state == 1 && dpt_trainer_step(tn) == 12 && !memcmp(tn->model->theta, whole, P * 4));
    dpt_trainer_free(tn);
    free(whole);
    dpt_dataset_free(&rg);
    free(t);
    dpt_dataset_free(&tr);
    TEST_MAIN_END();
}
