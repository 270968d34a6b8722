/* Private layout of dpt_trainer, shared by the loop and the algorithms in src/train/. */
#ifndef DPT_TRAIN_INTERNAL_H
#define DPT_TRAIN_INTERNAL_H
#include <dptrain/accounting.h>
#include <dptrain/train.h>

struct dpt_trainer {
    dpt_train_config cfg;
    char model_spec[256];
    char out_dir[512];
    const dpt_dataset *train, *test; /* borrowed */
    dpt_model *model;
    dpt_optim opt;
    int opt_live;
    dpt_algo *algo; /* owned */
    dpt_sampler *sampler;
    dpt_rng rng_init, rng_noise;
    int rng_init_live, rng_noise_live;
    int threads;
    size_t max_batch;
    uint32_t *idx;  /* [n] indices of the current batch */
    float *xb;      /* [max_batch, D] gathered features */
    int32_t *yb;    /* [max_batch] gathered labels */
    float *tb;      /* [max_batch, t_dim] gathered targets (regression data), else NULL */
    uint64_t step, epoch;
    double wall_s;  /* training time (all sessions of the run) */
    double epoch_loss_sum;
    uint64_t epoch_examples;
    /* The training set's SHA-256 (dpt_dataset_hash) stays in memory (the ranks compare
     * it); files hold only data_tag = hex HMAC-SHA256(run_key, data_hash), whose key is
     * in the run's secret file (rundir.c, "Where the secret lives"). */
    uint8_t data_hash[32];
    uint8_t run_key[32];  /* drawn from the OS by dpt_trainer_new; a resume reads the run's */
    char data_tag[65];
    int key_saved;        /* run_key is in the run's secret file (saved before the first
                             checkpoint, or read back by resume) */
    char secret_dir[512]; /* where the secret is saved: SECRETS/<run_id>.secret (rank 0 with
                             an out_dir; "" otherwise: a resume then reads only
                             out_dir/DPT_RUN_KEY_FILE, the copy rank 0 sent) */
    char secret_path[600];    /* the secret file a resume read (or looked for first) */
    char secret_where[1300];  /* the places a resume looked for it, for messages */
    char secret_legacy[600];  /* an older run's out_dir/DPT_RUN_KEY_FILE, removed after the
                                 next save has written the secret to secret_dir ("" none) */
    int key_lost;         /* resumed without the run's key (allow_ledger_mismatch): the
                             data could not be compared, and the run has a new key */
    /* The seed (cfg.seed, never 0 once the trainer exists): drawn from the OS when the
     * caller gave 0 (seed_caller = 0), else the caller's (seed_caller = 1: anyone who knows
     * it can regenerate the batches and the noise; labelled wherever the run's results go).
     * It and the streams' positions are kept only in the secret file (rundir.c). */
    int seed_caller;
    char *secret_cur, *secret_prev; /* the secret file's stream states (JSON text): the newest
                                       (of step secret_cur_step) and the one before it */
    uint64_t secret_cur_step;
    /* What dpt_run_key_load read: the format (1: key only), and for format 2 the seed, its
     * source and every stored stream state (JSON array text) */
    int secret_version;
    uint64_t secret_seed;
    int secret_seed_caller;
    char *secret_streams_all;
    dpt_metrics metrics;
    int metrics_open;
    int resumed;
    char *run_json; /* owned copy of cfg.run_json */
    char eval_split[32]; /* copy of cfg.eval_split (cfg.eval_split points here or is NULL) */
    dpt_ledger *ledger; /* private algorithms: every noisy release (owned) */
    char excludes[1024]; /* what the privacy statement does not cover ("" = nothing;
                           dpt_trainer_exclude_from_guarantee): in every metrics line */
    char init_note[320]; /* "" = the seed's initialization; else where the starting
                            parameters came from (dpt_trainer_set_initial_params): in the
                            checkpoint's state and the ledger's metadata */
    /* Frozen layers (cfg.freeze): frozen[l] = 1 for a frozen layer ([n_layers]; NULL when
     * every layer trains), their names in model order, the parameter ranges that train
     * (pairs [lo, hi) for dpt_optim_step_ranges), the lowest trained layer and the number
     * of trained parameters. */
    unsigned char *frozen;
    char freeze_list[1024];
    size_t *train_ranges;
    size_t n_train_ranges;
    size_t first_trained;
    size_t n_trained;
    /* The frozen trunk's features (dpt_train_config.no_feature_cache): fc [n, fc_dim] =
     * act[fc_layer] of every training example, fc_layer = first_trained. fc_state: 0 not
     * decided yet (decided at the session's first step), 1 in use (gathered batches hold
     * its rows, and the prologue starts the forward pass at fc_layer), -1 not used.
     * fc_trunk: the frozen trunk's parameters (theta[0, fc_trunk_n)) the features were
     * computed with; a run that finds them changed computes the features again. */
    float *fc, *fc_trunk;
    float *fc_test; /* [test n, fc_dim] the trunk's output on the test set (NULL: not kept;
                       a distributed run evaluates its shards from the inputs) */
    size_t fc_dim, fc_layer, fc_trunk_n;
    int fc_state;
    size_t xb_cap;  /* floats per row that xb holds */
    /* dpt_trainer_feature_norm: done (once per fresh run); the fbn layer's input for every
     * training example [n, in_dim of fn_layer] (NULL: not kept), which the feature cache
     * takes instead of running the layers below fn_layer again */
    int fn_done;
    float *fn_feat;
    size_t fn_layer;
    int budget_stopped; /* the run stopped before exceeding cfg.target_epsilon */
    double budget_eps_next;
    dpt_stop_reason stop_reason;
    char run_id[33];    /* 32 hex digits (dpt_trainer_run_id) */
    int lock_fd;        /* flock on out_dir/dptrain.lock; -1 = none */
    int dir_created;    /* 1: dpt_trainer_new created out_dir (removed at free if left unused) */
    int clear_pending;  /* 1: overwrite: remove the previous run's files at the first write */
    int running;        /* 1: inside dpt_trainer_run (a callback may not re-enter it) */
    int dir_ready;      /* the run directory was checked (fresh run) and metrics opened */
    /* The last published result: its metrics.jsonl line, kept in every checkpoint so a
     * resume can publish it if the crash came between saving and publishing. */
    char *record;       /* owned; NULL = nothing published yet */
    char record_note[256];
    int republish;      /* resumed: metrics.jsonl lacks `record`; the run publishes it first */
    unsigned long fault_hits; /* passages through the DPTRAIN_FAULT test hook's point */
    /* Data parallel (dist.c): rank/ranks of the job, S shards, owned shards [sh_lo, sh_hi) */
    int rank, nranks;
    size_t shards, sh_lo, sh_hi;
    int dist;          /* 1: shards > 1 or nranks > 1 (the sharded step) */
    int *owner;        /* [shards] rank owning each shard */
    unsigned char **part; /* [sh_hi - sh_lo] per-shard buffers: P floats, then doubles */
    unsigned char *tmp, *res; /* receive buffer, reduced result */
    size_t part_cap;   /* bytes per buffer */
    uint32_t *sidx;    /* [n] indices of one shard's part of the batch */
    /* Parameter averaging (cfg.ema_decay): ema [P] the average (valid once a step ran or a
     * resume loaded it), ema_swap [P] the raw parameters while the test set is evaluated
     * under the average. NULL without it. */
    float *ema, *ema_swap;
    /* Augmentation (cfg.augment): the stream keyed by the run's seed (re-keyed when a
     * resume restores the run's seed), the dataset indices of the rows accumulate is
     * given (t->idx + the chunk's start), and the images' shape (the model's input). */
    dpt_rng rng_aug;
    int rng_aug_live;
    const uint32_t *chunk_idx;
    size_t aug_shape[3];
};

/* ==== Shared by the algorithms ==== */

/* Per-chunk buffers every loss-based algorithm needs, grown to the model's max_batch. */
typedef struct {
    float *dout; /* [cap, K] loss cotangents */
    float *loss; /* [cap] per-example losses */
    size_t cap;
} dpt_chunk_bufs;
dpt_status dpt_chunk_bufs_reserve(dpt_chunk_bufs *b, const dpt_model *m);
void dpt_chunk_bufs_free(dpt_chunk_bufs *b);

/* The chunk prologue: forward pass of x [bc, D], per-example losses (against the labels y,
 * the regression targets tg [bc, t_dim] when the training set has them, or x itself for the
 * squared error on classification data: an autoencoder) into b->loss, their
 * gradients with respect to the outputs times `scale` into b->dout, then the backward
 * pass (every layer's input cotangent stays in the model for backward_params; with frozen
 * layers only down to the lowest trained layer's output).
 * *loss_sum = sum of the unscaled per-example losses. */
dpt_status dpt_train_forward_backward(dpt_trainer *t, dpt_chunk_bufs *b, const float *x, const int32_t *y,
                                      const float *tg, size_t bc, float scale, double *loss_sum);
/* Floats per row of the x that accumulate receives: the model's inputs, or the cached
 * features of the frozen trunk (fc_dim). */
static inline size_t dpt_train_x_dim(const dpt_trainer *t) {
    return t->fc_state == 1 ? t->fc_dim : t->model->in_dim;
}
/* Decides and (when it applies) builds the frozen trunk's feature cache; called before the
 * first step of a session. Falls back to no cache (with a note) rather than failing. */
dpt_status dpt_train_feature_cache(dpt_trainer *t);
/* Called as a run starts: when the trunk's parameters differ from those the cached features
 * were computed with (dpt_trainer_set_initial_params after a failed first step, a caller
 * writing the model's theta between runs), drops the cache so the next step builds it again. */
void dpt_train_feature_cache_check(dpt_trainer *t);
/* Gathers rows idx[0..bc) of the training set into t->xb (features, or the cached trunk
 * features), t->yb (labels) and t->tb (regression targets). */
void dpt_train_gather(dpt_trainer *t, const uint32_t *idx, size_t bc);

/* Augmented copies for the chunk being accumulated: out [n K, D] (example-major: row i K + k
 * is copy k of row i of x [n, D], x the gathered rows of dataset examples idx[0..n)),
 * cropped/flipped as cfg.augment says (data/augment.h). Copy k of example j at step s is a
 * function of (run seed, s, j, k) only: the words come from substream j + 1 of the
 * DPT_STREAM_AUGMENT stream at block 16 s (one refill per example and step), so an
 * example's copies do not depend on which other examples were sampled (neighbouring batches
 * share them), differ from step to step, and a resumed run draws the same. */
dpt_status dpt_train_augment(dpt_trainer *t, const float *x, const uint32_t *idx, size_t n, size_t K, float *out);

/* dpt_model_param_grad for the modes whose output is a parameter-shaped slice per layer
 * (DPT_GRAD_SUM, DPT_GRAD_PER_EXAMPLE with row stride ld) over the trained layers only:
 * the frozen layers' slices of out are left as they are (their cotangents were not
 * computed). */
dpt_status dpt_train_param_grad(dpt_trainer *t, size_t bc, dpt_grad_mode mode, float *out, size_t ld,
                                int accumulate);

/* 1 when layer l has parameters and trains (is not frozen: dpt_train_config.freeze). */
static inline int dpt_train_layer_trains(const dpt_trainer *t, size_t l) {
    return t->model->layers[l].n_params && !(t->frozen && t->frozen[l]);
}

/* ==== Data parallel (dist.c) ==== */
/* Sets S shards (0 = number of ranks): ownership and buffers. Refuses algorithms that did
 * not opt in (dpt_algo.distributable) when S > 1 or ranks > 1. */
dpt_status dpt_dist_configure(dpt_trainer *t, size_t shards);
/* Collective: every rank must hold the same data, model and run settings as rank 0. */
dpt_status dpt_dist_check_agree(dpt_trainer *t);
/* Collective, at the first step of a fresh run: every rank's starting parameters equal rank
 * 0's (SHA-256), DPT_EMISMATCH on every rank otherwise. */
dpt_status dpt_dist_check_start(dpt_trainer *t);
/* The sharded body of a step for the global batch t->idx[0..b): per owned shard zero
 * grad/sums, accumulate its examples in chunks, keep the sums; reduce over shards and
 * leave the totals in model->grad and algo->sums on every rank, and in *b_global the
 * number of examples processed over all shards (with --secure every rank samples its own
 * shards from its own OS stream, so the local b is not the batch size). */
dpt_status dpt_dist_accumulate(dpt_trainer *t, size_t b, double *loss_sum, size_t *b_global);
/* Evaluation split by shards and reduced (identical for any rank count). */
dpt_status dpt_dist_evaluate(dpt_trainer *t, const dpt_dataset *d, double *mean_loss, double *accuracy);
/* Rank 0 reads the run directory's checkpoint and ledger and sends them to every rank,
 * which resumes from a private copy; `local` does the actual resume. */
dpt_status dpt_dist_resume(dpt_trainer *t, dpt_status (*local)(dpt_trainer *t));
void dpt_dist_free(dpt_trainer *t);
/* Loss sum and number of correct predictions over examples [lo, hi) of d. */
dpt_status dpt_eval_range(dpt_model *m, dpt_loss_kind loss, const dpt_dataset *d, size_t lo, size_t hi,
                          double *loss_sum, size_t *correct);
/* The same from layer `first` on, its input the rows of feat [d->n, in_dim of layer first]
 * (a trunk's cached output for d's examples); feat NULL: from d's inputs (first = 0). */
dpt_status dpt_eval_range_from(dpt_model *m, dpt_loss_kind loss, const dpt_dataset *d, const float *feat,
                               size_t first, size_t lo, size_t hi, double *loss_sum, size_t *correct);

/* For algorithms whose step is one sampled Gaussian mechanism (q, a->sigma): record()
 * appends that event; bind sets a->sigma to the multiplier the ledger must carry, sigma,
 * or in secure mode sigma relative to the lattice-rounded sum's sensitivity
 * (dpt_privacy_secure_sigma_eff), after checking the algorithm's and the run's secure
 * flags agree. */
dpt_status dpt_algo_record_sgm(dpt_algo *a, dpt_trainer *t, size_t batch);
/* The two pieces of the sampled Gaussian mechanism's accounting that every user of it
 * shares (DP-SGD, DP-MAC and dpt_sgm, mechanism.h), so each records the secure mode alike:
 * the multiplier the ledger carries for noise multiplier sigma on `coords` noised
 * coordinates (sigma, or in secure mode sigma relative to the lattice-rounded sum's
 * sensitivity C + sqrt(coords) h: dpt_privacy_secure_sigma_eff), and `count` steps of the
 * event: SGM(q, sigma_acct), or with secure noise from the table sampler sgm_dgauss events
 * carrying the sampler's distance for the coords coordinates (dpt_privacy_secure_distance). */
double dpt_sgm_accounted_sigma(double sigma, int secure, size_t coords);
/* The sampled Gaussian release (sgm_release.c): one per mechanism, fixed at init. The noise
 * it adds (std sigma sens) and the event it records (SGM(q, sigma_acct)) come from the same
 * fields; nothing else holds either. */
typedef struct {
    double q;          /* Poisson rate of the batch */
    double sigma;      /* noise multiplier drawn */
    double sigma_acct; /* what the ledger records: sigma, or secure mode's effective multiplier */
    double sens;       /* L2 sensitivity C of the clipped sum */
    double scale;      /* the release is (sum + noise) * scale: 1 / (q N) (DP-MAC 1 / (2 q N)) */
    size_t coords;     /* noised coordinates */
    int secure;
    dpt_dgauss_method sampler;
} dpt_gauss_release;
dpt_status dpt_gauss_release_init(dpt_gauss_release *r, double q, double sigma, double sens, double scale,
                                  size_t coords, int secure, dpt_dgauss_method sampler);
dpt_status dpt_gauss_release_apply(const dpt_gauss_release *r, dpt_rng *noise, float *v, int threads);
dpt_status dpt_gauss_release_apply_sum(const dpt_gauss_release *r, dpt_rng *noise, double *sum, float *out,
                                       int threads);
dpt_status dpt_gauss_release_record(const dpt_gauss_release *r, dpt_ledger *l, uint64_t count);
/* Adaptive clipping (Andrew et al. 2021; dpt_privacy_adaptive_sigma, docs/dpsgd.md): the
 * quantile estimate of the clipping norm, shared by DP-SGD and dpt_sgm. Per step, with clip C
 * (= C_t) and the centred count c = sum_i (1[||g_i|| <= C] - 1/2) of the sampled batch:
 *   b~ = clamp(1/2 + (c + N(0, sigma_b^2)) / (q N), 0, 1)    (the noise from the run's noise
 *                                                           stream, after the gradient's)
 *   C <- C exp(-lr (b~ - quantile))                         (geometric update)
 * Everything after the noisy count is post-processing, so C_t is a function of released
 * values (it may be published: metrics, checkpoints). quantile 0 = off. */
typedef struct {
    double quantile; /* gamma in (0, 1); 0: fixed clipping */
    double lr;       /* eta_C > 0 */
    double sigma_b;  /* std of the noise on the centred count */
    double expected; /* q N, the expected batch size (public) */
    double C;        /* the current clip C_t */
    double frac;     /* the last released fraction b~ (NAN before the first step) */
} dpt_adaclip;
/* Makes r (initialized with the total sigma) the gradient half of the joint release: r->sigma
 * becomes sigma_Delta (dpt_privacy_adaptive_sigma), r->sigma_acct stays sigma (one SGM(q,
 * sigma) event per step covers both halves). Not with secure noise (DPT_ENOTSUP). `field`
 * names sigma_b in errors (e.g. "dpt_dpsgd_config.adaptive_sigma_b"). */
dpt_status dpt_gauss_release_adaptive(dpt_gauss_release *r, double sigma_b, const char *field);
/* The clip of the next step: r->sens = C (noise std sigma_Delta C). */
void dpt_gauss_release_set_clip(dpt_gauss_release *r, double C);
/* The count half: draws N(0, sigma_b^2) from `noise`, releases b~ and updates a->C (above). */
dpt_status dpt_adaclip_step(dpt_adaclip *a, dpt_rng *noise, double count_centred);
/* Checks quantile in (0, 1), lr > 0 and finite, sigma_b >= 0 (0: the default q N / 20) and
 * finite, names the fields with `prefix` (e.g. "dpt_dpsgd_config.adaptive_"). */
dpt_status dpt_adaclip_check(double quantile, double lr, double sigma_b, const char *prefix);
/* The buffers' bound on a Poisson batch of rate q over n examples: min(n, ceil(q n +
 * 6 sqrt(q n) + 8)) (a larger batch has probability below 1e-9 and is chunked, never cut). */
size_t dpt_poisson_batch_bound(size_t n, double q);
/* eps(ctx, more): the epsilon after `more` further steps (non-decreasing in more). */
typedef dpt_status (*dpt_eps_after_fn)(const void *ctx, uint64_t more, double *eps);
/* The budget: the largest k in [0, cap] with eps(k) <= target (0 also when eps(0) is above
 * it): exponential search, then bisection, O(log k) accountant calls once, none per step. */
dpt_status dpt_budget_steps_left(dpt_eps_after_fn eps, const void *ctx, double target, uint64_t cap,
                                 uint64_t *left);
dpt_status dpt_sgm_ledger_events(dpt_ledger *l, double q, double sigma_acct, size_t coords, int secure,
                                 dpt_dgauss_method sampler, uint64_t count);
/* DP-SGD keeps a Conv2d layer's per-example gradients between its norms and its clipped
 * sum while all kept layers fit `floats` (default 32 M), splitting a chunk into passes of
 * fewer examples for that down to `min_pass` (default 128; 0 means 1); tests set floats 0
 * to force the SQNORM + WEIGHTED path, or a small min_pass to run many passes. `a` must
 * come from dpt_algo_dpsgd_new. */
void dpt_dpsgd_set_keep_budget(dpt_algo *a, size_t floats, size_t min_pass);
/* Examples per pass of DP-SGD's fast path, as chosen at the last step's start (0 before
 * the first): for the tests. */
size_t dpt_dpsgd_pass(const dpt_algo *a);
/* Binds an SGM algorithm: refuses a sampler other than Poisson (DPT_EINVAL) and a secure
 * flag other than the run's, makes its release (q, sigma, sensitivity sens, the release
 * scaled by 1 / (div q N), the trained coordinates, the noise mode) and sets a->sigma to the
 * release's accounted multiplier (what the ledger's metadata shows). */
dpt_status dpt_algo_bind_sgm(dpt_algo *a, const dpt_trainer *t, const char *name, double sigma, double sens,
                             double div, int secure, dpt_dgauss_method sampler, dpt_gauss_release *rel);
/* "DPT_SAMPLER_POISSON", ... as the enum spells it (errors name it so). */
const char *dpt_sampler_enum_name(dpt_sampler_kind k);

dpt_status dpt_trainer_checkpoint_path(const dpt_trainer *t, char *buf, size_t n);

/* ==== Run directory (rundir.c) ==== */
/* Formats one message and hands it to cfg.log (nothing happens without one). */
void dpt_trainer_log(const dpt_trainer *t, dpt_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* 32 random hex digits from the OS (a new run's id). */
dpt_status dpt_run_id_new(char id[33]);
/* Creates dir (one level) if needed and takes the exclusive lock; DPT_EBUSY naming the
 * directory and the holder's pid when another process (or trainer) holds it. *created: 1
 * when this call made the directory. */
dpt_status dpt_run_dir_lock(const char *dir, int *fd, int *created);
/* DPT_EINVAL when the secret directory sdir is the run directory run_dir or inside it (both
 * existing; compared after resolving links): publishing the run would publish the secret. */
dpt_status dpt_run_secret_outside(const char *sdir, const char *run_dir);
/* Removes dir and its lock file when it holds nothing else (see rundir.c). */
void dpt_run_dir_remove_if_unused(const char *dir);
void dpt_run_dir_unlock(int fd);
/* The run key: a fresh one from the OS (sets data_tag; not yet saved); written to
 * secret_dir/<run_id>.secret (mode 0600, atomically; then an older run's file in out_dir,
 * if the resume read one, is removed); read back by a resume of the checkpoint of run
 * run_id (NULL: the checkpoint has none) from secret_dir, or from out_dir/DPT_RUN_KEY_FILE
 * (*found = 0 when neither exists: secret_where names both; DPT_EFORMAT when malformed;
 * DPT_EMISMATCH when the file is of another run). */
dpt_status dpt_run_key_new(dpt_trainer *t);
dpt_status dpt_run_key_save(dpt_trainer *t);
/* after the checkpoint of t->step is saved: rewrites the secret file with this step's
 * stream state alone (the earlier one dpt_run_key_save kept is dropped) */
dpt_status dpt_run_key_commit(dpt_trainer *t);
dpt_status dpt_run_key_load(dpt_trainer *t, const char *run_id, int *found);
/* The file dpt_run_key_load would read for the checkpoint now in out_dir (rank 0 sends it
 * to the other ranks for a resume). */
dpt_status dpt_run_secret_find(const dpt_trainer *t, char *path, size_t n);
/* After dpt_run_key_load of a format-2 secret: the sampler's and the noise stream's state
 * at `step` (*have_noise = 0 for a secure run, which stores no noise stream); DPT_EMISMATCH
 * when the file holds no state of that step. */
dpt_status dpt_run_secret_streams(dpt_trainer *t, uint64_t step, dpt_sampler_state *ss, dpt_rng_state *ns,
                                  int *have_noise);
/* Wipes (OPENSSL_cleanse) and frees a secret text (a stream state, the secret file's JSON).
 * Accepts NULL. */
void dpt_secret_free(char *text);
/* JSON helpers shared by the checkpoint state and the secret file: an unsigned 64-bit
 * integer stored as a decimal string (or an exact JSON number), and an RNG state. */
struct cJSON;
int dpt_json_u64(const struct cJSON *o, const char *key, uint64_t *out);
struct cJSON *dpt_rng_state_json(const dpt_rng_state *s);
int dpt_rng_state_parse(const struct cJSON *o, dpt_rng_state *s);
/* Removes the files of a previous run (and their temporaries) from dir, only those, and
 * that run's secret (dpt_run_secret_remove's rule); says what it removed and what it left
 * through the trainer's log. */
dpt_status dpt_run_dir_clear(const dpt_trainer *t, const char *dir);
/* Adds every exclusion of t->excludes ("; "-joined) that the ledger's "epsilon_excludes"
 * lacks, keeping the ledger's own (release.c). No-op without a ledger. */
dpt_status dpt_trainer_excludes_to_ledger(dpt_trainer *t);
/* The labels of a result without a ledger (release.c): "  [note]" for the algorithm's
 * privacy note (dpt_algo.privacy_note, metrics "privacy") and "  [does NOT cover: X]" for
 * its exclusions (metrics "privacy_excludes"); either may be NULL or "". Used by the
 * trainer's epoch results and dpt_checkpoint_label, so both say the same. */
void dpt_privacy_note_label(const char *note, const char *excludes, char *buf, size_t cap);
/* 1: the run publishes no noiseless statistic of its batches (train_loss, the step's loss and
 * batch size, the checkpoint's loss sums): a private algorithm, or a DP mechanism whose
 * sampling no accountant covers (dpt_algo.dp_mechanism: DP-SGD on shuffled batches is still
 * compared with private runs, so it hides what they hide). */
static inline int dpt_algo_hides_batch_stats(const dpt_algo *a) { return a->is_private || a->dp_mechanism; }

#endif
