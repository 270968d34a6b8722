/* Dataset operations: validation, class filtering, take, gather, hashing, normalization. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dptrain/data.h"

void dpt_dataset_free(dpt_dataset *d) {
    if (!d) return;
    dpt_free(d->x);
    dpt_free(d->y);
    dpt_free(d->t);
    memset(d, 0, sizeof *d);
}

dpt_status dpt_dataset_validate(const dpt_dataset *d) {
    DPT_CHECK(d, DPT_EINVAL, "dpt_dataset_validate: NULL dataset");
    const char *src = d->source[0] ? d->source : "(dataset)";
    DPT_CHECK(d->n > 0 && d->dim > 0 && d->x, DPT_EFORMAT, "%s: empty dataset", src);
    size_t nd, sp;
    DPT_CHECK(dpt_mul_overflow(d->n, d->dim, &nd) == 0, DPT_EFORMAT, "%s: n x dim overflows",
              src);
    DPT_CHECK(dpt_mul_overflow(d->shape[0], d->shape[1], &sp) == 0 &&
                  dpt_mul_overflow(sp, d->shape[2], &sp) == 0 && sp == d->dim,
              DPT_EFORMAT, "%s: shape (%zu, %zu, %zu) does not match dim %zu", src, d->shape[0],
              d->shape[1], d->shape[2], d->dim);
    if (d->t) {
        size_t nt;
        DPT_CHECK(!d->y && d->n_classes == 0 && d->t_dim >= 1 && !dpt_mul_overflow(d->n, d->t_dim, &nt),
                  DPT_EFORMAT, "%s: a regression dataset needs t_dim >= 1, no labels (y NULL) and n_classes 0 "
                  "(t_dim %zu, y %s, n_classes %d)", src, d->t_dim, d->y ? "set" : "NULL", d->n_classes);
        for (size_t i = 0; i < nt; i++)
            DPT_CHECK(isfinite(d->t[i]), DPT_EFORMAT, "%s: non-finite target %g of example %zu (target %zu)", src,
                      (double)d->t[i], i / d->t_dim, i % d->t_dim);
    } else if (!d->y) { /* unlabelled: features for prediction */
        DPT_CHECK(d->t_dim == 0 && d->n_classes == 0, DPT_EFORMAT, "%s: no labels and no targets, but t_dim %zu and "
                  "n_classes %d", src, d->t_dim, d->n_classes);
    } else {
        DPT_CHECK(d->t_dim == 0, DPT_EFORMAT, "%s: t_dim %zu without targets (t NULL)", src, d->t_dim);
        DPT_CHECK(d->n_classes >= 1, DPT_EFORMAT, "%s: n_classes %d", src, d->n_classes);
        for (size_t i = 0; i < d->n; i++)
            DPT_CHECK(d->y[i] >= 0 && d->y[i] < d->n_classes, DPT_EFORMAT,
                      "%s: label %d of example %zu out of range [0, %d)", src, (int)d->y[i], i,
                      d->n_classes);
    }
    for (size_t i = 0; i < nd; i++)
        DPT_CHECK(isfinite(d->x[i]), DPT_EFORMAT,
                  "%s: non-finite value %g in example %zu, feature %zu", src, (double)d->x[i],
                  i / d->dim, i % d->dim);
    return DPT_OK;
}

/* ==== Datasets from the caller's arrays ==== */

/* v [nd] all finite, else DPT_EINVAL naming the first ("x[1234] (example 12, feature 34)").
 * One vectorized pass finds whether any value is NaN or infinite (!(|v| <= FLT_MAX) holds
 * for both), a second names the first: a branch per element made this check cost more than
 * the copy (0.25 s for MNIST's 47M features). */
static dpt_status check_finite(const char *F, const char *name, const char *what, const float *v, size_t nd,
                               size_t per) {
    int bad = 0;
#pragma omp simd reduction(| : bad)
    for (size_t i = 0; i < nd; i++) bad |= !(fabsf(v[i]) <= FLT_MAX);
    for (size_t i = 0; bad && i < nd; i++)
        DPT_CHECK(isfinite(v[i]), DPT_EINVAL, "%s: %s[%zu] = %g (example %zu, %s %zu) is not finite", F, name, i,
                  (double)v[i], i / per, what, i % per);
    return DPT_OK;
}

/* Checks everything before allocating, so a refused call leaves *out zeroed and costs no
 * memory; the message names the parameter and, for data, the first bad index. */
static dpt_status check_arrays(const float *x, const int32_t *y, size_t n, size_t dim, int n_classes,
                               int *classes_out) {
    static const char *F = "dpt_dataset_from_arrays";
    DPT_CHECK(x, DPT_EINVAL, "%s: x is NULL", F);
    DPT_CHECK(y, DPT_EINVAL, "%s: y is NULL", F);
    DPT_CHECK(n >= 1, DPT_EINVAL, "%s: n must be >= 1 (no examples)", F);
    DPT_CHECK(dim >= 1, DPT_EINVAL, "%s: dim must be >= 1 (no features)", F);
    size_t nd, bytes;
    DPT_CHECK(!dpt_mul_overflow(n, dim, &nd) && !dpt_mul_overflow(nd, sizeof(float), &bytes), DPT_ENOMEM,
              "%s: n * dim = %zu * %zu floats overflows the address space", F, n, dim);
    DPT_CHECK(n_classes >= 0, DPT_EINVAL, "%s: n_classes must be >= 1, or 0 for max(y) + 1; got %d", F, n_classes);
    int32_t top = -1;
    for (size_t i = 0; i < n; i++) {
        if (n_classes > 0)
            DPT_CHECK(y[i] >= 0 && y[i] < n_classes, DPT_EINVAL, "%s: y[%zu] = %d is outside [0, %d) (n_classes %d)",
                      F, i, (int)y[i], n_classes, n_classes);
        else
            DPT_CHECK(y[i] >= 0 && y[i] < INT32_MAX, DPT_EINVAL, "%s: y[%zu] = %d is not a class index in [0, %d)",
                      F, i, (int)y[i], (int)INT32_MAX);
        if (y[i] > top) top = y[i];
    }
    DPT_TRY(check_finite(F, "x", "feature", x, nd, dim));
    *classes_out = n_classes > 0 ? n_classes : (int)top + 1;
    return DPT_OK;
}

/* The caller's features x [n, dim] into out->x (allocated), flat per-example shape. */
static void set_flat(dpt_dataset *out, const float *x, size_t n, size_t dim) {
    memcpy(out->x, x, n * dim * sizeof(float));
    out->n = n;
    out->dim = dim;
    out->shape[0] = out->shape[1] = 1;
    out->shape[2] = dim;
}

dpt_status dpt_dataset_from_arrays(const float *x, const int32_t *y, size_t n, size_t dim, int n_classes,
                                   dpt_dataset *out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_dataset_from_arrays: out is NULL");
    memset(out, 0, sizeof *out);
    int k = 0;
    DPT_TRY(check_arrays(x, y, n, dim, n_classes, &k));
    out->x = dpt_alloc(n * dim, sizeof(float), "dpt_dataset_from_arrays: x");
    out->y = dpt_alloc(n, sizeof(int32_t), "dpt_dataset_from_arrays: y");
    if (!out->x || !out->y) {
        dpt_dataset_free(out);
        return DPT_ENOMEM;
    }
    memcpy(out->y, y, n * sizeof(int32_t));
    set_flat(out, x, n, dim);
    out->n_classes = k;
    snprintf(out->source, sizeof out->source, "(arrays: %zu x %zu)", n, dim);
    return DPT_OK;
}

dpt_status dpt_dataset_from_targets(const float *x, const float *t, size_t n, size_t dim, size_t t_dim,
                                    dpt_dataset *out) {
    static const char *F = "dpt_dataset_from_targets";
    DPT_CHECK(out, DPT_EINVAL, "%s: out is NULL", F);
    memset(out, 0, sizeof *out);
    DPT_CHECK(x, DPT_EINVAL, "%s: x is NULL", F);
    DPT_CHECK(t, DPT_EINVAL, "%s: t is NULL", F);
    DPT_CHECK(n >= 1, DPT_EINVAL, "%s: n must be >= 1 (no examples)", F);
    DPT_CHECK(dim >= 1, DPT_EINVAL, "%s: dim must be >= 1 (no features)", F);
    DPT_CHECK(t_dim >= 1, DPT_EINVAL, "%s: t_dim must be >= 1 (no targets)", F);
    size_t nd, nt, bytes;
    DPT_CHECK(!dpt_mul_overflow(n, dim, &nd) && !dpt_mul_overflow(nd, sizeof(float), &bytes) &&
                  !dpt_mul_overflow(n, t_dim, &nt) && !dpt_mul_overflow(nt, sizeof(float), &bytes),
              DPT_ENOMEM, "%s: n * dim = %zu * %zu or n * t_dim = %zu * %zu floats overflows the address space", F, n,
              dim, n, t_dim);
    DPT_TRY(check_finite(F, "x", "feature", x, nd, dim));
    DPT_TRY(check_finite(F, "t", "target", t, nt, t_dim));
    out->x = dpt_alloc(nd, sizeof(float), "dpt_dataset_from_targets: x");
    out->t = dpt_alloc(nt, sizeof(float), "dpt_dataset_from_targets: t");
    if (!out->x || !out->t) {
        dpt_dataset_free(out);
        return DPT_ENOMEM;
    }
    memcpy(out->t, t, nt * sizeof(float));
    set_flat(out, x, n, dim);
    out->t_dim = t_dim;
    snprintf(out->source, sizeof out->source, "(arrays: %zu x %zu, targets %zu)", n, dim, t_dim);
    return DPT_OK;
}

dpt_status dpt_dataset_set_shape(dpt_dataset *d, size_t c, size_t h, size_t w) {
    DPT_CHECK(d, DPT_EINVAL, "dpt_dataset_set_shape: d is NULL");
    DPT_CHECK(c >= 1 && h >= 1 && w >= 1, DPT_EINVAL,
              "dpt_dataset_set_shape: c, h and w must be >= 1, got (%zu, %zu, %zu)", c, h, w);
    size_t p;
    DPT_CHECK(!dpt_mul_overflow(c, h, &p) && !dpt_mul_overflow(p, w, &p) && p == d->dim, DPT_EINVAL,
              "dpt_dataset_set_shape: c * h * w = %zu * %zu * %zu must equal the %zu features per example (d->dim)",
              c, h, w, d->dim);
    d->shape[0] = c;
    d->shape[1] = h;
    d->shape[2] = w;
    return DPT_OK;
}

dpt_status dpt_dataset_set_n_classes(dpt_dataset *d, int k) {
    DPT_CHECK(d && k >= 1, DPT_EINVAL, "dpt_dataset_set_n_classes: need k >= 1 (got %d)", k);
    DPT_CHECK(d->y, DPT_EINVAL, "%s: a dataset without labels (regression targets, or unlabelled) has no classes",
              d->source);
    for (size_t i = 0; i < d->n; i++)
        DPT_CHECK(d->y[i] < k, DPT_EFORMAT,
                  "%s: label %d of example %zu is not one of the %d training classes",
                  d->source, (int)d->y[i], i, k);
    d->n_classes = k;
    return DPT_OK;
}

/* ==== Filtering and subsets ==== */

dpt_status dpt_dataset_filter_classes(dpt_dataset *d, const int *classes, size_t k) {
    DPT_CHECK(d && classes && k >= 1, DPT_EINVAL, "dpt_dataset_filter_classes: %s",
              !d ? "d is NULL" : !classes ? "classes is NULL" : "k must be >= 1");
    DPT_CHECK(d->y, DPT_EINVAL, "%s: a dataset without labels (regression targets, or unlabelled) has no classes to "
              "filter", d->source);
    DPT_CHECK(k <= (size_t)d->n_classes, DPT_EINVAL, "dpt_dataset_filter_classes: k = %zu classes of %d", k,
              d->n_classes);
    /* map[old label] = new label or -1 */
    int32_t *map = dpt_alloc((size_t)d->n_classes, sizeof(int32_t), "class map");
    if (!map) return DPT_ENOMEM;
    for (int c = 0; c < d->n_classes; c++) map[c] = -1;
    for (size_t j = 0; j < k; j++) {
        int c = classes[j];
        if (c < 0 || c >= d->n_classes || map[c] >= 0) {
            dpt_free(map);
            return dpt_set_error(DPT_EINVAL,
                                 "dpt_dataset_filter_classes: class %d %s (classes must be distinct, in "
                                 "[0, %d))",
                                 c, (c >= 0 && c < d->n_classes) ? "repeated" : "out of range",
                                 d->n_classes);
        }
        map[c] = (int32_t)j;
    }
    size_t kept = 0;
    for (size_t i = 0; i < d->n; i++)
        if (map[d->y[i]] >= 0) kept++;
    if (kept == 0) {
        dpt_free(map);
        return dpt_set_error(DPT_EINVAL, "%s: no example has one of the %zu requested classes",
                             d->source, k);
    }
    size_t w = 0;
    for (size_t i = 0; i < d->n; i++) {
        int32_t nl = map[d->y[i]];
        if (nl < 0) continue;
        if (w != i) memmove(d->x + w * d->dim, d->x + i * d->dim, d->dim * sizeof(float));
        d->y[w] = nl;
        w++;
    }
    dpt_free(map);
    d->n = w;
    d->n_classes = (int)k;
    return DPT_OK;
}

dpt_status dpt_dataset_take(dpt_dataset *d, size_t n_first) {
    DPT_CHECK(d, DPT_EINVAL, "dpt_dataset_take: NULL dataset");
    DPT_CHECK(n_first >= 1 && n_first <= d->n, DPT_EINVAL,
              "%s: cannot take the first %zu examples of %zu", d->source, n_first, d->n);
    d->n = n_first; /* the arrays keep their capacity; dpt_dataset_free frees them */
    return DPT_OK;
}

void dpt_dataset_gather(const dpt_dataset *d, const uint32_t *idx, size_t b, float *x_out,
                        int32_t *y_out) {
    /* x_out: [b, dim], y_out: [b] */
    for (size_t i = 0; i < b; i++) {
        DPT_ASSERT(idx[i] < d->n);
        memcpy(x_out + i * d->dim, d->x + (size_t)idx[i] * d->dim, d->dim * sizeof(float));
        if (y_out && d->y) y_out[i] = d->y[idx[i]];
    }
}

void dpt_dataset_gather_targets(const dpt_dataset *d, const uint32_t *idx, size_t b, float *t_out) {
    if (!d->t) return;
    for (size_t i = 0; i < b; i++) {
        DPT_ASSERT(idx[i] < d->n);
        memcpy(t_out + i * d->t_dim, d->t + (size_t)idx[i] * d->t_dim, d->t_dim * sizeof(float));
    }
}

/* ==== Hash ==== */

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

dpt_status dpt_dataset_hash(const dpt_dataset *d, uint8_t out[32]) {
    DPT_CHECK(d && out, DPT_EINVAL, "dpt_dataset_hash: NULL argument");
    uint8_t hdr[6 * 8];
    put_le64(hdr + 0, d->n);
    put_le64(hdr + 8, d->dim);
    put_le64(hdr + 16, d->shape[0]);
    put_le64(hdr + 24, d->shape[1]);
    put_le64(hdr + 32, d->shape[2]);
    put_le64(hdr + 40, (uint64_t)(int64_t)d->n_classes);
    dpt_hash h;
    DPT_TRY(dpt_hash_init(&h));
    dpt_status st = dpt_hash_update(&h, hdr, sizeof hdr);
    /* x and y as stored: float32 / int32 in the host byte order (little-endian on every
     * platform dptrain targets). */
    if (st == DPT_OK && d->n) st = dpt_hash_update(&h, d->x, d->n * d->dim * sizeof(float));
    if (st == DPT_OK && d->n && d->y) st = dpt_hash_update(&h, d->y, d->n * sizeof(int32_t));
    if (st == DPT_OK && d->n && d->t) { /* regression (n_classes 0 above: no classification hash starts so) */
        uint8_t td[8];
        put_le64(td, d->t_dim);
        st = dpt_hash_update(&h, td, sizeof td);
        if (st == DPT_OK) st = dpt_hash_update(&h, d->t, d->n * d->t_dim * sizeof(float));
    }
    dpt_status st2 = dpt_hash_final(&h, out); /* also releases the context */
    return st != DPT_OK ? st : st2;
}

/* ==== Normalization ==== */

void dpt_normalizer_free(dpt_normalizer *nz) {
    if (!nz) return;
    dpt_free(nz->mean);
    dpt_free(nz->std);
    memset(nz, 0, sizeof *nz);
}

/* std below this is a constant feature: divide by 1 instead. */
#define DPT_NORM_MIN_STD 1e-12

dpt_status dpt_normalizer_fit(const dpt_dataset *train, int per_channel, dpt_normalizer *out) {
    DPT_CHECK(train && out && train->n > 0 && train->dim > 0, DPT_EINVAL,
              "normalizer fit: empty training set");
    DPT_CHECK(per_channel >= DPT_NORM_SCALAR && per_channel <= DPT_NORM_PER_FEATURE, DPT_EINVAL,
              "normalizer fit: unknown mode %d", per_channel);
    memset(out, 0, sizeof *out);
    size_t C = train->shape[0], dim = train->dim;
    if (per_channel == DPT_NORM_SCALAR) C = 1;
    if (per_channel == DPT_NORM_PER_CHANNEL)
        DPT_CHECK(C >= 1 && dim % C == 0, DPT_EINVAL,
                  "normalizer fit: %zu channels do not divide dim %zu", C, dim);
    size_t K = per_channel == DPT_NORM_PER_FEATURE ? dim : C; /* number of (mean, std) */
    size_t per = per_channel == DPT_NORM_PER_FEATURE ? 1 : dim / C; /* contiguous run */
    double *s1 = dpt_alloc(K, sizeof(double), "normalizer sums");
    double *s2 = dpt_alloc(K, sizeof(double), "normalizer sums");
    out->mean = dpt_alloc(K, sizeof(float), "normalizer mean");
    out->std = dpt_alloc(K, sizeof(float), "normalizer std");
    if (!s1 || !s2 || !out->mean || !out->std) {
        dpt_free(s1);
        dpt_free(s2);
        dpt_normalizer_free(out);
        return DPT_ENOMEM;
    }
    /* Two passes (mean, then centred second moment) in double: stable for pixel data.
     * Feature j belongs to statistic (j / per) % K; the loops walk the runs of per features
     * so that no element pays a division (two per element were 2 s of CIFAR-10's 6.5 s
     * load, perf 2026-12-07), adding in the same order as an element-wise loop. */
    const size_t R = dim / per; /* runs per example */
    for (size_t i = 0; i < train->n; i++) {
        const float *xr = train->x + i * dim;
        for (size_t r = 0; r < R; r++) {
            double *a = &s1[r % K];
            for (size_t e = 0; e < per; e++) *a += xr[r * per + e];
        }
    }
    double cnt = (double)train->n * (double)(dim / K);
    for (size_t c = 0; c < K; c++) s1[c] /= cnt;
    for (size_t i = 0; i < train->n; i++) {
        const float *xr = train->x + i * dim;
        for (size_t r = 0; r < R; r++) {
            const double m = s1[r % K];
            double *a = &s2[r % K];
            for (size_t e = 0; e < per; e++) {
                const double dv = xr[r * per + e] - m;
                *a += dv * dv;
            }
        }
    }
    for (size_t c = 0; c < K; c++) {
        double sd = sqrt(s2[c] / cnt);
        out->mean[c] = (float)s1[c];
        out->std[c] = (float)(sd < DPT_NORM_MIN_STD ? 1.0 : sd);
    }
    dpt_free(s1);
    dpt_free(s2);
    out->dim = dim;
    out->channels = per_channel == DPT_NORM_PER_FEATURE ? 0 : C;
    return DPT_OK;
}

dpt_status dpt_normalizer_apply(const dpt_normalizer *nz, dpt_dataset *d) {
    DPT_CHECK(nz && d && nz->mean && nz->std, DPT_EINVAL, "normalizer apply: not fitted");
    DPT_CHECK(d->dim == nz->dim, DPT_EINVAL,
              "%s: %zu features per example, but the normalizer was fitted on %zu", d->source,
              d->dim, nz->dim);
    size_t K = nz->channels ? nz->channels : nz->dim;
    size_t per = nz->channels ? nz->dim / nz->channels : 1;
    DPT_CHECK(per * K == nz->dim, DPT_EINVAL, "normalizer: %zu channels do not divide dim %zu",
              K, nz->dim);
    /* statistics may come from a file (a checkpoint's run record): a zero, negative or
     * non-finite std would turn the data into infinities or flip its sign */
    for (size_t c = 0; c < K; c++)
        DPT_CHECK(isfinite(nz->mean[c]) && isfinite(nz->std[c]) && nz->std[c] > 0, DPT_EINVAL,
                  "normalizer apply: mean[%zu] = %g, std[%zu] = %g: need a finite mean and a finite std > 0", c,
                  (double)nz->mean[c], c, (double)nz->std[c]);
    for (size_t i = 0; i < d->n; i++) {
        float *xr = d->x + i * d->dim;
        for (size_t c = 0; c < K; c++) {
            float m = nz->mean[c], inv = 1.0f / nz->std[c];
            for (size_t j = c * per; j < (c + 1) * per; j++) xr[j] = (xr[j] - m) * inv;
        }
    }
    return DPT_OK;
}
