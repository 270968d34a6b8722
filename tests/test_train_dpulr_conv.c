/* train/dpulr on convolutions (issue 10 item 4), tiny images made here.
 * - Controller: the conv module's lambda_min, lambda_max, rank and s (Eq. 7) against a
 *   naive dense A = sum_i L0_i^2 sum_p xt_p xt_p^T (patches unfolded by plain loops,
 *   Jacobi eigenvalues), with padding and with stride 2; a batch of one image (T < n)
 *   is rank deficient.
 * - LR estimator: with a small s, antithetic pairs and the L0 baseline (explicit mode,
 *   no clipping), the mean of the pre-noise sum over many draws matches the backprop
 *   gradient within a statistical bound, on a model whose second conv module sits inside
 *   a residual group (its source is before the perturbed output).
 * - Sensitivity: neighbouring batches (last image removed), the same noise stream: the
 *   pre-noise sums differ by <= C_l per module and <= C overall (explicit mode and the
 *   controller with a data-independent s).
 * - Noise: explicit mode adds N(0, sigma0^2 C^2); the controller's released sum on a
 *   one-conv model has empirical covariance >= sigma0^2 C^2 in every direction, full rank
 *   and rank deficient (top-up).
 * - Errors: modules that start with GroupNorm or hold two parameter layers. */
#include <dptrain/train.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dpulr_testutil.h"

/* n images C x H x W: class c brightens channel (c mod C) in a class-dependent quadrant */
static void make_images(dpt_dataset *d, size_t n, size_t C, size_t H, size_t W, int classes, uint64_t seed) {
    memset(d, 0, sizeof *d);
    size_t dim = C * H * W;
    d->n = n;
    d->dim = dim;
    d->n_classes = classes;
    d->shape[0] = C, d->shape[1] = H, d->shape[2] = W;
    d->x = dpt_alloc(n * dim, sizeof(float), "x");
    d->y = dpt_alloc(n, sizeof(int32_t), "y");
    strcpy(d->source, "synthetic images");
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t i = 0; i < n; i++) {
        int cl = (int)(i % (size_t)classes);
        d->y[i] = cl;
        for (size_t c = 0; c < C; c++)
            for (size_t h = 0; h < H; h++)
                for (size_t w = 0; w < W; w++) {
                    int on = c == (size_t)cl % C && (h < H / 2) == (cl % 2 == 0) && (w < W / 2) == (cl % 3 == 0);
                    d->x[i * dim + (c * H + h) * W + w] = (float)(dpt_rng_gauss_ref(&r) * 0.5 + (on ? 1.0 : 0.0));
                }
    }
    dpt_rng_free(&r);
}

static dpt_train_config base_cfg(const char *spec, double q, size_t nb) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.sampler = DPT_SAMPLER_POISSON_REJECT;
    c.sample_rate = q;
    c.min_batch = nb;
    c.epochs = 1;
    c.seed = 7;
    c.threads = 1;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.1;
    return c;
}



/* Naive controller matrix of conv layer L for images x [b, C H W] with clean losses L0:
 * A [n, n] = sum_i L0_i^2 sum over output positions of [patch; 1] [patch; 1]^T. */
static void naive_conv_A(const dpt_layer *L, const float *x, const float *L0, size_t b, double *A) {
    size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2], k = L->k, st = L->stride;
    long pad = (long)L->pad;
    size_t Ho = L->out_shape[1], Wo = L->out_shape[2], n = C * k * k + 1;
    double *xt = malloc(n * sizeof(double));
    memset(A, 0, n * n * sizeof(double));
    for (size_t i = 0; i < b; i++)
        for (size_t oh = 0; oh < Ho; oh++)
            for (size_t ow = 0; ow < Wo; ow++) {
                size_t e = 0;
                for (size_t c = 0; c < C; c++)
                    for (size_t ki = 0; ki < k; ki++)
                        for (size_t kj = 0; kj < k; kj++) {
                            long h = (long)(oh * st + ki) - pad, w = (long)(ow * st + kj) - pad;
                            xt[e++] = h < 0 || w < 0 || h >= (long)H || w >= (long)W
                                          ? 0.0
                                          : x[i * C * H * W + (c * H + (size_t)h) * W + (size_t)w];
                        }
                xt[e] = 1.0;
                for (size_t p = 0; p < n; p++)
                    for (size_t q = 0; q < n; q++) A[p * n + q] += (double)L0[i] * L0[i] * xt[p] * xt[q];
            }
    free(xt);
}

/* ==== controller against the naive dense computation ==== */

static void test_controller_matrix(const char *spec, size_t C, size_t H, size_t W, size_t b) {
    dpt_dataset d;
    make_images(&d, 12, C, H, W, 2, 21);
    dpt_train_config c = base_cfg(spec, 1.0, 1);
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.noise = DPT_ULR_CONTROLLER; /* not the default */
    u.copies = 4;
    u.sigma0 = 0.7;
    u.clip = 2.0;
    dpt_algo *a;
    dpt_trainer *t = make(&c, &d, &u, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    float *g = malloc(m->n_params * sizeof(float));
    step_grad(t, a, d.x, d.y, b, 1, g);
    dpt_dpulr_module_info info;
    CHECK_OK(dpt_algo_dpulr_module_info(a, 0, &info));
    const dpt_layer *L = &m->layers[0];
    size_t n = L->in_shape[0] * L->k * L->k + 1;
    CHECK(info.dim == n);
    /* clean losses, then the naive matrix */
    CHECK_OK(dpt_model_forward(m, d.x, b));
    float *L0 = malloc(b * sizeof(float));
    CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, dpt_model_output(m), b, m->out_dim, d.y, NULL, L0, NULL));
    double *A = malloc(n * n * sizeof(double)), *ev = malloc(n * sizeof(double));
    naive_conv_A(L, d.x, L0, b, A);
    tu_jacobi_eigenvalues(A, n, ev);
    double lmin = INFINITY, lmax = 0;
    for (size_t i = 0; i < n; i++) lmin = fmin(lmin, ev[i]), lmax = fmax(lmax, ev[i]);
    size_t T = L->out_shape[1] * L->out_shape[2];
    printf("conv controller %s b=%zu: n %zu, lambda_min %.6g (naive %.6g), lambda_max %.6g (naive %.6g), rank %zu, "
           "s %.4g\n", spec, b, n, info.lambda_min, lmin, info.lambda_max, lmax, info.rank, info.s);
    CHECK_CLOSE(info.lambda_max, lmax, 0, 1e-4);
    double floor2 = u.sigma0 * u.sigma0 * u.clip * u.clip;
    if (b * T >= n && lmin > 1e-4 * lmax) {
        CHECK_CLOSE(info.lambda_min, lmin, 1e-6 * lmax, 1e-3);
        CHECK(info.rank == n);
        CHECK_CLOSE(info.s * info.s, lmin / (u.copies * floor2), 0, 1e-3); /* Eq. 7 */
    } else {
        CHECK(info.lambda_min == 0);
        CHECK(info.rank < n);
        /* the naive matrix has as many eigenvalues above the tolerance */
        size_t r = 0;
        for (size_t i = 0; i < n; i++) r += ev[i] > 1e-6 * lmax;
        CHECK(info.rank == r);
    }
    free(g);
    free(L0);
    free(A);
    free(ev);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* ==== the LR estimator against backprop ==== */

static void test_estimator_vs_backprop(const char *spec) {
    dpt_dataset d;
    make_images(&d, 8, 1, 4, 4, 2, 22);
    dpt_train_config c = base_cfg(spec, 1.0, 1);
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.copies = 16;
    u.sigma0 = 1.0;
    u.clip = 1e6; /* no clipping: the pre-noise sum is the plain sum of the estimates */
    u.noise = DPT_ULR_EXPLICIT;
    u.perturb_std = 0.002; /* small: the ReLU kinks bias the smoothed gradient (at 0.02 by up to 6 se) */
    u.antithetic = 1;
    u.baseline = 1;
    dpt_algo *a;
    dpt_trainer *t = make(&c, &d, &u, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    const size_t P = m->n_params, b = 6;
    /* backprop: sum over the batch of the per-example gradients */
    float *dout = malloc(b * m->out_dim * sizeof(float)), *bp = malloc(P * sizeof(float));
    CHECK_OK(dpt_model_forward(m, d.x, b));
    CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, dpt_model_output(m), b, m->out_dim, d.y, NULL, NULL, dout));
    CHECK_OK(dpt_model_backward(m, dout, b));
    CHECK_OK(dpt_model_param_grad(m, b, DPT_GRAD_SUM, NULL, bp, 0, 0));
    const int R = 1500;
    double *mean = calloc(P, sizeof(double)), *m2 = calloc(P, sizeof(double));
    float *g = malloc(P * sizeof(float));
    for (int r = 0; r < R; r++) {
        step_grad(t, a, d.x, d.y, b, 0, g);
        for (size_t j = 0; j < P; j++) {
            double dl = g[j] - mean[j];
            mean[j] += dl / (r + 1);
            m2[j] += dl * (g[j] - mean[j]);
        }
    }
    int big = 0, bad = 0;
    double worst = 0, dn = 0, bn = 0;
    for (size_t j = 0; j < P; j++) {
        dn += (mean[j] - bp[j]) * (mean[j] - bp[j]);
        bn += (double)bp[j] * bp[j];
        double se = sqrt(m2[j] / (R - 1) / R), z = fabs(mean[j] - bp[j]) / (se + 1e-12);
        /* 5 standard errors plus 2% for the O(s^2) smoothing bias (ReLU kinks) */
        if (fabs(mean[j] - bp[j]) > 5 * se + 0.02 * fabs(bp[j]) + 1e-5) {
            bad++;
            fprintf(stderr, "param %zu: LR mean %.6g, backprop %.6g, se %.3g\n", j, mean[j], bp[j], se);
        }
        if (z > worst) worst = z;
        big += fabs(bp[j]) > 8 * se;
    }
    CHECK(dpt_algo_dpulr_n_modules(a) == 3);
    printf("conv LR estimator vs backprop: %zu parameters, %d > 8 se from 0, worst |diff| / se %.2f, "
           "||mean - backprop|| / ||backprop|| %.4f\n", P, big, worst, sqrt(dn / bn));
    CHECK(bad == 0);
    /* the comparison can tell a wrong estimator apart: most coordinates are resolved (a
     * noisy estimator, e.g. rows that read another example's residual source, resolves
     * few) and the whole mean is close */
    CHECK(big >= (int)P / 2);
    CHECK(sqrt(dn / bn) < 0.05);
    free(dout);
    free(bp);
    free(mean);
    free(m2);
    free(g);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* ==== sensitivity ==== */

static void test_sensitivity(dpt_ulr_noise mode) {
    const char *spec = "cnn:2x5x5:conv3k3p1,relu,maxpool2s1,[conv3k3p1],relu,flatten,fc3";
    dpt_dataset d;
    make_images(&d, 40, 2, 5, 5, 3, 23);
    dpt_train_config c = base_cfg(spec, 0.25, 5);
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.copies = 4;
    u.sigma0 = 1.0;
    u.clip = 0.05;
    u.noise = mode;
    u.perturb_std = mode == DPT_ULR_EXPLICIT ? 0.3 : 1000.0; /* controller: a floor above its choice */
    dpt_algo *a;
    dpt_trainer *t = make(&c, &d, &u, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    size_t P = m->n_params, b = 12;
    float *s1 = malloc(P * sizeof(float)), *s2 = malloc(P * sizeof(float));
    dpt_rng_state st;
    dpt_rng_get_state(dpt_trainer_noise_rng(t), &st);
    step_grad(t, a, d.x, d.y, b, 0, s1);
    CHECK_OK(dpt_rng_set_state(dpt_trainer_noise_rng(t), &st));
    step_grad(t, a, d.x, d.y, b - 1, 0, s2);
    size_t L = dpt_algo_dpulr_n_modules(a);
    CHECK(L == 3);
    double tot = 0, Cl = u.clip / sqrt((double)L);
    for (size_t k = 0; k < L; k++) {
        const dpt_layer *ly = &m->layers[dpt_model_param_layer(m, k)];
        double dk = 0;
        for (size_t j = ly->param_offset; j < ly->param_offset + ly->n_params; j++)
            dk += ((double)s1[j] - s2[j]) * ((double)s1[j] - s2[j]);
        printf("conv sensitivity (%s) module %zu: ||diff|| / C_l = %.4f\n",
               mode == DPT_ULR_EXPLICIT ? "explicit" : "controller", k, sqrt(dk) / Cl);
        CHECK(sqrt(dk) <= Cl * (1 + 1e-4) + 1e-7);
        CHECK(sqrt(dk) > 0.5 * Cl); /* the removed example was clipped */
        tot += dk;
    }
    CHECK(sqrt(tot) <= u.clip * (1 + 1e-4) + 1e-7);
    dpt_dpulr_module_info info;
    CHECK_OK(dpt_algo_dpulr_module_info(a, 0, &info));
    CHECK(info.clipped > 0 && info.examples == b - 1);
    if (mode == DPT_ULR_CONTROLLER) CHECK_CLOSE(info.s, 1000.0, 0, 1e-12);
    free(s1);
    free(s2);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* ==== noise ==== */

static void test_explicit_noise(void) {
    dpt_dataset d;
    make_images(&d, 40, 1, 4, 4, 2, 24);
    dpt_train_config c = base_cfg("cnn:1x4x4:conv2k3p1,relu,flatten,fc2", 0.25, 5);
    ulr_check_explicit_noise(&c, &d, "conv");
    dpt_dataset_free(&d);
}

/* The released sum (N_B = 1) of a fixed batch, many times, on one conv 1x3x3 -> 2x2x2 with
 * average pooling to 2 logits (P = 10, n = 5): its covariance has every eigenvalue >=
 * sigma0^2 C^2. b = 1 image has T = 4 patches < n = 5: rank deficient, top-up needed. */
static void test_controller_floor(size_t b, int reps) {
    dpt_dataset d;
    make_images(&d, 40, 1, 3, 3, 2, 25);
    dpt_train_config c = base_cfg("cnn:1x3x3:conv2k2,avgpool2", 1.0, 1);
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.noise = DPT_ULR_CONTROLLER; /* not the default */
    u.copies = 8;
    u.sigma0 = 0.02; /* small sigma0 and large C: small s, nothing clipped (the controller's regime) */
    u.clip = 1000;
    dpt_algo *a;
    dpt_trainer *t = make(&c, &d, &u, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    size_t P = m->n_params;
    CHECK(P == 10);
    double *mean = calloc(P, sizeof(double)), *cov = calloc(P * P, sizeof(double));
    float *g = malloc(P * sizeof(float));
    size_t clipped = 0;
    dpt_dpulr_module_info info;
    for (int r = 0; r < reps; r++) {
        step_grad(t, a, d.x, d.y, b, 1, g);
        CHECK_OK(dpt_algo_dpulr_module_info(a, 0, &info));
        clipped += info.clipped;
        for (size_t i = 0; i < P; i++) mean[i] += g[i];
        for (size_t i = 0; i < P; i++)
            for (size_t j = 0; j < P; j++) cov[i * P + j] += (double)g[i] * g[j];
    }
    for (size_t i = 0; i < P; i++) mean[i] /= reps;
    for (size_t i = 0; i < P; i++)
        for (size_t j = 0; j < P; j++) cov[i * P + j] = cov[i * P + j] / reps - mean[i] * mean[j];
    double *ev = malloc(P * sizeof(double)), emin = INFINITY;
    tu_jacobi_eigenvalues(cov, P, ev);
    for (size_t i = 0; i < P; i++) emin = fmin(emin, ev[i]);
    double floor2 = u.sigma0 * u.sigma0 * u.clip * u.clip;
    printf("conv controller floor b=%zu: min eigenvalue of the released covariance / floor = %.3f (s %.4g, rank %zu "
           "of %zu, clipped %zu)\n", b, emin / floor2, info.s, info.rank, info.dim, clipped);
    CHECK(emin >= 0.75 * floor2);
    CHECK(clipped == 0);
    if (b == 1) CHECK(info.rank < info.dim && info.lambda_min == 0);
    else CHECK(info.rank == info.dim && info.lambda_min > 0);
    free(ev);
    free(mean);
    free(cov);
    free(g);
    dpt_trainer_free(t);
    dpt_dataset_free(&d);
}

/* ==== errors ==== */

static void test_nonfinite(void) {
    dpt_dataset d;
    make_images(&d, 40, 1, 4, 4, 2, 24);
    /* --modules 0: one Conv2d module, so its own norm path sees the NaN */
    dpt_train_config c = base_cfg("cnn:1x4x4:conv2k3p1,relu,flatten,fc2", 0.25, 5);
    ulr_check_nonfinite_error(&c, &d);
    dpt_dataset_free(&d);
}

static void test_errors(void) {
    dpt_dataset d;
    make_images(&d, 40, 1, 4, 4, 2, 26);
    const char *specs[2] = {"cnn:1x4x4:conv2k3p1,gn1,relu,flatten,fc2", "cnn:1x4x4:conv2k3p1,gn1,relu,flatten,fc2"};
    const char *mods[2] = {"auto", "0,4"};
    const char *want[2] = {"neither a Linear nor a Conv2d", "second layer with parameters"};
    for (int k = 0; k < 2; k++) {
        dpt_train_config c = base_cfg(specs[k], 0.25, 5);
        c.max_steps = 1;
        dpt_dpulr_config u = dpt_dpulr_config_defaults();
        u.modules = mods[k];
        dpt_algo *a = NULL;
        dpt_trainer *t = NULL;
        CHECK_OK(dpt_algo_dpulr_new(&u, &a));
        CHECK_OK(dpt_trainer_new(&c, &d, NULL, a, &t));
        CHECK(dpt_trainer_run(t, NULL) != DPT_OK);
        CHECK_ERR_HAS("dpt_dpulr_config.modules");
        CHECK_ERR_HAS(want[k]);
        dpt_trainer_free(t);
    }
    dpt_dataset_free(&d);
}

int main(void) {
    test_nonfinite();
    test_errors();
    test_controller_matrix("cnn:2x5x5:conv3k3p1,relu,flatten,fc2", 2, 5, 5, 6);
    test_controller_matrix("cnn:2x6x6:conv3k3s2,relu,flatten,fc2", 2, 6, 6, 5);
    test_controller_matrix("cnn:2x6x6:conv3k3s2,relu,flatten,fc2", 2, 6, 6, 1); /* T = 4 < n = 19 */
    test_estimator_vs_backprop("cnn:1x4x4:[conv2k3p1,tanh,conv1k3p1,relu],flatten,fc2");
    test_sensitivity(DPT_ULR_EXPLICIT);
    test_sensitivity(DPT_ULR_CONTROLLER);
    test_explicit_noise();
    test_controller_floor(30, 3000);
    test_controller_floor(1, 3000);
    TEST_MAIN_END();
}
