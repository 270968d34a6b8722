/* Helpers for tests that drive a training algorithm's hooks directly. */
#ifndef DPT_TESTALGO_H
#define DPT_TESTALGO_H
#include <dptrain/train.h>
#include <string.h>

#include "testutil.h"

/* One step of algorithm a on the batch x [b] into out [P]: the pre-noise sum (finish = 0:
 * begin + accumulate) or the released update (finish = 1: also finish). */
static inline void tu_algo_grad(dpt_trainer *t, dpt_algo *a, const float *x, const int32_t *y, size_t b, int finish,
                                float *out) {
    double ls;
    CHECK_OK(a->begin(a, t, b));
    CHECK_OK(a->accumulate(a, t, x, y, b, &ls));
    if (finish) CHECK_OK(a->finish(a, t, b));
    dpt_model *m = dpt_trainer_model(t);
    memcpy(out, m->grad, m->n_params * sizeof(float));
}
#endif
