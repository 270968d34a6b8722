/* Fuzzes the model-spec parser and the option-string parsers of the library: the first
 * byte picks the parser (model spec, optimizer, schedule, loss, init, clip mode, KL init),
 * the rest is the string. An accepted small model spec is also built and run forward on a
 * zero input. Seeds: every named model and spec form of docs/nn.md and valid option values. */
#include <dptrain/accounting.h>
#include <dptrain/nn.h>
#include <dptrain/optim.h>
#include <dptrain/privacy.h>

#include "fuzz_util.h"
#include "nn/nn_internal.h"

static int small(const dpt_spec *s) {
    if (s->cnn) {
        if ((double)s->in_shape[0] * (double)s->in_shape[1] * (double)s->in_shape[2] > 4096) return 0;
        for (size_t i = 0; i < s->n_items; i++)
            if (s->items[i].n > 64 || s->items[i].k > 8) return 0;
        return 1;
    }
    double p = 0;
    for (size_t i = 0; i + 1 < s->n_widths; i++) p += (double)s->widths[i] * (double)s->widths[i + 1];
    return p <= 1e6;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int kind = data[0] % 7;
    char *s = fuzz_str(data + 1, size - 1);
    switch (kind) {
    case 0: {
        dpt_spec sp;
        if (dpt_spec_parse(s, &sp) == DPT_OK && small(&sp)) {
            dpt_model *m = NULL;
            if (dpt_model_new(s, 2, 1, &m) == DPT_OK) {
                float *x = calloc(2 * m->in_dim, sizeof *x);
                if (!x) abort();
                if (dpt_model_forward(m, x, 2) != DPT_OK) abort(); /* a built model must run */
                free(x);
                dpt_model_free(m);
            }
        }
        break;
    }
    case 1: { dpt_opt_kind k; (void)dpt_optim_parse(s, &k); break; }
    case 2: { dpt_schedule sc; (void)dpt_schedule_parse(s, &sc); break; }
    case 3: { dpt_loss_kind k; (void)dpt_loss_parse(s, &k); break; }
    case 4: { dpt_init_scheme k; (void)dpt_init_parse(s, &k); break; }
    case 5: { dpt_clip_mode k; (void)dpt_clip_mode_parse(s, &k); break; }
    default: { dpt_kl_init k; (void)dpt_kl_init_parse(s, &k); break; }
    }
    free(s);
    return 0;
}

static void fuzz_seeds(const char *dir) {
    static const char *seeds[] = {
        "\0mlp:784-128-10:relu", "\0mlp:4-3-2:gelu:nobias", "\0ae:6-3-6:tanh", "\0mnist_cnn", "\0resnet5",
        "\0cnn:1x8x8:conv4k3s1p1,relu,maxpool2s1,conv4k3,tanh,avgpool2,flatten,fc10",
        "\0cnn:3x8x8:conv8k3p1,relu,[conv8k3p1],relu,gn2,flatten,fc4:nobias",
        "\0gpt_tiny:t8:v16", "\0bert_tiny:t4:c3", "\0cnn:2x4x4:conv4k2s2,toseqcls,[ln,plin12,attn2c,plin4],clspool",
        "\1adam", "\1sgd", "\2constant", "\2step:0.85:10", "\2exp:0.99", "\3ce", "\3mse", "\4default",
        "\5flat", "\5per-layer", "\6zero"};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%zu", i);
        fuzz_seed(dir, name, seeds[i], 1 + strlen(seeds[i] + 1));
    }
}
