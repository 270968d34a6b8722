/* The one training loop (DESIGN.md "One training loop"): sample a batch, let the algorithm
 * turn it into an update direction (in chunks of at most max_batch examples), record its
 * privacy event, apply the optimizer, log, evaluate and checkpoint. Everything a resumed
 * run needs (RNG streams, sampler position, optimizer state, counters) goes into the
 * checkpoint, so a resumed run is bit-identical to an uninterrupted one. */
#include <dptrain/comm.h>
#include <dptrain/train.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_internal.h"
#include "io/checkpoint_ema.h"

dpt_train_config dpt_train_config_defaults(void) {
    dpt_train_config c;
    memset(&c, 0, sizeof c);
    c.model_spec = "mlp:784-128-64-32-10:gelu";
    c.loss = DPT_LOSS_SOFTMAX_CE;
    c.init = DPT_INIT_DEFAULT;
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.schedule.kind = DPT_SCHED_CONSTANT;
    c.sampler = DPT_SAMPLER_SHUFFLE;
    c.batch_size = 256;
    c.epochs = 5;
    c.seed = 0; /* from the OS, kept in the run's secret file */
    c.threads = 0;
    c.delta = 1e-5;
    return c;
}

/* ==== Construction ==== */

/* Buffers are sized for a declared maximum batch; a larger Poisson batch is processed in
 * chunks. For Poisson the bound is the mean plus 6 standard deviations, so chunking is
 * rare but handled; physical_batch caps the chunk (virtual batches: memory bounded by it,
 * every batch above it accumulated over several passes). */
static size_t max_batch_for(const dpt_train_config *c, size_t n, double q) {
    size_t mb;
    switch (c->sampler) {
    case DPT_SAMPLER_SHUFFLE: mb = c->batch_size; break;
    case DPT_SAMPLER_FULL: mb = 1024; break;
    default: mb = dpt_poisson_batch_bound(n, q);
    }
    if (mb > n) mb = n;
    if (c->physical_batch && mb > c->physical_batch) mb = c->physical_batch;
    return mb ? mb : 1;
}

/* Steps of a run are counted in uint64 and published as JSON numbers (doubles): a run may
 * plan at most 2^53 of them. */
#define MAX_RUN_STEPS 9007199254740992.0

static dpt_status validate_config(const dpt_train_config *c, const dpt_dataset *train, const dpt_algo *algo) {
    DPT_CHECK(algo, DPT_EINVAL, "dpt_trainer_new: algo is NULL");
    DPT_CHECK(c->model_spec && *c->model_spec, DPT_EINVAL, "model_spec is empty");
    DPT_CHECK(c->epochs >= 1, DPT_EINVAL, "epochs must be >= 1, got 0");
    DPT_CHECK(train && train->n >= 1, DPT_EINVAL, "the training set is empty");
    DPT_CHECK(!c->out_dir || (c->out_dir[0] && strlen(c->out_dir) < 512), DPT_EINVAL,
              "out_dir must be a non-empty path shorter than 512 bytes");
    DPT_CHECK(!c->secret_dir || (c->secret_dir[0] && strlen(c->secret_dir) < 480), DPT_EINVAL,
              "secret_dir must be a non-empty path shorter than 480 bytes (NULL for the default)");
    DPT_CHECK(c->threads >= 0 && c->threads <= 1024, DPT_EINVAL, "threads must be in [0, 1024] (0 = all cores), got %d",
              c->threads);
    DPT_CHECK(c->target_epsilon >= 0 && isfinite(c->target_epsilon), DPT_EINVAL,
              "target_epsilon must be >= 0 and finite (0 = no target), got %g", c->target_epsilon);
    DPT_CHECK(c->loss == DPT_LOSS_SOFTMAX_CE || c->loss == DPT_LOSS_SIGMOID_BCE || c->loss == DPT_LOSS_SQUARED ||
                  c->loss == DPT_LOSS_TOKEN_CE,
              DPT_EINVAL, "dpt_train_config.loss: unknown loss kind %d", (int)c->loss);
    if (c->eval_split) {
        size_t n = strlen(c->eval_split), ok = n >= 1 && n < 32;
        for (size_t i = 0; ok && i < n; i++) ok = (c->eval_split[i] >= 'a' && c->eval_split[i] <= 'z') || c->eval_split[i] == '-';
        DPT_CHECK(ok, DPT_EINVAL, "dpt_train_config.eval_split: expected 1-31 lowercase letters or '-' (e.g. "
                  "\"validation\"), got '%.40s'", c->eval_split);
    }
    if (c->run_json) { /* stored in every checkpoint as the object "run": never dropped silently */
        cJSON *rj = cJSON_Parse(c->run_json);
        int obj = cJSON_IsObject(rj);
        cJSON_Delete(rj);
        DPT_CHECK(obj, DPT_EINVAL, "dpt_train_config.run_json is not a JSON object");
    }
    if (c->sampler == DPT_SAMPLER_SHUFFLE)
        DPT_CHECK(c->batch_size >= 1 && c->batch_size <= train->n, DPT_EINVAL,
                  "batch_size must be in [1, %zu] (the training set size), got %zu", train->n, c->batch_size);
    if (c->sampler == DPT_SAMPLER_POISSON || c->sampler == DPT_SAMPLER_POISSON_REJECT) {
        double q = c->sample_rate > 0 ? c->sample_rate : (double)c->batch_size / (double)train->n;
        DPT_CHECK(c->sample_rate == 0 || (c->sample_rate > 0 && c->sample_rate <= 1), DPT_EINVAL,
                  "sample_rate must be in (0, 1], got %g", c->sample_rate);
        DPT_CHECK(q > 0 && q <= 1, DPT_EINVAL, "sample_rate = batch_size / N = %zu / %zu = %g is outside (0, 1]",
                  c->batch_size, train->n, q);
        if (c->sampler == DPT_SAMPLER_POISSON_REJECT)
            DPT_CHECK(c->min_batch >= 1 && (double)c->min_batch <= q * (double)train->n * (1 + 1e-12), DPT_EINVAL,
                      "min_batch N_B = %zu must be in [1, qN] = [1, %.6g]", c->min_batch, q * (double)train->n);
    }
    /* the planned steps, by the rule the sampler runs (at most 2^53) */
    uint64_t planned = 0;
    if (dpt_sampler_steps_for_epochs(c->sampler, train->n, c->batch_size, c->sample_rate, c->epochs, &planned) !=
        DPT_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", dpt_last_error());
        return dpt_set_error(DPT_EINVAL, "%s", why);
    }
    DPT_CHECK(isfinite(c->ema_decay) && c->ema_decay >= 0 && c->ema_decay < 1, DPT_EINVAL,
              "ema_decay must be in [0, 1) (0 = no parameter averaging), got %g", c->ema_decay);
    DPT_CHECK(c->ema_warmup == 0 || (c->ema_warmup == 1 && c->ema_decay > 0), DPT_EINVAL,
              "ema_warmup must be 0 or 1, and 1 needs ema_decay > 0 (got %d, ema_decay %g)", c->ema_warmup,
              c->ema_decay);
    DPT_CHECK(c->augment == DPT_AUGMENT_NONE || c->augment == DPT_AUGMENT_CROP || c->augment == DPT_AUGMENT_CROP_FLIP,
              DPT_EINVAL, "augment: unknown augmentation %d", c->augment);
    DPT_CHECK(c->aug_mult <= 64, DPT_EINVAL, "aug_mult must be in [1, 64] (0 = 1), got %zu", c->aug_mult);
    DPT_CHECK(c->aug_mult <= 1 || c->augment != DPT_AUGMENT_NONE, DPT_EINVAL,
              "aug_mult = %zu copies of each example need an augmentation (augment crop or crop-flip): identical "
              "copies would only repeat the work", c->aug_mult);
    DPT_TRY(dpt_optim_validate(&c->optim));
    DPT_CHECK(c->optim.kind != DPT_OPT_ADAM || c->optim.momentum == 0, DPT_EINVAL,
              "optim.momentum = %g applies to SGD only (Adam's momentum is optim.beta1)", c->optim.momentum);
    return DPT_OK;
}

/* ==== Privacy ledger ==== */

/* The settings the ledger's events depend on: a resume compares them (see resume). */
static void ledger_run_values(const dpt_trainer *t, char q[32], char sigma[32], char data[65]) {
    snprintf(q, 32, "%.17g", t->cfg.sample_rate);
    snprintf(sigma, 32, "%.17g", t->algo->sigma);
    memcpy(data, t->data_tag, 65);
}

/* Where the streams' seed came from: "os" (drawn by the trainer, kept in the secret file)
 * or "caller" (anyone who knows it can regenerate the batches and the noise: the epsilon
 * holds only against an adversary who does not; docs/checkpoints.md, "Seeds"). */
static dpt_status ledger_set_seed_meta(dpt_trainer *t) {
    return dpt_ledger_set_meta(t->ledger, "seed_source", t->seed_caller ? "caller" : "os");
}

static dpt_status ledger_set_run_meta(dpt_trainer *t) {
    char q[32], sigma[32], hash[65];
    ledger_run_values(t, q, sigma, hash);
    DPT_TRY(dpt_ledger_set_meta(t->ledger, "run_id", t->run_id));
    DPT_TRY(dpt_ledger_set_meta(t->ledger, "secure", t->cfg.secure ? "1" : "0"));
    DPT_TRY(ledger_set_seed_meta(t));
    DPT_TRY(dpt_ledger_set_meta(t->ledger, "algorithm", t->algo->name));
    DPT_TRY(dpt_ledger_set_meta(t->ledger, "sampler",
                                t->cfg.sampler == DPT_SAMPLER_POISSON_REJECT ? "poisson_reject" : "poisson"));
    if (t->cfg.sampler == DPT_SAMPLER_POISSON_REJECT) {
        char nb[32];
        snprintf(nb, sizeof nb, "%zu", t->cfg.min_batch);
        DPT_TRY(dpt_ledger_set_meta(t->ledger, "min_batch", nb));
    }
    DPT_TRY(dpt_ledger_set_meta(t->ledger, "q", q));
    DPT_TRY(dpt_ledger_set_meta(t->ledger, "sigma", sigma));
    if (t->freeze_list[0]) DPT_TRY(dpt_ledger_set_meta(t->ledger, "frozen_layers", t->freeze_list));
    /* delta >= 1/N (the CLI's --force, Python's force=True) allows releasing a whole example:
     * labelled wherever the epsilon goes (dpt_ledger_label); kept once set, also by a resume */
    if (t->cfg.delta >= 1.0 / (double)t->train->n) {
        char d[32];
        snprintf(d, sizeof d, "%.17g", t->cfg.delta);
        DPT_TRY(dpt_ledger_set_meta(t->ledger, "delta_forced", d));
    }
    /* exclusions recorded before the ledger existed (an algorithm's bind) or missing from a
     * resumed ledger written by an older version: added, never dropped */
    DPT_TRY(dpt_trainer_excludes_to_ledger(t));
    /* the data under the run's key, never their plain hash (rundir.c, "The run key") */
    return dpt_ledger_set_meta(t->ledger, "data_hmac", hash);
}

static dpt_status ledger_sidecar_path(const dpt_trainer *t, char *buf, size_t n) {
    int w = snprintf(buf, n, "%s/ledger.json", t->out_dir);
    DPT_CHECK(w > 0 && (size_t)w < n, DPT_EINVAL, "out_dir: path too long");
    return DPT_OK;
}

/* epsilon (the default accountant, accounting.h: PLD where it applies, the one calibration
 * used) of the ledger plus `more` steps of this run's events (the algorithm's add_events,
 * else SGM(q, sigma)): what the budget stops at. */
static dpt_status ledger_eps_after(const void *ctx, uint64_t more, double *eps) {
    const dpt_trainer *t = ctx;
    if (!more) return dpt_ledger_epsilon(t->ledger, t->cfg.delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, eps);
    dpt_ledger *l = NULL;
    DPT_TRY(dpt_ledger_copy(t->ledger, &l));
    dpt_status s = t->algo->add_events ? t->algo->add_events(t->algo, t, l, more)
                                       : dpt_ledger_add_sgm(l, t->cfg.sample_rate, t->algo->sigma, more);
    if (s == DPT_OK) s = dpt_ledger_epsilon(l, t->cfg.delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, eps);
    dpt_ledger_free(l);
    return s;
}

/* ==== Frozen layers ==== */

/* Resolves cfg.freeze against the model (dpt_model_freeze_parse): t->frozen,
 * t->freeze_list (model order), the trained parameter ranges, the lowest trained layer and
 * the trained parameter count. */
static dpt_status freeze_setup(dpt_trainer *t, const char *spec) {
    const dpt_model *m = t->model;
    t->n_trained = m->n_params;
    t->first_trained = 0;
    t->cfg.freeze = NULL;
    if (!spec || !spec[0]) return DPT_OK;
    DPT_CHECK(strlen(spec) < sizeof t->freeze_list, DPT_EINVAL, "dpt_train_config.freeze is longer than %zu bytes",
              sizeof t->freeze_list - 1);
    DPT_CHECK(t->algo->freezable, DPT_ENOTSUP,
              "dpt_train_config.freeze: algorithm %s cannot train with frozen layers (sgd and dpsgd can)",
              t->algo->name);
    t->frozen = calloc(m->n_layers, 1);
    DPT_CHECK(t->frozen, DPT_ENOMEM, "frozen layers: out of memory");
    DPT_TRY(dpt_error_context(dpt_model_freeze_parse(m, spec, t->frozen, &t->n_trained), "dpt_train_config.freeze"));
    /* names in model order; trained slices, adjacent ones merged */
    size_t len = 0, nr = 0, first = m->n_layers;
    t->train_ranges = calloc(2 * m->n_layers, sizeof *t->train_ranges);
    DPT_CHECK(t->train_ranges, DPT_ENOMEM, "frozen layers: out of memory");
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (!L->n_params) continue;
        if (t->frozen[l]) {
            len += (size_t)snprintf(t->freeze_list + len, sizeof t->freeze_list - len, "%s%s", len ? "," : "",
                                    L->name); /* fits: no longer than the names given */
            continue;
        }
        if (first == m->n_layers) first = l;
        if (nr && t->train_ranges[2 * nr - 1] == L->param_offset) t->train_ranges[2 * nr - 1] += L->n_params;
        else {
            t->train_ranges[2 * nr] = L->param_offset;
            t->train_ranges[2 * nr + 1] = L->param_offset + L->n_params;
            nr++;
        }
    }
    DPT_ASSERT(nr); /* dpt_model_freeze_parse refuses freezing every layer */
    t->n_train_ranges = nr;
    t->first_trained = first;
    t->cfg.freeze = t->freeze_list;
    return DPT_OK;
}

const char *dpt_trainer_frozen(const dpt_trainer *t, size_t *trained) {
    if (trained) *trained = t ? t->n_trained : 0;
    return t ? t->freeze_list : "";
}

/* 1 when b holds exactly a's examples (the same arrays, or equal contents). */
static int same_data(const dpt_dataset *a, const dpt_dataset *b) {
    if (a == b) return 1;
    if (a->n != b->n || a->dim != b->dim) return 0;
    return (a->x == b->x || !memcmp(a->x, b->x, a->n * a->dim * sizeof *a->x)) &&
           (a->y == b->y || (a->y && b->y && !memcmp(a->y, b->y, a->n * sizeof *a->y))) &&
           a->t_dim == b->t_dim &&
           (a->t == b->t || (a->t && b->t && !memcmp(a->t, b->t, a->n * a->t_dim * sizeof *a->t)));
}

/* Regression data (targets): an algorithm that opted in, the squared-error loss, one
 * output per target, and a test set of the same kind. */
static dpt_status check_regression(const dpt_train_config *cfg, const dpt_dataset *train, const dpt_dataset *test,
                                   const dpt_algo *algo, const dpt_model *m) {
    for (int k = 0; k < 2; k++) { /* unlabelled data (dpt_data_load_csv_features) are for prediction only */
        const dpt_dataset *d = k ? test : train;
        DPT_CHECK(!d || d->y || d->t, DPT_EINVAL, "the %s set has neither labels nor regression targets (%s): "
                  "unlabelled data are for prediction only", k ? "test" : "training", d ? d->source : "");
    }
    if (!train->t) {
        DPT_CHECK(!test || !test->t, DPT_EINVAL, "the test set has regression targets (%zu per example) but the "
                  "training set has class labels", test->t_dim);
        DPT_CHECK(cfg->loss != DPT_LOSS_TOKEN_CE, DPT_EINVAL, "the token cross-entropy loss needs the next tokens as "
                  "targets (T token ids per example, as regression targets), but the training set has class labels");
        return DPT_OK;
    }
    DPT_CHECK(algo->regression, DPT_ENOTSUP, "algorithm %s does not train on regression data (real-valued targets); "
              "sgd, dpsgd, pdp-sgd and proportional-noise do", algo->name);
    DPT_CHECK(cfg->loss == DPT_LOSS_SQUARED || cfg->loss == DPT_LOSS_TOKEN_CE, DPT_EINVAL, "regression data "
              "(real-valued targets) need the squared-error loss (dpt_train_config.loss = DPT_LOSS_SQUARED, \"mse\") "
              "or, for token ids, the token cross-entropy (\"token-ce\"), not %s",
              cfg->loss == DPT_LOSS_SOFTMAX_CE ? "softmax cross-entropy" : "binary cross-entropy");
    if (cfg->loss == DPT_LOSS_TOKEN_CE)
        DPT_CHECK(m->out_dim % train->t_dim == 0, DPT_EINVAL, "model_spec '%s' has %zu outputs, not V logits for each "
                  "of the %zu target tokens per example (the token cross-entropy reads position t's V logits at "
                  "t V)", cfg->model_spec, m->out_dim, train->t_dim);
    else
        DPT_CHECK(m->out_dim == train->t_dim, DPT_EINVAL, "model_spec '%s' has %zu outputs but the data have %zu "
                  "regression target%s per example", cfg->model_spec, m->out_dim, train->t_dim,
                  train->t_dim == 1 ? "" : "s");
    DPT_CHECK(!test || test->t_dim == train->t_dim, DPT_EINVAL, "the test set has %s but the training set has %zu "
              "regression target%s per example", test && test->t ? "another number of targets" : "class labels",
              train->t_dim, train->t_dim == 1 ? "" : "s");
    return DPT_OK;
}

dpt_status dpt_trainer_new(const dpt_train_config *cfg, const dpt_dataset *train,
                           const dpt_dataset *test, dpt_algo *algo, dpt_trainer **out) {
    if (out) *out = NULL;
    dpt_status s = DPT_OK;
    if (!out || !cfg) s = dpt_set_error(DPT_EINVAL, "dpt_trainer_new: %s is NULL", out ? "cfg" : "out");
    else s = validate_config(cfg, train, algo);
    if (s != DPT_OK) {
        if (algo && algo->free) algo->free(algo);
        return s;
    }
    dpt_trainer *t = calloc(1, sizeof *t);
    if (!t) {
        if (algo && algo->free) algo->free(algo);
        return dpt_set_error(DPT_ENOMEM, "trainer: out of memory");
    }
    t->cfg = *cfg;
    t->lock_fd = -1;
    t->algo = algo;
    t->train = train;
    t->test = test;
    snprintf(t->model_spec, sizeof t->model_spec, "%s", cfg->model_spec);
    t->cfg.model_spec = t->model_spec;
    if (cfg->out_dir) {
        snprintf(t->out_dir, sizeof t->out_dir, "%s", cfg->out_dir);
        t->cfg.out_dir = t->out_dir;
    }
    if (cfg->eval_split) {
        snprintf(t->eval_split, sizeof t->eval_split, "%s", cfg->eval_split);
        t->cfg.eval_split = t->eval_split;
    }
    if (cfg->run_json) {
        t->run_json = strdup(cfg->run_json);
        t->cfg.run_json = t->run_json;
    }
    t->threads = dpt_threads_resolve(cfg->threads);
    dpt_threads_set_blas(t->threads);
    double q = cfg->sample_rate;
    if ((cfg->sampler == DPT_SAMPLER_POISSON || cfg->sampler == DPT_SAMPLER_POISSON_REJECT) && q <= 0)
        q = (double)cfg->batch_size / (double)train->n;
    t->cfg.sample_rate = q;
    t->max_batch = max_batch_for(&t->cfg, train->n, q);
    /* augmentation multiplicity: one example's K copies go through the model together */
    if (cfg->aug_mult > t->max_batch) t->max_batch = cfg->aug_mult;

    if ((s = dpt_model_new(cfg->model_spec, t->max_batch, t->threads, &t->model)) != DPT_OK) goto fail;
    if (t->model->in_dim != train->dim) {
        s = dpt_set_error(DPT_EINVAL, "model_spec '%s' takes %zu inputs but the data has %zu features per example",
                          cfg->model_spec, t->model->in_dim, train->dim);
        goto fail;
    }
    if (cfg->loss == DPT_LOSS_SOFTMAX_CE && (int)t->model->out_dim < train->n_classes) {
        s = dpt_set_error(DPT_EINVAL, "model_spec '%s' has %zu outputs but the data has %d classes",
                          cfg->model_spec, t->model->out_dim, train->n_classes);
        goto fail;
    }
    /* binary cross-entropy: one output takes labels 0 and 1, K > 1 outputs one-vs-all labels
     * 0..K-1 (dpt_loss); checked here, not when a batch happens to hold a bad label */
    if (cfg->loss == DPT_LOSS_SIGMOID_BCE) {
        int ny = t->model->out_dim == 1 ? 2 : (int)t->model->out_dim;
        for (int k = 0; k < 2; k++) {
            const dpt_dataset *d = k ? test : train;
            if (d && d->n_classes > ny) {
                s = dpt_set_error(DPT_EINVAL, "loss bce: model_spec '%s' with %zu output%s takes labels 0..%d, but the "
                                  "%s set has %d classes", cfg->model_spec, t->model->out_dim,
                                  t->model->out_dim == 1 ? "" : "s", ny - 1, k ? "test" : "training", d->n_classes);
                goto fail;
            }
        }
    }
    /* the test set is only read at the end of an epoch: refuse it now, not after one */
    if (test && test->n == 0) {
        s = dpt_set_error(DPT_EINVAL, "the test set is empty (pass NULL for no test set)");
        goto fail;
    }
    if (test && t->model->in_dim != test->dim) {
        s = dpt_set_error(DPT_EINVAL, "model_spec '%s' takes %zu inputs but the test set has %zu features per example",
                          cfg->model_spec, t->model->in_dim, test->dim);
        goto fail;
    }
    if (test && cfg->loss == DPT_LOSS_SOFTMAX_CE && (int)t->model->out_dim < test->n_classes) {
        s = dpt_set_error(DPT_EINVAL, "model_spec '%s' has %zu outputs but the test set has %d classes",
                          cfg->model_spec, t->model->out_dim, test->n_classes);
        goto fail;
    }
    if ((s = check_regression(cfg, train, test, algo, t->model)) != DPT_OK) goto fail;
    if (cfg->augment != DPT_AUGMENT_NONE) {
        const dpt_layer *L0 = &t->model->layers[0];
        if (!algo->augmentable)
            s = dpt_set_error(DPT_ENOTSUP, "augment: algorithm %s does not take augmented copies (dpsgd does)",
                              algo->name);
        else if (train->t)
            s = dpt_set_error(DPT_ENOTSUP, "augment: the training set has regression targets; augmentation is for "
                              "labelled images");
        else if (L0->in_shape[1] < 5 || L0->in_shape[2] < 5)
            s = dpt_set_error(DPT_EINVAL, "augment: model '%s' takes %zux%zux%zu inputs; crops after 4-pixel reflect "
                              "padding need images (a cnn: spec) of at least 5x5", cfg->model_spec, L0->in_shape[0],
                              L0->in_shape[1], L0->in_shape[2]);
        if (s != DPT_OK) goto fail;
        memcpy(t->aug_shape, L0->in_shape, sizeof t->aug_shape);
    }
    if (cfg->ema_decay > 0) {
        t->ema = dpt_alloc(t->model->n_params, sizeof *t->ema, "parameter average");
        t->ema_swap = dpt_alloc(t->model->n_params, sizeof *t->ema_swap, "parameter average");
        if (!t->ema || !t->ema_swap) {
            s = DPT_ENOMEM;
            goto fail;
        }
    }
    /* seed 0: drawn from the OS (every rank uses rank 0's), known only to this process and
     * the run's secret file; a caller's seed is labelled wherever the results go */
    t->seed_caller = cfg->seed != 0 && !cfg->seed_from_os;
    if (cfg->seed == 0) {
        uint64_t os = 0;
        while (os == 0)
            if ((s = dpt_os_random_u64(&os)) != DPT_OK) goto fail;
        if (dpt_comm_size() > 1 && (s = dpt_comm_bcast(&os, sizeof os, 0)) != DPT_OK) goto fail;
        t->cfg.seed = os;
    }
    cfg = &t->cfg;
    if ((s = dpt_rng_init(&t->rng_init, cfg->seed, DPT_STREAM_INIT)) != DPT_OK) goto fail;
    t->rng_init_live = 1;
    if ((s = cfg->secure ? dpt_rng_init_secure(&t->rng_noise, DPT_STREAM_NOISE)
                         : dpt_rng_init(&t->rng_noise, cfg->seed, DPT_STREAM_NOISE)) != DPT_OK)
        goto fail;
    t->rng_noise_live = 1;
    if ((s = dpt_model_init(t->model, cfg->init, NULL, 0, 0.0, &t->rng_init)) != DPT_OK) goto fail;
    if ((s = dpt_optim_init(&t->opt, &cfg->optim, t->model->n_params)) != DPT_OK) goto fail;
    t->opt_live = 1;
    /* --secure: the batches must be as unpredictable as the noise, or an adversary who
     * knows the (logged) seed knows who was sampled and there is no amplification. */
    if ((s = cfg->secure ? dpt_sampler_new_secure(cfg->sampler, train->n, cfg->batch_size, q, cfg->min_batch,
                                                  &t->sampler)
                         : dpt_sampler_new(cfg->sampler, train->n, cfg->batch_size, q, cfg->min_batch, cfg->seed,
                                           &t->sampler)) != DPT_OK)
        goto fail;
    t->idx = dpt_alloc(train->n, sizeof *t->idx, "batch indices");
    t->xb = dpt_alloc2(t->max_batch, train->dim, sizeof *t->xb, "batch features");
    t->yb = dpt_alloc(t->max_batch, sizeof *t->yb, "batch labels");
    t->xb_cap = train->dim;
    if (train->t) t->tb = dpt_alloc2(t->max_batch, train->t_dim, sizeof *t->tb, "batch targets");
    if (!t->idx || !t->xb || !t->yb || (train->t && !t->tb)) {
        s = DPT_ENOMEM;
        goto fail;
    }
    if ((s = dpt_dataset_hash(train, t->data_hash)) != DPT_OK) goto fail;
    if ((s = dpt_run_key_new(t)) != DPT_OK) goto fail;
    if ((s = dpt_run_id_new(t->run_id)) != DPT_OK) goto fail;
    if ((s = freeze_setup(t, cfg->freeze)) != DPT_OK) goto fail;
    if (algo && algo->bind && (s = algo->bind(algo, t)) != DPT_OK) goto fail;
    if (algo && algo->is_private) {
        if (!(cfg->delta > 0 && cfg->delta < 1)) {
            s = dpt_set_error(DPT_EINVAL, "delta must be in (0, 1), got %g", cfg->delta);
            goto fail;
        }
        if ((s = dpt_ledger_new(&t->ledger)) != DPT_OK) goto fail;
        if ((s = ledger_set_run_meta(t)) != DPT_OK) goto fail;
    }
    if ((s = dpt_dist_configure(t, cfg->shards)) != DPT_OK) goto fail;
    if (t->dist && cfg->augment != DPT_AUGMENT_NONE) {
        s = dpt_set_error(DPT_ENOTSUP, "augment: not available with data-parallel training (shards or ranks > 1)");
        goto fail;
    }
    if (t->rank != 0) {
        /* rank 0 alone writes the ledger, checkpoints and metrics, and calls on_step and
         * on_epoch */
        t->out_dir[0] = 0;
        t->cfg.out_dir = NULL;
    }
    if ((s = dpt_dist_check_agree(t)) != DPT_OK) goto fail;
    /* Metrics "on the test split" computed on the training data itself are a noiseless
     * function of the private data (CSV runs with one file for both splits, a caller passing
     * the same arrays twice): published, but said not to be covered. */
    if (algo && algo->is_private && test && same_data(train, test) &&
        (s = dpt_trainer_exclude_from_guarantee(t, "test metrics computed on the training data")) != DPT_OK)
        goto fail;
    /* One trainer per run directory: the lock is held until dpt_trainer_free. The secret
     * directory is made and checked now, not at the first save an epoch later. Every rank
     * learns rank 0's outcome (the others would otherwise wait in the first step). */
    int locked = 1;
    if (t->out_dir[0]) {
        locked = (s = dpt_run_secret_dir(cfg->secret_dir, t->secret_dir, sizeof t->secret_dir)) == DPT_OK;
        if (locked) locked = (s = dpt_run_dir_lock(t->out_dir, &t->lock_fd, &t->dir_created)) == DPT_OK;
        if (locked) locked = (s = dpt_run_secret_outside(t->secret_dir, t->out_dir)) == DPT_OK;
    }
    t->cfg.secret_dir = t->secret_dir[0] ? t->secret_dir : NULL;
    if (t->nranks > 1 && dpt_comm_bcast(&locked, sizeof locked, 0) != DPT_OK) goto fail;
    if (!locked) {
        if (t->rank != 0) s = dpt_set_error(DPT_EBUSY, "rank %d: rank 0 could not lock the run directory or "
                                               "make its secret directory", t->rank);
        goto fail;
    }
    *out = t;
    return DPT_OK;
fail:
    dpt_trainer_free(t);
    return s;
}

void dpt_trainer_free(dpt_trainer *t) {
    if (!t) return;
    if (t->algo && t->algo->free) t->algo->free(t->algo);
    dpt_model_free(t->model);
    if (t->opt_live) dpt_optim_free(&t->opt);
    dpt_sampler_free(t->sampler);
    if (t->rng_init_live) dpt_rng_free(&t->rng_init);
    if (t->rng_noise_live) dpt_rng_free(&t->rng_noise);
    if (t->metrics_open) dpt_metrics_close(&t->metrics);
    free(t->frozen);
    free(t->train_ranges);
    dpt_free(t->idx);
    dpt_free(t->xb);
    dpt_free(t->yb);
    dpt_free(t->tb);
    dpt_free(t->fc);
    dpt_free(t->fn_feat);
    dpt_free(t->fc_test);
    dpt_free(t->fc_trunk);
    dpt_free(t->ema);
    dpt_free(t->ema_swap);
    if (t->rng_aug_live) dpt_rng_free(&t->rng_aug);
    free(t->run_json);
    dpt_ledger_free(t->ledger);
    dpt_secret_free(t->secret_cur);
    dpt_secret_free(t->secret_prev);
    dpt_secret_free(t->secret_streams_all);
    dpt_dist_free(t);
    free(t->record);
    /* a directory this trainer created and left with nothing but its lock (a resume that
     * found no checkpoint, a run that failed before writing) goes again */
    if (t->dir_created && t->lock_fd >= 0) dpt_run_dir_remove_if_unused(t->out_dir);
    dpt_run_dir_unlock(t->lock_fd);
    OPENSSL_cleanse(t->run_key, sizeof t->run_key); /* a memset before free is dropped */
    free(t);
}

dpt_model *dpt_trainer_model(dpt_trainer *t) { return t->model; }
const dpt_train_config *dpt_trainer_config(const dpt_trainer *t) { return &t->cfg; }
dpt_rng *dpt_trainer_noise_rng(dpt_trainer *t) { return &t->rng_noise; }
size_t dpt_trainer_dataset_size(const dpt_trainer *t) { return t->train->n; }
const float *dpt_trainer_batch_targets(const dpt_trainer *t) { return t->tb; }
uint64_t dpt_trainer_step(const dpt_trainer *t) { return t->step; }
size_t dpt_trainer_shards(const dpt_trainer *t) { return t->shards; }
const struct dpt_ledger *dpt_trainer_ledger(const dpt_trainer *t) { return t->ledger; }
int dpt_trainer_budget_stopped(const dpt_trainer *t, double *eps_next) {
    if (eps_next) *eps_next = t->budget_eps_next;
    return t->budget_stopped;
}
dpt_stop_reason dpt_trainer_stop_reason(const dpt_trainer *t) { return t->stop_reason; }
const char *dpt_trainer_run_id(const dpt_trainer *t) { return t->run_id; }

/* ==== Evaluation ==== */

dpt_status dpt_eval_range(dpt_model *m, dpt_loss_kind loss, const dpt_dataset *d, size_t from, size_t to,
                          double *loss_sum, size_t *n_correct) {
    return dpt_eval_range_from(m, loss, d, NULL, 0, from, to, loss_sum, n_correct);
}

dpt_status dpt_eval_range_from(dpt_model *m, dpt_loss_kind loss, const dpt_dataset *d, const float *feat,
                               size_t first, size_t from, size_t to, double *loss_sum, size_t *n_correct) {
    DPT_CHECK(d->dim == m->in_dim, DPT_EINVAL, "evaluate: model takes %zu inputs, data has %zu", m->in_dim, d->dim);
    DPT_ASSERT(feat ? first < m->n_layers : first == 0);
    const size_t fdim = m->layers[first].in_dim;
    DPT_CHECK(from <= to && to <= d->n, DPT_EINVAL, "evaluate: range [%zu, %zu) outside the %zu examples", from, to,
              d->n);
    size_t mb = m->max_batch, K = m->out_dim;
    float *lbuf = dpt_alloc(mb, sizeof(float), "evaluation losses");
    if (!lbuf) return DPT_ENOMEM;
    double lsum = 0;
    size_t correct = 0;
    dpt_status s = DPT_OK;
    for (size_t lo = from; lo < to && s == DPT_OK; lo += mb) {
        size_t bc = to - lo < mb ? to - lo : mb;
        const float *x = d->x + lo * d->dim;
        const int32_t *y = d->y ? d->y + lo : NULL;
        if (feat) {
            memcpy(m->act[first], feat + lo * fdim, bc * fdim * sizeof *feat);
            if ((s = dpt_model_forward_from(m, first, bc)) != DPT_OK) break;
        } else if ((s = dpt_model_forward(m, x, bc)) != DPT_OK) {
            break;
        }
        const float *o = dpt_model_output(m);
        /* squared error: against the regression targets, or on classification data an
         * autoencoder's (the targets are the inputs) */
        const float *tg = d->t ? d->t + lo * d->t_dim : loss == DPT_LOSS_SQUARED ? x : NULL;
        if (!d->y && !d->t) {
            s = dpt_set_error(DPT_EINVAL, "evaluate: %s has neither labels nor regression targets (unlabelled data "
                                          "are for prediction only)", d->source[0] ? d->source : "the dataset");
            break;
        }
        if (d->t && loss == DPT_LOSS_TOKEN_CE) {
            if (K % d->t_dim) {
                s = dpt_set_error(DPT_EINVAL, "evaluate: %s has %zu target tokens per example, but the model's %zu "
                                              "outputs are not V logits for each", d->source[0] ? d->source : "the dataset",
                                  d->t_dim, K);
                break;
            }
        } else if (!d->t && loss == DPT_LOSS_TOKEN_CE) {
            s = dpt_set_error(DPT_EINVAL, "evaluate: the token cross-entropy loss needs target tokens, but %s has "
                                          "class labels", d->source[0] ? d->source : "the dataset");
            break;
        } else if (d->t) {
            if (loss != DPT_LOSS_SQUARED || d->t_dim != K) {
                s = dpt_set_error(DPT_EINVAL, "evaluate: %s has %zu regression target%s per example: it needs the "
                                              "squared-error loss and a model with as many outputs (the model has %zu)",
                                  d->source[0] ? d->source : "the dataset", d->t_dim, d->t_dim == 1 ? "" : "s", K);
                break;
            }
        } else if (tg && d->dim != K) {
            s = dpt_set_error(DPT_EINVAL, "evaluate: squared-error loss reconstructs the input, but the model maps "
                                          "%zu inputs to %zu outputs", d->dim, K);
            break;
        }
        size_t pad;
        if (loss == DPT_LOSS_TOKEN_CE)
            s = dpt_loss_tokens_pad(o, bc, d->t_dim, K / d->t_dim, tg, dpt_model_pad_id(m, &pad) ? (long long)pad : -1,
                                    lbuf, NULL);
        else s = dpt_loss(loss, o, bc, K, y, tg, lbuf, NULL);
        if (s != DPT_OK) break;
        for (size_t i = 0; i < bc; i++) {
            lsum += lbuf[i];
            if (!y) continue; /* regression: no accuracy */
            const float *oi = o + i * K;
            int pred = 0;
            if (K == 1)
                pred = oi[0] > 0.0f;
            else
                for (size_t k = 1; k < K; k++)
                    if (oi[k] > oi[pred]) pred = (int)k;
            correct += pred == y[i];
        }
    }
    dpt_free(lbuf);
    if (s != DPT_OK) return s;
    *loss_sum = lsum;
    *n_correct = correct;
    return DPT_OK;
}

dpt_status dpt_evaluate(dpt_model *m, dpt_loss_kind loss, const dpt_dataset *d, double *mean_loss,
                        double *accuracy) {
    DPT_CHECK(m && d && mean_loss && accuracy, DPT_EINVAL, "dpt_evaluate: %s is NULL",
              !m ? "m" : !d ? "d" : !mean_loss ? "mean_loss" : "accuracy");
    DPT_CHECK(d->n > 0, DPT_EINVAL, "dpt_evaluate: the dataset is empty");
    double lsum = 0;
    size_t correct = 0;
    DPT_TRY(dpt_eval_range(m, loss, d, 0, d->n, &lsum, &correct));
    *mean_loss = lsum / (double)d->n;
    *accuracy = d->t ? NAN : (double)correct / (double)d->n;
    return DPT_OK;
}

/* ==== One step ==== */

/* Parameter averaging after the update of step t->step (0-based), De et al. 2022:
 * e <- e + (1 - d)(theta - e), d = ema_decay or, warming up, min(ema_decay, (1 + t)/(10 + t)).
 * In this form a parameter that did not move (a frozen layer) keeps e exactly. */
static void ema_update(dpt_trainer *t) {
    double d = t->cfg.ema_decay;
    if (t->cfg.ema_warmup) {
        const double w = (1.0 + (double)t->step) / (10.0 + (double)t->step);
        if (w < d) d = w;
    }
    const float *th = t->model->theta;
    float *e = t->ema;
    const double a = 1.0 - d;
    for (size_t j = 0; j < t->model->n_params; j++) e[j] = (float)((double)e[j] + a * ((double)th[j] - (double)e[j]));
}

static dpt_status train_step(dpt_trainer *t, double *loss_sum, size_t *batch) {
    size_t b = 0;
    DPT_TRY(dpt_train_feature_cache(t)); /* once per session, before its first step */
    DPT_TRY(dpt_sampler_next(t->sampler, t->idx, &b));
    dpt_algo *a = t->algo;
    /* the average starts at the parameters the first step starts from */
    if (t->ema && t->step == 0) memcpy(t->ema, t->model->theta, t->model->n_params * sizeof *t->ema);
    DPT_TRY(a->begin(a, t, b));
    double ls = 0;
    if (t->dist) {
        /* data parallel: this rank's shards, then the fixed-order reduction (dist.c) */
        DPT_TRY(dpt_dist_accumulate(t, b, &ls, &b));
    } else {
        for (size_t lo = 0; lo < b; lo += t->max_batch) {
            size_t bc = b - lo < t->max_batch ? b - lo : t->max_batch;
            dpt_train_gather(t, t->idx + lo, bc);
            t->chunk_idx = t->idx + lo;
            double part = 0;
            DPT_TRY(a->accumulate(a, t, t->xb, t->tb ? NULL : t->yb, bc, &part));
            ls += part;
        }
    }
    DPT_TRY(a->finish(a, t, b));
    /* --secure over several ranks: each rank's noise stream is OS-seeded (different), so
     * rank 0's noisy update is the one every rank applies (its draw is the only one used). */
    int secure_multi = t->nranks > 1 && t->rng_noise.secure;
    if (secure_multi) DPT_TRY(dpt_comm_bcast(t->model->grad, t->model->n_params * sizeof(float), 0));
    /* The privacy cost of this step is recorded in the ledger in memory before the
     * parameters that depend on it change; it reaches the disk (ledger.json) before any
     * file or callback that carries those parameters (save_checkpoint, publish). */
    if (a->record) DPT_TRY(a->record(a, t, b));
    if (b > 0 || a->is_private) {
        double lr = dpt_schedule_lr(&t->cfg.schedule, t->cfg.optim.lr, t->epoch);
        dpt_status s = t->frozen ? dpt_optim_step_ranges(&t->opt, t->model->theta, t->model->grad, lr,
                                                         t->train_ranges, t->n_train_ranges)
                                 : dpt_optim_step(&t->opt, t->model->theta, t->model->grad, lr);
        if (s == DPT_OK && a->after_update) s = a->after_update(a, t);
        if (s == DPT_OK && a->after_update && secure_multi)
            s = dpt_comm_bcast(t->model->theta, t->model->n_params * sizeof(float), 0);
        if (s != DPT_OK)
            return dpt_error_context(s, "step %" PRIu64 " (epoch %" PRIu64 ")", t->step + 1, t->epoch + 1);
    }
    if (t->ema) ema_update(t);
    t->step++;
    *loss_sum = ls;
    *batch = b;
    return DPT_OK;
}

/* ==== Test hook: faults between saving and publishing ====
 * For tests only (docs/checkpoints.md): DPTRAIN_FAULT=<point>[:<n>][:kill] makes the n-th
 * passage (default the first) through <point> fail with DPT_EIO, or with ":kill" kill the
 * process there (SIGKILL to itself), as a crash or a kill -9 would. The points lie between
 * the writes of a publication: after-ledger (ledger.json saved, checkpoint not),
 * after-checkpoint (both saved, metrics line not written), after-metrics (metrics line
 * written, on_epoch not called). Compiled only into the test builds (DPT_FAULT_INJECTION,
 * CMakeLists.txt): the installed library has no hook. */
static dpt_status fault_point(dpt_trainer *t, const char *point) {
#ifndef DPT_FAULT_INJECTION
    return DPT_OK;
#else
    const char *f = getenv("DPTRAIN_FAULT");
    size_t n = strlen(point);
    if (!f || strncmp(f, point, n) || (f[n] && f[n] != ':')) return DPT_OK;
    unsigned long want = 1;
    const char *rest = f + n;
    if (*rest == ':' && rest[1] >= '0' && rest[1] <= '9') want = strtoul(rest + 1, (char **)&rest, 10);
    if (++t->fault_hits != want) return DPT_OK;
    if (!strcmp(rest, ":kill")) raise(SIGKILL);
    return dpt_set_error(DPT_EIO, "injected fault at %s (DPTRAIN_FAULT, a test hook)", point);
#endif
}

/* ==== Checkpoint state ==== */

/* Numbers in the checkpoint state and metrics read back bit for bit (a resume compares
 * sample_rate and lr with ==; cJSON's printer may lose the last ulp). */
static void json_add_exact(cJSON *o, const char *key, double v) {
    char buf[DPT_DOUBLE_TEXT];
    dpt_format_double(v, buf);
    cJSON_AddRawToObject(o, key, buf);
}

#define json_u64 dpt_json_u64

static int json_double(const cJSON *o, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return 0;
    *out = v->valuedouble;
    return 1;
}

static char *state_json(dpt_trainer *t) {
    cJSON *root = cJSON_CreateObject();
    char buf[80];
    const int priv = dpt_algo_hides_batch_stats(t->algo);
    json_add_exact(root, "version", 1);
    cJSON_AddStringToObject(root, "algorithm", t->algo->name);
    cJSON_AddStringToObject(root, "run_id", t->run_id);
    snprintf(buf, sizeof buf, "%" PRIu64, t->step);
    cJSON_AddStringToObject(root, "step", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, t->epoch);
    cJSON_AddStringToObject(root, "epoch", buf);
    json_add_exact(root, "wall_s", t->wall_s);
    /* A private run keeps no noiseless statistic of its data here (the checkpoint is what
     * gets shared): its loss sums and batch sizes are never accumulated (0). */
    json_add_exact(root, "epoch_loss_sum", priv ? 0.0 : t->epoch_loss_sum);
    snprintf(buf, sizeof buf, "%" PRIu64, priv ? (uint64_t)0 : t->epoch_examples);
    cJSON_AddStringToObject(root, "epoch_examples", buf);
    cJSON_AddStringToObject(root, "data_hmac", t->data_tag);
    if (t->algo->settings) cJSON_AddStringToObject(root, "algorithm_settings", t->algo->settings);
    if (t->algo->state_save) {
        cJSON *as = cJSON_AddObjectToObject(root, "algorithm_state");
        if (!as || t->algo->state_save(t->algo, as) != DPT_OK) {
            cJSON_Delete(root);
            return NULL;
        }
    }
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(cfg, "model", t->cfg.model_spec);
    json_add_exact(cfg, "loss", t->cfg.loss);
    json_add_exact(cfg, "init", t->cfg.init);
    json_add_exact(cfg, "sampler", t->cfg.sampler);
    snprintf(buf, sizeof buf, "%zu", t->cfg.batch_size);
    cJSON_AddStringToObject(cfg, "batch_size", buf);
    json_add_exact(cfg, "sample_rate", t->cfg.sample_rate);
    /* not the seed: it is in the run's secret file (rundir.c), with the streams' state */
    cJSON_AddStringToObject(cfg, "seed_source", t->seed_caller ? "caller" : "os");
    cJSON_AddBoolToObject(cfg, "secure", t->cfg.secure != 0);
    json_add_exact(cfg, "threads", t->threads);
    snprintf(buf, sizeof buf, "%zu", t->shards);
    cJSON_AddStringToObject(cfg, "shards", buf);
    json_add_exact(cfg, "schedule_kind", t->cfg.schedule.kind);
    json_add_exact(cfg, "schedule_gamma", t->cfg.schedule.gamma);
    json_add_exact(cfg, "schedule_every", t->cfg.schedule.every);
    json_add_exact(cfg, "schedule_decays", t->cfg.schedule.decays);
    json_add_exact(cfg, "lr", t->cfg.optim.lr);
    /* written only when used, so checkpoints of runs without them read as before */
    if (t->cfg.ema_decay > 0) {
        json_add_exact(cfg, "ema_decay", t->cfg.ema_decay);
        json_add_exact(cfg, "ema_warmup", t->cfg.ema_warmup);
    }
    if (t->cfg.augment != DPT_AUGMENT_NONE) {
        json_add_exact(cfg, "augment", t->cfg.augment);
        json_add_exact(cfg, "aug_mult", (double)(t->cfg.aug_mult ? t->cfg.aug_mult : 1));
    }
    dpt_sampler_state ss;
    dpt_sampler_get_state(t->sampler, &ss);
    cJSON *sm = cJSON_AddObjectToObject(root, "sampler");
    snprintf(buf, sizeof buf, "%" PRIu64, ss.step);
    cJSON_AddStringToObject(sm, "step", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, ss.epoch);
    cJSON_AddStringToObject(sm, "epoch", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, ss.cursor);
    cJSON_AddStringToObject(sm, "cursor", buf);
    /* the number of rejected Poisson batches is a count over the private data: kept only
     * for non-private runs (it is a diagnostic; sampling does not depend on it) */
    snprintf(buf, sizeof buf, "%" PRIu64, priv ? (uint64_t)0 : ss.rejections);
    cJSON_AddStringToObject(sm, "rejections", buf);
    if (t->ledger) {
        /* as a string: the ledger's own bit-exact, checksummed serialization */
        char *lj = NULL;
        if (dpt_ledger_to_json(t->ledger, &lj) != DPT_OK) {
            cJSON_Delete(root);
            return NULL;
        }
        cJSON_AddStringToObject(root, "ledger", lj);
        free(lj);
    }
    if (t->record) {
        /* the metrics line of this state, published only after this file is saved */
        cJSON_AddStringToObject(root, "record", t->record);
        cJSON_AddStringToObject(root, "record_note", t->record_note);
    }
    if (t->init_note[0]) cJSON_AddStringToObject(root, "initial_params", t->init_note);
    if (t->freeze_list[0]) cJSON_AddStringToObject(root, "frozen_layers", t->freeze_list);
    if (t->run_json) {
        cJSON *run = cJSON_Parse(t->run_json);
        if (run) cJSON_AddItemToObject(root, "run", run);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

dpt_status dpt_trainer_checkpoint_path(const dpt_trainer *t, char *buf, size_t n) {
    DPT_CHECK(t->out_dir[0], DPT_EINVAL, "no run directory (out_dir)");
    int w = snprintf(buf, n, "%s/checkpoint.safetensors", t->out_dir);
    DPT_CHECK(w > 0 && (size_t)w < n, DPT_EINVAL, "out_dir: path too long");
    return DPT_OK;
}

static dpt_status save_checkpoint(dpt_trainer *t) {
    char path[600];
    DPT_TRY(dpt_trainer_checkpoint_path(t, path, sizeof path));
    /* overwrite: the previous run's files go only now, at this run's first write, so a run
     * that fails before it (a bad setting found at the first step, an accountant error)
     * leaves that run as it was */
    if (t->clear_pending) {
        DPT_TRY(dpt_run_dir_clear(t, t->out_dir));
        t->clear_pending = 0;
    }
    /* the secret first: no file that names data_hmac exists without the key, and the
     * streams' state of this step is there before the checkpoint that needs it */
    DPT_TRY(dpt_run_key_save(t));
    if (t->ledger) {
        /* The step's privacy cost reaches the disk before any parameters that depend on it:
         * sidecar first (atomic), then the checkpoint (which carries the same ledger). */
        char lp[600];
        DPT_TRY(ledger_sidecar_path(t, lp, sizeof lp));
        DPT_TRY(dpt_ledger_save(t->ledger, lp));
        DPT_TRY(fault_point(t, "after-ledger"));
    }
    char *js = state_json(t);
    DPT_CHECK(js, DPT_ENOMEM, "checkpoint: out of memory");
    dpt_status s = dpt_checkpoint_save_ema(path, t->model, &t->opt, js, t->ema);
    free(js);
    /* The checkpoint of this step is on disk: the secret keeps this step's streams alone.
     * The earlier state it also held served only a crash before this point; kept, it would
     * let a copy of the run directory taken at that step resume and draw again the noise
     * and batches this run has just used on the steps since, publishing a second model on
     * the same noise (their difference is noiseless; docs/checkpoints.md). */
    if (s == DPT_OK) s = dpt_run_key_commit(t);
    return s;
}

/* New streams (noise and sampling) from a seed drawn from the OS (every rank uses rank
 * 0's), for a resume that cannot continue the run's streams in secret. */
static dpt_status reseed_from_os(dpt_trainer *t) {
    uint64_t os = 0;
    while (os == 0) DPT_TRY(dpt_os_random_u64(&os));
    if (t->nranks > 1) DPT_TRY(dpt_comm_bcast(&os, sizeof os, 0));
    t->cfg.seed = os;
    t->seed_caller = 0;
    if (!t->rng_noise.secure) {
        dpt_rng_free(&t->rng_noise);
        t->rng_noise_live = 0;
        DPT_TRY(dpt_rng_init(&t->rng_noise, os, DPT_STREAM_NOISE));
        t->rng_noise_live = 1;
    }
    if (!t->cfg.secure) {
        const dpt_train_config *c = &t->cfg;
        dpt_sampler *sm = NULL;
        DPT_TRY(dpt_sampler_new(c->sampler, t->train->n, c->batch_size, c->sample_rate, c->min_batch, os, &sm));
        dpt_sampler_free(t->sampler);
        t->sampler = sm;
    }
    return DPT_OK;
}

/* Compares a stored setting with the current one; collects a readable mismatch. */
static void mismatch(char *msg, size_t n, const char *what, const char *was, const char *now) {
    size_t len = strlen(msg);
    snprintf(msg + len, n - len, "%s%s was %s, now %s", len ? "; " : "", what, was, now);
}

/* Continues the privacy ledger: the checkpoint's, or the sidecar's when that records more
 * steps (a crash between the two writes: its extra steps were spent, so they stay
 * counted). Refuses a sidecar of another run (run id), a ledger that records fewer steps
 * than the checkpoint reflects, and a resume whose q, sigma, noise mode or data differ
 * from the ledger's unless allowed (then recorded). `ck_secure`: the checkpoint's run
 * drew secure noise. */
static dpt_status resume_ledger(dpt_trainer *t, const cJSON *root, const char *path, uint64_t step,
                                const char *ck_run_id, int ck_secure) {
    const cJSON *lj = cJSON_GetObjectItemCaseSensitive(root, "ledger");
    DPT_CHECK(cJSON_IsString(lj), DPT_EMISMATCH,
              "%s: cannot resume a private run: the checkpoint holds no privacy ledger", path);
    dpt_ledger *ck = NULL, *side = NULL;
    DPT_TRY(dpt_error_context(dpt_ledger_from_json(lj->valuestring, &ck), "%s: ledger", path));
    char lp[600];
    dpt_status s = ledger_sidecar_path(t, lp, sizeof lp);
    struct stat st;
    if (s == DPT_OK && stat(lp, &st) == 0) s = dpt_ledger_load(lp, &side);
    const char *ck_lid = dpt_ledger_get_meta(ck, "run_id");
    if (s == DPT_OK && ck_run_id && (!ck_lid || strcmp(ck_lid, ck_run_id)))
        s = dpt_set_error(DPT_EMISMATCH, "%s: the ledger inside the checkpoint is of run %s, the checkpoint of run %s",
                          path, ck_lid ? ck_lid : "(none)", ck_run_id);
    if (s == DPT_OK && side) {
        const char *sid = dpt_ledger_get_meta(side, "run_id");
        if ((sid || ck_run_id) && (!sid || !ck_run_id || strcmp(sid, ck_run_id)))
            s = dpt_set_error(DPT_EMISMATCH, "%s belongs to run %s but %s to run %s: refusing to continue a "
                              "ledger with another run's (remove the stray file or use another out_dir)", lp,
                              sid ? sid : "(no run id)", path, ck_run_id ? ck_run_id : "(no run id)");
    }
    if (s != DPT_OK) {
        dpt_ledger_free(ck);
        dpt_ledger_free(side);
        return s;
    }
    dpt_ledger *l = ck;
    if (side && dpt_ledger_steps(side) > dpt_ledger_steps(ck)) l = side;
    dpt_ledger_free(l == ck ? side : ck);
    char allowed[1024] = "";
    if (dpt_ledger_steps(l) < step) {
        s = dpt_set_error(DPT_EMISMATCH, "%s: the privacy ledger records %" PRIu64 " steps but the checkpoint "
                          "reflects %" PRIu64 ": refusing to continue with a ledger that lost steps",
                          path, dpt_ledger_steps(l), step);
        goto fail;
    }
    char q[32], sigma[32], hash[65], msg[1024] = "";
    ledger_run_values(t, q, sigma, hash);
    char *bad = t->cfg.allow_ledger_mismatch ? allowed : msg;
    if (ck_secure != (t->cfg.secure != 0)) {
        /* the accounted sigma follows the noise mode (the secure lattice rounding raises the
         * sensitivity), so a changed mode is reported as such, not as a changed sigma */
        const char *was = dpt_ledger_get_meta(l, "sigma");
        char now_s[160];
        snprintf(now_s, sizeof now_s, "%d (the noise mode: the accounted sigma follows it, was %s, now %s)",
                 t->cfg.secure != 0, was ? was : "?", sigma);
        mismatch(bad, sizeof msg, "secure", ck_secure ? "1" : "0", now_s);
    }
    char lost[160];
    snprintf(lost, sizeof lost, "unknown (the run's secret file was missing; new key, data_hmac %s)", hash);
    const char *keys[3] = {"q", "sigma", "data_hmac"}, *now[3] = {q, sigma, t->key_lost ? lost : hash};
    const char *names[3] = {"sample_rate (q)", "sigma", "training data (data_hmac)"};
    for (int k = 0; k < 3; k++) {
        if (k == 1 && ck_secure != (t->cfg.secure != 0)) continue; /* said above */
        const char *was = dpt_ledger_get_meta(l, keys[k]);
        if (!was || strcmp(was, now[k]) || (k == 2 && t->key_lost))
            mismatch(bad, sizeof msg, names[k], was ? was : "(none)", now[k]);
    }
    if (msg[0]) {
        s = dpt_set_error(DPT_EMISMATCH, "%s: cannot resume: the privacy ledger says %s (set allow_ledger_mismatch "
                          "to continue anyway; it is recorded in the ledger)", path, msg);
        goto fail;
    }
    if (allowed[0]) {
        char key[64];
        snprintf(key, sizeof key, "mismatch_allowed_at_step_%" PRIu64, step);
        if ((s = dpt_ledger_set_meta(l, key, allowed)) != DPT_OK) goto fail;
    }
    dpt_ledger_free(t->ledger);
    t->ledger = l;
    return ledger_set_run_meta(t); /* the settings of the events recorded from now on */
fail:
    dpt_ledger_free(l);
    return s;
}

/* The optimizer settings a resume must keep (the learning rate may change): the
 * checkpoint's, just loaded into t->opt, against the run's. */
static void optim_mismatch(const dpt_trainer *t, char *msg, size_t n) {
    const dpt_optim_config *was = &t->opt.cfg, *now = &t->cfg.optim;
    char a[40], b[40];
    if (was->kind != now->kind)
        mismatch(msg, n, "optim.kind", was->kind == DPT_OPT_ADAM ? "adam" : "sgd",
                 now->kind == DPT_OPT_ADAM ? "adam" : "sgd");
    const struct {
        const char *name;
        double was, now;
    } f[] = {{"optim.momentum", was->momentum, now->momentum}, {"optim.weight_decay", was->weight_decay, now->weight_decay},
             {"optim.beta1", was->beta1, now->beta1},          {"optim.beta2", was->beta2, now->beta2},
             {"optim.eps", was->eps, now->eps}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        if (f[i].was == f[i].now) continue;
        if (i >= 2 && (was->kind != DPT_OPT_ADAM || now->kind != DPT_OPT_ADAM)) continue; /* Adam's only */
        snprintf(a, sizeof a, "%g", f[i].was);
        snprintf(b, sizeof b, "%g", f[i].now);
        mismatch(msg, n, f[i].name, a, b);
    }
}

/* Where metrics.jsonl stands against the checkpoint (rank 0, which has the run
 * directory): refuses lines for steps the checkpoint does not hold (they would be
 * published twice), and notes whether the checkpoint's record still has to be published. */
static dpt_status resume_metrics(dpt_trainer *t, uint64_t ck_step) {
    char mp[600];
    int w = snprintf(mp, sizeof mp, "%s/metrics.jsonl", t->out_dir);
    DPT_CHECK(w > 0 && (size_t)w < sizeof mp, DPT_EINVAL, "out_dir: path too long");
    int found = 0;
    uint64_t last = 0;
    DPT_TRY(dpt_metrics_last_step(mp, &found, &last));
    DPT_CHECK(!found || last <= ck_step, DPT_EMISMATCH,
              "%s records step %" PRIu64 " but the checkpoint holds step %" PRIu64 ": resuming would run and "
              "publish those steps a second time (the files are not of one run, or were written by a dptrain that "
              "published before saving); start a new run (overwrite)", mp, last, ck_step);
    uint64_t rstep = 0;
    if (t->record) {
        cJSON *o = cJSON_Parse(t->record);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "step");
        int ok = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= MAX_RUN_STEPS;
        if (ok) rstep = (uint64_t)v->valuedouble;
        cJSON_Delete(o);
        DPT_CHECK(ok && rstep == ck_step, DPT_EFORMAT, "checkpoint: its record is malformed or not of its step");
    }
    t->republish = t->record && (!found || last < rstep);
    return DPT_OK;
}

static dpt_status resume_local(dpt_trainer *t) {
    char path[600];
    DPT_TRY(dpt_trainer_checkpoint_path(t, path, sizeof path));
    char *js = NULL;
    /* a checkpoint written with parameter averaging holds it (and the raw parameters apart):
     * compared with the run's setting below, before anything of it is used */
    char *peek = NULL;
    DPT_TRY(dpt_checkpoint_peek(path, NULL, &peek));
    cJSON *pr = cJSON_Parse(peek);
    free(peek);
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(pr, "config");
    double ck_ema = 0, ck_warm = 0, ck_aug = 0, ck_mult = 1;
    (void)json_double(pc, "ema_decay", &ck_ema);
    (void)json_double(pc, "ema_warmup", &ck_warm);
    (void)json_double(pc, "augment", &ck_aug);
    (void)json_double(pc, "aug_mult", &ck_mult);
    cJSON_Delete(pr);
    {
        char ca[96], cb[96];
        const double mult = (double)(t->cfg.aug_mult ? t->cfg.aug_mult : 1);
        snprintf(ca, sizeof ca, "ema_decay %.17g warmup %g", ck_ema, ck_warm);
        snprintf(cb, sizeof cb, "ema_decay %.17g warmup %d", t->cfg.ema_decay, t->cfg.ema_warmup);
        DPT_CHECK(ck_ema == t->cfg.ema_decay && ck_warm == (double)t->cfg.ema_warmup, DPT_EMISMATCH,
                  "%s: cannot resume: parameter averaging was %s, now %s", path, ca, cb);
        snprintf(ca, sizeof ca, "augment %g aug_mult %g", ck_aug, ck_aug ? ck_mult : 1.0);
        snprintf(cb, sizeof cb, "augment %d aug_mult %g", t->cfg.augment, t->cfg.augment ? mult : 1.0);
        DPT_CHECK(ck_aug == (double)t->cfg.augment && (!ck_aug || ck_mult == mult), DPT_EMISMATCH,
                  "%s: cannot resume: augmentation was %s, now %s", path, ca, cb);
    }
    DPT_TRY(t->ema ? dpt_checkpoint_load_ema(path, t->model, &t->opt, &js, t->ema)
                   : dpt_checkpoint_load(path, t->model, &t->opt, &js));
    cJSON *root = cJSON_Parse(js);
    free(js);
    DPT_CHECK(root, DPT_EFORMAT, "%s: training state is not valid JSON", path);
    dpt_status s = DPT_OK;
    char msg[2400] = "", a[80], b[80];
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(root, "sampler");
    const cJSON *alg = cJSON_GetObjectItemCaseSensitive(root, "algorithm");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(root, "data_hmac");
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "run_id");
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(root, "record");
    const cJSON *recn = cJSON_GetObjectItemCaseSensitive(root, "record_note");
    const cJSON *aset = cJSON_GetObjectItemCaseSensitive(root, "algorithm_settings");
    const cJSON *ipar = cJSON_GetObjectItemCaseSensitive(root, "initial_params");
    const cJSON *frz = cJSON_GetObjectItemCaseSensitive(root, "frozen_layers");
    uint64_t step, epoch, ex, bs, seed, v_sampler, ss_step, ss_epoch, ss_cursor, ss_rej;
    double wall, lsum, rate, threads, sk, sg, se, loss_k, init_k;
    dpt_sampler_state ss;
    dpt_rng_state ns;
    if (!hash && cJSON_GetObjectItemCaseSensitive(root, "data_sha256")) {
        s = dpt_set_error(DPT_EMISMATCH, "%s: cannot resume: written by an older dptrain, which stored the plain "
                          "SHA-256 of the training data in it and in ledger.json (it identifies the data: publish "
                          "neither file); start a new run (overwrite)", path);
        goto out;
    }
    /* written before the seed and the streams moved to the secret file: they are here */
    const int ck_old = cJSON_IsObject(cfg) && cJSON_GetObjectItemCaseSensitive(cfg, "seed") != NULL;
    seed = 0;
    if (!cJSON_IsObject(cfg) || !cJSON_IsObject(sm) || !cJSON_IsString(alg) || !cJSON_IsString(hash) ||
        !json_u64(root, "step", &step) || !json_u64(root, "epoch", &epoch) || !json_u64(root, "epoch_examples", &ex) ||
        !json_double(root, "wall_s", &wall) || !json_double(root, "epoch_loss_sum", &lsum) ||
        !json_u64(cfg, "batch_size", &bs) || !json_u64(cfg, "sampler", &v_sampler) ||
        !json_double(cfg, "sample_rate", &rate) || !json_double(cfg, "threads", &threads) ||
        !json_double(cfg, "schedule_kind", &sk) || !json_double(cfg, "schedule_gamma", &sg) ||
        !json_double(cfg, "schedule_every", &se) || !json_double(cfg, "loss", &loss_k) ||
        !json_double(cfg, "init", &init_k) || !json_u64(sm, "step", &ss_step) ||
        !json_u64(sm, "epoch", &ss_epoch) || !json_u64(sm, "cursor", &ss_cursor) ||
        !json_u64(sm, "rejections", &ss_rej) ||
        (ck_old && (!json_u64(cfg, "seed", &seed) ||
                    !dpt_rng_state_parse(cJSON_GetObjectItemCaseSensitive(sm, "rng"), &ss.rng) ||
                    !dpt_rng_state_parse(cJSON_GetObjectItemCaseSensitive(sm, "epoch_rng"), &ss.epoch_rng))) ||
        (!ck_old && !cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(cfg, "secure"))) ||
        (rid && (!cJSON_IsString(rid) || strlen(rid->valuestring) != 32)) || (rec && !cJSON_IsString(rec)) ||
        (recn && !cJSON_IsString(recn)) || (aset && !cJSON_IsString(aset)) ||
        (ipar && (!cJSON_IsString(ipar) || strlen(ipar->valuestring) >= sizeof t->init_note)) ||
        (frz && !cJSON_IsString(frz))) {
        s = dpt_set_error(DPT_EFORMAT, "%s: training state is missing fields or has wrong types", path);
        goto out;
    }
    const char *ck_run_id = rid ? rid->valuestring : NULL;
    if (ipar) memcpy(t->init_note, ipar->valuestring, strlen(ipar->valuestring) + 1); /* fits: checked above */
    /* secure runs never save their noise stream (older checkpoints say so by its absence) */
    const int ck_secure = ck_old ? cJSON_GetObjectItemCaseSensitive(root, "noise_rng") == NULL
                                 : cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "secure"));
    if (strcmp(alg->valuestring, t->algo->name)) mismatch(msg, sizeof msg, "algorithm", alg->valuestring, t->algo->name);
    else if (aset && strcmp(aset->valuestring, t->algo->settings ? t->algo->settings : ""))
        mismatch(msg, sizeof msg, "algorithm settings", aset->valuestring,
                 t->algo->settings ? t->algo->settings : "(none)");
    else if (!aset && t->algo->settings)
        /* a warning: DP-ULR's default mode changed (controller -> explicit) in the same
         * version that started recording settings, so the run may be switching modes */
        dpt_trainer_log(t, DPT_LOG_WARN, "%s was written before checkpoints recorded the algorithm's settings, "
                        "so they cannot be checked: the run continues with %s; if it was started with others (for "
                        "DP-ULR, the old default noise mode, the controller), stop and resume it with those", path,
                        t->algo->settings);
    /* With allow_ledger_mismatch a private run may continue on other data or another q;
     * the change is then recorded in the ledger (below), never silently accepted. */
    int may_differ = t->ledger && t->cfg.allow_ledger_mismatch; /* checked against the ledger */
    /* the data are compared under the run's key (rundir.c, "The run key") */
    int have_key = 0;
    if ((s = dpt_run_key_load(t, ck_run_id, &have_key)) != DPT_OK) goto out;
    t->key_lost = !have_key;
    if (!have_key && !may_differ) {
        size_t len = strlen(msg);
        /* ranks other than 0 look only in the copy rank 0 sent them with the checkpoint:
         * where rank 0 looked is in rank 0's message, not in this temporary copy */
        char where[sizeof t->secret_where + 64];
        if (t->rank != 0)
            snprintf(where, sizeof where, "rank 0 sent none with the checkpoint");
        else
            snprintf(where, sizeof where, "looked for %s", t->secret_where);
        snprintf(msg + len, sizeof msg - len, "%sthe run's secret file is missing (%s), so the training "
                 "data cannot be compared with the checkpoint's%s", len ? "; " : "", where,
                 t->ledger ? " (set allow_ledger_mismatch to continue under a new key; it is recorded in the ledger)"
                           : "");
    } else if (!may_differ && strcmp(hash->valuestring, t->data_tag))
        mismatch(msg, sizeof msg, "training data (data_hmac)", hash->valuestring, t->data_tag);
    /* The seed: the secret file's (an older checkpoint's own). Resumed with seed 0 the run
     * continues with its seed; a caller's seed must be the run's. */
    if (!ck_old && have_key && t->secret_version != 2) {
        s = dpt_set_error(DPT_EFORMAT, "%s holds the run key alone (format 1) but %s keeps its random streams "
                          "there: the two files are of different runs", t->secret_path, path);
        goto out;
    }
    const uint64_t run_seed = ck_old ? seed : t->secret_seed;
    const int run_caller = ck_old || t->secret_seed_caller;
    if (t->seed_caller && (ck_old || have_key) && (!run_caller || run_seed != t->cfg.seed)) {
        /* a caller's seed is the caller's to see; an OS seed is never printed */
        if (run_caller) snprintf(a, sizeof a, "%" PRIu64, run_seed);
        else snprintf(a, sizeof a, "drawn from the OS");
        snprintf(b, sizeof b, "%" PRIu64 " (resume with seed 0 to continue with the run's own)", t->cfg.seed);
        mismatch(msg, sizeof msg, "seed", a, b);
    }
    if ((int)v_sampler != (int)t->cfg.sampler || (t->cfg.sampler == DPT_SAMPLER_SHUFFLE && bs != t->cfg.batch_size)) {
        snprintf(a, sizeof a, "kind %d batch %" PRIu64, (int)v_sampler, bs);
        snprintf(b, sizeof b, "kind %d batch %zu", (int)t->cfg.sampler, t->cfg.batch_size);
        mismatch(msg, sizeof msg, "sampler/batch_size", a, b);
    }
    if (!may_differ && rate != t->cfg.sample_rate) {
        snprintf(a, sizeof a, "%.17g", rate);
        snprintf(b, sizeof b, "%.17g", t->cfg.sample_rate);
        mismatch(msg, sizeof msg, "sample_rate", a, b);
    }
    /* the frozen layers kept their values: training them now would be another run */
    if (strcmp(frz ? frz->valuestring : "", t->freeze_list))
        mismatch(msg, sizeof msg, "frozen layers (freeze)", frz && frz->valuestring[0] ? frz->valuestring : "(none)",
                 t->freeze_list[0] ? t->freeze_list : "(none)");
    if ((int)loss_k != (int)t->cfg.loss || (int)init_k != (int)t->cfg.init)
        mismatch(msg, sizeof msg, "loss/init", "different", "as given");
    /* schedule_decays is absent from checkpoints written before exp:GAMMA:DECAYS existed: 0 */
    double sd = 0;
    const cJSON *sdj = cJSON_GetObjectItemCaseSensitive(cfg, "schedule_decays");
    if (sdj && !json_double(cfg, "schedule_decays", &sd)) sd = -1;
    if ((int)sk != (int)t->cfg.schedule.kind || sg != t->cfg.schedule.gamma || (unsigned)se != t->cfg.schedule.every ||
        sd != (double)t->cfg.schedule.decays)
        mismatch(msg, sizeof msg, "schedule", "different", "as given");
    optim_mismatch(t, msg, sizeof msg);
    if (msg[0]) {
        s = dpt_set_error(DPT_EMISMATCH, "%s: cannot resume: %s", path, msg);
        goto out;
    }
    if (t->ledger) {
        if ((s = resume_ledger(t, root, path, step, ck_run_id, ck_secure)) != DPT_OK) goto out;
    } else {
        char lp[600];
        struct stat st;
        if ((s = ledger_sidecar_path(t, lp, sizeof lp)) != DPT_OK) goto out;
        if (stat(lp, &st) == 0) {
            s = dpt_set_error(DPT_EMISMATCH, "%s: cannot resume a non-private run (algorithm %s) beside a privacy "
                              "ledger (%s): the directory mixes two runs", path, t->algo->name, lp);
            goto out;
        }
    }
    /* the checkpoint's run continues: its id (a checkpoint older than run ids gets one now) */
    if (ck_run_id) snprintf(t->run_id, sizeof t->run_id, "%s", ck_run_id);
    else dpt_trainer_log(t, DPT_LOG_NOTE, "%s has no run id (written by an older dptrain): the run continues as run %s",
                         path, t->run_id);
    if (t->ledger && (s = dpt_ledger_set_meta(t->ledger, "run_id", t->run_id)) != DPT_OK) goto out;
    /* the learning rate may change on resume: from the next step on */
    double lr_was;
    if (json_double(cfg, "lr", &lr_was) && lr_was != t->cfg.optim.lr)
        dpt_trainer_log(t, DPT_LOG_NOTE, "resuming with learning rate %g (the checkpoint's run used %g); the new "
                        "rate applies from step %" PRIu64 " on, the optimizer's other state continues",
                        t->cfg.optim.lr, lr_was, step + 1);
    t->opt.cfg.lr = t->cfg.optim.lr;
    /* Shards fix the reduction order: keep the checkpoint's unless given explicitly. */
    uint64_t ck_shards = 1;
    if (cJSON_GetObjectItemCaseSensitive(cfg, "shards") && !json_u64(cfg, "shards", &ck_shards)) {
        s = dpt_set_error(DPT_EFORMAT, "%s: config.shards is malformed", path);
        goto out;
    }
    size_t want = t->cfg.shards ? t->cfg.shards : (size_t)ck_shards;
    if (want != t->shards && (s = dpt_dist_configure(t, want)) != DPT_OK) goto out;
    if (t->cfg.shards && t->cfg.shards != ck_shards && t->rank == 0)
        dpt_trainer_log(t, DPT_LOG_NOTE, "resuming with shards = %zu (the checkpoint used %" PRIu64 "): the sums are "
                        "added in another order, so results differ in the last bits from an uninterrupted run",
                        t->cfg.shards, ck_shards);
    if (t->rank == 0 && t->shards < (size_t)t->nranks)
        dpt_trainer_log(t, DPT_LOG_NOTE, "the run has %zu shards, so ranks %zu..%d own no data and idle (set shards = "
                        "%d to use them; results then differ in the last bits)", t->shards, t->shards,
                        t->nranks - 1, t->nranks);
    if ((int)threads != t->threads && t->rank == 0)
        dpt_trainer_log(t, DPT_LOG_NOTE, "resuming with %d threads (the checkpoint used %d): results are identical "
                        "only for the same thread count", t->threads, (int)threads);
    /* The random streams continue where the checkpoint's step left them: from the secret
     * file, or from an older checkpoint itself. A private run that cannot continue them
     * secretly (the secret file lost, or an older checkpoint, which holds its seed in the
     * open) goes on with streams drawn from the OS: never a replay of noise or batches. */
    int have_noise = 0;
    const int fresh = t->ledger && (ck_old || !have_key);
    if (fresh) {
        if ((s = reseed_from_os(t)) != DPT_OK) goto out;
        dpt_sampler_state now;
        dpt_sampler_get_state(t->sampler, &now);
        ss.rng = now.rng;
        ss.epoch_rng = now.epoch_rng;
        dpt_trainer_log(t, DPT_LOG_NOTE, "%s: the run continues with new random streams drawn from the OS (%s)", path,
                        ck_old ? "the checkpoint was written by an older dptrain and holds the run's seed: do not "
                                 "publish it" : "the run's secret file is lost");
    } else if (ck_old) {
        const cJSON *nj = cJSON_GetObjectItemCaseSensitive(root, "noise_rng");
        if (nj && !dpt_rng_state_parse(nj, &ns)) {
            s = dpt_set_error(DPT_EFORMAT, "%s: noise_rng state is malformed", path);
            goto out;
        }
        have_noise = nj != NULL;
        t->cfg.seed = seed;
        t->seed_caller = 1;
    } else if (have_key) {
        if ((s = dpt_run_secret_streams(t, step, &ss, &ns, &have_noise)) != DPT_OK) goto out;
        t->cfg.seed = t->secret_seed;
        t->seed_caller = t->secret_seed_caller;
    }
    ss.step = ss_step;
    ss.epoch = ss_epoch;
    ss.cursor = ss_cursor;
    ss.rejections = ss_rej;
    if ((s = dpt_sampler_set_state(t->sampler, &ss)) != DPT_OK) {
        s = dpt_error_context(s, "%s", path);
        goto out;
    }
    if (have_noise && !t->rng_noise.secure && (s = dpt_rng_set_state(&t->rng_noise, &ns)) != DPT_OK) goto out;
    if (t->ledger && (s = ledger_set_seed_meta(t)) != DPT_OK) goto out;
    free(t->record);
    t->record = NULL;
    t->record_note[0] = 0;
    if (rec) {
        if (!(t->record = strdup(rec->valuestring))) {
            s = dpt_set_error(DPT_ENOMEM, "%s: out of memory", path);
            goto out;
        }
        if (recn) snprintf(t->record_note, sizeof t->record_note, "%s", recn->valuestring);
    }
    if (t->algo->state_load) {
        /* the algorithm's state of this step (DP-SGD's adaptive clip C_t) */
        const cJSON *as = cJSON_GetObjectItemCaseSensitive(root, "algorithm_state");
        if (!cJSON_IsObject(as)) {
            s = dpt_set_error(DPT_EFORMAT, "%s: the checkpoint has no algorithm_state (algorithm %s needs it to "
                              "continue)", path, t->algo->name);
            goto out;
        }
        if ((s = t->algo->state_load(t->algo, as)) != DPT_OK) {
            s = dpt_error_context(s, "%s", path);
            goto out;
        }
    }
    if (t->rank == 0 && (s = resume_metrics(t, step)) != DPT_OK) goto out;
    t->step = step;
    t->epoch = epoch;
    t->wall_s = wall;
    t->epoch_loss_sum = lsum;
    t->epoch_examples = ex;
    t->resumed = 1;
out:
    cJSON_Delete(root);
    return s;
}

dpt_status dpt_trainer_resume(dpt_trainer *t) {
    DPT_CHECK(t, DPT_EINVAL, "dpt_trainer_resume: the trainer is NULL");
    DPT_CHECK(!t->running, DPT_EINVAL, "dpt_trainer_resume: called while the trainer runs (from one of its callbacks)");
    DPT_CHECK(!t->resumed && !t->dir_ready, DPT_EINVAL,
              "dpt_trainer_resume: call it once, before dpt_trainer_run");
    return dpt_dist_resume(t, resume_local);
}

/* ==== Publication ====
 * The order every epoch (and a stop inside one) follows: compute the result, keep its
 * metrics line as the trainer's record, save ledger.json then the checkpoint (which
 * stores the record), append the line to metrics.jsonl, call on_epoch. Nothing computed
 * from the steps leaves the process before the ledger holding them is on disk; a crash
 * after the save leaves the record in the checkpoint, which the resumed run publishes
 * instead of running the steps again. */

static void result_empty(dpt_epoch_result *r) {
    memset(r, 0, sizeof *r);
    r->train_loss = r->test_loss = r->test_accuracy = r->test_mse = r->wall_s = r->lr = NAN;
    r->epsilon = r->epsilon_pld = r->epsilon_rdp = r->delta = NAN;
    r->accountant = -1;
    r->test_loss_ema = r->test_accuracy_ema = NAN;
}

/* r->privacy_label: the labels a line showing r must carry (dpt_epoch_result) */
static void result_label(const dpt_trainer *t, dpt_epoch_result *r) {
    char *b = r->privacy_label;
    const size_t cap = sizeof r->privacy_label;
    if (t->ledger) {
        dpt_ledger_label(t->ledger, 0, b, cap);
        return;
    }
    dpt_privacy_note_label(t->algo->privacy_note, t->excludes, b, cap);
}

static dpt_status compute_result(dpt_trainer *t, int partial, size_t in_epoch, size_t spe, dpt_epoch_result *r) {
    result_empty(r);
    result_label(t, r);
    r->epoch = partial ? t->epoch + 1 : t->epoch;
    r->step = t->step;
    r->partial = partial;
    r->steps_in_epoch = in_epoch;
    r->steps_per_epoch = spe;
    /* private runs (and DP mechanisms without an accountant): the mean loss of the sampled
     * batches is a noiseless statistic of the private data that no accountant covers, so it
     * is not released (docs/dpsgd.md) */
    if (!dpt_algo_hides_batch_stats(t->algo) && t->epoch_examples)
        r->train_loss = t->epoch_loss_sum / (double)t->epoch_examples;
    r->lr = dpt_schedule_lr(&t->cfg.schedule, t->cfg.optim.lr, r->epoch - 1);
    if (t->test) {
        if (t->dist) DPT_TRY(dpt_dist_evaluate(t, t->test, &r->test_loss, &r->test_accuracy));
        else if (t->fc_test) { /* the fixed or frozen trunk's test features, computed once */
            double ls = 0;
            size_t correct = 0;
            DPT_TRY(dpt_eval_range_from(t->model, t->cfg.loss, t->test, t->fc_test, t->fc_layer, 0, t->test->n, &ls,
                                        &correct));
            r->test_loss = ls / (double)t->test->n;
            r->test_accuracy = t->test->t ? NAN : (double)correct / (double)t->test->n;
        } else {
            DPT_TRY(dpt_evaluate(t->model, t->cfg.loss, t->test, &r->test_loss, &r->test_accuracy));
        }
        if (t->test->t && t->cfg.loss == DPT_LOSS_SQUARED) r->test_mse = 2.0 * r->test_loss / (double)t->test->t_dim;
        if (t->ema) {
            /* the same test set under the average: swapped in, evaluated, swapped back */
            const size_t P = t->model->n_params;
            memcpy(t->ema_swap, t->model->theta, P * sizeof *t->ema_swap);
            memcpy(t->model->theta, t->ema, P * sizeof *t->ema);
            dpt_status se = t->dist ? dpt_dist_evaluate(t, t->test, &r->test_loss_ema, &r->test_accuracy_ema)
                                    : dpt_evaluate(t->model, t->cfg.loss, t->test, &r->test_loss_ema,
                                                   &r->test_accuracy_ema);
            memcpy(t->model->theta, t->ema_swap, P * sizeof *t->ema_swap);
            DPT_TRY(se);
        }
    }
    r->wall_s = t->wall_s;
    if (t->ledger) {
        /* both accountants on exactly the recorded events; the headline is the default
         * accountant's, the one calibration and the budget used */
        r->delta = t->cfg.delta;
        dpt_accountant which;
        DPT_TRY(dpt_ledger_epsilon_default(t->ledger, t->cfg.delta, DPT_CONV_BALLE, &r->epsilon, &which,
                                           &r->epsilon_rdp, &r->epsilon_pld));
        r->accountant = (int)which;
    }
    return DPT_OK;
}

/* The metrics.jsonl line of r (malloc'd); the algorithm adds its own fields and note. */
static dpt_status record_line(dpt_trainer *t, dpt_epoch_result *r, char **line) {
    cJSON *o = cJSON_CreateObject();
    DPT_CHECK(o, DPT_ENOMEM, "metrics: out of memory");
    json_add_exact(o, "epoch", (double)r->epoch);
    json_add_exact(o, "step", (double)r->step);
    if (!dpt_algo_hides_batch_stats(t->algo)) json_add_exact(o, "train_loss", r->train_loss);
    if (t->test) {
        if (t->cfg.eval_split) cJSON_AddStringToObject(o, "eval_split", t->cfg.eval_split);
        json_add_exact(o, "test_loss", r->test_loss);
        if (t->test->t && t->cfg.loss == DPT_LOSS_SQUARED) json_add_exact(o, "test_mse", r->test_mse); /* no accuracy */
        else if (t->test->t) json_add_exact(o, "test_perplexity", exp(r->test_loss)); /* token-ce: exp(mean loss) */
        else json_add_exact(o, "test_accuracy", r->test_accuracy);
        if (t->ema) {
            json_add_exact(o, "test_loss_ema", r->test_loss_ema);
            if (!t->test->t) json_add_exact(o, "test_accuracy_ema", r->test_accuracy_ema);
        }
    }
    json_add_exact(o, "lr", r->lr);
    json_add_exact(o, "wall_s", r->wall_s);
    if (r->partial) {
        cJSON_AddBoolToObject(o, "partial", 1);
        json_add_exact(o, "epoch_step", (double)r->steps_in_epoch);
        json_add_exact(o, "epoch_steps", (double)r->steps_per_epoch);
    }
    if (!t->ledger && t->algo->privacy_note) cJSON_AddStringToObject(o, "privacy", t->algo->privacy_note);
    if (t->excludes[0]) cJSON_AddStringToObject(o, "privacy_excludes", t->excludes);
    if (t->ledger) {
        cJSON_AddStringToObject(o, "seed_source", t->seed_caller ? "caller" : "os");
        json_add_exact(o, "epsilon", r->epsilon);
        cJSON_AddStringToObject(o, "accountant", r->accountant == DPT_ACCT_PLD ? "pld" : "rdp");
        json_add_exact(o, "epsilon_rdp", r->epsilon_rdp);
        if (isfinite(r->epsilon_pld)) json_add_exact(o, "epsilon_pld", r->epsilon_pld);
        json_add_exact(o, "delta", r->delta);
    }
    if (t->algo->epoch_metrics) {
        dpt_status se = t->algo->epoch_metrics(t->algo, t, o, r->note, sizeof r->note);
        if (se != DPT_OK) {
            cJSON_Delete(o);
            return se;
        }
    }
    *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    DPT_CHECK(*line, DPT_ENOMEM, "metrics: out of memory");
    return DPT_OK;
}

/* The result a record line describes (the inverse of record_line, for resume). */
static dpt_status record_parse(const char *line, const char *note, dpt_epoch_result *r) {
    result_empty(r);
    cJSON *o = cJSON_Parse(line);
    uint64_t e = 0, st = 0, es = 0, en = 0;
    int ok = cJSON_IsObject(o) && json_u64(o, "epoch", &e) && json_u64(o, "step", &st);
    if (ok) {
        static const char *keys[] = {"train_loss", "test_loss", "test_accuracy", "test_mse", "lr", "wall_s",
                                     "epsilon", "epsilon_pld", "epsilon_rdp", "delta", "test_loss_ema",
                                     "test_accuracy_ema"};
        double *dst[] = {&r->train_loss, &r->test_loss, &r->test_accuracy, &r->test_mse, &r->lr, &r->wall_s,
                         &r->epsilon, &r->epsilon_pld, &r->epsilon_rdp, &r->delta, &r->test_loss_ema,
                         &r->test_accuracy_ema};
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) (void)json_double(o, keys[i], dst[i]);
        /* records before the headline became the default accountant: "epsilon" was RDP */
        const cJSON *acct = cJSON_GetObjectItemCaseSensitive(o, "accountant");
        if (cJSON_IsString(acct)) r->accountant = !strcmp(acct->valuestring, "pld") ? DPT_ACCT_PLD : DPT_ACCT_RDP;
        else if (isfinite(r->epsilon)) {
            r->accountant = DPT_ACCT_RDP;
            r->epsilon_rdp = r->epsilon;
        }
        r->partial = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "partial"));
        if (r->partial) ok = json_u64(o, "epoch_step", &es) && json_u64(o, "epoch_steps", &en);
    }
    cJSON_Delete(o);
    DPT_CHECK(ok, DPT_EFORMAT, "checkpoint: its metrics record is malformed");
    r->epoch = e;
    r->step = st;
    r->steps_in_epoch = (size_t)es;
    r->steps_per_epoch = (size_t)en;
    r->from_checkpoint = 1;
    snprintf(r->note, sizeof r->note, "%s", note);
    return DPT_OK;
}

/* metrics.jsonl is opened at the first publication, so a run that fails before its first
 * result leaves nothing but the lock file in a fresh directory */
static dpt_status metrics_append(dpt_trainer *t, const char *line) {
    if (!t->out_dir[0]) return DPT_OK;
    if (!t->metrics_open) {
        char path[600];
        snprintf(path, sizeof path, "%s/metrics.jsonl", t->out_dir);
        DPT_TRY(dpt_metrics_open(&t->metrics, path, 1));
        t->metrics_open = 1;
    }
    return dpt_metrics_write(&t->metrics, line);
}

static int call_on_epoch(dpt_trainer *t, const dpt_epoch_result *r) {
    return t->rank == 0 && t->cfg.on_epoch && t->cfg.on_epoch(t->cfg.user, r) != 0;
}

static dpt_status publish(dpt_trainer *t, int partial, size_t in_epoch, size_t spe, dpt_epoch_result *r, int *stop) {
    /* a step can overflow the parameters from finite gradients (a huge learning rate):
     * never save or report such a model. Nothing of these steps leaves the process (no
     * parameters, no metrics), so the run directory stays at its last checkpoint, ledger
     * included, from which a resume with a lower learning rate continues. */
    if (!dpt_all_finite(t->model->theta, t->model->n_params))
        return dpt_set_error(DPT_ERANGE, "step %" PRIu64 ": the parameters are not finite (NaN or Inf): the model "
                             "diverged; lower the learning rate (dpt_optim_config.lr)", t->step);
    DPT_TRY(compute_result(t, partial, in_epoch, spe, r));
    /* an ended epoch's loss sums are spent: reset before the checkpoint, which a resume at
     * this boundary reads (else the next epoch's mean would include this one's batches) */
    if (!partial) t->epoch_loss_sum = 0, t->epoch_examples = 0;
    char *line = NULL;
    DPT_TRY(record_line(t, r, &line));
    free(t->record);
    t->record = line;
    snprintf(t->record_note, sizeof t->record_note, "%s", r->note);
    if (t->out_dir[0]) DPT_TRY(save_checkpoint(t));
    DPT_TRY(fault_point(t, "after-checkpoint"));
    DPT_TRY(metrics_append(t, line));
    DPT_TRY(fault_point(t, "after-metrics"));
    *stop = call_on_epoch(t, r);
    return DPT_OK;
}

/* Rank 0, at the first run: a fresh run gets an empty directory (or, told to overwrite,
 * removes the previous run's files at its first write: save_checkpoint); a resumed run
 * first publishes the checkpoint's record when metrics.jsonl lacks it (resume_metrics
 * decided). */
static dpt_status prepare_run_dir(dpt_trainer *t, int *stop) {
    *stop = 0;
    if (!t->out_dir[0] || t->dir_ready) return DPT_OK;
    if (!t->resumed) {
        size_t n = 0;
        char names[256];
        DPT_TRY(dpt_run_dir_inspect(t->out_dir, &n, names, sizeof names));
        if (n) {
            DPT_CHECK(t->cfg.overwrite, DPT_EINVAL, "out_dir %s is not empty (it holds %s%s): resume the run in it "
                      "or set overwrite (dpt_train_config.overwrite) to replace that run (its files are removed at its first write)", t->out_dir, names,
                      n > 6 ? ", ..." : "");
            t->clear_pending = 1;
        }
        t->key_saved = 0; /* a fresh run's files start with its own key */
    }
    t->dir_ready = 1;
    if (t->republish) {
        dpt_epoch_result r;
        DPT_TRY(record_parse(t->record, t->record_note, &r));
        result_label(t, &r);
        DPT_TRY(metrics_append(t, t->record));
        t->republish = 0;
        dpt_trainer_log(t, DPT_LOG_NOTE, "published the result of step %" PRIu64 " from the checkpoint (saved, not "
                        "yet in metrics.jsonl when the run stopped)", r.step);
        *stop = call_on_epoch(t, &r);
    }
    return DPT_OK;
}

/* rank 0's value of *flag on every rank (data parallel) */
static dpt_status share_flag(dpt_trainer *t, int *flag) {
    if (t->nranks > 1) DPT_TRY(dpt_comm_bcast(flag, sizeof *flag, 0));
    return DPT_OK;
}

/* ==== The loop ==== */

static dpt_status run_loop(dpt_trainer *t, dpt_epoch_result *last);

dpt_status dpt_trainer_run(dpt_trainer *t, dpt_epoch_result *last) {
    DPT_CHECK(t, DPT_EINVAL, "dpt_trainer_run: the trainer is NULL (did dpt_trainer_new fail?)");
    /* a callback (on_step, on_epoch, log) calling back in would run the loop inside itself */
    DPT_CHECK(!t->running, DPT_EINVAL, "dpt_trainer_run: called while the trainer runs (from one of its callbacks)");
    t->running = 1;
    /* OpenBLAS (the OpenMP build) keeps its thread count in the calling thread's OpenMP
     * state: set on the thread that runs the steps, not only on the one that made the trainer
     * (Python makes it on its main thread and runs it on a worker, whose default count is
     * all cores: at threads 1 the steps then ran 5-10x slower, idle BLAS threads spinning) */
    dpt_threads_set_blas(t->threads);
    dpt_status s = run_loop(t, last);
    t->running = 0;
    return s;
}

static dpt_status run_loop(dpt_trainer *t, dpt_epoch_result *last) {
    t->stop_reason = DPT_STOP_NONE;
    t->budget_stopped = 0;
    dpt_epoch_result r;
    result_empty(&r);
    if (last) *last = r;
    int cb_stop = 0, ok = 1;
    dpt_status s = DPT_OK;
    if (t->rank == 0) ok = (s = prepare_run_dir(t, &cb_stop)) == DPT_OK;
    DPT_TRY(share_flag(t, &ok));
    if (!ok) return t->rank == 0 ? s : dpt_set_error(DPT_EIO, "rank %d: rank 0 could not prepare the run directory",
                                                   t->rank);
    DPT_TRY(share_flag(t, &cb_stop));
    if (t->step == 0 && !t->resumed) DPT_TRY(dpt_dist_check_start(t));
    dpt_train_feature_cache_check(t);
    if (t->record) {
        DPT_TRY(record_parse(t->record, t->record_note, &r));
        result_label(t, &r);
    }
    const size_t spe = dpt_sampler_steps_per_epoch(t->sampler);
    /* Budget: the last step index this run may take without exceeding target_epsilon */
    uint64_t budget_end = UINT64_MAX;
    if (t->ledger && t->cfg.target_epsilon > 0) {
        uint64_t planned = t->cfg.epochs * (uint64_t)spe, left = 0; /* <= 2^53 (validate_config) */
        uint64_t cap = planned > t->step ? planned - t->step : 0;
        if (t->cfg.max_steps) {
            uint64_t to_max = t->cfg.max_steps > t->step ? t->cfg.max_steps - t->step : 0;
            if (to_max < cap) cap = to_max;
        }
        DPT_TRY(dpt_budget_steps_left(ledger_eps_after, t, t->cfg.target_epsilon, cap, &left));
        budget_end = t->step + left;
    }
    const int priv = dpt_algo_hides_batch_stats(t->algo);
    uint64_t unsaved = 0; /* steps since the last publication */
    for (;;) {
        if (t->epoch >= t->cfg.epochs) {
            t->stop_reason = DPT_STOP_DONE;
            break;
        }
        if (t->cfg.max_steps && t->step >= t->cfg.max_steps) {
            t->stop_reason = DPT_STOP_MAX_STEPS;
            break;
        }
        if (cb_stop) {
            t->stop_reason = DPT_STOP_CALLBACK;
            break;
        }
        if (t->step >= budget_end) {
            /* stop BEFORE the step whose release would exceed the target */
            DPT_TRY(ledger_eps_after(t, 1, &t->budget_eps_next));
            t->budget_stopped = 1;
            t->stop_reason = DPT_STOP_BUDGET;
            break;
        }
        double ls = 0, ts = dpt_now();
        size_t b = 0;
        DPT_TRY(train_step(t, &ls, &b));
        t->wall_s += dpt_now() - ts;
        unsaved++;
        if (!priv) {
            t->epoch_loss_sum += ls;
            t->epoch_examples += b;
        }
        const int ended = dpt_sampler_epoch_ended(t->sampler);
        if (t->rank == 0 && t->cfg.on_step) {
            dpt_step_info info;
            info.step = t->step;
            info.epoch = t->epoch;
            info.step_in_epoch = ended ? spe : (size_t)(t->step % spe);
            info.steps_per_epoch = spe;
            info.wall_s = t->wall_s;
            info.loss = !priv && t->epoch_examples ? t->epoch_loss_sum / (double)t->epoch_examples : NAN;
            info.batch = priv ? 0 : b;
            cb_stop = t->cfg.on_step(t->cfg.user, &info) != 0;
        }
        if (ended) {
            int e_stop = 0;
            t->epoch++;
            DPT_TRY(publish(t, 0, spe, spe, &r, &e_stop)); /* also resets the epoch's loss sums */
            unsaved = 0;
            cb_stop |= e_stop;
        }
        DPT_TRY(share_flag(t, &cb_stop));
    }
    int ignored = 0;
    if (unsaved) {
        /* stopped inside an epoch: its steps are saved and published like an epoch's */
        DPT_TRY(publish(t, 1, (size_t)(t->step % spe), spe, &r, &ignored));
    }
    /* a fresh run that took no step (e.g. no budget for one) publishes nothing: no
     * checkpoint (which would hold the statistics released before training, DP
     * normalization or DP-PCA, with no model trained on them), no ledger, no metrics */
    if (t->stop_reason == DPT_STOP_BUDGET) {
        double now_eps = 0;
        DPT_TRY(ledger_eps_after(t, 0, &now_eps));
        dpt_trainer_log(t, DPT_LOG_INFO, "privacy budget: stopping before step %" PRIu64 ": it would raise epsilon "
                        "from %.4g to %.4g > target_epsilon %g (delta %g)", t->step + 1, now_eps,
                        t->budget_eps_next, t->cfg.target_epsilon, t->cfg.delta);
    }
    if (last) *last = r;
    return DPT_OK;
}
