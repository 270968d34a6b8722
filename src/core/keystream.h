/* Internal: raw ChaCha20 keystream of a dpt_rng's key at a chosen (substream, block), for
 * samplers that consume random bytes in bulk (the secure discrete Gaussian table sampler,
 * src/privacy/dgauss.c). The layout is the one of src/core/rng.c: block b of substream s
 * is keystream block (counter = low 32 bits of b, nonce = (high 32 bits of b, s)).
 * Memory: a dpt_keystream owns one cipher context: dpt_keystream_close.
 * Thread safety: one reader per thread; the dpt_rng is only read (its key). */
#ifndef DPT_CORE_KEYSTREAM_H
#define DPT_CORE_KEYSTREAM_H

#include <dptrain/core.h>

typedef struct {
    void *ctx; /* EVP_CIPHER_CTX*, keyed at open */
} dpt_keystream;

/* Positions ks at block `block` of substream `sub` of r's key (sub 0 is the sequential
 * stream; callers reserve substreams with dpt_rng_reserve_substreams). */
dpt_status dpt_keystream_open(dpt_keystream *ks, const dpt_rng *r, uint64_t sub, uint64_t block);
/* Moves an open reader to block `block` of substream `sub` of the same key (an IV load,
 * ~8x cheaper than opening a new reader under OpenSSL 3). */
dpt_status dpt_keystream_seek(dpt_keystream *ks, const dpt_rng *r, uint64_t sub, uint64_t block);
/* The next n_bytes bytes of keystream into out (any n_bytes < 2^31). Words read from out
 * are little-endian interpretations (byte-swapped on big-endian hosts by the caller). */
dpt_status dpt_keystream_read(dpt_keystream *ks, void *out, size_t n_bytes);
void dpt_keystream_close(dpt_keystream *ks); /* accepts a closed or zeroed reader */

#endif
