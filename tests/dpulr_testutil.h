/* Helpers shared by the DP-ULR tests (tests/test_train_dpulr*.c); include after testutil.h. */
#ifndef DPT_TEST_DPULR_UTIL_H
#define DPT_TEST_DPULR_UTIL_H
#include <dptrain/train.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testalgo.h"
#include "testutil.h"

/* A trainer running DP-ULR with config u on d; *ao gets the algorithm (owned by the trainer). */
static inline dpt_trainer *make(const dpt_train_config *c, const dpt_dataset *d, const dpt_dpulr_config *u, dpt_algo **ao) {
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpulr_new(u, &a));
    if (!a) return NULL;
    CHECK_OK(dpt_trainer_new(c, d, NULL, a, &t));
    if (ao) *ao = a;
    return t;
}

/* One step's released update (finish = 1) or pre-noise sum (finish = 0) into out. */
static inline void step_grad(dpt_trainer *t, dpt_algo *a, const float *x, const int32_t *y, size_t b, int finish,
                             float *out) {
    tu_algo_grad(t, a, x, y, b, finish, out);
}
/* Explicit mode adds N(0, sigma0^2 C^2) to the clipped sum: the released update times N_B
 * (= 5) minus the pre-noise sum, over 60 steps of a 10-example batch of d, has variance
 * (sigma0 C)^2 within 5 standard errors (chi-square) and mean 0. c: Poisson-reject with
 * N_B = 5. */
static inline void ulr_check_explicit_noise(const dpt_train_config *c, const dpt_dataset *d, const char *what) {
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.copies = 2;
    u.sigma0 = 1.7;
    u.clip = 0.3;
    u.noise = DPT_ULR_EXPLICIT;
    u.perturb_std = 0.2;
    dpt_algo *a;
    dpt_trainer *t = make(c, d, &u, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    size_t P = m->n_params, n = 0;
    float *pre = malloc(P * sizeof(float));
    double ss = 0, sum = 0;
    for (int r = 0; r < 60; r++) {
        double ls;
        CHECK_OK(a->begin(a, t, 10));
        CHECK_OK(a->accumulate(a, t, d->x, d->y, 10, &ls));
        memcpy(pre, m->grad, P * sizeof(float));
        CHECK_OK(a->finish(a, t, 10));
        for (size_t j = 0; j < P; j++) {
            double z = (double)m->grad[j] * 5 /* N_B */ - pre[j];
            ss += z * z;
            sum += z;
            n++;
        }
    }
    double var = ss / n, want = (u.sigma0 * u.clip) * (u.sigma0 * u.clip);
    printf("%s explicit noise: variance / (sigma0 C)^2 = %.4f over %zu draws\n", what, var / want, n);
    CHECK_CLOSE(var, want, 5 * want * sqrt(2.0 / n), 0);
    CHECK_CLOSE(sum / n, 0, 5 * sqrt(want / n), 0);
    free(pre);
    dpt_trainer_free(t);
}
/* A diverged model (one NaN parameter in the last layer: every loss is NaN) makes the
 * private step fail with DPT_ERANGE saying so instead of summing NaN estimates "unclipped". */
static inline void ulr_check_nonfinite_error(const dpt_train_config *c, const dpt_dataset *d) {
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.copies = 2;
    u.noise = DPT_ULR_EXPLICIT;
    u.perturb_std = 0.1;
    dpt_train_config cc = *c;
    cc.max_steps = 1;
    dpt_algo *a;
    dpt_trainer *t = make(&cc, d, &u, &a);
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    m->theta[m->n_params - 1] = NAN;
    CHECK_STATUS(dpt_trainer_run(t, NULL), DPT_ERANGE);
    CHECK_ERR_HAS("LR estimate: clip factors: a per-example gradient's squared norm is not finite: the model "
                  "diverged; lower the learning rate");
    dpt_trainer_free(t);
}
#endif
