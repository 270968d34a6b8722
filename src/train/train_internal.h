/* Private layout of dpt_trainer, shared by the loop and the algorithms in src/train/. */
#ifndef DPT_TRAIN_INTERNAL_H
#define DPT_TRAIN_INTERNAL_H
#include <dptrain/accounting.h>
#include <dptrain/train.h>

struct dpt_trainer {
    dpt_train_config cfg;
    char model_spec[256];
    char out_dir[512];
    const dpt_dataset *train, *test; /* borrowed */
    dpt_model *model;
    dpt_optim opt;
    int opt_live;
    dpt_algo *algo; /* owned */
    dpt_sampler *sampler;
    dpt_rng rng_init, rng_noise;
    int rng_init_live, rng_noise_live;
    int threads;
    size_t max_batch;
    uint32_t *idx;  /* [n] indices of the current batch */
    float *xb;      /* [max_batch, D] gathered features */
    int32_t *yb;    /* [max_batch] gathered labels */
    uint64_t step, epoch;
    double wall_s;  /* training time (all sessions of the run) */
    double epoch_loss_sum;
    uint64_t epoch_examples;
    uint8_t data_hash[32];
    dpt_metrics metrics;
    int metrics_open;
    int resumed;
    char *run_json; /* owned copy of cfg.run_json */
    dpt_ledger *ledger; /* private algorithms: every noisy release (owned) */
    int budget_stopped; /* the run stopped before exceeding cfg.target_epsilon */
    double budget_eps_next;
};

/* ==== Shared by the algorithms ==== */

/* Per-chunk buffers every loss-based algorithm needs, grown to the model's max_batch. */
typedef struct {
    float *dout; /* [cap, K] loss cotangents */
    float *loss; /* [cap] per-example losses */
    size_t cap;
} dpt_chunk_bufs;
dpt_status dpt_chunk_bufs_reserve(dpt_chunk_bufs *b, const dpt_model *m);
void dpt_chunk_bufs_free(dpt_chunk_bufs *b);

/* The chunk prologue: forward pass of x [bc, D], per-example losses into b->loss, their
 * gradients with respect to the outputs times `scale` into b->dout, then the backward
 * pass (every layer's input cotangent stays in the model for backward_params).
 * *loss_sum = sum of the unscaled per-example losses. */
dpt_status dpt_train_forward_backward(dpt_trainer *t, dpt_chunk_bufs *b, const float *x, const int32_t *y,
                                      size_t bc, float scale, double *loss_sum);

dpt_status dpt_trainer_checkpoint_path(const dpt_trainer *t, char *buf, size_t n);
#endif
