/* dptrain train: one training run from flags. The option table drives parsing and
 * --help, so every option is listed with its real default. */
#include <dptrain/accounting.h>
#include <dptrain/comm.h>
#include <dptrain/train.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "run_data.h"
#include "train_algos.h"

/* mkdir -p */
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

static const char *USAGE =
    "usage: dptrain train [options]\n\n"
    "Trains a model and writes the run directory (--out): checkpoint.safetensors (after\n"
    "every epoch) and metrics.jsonl (one JSON object per epoch: epoch, step, train_loss,\n"
    "test_loss, test_accuracy, lr, wall_s). Rerun the same command with --resume to\n"
    "continue an interrupted run exactly where its last checkpoint left it.\n"
    "Datasets live in DIR/<name>/ for --data-dir DIR (mnist, fashion-mnist, usps, cifar10);\n"
    "csv:PATH reads a numeric CSV with the label in the first column.";

/* common + privacy + every algorithm's flags, each group under its heading */
static cli_option *build_table(const cli_option *common, const cli_option *priv) {
    size_t n = 0, k = 0;
    for (const cli_option *o = common; o->name; o++) n++;
    for (const cli_option *o = priv; o->name; o++) n++;
    for (size_t i = 0; CLI_ALGOS[i]; i++) {
        n++;
        for (const cli_option *o = CLI_ALGOS[i]->opts; o && o->name; o++) n++;
    }
    cli_option *t = calloc(n + 1, sizeof *t);
    if (!t) return NULL;
    for (const cli_option *o = common; o->name; o++) t[k++] = *o;
    for (const cli_option *o = priv; o->name; o++) t[k++] = *o;
    static char heads[32][96];
    for (size_t i = 0; CLI_ALGOS[i]; i++) {
        if (!CLI_ALGOS[i]->opts || !CLI_ALGOS[i]->opts->name) continue;
        if (i < 32) { /* a heading per algorithm (the options are listed in any case) */
            snprintf(heads[i], sizeof heads[i], "Options of --algo %s", CLI_ALGOS[i]->name);
            t[k++] = (cli_option){"-", CLI_SECTION, NULL, NULL, heads[i], NULL};
        }
        for (const cli_option *o = CLI_ALGOS[i]->opts; o->name; o++) t[k++] = *o;
    }
    return t;
}

static int algo_has_option(const cli_algo *A, const char *name) {
    for (const cli_option *o = A->opts; o && o->name; o++)
        if (!strcmp(o->name, name)) return 1;
    return 0;
}

static char *usage_with_algos(void) {
    static char buf[4096];
    int w = snprintf(buf, sizeof buf, "%s\n\nAlgorithms (--algo):", USAGE);
    for (size_t i = 0; CLI_ALGOS[i] && w > 0 && (size_t)w < sizeof buf; i++)
        w += snprintf(buf + w, sizeof buf - (size_t)w, "\n  %-20s %s", CLI_ALGOS[i]->name, CLI_ALGOS[i]->summary);
    return buf;
}

int dpt_cmd_train(int argc, char **argv) {
    const char *dataset = "fashion-mnist", *data_dir = DPT_DEFAULT_DATA_DIR, *model = "mlp:784-128-64-32-10:gelu";
    const char *algo_name = "sgd", *optimizer = "adam", *schedule = "constant", *sampler = "shuffle";
    const char *loss = "ce", *init = "default", *normalize = "scalar", *out = "runs/latest", *classes = NULL;
    double lr = 1e-3, momentum = 0.0, weight_decay = 0.0, sample_rate = 0.0;
    long batch = 256, epochs = 5, threads = 0, max_train = 0, max_test = 0, shards = 0;
    uint64_t seed = 1, max_steps = 0;
    int resume = 0, quiet = 0, no_progress = 0, lr_seen = 0;
    int sampler_seen = 0, sample_rate_seen = 0, batch_seen = 0;
    cli_privacy_flags pf = {.sigma = 0.0, .clip = 1.0, .target_eps = 0.0, .delta = 1e-5, .clip_mode = "flat",
                            .secure_sampler = "table"};
    cli_option common[] = {
        {"--algo", CLI_STR, &algo_name, "NAME", "training algorithm (list above)", NULL},
        {"--dataset", CLI_STR, &dataset, "NAME", "mnist | fashion-mnist | usps | usps-pooled (zip.train + zip.test pooled, fixed permutation, 5000 train / 4298 test) | cifar10 | csv:PATH[,TEST]", NULL},
        {"--data-dir", CLI_STR, &data_dir, "DIR", "directory holding <dataset>/ folders", NULL},
        {"--classes", CLI_STR, &classes, "LIST", "keep only these labels, relabelled 0..k-1 (e.g. 0,1)", NULL},
        {"--max-train", CLI_LONG, &max_train, "N", "use the first N training examples (0 = all)", NULL},
        {"--max-test", CLI_LONG, &max_test, "N", "use the first N test examples (0 = all)", NULL},
        {"--normalize", CLI_STR, &normalize, "MODE", "none | scalar | channel (statistics of the training split) | affine:SHIFT:SCALE (fixed x <- (x - SHIFT) / SCALE, e.g. affine:-1:2 maps USPS [-1,1] pixels to [0,1])", NULL},
        {"--model", CLI_STR, &model, "SPEC", "model spec: mlp:784-1000-10:relu, cnn:1x28x28:conv16k5,relu,fc10, or mnist_cnn | mnist_cnn_tanh | resnet5 (see docs/nn.md)", NULL},
        {"--loss", CLI_STR, &loss, "NAME", "ce (softmax cross-entropy) | bce | mse", NULL},
        {"--init", CLI_STR, &init, "NAME", "default | lecun | he | xavier | ntk", NULL},
        {"--optimizer", CLI_STR, &optimizer, "NAME", "sgd | adam", NULL},
        {"--lr", CLI_DOUBLE, &lr, "X", "learning rate (> 0; sgd default 0.1)", &lr_seen},
        {"--momentum", CLI_DOUBLE, &momentum, "X", "SGD momentum in [0, 1)", NULL},
        {"--weight-decay", CLI_DOUBLE, &weight_decay, "X", "L2 coefficient added to the gradient", NULL},
        {"--lr-schedule", CLI_STR, &schedule, "S", "constant | step:GAMMA:EVERY | exp:GAMMA (per epoch)", NULL},
        {"--sampler", CLI_STR, &sampler, "NAME", "shuffle (fixed batches) | poisson | full | poisson-reject (dpsgd: poisson; dpulr: poisson-reject)", &sampler_seen},
        {"--batch-size", CLI_LONG, &batch, "B", "batch size (poisson: expected size, q = B/N)", &batch_seen},
        {"--sample-rate", CLI_DOUBLE, &sample_rate, "Q", "poisson sampling rate q in (0, 1] (overrides B/N)", &sample_rate_seen},
        {"--epochs", CLI_LONG, &epochs, "E", "epochs to train (poisson: an epoch is round(1/q) steps)", NULL},
        {"--max-steps", CLI_U64, &max_steps, "T", "stop after T steps in total (0 = no limit)", NULL},
        {"--seed", CLI_U64, &seed, "S", "seed of every random stream (init, sampling, noise)", NULL},
        {"--threads", CLI_LONG, &threads, "N", "threads (0 = all cores; under mpirun: per rank, cores / ranks on the host)", NULL},
        {"--shards", CLI_LONG, &shards, "S", "data-parallel shards: same result on any number of MPI ranks "
                                            "(0 = ranks; see docs/distributed.md)", NULL},
        {"--out", CLI_STR, &out, "DIR", "run directory", NULL},
        {"--resume", CLI_FLAG, &resume, NULL, "continue the run in --out from its checkpoint", NULL},
        {"--quiet", CLI_FLAG, &quiet, NULL, "print only the final summary", NULL},
        {"--no-progress", CLI_FLAG, &no_progress, NULL, "no progress bar even on a terminal", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    cli_option priv[] = {
        {"-", CLI_SECTION, NULL, NULL, "Privacy options (private algorithms)", NULL},
        {"--sigma", CLI_DOUBLE, &pf.sigma, "X", "noise multiplier (> 0; noise std sigma*C on the clipped sum)", &pf.sigma_seen},
        {"--clip", CLI_DOUBLE, &pf.clip, "C", "per-example clipping norm C (> 0)", NULL},
        {"--clip-mode", CLI_STR, &pf.clip_mode, "MODE", "flat | per-layer (C_l = C / sqrt(layers))", NULL},
        {"--target-epsilon", CLI_DOUBLE, &pf.target_eps, "E", "calibrate sigma to reach E after --epochs "
                                                              "(with --sigma: stop before exceeding E)", &pf.target_eps_seen},
        {"--delta", CLI_DOUBLE, &pf.delta, "D", "delta of the reported epsilon (< 1/N unless --force)", NULL},
        {"--secure", CLI_FLAG, &pf.secure, NULL, "OS-seeded noise and batches (never logged), discrete Gaussian "
                                                 "noise on a lattice", NULL},
        {"--secure-sampler", CLI_STR, &pf.secure_sampler, "S", "with --secure: table (fast; its tiny distance from "
                                                               "the exact noise is in the epsilon) | cks (exact)",
         &pf.secure_sampler_seen},
        {"--force", CLI_FLAG, &pf.force, NULL, "accept delta >= 1/N", NULL},
        {"--allow-ledger-mismatch", CLI_FLAG, &pf.allow_mismatch, NULL,
         "--resume: continue although q, sigma or data differ from the ledger (recorded in it)", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    cli_option *opts = build_table(common, priv);
    if (!opts) return cli_error("out of memory");
    int rc = cli_parse(argc, argv, 1, opts, usage_with_algos());
    free(opts);
    if (rc < 0) return 0;
    if (rc) return rc;

    const cli_algo *A = cli_algo_find(algo_name);
    if (!A) {
        char names[512];
        cli_algo_names(names, sizeof names);
        return cli_error("--algo: unknown algorithm '%s' (available: %s)", algo_name, names);
    }
    for (size_t i = 0; CLI_ALGOS[i]; i++) {
        if (CLI_ALGOS[i] == A) continue;
        /* a flag of another algorithm, unless the chosen one has a flag of that name too
         * (ulr and dpulr share their estimator flags) */
        for (const cli_option *o = CLI_ALGOS[i]->opts; o && o->name; o++) {
            if (o->kind == CLI_SECTION || algo_has_option(A, o->name)) continue;
            cli_option one[2] = {*o, {NULL, 0, NULL, NULL, NULL, NULL}};
            const char *g = cli_given(argc, argv, 1, one);
            if (g) return cli_error("%s is an option of --algo %s, not of --algo %s", g, CLI_ALGOS[i]->name, A->name);
        }
    }
    if (!A->uses_privacy_flags) {
        const char *g = cli_given(argc, argv, 1, priv);
        if (g) return cli_error("%s: --algo %s is not a differentially private algorithm (see --help for those that are)",
                                g, A->name);
    }
    if (pf.secure_sampler_seen && !pf.secure) return cli_error("--secure-sampler applies only with --secure");
    dpt_dgauss_method dgm;
    if (dpt_dgauss_method_parse(pf.secure_sampler, &dgm) != DPT_OK)
        return cli_error("--secure-sampler '%s': expected table or cks", pf.secure_sampler);
    dpt_train_config cfg = dpt_train_config_defaults();
    cli_algo_ctx ctx = {.cfg = &cfg, .priv = &pf, .sampler = sampler, .sampler_seen = sampler_seen,
                        .batch_seen = batch_seen, .sample_rate_seen = sample_rate_seen, .optimizer = optimizer,
                        .epochs = epochs, .quiet = quiet, .resume = resume, .out = out};
    if (A->check && (rc = A->check(&ctx)) != 0) return rc;
    sampler = ctx.sampler;
    if (dpt_optim_parse(optimizer, &cfg.optim.kind) != DPT_OK) return cli_error("--optimizer: %s", dpt_last_error());
    cfg.optim = dpt_optim_defaults(cfg.optim.kind);
    cfg.optim.lr = lr_seen ? lr : cfg.optim.lr;
    cfg.optim.momentum = momentum;
    cfg.optim.weight_decay = weight_decay;
    if (dpt_optim_validate(&cfg.optim) != DPT_OK) return cli_error("--lr/--momentum/--weight-decay: %s", dpt_last_error());
    if (dpt_schedule_parse(schedule, &cfg.schedule) != DPT_OK) return cli_error("--lr-schedule: %s", dpt_last_error());
    if (dpt_loss_parse(loss, &cfg.loss) != DPT_OK) return cli_error("--loss: %s", dpt_last_error());
    if (dpt_init_parse(init, &cfg.init) != DPT_OK) return cli_error("--init: %s", dpt_last_error());
    if (!strcmp(sampler, "shuffle")) cfg.sampler = DPT_SAMPLER_SHUFFLE;
    else if (!strcmp(sampler, "poisson")) cfg.sampler = DPT_SAMPLER_POISSON;
    else if (!strcmp(sampler, "full")) cfg.sampler = DPT_SAMPLER_FULL;
    else if (!strcmp(sampler, "poisson-reject") && !strcmp(A->name, "dpulr")) cfg.sampler = DPT_SAMPLER_POISSON_REJECT;
    else return cli_error("--sampler: expected shuffle|poisson|full (--algo dpulr: poisson-reject), got '%s'", sampler);
    if (batch < 1) return cli_error("--batch-size must be >= 1, got %ld", batch);
    if (epochs < 1) return cli_error("--epochs must be >= 1, got %ld", epochs);
    if (threads < 0 || threads > 1024) return cli_error("--threads must be in [0, 1024], got %ld", threads);
    if (shards < 0 || shards > 65536) return cli_error("--shards must be in [0, 65536], got %ld", shards);
    /* under mpirun the cores of a host are shared by its ranks */
    if (threads == 0 && dpt_comm_size() > 1) {
        const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        long local = ls ? atol(ls) : 1, cores = dpt_threads_resolve(0);
        threads = local > 0 && cores / local > 0 ? cores / local : 1;
    }
    /* under mpirun only rank 0 talks to the user and writes the run directory */
    int rank = dpt_comm_rank();
    if (rank != 0) {
        quiet = 1;
        ctx.quiet = 1;
        if (!freopen("/dev/null", "w", stdout)) return cli_error("cannot redirect the output of rank %d", rank);
    }
    if (max_train < 0 || max_test < 0) return cli_error("--max-train/--max-test must be >= 0");
    if (sample_rate_seen && !(sample_rate > 0.0 && sample_rate <= 1.0))
        return cli_error("--sample-rate must be in (0, 1], got %g", sample_rate);
    if (sample_rate_seen && cfg.sampler != DPT_SAMPLER_POISSON && cfg.sampler != DPT_SAMPLER_POISSON_REJECT)
        return cli_error("--sample-rate needs --sampler poisson (or poisson-reject)");
    if (!out || !*out) return cli_error("--out: empty directory name");

    cli_data_opts dopts = {dataset, data_dir, normalize, classes, max_train, max_test};
    dpt_dataset train, test;
    memset(&train, 0, sizeof train);
    memset(&test, 0, sizeof test);
    char *run_json = NULL;
    double t_load = dpt_now();
    if (cli_load_run_data(&dopts, &train, &test, &run_json) != DPT_OK) {
        int r = cli_fail("--dataset");
        dpt_dataset_free(&train);
        dpt_dataset_free(&test);
        return r == 1 ? 2 : r;
    }
    t_load = dpt_now() - t_load;
    dpt_algo *algo = NULL;
    dpt_trainer *t = NULL;
    int exit_code = 0;
    if (rank == 0 && make_dirs(out) != 0) {
        exit_code = cli_error("--out %s: cannot create directory: %s", out, strerror(errno));
        goto done;
    }
    cfg.model_spec = model;
    cfg.batch_size = (size_t)batch;
    cfg.sample_rate = sample_rate;
    cfg.epochs = (uint64_t)epochs;
    cfg.seed = seed;
    cfg.threads = (int)threads;
    cfg.out_dir = out;
    cfg.max_steps = max_steps;
    cfg.shards = (size_t)shards;
    cfg.quiet = quiet;
    cfg.progress = !no_progress && cli_stderr_is_tty();
    cfg.run_json = run_json;
    ctx.train = &train;
    ctx.test = &test;
    if ((exit_code = A->make(&ctx, &algo)) != 0) goto done;
    if (dpt_trainer_new(&cfg, &train, &test, algo, &t) != DPT_OK) {
        algo = NULL; /* owned (and freed) by dpt_trainer_new even on failure */
        exit_code = cli_fail("train");
        goto done;
    }
    algo = NULL;
    if (resume && dpt_trainer_resume(t) != DPT_OK) {
        exit_code = cli_fail("--resume");
        goto done;
    }
    if (A->started && (exit_code = A->started(&ctx, t)) != 0) goto done;
    if (!quiet) {
        dpt_model *m = dpt_trainer_model(t);
        fprintf(stderr, "dptrain train: %s (%zu train / %zu test, loaded in %.1fs), model %s (%zu parameters)\n",
                dataset, train.n, test.n, t_load, model, m->n_params);
        if (A->describe) A->describe(&ctx, stderr);
        if (dpt_comm_size() > 1)
            fprintf(stderr, "  data parallel: %d MPI ranks (%s), %zu shards%s, rank 0 writes %s\n",
                    dpt_comm_size(), dpt_comm_library(), dpt_trainer_shards(t),
                    A->uses_privacy_flags ? ", one noise draw per step" : "", out);
    }
    dpt_epoch_result r;
    if (dpt_trainer_run(t, &r) != DPT_OK) {
        exit_code = cli_fail("train");
        goto done;
    }
    if (A->report && (exit_code = A->report(&ctx, t)) != 0) goto done;
    if (isnan(r.test_accuracy))
        printf("done: nothing left to train (epoch %" PRIu64 " of %ld reached); see %s/metrics.jsonl\n",
               dpt_trainer_step(t) ? (uint64_t)epochs : 0, epochs, out);
    else
        printf("test accuracy %.2f%%  test loss %.4f  after %" PRIu64 " epochs (%" PRIu64 " steps, %.1fs of "
               "training)  [%s]\ncheckpoint: %s/checkpoint.safetensors  metrics: %s/metrics.jsonl\n",
               100.0 * r.test_accuracy, r.test_loss, r.epoch, r.step, r.wall_s, A->tag, cfg.out_dir, out);
done:
    if (algo && algo->free) algo->free(algo);
    dpt_trainer_free(t);
    dpt_dataset_free(&train);
    dpt_dataset_free(&test);
    free(run_json);
    return exit_code;
}
