/* Fuzzes the checkpoint reader: dpt_checkpoint_peek on any bytes, then (when the file is
 * accepted and its model small) building that model and dpt_checkpoint_load with an
 * optimizer, as eval and resume do. Seeds: checkpoints written by dpt_checkpoint_save. */
#include <dptrain/io.h>
#include <dptrain/nn.h>
#include <dptrain/optim.h>

#include "fuzz_util.h"
#include "nn/nn_internal.h"

/* Only models of at most ~1e6 parameters are built (a mutated width would otherwise ask
 * for gigabytes, which is not a parser defect). */
static int small_model(const char *spec) {
    dpt_spec s;
    if (dpt_spec_parse(spec, &s) != DPT_OK) return 0;
    double p = 0;
    if (s.cnn) {
        double in = (double)s.in_shape[0] * (double)s.in_shape[1] * (double)s.in_shape[2];
        if (in > 4096) return 0;
        for (size_t i = 0; i < s.n_items; i++)
            if (s.items[i].n > 64 || s.items[i].k > 8) return 0;
        return 1;
    }
    for (size_t i = 0; i + 1 < s.n_widths; i++) p += (double)s.widths[i] * (double)s.widths[i + 1];
    return p <= 1e6;
}

/* A file refused only for its hash is re-sealed by the documented rule (SHA-256 of the
 * whole file with the 64 digits after "checkpoint_sha256":" read as '0') and read again,
 * so mutations reach the checks behind the hash and the loader itself. */
static int reseal(uint8_t *b, size_t n) {
    static const char mark[] = "\"checkpoint_sha256\":\"";
    size_t ml = sizeof mark - 1;
    for (size_t i = 8; i + ml + 64 <= n; i++)
        if (!memcmp(b + i, mark, ml)) {
            uint8_t dg[32];
            char hex[65];
            dpt_hash h;
            memset(b + i + ml, '0', 64);
            if (dpt_hash_init(&h) != DPT_OK || dpt_hash_update(&h, b, n) != DPT_OK || dpt_hash_final(&h, dg) != DPT_OK)
                abort();
            dpt_hex(dg, 32, hex);
            memcpy(b + i + ml, hex, 64);
            return 1;
        }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path("ck.safetensors");
    fuzz_write(path, data, size);
    char *spec = NULL, *state = NULL;
    dpt_status st = dpt_checkpoint_peek(path, &spec, &state);
    if (st != DPT_OK && strstr(dpt_last_error(), "does not match its SHA-256")) {
        uint8_t *copy = malloc(size ? size : 1);
        if (!copy) abort();
        memcpy(copy, data, size);
        if (reseal(copy, size)) {
            fuzz_write(path, copy, size);
            st = dpt_checkpoint_peek(path, &spec, &state);
        }
        free(copy);
    }
    if (st == DPT_OK && small_model(spec)) {
        dpt_model *m = NULL;
        if (dpt_model_new(spec, 1, 1, &m) == DPT_OK) {
            dpt_optim o;
            dpt_optim_config c = dpt_optim_defaults(DPT_OPT_SGD);
            if (dpt_optim_init(&o, &c, m->n_params) == DPT_OK) {
                char *loaded = NULL;
                (void)dpt_checkpoint_load(path, m, &o, &loaded);
                free(loaded);
                dpt_optim_free(&o);
            }
            dpt_model_free(m);
        }
    }
    free(spec);
    free(state);
    unlink(path);
    return 0;
}

static void fuzz_seeds(const char *dir) {
    static const char *specs[] = {"mlp:4-3-2:relu", "mlp:3-2:tanh:nobias", "cnn:1x4x4:conv2k3p1,relu,flatten,fc3"};
    static const char *states[] = {"{}", "{\"step\":\"3\",\"run\":{\"norm_mean\":[0.5],\"norm_std\":[2]}}",
                                   "{\"ledger\":\"{}\",\"sampler\":{\"rng\":{\"seed\":\"1\",\"pos\":3}}}"};
    for (int i = 0; i < 3; i++) {
        dpt_model *m = NULL;
        if (dpt_model_new(specs[i], 1, 1, &m) != DPT_OK) abort();
        for (size_t j = 0; j < m->n_params; j++) m->theta[j] = (float)j * 0.25f - 1.0f;
        dpt_optim o;
        dpt_optim_config c = dpt_optim_defaults(i == 1 ? DPT_OPT_SGD : DPT_OPT_ADAM);
        if (i == 1) c.momentum = 0.9;
        if (dpt_optim_init(&o, &c, m->n_params) != DPT_OK) abort();
        const char *tmp = fuzz_path("seed.safetensors");
        if (dpt_checkpoint_save(tmp, m, i == 2 ? NULL : &o, states[i]) != DPT_OK) abort();
        char name[32];
        snprintf(name, sizeof name, "ck%d", i);
        fuzz_seed_file(dir, name, tmp);
        unlink(tmp);
        dpt_optim_free(&o);
        dpt_model_free(m);
    }
}
