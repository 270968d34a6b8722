/* The run directory's rules (docs/checkpoints.md, "The run directory"): one trainer at a
 * time holds an exclusive lock on it (flock on DIR/dptrain.lock, which also names the
 * holder's pid); a fresh run refuses a directory that holds anything else unless asked to
 * overwrite, and then removes the previous run's files and only those; every run has a
 * random id stored in its checkpoints and in its ledger's metadata, so a ledger can be
 * matched with the checkpoint beside it. */
#include <dptrain/io.h>
#include <dptrain/train.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_internal.h"

/* The files a run writes into its directory (removed by overwrite), and the prefixes of
 * their temporaries (dpt_write_file_atomic: .NAME.tmp-XXXXXX). */
static const char *const RUN_FILES[] = {"checkpoint.safetensors", "ledger.json", "metrics.jsonl", NULL};
static const char *const RUN_TEMPS[] = {".checkpoint.safetensors.tmp-", ".ledger.json.tmp-", NULL};

void dpt_trainer_log(const dpt_trainer *t, dpt_log_level level, const char *fmt, ...) {
    if (!t->cfg.log) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    t->cfg.log(t->cfg.user, level, msg);
}

dpt_status dpt_run_id_new(char id[33]) {
    uint64_t a = 0, b = 0;
    DPT_TRY(dpt_os_random_u64(&a));
    DPT_TRY(dpt_os_random_u64(&b));
    snprintf(id, 33, "%016" PRIx64 "%016" PRIx64, a, b);
    return DPT_OK;
}

/* ==== Lock ==== */

dpt_status dpt_run_dir_lock(const char *dir, int *fd_out) {
    *fd_out = -1;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dpt_set_error(DPT_EIO, "out_dir %s: cannot create directory: %s", dir, strerror(errno));
    char path[600];
    int w = snprintf(path, sizeof path, "%s/%s", dir, DPT_RUN_LOCK_FILE);
    DPT_CHECK(w > 0 && (size_t)w < sizeof path, DPT_EINVAL, "out_dir %s: path too long", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    DPT_CHECK(fd >= 0, DPT_EIO, "out_dir %s: cannot open its lock file %s: %s", dir, DPT_RUN_LOCK_FILE,
              strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[32] = "";
        ssize_t r = e == EWOULDBLOCK ? pread(fd, holder, sizeof holder - 1, 0) : -1;
        close(fd);
        if (e != EWOULDBLOCK)
            return dpt_set_error(DPT_EIO, "out_dir %s: cannot lock it: %s", dir, strerror(e));
        long pid = r > 0 ? strtol(holder, NULL, 10) : 0;
        if (pid > 0)
            return dpt_set_error(DPT_EBUSY, "out_dir %s is in use by another run (process %ld holds its lock); "
                                 "wait for it to finish or choose another directory", dir, pid);
        return dpt_set_error(DPT_EBUSY, "out_dir %s is in use by another run (it holds the lock); wait for it to "
                             "finish or choose another directory", dir);
    }
    /* the holder's pid, for the message above (the lock, not this text, is what excludes) */
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        dpt_status s = dpt_set_error(DPT_EIO, "out_dir %s: cannot write its lock file: %s", dir, strerror(errno));
        close(fd);
        return s;
    }
    *fd_out = fd;
    return DPT_OK;
}

void dpt_run_dir_unlock(int fd) {
    if (fd >= 0) close(fd); /* releases the flock; the file stays (removing it would race) */
}

/* ==== Contents ==== */

static int is_run_file(const char *name) {
    for (int i = 0; RUN_FILES[i]; i++)
        if (!strcmp(name, RUN_FILES[i])) return 1;
    for (int i = 0; RUN_TEMPS[i]; i++)
        if (!strncmp(name, RUN_TEMPS[i], strlen(RUN_TEMPS[i]))) return 1;
    return 0;
}

dpt_status dpt_run_dir_inspect(const char *dir, size_t *count, char *names, size_t names_len) {
    *count = 0;
    if (names && names_len) names[0] = 0;
    DIR *d = opendir(dir);
    if (!d) {
        DPT_CHECK(errno == ENOENT, DPT_EIO, "out_dir %s: cannot read the directory: %s", dir, strerror(errno));
        return DPT_OK;
    }
    size_t used = 0;
    int listed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, DPT_RUN_LOCK_FILE)) continue;
        (*count)++;
        if (names && names_len && listed < 6) {
            int w = snprintf(names + used, names_len - used, "%s%s", listed ? ", " : "", e->d_name);
            if (w > 0 && used + (size_t)w < names_len) used += (size_t)w;
            else names[used] = 0;
            listed++;
        }
    }
    closedir(d);
    return DPT_OK;
}

dpt_status dpt_run_dir_clear(const dpt_trainer *t, const char *dir) {
    DIR *d = opendir(dir);
    DPT_CHECK(d, DPT_EIO, "out_dir %s: cannot read the directory: %s", dir, strerror(errno));
    char removed[512] = "", path[1200];
    size_t used = 0, n_removed = 0, n_other = 0;
    dpt_status s = DPT_OK;
    struct dirent *e;
    while ((e = readdir(d)) && s == DPT_OK) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, DPT_RUN_LOCK_FILE)) continue;
        if (!is_run_file(e->d_name)) {
            n_other++;
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0) {
            s = dpt_set_error(DPT_EIO, "overwrite: cannot remove %s: %s", path, strerror(errno));
            break;
        }
        n_removed++;
        int w = snprintf(removed + used, sizeof removed - used, "%s%s", used ? ", " : "", e->d_name);
        if (w > 0 && used + (size_t)w < sizeof removed) used += (size_t)w;
    }
    closedir(d);
    DPT_TRY(s);
    if (n_removed)
        dpt_trainer_log(t, DPT_LOG_NOTE, "overwrite: removed the previous run's %s from %s", removed, dir);
    if (n_other)
        dpt_trainer_log(t, DPT_LOG_NOTE, "overwrite: left %zu other entr%s in %s (not files of a run)", n_other,
                        n_other == 1 ? "y" : "ies", dir);
    return DPT_OK;
}

/* ==== Ledger and checkpoint belong together ==== */

dpt_status dpt_run_check_ledger(const char *checkpoint_path, const char *ledger_path) {
    DPT_CHECK(checkpoint_path && ledger_path, DPT_EINVAL, "dpt_run_check_ledger: NULL path");
    char *state = NULL;
    DPT_TRY(dpt_checkpoint_peek(checkpoint_path, NULL, &state));
    cJSON *root = cJSON_Parse(state);
    free(state);
    DPT_CHECK(cJSON_IsObject(root), DPT_EFORMAT, "%s: training state is not a JSON object", checkpoint_path);
    dpt_ledger *l = NULL;
    dpt_status s = dpt_ledger_load(ledger_path, &l);
    if (s != DPT_OK) {
        cJSON_Delete(root);
        return s;
    }
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(root, "run_id");
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(root, "ledger");
    const cJSON *stp = cJSON_GetObjectItemCaseSensitive(root, "step");
    const char *ck_id = cJSON_IsString(cid) ? cid->valuestring : NULL;
    const char *l_id = dpt_ledger_get_meta(l, "run_id");
    uint64_t ck_step = cJSON_IsString(stp) ? strtoull(stp->valuestring, NULL, 10) : 0;
    if (!cJSON_IsString(emb))
        s = dpt_set_error(DPT_EMISMATCH, "%s is not the ledger of %s: that checkpoint is of a non-private run "
                          "(run id %s), which has no privacy ledger", ledger_path, checkpoint_path,
                          ck_id ? ck_id : "(none)");
    else if ((ck_id || l_id) && (!ck_id || !l_id || strcmp(ck_id, l_id)))
        s = dpt_set_error(DPT_EMISMATCH, "%s is not the ledger of %s: the ledger is of run %s, the checkpoint of "
                          "run %s", ledger_path, checkpoint_path, l_id ? l_id : "(no run id)",
                          ck_id ? ck_id : "(no run id)");
    else if (dpt_ledger_steps(l) < ck_step)
        s = dpt_set_error(DPT_EMISMATCH, "%s records %" PRIu64 " steps but %s reflects %" PRIu64
                          ": the ledger lost steps", ledger_path, dpt_ledger_steps(l), checkpoint_path, ck_step);
    dpt_ledger_free(l);
    cJSON_Delete(root);
    return s;
}
