/* mechanism: DP-SGD's sampled Gaussian mechanism over gradients the caller computes
 * ("bring your own gradients"): Poisson sampling of the batch, per-example clipping to L2
 * norm C, Gaussian noise N(0, sigma^2 C^2) on the clipped sum (or the secure lattice
 * mechanism), and a privacy ledger recording every step before anything is released.
 * Memory: dpt_sgm_new allocates the handle (dpt_sgm_free); the ledger it returns is a view.
 * A batch may be released from micro-batches (dpt_sgm_accumulate), so no [batch, dim] buffer
 * is ever needed.
 * Thread safety: one thread per dpt_sgm; different handles are independent.
 * Errors: DPT_EINVAL naming the field (dpt_sgm_config.clip) or parameter, DPT_EBUDGET when
 * a step would exceed target_epsilon, DPT_ERANGE for a non-finite gradient row,
 * DPT_EMISMATCH for a resumed ledger of other settings, DPT_EIO for the ledger file. */
#ifndef DPTRAIN_MECHANISM_H
#define DPTRAIN_MECHANISM_H
#include <dptrain/accounting.h>
#include <dptrain/core.h>
#include <dptrain/privacy.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

/* The mechanism, per step t (Abadi et al. 2016, Algorithm 1, with Poisson sampling):
 *   B_t   = {i : u_i < q}, each of the n examples independently with probability q;
 *   out_t = (sum_{i in B_t} g_i min(1, C / ||g_i||) + N(0, sigma^2 C^2 I_dim)) / (q n),
 * where g_i is the caller's gradient of example i. Adding or removing one example moves
 * the clipped sum by at most C, so each step is one SGM(q, sigma) event (add/remove
 * adjacency) and the ledger's epsilon covers every out_t (and everything computed from
 * them), under two assumptions only the caller can keep:
 *   - g_i is a function of example i alone (and of public values, such as the current
 *     parameters): a per-example gradient, never a batch statistic (batch norm across the
 *     batch, a gradient of a loss that mixes examples);
 *   - the batch indices stay secret: amplification by sampling rests on nobody learning
 *     who was sampled. Use them to pick the examples and nothing else.
 * The division by q n (not |B_t|) keeps the batch size, itself private, out of out_t. */
typedef struct dpt_sgm dpt_sgm; /* opaque */

typedef struct {
    size_t n;              /* examples in the private dataset, 1..2^32 - 1 (indices are uint32) */
    size_t dim;            /* floats in one (flattened) per-example gradient, >= 1 */
    double sample_rate;    /* Poisson q in (0, 1] (>= 2^-53); the expected batch is q n */
    double sigma;          /* noise multiplier (std / C) > 0; or 0 with target_epsilon > 0 and
                              steps > 0: calibrated (the default accountant, to 1e-4) so
                              that `steps` steps reach target_epsilon at delta (the secure mode
                              calibrates its effective multiplier, see secure; the table
                              sampler's distance, ~1e-15 per coordinate and step, is left out
                              of the calibration but not of the ledger or the budget) */
    double clip;           /* C > 0: each per-example gradient is scaled to L2 norm <= C */
    double delta;          /* delta of dpt_sgm_epsilon's default, of the budget and of the
                              calibration, in (0, 1) and < 1/n unless force (default 1e-5) */
    double target_epsilon; /* > 0: dpt_sgm_sample refuses (DPT_EBUDGET) a step that would take
                              the ledger's RDP epsilon at delta above it; 0: no budget */
    uint64_t steps;        /* planned steps of the whole run (resumed ones included), used only
                              to calibrate sigma; 0 = none. Not a limit. */
    uint64_t seed;         /* the sampling (DPT_STREAM_DATA) and noise (DPT_STREAM_NOISE)
                              streams when not secure; whoever knows it can recompute the batches
                              and the noise, so keep it as secret as the data. 0 (the default):
                              drawn from the OS at every dpt_sgm_new and never exposed, so
                              no two handles (two resumes of copies of one ledger file
                              included) share a batch or a noise draw; another value makes
                              the run reproducible, and then two handles resumed from copies
                              of one ledger at the same step draw the same batch and noise.
                              The ledger's metadata says which (seed_source "os" / "caller") */
    int secure;            /* 1 (the default): as DP-SGD's secure mode (dpt_dpsgd_config.secure): OS-seeded
                              streams (seed unused), Poisson membership from a 64-bit integer
                              comparison (dpt_sampler_new_secure), and the discrete Gaussian
                              lattice mechanism (dpt_privacy_noise_add_secure_ex) whose rounding
                              raises the sensitivity: the ledger records the effective multiplier
                              dpt_privacy_secure_sigma_eff(sigma, dim), and with the table sampler
                              its distance (dpt_ledger_add_sgm_dgauss), exactly as DP-SGD does.
                              0: floating-point Gaussian noise on the seeded (or OS-seeded)
                              streams, reproducible with a seed; out_t is the noisy sum itself, in
                              which such a sampler's artefacts can give a member away (Mironov
                              2012; a test that knows the other examples' sum tells the two
                              neighbours apart in one release), so the ledger's metadata
                              "noise_float" labels every epsilon of it (dpt_ledger_label). A
                              seed with secure is refused (DPT_EINVAL), as is adaptive clipping */
    dpt_dgauss_method secure_sampler; /* secure: DPT_DGAUSS_TABLE (default, as DP-SGD) or _CKS */
    int threads;           /* OpenMP threads of release (0 = all cores); results do not depend on it */
    const char *ledger_path; /* NULL, or a file that holds the ledger (JSON, dpt_ledger_load),
                              written atomically (temporary file, fsync, rename, directory fsync)
                              by every dpt_sgm_sample before it returns. Copied. One dpt_sgm
                              per file at a time: an exclusive flock on ledger_path + ".lock"
                              (created, and left in place) is held until dpt_sgm_free; DPT_EBUSY
                              when another handle holds it. The lock file also records the
                              ledger's id and the most steps it recorded: a resume of an older
                              copy put back at the path is refused (DPT_EMISMATCH). Stale
                              temporaries of a process killed mid-write are removed at open */
    int resume;            /* with ledger_path: continue the ledger in that file, which must be
                              one of a dpt_sgm of the same n, dim, q, sigma (as accounted), C and
                              secure mode (DPT_EMISMATCH naming each difference otherwise);
                              without resume an existing file is refused (DPT_EINVAL), so a run
                              never loses the record of an earlier one */
    int force;             /* 1: accept delta >= 1/n (such a delta allows publishing an example) */
    dpt_clip_mode clip_mode; /* DPT_CLIP_FLAT (default): ||g_i|| <= C over all dim values;
                              DPT_CLIP_PER_LAYER: the row is cut into n_layers consecutive
                              groups of layer_sizes[l] values (a model's parameter layers) and
                              each group is clipped to C_l = C / sqrt(G), G = n_layers (as
                              DP-SGD's DPT_CLIP_PER_LAYER, dpt_privacy_split_equal), so the
                              whole row still has norm <= sqrt(sum_l C_l^2) = C: the same
                              sensitivity, noise and epsilon as flat clipping */
    const size_t *layer_sizes; /* per-layer: [n_layers] values per group, each >= 1, summing to
                              dim; copied. NULL with DPT_CLIP_FLAT */
    size_t n_layers;       /* per-layer: G >= 1; 0 with DPT_CLIP_FLAT */
    /* Adaptive clipping (Andrew et al. 2021; docs/dpsgd.md, "Adaptive clipping"), as DP-SGD's
     * (dpt_dpsgd_config.adaptive_quantile): with adaptive_quantile gamma in (0, 1), clip is the
     * starting C_0; each release also releases the centred count
     * sum_i (1[||g_i|| <= C_t] - 1/2) + N(0, adaptive_sigma_b^2) (noise from the handle's noise
     * stream, after the gradient's) and sets C_{t+1} = C_t exp(-adaptive_lr (b~ - gamma)),
     * b~ = clamp(1/2 + noisy count / (q n), 0, 1). sigma (given or calibrated) is the step's
     * total multiplier, one SGM(q, sigma) event per step; the gradient's noise has std
     * sigma_Delta C_t, sigma_Delta = (sigma^-2 - (2 sigma_b)^-2)^(-1/2) (dpt_sgm_sigma).
     * Per layer: each group gets C_t / sqrt(G). The ledger's metadata holds C_t of the next
     * step ("clip_current", saved with every sample; a resume continues from it) and the
     * settings ("adaptive", compared on resume). Not with secure (DPT_ENOTSUP). */
    double adaptive_quantile; /* gamma; 0 (default) = fixed clip */
    double adaptive_lr;       /* eta_C in (0, 10] (default 0.2) */
    double adaptive_sigma_b;  /* std of the count's noise; 0 (default) = q n / 20; must exceed
                                 sigma / 2 (DPT_EINVAL naming adaptive_sigma_b) */
} dpt_sgm_config;

/* Defaults: clip 1, delta 1e-5, seed 0 (from the OS), secure 1, secure_sampler DPT_DGAUSS_TABLE,
 * adaptive_lr 0.2; every other field 0
 * or NULL (n, dim, sample_rate and sigma or target_epsilon + steps must be set). */
dpt_sgm_config dpt_sgm_config_defaults(void);

/* Checks cfg, calibrates sigma when asked, opens the streams and the ledger (a new one, or
 * with resume the file's) and, with ledger_path and no resume, writes the empty ledger so
 * the file exists from the start. The seeded streams of a resumed mechanism are keyed by
 * (seed, steps already in the ledger), never reusing a batch or a noise draw of the earlier
 * session (a resumed run is reproducible, but differs from an uninterrupted one).
 * Errors: DPT_EINVAL naming the field (n 0 or above 2^32 - 1, dim 0, sample_rate outside
 * (0, 1], sigma < 0 or 0 without target_epsilon and steps, clip <= 0, delta outside (0, 1)
 * or >= 1/n without force, target_epsilon < 0, resume without ledger_path, an existing
 * ledger_path without resume, an unknown secure_sampler or clip_mode, per-layer layer_sizes
 * missing, holding a 0 or not summing to dim, layer_sizes given with flat clipping); DPT_ERANGE (calibration: the
 * target is unreachable); DPT_EIO / DPT_EFORMAT (the file); DPT_EBUSY (another dpt_sgm holds
 * the file's lock); DPT_EMISMATCH (resume);
 * DPT_ECRYPTO (the OS random source). *out is NULL on error. */
dpt_status dpt_sgm_new(const dpt_sgm_config *cfg, dpt_sgm **out);
void dpt_sgm_free(dpt_sgm *m); /* NULL ok */

/* The capacity dpt_sgm_sample needs: min(n, ceil(q n + 6 sqrt(q n) + 8)), the trainer's
 * bound for its Poisson buffers (a larger batch has probability below 1e-9). */
size_t dpt_sgm_batch_cap(const dpt_sgm *m);

/* Draws the next Poisson batch, records the step in the ledger (and, with ledger_path,
 * writes the file) and only then writes the indices idx[0..*b) (ascending) and *b (which
 * may be 0). The step counts whether or not it is released: a batch sampled again before
 * release is spent. cap >= dpt_sgm_batch_cap(m) (DPT_EINVAL saying the capacity needed).
 * In the rare case the batch is larger than cap, the step is recorded and pending, *b is
 * its size, idx untouched, and the result DPT_ERANGE: read it with dpt_sgm_batch into a
 * buffer of *b entries (never truncated, never redrawn: a redraw would bias the sampling).
 * DPT_EBUDGET (nothing drawn or recorded): the step would exceed target_epsilon.
 * DPT_EIO: the ledger file could not be written; no batch is pending then (the step stays
 * in the in-memory ledger: over-counting is the safe side). */
dpt_status dpt_sgm_sample(dpt_sgm *m, uint32_t *idx, size_t cap, size_t *b);
/* The pending (sampled, not yet released) batch again: idx [cap] and *b. DPT_EINVAL when no
 * batch is pending or cap < its size (*b then says the size). */
dpt_status dpt_sgm_batch(const dpt_sgm *m, uint32_t *idx, size_t cap, size_t *b);

/* The noisy update of the pending batch: grads [b, dim] row-major, row i the gradient of
 * example idx[i] of the last dpt_sgm_sample (b equal to its *b; grads may be NULL when b is
 * 0). Each row is scaled by min(1, C / ||g_i||) (per layer: each group l of the row by
 * min(1, C_l / ||g_{i,l}||)) (norms in double), the rows are summed in
 * double in a fixed order, N(0, sigma^2 C^2) is added per coordinate (secure: the lattice
 * mechanism), and out [dim] = noisy sum / (q n). An empty batch releases pure noise.
 * Once per sample: the batch is no longer pending from the moment the call starts. Errors,
 * with out untouched and the batch still pending: DPT_EINVAL (no pending batch, b differs,
 * NULL pointers); DPT_ERANGE naming the first row (its position, not the example: who was
 * sampled is secret) with a NaN or infinite value (a diverged model). A failure of the
 * noise itself spends the batch (it is never released with a second draw). */
dpt_status dpt_sgm_release(dpt_sgm *m, const float *grads, size_t b, float *out);

/* ==== Virtual batches: one sampled (logical) batch from several micro-batches ====
 * The caller's memory then holds one micro-batch of gradients, not the whole batch; the
 * mechanism's own buffers do not depend on the batch size either. The release is the one
 * dpt_sgm_release makes of the same rows in the same order, bit for bit (the clipped rows
 * are added to one double sum in row order, coordinate by coordinate, as release adds
 * them), and is the same single step, recorded by dpt_sgm_sample.
 *
 * dpt_sgm_accumulate: sum += sum_i clip(g_i) over grads [rows, dim] (rows of the pending
 * batch, continuing its order: the first call takes rows 0..rows), clipped as release
 * clips (flat or per layer). rows may be 0 (grads may be NULL then). Errors, with nothing
 * added: DPT_EINVAL (no pending batch; the rows accumulated would exceed the sampled *b;
 * NULL pointers); DPT_ERANGE naming the first row (its position in the batch) with a NaN
 * or infinite value. The mechanism keeps no pointer to grads: reuse the buffer. */
dpt_status dpt_sgm_accumulate(dpt_sgm *m, const float *grads, size_t rows);
/* out [dim] = (accumulated sum + N(0, sigma^2 C^2)) / (q n) (secure: the lattice mechanism),
 * once per sample, as dpt_sgm_release. The rows accumulated must be exactly the sampled
 * *b (0 for an empty batch, with or without dpt_sgm_accumulate calls): any other count is
 * refused with DPT_EINVAL, out untouched and the batch and its rows still pending (add the
 * missing rows, then release), since a sum of other rows is not the step the ledger
 * recorded. dpt_sgm_release is refused while an accumulation is under way, and
 * dpt_sgm_sample drops an unreleased one (the step stays spent). */
dpt_status dpt_sgm_release_accumulated(dpt_sgm *m, float *out);

/* epsilon of the ledger (every step sampled so far) at delta (0: the config's delta)
 * under acct: DPT_ACCT_DEFAULT (what calibration and the budget use: the smaller of the PLD
 * and RDP bounds), DPT_ACCT_RDP (Balle et al.'s conversion) or DPT_ACCT_PLD. */
dpt_status dpt_sgm_epsilon(const dpt_sgm *m, double delta, dpt_accountant acct, double *eps);
/* The ledger (view; valid until dpt_sgm_free; do not modify). */
const dpt_ledger *dpt_sgm_ledger(const dpt_sgm *m);
/* The noise multiplier in use (given or calibrated): noise std / C (with adaptive clipping
 * the gradient's share sigma_Delta, std / C_t). */
double dpt_sgm_sigma(const dpt_sgm *m);
/* The multiplier the ledger records per step: sigma, or in secure mode the effective
 * dpt_privacy_secure_sigma_eff(sigma, dim). */
double dpt_sgm_sigma_accounted(const dpt_sgm *m);
/* Steps recorded (a resumed ledger's included). */
uint64_t dpt_sgm_steps(const dpt_sgm *m);
/* The clip C of the next release: the config's clip, or with adaptive clipping the current
 * C_t (a function of released counts: it may be published). NAN for NULL. */
double dpt_sgm_clip(const dpt_sgm *m);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
