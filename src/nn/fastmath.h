/* Vectorizable float kernels shared by the activations and the losses (internal to nn).
 * Plain float code that GCC vectorizes under omp simd: the same IEEE operations in the
 * vector body and the scalar remainder, explicit fmaf (exactly rounded everywhere), no
 * -ffast-math. always_inline: GCC's -O2 inliner otherwise leaves a call, which does not
 * vectorize. */
#ifndef DPT_NN_FASTMATH_H
#define DPT_NN_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define DPT_FAST_INLINE static inline __attribute__((always_inline))

/* c ? a : b as a bit blend: both sides are always computed, so GCC can vectorize without
 * -fno-trapping-math (it will not speculate float operations behind a branch). */
DPT_FAST_INLINE float sel(int c, float a, float b) {
    uint32_t ua, ub, m = 0u - (uint32_t)(c != 0);
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    ua = (ua & m) | (ub & ~m);
    memcpy(&a, &ua, sizeof a);
    return a;
}

/* e^x for x <= 0 (Cephes expf: x = n ln2 + r, degree-5 polynomial, exponent bits);
 * 0 below -87.3 (no subnormals); NaN stays NaN. Integer work only on float bits (no
 * float-to-int conversion of possibly-NaN values). */
DPT_FAST_INLINE float exp_neg(float x) {
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float xc = sel(x < -87.3f, -87.3f, x);
    const float nf = fmaf(xc, 1.44269504088896341f, shifter);
    uint32_t nb;
    memcpy(&nb, &nf, sizeof nb);
    const float n = nf - shifter;
    float r = fmaf(n, -0.693359375f, xc); /* ln 2 in two parts (Cody-Waite) */
    r = fmaf(n, 2.12194440e-4f, r);
    /* p(r) = c0 + c1 r + ... + c5 r^5 by pairs (Estrin), then e^r = 1 + r + r^2 p(r) */
    const float r2 = r * r;
    const float p01 = fmaf(1.6666665459e-1f, r, 5.0000001201e-1f);
    const float p23 = fmaf(8.3333452e-3f, r, 4.1665795894e-2f);
    const float p45 = fmaf(1.9875691500e-4f, r, 1.3981999507e-3f);
    const float p = fmaf(fmaf(p45, r2, p23), r2, p01);
    const float e = fmaf(p, r2, r) + 1.0f;
    uint32_t sb = (nb - 0x4B400000u + 127u) << 23; /* 2^n; n in [-126, 0] */
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    return sel(x < -87.3f, 0.0f, e * scale);
}

#endif
