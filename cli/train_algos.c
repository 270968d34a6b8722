/* The --algo table and what several algorithms share (ledger report, noise-mode notice). */
#include "train_algos.h"

#include <dptrain/accounting.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

const cli_algo *const CLI_ALGOS[] = {
    &CLI_ALGO_SGD,
    &CLI_ALGO_DPSGD,
    &CLI_ALGO_PDPSGD,
    &CLI_ALGO_PROPNOISE,
    &CLI_ALGO_DPULR,
    &CLI_ALGO_ULR,
    &CLI_ALGO_DPMAC,
    &CLI_ALGO_MAC,
    &CLI_ALGO_NOISY_GD,
    NULL,
};

const cli_algo *cli_algo_find(const char *name) {
    for (size_t i = 0; CLI_ALGOS[i]; i++)
        if (!strcmp(CLI_ALGOS[i]->name, name)) return CLI_ALGOS[i];
    return NULL;
}

void cli_algo_names(char *buf, size_t n) {
    size_t w = 0;
    if (n) buf[0] = 0;
    for (size_t i = 0; CLI_ALGOS[i] && w < n; i++) {
        int k = snprintf(buf + w, n - w, "%s%s", i ? ", " : "", CLI_ALGOS[i]->name);
        if (k < 0) break;
        w += (size_t)k;
    }
}

int cli_report_ledger(const cli_algo_ctx *c, dpt_trainer *t, double sigma) {
    /* only what the accountants computed from the recorded events */
    double e = NAN, e_rdp = NAN, e_pld = NAN, delta = c->priv->delta;
    dpt_accountant which = DPT_ACCT_RDP;
    const dpt_ledger *l = dpt_trainer_ledger(t);
    if (!l) return cli_fail("epsilon: no privacy ledger");
    /* the headline: the default accountant's (PLD where it applies), as calibrated */
    if (dpt_ledger_epsilon_default(l, delta, DPT_CONV_BALLE, &e, &which, &e_rdp, &e_pld) != DPT_OK)
        return cli_fail("epsilon");
    double e_next = 0;
    if (dpt_trainer_budget_stopped(t, &e_next))
        printf("stopped by the privacy budget: the next step would reach epsilon %.4g > %g\n", e_next,
               c->priv->target_eps);
    char ex[320];
    cli_ledger_excludes(l, ex, sizeof ex);
    /* a run that took no step wrote nothing (dpt_trainer_run): no ledger file to point at */
    char where[600];
    if (dpt_trainer_step(t)) snprintf(where, sizeof where, "ledger: %s/ledger.json", c->out);
    else snprintf(where, sizeof where, "nothing written: the run took no step");
    char head[96];
    cli_epsilon_text(head, sizeof head, e, which, e_rdp, e_pld);
    printf("privacy: %s at delta %g after %" PRIu64 " steps (q %g, sigma %g)%s  %s\n", head, delta,
           dpt_ledger_steps(l), c->cfg->sample_rate, sigma, ex, where);
    return 0;
}

void cli_epsilon_text(char *buf, size_t n, double eps, dpt_accountant which, double e_rdp, double e_pld) {
    if (which == DPT_ACCT_PLD) snprintf(buf, n, "epsilon %.4g (PLD; RDP %.4g)", eps, e_rdp);
    else if (!isnan(e_pld)) snprintf(buf, n, "epsilon %.4g (RDP; PLD %.4g)", eps, e_pld);
    else snprintf(buf, n, "epsilon %.4g (RDP)", eps);
}

void cli_ledger_excludes(const struct dpt_ledger *l, char *buf, size_t n) {
    dpt_ledger_label(l, 1, buf, n); /* the library's text: the epoch lines and Python say the same */
}

int cli_poisson_privacy_setup(cli_algo_ctx *c) {
    const cli_privacy_flags *p = c->priv;
    dpt_train_config *cfg = c->cfg;
    const size_t N = c->train->n;
    double q = c->sample_rate_seen ? cfg->sample_rate : (double)cfg->batch_size / (double)N;
    if (!(q > 0 && q <= 1))
        return cli_error("--batch-size %zu: the sampling rate q = B/N = %g is outside (0, 1] (N = %zu)",
                         cfg->batch_size, q, N);
    if (p->delta >= 1.0 / (double)N && !p->force)
        return cli_error("--delta %g >= 1/N = %g: such a delta allows releasing a whole example; pass --force "
                         "to accept it", p->delta, 1.0 / (double)N);
    cfg->sample_rate = q;
    cfg->delta = p->delta;
    cfg->secure = p->secure;
    cfg->allow_ledger_mismatch = p->allow_mismatch;
    cfg->target_epsilon = p->sigma_seen ? p->target_eps : 0.0;
    return 0;
}

int cli_secure_sampler(const cli_algo_ctx *c, dpt_dgauss_method *out) {
    const cli_privacy_flags *p = c->priv;
    if (p->secure_sampler_seen && !p->secure) return cli_error("--secure-sampler applies only with --secure");
    if (dpt_dgauss_method_parse(p->secure_sampler, out) != DPT_OK)
        return cli_error("--secure-sampler '%s': expected table or cks", p->secure_sampler);
    return 0;
}

void cli_print_noise_mode(const cli_algo_ctx *c) {
    if (c->quiet) return;
    if (c->priv->secure && !strcmp(c->priv->secure_sampler, "cks"))
        fprintf(stderr, "dptrain: secure mode: OS-seeded noise and batch sampling (never logged), exact discrete "
                        "Gaussian noise on a lattice (CKS sampler)\n");
    else if (c->priv->secure)
        fprintf(stderr, "dptrain: secure mode: OS-seeded noise and batch sampling (never logged), discrete Gaussian "
                        "noise on a lattice (table sampler; its distance from the exact one is accounted in the "
                        "epsilon)\n");
    else if (!c->cfg->seed || c->cfg->seed_from_os) {
        char sdir[512] = "--secret-dir";
        if (dpt_run_secret_dir(c->cfg->secret_dir, sdir, sizeof sdir) != DPT_OK) { /* the trainer reports it */
            snprintf(sdir, sizeof sdir, "--secret-dir");
            dpt_clear_error();
        }
        fprintf(stderr, "dptrain: seed drawn from the OS (kept in the run's secret file in %s, mode 0600, outside the "
                        "run directory; never in the checkpoint, ledger or metrics); floating-point Gaussian noise "
                        "(--secure for lattice noise)\n", sdir);
    }
    else
        fprintf(stderr, "dptrain: SEEDED run (--seed %" PRIu64 "): anyone who knows the seed can regenerate the "
                        "batches and the noise, and the epsilon holds only while it stays secret and no other run "
                        "uses it (two runs with one seed share their batches and noise: on neighbouring data their "
                        "difference is nearly noiseless); the ledger, metrics and checkpoint say so (omit --seed to "
                        "draw it from the OS)\n", c->cfg->seed);
}

const char *cli_seed_text(const dpt_train_config *cfg) {
    static _Thread_local char buf[48];
    if (!cfg->seed || cfg->seed_from_os) return "from the OS";
    snprintf(buf, sizeof buf, "%" PRIu64 " (chosen)", cfg->seed);
    return buf;
}
