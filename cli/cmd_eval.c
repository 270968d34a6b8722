/* dptrain eval: loads a checkpoint, rebuilds its test split (same dataset, classes and
 * normalization statistics as training) and prints loss and accuracy. */
#include <dptrain/io.h>
#include <dptrain/train.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "run_data.h"

static const char *USAGE = "usage: dptrain eval --checkpoint FILE [options]\n\n"
                           "Evaluates a checkpoint written by dptrain train on the test split it was\n"
                           "trained against and prints test loss and accuracy.";

int dpt_cmd_eval(int argc, char **argv) {
    const char *ckpt = NULL, *data_dir = NULL, *loss_name = "ce";
    long threads = 0;
    int json = 0;
    cli_option opts[] = {
        {"--checkpoint", CLI_STR, &ckpt, "FILE", "checkpoint.safetensors written by dptrain train (required)", NULL},
        {"--data-dir", CLI_STR, &data_dir, "DIR", "where datasets live (default: the one used for training)", NULL},
        {"--loss", CLI_STR, &loss_name, "NAME", "loss to report: ce | bce | mse", NULL},
        {"--threads", CLI_LONG, &threads, "N", "threads (0 = all cores)", NULL},
        {"--json", CLI_FLAG, &json, NULL, "print one JSON object", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    int rc = cli_parse(argc, argv, 1, opts, USAGE);
    if (rc < 0) return 0;
    if (rc) return rc;
    if (!ckpt) return cli_error("--checkpoint: required (see dptrain eval --help)");
    if (threads < 0) return cli_error("--threads must be >= 0");
    dpt_loss_kind loss;
    if (dpt_loss_parse(loss_name, &loss) != DPT_OK) return cli_error("--loss: %s", dpt_last_error());
    char *spec = NULL, *state = NULL;
    if (dpt_checkpoint_peek(ckpt, &spec, &state) != DPT_OK) return cli_fail("--checkpoint");
    /* a privacy ledger beside the checkpoint must be of the same run (the run id in both) */
    const char *slash = strrchr(ckpt, '/');
    char lp[1200];
    snprintf(lp, sizeof lp, "%.*sledger.json", slash ? (int)(slash - ckpt + 1) : 0, ckpt);
    if (access(lp, F_OK) == 0 && dpt_run_check_ledger(ckpt, lp) != DPT_OK) {
        free(spec);
        free(state);
        return cli_fail("--checkpoint");
    }
    int code = 0;
    dpt_model *m = NULL;
    dpt_dataset test;
    memset(&test, 0, sizeof test);
    cJSON *root = cJSON_Parse(state);
    const cJSON *run = root ? cJSON_GetObjectItemCaseSensitive(root, "run") : NULL;
    char *run_s = run ? cJSON_PrintUnformatted(run) : NULL;
    if (!run_s) {
        code = cli_error("--checkpoint %s: no record of the training data in the checkpoint", ckpt);
        goto done;
    }
    if (cli_load_test_from_run(run_s, data_dir, &test) != DPT_OK) {
        code = cli_fail("test data");
        goto done;
    }
    dpt_threads_set_blas((int)threads);
    if (dpt_model_new(spec, 1024, dpt_threads_resolve((int)threads), &m) != DPT_OK ||
        dpt_checkpoint_load(ckpt, m, NULL, NULL) != DPT_OK) {
        code = cli_fail("--checkpoint");
        goto done;
    }
    (void)dpt_model_unfold_cache(m, 0); /* forward only: the conv unfold cache would be unused memory */
    double l, acc;
    if (dpt_evaluate(m, loss, &test, &l, &acc) != DPT_OK) {
        code = cli_fail("eval");
        goto done;
    }
    if (json)
        printf("{\"checkpoint\": \"%s\", \"model\": \"%s\", \"test_examples\": %zu, \"test_loss\": %.6f, "
               "\"test_accuracy\": %.6f}\n", ckpt, spec, test.n, l, acc);
    else
        printf("%s: model %s, %zu test examples: loss %.4f, accuracy %.2f%%\n", ckpt, spec, test.n, l, 100.0 * acc);
done:
    free(run_s);
    cJSON_Delete(root);
    free(spec);
    free(state);
    dpt_model_free(m);
    dpt_dataset_free(&test);
    return code;
}
