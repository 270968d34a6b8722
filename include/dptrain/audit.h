/* audit: empirical privacy auditing by membership inference. What DP-SGD's accountant
 * bounds from above, these attacks measure from below, for every algorithm (including
 * the ones with no guarantee: PDP-SGD, proportional noise, plain SGD).
 *   - statistics: ROC curve, AUC (Mann-Whitney, ties count 1/2), TPR at a fixed FPR,
 *     percentile-bootstrap confidence intervals; the regularized incomplete beta, its
 *     inverse and Clopper-Pearson intervals; the epsilon lower bound of an attack
 *     (Jagielski et al. 2020, Nasr et al. 2021);
 *   - scores: per-example loss (Yeom et al. 2018) and the logit-scaled confidence
 *     phi = log p_y - log(1 - p_y) of LiRA (Carlini et al. 2022), online and offline;
 *   - a driver that trains one model (target, shadow or canary run) through the library
 *     on a subset of a population and scores every population example;
 *   - the whole audit (split, target, shadows, attacks, summaries, canaries) as one call,
 *     dpt_audit_run, which the CLI's `dptrain audit` only prints and saves.
 * Convention: a HIGHER score means "more likely a member". Scores of members are `in`,
 * of non-members `out`.
 * Memory: functions write into caller buffers unless they say they allocate;
 * dpt_audit_result owns its score arrays (dpt_audit_result_free).
 * Thread safety: reentrant (each driver call uses its own trainers).
 * Errors: dpt_status + dpt_last_error() naming the parameter; the special functions
 * return NAN for arguments outside their domain. */
#ifndef DPTRAIN_AUDIT_H
#define DPTRAIN_AUDIT_H
#include <dptrain/core.h>
#include <dptrain/data.h>
#include <dptrain/train.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

/* ==== Special functions and binomial confidence ==== */
/* Regularized incomplete beta I_x(a, b) for a, b > 0, x in [0, 1] (continued fraction,
 * relative accuracy ~1e-14); NAN for invalid arguments. */
double dpt_betainc(double a, double b, double x);
/* The x in [0, 1] with I_x(a, b) = p (bisection to full double resolution); NAN for invalid input. */
double dpt_betainc_inv(double a, double b, double p);
/* Two-sided Clopper-Pearson interval for k successes in n trials at confidence 1 - alpha:
 * lo = B^-1(alpha/2; k, n-k+1) (0 when k = 0), hi = B^-1(1-alpha/2; k+1, n-k) (1 when
 * k = n). DPT_EINVAL for k > n, n = 0 or alpha outside (0, 1). */
dpt_status dpt_clopper_pearson(uint64_t k, uint64_t n, double alpha, double *lo, double *hi);

/* Epsilon lower bound from an attack's confusion counts on independent trials (tp, fn:
 * member trials; fp, tn: non-member trials), with confidence 1 - alpha: Clopper-Pearson
 * at alpha for each rate (a union bound over the two), then
 *   max(0, log((TPR_lo - delta) / FPR_hi), log((TNR_lo - delta) / FNR_hi)).
 * Any (eps, delta)-DP mechanism has TPR <= e^eps FPR + delta for every test. */
dpt_status dpt_audit_eps_lower_bound(uint64_t tp, uint64_t fn, uint64_t fp, uint64_t tn, double delta,
                                     double alpha, double *eps_lb);
/* The same from scores: the threshold is chosen on the even-indexed half of each set
 * (maximizing the point estimate of the bound) and the bound is computed with that fixed
 * threshold on the odd-indexed half, so the choice does not bias the interval. */
dpt_status dpt_audit_eps_from_scores(const double *in, size_t n_in, const double *out, size_t n_out,
                                     double delta, double alpha, double *eps_lb, double *threshold);

/* One-run audit (Steinke, Nasr and Jagielski 2023): m canaries, each included
 * independently with probability 1/2 in ONE training run; the auditor makes r guesses
 * (abstaining on the rest), v of them correct. Under (eps, delta)-DP,
 *   P[v correct or more] <= P[Bin(r, q) >= v] + 2 m delta max_{1<=i<=v} P[v-i <= Bin(r, q) < v] / i,
 * q = e^eps / (1 + e^eps). dpt_audit_one_run_pvalue returns that bound (capped at 1);
 * dpt_audit_one_run_eps the largest eps whose p-value is still < alpha (0 when even eps
 * = 0 is not rejected), by bisection to 1e-6. */
double dpt_audit_one_run_pvalue(uint64_t m, uint64_t r, uint64_t v, double eps, double delta);
dpt_status dpt_audit_one_run_eps(uint64_t m, uint64_t r, uint64_t v, double delta, double alpha, double *eps_lb);
/* Guesses from canary scores: "member" for the k highest, "non-member" for the k lowest
 * (2k <= n); *r = 2k guesses, *v = how many are right (is_member[i] the truth). */
dpt_status dpt_audit_one_run_guess(const double *score, const uint8_t *is_member, size_t n, size_t k, uint64_t *r,
                                   uint64_t *v);

/* ==== ROC ==== */
/* Scores may be +-inf but not NaN: the functions below (and eps_from_scores, summarize and
 * one_run_guess above and below) refuse a NaN score with DPT_EINVAL naming it; the two
 * that return a double return NAN then, with dpt_last_error() set (as for an empty set
 * or a failed allocation). */
/* AUC = P(s_in > s_out) + P(s_in = s_out)/2. NAN when a set is empty. */
double dpt_audit_auc(const double *in, size_t n_in, const double *out, size_t n_out);
/* Largest TPR over thresholds whose FPR <= max_fpr (a test "score >= t"). */
double dpt_audit_tpr_at_fpr(const double *in, size_t n_in, const double *out, size_t n_out, double max_fpr);
/* ROC points (fpr, tpr) from (0,0) to (1,1) at every distinct threshold, ascending;
 * fpr/tpr need n_in + n_out + 1 entries; *n receives the count. */
dpt_status dpt_audit_roc(const double *in, size_t n_in, const double *out, size_t n_out, double *fpr, double *tpr,
                         size_t *n);

typedef struct {
    double auc, auc_lo, auc_hi;
    double fpr_levels[2];            /* 0.001, 0.01 */
    double tpr[2], tpr_lo[2], tpr_hi[2];
} dpt_audit_summary;
/* AUC and TPR at 0.1% and 1% FPR with percentile-bootstrap intervals at 1 - alpha
 * (n_boot resamples of each set with replacement, from `seed`). */
dpt_status dpt_audit_summarize(const double *in, size_t n_in, const double *out, size_t n_out, size_t n_boot,
                               double alpha, uint64_t seed, dpt_audit_summary *s);

/* ==== Scores ==== */
/* For softmax cross-entropy models: per-example loss -log p_y and LiRA's
 * phi = log p_y - log(sum_{k != y} p_k) (stable in the logits), over d's examples idx
 * (NULL = the first n), in chunks of the model's max_batch. DPT_EINVAL, before any
 * forward pass, when m or d is NULL, the model has one output or other than d's features,
 * an example is not in d (idx[i] >= d->n; n > d->n), its label is not a model class or d
 * has no labels; DPT_ENOTSUP when d holds regression targets. */
dpt_status dpt_audit_scores(dpt_model *m, const dpt_dataset *d, const uint32_t *idx, size_t n, double *loss,
                            double *phi);
/* LiRA scores of the N target values phi_t from S shadows: phi_sh [S, N], in_mask [S, N]
 * (1 = example trained on by that shadow). Per example the IN and OUT means; one pooled
 * (global) standard deviation for IN and one for OUT (Carlini et al.'s fixed variance,
 * the stable choice with few shadows). online = 1: log N(phi; mu_in, s_in) -
 * log N(phi; mu_out, s_out) (offline formula for an example without IN shadows);
 * online = 0: (phi - mu_out) / s_out. Examples without OUT shadows get score 0.
 * DPT_EINVAL when no example has both IN and OUT shadows (online) or no OUT (offline). */
dpt_status dpt_audit_lira(const double *phi_sh, const uint8_t *in_mask, size_t S, size_t N, const double *phi_t,
                          int online, double *score);

/* ==== Driver ==== */
typedef enum { DPT_AUDIT_SGD = 0, DPT_AUDIT_DPSGD, DPT_AUDIT_PDPSGD, DPT_AUDIT_PROPNOISE } dpt_audit_algo;
typedef struct {
    dpt_train_config cfg;    /* run settings (out_dir is ignored: nothing is written) */
    dpt_audit_algo algo;
    dpt_dpsgd_config dpsgd;  /* DPT_AUDIT_DPSGD (cfg.sampler must be Poisson) */
    dpt_pdp_config pdp;      /* DPT_AUDIT_PDPSGD */
    dpt_propnoise_config prop; /* DPT_AUDIT_PROPNOISE */
} dpt_audit_job;
typedef struct {
    double epsilon;          /* DP-SGD: RDP epsilon at cfg.delta of this run; NAN otherwise */
    double test_accuracy;    /* on `test` (NAN without) */
    double wall_s;           /* training time */
    char epsilon_label[256]; /* DP-SGD: the labels a line showing epsilon carries (dpt_ledger_label,
                                full: "  [SEEDED run ...]" for a nonzero seed); "" otherwise */
} dpt_audit_run_info;
/* Trains one model on the examples i of `pop` with member[i] = 1 (seed overrides
 * cfg.seed), then writes loss[i] and phi[i] for EVERY example of pop (either may be
 * NULL). test may be NULL. */
dpt_status dpt_audit_train_and_score(const dpt_audit_job *job, const dpt_dataset *pop, const uint8_t *member,
                                     const dpt_dataset *test, uint64_t seed, double *loss, double *phi,
                                     dpt_audit_run_info *info);

/* ==== The whole audit ==== */
/* dpt_audit_run does what `dptrain audit` does, in memory: it splits a population into
 * members and non-members, trains (or takes) the target model, trains the LiRA shadows,
 * scores the loss attack and LiRA offline/online with bootstrap summaries, and optionally
 * runs a canary audit (an epsilon lower bound). It prints nothing and writes no file. */
typedef enum {
    DPT_AUDIT_STAGE_START = 0, /* the split is made: members, population are set */
    DPT_AUDIT_STAGE_TARGET,    /* the target is trained (or scored): test_accuracy is set */
    DPT_AUDIT_STAGE_SHADOW,    /* one more shadow model is done (done of total) */
    DPT_AUDIT_STAGE_CANARY     /* one more canary run is done (done of total) */
} dpt_audit_stage;
typedef struct {
    dpt_audit_stage stage;
    size_t done, total;        /* shadows / canary runs finished so far, of total */
    size_t population, members;
    double test_accuracy;      /* STAGE_TARGET and later; NAN without test data */
    double elapsed_s;          /* since the stage began */
} dpt_audit_progress;
/* Called from the thread that finished the work, one call at a time (never concurrently). */
typedef void (*dpt_audit_progress_fn)(void *user, const dpt_audit_progress *p);

typedef struct {
    dpt_audit_job job;         /* every model's training settings; for DPT_AUDIT_DPSGD the
                                  sampler is set to Poisson with rate batch_size / members */
    size_t shadows;            /* LiRA shadow models: 0 (loss attack only) or >= 2 */
    int jobs;                  /* shadow models trained in parallel (one thread each), 1..64;
                                  the results do not depend on it */
    size_t bootstrap;          /* bootstrap resamples of each summary (0 or 1: no interval) */
    double alpha;              /* intervals at confidence 1 - alpha, in (0, 1) */
    uint64_t seed;             /* the split, every model, the shadows' halves, the canaries */
    size_t canaries;           /* canary audit with this many mislabelled test examples (0 = none;
                                  needs >= 2 classes) */
    size_t canary_runs;        /* independent training runs of the canary audit (>= 1) */
    size_t one_run_guesses;    /* one-run bound (one canary run): guesses per side (0 = canaries / 10) */
    dpt_model *target;         /* NULL: train the target on a random half of pop. Else audit
                                  this trained model: members are max_pairs random examples
                                  of pop (its training set), non-members as many of test */
    size_t max_pairs;          /* with target: at most this many of each (0 = as many as possible) */
    dpt_audit_progress_fn progress; /* optional */
    void *user;
} dpt_audit_config;
/* Defaults: 16 shadows, 1 job, 200 bootstrap resamples, alpha 0.05, seed 1, no canaries. */
dpt_audit_config dpt_audit_config_defaults(void);

typedef struct {
    const char *name;          /* "loss", "lira-offline", "lira-online" (static) */
    double *in, *out;          /* scores of members [n_in] and non-members [n_out] (owned) */
    size_t n_in, n_out;
    dpt_audit_summary s;
} dpt_audit_attack;
typedef struct {
    size_t population, members, shadows;
    size_t n_attacks;          /* 1 (loss) or 3 (loss, lira-offline, lira-online) */
    dpt_audit_attack attack[3];
    double test_accuracy;      /* the target's, on test (NAN without) */
    double epsilon;            /* DP-SGD: the accountant's RDP epsilon at job.cfg.delta of the
                                  target run; NAN otherwise (and for a given target) */
    double sample_rate;        /* DP-SGD: the Poisson rate of every run; NAN otherwise */
    double target_s, target_loop_s, shadow_s; /* wall time: target (all, training loop), per shadow */
    /* canary audit (canaries > 0) */
    size_t canaries, canary_runs, canary_in, canary_out;
    double canary_auc, canary_eps_lb, canary_threshold;
    double canary_delta;       /* the delta of the bounds: job.cfg.delta for DP-SGD, else 0 */
    double canary_run_epsilon; /* DP-SGD: the accountant's epsilon of a canary run; NAN otherwise */
    uint64_t one_run_guesses, one_run_correct; /* one-run audit (one canary run, >= 2 canaries) */
    double one_run_eps_lb;     /* NAN when not run */
    char epsilon_label[256];   /* DP-SGD: the labels every line or field showing epsilon or
                                  canary_run_epsilon carries (dpt_ledger_label of the target
                                  run, else of a canary run, full form; every model of the
                                  audit is trained from cfg.seed, so a nonzero seed gives
                                  "  [SEEDED run (a chosen seed): ...]"); "" for none */
} dpt_audit_result;
/* Runs the audit. pop: the population (without target: members and non-members are a
 * random half each; with target: the target's training set); test: test data for the
 * accuracy, the canaries and (with target) the non-members; may be NULL without target
 * and canaries. On success *res holds the results (free with dpt_audit_result_free); on
 * error *res is empty. Errors name the config field (shadows, jobs, canaries, ...):
 * DPT_EINVAL, DPT_ENOMEM (also for sizes whose product overflows), and those of training. */
dpt_status dpt_audit_run(const dpt_audit_config *cfg, const dpt_dataset *pop, const dpt_dataset *test,
                         dpt_audit_result *res);
void dpt_audit_result_free(dpt_audit_result *res);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
