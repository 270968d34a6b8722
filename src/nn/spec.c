/* Model spec strings: "<kind>:<m_0>-<m_1>-...-<m_L>[:<activation>][:nobias]".
 * kind is mlp or ae; activation relu|gelu|tanh|sigmoid|identity (default relu). */
#include "nn_internal.h"

#include <ctype.h>
#include <string.h>

static const struct {
    const char *name;
    dpt_layer_kind kind;
} act_names[] = {
    {"relu", DPT_LAYER_RELU},         {"gelu", DPT_LAYER_GELU},
    {"tanh", DPT_LAYER_TANH},         {"sigmoid", DPT_LAYER_SIGMOID},
    {"identity", DPT_LAYER_IDENTITY},
};

/* Copies [s, s + n) into buf (NUL-terminated, truncated to cap - 1). */
static const char *part(const char *s, size_t n, char *buf, size_t cap) {
    if (n >= cap) n = cap - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return buf;
}

dpt_status dpt_spec_parse(const char *spec, dpt_spec *out) {
    DPT_CHECK(spec && out, DPT_EINVAL, "model spec: NULL");
    memset(out, 0, sizeof *out);
    out->act = DPT_LAYER_RELU;
    out->has_bias = 1;
    char bad[96];
    DPT_CHECK(*spec, DPT_EINVAL, "model spec '': empty (expected e.g. 'mlp:784-128-10:relu')");
    const char *colon = strchr(spec, ':');
    size_t klen = colon ? (size_t)(colon - spec) : strlen(spec);
    if (klen == 3 && !strncmp(spec, "mlp", 3)) {
        out->autoencoder = 0;
    } else if (klen == 2 && !strncmp(spec, "ae", 2)) {
        out->autoencoder = 1;
    } else {
        return dpt_set_error(DPT_EINVAL, "model spec '%s': unknown model kind '%s' (expected mlp or ae)",
                             spec, part(spec, klen, bad, sizeof bad));
    }
    DPT_CHECK(colon && colon[1] && colon[1] != ':', DPT_EINVAL,
              "model spec '%s': no layer widths (expected e.g. '%s:784-128-10')", spec,
              part(spec, klen, bad, sizeof bad));

    /* widths: digits separated by '-', up to the next ':' */
    const char *p = colon + 1;
    const char *end = strchr(p, ':');
    if (!end) end = p + strlen(p);
    while (p <= end) {
        const char *q = p;
        while (q < end && *q != '-') q++;
        size_t n = (size_t)(q - p);
        int ok = n > 0 && n <= 9;
        size_t w = 0;
        for (size_t j = 0; ok && j < n; j++) {
            if (!isdigit((unsigned char)p[j])) ok = 0;
            else w = w * 10 + (size_t)(p[j] - '0');
        }
        if (!ok || w == 0 || w > DPT_SPEC_MAX_WIDTH) {
            return dpt_set_error(DPT_EINVAL, "model spec '%s': '%s' is not a layer width (a whole number in 1..%zu)",
                                 spec, part(p, n, bad, sizeof bad), DPT_SPEC_MAX_WIDTH);
        }
        if (out->n_widths == DPT_SPEC_MAX_WIDTHS) {
            return dpt_set_error(DPT_EINVAL, "model spec '%s': too many layers (at most %d widths)", spec,
                                 DPT_SPEC_MAX_WIDTHS);
        }
        out->widths[out->n_widths++] = w;
        if (q == end) break;
        p = q + 1;
    }
    DPT_CHECK(out->n_widths >= 2, DPT_EINVAL,
              "model spec '%s': needs at least two widths (input and output), got %zu", spec, out->n_widths);
    if (out->autoencoder) {
        DPT_CHECK(out->widths[0] == out->widths[out->n_widths - 1], DPT_EINVAL,
                  "model spec '%s': an autoencoder's output width %zu differs from its input width %zu", spec,
                  out->widths[out->n_widths - 1], out->widths[0]);
    }

    /* options: ":<activation>" and ":nobias", each at most once */
    int seen_act = 0, seen_nobias = 0;
    p = end;
    while (*p == ':') {
        p++;
        const char *q = strchr(p, ':');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        size_t j;
        for (j = 0; j < sizeof act_names / sizeof act_names[0]; j++)
            if (strlen(act_names[j].name) == n && !strncmp(p, act_names[j].name, n)) break;
        if (j < sizeof act_names / sizeof act_names[0]) {
            DPT_CHECK(!seen_act, DPT_EINVAL, "model spec '%s': more than one activation ('%s')", spec,
                      part(p, n, bad, sizeof bad));
            seen_act = 1;
            out->act = act_names[j].kind;
        } else if (n == 6 && !strncmp(p, "nobias", 6)) {
            DPT_CHECK(!seen_nobias, DPT_EINVAL, "model spec '%s': 'nobias' given twice", spec);
            seen_nobias = 1;
            out->has_bias = 0;
        } else {
            return dpt_set_error(DPT_EINVAL,
                                 "model spec '%s': unknown activation or option '%s' "
                                 "(expected relu|gelu|tanh|sigmoid|identity or nobias)",
                                 spec, part(p, n, bad, sizeof bad));
        }
        p += n;
    }
    return DPT_OK;
}
