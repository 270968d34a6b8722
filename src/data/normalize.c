/* Normalizers that use no statistic of the caller's data: the published constants of a
 * named dataset, and constants given by the caller (validated). Fitting on a training
 * split is in dataset.c (dpt_normalizer_fit); a differentially private fit is
 * dpt_dp_normalizer_fit (src/privacy/dp_norm.c). See docs/data.md for the sources. */
#include <math.h>
#include <string.h>

#include "dptrain/data.h"

/* ==== Published constants ==== */

typedef struct {
    const char *name;
    size_t channels;
    float mean[3], std[3];
} public_stats;

/* Per-channel mean and population standard deviation of the pixel values as each loader
 * returns them (IDX and CIFAR-10: pixel / 255; USPS: as stored in [-1, 1]). Fixed here,
 * before any run, so they carry no information about the data a run trains on. */
static const public_stats PUBLIC[] = {
    /* pytorch/examples, mnist/main.py: Normalize((0.1307,), (0.3081,)) */
    {"mnist", 1, {0.1307f}, {0.3081f}},
    /* train-images-idx3-ubyte.gz of the Debian package dataset-fashion-mnist (60000
     * images), computed for this table: mean 0.286041, std 0.353024 */
    {"fashion-mnist", 1, {0.2860f}, {0.3530f}},
    /* ESL zip.train (7291 images, values in [-1, 1]), computed for this table: mean
     * -0.491039, std 0.769241; usps-pooled uses the same constants */
    {"usps", 1, {-0.4910f}, {0.7692f}},
    {"usps-pooled", 1, {-0.4910f}, {0.7692f}},
    /* fb.resnet.torch, datasets/cifar10.lua ("computed from entire CIFAR-10 training
     * set"): mean {125.3, 123.0, 113.9}, std {63.0, 62.1, 66.7} on the 0..255 scale */
    {"cifar10", 3, {125.3f / 255.0f, 123.0f / 255.0f, 113.9f / 255.0f},
     {63.0f / 255.0f, 62.1f / 255.0f, 66.7f / 255.0f}},
};

dpt_status dpt_normalizer_public(const char *dataset, size_t dim, dpt_normalizer *out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_normalizer_public: out is NULL");
    memset(out, 0, sizeof *out);
    DPT_CHECK(dataset, DPT_EINVAL, "dpt_normalizer_public: dataset is NULL");
    for (size_t k = 0; k < sizeof PUBLIC / sizeof PUBLIC[0]; k++) {
        const public_stats *p = &PUBLIC[k];
        if (strcmp(p->name, dataset)) continue;
        DPT_CHECK(dim >= p->channels && dim % p->channels == 0, DPT_EINVAL,
                  "dpt_normalizer_public: dim %zu is not a multiple of %s's %zu channels", dim, dataset,
                  p->channels);
        return dpt_normalizer_from_values(dim, p->mean, p->std, p->channels, 0, out);
    }
    return dpt_set_error(DPT_EINVAL,
                         "dpt_normalizer_public: no published constants for dataset '%s' (known: mnist, "
                         "fashion-mnist, usps, usps-pooled, cifar10)", dataset);
}

/* ==== Caller's constants ==== */

dpt_status dpt_normalizer_from_values(size_t dim, const float *mean, const float *std, size_t k, int per_feature,
                                      dpt_normalizer *out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_normalizer_from_values: out is NULL");
    memset(out, 0, sizeof *out);
    DPT_CHECK(mean && std, DPT_EINVAL, "dpt_normalizer_from_values: mean or std is NULL");
    DPT_CHECK(dim >= 1 && k >= 1, DPT_EINVAL, "dpt_normalizer_from_values: dim %zu and k %zu must be >= 1", dim, k);
    if (per_feature)
        DPT_CHECK(k == dim, DPT_EINVAL, "dpt_normalizer_from_values: per_feature needs k == dim, got k %zu, dim %zu",
                  k, dim);
    else
        DPT_CHECK(dim % k == 0, DPT_EINVAL, "dpt_normalizer_from_values: k = %zu channels do not divide dim %zu", k,
                  dim);
    for (size_t c = 0; c < k; c++) {
        DPT_CHECK(isfinite(mean[c]), DPT_EINVAL, "dpt_normalizer_from_values: mean[%zu] = %g is not finite", c,
                  (double)mean[c]);
        DPT_CHECK(isfinite(std[c]) && std[c] > 0, DPT_EINVAL,
                  "dpt_normalizer_from_values: std[%zu] = %g must be finite and > 0", c, (double)std[c]);
    }
    out->mean = dpt_alloc(k, sizeof(float), "normalizer mean");
    out->std = dpt_alloc(k, sizeof(float), "normalizer std");
    if (!out->mean || !out->std) {
        dpt_normalizer_free(out);
        return DPT_ENOMEM;
    }
    memcpy(out->mean, mean, k * sizeof(float));
    memcpy(out->std, std, k * sizeof(float));
    out->dim = dim;
    out->channels = per_feature ? 0 : k;
    return DPT_OK;
}
