/* dptrain model: what a model spec (or a checkpoint's model) is made of, layer by layer:
 * names (what --freeze takes, and the prefixes of checkpoint tensors), kinds, output shapes,
 * parameter counts, tensors and residual connections. Reads no data. */
#include <dptrain/inference.h>
#include <dptrain/nn.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"

static const char *USAGE = "usage: dptrain model (--model SPEC | --checkpoint FILE) [--json]\n\n"
                           "Lists the layers of a model: index, name (the prefix of its checkpoint tensors\n"
                           "and what dptrain train --freeze takes), kind, output shape (C x H x W), parameters\n"
                           "and tensors, and the residual connections. Reads no data.";

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

/* The tensors of layer L ("fc1.weight 10x784, fc1.bias 10") into buf; JSON array into arr. */
static void layer_tensors(const dpt_model *m, const dpt_layer *L, char *buf, size_t n, cJSON *arr) {
    size_t len = 0;
    buf[0] = 0;
    dpt_param_tensor t;
    for (size_t i = 0; i < dpt_model_n_tensors(m); i++) {
        if (dpt_model_tensor(m, i, &t) != DPT_OK || t.offset < L->param_offset ||
            t.offset >= L->param_offset + L->n_params)
            continue;
        char dims[64] = "";
        size_t dl = 0;
        cJSON *shape = cJSON_CreateArray();
        for (int d = 0; d < t.ndim; d++) {
            dl += (size_t)snprintf(dims + dl, sizeof dims - dl, "%s%zu", d ? "x" : "", t.shape[d]);
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t.shape[d]));
        }
        if (len < n) len += (size_t)snprintf(buf + len, n - len, "%s%s %s", len ? ", " : "", t.name, dims);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t.name);
        cJSON_AddItemToObject(o, "shape", shape);
        cJSON_AddItemToArray(arr, o);
    }
}

/* 0, or the exit status after a message (out of memory building the JSON) */
static int print_model(const dpt_model *m, const char *named, int json) {
    char a[32], b[64], ts[256];
    cJSON *root = cJSON_CreateObject(), *layers = cJSON_AddArrayToObject(root, "layers");
    cJSON_AddStringToObject(root, "model", named);
    cJSON_AddStringToObject(root, "spec", m->spec);
    cli_json_number(root, "parameters", (double)m->n_params);
    cli_json_number(root, "inputs", (double)m->in_dim);
    cli_json_number(root, "outputs", (double)m->out_dim);
    const size_t *in = m->layers[0].in_shape;
    shape_text(in, b, sizeof b);
    if (!json) {
        if (strcmp(named, m->spec)) printf("model %s = %s\n", named, m->spec);
        else printf("model %s\n", m->spec);
        printf("input %s (%zu features), output %zu, %s parameters\n\n", b, m->in_dim, m->out_dim,
               thousands(m->n_params, a));
        printf("%4s  %-12s %-10s %-14s %10s  %s\n", "#", "layer", "kind", "output", "parameters", "tensors");
    }
    char frozen_names[512] = "";
    size_t fl = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        cJSON *o = cJSON_CreateObject(), *tensors = cJSON_CreateArray();
        layer_tensors(m, L, ts, sizeof ts, tensors);
        shape_text(L->out_shape, b, sizeof b);
        cli_json_number(o, "index", (double)l);
        cJSON_AddStringToObject(o, "name", L->name);
        cJSON_AddStringToObject(o, "kind", dpt_layer_kind_name(L->kind));
        cJSON *os = cJSON_AddArrayToObject(o, "output_shape");
        for (int d = 0; d < 3; d++) cJSON_AddItemToArray(os, cJSON_CreateNumber((double)L->out_shape[d]));
        cli_json_number(o, "parameters", (double)L->n_params);
        cJSON_AddItemToObject(o, "tensors", tensors);
        /* residual_from = s + 1: act[s], the input of layer s, is added to this output */
        if (L->residual_from) cli_json_number(o, "adds_input_of_layer", (double)(L->residual_from - 1));
        else cJSON_AddNullToObject(o, "adds_input_of_layer");
        cJSON_AddItemToArray(layers, o);
        if (L->n_params && fl < sizeof frozen_names)
            fl += (size_t)snprintf(frozen_names + fl, sizeof frozen_names - fl, "%s%s", fl ? "," : "", L->name);
        if (json) continue;
        char extra[64] = "";
        if (L->residual_from == l + 1) snprintf(extra, sizeof extra, "%s(+ its input: a residual connection)",
                                                 ts[0] ? " " : "");
        else if (L->residual_from)
            snprintf(extra, sizeof extra, "%s(+ the input of layer %zu)", ts[0] ? " " : "", L->residual_from - 1);
        printf("%4zu  %-12s %-10s %-14s %10s%s%s%s\n", l, L->name, dpt_layer_kind_name(L->kind), b,
               L->n_params ? thousands(L->n_params, a) : "-", ts[0] || extra[0] ? "  " : "", ts, extra);
    }
    int rc = 0;
    if (json) {
        char *s = cJSON_PrintUnformatted(root);
        if (s) printf("%s\n", s);
        else rc = cli_failf("--json: out of memory");
        free(s);
    } else {
        printf("\nlayers with parameters (dptrain train --freeze takes these names): %s\n", frozen_names);
    }
    cJSON_Delete(root);
    return rc;
}

int dpt_cmd_model(int argc, char **argv) {
    const char *spec = NULL, *ckpt = NULL;
    int json = 0;
    cli_option opts[] = {
        {"--model", CLI_STR, &spec, "SPEC", "a model spec (mlp:784-128-10:relu, cnn:..., mnist_cnn, resnet5; docs/nn.md)",
         NULL},
        {"--checkpoint", CLI_STR, &ckpt, "FILE", "a checkpoint (file or run directory): its model", NULL},
        {"--json", CLI_FLAG, &json, NULL, "print one JSON object", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    int rc = cli_parse(argc, argv, 1, opts, USAGE);
    if (rc < 0) return 0;
    if (rc) return rc;
    if (!spec == !ckpt)
        return cli_error("give --model SPEC or --checkpoint FILE (one of them; see dptrain model --help)");
    if (spec) {
        dpt_model *m = NULL;
        dpt_status ms = dpt_model_new(spec, 1, 1, &m);
        if (ms != DPT_OK) return cli_refuse(ms, "--model");
        rc = print_model(m, spec, json);
        dpt_model_free(m);
        return rc;
    }
    char path[1100];
    if ((rc = cli_checkpoint_file("--checkpoint", ckpt, path, sizeof path)) != 0) return rc;
    dpt_checkpoint *ck = NULL;
    dpt_status cs = dpt_checkpoint_open(path, 1, &ck);
    if (cs != DPT_OK) return cli_refuse(cs, "--checkpoint");
    rc = print_model(dpt_checkpoint_model(ck), dpt_checkpoint_spec(ck), json);
    dpt_checkpoint_close(ck);
    return rc;
}
