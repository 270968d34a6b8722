/* train: techniques beyond plain DP-SGD (issue 42 item 4) on synthetic 2x6x6 images made
 * here. Augmentation: the crop/flip copies against a padded array built by hand; with
 * K copies DP-SGD's pre-noise sum equals a naive reference (each copy's gradient by its own
 * forward and backward pass, averaged, clipped in double, summed), flat and per-layer, for
 * K = 1 (the ordinary paths on the copies) and K > 1; neighbouring batches differ by the
 * removed example's clipped mean gradient (at most C, equal to C when it is clipped); an
 * example's copies change with the step. Parameter averaging: the trainer's EMA equals a
 * naive double EMA of the parameters after each step (with and without warm-up), the
 * checkpoint's model tensors are the EMA and "train.theta" the raw parameters, the epoch's
 * test_accuracy_ema is the EMA model's, and a resumed run (with augmentation) ends with the
 * same parameters and EMA, bit for bit, as an uninterrupted one. Bad settings are refused. */
#include <dptrain/io.h>
#include <dptrain/optim.h>
#include <dptrain/privacy.h>
#include <dptrain/train.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/augment.h"
#include "io/checkpoint_ema.h"
#include "testdata.h"
#include "testalgo.h"
#include "testutil.h"
#include "train/train_internal.h"

#define IC 2
#define IH 6
#define IW 6
#define ID (IC * IH * IW)
static const char *SPEC = "cnn:2x6x6:conv3k3p1,relu,maxpool2,flatten,fc3";

/* n images of 3 classes: a class-dependent bright corner plus noise */
static void make_images(dpt_dataset *d, size_t n, uint64_t seed) {
    float *x = malloc(n * ID * sizeof *x);
    int32_t *y = malloc(n * sizeof *y);
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++) {
        y[i] = (int32_t)(i % 3);
        for (size_t j = 0; j < ID; j++) x[i * ID + j] = 0.5f * dpt_rng_gauss(&r);
        for (size_t c = 0; c < IC; c++) x[i * ID + c * IH * IW + (size_t)y[i] * 2 * IW + (size_t)y[i]] += 2.0f;
    }
    dpt_rng_free(&r);
    CHECK_OK(dpt_dataset_from_arrays(x, y, n, ID, 3, d));
    free(x);
    free(y);
}

static dpt_train_config base_cfg(void) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = SPEC;
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = 0.2;
    c.epochs = 1;
    c.seed = 7;
    c.threads = 1;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.5;
    c.optim.momentum = 0.9;
    return c;
}

static dpt_trainer *make_dp(const dpt_train_config *c, const dpt_dataset *tr, const dpt_dataset *te, double C,
                            dpt_clip_mode mode, int reference, dpt_algo **algo) {
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.0, d.clip = C, d.clip_mode = mode, d.reference = reference, d.ref_chunk = 3;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    if (!a) return NULL;
    CHECK_OK(dpt_trainer_new(c, tr, te, a, &t));
    if (algo) *algo = a;
    return t;
}

/* ==== the copies ==== */

static void test_copies(void) {
    /* x [2, 6, 6] with distinct values; pad 4 reflect-padded by hand into [2, 14, 14] */
    float x[ID], xp[IC][IH + 8][IW + 8], out[4 * ID];
    for (size_t j = 0; j < ID; j++) x[j] = (float)j;
    for (size_t c = 0; c < IC; c++)
        for (int i = -4; i < IH + 4; i++)
            for (int j = -4; j < IW + 4; j++) {
                int u = i < 0 ? -i : i >= IH ? 2 * (IH - 1) - i : i;
                int v = j < 0 ? -j : j >= IW ? 2 * (IW - 1) - j : j;
                xp[c][i + 4][j + 4] = x[(c * IH + (size_t)u) * IW + (size_t)v];
            }
    /* words: (dy, dx, flip) = (0, 8, odd), (4, 4, even), (8, 0, odd), (5, 2, odd) */
    const uint32_t span = 9;
    uint32_t words[12];
    const uint32_t want[4][3] = {{0, 8, 1}, {4, 4, 0}, {8, 0, 1}, {5, 2, 1}};
    for (int k = 0; k < 4; k++) {
        /* the smallest word w with floor(w 9 / 2^32) = want: ceil(want 2^32 / 9) */
        words[3 * k] = (uint32_t)(((uint64_t)want[k][0] << 32) / span + (want[k][0] ? 1 : 0));
        words[3 * k + 1] = (uint32_t)(((uint64_t)want[k][1] << 32) / span + (want[k][1] ? 1 : 0));
        words[3 * k + 2] = want[k][2] + 6; /* parity is what counts */
    }
    for (int flip = 0; flip < 2; flip++) {
        dpt_augment_copies(x, IC, IH, IW, 4, flip, 4, words, out);
        for (int k = 0; k < 4; k++) {
            const int fl = flip && (want[k][2] & 1);
            int bad = 0;
            for (size_t c = 0; c < IC; c++)
                for (size_t i = 0; i < IH; i++)
                    for (size_t j = 0; j < IW; j++) {
                        size_t jj = fl ? IW - 1 - j : j;
                        float ref = xp[c][i + want[k][0]][jj + want[k][1]];
                        bad += out[k * ID + (c * IH + i) * IW + j] != ref;
                    }
            CHECK(bad == 0);
        }
        /* offset (4, 4) without a flip is the image itself */
        CHECK(!memcmp(out + ID, x, sizeof x));
    }
}

/* ==== augmentation multiplicity: the clipped sum against a naive reference ==== */

/* Naive: for each example i of idx, its K copies (dpt_train_augment, as the trainer keys
 * them), each copy's loss gradient by a forward and backward pass of that copy alone, their
 * mean in double, clipped (flat: to C; per-layer: each layer to C / sqrt(G)) and summed. */
static void naive_sum(dpt_trainer *t, const dpt_dataset *d, const uint32_t *idx, size_t b, size_t K, double C,
                      dpt_clip_mode mode, double *sum, double *last) {
    dpt_model *ref = NULL;
    CHECK_OK(dpt_model_new(SPEC, 1, 1, &ref));
    const dpt_model *m = dpt_trainer_model(t);
    const size_t P = m->n_params;
    memcpy(ref->theta, m->theta, P * sizeof *ref->theta);
    float *copies = malloc(K * ID * sizeof *copies), *g = malloc(P * sizeof *g), dout[3];
    double *mean = malloc(P * sizeof *mean);
    size_t G = 0;
    for (size_t l = 0; l < m->n_layers; l++) G += m->layers[l].n_params > 0;
    memset(sum, 0, P * sizeof *sum);
    for (size_t i = 0; i < b; i++) {
        CHECK_OK(dpt_train_augment(t, d->x + (size_t)idx[i] * ID, idx + i, 1, K, copies));
        memset(mean, 0, P * sizeof *mean);
        for (size_t k = 0; k < K; k++) {
            CHECK_OK(dpt_model_forward(ref, copies + k * ID, 1));
            CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, dpt_model_output(ref), 1, 3, d->y + idx[i], NULL, NULL, dout));
            CHECK_OK(dpt_model_backward(ref, dout, 1));
            CHECK_OK(dpt_model_param_grad(ref, 1, DPT_GRAD_SUM, NULL, g, 0, 0));
            for (size_t j = 0; j < P; j++) mean[j] += (double)g[j] / (double)K;
        }
        for (size_t l = 0; l < m->n_layers; l++) {
            const dpt_layer *L = &m->layers[l];
            if (!L->n_params) continue;
            size_t lo = mode == DPT_CLIP_FLAT ? 0 : L->param_offset, hi = mode == DPT_CLIP_FLAT ? P : lo + L->n_params;
            double Cl = mode == DPT_CLIP_FLAT ? C : C / sqrt((double)G), nn = 0;
            for (size_t j = lo; j < hi; j++) nn += mean[j] * mean[j];
            double f = fmin(1.0, Cl / sqrt(nn));
            for (size_t j = lo; j < hi; j++) {
                sum[j] += f * mean[j];
                if (last && i == b - 1) last[j] = f * mean[j];
            }
            if (mode == DPT_CLIP_FLAT) break;
        }
    }
    free(copies), free(g), free(mean);
    dpt_model_free(ref);
}

static void test_mult_reference(const dpt_dataset *d, size_t K, dpt_clip_mode mode, int reference, double C) {
    dpt_train_config c = base_cfg();
    c.augment = DPT_AUGMENT_CROP_FLIP;
    c.aug_mult = K;
    dpt_algo *a;
    dpt_trainer *t = make_dp(&c, d, NULL, C, mode, reference, &a);
    if (!t) return;
    const size_t P = dpt_trainer_model(t)->n_params, b = 9;
    uint32_t idx[9] = {3, 0, 17, 8, 22, 5, 11, 29, 14};
    float *x = malloc(b * ID * sizeof *x), *got = malloc(P * sizeof *got), *got2 = malloc(P * sizeof *got2);
    int32_t y[9];
    dpt_dataset_gather(d, idx, b, x, y);
    double *want = malloc(P * sizeof *want), *want2 = malloc(P * sizeof *want2), *last = malloc(P * sizeof *last);
    t->chunk_idx = idx;
    tu_algo_grad(t, a, x, y, b, 0, got);
    naive_sum(t, d, idx, b, K, C, mode, want, last);
    double nw = 0;
    for (size_t j = 0; j < P; j++) {
        CHECK_CLOSE(got[j], want[j], 1e-5 * C * b, 1e-4);
        nw += want[j] * want[j];
    }
    CHECK(nw > 0);
    /* sensitivity: the batch without its last example (same keys for the others) */
    tu_algo_grad(t, a, x, y, b - 1, 0, got2);
    naive_sum(t, d, idx, b - 1, K, C, mode, want2, NULL);
    double dd = 0, nl = 0;
    for (size_t j = 0; j < P; j++) {
        dd += ((double)got[j] - got2[j]) * ((double)got[j] - got2[j]);
        nl += last[j] * last[j];
        CHECK_CLOSE(got2[j], want2[j], 1e-5 * C * b, 1e-4);
    }
    CHECK(sqrt(dd) <= C * (1 + 1e-5));
    CHECK_CLOSE(sqrt(dd), sqrt(nl), 1e-5 * C * b, 1e-3);
    if (mode == DPT_CLIP_FLAT && C < 1) CHECK_CLOSE(sqrt(nl), C, 0, 1e-5); /* clipped: the bound is reached */
    if (C > 1) CHECK(sqrt(nl) < 0.5 * C); /* not clipped: the mean itself (its 1/K shows) */
    /* the copies change with the step (same example, same seed) */
    float *c0 = malloc(K * ID * sizeof *c0), *c1 = malloc(K * ID * sizeof *c1);
    CHECK_OK(dpt_train_augment(t, x, idx, 1, K, c0));
    t->step = 1;
    CHECK_OK(dpt_train_augment(t, x, idx, 1, K, c1));
    CHECK(memcmp(c0, c1, K * ID * sizeof *c0) != 0);
    t->step = 0;
    free(x), free(got), free(got2), free(want), free(want2), free(last), free(c0), free(c1);
    dpt_trainer_free(t);
}

/* Adaptive clipping with K > 1 copies: each example's clipped mean is clipped to the
 * current C_t (the clip the noise sigma_Delta C_t is drawn for), not the starting --clip,
 * and the centred count sum_i (1[||gbar_i|| <= C_t] - 1/2) is the copies' mean's. C_t is
 * set below the starting clip through the checkpoint's algorithm state: with the starting
 * clip the sum would exceed the sensitivity the noise covers. */
static void test_mult_adaptive(const dpt_dataset *d, size_t K, dpt_clip_mode mode) {
    dpt_train_config c = base_cfg();
    c.augment = DPT_AUGMENT_CROP_FLIP;
    c.aug_mult = K;
    dpt_dpsgd_config dc = dpt_dpsgd_config_defaults();
    dc.sigma = 1.0, dc.clip = 100.0, dc.clip_mode = mode, dc.adaptive_quantile = 0.5, dc.adaptive_sigma_b = 2.0;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&dc, &a));
    if (!a) return;
    CHECK_OK(dpt_trainer_new(&c, d, NULL, a, &t));
    if (!t) return;
    const double Ct = 0.05;
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "clip", Ct);
    CHECK_OK(a->state_load(a, st));
    cJSON_Delete(st);
    CHECK_CLOSE(dpt_algo_dpsgd_clip(a), Ct, 0, 0);
    const size_t P = dpt_trainer_model(t)->n_params, b = 9;
    uint32_t idx[9] = {3, 0, 17, 8, 22, 5, 11, 29, 14};
    float *x = malloc(b * ID * sizeof *x), *got = malloc(P * sizeof *got), *got2 = malloc(P * sizeof *got2);
    int32_t y[9];
    dpt_dataset_gather(d, idx, b, x, y);
    double *want = malloc(P * sizeof *want);
    t->chunk_idx = idx;
    tu_algo_grad(t, a, x, y, b, 0, got);
    naive_sum(t, d, idx, b, K, Ct, mode, want, NULL);
    for (size_t j = 0; j < P; j++) CHECK_CLOSE(got[j], want[j], 1e-5 * Ct * b, 1e-4);
    /* every mean is clipped at C_t = 0.05: the centred count is -b/2 */
    CHECK_CLOSE(a->sums[0], -0.5 * (double)b, 0, 0);
    /* sensitivity: without the last example the sum moves by at most C_t */
    tu_algo_grad(t, a, x, y, b - 1, 0, got2);
    double dd = 0;
    for (size_t j = 0; j < P; j++) dd += ((double)got[j] - got2[j]) * ((double)got[j] - got2[j]);
    CHECK(sqrt(dd) <= Ct * (1 + 1e-5));
    free(x), free(got), free(got2), free(want);
    dpt_trainer_free(t);
}

/* ==== parameter averaging ==== */

typedef struct {
    const dpt_trainer *t;
    double *e; /* naive EMA in double */
    double decay;
    int warmup;
    size_t P;
    int bad;
} ema_ref;

static int on_step_ema(void *user, const dpt_step_info *info) {
    ema_ref *r = user;
    const dpt_model *m = dpt_trainer_model((dpt_trainer *)r->t);
    const double tt = (double)(info->step - 1);
    double dec = r->decay;
    if (r->warmup && (1 + tt) / (10 + tt) < dec) dec = (1 + tt) / (10 + tt);
    for (size_t j = 0; j < r->P; j++) r->e[j] = dec * r->e[j] + (1 - dec) * (double)m->theta[j];
    for (size_t j = 0; j < r->P; j++) r->bad += !(fabs(r->t->ema[j] - r->e[j]) <= 1e-6 + 1e-5 * fabs(r->e[j]));
    return 0;
}

static void test_ema_reference(const dpt_dataset *tr, const dpt_dataset *te, double decay, int warmup) {
    const char *dir = tu_tmpdir();
    char out[256], ck[300];
    snprintf(out, sizeof out, "%s/ema_%d", dir, warmup);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", out);
    dpt_train_config c = base_cfg();
    c.ema_decay = decay;
    c.ema_warmup = warmup;
    c.out_dir = out;
    c.epochs = 2;
    ema_ref r = {0};
    c.on_step = on_step_ema;
    c.user = &r;
    dpt_trainer *t = make_dp(&c, tr, te, 0.5, DPT_CLIP_FLAT, 0, NULL);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    r.t = t, r.decay = decay, r.warmup = warmup, r.P = m->n_params;
    r.e = malloc(r.P * sizeof *r.e);
    for (size_t j = 0; j < r.P; j++) r.e[j] = m->theta[j];
    dpt_epoch_result res;
    CHECK_OK(dpt_trainer_run(t, &res));
    CHECK(dpt_trainer_step(t) >= 8);
    CHECK(r.bad == 0);
    /* the EMA moved away from the raw parameters (else the comparison is empty) */
    double dif = 0;
    for (size_t j = 0; j < r.P; j++) dif += fabs((double)t->ema[j] - m->theta[j]);
    CHECK(dif > 1e-3);
    /* the checkpoint: model tensors = EMA (what predict and evaluate load), train.theta = raw */
    dpt_model *ld = NULL;
    CHECK_OK(dpt_model_new(SPEC, 64, 1, &ld));
    CHECK_OK(dpt_checkpoint_load(ck, ld, NULL, NULL));
    CHECK(!memcmp(ld->theta, t->ema, r.P * sizeof(float)));
    float *ema2 = malloc(r.P * sizeof *ema2);
    CHECK_OK(dpt_checkpoint_load_ema(ck, ld, NULL, NULL, ema2));
    CHECK(!memcmp(ld->theta, m->theta, r.P * sizeof(float)));
    CHECK(!memcmp(ema2, t->ema, r.P * sizeof(float)));
    /* the epoch's EMA accuracy is the EMA model's */
    double loss = 0, acc = 0;
    memcpy(ld->theta, t->ema, r.P * sizeof(float));
    CHECK_OK(dpt_evaluate(ld, DPT_LOSS_SOFTMAX_CE, te, &loss, &acc));
    CHECK(acc == res.test_accuracy_ema && loss == res.test_loss_ema);
    CHECK(isfinite(res.test_accuracy) && isfinite(res.test_accuracy_ema));
    free(ema2), free(r.e);
    dpt_model_free(ld);
    dpt_trainer_free(t);
}

/* ==== resume: same EMA and parameters as an uninterrupted run ==== */

static dpt_status run_to(const dpt_dataset *tr, const char *out, uint64_t epochs, int resume, double decay,
                         float *theta, float *ema) {
    dpt_train_config c = base_cfg();
    c.ema_decay = decay;
    c.ema_warmup = decay > 0;
    c.augment = DPT_AUGMENT_CROP_FLIP;
    c.aug_mult = 2;
    c.out_dir = out;
    c.epochs = epochs;
    c.seed = resume ? 0 : 7; /* a resume continues with the run's own seed */
    dpt_trainer *t = make_dp(&c, tr, NULL, 0.5, DPT_CLIP_FLAT, 0, NULL);
    if (!t) return DPT_EINVAL;
    dpt_status s = resume ? dpt_trainer_resume(t) : DPT_OK;
    if (s == DPT_OK) s = dpt_trainer_run(t, NULL);
    if (s == DPT_OK && theta) {
        memcpy(theta, dpt_trainer_model(t)->theta, dpt_trainer_model(t)->n_params * sizeof(float));
        memcpy(ema, t->ema, dpt_trainer_model(t)->n_params * sizeof(float));
    }
    dpt_trainer_free(t);
    return s;
}

static void test_resume(const dpt_dataset *tr) {
    const char *dir = tu_tmpdir();
    char a[256], b[256];
    snprintf(a, sizeof a, "%s/whole", dir);
    snprintf(b, sizeof b, "%s/split", dir);
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(SPEC, 1, 1, &m));
    const size_t P = m->n_params;
    dpt_model_free(m);
    float *ta = malloc(P * sizeof *ta), *ea = malloc(P * sizeof *ea), *tb = malloc(P * sizeof *tb),
          *eb = malloc(P * sizeof *eb);
    CHECK_OK(run_to(tr, a, 3, 0, 0.9, ta, ea));
    CHECK_OK(run_to(tr, b, 1, 0, 0.9, NULL, NULL));
    /* other averaging or none: refused, naming it */
    CHECK_STATUS(run_to(tr, b, 3, 1, 0.99, NULL, NULL), DPT_EMISMATCH);
    CHECK(strstr(dpt_last_error(), "parameter averaging") != NULL);
    CHECK_STATUS(run_to(tr, b, 3, 1, 0.0, NULL, NULL), DPT_EMISMATCH);
    CHECK_OK(run_to(tr, b, 3, 1, 0.9, tb, eb));
    CHECK(!memcmp(ta, tb, P * sizeof *ta));
    CHECK(!memcmp(ea, eb, P * sizeof *ea));
    CHECK(memcmp(ta, ea, P * sizeof *ta) != 0);
    free(ta), free(ea), free(tb), free(eb);
}

/* ==== refusals ==== */

static void test_refusals(const dpt_dataset *tr, const dpt_dataset *blobs) {
    dpt_train_config c = base_cfg();
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    c.ema_decay = 1.0;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_STATUS(dpt_trainer_new(&c, tr, NULL, a, &t), DPT_EINVAL);
    c = base_cfg();
    c.aug_mult = 4; /* copies without an augmentation */
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_STATUS(dpt_trainer_new(&c, tr, NULL, a, &t), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "aug_mult") != NULL);
    c = base_cfg();
    c.augment = DPT_AUGMENT_CROP;
    c.model_spec = "mlp:8-4-3"; /* flat inputs */
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_STATUS(dpt_trainer_new(&c, blobs, NULL, a, &t), DPT_EINVAL);
    c = base_cfg();
    c.augment = DPT_AUGMENT_CROP;
    CHECK_OK(dpt_algo_sgd_new(&a)); /* not augmentable */
    CHECK_STATUS(dpt_trainer_new(&c, tr, NULL, a, &t), DPT_ENOTSUP);
    CHECK(t == NULL);
    /* DP-ULR's estimate needs layers linear in their weights: a ws convolution is refused */
    c = base_cfg();
    c.model_spec = "cnn:2x6x6:conv3k3p1ws,relu,flatten,fc3";
    c.sampler = DPT_SAMPLER_POISSON_REJECT;
    c.min_batch = 2;
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    c.max_steps = 1;
    CHECK_OK(dpt_algo_dpulr_new(&u, &a));
    CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
    CHECK_STATUS(dpt_trainer_run(t, NULL), DPT_ENOTSUP); /* the modules are set up at the first step */
    CHECK(strstr(dpt_last_error(), "weight-standardized") != NULL);
    dpt_trainer_free(t);
}

int main(void) {
    dpt_dataset tr, te, blobs;
    make_images(&tr, 40, 1);
    make_images(&te, 30, 2);
    tu_make_blobs(&blobs, 50, 1, 1.0f);
    test_copies();
    /* C small enough that every example is clipped (the sensitivity bound is reached) */
    test_mult_reference(&tr, 4, DPT_CLIP_FLAT, 0, 0.05);
    test_mult_reference(&tr, 3, DPT_CLIP_PER_LAYER, 0, 0.05);
    test_mult_reference(&tr, 1, DPT_CLIP_FLAT, 0, 0.05);
    test_mult_reference(&tr, 1, DPT_CLIP_FLAT, 1, 0.05);
    test_mult_reference(&tr, 2, DPT_CLIP_FLAT, 0, 0.05);
    /* and C large enough that none is (the sum of the means themselves) */
    test_mult_reference(&tr, 3, DPT_CLIP_FLAT, 0, 100.0);
    test_mult_adaptive(&tr, 3, DPT_CLIP_FLAT);
    test_mult_adaptive(&tr, 2, DPT_CLIP_PER_LAYER);
    test_ema_reference(&tr, &te, 0.9, 1);
    test_ema_reference(&tr, &te, 0.8, 0);
    test_resume(&tr);
    test_refusals(&tr, &blobs);
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);
    dpt_dataset_free(&blobs);
    TEST_MAIN_END();
}
