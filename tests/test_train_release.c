/* train/release: dpt_trainer_exclude_from_guarantee and dpt_trainer_set_initial_params. What a run's privacy statement does
 * not cover reaches every place its results are published: the ledger metadata
 * ("epsilon_excludes") of a private run, saved in ledger.json, and every metrics.jsonl
 * line ("privacy_excludes") of private and non-private runs; it is refused after the run
 * has taken steps, and for an empty or overlong text. A run given its starting parameters
 * starts from exactly them (and from nothing else of theirs: the rest of the run is the
 * seed's), records where they came from with their SHA-256 in the ledger and every
 * checkpoint (a resume keeps it), and refuses them at the wrong time or of the wrong size. */
#include <dptrain/accounting.h>
#include <dptrain/train.h>
#include <dirent.h>
#include <dptrain/inference.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testdata.h"
#include "testutil.h"

static const char *NOTE = "normalization statistics fitted on the training data without noise";

/* lines of path containing needle, and all lines */
static void count_lines(const char *path, const char *needle, int *with, int *all) {
    *with = *all = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        (*all)++;
        *with += strstr(line, needle) != NULL;
    }
    fclose(f);
}

/* every file the run left in dir (checkpoint, ledger, metrics, lock, ...) */
static void remove_run(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

/* A small DP-SGD (priv) or SGD run (2 epochs, or max_steps when > 0) on tr, evaluated on te
 * (NULL: none), writing into out_dir (NULL: nowhere). */
static dpt_trainer *new_run(const dpt_dataset *tr, const dpt_dataset *te, int priv, const char *out_dir,
                            uint64_t max_steps) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:8-6-3:relu";
    c.sampler = priv ? DPT_SAMPLER_POISSON : DPT_SAMPLER_SHUFFLE;
    c.sample_rate = 0.1;
    c.batch_size = 60;
    c.epochs = 2;
    c.seed = 4;
    c.threads = 1;
    c.out_dir = out_dir;
    c.max_steps = max_steps;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    dpt_algo *a = NULL;
    if (priv) {
        dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
        d.sigma = 1.0, d.clip = 1.0;
        CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    } else {
        CHECK_OK(dpt_algo_sgd_new(&a));
    }
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_trainer_new(&c, tr, te, a, &t));
    return t;
}

static void run_one(const dpt_dataset *tr, int priv, const char *dir) {
    dpt_trainer *t = new_run(tr, NULL, priv, dir, 0);
    if (!t) return;
    CHECK_STATUS(dpt_trainer_exclude_from_guarantee(t, ""), DPT_EINVAL);
    char longer[1100];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    CHECK_STATUS(dpt_trainer_exclude_from_guarantee(t, longer), DPT_EINVAL);
    CHECK_OK(dpt_trainer_exclude_from_guarantee(t, NOTE));
    dpt_epoch_result r;
    CHECK_OK(dpt_trainer_run(t, &r));
    /* after steps were taken, their results may already be published: too late */
    CHECK_STATUS(dpt_trainer_exclude_from_guarantee(t, NOTE), DPT_EINVAL);
    char p[256];
    int with = 0, all = 0;
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    count_lines(p, "\"privacy_excludes\":\"normalization statistics fitted on the training data without noise\"",
                &with, &all);
    CHECK(all == 2 && with == all);
    const dpt_ledger *l = dpt_trainer_ledger(t);
    if (priv) {
        CHECK(l && dpt_ledger_get_meta(l, "epsilon_excludes") && !strcmp(dpt_ledger_get_meta(l, "epsilon_excludes"), NOTE));
        dpt_ledger *saved = NULL;
        snprintf(p, sizeof p, "%s/ledger.json", dir);
        CHECK_OK(dpt_ledger_load(p, &saved));
        const char *v = saved ? dpt_ledger_get_meta(saved, "epsilon_excludes") : NULL;
        CHECK(v && !strcmp(v, NOTE));
        dpt_ledger_free(saved);
    } else {
        CHECK(l == NULL);
    }
    dpt_trainer_free(t);
    remove_run(dir);
}

/* A private run whose "test" set is its training set publishes metrics of the private data
 * outside the epsilon: dpt_trainer_new records that itself (same arrays or equal contents);
 * a held-out test set or a non-private run records nothing; notes accumulate, once each. */
static const char *excludes(const dpt_trainer *t) {
    const dpt_ledger *l = dpt_trainer_ledger(t);
    return l ? dpt_ledger_get_meta(l, "epsilon_excludes") : NULL;
}

static void test_metrics_on_training_data(void) {
    static const char *SELF = "test metrics computed on the training data";
    dpt_dataset tr, copy, held;
    tu_make_blobs(&tr, 300, 2, 1.0f);
    tu_make_blobs(&copy, 300, 2, 1.0f); /* equal contents, other arrays */
    tu_make_blobs(&held, 300, 3, 1.0f);
    dpt_trainer *t = new_run(&tr, &tr, 1, NULL, 0);
    CHECK(t && excludes(t) && !strcmp(excludes(t), SELF));
    char both[512];
    snprintf(both, sizeof both, "%s; %s", SELF, NOTE);
    CHECK_OK(dpt_trainer_exclude_from_guarantee(t, NOTE));
    CHECK_OK(dpt_trainer_exclude_from_guarantee(t, NOTE)); /* once */
    CHECK(t && excludes(t) && !strcmp(excludes(t), both));
    dpt_trainer_free(t);
    t = new_run(&tr, &copy, 1, NULL, 0);
    CHECK(t && excludes(t) && !strcmp(excludes(t), SELF));
    dpt_trainer_free(t);
    t = new_run(&tr, &held, 1, NULL, 0);
    CHECK(t && excludes(t) == NULL);
    dpt_trainer_free(t);
    t = new_run(&tr, &tr, 0, NULL, 0); /* non-private: no privacy statement to qualify */
    CHECK(t && dpt_trainer_ledger(t) == NULL);
    dpt_trainer_free(t);
    dpt_dataset_free(&tr);
    dpt_dataset_free(&copy);
    dpt_dataset_free(&held);
}

/* Exclusions longer than an epoch line's label: all kept in the ledger and metrics; the
 * label keeps the short [SEEDED] and cuts the exclusions with "...]" (never mid-character),
 * instead of dropping [SEEDED] as it did when the exclusions filled the buffer. */
static void test_long_exclusions(const dpt_dataset *tr) {
    dpt_trainer *t = new_run(tr, NULL, 1, NULL, 1); /* seed 4: a SEEDED run */
    if (!t) return;
    char a[300], b[300];
    memset(a, 'a', sizeof a - 1);
    a[sizeof a - 1] = 0;
    /* b: two-byte characters (U+00E9), so a cut could fall inside one */
    for (size_t k = 0; k + 2 < sizeof b; k += 2) b[k] = (char)0xC3, b[k + 1] = (char)0xA9;
    b[sizeof b - 2] = 'z', b[sizeof b - 1] = 0;
    CHECK_OK(dpt_trainer_exclude_from_guarantee(t, a));
    CHECK_OK(dpt_trainer_exclude_from_guarantee(t, b));
    CHECK(excludes(t) && strlen(excludes(t)) == strlen(a) + 2 + strlen(b));
    dpt_epoch_result r;
    CHECK_OK(dpt_trainer_run(t, &r));
    const char *lab = r.privacy_label;
    const size_t n = strlen(lab);
    CHECK(n < sizeof r.privacy_label && n > 10);
    CHECK(strstr(lab, "  [SEEDED]") && !strcmp(lab + n - strlen("...]  [SEEDED]"), "...]  [SEEDED]"));
    CHECK(dpt_text_char_len(lab) > 0);
    for (const char *p = lab; *p; p += dpt_text_char_len(p))
        if (!dpt_text_char_len(p)) {
            CHECK(!"the label holds a cut UTF-8 character");
            break;
        }
    dpt_trainer_free(t);
}

/* "SOURCE (SHA-256 of the float32 values: HEX)" computed here from v */
static void init_note(const char *source, const float *v, size_t n, char *out, size_t len) {
    uint8_t h[32];
    char hex[65];
    dpt_hash hs;
    CHECK_OK(dpt_hash_init(&hs));
    CHECK_OK(dpt_hash_update(&hs, v, n * sizeof *v));
    CHECK_OK(dpt_hash_final(&hs, h));
    dpt_hex(h, sizeof h, hex);
    snprintf(out, len, "%s (SHA-256 of the float32 values: %s)", source, hex);
}

static int state_has(const char *ck_path, const char *text) {
    dpt_checkpoint *ck = NULL;
    if (dpt_checkpoint_open(ck_path, 1, &ck) != DPT_OK) return 0;
    int has = strstr(dpt_checkpoint_state(ck), text) != NULL;
    dpt_checkpoint_close(ck);
    return has;
}

static void test_initial_params(const dpt_dataset *tr, int priv, const char *dir) {
    static const char *SRC = "public warm start \"v1\"";
    dpt_trainer *t = new_run(tr, NULL, priv, NULL, 0), *ref = new_run(tr, NULL, priv, NULL, 0);
    if (!t || !ref) return;
    dpt_model *m = dpt_trainer_model(t);
    const size_t P = m->n_params;
    float *v = malloc(P * sizeof *v), *seed_init = malloc(P * sizeof *v);
    if (!v || !seed_init) abort();
    memcpy(seed_init, m->theta, P * sizeof *v);
    for (size_t i = 0; i < P; i++) v[i] = 0.05f * (float)((int)(i % 11) - 5);
    /* refused: no values, wrong count, a NaN, an overlong source; nothing changes */
    CHECK_STATUS(dpt_trainer_set_initial_params(NULL, v, P, SRC), DPT_EINVAL);
    CHECK_STATUS(dpt_trainer_set_initial_params(t, NULL, P, SRC), DPT_EINVAL);
    CHECK_STATUS(dpt_trainer_set_initial_params(t, v, P - 1, SRC), DPT_EMISMATCH);
    CHECK(strstr(dpt_last_error(), "mlp:8-6-3:relu has 75 parameters") != NULL);
    v[7] = NAN;
    CHECK_STATUS(dpt_trainer_set_initial_params(t, v, P, SRC), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "params[7] (fc1.weight[7]) = nan is not finite") != NULL);
    v[7] = 0.25f, v[73] = INFINITY; /* named by its tensor: fc2.bias starts at 72 */
    CHECK_STATUS(dpt_trainer_set_initial_params(t, v, P, SRC), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "params[73] (fc2.bias[1]) = inf is not finite") != NULL);
    v[73] = 0.0f;
    v[7] = 0.25f;
    char longer[DPT_INIT_SOURCE_MAX + 2];
    memset(longer, 's', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    CHECK_STATUS(dpt_trainer_set_initial_params(t, v, P, longer), DPT_EINVAL);
    /* one line of UTF-8 text: no control characters, no malformed or overlong sequences */
    static const char *const BAD[] = {"two\nlines", "tab\there", "latin-1 \xe9t\xe9", "cut \xc3", "overlong \xc0\xaf",
                                      "surrogate \xed\xa0\x80", "beyond \xf4\x90\x80\x80", "C1 \xc2\x85", "del \x7f"};
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        CHECK_STATUS(dpt_trainer_set_initial_params(t, v, P, BAD[i]), DPT_EINVAL);
        CHECK(strstr(dpt_last_error(), "UTF-8 text without control characters") != NULL);
    }
    CHECK(memcmp(m->theta, seed_init, P * sizeof *v) == 0);
    CHECK(!dpt_trainer_ledger(t) || !dpt_ledger_get_meta(dpt_trainer_ledger(t), "initial_params"));
    /* accepted: the model holds exactly v, the provenance is recorded */
    CHECK_OK(dpt_trainer_set_initial_params(t, v, P, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82")); /* UTF-8 */
    CHECK_OK(dpt_trainer_set_initial_params(t, v, P, SRC)); /* the last call's values and source */
    CHECK(memcmp(m->theta, v, P * sizeof *v) == 0);
    char note[400];
    init_note(SRC, v, P, note, sizeof note);
    if (priv) {
        const char *got = dpt_ledger_get_meta(dpt_trainer_ledger(t), "initial_params");
        CHECK(got && !strcmp(got, note));
    }
    /* the rest of the run is the seed's: the same run as a trainer whose parameters were
     * overwritten with v behind the API's back (same batches, same noise) */
    memcpy(dpt_trainer_model(ref)->theta, v, P * sizeof *v);
    CHECK_OK(dpt_trainer_run(t, NULL));
    CHECK_OK(dpt_trainer_run(ref, NULL));
    CHECK(memcmp(m->theta, dpt_trainer_model(ref)->theta, P * sizeof *v) == 0);
    CHECK(memcmp(m->theta, v, P * sizeof *v) != 0); /* it trained */
    /* too late once the run has stepped */
    CHECK_STATUS(dpt_trainer_set_initial_params(t, v, P, SRC), DPT_EINVAL);
    dpt_trainer_free(t);
    dpt_trainer_free(ref);

    /* with a run directory: the checkpoint's state and ledger.json carry the note, a resume
     * keeps it and refuses new values */
    t = new_run(tr, NULL, priv, dir, 5);
    if (!t) return;
    CHECK_OK(dpt_trainer_set_initial_params(t, v, P, SRC));
    CHECK_OK(dpt_trainer_run(t, NULL));
    dpt_trainer_free(t);
    char ck[300], lp[300], quoted[420];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dir);
    snprintf(lp, sizeof lp, "%s/ledger.json", dir);
    init_note("public warm start \\\"v1\\\"", v, P, quoted, sizeof quoted); /* as JSON writes it */
    CHECK(state_has(ck, quoted));
    if (priv) {
        dpt_ledger *saved = NULL;
        CHECK_OK(dpt_ledger_load(lp, &saved));
        const char *got = saved ? dpt_ledger_get_meta(saved, "initial_params") : NULL;
        CHECK(got && !strcmp(got, note));
        dpt_ledger_free(saved);
    }
    t = new_run(tr, NULL, priv, dir, 0);
    if (!t) return;
    CHECK_OK(dpt_trainer_resume(t));
    CHECK_STATUS(dpt_trainer_set_initial_params(t, v, P, SRC), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "resumed") != NULL);
    CHECK_OK(dpt_trainer_run(t, NULL));
    CHECK(dpt_trainer_step(t) > 5);
    dpt_trainer_free(t);
    CHECK(state_has(ck, quoted)); /* the resumed run's checkpoint still says so */
    remove_run(dir);
    free(v);
    free(seed_init);
}

int main(void) {
    char dir[] = "/tmp/dpt_release_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    dpt_dataset tr;
    tu_make_blobs(&tr, 300, 2, 1.0f);
    run_one(&tr, 1, dir);
    run_one(&tr, 0, dir);
    CHECK_STATUS(dpt_trainer_exclude_from_guarantee(NULL, NOTE), DPT_EINVAL);
    test_metrics_on_training_data();
    test_long_exclusions(&tr);
    test_initial_params(&tr, 1, dir);
    test_initial_params(&tr, 0, dir);
    dpt_dataset_free(&tr);
    CHECK(rmdir(dir) == 0); /* nothing left behind in /tmp */
    TEST_MAIN_END();
}
