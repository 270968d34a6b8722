/* train: the one training loop (sample, step, apply, log, evaluate, checkpoint) and the
 * algorithms as small strategy structs plugged into it (non-private SGD first; DP-SGD,
 * DP-ULR, DP-MAC, PDP-SGD and noisy GD add their own dpt_algo).
 * Memory: dpt_trainer_new allocates everything a run needs (model, optimizer, batch
 * buffers for the declared maximum batch, RNG streams); dpt_trainer_free releases it. The
 * datasets passed in are borrowed and must outlive the trainer.
 * Thread safety: one trainer per thread; it uses cfg.threads threads inside. */
#ifndef DPTRAIN_TRAIN_H
#define DPTRAIN_TRAIN_H

#include <dptrain/core.h>
#include <dptrain/data.h>
#include <dptrain/io.h>
#include <dptrain/nn.h>
#include <dptrain/optim.h>
#include <dptrain/privacy.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpt_trainer dpt_trainer;

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
    /* x [bc, D], y [bc]; returns the sum of per-example losses in *loss_sum */
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
} dpt_algo;

/* Non-private minibatch SGD: mean loss gradient over the sampled batch. */
dpt_status dpt_algo_sgd_new(dpt_algo **out);

/* DP-SGD (Abadi et al. 2016) with Poisson sampling at rate q: per chunk, per-example loss
 * gradients (not divided by B), ghost norms (SQNORM), factors c_i = min(1, C/||g_i||),
 * then sum_i c_i g_i as one weighted GEMM per layer (WEIGHTED) into model->grad; finish
 * adds N(0, sigma^2 C^2) once and divides by the expected batch size qN. Memory does not
 * grow with batch x parameters (reference: materialized chunks of ref_chunk examples). */
typedef struct {
    double sigma;            /* noise multiplier (>= 0) */
    double clip;             /* C > 0 */
    dpt_clip_mode clip_mode; /* flat (default) or per-layer with C_l = C / sqrt(G) */
    int reference;           /* 1: materialized per-example gradients (tests, reference) */
    size_t ref_chunk;        /* reference: examples per materialized chunk (0 = 16) */
    int secure;              /* 1: exact discrete Gaussian noise (dpt_privacy_noise_add_secure) */
} dpt_dpsgd_config;
dpt_dpsgd_config dpt_dpsgd_config_defaults(void);
/* Copies cfg. DPT_EINVAL naming the flag for C <= 0 or sigma < 0. */
dpt_status dpt_algo_dpsgd_new(const dpt_dpsgd_config *cfg, dpt_algo **out);

/* PDP-SGD (proportional DP regularization; see docs/pdpsgd.md). NOT differentially
 * private: no theorem, no accountant, no epsilon. The update direction is the gradient of
 *   mean loss + lambda sum theta^2 + kappa sum_{linear layers} sum_{j,k} W_jk^2 m_k
 *                                  + kappa sum_{biases} b_j^2
 * where m_k = (1/|B|) sum_{n in B} x_{n,k}^2 is the batch mean of the SQUARED input
 * feature k of that Linear layer (for hidden layers: its input activation), treated as a
 * constant (no gradient flows through x). A bias multiplies x = 1 (plain L2 with kappa).
 * Layers without parameters (activations) add nothing. The paper's derivation gives
 * kappa = (eta sigma)^2 (dpt_pdp_kappa). An empty batch leaves grad zero (no step). */
typedef struct {
    double lambda; /* plain L2 coefficient (>= 0) */
    double kappa;  /* proportional coefficient (>= 0) */
} dpt_pdp_config;
/* DPT_EINVAL naming --lambda / --kappa for negative or non-finite values. */
dpt_status dpt_algo_pdpsgd_new(const dpt_pdp_config *cfg, dpt_algo **out);
/* kappa = (eta sigma)^2, the paper's value for learning rate eta and relative noise sigma. */
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

/* ==== Run configuration ==== */
typedef struct {
    const char *model_spec;   /* "mlp:784-128-64-32-10:gelu" */
    dpt_loss_kind loss;
    dpt_init_scheme init;
    dpt_optim_config optim;
    dpt_schedule schedule;
    dpt_sampler_kind sampler; /* shuffle (fixed batch), poisson (rate q), full */
    size_t batch_size;        /* shuffle: batch size; poisson: expected batch (q = B/N) */
    double sample_rate;       /* poisson: q (0 = derive from batch_size) */
    uint64_t epochs;
    uint64_t seed;            /* all streams derive from it (init, data, noise) */
    int threads;
    const char *out_dir;      /* run directory (NULL: no files) */
    int progress;             /* 1: progress bar on stderr (a terminal); 0: plain lines */
    int quiet;                /* 1: no per-epoch lines */
    uint64_t max_steps;       /* 0 = no limit: stop after this many steps in total */
    const char *run_json;     /* optional JSON object stored verbatim in checkpoints as "run"
                                 (the CLI keeps dataset and normalization there) */
    /* Private algorithms only: */
    double delta;             /* delta of the reported epsilon (default 1e-5) */
    double target_epsilon;    /* > 0: stop BEFORE the step whose release would exceed it
                                 (RDP accountant, Balle conversion) */
    int allow_ledger_mismatch;/* 1: resume although q, sigma or data differ from the ledger
                                 (recorded in the ledger metadata) */
    int secure;               /* 1: OS-seeded noise stream, never logged or saved */
} dpt_train_config;

dpt_train_config dpt_train_config_defaults(void);

/* Per-epoch results (also written to metrics.jsonl). */
typedef struct {
    uint64_t epoch, step;
    double train_loss, test_loss, test_accuracy, wall_s;
    double lr;
} dpt_epoch_result;

/* Creates a trainer for train/test data (test may be NULL). The algorithm is owned by
 * the trainer afterwards. Initializes the model from cfg.seed. */
dpt_status dpt_trainer_new(const dpt_train_config *cfg, const dpt_dataset *train,
                           const dpt_dataset *test, dpt_algo *algo, dpt_trainer **out);
void dpt_trainer_free(dpt_trainer *t);

/* Continues from out_dir/checkpoint.safetensors: model, optimizer, step, epoch, RNG
 * streams and sampler position, so the run continues bit-identically (same threads).
 * Refuses a checkpoint whose model, data hash or run settings differ (DPT_EMISMATCH). */
dpt_status dpt_trainer_resume(dpt_trainer *t);

/* Runs until cfg.epochs epochs are done (or max_steps). Writes metrics.jsonl and a
 * checkpoint after every epoch when out_dir is set. `last` (may be NULL) receives the
 * final epoch's results. */
dpt_status dpt_trainer_run(dpt_trainer *t, dpt_epoch_result *last);

/* Mean loss and accuracy of the current model on a dataset (chunks of max_batch). */
dpt_status dpt_evaluate(dpt_model *m, dpt_loss_kind loss, const dpt_dataset *d,
                        double *mean_loss, double *accuracy);

/* Accessors for algorithms. */
dpt_model *dpt_trainer_model(dpt_trainer *t);
const dpt_train_config *dpt_trainer_config(const dpt_trainer *t);
dpt_rng *dpt_trainer_noise_rng(dpt_trainer *t);
size_t dpt_trainer_dataset_size(const dpt_trainer *t);
uint64_t dpt_trainer_step(const dpt_trainer *t);
/* The privacy ledger of a private algorithm (NULL otherwise); a view valid until
 * dpt_trainer_free. It is also in every checkpoint and in out_dir/ledger.json, which is
 * written atomically BEFORE each checkpoint, so the ledger on disk never records fewer
 * steps than the parameters on disk reflect. */
struct dpt_ledger;
const struct dpt_ledger *dpt_trainer_ledger(const dpt_trainer *t);
/* 1 when the last dpt_trainer_run stopped before a step that would exceed
 * cfg.target_epsilon; *eps_next receives the epsilon that step would have reached. */
int dpt_trainer_budget_stopped(const dpt_trainer *t, double *eps_next);

#ifdef __cplusplus
}
#endif
#endif
