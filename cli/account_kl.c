/* dptrain account --kl-bound: the closed forms of Ye et al., "Initialization Matters"
 * (gradient-norm constant B of Eq. 7, the linearized-network KL bound of Eq. 8) for a
 * fully connected ReLU network without biases. These are KL bounds, not (epsilon, delta)
 * guarantees; the output says so. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "dptrain/accounting.h"

static const char *USAGE =
    "usage: dptrain account --kl-bound --init lecun|he|xavier|ntk --input-dim d --outputs o\n"
    "                       --width m --depth L [--steps K --eta E --sigma S --dataset-size n] [--json]\n\n"
    "Closed forms of 'Initialization Matters' (Ye et al. 2023) for noisy GD on a fully connected\n"
    "ReLU network without biases (widths d, m x (L-1), o; Gaussian init N(0, beta_l)):\n"
    "  B (Eq. 7) = d o prod_{l<L}(beta_l m_l / 2) sum_l beta_L / beta_l  (= E||df/dW||_F^2 at ||x||^2 = d)\n"
    "With the training arguments, the KL bound for the LINEARIZED network after K steps of\n"
    "W <- W - eta grad L + sqrt(2 eta sigma^2) Z on n records (replace-one neighbours, T = eta K):\n"
    "  kl_bound       = r B T / (n^2 sigma^2): exact per-step constant eta/(4 sigma^2), r = 1 (o = 1,\n"
    "                   logistic) or 2 (o >= 2: ||softmax - onehot||^2 < 2)\n"
    "  kl_bound_paper = 2 B T / (n^2 sigma^2): Eq. 8 as printed\n"
    "A KL bound is not an (epsilon, delta) guarantee; Pinsker gives only TV <= sqrt(KL / 2).";

static int pos_size(const char *flag, const char *s, size_t *out) {
    long v;
    if (!s) return cli_error("%s: required with --kl-bound", flag);
    if (cli_parse_long(flag, s, &v)) return 2;
    if (v < 1) return cli_error("%s: must be >= 1, got %ld", flag, v);
    *out = (size_t)v;
    return 0;
}

int dpt_cmd_account_kl(int argc, char **argv) {
    int kl = 0, json = 0;
    const char *init = NULL, *s_d = NULL, *s_o = NULL, *s_m = NULL, *s_L = NULL, *s_K = NULL, *s_eta = NULL,
               *s_sigma = NULL, *s_n = NULL;
    const cli_option opts[] = {
        {"--kl-bound", CLI_FLAG, &kl, NULL, "closed-form KL quantities (this mode)", NULL},
        {"--init", CLI_STR, &init, "NAME", "lecun | he | xavier | ntk (Table 1 variances)", NULL},
        {"--input-dim", CLI_STR, &s_d, "d", "input dimension m_0", NULL},
        {"--outputs", CLI_STR, &s_o, "o", "number of outputs m_L (1: logistic loss, >= 2: softmax)", NULL},
        {"--width", CLI_STR, &s_m, "m", "hidden width m_1 .. m_{L-1}", NULL},
        {"--depth", CLI_STR, &s_L, "L", "number of weight layers (>= 2)", NULL},
        {"--steps", CLI_STR, &s_K, "K", "noisy-GD steps (full batch: epochs)", NULL},
        {"--eta", CLI_STR, &s_eta, "E", "step size (> 0)", NULL},
        {"--sigma", CLI_STR, &s_sigma, "S", "Langevin noise scale (> 0; step noise std sqrt(2 eta) sigma)", NULL},
        {"--dataset-size", CLI_STR, &s_n, "n", "number of training records", NULL},
        {"--json", CLI_FLAG, &json, NULL, "print one JSON object", NULL},
        {NULL, CLI_FLAG, NULL, NULL, NULL, NULL}};
    int rc = cli_parse(argc, argv, 1, opts, USAGE);
    if (rc < 0) return 0;
    if (rc) return rc;
    dpt_kl_init ki;
    if (!init) return cli_error("--init: required with --kl-bound (lecun|he|xavier|ntk)");
    if (dpt_kl_init_parse(init, &ki) != DPT_OK) return cli_error("--init: %s", dpt_last_error());
    size_t d, o, m, L;
    if ((rc = pos_size("--input-dim", s_d, &d)) || (rc = pos_size("--outputs", s_o, &o)) ||
        (rc = pos_size("--width", s_m, &m)) || (rc = pos_size("--depth", s_L, &L)))
        return rc;
    if (L < 2) return cli_error("--depth: must be >= 2 (one hidden layer at least), got %zu", L);
    if (L > 64) return cli_error("--depth: at most 64 layers, got %zu", L);
    int train_args = (s_K != NULL) + (s_eta != NULL) + (s_sigma != NULL) + (s_n != NULL);
    if (train_args && train_args < 4)
        return cli_error("--steps, --eta, --sigma and --dataset-size: give all four for the KL bound (or none for B)");
    size_t widths[65];
    double beta[64], B;
    widths[0] = d, widths[L] = o;
    for (size_t l = 1; l < L; l++) widths[l] = m;
    if (dpt_kl_init_variances(ki, widths, L, beta) != DPT_OK || dpt_kl_gradient_constant(widths, L, beta, &B) != DPT_OK)
        return cli_fail("--kl-bound");
    dpt_kl_bound_result r;
    int have = 0;
    if (train_args) {
        size_t K, n;
        double eta, sigma;
        if ((rc = pos_size("--steps", s_K, &K)) || (rc = pos_size("--dataset-size", s_n, &n))) return rc;
        if (cli_parse_double("--eta", s_eta, &eta) || cli_parse_double("--sigma", s_sigma, &sigma)) return 2;
        if (!(eta > 0)) return cli_error("--eta: must be > 0, got %g", eta);
        if (!(sigma > 0)) return cli_error("--sigma: must be > 0, got %g", sigma);
        if (dpt_kl_linearized_bound(B, o, (uint64_t)K, eta, sigma, n, &r) != DPT_OK) return cli_fail("--kl-bound");
        have = 1;
    }
    const char *note = "KL divergence bounds and constants of 'Initialization Matters' (linearized network, "
                       "Assumption 2.2: ||x||^2 <= d); not an (epsilon, delta) guarantee";
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "init", dpt_kl_init_name(ki));
        cli_json_number(j, "input_dim", (double)d);
        cli_json_number(j, "outputs", (double)o);
        cli_json_number(j, "width", (double)m);
        cli_json_number(j, "depth", (double)L);
        cJSON *bl = cJSON_AddArrayToObject(j, "beta");
        for (size_t l = 0; l < L; l++) cJSON_AddItemToArray(bl, cJSON_CreateNumber(beta[l]));
        cli_json_number(j, "B", B);
        if (have) {
            cli_json_number(j, "T", r.T);
            cli_json_number(j, "kl_bound", r.kl_bound);
            cJSON_AddStringToObject(j, "kl_bound_constant", "exact eta/(4 sigma^2), residual factor r");
            cli_json_number(j, "residual_factor", r.r);
            cli_json_number(j, "kl_bound_paper", r.kl_bound_paper);
            cli_json_number(j, "pinsker_tv", r.pinsker_tv);
        }
        cJSON_AddStringToObject(j, "note", note);
        char *s = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (!s) return cli_failf("--json: out of memory"); /* not silence and success */
        printf("%s\n", s);
        cJSON_free(s);
        return 0;
    }
    printf("note            %s\n", note);
    printf("network         d %zu -> %zu x %zu (ReLU, no biases) -> o %zu, depth L %zu\n", d, L - 1, m, o, L);
    printf("init            %s: beta_1 %.6g, beta_2 %.6g, beta_L %.6g\n", dpt_kl_init_name(ki), beta[0],
           L > 2 ? beta[1] : beta[L - 1], beta[L - 1]);
    printf("B (Eq. 7)       %.6g\n", B);
    if (have) {
        printf("T = eta K       %.6g\n", r.T);
        printf("KL bound        %.6g   (exact constant eta/(4 sigma^2); r = %g: E||grad diff||^2 <= %gB/n^2)\n",
               r.kl_bound, r.r, 4 * r.r);
        printf("KL bound paper  %.6g   (Eq. 8 as printed: 2 B T / (n^2 sigma^2))\n", r.kl_bound_paper);
        printf("Pinsker         TV distance <= sqrt(KL bound / 2) = %.6g (total variation, not delta of DP)\n",
               r.pinsker_tv);
    }
    return 0;
}
