/* Models: an ordered list of layers over one flat parameter buffer theta [P].
 * act[l] is the input of layer l and act[l + 1] its output; dact[l] their cotangents.
 * Everything here dispatches through dpt_layer_ops: no code in this file knows which
 * kind of layer it is driving (convolutions plug in by providing their own ops). */
#include "nn_internal.h"

#include <stdio.h>
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

dpt_status dpt_model_new(const char *spec, size_t max_batch, int threads, dpt_model **out) {
    DPT_CHECK(out, DPT_EINVAL, "model: NULL output");
    *out = NULL;
    dpt_spec sp;
    DPT_TRY(dpt_spec_parse(spec, &sp));
    DPT_CHECK(max_batch >= 1, DPT_EINVAL, "model '%s': max_batch must be at least 1", spec);
    DPT_CHECK(strlen(spec) < sizeof ((dpt_model *)0)->spec, DPT_EINVAL, "model spec '%.40s...': longer than %zu characters",
              spec, sizeof ((dpt_model *)0)->spec - 1);

    dpt_model *m = dpt_alloc(1, sizeof *m, "model");
    if (!m) return DPT_ENOMEM;
    strcpy(m->spec, spec);
    m->max_batch = max_batch;
    m->threads = dpt_threads_resolve(threads);
    const size_t n_lin = sp.n_widths - 1;
    m->n_layers = 2 * n_lin - 1; /* Linear, act, Linear, ..., Linear */
    m->in_dim = sp.widths[0];
    m->out_dim = sp.widths[n_lin];
    dpt_status st = DPT_ENOMEM;
    m->layers = dpt_alloc(m->n_layers, sizeof *m->layers, "model layers");
    m->act = dpt_alloc(m->n_layers + 1, sizeof *m->act, "model activations");
    m->dact = dpt_alloc(m->n_layers + 1, sizeof *m->dact, "model cotangents");
    if (!m->layers || !m->act || !m->dact) goto fail;

    /* layer list and parameter layout (P cannot overflow: widths <= 2^24, <= 64 layers) */
    size_t P = 0, max_dim = m->in_dim, max_scratch = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        dpt_layer *L = &m->layers[l];
        size_t j = l / 2; /* index of the Linear layer this belongs to */
        if (l % 2 == 0) {
            dpt_layer_linear_setup(L, sp.widths[j], sp.widths[j + 1], sp.has_bias);
            snprintf(L->name, sizeof L->name, "fc%zu", j + 1);
        } else {
            dpt_layer_act_setup(L, sp.act, sp.widths[j + 1]);
            snprintf(L->name, sizeof L->name, "%s%zu", dpt_layer_kind_name(sp.act), j + 1);
        }
        L->param_offset = P;
        L->threads = m->threads;
        P += L->n_params;
        if (L->out_dim > max_dim) max_dim = L->out_dim;
        size_t s = L->in_dim > L->out_dim ? L->in_dim : L->out_dim;
        if (s > max_scratch) max_scratch = s;
    }
    m->n_params = P;
    m->theta = dpt_alloc(P, sizeof(float), "model parameters");
    m->grad = dpt_alloc(P, sizeof(float), "model gradient");
    m->scratch = alloc_batch(max_batch, max_scratch, "layer scratch");
    m->tangent[0] = alloc_batch(max_batch, max_dim, "model tangents");
    m->tangent[1] = alloc_batch(max_batch, max_dim, "model tangents");
    if (!m->theta || !m->grad || !m->scratch || !m->tangent[0] || !m->tangent[1]) goto fail;
    for (size_t l = 0; l <= m->n_layers; l++) {
        size_t dim = l == 0 ? m->in_dim : m->layers[l - 1].out_dim;
        m->act[l] = alloc_batch(max_batch, dim, "model activations");
        m->dact[l] = alloc_batch(max_batch, dim, "model cotangents");
        if (!m->act[l] || !m->dact[l]) goto fail;
    }
    /* views: each layer's parameter tensors are slices of theta, laid out by its table */
    for (size_t l = 0; l < m->n_layers; l++) {
        dpt_layer *L = &m->layers[l];
        L->scratch = m->scratch;
        size_t nt = L->ops->n_tensors ? L->ops->n_tensors(L) : 0;
        for (size_t k = 0; k < nt; k++) {
            dpt_param_tensor t;
            L->ops->tensor(L, k, &t);
            if (t.role == DPT_TENSOR_WEIGHT) L->w = m->theta + t.offset;
            else L->b = m->theta + t.offset;
        }
    }
    *out = m;
    return DPT_OK;
fail:
    dpt_model_free(m);
    return st;
}

void dpt_model_free(dpt_model *m) {
    if (!m) return;
    if (m->act)
        for (size_t l = 0; l <= m->n_layers; l++) dpt_free(m->act[l]);
    if (m->dact)
        for (size_t l = 0; l <= m->n_layers; l++) dpt_free(m->dact[l]);
    dpt_free(m->act);
    dpt_free(m->dact);
    dpt_free(m->layers);
    dpt_free(m->theta);
    dpt_free(m->grad);
    dpt_free(m->scratch);
    dpt_free(m->tangent[0]);
    dpt_free(m->tangent[1]);
    dpt_free(m);
}

/* ==== forward / backward ==== */

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
    CHECK_BATCH(m, B);
    DPT_CHECK(first <= m->n_layers, DPT_EINVAL, "model '%s': first layer %zu > %zu layers", m->spec, first,
              m->n_layers);
    for (size_t l = first; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        DPT_TRY(L->ops->forward(L, m->act[l], m->act[l + 1], B));
    }
    return DPT_OK;
}

dpt_status dpt_model_backward(dpt_model *m, const float *dout, size_t B) {
    DPT_CHECK(m && dout, DPT_EINVAL, "model backward: NULL argument");
    CHECK_BATCH(m, B);
    const size_t n = m->n_layers;
    if (dout != m->dact[n]) memcpy(m->dact[n], dout, B * m->out_dim * sizeof *dout);
    /* dact[l] = (d act[l+1] / d act[l])^T dact[l+1]; layer 0's input cotangent is skipped */
    for (size_t l = n - 1; l >= 1; l--) {
        const dpt_layer *L = &m->layers[l];
        DPT_TRY(L->ops->backward_input(L, m->act[l], m->act[l + 1], m->dact[l + 1], m->dact[l], B));
    }
    return DPT_OK;
}

dpt_status dpt_model_jvp(dpt_model *m, const float *dtheta, const float *dx, size_t B, float *dout) {
    DPT_CHECK(m && dout, DPT_EINVAL, "model jvp: NULL argument");
    CHECK_BATCH(m, B);
    const float *t_in = dx;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        float *t_out = l + 1 == m->n_layers ? dout : m->tangent[l % 2];
        const float *dth = dtheta && L->n_params ? dtheta + L->param_offset : NULL;
        DPT_TRY(L->ops->jvp(L, m->act[l], m->act[l + 1], t_in, dth, t_out, B));
        t_in = t_out;
    }
    return DPT_OK;
}

/* ==== parameter gradients ==== */

dpt_status dpt_model_param_grad(dpt_model *m, size_t B, dpt_grad_mode mode, const float *weights, float *out,
                                size_t ld, int accumulate) {
    DPT_CHECK(m && out, DPT_EINVAL, "model gradient: NULL argument");
    CHECK_BATCH(m, B);
    DPT_CHECK(mode != DPT_GRAD_WEIGHTED || weights, DPT_EINVAL, "model '%s': weighted gradient needs weights",
              m->spec);
    DPT_CHECK(mode != DPT_GRAD_PER_EXAMPLE || ld >= m->n_params, DPT_EINVAL,
              "model '%s': per-example row stride %zu < %zu parameters", m->spec, ld, m->n_params);
    DPT_CHECK(mode >= DPT_GRAD_SUM && mode <= DPT_GRAD_WEIGHTED, DPT_EINVAL, "model '%s': unknown gradient mode %d",
              m->spec, (int)mode);
    int first = 1;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (!L->n_params) continue;
        /* SQNORM sums every layer's ||g_i,l||^2 into out[i]; the others own a slice */
        float *o = mode == DPT_GRAD_SQNORM ? out : out + L->param_offset;
        int acc = mode == DPT_GRAD_SQNORM && !first ? 1 : accumulate;
        DPT_TRY(L->ops->backward_params(L, m->act[l], m->dact[l + 1], B, mode, weights, o, ld, acc));
        first = 0;
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
    for (size_t l = 0; l < m->n_layers; l++) n += m->layers[l].kind == DPT_LAYER_LINEAR;
    return n;
}

/* ==== tensor table ==== */

size_t dpt_model_n_tensors(const dpt_model *m) {
    size_t n = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (L->ops->n_tensors) n += L->ops->n_tensors(L);
    }
    return n;
}

void dpt_model_tensor(const dpt_model *m, size_t i, dpt_param_tensor *t) {
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        size_t nt = L->ops->n_tensors ? L->ops->n_tensors(L) : 0;
        if (i < nt) {
            L->ops->tensor(L, i, t);
            return;
        }
        i -= nt;
    }
    DPT_ASSERT(!"tensor index out of range");
}
