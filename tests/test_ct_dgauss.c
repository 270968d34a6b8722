/* Constant time of the secure table sampler (src/privacy/dgauss.c), checked the ctgrind way:
 * the kernel's own source is compiled here, its keystream input is marked undefined for
 * valgrind's memcheck, and memcheck reports any branch or memory address that depends on
 * it. The only value declared public is the accept bits (DG_DECLASSIFY in dg_group), which
 * rejection sampling makes independent of the accepted values. A control function that
 * branches on a secret bit must be reported, or the check itself is broken.
 * Runs itself under valgrind (skipped when valgrind is not installed or under ASan).
 * This file checks the baseline build of the kernel; test_ct_dgauss_v3.c compiles it again
 * for x86-64-v3 (core/isa.h), the build the CPUs that have it run. */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define HAVE_MEMCHECK 1
#endif
#endif

#ifdef HAVE_MEMCHECK
#define DG_DECLASSIFY(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
#endif
#include "privacy/dgauss.c"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "testutil.h"

#ifdef HAVE_MEMCHECK
/* branches on a secret bit: memcheck must see it */
__attribute__((noinline)) static int leaky(const uint8_t *secret) { return (secret[0] & 1) ? 3 : 5 + secret[1]; }
#endif

int main(int argc, char **argv) {
#if !defined(HAVE_MEMCHECK)
    (void)argc, (void)argv;
    TEST_SKIP("valgrind/memcheck.h not installed");
#else
#if defined(__SANITIZE_ADDRESS__)
    TEST_SKIP("valgrind does not run AddressSanitizer builds");
#endif
    if (!RUNNING_ON_VALGRIND) {
        if (argc > 1) TEST_SKIP("not under valgrind");
        char *args[] = {"valgrind", "-q", "--tool=memcheck", "--error-exitcode=0", argv[0], "inner", NULL};
        execvp("valgrind", args);
        TEST_SKIP("valgrind not found");
    }
    /* sigma 1000.5: 24 body cells and 3 permute blocks, as at the secure scale 2^14, with
     * a table that builds quickly under valgrind */
    dg_table T;
    CHECK_OK(dg_table_build(1000.5, &T));
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, 5, DPT_STREAM_NOISE));
    static uint8_t rec[DG_GROUP_BYTES];
    int32_t out[DG_GROUP];
    long total = 0;
    unsigned before = VALGRIND_COUNT_ERRORS;
    for (int g = 0; g < 200; g++) {
        for (size_t k = 0; k < sizeof rec; k += 4) {
            uint32_t w = dpt_rng_u32(&r);
            memcpy(rec + k, &w, 4);
        }
        /* force tail candidates now and then (they are ~2^-28 of all otherwise) */
        if (g % 3 == 0) memset(rec + 4 * (g % DG_GROUP), 0xff, 4);
        if (g % 5 == 0) memset(rec + 4 * ((g * 7) % DG_GROUP), 0xff, 4);
        VALGRIND_MAKE_MEM_UNDEFINED(rec, sizeof rec);
        int n = DPT_ISA_NAME(dg_group)(&T, rec, out); /* the build compiled here, with the hook */
        total += n;
    }
    unsigned kernel_errors = VALGRIND_COUNT_ERRORS - before;
    /* the control: one secret-dependent branch */
    static uint8_t sec[2] = {1, 2};
    VALGRIND_MAKE_MEM_UNDEFINED(sec, sizeof sec);
    before = VALGRIND_COUNT_ERRORS;
    volatile int sink = leaky(sec);
    (void)sink;
    unsigned control_errors = VALGRIND_COUNT_ERRORS - before;
    printf("dg_group on 200 undefined keystream records (%ld accepted): %u memcheck errors; control: %u\n", total,
           kernel_errors, control_errors);
    CHECK(kernel_errors == 0);
    CHECK(control_errors > 0);
    CHECK(total > 200 * DG_GROUP * 8 / 10);
    dpt_rng_free(&r);
    TEST_MAIN_END();
#endif
}
