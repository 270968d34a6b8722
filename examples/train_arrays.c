/* Train a classifier with DP-SGD on data held in memory and report its privacy, epoch by
 * epoch through the trainer's callback.
 *   cc train_arrays.c $(pkg-config --cflags --libs dptrain) -o train_arrays
 *   ./train_arrays [RUN_DIR [SEED]]
 * With RUN_DIR the run directory gets checkpoint.safetensors, ledger.json and
 * metrics.jsonl (evaluate_checkpoint reads them); without it nothing is written. The seed
 * is drawn from the OS unless SEED is given: a chosen seed makes the run reproducible, and
 * whoever knows it can regenerate the noise, so never publish a model trained with one
 * that others may know (the ledger says seed_source "caller"). */
#include <dptrain/dptrain.h>
#include <stdio.h>
#include <stdlib.h>

#include "synthetic.h"

static int fail(const char *what) {
    fprintf(stderr, "train_arrays: %s: %s\n", what, dpt_last_error());
    return 1;
}

/* Called after each epoch, once its steps are in the privacy ledger (and on disk with a
 * RUN_DIR); returning non-zero would stop the run. */
static int on_epoch(void *user, const dpt_epoch_result *r) {
    (void)user;
    printf("epoch %llu: test accuracy %.2f%%, epsilon %.3f\n", (unsigned long long)r->epoch,
           100 * r->test_accuracy, r->epsilon);
    return 0;
}

int main(int argc, char **argv) {
    dpt_dataset train, test;
    if (synthetic_dataset(4000, 1, &train) != DPT_OK || synthetic_dataset(1000, 2, &test) != DPT_OK)
        return fail("making the data");

    /* the model, one layer at a time: 16 inputs -> 32 ReLU units -> 4 class scores */
    dpt_model_builder *mb = NULL;
    if (dpt_model_builder_new(1, 1, SYN_DIM, &mb) != DPT_OK || dpt_model_builder_linear(mb, 32, 1) != DPT_OK ||
        dpt_model_builder_activation(mb, DPT_LAYER_RELU) != DPT_OK ||
        dpt_model_builder_linear(mb, SYN_CLASSES, 1) != DPT_OK)
        return fail("model");

    dpt_train_config cfg = dpt_train_config_defaults();
    cfg.model_spec = dpt_model_builder_spec(mb); /* "mlp:16-32-4:relu"; stored in checkpoints */
    cfg.sampler = DPT_SAMPLER_POISSON;     /* DP-SGD's epsilon assumes Poisson sampling */
    cfg.sample_rate = 0.05;                /* each example joins a step's batch w.p. q */
    cfg.batch_size = 200;                  /* the expected batch, q * 4000 */
    cfg.epochs = 5;
    cfg.optim = dpt_optim_defaults(DPT_OPT_SGD);
    cfg.optim.lr = 0.5;
    cfg.delta = 1e-5;
    cfg.out_dir = argc > 1 ? argv[1] : NULL;
    cfg.seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 0; /* 0: drawn from the OS (the default) */
    cfg.on_epoch = on_epoch;

    dpt_dpsgd_config dp = dpt_dpsgd_config_defaults();
    dp.sigma = 1.0; /* noise multiplier */
    dp.clip = 1.0;  /* per-example gradient norm bound C */
    dpt_algo *algo = NULL;
    dpt_trainer *t = NULL;
    dpt_epoch_result r;
    if (dpt_algo_dpsgd_new(&dp, &algo) != DPT_OK) return fail("DP-SGD");
    if (dpt_trainer_new(&cfg, &train, &test, algo, &t) != DPT_OK) return fail("trainer"); /* owns algo now */
    if (dpt_trainer_run(t, &r) != DPT_OK) return fail("training");

    double eps = 0;
    if (dpt_ledger_epsilon(dpt_trainer_ledger(t), cfg.delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &eps) != DPT_OK)
        return fail("epsilon");
    printf("test accuracy %.2f%% after %llu steps of DP-SGD (sigma %g, clip %g)\n", 100 * r.test_accuracy,
           (unsigned long long)r.step, dp.sigma, dp.clip);
    printf("privacy: epsilon %.3f at delta %g\n", eps, cfg.delta);

    dpt_trainer_free(t);
    dpt_model_builder_free(mb);
    dpt_dataset_free(&train);
    dpt_dataset_free(&test);
    return 0;
}
