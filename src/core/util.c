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

dpt_status dpt_write_file_atomic(const char *path, const void *data, size_t n) {
    size_t len = strlen(path);
    char *tmp = malloc(len + 16);
    DPT_CHECK(tmp, DPT_ENOMEM, "%s: out of memory", path);
    snprintf(tmp, len + 16, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        dpt_status s = dpt_set_error(DPT_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return s;
    }
    const uint8_t *p = data;
    size_t left = n;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            dpt_status s = dpt_set_error(DPT_EIO, "%s: write failed: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            free(tmp);
            return s;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) {
        dpt_status s = dpt_set_error(DPT_EIO, "%s: fsync failed: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return s;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        dpt_status s = dpt_set_error(DPT_EIO, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
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
