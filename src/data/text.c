/* Text data: the byte and character tokenizers, token-id files ("DPTK"), the examples made
 * from token sequences (padded classification rows, next-token windows) and the fortunes
 * corpus. Token ids travel in a dataset's float32 features; every id is below 2^24, where
 * float32 holds every integer exactly (data.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"
#include "dptrain/data.h"

#define TOK_HEADER 40
#define TOK_MAX_SEQ_LEN ((size_t)1 << 20)

/* ==== Byte tokenizer ==== */

void dpt_tokenize_bytes(const uint8_t *text, size_t n, uint32_t *ids) {
    for (size_t i = 0; i < n; i++) ids[i] = text[i];
}

/* ==== Character tokenizer (UTF-8) ==== */

/* Decodes the code point at s[*i] (RFC 3629: no overlong forms, no surrogates, at most
 * U+10FFFF) and advances *i; DPT_EFORMAT naming the byte offset otherwise. */
static dpt_status utf8_next(const uint8_t *s, size_t n, size_t *i, uint32_t *cp) {
    const size_t at = *i;
    const uint8_t b = s[at];
    size_t len;
    uint32_t c, lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (b < 0x80) {
        *cp = b;
        *i = at + 1;
        return DPT_OK;
    } else if (b >= 0xC2 && b <= 0xDF) {
        len = 2, c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3, c = b & 0x0F;
        if (b == 0xE0) lo = 0xA0; /* overlong */
        if (b == 0xED) hi = 0x9F; /* surrogates U+D800..DFFF */
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4, c = b & 0x07;
        if (b == 0xF0) lo = 0x90; /* overlong */
        if (b == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        return dpt_set_error(DPT_EFORMAT, "invalid UTF-8 at byte %zu: 0x%02x cannot start a character", at, b);
    }
    DPT_CHECK(n - at >= len, DPT_EFORMAT, "invalid UTF-8 at byte %zu: a %zu-byte character cut off by the end of the "
              "text", at, len);
    for (size_t k = 1; k < len; k++) {
        const uint8_t t = s[at + k];
        const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        DPT_CHECK(t >= l && t <= h, DPT_EFORMAT, "invalid UTF-8 at byte %zu: byte %zu of the character is 0x%02x",
                  at, k + 1, t);
        c = (c << 6) | (t & 0x3F);
    }
    *cp = c;
    *i = at + len;
    return DPT_OK;
}

#define CP_LIMIT 0x110000u

void dpt_char_vocab_free(dpt_char_vocab *v) {
    if (!v) return;
    dpt_free(v->chars);
    memset(v, 0, sizeof *v);
}

dpt_status dpt_char_vocab_build(const uint8_t *text, size_t n, dpt_char_vocab *out) {
    DPT_CHECK(out && (text || n == 0), DPT_EINVAL, "dpt_char_vocab_build: NULL argument");
    memset(out, 0, sizeof *out);
    uint8_t *seen = dpt_alloc(CP_LIMIT / 8, 1, "character set"); /* one bit per code point */
    DPT_CHECK(seen, DPT_ENOMEM, "dpt_char_vocab_build: out of memory");
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        dpt_status s = utf8_next(text, n, &i, &c);
        if (s != DPT_OK) {
            dpt_free(seen);
            return s;
        }
        if (!(seen[c >> 3] & (1u << (c & 7)))) count++;
        seen[c >> 3] |= (uint8_t)(1u << (c & 7));
    }
    out->chars = dpt_alloc(count ? count : 1, sizeof(uint32_t), "character vocabulary");
    if (!out->chars) {
        dpt_free(seen);
        return dpt_set_error(DPT_ENOMEM, "dpt_char_vocab_build: out of memory");
    }
    for (uint32_t c = 0, k = 0; c < CP_LIMIT; c++)
        if (seen[c >> 3] & (1u << (c & 7))) out->chars[k++] = c;
    out->n_chars = count;
    dpt_free(seen);
    return DPT_OK;
}

dpt_status dpt_char_vocab_encode(const dpt_char_vocab *v, const uint8_t *text, size_t n, uint32_t *ids,
                                 size_t *n_ids) {
    DPT_CHECK(v && (text || n == 0) && (ids || n == 0) && n_ids, DPT_EINVAL, "dpt_char_vocab_encode: NULL argument");
    *n_ids = 0;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        DPT_TRY(utf8_next(text, n, &i, &c));
        size_t lo = 0, hi = v->n_chars; /* binary search in the increasing code points */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (v->chars[mid] < c) lo = mid + 1;
            else hi = mid;
        }
        ids[k++] = lo < v->n_chars && v->chars[lo] == c ? DPT_TOK_CHAR_FIRST + (uint32_t)lo : DPT_TOK_CHAR_UNK;
    }
    *n_ids = k;
    return DPT_OK;
}

/* ==== Token-id files ==== */

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }
static void put32(uint8_t *p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}
static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

void dpt_tokens_free(dpt_tokens *t) {
    if (!t) return;
    dpt_free(t->ids);
    dpt_free(t->offsets);
    dpt_free(t->labels);
    memset(t, 0, sizeof *t);
}

/* Allocates ids [n_ids], offsets [n_seqs + 1] and (labelled) labels [n_seqs]. */
static dpt_status tokens_alloc(dpt_tokens *t, size_t n_seqs, size_t n_ids, int labelled, const char *what) {
    t->ids = dpt_alloc(n_ids ? n_ids : 1, sizeof(uint32_t), "token ids");
    t->offsets = n_seqs < SIZE_MAX ? dpt_alloc(n_seqs + 1, sizeof(size_t), "sequence offsets") : NULL;
    t->labels = labelled ? dpt_alloc(n_seqs, sizeof(int32_t), "sequence labels") : NULL;
    if (!t->ids || !t->offsets || (labelled && !t->labels)) {
        dpt_tokens_free(t);
        return dpt_set_error(DPT_ENOMEM, "%s: cannot allocate %zu token ids in %zu sequences", what, n_ids, n_seqs);
    }
    t->n_seqs = n_seqs;
    t->n_ids = n_ids;
    return DPT_OK;
}

/* The body of dpt_tokens_load on the file's bytes b [n]. */
static dpt_status tokens_parse(const char *path, const uint8_t *b, size_t n, dpt_tokens *out) {
    DPT_CHECK(n >= TOK_HEADER, DPT_EFORMAT, "%s: truncated token-id header (%zu bytes, the header has %d)", path, n,
              TOK_HEADER);
    DPT_CHECK(!memcmp(b, "DPTK", 4), DPT_EFORMAT, "%s: bad magic %02x %02x %02x %02x, expected \"DPTK\" (a token-id "
              "file)", path, b[0], b[1], b[2], b[3]);
    const uint32_t version = le32(b + 4), width = le32(b + 8), vocab = le32(b + 12), classes = le32(b + 16);
    const uint64_t n_seqs = le64(b + 24), n_ids = le64(b + 32);
    DPT_CHECK(version == DPT_TOKENS_VERSION, DPT_EFORMAT, "%s: token-id file version %u, this library reads version %u",
              path, version, DPT_TOKENS_VERSION);
    DPT_CHECK(width == 2 || width == 4, DPT_EFORMAT, "%s: id width %u bytes, expected 2 (uint16) or 4 (uint32)", path,
              width);
    DPT_CHECK(vocab >= 1 && vocab <= DPT_TOK_MAX_VOCAB, DPT_EFORMAT, "%s: vocabulary size %u is outside [1, 2^24] "
              "(ids above 2^24 are not exact in float32)", path, vocab);
    DPT_CHECK(width == 4 || vocab <= 65536, DPT_EFORMAT, "%s: vocabulary size %u does not fit 2-byte ids", path, vocab);
    DPT_CHECK(classes <= 0x7FFFFFFFu, DPT_EFORMAT, "%s: n_classes %u is above 2^31 - 1", path, classes);
    DPT_CHECK(le32(b + 20) == 0, DPT_EFORMAT, "%s: reserved header field is %u, expected 0", path, le32(b + 20));
    DPT_CHECK(n_seqs >= 1, DPT_EFORMAT, "%s: no sequences (n_seqs 0)", path);
    /* what the header announces, before anything is allocated from it */
    const size_t avail = n - TOK_HEADER;
    const uint64_t per_seq = classes ? 8 : 4;
    DPT_CHECK(n_seqs <= avail / per_seq && n_ids <= (avail - n_seqs * per_seq) / width, DPT_EFORMAT,
              "%s: truncated: the header announces %llu sequences and %llu ids of %u bytes (%s), the file has %zu "
              "bytes after its header", path, (unsigned long long)n_seqs, (unsigned long long)n_ids, width,
              classes ? "with labels" : "no labels", avail);
    const size_t need = (size_t)(n_seqs * per_seq + n_ids * width);
    DPT_CHECK(need == avail, DPT_EFORMAT, "%s: %zu trailing bytes after the %llu ids", path, avail - need,
              (unsigned long long)n_ids);
    memset(out, 0, sizeof *out);
    DPT_TRY(tokens_alloc(out, (size_t)n_seqs, (size_t)n_ids, classes > 0, path));
    out->vocab = vocab;
    out->n_classes = (int)classes;
    snprintf(out->source, sizeof out->source, "%s", path);
    const uint8_t *p = b + TOK_HEADER;
    size_t sum = 0;
    dpt_status st = DPT_OK;
    for (size_t s = 0; s < out->n_seqs; s++, p += 4) {
        out->offsets[s] = sum;
        const uint32_t len = le32(p);
        if (len > out->n_ids - sum) {
            st = dpt_set_error(DPT_EFORMAT, "%s: the sequence lengths sum to more than n_ids = %zu (at sequence %zu)",
                               path, out->n_ids, s);
            break;
        }
        sum += len;
    }
    if (st == DPT_OK && sum != out->n_ids)
        st = dpt_set_error(DPT_EFORMAT, "%s: the sequence lengths sum to %zu, the header says n_ids = %zu", path, sum,
                           out->n_ids);
    if (st == DPT_OK) out->offsets[out->n_seqs] = sum;
    for (size_t s = 0; st == DPT_OK && classes && s < out->n_seqs; s++, p += 4) {
        const uint32_t y = le32(p);
        if (y >= classes) st = dpt_set_error(DPT_EFORMAT, "%s: label %u of sequence %zu is outside [0, %u)", path, y, s,
                                             classes);
        else out->labels[s] = (int32_t)y;
    }
    for (size_t i = 0, s = 0; st == DPT_OK && i < out->n_ids; i++, p += width) {
        const uint32_t id = width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : le32(p);
        if (id >= vocab) {
            while (out->offsets[s + 1] <= i) s++;
            st = dpt_set_error(DPT_EFORMAT, "%s: id %u at position %zu (sequence %zu) is outside the vocabulary "
                               "[0, %u)", path, id, i, s, vocab);
        }
        out->ids[i] = id;
    }
    if (st != DPT_OK) dpt_tokens_free(out);
    return st;
}

dpt_status dpt_tokens_load(const char *path, dpt_tokens *out) {
    DPT_CHECK(path && out, DPT_EINVAL, "dpt_tokens_load: NULL argument");
    memset(out, 0, sizeof *out);
    uint8_t *b;
    size_t n;
    DPT_TRY(dpt_data_read_maybe_gz(path, &b, &n));
    dpt_status st = tokens_parse(path, b, n, out);
    free(b);
    return st;
}

/* The in-memory invariants of a dpt_tokens (what _load guarantees), for callers' structs. */
static dpt_status tokens_check(const char *F, const dpt_tokens *t) {
    DPT_CHECK(t && t->ids && t->offsets, DPT_EINVAL, "%s: NULL tokens or arrays", F);
    DPT_CHECK(t->n_seqs >= 1, DPT_EINVAL, "%s: no sequences", F);
    DPT_CHECK(t->vocab >= 1 && t->vocab <= DPT_TOK_MAX_VOCAB, DPT_EINVAL, "%s: vocab %u is outside [1, 2^24]", F,
              t->vocab);
    DPT_CHECK(t->n_classes >= 0 && (t->n_classes == 0 || t->labels), DPT_EINVAL, "%s: n_classes %d without labels", F,
              t->n_classes);
    DPT_CHECK(t->offsets[0] == 0 && t->offsets[t->n_seqs] == t->n_ids, DPT_EINVAL, "%s: offsets must run from 0 to "
              "n_ids = %zu", F, t->n_ids);
    for (size_t s = 0; s < t->n_seqs; s++) {
        DPT_CHECK(t->offsets[s] <= t->offsets[s + 1] && t->offsets[s + 1] - t->offsets[s] <= UINT32_MAX, DPT_EINVAL,
                  "%s: sequence %zu: offsets decrease or the sequence exceeds 2^32 - 1 ids", F, s);
        if (t->n_classes)
            DPT_CHECK(t->labels[s] >= 0 && t->labels[s] < t->n_classes, DPT_EINVAL, "%s: label %d of sequence %zu is "
                      "outside [0, %d)", F, (int)t->labels[s], s, t->n_classes);
    }
    for (size_t i = 0; i < t->n_ids; i++)
        DPT_CHECK(t->ids[i] < t->vocab, DPT_EINVAL, "%s: id %u at position %zu is outside the vocabulary [0, %u)", F,
                  t->ids[i], i, t->vocab);
    return DPT_OK;
}

dpt_status dpt_tokens_save(const char *path, const dpt_tokens *t) {
    DPT_CHECK(path, DPT_EINVAL, "dpt_tokens_save: NULL path");
    DPT_TRY(tokens_check("dpt_tokens_save", t));
    const size_t width = t->vocab <= 65536 ? 2 : 4, per_seq = t->n_classes ? 8 : 4;
    size_t a, c, total;
    DPT_CHECK(!dpt_mul_overflow(t->n_seqs, per_seq, &a) && !dpt_mul_overflow(t->n_ids, width, &c) &&
              a <= SIZE_MAX - TOK_HEADER - c, DPT_ENOMEM, "dpt_tokens_save: %s: size overflows", path);
    total = TOK_HEADER + a + c;
    uint8_t *b = dpt_alloc(total, 1, "token-id file");
    DPT_CHECK(b, DPT_ENOMEM, "dpt_tokens_save: %s: out of memory (%zu bytes)", path, total);
    memcpy(b, "DPTK", 4);
    put32(b + 4, DPT_TOKENS_VERSION);
    put32(b + 8, (uint32_t)width);
    put32(b + 12, t->vocab);
    put32(b + 16, (uint32_t)t->n_classes);
    put32(b + 20, 0);
    put64(b + 24, t->n_seqs);
    put64(b + 32, t->n_ids);
    uint8_t *p = b + TOK_HEADER;
    for (size_t s = 0; s < t->n_seqs; s++, p += 4) put32(p, (uint32_t)(t->offsets[s + 1] - t->offsets[s]));
    for (size_t s = 0; t->n_classes && s < t->n_seqs; s++, p += 4) put32(p, (uint32_t)t->labels[s]);
    for (size_t i = 0; i < t->n_ids; i++, p += width) {
        if (width == 2) p[0] = (uint8_t)t->ids[i], p[1] = (uint8_t)(t->ids[i] >> 8);
        else put32(p, t->ids[i]);
    }
    dpt_status st = dpt_write_file_atomic(path, b, total);
    dpt_free(b);
    return st;
}

/* ==== Examples from token sequences ==== */

/* x [n, T] and y [n], shape (1, 1, T), n_classes k; on failure *d stays zeroed. */
static dpt_status alloc_rows(dpt_dataset *d, size_t n, size_t T, int k, const char *src) {
    memset(d, 0, sizeof *d);
    d->x = dpt_alloc2(n, T, sizeof(float), "token rows");
    d->y = dpt_alloc(n, sizeof(int32_t), "token labels");
    if (!d->x || !d->y) {
        dpt_dataset_free(d);
        return dpt_set_error(DPT_ENOMEM, "%s: cannot allocate %zu examples of %zu token ids", src, n, T);
    }
    d->n = n, d->dim = T, d->n_classes = k;
    d->shape[0] = 1, d->shape[1] = 1, d->shape[2] = T;
    snprintf(d->source, sizeof d->source, "%s", src);
    return DPT_OK;
}

dpt_status dpt_tokens_classification(const dpt_tokens *t, size_t seq_len, uint32_t pad_id, dpt_dataset *out) {
    static const char *F = "dpt_tokens_classification";
    DPT_CHECK(out, DPT_EINVAL, "%s: NULL out", F);
    memset(out, 0, sizeof *out);
    DPT_TRY(tokens_check(F, t));
    DPT_CHECK(t->n_classes >= 1, DPT_EINVAL, "%s: %s has no labels (n_classes 0): classification needs one per "
              "sequence", F, t->source[0] ? t->source : "the tokens");
    DPT_CHECK(seq_len >= 1 && seq_len <= TOK_MAX_SEQ_LEN, DPT_EINVAL, "%s: seq_len %zu is outside [1, 2^20]", F,
              seq_len);
    DPT_CHECK(pad_id < DPT_TOK_MAX_VOCAB, DPT_EINVAL, "%s: pad id %u is not below 2^24 (not exact in float32)", F,
              pad_id);
    DPT_TRY(alloc_rows(out, t->n_seqs, seq_len, t->n_classes, t->source));
    for (size_t s = 0; s < t->n_seqs; s++) {
        const size_t len = t->offsets[s + 1] - t->offsets[s], keep = len < seq_len ? len : seq_len;
        float *row = out->x + s * seq_len; /* [T]: the first T ids, then padding */
        for (size_t j = 0; j < keep; j++) row[j] = (float)t->ids[t->offsets[s] + j];
        for (size_t j = keep; j < seq_len; j++) row[j] = (float)pad_id;
        out->y[s] = t->labels[s];
    }
    return DPT_OK;
}

dpt_status dpt_tokens_lm_windows(const dpt_tokens *t, size_t seq_len, size_t stride, dpt_dataset *out) {
    static const char *F = "dpt_tokens_lm_windows";
    DPT_CHECK(out, DPT_EINVAL, "%s: NULL out", F);
    memset(out, 0, sizeof *out);
    DPT_TRY(tokens_check(F, t));
    DPT_CHECK(seq_len >= 1 && seq_len <= TOK_MAX_SEQ_LEN, DPT_EINVAL, "%s: seq_len %zu is outside [1, 2^20]", F,
              seq_len);
    DPT_CHECK(stride >= 1, DPT_EINVAL, "%s: stride must be >= 1", F);
    DPT_CHECK(t->vocab <= 0x7FFFFFFFu, DPT_EINVAL, "%s: vocab %u too large for int32 labels", F, t->vocab);
    size_t n = 0;
    for (size_t s = 0; s < t->n_seqs; s++) {
        const size_t len = t->offsets[s + 1] - t->offsets[s];
        if (len > seq_len) n += (len - seq_len - 1) / stride + 1; /* offsets o = k stride with o + T < len */
    }
    DPT_CHECK(n >= 1, DPT_EINVAL, "%s: no sequence of %s has more than seq_len = %zu ids (a window needs T + 1)", F,
              t->source[0] ? t->source : "the tokens", seq_len);
    DPT_TRY(alloc_rows(out, n, seq_len, (int)t->vocab, t->source));
    size_t r = 0;
    for (size_t s = 0; s < t->n_seqs; s++) {
        const size_t len = t->offsets[s + 1] - t->offsets[s];
        const uint32_t *ids = t->ids + t->offsets[s];
        for (size_t o = 0; len > seq_len && o < len - seq_len; o += stride, r++) {
            float *row = out->x + r * seq_len; /* [T] = ids[o .. o + T), label ids[o + T] */
            for (size_t j = 0; j < seq_len; j++) row[j] = (float)ids[o + j];
            out->y[r] = (int32_t)ids[o + seq_len];
        }
    }
    DPT_ASSERT(r == n);
    return DPT_OK;
}

/* ==== The fortunes corpus ==== */

/* Every topic file of Debian's fortunes 1:1.99.1 (fortunes-min's "fortunes" included),
 * alphabetical: the character-level corpus. */
static const char *const FORTUNES_FILES[DPT_FORTUNES_N_FILES] = {
    "art", "ascii-art", "computers", "cookie", "debian", "definitions", "disclaimer", "drugs", "education",
    "ethnic", "food", "fortunes", "goedel", "humorists", "kids", "knghtbrd", "law", "linux", "linuxcookie",
    "literature", "love", "magic", "medicine", "men-women", "miscellaneous", "news", "paradoxum", "people",
    "perl", "pets", "platitudes", "politics", "pratchett", "riddles", "science", "songs-poems", "sports",
    "startrek", "tao", "translate-me", "wisdom", "work", "zippy"};
/* The classification topics: the files with at least 200 entries, less the four named for
 * where their quotations came from rather than a subject (cookie, fortunes, knghtbrd,
 * miscellaneous). Label k is the k-th name. */
static const char *const FORTUNES_TOPICS[DPT_FORTUNES_N_TOPICS] = {
    "art", "computers", "definitions", "disclaimer", "drugs", "education", "law", "linux", "literature",
    "men-women", "people", "perl", "platitudes", "politics", "science", "songs-poems", "startrek", "wisdom",
    "work", "zippy"};

const char *dpt_fortunes_topic(int k) {
    return k >= 0 && k < DPT_FORTUNES_N_TOPICS ? FORTUNES_TOPICS[k] : NULL;
}

/* FNV-1a, 64 bits */
static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}
/* splitmix64's output for state z (Steele et al. 2014): mixes FNV's weak low bits */
static uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int is_test_entry(const uint8_t *p, size_t n) { return splitmix64(fnv1a64(p, n)) % 5 == 0; }

/* Entries of one fortune file b [n]: calls f(entry, length, arg) for each non-empty one of
 * the split, in file order. */
typedef void (*entry_fn)(const uint8_t *p, size_t n, void *arg);
static void for_entries(const uint8_t *b, size_t n, int test, entry_fn f, void *arg) {
    size_t start = 0, ls = 0;
    while (ls <= n) {
        size_t le = ls;
        while (le < n && b[le] != '\n') le++;
        const int sep = le - ls == 1 && b[ls] == '%', end = le >= n;
        if (sep || end) {
            size_t stop = sep ? ls : n; /* the entry is [start, stop) less its final newline */
            if (stop > start && b[stop - 1] == '\n') stop--;
            if (stop > start && is_test_entry(b + start, stop - start) == test) f(b + start, stop - start, arg);
            start = le + 1;
        }
        if (end) break;
        ls = le + 1;
    }
}

typedef struct {
    dpt_tokens *t;    /* NULL: counting pass */
    size_t n_seqs, n_ids;
    int label, eos;   /* eos: append DPT_TOK_BYTE_EOS after each entry, all in one sequence */
} entry_acc;

static void add_entry(const uint8_t *p, size_t n, void *arg) {
    entry_acc *a = arg;
    if (a->t) {
        dpt_tokenize_bytes(p, n, a->t->ids + a->n_ids);
        if (a->eos) a->t->ids[a->n_ids + n] = DPT_TOK_BYTE_EOS;
        if (!a->eos) {
            a->t->offsets[a->n_seqs] = a->n_ids;
            a->t->labels[a->n_seqs] = a->label;
        }
    }
    a->n_ids += n + (a->eos ? 1 : 0);
    if (!a->eos) a->n_seqs++;
}

dpt_status dpt_data_load_fortunes(dpt_fortunes_kind kind, const char *dir, dpt_split split, size_t seq_len,
                                  dpt_dataset *out) {
    static const char *F = "dpt_data_load_fortunes";
    DPT_CHECK(out, DPT_EINVAL, "%s: NULL out", F);
    memset(out, 0, sizeof *out);
    DPT_CHECK(kind == DPT_FORTUNES_TOPIC || kind == DPT_FORTUNES_CHARS, DPT_EINVAL, "%s: bad kind %d", F, (int)kind);
    DPT_CHECK(split == DPT_SPLIT_TRAIN || split == DPT_SPLIT_TEST, DPT_EINVAL, "%s: bad split %d", F, (int)split);
    if (!dir || !*dir) dir = DPT_FORTUNES_DIR;
    const int topic = kind == DPT_FORTUNES_TOPIC, test = split == DPT_SPLIT_TEST;
    if (!seq_len) seq_len = topic ? DPT_FORTUNES_TOPIC_SEQ_LEN : DPT_FORTUNES_CHARS_SEQ_LEN;
    DPT_CHECK(seq_len <= TOK_MAX_SEQ_LEN, DPT_EINVAL, "%s: seq_len %zu is above 2^20", F, seq_len);
    struct stat sb;
    DPT_CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode), DPT_EIO, "%s: no such directory: the fortunes corpus comes "
              "from the Debian package fortunes (apt-get install fortunes; scripts/setup.sh installs it)", dir);
    const char *const *names = topic ? FORTUNES_TOPICS : FORTUNES_FILES;
    const size_t n_files = topic ? DPT_FORTUNES_N_TOPICS : DPT_FORTUNES_N_FILES;
    uint8_t *buf[DPT_FORTUNES_N_FILES] = {0};
    size_t len[DPT_FORTUNES_N_FILES] = {0};
    dpt_status st = DPT_OK;
    char path[4096];
    for (size_t f = 0; st == DPT_OK && f < n_files; f++) {
        int k = snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        if (k < 0 || (size_t)k >= sizeof path) st = dpt_set_error(DPT_EINVAL, "%s: path too long: %s/%s", F, dir, names[f]);
        else if (stat(path, &sb) != 0)
            st = dpt_set_error(DPT_EIO, "%s: no such file: a topic file of the Debian package fortunes (apt-get install "
                               "fortunes); the corpus needs all %zu of its %s files", path, n_files,
                               topic ? "classification topic" : "topic");
        else st = dpt_data_read_maybe_gz(path, &buf[f], &len[f]);
    }
    dpt_tokens t;
    memset(&t, 0, sizeof t);
    entry_acc a = {.eos = !topic};
    for (int pass = 0; st == DPT_OK && pass < 2; pass++) { /* count, then fill */
        if (pass == 1) {
            if (!topic) a.n_seqs = 1;
            if (a.n_seqs == 0) {
                st = dpt_set_error(DPT_EFORMAT, "%s: no %s entries in the topic files", dir, test ? "test" : "training");
                break;
            }
            st = tokens_alloc(&t, a.n_seqs, a.n_ids, topic, dir);
            if (st != DPT_OK) break;
            a = (entry_acc){.t = &t, .eos = !topic};
        }
        for (size_t f = 0; f < n_files; f++) {
            a.label = (int)f;
            for_entries(buf[f], len[f], test, add_entry, &a);
        }
    }
    for (size_t f = 0; f < n_files; f++) free(buf[f]);
    if (st != DPT_OK) return st;
    t.offsets[0] = 0;
    t.offsets[t.n_seqs] = t.n_ids;
    t.vocab = DPT_TOK_BYTE_VOCAB;
    t.n_classes = topic ? DPT_FORTUNES_N_TOPICS : 0;
    snprintf(t.source, sizeof t.source, "%s (fortunes-%s, %s split)", dir, topic ? "topic" : "chars",
             test ? "test" : "training");
    st = topic ? dpt_tokens_classification(&t, seq_len, DPT_TOK_BYTE_PAD, out)
               : dpt_tokens_lm_windows(&t, seq_len, seq_len, out);
    dpt_tokens_free(&t);
    if (st == DPT_OK) st = dpt_dataset_validate(out);
    if (st != DPT_OK) dpt_dataset_free(out);
    return st;
}
