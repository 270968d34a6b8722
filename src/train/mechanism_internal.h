/* Internals of dpt_sgm (mechanism.c) that the tests reach: the clipped sum before noise. */
#ifndef DPT_MECHANISM_INTERNAL_H
#define DPT_MECHANISM_INTERNAL_H
#include <dptrain/mechanism.h>

/* sum [dim] = sum_i g_i min(1, C / ||g_i||) over grads [b, dim] (the pre-noise release of
 * dpt_sgm_release; the sensitivity test compares it on neighbouring batches). DPT_ERANGE
 * for a row with a NaN or infinite value. */
dpt_status dpt_sgm_clipped_sum(const dpt_sgm *m, const float *grads, size_t b, double *sum);
/* The same, and *count = sum_i (1[||g_i|| <= C_t] - 1/2), the adaptive clip's pre-noise count
 * (the sensitivity test compares it on neighbouring batches). */
dpt_status dpt_sgm_clipped_sum_count(const dpt_sgm *m, const float *grads, size_t b, double *sum, double *count);
/* Bytes of the buffers the handle allocated (indices, clipping factors, sums, layer
 * offsets; not the ledger): fixed at dpt_sgm_new, independent of the batch size. */
size_t dpt_sgm_scratch_bytes(const dpt_sgm *m);
/* The clipped sum [dim] accumulated so far for the pending batch (view, before noise) and
 * *rows its rows (0 and the view's content unspecified when none were accumulated). */
const double *dpt_sgm_accumulated(const dpt_sgm *m, size_t *rows);
#endif
