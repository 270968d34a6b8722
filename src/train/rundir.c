/* The run directory's rules (docs/checkpoints.md, "The run directory"): one trainer at a
 * time holds an exclusive lock on it (flock on DIR/dptrain.lock, which also names the
 * holder's pid); a fresh run refuses a directory that holds anything else unless asked to
 * overwrite, and then removes the previous run's files and only those; every run has a
 * random id stored in its checkpoints and in its ledger's metadata, so a ledger can be
 * matched with the checkpoint beside it; every run has a secret key under which its
 * checkpoints and ledger identify the training data (data_hmac), kept with its seed and
 * streams in a secret file outside the run directory (SECRETS/<run id>.secret, "Where the
 * secret lives"), so that the directory users publish holds none of it. */
#include <dptrain/io.h>
#include <dptrain/train.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
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

/* ==== The run's secret file ====
 * A plain SHA-256 of the training set in a shared file would let anyone holding a
 * candidate dataset confirm it, and an adversary knowing all records but one test
 * candidates for the last: a release no accountant covers. Files that leave the run carry
 * data_hmac = HMAC-SHA256(key, dpt_dataset_hash) instead, under a 32-byte key drawn from
 * the OS for each run.
 * The seed and the random streams' positions belong here too, never in the checkpoint:
 * whoever holds them can regenerate the batches and the noise, and with them re-run the
 * training with and without a record and compare the published parameters bit for bit (a
 * perfect membership test whatever epsilon the run states). The positions are secret
 * too: a rejection sampler's draw count depends on the values drawn.
 * Format 2 (mode 0600, written atomically before every checkpoint):
 *   {"format": "dptrain-secret", "version": 2, "key": "<64 hex>", "seed": "<u64>",
 *    "seed_source": "os" | "caller", "streams": [STATE, STATE]}
 * STATE = {"step": "<u64>", "sampler_rng": RNG, "sampler_epoch_rng": RNG, "noise_rng": RNG}
 * (noise_rng absent for secure runs, whose noise stream is drawn from the OS at every
 * session); the newest state first and the one before it, so the state of the step the
 * checkpoint holds is there even after a crash between the two writes.
 * Format 1 (older runs): "dptrain-run-key 1\n<64 lowercase hex digits>\n", the key alone
 * (their checkpoints held the seed and the streams). */

#define KEY_MAGIC_V1 "dptrain-run-key 1\n"
#define KEY_FILE_LEN_V1 (sizeof KEY_MAGIC_V1 - 1 + 64 + 1)
#define SECRET_MAX_BYTES 65536

void dpt_secret_free(char *text) {
    if (!text) return;
    OPENSSL_cleanse(text, strlen(text));
    free(text);
}

/* cJSON_Delete of a tree that held secrets (the key, the seed, stream states), each string
 * wiped first: freed heap keeps what was written there */
static void json_wipe(cJSON *o) {
    for (; o; o = o->next) {
        if (o->valuestring) OPENSSL_cleanse(o->valuestring, strlen(o->valuestring));
        json_wipe(o->child);
    }
}

static void json_wipe_delete(cJSON *o) {
    json_wipe(o);
    cJSON_Delete(o);
}

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
    dpt_status s = run_key_set(t, key);
    OPENSSL_cleanse(key, sizeof key);
    return s;
}

/* ==== Where the secret lives ====
 * Users copy, archive, upload and share run directories to publish results; a secret file
 * inside one would go along and void the run's epsilon. So the secret of run R is
 * SECRETS/R.secret, SECRETS being (first that applies) dpt_train_config.secret_dir,
 * $DPTRAIN_SECRETS_DIR, $XDG_STATE_HOME/dptrain/secrets, ~/.local/state/dptrain/secrets:
 * created mode 0700, and refused when it is not the user's own or others may enter it. R
 * is the 32 hex digits of the checkpoint's run_id, so two runs never share a file. Older
 * runs kept it in the run directory (DPT_RUN_KEY_FILE): a resume still reads it there and
 * its next save moves it (the new file is written first, so a crash between the two
 * leaves a readable secret in one place or the other). */

static int is_run_id(const char *id) {
    if (!id || strlen(id) != 32) return 0;
    for (int i = 0; i < 32; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return 0;
    return 1;
}

/* mkdir -p, each directory it makes mode 0700 */
static dpt_status mkdirs_private(const char *dir, const char *what) {
    char p[PATH_MAX];
    int w = snprintf(p, sizeof p, "%s", dir);
    DPT_CHECK(w > 0 && (size_t)w < sizeof p, DPT_EINVAL, "%s %s: path too long", what, dir);
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c) continue;
        char keep = *c;
        *c = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            return dpt_set_error(DPT_EIO, "%s %s: cannot create %s: %s", what, dir, p, strerror(errno));
        *c = keep;
        if (!keep) break;
    }
    return DPT_OK;
}

dpt_status dpt_run_secret_dir(const char *secret_dir, char *out, size_t cap) {
    DPT_CHECK(out && cap > 0, DPT_EINVAL, "dpt_run_secret_dir: no buffer for the directory");
    out[0] = 0;
    DPT_CHECK(!secret_dir || secret_dir[0], DPT_EINVAL, "secret_dir: empty directory name (NULL for the default)");
    const char *env = getenv("DPTRAIN_SECRETS_DIR"), *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    const char *what;
    int w;
    if (secret_dir) what = "secret_dir", w = snprintf(out, cap, "%s", secret_dir);
    else if (env && env[0]) what = "DPTRAIN_SECRETS_DIR", w = snprintf(out, cap, "%s", env);
    else if (xdg && xdg[0] == '/') what = "XDG_STATE_HOME", w = snprintf(out, cap, "%s/dptrain/secrets", xdg);
    else {
        /* the XDG base directory rule: a relative XDG_STATE_HOME is ignored */
        if (!home || home[0] != '/') {
            struct passwd *pw = getpwuid(geteuid());
            home = pw && pw->pw_dir && pw->pw_dir[0] == '/' ? pw->pw_dir : NULL;
        }
        DPT_CHECK(home, DPT_EINVAL, "the runs' secret directory: no home directory (HOME unset); set secret_dir "
                  "or DPTRAIN_SECRETS_DIR to a private directory");
        what = "the default under the home directory", w = snprintf(out, cap, "%s/.local/state/dptrain/secrets", home);
    }
    DPT_CHECK(w > 0 && (size_t)w < cap && (size_t)w < 480, DPT_EINVAL, "the runs' secret directory (%s): path too "
              "long (at most 479 bytes)", what);
    DPT_TRY(mkdirs_private(out, "the runs' secret directory"));
    struct stat st;
    DPT_CHECK(stat(out, &st) == 0, DPT_EIO, "the runs' secret directory %s (%s): %s", out, what,
              strerror(errno));
    DPT_CHECK(S_ISDIR(st.st_mode), DPT_EIO, "the runs' secret directory %s (%s) is not a directory", out,
              what);
    DPT_CHECK(st.st_uid == geteuid(), DPT_EIO, "the runs' secret directory %s (%s) belongs to another user (uid "
              "%u): the runs' secrets go only into a directory of one's own", out, what, (unsigned)st.st_uid);
    /* others who can list or enter it could read or replace the runs' secrets */
    DPT_CHECK(!(st.st_mode & 077), DPT_EIO, "the runs' secret directory %s (%s) is open to other users (mode "
              "%04o): whoever read a secret in it can regenerate that run's batches and noise. If nobody else did, make it private "
              "(chmod 700 %s); otherwise start new runs", out, what, (unsigned)(st.st_mode & 07777), out);
    return DPT_OK;
}

dpt_status dpt_run_secret_outside(const char *sdir, const char *run_dir) {
    char *a = realpath(sdir, NULL), *b = realpath(run_dir, NULL);
    dpt_status s = DPT_OK;
    if (a && b) {
        const size_t nb = strlen(b);
        const int inside = !strcmp(a, b) || (!strncmp(a, b, nb) && (b[nb - 1] == '/' || a[nb] == '/'));
        if (inside)
            s = dpt_set_error(DPT_EINVAL, "the runs' secret directory %s is inside the run directory %s: the secret "
                              "file (its key and seed regenerate the run's batches and noise) would go wherever the "
                              "run directory goes; choose a secret directory outside it", a, b);
    }
    free(a);
    free(b);
    return s;
}

/* SECRETS/RUN_ID.secret */
static dpt_status secret_file(const char *sdir, const char *run_id, char *buf, size_t n) {
    DPT_CHECK(is_run_id(run_id), DPT_EFORMAT, "run id '%.40s' is not 32 lowercase hex digits", run_id ? run_id : "");
    int w = snprintf(buf, n, "%s/%s.secret", sdir, run_id);
    DPT_CHECK(w > 0 && (size_t)w < n, DPT_EINVAL, "the runs' secret directory %s: path too long", sdir);
    return DPT_OK;
}

/* The run id of the run in dir: its checkpoint's run_id, else its ledger's (*have = 0 when
 * neither file says; an unreadable file counts as silent: the caller's resume reports it). */
static void dir_run_id(const char *dir, char id[33], int *have) {
    *have = 0;
    id[0] = 0;
    char path[1100];
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    char *state = NULL;
    if (access(path, F_OK) == 0 && dpt_checkpoint_peek(path, NULL, &state) == DPT_OK) {
        cJSON *root = cJSON_Parse(state);
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "run_id");
        if (cJSON_IsString(rid) && is_run_id(rid->valuestring)) memcpy(id, rid->valuestring, 33), *have = 1;
        cJSON_Delete(root);
        free(state);
    }
    snprintf(path, sizeof path, "%s/ledger.json", dir);
    dpt_ledger *l = NULL;
    if (!*have && access(path, F_OK) == 0 && dpt_ledger_load(path, &l) == DPT_OK) {
        const char *lid = dpt_ledger_get_meta(l, "run_id");
        if (is_run_id(lid)) memcpy(id, lid, 33), *have = 1;
    }
    dpt_ledger_free(l);
    dpt_clear_error();
}

/* Where the secret of run run_id (NULL: unknown) of directory dir is: SECRETS/RUN_ID.secret
 * when it exists (sdir "": not looked for), else dir/DPT_RUN_KEY_FILE (an older run's)
 * when that exists (*legacy = 1); else *found = 0 and path is where this dptrain would
 * keep it. where: the places looked at, for messages. */
static dpt_status secret_locate(const char *dir, const char *sdir, const char *run_id, char *path, size_t n,
                                int *found, int *legacy, char *where, size_t wn) {
    char mine[600] = "", old[600];
    struct stat st;
    *found = *legacy = 0;
    if (sdir[0] && run_id) DPT_TRY(secret_file(sdir, run_id, mine, sizeof mine));
    int w = snprintf(old, sizeof old, "%s/%s", dir, DPT_RUN_KEY_FILE);
    DPT_CHECK(w > 0 && (size_t)w < sizeof old, DPT_EINVAL, "out_dir %s: path too long", dir);
    if (mine[0] && lstat(mine, &st) == 0) *found = 1;
    else if (lstat(old, &st) == 0) *found = *legacy = 1;
    snprintf(path, n, "%s", *legacy || !mine[0] ? old : mine);
    if (mine[0]) snprintf(where, wn, "%s, or %s (an older run's place)", mine, old);
    else snprintf(where, wn, "%s", old);
    return DPT_OK;
}

int dpt_json_u64(const cJSON *o, const char *key, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(v)) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v->valuestring, &end, 10);
        if (*end || errno || !(v->valuestring[0] >= '0' && v->valuestring[0] <= '9')) return 0; /* not " -1" */
        *out = x;
        return 1;
    }
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0 &&
        v->valuedouble == floor(v->valuedouble)) {
        *out = (uint64_t)v->valuedouble;
        return 1;
    }
    return 0;
}

static void add_u64(cJSON *o, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    cJSON_AddStringToObject(o, key, buf);
}

cJSON *dpt_rng_state_json(const dpt_rng_state *s) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    add_u64(o, "seed", s->seed);
    add_u64(o, "stream", s->stream_id);
    add_u64(o, "substreams", s->substreams);
    add_u64(o, "block", s->block);
    add_u64(o, "pos", s->pos);
    return o;
}

int dpt_rng_state_parse(const cJSON *o, dpt_rng_state *s) {
    uint64_t stream = 0, pos = 0;
    memset(s, 0, sizeof *s);
    if (!cJSON_IsObject(o) || !dpt_json_u64(o, "seed", &s->seed) || !dpt_json_u64(o, "stream", &stream) ||
        !dpt_json_u64(o, "substreams", &s->substreams) || !dpt_json_u64(o, "block", &s->block) ||
        !dpt_json_u64(o, "pos", &pos) || stream > UINT32_MAX || pos > UINT32_MAX)
        return 0;
    s->stream_id = (uint32_t)stream;
    s->pos = (uint32_t)pos;
    return 1;
}

/* The streams' state now, as one entry of "streams". */
static cJSON *streams_now(const dpt_trainer *t) {
    cJSON *e = cJSON_CreateObject();
    if (!e) return NULL;
    add_u64(e, "step", t->step);
    dpt_sampler_state ss;
    dpt_sampler_get_state(t->sampler, &ss);
    cJSON_AddItemToObject(e, "sampler_rng", dpt_rng_state_json(&ss.rng));
    cJSON_AddItemToObject(e, "sampler_epoch_rng", dpt_rng_state_json(&ss.epoch_rng));
    if (!t->rng_noise.secure) {
        dpt_rng_state ns;
        dpt_rng_get_state(&t->rng_noise, &ns);
        cJSON_AddItemToObject(e, "noise_rng", dpt_rng_state_json(&ns));
    }
    return e;
}

/* Writes the secret file: the key, the seed, and the stream states now_text (this step's)
 * and prev (NULL: none) */
static dpt_status secret_write(const dpt_trainer *t, const char *path, const char *run_dir, const char *now_text,
                               const char *prev) {
    cJSON *root = cJSON_CreateObject();
    char hex[65];
    dpt_hex(t->run_key, 32, hex);
    cJSON_AddStringToObject(root, "format", "dptrain-secret");
    cJSON_AddNumberToObject(root, "version", 2);
    cJSON_AddStringToObject(root, "key", hex);
    OPENSSL_cleanse(hex, sizeof hex);
    add_u64(root, "seed", t->cfg.seed);
    cJSON_AddStringToObject(root, "seed_source", t->seed_caller ? "caller" : "os");
    cJSON_AddStringToObject(root, "run_id", t->run_id);
    cJSON_AddStringToObject(root, "run_dir", run_dir);
    cJSON *arr = cJSON_AddArrayToObject(root, "streams");
    cJSON_AddItemToArray(arr, cJSON_Parse(now_text));
    if (prev) cJSON_AddItemToArray(arr, cJSON_Parse(prev));
    char *text = cJSON_PrintUnformatted(root);
    json_wipe_delete(root);
    dpt_status s = text ? dpt_write_file_private(path, text, strlen(text))
                        : dpt_set_error(DPT_ENOMEM, "%s: out of memory", path);
    if (text) {
        OPENSSL_cleanse(text, strlen(text));
        free(text);
    }
    return s;
}

dpt_status dpt_run_key_commit(dpt_trainer *t) {
    if (!t->secret_prev || !t->secret_cur || t->secret_cur_step != t->step) return DPT_OK;
    char path[600], run_dir[PATH_MAX];
    DPT_TRY(secret_file(t->secret_dir, t->run_id, path, sizeof path));
    DPT_CHECK(realpath(t->out_dir, run_dir), DPT_EIO, "out_dir %s: %s", t->out_dir, strerror(errno));
    DPT_TRY(secret_write(t, path, run_dir, t->secret_cur, NULL));
    dpt_secret_free(t->secret_prev);
    t->secret_prev = NULL;
    return DPT_OK;
}

static dpt_status secret_still_ours(const dpt_trainer *t, const char *path);

dpt_status dpt_run_key_save(dpt_trainer *t) {
    char path[600], run_dir[PATH_MAX];
    DPT_ASSERT(t->secret_dir[0]); /* rank 0 with an out_dir resolved it (dpt_trainer_new) */
    DPT_TRY(secret_file(t->secret_dir, t->run_id, path, sizeof path));
    DPT_TRY(secret_still_ours(t, path));
    /* the directory whose run this is: an overwrite of it removes this file, of a copy not */
    DPT_CHECK(realpath(t->out_dir, run_dir), DPT_EIO, "out_dir %s: %s", t->out_dir, strerror(errno));
    cJSON *now = streams_now(t);
    char *now_text = now ? cJSON_PrintUnformatted(now) : NULL;
    json_wipe_delete(now);
    DPT_CHECK(now_text, DPT_ENOMEM, "%s: out of memory", path);
    /* the newest state, and the last one written for an earlier step (until the checkpoint
     * of this step is on disk: dpt_run_key_commit) */
    const char *prev = t->secret_cur && t->secret_cur_step != t->step ? t->secret_cur : t->secret_prev;
    dpt_status s = secret_write(t, path, run_dir, now_text, prev);
    if (s != DPT_OK) {
        dpt_secret_free(now_text);
        return s;
    }
    if (prev != t->secret_prev) {
        dpt_secret_free(t->secret_prev);
        t->secret_prev = t->secret_cur;
    } else {
        dpt_secret_free(t->secret_cur);
    }
    t->secret_cur = now_text;
    t->secret_cur_step = t->step;
    t->key_saved = 1;
    /* an older run's secret in its directory: moved (the new file is complete now) */
    if (t->secret_legacy[0]) {
        DPT_CHECK(unlink(t->secret_legacy) == 0 || errno == ENOENT, DPT_EIO, "%s: cannot remove it after moving "
                  "the run's secret to %s: %s (remove it yourself before publishing the run directory)",
                  t->secret_legacy, path, strerror(errno));
        dpt_trainer_log(t, DPT_LOG_NOTE, "moved the run's secret from %s to %s: the run directory no longer holds "
                        "it (resuming the run needs that file; never publish it)", t->secret_legacy, path);
        t->secret_legacy[0] = 0;
    }
    return DPT_OK;
}

static int hex_nibble(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int hex_key(const char *hex, uint8_t key[32]) {
    for (int i = 0; i < 32; i++) {
        int hi = hex_nibble(hex[2 * i]), lo = hex_nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return 0;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return hex[64] == 0 || hex[64] == '\n';
}

/* What a run's secret file holds (format 1: the key alone; version 2 adds the rest). */
typedef struct {
    int version;
    uint8_t key[32];
    uint64_t seed;
    int seed_caller;
    char *streams; /* the "streams" array as JSON text (dpt_secret_free); NULL for format 1 */
    char run_id[33];          /* "" when the file does not say (written before it did) */
    char run_dir[PATH_MAX];   /* the run directory's real path when written; "" likewise */
} secret_info;

/* Reads PATH (*found = 0 when absent), refusing a link, a special file, or one others can
 * read or write. */
static dpt_status secret_read(const char *path, int *found, secret_info *si) {
    memset(si, 0, sizeof *si);
    struct stat st;
    *found = lstat(path, &st) == 0;
    if (!*found) {
        DPT_CHECK(errno == ENOENT, DPT_EIO, "%s: cannot read it: %s", path, strerror(errno));
        return DPT_OK;
    }
    DPT_CHECK(S_ISREG(st.st_mode), DPT_EIO, "%s: not a regular file (a symbolic link or a special file): the run's "
              "secret must be the file the run wrote", path);
    /* others may have read the seed and the key: the noise would then be no secret */
    DPT_CHECK(!(st.st_mode & 077), DPT_EIO, "%s is readable or writable by other users (mode %04o): whoever read it "
              "can regenerate this run's batches and noise. If nobody else did, make it private (chmod 600 %s) and "
              "resume; otherwise start a new run", path, (unsigned)(st.st_mode & 07777), path);
    uint8_t *b = NULL;
    size_t n = 0;
    DPT_TRY(dpt_read_file_max(path, SECRET_MAX_BYTES, &b, &n));
    dpt_status s = DPT_OK;
    if (n == KEY_FILE_LEN_V1 && !memcmp(b, KEY_MAGIC_V1, sizeof KEY_MAGIC_V1 - 1) && b[KEY_FILE_LEN_V1 - 1] == '\n') {
        /* format 1: the key alone (the checkpoint holds the seed and the streams) */
        if (!hex_key((const char *)b + sizeof KEY_MAGIC_V1 - 1, si->key))
            s = dpt_set_error(DPT_EFORMAT, "%s: the run key is not 64 lowercase hex digits", path);
        si->version = 1;
    } else {
        cJSON *root = cJSON_ParseWithLength((const char *)b, n);
        const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
        const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "key");
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "seed_source");
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "streams");
        if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "dptrain-secret"))
            s = dpt_set_error(DPT_EFORMAT, "%s: not a dptrain run secret (expected a JSON object with \"format\": "
                              "\"dptrain-secret\", or a format-1 key file)", path);
        else if (!cJSON_IsNumber(ver) || ver->valuedouble != 2)
            s = dpt_set_error(DPT_EFORMAT, "%s: secret file version %g is not supported (this dptrain reads 1 and 2)",
                              path, cJSON_IsNumber(ver) ? ver->valuedouble : -1.0);
        else if (!cJSON_IsString(k) || strlen(k->valuestring) != 64 || !hex_key(k->valuestring, si->key) ||
                 !dpt_json_u64(root, "seed", &si->seed) || si->seed == 0 || !cJSON_IsString(src) ||
                 (strcmp(src->valuestring, "os") && strcmp(src->valuestring, "caller")) || !cJSON_IsArray(arr))
            s = dpt_set_error(DPT_EFORMAT, "%s: the run secret is missing fields or has wrong types (key, seed, "
                              "seed_source, streams)", path);
        else {
            const cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "run_id");
            const cJSON *rdir = cJSON_GetObjectItemCaseSensitive(root, "run_dir");
            if (cJSON_IsString(rid) && is_run_id(rid->valuestring)) memcpy(si->run_id, rid->valuestring, 33);
            if (cJSON_IsString(rdir) && strlen(rdir->valuestring) < sizeof si->run_dir)
                memcpy(si->run_dir, rdir->valuestring, strlen(rdir->valuestring) + 1);
            si->version = 2;
            si->seed_caller = !strcmp(src->valuestring, "caller");
            si->streams = cJSON_PrintUnformatted(arr);
            if (!si->streams) s = dpt_set_error(DPT_ENOMEM, "%s: out of memory", path);
        }
        json_wipe_delete(root);
    }
    OPENSSL_cleanse(b, n);
    dpt_free(b);
    if (s != DPT_OK) {
        dpt_secret_free(si->streams);
        OPENSSL_cleanse(si, sizeof *si);
    }
    return s;
}

/* Before this session writes the secret file again: the file must still hold the stream
 * state this session resumed from or last wrote (t->secret_cur). When it does not, another
 * session of the run (a copy of its directory, resumed from the same step at the same
 * time) has saved a later step since: both drew the same noise and batches, so this one
 * publishes nothing (its checkpoint and results are never written). An absent file, or a
 * session without a state yet (a fresh run, new streams), is not checked. */
static dpt_status secret_still_ours(const dpt_trainer *t, const char *path) {
    if (!t->secret_cur) return DPT_OK;
    secret_info si;
    int found = 0;
    DPT_TRY(secret_read(path, &found, &si));
    if (!found || si.version != 2) {
        dpt_secret_free(si.streams);
        OPENSSL_cleanse(&si, sizeof si);
        return DPT_OK;
    }
    cJSON *arr = cJSON_Parse(si.streams);
    dpt_secret_free(si.streams);
    OPENSSL_cleanse(&si, sizeof si);
    int ours = 0;
    uint64_t newest = 0;
    const cJSON *e = NULL;
    cJSON_ArrayForEach(e, arr) {
        if (e == arr->child && !dpt_json_u64(e, "step", &newest)) newest = 0;
        char *text = cJSON_PrintUnformatted(e);
        if (text && !strcmp(text, t->secret_cur)) ours = 1;
        dpt_secret_free(text);
    }
    json_wipe_delete(arr);
    DPT_CHECK(ours, DPT_EMISMATCH, "%s: another session of this run has saved step %" PRIu64 " since this one "
              "continued from step %" PRIu64 " (a copy of the run directory resumed at the same time?): both drew "
              "the same noise and batches, so this session saves and publishes nothing; resume one copy of a run "
              "only", path, newest, t->secret_cur_step);
    return DPT_OK;
}

dpt_status dpt_run_key_load(dpt_trainer *t, const char *run_id, int *found) {
    char path[600];
    int legacy = 0;
    DPT_TRY(secret_locate(t->out_dir, t->secret_dir, run_id, path, sizeof path, found, &legacy, t->secret_where,
                          sizeof t->secret_where));
    snprintf(t->secret_path, sizeof t->secret_path, "%s", path);
    if (!*found) return DPT_OK;
    secret_info si;
    DPT_TRY(secret_read(path, found, &si));
    if (si.run_id[0] && run_id && strcmp(si.run_id, run_id)) {
        dpt_status e = dpt_set_error(DPT_EMISMATCH, "%s is the secret of run %s, but the checkpoint in %s is of "
                                     "run %s", path, si.run_id, t->out_dir, run_id);
        dpt_secret_free(si.streams);
        OPENSSL_cleanse(&si, sizeof si);
        return e;
    }
    /* an older run's file in the run directory goes at the next save, once written to the
     * secret directory; so does a stale one beside a secret found there */
    t->secret_legacy[0] = 0;
    if (t->secret_dir[0]) {
        char old[600];
        struct stat st;
        snprintf(old, sizeof old, "%s/%s", t->out_dir, DPT_RUN_KEY_FILE);
        if (lstat(old, &st) == 0) snprintf(t->secret_legacy, sizeof t->secret_legacy, "%s", old);
        if (!legacy && t->secret_legacy[0])
            dpt_trainer_log(t, DPT_LOG_WARN, "%s is an older copy of the run's secret, which is read from %s: it is "
                            "removed at the next save (never publish it)", old, path);
    }
    dpt_status s = run_key_set(t, si.key);
    dpt_secret_free(t->secret_streams_all);
    t->secret_version = si.version;
    t->secret_seed = si.seed;
    t->secret_seed_caller = si.seed_caller;
    t->secret_streams_all = si.streams;
    OPENSSL_cleanse(&si, sizeof si);
    DPT_TRY(s);
    t->key_saved = 1;
    return DPT_OK;
}

dpt_status dpt_run_seed_resolve(const char *dir, int resume, uint64_t *seed, int *from_os) {
    return dpt_run_seed_resolve_at(dir, NULL, resume, seed, from_os);
}

dpt_status dpt_run_secret_path(const char *run_dir, const char *secret_dir, char *out, size_t cap, int *found) {
    DPT_CHECK(run_dir && run_dir[0] && out && cap && found, DPT_EINVAL, "dpt_run_secret_path: NULL or empty argument");
    char sdir[512], id[33], where[1300];
    int have = 0, legacy = 0;
    DPT_TRY(dpt_run_secret_dir(secret_dir, sdir, sizeof sdir));
    dir_run_id(run_dir, id, &have);
    char path[600];
    DPT_TRY(secret_locate(run_dir, sdir, have ? id : NULL, path, sizeof path, found, &legacy, where, sizeof where));
    DPT_CHECK(strlen(path) < cap, DPT_EINVAL, "dpt_run_secret_path: %s: longer than %zu bytes", path, cap - 1);
    memcpy(out, path, strlen(path) + 1);
    return DPT_OK;
}

dpt_status dpt_run_secret_find(const dpt_trainer *t, char *path, size_t n) {
    char id[33], where[1300];
    int have = 0, found = 0, legacy = 0;
    dir_run_id(t->out_dir, id, &have);
    return secret_locate(t->out_dir, t->secret_dir, have ? id : NULL, path, n, &found, &legacy, where, sizeof where);
}

dpt_status dpt_run_seed_resolve_at(const char *dir, const char *secret_dir, int resume, uint64_t *seed,
                                   int *from_os) {
    DPT_CHECK(seed && from_os, DPT_EINVAL, "dpt_run_seed_resolve: NULL argument");
    *seed = 0;
    *from_os = 1;
    if (resume && dir && dir[0]) {
        char path[1100];
        int found = 0;
        DPT_TRY(dpt_run_secret_path(dir, secret_dir, path, sizeof path, &found));
        secret_info si;
        memset(&si, 0, sizeof si);
        if (found) DPT_TRY(secret_read(path, &found, &si));
        if (found && si.version == 2) *seed = si.seed, *from_os = !si.seed_caller;
        dpt_secret_free(si.streams);
        OPENSSL_cleanse(&si, sizeof si);
    }
    /* a fresh run, a lost secret (the trainer refuses it, or with allow_ledger_mismatch
     * draws new streams) or a format-1 secret (its checkpoint holds its seed): a new one */
    while (*seed == 0) DPT_TRY(dpt_os_random_u64(seed));
    return DPT_OK;
}

dpt_status dpt_run_secret_streams(dpt_trainer *t, uint64_t step, dpt_sampler_state *ss, dpt_rng_state *ns,
                                  int *have_noise) {
    const char *path = t->secret_path;
    cJSON *arr = t->secret_streams_all ? cJSON_Parse(t->secret_streams_all) : NULL;
    const cJSON *e = NULL, *hit = NULL;
    cJSON_ArrayForEach(e, arr) {
        uint64_t s = 0;
        if (dpt_json_u64(e, "step", &s) && s == step) {
            hit = e;
            break;
        }
    }
    dpt_status st = DPT_OK;
    if (!hit)
        st = dpt_set_error(DPT_EMISMATCH, "%s holds no random-stream state for step %" PRIu64 " (the checkpoint's): "
                           "the secret is of another run or of another point of this one", path, step);
    else {
        const cJSON *nj = cJSON_GetObjectItemCaseSensitive(hit, "noise_rng");
        *have_noise = nj != NULL;
        if (!dpt_rng_state_parse(cJSON_GetObjectItemCaseSensitive(hit, "sampler_rng"), &ss->rng) ||
            !dpt_rng_state_parse(cJSON_GetObjectItemCaseSensitive(hit, "sampler_epoch_rng"), &ss->epoch_rng) ||
            (nj && !dpt_rng_state_parse(nj, ns)))
            st = dpt_set_error(DPT_EFORMAT, "%s: the random-stream state of step %" PRIu64 " is malformed", path,
                               step);
        else {
            /* the next save keeps this state as the one before it */
            dpt_secret_free(t->secret_cur);
            t->secret_cur = cJSON_PrintUnformatted(hit);
            t->secret_cur_step = step;
            if (!t->secret_cur) st = dpt_set_error(DPT_ENOMEM, "%s: out of memory", path);
        }
    }
    json_wipe_delete(arr);
    return st;
}

/* Removes the secret of the run in dir (which overwrite replaces): dir/DPT_RUN_KEY_FILE,
 * and SECRETS/RUN_ID.secret for the run id dir's checkpoint (or ledger) names, when that
 * file says it is of this directory. A run directory copied or moved from elsewhere shares
 * its run id with the original, whose secret it names: that one is left, and said so. What
 * was done goes into note (may be empty). */
static dpt_status secret_remove(const char *dir, const char *sdir, char *note, size_t cap) {
    note[0] = 0;
    char old[600], path[600], id[33], real[PATH_MAX];
    int have = 0, w = snprintf(old, sizeof old, "%s/%s", dir, DPT_RUN_KEY_FILE);
    DPT_CHECK(w > 0 && (size_t)w < sizeof old, DPT_EINVAL, "out_dir %s: path too long", dir);
    if (unlink(old) == 0) snprintf(note, cap, "removed %s", old);
    else DPT_CHECK(errno == ENOENT, DPT_EIO, "overwrite: cannot remove %s: %s", old, strerror(errno));
    dir_run_id(dir, id, &have);
    struct stat st;
    if (!have || !sdir[0] || secret_file(sdir, id, path, sizeof path) != DPT_OK || lstat(path, &st) != 0) {
        dpt_clear_error();
        return DPT_OK;
    }
    secret_info si;
    int found = 0;
    const size_t used = strlen(note);
    if (secret_read(path, &found, &si) != DPT_OK) {
        snprintf(note + used, cap - used, "%sleft %s (%s)", used ? "; " : "", path, dpt_last_error());
        dpt_clear_error();
        return DPT_OK;
    }
    const int mine = si.run_dir[0] && realpath(dir, real) && !strcmp(real, si.run_dir);
    if (mine) {
        DPT_CHECK(unlink(path) == 0 || errno == ENOENT, DPT_EIO, "overwrite: cannot remove %s: %s", path,
                  strerror(errno));
        snprintf(note + used, cap - used, "%sremoved %s", used ? "; " : "", path);
    } else
        snprintf(note + used, cap - used, "%sleft %s: it is the secret of the run in %s, of which %s holds a copy "
                 "(remove it yourself when that run is gone)", used ? "; " : "", path,
                 si.run_dir[0] ? si.run_dir : "(another directory)", dir);
    dpt_secret_free(si.streams);
    OPENSSL_cleanse(&si, sizeof si);
    return DPT_OK;
}

dpt_status dpt_run_secret_remove(const char *run_dir, const char *secret_dir, char *note, size_t cap) {
    DPT_CHECK(run_dir && run_dir[0], DPT_EINVAL, "dpt_run_secret_remove: empty run directory");
    char buf[2];
    if (!note || !cap) note = buf, cap = sizeof buf;
    note[0] = 0;
    char sdir[512];
    DPT_TRY(dpt_run_secret_dir(secret_dir, sdir, sizeof sdir));
    return secret_remove(run_dir, sdir, note, cap);
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

/* ==== new run directories and PARENT/latest ==== */

dpt_status dpt_run_dir_new_name(const char *parent, char *out, size_t cap) {
    DPT_CHECK(parent && *parent, DPT_EINVAL, "run directory: empty parent directory name");
    DPT_CHECK(out && cap > 0, DPT_EINVAL, "run directory: no buffer for the name");
    uint64_t r = 0;
    DPT_TRY(dpt_os_random_u64(&r));
    time_t now = time(NULL);
    struct tm tmv;
    char stamp[32] = "00000000-000000";
    if (localtime_r(&now, &tmv)) strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tmv);
    int w = snprintf(out, cap, "%s/%s-%04x", parent, stamp, (unsigned)(r & 0xffff));
    DPT_CHECK(w > 0 && (size_t)w < cap, DPT_EINVAL, "run directory: %s/...: name longer than %zu bytes", parent,
              cap - 1);
    return DPT_OK;
}

dpt_status dpt_run_dir_link_latest(const char *run_dir, int *linked) {
    if (linked) *linked = 0;
    DPT_CHECK(run_dir && *run_dir, DPT_EINVAL, "run directory: empty name");
    const char *slash = strrchr(run_dir, '/');
    if (!slash || !slash[1]) return DPT_OK;
    char latest[4200], tmp[4300];
    int w = snprintf(latest, sizeof latest, "%.*s/latest", (int)(slash - run_dir), run_dir);
    DPT_CHECK(w > 0 && (size_t)w < sizeof latest, DPT_EINVAL, "%s: path too long", run_dir);
    struct stat st;
    if (lstat(latest, &st) == 0 && !S_ISLNK(st.st_mode)) return DPT_OK; /* a real directory: kept */
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", latest, (long)getpid());
    unlink(tmp);
    /* relative to PARENT, so the tree can move */
    if (symlink(slash + 1, tmp) != 0 || rename(tmp, latest) != 0) {
        int e = errno;
        unlink(tmp);
        return dpt_set_error(DPT_EIO, "could not point %s at %s: %s", latest, run_dir, strerror(e));
    }
    if (linked) *linked = 1;
    return DPT_OK;
}

dpt_status dpt_run_dir_clear(const dpt_trainer *t, const char *dir) {
    /* first, while the checkpoint still names the previous run */
    char note[1600];
    DPT_TRY(secret_remove(dir, t->secret_dir, note, sizeof note));
    if (note[0]) dpt_trainer_log(t, DPT_LOG_NOTE, "overwrite: the previous run's secret: %s", note);
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
