/* init_from: `dptrain train --init-from CKPT`, a fresh run that starts from a checkpoint's
 * parameters (fine-tuning; docs/checkpoints.md). Everything that can be checked is
 * checked before the data are loaded and before --out is created. */
#ifndef DPT_CLI_INIT_FROM_H
#define DPT_CLI_INIT_FROM_H
#include <dptrain/inference.h>
#include <dptrain/train.h>

typedef struct {
    const char *path;   /* as given */
    dpt_checkpoint *ck; /* NULL: no --init-from */
    char file[1100];    /* the checkpoint file */
    char source[DPT_INIT_SOURCE_MAX + 1]; /* for the ledger: UTF-8, one line */
    int has_pca;        /* its run projected its inputs by a DP-PCA (DP-MAC --pca-dims) */
} cli_init_from;

/* Opens and verifies PATH (a checkpoint file or a run directory holding one). Refused
 * (exit status 2, said on stderr): with --resume; with --overwrite of the directory that
 * holds it (that would delete the checkpoint and its ledger); a file that is missing or
 * not a checkpoint, or with non-finite values (named by tensor). Returns 0 or the status. */
int cli_init_from_open(cli_init_from *f, const char *path, int resume, int overwrite, const char *out);
/* The refusal of --init with --init-from (exit status 2). When the --init is a --preset's,
 * not typed, the message says so and lists the preset's other flags to give instead (a
 * preset's flags cannot be unset). */
int cli_init_from_refuse_init(void);
/* The run's model (a spec, a named one or written out) against the checkpoint's: the same
 * layers, or refused. Before anything is created; an invalid spec is left to the trainer. */
int cli_init_from_same_model(const cli_init_from *f, const char *spec);
/* After dpt_trainer_new: the run starts from the checkpoint's parameters; notes on stderr
 * when the checkpoint's run was private or projected its inputs by a DP-PCA. */
int cli_init_from_start(const cli_init_from *f, dpt_trainer *t);
void cli_init_from_close(cli_init_from *f);

#endif
