/* accounting: privacy of the Poisson-sampled Gaussian mechanism (add/remove adjacency):
 * RDP with Balle/classic conversions, a PLD accountant, sigma calibration, and a ledger of
 * heterogeneous events saved as versioned, checksummed JSON.
 * Memory: ledgers -> dpt_ledger_free; dpt_ledger_to_json strings -> free(); orders static.
 * Threads: reentrant; PLD calls may run on several threads at once (FFTW's planner is
 * serialized by an internal lock; transforms run in parallel). A ledger is not locked:
 * one thread per ledger.
 * Errors: DPT_EINVAL naming the parameter (q, sigma, delta, steps, ...), DPT_ERANGE when a
 * series or a calibration does not converge, DPT_EFORMAT for a ledger file that does not
 * verify, DPT_ENOTSUP for an accountant that does not apply to the recorded events. */
#ifndef DPTRAIN_ACCOUNTING_H
#define DPTRAIN_ACCOUNTING_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/core.h"

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
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

/* DPT_ACCT_DEFAULT is the headline accountant: the one a run states its epsilon with,
 * calibrates a target epsilon with and stops at its budget with (trainer, dpt_sgm, CLI,
 * Python). Its epsilon is the smaller of the PLD accountant's (pessimistic discretization:
 * an upper bound), when every recorded event allows it (dpt_ledger_pld_applies; the SGM
 * steps calibration adds do), and the RDP accountant's with the conversion given: both are
 * upper bounds at the same delta, so their minimum is one. PLD is the smaller one in
 * practice; RDP wins only where the PLD grid loses too much mass to +infinity (very many
 * steps at small sigma). The other accountant's epsilon is reported beside it as a
 * cross-check (docs/accounting.md, "Which accountant"). */
typedef enum { DPT_ACCT_RDP = 0, DPT_ACCT_PLD = 1, DPT_ACCT_DEFAULT = 2 } dpt_accountant;

/* Smallest sigma, to within tol > 0, with epsilon(q, sigma, steps, delta) <= target_eps:
 * the returned sigma satisfies the target, sigma - tol does not (a tol below the spacing
 * of doubles near sigma gives the closest double that satisfies it). Bracketing then
 * bisection in sigma over [0.05, 1e4]. conv is used by the RDP accountant only;
 * DPT_ACCT_DEFAULT: the smaller of the two at each sigma (Balle conversion only).
 * Errors: DPT_EINVAL, DPT_ERANGE (target unreachable in the searched range). */
dpt_status dpt_calibrate_sigma(double q, uint64_t steps, double delta, double target_eps,
                               dpt_accountant acct, dpt_conversion conv, double tol,
                               double *sigma);
/* The same under exactly the RDP order grid that will report the epsilon (orders NULL:
 * the default grid; PLD takes no grid). Calibrating on one grid and reporting on another
 * can report an epsilon above the target. */
dpt_status dpt_calibrate_sigma_ex(double q, uint64_t steps, double delta, double target_eps,
                                  dpt_accountant acct, dpt_conversion conv, const double *orders,
                                  size_t n_orders, double tol, double *sigma);

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
/* `count` steps of SGM(q, sigma) whose noise came from a sampler at a per-coordinate
 * distance (mu, tv) from the exact mechanism's (dpt_privacy_secure_distance), on `coords`
 * coordinates per step: RDP adds count coords mu (2 alpha - 1) / (alpha - 1) at each order,
 * the conversion to (eps, delta) spends (1 + e^eps) count coords tv of delta, and the PLD
 * accountant reports eps + 2 count coords mu at delta e^(count coords mu) (docs/dpsgd.md).
 * mu and tv in [0, 1), coords >= 1. Merged when identical. */
dpt_status dpt_ledger_add_sgm_dgauss(dpt_ledger *l, double q, double sigma, uint64_t coords, double mu,
                                     double tv, uint64_t count);
uint64_t dpt_ledger_steps(const dpt_ledger *l); /* total SGM (incl. sgm_dgauss) and DP-ULR steps recorded */
size_t dpt_ledger_n_events(const dpt_ledger *l); /* stored (merged) events */
/* Free-form metadata; set replaces; key non-empty. The returned pointer is owned by the
 * ledger, valid until the key is set again or the ledger is freed. */
dpt_status dpt_ledger_set_meta(dpt_ledger *l, const char *key, const char *value);
const char *dpt_ledger_get_meta(const dpt_ledger *l, const char *key); /* NULL if absent */
/* The qualifications of l's epsilon, for every line that prints it or a result of its run
 * (the epoch lines, the final line, eval): "" when none, else bracketed labels, each
 * preceded by two spaces. full = 1: "  [this epsilon does NOT cover: X]" (metadata
 * "epsilon_excludes"), "  [SEEDED run (a chosen seed): holds only while the seed stays
 * secret and no other run uses it]" (metadata "seed_source" "caller"), "  [floating-point
 * noise (secure = 0): ...]" (metadata "noise_float" "1", dpt_sgm only; compact "  [float
 * noise]"), "  [delta D >= 1/N accepted (force): ...]"
 * (metadata "delta_forced" D) and "  [ledger mismatch allowed: ...]" (a metadata key
 * "mismatch_allowed_at_step_*"); full = 0 the compact "  [epsilon does NOT cover: X]
 * [SEEDED]  [delta >= 1/N (forced)]  [ledger mismatch allowed]". l NULL: "". Truncated to
 * cap - 1 bytes (cap 0: nothing written). */
void dpt_ledger_label(const dpt_ledger *l, int full, char *buf, size_t cap);

/* epsilon of everything recorded, for a target delta in (0, 1). PLD applies only when all
 * events are SGM, sgm_dgauss or Gaussian (else DPT_ENOTSUP). An empty ledger has epsilon 0. */
dpt_status dpt_ledger_epsilon(const dpt_ledger *l, double delta, dpt_accountant acct,
                              dpt_conversion conv, double *eps);
/* RDP version with an explicit order grid (NULL = default) and the best order / edge flag
 * (either may be NULL; best_order is 0 when no RDP event was recorded). */
dpt_status dpt_ledger_epsilon_rdp(const dpt_ledger *l, double delta, dpt_conversion conv,
                                  const double *orders, size_t n_orders, double *eps,
                                  double *best_order, int *at_edge);
/* 1 when the PLD accountant applies (only SGM, sgm_dgauss and Gaussian events). */
int dpt_ledger_pld_applies(const dpt_ledger *l);
/* The headline epsilon (DPT_ACCT_DEFAULT) with its parts: *eps = min(*eps_rdp, *eps_pld),
 * *which = the accountant that gave it (DPT_ACCT_PLD on a tie), *eps_pld = NAN when PLD does
 * not apply or cannot state a bound (DPT_ERANGE: the secure sampler's distance over its share
 * of delta; RDP alone then). Any output but eps may be NULL. conv: for RDP. */
dpt_status dpt_ledger_epsilon_default(const dpt_ledger *l, double delta, dpt_conversion conv, double *eps,
                                      dpt_accountant *which, double *eps_rdp, double *eps_pld);
/* "rdp", "pld" or "default"; NULL for other values. */
const char *dpt_accountant_name(dpt_accountant acct);
/* *out = an independent copy of l (events and metadata); dpt_ledger_free it. */
dpt_status dpt_ledger_copy(const dpt_ledger *l, dpt_ledger **out);
/* dpt_calibrate_sigma on top of the releases already in `prior` (NULL or without events:
 * exactly dpt_calibrate_sigma's result): the smallest sigma, to within tol, such that prior +
 * `steps` steps of SGM(q, sigma) has epsilon(delta) <= target_eps under acct (conv for
 * RDP). prior is not modified. DPT_ERANGE when prior alone already spends target_eps, or
 * when no sigma in [0.05, 1e4] reaches it. */
dpt_status dpt_ledger_calibrate_sgm(const dpt_ledger *prior, double q, uint64_t steps, double delta,
                                    double target_eps, dpt_accountant acct, dpt_conversion conv, double tol,
                                    double *sigma);

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
 * fewer than N_B examples (1 <= N_B <= qN); the clipped sum (norm <= C per example) plus
 * N(0, sigma0^2 C^2 I) is released. Per step, for neighbours of sizes n, n + 1 (n = N - 1
 * and N), with u = p(N_B; n, q) / P(X_n >= N_B), r = N_B (1 - q) / (n - N_B + 1),
 * p* = (q + r) / (1 + r), A = e^{(a-1) RDP_SGM(q, sigma0, a)}, B = e^{(a-1) RDP_SGM(p*, sigma0/2, a)}:
 *   e^{(a-1) gamma(a)} = max( (1 + r u)^{-a}  [(1 - u) A + u (1 + r)^a B],
 *                             (1 + r u)^{a-1} [(1 - u) A + u (1 + r)^{1-a} B] )
 * (proof: docs/dpulr.md; it replaces the paper's ln(c0/c1) + RDP_SGM(q, sigma0), which is
 * not an upper bound when N_B is near qN, issue 38). Errors name --min-batch for N_B
 * outside [1, qN]. */
/* the order at which the ratio rejection / SGM is judged (Figure 2 of the paper) */
#define DPT_DPULR_RATIO_ALPHA 1.1
double dpt_binom_logpmf(uint64_t n, double q, uint64_t k);
/* DPT_EINVAL unless q in (0, 1), N >= 2 and 1 <= N_B <= qN. */
dpt_status dpt_dpulr_check(double q, uint64_t N, uint64_t N_B);
/* gamma at one order; rejection = gamma - RDP_SGM(q, sigma0) >= 0 (what the rejection costs
 * over plain Poisson sampling) and sgm = RDP_SGM(q, sigma0); each may be NULL. */
dpt_status dpt_dpulr_rdp(double q, double sigma0, uint64_t N, uint64_t N_B, double alpha,
                         double *gamma, double *rejection, double *sgm);
/* gamma at each of orders[0..n-1] into out[n] (+inf where no bound is computed). */
dpt_status dpt_dpulr_rdp_curve(double q, double sigma0, uint64_t N, uint64_t N_B,
                               const double *orders, size_t n, double *out);
/* epsilon after `steps` steps (default order grid); best_order may be NULL. */
dpt_status dpt_dpulr_epsilon(double q, double sigma0, uint64_t N, uint64_t N_B,
                             uint64_t steps, double delta, dpt_conversion conv, double *eps,
                             double *best_order);
/* Largest N_B in [1, qN] whose rejection cost (gamma - sgm above) is <= max_ratio times the
 * SGM term at order DPT_DPULR_RATIO_ALPHA. When even N_B = 1 exceeds it, *N_B = 1 and
 * *ratio tells by how much. Any N_B is accounted by the bound; this only picks a cheap one. */
dpt_status dpt_dpulr_default_min_batch(double q, double sigma0, uint64_t N, double max_ratio,
                                       uint64_t *N_B, double *ratio);
/* Ledger event "dpulr": `count` steps of the mechanism above (evaluated exactly at every
 * order; counted in dpt_ledger_steps like SGM steps; RDP accountant only). */
dpt_status dpt_ledger_add_dpulr(dpt_ledger *l, double q, double sigma0, uint64_t N,
                                uint64_t N_B, uint64_t count);
/* ==== KL privacy of noisy GD: closed forms of Ye et al., "Initialization Matters" ====
 * Fully connected ReLU network without biases, linear output layer, widths m_0 = d (input),
 * m_1 .. m_{L-1} (hidden), m_L = o (outputs), weights of layer l ~ N(0, beta_l). Arrays:
 * widths[0..L], beta[0..L-1] for layers 1..L. Depth L >= 2 everywhere (DPT_EINVAL). These
 * are BOUNDS AND ORDERS OF MAGNITUDE from the paper, none of them is an (epsilon, delta)
 * guarantee; see docs/kl_privacy.md for the constants. */
typedef enum { DPT_KLI_LECUN = 0, DPT_KLI_HE, DPT_KLI_XAVIER, DPT_KLI_NTK } dpt_kl_init;
/* "lecun" | "he" | "xavier" | "ntk" */
dpt_status dpt_kl_init_parse(const char *s, dpt_kl_init *out);
const char *dpt_kl_init_name(dpt_kl_init init);
/* Table 1's per-layer variances: LeCun 1/m_{l-1}, He 2/m_{l-1}, Xavier 2/(m_{l-1} + m_l),
 * NTK 2/m_l for l < L and 1/o for l = L. */
dpt_status dpt_kl_init_variances(dpt_kl_init init, const size_t *widths, size_t L, double *beta);
/* Eq. 7: B = d o (prod_{i=1}^{L-1} beta_i m_i / 2) sum_{l=1}^{L} beta_L / beta_l. By Lemma
 * C.3, E ||d f(x) / d W||_F^2 at initialization = (||x||^2 / d) B, so B is that expectation
 * at ||x||^2 = d, the bound of Assumption 2.2. */
dpt_status dpt_kl_gradient_constant(const size_t *widths, size_t L, const double *beta, double *B);
/* The closed forms printed in Table 1 for equal hidden widths m (for checking Eq. 7):
 * LeCun o m (L-1+d/m) / 2^{L-1}; He o m (L-1+d/m); NTK d m ((L-1)/2 + o/m);
 * Xavier o d (L-1+(d+o)/(2m)) / (2^{L-3} (1+d/m) (1+o/m)). */
dpt_status dpt_kl_gradient_constant_table1(dpt_kl_init init, double d, double o, double m, size_t L,
                                           double *B);
/* Corollary 4.2 (Eq. 8) for the linearized network after `steps` noisy-GD steps (T = eta
 * steps) on n records with replace-one neighbours:
 *   kl_bound_paper = 2 B T / (n^2 sigma^2)                      (Eq. 8 as printed)
 *   kl_bound       = r B T / (n^2 sigma^2)                      (this library's default)
 * kl_bound uses the exact per-step constant eta/(4 sigma^2) and the rigorous squared norm
 * r of the loss gradient in the outputs: r = 1 for o = 1 (logistic, |sigmoid - y| <= 1),
 * r = 2 for o >= 2 (softmax cross-entropy, ||softmax - onehot||^2 < 2), i.e. E||grad L(D) -
 * grad L(D')||^2 <= 4 r B / n^2 instead of the paper's 4 B / n^2. pinsker_tv =
 * dpt_pinsker_tv(kl_bound) bounds the total variation distance (Pinsker), nothing more. */
typedef struct {
    double B, T, r;
    double kl_bound, kl_bound_paper, pinsker_tv;
} dpt_kl_bound_result;
/* Pinsker's inequality TV <= sqrt(KL / 2), capped at 1 (no TV distance exceeds 1: a
 * larger value would be vacuous and read as a meaningful number). NAN for a negative or
 * NAN kl; 1 for +inf. */
double dpt_pinsker_tv(double kl);
dpt_status dpt_kl_linearized_bound(double B, size_t o, uint64_t steps, double eta, double sigma, size_t n,
                                   dpt_kl_bound_result *out);
/* Lemma 3.2 for the ReLU network: the bound on int_0^T E||grad L(W_t; D) - grad L(W_t; D')||^2
 * dt = 2 T G0 + 2 b^2 / (n^2 (2 + b^2)) ((e^{(2+b^2) T} - 1) / (2 + b^2) - T) (N0 + 2 sigma^2
 * rank + c^2) + 2 c^2 T / n^2, with G0 = E||grad L(W0;D) - grad L(W0;D')||^2, N0 =
 * E||grad L(W0; D)||^2, b, c the constants of its smoothness assumption and rank = rank(M_T).
 * *kl_exact = integral / (4 sigma^2) (exact Girsanov constant for dW = -grad dt +
 * sqrt(2 sigma^2) dB), *kl_paper = integral / (2 sigma^2) (the paper's Theorem 3.1). */
typedef struct {
    double T, sigma, n, b, c, rank, G0, N0;
} dpt_kl_lemma32_args;
dpt_status dpt_kl_lemma32(const dpt_kl_lemma32_args *a, double *integral, double *kl_exact, double *kl_paper);
/* Section 6, orders of magnitude (the O~ of the paper: log factors and constants dropped):
 * Eq. 9  R = max{1 / (d beta_L prod_{i<L} beta_i m_i), 1} n / sum_l 1/beta_l;
 * Cor. 6.4 for eps-KL privacy: T = sqrt(eps n R / (2 B)), sigma^2 = 2 B T / (eps n^2),
 *          excess empirical risk ~ 1/n^2 + sqrt(B R / (eps n)). */
dpt_status dpt_kl_lazy_distance(const size_t *widths, size_t L, const double *beta, size_t n, double *R);
dpt_status dpt_kl_tradeoff(double B, double R, size_t n, double eps, double *T, double *sigma, double *excess);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
