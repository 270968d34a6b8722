/* `dptrain train --init-from CKPT`: see init_from.h. */
#include "init_from.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "presets.h"

/* "checkpoint PATH (ALGO run, step N)" in at most len - 1 bytes: a long path keeps its
 * tail, cut at a character boundary */
static int describe(const cli_init_from *f, char *out, size_t len) {
    char abs[PATH_MAX], what[160];
    const char *shown = realpath(f->file, abs) ? abs : f->file;
    const char *algo = dpt_checkpoint_algorithm(f->ck);
    snprintf(what, sizeof what, " (%s run, step %" PRIu64 ")", algo && algo[0] ? algo : "unknown",
             dpt_checkpoint_step(f->ck));
    cli_text_clean(what);
    size_t plen = strlen(shown), room = len - 1 - strlen("checkpoint ") - strlen(what);
    const char *tail = shown;
    const char *dots = "";
    if (plen > room) {
        tail = shown + plen - (room - 3);
        while ((*(const unsigned char *)tail & 0xc0) == 0x80) tail++; /* a character's first byte */
        dots = "...";
    }
    int w = snprintf(out, len, "checkpoint %s%s%s", dots, tail, what);
    if (w < 0 || (size_t)w >= len) return cli_error("--init-from: path too long");
    cli_text_clean(out);
    return 0;
}

/* the first non-finite parameter, named by tensor */
static int finite_params(const cli_init_from *f) {
    const dpt_model *m = dpt_checkpoint_model(f->ck);
    for (size_t i = 0; i < dpt_model_n_tensors(m); i++) {
        dpt_param_tensor t;
        dpt_status st = dpt_model_tensor(m, i, &t);
        if (st != DPT_OK) return cli_refuse(st, "--init-from");
        for (size_t j = 0; j < t.size; j++)
            if (!isfinite(m->theta[t.offset + j]))
                return cli_error("--init-from %s: tensor %s holds %g at index %zu: the parameters must be finite",
                                 f->file, t.name, (double)m->theta[t.offset + j], j);
    }
    return 0;
}

static int has_recorded_pca(const dpt_checkpoint *ck) {
    cJSON *root = cJSON_Parse(dpt_checkpoint_state(ck));
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(root, "run");
    int has = cJSON_GetObjectItemCaseSensitive(run, "pca") != NULL;
    cJSON_Delete(root);
    return has;
}

/* 1 when dir holds file (the same directory: --overwrite would remove that run's files) */
static int same_dir(const char *file, const char *dir) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(file, a) || !realpath(dir, b)) return 0;
    char *slash = strrchr(a, '/');
    if (!slash) return 0;
    *slash = 0;
    return !strcmp(a[0] ? a : "/", b);
}

int cli_init_from_refuse_init(void) {
    const char *init = NULL;
    int typed = 0;
    const char *preset = cli_preset_setting("--init", &init, &typed);
    if (!preset || typed)
        return cli_error("--init: not with --init-from (the run starts from the checkpoint's parameters)");
    /* the user never typed --init: say whose it is, and the one way around it */
    char rest[1024], model_note[256] = "";
    cli_preset_flags_except("--init", rest, sizeof rest);
    const char *model = NULL;
    int model_typed = 0;
    if (cli_preset_setting("--model", &model, &model_typed) && !model_typed)
        snprintf(model_note, sizeof model_note, " (leave out its --model %s as well to take the checkpoint's model)",
                 model);
    return cli_error("--init-from: --preset %s sets --init %s, which a run from a checkpoint cannot take (it starts "
                     "from the checkpoint's parameters), and a preset's flags cannot be unset: instead of --preset "
                     "%s, give its other flags: %s%s", preset, init, preset, rest, model_note);
}

int cli_init_from_open(cli_init_from *f, const char *path, int resume, int overwrite, const char *out) {
    memset(f, 0, sizeof *f);
    f->path = path;
    if (resume) return cli_error("--init-from: not with --resume (a resumed run continues from its own checkpoint)");
    int rc = cli_checkpoint_file("--init-from", path, f->file, sizeof f->file);
    if (rc) return rc;
    if (overwrite && same_dir(f->file, out))
        return cli_error("--init-from %s is in --out %s, which --overwrite would empty (the checkpoint and its "
                         "ledger would be lost): write the new run to another directory", path, out);
    dpt_status cs = dpt_checkpoint_open(f->file, 1, &f->ck);
    if (cs != DPT_OK) return cli_refuse(cs, "--init-from");
    rc = finite_params(f);
    if (!rc) rc = describe(f, f->source, sizeof f->source);
    f->has_pca = has_recorded_pca(f->ck);
    return rc;
}

/* the same layers (kinds, shapes, kernels, residual links), whatever the spec's spelling */
static int same_layers(const dpt_model *a, const dpt_model *b) {
    if (a->n_params != b->n_params || a->n_layers != b->n_layers) return 0;
    for (size_t l = 0; l < a->n_layers; l++) {
        const dpt_layer *x = &a->layers[l], *y = &b->layers[l];
        if (x->kind != y->kind || x->has_bias != y->has_bias || x->k != y->k || x->stride != y->stride ||
            x->pad != y->pad || x->groups != y->groups || x->residual_from != y->residual_from ||
            memcmp(x->in_shape, y->in_shape, sizeof x->in_shape) || memcmp(x->out_shape, y->out_shape, sizeof x->out_shape))
            return 0;
    }
    return 1;
}

static int model_differs(const cli_init_from *f, const char *mine) {
    return cli_error("--init-from %s: its model is %s, this run's is %s (without --model, or a --preset that sets "
                     "one, the run takes the checkpoint's)", f->path, dpt_checkpoint_spec(f->ck), mine);
}

int cli_init_from_same_model(const cli_init_from *f, const char *spec) {
    dpt_model *m = NULL;
    if (dpt_model_new(spec, 1, 1, &m) != DPT_OK) {
        dpt_clear_error();
        return 0;
    }
    int rc = same_layers(m, dpt_checkpoint_model(f->ck)) ? 0 : model_differs(f, dpt_model_spec(m));
    dpt_model_free(m);
    return rc;
}

int cli_init_from_start(const cli_init_from *f, dpt_trainer *t) {
    const dpt_model *mine = dpt_trainer_model(t), *theirs = dpt_checkpoint_model(f->ck);
    if (!same_layers(mine, theirs)) return model_differs(f, dpt_model_spec(mine));
    dpt_status st = dpt_trainer_set_initial_params(t, theirs->theta, theirs->n_params, f->source);
    if (st != DPT_OK) return cli_refuse(st, "--init-from");
    /* the guarantee of this run does not reach back into the checkpoint's */
    if (dpt_checkpoint_ledger(f->ck))
        fprintf(stderr, "dptrain: note: --init-from %s comes from a private run: this run's epsilon covers this run "
                        "only; if both runs used the same data, the spends compose (its ledger is in the "
                        "checkpoint: dptrain account --ledger %s; at worst the epsilons and deltas add up)\n",
                f->path, f->file);
    if (f->has_pca)
        fprintf(stderr, "dptrain: note: --init-from %s was trained on inputs projected by its run's own DP-PCA, "
                        "which this run does not reuse (with --pca-dims it releases a new projection): its first "
                        "layer starts in another basis than the one it learned in\n", f->path);
    return 0;
}

void cli_init_from_close(cli_init_from *f) {
    dpt_checkpoint_close(f->ck);
    f->ck = NULL;
}
