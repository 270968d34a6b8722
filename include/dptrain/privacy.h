/* privacy: the mechanisms of DP-SGD (Abadi et al. 2016) that do not depend on a model:
 * clipping factors from per-example squared norms (flat, or per layer with a split of C),
 * and Gaussian noise N(0, sigma^2 C^2) added to a flat clipped sum from the noise stream.
 * Each fast function has a naive reference beside it (`_ref`), which documents the math.
 * Memory: callers own every buffer; nothing here allocates except the noise samplers'
 * internal chunk buffers (freed before return).
 * Thread safety: pure functions; the noise functions use the caller's dpt_rng exclusively. */
#ifndef DPTRAIN_PRIVACY_H
#define DPTRAIN_PRIVACY_H
#include <dptrain/core.h>

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
 * (i < B); c[i] = 1 for a zero gradient. C > 0; NaN/negative norms are DPT_EINVAL. The
 * clipped gradient c_i g_i has norm exactly min(||g_i||, C) (to float rounding). */
dpt_status dpt_privacy_clip_factors(const float *sqnorm, size_t B, double C, float *c);
/* Reference: double arithmetic, one example at a time. */
dpt_status dpt_privacy_clip_factors_ref(const float *sqnorm, size_t B, double C, float *c);

/* The stated per-layer split of C over G parameter layers: C_l = C / sqrt(G) (so that the
 * whole clipped gradient has norm <= sqrt(sum_l C_l^2) = C, the flat sensitivity). */
dpt_status dpt_privacy_split_equal(double C, size_t G, double *C_l);

/* Per-layer factors: sqnorms [G, B] (layer-major, as dpt_model_layer_sqnorms writes them),
 * C_l [G]; c [G, B] with c[l*B + i] = min(1, C_l / ||g_{i,l}||). */
dpt_status dpt_privacy_clip_factors_layers(const float *sqnorms, size_t G, size_t B,
                                           const double *C_l, float *c);

/* Reference clipping of materialized per-example gradients, in place: g [B, ld] rows of P
 * floats; each row is scaled by min(1, C / ||g_i||) computed in double. If norms is not
 * NULL it receives the unclipped norms [B]. */
dpt_status dpt_privacy_clip_rows_ref(float *g, size_t B, size_t P, size_t ld, double C,
                                     double *norms);

/* ==== Gaussian noise (the Gaussian mechanism) ====
 * sum[j] += N(0, (sigma C)^2) for j < n, drawn from `noise` (stream DPT_STREAM_NOISE only).
 *   fast:   ziggurat over disjoint counter chunks on `threads` threads (dpt_rng_gauss_fill);
 *           the result does not depend on the thread count.
 *   secure: exact discrete Gaussian on the grid (sigma C) 2^-k Z (Canonne, Kamath and
 *           Steinke 2020), sampled with integer arithmetic only from the ChaCha20 stream,
 *           so no floating-point artefact of the sampler leaks the sum (Mironov 2012;
 *           Jin et al. 2022). See docs/dpsgd.md.
 *   ref:    exact double Box-Muller, one element at a time.
 * sigma >= 0, C > 0 (sigma = 0 adds nothing and draws nothing). */
dpt_status dpt_privacy_noise_add(dpt_rng *noise, float *sum, size_t n, double sigma, double C,
                                 int threads);
/* sum[j] = scale * (sum[j] + N(0, (sigma C)^2)): dpt_privacy_noise_add's draws and the
 * division by the expected batch size in one pass (scale finite; 1 = noise_add). */
dpt_status dpt_privacy_noise_add_scaled(dpt_rng *noise, float *sum, size_t n, double sigma, double C,
                                        double scale, int threads);
dpt_status dpt_privacy_noise_add_secure(dpt_rng *noise, float *sum, size_t n, double sigma,
                                        double C);
dpt_status dpt_privacy_noise_add_ref(dpt_rng *noise, float *sum, size_t n, double sigma,
                                     double C);

/* One sample of the discrete Gaussian N_Z(0, s^2) on the integers for an integer scale
 * 1 <= s <= 2^14 (Canonne, Kamath and Steinke 2020, Algorithm 3), exact: integer
 * arithmetic and Bernoulli(exp(-gamma)) trials on unbiased uniform integers only. */
#define DPT_DGAUSS_LOG2_SCALE 12 /* the secure grid is (sigma C) 2^-12 Z */
int64_t dpt_privacy_discrete_gauss(dpt_rng *r, uint32_t s);

#ifdef __cplusplus
}
#endif
#endif
