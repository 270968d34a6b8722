/* io: checkpoints in the safetensors layout (8-byte little-endian header length, a JSON
 * header written and read with cJSON, raw little-endian float32 tensors named by layer) and
 * JSON-lines metrics. Checkpoints are written atomically (temporary file, fsync, rename,
 * fsync of the directory) and verified on load (format marker, version, sizes, offsets,
 * SHA-256 of the tensor bytes), so a truncated or corrupted file is refused, never loaded.
 * Memory: strings returned through `char **` are malloc'd; the caller frees them with free().
 * Thread safety: functions touch only their arguments.
 * Errors: DPT_EIO (cannot open, read or write; the message names the path), DPT_EFORMAT
 * (not a valid checkpoint), DPT_EMISMATCH (a checkpoint of another model), DPT_EINVAL. */
#ifndef DPTRAIN_IO_H
#define DPTRAIN_IO_H

#include <dptrain/core.h>
#include <dptrain/nn.h>
#include <dptrain/optim.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

#define DPT_CHECKPOINT_FORMAT "dptrain-checkpoint"
#define DPT_CHECKPOINT_VERSION 2

/* Writes model parameters (tensor names from dpt_model_tensor: "fc1.weight", ...), the
 * optimizer state ("optim.m", "optim.v" when present; t and config in the metadata) and
 * `state_json`, a JSON object string with the training state (step, epoch, RNG states,
 * sampler position, data hash, ledger, ...), into the safetensors "__metadata__" map as
 * string values: format, format_version, model_spec, optimizer, state, checkpoint_sha256
 * (SHA-256 of the whole file with these 64 digits read as '0': any edit of the header or
 * data is refused on load). Version 1 files (hash over the data only) are refused. */
dpt_status dpt_checkpoint_save(const char *path, const dpt_model *m, const dpt_optim *opt,
                               const char *state_json);
/* Reads only the metadata: the model spec (to build the model) and the state JSON.
 * Either output may be NULL. Validates the whole file (hash included). */
dpt_status dpt_checkpoint_peek(const char *path, char **model_spec, char **state_json);
/* Loads into an existing model built from the same spec (tensor names and shapes must
 * match) and, when opt != NULL, an optimizer created for the same parameter count (its
 * config and t are restored). state_json may be NULL. */
dpt_status dpt_checkpoint_load(const char *path, dpt_model *m, dpt_optim *opt,
                               char **state_json);

/* ==== JSON-lines metrics ==== */
typedef struct {
    FILE *f;
    char path[512];
} dpt_metrics;
/* Opens (append = 1 keeps existing lines, for --resume) path for writing. */
dpt_status dpt_metrics_open(dpt_metrics *mt, const char *path, int append);
/* Appends one line (a JSON object without newline) with a single write(2) in append mode,
 * so a crash leaves at most one cut-short last line (see dpt_metrics_last_step). */
dpt_status dpt_metrics_write(dpt_metrics *mt, const char *json_object);
void dpt_metrics_close(dpt_metrics *mt);
/* The "step" of the last complete line of the metrics file at `path`: *found = 0 when
 * the file is missing or has no complete line. A last line without its newline (a write
 * cut short by a crash) is first removed from the file (truncated away). DPT_EFORMAT
 * naming the file when the last complete line is not a JSON object with a non-negative
 * integer "step". */
dpt_status dpt_metrics_last_step(const char *path, int *found, uint64_t *step);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
