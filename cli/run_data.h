/* run_data: how the CLI prepares a run's data (load, filter, take first N, normalize with
 * training-split statistics) and records those choices in the checkpoint's "run" object,
 * so `dptrain eval` rebuilds exactly the same test inputs. */
#ifndef DPT_CLI_RUN_DATA_H
#define DPT_CLI_RUN_DATA_H
#include <dptrain/data.h>

typedef struct {
    const char *dataset;   /* --dataset */
    const char *data_dir;  /* --data-dir */
    const char *normalize; /* none | scalar | channel */
    const char *classes;   /* comma list or NULL */
    long max_train, max_test; /* 0 = all */
} cli_data_opts;

/* Loads train (and test when test != NULL). On success *run_json (malloc'd) describes the
 * choices and the fitted normalization. Prints nothing; returns a dpt_status. */
int cli_load_run_data(const cli_data_opts *o, dpt_dataset *train, dpt_dataset *test, char **run_json);
/* Rebuilds the test split described by a checkpoint's "run" object (data_dir overrides
 * the stored one when non-NULL). */
int cli_load_test_from_run(const char *run_json, const char *data_dir, dpt_dataset *test);
#endif
