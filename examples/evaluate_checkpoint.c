/* Open a model that train_arrays saved, evaluate it on fresh data from the same
 * distribution, and report the privacy its training spent (the checkpoint carries its
 * privacy ledger).
 *   cc evaluate_checkpoint.c $(pkg-config --cflags --libs dptrain) -o evaluate_checkpoint
 *   ./evaluate_checkpoint RUN_DIR */
#include <dptrain/dptrain.h>
#include <stdio.h>

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
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", argv[1]);

    dpt_checkpoint *ck = NULL;
    dpt_dataset test;
    double loss = 0, acc = 0, eps = 0;
    if (dpt_checkpoint_open(path, 0, &ck) != DPT_OK) return fail("opening the checkpoint");
    if (synthetic_dataset(1000, 3, &test) != DPT_OK) return fail("making the data");
    if (dpt_checkpoint_evaluate(ck, &test, &loss, &acc) != DPT_OK) return fail("evaluation");
    if (dpt_checkpoint_epsilon(ck, 1e-5, &eps) != DPT_OK) return fail("epsilon");
    printf("model %s: %zu parameters, trained by %s\n", dpt_checkpoint_spec(ck),
           dpt_model_n_params(dpt_checkpoint_model(ck)), dpt_checkpoint_algorithm(ck));
    printf("accuracy %.2f%%, loss %.4f on 1000 new examples\n", 100 * acc, loss);
    printf("privacy: epsilon %.3f at delta 1e-05 after %llu steps\n", eps,
           (unsigned long long)dpt_checkpoint_step(ck));

    dpt_dataset_free(&test);
    dpt_checkpoint_close(ck);
    return 0;
}
