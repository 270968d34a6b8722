/* The DP-ULR controller's fast route (see dpulr_ctrl.h and solve_one in algo_dpulr.c).
 *
 * In the common case (s_l not raised by --ulr-std, A_l or the Gram matrix of full rank) the
 * controller needs only lambda_min (Eq. 7), an idea of lambda_max (the rank tolerance and
 * the diagnostics) and the Cholesky factor (PROJ_GRAM's top-up); the tridiagonal reduction of
 * a full eigenvalue solver costs far more than that. Here:
 *   lambda_max: power iteration; its Rayleigh quotient is a lower estimate. It only scales
 *     the rank tolerance (REL_RANK_TOL * lambda_max) and is reported: privacy does not rest on
 *     it, since s_l comes from a certified lower bound on lambda_min below.
 *   lambda_min: Lanczos on G^-1 (applied with G's Cholesky factor); its estimate rho is an
 *     UPPER bound (the unsafe side: s_l^2 = lambda / (K C^2 sigma0^2) from an overestimate
 *     would leave the weakest direction short of sigma0 C), so it is only a guess, then
 *     CERTIFIED: mu = rho (1 - DPT_ULR_CERT_SHIFT) is accepted only if the Cholesky
 *     factorization of H = fl(G - mu I) succeeds, and the bound returned is mu - delta.
 *
 * Why mu - delta <= lambda_min(G) (u = 2^-53, G the double matrix given):
 *   H = G - mu I + D, D diagonal with |D_ii| <= u |H_ii| (one subtraction per diagonal entry).
 *   A successful Cholesky factorization gives R (positive diagonal) with R^T R = H + dH,
 *   |dH| <= gamma_{d+1} |R^T| |R| entrywise, gamma_k = k u / (1 - k u) (Higham, Accuracy and
 *   Stability of Numerical Algorithms, 2nd ed., Thm 10.3; the blocked LAPACK/BLAS variants
 *   only reorder the same inner products). So H + dH is positive definite and
 *   lambda_min(H) > -||dH||_2 >= -gamma_{d+1} || |R| ||_F^2 = -gamma_{d+1} trace(H + dH),
 *   and trace(H + dH) <= trace(H) + gamma_{d+1} ||R||_F^2 gives ||R||_F^2 <= trace(H) /
 *   (1 - gamma_{d+1}). Hence lambda_min(G) = mu + lambda_min(H - D) >= mu - gamma_{d+1}
 *   trace(H) / (1 - gamma_{d+1}) - u max_i |H_ii|. For d u < 1/8 this is >= mu - delta with
 *   delta = 4 (d + 2) u (trace(H) + max_i H_ii): the factor 4 over the bound's ~1.3 also
 *   covers the rounding of the trace itself (d positive terms) and of delta. delta is tiny:
 *   trace(H) <= d lambda_max, so delta / lambda_min <= 4 (d + 2)(d + 1) u cond(G), about
 *   1.2e-5 for d = 256 at the rank tolerance's worst cond = 1e6, and ~1e-11 typically.
 *   rho is used only as a guess: a non-converged or wrong rho (e.g. an eigenvalue above
 *   lambda_min) makes the factorization fail, and the caller takes the full eigen route. */
#include "dpulr_ctrl.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define POWER_MAX_IT 60
#define POWER_RTOL 1e-7
#define LANCZOS_MAX 64

/* four partial sums (a fixed order: the same result for any thread count) */
static double dot(size_t d, const double *a, const double *b) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= d; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < d; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

static void symv(size_t d, const double *G, const double *x, double *y) {
    for (size_t i = 0; i < d; i++) y[i] = dot(d, G + i * d, x);
}

/* G w = w in place with dpt_chol's factor (column-major upper U, G = U^T U: U(i, j) at
 * L[j d + i], i <= j): U^T z = w by rows of U^T, then U w = z by columns; both contiguous */
static void chol_solve1(size_t d, const double *L, double *w) {
    for (size_t j = 0; j < d; j++) w[j] = (w[j] - dot(j, L + j * d, w)) / L[j * d + j];
    for (size_t j = d; j-- > 0;) {
        w[j] /= L[j * d + j];
        const double *c = L + j * d;
        double wj = w[j];
        for (size_t i = 0; i < j; i++) w[i] -= c[i] * wj;
    }
}

/* a fixed start vector (no RNG: the controller must not move the noise streams) */
static void start_vector(size_t d, double *x, uint64_t seed) {
    double nn = 0;
    for (size_t i = 0; i < d; i++) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        h ^= h >> 29;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 32;
        x[i] = 0.5 + (double)(h >> 11) * 0x1p-53; /* (0.5, 1.5): no sign pattern to miss */
        nn += x[i] * x[i];
    }
    nn = 1.0 / sqrt(nn);
    for (size_t i = 0; i < d; i++) x[i] *= nn;
}

dpt_status dpt_ulr_lmin_certified(size_t d, const double *G, double *L, double *W, double *lmin_cert,
                                  double *lmax_est) {
    DPT_CHECK(d >= 1, DPT_EINVAL, "ulr_lmin_certified: empty matrix");
    *lmin_cert = 0;
    *lmax_est = 0;
    if ((double)(d + 2) * DBL_EPSILON > 0.125) return DPT_ERANGE; /* the bound's premise */
    double *x = dpt_alloc2(2, d, sizeof(double), "dpulr controller vectors");
    if (!x) return DPT_ENOMEM;
    double *y = x + d;
    dpt_status st = DPT_ERANGE;
    /* lambda_max: power iteration (Rayleigh quotients from below) */
    start_vector(d, x, 1);
    double lmax = 0;
    for (int it = 0; it < POWER_MAX_IT; it++) {
        symv(d, G, x, y);
        double rq = dot(d, x, y), ny = sqrt(dot(d, y, y));
        if (!(ny > 0) || !isfinite(ny)) goto out;
        for (size_t i = 0; i < d; i++) x[i] = y[i] / ny;
        int done = it > 0 && fabs(rq - lmax) <= POWER_RTOL * rq;
        if (rq > lmax) lmax = rq;
        if (done) break;
    }
    if (!(lmax > 0)) goto out;
    /* Cholesky factor of G itself (inverse iteration, and the caller's PROJ_GRAM) */
    memcpy(L, G, d * d * sizeof(double));
    if (dpt_chol(d, L) != DPT_OK) goto out;
    /* lambda_min: Lanczos on G^-1 (applied with the factor), full reorthogonalization;
     * rho = 1 / (largest Ritz value of T_j), an upper estimate of lambda_min. Inverse
     * iteration alone crawls when the smallest eigenvalues cluster (a Gram matrix of 256
     * MNIST rows: 40 iterations left rho 1% high); Lanczos needs about the square root of
     * those steps. */
    size_t m = d < LANCZOS_MAX ? d : LANCZOS_MAX;
    /* cannot wrap: m <= LANCZOS_MAX and m <= d, and d x d doubles were allocated above */
    double *Q = dpt_alloc((m + 1) * d + 2 * m + m * m + m, sizeof(double), "dpulr controller Lanczos");
    if (!Q) {
        st = DPT_ENOMEM;
        goto out;
    }
    double *al = Q + (m + 1) * d, *be = al + m, *T = be + m, *tw = T + m * m;
    start_vector(d, Q, 2);
    double rho = INFINITY, theta = 0;
    for (size_t j = 0; j < m; j++) {
        double *q = Q + j * d, *w = Q + (j + 1) * d;
        memcpy(w, q, d * sizeof(double));
        chol_solve1(d, L, w);
        al[j] = dot(d, q, w);
        for (int pass = 0; pass < 2; pass++) /* against every earlier vector, twice */
            for (size_t i = 0; i <= j; i++) {
                double c = dot(d, Q + i * d, w);
                for (size_t e = 0; e < d; e++) w[e] -= c * Q[i * d + e];
            }
        be[j] = sqrt(dot(d, w, w));
        size_t k = j + 1;
        int invariant = !(be[j] > 1e-14 * fabs(al[j]));
        if (k % 4 == 0 || k == m || invariant) {
            memset(T, 0, k * k * sizeof(double));
            for (size_t i = 0; i < k; i++) {
                T[i * k + i] = al[i];
                if (i + 1 < k) T[i * k + i + 1] = T[(i + 1) * k + i] = be[i];
            }
            if (dpt_syev(k, T, tw, NULL) != DPT_OK) break;
            double th = tw[k - 1];
            int done = th > 0 && fabs(th - theta) <= 1e-3 * DPT_ULR_CERT_SHIFT * th;
            theta = th;
            if (done) break;
        }
        if (invariant) break;
        for (size_t e = 0; e < d; e++) w[e] /= be[j];
    }
    dpt_free(Q);
    if (theta > 0) rho = 1.0 / theta;
    if (!(rho > 0) || !isfinite(rho)) goto out;
    /* the certificate (see the top of the file) */
    double mu = rho * (1.0 - DPT_ULR_CERT_SHIFT), tr = 0, hmax = 0;
    memcpy(W, G, d * d * sizeof(double));
    for (size_t i = 0; i < d; i++) {
        W[i * d + i] -= mu;
        tr += W[i * d + i];
        if (W[i * d + i] > hmax) hmax = W[i * d + i];
    }
    if (!(tr > 0)) goto out;
    if (dpt_chol(d, W) != DPT_OK) goto out;
    double delta = 4.0 * (double)(d + 2) * (DBL_EPSILON / 2) * (tr + hmax);
    if (!(mu - delta > 0)) goto out;
    *lmin_cert = mu - delta;
    *lmax_est = lmax;
    st = DPT_OK;
out:
    if (st == DPT_ERANGE) dpt_clear_error();
    dpt_free(x);
    return st;
}
