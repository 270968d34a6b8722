/* Internal: the secure lattice mechanism of dpt_privacy_noise_add_secure_ex (noise.c) on a
 * sum held in double. The releases whose sums run over many examples (DP normalization
 * statistics over a training set, dpt_sgm's accumulated batches) keep them in double: a
 * float32 copy has a step of |S| 2^-24, coarser than the lattice step sigma C 2^-14 once
 * |S| > 2^10 sigma C, and that rounding would move the output by more than the accounted
 * sensitivity allows. Here k = round(S / h) is taken from the double itself.
 * sum [n] in, scale h (k + Z) out in place (double); the same substreams, draws and
 * checks as the float entry point, so a sum that float32 holds exactly gives the lattice
 * point of dpt_privacy_noise_add_secure_ex (that function's output is this one rounded to
 * float). A NaN, infinite or too large coordinate: DPT_ERANGE naming it, before any draw.
 * Thread-safe as that function. */
#ifndef DPT_PRIVACY_LATTICE_H
#define DPT_PRIVACY_LATTICE_H

#include <dptrain/privacy.h>

#include "core/isa.h"

dpt_status dpt_lattice_release_double(dpt_rng *noise, double *sum, size_t n, double sigma, double C, double scale,
                                      dpt_dgauss_method method, int threads);

#if DPT_ISA_DISPATCH
dpt_status dpt_lattice_release_double_base(dpt_rng *noise, double *sum, size_t n, double sigma, double C,
                                           double scale, dpt_dgauss_method method, int threads);
dpt_status dpt_lattice_release_double_v3(dpt_rng *noise, double *sum, size_t n, double sigma, double C,
                                         double scale, dpt_dgauss_method method, int threads);
#endif

#endif
