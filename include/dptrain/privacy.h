/* privacy: the mechanisms of DP-SGD (Abadi et al. 2016) that do not depend on a model:
 * clipping factors from per-example squared norms (flat, or per layer with a split of C),
 * and Gaussian noise N(0, sigma^2 C^2) added to a flat clipped sum from the noise stream.
 * Each fast function has a naive reference beside it (`_ref`), which documents the math.
 * Also the releases made before training: DP-PCA, a DP mean, DP normalization statistics.
 * Memory: callers own every buffer; nothing here allocates except the noise samplers'
 * internal chunk buffers (freed before return) and the normalizer that
 * dpt_dp_normalizer_fit returns (dpt_normalizer_free).
 * Thread safety: pure functions; the noise functions use the caller's dpt_rng exclusively.
 * Errors: DPT_EINVAL naming the parameter (C, sigma, k, ...); DPT_ECRYPTO when libcrypto
 * fails to provide the noise stream. */
#ifndef DPTRAIN_PRIVACY_H
#define DPTRAIN_PRIVACY_H
#include <dptrain/core.h>
#include <dptrain/data.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

/* ==== Clipping ==== */
typedef enum {
    DPT_CLIP_FLAT = 0,     /* ||g_i|| over all parameters <= C                          */
    DPT_CLIP_PER_LAYER = 1 /* ||g_{i,l}|| <= C_l per parameter layer, sqrt(sum C_l^2) = C */
} dpt_clip_mode;

/* Parses "flat" | "per-layer". */
dpt_status dpt_clip_mode_parse(const char *s, dpt_clip_mode *out);

/* Clipping factors c[i] = min(1, C / ||g_i||) from squared norms sqnorm[i] = ||g_i||^2
 * (i < B); c[i] = 1 for a zero gradient. The clipped gradient c_i g_i has norm exactly
 * min(||g_i||, C) (to float rounding). Errors: C not finite or <= 0, or a negative squared
 * norm, DPT_EINVAL; a NaN or infinite squared norm (a diverged model), DPT_ERANGE naming the
 * index and saying to lower the learning rate. c[] is then partly written. Callers need no
 * scan of their own for non-finite norms. */
dpt_status dpt_privacy_clip_factors(const float *sqnorm, size_t B, double C, float *c);
/* Reference: double arithmetic, one example at a time; the same errors. */
dpt_status dpt_privacy_clip_factors_ref(const float *sqnorm, size_t B, double C, float *c);

/* The stated per-layer split of C over G parameter layers: C_l = C / sqrt(G) (so that the
 * whole clipped gradient has norm <= sqrt(sum_l C_l^2) = C, the flat sensitivity). */
dpt_status dpt_privacy_split_equal(double C, size_t G, double *C_l);

/* Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy, NeurIPS 2021; docs/dpsgd.md,
 * "Adaptive clipping"): a step releases the clipped gradient sum with noise multiplier
 * sigma_Delta (std sigma_Delta C_t) and the centred count sum_i (1[||g_i|| <= C_t] - 1/2)
 * with noise std sigma_b (sensitivity 1/2); as one Poisson-sampled Gaussian mechanism on the
 * joint vector this is SGM(q, sigma) with 1/sigma^2 = 1/sigma_Delta^2 + 1/(2 sigma_b)^2, so
 *   *sigma_grad = sigma_Delta = (sigma^-2 - (2 sigma_b)^-2)^(-1/2).
 * DPT_EINVAL when sigma or sigma_b is not finite and > 0, or when 2 sigma_b <= sigma (the
 * count alone would spend the whole budget: no noise would be left for the gradient); the
 * message gives the smallest sigma_b that leaves a finite sigma_Delta. */
dpt_status dpt_privacy_adaptive_sigma(double sigma, double sigma_b, double *sigma_grad);

/* Per-layer factors: sqnorms [G, B] (layer-major, as dpt_model_layer_sqnorms writes them),
 * C_l [G]; c [G, B] with c[l*B + i] = min(1, C_l / ||g_{i,l}||). Errors as
 * dpt_privacy_clip_factors, the message prefixed with "parameter layer l". */
dpt_status dpt_privacy_clip_factors_layers(const float *sqnorms, size_t G, size_t B,
                                           const double *C_l, float *c);

/* Reference clipping of materialized per-example gradients, in place: g [B, ld] rows of P
 * floats; each row is scaled by min(1, C / ||g_i||) computed in double. If norms is not
 * NULL it receives the unclipped norms [B]. A non-finite row is DPT_ERANGE (a diverged
 * model), as in dpt_privacy_clip_factors. */
dpt_status dpt_privacy_clip_rows_ref(float *g, size_t B, size_t P, size_t ld, double C,
                                     double *norms);

/* ==== Gaussian noise (the Gaussian mechanism) ====
 * sum[j] += N(0, (sigma C)^2) for j < n, drawn from `noise` (stream DPT_STREAM_NOISE only).
 *   fast:   ziggurat over disjoint counter chunks on `threads` threads (dpt_rng_gauss_fill);
 *           the result does not depend on the thread count.
 *   secure: the sum is first rounded to the lattice h Z, h = sigma C 2^-k, then exact
 *           discrete Gaussian lattice noise (Canonne, Kamath and Steinke 2020: this
 *           function is always exact; dpt_privacy_noise_add_secure_ex offers the fast
 *           table sampler with its accounted distance), sampled
 *           with integer arithmetic only from the ChaCha20 stream, is added: the output
 *           h (round(sum / h) + Z) is a function of a lattice point, so neither the
 *           sampler's floating-point artefacts (Mironov 2012; Jin et al. 2022) nor the
 *           sum's position between lattice points leak. The rounding raises the L2
 *           sensitivity from C to C + sqrt(n) h (dpt_privacy_secure_sigma_eff gives the
 *           noise multiplier the accountant must use). See docs/dpsgd.md. Chunks of DPT_RNG_CHUNK coordinates read
 *           their own reserved substreams on `threads` threads (0 = all cores): the result
 *           does not depend on the thread count.
 *   ref:    exact double Box-Muller, one element at a time.
 * sigma >= 0, C > 0 (sigma = 0 adds nothing and draws nothing). */
dpt_status dpt_privacy_noise_add(dpt_rng *noise, float *sum, size_t n, double sigma, double C,
                                 int threads);
/* sum[j] = scale * (sum[j] + N(0, (sigma C)^2)): dpt_privacy_noise_add's draws and the
 * division by the expected batch size in one pass (scale finite; 1 = noise_add). */
dpt_status dpt_privacy_noise_add_scaled(dpt_rng *noise, float *sum, size_t n, double sigma, double C,
                                        double scale, int threads);
dpt_status dpt_privacy_noise_add_secure(dpt_rng *noise, float *sum, size_t n, double sigma,
                                        double C, int threads);
dpt_status dpt_privacy_noise_add_ref(dpt_rng *noise, float *sum, size_t n, double sigma,
                                     double C);

/* Noise multiplier relative to the secure mechanism's real sensitivity C + sqrt(n) h,
 * h = sigma C / 2^DPT_DGAUSS_LOG2_SCALE: sigma / (1 + sqrt(n) sigma 2^-k). Its inverse
 * (the sigma that reaches a given effective multiplier) is dpt_privacy_secure_sigma_for;
 * DPT_ERANGE when no sigma reaches it (sqrt(n) sigma_eff >= 2^k). */
double dpt_privacy_secure_sigma_eff(double sigma, size_t n);
dpt_status dpt_privacy_secure_sigma_for(double sigma_eff, size_t n, double *sigma);

/* One sample of the discrete Gaussian N_Z(0, s^2) on the integers for an integer scale
 * 1 <= s <= 2^14 (Canonne, Kamath and Steinke 2020, Algorithm 3), exact: integer
 * arithmetic and Bernoulli(exp(-gamma)) trials on unbiased uniform integers only.
 * s = 0 returns 0 (N_Z(0, 0), the point mass; no draw). s > 2^14 aborts (DPT_ASSERT): the
 * exact arithmetic would overflow 64 bits, every int64 is a possible sample so no value
 * can signal the error, and a smaller scale would add less noise than asked; callers keep
 * s <= 2^DPT_DGAUSS_LOG2_SCALE. */
#define DPT_DGAUSS_LOG2_SCALE 14 /* the secure grid is (sigma C) 2^-14 Z (the CKS sampler's maximum) */
int64_t dpt_privacy_discrete_gauss(dpt_rng *r, uint32_t s);

/* sum[j] += N(0, (sigma C)^2) for j < n on a double-precision released sum (the DP mean's,
 * the DP normalization statistics'): fast: the draws of dpt_privacy_noise_add, added in
 * double; secure: the lattice mechanism of dpt_privacy_noise_add_secure (its CKS draws) on
 * the double sum itself, output in double (never rounded to float first; record the
 * multiplier dpt_privacy_secure_sigma_eff(sigma, n)). sigma >= 0 (0: nothing added,
 * noise may then be NULL), C > 0. */
dpt_status dpt_privacy_noise_add_sum(dpt_rng *noise, double *sum, size_t n, double sigma, double C, int secure,
                                     int threads);
/* The samplers of the secure noise Z ~ N_Z(0, s^2), s = 2^DPT_DGAUSS_LOG2_SCALE:
 *   DPT_DGAUSS_TABLE ("table", the trainers' default): rejection from a table-driven
 *     proposal in constant time, ~40x faster than CKS; its distribution is not exactly
 *     N_Z(0, s^2) but within a distance computed exactly at start-up (see
 *     dpt_privacy_secure_distance) that the ledger accounts (dpt_ledger_add_sgm_dgauss);
 *   DPT_DGAUSS_CKS ("cks"): the exact sampler above, the reference (distance 0). */
typedef enum { DPT_DGAUSS_TABLE = 0, DPT_DGAUSS_CKS = 1 } dpt_dgauss_method;
/* "table" | "cks"; DPT_EINVAL naming the accepted names otherwise. */
dpt_status dpt_dgauss_method_parse(const char *name, dpt_dgauss_method *out);
const char *dpt_dgauss_method_name(dpt_dgauss_method m); /* static string */
/* Per coordinate of the secure noise of `method`, against the exact N_Z(0, s^2):
 * *mu = max over z of |ln(P_method(z) / P_exact(z))| on the method's support (after moving
 * the truncated mass tv, see docs/dpsgd.md), *tv = total variation not covered by mu. Both
 * 0 for CKS. The accountant turns them into an RDP and a delta term per coordinate and step.
 * Errors: DPT_EINVAL (unknown method), DPT_ERANGE (the table failed its own check). */
dpt_status dpt_privacy_secure_distance(dpt_dgauss_method method, double *mu, double *tv);
/* sum[j] = scale * h (round(sum[j] / h) + Z_j), the secure mechanism of
 * dpt_privacy_noise_add_secure with the sampler `method` and the division by the expected
 * batch size fused (scale finite; 1 = plain). Chunks of DPT_RNG_CHUNK coordinates read
 * their own reserved substreams: the result does not depend on the thread count. With
 * DPT_DGAUSS_TABLE the caller must account dpt_privacy_secure_distance's (mu, tv) for the
 * n coordinates (the trainers do, through dpt_ledger_add_sgm_dgauss). */
dpt_status dpt_privacy_noise_add_secure_ex(dpt_rng *noise, float *sum, size_t n, double sigma, double C,
                                           double scale, dpt_dgauss_method method, int threads);

/* ==== DP-PCA (Analyze Gauss; Dwork et al. 2014) ====
 * Rows x_i of X [n, d] are scaled to unit L2 norm (zero rows stay zero). With add/remove
 * neighbours the Gram matrix G = sum_i x_i x_i^T changes by x x^T, whose upper triangle
 * (the released entries) has L2 norm <= ||x||^2 <= 1: releasing G + E with E symmetric,
 * E_ij = E_ji ~ N(0, sigma^2) drawn once for j >= i, is a Gaussian mechanism with
 * sensitivity 1 and noise multiplier sigma (one dpt_ledger_add_gaussian(l, 1, sigma)).
 * The eigenvectors of (G + E) / n are post-processing. No data-dependent centring is done
 * here (centring by the exact data mean, as the DP-MAC authors' code does, is a release
 * of its own that no accountant covers); a sound centring is dpt_dp_mean + dpt_dp_center
 * on the rows first (below), its own Gaussian release in the same ledger. */
/* The noise stream must be a DPT_STREAM_NOISE stream; to keep it independent of the
 * training noise of the same run, seed it with dpt_dp_pca_seed(seed). */
static inline uint64_t dpt_dp_pca_seed(uint64_t seed) { return seed ^ 0x9E3779B97F4A7C15ull; }
/* G [d, d] (row-major, full symmetric) = sum of the unit-normalized rows' outer products. */
dpt_status dpt_dp_pca_gram(const float *X, size_t n, size_t d, double *G);
/* A [d, d] = G + E (symmetric noise, std sigma >= 0; sigma = 0: none, not private), drawn
 * from `noise` (fast Gaussian, or the exact discrete Gaussian when secure: then the
 * lattice rounding raises the sensitivity, and the ledger must record the multiplier
 * dpt_privacy_secure_sigma_eff(sigma, d (d + 1) / 2) with sensitivity 1). */
dpt_status dpt_dp_pca_noisy_gram(const float *X, size_t n, size_t d, double sigma, dpt_rng *noise,
                                 int secure, int threads, double *A);
/* Top-k eigenvectors of the noisy (G + E) / n: V [d, k] row-major (column c = the c-th
 * largest eigenvalue's unit eigenvector, sign fixed so its largest-magnitude entry is
 * positive), eigenvalues evals [k] descending (may be NULL). 1 <= k <= d. */
dpt_status dpt_dp_pca_fit(const float *X, size_t n, size_t d, size_t k, double sigma, dpt_rng *noise,
                          int secure, int threads, double *V, double *evals);
/* out [n, k] = unit-normalized rows of X times V (the same preprocessing as the fit). */
dpt_status dpt_dp_pca_project(const float *X, size_t n, size_t d, const double *V, size_t k, float *out);
/* out [n, k] = the rows of X as they are times V (no unit normalization: the features keep
 * the data's scale, as the DP-MAC authors' code projects). Post-processing of the released
 * V like dpt_dp_pca_project; the training's own clipping bounds each row's influence. */
dpt_status dpt_dp_pca_project_raw(const float *X, size_t n, size_t d, const double *V, size_t k, float *out);

/* ==== DP mean (optional centring before DP-PCA) ====
 * mu = [sum_i clip_C(x_i) + N(0, (sigma C)^2 I_d)] / n, clip_C(x) = x min(1, C / ||x||_2).
 * Adding or removing one row changes the clipped sum by clip_C(x), L2 norm <= C: one
 * Gaussian mechanism with sensitivity C and std sigma C (ledger:
 * dpt_ledger_add_gaussian(l, C, sigma C), i.e. multiplier sigma). The division by n treats
 * the dataset size as public (as the sampling rate q = B/N of the training accountant
 * does). Rows longer than C are shrunk, which biases mu towards 0: choose C near the
 * largest row norm. secure: the sum is rounded to the lattice and the exact discrete
 * Gaussian is added (record dpt_privacy_secure_sigma_eff(sigma, d) as the multiplier).
 * Centring by mu and then DP-PCA is an adaptive composition of the two Gaussian
 * mechanisms (the Gram matrix of the unit-normalized centred rows still has sensitivity 1
 * for every fixed mu). Noise: a DPT_STREAM_NOISE stream, e.g. seeded dpt_dp_mean_seed. */
static inline uint64_t dpt_dp_mean_seed(uint64_t seed) { return seed ^ 0xD1B54A32D192ED03ull; }
/* sum [d] = sum_i clip_C(x_i) (the pre-noise release; for tests), *clipped = rows shrunk
 * (may be NULL). */
dpt_status dpt_dp_mean_sum(const float *X, size_t n, size_t d, double C, double *sum, size_t *clipped);
/* mu [d] as above; sigma >= 0 (0: no noise, not private), n >= 1. */
dpt_status dpt_dp_mean(const float *X, size_t n, size_t d, double C, double sigma, dpt_rng *noise, int secure,
                       int threads, double *mu, size_t *clipped);
/* X [n, d] -= mu (every row), in place. */
dpt_status dpt_dp_center(float *X, size_t n, size_t d, const double *mu);

/* ==== DP normalization statistics ====
 * A differentially private replacement for dpt_normalizer_fit. For mode SCALAR (K = 1
 * group of all dim features), PER_CHANNEL (K = shape[0] groups of dim / K contiguous
 * features) or PER_FEATURE (K = dim groups of one feature), example i gives
 *   v_i = (a_i1 .. a_iK, b_i1 .. b_iK),  a_ic = mean of x_ij, b_ic = mean of x_ij^2
 * over group c's features, clipped to L2 norm C: clip_C(v_i) = v_i min(1, C / ||v_i||).
 * The release is S = sum_i clip_C(v_i) + N(0, (sigma C)^2 I_2K). Adding or removing one
 * example moves the clipped sum by clip_C(v), norm <= C: one Gaussian mechanism with
 * sensitivity C and noise multiplier sigma (ledger: dpt_ledger_add_gaussian(l, 1, sigma);
 * secure: the multiplier dpt_privacy_secure_sigma_eff(sigma, 2K)). The statistics are
 * post-processing, with the dataset size n treated as public (as q = B/N is):
 *   mean_c = S_a,c / n,  var_c = S_b,c / n - mean_c^2,
 *   std_c = sqrt(var_c) when var_c > max(1e-24, 3 sigma C / n), else 1 (a variance within
 *   three noise standard deviations of 0: the group is treated as constant).
 * Values with |x| <= R give ||v_i|| <= sqrt(K (R^2 + R^4)); at that C nothing is clipped
 * (sqrt(2K) for pixels in [0, 1] or [-1, 1]). A smaller C lowers the noise but shrinks
 * the statistics of clipped examples towards 0. Noise: a DPT_STREAM_NOISE stream of its
 * own (e.g. seeded dpt_dp_norm_seed(seed)), OS-seeded in secure mode. docs/data.md. */
static inline uint64_t dpt_dp_norm_seed(uint64_t seed) { return seed ^ 0x6A09E667F3BCC909ull; }
/* K, the number of (mean, std) pairs of `mode` on d (0 for a bad mode or shape); the
 * release has 2K entries. */
size_t dpt_dp_norm_pairs(const dpt_dataset *d, int mode);
/* sums [2K] = sum_i clip_C(v_i) (the pre-noise release; for tests), *clipped = examples
 * shrunk (may be NULL). d finite, C > 0. */
dpt_status dpt_dp_norm_sums(const dpt_dataset *d, int mode, double C, double *sums, size_t *clipped);
/* released [2K] = the sums plus the Gaussian noise above (sigma >= 0; 0: no noise, not
 * private), drawn from `noise` (exact discrete Gaussian on the lattice when secure). */
dpt_status dpt_dp_norm_release(const dpt_dataset *d, int mode, double C, double sigma, dpt_rng *noise, int secure,
                               int threads, double *released, size_t *clipped);
/* The DP statistics of train as a normalizer (*out overwritten; dpt_normalizer_free it):
 * one release, then the post-processing above. */
dpt_status dpt_dp_normalizer_fit(const dpt_dataset *train, int mode, double C, double sigma, dpt_rng *noise,
                                 int secure, int threads, dpt_normalizer *out, size_t *clipped);

/* ==== DP channel statistics of features (frozen BatchNorm) ====
 * Tramer & Boneh 2021's normalization of ScatterNet features, as two Gaussian releases.
 * Features x [n, K, m] (K channels of m values each, channel-major per example); example i
 * gives the vector of its channels' means of x^p (p = 1: a_ic = mean_j x_icj; p = 2:
 * b_ic = mean_j x_icj^2), clipped to L2 norm C_p: u_i = v_i min(1, C_p / ||v_i||). Release
 * p is S_p = sum_i u_i + N(0, (sigma C_p)^2 I_K): adding or removing one example moves the
 * sum by at most C_p, so each release is one Gaussian mechanism with noise multiplier sigma
 * (secure: dpt_privacy_secure_sigma_eff(sigma, K)), two in the ledger together. The
 * statistics are post-processing with n public: mu_c = S_1c / n, var_c = max(S_2c / n -
 * mu_c^2, 0); the layer maps x -> (x - mu_c) / sqrt(var_c + 1e-5), and to 0 in a channel
 * whose released variance is 0 (as their code does). docs/nn.md "Frozen BatchNorm". */
/* sums [K] = sum_i u_i for power p (1 or 2; the pre-noise release, for tests); *clipped =
 * examples shrunk (may be NULL). x finite, C > 0, m >= 1. */
dpt_status dpt_dp_channel_sums(const float *x, size_t n, size_t K, size_t m, int p, double C, double *sums,
                               size_t *clipped);
/* scale [K], shift [K] of the map above from the released sums s1, s2 [K] over n examples:
 * scale_c = 1 / sqrt(var_c + 1e-5) and shift_c = -mu_c scale_c, or both 0 when var_c = 0. */
dpt_status dpt_dp_channel_affine(const double *s1, const double *s2, size_t K, double n, float *scale,
                                 float *shift);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
