/* dptrain train --trace FILE: one JSON line per training step with the quantities that
 * explain a diverging or stalled run (docs/cli.md, docs/dpulr.md "Diagnostics"):
 *   step, epoch, step_in_epoch, lr (this step's learning rate)
 *   param_norm      ||theta|| after the step
 *   update_norm     ||theta_t - theta_{t-1}|| (what the optimizer moved)
 *   direction_norm  ||d|| of the direction handed to the optimizer (DP-SGD, DP-MAC,
 *                   DP-ULR: the noisy released gradient; PDP-SGD: the unnoised one)
 *   layers          the same three per layer with parameters ({"layer": index, ...})
 *   dpulr           DP-ULR only, per module: s_l, lambda_min, lambda_max, rank, dim,
 *                   clipped (examples whose estimate was clipped), examples (batch size)
 * The first line is a header naming the run's algorithm and saying what the file may
 * hold. For DP-SGD and DP-MAC the norms are functions of the released parameters and of
 * the noisy released gradient (post-processing). DP-ULR's module statistics are NOT: they
 * are unnoised functions of the private batch (its size, the clean losses through
 * lambda_min and s_l, the clip counts), covered by no epsilon; nor is the direction of an
 * algorithm that noises the parameters instead of the gradient (PDP-SGD). For every
 * algorithm but DP-SGD, DP-MAC and the non-private ones (fail-safe: any new algorithm
 * too) the header and a warning on stderr (printed by cli_trace_open) say so. Rank 0 only.
 * Nothing of a step reaches the file before the run's ledger on disk records that step. */
#ifndef DPT_CLI_TRAIN_TRACE_H
#define DPT_CLI_TRAIN_TRACE_H
#include <dptrain/train.h>

typedef struct cli_trace cli_trace;
/* Opens `path` (append = 1 continues a resumed run's file). `algo` is a view of the run's
 * algorithm (owned by the trainer). Prints the privacy warning above when it applies.
 * Returns 0, or prints an error naming --trace and returns non-zero. */
int cli_trace_open(const char *path, int append, dpt_trainer *t, const dpt_algo *algo, cli_trace **out);
/* One line for the step just taken. Returns non-zero (after printing why) when the line
 * cannot be written. */
int cli_trace_step(cli_trace *tr, const dpt_step_info *info);
/* For a run with a privacy ledger the lines are held back until the ledger on disk records
 * their steps: call this from on_epoch (after each publication) to write them. Without a
 * ledger lines are written at once and this does nothing. Non-zero (after printing why)
 * on a write error. Accepts NULL. */
int cli_trace_publish(cli_trace *tr);
/* Closes the file, dropping lines of steps no ledger recorded (a failed run; a note says
 * how many); non-zero (after printing why) when it could not be completed. Accepts NULL. */
int cli_trace_close(cli_trace *tr);
#endif
