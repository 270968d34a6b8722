/* Data preparation shared by `dptrain train` and `dptrain eval`. */
#include "run_data.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define NORM_AFFINE 100 /* fixed x <- (x - SHIFT) / SCALE: no statistics of the data */

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

static dpt_status parse_norm(const char *s, int *mode) {
    if (!strcmp(s, "none")) *mode = -1;
    else if (!strcmp(s, "scalar")) *mode = DPT_NORM_SCALAR;
    else if (!strcmp(s, "channel")) *mode = DPT_NORM_PER_CHANNEL;
    else if (!strncmp(s, "affine:", 7)) {
        float a, b;
        DPT_TRY(parse_affine(s, &a, &b));
        *mode = NORM_AFFINE;
    } else
        return dpt_set_error(DPT_EINVAL, "--normalize: expected none|scalar|channel|affine:SHIFT:SCALE, got '%s'", s);
    return DPT_OK;
}

static dpt_status parse_classes(const char *s, int *cls, size_t *k) {
    *k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1000000 || (*end && *end != ','))
            return dpt_set_error(DPT_EINVAL, "--classes: expected a comma-separated list of labels, got '%s'", s);
        if (*k >= 64) return dpt_set_error(DPT_EINVAL, "--classes: at most 64 classes");
        cls[(*k)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    DPT_CHECK(*k >= 1, DPT_EINVAL, "--classes: empty list");
    return DPT_OK;
}

static dpt_status prepare(const cli_data_opts *o, dpt_split split, dpt_dataset *d) {
    DPT_TRY(dpt_data_load(o->dataset, o->data_dir, split, d));
    if (o->classes && *o->classes) {
        int cls[64];
        size_t k;
        DPT_TRY(parse_classes(o->classes, cls, &k));
        DPT_TRY(dpt_dataset_filter_classes(d, cls, k));
    }
    long limit = split == DPT_SPLIT_TRAIN ? o->max_train : o->max_test;
    if (limit > 0 && (size_t)limit < d->n) DPT_TRY(dpt_dataset_take(d, (size_t)limit));
    return DPT_OK;
}

static cJSON *float_array(const float *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

int cli_load_run_data(const cli_data_opts *o, dpt_dataset *train, dpt_dataset *test, char **run_json) {
    int mode = -1;
    *run_json = NULL;
    DPT_TRY(parse_norm(o->normalize, &mode));
    DPT_TRY(prepare(o, DPT_SPLIT_TRAIN, train));
    if (test) {
        dpt_status s = prepare(o, DPT_SPLIT_TEST, test);
        if (s != DPT_OK) return s;
        if (test->n_classes != train->n_classes) {
            int k = test->n_classes > train->n_classes ? test->n_classes : train->n_classes;
            DPT_TRY(dpt_dataset_set_n_classes(train, k));
            DPT_TRY(dpt_dataset_set_n_classes(test, k));
        }
    }
    cJSON *run = cJSON_CreateObject();
    cJSON_AddStringToObject(run, "dataset", o->dataset);
    cJSON_AddStringToObject(run, "data_dir", o->data_dir ? o->data_dir : DPT_DEFAULT_DATA_DIR);
    cJSON_AddStringToObject(run, "classes", o->classes ? o->classes : "");
    cJSON_AddNumberToObject(run, "max_train", (double)o->max_train);
    cJSON_AddNumberToObject(run, "max_test", (double)o->max_test);
    cJSON_AddNumberToObject(run, "train_examples", (double)train->n);
    cJSON_AddStringToObject(run, "normalize", o->normalize);
    if (mode >= 0) {
        dpt_normalizer nz;
        dpt_status s;
        if (mode == NORM_AFFINE) {
            /* data-independent: one (shift, scale) pair applied as (x - shift) / scale */
            memset(&nz, 0, sizeof nz);
            nz.dim = train->dim;
            nz.channels = 1;
            nz.mean = dpt_alloc(1, sizeof(float), "normalization");
            nz.std = dpt_alloc(1, sizeof(float), "normalization");
            s = nz.mean && nz.std ? parse_affine(o->normalize, nz.mean, nz.std) : DPT_ENOMEM;
        } else {
            s = dpt_normalizer_fit(train, mode, &nz);
        }
        if (s == DPT_OK) s = dpt_normalizer_apply(&nz, train);
        if (s == DPT_OK && test) s = dpt_normalizer_apply(&nz, test);
        if (s != DPT_OK) {
            cJSON_Delete(run);
            dpt_normalizer_free(&nz);
            return s;
        }
        size_t n = nz.channels ? nz.channels : nz.dim;
        cJSON_AddItemToObject(run, "norm_mean", float_array(nz.mean, n));
        cJSON_AddItemToObject(run, "norm_std", float_array(nz.std, n));
        dpt_normalizer_free(&nz);
    }
    *run_json = cJSON_PrintUnformatted(run);
    cJSON_Delete(run);
    DPT_CHECK(*run_json, DPT_ENOMEM, "out of memory");
    return DPT_OK;
}

int cli_load_test_from_run(const char *run_json, const char *data_dir, dpt_dataset *test) {
    cJSON *run = cJSON_Parse(run_json);
    DPT_CHECK(run, DPT_EFORMAT, "checkpoint: run description is not valid JSON");
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(run, "dataset");
    const cJSON *dd = cJSON_GetObjectItemCaseSensitive(run, "data_dir");
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(run, "classes");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(run, "max_test");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(run, "normalize");
    const cJSON *mean = cJSON_GetObjectItemCaseSensitive(run, "norm_mean");
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(run, "norm_std");
    dpt_status s = DPT_OK;
    if (!cJSON_IsString(ds) || !cJSON_IsString(dd) || !cJSON_IsString(cl) || !cJSON_IsNumber(mt) ||
        !cJSON_IsString(nm)) {
        cJSON_Delete(run);
        return dpt_set_error(DPT_EFORMAT, "checkpoint: run description lacks dataset fields");
    }
    cli_data_opts o = {ds->valuestring, data_dir ? data_dir : dd->valuestring, nm->valuestring, cl->valuestring, 0,
                       (long)mt->valuedouble};
    s = prepare(&o, DPT_SPLIT_TEST, test);
    if (s == DPT_OK && strcmp(nm->valuestring, "none") != 0) {
        int n = cJSON_GetArraySize(mean);
        if (!cJSON_IsArray(mean) || !cJSON_IsArray(sd) || n < 1 || n != cJSON_GetArraySize(sd)) {
            s = dpt_set_error(DPT_EFORMAT, "checkpoint: normalization statistics are missing");
        } else {
            dpt_normalizer nz;
            memset(&nz, 0, sizeof nz);
            nz.dim = test->dim;
            nz.channels = (size_t)n == test->dim && !strcmp(nm->valuestring, "feature") ? 0 : (size_t)n;
            nz.mean = malloc(n * sizeof(float));
            nz.std = malloc(n * sizeof(float));
            if (!nz.mean || !nz.std) s = dpt_set_error(DPT_ENOMEM, "out of memory");
            for (int i = 0; s == DPT_OK && i < n; i++) {
                const cJSON *mi = cJSON_GetArrayItem(mean, i), *si = cJSON_GetArrayItem(sd, i);
                if (!cJSON_IsNumber(mi) || !cJSON_IsNumber(si))
                    s = dpt_set_error(DPT_EFORMAT, "checkpoint: run.%s[%d] is not a number",
                                      cJSON_IsNumber(mi) ? "norm_std" : "norm_mean", i);
                else nz.mean[i] = (float)mi->valuedouble, nz.std[i] = (float)si->valuedouble;
            }
            if (s == DPT_OK) s = dpt_normalizer_apply(&nz, test);
            free(nz.mean);
            free(nz.std);
        }
    }
    cJSON_Delete(run);
    return s;
}
