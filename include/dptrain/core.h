/* core: status codes and error messages, checked allocation, float32 tensors, explicit
 * ChaCha20 random streams (OpenSSL libcrypto) with uniform and Gaussian samplers, thin
 * OpenBLAS / LAPACKE wrappers and thread-count handling.
 * Memory: functions that allocate say so; everything returned by *_new or dpt_alloc is
 * freed by the matching *_free / dpt_free (all accept NULL).
 * Thread safety: a dpt_rng is not shared between threads without external locking; the
 * error message buffer is thread-local, so errors on one thread never clobber another's.
 * Errors: every fallible function returns a dpt_status (DPT_OK = 0, errors < 0) and
 * leaves a message for dpt_last_error(); nothing here prints, exits or aborts on bad
 * input (DPT_ASSERT guards the library's own invariants only). */
#ifndef DPTRAIN_CORE_H
#define DPTRAIN_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

/* ==== Status codes and errors ==== */

typedef enum {
    DPT_OK = 0,
    DPT_EINVAL = -1,   /* invalid argument or hyperparameter */
    DPT_ENOMEM = -2,   /* allocation failed or size overflow */
    DPT_EIO = -3,      /* file could not be opened, read or written */
    DPT_EFORMAT = -4,  /* malformed file content (magic, truncation, dimensions, NaN) */
    DPT_ERANGE = -5,   /* numeric result out of range / did not converge */
    DPT_ENOTSUP = -6,  /* not supported (yet) */
    DPT_EBUDGET = -7,  /* privacy budget would be exceeded */
    DPT_ECRYPTO = -8,  /* libcrypto failure */
    DPT_EMISMATCH = -9,/* resume/ledger inconsistency */
    DPT_EBUSY = -10    /* in use by another process (a locked run directory) */
} dpt_status;

/* Readable name of a status ("invalid argument", ...). Static string. */
const char *dpt_status_name(dpt_status s);

/* The message of the last error set on this thread ("" if none). Valid until the next
 * dpt_set_error on this thread. */
const char *dpt_last_error(void);

/* Sets this thread's error message (printf format) and returns `s`, so that
 * `return dpt_set_error(DPT_EINVAL, "...")` reads naturally. */
dpt_status dpt_set_error(dpt_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prepends "prefix: " to the current message (adds context while propagating). */
dpt_status dpt_error_context(dpt_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

void dpt_clear_error(void);

/* Return `st` with message when `cond` is false. */
#define DPT_CHECK(cond, st, ...)                                                         \
    do {                                                                                 \
        if (!(cond)) return dpt_set_error((st), __VA_ARGS__);                            \
    } while (0)

/* Propagate a non-OK status. */
#define DPT_TRY(expr)                                                                    \
    do {                                                                                 \
        dpt_status dpt_try_s_ = (expr);                                                  \
        if (dpt_try_s_ != DPT_OK) return dpt_try_s_;                                     \
    } while (0)

/* Always-on invariant check for bugs in dptrain itself (never for user input):
 * prints file:line and aborts. */
#define DPT_ASSERT(cond)                                                                 \
    do {                                                                                 \
        if (!(cond)) dpt_assert_fail(#cond, __FILE__, __LINE__);                         \
    } while (0)
void dpt_assert_fail(const char *expr, const char *file, int line);

/* ==== Memory ==== */

/* 64-byte aligned, zero-filled allocation of n * elem bytes. Returns NULL (and sets an
 * error naming `what`) on overflow or allocation failure. Free with dpt_free. */
void *dpt_alloc(size_t n, size_t elem, const char *what);
void dpt_free(void *p);
/* a * b with overflow check: returns 0 and sets *out on success, -1 on overflow. */
int dpt_mul_overflow(size_t a, size_t b, size_t *out);
/* a * b * c, likewise. */
int dpt_mul3_overflow(size_t a, size_t b, size_t c, size_t *out);
/* dpt_alloc of a * b elements of elem bytes each, every product checked. Any count that is
 * a product of sizes (rows x columns, models x examples) goes through this or through a
 * dpt_mul_overflow'd count: never a bare `a * b` that could wrap to a small buffer. */
void *dpt_alloc2(size_t a, size_t b, size_t elem, const char *what);
void *dpt_alloc3(size_t a, size_t b, size_t c, size_t elem, const char *what);

/* ==== Tensors ==== */

#define DPT_MAX_DIMS 4
/* float32, row-major. `data` is owned when `owns` is 1 (dpt_tensor_alloc), else a view. */
typedef struct {
    float *data;
    size_t shape[DPT_MAX_DIMS];
    int ndim;
    size_t size; /* product of shape */
    int owns;
} dpt_tensor;

/* ndim in 1..DPT_MAX_DIMS, shape [ndim]. DPT_EINVAL (t untouched) for a NULL t or shape or
 * an ndim outside that range, DPT_ENOMEM when the size overflows or allocation fails. */
dpt_status dpt_tensor_alloc(dpt_tensor *t, int ndim, const size_t *shape);
/* A view of data (not owned, not checked) with that shape. An ndim outside 1..DPT_MAX_DIMS,
 * a NULL shape or a size that overflows size_t give the empty tensor (all zero: ndim 0,
 * size 0, data NULL) rather than aborting: check t.ndim when ndim or shape are not known
 * to be valid. */
dpt_tensor dpt_tensor_view(float *data, int ndim, const size_t *shape);
void dpt_tensor_free(dpt_tensor *t); /* frees only owned data; accepts NULL */

/* ==== Random streams (ChaCha20) ====
 * A stream is (256-bit key, 32-bit stream id). The key is SHA-256 of the 64-bit seed and
 * a domain string; each purpose (init, data sampling, noise, ...) uses its own stream id,
 * so the streams are independent. A position in the stream is (substream, block index):
 * substream 0 serves sequential draws (dpt_rng_u32 ...); bulk fills use fresh
 * substreams split into fixed chunks, so their output does not depend on the thread count.
 * Secure mode takes the seed from the OS (RAND_bytes) and never exposes it. */

enum {
    DPT_STREAM_INIT = 1,  /* parameter initialization */
    DPT_STREAM_DATA = 2,  /* batch sampling, shuffling */
    DPT_STREAM_NOISE = 3, /* privacy noise: used for nothing else */
    DPT_STREAM_AUX = 4,   /* anything else (dropout-like perturbations, audits) */
    DPT_STREAM_AUGMENT = 5 /* data augmentation of the training batches (a substream per step) */
};

#define DPT_RNG_BUF_WORDS 256
typedef struct {
    uint8_t key[32];
    uint32_t stream_id;
    uint64_t seed;          /* recorded seed (0 and `secure` = 1 when OS-seeded) */
    int secure;             /* 1: seed came from the OS, never logged or saved */
    uint64_t substreams;    /* bulk-fill substreams used so far (next = substreams + 1) */
    uint64_t block;         /* next 64-byte block of substream 0 to generate */
    uint32_t buf[DPT_RNG_BUF_WORDS];
    unsigned pos;           /* next unread word in buf (DPT_RNG_BUF_WORDS = empty) */
    void *ctx;              /* EVP_CIPHER_CTX* owned by this rng */
    uint64_t sub;           /* substream read by dpt_rng_u32 & co. (0; a child: its own) */
} dpt_rng;

/* Reproducible stream from a 64-bit seed. Allocates a cipher context: dpt_rng_free. */
dpt_status dpt_rng_init(dpt_rng *r, uint64_t seed, uint32_t stream_id);
/* Secure stream: 32 bytes from the OS (RAND_bytes) become the key. */
dpt_status dpt_rng_init_secure(dpt_rng *r, uint32_t stream_id);
void dpt_rng_free(dpt_rng *r);
/* 64 bits of OS randomness (for choosing a seed when the user gives none). */
dpt_status dpt_os_random_u64(uint64_t *out);

/* Reserves n fresh substreams of r (never used by anything else) and returns the first. */
uint64_t dpt_rng_reserve_substreams(dpt_rng *r, uint64_t n);
/* A child stream with the parent's key that reads substream `sub` from its start, with the
 * whole stream API (dpt_rng_below, ...): parallel exact samplers give each chunk of their
 * output its own reserved substream, so the result does not depend on the thread count.
 * A child is transient (its position is not part of any saved state): dpt_rng_free. */
dpt_status dpt_rng_child(const dpt_rng *parent, uint64_t sub, dpt_rng *child);

/* Saved position of a stream: enough (with the seed) to continue bit-identically. */
typedef struct {
    uint64_t seed;
    uint32_t stream_id;
    uint64_t substreams, block;
    uint32_t pos;
    int secure; /* 1: an OS-seeded stream; its key is not in the state, so it cannot be restored */
} dpt_rng_state;
void dpt_rng_get_state(const dpt_rng *r, dpt_rng_state *s);
/* Re-creates the stream at that position (refuses secure streams: they are not saved). */
dpt_status dpt_rng_set_state(dpt_rng *r, const dpt_rng_state *s);

uint32_t dpt_rng_u32(dpt_rng *r);
/* out[0, n) = the next n words, exactly what n calls of dpt_rng_u32 would return. */
void dpt_rng_fill_u32(dpt_rng *r, uint32_t *out, size_t n);
uint64_t dpt_rng_u64(dpt_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double dpt_rng_uniform(dpt_rng *r);
/* Uniform integer in [0, n) without modulo bias. n = 0 stands for 2^64 (n is read modulo
 * 2^64): a uniform 64-bit value, the same draw as dpt_rng_u64; no n aborts. */
uint64_t dpt_rng_below(dpt_rng *r, uint64_t n);
/* Standard normal, reference sampler: Box-Muller in double precision on 53-bit uniforms. */
double dpt_rng_gauss_ref(dpt_rng *r);
/* Standard normal, fast sampler: 256-layer ziggurat on one 32-bit word per draw
 * (8 bits layer, 1 bit sign, 23 bits abscissa; Marsaglia-Tsang with independent bits). */
float dpt_rng_gauss(dpt_rng *r);
/* Bernoulli(p) with a 53-bit uniform. */
int dpt_rng_bernoulli(dpt_rng *r, double p);

/* out[i] += stddev * N(0, 1) for i < n (or = when `accumulate` is 0), using a fresh
 * substream split in chunks of DPT_RNG_CHUNK outputs filled by `threads` threads:
 * the result is the same for every thread count. */
#define DPT_RNG_CHUNK 4096
dpt_status dpt_rng_gauss_fill(dpt_rng *r, float *out, size_t n, float stddev, int accumulate,
                              int threads);
/* out[i] = scale * (out[i] + stddev * N(0, 1)): the same draws as dpt_rng_gauss_fill with
 * accumulate = 1, and the sum rescaled in the same pass over memory (DP-SGD's noise and
 * its division by the expected batch size). */
dpt_status dpt_rng_gauss_fill_scaled(dpt_rng *r, float *out, size_t n, float stddev, float scale,
                                     int threads);
/* out[i] = stddev * N(0, 1) for i < n, on up to `threads` threads: exactly the values that
 * a dpt_rng_gauss_fill of substream `sub` (reserved with dpt_rng_reserve_substreams) would
 * put at out + first_chunk * DPT_RNG_CHUNK. r is only read, so threads may fill disjoint
 * chunk ranges of one substream at once (each value depends on its chunk index and position
 * alone, and a fill of n' < n values is a prefix of a fill of n). */
dpt_status dpt_rng_gauss_fill_at(const dpt_rng *r, uint64_t sub, uint64_t first_chunk, float *out, size_t n,
                                 float stddev, int threads);
/* Not for privacy noise: out[i] = stddev * N(0, 1) with dpt_rng_gauss_fill_at's layout
 * (chunk first_chunk + c of substream sub at out + c DPT_RNG_CHUNK), from a faster keystream, AES-128 in counter mode (AES-NI) under a key derived one way from
 * r's key (SHA-256), so it is reproducible per seed, independent of the thread count, and
 * independent of r's ChaCha20 values. For randomness that is not the privacy mechanism's
 * noise, e.g. DP-ULR's explicit-mode perturbations (the estimator's own randomness). */
dpt_status dpt_rng_gauss_fill_fast_at(const dpt_rng *r, uint64_t sub, uint64_t first_chunk, float *out, size_t n,
                                      float stddev, int threads);
/* Reference version of dpt_rng_gauss_fill: same layout, exact double Box-Muller per element. */
dpt_status dpt_rng_gauss_fill_ref(dpt_rng *r, float *out, size_t n, float stddev,
                                  int accumulate);

/* ==== Threads ==== */

/* Number of threads to use: `requested` if > 0, else the number of online cores. */
int dpt_threads_resolve(int requested);
/* Sets OpenBLAS's thread count (call once per run). */
void dpt_threads_set_blas(int threads);
/* OpenBLAS's current thread count. Its GEMMs above a size threshold and its LAPACK
 * routines (dsyevr, dpotrf, dpotrs) round differently with another thread count; code
 * whose results must not depend on it runs them on one thread: prev = dpt_threads_get_blas(),
 * dpt_threads_set_blas(1), ..., dpt_threads_set_blas(prev). */
int dpt_threads_get_blas(void);
/* Which BLAS kernels run, for reports: "OpenBLAS SkylakeX", with a note when dptrain
 * switched OpenBLAS's fallback to them at load (docs/api.md "Threads"), or "unknown (not
 * OpenBLAS)". A static string, rewritten by each call (not thread-safe). */
const char *dpt_blas_core(void);

/* ==== BLAS / LAPACK wrappers (row-major) ==== */

/* C[M,N] = alpha * op(A) op(B) + beta * C; op(A) is [M,K], op(B) is [K,N]. */
void dpt_sgemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
               const float *A, size_t lda, const float *B, size_t ldb, float beta, float *C,
               size_t ldc);
/* Gram matrix C [n, n] = op(A) op(A)^T, op(A) = A [n, k] (trans 0) or A^T (A [k, n], trans
 * 1), both triangles written (BLAS ssyrk on the upper one, half a GEMM's work, mirrored). */
void dpt_ssyrk_gram(int trans, size_t n, size_t k, const float *A, size_t lda, float *C, size_t ldc);
/* Naive triple loop with double accumulation; the reference for dpt_sgemm. */
void dpt_sgemm_ref(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                   const float *A, size_t lda, const float *B, size_t ldb, float beta,
                   float *C, size_t ldc);
/* Eigen-decomposition of a symmetric n x n matrix A (row-major, double, upper triangle
 * read; A is destroyed). w[n] receives eigenvalues ascending; Z (n x n, row-major, may be
 * NULL) receives eigenvectors as columns. */
dpt_status dpt_syev(size_t n, double *A, double *w, double *Z);
/* Cholesky factor of a symmetric positive definite n x n matrix A (double, lower
 * triangle read and overwritten with L, A = L L^T; the strict upper triangle is left as it
 * was). DPT_ERANGE when A is not numerically positive definite. */
dpt_status dpt_chol(size_t n, double *A);
/* Solves A X = B with A's Cholesky factor L from dpt_chol: B holds nrhs right-hand sides
 * of length n, one after the other (B[j * n + i]), and receives X. */
dpt_status dpt_chol_solve(size_t n, const double *L, size_t nrhs, double *B);

/* ==== Small utilities ==== */

/* Monotonic wall-clock seconds. */
double dpt_now(void);
/* 1 when every value is finite. */
int dpt_all_finite(const float *x, size_t n);
/* sum of x[j]^2 accumulated in double (float squares overflow for |x| above ~1.8e19; a
 * row with a NaN or infinite value gives NaN or inf). */
double dpt_sqnorm_double(const float *x, size_t n);
/* SHA-256 of a buffer (libcrypto); out is 32 bytes. Incremental use via dpt_hash_*. */
typedef struct {
    void *ctx;
} dpt_hash;
dpt_status dpt_hash_init(dpt_hash *h);
dpt_status dpt_hash_update(dpt_hash *h, const void *data, size_t n);
dpt_status dpt_hash_final(dpt_hash *h, uint8_t out[32]);
void dpt_hex(const uint8_t *bytes, size_t n, char *out /* 2n+1 */);
/* Bytes of the character starting at s when it is well-formed UTF-8 (RFC 3629: no overlong
 * forms, surrogates or code points above U+10FFFF) and not a control character (C0, DEL,
 * C1); 0 otherwise (and at the terminating NUL). Texts that the library stores for anyone
 * to read (e.g. dpt_trainer_set_initial_params' source) are made of such characters. */
size_t dpt_text_char_len(const char *s);
/* The shortest of %.15g / %.16g / %.17g that reads back (strtod) as exactly v, as a JSON
 * number text in out [DPT_DOUBLE_TEXT]; "null" for NaN and infinities (JSON has no such
 * numbers). For files that must round-trip bit for bit (ledgers, checkpoint state, machine
 * output): cJSON's own printer accepts a 1-ulp difference. */
#define DPT_DOUBLE_TEXT 32
void dpt_format_double(double v, char out[DPT_DOUBLE_TEXT]);

/* Atomically replaces `path` with `n` bytes: write a fresh temporary file beside it
 * (`.NAME.tmp-XXXXXX`, unique per call, so concurrent writers never share one), fsync,
 * rename over `path`, fsync the directory. Either the old or the new content is on disk
 * after a crash, never a mix; a failed call removes its temporary file. */
dpt_status dpt_write_file_atomic(const char *path, const void *data, size_t n);
/* dpt_write_file_atomic for a secret (a run's key): the file has mode 0600 (its owner
 * alone may read it), from its creation on. */
dpt_status dpt_write_file_private(const char *path, const void *data, size_t n);
/* Reads a whole regular file into a new buffer (free with dpt_free); NUL-terminated for
 * text. Devices, FIFOs, sockets and directories are refused (DPT_EIO, never a hang or an
 * endless read); dpt_read_file_max also refuses a file larger than max_bytes (DPT_EFORMAT). */
dpt_status dpt_read_file(const char *path, uint8_t **data, size_t *n);
dpt_status dpt_read_file_max(const char *path, size_t max_bytes, uint8_t **data, size_t *n);
/* Opens a regular file for reading (refused like dpt_read_file); *size its size in bytes
 * (may be NULL). Never blocks on a FIFO. */
dpt_status dpt_open_regular(const char *path, FILE **f, size_t *size);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
