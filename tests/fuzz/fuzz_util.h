/* Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c, docs/fuzzing.md): temporary
 * files for parsers that take a path, NUL-terminated copies, and seed writing. Each
 * harness defines fuzz_seeds(dir), called from LLVMFuzzerInitialize when the environment
 * variable DPT_FUZZ_WRITE_SEEDS names a directory: the seed corpus is made by the project
 * itself (real files written by dptrain's own writers), never downloaded. */
#ifndef DPT_FUZZ_UTIL_H
#define DPT_FUZZ_UTIL_H
#include <dptrain/core.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);
static void fuzz_seeds(const char *dir);

/* A per-process file path for `name` (parsers of paths read it back). */
static inline const char *fuzz_path(const char *name) {
    static char buf[8][256];
    static int k = 0;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "/tmp/dpt_fuzz_%ld_%s", (long)getpid(), name);
    return p;
}

static inline void fuzz_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    if (fclose(f) != 0) abort();
}

/* data as a NUL-terminated string (caller frees) */
static inline char *fuzz_str(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, data, n);
    s[n] = 0;
    return s;
}

static inline void fuzz_seed(const char *dir, const char *name, const void *data, size_t n) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    fuzz_write(p, data, n);
}

static inline void fuzz_seed_file(const char *dir, const char *name, const char *src) {
    uint8_t *b;
    size_t n;
    if (dpt_read_file(src, &b, &n) != DPT_OK) {
        fprintf(stderr, "fuzz seeds: %s\n", dpt_last_error());
        abort();
    }
    fuzz_seed(dir, name, b, n);
    dpt_free(b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("DPT_FUZZ_WRITE_SEEDS");
    if (dir && *dir) {
        fuzz_seeds(dir);
        exit(0);
    }
    return 0;
}
#endif
