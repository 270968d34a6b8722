/* Small matrix products without packing, for the per-example gradients of a convolution
 * (dpt_small_gemm in nn_internal.h). OpenBLAS packs both operands into its own layout on
 * every call; at one example's size (mnist_cnn's conv1: 64 x 16 outputs over 196
 * positions) that packing costs more than the multiply-adds (perf of a DP-SGD and a
 * non-private mnist_cnn run, 2026-11-25: of the samples DP-SGD added, 231 were OpenBLAS
 * packing operands and 183 its multiply kernel). Here B is read in place (its rows are already
 * contiguous in n) and A is broadcast one element at a time, so nothing is copied.
 * Register blocks of MR x 16 (two 8-float vectors per row); the last column block is read
 * with masked loads, so no element past column N of B is touched.
 * Built twice on x86-64 (core/isa.h): for the baseline (portable vectors below, no FMA) and
 * for x86-64-v3 (small_gemm_v3.c: AVX2 and FMA intrinsics), chosen per call by the CPU. */
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
 * pointers a0..a5 into A (rows past mr repeat the last row; their sums are dropped), one
 * step over k (b0, b1: the two 8-float halves of B's row k; ko: the offset of column k in
 * A's rows) and the spill of the accumulators into out[MR][16]. Written out so that the
 * 12 accumulators stay in registers. */
#define BLOCK_DECLARE(a, ars, mr)                                                                                      \
    vf c00 = V_ZERO(), c01 = V_ZERO(), c10 = V_ZERO(), c11 = V_ZERO(), c20 = V_ZERO(), c21 = V_ZERO();                \
    vf c30 = V_ZERO(), c31 = V_ZERO(), c40 = V_ZERO(), c41 = V_ZERO(), c50 = V_ZERO(), c51 = V_ZERO();                \
    const float *a0 = (a), *a1 = (a) + ((mr) > 1 ? 1 : 0) * (ars), *a2 = (a) + ((mr) > 2 ? 2 : (mr) - 1) * (ars),     \
                *a3 = (a) + ((mr) > 3 ? 3 : (mr) - 1) * (ars), *a4 = (a) + ((mr) > 4 ? 4 : (mr) - 1) * (ars),         \
                *a5 = (a) + ((mr) > 5 ? 5 : (mr) - 1) * (ars)
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

void DPT_ISA_NAME(dpt_conv_direct)(size_t O, size_t K, size_t T, size_t Wo, size_t Wp, const float *w,
                                   const float *bias, const size_t *koff, const float *xp, float *out,
                                   int accumulate) {
    for (size_t t = 0; t < T; t += 16) {
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

void DPT_ISA_NAME(dpt_conv_pe_grad)(size_t O, size_t Dk, size_t Ho, size_t Wo, size_t Wp, const size_t *koff,
                                    const float *xp, const float *dv, float *g, int accumulate) {
    const size_t T = Ho * Wo;
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

#if DPT_ISA_DISPATCH && !DPT_ISA_V3_TU
void dpt_small_gemm(size_t M, size_t N, size_t K, const float *a, size_t ars, size_t acs, const float *b,
                    size_t ldb, float *c, size_t crs, size_t ccs, int accumulate) {
    (dpt_isa_v3() ? dpt_small_gemm_v3 : dpt_small_gemm_base)(M, N, K, a, ars, acs, b, ldb, c, crs, ccs, accumulate);
}
void dpt_conv_direct(size_t O, size_t K, size_t T, size_t Wo, size_t Wp, const float *w, const float *bias,
                     const size_t *koff, const float *xp, float *out, int accumulate) {
    (dpt_isa_v3() ? dpt_conv_direct_v3 : dpt_conv_direct_base)(O, K, T, Wo, Wp, w, bias, koff, xp, out, accumulate);
}
void dpt_conv_pe_grad(size_t O, size_t Dk, size_t Ho, size_t Wo, size_t Wp, const size_t *koff, const float *xp,
                      const float *dv, float *g, int accumulate) {
    (dpt_isa_v3() ? dpt_conv_pe_grad_v3 : dpt_conv_pe_grad_base)(O, Dk, Ho, Wo, Wp, koff, xp, dv, g, accumulate);
}
#endif
