/* Minimal test harness: CHECK macros print both values and file:line, count failures,
 * and TEST_MAIN_END returns non-zero when any check failed (a test that cannot fail is a
 * defect). Exit code 77 = skipped (ctest SKIP_RETURN_CODE). Not thread-safe. */
#ifndef DPT_TESTUTIL_H
#define DPT_TESTUTIL_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>
#include <sys/stat.h>

static int tu_fail_ = 0, tu_checks_ = 0;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        tu_checks_++;                                                                    \
        if (!(cond)) {                                                                   \
            tu_fail_++;                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
        }                                                                                \
    } while (0)

/* |a - b| <= atol + rtol * |b| (b is the reference). */
#define CHECK_CLOSE(a, b, atol, rtol)                                                    \
    do {                                                                                 \
        double tu_a_ = (double)(a), tu_b_ = (double)(b);                                 \
        tu_checks_++;                                                                    \
        if (!(fabs(tu_a_ - tu_b_) <= (atol) + (rtol)*fabs(tu_b_))) {                     \
            tu_fail_++;                                                                  \
            fprintf(stderr, "%s:%d: CHECK_CLOSE failed: %s = %.17g, %s = %.17g "         \
                    "(atol %g, rtol %g)\n", __FILE__, __LINE__, #a, tu_a_, #b, tu_b_,    \
                    (double)(atol), (double)(rtol));                                     \
        }                                                                                \
    } while (0)

/* Expects a dpt_status expression to equal `want`; prints the library message if not. */
#define CHECK_STATUS(expr, want)                                                         \
    do {                                                                                 \
        int tu_s_ = (int)(expr);                                                         \
        tu_checks_++;                                                                    \
        if (tu_s_ != (int)(want)) {                                                      \
            tu_fail_++;                                                                  \
            fprintf(stderr, "%s:%d: %s returned %d, want %d (%s)\n", __FILE__, __LINE__, \
                    #expr, tu_s_, (int)(want), dpt_last_error());                        \
        }                                                                                \
    } while (0)
#define CHECK_OK(expr) CHECK_STATUS(expr, 0)

/* The last error message contains `needle`. */
#define CHECK_ERR_HAS(needle)                                                            \
    do {                                                                                 \
        tu_checks_++;                                                                    \
        if (!strstr(dpt_last_error(), (needle))) {                                       \
            tu_fail_++;                                                                  \
            fprintf(stderr, "%s:%d: error message \"%s\" lacks \"%s\"\n", __FILE__,      \
                    __LINE__, dpt_last_error(), (needle));                               \
        }                                                                                \
    } while (0)

#define TEST_MAIN_END()                                                                  \
    do {                                                                                 \
        printf("%d checks, %d failed\n", tu_checks_, tu_fail_);                          \
        return tu_fail_ ? 1 : (tu_checks_ ? 0 : 1);                                      \
    } while (0)

#define TEST_SKIP(...)                                                                   \
    do {                                                                                 \
        printf("SKIP: ");                                                                \
        printf(__VA_ARGS__);                                                             \
        printf("\n");                                                                    \
        exit(77);                                                                        \
    } while (0)

/* Path of the shared datasets directory (ctest sets DPT_SHARED_DATASETS), or NULL. */
static inline const char *tu_shared_datasets(void) {
    const char *p = getenv("DPT_SHARED_DATASETS");
    return (p && *p) ? p : NULL;
}
/* A fresh temporary directory for a test's files (mkdtemp under /tmp), removed with
 * everything in it when the test exits (issue 18: tests left dpt_test_* behind). */
static char tu_tmpdir_path_[64];
/* rm -r of a directory the test made (regular files and subdirectories, no links followed) */
static void tu_rm_tree_(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) tu_rm_tree_(p);
            else remove(p);
        }
        closedir(d);
    }
    rmdir(path);
}
static void tu_tmpdir_cleanup_(void) {
    if (tu_tmpdir_path_[0]) tu_rm_tree_(tu_tmpdir_path_);
}
static inline const char *tu_tmpdir(void) {
    if (!tu_tmpdir_path_[0]) {
        strcpy(tu_tmpdir_path_, "/tmp/dpt_test_XXXXXX");
        if (!mkdtemp(tu_tmpdir_path_)) { perror("mkdtemp"); exit(1); }
        atexit(tu_tmpdir_cleanup_);
    }
    return tu_tmpdir_path_;
}
/* Trainers keep each run's secret file outside its run directory, in DPTRAIN_SECRETS_DIR
 * when set (else under the user's home; docs/checkpoints.md): every test program points
 * it at a private temporary directory of its own (mode 0700), removed with its contents
 * when the program exits, so no test writes into the home directory. */
static char tu_secrets_path_[64];
static pid_t tu_secrets_owner_;
static void tu_secrets_cleanup_(void) {
    if (tu_secrets_path_[0] && getpid() == tu_secrets_owner_) tu_rm_tree_(tu_secrets_path_);
}
__attribute__((constructor)) static void tu_secrets_init_(void) {
    /* a test that re-executes itself (under valgrind: the same pid) keeps its directory,
     * which the new image removes at exit (the old one's atexit never runs) */
    const char *dir = getenv("DPTRAIN_SECRETS_DIR"), *pid = getenv("DPT_TEST_SECRETS_PID");
    char me[32];
    snprintf(me, sizeof me, "%ld", (long)getpid());
    if (dir && pid && !strcmp(pid, me) && !strncmp(dir, "/tmp/dpt_secrets_", 17) && strlen(dir) < sizeof tu_secrets_path_)
        strcpy(tu_secrets_path_, dir);
    else {
        strcpy(tu_secrets_path_, "/tmp/dpt_secrets_XXXXXX");
        if (!mkdtemp(tu_secrets_path_)) { perror("mkdtemp"); exit(1); }
    }
    tu_secrets_owner_ = getpid();
    setenv("DPTRAIN_SECRETS_DIR", tu_secrets_path_, 1);
    setenv("DPT_TEST_SECRETS_PID", me, 1);
    atexit(tu_secrets_cleanup_);
}
/* the test's secret directory (DPTRAIN_SECRETS_DIR) */
static inline const char *tu_secrets_dir(void) { return tu_secrets_path_; }
/* Naive reference of a clipped sum: sum[d] = sum_i x_i min(1, C / ||x_i||) over the rows of
 * X [n, d], in double; *clipped (may be NULL) counts the rows scaled down. */
/* Copies file `from` to `to` (created or truncated), with from's permission bits. */
static inline void tu_copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    CHECK(a && b);
    char buf[8192];
    size_t k;
    while (a && b && (k = fread(buf, 1, sizeof buf, a)) > 0) CHECK(fwrite(buf, 1, k, b) == k);
    if (a) fclose(a);
    if (b) fclose(b);
    struct stat st;
    if (stat(from, &st) == 0) chmod(to, st.st_mode & 0777);
}

static inline void tu_clipped_sum(const float *X, size_t n, size_t d, double C, double *sum, size_t *clipped) {
    memset(sum, 0, d * sizeof *sum);
    if (clipped) *clipped = 0;
    for (size_t i = 0; i < n; i++) {
        double sq = 0;
        for (size_t j = 0; j < d; j++) sq += (double)X[i * d + j] * X[i * d + j];
        const double f = sqrt(sq) > C ? C / sqrt(sq) : 1.0;
        if (clipped) *clipped += sqrt(sq) > C;
        for (size_t j = 0; j < d; j++) sum[j] += f * X[i * d + j];
    }
}
/* Cyclic Jacobi eigenvalues of a symmetric n x n matrix (naive reference for
 * LAPACK): A is overwritten, ev gets the diagonal after convergence (unsorted). */
static inline void tu_jacobi_eigenvalues(double *A, size_t n, double *ev) {
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (size_t p = 0; p < n; p++)
            for (size_t q = p + 1; q < n; q++) off += A[p * n + q] * A[p * n + q];
        if (off < 1e-30) break;
        for (size_t p = 0; p < n; p++)
            for (size_t q = p + 1; q < n; q++) {
                if (fabs(A[p * n + q]) < 1e-300) continue;
                double th = 0.5 * atan2(2 * A[p * n + q], A[q * n + q] - A[p * n + p]);
                double cs = cos(th), sn = sin(th);
                for (size_t k = 0; k < n; k++) {
                    double akp = A[k * n + p], akq = A[k * n + q];
                    A[k * n + p] = cs * akp - sn * akq;
                    A[k * n + q] = sn * akp + cs * akq;
                }
                for (size_t k = 0; k < n; k++) {
                    double apk = A[p * n + k], aqk = A[q * n + k];
                    A[p * n + k] = cs * apk - sn * aqk;
                    A[q * n + k] = sn * apk + cs * aqk;
                }
            }
    }
    for (size_t i = 0; i < n; i++) ev[i] = A[i * n + i];
}

#endif
