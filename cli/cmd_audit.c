/* dptrain audit: membership-inference audit of a training configuration. Trains a target
 * model on a random half of a population (members; the other half are non-members),
 * S shadow models on random halves (LiRA), runs the loss-threshold attack and LiRA
 * (online and offline), and reports ROC AUC and TPR at 0.1% / 1% FPR with bootstrap
 * intervals; optionally a canary audit turning the attack on m mislabelled canaries into
 * an epsilon lower bound (Clopper-Pearson). Writes OUT/audit.csv, OUT/roc.csv and
 * OUT/roc.png (gnuplot). Every model is trained in memory through the library. */
#include <dptrain/audit.h>
#include <dptrain/io.h>

#include <cjson/cJSON.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    "Writes OUT/audit.csv (one row per attack), OUT/roc.csv and OUT/roc.png.\n"
    "With --checkpoint FILE the target is that trained model: members are examples of its\n"
    "training set, non-members test examples (balanced); give the training flags it was\n"
    "trained with (--algo, --lr, --epochs, ...) so the LiRA shadows match it.\n"
    "An audit measures leakage from below; it never proves privacy.";

typedef struct {
    const char *name;
    double *in, *out;
    size_t n_in, n_out;
    dpt_audit_summary s;
} attack;

static int make_dirs(const char *path) {
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(buf, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

static void split(const double *score, const uint8_t *member, size_t n, attack *a) {
    a->n_in = a->n_out = 0;
    for (size_t i = 0; i < n; i++) {
        if (member[i]) a->in[a->n_in++] = score[i];
        else a->out[a->n_out++] = score[i];
    }
}

static int write_outputs(const char *out, attack *A, size_t na, int plot) {
    char path[1100];
    snprintf(path, sizeof path, "%s/audit.csv", out);
    FILE *f = fopen(path, "w");
    if (!f) return cli_error("--out %s: cannot write audit.csv: %s", out, strerror(errno));
    fprintf(f, "attack,members,nonmembers,auc,auc_lo,auc_hi,tpr_at_0.1%%fpr,lo,hi,tpr_at_1%%fpr,lo,hi\n");
    for (size_t k = 0; k < na; k++) {
        const dpt_audit_summary *s = &A[k].s;
        fprintf(f, "%s,%zu,%zu,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f\n", A[k].name, A[k].n_in, A[k].n_out, s->auc,
                s->auc_lo, s->auc_hi, s->tpr[0], s->tpr_lo[0], s->tpr_hi[0], s->tpr[1], s->tpr_lo[1], s->tpr_hi[1]);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/roc.csv", out);
    f = fopen(path, "w");
    if (!f) return cli_error("--out %s: cannot write roc.csv: %s", out, strerror(errno));
    fprintf(f, "attack,fpr,tpr\n");
    for (size_t k = 0; k < na; k++) {
        size_t n = A[k].n_in + A[k].n_out + 1, m = 0;
        double *fp = malloc(n * sizeof *fp), *tp = malloc(n * sizeof *tp);
        if (fp && tp && dpt_audit_roc(A[k].in, A[k].n_in, A[k].out, A[k].n_out, fp, tp, &m) == DPT_OK)
            for (size_t i = 0; i < m; i++) fprintf(f, "%s,%.8g,%.8g\n", A[k].name, fp[i], tp[i]);
        free(fp), free(tp);
    }
    fclose(f);
    if (!plot) return 0;
    snprintf(path, sizeof path, "%s/roc.gp", out);
    f = fopen(path, "w");
    if (!f) return cli_error("--out %s: cannot write roc.gp: %s", out, strerror(errno));
    fprintf(f, "set terminal pngcairo size 800,600\nset output '%s/roc.png'\nset datafile separator ','\n"
               "set logscale xy\nset xrange [1e-3:1]\nset yrange [1e-3:1]\nset key bottom right\n"
               "set xlabel 'false positive rate'\nset ylabel 'true positive rate'\nset title 'Membership inference ROC'\n"
               "plot x title 'chance' lw 1 dt 2", out);
    for (size_t k = 0; k < na; k++)
        fprintf(f, ", '%s/roc.csv' using (strcol(1) eq '%s' ? $2 : NaN):3 with lines lw 2 title '%s (AUC %.3f)'", out,
                A[k].name, A[k].name, A[k].s.auc);
    fprintf(f, "\n");
    fclose(f);
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "gnuplot '%s/roc.gp' 2>/dev/null", out);
    if (system(cmd) != 0) {
        /* pngcairo may be missing from gnuplot-nox: retry with the plain png terminal */
        snprintf(cmd, sizeof cmd, "sed -i 's/pngcairo/png/' '%s/roc.gp' && gnuplot '%s/roc.gp'", out, out);
        if (system(cmd) != 0) fprintf(stderr, "dptrain: warning: gnuplot failed; %s/roc.png not written\n", out);
    }
    return 0;
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
    int data_dir_seen = 0;
    cli_option opts[] = {
        {"--dataset", CLI_STR, &dataset, "NAME", "mnist | fashion-mnist | usps | usps-pooled (zip.train + zip.test pooled, fixed permutation, 5000 train / 4298 test) | cifar10 | csv:PATH[,TEST]", NULL},
        {"--checkpoint", CLI_STR, &ckpt, "FILE", "audit this trained checkpoint (members: its training set; non-members: "
                                                "test examples; shadows use the flags below)", NULL},
        {"--data-dir", CLI_STR, &data_dir, "DIR", "directory holding <dataset>/ folders", &data_dir_seen},
        {"--classes", CLI_STR, &classes, "LIST", "keep only these labels", NULL},
        {"--normalize", CLI_STR, &normalize, "MODE", "auto (dpsgd: public, or none for csv; others: scalar) | none | public | scalar | channel | feature (not with dpsgd) | affine:SHIFT:SCALE (docs/data.md)", NULL},
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
        {"--sigma", CLI_DOUBLE, &sigma, "X", "dpsgd: noise multiplier", NULL},
        {"--clip", CLI_DOUBLE, &clip, "C", "dpsgd: clipping norm", NULL},
        {"--delta", CLI_DOUBLE, &delta, "D", "dpsgd: delta of the accountant's epsilon; canary bound's delta", NULL},
        {"--kappa", CLI_DOUBLE, &kappa, "K", "pdp-sgd: proportional coefficient", &kappa_seen},
        {"--pdp-sigma", CLI_DOUBLE, &pdp_sigma, "S", "pdp-sgd: kappa = (lr S)^2 instead of --kappa", &pdp_sigma_seen},
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
    dpt_audit_job job;
    memset(&job, 0, sizeof job);
    job.cfg = dpt_train_config_defaults();
    if (!strcmp(algo, "sgd")) job.algo = DPT_AUDIT_SGD;
    else if (!strcmp(algo, "dpsgd")) job.algo = DPT_AUDIT_DPSGD;
    else if (!strcmp(algo, "pdp-sgd")) job.algo = DPT_AUDIT_PDPSGD;
    else if (!strcmp(algo, "proportional-noise")) job.algo = DPT_AUDIT_PROPNOISE;
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
    if (canaries > 0 && canaries * canary_runs < 8)
        return cli_error("--canaries %ld x --canary-runs %ld: need at least 8 canary trials", canaries, canary_runs);
    if (kappa_seen && pdp_sigma_seen) return cli_error("--kappa and --pdp-sigma: give one of them, not both");
    if ((kappa_seen || pdp_sigma_seen || lambda != 0) && job.algo != DPT_AUDIT_PDPSGD)
        return cli_error("--kappa/--pdp-sigma/--lambda are options of --algo pdp-sgd, not of --algo %s", algo);
    if (prop_sigma != 0 && job.algo != DPT_AUDIT_PROPNOISE)
        return cli_error("--prop-sigma is an option of --algo proportional-noise, not of --algo %s", algo);
    if (job.algo == DPT_AUDIT_PROPNOISE && !(prop_sigma > 0)) return cli_error("--algo proportional-noise needs --prop-sigma > 0");
    if (dpt_optim_parse(optimizer, &job.cfg.optim.kind) != DPT_OK) return cli_error("--optimizer: %s", dpt_last_error());
    job.cfg.optim = dpt_optim_defaults(job.cfg.optim.kind);
    if (lr_seen || job.cfg.optim.kind == DPT_OPT_ADAM) job.cfg.optim.lr = lr;
    if (!(job.cfg.optim.lr > 0)) return cli_error("--lr must be > 0, got %g", lr);
    job.cfg.model_spec = model;
    job.cfg.epochs = (uint64_t)epochs;
    job.cfg.threads = (int)threads;
    job.cfg.delta = delta;
    job.cfg.batch_size = (size_t)batch;
    job.pdp.kappa = pdp_sigma_seen ? dpt_pdp_kappa(job.cfg.optim.lr, pdp_sigma) : kappa;
    job.pdp.lambda = lambda;
    job.prop.sigma = prop_sigma;
    job.dpsgd = dpt_dpsgd_config_defaults();
    job.dpsgd.sigma = sigma;
    job.dpsgd.clip = clip;
    /* constructor checks (named flags) before any data is loaded */
    {
        dpt_algo *probe = NULL;
        dpt_status s = job.algo == DPT_AUDIT_DPSGD ? dpt_algo_dpsgd_new(&job.dpsgd, &probe)
                       : job.algo == DPT_AUDIT_PDPSGD ? dpt_algo_pdpsgd_new(&job.pdp, &probe)
                       : job.algo == DPT_AUDIT_PROPNOISE ? dpt_algo_propnoise_new(&job.prop, &probe)
                                                         : dpt_algo_sgd_new(&probe);
        if (probe) probe->free(probe);
        if (s != DPT_OK) return cli_error("%s", dpt_last_error());
    }
    if (job.algo == DPT_AUDIT_DPSGD && !(delta > 0 && delta < 1)) return cli_error("--delta must be in (0, 1), got %g", delta);

    if (ckpt && canaries > 0) return cli_error("--canaries: a canary audit trains its own models; not with --checkpoint");
    cli_data_opts dopts = {.dataset = dataset, .data_dir = data_dir, .normalize = normalize, .classes = classes,
                           .max_train = population, .max_test = max_test};
    /* DP-SGD models: no statistic of the population outside their epsilon (docs/data.md) */
    dopts.private_ = job.algo == DPT_AUDIT_DPSGD;
    char *ck_spec = NULL, *ck_state = NULL, *ck_run = NULL;
    cJSON *ck_root = NULL;
    if (!ckpt && (rc = cli_norm_check(&dopts)) != 0) return rc;
    if (ckpt) {
        /* the checkpoint's own data choices: the same training set and normalization */
        if (dpt_checkpoint_peek(ckpt, &ck_spec, &ck_state) != DPT_OK) return cli_fail("--checkpoint");
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
        dopts.dataset = dataset = ds->valuestring;
        dopts.data_dir = data_dir_seen ? data_dir : dd->valuestring;
        dopts.classes = *cl->valuestring ? cl->valuestring : NULL;
        dopts.normalize = nm->valuestring;
        dopts.max_train = (long)mt->valuedouble;
        /* its stored statistics, not a new fit (a DP fit would draw new noise) */
        dopts.private_ = 0;
        dopts.reuse_run = ck_run = cJSON_PrintUnformatted(run);
        if (!model_seen) job.cfg.model_spec = model = ck_spec;
    }
    dpt_dataset pop, test, ck_train;
    memset(&pop, 0, sizeof pop);
    memset(&test, 0, sizeof test);
    memset(&ck_train, 0, sizeof ck_train);
    char *run_json = NULL;
    dpt_status ls = cli_load_run_data(&dopts, ckpt ? &ck_train : &pop, &test, &run_json, NULL);
    free(ck_run);
    if (ls != DPT_OK) {
        int r = cli_fail(ckpt ? "--checkpoint data" : "--dataset");
        dpt_dataset_free(&pop);
        dpt_dataset_free(&test);
        dpt_dataset_free(&ck_train);
        free(ck_spec), free(ck_state), cJSON_Delete(ck_root);
        return r == 1 ? 2 : r;
    }
    free(run_json);
    dpt_model *ck_model = NULL;
    if (ckpt) {
        /* balanced population: n random training examples (members) + n random test examples */
        size_t n = ck_train.n < test.n ? ck_train.n : test.n;
        if (pop_seen && (size_t)population / 2 < n) n = (size_t)population / 2;
        dpt_rng pr;
        uint32_t *pi = malloc(ck_train.n * sizeof *pi), *po = malloc(test.n * sizeof *po);
        dpt_status st = (pi && po && n >= 4) ? dpt_rng_init(&pr, seed, DPT_STREAM_DATA) : DPT_EINVAL;
        if (st == DPT_OK) {
            for (size_t i = 0; i < ck_train.n; i++) pi[i] = (uint32_t)i;
            for (size_t i = 0; i < test.n; i++) po[i] = (uint32_t)i;
            for (size_t i = 0; i < n; i++) {
                size_t j = i + (size_t)dpt_rng_below(&pr, ck_train.n - i), k = i + (size_t)dpt_rng_below(&pr, test.n - i);
                uint32_t t1 = pi[i]; pi[i] = pi[j], pi[j] = t1;
                uint32_t t2 = po[i]; po[i] = po[k], po[k] = t2;
            }
            dpt_rng_free(&pr);
            pop = ck_train;
            pop.x = dpt_alloc(2 * n * ck_train.dim, sizeof(float), "audit population");
            pop.y = dpt_alloc(2 * n, sizeof(int32_t), "audit population labels");
            pop.n = 2 * n;
            if (!pop.x || !pop.y) st = DPT_ENOMEM;
            else {
                dpt_dataset_gather(&ck_train, pi, n, pop.x, pop.y);
                dpt_dataset_gather(&test, po, n, pop.x + n * pop.dim, pop.y + n);
            }
        }
        free(pi), free(po);
        if (st == DPT_OK && (st = dpt_model_new(ck_spec, 256, (int)threads, &ck_model)) == DPT_OK)
            st = dpt_checkpoint_load(ckpt, ck_model, NULL, NULL);
        dpt_dataset_free(&ck_train);
        free(ck_state), cJSON_Delete(ck_root);
        ck_state = NULL, ck_root = NULL;
        if (st != DPT_OK) {
            int r = n < 4 ? cli_error("--checkpoint %s: too few training/test examples to audit", ckpt) : cli_fail("--checkpoint");
            dpt_model_free(ck_model);
            dpt_dataset_free(&pop);
            dpt_dataset_free(&test);
            free(ck_spec);
            return r;
        }
    }
    dpt_threads_set_blas((int)threads);
    size_t N = pop.n, S = (size_t)shadows;
    int code = 0;
    uint8_t *member = calloc(N, 1), *masks = calloc(S ? S * N : 1, 1);
    double *loss = malloc(N * sizeof *loss), *phi = malloc(N * sizeof *phi), *phi_sh = malloc((S ? S : 1) * N * sizeof *phi_sh);
    double *score = malloc(N * sizeof *score), *bufs = malloc(8 * N * sizeof *bufs);
    attack A[3];
    size_t na = 0;
    dpt_rng r;
    int rng_live = 0;
    if (!member || !masks || !loss || !phi || !phi_sh || !score || !bufs) {
        code = cli_error("out of memory");
        goto done;
    }
    if (make_dirs(out) != 0) {
        code = cli_error("--out %s: cannot create directory: %s", out, strerror(errno));
        goto done;
    }
    if (dpt_rng_init(&r, seed, DPT_STREAM_AUX) != DPT_OK) {
        code = cli_fail("rng");
        goto done;
    }
    rng_live = 1;
    /* members: a uniformly random half (exactly N/2); with --checkpoint the first half */
    if (ckpt) {
        for (size_t i = 0; i < N / 2; i++) member[i] = 1;
    } else {
        uint32_t *perm = malloc(N * sizeof *perm);
        if (!perm) {
            code = cli_error("out of memory");
            goto done;
        }
        for (size_t i = 0; i < N; i++) perm[i] = (uint32_t)i;
        for (size_t i = N - 1; i > 0; i--) {
            size_t j = (size_t)dpt_rng_below(&r, i + 1);
            uint32_t tmp = perm[i];
            perm[i] = perm[j], perm[j] = tmp;
        }
        for (size_t i = 0; i < N / 2; i++) member[perm[i]] = 1;
        free(perm);
    }
    size_t n_mem = N / 2;
    if (job.algo == DPT_AUDIT_DPSGD) {
        job.cfg.sampler = DPT_SAMPLER_POISSON;
        job.cfg.sample_rate = (double)batch / (double)n_mem;
        if (!(job.cfg.sample_rate <= 1)) {
            code = cli_error("--batch-size %ld: larger than the %zu members", batch, n_mem);
            goto done;
        }
        if (delta >= 1.0 / (double)n_mem) {
            code = cli_error("--delta %g >= 1/members = %g", delta, 1.0 / (double)n_mem);
            goto done;
        }
    } else if ((size_t)batch > n_mem) {
        code = cli_error("--batch-size %ld: larger than the %zu members", batch, n_mem);
        goto done;
    }
    if (!quiet)
        fprintf(stderr, "dptrain audit: %s, %zu examples (%zu members), model %s, algo %s, %ld epochs, %zu shadows\n",
                dataset, N, n_mem, model, algo, epochs, S);
    dpt_audit_run_info info;
    double t0 = dpt_now();
    if (ckpt) {
        info.epsilon = NAN;
        info.wall_s = 0;
        double tl;
        if (dpt_audit_scores(ck_model, &pop, NULL, N, loss, phi) != DPT_OK ||
            dpt_evaluate(ck_model, DPT_LOSS_SOFTMAX_CE, &test, &tl, &info.test_accuracy) != DPT_OK) {
            code = cli_fail("--checkpoint");
            goto done;
        }
    } else if (dpt_audit_train_and_score(&job, &pop, member, &test, seed, loss, phi, &info) != DPT_OK) {
        code = cli_fail("target model");
        goto done;
    }
    double t_target = dpt_now() - t0;
    if (!quiet) fprintf(stderr, "target: test accuracy %.2f%% (%.1fs)\n", 100 * info.test_accuracy, t_target);
    for (size_t k = 0; k < 3; k++) A[k].in = bufs + 2 * k * N, A[k].out = bufs + (2 * k + 1) * N;
    for (size_t i = 0; i < N; i++) score[i] = -loss[i];
    A[0].name = "loss";
    split(score, member, N, &A[0]);
    na = 1;
    double t_shadows = 0;
    if (S) {
        t0 = dpt_now();
        /* every shadow's half is drawn first, so the result does not depend on --jobs */
        for (size_t s = 0; s < S; s++)
            for (size_t i = 0; i < N; i++) masks[s * N + i] = (uint8_t)dpt_rng_bernoulli(&r, 0.5);
        dpt_audit_job sj = job;
        if (jobs > 1) sj.cfg.threads = 1; /* parallel over models, one thread each */
        int failed = 0;
        size_t done_count = 0;
        char err[512] = "";
#pragma omp parallel for num_threads((int)jobs) schedule(dynamic, 1)
        for (long s = 0; s < (long)S; s++) {
            int skip;
#pragma omp atomic read
            skip = failed;
            if (skip) continue;
            /* the shared population is read, never copied per thread except the subset */
            dpt_status st = dpt_audit_train_and_score(&sj, &pop, masks + (size_t)s * N, NULL, seed + 1 + (uint64_t)s,
                                                      NULL, phi_sh + (size_t)s * N, NULL);
#pragma omp critical(audit_shadow)
            {
                if (st != DPT_OK && !failed) {
                    failed = 1;
                    snprintf(err, sizeof err, "%s", dpt_last_error());
                }
                done_count++;
                if (!quiet && cli_stderr_is_tty())
                    fprintf(stderr, "\rshadow %zu/%zu (%.1fs)", done_count, S, dpt_now() - t0);
            }
        }
        if (failed) {
            code = cli_error("shadow model: %s", err);
            goto done;
        }
        t_shadows = dpt_now() - t0;
        if (!quiet) fprintf(stderr, "%s%zu shadows trained (%.1fs)\n", cli_stderr_is_tty() ? "\n" : "", S, t_shadows);
        const char *names[2] = {"lira-offline", "lira-online"};
        for (int online = 0; online < 2; online++) {
            if (dpt_audit_lira(phi_sh, masks, S, N, phi, online, score) != DPT_OK) {
                code = cli_fail("lira");
                goto done;
            }
            A[na].name = names[online];
            split(score, member, N, &A[na]);
            na++;
        }
    }
    for (size_t k = 0; k < na; k++)
        if (dpt_audit_summarize(A[k].in, A[k].n_in, A[k].out, A[k].n_out, (size_t)boot, alpha, seed + 7, &A[k].s) != DPT_OK) {
            code = cli_fail("summary");
            goto done;
        }
    printf("membership inference: %zu members / %zu non-members, %zu shadows, %.0f%% bootstrap intervals (%ld resamples)\n",
           A[0].n_in, A[0].n_out, S, 100 * (1 - alpha), boot);
    printf("%-14s %-24s %-28s %-28s\n", "attack", "AUC", "TPR at 0.1% FPR", "TPR at 1% FPR");
    for (size_t k = 0; k < na; k++) {
        const dpt_audit_summary *s = &A[k].s;
        printf("%-14s %.3f [%.3f, %.3f]     %.4f [%.4f, %.4f]     %.4f [%.4f, %.4f]\n", A[k].name, s->auc, s->auc_lo,
               s->auc_hi, s->tpr[0], s->tpr_lo[0], s->tpr_hi[0], s->tpr[1], s->tpr_lo[1], s->tpr_hi[1]);
    }
    printf("target test accuracy %.2f%%; training time target %.2fs, shadows %.2fs per model\n", 100 * info.test_accuracy,
           t_target, S ? t_shadows / (double)S : 0.0);
    if (ckpt)
        printf("target: checkpoint %s (its privacy statement, if any, is in its run directory); shadows: --algo %s\n",
               ckpt, algo);
    else if (job.algo == DPT_AUDIT_DPSGD)
        printf("privacy (accountant): epsilon %.4g (RDP) at delta %g for the target run (q %g, sigma %g)\n", info.epsilon,
               delta, job.cfg.sample_rate, sigma);
    else
        printf("privacy: no formal DP guarantee for --algo %s (no accountant, no epsilon); the audit above is what it leaks "
               "to these attacks\n", algo);
    double eps_lb = NAN, eps_acct_canary = NAN, eps_one_run = NAN;
    if (canaries > 0) {
        /* canaries: test examples (never in the population) with a wrong label */
        size_t M = (size_t)canaries, R = (size_t)canary_runs;
        if (M > test.n) {
            code = cli_error("--canaries %zu: only %zu test examples to make canaries from", M, test.n);
            goto done;
        }
        dpt_dataset cp = pop;
        cp.n = N + M;
        cp.x = dpt_alloc(cp.n * pop.dim, sizeof(float), "canary population");
        cp.y = dpt_alloc(cp.n, sizeof(int32_t), "canary labels");
        uint8_t *cm = calloc(cp.n, 1);
        double *cl = malloc(cp.n * sizeof *cl), *cin = malloc(M * R * sizeof *cin), *cout = malloc(M * R * sizeof *cout);
        size_t ni = 0, no = 0;
        dpt_status st = (cp.x && cp.y && cm && cl && cin && cout) ? DPT_OK : DPT_ENOMEM;
        if (st == DPT_OK) {
            memcpy(cp.x, pop.x, N * pop.dim * sizeof(float));
            memcpy(cp.y, pop.y, N * sizeof(int32_t));
            for (size_t j = 0; j < M; j++) {
                memcpy(cp.x + (N + j) * pop.dim, test.x + j * test.dim, pop.dim * sizeof(float));
                int K = pop.n_classes;
                cp.y[N + j] = (int32_t)((test.y[j] + 1 + (int)dpt_rng_below(&r, (uint64_t)(K - 1))) % K);
            }
            for (size_t i = 0; i < N; i++) cm[i] = member[i];
        }
        t0 = dpt_now();
        for (size_t rr = 0; st == DPT_OK && rr < R; rr++) {
            for (size_t j = 0; j < M; j++) cm[N + j] = (uint8_t)dpt_rng_bernoulli(&r, 0.5);
            dpt_audit_run_info ci;
            st = dpt_audit_train_and_score(&job, &cp, cm, NULL, seed + 100003 + rr, cl, NULL, &ci);
            if (st != DPT_OK) break;
            eps_acct_canary = ci.epsilon;
            for (size_t j = 0; j < M; j++) {
                if (cm[N + j]) cin[ni++] = -cl[N + j];
                else cout[no++] = -cl[N + j];
            }
            if (!quiet && cli_stderr_is_tty()) fprintf(stderr, "\rcanary run %zu/%zu (%.1fs)", rr + 1, R, dpt_now() - t0);
        }
        if (!quiet) fprintf(stderr, "%s%zu canary runs trained (%.1fs)\n", cli_stderr_is_tty() ? "\n" : "", R, dpt_now() - t0);
        double thr = NAN;
        if (st == DPT_OK) st = dpt_audit_eps_from_scores(cin, ni, cout, no, job.algo == DPT_AUDIT_DPSGD ? delta : 0.0,
                                                         alpha, &eps_lb, &thr);
        if (st == DPT_OK) {
            printf("canary audit: %zu canaries x %zu runs (%zu in, %zu out), loss attack AUC %.3f: empirical epsilon "
                   "lower bound %.3f at %.0f%% confidence (delta %g)\n", M, R, ni, no, dpt_audit_auc(cin, ni, cout, no),
                   eps_lb, 100 * (1 - alpha), job.algo == DPT_AUDIT_DPSGD ? delta : 0.0);
            if (job.algo == DPT_AUDIT_DPSGD)
                printf("  accountant epsilon of a canary run: %.4g (the lower bound must not exceed it)\n", eps_acct_canary);
            if (M > 1)
                printf("  note: the %zu canaries of one run are not independent trials; the bound above treats them as "
                       "such (a heuristic, see docs/audit.md)\n", M);
            if (R == 1 && M >= 2) {
                /* Steinke, Nasr and Jagielski 2023: valid for one run with independent inclusion */
                size_t k = guesses > 0 ? (size_t)guesses : (M / 10 ? M / 10 : 1);
                double *all = malloc(M * sizeof *all);
                uint64_t gr = 0, gv = 0;
                double e1 = NAN;
                if (!all) st = DPT_ENOMEM;
                for (size_t j = 0; all && j < M; j++) all[j] = -cl[N + j];
                if (st == DPT_OK) st = dpt_audit_one_run_guess(all, cm + N, M, k, &gr, &gv);
                if (st == DPT_OK)
                    st = dpt_audit_one_run_eps(M, gr, gv, job.algo == DPT_AUDIT_DPSGD ? delta : 0.0, alpha, &e1);
                if (st == DPT_OK) {
                    printf("  one-run audit (Steinke et al. 2023): %" PRIu64 " of %" PRIu64 " guesses right: epsilon lower "
                           "bound %.3f at %.0f%% confidence (delta %g)\n", gv, gr, e1, 100 * (1 - alpha),
                           job.algo == DPT_AUDIT_DPSGD ? delta : 0.0);
                    eps_one_run = e1;
                }
                free(all);
            }
        }
        dpt_free(cp.x);
        dpt_free(cp.y);
        free(cm), free(cl), free(cin), free(cout);
        if (st != DPT_OK) {
            code = cli_fail("canary audit");
            goto done;
        }
    }
    code = write_outputs(out, A, na, !no_plot);
    if (!code) {
        char path[1100];
        snprintf(path, sizeof path, "%s/summary.json", out);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "{\"algo\": \"%s\", \"test_accuracy\": %.6f, \"members\": %zu, \"shadows\": %zu", algo,
                    info.test_accuracy, A[0].n_in, S);
            for (size_t k = 0; k < na; k++)
                fprintf(f, ", \"%s_auc\": %.6f, \"%s_tpr_0.1%%\": %.6f, \"%s_tpr_1%%\": %.6f", A[k].name, A[k].s.auc,
                        A[k].name, A[k].s.tpr[0], A[k].name, A[k].s.tpr[1]);
            if (ckpt) fprintf(f, ", \"checkpoint\": \"%s\"", ckpt);
            else if (job.algo == DPT_AUDIT_DPSGD) fprintf(f, ", \"epsilon\": %.6f, \"delta\": %g", info.epsilon, delta);
            else fprintf(f, ", \"privacy\": \"no formal DP guarantee\"");
            if (canaries > 0) fprintf(f, ", \"canary_epsilon_lower_bound\": %.6f", eps_lb);
            if (isfinite(eps_one_run)) fprintf(f, ", \"one_run_epsilon_lower_bound\": %.6f", eps_one_run);
            fprintf(f, ", \"target_train_s\": %.4f, \"target_train_loop_s\": %.4f, \"shadow_train_s\": %.4f}\n", t_target,
                    info.wall_s, S ? t_shadows / (double)S : 0.0);
            fclose(f);
        }
        printf("wrote %s/audit.csv, %s/roc.csv%s, %s/summary.json\n", out, out, no_plot ? "" : ", roc.png", out);
    }
done:
    dpt_model_free(ck_model);
    free(ck_spec);
    if (rng_live) dpt_rng_free(&r);
    free(member), free(masks), free(loss), free(phi), free(phi_sh), free(score), free(bufs);
    dpt_dataset_free(&pop);
    dpt_dataset_free(&test);
    return code;
}
