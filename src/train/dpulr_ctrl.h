/* The DP-ULR controller's fast route for the common case (docs/dpulr.md, "Controller"):
 * a certified lower bound on the smallest eigenvalue of a symmetric positive definite
 * matrix and an estimate of its largest, without a tridiagonal reduction. */
#ifndef DPT_DPULR_CTRL_H
#define DPT_DPULR_CTRL_H

#include <dptrain/core.h>

/* Relative shift below the inverse-iteration Rayleigh quotient that the certificate tries
 * (s_l^2 is at most this fraction below the exact Eq. 7 value, plus the rounding margin). */
#define DPT_ULR_CERT_SHIFT 1e-4

/* G: d x d symmetric (row-major, both triangles), in double. On DPT_OK:
 *   *lmin_cert <= lambda_min(G) (proved by a Cholesky factorization of G - mu I with a
 *   rounding margin; see the comment in dpulr_ctrl.c), *lmin_cert > 0;
 *   *lmax_est <= lambda_max(G) (power iteration: an estimate, from below);
 *   L [d, d]: the Cholesky factor of G itself as dpt_chol leaves it.
 * DPT_ERANGE (no error message set) when no certificate was obtained (G not numerically
 * positive definite, or inverse iteration not converged close enough): the caller must take
 * the full eigenvalue route. W: workspace [d, d]. Other errors: allocation. Runs LAPACK
 * (dpotrf, dpotrs) on the calling thread's OpenBLAS setting: callers hold it serial. */
dpt_status dpt_ulr_lmin_certified(size_t d, const double *G, double *L, double *W, double *lmin_cert,
                                  double *lmax_est);

#endif
