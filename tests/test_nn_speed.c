/* nn speed: one full train step (forward, softmax CE, backward, SUM gradient) for the two
 * benchmark MLPs at batch 256 on 2 threads; prints the median time. The bound is loose
 * (10x the target) so that a shared machine does not make it flaky; it still catches a
 * step that allocates, falls off BLAS or runs a naive kernel. Skipped under sanitizers. */
#include <dptrain/nn.h>

#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define TU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_SANITIZED 1
#endif
#endif

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double step_ms(const char *spec, size_t B) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, 2, &m));
    if (!m) return 1e9;
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 1, DPT_STREAM_INIT));
    CHECK_OK(dpt_model_init(m, DPT_INIT_DEFAULT, NULL, 0, 0.0, &r));
    float *x = malloc(B * m->in_dim * sizeof *x), *dout = malloc(B * m->out_dim * sizeof *dout);
    int32_t *y = malloc(B * sizeof *y);
    CHECK_OK(dpt_rng_gauss_fill(&r, x, B * m->in_dim, 1.0f, 0, 1));
    for (size_t i = 0; i < B; i++) y[i] = (int32_t)(i % m->out_dim);
    enum { REPS = 60 };
    double t[REPS];
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = dpt_now();
        CHECK_OK(dpt_model_forward(m, x, B));
        CHECK_OK(dpt_loss(DPT_LOSS_SOFTMAX_CE, dpt_model_output(m), B, m->out_dim, y, NULL, NULL, dout));
        CHECK_OK(dpt_model_backward(m, dout, B));
        CHECK_OK(dpt_model_param_grad(m, B, DPT_GRAD_SUM, NULL, m->grad, 0, 0));
        t[rep] = dpt_now() - t0;
    }
    qsort(t, REPS, sizeof t[0], cmp_d);
    CHECK(dpt_all_finite(m->grad, m->n_params));
    printf("%-28s B=%zu  train step median %.3f ms  (min %.3f)\n", spec, B, 1e3 * t[REPS / 2], 1e3 * t[0]);
    free(x); free(dout); free(y);
    dpt_rng_free(&r);
    dpt_model_free(m);
    return 1e3 * t[REPS / 2];
}

int main(void) {
#ifdef TU_SANITIZED
    TEST_SKIP("timing is meaningless under sanitizers");
#endif
    dpt_threads_set_blas(2);
    double a = step_ms("mlp:784-128-64-32-10:gelu", 256);
    double b = step_ms("mlp:784-1000-10:relu", 256);
    if (getenv("DPT_SPEED_EXTRA")) step_ms("mlp:784-128-64-32-10:relu", 256);
    CHECK(a < 20.0); /* target ~2 ms */
    CHECK(b < 70.0); /* target ~7 ms */
    TEST_MAIN_END();
}
