/* dptrain eval: opens a checkpoint through the library's inference API
 * (dptrain/inference.h), rebuilds its test split (same dataset, classes and normalization
 * statistics as training) and prints loss and accuracy, and epsilon for a private run. */
#include <dptrain/inference.h>
#include <dptrain/train.h>
#include <dptrain/accounting.h>

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "run_data.h"
#include "train_algos.h"

static const char *USAGE = "usage: dptrain eval --checkpoint FILE|DIR [options]\n\n"
                           "Evaluates a checkpoint written by dptrain train on the test split it was\n"
                           "trained against and prints test loss and accuracy (and, for a private run,\n"
                           "the epsilon of its privacy ledger at --delta).";

int dpt_cmd_eval(int argc, char **argv) {
    const char *ckpt_arg = NULL, *data_dir = NULL, *loss_name = NULL;
    long threads = 0;
    double delta = 1e-5;
    int json = 0;
    cli_option opts[] = {
        {"--checkpoint", CLI_STR, &ckpt_arg, "FILE|DIR", "checkpoint.safetensors written by dptrain train, or its run directory (required)", NULL},
        {"--data-dir", CLI_STR, &data_dir, "DIR", "where datasets live (default: the one used for training)", NULL},
        {"--loss", CLI_STR, &loss_name, "NAME", "loss to report: ce | bce | mse | token-ce (default: the one trained with)", NULL},
        {"--delta", CLI_DOUBLE, &delta, "D", "delta of the reported epsilon (private runs)", NULL},
        {"--threads", CLI_LONG, &threads, "N", "threads (0 = all cores)", NULL},
        {"--json", CLI_FLAG, &json, NULL, "print one JSON object", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    int rc = cli_parse(argc, argv, 1, opts, USAGE);
    if (rc < 0) return 0;
    if (rc) return rc;
    if (!ckpt_arg) return cli_error("--checkpoint: required (see dptrain eval --help)");
    if (threads < 0) return cli_error("--threads must be >= 0");
    if (!(delta > 0 && delta < 1)) return cli_error("--delta must be in (0, 1), got %g", delta);
    dpt_loss_kind loss = DPT_LOSS_SOFTMAX_CE;
    if (loss_name && dpt_loss_parse(loss_name, &loss) != DPT_OK) return cli_error("--loss: %s", dpt_last_error());
    char ckpt[1100];
    if ((rc = cli_checkpoint_file("--checkpoint", ckpt_arg, ckpt, sizeof ckpt)) != 0) return rc;
    /* a privacy ledger beside the checkpoint must be of the same run (the run id in both) */
    const char *slash = strrchr(ckpt, '/');
    char lp[1200];
    snprintf(lp, sizeof lp, "%.*sledger.json", slash ? (int)(slash - ckpt + 1) : 0, ckpt);
    dpt_status st;
    if (access(lp, F_OK) == 0 && (st = dpt_run_check_ledger(ckpt, lp)) != DPT_OK)
        return cli_refuse(st, "--checkpoint");

    dpt_threads_set_blas((int)threads);
    dpt_checkpoint *ck = NULL;
    if ((st = dpt_checkpoint_open(ckpt, (int)threads, &ck)) != DPT_OK) return cli_refuse(st, "--checkpoint");
    int code = 0;
    dpt_dataset test;
    memset(&test, 0, sizeof test);
    cJSON *root = cJSON_Parse(dpt_checkpoint_state(ck));
    const cJSON *run = root ? cJSON_GetObjectItemCaseSensitive(root, "run") : NULL;
    char *run_s = run ? cJSON_PrintUnformatted(run) : NULL;
    if (!run_s) {
        code = cli_error("--checkpoint %s: no record of the training data in the checkpoint", ckpt);
        goto done;
    }
    if ((st = cli_load_test_from_run(run_s, data_dir, &test)) != DPT_OK) {
        code = cli_refuse(st, "test data"); /* as train's --dataset */
        goto done;
    }
    size_t in_dim = dpt_model_in_dim(dpt_checkpoint_model(ck));
    if (in_dim != test.dim) {
        code = cli_error("--checkpoint %s: the model takes %zu inputs, its test split has %zu features%s", ckpt, in_dim,
                         test.dim, in_dim < test.dim ? " (a --pca-dims run from before checkpoints recorded its DP-PCA "
                                                        "projection: eval cannot rebuild the model's inputs)" : "");
        goto done;
    }
    if (test.t && loss_name && loss != DPT_LOSS_SQUARED && loss != DPT_LOSS_TOKEN_CE) {
        code = cli_error("--loss %s: the checkpoint was trained on regression targets (--targets): only mse applies "
                         "(token-ce for next-token ids)", loss_name);
        goto done;
    }
    double l, acc, eps = NAN;
    st = loss_name ? dpt_evaluate(dpt_checkpoint_model(ck), loss, &test, &l, &acc)
                   : dpt_checkpoint_evaluate(ck, &test, &l, &acc);
    if (st != DPT_OK) {
        code = cli_fail("eval");
        goto done;
    }
    dpt_accountant which = DPT_ACCT_RDP; /* the accountant that gave eps (the default rule) */
    if (dpt_checkpoint_ledger(ck) && (dpt_checkpoint_epsilon(ck, delta, &eps) != DPT_OK ||
                                      dpt_ledger_epsilon_default(dpt_checkpoint_ledger(ck), delta, DPT_CONV_BALLE, &eps,
                                                                 &which, NULL, NULL) != DPT_OK)) {
        code = cli_fail("privacy ledger");
        goto done;
    }
    const char *spec = dpt_checkpoint_spec(ck);
    char label[640];
    dpt_checkpoint_label(ck, 1, label, sizeof label);
    if (json) {
        /* through cJSON: paths are escaped, numbers exact (cli_json_number), NaN is null */
        cJSON *o = cJSON_CreateObject();
        char *text = NULL;
        if (o) {
            cJSON_AddStringToObject(o, "checkpoint", ckpt);
            cJSON_AddStringToObject(o, "model", spec);
            cli_json_number(o, "steps", (double)dpt_checkpoint_step(ck));
            cli_json_number(o, "test_examples", (double)test.n);
            cli_json_number(o, "test_loss", l);
            const dpt_loss_kind used = loss_name ? loss : dpt_checkpoint_loss(ck);
            if (test.t && used == DPT_LOSS_TOKEN_CE) cli_json_number(o, "test_perplexity", exp(l));
            else if (test.t) cli_json_number(o, "test_mse", 2 * l / (double)test.t_dim); /* regression */
            else cli_json_number(o, "test_accuracy", acc);
            if (!isnan(eps)) {
                cli_json_number(o, "epsilon", eps);
                cli_json_number(o, "delta", delta);
                cJSON_AddStringToObject(o, "accountant", which == DPT_ACCT_PLD ? "pld" : "rdp (Balle et al. conversion)");
                /* what the epsilon does not cover, and a chosen seed: as the run's own output said */
                const dpt_ledger *lg = dpt_checkpoint_ledger(ck);
                const char *ex = dpt_ledger_get_meta(lg, "epsilon_excludes"), *ss = dpt_ledger_get_meta(lg, "seed_source");
                if (ex) cJSON_AddStringToObject(o, "epsilon_excludes", ex);
                if (ss) cJSON_AddStringToObject(o, "seed_source", ss);
            }
            if (label[0]) cJSON_AddStringToObject(o, "privacy_label", label + 2); /* without the leading spaces */
            text = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
        }
        if (!text) {
            code = cli_failf("--json: out of memory");
            goto done;
        }
        printf("%s\n", text);
        cJSON_free(text);
    } else {
        if (test.t && (loss_name ? loss : dpt_checkpoint_loss(ck)) == DPT_LOSS_TOKEN_CE) /* mean loss per token */
            printf("%s: model %s, %zu test examples: loss %.4f per token, perplexity %.4g", ckpt, spec, test.n, l,
                   exp(l));
        else if (test.t) /* regression: the mean squared error per target */
            printf("%s: model %s, %zu test examples: loss %.4f, mse %.5g (rmse %.5g)", ckpt, spec, test.n, l,
                   2 * l / (double)test.t_dim, sqrt(2 * l / (double)test.t_dim));
        else
            printf("%s: model %s, %zu test examples: loss %.4f, accuracy %.2f%%", ckpt, spec, test.n, l, 100.0 * acc);
        if (!isnan(eps))
            printf(", epsilon %.4g (%s) at delta %g after %" PRIu64 " steps", eps, which == DPT_ACCT_PLD ? "PLD" : "RDP",
                   delta, dpt_checkpoint_step(ck));
        /* as the run's own lines: a seeded run, an exclusion, a run without accountant */
        printf("%s\n", label);
    }
done:
    free(run_s);
    cJSON_Delete(root);
    dpt_checkpoint_close(ck);
    dpt_dataset_free(&test);
    return code;
}
