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
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train_internal.h"

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
    c.seed = 1;
    c.threads = 0;
    c.delta = 1e-5;
    return c;
}

/* ==== Construction ==== */

/* Buffers are sized for a declared maximum batch; a larger Poisson batch is processed in
 * chunks. For Poisson the bound is the mean plus 6 standard deviations, so chunking is
 * rare but handled. */
static size_t max_batch_for(const dpt_train_config *c, size_t n, double q) {
    size_t mb;
    switch (c->sampler) {
    case DPT_SAMPLER_SHUFFLE: mb = c->batch_size; break;
    case DPT_SAMPLER_FULL: mb = 1024; break;
    default: {
        double mean = q * (double)n;
        mb = (size_t)ceil(mean + 6.0 * sqrt(mean) + 8.0);
    }
    }
    if (mb > n) mb = n;
    return mb ? mb : 1;
}

static dpt_status validate_config(const dpt_train_config *c, const dpt_dataset *train) {
    DPT_CHECK(c->model_spec && *c->model_spec, DPT_EINVAL, "--model: empty model spec");
    DPT_CHECK(c->epochs >= 1, DPT_EINVAL, "--epochs must be >= 1");
    DPT_CHECK(train && train->n >= 1, DPT_EINVAL, "training set is empty");
    if (c->sampler == DPT_SAMPLER_SHUFFLE)
        DPT_CHECK(c->batch_size >= 1 && c->batch_size <= train->n, DPT_EINVAL,
                  "--batch-size must be in [1, %zu] (the training set size), got %zu", train->n, c->batch_size);
    if (c->sampler == DPT_SAMPLER_POISSON || c->sampler == DPT_SAMPLER_POISSON_REJECT)
        DPT_CHECK(c->sample_rate > 0 && c->sample_rate <= 1, DPT_EINVAL,
                  "--sample-rate must be in (0, 1], got %g", c->sample_rate);
    if (c->sampler == DPT_SAMPLER_POISSON_REJECT)
        DPT_CHECK(c->min_batch >= 1 && (double)c->min_batch <= c->sample_rate * (double)train->n * (1 + 1e-12),
                  DPT_EINVAL, "--min-batch N_B = %zu must be in [1, qN] = [1, %.6g]", c->min_batch,
                  c->sample_rate * (double)train->n);
    DPT_TRY(dpt_optim_validate(&c->optim));
    return DPT_OK;
}

/* ==== Privacy ledger ==== */

/* The settings the ledger's events depend on: a resume compares them (see resume). */
static void ledger_run_values(const dpt_trainer *t, char q[32], char sigma[32], char hash[65]) {
    snprintf(q, 32, "%.17g", t->cfg.sample_rate);
    snprintf(sigma, 32, "%.17g", t->algo->sigma);
    dpt_hex(t->data_hash, 32, hash);
}

static dpt_status ledger_set_run_meta(dpt_trainer *t) {
    char q[32], sigma[32], hash[65];
    ledger_run_values(t, q, sigma, hash);
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
    return dpt_ledger_set_meta(t->ledger, "data_sha256", hash);
}

static dpt_status ledger_sidecar_path(const dpt_trainer *t, char *buf, size_t n) {
    int w = snprintf(buf, n, "%s/ledger.json", t->out_dir);
    DPT_CHECK(w > 0 && (size_t)w < n, DPT_EINVAL, "--out: path too long");
    return DPT_OK;
}

/* epsilon (RDP, Balle conversion) of the ledger plus `more` steps of this run's events
 * (the algorithm's add_events, else SGM(q, sigma)). */
static dpt_status ledger_eps_after(const dpt_trainer *t, uint64_t more, double *eps) {
    if (!more) return dpt_ledger_epsilon(t->ledger, t->cfg.delta, DPT_ACCT_RDP, DPT_CONV_BALLE, eps);
    char *js = NULL;
    DPT_TRY(dpt_ledger_to_json(t->ledger, &js));
    dpt_ledger *l = NULL;
    dpt_status s = dpt_ledger_from_json(js, &l);
    free(js);
    if (s == DPT_OK)
        s = t->algo->add_events ? t->algo->add_events(t->algo, t, l, more)
                                : dpt_ledger_add_sgm(l, t->cfg.sample_rate, t->algo->sigma, more);
    if (s == DPT_OK) s = dpt_ledger_epsilon(l, t->cfg.delta, DPT_ACCT_RDP, DPT_CONV_BALLE, eps);
    dpt_ledger_free(l);
    return s;
}

/* Largest number of further steps whose epsilon stays <= target (exponential search,
 * then bisection: O(log T) accountant calls once per run, none per step). */
static dpt_status budget_steps_left(const dpt_trainer *t, uint64_t cap, uint64_t *left) {
    double e;
    DPT_TRY(ledger_eps_after(t, 0, &e));
    if (e > t->cfg.target_epsilon) {
        *left = 0;
        return DPT_OK;
    }
    uint64_t lo = 0, hi = 1; /* eps(lo) <= target */
    for (;;) {
        if (hi > cap) {
            DPT_TRY(ledger_eps_after(t, cap, &e));
            if (e <= t->cfg.target_epsilon) {
                *left = cap;
                return DPT_OK;
            }
            break;
        }
        DPT_TRY(ledger_eps_after(t, hi, &e));
        if (e > t->cfg.target_epsilon) break;
        lo = hi;
        hi *= 2;
    }
    if (hi > cap) hi = cap;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        DPT_TRY(ledger_eps_after(t, mid, &e));
        if (e <= t->cfg.target_epsilon) lo = mid;
        else hi = mid;
    }
    *left = lo;
    return DPT_OK;
}

dpt_status dpt_trainer_new(const dpt_train_config *cfg, const dpt_dataset *train,
                           const dpt_dataset *test, dpt_algo *algo, dpt_trainer **out) {
    *out = NULL;
    dpt_status s = validate_config(cfg, train);
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
    t->algo = algo;
    t->train = train;
    t->test = test;
    snprintf(t->model_spec, sizeof t->model_spec, "%s", cfg->model_spec);
    t->cfg.model_spec = t->model_spec;
    if (cfg->out_dir) {
        snprintf(t->out_dir, sizeof t->out_dir, "%s", cfg->out_dir);
        t->cfg.out_dir = t->out_dir;
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

    if ((s = dpt_model_new(cfg->model_spec, t->max_batch, t->threads, &t->model)) != DPT_OK) goto fail;
    if (t->model->in_dim != train->dim) {
        s = dpt_set_error(DPT_EINVAL, "--model '%s' takes %zu inputs but the data has %zu features per example",
                          cfg->model_spec, t->model->in_dim, train->dim);
        goto fail;
    }
    if (cfg->loss == DPT_LOSS_SOFTMAX_CE && (int)t->model->out_dim < train->n_classes) {
        s = dpt_set_error(DPT_EINVAL, "--model '%s' has %zu outputs but the data has %d classes",
                          cfg->model_spec, t->model->out_dim, train->n_classes);
        goto fail;
    }
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
    t->xb = dpt_alloc(t->max_batch * train->dim, sizeof *t->xb, "batch features");
    t->yb = dpt_alloc(t->max_batch, sizeof *t->yb, "batch labels");
    if (!t->idx || !t->xb || !t->yb) {
        s = DPT_ENOMEM;
        goto fail;
    }
    if ((s = dpt_dataset_hash(train, t->data_hash)) != DPT_OK) goto fail;
    if (algo && algo->bind && (s = algo->bind(algo, t)) != DPT_OK) goto fail;
    if (algo && algo->is_private) {
        if (!(cfg->delta > 0 && cfg->delta < 1)) {
            s = dpt_set_error(DPT_EINVAL, "--delta must be in (0, 1), got %g", cfg->delta);
            goto fail;
        }
        if ((s = dpt_ledger_new(&t->ledger)) != DPT_OK) goto fail;
        if ((s = ledger_set_run_meta(t)) != DPT_OK) goto fail;
    }
    if ((s = dpt_dist_configure(t, cfg->shards)) != DPT_OK) goto fail;
    if (t->rank != 0) {
        /* rank 0 alone writes the ledger, checkpoints and metrics, and talks to the user */
        t->out_dir[0] = 0;
        t->cfg.out_dir = NULL;
        t->cfg.quiet = 1;
        t->cfg.progress = 0;
    }
    if ((s = dpt_dist_check_agree(t)) != DPT_OK) goto fail;
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
    dpt_free(t->idx);
    dpt_free(t->xb);
    dpt_free(t->yb);
    free(t->run_json);
    dpt_ledger_free(t->ledger);
    dpt_dist_free(t);
    free(t);
}

dpt_model *dpt_trainer_model(dpt_trainer *t) { return t->model; }
const dpt_train_config *dpt_trainer_config(const dpt_trainer *t) { return &t->cfg; }
dpt_rng *dpt_trainer_noise_rng(dpt_trainer *t) { return &t->rng_noise; }
size_t dpt_trainer_dataset_size(const dpt_trainer *t) { return t->train->n; }
uint64_t dpt_trainer_step(const dpt_trainer *t) { return t->step; }
size_t dpt_trainer_shards(const dpt_trainer *t) { return t->shards; }
const struct dpt_ledger *dpt_trainer_ledger(const dpt_trainer *t) { return t->ledger; }
int dpt_trainer_budget_stopped(const dpt_trainer *t, double *eps_next) {
    if (eps_next) *eps_next = t->budget_eps_next;
    return t->budget_stopped;
}

/* ==== Evaluation ==== */

dpt_status dpt_eval_range(dpt_model *m, dpt_loss_kind loss, const dpt_dataset *d, size_t from, size_t to,
                          double *loss_sum, size_t *n_correct) {
    DPT_CHECK(d->dim == m->in_dim, DPT_EINVAL, "evaluate: model takes %zu inputs, data has %zu", m->in_dim, d->dim);
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
        const int32_t *y = d->y + lo;
        if ((s = dpt_model_forward(m, x, bc)) != DPT_OK) break;
        const float *o = dpt_model_output(m);
        /* squared error: an autoencoder, the targets are the inputs */
        const float *tg = loss == DPT_LOSS_SQUARED ? x : NULL;
        if (tg && d->dim != K) {
            s = dpt_set_error(DPT_EINVAL, "evaluate: squared-error loss reconstructs the input, but the model maps "
                                          "%zu inputs to %zu outputs", d->dim, K);
            break;
        }
        if ((s = dpt_loss(loss, o, bc, K, y, tg, lbuf, NULL)) != DPT_OK) break;
        for (size_t i = 0; i < bc; i++) {
            lsum += lbuf[i];
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
    DPT_CHECK(d && d->n > 0, DPT_EINVAL, "evaluate: empty dataset");
    double lsum = 0;
    size_t correct = 0;
    DPT_TRY(dpt_eval_range(m, loss, d, 0, d->n, &lsum, &correct));
    *mean_loss = lsum / (double)d->n;
    *accuracy = (double)correct / (double)d->n;
    return DPT_OK;
}

/* ==== One step ==== */

static dpt_status train_step(dpt_trainer *t, double *loss_sum, size_t *batch) {
    size_t b = 0;
    DPT_TRY(dpt_sampler_next(t->sampler, t->idx, &b));
    dpt_algo *a = t->algo;
    DPT_TRY(a->begin(a, t, b));
    double ls = 0;
    if (t->dist) {
        /* data parallel: this rank's shards, then the fixed-order reduction (dist.c) */
        DPT_TRY(dpt_dist_accumulate(t, b, &ls, &b));
    } else {
        for (size_t lo = 0; lo < b; lo += t->max_batch) {
            size_t bc = b - lo < t->max_batch ? b - lo : t->max_batch;
            dpt_dataset_gather(t->train, t->idx + lo, bc, t->xb, t->yb);
            double part = 0;
            DPT_TRY(a->accumulate(a, t, t->xb, t->yb, bc, &part));
            ls += part;
        }
    }
    DPT_TRY(a->finish(a, t, b));
    /* --secure over several ranks: each rank's noise stream is OS-seeded (different), so
     * rank 0's noisy update is the one every rank applies (its draw is the only one used). */
    int secure_multi = t->nranks > 1 && t->rng_noise.secure;
    if (secure_multi) DPT_TRY(dpt_comm_bcast(t->model->grad, t->model->n_params * sizeof(float), 0));
    /* The privacy cost of this step is recorded (and, for private algorithms, persisted)
     * before the parameters that depend on it change. */
    if (a->record) DPT_TRY(a->record(a, t, b));
    if (b > 0 || a->is_private) {
        double lr = dpt_schedule_lr(&t->cfg.schedule, t->cfg.optim.lr, t->epoch);
        dpt_status s = dpt_optim_step(&t->opt, t->model->theta, t->model->grad, lr);
        if (s == DPT_OK && a->after_update) s = a->after_update(a, t);
        if (s == DPT_OK && a->after_update && secure_multi)
            s = dpt_comm_bcast(t->model->theta, t->model->n_params * sizeof(float), 0);
        if (s != DPT_OK)
            return dpt_error_context(s, "step %" PRIu64 " (epoch %" PRIu64 ")", t->step + 1, t->epoch + 1);
    }
    t->step++;
    *loss_sum = ls;
    *batch = b;
    return DPT_OK;
}

/* ==== Progress ==== */

static void fmt_duration(double s, char *buf, size_t n) {
    if (!isfinite(s) || s < 0) s = 0;
    unsigned long v = (unsigned long)(s + 0.5);
    if (v >= 3600)
        snprintf(buf, n, "%lu:%02lu:%02lu", v / 3600, (v / 60) % 60, v % 60);
    else
        snprintf(buf, n, "%02lu:%02lu", v / 60, v % 60);
}

static void progress_bar(dpt_trainer *t, size_t step_in_epoch, size_t steps, double loss, double ex_per_s,
                         double eta) {
    char eta_s[32];
    fmt_duration(eta, eta_s, sizeof eta_s);
    int width = 24, filled = steps ? (int)((double)width * step_in_epoch / steps) : width;
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\repoch %" PRIu64 "/%" PRIu64 " [%s] step %zu/%zu  loss %.4f  %.0f ex/s  ETA %s ",
            t->epoch + 1, t->cfg.epochs, bar, step_in_epoch, steps, loss, ex_per_s, eta_s);
    fflush(stderr);
}

/* ==== Checkpoint state ==== */

static cJSON *rng_state_json(const dpt_rng_state *s) {
    cJSON *o = cJSON_CreateObject();
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, s->seed);
    cJSON_AddStringToObject(o, "seed", buf);
    cJSON_AddNumberToObject(o, "stream", s->stream_id);
    snprintf(buf, sizeof buf, "%" PRIu64, s->substreams);
    cJSON_AddStringToObject(o, "substreams", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, s->block);
    cJSON_AddStringToObject(o, "block", buf);
    cJSON_AddNumberToObject(o, "pos", s->pos);
    return o;
}

static int json_u64(const cJSON *o, const char *key, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(v)) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v->valuestring, &end, 10);
        if (*end || errno || v->valuestring[0] == '-' || !v->valuestring[0]) return 0;
        *out = x;
        return 1;
    }
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0 &&
        v->valuedouble == floor(v->valuedouble)) {
        *out = (uint64_t)v->valuedouble;
        return 1;
    }
    return 0;
}

static int json_double(const cJSON *o, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return 0;
    *out = v->valuedouble;
    return 1;
}

static int rng_state_parse(const cJSON *o, dpt_rng_state *s) {
    uint64_t stream = 0, pos = 0;
    memset(s, 0, sizeof *s);
    if (!cJSON_IsObject(o) || !json_u64(o, "seed", &s->seed) || !json_u64(o, "stream", &stream) ||
        !json_u64(o, "substreams", &s->substreams) || !json_u64(o, "block", &s->block) || !json_u64(o, "pos", &pos))
        return 0;
    s->stream_id = (uint32_t)stream;
    s->pos = (uint32_t)pos;
    return 1;
}

static char *state_json(dpt_trainer *t) {
    cJSON *root = cJSON_CreateObject();
    char buf[80];
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "algorithm", t->algo->name);
    snprintf(buf, sizeof buf, "%" PRIu64, t->step);
    cJSON_AddStringToObject(root, "step", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, t->epoch);
    cJSON_AddStringToObject(root, "epoch", buf);
    cJSON_AddNumberToObject(root, "wall_s", t->wall_s);
    cJSON_AddNumberToObject(root, "epoch_loss_sum", t->epoch_loss_sum);
    snprintf(buf, sizeof buf, "%" PRIu64, t->epoch_examples);
    cJSON_AddStringToObject(root, "epoch_examples", buf);
    char hex[65];
    dpt_hex(t->data_hash, 32, hex);
    cJSON_AddStringToObject(root, "data_sha256", hex);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(cfg, "model", t->cfg.model_spec);
    cJSON_AddNumberToObject(cfg, "loss", t->cfg.loss);
    cJSON_AddNumberToObject(cfg, "init", t->cfg.init);
    cJSON_AddNumberToObject(cfg, "sampler", t->cfg.sampler);
    snprintf(buf, sizeof buf, "%zu", t->cfg.batch_size);
    cJSON_AddStringToObject(cfg, "batch_size", buf);
    cJSON_AddNumberToObject(cfg, "sample_rate", t->cfg.sample_rate);
    snprintf(buf, sizeof buf, "%" PRIu64, t->cfg.seed);
    cJSON_AddStringToObject(cfg, "seed", buf);
    cJSON_AddNumberToObject(cfg, "threads", t->threads);
    snprintf(buf, sizeof buf, "%zu", t->shards);
    cJSON_AddStringToObject(cfg, "shards", buf);
    cJSON_AddNumberToObject(cfg, "schedule_kind", t->cfg.schedule.kind);
    cJSON_AddNumberToObject(cfg, "schedule_gamma", t->cfg.schedule.gamma);
    cJSON_AddNumberToObject(cfg, "schedule_every", t->cfg.schedule.every);
    cJSON_AddNumberToObject(cfg, "lr", t->cfg.optim.lr);
    dpt_sampler_state ss;
    dpt_sampler_get_state(t->sampler, &ss);
    cJSON *sm = cJSON_AddObjectToObject(root, "sampler");
    snprintf(buf, sizeof buf, "%" PRIu64, ss.step);
    cJSON_AddStringToObject(sm, "step", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, ss.epoch);
    cJSON_AddStringToObject(sm, "epoch", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, ss.cursor);
    cJSON_AddStringToObject(sm, "cursor", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, ss.rejections);
    cJSON_AddStringToObject(sm, "rejections", buf);
    cJSON_AddItemToObject(sm, "rng", rng_state_json(&ss.rng));
    cJSON_AddItemToObject(sm, "epoch_rng", rng_state_json(&ss.epoch_rng));
    dpt_rng_state ns;
    dpt_rng_get_state(&t->rng_noise, &ns);
    if (!t->rng_noise.secure) cJSON_AddItemToObject(root, "noise_rng", rng_state_json(&ns));
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
    if (t->run_json) {
        cJSON *run = cJSON_Parse(t->run_json);
        if (run) cJSON_AddItemToObject(root, "run", run);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

dpt_status dpt_trainer_checkpoint_path(const dpt_trainer *t, char *buf, size_t n) {
    DPT_CHECK(t->out_dir[0], DPT_EINVAL, "no run directory (--out)");
    int w = snprintf(buf, n, "%s/checkpoint.safetensors", t->out_dir);
    DPT_CHECK(w > 0 && (size_t)w < n, DPT_EINVAL, "--out: path too long");
    return DPT_OK;
}

static dpt_status save_checkpoint(dpt_trainer *t) {
    char path[600];
    DPT_TRY(dpt_trainer_checkpoint_path(t, path, sizeof path));
    if (t->ledger) {
        /* The step's privacy cost reaches the disk before any parameters that depend on it:
         * sidecar first (atomic), then the checkpoint (which carries the same ledger). */
        char lp[600];
        DPT_TRY(ledger_sidecar_path(t, lp, sizeof lp));
        DPT_TRY(dpt_ledger_save(t->ledger, lp));
    }
    char *js = state_json(t);
    DPT_CHECK(js, DPT_ENOMEM, "checkpoint: out of memory");
    dpt_status s = dpt_checkpoint_save(path, t->model, &t->opt, js);
    free(js);
    return s;
}

/* Compares a stored setting with the current one; collects a readable mismatch. */
static void mismatch(char *msg, size_t n, const char *what, const char *was, const char *now) {
    size_t len = strlen(msg);
    snprintf(msg + len, n - len, "%s%s was %s, now %s", len ? "; " : "", what, was, now);
}

/* Continues the privacy ledger: the checkpoint's, or the sidecar's when that records more
 * steps (a crash between the two writes: its extra steps were spent, so they stay
 * counted). Refuses a ledger that records fewer steps than the checkpoint reflects, and a
 * resume whose q, sigma or data differ from the ledger's unless allowed (then recorded). */
static dpt_status resume_ledger(dpt_trainer *t, const cJSON *root, const char *path, uint64_t step) {
    const cJSON *lj = cJSON_GetObjectItemCaseSensitive(root, "ledger");
    DPT_CHECK(cJSON_IsString(lj), DPT_EMISMATCH,
              "%s: cannot resume a private run: the checkpoint holds no privacy ledger", path);
    dpt_ledger *ck = NULL, *side = NULL;
    DPT_TRY(dpt_error_context(dpt_ledger_from_json(lj->valuestring, &ck), "%s: ledger", path));
    char lp[600];
    dpt_status s = ledger_sidecar_path(t, lp, sizeof lp);
    struct stat st;
    if (s == DPT_OK && stat(lp, &st) == 0) s = dpt_ledger_load(lp, &side);
    if (s != DPT_OK) {
        dpt_ledger_free(ck);
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
    const char *keys[3] = {"q", "sigma", "data_sha256"}, *now[3] = {q, sigma, hash};
    const char *flags[3] = {"--sample-rate (q)", "--sigma", "training data (sha256)"};
    for (int k = 0; k < 3; k++) {
        const char *was = dpt_ledger_get_meta(l, keys[k]);
        if (!was || strcmp(was, now[k]))
            mismatch(t->cfg.allow_ledger_mismatch ? allowed : msg, sizeof msg, flags[k], was ? was : "(none)", now[k]);
    }
    if (msg[0]) {
        s = dpt_set_error(DPT_EMISMATCH, "%s: cannot resume: the privacy ledger says %s (use "
                          "--allow-ledger-mismatch to continue anyway; it is recorded in the ledger)", path, msg);
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

static dpt_status resume_local(dpt_trainer *t) {
    char path[600];
    DPT_TRY(dpt_trainer_checkpoint_path(t, path, sizeof path));
    char *js = NULL;
    DPT_TRY(dpt_checkpoint_load(path, t->model, &t->opt, &js));
    cJSON *root = cJSON_Parse(js);
    free(js);
    DPT_CHECK(root, DPT_EFORMAT, "%s: training state is not valid JSON", path);
    dpt_status s = DPT_OK;
    char msg[1024] = "", a[80], b[80];
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(root, "sampler");
    const cJSON *alg = cJSON_GetObjectItemCaseSensitive(root, "algorithm");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(root, "data_sha256");
    uint64_t step, epoch, ex, bs, seed, v_sampler, ss_step, ss_epoch, ss_cursor, ss_rej;
    double wall, lsum, rate, threads, sk, sg, se, loss_k, init_k;
    dpt_sampler_state ss;
    dpt_rng_state ns;
    if (!cJSON_IsObject(cfg) || !cJSON_IsObject(sm) || !cJSON_IsString(alg) || !cJSON_IsString(hash) ||
        !json_u64(root, "step", &step) || !json_u64(root, "epoch", &epoch) || !json_u64(root, "epoch_examples", &ex) ||
        !json_double(root, "wall_s", &wall) || !json_double(root, "epoch_loss_sum", &lsum) ||
        !json_u64(cfg, "batch_size", &bs) || !json_u64(cfg, "seed", &seed) || !json_u64(cfg, "sampler", &v_sampler) ||
        !json_double(cfg, "sample_rate", &rate) || !json_double(cfg, "threads", &threads) ||
        !json_double(cfg, "schedule_kind", &sk) || !json_double(cfg, "schedule_gamma", &sg) ||
        !json_double(cfg, "schedule_every", &se) || !json_double(cfg, "loss", &loss_k) ||
        !json_double(cfg, "init", &init_k) || !json_u64(sm, "step", &ss_step) ||
        !json_u64(sm, "epoch", &ss_epoch) || !json_u64(sm, "cursor", &ss_cursor) ||
        !json_u64(sm, "rejections", &ss_rej) ||
        !rng_state_parse(cJSON_GetObjectItemCaseSensitive(sm, "rng"), &ss.rng) ||
        !rng_state_parse(cJSON_GetObjectItemCaseSensitive(sm, "epoch_rng"), &ss.epoch_rng)) {
        s = dpt_set_error(DPT_EFORMAT, "%s: training state is missing fields or has wrong types", path);
        goto out;
    }
    char hex[65];
    dpt_hex(t->data_hash, 32, hex);
    if (strcmp(alg->valuestring, t->algo->name)) mismatch(msg, sizeof msg, "algorithm", alg->valuestring, t->algo->name);
    /* With --allow-ledger-mismatch a private run may continue on other data or another q;
     * the change is then recorded in the ledger (below), never silently accepted. */
    int may_differ = t->ledger && t->cfg.allow_ledger_mismatch; /* checked against the ledger */
    if (!may_differ && strcmp(hash->valuestring, hex))
        mismatch(msg, sizeof msg, "training data (sha256)", hash->valuestring, hex);
    if (seed != t->cfg.seed) {
        snprintf(a, sizeof a, "%" PRIu64, seed);
        snprintf(b, sizeof b, "%" PRIu64, t->cfg.seed);
        mismatch(msg, sizeof msg, "--seed", a, b);
    }
    if ((int)v_sampler != (int)t->cfg.sampler || (t->cfg.sampler == DPT_SAMPLER_SHUFFLE && bs != t->cfg.batch_size)) {
        snprintf(a, sizeof a, "kind %d batch %" PRIu64, (int)v_sampler, bs);
        snprintf(b, sizeof b, "kind %d batch %zu", (int)t->cfg.sampler, t->cfg.batch_size);
        mismatch(msg, sizeof msg, "sampling", a, b);
    }
    if (!may_differ && rate != t->cfg.sample_rate) {
        snprintf(a, sizeof a, "%.17g", rate);
        snprintf(b, sizeof b, "%.17g", t->cfg.sample_rate);
        mismatch(msg, sizeof msg, "--sample-rate", a, b);
    }
    if ((int)loss_k != (int)t->cfg.loss || (int)init_k != (int)t->cfg.init)
        mismatch(msg, sizeof msg, "loss/init", "different", "as given");
    if ((int)sk != (int)t->cfg.schedule.kind || sg != t->cfg.schedule.gamma || (unsigned)se != t->cfg.schedule.every)
        mismatch(msg, sizeof msg, "--lr-schedule", "different", "as given");
    double lr_was;
    if (json_double(cfg, "lr", &lr_was) && lr_was != t->cfg.optim.lr && !t->cfg.quiet && !msg[0])
        fprintf(stderr, "dptrain: note: resuming with learning rate %g (the checkpoint's run used %g); the new "
                        "rate applies from step %" PRIu64 " on, the optimizer's other state continues\n",
                t->cfg.optim.lr, lr_was, step + 1);
    if (msg[0]) {
        s = dpt_set_error(DPT_EMISMATCH, "%s: cannot resume: %s", path, msg);
        goto out;
    }
    if (t->ledger && (s = resume_ledger(t, root, path, step)) != DPT_OK) goto out;
    /* Shards fix the reduction order: keep the checkpoint's unless given explicitly. */
    uint64_t ck_shards = 1;
    if (cJSON_GetObjectItemCaseSensitive(cfg, "shards") && !json_u64(cfg, "shards", &ck_shards)) {
        s = dpt_set_error(DPT_EFORMAT, "%s: config.shards is malformed", path);
        goto out;
    }
    size_t want = t->cfg.shards ? t->cfg.shards : (size_t)ck_shards;
    if (want != t->shards && (s = dpt_dist_configure(t, want)) != DPT_OK) goto out;
    if (t->cfg.shards && t->cfg.shards != ck_shards && t->rank == 0)
        fprintf(stderr, "dptrain: note: resuming with --shards %zu (checkpoint used %" PRIu64 "): the sums are "
                        "added in another order, so results differ in the last bits from an uninterrupted run\n",
                t->cfg.shards, ck_shards);
    if (t->rank == 0 && t->shards < (size_t)t->nranks)
        fprintf(stderr, "dptrain: note: the run has %zu shards, so ranks %zu..%d own no data and idle (give "
                        "--shards %d to use them; results then differ in the last bits)\n",
                t->shards, t->shards, t->nranks - 1, t->nranks);
    if ((int)threads != t->threads && t->rank == 0)
        fprintf(stderr, "dptrain: note: resuming with %d threads (checkpoint used %d): results are "
                        "identical only for the same thread count\n", t->threads, (int)threads);
    ss.step = ss_step;
    ss.epoch = ss_epoch;
    ss.cursor = ss_cursor;
    ss.rejections = ss_rej;
    if ((s = dpt_sampler_set_state(t->sampler, &ss)) != DPT_OK) {
        s = dpt_error_context(s, "%s", path);
        goto out;
    }
    const cJSON *nj = cJSON_GetObjectItemCaseSensitive(root, "noise_rng");
    if (nj) {
        if (!rng_state_parse(nj, &ns)) {
            s = dpt_set_error(DPT_EFORMAT, "%s: noise_rng state is malformed", path);
            goto out;
        }
        if ((s = dpt_rng_set_state(&t->rng_noise, &ns)) != DPT_OK) goto out;
    }
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

dpt_status dpt_trainer_resume(dpt_trainer *t) { return dpt_dist_resume(t, resume_local); }

/* ==== The loop ==== */

static dpt_status open_run_dir(dpt_trainer *t) {
    if (!t->out_dir[0]) return DPT_OK;
    if (mkdir(t->out_dir, 0755) != 0 && errno != EEXIST)
        return dpt_set_error(DPT_EIO, "--out %s: cannot create directory: %s", t->out_dir, strerror(errno));
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", t->out_dir);
    DPT_TRY(dpt_metrics_open(&t->metrics, path, t->resumed));
    t->metrics_open = 1;
    return DPT_OK;
}

static dpt_status end_of_epoch(dpt_trainer *t, dpt_epoch_result *r) {
    memset(r, 0, sizeof *r);
    r->epoch = t->epoch;
    r->step = t->step;
    r->train_loss = t->epoch_examples ? t->epoch_loss_sum / (double)t->epoch_examples : NAN;
    r->test_loss = NAN;
    r->test_accuracy = NAN;
    r->lr = dpt_schedule_lr(&t->cfg.schedule, t->cfg.optim.lr, t->epoch - 1);
    if (t->test) {
        if (t->dist) DPT_TRY(dpt_dist_evaluate(t, t->test, &r->test_loss, &r->test_accuracy));
        else DPT_TRY(dpt_evaluate(t->model, t->cfg.loss, t->test, &r->test_loss, &r->test_accuracy));
    }
    r->wall_s = t->wall_s;
    double eps = NAN, eps_pld = NAN;
    if (t->ledger) {
        /* both accountants on exactly the recorded Poisson-sampled events */
        DPT_TRY(dpt_ledger_epsilon(t->ledger, t->cfg.delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &eps));
        if (dpt_ledger_pld_applies(t->ledger))
            DPT_TRY(dpt_ledger_epsilon(t->ledger, t->cfg.delta, DPT_ACCT_PLD, DPT_CONV_BALLE, &eps_pld));
    }
    char extra[256] = "";
    if (!t->metrics_open && t->algo->epoch_metrics)
        DPT_TRY(t->algo->epoch_metrics(t->algo, t, NULL, extra, sizeof extra));
    if (t->metrics_open) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "epoch", (double)r->epoch);
        cJSON_AddNumberToObject(o, "step", (double)r->step);
        cJSON_AddNumberToObject(o, "train_loss", r->train_loss);
        if (t->test) {
            cJSON_AddNumberToObject(o, "test_loss", r->test_loss);
            cJSON_AddNumberToObject(o, "test_accuracy", r->test_accuracy);
        }
        cJSON_AddNumberToObject(o, "lr", r->lr);
        cJSON_AddNumberToObject(o, "wall_s", r->wall_s);
        if (!t->ledger && t->algo->privacy_note) cJSON_AddStringToObject(o, "privacy", t->algo->privacy_note);
        if (t->excludes[0]) cJSON_AddStringToObject(o, "privacy_excludes", t->excludes);
        if (t->ledger) {
            cJSON_AddNumberToObject(o, "epsilon", eps);
            if (isfinite(eps_pld)) cJSON_AddNumberToObject(o, "epsilon_pld", eps_pld);
            cJSON_AddNumberToObject(o, "delta", t->cfg.delta);
        }
        if (t->algo->epoch_metrics) {
            dpt_status se = t->algo->epoch_metrics(t->algo, t, o, extra, sizeof extra);
            if (se != DPT_OK) {
                cJSON_Delete(o);
                return se;
            }
        }
        char *line = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        DPT_CHECK(line, DPT_ENOMEM, "metrics: out of memory");
        dpt_status s = dpt_metrics_write(&t->metrics, line);
        free(line);
        DPT_TRY(s);
    }
    if (!t->cfg.quiet) {
        if (t->cfg.progress) fprintf(stderr, "\r\033[K");
        char epsb[352] = "";
        if (t->ledger) snprintf(epsb, sizeof epsb, "  epsilon %.4g (delta %g)", eps, t->cfg.delta);
        if (extra[0]) snprintf(epsb + strlen(epsb), sizeof epsb - strlen(epsb), "  %s", extra);
        if (t->test)
            fprintf(stderr, "epoch %" PRIu64 "/%" PRIu64 "  step %" PRIu64 "  train loss %.4f  test loss %.4f  "
                            "test acc %.2f%%%s  %.1fs\n", r->epoch, t->cfg.epochs, r->step, r->train_loss,
                    r->test_loss, 100.0 * r->test_accuracy, epsb, r->wall_s);
        else
            fprintf(stderr, "epoch %" PRIu64 "/%" PRIu64 "  step %" PRIu64 "  train loss %.4f%s  %.1fs\n", r->epoch,
                    t->cfg.epochs, r->step, r->train_loss, epsb, r->wall_s);
    }
    return DPT_OK;
}

dpt_status dpt_trainer_run(dpt_trainer *t, dpt_epoch_result *last) {
    DPT_TRY(open_run_dir(t));
    size_t steps = dpt_sampler_steps_per_epoch(t->sampler);
    dpt_epoch_result r;
    memset(&r, 0, sizeof r);
    r.test_accuracy = NAN;
    int stopped = 0;
    /* Budget: the last step index this run may take without exceeding target_epsilon */
    uint64_t budget_end = UINT64_MAX;
    t->budget_stopped = 0;
    if (t->ledger && t->cfg.target_epsilon > 0) {
        uint64_t planned = t->cfg.epochs * (uint64_t)steps, left = 0;
        uint64_t cap = planned > t->step ? planned - t->step : 0;
        if (t->cfg.max_steps) {
            uint64_t to_max = t->cfg.max_steps > t->step ? t->cfg.max_steps - t->step : 0;
            if (to_max < cap) cap = to_max;
        }
        DPT_TRY(budget_steps_left(t, cap, &left));
        budget_end = t->step + left;
    }
    while (t->epoch < t->cfg.epochs && !stopped) {
        double t0 = dpt_now(), last_draw = 0;
        size_t ex_this_run = 0, steps_here = 0;
        do {
            if (t->step >= budget_end) {
                /* stop BEFORE the step whose release would exceed the target */
                DPT_TRY(ledger_eps_after(t, 1, &t->budget_eps_next));
                t->budget_stopped = 1;
                stopped = 1;
                if (!t->cfg.quiet) {
                    double now_eps = 0;
                    DPT_TRY(ledger_eps_after(t, 0, &now_eps));
                    if (t->cfg.progress) fprintf(stderr, "\r\033[K");
                    fprintf(stderr, "dptrain: privacy budget: stopping before step %" PRIu64 ": it would raise "
                                    "epsilon from %.4g to %.4g > --target-epsilon %g (delta %g)\n", t->step + 1,
                            now_eps, t->budget_eps_next, t->cfg.target_epsilon, t->cfg.delta);
                }
                break;
            }
            steps_here++;
            double ls = 0;
            size_t b = 0;
            double ts = dpt_now();
            DPT_TRY(train_step(t, &ls, &b));
            t->wall_s += dpt_now() - ts;
            t->epoch_loss_sum += ls;
            t->epoch_examples += b;
            ex_this_run += b;
            size_t in_epoch = (size_t)(t->step % steps ? t->step % steps : steps);
            if (dpt_sampler_epoch_ended(t->sampler)) in_epoch = steps;
            double now = dpt_now();
            if (t->cfg.progress && !t->cfg.quiet && (now - last_draw > 0.1 || in_epoch == steps)) {
                double el = now - t0, rate = el > 0 ? ex_this_run / el : 0;
                double per_step = in_epoch ? el / (double)in_epoch : 0;
                double eta = per_step * (double)(steps - in_epoch + (t->cfg.epochs - t->epoch - 1) * steps);
                progress_bar(t, in_epoch, steps,
                             t->epoch_examples ? t->epoch_loss_sum / (double)t->epoch_examples : 0, rate, eta);
                last_draw = now;
            }
            if (t->cfg.max_steps && t->step >= t->cfg.max_steps) stopped = 1;
        } while (!dpt_sampler_epoch_ended(t->sampler) && !stopped);
        if (steps_here && dpt_sampler_epoch_ended(t->sampler)) {
            t->epoch++;
            DPT_TRY(end_of_epoch(t, &r));
            t->epoch_loss_sum = 0;
            t->epoch_examples = 0;
        }
        if (t->out_dir[0]) DPT_TRY(save_checkpoint(t));
    }
    if (t->cfg.progress && !t->cfg.quiet) fprintf(stderr, "\r\033[K");
    if (last) *last = r;
    return DPT_OK;
}
