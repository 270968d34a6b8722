/* DP-MAC internals shared with its tests (not a public API): the per-example z-step and
 * the per-example Taylor coefficients of the W-step. Nothing here writes z anywhere. */
#ifndef DPT_DPMAC_INTERNAL_H
#define DPT_DPMAC_INTERNAL_H
#include <dptrain/train.h>

/* Runs the z-initialization (forward pass) and the z-step for the chunk x [bc, D] with
 * the trainer's current parameters, then copies the auxiliary coordinates into z_out
 * [bc, H] (H = sum of the hidden widths, layer after layer per example) when z_out is not
 * NULL, and the per-example UNCLIPPED Taylor coefficients of every weight layer into
 * coef_out [bc, P] (the layout of theta) when coef_out is not NULL. For tests only: the
 * algorithm itself never copies z out. */
dpt_status dpt_dpmac_debug_chunk(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                 float *z_out, float *coef_out);
/* Number of weight layers K of the model the algorithm runs on (after begin()). */
size_t dpt_dpmac_n_weight_layers(const dpt_algo *a);
#endif
