/* The run directory's rules (docs/checkpoints.md, "The run directory"): one trainer at a
 * time holds an exclusive lock on it (flock on DIR/dptrain.lock, which also names the
 * holder's pid); a fresh run refuses a directory that holds anything else unless asked to
 * overwrite, and then removes the previous run's files and only those; every run has a
 * random id stored in its checkpoints and in its ledger's metadata, so a ledger can be
 * matched with the checkpoint beside it; every run has a secret key (DIR/dptrain.secret)
 * under which its checkpoints and ledger identify the training data (data_hmac). */
#include <dptrain/io.h>
#include <dptrain/train.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_internal.h"

/* The files a run writes into its directory (removed by overwrite), and the prefixes of
 * their temporaries (dpt_write_file_atomic: .NAME.tmp-XXXXXX). */
static const char *const RUN_FILES[] = {"checkpoint.safetensors", "ledger.json", "metrics.jsonl", DPT_RUN_KEY_FILE,
                                        NULL};
static const char *const RUN_TEMPS[] = {".checkpoint.safetensors.tmp-", ".ledger.json.tmp-",
                                        "." DPT_RUN_KEY_FILE ".tmp-", NULL};

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

/* ==== The run key ====
 * A plain SHA-256 of the training set in a shared file would let anyone holding a
 * candidate dataset confirm it, and an adversary knowing all records but one test
 * candidates for the last: a release no accountant covers. Files that leave the run carry
 * data_hmac = HMAC-SHA256(key, dpt_dataset_hash) instead, under a 32-byte key drawn from
 * the OS for each run and kept only in DIR/dptrain.secret (mode 0600):
 *     dptrain-run-key 1\n<64 lowercase hex digits>\n                                   */

#define KEY_MAGIC "dptrain-run-key 1\n"
#define KEY_FILE_LEN (sizeof KEY_MAGIC - 1 + 64 + 1)

static dpt_status run_key_set(dpt_trainer *t, const uint8_t key[32]) {
    memcpy(t->run_key, key, 32);
    uint8_t mac[32];
    unsigned len = 0;
    DPT_CHECK(HMAC(EVP_sha256(), key, 32, t->data_hash, 32, mac, &len) && len == 32, DPT_ECRYPTO,
              "HMAC-SHA256 of the training data failed");
    dpt_hex(mac, 32, t->data_tag);
    return DPT_OK;
}

dpt_status dpt_run_key_new(dpt_trainer *t) {
    uint8_t key[32];
    DPT_CHECK(RAND_bytes(key, 32) == 1, DPT_ECRYPTO, "RAND_bytes failed (no OS randomness for the run key)");
    t->key_saved = 0;
    return run_key_set(t, key);
}

static dpt_status key_path(const dpt_trainer *t, char *buf, size_t n) {
    int w = snprintf(buf, n, "%s/%s", t->out_dir, DPT_RUN_KEY_FILE);
    DPT_CHECK(w > 0 && (size_t)w < n, DPT_EINVAL, "out_dir: path too long");
    return DPT_OK;
}

dpt_status dpt_run_key_save(dpt_trainer *t) {
    char path[600], text[KEY_FILE_LEN + 1];
    DPT_TRY(key_path(t, path, sizeof path));
    memcpy(text, KEY_MAGIC, sizeof KEY_MAGIC - 1);
    dpt_hex(t->run_key, 32, text + sizeof KEY_MAGIC - 1);
    text[KEY_FILE_LEN - 1] = '\n';
    DPT_TRY(dpt_write_file_private(path, text, KEY_FILE_LEN));
    t->key_saved = 1;
    return DPT_OK;
}

static int hex_nibble(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

dpt_status dpt_run_key_load(dpt_trainer *t, int *found) {
    char path[600];
    DPT_TRY(key_path(t, path, sizeof path));
    struct stat st;
    *found = stat(path, &st) == 0;
    if (!*found) {
        DPT_CHECK(errno == ENOENT, DPT_EIO, "%s: cannot read it: %s", path, strerror(errno));
        return DPT_OK;
    }
    uint8_t *b = NULL, key[32];
    size_t n = 0;
    DPT_TRY(dpt_read_file_max(path, KEY_FILE_LEN, &b, &n));
    int ok = n == KEY_FILE_LEN && !memcmp(b, KEY_MAGIC, sizeof KEY_MAGIC - 1) && b[KEY_FILE_LEN - 1] == '\n';
    const char *hex = (const char *)b + sizeof KEY_MAGIC - 1;
    for (int i = 0; ok && i < 32; i++) {
        int hi = hex_nibble(hex[2 * i]), lo = hex_nibble(hex[2 * i + 1]);
        ok = hi >= 0 && lo >= 0;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    dpt_free(b);
    DPT_CHECK(ok, DPT_EFORMAT, "%s: not a run key file (expected \"dptrain-run-key 1\" and a line of 64 lowercase "
              "hex digits)", path);
    DPT_TRY(run_key_set(t, key));
    t->key_saved = 1;
    return DPT_OK;
}

/* ==== Lock ==== */

/* NULL when fd is a lock file this code made: a regular file with one link holding
 * nothing or a pid line ("123\n", written below); otherwise what is wrong with it. */
static const char *lock_file_problem(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return "cannot be examined";
    if (!S_ISREG(st.st_mode)) return "is not a regular file";
    if (st.st_nlink != 1) return "has other hard links";
    char b[32];
    if (st.st_size >= (off_t)sizeof b) return "holds more than a process id";
    ssize_t n = pread(fd, b, sizeof b, 0);
    if (n < 0) return "cannot be read";
    for (ssize_t i = 0; i < n; i++)
        if (!((b[i] >= '0' && b[i] <= '9') || (b[i] == '\n' && i == n - 1))) return "holds more than a process id";
    return NULL;
}

dpt_status dpt_run_dir_lock(const char *dir, int *fd_out, int *created) {
    *fd_out = -1;
    *created = 0;
    if (mkdir(dir, 0755) == 0) *created = 1;
    else if (errno != EEXIST)
        return dpt_set_error(DPT_EIO, "out_dir %s: cannot create directory: %s", dir, strerror(errno));
    char path[600];
    int w = snprintf(path, sizeof path, "%s/%s", dir, DPT_RUN_LOCK_FILE);
    DPT_CHECK(w > 0 && (size_t)w < sizeof path, DPT_EINVAL, "out_dir %s: path too long", dir);
    /* The lock file is truncated and rewritten below, so it must be one this code made: a
     * symbolic link (O_NOFOLLOW), a FIFO or device (O_NONBLOCK keeps the open from
     * waiting; fstat refuses it), a hard link to another file (st_nlink) or a file with
     * other content than a pid line would otherwise be overwritten in place. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            return dpt_set_error(DPT_EIO, "out_dir %s: its lock file %s is a symbolic link; refusing to follow it "
                                 "(remove it if it is not meant to be there)", dir, DPT_RUN_LOCK_FILE);
        return dpt_set_error(DPT_EIO, "out_dir %s: cannot open its lock file %s: %s", dir, DPT_RUN_LOCK_FILE,
                             strerror(e));
    }
    const char *bad = lock_file_problem(fd);
    if (bad) {
        close(fd);
        return dpt_set_error(DPT_EIO, "out_dir %s: its lock file %s %s; refusing to use or overwrite it (remove it "
                             "if it is not meant to be there)", dir, DPT_RUN_LOCK_FILE, bad);
    }
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

/* Called with the lock held, for a directory dpt_run_dir_lock created: when it holds
 * nothing but the lock file, both go. (Another process can only have opened the lock
 * file, and its flock fails while ours is held; rmdir refuses a directory that anything
 * else entered.) Best effort: the directory stays when any step fails. */
void dpt_run_dir_remove_if_unused(const char *dir) {
    size_t count = 0;
    if (dpt_run_dir_inspect(dir, &count, NULL, 0) != DPT_OK) {
        dpt_clear_error();
        return;
    }
    char path[600];
    int w = snprintf(path, sizeof path, "%s/%s", dir, DPT_RUN_LOCK_FILE);
    if (count || w <= 0 || (size_t)w >= sizeof path) return;
    if (unlink(path) == 0) (void)rmdir(dir);
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
