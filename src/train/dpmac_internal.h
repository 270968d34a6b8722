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
/* The z-objective of the chunk at the given auxiliary coordinates z_in [bc, H] (layout of
 * dpt_dpmac_debug_chunk): *obj = sum_n [loss(out_n) + sum_{k<K} mu/2 ||z_{k,n} - f_k(a_k)||^2]
 * and its gradient with respect to z into gz_out [bc, H] (unscaled: the z-step divides it
 * by qN). For tests only. */
dpt_status dpt_dpmac_debug_zobjective(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                      const float *z_in, double *obj, float *gz_out);
/* taylor_order 2: weight layer k's Hessian coefficient sums [rows = out width, d1, d1]
 * (d1 = in width + 1, the bias last): after accumulate() the clipped pre-noise sums, after
 * finish() the released (noised, scaled by 1/(2qN), symmetrized) ones. NULL otherwise. */
const float *dpt_dpmac_debug_hessian(const dpt_algo *a, size_t k, size_t *rows, size_t *d1);
/* taylor_order 2: the released first-order direction g1 [P] of the last step (NULL
 * otherwise). */
const float *dpt_dpmac_debug_g1(const dpt_algo *a);
/* Number of weight layers K of the model the algorithm runs on (after begin()). */
size_t dpt_dpmac_n_weight_layers(const dpt_algo *a);
#endif
