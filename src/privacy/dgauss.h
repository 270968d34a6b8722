/* Internal: the table sampler of the discrete Gaussian N_Z(0, sigma^2) (src/privacy/dgauss.c)
 * behind dpt_privacy_noise_add_secure_ex(DPT_DGAUSS_TABLE). Exposed to the tests, which
 * build tables, break them on purpose (dg_table_prepare re-derives what the kernel reads)
 * and check the sampler against the exact pmf.
 * Memory: a dg_table is a plain value (no pointers); dg_sample needs no allocation.
 * Thread safety: a prepared table is read-only and may be shared by threads. */
#ifndef DPT_PRIVACY_DGAUSS_H
#define DPT_PRIVACY_DGAUSS_H

#include <dptrain/core.h>
#include <dptrain/privacy.h>

#include "core/isa.h"
#include "core/keystream.h"

#define DG_GROUP 64        /* candidates per group: one keystream record, one tail pool */
#define DG_MAX_CELLS 40    /* body cells (the selector table) */
#define DG_TAIL_RECORDS 2  /* tail candidates a group can serve (more: counted in tv) */
#define DG_TAIL_WORDS 4    /* 64-bit words per tail record */
/* keystream bytes per group: 64 selector words (4 bytes), 64 body words (8 bytes), the
 * tail records */
#define DG_GROUP_BYTES (DG_GROUP * 4 + DG_GROUP * 8 + DG_TAIL_RECORDS * DG_TAIL_WORDS * 8)

/* N_Z(0, sigma^2) by rejection from a piecewise-uniform proposal over m (see dgauss.c; a
 * candidate (m, sign) is the value m or -(m + 1), so every integer has one representation):
 * body cells c < nb of width 2^kw chosen by a 32-bit cumulative table t, a geometric tail
 * of cells 2^kv wide beyond E = nb 2^kw; every candidate is accepted with probability
 * exp(log acceptance) computed in double, compared with a uniform of nu bits (body) or a
 * floating-point uniform (tail). */
typedef struct {
    double sigma;                 /* lattice units, in [DG_SIGMA_MIN, DG_SIGMA_MAX] */
    int kw, kv, nu;               /* body cell width 2^kw, tail cell width 2^kv, body U bits */
    int nb;                       /* body cells; a selector word >= t[nb] picks the tail */
    int32_t E;                    /* body end nb 2^kw (first tail magnitude) */
    uint32_t t[DG_MAX_CELLS + 1]; /* t[0] = 0 < t[1] < ... < t[nb]: cell c is [t[c], t[c+1]) */
    double L[DG_MAX_CELLS];       /* ln acceptance at the start of body cell c (dg_table_prepare
                                   * rounds it to the float pair the kernel reads) */
    double g0_hi, g0_lo;          /* tail: ln acceptance = g0 + jj ln 2 - (m^2 - E^2) / (2 sigma^2) */
    double inv2s2;                /* 1 / (2 sigma^2) */
    double scale_u;               /* 2^nu */
    /* derived by dg_table_prepare from t and L: what the vector kernel reads */
    int32_t tb[DG_MAX_CELLS][8];  /* (t[j + 1] ^ 2^31) - 1, broadcast: a >= t <=> biased a > tb */
    float Lhi[DG_MAX_CELLS], Llo[DG_MAX_CELLS]; /* L = (double)Lhi + (double)Llo */
    /* set by dg_table_verify: the exact distribution of this table's output against
     * N_Z(0, sigma^2), by enumeration of every magnitude the sampler can produce */
    double mu;       /* max |ln(p_table(z) / p_ideal(z))| on the table's support, plus the
                      * truncated ideal mass and a margin for the long double evaluation */
    double tv;       /* per output: truncated ideal mass + P(a group needs > 2 tail records) share */
    double p_accept; /* acceptance probability of a candidate */
    double p_tail;   /* probability that a candidate comes from the tail */
    double var;      /* variance of the table's output distribution */
} dg_table;

#define DG_SIGMA_MIN 0.25
#define DG_SIGMA_MAX 65536.0

/* Builds the table for sigma (t, L, tail constants), prepares and verifies it. Errors:
 * DPT_EINVAL for sigma outside [DG_SIGMA_MIN, DG_SIGMA_MAX]. ~10 ms per 2^14 of sigma. */
dpt_status dg_table_build(double sigma, dg_table *T);
/* Re-derives tb, Lhi, Llo from t and L (after a test edits them), and sets each L to the
 * value of its float pair (what the kernel computes with). */
void dg_table_prepare(dg_table *T);
/* Enumerates the output distribution of T (as prepared) and sets mu, tv, p_accept,
 * p_tail, var. Errors: DPT_ERANGE when the table is inconsistent (t not increasing, an
 * acceptance probability above 1). */
dpt_status dg_table_verify(dg_table *T);
/* The table for the secure mechanism's scale s = 2^DPT_DGAUSS_LOG2_SCALE, built and
 * verified once per process (thread-safe); NULL if that failed (then DPT_ERANGE is set). */
const dg_table *dg_table_secure(void);

/* z[0, n) = n independent draws of T's distribution, from substream `sub` of r's keystream
 * (starting at its block 0): as many 64-candidate groups as it takes, each a fixed
 * 832-byte keystream record processed without branches or memory indices that depend on
 * its values. work: [n + DG_GROUP] int32 scratch (may alias z only if z has that room). */
dpt_status dg_sample(const dg_table *T, const dpt_rng *r, uint64_t sub, int32_t *z, size_t n, int32_t *work);
/* The same from an open keystream reader (core/keystream.h) positioned where the draws
 * start: a thread reuses one reader for all its chunks (dpt_keystream_seek). */
dpt_status dg_sample_from(const dg_table *T, dpt_keystream *ks, int32_t *z, size_t n, int32_t *work);

/* One group, for the tests and the constant-time check: candidates from the keystream
 * record `rec` (DG_GROUP_BYTES bytes, little-endian words), accepted values appended to
 * out (room for DG_GROUP); returns how many. */
int dg_group(const dg_table *T, const uint8_t *rec, int32_t *out);
#if DPT_ISA_DISPATCH /* both builds by name (core/isa.h): dg_group and dg_sample_from call one */
int dg_group_base(const dg_table *T, const uint8_t *rec, int32_t *out);
int dg_group_v3(const dg_table *T, const uint8_t *rec, int32_t *out);
dpt_status dg_sample_from_base(const dg_table *T, dpt_keystream *ks, int32_t *z, size_t n, int32_t *work);
dpt_status dg_sample_from_v3(const dg_table *T, dpt_keystream *ks, int32_t *z, size_t n, int32_t *work);
dpt_status dg_table_verify_base(dg_table *T);
dpt_status dg_table_verify_v3(dg_table *T);
#endif

#if DPT_ISA_DISPATCH
/* the secure lattice mechanism's two builds */
dpt_status dpt_privacy_noise_add_secure_ex_base(dpt_rng *noise, float *sum, size_t n, double sigma, double C,
                                                double scale, dpt_dgauss_method method, int threads);
dpt_status dpt_privacy_noise_add_secure_ex_v3(dpt_rng *noise, float *sum, size_t n, double sigma, double C,
                                              double scale, dpt_dgauss_method method, int threads);
#endif

#endif
