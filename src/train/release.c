/* What a run's privacy statement does not cover: uses of the training data outside every
 * accountant, recorded where the run's results are published (ledger, metrics); and where
 * its starting parameters came from when the caller gives them. */
#include <dptrain/accounting.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../core/text_fit.h"
#include "train_internal.h"

dpt_status dpt_trainer_exclude_from_guarantee(dpt_trainer *t, const char *what) {
    DPT_CHECK(t, DPT_EINVAL, "dpt_trainer_exclude_from_guarantee: t is NULL");
    DPT_CHECK(what && what[0], DPT_EINVAL, "dpt_trainer_exclude_from_guarantee: what must be a non-empty text");
    DPT_CHECK(strlen(what) < sizeof t->excludes, DPT_EINVAL,
              "dpt_trainer_exclude_from_guarantee: what is longer than %zu bytes", sizeof t->excludes - 1);
    /* Before any result leaves the process: a resumed run's ledger holds the note already
     * (it is set again, identically, so a changed note shows in the ledger). */
    DPT_CHECK(t->step == 0 || t->resumed, DPT_EINVAL,
              "dpt_trainer_exclude_from_guarantee: call it before dpt_trainer_run (step %llu)",
              (unsigned long long)t->step);
    /* several exclusions are kept side by side ("; "); one already recorded is not repeated */
    if (strstr(t->excludes, what)) return DPT_OK;
    size_t have = strlen(t->excludes);
    DPT_CHECK(have + (have ? 2 : 0) + strlen(what) < sizeof t->excludes, DPT_EINVAL,
              "dpt_trainer_exclude_from_guarantee: the exclusions together exceed %zu bytes", sizeof t->excludes - 1);
    char all[sizeof t->excludes];
    memcpy(all, t->excludes, have);
    if (have) memcpy(all + have, "; ", 2), have += 2;
    memcpy(all + have, what, strlen(what) + 1); /* fits: checked above */
    if (t->ledger) DPT_TRY(dpt_ledger_set_meta(t->ledger, "epsilon_excludes", all));
    strcpy(t->excludes, all);
    return DPT_OK;
}

dpt_status dpt_trainer_excludes_to_ledger(dpt_trainer *t) {
    if (!t->ledger || !t->excludes[0]) return DPT_OK;
    const char *have = dpt_ledger_get_meta(t->ledger, "epsilon_excludes");
    char all[2 * sizeof t->excludes + 2];
    snprintf(all, sizeof all, "%s", have ? have : "");
    int changed = 0;
    for (const char *p = t->excludes; *p;) {
        const char *e = strstr(p, "; ");
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char one[sizeof t->excludes];
        memcpy(one, p, len);
        one[len] = 0;
        if (!strstr(all, one)) {
            size_t n = strlen(all);
            DPT_CHECK(n + 2 + len < sizeof all, DPT_EINVAL, "the privacy exclusions together exceed %zu bytes",
                      sizeof all - 1);
            snprintf(all + n, sizeof all - n, "%s%s", n ? "; " : "", one);
            changed = 1;
        }
        p += len + (e ? 2 : 0);
    }
    return changed ? dpt_ledger_set_meta(t->ledger, "epsilon_excludes", all) : DPT_OK;
}

void dpt_privacy_note_label(const char *note, const char *excludes, char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    if (note && *note) snprintf(buf, cap, "  [%s]", note);
    const size_t w = strlen(buf);
    if (excludes && *excludes && w + 1 < cap) dpt_bracket_fit(buf + w, cap - w, "  [does NOT cover: ", excludes);
}

/* 1 when s is one line of text (dpt_text_char_len): safe in JSON, in a terminal and for any
 * reader of the ledger */
static int text_ok(const char *s) {
    for (size_t k; *s; s += k)
        if (!(k = dpt_text_char_len(s))) return 0;
    return 1;
}

dpt_status dpt_trainer_set_initial_params(dpt_trainer *t, const float *params, size_t n, const char *source) {
    DPT_CHECK(t, DPT_EINVAL, "dpt_trainer_set_initial_params: t is NULL");
    DPT_CHECK(params, DPT_EINVAL, "dpt_trainer_set_initial_params: params is NULL");
    if (!source || !source[0]) source = "given by the caller";
    DPT_CHECK(strlen(source) <= DPT_INIT_SOURCE_MAX, DPT_EINVAL,
              "dpt_trainer_set_initial_params: source is longer than %d bytes", DPT_INIT_SOURCE_MAX);
    DPT_CHECK(text_ok(source), DPT_EINVAL,
              "dpt_trainer_set_initial_params: source must be UTF-8 text without control characters");
    /* A resumed run continues from its checkpoint's parameters; a run that has stepped has
     * released results computed from the old ones. */
    DPT_CHECK(!t->resumed && t->step == 0 && !t->running, DPT_EINVAL,
              "dpt_trainer_set_initial_params: only for a fresh run, after dpt_trainer_new and before dpt_trainer_run "
              "(%s)", t->resumed ? "this run was resumed: it continues from its checkpoint" : "it has run");
    /* noisy-gd's KL analysis (and its linearized model, taken at dpt_trainer_new) is of the
     * random initialization cfg.init */
    DPT_CHECK(strcmp(t->algo->name, "noisy-gd") != 0, DPT_ENOTSUP,
              "dpt_trainer_set_initial_params: not for noisy-gd, whose KL bound is a statement about its random "
              "initialization (init)");
    dpt_model *m = t->model;
    DPT_CHECK(n == m->n_params, DPT_EMISMATCH,
              "dpt_trainer_set_initial_params: %zu values given, the model %s has %zu parameters", n,
              t->cfg.model_spec, m->n_params);
    for (size_t i = 0; i < n; i++) {
        if (isfinite(params[i])) continue;
        dpt_param_tensor pt = {.name = "?"}; /* the tensor holding it, for the message */
        for (size_t j = 0; j < dpt_model_n_tensors(m); j++)
            if (dpt_model_tensor(m, j, &pt) == DPT_OK && i >= pt.offset && i < pt.offset + pt.size) break;
        return dpt_set_error(DPT_EINVAL, "dpt_trainer_set_initial_params: params[%zu] (%s[%zu]) = %g is not finite",
                             i, pt.name, i - pt.offset, (double)params[i]);
    }
    /* data parallel: every rank calls this with the same values (no collective here: a rank
     * that did not call it would wait in another one); the first step compares the ranks'
     * starting parameters (dpt_dist_check_start) */
    uint8_t h[32];
    char hex[65], note[sizeof t->init_note];
    dpt_hash hs;
    DPT_TRY(dpt_hash_init(&hs));
    dpt_status su = dpt_hash_update(&hs, params, n * sizeof *params);
    DPT_TRY(dpt_hash_final(&hs, h)); /* frees the context */
    DPT_TRY(su);
    dpt_hex(h, sizeof h, hex);
    snprintf(note, sizeof note, "%s (SHA-256 of the float32 values: %s)", source, hex);
    /* the model changes only once the ledger records where its values came from */
    if (t->ledger) DPT_TRY(dpt_ledger_set_meta(t->ledger, "initial_params", note));
    memcpy(m->theta, params, n * sizeof *params);
    memcpy(t->init_note, note, sizeof note);
    return DPT_OK;
}

const char *dpt_trainer_initial_params(const dpt_trainer *t) { return t ? t->init_note : ""; }
