/* Load a model that train_arrays saved, evaluate it on fresh data from the same
 * distribution, and report the privacy its training spent.
 *   cc evaluate_checkpoint.c $(pkg-config --cflags --libs dptrain) -o evaluate_checkpoint
 *   ./evaluate_checkpoint RUN_DIR */
#include <dptrain/dptrain.h>
#include <stdio.h>
#include <stdlib.h>

#include "synthetic.h"

static int fail(const char *what) {
    fprintf(stderr, "evaluate_checkpoint: %s: %s\n", what, dpt_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: evaluate_checkpoint RUN_DIR (a run directory written by train_arrays)\n");
        return 2;
    }
    char ck[4096], lp[4096];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", argv[1]);
    snprintf(lp, sizeof lp, "%s/ledger.json", argv[1]);

    char *spec = NULL;
    dpt_model *m = NULL;
    dpt_ledger *ledger = NULL;
    dpt_dataset test;
    double loss = 0, acc = 0, eps = 0;
    if (dpt_checkpoint_peek(ck, &spec, NULL) != DPT_OK) return fail(ck);
    if (dpt_model_new(spec, 256, 0, &m) != DPT_OK) return fail("model");
    if (dpt_checkpoint_load(ck, m, NULL, NULL) != DPT_OK) return fail(ck);
    if (synthetic_dataset(1000, 3, &test) != DPT_OK) return fail("making the data");
    if (dpt_evaluate(m, DPT_LOSS_SOFTMAX_CE, &test, &loss, &acc) != DPT_OK) return fail("evaluation");
    if (dpt_ledger_load(lp, &ledger) != DPT_OK) return fail(lp);
    if (dpt_ledger_epsilon(ledger, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &eps) != DPT_OK) return fail("epsilon");
    printf("model %s: %zu parameters\n", spec, m->n_params);
    printf("accuracy %.2f%%, loss %.4f on 1000 new examples\n", 100 * acc, loss);
    printf("privacy: epsilon %.3f at delta 1e-05 after %llu steps\n", eps,
           (unsigned long long)dpt_ledger_steps(ledger));

    dpt_ledger_free(ledger);
    dpt_dataset_free(&test);
    dpt_model_free(m);
    free(spec);
    return 0;
}
