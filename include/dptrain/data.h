/* data: datasets in memory (features float32 [n, dim] row-major, labels int32), loaders for
 * IDX (MNIST, Fashion-MNIST), CIFAR-10 binary, USPS, numeric CSV and token-id files (all
 * gzip-aware through zlib, detected by magic bytes), byte and character tokenizers, the
 * fortunes text corpus, normalization fitted on the training split, class
 * filtering, and batch samplers (shuffle, Poisson, Poisson with rejection, full batch).
 * Memory: a dpt_dataset / dpt_normalizer owns its arrays (free with *_free); samplers are
 * opaque handles (dpt_sampler_new / dpt_sampler_free).
 * Thread safety: loaders are reentrant; a dataset may be read (gather) from many threads;
 * a sampler is used by one thread at a time.
 * Errors: DPT_EIO / DPT_EFORMAT naming the file (and line, column or example), DPT_EINVAL
 * naming the parameter and the first bad index for in-memory data, DPT_ENOMEM. */
#ifndef DPTRAIN_DATA_H
#define DPTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/core.h"

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

/* ==== Datasets ==== */

/* A dataset is either for classification (y: int32 labels, n_classes >= 1, t NULL), for
 * regression (t: real-valued targets [n, t_dim], t_dim >= 1, y NULL and n_classes 0), or
 * unlabelled, features alone for prediction (y and t NULL, n_classes 0, t_dim 0:
 * dpt_data_load_csv_features; training, evaluation and the audit refuse it).
 * Regression data are trained with the squared-error loss (DPT_LOSS_SQUARED) against t by
 * the algorithms that opt in (dpt_algo.regression: sgd, dpsgd, pdp-sgd). */
typedef struct {
    size_t n, dim;     /* examples, features per example (flattened) */
    float *x;          /* [n, dim] row-major, owned (dpt_alloc) */
    int32_t *y;        /* [n] labels in [0, n_classes), owned (dpt_alloc); NULL for regression */
    int n_classes;     /* 0 for regression */
    size_t shape[3];   /* per-example (C, H, W); for flat data (1, 1, dim) */
    char source[512];  /* file(s) it came from, for messages */
    float *t;          /* [n, t_dim] regression targets, owned (dpt_alloc); NULL for classification */
    size_t t_dim;      /* targets per example (regression), 0 for classification */
} dpt_dataset;

/* Frees x, y and t and zeroes *d. Accepts NULL. */
void dpt_dataset_free(dpt_dataset *d);

/* A dataset from the caller's arrays: x [n, dim] row-major float32 features and y [n]
 * int32 labels. Both are COPIED (the caller keeps ownership of its arrays and may free
 * them right after the call); *out owns the copies (dpt_dataset_free). n_classes >= 1
 * fixes the number of classes; 0 means max(y) + 1. The per-example shape is (1, 1, dim):
 * call dpt_dataset_set_shape for image data read by convolutional models.
 * Everything is checked before anything is allocated; on error *out is zeroed and:
 *   DPT_EINVAL  x, y or out NULL; n or dim 0; n_classes < 0; a label outside
 *               [0, n_classes) (the message names the first, "y[17] = 12 is outside
 *               [0, 10)"); a NaN or infinite feature (the first, "x[1234] (example 12,
 *               feature 34)")
 *   DPT_ENOMEM  n * dim overflows, or the copies cannot be allocated. */
dpt_status dpt_dataset_from_arrays(const float *x, const int32_t *y, size_t n, size_t dim, int n_classes,
                                   dpt_dataset *out);
/* A regression dataset from the caller's arrays: x [n, dim] features and t [n, t_dim]
 * real-valued targets, both row-major float32 and COPIED (as dpt_dataset_from_arrays).
 * The model trained on it needs t_dim outputs, the loss DPT_LOSS_SQUARED (per example
 * 0.5 ||f(x) - t||^2) and an algorithm that supports regression (sgd, dpsgd, pdp-sgd).
 * Errors (*out zeroed): DPT_EINVAL x, t or out NULL; n, dim or t_dim 0; a NaN or infinite
 * feature or target (the first, "t[12] (example 6, target 0)"); DPT_ENOMEM as above. */
dpt_status dpt_dataset_from_targets(const float *x, const float *t, size_t n, size_t dim, size_t t_dim,
                                    dpt_dataset *out);
/* Sets the per-example shape (C, H, W) that convolutional models read; the features are
 * not moved (each example is C planes of H x W row-major values). c, h, w >= 1 and
 * c * h * w == d->dim, else DPT_EINVAL (d unchanged). */
dpt_status dpt_dataset_set_shape(dpt_dataset *d, size_t c, size_t h, size_t w);

/* Loaders. Every loader reads .gz or raw files (gzip detected by its magic bytes 1f 8b,
 * not by the name; concatenated gzip members are accepted), fills *out (which is
 * overwritten, not freed: pass a zeroed or freed struct) and validates it. On error *out
 * is left zeroed and the message names the file and what is wrong.
 * Errors: DPT_EIO missing/unreadable file; DPT_EFORMAT bad magic, truncated file or gzip
 * stream, dimension mismatch, label out of range, non-finite or out-of-range value;
 * DPT_ENOMEM sizes that overflow or cannot be allocated. */

/* IDX (MNIST family): images magic 2051 (uint8, [n, rows, cols]), labels magic 2049
 * (uint8, [n]). Pixels scaled to [0, 1] (/255). Labels must be 0..9 (n_classes = 10).
 * shape = (1, rows, cols). */
dpt_status dpt_data_load_idx(const char *images_path, const char *labels_path,
                             dpt_dataset *out);
/* CIFAR-10 binary batches concatenated in the given order: records of 1 label byte (0..9)
 * + 3072 pixel bytes (R, G, B planes, each 32x32 row-major). Pixels /255, shape
 * (3, 32, 32) planar, n_classes = 10. */
dpt_status dpt_data_load_cifar10(const char *const *paths, size_t n_paths, dpt_dataset *out);
/* USPS (ESL zip.train / zip.test): one example per line, a label (0..9, written e.g.
 * "6.0000") then 256 grey values in [-1, 1], separated by white space. Values are kept as
 * they are (in [-1, 1]); shape (1, 16, 16), n_classes = 10. */
dpt_status dpt_data_load_usps(const char *path, dpt_dataset *out);
/* The pooled USPS split ("usps-pooled"): zip.train (7291) and zip.test (2007) concatenated
 * in that order (9298 images), permuted by a fixed Fisher-Yates shuffle (splitmix64 seeded
 * with DPT_USPS_POOLED_SEED; independent of every run seed), the first
 * DPT_USPS_POOLED_TRAIN of the permutation for training (train = 1) and the other 4298 for
 * testing (train = 0). */
#define DPT_USPS_POOLED_TRAIN 5000
#define DPT_USPS_POOLED_SEED 7u
dpt_status dpt_data_load_usps_pooled(const char *train_path, const char *test_path, int train, dpt_dataset *out);
/* Numeric CSV: label (a non-negative integer, e.g. "3" or "3.0") in the first column, then
 * the features; comma separated, optional header line (detected when its first field is
 * not a number), blank lines ignored, CRLF accepted. n_classes = max label + 1 (use
 * dpt_dataset_set_n_classes to align a test file with its training file).
 * NaN/Inf/empty/non-numeric field or a wrong field count: DPT_EFORMAT naming
 * file:line:column (1-based; column 1 is the label). shape (1, 1, dim). */
dpt_status dpt_data_load_csv(const char *path, dpt_dataset *out);
/* Numeric CSV for regression: the first t_dim columns (t_dim >= 1) are real-valued targets,
 * the rest the features; otherwise as dpt_data_load_csv (header, blank lines, CRLF, errors
 * naming file:line:column). Fills t / t_dim, y NULL, n_classes 0. */
dpt_status dpt_data_load_csv_targets(const char *path, size_t t_dim, dpt_dataset *out);
/* Numeric CSV of features alone, for prediction (an unlabelled dataset: y and t NULL,
 * n_classes 0, which training, evaluation and the audit refuse): the first `skip` columns
 * are left unread (e.g. 1 for a file with its label column, or ids and names in every
 * row), every other field must be a finite number; the first line is a header when its
 * first field after the skipped ones is not a number; otherwise as dpt_data_load_csv.
 * skip is below 1000000 (t_dim, above, at most 1000000). */
dpt_status dpt_data_load_csv_features(const char *path, size_t skip, dpt_dataset *out);

typedef enum { DPT_SPLIT_TRAIN = 0, DPT_SPLIT_TEST = 1 } dpt_split;

#define DPT_DEFAULT_DATA_DIR "/usr/share/datasets"
/* Loads a named dataset split. name: "mnist" | "fashion-mnist" | "usps" | "usps-pooled" | "cifar10" |
 * "fortunes-topic[:T]" | "fortunes-chars[:T]" (dpt_data_load_fortunes; T the sequence length,
 * default its DPT_FORTUNES_*_SEQ_LEN) |
 * "csv:PATH" (the same file for both splits) | "csv:TRAIN,TEST". data_dir NULL or "" means
 * DPT_DEFAULT_DATA_DIR. Layout under data_dir (each file raw or with .gz appended;
 * the .gz name is tried first):
 *   mnist/, fashion-mnist/: train-images-idx3-ubyte, train-labels-idx1-ubyte,
 *                           t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte
 *   usps/:    zip.train, zip.test ("usps-pooled": both, pooled and split 5000 / 4298;
 *             see dpt_data_load_usps_pooled)
 *   cifar10/: data_batch_1.bin .. data_batch_5.bin, test_batch.bin
 *   fortunes/: the topic files, read from DPT_FORTUNES_DIR when data_dir has no fortunes/
 * CSV paths are used as given (relative to the working directory).
 * A missing file is DPT_EIO naming the full path and suggesting data_dir; an unknown
 * name is DPT_EINVAL listing the known ones. */
dpt_status dpt_data_load(const char *name, const char *data_dir, dpt_split split,
                         dpt_dataset *out);
/* dpt_data_load for regression data: a csv: name whose files hold t_dim target columns
 * first (dpt_data_load_csv_targets). Other names are classification data: DPT_EINVAL. */
dpt_status dpt_data_load_targets(const char *name, const char *data_dir, dpt_split split, size_t t_dim,
                                 dpt_dataset *out);

/* Validation used by every loader: x all finite, labels in [0, n_classes) (regression:
 * targets all finite, y NULL, n_classes 0), sizes consistent (n * dim fits, shape product
 * == dim). DPT_EFORMAT naming d->source. */
dpt_status dpt_dataset_validate(const dpt_dataset *d);

/* Sets n_classes to k (k >= 1); DPT_EFORMAT if some label is >= k (e.g. a test CSV with a
 * class the training file does not have). DPT_EINVAL for a regression dataset. */
dpt_status dpt_dataset_set_n_classes(dpt_dataset *d, int k);

/* Keep only examples whose label is in classes[0..k) and relabel them 0..k-1 in that order
 * (e.g. CIFAR-10 {0 airplane, 1 automobile}). Order of examples is kept. classes must be
 * distinct and in [0, n_classes). DPT_EINVAL on bad classes, when nothing is left, or for a
 * regression dataset. */
dpt_status dpt_dataset_filter_classes(dpt_dataset *d, const int *classes, size_t k);
/* Keep the first n_first examples (1 <= n_first <= n, else DPT_EINVAL). */
dpt_status dpt_dataset_take(dpt_dataset *d, size_t n_first);
/* Gather rows idx[0..b) into x_out [b, dim] and y_out [b] (y_out may be NULL).
 * Indices must be < d->n: one that is not aborts the process (DPT_ASSERT; this copy runs
 * every step on a sampler's indices and returns no status). Callers holding indices of
 * their own check them first (dpt_audit_scores does). */
void dpt_dataset_gather(const dpt_dataset *d, const uint32_t *idx, size_t b, float *x_out,
                        int32_t *y_out);
/* Gather the targets of rows idx[0..b) into t_out [b, t_dim] (a regression dataset; a
 * classification dataset leaves t_out untouched). */
void dpt_dataset_gather_targets(const dpt_dataset *d, const uint32_t *idx, size_t b, float *t_out);
/* SHA-256 over (n, dim, shape[3], n_classes as uint64 little-endian, then x bytes, then y
 * bytes; a regression dataset: n_classes 0, x bytes, then t_dim as uint64 and t bytes);
 * used by checkpoints and the ledger to detect a different dataset on resume. */
dpt_status dpt_dataset_hash(const dpt_dataset *d, uint8_t out[32]);

/* ==== Text: token-id files, tokenizers, the fortunes corpus ====
 * Token ids are stored in a dataset's x as float32 values, one per position: an example of
 * T tokens is x [T] = (float)id, shape (1, 1, T). Every integer below 2^24 is exact in
 * float32, so vocabularies are limited to DPT_TOK_MAX_VOCAB ids. Models read the ids as
 * numbers (an MLP on them is a smoke test) or as indices (an embedding layer). The engine's
 * labels are one int32 per example, so a language-model example is a window of T ids and
 * the ONE id that follows it (a per-token loss needs T labels per example; docs/data.md). */
#define DPT_TOK_MAX_VOCAB (1u << 24)

/* Byte-level tokenizer (data-independent: the default for private runs): the id of each
 * byte of the text is its value 0..255 (UTF-8 text gives one id per byte, "é" -> 195, 169),
 * and two specials follow: DPT_TOK_BYTE_PAD pads short sequences, DPT_TOK_BYTE_EOS ends
 * an entry. Vocabulary DPT_TOK_BYTE_VOCAB = 258. ids [n] receives text [n]. */
#define DPT_TOK_BYTE_PAD 256u
#define DPT_TOK_BYTE_EOS 257u
#define DPT_TOK_BYTE_VOCAB 258u
void dpt_tokenize_bytes(const uint8_t *text, size_t n, uint32_t *ids);

/* Character-level tokenizer: Unicode code points decoded from UTF-8, id = DPT_TOK_CHAR_FIRST
 * + rank of the code point among the vocabulary's (increasing order); 0 pads, 1 is any
 * character outside the vocabulary, 2 ends an entry. Vocabulary size n_chars + 3.
 * PRIVACY: a vocabulary built from private text releases which characters occur in it,
 * a statistic no accountant covers. Build it from public text (or a fixed alphabet), or
 * use the byte tokenizer; a private run whose vocabulary comes from its training data
 * must say so (dpt_trainer_exclude_from_guarantee, as --normalize-unaccounted does). */
#define DPT_TOK_CHAR_PAD 0u
#define DPT_TOK_CHAR_UNK 1u
#define DPT_TOK_CHAR_EOS 2u
#define DPT_TOK_CHAR_FIRST 3u
typedef struct {
    size_t n_chars;  /* distinct code points */
    uint32_t *chars; /* [n_chars] increasing code points, owned (dpt_alloc) */
} dpt_char_vocab;
/* The code points of UTF-8 text [n] (n may be 0: an empty vocabulary). DPT_EFORMAT for
 * invalid UTF-8 (overlong forms, surrogates, code points above U+10FFFF, a truncated
 * sequence), naming the byte offset. *out is overwritten. */
dpt_status dpt_char_vocab_build(const uint8_t *text, size_t n, dpt_char_vocab *out);
/* Encodes UTF-8 text [n] into ids (capacity n: each character takes at least one byte);
 * *n_ids receives the count. Errors as dpt_char_vocab_build. */
dpt_status dpt_char_vocab_encode(const dpt_char_vocab *v, const uint8_t *text, size_t n, uint32_t *ids,
                                 size_t *n_ids);
void dpt_char_vocab_free(dpt_char_vocab *v); /* accepts NULL; zeroes it */

/* Token-id files ("DPTK", docs/data.md): a little-endian header of 40 bytes
 *   0 "DPTK"   4 u32 version (1)   8 u32 id width in bytes (2: uint16, 4: uint32)
 *   12 u32 vocab V (1..2^24; every id < V)   16 u32 n_classes (0: unlabelled)
 *   20 u32 reserved (0)   24 u64 n_seqs (>= 1)   32 u64 n_ids
 * then n_seqs u32 sequence lengths (summing to n_ids), then, when n_classes > 0, n_seqs
 * u32 labels (< n_classes <= 2^31 - 1), then the n_ids ids; nothing after. Gzip-compressed
 * files are read too. A language-model corpus is typically one long sequence. */
#define DPT_TOKENS_VERSION 1u
typedef struct {
    size_t n_seqs, n_ids;
    uint32_t vocab;    /* ids in [0, vocab) */
    int n_classes;     /* 0: no labels */
    uint32_t *ids;     /* [n_ids] all sequences back to back, owned (dpt_alloc) */
    size_t *offsets;   /* [n_seqs + 1]: sequence s is ids[offsets[s] .. offsets[s + 1]), owned */
    int32_t *labels;   /* [n_seqs] in [0, n_classes), owned; NULL when n_classes is 0 */
    char source[512];  /* file it came from, for messages */
} dpt_tokens;
/* Reads and validates a token-id file. DPT_EIO missing/unreadable; DPT_EFORMAT naming the
 * file: truncated header or body, wrong magic or version, bad width, vocab 0 or above 2^24,
 * lengths not summing to n_ids, a label >= n_classes, an id >= vocab (the first, "id 300
 * at position 17 (sequence 2) is outside the vocabulary [0, 258)"), trailing bytes. */
dpt_status dpt_tokens_load(const char *path, dpt_tokens *out);
/* Writes t in the format above (uint16 ids when vocab <= 65536, else uint32), atomically
 * (dpt_write_file_atomic). t is validated first (DPT_EINVAL, nothing written). */
dpt_status dpt_tokens_save(const char *path, const dpt_tokens *t);
void dpt_tokens_free(dpt_tokens *t); /* accepts NULL; zeroes it */
/* Classification examples: one per sequence, x [n_seqs, T] with each sequence's first T
 * ids (longer ones truncated) followed by pad_id up to T (shorter ones padded at the end),
 * y its label. T in [1, 2^20]; pad_id < 2^24; t must be labelled. DPT_EINVAL otherwise. */
dpt_status dpt_tokens_classification(const dpt_tokens *t, size_t seq_len, uint32_t pad_id, dpt_dataset *out);
/* Next-token examples: within each sequence, windows at offsets 0, stride, 2 stride, ...
 * while offset + T < its length: x = ids[offset .. offset + T), y = ids[offset + T],
 * n_classes = vocab. T in [1, 2^20], stride >= 1; DPT_EINVAL when no sequence is longer
 * than T. */
dpt_status dpt_tokens_lm_windows(const dpt_tokens *t, size_t seq_len, size_t stride, dpt_dataset *out);

/* The fortunes corpus (Debian package `fortunes`: quotations in topic files, entries
 * separated by lines holding only "%"), byte-tokenized. dir NULL or "" means
 * DPT_FORTUNES_DIR. Entries keep their text as is (without the newline before the "%");
 * empty ones are dropped. Split: an entry is a test entry when
 * splitmix64(fnv1a64(entry bytes)) % 5 == 0 (about 20%; equal texts fall on the same side).
 *   DPT_FORTUNES_TOPIC: topic classification over the DPT_FORTUNES_N_TOPICS topics of
 *     dpt_fortunes_topic (label = the topic's index), x = the entry's bytes truncated or
 *     padded with DPT_TOK_BYTE_PAD to seq_len (0: DPT_FORTUNES_TOPIC_SEQ_LEN).
 *   DPT_FORTUNES_CHARS: next-byte prediction over every topic file of the package
 *     (DPT_FORTUNES_N_FILES, alphabetical): the split's entries, each followed by
 *     DPT_TOK_BYTE_EOS, concatenated; windows of seq_len (0: DPT_FORTUNES_CHARS_SEQ_LEN)
 *     ids at stride seq_len, label = the next id (n_classes DPT_TOK_BYTE_VOCAB).
 * A missing directory or topic file is DPT_EIO naming it and the package. */
#define DPT_FORTUNES_DIR "/usr/share/games/fortunes"
#define DPT_FORTUNES_N_TOPICS 20
#define DPT_FORTUNES_N_FILES 43
#define DPT_FORTUNES_TOPIC_SEQ_LEN 256
#define DPT_FORTUNES_CHARS_SEQ_LEN 64
typedef enum { DPT_FORTUNES_TOPIC = 0, DPT_FORTUNES_CHARS = 1 } dpt_fortunes_kind;
dpt_status dpt_data_load_fortunes(dpt_fortunes_kind kind, const char *dir, dpt_split split, size_t seq_len,
                                  dpt_dataset *out);
/* Topic file name of label k in [0, DPT_FORTUNES_N_TOPICS), else NULL. Static string. */
const char *dpt_fortunes_topic(int k);

/* ==== Normalization ====
 * Statistics are fitted on the TRAINING split only, then applied to any split:
 * x <- (x - mean) / std. std is the population standard deviation (accumulated in
 * double); a std below 1e-12 (constant feature) is replaced by 1 so the feature becomes 0
 * rather than NaN. Privacy: statistics fitted here are a release of the training data that
 * no accountant covers; private training should use dpt_normalizer_public,
 * dpt_normalizer_from_values with constants known a priori, or the DP fit
 * dpt_dp_normalizer_fit (privacy.h) whose release goes into the ledger (docs/data.md). */
enum {
    DPT_NORM_SCALAR = 0,      /* one (mean, std) over all features: channels = 1 */
    DPT_NORM_PER_CHANNEL = 1, /* one (mean, std) per channel (shape[0]) over its H*W pixels */
    DPT_NORM_PER_FEATURE = 2  /* one (mean, std) per feature: channels = 0, arrays of dim */
};
typedef struct {
    size_t dim;       /* features per example it was fitted on */
    size_t channels;  /* number of (mean, std) pairs; 0 means per-feature (dim pairs) */
    float *mean, *std; /* [channels] (or [dim] when channels == 0), owned */
} dpt_normalizer;
/* per_channel: DPT_NORM_SCALAR (0), DPT_NORM_PER_CHANNEL (1) or DPT_NORM_PER_FEATURE (2). */
dpt_status dpt_normalizer_fit(const dpt_dataset *train, int per_channel, dpt_normalizer *out);
/* DPT_EINVAL when d->dim differs from the fitted dim (or the channel count does not divide
 * it). */
dpt_status dpt_normalizer_apply(const dpt_normalizer *nz, dpt_dataset *d);
void dpt_normalizer_free(dpt_normalizer *nz); /* accepts NULL; zeroes it */

/* Normalizers that use no statistic of the data they are applied to (the default of
 * private training, docs/data.md): */
/* The published per-channel constants of a named dataset (as dpt_data_load returns its
 * pixels): "mnist" 0.1307 / 0.3081, "fashion-mnist" 0.2860 / 0.3530, "usps" and
 * "usps-pooled" -0.4910 / 0.7692, "cifar10" (125.3, 123.0, 113.9) / 255 and
 * (63.0, 62.1, 66.7) / 255 per RGB channel; sources in docs/data.md. dim: features per
 * example (a multiple of the channel count). DPT_EINVAL for any other name (CSV data has
 * no published constants). *out is overwritten (pass a zeroed or freed struct). */
dpt_status dpt_normalizer_public(const char *dataset, size_t dim, dpt_normalizer *out);
/* A normalizer from k given (mean, std) pairs, copied: per_feature = 0: k channels over
 * contiguous runs of dim / k features (k divides dim); per_feature = 1: k == dim, one
 * pair per feature. mean finite, std finite and > 0, else DPT_EINVAL naming the index
 * (e.g. statistics read back from a checkpoint). */
dpt_status dpt_normalizer_from_values(size_t dim, const float *mean, const float *std, size_t k, int per_feature,
                                      dpt_normalizer *out);

/* ==== Samplers ====
 * Which examples form each batch. Each sampler owns a dpt_rng on stream DPT_STREAM_DATA.
 *   SHUFFLE: a fresh permutation per epoch (Fisher-Yates), fixed batch_size; the last
 *            batch of an epoch is kept partial (size n - (ceil(n/B) - 1) * B).
 *   POISSON: each example included independently with probability q (a 53-bit uniform
 *            compared with q); |B| is Binomial(n, q): may be 0 or larger than q n, and the
 *            returned count is exact (never truncated).
 *   FULL:    all n examples, in order, every step.
 *   POISSON_REJECT: Poisson(q) redrawn while |B| < min_batch (DP-ULR's sampling with
 *            rejection); the number of redraws is counted.
 * Steps per epoch: SHUFFLE ceil(n / batch_size), POISSON(_REJECT) max(1, round(1/q)),
 * FULL 1 (dpt_sampler_new refuses q < 2^-53, whose epochs are not countable). */
typedef enum {
    DPT_SAMPLER_SHUFFLE = 0,
    DPT_SAMPLER_POISSON = 1,
    DPT_SAMPLER_FULL = 2,
    DPT_SAMPLER_POISSON_REJECT = 3
} dpt_sampler_kind;
typedef struct dpt_sampler dpt_sampler; /* opaque */

/* n in [1, 2^32 - 1]. SHUFFLE: 1 <= batch_size <= n. POISSON(_REJECT): 0 < q <= 1.
 * POISSON_REJECT: min_batch <= n. Unused parameters are ignored. DPT_EINVAL otherwise. */
dpt_status dpt_sampler_new(dpt_sampler_kind kind, size_t n, size_t batch_size, double q,
                           size_t min_batch, uint64_t seed, dpt_sampler **out);
/* Same, on an OS-seeded stream (secure mode): the batches are unpredictable, as the
 * amplification-by-subsampling argument assumes, and a Poisson sampler includes each
 * example by comparing a 64-bit uniform with floor(q 2^64) (no floating point, no branch on
 * the outcome): P(include) is exactly q for q >= 2^-11, below q by < 2^-64 otherwise.
 * The reproducible sampler draws geometric gaps instead (q n + 1 draws per step, exact up
 * to the rounding of log). dpt_sampler_set_state restores only the
 * counters of a secure Poisson sampler (it keeps its fresh OS stream: Poisson batches are
 * independent) and refuses a secure shuffle. */
dpt_status dpt_sampler_new_secure(dpt_sampler_kind kind, size_t n, size_t batch_size, double q,
                                  size_t min_batch, dpt_sampler **out);
void dpt_sampler_free(dpt_sampler *s);
/* Next batch: writes its indices into idx (the caller provides n entries) and the count
 * into *b. POISSON_REJECT fails with DPT_ERANGE after 10^6 consecutive redraws (a
 * min_batch far above q n). */
dpt_status dpt_sampler_next(dpt_sampler *s, uint32_t *idx, size_t *b);
size_t dpt_sampler_steps_per_epoch(const dpt_sampler *s);
/* The number of steps of `epochs` epochs: epochs x steps per epoch (the rule above:
 * SHUFFLE ceil(n / batch_size), POISSON(_REJECT) max(1, round(1/q)), FULL 1). This is
 * what dpt_trainer_run takes for dpt_train_config.epochs, and the one definition that
 * `dptrain account --epochs`, Python's accounting.steps_for_epochs and every
 * --target-epsilon calibration use (docs/accounting.md, "Epochs and steps"); it is not
 * ceil(epochs / q). POISSON(_REJECT): q in [2^-53, 1], or q = 0 for batch_size / n (as
 * dpt_train_config.sample_rate = 0; n and batch_size are only read then). SHUFFLE:
 * 1 <= batch_size <= n. epochs >= 1. DPT_EINVAL otherwise, DPT_ERANGE when the steps
 * exceed 2^53. Example: n = 1000, batch 385 (q = 0.385), 10 epochs: 10 x 3 = 30 steps. */
dpt_status dpt_sampler_steps_for_epochs(dpt_sampler_kind kind, size_t n, size_t batch_size, double q,
                                        uint64_t epochs, uint64_t *steps);
/* 1 when the batch returned by the last dpt_sampler_next ended an epoch. */
int dpt_sampler_epoch_ended(const dpt_sampler *s);
/* Completed epochs and steps so far. */
uint64_t dpt_sampler_epoch(const dpt_sampler *s);
uint64_t dpt_sampler_step(const dpt_sampler *s);
dpt_sampler_kind dpt_sampler_get_kind(const dpt_sampler *s);

/* Position for checkpoints, so a resumed run draws exactly the same batches. POD; the io
 * module serializes it field by field.
 *   step: batches drawn; epoch: completed epochs; cursor: SHUFFLE position in the current
 *   permutation (0 = the next batch starts a new permutation); rng: the stream now;
 *   epoch_rng: SHUFFLE, the stream just before the current permutation was drawn (to
 *   rebuild it); rejections: POISSON_REJECT redraws so far. */
typedef struct {
    uint64_t step;
    uint64_t epoch;
    uint64_t cursor;
    dpt_rng_state rng;
    dpt_rng_state epoch_rng;
    uint64_t rejections;
} dpt_sampler_state;
void dpt_sampler_get_state(const dpt_sampler *s, dpt_sampler_state *st);
/* Restores a position from a sampler of the same kind and n (the seed is in the state).
 * DPT_EINVAL when the state is inconsistent (cursor >= n, ...). */
dpt_status dpt_sampler_set_state(dpt_sampler *s, const dpt_sampler_state *st);
uint64_t dpt_sampler_rejections(const dpt_sampler *s); /* POISSON_REJECT redraws so far */

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
