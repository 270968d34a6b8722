/* Data preparation shared by `dptrain train`, `dptrain eval` and `dptrain audit`, and the
 * privacy rules of its normalization (run_data.h, docs/data.md). */
#include "run_data.h"

#include <cjson/cJSON.h>
#include <dptrain/accounting.h>
#include <dptrain/comm.h>
#include <dptrain/io.h>
#include <dptrain/privacy.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_util.h"

#define DP_LABEL "dp-normalize"
#define UNACCOUNTED_NOTE \
    "normalization statistics fitted on the training data without noise (--normalize-unaccounted)"

/* ==== The --normalize kinds ==== */

typedef enum {
    NK_NONE,   /* no normalization */
    NK_PUBLIC, /* the dataset's published constants */
    NK_AFFINE, /* the caller's constants */
    NK_FIT,    /* statistics of the training split, no noise */
    NK_DP      /* DP statistics of the training split */
} norm_class;

typedef struct {
    norm_class cls;
    int mode;           /* NK_FIT, NK_DP: DPT_NORM_SCALAR / PER_CHANNEL / PER_FEATURE */
    float shift, scale; /* NK_AFFINE */
} norm_kind;

static const char *const SOURCE[] = {"none", "public", "fixed", "training-data", "dp"};

static int is_csv(const char *dataset) { return dataset && !strncmp(dataset, "csv:", 4); }
/* token ids as features (fortunes-*): no published constants, and nothing to scale */
static int is_text(const char *dataset) { return dataset && !strncmp(dataset, "fortunes-", 9); }

/* "affine:SHIFT:SCALE" -> shift, scale (finite, scale > 0). */
static dpt_status parse_affine(const char *s, float *shift, float *scale) {
    const char *p = s + strlen("affine:");
    char *end;
    double a = strtod(p, &end);
    if (end == p || *end != ':') goto bad;
    p = end + 1;
    double b = strtod(p, &end);
    if (end == p || *end) goto bad;
    if (!(a == a && a > -1e30 && a < 1e30) || !(b > 0 && b < 1e30))
        return dpt_set_error(DPT_EINVAL, "--normalize %s: SHIFT must be finite and SCALE > 0", s);
    *shift = (float)a;
    *scale = (float)b;
    return DPT_OK;
bad:
    return dpt_set_error(DPT_EINVAL, "--normalize: expected affine:SHIFT:SCALE (two numbers), got '%s'", s);
}

static dpt_status parse_kind(const char *s, norm_kind *k) {
    static const struct {
        const char *name;
        norm_class cls;
        int mode;
    } T[] = {
        {"none", NK_NONE, 0},
        {"public", NK_PUBLIC, 0},
        {"scalar", NK_FIT, DPT_NORM_SCALAR},
        {"channel", NK_FIT, DPT_NORM_PER_CHANNEL},
        {"feature", NK_FIT, DPT_NORM_PER_FEATURE},
        {"dp-scalar", NK_DP, DPT_NORM_SCALAR},
        {"dp-channel", NK_DP, DPT_NORM_PER_CHANNEL},
        {"dp-feature", NK_DP, DPT_NORM_PER_FEATURE},
    };
    memset(k, 0, sizeof *k);
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(s, T[i].name)) {
            k->cls = T[i].cls;
            k->mode = T[i].mode;
            return DPT_OK;
        }
    if (!strncmp(s, "affine:", 7)) {
        k->cls = NK_AFFINE;
        return parse_affine(s, &k->shift, &k->scale);
    }
    return dpt_set_error(DPT_EINVAL, "--normalize: expected auto | none | public | scalar | channel | feature | "
                                     "dp-scalar | dp-channel | dp-feature | affine:SHIFT:SCALE, got '%s'", s);
}

/* --normalize auto: no statistic of the training data for a private algorithm */
static const char *resolve(const cli_data_opts *o) {
    if (strcmp(o->normalize, "auto")) return o->normalize;
    if (is_text(o->dataset)) return "none"; /* an embedding layer reads the ids as they are */
    if (!o->private_) return "scalar";
    return is_csv(o->dataset) ? "none" : "public";
}

static int per_feature(const char *kind) { return !strcmp(kind, "feature") || !strcmp(kind, "dp-feature"); }

int cli_norm_check(const cli_data_opts *o) {
    const char *r = resolve(o);
    norm_kind k;
    if (parse_kind(r, &k) != DPT_OK) return cli_error("%s", dpt_last_error());
    const int dp = k.cls == NK_DP;
    if (!dp && (o->norm_sigma_seen || o->norm_clip_seen))
        return cli_error("%s: only with --normalize dp-scalar | dp-channel | dp-feature (got --normalize %s)",
                         o->norm_sigma_seen ? "--normalize-sigma" : "--normalize-clip", r);
    if (k.cls == NK_PUBLIC && is_csv(o->dataset))
        return cli_error("--normalize public: csv data has no published constants; use none, affine:SHIFT:SCALE "
                         "or a DP fit (dp-scalar | dp-feature)");
    if (k.cls == NK_PUBLIC && is_text(o->dataset))
        return cli_error("--normalize public: token ids (--dataset %s) have no published constants; use none (the "
                         "default for token ids) or affine:SHIFT:SCALE", o->dataset);
    if (dp) {
        if (!o->private_)
            return cli_error("--normalize %s: a DP fit is for private algorithms (its release goes into their "
                             "privacy ledger); without privacy use --normalize %s", r, r + 3);
        if (!o->dp_ok)
            return cli_error("--normalize %s: this run has no privacy ledger to record the release in; use public, "
                             "none or affine:SHIFT:SCALE", r);
        if (!o->norm_sigma_seen)
            return cli_error("--normalize %s needs --normalize-sigma S: the noise multiplier of the statistics' "
                             "Gaussian release (> 0)", r);
        if (!(isfinite(o->norm_sigma) && o->norm_sigma > 0))
            return cli_error("--normalize-sigma must be > 0, got %g (statistics without noise are not private)",
                             o->norm_sigma);
        if (o->norm_clip_seen && !(isfinite(o->norm_clip) && o->norm_clip > 0))
            return cli_error("--normalize-clip must be > 0, got %g", o->norm_clip);
        if (is_csv(o->dataset) && !o->norm_clip_seen)
            return cli_error("--normalize %s on csv data needs --normalize-clip C: csv values have no known bound "
                             "(C bounds the L2 norm of each example's (mean, mean square) statistics)", r);
        if (o->secure && dpt_comm_size() > 1)
            return cli_error("--normalize %s with --secure under mpirun: every rank would draw its own noise; "
                             "run it on one rank or use --normalize public | none | affine:SHIFT:SCALE", r);
    }
    if (k.cls == NK_FIT && o->private_ && !o->unaccounted) {
        if (!o->dp_ok)
            return cli_error("--normalize %s fits statistics on the private training data, which this run's "
                             "privacy statement does not cover: use --normalize public (the default), none or "
                             "affine:SHIFT:SCALE", r);
        return cli_error("--normalize %s fits the mean and standard deviation on the private training data, which "
                         "the privacy accountant does not cover: use --normalize public (the dataset's published "
                         "constants, the default), none, affine:SHIFT:SCALE or dp-%s (a DP fit in the ledger, "
                         "with --normalize-sigma), or add --normalize-unaccounted to train anyway with an epsilon "
                         "that excludes them", r, r);
    }
    if (o->unaccounted) {
        if (!o->private_)
            return cli_error("--normalize-unaccounted: only for a private algorithm (this run states no privacy "
                             "guarantee)");
        if (k.cls != NK_FIT)
            return cli_error("--normalize-unaccounted: only with a fitted --normalize scalar | channel | feature "
                             "(--normalize %s uses no unaccounted statistic)", r);
        if (!o->dp_ok)
            return cli_error("--normalize-unaccounted: this run has no privacy ledger to record it in; use --normalize "
                             "public, none or affine:SHIFT:SCALE");
    }
    return 0;
}

/* ==== Loading ==== */

static dpt_status parse_classes(const char *s, int *cls, size_t *k) {
    *k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1000000 || (*end && *end != ',') || (*end == ',' && !end[1]))
            return dpt_set_error(DPT_EINVAL, "--classes: expected a comma-separated list of labels, got '%s'", s);
        for (size_t j = 0; j < *k; j++)
            if (cls[j] == (int)v) return dpt_set_error(DPT_EINVAL, "--classes '%s': label %ld twice", s, v);
        if (*k >= 64) return dpt_set_error(DPT_EINVAL, "--classes: at most 64 classes");
        cls[(*k)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    DPT_CHECK(*k >= 2, DPT_EINVAL, "--classes '%s': keep at least 2 labels (one class is nothing to learn)", s);
    return DPT_OK;
}

static dpt_status prepare(const cli_data_opts *o, dpt_split split, dpt_dataset *d) {
    if (o->targets > 0) DPT_TRY(dpt_data_load_targets(o->dataset, o->data_dir, split, (size_t)o->targets, d));
    else DPT_TRY(dpt_data_load(o->dataset, o->data_dir, split, d));
    if (o->classes && (*o->classes || split == DPT_SPLIT_TRAIN)) { /* "" is refused, not ignored */
        int cls[64];
        size_t k;
        DPT_TRY(parse_classes(o->classes, cls, &k));
        DPT_TRY(dpt_dataset_filter_classes(d, cls, k));
    }
    long limit = split == DPT_SPLIT_TRAIN ? o->max_train : o->max_test;
    if (limit > 0 && (size_t)limit < d->n) DPT_TRY(dpt_dataset_take(d, (size_t)limit));
    return DPT_OK;
}

/* --validation: the last n examples of train become *val (copies), train keeps the others.
 * The split is positional, so a resumed run holds out the same examples. */
static dpt_status hold_out(dpt_dataset *train, size_t n, dpt_dataset *val) {
    DPT_CHECK(n < train->n, DPT_EINVAL, "--validation %zu: the training split (%s) has only %zu examples%s", n,
              train->source, train->n, train->n > 1 ? "; hold out fewer, so that some remain to train on" : "");
    const size_t keep = train->n - n;
    const float *x = train->x + keep * train->dim;
    dpt_status s = train->t ? dpt_dataset_from_targets(x, train->t + keep * train->t_dim, n, train->dim, train->t_dim, val)
                            : dpt_dataset_from_arrays(x, train->y + keep, n, train->dim, train->n_classes, val);
    DPT_TRY(s);
    memcpy(val->shape, train->shape, sizeof val->shape);
    snprintf(val->source, sizeof val->source, "the last %zu examples of %.400s (--validation)", n, train->source);
    return dpt_dataset_take(train, keep);
}

static cJSON *float_array(const float *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* A count stored as a JSON number: finite, integral, in [0, 2^53] (exact in a double),
 * so the conversion to long is defined. */
static dpt_status json_count(const cJSON *v, const char *what, long *out) {
    DPT_CHECK(cJSON_IsNumber(v), DPT_EFORMAT, "checkpoint run record: %s is missing or not a number", what);
    const double x = v->valuedouble;
    DPT_CHECK(isfinite(x) && x >= 0 && x <= 9007199254740992.0 && floor(x) == x, DPT_EFORMAT,
              "checkpoint run record: %s = %g is not a count (an integer in [0, 2^53])", what, x);
    *out = (long)x;
    return DPT_OK;
}

/* The statistics a run stored ("norm_mean", "norm_std") for normalization `kind`, as a
 * validated normalizer for data of `dim` features. *have = 0 for kind "none". */
static dpt_status stored_normalizer(const cJSON *run, const char *kind, size_t dim, dpt_normalizer *nz, int *have) {
    *have = 0;
    memset(nz, 0, sizeof *nz);
    if (!strcmp(kind, "none")) return DPT_OK;
    const cJSON *mean = cJSON_GetObjectItemCaseSensitive(run, "norm_mean");
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(run, "norm_std");
    DPT_CHECK(cJSON_IsArray(mean) && cJSON_IsArray(sd), DPT_EFORMAT,
              "checkpoint run record: normalization '%s' without its statistics (norm_mean, norm_std)", kind);
    const int n = cJSON_GetArraySize(mean);
    DPT_CHECK(n >= 1 && n == cJSON_GetArraySize(sd) && (size_t)n <= dim, DPT_EFORMAT,
              "checkpoint run record: norm_mean has %d values and norm_std %d, for data of %zu features", n,
              cJSON_GetArraySize(sd), dim);
    float *m = malloc((size_t)n * sizeof(float)), *s = malloc((size_t)n * sizeof(float));
    dpt_status st = m && s ? DPT_OK : dpt_set_error(DPT_ENOMEM, "out of memory");
    for (int i = 0; st == DPT_OK && i < n; i++) {
        const cJSON *a = cJSON_GetArrayItem(mean, i), *b = cJSON_GetArrayItem(sd, i);
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b))
            st = dpt_set_error(DPT_EFORMAT, "checkpoint run record: norm_mean[%d] or norm_std[%d] is not a number", i,
                               i);
        else
            m[i] = (float)a->valuedouble, s[i] = (float)b->valuedouble;
    }
    if (st == DPT_OK) {
        st = dpt_normalizer_from_values(dim, m, s, (size_t)n, per_feature(kind), nz);
        if (st != DPT_OK) st = dpt_error_context(st, "checkpoint run record (normalization '%s')", kind);
    }
    free(m);
    free(s);
    *have = st == DPT_OK;
    return st;
}

/* The normalization of a fresh run: fitted, public, fixed or DP, per kind. */
static dpt_status fresh_normalizer(const cli_data_opts *o, const char *r, const norm_kind *k, const dpt_dataset *train,
                                   dpt_normalizer *nz, cJSON *run, cli_norm_info *info) {
    memset(nz, 0, sizeof *nz);
    switch (k->cls) {
    case NK_NONE:
        return DPT_OK;
    case NK_PUBLIC:
        DPT_TRY(dpt_normalizer_public(o->dataset, train->dim, nz));
        snprintf(info->note, sizeof info->note, "normalization: the published constants of %s (mean %.4g, std %.4g%s): "
                 "no statistic of the training data", o->dataset, nz->mean[0], nz->std[0],
                 nz->channels > 1 ? " for the first channel" : "");
        return DPT_OK;
    case NK_AFFINE:
        DPT_TRY(dpt_normalizer_from_values(train->dim, &k->shift, &k->scale, 1, 0, nz));
        snprintf(info->note, sizeof info->note, "normalization: fixed (x - %g) / %g: no statistic of the training data",
                 k->shift, k->scale);
        return DPT_OK;
    case NK_FIT:
        DPT_CHECK(!o->private_ || o->unaccounted, DPT_EINVAL,
                  "--normalize %s: fitted statistics of the private training data need --normalize-unaccounted", r);
        DPT_TRY(dpt_normalizer_fit(train, k->mode, nz));
        info->unaccounted = o->private_;
        if (o->private_) {
            cJSON_AddTrueToObject(run, "norm_unaccounted");
            snprintf(info->note, sizeof info->note, "normalization: %s statistics fitted on the private training data "
                     "WITHOUT noise (--normalize-unaccounted): the epsilon does NOT cover them", r);
        } else {
            snprintf(info->note, sizeof info->note, "normalization: %s statistics of the training split", r);
        }
        return DPT_OK;
    case NK_DP: {
        const size_t K = dpt_dp_norm_pairs(train, k->mode);
        DPT_CHECK(K >= 1, DPT_EINVAL, "--normalize %s: %zu channels do not divide %zu features", r, train->shape[0],
                  train->dim);
        /* named datasets hold values in [-1, 1]: ||(a_i, b_i)|| <= sqrt(2K), nothing clipped */
        const double C = o->norm_clip_seen ? o->norm_clip : sqrt(2.0 * (double)K);
        dpt_rng rng;
        /* seed 0: the run's seed is the OS's, so is this stream's */
        DPT_TRY(o->secure || !o->seed ? dpt_rng_init_secure(&rng, DPT_STREAM_NOISE)
                          : dpt_rng_init(&rng, dpt_dp_norm_seed(o->seed), DPT_STREAM_NOISE));
        dpt_status s = dpt_dp_normalizer_fit(train, k->mode, C, o->norm_sigma, &rng, o->secure, o->threads, nz, NULL);
        dpt_rng_free(&rng);
        DPT_TRY(s);
        info->dp = 1;
        info->multiplier = o->secure ? dpt_privacy_secure_sigma_eff(o->norm_sigma, 2 * K) : o->norm_sigma;
        cJSON *d = cJSON_AddObjectToObject(run, "norm_dp");
        cli_json_number(d, "clip", C);
        cli_json_number(d, "sigma", o->norm_sigma);
        cli_json_number(d, "multiplier", info->multiplier);
        cJSON_AddBoolToObject(d, "secure", o->secure != 0);
        cJSON_AddStringToObject(d, "ledger_label", DP_LABEL);
        snprintf(info->note, sizeof info->note, "normalization: %s, DP statistics of the training data (each "
                 "example's statistics clipped to %g, noise multiplier %g; one Gaussian release, in the ledger as "
                 "\"%s\" and in the epsilon)", r, C, o->norm_sigma, DP_LABEL);
        return DPT_OK;
    }
    }
    return dpt_set_error(DPT_EINVAL, "--normalize %s: unknown kind", r);
}

/* A resumed run or an audited checkpoint: the statistics the run stored (no new fit, no
 * new release), with its record copied. */
static dpt_status reused_normalizer(const cli_data_opts *o, const char *r, size_t dim, dpt_normalizer *nz, cJSON *run,
                                    cli_norm_info *info) {
    cJSON *old = cJSON_Parse(o->reuse_run);
    DPT_CHECK(old, DPT_EFORMAT, "checkpoint run record: not valid JSON");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(old, "normalize");
    const cJSON *dp = cJSON_GetObjectItemCaseSensitive(old, "norm_dp");
    const cJSON *un = cJSON_GetObjectItemCaseSensitive(old, "norm_unaccounted");
    dpt_status s = DPT_OK;
    int have = 0;
    if (!cJSON_IsString(nm))
        s = dpt_set_error(DPT_EFORMAT, "checkpoint run record: no normalization recorded");
    else if (strcmp(nm->valuestring, r))
        s = dpt_set_error(DPT_EMISMATCH, "--normalize %s: the checkpoint's run used --normalize %s; continue it with "
                          "the same normalization", r, nm->valuestring);
    else if (cJSON_IsTrue(un) && o->private_ && !o->unaccounted)
        s = dpt_set_error(DPT_EMISMATCH, "the checkpoint's normalization statistics were fitted on the training data "
                          "without noise: continue it with --normalize-unaccounted");
    if (s == DPT_OK && !strncmp(r, "dp-", 3)) {
        const cJSON *mult = cJSON_GetObjectItemCaseSensitive(dp, "multiplier");
        const cJSON *sig = cJSON_GetObjectItemCaseSensitive(dp, "sigma");
        if (!cJSON_IsObject(dp) || !cJSON_IsNumber(mult) || !(mult->valuedouble > 0) || !cJSON_IsNumber(sig))
            s = dpt_set_error(DPT_EFORMAT, "checkpoint run record: DP normalization '%s' without its noise record "
                              "(norm_dp)", r);
        else if (o->norm_sigma_seen && sig->valuedouble != o->norm_sigma)
            s = dpt_set_error(DPT_EMISMATCH, "--normalize-sigma %g: the checkpoint's statistics were released with "
                              "noise multiplier %g", o->norm_sigma, sig->valuedouble);
        else {
            info->dp = 1;
            info->multiplier = mult->valuedouble;
            cJSON_AddItemToObject(run, "norm_dp", cJSON_Duplicate(dp, 1));
        }
    }
    if (s == DPT_OK) s = stored_normalizer(old, r, dim, nz, &have);
    if (s == DPT_OK && cJSON_IsTrue(un)) {
        info->unaccounted = 1;
        cJSON_AddTrueToObject(run, "norm_unaccounted");
    }
    if (s == DPT_OK)
        snprintf(info->note, sizeof info->note, "normalization: %s, the statistics stored in the checkpoint%s", r,
                 info->unaccounted ? " (fitted WITHOUT noise: the epsilon does NOT cover them)" : "");
    cJSON_Delete(old);
    return s;
}

/* csv:A[,B] with A and B made absolute (realpath: the files were just read); other names
 * as given. Falls back to the name as given when a path does not resolve or is too long. */
static const char *absolute_dataset(const char *ds, char *out, size_t n) {
    if (strncmp(ds, "csv:", 4)) return ds;
    char parts[2][PATH_MAX], abs[2][PATH_MAX];
    const char *comma = strchr(ds + 4, ',');
    size_t l0 = comma ? (size_t)(comma - ds - 4) : strlen(ds + 4);
    if (l0 >= PATH_MAX || (comma && strlen(comma + 1) >= PATH_MAX) || (comma && strchr(comma + 1, ','))) return ds;
    memcpy(parts[0], ds + 4, l0);
    parts[0][l0] = 0;
    if (comma) snprintf(parts[1], PATH_MAX, "%s", comma + 1);
    for (int k = 0; k < (comma ? 2 : 1); k++)
        if (!realpath(parts[k], abs[k])) return ds;
    int w = comma ? snprintf(out, n, "csv:%s,%s", abs[0], abs[1]) : snprintf(out, n, "csv:%s", abs[0]);
    return w > 0 && (size_t)w < n ? out : ds;
}

int cli_load_run_data(const cli_data_opts *o, dpt_dataset *train, dpt_dataset *test, char **run_json,
                      cli_norm_info *info) {
    cli_norm_info scratch;
    if (!info) info = &scratch;
    memset(info, 0, sizeof *info);
    *run_json = NULL;
    const char *r = resolve(o);
    norm_kind k;
    DPT_TRY(parse_kind(r, &k));
    snprintf(info->kind, sizeof info->kind, "%s", r);
    info->source = SOURCE[k.cls];
    snprintf(info->note, sizeof info->note, "normalization: none");
    DPT_TRY(prepare(o, DPT_SPLIT_TRAIN, train));
    if (test && o->validation > 0) {
        DPT_TRY(hold_out(train, (size_t)o->validation, test));
    } else if (test) {
        DPT_TRY(prepare(o, DPT_SPLIT_TEST, test));
        if (!train->t && test->n_classes != train->n_classes) {
            int nc = test->n_classes > train->n_classes ? test->n_classes : train->n_classes;
            DPT_TRY(dpt_dataset_set_n_classes(train, nc));
            DPT_TRY(dpt_dataset_set_n_classes(test, nc));
        }
    }
    cJSON *run = cJSON_CreateObject();
    DPT_CHECK(run, DPT_ENOMEM, "out of memory");
    /* absolute paths, so that eval and audit of the checkpoint work from any directory */
    char ds_abs[3 * PATH_MAX + 8], dd_abs[PATH_MAX];
    const char *dd = o->data_dir ? o->data_dir : DPT_DEFAULT_DATA_DIR;
    cJSON_AddStringToObject(run, "dataset", absolute_dataset(o->dataset, ds_abs, sizeof ds_abs));
    cJSON_AddStringToObject(run, "data_dir", realpath(dd, dd_abs) ? dd_abs : dd);
    cJSON_AddStringToObject(run, "classes", o->classes ? o->classes : "");
    if (o->targets > 0) cli_json_number(run, "targets", (double)o->targets); /* regression (absent: labels) */
    cli_json_number(run, "max_train", (double)o->max_train);
    cli_json_number(run, "max_test", (double)o->max_test);
    if (o->validation > 0) cli_json_number(run, "validation", (double)o->validation);
    cli_json_number(run, "train_examples", (double)train->n);
    cJSON_AddStringToObject(run, "normalize", r);
    cJSON_AddStringToObject(run, "norm_source", info->source);
    dpt_normalizer nz;
    memset(&nz, 0, sizeof nz);
    dpt_status s = o->reuse_run ? reused_normalizer(o, r, train->dim, &nz, run, info)
                                : fresh_normalizer(o, r, &k, train, &nz, run, info);
    if (s == DPT_OK && nz.mean) {
        s = dpt_normalizer_apply(&nz, train);
        if (s == DPT_OK && test) s = dpt_normalizer_apply(&nz, test);
        size_t n = nz.channels ? nz.channels : nz.dim;
        cJSON_AddItemToObject(run, "norm_mean", float_array(nz.mean, n));
        cJSON_AddItemToObject(run, "norm_std", float_array(nz.std, n));
    }
    dpt_normalizer_free(&nz);
    if (s == DPT_OK) {
        *run_json = cJSON_PrintUnformatted(run);
        if (!*run_json) s = dpt_set_error(DPT_ENOMEM, "out of memory");
    }
    cJSON_Delete(run);
    return s;
}

char *cli_checkpoint_run_json(const char *checkpoint_path) {
    /* stat, not fopen: opening a FIFO for reading waits for a writer forever. What is not a
     * regular file has no run record here; the trainer's resume then refuses it by name. */
    struct stat sb;
    if (stat(checkpoint_path, &sb) != 0 || !S_ISREG(sb.st_mode)) return NULL;
    char *state = NULL, *out = NULL;
    if (dpt_checkpoint_peek(checkpoint_path, NULL, &state) != DPT_OK) return NULL;
    cJSON *root = cJSON_Parse(state);
    const cJSON *run = root ? cJSON_GetObjectItemCaseSensitive(root, "run") : NULL;
    if (cJSON_IsObject(run)) out = cJSON_PrintUnformatted(run);
    cJSON_Delete(root);
    free(state);
    return out;
}

/* ==== The release in the ledger ==== */

int cli_norm_planned(const cli_data_opts *o, struct dpt_ledger *l, char *what, size_t n) {
    norm_kind k;
    if (parse_kind(resolve(o), &k) != DPT_OK || k.cls != NK_DP || o->reuse_run) return 0;
    /* the multiplier as given: in secure mode the accounted one is smaller (the lattice
     * rounding raises the sensitivity), so this cost is a lower bound there */
    if (dpt_ledger_add_gaussian(l, 1.0, o->norm_sigma, DP_LABEL) != DPT_OK) return cli_fail("--normalize");
    snprintf(what, n, "DP normalization statistics (--normalize %s, --normalize-sigma %g)", resolve(o), o->norm_sigma);
    return 0;
}

int cli_norm_prior(const cli_norm_info *info, struct dpt_ledger **out) {
    *out = NULL;
    if (!info->dp) return 0;
    if (dpt_ledger_new(out) != DPT_OK || dpt_ledger_add_gaussian(*out, 1.0, info->multiplier, DP_LABEL) != DPT_OK) {
        dpt_ledger_free(*out);
        *out = NULL;
        return cli_fail("--normalize");
    }
    return 0;
}

int cli_norm_record(const cli_norm_info *info, dpt_trainer *t, int resumed) {
    /* a resumed run's ledger holds the release already (its statistics are reused) */
    if (info->dp && !resumed && dpt_trainer_add_gaussian_release(t, 1.0, info->multiplier, DP_LABEL) != DPT_OK)
        return cli_fail("--normalize");
    if (info->unaccounted && dpt_trainer_exclude_from_guarantee(t, UNACCOUNTED_NOTE) != DPT_OK)
        return cli_fail("--normalize-unaccounted");
    return 0;
}

void cli_norm_report(const cli_norm_info *info, const dpt_trainer *t) {
    if (info->dp)
        printf("privacy: that epsilon includes the normalization statistics (--normalize %s: one Gaussian release, "
               "noise multiplier %g, ledger event \"%s\")\n", info->kind, info->multiplier, DP_LABEL);
    else if (info->unaccounted && !dpt_trainer_ledger(t))
        printf("privacy: NOT covered by this run's privacy statement: %s\n", UNACCOUNTED_NOTE);
}

/* ==== eval ==== */

/* A DP-MAC run's released DP-PCA ("pca" in its description, algo_dpmac.c record_pca):
 * centre by its DP mean (when given) and project the test split to its k dimensions, as
 * training did. */
dpt_status cli_apply_recorded_pca(const cJSON *pca, dpt_dataset *test) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(pca, "features"), *k = cJSON_GetObjectItemCaseSensitive(pca, "dims");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(pca, "project");
    const cJSON *V = cJSON_GetObjectItemCaseSensitive(pca, "components"), *mu = cJSON_GetObjectItemCaseSensitive(pca, "mean");
    DPT_CHECK(cJSON_IsNumber(f) && cJSON_IsNumber(k) && cJSON_IsString(pr) && cJSON_IsArray(V) &&
              (!mu || cJSON_IsArray(mu)), DPT_EFORMAT, "checkpoint: the recorded DP-PCA lacks fields");
    /* in range before the conversions to size_t */
    DPT_CHECK(f->valuedouble >= 1 && f->valuedouble <= 1e7 && k->valuedouble >= 1 && k->valuedouble <= 1e7,
              DPT_EFORMAT, "checkpoint: the recorded DP-PCA has %g features and %g dimensions", f->valuedouble,
              k->valuedouble);
    const size_t d = (size_t)f->valuedouble, K = (size_t)k->valuedouble;
    DPT_CHECK(f->valuedouble == (double)d && k->valuedouble == (double)K && K >= 1 && K <= d && d == test->dim &&
              (size_t)cJSON_GetArraySize(V) == d * K && (!mu || (size_t)cJSON_GetArraySize(mu) == d),
              DPT_EFORMAT, "checkpoint: the recorded DP-PCA (%g features to %g) does not fit the test split's %zu "
              "features", f->valuedouble, k->valuedouble, test->dim);
    int raw = !strcmp(pr->valuestring, "rows");
    DPT_CHECK(raw || !strcmp(pr->valuestring, "unit"), DPT_EFORMAT, "checkpoint: unknown DP-PCA projection '%s'",
              pr->valuestring);
    double *v = dpt_alloc2(d, K, sizeof(double), "pca components"), *m = mu ? dpt_alloc(d, sizeof(double), "dp mean") : NULL;
    float *out = dpt_alloc2(test->n, K, sizeof(float), "projected test");
    dpt_status s = v && out && (!mu || m) ? DPT_OK : DPT_ENOMEM;
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, V) {
        if (s == DPT_OK && !(cJSON_IsNumber(e) && isfinite(e->valuedouble)))
            s = dpt_set_error(DPT_EFORMAT, "checkpoint: DP-PCA component %zu is not a finite number", i);
        if (s == DPT_OK) v[i++] = e->valuedouble;
    }
    i = 0;
    if (mu) cJSON_ArrayForEach(e, mu) {
            if (s == DPT_OK && !(cJSON_IsNumber(e) && isfinite(e->valuedouble)))
                s = dpt_set_error(DPT_EFORMAT, "checkpoint: DP mean entry %zu is not a finite number", i);
            if (s == DPT_OK) m[i++] = e->valuedouble;
        }
    if (s == DPT_OK && m) s = dpt_dp_center(test->x, test->n, d, m);
    if (s == DPT_OK) s = (raw ? dpt_dp_pca_project_raw : dpt_dp_pca_project)(test->x, test->n, d, v, K, out);
    if (s == DPT_OK) {
        dpt_free(test->x);
        test->x = out, out = NULL;
        test->dim = K, test->shape[0] = 1, test->shape[1] = 1, test->shape[2] = K;
    }
    dpt_free(v), dpt_free(m), dpt_free(out);
    return s;
}

static dpt_status apply_run_preprocessing(const cJSON *run, dpt_dataset *d);

dpt_status cli_run_targets(const cJSON *run, long *targets) {
    *targets = 0;
    const cJSON *tg = cJSON_GetObjectItemCaseSensitive(run, "targets");
    if (!tg) return DPT_OK; /* classification (and every run before regression existed) */
    DPT_TRY(json_count(tg, "targets", targets));
    DPT_CHECK(*targets >= 1 && *targets <= 1000000, DPT_EFORMAT, "checkpoint run record: targets %ld is not in "
              "[1, 1000000]", *targets);
    return DPT_OK;
}

dpt_status cli_run_classes(const cJSON *run, int *cls, size_t *k) {
    *k = 0;
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(run, "classes");
    if (!cl || (cJSON_IsString(cl) && !cl->valuestring[0])) return DPT_OK; /* every label, as it is */
    DPT_CHECK(cJSON_IsString(cl), DPT_EFORMAT, "checkpoint run record: classes is not a string");
    dpt_status s = parse_classes(cl->valuestring, cls, k);
    return s == DPT_OK ? s : dpt_set_error(DPT_EFORMAT, "checkpoint run record: %s", dpt_last_error());
}

int cli_load_test_from_run(const char *run_json, const char *data_dir, dpt_dataset *test) {
    cJSON *run = cJSON_Parse(run_json);
    DPT_CHECK(run, DPT_EFORMAT, "checkpoint: run description is not valid JSON");
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(run, "dataset");
    const cJSON *dd = cJSON_GetObjectItemCaseSensitive(run, "data_dir");
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(run, "classes");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(run, "normalize");
    if (!cJSON_IsString(ds) || !cJSON_IsString(dd) || !cJSON_IsString(cl) || !cJSON_IsString(nm)) {
        cJSON_Delete(run);
        return dpt_set_error(DPT_EFORMAT, "checkpoint: run description lacks dataset fields");
    }
    long max_test = 0, targets = 0;
    dpt_status s = json_count(cJSON_GetObjectItemCaseSensitive(run, "max_test"), "max_test", &max_test);
    if (s == DPT_OK) s = cli_run_targets(run, &targets);
    cli_data_opts o = {.dataset = ds->valuestring, .data_dir = data_dir ? data_dir : dd->valuestring,
                       .normalize = nm->valuestring, .classes = cl->valuestring, .max_test = max_test,
                       .targets = targets};
    if (s == DPT_OK) s = prepare(&o, DPT_SPLIT_TEST, test);
    if (s == DPT_OK) s = apply_run_preprocessing(run, test);
    cJSON_Delete(run);
    return s;
}

/* The stored normalization statistics and the recorded DP-PCA of a run (its "run" object),
 * applied to d as training applied them. */
static dpt_status apply_run_preprocessing(const cJSON *run, dpt_dataset *d) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(run, "normalize");
    DPT_CHECK(cJSON_IsString(nm), DPT_EFORMAT, "checkpoint: run description lacks its normalization");
    dpt_normalizer nz;
    int have = 0;
    dpt_status s = stored_normalizer(run, nm->valuestring, d->dim, &nz, &have);
    if (s == DPT_OK && have) s = dpt_normalizer_apply(&nz, d);
    if (have) dpt_normalizer_free(&nz);
    const cJSON *pca = cJSON_GetObjectItemCaseSensitive(run, "pca");
    if (s == DPT_OK && pca) s = cli_apply_recorded_pca(pca, d);
    return s;
}

int cli_apply_run_preprocessing(const char *run_json, dpt_dataset *d) {
    cJSON *run = cJSON_Parse(run_json);
    DPT_CHECK(run, DPT_EFORMAT, "checkpoint: run description is not valid JSON");
    dpt_status s = apply_run_preprocessing(run, d);
    cJSON_Delete(run);
    return s;
}
