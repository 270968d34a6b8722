/* train: the one training loop (sample, step, apply, log, evaluate, checkpoint) and the
 * algorithms as small strategy structs plugged into it (non-private SGD first; DP-SGD,
 * DP-ULR, DP-MAC, PDP-SGD and noisy GD add their own dpt_algo).
 * Memory: dpt_trainer_new allocates everything a run needs (model, optimizer, batch
 * buffers for the declared maximum batch, RNG streams); dpt_trainer_free releases it. The
 * datasets passed in are borrowed and must outlive the trainer.
 * Thread safety: one trainer per thread; it uses cfg.threads threads inside.
 * Errors: DPT_EINVAL naming the config field (dpt_train_config.batch_size,
 * dpt_dpsgd_config.clip, ...), DPT_EBUDGET/DPT_EMISMATCH for privacy-budget and resume
 * problems, DPT_EIO naming the file, DPT_ERANGE when training diverges (non-finite
 * gradients). The trainer never prints: progress comes through the callbacks. */
#ifndef DPTRAIN_TRAIN_H
#define DPTRAIN_TRAIN_H

#include <dptrain/core.h>
#include <dptrain/data.h>
#include <dptrain/io.h>
#include <dptrain/nn.h>
#include <dptrain/optim.h>
#include <dptrain/privacy.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpt_trainer dpt_trainer;
struct dpt_ledger;
struct cJSON;

/* ==== Algorithms (strategies) ====
 * For every sampled batch the loop calls begin(b) once, accumulate() for each chunk of at
 * most max_batch examples (a Poisson batch larger than the buffers is processed in
 * chunks, never truncated), then finish(): after finish, t->model->grad holds the update
 * direction the optimizer applies. record() then appends the step's privacy event to the
 * ledger (NULL for non-private algorithms) and runs BEFORE the parameters change; the
 * optimizer step follows, then after_update() when set. Algorithms in src/train/ share
 * the chunk prologue dpt_train_forward_backward() (train_internal.h). */
typedef struct dpt_algo {
    const char *name;        /* "sgd", "dpsgd", ... */
    int is_private;          /* 1: has privacy events and an epsilon */
    dpt_status (*begin)(struct dpt_algo *a, dpt_trainer *t, size_t batch);
    /* x [bc, D], y [bc]; returns the sum of per-example losses in *loss_sum. A regression
     * run (the training set has targets, dpt_dataset.t) passes y = NULL: the chunk's targets
     * [bc, t_dim], rows aligned with x, are dpt_trainer_batch_targets(t) (see `regression`). */
    dpt_status (*accumulate)(struct dpt_algo *a, dpt_trainer *t, const float *x,
                             const int32_t *y, size_t bc, double *loss_sum);
    dpt_status (*finish)(struct dpt_algo *a, dpt_trainer *t, size_t batch);
    dpt_status (*record)(struct dpt_algo *a, dpt_trainer *t, size_t batch);
    void (*free)(struct dpt_algo *a);
    void *state;
    double sigma;            /* private algorithms: noise multiplier of their SGM events */
    /* Optional (NULL = none): runs after the optimizer changed the parameters, e.g. to
     * perturb the new weights (proportional noise). Not called for steps that skip the
     * optimizer (an empty batch of a non-private algorithm). */
    dpt_status (*after_update)(struct dpt_algo *a, dpt_trainer *t);
    /* Optional (NULL = `count` SGM(q, sigma) events): appends `count` future steps of this
     * algorithm's own privacy events to `l` (a copy of the run's ledger), so the budget
     * look-ahead and the ledger metadata follow algorithms whose events are not SGM. */
    dpt_status (*add_events)(struct dpt_algo *a, const dpt_trainer *t, struct dpt_ledger *l,
                             uint64_t count);
    /* Optional: a non-private run of a privacy-minded algorithm whose sampling has no
     * accountant (DP-ULR with shuffled batches) sets this label; it goes into
     * metrics.jsonl as "privacy" so the run is marked as non-accounted there too. */
    const char *privacy_note;
    /* Optional: called once by dpt_trainer_new when the model exists and before the
     * ledger is created, e.g. to set `sigma` from the parameter count. */
    dpt_status (*bind)(struct dpt_algo *a, dpt_trainer *t);
    /* Data-parallel training (MPI ranks and/or shards > 1, docs/distributed.md). An
     * algorithm opts in with distributable = 1 when its accumulate() only ADDS into
     * model->grad and into sums[0..n_sums) (per-step totals it owns, e.g. a count of
     * clipped examples), and finish/record/after_update depend only on those totals, the
     * global batch size and state every rank holds identically (configuration, step, the
     * shared noise stream). The loop then zeroes model->grad and sums before each shard,
     * reduces both over the shards in a fixed tree (the same float operations for any
     * number of ranks), and runs finish/record/after_update on every rank with the totals.
     * Algorithms without it are refused when run with more than one rank or shard. */
    int distributable;
    size_t n_sums;
    double *sums;
    /* Optional (NULL = none): the algorithm's own per-epoch results. `obj` is the epoch's
     * metrics.jsonl object (a cJSON object) to add fields to; `line` [n] receives a short
     * text for the result's `note` (the CLI appends it to the epoch line). */
    dpt_status (*epoch_metrics)(struct dpt_algo *a, dpt_trainer *t, struct cJSON *obj, char *line,
                                size_t n);
    /* Optional (NULL = none): the algorithm's settings that a run may not change when it
     * resumes, as text (DP-ULR: "noise explicit, K 32, s 0.1, ..."). The checkpoint stores
     * it and dpt_trainer_resume refuses another value (DPT_EMISMATCH naming both); sigma,
     * q and the data are checked against the ledger instead. Owned by the algorithm. */
    const char *settings;
    /* 1: the algorithm honours frozen layers (dpt_train_config.freeze): its accumulate
     * reads dact only of trained layers (dpt_train_layer_trains) and leaves the frozen
     * layers' slices of model->grad untouched; the loop's backward pass stops below the
     * lowest trained layer and the optimizer skips the frozen slices. Others are refused
     * when layers are frozen (DPT_ENOTSUP). */
    int freezable;
    /* 1: the algorithm trains on regression data (dpt_dataset.t, the squared-error loss
     * against the targets): its accumulate reads dpt_trainer_batch_targets(t) and no labels
     * (y is NULL). Others are refused with such data (DPT_ENOTSUP). */
    int regression;
    /* Library algorithms only (their accumulate runs the model through the trainer's own
     * forward pass): 1 lets the trainer hand accumulate the cached output of frozen layers
     * as x ([bc, that layer's input size] rows, not the dataset's features; see
     * dpt_train_config.no_feature_cache). An algorithm that calls dpt_model_forward itself
     * must leave it 0. */
    int cacheable;
    /* Optional (NULL = none): state the algorithm carries from step to step that a resumed
     * run must continue from (DP-SGD's adaptive clip C_t). save adds it to `obj`, the
     * checkpoint's "algorithm_state" object; load reads it back at dpt_trainer_resume
     * (DPT_EFORMAT naming the field when it is missing or malformed). The checkpoint is
     * published: only values computed from released ones belong here. */
    dpt_status (*state_save)(struct dpt_algo *a, struct cJSON *obj);
    dpt_status (*state_load)(struct dpt_algo *a, const struct cJSON *obj);
    /* 1: the algorithm takes augmented copies (dpt_train_config.augment, aug_mult): its
     * accumulate forms them (dpt_train_augment) and averages each example's copies before
     * anything per-example (clipping). Others are refused when augmentation is on. */
    int augmentable;
    /* 1: a DP mechanism whether or not an accountant covers its sampling: it clips per
     * example and adds noise to its release (DP-SGD, DP-ULR and DP-MAC, also on shuffled
     * batches, where is_private is 0). Such a run, like every private one, publishes no
     * noiseless statistic of its batches: no train_loss (results, metrics.jsonl), no loss
     * or batch size in dpt_step_info, zero loss sums in the checkpoint. 0: PDP-SGD,
     * proportional noise and noisy GD (no clipping, no DP claim) and plain SGD publish them. */
    int dp_mechanism;
} dpt_algo;

/* Frees an algorithm that was not handed to dpt_trainer_new (which takes ownership, even
 * when it fails). Accepts NULL. The fields of dpt_algo are the interface between the
 * training loop and the algorithm implementations inside the library; callers create
 * algorithms with the dpt_algo_*_new constructors and should not depend on the layout. */
void dpt_algo_free(dpt_algo *a);

/* Non-private minibatch SGD: mean loss gradient over the sampled batch. */
dpt_status dpt_algo_sgd_new(dpt_algo **out);

/* DP-SGD (Abadi et al. 2016) with Poisson sampling at rate q: per chunk, per-example loss
 * gradients (not divided by B), ghost norms (SQNORM), factors c_i = min(1, C/||g_i||),
 * then sum_i c_i g_i as one weighted GEMM per layer (WEIGHTED) into model->grad; finish
 * adds N(0, sigma^2 C^2) once and divides by the expected batch size qN. Memory does not
 * grow with batch x parameters (reference: materialized chunks of ref_chunk examples). */
typedef struct {
    double sigma;            /* noise multiplier (> 0; for no noise use dpt_algo_sgd_new) */
    double clip;             /* C > 0 */
    dpt_clip_mode clip_mode; /* flat (default) or per-layer with C_l = C / sqrt(G) */
    int reference;           /* 1: materialized per-example gradients (tests, reference) */
    size_t ref_chunk;        /* reference: examples per materialized chunk (0 = 16) */
    int secure;              /* 1: discrete Gaussian noise on a lattice (dpt_privacy_noise_add_secure_ex) */
    dpt_dgauss_method secure_sampler; /* secure: DPT_DGAUSS_TABLE (default: fast, its distance
                                         accounted in the ledger) or DPT_DGAUSS_CKS (exact) */
    /* Adaptive clipping (Andrew et al. 2021; docs/dpsgd.md, "Adaptive clipping"): with
     * adaptive_quantile gamma in (0, 1) the clip starts at `clip` and follows the gamma-quantile
     * of the per-example gradient norms: each step also releases the centred count
     * sum_i (1[||g_i|| <= C_t] - 1/2) + N(0, adaptive_sigma_b^2), and
     * C_{t+1} = C_t exp(-adaptive_lr (b~ - gamma)), b~ = 1/2 + noisy count / (q N). sigma is
     * then the TOTAL multiplier of the step, one SGM(q, sigma) event as without adaptation:
     * the gradient gets sigma_Delta = (sigma^-2 - (2 sigma_b)^-2)^(-1/2)
     * (dpt_privacy_adaptive_sigma; DPT_EINVAL naming adaptive_sigma_b at bind when
     * 2 sigma_b <= sigma). Per-layer clipping splits C_t as it splits C. Not with secure.
     * C_t is in the epoch's metrics ("clip") and in the checkpoint (a resume continues it). */
    double adaptive_quantile; /* gamma; 0 (default) = fixed clipping */
    double adaptive_lr;       /* eta_C > 0 (default 0.2) */
    double adaptive_sigma_b;  /* std of the count's noise; 0 (default) = q N / 20 */
    /* 1: NOT accounted, for reproducing papers that ran DP-SGD on shuffled fixed-size batches
     * (Opacus without Poisson sampling): the trainer's sampler must be DPT_SAMPLER_SHUFFLE of
     * batch B; each step adds N(0, sigma^2 C^2) to the clipped sum and divides by B, as the
     * accounted mode divides by qN. No ledger and no epsilon (is_private = 0, name
     * "dpsgd-unaccounted", metrics say "non-accounted"): no accountant covers this sampling.
     * Not with secure or adaptive clipping (DPT_EINVAL). 0 (default): Poisson, accounted. */
    int unaccounted;
} dpt_dpsgd_config;
dpt_dpsgd_config dpt_dpsgd_config_defaults(void);
/* Copies cfg. DPT_EINVAL naming the field for clip <= 0 or sigma <= 0. The trainer (bind)
 * refuses a sampler other than DPT_SAMPLER_POISSON (with unaccounted: other than
 * DPT_SAMPLER_SHUFFLE). */
dpt_status dpt_algo_dpsgd_new(const dpt_dpsgd_config *cfg, dpt_algo **out);
/* DP-SGD's clip for the next step: C, or with adaptive clipping the current C_t (NAN for an
 * algorithm that is not DP-SGD). C_t is post-processing of released values. */
double dpt_algo_dpsgd_clip(const dpt_algo *a);

/* PDP-SGD (proportional DP regularization; see docs/pdpsgd.md). NOT differentially
 * private: no theorem, no accountant, no epsilon. The update direction is the gradient of
 *   mean loss + lambda sum theta^2 + kappa sum_{linear layers} sum_{j,k} W_jk^2 m_k
 *                                  + kappa sum_{biases} b_j^2
 * where m_k = (1/|B|) sum_{n in B} x_{n,k}^2 is the batch mean of the SQUARED input
 * feature k of that Linear layer (for hidden layers: its input activation), treated as a
 * constant (no gradient flows through x). A bias multiplies x = 1 (plain L2 with kappa).
 * Layers without parameters (activations) add nothing. The paper's derivation (Section
 * IV: plain SGD theta -= eta_t (g + eps), eps_i ~ N(0, (sigma theta_i)^2), one linear unit,
 * squared loss) gives kappa = (eta_t sigma)^2 (dpt_pdp_kappa); set sigma instead of kappa
 * to have it derived each step from that step's learning rate eta_t (base lr times the
 * schedule). That is the paper's form only for plain SGD (momentum 0); with Adam or
 * momentum the same formula maps that optimizer's lr into kappa: our mapping, which the
 * paper does not derive. An empty batch leaves grad zero (no step). */
typedef struct {
    double lambda; /* plain L2 coefficient (>= 0) */
    double kappa;  /* proportional coefficient (>= 0); 0 when sigma is set */
    double sigma;  /* relative gradient noise of the paper (>= 0; > 0: kappa_t = (eta_t sigma)^2) */
} dpt_pdp_config;
/* DPT_EINVAL naming --lambda / --kappa / --pdp-sigma for negative or non-finite values, or
 * kappa and sigma both > 0. */
dpt_status dpt_algo_pdpsgd_new(const dpt_pdp_config *cfg, dpt_algo **out);
/* kappa = (eta sigma)^2, the paper's value for plain-SGD learning rate eta and relative
 * noise sigma. */
double dpt_pdp_kappa(double eta, double sigma);

/* The proportional-noise variant the regularizer is derived from: plain minibatch SGD
 * (mean loss gradient, plus 2 lambda theta), then after each optimizer step every
 * parameter is perturbed multiplicatively, theta_i <- theta_i + eta sigma theta_i e_i,
 * e_i ~ N(0, 1) i.i.d. from the trainer's noise stream, eta = the step's learning rate.
 * NOT differentially private (no epsilon). */
typedef struct {
    double sigma;  /* relative noise (> 0) */
    double lambda; /* optional plain L2 (>= 0) */
} dpt_propnoise_config;
dpt_status dpt_algo_propnoise_new(const dpt_propnoise_config *cfg, dpt_algo **out);
/* DP-ULR (Forward Learning with Differential Privacy, ICML; issue 6): backprop-free
 * training with likelihood-ratio gradient estimates. The model is sliced into modules
 * (slices of its layer list; by default each Linear or Conv2d layer with the parameter-free
 * layers after it). Per step: a clean forward pass keeps each module's input x, its Linear
 * or Conv2d output v and every example's clean loss L0; then for each module, each example
 * and k = 1..K, z_k ~ N(0, s_l^2 I) is added to v and the rest of the model runs forward
 * to give L_k;
 *   g_i = (1/K) sum_k (L_k / s_l^2) z_k xt_i^T     (xt = [x; 1] with a bias)
 * (a Conv2d module: the conv weight gradient for the output cotangent
 * (1/K) sum_k (L_k / s_l^2) z_k, its norm from the layer's per-example norm path; one s_l
 * for all channels, A_l below summed over the unfolded patches: docs/dpulr.md)
 * is clipped to C_l = C / sqrt(#modules) and summed over the batch; the update is the sum
 * plus noise, divided by N_B (the rejection threshold; shuffled mode: the batch size).
 * Noise (see docs/dpulr.md):
 *   CONTROLLER (the paper): s_l^2 = lambda / (K C^2 sigma0^2) from the eigenvalues of
 *     A_l = sum_i L0_i^2 xt_i xt_i^T (Eq. 7; lambda = lambda_min when A_l has full rank,
 *     else its smallest eigenvalue above 1e-6 lambda_max; never below perturb_std), and
 *     top-up Gaussian noise along A_l's eigenvectors with variance
 *     max(0, sigma0^2 C^2 - lambda_j / (K s_l^2)) (A.4), so that under the paper's
 *     Gaussian approximation every direction carries at least sigma0 C. NOT covered by a
 *     standard proof (s_l and the top-up depend on the batch).
 *   EXPLICIT (sound): s_l = perturb_std fixed; N(0, sigma0^2 C^2) is added to the clipped
 *     sum like DP-SGD. Antithetic pairs and the L0 baseline are allowed here only. The
 *     perturbations are the estimator's own randomness, not privacy noise: they come from a
 *     fast stream that need not be the noise stream (dpt_rng_gauss_fill_fast_at).
 * private = 0 is the non-private ULR baseline: no clipping, no noise, mean over |B|. */
typedef enum { DPT_ULR_CONTROLLER = 0, DPT_ULR_EXPLICIT = 1 } dpt_ulr_noise;
/* The text a run with noise = DPT_ULR_CONTROLLER records as not covered by its epsilon
 * (ledger metadata "epsilon_excludes", metrics "privacy_excludes"): the noise level is chosen
 * from the batch, and no DP proof covers that (docs/dpulr.md, issue 38). */
#define DPT_ULR_CONTROLLER_NOTE \
    "DP-ULR --ulr-noise controller: the noise level is chosen from the batch; no DP proof covers it"
#define DPT_ULR_AUTO (-1)       /* dpt_dpulr_config.baseline: on where allowed (see below) */
#define DPT_ULR_DEFAULT_STD 0.1 /* the perturbation std s when perturb_std is 0 (explicit, ulr) */
typedef struct {
    int private_;         /* 1: DP-ULR, 0: the non-private ULR baseline */
    size_t copies;        /* K >= 1 perturbed copies per example and module */
    double sigma0;        /* target noise multiplier (> 0 when private) */
    double clip;          /* C > 0: total over modules, sum_l C_l^2 = C^2 */
    dpt_ulr_noise noise;  /* default EXPLICIT: the mode a standard analysis covers, and with
                             the baseline the more accurate one in every cell of the paper's
                             Table 1 we ran (docs/dpulr.md "What to run"); CONTROLLER is the
                             paper's mechanism */
    double perturb_std;   /* explicit / non-private: the perturbation std s (0 = default,
                             DPT_ULR_DEFAULT_STD); controller: a floor on s_l (0 = none) */
    int antithetic;       /* z, -z pairs (K even); not with the controller */
    int baseline;         /* L_k - L0 instead of L_k: 1 on, 0 off, DPT_ULR_AUTO (default) on
                             in explicit mode and non-private, off with the controller (1 is
                             refused there) */
    const char *modules;  /* NULL or "auto", or comma-separated start layers "0,2,4" */
    int accounted;        /* private: 1 = Poisson with rejection (ledger events, epsilon);
                             0 = shuffled fixed-size batches, NO accountant (labelled) */
    int perturb_noise_stream; /* explicit / non-private: 1 = draw the perturbations z from the
                             noise stream's ChaCha20 as before (a comparison point for
                             benchmarks); 0 (default) = the fast AES-128-CTR stream. The
                             controller always draws z from the noise stream: there z is
                             the privacy noise (docs/dpulr.md) */
} dpt_dpulr_config;
dpt_dpulr_config dpt_dpulr_config_defaults(void);
/* The settings a run of cfg uses: baseline DPT_ULR_AUTO becomes 1, or 0 with the
 * controller; perturb_std 0 becomes DPT_ULR_DEFAULT_STD except with the controller (where
 * 0 is no floor). dpt_algo_dpulr_new applies the same; callers use it to report them. */
void dpt_dpulr_config_resolve(dpt_dpulr_config *cfg);
/* Validates (K >= 1, C > 0, sigma0 > 0, tricks only where allowed, ...): DPT_EINVAL
 * naming the field (copies, sigma0, clip, noise, perturb_std, modules). dpt_trainer_new refuses
 * a sampler the mode is not for; the module spec is checked against the model at the
 * first step. */
dpt_status dpt_algo_dpulr_new(const dpt_dpulr_config *cfg, dpt_algo **out);
/* Diagnostics of the last step, module l: the perturbation std s_l, the controller's
 * lambda_min of A_l (0 when rank deficient), the rank used and the number of examples
 * whose estimate was clipped. These are unnoised statistics of the private batch (no
 * epsilon covers them): for debugging, never for release. dpt_algo_dpulr_n_modules is 0
 * for an algorithm that is not DP-ULR / ULR and before the first step (the modules are
 * resolved against the model then); module_info gives DPT_EINVAL for such an algorithm
 * and when l is out of range. */
typedef struct {
    double s, lambda_min, lambda_max;
    size_t rank, dim, clipped, examples;
} dpt_dpulr_module_info;
size_t dpt_algo_dpulr_n_modules(const dpt_algo *a);
dpt_status dpt_algo_dpulr_module_info(const dpt_algo *a, size_t l, dpt_dpulr_module_info *out);
/* DP-MAC (the differentially private method of auxiliary coordinates) for Linear layers
 * with elementwise activations, f_k(W_k z_{k-1}), z_0 = x (docs/dpmac.md). Per sampled
 * batch (Poisson, rate q):
 *   z-step (not released): z initialized by a forward pass, then z_steps Adam steps (fresh
 *     state per batch) on e_n = loss(out_n) + sum_{k<K} mu/2 ||z_{k,n} - f_k(W_k z_{k-1,n})||^2,
 *     the gradient scaled by 1/(qN); example n's z depends on example n alone.
 *   W-step: per example and weight layer k, the Taylor coefficient dT_{n,k} = [z_{k-1,n}; 1]
 *     outer g_{n,k}, g = 2 (f(a) - z_k) f'(a) (hidden), 2 (out - x) (squared-error
 *     output), d loss / d out (cross-entropy outputs: sigmoid(out) - y for BCE); each
 *     clipped to Frobenius norm Theta; the update direction is
 *     [sum_n clip(dT_n) + N(0, sigma^2 K Theta^2 I)] / (2 q N).
 * The stacked clipped coefficients of one example have norm <= sqrt(K) Theta, so a step is
 * one sampled Gaussian mechanism (q, sigma): one SGM ledger event per step. The trainer's
 * optimizer (Adam in the paper: elementwise, so per-layer states are the same thing)
 * applies the direction. Losses: DPT_LOSS_SIGMOID_BCE / SOFTMAX_CE (labels) or
 * DPT_LOSS_SQUARED (autoencoder: the targets are the inputs).
 * Second-order variant (taylor_order 2; Eq. 3-5 of the paper with its C coefficients, the
 * a coefficient omitted as for any gradient-based optimizer): per example and layer also
 * the Hessian coefficient d2T_{n,k} = sum_h c_{n,h} e_h e_h^T (x) zhat zhat^T, zhat =
 * [z_{k-1,n}; 1], c = 2 f'(a)^2 + 2 (f(a) - z) f''(a) (hidden), 2 (squared-error output),
 * sigmoid'(out) (BCE output), clipped to Frobenius norm clip2; both sums get noise of std
 * sigma sqrt(2K) times their bound (M = 2 partitions, Section 2.3 / Appendix I: still one
 * SGM(q, sigma) event), the noisy Hessian sums are symmetrized (post-processing), and the
 * optimizer takes w_steps steps on the released quadratic: direction (1/(2qN)) [b~ + H~ (w -
 * w_hat)], w_hat = the parameters at the start of the step. Hidden activations relu, tanh,
 * sigmoid or none; losses BCE or squared error; not with secure. */
typedef struct {
    double sigma;       /* noise multiplier (> 0) */
    double clip;        /* Theta > 0: per-example, per-layer Frobenius bound */
    unsigned z_steps;   /* Adam steps of the z-step (30 in the authors' code; 0 = z stays
                           at the forward pass) */
    double z_lr;        /* Adam learning rate of the z-step (> 0) */
    double z_beta1, z_beta2, z_eps; /* Adam constants of the z-step (0.9, 0.999, 1e-8) */
    double z_mu;        /* mu > 0: weight of the hidden layers' terms in the z-objective (1, the
                           paper's Eq. 2; the authors' classifier code weighs ||z - f||^2
                           against its cross-entropy output, i.e. mu = 2). The W-step does
                           not depend on it. */
    int secure;         /* 1: discrete Gaussian noise on a lattice */
    dpt_dgauss_method secure_sampler; /* as in dpt_dpsgd_config */
    unsigned taylor_order; /* 1 (default, the paper's experiments) or 2 (see above) */
    double clip2;       /* taylor_order 2: Frobenius bound of each example's per-layer Hessian
                           coefficient (> 0) */
    unsigned w_steps;   /* taylor_order 2: optimizer steps on the released quadratic per batch
                           (>= 1; the first is at w_hat, where it equals the first-order step) */
    int private_;       /* 1 (default): DP-MAC as above. 0: the non-private MAC baseline
                           ("mac"): no clipping, no noise, no ledger (is_private 0,
                           privacy_note "non-private"), direction sum_n dT_n / (2 |B|) with
                           |B| the actual batch size; sigma, clip and secure are ignored */
} dpt_dpmac_config;
dpt_dpmac_config dpt_dpmac_config_defaults(void);
/* Copies cfg; DPT_EINVAL naming the field (clip, sigma, z_steps, z_lr). The model
 * structure (Linear [activation] ... Linear) is checked at the first batch; a private
 * run's trainer refuses a sampler other than DPT_SAMPLER_POISSON. */
dpt_status dpt_algo_dpmac_new(const dpt_dpmac_config *cfg, dpt_algo **out);

/* ==== Planning a private run ====
 * The noise multiplier for a target epsilon, as `dptrain train --target-epsilon` and
 * Python's train(target_epsilon=) calibrate it (one definition for both): the smallest
 * sigma, to within 1e-4, such that the releases in `prior` (NULL: none; the DP
 * normalization statistics, DP mean and DP-PCA a run records in its ledger before step 1)
 * composed with `steps` steps of SGM(q, sigma) spend at most target_eps at delta under the
 * default accountant (DPT_ACCT_DEFAULT, accounting.h: the smaller of the PLD and RDP bounds,
 * the epsilon a run reports and its budget stops at). steps: dpt_sampler_steps_for_epochs of
 * the run's epochs. Without a prior (or an empty one) it is dpt_calibrate_sigma(q, steps,
 * delta, target_eps, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, 1e-4, sigma), the sigma of `dptrain
 * account --target-epsilon`. prior is
 * not modified. DPT_ERANGE when prior alone already spends target_eps (no step can fit)
 * or no sigma in [0.05, 1e4] reaches it; DPT_EINVAL for q, steps, delta or target_eps out
 * of range. */
dpt_status dpt_train_calibrate_sigma(const struct dpt_ledger *prior, double q, uint64_t steps, double delta,
                                     double target_eps, double *sigma);

/* Records a Gaussian release made before training (e.g. DP-PCA of the inputs) in the
 * trainer's privacy ledger, so the reported epsilon covers it. Only for a private
 * algorithm, before the first step of a fresh run (a resumed run's ledger holds it
 * already): DPT_EINVAL otherwise. With cfg.target_epsilon > 0, DPT_ERANGE (the ledger
 * unchanged) when the releases recorded so far and this one alone would spend more than
 * it: the caller must not publish the release then. (A fresh run that takes no step
 * writes no checkpoint, ledger or metrics: dpt_trainer_run.) */
dpt_status dpt_trainer_add_gaussian_release(dpt_trainer *t, double sensitivity, double sigma,
                                            const char *label);
/* DP normalization of features (Tramer & Boneh 2021's frozen BatchNorm on ScatterNet
 * features; docs/nn.md "Frozen BatchNorm"): sets the model's one fbn layer (which must be
 * frozen, with no trained layer below it) to x -> (x - mu_c) / sqrt(var_c + 1e-5) from DP
 * per-channel statistics of its input over the whole training set: each example's vector
 * of channel means clipped to L2 norm clip_mean and of channel mean squares clipped to
 * clip_sq, summed, each sum noised with std sigma times its clip from the run's noise
 * stream (dpt_dp_channel_sums, dpt_dp_channel_affine in privacy.h). Two Gaussian releases
 * of noise multiplier sigma (secure: the effective one) go into the ledger first, labelled
 * "dp-feature-norm-mean" and "dp-feature-norm-sq"; a caller calibrating the training noise
 * includes both in its prior (dpt_train_calibrate_sigma). Only for a private algorithm, once,
 * before the first step of a fresh run: a resumed run keeps the statistics its checkpoint
 * holds (the layer's parameters) and its ledger the releases. DPT_EINVAL otherwise or for a
 * model without exactly one such fbn layer; DPT_ERANGE (nothing recorded or released) when
 * cfg.target_epsilon > 0 and the releases so far plus these two would exceed it. The fbn
 * layer's input, computed here for every example, seeds the feature cache. */
dpt_status dpt_trainer_feature_norm(dpt_trainer *t, double sigma, double clip_mean, double clip_sq);
/* Records that the run's privacy statement (its epsilon, or an estimate) does not cover
 * `what`, a use of the training data outside every accountant (e.g. normalization
 * statistics fitted on it without noise): the ledger metadata "epsilon_excludes"
 * (private algorithms) and every metrics.jsonl line ("privacy_excludes") carry it. Call
 * after dpt_trainer_new (and dpt_trainer_resume) and before dpt_trainer_run; what is a
 * non-empty text; several calls keep every text ("; "-joined, a repeated text once), in at
 * most 255 bytes together (DPT_EINVAL otherwise). dpt_trainer_new records one itself when a
 * private run's test set is its training set ("test metrics computed on the training
 * data"): those metrics are not covered by the epsilon. */
dpt_status dpt_trainer_exclude_from_guarantee(dpt_trainer *t, const char *what);

/* Starts a fresh run from the caller's parameters instead of cfg.init's random draw:
 * fine-tuning a model trained elsewhere (dpt_model_params layout, n = the model's parameter
 * count, DPT_EMISMATCH otherwise; every value finite, DPT_EINVAL otherwise). Call after
 * dpt_trainer_new and before dpt_trainer_run, on a run that was not resumed (a resumed run
 * continues from its checkpoint): DPT_EINVAL otherwise; noisy-gd refuses it
 * (DPT_ENOTSUP: its KL bound is about its random initialization). `source` (NULL
 * allowed; at most DPT_INIT_SOURCE_MAX bytes) says where the values came from; it and their
 * SHA-256 go into the ledger's metadata ("initial_params") and every checkpoint's state.
 * Privacy: the guarantee of the run's epsilon assumes the values do not depend on its
 * training data (e.g. trained on public data). Values from an earlier private run on the
 * same data are covered only by composing both runs' ledgers. `source` must be UTF-8
 * without control characters (DPT_EINVAL). Data parallel: every rank calls it with the same
 * values (the first step of dpt_trainer_run compares the ranks' starting parameters:
 * DPT_EMISMATCH on every rank when they differ). */
#define DPT_INIT_SOURCE_MAX 200
dpt_status dpt_trainer_set_initial_params(dpt_trainer *t, const float *params, size_t n, const char *source);
/* What dpt_trainer_set_initial_params recorded ("SOURCE (SHA-256 of the float32 values:
 * HEX)"; a resumed run's, from its checkpoint), or "" for a run from cfg.init's random
 * initialization. Owned by t. */
const char *dpt_trainer_initial_params(const dpt_trainer *t);
/* The frozen layers (dpt_train_config.freeze) in model order, comma-separated, "" when
 * every layer trains; *trained (may be NULL) receives the number of parameters that train.
 * Owned by t. */
const char *dpt_trainer_frozen(const dpt_trainer *t, size_t *trained);

/* Noisy full-batch gradient descent ("Langevin" training, Ye et al., "Initialization
 * Matters", Eq. 4 / Theorem E.1): W_{k+1} = W_k - eta grad L(W_k; D) + sqrt(2 eta sigma^2) Z_k
 * with L the MEAN loss over all n records, no clipping, constant eta. The trainer must use
 * the full-batch sampler and plain SGD with lr = eta (no momentum, weight decay or
 * schedule): the update direction handed to the optimizer is g + sqrt(2 sigma^2 / eta) Z,
 * so W - eta (g + sqrt(2 sigma^2/eta) Z) is exactly Eq. 4 (checked at the first step).
 *
 * KL estimator (optional): along this run's trajectory, for every candidate neighbour D'
 * at once, KL(D') += c ||grad L(W_k; D) - grad L(W_k; D')||^2 per step, with
 *   remove record i:          difference (g_i - gbar) / (n - 1)
 *   add held-out record z:    difference (gbar - g_z) / (n + 1)
 *   replace i by held-out z:  difference (g_i - g_z) / n   (Definition 2.1 of the paper)
 * where ||g_i - gbar||^2 = ||g_i||^2 - 2 <g_i, gbar> + ||gbar||^2: the squared norms come
 * from the ghost-norm mode (DPT_GRAD_SQNORM) and the inner products <g_i, gbar> from the DOT
 * mode (Linear: dv_i . (Gbar x_i)); no per-example gradient is materialized. Replace uses
 * the `replace_candidates` held-out records with the largest gradient norm at
 * initialization, <g_i, g_z> from dpt_model_param_cross (their gradients are materialized,
 * k vectors of P, only when a layer has no cross op, e.g. Conv2d).
 * c = eta / (4 sigma^2) is the exact KL between the two Gaussian steps (DPT_KL_EXACT); the
 * paper writes eta / (2 sigma^2) (DPT_KL_PAPER, 2x larger). The result is an ESTIMATE of a
 * KL divergence on one trajectory, not an (epsilon, delta) guarantee.
 *
 * Linearized network (Eq. 3): with `linearized`, the model trained is
 * f(W0, x) + J(W0, x) (W - W0), W0 the parameters at the first step, computed by a
 * Jacobian-vector product at W0 (no Jacobian is formed). The trainer's test metrics still
 * evaluate the ReLU network at W (the loop's evaluator knows no linearization).
 * Not checkpointed: W0 and the KL sums live in the algorithm, so a resumed trainer starts
 * them afresh (the CLI refuses --resume for noisy-gd). */
typedef enum { DPT_KL_EXACT = 0, DPT_KL_PAPER = 1 } dpt_kl_constant;
enum { DPT_KL_REMOVE = 1, DPT_KL_ADD = 2, DPT_KL_REPLACE = 4, DPT_KL_ALL = 7 };
typedef struct {
    double eta;                 /* step size (> 0): must equal the optimizer's lr */
    double sigma;               /* Langevin noise scale (> 0); step noise std sqrt(2 eta) sigma */
    int linearized;             /* 1: train the linearization around W0 */
    int kl;                     /* DPT_KL_* bits of the neighbours to estimate (0 = none) */
    dpt_kl_constant constant;   /* exact eta/(4 sigma^2) (default) or paper eta/(2 sigma^2) */
    const dpt_dataset *heldout; /* add / replace candidates (borrowed; needed for ADD/REPLACE) */
    size_t replace_candidates;  /* held-out records tried as replacements (default 1) */
    size_t kl_keep_bytes;       /* with several chunks, the estimator keeps every chunk's
                                 * layer inputs and output cotangents for the <g_i, gbar>
                                 * pass when they fit in this many bytes (default 1 GiB);
                                 * otherwise (or 0) each chunk runs forward and backward
                                 * again. Same values either way. */
} dpt_noisy_gd_config;
dpt_noisy_gd_config dpt_noisy_gd_config_defaults(void);
/* DPT_EINVAL naming the setting for eta <= 0, sigma <= 0, missing held-out data, ... */
dpt_status dpt_algo_noisy_gd_new(const dpt_noisy_gd_config *cfg, dpt_algo **out);

/* KL estimate so far (worst case over each neighbour kind; NAN for kinds not estimated). */
typedef struct {
    uint64_t steps;             /* steps accumulated */
    double c;                   /* the constant used */
    double remove, add, replace, worst;
    size_t remove_arg;          /* training record index of the worst removal */
    size_t add_arg;             /* held-out record index of the worst addition */
    size_t replace_arg_i, replace_arg_z; /* worst replacement: training i by held-out z */
} dpt_kl_report;
/* a must be a noisy-GD algorithm (DPT_EINVAL otherwise). */
dpt_status dpt_noisy_gd_kl(const dpt_algo *a, dpt_kl_report *r);
/* Per-candidate KL values so far: which = DPT_KL_REMOVE ([n]), DPT_KL_ADD ([n_heldout]) or
 * DPT_KL_REPLACE ([n * k], index i*k + j for training i and the j-th replacement). *v is a
 * view valid until the algorithm is freed; *n = 0 when that kind is not estimated. */
dpt_status dpt_noisy_gd_kl_values(const dpt_algo *a, int which, const double **v, size_t *n);
/* Held-out indices of the replacement candidates (k of them; valid after the first step). */
dpt_status dpt_noisy_gd_replace_candidates(const dpt_algo *a, const size_t **idx, size_t *k);

/* ==== Run configuration ==== */

/* The results of one epoch (or of the part of an epoch a stopped run completed), as
 * written to metrics.jsonl and handed to cfg.on_epoch. Publication rule: a result is
 * published (metrics.jsonl, on_epoch, dpt_trainer_run's `last`) only after the privacy
 * ledger and the checkpoint that hold its steps are on disk (with an out_dir). */
typedef struct {
    uint64_t epoch;           /* 1-based: the epoch this result closes (or is inside, partial) */
    uint64_t step;            /* steps done in total */
    double train_loss;        /* non-private algorithms: mean loss of the epoch's sampled
                                 examples; NAN for private ones (a noiseless statistic of the
                                 private data no accountant covers is never released) */
    double test_loss, test_accuracy; /* NAN without a test set */
    double wall_s;            /* training time so far (all sessions of the run) */
    double lr;                /* learning rate of this epoch */
    double epsilon;           /* private algorithms: the headline epsilon of the ledger at
                                 `delta`, under `accountant` (DPT_ACCT_DEFAULT: PLD where it
                                 applies, the accountant calibration and the budget use); */
    double epsilon_pld;       /*   PLD epsilon (NAN when PLD does not apply);             */
    double delta;             /*   NAN, NAN, NAN for non-private algorithms              */
    int partial;              /* 1: the run stopped inside this epoch (max_steps, budget,
                                 a callback), after steps_in_epoch of its steps */
    size_t steps_in_epoch, steps_per_epoch;
    int from_checkpoint;      /* 1: published on resume from the record the checkpoint keeps
                                 (the run had saved it but not yet published it) */
    char note[256];           /* the algorithm's own short per-epoch summary, or "" */
    double test_mse;          /* regression: mean squared error per target coordinate,
                                 sum ||f(x) - t||^2 / (n t_dim) = 2 test_loss / t_dim;
                                 NAN for classification or without a test set */
    double epsilon_rdp;       /* private algorithms: RDP epsilon (Balle et al.'s conversion),
                                 the cross-check printed beside the headline; NAN otherwise */
    int accountant;           /* the dpt_accountant of `epsilon` (RDP or PLD); -1 non-private */
    double test_loss_ema, test_accuracy_ema; /* with ema_decay: the test set under the EMA
                                 of the parameters (test_loss/test_accuracy are the raw
                                 parameters'); NAN otherwise */
    char privacy_label[384];  /* what weakens this result's privacy statement, for every line
                                 that shows it: a private run's dpt_ledger_label (compact:
                                 "  [epsilon does NOT cover: ...]", "  [SEEDED]"), else the
                                 algorithm's note ("  [non-accounted: ...]", "  [no formal DP
                                 guarantee]") and exclusions; "" for none */
} dpt_epoch_result;

/* Messages the library would otherwise print (it never prints): notes on a resume, the
 * privacy-budget stop, an overwrite. `msg` is one line without newline, valid during the
 * call. */
typedef enum { DPT_LOG_INFO = 0, DPT_LOG_NOTE = 1, DPT_LOG_WARN = 2 } dpt_log_level;
typedef void (*dpt_log_fn)(void *user, dpt_log_level level, const char *msg);

/* After every step (data parallel: on rank 0 only). */
typedef struct {
    uint64_t step, epoch;     /* steps done in total; completed epochs */
    size_t step_in_epoch, steps_per_epoch;
    double wall_s;            /* training time so far */
    double loss;              /* non-private algorithms: running mean train loss of the epoch;
                                 NAN for private ones (never a noiseless function of the data) */
    size_t batch;             /* non-private: this step's batch size; 0 for private ones (a
                                 Poisson batch size is a function of the private data) */
} dpt_step_info;
/* A non-zero return stops the run after this step (after this epoch for on_epoch): the
 * checkpoint and ledger are saved, the partial epoch published, dpt_trainer_run returns
 * DPT_OK and dpt_trainer_stop_reason says DPT_STOP_CALLBACK. */
typedef int (*dpt_step_fn)(void *user, const dpt_step_info *info);
typedef int (*dpt_epoch_fn)(void *user, const dpt_epoch_result *r);

typedef struct {
    const char *model_spec;   /* "mlp:784-128-64-32-10:gelu" */
    dpt_loss_kind loss;
    dpt_init_scheme init;
    /* NULL or "": every layer trains. Else comma-separated names of layers with parameters
     * ("conv1,conv2", the names of dpt_layer.name and of checkpoint tensors "conv1.weight")
     * whose parameters keep their initial values (cfg.init's draw, or
     * dpt_trainer_set_initial_params'): fine-tuning the other layers on a fixed trunk.
     * DP-SGD clips and sums only the trained layers' per-example gradients (their norm is
     * at most C, so the epsilon is that of the same run without freezing); no backward pass
     * runs below the lowest trained layer. Algorithms sgd and dpsgd; others DPT_ENOTSUP.
     * DPT_EINVAL for an unknown name, a layer without parameters, a repeat, or every layer
     * frozen. A resume must give the same layers (DPT_EMISMATCH). */
    const char *freeze;
    dpt_optim_config optim;
    dpt_schedule schedule;
    dpt_sampler_kind sampler; /* shuffle (fixed batch), poisson (rate q), full */
    size_t batch_size;        /* shuffle: batch size; poisson: expected batch (q = B/N) */
    double sample_rate;       /* poisson: q (0 = derive from batch_size) */
    size_t min_batch;         /* poisson_reject: the rejection threshold N_B (>= 1) */
    uint64_t epochs;          /* >= 1; epochs x steps per epoch at most 2^53 */
    /* All streams derive from the seed (init, data, noise). 0 (the default): drawn from the
     * OS, kept only in the run's secret file (secret_dir) with the streams' state,
     * never in the checkpoint, ledger or metrics; a resume continues with the run's own.
     * Non-zero: the caller's choice, reproducible, and anyone who knows it can regenerate
     * the batches and the noise: a private run labels it ("seed_source": "caller") in its
     * ledger, metrics and checkpoint (docs/checkpoints.md, "Seeds"). */
    uint64_t seed;
    /* 1: `seed` is non-zero but was drawn from the OS by the caller itself (for releases it
     * makes before the trainer exists from the same secret seed, as the CLI's DP-PCA): kept
     * and labelled as seed 0 is. */
    int seed_from_os;
    int threads;
    /* Run directory (NULL: no files). The trainer holds an exclusive lock on it (the file
     * dptrain.lock inside) from dpt_trainer_new to dpt_trainer_free, and a fresh run (no
     * dpt_trainer_resume) refuses a directory that holds anything else unless `overwrite`
     * (see docs/checkpoints.md, "The run directory"). The run's secret file (its key, seed
     * and streams) is saved before the first checkpoint, outside out_dir (secret_dir).
     * Without an out_dir the key lives in memory only: the data_hmac in
     * dpt_trainer_ledger's metadata then matches no dataset anyone can check. */
    const char *out_dir;
    int overwrite;            /* 1: a fresh run removes the files of the run in out_dir
                                 (checkpoint.safetensors, ledger.json, metrics.jsonl, an
                                 older run's dptrain.secret and their temporaries), and only
                                 those, and that run's secret file (dpt_run_secret_remove),
                                 at its first write: a run that fails before it leaves them */
    /* Where the run's secret file goes: DIR/<run id>.secret (mode 0600), never inside
     * out_dir, so that the run directory can be shared. NULL (the default):
     * $DPTRAIN_SECRETS_DIR, else $XDG_STATE_HOME/dptrain/secrets, else
     * ~/.local/state/dptrain/secrets (dpt_run_secret_dir). Made mode 0700 if missing;
     * DPT_EIO from dpt_trainer_new when it is not a directory of the user's own that others
     * cannot enter. A resume reads the secret there, or in out_dir where an older run kept
     * it (moved here at the next save). Give the same directory to resume a run moved
     * from another machine together with its secret file. */
    const char *secret_dir;
    uint64_t max_steps;       /* 0 = no limit: stop after this many steps in total */
    const char *run_json;     /* optional JSON object stored verbatim in checkpoints as "run"
                                 (the CLI keeps dataset and normalization there); text
                                 that is not a JSON object is refused (DPT_EINVAL) */
    const char *eval_split;   /* what the test set is, when not the test split (NULL):
                                 e.g. "validation" for examples held out of the training
                                 data; metrics.jsonl lines then say "eval_split" */
    /* Callbacks (all optional; `user` is passed back to each). They run on the calling
     * thread; on_step and on_epoch on rank 0 only (a stop request is sent to every rank). */
    dpt_step_fn on_step;
    dpt_epoch_fn on_epoch;
    dpt_log_fn log;
    void *user;
    /* Private algorithms only: */
    double delta;             /* delta of the reported epsilon (default 1e-5) */
    double target_epsilon;    /* > 0: stop BEFORE the step whose release would exceed it
                                 (RDP accountant, Balle conversion) */
    int allow_ledger_mismatch;/* 1: resume although q, sigma, the noise mode or the data
                                 differ from the ledger (recorded in the ledger metadata) */
    int secure;               /* 1: OS-seeded noise stream, never logged or saved */
    /* Data parallel (docs/distributed.md): the training and test sets are cut into this
     * many contiguous shards whose per-step sums are computed separately and added in a
     * fixed tree, so a run gives bit-identical results on any number of MPI ranks (rank
     * r owns shards [r S / R, (r+1) S / R)). 0 = the number of ranks at the start of the
     * run; a resumed run keeps its checkpoint's value unless given explicitly. */
    size_t shards;
    /* Frozen layers below the lowest trained one (freeze) compute the same output for an
     * example at every step: the trainer computes it once for every training example at
     * the first step of the session and trains from it, skipping those layers' forward
     * pass (the cache holds n times the lowest trained layer's inputs). Not done when it
     * would take more than a quarter of the machine's memory, when a residual connection
     * skips from below into the trained layers, for an autoencoder (squared error against
     * the input), or for algorithms that did not opt in (dpt_algo.cacheable); a
     * DPT_LOG_NOTE says which. 1 = never (the frozen layers run every step). The results
     * agree up to float rounding (the trunk's forward pass runs on other batches, whose
     * size changes a GEMM's rounding; tests/test_feature_cache.c), and a resumed run
     * rebuilds the cache identically. A run that finds the frozen layers' values changed
     * since the cache was built (dpt_trainer_set_initial_params after a first step that
     * failed, or the caller writing the model's theta between runs) builds it again; within
     * a run (from a callback) they must not change. The privacy analysis is unchanged: the trained
     * layers' per-example gradients are clipped and noised as before. */
    int no_feature_cache;
    /* Examples per forward/backward pass (a physical batch): 0 (default) = the sampler's
     * bound (Poisson: q N + 6 sd + 8), so a whole batch goes in one pass; > 0: at most this
     * many. The model's buffers (activations of every layer, per-example scratch) are
     * sized for one pass, so memory is bounded by it instead of growing with the logical
     * batch; the passes of a batch accumulate one sum of clipped per-example gradients
     * (equal to the one-pass sum up to float rounding), then the noise is drawn and the
     * step recorded once per logical batch: the privacy analysis is unchanged. */
    size_t physical_batch;
    /* Parameter averaging (De et al. 2022): 0 = off; in (0, 1): after every step the trainer
     * updates e <- e + (1 - d)(theta - e), e starting at the initial parameters, with
     * d = ema_decay, or with ema_warmup = 1 d = min(ema_decay, (1 + t) / (10 + t)) at the
     * t-th update (t = 0, 1, ...). Each epoch's result also evaluates the test set under e
     * (test_accuracy_ema); checkpoints store e as the model's tensors (what predict and
     * evaluate load) and the raw parameters as "train.theta" (what a resume continues).
     * Post-processing of the released parameters: no privacy cost. A resume must give the
     * same values (DPT_EMISMATCH). */
    double ema_decay;
    int ema_warmup;
    /* Data augmentation for image inputs (the model's input shape C x H x W), DP-SGD only:
     * each sampled example is replaced by aug_mult copies (1 when 0), each randomly cropped
     * back to H x W after reflect padding by 4 pixels and (DPT_AUGMENT_CROP_FLIP) flipped
     * horizontally with probability 1/2; the example's gradient is the mean of its copies'
     * gradients, clipped once (augmentation multiplicity, De et al. 2022), so its
     * contribution to the sum is still at most C and the accounting is unchanged. The
     * randomness is the run's own stream (DPT_STREAM_AUGMENT of the seed), a fresh substream
     * per step: reproducible with a seed, never reused across steps. */
    int augment;              /* dpt_augment_kind */
    size_t aug_mult;
} dpt_train_config;

typedef enum {
    DPT_AUGMENT_NONE = 0,
    DPT_AUGMENT_CROP = 1,      /* random crop after 4-pixel reflect padding */
    DPT_AUGMENT_CROP_FLIP = 2  /* the same and a horizontal flip with probability 1/2 */
} dpt_augment_kind;

dpt_train_config dpt_train_config_defaults(void);

/* Creates a trainer for train/test data (test may be NULL). The algorithm is owned by
 * the trainer afterwards (freed even when this fails). Initializes the model from
 * cfg.seed, draws a fresh random run id and run key, and with an out_dir creates that
 * directory (one level) and locks it: DPT_EBUSY naming the directory and the holder's pid
 * when another trainer (in any process) holds it. */
dpt_status dpt_trainer_new(const dpt_train_config *cfg, const dpt_dataset *train,
                           const dpt_dataset *test, dpt_algo *algo, dpt_trainer **out);
/* Releases everything, the run directory's lock included. Accepts NULL. */
void dpt_trainer_free(dpt_trainer *t);

/* Continues from out_dir/checkpoint.safetensors: model, optimizer, step, epoch, RNG
 * streams, sampler position, run id and run key, so the run continues bit-identically
 * (same threads). Refuses (DPT_EMISMATCH, naming the setting) a checkpoint whose model,
 * data, run settings, algorithm settings (dpt_algo.settings) or optimizer differ (the
 * learning rate may change: a DPT_LOG_NOTE says so), a run without its secret file
 * (neither secret_dir/<run id>.secret nor an older run's out_dir/dptrain.secret; the
 * message names both: the data cannot be compared; a private run with
 * allow_ledger_mismatch continues under a new key, recorded in the ledger), a secret
 * file of another run, a ledger.json of another run, and a metrics.jsonl that records
 * steps the checkpoint does not hold. */
dpt_status dpt_trainer_resume(dpt_trainer *t);

/* Runs until cfg.epochs epochs are done, max_steps, the privacy budget or a callback
 * stops it. With an out_dir, after every epoch (and once more when stopping inside one):
 * ledger.json, then checkpoint.safetensors (atomically), then one metrics.jsonl line,
 * then on_epoch. A resumed run first publishes the checkpoint's last result if
 * metrics.jsonl lacks it (a crash between saving and publishing), never re-running it.
 * A fresh run that takes no step (the budget refuses the first one) writes nothing.
 * `last` (may be NULL) receives the last published result (epoch 0 and NAN metrics when
 * none exists). Called from one of the run's own callbacks (or dpt_trainer_resume so
 * called): DPT_EINVAL. */
dpt_status dpt_trainer_run(dpt_trainer *t, dpt_epoch_result *last);

/* Why the last dpt_trainer_run returned. */
typedef enum {
    DPT_STOP_NONE = 0,      /* not run yet, or it failed */
    DPT_STOP_DONE = 1,      /* cfg.epochs epochs are done */
    DPT_STOP_MAX_STEPS = 2, /* cfg.max_steps steps are done */
    DPT_STOP_BUDGET = 3,    /* the next step would exceed cfg.target_epsilon */
    DPT_STOP_CALLBACK = 4   /* on_step or on_epoch returned non-zero */
} dpt_stop_reason;
dpt_stop_reason dpt_trainer_stop_reason(const dpt_trainer *t);
/* The run id (32 hex digits): drawn at random by dpt_trainer_new, taken from the
 * checkpoint by dpt_trainer_resume; stored in every checkpoint and in the ledger's
 * metadata ("run_id"), so a ledger and a checkpoint can be matched. Owned by t. */
const char *dpt_trainer_run_id(const dpt_trainer *t);

/* ==== Run directories ==== */
#define DPT_RUN_LOCK_FILE "dptrain.lock"
/* The run's secret file (mode 0600: its key, seed and streams' state): checkpoints and
 * ledger.json identify the training data only by data_hmac = HMAC-SHA256(its key,
 * dpt_dataset_hash), so they can be published without letting anyone confirm a candidate
 * dataset; a resume needs it (docs/checkpoints.md). It is SECRETS/<run id>.secret
 * (dpt_run_secret_dir); older runs kept it in their directory under this name, where a
 * resume still reads it (and moves it) and overwrite removes it. Never publish it. */
#define DPT_RUN_KEY_FILE "dptrain.secret"
/* The directory of the runs' secret files: secret_dir when non-NULL, else
 * $DPTRAIN_SECRETS_DIR, else $XDG_STATE_HOME/dptrain/secrets (an absolute XDG_STATE_HOME),
 * else $HOME/.local/state/dptrain/secrets, into out[cap]. Creates it (and missing parents)
 * mode 0700. DPT_EINVAL for an empty secret_dir, no home directory or a path of 480 bytes
 * or more; DPT_EIO (naming it and where it came from) when it cannot be made, is not a
 * directory, belongs to another user or is open to others (any group or other permission
 * bit, e.g. mode 0755: chmod 700 it). */
dpt_status dpt_run_secret_dir(const char *secret_dir, char *out, size_t cap);
/* Where the secret file of the run in run_dir is (its checkpoint's run id, else its
 * ledger's): SECRETS/<run id>.secret (SECRETS = dpt_run_secret_dir(secret_dir)) when it
 * exists, else run_dir/DPT_RUN_KEY_FILE when that exists (an older run's); *found = 0
 * when neither does (out then names the first, or the second for a run without a run id).
 * Errors of dpt_run_secret_dir; DPT_EFORMAT for a run id that is not 32 hex digits. */
dpt_status dpt_run_secret_path(const char *run_dir, const char *secret_dir, char *out, size_t cap, int *found);
/* Removes the secret of the run in run_dir: run_dir/DPT_RUN_KEY_FILE (an older run's) and
 * SECRETS/<run id>.secret when that file records run_dir as its run's directory (the real
 * path); a copy of a run directory shares its run id with the original, whose secret is
 * then left. note (may be NULL) receives what was removed or left ("" for nothing). What
 * overwrite does for the trainer; for callers that clear run directories themselves.
 * Errors of dpt_run_secret_dir; DPT_EIO when a file cannot be removed. */
dpt_status dpt_run_secret_remove(const char *run_dir, const char *secret_dir, char *note, size_t cap);
/* Counts the entries of `dir` other than its lock file (*count = 0 when dir does not
 * exist); `names` (may be NULL) receives the first few, comma-separated, truncated to
 * names_len bytes. DPT_EIO when dir exists but cannot be read or is not a directory. */
dpt_status dpt_run_dir_inspect(const char *dir, size_t *count, char *names, size_t names_len);
/* A new run directory's name for a caller given none (the CLI without --out, Python's
 * runs_dir=): PARENT/YYYYMMDD-HHMMSS-XXXX (local time; XXXX: 16 random bits from the OS, in
 * hex) into out[cap]; nothing is created. DPT_EINVAL for an empty parent or a name that
 * does not fit in cap bytes; DPT_ECRYPTO without OS randomness. */
dpt_status dpt_run_dir_new_name(const char *parent, char *out, size_t cap);
/* Points PARENT/latest (PARENT: run_dir up to its last '/') at run_dir, by a relative
 * symbolic link replaced atomically (rename), so PARENT/latest names the newest run.
 * *linked (may be NULL) = 1 when done; 0 with DPT_OK when PARENT/latest exists and is not a
 * symbolic link (an older dptrain's default run directory: left as it is) or run_dir has
 * no '/'. DPT_EIO naming the link when it cannot be made (nothing is changed then). */
dpt_status dpt_run_dir_link_latest(const char *run_dir, int *linked);
/* The seed for dpt_train_config.seed (with seed_from_os = *from_os) when the caller was
 * given 0 and makes releases from it before the trainer exists (the CLI's and Python's DP
 * normalization and DP-PCA): with `resume`, the run's own from the secret file of DIR's run
 * (in the default secret directory, or DIR's own for an older run; *from_os
 * = 0 when the run's seed was chosen), so a resume regenerates those releases instead of
 * drawing new ones; otherwise (or when the run has no secret file, or one of format 1) a new
 * non-zero seed from the OS (*from_os = 1). DPT_EIO for a secret file that cannot be read or
 * that others can read; DPT_EFORMAT for a malformed one; DPT_ECRYPTO without OS randomness.
 * The seed is secret: never print or publish it. */
dpt_status dpt_run_seed_resolve(const char *dir, int resume, uint64_t *seed, int *from_os);
/* The same with the run's secret file found as dpt_run_secret_path(dir, secret_dir) finds
 * it (dpt_run_seed_resolve: secret_dir NULL, the default directory); also the errors of
 * dpt_run_secret_dir. */
dpt_status dpt_run_seed_resolve_at(const char *dir, const char *secret_dir, int resume, uint64_t *seed,
                                   int *from_os);
/* Checks that the privacy ledger file `ledger_path` belongs to the checkpoint
 * `checkpoint_path`: the checkpoint is of a private run, both carry the same run id, and
 * the ledger records at least the checkpoint's steps. DPT_EMISMATCH naming both files
 * otherwise (checkpoints and ledgers older than run ids pass the id check). */
dpt_status dpt_run_check_ledger(const char *checkpoint_path, const char *ledger_path);

/* Mean loss and accuracy of the current model on a dataset (chunks of max_batch). For a
 * regression dataset (targets) the loss must be DPT_LOSS_SQUARED: *mean_loss is the mean of
 * 0.5 ||f(x) - t||^2 and *accuracy is NAN (dpt_evaluate_mse gives the mean squared error). */
dpt_status dpt_evaluate(dpt_model *m, dpt_loss_kind loss, const dpt_dataset *d,
                        double *mean_loss, double *accuracy);

/* Accessors for algorithms. */
dpt_model *dpt_trainer_model(dpt_trainer *t);
const dpt_train_config *dpt_trainer_config(const dpt_trainer *t);
dpt_rng *dpt_trainer_noise_rng(dpt_trainer *t);
size_t dpt_trainer_dataset_size(const dpt_trainer *t);
/* Inside accumulate: the targets [bc, t_dim] of the chunk being accumulated (rows aligned
 * with its x) when the training set is regression data; NULL for classification. */
const float *dpt_trainer_batch_targets(const dpt_trainer *t);
uint64_t dpt_trainer_step(const dpt_trainer *t);
/* Data-parallel shards of the run (1 when not sharded; docs/distributed.md). */
size_t dpt_trainer_shards(const dpt_trainer *t);
/* The privacy ledger of a private algorithm (NULL otherwise); a view valid until
 * dpt_trainer_free. It is also in every checkpoint and in out_dir/ledger.json, which is
 * written atomically BEFORE each checkpoint, so the ledger on disk never records fewer
 * steps than the parameters on disk reflect. */
struct dpt_ledger;
const struct dpt_ledger *dpt_trainer_ledger(const dpt_trainer *t);
/* 1 when the last dpt_trainer_run stopped before a step that would exceed
 * cfg.target_epsilon (DPT_STOP_BUDGET); *eps_next receives the epsilon that step would
 * have reached. */
int dpt_trainer_budget_stopped(const dpt_trainer *t, double *eps_next);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
