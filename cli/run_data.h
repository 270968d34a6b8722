/* run_data: how the CLI prepares a run's data (load, filter, take first N, normalize) and
 * records those choices in the checkpoint's "run" object, so `dptrain eval` rebuilds
 * exactly the same test inputs.
 *
 * Normalization and privacy (issue 24, docs/data.md): a private algorithm never uses a
 * statistic of its training data that its epsilon does not cover. --normalize auto (the
 * default) means the dataset's published constants ("public") for a private algorithm,
 * none for its CSV data, and statistics fitted on the training split ("scalar") for a
 * non-private one; none for token ids (fortunes-*: an embedding reads them as they are).
 * A private algorithm may fit them only with noise (dp-scalar,
 * dp-channel, dp-feature: one Gaussian release that cli_norm_record puts in the ledger),
 * or without noise when --normalize-unaccounted says that its epsilon excludes them. */
#ifndef DPT_CLI_RUN_DATA_H
#define DPT_CLI_RUN_DATA_H
#include <dptrain/data.h>
#include <dptrain/train.h>

typedef struct {
    const char *dataset;   /* --dataset */
    const char *data_dir;  /* --data-dir */
    const char *normalize; /* auto | none | public | scalar | channel | feature | dp-scalar | dp-channel |
                              dp-feature | affine:SHIFT:SCALE */
    const char *classes;   /* comma list or NULL */
    long targets;          /* --targets K: regression, the first K csv columns are targets (0 = labels) */
    long max_train, max_test; /* 0 = all */
    long validation;       /* --validation N: the last N training examples (after max_train) are
                              the evaluation set in place of the test split, which is not read */
    /* The privacy rules (all zero: a non-private run, no DP fit): */
    int private_;          /* a private algorithm trains on this data */
    int dp_ok;             /* dp-* and --normalize-unaccounted may be used (the run has a ledger) */
    int unaccounted;       /* --normalize-unaccounted */
    double norm_sigma;     /* dp-*: --normalize-sigma, the noise multiplier (> 0) */
    double norm_clip;      /* dp-*: --normalize-clip C (not seen: sqrt(2K), the bound of values in [-1, 1]) */
    int norm_sigma_seen, norm_clip_seen;
    uint64_t seed;         /* dp-*: noise seed (reproducible mode) */
    int secure, threads;   /* dp-*: OS-seeded exact discrete Gaussian noise; threads */
    const char *reuse_run; /* a checkpoint's "run" JSON: apply its stored statistics instead of
                              fitting (a resumed run, an audited checkpoint); NULL = fit */
} cli_data_opts;

/* What cli_load_run_data did about normalization. */
typedef struct {
    char kind[64];          /* the resolved --normalize */
    const char *source;     /* "none" | "public" | "fixed" | "training-data" | "dp" */
    int dp;                 /* 1: DP statistics, one Gaussian release (made now, or by the run a
                               reused checkpoint continues); cli_norm_record puts a fresh one in
                               the ledger */
    double multiplier;      /* its noise multiplier as accounted (secure: the effective one) */
    int unaccounted;        /* statistics of the private training data outside the epsilon */
    char note[320];         /* one line for the run header */
} cli_norm_info;

/* Validates the normalization flags before any data is loaded (the rules above). Returns 0
 * or the exit code after printing the error. */
int cli_norm_check(const cli_data_opts *o);
/* Loads train (and test when test != NULL) and normalizes them. With o->validation > 0,
 * *test is the last o->validation examples of the training split instead (taken out of
 * *train before any statistic is fitted), and the run record says "validation". On success *run_json
 * (malloc'd) describes the choices and the statistics, and *info (may be NULL) what was
 * done. Prints nothing; returns a dpt_status. */
int cli_load_run_data(const cli_data_opts *o, dpt_dataset *train, dpt_dataset *test, char **run_json,
                      cli_norm_info *info);
/* The "run" object of a checkpoint as a JSON string (malloc'd), or NULL when the file is
 * absent or has none. */
char *cli_checkpoint_run_json(const char *checkpoint_path);
/* Before any data is loaded: adds to l the DP normalization release that loading with o
 * would make (nothing for other kinds or a reused run's statistics), at the multiplier
 * given (a lower bound on its cost in secure mode), and names it in what. Returns 0 or the
 * exit code after printing the error. */
int cli_norm_planned(const cli_data_opts *o, struct dpt_ledger *l, char *what, size_t n);
/* A ledger holding the DP release of info (none: an empty ledger is not made, *out =
 * NULL), for calibrating the training noise on top of it. */
int cli_norm_prior(const cli_norm_info *info, struct dpt_ledger **out);
/* After dpt_trainer_new / dpt_trainer_resume, before the run: a fresh run's DP release
 * goes into the ledger; statistics outside the epsilon are recorded as excluded (ledger
 * metadata and metrics). Returns 0 or the exit code after printing the error. */
int cli_norm_record(const cli_norm_info *info, dpt_trainer *t, int resumed);
/* After the run's privacy report: what the epsilon says about the normalization. */
void cli_norm_report(const cli_norm_info *info, const dpt_trainer *t);
/* Rebuilds the test split described by a checkpoint's "run" object (data_dir overrides
 * the stored one when non-NULL), with its stored statistics. */
int cli_load_test_from_run(const char *run_json, const char *data_dir, dpt_dataset *test);
/* Applies a run's stored normalization statistics and recorded DP-PCA (its "run" JSON) to
 * d, as training did: new inputs for the model (dptrain predict). Returns a dpt_status. */
int cli_apply_run_preprocessing(const char *run_json, dpt_dataset *d);
struct cJSON;
/* The regression target count a checkpoint's "run" object records (*targets = 0: class
 * labels, also for runs recorded before --targets existed); DPT_EFORMAT for a bad value. */
dpt_status cli_run_targets(const struct cJSON *run, long *targets);
/* The labels a run kept with --classes, in the order that relabelled them 0..k-1: class j
 * of the model is label cls[j] of the data (cls holds 64; *k = 0: every label, unchanged). */
dpt_status cli_run_classes(const struct cJSON *run, int *cls, size_t *k);
/* A DP-MAC run's recorded DP-PCA (the "pca" object of its run description): centres d by
 * the recorded DP mean (if any) and projects it to the recorded dimensions, as training did.
 * DPT_EFORMAT for a record that does not fit d. */
dpt_status cli_apply_recorded_pca(const struct cJSON *pca, dpt_dataset *d);
#endif
