/* DP linear regression on data held in memory: real-valued targets instead of labels.
 *   cc regression.c $(pkg-config --cflags --libs dptrain) -o regression
 *   ./regression
 * The targets are t = 2 x0 - x1 + 0.5 x2 + 1 + noise (std 0.1) for 4 features uniform in
 * [-1, 1] (x3 plays no part), so the right answer is known: the program prints the fitted
 * weights beside the true ones, the test mean squared error (0.01 is the noise's own), and
 * the epsilon the run spent. */
#include <dptrain/dptrain.h>
#include <stdio.h>
#include <stdlib.h>

#define D 4

static const double W[D] = {2.0, -1.0, 0.5, 0.0}, B = 1.0;

static int fail(const char *what) {
    fprintf(stderr, "regression: %s: %s\n", what, dpt_last_error());
    return 1;
}

/* n examples from stream `stream`: x [n, D] and t [n] (the caller's own memory) */
static dpt_status make(size_t n, uint32_t stream, dpt_dataset *out) {
    float *x = malloc(n * D * sizeof *x), *t = malloc(n * sizeof *t);
    dpt_rng r;
    dpt_status s = x && t ? dpt_rng_init(&r, 7, stream) : DPT_ENOMEM;
    if (s == DPT_OK) {
        for (size_t i = 0; i < n; i++) {
            double v = B;
            for (int j = 0; j < D; j++) {
                x[i * D + j] = (float)(2 * dpt_rng_uniform(&r) - 1);
                v += W[j] * x[i * D + j];
            }
            t[i] = (float)(v + 0.1 * dpt_rng_gauss(&r));
        }
        dpt_rng_free(&r);
        s = dpt_dataset_from_targets(x, t, n, D, 1, out); /* copies: x and t can go */
    }
    free(x);
    free(t);
    return s;
}

int main(void) {
    dpt_dataset train = {0}, test = {0};
    if (make(20000, 1, &train) != DPT_OK || make(2000, 2, &test) != DPT_OK) return fail("making the data");

    dpt_train_config cfg = dpt_train_config_defaults();
    cfg.model_spec = "mlp:4-1";            /* one linear layer: fc1.weight [1, 4], fc1.bias [1] */
    cfg.loss = DPT_LOSS_SQUARED;           /* 0.5 (f(x) - t)^2 per example */
    cfg.sampler = DPT_SAMPLER_POISSON;
    cfg.sample_rate = 0.01;                /* expected batch 200 */
    cfg.epochs = 5;
    cfg.optim = dpt_optim_defaults(DPT_OPT_SGD);
    cfg.optim.lr = 0.5;
    cfg.delta = 1e-5;
    dpt_dpsgd_config dp = dpt_dpsgd_config_defaults();
    dp.clip = 1.0;
    /* the noise for epsilon 1 after these epochs, by the default accountant (the one the run
     * reports with: the smaller of the PLD and RDP bounds) */
    if (dpt_calibrate_sigma(cfg.sample_rate, cfg.epochs * 100, cfg.delta, 1.0, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, 1e-4,
                            &dp.sigma) != DPT_OK)
        return fail("calibration");

    dpt_algo *algo = NULL;
    dpt_trainer *t = NULL;
    dpt_epoch_result r;
    if (dpt_algo_dpsgd_new(&dp, &algo) != DPT_OK) return fail("DP-SGD");
    if (dpt_trainer_new(&cfg, &train, &test, algo, &t) != DPT_OK) return fail("trainer");
    if (dpt_trainer_run(t, &r) != DPT_OK) return fail("training");

    const float *theta = dpt_trainer_model(t)->theta;
    printf("fitted  %.3f x0 %+.3f x1 %+.3f x2 %+.3f x3 %+.3f\n", theta[0], theta[1], theta[2], theta[3], theta[4]);
    printf("true    %.3f x0 %+.3f x1 %+.3f x2 %+.3f x3 %+.3f\n", W[0], W[1], W[2], W[3], B);
    printf("test mean squared error %.4f (the noise alone: 0.0100)\n", r.test_mse);
    printf("privacy: epsilon %.3f at delta %g (sigma %.3f, clip %g, %llu steps)\n", r.epsilon, cfg.delta, dp.sigma,
           dp.clip, (unsigned long long)r.step);
    dpt_trainer_free(t);
    dpt_dataset_free(&train);
    dpt_dataset_free(&test);
    return 0;
}
