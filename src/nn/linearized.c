/* The linearization of a model around theta0 (Eq. 3 of "Initialization Matters"):
 * f_lin(theta, x) = f(theta0, x) + J(theta0, x) (theta - theta0), evaluated with one forward
 * pass at theta0 and one forward-mode tangent pass in direction theta - theta0. The noisy-GD
 * strategy does the same inside its step (src/train/algo_noisy_gd.c) without the copies. */
#include <string.h>

#include "nn_internal.h"

dpt_status dpt_model_linearized_forward(dpt_model *m, const float *theta0, const float *x, size_t B, float *out,
                                        float *work) {
    DPT_CHECK(m && theta0 && x && out && work, DPT_EINVAL, "linearized forward: NULL argument");
    const size_t P = m->n_params, K = m->out_dim;
    float *d = dpt_alloc(P, sizeof *d, "linearized direction");
    if (!d) return DPT_ENOMEM;
    memcpy(work, m->theta, P * sizeof *work); /* theta saved; the model runs at theta0 */
    for (size_t j = 0; j < P; j++) d[j] = work[j] - theta0[j];
    memcpy(m->theta, theta0, P * sizeof *work);
    dpt_status s = dpt_model_forward(m, x, B);
    if (s == DPT_OK) s = dpt_model_jvp(m, d, NULL, B, out);
    if (s == DPT_OK) {
        const float *f0 = dpt_model_output(m);
        for (size_t i = 0; i < B * K; i++) out[i] += f0[i];
    }
    memcpy(m->theta, work, P * sizeof *work);
    dpt_free(d);
    return s;
}
