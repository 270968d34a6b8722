/* io internals: checkpoints of runs with parameter averaging (dpt_train_config.ema_decay).
 * Not installed. The model's tensors ("conv1.weight", ...) hold the EMA of the parameters,
 * the tensor "train.theta" [P] the raw trained parameters; dpt_checkpoint_load (predict,
 * evaluate, init-from) therefore reads the EMA, and these two keep both for a resume.
 * Memory: the caller's buffers; thread-safe as dpt_checkpoint_save/load are. */
#ifndef DPT_IO_CHECKPOINT_EMA_H
#define DPT_IO_CHECKPOINT_EMA_H
#include <dptrain/io.h>

/* dpt_checkpoint_save with the model tensors taken from ema [P] (NULL: from m->theta, no
 * "train.theta") and m->theta written as "train.theta". */
dpt_status dpt_checkpoint_save_ema(const char *path, const dpt_model *m, const dpt_optim *opt,
                                   const char *state_json, const float *ema);
/* dpt_checkpoint_load into m->theta from "train.theta" and into ema [P] from the model
 * tensors; DPT_EMISMATCH when the file has no "train.theta". */
dpt_status dpt_checkpoint_load_ema(const char *path, dpt_model *m, dpt_optim *opt, char **state_json, float *ema);
#endif
