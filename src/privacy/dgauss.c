/* The table sampler of the discrete Gaussian N_Z(0, sigma^2), P(z) = rho(z) / S with
 * rho(z) = exp(-z^2 / (2 sigma^2)), S = sum_z rho(z): the fast secure noise of DP-SGD
 * (docs/dpsgd.md, "Noise"). Rejection sampling (von Neumann) from a proposal whose
 * probabilities are exact dyadic rationals, so that the distribution of the output is known
 * exactly and is checked, not assumed (dg_table_verify).
 *
 * A candidate is a magnitude m >= 0 and a sign bit b, the value z = m (b = 0) or -(m + 1)
 * (b = 1): every integer has exactly one representation, |z| = m + b.
 *   body (m < E = nb w, w = 2^kw ~ sigma/4): a 32-bit selector word a picks cell
 *     c = #{j : a >= t[j]} (a cumulative table t[1..nb], weights proportional to rho at the
 *     cell start, every cell scanned: no branch and no memory index depends on a), then
 *     m = c w + off with off uniform on kw bits;
 *   tail (a >= t[nb], probability ~2^-28 at sigma = 2^14): m = E + j v + off, v = 2^kv,
 *     j = the trailing zeros of a 64-bit word (P(j) = 2^-(j+1)), off uniform: a
 *     geometric envelope that dominates the Gaussian beyond E because E v / sigma^2 >= ln 2.
 * The candidate is accepted when a uniform U is below
 *     a(m, b) = 2 rho(m + b) / (S M q(m))   (q the proposal pmf of m, M = max 2 rho / (S q))
 * computed as exp(ln a) in double (dg_exp: Cody-Waite reduction, degree-13 polynomial);
 * U has nu bits (body) or is a floating-point uniform (tail, where a(m) can be small).
 * The accepted sequence is i.i.d. with P(z) proportional to q(m) P(U < a(m, b)) / 2, and the
 * number of candidates an output takes is independent of its value (rejection sampling),
 * so consuming candidates until n are accepted leaks nothing about them.
 *
 * Constant time: a group of 64 candidates is one fixed 832-byte keystream record; the
 * selector is compared with every threshold, the per-cell constant is picked from
 * registers (vector permutes), the tail records are computed for every group and merged by
 * masks, and only the accept bits (independent of the accepted values) steer the output
 * position. Two tail records serve a group: the first tail candidate of the group takes
 * record 0, any later one record 1, a third one would reuse record 1 (probability
 * < C(64,3) p_tail^3, counted in the total variation below).
 *
 * Exactness: dg_table_verify enumerates every magnitude the sampler can produce (about
 * 14 sigma of them), computes its acceptance exactly as the sampler does (the same inline
 * functions), the number of U values below it, hence the table's output pmf, and compares
 * it with rho / S in long double: mu = max |ln ratio| (pointwise, for the RDP accountant)
 * and tv (truncated ideal mass beyond E + 64 v and the tail-record shortfall).
 *
 * Built twice on x86-64 (core/isa.h): the sampler (dg_group, dg_sample_from) also for
 * x86-64-v3 (dgauss_v3.c: AVX2 vectors, fma4 one instruction) and chosen per call by the CPU;
 * the baseline build's fma4 is libm's fma per lane (correctly rounded too: both builds give
 * the same bits, and a verification covers both), about 7x slower. So is the verification;
 * the table construction exists once. */
#include "privacy/dgauss.h"

#include <dptrain/privacy.h>
#include <math.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <string.h>

#include "core/keystream.h"

/* Vector values are passed between static functions only: the ABI note GCC gives for them
 * in builds without AVX (-Wpsabi) does not concern any caller. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef int32_t v8i_u __attribute__((vector_size(32), aligned(4))); /* an unaligned load */
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef int64_t v4l __attribute__((vector_size(32)));
typedef uint64_t v4q __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));

#define BC4D(x) ((v4d){(x), (x), (x), (x)})
#define BC4Q(x) ((v4q){(x), (x), (x), (x)})
#define BC8I(x) ((v8i){(x), (x), (x), (x), (x), (x), (x), (x)})

/* v[idx[k]] in every lane k (idx in [0, 8)): a register permute, never a memory index, so
 * constant time. With AVX2, GCC's __builtin_shuffle (a variable index vector: vpermps) or
 * the intrinsic (clang, the fuzz build); without it a select over the 8 lanes (GCC lowers
 * the shuffle to loads indexed by idx there: tests/test_ct_dgauss.c saw them). */
#if defined(__clang__) && defined(__AVX2__)
#include <immintrin.h>
#endif
static inline v8f perm8f(v8f v, v8i idx) {
#if !defined(__clang__) && defined(__AVX2__)
    return __builtin_shuffle(v, idx);
#elif defined(__AVX2__)
    return (v8f)_mm256_permutevar8x32_ps((__m256)v, (__m256i)idx);
#else
    v8i r = BC8I(0), vi = (v8i)v;
    for (int j = 0; j < 8; j++) r |= (idx == BC8I(j)) & BC8I(vi[j]);
    return (v8f)r;
#endif
}

#define LOG2E 0x1.71547652b82fep0
#define LN2_HI 0x1.62e42fefa3800p-1 /* 42 significant bits: n LN2_HI is exact for |n| < 2^11 */
#define LN2_LO 0x1.ef35793c7673p-45
#define ROUND_MAGIC 0x1.8p52        /* x + 1.5 2^52 - 1.5 2^52 rounds x to an integer */
#define TWO52_BITS 0x4330000000000000ull /* the double 2^52: its bits | k is 2^52 + k */
#define DG_BATCH 8                  /* groups of keystream per cipher call */

/* ==== Acceptance: shared by the sampler and the verification ==== */

/* a b + c rounded once: the FMA instruction where the build targets it, libm's fma (also
 * correctly rounded) otherwise, so every build computes the same bits. */
static inline v4d fma4(v4d a, v4d b, v4d c) {
#if defined(__FMA__)
    return __builtin_ia32_vfmaddpd256(a, b, c);
#else
    v4d r;
    for (int k = 0; k < 4; k++) r[k] = fma(a[k], b[k], c[k]);
    return r;
#endif
}

/* e^(g + glo) for g in [-700, 1] (glo: a small correction, for a double-double input):
 * n = round(g log2 e), r = g - n ln 2 in two parts (Cody-Waite), e^r by its Taylor
 * polynomial of degree 13 (|r| <= 0.347: remainder < 2^-52) in Horner form with fused
 * multiply-adds, times 2^n through the exponent bits. Relative error a few 2^-53
 * (dg_table_verify measures the consequence, mu). */
static inline v4d dg_exp(v4d g, v4d glo) {
    const v4d magic = BC4D(ROUND_MAGIC);
    v4d t = fma4(g, BC4D(LOG2E), magic);
    v4d nd = t - magic;
    v4d r = fma4(nd, BC4D(-LN2_HI), g); /* exact: n LN2_HI has 42 + 11 bits, g near it */
    r = fma4(nd, BC4D(-LN2_LO), r) + glo;
    v4d p = BC4D(1.0 / 6227020800.0);
    p = fma4(p, r, BC4D(1.0 / 479001600.0));
    p = fma4(p, r, BC4D(1.0 / 39916800.0));
    p = fma4(p, r, BC4D(1.0 / 3628800.0));
    p = fma4(p, r, BC4D(1.0 / 362880.0));
    p = fma4(p, r, BC4D(1.0 / 40320.0));
    p = fma4(p, r, BC4D(1.0 / 5040.0));
    p = fma4(p, r, BC4D(1.0 / 720.0));
    p = fma4(p, r, BC4D(1.0 / 120.0));
    p = fma4(p, r, BC4D(1.0 / 24.0));
    p = fma4(p, r, BC4D(1.0 / 6.0));
    p = fma4(p, r, BC4D(0.5));
    p = fma4(p, r, BC4D(1.0));
    p = fma4(p, r, BC4D(1.0));
    v4l n = (v4l)t - (v4l)magic; /* the integer n from the bits of t */
    return (v4d)((v4l)p + (n << 52));
}

/* Body acceptance of the candidate with |z| = s + x (s the cell start, x = offset + sign
 * bit) in the cell whose ln acceptance at its start is L: exp(L - (|z|^2 - s^2) / (2 sigma^2)),
 * |z|^2 - s^2 = (2 s + x) x exactly (< 2^53). The exponent stays in [-3, 0]. */
static inline v4d dg_body_ahat(v4d L, v4d s, v4d x, double inv2s2) {
    return dg_exp(fma4((s + s + x) * x, BC4D(-inv2s2), L), BC4D(0.0));
}

/* Tail acceptance of |z| = E + d (d = j 2^kv + offset + sign bit, 0 <= j <= 63):
 * exp(g0 + jj ln 2 - ((E + d)^2 - E^2) / (2 sigma^2)) with jj = j + 1 (j = 63: P(j) = 2^-63,
 * so jj = 63), the sum formed as a double-double (its terms reach ~100 while the result is
 * near 0), and below -700 taken as -700 (e^-700 is below every tail uniform). */
static inline double dg_tail_ahat(const dg_table *T, int j, int64_t d) {
    int jj = j + 1 - (j == 63);
    double B = (double)(d * (d + 2 * (int64_t)T->E)) * T->inv2s2; /* (E + d)^2 - E^2 < 2^53: exact */
    double A = (double)jj * LN2_HI;                                 /* exact */
    double s = A - B;
    double hi = T->g0_hi + s, bb = hi - T->g0_hi;
    double err = (T->g0_hi - (hi - bb)) + (s - bb); /* TwoSum: hi + err = g0_hi + s exactly */
    double lo = (err + T->g0_lo) + (double)jj * LN2_LO;
    /* the clamp as a mask from integer arithmetic on the bits (a scalar ?: became a branch,
     * and so did a vector compare of equal lanes in the baseline build: tests/test_ct_dgauss.c):
     * hi < -700 when its sign bit is set and its magnitude's bits exceed those of 700 */
    int64_t hb, b700;
    const double d700 = 700.0;
    memcpy(&hb, &hi, sizeof hb);
    memcpy(&b700, &d700, sizeof b700);
    const int64_t below1 = -(int64_t)(((uint64_t)hb >> 63) & ((uint64_t)(b700 - (hb & INT64_MAX)) >> 63));
    v4d h = BC4D(hi), l = BC4D(lo);
    v4l below = {below1, below1, below1, below1};
    h = (v4d)(((v4l)h & ~below) | ((v4l)BC4D(-700.0) & below));
    l = (v4d)((v4l)l & ~below);
    v4d a = dg_exp(h, l);
    return a[0];
}

/* One tail record w[4]: j = trailing zeros of w[0] (w[0] = 0 counts as 63), offset and
 * sign bit from w[1], U = (1 + w[2] mantissa) 2^(-1-e) with e = leading zeros of w[3] (a
 * uniform in (0, 1) with 52 significant bits at every scale). */
static inline void dg_tail_record(const dg_table *T, const uint64_t w[DG_TAIL_WORDS], int64_t *z, int64_t *acc) {
    int j = __builtin_ctzll(w[0] | (1ull << 63));
    int64_t off = (int64_t)(w[1] & (((uint64_t)1 << T->kv) - 1)), b = (int64_t)((w[1] >> T->kv) & 1);
    int64_t d = ((int64_t)j << T->kv) + off;
    double a = dg_tail_ahat(T, j, d + b);
    int e = __builtin_clzll(w[3] | 1);
    uint64_t ub = ((uint64_t)(1022 - e) << 52) | (w[2] >> 12);
    double u;
    memcpy(&u, &ub, sizeof u);
    *z = (T->E + d) ^ -b;
    *acc = -(int64_t)(u < a);
}

/* ==== The group kernel ==== */

static inline uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t load_le64(const uint8_t *p) { return load_le32(p) | (uint64_t)load_le32(p + 4) << 32; }

#define NV (DG_GROUP / 8) /* 8-lane vectors per group */

/* Where a value derived from the keystream becomes public: the accept bits (rejection
 * sampling's accept/reject sequence is independent of the accepted values). The
 * constant-time test (tests/test_ct_dgauss.c) compiles this file with the hook telling
 * valgrind's memcheck so, and checks that nothing else secret reaches a branch or an
 * address. */
#ifndef DG_DECLASSIFY
#define DG_DECLASSIFY(p, n) ((void)0)
#endif

int DPT_ISA_NAME(dg_group)(const dg_table *T, const uint8_t *rec, int32_t *out) {
    const uint8_t *pa = rec, *pb = rec + DG_GROUP * 4, *pt = pb + DG_GROUP * 8;
    /* the two tail records: every group computes both */
    uint64_t tw[DG_TAIL_RECORDS * DG_TAIL_WORDS];
    for (int k = 0; k < DG_TAIL_RECORDS * DG_TAIL_WORDS; k++) tw[k] = load_le64(pt + 8 * k);
    int64_t zt0, zt1, at0, at1;
    dg_tail_record(T, tw, &zt0, &at0);
    dg_tail_record(T, tw + DG_TAIL_WORDS, &zt1, &at1);
    /* 1. selector: c = #{j : a >= t[j + 1]}, every threshold against every candidate
     * (padding thresholds never match); signed compares on words biased by 2^31. Then the
     * cell's L from registers (a permute per block of 8 cells, the block of c kept) and
     * the cell start c 2^kw; tail lanes (c = nb) look up cell nb - 1 (unused). */
    const int nb = T->nb, nb8 = (nb + 7) & ~7, nreg = nb8 / 8, kw = T->kw;
    v8f Lh[DG_MAX_CELLS / 8], Ll[DG_MAX_CELLS / 8];
    memcpy(Lh, T->Lhi, sizeof Lh);
    memcpy(Ll, T->Llo, sizeof Ll);
    float Lhf[DG_GROUP] __attribute__((aligned(32))), Llf[DG_GROUP] __attribute__((aligned(32)));
    int32_t cw[DG_GROUP] __attribute__((aligned(32))), tl[DG_GROUP] __attribute__((aligned(32)));
    for (int v = 0; v < NV; v++) {
        v8u a;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(&a, pa + 32 * v, sizeof a);
#else
        for (int k = 0; k < 8; k++) a[k] = load_le32(pa + 32 * v + 4 * k);
#endif
        const v8i ab = (v8i)(a ^ (v8u)BC8I(INT32_MIN));
        v8i c = BC8I(0);
        for (int j = 0; j < nb8; j += 8) {
            const v8i_u *tj = (const v8i_u *)T->tb[j];
            c -= (ab > tj[0]);
            c -= (ab > tj[1]);
            c -= (ab > tj[2]);
            c -= (ab > tj[3]);
            c -= (ab > tj[4]);
            c -= (ab > tj[5]);
            c -= (ab > tj[6]);
            c -= (ab > tj[7]);
        }
        v8i tail = (c == BC8I(nb)), cl = c + tail;
        v8i blk = cl >> 3, idx = cl & BC8I(7);
        v8f lh = Lh[0], ll = Ll[0];
        lh = perm8f(lh, idx);
        ll = perm8f(ll, idx);
        for (int r = 1; r < nreg; r++) {
            v8i sel = (blk == BC8I(r));
            lh = (v8f)(((v8i)lh & ~sel) | ((v8i)perm8f(Lh[r], idx) & sel));
            ll = (v8f)(((v8i)ll & ~sel) | ((v8i)perm8f(Ll[r], idx) & sel));
        }
        v8i s = c << kw;
        memcpy(Lhf + 8 * v, &lh, sizeof lh);
        memcpy(Llf + 8 * v, &ll, sizeof ll);
        memcpy(cw + 8 * v, &s, sizeof s);
        memcpy(tl + 8 * v, &tail, sizeof tail);
    }
    /* 2. 4 candidates at a time: m = c 2^kw + offset, accepted when U < a(m, b); a tail
     * candidate takes record 0 if no earlier candidate of the group was a tail, else
     * record 1 (a prefix OR of the tail flags carried across the group) */
    const double scale_u = T->scale_u, inv2s2 = T->inv2s2;
    const int ushift = 64 - T->nu;
    const uint64_t wmask = ((uint64_t)1 << kw) - 1;
    int64_t zv[DG_GROUP] __attribute__((aligned(32))), av[DG_GROUP] __attribute__((aligned(32)));
    v4l earlier = {0, 0, 0, 0};
    const v4l zero4 = {0, 0, 0, 0};
    for (int q = 0; q < DG_GROUP / 4; q++) {
        v4q bw;
        v4i s4, t4;
        v4f lh4, ll4;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(&bw, pb + 32 * q, sizeof bw);
#else
        for (int k = 0; k < 4; k++) bw[k] = load_le64(pb + 32 * q + 8 * k);
#endif
        memcpy(&s4, cw + 4 * q, sizeof s4);
        memcpy(&t4, tl + 4 * q, sizeof t4);
        memcpy(&lh4, Lhf + 4 * q, sizeof lh4);
        memcpy(&ll4, Llf + 4 * q, sizeof ll4);
        v4d L = __builtin_convertvector(lh4, v4d) + __builtin_convertvector(ll4, v4d);
        v4q sign = bw & BC4Q(1), offq = (bw >> 1) & BC4Q(wmask), uq = bw >> ushift;
        v4d x = (v4d)((offq + sign) | BC4Q(TWO52_BITS)) - BC4D(0x1p52); /* exact: < 2^52 */
        v4d u = (v4d)(uq | BC4Q(TWO52_BITS)) - BC4D(0x1p52);
        v4d ah = dg_body_ahat(L, __builtin_convertvector(s4, v4d), x, inv2s2);
        v4l acc = (u < ah * BC4D(scale_u));
        v4l z = (__builtin_convertvector(s4, v4l) + (v4l)offq) ^ -(v4l)sign;
        v4l t = __builtin_convertvector(t4, v4l), pre = t | __builtin_shufflevector(t, zero4, 4, 0, 1, 2);
        pre |= __builtin_shufflevector(pre, zero4, 4, 4, 0, 1);
        v4l before = __builtin_shufflevector(pre, zero4, 4, 0, 1, 2) | earlier;
        v4l ztl = ((v4l){zt0, zt0, zt0, zt0} & ~before) | ((v4l){zt1, zt1, zt1, zt1} & before);
        v4l atl = ((v4l){at0, at0, at0, at0} & ~before) | ((v4l){at1, at1, at1, at1} & before);
        z = (z & ~t) | (ztl & t);
        acc = (acc & ~t) | (atl & t);
        earlier |= (v4l){pre[3], pre[3], pre[3], pre[3]};
        memcpy(zv + 4 * q, &z, sizeof z);
        memcpy(av + 4 * q, &acc, sizeof acc);
    }
    /* 3. accepted values in order: the store position depends on the accept bits only */
    DG_DECLASSIFY(av, sizeof av);
    int64_t n = 0;
#pragma GCC unroll 16
    for (int i = 0; i < DG_GROUP; i++) {
        out[n] = (int32_t)zv[i];
        n -= av[i];
    }
    return (int)n;
}

#if !DPT_ISA_V3_TU
dpt_status dg_sample(const dg_table *T, const dpt_rng *r, uint64_t sub, int32_t *z, size_t n, int32_t *work) {
    dpt_keystream ks;
    DPT_TRY(dpt_keystream_open(&ks, r, sub, 0));
    dpt_status st = dg_sample_from(T, &ks, z, n, work);
    dpt_keystream_close(&ks);
    return st;
}
#endif

#if DPT_ISA_DISPATCH && !DPT_ISA_V3_TU
int dg_group(const dg_table *T, const uint8_t *rec, int32_t *out) {
    return (dpt_isa_v3() ? dg_group_v3 : dg_group_base)(T, rec, out);
}
dpt_status dg_sample_from(const dg_table *T, dpt_keystream *ks, int32_t *z, size_t n, int32_t *work) {
    return (dpt_isa_v3() ? dg_sample_from_v3 : dg_sample_from_base)(T, ks, z, n, work);
}
#endif

dpt_status DPT_ISA_NAME(dg_sample_from)(const dg_table *T, dpt_keystream *ks, int32_t *z, size_t n, int32_t *work) {
    uint8_t buf[DG_BATCH * DG_GROUP_BYTES] __attribute__((aligned(64)));
    /* a bound no run reaches: 4x the expected number of groups, plus a margin */
    const uint64_t cap = (uint64_t)(4.0 * (double)n / (DG_GROUP * T->p_accept)) + 64;
    size_t got = 0;
    uint64_t g = 0;
    dpt_status st = DPT_OK;
    while (got < n) {
        if (g % DG_BATCH == 0) {
            st = dpt_keystream_read(ks, buf, sizeof buf);
            if (st != DPT_OK) break;
        }
        got += (size_t)DPT_ISA_NAME(dg_group)(T, buf + (g % DG_BATCH) * DG_GROUP_BYTES, work + got);
        if (++g > cap) {
            st = dpt_set_error(DPT_ERANGE, "discrete Gaussian table sampler: %llu groups for %zu values "
                                           "(acceptance %g): the table is broken", (unsigned long long)g, n,
                               T->p_accept);
            break;
        }
    }
    OPENSSL_cleanse(buf, sizeof buf); /* the keystream of a secure stream is the noise (memset: dropped) */
    if (st == DPT_OK && z != work) memcpy(z, work, n * sizeof *z);
    return st;
}

/* ==== Table construction ==== */

static long double rho_l(long double x, long double sigma) { return expl(-x * x / (2 * sigma * sigma)); }

/* S = sum over all integers of rho: Poisson summation (sqrt(2 pi) sigma, the next term
 * exp(-2 pi^2 sigma^2) < 1e-130 for sigma >= 4), else a direct sum. */
static long double normalizer(long double sigma) {
    const long double pi = 3.141592653589793238462643383279503L;
    if (sigma >= 4) return sqrtl(2 * pi) * sigma;
    long double s = 1;
    for (int z = 1; z <= (int)(40 * sigma) + 40; z++) s += 2 * rho_l(z, sigma);
    return s;
}

#if !DPT_ISA_V3_TU
void dg_table_prepare(dg_table *T) {
    T->scale_u = ldexp(1.0, T->nu);
    for (int j = 0; j < DG_MAX_CELLS; j++) {
        /* beyond nb: INT32_MAX, which no biased word exceeds (padding of the scan) */
        int32_t b = j < T->nb ? (int32_t)(T->t[j + 1] ^ 0x80000000u) - 1 : INT32_MAX;
        for (int k = 0; k < 8; k++) T->tb[j][k] = b;
        double L = j < T->nb ? T->L[j] : 0.0;
        T->Lhi[j] = (float)L;
        T->Llo[j] = (float)(L - (double)T->Lhi[j]);
        if (j < T->nb) T->L[j] = (double)T->Lhi[j] + (double)T->Llo[j];
    }
}

dpt_status dg_table_build(double sigma, dg_table *T) {
    DPT_CHECK(isfinite(sigma) && sigma >= DG_SIGMA_MIN && sigma <= DG_SIGMA_MAX, DPT_EINVAL,
              "discrete Gaussian table: sigma must be in [%g, %g] lattice units, got %g", DG_SIGMA_MIN, DG_SIGMA_MAX,
              sigma);
    memset(T, 0, sizeof *T);
    const long double sg = sigma, S = normalizer(sg);
    T->sigma = sigma;
    /* body: cells of w = 2^kw ~ sigma / 4 up to E >= 6 sigma (at most 34 cells) */
    int kw = (int)lround(log2(sigma / 4));
    if (kw < 0) kw = 0;
    const int64_t w = (int64_t)1 << kw;
    int nb = (int)ceil(6 * sigma / (double)w);
    if (nb < 1) nb = 1;
    DPT_ASSERT(nb <= DG_MAX_CELLS);
    const int64_t E = nb * w;
    /* tail: cells of v = 2^kv with E v / sigma^2 >= ln 2 (the envelope halves per cell,
     * the Gaussian falls at least as fast) */
    int kv = 0;
    while ((long double)E * (long double)((int64_t)1 << kv) / (sg * sg) < logl(2.0L)) kv++;
    const int64_t v = (int64_t)1 << kv;
    DPT_ASSERT(E + 64 * v < ((int64_t)1 << 30));
    T->kw = kw, T->kv = kv, T->nb = nb, T->E = (int32_t)E;
    T->nu = 63 - kw < 52 ? 63 - kw : 52;
    /* weights: rho at each cell start (the proposal density within a cell is flat at the
     * Gaussian's maximum there), the tail's first cell at the same density */
    long double om[DG_MAX_CELLS + 1], tot = 0;
    for (int c = 0; c < nb; c++) tot += om[c] = rho_l((long double)(c * w), sg);
    tot += om[nb] = 2 * rho_l((long double)E, sg) * (long double)v / (long double)w;
    const long double lam = 4294967296.0L / tot;
    uint64_t mc[DG_MAX_CELLS + 1], rest = 0;
    for (int c = 1; c <= nb; c++) {
        long double x = ceill(lam * om[c]);
        mc[c] = x < 1 ? 1 : (uint64_t)x; /* up: no cell below its share (M stays that of cell 0) */
        rest += mc[c];
    }
    DPT_ASSERT(rest < ((uint64_t)1 << 32));
    mc[0] = ((uint64_t)1 << 32) - rest;
    uint64_t acc = 0;
    T->t[0] = 0;
    for (int c = 1; c <= nb; c++) T->t[c] = (uint32_t)(acc += mc[c - 1]);
    /* M = max of 2 rho / (S q) over every candidate: at a cell start (rho falls within a
     * cell; the tail's cells fall by at least half per cell, so its first cell) */
    long double M = 0;
    for (int c = 0; c < nb; c++) {
        long double x = ldexpl(rho_l((long double)(c * w), sg) / (S * (long double)mc[c]), 33 + kw);
        if (x > M) M = x;
    }
    long double xt = ldexpl(rho_l((long double)E, sg) / (S * (long double)mc[nb]), 34 + kv);
    if (xt > M) M = xt;
    for (int c = 0; c < nb; c++) {
        long double s = (long double)(c * w);
        T->L[c] = (double)(logl(ldexpl(1.0L / (S * M * (long double)mc[c]), 33 + kw)) - s * s / (2 * sg * sg));
    }
    long double g0 = logl(ldexpl(1.0L / (S * M * (long double)mc[nb]), 33 + kv)) - (long double)E * E / (2 * sg * sg);
    T->g0_hi = (double)g0;
    T->g0_lo = (double)(g0 - (long double)T->g0_hi);
    T->inv2s2 = (double)(1.0L / (2 * sg * sg));
    dg_table_prepare(T);
    return dg_table_verify(T);
}

#endif /* !DPT_ISA_V3_TU */

/* ==== Verification: the exact output distribution of a table ====
 * In both builds (core/isa.h): the v3 one computes the same bits as the baseline (each fma4
 * is correctly rounded in both), ~5x faster; it runs once per table. */

/* P(U < x) for the tail's floating uniform U = (1 + f 2^-52) 2^(-1-e), P(e) = 2^-(e+1)
 * (e < 63), P(63) = 2^-63, f uniform on 52 bits. */
static long double tail_u_below(double x) {
    if (!(x > 0)) return 0;
    if (x >= 1) return 1;
    int K = -ilogb(x) - 1; /* x in [2^(-K-1), 2^-K) */
    if (K > 63) return 0;
    /* e > K: every U < 2^-(K+1) <= x, total mass 2^-(K+1); e = K: U in [2^(-K-1), 2^-K) */
    long double cnt = ceill(ldexpl((long double)x, 53 + K)) - 0x1p52L;
    if (cnt < 0) cnt = 0;
    if (cnt > 0x1p52L) cnt = 0x1p52L;
    long double pe = ldexpl(1.0L, K < 63 ? -(K + 1) : -63);
    return (K < 63 ? ldexpl(1.0L, -(K + 1)) : 0.0L) + pe * cnt * 0x1p-52L;
}

/* ln of the exact pmf of N_Z(0, sigma^2) at z, and of the table's: ln(W / P), W the
 * probability that a candidate is accepted with the value z. */
#define DG_LN_G (-60.0L) /* the pointwise comparison covers every z with ln p(z) >= this */

dpt_status DPT_ISA_NAME(dg_table_verify)(dg_table *T) {
    const long double sg = T->sigma, S = normalizer(sg), lnS = logl(S), s2x2 = 2 * sg * sg;
    const int64_t w = (int64_t)1 << T->kw, v = (int64_t)1 << T->kv, E = T->E;
    for (int c = 1; c <= T->nb; c++)
        DPT_CHECK(T->t[c] > T->t[c - 1], DPT_ERANGE, "discrete Gaussian table: threshold %d not increasing", c);
    const long double pt = ldexpl(4294967296.0L - (long double)T->t[T->nb], -32);
    /* W(m, b): P(candidate = (m, b), accepted), for the value m (b = 0) or -(m + 1) (b = 1).
     * Pass 0 sums it (the acceptance probability P, and the variance); pass 1 compares
     * W(m) / P with the exact pmf on G = {ln p(z) >= DG_LN_G} (mu) and collects the mass
     * of both outside G. Kahan sums in long double. */
    long double sum = 0, comp = 0, var = 0, vcomp = 0, out_tab = 0, out_ideal = 0, maxlr = 0;
    int over = 0;
#define DG_ADD(total, cc, x)                                                               \
    do {                                                                                   \
        long double y_ = (x) - cc, t_ = total + y_;                                        \
        cc = (t_ - total) - y_;                                                            \
        total = t_;                                                                        \
    } while (0)
    for (int pass = 0; pass < 2; pass++) {
        const long double lnP = pass ? logl(sum) : 0;
        for (int64_t m0 = 0; m0 < E + 64 * v; m0 += 4)
            for (int64_t b = 0; b < 2; b++) {
                long double W[4];
                /* body lanes: the kernel's arithmetic on 4 candidates at once (lanes past the
                 * body compute something unused) */
                v4d L, s, x;
                for (int k = 0; k < 4; k++) {
                    int64_t m = m0 + k < E ? m0 + k : E - 1, c = m >> T->kw;
                    L[k] = T->L[c], s[k] = (double)(c * w), x[k] = (double)(m - c * w + b);
                }
                v4d ah = dg_body_ahat(L, s, x, T->inv2s2);
                for (int k = 0; k < 4; k++) {
                    int64_t m = m0 + k;
                    if (m < E) {
                        int64_t c = m >> T->kw;
                        long double cnt = ceill(ldexpl((long double)ah[k], T->nu));
                        if (ah[k] > 1 + 0x1p-40) over = 1; /* beyond rounding: the envelope is wrong */
                        if (cnt > ldexpl(1.0L, T->nu)) cnt = ldexpl(1.0L, T->nu);
                        W[k] = ldexpl(0.5L * (long double)(T->t[c + 1] - T->t[c]) * cnt, -32 - T->kw - T->nu);
                    } else { /* tail: P(U < a) of the floating uniform */
                        int64_t d = m - E;
                        int j = (int)(d >> T->kv);
                        double at = dg_tail_ahat(T, j, d + b);
                        if (at > 1 + 0x1p-40) over = 1;
                        W[k] = 0.5L * pt * ldexpl(tail_u_below(at), -(j < 63 ? j + 1 : 63) - T->kv);
                    }
                }
                for (int k = 0; k < 4 && m0 + k < E + 64 * v; k++) {
                    long double az = (long double)(m0 + k + b), lnp = -az * az / s2x2 - lnS;
                    if (!pass) {
                        DG_ADD(sum, comp, W[k]);
                        DG_ADD(var, vcomp, W[k] * az * az);
                    } else if (lnp >= DG_LN_G) {
                        long double lr = W[k] > 0 ? logl(W[k]) - lnP - lnp : INFINITY;
                        if (!(fabsl(lr) <= maxlr)) maxlr = fabsl(lr);
                    } else {
                        out_tab += W[k] / sum;
                        out_ideal += expl(lnp);
                    }
                }
            }
    }
#undef DG_ADD
    DPT_CHECK(!over, DPT_ERANGE, "discrete Gaussian table: an acceptance probability exceeds 1 (broken table)");
    DPT_CHECK(isfinite(maxlr), DPT_ERANGE,
              "discrete Gaussian table: a value of non-negligible probability is never produced (broken table)");
    /* ideal mass beyond the table's values, |z| >= X (z = X: only +X is produced):
     * rho(m + 1) / rho(m) <= exp(-X / sigma^2) */
    const long double X = (long double)(E + 64 * v);
    out_ideal += 2 * rho_l(X, sg) / S / (1 - expl(-X / (sg * sg)));
    /* p~ = (p_table on G, p_exact off G) renormalized is within mu + 2 (a + b) of the exact
     * pmf everywhere and within 2 (a + b) of the table's in total variation (docs/dpsgd.md),
     * a = out_tab, b = out_ideal. A group of 64 candidates with 3 or more tail candidates
     * has dependent values: per output, at most (groups per output + 1) times that. */
    const long double ab = 2 * (out_tab + out_ideal), p3 = 41664.0L * powl(pt, 3); /* C(64, 3) */
    T->p_accept = (double)sum;
    T->p_tail = (double)pt;
    T->mu = (double)(maxlr + ab + 0x1p-56L); /* margin: the long double evaluation (~2^-60) */
    T->tv = (double)(ab + p3 * (1 + 1 / (DG_GROUP * sum)));
    T->var = (double)(var / sum);
    return DPT_OK;
}

#if !DPT_ISA_V3_TU
#if DPT_ISA_DISPATCH
dpt_status dg_table_verify(dg_table *T) { return (dpt_isa_v3() ? dg_table_verify_v3 : dg_table_verify_base)(T); }
#endif

/* ==== The secure scale's table, once per process ==== */

static dg_table secure_table;
static dpt_status secure_status = DPT_OK;
static char secure_why[256];
static pthread_once_t secure_once = PTHREAD_ONCE_INIT;

static void secure_build(void) {
    secure_status = dg_table_build(ldexp(1.0, DPT_DGAUSS_LOG2_SCALE), &secure_table);
    if (secure_status != DPT_OK) snprintf(secure_why, sizeof secure_why, "%s", dpt_last_error());
}

const dg_table *dg_table_secure(void) {
    pthread_once(&secure_once, secure_build);
    if (secure_status != DPT_OK) {
        dpt_set_error(DPT_ERANGE, "%s", secure_why);
        return NULL;
    }
    return &secure_table;
}
#endif /* !DPT_ISA_V3_TU */
