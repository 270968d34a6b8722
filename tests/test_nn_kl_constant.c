/* nn/kl_constant: the gradient-norm constant B of Eq. 7 ("Initialization Matters")
 * against a Monte Carlo estimate of E ||d f(x) / d W||_F^2 over random initializations of
 * a real network (Lemma C.3: the expectation is (||x||^2 / d) B), for every Table 1
 * initialization, two depths and two output counts. ||J||_F^2 = sum_k ||d f_k / d W||^2 is
 * computed from o backward passes (one per output row, ghost norms). */
#include <dptrain/accounting.h>
#include <dptrain/nn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static void mc_case(dpt_kl_init ki, size_t d, size_t m, size_t L, size_t o, int draws) {
    char spec[128];
    int w = snprintf(spec, sizeof spec, "mlp:%zu", d);
    for (size_t l = 1; l < L; l++) w += snprintf(spec + w, sizeof spec - w, "-%zu", m);
    snprintf(spec + w, sizeof spec - w, "-%zu:relu:nobias", o);
    dpt_model *net = NULL;
    CHECK_OK(dpt_model_new(spec, o, 1, &net));
    if (!net) return;
    size_t widths[16];
    widths[0] = d, widths[L] = o;
    for (size_t l = 1; l < L; l++) widths[l] = m;
    double beta[16], B;
    CHECK_OK(dpt_kl_init_variances(ki, widths, L, beta));
    CHECK_OK(dpt_kl_gradient_constant(widths, L, beta, &B));
    /* the library's init schemes give the same variances (fan_in/fan_out of each layer) */
    double nb[16];
    static const dpt_init_scheme map[] = {DPT_INIT_LECUN, DPT_INIT_HE, DPT_INIT_XAVIER, DPT_INIT_NTK};
    CHECK_OK(dpt_model_init_variances(net, map[ki], nb, 16));
    for (size_t l = 0; l < L; l++) CHECK_CLOSE(nb[l], beta[l], 0, 1e-15);
    float *x = malloc(o * d * sizeof(float)), *dout = calloc(o * o, sizeof(float)), *sq = malloc(o * sizeof(float));
    dpt_rng r;
    dpt_rng_init(&r, 100 + ki * 10 + L, DPT_STREAM_INIT);
    double xx = 0;
    for (size_t j = 0; j < d; j++) {
        x[j] = (float)dpt_rng_gauss_ref(&r);
        xx += (double)x[j] * x[j];
    }
    for (size_t k = 1; k < o; k++) memcpy(x + k * d, x, d * sizeof(float));
    for (size_t k = 0; k < o; k++) dout[k * o + k] = 1.0f;
    double s1 = 0, s2 = 0;
    for (int t = 0; t < draws; t++) {
        CHECK_OK(dpt_model_init(net, ki == DPT_KLI_NTK ? DPT_INIT_NTK : map[ki], NULL, 0, 0.0, &r));
        CHECK_OK(dpt_model_forward(net, x, o));
        CHECK_OK(dpt_model_backward(net, dout, o));
        CHECK_OK(dpt_model_param_grad(net, o, DPT_GRAD_SQNORM, NULL, sq, 0, 0));
        double v = 0;
        for (size_t k = 0; k < o; k++) v += sq[k];
        s1 += v;
        s2 += v * v;
    }
    const double mean = s1 / draws, se = sqrt((s2 / draws - mean * mean) / draws);
    const double want = xx / (double)d * B;
    printf("%-6s d %zu m %zu L %zu o %zu: MC E||J||_F^2 = %.5g +- %.2g, (||x||^2/d) B = %.5g (ratio %.3f)\n",
           dpt_kl_init_name(ki), d, m, L, o, mean, se, want, mean / want);
    /* within 4 standard errors plus 3% (finite width) */
    CHECK(fabs(mean - want) <= 4.0 * se + 0.03 * want);
    free(x);
    free(dout);
    free(sq);
    dpt_rng_free(&r);
    dpt_model_free(net);
}

int main(void) {
    for (int ki = 0; ki < 4; ki++) {
        mc_case((dpt_kl_init)ki, 12, 48, 2, 1, 2000);
        mc_case((dpt_kl_init)ki, 12, 48, 4, 3, 1000);
    }
    TEST_MAIN_END();
}
