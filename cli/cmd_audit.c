/* dptrain audit: membership-inference audit of a training configuration. Trains a target
 * model on a random half of a population (members; the other half are non-members),
 * S shadow models on random halves (LiRA), runs the loss-threshold attack and LiRA
 * (online and offline), and reports ROC AUC and TPR at 0.1% / 1% FPR with bootstrap
 * intervals; optionally a canary audit turning the attack on m mislabelled canaries into
 * an epsilon lower bound (Clopper-Pearson). Writes OUT/audit.csv, OUT/roc.csv and
 * OUT/roc.png (gnuplot). The audit itself is the library's dpt_audit_run (src/audit/run.c):
 * this command parses flags, loads the data (and a --checkpoint target), prints the results
 * and writes the files. */
#include <dptrain/audit.h>
#include <dptrain/io.h>

#include <cjson/cJSON.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "run_data.h"

static const char *USAGE =
    "usage: dptrain audit [options]\n\n"
    "Membership-inference audit of a training configuration (algorithm, model, data).\n"
    "The first --population training examples are split at random into members (the\n"
    "target model's training set) and non-members. Attacks: loss threshold (Yeom et al.\n"
    "2018) and LiRA online/offline (Carlini et al. 2022) with --shadows shadow models\n"
    "trained by dptrain on random halves. Reports AUC and TPR at 0.1% and 1% FPR with\n"
    "bootstrap intervals. --canaries M adds M mislabelled test-split examples, each in the\n"
    "training set with probability 1/2, over --canary-runs runs, and turns the loss attack\n"
    "on them into an empirical epsilon lower bound (Clopper-Pearson at --alpha).\n"
    "Writes OUT/audit.csv (one row per attack), OUT/roc.csv, OUT/summary.json and, unless\n"
    "--no-plot, OUT/roc.png with the gnuplot script that draws it (OUT/roc.gp).\n"
    "With --checkpoint FILE the target is that trained model: members are examples of its\n"
    "training set, non-members test examples (balanced); give the training flags it was\n"
    "trained with (--algo, --lr, --epochs, ...) so the LiRA shadows match it.\n"
    "An audit measures leakage from below; it never proves privacy.";

static int write_outputs(const char *out, const dpt_audit_attack *A, size_t na, size_t bootstrap, int plot,
                         int *plotted) {
    *plotted = 0;
    char path[1100];
    snprintf(path, sizeof path, "%s/audit.csv", out);
    FILE *f = fopen(path, "w");
    if (!f) return cli_failf("--out %s: cannot write audit.csv: %s", out, strerror(errno));
    fprintf(f, "attack,members,nonmembers,auc,auc_lo,auc_hi,tpr_at_0.1%%fpr,lo,hi,tpr_at_1%%fpr,lo,hi\n");
    for (size_t k = 0; k < na; k++) {
        const dpt_audit_summary *s = &A[k].s;
        if (bootstrap)
            fprintf(f, "%s,%zu,%zu,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f\n", A[k].name, A[k].n_in, A[k].n_out,
                    s->auc, s->auc_lo, s->auc_hi, s->tpr[0], s->tpr_lo[0], s->tpr_hi[0], s->tpr[1], s->tpr_lo[1],
                    s->tpr_hi[1]);
        else /* no resamples, no interval: empty fields, not a zero-width one */
            fprintf(f, "%s,%zu,%zu,%.6f,,,%.6f,,,%.6f,,\n", A[k].name, A[k].n_in, A[k].n_out, s->auc, s->tpr[0],
                    s->tpr[1]);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/roc.csv", out);
    f = fopen(path, "w");
    if (!f) return cli_failf("--out %s: cannot write roc.csv: %s", out, strerror(errno));
    fprintf(f, "attack,fpr,tpr\n");
    for (size_t k = 0; k < na; k++) {
        size_t n = A[k].n_in + A[k].n_out + 1, m = 0;
        double *fp = dpt_alloc(n, sizeof *fp, "roc"), *tp = dpt_alloc(n, sizeof *tp, "roc");
        if (fp && tp && dpt_audit_roc(A[k].in, A[k].n_in, A[k].out, A[k].n_out, fp, tp, &m) == DPT_OK)
            for (size_t i = 0; i < m; i++) fprintf(f, "%s,%.8g,%.8g\n", A[k].name, fp[i], tp[i]);
        dpt_free(fp), dpt_free(tp);
    }
    fclose(f);
    if (!plot) return 0;
    /* The script names its files relative to OUT and gnuplot runs there, without a shell:
     * no path is ever parsed as shell or gnuplot text. pngcairo may be missing from
     * gnuplot-nox: then the plain png terminal. */
    const char *terms[2] = {"pngcairo", "png"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/roc.gp", out);
        f = fopen(path, "w");
        if (!f) return cli_failf("--out %s: cannot write roc.gp: %s", out, strerror(errno));
        fprintf(f, "set terminal %s size 800,600\nset output 'roc.png'\nset datafile separator ','\n"
                   "set logscale xy\nset xrange [1e-3:1]\nset yrange [1e-3:1]\nset key bottom right\n"
                   "set xlabel 'false positive rate'\nset ylabel 'true positive rate'\n"
                   "set title 'Membership inference ROC'\nplot x title 'chance' lw 1 dt 2", terms[k]);
        for (size_t j = 0; j < na; j++)
            fprintf(f, ", 'roc.csv' using (strcol(1) eq '%s' ? $2 : NaN):3 with lines lw 2 title '%s (AUC %.3f)'",
                    A[j].name, A[j].name, A[j].s.auc);
        fprintf(f, "\n");
        fclose(f);
        const char *argv[] = {"gnuplot", "roc.gp", NULL};
        if (cli_run_in_dir(out, argv, k == 0) == 0) {
            *plotted = 1;
            return 0;
        }
    }
    fprintf(stderr, "dptrain: warning: gnuplot failed; %s/roc.png not written\n", out);
    return 0;
}

/* ==== Printing what dpt_audit_run returns ==== */

typedef struct {
    int quiet;
    const char *dataset, *model, *algo;
    long epochs, shadows;
} audit_view;

static void progress(void *user, const dpt_audit_progress *p) {
    const audit_view *v = user;
    if (v->quiet) return;
    int tty = cli_stderr_is_tty();
    switch (p->stage) {
    case DPT_AUDIT_STAGE_START:
        fprintf(stderr, "dptrain audit: %s, %zu examples (%zu members), model %s, algo %s, %ld epochs, %ld shadows\n",
                v->dataset, p->population, p->members, v->model, v->algo, v->epochs, v->shadows);
        break;
    case DPT_AUDIT_STAGE_TARGET:
        fprintf(stderr, "target: test accuracy %.2f%% (%.1fs)\n", 100 * p->test_accuracy, p->elapsed_s);
        break;
    case DPT_AUDIT_STAGE_SHADOW:
    case DPT_AUDIT_STAGE_CANARY: {
        const char *what = p->stage == DPT_AUDIT_STAGE_SHADOW ? "shadow" : "canary run";
        if (tty) fprintf(stderr, "\r%s %zu/%zu (%.1fs)", what, p->done, p->total, p->elapsed_s);
        if (p->done == p->total)
            fprintf(stderr, "%s%zu %s%s trained (%.1fs)\n", tty ? "\n" : "", p->total, what, p->total == 1 ? "" : "s",
                    p->elapsed_s);
        break;
    }
    }
}

static void print_results(const dpt_audit_config *ac, const dpt_audit_result *res, const char *ckpt, const char *algo,
                          double sigma, double delta) {
    const dpt_audit_attack *A = res->attack;
    if (ac->bootstrap)
        printf("membership inference: %zu members / %zu non-members, %zu shadows, %.0f%% bootstrap intervals (%zu "
               "resamples)\n", A[0].n_in, A[0].n_out, res->shadows, 100 * (1 - ac->alpha), ac->bootstrap);
    else
        printf("membership inference: %zu members / %zu non-members, %zu shadows, no intervals (--bootstrap 0)\n",
               A[0].n_in, A[0].n_out, res->shadows);
    printf("%-14s %-24s %-28s %-28s\n", "attack", "AUC", "TPR at 0.1% FPR", "TPR at 1% FPR");
    for (size_t k = 0; k < res->n_attacks; k++) {
        const dpt_audit_summary *s = &A[k].s;
        if (ac->bootstrap)
            printf("%-14s %.3f [%.3f, %.3f]     %.4f [%.4f, %.4f]     %.4f [%.4f, %.4f]\n", A[k].name, s->auc,
                   s->auc_lo, s->auc_hi, s->tpr[0], s->tpr_lo[0], s->tpr_hi[0], s->tpr[1], s->tpr_lo[1], s->tpr_hi[1]);
        else
            printf("%-14s %-24.3f %-28.4f %.4f\n", A[k].name, s->auc, s->tpr[0], s->tpr[1]);
    }
    /* TPR at an FPR below 1 / non-members is read off a single non-member */
    if (A[0].n_out < 1000)
        printf("note: %zu non-members: TPR at 0.1%% FPR rests on fewer than one non-member's score (at least 1000 "
               "resolve it)\n", A[0].n_out);
    printf("target test accuracy %.2f%%; training time target %.2fs, shadows %.2fs per model\n",
           100 * res->test_accuracy, res->target_s, res->shadow_s);
    if (ckpt)
        printf("target: checkpoint %s (its privacy statement, if any, is in its run directory); shadows: --algo %s\n",
               ckpt, algo);
    else if (ac->job.algo == DPT_AUDIT_DPSGD)
        printf("privacy (accountant): epsilon %.4g (default accountant: min of PLD, RDP) at delta %g for the target run "
               "(q %g, sigma %g)%s\n", res->epsilon, delta, res->sample_rate, sigma, res->epsilon_label);
    else
        printf("privacy: no formal DP guarantee for --algo %s (no accountant, no epsilon); the audit above is what it leaks "
               "to these attacks\n", algo);
    if (!res->canaries) return;
    size_t M = res->canaries;
    printf("canary audit: %zu canaries x %zu runs (%zu in, %zu out), loss attack AUC %.3f: empirical epsilon "
           "lower bound %.3f at %.0f%% confidence (delta %g)\n", M, res->canary_runs, res->canary_in, res->canary_out,
           res->canary_auc, res->canary_eps_lb, 100 * (1 - ac->alpha), res->canary_delta);
    if (ac->job.algo == DPT_AUDIT_DPSGD)
        printf("  accountant epsilon of a canary run: %.4g (the lower bound must not exceed it)%s\n", res->canary_run_epsilon,
               res->epsilon_label);
    if (M > 1)
        printf("  note: the %zu canaries of one run are not independent trials; the bound above treats them as "
               "such (a heuristic, see docs/audit.md)\n", M);
    if (isfinite(res->one_run_eps_lb))
        printf("  one-run audit (Steinke et al. 2023): %" PRIu64 " of %" PRIu64 " guesses right: epsilon lower "
               "bound %.3f at %.0f%% confidence (delta %g)\n", res->one_run_correct, res->one_run_guesses,
               res->one_run_eps_lb, 100 * (1 - ac->alpha), res->canary_delta);
}

static void write_summary(const char *out, const dpt_audit_result *res, const char *ckpt, const char *algo, int dp,
                          double delta) {
    char path[1100];
    snprintf(path, sizeof path, "%s/summary.json", out);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "dptrain: warning: --out %s: cannot write summary.json: %s\n", out, strerror(errno));
        return;
    }
    const dpt_audit_attack *A = res->attack;
    fprintf(f, "{\"algo\": \"%s\", \"test_accuracy\": %.6f, \"members\": %zu, \"shadows\": %zu", algo,
            res->test_accuracy, A[0].n_in, res->shadows);
    for (size_t k = 0; k < res->n_attacks; k++)
        fprintf(f, ", \"%s_auc\": %.6f, \"%s_tpr_0.1%%\": %.6f, \"%s_tpr_1%%\": %.6f", A[k].name, A[k].s.auc,
                A[k].name, A[k].s.tpr[0], A[k].name, A[k].s.tpr[1]);
    if (ckpt) {
        cJSON *s = cJSON_CreateString(ckpt);
        char *q = s ? cJSON_PrintUnformatted(s) : NULL;
        fprintf(f, ", \"checkpoint\": %s", q ? q : "null");
        free(q);
        cJSON_Delete(s);
    } else if (dp) {
        fprintf(f, ", \"epsilon\": %.6f, \"delta\": %g, \"accountant\": \"default: min(pld, rdp)\"", res->epsilon, delta);
        /* the labels the text line carries, without the leading spaces (as eval --json) */
        cJSON *s = res->epsilon_label[0] ? cJSON_CreateString(res->epsilon_label + 2) : NULL;
        char *q = s ? cJSON_PrintUnformatted(s) : NULL;
        if (q) fprintf(f, ", \"privacy_label\": %s", q);
        free(q);
        cJSON_Delete(s);
    } else fprintf(f, ", \"privacy\": \"no formal DP guarantee\"");
    if (res->canaries) fprintf(f, ", \"canary_epsilon_lower_bound\": %.6f", res->canary_eps_lb);
    if (isfinite(res->one_run_eps_lb)) fprintf(f, ", \"one_run_epsilon_lower_bound\": %.6f", res->one_run_eps_lb);
    fprintf(f, ", \"target_train_s\": %.4f, \"target_train_loop_s\": %.4f, \"shadow_train_s\": %.4f}\n", res->target_s,
            res->target_loop_s, res->shadow_s);
    fclose(f);
}

int dpt_cmd_audit(int argc, char **argv) {
    const char *dataset = "fashion-mnist", *data_dir = DPT_DEFAULT_DATA_DIR, *classes = NULL, *normalize = "auto";
    const char *model = "mlp:784-128-10:relu", *algo = "sgd", *optimizer = "adam", *out = "runs/audit";
    double lr = 1e-3, sigma = 1.0, clip = 1.0, delta = 1e-5, kappa = 0, pdp_sigma = 0, lambda = 0, prop_sigma = 0;
    double alpha = 0.05;
    long population = 2000, max_test = 1000, batch = 64, epochs = 10, threads = 1, shadows = 16, boot = 200;
    long canaries = 0, canary_runs = 1, jobs = 1, guesses = 0;
    uint64_t seed = 1;
    const char *ckpt = NULL;
    int lr_seen = 0, pdp_sigma_seen = 0, kappa_seen = 0, no_plot = 0, quiet = 0, model_seen = 0, pop_seen = 0;
    int data_dir_seen = 0, sigma_seen = 0, clip_seen = 0, delta_seen = 0;
    cli_option opts[] = {
        {"--dataset", CLI_STR, &dataset, "NAME", "mnist | fashion-mnist | usps | usps-pooled (zip.train + zip.test pooled, fixed permutation, 5000 train / 4298 test) | cifar10 | fortunes-topic[:T] | fortunes-chars[:T] | csv:PATH[,TEST]", NULL},
        {"--checkpoint", CLI_STR, &ckpt, "FILE", "audit this trained checkpoint (members: its training set; non-members: "
                                                "test examples; shadows use the flags below)", NULL},
        {"--data-dir", CLI_STR, &data_dir, "DIR", "directory holding <dataset>/ folders", &data_dir_seen},
        {"--classes", CLI_STR, &classes, "LIST", "keep only these labels", NULL},
        {"--normalize", CLI_STR, &normalize, "MODE", "auto (fortunes-*: none; dpsgd: public, or none for csv; others: scalar) | none | public | scalar | channel | feature (not with dpsgd) | affine:SHIFT:SCALE (docs/data.md)", NULL},
        {"--population", CLI_LONG, &population, "N", "first N training examples: members + non-members (>= 8); with "
                                                      "--checkpoint: at most N/2 of each", &pop_seen},
        {"--max-test", CLI_LONG, &max_test, "N", "test examples for accuracy and canaries (0 = all)", NULL},
        {"--model", CLI_STR, &model, "SPEC", "model spec (softmax classifier; --checkpoint: its own)", &model_seen},
        {"--algo", CLI_STR, &algo, "NAME", "sgd | dpsgd | pdp-sgd | proportional-noise", NULL},
        {"--optimizer", CLI_STR, &optimizer, "NAME", "sgd | adam", NULL},
        {"--lr", CLI_DOUBLE, &lr, "X", "learning rate", &lr_seen},
        {"--batch-size", CLI_LONG, &batch, "B", "batch size (dpsgd: expected Poisson batch, q = B/members)", NULL},
        {"--epochs", CLI_LONG, &epochs, "E", "epochs of every model (target, shadows, canary runs)", NULL},
        {"--seed", CLI_U64, &seed, "S", "seed of the splits and of every model", NULL},
        {"--threads", CLI_LONG, &threads, "N", "threads per model (the machine is shared: keep it small)", NULL},
        {"--sigma", CLI_DOUBLE, &sigma, "X", "dpsgd: noise multiplier", &sigma_seen},
        {"--clip", CLI_DOUBLE, &clip, "C", "dpsgd: clipping norm", &clip_seen},
        {"--delta", CLI_DOUBLE, &delta, "D", "dpsgd: delta of the accountant's epsilon; canary bound's delta", &delta_seen},
        {"--kappa", CLI_DOUBLE, &kappa, "K", "pdp-sgd: proportional coefficient", &kappa_seen},
        {"--pdp-sigma", CLI_DOUBLE, &pdp_sigma, "S", "pdp-sgd: kappa = (lr S)^2 instead of --kappa (the paper's form with --optimizer sgd; our mapping with adam)", &pdp_sigma_seen},
        {"--lambda", CLI_DOUBLE, &lambda, "L", "pdp-sgd: plain L2 coefficient", NULL},
        {"--prop-sigma", CLI_DOUBLE, &prop_sigma, "S", "proportional-noise: relative weight noise", NULL},
        {"--jobs", CLI_LONG, &jobs, "J", "shadow models trained in parallel (one thread each; results do not depend on J)", NULL},
        {"--shadows", CLI_LONG, &shadows, "S", "LiRA shadow models (0 = loss attack only; >= 16 recommended)", NULL},
        {"--bootstrap", CLI_LONG, &boot, "B", "bootstrap resamples for the intervals", NULL},
        {"--alpha", CLI_DOUBLE, &alpha, "A", "intervals at confidence 1 - A", NULL},
        {"--canaries", CLI_LONG, &canaries, "M", "canary audit with M mislabelled canaries (0 = none)", NULL},
        {"--canary-runs", CLI_LONG, &canary_runs, "R", "independent training runs of the canary audit", NULL},
        {"--one-run-guesses", CLI_LONG, &guesses, "K", "one-run bound: guess member for the K highest canary scores, "
                                                        "non-member for the K lowest (0 = M/10)", NULL},
        {"--out", CLI_STR, &out, "DIR", "output directory", NULL},
        {"--no-plot", CLI_FLAG, &no_plot, NULL, "do not run gnuplot", NULL},
        {"--quiet", CLI_FLAG, &quiet, NULL, "no progress lines", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    int rc = cli_parse(argc, argv, 1, opts, USAGE);
    if (rc < 0) return 0;
    if (rc) return rc;
    /* before any data is read or model trained: a file, or a place we cannot write, fails now */
    if ((rc = cli_check_out_dir("--out", out)) != 0) return rc;
    dpt_audit_config ac = dpt_audit_config_defaults();
    dpt_audit_job *job = &ac.job;
    if (!strcmp(algo, "sgd")) job->algo = DPT_AUDIT_SGD;
    else if (!strcmp(algo, "dpsgd")) job->algo = DPT_AUDIT_DPSGD;
    else if (!strcmp(algo, "pdp-sgd")) job->algo = DPT_AUDIT_PDPSGD;
    else if (!strcmp(algo, "proportional-noise")) job->algo = DPT_AUDIT_PROPNOISE;
    else return cli_error("--algo: unknown algorithm '%s' (sgd, dpsgd, pdp-sgd, proportional-noise)", algo);
    if (population < 8) return cli_error("--population must be >= 8, got %ld", population);
    if (max_test < 0) return cli_error("--max-test must be >= 0, got %ld", max_test);
    if (batch < 1) return cli_error("--batch-size must be >= 1, got %ld", batch);
    if (epochs < 1) return cli_error("--epochs must be >= 1, got %ld", epochs);
    if (threads < 1 || threads > 64) return cli_error("--threads must be in [1, 64], got %ld", threads);
    if (shadows < 0 || shadows == 1) return cli_error("--shadows must be 0 or >= 2, got %ld", shadows);
    if (jobs < 1 || jobs > 64) return cli_error("--jobs must be in [1, 64], got %ld", jobs);
    if (boot < 0) return cli_error("--bootstrap must be >= 0, got %ld", boot);
    if (!(alpha > 0 && alpha < 1)) return cli_error("--alpha must be in (0, 1), got %g", alpha);
    if (guesses < 0) return cli_error("--one-run-guesses must be >= 0, got %ld", guesses);
    if (canaries < 0 || canary_runs < 1) return cli_error("--canaries must be >= 0 and --canary-runs >= 1");
    if (canaries > 0 && (canary_runs > LONG_MAX / canaries || canaries * canary_runs < 8))
        return cli_error("--canaries %ld x --canary-runs %ld: need at least 8 canary trials", canaries, canary_runs);
    if (kappa_seen && pdp_sigma_seen) return cli_error("--kappa and --pdp-sigma: give one of them, not both");
    if ((kappa_seen || pdp_sigma_seen || lambda != 0) && job->algo != DPT_AUDIT_PDPSGD)
        return cli_error("--kappa/--pdp-sigma/--lambda are options of --algo pdp-sgd, not of --algo %s", algo);
    if (prop_sigma != 0 && job->algo != DPT_AUDIT_PROPNOISE)
        return cli_error("--prop-sigma is an option of --algo proportional-noise, not of --algo %s", algo);
    /* a value given for another algorithm would be silently ignored: refuse it */
    if ((sigma_seen || clip_seen || delta_seen) && job->algo != DPT_AUDIT_DPSGD)
        return cli_error("--%s is an option of --algo dpsgd, not of --algo %s (it would be ignored)",
                         sigma_seen ? "sigma" : clip_seen ? "clip" : "delta", algo);
    if (job->algo == DPT_AUDIT_PROPNOISE && !(prop_sigma > 0)) return cli_error("--algo proportional-noise needs --prop-sigma > 0");
    if (dpt_optim_parse(optimizer, &job->cfg.optim.kind) != DPT_OK) return cli_error("--optimizer: %s", dpt_last_error());
    job->cfg.optim = dpt_optim_defaults(job->cfg.optim.kind);
    if (lr_seen || job->cfg.optim.kind == DPT_OPT_ADAM) job->cfg.optim.lr = lr;
    if (!(job->cfg.optim.lr > 0)) return cli_error("--lr must be > 0, got %g", lr);
    job->cfg.model_spec = model;
    job->cfg.epochs = (uint64_t)epochs;
    job->cfg.threads = (int)threads;
    job->cfg.delta = delta;
    job->cfg.batch_size = (size_t)batch;
    /* --pdp-sigma: kappa = (lr S)^2, the paper's form for plain SGD; our mapping for Adam */
    job->pdp.kappa = pdp_sigma_seen ? 0.0 : kappa;
    job->pdp.sigma = pdp_sigma_seen ? pdp_sigma : 0.0;
    if (pdp_sigma_seen && job->cfg.optim.kind != DPT_OPT_SGD)
        fprintf(stderr, "dptrain audit: --pdp-sigma with --optimizer %s: kappa = (lr * S)^2 = %g is OUR mapping of its lr; "
                        "the paper derives kappa = (eta sigma)^2 for plain SGD only (docs/pdpsgd.md)\n",
                optimizer, dpt_pdp_kappa(job->cfg.optim.lr, pdp_sigma));
    job->pdp.lambda = lambda;
    job->prop.sigma = prop_sigma;
    job->dpsgd.sigma = sigma;
    job->dpsgd.clip = clip;
    ac.shadows = (size_t)shadows;
    ac.jobs = (int)jobs;
    ac.bootstrap = (size_t)boot;
    ac.alpha = alpha;
    ac.seed = seed;
    ac.canaries = (size_t)canaries;
    ac.canary_runs = (size_t)canary_runs;
    ac.one_run_guesses = (size_t)guesses;
    /* constructor checks (named flags) before any data is loaded */
    {
        dpt_algo *probe = NULL;
        dpt_status s = job->algo == DPT_AUDIT_DPSGD ? dpt_algo_dpsgd_new(&job->dpsgd, &probe)
                       : job->algo == DPT_AUDIT_PDPSGD ? dpt_algo_pdpsgd_new(&job->pdp, &probe)
                       : job->algo == DPT_AUDIT_PROPNOISE ? dpt_algo_propnoise_new(&job->prop, &probe)
                                                          : dpt_algo_sgd_new(&probe);
        if (probe) probe->free(probe);
        if (s != DPT_OK) return cli_error("%s", dpt_last_error());
    }
    if (job->algo == DPT_AUDIT_DPSGD && !(delta > 0 && delta < 1)) return cli_error("--delta must be in (0, 1), got %g", delta);

    if (ckpt && canaries > 0) return cli_error("--canaries: a canary audit trains its own models; not with --checkpoint");
    cli_data_opts dopts = {.dataset = dataset, .data_dir = data_dir, .normalize = normalize, .classes = classes,
                           .max_train = population, .max_test = max_test};
    /* DP-SGD models: no statistic of the population outside their epsilon (docs/data.md) */
    dopts.private_ = job->algo == DPT_AUDIT_DPSGD;
    char *ck_spec = NULL, *ck_state = NULL, *ck_run = NULL;
    cJSON *ck_root = NULL;
    if (!ckpt && (rc = cli_norm_check(&dopts)) != 0) return rc;
    if (ckpt) {
        /* the checkpoint's own data choices: the same training set and normalization */
        dpt_status ps = dpt_checkpoint_peek(ckpt, &ck_spec, &ck_state);
        if (ps != DPT_OK) return cli_refuse(ps, "--checkpoint");
        ck_root = cJSON_Parse(ck_state);
        const cJSON *run = ck_root ? cJSON_GetObjectItemCaseSensitive(ck_root, "run") : NULL;
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(run, "dataset"), *dd = cJSON_GetObjectItemCaseSensitive(run, "data_dir");
        const cJSON *cl = cJSON_GetObjectItemCaseSensitive(run, "classes"), *nm = cJSON_GetObjectItemCaseSensitive(run, "normalize");
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(run, "max_train");
        /* a count: finite, integral and in range before the conversion to long */
        if (!cJSON_IsString(ds) || !cJSON_IsString(dd) || !cJSON_IsString(cl) || !cJSON_IsString(nm) || !cJSON_IsNumber(mt) ||
            !(mt->valuedouble >= 0 && mt->valuedouble <= 9007199254740992.0 && floor(mt->valuedouble) == mt->valuedouble)) {
            free(ck_spec), free(ck_state), cJSON_Delete(ck_root);
            return cli_error("--checkpoint %s: no record of its training data (dataset, normalization)", ckpt);
        }
        long ck_targets = 0;
        if (cli_run_targets(run, &ck_targets) != DPT_OK || ck_targets) {
            free(ck_spec), free(ck_state), cJSON_Delete(ck_root);
            return cli_error("--checkpoint %s: a regression run (--targets); the membership-inference audit scores "
                             "classifiers only", ckpt);
        }
        dopts.dataset = dataset = ds->valuestring;
        dopts.data_dir = data_dir_seen ? data_dir : dd->valuestring;
        dopts.classes = *cl->valuestring ? cl->valuestring : NULL;
        dopts.normalize = nm->valuestring;
        dopts.max_train = (long)mt->valuedouble;
        /* its stored statistics, not a new fit (a DP fit would draw new noise) */
        dopts.private_ = 0;
        dopts.reuse_run = ck_run = cJSON_PrintUnformatted(run);
        if (!model_seen) job->cfg.model_spec = model = ck_spec;
        if (pop_seen) ac.max_pairs = (size_t)population / 2;
    }
    dpt_dataset pop, test;
    memset(&pop, 0, sizeof pop);
    memset(&test, 0, sizeof test);
    char *run_json = NULL;
    dpt_model *ck_model = NULL;
    dpt_audit_result res;
    memset(&res, 0, sizeof res);
    int code = 0;
    dpt_status ls = cli_load_run_data(&dopts, &pop, &test, &run_json, NULL);
    free(ck_run);
    ck_run = NULL;
    free(run_json);
    run_json = NULL;
    if (ls != DPT_OK) {
        code = cli_refuse(ls, ckpt ? "--checkpoint data" : "--dataset");
        goto done;
    }
    if (ckpt) { /* a DP-MAC run with DP-PCA: its members and non-members as its model saw them */
        const cJSON *pca = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ck_root, "run"), "pca");
        if (pca && ((ls = cli_apply_recorded_pca(pca, &pop)) != DPT_OK ||
                    (ls = cli_apply_recorded_pca(pca, &test)) != DPT_OK)) {
            code = cli_refuse(ls, "--checkpoint data");
            goto done;
        }
    }
    if (!ckpt && (size_t)population > pop.n && !quiet)
        fprintf(stderr, "dptrain: note: --population %ld: the training split has %zu examples; the audit uses them "
                        "all\n", population, pop.n);
    if (ckpt) {
        if ((ls = dpt_model_new(ck_spec, 256, (int)threads, &ck_model)) != DPT_OK ||
            (ls = dpt_checkpoint_load(ckpt, ck_model, NULL, NULL)) != DPT_OK) {
            code = cli_refuse(ls, "--checkpoint");
            goto done;
        }
        ac.target = ck_model;
    }
    dpt_threads_set_blas((int)threads);
    audit_view view = {quiet, dataset, model, algo, epochs, shadows};
    ac.progress = progress;
    ac.user = &view;
    dpt_status as = dpt_audit_run(&ac, &pop, &test, &res);
    if (as != DPT_OK) {
        /* a value the library refuses (--model, a --batch-size above the members, ...) is a
         * usage error, as in train, even when it is found as the first model is made */
        code = as == DPT_EINVAL ? cli_refuse(as, "audit") : cli_fail("audit");
        goto done;
    }
    print_results(&ac, &res, ckpt, algo, sigma, delta);
    /* created only now: a refused command line or a failed audit leaves no directory */
    if (cli_make_dirs(out) != 0) {
        code = cli_failf("--out %s: cannot create directory: %s", out, strerror(errno));
        goto done;
    }
    int plotted = 0;
    code = write_outputs(out, res.attack, res.n_attacks, ac.bootstrap, !no_plot, &plotted);
    if (!code) {
        write_summary(out, &res, ckpt, algo, job->algo == DPT_AUDIT_DPSGD, delta);
        printf("wrote %s/audit.csv, %s/roc.csv, %s/summary.json%s%s%s\n", out, out, out, plotted ? ", " : "",
               plotted ? out : "", plotted ? "/roc.png" : "");
    }
done:
    dpt_audit_result_free(&res);
    dpt_model_free(ck_model);
    free(ck_spec), free(ck_state), cJSON_Delete(ck_root);
    dpt_dataset_free(&pop);
    dpt_dataset_free(&test);
    return code;
}
