/* The --algo registry of `dptrain train`. Each algorithm lives in its own file
 * cli/algo_<name>.c: its own flags (static storage, listed under their own heading in
 * --help), their validation, the construction of its dpt_algo, the header line it prints
 * and its final privacy report. Adding an algorithm is that file plus one line in
 * CLI_ALGOS (cli/train_algos.c); cmd_train.c stays algorithm-agnostic.
 *
 * Flags shared by the private algorithms (--sigma, --clip, --target-epsilon, --delta,
 * --secure, --force, --allow-ledger-mismatch, --clip-mode) are parsed once by cmd_train
 * into cli_privacy_flags, so they mean the same thing for every algorithm; an algorithm
 * that does not set uses_privacy_flags rejects them. Giving a flag of another algorithm
 * than the one chosen is an error naming both. */
#ifndef DPT_CLI_TRAIN_ALGOS_H
#define DPT_CLI_TRAIN_ALGOS_H
#include <dptrain/accounting.h>
#include <dptrain/train.h>
#include <stdio.h>

#include "cli_util.h"

typedef struct {
    double sigma, clip, target_eps, delta;
    const char *clip_mode;
    const char *secure_sampler; /* --secure-sampler: table | cks */
    int sigma_seen, target_eps_seen, secure, force, allow_mismatch, secure_sampler_seen;
} cli_privacy_flags;

/* What an algorithm sees. cmd_train fills everything before check(); train/test are set
 * (and cfg completed: batch_size, epochs, seed, threads, out_dir, ...) before make(). */
typedef struct {
    dpt_train_config *cfg;        /* common run settings */
    const cli_privacy_flags *priv;
    const char *sampler;          /* --sampler value; check() may replace it (e.g. force poisson) */
    int sampler_seen, batch_seen, sample_rate_seen;
    const char *optimizer;        /* --optimizer name, for the header line */
    const dpt_dataset *train, *test;
    const struct dpt_ledger *prior; /* releases before training (DP normalization statistics) that the
                                       ledger will hold: calibrate the training noise on top of them;
                                       NULL = none */
    long epochs;
    int quiet, resume, overwrite;
    const char *resume_run;       /* resume: the checkpoint's run record (JSON): what the run released
                                     before training (dpmac's DP mean and DP-PCA) is reused from it,
                                     never released again; NULL otherwise */
    const char *out;              /* run directory */
    void *state;                  /* the algorithm's own between check/make/report (optional) */
} cli_algo_ctx;

typedef struct {
    const char *name;             /* the --algo value */
    const char *summary;          /* one line in --help */
    int uses_privacy_flags;       /* 1: --sigma, --clip, --delta ... apply */
    int states_privacy;           /* 1: reports a privacy quantity without the privacy flags (a KL
                                     estimate): the data may not be normalized by statistics of it */
    int random_init_only;         /* 1: its statement is about cfg.init's random initialization, so
                                     --init-from is refused (dpt_trainer_set_initial_params would be) */
    int freezable;                /* 1: --freeze is allowed (the library algorithm sets
                                     dpt_algo.freezable; checked here before the data load) */
    int regression;               /* 1: --targets is allowed (dpt_algo.regression) */
    cli_option *opts;             /* its own flags (NULL-terminated; no CLI_SECTION) or NULL */
    /* Before the data is loaded: validate flags, adjust ctx->sampler / ctx->cfg.
     * Returns 0, or the exit code after printing the error (cli_error). May be NULL. */
    int (*check)(cli_algo_ctx *c);
    /* Before loading (after check): adds to l the releases the algorithm will make before
     * training (e.g. DP-PCA), at the noise given, and names them in what ("" if none),
     * so that a --target-epsilon they alone exceed is refused before any is computed.
     * Returns 0 or an exit code. May be NULL (no such release). */
    int (*planned_releases)(const cli_algo_ctx *c, struct dpt_ledger *l, char *what, size_t n);
    /* After loading: build the algorithm (calibrate noise, print the mode notice).
     * Returns 0 or an exit code; *out is owned by the trainer afterwards. */
    int (*make)(cli_algo_ctx *c, dpt_algo **out);
    /* After the trainer exists (and was resumed), before the run: e.g. record a
     * pre-training release in the ledger. Returns 0 or an exit code. May be NULL. */
    int (*started)(cli_algo_ctx *c, dpt_trainer *t);
    /* The "  algorithm ..." header line (stderr, unless quiet). */
    void (*describe)(const cli_algo_ctx *c, FILE *f);
    /* After the run, on stdout: the privacy statement (epsilon only if an accountant
     * computed it for exactly this sampling; otherwise say there is no guarantee).
     * Returns 0 or an exit code. */
    int (*report)(const cli_algo_ctx *c, dpt_trainer *t);
    const char *tag;              /* shown with the final accuracy, e.g. "DP-SGD" */
} cli_algo;

/* NULL-terminated table of every algorithm (cli/train_algos.c). */
extern const cli_algo *const CLI_ALGOS[];
const cli_algo *cli_algo_find(const char *name);
/* "sgd, dpsgd, ..." for error messages. */
void cli_algo_names(char *buf, size_t n);

/* Shared by the algorithms whose privacy events are in the trainer's ledger: prints
 * "privacy: epsilon X (PLD; RDP Y) at delta D after T steps ..." computed from the
 * ledger (the headline accountant first, accounting.h DPT_ACCT_DEFAULT), and the
 * budget-stop line. Returns 0 or an exit code. */
int cli_report_ledger(const cli_algo_ctx *c, dpt_trainer *t, double sigma);
/* "epsilon X (PLD; RDP Y)", "epsilon X (RDP; PLD Y)" or "epsilon X (RDP)": the headline
 * epsilon, the accountant that gave it and the other one (NAN: does not apply). */
void cli_epsilon_text(char *buf, size_t n, double eps, dpt_accountant which, double e_rdp, double e_pld);
/* The ledger's labels in full (dpt_ledger_label): "  [this epsilon does NOT cover: ...]"
 * when it records a use of the data outside it (metadata "epsilon_excludes",
 * dpt_trainer_exclude_from_guarantee), "  [SEEDED run ...]" for a chosen seed, else "". */
void cli_ledger_excludes(const struct dpt_ledger *l, char *buf, size_t n);
/* For SGM-style algorithms on Poisson batches, after loading: q from --sample-rate or B/N
 * (must be in (0, 1]), delta < 1/N unless --force, and the privacy settings copied into
 * the run config (target_epsilon only as a stopping budget when --sigma is given).
 * Returns 0 or the exit code after printing the error. */
int cli_poisson_privacy_setup(cli_algo_ctx *c);
/* The reproducible / secure mode notice (stderr). */
void cli_print_noise_mode(const cli_algo_ctx *c);
/* "from the OS" for seed 0 or an OS-drawn seed, else "S (chosen)" (a static buffer per thread). */
const char *cli_seed_text(const dpt_train_config *cfg);
/* --secure-sampler as a dpt_dgauss_method; 0, or the exit code after the error (the flag
 * without --secure, an unknown name). */
int cli_secure_sampler(const cli_algo_ctx *c, dpt_dgauss_method *out);

/* The algorithms (one file each). */
extern const cli_algo CLI_ALGO_SGD;
extern const cli_algo CLI_ALGO_DPSGD;
extern const cli_algo CLI_ALGO_PDPSGD;
extern const cli_algo CLI_ALGO_PROPNOISE;
extern const cli_algo CLI_ALGO_DPULR;
extern const cli_algo CLI_ALGO_ULR;
extern const cli_algo CLI_ALGO_DPMAC;
extern const cli_algo CLI_ALGO_MAC;
extern const cli_algo CLI_ALGO_NOISY_GD;
#endif
