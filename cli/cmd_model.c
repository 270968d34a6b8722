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

/* The tensors of layer L as a JSON array into arr. */
static void layer_tensors(const dpt_model *m, const dpt_layer *L, cJSON *arr) {
    dpt_param_tensor t;
    for (size_t i = 0; i < dpt_model_n_tensors(m); i++) {
        if (dpt_model_tensor(m, i, &t) != DPT_OK || t.offset < L->param_offset ||
            t.offset >= L->param_offset + L->n_params)
            continue;
        cJSON *shape = cJSON_CreateArray();
        for (int d = 0; d < t.ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t.shape[d]));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t.name);
        cJSON_AddItemToObject(o, "shape", shape);
        cJSON_AddItemToArray(arr, o);
    }
}

/* 0, or the exit status after a message (out of memory building the JSON) */
static int print_model(const dpt_model *m, const char *named, int json) {
    cJSON *root = cJSON_CreateObject(), *layers = cJSON_AddArrayToObject(root, "layers");
    cJSON_AddStringToObject(root, "model", named);
    cJSON_AddStringToObject(root, "spec", m->spec);
    cli_json_number(root, "parameters", (double)m->n_params);
    cli_json_number(root, "inputs", (double)m->in_dim);
    cli_json_number(root, "outputs", (double)m->out_dim);
    if (!json) {
        if (strcmp(named, m->spec)) printf("model %s = %s\n", named, m->spec);
        else printf("model %s\n", m->spec);
        size_t need = dpt_model_summary(m, NULL, 0);
        char *text = malloc(need + 1);
        if (!text) {
            cJSON_Delete(root);
            return cli_failf("out of memory");
        }
        dpt_model_summary(m, text, need + 1);
        fputs(text, stdout);
        free(text);
    }
    char frozen_names[512] = "";
    size_t fl = 0;
    for (size_t l = 0; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        cJSON *o = cJSON_CreateObject(), *tensors = cJSON_CreateArray();
        layer_tensors(m, L, tensors);
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
