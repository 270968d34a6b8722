/* train on sequences: DP-SGD (flat and per-layer clipping, fast path) trains a small text
 * classifier (token + position embedding, LayerNorm, position-wise Linear, GELU, mean
 * pooling, Linear) and a one-layer pre-LN transformer on synthetic token data made here,
 * through the engine, and reaches well above chance on held-out sequences; the fast
 * path's clipped sum equals the materialized reference on the same batch. A small causal
 * language model (gpt_tiny's structure at width 16) trained by DP-SGD with the per-token
 * loss (token-ce, next tokens as regression targets) learns a next-token rule that needs
 * the previous two tokens, far below the uniform log V on held-out sequences; the loss
 * kinds and target shapes it needs are refused otherwise. */
#include <dptrain/optim.h>
#include <dptrain/privacy.h>
#include <dptrain/train.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testalgo.h"
#include "testutil.h"

#define T_LEN 16
#define VOCAB 24
#define N_CLASSES 3

/* n sequences of T_LEN token ids (as floats) in 3 classes (label i mod 3): each position is,
 * with probability 1/4, one of its class's 3 keywords (ids 3c .. 3c + 2), else one of the
 * 15 neutral ids 9 .. 23. A bag of words separates the classes; no single position does. */
static void make_text(dpt_dataset *d, size_t n, uint64_t seed) {
    float *x = malloc(n * T_LEN * sizeof *x);
    int32_t *y = malloc(n * sizeof *y);
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++) {
        const int c = (int)(i % N_CLASSES);
        y[i] = c;
        for (size_t t = 0; t < T_LEN; t++) {
            const int kw = dpt_rng_below(&r, 4) == 0;
            x[i * T_LEN + t] = kw ? (float)(3 * c + (int)dpt_rng_below(&r, 3)) : (float)(9 + dpt_rng_below(&r, 15));
        }
    }
    dpt_rng_free(&r);
    CHECK_OK(dpt_dataset_from_arrays(x, y, n, T_LEN, N_CLASSES, d));
    free(x);
    free(y);
}

static const char *SPEC = "seq:16:emb24x16,ln,plin16,gelu,meanpool,fc3";
/* a pre-LN transformer: attention block, MLP block, final LayerNorm */
static const char *SPEC_XF = "seq:16:emb24x16,[ln,plin48,attn2,plin16],[ln,plin32,gelu,plin16],ln,meanpool,fc3";

static dpt_trainer *make_spec(const char *spec, const dpt_dataset *tr, double q, int epochs, dpt_clip_mode mode,
                              int reference, dpt_algo **algo) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = q;
    c.epochs = epochs;
    c.seed = 7;
    c.threads = 1;
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.optim.lr = 0.01;
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.0, d.clip = 1.0, d.clip_mode = mode, d.reference = reference, d.ref_chunk = 7;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    if (!a) return NULL;
    CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
    if (algo) *algo = a;
    return t;
}

static dpt_trainer *make(const dpt_dataset *tr, double q, int epochs, dpt_clip_mode mode, int reference,
                         dpt_algo **algo) {
    return make_spec(SPEC, tr, q, epochs, mode, reference, algo);
}

/* ==== a causal language model ==== */

#define LM_T 8
#define LM_V 8
/* n sequences of LM_T + 1 tokens: two random ones, then x_t = (x_{t-1} + x_{t-2}) mod V; the
 * features are tokens 0..T-1, the targets tokens 1..T (the next token at every position) */
static void make_lm(dpt_dataset *d, size_t n, uint64_t seed) {
    float *x = malloc(n * LM_T * sizeof *x), *t = malloc(n * LM_T * sizeof *t), s[LM_T + 1];
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++) {
        s[0] = (float)dpt_rng_below(&r, LM_V), s[1] = (float)dpt_rng_below(&r, LM_V);
        for (size_t k = 2; k <= LM_T; k++) s[k] = (float)(((int)s[k - 1] + (int)s[k - 2]) % LM_V);
        memcpy(x + i * LM_T, s, LM_T * sizeof *x);
        memcpy(t + i * LM_T, s + 1, LM_T * sizeof *t);
    }
    dpt_rng_free(&r);
    CHECK_OK(dpt_dataset_from_targets(x, t, n, LM_T, LM_T, d));
    free(x), free(t);
}

static void check_lm(void) {
    static const char *LM = "seq:8:emb8x16,[ln,plin48,attn2c,plin16],[ln,plin64,gelu,plin16],ln,plin8";
    dpt_dataset tr, te, cls;
    make_lm(&tr, 2000, 11);
    make_lm(&te, 400, 12);
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = LM;
    c.loss = DPT_LOSS_TOKEN_CE;
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = 0.05;
    c.epochs = 15;
    c.seed = 3;
    c.threads = 1;
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.optim.lr = 0.02;
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.0, d.clip = 1.0;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &t));
    if (t) {
        double loss0, loss, acc;
        CHECK_OK(dpt_evaluate(dpt_trainer_model(t), DPT_LOSS_TOKEN_CE, &te, &loss0, &acc));
        CHECK(isnan(acc));
        CHECK_OK(dpt_trainer_run(t, NULL));
        CHECK_OK(dpt_evaluate(dpt_trainer_model(t), DPT_LOSS_TOKEN_CE, &te, &loss, &acc));
        fprintf(stderr, "causal LM, DP-SGD: test token loss %.3f (before %.3f; uniform log V = %.3f)\n", loss, loss0,
                log((double)LM_V));
        /* the first position's next token is random (log 8 of its 1/8 share), the others follow */
        CHECK(loss < 0.6 * log((double)LM_V));
        dpt_trainer_free(t);
    }
    /* refusals: class labels with token-ce; a model whose outputs are not V per target;
     * dpt_evaluate on labels */
    {
        float x[4 * LM_T] = {0};
        const int32_t y[4] = {0, 1, 0, 1};
        CHECK_OK(dpt_dataset_from_arrays(x, y, 4, LM_T, 2, &cls));
    }
    t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_STATUS(dpt_trainer_new(&c, &cls, NULL, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("token cross-entropy loss needs the next tokens as targets");
    c.model_spec = "seq:8:emb8x4,plin3,flatten,fc9";
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, NULL, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("not V logits for each of the 8 target tokens");
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("seq:8:emb8x4,plin3", 4, 1, &m));
    double l, ac;
    if (m) CHECK_STATUS(dpt_evaluate(m, DPT_LOSS_TOKEN_CE, &cls, &l, &ac), DPT_EINVAL);
    CHECK_ERR_HAS("needs target tokens");
    dpt_model_free(m);
    dpt_dataset_free(&tr), dpt_dataset_free(&te), dpt_dataset_free(&cls);
}

/* ==== a padding model in the trainer ==== */

/* dpt_evaluate of a language model with a pad id ignores the pad targets (the mean over
 * examples of dpt_loss_tokens_pad with the model's pad id; counting them gives another
 * value), and DP-ULR refuses a padding model */
static void check_pad(void) {
    static const char *LM = "seq:8:emb9x8pad8,[ln,plin24,attn2c,plin8],ln,plin9";
    dpt_dataset d;
    make_lm(&d, 6, 21); /* ids 0..7; pad 8 */
    for (size_t i = 1; i < 6; i += 2) /* every other example padded from position 4 */
        for (size_t t = 4; t < LM_T; t++) d.x[i * LM_T + t] = 8.0f, d.t[i * LM_T + t - 1] = 8.0f;
    for (size_t i = 1; i < 6; i += 2) d.t[i * LM_T + LM_T - 1] = 8.0f;
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(LM, 6, 1, &m));
    if (!m) return;
    dpt_rng r;
    dpt_rng_init(&r, 4, DPT_STREAM_INIT);
    CHECK_OK(dpt_model_init(m, DPT_INIT_LECUN, NULL, 0, 0.0, &r));
    dpt_rng_free(&r);
    double loss, acc, want = 0, all = 0;
    CHECK_OK(dpt_evaluate(m, DPT_LOSS_TOKEN_CE, &d, &loss, &acc));
    float l[6];
    CHECK_OK(dpt_model_forward(m, d.x, 6));
    CHECK_OK(dpt_loss_tokens_pad(dpt_model_output(m), 6, LM_T, LM_V + 1, d.t, 8, l, NULL));
    for (int i = 0; i < 6; i++) want += l[i] / 6.0;
    CHECK_OK(dpt_loss_tokens(dpt_model_output(m), 6, LM_T, LM_V + 1, d.t, l, NULL));
    for (int i = 0; i < 6; i++) all += l[i] / 6.0;
    CHECK_CLOSE(loss, want, 1e-6, 1e-6);
    CHECK(fabs(all - want) > 1e-3);
    dpt_model_free(m);
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "seq:8:emb9x8pad8,plin8,meanpool,fc3";
    c.batch_size = 2;
    c.sampler = DPT_SAMPLER_POISSON_REJECT;
    c.sample_rate = 0.5;
    c.min_batch = 1;
    c.threads = 1;
    float x[4 * LM_T] = {0};
    const int32_t y[4] = {0, 1, 2, 1};
    dpt_dataset cls;
    CHECK_OK(dpt_dataset_from_arrays(x, y, 4, LM_T, 3, &cls));
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpulr_new(&u, &a));
    dpt_status st = dpt_trainer_new(&c, &cls, NULL, a, &t);
    if (st == DPT_OK) st = dpt_trainer_run(t, NULL);
    if (st != DPT_ENOTSUP) fprintf(stderr, "dpulr: %d %s\n", (int)st, dpt_last_error());
    CHECK(st == DPT_ENOTSUP);
    CHECK_ERR_HAS("masks padding");
    dpt_trainer_free(t);
    dpt_dataset_free(&d), dpt_dataset_free(&cls);
}

int main(void) {
    check_pad();
    check_lm();
    dpt_dataset tr, te;
    make_text(&tr, 3000, 1);
    make_text(&te, 600, 2);
    /* the clipped sum of the fast path (SQNORM + WEIGHTED) equals the materialized one */
    for (int mode = 0; mode < 2; mode++) {
        dpt_clip_mode cm = mode ? DPT_CLIP_PER_LAYER : DPT_CLIP_FLAT;
        dpt_algo *af = NULL, *ar = NULL;
        dpt_trainer *tf = make(&tr, 0.02, 1, cm, 0, &af), *tref = make(&tr, 0.02, 1, cm, 1, &ar);
        if (!tf || !tref) return 1;
        const size_t P = dpt_trainer_model(tf)->n_params, b = 40;
        float *gf = malloc(P * sizeof *gf), *gr = malloc(P * sizeof *gr);
        tu_algo_grad(tf, af, tr.x, tr.y, b, 0, gf);
        tu_algo_grad(tref, ar, tr.x, tr.y, b, 0, gr);
        double nr = 0;
        for (size_t j = 0; j < P; j++) nr += (double)gr[j] * gr[j];
        CHECK(nr > 0);
        for (size_t j = 0; j < P; j++) CHECK_CLOSE(gf[j], gr[j], 1e-5 * b, 1e-4);
        free(gf), free(gr);
        dpt_trainer_free(tf);
        dpt_trainer_free(tref);
    }
    /* DP-SGD, sigma 1, C 1, q 0.02 (batches of about 60), 6 epochs (300 steps) */
    for (int mode = 0; mode < 2; mode++) {
        dpt_trainer *t = make(&tr, 0.02, 6, mode ? DPT_CLIP_PER_LAYER : DPT_CLIP_FLAT, 0, NULL);
        if (!t) return 1;
        double loss0, acc0, loss, acc;
        CHECK_OK(dpt_evaluate(dpt_trainer_model(t), DPT_LOSS_SOFTMAX_CE, &te, &loss0, &acc0));
        CHECK_OK(dpt_trainer_run(t, NULL));
        CHECK_OK(dpt_evaluate(dpt_trainer_model(t), DPT_LOSS_SOFTMAX_CE, &te, &loss, &acc));
        fprintf(stderr, "%s clipping: test accuracy %.3f (before %.3f), loss %.3f (before %.3f)\n",
                mode ? "per-layer" : "flat", acc, acc0, loss, loss0);
        CHECK(acc > 0.85); /* chance: 1/3 */
        CHECK(loss < loss0);
        dpt_trainer_free(t);
    }
    /* the transformer: fast clipped sum == reference, and DP-SGD learns */
    {
        dpt_algo *af = NULL, *ar = NULL;
        dpt_trainer *tf = make_spec(SPEC_XF, &tr, 0.02, 1, DPT_CLIP_FLAT, 0, &af);
        dpt_trainer *tref = make_spec(SPEC_XF, &tr, 0.02, 1, DPT_CLIP_FLAT, 1, &ar);
        if (!tf || !tref) return 1;
        const size_t P = dpt_trainer_model(tf)->n_params, b = 40;
        float *gf = malloc(P * sizeof *gf), *gr = malloc(P * sizeof *gr);
        tu_algo_grad(tf, af, tr.x, tr.y, b, 0, gf);
        tu_algo_grad(tref, ar, tr.x, tr.y, b, 0, gr);
        for (size_t j = 0; j < P; j++) CHECK_CLOSE(gf[j], gr[j], 1e-5 * b, 1e-4);
        free(gf), free(gr);
        dpt_trainer_free(tf);
        dpt_trainer_free(tref);
        dpt_trainer *t = make_spec(SPEC_XF, &tr, 0.02, 6, DPT_CLIP_FLAT, 0, NULL);
        if (!t) return 1;
        double loss, acc;
        CHECK_OK(dpt_trainer_run(t, NULL));
        CHECK_OK(dpt_evaluate(dpt_trainer_model(t), DPT_LOSS_SOFTMAX_CE, &te, &loss, &acc));
        fprintf(stderr, "transformer, flat clipping: test accuracy %.3f, loss %.3f\n", acc, loss);
        CHECK(acc > 0.85);
        dpt_trainer_free(t);
    }
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);
    TEST_MAIN_END();
}
