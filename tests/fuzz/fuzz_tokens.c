/* Fuzzes the token-id file reader ("DPTK", dpt_tokens_load) on files it did not write, then
 * the examples made from what it accepted (padded classification rows when labelled,
 * next-token windows) with lengths taken from the input, and the UTF-8 character tokenizer
 * on the same bytes. Whatever loads must satisfy the format's promises (offsets from 0 to
 * n_ids, ids < vocab, labels < n_classes) and every dataset made from it must pass
 * dpt_dataset_validate. Seeds: files written by dpt_tokens_save. */
#include <dptrain/data.h>

#include "fuzz_util.h"

static void check_tokens(const dpt_tokens *t) {
    if (t->offsets[0] != 0 || t->offsets[t->n_seqs] != t->n_ids || t->vocab < 1 || t->vocab > DPT_TOK_MAX_VOCAB) abort();
    for (size_t s = 0; s < t->n_seqs; s++) {
        if (t->offsets[s] > t->offsets[s + 1]) abort();
        if (t->n_classes && (t->labels[s] < 0 || t->labels[s] >= t->n_classes)) abort();
    }
    for (size_t i = 0; i < t->n_ids; i++)
        if (t->ids[i] >= t->vocab) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_path("tok");
    fuzz_write(p, data, size);
    dpt_tokens t;
    if (dpt_tokens_load(p, &t) == DPT_OK) {
        check_tokens(&t);
        const size_t T = 1 + (size ? data[size - 1] % 16 : 0), stride = 1 + (size > 1 ? data[size - 2] % 4 : 0);
        dpt_dataset d;
        if (t.n_classes && dpt_tokens_classification(&t, T, DPT_TOK_BYTE_PAD, &d) == DPT_OK) {
            if (dpt_dataset_validate(&d) != DPT_OK || d.n != t.n_seqs) abort();
            dpt_dataset_free(&d);
        }
        if (dpt_tokens_lm_windows(&t, T, stride, &d) == DPT_OK) {
            if (dpt_dataset_validate(&d) != DPT_OK || d.n_classes != (int)t.vocab) abort();
            dpt_dataset_free(&d);
        }
        dpt_tokens_free(&t);
    } else if (t.ids || t.offsets || t.labels || t.n_ids) {
        abort(); /* a refused file leaves *out zeroed */
    }
    unlink(p);
    /* the same bytes as UTF-8 text */
    dpt_char_vocab v;
    if (dpt_char_vocab_build(data, size, &v) == DPT_OK) {
        uint32_t *ids = malloc((size ? size : 1) * sizeof *ids);
        size_t n = 0;
        if (!ids || dpt_char_vocab_encode(&v, data, size, ids, &n) != DPT_OK || n > size) abort();
        for (size_t i = 0; i < n; i++) /* every character of the text is in its own vocabulary */
            if (ids[i] < DPT_TOK_CHAR_FIRST || ids[i] >= DPT_TOK_CHAR_FIRST + v.n_chars) abort();
        free(ids);
        dpt_char_vocab_free(&v);
    }
    return 0;
}

static void fuzz_seeds(const char *dir) {
    uint32_t ids[12] = {1, 2, 3, 250, 251, 0, 7, 8, 9, 10, 11, 12};
    size_t off[4] = {0, 3, 5, 12};
    int32_t lab[3] = {0, 2, 1};
    dpt_tokens t = {.n_seqs = 3, .n_ids = 12, .vocab = 258, .n_classes = 3, .ids = ids, .offsets = off, .labels = lab};
    char p[1024];
    snprintf(p, sizeof p, "%s/labelled.tok", dir);
    if (dpt_tokens_save(p, &t) != DPT_OK) abort();
    t.n_classes = 0, t.labels = NULL, t.vocab = 100000; /* 4-byte ids, unlabelled */
    snprintf(p, sizeof p, "%s/stream.tok", dir);
    if (dpt_tokens_save(p, &t) != DPT_OK) abort();
    static const char utf8[] = "h\xc3\xa9llo \xe2\x82\xac\xf0\x9f\x98\x80";
    fuzz_seed(dir, "utf8", utf8, sizeof utf8 - 1);
}
