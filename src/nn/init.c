/* Initializers: weights N(0, beta_l) with beta_l from the scheme, biases N(0, bias_var) or 0;
 * or PyTorch's default for Linear and Conv2d (the torch scheme: weight and bias uniform on
 * +-1/sqrt(fan_in), i.e. kaiming_uniform with a = sqrt(5) and its bias rule).
 * m_{l-1} = fan-in, m_l = fan-out of the l-th weight tensor (fan_in = size / shape[0]),
 * L = number of weight layers, o = output width. Draws use the double-precision reference
 * sampler (initialization is not hot), in tensor-table order. */
#include "nn_internal.h"

#include <math.h>
#include <string.h>

/* The activation the model uses between its layers (IDENTITY when it has none). */
static dpt_layer_kind model_activation(const dpt_model *m) {
    for (size_t l = 0; l < m->n_layers; l++) {
        dpt_layer_kind k = m->layers[l].kind;
        if (k == DPT_LAYER_RELU || k == DPT_LAYER_GELU || k == DPT_LAYER_TANH || k == DPT_LAYER_SIGMOID) return k;
    }
    return DPT_LAYER_IDENTITY;
}

dpt_status dpt_model_init_variances(const dpt_model *m, dpt_init_scheme scheme, double *beta, size_t n) {
    DPT_CHECK(m && beta, DPT_EINVAL, "init variances: NULL argument");
    const size_t nw = dpt_model_n_linear(m);
    DPT_CHECK(n >= nw, DPT_EINVAL, "init variances: room for %zu, the model has %zu weight layers", n, nw);
    DPT_CHECK(scheme != DPT_INIT_EXPLICIT, DPT_EINVAL, "init variances: the explicit scheme's variances are given, not derived");
    DPT_CHECK(scheme != DPT_INIT_TORCH, DPT_EINVAL,
              "init variances: the torch scheme is uniform, not N(0, beta_l) (its weight variance is 1/(3 fan_in))");
    if (scheme == DPT_INIT_DEFAULT) {
        dpt_layer_kind a = model_activation(m);
        scheme = (a == DPT_LAYER_RELU || a == DPT_LAYER_GELU) ? DPT_INIT_HE : DPT_INIT_XAVIER;
    }
    DPT_CHECK(scheme >= DPT_INIT_LECUN && scheme <= DPT_INIT_NTK, DPT_EINVAL, "init: unknown scheme %d", (int)scheme);
    size_t g = 0;
    const size_t nt = dpt_model_n_tensors(m);
    for (size_t i = 0; i < nt; i++) {
        dpt_param_tensor t;
        dpt_model_tensor(m, i, &t);
        if (t.role != DPT_TENSOR_WEIGHT) continue;
        const double fan_out = (double)t.shape[0], fan_in = (double)(t.size / t.shape[0]);
        double b = 0.0;
        switch (scheme) {
        case DPT_INIT_LECUN: b = 1.0 / fan_in; break;
        case DPT_INIT_HE: b = 2.0 / fan_in; break;
        case DPT_INIT_XAVIER: b = 2.0 / (fan_in + fan_out); break;
        case DPT_INIT_NTK: b = g + 1 < nw ? 2.0 / fan_out : 1.0 / fan_out; break; /* 1/o last */
        default: break;
        }
        DPT_ASSERT(g < nw);
        beta[g++] = b;
    }
    return DPT_OK;
}

dpt_status dpt_model_init(dpt_model *m, dpt_init_scheme scheme, const double *variances, size_t n_variances,
                          double bias_var, dpt_rng *rng) {
    DPT_CHECK(m && rng, DPT_EINVAL, "init: NULL argument");
    DPT_CHECK(isfinite(bias_var) && bias_var >= 0.0, DPT_EINVAL, "init: bias variance %g is not a finite value >= 0",
              bias_var);
    const size_t nw = dpt_model_n_linear(m);
    double beta[DPT_SPEC_MAX_WIDTHS];
    DPT_ASSERT(nw <= DPT_SPEC_MAX_WIDTHS);
    if (scheme == DPT_INIT_EXPLICIT) {
        DPT_CHECK(variances && n_variances == nw, DPT_EINVAL,
                  "init: explicit scheme needs %zu variances (one per Linear layer), got %zu", nw,
                  variances ? n_variances : 0);
        for (size_t g = 0; g < nw; g++) {
            DPT_CHECK(isfinite(variances[g]) && variances[g] >= 0.0, DPT_EINVAL,
                      "init: variance %g of layer %zu is not a finite value >= 0", variances[g], g + 1);
            beta[g] = variances[g];
        }
    } else if (scheme == DPT_INIT_TORCH) {
        DPT_CHECK(bias_var == 0.0, DPT_EINVAL, "init: the torch scheme draws the biases itself (bias variance %g, not 0)",
                  bias_var);
    } else {
        DPT_TRY(dpt_model_init_variances(m, scheme, beta, nw));
    }
    size_t g = 0;
    double torch_bound = 0.0; /* torch: the bound of the weight tensor just drawn (its bias follows it) */
    const size_t nt = dpt_model_n_tensors(m);
    for (size_t i = 0; i < nt; i++) {
        dpt_param_tensor t;
        dpt_model_tensor(m, i, &t);
        float *p = m->theta + t.offset;
        if (t.role == DPT_TENSOR_SCALE) { /* GroupNorm's gamma: the identity map at start */
            for (size_t j = 0; j < t.size; j++) p[j] = 1.0f;
            torch_bound = 0.0; /* a normalization's bias starts at 0 */
            continue;
        }
        if (t.role == DPT_TENSOR_EMBEDDING) { /* N(0, 1), torch's nn.Embedding default */
            for (size_t j = 0; j < t.size; j++) p[j] = (float)dpt_rng_gauss_ref(rng);
            torch_bound = 0.0;
            continue;
        }
        if (scheme == DPT_INIT_TORCH) {
            /* a layer's tensors are its weight, then its bias (dpt_model_tensor's order) */
            if (t.role == DPT_TENSOR_WEIGHT) torch_bound = 1.0 / sqrt((double)(t.size / t.shape[0]));
            const double bound = torch_bound;
            if (t.role == DPT_TENSOR_BIAS) torch_bound = 0.0;
            if (bound == 0.0) memset(p, 0, t.size * sizeof *p);
            else
                for (size_t j = 0; j < t.size; j++) p[j] = (float)(bound * (2.0 * dpt_rng_uniform(rng) - 1.0));
            continue;
        }
        const double sd = sqrt(t.role == DPT_TENSOR_WEIGHT ? beta[g++] : bias_var);
        if (sd == 0.0) {
            memset(p, 0, t.size * sizeof *p);
            continue;
        }
        for (size_t j = 0; j < t.size; j++) p[j] = (float)(sd * dpt_rng_gauss_ref(rng));
    }
    return DPT_OK;
}

dpt_status dpt_init_parse(const char *s, dpt_init_scheme *out) {
    static const struct {
        const char *name;
        dpt_init_scheme v;
    } t[] = {{"default", DPT_INIT_DEFAULT}, {"lecun", DPT_INIT_LECUN}, {"he", DPT_INIT_HE},
             {"kaiming", DPT_INIT_HE},      {"xavier", DPT_INIT_XAVIER}, {"glorot", DPT_INIT_XAVIER},
             {"ntk", DPT_INIT_NTK},         {"torch", DPT_INIT_TORCH}};
    DPT_CHECK(s && out, DPT_EINVAL, "init: NULL argument");
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(s, t[i].name)) {
            *out = t[i].v;
            return DPT_OK;
        }
    return dpt_set_error(DPT_EINVAL, "unknown init scheme '%s' (expected default|lecun|he|xavier|ntk|torch)", s);
}
