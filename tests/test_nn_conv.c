/* Convolutional layers (Conv2d, max/avg pooling, flatten, GroupNorm) and residual
 * connections: every layer's forward against a naive double-precision reference written
 * here (a direct convolution, not im2col), backward and jvp against central finite
 * differences of that reference, every per-example mode against per-example finite
 * differences, both SQNORM paths of a convolution (ghost Gram matrices and materialized)
 * against the naive per-example gradient, the clipped sum (WEIGHTED) against the naive
 * sum c_i g_i, max-pooling's route to the first maximum (ties, NaN) bit for bit against a
 * plain scan, GroupNorm's per-example independence, chunked unfolding, spec errors, and
 * the unpacked small product behind the per-example gradients (dpt_small_gemm) against a
 * double loop over every block and tail shape, and the per-example gradients of stride-1
 * layers read off the padded input without an unfold (dpt_conv_pe_grad) against the naive
 * gradient within their rounding bound. */
#include <dptrain/nn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"
#include "testutil.h"

/* ==== double references ==== */

static void fill_gauss(float *x, size_t n, double sd, uint64_t seed) {
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t j = 0; j < n; j++) x[j] = (float)(sd * dpt_rng_gauss_ref(&r));
    dpt_rng_free(&r);
}

static double *to_double(const float *x, size_t n) {
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t j = 0; j < n; j++) d[j] = x[j];
    return d;
}

/* One layer in double, by its definition: th = the layer's parameters, x [B, D] -> v [B, K]. */
static void ref_layer(const dpt_layer *L, const double *th, const double *x, size_t B, double *v) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2];
    const size_t O = L->out_shape[0], Ho = L->out_shape[1], Wo = L->out_shape[2];
    const size_t D = L->in_dim, K = L->out_dim, k = L->k, s = L->stride;
    for (size_t i = 0; i < B; i++) {
        const double *xi = x + i * D;
        double *vi = v + i * K;
        switch (L->kind) {
        case DPT_LAYER_CONV2D: /* direct: v[o, a, b] = b_o + sum_{c, u, w} W[o, c, u, w] x[c, a s - p + u, b s - p + w] */
            if (L->wstd) { /* weight standardization by its definition: w^_o = (w_o - mean) / sqrt(var + 1e-5) */
                const size_t n = C * k * k;
                double *ws = malloc((O * n + (L->has_bias ? O : 0)) * sizeof *ws);
                for (size_t o = 0; o < O; o++) {
                    double mu = 0, var = 0;
                    for (size_t j = 0; j < n; j++) mu += th[o * n + j] / (double)n;
                    for (size_t j = 0; j < n; j++) var += (th[o * n + j] - mu) * (th[o * n + j] - mu) / (double)n;
                    for (size_t j = 0; j < n; j++) ws[o * n + j] = (th[o * n + j] - mu) / sqrt(var + 1e-5);
                }
                for (size_t o = 0; L->has_bias && o < O; o++) ws[O * n + o] = th[O * n + o];
                dpt_layer plain = *L;
                plain.wstd = 0;
                ref_layer(&plain, ws, xi, 1, vi);
                free(ws);
                break;
            }
            for (size_t o = 0; o < O; o++)
                for (size_t a = 0; a < Ho; a++)
                    for (size_t b = 0; b < Wo; b++) {
                        double acc = L->has_bias ? th[O * C * k * k + o] : 0.0;
                        for (size_t c = 0; c < C; c++)
                            for (size_t u = 0; u < k; u++)
                                for (size_t w = 0; w < k; w++) {
                                    long ih = (long)(a * s + u) - (long)L->pad, iw = (long)(b * s + w) - (long)L->pad;
                                    if (ih < 0 || iw < 0 || ih >= (long)H || iw >= (long)W) continue;
                                    acc += th[((o * C + c) * k + u) * k + w] * xi[(c * H + (size_t)ih) * W + (size_t)iw];
                                }
                        vi[(o * Ho + a) * Wo + b] = acc;
                    }
            break;
        case DPT_LAYER_MAXPOOL:
        case DPT_LAYER_AVGPOOL:
            for (size_t c = 0; c < C; c++)
                for (size_t a = 0; a < Ho; a++)
                    for (size_t b = 0; b < Wo; b++) {
                        double mx = -INFINITY, sum = 0;
                        for (size_t u = 0; u < k; u++)
                            for (size_t w = 0; w < k; w++) {
                                double z = xi[(c * H + a * s + u) * W + b * s + w];
                                if (z > mx) mx = z;
                                sum += z;
                            }
                        vi[(c * Ho + a) * Wo + b] = L->kind == DPT_LAYER_MAXPOOL ? mx : sum / (double)(k * k);
                    }
            break;
        case DPT_LAYER_GROUPNORM: {
            const size_t G = L->groups, n = C / G * H * W;
            for (size_t g = 0; g < G; g++) {
                double mu = 0, var = 0;
                for (size_t j = 0; j < n; j++) mu += xi[g * n + j];
                mu /= (double)n;
                for (size_t j = 0; j < n; j++) var += (xi[g * n + j] - mu) * (xi[g * n + j] - mu);
                var /= (double)n;
                for (size_t j = 0; j < n; j++) {
                    size_t c = (g * n + j) / (H * W);
                    vi[g * n + j] = th[c] * (xi[g * n + j] - mu) / sqrt(var + 1e-5) + th[C + c];
                }
            }
            break;
        }
        case DPT_LAYER_CHANNEL_AFFINE: /* fbn: v[c] = s_c x[c] + b_c */
            for (size_t j = 0; j < C * H * W; j++) vi[j] = th[j / (H * W)] * xi[j] + th[C + j / (H * W)];
            break;
        case DPT_LAYER_LINEAR:
            for (size_t o = 0; o < K; o++) {
                double acc = L->has_bias ? th[K * D + o] : 0.0;
                for (size_t d = 0; d < D; d++) acc += th[o * D + d] * xi[d];
                vi[o] = acc;
            }
            break;
        case DPT_LAYER_RELU:
            for (size_t d = 0; d < D; d++) vi[d] = xi[d] > 0 ? xi[d] : 0;
            break;
        case DPT_LAYER_TANH:
            for (size_t d = 0; d < D; d++) vi[d] = tanh(xi[d]);
            break;
        case DPT_LAYER_FLATTEN:
        case DPT_LAYER_IDENTITY:
            for (size_t d = 0; d < D; d++) vi[d] = xi[d];
            break;
        default:
            fprintf(stderr, "ref_layer: kind %d not covered\n", (int)L->kind);
            exit(1);
        }
    }
}

static size_t max_dim(const dpt_model *m) {
    size_t d = m->in_dim;
    for (size_t l = 0; l < m->n_layers; l++)
        if (m->layers[l].out_dim > d) d = m->layers[l].out_dim;
    return d;
}

/* Whole model in double (residual connections included): out [B, out_dim]. */
static void ref_model(const dpt_model *m, const double *theta, const double *x, size_t B, double *out) {
    const size_t n = m->n_layers, md = max_dim(m);
    double **a = malloc((n + 1) * sizeof *a);
    for (size_t l = 0; l <= n; l++) a[l] = calloc(B * md, sizeof(double));
    memcpy(a[0], x, B * m->in_dim * sizeof *x);
    for (size_t l = 0; l < n; l++) {
        const dpt_layer *L = &m->layers[l];
        ref_layer(L, theta + L->param_offset, a[l], B, a[l + 1]);
        if (L->residual_from)
            for (size_t j = 0; j < B * L->out_dim; j++) a[l + 1][j] += a[L->residual_from - 1][j];
    }
    memcpy(out, a[n], B * m->out_dim * sizeof *out);
    for (size_t l = 0; l <= n; l++) free(a[l]);
    free(a);
}

/* f(theta, x) = sum_{i in [i0, i1)} <dout_i, out_i> in double */
static double ref_f(const dpt_model *m, const double *th, const double *x, size_t B, const float *dout, size_t i0,
                    size_t i1) {
    double *o = malloc(B * m->out_dim * sizeof *o), f = 0;
    ref_model(m, th, x, B, o);
    for (size_t i = i0; i < i1; i++)
        for (size_t k = 0; k < m->out_dim; k++) f += (double)dout[i * m->out_dim + k] * o[i * m->out_dim + k];
    free(o);
    return f;
}

/* Forward of a batch big enough for the threaded unfold and direct paths: 2 threads give
 * the same bits as 1, and both match the naive double reference; so do the gradients. */
static void check_forward_threads(const char *spec, size_t B, uint64_t seed) {
    dpt_model *m1 = NULL, *m2 = NULL;
    CHECK_OK(dpt_model_new(spec, B, 1, &m1));
    CHECK_OK(dpt_model_new(spec, B, 2, &m2));
    if (!m1 || !m2) {
        dpt_model_free(m1);
        dpt_model_free(m2);
        return;
    }
    const size_t P = m1->n_params, D = m1->in_dim, K = m1->out_dim;
    const dpt_layer *L = &m1->layers[0];
    CHECK(L->kind == DPT_LAYER_CONV2D && L->stride == 1 &&
          B * L->in_shape[0] * L->k * L->k * L->out_shape[1] * L->out_shape[2] > DPT_NN_PAR_MIN);
    fill_gauss(m1->theta, P, 0.5, seed);
    memcpy(m2->theta, m1->theta, P * sizeof(float));
    float *x = malloc(B * D * sizeof *x);
    fill_gauss(x, B * D, 1.0, seed + 1);
    double *th = to_double(m1->theta, P), *xd = to_double(x, B * D), *o = malloc(B * K * sizeof *o);
    CHECK_OK(dpt_model_forward(m1, x, B));
    CHECK_OK(dpt_model_forward(m2, x, B));
    ref_model(m1, th, xd, B, o);
    CHECK(memcmp(dpt_model_output(m1), dpt_model_output(m2), B * K * sizeof(float)) == 0);
    for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(dpt_model_output(m2)[j], o[j], 1e-4, 1e-4);
    /* backward through every layer (the first layer's parameter gradient needs the second's
     * input gradient): the same bits with 1 and 2 threads */
    float *dout = malloc(B * K * sizeof *dout), *g1 = malloc(P * sizeof *g1), *g2 = malloc(P * sizeof *g2);
    fill_gauss(dout, B * K, 1.0, seed + 2);
    CHECK_OK(dpt_model_backward(m1, dout, B));
    CHECK_OK(dpt_model_backward(m2, dout, B));
    CHECK_OK(dpt_model_param_grad(m1, B, DPT_GRAD_SUM, NULL, g1, P, 0));
    CHECK_OK(dpt_model_param_grad(m2, B, DPT_GRAD_SUM, NULL, g2, P, 0));
    CHECK(memcmp(g1, g2, P * sizeof(float)) == 0);
    free(dout);
    free(g1);
    free(g2);
    free(x);
    free(th);
    free(xd);
    free(o);
    dpt_model_free(m1);
    dpt_model_free(m2);
}

/* ==== model-level checks: forward, backward, all four modes, jvp ==== */

static void check_model(const char *spec, size_t B, uint64_t seed) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 2, &m));
    if (!m) return;
    const size_t P = m->n_params, D = m->in_dim, K = m->out_dim;
    fill_gauss(m->theta, P, 0.5, seed);
    /* GroupNorm scales near 1 (a tiny gamma would make the check weak) */
    for (size_t t = 0; t < dpt_model_n_tensors(m); t++) {
        dpt_param_tensor pt;
        dpt_model_tensor(m, t, &pt);
        if (pt.role == DPT_TENSOR_SCALE)
            for (size_t j = 0; j < pt.size; j++) m->theta[pt.offset + j] += 1.0f;
    }
    float *x = malloc(B * D * sizeof *x), *dout = malloc(B * K * sizeof *dout);
    fill_gauss(x, B * D, 1.0, seed + 1);
    fill_gauss(dout, B * K, 1.0, seed + 2);
    double *th = to_double(m->theta, P), *xd = to_double(x, B * D), *o = malloc(B * K * sizeof *o);

    /* forward vs the naive double model */
    CHECK_OK(dpt_model_forward(m, x, B));
    ref_model(m, th, xd, B, o);
    for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(dpt_model_output(m)[j], o[j], 1e-4, 1e-4);

    /* SUM vs central differences of the double reference */
    CHECK_OK(dpt_model_backward(m, dout, B));
    float *g = malloc(P * sizeof *g), *pe = malloc(B * P * sizeof *pe), *sq = malloc(B * sizeof *sq);
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SUM, NULL, g, 0, 0));
    const double h = 1e-6;
    double *fd_pe = malloc(B * P * sizeof *fd_pe);
    for (size_t p = 0; p < P; p++) {
        double z0 = th[p], sum = 0;
        for (size_t i = 0; i < B; i++) {
            th[p] = z0 + h;
            double fp = ref_f(m, th, xd, B, dout, i, i + 1);
            th[p] = z0 - h;
            double fm = ref_f(m, th, xd, B, dout, i, i + 1);
            fd_pe[i * P + p] = (fp - fm) / (2 * h);
            sum += fd_pe[i * P + p];
        }
        th[p] = z0;
        CHECK_CLOSE(g[p], sum, 2e-4, 2e-3);
    }
    /* PER_EXAMPLE vs per-example finite differences (row stride > P) */
    const size_t ld = P + 3;
    float *pe2 = malloc(B * ld * sizeof *pe2);
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_PER_EXAMPLE, NULL, pe2, ld, 0));
    for (size_t i = 0; i < B; i++)
        for (size_t p = 0; p < P; p++) CHECK_CLOSE(pe2[i * ld + p], fd_pe[i * P + p], 2e-4, 2e-3);
    /* per-example gradients sum to the batch gradient */
    for (size_t p = 0; p < P; p++) {
        double s = 0;
        for (size_t i = 0; i < B; i++) s += pe2[i * ld + p];
        CHECK_CLOSE(g[p], s, 1e-4, 1e-4);
    }
    /* SQNORM vs squared norms of the per-example rows; accumulate adds */
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
    for (size_t i = 0; i < B; i++) {
        double s = 0;
        for (size_t p = 0; p < P; p++) s += fd_pe[i * P + p] * fd_pe[i * P + p];
        CHECK(s > 0);
        CHECK_CLOSE(sq[i], s, 1e-4, 2e-3);
        sq[i] = 1.0f;
    }
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, sq, 0, 1));
    for (size_t i = 0; i < B; i++) {
        double s = 1;
        for (size_t p = 0; p < P; p++) s += fd_pe[i * P + p] * fd_pe[i * P + p];
        CHECK_CLOSE(sq[i], s, 1e-4, 2e-3);
    }
    /* WEIGHTED vs sum_i w_i g_i; accumulate = 1 adds to what is there */
    float *w = malloc(B * sizeof *w), *gw = malloc(P * sizeof *gw);
    for (size_t i = 0; i < B; i++) w[i] = 0.3f + 0.5f * (float)i;
    for (size_t p = 0; p < P; p++) gw[p] = 2.0f;
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_WEIGHTED, w, gw, 0, 1));
    for (size_t p = 0; p < P; p++) {
        double s = 2.0;
        for (size_t i = 0; i < B; i++) s += w[i] * fd_pe[i * P + p];
        CHECK_CLOSE(gw[p], s, 3e-4, 2e-3);
    }
    /* input cotangent of layer 0's input is not computed; check dact[1] through layer 0's
     * backward_input against finite differences in x */
    {
        const dpt_layer *L0 = &m->layers[0];
        float *dx = malloc(B * D * sizeof *dx);
        CHECK_OK(L0->ops->backward_input(L0, m->act[0], m->act[1], m->dact[1], dx, B));
        for (size_t r = 0; r < m->n_layers; r++) /* a residual connection out of the input */
            if (m->layers[r].residual_from == 1)
                for (size_t j = 0; j < B * D; j++) dx[j] += m->dact[r + 1][j];
        for (size_t j = 0; j < B * D; j++) {
            double z0 = xd[j];
            xd[j] = z0 + h;
            double fp = ref_f(m, th, xd, B, dout, 0, B);
            xd[j] = z0 - h;
            double fm = ref_f(m, th, xd, B, dout, 0, B);
            xd[j] = z0;
            CHECK_CLOSE(dx[j], (fp - fm) / (2 * h), 2e-4, 2e-3);
        }
        free(dx);
    }
    /* jvp in a joint (theta, x) direction vs the central difference of the reference */
    {
        float *dth = malloc(P * sizeof *dth), *dxx = malloc(B * D * sizeof *dxx), *jv = malloc(B * K * sizeof *jv);
        fill_gauss(dth, P, 1.0, seed + 3);
        fill_gauss(dxx, B * D, 1.0, seed + 4);
        CHECK_OK(dpt_model_jvp(m, dth, dxx, B, jv));
        double *tp = malloc(P * sizeof *tp), *xp = malloc(B * D * sizeof *xp), *op = malloc(B * K * sizeof *op),
               *om = malloc(B * K * sizeof *om);
        for (int sgn = 0; sgn < 2; sgn++) {
            double e = sgn ? -h : h;
            for (size_t p = 0; p < P; p++) tp[p] = th[p] + e * dth[p];
            for (size_t j = 0; j < B * D; j++) xp[j] = xd[j] + e * dxx[j];
            ref_model(m, tp, xp, B, sgn ? om : op);
        }
        for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(jv[j], (op[j] - om[j]) / (2 * h), 3e-4, 2e-3);
        free(dth), free(dxx), free(jv), free(tp), free(xp), free(op), free(om);
    }
    free(x), free(dout), free(th), free(xd), free(o), free(g), free(pe), free(sq), free(fd_pe), free(pe2), free(w),
        free(gw);
    dpt_model_free(m);
}

/* ==== convolution: ghost and materialized norms, clipped sum, chunking ==== */

/* naive per-example gradient of one conv layer in double: g [B, P] */
static void naive_conv_grads(const dpt_layer *L, const float *x, const float *dv, size_t B, double *g) {
    const size_t C = L->in_shape[0], H = L->in_shape[1], W = L->in_shape[2];
    const size_t O = L->out_shape[0], Ho = L->out_shape[1], Wo = L->out_shape[2], k = L->k, s = L->stride;
    const size_t P = L->n_params;
    memset(g, 0, B * P * sizeof *g);
    for (size_t i = 0; i < B; i++)
        for (size_t o = 0; o < O; o++)
            for (size_t a = 0; a < Ho; a++)
                for (size_t b = 0; b < Wo; b++) {
                    double d = dv[i * L->out_dim + (o * Ho + a) * Wo + b];
                    if (L->has_bias) g[i * P + O * C * k * k + o] += d;
                    for (size_t c = 0; c < C; c++)
                        for (size_t u = 0; u < k; u++)
                            for (size_t w = 0; w < k; w++) {
                                long ih = (long)(a * s + u) - (long)L->pad, iw = (long)(b * s + w) - (long)L->pad;
                                if (ih < 0 || iw < 0 || ih >= (long)H || iw >= (long)W) continue;
                                g[i * P + ((o * C + c) * k + u) * k + w] +=
                                    d * x[i * L->in_dim + (c * H + (size_t)ih) * W + (size_t)iw];
                            }
                }
}

static void check_conv_paths(const char *spec, size_t B, int want_ghost) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 1, &m));
    if (!m) return;
    dpt_layer *L = &m->layers[0];
    CHECK(L->kind == DPT_LAYER_CONV2D);
    CHECK(L->ghost == want_ghost); /* the per-layer choice: ghost iff T (C k^2 + O) < O C k^2 */
    const size_t P = L->n_params, D = L->in_dim, K = L->out_dim;
    fill_gauss(m->theta, m->n_params, 0.5, 11);
    float *x = malloc(B * D * sizeof *x), *dv = malloc(B * K * sizeof *dv), *sq = malloc(B * sizeof *sq);
    fill_gauss(x, B * D, 1.0, 12);
    fill_gauss(dv, B * K, 1.0, 13);
    dv[0] *= 30.0f; /* example 0 gets a large gradient (it will be clipped) */
    double *g = malloc(B * P * sizeof *g), *n2 = malloc(B * sizeof *n2);
    naive_conv_grads(L, x, dv, B, g);
    for (size_t i = 0; i < B; i++) {
        n2[i] = 0;
        for (size_t p = 0; p < P; p++) n2[i] += g[i * P + p] * g[i * P + p];
    }
    const size_t chunk0 = L->chunk;
    for (int pass = 0; pass < 4; pass++) {
        L->ghost = pass & 1;                    /* both SQNORM paths */
        L->chunk = pass & 2 ? 2 : chunk0;       /* and a chunk smaller than the batch */
        CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
        for (size_t i = 0; i < B; i++) CHECK_CLOSE(sq[i], n2[i], 1e-4, 1e-4);
        /* clipped sum: c_i = min(1, C / ||g_i||), WEIGHTED = sum c_i g_i, one GEMM per chunk */
        const double Cn = sqrt(n2[1]) * 0.8;
        float *c = malloc(B * sizeof *c), *cs = malloc(P * sizeof *cs);
        for (size_t i = 0; i < B; i++) c[i] = sq[i] > Cn * Cn ? (float)(Cn / sqrt((double)sq[i])) : 1.0f;
        CHECK(c[0] < 1.0f);
        CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_WEIGHTED, c, cs, 0, 0));
        for (size_t p = 0; p < P; p++) {
            double s = 0;
            for (size_t i = 0; i < B; i++) s += fmin(1.0, Cn / sqrt(n2[i])) * g[i * P + p];
            CHECK_CLOSE(cs[p], s, 1e-4, 1e-4);
        }
        /* PER_EXAMPLE rows equal the naive gradient; each clipped row has norm min(||g||, C) */
        float *pe = malloc(B * P * sizeof *pe);
        CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, P, 0));
        for (size_t i = 0; i < B; i++) {
            double nn = 0;
            for (size_t p = 0; p < P; p++) {
                CHECK_CLOSE(pe[i * P + p], g[i * P + p], 1e-4, 1e-4);
                nn += (double)c[i] * pe[i * P + p] * c[i] * pe[i * P + p];
            }
            CHECK_CLOSE(sqrt(nn), fmin(sqrt(n2[i]), Cn), 1e-5, 1e-4);
        }
        /* forward and backward_input do not depend on the chunk either */
        float *v = malloc(B * K * sizeof *v);
        CHECK_OK(L->ops->forward(L, x, v, B));
        double *th = to_double(m->theta + L->param_offset, P), *xd = to_double(x, B * D), *vr = malloc(B * K * sizeof *vr);
        ref_layer(L, th, xd, B, vr);
        for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(v[j], vr[j], 1e-5, 1e-4);
        free(c), free(cs), free(pe), free(v), free(th), free(xd), free(vr);
    }
    free(x), free(dv), free(sq), free(g), free(n2);
    dpt_model_free(m);
}

/* ==== direct per-example gradients (dpt_conv_pe_grad): no unfold ==== */

/* A stride-1 layer with Wo % 8 == 0, or a strided one taken through its phases, after its
 * (direct) forward: PER_EXAMPLE (row stride > P,
 * overwrite and accumulate) and the materialized SQNORM against the naive double gradient,
 * each entry within the rounding bound of its float sum: 8 lane sums of T / 8 products,
 * then 3 additions, so |g - ref| <= (T / 8 + 4) u S with S = sum_t |dv x| (and u = 2^-24,
 * doubled for margin). Neither mode may unfold (the cache stays empty until WEIGHTED). */
static void check_pe_direct(const char *spec, size_t B, int threads) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, threads, &m));
    if (!m) return;
    dpt_layer *L = &m->layers[0];
    CHECK(L->kind == DPT_LAYER_CONV2D && L->ucache);
    /* strided layers sum over Wo rounded up to 8 columns (the extra ones with dv = 0) */
    const size_t P = L->n_params, D = L->in_dim, K = L->out_dim, T = L->out_shape[1] * ((L->out_shape[2] + 7) / 8 * 8);
    fill_gauss(m->theta, m->n_params, 0.5, 31);
    float *x = malloc(B * D * sizeof *x), *dv = malloc(B * K * sizeof *dv), *sq = malloc(B * sizeof *sq);
    float *ax = malloc(B * D * sizeof *ax), *adv = malloc(B * K * sizeof *adv);
    fill_gauss(x, B * D, 1.0, 32);
    fill_gauss(dv, B * K, 1.0, 33);
    for (size_t j = 0; j < B * D; j++) ax[j] = fabsf(x[j]);
    for (size_t j = 0; j < B * K; j++) adv[j] = fabsf(dv[j]);
    double *g = malloc(B * P * sizeof *g), *S = malloc(B * P * sizeof *S);
    naive_conv_grads(L, x, dv, B, g);
    naive_conv_grads(L, ax, adv, B, S);
    const double u = 2.0 * 0x1p-24 * ((double)T / 8.0 + 4.0);
    const size_t ld = P + 2;
    float *pe = malloc(B * ld * sizeof *pe), *v = malloc(B * K * sizeof *v);
    CHECK_OK(L->ops->forward(L, x, v, B)); /* direct: records x as pending, unfolds nothing */
    for (size_t j = 0; j < B * ld; j++) pe[j] = 1.0f;
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, ld, 1));
    size_t bad = 0;
    for (size_t i = 0; i < B; i++)
        for (size_t p = 0; p < P; p++) {
            const double ref = 1.0 + g[i * P + p], tol = u * (1.0 + S[i * P + p]);
            if (!(fabs(pe[i * ld + p] - ref) <= tol)) {
                if (bad++ < 5) fprintf(stderr, "%s: pe[%zu, %zu] = %.9g, naive %.9g\n", spec, i, p, pe[i * ld + p], ref);
            }
        }
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, ld, 0));
    for (size_t i = 0; i < B; i++) {
        for (size_t p = 0; p < P; p++) bad += !(fabs(pe[i * ld + p] - g[i * P + p]) <= u * S[i * P + p]);
        CHECK(pe[i * ld + P] == 1.0f && pe[i * ld + P + 1] == 1.0f); /* past the row: untouched */
    }
    const int ghost = L->ghost;
    L->ghost = 0; /* the materialized SQNORM */
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
    for (size_t i = 0; i < B; i++) {
        double n2 = 0.0;
        for (size_t p = 0; p < P; p++) n2 += g[i * P + p] * g[i * P + p];
        CHECK_CLOSE(sq[i], n2, 1e-6, 1e-5);
    }
    CHECK(L->ucache->x == NULL && L->ucache->pend == x); /* nothing unfolded so far */
    L->ghost = ghost;
    float *w = malloc(B * sizeof *w), *cs = malloc(P * sizeof *cs);
    for (size_t i = 0; i < B; i++) w[i] = 0.5f + (float)i;
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_WEIGHTED, w, cs, 0, 0));
    CHECK(L->ucache->x == x); /* the GEMM modes still unfold, once */
    if (bad) fprintf(stderr, "%s (%d threads): %zu per-example entries off the naive gradient\n", spec, threads, bad);
    CHECK(bad == 0);
    free(x), free(dv), free(sq), free(ax), free(adv), free(g), free(S), free(pe), free(v), free(w), free(cs);
    dpt_model_free(m);
}

/* ==== unfold cache: reusing forward's im2col changes no result ==== */

/* every gradient mode, the layer norms and jvp of a model with the Conv2d unfold caches
 * equal those of the same model without them, over two batches written into the same input
 * buffer (the second smaller: a stale unfold would show) */
static void check_unfold_cache(const char *spec, size_t maxB, size_t chunk, uint64_t seed) {
    dpt_model *a = NULL, *b = NULL;
    CHECK_OK(dpt_model_new(spec, maxB, 1, &a));
    CHECK_OK(dpt_model_new(spec, maxB, 1, &b));
    if (!a || !b) return;
    for (size_t l = 0; chunk && l < a->n_layers; l++)
        if (a->layers[l].kind == DPT_LAYER_CONV2D) a->layers[l].chunk = b->layers[l].chunk = chunk;
    size_t want = 0, nconv = 0;
    for (size_t l = 0; l < a->n_layers; l++)
        if (a->layers[l].kind == DPT_LAYER_CONV2D) {
            const dpt_layer *L = &a->layers[l];
            want += maxB * L->in_shape[0] * L->k * L->k * L->out_shape[1] * L->out_shape[2] * sizeof(float);
            nconv++;
        }
    CHECK(nconv >= 2);
    CHECK(dpt_model_unfold_cache_bytes(a) == want); /* [max_batch, C k^2, T] per conv layer */
    CHECK_OK(dpt_model_unfold_cache(b, 0));
    CHECK(dpt_model_unfold_cache_bytes(b) == 0);
    const size_t P = a->n_params, D = a->in_dim, K = a->out_dim, G = dpt_model_n_param_layers(a);
    fill_gauss(a->theta, P, 0.5, seed);
    memcpy(b->theta, a->theta, P * sizeof(float));
    float *x = malloc(maxB * D * sizeof *x), *dout = malloc(maxB * K * sizeof *dout);
    float *ra = malloc(maxB * P * sizeof *ra), *rb = malloc(maxB * P * sizeof *rb);
    float *w = malloc(maxB * sizeof *w), *dth = malloc(P * sizeof *dth);
    float *ja = malloc(maxB * K * sizeof *ja), *jb = malloc(maxB * K * sizeof *jb);
    fill_gauss(dth, P, 1.0, seed + 3);
    size_t diff = 0, total = 0;
#define SAME(p, q, n)                                                                                                  \
    do {                                                                                                               \
        for (size_t j_ = 0; j_ < (n); j_++) {                                                                          \
            CHECK_CLOSE((p)[j_], (q)[j_], 1e-6, 1e-6);                                                                  \
            diff += (p)[j_] != (q)[j_];                                                                                \
            total++;                                                                                                   \
        }                                                                                                              \
    } while (0)
    for (int round = 0; round < 2; round++) {
        const size_t B = round ? maxB - 1 : maxB;
        fill_gauss(x, B * D, 1.0, seed + 10 + (uint64_t)round);
        fill_gauss(dout, B * K, 1.0, seed + 20 + (uint64_t)round);
        for (size_t i = 0; i < B; i++) w[i] = 0.25f + 0.5f * (float)i / (float)B;
        dpt_model *ms[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            CHECK_OK(dpt_model_forward(ms[k], x, B));
            CHECK_OK(dpt_model_backward(ms[k], dout, B));
        }
        SAME(dpt_model_output(a), dpt_model_output(b), B * K);
        const dpt_grad_mode modes[4] = {DPT_GRAD_SUM, DPT_GRAD_WEIGHTED, DPT_GRAD_SQNORM, DPT_GRAD_PER_EXAMPLE};
        const size_t len[4] = {P, P, B, B * P};
        for (int md = 0; md < 4; md++) {
            CHECK_OK(dpt_model_param_grad(a, B, modes[md], w, ra, P, 0));
            CHECK_OK(dpt_model_param_grad(b, B, modes[md], w, rb, P, 0));
            SAME(ra, rb, len[md]);
        }
        /* every cached layer holds its input's unfold now (filled by its forward, or by the
         * first backward_params after a direct forward): one unfold per step, not three */
        for (size_t l = 0; l < a->n_layers; l++)
            if (a->layers[l].ucache) CHECK(a->layers[l].ucache->x == a->act[l] && a->layers[l].ucache->B == B);
        CHECK_OK(dpt_model_layer_sqnorms(a, B, ra));
        CHECK_OK(dpt_model_layer_sqnorms(b, B, rb));
        SAME(ra, rb, G * B);
        CHECK_OK(dpt_model_jvp(a, dth, NULL, B, ja));
        CHECK_OK(dpt_model_jvp(b, dth, NULL, B, jb));
        SAME(ja, jb, B * K);
        /* a layer call on another input buffer (same batch) must not read the cached unfold */
        const dpt_layer *L = &a->layers[0], *Lb = &b->layers[0];
        float *x2 = malloc(B * D * sizeof *x2);
        for (size_t j = 0; j < B * D; j++) x2[j] = 2.0f * x[j] + 0.5f;
        CHECK_OK(L->ops->backward_params(L, x2, a->dact[1], B, DPT_GRAD_SQNORM, NULL, ra, 0, 0));
        CHECK_OK(Lb->ops->backward_params(Lb, x2, b->dact[1], B, DPT_GRAD_SQNORM, NULL, rb, 0, 0));
        SAME(ra, rb, B);
        CHECK_OK(L->ops->backward_params(L, a->act[0], a->dact[1], B, DPT_GRAD_SQNORM, NULL, rb, 0, 0));
        int moved = 0;
        for (size_t i = 0; i < B; i++) moved |= ra[i] != rb[i]; /* x2 differs from x (can fail) */
        CHECK(moved);
        free(x2);
    }
#undef SAME
    printf("unfold cache %s: %zu of %zu values not bit-identical to the uncached model\n", spec, diff, total);
    /* a budget below the first conv layer's cache skips it and caches later ones that fit */
    const dpt_layer *L0 = &a->layers[0];
    const size_t first = maxB * L0->in_shape[0] * L0->k * L0->k * L0->out_shape[1] * L0->out_shape[2] * sizeof(float);
    CHECK_OK(dpt_model_unfold_cache(a, first - 1));
    CHECK(a->layers[0].ucache == NULL && dpt_model_unfold_cache_bytes(a) < want);
    CHECK_OK(dpt_model_unfold_cache(a, 0));
    CHECK(dpt_model_unfold_cache_bytes(a) == 0);
    free(x), free(dout), free(ra), free(rb), free(w), free(dth), free(ja), free(jb);
    dpt_model_free(a);
    dpt_model_free(b);
}

/* ==== max-pooling: the first maximum, ties and NaN ==== */

/* The rule the layer documents, as a plain scan of one window: index into x_i of its first
 * maximum (row-major order, replaced only by a strictly greater value). */
static size_t ref_max_at(const dpt_layer *L, const float *xi, size_t c, size_t oh, size_t ow) {
    const size_t H = L->in_shape[1], W = L->in_shape[2], k = L->k, s = L->stride;
    size_t best = (c * H + oh * s) * W + ow * s;
    for (size_t a = 0; a < k; a++)
        for (size_t b = 0; b < k; b++) {
            size_t idx = (c * H + oh * s + a) * W + ow * s + b;
            if (xi[idx] > xi[best]) best = idx;
        }
    return best;
}

/* Inputs of few distinct values (many ties) and some NaN: forward, backward_input and jvp
 * bit for bit against the plain scan, including rows wider than the layer's column block. */
static void check_maxpool_routing(const char *spec, size_t B, uint64_t seed) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 1, &m));
    if (!m) return;
    const dpt_layer *L = &m->layers[0];
    CHECK(L->kind == DPT_LAYER_MAXPOOL);
    const size_t C = L->in_shape[0], Ho = L->out_shape[1], Wo = L->out_shape[2], D = L->in_dim, K = L->out_dim;
    float *x = malloc(B * D * sizeof *x), *t = malloc(B * D * sizeof *t), *g = malloc(B * K * sizeof *g);
    float *v = malloc(B * K * sizeof *v), *dx = malloc(B * D * sizeof *dx), *ref = malloc(B * D * sizeof *ref);
    uint64_t z = seed;
    for (size_t j = 0; j < B * D; j++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        const unsigned r = (unsigned)(z >> 33) % 64;
        x[j] = r == 0 ? NAN : (float)(r % 3); /* values 0, 1, 2 and about 1.6% NaN */
        t[j] = (float)j * 0.25f - 7.0f;        /* distinct, so a wrong route shows */
    }
    fill_gauss(g, B * K, 1.0, seed + 1);
    for (size_t j = 0; j < B * K; j += 7) g[j] = j % 2 ? -0.0f : 0.0f; /* signed zeros: sums of them keep their sign rule */
    size_t bad_fwd = 0, bad_jvp = 0, bad_bwd = 0;
    CHECK_OK(L->ops->forward(L, x, v, B));
    for (size_t i = 0; i < B; i++)
        for (size_t c = 0; c < C; c++)
            for (size_t oh = 0; oh < Ho; oh++)
                for (size_t ow = 0; ow < Wo; ow++) {
                    const float want = x[i * D + ref_max_at(L, x + i * D, c, oh, ow)];
                    const float got = v[i * K + (c * Ho + oh) * Wo + ow];
                    bad_fwd += memcmp(&want, &got, sizeof want) != 0;
                }
    CHECK_OK(L->ops->jvp(L, x, v, t, NULL, v, B));
    for (size_t i = 0; i < B; i++)
        for (size_t c = 0; c < C; c++)
            for (size_t oh = 0; oh < Ho; oh++)
                for (size_t ow = 0; ow < Wo; ow++)
                    bad_jvp += v[i * K + (c * Ho + oh) * Wo + ow] != t[i * D + ref_max_at(L, x + i * D, c, oh, ow)];
    CHECK_OK(L->ops->backward_input(L, x, v, g, dx, B));
    memset(ref, 0, B * D * sizeof *ref);
    for (size_t i = 0; i < B; i++) /* the same (c, oh, ow) order of the additions */
        for (size_t c = 0; c < C; c++)
            for (size_t oh = 0; oh < Ho; oh++)
                for (size_t ow = 0; ow < Wo; ow++)
                    ref[i * D + ref_max_at(L, x + i * D, c, oh, ow)] += g[i * K + (c * Ho + oh) * Wo + ow];
    for (size_t j = 0; j < B * D; j++) bad_bwd += memcmp(&dx[j], &ref[j], sizeof *dx) != 0;
    CHECK(bad_fwd == 0 && bad_jvp == 0 && bad_bwd == 0);
    if (bad_fwd || bad_jvp || bad_bwd)
        fprintf(stderr, "  %s: %zu forward, %zu jvp, %zu backward values differ from the plain scan\n", spec, bad_fwd,
                bad_jvp, bad_bwd);
    free(x), free(t), free(g), free(v), free(dx), free(ref);
    dpt_model_free(m);
}

/* ==== GroupNorm: per-example independence ==== */

static void test_groupnorm_independence(void) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("cnn:4x3x3:gn2", 3, 1, &m));
    if (!m) return;
    const size_t D = m->in_dim;
    for (size_t j = 0; j < m->n_params; j++) m->theta[j] = 0.5f + 0.1f * (float)j;
    float x[3 * 36], v1[3 * 36], v2[3 * 36];
    fill_gauss(x, 3 * D, 1.0, 21);
    CHECK_OK(dpt_model_forward(m, x, 3));
    memcpy(v1, dpt_model_output(m), sizeof v1);
    for (size_t j = D; j < 2 * D; j++) x[j] = 5.0f * x[j] + 3.0f; /* change example 1 only */
    CHECK_OK(dpt_model_forward(m, x, 3));
    memcpy(v2, dpt_model_output(m), sizeof v2);
    int same0 = 1, same2 = 1, diff1 = 0;
    for (size_t j = 0; j < D; j++) {
        same0 &= v1[j] == v2[j];
        same2 &= v1[2 * D + j] == v2[2 * D + j];
        diff1 |= v1[D + j] != v2[D + j];
    }
    CHECK(same0 && same2); /* bit-identical: the others' outputs do not move */
    CHECK(diff1);          /* the changed example's output does (the test can fail) */
    /* gamma starts at 1 under dpt_model_init */
    dpt_rng r;
    dpt_rng_init(&r, 1, DPT_STREAM_INIT);
    CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &r));
    dpt_rng_free(&r);
    CHECK(m->theta[0] == 1.0f && m->theta[3] == 1.0f && m->theta[4] == 0.0f);
    dpt_model_free(m);
}

/* ==== specs ==== */

static void test_specs(void) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("mnist_cnn", 4, 1, &m));
    if (m) {
        CHECK(m->in_dim == 784 && m->out_dim == 10 && m->n_params == 26010);
        CHECK(m->layers[0].out_shape[1] == 14 && m->layers[2].out_shape[1] == 13);
        CHECK(m->layers[3].out_shape[1] == 5 && m->layers[5].out_dim == 512);
        CHECK(m->layers[0].ghost == 0 && m->layers[3].ghost == 1); /* T = 196 vs 25 */
        CHECK(dpt_model_n_linear(m) == 4);
        dpt_rng r;
        dpt_rng_init(&r, 1, DPT_STREAM_INIT);
        CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &r));
        dpt_rng_free(&r);
        /* He init for a ReLU CNN: conv1 fan-in C k^2 = 64 */
        double s = 0;
        for (size_t j = 0; j < 1024; j++) s += (double)m->theta[j] * m->theta[j];
        CHECK_CLOSE(s / 1024, 2.0 / 64, 0, 0.15);
        dpt_param_tensor t;
        dpt_model_tensor(m, 0, &t);
        CHECK(!strcmp(t.name, "conv1.weight") && t.ndim == 4 && t.shape[0] == 16 && t.shape[1] == 1 && t.shape[3] == 8);
        dpt_model_free(m);
    }
    CHECK_OK(dpt_model_new("mnist_cnn_tanh", 4, 1, &m));
    if (m) {
        CHECK(m->n_params == 26010 && m->layers[0].out_shape[1] == 13 && m->layers[2].out_shape[1] == 12);
        CHECK(m->layers[1].kind == DPT_LAYER_TANH && m->layers[5].out_dim == 512);
        dpt_model_free(m);
    }
    CHECK_OK(dpt_model_new("cifar_cnn_tanh", 4, 1, &m));
    if (m) { /* the parameter count of their PyTorch model (models.py, CIFAR10_CNN(3)) */
        CHECK(m->in_dim == 3072 && m->out_dim == 10 && m->n_params == 550570);
        CHECK(m->layers[1].kind == DPT_LAYER_TANH && m->layers[15].out_dim == 2048);
        dpt_model_free(m);
    }
    CHECK_OK(dpt_model_new("resnet5", 4, 1, &m));
    if (m) {
        CHECK(m->in_dim == 3072 && m->out_dim == 10 && m->n_params == 20410);
        size_t nres = 0;
        for (size_t l = 0; l < m->n_layers; l++) nres += m->layers[l].residual_from != 0;
        CHECK(nres == 1 && m->layers[8].kind == DPT_LAYER_CONV2D && m->layers[8].residual_from == 9);
        dpt_model_free(m);
    }
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:conv4k3,bn,relu,fc2", 4, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("BatchNorm");
    CHECK_ERR_HAS("gn<groups>");
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:conv4k3,batchnorm2d,fc2", 4, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("per-example");
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:[conv4k3],fc2", 4, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("same shape");
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:[conv3k3p1,[relu],conv3k3p1]", 4, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("nested");
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:conv3k3p1,relu]", 4, 1, &m), DPT_EINVAL);
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:[conv3k3p1,tanh]", 4, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("tanh");
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:conv3q3", 4, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("'conv3q3' is not a layer");
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:conv3k9", 4, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("does not fit");
    CHECK_STATUS(dpt_model_new("cnn:3x8:conv3k3", 4, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("input shape");
    CHECK_STATUS(dpt_model_new("cnn:4x8x8:gn3", 4, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("do not divide");
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:maxpool9", 4, 1, &m), DPT_EINVAL);
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:conv2k3,", 4, 1, &m), DPT_EINVAL);
    CHECK_STATUS(dpt_model_new("cnn:3x8x8:conv2k3:bias", 4, 1, &m), DPT_EINVAL);
    CHECK_OK(dpt_model_new("cnn:3x8x8:conv2k3:nobias", 4, 1, &m));
    if (m) CHECK(m->n_params == 2 * 27);
    dpt_model_free(m);
}

/* dpt_small_gemm against a double-precision loop: row counts around its 6-row blocks,
 * column counts around its 8- and 16-wide vectors (masked tails), A read through both
 * orientations, C stored by rows and transposed, accumulate on and off. B is allocated to
 * end exactly at its last used element, so a read past column N shows under ASan. */
static void test_small_gemm(void) {
    static const size_t Ms[] = {1, 5, 6, 7, 13}, Ns[] = {1, 7, 8, 9, 16, 17, 31}, Ks[] = {0, 1, 3, 50};
    uint64_t seed = 900;
    size_t bad = 0, cases = 0;
    for (size_t im = 0; im < sizeof Ms / sizeof *Ms; im++)
        for (size_t in = 0; in < sizeof Ns / sizeof *Ns; in++)
            for (size_t ik = 0; ik < sizeof Ks / sizeof *Ks; ik++)
                for (int layout = 0; layout < 4; layout++) {
                    const size_t M = Ms[im], N = Ns[in], K = Ks[ik], ldb = N + 3;
                    const int a_rows = layout & 1, c_rows = (layout >> 1) & 1, accumulate = layout == 3;
                    /* A(m, k): [M, K] with row stride K + 2, or [K, M] with row stride M + 1 */
                    const size_t ars = a_rows ? K + 2 : 1, acs = a_rows ? 1 : M + 1;
                    const size_t na = a_rows ? M * (K + 2) : (K ? K : 1) * (M + 1);
                    const size_t nb = K ? (K - 1) * ldb + N : 1;
                    const size_t crs = c_rows ? N + 1 : 1, ccs = c_rows ? 1 : M + 2;
                    const size_t nc = c_rows ? M * (N + 1) : N * (M + 2);
                    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
                    double *ref = malloc(M * N * sizeof *ref);
                    fill_gauss(a, na, 1.0, seed++);
                    fill_gauss(b, nb, 1.0, seed++);
                    fill_gauss(c, nc, 1.0, seed++);
                    for (size_t m = 0; m < M; m++)
                        for (size_t n = 0; n < N; n++) {
                            double r = accumulate ? c[m * crs + n * ccs] : 0.0;
                            for (size_t k = 0; k < K; k++) r += (double)a[m * ars + k * acs] * b[k * ldb + n];
                            ref[m * N + n] = r;
                        }
                    dpt_small_gemm(M, N, K, a, ars, acs, b, ldb, c, crs, ccs, accumulate);
                    for (size_t m = 0; m < M; m++)
                        for (size_t n = 0; n < N; n++) {
                            const double got = c[m * crs + n * ccs], want = ref[m * N + n];
                            bad += !(fabs(got - want) <= 1e-5 * (1.0 + sqrt((double)K)) + 1e-5 * fabs(want));
                        }
                    cases++;
                    free(a), free(b), free(c), free(ref);
                }
    CHECK(cases == 5 * 7 * 4 * 4);
    if (bad) fprintf(stderr, "dpt_small_gemm: %zu entries off the double loop\n", bad);
    CHECK(bad == 0);
}

/* ==== weight standardization ==== */

/* A "ws" layer against the naive reference: its gradients (SUM, PER_EXAMPLE, SQNORM,
 * WEIGHTED, DOT) equal J (written out as a matrix, dpt_conv_ws_jacobian_ref) applied to
 * the plain layer's naive gradients at W^, and its per-example squared norms equal the
 * materialized rows' on both SQNORM paths a plain layer would take (ghost is refused). */
static void check_ws_reference(const char *spec, size_t B, uint64_t seed) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 1, &m));
    if (!m) return;
    dpt_layer *L = &m->layers[0];
    CHECK(L->kind == DPT_LAYER_CONV2D && L->wstd == 1 && L->ghost == 0);
    const size_t P = L->n_params, D = L->in_dim, K = L->out_dim, O = L->out_shape[0], n = P - (L->has_bias ? O : 0) ;
    fill_gauss(m->theta, m->n_params, 0.5, seed);
    for (size_t j = 0; j < n; j++) m->theta[j] += 0.3f; /* a mean to remove */
    float *x = malloc(B * D * sizeof *x), *dv = malloc(B * K * sizeof *dv);
    fill_gauss(x, B * D, 1.0, seed + 1);
    fill_gauss(dv, B * K, 1.0, seed + 2);
    /* plain gradients at W^: the naive conv gradient does not read the weights */
    double *gh = malloc(B * P * sizeof *gh), *g = malloc(B * P * sizeof *g), *Jg = malloc(n * sizeof *Jg);
    naive_conv_grads(L, x, dv, B, gh);
    float *row = malloc(P * sizeof *row);
    for (size_t i = 0; i < B; i++) {
        for (size_t p = 0; p < n; p++) row[p] = (float)gh[i * P + p];
        dpt_conv_ws_jacobian_ref(L, row, Jg);
        for (size_t p = 0; p < P; p++) g[i * P + p] = p < n ? Jg[p] : gh[i * P + p];
    }
    /* the standardization's Jacobian kills the directions 1 and w^_o: a gradient along
     * them would change nothing (the reference must see a real map, not the identity) */
    double n2raw = 0, n2ws = 0;
    for (size_t p = 0; p < n; p++) n2raw += gh[p] * gh[p], n2ws += g[p] * g[p];
    CHECK(fabs(n2raw - n2ws) > 1e-3 * n2raw);
    float *pe = malloc(B * P * sizeof *pe), *sq = malloc(B * sizeof *sq), *s = malloc(P * sizeof *s);
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, P, 0));
    for (size_t j = 0; j < B * P; j++) CHECK_CLOSE(pe[j], g[j], 1e-4, 1e-4);
    /* accumulate = 1 adds J g^_i (its own path) */
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, P, 1));
    for (size_t j = 0; j < B * P; j++) CHECK_CLOSE(pe[j], 2 * g[j], 2e-4, 1e-4);
    double *n2 = malloc(B * sizeof *n2);
    for (size_t i = 0; i < B; i++) {
        n2[i] = 0;
        for (size_t p = 0; p < P; p++) n2[i] += g[i * P + p] * g[i * P + p];
    }
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
    for (size_t i = 0; i < B; i++) CHECK_CLOSE(sq[i], n2[i], 1e-4, 1e-4);
    /* weighted: sum_i c_i J g^_i (clipping factors below and above 1) */
    float *c = malloc(B * sizeof *c);
    for (size_t i = 0; i < B; i++) c[i] = (float)fmin(1.0, 0.7 * sqrt(n2[0]) / sqrt(n2[i]));
    for (size_t p = 0; p < P; p++) s[p] = 1.0f;
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_WEIGHTED, c, s, 0, 1));
    for (size_t p = 0; p < P; p++) {
        double r = 1.0;
        for (size_t i = 0; i < B; i++) r += c[i] * g[i * P + p];
        CHECK_CLOSE(s[p], r, 1e-4, 1e-4);
    }
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_SUM, NULL, s, 0, 0));
    for (size_t p = 0; p < P; p++) {
        double r = 0.0;
        for (size_t i = 0; i < B; i++) r += g[i * P + p];
        CHECK_CLOSE(s[p], r, 1e-4, 1e-4);
    }
    /* DOT: <J g^_i, v> */
    float *v = malloc(P * sizeof *v), *dot = malloc(B * sizeof *dot);
    fill_gauss(v, P, 1.0, seed + 3);
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_DOT, v, dot, 0, 0));
    for (size_t i = 0; i < B; i++) {
        double r = 0.0;
        for (size_t p = 0; p < P; p++) r += g[i * P + p] * v[p];
        CHECK_CLOSE(dot[i], r, 1e-4, 1e-4);
    }
    /* the model summary and the canonical spec keep the flag */
    CHECK(strstr(m->spec, "ws") != NULL);
    free(x), free(dv), free(gh), free(g), free(Jg), free(row), free(pe), free(sq), free(s), free(n2), free(c), free(v),
        free(dot);
    dpt_model_free(m);
}

int main(void) {
    /* each layer alone, then small models with every layer kind and a residual group */
    check_model("cnn:2x7x6:conv3k3s2p1", 3, 100);
    check_model("cnn:2x5x5:conv2k2", 2, 101);
    /* padding cut on both sides of a row, stride 2 and 3 (im2col's valid column ranges) */
    check_model("cnn:2x6x7:conv3k3s2p1", 2, 112);
    check_model("cnn:1x5x9:conv2k5s3p2", 2, 113);
    check_model("cnn:2x6x5:conv3k3:nobias", 2, 102);
    /* T >= 32 positions: per-example products through dpt_small_gemm (O = 3: one masked
     * vector; O = 17: two vectors and a tail) */
    check_model("cnn:2x8x8:conv3k3p1", 2, 114);
    check_model("cnn:1x6x9:conv17k2s1p1", 2, 115);
    /* stride 1 unfolds through a padded copy (every stride-1 model above); batches large
     * enough (n Dk T > DPT_NN_PAR_MIN) to split it over 2 threads in blocks of 5 and 6 / 8 and
     * 8 examples, a width with a constant-size row copy (16) and one without (9, pad 2) */
    check_forward_threads("cnn:3x16x16:conv4k3p1,relu,conv4k3p1", 11, 116);
    check_forward_threads("cnn:3x16x7:conv4k3p2", 16, 117);
    /* stride 1 with Wo % 8 == 0: the forward and jvp skip the unfold (dpt_conv_direct);
     * channel counts that leave a partial block of 6 rows (7, 13, 4), positions that leave a
     * block of 8 (T = 40, 24), pads 0, 1, 2, kernels 1, 3, 5 */
    check_model("cnn:3x5x8:conv7k3p1", 2, 140);
    check_model("cnn:2x4x10:conv13k3", 2, 141);
    check_model("cnn:1x8x12:conv4k5", 2, 142);
    check_model("cnn:2x3x8:conv3k1:nobias", 3, 143);
    check_model("cnn:2x6x6:conv5k3p2,relu,[conv5k3p1],flatten,fc2", 2, 144);
    /* input rows of a multiple of 8: backward_input as a direct convolution of the padded dv
     * (p' = k - 1 - p = 0 and 3; here the forwards take the unfold, Wo = 10 and 6) */
    check_model("cnn:2x6x8:conv3k3p2", 2, 145);
    /* strided with overlapping windows and Wo8 <= 1.25 Wo: forward and jvp through the
     * phase images (the direct kernel on s^2 C channels), per-example gradients too */
    check_model("cnn:2x14x13:conv3k3s2p1", 2, 147);
    check_model("cnn:1x8x37:conv2k5s3p2:nobias", 2, 148);
    check_model("cnn:1x16x16:conv3k8s2p3ws", 2, 149);
    check_model("cnn:1x6x8:conv3k5p1", 2, 146);
    check_model("cnn:2x6x6:conv2k1,maxpool2", 3, 103);
    check_model("cnn:2x7x7:conv2k1,maxpool3s2", 2, 104);
    check_model("cnn:2x6x6:conv2k1,avgpool2s1", 2, 105);
    check_model("cnn:4x3x2:gn2", 3, 106);
    check_model("cnn:4x3x2:gn1,fc2", 2, 107);
    check_model("cnn:4x3x2:fbn,fc2", 2, 130);
    check_model("cnn:2x4x4:conv3k3p1,fbn,tanh,avgpool2,fc2", 3, 131);
    check_model("cnn:2x4x4:conv2k3p1,flatten,fc3", 2, 108);
    check_model("cnn:2x5x5:conv3k3p1,relu,[conv3k3p1],relu,maxpool2,flatten,fc3", 3, 109);
    check_model("cnn:2x4x4:[conv2k3p1,tanh,conv2k3p1,gn2],tanh,avgpool2,fc2", 2, 110);
    check_model("cnn:2x4x4:conv3k3p1,tanh,[conv3k1,gn3,tanh,conv3k3p1],avgpool2,fc2", 2, 111);
    /* ghost (T (C k^2 + O) < O C k^2) and materialized layers, both forced both ways */
    check_conv_paths("cnn:8x3x3:conv16k3p1", 5, 1); /* T (Dk + O) = 792 < O Dk = 1152: ghost */
    check_conv_paths("cnn:2x9x9:conv3k3", 5, 0);    /* 49 * 21 > 54: materialized */
    /* per-example gradients read off the padded input (dpt_conv_pe_grad): odd O and C k^2
     * (partial blocks), k = 1 and 5, pads 0-2, no bias, T = 384 on 2 threads (each with
     * its own padded copy), and the ghost-norm layer above with its materialized SQNORM */
    check_pe_direct("cnn:3x6x8:conv5k3p1", 5, 1);
    check_pe_direct("cnn:2x6x12:conv3k5:nobias", 3, 1);
    check_pe_direct("cnn:1x6x6:conv2k3p2", 4, 1);
    check_pe_direct("cnn:4x8x16:conv1k1", 3, 1);
    check_pe_direct("cnn:3x16x24:conv6k3p1", 9, 2);
    check_pe_direct("cnn:8x6x8:conv16k3p1", 5, 2);
    /* strided, overlapping windows, Wo 7, 13, 14 (8, 16, 16 columns): through the phase
     * images (s^2 C channels, ceil(k / s) kernels, taps past k zero) */
    check_pe_direct("cnn:2x14x13:conv3k3s2p1", 4, 1);
    check_pe_direct("cnn:1x8x37:conv2k5s3p2:nobias", 3, 1);
    check_pe_direct("cnn:1x28x28:conv16k8s2p3", 9, 2); /* mnist_cnn's conv1 */
    /* the unfold cache: ghost and materialized convs, residual group, GroupNorm, chunk < B */
    check_unfold_cache("cnn:8x3x3:conv16k3p1,relu,[conv16k3p1],gn4,relu,flatten,fc3", 5, 0, 120);
    check_unfold_cache("cnn:2x9x9:conv3k3,tanh,[conv3k3p1],maxpool2,conv4k2,flatten,fc3", 5, 2, 121);
    /* direct forwards (Wo = 8): the first backward_params unfolds into the cache */
    check_unfold_cache("cnn:3x8x8:conv6k3p1,relu,[conv6k3p1],gn2,relu,flatten,fc3", 5, 0, 122);
    check_unfold_cache("cnn:3x8x8:conv6k3p1,relu,[conv6k3p1],gn2,relu,flatten,fc3", 5, 2, 123);
    /* max-pooling's route: overlapping (s < k) and strided windows, a row of 100 outputs
     * (wider than one column block) */
    check_maxpool_routing("cnn:3x7x9:maxpool2s1", 4, 130);
    check_maxpool_routing("cnn:2x9x9:maxpool3s2", 3, 131);
    check_maxpool_routing("cnn:2x6x8:maxpool2", 3, 132);
    check_maxpool_routing("cnn:1x3x101:maxpool2s1", 2, 133);
    check_maxpool_routing("cnn:16x14x14:maxpool2s1", 3, 135); /* mnist_cnn's (the gather form) */
    check_maxpool_routing("cnn:1x3x300:maxpool2s1", 2, 136);
    check_maxpool_routing("cnn:2x5x5:maxpool1", 2, 134);
    /* 2 x 2 at stride 2 (the gather form): odd height and width (a row and a column in no
     * window), a row of 130 windows, resnet5's first pooling */
    check_maxpool_routing("cnn:2x7x9:maxpool2", 3, 137);
    check_maxpool_routing("cnn:1x4x260:maxpool2", 2, 138);
    check_maxpool_routing("cnn:8x32x32:maxpool2", 2, 139);
    /* weight standardization: every mode against finite differences of the double
     * reference (check_model), and against J times the plain gradient (check_ws_reference),
     * on a layer a plain conv would give the Gram SQNORM path and on a materialized one */
    check_model("cnn:2x5x5:conv3k3p1ws", 2, 150);
    check_model("cnn:2x6x7:conv3k3s2p1wsnobias", 2, 151);
    check_model("cnn:3x8x8:conv4k3p1ws,relu,[conv4k3p1ws],flatten,fc2", 2, 152);
    check_ws_reference("cnn:8x3x3:conv16k3p1ws", 5, 153); /* plain: ghost */
    check_ws_reference("cnn:2x9x9:conv3k3ws", 5, 154);     /* plain: materialized */
    check_ws_reference("cnn:3x8x8:conv5k3p1wsnobias", 3, 155);
    test_groupnorm_independence();
    test_specs();
    test_small_gemm();
    TEST_MAIN_END();
}
