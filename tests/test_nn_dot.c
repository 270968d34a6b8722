/* nn: inner products with per-example gradients, never materialized (used by the KL
 * estimator of noisy GD), against the naive loop over materialized per-example rows:
 * - DOT mode: out[i] = <g_i, v> for Linear (with and without bias), Conv2d (materialized
 *   and ghost SQNORM paths, cached unfold and a fresh unfold), GroupNorm and a residual
 *   group, at model level; accumulate = 1 adds.
 * - dpt_model_param_grad_from on copies of act/dact equals dpt_model_param_grad (SUM,
 *   SQNORM, DOT), so kept chunks give the same numbers as the live model.
 * - dpt_model_param_cross: <g_i, h_j> between two batches (Linear's rank-one identity,
 *   the DOT fallback against materialized rows for the other layers; without rows only
 *   when every parameter layer has a cross op).
 * - Bad arguments are DPT_EINVAL. */
#include <dptrain/nn.h>

#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static void fill(dpt_rng *r, float *a, size_t n, double s) {
    for (size_t j = 0; j < n; j++) a[j] = (float)(s * dpt_rng_gauss_ref(r));
}

/* copies of act[l] and dact[l + 1] for the parameter layers (B rows) */
static void copy_rows(const dpt_model *m, size_t B, float **xs, float **dvs) {
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        xs[l] = dvs[l] = NULL;
        if (!L->n_params) continue;
        xs[l] = malloc(B * L->in_dim * sizeof(float));
        dvs[l] = malloc(B * L->out_dim * sizeof(float));
        memcpy(xs[l], m->act[l], B * L->in_dim * sizeof(float));
        memcpy(dvs[l], m->dact[l + 1], B * L->out_dim * sizeof(float));
    }
}

static void free_rows(const dpt_model *m, float **xs, float **dvs) {
    for (size_t l = 0; l < m->n_layers; l++) {
        free(xs[l]);
        free(dvs[l]);
    }
}

static double dot_d(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t j = 0; j < n; j++) s += (double)a[j] * b[j];
    return s;
}

/* forward and backward of a random batch; per-example rows into g [B, P] */
static void fwd_bwd(dpt_model *m, dpt_rng *r, size_t B, float *x, float *g) {
    float *dout = malloc(B * m->out_dim * sizeof(float));
    fill(r, x, B * m->in_dim, 1.0);
    fill(r, dout, B * m->out_dim, 1.0);
    CHECK_OK(dpt_model_forward(m, x, B));
    CHECK_OK(dpt_model_backward(m, dout, B));
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_PER_EXAMPLE, NULL, g, m->n_params, 0));
    free(dout);
}

static void test_model(const char *spec) {
    const size_t B = 5, k = 3;
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 1, &m));
    if (!m) return;
    dpt_rng r;
    dpt_rng_init(&r, 7, DPT_STREAM_INIT);
    CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.1, &r));
    const size_t P = m->n_params, nl = m->n_layers;
    float *x = malloc(B * m->in_dim * sizeof(float)), *z = malloc(k * m->in_dim * sizeof(float));
    float *g = malloc(B * P * sizeof(float)), *hz = malloc(k * P * sizeof(float)), *v = malloc(P * sizeof(float));
    float out[5], out2[5], acc[5], sq[5], sq2[5];
    float *sum = malloc(P * sizeof(float)), *sum2 = malloc(P * sizeof(float));
    float **xs = calloc(nl, sizeof *xs), **dvs = calloc(nl, sizeof *dvs);
    float **zxs = calloc(nl, sizeof *zxs), **zdvs = calloc(nl, sizeof *zdvs);
    double cr[15], cr2[15];
    fill(&r, v, P, 1.0);

    /* the other batch first: its rows and materialized gradients */
    fwd_bwd(m, &r, k, z, hz);
    copy_rows(m, k, zxs, zdvs);
    fwd_bwd(m, &r, B, x, g);

    /* DOT against the naive loop */
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_DOT, v, out, 0, 0));
    double scale = 0;
    for (size_t i = 0; i < B; i++) scale += fabs(dot_d(g + i * P, v, P));
    for (size_t i = 0; i < B; i++) {
        const double want = dot_d(g + i * P, v, P);
        CHECK_CLOSE(out[i], want, 1e-5 * scale, 1e-5);
        acc[i] = 0.25f * (float)i;
    }
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_DOT, v, acc, 0, 1));
    for (size_t i = 0; i < B; i++) CHECK_CLOSE(acc[i], 0.25 * i + out[i], 1e-6 * scale, 1e-6);
    /* v = g_0: <g_i, g_0>, and <g_0, g_0> = SQNORM_0 */
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_DOT, g, out2, 0, 0));
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
    CHECK_CLOSE(out2[0], sq[0], 1e-6, 1e-5);
    for (size_t i = 0; i < B; i++) CHECK_CLOSE(out2[i], dot_d(g + i * P, g, P), 1e-6 * sq[0], 1e-5);

    /* from copies of the stored rows (a conv layer misses its unfold cache): same values */
    copy_rows(m, B, xs, dvs);
    CHECK_OK(dpt_model_param_grad_from(m, (const float *const *)xs, (const float *const *)dvs, B, DPT_GRAD_DOT, v,
                                       out2, 0, 0));
    for (size_t i = 0; i < B; i++) CHECK_CLOSE(out2[i], out[i], 1e-6 * scale, 1e-6);
    CHECK_OK(dpt_model_param_grad_from(m, (const float *const *)xs, (const float *const *)dvs, B, DPT_GRAD_SQNORM,
                                       NULL, sq2, 0, 0));
    for (size_t i = 0; i < B; i++) CHECK_CLOSE(sq2[i], sq[i], 1e-7, 1e-6);
    CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SUM, NULL, sum, 0, 0));
    CHECK_OK(dpt_model_param_grad_from(m, (const float *const *)xs, (const float *const *)dvs, B, DPT_GRAD_SUM, NULL,
                                       sum2, 0, 0));
    for (size_t p = 0; p < P; p++) CHECK_CLOSE(sum2[p], sum[p], 1e-6, 1e-5);

    /* cross products against the naive loop, from the live model and from the copies */
    CHECK_OK(dpt_model_param_cross(m, NULL, NULL, B, k, (const float *const *)zxs, (const float *const *)zdvs, hz, P,
                                   cr));
    CHECK_OK(dpt_model_param_cross(m, (const float *const *)xs, (const float *const *)dvs, B, k,
                                   (const float *const *)zxs, (const float *const *)zdvs, hz, P, cr2));
    double cs = 0;
    for (size_t i = 0; i < B; i++)
        for (size_t j = 0; j < k; j++) cs += fabs(dot_d(g + i * P, hz + j * P, P));
    for (size_t i = 0; i < B; i++)
        for (size_t j = 0; j < k; j++) {
            const double want = dot_d(g + i * P, hz + j * P, P);
            CHECK_CLOSE(cr[i * k + j], want, 1e-6 * cs, 1e-5);
            CHECK_CLOSE(cr2[i * k + j], cr[i * k + j], 1e-9 * cs, 1e-9);
        }

    /* without materialized rows: fine when every parameter layer has a cross op (MLPs),
     * an error otherwise */
    const int has = dpt_model_has_cross(m);
    CHECK(has == (strncmp(spec, "mlp:", 4) == 0));
    if (has) {
        CHECK_OK(dpt_model_param_cross(m, NULL, NULL, B, k, (const float *const *)zxs, (const float *const *)zdvs,
                                       NULL, 0, cr2));
        for (size_t q = 0; q < B * k; q++) CHECK(cr2[q] == cr[q]);
    } else {
        CHECK_STATUS(dpt_model_param_cross(m, NULL, NULL, B, k, (const float *const *)zxs,
                                           (const float *const *)zdvs, NULL, 0, cr2),
                     DPT_EINVAL);
    }

    /* bad arguments */
    CHECK_STATUS(dpt_model_param_grad(m, B, DPT_GRAD_DOT, NULL, out, 0, 0), DPT_EINVAL);
    CHECK_STATUS(dpt_model_param_cross(m, NULL, NULL, B, k, (const float *const *)zxs, (const float *const *)zdvs, hz,
                                       P - 1, cr),
                 DPT_EINVAL);
    CHECK_STATUS(dpt_model_param_grad(m, B, (dpt_grad_mode)(DPT_GRAD_DOT + 1), v, out, 0, 0), DPT_EINVAL);

    free_rows(m, xs, dvs);
    free_rows(m, zxs, zdvs);
    free(xs), free(dvs), free(zxs), free(zdvs);
    free(x), free(z), free(g), free(hz), free(v), free(sum), free(sum2);
    dpt_rng_free(&r);
    dpt_model_free(m);
}

/* the Conv2d layers of the CNN below take both SQNORM paths (the DOT is path-free, but the
 * cross fallback runs on each) */
static void check_paths(void) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("cnn:2x6x6:conv4k3p1,relu,[conv4k3p1,relu],gn2,conv8k3s2,flatten,fc3", 2, 1, &m));
    if (!m) return;
    int ghost = 0, mat = 0;
    for (size_t l = 0; l < m->n_layers; l++)
        if (m->layers[l].kind == DPT_LAYER_CONV2D) {
            ghost += m->layers[l].ghost;
            mat += !m->layers[l].ghost;
        }
    CHECK(ghost >= 1 && mat >= 1);
    dpt_model_free(m);
}

int main(void) {
    test_model("mlp:6-5-4-3:tanh");
    test_model("mlp:6-5-3:relu:nobias");
    check_paths();
    test_model("cnn:2x6x6:conv4k3p1,relu,[conv4k3p1,relu],gn2,conv8k3s2,flatten,fc3");
    test_model("cnn:1x5x5:conv3k2,tanh,avgpool2,flatten,fc2:nobias");
    TEST_MAIN_END();
}
