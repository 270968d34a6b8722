/* Fine-tune a saved model with DP-SGD on new data: the run starts from the parameters of a
 * checkpoint (e.g. one train_arrays saved) instead of a random initialization, and its
 * ledger records where they came from.
 *   cc finetune.c $(pkg-config --cflags --libs dptrain) -o finetune
 *   ./finetune CHECKPOINT_OR_RUN_DIR
 * The new run's epsilon covers the new data only, and only if the starting model does not
 * depend on them; a private starting model's own epsilon is in its ledger (printed here). */
#include <dptrain/dptrain.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "synthetic.h"

static int fail(const char *what) {
    fprintf(stderr, "finetune: %s: %s\n", what, dpt_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: finetune CHECKPOINT_OR_RUN_DIR\n");
        return 2;
    }
    char path[1024];
    struct stat st;
    int n = stat(argv[1], &st) == 0 && S_ISDIR(st.st_mode)
                ? snprintf(path, sizeof path, "%s/checkpoint.safetensors", argv[1])
                : snprintf(path, sizeof path, "%s", argv[1]);
    if (n < 0 || (size_t)n >= sizeof path) {
        fprintf(stderr, "finetune: path too long\n");
        return 2;
    }
    dpt_checkpoint *ck = NULL;
    if (dpt_checkpoint_open(path, 0, &ck) != DPT_OK) return fail("checkpoint");
    double eps_before = 0;
    if (dpt_checkpoint_ledger(ck) && dpt_checkpoint_epsilon(ck, 1e-5, &eps_before) == DPT_OK)
        printf("the starting model cost epsilon %.3f at delta 1e-05 (its own data)\n", eps_before);

    /* the new data: another sample of the same problem (stream 3; train_arrays used 1 and 2) */
    dpt_dataset train, test;
    if (synthetic_dataset(2000, 3, &train) != DPT_OK || synthetic_dataset(1000, 4, &test) != DPT_OK)
        return fail("making the data");

    dpt_train_config cfg = dpt_train_config_defaults();
    cfg.model_spec = dpt_checkpoint_spec(ck); /* the same model */
    cfg.sampler = DPT_SAMPLER_POISSON;
    cfg.sample_rate = 0.05;
    cfg.batch_size = 100;
    cfg.epochs = 2;
    cfg.optim = dpt_optim_defaults(DPT_OPT_SGD);
    cfg.optim.lr = 0.2;
    cfg.delta = 1e-5;

    dpt_dpsgd_config dp = dpt_dpsgd_config_defaults();
    dp.sigma = 1.0;
    dp.clip = 1.0;
    dpt_algo *algo = NULL;
    dpt_trainer *t = NULL;
    dpt_epoch_result r;
    double loss0 = 0, acc0 = 0, eps = 0;
    const dpt_model *start = dpt_checkpoint_model(ck);
    if (dpt_evaluate(dpt_checkpoint_model(ck), DPT_LOSS_SOFTMAX_CE, &test, &loss0, &acc0) != DPT_OK)
        return fail("evaluating the starting model");
    if (dpt_algo_dpsgd_new(&dp, &algo) != DPT_OK) return fail("DP-SGD");
    if (dpt_trainer_new(&cfg, &train, &test, algo, &t) != DPT_OK) return fail("trainer");
    /* between dpt_trainer_new and the first step: the run starts from the checkpoint's values */
    if (dpt_trainer_set_initial_params(t, start->theta, start->n_params, "the model train_arrays saved") != DPT_OK)
        return fail("starting parameters");
    if (dpt_trainer_run(t, &r) != DPT_OK) return fail("training");
    if (dpt_ledger_epsilon(dpt_trainer_ledger(t), cfg.delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &eps) != DPT_OK)
        return fail("epsilon");
    printf("started from: %s\n", dpt_trainer_initial_params(t));
    printf("test accuracy %.2f%% before, %.2f%% after %llu steps of DP-SGD\n", 100 * acc0, 100 * r.test_accuracy,
           (unsigned long long)r.step);
    printf("privacy: epsilon %.3f at delta %g (this run)\n", eps, cfg.delta);

    dpt_trainer_free(t);
    dpt_checkpoint_close(ck);
    dpt_dataset_free(&train);
    dpt_dataset_free(&test);
    return 0;
}
