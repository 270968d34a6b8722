/* Text data: the byte and UTF-8 character tokenizers, token-id files (round trip, gzip,
 * every malformed header and body refused naming the file), padded/truncated classification
 * rows, next-token windows, and the fortunes loader on a corpus written here (entry parsing,
 * a deterministic and disjoint split, missing package or file) and, when the Debian package
 * is installed, on the real one. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "dptrain/data.h"
#include "testutil.h"

static const char *tpath(const char *name) {
    static char buf[8][512];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tu_tmpdir(), name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

/* ==== Tokenizers ==== */

static void test_bytes(void) {
    const char *s = "a\xc3\xa9\n"; /* "aé\n" */
    uint32_t ids[4];
    dpt_tokenize_bytes((const uint8_t *)s, 4, ids);
    CHECK(ids[0] == 97 && ids[1] == 195 && ids[2] == 169 && ids[3] == 10);
    CHECK(DPT_TOK_BYTE_PAD == 256 && DPT_TOK_BYTE_EOS == 257 && DPT_TOK_BYTE_VOCAB == 258);
}

static void test_chars(void) {
    /* "héllo wörld €😀": 1-, 2-, 3- and 4-byte characters */
    const char *s = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x82\xac\xf0\x9f\x98\x80";
    dpt_char_vocab v;
    CHECK_OK(dpt_char_vocab_build((const uint8_t *)s, strlen(s), &v));
    /* distinct: ' ' d e? no: h, é, l, o, ' ', w, ö, r, d, €, 😀 -> sorted code points */
    const uint32_t want[] = {' ', 'd', 'h', 'l', 'o', 'r', 'w', 0xE9, 0xF6, 0x20AC, 0x1F600};
    CHECK(v.n_chars == sizeof want / sizeof want[0]);
    for (size_t i = 0; i < v.n_chars && i < sizeof want / sizeof want[0]; i++) CHECK(v.chars[i] == want[i]);
    uint32_t ids[64];
    size_t n = 0;
    CHECK_OK(dpt_char_vocab_encode(&v, (const uint8_t *)s, strlen(s), ids, &n));
    CHECK(n == 14);
    CHECK(ids[0] == DPT_TOK_CHAR_FIRST + 2); /* h */
    CHECK(ids[1] == DPT_TOK_CHAR_FIRST + 7); /* é */
    CHECK(ids[12] == DPT_TOK_CHAR_FIRST + 9 && ids[13] == DPT_TOK_CHAR_FIRST + 10); /* €, 😀 */
    /* a character outside the vocabulary is UNK */
    CHECK_OK(dpt_char_vocab_encode(&v, (const uint8_t *)"hz\xc3\xa9", 4, ids, &n));
    CHECK(n == 3 && ids[0] == DPT_TOK_CHAR_FIRST + 2 && ids[1] == DPT_TOK_CHAR_UNK && ids[2] == DPT_TOK_CHAR_FIRST + 7);
    dpt_char_vocab_free(&v);
    dpt_char_vocab_free(&v); /* twice: zeroed */
    dpt_char_vocab_free(NULL);
    /* invalid UTF-8, each naming the byte offset */
    static const struct {
        const char *s;
        size_t n;
        const char *msg;
    } bad[] = {
        {"ab\x80", 3, "at byte 2: 0x80 cannot start"},              /* lone continuation */
        {"a\xc0\x80", 3, "at byte 1: 0xc0 cannot start"},            /* overlong NUL */
        {"\xe0\x80\xaf", 3, "at byte 0: byte 2 of the character is 0x80"}, /* overlong 3-byte */
        {"x\xed\xa0\x80", 4, "at byte 1: byte 2 of the character is 0xa0"}, /* surrogate U+D800 */
        {"\xf4\x90\x80\x80", 4, "byte 2 of the character is 0x90"},  /* above U+10FFFF */
        {"ok\xe2\x82", 4, "at byte 2: a 3-byte character cut off"},  /* truncated */
        {"\xc3(", 2, "byte 2 of the character is 0x28"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(dpt_char_vocab_build((const uint8_t *)bad[i].s, bad[i].n, &v), DPT_EFORMAT);
        CHECK_ERR_HAS(bad[i].msg);
        CHECK(v.chars == NULL && v.n_chars == 0);
    }
    CHECK_OK(dpt_char_vocab_build((const uint8_t *)"ab", 2, &v));
    CHECK_STATUS(dpt_char_vocab_encode(&v, (const uint8_t *)"a\xff", 2, ids, &n), DPT_EFORMAT);
    CHECK_ERR_HAS("at byte 1");
    dpt_char_vocab_free(&v);
    CHECK_OK(dpt_char_vocab_build(NULL, 0, &v)); /* empty text: empty vocabulary */
    CHECK(v.n_chars == 0);
    dpt_char_vocab_free(&v);
}

/* ==== Token-id files ==== */

/* 3 sequences of lengths 2, 5, 3 (ids 10 * s + j, scaled into [0, vocab)), labels 1, 0, 2 */
static void make_tokens(dpt_tokens *t, uint32_t vocab, int labelled) {
    memset(t, 0, sizeof *t);
    static const size_t len[3] = {2, 5, 3};
    t->n_seqs = 3, t->n_ids = 10, t->vocab = vocab, t->n_classes = labelled ? 3 : 0;
    t->ids = dpt_alloc(10, sizeof(uint32_t), "ids");
    t->offsets = dpt_alloc(4, sizeof(size_t), "offsets");
    t->labels = labelled ? dpt_alloc(3, sizeof(int32_t), "labels") : NULL;
    size_t k = 0;
    for (size_t s = 0; s < 3; s++) {
        t->offsets[s] = k;
        for (size_t j = 0; j < len[s]; j++, k++) t->ids[k] = (uint32_t)((10 * s + j) * (vocab / 32) % vocab);
        if (labelled) t->labels[s] = (int32_t)((s + 1) % 3);
    }
    t->offsets[3] = k;
}

static int same_tokens(const dpt_tokens *a, const dpt_tokens *b) {
    if (a->n_seqs != b->n_seqs || a->n_ids != b->n_ids || a->vocab != b->vocab || a->n_classes != b->n_classes) return 0;
    if (memcmp(a->ids, b->ids, a->n_ids * sizeof(uint32_t)) || memcmp(a->offsets, b->offsets, (a->n_seqs + 1) * sizeof(size_t)))
        return 0;
    return !a->n_classes || !memcmp(a->labels, b->labels, a->n_seqs * sizeof(int32_t));
}

static uint8_t file_buf[4096];
static size_t file_len;

static void read_back(const char *path) {
    FILE *f = fopen(path, "rb");
    file_len = f ? fread(file_buf, 1, sizeof file_buf, f) : 0;
    if (f) fclose(f);
}
static void put32(uint8_t *p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}

/* Writes file_buf with one edit applied and expects the loader to refuse it. */
static void expect_bad(const char *name, const uint8_t *b, size_t n, const char *msg) {
    const char *p = tpath(name);
    write_bytes(p, b, n);
    dpt_tokens t;
    memset(&t, 0xAB, sizeof t);
    CHECK_STATUS(dpt_tokens_load(p, &t), DPT_EFORMAT);
    CHECK_ERR_HAS(p); /* names the file */
    CHECK_ERR_HAS(msg);
    CHECK(t.ids == NULL && t.offsets == NULL && t.labels == NULL && t.n_ids == 0);
}

static void test_format(void) {
    dpt_tokens a, b;
    /* round trip, 2-byte ids with labels, 4-byte ids without */
    make_tokens(&a, 300, 1);
    CHECK_OK(dpt_tokens_save(tpath("a.tok"), &a));
    read_back(tpath("a.tok"));
    CHECK(file_len == 40 + 3 * 8 + 10 * 2);
    CHECK(!memcmp(file_buf, "DPTK", 4) && file_buf[8] == 2);
    CHECK_OK(dpt_tokens_load(tpath("a.tok"), &b));
    CHECK(same_tokens(&a, &b));
    CHECK(strstr(b.source, "a.tok") != NULL);
    dpt_tokens_free(&b);
    /* gzip-compressed copy */
    gzFile g = gzopen(tpath("a.tok.gz"), "wb");
    CHECK(g && gzwrite(g, file_buf, (unsigned)file_len) == (int)file_len);
    gzclose(g);
    CHECK_OK(dpt_tokens_load(tpath("a.tok.gz"), &b));
    CHECK(same_tokens(&a, &b));
    dpt_tokens_free(&b);
    dpt_tokens_free(&a);
    make_tokens(&a, 70000, 0);
    CHECK_OK(dpt_tokens_save(tpath("b.tok"), &a));
    read_back(tpath("b.tok"));
    CHECK(file_len == 40 + 3 * 4 + 10 * 4 && file_buf[8] == 4);
    CHECK_OK(dpt_tokens_load(tpath("b.tok"), &b));
    CHECK(same_tokens(&a, &b) && b.labels == NULL);
    dpt_tokens_free(&b);
    /* save refuses an inconsistent struct and writes nothing */
    a.ids[4] = 70000;
    CHECK_STATUS(dpt_tokens_save(tpath("c.tok"), &a), DPT_EINVAL);
    CHECK_ERR_HAS("id 70000 at position 4");
    struct stat sb;
    CHECK(stat(tpath("c.tok"), &sb) != 0);
    dpt_tokens_free(&a);
    dpt_tokens_free(&a);
    dpt_tokens_free(NULL);

    /* malformed files, each refused naming the file */
    make_tokens(&a, 300, 1);
    CHECK_OK(dpt_tokens_save(tpath("good.tok"), &a));
    dpt_tokens_free(&a);
    read_back(tpath("good.tok"));
    uint8_t m[4096];
    const size_t n = file_len;
    expect_bad("short.tok", file_buf, 39, "truncated token-id header (39 bytes");
    expect_bad("empty.tok", file_buf, 0, "truncated token-id header (0 bytes");
    memcpy(m, file_buf, n), m[3] = 'X';
    expect_bad("magic.tok", m, n, "bad magic 44 50 54 58, expected \"DPTK\"");
    memcpy(m, file_buf, n), put32(m + 4, 2);
    expect_bad("version.tok", m, n, "version 2, this library reads version 1");
    memcpy(m, file_buf, n), put32(m + 8, 3);
    expect_bad("width.tok", m, n, "id width 3 bytes");
    memcpy(m, file_buf, n), put32(m + 12, 0);
    expect_bad("vocab0.tok", m, n, "vocabulary size 0 is outside [1, 2^24]");
    memcpy(m, file_buf, n), put32(m + 12, (1u << 24) + 1);
    expect_bad("vocabbig.tok", m, n, "outside [1, 2^24]");
    memcpy(m, file_buf, n), put32(m + 12, 100);
    expect_bad("idrange.tok", m, n, "id 108 at position 4 (sequence 1) is outside the vocabulary [0, 100)");
    memcpy(m, file_buf, n), put32(m + 12, 108); /* the boundary: id == vocab */
    expect_bad("idedge.tok", m, n, "id 108 at position 4 (sequence 1) is outside the vocabulary [0, 108)");
    memcpy(m, file_buf, n), put32(m + 40 + 12 + 4, 3);
    expect_bad("label.tok", m, n, "label 3 of sequence 1 is outside [0, 3)");
    memcpy(m, file_buf, n), put32(m + 40, 3);
    expect_bad("lengths.tok", m, n, "sum to more than n_ids = 10");
    memcpy(m, file_buf, n), put32(m + 40, 1);
    expect_bad("lengths2.tok", m, n, "sum to 9, the header says n_ids = 10");
    expect_bad("body.tok", file_buf, n - 1, "truncated: the header announces 3 sequences and 10 ids");
    memcpy(m, file_buf, n), m[n] = 0;
    expect_bad("trail.tok", m, n + 1, "1 trailing bytes");
    memcpy(m, file_buf, n), m[24] = 0xFF, m[31] = 0xFF; /* n_seqs near 2^64: no allocation from it */
    expect_bad("huge.tok", m, n, "truncated: the header announces");
    memcpy(m, file_buf, n), put32(m + 20, 1);
    expect_bad("reserved.tok", m, n, "reserved header field is 1");
    memcpy(m, file_buf, n), put32(m + 24, 0);
    expect_bad("noseq.tok", m, n, "no sequences");
    CHECK_STATUS(dpt_tokens_load(tpath("missing.tok"), &b), DPT_EIO);
    CHECK_ERR_HAS("missing.tok");
}

/* ==== Examples ==== */

static void test_examples(void) {
    dpt_tokens t;
    make_tokens(&t, 32, 1); /* ids 10 s + j: (0 1) (10 11 12 13 14) (20 21 22) */
    dpt_dataset d;
    CHECK_OK(dpt_tokens_classification(&t, 3, 31, &d));
    CHECK(d.n == 3 && d.dim == 3 && d.n_classes == 3 && d.shape[2] == 3);
    const float want[9] = {0, 1, 31, 10, 11, 12, 20, 21, 22}; /* padded, truncated, exact */
    for (int i = 0; i < 9; i++) CHECK(d.x[i] == want[i]);
    CHECK(d.y[0] == 1 && d.y[1] == 2 && d.y[2] == 0);
    CHECK_OK(dpt_dataset_validate(&d));
    dpt_dataset_free(&d);
    CHECK_OK(dpt_tokens_classification(&t, 7, 0, &d));
    CHECK(d.x[7 + 4] == 14 && d.x[7 + 5] == 0 && d.x[6] == 0 && d.x[2] == 0);
    dpt_dataset_free(&d);
    CHECK_STATUS(dpt_tokens_classification(&t, 0, 0, &d), DPT_EINVAL);
    CHECK_ERR_HAS("seq_len 0");
    CHECK_STATUS(dpt_tokens_classification(&t, 3, 1u << 24, &d), DPT_EINVAL);
    CHECK_ERR_HAS("pad id 16777216");
    /* next-token windows: T = 2, stride 2: (10 11 -> 12) (12 13 -> 14) (20 21 -> 22); the
     * first sequence (2 ids) has none */
    CHECK_OK(dpt_tokens_lm_windows(&t, 2, 2, &d));
    CHECK(d.n == 3 && d.dim == 2 && d.n_classes == 32);
    CHECK(d.x[0] == 10 && d.x[1] == 11 && d.y[0] == 12);
    CHECK(d.x[2] == 12 && d.x[3] == 13 && d.y[1] == 14);
    CHECK(d.x[4] == 20 && d.x[5] == 21 && d.y[2] == 22);
    dpt_dataset_free(&d);
    CHECK_OK(dpt_tokens_lm_windows(&t, 1, 1, &d)); /* every next id: 1 + 4 + 2 */
    CHECK(d.n == 7 && d.y[0] == 1 && d.y[6] == 22);
    dpt_dataset_free(&d);
    CHECK_STATUS(dpt_tokens_lm_windows(&t, 5, 1, &d), DPT_EINVAL);
    CHECK_ERR_HAS("has more than seq_len = 5 ids");
    CHECK(d.x == NULL);
    dpt_tokens_free(&t);
    make_tokens(&t, 32, 0);
    CHECK_STATUS(dpt_tokens_classification(&t, 3, 0, &d), DPT_EINVAL);
    CHECK_ERR_HAS("has no labels");
    dpt_tokens_free(&t);
}

/* ==== fortunes ==== */

static const char *const FILES[] = {
    "art", "ascii-art", "computers", "cookie", "debian", "definitions", "disclaimer", "drugs", "education",
    "ethnic", "food", "fortunes", "goedel", "humorists", "kids", "knghtbrd", "law", "linux", "linuxcookie",
    "literature", "love", "magic", "medicine", "men-women", "miscellaneous", "news", "paradoxum", "people",
    "perl", "pets", "platitudes", "politics", "pratchett", "riddles", "science", "songs-poems", "sports",
    "startrek", "tao", "translate-me", "wisdom", "work", "zippy"};
#define N_FILES (sizeof FILES / sizeof FILES[0])

/* DIR/fortunes/<file>: 40 entries "<file> quote k\nsecond line" each, separated by "%"
 * lines; an empty entry ("%\n%") and a last entry without a closing "%" */
static void make_corpus(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/fortunes", dir);
    mkdir(dir, 0700);
    mkdir(p, 0700);
    for (size_t f = 0; f < N_FILES; f++) {
        static char text[8192];
        size_t k = 0;
        for (int e = 0; e < 40; e++) {
            k += (size_t)snprintf(text + k, sizeof text - k, "%s quote %d\n\tsecond line%s\n", FILES[f], e,
                                  e == 39 ? "" : "\n%");
            if (e == 5) k += (size_t)snprintf(text + k, sizeof text - k, "%%\n"); /* an empty entry */
        }
        snprintf(p, sizeof p, "%s/fortunes/%s", dir, FILES[f]);
        write_bytes(p, text, k);
    }
}

static int row_equal(const dpt_dataset *a, size_t i, const dpt_dataset *b, size_t j) {
    return !memcmp(a->x + i * a->dim, b->x + j * b->dim, a->dim * sizeof(float));
}

static void test_fortunes(void) {
    const char *dir = tpath("corpus");
    make_corpus(dir);
    char fd[600];
    snprintf(fd, sizeof fd, "%s/fortunes", dir);
    dpt_dataset tr, te, again;
    CHECK_OK(dpt_data_load_fortunes(DPT_FORTUNES_TOPIC, fd, DPT_SPLIT_TRAIN, 32, &tr));
    CHECK_OK(dpt_data_load_fortunes(DPT_FORTUNES_TOPIC, fd, DPT_SPLIT_TEST, 32, &te));
    /* every entry once: 40 per topic file, the empty one dropped */
    CHECK(tr.n + te.n == 40 * DPT_FORTUNES_N_TOPICS);
    CHECK(te.n > 40 * DPT_FORTUNES_N_TOPICS / 10 && te.n < 40 * DPT_FORTUNES_N_TOPICS * 3 / 10); /* about 20% */
    CHECK(tr.n_classes == DPT_FORTUNES_N_TOPICS && tr.dim == 32);
    /* disjoint: all entries differ, so no test row equals a training row */
    int shared = 0;
    for (size_t i = 0; i < te.n; i++)
        for (size_t j = 0; j < tr.n; j++) shared += row_equal(&te, i, &tr, j);
    CHECK(shared == 0);
    /* deterministic: a second load is identical */
    CHECK_OK(dpt_data_load_fortunes(DPT_FORTUNES_TOPIC, fd, DPT_SPLIT_TEST, 32, &again));
    CHECK(again.n == te.n && !memcmp(again.x, te.x, te.n * te.dim * sizeof(float)) &&
          !memcmp(again.y, te.y, te.n * sizeof(int32_t)));
    dpt_dataset_free(&again);
    /* the first training row of topic 0 ("art"): its bytes, no newline before the "%",
     * and padding after; the label is the topic's index */
    CHECK(!strcmp(dpt_fortunes_topic(0), "art") && !strcmp(dpt_fortunes_topic(19), "zippy"));
    CHECK(dpt_fortunes_topic(20) == NULL && dpt_fortunes_topic(-1) == NULL);
    const char *want = "art quote ";
    for (size_t j = 0; j < strlen(want); j++) CHECK(tr.x[j] == (float)(unsigned char)want[j]);
    CHECK(tr.y[0] == 0);
    size_t len = 0; /* "art quote K\n\tsecond line" is 23 or 24 bytes */
    while (len < 32 && tr.x[len] != (float)DPT_TOK_BYTE_PAD) len++;
    CHECK(len == 24 || len == 23);
    CHECK(tr.x[len - 1] == 'e' && tr.x[len - 12] == '\t');
    /* truncation at T = 8 keeps the first 8 bytes */
    dpt_dataset s8;
    CHECK_OK(dpt_data_load_fortunes(DPT_FORTUNES_TOPIC, fd, DPT_SPLIT_TRAIN, 8, &s8));
    CHECK(s8.n == tr.n && s8.dim == 8);
    for (size_t j = 0; j < 8; j++) CHECK(s8.x[j] == tr.x[j]);
    dpt_dataset_free(&s8);
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);

    /* character windows: all 43 files; every training window's label is the id after it */
    CHECK_OK(dpt_data_load_fortunes(DPT_FORTUNES_CHARS, fd, DPT_SPLIT_TRAIN, 16, &tr));
    CHECK_OK(dpt_data_load_fortunes(DPT_FORTUNES_CHARS, fd, DPT_SPLIT_TEST, 16, &te));
    CHECK(tr.dim == 16 && tr.n_classes == (int)DPT_TOK_BYTE_VOCAB);
    for (size_t i = 0; i + 1 < tr.n; i++) CHECK(tr.y[i] == (int32_t)tr.x[(i + 1) * 16]); /* stride T */
    int eos = 0;
    for (size_t i = 0; i < tr.n * 16; i++) eos += tr.x[i] == (float)DPT_TOK_BYTE_EOS;
    CHECK(eos > 0);
    /* ids in total: each entry's bytes + EOS; 40 entries per file of 21..28 bytes */
    CHECK((tr.n + te.n) * 16 > N_FILES * 40 * 20 && (tr.n + te.n) * 16 < N_FILES * 40 * 30);
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);

    /* through dpt_data_load: DIR/fortunes/ is used, NAME:T sets T */
    CHECK_OK(dpt_data_load("fortunes-topic:4", dir, DPT_SPLIT_TRAIN, &tr));
    CHECK(tr.dim == 4 && tr.n_classes == DPT_FORTUNES_N_TOPICS);
    dpt_dataset_free(&tr);
    CHECK_OK(dpt_data_load("fortunes-chars:5", dir, DPT_SPLIT_TEST, &tr));
    CHECK(tr.dim == 5);
    dpt_dataset_free(&tr);
    static const char *bad_names[] = {"fortunes-topic:", "fortunes-topic:0", "fortunes-topic:x", "fortunes-chars:5x",
                                      "fortunes-topic:-3", "fortunes-chars:1048577"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        CHECK_STATUS(dpt_data_load(bad_names[i], dir, DPT_SPLIT_TRAIN, &tr), DPT_EINVAL);
        CHECK_ERR_HAS("with a sequence length T in [1, 2^20]");
    }

    /* a missing topic file, a missing directory */
    char p[700];
    snprintf(p, sizeof p, "%s/zippy", fd);
    CHECK(remove(p) == 0);
    CHECK_STATUS(dpt_data_load_fortunes(DPT_FORTUNES_TOPIC, fd, DPT_SPLIT_TRAIN, 0, &tr), DPT_EIO);
    CHECK_ERR_HAS(p);
    CHECK_ERR_HAS("apt-get install fortunes");
    CHECK(tr.x == NULL);
    CHECK_STATUS(dpt_data_load_fortunes(DPT_FORTUNES_CHARS, tpath("nowhere"), DPT_SPLIT_TRAIN, 0, &tr), DPT_EIO);
    CHECK_ERR_HAS("nowhere: no such directory");
    CHECK_ERR_HAS("Debian package fortunes");
}

/* The installed package (skipped without it): sizes as docs/data.md states them. */
static void test_fortunes_real(void) {
    struct stat sb;
    if (stat(DPT_FORTUNES_DIR "/zippy", &sb) != 0) {
        printf("note: %s not installed (apt-get install fortunes): real-corpus checks skipped\n", DPT_FORTUNES_DIR);
        return;
    }
    dpt_dataset tr, te;
    CHECK_OK(dpt_data_load_fortunes(DPT_FORTUNES_TOPIC, NULL, DPT_SPLIT_TRAIN, 0, &tr));
    CHECK_OK(dpt_data_load_fortunes(DPT_FORTUNES_TOPIC, NULL, DPT_SPLIT_TEST, 0, &te));
    CHECK(tr.n == 8601 && te.n == 2101 && tr.dim == DPT_FORTUNES_TOPIC_SEQ_LEN);
    int min_count = 1 << 30, count[DPT_FORTUNES_N_TOPICS] = {0};
    for (size_t i = 0; i < tr.n; i++) count[tr.y[i]]++;
    for (int k = 0; k < DPT_FORTUNES_N_TOPICS; k++) min_count = count[k] < min_count ? count[k] : min_count;
    CHECK(min_count >= 150); /* every topic has enough training entries */
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);
    CHECK_OK(dpt_data_load_fortunes(DPT_FORTUNES_CHARS, NULL, DPT_SPLIT_TRAIN, 0, &tr));
    CHECK(tr.n == 32116 && tr.dim == DPT_FORTUNES_CHARS_SEQ_LEN);
    dpt_dataset_free(&tr);
}

int main(void) {
    test_bytes();
    test_chars();
    test_format();
    test_examples();
    test_fortunes();
    test_fortunes_real();
    TEST_MAIN_END();
}
