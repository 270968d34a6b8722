/* accounting: privacy of the Poisson-sampled Gaussian mechanism (add/remove adjacency):
 * RDP with Balle/classic conversions, a PLD accountant, sigma calibration, and a ledger of
 * heterogeneous events saved as versioned, checksummed JSON.
 * Memory: ledgers -> dpt_ledger_free; dpt_ledger_to_json strings -> free(); orders static.
 * Threads: reentrant, except PLD calls (FFTW's planner): never run those concurrently. */
#ifndef DPTRAIN_ACCOUNTING_H
#define DPTRAIN_ACCOUNTING_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== RDP of the sampled Gaussian mechanism ==== */

/* RDP (in nats) of one step of the Poisson-sampled Gaussian mechanism with sampling rate
 * q in (0, 1], noise multiplier sigma > 0 (noise std / L2 sensitivity) and order
 * alpha > 1: D_alpha((1-q) N(0,s^2) + q N(1,s^2) || N(0,s^2)), which is the larger of the
 * two orderings (Mironov, Talwar, Zhang 2019, Thm. 4-5). Integer alpha: exact binomial
 * expansion summed in log space; fractional alpha: the two-sided series of Sec. 3.3 of the
 * same paper with signed log-sum-exp. q == 1 gives alpha / (2 sigma^2).
 * Errors: DPT_EINVAL (argument out of range), DPT_ERANGE (series did not converge). */
dpt_status dpt_rdp_sgm(double q, double sigma, double alpha, double *rdp);
/* Same, but always through the fractional-order series (also at integer alpha). Exposed
 * so that tests can check the series against the exact binomial sum. */
dpt_status dpt_rdp_sgm_series(double q, double sigma, double alpha, double *rdp);

typedef enum { DPT_CONV_BALLE = 0, DPT_CONV_CLASSIC = 1 } dpt_conversion;

/* Default order grid: 1.1..10.9 step 0.1, 11..64, then sparser up to 1024 (static array;
 * do not free). *n receives its length. */
const double *dpt_rdp_default_orders(size_t *n);

/* epsilon for the total RDP curve rdp[i] at orders[i] (i < n) and delta in (0, 1):
 * BALLE: Balle et al. 2020 "Hypothesis testing interpretations and Renyi DP", Thm. 21:
 *   eps = rdp + log((alpha-1)/alpha) - (log(delta) + log(alpha)) / (alpha - 1)
 * CLASSIC: Mironov 2017 Prop. 3: eps = rdp - log(delta) / (alpha - 1).
 * Minimized over the orders, clamped at 0. best_order, at_edge may be NULL; *at_edge = 1
 * when the minimizing order is the first or last of the grid (extend the grid).
 * Orders must be > 1 and finite; rdp values >= 0 (+inf allowed: order unusable). */
dpt_status dpt_rdp_to_epsilon(const double *orders, const double *rdp, size_t n, double delta,
                              dpt_conversion conv, double *eps, double *best_order,
                              int *at_edge);

/* epsilon after `steps` >= 1 steps of SGM(q, sigma); orders == NULL uses the default grid.
 * best_order may be NULL. */
dpt_status dpt_rdp_sgm_epsilon(double q, double sigma, uint64_t steps, double delta,
                               dpt_conversion conv, const double *orders, size_t n_orders,
                               double *eps, double *best_order);
/* Same, also reporting whether the best order is at an edge of the grid (at_edge may be
 * NULL). */
dpt_status dpt_rdp_sgm_epsilon_ex(double q, double sigma, uint64_t steps, double delta,
                                  dpt_conversion conv, const double *orders, size_t n_orders,
                                  double *eps, double *best_order, int *at_edge);

/* ==== PLD accountant ==== */

/* Upper bounds on epsilon(delta) / delta(epsilon) after `steps` steps of SGM(q, sigma),
 * from a discretized privacy loss distribution whose every hockey-stick divergence is at
 * least the true one (convex "connect-the-dots" split, Doroshenko et al. 2022), composed
 * by FFT (FFTW) with repeated squaring; tails are truncated pessimistically. Both
 * directions of add/remove adjacency are composed and the worse one is reported.
 * Errors: DPT_EINVAL, DPT_ENOMEM. */
dpt_status dpt_pld_sgm_epsilon(double q, double sigma, uint64_t steps, double delta, double *eps);
dpt_status dpt_pld_sgm_delta(double q, double sigma, uint64_t steps, double eps, double *delta);
/* Discretization of the PLD accountant (defaults: grid 1e-4 nats, 16384 points). A finer
 * grid and more points only tighten the bound (and cost time). */
typedef struct {
    double grid;       /* finest loss grid interval in nats, in [1e-9, 1] */
    size_t max_points; /* the grid is coarsened (h -> 2h) beyond this many points, >= 64 */
} dpt_pld_options;
dpt_status dpt_pld_sgm_epsilon_ex(double q, double sigma, uint64_t steps, double delta,
                                  const dpt_pld_options *opt, double *eps);

/* ==== Noise calibration ==== */

typedef enum { DPT_ACCT_RDP = 0, DPT_ACCT_PLD = 1 } dpt_accountant;

/* Smallest sigma, to within tol > 0, with epsilon(q, sigma, steps, delta) <= target_eps:
 * the returned sigma satisfies the target, sigma - tol does not. Bracketing then
 * bisection in sigma over [0.05, 1e4]. conv is used by the RDP accountant only.
 * Errors: DPT_EINVAL, DPT_ERANGE (target unreachable in the searched range). */
dpt_status dpt_calibrate_sigma(double q, uint64_t steps, double delta, double target_eps,
                               dpt_accountant acct, dpt_conversion conv, double tol,
                               double *sigma);

/* ==== Ledger ==== */

/* An ordered list of privacy events plus string metadata. Consecutive identical events
 * are stored as one event with a count. */
typedef struct dpt_ledger dpt_ledger;

dpt_status dpt_ledger_new(dpt_ledger **out);
void dpt_ledger_free(dpt_ledger *l); /* accepts NULL */
/* Appends `count` >= 1 steps of SGM(q, sigma); merges with the last event when identical. */
dpt_status dpt_ledger_add_sgm(dpt_ledger *l, double q, double sigma, uint64_t count);
/* One Gaussian mechanism release with L2 sensitivity > 0 and noise std sigma > 0 (so the
 * noise multiplier is sigma / sensitivity). label may be NULL. Merged when identical. */
dpt_status dpt_ledger_add_gaussian(dpt_ledger *l, double sensitivity, double sigma,
                                   const char *label);
/* `count` repetitions of an event with its own per-step RDP curve rdp[i] at orders[i]
 * (orders strictly increasing, > 1; rdp >= 0). Copied. At an order that is not in the
 * curve, the value at the next larger curve order is used (RDP is non-decreasing in the
 * order), and orders above the curve are unusable. */
dpt_status dpt_ledger_add_rdp_curve(dpt_ledger *l, const double *orders, const double *rdp,
                                    size_t n, uint64_t count, const char *label);
/* An (eps, delta)-DP release (eps >= 0, delta in [0, 1)). Composed with the rest by basic
 * composition: eps adds, delta adds (so the RDP part gets delta - sum of these deltas). */
dpt_status dpt_ledger_add_eps_delta(dpt_ledger *l, double eps, double delta, const char *label);
uint64_t dpt_ledger_steps(const dpt_ledger *l); /* total SGM and DP-ULR steps recorded */
size_t dpt_ledger_n_events(const dpt_ledger *l); /* stored (merged) events */
/* Free-form metadata; set replaces; key non-empty. The returned pointer is owned by the
 * ledger, valid until the key is set again or the ledger is freed. */
dpt_status dpt_ledger_set_meta(dpt_ledger *l, const char *key, const char *value);
const char *dpt_ledger_get_meta(const dpt_ledger *l, const char *key); /* NULL if absent */

/* epsilon of everything recorded, for a target delta in (0, 1). PLD applies only when all
 * events are SGM or Gaussian (else DPT_ENOTSUP). An empty ledger has epsilon 0. */
dpt_status dpt_ledger_epsilon(const dpt_ledger *l, double delta, dpt_accountant acct,
                              dpt_conversion conv, double *eps);
/* RDP version with an explicit order grid (NULL = default) and the best order / edge flag
 * (either may be NULL; best_order is 0 when no RDP event was recorded). */
dpt_status dpt_ledger_epsilon_rdp(const dpt_ledger *l, double delta, dpt_conversion conv,
                                  const double *orders, size_t n_orders, double *eps,
                                  double *best_order, int *at_edge);
/* 1 when the PLD accountant applies (only SGM / Gaussian events). */
int dpt_ledger_pld_applies(const dpt_ledger *l);

/* JSON: {"format": "dptrain-ledger", "version": 1, ..., "checksum": "sha256:..."}; the
 * checksum covers the canonical (unformatted) serialization of everything else, so equal
 * ledgers serialize identically and an edited file is refused. *json_out: free(). */
dpt_status dpt_ledger_to_json(const dpt_ledger *l, char **json_out);
/* Parses and validates every field (DPT_EFORMAT with a message naming the problem). */
dpt_status dpt_ledger_from_json(const char *json, dpt_ledger **out);
/* File versions; save is atomic (dpt_write_file_atomic); errors name the path. */
dpt_status dpt_ledger_save(const dpt_ledger *l, const char *path);
dpt_status dpt_ledger_load(const char *path, dpt_ledger **out);


/* ==== DP-ULR: Poisson sampling with rejection (dpulr.c) ====
 * Each example is drawn with probability q and the whole batch is redrawn while it has
 * fewer than N_B examples (1 <= N_B <= qN). Per step (Theorems 3.5-3.6 and Eq. 38 of the
 * DP-ULR paper, with Nbar = N - 1 for a dataset of N examples):
 *   gamma(alpha) = ln(1 + q p(N_B - 1; Nbar, q) / (1 - P(N_B - 1; Nbar, q)))   rejection term
 *                + RDP_SGM(q, sigma0, alpha)                                    exact SGM RDP
 * p, P: Binomial(Nbar, q) pmf and cdf, in log space. The paper's closed form
 * 2 q^2 alpha / sigma0^2 for the second term is replaced by the exact SGM RDP (see
 * docs/dpulr.md). Errors name --min-batch for N_B outside [1, qN]. */
/* the order at which the ratio rejection / SGM is judged (Figure 2 of the paper) */
#define DPT_DPULR_RATIO_ALPHA 1.1
double dpt_binom_logpmf(uint64_t n, double q, uint64_t k);
dpt_status dpt_dpulr_rejection_term(double q, uint64_t N, uint64_t N_B, double *term);
/* gamma at one order; rejection, sgm (may be NULL) receive the two terms. */
dpt_status dpt_dpulr_rdp(double q, double sigma0, uint64_t N, uint64_t N_B, double alpha,
                         double *gamma, double *rejection, double *sgm);
/* epsilon after `steps` steps (default order grid); best_order may be NULL. */
dpt_status dpt_dpulr_epsilon(double q, double sigma0, uint64_t N, uint64_t N_B,
                             uint64_t steps, double delta, dpt_conversion conv, double *eps,
                             double *best_order);
/* Largest N_B in [1, qN] whose rejection term is <= max_ratio times the SGM term at order
 * DPT_DPULR_RATIO_ALPHA (the SGM RDP is smallest there, so the bound holds at every
 * larger order). When even N_B = 1 exceeds it, *N_B = 1 and *ratio tells by how much. */
dpt_status dpt_dpulr_default_min_batch(double q, double sigma0, uint64_t N, double max_ratio,
                                       uint64_t *N_B, double *ratio);
/* Ledger event "dpulr": `count` steps of the mechanism above (evaluated exactly at every
 * order; counted in dpt_ledger_steps like SGM steps; RDP accountant only). */
dpt_status dpt_ledger_add_dpulr(dpt_ledger *l, double q, double sigma0, uint64_t N,
                                uint64_t N_B, uint64_t count);
#ifdef __cplusplus
}
#endif
#endif
