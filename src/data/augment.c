/* Crop-and-flip augmentation (as in De et al. 2022's CIFAR-10 pipeline: random crop after
 * 4-pixel padding, random horizontal flip). Reflect padding rather than zeros: it does not
 * depend on how the data were normalized (a zero is the mean of a standardized channel but
 * black for raw pixels). */
#include "data/augment.h"

/* index u in [-pad, n - 1 + pad] reflected into [0, n) without repeating the edge */
static size_t reflect(long u, size_t n) {
    if (u < 0) u = -u;
    if (u > (long)n - 1) u = 2 * ((long)n - 1) - u;
    return (size_t)u;
}

void dpt_augment_copies(const float *x, size_t C, size_t H, size_t W, size_t pad, int flip, size_t K,
                        const uint32_t *words, float *out) {
    const uint64_t span = 2 * (uint64_t)pad + 1;
    for (size_t k = 0; k < K; k++) {
        const uint32_t *w = words + DPT_AUGMENT_WORDS * k;
        /* multiply-shift: uniform up to a bias of span / 2^32, irrelevant here */
        const long dy = (long)(((uint64_t)w[0] * span) >> 32) - (long)pad;
        const long dx = (long)(((uint64_t)w[1] * span) >> 32) - (long)pad;
        const int fl = flip && (w[2] & 1u);
        float *o = out + k * C * H * W;
        for (size_t c = 0; c < C; c++)
            for (size_t i = 0; i < H; i++) {
                const float *row = x + (c * H + reflect((long)i + dy, H)) * W;
                float *orow = o + (c * H + i) * W;
                for (size_t j = 0; j < W; j++) {
                    const size_t jj = fl ? W - 1 - j : j;
                    orow[j] = row[reflect((long)jj + dx, W)];
                }
            }
    }
}
