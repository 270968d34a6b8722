/* dptrain train: one training run from flags. The option table drives parsing and
 * --help, so every option is listed with its real default. */
#include <dptrain/accounting.h>
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

int dpt_cmd_train(int argc, char **argv) {
    const char *dataset = "fashion-mnist", *data_dir = DPT_DEFAULT_DATA_DIR, *model = "mlp:784-128-64-32-10:gelu";
    const char *algo_name = "sgd", *optimizer = "adam", *schedule = "constant", *sampler = "shuffle";
    const char *loss = "ce", *init = "default", *normalize = "scalar", *out = "runs/latest", *classes = NULL;
    double lr = 1e-3, momentum = 0.0, weight_decay = 0.0, sample_rate = 0.0;
    long batch = 256, epochs = 5, threads = 0, max_train = 0, max_test = 0;
    uint64_t seed = 1, max_steps = 0;
    int resume = 0, quiet = 0, no_progress = 0, lr_seen = 0;
    double sigma = 0.0, clip = 1.0, target_eps = 0.0, delta = 1e-5;
    const char *clip_mode = "flat";
    int sigma_seen = 0, sampler_seen = 0, sample_rate_seen = 0, secure = 0, force = 0, allow_mismatch = 0, batch_seen = 0;
    cli_option opts[] = {
        {"--algo", CLI_STR, &algo_name, "NAME", "training algorithm: sgd (non-private) | dpsgd (DP-SGD, Abadi et al. 2016)", NULL},
        {"--dataset", CLI_STR, &dataset, "NAME", "mnist | fashion-mnist | usps | cifar10 | csv:PATH[,TEST]", NULL},
        {"--data-dir", CLI_STR, &data_dir, "DIR", "directory holding <dataset>/ folders", NULL},
        {"--classes", CLI_STR, &classes, "LIST", "keep only these labels, relabelled 0..k-1 (e.g. 0,1)", NULL},
        {"--max-train", CLI_LONG, &max_train, "N", "use the first N training examples (0 = all)", NULL},
        {"--max-test", CLI_LONG, &max_test, "N", "use the first N test examples (0 = all)", NULL},
        {"--normalize", CLI_STR, &normalize, "MODE", "none | scalar | channel (statistics of the training split)", NULL},
        {"--model", CLI_STR, &model, "SPEC", "model spec, e.g. mlp:784-1000-10:relu (see docs/nn.md)", NULL},
        {"--loss", CLI_STR, &loss, "NAME", "ce (softmax cross-entropy) | bce | mse", NULL},
        {"--init", CLI_STR, &init, "NAME", "default | lecun | he | xavier | ntk", NULL},
        {"--optimizer", CLI_STR, &optimizer, "NAME", "sgd | adam", NULL},
        {"--lr", CLI_DOUBLE, &lr, "X", "learning rate (> 0; sgd default 0.1)", &lr_seen},
        {"--momentum", CLI_DOUBLE, &momentum, "X", "SGD momentum in [0, 1)", NULL},
        {"--weight-decay", CLI_DOUBLE, &weight_decay, "X", "L2 coefficient added to the gradient", NULL},
        {"--lr-schedule", CLI_STR, &schedule, "S", "constant | step:GAMMA:EVERY | exp:GAMMA (per epoch)", NULL},
        {"--sampler", CLI_STR, &sampler, "NAME", "shuffle (fixed batches) | poisson | full (dpsgd: poisson)", &sampler_seen},
        {"--batch-size", CLI_LONG, &batch, "B", "batch size (poisson: expected size, q = B/N)", &batch_seen},
        {"--sample-rate", CLI_DOUBLE, &sample_rate, "Q", "poisson sampling rate q in (0, 1] (overrides B/N)", &sample_rate_seen},
        {"--epochs", CLI_LONG, &epochs, "E", "epochs to train (poisson: an epoch is round(1/q) steps)", NULL},
        {"--max-steps", CLI_U64, &max_steps, "T", "stop after T steps in total (0 = no limit)", NULL},
        {"--seed", CLI_U64, &seed, "S", "seed of every random stream (init, sampling, noise)", NULL},
        {"--threads", CLI_LONG, &threads, "N", "threads (0 = all cores)", NULL},
        {"--sigma", CLI_DOUBLE, &sigma, "X", "dpsgd: noise multiplier (> 0; noise std sigma*C on the clipped sum)", &sigma_seen},
        {"--clip", CLI_DOUBLE, &clip, "C", "dpsgd: per-example clipping norm C (> 0)", NULL},
        {"--clip-mode", CLI_STR, &clip_mode, "MODE", "dpsgd: flat | per-layer (C_l = C / sqrt(layers))", NULL},
        {"--target-epsilon", CLI_DOUBLE, &target_eps, "E", "dpsgd: calibrate sigma to reach E after --epochs "
                                                           "(with --sigma: stop before exceeding E)", NULL},
        {"--delta", CLI_DOUBLE, &delta, "D", "dpsgd: delta of the reported epsilon (< 1/N unless --force)", NULL},
        {"--secure", CLI_FLAG, &secure, NULL, "dpsgd: OS-seeded noise (never logged), exact discrete Gaussian", NULL},
        {"--force", CLI_FLAG, &force, NULL, "dpsgd: accept delta >= 1/N", NULL},
        {"--allow-ledger-mismatch", CLI_FLAG, &allow_mismatch, NULL,
         "dpsgd --resume: continue although q, sigma or data differ from the ledger (recorded in it)", NULL},
        {"--out", CLI_STR, &out, "DIR", "run directory", NULL},
        {"--resume", CLI_FLAG, &resume, NULL, "continue the run in --out from its checkpoint", NULL},
        {"--quiet", CLI_FLAG, &quiet, NULL, "print only the final summary", NULL},
        {"--no-progress", CLI_FLAG, &no_progress, NULL, "no progress bar even on a terminal", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    int rc = cli_parse(argc, argv, 1, opts, USAGE);
    if (rc < 0) return 0;
    if (rc) return rc;

    int dp = !strcmp(algo_name, "dpsgd");
    if (!dp && strcmp(algo_name, "sgd") != 0)
        return cli_error("--algo: unknown algorithm '%s' (available: sgd, dpsgd)", algo_name);
    dpt_clip_mode cmode = DPT_CLIP_FLAT;
    if (dp) {
        /* DP-SGD's accounting assumes Poisson sampling: anything else would make the
         * printed epsilon wrong, so it is forced, never silently replaced. */
        if (sampler_seen && strcmp(sampler, "poisson"))
            return cli_error("--sampler %s: --algo dpsgd needs --sampler poisson (its epsilon is computed for "
                             "Poisson sampling)", sampler);
        sampler = "poisson";
        if (!(clip > 0) || !isfinite(clip)) return cli_error("--clip: the clipping norm C must be > 0, got %g", clip);
        if (sigma_seen && (!(sigma > 0) || !isfinite(sigma)))
            return cli_error("--sigma: the noise multiplier must be > 0, got %g (for training without noise use "
                             "--algo sgd)", sigma);
        if (!sigma_seen && !(target_eps > 0))
            return cli_error("--algo dpsgd needs --sigma or --target-epsilon");
        if (target_eps != 0 && !(target_eps > 0 && isfinite(target_eps)))
            return cli_error("--target-epsilon must be > 0, got %g", target_eps);
        if (!(delta > 0 && delta < 1)) return cli_error("--delta must be in (0, 1), got %g", delta);
        if (sample_rate_seen && !(sample_rate > 0 && sample_rate <= 1))
            return cli_error("--sample-rate must be in (0, 1], got %g", sample_rate);
        if (dpt_clip_mode_parse(clip_mode, &cmode) != DPT_OK) return cli_error("%s", dpt_last_error());
    } else if (sigma_seen || target_eps != 0 || secure || allow_mismatch) {
        return cli_error("--sigma/--target-epsilon/--secure/--allow-ledger-mismatch need --algo dpsgd");
    }
    dpt_train_config cfg = dpt_train_config_defaults();
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
    else return cli_error("--sampler: expected shuffle|poisson|full, got '%s'", sampler);
    if (batch < 1) return cli_error("--batch-size must be >= 1, got %ld", batch);
    if (epochs < 1) return cli_error("--epochs must be >= 1, got %ld", epochs);
    if (threads < 0 || threads > 1024) return cli_error("--threads must be in [0, 1024], got %ld", threads);
    if (max_train < 0 || max_test < 0) return cli_error("--max-train/--max-test must be >= 0");
    if (sample_rate != 0.0 && (sample_rate <= 0.0 || sample_rate > 1.0))
        return cli_error("--sample-rate must be in (0, 1], got %g", sample_rate);
    if (sample_rate != 0.0 && cfg.sampler != DPT_SAMPLER_POISSON)
        return cli_error("--sample-rate needs --sampler poisson");
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
    if (make_dirs(out) != 0) {
        dpt_dataset_free(&train);
        dpt_dataset_free(&test);
        free(run_json);
        return cli_error("--out %s: cannot create directory: %s", out, strerror(errno));
    }
    cfg.model_spec = model;
    cfg.batch_size = (size_t)batch;
    cfg.sample_rate = sample_rate;
    cfg.epochs = (uint64_t)epochs;
    cfg.seed = seed;
    cfg.threads = (int)threads;
    cfg.out_dir = out;
    cfg.max_steps = max_steps;
    cfg.quiet = quiet;
    cfg.progress = !no_progress && cli_stderr_is_tty();
    cfg.run_json = run_json;
    dpt_dpsgd_config dcfg = dpt_dpsgd_config_defaults();
    if (dp) {
        const size_t N = train.n;
        double q = sample_rate != 0.0 ? sample_rate : (double)batch / (double)N;
        if (!(q > 0 && q <= 1)) {
            dpt_dataset_free(&train);
            dpt_dataset_free(&test);
            free(run_json);
            return cli_error("--batch-size %ld: the sampling rate q = B/N = %g is outside (0, 1] (N = %zu)", batch, q, N);
        }
        if (delta >= 1.0 / (double)N && !force) {
            dpt_dataset_free(&train);
            dpt_dataset_free(&test);
            free(run_json);
            return cli_error("--delta %g >= 1/N = %g: such a delta allows releasing a whole example; pass --force "
                             "to accept it", delta, 1.0 / (double)N);
        }
        cfg.sample_rate = q;
        cfg.delta = delta;
        cfg.secure = secure;
        cfg.allow_ledger_mismatch = allow_mismatch;
        cfg.target_epsilon = sigma_seen ? target_eps : 0.0;
        if (!sigma_seen) {
            /* calibrate: steps = epochs * max(1, round(1/q)), as the Poisson sampler runs */
            uint64_t spe = (uint64_t)llround(1.0 / q);
            if (spe < 1) spe = 1;
            if (dpt_calibrate_sigma(q, (uint64_t)epochs * spe, delta, target_eps, DPT_ACCT_RDP, DPT_CONV_BALLE, 1e-4,
                                    &sigma) != DPT_OK) {
                dpt_dataset_free(&train);
                dpt_dataset_free(&test);
                free(run_json);
                return cli_fail("--target-epsilon");
            }
            if (!quiet)
                fprintf(stderr, "dptrain: calibrated sigma %.6g for epsilon %g at delta %g after %ld epochs of "
                                "%" PRIu64 " steps (q %g, RDP accountant)\n", sigma, target_eps, delta, epochs, spe, q);
        }
        dcfg.sigma = sigma;
        dcfg.clip = clip;
        dcfg.clip_mode = cmode;
        dcfg.secure = secure;
        if (!quiet) {
            if (secure)
                fprintf(stderr, "dptrain: secure mode: OS-seeded noise stream (not logged), exact discrete Gaussian\n");
            else
                fprintf(stderr, "dptrain: reproducible mode (seed %" PRIu64 " logged; the noise can be regenerated from "
                                "it): NOT the secure mode (--secure)\n", seed);
        }
    }

    dpt_algo *algo = NULL;
    dpt_trainer *t = NULL;
    int exit_code = 0;
    if ((dp ? dpt_algo_dpsgd_new(&dcfg, &algo) : dpt_algo_sgd_new(&algo)) != DPT_OK ||
        dpt_trainer_new(&cfg, &train, &test, algo, &t) != DPT_OK) {
        exit_code = cli_fail("train");
        goto done;
    }
    if (resume && dpt_trainer_resume(t) != DPT_OK) {
        exit_code = cli_fail("--resume");
        goto done;
    }
    if (!quiet) {
        dpt_model *m = dpt_trainer_model(t);
        fprintf(stderr, "dptrain train: %s (%zu train / %zu test, loaded in %.1fs), model %s (%zu parameters)\n",
                dataset, train.n, test.n, t_load, model, m->n_params);
        if (dp)
            fprintf(stderr, "  algorithm dpsgd (sigma %g, C %g, %s clipping, q %g = expected batch %.1f, delta %g), "
                            "%s lr %g, %ld epochs, seed %" PRIu64 ", %d threads, run dir %s%s\n",
                    sigma, clip, clip_mode, cfg.sample_rate, cfg.sample_rate * (double)train.n, delta, optimizer,
                    cfg.optim.lr, epochs, seed, dpt_threads_resolve(cfg.threads), out, resume ? " (resumed)" : "");
        else
            fprintf(stderr, "  algorithm %s (non-private: no privacy guarantee), %s lr %g, %s batches of %ld, "
                            "%ld epochs, seed %" PRIu64 ", %d threads, run dir %s%s\n",
                    algo_name, optimizer, cfg.optim.lr, sampler, batch, epochs, seed,
                    dpt_threads_resolve(cfg.threads), out, resume ? " (resumed)" : "");
    }
    dpt_epoch_result r;
    if (dpt_trainer_run(t, &r) != DPT_OK) {
        exit_code = cli_fail("train");
        goto done;
    }
    if (dp) {
        /* only what the accountants computed from the recorded (Poisson) events */
        double e_rdp = NAN, e_pld = NAN;
        const dpt_ledger *l = dpt_trainer_ledger(t);
        if (dpt_ledger_epsilon(l, delta, DPT_ACCT_RDP, DPT_CONV_BALLE, &e_rdp) != DPT_OK) {
            exit_code = cli_fail("epsilon");
            goto done;
        }
        if (dpt_ledger_pld_applies(l) && dpt_ledger_epsilon(l, delta, DPT_ACCT_PLD, DPT_CONV_BALLE, &e_pld) != DPT_OK)
            e_pld = NAN;
        double e_next = 0;
        if (dpt_trainer_budget_stopped(t, &e_next))
            printf("stopped by the privacy budget: the next step would reach epsilon %.4g > %g\n", e_next, target_eps);
        printf("privacy: epsilon %.4g (RDP) / %.4g (PLD) at delta %g after %" PRIu64 " steps (q %g, sigma %g)  "
               "ledger: %s/ledger.json\n", e_rdp, e_pld, delta, dpt_ledger_steps(l), cfg.sample_rate, sigma, out);
    }
    if (isnan(r.test_accuracy))
        printf("done: nothing left to train (epoch %" PRIu64 " of %ld reached); see %s/metrics.jsonl\n",
               dpt_trainer_step(t) ? (uint64_t)epochs : 0, epochs, out);
    else
        printf("test accuracy %.2f%%  test loss %.4f  after %" PRIu64 " epochs (%" PRIu64 " steps, %.1fs of "
               "training)  [%s]\ncheckpoint: %s/checkpoint.safetensors  metrics: %s/metrics.jsonl\n",
               100.0 * r.test_accuracy, r.test_loss, r.epoch, r.step, r.wall_s, dp ? "DP-SGD" : "non-private", out, out);
done:
    dpt_trainer_free(t);
    dpt_dataset_free(&train);
    dpt_dataset_free(&test);
    free(run_json);
    return exit_code;
}
