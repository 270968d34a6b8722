/* train/dpmac: the DP-MAC strategy on small data made here. The W-step's per-example
 * Taylor coefficients equal finite differences (double) of the per-layer objectives at the
 * z the z-step produced (sigmoid-BCE classifier and squared-error autoencoder); each
 * layer's clipped coefficient has norm min(||dT||, Theta); the pre-noise sums of two
 * neighbouring batches differ by the removed example's stacked clipped coefficients, norm
 * <= sqrt(K) Theta (reached when clipping is active); with all coefficients zero the
 * released direction is pure noise of std sigma sqrt(K) Theta / (2 qN); an example's z is
 * bit-identical when another example of the batch changes (examples 0, 4, 8 in turn); the ledger holds one SGM event
 * per step plus a pre-training Gaussian release; bad settings are clear errors; a run
 * learns. The non-private MAC (private_ = 0) releases the plain mean of the unclipped
 * coefficients over the batch, has no ledger and is labelled non-private; it learns. */
#include <dptrain/accounting.h>
#include <dptrain/train.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/train/dpmac_internal.h"
#include "testdata.h"
#include "testalgo.h"
#include "testutil.h"

static void make_blobs(dpt_dataset *d, size_t n, size_t dim, int classes, uint64_t seed, float scale) {
    tu_make_clusters(d, n, 1, 1, dim, (size_t)classes, seed, 0.5, 1.5, scale);
}

static dpt_train_config cfg_for(const char *spec, dpt_loss_kind loss, double q) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.loss = loss;
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = q;
    c.epochs = 1;
    c.seed = 5;
    c.threads = 2;
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.optim.lr = 0.01;
    return c;
}

/* A trainer for DP-MAC with configuration d (the algorithm is owned by the trainer). */
static dpt_trainer *trainer_with(const dpt_train_config *c, const dpt_dataset *tr, const dpt_dpmac_config *d,
                                 dpt_algo **algo) {
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpmac_new(d, &a));
    if (!a) return NULL;
    CHECK_OK(dpt_trainer_new(c, tr, NULL, a, &t));
    if (algo) *algo = a;
    return t;
}

static dpt_trainer *make_trainer(const dpt_train_config *c, const dpt_dataset *tr, double sigma, double theta,
                                 unsigned zsteps, double zlr, dpt_algo **algo) {
    dpt_dpmac_config d = dpt_dpmac_config_defaults();
    d.sigma = sigma, d.clip = theta, d.z_steps = zsteps, d.z_lr = zlr;
    return trainer_with(c, tr, &d, algo);
}

/* ==== Taylor coefficient vs finite differences ==== */

static double act_d(dpt_layer_kind k, double v) {
    switch (k) {
    case DPT_LAYER_TANH: return tanh(v);
    case DPT_LAYER_SIGMOID: return 1.0 / (1.0 + exp(-v));
    case DPT_LAYER_RELU: return v > 0 ? v : 0;
    default: return v;
    }
}
static double softplus_d(double v) { return (v > 0 ? v : 0) + log1p(exp(-fabs(v))); }

/* per-layer objective of example n at weight layer (model index) li, parameters th */
static double layer_objective(const dpt_model *m, size_t li, int last, dpt_loss_kind loss, const double *th,
                              const float *in, const float *zk, const float *x, int32_t y) {
    const dpt_layer *L = &m->layers[li];
    size_t D = L->in_dim, K = L->out_dim;
    const double *W = th + (L->w - m->theta), *b = th + (L->b - m->theta);
    double T = 0;
    for (size_t j = 0; j < K; j++) {
        double o = b[j];
        for (size_t i = 0; i < D; i++) o += W[j * D + i] * in[i];
        if (!last) {
            double r = zk[j] - act_d(m->layers[li + 1].kind, o);
            T += r * r;
        } else if (loss == DPT_LOSS_SQUARED) {
            T += (o - x[j]) * (o - x[j]);
        } else {
            T += softplus_d(o) - (y == (int32_t)j ? o : 0.0);
        }
    }
    return T;
}

static void test_taylor_fd(const char *spec, dpt_loss_kind loss, size_t dim, int classes) {
    dpt_dataset d;
    make_blobs(&d, 40, dim, classes, 7, 1.0f);
    dpt_train_config c = cfg_for(spec, loss, 0.2);
    dpt_algo *a;
    dpt_trainer *t = make_trainer(&c, &d, 1.0, 1.0, 6, 0.05, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    const size_t bc = 7, P = m->n_params;
    CHECK_OK(a->begin(a, t, bc));
    size_t K = dpt_dpmac_n_weight_layers(a), H = 0;
    for (size_t k = 0; k + 1 < K; k++) H += m->layers[dpt_model_param_layer(m, k)].out_dim;
    float *z = malloc(bc * H * sizeof(float)), *coef = malloc(bc * P * sizeof(float));
    CHECK_OK(dpt_dpmac_debug_chunk(a, t, d.x, d.y, bc, z, coef));
    /* the z-step moved z away from the forward pass (else the hidden coefficients are 0) */
    double *th = malloc(P * sizeof(double));
    size_t checked = 0, nonzero = 0;
    for (size_t n = 0; n < bc; n++) {
        for (size_t j = 0; j < P; j++) th[j] = m->theta[j];
        size_t zo = 0, zprev = 0;
        for (size_t k = 0; k < K; k++) {
            size_t li = dpt_model_param_layer(m, k);
            const dpt_layer *L = &m->layers[li];
            const float *in = k ? z + n * H + zprev : d.x + n * dim;
            const float *zk = k + 1 < K ? z + n * H + zo : NULL;
            for (size_t j = L->param_offset; j < L->param_offset + L->n_params; j++) {
                const double h = 1e-5, keep = th[j];
                th[j] = keep + h;
                double fp = layer_objective(m, li, k + 1 == K, loss, th, in, zk, d.x + n * dim, d.y[n]);
                th[j] = keep - h;
                double fm = layer_objective(m, li, k + 1 == K, loss, th, in, zk, d.x + n * dim, d.y[n]);
                th[j] = keep;
                double fd = (fp - fm) / (2 * h);
                CHECK_CLOSE(coef[n * P + j], fd, 2e-5, 2e-3);
                checked++;
                nonzero += fabs(fd) > 1e-4;
            }
            zprev = zo;
            if (k + 1 < K) zo += L->out_dim;
        }
    }
    CHECK(checked == bc * P);
    CHECK(nonzero > checked / 2);
    /* clipped per-layer norms: accumulate of one example = min(||dT_k||, Theta) per layer */
    const double theta = 0.05;
    dpt_trainer_free(t);
    t = make_trainer(&c, &d, 1.0, theta, 6, 0.05, &a);
    m = dpt_trainer_model(t);
    float *g = malloc(P * sizeof(float));
    for (size_t n = 0; n < 3; n++) {
        tu_algo_grad(t, a, d.x + n * dim, d.y + n, 1, 0, g);
        CHECK_OK(dpt_dpmac_debug_chunk(a, t, d.x + n * dim, d.y + n, 1, NULL, coef));
        for (size_t k = 0; k < K; k++) {
            const dpt_layer *L = &m->layers[dpt_model_param_layer(m, k)];
            double nc = 0, ng = 0;
            for (size_t j = L->param_offset; j < L->param_offset + L->n_params; j++)
                nc += (double)coef[j] * coef[j], ng += (double)g[j] * g[j];
            nc = sqrt(nc), ng = sqrt(ng);
            CHECK(ng <= theta * (1 + 1e-5));
            CHECK_CLOSE(ng, nc < theta ? nc : theta, 1e-7, 1e-4);
        }
    }
    free(g), free(z), free(coef), free(th);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* ==== z of example n depends on example n only ==== */
/* The z-step's gradient equals central differences of the z-objective
 * sum_n [loss(out_n) + mu/2 sum_k ||z_k - f_k(a_k)||^2] (mu = 1 and 2: the authors'
 * classifier weighting), and mu really enters (the mu = 2 gradient differs from mu = 1). */
static void test_z_gradient_fd(const char *spec, dpt_loss_kind loss, size_t dim, int classes) {
    dpt_dataset d;
    make_blobs(&d, 40, dim, classes, 9, 1.0f);
    dpt_train_config c = cfg_for(spec, loss, 0.2);
    float *g1 = NULL;
    for (int pass = 0; pass < 2; pass++) {
        const double mu = pass ? 2.0 : 1.0;
        dpt_dpmac_config dc = dpt_dpmac_config_defaults();
        dc.z_mu = mu;
        dpt_algo *a = NULL;
        dpt_trainer *t = trainer_with(&c, &d, &dc, &a);
        if (!t) return;
        dpt_model *m = dpt_trainer_model(t);
        const size_t bc = 5;
        CHECK_OK(a->begin(a, t, bc));
        size_t K = dpt_dpmac_n_weight_layers(a), H = 0;
        for (size_t k = 0; k + 1 < K; k++) H += m->layers[dpt_model_param_layer(m, k)].out_dim;
        float *z = malloc(bc * H * sizeof(float)), *g = malloc(bc * H * sizeof(float)),
              *gs = malloc(bc * H * sizeof(float));
        /* z away from the forward pass: the forward z plus a fixed offset */
        CHECK_OK(dpt_dpmac_debug_chunk(a, t, d.x, d.y, bc, z, NULL));
        for (size_t j = 0; j < bc * H; j++) z[j] += 0.3f * (float)((j * 7919) % 13) / 13.0f - 0.15f;
        double obj, fp, fm;
        CHECK_OK(dpt_dpmac_debug_zobjective(a, t, d.x, d.y, bc, z, &obj, g));
        for (size_t j = 0; j < bc * H; j++) {
            const float keep = z[j], h = 1e-2f;
            z[j] = keep + h;
            CHECK_OK(dpt_dpmac_debug_zobjective(a, t, d.x, d.y, bc, z, &fp, gs));
            z[j] = keep - h;
            CHECK_OK(dpt_dpmac_debug_zobjective(a, t, d.x, d.y, bc, z, &fm, gs));
            z[j] = keep;
            CHECK_CLOSE(g[j], (fp - fm) / (2.0 * h), 2e-3, 2e-2);
        }
        if (!pass) {
            g1 = g, g = NULL;
        } else {
            double diff = 0;
            for (size_t j = 0; j < bc * H; j++) diff = fmax(diff, fabs(g[j] - g1[j]));
            CHECK(diff > 1e-2); /* mu changes the gradient */
        }
        free(z), free(g), free(gs);
        dpt_trainer_free(t); /* owns a */
    }
    free(g1);
    dpt_dataset_free(&d);
}

static void test_z_per_example(void) {
    dpt_dataset d;
    make_blobs(&d, 50, 6, 3, 9, 1.0f);
    dpt_train_config c = cfg_for("mlp:6-8-5-3:relu", DPT_LOSS_SIGMOID_BCE, 0.2);
    dpt_algo *a;
    dpt_trainer *t = make_trainer(&c, &d, 1.0, 0.3, 30, 0.01, &a);
    if (!t) return;
    const size_t bc = 10, H = 8 + 5;
    float *z1 = malloc(bc * H * sizeof(float)), *z2 = malloc(bc * H * sizeof(float));
    float *x = malloc(bc * 6 * sizeof(float));
    int32_t y[10];
    memcpy(x, d.x, bc * 6 * sizeof(float));
    memcpy(y, d.y, sizeof y);
    CHECK_OK(a->begin(a, t, bc));
    CHECK_OK(dpt_dpmac_debug_chunk(a, t, x, y, bc, z1, NULL));
    /* replace example v entirely (features and label): only z_v may change */
    for (size_t v = 0; v < bc; v += 4) {
        memcpy(x, d.x, bc * 6 * sizeof(float));
        memcpy(y, d.y, sizeof y);
        for (size_t j = 0; j < 6; j++) x[v * 6 + j] = 5.0f - 2.0f * x[v * 6 + j];
        y[v] = (y[v] + 1) % 3;
        CHECK_OK(dpt_dpmac_debug_chunk(a, t, x, y, bc, z2, NULL));
        for (size_t n = 0; n < bc; n++) {
            int same = !memcmp(z1 + n * H, z2 + n * H, H * sizeof(float));
            CHECK(n == v ? !same : same);
        }
    }
    memcpy(x, d.x, bc * 6 * sizeof(float));
    memcpy(y, d.y, sizeof y);
    /* and the z of example 0 computed alone matches (float tolerance: other GEMM shapes) */
    CHECK_OK(dpt_dpmac_debug_chunk(a, t, x, y, 1, z2, NULL));
    for (size_t j = 0; j < H; j++) CHECK_CLOSE(z2[j], z1[j], 1e-5, 1e-4);
    free(z1), free(z2), free(x);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* ==== sensitivity: neighbouring batches ==== */
static void test_sensitivity(const char *spec, dpt_loss_kind loss, size_t dim, int classes, double theta) {
    dpt_dataset d;
    make_blobs(&d, 60, dim, classes, 11, 4.0f); /* large inputs: clipping active */
    dpt_train_config c = cfg_for(spec, loss, 0.2);
    dpt_algo *a;
    dpt_trainer *t = make_trainer(&c, &d, 1.0, theta, 10, 0.01, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    size_t P = m->n_params, b = 17;
    float *s1 = malloc(P * sizeof(float)), *s2 = malloc(P * sizeof(float)), *g = malloc(P * sizeof(float));
    tu_algo_grad(t, a, d.x, d.y, b, 0, s1);
    size_t K = dpt_dpmac_n_weight_layers(a);
    tu_algo_grad(t, a, d.x, d.y, b - 1, 0, s2);                          /* D' = D without the last example */
    tu_algo_grad(t, a, d.x + (b - 1) * dim, d.y + b - 1, 1, 0, g);     /* that example alone */
    double dn = 0, ng = 0;
    for (size_t j = 0; j < P; j++) dn += ((double)s1[j] - s2[j]) * ((double)s1[j] - s2[j]), ng += (double)g[j] * g[j];
    dn = sqrt(dn), ng = sqrt(ng);
    const double bound = sqrt((double)K) * theta;
    CHECK(dn <= bound * (1 + 1e-4));
    CHECK_CLOSE(dn, ng, 1e-4 * bound, 1e-3);
    CHECK_CLOSE(ng, bound, 0, 1e-4); /* every layer's coefficient clipped: the bound is reached */
    for (size_t k = 0; k < K; k++) { /* and each layer's block alone is <= Theta */
        const dpt_layer *L = &m->layers[dpt_model_param_layer(m, k)];
        double nb = 0;
        for (size_t j = L->param_offset; j < L->param_offset + L->n_params; j++) nb += ((double)s1[j] - s2[j]) * ((double)s1[j] - s2[j]);
        CHECK(sqrt(nb) <= theta * (1 + 1e-3));
    }
    free(s1), free(s2), free(g);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* ==== noise: zero coefficients -> pure noise of std sigma sqrt(K) Theta / (2 qN) ==== */
static void test_noise_only(void) {
    dpt_dataset z;
    make_blobs(&z, 200, 6, 2, 4, 0.0f); /* zero inputs, no biases: every coefficient is 0 */
    dpt_train_config c = cfg_for("mlp:6-400-300-2:relu:nobias", DPT_LOSS_SIGMOID_BCE, 0.1);
    const double sigma = 1.3, theta = 0.4, qN = 0.1 * 200;
    dpt_algo *a;
    dpt_trainer *t = make_trainer(&c, &z, sigma, theta, 0, 0.01, &a); /* z stays at the forward pass (0) */
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    double s1 = 0, s2 = 0;
    size_t cnt = 0, b = 20;
    for (int rep = 0; rep < 3; rep++) {
        double ls;
        CHECK_OK(a->begin(a, t, b));
        CHECK_OK(a->accumulate(a, t, z.x, z.y, b, &ls));
        for (size_t j = 0; j < m->n_params; j++) CHECK(m->grad[j] == 0.0f);
        CHECK_OK(a->finish(a, t, b));
        for (size_t j = 0; j < m->n_params; j++) {
            double v = m->grad[j] * 2.0 * qN;
            s1 += v, s2 += v * v;
        }
        cnt += m->n_params;
    }
    size_t K = dpt_dpmac_n_weight_layers(a);
    CHECK(K == 3);
    double mean = s1 / cnt, sd = sqrt(s2 / cnt - mean * mean), want = sigma * sqrt((double)K) * theta;
    CHECK_CLOSE(mean, 0.0, 5 * want / sqrt((double)cnt), 0);
    CHECK_CLOSE(sd, want, 5 * want / sqrt(2.0 * cnt), 0);
    dpt_trainer_free(t);
    dpt_dataset_free(&z);
}

/* ==== ledger, pre-training release, learning ==== */
static void test_ledger_and_learning(void) {
    dpt_dataset tr, te;
    make_blobs(&tr, 600, 8, 3, 1, 1.0f);
    make_blobs(&te, 300, 8, 3, 2, 1.0f);
    dpt_train_config c = cfg_for("mlp:8-32-3:relu", DPT_LOSS_SIGMOID_BCE, 0.1);
    c.epochs = 6;
    c.optim.lr = 0.03;
    dpt_algo *a;
    dpt_trainer *t = make_trainer(&c, &tr, 1.0, 0.3, 30, 0.01, &a);
    if (!t) return;
    CHECK_OK(dpt_trainer_add_gaussian_release(t, 1.0, 8.0, "dp-pca"));
    CHECK_OK(dpt_trainer_run(t, NULL));
    const dpt_ledger *l = dpt_trainer_ledger(t);
    CHECK(dpt_ledger_steps(l) == 60);
    double eps = 0, e_sgm = 0;
    CHECK_OK(dpt_ledger_epsilon(l, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &eps));
    CHECK_OK(dpt_rdp_sgm_epsilon(0.1, 1.0, 60, 1e-5, DPT_CONV_BALLE, NULL, 0, &e_sgm, NULL));
    CHECK(eps > e_sgm && eps < e_sgm + 1.0); /* the PCA release costs something, composed in RDP */
    /* after training started, a pre-training release is refused */
    CHECK_STATUS(dpt_trainer_add_gaussian_release(t, 1.0, 8.0, "late"), DPT_EINVAL);
    CHECK_ERR_HAS("before the first step");
    double loss, acc;
    CHECK_OK(dpt_evaluate(dpt_trainer_model(t), c.loss, &te, &loss, &acc));
    CHECK(acc > 0.85);
    if (!(acc > 0.85)) fprintf(stderr, "dpmac accuracy %g\n", acc);
    dpt_trainer_free(t);

    /* autoencoder with squared error: the reconstruction loss goes down */
    dpt_train_config ca = cfg_for("ae:8-16-4-16-8:relu", DPT_LOSS_SQUARED, 0.1);
    ca.epochs = 8;
    ca.optim.lr = 0.01;
    t = make_trainer(&ca, &tr, 0.5, 0.3, 30, 0.01, &a);
    double l0, l1;
    CHECK_OK(dpt_evaluate(dpt_trainer_model(t), ca.loss, &te, &l0, &acc));
    CHECK_OK(dpt_trainer_run(t, NULL));
    CHECK_OK(dpt_evaluate(dpt_trainer_model(t), ca.loss, &te, &l1, &acc));
    CHECK(l1 < 0.7 * l0);
    if (!(l1 < 0.7 * l0)) fprintf(stderr, "dpmac ae loss %g -> %g\n", l0, l1);
    dpt_trainer_free(t);
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);
}

/* ==== bad settings ==== */
static void test_errors(void) {
    dpt_dpmac_config d = dpt_dpmac_config_defaults();
    dpt_algo *a = NULL;
    d.clip = 0;
    CHECK_STATUS(dpt_algo_dpmac_new(&d, &a), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dpmac_config.clip: the coefficient bound Theta must be > 0");
    d = dpt_dpmac_config_defaults();
    d.sigma = 0;
    CHECK_STATUS(dpt_algo_dpmac_new(&d, &a), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dpmac_config.sigma: the noise multiplier must be > 0");
    d = dpt_dpmac_config_defaults();
    d.z_lr = -1;
    CHECK_STATUS(dpt_algo_dpmac_new(&d, &a), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dpmac_config.z_lr");
    d = dpt_dpmac_config_defaults();
    d.z_lr = NAN;
    CHECK_STATUS(dpt_algo_dpmac_new(&d, &a), DPT_EINVAL);
    CHECK(a == NULL);
    /* squared error on a classifier-shaped model: named when the private trainer is made
     * (its release's sensitivity needs the model's structure) */
    dpt_dataset tr;
    make_blobs(&tr, 50, 8, 3, 1, 1.0f);
    dpt_train_config c = cfg_for("mlp:8-16-3:relu", DPT_LOSS_SQUARED, 0.1);
    dpt_trainer *t = NULL;
    d = dpt_dpmac_config_defaults();
    CHECK_OK(dpt_algo_dpmac_new(&d, &a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, NULL, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("autoencoder");
    CHECK(t == NULL);
    /* a diverged model (a NaN last bias: every coefficient norm is NaN) is DPT_ERANGE from the
     * clipping factors' one scan, naming the algorithm and the example */
    c = cfg_for("mlp:8-16-3:relu", DPT_LOSS_SIGMOID_BCE, 0.5);
    c.max_steps = 1;
    t = make_trainer(&c, &tr, 1.0, 0.3, 3, 0.01, NULL);
    if (t) {
        dpt_model *m = dpt_trainer_model(t);
        m->theta[m->n_params - 1] = NAN;
        CHECK_STATUS(dpt_trainer_run(t, NULL), DPT_ERANGE);
        CHECK_ERR_HAS("dpmac: clip factors: a per-example gradient's squared norm is not finite: the model diverged; "
                      "lower the learning rate");
        dpt_trainer_free(t);
    }
    /* the sgd algorithm has no ledger: a pre-training release is refused */
    dpt_algo *s = NULL;
    CHECK_OK(dpt_algo_sgd_new(&s));
    c = cfg_for("mlp:8-16-3:relu", DPT_LOSS_SIGMOID_BCE, 0.1);
    CHECK_OK(dpt_trainer_new(&c, &tr, NULL, s, &t));
    CHECK_STATUS(dpt_trainer_add_gaussian_release(t, 1.0, 4.0, "pca"), DPT_EINVAL);
    CHECK_ERR_HAS("private");
    dpt_trainer_free(t);
    dpt_dataset_free(&tr);
}

/* ==== second-order Taylor variant (taylor_order 2) ==== */

static dpt_trainer *make_trainer2(const dpt_train_config *c, const dpt_dataset *tr, double sigma, double theta,
                                  double theta2, unsigned w_steps, dpt_algo **algo) {
    dpt_dpmac_config d = dpt_dpmac_config_defaults();
    d.sigma = sigma, d.clip = theta, d.z_steps = 6, d.z_lr = 0.05;
    d.taylor_order = 2, d.clip2 = theta2, d.w_steps = w_steps;
    return trainer_with(c, tr, &d, algo);
}

/* One example's Hessian coefficient (clip2 huge: unclipped) equals the central second
 * differences (double) of its per-layer objective T at the z the z-step produced, for
 * every pair of weights of the same output unit h (bias included). tanh and sigmoid
 * hidden layers exercise the (f - z) f'' term; BCE and squared-error outputs their own. */
static void test_hessian_fd(const char *spec, dpt_loss_kind loss, size_t dim, int classes) {
    dpt_dataset d;
    make_blobs(&d, 40, dim, classes, 7, 1.0f);
    dpt_train_config c = cfg_for(spec, loss, 0.2);
    dpt_algo *a;
    dpt_trainer *t = make_trainer2(&c, &d, 1.0, 1e6, 1e6, 1, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    const size_t P = m->n_params;
    CHECK_OK(a->begin(a, t, 1));
    size_t K = dpt_dpmac_n_weight_layers(a), H = 0;
    for (size_t k = 0; k + 1 < K; k++) H += m->layers[dpt_model_param_layer(m, k)].out_dim;
    float *z = malloc(3 * H * sizeof(float));
    double *th = malloc(P * sizeof(double));
    for (size_t j = 0; j < P; j++) th[j] = m->theta[j];
    size_t checked = 0, nonzero_f2 = 0;
    for (size_t n = 0; n < 3; n++) {
        const float *xn = d.x + n * dim;
        CHECK_OK(dpt_dpmac_debug_chunk(a, t, xn, d.y + n, 1, z + n * H, NULL));
        double ls;
        CHECK_OK(a->begin(a, t, 1));
        CHECK_OK(a->accumulate(a, t, xn, d.y + n, 1, &ls));
        size_t zo = 0, zprev = 0;
        for (size_t k = 0; k < K; k++) {
            size_t li = dpt_model_param_layer(m, k), rows, D1;
            const dpt_layer *L = &m->layers[li];
            const float *in = k ? z + n * H + zprev : xn;
            const float *zk = k + 1 < K ? z + n * H + zo : NULL;
            const float *S2 = dpt_dpmac_debug_hessian(a, k, &rows, &D1);
            CHECK(S2 && rows == L->out_dim && D1 == L->in_dim + 1);
            if (!S2) break;
            const size_t D = D1 - 1;
            for (size_t h = 0; h < rows; h++)
                for (size_t i = 0; i < D1; i++)
                    for (size_t j = i; j < D1; j++) {
                        const size_t pi = i < D ? (size_t)(L->w - m->theta) + h * D + i : (size_t)(L->b - m->theta) + h;
                        const size_t pj = j < D ? (size_t)(L->w - m->theta) + h * D + j : (size_t)(L->b - m->theta) + h;
                        const double e = 1e-3, ki = th[pi], kj = th[pj];
                        double f[4];
                        for (int q = 0; q < 4; q++) {
                            th[pi] = ki + ((q & 1) ? -e : e);
                            th[pj] += ((q & 2) ? -e : e);
                            f[q] = layer_objective(m, li, k + 1 == K, loss, th, in, zk, xn, d.y[n]);
                            th[pi] = ki, th[pj] = kj;
                        }
                        const double fd = (f[0] - f[1] - f[2] + f[3]) / (4 * e * e);
                        CHECK_CLOSE(S2[h * D1 * D1 + i * D1 + j], fd, 2e-4, 2e-3);
                        CHECK(S2[h * D1 * D1 + i * D1 + j] == S2[h * D1 * D1 + j * D1 + i]);
                        checked++;
                    }
            /* the (f - z) f'' term is really present: hidden rows differ from 2 f'^2 */
            if (k + 1 < K) nonzero_f2++;
            zprev = zo;
            if (k + 1 < K) zo += L->out_dim;
        }
    }
    CHECK(checked > 100 && nonzero_f2 > 0);
    free(z), free(th);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* Neighbouring batches (one example removed, same seed): the pre-noise Hessian sums differ
 * by that example's clipped coefficient, of Frobenius norm clip2 per layer (clipping
 * active), and the first-order sums as for taylor_order 1. */
static void test_hessian_sensitivity(void) {
    dpt_dataset d;
    make_blobs(&d, 60, 6, 3, 11, 4.0f);
    dpt_train_config c = cfg_for("mlp:6-12-8-3:relu", DPT_LOSS_SIGMOID_BCE, 0.2);
    dpt_algo *a;
    const double theta2 = 0.02;
    dpt_trainer *t = make_trainer2(&c, &d, 1.0, 0.05, theta2, 1, &a);
    if (!t) return;
    size_t K = 0, b = 17;
    double ls;
    float *S[3][3] = {{NULL}}; /* [pass][layer] */
    size_t n_of[3] = {0};
    const size_t sizes[3] = {b, b - 1, 1};
    const float *xs[3] = {d.x, d.x, d.x + (b - 1) * 6};
    const int32_t *ys[3] = {d.y, d.y, d.y + b - 1};
    for (int pass = 0; pass < 3; pass++) {
        CHECK_OK(a->begin(a, t, sizes[pass]));
        CHECK_OK(a->accumulate(a, t, xs[pass], ys[pass], sizes[pass], &ls));
        K = dpt_dpmac_n_weight_layers(a);
        for (size_t k = 0; k < K; k++) {
            size_t rows, D1;
            const float *H = dpt_dpmac_debug_hessian(a, k, &rows, &D1);
            n_of[k] = rows * D1 * D1;
            S[pass][k] = malloc(n_of[k] * sizeof(float));
            memcpy(S[pass][k], H, n_of[k] * sizeof(float));
        }
    }
    CHECK(K == 3);
    for (size_t k = 0; k < K; k++) {
        double dn = 0, ng = 0;
        for (size_t j = 0; j < n_of[k]; j++) {
            const double v = (double)S[0][k][j] - S[1][k][j];
            dn += v * v, ng += (double)S[2][k][j] * S[2][k][j];
        }
        CHECK(sqrt(dn) <= theta2 * (1 + 1e-3));
        CHECK_CLOSE(sqrt(dn), sqrt(ng), 1e-3 * theta2, 1e-3);
        CHECK_CLOSE(sqrt(ng), theta2, 0, 1e-4); /* clipping active: the bound is reached */
    }
    for (int p = 0; p < 3; p++)
        for (size_t k = 0; k < K; k++) free(S[p][k]);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* The noise finish() adds: first-order sums std sigma sqrt(2K) Theta (M = 2 partitions),
 * Hessian diagonals std sigma sqrt(2K) Theta2 and symmetrized off-diagonals that std over
 * sqrt(2), all divided by 2 qN; the noise is centred. */
static void test_hessian_noise(void) {
    dpt_dataset d;
    make_blobs(&d, 200, 20, 3, 4, 1.0f);
    dpt_train_config c = cfg_for("mlp:20-40-3:relu", DPT_LOSS_SIGMOID_BCE, 0.1);
    const double sigma = 1.3, theta = 0.4, theta2 = 0.7, qN = 0.1 * 200;
    dpt_algo *a;
    dpt_trainer *t = make_trainer2(&c, &d, sigma, theta, theta2, 1, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    const size_t P = m->n_params, b = 20;
    float *g0 = malloc(P * sizeof(float)), *h0[2] = {NULL, NULL};
    double sg[2] = {0}, sd[2] = {0}, so[2] = {0};
    size_t ng = 0, nd = 0, no = 0;
    for (int rep = 0; rep < 6; rep++) {
        double ls;
        CHECK_OK(a->begin(a, t, b));
        CHECK_OK(a->accumulate(a, t, d.x, d.y, b, &ls));
        memcpy(g0, m->grad, P * sizeof(float));
        size_t rows[2], D1[2];
        for (size_t k = 0; k < 2; k++) {
            const float *H = dpt_dpmac_debug_hessian(a, k, &rows[k], &D1[k]);
            free(h0[k]);
            h0[k] = malloc(rows[k] * D1[k] * D1[k] * sizeof(float));
            memcpy(h0[k], H, rows[k] * D1[k] * D1[k] * sizeof(float));
        }
        CHECK_OK(a->finish(a, t, b));
        for (size_t j = 0; j < P; j++) {
            const double v = m->grad[j] * 2.0 * qN - g0[j];
            sg[0] += v, sg[1] += v * v, ng++;
        }
        for (size_t k = 0; k < 2; k++) {
            const float *H = dpt_dpmac_debug_hessian(a, k, &rows[k], &D1[k]);
            const size_t D = D1[k], d2 = D * D;
            for (size_t h = 0; h < rows[k]; h++)
                for (size_t i = 0; i < D; i++)
                    for (size_t j = i; j < D; j++) {
                        const double pre = 0.5 * ((double)h0[k][h * d2 + i * D + j] + h0[k][h * d2 + j * D + i]);
                        const double v = H[h * d2 + i * D + j] * 2.0 * qN - pre;
                        if (i == j) sd[0] += v, sd[1] += v * v, nd++;
                        else so[0] += v, so[1] += v * v, no++;
                    }
        }
    }
    const double want1 = sigma * sqrt(2.0 * 2) * theta, want2 = sigma * sqrt(2.0 * 2) * theta2;
    double mean = sg[0] / ng, sdv = sqrt(sg[1] / ng - mean * mean);
    CHECK_CLOSE(mean, 0.0, 5 * want1 / sqrt((double)ng), 0);
    CHECK_CLOSE(sdv, want1, 5 * want1 / sqrt(2.0 * ng), 0);
    mean = sd[0] / nd, sdv = sqrt(sd[1] / nd - mean * mean);
    CHECK_CLOSE(mean, 0.0, 5 * want2 / sqrt((double)nd), 0);
    CHECK_CLOSE(sdv, want2, 5 * want2 / sqrt(2.0 * nd), 0);
    mean = so[0] / no, sdv = sqrt(so[1] / no - mean * mean);
    CHECK_CLOSE(mean, 0.0, 5 * want2 / sqrt((double)no), 0);
    CHECK_CLOSE(sdv, want2 / sqrt(2.0), 5 * want2 / sqrt(2.0 * no), 0);
    free(g0), free(h0[0]), free(h0[1]);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* w_steps 3 with plain SGD: one full training step gives theta3 with
 * theta1 = w0 - lr g1, theta_{i+1} = theta_i - lr (g1 + H (theta_i - w0)) from the released
 * g1 and H (reference in double); the ledger holds one SGM step; a run learns; errors. */
static void test_hessian_steps_and_errors(void) {
    dpt_dataset tr, te;
    make_blobs(&tr, 400, 8, 3, 1, 1.0f);
    make_blobs(&te, 300, 8, 3, 2, 1.0f);
    dpt_train_config c = cfg_for("mlp:8-16-3:tanh", DPT_LOSS_SIGMOID_BCE, 0.1);
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 1.0; /* large: H (theta - w0) must move theta measurably */
    c.max_steps = 1;
    dpt_algo *a;
    dpt_trainer *t = make_trainer2(&c, &tr, 1.0, 0.3, 3.0, 3, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    const size_t P = m->n_params;
    double *w0 = malloc(P * sizeof(double)), *w = malloc(P * sizeof(double)), *g = malloc(P * sizeof(double));
    for (size_t j = 0; j < P; j++) w0[j] = m->theta[j];
    CHECK_OK(dpt_trainer_run(t, NULL));
    CHECK(dpt_trainer_step(t) == 1);
    size_t rows[2], D1[2];
    const float *H[2], *g1 = dpt_dpmac_debug_g1(a);
    for (size_t k = 0; k < 2; k++) H[k] = dpt_dpmac_debug_hessian(a, k, &rows[k], &D1[k]);
    const double lr = 1.0;
    for (size_t j = 0; j < P; j++) g[j] = g1[j];
    /* the recursion in double reproduces theta3, and H matters: theta3 != w0 - 3 lr g1 */
    double maxdiff = 0, maxrep = 0;
    for (size_t j = 0; j < P; j++) w[j] = w0[j] - lr * g[j];
    for (int it = 1; it < 3; it++) {
        double *nw = malloc(P * sizeof(double));
        for (size_t k = 0; k < 2; k++) {
            const dpt_layer *L = &m->layers[dpt_model_param_layer(m, k)];
            const size_t D = D1[k], Din = D - 1;
            for (size_t h = 0; h < rows[k]; h++)
                for (size_t i = 0; i < D; i++) {
                    const size_t pi = i < Din ? (size_t)(L->w - m->theta) + h * Din + i : (size_t)(L->b - m->theta) + h;
                    double acc = g[pi];
                    for (size_t jj = 0; jj < D; jj++) {
                        const size_t pj = jj < Din ? (size_t)(L->w - m->theta) + h * Din + jj : (size_t)(L->b - m->theta) + h;
                        acc += H[k][h * D * D + i * D + jj] * (w[pj] - w0[pj]);
                    }
                    nw[pi] = w[pi] - lr * acc;
                }
        }
        memcpy(w, nw, P * sizeof(double));
        free(nw);
    }
    for (size_t j = 0; j < P; j++) {
        maxdiff = fmax(maxdiff, fabs(w[j] - m->theta[j]));
        maxrep = fmax(maxrep, fabs(w0[j] - 3 * lr * g[j] - m->theta[j]));
    }
    CHECK(maxdiff < 1e-5);
    CHECK(maxrep > 1e-3);
    if (!(maxdiff < 1e-5 && maxrep > 1e-3)) fprintf(stderr, "w_steps: maxdiff %g maxrep %g\n", maxdiff, maxrep);
    const dpt_ledger *l = dpt_trainer_ledger(t);
    CHECK(l && dpt_ledger_steps(l) == 1);
    free(w0), free(w), free(g);
    dpt_trainer_free(t);
    /* a run learns */
    c = cfg_for("mlp:8-16-3:tanh", DPT_LOSS_SIGMOID_BCE, 0.1);
    c.epochs = 4;
    dpt_trainer *t2 = NULL;
    dpt_dpmac_config dc = dpt_dpmac_config_defaults();
    dc.sigma = 0.5, dc.clip = 0.3, dc.z_steps = 5, dc.z_lr = 0.01, dc.taylor_order = 2, dc.clip2 = 0.3, dc.w_steps = 3;
    CHECK_OK(dpt_algo_dpmac_new(&dc, &a));
    CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &t2));
    if (t2) {
        CHECK_OK(dpt_trainer_run(t2, NULL));
        double loss, acc;
        CHECK_OK(dpt_evaluate(dpt_trainer_model(t2), c.loss, &te, &loss, &acc));
        CHECK(acc > 0.85);
        if (!(acc > 0.85)) fprintf(stderr, "dpmac order 2 accuracy %g\n", acc);
        dpt_trainer_free(t2);
    }
    /* errors */
    dc = dpt_dpmac_config_defaults();
    dc.taylor_order = 3;
    CHECK_STATUS(dpt_algo_dpmac_new(&dc, &a), DPT_EINVAL);
    CHECK_ERR_HAS("taylor_order: 1 or 2");
    dc = dpt_dpmac_config_defaults();
    dc.taylor_order = 2, dc.clip2 = 0;
    CHECK_STATUS(dpt_algo_dpmac_new(&dc, &a), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_dpmac_config.clip2");
    dc = dpt_dpmac_config_defaults();
    dc.w_steps = 2;
    CHECK_STATUS(dpt_algo_dpmac_new(&dc, &a), DPT_EINVAL);
    CHECK_ERR_HAS("w_steps > 1 needs taylor_order 2");
    dc = dpt_dpmac_config_defaults();
    dc.taylor_order = 2, dc.w_steps = 0;
    CHECK_STATUS(dpt_algo_dpmac_new(&dc, &a), DPT_EINVAL);
    CHECK_ERR_HAS("w_steps");
    dc = dpt_dpmac_config_defaults();
    dc.taylor_order = 2, dc.secure = 1;
    CHECK_STATUS(dpt_algo_dpmac_new(&dc, &a), DPT_EINVAL);
    CHECK_ERR_HAS("non-secure");
    const char *bad_spec[] = {"mlp:8-16-3:gelu", "mlp:8-16-3:relu"};
    const dpt_loss_kind bad_loss[] = {DPT_LOSS_SIGMOID_BCE, DPT_LOSS_SOFTMAX_CE};
    const char *bad_msg[] = {"no second derivative", "separable"};
    for (int i = 0; i < 2; i++) {
        c = cfg_for(bad_spec[i], bad_loss[i], 0.1);
        dc = dpt_dpmac_config_defaults();
        dc.taylor_order = 2;
        t2 = trainer_with(&c, &tr, &dc, &a);
        if (!t2) continue;
        CHECK_STATUS(a->begin(a, t2, 5), DPT_EINVAL);
        CHECK_ERR_HAS(bad_msg[i]);
        dpt_trainer_free(t2);
    }
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);
}

/* ==== non-private MAC: the plain mean of the unclipped coefficients, no ledger ==== */
static void test_nonprivate_mac(void) {
    dpt_dataset d, te;
    make_blobs(&d, 120, 6, 3, 11, 4.0f); /* large inputs: DP-MAC's Theta would clip */
    make_blobs(&te, 300, 6, 3, 12, 4.0f);
    dpt_train_config c = cfg_for("mlp:6-12-8-3:relu", DPT_LOSS_SIGMOID_BCE, 0.0);
    c.sampler = DPT_SAMPLER_SHUFFLE;
    c.batch_size = 17;
    dpt_dpmac_config mc = dpt_dpmac_config_defaults();
    mc.private_ = 0;
    mc.sigma = 0, mc.clip = 0; /* ignored when non-private */
    mc.z_steps = 10, mc.z_lr = 0.01;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpmac_new(&mc, &a));
    if (!a) return;
    CHECK(!a->is_private && a->record == NULL && a->privacy_note && strstr(a->privacy_note, "non-private"));
    CHECK(!strcmp(a->name, "mac"));
    CHECK_OK(dpt_trainer_new(&c, &d, &te, a, &t));
    CHECK(dpt_trainer_ledger(t) == NULL);
    dpt_model *m = dpt_trainer_model(t);
    const size_t P = m->n_params, b = 17;
    float *coef = malloc(b * P * sizeof(float));
    CHECK_OK(dpt_dpmac_debug_chunk(a, t, d.x, d.y, b, NULL, coef));
    double ls, maxn = 0;
    CHECK_OK(a->begin(a, t, b));
    CHECK_OK(a->accumulate(a, t, d.x, d.y, b, &ls));
    CHECK_OK(a->finish(a, t, b));
    for (size_t i = 0; i < b; i++) {
        double nn = 0;
        for (size_t j = 0; j < P; j++) nn += (double)coef[i * P + j] * coef[i * P + j];
        if (sqrt(nn) > maxn) maxn = sqrt(nn);
    }
    CHECK(maxn > 1.0); /* clipping to the default Theta 0.3 would have changed the sum */
    double err = 0, ref = 0;
    for (size_t j = 0; j < P; j++) {
        double sum = 0;
        for (size_t i = 0; i < b; i++) sum += coef[i * P + j];
        sum /= 2.0 * (double)b;
        err = fmax(err, fabs(m->grad[j] - sum));
        ref = fmax(ref, fabs(sum));
    }
    CHECK(ref > 0 && err <= 1e-4 * ref);
    if (!(err <= 1e-4 * ref)) fprintf(stderr, "mac direction error %g (scale %g)\n", err, ref);
    /* a run learns and leaves no ledger */
    c.epochs = 6;
    c.optim.lr = 0.03;
    dpt_trainer_free(t);
    CHECK_OK(dpt_algo_dpmac_new(&mc, &a));
    CHECK_OK(dpt_trainer_new(&c, &d, &te, a, &t));
    CHECK_OK(dpt_trainer_run(t, NULL));
    CHECK(dpt_trainer_ledger(t) == NULL);
    double loss, acc;
    CHECK_OK(dpt_evaluate(dpt_trainer_model(t), c.loss, &te, &loss, &acc));
    CHECK(acc > 0.9);
    if (!(acc > 0.9)) fprintf(stderr, "mac accuracy %g\n", acc);
    free(coef);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
    dpt_dataset_free(&te);
}

int main(void) {
    test_taylor_fd("mlp:5-6-4-3:tanh", DPT_LOSS_SIGMOID_BCE, 5, 3);
    test_taylor_fd("ae:4-5-3-5-4:sigmoid", DPT_LOSS_SQUARED, 4, 2);
    test_z_gradient_fd("mlp:5-6-4-3:tanh", DPT_LOSS_SIGMOID_BCE, 5, 3);
    test_z_gradient_fd("ae:4-5-3-5-4:sigmoid", DPT_LOSS_SQUARED, 4, 2);
    test_z_per_example();
    test_sensitivity("mlp:6-12-8-3:relu", DPT_LOSS_SIGMOID_BCE, 6, 3, 0.05);
    test_sensitivity("ae:6-10-3-10-6:tanh", DPT_LOSS_SQUARED, 6, 2, 0.001);
    test_noise_only();
    test_ledger_and_learning();
    test_errors();
    test_nonprivate_mac();
    test_hessian_fd("mlp:5-6-4-3:tanh", DPT_LOSS_SIGMOID_BCE, 5, 3);
    test_hessian_fd("ae:4-5-3-5-4:sigmoid", DPT_LOSS_SQUARED, 4, 2);
    test_hessian_sensitivity();
    test_hessian_noise();
    test_hessian_steps_and_errors();
    TEST_MAIN_END();
}
