/* Both builds of the nn kernels chosen at run time (src/core/isa.h): the baseline build
 * (any x86-64 CPU) and the x86-64-v3 build (AVX2, FMA; run only when this CPU has it), each
 * called by name:
 * - dpt_small_gemm, dpt_conv_direct and dpt_conv_pe_grad against double-precision loops (the baseline's
 *   portable vectors and the v3 intrinsics differ in rounding, not in the math), and the
 *   x86-64-v4 (AVX-512) build of the three when the CPU has it: its dpt_conv_direct gives
 *   v3's bits;
 * - the activations' forward and backward and the losses give the same bits in both builds
 *   (fmaf is exactly rounded in both; ISO C mode contracts nothing else), special values
 *   included;
 * - the dispatchers (dpt_small_gemm, dpt_layer_act_setup, dpt_loss) pick the v3 build
 *   exactly when the CPU has it.
 * A build without a second copy (DPT_ISA_DISPATCH 0: -march=native on an AVX2 CPU, another
 * architecture or compiler) checks its one build against the references. */
#include <dptrain/nn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"
#include "testutil.h"

typedef void (*gemm_fn)(size_t, size_t, size_t, const float *, size_t, size_t, const float *, size_t, float *, size_t,
                        size_t, int);
typedef void (*conv_fn)(size_t, size_t, size_t, size_t, size_t, const float *, const float *, const size_t *,
                        const float *, float *, int);
typedef void (*pe_fn)(size_t, size_t, size_t, size_t, size_t, const size_t *, const float *, const float *, float *,
                      int);
typedef void (*act_setup_fn)(dpt_layer *, dpt_layer_kind, size_t);
typedef dpt_status (*loss_fn)(dpt_loss_kind, const float *, size_t, size_t, const int32_t *, const float *, float *,
                              float *);

static uint64_t lcg = 12345;
static float urand(void) { /* uniform in [-1, 1) */
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(lcg >> 11) * 0x1p-52 - 1.0);
}

/* ==== dpt_small_gemm against a double loop ==== */

static void check_gemm(gemm_fn f, const char *name) {
    static const size_t Ms[] = {1, 5, 6, 7, 13}, Ns[] = {1, 7, 8, 9, 16, 17, 31}, Ks[] = {0, 1, 3, 50};
    size_t bad = 0;
    for (size_t im = 0; im < 5; im++)
        for (size_t in = 0; in < 7; in++)
            for (size_t ik = 0; ik < 4; ik++)
                for (int acc = 0; acc < 2; acc++) {
                    const size_t M = Ms[im], N = Ns[in], K = Ks[ik], ldb = N + 3, ars = K + 2, crs = N + 1;
                    const size_t na = M * ars, nb = K ? (K - 1) * ldb + N : 1; /* B ends at its last element */
                    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(M * crs * sizeof *c);
                    for (size_t i = 0; i < na; i++) a[i] = urand();
                    for (size_t i = 0; i < nb; i++) b[i] = urand();
                    for (size_t i = 0; i < M * crs; i++) c[i] = urand();
                    double *ref = malloc(M * N * sizeof *ref);
                    for (size_t m = 0; m < M; m++)
                        for (size_t n = 0; n < N; n++) {
                            double r = acc ? c[m * crs + n] : 0.0;
                            for (size_t k = 0; k < K; k++) r += (double)a[m * ars + k] * b[k * ldb + n];
                            ref[m * N + n] = r;
                        }
                    f(M, N, K, a, ars, 1, b, ldb, c, crs, 1, acc);
                    for (size_t m = 0; m < M; m++)
                        for (size_t n = 0; n < N; n++) {
                            double got = c[m * crs + n], want = ref[m * N + n];
                            bad += !(fabs(got - want) <= 1e-5 * (1.0 + sqrt((double)K)) + 1e-5 * fabs(want));
                        }
                    free(a), free(b), free(c), free(ref);
                }
    if (bad) fprintf(stderr, "%s: %zu entries off the double loop\n", name, bad);
    CHECK(bad == 0);
}

/* ==== dpt_conv_direct against a double loop ==== */

static void check_conv(conv_fn f, const char *name) {
    size_t bad = 0;
    for (size_t O = 1; O <= 13; O += 4)
        for (size_t Wo = 8; Wo <= 32; Wo += 8)
            for (size_t Ho = 1; Ho <= 5; Ho++)
                for (int acc = 0; acc < 2; acc++) {
                    const size_t C = 2, k = 3, Wp = Wo + k - 1, Hp = Ho + k - 1, K = C * k * k, T = Ho * Wo;
                    size_t koff[18];
                    for (size_t c = 0, j = 0; c < C; c++)
                        for (size_t ki = 0; ki < k; ki++)
                            for (size_t kj = 0; kj < k; kj++) koff[j++] = (c * Hp + ki) * Wp + kj;
                    float *w = malloc(O * K * sizeof *w), *bias = malloc(O * sizeof *bias);
                    float *xp = malloc(C * Hp * Wp * sizeof *xp), *out = malloc(O * T * sizeof *out);
                    double *ref = malloc(O * T * sizeof *ref);
                    for (size_t i = 0; i < O * K; i++) w[i] = urand();
                    for (size_t i = 0; i < O; i++) bias[i] = urand();
                    for (size_t i = 0; i < C * Hp * Wp; i++) xp[i] = urand();
                    for (size_t i = 0; i < O * T; i++) out[i] = urand();
                    for (size_t o = 0; o < O; o++)
                        for (size_t t = 0; t < T; t++) {
                            double r = (acc ? out[o * T + t] : 0.0) + bias[o];
                            for (size_t j = 0; j < K; j++) r += (double)w[o * K + j] * xp[koff[j] + (t / Wo) * Wp + t % Wo];
                            ref[o * T + t] = r;
                        }
                    f(O, K, T, Wo, Wp, w, bias, koff, xp, out, acc);
                    for (size_t i = 0; i < O * T; i++) bad += !(fabs(out[i] - ref[i]) <= 1e-5 * (1.0 + fabs(ref[i])));
                    free(w), free(bias), free(xp), free(out), free(ref);
                }
    if (bad) fprintf(stderr, "%s: %zu outputs off the double loop\n", name, bad);
    CHECK(bad == 0);
}

/* f and g give the same bits (each output the same sum over k in the same order), on
 * resnet5's shapes and on widths whose position blocks cross output rows */
static void check_conv_same(conv_fn f, conv_fn g, const char *what) {
    static const size_t shapes[][4] = {{8, 3, 32, 32}, {16, 8, 16, 16}, {32, 16, 8, 8}, {7, 5, 3, 24}, {13, 2, 5, 40}};
    size_t bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int acc = 0; acc < 2; acc++) {
            const size_t O = shapes[s][0], C = shapes[s][1], Ho = shapes[s][2], Wo = shapes[s][3], k = 3;
            const size_t Wp = Wo + 2, Hp = Ho + 2, K = C * k * k, T = Ho * Wo;
            size_t *koff = malloc(K * sizeof *koff);
            for (size_t c = 0, j = 0; c < C; c++)
                for (size_t ki = 0; ki < k; ki++)
                    for (size_t kj = 0; kj < k; kj++) koff[j++] = (c * Hp + ki) * Wp + kj;
            float *w = malloc(O * K * sizeof *w), *bias = malloc(O * sizeof *bias), *xp = malloc(C * Hp * Wp * sizeof *xp);
            float *o1 = malloc(O * T * sizeof *o1), *o2 = malloc(O * T * sizeof *o2);
            for (size_t i = 0; i < O * K; i++) w[i] = urand();
            for (size_t i = 0; i < O; i++) bias[i] = urand();
            for (size_t i = 0; i < C * Hp * Wp; i++) xp[i] = urand();
            for (size_t i = 0; i < O * T; i++) o1[i] = o2[i] = urand();
            f(O, K, T, Wo, Wp, w, bias, koff, xp, o1, acc);
            g(O, K, T, Wo, Wp, w, bias, koff, xp, o2, acc);
            for (size_t i = 0; i < O * T; i++) bad += memcmp(&o1[i], &o2[i], sizeof *o1) != 0;
            free(koff), free(w), free(bias), free(xp), free(o1), free(o2);
        }
    if (bad) fprintf(stderr, "%s: %zu outputs differ in their bits\n", what, bad);
    CHECK(bad == 0);
}

/* ==== dpt_conv_pe_grad against a double loop ==== */

/* g [O, Dk] (+)= dv [O, T] U^T with U read from a padded example: output counts around
 * its blocks of 2 and 4 (1, 2, 5, 8, 11) and the v4 build's blocks of 32 outputs for rows of
 * 8 and 24 positions (32, 64), patch rows around its blocks of 4 and 8 (C k^2 = 1 .. 27),
 * widths of one and two vectors, kernels 1, 2, 3, and padded rows wider than Wo + k - 1;
 * the 8 floats after g must stay untouched. */
static void check_pe(pe_fn f, const char *name) {
    static const size_t Os[] = {1, 2, 5, 8, 11, 32, 64}, Cs[] = {1, 2, 3}, ks[] = {1, 2, 3};
    size_t bad = 0, n = 0;
    for (size_t io = 0; io < 7; io++)
        for (size_t ic = 0; ic < 3; ic++)
            for (size_t ik = 0; ik < 3; ik++)
                for (size_t Wo = 8; Wo <= 32; Wo += 8)
                    for (size_t Ho = 1; Ho <= 3; Ho += 2)
                        for (int acc = 0; acc < 2; acc++) {
                            const size_t O = Os[io], C = Cs[ic], k = ks[ik], Wp = Wo + k - 1 + (Ho == 3), Hp = Ho + k - 1;
                            const size_t Dk = C * k * k, T = Ho * Wo;
                            size_t koff[27];
                            for (size_t c = 0, j = 0; c < C; c++)
                                for (size_t ki = 0; ki < k; ki++)
                                    for (size_t kj = 0; kj < k; kj++) koff[j++] = (c * Hp + ki) * Wp + kj;
                            float *xp = malloc(C * Hp * Wp * sizeof *xp), *dv = malloc(O * T * sizeof *dv);
                            float *g = malloc((O * Dk + 8) * sizeof *g), *g0 = malloc((O * Dk + 8) * sizeof *g0);
                            for (size_t i = 0; i < C * Hp * Wp; i++) xp[i] = urand();
                            for (size_t i = 0; i < O * T; i++) dv[i] = urand();
                            for (size_t i = 0; i < O * Dk + 8; i++) g0[i] = g[i] = urand();
                            f(O, Dk, Ho, Wo, Wp, koff, xp, dv, g, acc);
                            for (size_t o = 0; o < O; o++)
                                for (size_t r = 0; r < Dk; r++) {
                                    double ref = acc ? g0[o * Dk + r] : 0.0;
                                    for (size_t t = 0; t < T; t++)
                                        ref += (double)dv[o * T + t] * xp[koff[r] + (t / Wo) * Wp + t % Wo];
                                    bad += !(fabs(g[o * Dk + r] - ref) <= 1e-5 * (1.0 + fabs(ref)));
                                    n++;
                                }
                            for (size_t i = O * Dk; i < O * Dk + 8; i++) bad += g[i] != g0[i];
                            free(xp), free(dv), free(g), free(g0);
                        }
    if (bad) fprintf(stderr, "%s: %zu of %zu entries off the double loop\n", name, bad, n);
    CHECK(bad == 0);
}

#if DPT_ISA_DISPATCH
/* ==== activations and losses: the same bits in both builds ==== */

#define NA 1037 /* not a multiple of any vector width: the scalar remainders run too */

static void fill_special(float *x, size_t n) {
    static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f, 88.0f, -88.0f, 1e30f, -1e30f, 5.5f};
    for (size_t i = 0; i < n; i++) x[i] = i < sizeof sp / sizeof *sp ? sp[i] : 8.0f * urand();
}

static void check_act_same(void) {
    static const dpt_layer_kind kinds[] = {DPT_LAYER_RELU, DPT_LAYER_GELU, DPT_LAYER_TANH, DPT_LAYER_SIGMOID,
                                           DPT_LAYER_IDENTITY};
    float *x = malloc(NA * sizeof *x), *dv = malloc(NA * sizeof *dv);
    float *v[2], *dx[2];
    for (int s = 0; s < 2; s++) v[s] = malloc(NA * sizeof *v[s]), dx[s] = malloc(NA * sizeof *dx[s]);
    fill_special(x, NA);
    for (size_t i = 0; i < NA; i++) dv[i] = urand();
    for (size_t kk = 0; kk < sizeof kinds / sizeof *kinds; kk++) {
        const act_setup_fn setup[2] = {dpt_layer_act_setup_base, dpt_layer_act_setup_v3};
        for (int s = 0; s < 2; s++) {
            dpt_layer L;
            memset(&L, 0, sizeof L);
            setup[s](&L, kinds[kk], NA);
            L.threads = 1;
            CHECK_OK(L.ops->forward(&L, x, v[s], 1));
            CHECK_OK(L.ops->backward_input(&L, x, v[s], dv, dx[s], 1));
        }
        int same = !memcmp(v[0], v[1], NA * sizeof(float)) && !memcmp(dx[0], dx[1], NA * sizeof(float));
        if (!same) fprintf(stderr, "activation %s: the baseline and v3 builds differ\n", dpt_layer_kind_name(kinds[kk]));
        CHECK(same);
    }
    for (int s = 0; s < 2; s++) free(v[s]), free(dx[s]);
    free(x), free(dv);
}

/* the same bits, except that any two NaNs count as equal: which NaN a sum with several
 * propagates (its sign) depends on the order of the operands in the instruction the
 * compiler chose (seen between the two builds of a -O0 sanitizer build) */
static int same_bits(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) && !(isnan(a[i]) && isnan(b[i]))) return 0;
    return 1;
}

/* Pooling (max and average; 2 x 2 at strides 1 and 2, 3 x 3 at 2, odd sizes): forward,
 * backward and jvp give the same bits in both builds (comparisons, copies and exactly
 * rounded sums; inputs with ties, signed zeros and NaN) */
static void check_pool_same(void) {
    typedef dpt_status (*pool_setup_fn)(dpt_layer *, dpt_layer_kind, const size_t[3], size_t, size_t);
    static const size_t shapes[][5] = {{2, 7, 9, 2, 2}, {8, 32, 32, 2, 2}, {3, 7, 9, 2, 1}, {2, 9, 9, 3, 2}};
    const pool_setup_fn setup[2] = {dpt_layer_pool_setup_base, dpt_layer_pool_setup_v3};
    const size_t B = 3;
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int kind = 0; kind < 2; kind++) {
            const size_t in_shape[3] = {shapes[sh][0], shapes[sh][1], shapes[sh][2]};
            dpt_layer L[2];
            int ok = 1;
            for (int b = 0; b < 2; b++) {
                memset(&L[b], 0, sizeof L[b]);
                L[b].threads = 1;
                ok &= setup[b](&L[b], kind ? DPT_LAYER_AVGPOOL : DPT_LAYER_MAXPOOL, in_shape, shapes[sh][3],
                               shapes[sh][4]) == DPT_OK;
            }
            CHECK(ok && L[0].ops != L[1].ops);
            if (!ok) continue;
            const size_t D = L[0].in_dim, K = L[0].out_dim;
            float *x = malloc(B * D * sizeof *x), *g = malloc(B * K * sizeof *g), *t = malloc(B * D * sizeof *t);
            float *v[2], *dx[2], *jv[2];
            for (size_t i = 0; i < B * D; i++) x[i] = (float)((int)(urand() * 3.0f)), t[i] = urand();
            fill_special(x, 40);
            for (size_t i = 0; i < B * K; i++) g[i] = i % 5 ? urand() : -0.0f;
            for (int b = 0; b < 2; b++) {
                v[b] = malloc(B * K * sizeof(float)), dx[b] = malloc(B * D * sizeof(float));
                jv[b] = malloc(B * K * sizeof(float));
                CHECK_OK(L[b].ops->forward(&L[b], x, v[b], B));
                CHECK_OK(L[b].ops->backward_input(&L[b], x, v[b], g, dx[b], B));
                CHECK_OK(L[b].ops->jvp(&L[b], x, v[b], t, NULL, jv[b], B));
            }
            const int same = same_bits(v[0], v[1], B * K) && same_bits(dx[0], dx[1], B * D) && same_bits(jv[0], jv[1], B * K);
            if (!same) fprintf(stderr, "pooling shape %zu, kind %d: the baseline and v3 builds differ\n", sh, kind);
            CHECK(same);
            for (int b = 0; b < 2; b++) free(v[b]), free(dx[b]), free(jv[b]);
            free(x), free(g), free(t);
        }
}

static void check_loss_same(void) {
    static const size_t Ks[] = {1, 3, 10, 37};
    const size_t B = 67;
    const loss_fn f[2] = {dpt_loss_base, dpt_loss_v3};
    for (size_t ik = 0; ik < 4; ik++)
        for (int kind = 0; kind < 3; kind++) {
            const size_t K = Ks[ik];
            const dpt_loss_kind lk = kind == 0 ? DPT_LOSS_SOFTMAX_CE : kind == 1 ? DPT_LOSS_SIGMOID_BCE : DPT_LOSS_SQUARED;
            float *o = malloc(B * K * sizeof *o), *t = malloc(B * K * sizeof *t);
            int32_t *y = malloc(B * sizeof *y);
            fill_special(o, B * K);
            for (size_t i = 0; i < B * K; i++) t[i] = urand();
            for (size_t i = 0; i < B; i++) y[i] = (int32_t)(i % (lk == DPT_LOSS_SIGMOID_BCE && K == 1 ? 2 : K));
            float *l[2], *d[2];
            for (int s = 0; s < 2; s++) {
                l[s] = malloc(B * sizeof *l[s]), d[s] = malloc(B * K * sizeof *d[s]);
                CHECK_OK(f[s](lk, o, B, K, y, t, l[s], d[s])); /* values and gradients */
            }
            int same = !memcmp(l[0], l[1], B * sizeof(float)) && !memcmp(d[0], d[1], B * K * sizeof(float));
            for (int s = 0; s < 2; s++) CHECK_OK(f[s](lk, o, B, K, y, t, l[s], NULL)); /* values alone */
            same = same && !memcmp(l[0], l[1], B * sizeof(float));
            if (!same) fprintf(stderr, "loss kind %d, K = %zu: the baseline and v3 builds differ\n", kind, K);
            CHECK(same);
            for (int s = 0; s < 2; s++) free(l[s]), free(d[s]);
            free(o), free(t), free(y);
        }
}
#endif

int main(void) {
    check_gemm(dpt_small_gemm, "dpt_small_gemm");
    check_conv(dpt_conv_direct, "dpt_conv_direct");
    check_pe(dpt_conv_pe_grad, "dpt_conv_pe_grad");
#if DPT_ISA_DISPATCH
    const int v3 = dpt_isa_v3();
    printf("this CPU %s x86-64-v3: both builds checked%s\n", v3 ? "runs" : "does not run",
           v3 ? "" : " (the v3 one: skipped)");
    check_gemm(dpt_small_gemm_base, "dpt_small_gemm_base");
    check_conv(dpt_conv_direct_base, "dpt_conv_direct_base");
    check_pe(dpt_conv_pe_grad_base, "dpt_conv_pe_grad_base");
    if (v3) {
        check_gemm(dpt_small_gemm_v3, "dpt_small_gemm_v3");
        check_conv(dpt_conv_direct_v3, "dpt_conv_direct_v3");
        check_pe(dpt_conv_pe_grad_v3, "dpt_conv_pe_grad_v3");
        check_act_same();
        check_pool_same();
        check_loss_same();
    }
    const int v4 = dpt_isa_v4();
    printf("this CPU %s x86-64-v4: its build %s\n", v4 ? "runs" : "does not run", v4 ? "checked" : "skipped");
    if (v4) {
        check_gemm(dpt_small_gemm_v4, "dpt_small_gemm_v4");
        check_conv(dpt_conv_direct_v4, "dpt_conv_direct_v4");
        check_pe(dpt_conv_pe_grad_v4, "dpt_conv_pe_grad_v4");
        /* the same sums in the same order as v3's: the same bits; and the dispatcher takes it */
        check_conv_same(dpt_conv_direct_v3, dpt_conv_direct_v4, "dpt_conv_direct_v4 against v3");
        check_conv_same(dpt_conv_direct, dpt_conv_direct_v4, "dpt_conv_direct against v4");
    } else if (v3) {
        check_conv_same(dpt_conv_direct, dpt_conv_direct_v3, "dpt_conv_direct against v3");
    }
    /* the dispatchers choose by the CPU */
    dpt_layer L;
    memset(&L, 0, sizeof L);
    dpt_layer_act_setup(&L, DPT_LAYER_GELU, 8);
    dpt_layer Lw;
    memset(&Lw, 0, sizeof Lw);
    (v3 ? dpt_layer_act_setup_v3 : dpt_layer_act_setup_base)(&Lw, DPT_LAYER_GELU, 8);
    CHECK(L.ops == Lw.ops);
#else
    printf("one build of the kernels (no run-time dispatch in this build)\n");
#endif
    TEST_MAIN_END();
}
