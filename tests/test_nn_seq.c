/* Sequence layers (token + position embedding, LayerNorm, RMSNorm, position-wise Linear,
 * multi-head attention (bidirectional and causal), mean/CLS pooling, activations on
 * sequences, residual groups of them, pre-LN transformer blocks): every model's
 * forward against a naive double-precision reference written here, backward_input, the
 * batch gradient and jvp against central finite differences of that reference, every
 * per-example mode (PER_EXAMPLE rows against per-example finite differences, SQNORM, DOT,
 * WEIGHTED against those rows), both SQNORM paths of the position-wise Linear (Gram and
 * materialized) against each other and the naive per-example gradient, the embedding's
 * norm against Li et al.'s pair sum, clipping to exactly min(||g||, C), per-example
 * independence of the norms, causality of causal attention, the init of the new tensors,
 * and token-id and spec errors. Image to sequence (toseq, ViT's patch tokens after a
 * stride = kernel convolution) in the same checks, and the named transformers (gpt_tiny,
 * bert_tiny, vit_mnist, vit_cifar): their expansion, parameter counts, and per-example
 * gradients and norms against a loop of single-example passes. */
#include <dptrain/nn.h>
#include <dptrain/optim.h>
#include <dptrain/privacy.h>
#include <dptrain/train.h>

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

/* token ids in [0, V) as floats, from a small vocabulary so that ids repeat */
static void fill_tokens(float *x, size_t n, size_t V, uint64_t seed) {
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_AUX);
    for (size_t j = 0; j < n; j++) x[j] = (float)(dpt_rng_u64(&r) % V);
    dpt_rng_free(&r);
}

/* The padding mask [B, T] (1 = padded) of the batch ref_layer runs on (NULL = none): set by
 * ref_model for a model whose embedding has a pad id. */
static const unsigned char *ref_mask;

/* One layer by its definition, in double: th = the layer's parameters, x [B, D] -> v [B, K]. */
static void ref_layer(const dpt_layer *L, const double *th, const double *x, size_t B, double *v) {
    const size_t T = L->in_shape[1], D = L->in_shape[2], Din = L->in_dim, Kout = L->out_dim;
    for (size_t i = 0; i < B; i++) {
        const double *xi = x + i * Din;
        double *vi = v + i * Kout;
        switch (L->kind) {
        case DPT_LAYER_EMBEDDING: { /* v_t = E[id_t] + Pos[t] */
            const size_t E = L->out_shape[2], V = L->k;
            for (size_t t = 0; t < T; t++)
                for (size_t d = 0; d < E; d++)
                    vi[t * E + d] = th[(size_t)xi[t] * E + d] + (L->has_bias ? th[V * E + t * E + d] : 0.0);
            break;
        }
        case DPT_LAYER_LAYERNORM:
        case DPT_LAYER_RMSNORM: /* per position: gamma (x - mu) / sqrt(var + eps) + beta */
            for (size_t t = 0; t < T; t++) {
                const double *r = xi + t * D;
                double mu = 0, s2 = 0;
                if (L->kind == DPT_LAYER_LAYERNORM) {
                    for (size_t d = 0; d < D; d++) mu += r[d];
                    mu /= (double)D;
                }
                for (size_t d = 0; d < D; d++) s2 += (r[d] - mu) * (r[d] - mu);
                const double rs = 1.0 / sqrt(s2 / (double)D + (L->kind == DPT_LAYER_LAYERNORM ? 1e-5 : 1e-6));
                for (size_t d = 0; d < D; d++)
                    vi[t * D + d] = th[d] * (r[d] - mu) * rs + (L->kind == DPT_LAYER_LAYERNORM ? th[D + d] : 0.0);
            }
            break;
        case DPT_LAYER_SEQLINEAR:
        case DPT_LAYER_LINEAR: { /* v_t = W x_t + b (Linear: one position of all D values) */
            const size_t Tn = L->kind == DPT_LAYER_LINEAR ? 1 : T, Dd = Din / Tn, K = Kout / Tn;
            for (size_t t = 0; t < Tn; t++)
                for (size_t k = 0; k < K; k++) {
                    double s = L->has_bias ? th[K * Dd + k] : 0.0;
                    for (size_t d = 0; d < Dd; d++) s += th[k * Dd + d] * xi[t * Dd + d];
                    vi[t * K + k] = s;
                }
            break;
        }
        case DPT_LAYER_MEANPOOL:
        case DPT_LAYER_CLSPOOL: { /* with padding: the mean over the valid positions (0 if none), CLS 0 if padded */
            const unsigned char *mk = ref_mask && L->pad_mask ? ref_mask + i * T : NULL;
            size_t n = 0;
            for (size_t t = 0; t < T; t++) n += !(mk && mk[t]);
            for (size_t d = 0; d < D; d++) {
                double s = 0;
                if (L->kind == DPT_LAYER_CLSPOOL) s = mk && mk[0] ? 0.0 : xi[d];
                else {
                    for (size_t t = 0; t < T; t++) s += mk && mk[t] ? 0.0 : xi[t * D + d];
                    s = n ? s / (double)n : 0.0;
                }
                vi[d] = s;
            }
            break;
        }
        case DPT_LAYER_ATTENTION: { /* per head: softmax(Q K^T / sqrt(dh) over allowed keys) V */
            const size_t Dm = L->out_shape[2], H = L->groups, dh = Dm / H, W = 3 * Dm;
            const unsigned char *mk = ref_mask && L->pad_mask ? ref_mask + i * T : NULL; /* padded keys: not allowed */
            for (size_t h = 0; h < H; h++)
                for (size_t t = 0; t < T; t++) {
                    const size_t n = L->k ? t + 1 : T; /* causal: keys j <= t */
                    double s[64], mx = -INFINITY, z = 0;
                    for (size_t j = 0; j < n; j++) {
                        s[j] = 0;
                        for (size_t e = 0; e < dh; e++) s[j] += xi[t * W + h * dh + e] * xi[j * W + Dm + h * dh + e];
                        s[j] /= sqrt((double)dh);
                        if (!(mk && mk[j])) mx = fmax(mx, s[j]);
                    }
                    for (size_t j = 0; j < n; j++) z += mk && mk[j] ? 0.0 : exp(s[j] - mx);
                    for (size_t e = 0; e < dh; e++) { /* no allowed key: 0 */
                        double o = 0;
                        for (size_t j = 0; j < n; j++)
                            if (!(mk && mk[j])) o += exp(s[j] - mx) / z * xi[j * W + 2 * Dm + h * dh + e];
                        vi[t * Dm + h * dh + e] = o;
                    }
                }
            break;
        }
        case DPT_LAYER_CONV2D: { /* v[o, r, c] = b[o] + sum W[o, ch, a, e] x[ch, r s + a - p, c s + e - p] */
            const size_t C = L->in_shape[0], H = L->in_shape[1], Wd = L->in_shape[2], O = L->out_shape[0];
            const size_t Ho = L->out_shape[1], Wo = L->out_shape[2], k = L->k, st = L->stride, pd = L->pad;
            for (size_t o = 0; o < O; o++)
                for (size_t r = 0; r < Ho; r++)
                    for (size_t c = 0; c < Wo; c++) {
                        double sum = L->has_bias ? th[O * C * k * k + o] : 0.0;
                        for (size_t ch = 0; ch < C; ch++)
                            for (size_t a = 0; a < k; a++)
                                for (size_t e = 0; e < k; e++) {
                                    const long y = (long)(r * st + a) - (long)pd, z = (long)(c * st + e) - (long)pd;
                                    if (y < 0 || z < 0 || y >= (long)H || z >= (long)Wd) continue;
                                    sum += th[((o * C + ch) * k + a) * k + e] * xi[(ch * H + (size_t)y) * Wd + (size_t)z];
                                }
                        vi[(o * Ho + r) * Wo + c] = sum;
                    }
            break;
        }
        case DPT_LAYER_TOSEQ: { /* v = [cls; x^T] + Pos, x [C, N] channel-major */
            const size_t C = L->in_shape[0], N = L->in_shape[1] * L->in_shape[2], c = L->k, To = N + c;
            for (size_t t = 0; t < To; t++)
                for (size_t d = 0; d < C; d++)
                    vi[t * C + d] = (t < c ? th[d] : xi[d * N + (t - c)]) + (L->has_bias ? th[c * C + t * C + d] : 0.0);
            break;
        }
        case DPT_LAYER_GELU:
            for (size_t j = 0; j < Din; j++) vi[j] = xi[j] * 0.5 * (1.0 + erf(xi[j] / sqrt(2.0)));
            break;
        case DPT_LAYER_TANH:
            for (size_t j = 0; j < Din; j++) vi[j] = tanh(xi[j]);
            break;
        case DPT_LAYER_IDENTITY:
        case DPT_LAYER_FLATTEN:
            for (size_t j = 0; j < Din; j++) vi[j] = xi[j];
            break;
        default:
            fprintf(stderr, "ref_layer: no reference for %s\n", dpt_layer_kind_name(L->kind));
            exit(2);
        }
    }
}

static size_t max_dim(const dpt_model *m) {
    size_t d = m->in_dim;
    for (size_t l = 0; l < m->n_layers; l++)
        if (m->layers[l].out_dim > d) d = m->layers[l].out_dim;
    return d;
}

/* The model from layer `first` on (x = act[first]) in double, residual adds included. */
static void ref_model(const dpt_model *m, const double *theta, const double *x, size_t first, size_t B, double *out) {
    const size_t n = m->n_layers, md = max_dim(m);
    double **a = calloc(n + 1, sizeof *a);
    for (size_t l = first; l <= n; l++) a[l] = calloc(B * md, sizeof **a);
    memcpy(a[first], x, B * (first ? m->layers[first - 1].out_dim : m->in_dim) * sizeof *x);
    /* padding: the mask of these ids (from the model's last forward when starting later) */
    size_t pad_id;
    unsigned char *mask = NULL;
    if (dpt_model_pad_id(m, &pad_id)) {
        mask = malloc(B * m->pad_T);
        for (size_t j = 0; j < B * m->pad_T; j++) mask[j] = first ? m->pad_mask[j] : x[j] == (double)pad_id;
    }
    ref_mask = mask;
    for (size_t l = first; l < n; l++) {
        const dpt_layer *L = &m->layers[l];
        ref_layer(L, theta + L->param_offset, a[l], B, a[l + 1]);
        if (L->residual_from) {
            DPT_ASSERT(L->residual_from - 1 >= first);
            for (size_t j = 0; j < B * L->out_dim; j++) a[l + 1][j] += a[L->residual_from - 1][j];
        }
    }
    memcpy(out, a[n], B * m->out_dim * sizeof *out);
    if (mask && m->pad_out) /* a sequence output: padded positions give 0 */
        for (size_t r = 0; r < B * m->pad_T; r++)
            if (mask[r])
                for (size_t k = 0; k < m->out_dim / m->pad_T; k++) out[r * (m->out_dim / m->pad_T) + k] = 0.0;
    ref_mask = NULL;
    free(mask);
    for (size_t l = first; l <= n; l++) free(a[l]);
    free(a);
}

/* Pads token ids x [B, T] with pad_id (no other id equals it): example 0 none, 1 its second
 * half, 2 positions 0, 1 and T - 1 (a padded start: a causal query with no key), and so on. */
static void pad_tokens(float *x, size_t B, size_t T, size_t V, size_t pad_id) {
    for (size_t i = 0; i < B; i++)
        for (size_t t = 0; t < T; t++) {
            float *id = &x[i * T + t];
            if ((size_t)*id == pad_id) *id = (float)((pad_id + 1) % V);
            if ((i % 3 == 1 && t >= T / 2) || (i % 3 == 2 && (t < 2 || t == T - 1))) *id = (float)pad_id;
        }
}

/* f = <dout[i0 .. i0 + B), model(x)> in double */
static double ref_f(const dpt_model *m, const double *th, const double *x, size_t first, size_t B, const float *dout,
                    size_t i0) {
    double *o = malloc(B * m->out_dim * sizeof *o), s = 0;
    ref_model(m, th, x, first, B, o);
    for (size_t j = 0; j < B * m->out_dim; j++) s += o[j] * dout[i0 * m->out_dim + j];
    free(o);
    return s;
}

static double *to_double(const float *x, size_t n) {
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t j = 0; j < n; j++) d[j] = x[j];
    return d;
}

/* ==== every mode of a whole model against the reference ==== */

static void init_params(dpt_model *m, uint64_t seed) {
    dpt_rng r;
    dpt_rng_init(&r, seed, DPT_STREAM_INIT);
    CHECK_OK(dpt_model_init(m, DPT_INIT_LECUN, NULL, 0, 0.01, &r));
    dpt_rng_free(&r);
    /* move the scales and shifts off 1 and 0 so that their gradients are tested as such */
    fill_gauss(m->grad, m->n_params, 0.3, seed + 7);
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (L->kind == DPT_LAYER_LAYERNORM || L->kind == DPT_LAYER_RMSNORM)
            for (size_t p = 0; p < L->n_params; p++) m->theta[L->param_offset + p] += m->grad[L->param_offset + p];
    }
}

/* spec: a model over T token ids from a vocabulary of V (V = 0: float inputs N(0, 1)) */
static void check_model(const char *spec, size_t B, size_t V, uint64_t seed) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 2, &m));
    if (!m) return;
    const size_t P = m->n_params, D = m->in_dim, K = m->out_dim, ld = P + 3;
    init_params(m, seed);
    float *x = malloc(B * D * sizeof *x), *dout = malloc(B * K * sizeof *dout);
    if (V) fill_tokens(x, B * D, V, seed + 1);
    else fill_gauss(x, B * D, 1.0, seed + 1);
    size_t pad_id;
    if (V && dpt_model_pad_id(m, &pad_id)) pad_tokens(x, B, D, V, pad_id);
    fill_gauss(dout, B * K, 1.0, seed + 2);
    double *th = to_double(m->theta, P), *xd = to_double(x, B * D), *o = malloc(B * K * sizeof *o);

    /* forward */
    CHECK_OK(dpt_model_forward(m, x, B));
    ref_model(m, th, xd, 0, B, o);
    for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(dpt_model_output(m)[j], o[j], 1e-4, 1e-4);

    /* per-example gradients by central differences of example i's f_i, in double */
    CHECK_OK(dpt_model_backward(m, dout, B));
    const double h = 1e-5;
    double *fd = calloc(B * P, sizeof *fd);
    for (size_t i = 0; i < B; i++)
        for (size_t p = 0; p < P; p++) {
            const double t0 = th[p];
            th[p] = t0 + h;
            double fp = ref_f(m, th, xd + i * D, 0, 1, dout, i);
            th[p] = t0 - h;
            double fm = ref_f(m, th, xd + i * D, 0, 1, dout, i);
            th[p] = t0;
            fd[i * P + p] = (fp - fm) / (2 * h);
        }
    /* SUM */
    float *g = malloc(P * sizeof *g);
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SUM, NULL, g, 0, 0));
    for (size_t p = 0; p < P; p++) {
        double s = 0;
        for (size_t i = 0; i < B; i++) s += fd[i * P + p];
        CHECK_CLOSE(g[p], s, 2e-4, 2e-3);
    }
    /* PER_EXAMPLE (stride ld > P; the gap must stay untouched), then accumulate */
    float *pe = malloc(B * ld * sizeof *pe);
    for (size_t j = 0; j < B * ld; j++) pe[j] = 7.0f;
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, ld, 0));
    for (size_t i = 0; i < B; i++) {
        for (size_t p = 0; p < P; p++) CHECK_CLOSE(pe[i * ld + p], fd[i * P + p], 2e-4, 2e-3);
        for (size_t p = P; p < ld; p++) CHECK(pe[i * ld + p] == 7.0f);
    }
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, ld, 1));
    for (size_t i = 0; i < B; i++)
        for (size_t p = 0; p < P; p++) CHECK_CLOSE(pe[i * ld + p], 2 * fd[i * P + p], 4e-4, 2e-3);
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, ld, 0));
    /* SQNORM against the rows' norms (and accumulate adds) */
    float *sq = malloc(B * sizeof *sq);
    double *n2 = malloc(B * sizeof *n2);
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
    for (size_t i = 0; i < B; i++) {
        double s = 0;
        for (size_t p = 0; p < P; p++) s += (double)pe[i * ld + p] * pe[i * ld + p];
        n2[i] = s;
        CHECK(s > 0);
        CHECK_CLOSE(sq[i], s, 1e-5, 1e-4);
    }
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, sq, 0, 1));
    for (size_t i = 0; i < B; i++) CHECK_CLOSE(sq[i], 2 * n2[i], 2e-5, 1e-4);
    /* per-layer squared norms sum to the model's */
    size_t G = dpt_model_n_param_layers(m);
    float *lsq = malloc(G * B * sizeof *lsq);
    CHECK_OK(dpt_model_layer_sqnorms(m, B, lsq));
    for (size_t i = 0; i < B; i++) {
        double s = 0;
        for (size_t k = 0; k < G; k++) s += lsq[k * B + i];
        CHECK_CLOSE(s, n2[i], 1e-5, 1e-4);
    }
    /* WEIGHTED with the clipping factors c_i = min(1, C / ||g_i||), C below and above 1:
     * the clipped sum, and each clipped row has norm exactly min(||g_i||, C) */
    const double Cs[3] = {0.5 * sqrt(n2[0]), 0.9, 1.5};
    for (int ci = 0; ci < 3; ci++) {
        float *c = malloc(B * sizeof *c), *gw = malloc(P * sizeof *gw);
        for (size_t i = 0; i < B; i++) c[i] = (float)fmin(1.0, Cs[ci] / sqrt(n2[i]));
        if (ci == 0) CHECK(c[0] < 1.0f);
        CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_WEIGHTED, c, gw, 0, 0));
        for (size_t p = 0; p < P; p++) {
            double s = 0;
            for (size_t i = 0; i < B; i++) s += (double)c[i] * pe[i * ld + p];
            CHECK_CLOSE(gw[p], s, 1e-5, 1e-4);
        }
        for (size_t i = 0; i < B; i++) {
            double s = 0;
            for (size_t p = 0; p < P; p++) s += ((double)c[i] * pe[i * ld + p]) * ((double)c[i] * pe[i * ld + p]);
            CHECK_CLOSE(sqrt(s), fmin(sqrt(n2[i]), Cs[ci]), 1e-6, 1e-5);
        }
        free(c);
        free(gw);
    }
    /* DOT against the rows */
    float *v = malloc(P * sizeof *v), *dot = malloc(B * sizeof *dot);
    fill_gauss(v, P, 1.0, seed + 3);
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_DOT, v, dot, 0, 0));
    for (size_t i = 0; i < B; i++) {
        double s = 0, a = 0;
        for (size_t p = 0; p < P; p++) s += (double)v[p] * pe[i * ld + p], a += fabs((double)v[p] * pe[i * ld + p]);
        CHECK_CLOSE(dot[i], s, 1e-5 * a, 1e-4);
    }
    /* backward_input of every layer after the first: dact[1] against differences in act[1] */
    if (m->n_layers > 1) {
        const size_t D1 = m->layers[0].out_dim;
        double *a1 = to_double(m->act[1], B * D1);
        for (size_t j = 0; j < B * D1; j++) {
            const double t0 = a1[j];
            a1[j] = t0 + h;
            double fp = ref_f(m, th, a1, 1, B, dout, 0);
            a1[j] = t0 - h;
            double fm = ref_f(m, th, a1, 1, B, dout, 0);
            a1[j] = t0;
            CHECK_CLOSE(m->dact[1][j], (fp - fm) / (2 * h), 2e-4, 2e-3);
        }
        free(a1);
    }
    /* the embedding's input cotangent is zero (ids are discrete) */
    if (m->layers[0].kind == DPT_LAYER_EMBEDDING) {
        const dpt_layer *L0 = &m->layers[0];
        float *dx = malloc(B * D * sizeof *dx);
        for (size_t j = 0; j < B * D; j++) dx[j] = 1.0f;
        CHECK_OK(L0->ops->backward_input(L0, m->act[0], m->act[1], m->dact[1], dx, B));
        for (size_t j = 0; j < B * D; j++) CHECK(dx[j] == 0.0f);
        free(dx);
    }
    /* jvp in a parameter direction (and an input direction for float inputs) */
    {
        float *dth = malloc(P * sizeof *dth), *dxx = malloc(B * D * sizeof *dxx), *jv = malloc(B * K * sizeof *jv);
        fill_gauss(dth, P, 1.0, seed + 4);
        fill_gauss(dxx, B * D, 1.0, seed + 5);
        CHECK_OK(dpt_model_forward(m, x, B));
        CHECK_OK(dpt_model_jvp(m, dth, V ? NULL : dxx, B, jv));
        double *tp = malloc(P * sizeof *tp), *tm = malloc(P * sizeof *tm), *xp = to_double(x, B * D),
               *xm = to_double(x, B * D), *op = malloc(B * K * sizeof *op), *om = malloc(B * K * sizeof *om);
        for (size_t p = 0; p < P; p++) tp[p] = th[p] + h * dth[p], tm[p] = th[p] - h * dth[p];
        if (!V)
            for (size_t j = 0; j < B * D; j++) xp[j] += h * dxx[j], xm[j] -= h * dxx[j];
        ref_model(m, tp, xp, 0, B, op);
        ref_model(m, tm, xm, 0, B, om);
        for (size_t j = 0; j < B * K; j++) CHECK_CLOSE(jv[j], (op[j] - om[j]) / (2 * h), 3e-4, 2e-3);
        if (V) { /* an input tangent on token ids changes nothing */
            float *jv2 = malloc(B * K * sizeof *jv2);
            CHECK_OK(dpt_model_jvp(m, dth, dxx, B, jv2));
            CHECK(memcmp(jv, jv2, B * K * sizeof *jv) == 0);
            free(jv2);
        }
        free(dth), free(dxx), free(jv), free(tp), free(tm), free(xp), free(xm), free(op), free(om);
    }
    free(x), free(dout), free(th), free(xd), free(o), free(fd), free(g), free(pe), free(sq), free(n2), free(lsq);
    free(v), free(dot);
    dpt_model_free(m);
}

/* ==== position-wise Linear: both SQNORM paths ==== */

/* naive g_i = (sum_t dv_t x_t^T, sum_t dv_t) of a position-wise Linear, in double */
static void naive_plin_norms(const dpt_layer *L, const float *x, const float *dv, size_t B, double *n2) {
    const size_t T = L->in_shape[1], D = L->in_shape[2], K = L->out_shape[2];
    for (size_t i = 0; i < B; i++) {
        double s = 0;
        for (size_t k = 0; k < K; k++) {
            for (size_t d = 0; d < D; d++) {
                double gkd = 0;
                for (size_t t = 0; t < T; t++) gkd += (double)dv[(i * T + t) * K + k] * x[(i * T + t) * D + d];
                s += gkd * gkd;
            }
            double gb = 0;
            for (size_t t = 0; t < T; t++) gb += dv[(i * T + t) * K + k];
            if (L->has_bias) s += gb * gb;
        }
        n2[i] = s;
    }
}

static void check_plin_paths(const char *spec, size_t B, int want_ghost) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 1, &m));
    if (!m) return;
    dpt_layer *L = &m->layers[0];
    CHECK(L->kind == DPT_LAYER_SEQLINEAR);
    CHECK(L->ghost == want_ghost); /* ghost iff T (D + K) < D K */
    init_params(m, 11);
    float *x = malloc(B * L->in_dim * sizeof *x), *dv = malloc(B * L->out_dim * sizeof *dv);
    fill_gauss(x, B * L->in_dim, 1.0, 12);
    fill_gauss(dv, B * L->out_dim, 1.0, 13);
    double *n2 = malloc(B * sizeof *n2);
    naive_plin_norms(L, x, dv, B, n2);
    float *sq[2];
    for (int path = 0; path < 2; path++) {
        L->ghost = path;
        sq[path] = malloc(B * sizeof(float));
        CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_SQNORM, NULL, sq[path], 0, 0));
        for (size_t i = 0; i < B; i++) CHECK_CLOSE(sq[path][i], n2[i], 1e-5, 1e-4);
    }
    for (size_t i = 0; i < B; i++) CHECK_CLOSE(sq[0][i], sq[1][i], 1e-5, 1e-4);
    free(sq[0]), free(sq[1]), free(x), free(dv), free(n2);
    dpt_model_free(m);
}

/* ==== embedding: the norm from token co-occurrence ==== */

/* Li et al. 2022: ||g_i||^2 = sum_{t, t' : id_t = id_t'} <dv_t, dv_t'> (+ ||dV||^2 with positions) */
static double pair_norm(const float *ids, const float *dv, size_t T, size_t D, int pos) {
    double s = 0;
    for (size_t t = 0; t < T; t++)
        for (size_t u = 0; u < T; u++) {
            if (ids[t] != ids[u]) continue;
            for (size_t d = 0; d < D; d++) s += (double)dv[t * D + d] * dv[u * D + d];
        }
    if (pos)
        for (size_t j = 0; j < T * D; j++) s += (double)dv[j] * dv[j];
    return s;
}

static void check_embedding_norms(const char *spec, size_t B, size_t V) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 1, &m));
    if (!m) return;
    const dpt_layer *L = &m->layers[0];
    const size_t T = L->in_shape[1], D = L->out_shape[2], P = L->n_params;
    init_params(m, 21);
    float *x = malloc(B * T * sizeof *x), *dv = malloc(B * T * D * sizeof *dv), *sq = malloc(B * sizeof *sq);
    float *pe = malloc(B * P * sizeof *pe);
    fill_tokens(x, B * T, V, 22);
    x[1] = x[0]; /* at least one repeat: the cross terms of the pair sum are exercised */
    fill_gauss(dv, B * T * D, 1.0, 23);
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
    CHECK_OK(L->ops->backward_params(L, x, dv, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, P, 0));
    for (size_t i = 0; i < B; i++) {
        double s = 0;
        for (size_t p = 0; p < P; p++) s += (double)pe[i * P + p] * pe[i * P + p];
        const double pn = pair_norm(x + i * T, dv + i * T * D, T, D, L->has_bias);
        CHECK_CLOSE(sq[i], pn, 1e-5, 1e-5);
        CHECK_CLOSE(s, pn, 1e-5, 1e-5);
    }
    /* the pair sum differs from the sum of per-position norms when a token repeats: the
     * test above would pass a norm that ignores co-occurrence only without repeats */
    double sep = 0;
    for (size_t j = 0; j < T * D; j++) sep += (double)dv[j] * dv[j] * (L->has_bias ? 2 : 1);
    CHECK(fabs(sep - pair_norm(x, dv, T, D, L->has_bias)) > 1e-3);
    free(x), free(dv), free(sq), free(pe);
    dpt_model_free(m);
}

/* ==== causal attention: position t does not see positions after it ==== */

static void check_causal(void) {
    for (int causal = 0; causal < 2; causal++) {
        dpt_model *m = NULL;
        CHECK_OK(dpt_model_new(causal ? "seq:6x4:identity,plin12,attn2c,plin4" : "seq:6x4:identity,plin12,attn2,plin4",
                               1, 1, &m));
        if (!m) return;
        init_params(m, 41);
        float x[24], o[24];
        fill_gauss(x, 24, 1.0, 42);
        CHECK_OK(dpt_model_forward(m, x, 1));
        memcpy(o, dpt_model_output(m), sizeof o);
        x[4 * 4 + 1] += 1.0f; /* change position 4 */
        CHECK_OK(dpt_model_forward(m, x, 1));
        /* causal: positions 0..3 bit-identical, 4 changed; bidirectional: position 0 changed */
        CHECK((memcmp(o, dpt_model_output(m), 16 * sizeof(float)) == 0) == causal);
        CHECK(memcmp(o + 16, dpt_model_output(m) + 16, 4 * sizeof(float)) != 0);
        dpt_model_free(m);
    }
}

/* ==== attention: the GEMM kernels against the row-by-row reference ====
 * forward and backward_input of the attention layer in spec (its layer index l) on the
 * activations a forward of B examples left in act[l], against dpt_attention_*_ref (dot
 * products in double, one row of P at a time), at sizes beyond the double reference's
 * (T up to 70, gpt_tiny's head width 16), causal and bidirectional, with padded keys. */
static void check_attention_kernels(const char *spec, size_t B, size_t V, size_t l, uint64_t seed) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 1, &m));
    if (!m) return;
    init_params(m, seed);
    float *x = malloc(B * m->in_dim * sizeof *x);
    if (V) fill_tokens(x, B * m->in_dim, V, seed + 1);
    else fill_gauss(x, B * m->in_dim, 1.0, seed + 1);
    size_t pad_id;
    if (V && dpt_model_pad_id(m, &pad_id)) pad_tokens(x, B, m->in_dim, V, pad_id);
    CHECK_OK(dpt_model_forward(m, x, B));
    const dpt_layer *L = &m->layers[l];
    CHECK(L->kind == DPT_LAYER_ATTENTION);
    const size_t n_in = B * L->in_dim, n_out = B * L->out_dim;
    float *v = malloc(n_out * sizeof *v), *vr = malloc(n_out * sizeof *vr), *dv = malloc(n_out * sizeof *dv);
    float *dx = malloc(n_in * sizeof *dx), *dxr = malloc(n_in * sizeof *dxr);
    fill_gauss(dv, n_out, 1.0, seed + 2);
    CHECK_OK(L->ops->forward(L, m->act[l], v, B));
    CHECK_OK(dpt_attention_forward_ref(L, m->act[l], vr, B));
    double vmax = 0;
    for (size_t j = 0; j < n_out; j++) {
        CHECK_CLOSE(v[j], vr[j], 1e-5, 1e-4);
        vmax = fmax(vmax, fabs(vr[j]));
    }
    CHECK(vmax > 0.1); /* not a trivially zero output */
    CHECK_OK(L->ops->backward_input(L, m->act[l], v, dv, dx, B));
    CHECK_OK(dpt_attention_backward_input_ref(L, m->act[l], vr, dv, dxr, B));
    double gmax = 0;
    for (size_t j = 0; j < n_in; j++) {
        CHECK_CLOSE(dx[j], dxr[j], 2e-5, 2e-4);
        gmax = fmax(gmax, fabs(dxr[j]));
    }
    CHECK(gmax > 0.01);
    free(x), free(v), free(vr), free(dv), free(dx), free(dxr);
    dpt_model_free(m);
}

static void check_attention_kernels_all(void) {
    check_attention_kernels("seq:70x24:identity,plin72,attn3,plin24", 3, 0, 2, 91);
    check_attention_kernels("seq:70x24:identity,plin72,attn3c,plin24", 3, 0, 2, 92);
    check_attention_kernels("seq:64:emb50x64,ln,plin192,attn4c,plin64", 2, 50, 3, 93);     /* gpt_tiny's heads */
    check_attention_kernels("seq:33:emb9x32pad3,ln,plin96,attn2,plin32", 4, 9, 3, 94);     /* padded keys */
    check_attention_kernels("seq:33:emb9x32pad0,ln,plin96,attn2c,plin32", 4, 9, 3, 95);    /* padded, causal */
    check_attention_kernels("seq:5x6:identity,plin6,attn2,plin6", 2, 0, 2, 96);            /* dh 1 */
}

/* ==== independence, init, errors ==== */

/* changing example 1 leaves example 0's output and its per-example norm bit-identical */
static void check_independent(const char *spec, size_t V) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, 2, 1, &m));
    if (!m) return;
    init_params(m, 31);
    const size_t D = m->in_dim, K = m->out_dim;
    float *x = malloc(2 * D * sizeof *x), *o = malloc(K * sizeof *o), *dout = malloc(2 * K * sizeof *dout), sq[2], sq0;
    fill_tokens(x, 2 * D, V, 32);
    fill_gauss(dout, 2 * K, 1.0, 33);
    CHECK_OK(dpt_model_forward(m, x, 2));
    memcpy(o, dpt_model_output(m), K * sizeof *o);
    CHECK_OK(dpt_model_backward(m, dout, 2));
    CHECK_OK(dpt_model_param_grad(m, 2, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
    sq0 = sq[0];
    for (size_t j = D; j < 2 * D; j++) x[j] = (float)(((size_t)x[j] + 1) % V);
    CHECK_OK(dpt_model_forward(m, x, 2));
    CHECK(memcmp(o, dpt_model_output(m), K * sizeof *o) == 0);
    CHECK_OK(dpt_model_backward(m, dout, 2));
    CHECK_OK(dpt_model_param_grad(m, 2, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
    CHECK(sq[0] == sq0);
    free(x), free(o), free(dout);
    dpt_model_free(m);
}

static void check_init(void) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("seq:16:emb300x8,ln,rms,plin4,meanpool,fc2", 4, 1, &m));
    if (!m) return;
    dpt_rng r;
    dpt_rng_init(&r, 5, DPT_STREAM_INIT);
    CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &r));
    dpt_rng_free(&r);
    CHECK(dpt_model_n_linear(m) == 2); /* plin1, fc1 */
    dpt_param_tensor t;
    const float *e = dpt_model_tensor_by_name(m, "emb1.weight", &t);
    CHECK(e && t.size == 2400 && t.role == DPT_TENSOR_EMBEDDING);
    double s = 0, s2 = 0;
    for (size_t j = 0; e && j < t.size; j++) s += e[j], s2 += (double)e[j] * e[j];
    CHECK_CLOSE(s / 2400, 0.0, 0.07, 0); /* N(0, 1): sd of the mean 0.02 */
    CHECK_CLOSE(s2 / 2400, 1.0, 0.1, 0); /* sd of the variance 0.03 */
    CHECK(dpt_model_tensor_by_name(m, "emb1.position", &t) && t.shape[0] == 16 && t.shape[1] == 8);
    const float *g = dpt_model_tensor_by_name(m, "ln1.weight", NULL), *b = dpt_model_tensor_by_name(m, "ln1.bias", NULL);
    const float *rg = dpt_model_tensor_by_name(m, "rms1.weight", NULL);
    for (size_t d = 0; g && b && rg && d < 8; d++) CHECK(g[d] == 1.0f && b[d] == 0.0f && rg[d] == 1.0f);
    CHECK(dpt_model_tensor_by_name(m, "rms1.bias", NULL) == NULL);
    CHECK(dpt_model_tensor_by_name(m, "plin1.weight", &t) && t.shape[0] == 4 && t.shape[1] == 8);
    dpt_model_free(m);
}

/* ==== per-token language-model loss ==== */

/* (1/T) sum_t (logsumexp(o_t) - o_t,y_t) of one example, in double */
static double ref_token_loss(const double *o, const float *y, size_t T, size_t V) {
    double s = 0;
    for (size_t t = 0; t < T; t++) {
        double m = -INFINITY, z = 0;
        for (size_t v = 0; v < V; v++) m = fmax(m, o[t * V + v]);
        for (size_t v = 0; v < V; v++) z += exp(o[t * V + v] - m);
        s += m + log(z) - o[t * V + (size_t)y[t]];
    }
    return s / (double)T;
}

static void check_token_loss(size_t B, size_t T, size_t V, double scale, uint64_t seed) {
    const size_t K = T * V;
    float *o = malloc(B * K * sizeof *o), *y = malloc(B * T * sizeof *y), *l = malloc(B * sizeof *l);
    float *d = malloc(B * K * sizeof *d), *l2 = malloc(B * sizeof *l2);
    fill_gauss(o, B * K, scale, seed);
    fill_tokens(y, B * T, V, seed + 1);
    CHECK_OK(dpt_loss_tokens(o, B, T, V, y, l, d));
    CHECK_OK(dpt_loss_tokens(o, B, T, V, y, l2, NULL)); /* the loss alone is the same */
    CHECK(memcmp(l, l2, B * sizeof *l) == 0);
    const double h = 1e-5;
    for (size_t i = 0; i < B; i++) {
        double *od = to_double(o + i * K, K);
        CHECK_CLOSE(l[i], ref_token_loss(od, y + i * T, T, V), 1e-6, 1e-6);
        for (size_t j = 0; j < K; j += (K > 200 ? 7 : 1)) { /* d loss_i / d o_i by central differences */
            const double t0 = od[j];
            od[j] = t0 + h;
            const double fp = ref_token_loss(od, y + i * T, T, V);
            od[j] = t0 - h;
            const double fm = ref_token_loss(od, y + i * T, T, V);
            od[j] = t0;
            CHECK_CLOSE(d[i * K + j], (fp - fm) / (2 * h), 1e-7, 1e-5);
        }
        free(od);
    }
    free(o), free(y), free(l), free(d), free(l2);
}

static void check_token_loss_all(void) {
    check_token_loss(3, 5, 7, 1.0, 71);
    check_token_loss(2, 300, 3, 3.0, 72); /* more positions than a block of rows */
    check_token_loss(2, 4, 1, 1.0, 73);   /* V = 1: loss 0 */
    dpt_loss_kind k;
    CHECK_OK(dpt_loss_parse("token-ce", &k));
    CHECK(k == DPT_LOSS_TOKEN_CE);
    float o[12] = {0}, y[4] = {0, 1, 2, 0}, l[2];
    CHECK_STATUS(dpt_loss(DPT_LOSS_TOKEN_CE, o, 2, 6, NULL, y, l, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_loss_tokens");
    const float bad[4][4] = {{0, 1, 2, 3}, {0, 1, 2.5f, 0}, {0, -1, 2, 0}, {0, 1, 2, NAN}};
    const char *msg[4] = {"target 3 of example 1, position 1", "target 2.5 of example 1, position 0",
                          "target -1 of example 0, position 1", "of example 1, position 1"};
    for (int c = 0; c < 4; c++) {
        CHECK_STATUS(dpt_loss_tokens(o, 2, 2, 3, bad[c], l, NULL), DPT_EINVAL);
        CHECK_ERR_HAS(msg[c]);
        CHECK_ERR_HAS("not a token id in [0, 3)");
    }
    CHECK_STATUS(dpt_loss_tokens(o, 2, 0, 3, y, l, NULL), DPT_EINVAL);
    CHECK_STATUS(dpt_loss_tokens(o, 2, 2, 3, NULL, l, NULL), DPT_EINVAL);
}

/* ==== named transformers ==== */

/* Per-example gradients of a named model against a loop of single-example passes (each
 * example's own forward, backward and SUM gradient at batch size 1), and SQNORM against
 * the rows' norms; the expansion has the documented parameter count. */
static void check_named(const char *name, const char *expanded, size_t want_P, size_t V, uint64_t seed) {
    dpt_model *m = NULL, *e = NULL, *one = NULL;
    const size_t B = 2;
    CHECK_OK(dpt_model_new(name, B, 1, &m));
    CHECK_OK(dpt_model_new(expanded, B, 1, &e));
    CHECK_OK(dpt_model_new(name, 1, 1, &one));
    if (!m || !e || !one) goto done;
    CHECK(strcmp(dpt_model_spec(m), name) == 0); /* a checkpoint keeps the name */
    CHECK(m->n_params == want_P);
    CHECK(e->n_params == want_P && e->n_layers == m->n_layers && e->out_dim == m->out_dim);
    for (size_t l = 0; l < m->n_layers && l < e->n_layers; l++) {
        CHECK(m->layers[l].kind == e->layers[l].kind && m->layers[l].n_params == e->layers[l].n_params);
        CHECK(!strcmp(m->layers[l].name, e->layers[l].name) && m->layers[l].residual_from == e->layers[l].residual_from);
        CHECK(memcmp(m->layers[l].out_shape, e->layers[l].out_shape, sizeof m->layers[l].out_shape) == 0);
        CHECK(m->layers[l].k == e->layers[l].k && m->layers[l].groups == e->layers[l].groups);
    }
    const size_t P = m->n_params, D = m->in_dim, K = m->out_dim;
    init_params(m, seed);
    memcpy(one->theta, m->theta, P * sizeof *m->theta);
    float *x = malloc(B * D * sizeof *x), *dout = malloc(B * K * sizeof *dout), *pe = malloc(B * P * sizeof *pe);
    float *g1 = malloc(P * sizeof *g1), sq[2];
    if (V) fill_tokens(x, B * D, V, seed + 1);
    else fill_gauss(x, B * D, 1.0, seed + 1);
    fill_gauss(dout, B * K, 1.0, seed + 2);
    CHECK_OK(dpt_model_forward(m, x, B));
    CHECK_OK(dpt_model_backward(m, dout, B));
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_PER_EXAMPLE, NULL, pe, P, 0));
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
    for (size_t i = 0; i < B; i++) {
        CHECK_OK(dpt_model_forward(one, x + i * D, 1));
        for (size_t j = 0; j < K; j++) CHECK_CLOSE(dpt_model_output(one)[j], dpt_model_output(m)[i * K + j], 1e-5, 1e-5);
        CHECK_OK(dpt_model_backward(one, dout + i * K, 1));
        CHECK_OK(dpt_model_param_grad(one, 1, DPT_GRAD_SUM, NULL, g1, 0, 0));
        double n2 = 0, a = 0;
        for (size_t p = 0; p < P; p++) n2 += (double)g1[p] * g1[p], a = fmax(a, fabs(g1[p]));
        for (size_t p = 0; p < P; p++) CHECK_CLOSE(pe[i * P + p], g1[p], 1e-5 * a, 1e-4);
        CHECK(n2 > 0);
        CHECK_CLOSE(sq[i], n2, 0, 1e-4);
    }
    free(x), free(dout), free(pe), free(g1);
done:
    dpt_model_free(m), dpt_model_free(e), dpt_model_free(one);
}

static void check_named_all(void) {
#define BLK(c) "[ln,plin192,attn4" c ",plin64],[ln,plin256,gelu,plin64]"
    /* counts: emb V 64 + T 64; block 2 (64 + 64) + (64 192 + 192) + (64 64 + 64) + (64 256 + 256)
     * + (256 64 + 64) = 49984; ln 128; head */
    check_named("gpt_tiny", "seq:64:emb256x64," BLK("c") "," BLK("c") ",ln,plin256", 20480 + 2 * 49984 + 128 + 16640,
                256, 51);
    check_named("gpt_tiny:v40:t16", "seq:16:emb40x64," BLK("c") "," BLK("c") ",ln,plin40",
                40 * 64 + 16 * 64 + 2 * 49984 + 128 + 64 * 40 + 40, 40, 52);
    check_named("bert_tiny", "seq:64:emb256x64," BLK("") "," BLK("") ",ln,meanpool,fc2", 20480 + 2 * 49984 + 128 + 130,
                256, 53);
    check_named("bert_tiny:c5:t8:v30", "seq:8:emb30x64," BLK("") "," BLK("") ",ln,meanpool,fc5",
                30 * 64 + 8 * 64 + 2 * 49984 + 128 + 325, 30, 54);
    /* conv 4x4/4 to 64 channels: 64 16 C + 64; toseqcls: 64 + (N + 1) 64 */
    check_named("vit_mnist", "cnn:1x28x28:conv64k4s4,toseqcls," BLK("") "," BLK("") ",ln,clspool,fc10",
                1088 + 64 + 50 * 64 + 2 * 49984 + 128 + 650, 0, 55);
    check_named("vit_cifar:c3", "cnn:3x32x32:conv64k4s4,toseqcls," BLK("") "," BLK("") ",ln,clspool,fc3",
                3136 + 64 + 65 * 64 + 2 * 49984 + 128 + 195, 0, 56);
#undef BLK
    /* the documented defaults */
    dpt_model *m = NULL;
    const struct {
        const char *name;
        size_t P;
    } docs[] = {{"gpt_tiny", 137216}, {"bert_tiny", 120706}, {"vit_mnist", 105098}, {"vit_cifar", 108106}};
    for (size_t k = 0; k < 4; k++) {
        m = NULL;
        CHECK_OK(dpt_model_new(docs[k].name, 1, 1, &m));
        CHECK(m && m->n_params == docs[k].P);
        dpt_model_free(m);
    }
    const struct {
        const char *spec, *needle;
    } bad[] = {
        {"gpt_tiny:c3", "'c3' is not an option of gpt_tiny"},
        {"gpt_tiny:t0", "'t0' is not an option of gpt_tiny"},
        {"bert_tiny:t8:t9", "'t9' is not an option of bert_tiny"},
        {"vit_mnist:t8", "'t8' is not an option of vit_mnist (it takes c<classes>"},
        {"gpt_tiny:", "'' is not an option"},
        {"gpt_tinyx", "unknown model kind 'gpt_tinyx'"},
        {"bert_tiny:c", "'c' is not an option"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        m = NULL;
        CHECK_STATUS(dpt_model_new(bad[k].spec, 1, 1, &m), DPT_EINVAL);
        CHECK_ERR_HAS(bad[k].needle);
        CHECK(m == NULL);
    }
}

/* toseq: the tensors and the layout (a pure transpose without cls and positions) */
static void check_toseq_layout(void) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("cnn:3x2x2:toseqcls", 1, 1, &m));
    if (m) {
        dpt_param_tensor t;
        CHECK(dpt_model_tensor_by_name(m, "toseq1.cls", &t) && t.ndim == 1 && t.shape[0] == 3 && t.offset == 0);
        CHECK(dpt_model_tensor_by_name(m, "toseq1.position", &t) && t.shape[0] == 5 && t.shape[1] == 3 &&
              t.offset == 3 && t.role == DPT_TENSOR_EMBEDDING);
        CHECK(m->out_dim == 15 && m->layers[0].out_shape[1] == 5 && m->layers[0].out_shape[2] == 3);
        dpt_model_free(m);
    }
    m = NULL;
    CHECK_OK(dpt_model_new("cnn:3x2x2:toseqnopos", 1, 1, &m));
    if (m) {
        CHECK(m->n_params == 0);
        float x[12], want[12];
        for (int j = 0; j < 12; j++) x[j] = (float)j;
        for (int n = 0; n < 4; n++) /* v[n, c] = x[c, n] */
            for (int c = 0; c < 3; c++) want[n * 3 + c] = x[c * 4 + n];
        CHECK_OK(dpt_model_forward(m, x, 1));
        CHECK(memcmp(dpt_model_output(m), want, sizeof want) == 0);
        dpt_model_free(m);
    }
    m = NULL;
    CHECK_STATUS(dpt_model_new("cnn:3x2x2:toseqpos", 1, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("'toseqpos' is not a layer");
    CHECK_STATUS(dpt_model_new("cnn:3x2x2:toseqnoposcls", 1, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("toseq[cls][nopos]");
}

static void check_errors(void) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("seq:4:emb10x3,meanpool,fc2", 2, 1, &m));
    if (m) {
        const float bad[4][8] = {{0, 1, 2, 3, 0, 1, 2, 10}, {0, 1, 2, 3, 0, 1, 2.5f, 3}, {0, 1, 2, 3, -1, 1, 2, 3},
                                 {0, 1, 2, 3, 0, NAN, 2, 3}};
        const char *msg[4] = {"token id 10 at example 1, position 3", "token id 2.5 at example 1, position 2",
                              "token id -1 at example 1, position 0", "at example 1, position 1"};
        for (int k = 0; k < 4; k++) {
            CHECK_STATUS(dpt_model_forward(m, bad[k], 2), DPT_EINVAL);
            CHECK_ERR_HAS(msg[k]);
            CHECK_ERR_HAS("emb1");
        }
        const float ok[8] = {0, 1, 2, 3, 9, 9, 9, 9};
        CHECK_OK(dpt_model_forward(m, ok, 2));
        dpt_model_free(m);
    }
    const struct {
        const char *spec, *needle;
    } cases[] = {
        {"seq:0:emb10x3", "is not an input shape"},
        {"seq:8x:ln", "is not an input shape"},
        {"seq:8x4x2:ln", "is not an input shape"},
        {"seq:8:emb10", "'emb10' is not a layer"},
        {"seq:8:emb10x3pos", "'emb10x3pos' is not a layer"},
        {"seq:8:plin", "'plin' is not a layer"},
        {"seq:8:lnorm", "'lnorm' is not a layer"},
        {"seq:8x4:emb10x3", "token ids of shape (1, T, 1)"},
        {"cnn:3x4x4:ln", "layernorm: the input must be a sequence"},
        {"cnn:3x4x4:rms", "rmsnorm: the input must be a sequence"},
        {"cnn:3x4x4:plin3", "plinear: the input must be a sequence"},
        {"cnn:3x4x4:meanpool", "meanpool: the input must be a sequence"},
        {"seq:8:emb10x4,[ln,plin3]", "residual"},
        {"seq:8x24:attn3", "are not queries, keys and values of 3 heads"},
        {"seq:8x8:attn1", "are not queries, keys and values of 1 heads"},
        {"cnn:3x4x6:attn1", "attention: the input must be a sequence"},
        {"seq:8x6:attn", "'attn' is not a layer"},
        {"seq:8x6:attn1x", "'attn1x' is not a layer"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        m = NULL;
        CHECK_STATUS(dpt_model_new(cases[k].spec, 2, 1, &m), DPT_EINVAL);
        CHECK_ERR_HAS(cases[k].needle);
        CHECK(m == NULL);
    }
}

/* ==== padding masks ==== */

/* One padding model's outputs, per-token losses (token-ce over the next ids when the output
 * is V logits per position, else <dout, o>), per-example gradient rows, norms and a jvp. */
typedef struct {
    float *o, *loss, *pe, *sq, *jv;
} pad_run;

static void pad_forward(dpt_model *m, const float *x, size_t B, size_t V, const float *dth, pad_run *r) {
    const size_t P = m->n_params, K = m->out_dim, T = m->pad_T;
    float *dout = malloc(B * K * sizeof *dout);
    r->o = malloc(B * K * sizeof *r->o), r->loss = malloc(B * sizeof *r->loss);
    r->pe = malloc(B * P * sizeof *r->pe), r->sq = malloc(B * sizeof *r->sq), r->jv = malloc(B * K * sizeof *r->jv);
    CHECK_OK(dpt_model_forward(m, x, B));
    memcpy(r->o, dpt_model_output(m), B * K * sizeof *r->o);
    size_t pad = 0;
    CHECK(dpt_model_pad_id(m, &pad));
    if (K == T * V) { /* a language model: targets = the next ids, the pad id after the last */
        float *y = malloc(B * T * sizeof *y);
        for (size_t i = 0; i < B; i++)
            for (size_t t = 0; t < T; t++) y[i * T + t] = t + 1 < T ? x[i * T + t + 1] : (float)pad;
        CHECK_OK(dpt_loss_tokens_pad(r->o, B, T, V, y, (long long)pad, r->loss, dout));
        free(y);
    } else {
        CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, r->o, B, K, (const int32_t[]){0, 1, 2, 1, 0, 2}, NULL, r->loss, dout));
    }
    CHECK_OK(dpt_model_backward(m, dout, B));
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_PER_EXAMPLE, NULL, r->pe, P, 0));
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, r->sq, 0, 0));
    CHECK_OK(dpt_model_jvp(m, dth, NULL, B, r->jv));
    free(dout);
}

static void pad_free(pad_run *r) { free(r->o), free(r->loss), free(r->pe), free(r->sq), free(r->jv); }

/* Invariance: what sits at the padded positions (the pad token's embedding row, and the
 * position rows that only padded positions use) changes no output, loss, per-example
 * gradient, norm or jvp; only those rows' own gradients, which are 0. Then sensitivity:
 * an example padded to T = 8 has the outputs, loss and per-example gradient norm of the
 * same tokens in the model with T = 5 (no padding) on the same weights. */
static void check_pad_invariance(const char *spec8, const char *spec5, size_t V) {
    const size_t B = 4, T = 8, T5 = 5, pad = 0;
    dpt_model *m = NULL, *m5 = NULL;
    CHECK_OK(dpt_model_new(spec8, B, 1, &m));
    CHECK_OK(dpt_model_new(spec5, B, 1, &m5));
    if (!m || !m5) goto done;
    init_params(m, 91);
    const size_t P = m->n_params, K = m->out_dim, D = m->layers[0].out_shape[2];
    /* lengths 5, 3, 5, 1: positions 5..7 are padded in every example */
    const size_t len[4] = {5, 3, 5, 1};
    float x[4 * 8], x5[4 * 5];
    fill_tokens(x, B * T, V - 1, 92);
    for (size_t i = 0; i < B; i++)
        for (size_t t = 0; t < T; t++) {
            x[i * T + t] = t < len[i] ? x[i * T + t] + 1.0f : (float)pad; /* real tokens are 1..V-1 */
            if (t < T5) x5[i * T5 + t] = x[i * T + t];
        }
    float *dth = malloc(P * sizeof *dth);
    fill_gauss(dth, P, 1.0, 93);
    pad_run a, b;
    pad_forward(m, x, B, V, dth, &a);
    /* the padded content: E[pad] and Pos[5..7] */
    float *E = dpt_model_tensor_by_name(m, "emb1.weight", NULL), *Pos = dpt_model_tensor_by_name(m, "emb1.position", NULL);
    unsigned char *inpad = calloc(P, 1);
    if (!E || !Pos) goto done;
    for (size_t d = 0; d < D; d++) E[pad * D + d] += 5.0f * (float)(d + 1), inpad[(size_t)(E - m->theta) + pad * D + d] = 1;
    for (size_t j = T5 * D; j < T * D; j++) Pos[j] = -3.0f * Pos[j] + 1.0f, inpad[(size_t)(Pos - m->theta) + j] = 1;
    pad_forward(m, x, B, V, dth, &b);
    for (size_t j = 0; j < B * K; j++) CHECK(a.o[j] == b.o[j] && a.jv[j] == b.jv[j]);
    for (size_t i = 0; i < B; i++) { /* a language model's 1-token example has no target but the pad: 0 */
        CHECK(a.loss[i] == b.loss[i] && a.sq[i] == b.sq[i]);
        CHECK((a.sq[i] > 0) == (K != T * V || len[i] > 1));
    }
    for (size_t j = 0; j < B * P; j++) {
        CHECK(a.pe[j] == b.pe[j]);
        if (inpad[j % P]) CHECK(a.pe[j] == 0.0f);
    }
    /* sensitivity: the same tokens in the unpadded T = 5 model (its position rows are 0..4) */
    size_t q = 0;
    for (size_t l = 0; l < m->n_layers; l++) { /* theta minus Pos[5..7] */
        const dpt_layer *L = &m->layers[l];
        for (size_t p = 0; p < L->n_params; p++)
            if (!inpad[L->param_offset + p] || (m->theta + L->param_offset + p) < Pos) m5->theta[q++] = m->theta[L->param_offset + p];
    }
    CHECK(q == m5->n_params);
    float *dth5 = calloc(m5->n_params, sizeof *dth5);
    pad_run c;
    pad_forward(m5, x5, B, V, dth5, &c);
    const size_t K5 = m5->out_dim, kv = K / T;
    for (size_t i = 0; i < B; i++) {
        CHECK_CLOSE(c.loss[i], a.loss[i], 1e-6, 1e-5);
        CHECK_CLOSE(c.sq[i], a.sq[i], 0, 1e-4);
        if (K == T * V) /* per-position logits: rows 0..4 as the short model's, the padded rows 0 */
            for (size_t t = 0; t < T; t++)
                for (size_t k = 0; k < kv; k++) {
                    if (t < T5 && t < len[i]) CHECK_CLOSE(a.o[i * K + t * kv + k], c.o[i * K5 + t * kv + k], 1e-6, 1e-5);
                    if (t >= len[i]) CHECK(a.o[i * K + t * kv + k] == 0.0f);
                }
        else
            for (size_t k = 0; k < K; k++) CHECK_CLOSE(a.o[i * K + k], c.o[i * K5 + k], 1e-6, 1e-5);
    }
    /* and without the mask the padding would count: the same spec without pad<P> differs */
    pad_free(&a), pad_free(&b), pad_free(&c);
    free(dth), free(dth5), free(inpad);
done:
    dpt_model_free(m), dpt_model_free(m5);
}

/* token-ce with a pad id: the mean over the other positions, dout 0 at the padded ones, an
 * all-padded example 0; pad_id -1 is dpt_loss_tokens bit for bit */
static void check_token_loss_pad(void) {
    const size_t B = 3, T = 5, V = 4, K = T * V, pad = 3;
    float o[3 * 20], y[15] = {0, 1, 3, 2, 3, 3, 3, 3, 3, 3, 1, 1, 1, 0, 2}, l[3], d[60], l2[3], d2[60];
    fill_gauss(o, B * K, 1.0, 95);
    CHECK_OK(dpt_loss_tokens_pad(o, B, T, V, y, (long long)pad, l, d));
    for (size_t i = 0; i < B; i++) {
        float yv[5];
        double *od = to_double(o + i * K, K), s = 0;
        size_t n = 0;
        for (size_t t = 0; t < T; t++) /* the reference over the valid positions only */
            if (y[i * T + t] != (float)pad) {
                double *row = od + t * V;
                memcpy(yv, y + i * T + t, sizeof(float));
                s += ref_token_loss(row, yv, 1, V), n++;
            }
        CHECK_CLOSE(l[i], n ? s / (double)n : 0.0, 1e-6, 1e-6);
        for (size_t t = 0; t < T; t++)
            for (size_t v = 0; v < V; v++) {
                const float g = d[i * K + t * V + v];
                if (y[i * T + t] == (float)pad) CHECK(g == 0.0f);
                else { /* (softmax - e_y) / n */
                    double m = -INFINITY, z = 0;
                    for (size_t u = 0; u < V; u++) m = fmax(m, od[t * V + u]);
                    for (size_t u = 0; u < V; u++) z += exp(od[t * V + u] - m);
                    CHECK_CLOSE(g, (exp(od[t * V + v] - m) / z - (v == (size_t)y[i * T + t])) / (double)n, 1e-7, 1e-5);
                }
            }
        free(od);
    }
    CHECK(l[1] == 0.0f); /* every target of example 1 is the pad */
    CHECK_OK(dpt_loss_tokens(o, B, T, V, y, l, d));
    CHECK_OK(dpt_loss_tokens_pad(o, B, T, V, y, -1, l2, d2));
    CHECK(memcmp(l, l2, sizeof l) == 0 && memcmp(d, d2, sizeof d) == 0);
    const float bad[5] = {0, 1, 7, 3, 3};
    CHECK_STATUS(dpt_loss_tokens_pad(o, 1, T, V, bad, (long long)pad, l, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("target 7 of example 0, position 2");
}

static void check_padding(void) {
#define PBLK(c) "[ln,plin24,attn2" c ",plin8],[ln,plin16,gelu,plin8]"
    check_pad_invariance("seq:8:emb7x8pad0," PBLK("") ",ln,meanpool,fc3", "seq:5:emb7x8pad0," PBLK("") ",ln,meanpool,fc3", 7);
    check_pad_invariance("seq:8:emb7x8pad0," PBLK("c") "," PBLK("c") ",ln,plin7",
                         "seq:5:emb7x8pad0," PBLK("c") "," PBLK("c") ",ln,plin7", 7);
#undef PBLK
    check_token_loss_pad();
    /* the spec: pad<P> round trip, named models' p<P>, refusals */
    dpt_spec_item it;
    char buf[64];
    CHECK_OK(dpt_spec_item_parse("emb258x64nopospad256", &it));
    CHECK(it.has_pad && it.pad_id == 256 && it.nopos);
    dpt_spec_item_format(&it, buf, sizeof buf);
    CHECK(strcmp(buf, "emb258x64nopospad256") == 0);
    dpt_model *m = NULL;
    size_t pad = 99;
    CHECK_OK(dpt_model_new("bert_tiny:t8:v10:p0", 1, 1, &m));
    CHECK(m && dpt_model_pad_id(m, &pad) && pad == 0 && !m->pad_out);
    dpt_model_free(m), m = NULL;
    CHECK_OK(dpt_model_new("gpt_tiny:t8:v10:p9", 1, 1, &m));
    CHECK(m && dpt_model_pad_id(m, &pad) && pad == 9 && m->pad_out);
    dpt_model_free(m), m = NULL;
    CHECK_OK(dpt_model_new("gpt_tiny:t8:v10", 1, 1, &m));
    CHECK(m && !dpt_model_pad_id(m, &pad) && !m->pad_mask);
    dpt_model_free(m), m = NULL;
    const struct {
        const char *spec, *needle;
    } bad[] = {
        {"seq:8:emb5x4pad5,meanpool", "pad id 5 is not a token of the vocabulary [0, 5)"},
        {"seq:8:emb5x4pad1,plin4,flatten,fc2", "layer 3 (flatten1) reads every position of the padded sequence"},
        {"seq:8:emb5x4pad1,fc2", "layer 2 (fc1) reads every position"},
        {"seq:8:emb5x4pad", "'emb5x4pad' is not a layer"},
        {"vit_mnist:p0", "'p0' is not an option of vit_mnist"},
        {"gpt_tiny:p", "'p' is not an option of gpt_tiny"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        m = NULL;
        CHECK_STATUS(dpt_model_new(bad[k].spec, 1, 1, &m), DPT_EINVAL);
        CHECK_ERR_HAS(bad[k].needle);
        CHECK(m == NULL);
    }
    CHECK_OK(dpt_model_new("seq:8:emb5x4pad1,plin4,clspool,fc2", 1, 1, &m)); /* after the pooling: anything */
    dpt_model_free(m);
}

int main(void) {
    /* token models: the layers in order, with repeats (V small), a residual group, nobias and nopos */
    check_model("seq:5:emb4x3,ln,plin4,gelu,meanpool,fc2", 3, 4, 1);
    check_model("seq:4:emb3x4nopos,[rms,plin5,tanh,plin4nobias],ln,clspool,fc3", 3, 3, 2);
    check_model("seq:3:emb6x2,rms,plin3,meanpool,fc2nobias", 2, 6, 3);
    /* float sequences (an input tangent and an input cotangent for every layer) */
    check_model("seq:3x4:identity,ln,plin2,gelu,plin3,clspool,fc2", 3, 0, 4);
    check_model("seq:4x3:identity,[ln,plin6,gelu,plin3],rms,meanpool", 2, 0, 5);
    /* attention between its projections, bidirectional and causal, in pre-LN blocks */
    check_model("seq:5:emb6x4,[ln,plin12,attn2,plin4],ln,meanpool,fc2", 3, 6, 6);
    check_model("seq:4:emb5x6,[ln,plin18,attn3c,plin6],[rms,plin8,gelu,plin6],ln,clspool,fc2", 2, 5, 7);
    check_model("seq:4x6:identity,[plin18nobias,attn1c],plin3,attn1,meanpool", 3, 0, 8);
    check_model("seq:3x12:identity,attn2,gelu,plin12,attn2c,flatten,fc2", 2, 0, 9);
    /* images to sequences (ViT): conv patches, toseq with and without CLS and positions */
    check_model("cnn:2x4x4:conv3k2s2,toseqcls,ln,[plin9,attn1,plin3],clspool,fc2", 3, 0, 61);
    check_model("cnn:2x3x2:toseq,[ln,plin6,attn1c,plin2],meanpool,fc2", 2, 0, 62);
    check_model("cnn:2x4x4:conv4k2s2nobias,toseqclsnopos,[rms,plin12,attn2,plin4],clspool", 2, 0, 63);
    check_model("cnn:3x2x2:identity,toseqnopos,plin2,meanpool,fc2", 2, 0, 64);
    /* a small LM: per-position logits, causal blocks (gpt_tiny's structure at width 8) */
    check_model("seq:4:emb5x8,[ln,plin24,attn2c,plin8],[ln,plin32,gelu,plin8],ln,plin5", 2, 5, 65);
    /* padding masks (emb...pad<P>): padded keys, pooling over valid positions, zero padded
     * outputs; examples with a padded half, a padded start (a causal query without keys) */
    check_model("seq:5:emb6x4pad0,[ln,plin12,attn2,plin4],ln,meanpool,fc2", 3, 6, 81);
    check_model("seq:6:emb5x6pad4,[ln,plin18,attn3c,plin6],[rms,plin8,gelu,plin6],ln,clspool,fc2", 3, 5, 82);
    check_model("seq:6:emb5x8pad2,[ln,plin24,attn2c,plin8],[ln,plin32,gelu,plin8],ln,plin5", 3, 5, 83);
    check_model("seq:5:emb4x4nopospad3,plin12,attn1,meanpool", 3, 4, 84);
    check_padding();
    check_toseq_layout();
    check_token_loss_all();
    check_named_all();
    check_causal();
    check_attention_kernels_all();
    check_plin_paths("seq:3x8:plin8", 4, 1);   /* 3 (8 + 8) = 48 < 64: Gram */
    check_plin_paths("seq:16x4:plin3", 4, 0);  /* 16 (4 + 3) = 112 > 12: materialized */
    check_plin_paths("seq:2x6:plin7nobias", 3, 1);  /* 2 (6 + 7) = 26 < 42 */
    check_plin_paths("seq:5x6:plin7nobias", 3, 0);  /* 5 (6 + 7) = 65 > 42 */
    check_embedding_norms("seq:12:emb5x4", 4, 5);
    check_embedding_norms("seq:12:emb5x4nopos", 4, 5);
    check_independent("seq:6:emb7x4,ln,plin3,rms,meanpool,fc2", 7);
    check_init();
    check_errors();
    TEST_MAIN_END();
}
