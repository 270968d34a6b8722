/* Clocks, finiteness checks, SHA-256, hex, atomic file replacement and whole-file reads. */
#include <dptrain/core.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdint.h>
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

/* Branch-free over blocks of a fixed length, which the compiler vectorizes at -O2 (an
 * early exit per value does not vectorize: it was a third of a PrivateGradients release):
 * a float is NaN or infinite when its exponent bits are all set. */
#define FINITE_BLOCK 1024
int dpt_all_finite(const float *x, size_t n) {
    size_t i = 0;
    for (; i + FINITE_BLOCK <= n; i += FINITE_BLOCK) {
        uint32_t bad = 0;
        for (size_t k = 0; k < FINITE_BLOCK; k++) {
            uint32_t u;
            memcpy(&u, x + i + k, sizeof u);
            bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        }
        if (bad) return 0;
    }
    for (; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

double dpt_sqnorm_double(const float *x, size_t n) {
    /* eight independent sums: the compiler vectorizes them (one running sum is a chain of
     * dependent additions, 4 cycles each) */
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) a[k] += (double)x[j + k] * x[j + k];
    double s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
    for (; j < n; j++) s += (double)x[j] * x[j];
    return s;
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

size_t dpt_text_char_len(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0], n, cp;
    if (c < 0x20 || c == 0x7f) return 0; /* NUL and the C0 controls, DEL */
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) n = 1, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) n = 2, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) n = 3, cp = c & 0x07;
    else return 0;
    for (unsigned i = 1; i <= n; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0; /* also stops at the terminating NUL */
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0x80 && cp < 0xa0))
        return 0;
    return n + 1;
}

void dpt_hex(const uint8_t *bytes, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = 0;
}

void dpt_format_double(double v, char out[DPT_DOUBLE_TEXT]) {
    if (!isfinite(v)) {
        snprintf(out, DPT_DOUBLE_TEXT, "null");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, DPT_DOUBLE_TEXT, "%.*g", prec, v);
        if (strtod(out, NULL) == v) return;
    }
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
static dpt_status write_atomic(const char *path, const void *data, size_t n, mode_t mode) {
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
    if (fchmod(fd, mode) != 0) why = "chmod";
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

dpt_status dpt_write_file_atomic(const char *path, const void *data, size_t n) {
    return write_atomic(path, data, n, 0644);
}

/* mkstemp creates the temporary with mode 0600 and the mode never widens, so the secret is
 * readable by its owner alone from its first byte on */
dpt_status dpt_write_file_private(const char *path, const void *data, size_t n) {
    return write_atomic(path, data, n, 0600);
}

dpt_status dpt_open_regular(const char *path, FILE **out, size_t *size) {
    *out = NULL;
    if (size) *size = 0;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    DPT_CHECK(fd >= 0, DPT_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int e = errno;
        int reg = fstat(fd, &sb) == 0;
        close(fd);
        if (!reg) return dpt_set_error(DPT_EIO, "%s: cannot stat: %s", path, strerror(e));
        return dpt_set_error(DPT_EIO, "%s: not a regular file (%s)", path,
                             S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO"
                             : S_ISCHR(sb.st_mode) ? "a character device" : S_ISBLK(sb.st_mode) ? "a block device"
                             : S_ISSOCK(sb.st_mode) ? "a socket" : "not a file");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return dpt_set_error(DPT_EIO, "%s: cannot open: %s", path, strerror(e));
    }
    *out = f;
    if (size) *size = (size_t)sb.st_size;
    return DPT_OK;
}

dpt_status dpt_read_file_max(const char *path, size_t max_bytes, uint8_t **data, size_t *n) {
    *data = NULL;
    *n = 0;
    FILE *f;
    size_t size;
    if (max_bytes > SIZE_MAX - 2) max_bytes = SIZE_MAX - 2; /* room for the probe byte and the NUL */
    DPT_TRY(dpt_open_regular(path, &f, &size));
    if (size > max_bytes) {
        fclose(f);
        return dpt_set_error(DPT_EFORMAT, "%s: %zu bytes, more than the %zu this file may have", path, size, max_bytes);
    }
    /* read what stat said plus one byte, to notice a file that grew meanwhile */
    uint8_t *buf = dpt_alloc(size + 2, 1, path);
    if (!buf) {
        fclose(f);
        return DPT_ENOMEM;
    }
    size_t len = fread(buf, 1, size + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err || len > size) {
        dpt_free(buf);
        return dpt_set_error(DPT_EIO, "%s: %s", path, err ? "read error" : "changed size while being read");
    }
    buf[len] = 0;
    *data = buf;
    *n = len;
    return DPT_OK;
}

dpt_status dpt_read_file(const char *path, uint8_t **data, size_t *n) {
    return dpt_read_file_max(path, SIZE_MAX, data, n);
}
