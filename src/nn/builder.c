/* Model builder: a model spec assembled one layer per call. Each call sets the layer up on
 * the current output shape exactly as dpt_model_new will (dpt_spec_item_setup), so a shape
 * that does not fit is refused by the call that adds it, and the builder is left as it was.
 * The result is the canonical spec string (what checkpoints store): "mlp:..." when the
 * layers are Linear layers with one activation between them on a flat input, otherwise
 * "cnn:CxHxW:...". */
#include "nn_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct dpt_model_builder {
    size_t in_shape[3];
    size_t shape[3];                       /* output shape of the layers so far */
    size_t n_items;
    dpt_spec_item items[DPT_SPEC_MAX_ITEMS];
    size_t out_shape[DPT_SPEC_MAX_ITEMS][3]; /* output shape after item l */
    int open;                              /* a residual group is open */
    size_t res_first;                      /* its first item (== n_items while empty) */
    size_t res_shape[3];                   /* its input shape */
    char spec[DPT_MODEL_SPEC_MAX + 1];     /* canonical spec of the layers so far */
};

/* ==== Canonical spec ==== */

static int is_activation(dpt_layer_kind k) {
    return k == DPT_LAYER_RELU || k == DPT_LAYER_GELU || k == DPT_LAYER_TANH || k == DPT_LAYER_SIGMOID ||
           k == DPT_LAYER_IDENTITY;
}

/* "mlp:D-K1-...-KL[:act][:nobias]" when the items are fc, act, fc, ..., fc with one
 * activation kind, no residual group and one bias setting on a flat input; else 0. */
static int format_mlp(const dpt_model_builder *b, char *buf, size_t cap) {
    if (b->in_shape[0] != 1 || b->in_shape[1] != 1 || b->n_items % 2 == 0) return 0;
    const dpt_spec_item *it = b->items;
    for (size_t l = 0; l < b->n_items; l++) {
        if (it[l].res_open || it[l].res_close) return 0;
        if (l % 2 == 0 && (it[l].kind != DPT_LAYER_LINEAR || it[l].nobias != it[0].nobias)) return 0;
        if (l % 2 == 1 && (!is_activation(it[l].kind) || it[l].kind != it[1].kind)) return 0;
    }
    size_t w = (size_t)snprintf(buf, cap, "mlp:%zu", b->in_shape[2]);
    for (size_t l = 0; l < b->n_items && w < cap; l += 2) w += (size_t)snprintf(buf + w, cap - w, "-%zu", it[l].n);
    if (b->n_items > 1 && w < cap) w += (size_t)snprintf(buf + w, cap - w, ":%s", dpt_layer_kind_name(it[1].kind));
    if (it[0].nobias && w < cap) w += (size_t)snprintf(buf + w, cap - w, ":nobias");
    return w < cap ? 1 : -1;
}

/* Sequence layers other than toseq (which reads an image) */
static int is_seq_kind(dpt_layer_kind k) {
    return k == DPT_LAYER_EMBEDDING || k == DPT_LAYER_LAYERNORM || k == DPT_LAYER_RMSNORM ||
           k == DPT_LAYER_SEQLINEAR || k == DPT_LAYER_ATTENTION || k == DPT_LAYER_MEANPOOL || k == DPT_LAYER_CLSPOOL;
}

/* Writes the canonical spec of items [0, n) into buf; -1 when it does not fit in cap. */
static int format_spec(const dpt_model_builder *b, char *buf, size_t cap) {
    int r = format_mlp(b, buf, cap);
    if (r) return r;
    /* "seq:T" (token ids) or "seq:TxD" when a sequence layer reads the input (the first
     * layer other than activations) */
    size_t first = 0;
    while (first < b->n_items && is_activation(b->items[first].kind)) first++;
    const int seq = b->in_shape[0] == 1 && first < b->n_items && is_seq_kind(b->items[first].kind);
    /* ":nobias" once when no weight layer has a bias, else "nobias" on the items without */
    size_t n_weight = 0, n_nobias = 0;
    for (size_t l = 0; l < b->n_items; l++)
        if (b->items[l].kind == DPT_LAYER_LINEAR || b->items[l].kind == DPT_LAYER_CONV2D ||
            b->items[l].kind == DPT_LAYER_SEQLINEAR) {
            n_weight++;
            n_nobias += b->items[l].nobias != 0;
        }
    const int global = n_weight > 0 && n_nobias == n_weight;
    size_t w;
    if (seq && b->in_shape[2] == 1) w = (size_t)snprintf(buf, cap, "seq:%zu:", b->in_shape[1]);
    else if (seq) w = (size_t)snprintf(buf, cap, "seq:%zux%zu:", b->in_shape[1], b->in_shape[2]);
    else w = (size_t)snprintf(buf, cap, "cnn:%zux%zux%zu:", b->in_shape[0], b->in_shape[1], b->in_shape[2]);
    for (size_t l = 0; l < b->n_items && w < cap; l++) {
        dpt_spec_item it = b->items[l];
        if (global) it.nobias = 0;
        if (l && w < cap) buf[w++] = ',';
        if (w < cap) w += (size_t)dpt_spec_item_format(&it, buf + w, cap - w);
    }
    if (global && w < cap) w += (size_t)snprintf(buf + w, cap - w, ":nobias");
    return w < cap ? 1 : -1;
}

/* ==== Adding layers ==== */

dpt_status dpt_model_builder_new(size_t c, size_t h, size_t w, dpt_model_builder **out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_model_builder_new: out is NULL");
    *out = NULL;
    size_t n;
    DPT_CHECK(c >= 1 && h >= 1 && w >= 1, DPT_EINVAL,
              "dpt_model_builder_new: the input shape c, h, w must be >= 1, got (%zu, %zu, %zu)", c, h, w);
    DPT_CHECK(!dpt_mul_overflow(c, h, &n) && !dpt_mul_overflow(n, w, &n) && n <= DPT_SPEC_MAX_WIDTH, DPT_EINVAL,
              "dpt_model_builder_new: the input shape (%zu, %zu, %zu) has more than %zu values", c, h, w,
              DPT_SPEC_MAX_WIDTH);
    dpt_model_builder *b = dpt_alloc(1, sizeof *b, "model builder");
    if (!b) return DPT_ENOMEM;
    b->in_shape[0] = b->shape[0] = c;
    b->in_shape[1] = b->shape[1] = h;
    b->in_shape[2] = b->shape[2] = w;
    *out = b;
    return DPT_OK;
}

void dpt_model_builder_free(dpt_model_builder *b) { dpt_free(b); }

/* Appends `it` after checking it on the current shape; on any error b is unchanged and
 * the message starts with the calling function's name and the layer's position. */
static dpt_status add_item(dpt_model_builder *b, const char *fn, dpt_spec_item it) {
    DPT_CHECK(b, DPT_EINVAL, "%s: b is NULL", fn);
    const size_t l = b->n_items;
    DPT_CHECK(l < DPT_SPEC_MAX_ITEMS, DPT_EINVAL, "%s: a model has at most %d layers", fn, DPT_SPEC_MAX_ITEMS);
    if (b->open && b->res_first == l) it.res_open = 1;
    dpt_layer L;
    memset(&L, 0, sizeof L);
    dpt_status st = dpt_spec_item_setup(&L, &it, b->shape, 1, 1);
    if (st != DPT_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", dpt_last_error());
        return dpt_set_error(st, "%s: layer %zu on a %zux%zux%zu input: %s", fn, l + 1, b->shape[0], b->shape[1],
                             b->shape[2], why);
    }
    DPT_CHECK(L.out_dim >= 1 && L.out_dim <= DPT_SPEC_MAX_WIDTH, DPT_EINVAL,
              "%s: layer %zu would have %zu outputs (at most %zu)", fn, l + 1, L.out_dim, DPT_SPEC_MAX_WIDTH);
    b->items[l] = it;
    b->n_items++;
    char spec[sizeof b->spec];
    if (format_spec(b, spec, sizeof spec) < 0) {
        b->n_items--;
        return dpt_set_error(DPT_EINVAL, "%s: layer %zu would make the model spec longer than %d characters", fn,
                             l + 1, DPT_MODEL_SPEC_MAX);
    }
    memcpy(b->spec, spec, sizeof spec);
    memcpy(b->out_shape[l], L.out_shape, sizeof L.out_shape);
    memcpy(b->shape, L.out_shape, sizeof L.out_shape);
    return DPT_OK;
}

/* every number the spec holds must read back (1..DPT_SPEC_MAX_WIDTH; pad from 0) */
static dpt_status check_num(const char *fn, const char *name, size_t v, size_t lo) {
    DPT_CHECK(v >= lo && v <= DPT_SPEC_MAX_WIDTH, DPT_EINVAL, "%s: %s must be in [%zu, %zu], got %zu", fn, name, lo,
              DPT_SPEC_MAX_WIDTH, v);
    return DPT_OK;
}
#define CHECK_NUM(fn, name, v, lo) DPT_TRY(check_num(fn, name, v, lo))

dpt_status dpt_model_builder_linear(dpt_model_builder *b, size_t out_features, int bias) {
    CHECK_NUM("dpt_model_builder_linear", "out_features", out_features, 1);
    dpt_spec_item it = {.kind = DPT_LAYER_LINEAR, .n = out_features, .nobias = !bias};
    return add_item(b, "dpt_model_builder_linear", it);
}

dpt_status dpt_model_builder_activation(dpt_model_builder *b, dpt_layer_kind kind) {
    DPT_CHECK(is_activation(kind), DPT_EINVAL,
              "dpt_model_builder_activation: kind %d is not an activation (DPT_LAYER_RELU, _GELU, _TANH, _SIGMOID "
              "or _IDENTITY)",
              (int)kind);
    dpt_spec_item it = {.kind = kind};
    return add_item(b, "dpt_model_builder_activation", it);
}

dpt_status dpt_model_builder_conv2d(dpt_model_builder *b, size_t out_channels, size_t k, size_t stride, size_t pad,
                                    int bias) {
    static const char *F = "dpt_model_builder_conv2d";
    CHECK_NUM(F, "out_channels", out_channels, 1);
    CHECK_NUM(F, "k", k, 1);
    CHECK_NUM(F, "stride", stride, 1);
    CHECK_NUM(F, "pad", pad, 0);
    dpt_spec_item it = {.kind = DPT_LAYER_CONV2D, .n = out_channels, .k = k, .stride = stride, .pad = pad,
                        .nobias = !bias};
    return add_item(b, F, it);
}

static dpt_status add_pool(dpt_model_builder *b, const char *fn, dpt_layer_kind kind, size_t k, size_t stride) {
    CHECK_NUM(fn, "k", k, 1);
    if (stride == 0) stride = k;
    CHECK_NUM(fn, "stride", stride, 1);
    dpt_spec_item it = {.kind = kind, .k = k, .stride = stride};
    return add_item(b, fn, it);
}

dpt_status dpt_model_builder_maxpool(dpt_model_builder *b, size_t k, size_t stride) {
    return add_pool(b, "dpt_model_builder_maxpool", DPT_LAYER_MAXPOOL, k, stride);
}

dpt_status dpt_model_builder_avgpool(dpt_model_builder *b, size_t k, size_t stride) {
    return add_pool(b, "dpt_model_builder_avgpool", DPT_LAYER_AVGPOOL, k, stride);
}

dpt_status dpt_model_builder_groupnorm(dpt_model_builder *b, size_t groups) {
    CHECK_NUM("dpt_model_builder_groupnorm", "groups", groups, 1);
    dpt_spec_item it = {.kind = DPT_LAYER_GROUPNORM, .n = groups};
    return add_item(b, "dpt_model_builder_groupnorm", it);
}

dpt_status dpt_model_builder_flatten(dpt_model_builder *b) {
    dpt_spec_item it = {.kind = DPT_LAYER_FLATTEN};
    return add_item(b, "dpt_model_builder_flatten", it);
}

dpt_status dpt_model_builder_item(dpt_model_builder *b, const char *item) {
    static const char *F = "dpt_model_builder_item";
    DPT_CHECK(item, DPT_EINVAL, "%s: item is NULL", F);
    dpt_spec_item it;
    dpt_status st = dpt_spec_item_parse(item, &it);
    if (st != DPT_OK) return dpt_error_context(st, F);
    DPT_CHECK(!it.res_open && !it.res_close, DPT_EINVAL,
              "%s: '%s': give residual groups with dpt_model_builder_residual_begin and _end, not brackets", F, item);
    DPT_CHECK(it.kind != DPT_LAYER_SCATTER || (b && b->n_items == 0), DPT_EINVAL,
              "%s: '%s': the scattering layer can only be the first layer", F, item);
    return add_item(b, F, it);
}

/* ==== Residual groups ==== */

dpt_status dpt_model_builder_residual_begin(dpt_model_builder *b) {
    DPT_CHECK(b, DPT_EINVAL, "dpt_model_builder_residual_begin: b is NULL");
    DPT_CHECK(!b->open, DPT_EINVAL,
              "dpt_model_builder_residual_begin: a residual group is already open (from layer %zu); groups cannot "
              "be nested: call dpt_model_builder_residual_end first",
              b->res_first + 1);
    b->open = 1;
    b->res_first = b->n_items;
    memcpy(b->res_shape, b->shape, sizeof b->shape);
    return DPT_OK;
}

dpt_status dpt_model_builder_residual_end(dpt_model_builder *b) {
    static const char *F = "dpt_model_builder_residual_end";
    DPT_CHECK(b, DPT_EINVAL, "%s: b is NULL", F);
    DPT_CHECK(b->open, DPT_EINVAL, "%s: no residual group is open (call dpt_model_builder_residual_begin first)", F);
    DPT_CHECK(b->n_items > b->res_first, DPT_EINVAL, "%s: the residual group has no layers", F);
    const size_t l = b->n_items - 1;
    dpt_layer L;
    memset(&L, 0, sizeof L);
    L.kind = b->items[l].kind;
    memcpy(L.out_shape, b->out_shape[l], sizeof L.out_shape);
    dpt_status st = dpt_spec_residual_check(b->res_shape, &L);
    if (st != DPT_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", dpt_last_error());
        return dpt_set_error(st, "%s: layers %zu..%zu: %s", F, b->res_first + 1, l + 1, why);
    }
    b->items[l].res_close = 1;
    char spec[sizeof b->spec];
    if (format_spec(b, spec, sizeof spec) < 0) {
        b->items[l].res_close = 0;
        return dpt_set_error(DPT_EINVAL, "%s: the model spec would be longer than %d characters", F,
                             DPT_MODEL_SPEC_MAX);
    }
    memcpy(b->spec, spec, sizeof spec);
    b->open = 0;
    return DPT_OK;
}

/* ==== Results ==== */

const char *dpt_model_builder_spec(const dpt_model_builder *b) {
    if (!b) {
        dpt_set_error(DPT_EINVAL, "dpt_model_builder_spec: b is NULL");
        return NULL;
    }
    if (!b->n_items) {
        dpt_set_error(DPT_EINVAL, "dpt_model_builder_spec: the model has no layers yet");
        return NULL;
    }
    if (b->open) {
        dpt_set_error(DPT_EINVAL,
                      "dpt_model_builder_spec: the residual group opened before layer %zu is not closed "
                      "(dpt_model_builder_residual_end)",
                      b->res_first + 1);
        return NULL;
    }
    return b->spec;
}

dpt_status dpt_model_builder_shape(const dpt_model_builder *b, size_t shape[3]) {
    DPT_CHECK(b && shape, DPT_EINVAL, "dpt_model_builder_shape: %s is NULL", b ? "shape" : "b");
    memcpy(shape, b->shape, sizeof b->shape);
    return DPT_OK;
}

dpt_status dpt_model_builder_build(const dpt_model_builder *b, size_t max_batch, int threads, dpt_model **out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_model_builder_build: out is NULL");
    *out = NULL;
    const char *spec = dpt_model_builder_spec(b);
    if (!spec) return dpt_error_context(DPT_EINVAL, "dpt_model_builder_build");
    return dpt_model_new(spec, max_batch, threads, out);
}
