/* Non-private minibatch SGD as a strategy of the training loop: the update direction is
 * the gradient of the mean loss over the sampled batch, sum_i grad l_i / |B|. */
#include <dptrain/train.h>

#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

typedef struct {
    dpt_chunk_bufs buf;
    double inv_b;
} sgd_state;

static dpt_status sgd_begin(dpt_algo *a, dpt_trainer *t, size_t batch) {
    sgd_state *s = a->state;
    DPT_TRY(dpt_chunk_bufs_reserve(&s->buf, t->model));
    memset(t->model->grad, 0, t->model->n_params * sizeof(float));
    s->inv_b = batch ? 1.0 / (double)batch : 0.0;
    return DPT_OK;
}

static dpt_status sgd_accumulate(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                 double *loss_sum) {
    sgd_state *s = a->state;
    dpt_model *m = t->model;
    DPT_TRY(dpt_train_forward_backward(t, &s->buf, x, y, dpt_trainer_batch_targets(t), bc, (float)s->inv_b, loss_sum));
    return dpt_train_param_grad(t, bc, DPT_GRAD_SUM, m->grad, 0, 1); /* trained layers only */
}

static dpt_status sgd_finish(dpt_algo *a, dpt_trainer *t, size_t batch) { return DPT_OK; }

static void sgd_free(dpt_algo *a) {
    if (!a) return;
    sgd_state *s = a->state;
    if (s) {
        dpt_chunk_bufs_free(&s->buf);
        free(s);
    }
    free(a);
}

dpt_status dpt_algo_sgd_new(dpt_algo **out) {
    dpt_algo *a = calloc(1, sizeof *a);
    sgd_state *s = calloc(1, sizeof *s);
    if (!a || !s) {
        free(a);
        free(s);
        return dpt_set_error(DPT_ENOMEM, "sgd: out of memory");
    }
    a->name = "sgd";
    a->is_private = 0;
    a->begin = sgd_begin;
    a->accumulate = sgd_accumulate;
    a->finish = sgd_finish;
    a->record = NULL;
    a->distributable = 1; /* accumulate only adds into model->grad (docs/distributed.md) */
    a->freezable = 1;
    a->regression = 1; /* the prologue's squared error against the targets */
    a->cacheable = 1;  /* the prologue runs the model (a frozen trunk's features may be cached) */
    a->free = sgd_free;
    a->state = s;
    *out = a;
    return DPT_OK;
}
