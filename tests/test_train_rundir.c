/* train/rundir: what a run directory guarantees and what the trainer tells its caller.
 * Callbacks see each step and each epoch, private runs release no loss or batch size,
 * and every result reaches metrics.jsonl and on_epoch only after ledger.json and the
 * checkpoint holding its steps are on disk; a callback stops the run cleanly; faults
 * injected between saving and publishing never lose or duplicate a record (plain and
 * --secure); a stop inside an epoch publishes that partial epoch; one trainer per
 * directory (flock, across processes); a fresh run refuses a non-empty directory unless
 * told to overwrite, which removes only the run's files; run ids bind ledger and
 * checkpoint; the files name the training data only under the run's secret key, which a
 * resume needs; concurrent atomic writes of one path never collide; the library prints
 * nothing (its notes go to the log callback). */
#include <dptrain/accounting.h>
#include <dptrain/io.h>
#include <dptrain/train.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testdata.h"
#include "testutil.h"

static dpt_dataset TR, TE;
static const dpt_dataset *TRAIN = &TR; /* the training set new_trainer uses */

/* ==== helpers ==== */

static char *path_in(const char *dir, const char *name) {
    static char buf[4][700];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static const char *new_dir(const char *name) {
    static char buf[8][400];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tu_tmpdir(), name);
    return buf[k];
}

static dpt_train_config cfg_for(const char *dir, int private_) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:8-16-3:gelu";
    c.epochs = 3;
    c.seed = 7;
    c.threads = 1;
    c.out_dir = dir;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.1;
    if (private_) {
        c.sampler = DPT_SAMPLER_POISSON;
        c.sample_rate = 0.05; /* 20 steps per epoch */
    } else {
        c.batch_size = 32; /* 19 steps per epoch over 600 examples */
    }
    return c;
}

static dpt_status new_trainer(const dpt_train_config *c, int private_, int secure, dpt_trainer **t) {
    dpt_algo *a = NULL;
    dpt_status s;
    if (private_) {
        dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
        d.sigma = 1.0;
        d.clip = 1.0;
        d.secure = secure;
        s = dpt_algo_dpsgd_new(&d, &a);
    } else {
        s = dpt_algo_sgd_new(&a);
    }
    if (s != DPT_OK) return s;
    dpt_train_config cc = *c;
    cc.secure = secure;
    return dpt_trainer_new(&cc, TRAIN, &TE, a, t);
}

static void append(const char *path, const char *text) {
    FILE *f = fopen(path, "a");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static uint64_t ledger_file_steps(const char *dir) {
    dpt_ledger *l = NULL;
    if (dpt_ledger_load(path_in(dir, "ledger.json"), &l) != DPT_OK) return UINT64_MAX;
    uint64_t s = dpt_ledger_steps(l);
    dpt_ledger_free(l);
    return s;
}

/* a string field of the checkpoint's training state ("" when absent) */
static void ckpt_field(const char *dir, const char *key, char *out, size_t n) {
    out[0] = 0;
    char *state = NULL;
    if (dpt_checkpoint_peek(path_in(dir, "checkpoint.safetensors"), NULL, &state) != DPT_OK) return;
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(state, pat);
    if (p) {
        p += strlen(pat);
        if (*p == '"') p++;
        size_t k = 0;
        while (p[k] && p[k] != '"' && p[k] != ',' && p[k] != '}' && k + 1 < n) k++;
        memcpy(out, p, k);
        out[k] = 0;
    }
    free(state);
}

static uint64_t ckpt_step(const char *dir) {
    char b[64];
    ckpt_field(dir, "step", b, sizeof b);
    return b[0] ? strtoull(b, NULL, 10) : UINT64_MAX;
}

/* metrics.jsonl: number of lines, and each line's step and partial flag */
typedef struct {
    int n;
    uint64_t step[64], epoch[64];
    int partial[64];
    int has_train_loss;
    int complete; /* ends with a newline */
} metrics_t;

static void read_metrics(const char *dir, metrics_t *m) {
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path_in(dir, "metrics.jsonl"), "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f) && m->n < 64) {
        const char *s = strstr(line, "\"step\":"), *e = strstr(line, "\"epoch\":");
        m->step[m->n] = s ? strtoull(s + 7, NULL, 10) : UINT64_MAX;
        m->epoch[m->n] = e ? strtoull(e + 8, NULL, 10) : UINT64_MAX;
        m->partial[m->n] = strstr(line, "\"partial\":true") != NULL;
        if (strstr(line, "\"train_loss\"")) m->has_train_loss = 1;
        m->complete = strchr(line, '\n') != NULL;
        m->n++;
    }
    fclose(f);
}

/* ==== callbacks ==== */

typedef struct {
    const char *dir;
    int private_;
    uint64_t steps_seen, last_step;
    int bad_step_info;  /* a step info that breaks the contract */
    int epochs_seen, republished;
    uint64_t epoch_steps[16];
    int order_ok;       /* every on_epoch: ledger, checkpoint and metrics already hold it */
    int eps_ok;         /* epsilon finite for private runs, NAN otherwise; train_loss likewise */
    uint64_t stop_at_step;   /* on_step returns 1 at this step (0 = never) */
    uint64_t stop_at_epoch;  /* on_epoch returns 1 at this epoch (0 = never) */
    char log[4096];
} probe;

static int probe_step(void *u, const dpt_step_info *in) {
    probe *p = u;
    p->steps_seen++;
    if (in->step != p->last_step + 1 || in->step_in_epoch < 1 || in->step_in_epoch > in->steps_per_epoch ||
        !(in->wall_s >= 0))
        p->bad_step_info++;
    if (p->private_ && (!isnan(in->loss) || in->batch != 0)) p->bad_step_info++;
    if (!p->private_ && (!isfinite(in->loss) || in->batch == 0)) p->bad_step_info++;
    p->last_step = in->step;
    return p->stop_at_step && in->step == p->stop_at_step;
}

static int probe_epoch(void *u, const dpt_epoch_result *r) {
    probe *p = u;
    if (p->epochs_seen < 16) p->epoch_steps[p->epochs_seen] = r->step;
    p->epochs_seen++;
    p->republished += r->from_checkpoint;
    if (p->dir) {
        metrics_t m;
        read_metrics(p->dir, &m);
        int ok = ckpt_step(p->dir) == r->step && m.n > 0 && m.step[m.n - 1] == r->step;
        if (p->private_) ok = ok && ledger_file_steps(p->dir) >= r->step;
        if (!ok) p->order_ok = 0;
    }
    int eps = p->private_ ? isfinite(r->epsilon) && r->epsilon > 0 && r->delta == 1e-5 && isnan(r->train_loss)
                          : isnan(r->epsilon) && isnan(r->delta) && isfinite(r->train_loss);
    if (!eps || !isfinite(r->test_accuracy)) p->eps_ok = 0;
    return p->stop_at_epoch && r->epoch == p->stop_at_epoch;
}

static void probe_log(void *u, dpt_log_level level, const char *msg) {
    probe *p = u;
    size_t n = strlen(p->log);
    snprintf(p->log + n, sizeof p->log - n, "[%d] %s\n", (int)level, msg);
}

static void probe_attach(probe *p, dpt_train_config *c, const char *dir, int private_) {
    memset(p, 0, sizeof *p);
    p->dir = dir;
    p->private_ = private_;
    p->order_ok = 1;
    p->eps_ok = 1;
    c->on_step = probe_step;
    c->on_epoch = probe_epoch;
    c->log = probe_log;
    c->user = p;
}

/* one session: new trainer, optional resume, run; returns the run's status */
static dpt_status session(const dpt_train_config *c, int private_, int secure, int resume, dpt_epoch_result *r,
                          float *theta, dpt_stop_reason *why) {
    dpt_trainer *t = NULL;
    dpt_status s = new_trainer(c, private_, secure, &t);
    if (s == DPT_OK && resume) s = dpt_trainer_resume(t);
    if (s == DPT_OK) s = dpt_trainer_run(t, r);
    if (t && theta) memcpy(theta, dpt_trainer_model(t)->theta, dpt_trainer_model(t)->n_params * sizeof(float));
    if (t && why) *why = dpt_trainer_stop_reason(t);
    dpt_trainer_free(t);
    return s;
}

#define NP (8 * 16 + 16 + 16 * 3 + 3)

/* ==== callbacks, privacy of what they carry, publication order ==== */
static void test_callbacks(int private_) {
    const char *dir = new_dir(private_ ? "cb_dp" : "cb_sgd");
    dpt_train_config c = cfg_for(dir, private_);
    probe p;
    probe_attach(&p, &c, dir, private_);
    dpt_epoch_result r;
    dpt_stop_reason why = DPT_STOP_NONE;
    CHECK_OK(session(&c, private_, 0, 0, &r, NULL, &why));
    const uint64_t spe = private_ ? 20 : 19;
    CHECK(p.steps_seen == 3 * spe && p.bad_step_info == 0);
    CHECK(p.epochs_seen == 3 && p.epoch_steps[0] == spe && p.epoch_steps[2] == 3 * spe);
    CHECK(p.order_ok);
    CHECK(p.eps_ok);
    CHECK(why == DPT_STOP_DONE && r.epoch == 3 && r.step == 3 * spe && !r.partial);
    metrics_t m;
    read_metrics(dir, &m);
    CHECK(m.n == 3 && m.has_train_loss == !private_);
    /* a private checkpoint keeps no loss sums or batch counts of its data */
    if (private_) {
        char b[64];
        ckpt_field(dir, "epoch_loss_sum", b, sizeof b);
        CHECK(!strcmp(b, "0"));
        ckpt_field(dir, "epoch_examples", b, sizeof b);
        CHECK(!strcmp(b, "0"));
    }
}

/* ==== a callback stops the run: everything saved, the partial epoch published ==== */
static void test_callback_stop(int private_) {
    const char *dir = new_dir(private_ ? "stop_dp" : "stop_sgd"), *ref = new_dir(private_ ? "ref_dp" : "ref_sgd");
    const uint64_t spe = private_ ? 20 : 19;
    float a[NP], b[NP];
    dpt_train_config c = cfg_for(ref, private_);
    CHECK_OK(session(&c, private_, 0, 0, NULL, a, NULL));

    c = cfg_for(dir, private_);
    probe p;
    probe_attach(&p, &c, dir, private_);
    p.stop_at_step = spe + 7;
    dpt_epoch_result r;
    dpt_stop_reason why = DPT_STOP_NONE;
    CHECK_OK(session(&c, private_, 0, 0, &r, NULL, &why));
    CHECK(why == DPT_STOP_CALLBACK);
    CHECK(r.partial && r.epoch == 2 && r.step == spe + 7 && r.steps_in_epoch == 7 && r.steps_per_epoch == spe);
    CHECK(ckpt_step(dir) == spe + 7);
    if (private_) CHECK(ledger_file_steps(dir) == spe + 7);
    metrics_t m;
    read_metrics(dir, &m);
    CHECK(m.n == 2 && m.step[1] == spe + 7 && m.partial[1] && !m.partial[0]);
    CHECK(p.epochs_seen == 2 && p.order_ok); /* the partial epoch went through on_epoch too */

    /* an epoch callback stops after its epoch */
    probe_attach(&p, &c, dir, private_);
    p.stop_at_epoch = 2;
    CHECK_OK(session(&c, private_, 0, 1, &r, NULL, &why));
    CHECK(why == DPT_STOP_CALLBACK && r.epoch == 2 && !r.partial && r.step == 2 * spe);

    /* resumed to the end: bit-identical to the uninterrupted run; one line per result */
    probe_attach(&p, &c, dir, private_);
    CHECK_OK(session(&c, private_, 0, 1, &r, b, &why));
    CHECK(why == DPT_STOP_DONE && r.step == 3 * spe && p.steps_seen == spe);
    CHECK(memcmp(a, b, sizeof a) == 0);
    read_metrics(dir, &m);
    CHECK(m.n == 4 && m.step[2] == 2 * spe && m.step[3] == 3 * spe);

    /* nothing left: a further run takes no step and returns the checkpoint's last result */
    probe_attach(&p, &c, dir, private_);
    CHECK_OK(session(&c, private_, 0, 1, &r, NULL, &why));
    CHECK(why == DPT_STOP_DONE && p.steps_seen == 0 && p.epochs_seen == 0);
    CHECK(r.step == 3 * spe && r.epoch == 3 && r.from_checkpoint);
}

/* ==== max_steps inside an epoch: a partial record; resuming with the same limit takes
 * no further step ==== */
static void test_max_steps(void) {
    const char *dir = new_dir("maxsteps");
    dpt_train_config c = cfg_for(dir, 1);
    c.max_steps = 30;
    probe p;
    probe_attach(&p, &c, dir, 1);
    dpt_epoch_result r;
    dpt_stop_reason why;
    CHECK_OK(session(&c, 1, 0, 0, &r, NULL, &why));
    CHECK(why == DPT_STOP_MAX_STEPS && r.partial && r.step == 30 && r.epoch == 2 && r.steps_in_epoch == 10);
    metrics_t m;
    read_metrics(dir, &m);
    CHECK(m.n == 2 && m.partial[1] && m.step[1] == 30);
    probe_attach(&p, &c, dir, 1);
    CHECK_OK(session(&c, 1, 0, 1, &r, NULL, &why));
    CHECK(why == DPT_STOP_MAX_STEPS && p.steps_seen == 0 && r.step == 30);
    CHECK(ckpt_step(dir) == 30 && ledger_file_steps(dir) == 30);
    read_metrics(dir, &m);
    CHECK(m.n == 2);
}

/* ==== the budget stop: the last result's step is the ledger's ==== */
static void test_budget(void) {
    const char *dir = new_dir("budget");
    dpt_train_config c = cfg_for(dir, 1);
    c.epochs = 50;
    c.target_epsilon = 2.3; /* about 14 steps at q 0.05, sigma 1: inside epoch 1 */
    probe p;
    probe_attach(&p, &c, dir, 1);
    dpt_epoch_result r;
    dpt_stop_reason why;
    CHECK_OK(session(&c, 1, 0, 0, &r, NULL, &why));
    CHECK(why == DPT_STOP_BUDGET);
    CHECK(r.step > 0 && r.step == ledger_file_steps(dir) && r.step == ckpt_step(dir));
    CHECK(r.epsilon <= 2.3 && r.partial);
    if (!r.partial) fprintf(stderr, "budget stop at step %llu\n", (unsigned long long)r.step);
    CHECK(strstr(p.log, "stopping before step") != NULL);
    metrics_t m;
    read_metrics(dir, &m);
    CHECK(m.n >= 1 && m.step[m.n - 1] == r.step);
}

/* ==== faults between saving and publishing ==== */

/* Runs 3 epochs with DPTRAIN_FAULT=<fault> (fails the run), then resumes to the end.
 * Checks that metrics.jsonl ends with one record per epoch, each step published once,
 * and returns how many records the resume republished from the checkpoint. */
static int fault_then_resume(const char *name, const char *fault, int secure, uint64_t *ledger_steps, float *theta) {
    const char *dir = new_dir(name);
    dpt_train_config c = cfg_for(dir, 1);
    probe p;
    probe_attach(&p, &c, dir, 1);
    setenv("DPTRAIN_FAULT", fault, 1);
    CHECK_STATUS(session(&c, 1, secure, 0, NULL, NULL, NULL), DPT_EIO);
    CHECK_ERR_HAS("injected fault");
    unsetenv("DPTRAIN_FAULT");
    metrics_t m;
    read_metrics(dir, &m);
    /* nothing published ahead of the files: on_epoch saw only what metrics.jsonl holds */
    CHECK(p.epochs_seen == m.n || p.epochs_seen == m.n - 1);
    CHECK(m.n == 0 || m.step[m.n - 1] <= ckpt_step(dir));
    probe_attach(&p, &c, dir, 1);
    dpt_epoch_result r;
    CHECK_OK(session(&c, 1, secure, 1, &r, theta, NULL));
    CHECK(p.order_ok && r.step == 60 && r.epoch == 3);
    read_metrics(dir, &m);
    CHECK(m.n == 3 && m.complete);
    for (int i = 0; i < m.n && i < 3; i++) CHECK(m.epoch[i] == (uint64_t)i + 1 && m.step[i] == 20 * ((uint64_t)i + 1));
    *ledger_steps = ledger_file_steps(dir);
    return p.republished;
}

static void test_faults(void) {
    float ref[NP], got[NP];
    dpt_train_config c = cfg_for(new_dir("fault_ref"), 1);
    CHECK_OK(session(&c, 1, 0, 0, NULL, ref, NULL));
    uint64_t ls = 0;
    /* checkpoint of epoch 2 saved, not published: the resume publishes it, runs only epoch 3 */
    CHECK(fault_then_resume("f_ckpt", "after-checkpoint:2", 0, &ls, got) == 1);
    CHECK(ls == 60 && memcmp(ref, got, sizeof ref) == 0);
    /* published, on_epoch not called: nothing to republish */
    CHECK(fault_then_resume("f_metrics", "after-metrics:2", 0, &ls, got) == 0);
    CHECK(ls == 60 && memcmp(ref, got, sizeof ref) == 0);
    /* ledger saved, checkpoint not: epoch 2 re-runs (its spent steps stay in the ledger),
     * was never published, and is published once */
    CHECK(fault_then_resume("f_ledger", "after-ledger:2", 0, &ls, got) == 0);
    CHECK(ls == 80 && memcmp(ref, got, sizeof ref) == 0); /* reproducible: the re-run is the same */
    /* --secure: the re-run would draw fresh noise, so a saved epoch is never re-run */
    CHECK(fault_then_resume("fs_ckpt", "after-checkpoint:2", 1, &ls, got) == 1);
    CHECK(ls == 60);
    CHECK(fault_then_resume("fs_ledger", "after-ledger:3", 1, &ls, got) == 0);
    CHECK(ls == 80);

    /* a metrics line cut short by a crash is removed before the resume appends */
    const char *dir = new_dir("cut");
    c = cfg_for(dir, 0);
    c.max_steps = 19;
    CHECK_OK(session(&c, 0, 0, 0, NULL, NULL, NULL));
    append(path_in(dir, "metrics.jsonl"), "{\"epoch\":2,\"st");
    c.max_steps = 0;
    CHECK_OK(session(&c, 0, 0, 1, NULL, NULL, NULL));
    metrics_t m;
    read_metrics(dir, &m);
    CHECK(m.n == 3 && m.complete && m.step[1] == 38);

    /* metrics ahead of the checkpoint (results the checkpoint does not hold): refused */
    append(path_in(dir, "metrics.jsonl"), "{\"epoch\":4,\"step\":76}\n");
    c.epochs = 5;
    CHECK_STATUS(session(&c, 0, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("records step 76 but the checkpoint holds step 57");
}

/* ==== one trainer per directory ==== */
static void test_lock(void) {
    const char *dir = new_dir("lock");
    dpt_train_config c = cfg_for(dir, 0);
    dpt_trainer *t1 = NULL, *t2 = NULL;
    CHECK_OK(new_trainer(&c, 0, 0, &t1));
    CHECK_STATUS(new_trainer(&c, 0, 0, &t2), DPT_EBUSY);
    char pid[32];
    snprintf(pid, sizeof pid, "process %ld", (long)getpid());
    CHECK_ERR_HAS(pid);
    CHECK_ERR_HAS(dir);
    /* another process is refused as well */
    pid_t child = fork();
    if (child == 0) {
        dpt_trainer *t3 = NULL;
        dpt_status s = new_trainer(&c, 0, 0, &t3);
        _exit(s == DPT_EBUSY ? 0 : 1);
    }
    int st = 0;
    waitpid(child, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    dpt_trainer_free(t1);
    CHECK_OK(new_trainer(&c, 0, 0, &t2)); /* released by dpt_trainer_free */
    dpt_trainer_free(t2);
}

/* The lock file is truncated and rewritten: a symbolic link, hard link, FIFO or foreign
 * file named dptrain.lock overwrote what it pointed to (issue 38, item 11). Each is
 * refused and left as it was. */
static void read_all(const char *path, char *b, size_t n) {
    b[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t r = fread(b, 1, n - 1, f);
    b[r] = 0;
    fclose(f);
}

static void test_lock_file_kinds(void) {
    char victim[700]; /* path_in's buffers are reused */
    snprintf(victim, sizeof victim, "%s", path_in(tu_tmpdir(), "lock_victim.txt"));
    const char *text = "precious contents\n";
    FILE *f = fopen(victim, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
    char got[64];
    const char *kinds[4] = {"symlink", "hardlink", "fifo", "foreign"};
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof name, "lock_%s", kinds[k]);
        const char *dir = new_dir(name);
        CHECK(mkdir(dir, 0755) == 0);
        const char *lock = path_in(dir, "dptrain.lock");
        if (k == 0) CHECK(symlink(victim, lock) == 0);
        if (k == 1) CHECK(link(victim, lock) == 0);
        if (k == 2) CHECK(mkfifo(lock, 0644) == 0);
        if (k == 3) {
            FILE *g = fopen(lock, "w");
            CHECK(g != NULL);
            if (g) fputs("not a pid\n", g), fclose(g);
        }
        dpt_train_config c = cfg_for(dir, 0);
        dpt_trainer *t = NULL;
        alarm(20); /* a FIFO must not block the open */
        dpt_status st = new_trainer(&c, 0, 0, &t);
        alarm(0);
        CHECK_STATUS(st, DPT_EIO);
        CHECK_ERR_HAS("dptrain.lock");
        CHECK_ERR_HAS(k == 0 ? "is a symbolic link" : k == 1 ? "has other hard links"
                      : k == 2 ? "is not a regular file" : "holds more than a process id");
        dpt_trainer_free(t);
        read_all(victim, got, sizeof got);
        if (strcmp(got, text)) fprintf(stderr, "%s: victim now holds \"%s\"\n", kinds[k], got);
        CHECK(!strcmp(got, text));
        struct stat sb;
        CHECK(lstat(lock, &sb) == 0 && (k == 0 ? S_ISLNK(sb.st_mode) : k == 2 ? S_ISFIFO(sb.st_mode)
                                                                     : S_ISREG(sb.st_mode)));
        if (k == 3) {
            read_all(lock, got, sizeof got);
            CHECK(!strcmp(got, "not a pid\n"));
        }
    }
    /* a lock file left by an earlier run (a pid line) is still taken over */
    const char *dir = new_dir("lock_stale");
    CHECK(mkdir(dir, 0755) == 0);
    f = fopen(path_in(dir, "dptrain.lock"), "w");
    if (f) fputs("999999\n", f), fclose(f);
    dpt_train_config c = cfg_for(dir, 0);
    dpt_trainer *t = NULL;
    CHECK_OK(new_trainer(&c, 0, 0, &t));
    dpt_trainer_free(t);
}

/* ==== fresh runs, overwrite, run ids ==== */
static void test_fresh_overwrite_run_id(void) {
    const char *dp = new_dir("dp_run");
    dpt_train_config c = cfg_for(dp, 1);
    c.epochs = 1;
    probe p;
    probe_attach(&p, &c, dp, 1);
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    char ck_id[64], ck[700], lg[700];
    snprintf(ck, sizeof ck, "%s", path_in(dp, "checkpoint.safetensors"));
    snprintf(lg, sizeof lg, "%s", path_in(dp, "ledger.json"));
    ckpt_field(dp, "run_id", ck_id, sizeof ck_id);
    dpt_ledger *l = NULL;
    CHECK_OK(dpt_ledger_load(lg, &l));
    const char *lid = l ? dpt_ledger_get_meta(l, "run_id") : NULL;
    CHECK(strlen(ck_id) == 32 && lid && !strcmp(lid, ck_id));
    dpt_ledger_free(l);
    CHECK_OK(dpt_run_check_ledger(ck, lg));

    /* the scenario: a non-private run into the DP run's directory is refused ... */
    append(path_in(dp, "notes.txt"), "mine\n");
    c = cfg_for(dp, 0);
    c.epochs = 1;
    CHECK_STATUS(session(&c, 0, 0, 0, NULL, NULL, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("is not empty");
    CHECK_ERR_HAS("overwrite");
    CHECK(ledger_file_steps(dp) == 20); /* untouched */
    /* ... and with overwrite the previous run's files go, and only those */
    probe_attach(&p, &c, dp, 0);
    c.overwrite = 1;
    CHECK_OK(session(&c, 0, 0, 0, NULL, NULL, NULL));
    struct stat st;
    CHECK(stat(lg, &st) != 0 && stat(path_in(dp, "notes.txt"), &st) == 0);
    CHECK(strstr(p.log, "removed the previous run's") && strstr(p.log, "ledger.json") && strstr(p.log, "left 1 other"));
    metrics_t m;
    read_metrics(dp, &m);
    CHECK(m.n == 1);
    char id2[64];
    ckpt_field(dp, "run_id", id2, sizeof id2);
    CHECK(strlen(id2) == 32 && strcmp(id2, ck_id));

    /* a ledger of another run beside a checkpoint: refused by the check and by resume */
    const char *dp2 = new_dir("dp_run2");
    c = cfg_for(dp2, 1);
    c.epochs = 1;
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    CHECK_STATUS(dpt_run_check_ledger(path_in(dp, "checkpoint.safetensors"), path_in(dp2, "ledger.json")),
                 DPT_EMISMATCH);
    CHECK_ERR_HAS("non-private");
    const char *dp3 = new_dir("dp_run3");
    dpt_train_config c3 = cfg_for(dp3, 1);
    c3.epochs = 1;
    CHECK_OK(session(&c3, 1, 0, 0, NULL, NULL, NULL));
    CHECK_STATUS(dpt_run_check_ledger(path_in(dp3, "checkpoint.safetensors"), path_in(dp2, "ledger.json")),
                 DPT_EMISMATCH);
    CHECK_ERR_HAS("is of run");
    uint8_t *bytes = NULL;
    size_t n = 0;
    CHECK_OK(dpt_read_file(path_in(dp2, "ledger.json"), &bytes, &n));
    CHECK_OK(dpt_write_file_atomic(path_in(dp3, "ledger.json"), bytes, n));
    dpt_free(bytes);
    c3.epochs = 2;
    CHECK_STATUS(session(&c3, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("belongs to run");
    /* a non-private checkpoint beside a ledger.json: its resume is refused too */
    CHECK_OK(dpt_write_file_atomic(path_in(dp, "ledger.json"), "{}", 2));
    c = cfg_for(dp, 0);
    c.epochs = 2;
    CHECK_STATUS(session(&c, 0, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("beside a privacy ledger");
}

/* ==== resume refuses changed optimizer settings and a changed noise mode ==== */
static void test_resume_settings(void) {
    const char *dir = new_dir("settings");
    dpt_train_config c = cfg_for(dir, 1);
    c.epochs = 1;
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    c.epochs = 2;
    dpt_train_config d = c;
    d.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    CHECK_STATUS(session(&d, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("optim.kind was sgd, now adam");
    d = c;
    d.optim.weight_decay = 0.01;
    CHECK_STATUS(session(&d, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("optim.weight_decay was 0, now 0.01");
    d = c;
    d.optim.momentum = 0.9;
    CHECK_STATUS(session(&d, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("optim.momentum");
    /* switching to the secure noise mode is reported as that, not as a changed sigma */
    CHECK_STATUS(session(&c, 1, 1, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("secure was 0, now 1 (the noise mode");
    CHECK(strstr(dpt_last_error(), "; sigma was") == NULL);
    /* Adam has no momentum setting */
    d = c;
    d.out_dir = NULL;
    d.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    d.optim.momentum = 0.5;
    CHECK_STATUS(session(&d, 1, 0, 0, NULL, NULL, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("optim.momentum");
    /* a changed learning rate is taken, and said so through the log (not printed) */
    probe p;
    probe_attach(&p, &c, dir, 1);
    c.optim.lr = 0.2;
    CHECK_OK(session(&c, 1, 0, 1, NULL, NULL, NULL));
    CHECK(strstr(p.log, "[1] resuming with learning rate 0.2") != NULL);
}

/* ==== the data are named only under the run's key ==== */

/* SHA-256 of a dataset as dpt_dataset_hash defines it (docs/data.md), written out here:
 * n, dim, shape[0..2], n_classes as little-endian 64-bit words, then x, then y. */
static void plain_data_hash(const dpt_dataset *d, uint8_t out[32]) {
    uint64_t w[6] = {d->n, d->dim, d->shape[0], d->shape[1], d->shape[2], (uint64_t)(int64_t)d->n_classes};
    uint8_t hdr[48];
    for (int i = 0; i < 48; i++) hdr[i] = (uint8_t)(w[i / 8] >> (8 * (i % 8)));
    dpt_hash h;
    CHECK_OK(dpt_hash_init(&h));
    CHECK_OK(dpt_hash_update(&h, hdr, sizeof hdr));
    CHECK_OK(dpt_hash_update(&h, d->x, d->n * d->dim * sizeof(float)));
    CHECK_OK(dpt_hash_update(&h, d->y, d->n * sizeof(int32_t)));
    CHECK_OK(dpt_hash_final(&h, out));
}

/* HMAC-SHA256 (RFC 2104) of a 32-byte message under a 32-byte key, from SHA-256 alone */
static void hmac_sha256(const uint8_t key[32], const uint8_t msg[32], uint8_t out[32]) {
    uint8_t pad[64], inner[32];
    dpt_hash h;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 64; i++) pad[i] = (uint8_t)((i < 32 ? key[i] : 0) ^ (pass ? 0x5c : 0x36));
        CHECK_OK(dpt_hash_init(&h));
        CHECK_OK(dpt_hash_update(&h, pad, 64));
        CHECK_OK(dpt_hash_update(&h, pass ? inner : msg, 32));
        CHECK_OK(dpt_hash_final(&h, pass ? out : inner));
    }
}

/* 1 when the file holds the 32 bytes h raw, or as hex in lower or upper case */
static int file_holds(const char *path, const uint8_t h[32]) {
    uint8_t *b = NULL;
    size_t n = 0;
    if (dpt_read_file(path, &b, &n) != DPT_OK) return -1;
    char lo[65], up[65];
    dpt_hex(h, 32, lo);
    for (int i = 0; i < 65; i++) up[i] = (char)(lo[i] >= 'a' && lo[i] <= 'f' ? lo[i] - 32 : lo[i]);
    int found = 0;
    for (size_t i = 0; i + 32 <= n && !found; i++)
        found = !memcmp(b + i, h, 32) || (i + 64 <= n && (!memcmp(b + i, lo, 64) || !memcmp(b + i, up, 64)));
    dpt_free(b);
    return found;
}

/* The secret file of the run in dir (dpt_run_secret_path in the test's DPTRAIN_SECRETS_DIR:
 * SECRETS/<run id>.secret, or an older run's dir/dptrain.secret; where it would be when
 * absent). */
static const char *secret_of(const char *dir) {
    static char buf[4][700];
    static int k = 0;
    k = (k + 1) % 4;
    int found = 0;
    CHECK_OK(dpt_run_secret_path(dir, NULL, buf[k], sizeof buf[k], &found));
    return buf[k];
}

/* The whole secret file (malloc'd text; NULL when absent). */
static char *read_secret(const char *dir) {
    FILE *f = fopen(secret_of(dir), "rb");
    if (!f) return NULL;
    char *text = calloc(1, 65536);
    size_t n = text ? fread(text, 1, 65535, f) : 0;
    fclose(f);
    if (text) text[n] = 0;
    return text;
}

/* The run key of the secret file (format 2: "key": "<64 hex>") and its mode. */
static int read_key(const char *dir, uint8_t key[32], unsigned *mode) {
    struct stat st;
    if (mode) *mode = stat(secret_of(dir), &st) == 0 ? (unsigned)(st.st_mode & 0777) : 0;
    char *text = read_secret(dir);
    const char *k = text ? strstr(text, "\"key\":\"") : NULL;
    int ok = k && text[0] == '{';
    for (int i = 0; ok && i < 32; i++) {
        unsigned v;
        ok = sscanf(k + 7 + 2 * i, "%2x", &v) == 1;
        key[i] = (uint8_t)v;
    }
    ok = ok && k[7 + 64] == '"';
    free(text);
    return ok;
}

static void ledger_meta(const char *dir, const char *key, char *out, size_t n) {
    out[0] = 0;
    dpt_ledger *l = NULL;
    if (dpt_ledger_load(path_in(dir, "ledger.json"), &l) != DPT_OK) return;
    const char *v = dpt_ledger_get_meta(l, key);
    snprintf(out, n, "%s", v ? v : "");
    dpt_ledger_free(l);
}

static void test_data_key(void) {
    uint8_t plain[32], key[32], mac[32];
    char want[65], got[512];
    plain_data_hash(&TR, plain);
    const char *files[] = {"checkpoint.safetensors", "ledger.json", "metrics.jsonl"};
    /* two private runs on the same data */
    const char *da = new_dir("key_a"), *db = new_dir("key_b");
    char hm_a[65] = "";
    for (int r = 0; r < 2; r++) {
        const char *dir = r ? db : da;
        dpt_train_config c = cfg_for(dir, 1);
        c.epochs = 1;
        CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
        /* nothing the run shares holds the plain hash of its data */
        for (int i = 0; i < 3; i++) CHECK(file_holds(path_in(dir, files[i]), plain) == 0);
        /* the key: its own file, owner-only, and what data_hmac is keyed with */
        unsigned mode = 0;
        CHECK(read_key(dir, key, &mode) && mode == 0600);
        hmac_sha256(key, plain, mac);
        dpt_hex(mac, 32, want);
        ckpt_field(dir, "data_hmac", got, sizeof got);
        CHECK(!strcmp(got, want));
        ledger_meta(dir, "data_hmac", got, sizeof got);
        CHECK(!strcmp(got, want));
        CHECK(file_holds(secret_of(dir), key) == 1); /* file_holds finds what is there */
        CHECK(access(path_in(dir, DPT_RUN_KEY_FILE), F_OK) != 0); /* not in the run directory */
        for (int i = 0; i < 3; i++) CHECK(file_holds(path_in(dir, files[i]), key) == 0);
        if (r) CHECK(strcmp(hm_a, want) != 0); /* another run, another key */
        else snprintf(hm_a, sizeof hm_a, "%s", want);
    }

    /* resume: the same data continue under the same key ... */
    dpt_train_config c = cfg_for(da, 1);
    c.epochs = 2;
    c.max_steps = 25;
    CHECK_OK(session(&c, 1, 0, 1, NULL, NULL, NULL));
    ckpt_field(da, "data_hmac", got, sizeof got);
    CHECK(!strcmp(got, hm_a) && ckpt_step(da) == 25);
    /* ... other data (one label changed) are refused */
    dpt_dataset other;
    tu_make_blobs(&other, 600, 1, 1.0f);
    other.y[17] = (other.y[17] + 1) % 3;
    TRAIN = &other;
    c.max_steps = 30;
    CHECK_STATUS(session(&c, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("training data (data_hmac) was ");
    TRAIN = &TR;
    /* ... and so is a run directory without its key (nothing to compare the data with) */
    char moved[700];
    snprintf(moved, sizeof moved, "%s/moved.secret", tu_tmpdir());
    char sec_a[700];
    snprintf(sec_a, sizeof sec_a, "%s", secret_of(da));
    CHECK(rename(sec_a, moved) == 0);
    CHECK_STATUS(session(&c, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("the run's secret file is missing (looked for ");
    CHECK_ERR_HAS(sec_a); /* both places named */
    CHECK_ERR_HAS(path_in(da, DPT_RUN_KEY_FILE));
    CHECK_ERR_HAS("allow_ledger_mismatch");
    CHECK(ckpt_step(da) == 25 && ledger_file_steps(da) == 25);
    /* a malformed secret file is refused as such */
    append(sec_a, "dptrain-run-key 1\n0123\n");
    chmod(sec_a, 0600);
    CHECK_STATUS(session(&c, 1, 0, 1, NULL, NULL, NULL), DPT_EFORMAT);
    CHECK_ERR_HAS("not a dptrain run secret");
    /* allowed: the run continues under a new key and the ledger records why */
    unlink(sec_a);
    c.allow_ledger_mismatch = 1;
    CHECK_OK(session(&c, 1, 0, 1, NULL, NULL, NULL));
    CHECK(read_key(da, key, NULL));
    hmac_sha256(key, plain, mac);
    dpt_hex(mac, 32, want);
    ckpt_field(da, "data_hmac", got, sizeof got);
    CHECK(!strcmp(got, want) && strcmp(want, hm_a));
    ledger_meta(da, "mismatch_allowed_at_step_25", got, sizeof got);
    CHECK(strstr(got, "was missing") && strstr(got, hm_a) && strstr(got, want));
    for (int i = 0; i < 3; i++) CHECK(file_holds(path_in(da, files[i]), plain) == 0);

    /* the key reaches the disk before the first file that names data_hmac */
    const char *dk = new_dir("key_order");
    c = cfg_for(dk, 1);
    setenv("DPTRAIN_FAULT", "after-ledger", 1);
    CHECK_STATUS(session(&c, 1, 0, 0, NULL, NULL, NULL), DPT_EIO);
    unsetenv("DPTRAIN_FAULT");
    CHECK(read_key(dk, key, NULL) && ledger_file_steps(dk) == 20);
    /* overwrite removes it with the run's other files: a fresh run has a fresh key */
    char sec_k[700];
    snprintf(sec_k, sizeof sec_k, "%s", secret_of(dk));
    c.overwrite = 1;
    c.epochs = 1;
    probe p;
    probe_attach(&p, &c, dk, 1);
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    CHECK(strstr(p.log, "removed the previous run's") && strstr(p.log, "the previous run's secret: removed "));
    CHECK(strstr(p.log, sec_k) && access(sec_k, F_OK) != 0 && strcmp(secret_of(dk), sec_k));
    uint8_t key2[32];
    CHECK(read_key(dk, key2, NULL) && memcmp(key, key2, 32));

    /* a non-private run: the same rule for its checkpoint */
    const char *dn = new_dir("key_sgd");
    c = cfg_for(dn, 0);
    c.epochs = 1;
    CHECK_OK(session(&c, 0, 0, 0, NULL, NULL, NULL));
    CHECK(file_holds(path_in(dn, "checkpoint.safetensors"), plain) == 0);
    CHECK(read_key(dn, key, NULL));
    hmac_sha256(key, plain, mac);
    dpt_hex(mac, 32, want);
    ckpt_field(dn, "data_hmac", got, sizeof got);
    CHECK(!strcmp(got, want));
    unlink(secret_of(dn));
    c.epochs = 2;
    c.allow_ledger_mismatch = 1; /* changes nothing for a run without a ledger */
    CHECK_STATUS(session(&c, 0, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("the run's secret file is missing");

    /* without an out_dir nothing is written and the ledger's data_hmac is under a key
     * that exists in the trainer's memory only */
    c = cfg_for(NULL, 1);
    c.epochs = 1;
    dpt_trainer *t = NULL;
    CHECK_OK(new_trainer(&c, 1, 0, &t));
    if (t) {
        CHECK_OK(dpt_trainer_run(t, NULL));
        const char *v = dpt_ledger_get_meta(dpt_trainer_ledger(t), "data_hmac");
        dpt_hex(plain, 32, want);
        CHECK(v && strlen(v) == 64 && strcmp(v, want) && strcmp(v, hm_a));
        CHECK(dpt_ledger_get_meta(dpt_trainer_ledger(t), "data_sha256") == NULL);
    }
    dpt_trainer_free(t);
    dpt_dataset_free(&other);

    /* a checkpoint of an older dptrain, which stored the plain hash: refused, saying why */
    const char *ck = path_in(db, "checkpoint.safetensors");
    dpt_model *m = NULL;
    dpt_optim o;
    dpt_optim_config oc = dpt_optim_defaults(DPT_OPT_SGD);
    char *state = NULL;
    CHECK_OK(dpt_model_new("mlp:8-16-3:gelu", 1, 1, &m));
    CHECK_OK(dpt_optim_init(&o, &oc, m->n_params));
    CHECK_OK(dpt_checkpoint_load(ck, m, &o, &state));
    char *at = state ? strstr(state, "\"data_hmac\"") : NULL, *old_state = NULL;
    CHECK(at != NULL);
    if (at) {
        size_t n = strlen(state) + 8;
        old_state = malloc(n);
        *at = 0;
        snprintf(old_state, n, "%s\"data_sha256\"%s", state, at + strlen("\"data_hmac\""));
        CHECK_OK(dpt_checkpoint_save(ck, m, &o, old_state));
        c = cfg_for(db, 1);
        c.epochs = 2;
        c.allow_ledger_mismatch = 1;
        CHECK_STATUS(session(&c, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
        CHECK_ERR_HAS("older dptrain, which stored the plain SHA-256");
    }
    free(old_state);
    free(state);
    dpt_optim_free(&o);
    dpt_model_free(m);
}

/* ==== step counts that cannot be counted ==== */
static void test_overflow(void) {
    dpt_train_config c = cfg_for(NULL, 0);
    c.epochs = (uint64_t)1 << 62;
    CHECK_STATUS(session(&c, 0, 0, 0, NULL, NULL, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("epochs");
    c = cfg_for(NULL, 1);
    c.sample_rate = 1e-300; /* an epoch of round(1/q) steps: dpt_sampler_steps_for_epochs refuses it */
    CHECK_STATUS(session(&c, 1, 0, 0, NULL, NULL, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("below 2^-53");
}

/* ==== concurrent atomic writes of one path ==== */
static void test_atomic_writes(void) {
    const char *dir = new_dir("atomic");
    mkdir(dir, 0755);
    const char *target = path_in(dir, "file.bin");
    enum { N = 200000, ROUNDS = 40 };
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        if ((kids[k] = fork()) == 0) {
            char *buf = malloc(N);
            memset(buf, 'a' + k, N);
            int bad = 0;
            for (int i = 0; i < ROUNDS; i++) bad += dpt_write_file_atomic(target, buf, N) != DPT_OK;
            free(buf);
            _exit(bad ? 1 : 0);
        }
    }
    for (int k = 0; k < 2; k++) {
        int st = 0;
        waitpid(kids[k], &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    uint8_t *got = NULL;
    size_t n = 0;
    CHECK_OK(dpt_read_file(target, &got, &n));
    int uniform = n == N;
    for (size_t i = 1; uniform && i < n; i++) uniform = got[i] == got[0];
    CHECK(uniform && (got[0] == 'a' || got[0] == 'b'));
    dpt_free(got);
    DIR *d = opendir(dir);
    int others = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "file.bin")) others++;
    if (d) closedir(d);
    CHECK(others == 0); /* no temporary left behind */
}

/* ==== the library prints nothing ==== */
static void test_silence(void) {
    const char *dir = new_dir("silent");
    dpt_train_config c = cfg_for(dir, 1);
    c.epochs = 1;
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    fflush(stderr);
    fflush(stdout);
    char cap[700];
    snprintf(cap, sizeof cap, "%s/captured", tu_tmpdir());
    int fd = open(cap, O_CREAT | O_TRUNC | O_WRONLY, 0644), e = dup(2), o = dup(1);
    dup2(fd, 2);
    dup2(fd, 1);
    /* notes (learning rate, threads), a budget stop */
    c.epochs = 30;
    c.optim.lr = 0.3;
    c.threads = 2;
    c.target_epsilon = 1.5;
    dpt_status s = session(&c, 1, 0, 1, NULL, NULL, NULL);
    fflush(stderr);
    fflush(stdout);
    dup2(e, 2);
    dup2(o, 1);
    close(fd);
    close(e);
    close(o);
    CHECK_OK(s);
    struct stat st;
    CHECK(stat(cap, &st) == 0 && st.st_size == 0);
}


/* ==== seeds and the secret file (issue 38, item 2) ==== */

/* 1 when the file's bytes contain `text` */
static int file_has_text(const char *path, const char *text) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char *b = calloc(1, 1 << 20);
    size_t n = b ? fread(b, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    int hit = 0;
    for (size_t i = 0; b && i + strlen(text) <= n && !hit; i++) hit = !memcmp(b + i, text, strlen(text));
    free(b);
    return hit;
}

/* Two copies of a run directory resumed at the same time from the same step read the same
 * stream state: the one that saves second publishes nothing (its first save is refused,
 * before its checkpoint and results), so no two models of one run share noise. */
static void test_secret_concurrent_copies(void) {
    const char *a = new_dir("conc_a"), *b = new_dir("conc_b");
    dpt_train_config c = cfg_for(a, 1);
    c.seed = 0;
    c.epochs = 1;
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    CHECK(mkdir(b, 0755) == 0);
    const char *files[] = {"checkpoint.safetensors", "ledger.json", "metrics.jsonl"};
    for (int i = 0; i < 3; i++) tu_copy_file(path_in(a, files[i]), path_in(b, files[i]));
    c.epochs = 2;
    c.out_dir = b;
    dpt_trainer *tb = NULL;
    CHECK_OK(new_trainer(&c, 1, 0, &tb));
    if (!tb) return;
    CHECK_OK(dpt_trainer_resume(tb)); /* b has read the secret: step 1 epoch's streams */
    c.out_dir = a;
    CHECK_OK(session(&c, 1, 0, 1, NULL, NULL, NULL)); /* a saves epoch 2 meanwhile */
    metrics_t m;
    read_metrics(b, &m);
    const int before = m.n;
    CHECK_STATUS(dpt_trainer_run(tb, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("another session of this run has saved step");
    dpt_trainer_free(tb);
    read_metrics(b, &m);
    CHECK(m.n == before); /* nothing of b's second epoch published */
    char got[64];
    ckpt_field(b, "epoch", got, sizeof got);
    CHECK(!strcmp(got, "1"));
}

static void test_seeds(void) {
    float th1[NP], th2[NP], th3[NP];
    /* The default seed is drawn from the OS: two private runs of the same data and
     * settings publish different parameters (with a fixed default, retraining with and
     * without a record and comparing them bit for bit would test membership). */
    const char *d1 = new_dir("seed_os1"), *d2 = new_dir("seed_os2");
    dpt_train_config c = cfg_for(d1, 1);
    c.seed = 0;
    c.epochs = 1;
    CHECK(dpt_train_config_defaults().seed == 0);
    CHECK_OK(session(&c, 1, 0, 0, NULL, th1, NULL));
    c.out_dir = d2;
    CHECK_OK(session(&c, 1, 0, 0, NULL, th2, NULL));
    CHECK(memcmp(th1, th2, sizeof th1) != 0);
    /* what the run publishes names neither the seed nor a stream state, and says where
     * the seed came from; the secret file (mode 0600) holds them */
    char got[128];
    ckpt_field(d1, "seed_source", got, sizeof got);
    CHECK(!strcmp(got, "os"));
    const char *pub[] = {"checkpoint.safetensors", "ledger.json", "metrics.jsonl"};
    for (int i = 0; i < 3; i++) {
        CHECK(file_has_text(path_in(d1, pub[i]), "\"seed\"") == 0);
        CHECK(file_has_text(path_in(d1, pub[i]), "noise_rng") == 0);
        CHECK(file_has_text(path_in(d1, pub[i]), "\"substreams\"") == 0);
    }
    CHECK(file_has_text(path_in(d1, "metrics.jsonl"), "\"seed_source\":\"os\"") == 1);
    ledger_meta(d1, "seed_source", got, sizeof got);
    CHECK(!strcmp(got, "os"));
    unsigned mode = 0;
    uint8_t key[32];
    CHECK(read_key(d1, key, &mode) && mode == 0600);
    char *sec = read_secret(d1);
    CHECK(sec && strstr(sec, "\"seed\":\"") && strstr(sec, "\"noise_rng\"") && strstr(sec, "\"seed_source\":\"os\""));
    free(sec);

    /* A copy of the directory (one run id, so one secret file) resumed after the original
     * has gone on from the same step would draw that run's noise and batches again: a
     * second model on the same noise. Once the original's next checkpoint is saved the
     * secret holds its state alone, so the copy is refused. */
    const char *d3 = new_dir("seed_os_copy");
    CHECK(mkdir(d3, 0755) == 0);
    const char *files[] = {"checkpoint.safetensors", "ledger.json", "metrics.jsonl"};
    for (int i = 0; i < 3; i++) tu_copy_file(path_in(d1, files[i]), path_in(d3, files[i]));
    char *snap = read_secret(d1);
    CHECK(snap != NULL);
    c.epochs = 2;
    c.out_dir = d1;
    CHECK_OK(session(&c, 1, 0, 1, NULL, th1, NULL));
    c.out_dir = d3;
    CHECK_STATUS(session(&c, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("holds no random-stream state for step");
    /* A resume continues the run's own streams from the secret file: with the secret as it
     * was at the copy's step (rolled back by hand), the copy publishes the same parameters. */
    if (snap) {
        FILE *f = fopen(secret_of(d3), "wb");
        CHECK(f && fputs(snap, f) >= 0);
        if (f) fclose(f);
        free(snap);
    }
    CHECK_OK(session(&c, 1, 0, 1, NULL, th3, NULL));
    CHECK(memcmp(th1, th3, sizeof th1) == 0);
    /* ... and equal to nothing a fresh run gives */
    CHECK(memcmp(th1, th2, sizeof th1) != 0);
    /* a caller's seed on resume must be the run's: an OS seed is never replaced */
    c.seed = 5;
    c.epochs = 3;
    CHECK_STATUS(session(&c, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("seed was drawn from the OS");

    /* A secret file others can read is refused (they may have regenerated the noise). */
    c.seed = 0;
    chmod(secret_of(d3), 0644);
    CHECK_STATUS(session(&c, 1, 0, 1, NULL, NULL, NULL), DPT_EIO);
    CHECK_ERR_HAS("readable or writable by other users");
    chmod(secret_of(d3), 0600);
    /* a truncated secret, and one without the checkpoint's stream state, are refused and
     * left as they are */
    char *good = read_secret(d3);
    CHECK(good && strstr(good, "\"streams\":["));
    if (good) {
        const char *sp = secret_of(d3);
        FILE *f = fopen(sp, "wb");
        CHECK(f && fwrite(good, 1, 40, f) == 40);
        if (f) fclose(f);
        CHECK_STATUS(session(&c, 1, 0, 1, NULL, NULL, NULL), DPT_EFORMAT);
        CHECK_ERR_HAS("not a dptrain run secret");
        char *cut = strstr(good, "\"streams\":[");
        f = fopen(sp, "wb");
        CHECK(f && fprintf(f, "%.*s\"streams\":[]}", (int)(cut - good), good) > 0);
        if (f) fclose(f);
        CHECK_STATUS(session(&c, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
        CHECK_ERR_HAS("holds no random-stream state for step");
        f = fopen(sp, "wb");
        CHECK(f && fputs(good, f) >= 0);
        if (f) fclose(f);
        free(good);
    }
    CHECK_OK(session(&c, 1, 0, 1, NULL, NULL, NULL));

    /* A seed the caller chose: reproducible, and labelled everywhere the run publishes;
     * its value stays in the secret file. */
    const char *d4 = new_dir("seed_caller"), *d5 = new_dir("seed_caller2");
    c = cfg_for(d4, 1);
    c.seed = 424242;
    c.epochs = 1;
    CHECK_OK(session(&c, 1, 0, 0, NULL, th1, NULL));
    c.out_dir = d5;
    CHECK_OK(session(&c, 1, 0, 0, NULL, th2, NULL));
    CHECK(memcmp(th1, th2, sizeof th1) == 0);
    ckpt_field(d4, "seed_source", got, sizeof got);
    CHECK(!strcmp(got, "caller"));
    ledger_meta(d4, "seed_source", got, sizeof got);
    CHECK(!strcmp(got, "caller"));
    CHECK(file_has_text(path_in(d4, "metrics.jsonl"), "\"seed_source\":\"caller\"") == 1);
    for (int i = 0; i < 3; i++) CHECK(file_has_text(path_in(d4, pub[i]), "424242") == 0);
    /* resumed with seed 0, the run goes on with its own seed (bit for bit as with it) */
    c.epochs = 2;
    c.seed = 0;
    CHECK_OK(session(&c, 1, 0, 1, NULL, th1, NULL));
    c.out_dir = d4;
    c.seed = 424242;
    CHECK_OK(session(&c, 1, 0, 1, NULL, th2, NULL));
    CHECK(memcmp(th1, th2, sizeof th1) == 0);

    /* The secret lost (allowed): the run goes on, with new streams from the OS, never the
     * seed's streams from their start (that would repeat the noise of earlier steps). */
    c.epochs = 3;
    c.allow_ledger_mismatch = 1;
    unlink(secret_of(d4));
    unlink(secret_of(d5));
    c.out_dir = d4;
    CHECK_OK(session(&c, 1, 0, 1, NULL, th1, NULL));
    c.out_dir = d5;
    CHECK_OK(session(&c, 1, 0, 1, NULL, th2, NULL));
    CHECK(memcmp(th1, th2, sizeof th1) != 0);
    ledger_meta(d4, "seed_source", got, sizeof got);
    CHECK(!strcmp(got, "os"));
}

/* ==== The secret file lives outside the run directory ==== */

/* entries of dir besides . and .. */
static size_t dir_count(const char *dir) {
    size_t n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

/* 1 when a file of dir holds text (what = NULL) or the 32 bytes key (raw or hex) */
static int dir_holds(const char *dir, const char *text, const uint8_t *key) {
    int hit = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && !hit && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        hit = text ? file_has_text(path_in(dir, e->d_name), text) == 1 : file_holds(path_in(dir, e->d_name), key) == 1;
    }
    if (d) closedir(d);
    return hit;
}

static void write_text(const char *path, const char *text, size_t n, mode_t mode) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(text, 1, n, f) == n);
    if (f) fclose(f);
    chmod(path, mode);
}

static void test_secret_location(void) {
    float th1[NP], th2[NP];
    char id[64], want[700], note[2000];
    struct stat st;
    const char *sd = tu_secrets_dir();
    /* A finished private run with a chosen seed: the secret (key, seed, streams) is
     * SECRETS/<run id>.secret, and no file of the run directory holds any of it. */
    const char *da = new_dir("sec_a");
    dpt_train_config c = cfg_for(da, 1);
    c.seed = 987654321987ULL;
    c.epochs = 1;
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    ckpt_field(da, "run_id", id, sizeof id);
    snprintf(want, sizeof want, "%s/%s.secret", sd, id);
    CHECK(strlen(id) == 32 && !strcmp(secret_of(da), want));
    CHECK(stat(want, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK(file_has_text(want, "987654321987") == 1 && file_has_text(want, "\"sampler_rng\"") == 1);
    CHECK(access(path_in(da, DPT_RUN_KEY_FILE), F_OK) != 0);
    CHECK(dir_holds(da, "987654321987", NULL) == 0);
    CHECK(dir_holds(da, "sampler_rng", NULL) == 0 && dir_holds(da, "\"substreams\"", NULL) == 0);
    uint8_t key[32];
    CHECK(read_key(da, key, NULL) && dir_holds(da, NULL, key) == 0);
    CHECK(dir_holds(sd, "987654321987", NULL) == 1); /* dir_holds finds what is there */

    /* An explicit directory (secret_dir): made mode 0700, the secret goes there, and a
     * resume finds it there; without it the default directory has none: refused, naming
     * where it looked. */
    const char *xs = new_dir("sec_explicit/deeper"), *db = new_dir("sec_b");
    c = cfg_for(db, 1);
    c.seed = 0;
    c.epochs = 1;
    c.secret_dir = xs;
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    CHECK(stat(xs, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
    ckpt_field(db, "run_id", id, sizeof id);
    snprintf(want, sizeof want, "%s/%s.secret", xs, id);
    CHECK(access(want, F_OK) == 0 && dir_count(xs) == 1 && access(path_in(db, DPT_RUN_KEY_FILE), F_OK) != 0);
    c.epochs = 2;
    CHECK_OK(session(&c, 1, 0, 1, NULL, NULL, NULL));
    CHECK(ckpt_step(db) == 40);
    c.secret_dir = NULL;
    c.epochs = 3;
    CHECK_STATUS(session(&c, 1, 0, 1, NULL, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("the run's secret file is missing (looked for ");
    CHECK_ERR_HAS(sd);
    CHECK(ckpt_step(db) == 40);

    /* Two runs, same data, same seed, same settings: two run ids, two secret files. */
    const char *dc = new_dir("sec_c"), *dd = new_dir("sec_d");
    const size_t n0 = dir_count(sd);
    c = cfg_for(dc, 1);
    c.epochs = 1;
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    c.out_dir = dd;
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    char sc[700], sdd[700];
    snprintf(sc, sizeof sc, "%s", secret_of(dc));
    snprintf(sdd, sizeof sdd, "%s", secret_of(dd));
    CHECK(dir_count(sd) == n0 + 2 && strcmp(sc, sdd) && access(sc, F_OK) == 0 && access(sdd, F_OK) == 0);

    /* A secret directory others can enter (mode 0755) is refused before anything runs,
     * from secret_dir and from DPTRAIN_SECRETS_DIR alike. */
    const char *op = new_dir("sec_open"), *dx = new_dir("sec_x");
    CHECK(mkdir(op, 0755) == 0 && chmod(op, 0755) == 0);
    c = cfg_for(dx, 1);
    c.secret_dir = op;
    dpt_trainer *t = NULL;
    CHECK_STATUS(new_trainer(&c, 1, 0, &t), DPT_EIO);
    CHECK_ERR_HAS("is open to other users (mode 0755)");
    CHECK_ERR_HAS(op);
    dpt_trainer_free(t);
    t = NULL;
    CHECK(access(dx, F_OK) != 0); /* the run directory was not even made */
    c.secret_dir = NULL;
    setenv("DPTRAIN_SECRETS_DIR", op, 1);
    CHECK_STATUS(new_trainer(&c, 1, 0, &t), DPT_EIO);
    CHECK_ERR_HAS("(DPTRAIN_SECRETS_DIR) is open to other users");
    dpt_trainer_free(t);
    t = NULL;
    /* where the default goes: $XDG_STATE_HOME/dptrain/secrets (absolute only), else
     * $HOME/.local/state/dptrain/secrets, made mode 0700 */
    char home[400], xdg[400], got[700];
    const char *old_home = getenv("HOME"), *old_xdg = getenv("XDG_STATE_HOME");
    char keep_home[600] = "", keep_xdg[600] = "";
    if (old_home) snprintf(keep_home, sizeof keep_home, "%s", old_home);
    if (old_xdg) snprintf(keep_xdg, sizeof keep_xdg, "%s", old_xdg);
    snprintf(home, sizeof home, "%s", new_dir("sec_home"));
    snprintf(xdg, sizeof xdg, "%s", new_dir("sec_xdg"));
    unsetenv("DPTRAIN_SECRETS_DIR");
    setenv("HOME", home, 1);
    setenv("XDG_STATE_HOME", "relative/state", 1);
    CHECK_OK(dpt_run_secret_dir(NULL, got, sizeof got));
    snprintf(want, sizeof want, "%s/.local/state/dptrain/secrets", home);
    CHECK(!strcmp(got, want) && stat(want, &st) == 0 && (st.st_mode & 0777) == 0700);
    setenv("XDG_STATE_HOME", xdg, 1);
    CHECK_OK(dpt_run_secret_dir(NULL, got, sizeof got));
    snprintf(want, sizeof want, "%s/dptrain/secrets", xdg);
    CHECK(!strcmp(got, want) && stat(want, &st) == 0 && (st.st_mode & 0777) == 0700);
    CHECK_OK(dpt_run_secret_dir(sd, got, sizeof got)); /* an explicit one comes first */
    CHECK(!strcmp(got, sd));
    CHECK_STATUS(dpt_run_secret_dir("", got, sizeof got), DPT_EINVAL);
    if (keep_home[0]) setenv("HOME", keep_home, 1);
    else unsetenv("HOME");
    if (keep_xdg[0]) setenv("XDG_STATE_HOME", keep_xdg, 1);
    else unsetenv("XDG_STATE_HOME");
    setenv("DPTRAIN_SECRETS_DIR", sd, 1);

    /* An older run's directory (the secret in it as dptrain.secret, without run_id and
     * run_dir) resumes, and its secret moves to the secret directory at the save; the
     * continuation is bit for bit the one the new place gives. */
    const char *de = new_dir("sec_old"), *df = new_dir("sec_old_copy");
    c = cfg_for(de, 1);
    c.seed = 0;
    c.epochs = 1;
    CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
    char se[700];
    snprintf(se, sizeof se, "%s", secret_of(de));
    char *text = read_secret(de);
    char *rid = text ? strstr(text, ",\"run_id\":\"") : NULL, *rdir = text ? strstr(text, "\"run_dir\":\"") : NULL;
    CHECK(rid && rdir && rdir > rid);
    if (rid && rdir && rdir > rid) {
        const char *end = strchr(rdir + 11, '"') + 1; /* past the run_dir value */
        char old[4096];
        int n = snprintf(old, sizeof old, "%.*s%s", (int)(rid - text), text, end);
        CHECK(mkdir(df, 0755) == 0);
        const char *files[] = {"checkpoint.safetensors", "ledger.json", "metrics.jsonl"};
        for (int i = 0; i < 3; i++) tu_copy_file(path_in(de, files[i]), path_in(df, files[i]));
        write_text(path_in(df, DPT_RUN_KEY_FILE), old, (size_t)n, 0600);
        CHECK(unlink(se) == 0); /* as before: the secret directory holds none */
        CHECK(!strcmp(secret_of(df), path_in(df, DPT_RUN_KEY_FILE)));
        c.out_dir = df;
        c.epochs = 2;
        probe p;
        probe_attach(&p, &c, df, 1);
        CHECK_OK(session(&c, 1, 0, 1, NULL, th2, NULL));
        CHECK(strstr(p.log, "moved the run's secret from ") && strstr(p.log, path_in(df, DPT_RUN_KEY_FILE)));
        CHECK(strstr(p.log, se));
        CHECK(access(path_in(df, DPT_RUN_KEY_FILE), F_OK) != 0 && !strcmp(secret_of(df), se));
        CHECK(file_has_text(se, "\"run_dir\":\"") == 1);
        /* the same state from the new place (the secret as the first session left it) */
        write_text(se, text, strlen(text), 0600);
        c = cfg_for(de, 1);
        c.seed = 0;
        c.epochs = 2;
        CHECK_OK(session(&c, 1, 0, 1, NULL, th1, NULL));
        CHECK(memcmp(th1, th2, sizeof th1) == 0);

        /* overwrite removes the replaced run's secret, never another run's: df is a copy
         * of de (one run id), and the secret names de, so overwriting df leaves it; then
         * overwriting de removes it; the other runs' secrets stay */
        c = cfg_for(df, 1);
        c.seed = 0;
        c.epochs = 1;
        c.overwrite = 1;
        probe_attach(&p, &c, df, 1);
        CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
        CHECK(strstr(p.log, "the previous run's secret: left ") && strstr(p.log, se));
        CHECK(access(se, F_OK) == 0 && access(sc, F_OK) == 0 && strcmp(secret_of(df), se));
        CHECK(access(secret_of(df), F_OK) == 0);
        c.out_dir = de;
        probe_attach(&p, &c, de, 1);
        CHECK_OK(session(&c, 1, 0, 0, NULL, NULL, NULL));
        CHECK(strstr(p.log, "the previous run's secret: removed ") && strstr(p.log, se));
        CHECK(access(se, F_OK) != 0 && access(sc, F_OK) == 0 && access(secret_of(df), F_OK) == 0);
        CHECK(access(secret_of(de), F_OK) == 0); /* the new run's own */
    }
    free(text);
    /* the same for a caller who clears a run directory itself */
    CHECK_OK(dpt_run_secret_remove(dd, NULL, note, sizeof note));
    CHECK(strstr(note, "removed ") && strstr(note, sdd) && access(sdd, F_OK) != 0 && access(sc, F_OK) == 0);
    CHECK_OK(dpt_run_secret_remove(dd, NULL, note, sizeof note));
    CHECK(note[0] == 0);
}

/* A new run's directory name (the CLI without --out, Python's runs_dir=) and PARENT/latest:
 * PARENT/YYYYMMDD-HHMMSS-XXXX, a fresh name each time; latest follows the newest run by a
 * relative link, a real directory named latest is left alone; bad input is refused. */
static void test_new_name_latest(void) {
    const char *parent = new_dir("runs");
    char a[400], b[400], target[400];
    CHECK_OK(dpt_run_dir_new_name(parent, a, sizeof a));
    CHECK(strlen(a) == strlen(parent) + 1 + 8 + 1 + 6 + 1 + 4 && !strncmp(a, parent, strlen(parent)));
    const char *base = a + strlen(parent) + 1;
    for (int i = 0; i < 20; i++) {
        int ok = i == 8 || i == 15 ? base[i] == '-'
                 : i < 15         ? base[i] >= '0' && base[i] <= '9'
                                  : base[i] && strchr("0123456789abcdef", base[i]) != NULL;
        CHECK(ok);
    }
    int same = 1; /* 16 random bits: 8 draws all equal by chance has probability 2^-112 */
    for (int i = 0; i < 8 && same; i++) {
        CHECK_OK(dpt_run_dir_new_name(parent, b, sizeof b));
        same = !strcmp(a, b);
    }
    CHECK(!same);
    CHECK(mkdir(parent, 0700) == 0 && mkdir(a, 0700) == 0 && mkdir(b, 0700) == 0);
    int linked = -1;
    CHECK_OK(dpt_run_dir_link_latest(a, &linked));
    CHECK(linked == 1);
    ssize_t n = readlink(path_in(parent, "latest"), target, sizeof target - 1);
    CHECK(n > 0 && (target[n] = 0, !strcmp(target, a + strlen(parent) + 1)));
    CHECK_OK(dpt_run_dir_link_latest(b, &linked));
    n = readlink(path_in(parent, "latest"), target, sizeof target - 1);
    CHECK(linked == 1 && n > 0 && (target[n] = 0, !strcmp(target, b + strlen(parent) + 1)));
    struct stat st;
    CHECK(stat(path_in(parent, "latest"), &st) == 0 && S_ISDIR(st.st_mode)); /* it resolves */
    /* a real directory named latest (an older dptrain's default run) is kept */
    const char *old = new_dir("old");
    CHECK(mkdir(old, 0700) == 0 && mkdir(path_in(old, "latest"), 0700) == 0);
    char c[400];
    snprintf(c, sizeof c, "%s/x", old);
    CHECK_OK(dpt_run_dir_link_latest(c, &linked));
    CHECK(linked == 0 && lstat(path_in(old, "latest"), &st) == 0 && S_ISDIR(st.st_mode));
    /* refused: an empty parent, a name that does not fit; a parent that is missing */
    CHECK_STATUS(dpt_run_dir_new_name("", a, sizeof a), DPT_EINVAL);
    CHECK_STATUS(dpt_run_dir_new_name(parent, a, 10), DPT_EINVAL);
    CHECK_ERR_HAS("longer than 9 bytes");
    CHECK_STATUS(dpt_run_dir_link_latest(new_dir("missing/r"), &linked), DPT_EIO);
    CHECK(linked == 0);
    CHECK_ERR_HAS("latest");
}

int main(void) {
    tu_make_blobs(&TR, 600, 1, 1.0f);
    tu_make_blobs(&TE, 300, 2, 1.0f);
    test_callbacks(0);
    test_callbacks(1);
    test_callback_stop(0);
    test_callback_stop(1);
    test_max_steps();
    test_budget();
    test_faults();
    test_lock();
    test_lock_file_kinds();
    test_fresh_overwrite_run_id();
    test_resume_settings();
    test_data_key();
    test_seeds();
    test_secret_concurrent_copies();
    test_secret_location();
    test_overflow();
    test_atomic_writes();
    test_silence();
    test_new_name_latest();
    dpt_dataset_free(&TR);
    dpt_dataset_free(&TE);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tu_tmpdir());
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tu_tmpdir());
    TEST_MAIN_END();
}
