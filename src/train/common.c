/* What the training algorithms share: chunk buffers and the forward/loss/backward prologue. */
#include <dptrain/privacy.h>
#include <string.h>

#include "train_internal.h"

dpt_status dpt_chunk_bufs_reserve(dpt_chunk_bufs *b, const dpt_model *m) {
    if (b->cap >= m->max_batch && b->dout && b->loss) return DPT_OK;
    dpt_free(b->dout);
    dpt_free(b->loss);
    b->cap = 0;
    b->dout = dpt_alloc2(m->max_batch, m->out_dim, sizeof(float), "loss gradients");
    b->loss = dpt_alloc(m->max_batch, sizeof(float), "losses");
    if (!b->dout || !b->loss) return DPT_ENOMEM;
    b->cap = m->max_batch;
    return DPT_OK;
}

void dpt_chunk_bufs_free(dpt_chunk_bufs *b) {
    dpt_free(b->dout);
    dpt_free(b->loss);
    memset(b, 0, sizeof *b);
}

dpt_status dpt_train_forward_backward(dpt_trainer *t, dpt_chunk_bufs *b, const float *x, const int32_t *y,
                                      const float *tg, size_t bc, float scale, double *loss_sum) {
    dpt_model *m = t->model;
    DPT_ASSERT(bc <= b->cap);
    DPT_ASSERT(!t->train->t == !tg); /* regression data: the chunk's targets (dpt_trainer_new checked the loss) */
    DPT_TRY(dpt_model_forward(m, x, bc));
    /* squared error on classification data: an autoencoder, the targets are the inputs */
    if (!tg && t->cfg.loss == DPT_LOSS_SQUARED) tg = x;
    DPT_CHECK(!tg || tg != x || m->in_dim == m->out_dim, DPT_EINVAL,
              "squared-error loss reconstructs the input, but the model maps %zu inputs to %zu outputs", m->in_dim,
              m->out_dim);
    DPT_TRY(dpt_loss(t->cfg.loss, dpt_model_output(m), bc, m->out_dim, y, tg, b->loss, b->dout));
    double ls = 0;
    for (size_t i = 0; i < bc; i++) ls += b->loss[i];
    *loss_sum = ls;
    if (scale != 1.0f)
        for (size_t i = 0; i < bc * m->out_dim; i++) b->dout[i] *= scale;
    /* frozen layers below the lowest trained one need no cotangents */
    return dpt_model_backward_to(m, b->dout, bc, t->frozen ? t->first_trained + 1 : 1);
}

dpt_status dpt_train_param_grad(dpt_trainer *t, size_t bc, dpt_grad_mode mode, float *out, size_t ld,
                                int accumulate) {
    dpt_model *m = t->model;
    DPT_ASSERT(mode == DPT_GRAD_SUM || mode == DPT_GRAD_PER_EXAMPLE);
    if (!t->frozen) return dpt_model_param_grad(m, bc, mode, NULL, out, ld, accumulate);
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (dpt_train_layer_trains(t, l))
            DPT_TRY(L->ops->backward_params(L, m->act[l], m->dact[l + 1], bc, mode, NULL, out + L->param_offset, ld,
                                            accumulate));
    }
    return DPT_OK;
}

dpt_status dpt_algo_record_sgm(dpt_algo *a, dpt_trainer *t, size_t batch) {
    (void)batch;
    DPT_ASSERT(t->ledger); /* created by dpt_trainer_new for every private algorithm */
    return dpt_ledger_add_sgm(t->ledger, t->cfg.sample_rate, a->sigma, 1);
}

dpt_status dpt_algo_sgm_events(const dpt_algo *a, const dpt_trainer *t, dpt_ledger *l, int secure,
                               dpt_dgauss_method sampler, uint64_t count) {
    if (secure && sampler == DPT_DGAUSS_TABLE) {
        double mu, tv;
        DPT_TRY(dpt_privacy_secure_distance(sampler, &mu, &tv));
        /* the noised coordinates: the trained parameters (dpt_train_config.freeze) */
        return dpt_ledger_add_sgm_dgauss(l, t->cfg.sample_rate, a->sigma, t->n_trained, mu, tv, count);
    }
    return dpt_ledger_add_sgm(l, t->cfg.sample_rate, a->sigma, count);
}

const char *dpt_sampler_enum_name(dpt_sampler_kind k) {
    switch (k) {
    case DPT_SAMPLER_SHUFFLE: return "DPT_SAMPLER_SHUFFLE";
    case DPT_SAMPLER_POISSON: return "DPT_SAMPLER_POISSON";
    case DPT_SAMPLER_FULL: return "DPT_SAMPLER_FULL";
    case DPT_SAMPLER_POISSON_REJECT: return "DPT_SAMPLER_POISSON_REJECT";
    }
    return "an unknown sampler";
}

dpt_status dpt_algo_bind_sgm(dpt_algo *a, const dpt_trainer *t, const char *name, double sigma, int secure) {
    /* checked here, when the trainer is made, not in the first step */
    DPT_CHECK(t->cfg.sampler == DPT_SAMPLER_POISSON, DPT_EINVAL,
              "%s needs dpt_train_config.sampler = DPT_SAMPLER_POISSON, not %s (its epsilon is computed for Poisson "
              "sampling)", name, dpt_sampler_enum_name(t->cfg.sampler));
    DPT_CHECK(secure == t->cfg.secure, DPT_EINVAL, "%s: the algorithm's secure flag (%d) differs from the run's (%d)",
              name, secure, t->cfg.secure);
    /* the lattice rounding's sensitivity grows with the noised dimension: the trained
     * parameters (frozen coordinates are exactly 0, never rounded or noised) */
    a->sigma = secure ? dpt_privacy_secure_sigma_eff(sigma, t->n_trained) : sigma;
    return DPT_OK;
}

void dpt_algo_free(dpt_algo *a) {
    if (a && a->free) a->free(a);
}
