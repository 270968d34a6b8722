/* nn tests: every layer and loss against a naive double-precision reference written here
 * (forward values, and float backward vs central finite differences of the double
 * reference), the four gradient modes against each other, jvp, whole-model gradients,
 * spec errors, initializer variances and bit-identical reruns. */
#include <dptrain/nn.h>

#include "testutil.h"

#include <stdint.h>

/* ==== helpers and double references ==== */

static dpt_rng rng;

static void fill_gauss(float *x, size_t n, double sd) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(sd * dpt_rng_gauss_ref(&rng));
}
/* values in +-[0.15, 1.5]: away from the ReLU kink at 0 */
static void fill_away(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double u = 0.15 + 1.35 * dpt_rng_uniform(&rng);
        x[i] = (float)(dpt_rng_uniform(&rng) < 0.5 ? -u : u);
    }
}

static double ref_act(dpt_layer_kind k, double x) {
    switch (k) {
    case DPT_LAYER_RELU: return x > 0 ? x : 0;
    case DPT_LAYER_GELU: return 0.5 * x * erfc(-x / sqrt(2.0)); /* erfc: exact tail */
    case DPT_LAYER_TANH: return tanh(x);
    case DPT_LAYER_SIGMOID: return 1.0 / (1.0 + exp(-x));
    default: return x;
    }
}

/* v[B, K] = x W^T + b, all double; theta_l = [W (K x D), b (K) if bias] */
static void ref_linear(const double *th, int bias, const double *x, size_t B, size_t D, size_t K, double *v) {
    for (size_t i = 0; i < B; i++)
        for (size_t k = 0; k < K; k++) {
            double s = bias ? th[K * D + k] : 0.0;
            for (size_t d = 0; d < D; d++) s += th[k * D + d] * x[i * D + d];
            v[i * K + k] = s;
        }
}

/* whole model in double from theta (double) and x (double): out [B, out_dim] */
static void ref_model(const dpt_model *m, const double *theta, const double *x, size_t B, double *out) {
    size_t maxd = m->in_dim;
    for (size_t l = 0; l < m->n_layers; l++)
        if (m->layers[l].out_dim > maxd) maxd = m->layers[l].out_dim;
    double *a = calloc(B * maxd, sizeof *a), *b = calloc(B * maxd, sizeof *b);
    memcpy(a, x, B * m->in_dim * sizeof *a);
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (L->kind == DPT_LAYER_LINEAR)
            ref_linear(theta + L->param_offset, L->has_bias, a, B, L->in_dim, L->out_dim, b);
        else
            for (size_t j = 0; j < B * L->in_dim; j++) b[j] = ref_act(L->kind, a[j]);
        double *t = a; a = b; b = t;
    }
    memcpy(out, a, B * m->out_dim * sizeof *out);
    free(a);
    free(b);
}

/* per-example loss in double */
static double ref_loss1(dpt_loss_kind kind, const double *o, size_t K, int32_t y, const float *t) {
    double l = 0.0;
    if (kind == DPT_LOSS_SOFTMAX_CE) {
        double s = 0.0;
        for (size_t k = 0; k < K; k++) s += exp(o[k]);
        return log(s) - o[y];
    }
    for (size_t k = 0; k < K; k++) {
        if (kind == DPT_LOSS_SIGMOID_BCE) {
            double tk = K == 1 ? y : (y == (int32_t)k);
            double p = 1.0 / (1.0 + exp(-o[k]));
            l += -(tk * log(p) + (1 - tk) * log(1 - p));
        } else {
            l += 0.5 * (o[k] - t[k]) * (o[k] - t[k]);
        }
    }
    return l;
}

static double *to_double(const float *x, size_t n) {
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* ==== Linear layer ==== */

static void test_linear(int bias) {
    const size_t D = 4, K = 3, B = 5;
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(bias ? "mlp:4-3" : "mlp:4-3:nobias", B, 1, &m));
    if (!m) return;
    const dpt_layer *L = &m->layers[0];
    const size_t P = L->n_params;
    CHECK(P == K * D + (bias ? K : 0));
    fill_gauss(m->theta, P, 0.7);
    float x[20], v[15], dv[15], dx[20];
    fill_gauss(x, B * D, 1.0);
    fill_gauss(dv, B * K, 1.0);
    CHECK_OK(L->ops->forward(L, x, v, B));
    double *th = to_double(m->theta, P), *xd = to_double(x, B * D), vr[15];
    ref_linear(th, bias, xd, B, D, K, vr);
    for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(v[j], vr[j], 1e-6, 1e-5);

    /* f = sum_i <dv_i, v_i>: FD of the double reference in theta and x */
    const double h = 1e-6;
    float gsum[15], gpe[5 * 16], gsq[5], gw[15], w[5];
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_SUM, NULL, gsum, 0, 0));
    CHECK_OK(L->ops->backward_input(L, x, v, dv, dx, B));
    for (size_t p = 0; p < P + B * D; p++) {
        double *z = p < P ? &th[p] : &xd[p - P], z0 = *z, fp = 0, fm = 0, vv[15];
        *z = z0 + h;
        ref_linear(th, bias, xd, B, D, K, vv);
        for (size_t j = 0; j < B * K; j++) fp += dv[j] * vv[j];
        *z = z0 - h;
        ref_linear(th, bias, xd, B, D, K, vv);
        for (size_t j = 0; j < B * K; j++) fm += dv[j] * vv[j];
        *z = z0;
        double fd = (fp - fm) / (2 * h);
        if (p < P) CHECK_CLOSE(gsum[p], fd, 1e-5, 1e-4);
        else CHECK_CLOSE(dx[p - P], fd, 1e-5, 1e-4);
    }
    /* per-example rows (ld = P + 1 > P) sum to SUM; row i is dv_i x_i^T then dv_i */
    const size_t ld = P + 1;
    for (size_t j = 0; j < B * ld; j++) gpe[j] = -7.0f; /* the pad column must stay */
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_PER_EXAMPLE, NULL, gpe, ld, 0));
    for (size_t i = 0; i < B; i++) {
        CHECK(gpe[i * ld + P] == -7.0f);
        CHECK_CLOSE(gpe[i * ld + 1 * D + 2], (double)dv[i * K + 1] * x[i * D + 2], 1e-7, 1e-6);
        if (bias) CHECK(gpe[i * ld + K * D + 2] == dv[i * K + 2]);
    }
    for (size_t p = 0; p < P; p++) {
        double s = 0;
        for (size_t i = 0; i < B; i++) s += gpe[i * ld + p];
        CHECK_CLOSE(gsum[p], s, 1e-6, 1e-5);
    }
    /* SQNORM = squared norms of the materialized rows; WEIGHTED = sum_i w_i g_i */
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_SQNORM, NULL, gsq, 0, 0));
    for (size_t i = 0; i < B; i++) {
        double s = 0;
        for (size_t p = 0; p < P; p++) s += (double)gpe[i * ld + p] * gpe[i * ld + p];
        CHECK_CLOSE(gsq[i], s, 1e-6, 1e-5);
        w[i] = (float)(0.1 + 0.3 * i);
    }
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_WEIGHTED, w, gw, 0, 0));
    for (size_t p = 0; p < P; p++) {
        double s = 0;
        for (size_t i = 0; i < B; i++) s += (double)w[i] * gpe[i * ld + p];
        CHECK_CLOSE(gw[p], s, 1e-6, 1e-5);
    }
    CHECK_STATUS(L->ops->backward_params(L, x, dv, B, DPT_GRAD_WEIGHTED, NULL, gw, 0, 0), DPT_EINVAL);
    CHECK_STATUS(L->ops->backward_params(L, x, dv, B, DPT_GRAD_PER_EXAMPLE, NULL, gpe, P - 1, 0), DPT_EINVAL);
    /* accumulate = 1 adds to what is there, in every mode */
    for (int mode = 0; mode < 4; mode++) {
        float a[5 * 16], b0[5 * 16];
        size_t n = mode == DPT_GRAD_PER_EXAMPLE ? B * ld : mode == DPT_GRAD_SQNORM ? B : P;
        CHECK_OK(L->ops->backward_params(L, x, dv, B, (dpt_grad_mode)mode, w, b0, ld, 0));
        for (size_t j = 0; j < n; j++) a[j] = 0.5f + 0.01f * j;
        CHECK_OK(L->ops->backward_params(L, x, dv, B, (dpt_grad_mode)mode, w, a, ld, 1));
        for (size_t j = 0; j < n; j++)
            if (mode != DPT_GRAD_PER_EXAMPLE || j % ld < P) CHECK_CLOSE(a[j], 0.5 + 0.01 * j + b0[j], 1e-6, 1e-5);
    }
    /* jvp in a parameter direction and an input direction vs FD of the reference forward */
    float tx[20], tth[15], jv[15];
    fill_gauss(tx, B * D, 1.0);
    fill_gauss(tth, P, 1.0);
    for (int which = 0; which < 3; which++) { /* 0: dx only, 1: dtheta only, 2: both */
        const float *pdx = which != 1 ? tx : NULL, *pdt = which != 0 ? tth : NULL;
        CHECK_OK(L->ops->jvp(L, x, v, pdx, pdt, jv, B));
        double tp[15], tm[15], *thp = to_double(m->theta, P), *xp = to_double(x, B * D);
        for (int s = 0; s < 2; s++) {
            double e = s ? -h : h;
            for (size_t p = 0; p < P; p++) thp[p] = m->theta[p] + (pdt ? e * pdt[p] : 0);
            for (size_t j = 0; j < B * D; j++) xp[j] = x[j] + (pdx ? e * pdx[j] : 0);
            ref_linear(thp, bias, xp, B, D, K, s ? tm : tp);
        }
        for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(jv[j], (tp[j] - tm[j]) / (2 * h), 1e-5, 1e-4);
        free(thp);
        free(xp);
    }
    CHECK_OK(L->ops->jvp(L, x, v, NULL, NULL, jv, B));
    for (size_t j = 0; j < B * K; j++) CHECK(jv[j] == 0.0f);
    free(th);
    free(xd);
    dpt_model_free(m);
}

/* ==== activations ==== */

static void test_activation(const char *spec, dpt_layer_kind kind) {
    const size_t n = 6, B = 4;
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 1, &m));
    if (!m) return;
    const dpt_layer *L = &m->layers[1];
    CHECK(L->kind == kind && L->n_params == 0 && L->ops->backward_params == NULL);
    CHECK(L->in_dim == n && L->out_dim == n);
    float x[24], v[24], dv[24], dx[24], t[24], jv[24];
    fill_away(x, B * n);
    x[0] = 3.5f; /* the tails too */
    x[1] = -4.0f;
    fill_gauss(dv, B * n, 1.0);
    fill_gauss(t, B * n, 1.0);
    CHECK_OK(L->ops->forward(L, x, v, B));
    CHECK_OK(L->ops->backward_input(L, x, v, dv, dx, B));
    CHECK_OK(L->ops->jvp(L, x, v, t, NULL, jv, B));
    const double h = 1e-6;
    for (size_t j = 0; j < B * n; j++) {
        CHECK_CLOSE(v[j], ref_act(kind, x[j]), 1e-7, 1e-6);
        double fd = (ref_act(kind, x[j] + h) - ref_act(kind, x[j] - h)) / (2 * h);
        CHECK_CLOSE(dx[j], dv[j] * fd, 1e-6, 1e-5);
        CHECK_CLOSE(jv[j], t[j] * fd, 1e-6, 1e-5);
    }
    dpt_model_free(m);
}

/* GELU and sigmoid use in-house vectorizable exp/erfc: a dense grid against double libm,
 * including the negative tail (relative accuracy there) and NaN propagation. */
static void test_activation_grid(const char *spec, dpt_layer_kind kind) {
    const size_t n = 2001;
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, 1, 1, &m));
    if (!m) return;
    const dpt_layer *L = &m->layers[1];
    float *x = malloc(n * sizeof *x), *v = malloc(n * sizeof *v), *one = malloc(n * sizeof *one),
          *d = malloc(n * sizeof *d);
    for (size_t j = 0; j < n; j++) {
        x[j] = (float)(-14.0 + 22.0 * j / (n - 1));
        one[j] = 1.0f;
    }
    x[7] = NAN;
    CHECK_OK(L->ops->forward(L, x, v, 1));
    CHECK_OK(L->ops->backward_input(L, x, v, one, d, 1));
    int bad = 0;
    for (size_t j = 0; j < n; j++) {
        if (j == 7) continue;
        const double xr = x[j], h = 1e-6;
        const double r = ref_act(kind, xr), dr = (ref_act(kind, xr + h) - ref_act(kind, xr - h)) / (2 * h);
        /* the float rounding of x^2/2 inside exp gives relative error ~ x^2 ulp/2 */
        const double rtol = 2e-6 + 1.2e-7 * xr * xr;
        if (!(fabs(v[j] - r) <= 1e-37 + rtol * fabs(r))) {
            bad++;
            CHECK_CLOSE(v[j], r, 1e-37, rtol);
        }
        if (!(fabs(d[j] - dr) <= 2e-7 + rtol * fabs(dr))) {
            bad++;
            CHECK_CLOSE(d[j], dr, 2e-7, rtol);
        }
        if (bad > 5) break;
    }
    CHECK(bad == 0);
    CHECK(isnan(v[7]) && isnan(d[7]));
    free(x); free(v); free(one); free(d);
    dpt_model_free(m);
}

/* GELU at the edges, against double erfc: +-0 keep their sign (gelu' = 1/2), tiny x gives
 * x/2, large x gives x (gelu' = 1), the far negative tail goes to -0 with an absolute error
 * below the smallest normal float (e^-87.3 cut-off; no subnormal results; gelu' there
 * below 1e-37), +inf -> +inf,
 * -inf -> NaN and gelu'(+-inf) = NaN (as x Phi(x) in double: inf * 0), NaN -> NaN. And every
 * element gets the same bits in the vector body, the scalar remainder and alone. */
static void test_gelu_edges(void) {
    static const float xs[] = {0.0f,   -0.0f,   1e-30f, -1e-30f, 1e-45f, 1e-3f,   -1e-3f,  5.5f,    -5.5f,
                               9.0f,   -9.0f,   -12.0f, -13.0f,  -13.1f, -13.2f,  -13.25f, -13.3f, -14.0f,
                               -20.0f, -1e30f,  1e30f,  3e38f,   INFINITY, -INFINITY, NAN, 0.7f,   -0.7f};
    const size_t n = sizeof xs / sizeof xs[0];
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("mlp:1-1-1:gelu", n, 1, &m));
    if (!m) return;
    const dpt_layer *L = &m->layers[1];
    float v[32], d[32], one[32], v1, d1;
    for (size_t j = 0; j < n; j++) one[j] = 1.0f;
    CHECK_OK(L->ops->forward(L, xs, v, n));
    CHECK_OK(L->ops->backward_input(L, xs, v, one, d, n));
    for (size_t j = 0; j < n; j++) {
        const double x = xs[j], r = 0.5 * x * erfc(-x / sqrt(2.0));
        const double dr = 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
        if (isnan(r)) {
            CHECK(isnan(v[j]));
        } else if (isinf(r)) {
            CHECK(v[j] == r);
        } else {
            CHECK_CLOSE(v[j], r, 1.2e-38, 2e-6 + 1.2e-7 * x * x);
            if (v[j] == 0.0f && r == 0.0 && !signbit(v[j]) != !signbit(r)) {
                fprintf(stderr, "gelu(%g) = %g, reference %g\n", x, v[j], r);
                CHECK(0);
            }
        }
        if (isnan(dr)) {
            CHECK(isnan(d[j]));
        } else {
            CHECK_CLOSE(d[j], dr, 1e-37, 2e-6 + 1.2e-7 * x * x); /* |x| phi(x) < 7e-38 past the cut-off */
        }
        /* alone (scalar code) */
        CHECK_OK(L->ops->forward(L, xs + j, &v1, 1));
        CHECK_OK(L->ops->backward_input(L, xs + j, &v1, one, &d1, 1));
        CHECK(!memcmp(&v1, v + j, sizeof v1) && !memcmp(&d1, d + j, sizeof d1));
    }
    dpt_model_free(m);
}

/* tanh (in-house, vectorizable) at the edges and around its two branches, against double
 * tanh: +-0 keep their sign, tiny and subnormal x give x, the branch point 0.625 from both
 * sides, +-9 and beyond give +-1, +-inf -> +-1, NaN -> NaN; tanh' = 1 - tanh^2 from the
 * output. Relative error within 3 ulp everywhere on a fine grid of [-3, 3] (where a
 * (1 - e) / (1 + e) form without the polynomial loses digits near 0). Every element gets the
 * same bits in the vector body and alone. */
static void test_tanh_edges(void) {
    static const float xs[] = {0.0f,  -0.0f,  1e-30f,  -1e-30f, 1e-45f,  1e-4f,    -1e-4f,    0.01f, 0.3f,
                               0.62f, 0.6249999f, 0.625f, -0.625f, 0.6250001f, 0.7f, -2.5f, 9.0f,  -9.0f,
                               20.0f, -50.0f, 1e30f,  INFINITY, -INFINITY, NAN, 4.5f, -0.31f, 1.0f};
    const size_t n = sizeof xs / sizeof xs[0];
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("mlp:1-1-1:tanh", n, 1, &m));
    if (!m) return;
    const dpt_layer *L = &m->layers[1];
    float v[32], d[32], one[32], v1;
    for (size_t j = 0; j < n; j++) one[j] = 1.0f;
    CHECK_OK(L->ops->forward(L, xs, v, n));
    CHECK_OK(L->ops->backward_input(L, xs, v, one, d, n));
    for (size_t j = 0; j < n; j++) {
        const double x = xs[j], r = tanh(x);
        if (isnan(r)) {
            CHECK(isnan(v[j]) && isnan(d[j]));
        } else {
            CHECK_CLOSE(v[j], r, 0.0, 3.0 * 0x1p-24);
            CHECK(!signbit(v[j]) == !signbit(r)); /* -0 stays -0 */
            CHECK_CLOSE(d[j], 1.0 - r * r, 2e-7, 1e-6); /* 1 - v^2 in float: absolute ~ulp(1) */
        }
        CHECK_OK(L->ops->forward(L, xs + j, &v1, 1)); /* alone (scalar code) */
        CHECK(!memcmp(&v1, v + j, sizeof v1));
    }
    dpt_model_free(m);
    const size_t g = 6001;
    CHECK_OK(dpt_model_new("mlp:1-6001-1:tanh", 1, 1, &m));
    if (!m) return;
    L = &m->layers[1];
    float *x = malloc(g * sizeof *x), *y = malloc(g * sizeof *y);
    for (size_t j = 0; j < g; j++) x[j] = (float)(-3.0 + 6.0 * (double)j / (double)(g - 1));
    CHECK_OK(L->ops->forward(L, x, y, 1));
    double worst = 0.0;
    for (size_t j = 0; j < g; j++) {
        const double r = tanh((double)x[j]);
        if (r != 0.0 && fabs(y[j] - r) / fabs(r) > worst) worst = fabs(y[j] - r) / fabs(r);
    }
    if (!(worst <= 3.0 * 0x1p-24)) fprintf(stderr, "tanh: worst relative error %g on [-3, 3]\n", worst);
    CHECK(worst <= 3.0 * 0x1p-24);
    free(x), free(y);
    dpt_model_free(m);
}

/* ==== losses ==== */

static void test_loss(dpt_loss_kind kind, size_t K) {
    const size_t B = 5;
    float o[5 * 4], t[5 * 4], loss[5], d[5 * 4];
    int32_t y[5];
    fill_gauss(o, B * K, 2.0);
    fill_gauss(t, B * K, 1.0);
    for (size_t i = 0; i < B; i++) y[i] = (int32_t)(K == 1 ? i % 2 : (i * 7) % K);
    CHECK_OK(dpt_loss(kind, o, B, K, y, t, loss, d));
    const double h = 1e-6;
    for (size_t i = 0; i < B; i++) {
        double *od = to_double(o + i * K, K);
        CHECK_CLOSE(loss[i], ref_loss1(kind, od, K, y[i], t + i * K), 1e-6, 1e-5);
        for (size_t k = 0; k < K; k++) {
            double o0 = od[k];
            od[k] = o0 + h;
            double fp = ref_loss1(kind, od, K, y[i], t + i * K);
            od[k] = o0 - h;
            double fm = ref_loss1(kind, od, K, y[i], t + i * K);
            od[k] = o0;
            CHECK_CLOSE(d[i * K + k], (fp - fm) / (2 * h), 1e-6, 1e-5);
        }
        free(od);
    }
    /* NULL outputs skip; huge logits stay finite (log-sum-exp / softplus forms) */
    CHECK_OK(dpt_loss(kind, o, B, K, y, t, NULL, NULL));
    if (kind != DPT_LOSS_SQUARED) {
        float big[4] = {1000.0f, -1000.0f, 500.0f, 0.0f}, lb[1], db[4];
        int32_t yb[1] = {K == 1 ? 0 : 1};
        CHECK_OK(dpt_loss(kind, big, 1, K, yb, NULL, lb, db));
        CHECK(isfinite(lb[0]) && lb[0] > 100.0f);
        CHECK(dpt_all_finite(db, K));
        /* labels out of range */
        int32_t bad[5] = {0, 1, (int32_t)(K == 1 ? 2 : K), 0, 0};
        CHECK_STATUS(dpt_loss(kind, o, B, K, bad, t, loss, d), DPT_EINVAL);
        CHECK_ERR_HAS("label");
        bad[2] = -1;
        CHECK_STATUS(dpt_loss(kind, o, B, K, bad, t, loss, d), DPT_EINVAL);
        CHECK_STATUS(dpt_loss(kind, o, B, K, NULL, t, loss, d), DPT_EINVAL);
    } else {
        CHECK_STATUS(dpt_loss(kind, o, B, K, y, NULL, loss, d), DPT_EINVAL);
    }
    /* NaN in the output: still OK, the NaN reaches that example's loss */
    o[K] = NAN;
    CHECK_OK(dpt_loss(kind, o, B, K, y, t, loss, d));
    CHECK(isnan(loss[1]));
    CHECK(isfinite(loss[0]));
}

/* Softmax cross-entropy against a naive double (long double sums) reference: the loss
 * to ~1e-7 of max(1, loss) and every gradient entry to ~1e-6 relative (more for entries
 * far below the largest, whose float exponent argument is rounded), also the label's
 * entry of a confident row (-(K-1) e^-30 / s: a 1 - p_y form in float would lose it), for
 * K = 10 and 1000, logits of scale 1 and 30, equal logits, -inf and +-1e30 logits. */
static void ce_check_row(const float *o, size_t K, int32_t y, const char *what) {
    float l, *d = malloc(K * sizeof *d);
    CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, o, 1, K, &y, NULL, &l, d));
    long double mx = o[0], mn = o[0], s = 0;
    for (size_t k = 1; k < K; k++) mx = o[k] > mx ? o[k] : mx;
    for (size_t k = 1; k < K; k++) mn = o[k] < mn && isfinite(o[k]) ? o[k] : mn;
    for (size_t k = 0; k < K; k++) s += expl((long double)o[k] - mx);
    double lr = (double)(mx + logl(s) - (long double)o[y]);
    int bad = 0;
    if (!(fabs(l - lr) <= 2e-7 * fmax(1.0, fabs(lr)))) {
        fprintf(stderr, "%s: loss %.9g, reference %.9g\n", what, l, lr);
        bad++;
    }
    /* the values-only route (rows in vector lanes for K <= 32) */
    float lv;
    CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, o, 1, K, &y, NULL, &lv, NULL));
    if (!(fabs(lv - lr) <= 2e-7 * fmax(1.0, fabs(lr)))) {
        fprintf(stderr, "%s: loss without gradient %.9g, reference %.9g\n", what, lv, lr);
        bad++;
    }
    for (size_t k = 0; k < K; k++) {
        long double others = 0;
        for (size_t j = 0; j < K; j++)
            if (j != (size_t)y) others += expl((long double)o[j] - mx);
        double dr = k == (size_t)y ? (double)(-others / s) : (double)(expl((long double)o[k] - mx) / s);
        /* o_k - m is rounded to float: relative error ~6e-8 |o_k - m| in e_k (the label's
         * entry sums such terms: the row's largest gap bounds it) */
        double gap = k == (size_t)y ? (double)(mx - mn) : (double)(mx - o[k]);
        if (!isfinite(gap)) gap = 0; /* e_k = 0 exactly */
        if (!(fabs(d[k] - dr) <= 1e-30 + (1e-6 + 1.2e-7 * gap) * fabs(dr))) {
            if (bad++ < 3) fprintf(stderr, "%s: d[%zu] %.9g, reference %.9g\n", what, k, d[k], dr);
        }
    }
    CHECK(bad == 0);
    free(d);
}

static void test_softmax_ce_accuracy(void) {
    const size_t Ks[2] = {10, 1000};
    float *o = malloc(1000 * sizeof *o);
    for (int ki = 0; ki < 2; ki++) {
        size_t K = Ks[ki];
        for (int rep = 0; rep < 20; rep++) {
            fill_gauss(o, K, rep % 2 ? 30.0 : 1.0);
            ce_check_row(o, K, (int32_t)((rep * 7) % K), "random logits");
        }
        for (size_t k = 0; k < K; k++) o[k] = 0.25f;
        ce_check_row(o, K, 3, "equal logits");
        for (size_t k = 0; k < K; k++) o[k] = 0.0f;
        o[2] = 30.0f;
        ce_check_row(o, K, 2, "confident row");
        ce_check_row(o, K, 5, "confident wrong row");
        o[4] = -INFINITY;
        ce_check_row(o, K, 2, "a -inf logit");
        for (size_t k = 0; k < K; k++) o[k] = k % 2 ? -1e30f : 1e30f;
        float l, *d = malloc(K * sizeof *d);
        int32_t y = 1;
        CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, o, 1, K, &y, NULL, &l, d));
        CHECK(isfinite(l) && l > 1e29f && dpt_all_finite(d, K));
        free(d);
    }
    /* values only, 13 rows of 10 classes (a partial block of lanes): each row's loss equals
       its single-row value bit for bit (whatever shares its block), a NaN row stays NaN and
       leaves the others alone */
    {
        const size_t B = 13, K = 10;
        float ob[13 * 10], lb[13], l1;
        int32_t yb[13];
        fill_gauss(ob, B * K, 3.0);
        for (size_t i = 0; i < B; i++) yb[i] = (int32_t)((i * 3) % K);
        ob[4 * K + 6] = NAN;
        CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, ob, B, K, yb, NULL, lb, NULL));
        for (size_t i = 0; i < B; i++) {
            CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, ob + i * K, 1, K, yb + i, NULL, &l1, NULL));
            CHECK(i == 4 ? isnan(lb[i]) && isnan(l1) : lb[i] == l1 && isfinite(lb[i]));
        }
    }
    free(o);
}

/* Rows are processed in blocks (of up to 64 rows, fewer for wide rows, one malloc'd row
 * beyond 2048 classes without gradients): every row of a batch gets the same bits as that
 * row alone, the loss without gradients the same bits as with them, and a NaN logit
 * (also the first) poisons only its own row. */
static void test_softmax_ce_batch(void) {
    const size_t Ks[3] = {10, 1000, 3000}, Bs[3] = {203, 7, 3};
    for (int ki = 0; ki < 3; ki++) {
        const size_t K = Ks[ki], B = Bs[ki];
        float *o = malloc(B * K * sizeof *o), *d = malloc(B * K * sizeof *d), *d1 = malloc(K * sizeof *d1);
        float *l = malloc(B * sizeof *l), *l2 = malloc(B * sizeof *l2), l1;
        int32_t *y = malloc(B * sizeof *y);
        dpt_rng r; /* its own stream: the shared one feeds the model tests' data */
        dpt_rng_init(&r, 99 + ki, DPT_STREAM_AUX);
        for (size_t j = 0; j < B * K; j++) o[j] = (float)(3.0 * dpt_rng_gauss_ref(&r));
        dpt_rng_free(&r);
        for (size_t i = 0; i < B; i++) y[i] = (int32_t)((i * 7) % K);
        const size_t nan_row = B / 2;
        o[nan_row * K] = NAN;
        if (B > 100) o[100 * K + 5] = 1e30f, o[101 * K + 3] = -1e30f, o[102 * K + 9] = INFINITY;
        CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, o, B, K, y, NULL, l, d));
        CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, o, B, K, y, NULL, l2, NULL));
        int bad = 0;
        for (size_t i = 0; i < B; i++) {
            CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, o + i * K, 1, K, y + i, NULL, &l1, d1));
            if (memcmp(&l1, l + i, sizeof l1) || memcmp(&l1, l2 + i, sizeof l1) ||
                memcmp(d1, d + i * K, K * sizeof *d1))
                bad++;
            if (i == nan_row) {
                CHECK(isnan(l[i]));
            } else if (B > 100 && i == 102) { /* a +inf logit: the loss is +inf (or NaN at the label) */
                CHECK(!isfinite(l[i]));
            } else {
                CHECK(!isnan(l[i]));
                if (isfinite(o[i * K + 5]) && isfinite(o[i * K + 3])) ce_check_row(o + i * K, K, y[i], "batch row");
            }
        }
        CHECK(bad == 0);
        free(o), free(d), free(d1), free(l), free(l2), free(y);
    }
}

/* ==== whole models ==== */

static void test_model(const char *spec, dpt_loss_kind lk) {
    const size_t B = 6;
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B + 2, 1, &m));
    if (!m) return;
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 42, DPT_STREAM_INIT));
    CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.1, &r));
    dpt_rng_free(&r);
    const size_t P = m->n_params, D = m->in_dim, K = m->out_dim;
    float *x = malloc(B * D * sizeof *x), *t = malloc(B * K * sizeof *t), *dout = malloc(B * K * sizeof *dout);
    int32_t y[6];
    fill_gauss(x, B * D, 1.0);
    fill_gauss(t, B * K, 1.0);
    for (size_t i = 0; i < B; i++) y[i] = (int32_t)(i % K);

    CHECK_OK(dpt_model_forward(m, x, B));
    double *th = to_double(m->theta, P), *xd = to_double(x, B * D), *od = malloc(B * K * sizeof *od);
    ref_model(m, th, xd, B, od);
    for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(dpt_model_output(m)[j], od[j], 1e-5, 1e-4);

    /* gradient of the mean loss: float backward vs double FD of the reference model */
    CHECK_OK(dpt_loss(lk, dpt_model_output(m), B, K, y, t, NULL, dout));
    for (size_t j = 0; j < B * K; j++) dout[j] /= (float)B;
    CHECK_OK(dpt_model_backward(m, dout, B));
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SUM, NULL, m->grad, 0, 0));
    const double h = 1e-6;
    double gnorm = 0;
    for (size_t p = 0; p < P; p++) gnorm += (double)m->grad[p] * m->grad[p];
    CHECK(gnorm > 1e-8); /* a vanishing gradient would make the comparison empty */
    for (size_t p = 0; p < P; p++) {
        double f[2];
        for (int s = 0; s < 2; s++) {
            th[p] = m->theta[p] + (s ? -h : h);
            ref_model(m, th, xd, B, od);
            f[s] = 0;
            for (size_t i = 0; i < B; i++) f[s] += ref_loss1(lk, od + i * K, K, y[i], t + i * K) / B;
        }
        th[p] = m->theta[p];
        CHECK_CLOSE(m->grad[p], (f[0] - f[1]) / (2 * h), 2e-5, 1e-3);
    }
    /* the same in float: perturb theta itself (h = 1e-2, float rounding ~1e-7 / h) */
    for (size_t p = 0; p < P; p += 7) {
        const float th0 = m->theta[p];
        const float hf = 1e-2f;
        float lv[6];
        double f[2];
        for (int s = 0; s < 2; s++) {
            m->theta[p] = th0 + (s ? -hf : hf);
            CHECK_OK(dpt_model_forward(m, x, B));
            CHECK_OK(dpt_loss(lk, dpt_model_output(m), B, K, y, t, lv, NULL));
            f[s] = 0;
            for (size_t i = 0; i < B; i++) f[s] += lv[i] / (double)B;
        }
        m->theta[p] = th0;
        CHECK_CLOSE(m->grad[p], (f[0] - f[1]) / (2.0 * hf), 2e-3, 3e-2);
    }
    CHECK_OK(dpt_model_forward(m, x, B));
    CHECK_OK(dpt_model_backward(m, dout, B));

    /* modes against each other */
    const size_t ld = P + 3;
    float *pe = malloc(B * ld * sizeof *pe), *sq = malloc(B * sizeof *sq), *wg = malloc(P * sizeof *wg);
    float *ls = malloc(B * 64 * sizeof *ls), w[6];
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, ld, 0));
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
    for (size_t i = 0; i < B; i++) w[i] = (float)(1.5 - 0.2 * i);
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_WEIGHTED, w, wg, 0, 0));
    for (size_t p = 0; p < P; p++) {
        double s = 0, sw = 0;
        for (size_t i = 0; i < B; i++) {
            s += pe[i * ld + p];
            sw += (double)w[i] * pe[i * ld + p];
        }
        CHECK_CLOSE(m->grad[p], s, 1e-7, 1e-5);
        CHECK_CLOSE(wg[p], sw, 1e-7, 1e-5);
    }
    const size_t G = dpt_model_n_param_layers(m);
    CHECK(G == dpt_model_n_linear(m));
    CHECK_OK(dpt_model_layer_sqnorms(m, B, ls));
    for (size_t i = 0; i < B; i++) {
        double s = 0, sl = 0;
        for (size_t p = 0; p < P; p++) s += (double)pe[i * ld + p] * pe[i * ld + p];
        CHECK_CLOSE(sq[i], s, 1e-9, 1e-5);
        for (size_t g = 0; g < G; g++) {
            const dpt_layer *L = &m->layers[dpt_model_param_layer(m, g)];
            double sg = 0;
            for (size_t p = L->param_offset; p < L->param_offset + L->n_params; p++)
                sg += (double)pe[i * ld + p] * pe[i * ld + p];
            CHECK_CLOSE(ls[g * B + i], sg, 1e-9, 1e-5);
            sl += ls[g * B + i];
        }
        CHECK_CLOSE(sl, sq[i], 1e-9, 1e-5);
    }
    /* accumulate = 1 adds (SQNORM sums over layers on top of what is there) */
    for (size_t i = 0; i < B; i++) ls[i] = 2.0f;
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, ls, 0, 1));
    for (size_t i = 0; i < B; i++) CHECK_CLOSE(ls[i], 2.0 + sq[i], 1e-6, 1e-5);
    for (size_t p = 0; p < P; p++) wg[p] = 1.0f;
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SUM, NULL, wg, 0, 1));
    for (size_t p = 0; p < P; p++) CHECK_CLOSE(wg[p], 1.0 + m->grad[p], 1e-6, 1e-5);
    CHECK_STATUS(dpt_model_param_grad(m, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, P - 1, 0), DPT_EINVAL);
    CHECK_STATUS(dpt_model_param_grad(m, B, DPT_GRAD_WEIGHTED, NULL, wg, 0, 0), DPT_EINVAL);
    CHECK_STATUS(dpt_model_forward(m, x, B + 3), DPT_EINVAL);
    CHECK_ERR_HAS("max_batch");

    /* model jvp in a parameter and an input direction vs FD of the reference model */
    float *tth = malloc(P * sizeof *tth), *tx = malloc(B * D * sizeof *tx), *jv = malloc(B * K * sizeof *jv);
    fill_gauss(tth, P, 1.0);
    fill_gauss(tx, B * D, 1.0);
    double *op = malloc(B * K * sizeof *op);
    CHECK_OK(dpt_model_jvp(m, tth, tx, B, jv));
    for (int s = 0; s < 2; s++) {
        double e = s ? -h : h;
        for (size_t p = 0; p < P; p++) th[p] = m->theta[p] + e * tth[p];
        for (size_t j = 0; j < B * D; j++) xd[j] = x[j] + e * tx[j];
        ref_model(m, th, xd, B, s ? od : op);
    }
    for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(jv[j], (op[j] - od[j]) / (2 * h), 2e-5, 1e-3);

    /* forward_from: restart after layer 0 from a changed act[1] */
    for (size_t j = 0; j < B * m->layers[0].out_dim; j++) m->act[1][j] += 0.25f;
    CHECK_OK(dpt_model_forward_from(m, 1, B));
    {
        dpt_model sub = *m; /* reference: layers [1, n) applied to act[1] */
        sub.layers = m->layers + 1;
        sub.n_layers = m->n_layers - 1;
        sub.in_dim = m->layers[0].out_dim;
        for (size_t l = 0; l < sub.n_layers; l++) sub.layers[l].param_offset -= m->layers[0].n_params;
        double *a1 = to_double(m->act[1], B * sub.in_dim);
        double *th1 = to_double(m->theta + m->layers[0].n_params, P - m->layers[0].n_params);
        ref_model(&sub, th1, a1, B, od);
        free(th1);
        for (size_t l = 0; l < sub.n_layers; l++) sub.layers[l].param_offset += m->layers[0].n_params;
        for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(dpt_model_output(m)[j], od[j], 1e-5, 1e-4);
        free(a1);
    }
    CHECK_STATUS(dpt_model_forward_from(m, m->n_layers + 1, B), DPT_EINVAL);

    free(x); free(t); free(dout); free(th); free(xd); free(od); free(op);
    free(pe); free(sq); free(wg); free(ls); free(tth); free(tx); free(jv);
    dpt_model_free(m);
}

/* ==== specs, tensor table ==== */

static void test_specs(void) {
    dpt_model *m = NULL;
    CHECK_STATUS(dpt_model_new("mlp:784-abc-10", 8, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("model spec 'mlp:784-abc-10': 'abc' is not a layer width");
    CHECK(m == NULL);
    CHECK_STATUS(dpt_model_new("mlp:784-128-10:swish", 8, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("'swish'");
    CHECK_STATUS(dpt_model_new("", 8, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("empty");
    CHECK_STATUS(dpt_model_new("mlp:4-3", 8, -5, &m), DPT_EINVAL); /* as the trainer refuses it */
    CHECK_ERR_HAS("threads must be in [0, 1024] (0 = all cores), got -5");
    CHECK_STATUS(dpt_model_new("mlp:", 8, 1, &m), DPT_EINVAL);
    CHECK_STATUS(dpt_model_new("mlp:10", 8, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("two widths");
    CHECK_STATUS(dpt_model_new("mlp:10-0-3", 8, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("'0'");
    CHECK_STATUS(dpt_model_new("mlp:10--3", 8, 1, &m), DPT_EINVAL);
    CHECK_STATUS(dpt_model_new("mlp:10-3-", 8, 1, &m), DPT_EINVAL);
    CHECK_STATUS(dpt_model_new("rnn:10-3", 8, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("'rnn'");
    CHECK_STATUS(dpt_model_new("mlp:10-3:relu:gelu", 8, 1, &m), DPT_EINVAL);
    CHECK_STATUS(dpt_model_new("ae:10-3-9", 8, 1, &m), DPT_EINVAL);
    CHECK_STATUS(dpt_model_new("mlp:10-3", 0, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("max_batch");
    char many[400] = "mlp:2";
    for (int i = 0; i < 70; i++) strcat(many, "-2");
    CHECK_STATUS(dpt_model_new(many, 8, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("too many layers");
    CHECK(m == NULL);

    CHECK_OK(dpt_model_new("ae:6-4-2-4-6:tanh:nobias", 3, 1, &m));
    if (m) {
        CHECK(m->n_layers == 7 && m->in_dim == 6 && m->out_dim == 6);
        CHECK(m->n_params == 24 + 8 + 8 + 24);
        CHECK(dpt_model_n_tensors(m) == 4);
        CHECK(m->layers[1].kind == DPT_LAYER_TANH && !strcmp(m->layers[1].name, "tanh1"));
        dpt_model_free(m);
    }
    CHECK_OK(dpt_model_new("mlp:784-128-64-10:gelu", 4, 1, &m));
    if (m) {
        CHECK(dpt_model_n_tensors(m) == 6 && dpt_model_n_param_layers(m) == 3);
        CHECK(dpt_model_param_layer(m, 2) == 4 && dpt_model_param_layer(m, 3) == m->n_layers);
        const char *names[6] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"};
        size_t off = 0;
        for (size_t i = 0; i < 6; i++) {
            dpt_param_tensor t;
            dpt_model_tensor(m, i, &t);
            CHECK(!strcmp(t.name, names[i]));
            CHECK(t.offset == off);
            CHECK(t.ndim == (i % 2 ? 1 : 2));
            off += t.size;
        }
        CHECK(off == m->n_params);
        dpt_param_tensor t;
        dpt_model_tensor(m, 2, &t);
        CHECK(t.shape[0] == 64 && t.shape[1] == 128 && t.size == 64 * 128);
        CHECK(m->layers[2].w == m->theta + t.offset && m->layers[2].b == m->theta + t.offset + t.size);
        CHECK(m->layers[1].kind == DPT_LAYER_GELU);
        dpt_model_free(m);
    }
    dpt_model_free(NULL);

    dpt_loss_kind lk;
    CHECK_OK(dpt_loss_parse("bce", &lk));
    CHECK(lk == DPT_LOSS_SIGMOID_BCE);
    CHECK_OK(dpt_loss_parse("mse", &lk));
    CHECK(lk == DPT_LOSS_SQUARED);
    CHECK_OK(dpt_loss_parse("softmax-ce", &lk));
    CHECK(lk == DPT_LOSS_SOFTMAX_CE);
    CHECK_STATUS(dpt_loss_parse("hinge", &lk), DPT_EINVAL);
    CHECK_ERR_HAS("'hinge'");
    dpt_init_scheme is;
    CHECK_OK(dpt_init_parse("ntk", &is));
    CHECK(is == DPT_INIT_NTK);
    CHECK_OK(dpt_init_parse("xavier", &is));
    CHECK(is == DPT_INIT_XAVIER);
    CHECK_STATUS(dpt_init_parse("orthogonal", &is), DPT_EINVAL);
}

/* ==== initializers ==== */

/* n draws of U(-b, b): every one inside, the largest near b, mean 0 and mean square b^2 / 3
 * (its relative sd is sqrt(0.8 / n); 6 sd allowed) */
static void check_uniform(const float *p, size_t n, double b) {
    double s = 0, s2 = 0, mx = 0;
    int inside = 1;
    for (size_t j = 0; j < n; j++) {
        const double v = p[j];
        inside &= fabs(v) <= b * (1 + 1e-6);
        s += v;
        s2 += v * v;
        if (fabs(v) > mx) mx = fabs(v);
    }
    CHECK(inside);
    CHECK(mx >= b * (1 - 20.0 / (double)n)); /* P(all n below b(1 - x)) = (1 - x)^n */
    CHECK_CLOSE(s / n, 0.0, 6 * b / sqrt(3.0 * n), 0);
    CHECK_CLOSE(s2 / n, b * b / 3, 0, 6 * sqrt(0.8 / n));
}

/* the torch scheme: PyTorch's nn.Linear / nn.Conv2d default, weight and bias U(+-1/sqrt(fan_in));
 * GroupNorm at gamma 1, beta 0; no Gaussian variances */
static void test_init_torch(void) {
    dpt_init_scheme is;
    CHECK_OK(dpt_init_parse("torch", &is));
    CHECK(is == DPT_INIT_TORCH);
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("mlp:400-300-200:gelu", 2, 1, &m));
    if (!m) return;
    double b[2];
    CHECK_STATUS(dpt_model_init_variances(m, DPT_INIT_TORCH, b, 2), DPT_EINVAL);
    CHECK_ERR_HAS("uniform");
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 11, DPT_STREAM_INIT));
    CHECK_STATUS(dpt_model_init(m, DPT_INIT_TORCH, NULL, 0, 0.3, &r), DPT_EINVAL);
    CHECK_ERR_HAS("bias");
    CHECK_OK(dpt_model_init(m, DPT_INIT_TORCH, NULL, 0, 0.0, &r));
    for (size_t g = 0; g < 2; g++) {
        const dpt_layer *L = &m->layers[dpt_model_param_layer(m, g)];
        const double bound = 1.0 / sqrt((double)L->in_dim);
        check_uniform(L->w, L->in_dim * L->out_dim, bound);
        check_uniform(L->b, L->out_dim, bound);
    }
    dpt_model_free(m);
    /* a convolution (fan-in C k^2) followed by GroupNorm, then a Linear */
    m = NULL;
    CHECK_OK(dpt_model_new("cnn:3x8x8:conv40k3p1,gn4,relu,fc10", 2, 1, &m));
    if (m) {
        CHECK_OK(dpt_model_init(m, DPT_INIT_TORCH, NULL, 0, 0.0, &r));
        const size_t nt = dpt_model_n_tensors(m);
        int seen = 0;
        for (size_t i = 0; i < nt; i++) {
            dpt_param_tensor t;
            dpt_model_tensor(m, i, &t);
            const float *p = m->theta + t.offset;
            if (!strcmp(t.name, "conv1.weight") || !strcmp(t.name, "conv1.bias")) {
                check_uniform(p, t.size, 1.0 / sqrt(27.0));
                seen++;
            } else if (t.role == DPT_TENSOR_SCALE) {
                for (size_t j = 0; j < t.size; j++) CHECK(p[j] == 1.0f);
                seen++;
            } else if (!strcmp(t.name, "gn1.bias")) {
                for (size_t j = 0; j < t.size; j++) CHECK(p[j] == 0.0f);
                seen++;
            } else if (t.role == DPT_TENSOR_WEIGHT || t.role == DPT_TENSOR_BIAS) { /* fc: fan-in 40 * 64 */
                check_uniform(p, t.size, 1.0 / sqrt(40.0 * 64.0));
                seen++;
            }
        }
        CHECK(seen == 6);
        dpt_model_free(m);
    }
    dpt_rng_free(&r);
}

static void test_init(void) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("mlp:10-20-30-5:relu", 4, 1, &m));
    if (!m) return;
    const double fin[3] = {10, 20, 30}, fout[3] = {20, 30, 5};
    double b[3];
    CHECK(dpt_model_n_linear(m) == 3);
    CHECK_OK(dpt_model_init_variances(m, DPT_INIT_LECUN, b, 3));
    for (int l = 0; l < 3; l++) CHECK_CLOSE(b[l], 1.0 / fin[l], 0, 1e-15);
    CHECK_OK(dpt_model_init_variances(m, DPT_INIT_HE, b, 3));
    for (int l = 0; l < 3; l++) CHECK_CLOSE(b[l], 2.0 / fin[l], 0, 1e-15);
    CHECK_OK(dpt_model_init_variances(m, DPT_INIT_DEFAULT, b, 3)); /* He for ReLU */
    for (int l = 0; l < 3; l++) CHECK_CLOSE(b[l], 2.0 / fin[l], 0, 1e-15);
    CHECK_OK(dpt_model_init_variances(m, DPT_INIT_XAVIER, b, 3));
    for (int l = 0; l < 3; l++) CHECK_CLOSE(b[l], 2.0 / (fin[l] + fout[l]), 0, 1e-15);
    CHECK_OK(dpt_model_init_variances(m, DPT_INIT_NTK, b, 3));
    CHECK_CLOSE(b[0], 2.0 / 20, 0, 1e-15);
    CHECK_CLOSE(b[1], 2.0 / 30, 0, 1e-15);
    CHECK_CLOSE(b[2], 1.0 / 5, 0, 1e-15);
    CHECK_STATUS(dpt_model_init_variances(m, DPT_INIT_HE, b, 2), DPT_EINVAL);
    CHECK_STATUS(dpt_model_init_variances(m, DPT_INIT_EXPLICIT, b, 3), DPT_EINVAL);
    dpt_model_free(m);
    CHECK_OK(dpt_model_new("mlp:10-20-5:tanh", 4, 1, &m));
    if (m) {
        CHECK_OK(dpt_model_init_variances(m, DPT_INIT_DEFAULT, b, 2)); /* Xavier for tanh */
        CHECK_CLOSE(b[0], 2.0 / 30, 0, 1e-15);
        CHECK_CLOSE(b[1], 2.0 / 25, 0, 1e-15);
        dpt_model_free(m);
    }

    /* empirical variance: s^2 of n draws has relative sd sqrt(2/n); allow 6 sd */
    CHECK_OK(dpt_model_new("mlp:400-300-200:gelu", 2, 1, &m));
    if (!m) return;
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 7, DPT_STREAM_INIT));
    const double var[2] = {0.02, 0.5};
    for (int scheme = 0; scheme < 3; scheme++) {
        double want[2];
        if (scheme == 0) CHECK_OK(dpt_model_init(m, DPT_INIT_EXPLICIT, var, 2, 0.0, &r));
        if (scheme == 1) CHECK_OK(dpt_model_init(m, DPT_INIT_HE, NULL, 0, 0.3, &r));
        if (scheme == 2) CHECK_OK(dpt_model_init(m, DPT_INIT_NTK, NULL, 0, 0.0, &r));
        if (scheme == 0) memcpy(want, var, sizeof want);
        else CHECK_OK(dpt_model_init_variances(m, scheme == 1 ? DPT_INIT_HE : DPT_INIT_NTK, want, 2));
        for (size_t g = 0; g < 2; g++) {
            const dpt_layer *L = &m->layers[dpt_model_param_layer(m, g)];
            const size_t n = L->in_dim * L->out_dim;
            double s = 0, s2 = 0;
            for (size_t j = 0; j < n; j++) {
                s += L->w[j];
                s2 += (double)L->w[j] * L->w[j];
            }
            CHECK_CLOSE(s / n, 0.0, 6 * sqrt(want[g] / n), 0);
            CHECK_CLOSE(s2 / n, want[g], 0, 6 * sqrt(2.0 / n));
            double bs2 = 0;
            for (size_t k = 0; k < L->out_dim; k++) bs2 += (double)L->b[k] * L->b[k];
            if (scheme == 1) CHECK_CLOSE(bs2 / L->out_dim, 0.3, 0, 6 * sqrt(2.0 / L->out_dim));
            else CHECK(bs2 == 0.0);
        }
    }
    /* same seed, same parameters */
    float *a = malloc(m->n_params * sizeof *a);
    dpt_rng_free(&r);
    CHECK_OK(dpt_rng_init(&r, 9, DPT_STREAM_INIT));
    CHECK_OK(dpt_model_init(m, DPT_INIT_LECUN, NULL, 0, 0.1, &r));
    memcpy(a, m->theta, m->n_params * sizeof *a);
    dpt_rng_free(&r);
    CHECK_OK(dpt_rng_init(&r, 9, DPT_STREAM_INIT));
    CHECK_OK(dpt_model_init(m, DPT_INIT_LECUN, NULL, 0, 0.1, &r));
    CHECK(!memcmp(a, m->theta, m->n_params * sizeof *a));
    free(a);
    CHECK_STATUS(dpt_model_init(m, DPT_INIT_EXPLICIT, var, 1, 0.0, &r), DPT_EINVAL);
    CHECK_ERR_HAS("2 variances");
    const double negv[2] = {0.1, -1.0};
    CHECK_STATUS(dpt_model_init(m, DPT_INIT_EXPLICIT, negv, 2, 0.0, &r), DPT_EINVAL);
    CHECK_STATUS(dpt_model_init(m, DPT_INIT_HE, NULL, 0, -0.5, &r), DPT_EINVAL);
    dpt_rng_free(&r);
    dpt_model_free(m);
    test_init_torch();
}

/* ==== bit-identical reruns (large enough for the threaded paths) ==== */

static void run_once(float *res, size_t n_res, int threads) {
    const size_t B = 64;
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("mlp:300-200-50-10:gelu", B, threads, &m));
    if (!m) return;
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 5, DPT_STREAM_INIT));
    CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.01, &r));
    float *x = malloc(B * 300 * sizeof *x), dout[64 * 10];
    int32_t y[64];
    for (size_t j = 0; j < B * 300; j++) x[j] = (float)dpt_rng_gauss_ref(&r);
    for (size_t i = 0; i < B; i++) y[i] = (int32_t)(i % 10);
    CHECK_OK(dpt_model_forward(m, x, B));
    CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, dpt_model_output(m), B, 10, y, NULL, NULL, dout));
    CHECK_OK(dpt_model_backward(m, dout, B));
    const size_t P = m->n_params;
    DPT_ASSERT(n_res == P + B + B * P);
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SUM, NULL, res, 0, 0));
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, res + P, 0, 0));
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_PER_EXAMPLE, NULL, res + P + B, P, 0));
    free(x);
    dpt_rng_free(&r);
    dpt_model_free(m);
}

static void test_bit_identical(void) {
    const size_t P = 300 * 200 + 200 + 200 * 50 + 50 + 50 * 10 + 10, B = 64, n = P + B + B * P;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    dpt_threads_set_blas(2);
    run_once(a, n, 2);
    run_once(b, n, 2);
    CHECK(!memcmp(a, b, n * sizeof *a));
    CHECK(dpt_all_finite(a, n));
    free(a);
    free(b);
}

/* dpt_model_backward_to(stop): dact[l] for l >= stop bit-identical to the full backward
 * pass's (a residual group crossing the stop included), the ones below untouched. */
static void test_backward_to(void) {
    const char *spec = "cnn:2x3x3:conv3k2p1,relu,[conv4k3p1,gn2,relu,conv3k3p1],relu,maxpool2s1,fc3";
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, 5, 1, &m));
    if (!m) return;
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 7, DPT_STREAM_AUX));
    CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &r));
    dpt_rng_free(&r);
    const size_t B = 5, n = m->n_layers;
    float x[5 * 18], dout[5 * 3];
    fill_gauss(x, B * 18, 1.0);
    fill_gauss(dout, B * 3, 1.0);
    CHECK_OK(dpt_model_forward(m, x, B));
    CHECK_OK(dpt_model_backward(m, dout, B));
    float **full = malloc((n + 1) * sizeof *full);
    for (size_t l = 1; l <= n; l++) {
        const size_t d = l == n ? m->out_dim : m->layers[l].in_dim;
        full[l] = malloc(B * d * sizeof(float));
        memcpy(full[l], m->dact[l], B * d * sizeof(float));
    }
    for (size_t stop = 0; stop <= n; stop++) {
        for (size_t l = 1; l <= n; l++) {
            const size_t d = l == n ? m->out_dim : m->layers[l].in_dim;
            for (size_t j = 0; j < B * d; j++) m->dact[l][j] = -7.0f; /* a sentinel */
        }
        CHECK_OK(dpt_model_backward_to(m, dout, B, stop));
        size_t bad = 0;
        for (size_t l = 1; l <= n; l++) {
            const size_t d = l == n ? m->out_dim : m->layers[l].in_dim;
            for (size_t j = 0; j < B * d; j++)
                bad += l >= stop ? memcmp(&m->dact[l][j], &full[l][j], sizeof(float)) != 0 : m->dact[l][j] != -7.0f;
        }
        CHECK(bad == 0);
    }
    CHECK_STATUS(dpt_model_backward_to(m, dout, B, n + 1), DPT_EINVAL);
    for (size_t l = 1; l <= n; l++) free(full[l]);
    free(full);
    dpt_model_free(m);
}

/* A model larger than the machine's memory is refused before anything is allocated (the
 * estimate: parameters, gradient, activations), naming what it would need. */
static void test_too_large(void) {
    dpt_model *m = (dpt_model *)1;
    double t0 = dpt_now();
    CHECK_STATUS(dpt_model_new("mlp:4-16777216-16777216-3", 1, 1, &m), DPT_ENOMEM);
    CHECK_ERR_HAS("model 'mlp:4-16777216-16777216-3' needs at least 2.25e+06 GB (281475127705603 parameters");
    CHECK_ERR_HAS("more than this machine's");
    CHECK(m == NULL);
    CHECK(dpt_now() - t0 < 1.0); /* nothing was reserved and touched */
}

/* dpt_model_summary writes like snprintf: the length of the whole text from a NULL buffer,
 * a NUL-terminated prefix into a short one, and the rows (tests/cli/model.sh checks the
 * rows of mnist_cnn as `dptrain model` prints them). */
static void test_summary(void) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("cnn:2x3x3:conv3k2p1,relu,[conv3k3p1,relu],fc2", 1, 1, &m));
    if (!m) return;
    const size_t need = dpt_model_summary(m, NULL, 0);
    char *full = malloc(need + 1), small[16];
    CHECK(dpt_model_summary(m, full, need + 1) == need && strlen(full) == need);
    CHECK(dpt_model_summary(m, small, sizeof small) == need && strlen(small) == sizeof small - 1 &&
          !strncmp(small, full, sizeof small - 1));
    CHECK(strstr(full, "input 2 x 3 x 3 (18 features), output 2, "));
    CHECK(strstr(full, "   0  conv1        conv       3 x 4 x 4              27  conv1.weight 3x2x2x2, conv1.bias 3\n"));
    CHECK(strstr(full, "   2  conv2        conv       3 x 4 x 4              84  conv2.weight 3x3x3x3, conv2.bias 3\n"));
    CHECK(strstr(full, "   3  relu2        relu       3 x 4 x 4               -  (+ the input of layer 2)\n"));
    free(full);
    dpt_model_free(m);
}

int main(void) {
    CHECK_OK(dpt_rng_init(&rng, 1234, DPT_STREAM_AUX));
    test_summary();
    test_too_large();
    test_backward_to();
    test_linear(1);
    test_linear(0);
    test_activation("mlp:3-6-2:relu", DPT_LAYER_RELU);
    test_activation("mlp:3-6-2:gelu", DPT_LAYER_GELU);
    test_activation("mlp:3-6-2:tanh", DPT_LAYER_TANH);
    test_activation("mlp:3-6-2:sigmoid", DPT_LAYER_SIGMOID);
    test_activation("mlp:3-6-2:identity", DPT_LAYER_IDENTITY);
    test_activation_grid("mlp:1-2001-1:gelu", DPT_LAYER_GELU);
    test_activation_grid("mlp:1-2001-1:sigmoid", DPT_LAYER_SIGMOID);
    test_activation_grid("mlp:1-2001-1:tanh", DPT_LAYER_TANH);
    test_gelu_edges();
    test_tanh_edges();
    test_loss(DPT_LOSS_SOFTMAX_CE, 4);
    test_softmax_ce_accuracy();
    test_softmax_ce_batch();
    test_loss(DPT_LOSS_SIGMOID_BCE, 1);
    test_loss(DPT_LOSS_SIGMOID_BCE, 4);
    test_loss(DPT_LOSS_SQUARED, 3);
    test_model("mlp:7-5-4-3:gelu", DPT_LOSS_SOFTMAX_CE);
    test_model("mlp:7-5-4-3:relu", DPT_LOSS_SOFTMAX_CE);
    test_model("mlp:7-5-4-3:tanh", DPT_LOSS_SOFTMAX_CE);
    test_model("mlp:7-5-4-3:sigmoid", DPT_LOSS_SIGMOID_BCE);
    test_model("mlp:7-5-4-3:gelu:nobias", DPT_LOSS_SOFTMAX_CE);
    test_model("ae:7-4-7:tanh", DPT_LOSS_SQUARED);
    test_model("mlp:7-1:relu", DPT_LOSS_SIGMOID_BCE);
    test_specs();
    test_init();
    test_bit_identical();
    dpt_rng_free(&rng);
    TEST_MAIN_END();
}
