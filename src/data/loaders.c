/* Dataset loaders: IDX, CIFAR-10 binary, USPS, CSV, and the name -> files mapping.
 * Every file is read whole into memory and inflated when it starts with the gzip magic, so
 * a parser only ever sees a byte buffer whose true length is known: sizes announced by a
 * header are checked against it before anything is allocated from them. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "dptrain/data.h"
#include "data_internal.h"

/* Largest decompressed file we accept (a guard against gzip bombs and typos). */
#define DPT_DATA_MAX_BYTES ((size_t)4 << 30)

/* ==== Reading files (raw or gzip) ==== */

static dpt_status read_raw(const char *path, uint8_t **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    FILE *f;
    DPT_TRY(dpt_open_regular(path, &f, NULL)); /* a FIFO or device would hang or never end */
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return dpt_set_error(DPT_ENOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n == cap) {
            if (cap >= DPT_DATA_MAX_BYTES) {
                free(buf);
                fclose(f);
                return dpt_set_error(DPT_EFORMAT, "%s: larger than %zu bytes", path,
                                     (size_t)DPT_DATA_MAX_BYTES);
            }
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return dpt_set_error(DPT_ENOMEM, "%s: out of memory reading %zu bytes", path,
                                     cap * 2);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return dpt_set_error(DPT_EIO, "%s: read error", path);
    }
    *out = buf;
    *n_out = n;
    return DPT_OK;
}

/* Inflates a gzip file (possibly several concatenated members). A truncated or corrupt
 * stream is DPT_EFORMAT with zlib's message. */
static dpt_status gunzip(const char *path, const uint8_t *in, size_t n_in, uint8_t **out,
                         size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    size_t cap = n_in < ((size_t)1 << 20) ? ((size_t)1 << 20) : n_in * 4, n = 0;
    if (cap > DPT_DATA_MAX_BYTES) cap = DPT_DATA_MAX_BYTES;
    uint8_t *buf = malloc(cap);
    DPT_CHECK(buf, DPT_ENOMEM, "%s: out of memory", path);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
        free(buf);
        return dpt_set_error(DPT_ENOMEM, "%s: inflateInit failed", path);
    }
    size_t in_pos = 0;
    dpt_status st = DPT_OK;
    for (;;) {
        if (n == cap) {
            if (cap >= DPT_DATA_MAX_BYTES) {
                st = dpt_set_error(DPT_EFORMAT, "%s: decompresses to more than %zu bytes",
                                   path, (size_t)DPT_DATA_MAX_BYTES);
                break;
            }
            size_t ncap = cap * 2 > DPT_DATA_MAX_BYTES ? DPT_DATA_MAX_BYTES : cap * 2;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                st = dpt_set_error(DPT_ENOMEM, "%s: out of memory inflating", path);
                break;
            }
            buf = nb;
            cap = ncap;
        }
        /* zlib counts in uInt: feed at most 1 GiB at a time. */
        size_t in_chunk = n_in - in_pos, out_chunk = cap - n;
        if (in_chunk > (1u << 30)) in_chunk = 1u << 30;
        if (out_chunk > (1u << 30)) out_chunk = 1u << 30;
        zs.next_in = (Bytef *)(in + in_pos);
        zs.avail_in = (uInt)in_chunk;
        zs.next_out = buf + n;
        zs.avail_out = (uInt)out_chunk;
        int ret = inflate(&zs, Z_NO_FLUSH);
        in_pos += in_chunk - zs.avail_in;
        n += out_chunk - zs.avail_out;
        if (ret == Z_STREAM_END) {
            /* Another gzip member may follow (gzip concatenation); trailing zeros are
             * tolerated like gzip(1) does. */
            while (in_pos < n_in && in[in_pos] == 0) in_pos++;
            if (in_pos >= n_in) break;
            if (n_in - in_pos < 2 || in[in_pos] != 0x1f || in[in_pos + 1] != 0x8b) {
                st = dpt_set_error(DPT_EFORMAT,
                                   "%s: corrupt gzip stream: trailing garbage at byte %zu",
                                   path, in_pos);
                break;
            }
            inflateReset(&zs);
            continue;
        }
        if (ret == Z_OK) continue;
        if (ret == Z_BUF_ERROR && zs.avail_out == 0) continue; /* needs more output room */
        if (ret == Z_BUF_ERROR && in_pos >= n_in) {
            st = dpt_set_error(DPT_EFORMAT,
                               "%s: truncated gzip stream (ends after %zu compressed bytes, "
                               "%zu decompressed)",
                               path, n_in, n);
            break;
        }
        if (ret == Z_MEM_ERROR) {
            st = dpt_set_error(DPT_ENOMEM, "%s: out of memory inflating", path);
            break;
        }
        st = dpt_set_error(DPT_EFORMAT, "%s: corrupt gzip stream at compressed byte %zu: %s",
                           path, in_pos, zs.msg ? zs.msg : "inflate error");
        break;
    }
    inflateEnd(&zs);
    if (st != DPT_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *n_out = n;
    return DPT_OK;
}

/* Whole file, inflated when it starts with the gzip magic 1f 8b. Free with free(). */
static dpt_status read_maybe_gz(const char *path, uint8_t **out, size_t *n_out) {
    uint8_t *raw;
    size_t n_raw;
    DPT_TRY(read_raw(path, &raw, &n_raw));
    if (n_raw >= 2 && raw[0] == 0x1f && raw[1] == 0x8b) {
        dpt_status st = gunzip(path, raw, n_raw, out, n_out);
        free(raw);
        return st;
    }
    *out = raw;
    *n_out = n_raw;
    return DPT_OK;
}

dpt_status dpt_data_read_maybe_gz(const char *path, uint8_t **out, size_t *n_out) {
    return read_maybe_gz(path, out, n_out);
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void set_source(dpt_dataset *d, const char *a, const char *b) {
    if (b)
        snprintf(d->source, sizeof d->source, "%s + %s", a, b);
    else
        snprintf(d->source, sizeof d->source, "%s", a);
}

/* Allocates x [n, dim] and y [n], overflow-checked. */
static dpt_status alloc_xy(dpt_dataset *d, size_t n, size_t dim, const char *path) {
    size_t nd;
    DPT_CHECK(dpt_mul_overflow(n, dim, &nd) == 0 && nd <= SIZE_MAX / sizeof(float),
              DPT_ENOMEM, "%s: %zu x %zu features overflow", path, n, dim);
    d->x = dpt_alloc(nd ? nd : 1, sizeof(float), "dataset features");
    d->y = dpt_alloc(n ? n : 1, sizeof(int32_t), "dataset labels");
    if (!d->x || !d->y) {
        dpt_free(d->x);
        dpt_free(d->y);
        d->x = NULL;
        d->y = NULL;
        return dpt_set_error(DPT_ENOMEM, "%s: cannot allocate %zu x %zu floats", path, n,
                             dim);
    }
    d->n = n;
    d->dim = dim;
    return DPT_OK;
}

/* Common ending of every loader: validate, or free and zero on failure. */
static dpt_status finish(dpt_dataset *out, dpt_status st) {
    if (st == DPT_OK) st = dpt_dataset_validate(out);
    if (st != DPT_OK) dpt_dataset_free(out);
    return st;
}

/* ==== IDX (MNIST, Fashion-MNIST) ==== */

static dpt_status idx_parse(const char *ip, const uint8_t *im, size_t im_n, const char *lp,
                            const uint8_t *lb, size_t lb_n, dpt_dataset *out) {
    DPT_CHECK(im_n >= 4, DPT_EFORMAT, "%s: truncated IDX header (%zu bytes, need 16)", ip, im_n);
    uint32_t magic = be32(im);
    DPT_CHECK(magic == 2051, DPT_EFORMAT, "%s: bad magic 0x%08x, expected 2051 (IDX images)",
              ip, magic);
    DPT_CHECK(im_n >= 16, DPT_EFORMAT, "%s: truncated IDX header (%zu bytes, need 16)", ip, im_n);
    DPT_CHECK(lb_n >= 4, DPT_EFORMAT, "%s: truncated IDX header (%zu bytes, need 8)", lp, lb_n);
    uint32_t lmagic = be32(lb);
    DPT_CHECK(lmagic == 2049, DPT_EFORMAT, "%s: bad magic 0x%08x, expected 2049 (IDX labels)",
              lp, lmagic);
    DPT_CHECK(lb_n >= 8, DPT_EFORMAT, "%s: truncated IDX header (%zu bytes, need 8)", lp, lb_n);
    size_t n = be32(im + 4), rows = be32(im + 8), cols = be32(im + 12), nl = be32(lb + 4);
    DPT_CHECK(rows > 0 && cols > 0, DPT_EFORMAT, "%s: image size %zu x %zu", ip, rows, cols);
    size_t dim, body;
    DPT_CHECK(dpt_mul_overflow(rows, cols, &dim) == 0 && dpt_mul_overflow(n, dim, &body) == 0,
              DPT_EFORMAT, "%s: %zu images of %zu x %zu overflow", ip, n, rows, cols);
    DPT_CHECK(im_n - 16 >= body, DPT_EFORMAT,
              "%s: truncated: header announces %zu images of %zux%zu (%zu bytes) but only %zu "
              "bytes follow",
              ip, n, rows, cols, body, im_n - 16);
    DPT_CHECK(im_n - 16 == body, DPT_EFORMAT,
              "%s: %zu extra bytes after %zu images of %zux%zu", ip, im_n - 16 - body, n, rows,
              cols);
    DPT_CHECK(lb_n - 8 >= nl, DPT_EFORMAT,
              "%s: truncated: header announces %zu labels but only %zu bytes follow", lp, nl,
              lb_n - 8);
    DPT_CHECK(lb_n - 8 == nl, DPT_EFORMAT, "%s: %zu extra bytes after %zu labels", lp,
              lb_n - 8 - nl, nl);
    DPT_CHECK(n == nl, DPT_EFORMAT, "%s has %zu images but %s has %zu labels", ip, n, lp, nl);
    for (size_t i = 0; i < n; i++)
        DPT_CHECK(lb[8 + i] < 10, DPT_EFORMAT, "%s: label %u of example %zu out of range [0, 10)",
                  lp, lb[8 + i], i);
    DPT_TRY(alloc_xy(out, n, dim, ip));
    const uint8_t *px = im + 16;
    for (size_t i = 0; i < body; i++) out->x[i] = (float)px[i] / 255.0f;
    for (size_t i = 0; i < n; i++) out->y[i] = lb[8 + i];
    out->n_classes = 10;
    out->shape[0] = 1;
    out->shape[1] = rows;
    out->shape[2] = cols;
    return DPT_OK;
}

dpt_status dpt_data_load_idx(const char *images_path, const char *labels_path,
                             dpt_dataset *out) {
    DPT_CHECK(images_path && labels_path && out, DPT_EINVAL, "dpt_data_load_idx: NULL argument");
    memset(out, 0, sizeof *out);
    uint8_t *im = NULL, *lb = NULL;
    size_t im_n = 0, lb_n = 0;
    dpt_status st = read_maybe_gz(images_path, &im, &im_n);
    if (st == DPT_OK) st = read_maybe_gz(labels_path, &lb, &lb_n);
    if (st == DPT_OK) st = idx_parse(images_path, im, im_n, labels_path, lb, lb_n, out);
    free(im);
    free(lb);
    set_source(out, images_path, labels_path);
    return finish(out, st);
}

/* ==== CIFAR-10 binary ==== */

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)

dpt_status dpt_data_load_cifar10(const char *const *paths, size_t n_paths, dpt_dataset *out) {
    DPT_CHECK(paths && out && n_paths > 0, DPT_EINVAL, "dpt_data_load_cifar10: no files");
    memset(out, 0, sizeof *out);
    /* Pass 1 checks every file (record size, labels) and counts records, holding one
     * decompressed file at a time; pass 2 re-reads each file into the single allocation.
     * Inflating twice costs ~0.1 s per batch file and halves peak memory. */
    dpt_status st = DPT_OK;
    size_t n = 0;
    for (size_t f = 0; st == DPT_OK && f < n_paths; f++) {
        uint8_t *b;
        size_t len;
        st = read_maybe_gz(paths[f], &b, &len);
        if (st != DPT_OK) break;
        if (len == 0 || len % CIFAR_RECORD != 0) {
            st = dpt_set_error(DPT_EFORMAT,
                               "%s: size %zu bytes is not a multiple of the CIFAR-10 record "
                               "size %d (1 label + 3072 pixels): truncated or not a CIFAR-10 "
                               "binary batch",
                               paths[f], len, CIFAR_RECORD);
        }
        size_t nf = len / CIFAR_RECORD;
        for (size_t i = 0; st == DPT_OK && i < nf; i++) {
            uint8_t l = b[i * CIFAR_RECORD];
            if (l >= 10)
                st = dpt_set_error(DPT_EFORMAT,
                                   "%s: label %u of record %zu out of range [0, 10)", paths[f],
                                   l, i);
        }
        free(b);
        n += nf;
    }
    if (st == DPT_OK) st = alloc_xy(out, n, CIFAR_PIXELS, paths[0]);
    size_t row = 0;
    for (size_t f = 0; st == DPT_OK && f < n_paths; f++) {
        uint8_t *b;
        size_t len;
        st = read_maybe_gz(paths[f], &b, &len);
        if (st != DPT_OK) break;
        size_t nf = len / CIFAR_RECORD;
        if (len % CIFAR_RECORD != 0 || row + nf > n) {
            free(b);
            st = dpt_set_error(DPT_EIO, "%s: changed while reading", paths[f]);
            break;
        }
        for (size_t i = 0; i < nf; i++, row++) {
            const uint8_t *rec = b + i * CIFAR_RECORD;
            out->y[row] = rec[0];
            float *xr = out->x + row * CIFAR_PIXELS;
            for (size_t j = 0; j < CIFAR_PIXELS; j++) xr[j] = (float)rec[1 + j] / 255.0f;
        }
        free(b);
    }
    if (st == DPT_OK) {
        out->n_classes = 10;
        out->shape[0] = 3;
        out->shape[1] = 32;
        out->shape[2] = 32;
    }
    if (n_paths == 1)
        set_source(out, paths[0], NULL);
    else
        snprintf(out->source, sizeof out->source, "%s .. %s (%zu files)", paths[0],
                 paths[n_paths - 1], n_paths);
    return finish(out, st);
}

/* ==== Text helpers (USPS, CSV) ==== */

/* Next line of buf starting at *pos: [*ls, *le) without the newline (and without a
 * trailing CR). Returns 0 at the end. */
static int next_line(const char *buf, size_t n, size_t *pos, size_t *ls, size_t *le) {
    if (*pos >= n) return 0;
    size_t s = *pos, e = s;
    while (e < n && buf[e] != '\n') e++;
    *pos = e < n ? e + 1 : e;
    if (e > s && buf[e - 1] == '\r') e--;
    *ls = s;
    *le = e;
    return 1;
}

static int is_blank_line(const char *buf, size_t s, size_t e) {
    for (size_t i = s; i < e; i++)
        if (buf[i] != ' ' && buf[i] != '\t') return 0;
    return 1;
}

/* Parses a finite double from [s, e) (surrounding blanks allowed). 0 on success;
 * 1 empty, 2 not a number, 3 not finite. */
static int parse_num(const char *buf, size_t s, size_t e, double *v) {
    while (s < e && (buf[s] == ' ' || buf[s] == '\t')) s++;
    while (e > s && (buf[e - 1] == ' ' || buf[e - 1] == '\t')) e--;
    if (s == e) return 1;
    char tmp[64];
    if (e - s >= sizeof tmp) return 2;
    memcpy(tmp, buf + s, e - s);
    tmp[e - s] = 0;
    char *end;
    errno = 0;
    double d = strtod(tmp, &end);
    if (end != tmp + (e - s)) return 2;
    if (!isfinite(d)) return 3;
    *v = d;
    return 0;
}

static const char *num_err_name(int code) {
    return code == 1 ? "empty field" : code == 2 ? "not a number" : "not finite (NaN or Inf)";
}

/* Label as an integer in [0, max_label]: -1 when it is not. */
static long label_of(double v, long max_label) {
    if (!(v >= 0) || v > (double)max_label || v != floor(v)) return -1;
    return (long)v;
}

/* ==== USPS ==== */

#define USPS_DIM 256

dpt_status dpt_data_load_usps(const char *path, dpt_dataset *out) {
    DPT_CHECK(path && out, DPT_EINVAL, "dpt_data_load_usps: NULL argument");
    memset(out, 0, sizeof *out);
    uint8_t *raw;
    size_t len;
    dpt_status st = read_maybe_gz(path, &raw, &len);
    set_source(out, path, NULL);
    if (st != DPT_OK) return finish(out, st);
    const char *buf = (const char *)raw;
    /* First pass counts examples so the arrays are allocated once. */
    size_t pos = 0, ls, le, n = 0;
    while (next_line(buf, len, &pos, &ls, &le))
        if (!is_blank_line(buf, ls, le)) n++;
    if (n == 0) st = dpt_set_error(DPT_EFORMAT, "%s: no examples", path);
    if (st == DPT_OK) st = alloc_xy(out, n, USPS_DIM, path);
    size_t row = 0, line = 0;
    pos = 0;
    while (st == DPT_OK && next_line(buf, len, &pos, &ls, &le)) {
        line++;
        if (is_blank_line(buf, ls, le)) continue;
        size_t p = ls, field = 0;
        for (;;) {
            while (p < le && (buf[p] == ' ' || buf[p] == '\t')) p++;
            if (p >= le) break;
            size_t fs = p;
            while (p < le && buf[p] != ' ' && buf[p] != '\t') p++;
            field++;
            if (field > 1 + USPS_DIM) break;
            double v;
            int code = parse_num(buf, fs, p, &v);
            if (code) {
                st = dpt_set_error(DPT_EFORMAT, "%s:%zu: field %zu \"%.*s\": %s", path, line,
                                   field, (int)(p - fs > 32 ? 32 : p - fs), buf + fs,
                                   num_err_name(code));
                break;
            }
            if (field == 1) {
                long l = label_of(v, 9);
                if (l < 0) {
                    st = dpt_set_error(DPT_EFORMAT,
                                       "%s:%zu: label %g out of range (an integer in 0..9)",
                                       path, line, v);
                    break;
                }
                out->y[row] = (int32_t)l;
            } else {
                if (v < -1.0 || v > 1.0) {
                    st = dpt_set_error(DPT_EFORMAT,
                                       "%s:%zu: field %zu value %g outside [-1, 1]", path,
                                       line, field, v);
                    break;
                }
                out->x[row * USPS_DIM + (field - 2)] = (float)v;
            }
        }
        if (st != DPT_OK) break;
        if (field != 1 + USPS_DIM) {
            st = dpt_set_error(DPT_EFORMAT,
                               "%s:%zu: %s%zu fields, expected %d (a label and 16x16 values)",
                               path, line, field > 1 + USPS_DIM ? "more than " : "", field,
                               1 + USPS_DIM);
            break;
        }
        row++;
    }
    free(raw);
    if (st == DPT_OK) {
        DPT_ASSERT(row == n);
        out->n_classes = 10;
        out->shape[0] = 1;
        out->shape[1] = 16;
        out->shape[2] = 16;
    }
    return finish(out, st);
}


/* splitmix64 (Steele, Lea and Flood 2014): a fixed, self-contained generator, so the pooled
 * split does not change when the library's RNG streams do */
static uint64_t splitmix64(uint64_t *st) {
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

dpt_status dpt_data_load_usps_pooled(const char *train_path, const char *test_path, int train, dpt_dataset *out) {
    DPT_CHECK(train_path && test_path && out, DPT_EINVAL, "dpt_data_load_usps_pooled: NULL argument");
    memset(out, 0, sizeof *out);
    dpt_dataset a, b;
    DPT_TRY(dpt_data_load_usps(train_path, &a));
    dpt_status st = dpt_data_load_usps(test_path, &b);
    if (st != DPT_OK) {
        dpt_dataset_free(&a);
        return st;
    }
    const size_t N = a.n + b.n, d = a.dim;
    size_t *perm = dpt_alloc(N, sizeof(size_t), "usps pooled permutation");
    if (!perm) st = DPT_ENOMEM;
    if (st == DPT_OK && N <= DPT_USPS_POOLED_TRAIN)
        st = dpt_set_error(DPT_EFORMAT, "%s + %s: %zu images, the pooled split needs more than %d", train_path,
                           test_path, N, DPT_USPS_POOLED_TRAIN);
    size_t lo = train ? 0 : DPT_USPS_POOLED_TRAIN, n = train ? DPT_USPS_POOLED_TRAIN : N - DPT_USPS_POOLED_TRAIN;
    if (st == DPT_OK) st = alloc_xy(out, n, d, train_path);
    if (st == DPT_OK) {
        /* Fisher-Yates over the pooled order (zip.train then zip.test), fixed seed */
        uint64_t state = DPT_USPS_POOLED_SEED;
        for (size_t i = 0; i < N; i++) perm[i] = i;
        for (size_t i = N - 1; i > 0; i--) {
            size_t j = (size_t)(splitmix64(&state) % (uint64_t)(i + 1));
            size_t tmp = perm[i];
            perm[i] = perm[j], perm[j] = tmp;
        }
        for (size_t r = 0; r < n; r++) {
            size_t k = perm[lo + r];
            const dpt_dataset *src = k < a.n ? &a : &b;
            size_t row = k < a.n ? k : k - a.n;
            memcpy(out->x + r * d, src->x + row * d, d * sizeof(float));
            out->y[r] = src->y[row];
        }
        out->n = n;
        out->dim = d;
        out->n_classes = 10;
        out->shape[0] = 1, out->shape[1] = 16, out->shape[2] = 16;
        snprintf(out->source, sizeof out->source, "%s pooled split of %s + %s", train ? "training" : "test",
                 train_path, test_path);
    }
    dpt_free(perm);
    dpt_dataset_free(&a);
    dpt_dataset_free(&b);
    return finish(out, st);
}

/* ==== CSV ==== */

/* Largest label accepted in a CSV (n_classes = max label + 1 stays an int and small). */
#define CSV_MAX_LABEL 1000000

/* Number of comma-separated fields in [s, e). */
static size_t csv_count_fields(const char *buf, size_t s, size_t e) {
    size_t k = 1;
    for (size_t i = s; i < e; i++) k += buf[i] == ',';
    return k;
}

/* t_dim = 0: a label column then features; t_dim >= 1: t_dim target columns then features;
 * skip != SIZE_MAX: features only (unlabelled), after `skip` columns that are not read. */
static dpt_status load_csv(const char *path, size_t t_dim, size_t skip, dpt_dataset *out) {
    memset(out, 0, sizeof *out);
    const int unlabelled = skip != SIZE_MAX;
    const size_t lead = unlabelled ? skip : t_dim ? t_dim : 1; /* columns before the features */
    uint8_t *raw;
    size_t len;
    dpt_status st = read_maybe_gz(path, &raw, &len);
    set_source(out, path, NULL);
    if (st != DPT_OK) return finish(out, st);
    const char *buf = (const char *)raw;
    /* First pass: header detection, field count, number of rows. */
    size_t pos = 0, ls, le, n = 0, nf = 0, line;
    int header = 0;
    while (next_line(buf, len, &pos, &ls, &le)) {
        if (is_blank_line(buf, ls, le)) continue;
        if (nf == 0) {
            nf = csv_count_fields(buf, ls, le);
            /* the first field that is read (after the skipped ones, which may hold text in
             * every row: ids, names) decides: text there makes the line a header */
            size_t fs = ls, fe;
            for (size_t k = 0; k < (unlabelled ? skip : 0) && fs < le; fs++) k += buf[fs] == ',';
            for (fe = fs; fe < le && buf[fe] != ',';) fe++;
            double v;
            if (fs < le && parse_num(buf, fs, fe, &v) == 2) {
                header = 1; /* a header line */
                continue;
            }
        }
        n++;
    }
    if (n == 0) st = dpt_set_error(DPT_EFORMAT, "%s: no data rows", path);
    if (st == DPT_OK && nf < lead + 1) {
        if (unlabelled)
            st = dpt_set_error(DPT_EFORMAT, "%s: %zu column(s); need at least one feature after the %zu skipped", path,
                               nf, skip);
        else if (t_dim)
            st = dpt_set_error(DPT_EFORMAT, "%s: %zu column(s); need %zu target column(s) and at least one feature",
                               path, nf, t_dim);
        else
            st = dpt_set_error(DPT_EFORMAT, "%s: %zu column(s); need a label and at least one "
                                            "feature", path, nf);
    }
    size_t dim = st == DPT_OK ? nf - lead : 0;
    if (st == DPT_OK) st = alloc_xy(out, n, dim, path);
    if (st == DPT_OK && (t_dim || unlabelled)) { /* regression: targets instead of labels; or neither */
        dpt_free(out->y);
        out->y = NULL;
    }
    if (st == DPT_OK && t_dim) {
        out->t = dpt_alloc2(n, t_dim, sizeof(float), "dataset targets");
        if (!out->t) st = DPT_ENOMEM;
        out->t_dim = t_dim;
    }
    long max_label = -1;
    size_t row = 0;
    int header_skipped = 0;
    pos = 0;
    line = 0;
    while (st == DPT_OK && next_line(buf, len, &pos, &ls, &le)) {
        line++;
        if (is_blank_line(buf, ls, le)) continue;
        if (header && !header_skipped) {
            header_skipped = 1;
            continue;
        }
        size_t k = csv_count_fields(buf, ls, le);
        if (k != nf) {
            st = dpt_set_error(DPT_EFORMAT, "%s:%zu: %zu fields, expected %zu (as on the first "
                                            "row)", path, line, k, nf);
            break;
        }
        size_t p = ls;
        for (size_t col = 1; col <= nf; col++) {
            size_t fs = p;
            while (p < le && buf[p] != ',') p++;
            if (unlabelled && col <= skip) { /* a skipped column: not read */
                p++;
                continue;
            }
            double v;
            int code = parse_num(buf, fs, p, &v);
            if (code) {
                st = dpt_set_error(DPT_EFORMAT, "%s:%zu:%zu: %s (\"%.*s\")", path, line, col,
                                   num_err_name(code), (int)(p - fs > 32 ? 32 : p - fs),
                                   buf + fs);
                break;
            }
            if (!unlabelled && col <= t_dim) {
                float fv = (float)v;
                if (!isfinite(fv)) {
                    st = dpt_set_error(DPT_EFORMAT, "%s:%zu:%zu: target %g overflows float32", path, line, col, v);
                    break;
                }
                out->t[row * t_dim + (col - 1)] = fv;
            } else if (!unlabelled && col == 1) {
                long l = label_of(v, CSV_MAX_LABEL);
                if (l < 0) {
                    st = dpt_set_error(DPT_EFORMAT,
                                       "%s:%zu:1: label %g is not an integer in [0, %d]", path,
                                       line, v, CSV_MAX_LABEL);
                    break;
                }
                out->y[row] = (int32_t)l;
                if (l > max_label) max_label = l;
            } else {
                float fv = (float)v;
                if (!isfinite(fv)) {
                    st = dpt_set_error(DPT_EFORMAT, "%s:%zu:%zu: %g overflows float32", path,
                                       line, col, v);
                    break;
                }
                out->x[row * dim + (col - lead - 1)] = fv;
            }
            p++; /* skip the comma */
        }
        row++;
    }
    free(raw);
    if (st == DPT_OK) {
        DPT_ASSERT(row == n);
        out->n_classes = t_dim || unlabelled ? 0 : (int)max_label + 1;
        out->shape[0] = 1;
        out->shape[1] = 1;
        out->shape[2] = dim;
    }
    return finish(out, st);
}

dpt_status dpt_data_load_csv(const char *path, dpt_dataset *out) {
    DPT_CHECK(path && out, DPT_EINVAL, "dpt_data_load_csv: NULL argument");
    return load_csv(path, 0, SIZE_MAX, out);
}

dpt_status dpt_data_load_csv_features(const char *path, size_t skip, dpt_dataset *out) {
    DPT_CHECK(path && out, DPT_EINVAL, "dpt_data_load_csv_features: NULL argument");
    DPT_CHECK(skip < 1000000, DPT_EINVAL, "dpt_data_load_csv_features: skip must be below 1000000, got %zu", skip);
    return load_csv(path, 0, skip, out);
}

dpt_status dpt_data_load_csv_targets(const char *path, size_t t_dim, dpt_dataset *out) {
    DPT_CHECK(path && out, DPT_EINVAL, "dpt_data_load_csv_targets: NULL argument");
    memset(out, 0, sizeof *out);
    DPT_CHECK(t_dim >= 1 && t_dim <= 1000000, DPT_EINVAL, "dpt_data_load_csv_targets: t_dim must be in [1, 1000000], "
              "got %zu", t_dim);
    return load_csv(path, t_dim, SIZE_MAX, out);
}

/* ==== Named datasets under a data directory ==== */

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Resolves dir/name/base(.gz) into out: the .gz name first, then the raw one. */
static dpt_status resolve(const char *dir, const char *name, const char *base, char *out,
                          size_t cap) {
    int k = snprintf(out, cap, "%s/%s/%s.gz", dir, name, base);
    DPT_CHECK(k > 0 && (size_t)k < cap, DPT_EINVAL, "data path too long: %s/%s/%s", dir, name,
              base);
    if (file_exists(out)) return DPT_OK;
    snprintf(out, cap, "%s/%s/%s", dir, name, base);
    if (file_exists(out)) return DPT_OK;
    return dpt_set_error(DPT_EIO,
                         "%s/%s/%s.gz: no such file (nor %s/%s/%s without .gz); "
                         "set data_dir to a directory DIR with the files under DIR/%s/",
                         dir, name, base, dir, name, base, name);
}

#define PATH_CAP 4096

/* dpt_data_load and dpt_data_load_targets (t_dim >= 1: csv names only). */
static dpt_status data_load(const char *name, const char *data_dir, dpt_split split, size_t t_dim,
                            dpt_dataset *out) {
    DPT_CHECK(name && out, DPT_EINVAL, "dpt_data_load: NULL argument");
    DPT_CHECK(split == DPT_SPLIT_TRAIN || split == DPT_SPLIT_TEST, DPT_EINVAL,
              "dpt_data_load: bad split %d", (int)split);
    memset(out, 0, sizeof *out);
    const char *dir = (data_dir && *data_dir) ? data_dir : DPT_DEFAULT_DATA_DIR;
    int train = split == DPT_SPLIT_TRAIN;
    dpt_status st;
    if (strncmp(name, "csv:", 4) == 0) {
        const char *spec = name + 4;
        const char *comma = strchr(spec, ',');
        char path[PATH_CAP];
        if (!comma) {
            DPT_CHECK(*spec, DPT_EINVAL, "dpt_data_load: name 'csv:' needs a path (csv:PATH or csv:TRAIN,TEST)");
            DPT_CHECK(strlen(spec) < PATH_CAP, DPT_EINVAL, "csv path too long");
            snprintf(path, sizeof path, "%s", spec);
        } else {
            const char *s = train ? spec : comma + 1;
            size_t l = train ? (size_t)(comma - spec) : strlen(comma + 1);
            DPT_CHECK(l > 0 && l < PATH_CAP && !strchr(comma + 1, ','), DPT_EINVAL,
                      "dpt_data_load: name '%s': expected csv:TRAIN,TEST with two non-empty paths", name);
            memcpy(path, s, l);
            path[l] = 0;
        }
        struct stat sb;
        DPT_CHECK(stat(path, &sb) == 0, DPT_EIO, "%s: no such file (from dataset name '%s')", path, name);
        DPT_CHECK(S_ISREG(sb.st_mode), DPT_EIO, "%s: not a regular file (from dataset name '%s')", path, name);
        return t_dim ? dpt_data_load_csv_targets(path, t_dim, out) : dpt_data_load_csv(path, out);
    }
    DPT_CHECK(!t_dim, DPT_EINVAL, "dataset \"%s\" has class labels, not regression targets (targets come from "
              "csv:PATH or csv:TRAIN,TEST files)", name);
    if (strcmp(name, "mnist") == 0 || strcmp(name, "fashion-mnist") == 0) {
        char ip[PATH_CAP], lp[PATH_CAP];
        DPT_TRY(resolve(dir, name, train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte",
                        ip, sizeof ip));
        DPT_TRY(resolve(dir, name, train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte",
                        lp, sizeof lp));
        return dpt_data_load_idx(ip, lp, out);
    }
    if (strcmp(name, "usps-pooled") == 0) {
        char pt[PATH_CAP], pe[PATH_CAP];
        DPT_TRY(resolve(dir, "usps", "zip.train", pt, sizeof pt));
        DPT_TRY(resolve(dir, "usps", "zip.test", pe, sizeof pe));
        return dpt_data_load_usps_pooled(pt, pe, train, out);
    }
    if (strcmp(name, "usps") == 0) {
        char p[PATH_CAP];
        DPT_TRY(resolve(dir, name, train ? "zip.train" : "zip.test", p, sizeof p));
        return dpt_data_load_usps(p, out);
    }
    if (strcmp(name, "cifar10") == 0) {
        char paths[5][PATH_CAP];
        const char *pp[5];
        size_t np = train ? 5 : 1;
        for (size_t i = 0; i < np; i++) {
            char base[48]; /* "data_batch_" + any size_t + ".bin" */
            if (train)
                snprintf(base, sizeof base, "data_batch_%zu.bin", i + 1);
            else
                snprintf(base, sizeof base, "test_batch.bin");
            DPT_TRY(resolve(dir, name, base, paths[i], sizeof paths[i]));
            pp[i] = paths[i];
        }
        st = dpt_data_load_cifar10(pp, np, out);
        return st;
    }
    if (!strncmp(name, "fortunes-topic", 14) || !strncmp(name, "fortunes-chars", 14)) {
        const char *rest = name + 14;
        size_t T = 0;
        if (*rest) { /* ":T", the sequence length */
            char *end;
            unsigned long long v = rest[0] == ':' && rest[1] >= '0' && rest[1] <= '9' ? strtoull(rest + 1, &end, 10) : 0;
            DPT_CHECK(v >= 1 && v <= ((size_t)1 << 20) && !*end, DPT_EINVAL, "dataset \"%s\": expected %.14s or "
                      "%.14s:T with a sequence length T in [1, 2^20]", name, name, name);
            T = (size_t)v;
        }
        /* DIR/fortunes/ when it exists (a copy, or a test corpus), else the package's */
        char fd[PATH_CAP];
        int k = snprintf(fd, sizeof fd, "%s/fortunes", dir);
        struct stat sb;
        const char *use = k > 0 && (size_t)k < sizeof fd && stat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)
                              ? fd : DPT_FORTUNES_DIR;
        return dpt_data_load_fortunes(name[9] == 't' ? DPT_FORTUNES_TOPIC : DPT_FORTUNES_CHARS, use, split, T, out);
    }
    return dpt_set_error(DPT_EINVAL,
                         "unknown dataset \"%s\" (known: mnist, fashion-mnist, usps, usps-pooled, cifar10, "
                         "fortunes-topic[:T], fortunes-chars[:T], csv:PATH, csv:TRAIN,TEST)",
                         name);
}

dpt_status dpt_data_load(const char *name, const char *data_dir, dpt_split split, dpt_dataset *out) {
    return data_load(name, data_dir, split, 0, out);
}

dpt_status dpt_data_load_targets(const char *name, const char *data_dir, dpt_split split, size_t t_dim,
                                 dpt_dataset *out) {
    if (out) memset(out, 0, sizeof *out);
    DPT_CHECK(t_dim >= 1, DPT_EINVAL, "dpt_data_load_targets: t_dim must be >= 1 (0 is dpt_data_load)");
    return data_load(name, data_dir, split, t_dim, out);
}
