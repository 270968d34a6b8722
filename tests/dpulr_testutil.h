/* Helpers shared by the DP-ULR tests (tests/test_train_dpulr*.c); include after testutil.h. */
#ifndef DPT_TEST_DPULR_UTIL_H
#define DPT_TEST_DPULR_UTIL_H
#include <dptrain/train.h>
#include <string.h>

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
    double ls;
    CHECK_OK(a->begin(a, t, b));
    CHECK_OK(a->accumulate(a, t, x, y, b, &ls));
    if (finish) CHECK_OK(a->finish(a, t, b));
    dpt_model *m = dpt_trainer_model(t);
    memcpy(out, m->grad, m->n_params * sizeof(float));
}
#endif
