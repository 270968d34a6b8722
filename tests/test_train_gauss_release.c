/* train/sgm_release: the sampled Gaussian release shared by DP-SGD, DP-MAC and dpt_sgm.
 * The noise it adds has standard deviation sigma C (times its scale), the event it records
 * is SGM(q, sigma) (secure: the effective multiplier and the table sampler's distance, the
 * same the noise was drawn for), the scale divides by the expected batch q N given at init,
 * and impossible settings are refused. */
#include <dptrain/accounting.h>
#include <dptrain/privacy.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/train_internal.h"

/* the standard deviation of apply's output on a zero sum */
static double release_std(const dpt_gauss_release *r, int use_sum) {
    dpt_rng rng;
    CHECK_OK(dpt_rng_init(&rng, 11, DPT_STREAM_NOISE));
    float *v = calloc(r->coords, sizeof *v);
    double *sum = calloc(r->coords, sizeof *sum);
    if (use_sum) CHECK_OK(dpt_gauss_release_apply_sum(r, &rng, sum, v, 2));
    else CHECK_OK(dpt_gauss_release_apply(r, &rng, v, 2));
    double s2 = 0, m = 0;
    for (size_t j = 0; j < r->coords; j++) m += v[j];
    m /= (double)r->coords;
    for (size_t j = 0; j < r->coords; j++) s2 += (v[j] - m) * (v[j] - m);
    free(v);
    free(sum);
    dpt_rng_free(&rng);
    return sqrt(s2 / (double)(r->coords - 1));
}

static void test_noise_and_event(int secure) {
    const size_t P = 200000;
    const double q = 0.01, sigma = 2.0, C = 0.5, N = 5000;
    dpt_gauss_release r;
    CHECK_OK(dpt_gauss_release_init(&r, q, sigma, C, 1.0 / (q * N), P, secure, DPT_DGAUSS_TABLE));
    CHECK_CLOSE(r.scale, 1.0 / 50.0, 0, 1e-15);
    /* std of (0 + noise) / (q N): sigma C / (q N), within 5 standard errors */
    const double want = sigma * C / (q * N), se = want / sqrt(2.0 * (double)P);
    for (int use_sum = 0; use_sum < 2; use_sum++) {
        double got = release_std(&r, use_sum);
        CHECK(fabs(got - want) < 5 * se + (secure ? 1e-3 * want : 0));
    }
    /* the event: what the noise was drawn for */
    dpt_ledger *a = NULL, *b = NULL;
    CHECK_OK(dpt_ledger_new(&a));
    CHECK_OK(dpt_ledger_new(&b));
    CHECK_OK(dpt_gauss_release_record(&r, a, 7));
    if (!secure) {
        CHECK(r.sigma_acct == sigma);
        CHECK_OK(dpt_ledger_add_sgm(b, q, sigma, 7));
    } else {
        double mu, tv;
        CHECK(r.sigma_acct == dpt_privacy_secure_sigma_eff(sigma, P) && r.sigma_acct < sigma);
        CHECK_OK(dpt_privacy_secure_distance(DPT_DGAUSS_TABLE, &mu, &tv));
        CHECK_OK(dpt_ledger_add_sgm_dgauss(b, q, r.sigma_acct, P, mu, tv, 7));
    }
    double ea, eb;
    CHECK_OK(dpt_ledger_epsilon(a, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &ea));
    CHECK_OK(dpt_ledger_epsilon(b, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &eb));
    CHECK(ea == eb && dpt_ledger_steps(a) == 7);
    dpt_ledger_free(a);
    dpt_ledger_free(b);
}

static void test_refusals(void) {
    dpt_gauss_release r;
    CHECK_STATUS(dpt_gauss_release_init(&r, 0, 1, 1, 1, 10, 0, DPT_DGAUSS_TABLE), DPT_EINVAL);
    CHECK_ERR_HAS("Poisson rate q");
    CHECK_STATUS(dpt_gauss_release_init(&r, 0.1, NAN, 1, 1, 10, 0, DPT_DGAUSS_TABLE), DPT_EINVAL);
    CHECK_ERR_HAS("noise multiplier");
    CHECK_STATUS(dpt_gauss_release_init(&r, 0.1, 1, 0, 1, 10, 0, DPT_DGAUSS_TABLE), DPT_EINVAL);
    CHECK_ERR_HAS("sensitivity");
    CHECK_STATUS(dpt_gauss_release_init(&r, 0.1, 1, 1, INFINITY, 10, 0, DPT_DGAUSS_TABLE), DPT_EINVAL);
    CHECK_ERR_HAS("scale");
    CHECK_STATUS(dpt_gauss_release_init(&r, 0.1, 1, 1, 1, 0, 0, DPT_DGAUSS_TABLE), DPT_EINVAL);
}

int main(void) {
    test_noise_and_event(0);
    test_noise_and_event(1);
    test_refusals();
    TEST_MAIN_END();
}
