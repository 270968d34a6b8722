/* Clocks, finiteness checks, SHA-256, hex, atomic file replacement and whole-file reads. */
#include <dptrain/core.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double dpt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dpt_all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* ==== SHA-256 ==== */

dpt_status dpt_hash_init(dpt_hash *h) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    DPT_CHECK(c, DPT_ECRYPTO, "sha256: cannot create digest context");
    if (EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c);
        return dpt_set_error(DPT_ECRYPTO, "sha256: init failed");
    }
    h->ctx = c;
    return DPT_OK;
}

dpt_status dpt_hash_update(dpt_hash *h, const void *data, size_t n) {
    DPT_CHECK(h && h->ctx, DPT_EINVAL, "sha256: not initialized");
    DPT_CHECK(EVP_DigestUpdate(h->ctx, data, n) == 1, DPT_ECRYPTO, "sha256: update failed");
    return DPT_OK;
}

dpt_status dpt_hash_final(dpt_hash *h, uint8_t out[32]) {
    DPT_CHECK(h && h->ctx, DPT_EINVAL, "sha256: not initialized");
    unsigned len = 0;
    int ok = EVP_DigestFinal_ex(h->ctx, out, &len) == 1 && len == 32;
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
    DPT_CHECK(ok, DPT_ECRYPTO, "sha256: final failed");
    return DPT_OK;
}

void dpt_hex(const uint8_t *bytes, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = 0;
}

/* ==== Files ==== */

static dpt_status fsync_dir_of(const char *path) {
    char *copy = strdup(path);
    DPT_CHECK(copy, DPT_ENOMEM, "%s: out of memory", path);
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        dpt_status s = dpt_set_error(DPT_EIO, "%s: cannot open directory for fsync: %s", dir, strerror(errno));
        free(copy);
        return s;
    }
    int rc = fsync(fd);
    close(fd);
    free(copy);
    DPT_CHECK(rc == 0, DPT_EIO, "%s: fsync of directory failed: %s", path, strerror(errno));
    return DPT_OK;
}

/* The temporary file is PATH's directory/.BASENAME.tmp-XXXXXX, created with mkstemp
 * (O_EXCL, a fresh name per call): two writers of the same PATH never share or truncate
 * each other's temporary file, so the last rename wins with a complete file and a failed
 * write removes only its own temporary. */
dpt_status dpt_write_file_atomic(const char *path, const void *data, size_t n) {
    char *copy_d = strdup(path), *copy_b = strdup(path);
    size_t len = strlen(path) + 32;
    char *tmp = malloc(len);
    if (!copy_d || !copy_b || !tmp) {
        free(copy_d);
        free(copy_b);
        free(tmp);
        return dpt_set_error(DPT_ENOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, len, "%s/.%s.tmp-XXXXXX", dirname(copy_d), basename(copy_b));
    free(copy_d);
    free(copy_b);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        dpt_status s = dpt_set_error(DPT_EIO, "%s: cannot create a temporary file beside it: %s", path,
                                     strerror(errno));
        free(tmp);
        return s;
    }
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    const char *why = NULL;
    if (fchmod(fd, 0644) != 0) why = "chmod";
    const uint8_t *p = data;
    size_t left = n;
    while (!why && left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            why = "write";
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (!why && fsync(fd) != 0) why = "fsync";
    if (why) {
        dpt_status s = dpt_set_error(DPT_EIO, "%s: %s of the temporary file %s failed: %s", path, why, tmp,
                                     strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return s;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        dpt_status s = dpt_set_error(DPT_EIO, "%s: cannot replace it with %s: %s", path, tmp, strerror(errno));
        unlink(tmp);
        free(tmp);
        return s;
    }
    free(tmp);
    return fsync_dir_of(path);
}

dpt_status dpt_read_file(const char *path, uint8_t **data, size_t *n) {
    *data = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    DPT_CHECK(f, DPT_EIO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return dpt_set_error(DPT_ENOMEM, "%s: out of memory", path);
    }
    for (;;) {
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (len < cap) break;
        if (cap > SIZE_MAX / 4) {
            free(buf);
            fclose(f);
            return dpt_set_error(DPT_ENOMEM, "%s: file too large", path);
        }
        uint8_t *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            fclose(f);
            return dpt_set_error(DPT_ENOMEM, "%s: out of memory", path);
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return dpt_set_error(DPT_EIO, "%s: read error", path);
    }
    buf[len] = 0;
    *data = buf;
    *n = len;
    return DPT_OK;
}
