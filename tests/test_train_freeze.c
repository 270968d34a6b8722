/* train/freeze: frozen layers (dpt_train_config.freeze). DP-SGD with some layers frozen
 * releases exactly the clipped sum of the trained layers' per-example gradients, checked
 * against an independent computation (a plain model's full backward pass, per-example
 * gradients materialized, the frozen columns dropped, each row clipped in double by a naive
 * loop), on the fast path (ghost norms, kept conv gradients, per-layer clipping) and the
 * reference path; neighbouring batches differ by at most C; the noise lands on the trained
 * coordinates only, with std sigma C; whole runs leave the frozen parameters bit-identical
 * (Adam with weight decay), resume only with the same layers, and refuse bad lists and
 * algorithms that cannot freeze. */
#include <dptrain/accounting.h>
#include <dptrain/train.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testalgo.h"
#include "testdata.h"
#include "testutil.h"
#include "train/train_internal.h"

/* Parameter layers conv1 (kept per-example gradients), then a residual group holding conv2
 * (ghost norms), gn1 and conv3, then fc1: on the blobs' 8 features seen as 2x2x2
 * (`dptrain model --model` lists them) */
static const char *CNN = "cnn:2x2x2:conv3k2p1,relu,[conv16k3p1,gn2,relu,conv3k3p1],relu,maxpool2s1,fc3";

static dpt_train_config cfg_for(const char *spec, const char *freeze) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.freeze = freeze;
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = 0.1;
    c.epochs = 1;
    c.seed = 5;
    c.threads = 2;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.5;
    return c;
}

static dpt_trainer *dp_trainer(const dpt_train_config *c, const dpt_dataset *tr, double sigma, double C,
                               dpt_clip_mode mode, int reference, dpt_algo **algo) {
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = sigma, d.clip = C, d.clip_mode = mode, d.reference = reference, d.ref_chunk = 7;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(c, tr, NULL, a, &t));
    if (algo) *algo = a;
    return t;
}

/* The names of the model's parameter layers k0 and k1 (0-based among the layers with
 * parameters), "A,B", into buf. */
static void names_of(const dpt_model *m, size_t k0, size_t k1, char *buf, size_t n) {
    snprintf(buf, n, "%s,%s", m->layers[dpt_model_param_layer(m, k0)].name,
             m->layers[dpt_model_param_layer(m, k1)].name);
}

/* The independent reference: sum_i clip(g_i restricted to the trained layers) for the
 * batch x [b], from a plain model holding `theta` (no trainer, no freezing inside). */
static void reference_sum(const char *spec, const float *theta, const unsigned char *frozen, const float *x,
                          const int32_t *y, size_t b, double C, dpt_clip_mode mode, double *out) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, b, 1, &m));
    if (!m) return;
    const size_t P = m->n_params, K = m->out_dim;
    memcpy(m->theta, theta, P * sizeof *theta);
    float *loss = malloc(b * sizeof *loss), *dout = malloc(b * K * sizeof *dout), *pe = malloc(b * P * sizeof *pe);
    CHECK_OK(dpt_model_forward(m, x, b));
    CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, dpt_model_output(m), b, K, y, NULL, loss, dout));
    CHECK_OK(dpt_model_backward(m, dout, b));
    CHECK_OK(dpt_model_param_grad(m, b, DPT_GRAD_PER_EXAMPLE, NULL, pe, P, 0));
    size_t G = 0;
    for (size_t l = 0; l < m->n_layers; l++) G += m->layers[l].n_params && !frozen[l];
    memset(out, 0, P * sizeof *out);
    for (size_t i = 0; i < b; i++) {
        const float *g = pe + i * P;
        double all = 0;
        for (size_t l = 0; l < m->n_layers; l++) {
            const dpt_layer *L = &m->layers[l];
            if (!L->n_params || frozen[l]) continue;
            double sq = 0;
            for (size_t j = 0; j < L->n_params; j++) sq += (double)g[L->param_offset + j] * g[L->param_offset + j];
            all += sq;
            if (mode == DPT_CLIP_PER_LAYER) {
                const double Cl = C / sqrt((double)G), f = sqrt(sq) > Cl ? Cl / sqrt(sq) : 1.0;
                for (size_t j = 0; j < L->n_params; j++) out[L->param_offset + j] += f * g[L->param_offset + j];
            }
        }
        if (mode == DPT_CLIP_PER_LAYER) continue;
        const double f = sqrt(all) > C ? C / sqrt(all) : 1.0;
        for (size_t l = 0; l < m->n_layers; l++) {
            const dpt_layer *L = &m->layers[l];
            if (!L->n_params || frozen[l]) continue;
            for (size_t j = 0; j < L->n_params; j++) out[L->param_offset + j] += f * g[L->param_offset + j];
        }
    }
    free(loss), free(dout), free(pe);
    dpt_model_free(m);
}

/* The pre-noise clipped sum of a frozen run equals the reference on both paths; frozen
 * coordinates are exactly 0. `k0`, `k1`: the parameter layers frozen. */
static void test_sum_vs_reference(const dpt_dataset *tr, const char *spec, size_t k0, size_t k1, double C,
                                  dpt_clip_mode mode) {
    dpt_model *probe = NULL;
    CHECK_OK(dpt_model_new(spec, 1, 1, &probe));
    char fz[128];
    names_of(probe, k0, k1, fz, sizeof fz);
    dpt_model_free(probe);
    dpt_train_config c = cfg_for(spec, fz);
    for (int reference = 0; reference < 2; reference++) {
        dpt_algo *a = NULL;
        dpt_trainer *t = dp_trainer(&c, tr, 1.0, C, mode, reference, &a);
        if (!t) return;
        dpt_model *m = dpt_trainer_model(t);
        const size_t P = m->n_params, b = 41;
        float *got = malloc(P * sizeof *got);
        double *want = malloc(P * sizeof *want);
        tu_algo_grad(t, a, tr->x, tr->y, b, 0, got);
        reference_sum(spec, m->theta, t->frozen, tr->x, tr->y, b, C, mode, want);
        double nw = 0, nd = 0;
        size_t zero_frozen = 0, n_frozen = 0, nonzero_trained = 0;
        for (size_t l = 0; l < m->n_layers; l++) {
            const dpt_layer *L = &m->layers[l];
            for (size_t j = L->param_offset; j < L->param_offset + L->n_params; j++) {
                if (t->frozen[l]) n_frozen++, zero_frozen += got[j] == 0.0f;
                else nonzero_trained += got[j] != 0.0f;
            }
        }
        for (size_t j = 0; j < P; j++) nw += want[j] * want[j], nd += (got[j] - want[j]) * (got[j] - want[j]);
        CHECK(n_frozen > 0 && zero_frozen == n_frozen);
        CHECK(nonzero_trained > 0);
        CHECK(nw > 0);
        CHECK_CLOSE(sqrt(nd), 0.0, 2e-5 * sqrt(nw), 0);
        free(got), free(want);
        dpt_trainer_free(t);
    }
}

/* Neighbouring batches (the last example removed): the pre-noise sums differ by the removed
 * example's clipped trained-layer gradient, of norm <= C, and by nothing in frozen layers. */
static void test_sensitivity(const dpt_dataset *tr, const char *spec) {
    const double C = 0.05;
    dpt_train_config c = cfg_for(spec, NULL);
    dpt_model *probe = NULL;
    CHECK_OK(dpt_model_new(spec, 1, 1, &probe));
    char fz[128];
    names_of(probe, 0, 1, fz, sizeof fz); /* the trunk: the first two parameter layers */
    dpt_model_free(probe);
    c.freeze = fz;
    dpt_algo *a = NULL;
    dpt_trainer *t = dp_trainer(&c, tr, 1.0, C, DPT_CLIP_FLAT, 0, &a);
    if (!t) return;
    const size_t P = t->model->n_params, b = 30;
    float *s1 = malloc(P * sizeof *s1), *s2 = malloc(P * sizeof *s2);
    tu_algo_grad(t, a, tr->x, tr->y, b, 0, s1);
    tu_algo_grad(t, a, tr->x, tr->y, b - 1, 0, s2);
    double d = 0, dfrozen = 0;
    for (size_t l = 0; l < t->model->n_layers; l++) {
        const dpt_layer *L = &t->model->layers[l];
        for (size_t j = L->param_offset; j < L->param_offset + L->n_params; j++) {
            double e = ((double)s1[j] - s2[j]) * ((double)s1[j] - s2[j]);
            if (t->frozen[l]) dfrozen += e;
            else d += e;
        }
    }
    CHECK(dfrozen == 0);
    /* C = 0.05 is far below these gradients' norms: the removed example moves the sum by C */
    CHECK_CLOSE(sqrt(d), C, 0, 1e-4);
    free(s1), free(s2);
    dpt_trainer_free(t);
}

/* Zero inputs, no biases: every gradient is 0, so the released update is the noise alone:
 * N(0, (sigma C)^2) / qN on the trained coordinates and exactly 0 on the frozen ones. */
static void test_noise(void) {
    dpt_dataset z;
    tu_make_blobs(&z, 300, 4, 0.0f);
    dpt_train_config c = cfg_for("mlp:8-40-600:relu:nobias", "fc1");
    const double sigma = 1.3, C = 0.7, qN = 0.1 * 300;
    dpt_algo *a = NULL;
    dpt_trainer *t = dp_trainer(&c, &z, sigma, C, DPT_CLIP_FLAT, 0, &a);
    if (!t) {
        dpt_dataset_free(&z);
        return;
    }
    dpt_model *m = t->model;
    const size_t fc1 = m->layers[0].n_params; /* 8 x 40, frozen, first */
    size_t trained = 0;
    CHECK(strcmp(dpt_trainer_frozen(t, &trained), "fc1") == 0 && trained == m->n_params - fc1);
    double s1 = 0, s2 = 0;
    size_t cnt = 0, nonzero_frozen = 0;
    float *u = malloc(m->n_params * sizeof *u);
    for (int rep = 0; rep < 20; rep++) {
        tu_algo_grad(t, a, z.x, z.y, 30, 1, u);
        for (size_t j = 0; j < fc1; j++) nonzero_frozen += u[j] != 0.0f;
        for (size_t j = fc1; j < m->n_params; j++) {
            const double v = u[j] * qN;
            s1 += v, s2 += v * v;
        }
        cnt += m->n_params - fc1;
    }
    CHECK(nonzero_frozen == 0);
    const double mean = s1 / cnt, sd = sqrt(s2 / cnt - mean * mean), want = sigma * C;
    CHECK_CLOSE(mean, 0.0, 5 * want / sqrt((double)cnt), 0);
    CHECK_CLOSE(sd, want, 5 * want / sqrt(2.0 * cnt), 0);
    free(u);
    dpt_trainer_free(t);
    dpt_dataset_free(&z);
}

/* A whole DP-SGD run with Adam and weight decay (which would move every parameter it
 * touched): the frozen layers end bit-identical to their start, their moments 0; the others
 * moved. The same run through the reference path ends at the same parameters. Then non-
 * private SGD: one step changes the trained layers by exactly -lr x their gradient from a
 * full backward pass (the backward pass that stops below them changes nothing). */
static void test_runs(const dpt_dataset *tr) {
    dpt_model *probe = NULL;
    CHECK_OK(dpt_model_new(CNN, 1, 1, &probe));
    char fz[128];
    names_of(probe, 0, 2, fz, sizeof fz); /* conv1 and gn1: a trained layer (conv2) between them */
    dpt_model_free(probe);
    dpt_train_config c = cfg_for(CNN, fz);
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.optim.lr = 0.01, c.optim.weight_decay = 0.1;
    c.max_steps = 6;
    dpt_trainer *t = dp_trainer(&c, tr, 1.0, 0.5, DPT_CLIP_FLAT, 0, NULL);
    dpt_trainer *tr_ref = dp_trainer(&c, tr, 1.0, 0.5, DPT_CLIP_FLAT, 1, NULL);
    if (!t || !tr_ref) return;
    dpt_model *m = t->model;
    const size_t P = m->n_params;
    float *start = malloc(P * sizeof *start);
    memcpy(start, m->theta, P * sizeof *start);
    CHECK_OK(dpt_trainer_run(t, NULL));
    CHECK_OK(dpt_trainer_run(tr_ref, NULL));
    CHECK(t->step == 6);
    size_t changed_frozen = 0, moved = 0, n_frozen = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        for (size_t j = L->param_offset; j < L->param_offset + L->n_params; j++) {
            if (t->frozen[l]) {
                n_frozen++;
                changed_frozen += memcmp(&m->theta[j], &start[j], sizeof *start) != 0 || t->opt.m[j] != 0 ||
                                  t->opt.v[j] != 0;
            } else {
                moved += m->theta[j] != start[j];
            }
        }
    }
    CHECK(n_frozen > 0 && changed_frozen == 0);
    CHECK(moved > (P - n_frozen) / 2);
    for (size_t j = 0; j < P; j++) CHECK_CLOSE(m->theta[j], tr_ref->model->theta[j], 1e-5, 1e-4);
    dpt_trainer_free(t);
    dpt_trainer_free(tr_ref);

    /* non-private SGD, one step of a fixed batch (shuffle, batch = N: the whole set) */
    dpt_train_config s = cfg_for(CNN, fz);
    s.sampler = DPT_SAMPLER_SHUFFLE;
    s.batch_size = 50;
    s.max_steps = 1;
    dpt_dataset small = *tr;
    small.n = 50;
    dpt_algo *a = NULL;
    CHECK_OK(dpt_algo_sgd_new(&a));
    dpt_trainer *ts = NULL;
    CHECK_OK(dpt_trainer_new(&s, &small, NULL, a, &ts));
    if (ts) {
        dpt_model *ms = ts->model;
        memcpy(start, ms->theta, P * sizeof *start);
        /* the mean-loss gradient of all 50 examples (the batch, in whatever order) */
        dpt_model *full = NULL;
        CHECK_OK(dpt_model_new(CNN, 50, 1, &full));
        memcpy(full->theta, start, P * sizeof *start);
        float loss[50], *dout = malloc(50 * 3 * sizeof *dout), *g = malloc(P * sizeof *g);
        CHECK_OK(dpt_model_forward(full, small.x, 50));
        CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, dpt_model_output(full), 50, 3, small.y, NULL, loss, dout));
        for (size_t i = 0; i < 150; i++) dout[i] /= 50;
        CHECK_OK(dpt_model_backward(full, dout, 50));
        CHECK_OK(dpt_model_param_grad(full, 50, DPT_GRAD_SUM, NULL, g, 0, 0));
        CHECK_OK(dpt_trainer_run(ts, NULL));
        size_t bad = 0;
        for (size_t l = 0; l < ms->n_layers; l++) {
            const dpt_layer *L = &ms->layers[l];
            for (size_t j = L->param_offset; j < L->param_offset + L->n_params; j++) {
                const double want = ts->frozen[l] ? start[j] : start[j] - 0.5 * (double)g[j];
                bad += ts->frozen[l] ? ms->theta[j] != start[j] : fabs(ms->theta[j] - want) > 1e-5 + 1e-4 * fabs(want);
            }
        }
        CHECK(bad == 0);
        free(dout), free(g);
        dpt_model_free(full);
    }
    dpt_trainer_free(ts);
    free(start);
}

/* A run stopped after 3 steps and resumed for 3 more ends where an uninterrupted 6-step run
 * ends; resuming with other frozen layers (or none) is refused naming both lists. The
 * ledger records the frozen layers; secure noise is accounted on the trained coordinates. */
static void test_resume_and_ledger(const dpt_dataset *tr) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/freeze_run", tu_tmpdir());
    dpt_train_config c = cfg_for("mlp:8-16-16-3:gelu", "fc2, fc1"); /* out of order: kept in model order */
    c.out_dir = dir;
    c.max_steps = 3;
    c.epochs = 2;
    dpt_trainer *t = dp_trainer(&c, tr, 1.0, 1.0, DPT_CLIP_FLAT, 0, NULL);
    if (!t) return;
    CHECK(strcmp(dpt_trainer_frozen(t, NULL), "fc1,fc2") == 0);
    CHECK(strcmp(dpt_ledger_get_meta(dpt_trainer_ledger(t), "frozen_layers"), "fc1,fc2") == 0);
    CHECK_OK(dpt_trainer_run(t, NULL));
    dpt_trainer_free(t);
    c.max_steps = 6;
    t = dp_trainer(&c, tr, 1.0, 1.0, DPT_CLIP_FLAT, 0, NULL);
    CHECK_OK(dpt_trainer_resume(t));
    CHECK_OK(dpt_trainer_run(t, NULL));
    dpt_train_config u = c;
    u.out_dir = NULL;
    dpt_trainer *whole = dp_trainer(&u, tr, 1.0, 1.0, DPT_CLIP_FLAT, 0, NULL);
    CHECK_OK(dpt_trainer_run(whole, NULL));
    if (t && whole) CHECK(!memcmp(t->model->theta, whole->model->theta, t->model->n_params * sizeof(float)));
    dpt_trainer_free(whole);
    dpt_trainer_free(t);
    const char *other[] = {"fc1", NULL};
    const char *want[] = {"frozen layers (freeze) was fc1,fc2, now fc1",
                          "frozen layers (freeze) was fc1,fc2, now (none)"};
    for (int k = 0; k < 2; k++) {
        c.freeze = other[k];
        t = dp_trainer(&c, tr, 1.0, 1.0, DPT_CLIP_FLAT, 0, NULL);
        CHECK_STATUS(dpt_trainer_resume(t), DPT_EMISMATCH);
        CHECK_ERR_HAS(want[k]);
        dpt_trainer_free(t);
    }
    tu_rm_tree_(dir);

    /* secure: the multiplier and the ledger's events use the trained coordinates */
    dpt_train_config sc = cfg_for("mlp:8-16-16-3:gelu", "fc1");
    sc.secure = 1;
    sc.max_steps = 2;
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 1.3, d.secure = 1;
    dpt_algo *a = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(&sc, tr, NULL, a, &t));
    if (t) {
        size_t n = 0;
        dpt_trainer_frozen(t, &n);
        CHECK(n == t->model->n_params - 8 * 16 - 16);
        CHECK(t->algo->sigma == dpt_privacy_secure_sigma_eff(1.3, n));
        CHECK_OK(dpt_trainer_run(t, NULL));
        double mu, tv, e, e_ref;
        CHECK_OK(dpt_privacy_secure_distance(DPT_DGAUSS_TABLE, &mu, &tv));
        dpt_ledger *l = NULL;
        CHECK_OK(dpt_ledger_new(&l));
        CHECK_OK(dpt_ledger_add_sgm_dgauss(l, 0.1, t->algo->sigma, n, mu, tv, 2));
        CHECK_OK(dpt_ledger_epsilon(l, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_ref));
        CHECK_OK(dpt_ledger_epsilon(dpt_trainer_ledger(t), 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e));
        CHECK(e == e_ref);
        dpt_ledger_free(l);
    }
    dpt_trainer_free(t);
}

static void expect_refused(const dpt_dataset *tr, const char *spec, const char *freeze, dpt_status st,
                           const char *needle) {
    dpt_train_config c = cfg_for(spec, freeze);
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_STATUS(dpt_trainer_new(&c, tr, NULL, a, &t), st);
    CHECK_ERR_HAS(needle);
    CHECK(t == NULL);
}

static void test_refusals(const dpt_dataset *tr) {
    const char *mlp = "mlp:8-16-16-3:gelu";
    expect_refused(tr, mlp, "fc9", DPT_EINVAL, "has no layer \"fc9\" (its layers with parameters: fc1, fc2, fc3)");
    expect_refused(tr, mlp, "gelu1", DPT_EINVAL, "no layer \"gelu1\" with parameters");
    expect_refused(tr, mlp, "fc1,fc1", DPT_EINVAL, "layer fc1 is named twice");
    expect_refused(tr, mlp, "fc1,,fc2", DPT_EINVAL, "an empty layer name");
    expect_refused(tr, mlp, "fc1,", DPT_EINVAL, "an empty layer name");
    expect_refused(tr, mlp, "fc3,fc2,fc1", DPT_EINVAL, "every layer with parameters is frozen");
}

/* Algorithms that do not honour frozen layers refuse them. */
static void test_not_freezable(const dpt_dataset *tr) {
    dpt_train_config c = cfg_for("mlp:8-16-3:relu", "fc1");
    dpt_pdp_config p = {.lambda = 0.1, .kappa = 0};
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    c.sampler = DPT_SAMPLER_SHUFFLE;
    c.batch_size = 32;
    CHECK_OK(dpt_algo_pdpsgd_new(&p, &a));
    CHECK_STATUS(dpt_trainer_new(&c, tr, NULL, a, &t), DPT_ENOTSUP);
    CHECK_ERR_HAS("algorithm pdp-sgd cannot train with frozen layers (sgd and dpsgd can)");
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.private_ = 0;
    CHECK_OK(dpt_algo_dpulr_new(&u, &a));
    CHECK_STATUS(dpt_trainer_new(&c, tr, NULL, a, &t), DPT_ENOTSUP);
    CHECK_ERR_HAS("cannot train with frozen layers");
    /* "" and NULL freeze nothing */
    c.freeze = "";
    CHECK_OK(dpt_algo_pdpsgd_new(&p, &a));
    CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
    CHECK(t && t->frozen == NULL && strcmp(dpt_trainer_frozen(t, NULL), "") == 0);
    dpt_trainer_free(t);
}

int main(void) {
    dpt_dataset tr;
    tu_make_blobs(&tr, 600, 1, 1.0f);
    const char *mlp = "mlp:8-16-16-3:gelu";
    test_sum_vs_reference(&tr, mlp, 0, 1, 0.05, DPT_CLIP_FLAT);      /* trunk frozen: only fc3 trains */
    test_sum_vs_reference(&tr, mlp, 0, 2, 0.05, DPT_CLIP_FLAT);      /* fc2 between frozen layers */
    test_sum_vs_reference(&tr, mlp, 0, 1, 5.0, DPT_CLIP_FLAT);       /* nothing clipped */
    test_sum_vs_reference(&tr, mlp, 1, 2, 0.2, DPT_CLIP_PER_LAYER);  /* fc1 alone: C_l = C */
    /* conv1, gn1 frozen: conv2 (ghost), conv3, fc1 train; then conv2, conv3 frozen: conv1 (kept
     * rows), gn1, fc1 train */
    test_sum_vs_reference(&tr, CNN, 0, 2, 0.05, DPT_CLIP_FLAT);
    test_sum_vs_reference(&tr, CNN, 1, 3, 0.05, DPT_CLIP_FLAT);
    test_sum_vs_reference(&tr, CNN, 0, 1, 0.2, DPT_CLIP_PER_LAYER);
    test_sensitivity(&tr, mlp);
    test_sensitivity(&tr, CNN);
    test_noise();
    test_runs(&tr);
    test_resume_and_ledger(&tr);
    test_refusals(&tr);
    test_not_freezable(&tr);
    dpt_dataset_free(&tr);
    TEST_MAIN_END();
}
