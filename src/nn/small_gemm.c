/* Small matrix products without packing, for the per-example gradients of a convolution
 * (dpt_small_gemm in nn_internal.h). OpenBLAS packs both operands into its own layout on
 * every call; at one example's size (mnist_cnn's conv1: 64 x 16 outputs over 196
 * positions) that packing costs more than the multiply-adds (perf of a DP-SGD and a
 * non-private mnist_cnn run, 2026-11-25: of the samples DP-SGD added, 231 were OpenBLAS
 * packing operands and 183 its multiply kernel). Here B is read in place (its rows are already
 * contiguous in n) and A is broadcast one element at a time, so nothing is copied.
 * Register blocks of MR x 16 (two 8-float vectors per row); the last column block is read
 * with masked loads, so no element past column N of B is touched.
 * Built three times on x86-64 (core/isa.h): for the baseline (portable vectors below, no
 * FMA), for x86-64-v3 (small_gemm_v3.c: AVX2 and FMA intrinsics) and for x86-64-v4
 * (small_gemm_v4.c: the two convolution kernels with AVX-512's 16-float vectors, about
 * twice the multiply-adds per instruction), chosen per call by the CPU. */
#include "nn_internal.h"

#include <string.h>

#define MR 6

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
typedef __m256 vf;
typedef __m256i vmask;
#define V_ZERO() _mm256_setzero_ps()
#define V_BCAST(p) _mm256_broadcast_ss(p)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_LOADN(dst, p, m, n) ((dst) = _mm256_maskload_ps((p), (m))) /* lanes >= n not read */
#define V_STORE(p, v) _mm256_storeu_ps(p, v)
static inline vmask v_mask(size_t n) { /* lanes [0, n) on, n <= 8 */
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lane);
}
#else
/* Portable vectors (GCC/Clang extensions), as macros: a function taking or returning a
 * 32-byte vector draws GCC's ABI note when AVX is off. Without FMA each product is rounded
 * before the sum, as a scalar loop under -ffp-contract=off. */
typedef float vf __attribute__((vector_size(32)));
typedef float vf_u __attribute__((vector_size(32), aligned(4), may_alias)); /* unaligned */
typedef size_t vmask;
#define V_ZERO() ((vf){0})
#define V_BCAST(p) ((vf){0} + *(p))
#define V_FMA(a, b, c) ((a) * (b) + (c))
#define V_LOAD(p) (*(const vf_u *)(p))
#define V_LOADN(dst, p, m, n)                         \
    do {                                              \
        (void)(m);                                    \
        (dst) = (vf){0};                              \
        memcpy(&(dst), (p), (n) * sizeof(float));     \
    } while (0)
#define V_STORE(p, v) (*(vf_u *)(p) = (v))
static inline vmask v_mask(size_t n) { return n; }
#endif

/* The 6 x 16 register block both kernels below run: accumulators c<row><half>, the rows'
 * pointers a0..a5 into A (BLOCK_ROWS, also conv_block_z's: rows past mr repeat the last
 * row; their sums are dropped), one step over k (b0, b1: the two 8-float halves of B's row
 * k; ko: the offset of column k in A's rows) and the spill of the accumulators into
 * out[MR][16]. Written out so that the 12 accumulators stay in registers. */
#define BLOCK_ROWS(a, ars, mr)                                                                                         \
    const float *a0 = (a), *a1 = (a) + ((mr) > 1 ? 1 : 0) * (ars), *a2 = (a) + ((mr) > 2 ? 2 : (mr) - 1) * (ars),     \
                *a3 = (a) + ((mr) > 3 ? 3 : (mr) - 1) * (ars), *a4 = (a) + ((mr) > 4 ? 4 : (mr) - 1) * (ars),         \
                *a5 = (a) + ((mr) > 5 ? 5 : (mr) - 1) * (ars)
#define BLOCK_DECLARE(a, ars, mr)                                                                                      \
    vf c00 = V_ZERO(), c01 = V_ZERO(), c10 = V_ZERO(), c11 = V_ZERO(), c20 = V_ZERO(), c21 = V_ZERO();                \
    vf c30 = V_ZERO(), c31 = V_ZERO(), c40 = V_ZERO(), c41 = V_ZERO(), c50 = V_ZERO(), c51 = V_ZERO();                \
    BLOCK_ROWS(a, ars, mr)
#define BLOCK_STEP(b0, b1, ko)                                                                                         \
    do {                                                                                                               \
        vf t_;                                                                                                         \
        t_ = V_BCAST(a0 + (ko)), c00 = V_FMA(t_, b0, c00), c01 = V_FMA(t_, b1, c01);                                   \
        t_ = V_BCAST(a1 + (ko)), c10 = V_FMA(t_, b0, c10), c11 = V_FMA(t_, b1, c11);                                   \
        t_ = V_BCAST(a2 + (ko)), c20 = V_FMA(t_, b0, c20), c21 = V_FMA(t_, b1, c21);                                   \
        t_ = V_BCAST(a3 + (ko)), c30 = V_FMA(t_, b0, c30), c31 = V_FMA(t_, b1, c31);                                   \
        t_ = V_BCAST(a4 + (ko)), c40 = V_FMA(t_, b0, c40), c41 = V_FMA(t_, b1, c41);                                   \
        t_ = V_BCAST(a5 + (ko)), c50 = V_FMA(t_, b0, c50), c51 = V_FMA(t_, b1, c51);                                   \
    } while (0)
#define BLOCK_SPILL(out)                                                                                               \
    do {                                                                                                               \
        V_STORE(out[0], c00), V_STORE(out[0] + 8, c01), V_STORE(out[1], c10), V_STORE(out[1] + 8, c11);               \
        V_STORE(out[2], c20), V_STORE(out[2] + 8, c21), V_STORE(out[3], c30), V_STORE(out[3] + 8, c31);               \
        V_STORE(out[4], c40), V_STORE(out[4] + 8, c41), V_STORE(out[5], c50), V_STORE(out[5] + 8, c51);               \
    } while (0)

/* One block: rows m0 .. m0 + mr - 1 (mr <= MR), columns n0 .. n0 + nc - 1 (nc <= 16). */
static inline __attribute__((always_inline)) void block(size_t mr, size_t nc, size_t K, const float *a, size_t ars,
                                                        size_t acs, const float *b, size_t ldb, float *c,
                                                        size_t crs, size_t ccs, int accumulate) {
    BLOCK_DECLARE(a, ars, mr);
    const size_t n1 = nc > 8 ? nc - 8 : 0, n0 = nc > 8 ? 8 : nc;
    const vmask m0 = v_mask(n0), m1 = v_mask(n1);
    for (size_t k = 0; k < K; k++) {
        const float *bk = b + k * ldb;
        vf b0, b1 = V_ZERO();
        if (n0 == 8) b0 = V_LOAD(bk);
        else V_LOADN(b0, bk, m0, n0);
        if (n1 == 8) b1 = V_LOAD(bk + 8);
        else if (n1) V_LOADN(b1, bk + 8, m1, n1);
        BLOCK_STEP(b0, b1, k * acs);
    }
    float out[MR][16];
    BLOCK_SPILL(out);
    for (size_t r = 0; r < mr; r++) {
        float *cr = c + r * crs;
        if (accumulate)
            for (size_t j = 0; j < nc; j++) cr[j * ccs] += out[r][j];
        else
            for (size_t j = 0; j < nc; j++) cr[j * ccs] = out[r][j];
    }
}

void DPT_ISA_NAME(dpt_small_gemm)(size_t M, size_t N, size_t K, const float *a, size_t ars, size_t acs,
                                  const float *b, size_t ldb, float *c, size_t crs, size_t ccs, int accumulate) {
    for (size_t i = 0; i < M; i += MR) {
        const size_t mr = M - i < MR ? M - i : MR;
        for (size_t j = 0; j < N; j += 16) {
            const size_t nc = N - j < 16 ? N - j : 16;
            if (mr == MR && nc == 16)
                block(MR, 16, K, a + i * ars, ars, acs, b + j, ldb, c + i * crs + j * ccs, crs, ccs, accumulate);
            else
                block(mr, nc, K, a + i * ars, ars, acs, b + j, ldb, c + i * crs + j * ccs, crs, ccs, accumulate);
        }
    }
}

/* ==== direct stride-1 convolution (dpt_conv_direct in nn_internal.h) ====
 * The same register block (BLOCK_*), but row k of the second operand is not a row of an
 * unfolded matrix: it is read straight from the zero-padded example at koff[k] (the
 * offset of (c, ki, kj)) plus the position block's base, so nothing is unfolded or
 * packed. A vector of 8 positions lies in one output row (Wo % 8 == 0), so its 8 inputs
 * are contiguous in the padded plane. */
static inline __attribute__((always_inline)) void conv_block(size_t mr, int two, size_t K, const float *a, size_t ars,
                                                             const size_t *koff, const float *x0, const float *x1,
                                                             float *c, size_t crs, const float *bias,
                                                             int accumulate) {
    BLOCK_DECLARE(a, ars, mr);
    for (size_t k = 0; k < K; k++) {
        const size_t o = koff[k];
        const vf b0 = V_LOAD(x0 + o);
        vf b1 = V_ZERO();
        if (two) b1 = V_LOAD(x1 + o);
        BLOCK_STEP(b0, b1, k);
    }
    float out[MR][16];
    BLOCK_SPILL(out);
    const size_t nc = two ? 16 : 8;
    for (size_t r = 0; r < mr; r++) {
        float *cr = c + r * crs;
        const float bo = bias ? bias[r] : 0.0f;
        if (accumulate)
            for (size_t j = 0; j < nc; j++) cr[j] += out[r][j] + bo;
        else
            for (size_t j = 0; j < nc; j++) cr[j] = out[r][j] + bo;
    }
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
/* The x86-64-v4 build (small_gemm_v4.c, AVX-512): 16-float vectors. A vector's 16 positions
 * are two runs of 8 (one output row each, Wo % 8 == 0): one load when they are contiguous
 * (Wo % 16 == 0), else two halves joined. */
#define DPT_SMALL_GEMM_Z 1
static inline __attribute__((always_inline)) __m512 z_load2(const float *p, const float *q, int contig) {
    if (contig) return _mm512_loadu_ps(p);
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(p)), _mm256_loadu_ps(q), 1);
}

/* conv_block for 32 positions (x0..x3: where each run of 8 starts) with MR x 2 accumulators
 * of 16: each output is the same sum over k in the same order as conv_block's, so the two
 * agree bit for bit. */
static inline __attribute__((always_inline)) void conv_block_z(size_t mr, int contig, size_t K, const float *a,
                                                               size_t ars, const size_t *koff, const float *x0,
                                                               const float *x1, const float *x2, const float *x3,
                                                               float *c, size_t crs, const float *bias,
                                                               int accumulate) {
    __m512 z00 = _mm512_setzero_ps(), z01 = z00, z10 = z00, z11 = z00, z20 = z00, z21 = z00;
    __m512 z30 = z00, z31 = z00, z40 = z00, z41 = z00, z50 = z00, z51 = z00;
    BLOCK_ROWS(a, ars, mr);
    for (size_t k = 0; k < K; k++) {
        const size_t o = koff[k];
        const __m512 b0 = z_load2(x0 + o, x1 + o, contig), b1 = z_load2(x2 + o, x3 + o, contig);
        __m512 t;
        t = _mm512_set1_ps(a0[k]), z00 = _mm512_fmadd_ps(t, b0, z00), z01 = _mm512_fmadd_ps(t, b1, z01);
        t = _mm512_set1_ps(a1[k]), z10 = _mm512_fmadd_ps(t, b0, z10), z11 = _mm512_fmadd_ps(t, b1, z11);
        t = _mm512_set1_ps(a2[k]), z20 = _mm512_fmadd_ps(t, b0, z20), z21 = _mm512_fmadd_ps(t, b1, z21);
        t = _mm512_set1_ps(a3[k]), z30 = _mm512_fmadd_ps(t, b0, z30), z31 = _mm512_fmadd_ps(t, b1, z31);
        t = _mm512_set1_ps(a4[k]), z40 = _mm512_fmadd_ps(t, b0, z40), z41 = _mm512_fmadd_ps(t, b1, z41);
        t = _mm512_set1_ps(a5[k]), z50 = _mm512_fmadd_ps(t, b0, z50), z51 = _mm512_fmadd_ps(t, b1, z51);
    }
    float out[MR][32];
    _mm512_storeu_ps(out[0], z00), _mm512_storeu_ps(out[0] + 16, z01), _mm512_storeu_ps(out[1], z10);
    _mm512_storeu_ps(out[1] + 16, z11), _mm512_storeu_ps(out[2], z20), _mm512_storeu_ps(out[2] + 16, z21);
    _mm512_storeu_ps(out[3], z30), _mm512_storeu_ps(out[3] + 16, z31), _mm512_storeu_ps(out[4], z40);
    _mm512_storeu_ps(out[4] + 16, z41), _mm512_storeu_ps(out[5], z50), _mm512_storeu_ps(out[5] + 16, z51);
    for (size_t r = 0; r < mr; r++) {
        float *cr = c + r * crs;
        const float bo = bias ? bias[r] : 0.0f;
        if (accumulate)
            for (size_t j = 0; j < 32; j++) cr[j] += out[r][j] + bo;
        else
            for (size_t j = 0; j < 32; j++) cr[j] = out[r][j] + bo;
    }
}

/* positions [t, t + 32) of dpt_conv_direct through conv_block_z */
static void conv_direct_z(size_t O, size_t K, size_t T, size_t t, size_t Wo, size_t Wp, const float *w,
                          const float *bias, const size_t *koff, const float *xp, float *out, int accumulate) {
#define DPT_POS(u) (xp + ((u) / Wo) * Wp + (u) % Wo)
    const float *x0 = DPT_POS(t), *x1 = DPT_POS(t + 8), *x2 = DPT_POS(t + 16), *x3 = DPT_POS(t + 24);
#undef DPT_POS
    const int contig = Wo % 16 == 0;
    for (size_t i = 0; i < O; i += MR) {
        const size_t mr = O - i < MR ? O - i : MR;
        const float *bi = bias ? bias + i : NULL;
        if (contig) conv_block_z(mr, 1, K, w + i * K, K, koff, x0, x1, x2, x3, out + i * T + t, T, bi, accumulate);
        else conv_block_z(mr, 0, K, w + i * K, K, koff, x0, x1, x2, x3, out + i * T + t, T, bi, accumulate);
    }
}
#endif

void DPT_ISA_NAME(dpt_conv_direct)(size_t O, size_t K, size_t T, size_t Wo, size_t Wp, const float *w,
                                   const float *bias, const size_t *koff, const float *xp, float *out,
                                   int accumulate) {
    size_t t0 = 0;
#ifdef DPT_SMALL_GEMM_Z
    for (; t0 + 32 <= T; t0 += 32) conv_direct_z(O, K, T, t0, Wo, Wp, w, bias, koff, xp, out, accumulate);
#endif
    for (size_t t = t0; t < T; t += 16) {
        const int two = T - t >= 16;
        const float *x0 = xp + (t / Wo) * Wp + t % Wo;
        const float *x1 = two ? xp + ((t + 8) / Wo) * Wp + (t + 8) % Wo : x0;
        for (size_t i = 0; i < O; i += MR) {
            const size_t mr = O - i < MR ? O - i : MR;
            const float *bi = bias ? bias + i : NULL;
            if (two) conv_block(mr, 1, K, w + i * K, K, koff, x0, x1, out + i * T + t, T, bi, accumulate);
            else conv_block(mr, 0, K, w + i * K, K, koff, x0, x1, out + i * T + t, T, bi, accumulate);
        }
    }
}

/* ==== direct per-example weight gradient (dpt_conv_pe_grad in nn_internal.h) ====
 * g_i = dV_i U_i^T of a stride-1 convolution with U_i read in place from the padded
 * example, not unfolded (the unfold wrote and read back C k^2 T floats per example,
 * memory-bound: 11% of a resnet5 DP-SGD step, and the transposes feeding dpt_small_gemm
 * 4% more). Each entry g[o, r] is a dot product over the T positions of row o of dV_i and
 * row r of U_i; 8 positions of one output row are contiguous in both (Wo % 8 == 0), so the
 * vectors run over positions: a block of 2 outputs x 4 patch rows holds 8 accumulators
 * (no broadcasts, no transposes), whose 8 lanes (partial sums over ow mod 8) are added at
 * the end as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), four accumulators at a
 * time (V_HSUM4; with resnet5's T = 64 these sums cost about as much as the products). */
#if defined(__AVX2__) && defined(__FMA__)
/* dst[j] = lane sum of cj, j = 0..3: two rounds of hadd and the halves added */
#define V_HSUM4(c0, c1, c2, c3, dst)                                                                                   \
    do {                                                                                                               \
        const __m256 h_ = _mm256_hadd_ps(_mm256_hadd_ps(c0, c1), _mm256_hadd_ps(c2, c3));                            \
        _mm_storeu_ps(dst, _mm_add_ps(_mm256_castps256_ps128(h_), _mm256_extractf128_ps(h_, 1)));                    \
    } while (0)
#else
static inline void hsum1(const float *l, float *dst) {
    *dst = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}
#define V_HSUM4(c0, c1, c2, c3, dst)                                                                                   \
    do {                                                                                                               \
        float l_[4][8];                                                                                                \
        V_STORE(l_[0], c0), V_STORE(l_[1], c1), V_STORE(l_[2], c2), V_STORE(l_[3], c3);                                \
        hsum1(l_[0], (dst)), hsum1(l_[1], (dst) + 1), hsum1(l_[2], (dst) + 2), hsum1(l_[3], (dst) + 3);                \
    } while (0)
#endif

/* u = a row's 8 positions, in a register: without the empty asm GCC folds the load into
 * both FMAs that use it (two loads, half of them split over cache lines) */
#if defined(__AVX2__) && defined(__FMA__)
#define PE_LOAD(u, p)                                                                                                  \
    do {                                                                                                               \
        (u) = V_LOAD(p);                                                                                               \
        __asm__("" : "+x"(u));                                                                                         \
    } while (0)
#else
#define PE_LOAD(u, p) ((u) = V_LOAD(p))
#endif

static inline __attribute__((always_inline)) void pe_block(size_t mo, size_t mr, size_t Ho, size_t Wo, size_t Wp,
                                                           const float *xp, const size_t *koff, const float *dv,
                                                           size_t T, float *g, size_t Dk, int accumulate) {
    vf c00 = V_ZERO(), c01 = V_ZERO(), c02 = V_ZERO(), c03 = V_ZERO();
    vf c10 = V_ZERO(), c11 = V_ZERO(), c12 = V_ZERO(), c13 = V_ZERO();
    /* rows past mr (mo) repeat the last one; their sums are dropped */
    const float *a0 = xp + koff[0], *a1 = xp + koff[mr > 1 ? 1 : mr - 1], *a2 = xp + koff[mr > 2 ? 2 : mr - 1],
                *a3 = xp + koff[mr > 3 ? 3 : mr - 1];
    const float *d0 = dv, *d1 = dv + (mo > 1 ? T : 0);
    for (size_t oh = 0; oh < Ho; oh++) {
        const size_t xo = oh * Wp, vo = oh * Wo;
        for (size_t ow = 0; ow < Wo; ow += 8) {
            const vf v0 = V_LOAD(d0 + vo + ow), v1 = V_LOAD(d1 + vo + ow);
            vf u;
            PE_LOAD(u, a0 + xo + ow);
            c00 = V_FMA(v0, u, c00), c10 = V_FMA(v1, u, c10);
            PE_LOAD(u, a1 + xo + ow);
            c01 = V_FMA(v0, u, c01), c11 = V_FMA(v1, u, c11);
            PE_LOAD(u, a2 + xo + ow);
            c02 = V_FMA(v0, u, c02), c12 = V_FMA(v1, u, c12);
            PE_LOAD(u, a3 + xo + ow);
            c03 = V_FMA(v0, u, c03), c13 = V_FMA(v1, u, c13);
        }
    }
    float out[2][4];
    V_HSUM4(c00, c01, c02, c03, out[0]);
    V_HSUM4(c10, c11, c12, c13, out[1]);
    for (size_t o = 0; o < mo; o++) {
        float *go = g + o * Dk;
        if (accumulate)
            for (size_t r = 0; r < mr; r++) go[r] += out[o][r];
        else
            for (size_t r = 0; r < mr; r++) go[r] = out[o][r];
    }
}

#ifdef DPT_SMALL_GEMM_Z
/* pe_block with 16-float vectors over the positions, for rows of a multiple of 16 (Wo % 16
 * == 0: every vector one load of dV_i and one of U_i), and a block of 4 outputs x 4 patch
 * rows (16 accumulators). Each entry is 16 partial sums (positions mod 16), lane j added
 * to lane j + 8 and the 8 sums then as pe_block adds its lanes: deterministic, not
 * pe_block's bits. */
static inline __attribute__((always_inline)) void pe_block_z(size_t mo, size_t mr, size_t Ho, size_t Wo, size_t Wp,
                                                             const float *xp, const size_t *koff, const float *dv,
                                                             float *g, size_t Dk, int accumulate) {
    const size_t T = Ho * Wo;
    __m512 c[4][4];
    for (int o = 0; o < 4; o++)
        for (int r = 0; r < 4; r++) c[o][r] = _mm512_setzero_ps();
    const float *a0 = xp + koff[0], *a1 = xp + koff[mr > 1 ? 1 : mr - 1], *a2 = xp + koff[mr > 2 ? 2 : mr - 1],
                *a3 = xp + koff[mr > 3 ? 3 : mr - 1];
    const float *d0 = dv, *d1 = dv + (mo > 1 ? 1 : 0) * T, *d2 = dv + (mo > 2 ? 2 : mo - 1) * T,
                *d3 = dv + (mo > 3 ? 3 : mo - 1) * T;
    for (size_t oh = 0; oh < Ho; oh++) {
        const size_t xo = oh * Wp, vo = oh * Wo;
        for (size_t ow = 0; ow < Wo; ow += 16) {
            const __m512 v0 = _mm512_loadu_ps(d0 + vo + ow), v1 = _mm512_loadu_ps(d1 + vo + ow),
                         v2 = _mm512_loadu_ps(d2 + vo + ow), v3 = _mm512_loadu_ps(d3 + vo + ow);
            __m512 u;
            u = _mm512_loadu_ps(a0 + xo + ow);
            c[0][0] = _mm512_fmadd_ps(v0, u, c[0][0]), c[1][0] = _mm512_fmadd_ps(v1, u, c[1][0]);
            c[2][0] = _mm512_fmadd_ps(v2, u, c[2][0]), c[3][0] = _mm512_fmadd_ps(v3, u, c[3][0]);
            u = _mm512_loadu_ps(a1 + xo + ow);
            c[0][1] = _mm512_fmadd_ps(v0, u, c[0][1]), c[1][1] = _mm512_fmadd_ps(v1, u, c[1][1]);
            c[2][1] = _mm512_fmadd_ps(v2, u, c[2][1]), c[3][1] = _mm512_fmadd_ps(v3, u, c[3][1]);
            u = _mm512_loadu_ps(a2 + xo + ow);
            c[0][2] = _mm512_fmadd_ps(v0, u, c[0][2]), c[1][2] = _mm512_fmadd_ps(v1, u, c[1][2]);
            c[2][2] = _mm512_fmadd_ps(v2, u, c[2][2]), c[3][2] = _mm512_fmadd_ps(v3, u, c[3][2]);
            u = _mm512_loadu_ps(a3 + xo + ow);
            c[0][3] = _mm512_fmadd_ps(v0, u, c[0][3]), c[1][3] = _mm512_fmadd_ps(v1, u, c[1][3]);
            c[2][3] = _mm512_fmadd_ps(v2, u, c[2][3]), c[3][3] = _mm512_fmadd_ps(v3, u, c[3][3]);
        }
    }
    for (size_t o = 0; o < mo; o++) {
        /* lanes j and j + 8 first, then V_HSUM4's order over the 8 sums, 4 entries at once */
        __m256 h[4];
        for (int r = 0; r < 4; r++)
            h[r] = _mm256_add_ps(_mm512_castps512_ps256(c[o][r]), _mm512_extractf32x8_ps(c[o][r], 1));
        float out[4];
        V_HSUM4(h[0], h[1], h[2], h[3], out);
        float *go = g + o * Dk;
        for (size_t r = 0; r < mr; r++) go[r] = accumulate ? go[r] + out[r] : out[r];
    }
}
#endif

#ifdef DPT_SMALL_GEMM_Z
/* Floats of the transposed cotangent pe_grad_t keeps on the stack (64 KB) */
#define PE_T_MAX 16384

/* For rows of 8 positions (Wo % 16 != 0; 8 x 8 planes: T = 64), vectors over the outputs
 * instead: g_i^T [Dk, O] = U_i dV_i^T, with dvt = dV_i^T [T, O] (one transpose, O T floats)
 * read as rows of 16 outputs and U_i's entries broadcast from the padded example (at
 * koff[r] plus the position's offset), 8 patch rows x 32 outputs per block (16
 * accumulators). Each entry is one sum over the positions in order; the block is stored
 * transposed into g. O % 32 == 0 and O T <= PE_T_MAX (the caller checks). */
static void pe_grad_t(size_t O, size_t Dk, size_t Ho, size_t Wo, size_t Wp, const size_t *koff, const float *xp,
                      const float *dv, float *g, int accumulate) {
    const size_t T = Ho * Wo;
    float dvt[PE_T_MAX];
    for (size_t o = 0; o < O; o++)
        for (size_t t = 0; t < T; t++) dvt[t * O + o] = dv[o * T + t];
    for (size_t o = 0; o < O; o += 32)
        for (size_t r = 0; r < Dk; r += 8) {
            const size_t mr = Dk - r < 8 ? Dk - r : 8;
#define PE_T_ROW(j) (xp + koff[r + ((j) < mr ? (j) : mr - 1)])
            const float *a0 = PE_T_ROW(0), *a1 = PE_T_ROW(1), *a2 = PE_T_ROW(2), *a3 = PE_T_ROW(3),
                        *a4 = PE_T_ROW(4), *a5 = PE_T_ROW(5), *a6 = PE_T_ROW(6), *a7 = PE_T_ROW(7);
#undef PE_T_ROW
            __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
                   c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
            for (size_t oh = 0; oh < Ho; oh++) {
                const float *dr = dvt + oh * Wo * O + o;
                const size_t p0 = oh * Wp;
                for (size_t ow = 0; ow < Wo; ow++, dr += O) {
                    const size_t pos = p0 + ow;
                    const __m512 d0 = _mm512_loadu_ps(dr), d1 = _mm512_loadu_ps(dr + 16);
                    __m512 b;
#define PE_T_STEP(aj, cj0, cj1)                                                                                        \
    b = _mm512_set1_ps((aj)[pos]), cj0 = _mm512_fmadd_ps(b, d0, cj0), cj1 = _mm512_fmadd_ps(b, d1, cj1)
                    PE_T_STEP(a0, c00, c01);
                    PE_T_STEP(a1, c10, c11);
                    PE_T_STEP(a2, c20, c21);
                    PE_T_STEP(a3, c30, c31);
                    PE_T_STEP(a4, c40, c41);
                    PE_T_STEP(a5, c50, c51);
                    PE_T_STEP(a6, c60, c61);
                    PE_T_STEP(a7, c70, c71);
#undef PE_T_STEP
                }
            }
            float out[8][32];
            _mm512_storeu_ps(out[0], c00), _mm512_storeu_ps(out[0] + 16, c01), _mm512_storeu_ps(out[1], c10);
            _mm512_storeu_ps(out[1] + 16, c11), _mm512_storeu_ps(out[2], c20), _mm512_storeu_ps(out[2] + 16, c21);
            _mm512_storeu_ps(out[3], c30), _mm512_storeu_ps(out[3] + 16, c31), _mm512_storeu_ps(out[4], c40);
            _mm512_storeu_ps(out[4] + 16, c41), _mm512_storeu_ps(out[5], c50), _mm512_storeu_ps(out[5] + 16, c51);
            _mm512_storeu_ps(out[6], c60), _mm512_storeu_ps(out[6] + 16, c61), _mm512_storeu_ps(out[7], c70);
            _mm512_storeu_ps(out[7] + 16, c71);
            for (size_t q = 0; q < 32; q++) {
                float *go = g + (o + q) * Dk + r;
                if (accumulate)
                    for (size_t j = 0; j < mr; j++) go[j] += out[j][q];
                else
                    for (size_t j = 0; j < mr; j++) go[j] = out[j][q];
            }
        }
}
#endif

void DPT_ISA_NAME(dpt_conv_pe_grad)(size_t O, size_t Dk, size_t Ho, size_t Wo, size_t Wp, const size_t *koff,
                                    const float *xp, const float *dv, float *g, int accumulate) {
    const size_t T = Ho * Wo;
#ifdef DPT_SMALL_GEMM_Z
    /* rows of a multiple of 16 positions: 16-float vectors over the positions. Rows of 8
     * (8 x 8 planes) were 1.4-1.6x slower that way than through pe_block below (every vector
     * joined from two rows, T = 64 too short to repay the wider sums); with outputs in
     * blocks of 32 they take pe_grad_t, vectors over the outputs: 1.4-1.9x faster than
     * pe_block on resnet5's 8 x 8 layers (bench/conv_kernels, 2026-12-07) */
    if (Wo % 16 == 0) {
        for (size_t o = 0; o < O; o += 4) {
            const size_t mo = O - o < 4 ? O - o : 4;
            for (size_t r = 0; r < Dk; r += 4) {
                const size_t mr = Dk - r < 4 ? Dk - r : 4;
                if (mo == 4 && mr == 4)
                    pe_block_z(4, 4, Ho, Wo, Wp, xp, koff + r, dv + o * T, g + o * Dk + r, Dk, accumulate);
                else
                    pe_block_z(mo, mr, Ho, Wo, Wp, xp, koff + r, dv + o * T, g + o * Dk + r, Dk, accumulate);
            }
        }
        return;
    }
    if (O % 32 == 0 && O * T <= PE_T_MAX) {
        pe_grad_t(O, Dk, Ho, Wo, Wp, koff, xp, dv, g, accumulate);
        return;
    }
#endif
    for (size_t o = 0; o < O; o += 2) {
        const size_t mo = O - o < 2 ? O - o : 2;
        for (size_t r = 0; r < Dk; r += 4) {
            const size_t mr = Dk - r < 4 ? Dk - r : 4;
            if (mo == 2 && mr == 4)
                pe_block(2, 4, Ho, Wo, Wp, xp, koff + r, dv + o * T, T, g + o * Dk + r, Dk, accumulate);
            else
                pe_block(mo, mr, Ho, Wo, Wp, xp, koff + r, dv + o * T, T, g + o * Dk + r, Dk, accumulate);
        }
    }
}

#if DPT_ISA_DISPATCH && !DPT_ISA_V3_TU && !DPT_ISA_V4_TU
void dpt_small_gemm(size_t M, size_t N, size_t K, const float *a, size_t ars, size_t acs, const float *b,
                    size_t ldb, float *c, size_t crs, size_t ccs, int accumulate) {
    (dpt_isa_v4() ? dpt_small_gemm_v4 : dpt_isa_v3() ? dpt_small_gemm_v3 : dpt_small_gemm_base)(M, N, K, a, ars, acs, b, ldb, c, crs, ccs, accumulate);
}
void dpt_conv_direct(size_t O, size_t K, size_t T, size_t Wo, size_t Wp, const float *w, const float *bias,
                     const size_t *koff, const float *xp, float *out, int accumulate) {
    (dpt_isa_v4()   ? dpt_conv_direct_v4
     : dpt_isa_v3() ? dpt_conv_direct_v3
                   : dpt_conv_direct_base)(O, K, T, Wo, Wp, w, bias, koff, xp, out, accumulate);
}
void dpt_conv_pe_grad(size_t O, size_t Dk, size_t Ho, size_t Wo, size_t Wp, const size_t *koff, const float *xp,
                      const float *dv, float *g, int accumulate) {
    (dpt_isa_v4()   ? dpt_conv_pe_grad_v4
     : dpt_isa_v3() ? dpt_conv_pe_grad_v3
                   : dpt_conv_pe_grad_base)(O, Dk, Ho, Wo, Wp, koff, xp, dv, g, accumulate);
}
#endif
