/* DP-ULR on convolutions (issue 10 item 4): the conv-specific pieces of
 * src/train/algo_dpulr.c, kept apart so the Linear path stays as it is (docs/dpulr.md,
 * "Convolution modules").
 *
 * A conv module perturbs every element of the Conv2d output v_i [O, T] (O channels, T
 * positions) with z ~ N(0, s^2) (one s for all channels of the module: the controller's
 * matrix I_O (kron) A is the same block for every channel, so Eq. 7 gives the same s for
 * each). The LR estimate of example i is the conv weight gradient for the cotangent
 * c_i = (1/(K s^2)) sum_k L_ik z_ik [O, T]; its norm comes from the layer's SQNORM path
 * (ghost or materialized, as DP-SGD uses) and the clipped sum from one WEIGHTED call.
 * Controller: A = sum_i L0_i^2 sum_p xt_p xt_p^T over the unfolded patches p of x_i,
 * xt_p = [patch_p; 1] (n = C_in k^2 + has_bias), an n x n eigenproblem. The parameters
 * of a conv layer are W [O, Dk] then b [O], the Linear layout, so the top-up noise code
 * of the Linear path applies per output channel unchanged. */
#ifndef DPT_DPULR_CONV_H
#define DPT_DPULR_CONV_H

#include <dptrain/nn.h>

/* Floats of workspace dpt_ulr_conv_ctrl_add needs (any batch). */
size_t dpt_ulr_conv_ctrl_work(const dpt_layer *L);

/* A [n, n] (double, row-major, n = C_in k^2 + has_bias) += sum_i L0_i^2 sum_p xt_p xt_p^T
 * for the bc examples x [bc, in_dim]; work holds dpt_ulr_conv_ctrl_work(L) floats. */
void dpt_ulr_conv_ctrl_add(const dpt_layer *L, const float *x, const float *L0, size_t bc, double *A, float *work);

/* Eigen-decomposition of the controller matrix A [n, n] (destroyed; wev [n], Z [n, n]
 * double workspaces): the kept eigenvectors (eigenvalue > rel_tol lambda_max) as the
 * first *rank columns of U [n, n], their eigenvalues in lam [n]; *lmin (0 when rank < n)
 * and *lmax. */
dpt_status dpt_ulr_sym_eig(size_t n, double *A, double *wev, double *Z, double rel_tol, float *U, float *lam,
                           size_t *rank, double *lmin, double *lmax);

#endif
