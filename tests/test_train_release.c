/* train/release: dpt_trainer_exclude_from_guarantee. What a run's privacy statement does
 * not cover reaches every place its results are published: the ledger metadata
 * ("epsilon_excludes") of a private run, saved in ledger.json, and every metrics.jsonl
 * line ("privacy_excludes") of private and non-private runs; it is refused after the run
 * has taken steps, and for an empty or overlong text. */
#include <dptrain/accounting.h>
#include <dptrain/train.h>
#include <dirent.h>
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

/* A small DP-SGD (priv) or SGD run on tr, evaluated on te (NULL: none), writing into
 * out_dir (NULL: nowhere). */
static dpt_trainer *new_run(const dpt_dataset *tr, const dpt_dataset *te, int priv, const char *out_dir) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:8-6-3:relu";
    c.sampler = priv ? DPT_SAMPLER_POISSON : DPT_SAMPLER_SHUFFLE;
    c.sample_rate = 0.1;
    c.batch_size = 60;
    c.epochs = 2;
    c.seed = 4;
    c.threads = 1;
    c.out_dir = out_dir;
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
    dpt_trainer *t = new_run(tr, NULL, priv, dir);
    if (!t) return;
    CHECK_STATUS(dpt_trainer_exclude_from_guarantee(t, ""), DPT_EINVAL);
    char longer[400];
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
    dpt_trainer *t = new_run(&tr, &tr, 1, NULL);
    CHECK(t && excludes(t) && !strcmp(excludes(t), SELF));
    char both[512];
    snprintf(both, sizeof both, "%s; %s", SELF, NOTE);
    CHECK_OK(dpt_trainer_exclude_from_guarantee(t, NOTE));
    CHECK_OK(dpt_trainer_exclude_from_guarantee(t, NOTE)); /* once */
    CHECK(t && excludes(t) && !strcmp(excludes(t), both));
    dpt_trainer_free(t);
    t = new_run(&tr, &copy, 1, NULL);
    CHECK(t && excludes(t) && !strcmp(excludes(t), SELF));
    dpt_trainer_free(t);
    t = new_run(&tr, &held, 1, NULL);
    CHECK(t && excludes(t) == NULL);
    dpt_trainer_free(t);
    t = new_run(&tr, &tr, 0, NULL); /* non-private: no privacy statement to qualify */
    CHECK(t && dpt_trainer_ledger(t) == NULL);
    dpt_trainer_free(t);
    dpt_dataset_free(&tr);
    dpt_dataset_free(&copy);
    dpt_dataset_free(&held);
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
    dpt_dataset_free(&tr);
    CHECK(rmdir(dir) == 0); /* nothing left behind in /tmp */
    TEST_MAIN_END();
}
