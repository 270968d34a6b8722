/* What the training algorithms share: chunk buffers and the forward/loss/backward prologue. */
#include <string.h>

#include "train_internal.h"

dpt_status dpt_chunk_bufs_reserve(dpt_chunk_bufs *b, const dpt_model *m) {
    if (b->cap >= m->max_batch && b->dout && b->loss) return DPT_OK;
    dpt_free(b->dout);
    dpt_free(b->loss);
    b->cap = 0;
    b->dout = dpt_alloc(m->max_batch * m->out_dim, sizeof(float), "loss gradients");
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
                                      size_t bc, float scale, double *loss_sum) {
    dpt_model *m = t->model;
    DPT_ASSERT(bc <= b->cap);
    DPT_TRY(dpt_model_forward(m, x, bc));
    /* squared error: an autoencoder, the targets are the inputs */
    const float *tg = t->cfg.loss == DPT_LOSS_SQUARED ? x : NULL;
    DPT_CHECK(!tg || m->in_dim == m->out_dim, DPT_EINVAL,
              "squared-error loss reconstructs the input, but the model maps %zu inputs to %zu outputs", m->in_dim,
              m->out_dim);
    DPT_TRY(dpt_loss(t->cfg.loss, dpt_model_output(m), bc, m->out_dim, y, tg, b->loss, b->dout));
    double ls = 0;
    for (size_t i = 0; i < bc; i++) ls += b->loss[i];
    *loss_sum = ls;
    if (scale != 1.0f)
        for (size_t i = 0; i < bc * m->out_dim; i++) b->dout[i] *= scale;
    return dpt_model_backward(m, b->dout, bc);
}
