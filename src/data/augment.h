/* data internals: image augmentation for training batches (crop after reflect padding,
 * horizontal flip). Not installed. Pure functions of the input and of the random words the
 * caller draws (the trainer keys them by run seed, step and example: src/train/loop.c), so
 * the same words give the same copies. Thread-safe; writes only `out`. */
#ifndef DPT_DATA_AUGMENT_H
#define DPT_DATA_AUGMENT_H
#include <stddef.h>
#include <stdint.h>

/* Random words one augmented copy takes (row offset, column offset, flip). */
#define DPT_AUGMENT_WORDS 3

/* out [K, C, H, W] = K copies of x [C, H, W]: copy k, with its words w = words[3k..3k+2],
 * is the H x W window at offset (dy, dx) of x reflect-padded by `pad` on every side
 * (numpy's "reflect": the edge is not repeated; pad <= H - 1, W - 1), with
 * dy = floor(w0 (2 pad + 1) / 2^32), dx likewise from w1, flipped left-right when `flip`
 * and w2 is odd:
 *   out[k, c, i, j] = xpad[c, i + dy, j' + dx],  j' = flip_k ? W - 1 - j : j. */
void dpt_augment_copies(const float *x, size_t C, size_t H, size_t W, size_t pad, int flip, size_t K,
                        const uint32_t *words, float *out);
#endif
