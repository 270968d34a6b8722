/* 2-d scattering transform (Mallat, "Group invariant scattering", CPAM 2012; Bruna & Mallat,
 * "Invariant scattering convolution networks", TPAMI 2013; Oyallon & Mallat, CVPR 2015), as
 * Kymatio's Scattering2D computes it (Andreux et al., JMLR 2020) and Tramer & Boneh (ICLR 2021)
 * use it for DP-SGD features: J scales, L angles, order 2, Morlet wavelets. A fixed,
 * data-independent layer: no parameters, and no gradient with respect to its input (it must be
 * the model's first layer, so none is ever needed).
 *
 * Letters: B = batch, C = input channels, H x W input, Hp x Wp padded grid (a multiple of
 * 2^J), level r = the grid subsampled by 2^r (Hp / 2^r x Wp / 2^r, n_r points), Ho x Wo
 * output, P = 1 + J L + L^2 J (J - 1) / 2 paths per input channel.
 *
 * Per channel x (reflect-padded to Hp x Wp), with psi_{j,t} the Morlet wavelet of scale j and
 * angle t and phi the Gaussian low-pass, every convolution circular on the current grid:
 *   S0 = (x * phi) (2^J u)
 *   S1[j1,t1] = (U1 * phi) (2^J u),        U1 = |x * psi_{j1,t1}| (2^j1 u)
 *   S2[j1,t1,j2,t2] = (U2 * phi) (2^J u),  U2 = |U1 * psi_{j2,t2}| (2^j2 u),  j2 > j1
 * then the border (one coarse pixel on each side) is cut. Every convolution is a product of
 * spectra (FFTW, double precision); subsampling by k is periodization of the spectrum (the
 * mean of its k x k aliases), so each transform after the first runs on the smaller grid.
 * The filters are built in space on the padded grid (Gaussian envelopes periodized over
 * +-2 grid lengths, as Kymatio does), transformed once, and kept real (their spectra are real
 * up to rounding: psi(-u) = conj psi(u)); at level r a filter's spectrum is cut to the
 * frequencies [-n/2, n/2) of that grid.
 *
 * Output layout per example: channel c's P paths at [c P, (c + 1) P), paths in Kymatio's
 * order: S0, then S1 by (j1, t1), then S2 by (j1, t1, j2, t2), each path Ho x Wo row-major.
 * tests/test_nn_scatter.c keeps a direct spatial-convolution reference of the same maths. */
#include "nn_internal.h"

#include <fftw3.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/fftw_lock.h"

#define SCAT_MAX_J 6
#define SCAT_MAX_L 16

/* ==== Sizes ==== */

size_t dpt_scatter_paths(size_t J, size_t L) { return 1 + J * L + L * L * J * (J - 1) / 2; }

/* Kymatio's padded size: the next multiple of 2^J above n + 2^J (so at least 2^J extra). */
size_t dpt_scatter_padded(size_t n, size_t J) {
    const size_t k = (size_t)1 << J;
    return ((n + k) / k + 1) * k;
}

/* ==== Filters ==== */

/* Angle of orientation t of L (Kymatio's order: from just below pi/2 downwards). */
double dpt_scatter_angle(size_t t, size_t L) {
    const double c = trunc((double)L - (double)L / 2.0 - 1.0);
    return (c - (double)t) * M_PI / (double)L;
}

/* g [h w] complex = sum over the 5 x 5 periodic images of the Gabor function
 *   exp(-u^T A u + i xi (u_0 cos theta + u_1 sin theta)) / (2 pi sigma^2 / slant),
 * A = R diag(1, slant^2) R^T / (2 sigma^2), R the rotation by theta, u = (row, column)
 * offset from the origin (grid point (0, 0)). */
static void gabor(size_t h, size_t w, double sigma, double theta, double xi, double slant, fftw_complex *g) {
    const double c = cos(theta), s = sin(theta), s2 = slant * slant, d = 2.0 * sigma * sigma;
    const double a00 = (c * c + s2 * s * s) / d, a11 = (s * s + s2 * c * c) / d, a01 = 2.0 * c * s * (1.0 - s2) / d;
    const double norm = 2.0 * M_PI * sigma * sigma / slant;
    for (size_t m = 0; m < h; m++)
        for (size_t n = 0; n < w; n++) {
            double re = 0.0, im = 0.0;
            for (int ex = -2; ex <= 2; ex++)
                for (int ey = -2; ey <= 2; ey++) {
                    const double x = (double)m + ex * (double)h, y = (double)n + ey * (double)w;
                    const double e = exp(-(a00 * x * x + a01 * x * y + a11 * y * y));
                    const double ph = xi * (x * c + y * s);
                    re += e * cos(ph);
                    im += e * sin(ph);
                }
            g[m * w + n][0] = re / norm;
            g[m * w + n][1] = im / norm;
        }
}

/* out [(h >> r) (w >> r)] = the spectrum f [h w] cut to the frequencies [-n/2, n/2) of level r
 * in each dimension (Kymatio's periodize_filter_fft: a crop, as every alias but one is 0). */
static void crop(const double *f, size_t h, size_t w, size_t r, double *out) {
    const size_t hc = h >> r, wc = w >> r;
    for (size_t a = 0; a < hc; a++) {
        const size_t fa = a < hc / 2 ? a : h - (hc - a);
        for (size_t b = 0; b < wc; b++) {
            const size_t fb = b < wc / 2 ? b : w - (wc - b);
            out[a * wc + b] = f[fa * w + fb];
        }
    }
}

/* ==== State ==== */

typedef struct {
    /* [n_0] each: a the FFTs' real input(s), x the input's spectrum, z a pair's spectrum, ua and
     * ub the two first-order spectra split from it, t and p scratch */
    fftw_complex *a, *x, *z, *ua, *ub, *t, *p;
} scat_ws;

typedef struct {
    size_t J, L, C, H, W, Hp, Wp, pt, pl, Ho, Wo, P;
    size_t hr[SCAT_MAX_J + 1], wr[SCAT_MAX_J + 1], nr[SCAT_MAX_J + 1];
    size_t psi_levels;                    /* levels kept per wavelet: max(J - 1, 1) */
    double *psi;                          /* [J L][psi_levels][n_0]: psi_hat at level r, first n_r used */
    double *phi;                          /* [J][n_0]: phi_hat at level r */
    fftw_plan fwd[SCAT_MAX_J + 1], bwd[SCAT_MAX_J + 1];
    int nws;
    scat_ws *ws;                          /* [nws] one per thread */
} scat_state;

static const double *psi_at(const scat_state *s, size_t n, size_t r) {
    return s->psi + (n * s->psi_levels + r) * s->nr[0];
}

static void ws_free(scat_ws *w) {
    fftw_free(w->a);
    fftw_free(w->x);
    fftw_free(w->z);
    fftw_free(w->ua);
    fftw_free(w->ub);
    fftw_free(w->t);
    fftw_free(w->p);
}

static void scat_detach(dpt_layer *L) {
    scat_state *s = L->state;
    if (!s) return;
    pthread_mutex_lock(&dpt_fftw_lock);
    for (size_t r = 0; r <= s->J; r++) {
        if (s->fwd[r]) fftw_destroy_plan(s->fwd[r]);
        if (s->bwd[r]) fftw_destroy_plan(s->bwd[r]);
    }
    for (int i = 0; s->ws && i < s->nws; i++) ws_free(&s->ws[i]);
    pthread_mutex_unlock(&dpt_fftw_lock);
    dpt_free(s->ws);
    dpt_free(s->psi);
    dpt_free(s->phi);
    dpt_free(s);
    L->state = NULL;
}

/* The filter bank (spectra at every level needed) and one plan pair per level. */
static dpt_status scat_attach(dpt_layer *L) {
    DPT_ASSERT(!L->state);
    scat_state *s = dpt_alloc(1, sizeof *s, "scatter layer");
    if (!s) return DPT_ENOMEM;
    L->state = s;
    s->J = L->k;
    s->L = L->groups;
    s->C = L->in_shape[0];
    s->H = L->in_shape[1];
    s->W = L->in_shape[2];
    s->Hp = dpt_scatter_padded(s->H, s->J);
    s->Wp = dpt_scatter_padded(s->W, s->J);
    s->pt = (s->Hp - s->H) / 2;
    s->pl = (s->Wp - s->W) / 2;
    s->Ho = L->out_shape[1];
    s->Wo = L->out_shape[2];
    s->P = dpt_scatter_paths(s->J, s->L);
    for (size_t r = 0; r <= s->J; r++) {
        s->hr[r] = s->Hp >> r;
        s->wr[r] = s->Wp >> r;
        s->nr[r] = s->hr[r] * s->wr[r];
    }
    const size_t n0 = s->nr[0], J = s->J, NL = s->J * s->L;
    s->psi_levels = J > 1 ? J - 1 : 1;
    s->psi = dpt_alloc3(NL, s->psi_levels, n0, sizeof(double), "scatter wavelets");
    s->phi = dpt_alloc2(J, n0, sizeof(double), "scatter low-pass");
    s->nws = L->threads >= 1 ? L->threads : 1;
    s->ws = dpt_alloc(s->nws, sizeof *s->ws, "scatter workspaces");
    if (!s->psi || !s->phi || !s->ws) {
        scat_detach(L);
        return DPT_ENOMEM;
    }
    dpt_status st = DPT_OK;
    pthread_mutex_lock(&dpt_fftw_lock);
    for (int i = 0; i < s->nws && st == DPT_OK; i++) {
        scat_ws *w = &s->ws[i];
        fftw_complex **bufs[] = {&w->a, &w->x, &w->z, &w->ua, &w->ub, &w->t, &w->p};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
            if (!(*bufs[k] = fftw_malloc(n0 * sizeof(fftw_complex)))) st = DPT_ENOMEM;
    }
    /* FFTW_ESTIMATE: the plan depends on the sizes only, so results are the same in every
     * run (FFTW_MEASURE picks by timing and may change the rounding from run to run) */
    for (size_t r = 0; r <= J && st == DPT_OK; r++) {
        s->fwd[r] = fftw_plan_dft_2d((int)s->hr[r], (int)s->wr[r], s->ws[0].a, s->ws[0].x, FFTW_FORWARD,
                                     FFTW_ESTIMATE);
        s->bwd[r] = fftw_plan_dft_2d((int)s->hr[r], (int)s->wr[r], s->ws[0].a, s->ws[0].x, FFTW_BACKWARD,
                                     FFTW_ESTIMATE);
        if (!s->fwd[r] || !s->bwd[r]) st = DPT_ENOMEM;
    }
    pthread_mutex_unlock(&dpt_fftw_lock);
    if (st != DPT_OK) {
        scat_detach(L);
        return dpt_set_error(DPT_ENOMEM, "%s: out of memory for FFT buffers or plans", L->name);
    }
    /* spectra: FFT of the spatial filters (the imaginary part is rounding: dropped) */
    fftw_complex *g = s->ws[0].a, *g0 = s->ws[0].z, *G = s->ws[0].x;
    double *full = (double *)s->ws[0].t; /* n0 doubles fit in n0 complex */
    const size_t h = s->Hp, w = s->Wp;
    for (size_t j = 0; j < J; j++)
        for (size_t t = 0; t < s->L; t++) {
            /* Morlet: psi = g_xi - K g_0 with K = sum g_xi / sum g_0, so sum psi = 0 */
            const double sigma = 0.8 * ldexp(1.0, (int)j), xi = 0.75 * M_PI / ldexp(1.0, (int)j);
            const double theta = dpt_scatter_angle(t, s->L), slant = 4.0 / (double)s->L;
            gabor(h, w, sigma, theta, xi, slant, g);
            gabor(h, w, sigma, theta, 0.0, slant, g0);
            double sr = 0.0, si = 0.0, s0 = 0.0;
            for (size_t i = 0; i < n0; i++) sr += g[i][0], si += g[i][1], s0 += g0[i][0];
            const double kr = sr / s0, ki = si / s0;
            for (size_t i = 0; i < n0; i++) g[i][0] -= kr * g0[i][0], g[i][1] -= ki * g0[i][0];
            fftw_execute_dft(s->fwd[0], g, G);
            for (size_t i = 0; i < n0; i++) full[i] = G[i][0];
            for (size_t r = 0; r < s->psi_levels; r++) crop(full, h, w, r, (double *)psi_at(s, j * s->L + t, r));
        }
    gabor(h, w, 0.8 * ldexp(1.0, (int)J - 1), 0.0, 0.0, 1.0, g);
    fftw_execute_dft(s->fwd[0], g, G);
    for (size_t i = 0; i < n0; i++) full[i] = G[i][0];
    for (size_t r = 0; r < J; r++) crop(full, h, w, r, s->phi + r * n0);
    return DPT_OK;
}

/* ==== Transform ==== */

/* index of pixel i of a length-n signal under reflection without repeating the edge
 * (numpy's "reflect"; i may lie several lengths outside) */
static size_t reflect(long i, size_t n) {
    if (n == 1) return 0;
    const long per = 2 * (long)(n - 1);
    long m = i % per;
    if (m < 0) m += per;
    return (size_t)(m < (long)n ? m : per - m);
}

/* out [(h / k) (w / k)] = the sum of the k x k aliases of X .* f (X [h w] complex, f [h w]
 * real): the spectrum of the filtered signal subsampled by k, times k^2. Source rows in order,
 * each added to its alias row, so the inner loop runs over contiguous memory. */
static void mul_periodize(const fftw_complex *X, const double *f, size_t h, size_t w, size_t k,
                          fftw_complex *out) {
    const size_t hc = h / k, wc = w / k;
    memset(out, 0, hc * wc * sizeof *out);
    for (size_t R = 0, a = 0; R < h; R++, a = a + 1 == hc ? 0 : a + 1) {
        double *restrict o = (double *)out[a * wc];
        const double *restrict x = (const double *)X[R * w], *restrict g = f + R * w;
        for (size_t jb = 0; jb < k; jb++, x += 2 * wc, g += wc)
            for (size_t b = 0; b < wc; b++) {
                o[2 * b] += x[2 * b] * g[b];
                o[2 * b + 1] += x[2 * b + 1] * g[b];
            }
    }
}

/* Low-pass and output of two real signals at once: Y at level r is the spectrum of a + i b
 * (a, b real); times phi_r (real and even, so the product is still the spectrum of
 * (a * phi) + i (b * phi)), subsampled to level J, inverse FFT; the real part / n_r (FFTW's
 * transforms are unnormalized), border cut, is a's output (out_a [Ho Wo]), the imaginary part
 * b's (out_b; NULL when Y holds one signal). */
static void lowpass_pair(const scat_state *s, scat_ws *w, const fftw_complex *Y, size_t r, float *out_a,
                         float *out_b) {
    const size_t J = s->J;
    mul_periodize(Y, s->phi + r * s->nr[0], s->hr[r], s->wr[r], (size_t)1 << (J - r), w->p);
    fftw_execute_dft(s->bwd[J], w->p, w->t);
    const double inv = 1.0 / (double)s->nr[r];
    for (size_t u = 0; u < s->Ho; u++)
        for (size_t v = 0; v < s->Wo; v++) {
            const double *z = w->t[(u + 1) * s->wr[J] + v + 1];
            out_a[u * s->Wo + v] = (float)(z[0] * inv);
            if (out_b) out_b[u * s->Wo + v] = (float)(z[1] * inv);
        }
}

/* |band-pass output| into component `part` (0 real, 1 imaginary) of w->a: spectrum Y at level
 * r times psi (at level r), subsampled to level q >= r, inverse FFT, modulus / n_r. */
static void bandpass_mod(const scat_state *s, scat_ws *w, const fftw_complex *Y, const double *psi, size_t r,
                         size_t q, int part) {
    mul_periodize(Y, psi, s->hr[r], s->wr[r], (size_t)1 << (q - r), w->p);
    fftw_execute_dft(s->bwd[q], w->p, w->t);
    const double inv = 1.0 / (double)s->nr[r];
    for (size_t i = 0; i < s->nr[q]; i++) /* not hypot: 10x slower */
        w->a[i][part] = sqrt(w->t[i][0] * w->t[i][0] + w->t[i][1] * w->t[i][1]) * inv;
}

/* The spectra of a and b from Z = spectrum of a + i b on an h x w grid (a, b real):
 * A(k) = (Z(k) + conj Z(-k)) / 2, B(k) = (Z(k) - conj Z(-k)) / (2 i). */
static void split_pair(const fftw_complex *Z, size_t h, size_t w, fftw_complex *A, fftw_complex *B) {
    for (size_t a = 0; a < h; a++)
        for (size_t b = 0; b < w; b++) {
            const double *z = Z[a * w + b], *m = Z[((h - a) % h) * w + (w - b) % w];
            A[a * w + b][0] = 0.5 * (z[0] + m[0]);
            A[a * w + b][1] = 0.5 * (z[1] - m[1]);
            B[a * w + b][0] = 0.5 * (z[1] + m[1]);
            B[a * w + b][1] = 0.5 * (m[0] - z[0]);
        }
}

/* One channel x [H W] -> out [P Ho Wo]. Real signals go through the FFTs two at a time (as
 * the real and imaginary parts of one complex signal): the moduli of two first-order paths of
 * the same scale, then of two second-order paths of the same (j1, t1) and scale j2. */
static void scat_channel(const scat_state *s, scat_ws *w, const float *x, float *out) {
    const size_t J = s->J, Ln = s->L, HoWo = s->Ho * s->Wo;
    for (size_t m = 0; m < s->Hp; m++) {
        const size_t sm = reflect((long)m - (long)s->pt, s->H);
        for (size_t n = 0; n < s->Wp; n++) {
            w->a[m * s->Wp + n][0] = x[sm * s->W + reflect((long)n - (long)s->pl, s->W)];
            w->a[m * s->Wp + n][1] = 0.0;
        }
    }
    fftw_execute_dft(s->fwd[0], w->a, w->x);
    lowpass_pair(s, w, w->x, 0, out, NULL);
    size_t p2 = 1 + J * Ln; /* next second-order path */
    for (size_t n1 = 0, two; n1 < J * Ln; n1 += 1 + two) {
        const size_t j1 = n1 / Ln;
        two = n1 + 1 < (j1 + 1) * Ln; /* n1 + 1 has the same scale: a pair */
        memset(w->a, 0, s->nr[j1] * sizeof *w->a);
        for (size_t e = 0; e <= two; e++) bandpass_mod(s, w, w->x, psi_at(s, n1 + e, 0), 0, j1, (int)e);
        fftw_execute_dft(s->fwd[j1], w->a, w->z);
        lowpass_pair(s, w, w->z, j1, out + (1 + n1) * HoWo, two ? out + (2 + n1) * HoWo : NULL);
        if (j1 + 1 == J) continue; /* no second order from the last scale */
        split_pair(w->z, s->hr[j1], s->wr[j1], w->ua, w->ub);
        for (size_t e = 0; e <= two; e++) {
            const fftw_complex *U1 = e ? w->ub : w->ua;
            for (size_t n2 = (j1 + 1) * Ln, two2; n2 < J * Ln; n2 += 1 + two2) {
                const size_t j2 = n2 / Ln;
                two2 = n2 + 1 < (j2 + 1) * Ln;
                memset(w->a, 0, s->nr[j2] * sizeof *w->a);
                for (size_t f = 0; f <= two2; f++) bandpass_mod(s, w, U1, psi_at(s, n2 + f, j1), j1, j2, (int)f);
                fftw_execute_dft(s->fwd[j2], w->a, w->z);
                lowpass_pair(s, w, w->z, j2, out + p2 * HoWo, two2 ? out + (p2 + 1) * HoWo : NULL);
                p2 += 1 + two2;
            }
        }
    }
    DPT_ASSERT(p2 == s->P);
}

static dpt_status scat_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const scat_state *s = L->state;
    DPT_CHECK(s, DPT_EINVAL, "%s: the scattering layer has no filter bank (it was not built by dpt_model_new)",
              L->name);
    const size_t HW = s->H * s->W, PO = s->P * s->Ho * s->Wo, C = s->C;
    const long long n = (long long)(B * C);
    /* one (example, channel) per iteration, each on its own thread's buffers: the output does
     * not depend on the thread count */
#pragma omp parallel for num_threads(s->nws) schedule(dynamic, 4) if (n > 1 && s->nws > 1)
    for (long long ic = 0; ic < n; ic++) {
        int tid = omp_get_thread_num();
        if (tid >= s->nws) tid = 0; /* not reached: the team has at most nws threads */
        scat_channel(s, &s->ws[tid], x + (size_t)ic * HW, v + (size_t)ic * PO);
    }
    return DPT_OK;
}

static dpt_status scat_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv,
                                      float *dx, size_t B) {
    return dpt_set_error(DPT_ENOTSUP, "%s: the scattering layer has no gradient with respect to its input (it is "
                         "fixed and must be the model's first layer)", L->name);
}

static dpt_status scat_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx,
                           const float *dtheta, float *dv, size_t B) {
    DPT_CHECK(!dx, DPT_ENOTSUP, "%s: the scattering layer has no derivative with respect to its input (only "
              "parameter tangents, for which its output is constant)", L->name);
    memset(dv, 0, B * L->out_dim * sizeof *dv);
    return DPT_OK;
}

static size_t scat_n_tensors(const dpt_layer *L) { return 0; }

static const dpt_layer_ops scat_ops = {
    scat_forward, scat_backward_input, NULL, scat_jvp, scat_n_tensors, NULL, NULL, scat_attach, scat_detach,
};

dpt_status dpt_layer_scatter_setup(dpt_layer *L, const size_t in_shape[3], size_t J, size_t n_angles) {
    DPT_CHECK(J >= 1 && J <= SCAT_MAX_J, DPT_EINVAL, "scatter: J (scales) must be in 1..%d, got %zu", SCAT_MAX_J, J);
    DPT_CHECK(n_angles >= 1 && n_angles <= SCAT_MAX_L, DPT_EINVAL, "scatter: L (angles) must be in 1..%d, got %zu",
              SCAT_MAX_L, n_angles);
    const size_t k = (size_t)1 << J, H = in_shape[1], W = in_shape[2];
    DPT_CHECK(H >= k && W >= k, DPT_EINVAL, "scatter: the %zux%zu input is smaller than 2^J = %zu", H, W, k);
    L->kind = DPT_LAYER_SCATTER;
    L->ops = &scat_ops;
    L->k = J;        /* scales */
    L->groups = n_angles;
    L->stride = k;   /* the output's subsampling */
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    L->out_shape[0] = in_shape[0] * dpt_scatter_paths(J, n_angles);
    L->out_shape[1] = dpt_scatter_padded(H, J) / k - 2;
    L->out_shape[2] = dpt_scatter_padded(W, J) / k - 2;
    L->in_dim = in_shape[0] * H * W;
    L->out_dim = L->out_shape[0] * L->out_shape[1] * L->out_shape[2];
    L->n_params = 0;
    return DPT_OK;
}

/* ==== Filter access (tests) ==== */

dpt_status dpt_scatter_filter(const dpt_layer *L, long n, size_t r, const double **hat, size_t *h, size_t *w) {
    const scat_state *s = L->state;
    DPT_CHECK(s, DPT_EINVAL, "%s: no filter bank", L->kind == DPT_LAYER_SCATTER ? L->name : "not a scattering layer");
    DPT_CHECK(n < (long)(s->J * s->L), DPT_EINVAL, "scatter filter %ld: only %zu wavelets", n, s->J * s->L);
    DPT_CHECK(n < 0 ? r < s->J : r < s->psi_levels, DPT_EINVAL, "scatter filter %ld: no level %zu", n, r);
    *hat = n < 0 ? s->phi + r * s->nr[0] : psi_at(s, (size_t)n, r);
    *h = s->hr[r];
    *w = s->wr[r];
    return DPT_OK;
}
