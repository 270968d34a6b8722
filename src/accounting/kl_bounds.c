/* Closed forms of Ye et al., "Initialization Matters: Privacy-Utility Analysis of
 * Overparameterized Neural Networks" (NeurIPS 2023) for noisy GD / Langevin diffusion on
 * fully connected ReLU networks: the gradient-norm constant B (Eq. 7, Table 1), the
 * linearized-network KL bound (Eq. 8), the general bound of Lemma 3.2 and the Section 6
 * orders of magnitude. docs/kl_privacy.md explains the constants. */
#include <dptrain/accounting.h>

#include <math.h>
#include <string.h>

static const char *const KLI_NAMES[] = {"lecun", "he", "xavier", "ntk"};

dpt_status dpt_kl_init_parse(const char *s, dpt_kl_init *out) {
    DPT_CHECK(s && out, DPT_EINVAL, "dpt_kl_init_parse: %s is NULL", s ? "out" : "s");
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, KLI_NAMES[i])) {
            *out = (dpt_kl_init)i;
            return DPT_OK;
        }
    return dpt_set_error(DPT_EINVAL, "dpt_kl_init_parse: unknown initialization '%s' (expected lecun|he|xavier|ntk)",
                         s);
}

const char *dpt_kl_init_name(dpt_kl_init init) {
    return (int)init >= 0 && (int)init < 4 ? KLI_NAMES[init] : "?";
}

static dpt_status check_widths(const size_t *widths, size_t L) {
    DPT_CHECK(widths, DPT_EINVAL, "KL closed forms: NULL widths");
    DPT_CHECK(L >= 2, DPT_EINVAL, "L (the depth) must be >= 2 (one hidden layer at least), got %zu", L);
    for (size_t l = 0; l <= L; l++)
        DPT_CHECK(widths[l] >= 1, DPT_EINVAL, "KL closed forms: width m_%zu must be >= 1", l);
    return DPT_OK;
}

dpt_status dpt_kl_init_variances(dpt_kl_init init, const size_t *widths, size_t L, double *beta) {
    DPT_TRY(check_widths(widths, L));
    DPT_CHECK(beta, DPT_EINVAL, "KL closed forms: NULL beta");
    for (size_t l = 1; l <= L; l++) {
        const double in = (double)widths[l - 1], outw = (double)widths[l];
        double b;
        switch (init) {
        case DPT_KLI_LECUN: b = 1.0 / in; break;
        case DPT_KLI_HE: b = 2.0 / in; break;
        case DPT_KLI_XAVIER: b = 2.0 / (in + outw); break;
        case DPT_KLI_NTK: b = l < L ? 2.0 / outw : 1.0 / outw; break;
        default: return dpt_set_error(DPT_EINVAL, "init: unknown initialization %d (a dpt_kl_init)", (int)init);
        }
        beta[l - 1] = b;
    }
    return DPT_OK;
}

dpt_status dpt_kl_gradient_constant(const size_t *widths, size_t L, const double *beta, double *B) {
    DPT_TRY(check_widths(widths, L));
    DPT_CHECK(beta && B, DPT_EINVAL, "KL closed forms: NULL argument");
    for (size_t l = 0; l < L; l++)
        DPT_CHECK(isfinite(beta[l]) && beta[l] > 0, DPT_EINVAL, "KL closed forms: variance beta_%zu = %g must be > 0",
                  l + 1, beta[l]);
    /* in logs: the product over up to 64 layers under- or overflows otherwise */
    double logp = 0, sum = 0;
    for (size_t i = 1; i <= L - 1; i++) logp += log(beta[i - 1] * (double)widths[i] / 2.0);
    for (size_t l = 1; l <= L; l++) sum += beta[L - 1] / beta[l - 1];
    *B = exp(log((double)widths[0]) + log((double)widths[L]) + logp + log(sum));
    return DPT_OK;
}

dpt_status dpt_kl_gradient_constant_table1(dpt_kl_init init, double d, double o, double m, size_t L, double *B) {
    DPT_CHECK(B && d >= 1 && o >= 1 && m >= 1, DPT_EINVAL, "Table 1: d, o, m must be >= 1");
    DPT_CHECK(L >= 2, DPT_EINVAL, "L (the depth) must be >= 2 (one hidden layer at least), got %zu", L);
    const double Lm1 = (double)L - 1.0;
    switch (init) {
    case DPT_KLI_LECUN: *B = o * m * (Lm1 + d / m) / pow(2.0, Lm1); break;
    case DPT_KLI_HE: *B = o * m * (Lm1 + d / m); break;
    case DPT_KLI_NTK: *B = d * m * (Lm1 / 2.0 + o / m); break;
    case DPT_KLI_XAVIER:
        *B = o * d * (Lm1 + (d + o) / (2.0 * m)) / (pow(2.0, (double)L - 3.0) * (1.0 + d / m) * (1.0 + o / m));
        break;
    default: return dpt_set_error(DPT_EINVAL, "init: unknown initialization %d (a dpt_kl_init)", (int)init);
    }
    return DPT_OK;
}

dpt_status dpt_kl_linearized_bound(double B, size_t o, uint64_t steps, double eta, double sigma, size_t n,
                                   dpt_kl_bound_result *out) {
    DPT_CHECK(out, DPT_EINVAL, "KL bound: NULL argument");
    DPT_CHECK(isfinite(B) && B >= 0, DPT_EINVAL, "KL bound: B must be finite and >= 0, got %g", B);
    DPT_CHECK(o >= 1, DPT_EINVAL, "dpt_kl_linearized_bound: o (the number of outputs) must be >= 1");
    DPT_CHECK(isfinite(eta) && eta > 0, DPT_EINVAL, "dpt_kl_linearized_bound: eta must be > 0, got %g", eta);
    DPT_CHECK(isfinite(sigma) && sigma > 0, DPT_EINVAL, "dpt_kl_linearized_bound: sigma must be > 0, got %g", sigma);
    DPT_CHECK(n >= 1, DPT_EINVAL, "dpt_kl_linearized_bound: n (the number of records) must be >= 1");
    memset(out, 0, sizeof *out);
    const double nn = (double)n * (double)n, s2 = sigma * sigma;
    out->B = B;
    out->T = eta * (double)steps;
    out->r = o == 1 ? 1.0 : 2.0;
    out->kl_bound_paper = 2.0 * B * out->T / (nn * s2);
    /* sum_k eta/(4 sigma^2) * 4 r B / n^2 */
    out->kl_bound = out->r * B * out->T / (nn * s2);
    out->pinsker_tv = dpt_pinsker_tv(out->kl_bound);
    return DPT_OK;
}

double dpt_pinsker_tv(double kl) {
    if (!(kl >= 0)) return NAN;
    double tv = sqrt(kl / 2.0);
    return tv < 1.0 ? tv : 1.0;
}

dpt_status dpt_kl_lemma32(const dpt_kl_lemma32_args *a, double *integral, double *kl_exact, double *kl_paper) {
    DPT_CHECK(a && integral, DPT_EINVAL, "Lemma 3.2: NULL argument");
    DPT_CHECK(isfinite(a->T) && a->T >= 0, DPT_EINVAL, "Lemma 3.2: T must be >= 0");
    DPT_CHECK(isfinite(a->sigma) && a->sigma > 0, DPT_EINVAL, "Lemma 3.2: sigma must be > 0");
    DPT_CHECK(a->n >= 1, DPT_EINVAL, "Lemma 3.2: n must be >= 1");
    DPT_CHECK(a->b >= 0 && a->c >= 0 && a->rank >= 0 && a->G0 >= 0 && a->N0 >= 0, DPT_EINVAL,
              "Lemma 3.2: b, c, rank, G0, N0 must be >= 0");
    const double b2 = a->b * a->b, k = 2.0 + b2, n2 = a->n * a->n, s2 = a->sigma * a->sigma;
    /* (e^{kT} - 1)/k - T, by expm1 so that small T keeps its o(T) accuracy */
    const double growth = expm1(k * a->T) / k - a->T;
    const double v = 2.0 * a->T * a->G0 + 2.0 * b2 / (n2 * k) * growth * (a->N0 + 2.0 * s2 * a->rank + a->c * a->c) +
                     2.0 * a->c * a->c * a->T / n2;
    *integral = v;
    if (kl_exact) *kl_exact = v / (4.0 * s2);
    if (kl_paper) *kl_paper = v / (2.0 * s2);
    return DPT_OK;
}

dpt_status dpt_kl_lazy_distance(const size_t *widths, size_t L, const double *beta, size_t n, double *R) {
    DPT_TRY(check_widths(widths, L));
    DPT_CHECK(beta && R && n >= 1, DPT_EINVAL, "Eq. 9: NULL argument or n < 1");
    double logp = 0, inv = 0;
    for (size_t i = 1; i <= L - 1; i++) logp += log(beta[i - 1] * (double)widths[i]);
    for (size_t l = 0; l < L; l++) {
        DPT_CHECK(beta[l] > 0, DPT_EINVAL, "Eq. 9: variance beta_%zu must be > 0", l + 1);
        inv += 1.0 / beta[l];
    }
    const double denom = exp(log((double)widths[0]) + log(beta[L - 1]) + logp);
    const double f = 1.0 / denom > 1.0 ? 1.0 / denom : 1.0;
    *R = f * (double)n / inv;
    return DPT_OK;
}

dpt_status dpt_kl_tradeoff(double B, double R, size_t n, double eps, double *T, double *sigma, double *excess) {
    DPT_CHECK(T && sigma && excess, DPT_EINVAL, "Corollary 6.4: NULL argument");
    DPT_CHECK(B > 0 && R > 0 && n >= 1 && eps > 0 && isfinite(B) && isfinite(R) && isfinite(eps), DPT_EINVAL,
              "Corollary 6.4: B, R, eps must be > 0 and n >= 1");
    const double nn = (double)n;
    *T = sqrt(eps * nn * R / (2.0 * B));
    *sigma = sqrt(2.0 * B * *T / (eps * nn * nn));
    *excess = 1.0 / (nn * nn) + sqrt(B * R / (eps * nn));
    return DPT_OK;
}
