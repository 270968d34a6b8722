/* Models: an ordered list of layers over one flat parameter buffer theta [P].
 * act[l] is the input of layer l and act[l + 1] its output; dact[l] their cotangents.
 * Everything here dispatches through dpt_layer_ops: no code in this file knows which
 * kind of layer it is driving (convolutions plug in by providing their own ops). */
#include "nn_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

/* ==== construction ==== */

static float *alloc_batch(size_t max_batch, size_t dim, const char *what) {
    size_t n;
    if (dpt_mul_overflow(max_batch, dim, &n)) {
        dpt_set_error(DPT_ENOMEM, "%s: size overflow (%zu x %zu)", what, max_batch, dim);
        return NULL;
    }
    return dpt_alloc(n, sizeof(float), what);
}

/* mlp/ae: Linear, activation, Linear, ..., Linear */
static void build_mlp(dpt_model *m, const dpt_spec *sp) {
    for (size_t l = 0; l < m->n_layers; l++) {
        dpt_layer *L = &m->layers[l];
        size_t j = l / 2; /* index of the Linear layer this belongs to */
        if (l % 2 == 0) {
            dpt_layer_linear_setup(L, sp->widths[j], sp->widths[j + 1], sp->has_bias);
            snprintf(L->name, sizeof L->name, "fc%zu", j + 1);
        } else {
            dpt_layer_act_setup(L, sp->act, sp->widths[j + 1]);
            snprintf(L->name, sizeof L->name, "%s%zu", dpt_layer_kind_name(sp->act), j + 1);
        }
    }
}

dpt_status dpt_spec_item_setup(dpt_layer *L, const dpt_spec_item *it, const size_t in_shape[3], int has_bias,
                               size_t max_batch) {
    const int bias = has_bias && !it->nobias;
    const size_t n_in = in_shape[0] * in_shape[1] * in_shape[2];
    switch (it->kind) {
    case DPT_LAYER_CONV2D: {
        DPT_TRY(dpt_layer_conv_setup(L, in_shape, it->n, it->k, it->stride, it->pad, bias, max_batch));
        if (it->ws) dpt_layer_conv_set_ws(L);
        return DPT_OK;
    }
    case DPT_LAYER_MAXPOOL:
    case DPT_LAYER_AVGPOOL: return dpt_layer_pool_setup(L, it->kind, in_shape, it->k, it->stride);
    case DPT_LAYER_GROUPNORM: return dpt_layer_groupnorm_setup(L, in_shape, it->n);
    case DPT_LAYER_CHANNEL_AFFINE: return dpt_layer_channel_affine_setup(L, in_shape);
    case DPT_LAYER_SCATTER: return dpt_layer_scatter_setup(L, in_shape, it->k, it->n);
    case DPT_LAYER_FLATTEN: dpt_layer_flatten_setup(L, in_shape); return DPT_OK;
    case DPT_LAYER_LINEAR: dpt_layer_linear_setup(L, n_in, it->n, bias); return DPT_OK;
    case DPT_LAYER_EMBEDDING:
        DPT_TRY(dpt_layer_embedding_setup(L, in_shape, it->n, it->k, !it->nopos));
        return it->has_pad ? dpt_layer_embedding_set_pad(L, it->pad_id) : DPT_OK;
    case DPT_LAYER_LAYERNORM:
    case DPT_LAYER_RMSNORM: return dpt_layer_seqnorm_setup(L, it->kind, in_shape);
    case DPT_LAYER_SEQLINEAR: return dpt_layer_seqlinear_setup(L, in_shape, it->n, bias);
    case DPT_LAYER_MEANPOOL:
    case DPT_LAYER_CLSPOOL: return dpt_layer_seqpool_setup(L, it->kind, in_shape);
    case DPT_LAYER_ATTENTION: return dpt_layer_attention_setup(L, in_shape, it->n, it->causal);
    case DPT_LAYER_TOSEQ: return dpt_layer_toseq_setup(L, in_shape, it->cls, !it->nopos);
    default:
        dpt_layer_act_setup(L, it->kind, n_in);
        memcpy(L->in_shape, in_shape, sizeof L->in_shape);
        memcpy(L->out_shape, in_shape, sizeof L->out_shape);
        return DPT_OK;
    }
}

dpt_status dpt_spec_residual_check(const size_t in_shape[3], const dpt_layer *L) {
    DPT_CHECK(!memcmp(in_shape, L->out_shape, sizeof L->out_shape), DPT_EINVAL,
              "the residual group maps shape %zux%zux%zu to %zux%zux%zu; a residual connection needs the same shape "
              "in and out",
              in_shape[0], in_shape[1], in_shape[2], L->out_shape[0], L->out_shape[1], L->out_shape[2]);
    DPT_CHECK(L->kind != DPT_LAYER_TANH && L->kind != DPT_LAYER_SIGMOID, DPT_EINVAL,
              "a residual group cannot end with %s (put the activation after the group)",
              dpt_layer_kind_name(L->kind));
    return DPT_OK;
}

/* cnn: one layer per item, shapes propagated from the input shape. Layer names count
 * per kind: conv1, conv2, relu1, pool1, gn1, fc1, ... A residual group [a .. b] makes
 * the model add the group's input act[a] to layer b's output. */
static dpt_status build_cnn(dpt_model *m, const char *spec, const dpt_spec *sp) {
    size_t shape[3] = {sp->in_shape[0], sp->in_shape[1], sp->in_shape[2]}, res_shape[3] = {0, 0, 0}, dim;
    DPT_CHECK(!dpt_mul_overflow(shape[0], shape[1], &dim) && !dpt_mul_overflow(dim, shape[2], &dim) &&
                  dim <= DPT_SPEC_MAX_WIDTH,
              DPT_EINVAL, "model spec '%s': input %zux%zux%zu is larger than %zu values", spec, shape[0], shape[1],
              shape[2], DPT_SPEC_MAX_WIDTH);
    size_t n_conv = 0, n_act = 0, n_pool = 0, n_gn = 0, n_fc = 0, n_flat = 0, n_scat = 0, res_src = 0;
    size_t n_emb = 0, n_ln = 0, n_rms = 0, n_plin = 0, n_spool = 0, n_attn = 0, n_fbn = 0, n_toseq = 0;
    for (size_t l = 0; l < sp->n_items; l++) {
        const dpt_spec_item *it = &sp->items[l];
        dpt_layer *L = &m->layers[l];
        if (it->res_open) {
            res_src = l + 1; /* act[l] is the group's input */
            memcpy(res_shape, shape, sizeof shape);
        }
        dpt_status st = dpt_spec_item_setup(L, it, shape, sp->has_bias, m->max_batch);
        switch (it->kind) {
        case DPT_LAYER_CONV2D: snprintf(L->name, sizeof L->name, "conv%zu", ++n_conv); break;
        case DPT_LAYER_MAXPOOL:
        case DPT_LAYER_AVGPOOL: snprintf(L->name, sizeof L->name, "pool%zu", ++n_pool); break;
        case DPT_LAYER_GROUPNORM: snprintf(L->name, sizeof L->name, "gn%zu", ++n_gn); break;
        case DPT_LAYER_FLATTEN: snprintf(L->name, sizeof L->name, "flatten%zu", ++n_flat); break;
        case DPT_LAYER_SCATTER:
            snprintf(L->name, sizeof L->name, "scatter%zu", ++n_scat);
            /* fixed and without an input gradient: nothing below it could be trained */
            if (st == DPT_OK && l > 0)
                st = dpt_set_error(DPT_EINVAL, "the scattering layer has no gradient with respect to its input: it "
                                   "must be the first layer");
            break;
        case DPT_LAYER_LINEAR: snprintf(L->name, sizeof L->name, "fc%zu", ++n_fc); break;
        case DPT_LAYER_EMBEDDING: snprintf(L->name, sizeof L->name, "emb%zu", ++n_emb); break;
        case DPT_LAYER_LAYERNORM: snprintf(L->name, sizeof L->name, "ln%zu", ++n_ln); break;
        case DPT_LAYER_RMSNORM: snprintf(L->name, sizeof L->name, "rms%zu", ++n_rms); break;
        case DPT_LAYER_SEQLINEAR: snprintf(L->name, sizeof L->name, "plin%zu", ++n_plin); break;
        case DPT_LAYER_MEANPOOL:
        case DPT_LAYER_CLSPOOL: snprintf(L->name, sizeof L->name, "seqpool%zu", ++n_spool); break;
        case DPT_LAYER_ATTENTION: snprintf(L->name, sizeof L->name, "attn%zu", ++n_attn); break;
        case DPT_LAYER_CHANNEL_AFFINE: snprintf(L->name, sizeof L->name, "fbn%zu", ++n_fbn); break;
        case DPT_LAYER_TOSEQ: snprintf(L->name, sizeof L->name, "toseq%zu", ++n_toseq); break;
        default: snprintf(L->name, sizeof L->name, "%s%zu", dpt_layer_kind_name(it->kind), ++n_act); break;
        }
        if (st == DPT_OK && it->res_close) {
            st = dpt_spec_residual_check(res_shape, L);
            L->residual_from = res_src;
        }
        if (st != DPT_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", dpt_last_error());
            return dpt_set_error(st, "model spec '%s': layer %zu (%s): %s", spec, l + 1, L->name, why);
        }
        DPT_CHECK(L->out_dim >= 1 && L->out_dim <= DPT_SPEC_MAX_WIDTH, DPT_EINVAL,
                  "model spec '%s': layer %zu (%s) has %zu outputs (at most %zu)", spec, l + 1, L->name, L->out_dim,
                  DPT_SPEC_MAX_WIDTH);
        memcpy(shape, L->out_shape, sizeof shape);
    }
    return DPT_OK;
}

/* ==== padding mask ==== */

/* A model whose embedding (layer 0) has a pad id masks padding (docs/nn.md "Padding masks"):
 * until the sequence is pooled, every layer must act on each position alone (norms, plin,
 * activations) or be one that reads the mask (attention, meanpool, clspool): a layer that
 * mixed positions otherwise (fc, flatten, conv) would see the padded ones. Sets pad_T and
 * pad_out; the mask buffer is allocated and attached by pad_attach. */
static dpt_status pad_check(dpt_model *m) {
    const dpt_layer *E = &m->layers[0];
    if (E->kind != DPT_LAYER_EMBEDDING || !E->has_pad) return DPT_OK;
    m->pad_T = E->out_shape[1];
    m->pad_out = 1;
    for (size_t l = 1; l < m->n_layers && m->pad_out; l++) {
        const dpt_layer *L = &m->layers[l];
        switch (L->kind) {
        case DPT_LAYER_MEANPOOL:
        case DPT_LAYER_CLSPOOL: m->pad_out = 0; break;
        case DPT_LAYER_LAYERNORM: case DPT_LAYER_RMSNORM: case DPT_LAYER_SEQLINEAR: case DPT_LAYER_ATTENTION:
        case DPT_LAYER_RELU: case DPT_LAYER_GELU: case DPT_LAYER_TANH: case DPT_LAYER_SIGMOID:
        case DPT_LAYER_IDENTITY: break;
        default:
            return dpt_set_error(DPT_EINVAL, "model spec '%s': layer %zu (%s) reads every position of the padded "
                                 "sequence (%s has a pad id): pool it first (meanpool, clspool); before the pooling "
                                 "only ln, rms, plin, attn and activations may follow a padding embedding",
                                 m->spec, l + 1, L->name, E->name);
        }
    }
    return DPT_OK;
}

/* The mask buffer [max_batch, pad_T], given to the embedding (which writes it) and to the
 * layers that read it (all before the pooling, so with the embedding's T). */
static dpt_status pad_attach(dpt_model *m) {
    if (!m->pad_T) return DPT_OK;
    m->pad_mask = dpt_alloc2(m->max_batch, m->pad_T, 1, "padding mask");
    if (!m->pad_mask) return DPT_ENOMEM;
    for (size_t l = 0; l < m->n_layers; l++) {
        dpt_layer *L = &m->layers[l];
        if (l == 0 || L->kind == DPT_LAYER_ATTENTION || L->kind == DPT_LAYER_MEANPOOL || L->kind == DPT_LAYER_CLSPOOL)
            L->pad_mask = m->pad_mask;
        if (L->kind == DPT_LAYER_MEANPOOL || L->kind == DPT_LAYER_CLSPOOL) break;
    }
    return DPT_OK;
}

/* rows [B, pad_T] of K = dim / pad_T values: zero the padded ones (a sequence output) */
static void pad_zero_rows(const dpt_model *m, float *y, size_t B, size_t dim) {
    const size_t K = dim / m->pad_T;
    for (size_t r = 0; r < B * m->pad_T; r++)
        if (m->pad_mask[r]) memset(y + r * K, 0, K * sizeof *y);
}

int dpt_model_pad_id(const dpt_model *m, size_t *pad_id) {
    if (!m || !m->pad_T) return 0;
    if (pad_id) *pad_id = m->layers[0].pad_id;
    return 1;
}

dpt_status dpt_model_new(const char *spec, size_t max_batch, int threads, dpt_model **out) {
    DPT_CHECK(out, DPT_EINVAL, "model: NULL output");
    *out = NULL;
    dpt_spec sp;
    DPT_TRY(dpt_spec_parse(spec, &sp));
    DPT_CHECK(max_batch >= 1, DPT_EINVAL, "model '%s': max_batch must be at least 1", spec);
    DPT_CHECK(threads >= 0 && threads <= 1024, DPT_EINVAL, "model '%s': threads must be in [0, 1024] (0 = all cores), "
              "got %d", spec, threads);
    DPT_CHECK(strlen(spec) < sizeof ((dpt_model *)0)->spec, DPT_EINVAL, "model spec '%.40s...': longer than %zu characters",
              spec, sizeof ((dpt_model *)0)->spec - 1);

    dpt_model *m = dpt_alloc(1, sizeof *m, "model");
    if (!m) return DPT_ENOMEM;
    strcpy(m->spec, spec);
    m->max_batch = max_batch;
    m->threads = dpt_threads_resolve(threads);
    dpt_status st = DPT_ENOMEM;
    m->n_layers = sp.cnn ? sp.n_items : 2 * (sp.n_widths - 1) - 1; /* Linear, act, ..., Linear */
    m->layers = dpt_alloc(m->n_layers, sizeof *m->layers, "model layers");
    m->act = dpt_alloc(m->n_layers + 1, sizeof *m->act, "model activations");
    m->dact = dpt_alloc(m->n_layers + 1, sizeof *m->dact, "model cotangents");
    m->tangent_keep = dpt_alloc(m->n_layers + 1, sizeof *m->tangent_keep, "model tangents");
    if (!m->layers || !m->act || !m->dact || !m->tangent_keep) goto fail;
    if (sp.cnn) {
        st = build_cnn(m, spec, &sp);
        if (st == DPT_OK) st = pad_check(m);
        if (st != DPT_OK) goto fail;
        st = DPT_ENOMEM;
    } else {
        build_mlp(m, &sp);
    }
    m->in_dim = m->layers[0].in_dim;
    m->out_dim = m->layers[m->n_layers - 1].out_dim;

    /* parameter layout (P cannot overflow: mlp widths <= 2^24 with <= 64 layers; cnn
     * layers <= 64 with channels and sizes <= 2^24 each, checked by the builder) */
    size_t P = 0, max_dim = m->in_dim, max_scratch = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        dpt_layer *L = &m->layers[l];
        L->param_offset = P;
        L->threads = m->threads;
        P += L->n_params;
        if (L->out_dim > max_dim) max_dim = L->out_dim;
        size_t s = L->in_dim > L->out_dim ? L->in_dim : L->out_dim, need;
        if (dpt_mul_overflow(s, max_batch, &s)) s = SIZE_MAX;
        need = s > L->scratch_need ? s : L->scratch_need;
        if (need > max_scratch) max_scratch = need;
    }
    m->n_params = P;
    /* What the buffers below take together, against the machine's memory: a model that
     * cannot fit is refused here, before gigabytes are reserved and then touched (Linux
     * overcommits: the process would be killed by the OOM killer, not get an error). */
    double floats = 2.0 * (double)P + (double)max_scratch + 2.0 * (double)max_batch * (double)max_dim;
    for (size_t l = 0; l <= m->n_layers; l++)
        floats += 2.0 * (double)max_batch * (double)(l == 0 ? m->in_dim : m->layers[l - 1].out_dim);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double have = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (have > 0 && 4.0 * floats > have) {
        st = dpt_set_error(DPT_ENOMEM, "model '%s' needs at least %.3g GB (%zu parameters, their gradient and the "
                           "activations of a batch of %zu), more than this machine's %.3g GB of memory",
                           spec, 4.0 * floats / 1e9, P, max_batch, have / 1e9);
        goto fail;
    }
    m->theta = dpt_alloc(P, sizeof(float), "model parameters");
    m->grad = dpt_alloc(P, sizeof(float), "model gradient");
    m->scratch = alloc_batch(1, max_scratch, "layer scratch");
    m->tangent[0] = alloc_batch(max_batch, max_dim, "model tangents");
    m->tangent[1] = alloc_batch(max_batch, max_dim, "model tangents");
    if (!m->theta || !m->grad || !m->scratch || !m->tangent[0] || !m->tangent[1]) goto fail;
    if (pad_attach(m) != DPT_OK) goto fail;
    for (size_t l = 0; l <= m->n_layers; l++) {
        size_t dim = l == 0 ? m->in_dim : m->layers[l - 1].out_dim;
        m->act[l] = alloc_batch(max_batch, dim, "model activations");
        m->dact[l] = alloc_batch(max_batch, dim, "model cotangents");
        if (!m->act[l] || !m->dact[l]) goto fail;
    }
    /* jvp keeps the tangents of residual sources (the ping-pong buffers would lose them) */
    for (size_t l = 0; l < m->n_layers; l++) {
        size_t r = m->layers[l].residual_from;
        if (r && !m->tangent_keep[r - 1]) {
            m->tangent_keep[r - 1] = alloc_batch(max_batch, r == 1 ? m->in_dim : m->layers[r - 2].out_dim,
                                                 "model tangents");
            if (!m->tangent_keep[r - 1]) goto fail;
        }
    }
    /* views: each layer's parameter tensors are slices of theta, laid out by its table */
    for (size_t l = 0; l < m->n_layers; l++) {
        dpt_layer *L = &m->layers[l];
        L->scratch = m->scratch;
        size_t nt = L->ops->n_tensors ? L->ops->n_tensors(L) : 0;
        for (size_t k = 0; k < nt; k++) {
            dpt_param_tensor t;
            L->ops->tensor(L, k, &t);
            if (t.role == DPT_TENSOR_BIAS && L->kind != DPT_LAYER_GROUPNORM && L->kind != DPT_LAYER_CHANNEL_AFFINE)
                L->b = m->theta + t.offset;
            else if (k == 0) L->w = m->theta + t.offset; /* GroupNorm, fbn: w = [gamma, beta] */
        }
    }
    /* fixed internal state (a scattering layer's filters and FFT plans) */
    for (size_t l = 0; l < m->n_layers; l++) {
        dpt_layer *L = &m->layers[l];
        if (L->ops->attach && (st = L->ops->attach(L)) != DPT_OK) goto fail;
    }
    st = DPT_ENOMEM;
    /* a model without caches is still correct, only slower: ignore a failed allocation */
    if (dpt_model_unfold_cache(m, DPT_UNFOLD_CACHE_DEFAULT) != DPT_OK) (void)dpt_model_unfold_cache(m, 0);
    *out = m;
    return DPT_OK;
fail:
    dpt_model_free(m);
    return st;
}

static void free_unfold_caches(dpt_model *m) {
    if (!m->layers) return;
    for (size_t l = 0; l < m->n_layers; l++) {
        dpt_layer *L = &m->layers[l];
        if (!L->ucache) continue;
        dpt_free(L->ucache->cols);
        dpt_free(L->ucache);
        L->ucache = NULL;
    }
}

dpt_status dpt_model_unfold_cache(dpt_model *m, size_t max_bytes) {
    DPT_CHECK(m, DPT_EINVAL, "model unfold cache: NULL model");
    free_unfold_caches(m);
    size_t used = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        dpt_layer *L = &m->layers[l];
        size_t per = dpt_layer_conv_unfold_floats(L), n;
        if (per == 0) continue;
        if (dpt_mul_overflow(per, m->max_batch, &n) || n > (max_bytes - used) / sizeof(float)) continue;
        L->ucache = dpt_alloc(1, sizeof *L->ucache, "conv unfold cache");
        if (L->ucache) L->ucache->cols = dpt_alloc(n, sizeof(float), "conv unfold cache");
        if (!L->ucache || !L->ucache->cols) {
            free_unfold_caches(m);
            return DPT_ENOMEM;
        }
        L->ucache->cap = m->max_batch;
        L->ucache->x = NULL; /* nothing cached yet */
        L->ucache->B = 0;
        L->ucache->pend = NULL;
        L->ucache->pend_B = 0;
        used += n * sizeof(float);
    }
    return DPT_OK;
}

size_t dpt_model_unfold_cache_bytes(const dpt_model *m) {
    size_t b = 0;
    if (m && m->layers)
        for (size_t l = 0; l < m->n_layers; l++)
            if (m->layers[l].ucache) b += m->layers[l].ucache->cap * dpt_layer_conv_unfold_floats(&m->layers[l]) * sizeof(float);
    return b;
}

void dpt_model_free(dpt_model *m) {
    if (!m) return;
    free_unfold_caches(m);
    if (m->layers)
        for (size_t l = 0; l < m->n_layers; l++)
            if (m->layers[l].ops && m->layers[l].ops->detach) m->layers[l].ops->detach(&m->layers[l]);
    if (m->act)
        for (size_t l = 0; l <= m->n_layers; l++) dpt_free(m->act[l]);
    if (m->dact)
        for (size_t l = 0; l <= m->n_layers; l++) dpt_free(m->dact[l]);
    if (m->tangent_keep)
        for (size_t l = 0; l <= m->n_layers; l++) dpt_free(m->tangent_keep[l]);
    dpt_free(m->tangent_keep);
    dpt_free(m->act);
    dpt_free(m->dact);
    dpt_free(m->layers);
    dpt_free(m->theta);
    dpt_free(m->grad);
    dpt_free(m->scratch);
    dpt_free(m->tangent[0]);
    dpt_free(m->tangent[1]);
    dpt_free(m->pad_mask);
    dpt_free(m);
}

/* ==== forward / backward ==== */

/* a[0..n) += b[0..n) (residual connections) */
static void add_to(float *a, const float *b, size_t n) {
    for (size_t j = 0; j < n; j++) a[j] += b[j];
}

#define CHECK_BATCH(m, B)                                                                         \
    DPT_CHECK((B) <= (m)->max_batch, DPT_EINVAL, "model '%s': batch %zu exceeds max_batch %zu (chunk it)", \
              (m)->spec, (size_t)(B), (m)->max_batch)

dpt_status dpt_model_forward(dpt_model *m, const float *x, size_t B) {
    DPT_CHECK(m && x, DPT_EINVAL, "model forward: NULL argument");
    CHECK_BATCH(m, B);
    if (x != m->act[0]) memcpy(m->act[0], x, B * m->in_dim * sizeof *x);
    return dpt_model_forward_from(m, 0, B);
}

dpt_status dpt_model_forward_from(dpt_model *m, size_t first, size_t B) {
    DPT_CHECK(m, DPT_EINVAL, "model forward: NULL model");
    return dpt_model_forward_range(m, first, m->n_layers, B);
}

dpt_status dpt_model_forward_range(dpt_model *m, size_t first, size_t end, size_t B) {
    DPT_CHECK(m, DPT_EINVAL, "model forward: NULL model");
    CHECK_BATCH(m, B);
    DPT_CHECK(first <= end && end <= m->n_layers, DPT_EINVAL, "model '%s': layers [%zu, %zu) are not within its %zu "
              "layers", m->spec, first, end, m->n_layers);
    for (size_t l = first; l < end; l++) {
        const dpt_layer *L = &m->layers[l];
        DPT_TRY(L->ops->forward(L, m->act[l], m->act[l + 1], B));
        if (L->residual_from) add_to(m->act[l + 1], m->act[L->residual_from - 1], B * L->out_dim);
    }
    /* a sequence output of a padding model: padded positions give 0 (docs/nn.md) */
    if (m->pad_out && end == m->n_layers && first < end) pad_zero_rows(m, m->act[end], B, m->out_dim);
    return DPT_OK;
}

dpt_status dpt_model_backward(dpt_model *m, const float *dout, size_t B) {
    return dpt_model_backward_to(m, dout, B, 1);
}

dpt_status dpt_model_backward_to(dpt_model *m, const float *dout, size_t B, size_t stop) {
    DPT_CHECK(m && dout, DPT_EINVAL, "model backward: NULL argument");
    CHECK_BATCH(m, B);
    const size_t n = m->n_layers;
    DPT_CHECK(stop <= n, DPT_EINVAL, "model '%s': backward stop %zu > %zu layers", m->spec, stop, n);
    if (stop < 1) stop = 1; /* layer 0's input cotangent is never computed */
    if (dout != m->dact[n]) memcpy(m->dact[n], dout, B * m->out_dim * sizeof *dout);
    if (m->pad_out) pad_zero_rows(m, m->dact[n], B, m->out_dim); /* the forward zeroed those outputs */
    /* dact[l] = (d act[l+1] / d act[l])^T dact[l+1], down to dact[stop] */
    for (size_t l = n - 1; l >= stop; l--) {
        const dpt_layer *L = &m->layers[l];
        DPT_TRY(L->ops->backward_input(L, m->act[l], m->act[l + 1], m->dact[l + 1], m->dact[l], B));
        /* residual connections out of act[l]: their cotangents join here */
        for (size_t r = l; r < n; r++)
            if (m->layers[r].residual_from == l + 1) add_to(m->dact[l], m->dact[r + 1], B * m->layers[r].out_dim);
    }
    return DPT_OK;
}

dpt_status dpt_model_jvp(dpt_model *m, const float *dtheta, const float *dx, size_t B, float *dout) {
    DPT_CHECK(m && dout, DPT_EINVAL, "model jvp: NULL argument");
    CHECK_BATCH(m, B);
    const float *t_in = dx;
    if (m->tangent_keep[0]) { /* the input is a residual source */
        if (dx) memcpy(m->tangent_keep[0], dx, B * m->in_dim * sizeof *dx);
        else memset(m->tangent_keep[0], 0, B * m->in_dim * sizeof *dx);
    }
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        float *t_out = l + 1 == m->n_layers ? dout : m->tangent[l % 2];
        const float *dth = dtheta && L->n_params ? dtheta + L->param_offset : NULL;
        DPT_TRY(L->ops->jvp(L, m->act[l], m->act[l + 1], t_in, dth, t_out, B));
        if (L->residual_from) add_to(t_out, m->tangent_keep[L->residual_from - 1], B * L->out_dim);
        if (m->tangent_keep[l + 1]) memcpy(m->tangent_keep[l + 1], t_out, B * L->out_dim * sizeof *t_out);
        t_in = t_out;
    }
    if (m->pad_out) pad_zero_rows(m, dout, B, m->out_dim);
    return DPT_OK;
}

/* ==== parameter gradients ==== */

dpt_status dpt_model_param_grad_from(dpt_model *m, const float *const *xs, const float *const *dvs, size_t B,
                                     dpt_grad_mode mode, const float *weights, float *out, size_t ld,
                                     int accumulate) {
    DPT_CHECK(m && out, DPT_EINVAL, "model gradient: NULL argument");
    CHECK_BATCH(m, B);
    DPT_CHECK(mode != DPT_GRAD_WEIGHTED || weights, DPT_EINVAL, "model '%s': weighted gradient needs weights",
              m->spec);
    DPT_CHECK(mode != DPT_GRAD_DOT || weights, DPT_EINVAL, "model '%s': inner products need a vector", m->spec);
    DPT_CHECK(mode != DPT_GRAD_PER_EXAMPLE || ld >= m->n_params, DPT_EINVAL,
              "model '%s': per-example row stride %zu < %zu parameters", m->spec, ld, m->n_params);
    DPT_CHECK(mode >= DPT_GRAD_SUM && mode <= DPT_GRAD_DOT, DPT_EINVAL, "model '%s': unknown gradient mode %d",
              m->spec, (int)mode);
    const int per_ex = mode == DPT_GRAD_SQNORM || mode == DPT_GRAD_DOT;
    int first = 1;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (!L->n_params) continue;
        /* SQNORM and DOT sum every layer's term into out[i]; the others own a slice */
        float *o = per_ex ? out : out + L->param_offset;
        const float *w = mode == DPT_GRAD_DOT ? weights + L->param_offset : weights;
        int acc = per_ex && !first ? 1 : accumulate;
        const float *x = xs ? xs[l] : m->act[l], *dv = dvs ? dvs[l] : m->dact[l + 1];
        DPT_TRY(L->ops->backward_params(L, x, dv, B, mode, w, o, ld, acc));
        first = 0;
    }
    return DPT_OK;
}

dpt_status dpt_model_param_grad(dpt_model *m, size_t B, dpt_grad_mode mode, const float *weights, float *out,
                                size_t ld, int accumulate) {
    return dpt_model_param_grad_from(m, NULL, NULL, B, mode, weights, out, ld, accumulate);
}

int dpt_model_has_cross(const dpt_model *m) {
    for (size_t l = 0; l < m->n_layers; l++)
        if (m->layers[l].n_params && !m->layers[l].ops->cross) return 0;
    return 1;
}

dpt_status dpt_model_param_cross(dpt_model *m, const float *const *xs, const float *const *dvs, size_t B, size_t k,
                                 const float *const *zxs, const float *const *zdvs, const float *hz, size_t ldz,
                                 double *out) {
    DPT_CHECK(m && out && zxs && zdvs, DPT_EINVAL, "model cross products: NULL argument");
    CHECK_BATCH(m, B);
    DPT_CHECK(!hz || ldz >= m->n_params, DPT_EINVAL, "model '%s': gradient row stride %zu < %zu parameters", m->spec,
              ldz, m->n_params);
    DPT_CHECK(hz || dpt_model_has_cross(m), DPT_EINVAL,
              "model '%s': cross products need the other examples' gradients (a layer has no cross op)", m->spec);
    memset(out, 0, B * k * sizeof *out);
    float *tmp = m->tangent[0]; /* [B] (the jvp buffers hold max_batch * max dim floats) */
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (!L->n_params) continue;
        const float *x = xs ? xs[l] : m->act[l], *dv = dvs ? dvs[l] : m->dact[l + 1];
        if (L->ops->cross) {
            DPT_TRY(L->ops->cross(L, x, dv, B, zxs[l], zdvs[l], k, out));
            continue;
        }
        for (size_t j = 0; j < k; j++) {
            DPT_TRY(L->ops->backward_params(L, x, dv, B, DPT_GRAD_DOT, hz + j * ldz + L->param_offset, tmp, 0, 0));
            for (size_t i = 0; i < B; i++) out[i * k + j] += tmp[i];
        }
    }
    return DPT_OK;
}

dpt_status dpt_model_layer_sqnorms(dpt_model *m, size_t B, float *out) {
    DPT_CHECK(m && out, DPT_EINVAL, "model layer norms: NULL argument");
    CHECK_BATCH(m, B);
    size_t g = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (!L->n_params) continue;
        DPT_TRY(L->ops->backward_params(L, m->act[l], m->dact[l + 1], B, DPT_GRAD_SQNORM, NULL, out + g * B, 0, 0));
        g++;
    }
    return DPT_OK;
}

/* Appends "a, b, c"-style names of the layers with parameters to buf (for messages). */
static void param_layer_names(const dpt_model *m, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (size_t l = 0; l < m->n_layers && len < n; l++)
        if (m->layers[l].n_params)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "", m->layers[l].name);
}

dpt_status dpt_model_freeze_parse(const dpt_model *m, const char *spec, unsigned char *frozen, size_t *trained) {
    DPT_CHECK(m && spec, DPT_EINVAL, "dpt_model_freeze_parse: NULL argument");
    unsigned char *f = frozen ? frozen : calloc(m->n_layers, 1);
    DPT_CHECK(f, DPT_ENOMEM, "frozen layers: out of memory");
    memset(f, 0, m->n_layers);
    dpt_status s = DPT_OK;
    char names[512];
    for (const char *p = spec; *spec;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t')) p++, len--; /* "conv1, conv2" */
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
        if (!len) {
            s = dpt_set_error(DPT_EINVAL, "layer list \"%s\": an empty layer name", spec);
            break;
        }
        size_t l = 0;
        while (l < m->n_layers && !(strlen(m->layers[l].name) == len && !memcmp(m->layers[l].name, p, len))) l++;
        if (l == m->n_layers || !m->layers[l].n_params) {
            param_layer_names(m, names, sizeof names);
            s = dpt_set_error(DPT_EINVAL, "model %s has no layer \"%.*s\"%s (its layers with parameters: %s)",
                              m->spec, (int)len, p, l < m->n_layers ? " with parameters" : "", names);
            break;
        }
        if (f[l]) {
            s = dpt_set_error(DPT_EINVAL, "layer list \"%s\": layer %s is named twice", spec, m->layers[l].name);
            break;
        }
        f[l] = 1;
        if (!e) break;
        p = e + 1;
    }
    size_t n = 0;
    for (size_t l = 0; l < m->n_layers; l++) n += f[l] ? 0 : m->layers[l].n_params;
    if (s == DPT_OK && n == 0)
        s = dpt_set_error(DPT_EINVAL, "layer list \"%s\": every layer with parameters is frozen, nothing would train",
                          spec);
    if (s == DPT_OK && trained) *trained = n;
    if (!frozen) free(f);
    return s;
}

/* ==== The layer table (dpt_model_summary) ==== */

typedef struct {
    char *buf;
    size_t n, len; /* len: what the whole text needs, even past n */
} text_out;

static void put(text_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(o->len < o->n ? o->buf + o->len : NULL, o->len < o->n ? o->n - o->len : 0, fmt, ap);
    va_end(ap);
    if (w > 0) o->len += (size_t)w;
}

/* "1,234,567" */
static const char *thousands(size_t v, char buf[32]) {
    char raw[32];
    int n = snprintf(raw, sizeof raw, "%zu", v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = raw[i];
    }
    buf[o] = 0;
    return buf;
}

static void shape_text(const size_t *s, char *buf, size_t n) {
    if (s[0] == 1 && s[1] == 1) snprintf(buf, n, "%zu", s[2]);
    else snprintf(buf, n, "%zu x %zu x %zu", s[0], s[1], s[2]);
}

size_t dpt_model_summary(const dpt_model *m, char *buf, size_t n) {
    text_out o = {buf, buf ? n : 0, 0};
    if (o.n) buf[0] = 0;
    if (!m) return 0;
    char a[32], b[64];
    shape_text(m->layers[0].in_shape, b, sizeof b);
    put(&o, "input %s (%zu features), output %zu, %s parameters\n\n", b, m->in_dim, m->out_dim,
        thousands(m->n_params, a));
    put(&o, "%4s  %-12s %-10s %-14s %10s  %s\n", "#", "layer", "kind", "output", "parameters", "tensors");
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        shape_text(L->out_shape, b, sizeof b);
        put(&o, "%4zu  %-12s %-10s %-14s %10s", l, L->name, L->wstd ? "conv (ws)" : dpt_layer_kind_name(L->kind), b,
            L->n_params ? thousands(L->n_params, a) : "-");
        const char *sep = "  ";
        dpt_param_tensor t;
        for (size_t i = 0; i < dpt_model_n_tensors(m); i++) {
            if (dpt_model_tensor(m, i, &t) != DPT_OK || t.offset < L->param_offset ||
                t.offset >= L->param_offset + L->n_params)
                continue;
            put(&o, "%s%s ", sep, t.name);
            for (int d = 0; d < t.ndim; d++) put(&o, "%s%zu", d ? "x" : "", t.shape[d]);
            sep = ", ";
        }
        /* residual_from = s + 1: act[s], the input of layer s, is added to this output */
        sep = sep[0] == ',' ? " " : "  ";
        if (L->residual_from == l + 1) put(&o, "%s(+ its input: a residual connection)", sep);
        else if (L->residual_from) put(&o, "%s(+ the input of layer %zu)", sep, L->residual_from - 1);
        put(&o, "\n");
    }
    return o.len;
}

size_t dpt_model_n_param_layers(const dpt_model *m) {
    size_t n = 0;
    for (size_t l = 0; l < m->n_layers; l++) n += m->layers[l].n_params > 0;
    return n;
}

size_t dpt_model_param_layer(const dpt_model *m, size_t k) {
    for (size_t l = 0; l < m->n_layers; l++)
        if (m->layers[l].n_params > 0 && k-- == 0) return l;
    return m->n_layers;
}

size_t dpt_model_n_linear(const dpt_model *m) {
    size_t n = 0;
    for (size_t l = 0; l < m->n_layers; l++)
        n += m->layers[l].kind == DPT_LAYER_LINEAR || m->layers[l].kind == DPT_LAYER_CONV2D ||
             m->layers[l].kind == DPT_LAYER_SEQLINEAR;
    return n;
}

/* ==== tensor table ==== */

const char *dpt_model_spec(const dpt_model *m) { return m->spec; }
size_t dpt_model_n_params(const dpt_model *m) { return m->n_params; }
float *dpt_model_params(dpt_model *m) { return m->theta; }
size_t dpt_model_in_dim(const dpt_model *m) { return m->in_dim; }
size_t dpt_model_out_dim(const dpt_model *m) { return m->out_dim; }
size_t dpt_model_max_batch(const dpt_model *m) { return m->max_batch; }

size_t dpt_model_n_tensors(const dpt_model *m) {
    size_t n = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (L->ops->n_tensors) n += L->ops->n_tensors(L);
    }
    return n;
}

dpt_status dpt_model_tensor(const dpt_model *m, size_t i, dpt_param_tensor *t) {
    DPT_CHECK(m && t, DPT_EINVAL, "dpt_model_tensor: %s is NULL", m ? "t" : "m");
    const size_t i0 = i;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        size_t nt = L->ops->n_tensors ? L->ops->n_tensors(L) : 0;
        if (i < nt) {
            L->ops->tensor(L, i, t);
            return DPT_OK;
        }
        i -= nt;
    }
    memset(t, 0, sizeof *t);
    return dpt_set_error(DPT_EINVAL, "dpt_model_tensor: i = %zu, but model '%s' has %zu tensors", i0, m->spec,
                         i0 - i);
}

float *dpt_model_tensor_by_name(dpt_model *m, const char *name, dpt_param_tensor *t) {
    if (!m || !name) {
        dpt_set_error(DPT_EINVAL, "dpt_model_tensor_by_name: %s is NULL", m ? "name" : "m");
        return NULL;
    }
    const size_t n = dpt_model_n_tensors(m);
    dpt_param_tensor e;
    for (size_t i = 0; i < n; i++) {
        (void)dpt_model_tensor(m, i, &e);
        if (strcmp(e.name, name) != 0) continue;
        if (t) *t = e;
        return m->theta + e.offset;
    }
    char known[256] = "";
    size_t w = 0;
    for (size_t i = 0; i < n && w < sizeof known; i++) {
        (void)dpt_model_tensor(m, i, &e);
        w += (size_t)snprintf(known + w, sizeof known - w, "%s%s", i ? ", " : "", e.name);
    }
    if (w >= sizeof known) memcpy(known + sizeof known - 4, "...", 4);
    dpt_set_error(DPT_EINVAL, "dpt_model_tensor_by_name: model '%s' has no tensor '%s' (it has: %s)", m->spec, name,
                  n ? known : "none");
    return NULL;
}
