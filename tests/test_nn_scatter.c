/* nn/scatter: the scattering layer (src/nn/layer_scatter.c) against an independent reference
 * written here: Morlet and Gaussian filters built from their formula in rotated coordinates,
 * their spectra by a naive DFT (cut to each grid's band as the layer does), back to space by a
 * naive inverse DFT, and the transform as direct circular convolutions in space followed by
 * subsampling, all in double with plain loops (no FFT). Then published properties: output
 * shapes (81 x 7 x 7 per channel on 28 x 28, 81 x 8 x 8 on 32 x 32), the filter bank's
 * Littlewood-Paley sum, zero-mean wavelets and a unit-gain low-pass, covariance under
 * translations by 2^J and near-invariance under small ones, channels transformed
 * independently (3 x 32 x 32 -> 243 channels), the same output for any thread count, and the
 * refusals (not the first layer, an input smaller than 2^J, a gradient through it). */
#include <dptrain/nn.h>

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"
#include "testutil.h"

/* Littlewood-Paley bounds checked on |omega| <= 3 pi / 4 (where the finest wavelets are
 * centred, xi_0 = 3 pi / 4): A(omega) = |phi^(omega)|^2 + sum_lambda (|psi^_lambda(omega)|^2 +
 * |psi^_lambda(-omega)|^2) / 2 within [1 - eps, 1] makes the wavelet transform non-expansive
 * and nearly energy preserving (Mallat, "Group invariant scattering", 2012, Sec. 2.2).
 * Morlet wavelets are not a tight frame and J = 2 has two scales only, so A dips between
 * the low-pass and the wavelets' bands: measured [0.594, 1.000] on 36 x 36 (28 x 28 padded).
 * The check allows 5% above 1 and asks at least one half: a wrong normalization (a factor
 * 2 or 1/2 in the envelope's constant), a missing orientation or a scale shifted by an
 * octave leaves this range. */
#define LP_LO 0.5
#define LP_HI 1.05

/* ==== Reference ==== */

typedef double complex cplx;

/* Periodized Gabor exp(-(p^2 + slant^2 q^2) / (2 sigma^2) + i xi p) / (2 pi sigma^2 / slant),
 * (p, q) = the offset (x, y) rotated by -theta, over x = m + e h, y = n + f w, |e|, |f| <= 2. */
static void ref_gabor(size_t h, size_t w, double sigma, double theta, double xi, double slant, cplx *g) {
    for (size_t m = 0; m < h; m++)
        for (size_t n = 0; n < w; n++) {
            cplx acc = 0;
            for (int e = -2; e <= 2; e++)
                for (int f = -2; f <= 2; f++) {
                    const double x = (double)m + e * (double)h, y = (double)n + f * (double)w;
                    const double p = x * cos(theta) + y * sin(theta), q = -x * sin(theta) + y * cos(theta);
                    acc += cexp(-(p * p + slant * slant * q * q) / (2 * sigma * sigma) + I * xi * p);
                }
            g[m * w + n] = acc / (2 * M_PI * sigma * sigma / slant);
        }
}

/* F [h w] = naive DFT of g (sign -1, unnormalized) */
static void dft(const cplx *g, size_t h, size_t w, int sign, cplx *F) {
    for (size_t a = 0; a < h; a++)
        for (size_t b = 0; b < w; b++) {
            cplx acc = 0;
            for (size_t m = 0; m < h; m++)
                for (size_t n = 0; n < w; n++)
                    acc += g[m * w + n] * cexp(sign * 2 * M_PI * I * ((double)(a * m) / h + (double)(b * n) / w));
            F[a * w + b] = acc;
        }
}

/* Spatial filter on level r: the real part of the spectrum of g [h w], cut to frequencies
 * [-hc/2, hc/2) x [-wc/2, wc/2), inverse DFT on the hc x wc grid (normalized). */
static void ref_level(const cplx *g, size_t h, size_t w, size_t r, cplx *out) {
    const size_t hc = h >> r, wc = w >> r;
    cplx *F = calloc(h * w, sizeof *F), *Fc = calloc(hc * wc, sizeof *Fc);
    dft(g, h, w, -1, F);
    for (size_t a = 0; a < hc; a++)
        for (size_t b = 0; b < wc; b++) {
            const long fa = a < hc / 2 ? (long)a : (long)a - (long)hc, fb = b < wc / 2 ? (long)b : (long)b - (long)wc;
            Fc[a * wc + b] = creal(F[((fa + (long)h) % (long)h) * w + (size_t)((fb + (long)w) % (long)w)]);
        }
    dft(Fc, hc, wc, +1, out);
    for (size_t i = 0; i < hc * wc; i++) out[i] /= (double)(hc * wc);
    free(F);
    free(Fc);
}

/* y [hc/k wc/k] = (x circularly convolved with f on the hc x wc grid) at multiples of k */
static void conv_sub(const cplx *x, const cplx *f, size_t hc, size_t wc, size_t k, cplx *y) {
    for (size_t u = 0; u < hc / k; u++)
        for (size_t v = 0; v < wc / k; v++) {
            cplx acc = 0;
            for (size_t m = 0; m < hc; m++)
                for (size_t n = 0; n < wc; n++)
                    acc += x[m * wc + n] * f[((u * k + hc - m) % hc) * wc + (v * k + wc - n) % wc];
            y[u * (wc / k) + v] = acc;
        }
}

static size_t refl(long i, size_t n) {
    while (i < 0 || i >= (long)n) i = i < 0 ? -i : 2 * (long)(n - 1) - i;
    return (size_t)i;
}

/* The transform of one H x W channel into out [P Ho Wo] (Ho = Hp / 2^J - 2). */
static void ref_scatter(const float *x, size_t H, size_t W, size_t J, size_t L, double *out) {
    const size_t k = (size_t)1 << J, Hp = ((H + k) / k + 1) * k, Wp = ((W + k) / k + 1) * k, n0 = Hp * Wp;
    const size_t Ho = Hp / k - 2, Wo = Wp / k - 2;
    cplx *g = malloc(n0 * sizeof *g), *g0 = malloc(n0 * sizeof *g0);
    cplx **psi = malloc(J * L * J * sizeof *psi), **phi = malloc(J * sizeof *phi);
    for (size_t j = 0; j < J; j++)
        for (size_t t = 0; t < L; t++) {
            const double sigma = 0.8 * pow(2, (double)j), xi = 0.75 * M_PI / pow(2, (double)j);
            const double theta = ((double)(long)((double)L - L / 2.0 - 1) - (double)t) * M_PI / (double)L;
            ref_gabor(Hp, Wp, sigma, theta, xi, 4.0 / (double)L, g);
            ref_gabor(Hp, Wp, sigma, theta, 0.0, 4.0 / (double)L, g0);
            cplx sg = 0, s0 = 0;
            for (size_t i = 0; i < n0; i++) sg += g[i], s0 += g0[i];
            for (size_t i = 0; i < n0; i++) g[i] -= sg / s0 * g0[i];
            for (size_t r = 0; r < J; r++) {
                psi[(j * L + t) * J + r] = malloc(((Hp >> r) * (Wp >> r)) * sizeof(cplx));
                ref_level(g, Hp, Wp, r, psi[(j * L + t) * J + r]);
            }
        }
    ref_gabor(Hp, Wp, 0.8 * pow(2, (double)J - 1), 0, 0, 1, g);
    for (size_t r = 0; r < J; r++) {
        phi[r] = malloc(((Hp >> r) * (Wp >> r)) * sizeof(cplx));
        ref_level(g, Hp, Wp, r, phi[r]);
    }
    cplx *xp = malloc(n0 * sizeof *xp), *u1 = malloc(n0 * sizeof *u1), *u2 = malloc(n0 * sizeof *u2);
    cplx *s = malloc(n0 * sizeof *s);
    for (size_t m = 0; m < Hp; m++)
        for (size_t n = 0; n < Wp; n++)
            xp[m * Wp + n] = x[refl((long)m - (long)(Hp - H) / 2, H) * W + refl((long)n - (long)(Wp - W) / 2, W)];
    size_t p = 0;
#define EMIT(src, r)                                                                                   \
    do {                                                                                               \
        conv_sub(src, phi[r], Hp >> (r), Wp >> (r), (size_t)1 << (J - (r)), s);                        \
        for (size_t a = 0; a < Ho; a++)                                                                \
            for (size_t b = 0; b < Wo; b++) out[(p * Ho + a) * Wo + b] = creal(s[(a + 1) * (Wo + 2) + b + 1]); \
        p++;                                                                                           \
    } while (0)
    EMIT(xp, 0);
    for (size_t n1 = 0; n1 < J * L; n1++) { /* S1 */
        const size_t j1 = n1 / L;
        conv_sub(xp, psi[n1 * J], Hp, Wp, (size_t)1 << j1, u1);
        for (size_t i = 0; i < (Hp >> j1) * (Wp >> j1); i++) u1[i] = cabs(u1[i]);
        EMIT(u1, j1);
    }
    for (size_t n1 = 0; n1 < J * L; n1++) { /* S2 */
        const size_t j1 = n1 / L;
        conv_sub(xp, psi[n1 * J], Hp, Wp, (size_t)1 << j1, u1);
        for (size_t i = 0; i < (Hp >> j1) * (Wp >> j1); i++) u1[i] = cabs(u1[i]);
        for (size_t n2 = (j1 + 1) * L; n2 < J * L; n2++) {
            const size_t j2 = n2 / L;
            conv_sub(u1, psi[n2 * J + j1], Hp >> j1, Wp >> j1, (size_t)1 << (j2 - j1), u2);
            for (size_t i = 0; i < (Hp >> j2) * (Wp >> j2); i++) u2[i] = cabs(u2[i]);
            EMIT(u2, j2);
        }
    }
#undef EMIT
    for (size_t i = 0; i < J * L * J; i++) free(psi[i]);
    for (size_t r = 0; r < J; r++) free(phi[r]);
    free(psi), free(phi), free(g), free(g0), free(xp), free(u1), free(u2), free(s);
}

/* ==== Helpers ==== */

static dpt_model *scat_model(size_t C, size_t H, size_t W, const char *item, size_t B, int threads) {
    char spec[128];
    snprintf(spec, sizeof spec, "cnn:%zux%zux%zu:%s", C, H, W, item);
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, B, threads, &m));
    return m;
}

static float urand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xFFFF) / 65535.0f;
}

/* the layer against the reference on a random H x W image, J scales, L angles */
static void check_reference(size_t H, size_t W, size_t J, size_t L, unsigned seed) {
    char item[32];
    snprintf(item, sizeof item, "scatterj%zul%zu", J, L);
    dpt_model *m = scat_model(1, H, W, item, 2, 1);
    if (!m) return;
    const dpt_layer *Ly = &m->layers[0];
    const size_t P = dpt_scatter_paths(J, L), Ho = Ly->out_shape[1], Wo = Ly->out_shape[2];
    CHECK(Ly->out_shape[0] == P);
    float *x = malloc(2 * H * W * sizeof *x);
    for (size_t i = 0; i < 2 * H * W; i++) x[i] = urand(&seed);
    double *ref = malloc(P * Ho * Wo * sizeof *ref);
    CHECK_OK(dpt_model_forward(m, x, 2));
    for (size_t e = 0; e < 2; e++) {
        ref_scatter(x + e * H * W, H, W, J, L, ref);
        double top = 0, worst = 0;
        for (size_t i = 0; i < P * Ho * Wo; i++) top = fmax(top, fabs(ref[i]));
        const float *o = dpt_model_output(m) + e * P * Ho * Wo;
        for (size_t i = 0; i < P * Ho * Wo; i++) {
            /* float output of double arithmetic: a few float roundings of the largest value */
            const double d = fabs(o[i] - ref[i]);
            worst = fmax(worst, d);
            if (!(d <= 1e-6 * top + 1e-5 * fabs(ref[i]))) {
                fprintf(stderr, "scatter %zux%zu J%zu L%zu example %zu: path %zu (%zu, %zu) = %.9g, reference %.9g\n",
                        H, W, J, L, e, i / (Ho * Wo), i / Wo % Ho, i % Wo, o[i], ref[i]);
                CHECK(0);
                break;
            }
        }
        CHECK(top > 1e-3); /* a transform of zeros would pass trivially */
        printf("reference %zux%zu J=%zu L=%zu: %zu x %zu x %zu outputs, largest %.4g, worst difference %.3g\n", H, W,
               J, L, P, Ho, Wo, top, worst);
    }
    free(x), free(ref);
    dpt_model_free(m);
}

int main(void) {
    /* ==== the reference: several shapes, scales and angle counts ==== */
    check_reference(8, 8, 2, 8, 1);   /* the default J, L on a small image */
    check_reference(8, 12, 2, 4, 2);  /* non-square: rows and columns not swapped */
    check_reference(9, 7, 1, 3, 3);   /* odd sides (uneven padding), odd L, J = 1 */
    check_reference(8, 8, 3, 2, 4);   /* J = 3: second order from level 1, filters cut to level 2 */

    /* ==== shapes ==== */
    {
        dpt_model *m = scat_model(1, 28, 28, "scatter", 1, 1);
        if (m) {
            CHECK(m->layers[0].out_shape[0] == 81 && m->layers[0].out_shape[1] == 7 && m->layers[0].out_shape[2] == 7);
            CHECK(!strcmp(m->layers[0].name, "scatter1"));
        }
        dpt_model_free(m);
        m = scat_model(3, 32, 32, "scatter,fc10", 1, 1);
        if (m) {
            CHECK(m->layers[0].out_shape[0] == 243 && m->layers[0].out_shape[1] == 8 && m->layers[0].out_shape[2] == 8);
            CHECK(m->layers[1].in_dim == 243 * 64);
        }
        dpt_model_free(m);
        m = scat_model(1, 32, 32, "scatterj3", 1, 1); /* Kymatio: J = 3 on 32 x 32 gives 4 x 4 */
        if (m) CHECK(m->layers[0].out_shape[0] == 217 && m->layers[0].out_shape[1] == 4 && m->layers[0].out_shape[2] == 4);
        dpt_model_free(m);
    }

    /* ==== filter bank: Littlewood-Paley sum, zero-mean wavelets, unit-gain low-pass ==== */
    {
        dpt_model *m = scat_model(1, 28, 28, "scatter", 1, 1);
        if (m) {
            const dpt_layer *Ly = &m->layers[0];
            const double *phi, *psi;
            size_t h, w, h2, w2;
            CHECK_OK(dpt_scatter_filter(Ly, -1, 0, &phi, &h, &w));
            CHECK(h == 36 && w == 36);
            CHECK_CLOSE(phi[0], 1.0, 1e-9, 0); /* sum of phi = 1: a local average */
            double *A = calloc(h * w, sizeof *A);
            for (size_t i = 0; i < h * w; i++) A[i] = phi[i] * phi[i];
            for (long n = 0; n < 16; n++) {
                CHECK_OK(dpt_scatter_filter(Ly, n, 0, &psi, &h2, &w2));
                CHECK(fabs(psi[0]) < 1e-9); /* Morlet: zero mean */
                /* real signals: psi at -omega acts as psi at omega, so the sum is symmetrized */
                for (size_t a = 0; a < h; a++)
                    for (size_t b = 0; b < w; b++) {
                        const size_t ma = (h - a) % h, mb = (w - b) % w;
                        A[a * w + b] += 0.5 * (psi[a * w + b] * psi[a * w + b] + psi[ma * w + mb] * psi[ma * w + mb]);
                    }
            }
            /* on the frequencies the wavelets are designed for, |omega| <= xi_0 = 3 pi / 4 */
            double lo = 1e9, hi = 0;
            for (size_t a = 0; a < h; a++)
                for (size_t b = 0; b < w; b++) {
                    const double fa = 2 * M_PI * (a < h / 2 ? (double)a : (double)a - (double)h) / (double)h;
                    const double fb = 2 * M_PI * (b < w / 2 ? (double)b : (double)b - (double)w) / (double)w;
                    if (sqrt(fa * fa + fb * fb) > 0.75 * M_PI) continue;
                    lo = fmin(lo, A[a * w + b]);
                    hi = fmax(hi, A[a * w + b]);
                }
            printf("Littlewood-Paley sum on |omega| <= 3 pi / 4: [%.4f, %.4f]\n", lo, hi);
            CHECK(lo >= LP_LO && hi <= LP_HI);
            free(A);
        }
        dpt_model_free(m);
    }

    /* ==== translations: covariant under shifts by 2^J, nearly invariant under small ones ==== */
    {
        const size_t N = 32;
        dpt_model *m = scat_model(1, N, N, "scatter", 3, 1);
        float *x = calloc(3 * N * N, sizeof *x);
        for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < N; j++) { /* a textured bump centred at (14, 14), zero at the border */
                const double di = (double)i - 14, dj = (double)j - 14, r2 = di * di + dj * dj;
                const float v = (float)(exp(-r2 / 18.0) * (1 + 0.5 * cos(1.3 * di) * sin(0.9 * dj)));
                x[i * N + j] = v;
                if (i + 4 < N) x[N * N + (i + 4) * N + j] = v; /* shifted down by 2^J = 4 */
                if (j + 1 < N) x[2 * N * N + i * N + j + 1] = v; /* shifted right by 1 */
            }
        if (m) {
            CHECK_OK(dpt_model_forward(m, x, 3));
            const size_t P = 81, Ho = 8, K = P * Ho * Ho;
            const float *s0 = dpt_model_output(m), *s4 = s0 + K, *s1 = s0 + 2 * K;
            double cov = 0, nrm = 0, d1 = 0, dx = 0, nx = 0;
            for (size_t p = 0; p < P; p++)
                for (size_t u = 0; u + 1 < Ho; u++)
                    for (size_t v = 0; v < Ho; v++) {
                        const double a = s0[(p * Ho + u) * Ho + v], b = s4[(p * Ho + u + 1) * Ho + v];
                        cov = fmax(cov, fabs(a - b));
                        nrm = fmax(nrm, fabs(a));
                    }
            for (size_t i = 0; i < K; i++) d1 += (s1[i] - s0[i]) * (s1[i] - s0[i]);
            double n0 = 0;
            for (size_t i = 0; i < K; i++) n0 += s0[i] * s0[i];
            for (size_t i = 0; i < N * N; i++) dx += (x[2 * N * N + i] - x[i]) * (x[2 * N * N + i] - x[i]), nx += x[i] * x[i];
            printf("shift by 4: output shifted by one coarse pixel up to %.3g (largest %.3g); shift by 1: input moves "
                   "by %.3f of its norm, the output by %.3f\n", cov, nrm, sqrt(dx / nx), sqrt(d1 / n0));
            /* exact but for the bump's tail at the border (2e-5 of its peak), which the padding
             * reflects, and the filters' tails wrapping around the 40 x 40 grid: measured 2e-4 */
            CHECK(cov <= 1e-3 * nrm);
            /* a one-pixel shift moves the features by clearly less than the pixels (measured
             * 0.20 against 0.31: J = 2 averages over 4 pixels only, and the bump is textured) */
            CHECK(sqrt(dx / nx) > 0.3);
            CHECK(sqrt(d1 / n0) < 0.75 * sqrt(dx / nx));
        }
        free(x);
        dpt_model_free(m);
    }

    /* ==== channels: 3 x 32 x 32 -> 243 channels, channel c's 81 paths its own transform;
     * any thread count gives the same bits ==== */
    {
        const size_t N = 32, B = 3;
        dpt_model *m3 = scat_model(3, N, N, "scatter", B, 2), *m1 = scat_model(1, N, N, "scatter", 3 * B, 1);
        unsigned seed = 9;
        float *x = malloc(B * 3 * N * N * sizeof *x);
        for (size_t i = 0; i < B * 3 * N * N; i++) x[i] = urand(&seed) - 0.5f;
        if (m3 && m1) {
            CHECK(m3->out_dim == 243 * 64);
            CHECK_OK(dpt_model_forward(m3, x, B));
            CHECK_OK(dpt_model_forward(m1, x, 3 * B)); /* each channel as an example */
            CHECK(!memcmp(dpt_model_output(m3), dpt_model_output(m1), B * 243 * 64 * sizeof(float)));
        }
        dpt_model_free(m3);
        dpt_model_free(m1);
        free(x);
    }

    /* ==== spec, refusals ==== */
    {
        dpt_model *m = NULL;
        CHECK_STATUS(dpt_model_new("cnn:1x28x28:conv4k3p1,scatter,fc10", 1, 1, &m), DPT_EINVAL);
        CHECK(strstr(dpt_last_error(), "first layer"));
        CHECK_STATUS(dpt_model_new("cnn:1x3x8:scatter,fc10", 1, 1, &m), DPT_EINVAL); /* 3 < 2^J */
        CHECK(strstr(dpt_last_error(), "smaller than 2^J"));
        CHECK_STATUS(dpt_model_new("cnn:1x28x28:scatterj0,fc10", 1, 1, &m), DPT_EINVAL);
        CHECK_STATUS(dpt_model_new("cnn:1x28x28:scatterl99,fc10", 1, 1, &m), DPT_EINVAL);
        CHECK_STATUS(dpt_model_new("cnn:1x28x28:scatterx,fc10", 1, 1, &m), DPT_EINVAL);
        dpt_spec sp;
        CHECK_OK(dpt_spec_parse("cnn:1x32x32:scatter,scatterj3l6,scatterl4", &sp));
        char buf[64];
        const char *want[] = {"scatter", "scatterj3l6", "scatterl4"};
        for (size_t i = 0; i < 3; i++) {
            dpt_spec_item_format(&sp.items[i], buf, sizeof buf);
            CHECK(!strcmp(buf, want[i]));
        }
        CHECK_OK(dpt_model_new("cnn:1x16x16:scatter,fc3", 2, 1, &m));
        if (m) {
            const dpt_layer *Ly = &m->layers[0];
            float *dv = calloc(2 * Ly->out_dim, sizeof *dv), *dx = malloc(2 * 256 * sizeof *dx);
            float *x = calloc(2 * 256, sizeof *x);
            CHECK_STATUS(Ly->ops->backward_input(Ly, x, NULL, dv, dx, 2), DPT_ENOTSUP);
            CHECK_STATUS(Ly->ops->jvp(Ly, x, NULL, x, NULL, dv, 2), DPT_ENOTSUP);
            CHECK_OK(Ly->ops->jvp(Ly, x, NULL, NULL, NULL, dv, 2)); /* parameter tangents: 0 */
            CHECK(Ly->out_dim == 81 * 4 * 4 && Ly->n_params == 0 && m->n_params == 81 * 16 * 3 + 3);
            free(dx), free(dv), free(x);
        }
        dpt_model_free(m);
    }
    TEST_MAIN_END();
}
