/* Batch samplers: shuffle (permutation per epoch), Poisson (independent inclusion with
 * probability q, as in Abadi et al. 2016, "Deep Learning with Differential Privacy", whose
 * privacy amplification by subsampling assumes exactly this), full batch, and Poisson with
 * rejection of small batches (DP-ULR: batches with |B| < min_batch are redrawn).
 * All randomness comes from one dpt_rng on stream DPT_STREAM_DATA. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "dptrain/data.h"

struct dpt_sampler {
    dpt_sampler_kind kind;
    size_t n, batch_size, min_batch;
    double q;
    dpt_rng rng;
    dpt_rng_state epoch_rng; /* SHUFFLE: rng state before the current permutation */
    uint32_t *perm;          /* SHUFFLE: [n] current permutation */
    int perm_valid;          /* SHUFFLE: perm belongs to the current epoch */
    uint64_t step, epoch, cursor, rejections;
    int ended;               /* the last batch ended an epoch */
};

/* Consecutive redraws after which POISSON_REJECT gives up (min_batch far above q n). */
#define DPT_REJECT_MAX 1000000

static dpt_status sampler_new(dpt_sampler_kind kind, size_t n, size_t batch_size, double q,
                              size_t min_batch, int secure, uint64_t seed, dpt_sampler **out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_sampler_new: NULL out");
    *out = NULL;
    DPT_CHECK(n >= 1 && n <= UINT32_MAX, DPT_EINVAL, "sampler: dataset size %zu not in [1, 2^32)",
              n);
    switch (kind) {
    case DPT_SAMPLER_SHUFFLE:
        DPT_CHECK(batch_size >= 1 && batch_size <= n, DPT_EINVAL,
                  "sampler: batch size %zu not in [1, %zu] (the dataset size)", batch_size, n);
        break;
    case DPT_SAMPLER_POISSON:
    case DPT_SAMPLER_POISSON_REJECT:
        DPT_CHECK(q > 0 && q <= 1, DPT_EINVAL, "sampler: sampling rate q = %g not in (0, 1]", q);
        /* an epoch is round(1/q) steps, counted in size_t (and published as doubles) */
        DPT_CHECK(q >= 0x1p-53, DPT_EINVAL, "sampler: sampling rate q = %g is below 2^-53: an epoch of round(1/q) "
                  "steps is not countable", q);
        if (kind == DPT_SAMPLER_POISSON_REJECT)
            DPT_CHECK(min_batch <= n, DPT_EINVAL,
                      "sampler: minimum batch %zu larger than the dataset (%zu)", min_batch, n);
        break;
    case DPT_SAMPLER_FULL:
        break;
    default:
        return dpt_set_error(DPT_EINVAL, "sampler: unknown kind %d", (int)kind);
    }
    dpt_sampler *s = dpt_alloc(1, sizeof *s, "sampler");
    if (!s) return DPT_ENOMEM;
    s->kind = kind;
    s->n = n;
    s->batch_size = batch_size;
    s->q = q;
    s->min_batch = kind == DPT_SAMPLER_POISSON_REJECT ? min_batch : 0;
    dpt_status st = secure ? dpt_rng_init_secure(&s->rng, DPT_STREAM_DATA)
                           : dpt_rng_init(&s->rng, seed, DPT_STREAM_DATA);
    if (st != DPT_OK) {
        dpt_free(s);
        return st;
    }
    if (kind == DPT_SAMPLER_SHUFFLE) {
        s->perm = dpt_alloc(n, sizeof(uint32_t), "sampler permutation");
        if (!s->perm) {
            dpt_rng_free(&s->rng);
            dpt_free(s);
            return DPT_ENOMEM;
        }
    }
    dpt_rng_get_state(&s->rng, &s->epoch_rng);
    *out = s;
    return DPT_OK;
}

dpt_status dpt_sampler_new(dpt_sampler_kind kind, size_t n, size_t batch_size, double q,
                           size_t min_batch, uint64_t seed, dpt_sampler **out) {
    return sampler_new(kind, n, batch_size, q, min_batch, 0, seed, out);
}

dpt_status dpt_sampler_new_secure(dpt_sampler_kind kind, size_t n, size_t batch_size, double q,
                                  size_t min_batch, dpt_sampler **out) {
    return sampler_new(kind, n, batch_size, q, min_batch, 1, 0, out);
}

void dpt_sampler_free(dpt_sampler *s) {
    if (!s) return;
    dpt_rng_free(&s->rng);
    dpt_free(s->perm);
    dpt_free(s);
}

/* ==== Epochs ==== */

/* Steps of one epoch, the one rule behind dpt_sampler_steps_per_epoch (what the trainer
 * runs) and dpt_sampler_steps_for_epochs (what `dptrain account --epochs`, Python's
 * steps_for_epochs and the --target-epsilon calibration plan): parameters as
 * sampler_new checked them. A Poisson epoch is round(1/q) steps, not ceil(E/q) over E
 * epochs: every epoch of a run is the same whole number of steps. */
static size_t epoch_steps(dpt_sampler_kind kind, size_t n, size_t batch_size, double q) {
    switch (kind) {
    case DPT_SAMPLER_SHUFFLE: return (n + batch_size - 1) / batch_size;
    case DPT_SAMPLER_POISSON:
    case DPT_SAMPLER_POISSON_REJECT: {
        double k = floor(1.0 / q + 0.5);
        return k < 1 ? 1 : (size_t)k;
    }
    case DPT_SAMPLER_FULL:
    default: return 1;
    }
}

size_t dpt_sampler_steps_per_epoch(const dpt_sampler *s) {
    return epoch_steps(s->kind, s->n, s->batch_size, s->q);
}

dpt_status dpt_sampler_steps_for_epochs(dpt_sampler_kind kind, size_t n, size_t batch_size, double q,
                                        uint64_t epochs, uint64_t *steps) {
    DPT_CHECK(steps, DPT_EINVAL, "dpt_sampler_steps_for_epochs: steps is NULL");
    *steps = 0;
    DPT_CHECK(epochs >= 1, DPT_EINVAL, "epochs must be >= 1, got 0");
    switch (kind) {
    case DPT_SAMPLER_SHUFFLE:
        DPT_CHECK(n >= 1 && batch_size >= 1 && batch_size <= n, DPT_EINVAL,
                  "batch size %zu not in [1, %zu] (the dataset size)", batch_size, n);
        break;
    case DPT_SAMPLER_POISSON:
    case DPT_SAMPLER_POISSON_REJECT:
        DPT_CHECK(q == 0 || (q > 0 && q <= 1), DPT_EINVAL, "sampling rate q = %g not in (0, 1]", q);
        if (q == 0) { /* as dpt_train_config.sample_rate = 0: q = batch_size / n */
            DPT_CHECK(n >= 1 && batch_size >= 1 && batch_size <= n, DPT_EINVAL,
                      "sampling rate q = batch size / N = %zu / %zu is outside (0, 1]", batch_size, n);
            q = (double)batch_size / (double)n;
        }
        DPT_CHECK(q >= 0x1p-53, DPT_EINVAL, "sampling rate q = %g is below 2^-53: an epoch of round(1/q) steps is not "
                  "countable", q);
        break;
    case DPT_SAMPLER_FULL:
        break;
    default:
        return dpt_set_error(DPT_EINVAL, "sampler: unknown kind %d", (int)kind);
    }
    const double spe = (double)epoch_steps(kind, n, batch_size, q);
    DPT_CHECK((double)epochs * spe <= 0x1p53, DPT_ERANGE,
              "epochs = %" PRIu64 " of %.17g steps each is more than 2^53 steps", epochs, spe);
    *steps = epochs * (uint64_t)spe;
    return DPT_OK;
}

/* ==== Shuffle ==== */

/* Fisher-Yates with unbiased dpt_rng_below: a uniform permutation of 0..n-1. */
static void shuffle_draw(dpt_sampler *s) {
    dpt_rng_get_state(&s->rng, &s->epoch_rng);
    for (size_t i = 0; i < s->n; i++) s->perm[i] = (uint32_t)i;
    for (size_t i = s->n - 1; i > 0; i--) {
        size_t j = (size_t)dpt_rng_below(&s->rng, (uint64_t)i + 1);
        uint32_t t = s->perm[i];
        s->perm[i] = s->perm[j];
        s->perm[j] = t;
    }
    s->perm_valid = 1;
}

static void shuffle_next(dpt_sampler *s, uint32_t *idx, size_t *b) {
    if (s->cursor == 0 && !s->perm_valid) shuffle_draw(s);
    size_t k = s->n - (size_t)s->cursor;
    if (k > s->batch_size) k = s->batch_size; /* last batch of an epoch: n mod B (or B) */
    memcpy(idx, s->perm + s->cursor, k * sizeof(uint32_t));
    *b = k;
    s->cursor += k;
    if (s->cursor == s->n) {
        s->cursor = 0;
        s->perm_valid = 0;
        s->ended = 1;
    }
}

/* ==== Poisson sampling ==== */

/* Reproducible mode: independent Bernoulli(q) inclusions drawn as geometric gaps: the number of examples
 * skipped before the next included one is G = floor(log U / log(1 - q)) with U uniform
 * on (0, 1], so P(G >= k) = P(U <= (1-q)^k) = (1-q)^k. Memoryless gaps are exactly
 * independent Bernoulli(q) trials per example (up to the rounding of log, relative
 * ~1e-16, the same order as comparing a 53-bit uniform with q), and a step costs about
 * q n + 1 draws instead of n: at MNIST scale 257 instead of 60000. */
/* The secure sampler (OS-seeded stream): one comparison per example, U < floor(q 2^64)
 * with U a uniform 64-bit word, so P(include) = floor(q 2^64) / 2^64, which is exactly q
 * for every q >= 2^-11 (a double's q 2^64 is then an integer) and below q by less than
 * 2^-64 otherwise (a smaller rate only amplifies privacy more). No floating point, and no
 * branch on the outcome: the index is always written and the count advanced by the
 * comparison's 0/1, so the time does not depend on who is in the batch. Costs n words of
 * two (8 bytes per example), ~0.2 ms per step at MNIST scale. */
#define SECURE_BLOCK 512
static uint64_t rate_threshold(double q) {
    if (q >= 1) return UINT64_MAX;
    long double t = ldexpl((long double)q, 64); /* exact: q has 53 bits, the product 64 */
    return (uint64_t)floorl(t);
}

static size_t poisson_draw_exact(dpt_sampler *s, uint32_t *idx) {
    const uint64_t thr = rate_threshold(s->q);
    uint32_t w[2 * SECURE_BLOCK];
    size_t b = 0;
    for (size_t lo = 0; lo < s->n; lo += SECURE_BLOCK) {
        size_t len = s->n - lo < SECURE_BLOCK ? s->n - lo : SECURE_BLOCK;
        dpt_rng_fill_u32(&s->rng, w, 2 * len);
        for (size_t k = 0; k < len; k++) {
            uint64_t u = w[2 * k] | (uint64_t)w[2 * k + 1] << 32;
            idx[b] = (uint32_t)(lo + k);
            b += u < thr;
        }
    }
    OPENSSL_cleanse(w, sizeof w); /* the words say who is in the batch (a memset of a dead array is dropped) */
    return b;
}

static size_t poisson_draw(dpt_sampler *s, uint32_t *idx) {
    size_t b = 0;
    if (s->q >= 1.0) {
        for (size_t i = 0; i < s->n; i++) idx[i] = (uint32_t)i;
        return s->n;
    }
    if (s->rng.secure) return poisson_draw_exact(s, idx);
    const double lq = log1p(-s->q); /* < 0 */
    size_t i = 0;
    for (;;) {
        double u = 1.0 - dpt_rng_uniform(&s->rng); /* (0, 1] */
        double g = floor(log(u) / lq);
        if (!(g < (double)(s->n - i))) break; /* also catches +inf (u = tiny) */
        i += (size_t)g;
        idx[b++] = (uint32_t)i++;
    }
    return b;
}

dpt_status dpt_sampler_next(dpt_sampler *s, uint32_t *idx, size_t *b) {
    DPT_CHECK(s && idx && b, DPT_EINVAL, "dpt_sampler_next: NULL argument");
    s->ended = 0;
    switch (s->kind) {
    case DPT_SAMPLER_SHUFFLE:
        shuffle_next(s, idx, b);
        break;
    case DPT_SAMPLER_FULL:
        for (size_t i = 0; i < s->n; i++) idx[i] = (uint32_t)i;
        *b = s->n;
        s->ended = 1;
        break;
    case DPT_SAMPLER_POISSON:
    case DPT_SAMPLER_POISSON_REJECT: {
        size_t k = poisson_draw(s, idx);
        /* DP-ULR: a batch smaller than min_batch is discarded and redrawn; the accountant
         * uses the rejection-conditioned mechanism, so every redraw is counted. */
        uint64_t tries = 0;
        while (k < s->min_batch) {
            DPT_CHECK(++tries <= DPT_REJECT_MAX, DPT_ERANGE,
                      "sampler: %d redraws without a batch of at least %zu (q n = %g)",
                      DPT_REJECT_MAX, s->min_batch, s->q * (double)s->n);
            s->rejections++;
            k = poisson_draw(s, idx);
        }
        *b = k;
        s->ended = ((s->step + 1) % dpt_sampler_steps_per_epoch(s)) == 0;
        break;
    }
    }
    s->step++;
    if (s->ended) s->epoch++;
    return DPT_OK;
}

int dpt_sampler_epoch_ended(const dpt_sampler *s) { return s->ended; }
uint64_t dpt_sampler_epoch(const dpt_sampler *s) { return s->epoch; }
uint64_t dpt_sampler_step(const dpt_sampler *s) { return s->step; }
dpt_sampler_kind dpt_sampler_get_kind(const dpt_sampler *s) { return s->kind; }
uint64_t dpt_sampler_rejections(const dpt_sampler *s) { return s->rejections; }

/* ==== State for checkpoints ==== */

void dpt_sampler_get_state(const dpt_sampler *s, dpt_sampler_state *st) {
    memset(st, 0, sizeof *st);
    st->step = s->step;
    st->epoch = s->epoch;
    st->cursor = s->cursor;
    st->rejections = s->rejections;
    dpt_rng_get_state(&s->rng, &st->rng);
    st->epoch_rng = s->epoch_rng;
}

dpt_status dpt_sampler_set_state(dpt_sampler *s, const dpt_sampler_state *st) {
    DPT_CHECK(s && st, DPT_EINVAL, "dpt_sampler_set_state: NULL argument");
    /* A secure stream has no seed to restore; re-seeding it from the (zero) saved seed
     * would silently make the batches predictable. Poisson batches are independent of
     * each other, so a secure Poisson sampler resumes with its counters and a fresh OS
     * stream: the batches after the resume are as unpredictable and as distributed as
     * if the run had not stopped. A shuffle's permutation cannot be rebuilt that way. */
    if (s->rng.secure) {
        DPT_CHECK(s->kind != DPT_SAMPLER_SHUFFLE, DPT_EINVAL,
                  "sampler state: a securely seeded shuffle cannot be restored (its seed is not saved); "
                  "resume in reproducible mode");
        DPT_CHECK(st->cursor == 0, DPT_EINVAL, "sampler state: cursor %llu invalid for a Poisson sampler",
                  (unsigned long long)st->cursor);
        s->step = st->step;
        s->epoch = st->epoch;
        s->rejections = st->rejections;
        s->ended = 0;
        return DPT_OK;
    }
    DPT_CHECK(st->cursor < s->n && (s->kind == DPT_SAMPLER_SHUFFLE || st->cursor == 0),
              DPT_EINVAL, "sampler state: cursor %llu invalid for n = %zu",
              (unsigned long long)st->cursor, s->n);
    DPT_CHECK(st->rng.stream_id == DPT_STREAM_DATA, DPT_EINVAL,
              "sampler state: rng stream %u is not the data stream", (unsigned)st->rng.stream_id);
    if (s->kind == DPT_SAMPLER_SHUFFLE && st->cursor > 0) {
        /* Rebuild the current epoch's permutation from the stream position it was drawn at. */
        DPT_TRY(dpt_rng_set_state(&s->rng, &st->epoch_rng));
        shuffle_draw(s);
    } else {
        s->perm_valid = 0;
        s->epoch_rng = st->epoch_rng;
    }
    DPT_TRY(dpt_rng_set_state(&s->rng, &st->rng));
    s->step = st->step;
    s->epoch = st->epoch;
    s->cursor = st->cursor;
    s->rejections = st->rejections;
    s->ended = 0;
    return DPT_OK;
}
