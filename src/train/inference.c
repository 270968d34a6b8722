/* Checkpoints opened for inference (dptrain/inference.h): the model rebuilt from the
 * stored spec and loaded through the io module's verified reader, the training state and
 * the privacy ledger parsed from the metadata. Evaluation is the trainer's evaluator
 * (dpt_evaluate), so `dptrain eval` and a training run report the same numbers. */
#include <dptrain/inference.h>
#include <dptrain/io.h>
#include <dptrain/train.h>

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

struct dpt_checkpoint {
    char *path;
    char *spec;        /* metadata model_spec (malloc) */
    char *state;       /* metadata state JSON (malloc; "{}" when saved without one) */
    dpt_model *model;
    dpt_ledger *ledger; /* NULL: non-private run */
    dpt_loss_kind loss;
    uint64_t step;
    char algorithm[32];
};

void dpt_checkpoint_close(dpt_checkpoint *ck) {
    if (!ck) return;
    free(ck->path);
    free(ck->spec);
    free(ck->state);
    dpt_model_free(ck->model);
    dpt_ledger_free(ck->ledger);
    free(ck);
}

/* loss, step, algorithm and ledger from the state JSON; absent fields keep defaults, but
 * a field that is present must be well-formed (a ledger that does not verify is refused:
 * it is the record of the privacy the parameters cost). */
static dpt_status parse_state(dpt_checkpoint *ck) {
    cJSON *root = cJSON_Parse(ck->state);
    DPT_CHECK(cJSON_IsObject(root), DPT_EFORMAT, "%s: the training state is not a JSON object", ck->path);
    dpt_status s = DPT_OK;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    const cJSON *loss = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "loss") : NULL;
    if (loss) {
        const double v = cJSON_IsNumber(loss) ? loss->valuedouble : -1;
        if (v != DPT_LOSS_SOFTMAX_CE && v != DPT_LOSS_SIGMOID_BCE && v != DPT_LOSS_SQUARED && v != DPT_LOSS_TOKEN_CE)
            s = dpt_set_error(DPT_EFORMAT, "%s: the training state's config.loss is not a known loss", ck->path);
        else
            ck->loss = (dpt_loss_kind)v;
    }
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(root, "step");
    if (s == DPT_OK && step) {
        char *end = NULL;
        const char *txt = cJSON_GetStringValue(step);
        unsigned long long v = txt ? strtoull(txt, &end, 10) : 0;
        if (!txt || !*txt || *end) s = dpt_set_error(DPT_EFORMAT, "%s: the training state's step is malformed", ck->path);
        else ck->step = (uint64_t)v;
    }
    const char *algo = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "algorithm"));
    if (s == DPT_OK && algo) snprintf(ck->algorithm, sizeof ck->algorithm, "%s", algo);
    const cJSON *lj = cJSON_GetObjectItemCaseSensitive(root, "ledger");
    if (s == DPT_OK && lj) {
        if (!cJSON_IsString(lj)) s = dpt_set_error(DPT_EFORMAT, "%s: the stored privacy ledger is not a string", ck->path);
        else if ((s = dpt_ledger_from_json(lj->valuestring, &ck->ledger)) != DPT_OK)
            s = dpt_error_context(s, "%s: stored privacy ledger", ck->path);
    }
    cJSON_Delete(root);
    return s;
}

dpt_status dpt_checkpoint_open(const char *path, int threads, dpt_checkpoint **out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_checkpoint_open: out is NULL");
    *out = NULL;
    DPT_CHECK(path && *path, DPT_EINVAL, "dpt_checkpoint_open: path is %s", path ? "empty" : "NULL");
    dpt_checkpoint *ck = calloc(1, sizeof *ck);
    DPT_CHECK(ck, DPT_ENOMEM, "dpt_checkpoint_open: out of memory");
    ck->loss = DPT_LOSS_SOFTMAX_CE;
    dpt_status s = DPT_OK;
    if (!(ck->path = strdup(path))) {
        s = dpt_set_error(DPT_ENOMEM, "dpt_checkpoint_open: out of memory");
        goto fail;
    }
    if ((s = dpt_checkpoint_peek(path, &ck->spec, &ck->state)) != DPT_OK) goto fail;
    if ((s = parse_state(ck)) != DPT_OK) goto fail;
    if ((s = dpt_model_new(ck->spec, DPT_CHECKPOINT_MAX_BATCH, threads, &ck->model)) != DPT_OK) {
        s = dpt_error_context(s, "%s", path);
        goto fail;
    }
    (void)dpt_model_unfold_cache(ck->model, 0); /* forward only: the conv unfold cache is unused memory */
    if ((s = dpt_checkpoint_load(path, ck->model, NULL, NULL)) != DPT_OK) goto fail;
    *out = ck;
    return DPT_OK;
fail:
    dpt_checkpoint_close(ck);
    return s;
}

/* ==== Accessors ==== */

dpt_model *dpt_checkpoint_model(dpt_checkpoint *ck) { return ck ? ck->model : NULL; }
const char *dpt_checkpoint_spec(const dpt_checkpoint *ck) { return ck ? ck->spec : NULL; }
dpt_loss_kind dpt_checkpoint_loss(const dpt_checkpoint *ck) { return ck ? ck->loss : DPT_LOSS_SOFTMAX_CE; }
const char *dpt_checkpoint_state(const dpt_checkpoint *ck) { return ck ? ck->state : NULL; }
uint64_t dpt_checkpoint_step(const dpt_checkpoint *ck) { return ck ? ck->step : 0; }
const char *dpt_checkpoint_algorithm(const dpt_checkpoint *ck) { return ck ? ck->algorithm : NULL; }
const dpt_ledger *dpt_checkpoint_ledger(const dpt_checkpoint *ck) { return ck ? ck->ledger : NULL; }

void dpt_checkpoint_label(const dpt_checkpoint *ck, int full, char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    if (!ck) return;
    if (ck->ledger) {
        dpt_ledger_label(ck->ledger, full, buf, cap);
        return;
    }
    /* no ledger: the labels the run's last metrics line carried (its record in the state) */
    cJSON *root = cJSON_Parse(ck->state);
    cJSON *rec = cJSON_Parse(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "record")));
    dpt_privacy_note_label(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "privacy")),
                           cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "privacy_excludes")), buf, cap);
    cJSON_Delete(rec);
    cJSON_Delete(root);
}

dpt_status dpt_checkpoint_epsilon(const dpt_checkpoint *ck, double delta, double *eps) {
    DPT_CHECK(ck && eps, DPT_EINVAL, "dpt_checkpoint_epsilon: %s is NULL", ck ? "eps" : "ck");
    DPT_CHECK(ck->ledger, DPT_ENOTSUP,
              "dpt_checkpoint_epsilon: %s has no privacy ledger (a non-private run: no finite epsilon)", ck->path);
    DPT_CHECK(delta > 0 && delta < 1, DPT_EINVAL, "dpt_checkpoint_epsilon: delta must be in (0, 1), got %g", delta);
    return dpt_ledger_epsilon(ck->ledger, delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, eps);
}

/* ==== Prediction and evaluation ==== */

dpt_status dpt_checkpoint_predict(dpt_checkpoint *ck, const float *x, size_t n, float *out) {
    static const char *F = "dpt_checkpoint_predict";
    DPT_CHECK(ck, DPT_EINVAL, "%s: ck is NULL", F);
    DPT_CHECK(x, DPT_EINVAL, "%s: x is NULL", F);
    DPT_CHECK(out, DPT_EINVAL, "%s: out is NULL", F);
    DPT_CHECK(n >= 1, DPT_EINVAL, "%s: n must be >= 1", F);
    dpt_model *m = ck->model;
    const size_t D = m->in_dim, K = m->out_dim;
    size_t nd;
    DPT_CHECK(!dpt_mul_overflow(n, D > K ? D : K, &nd), DPT_EINVAL, "%s: n = %zu examples overflow", F, n);
    for (size_t i = 0; i < n * D; i++)
        DPT_CHECK(isfinite(x[i]), DPT_EINVAL, "%s: x[%zu] = %g (example %zu, feature %zu) is not finite", F, i,
                  (double)x[i], i / D, i % D);
    for (size_t lo = 0; lo < n; lo += m->max_batch) {
        const size_t bc = n - lo < m->max_batch ? n - lo : m->max_batch;
        DPT_TRY(dpt_model_forward(m, x + lo * D, bc));
        memcpy(out + lo * K, dpt_model_output(m), bc * K * sizeof(float));
    }
    return DPT_OK;
}

dpt_status dpt_checkpoint_evaluate(dpt_checkpoint *ck, const dpt_dataset *d, double *mean_loss, double *accuracy) {
    static const char *F = "dpt_checkpoint_evaluate";
    DPT_CHECK(ck && d && mean_loss && accuracy, DPT_EINVAL, "%s: %s is NULL", F,
              !ck ? "ck" : !d ? "d" : !mean_loss ? "mean_loss" : "accuracy");
    DPT_CHECK(d->dim == ck->model->in_dim, DPT_EINVAL,
              "%s: the model '%s' takes %zu features per example, d->dim is %zu", F, ck->spec, ck->model->in_dim,
              d->dim);
    return dpt_evaluate(ck->model, ck->loss, d, mean_loss, accuracy);
}
