/* Checkpoints opened for inference (dptrain/inference.h), end to end from a caller's
 * arrays: train DP-SGD and SGD on a dataset made with dpt_dataset_from_arrays, open the
 * run's checkpoint, and compare with the trainer itself: the same parameters bit for bit,
 * the same ledger and epsilon, predictions equal to an independently loaded model run one
 * example at a time, evaluation equal to the trainer's evaluator. Bad files and arguments
 * are refused with messages naming them. */
#include <dptrain/inference.h>
#include <dptrain/io.h>
#include <dptrain/train.h>

#include <stdint.h>
#include <unistd.h>

#include "testutil.h"

enum { N = 300, D = 6, K = 3 };

/* three Gaussian blobs in D dimensions, labels 0..2 */
static void make_arrays(float *x, int32_t *y) {
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 11, DPT_STREAM_AUX));
    for (size_t i = 0; i < N; i++) {
        y[i] = (int32_t)(i % K);
        for (size_t j = 0; j < D; j++) x[i * D + j] = (j == (size_t)y[i] ? 2.0f : 0.0f) + 0.5f * dpt_rng_gauss(&r);
    }
    dpt_rng_free(&r);
}

static void rm_run(const char *dir) {
    static const char *files[] = {"checkpoint.safetensors", "ledger.json", "metrics.jsonl", NULL};
    char p[700];
    for (size_t i = 0; files[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* Trains `algo` on the arrays into dir; returns the trainer (caller frees). */
static dpt_trainer *train(const dpt_dataset *d, const char *dir, int private_) {
    dpt_train_config cfg = dpt_train_config_defaults();
    cfg.model_spec = "mlp:6-16-3:tanh";
    cfg.optim = dpt_optim_defaults(DPT_OPT_SGD);
    cfg.optim.lr = 0.2;
    cfg.batch_size = 30;
    cfg.epochs = 3;
    cfg.threads = 1;
    cfg.out_dir = dir;
    cfg.run_json = "{\"note\": \"from arrays\"}";
    dpt_algo *a = NULL;
    if (private_) {
        cfg.sampler = DPT_SAMPLER_POISSON;
        cfg.sample_rate = 0.1;
        dpt_dpsgd_config dc = dpt_dpsgd_config_defaults();
        dc.sigma = 1.1;
        dc.clip = 1.0;
        CHECK_OK(dpt_algo_dpsgd_new(&dc, &a));
    } else {
        CHECK_OK(dpt_algo_sgd_new(&a));
    }
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_trainer_new(&cfg, d, d, a, &t));
    if (t) CHECK_OK(dpt_trainer_run(t, NULL));
    return t;
}

static void test_matches_trainer(const dpt_dataset *d, const float *x, int private_) {
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/%s", tu_tmpdir(), private_ ? "dp" : "sgd");
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    dpt_trainer *t = train(d, dir, private_);
    if (!t) return;
    dpt_checkpoint *ck = NULL;
    CHECK_OK(dpt_checkpoint_open(path, 1, &ck));
    if (!ck) goto out;
    dpt_model *tm = dpt_trainer_model(t), *m = dpt_checkpoint_model(ck);
    CHECK(!strcmp(dpt_checkpoint_spec(ck), "mlp:6-16-3:tanh") && !strcmp(m->spec, "mlp:6-16-3:tanh"));
    CHECK(m->n_params == tm->n_params && !memcmp(m->theta, tm->theta, m->n_params * sizeof(float)));
    CHECK(m->max_batch == DPT_CHECKPOINT_MAX_BATCH);
    CHECK(dpt_checkpoint_loss(ck) == DPT_LOSS_SOFTMAX_CE);
    CHECK(dpt_checkpoint_step(ck) == dpt_trainer_step(t) && dpt_checkpoint_step(ck) > 0);
    CHECK(!strcmp(dpt_checkpoint_algorithm(ck), private_ ? "dpsgd" : "sgd"));
    CHECK(strstr(dpt_checkpoint_state(ck), "\"note\":\"from arrays\"") != NULL);
    /* parameters by tensor name are views into the checkpoint's model */
    dpt_param_tensor pt;
    const float *w2 = dpt_model_tensor_by_name(m, "fc2.weight", &pt);
    CHECK(w2 && pt.shape[0] == 3 && pt.shape[1] == 16 && w2 == m->theta + pt.offset);
    CHECK(w2 && !memcmp(w2, tm->theta + pt.offset, pt.size * sizeof(float)));

    /* the ledger and its epsilon, as the trainer has them */
    const dpt_ledger *tl = dpt_trainer_ledger(t), *cl = dpt_checkpoint_ledger(ck);
    double eps = -1, eps_t = -2;
    if (private_) {
        CHECK(tl && cl && dpt_ledger_steps(cl) == dpt_ledger_steps(tl) && dpt_ledger_steps(cl) == dpt_trainer_step(t));
        CHECK_OK(dpt_checkpoint_epsilon(ck, 1e-5, &eps));
        CHECK_OK(dpt_ledger_epsilon(tl, 1e-5, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &eps_t)); /* the headline */
        CHECK(eps == eps_t && eps > 0 && isfinite(eps));
        CHECK_STATUS(dpt_checkpoint_epsilon(ck, 1.5, &eps), DPT_EINVAL);
        CHECK_ERR_HAS("delta must be in (0, 1), got 1.5");
    } else {
        CHECK(!tl && !cl);
        CHECK_STATUS(dpt_checkpoint_epsilon(ck, 1e-5, &eps), DPT_ENOTSUP);
        CHECK_ERR_HAS("has no privacy ledger");
    }

    /* evaluation: the trainer's evaluator on the trainer's model */
    double l1, a1, l2, a2;
    CHECK_OK(dpt_checkpoint_evaluate(ck, d, &l1, &a1));
    CHECK_OK(dpt_evaluate(tm, DPT_LOSS_SOFTMAX_CE, d, &l2, &a2));
    /* the same values up to float rounding: the two models run chunks of different sizes
     * (max_batch 512 against the trainer's), and OpenBLAS computes a chunk's last rows with
     * its edge kernel (seen here: the Prescott kernels this CPU gets differ in the last bit
     * on each chunk's last row), so the sums may differ in the last bits */
    CHECK(fabs(l1 - l2) <= 1e-6 * fabs(l2) && fabs(a1 - a2) <= 1.0 / (double)d->n);
    CHECK(a1 > 0.8); /* the blobs are easy */

    /* predictions: 2 * N examples (more than max_batch, so chunked) against a model built
     * and loaded separately, run one example at a time */
    const size_t n = 2 * N;
    CHECK(n > DPT_CHECKPOINT_MAX_BATCH);
    float *xx = malloc(n * D * sizeof *xx), *out = malloc(n * K * sizeof *out);
    memcpy(xx, x, N * D * sizeof *xx);
    memcpy(xx + N * D, x, N * D * sizeof *xx);
    CHECK_OK(dpt_checkpoint_predict(ck, xx, n, out));
    dpt_model *ref = NULL;
    CHECK_OK(dpt_model_new("mlp:6-16-3:tanh", 1, 1, &ref));
    CHECK_OK(dpt_checkpoint_load(path, ref, NULL, NULL));
    size_t bad = 0;
    for (size_t i = 0; ref && i < n; i++) {
        CHECK_OK(dpt_model_forward(ref, xx + i * D, 1));
        for (size_t k = 0; k < K; k++) bad += fabsf(dpt_model_output(ref)[k] - out[i * K + k]) > 1e-6f;
    }
    CHECK(bad == 0);
    dpt_model_free(ref);
    /* bad inputs */
    xx[7 * D + 2] = NAN;
    CHECK_STATUS(dpt_checkpoint_predict(ck, xx, n, out), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_checkpoint_predict: x[44] = nan (example 7, feature 2) is not finite");
    CHECK_STATUS(dpt_checkpoint_predict(ck, xx, 0, out), DPT_EINVAL);
    CHECK_ERR_HAS("n must be >= 1");
    CHECK_STATUS(dpt_checkpoint_predict(ck, NULL, 1, out), DPT_EINVAL);
    CHECK_ERR_HAS("x is NULL");
    CHECK_STATUS(dpt_checkpoint_predict(ck, xx, 1, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("out is NULL");
    dpt_dataset narrow;
    CHECK_OK(dpt_dataset_from_arrays(x, (const int32_t[]){0, 1}, 2, 3, 3, &narrow));
    CHECK_STATUS(dpt_checkpoint_evaluate(ck, &narrow, &l1, &a1), DPT_EINVAL);
    CHECK_ERR_HAS("takes 6 features per example, d->dim is 3");
    CHECK_STATUS(dpt_checkpoint_evaluate(ck, NULL, &l1, &a1), DPT_EINVAL);
    CHECK_ERR_HAS("d is NULL");
    dpt_dataset_free(&narrow);
    free(xx);
    free(out);
out:
    dpt_checkpoint_close(ck);
    dpt_trainer_free(t);
    rm_run(dir);
}

/* Checkpoints saved directly (no trainer): no state, a state with another loss, a
 * damaged ledger; missing and corrupt files. */
static void test_files(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/direct.safetensors", tu_tmpdir());
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("mlp:4-2", 4, 1, &m));
    if (!m) return;
    for (size_t i = 0; i < m->n_params; i++) m->theta[i] = 0.1f * (float)i;
    dpt_checkpoint *ck = NULL;
    CHECK_OK(dpt_checkpoint_save(path, m, NULL, NULL));
    CHECK_OK(dpt_checkpoint_open(path, 1, &ck));
    if (ck) {
        CHECK(!strcmp(dpt_checkpoint_state(ck), "{}") && dpt_checkpoint_step(ck) == 0);
        CHECK(!strcmp(dpt_checkpoint_algorithm(ck), "") && !dpt_checkpoint_ledger(ck));
        CHECK(dpt_checkpoint_loss(ck) == DPT_LOSS_SOFTMAX_CE);
        float x[4] = {1, 0, 0, 0}, o[2];
        CHECK_OK(dpt_checkpoint_predict(ck, x, 1, o));
        /* theta = 0.1 i: W [2, 4] = (0 .. 0.7) row-major, then the bias (0.8, 0.9) */
        CHECK(fabsf(o[0] - 0.8f) < 1e-6f && fabsf(o[1] - 1.3f) < 1e-6f);
    }
    dpt_checkpoint_close(ck);
    ck = NULL;

    CHECK_OK(dpt_checkpoint_save(path, m, NULL, "{\"config\": {\"loss\": 1}, \"step\": \"42\", \"algorithm\": \"x\"}"));
    CHECK_OK(dpt_checkpoint_open(path, 1, &ck));
    if (ck) CHECK(dpt_checkpoint_loss(ck) == DPT_LOSS_SIGMOID_BCE && dpt_checkpoint_step(ck) == 42);
    dpt_checkpoint_close(ck);
    ck = NULL;

    /* a ledger that does not verify is refused: it is the record of the privacy spent */
    dpt_ledger *l = NULL;
    char *lj = NULL;
    CHECK_OK(dpt_ledger_new(&l));
    CHECK_OK(dpt_ledger_add_sgm(l, 0.01, 1.0, 100));
    CHECK_OK(dpt_ledger_to_json(l, &lj));
    char *sgm = lj ? strstr(lj, "100") : NULL;
    if (sgm) sgm[0] = '2'; /* 200 steps: the checksum no longer matches */
    char state[2048];
    char esc[1500];
    size_t w = 0;
    for (const char *p = lj; p && *p && w + 2 < sizeof esc; p++) {
        if (*p == '"' || *p == '\\') esc[w++] = '\\';
        esc[w++] = *p;
    }
    esc[w] = 0;
    snprintf(state, sizeof state, "{\"ledger\": \"%s\"}", esc);
    CHECK_OK(dpt_checkpoint_save(path, m, NULL, state));
    CHECK_STATUS(dpt_checkpoint_open(path, 1, &ck), DPT_EFORMAT);
    CHECK_ERR_HAS("stored privacy ledger");
    CHECK(ck == NULL);
    free(lj);
    dpt_ledger_free(l);
    CHECK_OK(dpt_checkpoint_save(path, m, NULL, "{\"config\": {\"loss\": 7}}"));
    CHECK_STATUS(dpt_checkpoint_open(path, 1, &ck), DPT_EFORMAT);
    CHECK_ERR_HAS("config.loss is not a known loss");

    /* a damaged file is refused by the io module's verification */
    FILE *f = fopen(path, "r+b");
    if (f) {
        fseek(f, -3, SEEK_END);
        fputc('x', f);
        fclose(f);
    }
    CHECK(dpt_checkpoint_open(path, 1, &ck) != DPT_OK && ck == NULL);
    CHECK_ERR_HAS(path);
    unlink(path);
    CHECK_STATUS(dpt_checkpoint_open(path, 1, &ck), DPT_EIO);
    CHECK_ERR_HAS(path);
    CHECK_STATUS(dpt_checkpoint_open(NULL, 1, &ck), DPT_EINVAL);
    CHECK_ERR_HAS("path is NULL");
    CHECK_STATUS(dpt_checkpoint_open(path, 1, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("out is NULL");
    dpt_checkpoint_close(NULL);
    CHECK(!dpt_checkpoint_model(NULL) && !dpt_checkpoint_ledger(NULL));
    /* an algorithm that never reached a trainer is the caller's to free (ASan sees a leak
     * otherwise) */
    dpt_algo *a = NULL;
    dpt_dpsgd_config dc = dpt_dpsgd_config_defaults();
    CHECK_OK(dpt_algo_dpsgd_new(&dc, &a));
    dpt_algo_free(a);
    dpt_algo_free(NULL);
    dpt_model_free(m);
}

int main(void) {
    float *x = malloc(N * D * sizeof *x);
    int32_t *y = malloc(N * sizeof *y);
    make_arrays(x, y);
    dpt_dataset d;
    CHECK_OK(dpt_dataset_from_arrays(x, y, N, D, 0, &d));
    CHECK(d.n_classes == K);
    test_matches_trainer(&d, x, 1);
    test_matches_trainer(&d, x, 0);
    test_files();
    dpt_dataset_free(&d);
    free(x);
    free(y);
    rmdir(tu_tmpdir());
    TEST_MAIN_END();
}
