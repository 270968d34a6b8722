/* Secret buffers are wiped before their functions return (issue 38 item 6): gcc -O2 drops
 * a memset of a dead local, so a keystream, a noise draw or a derived key would stay on the
 * stack for whatever runs next (or a core dump) to read. Each test computes the secret
 * beforehand (the same key gives the same keystream), scrubs the stack, calls the function,
 * then reads the stack region its frames used (a fresh uninitialized array in a function
 * called at the same depth) and expects not to find the secret there.
 * - the secure Poisson sampler's keystream words (src/data/sampler.c);
 * - the discrete Gaussian table sampler's keystream records (src/privacy/dgauss.c);
 * - the secure mechanism's integer noise Z (src/privacy/noise.c);
 * - the fast Gaussian stream's derived key SHA-256("dptrain-fast-v1" | key) (src/core/rng.c).
 * The key of an "OS-seeded" stream is made reproducible by defining RAND_bytes here: the
 * program's own definition takes precedence over libcrypto's for the static modules.
 * Under the sanitizers (DPT_SANITIZED) the frames live elsewhere: skipped. */
#include <dptrain/core.h>
#include <dptrain/data.h>
#include <dptrain/privacy.h>

#include <math.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/keystream.h"
#include "privacy/dgauss.h"
#include "testutil.h"

/* ==== Deterministic "OS randomness" ==== */

int RAND_bytes(unsigned char *buf, int num);
int RAND_bytes(unsigned char *buf, int num) {
    for (int i = 0; i < num; i++) buf[i] = (unsigned char)(0x5a ^ (i * 37));
    return 1;
}

/* ==== Stack probe ==== */

#define PROBE_BYTES (512 * 1024)

static __attribute__((noinline)) void stack_scrub(void) {
    unsigned char a[PROBE_BYTES];
    memset(a, 0, sizeof a);
    __asm__ volatile("" : : "r"(a) : "memory");
}

/* 1 when the len bytes of needle occur in the stack below the caller's frame. */
static __attribute__((noinline)) int stack_holds(const unsigned char *needle, size_t len) {
    unsigned char a[PROBE_BYTES];
    __asm__ volatile("" : "+r"(needle) : "r"(a) : "memory"); /* a: what the stack holds */
    for (size_t i = 0; i + len <= sizeof a; i++)
        if (a[i] == needle[0] && !memcmp(a + i, needle, len)) return 1;
    return 0;
}

/* ==== The secure Poisson sampler's keystream ==== */

static void test_sampler(void) {
    const size_t n = 400; /* one block of keystream words: 2 n words */
    dpt_rng twin;
    CHECK_OK(dpt_rng_init_secure(&twin, DPT_STREAM_DATA)); /* the sampler's key (RAND_bytes above) */
    uint32_t *w = malloc(2 * n * sizeof *w);
    dpt_rng_fill_u32(&twin, w, 2 * n);
    dpt_rng_free(&twin);
    dpt_sampler *s = NULL;
    CHECK_OK(dpt_sampler_new_secure(DPT_SAMPLER_POISSON, n, 0, 0.1, 0, &s));
    uint32_t *idx = malloc(n * sizeof *idx);
    size_t b = 0;
    stack_scrub();
    CHECK_OK(dpt_sampler_next(s, idx, &b));
    /* the batch is the one these words give: the twin really has the sampler's key */
    size_t want = 0;
    for (size_t k = 0; k < n; k++) want += (w[2 * k] | (uint64_t)w[2 * k + 1] << 32) < (uint64_t)ldexp(0.1, 64);
    CHECK(b == want);
    int found = 0;
    for (size_t k = 0; k + 16 <= 2 * n; k += 16) found |= stack_holds((const unsigned char *)(w + k), 64);
    if (found) fprintf(stderr, "secure sampler: its keystream words are still on the stack\n");
    CHECK(!found);
    dpt_sampler_free(s);
    free(idx);
    free(w);
}

/* ==== The discrete Gaussian's keystream ==== */

static void test_dgauss(void) {
    const dg_table *T = dg_table_secure();
    CHECK(T != NULL);
    if (!T) return;
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 1234, DPT_STREAM_NOISE));
    uint64_t sub = dpt_rng_reserve_substreams(&r, 1);
    unsigned char *rec = malloc(64);
    dpt_keystream ks = {NULL};
    CHECK_OK(dpt_keystream_open(&ks, &r, sub, 0));
    CHECK_OK(dpt_keystream_read(&ks, rec, 64)); /* the first bytes of the first record */
    CHECK_OK(dpt_keystream_seek(&ks, &r, sub, 0));
    const size_t n = 8; /* one read of the keystream */
    int32_t *z = malloc((n + DG_GROUP) * sizeof *z);
    stack_scrub();
    CHECK_OK(dg_sample_from(T, &ks, z, n, z));
    int found = stack_holds(rec, 64);
    if (found) fprintf(stderr, "dg_sample_from: its keystream is still on the stack\n");
    CHECK(!found);
    dpt_keystream_close(&ks);
    dpt_rng_free(&r);
    free(z);
    free(rec);
}

/* ==== The secure mechanism's integer noise ==== */

static void test_secure_noise(void) {
    const size_t n = 64;
    const double sigma = 1.0, C = 1.0;
    float *sum = calloc(n, sizeof *sum); /* a zero sum: the output is h Z */
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 99, DPT_STREAM_NOISE));
    stack_scrub();
    CHECK_OK(dpt_privacy_noise_add_secure_ex(&r, sum, n, sigma, C, 1.0, DPT_DGAUSS_TABLE, 1));
    const double h = sigma * C / (double)(1u << DPT_DGAUSS_LOG2_SCALE);
    int32_t *Z = malloc(n * sizeof *Z);
    for (size_t j = 0; j < n; j++) Z[j] = (int32_t)llround(sum[j] / h);
    int found = stack_holds((const unsigned char *)Z, 16 * sizeof *Z);
    if (found) fprintf(stderr, "secure noise: its integer draws Z are still on the stack\n");
    CHECK(!found);
    dpt_rng_free(&r);
    free(Z);
    free(sum);
}

/* ==== The fast stream's derived key ==== */

static void test_fast_key(void) {
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 7, DPT_STREAM_NOISE));
    uint64_t sub = dpt_rng_reserve_substreams(&r, 1);
    unsigned char msg[15 + 32], *h = malloc(32);
    memcpy(msg, "dptrain-fast-v1", 15);
    memcpy(msg + 15, r.key, 32);
    unsigned len = 0;
    CHECK(EVP_Digest(msg, sizeof msg, h, &len, EVP_sha256(), NULL) == 1 && len == 32);
    float out[16];
    stack_scrub();
    CHECK_OK(dpt_rng_gauss_fill_fast_at(&r, sub, 0, out, 16, 1.0f, 1));
    int found = stack_holds(h, 32);
    if (found) fprintf(stderr, "gauss_fill_fast_at: its derived key is still on the stack\n");
    CHECK(!found);
    dpt_rng_free(&r);
    free(h);
}

int main(void) {
    if (getenv("DPT_SANITIZED")) TEST_SKIP("stack contents are not where the probe looks under the sanitizers");
    test_sampler();
    test_dgauss();
    test_secure_noise();
    test_fast_key();
    TEST_MAIN_END();
}
