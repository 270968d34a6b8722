/* train: the loop with the non-private SGD strategy on small synthetic data made here:
 * it learns, Poisson and full-batch sampling work (empty batches included), a resumed run
 * is bit-identical to an uninterrupted one (at an epoch boundary and mid-epoch; at the
 * boundary also its metrics.jsonl train_loss per epoch), and a
 * resume with different data or settings is refused. */
#include <dptrain/train.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testdata.h"
#include "testutil.h"


static dpt_train_config base_cfg(const char *out) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:8-16-3:gelu";
    c.batch_size = 32;
    c.epochs = 3;
    c.seed = 5;
    c.optim.lr = 0.01;
    c.threads = 2;
    c.out_dir = out;
    return c;
}

static int run(const dpt_train_config *c, const dpt_dataset *tr, const dpt_dataset *te, int resume, float *theta_out,
               dpt_epoch_result *r) {
    dpt_algo *a;
    dpt_trainer *t;
    CHECK_OK(dpt_algo_sgd_new(&a));
    dpt_status s = dpt_trainer_new(c, tr, te, a, &t);
    CHECK_OK(s);
    if (s) return s;
    if (resume) {
        s = dpt_trainer_resume(t);
        if (s) {
            dpt_trainer_free(t);
            return s;
        }
    }
    s = dpt_trainer_run(t, r);
    CHECK_OK(s);
    dpt_model *m = dpt_trainer_model(t);
    if (theta_out) memcpy(theta_out, m->theta, m->n_params * sizeof(float));
    dpt_trainer_free(t);
    return s;
}

static void rmrf_files(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", dir);
    remove(p);
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    remove(p);
    snprintf(p, sizeof p, "%s/%s", dir, DPT_RUN_KEY_FILE);
    remove(p);
}

/* The train_loss of each line of dir/metrics.jsonl into loss[] (at most max): the count. */
static int metrics_losses(const char *dir, double *loss, int max) {
    char p[600], buf[2048];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL);
    int n = 0;
    while (f && fgets(buf, sizeof buf, f) && n < max) {
        const char *k = strstr(buf, "\"train_loss\":");
        CHECK(k != NULL);
        loss[n++] = k ? strtod(k + strlen("\"train_loss\":"), NULL) : NAN;
    }
    if (f) fclose(f);
    return n;
}

/* a callback that calls back into the trainer */
typedef struct {
    dpt_trainer *t;
    dpt_status run, resume;
    int calls;
} reenter;
static int reenter_step(void *user, const dpt_step_info *info) {
    reenter *u = user;
    (void)info;
    if (u->calls++ == 0) {
        u->run = dpt_trainer_run(u->t, NULL);
        u->resume = dpt_trainer_resume(u->t);
    }
    return 0;
}

int main(void) {
    dpt_dataset tr, te;
    tu_make_blobs(&tr, 600, 1, 1.0f);
    tu_make_blobs(&te, 300, 2, 1.0f);
    char dir_a[300], dir_b[300];
    snprintf(dir_a, sizeof dir_a, "%s/a", tu_tmpdir());
    snprintf(dir_b, sizeof dir_b, "%s/b", tu_tmpdir());
    dpt_epoch_result r;
    size_t P = 8 * 16 + 16 + 16 * 3 + 3;
    float *ta = malloc(P * 4), *tb = malloc(P * 4);

    /* It learns: separable blobs reach high accuracy, loss falls below log(3). */
    dpt_train_config c = base_cfg(dir_a);
    run(&c, &tr, &te, 0, ta, &r);
    printf("blobs: test accuracy %.3f loss %.3f\n", r.test_accuracy, r.test_loss);
    CHECK(r.test_accuracy > 0.95);
    CHECK(r.test_loss < 0.3);
    CHECK(r.epoch == 3 && r.step == 3 * 19);

    /* Bit-identical resume at an epoch boundary: 1 epoch, then resume to 3. */
    c = base_cfg(dir_b);
    c.epochs = 1;
    run(&c, &tr, &te, 0, NULL, &r);
    c.epochs = 3;
    run(&c, &tr, &te, 1, tb, &r);
    CHECK(memcmp(ta, tb, P * 4) == 0);
    CHECK(r.step == 3 * 19);
    /* ... with the same train_loss per epoch: the resumed epoch's mean is over its own
     * batches, not also over those of the epoch saved at the boundary (issue 38.14) */
    double la[4], lb[4];
    CHECK(metrics_losses(dir_a, la, 4) == 3 && metrics_losses(dir_b, lb, 4) == 3);
    for (int e = 0; e < 3; e++) CHECK_CLOSE(lb[e], la[e], 0, 0);

    /* ... and mid-epoch (stop after 25 steps, then resume). */
    rmrf_files(dir_b);
    c = base_cfg(dir_b);
    c.max_steps = 25;
    run(&c, &tr, &te, 0, NULL, &r);
    c.max_steps = 0;
    run(&c, &tr, &te, 1, tb, &r);
    CHECK(memcmp(ta, tb, P * 4) == 0);

    /* Metrics: one line per epoch (3 from the first part's 1 + 2 resumed... in dir_a: 3). */
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir_a);
    FILE *f = fopen(path, "r");
    int lines = 0;
    char buf[1024];
    while (f && fgets(buf, sizeof buf, f)) {
        lines++;
        CHECK(strstr(buf, "\"test_accuracy\"") && strstr(buf, "\"train_loss\"") && strstr(buf, "\"wall_s\""));
    }
    if (f) fclose(f);
    CHECK(lines == 3);

    /* A resume with different data or settings is refused with the reason. */
    dpt_dataset tr2;
    tu_make_blobs(&tr2, 600, 99, 1.0f);
    c = base_cfg(dir_a);
    dpt_algo *a;
    dpt_trainer *t;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_OK(dpt_trainer_new(&c, &tr2, &te, a, &t));
    CHECK_STATUS(dpt_trainer_resume(t), DPT_EMISMATCH);
    CHECK_ERR_HAS("training data");
    dpt_trainer_free(t);
    c = base_cfg(dir_a);
    c.seed = 6;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &t));
    CHECK_STATUS(dpt_trainer_resume(t), DPT_EMISMATCH);
    CHECK_ERR_HAS("seed was 5, now 6");
    dpt_trainer_free(t);

    /* Poisson sampling with a tiny rate: empty batches happen and are handled. */
    c = base_cfg(NULL);
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = 0.002; /* expected 1.2 examples: P(empty) = 0.30 */
    c.epochs = 1;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    run(&c, &tr, &te, 0, NULL, &r);
    CHECK(r.step == 500 && isfinite(r.test_loss));
    /* full batch */
    c = base_cfg(NULL);
    c.sampler = DPT_SAMPLER_FULL;
    c.epochs = 30;
    c.optim.lr = 0.05;
    run(&c, &tr, &te, 0, NULL, &r);
    CHECK(r.step == 30 && r.test_accuracy > 0.9);

    /* Bad configurations are errors, not crashes. */
    c = base_cfg(NULL);
    c.model_spec = "mlp:9-4-3:relu";
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &te, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("9 inputs");
    c = base_cfg(NULL);
    c.batch_size = 0;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &te, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("batch_size");
    c = base_cfg(NULL);
    c.optim.lr = -1;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &te, a, &t), DPT_EINVAL);
    c = base_cfg(NULL);
    c.threads = -5;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &te, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("threads must be in [0, 1024] (0 = all cores), got -5");
    c = base_cfg(NULL);
    c.target_epsilon = NAN;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &te, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("target_epsilon must be >= 0 and finite");
    /* NULL arguments: an error, the algorithm freed, never a crash */
    c = base_cfg(NULL);
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &te, a, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_trainer_new: out is NULL");
    CHECK_OK(dpt_algo_sgd_new(&a));
    t = (dpt_trainer *)&c; /* set to NULL on failure */
    CHECK_STATUS(dpt_trainer_new(NULL, &tr, &te, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_trainer_new: cfg is NULL");
    CHECK(t == NULL);
    CHECK_STATUS(dpt_trainer_run(NULL, &r), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_trainer_run: the trainer is NULL");
    CHECK_STATUS(dpt_trainer_resume(NULL), DPT_EINVAL);
    /* A test set that does not fit the model is refused by dpt_trainer_new, not after an
     * epoch of training. */
    dpt_dataset bad = te;
    bad.dim = 5;
    c = base_cfg(NULL);
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &bad, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("takes 8 inputs but the test set has 5 features per example");
    bad = te;
    bad.n_classes = 5;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &bad, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("has 3 outputs but the test set has 5 classes");
    bad = te;
    bad.n = 0;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &bad, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("the test set is empty");
    /* Parameters overflowed by finite gradients (lr 1e300, one step per epoch, so the
     * optimizer's gradient check never sees the inf) are never saved or published. */
    char dir_d[320];
    snprintf(dir_d, sizeof dir_d, "%s/overflow", tu_tmpdir());
    c = base_cfg(dir_d);
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 1e300;
    c.batch_size = 600;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &t));
    CHECK_STATUS(dpt_trainer_run(t, &r), DPT_ERANGE);
    CHECK_ERR_HAS("step 1: the parameters are not finite (NaN or Inf): the model diverged");
    dpt_trainer_free(t);
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir_d);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir_d);
    CHECK(access(path, F_OK) != 0);
    /* bce: one output takes labels 0/1 only; a 3-class set is refused up front (it failed at
     * the first batch holding a label 2, naming its position in the batch) */
    c = base_cfg(NULL);
    c.model_spec = "mlp:8-4-1:relu";
    c.loss = DPT_LOSS_SIGMOID_BCE;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &te, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("loss bce: model_spec 'mlp:8-4-1:relu' with 1 output takes labels 0..1, but the training set has 3");
    c.model_spec = "mlp:8-4-3:relu"; /* one-vs-all over 3 outputs: fine */
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &t));
    dpt_trainer_free(t);
    /* A callback cannot run the trainer from inside itself (it recursed until the stack
     * overflowed, or finished the run inside the first step and the outer loop published a
     * bogus extra epoch). */
    reenter u = {NULL, DPT_OK, DPT_OK, 0};
    c = base_cfg(NULL);
    c.epochs = 2;
    c.on_step = reenter_step;
    c.user = &u;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &t));
    u.t = t;
    CHECK_OK(dpt_trainer_run(t, &r));
    CHECK(u.run == DPT_EINVAL && u.resume == DPT_EINVAL);
    CHECK(r.epoch == 2 && r.step == 2 * 19 && u.calls == 2 * 19);
    dpt_trainer_free(t);
    /* settings the trainer would use only later are refused at once */
    c = base_cfg(NULL);
    c.loss = (dpt_loss_kind)9;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &te, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_train_config.loss: unknown loss kind 9");
    c = base_cfg(NULL);
    c.run_json = "not json {";
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &tr, &te, a, &t), DPT_EINVAL);
    CHECK_ERR_HAS("run_json is not a JSON object");
    static const char *bad_split[] = {"", "Validation", "held out", "a-name-of-thirty-two-characters!"};
    for (size_t k = 0; k < sizeof bad_split / sizeof *bad_split; k++) {
        c = base_cfg(NULL);
        c.eval_split = bad_split[k];
        CHECK_OK(dpt_algo_sgd_new(&a));
        CHECK_STATUS(dpt_trainer_new(&c, &tr, &te, a, &t), DPT_EINVAL);
        CHECK_ERR_HAS("dpt_train_config.eval_split: expected 1-31 lowercase letters");
    }
    double ml = 0, acc = 0;
    dpt_model *em = NULL;
    CHECK_OK(dpt_model_new("mlp:8-4-3:relu", 16, 1, &em));
    if (em) {
        CHECK_STATUS(dpt_evaluate(em, DPT_LOSS_SOFTMAX_CE, &te, NULL, &acc), DPT_EINVAL);
        CHECK_ERR_HAS("dpt_evaluate: mean_loss is NULL");
        CHECK_STATUS(dpt_evaluate(em, DPT_LOSS_SOFTMAX_CE, NULL, &ml, &acc), DPT_EINVAL);
        dpt_model_free(em);
    }
    /* A resume that finds no run leaves no directory behind; an existing directory stays. */
    char dir_c[320];
    snprintf(dir_c, sizeof dir_c, "%s/never", tu_tmpdir());
    c = base_cfg(dir_c);
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &t));
    CHECK(dpt_trainer_resume(t) != DPT_OK);
    dpt_trainer_free(t);
    CHECK(access(dir_c, F_OK) != 0);
    c = base_cfg(dir_a);
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &t));
    dpt_trainer_free(t);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir_a);
    CHECK(access(path, F_OK) == 0);

    free(ta);
    free(tb);
    dpt_dataset_free(&tr);
    dpt_dataset_free(&tr2);
    dpt_dataset_free(&te);
    TEST_MAIN_END();
}
