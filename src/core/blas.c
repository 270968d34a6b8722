/* Thin wrappers over OpenBLAS (cblas_sgemm) and LAPACKE (dsyevr), with naive references,
 * and the thread-count policy. */
#include <dptrain/core.h>

#include <cblas.h>
#include <dlfcn.h>
#include <lapacke.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* OpenBLAS's own setter and getter (declared in its cblas.h on Debian; repeated for other
 * BLASes). */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);

int dpt_threads_resolve(int requested) {
    if (requested > 0) return requested;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void dpt_threads_set_blas(int threads) { openblas_set_num_threads(dpt_threads_resolve(threads)); }

int dpt_threads_get_blas(void) { return openblas_get_num_threads(); }

/* ==== OpenBLAS's kernels on CPUs it does not know ====
 * A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels from the CPU model when it loads and
 * falls back to "Prescott" (SSE3) for a model it does not know: Debian 12's 0.3.21 does so
 * on Xeons newer than it (seen on family 6 model 207, which has AVX-512), where its SGEMM
 * then runs at about half speed (docs/dpsgd.md). When the library loads (a constructor:
 * before any call into it), if OpenBLAS reports Prescott although the CPU has AVX2 and FMA,
 * dptrain asks OpenBLAS to redo its choice as if OPENBLAS_CORETYPE named the right kernels
 * (SkylakeX with AVX-512 F/BW/DQ/VL/CD, else Haswell), through OpenBLAS's own exported
 * gotoblas_dynamic_quit / gotoblas_dynamic_init; the variable is set only for that call.
 * A real Prescott has no AVX2, so only the fallback is ever changed. Not done when the
 * user set OPENBLAS_CORETYPE, or DPTRAIN_BLAS_CORE=keep (or any value but auto), or the BLAS is not such an
 * OpenBLAS (the symbols are looked up, not linked). The choice depends only on the CPU, so
 * the CLI, C programs and Python get the same kernels (and bits). OpenBLAS is
 * process-wide: numpy's matrix products in the same process use the switched kernels too. */
static char blas_core_note[160];

static const char *blas_core_wanted(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512cd"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}

__attribute__((constructor)) static void blas_core_fix(void) {
    const char *keep = getenv("DPTRAIN_BLAS_CORE");
    if (keep && keep[0] && strcmp(keep, "keep") && strcmp(keep, "auto")) {
        /* a value the library does not know (a typo of keep?): leave OpenBLAS alone, and say so
         * where the kernels are reported (a library never prints) */
        snprintf(blas_core_note, sizeof blas_core_note,
                 "DPTRAIN_BLAS_CORE=%.40s is neither keep nor auto: OpenBLAS's own choice kept", keep);
        return;
    }
    if ((keep && !strcmp(keep, "keep")) || getenv("OPENBLAS_CORETYPE")) return;
    const char *(*name)(void) = NULL;
    void (*quit)(void) = NULL, (*init)(void) = NULL;
    *(void **)&name = dlsym(RTLD_DEFAULT, "openblas_get_corename");
    *(void **)&quit = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit");
    *(void **)&init = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
    if (!name || !quit || !init) return;
    const char *before = name(), *want = blas_core_wanted();
    if (!before || strcasecmp(before, "prescott") || !want) return;
    if (setenv("OPENBLAS_CORETYPE", want, 1)) return;
    quit();
    init();
    unsetenv("OPENBLAS_CORETYPE");
    const char *after = name();
    snprintf(blas_core_note, sizeof blas_core_note,
             "switched by dptrain from OpenBLAS's Prescott fallback on this CPU to %s; DPTRAIN_BLAS_CORE=keep leaves it",
             after ? after : "?");
}

const char *dpt_blas_core(void) {
    const char *(*name)(void) = NULL;
    *(void **)&name = dlsym(RTLD_DEFAULT, "openblas_get_corename");
    static char buf[224];
    if (!name) return "unknown (not OpenBLAS)";
    snprintf(buf, sizeof buf, "OpenBLAS %s%s%s", name(), blas_core_note[0] ? " (" : "", blas_core_note);
    if (blas_core_note[0]) strncat(buf, ")", sizeof buf - strlen(buf) - 1);
    return buf;
}

void dpt_sgemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
               const float *A, size_t lda, const float *B, size_t ldb, float beta, float *C,
               size_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) { /* BLAS leaves C alone only when beta == 1; make K = 0 mean C = beta C */
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

void dpt_ssyrk_gram(int trans, size_t n, size_t k, const float *A, size_t lda, float *C, size_t ldc) {
    if (n == 0) return;
    if (k == 0) {
        for (size_t i = 0; i < n; i++) memset(C + i * ldc, 0, n * sizeof *C);
        return;
    }
    /* the upper triangle (row-major) from BLAS, then mirrored */
    cblas_ssyrk(CblasRowMajor, CblasUpper, trans ? CblasTrans : CblasNoTrans, (int)n, (int)k, 1.0f, A, (int)lda, 0.0f,
                C, (int)ldc);
    for (size_t i = 1; i < n; i++)
        for (size_t j = 0; j < i; j++) C[i * ldc + j] = C[j * ldc + i];
}

void dpt_sgemm_ref(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                   const float *A, size_t lda, const float *B, size_t ldb, float beta,
                   float *C, size_t ldc) {
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = 0.0;
            for (size_t k = 0; k < K; k++) {
                double a = trans_a ? A[k * lda + i] : A[i * lda + k];
                double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
            }
            double c0 = beta == 0.0f ? 0.0 : (double)beta * C[i * ldc + j];
            C[i * ldc + j] = (float)(alpha * s + c0);
        }
}

dpt_status dpt_syev(size_t n, double *A, double *w, double *Z) {
    DPT_CHECK(n >= 1, DPT_EINVAL, "syev: empty matrix");
    lapack_int m = 0;
    lapack_int *isuppz = dpt_alloc2(2, n, sizeof *isuppz, "syev workspace");
    double *z = Z;
    double *ztmp = NULL;
    if (!z) {
        ztmp = dpt_alloc2(n, n, sizeof(double), "syev workspace");
        z = ztmp;
    }
    if (!isuppz || !z) {
        free(isuppz);
        dpt_free(ztmp);
        return dpt_set_error(DPT_ENOMEM, "syev: out of memory for n = %zu", n);
    }
    lapack_int info = LAPACKE_dsyevr(LAPACK_ROW_MAJOR, Z ? 'V' : 'N', 'A', 'U', (lapack_int)n, A, (lapack_int)n,
                                     0.0, 0.0, 0, 0, 0.0, &m, w, z, (lapack_int)n, isuppz);
    free(isuppz);
    dpt_free(ztmp);
    DPT_CHECK(info == 0, DPT_ERANGE, "syev: LAPACKE_dsyevr failed (info %d)", (int)info);
    return DPT_OK;
}

/* A is symmetric: its row-major lower triangle is the column-major upper one, so either
 * convention works; LAPACK's column-major 'U' is our row-major 'L'. */
dpt_status dpt_chol(size_t n, double *A) {
    DPT_CHECK(n >= 1, DPT_EINVAL, "chol: empty matrix");
    lapack_int info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', (lapack_int)n, A, (lapack_int)n);
    DPT_CHECK(info >= 0, DPT_EINVAL, "chol: LAPACKE_dpotrf failed (info %d)", (int)info);
    if (info > 0) return dpt_set_error(DPT_ERANGE, "chol: matrix not positive definite (leading minor %d)", (int)info);
    return DPT_OK;
}

dpt_status dpt_chol_solve(size_t n, const double *L, size_t nrhs, double *B) {
    DPT_CHECK(n >= 1, DPT_EINVAL, "chol_solve: empty matrix");
    if (nrhs == 0) return DPT_OK;
    lapack_int info = LAPACKE_dpotrs(LAPACK_COL_MAJOR, 'U', (lapack_int)n, (lapack_int)nrhs, L, (lapack_int)n, B,
                                     (lapack_int)n);
    DPT_CHECK(info == 0, DPT_EINVAL, "chol_solve: LAPACKE_dpotrs failed (info %d)", (int)info);
    return DPT_OK;
}
