/* inference: a trained model opened from a checkpoint written by the trainer (or by
 * dpt_checkpoint_save), for prediction and evaluation: its model (parameters by tensor
 * name through dpt_model_tensor_by_name), the loss it was trained with, the training state
 * and the privacy ledger (with epsilon) stored with it.
 * Memory: dpt_checkpoint_open allocates a handle that owns the model, the ledger and the
 * strings it returns; dpt_checkpoint_close frees them all (pointers returned by the
 * accessors are views valid until then).
 * Thread safety: a handle is used by one thread at a time (predict and evaluate run the
 * model's buffers); separate handles are independent. Errors: dpt_status plus
 * dpt_last_error() naming the file or the parameter. */
#ifndef DPTRAIN_INFERENCE_H
#define DPTRAIN_INFERENCE_H

#include <dptrain/accounting.h>
#include <dptrain/core.h>
#include <dptrain/data.h>
#include <dptrain/nn.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpt_checkpoint dpt_checkpoint; /* opaque */

/* Opens the checkpoint at `path`: verifies the whole file (format, version, sizes, SHA-256
 * of the tensors), builds the model from its spec and loads the parameters, and parses
 * the training state and the privacy ledger when there is one (a private run). `threads`
 * is the model's thread count (0 = all cores); OpenBLAS's own count is the caller's
 * (dpt_threads_set_blas). Errors: DPT_EIO (cannot read), DPT_EFORMAT (not a valid
 * checkpoint, a malformed state or ledger), DPT_EINVAL (path or out NULL), DPT_ENOMEM. */
dpt_status dpt_checkpoint_open(const char *path, int threads, dpt_checkpoint **out);
void dpt_checkpoint_close(dpt_checkpoint *ck); /* accepts NULL */

/* The model with the checkpoint's parameters; a view owned by ck (do not free it). Its
 * max_batch is DPT_CHECKPOINT_MAX_BATCH; predict/evaluate chunk larger inputs. */
#define DPT_CHECKPOINT_MAX_BATCH 512
dpt_model *dpt_checkpoint_model(dpt_checkpoint *ck);
/* The model spec string stored in the checkpoint (as trained: a named model stays "resnet5"). */
const char *dpt_checkpoint_spec(const dpt_checkpoint *ck);
/* The loss the model was trained with (DPT_LOSS_SOFTMAX_CE when the state does not say). */
dpt_loss_kind dpt_checkpoint_loss(const dpt_checkpoint *ck);
/* The training state as stored: a JSON object string (step, epoch, algorithm, config, RNG
 * and sampler positions, ledger, and "run" with what the caller stored in
 * dpt_train_config.run_json); "{}" for a checkpoint saved without one. */
const char *dpt_checkpoint_state(const dpt_checkpoint *ck);
/* Steps trained (the state's "step"; 0 when absent) and the algorithm's name ("dpsgd",
 * "sgd", ...; "" when absent). */
uint64_t dpt_checkpoint_step(const dpt_checkpoint *ck);
const char *dpt_checkpoint_algorithm(const dpt_checkpoint *ck);
/* The privacy ledger of a private run: every privacy event the parameters depend on (a
 * view owned by ck; dpt_ledger_epsilon & co. give epsilon for any delta and accountant).
 * NULL for a non-private run. */
const dpt_ledger *dpt_checkpoint_ledger(const dpt_checkpoint *ck);
/* What weakens the privacy statement of the run that wrote ck, for a line that shows its
 * epsilon or a result of it (as the run's own lines did): with a ledger its
 * dpt_ledger_label(ledger, full); without one "  [note]" for the run's privacy note
 * ("non-accounted: ...", "no formal DP guarantee", from the result record the checkpoint
 * keeps) and "  [does NOT cover: ...]"; "" for none. Truncated to cap - 1 bytes. */
void dpt_checkpoint_label(const dpt_checkpoint *ck, int full, char *buf, size_t cap);
/* epsilon of the ledger at delta in (0, 1) with the accountant the trainer reports (RDP,
 * Balle et al. conversion). DPT_ENOTSUP for a checkpoint without a ledger (a non-private
 * run has no finite epsilon); DPT_EINVAL for a bad delta. */
dpt_status dpt_checkpoint_epsilon(const dpt_checkpoint *ck, double delta, double *eps);

/* Model outputs for n examples: x [n, in_dim] row-major (finite values), out
 * [n, out_dim] receives the raw outputs (logits; apply softmax/sigmoid yourself), in
 * chunks of the model's max_batch. DPT_EINVAL for NULL pointers, n = 0 or a non-finite
 * input (naming the first, "x[i]"). */
dpt_status dpt_checkpoint_predict(dpt_checkpoint *ck, const float *x, size_t n, float *out);
/* Mean loss (the training loss, dpt_checkpoint_loss) and accuracy (argmax = label; for one
 * output, output > 0 = label 1) of the model on d. d->dim must equal the model's input size
 * (DPT_EINVAL otherwise). */
dpt_status dpt_checkpoint_evaluate(dpt_checkpoint *ck, const dpt_dataset *d, double *mean_loss, double *accuracy);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
