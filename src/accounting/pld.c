/* Privacy loss distribution (PLD) accountant for the Poisson-sampled Gaussian mechanism
 * under add/remove adjacency.
 *
 * A PLD is the distribution of the privacy loss L = log(dP/dQ)(X), X ~ P, on a grid
 * l_k = k h, plus a mass at +infinity. delta(eps) = P(L = inf) + E[(1 - e^(eps - L))_+].
 * Composition of mechanisms is convolution of their PLDs (Sommer, Meiser, Mohammadi 2019;
 * Koskela, Jalko, Honkela 2020), done here by FFT with repeated squaring.
 *
 * Discretization (the "connect-the-dots" construction of Doroshenko, Ghazi, Kamath, Kumar,
 * Manurangsi 2022): the P-mass a of the losses in (l_k, l_k+1] is split between the two
 * grid points so that both a and the Q-mass b = E_P[e^-L] of that interval are preserved.
 * For every eps, (1 - e^eps y)_+ is convex in y = e^-L, so moving the mass of y to the
 * interval ends with the same mean can only increase E[(1 - e^eps y)_+] (the chord lies
 * above a convex function): the discrete pair dominates the true one for every eps, and
 * domination survives composition (Zhu, Dong, Wang 2022, Thm. 10). Unlike rounding every
 * loss up, the bias is second order in h, so T = 1e5 steps stay tight. Coarsening the grid
 * by two (h -> 2h) uses the same split. Tails: mass above the grid goes to +infinity,
 * mass below it to the lowest grid point; both only increase delta. */
#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "core/fftw_lock.h"
#include "dptrain/accounting.h"

dpt_status dpt_acct_check_common(double q, double sigma, uint64_t steps, double delta);
dpt_status dpt_acct_pld_eval(const double *qs, const double *sigmas, const uint64_t *counts,
                             size_t n_ev, int want_eps, double target, const dpt_pld_options *opt,
                             double *out);

/* ==== Parameters ==== */

#define PLD_H_BASE 1e-4       /* default finest grid interval (nats) */
#define PLD_MAX_BINS (1 << 14) /* default: coarsen the grid beyond this many points */
#define PLD_TAIL_Z 8.5       /* truncate the Gaussian at 8.5 std: tail mass 9.5e-18 */
#define PLD_TRUNC_MASS 1e-16 /* tail mass cut after each convolution */
#define PLD_FLOOR_REL 1e-15  /* FFT round-off floor relative to the largest mass */

typedef enum { DIR_REMOVE = 0, DIR_ADD = 1 } pld_dir;

/* p[i] is the P-mass at loss (off + i) * h, h = h_base * 2^lev; inf = mass at +inf. */
typedef struct {
    double *p;
    size_t n;
    long off;
    int lev;
    double h;
    double inf;
} pld_pmf;

static void pmf_free(pld_pmf *f) {
    if (f) {
        dpt_free(f->p);
        f->p = NULL;
        f->n = 0;
    }
}

/* ==== One step of the subsampled Gaussian ==== */

/* A point x of the output space with the standard normal tails of both components:
 * e[c] = Phi(-|u_c|) for u_0 = x / s, u_1 = (x - 1) / s (the smaller tail, so that
 * differences of nearby points stay accurate far out in the tails). */
typedef struct {
    double u[2], e[2];
} xpoint;

static xpoint make_point(double x, double s) {
    xpoint p;
    p.u[0] = x / s;
    p.u[1] = (x - 1.0) / s;
    for (int c = 0; c < 2; c++) p.e[c] = 0.5 * erfc(fabs(p.u[c]) / M_SQRT2);
    return p;
}

/* Phi(v) - Phi(u) for the points a <= b, component c. */
static double dphi(const xpoint *a, const xpoint *b, int c) {
    double u = a->u[c], v = b->u[c], eu = a->e[c], ev = b->e[c];
    if (!(v > u)) return 0.0;
    if (u > 0) return eu - ev;          /* Phi_c(u) - Phi_c(v) */
    if (v < 0) return ev - eu;          /* Phi(v) - Phi(u) */
    return 1.0 - ev - eu;               /* 1 - Phi_c(v) - Phi(u) */
}

/* Loss as a function of the output x (one coordinate suffices: the sensitivity direction).
 * REMOVE: P = (1-q) N(0,s^2) + q N(1,s^2), Q = N(0,s^2): L(x) = log(1 - q + q e^z),
 * ADD:    P = N(0,s^2), Q = the mixture:                 L(x) = -log(1 - q + q e^z),
 * with z = (2x - 1) / (2 s^2). */
static double loss_of_x(pld_dir d, double q, double s, double x) {
    double z = (2.0 * x - 1.0) / (2.0 * s * s);
    double a = q < 1.0 ? log1p(-q) : -INFINITY, b = log(q) + z;
    double m = a > b ? a : b;
    double l = m + log1p(exp((a > b ? b : a) - m));
    return d == DIR_REMOVE ? l : -l;
}

/* x where the loss crosses l: REMOVE is increasing in x, ADD decreasing. +-inf outside. */
static double x_of_loss(pld_dir d, double q, double s, double l) {
    if (l == INFINITY) return d == DIR_REMOVE ? INFINITY : -INFINITY;
    if (l == -INFINITY) return d == DIR_REMOVE ? -INFINITY : INFINITY;
    double t = d == DIR_REMOVE ? expm1(l) + q : expm1(-l) + q; /* e^(+-l) - (1 - q) */
    if (!(t > 0)) return -INFINITY;
    if (t == INFINITY) return INFINITY;
    return s * s * (log(t) - log(q)) + 0.5;
}

/* P- and Q-mass of the losses between the grid points whose x are pa, pb (pa at the
 * smaller loss). */
static void masses(pld_dir d, double q, const xpoint *pa, const xpoint *pb, double *a, double *b) {
    const xpoint *lo = d == DIR_REMOVE ? pa : pb, *hi = d == DIR_REMOVE ? pb : pa;
    double g0 = dphi(lo, hi, 0), g1 = dphi(lo, hi, 1);
    double mix = (1.0 - q) * g0 + q * g1;
    *a = d == DIR_REMOVE ? mix : g0;
    *b = d == DIR_REMOVE ? g0 : mix;
}

/* Splits P-mass a with Q-mass b of losses in (l, l + h] between l and l + h preserving
 * both (see the file comment): v at l + h, a - v at l. */
static double split_upper(double a, double b, double l, double h) {
    double v = (a - b * exp(l)) / (-expm1(-h));
    if (!(v > 0)) v = 0;
    if (v > a) v = a;
    return v;
}

static dpt_status pmf_one_step(pld_dir d, double q, double s, double h_base, size_t max_bins, pld_pmf *f) {
    double xlo = -PLD_TAIL_Z * s, xhi = (d == DIR_REMOVE ? 1.0 : 0.0) + PLD_TAIL_Z * s;
    double la = loss_of_x(d, q, s, d == DIR_REMOVE ? xlo : xhi);
    double lb = loss_of_x(d, q, s, d == DIR_REMOVE ? xhi : xlo);
    int lev = 0;
    while ((lb - la) / ldexp(h_base, lev) + 5 > (double)max_bins) lev++;
    double h = ldexp(h_base, lev);
    /* One more grid point on each side: la and lb carry the rounding error of
     * loss_of_x, a few ulps of |log(1 - q)| + |log q| (< 1e-12 <= h). Without it a
     * huge sigma, whose every loss is within 1e-16 of 0, could get a grid whose top
     * point lies below losses that exist, and their mass (half of it) went to +inf:
     * epsilon inf for sigma 1e17..1e30. The extra points hold (almost) no mass. */
    long klo = (long)floor(la / h) - 1, khi = (long)ceil(lb / h) + 1;
    size_t n = (size_t)(khi - klo + 1);
    f->p = dpt_alloc(n, sizeof(double), "PLD");
    if (!f->p) return DPT_ENOMEM;
    f->n = n;
    f->off = klo;
    f->lev = lev;
    f->h = h;
    double a, b;
    xpoint bottom = make_point(x_of_loss(d, q, s, -INFINITY), s);
    xpoint top = make_point(x_of_loss(d, q, s, INFINITY), s);
    xpoint cur = make_point(x_of_loss(d, q, s, klo * h), s);
    masses(d, q, &bottom, &cur, &a, &b);
    f->p[0] += a; /* below the grid: raised to the lowest point */
    for (long k = klo; k < khi; k++) {
        double l = k * h;
        xpoint next = make_point(x_of_loss(d, q, s, l + h), s);
        masses(d, q, &cur, &next, &a, &b);
        cur = next;
        if (a <= 0) continue;
        double v = split_upper(a, b, l, h);
        f->p[k - klo] += a - v;
        f->p[k - klo + 1] += v;
    }
    masses(d, q, &cur, &top, &a, &b);
    f->inf = a; /* above the grid: to +infinity */
    return DPT_OK;
}

/* ==== Grid operations ==== */

/* h -> 2h: even points map onto the coarse grid, odd ones split between neighbours. */
static dpt_status pmf_coarsen(pld_pmf *f) {
    double h = f->h;
    long off2 = (long)floor(f->off / 2.0);
    long last = f->off + (long)f->n - 1;
    long end2 = (long)ceil(last / 2.0);
    size_t n2 = (size_t)(end2 - off2 + 1);
    double *p2 = dpt_alloc(n2, sizeof(double), "PLD");
    if (!p2) return DPT_ENOMEM;
    /* mass m at l = c + h, between c and c + 2h: preserve m and m e^-l. */
    double frac_up = -expm1(-h) / -expm1(-2.0 * h);
    for (size_t i = 0; i < f->n; i++) {
        long k = f->off + (long)i;
        double m = f->p[i];
        if (m == 0) continue;
        if ((k & 1L) == 0) {
            p2[k / 2 - off2] += m;
        } else {
            long c = (k - 1) / 2; /* exact: k - 1 is even */
            double v = m * frac_up;
            p2[c - off2] += m - v;
            p2[c + 1 - off2] += v;
        }
    }
    dpt_free(f->p);
    f->p = p2;
    f->n = n2;
    f->off = off2;
    f->lev++;
    f->h = 2.0 * h;
    return DPT_OK;
}

/* Cuts the tails: from each end, points are dropped while their cumulative mass is at
 * most PLD_TRUNC_MASS or they are below the FFT round-off floor (PLD_FLOOR_REL times the
 * largest mass: an FFT convolution cannot resolve smaller values, and keeping its noise
 * would let the support grow without bound). The lower tail is raised to the first kept
 * point, the upper tail goes to +infinity: both only increase delta. */
static void pmf_truncate(pld_pmf *f) {
    double mx = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (!(f->p[i] > 0)) f->p[i] = 0; /* negative round-off */
        if (f->p[i] > mx) mx = f->p[i];
    }
    double floor_v = PLD_FLOOR_REL * mx;
    size_t lo = 0, hi = f->n - 1;
    double cum = 0;
    while (lo < hi && (cum + f->p[lo] <= PLD_TRUNC_MASS || f->p[lo] <= floor_v)) cum += f->p[lo++];
    f->p[lo] += cum;
    double top = 0;
    while (hi > lo && (top + f->p[hi] <= PLD_TRUNC_MASS || f->p[hi] <= floor_v)) top += f->p[hi--];
    f->inf += top;
    size_t n = hi - lo + 1;
    if (lo > 0) memmove(f->p, f->p + lo, n * sizeof(double));
    f->n = n;
    f->off += (long)lo;
}

static size_t next_pow2(size_t n) {
    size_t m = 1;
    while (m < n) m <<= 1;
    return m;
}

/* FFTW's planner, plan destruction and its allocator share global state (the wisdom and
 * the twiddle cache): only fftw_execute on distinct plans is thread safe. Every other
 * FFTW call goes through the library's one FFTW lock (core/fftw_lock.h, shared with the
 * scattering layer), so PLD evaluations may run on several threads at once (parallel
 * audit shadows and canary runs each account their own run). */
#define fftw_lock dpt_fftw_lock

/* FFT workspace of one evaluation: buffers for the largest transform and one pair of
 * plans per power-of-two size, created on first use. Planning computes twiddle factors,
 * which would otherwise cost more than the transforms themselves. */
#define PLD_PLANS 40
typedef struct {
    size_t max_bins; /* supports are coarsened beyond this */
    int max_log2n;   /* largest transform: 2 * max_bins points */
    size_t cap;      /* real length of bx */
    double *bx;
    fftw_complex *cx, *cy;
    fftw_plan fwd[PLD_PLANS], bwd[PLD_PLANS];
} pld_fft;

static dpt_status fft_init(pld_fft *w, size_t max_bins) {
    memset(w, 0, sizeof *w);
    w->max_bins = max_bins;
    while (((size_t)1 << w->max_log2n) < 2 * max_bins) w->max_log2n++;
    w->cap = (size_t)1 << w->max_log2n;
    pthread_mutex_lock(&fftw_lock);
    w->bx = fftw_malloc(w->cap * sizeof(double));
    w->cx = fftw_malloc((w->cap / 2 + 1) * sizeof(fftw_complex));
    w->cy = fftw_malloc((w->cap / 2 + 1) * sizeof(fftw_complex));
    int ok = w->bx && w->cx && w->cy;
    if (!ok) {
        fftw_free(w->bx);
        fftw_free(w->cx);
        fftw_free(w->cy);
    }
    pthread_mutex_unlock(&fftw_lock);
    if (!ok) {
        memset(w, 0, sizeof *w);
        return dpt_set_error(DPT_ENOMEM, "PLD: out of memory for FFT buffers");
    }
    return DPT_OK;
}

static void fft_free(pld_fft *w) {
    pthread_mutex_lock(&fftw_lock);
    for (int i = 0; i < PLD_PLANS; i++) {
        if (w->fwd[i]) fftw_destroy_plan(w->fwd[i]);
        if (w->bwd[i]) fftw_destroy_plan(w->bwd[i]);
    }
    fftw_free(w->bx);
    fftw_free(w->cx);
    fftw_free(w->cy);
    pthread_mutex_unlock(&fftw_lock);
    memset(w, 0, sizeof *w);
}

/* out = x * y (both on the same grid), by FFT. x may equal y (squaring: one transform). */
static dpt_status pmf_convolve(pld_fft *w, const pld_pmf *x, const pld_pmf *y, pld_pmf *out) {
    size_t nr = x->n + y->n - 1, N = next_pow2(nr), nc = N / 2 + 1;
    int lg = 0;
    while (((size_t)1 << lg) < N) lg++;
    DPT_ASSERT(lg <= w->max_log2n); /* supports are capped at max_bins points */
    if (!w->fwd[lg]) {
        pthread_mutex_lock(&fftw_lock);
        w->fwd[lg] = fftw_plan_dft_r2c_1d((int)N, w->bx, w->cx, FFTW_ESTIMATE);
        w->bwd[lg] = fftw_plan_dft_c2r_1d((int)N, w->cx, w->bx, FFTW_ESTIMATE);
        pthread_mutex_unlock(&fftw_lock);
        DPT_CHECK(w->fwd[lg] && w->bwd[lg], DPT_ENOMEM, "PLD: FFTW could not plan a size-%zu transform", N);
    }
    double *res = dpt_alloc(nr, sizeof(double), "PLD");
    if (!res) return DPT_ENOMEM;
    double *bx = w->bx;
    fftw_complex *cx = w->cx, *cy = w->cy;
    memset(bx, 0, N * sizeof(double));
    memcpy(bx, x->p, x->n * sizeof(double));
    fftw_execute(w->fwd[lg]);
    if (x == y) {
        for (size_t i = 0; i < nc; i++) {
            double re = cx[i][0], im = cx[i][1];
            cx[i][0] = re * re - im * im;
            cx[i][1] = 2.0 * re * im;
        }
    } else {
        memcpy(cy, cx, nc * sizeof(fftw_complex));
        memset(bx, 0, N * sizeof(double));
        memcpy(bx, y->p, y->n * sizeof(double));
        fftw_execute(w->fwd[lg]);
        for (size_t i = 0; i < nc; i++) {
            double re = cx[i][0] * cy[i][0] - cx[i][1] * cy[i][1];
            double im = cx[i][0] * cy[i][1] + cx[i][1] * cy[i][0];
            cx[i][0] = re;
            cx[i][1] = im;
        }
    }
    fftw_execute(w->bwd[lg]); /* unnormalized: divide by N */
    for (size_t i = 0; i < nr; i++) res[i] = bx[i] / (double)N;
    out->p = res;
    out->n = nr;
    out->off = x->off + y->off;
    out->lev = x->lev;
    out->h = x->h;
    out->inf = x->inf + y->inf - x->inf * y->inf;
    pmf_truncate(out);
    while (out->n > w->max_bins) DPT_TRY(pmf_coarsen(out));
    return DPT_OK;
}

/* *acc = *acc * f (acc->p == NULL means the identity); f is not consumed. */
static dpt_status pmf_mul_into(pld_fft *w, pld_pmf *acc, pld_pmf *f) {
    if (!acc->p) {
        acc->p = dpt_alloc(f->n, sizeof(double), "PLD");
        if (!acc->p) return DPT_ENOMEM;
        memcpy(acc->p, f->p, f->n * sizeof(double));
        acc->n = f->n;
        acc->off = f->off;
        acc->lev = f->lev;
        acc->h = f->h;
        acc->inf = f->inf;
        return DPT_OK;
    }
    while (acc->lev < f->lev) DPT_TRY(pmf_coarsen(acc));
    while (f->lev < acc->lev) DPT_TRY(pmf_coarsen(f));
    pld_pmf out = {0};
    DPT_TRY(pmf_convolve(w, acc, f, &out));
    pmf_free(acc);
    *acc = out;
    return DPT_OK;
}

/* acc *= base^count by repeated squaring; base is consumed. */
static dpt_status pmf_pow_into(pld_fft *w, pld_pmf *acc, pld_pmf *base, uint64_t count) {
    dpt_status st = DPT_OK;
    while (count && st == DPT_OK) {
        if (count & 1) st = pmf_mul_into(w, acc, base);
        count >>= 1;
        if (count && st == DPT_OK) {
            pld_pmf sq = {0};
            st = pmf_convolve(w, base, base, &sq);
            if (st == DPT_OK) {
                pmf_free(base);
                *base = sq;
            }
        }
    }
    pmf_free(base);
    return st;
}

/* ==== delta(eps) and eps(delta) of a discrete PLD ==== */

static double pmf_delta(const pld_pmf *f, double eps) {
    double h = f->h, d = f->inf;
    for (size_t i = f->n; i-- > 0;) {
        double l = (f->off + (double)i) * h;
        if (l <= eps) break;
        d += f->p[i] * -expm1(eps - l);
    }
    return d > 1 ? 1 : d;
}

/* Smallest eps >= 0 with delta(eps) <= target. Walks down from the top keeping
 * A = inf + sum_{j>i} p_j and B = sum_{j>i} p_j e^(l_i - l_j), so delta(l_i) = A - B and,
 * between grid points, delta(l_i + t) = A - e^t B. */
static double pmf_epsilon(const pld_pmf *f, double target) {
    if (f->inf >= target) return INFINITY;
    double h = f->h, eh = exp(-h);
    double A = f->inf, B = 0;
    for (size_t i = f->n; i-- > 0;) {
        double l = (f->off + (double)i) * h;
        if (i + 1 < f->n) {
            A += f->p[i + 1];
            B = (B + f->p[i + 1]) * eh;
        }
        if (A - B >= target) { /* answer in [l_i, l_i+1]: A - e^t B = target */
            if (B <= 0) return l < 0 ? 0 : l;
            double e = l + log((A - target) / B);
            return e < 0 ? 0 : e;
        }
        if (l <= 0) return 0; /* delta(0) <= delta(l_i) < target */
    }
    return 0;
}

/* ==== Public entry points ==== */

dpt_status dpt_acct_pld_eval(const double *qs, const double *sigmas, const uint64_t *counts,
                             size_t n_ev, int want_eps, double target, const dpt_pld_options *opt,
                             double *out) {
    double h_base = opt ? opt->grid : PLD_H_BASE;
    size_t max_bins = opt ? opt->max_points : PLD_MAX_BINS;
    DPT_CHECK(isfinite(h_base) && h_base >= 1e-9 && h_base <= 1.0, DPT_EINVAL,
              "PLD grid interval must be in [1e-9, 1], got %g", h_base);
    DPT_CHECK(max_bins >= 64 && max_bins <= ((size_t)1 << 24), DPT_EINVAL,
              "PLD max points must be in [64, 2^24], got %zu", max_bins);
    double worst = 0;
    pld_fft w;
    DPT_TRY(fft_init(&w, max_bins));
    for (int d = 0; d < 2; d++) {
        pld_pmf acc = {0};
        dpt_status st = DPT_OK;
        for (size_t e = 0; e < n_ev && st == DPT_OK; e++) {
            pld_pmf base = {0};
            st = pmf_one_step((pld_dir)d, qs[e], sigmas[e], h_base, max_bins, &base);
            if (st == DPT_OK) st = pmf_pow_into(&w, &acc, &base, counts[e]);
            else pmf_free(&base);
        }
        if (st != DPT_OK) {
            pmf_free(&acc);
            fft_free(&w);
            return st;
        }
        double v = 0;
        if (acc.p) v = want_eps ? pmf_epsilon(&acc, target) : pmf_delta(&acc, target);
        if (v > worst) worst = v;
        pmf_free(&acc);
    }
    fft_free(&w);
    *out = worst;
    return DPT_OK;
}

dpt_status dpt_pld_sgm_epsilon(double q, double sigma, uint64_t steps, double delta, double *eps) {
    DPT_TRY(dpt_acct_check_common(q, sigma, steps, delta));
    DPT_CHECK(eps != NULL, DPT_EINVAL, "eps output is NULL");
    return dpt_acct_pld_eval(&q, &sigma, &steps, 1, 1, delta, NULL, eps);
}

dpt_status dpt_pld_sgm_epsilon_ex(double q, double sigma, uint64_t steps, double delta,
                                  const dpt_pld_options *opt, double *eps) {
    DPT_TRY(dpt_acct_check_common(q, sigma, steps, delta));
    DPT_CHECK(eps != NULL, DPT_EINVAL, "eps output is NULL");
    return dpt_acct_pld_eval(&q, &sigma, &steps, 1, 1, delta, opt, eps);
}

dpt_status dpt_pld_sgm_delta(double q, double sigma, uint64_t steps, double eps, double *delta) {
    DPT_TRY(dpt_acct_check_common(q, sigma, steps, 0.5));
    DPT_CHECK(isfinite(eps) && eps >= 0, DPT_EINVAL, "epsilon must be >= 0 and finite, got %g", eps);
    DPT_CHECK(delta != NULL, DPT_EINVAL, "delta output is NULL");
    return dpt_acct_pld_eval(&q, &sigma, &steps, 1, 0, eps, NULL, delta);
}
