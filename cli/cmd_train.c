/* dptrain train: one training run from flags. The option table drives parsing and
 * --help, so every option is listed with its real default. */
#include <cjson/cJSON.h>
#include <dptrain/accounting.h>
#include <dptrain/comm.h>
#include <dptrain/train.h>
#include <dptrain/privacy.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "init_from.h"
#include "presets.h"
#include "run_data.h"
#include "train_algos.h"
#include "train_trace.h"

static const char *USAGE =
    "usage: dptrain train [options]\n\n"
    "Trains a model and writes the run directory (--out): checkpoint.safetensors (after\n"
    "every epoch), ledger.json (private algorithms) and metrics.jsonl (one JSON object per\n"
    "epoch: epoch, step, train_loss (non-private only; not dpsgd/dpulr with --sampler\n"
    "shuffle), test_loss, test_accuracy (--targets: test_mse), lr, wall_s, epsilon); a result\n"
    "is written only after the checkpoint and ledger holding its steps.\n"
    "The run's secret file (its key, seed and random streams; mode 0600) is kept outside the\n"
    "run directory, in --secret-dir (default $DPTRAIN_SECRETS_DIR, else\n"
    "$XDG_STATE_HOME/dptrain/secrets, else ~/.local/state/dptrain/secrets) as <run id>.secret,\n"
    "so the run directory can be shared; --resume needs it; never publish it.\n"
    "Without --out each run gets a new directory runs/YYYYMMDD-HHMMSS-XXXX and runs/latest\n"
    "links to the newest (--resume without --out continues it). An explicit non-empty --out\n"
    "is refused unless --resume (continue the run in it exactly where its\n"
    "last checkpoint left it) or --overwrite (replace it). Ctrl-C stops after the current\n"
    "step with everything saved (continue with --resume); a second Ctrl-C kills.\n"
    "Datasets live in DIR/<name>/ for --data-dir DIR (mnist, fashion-mnist, usps, cifar10;\n"
    "fortunes-topic and fortunes-chars read DIR/fortunes/, else /usr/share/games/fortunes);\n"
    "csv:PATH reads a numeric CSV with the label in the first column (with --targets K: K\n"
    "real-valued regression targets first).";

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

/* ==== What the user sees: drawn from the trainer's callbacks ==== */

typedef struct {
    int progress;         /* progress bar on stderr (a terminal, not --no-progress, not --quiet) */
    int quiet;            /* no per-epoch lines and no notes */
    int bar_shown;        /* a bar is on the current line */
    uint64_t epochs, max_steps;
    double t_start, last_draw;
    uint64_t step_start;  /* the run's step when this session started (at t_start) */
    uint64_t examples;    /* non-private: examples seen this session */
    cli_trace *trace;     /* --trace: one line per step */
    int trace_failed;     /* a trace line could not be written: stop the run */
} train_ui;

/* SIGINT: the first asks the trainer to stop after the current step (everything saved);
 * SA_RESETHAND restores the default action, so a second one kills. */
static volatile sig_atomic_t g_interrupted = 0;

/* --validation: what a private run's epsilon does not cover */
#define VALIDATION_NOTE                                                                                         \
    "the validation metrics (--validation): noiseless statistics of examples held out of the private training " \
    "split"

/* What the run evaluates on: "test" (the test split) or "validation" (--validation). */
static const char *g_eval = "test";
static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    static const char msg[] = "\ndptrain: interrupted: stopping after the current step (Ctrl-C again to kill)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
}

static void ui_clear_bar(train_ui *ui) {
    if (!ui->bar_shown) return;
    fprintf(stderr, "\r\033[K");
    ui->bar_shown = 0;
}

static void fmt_duration(double s, char *buf, size_t n) {
    if (!isfinite(s) || s < 0) s = 0;
    unsigned long v = (unsigned long)(s + 0.5);
    if (v >= 3600)
        snprintf(buf, n, "%lu:%02lu:%02lu", v / 3600, (v / 60) % 60, v % 60);
    else
        snprintf(buf, n, "%02lu:%02lu", v / 60, v % 60);
}

/* A private run's step info carries no loss and no batch size (functions of the private
 * data): its bar shows steps per second instead. */
static int ui_on_step(void *user, const dpt_step_info *in) {
    train_ui *ui = user;
    if (ui->trace && cli_trace_step(ui->trace, in) != 0) {
        ui->trace_failed = 1;
        return 1;
    }
    if (!ui->progress) return g_interrupted != 0;
    double now = dpt_now();
    ui->examples += in->batch;
    if (now - ui->last_draw > 0.1 || in->step_in_epoch == in->steps_per_epoch) {
        double el = now - ui->t_start, per_step = in->step > ui->step_start ? el / (double)(in->step - ui->step_start) : 0;
        uint64_t end = ui->epochs * (uint64_t)in->steps_per_epoch;
        if (ui->max_steps && ui->max_steps < end) end = ui->max_steps;
        char eta[32], rate[64];
        fmt_duration(per_step * (double)(end > in->step ? end - in->step : 0), eta, sizeof eta);
        if (isnan(in->loss))
            snprintf(rate, sizeof rate, "%.1f steps/s", per_step > 0 ? 1.0 / per_step : 0.0);
        else
            snprintf(rate, sizeof rate, "loss %.4f  %.0f ex/s", in->loss, el > 0 ? (double)ui->examples / el : 0.0);
        int width = 24, filled = in->steps_per_epoch ? (int)((double)width * in->step_in_epoch / in->steps_per_epoch) : width;
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\repoch %" PRIu64 "/%" PRIu64 " [%s] step %zu/%zu  %s  ETA %s ", in->epoch + 1, ui->epochs, bar,
                in->step_in_epoch, in->steps_per_epoch, rate, eta);
        fflush(stderr);
        ui->bar_shown = 1;
        ui->last_draw = now;
    }
    return g_interrupted != 0;
}

static int ui_on_epoch(void *user, const dpt_epoch_result *r) {
    train_ui *ui = user;
    /* the ledger on disk now records every step so far: their trace lines may go out */
    if (ui->trace && cli_trace_publish(ui->trace) != 0) {
        ui->trace_failed = 1;
        return 1;
    }
    ui_clear_bar(ui);
    if (ui->quiet) return g_interrupted != 0;
    char where[96] = "", loss[48] = "", test[120] = "", eps[128] = "";
    if (r->partial)
        snprintf(where, sizeof where, " (stopped after %zu of %zu steps)", r->steps_in_epoch, r->steps_per_epoch);
    if (!isnan(r->train_loss)) snprintf(loss, sizeof loss, "  train loss %.4f", r->train_loss);
    if (!isnan(r->test_accuracy)) {
        snprintf(test, sizeof test, "  %s loss %.4f  %s acc %.2f%%", g_eval, r->test_loss, g_eval,
                 100.0 * r->test_accuracy);
        if (!isnan(r->test_accuracy_ema)) { /* --ema: the averaged parameters' accuracy beside it */
            const size_t w = strlen(test);
            snprintf(test + w, sizeof test - w, "  %s acc ema %.2f%%", g_eval, 100.0 * r->test_accuracy_ema);
        }
    } else if (!isnan(r->test_mse)) /* regression */
        snprintf(test, sizeof test, "  %s mse %.5g  (rmse %.5g)", g_eval, r->test_mse, sqrt(r->test_mse));
    else if (!isnan(r->test_loss)) /* token-ce: the mean loss per token and its perplexity */
        snprintf(test, sizeof test, "  %s loss %.4f  (perplexity %.4g)", g_eval, r->test_loss, exp(r->test_loss));
    /* the headline accountant's epsilon (what calibration and the budget use), RDP beside it */
    if (!isnan(r->epsilon)) {
        char head[80];
        cli_epsilon_text(head, sizeof head, r->epsilon, (dpt_accountant)r->accountant, r->epsilon_rdp, r->epsilon_pld);
        snprintf(eps, sizeof eps, "  %s (delta %g)", head, r->delta);
    }
    /* a seeded, non-accounted or otherwise qualified run says so on every line (as at the end) */
    fprintf(stderr, "epoch %" PRIu64 "/%" PRIu64 "%s  step %" PRIu64 "%s%s%s%s%s%s  %.1fs%s\n", r->epoch, ui->epochs,
            where, r->step, loss, test, eps, r->privacy_label, r->note[0] ? "  " : "", r->note, r->wall_s,
            r->from_checkpoint ? "  (saved before the last stop, published now)" : "");
    return g_interrupted != 0;
}

static void ui_log(void *user, dpt_log_level level, const char *msg) {
    train_ui *ui = user;
    if (ui->quiet && level != DPT_LOG_WARN) return;
    ui_clear_bar(ui);
    char mapped[2048]; /* the library names config fields; the user gave flags */
    cli_flag_names(msg, mapped, sizeof mapped);
    fprintf(stderr, "dptrain: %s%s\n", level == DPT_LOG_WARN ? "warning: " : level == DPT_LOG_NOTE ? "note: " : "",
            mapped);
}

/* The final summary (stdout) from the last published result. */
static void print_summary(const dpt_trainer *t, const dpt_epoch_result *r, const cli_algo *A, const char *out,
                          const char *run_dir, long epochs, uint64_t steps_this_session) {
    dpt_stop_reason why = dpt_trainer_stop_reason(t);
    if (why == DPT_STOP_DONE && !steps_this_session)
        printf("done: nothing left to train: the run in %s is at epoch %" PRIu64 " (%" PRIu64 " steps), already at or "
               "past --epochs %ld\n", out, r->epoch, dpt_trainer_step(t), epochs);
    if (why == DPT_STOP_MAX_STEPS && !steps_this_session)
        printf("done: nothing left to train: the run in %s is at step %" PRIu64 ", already at or past --max-steps %" PRIu64
               "\n", out, dpt_trainer_step(t), dpt_trainer_config(t)->max_steps);
    if (r->epoch == 0) {
        double next = 0;
        if (why == DPT_STOP_BUDGET && dpt_trainer_budget_stopped(t, &next))
            printf("no result: the run in %s took no step: its first step would raise epsilon to %.4g, above "
                   "--target-epsilon %g (raise --sigma or the target)\n", out, next, dpt_trainer_config(t)->target_epsilon);
        else
            printf("no result: the run in %s took no step (nothing to train)\n", out);
        return;
    }
    char when[160];
    if (r->partial)
        snprintf(when, sizeof when, "%" PRIu64 " steps (stopped after %zu of the %zu steps of epoch %" PRIu64
                 ", %.1fs of training)", r->step, r->steps_in_epoch, r->steps_per_epoch, r->epoch, r->wall_s);
    else
        snprintf(when, sizeof when, "%" PRIu64 " epochs (%" PRIu64 " steps, %.1fs of training)", r->epoch, r->step,
                 r->wall_s);
    const char *lab = r->privacy_label; /* the epoch lines' labels, on the result lines too */
    if (!isnan(r->test_mse)) /* regression */
        printf("%s mse %.5g  (rmse %.5g)  after %s  [%s]%s\n", g_eval, r->test_mse, sqrt(r->test_mse), when, A->tag,
               lab);
    else if (isnan(r->test_accuracy) && !isnan(r->test_loss)) /* token-ce */
        printf("%s loss %.4f  (perplexity %.4g)  after %s  [%s]%s\n", g_eval, r->test_loss, exp(r->test_loss), when,
               A->tag, lab);
    else if (isnan(r->test_accuracy))
        printf("after %s  [%s]%s\n", when, A->tag, lab);
    else
        printf("%s accuracy %.2f%%  %s loss %.4f  after %s  [%s]%s\n", g_eval, 100.0 * r->test_accuracy, g_eval,
               r->test_loss, when, A->tag, lab);
    if (!isnan(r->test_accuracy_ema))
        printf("%s accuracy under the parameter average (--ema, the checkpoint's model): %.2f%%  %s loss %.4f%s\n",
               g_eval, 100.0 * r->test_accuracy_ema, g_eval, r->test_loss_ema, lab);
    printf("checkpoint: %s/checkpoint.safetensors  metrics: %s/metrics.jsonl\n", run_dir, out);
    /* the one file to keep when moving the run, and the one never to publish */
    char sp[1100];
    int found = 0;
    if (dpt_run_secret_path(run_dir, dpt_trainer_config(t)->secret_dir, sp, sizeof sp, &found) == DPT_OK && found)
        printf("secret: %s  (--resume needs it; never publish it)\n", sp);
    dpt_clear_error();
}

/* --freeze LAYERS for --algo A on model spec `model`: the algorithm honours frozen layers
 * and the list names layers of the model (dpt_model_freeze_parse's message). */
static int check_freeze(const cli_algo *A, const char *freeze, const char *model) {
    if (!A->freezable)
        return cli_error("--freeze: not with --algo %s (--algo sgd and dpsgd train with frozen layers)", A->name);
    if (!*freeze) return cli_error("--freeze: an empty list (leave the flag out to train every layer)");
    dpt_model *m = NULL;
    dpt_status st = dpt_model_new(model, 1, 1, &m);
    if (st != DPT_OK) return cli_refuse(st, "--model");
    st = dpt_model_freeze_parse(m, freeze, NULL, NULL);
    int rc = st == DPT_OK ? 0 : cli_refuse(st, "--freeze");
    dpt_model_free(m);
    return rc;
}

/* --target-epsilon and the releases a fresh run makes before training (DP normalization
 * statistics, DP mean, DP-PCA): their cost follows from their noise, so a target they
 * alone exceed is refused before any of them is computed or anything is written (the
 * trainer refuses it too when they are recorded, dpt_trainer_add_gaussian_release). */
/* --feature-norm: DP channel statistics of the fbn layer's input (dpt_trainer_feature_norm) */
typedef struct {
    const char *mode;  /* none | dp */
    double sigma;      /* --feature-norm-sigma */
    const char *clip;  /* --feature-norm-clip C[,C2] */
    int sigma_seen, clip_seen;
    int on;            /* mode dp */
    double c1, c2;     /* the clips of the channel means and of the channel mean squares */
} feature_norm_opts;

static int feature_norm_check(feature_norm_opts *f) {
    f->on = !strcmp(f->mode, "dp");
    if (!f->on && strcmp(f->mode, "none"))
        return cli_error("--feature-norm: expected none or dp, got '%s'", f->mode);
    if (!f->on) {
        if (f->sigma_seen || f->clip_seen)
            return cli_error("%s: only with --feature-norm dp", f->sigma_seen ? "--feature-norm-sigma" : "--feature-norm-clip");
        return 0;
    }
    if (!f->sigma_seen || !(isfinite(f->sigma) && f->sigma > 0))
        return cli_error("--feature-norm dp needs --feature-norm-sigma S > 0: the noise multiplier of the statistics' two "
                         "Gaussian releases");
    if (!f->clip_seen)
        return cli_error("--feature-norm dp needs --feature-norm-clip C[,C2]: the L2 bound on each example's vector of "
                         "channel means (and of channel mean squares, C2; default C)");
    char *end;
    f->c1 = strtod(f->clip, &end);
    f->c2 = f->c1;
    if (*end == ',') f->c2 = strtod(end + 1, &end);
    if (*end || !(isfinite(f->c1) && f->c1 > 0) || !(isfinite(f->c2) && f->c2 > 0))
        return cli_error("--feature-norm-clip: expected C or C,C2 with numbers > 0, got '%s'", f->clip);
    return 0;
}

/* The channels of the model's fbn layer (0: none; the trainer says so) */
static size_t fbn_channels(const char *spec) {
    dpt_model *m = NULL;
    size_t K = 0;
    if (dpt_model_new(spec, 1, 1, &m) == DPT_OK)
        for (size_t l = 0; l < m->n_layers; l++)
            if (m->layers[l].kind == DPT_LAYER_CHANNEL_AFFINE) K = m->layers[l].in_shape[0];
    dpt_model_free(m);
    dpt_clear_error();
    return K;
}

/* The feature normalization's two releases, at the multiplier they are accounted with. */
static dpt_status feature_norm_events(const feature_norm_opts *f, int secure, const char *spec, dpt_ledger *l) {
    size_t K = secure ? fbn_channels(spec) : 0;
    const double mult = secure && K ? dpt_privacy_secure_sigma_eff(f->sigma, K) : f->sigma;
    DPT_TRY(dpt_ledger_add_gaussian(l, 1.0, mult, "dp-feature-norm-mean"));
    return dpt_ledger_add_gaussian(l, 1.0, mult, "dp-feature-norm-sq");
}

static int check_planned_releases(const cli_algo *A, const cli_algo_ctx *ctx, const cli_data_opts *dopts,
                                  const cli_privacy_flags *pf, const feature_norm_opts *fn, const char *spec) {
    if (!A->uses_privacy_flags) return 0;
    dpt_ledger *l = NULL;
    if (dpt_ledger_new(&l) != DPT_OK) return cli_fail("--target-epsilon");
    char norm[320] = "", algo[160] = "";
    int rc = cli_norm_planned(dopts, l, norm, sizeof norm);
    if (!rc && fn->on) {
        if (feature_norm_events(fn, pf->secure, spec, l) != DPT_OK) rc = cli_fail("--feature-norm");
        size_t k = strlen(norm);
        snprintf(norm + k, sizeof norm - k, "%sthe feature normalization's two releases (--feature-norm-sigma %g)",
                 k ? " and " : "", fn->sigma);
    }
    if (!rc && A->planned_releases) rc = A->planned_releases(ctx, l, algo, sizeof algo);
    double e = 0;
    if (!rc && dpt_ledger_n_events(l) > 0) {
        if (dpt_ledger_epsilon(l, pf->delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &e) != DPT_OK) rc = cli_fail("--target-epsilon");
        else if (e > pf->target_eps)
            rc = cli_error("--target-epsilon %g: the releases before training alone, %s%s%s, spend epsilon %.4g at "
                           "delta %g: refused before computing them (nothing was written); raise their noise or the "
                           "target", pf->target_eps, norm, norm[0] && algo[0] ? " and " : "", algo, e, pf->delta);
    }
    dpt_ledger_free(l);
    return rc;
}

static int cmd_train(int argc, char **argv) {
    const char *preset = NULL;
    const char *dataset = "fashion-mnist", *data_dir = DPT_DEFAULT_DATA_DIR, *model = "mlp:784-128-64-32-10:gelu";
    const char *algo_name = "sgd", *optimizer = "adam", *schedule = "constant", *sampler = "shuffle";
    const char *loss = "ce", *init = "default", *normalize = "auto", *out = "runs/latest", *classes = NULL;
    int out_seen = 0;
    const char *trace_path = NULL, *init_from = NULL, *freeze = NULL, *secret_dir = NULL;
    long targets = 0, seq_len = 0;
    char seq_dataset[64];
    int seq_len_seen = 0;
    int loss_seen = 0, no_feature_cache = 0;
    double lr = 1e-3, momentum = 0.0, weight_decay = 0.0, sample_rate = 0.0;
    long batch = 256, epochs = 5, threads = 0, max_train = 0, max_test = 0, shards = 0, validation = 0;
    uint64_t seed = 0, max_steps = 0;
    long physical_batch = 0;
    double ema = 0.0;
    int ema_warmup = 0;
    long aug_mult = 1;
    const char *augment = "none";
    int resume = 0, overwrite = 0, quiet = 0, no_progress = 0, lr_seen = 0, momentum_seen = 0, wd_seen = 0;
    int sampler_seen = 0, sample_rate_seen = 0, batch_seen = 0, model_seen = 0, init_seen = 0;
    double norm_sigma = 0.0, norm_clip = 0.0;
    int norm_sigma_seen = 0, norm_clip_seen = 0, norm_unaccounted = 0;
    feature_norm_opts fn = {.mode = "none", .clip = ""};
    cli_privacy_flags pf = {.sigma = 0.0, .clip = 1.0, .target_eps = 0.0, .delta = 1e-5, .clip_mode = "flat",
                            .secure_sampler = "table"};
    char preset_help[1280];
    snprintf(preset_help, sizeof preset_help, "a paper's settings as a flag set, inserted before the flags given "
             "(which override it): %s (docs/dpmac.md, docs/cnn.md)", cli_preset_names());
    cli_option common[] = {
        {"--preset", CLI_STR, &preset, "NAME", preset_help, NULL},
        {"--algo", CLI_STR, &algo_name, "NAME", "training algorithm (list above)", NULL},
        {"--dataset", CLI_STR, &dataset, "NAME", "mnist | fashion-mnist | usps | usps-pooled (zip.train + zip.test pooled, fixed permutation, 5000 train / 4298 test) | cifar10 | fortunes-topic (quotations of the Debian package fortunes, 20 topics; byte ids) | fortunes-chars (next-byte prediction on the same corpus) | csv:PATH[,TEST] (without TEST the training set is also the test set)", NULL},
        {"--data-dir", CLI_STR, &data_dir, "DIR", "directory holding <dataset>/ folders", NULL},
        {"--seq-len", CLI_LONG, &seq_len, "T", "fortunes-topic | fortunes-chars: token ids per example (default 256 | 64, at most 2^20); the run records the dataset as NAME:T (docs/data.md)", &seq_len_seen},
        {"--classes", CLI_STR, &classes, "LIST", "keep only these labels, relabelled 0..k-1 (e.g. 0,1)", NULL},
        {"--targets", CLI_LONG, &targets, "K", "regression: the first K columns of the csv: files are real-valued targets (no label column); trains with --loss mse (the default then) a --model with K outputs, --algo sgd, dpsgd, pdp-sgd or proportional-noise; reports the test mean squared error (docs/data.md)", NULL},
        {"--max-train", CLI_LONG, &max_train, "N", "use the first N training examples (0 = all)", NULL},
        {"--validation", CLI_LONG, &validation, "N", "hold out the last N training examples (after --max-train) and "
         "evaluate on them instead of the test split, which is then not read: for choosing hyperparameters without "
         "looking at the test set. Their metrics are noiseless statistics of private data: a private run's epsilon "
         "says it does not cover them. dptrain eval of the checkpoint uses the test split (docs/dpsgd.md) (0 = off)",
         NULL},
        {"--max-test", CLI_LONG, &max_test, "N", "use the first N test examples (0 = all)", NULL},
        {"--normalize", CLI_STR, &normalize, "MODE", "auto (fortunes-*: none; private algorithms: public, or none for csv; others: scalar) | none | public (the dataset's published constants) | scalar | channel | feature (statistics of the training split; private algorithms: only with --normalize-unaccounted) | dp-scalar | dp-channel | dp-feature (DP statistics, in the ledger; needs --normalize-sigma) | affine:SHIFT:SCALE (fixed x <- (x - SHIFT) / SCALE, e.g. affine:-1:2 maps USPS [-1,1] pixels to [0,1]); docs/data.md", NULL},
        {"--normalize-sigma", CLI_DOUBLE, &norm_sigma, "S", "dp-*: noise multiplier of the statistics' Gaussian release (> 0)", &norm_sigma_seen},
        {"--normalize-clip", CLI_DOUBLE, &norm_clip, "C", "dp-*: L2 bound on each example's (mean, mean square) statistics (default sqrt(2K) for K pairs: the bound of pixels in [-1, 1]; required for csv)", &norm_clip_seen},
        {"--normalize-unaccounted", CLI_FLAG, &norm_unaccounted, NULL, "private algorithms: allow scalar | channel | feature statistics fitted without noise; the epsilon then does NOT cover them (said in the output, metrics and ledger)", NULL},
        {"--model", CLI_STR, &model, "SPEC", "model spec: mlp:784-1000-10:relu, cnn:1x28x28:conv16k5,relu,fc10, or mnist_cnn | mnist_cnn_tanh | cifar_cnn_tanh | resnet5 | gpt_tiny | bert_tiny | vit_mnist | vit_cifar (see docs/nn.md)", &model_seen},
        {"--init-from", CLI_STR, &init_from, "CKPT", "start from the parameters of this checkpoint (a file or run directory) instead of a random initialization: fine-tuning (--model defaults to its model). The epsilon covers this run only: the checkpoint must not depend on this run's training data (docs/checkpoints.md)", NULL},
        {"--freeze", CLI_STR, &freeze, "LAYERS", "keep these layers' parameters at their starting values and train the others (comma-separated names of layers with parameters, as dptrain model --model SPEC lists them, e.g. conv1,conv2: a frozen trunk under --init-from). --algo sgd and dpsgd; DP-SGD clips and noises the trained layers only, with the same epsilon. A --resume gives the same list (docs/checkpoints.md)", NULL},
        {"--no-feature-cache", CLI_FLAG, &no_feature_cache, NULL, "with --freeze or a scatter layer: run the frozen (or fixed) layers' forward pass at every step instead of computing their output once for every training and test example and keeping it (the default when it fits in a quarter of the memory; the results agree up to float rounding)", NULL},
        {"--loss", CLI_STR, &loss, "NAME", "ce (softmax cross-entropy) | bce (sigmoid: one output for labels 0/1, or one-vs-all over K outputs) | mse (squared error: against the --targets, or without them reconstructing the input: autoencoders, ae:... models) | token-ce (language models: the mean over T positions of the cross-entropy of V logits per position, against --targets T next-token ids; docs/nn.md)", &loss_seen},
        {"--init", CLI_STR, &init, "NAME", "default | lecun | he | xavier | ntk | torch (PyTorch's Linear/Conv2d default)", &init_seen},
        {"--optimizer", CLI_STR, &optimizer, "NAME", "sgd | adam", NULL},
        {"--lr", CLI_DOUBLE, &lr, "X", "learning rate (> 0; sgd default 0.1)", &lr_seen},
        {"--momentum", CLI_DOUBLE, &momentum, "X", "SGD momentum in [0, 1) (--optimizer sgd only)", &momentum_seen},
        {"--weight-decay", CLI_DOUBLE, &weight_decay, "X", "L2 coefficient added to the gradient", &wd_seen},
        {"--lr-schedule", CLI_STR, &schedule, "S", "constant | step:GAMMA:EVERY | exp:GAMMA (per epoch) | exp:GAMMA:DECAYS (hold after DECAYS decays)", NULL},
        {"--sampler", CLI_STR, &sampler, "NAME", "shuffle (fixed batches) | poisson | full | poisson-reject (dpsgd: poisson; an explicit shuffle runs DP-SGD NOT ACCOUNTED: no ledger, no epsilon; dpulr: poisson-reject)", &sampler_seen},
        {"--batch-size", CLI_LONG, &batch, "B", "batch size (poisson: expected size, q = B/N)", &batch_seen},
        {"--sample-rate", CLI_DOUBLE, &sample_rate, "Q", "poisson sampling rate q in (0, 1] (overrides B/N)", &sample_rate_seen},
        {"--physical-batch", CLI_LONG, &physical_batch, "M", "examples per forward/backward pass (0 = the whole batch): memory is bounded by M, a larger batch is accumulated over passes with one noise draw and one ledger step (virtual batches; the same update to float rounding)", NULL},
        {"--ema", CLI_DOUBLE, &ema, "DECAY", "parameter averaging: keep e <- e + (1 - DECAY)(theta - e) after every step (e.g. 0.999; 0 = off), report the test set under it beside the raw parameters (test acc ema), and save it as the checkpoint's model (what predict and eval load; the raw parameters stay inside for --resume). Post-processing: no privacy cost (docs/dpsgd.md)", NULL},
        {"--ema-warmup", CLI_FLAG, &ema_warmup, NULL, "with --ema: decay min(DECAY, (1 + t) / (10 + t)) at step t (De et al. 2022)", NULL},
        {"--augment", CLI_STR, &augment, "MODE", "none | crop (a random crop back to the image size after 4-pixel reflect padding) | crop-flip (and a horizontal flip with probability 1/2): image models (cnn:), --algo dpsgd; the copies come from the run's seed, a fresh draw per step (docs/dpsgd.md)", NULL},
        {"--aug-mult", CLI_LONG, &aug_mult, "K", "augmentation multiplicity (De et al. 2022): K augmented copies of each sampled example, whose gradients are averaged before clipping (same epsilon: each example still adds one clipped vector); K times the compute per example; needs --augment", NULL},
        {"--epochs", CLI_LONG, &epochs, "E", "epochs to train (poisson: an epoch is round(1/q) steps)", NULL},
        {"--max-steps", CLI_U64, &max_steps, "T", "stop after T steps in total (0 = no limit)", NULL},
        {"--seed", CLI_U64, &seed, "S", "seed of every random stream (init, sampling, noise); 0 (default): drawn "
                                     "from the OS and kept only in the run's secret file (--secret-dir); S > 0 makes the run "
                                     "reproducible, and anyone who knows S can regenerate its batches and noise "
                                     "(private runs say so in the ledger, metrics and checkpoint)", NULL},
        {"--threads", CLI_LONG, &threads, "N", "threads (0 = all cores; under mpirun: per rank, cores / ranks on the host)", NULL},
        {"--shards", CLI_LONG, &shards, "S", "data-parallel shards: same result on any number of MPI ranks "
                                            "(0 = ranks; see docs/distributed.md)", NULL},
        {"--out", CLI_STR, &out, "DIR", "run directory (default: a new runs/YYYYMMDD-HHMMSS-XXXX for each run, "
                                        "runs/latest linking to the newest; with --resume, runs/latest)", &out_seen},
        {"--secret-dir", CLI_STR, &secret_dir, "DIR", "where the run's secret file goes, as <run id>.secret (mode 0600; "
                                                      "the directory is made mode 0700, and one that other users can "
                                                      "enter is refused): never inside --out, so the run directory "
                                                      "can be shared; --resume reads it there (or in --out, where "
                                                      "older runs kept it, and moves it). Default: $DPTRAIN_SECRETS_DIR, "
                                                      "else $XDG_STATE_HOME/dptrain/secrets, else "
                                                      "~/.local/state/dptrain/secrets. To resume on another machine, "
                                                      "copy the secret file there too and give its directory", NULL},
        {"--resume", CLI_FLAG, &resume, NULL, "continue the run in --out from its checkpoint", NULL},
        {"--overwrite", CLI_FLAG, &overwrite, NULL, "replace the run in --out (its files are removed first, and its secret file)", NULL},
        {"--quiet", CLI_FLAG, &quiet, NULL, "print only the final summary", NULL},
        {"--no-progress", CLI_FLAG, &no_progress, NULL, "no progress bar even on a terminal", NULL},
        {"--trace", CLI_STR, &trace_path, "FILE", "write one JSON line per step: parameter, update and direction norms "
                                                  "per layer; dpulr: s_l, lambda_min, clip counts (unnoised statistics "
                                                  "of the private batches: a debugging aid, never to be released)", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    cli_option priv[] = {
        {"-", CLI_SECTION, NULL, NULL, "Privacy options (private algorithms)", NULL},
        {"--sigma", CLI_DOUBLE, &pf.sigma, "X", "noise multiplier (> 0; noise std sigma*C on the clipped sum)", &pf.sigma_seen},
        {"--clip", CLI_DOUBLE, &pf.clip, "C", "per-example clipping norm C (> 0)", NULL},
        {"--clip-mode", CLI_STR, &pf.clip_mode, "MODE", "flat | per-layer (C_l = C / sqrt(G), G the trained layers with parameters)", NULL},
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
        {"--feature-norm", CLI_STR, &fn.mode, "MODE", "none (default) | dp: set the model's fbn layer (frozen BatchNorm, "
                                                     "e.g. scatter,fbn,...) from DP per-channel means and variances of "
                                                     "its input over the training set (Tramer & Boneh 2021): two "
                                                     "Gaussian releases, in the ledger and the epsilon and in the "
                                                     "--target-epsilon calibration; freeze the layer (--freeze fbn1); "
                                                     "a --resume keeps the checkpoint's statistics (docs/nn.md)", NULL},
        {"--feature-norm-sigma", CLI_DOUBLE, &fn.sigma, "S", "--feature-norm dp: noise multiplier of each release "
                                                            "(> 0; Tramer & Boneh use 8)", &fn.sigma_seen},
        {"--feature-norm-clip", CLI_STR, &fn.clip, "C[,C2]", "--feature-norm dp: L2 bound on each example's vector of "
                                                             "channel means, and C2 on its channel mean squares "
                                                             "(default C)", &fn.clip_seen},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    (void)preset; /* expanded by dpt_cmd_train before parsing; listed here for --help */
    cli_option *opts = build_table(common, priv);
    if (!opts) return cli_failf("out of memory");
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
                        .epochs = epochs, .quiet = quiet, .resume = resume, .overwrite = overwrite, .out = out};
    if (A->check && (rc = A->check(&ctx)) != 0) return rc;
    sampler = ctx.sampler;
    if (!strcmp(sampler, "full") && (batch_seen || sample_rate_seen))
        return cli_error("%s: the full-batch sampler uses every training example in each step (it would be "
                         "ignored)", batch_seen ? "--batch-size" : "--sample-rate");
    if (dpt_optim_parse(optimizer, &cfg.optim.kind) != DPT_OK) return cli_error("--optimizer: %s", dpt_last_error());
    cfg.optim = dpt_optim_defaults(cfg.optim.kind);
    cfg.optim.lr = lr_seen ? lr : cfg.optim.lr;
    if (momentum_seen && cfg.optim.kind != DPT_OPT_SGD)
        return cli_error("--momentum applies to --optimizer sgd only (adam keeps its own moment estimates)");
    cfg.optim.momentum = momentum;
    cfg.optim.weight_decay = weight_decay;
    if (dpt_optim_validate(&cfg.optim) != DPT_OK) return cli_error("--lr/--momentum/--weight-decay: %s", dpt_last_error());
    if (dpt_schedule_parse(schedule, &cfg.schedule) != DPT_OK) return cli_error("--lr-schedule: %s", dpt_last_error());
    if (targets < 0 || targets > 1000000) return cli_error("--targets must be in [1, 1000000], got %ld", targets);
    if (targets) { /* regression: checked before the data are loaded */
        if (strncmp(dataset, "csv:", 4))
            return cli_error("--targets: --dataset %s has class labels; regression targets come from csv:PATH[,TEST] "
                             "files", dataset);
        if (classes) return cli_error("--classes: not with --targets (regression data have no classes)");
        if (!A->regression)
            return cli_error("--targets: not with --algo %s (--algo sgd, dpsgd, pdp-sgd and proportional-noise train "
                             "on regression targets)", A->name);
        if (!loss_seen) loss = "mse";
    }
    if (seq_len_seen) { /* the length becomes part of the name, so eval, audit and --resume rebuild the same data */
        if (seq_len < 1 || seq_len > (1L << 20)) return cli_error("--seq-len must be in [1, 2^20], got %ld", seq_len);
        if (strcmp(dataset, "fortunes-topic") && strcmp(dataset, "fortunes-chars"))
            return cli_error("--seq-len: only with --dataset fortunes-topic or fortunes-chars (got %s)", dataset);
        snprintf(seq_dataset, sizeof seq_dataset, "%s:%ld", dataset, seq_len);
        dataset = seq_dataset;
    }
    if (dpt_loss_parse(loss, &cfg.loss) != DPT_OK) return cli_error("--loss: %s", dpt_last_error());
    if (targets && cfg.loss != DPT_LOSS_SQUARED && cfg.loss != DPT_LOSS_TOKEN_CE)
        return cli_error("--loss %s: regression targets (--targets) train with --loss mse (or token-ce: next-token "
                         "ids)", loss);
    if (!targets && cfg.loss == DPT_LOSS_TOKEN_CE)
        return cli_error("--loss token-ce: needs the next tokens as --targets T (token ids per example)");
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
    if (physical_batch < 0) return cli_error("--physical-batch must be >= 0 (0 = the whole batch), got %ld", physical_batch);
    if (!strcmp(augment, "none")) cfg.augment = DPT_AUGMENT_NONE;
    else if (!strcmp(augment, "crop")) cfg.augment = DPT_AUGMENT_CROP;
    else if (!strcmp(augment, "crop-flip")) cfg.augment = DPT_AUGMENT_CROP_FLIP;
    else return cli_error("--augment: expected none | crop | crop-flip, got '%s'", augment);
    if (aug_mult < 1 || aug_mult > 64) return cli_error("--aug-mult must be in [1, 64], got %ld", aug_mult);
    if (ema_warmup && !(ema > 0)) return cli_error("--ema-warmup: only with --ema DECAY");
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
    if (validation < 0) return cli_error("--validation must be >= 0, got %ld", validation);
    if (validation && max_test) return cli_error("--max-test: not with --validation (the test split is not read)");
    if (validation) g_eval = "validation";
    if (sample_rate_seen && !(sample_rate > 0.0 && sample_rate <= 1.0))
        return cli_error("--sample-rate must be in (0, 1], got %g", sample_rate);
    if (sample_rate_seen && cfg.sampler != DPT_SAMPLER_POISSON && cfg.sampler != DPT_SAMPLER_POISSON_REJECT)
        return cli_error("--sample-rate needs --sampler poisson (or poisson-reject)");
    if (!out || !*out) return cli_error("--out: empty directory name");
    /* without --out: a new directory per run, so the same command can run again; runs/latest
     * names the newest (a --resume without --out continues it). Rank 0 names it for all. */
    char auto_out[64];
    if (!out_seen && !resume) {
        if (rank == 0 && dpt_run_dir_new_name("runs", auto_out, sizeof auto_out) != DPT_OK) return cli_fail("--out");
        if (dpt_comm_size() > 1 && dpt_comm_bcast(auto_out, sizeof auto_out, 0) != DPT_OK) return cli_fail("--out");
        out = auto_out;
        ctx.out = out;
    }
    if (resume && overwrite) return cli_error("--resume and --overwrite exclude each other");
    if (secret_dir && !*secret_dir) return cli_error("--secret-dir: empty directory name");
    if (rank == 0 && !resume && !overwrite) {
        /* checked again under the run directory's lock when training starts */
        size_t n_in = 0;
        char names[256];
        dpt_status is = dpt_run_dir_inspect(out, &n_in, names, sizeof names);
        if (is != DPT_OK) return cli_refuse(is, "--out");
        if (n_in)
            return cli_error("--out %s is not empty (it holds %s%s): add --resume to continue the run in it, or "
                             "--overwrite to replace that run (its files are removed first)", out, names,
                             n_in > 6 ? ", ..." : "");
    }

    /* --init-from: checked (and its model taken) before the data are loaded */
    if (init_from && A->random_init_only)
        return cli_error("--init-from: not with --algo %s (what it reports is a statement about its random "
                         "initialization, --init)", A->name);
    if (init_from && init_seen) return cli_init_from_refuse_init();
    cli_init_from ifr;
    memset(&ifr, 0, sizeof ifr);
    if (init_from && (rc = cli_init_from_open(&ifr, init_from, resume, overwrite, out)) == 0 && !model_seen)
        model = dpt_checkpoint_spec(ifr.ck);
    if (init_from && (rc || (rc = cli_init_from_same_model(&ifr, model)) != 0)) {
        cli_init_from_close(&ifr);
        return rc;
    }
    if (no_feature_cache && !freeze && !strstr(model, "scatter")) { /* a scattering layer is cached unfrozen */
        cli_init_from_close(&ifr);
        return cli_error("--no-feature-cache: only with --freeze or a scatter layer (without frozen or fixed layers "
                         "there is nothing to cache)");
    }
    /* --freeze: checked against the model before the data are loaded */
    if (freeze && (rc = check_freeze(A, freeze, model)) != 0) {
        cli_init_from_close(&ifr);
        return rc;
    }
    /* Seed 0: drawn from the OS here, so the releases made before the trainer (DP
     * normalization, DP-PCA) and the training use one secret seed; a resume takes the run's
     * from its secret file (those releases are then regenerated, never drawn anew). Every
     * rank uses rank 0's. */
    int seed_from_os = 0;
    if (seed == 0) {
        dpt_status ss = rank == 0 ? dpt_run_seed_resolve_at(out, secret_dir, resume, &seed, &seed_from_os) : DPT_OK;
        if (ss == DPT_OK && dpt_comm_size() > 1) {
            uint64_t msg[2] = {seed, (uint64_t)seed_from_os};
            ss = dpt_comm_bcast(msg, sizeof msg, 0);
            seed = msg[0], seed_from_os = (int)msg[1];
        }
        if (ss != DPT_OK) {
            cli_init_from_close(&ifr);
            return cli_refuse(ss, "--resume");
        }
    }
    cfg.seed_from_os = seed_from_os;
    cli_data_opts dopts = {.dataset = dataset, .data_dir = data_dir, .normalize = normalize, .classes = classes,
                           .max_train = max_train, .max_test = max_test, .targets = targets,
                           .validation = validation};
    dopts.private_ = A->uses_privacy_flags || A->states_privacy;
    dopts.dp_ok = A->uses_privacy_flags;
    dopts.unaccounted = norm_unaccounted;
    dopts.norm_sigma = norm_sigma, dopts.norm_sigma_seen = norm_sigma_seen;
    dopts.norm_clip = norm_clip, dopts.norm_clip_seen = norm_clip_seen;
    dopts.seed = seed, dopts.secure = pf.secure, dopts.threads = (int)threads;
    if ((rc = cli_norm_check(&dopts)) != 0) {
        cli_init_from_close(&ifr);
        return rc;
    }
    if ((rc = feature_norm_check(&fn)) != 0) {
        cli_init_from_close(&ifr);
        return rc;
    }
    if (pf.target_eps_seen && !resume && (rc = check_planned_releases(A, &ctx, &dopts, &pf, &fn, model)) != 0) {
        cli_init_from_close(&ifr);
        return rc;
    }
    char *resume_run = NULL;
    if (resume) { /* continue with the statistics the run stored (no new fit, no new release) */
        char ck[1100];
        snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", out);
        dopts.reuse_run = resume_run = cli_checkpoint_run_json(ck);
        /* the same kind of data: a run trained on targets resumes with the same --targets */
        cJSON *rr = resume_run ? cJSON_Parse(resume_run) : NULL;
        long had = 0;
        if (rr && cli_run_targets(rr, &had) == DPT_OK && had != targets) {
            cJSON_Delete(rr);
            free(resume_run);
            cli_init_from_close(&ifr);
            if (!had) return cli_error("--targets %ld: the run in %s was trained on class labels (no --targets)", targets, out);
            return cli_error("--targets: the run in %s was trained with --targets %ld; resume with the same", out, had);
        }
        const cJSON *hv = rr ? cJSON_GetObjectItemCaseSensitive(rr, "validation") : NULL;
        const long held = cJSON_IsNumber(hv) ? (long)hv->valuedouble : 0;
        if (rr && held != validation) {
            cJSON_Delete(rr);
            free(resume_run);
            cli_init_from_close(&ifr);
            if (!held) return cli_error("--validation %ld: the run in %s evaluated on the test split (no --validation)",
                                        validation, out);
            return cli_error("--validation: the run in %s held out %ld examples (--validation %ld); resume with the "
                             "same", out, held, held);
        }
        cJSON_Delete(rr);
    }
    dpt_dataset train, test;
    memset(&train, 0, sizeof train);
    memset(&test, 0, sizeof test);
    char *run_json = NULL;
    cli_norm_info norm;
    double t_load = dpt_now();
    dpt_status ls = cli_load_run_data(&dopts, &train, &test, &run_json, &norm);
    if (ls != DPT_OK) {
        int r = cli_refuse(ls, "--dataset");
        dpt_dataset_free(&train);
        dpt_dataset_free(&test);
        free(resume_run);
        cli_init_from_close(&ifr);
        return r;
    }
    ctx.resume_run = resume_run; /* freed at the end: dpmac reuses its releases from it */
    t_load = dpt_now() - t_load;
    struct dpt_ledger *prior = NULL;
    dpt_algo *algo = NULL;
    dpt_trainer *t = NULL;
    train_ui ui;
    memset(&ui, 0, sizeof ui);
    int exit_code = 0;
    {
        /* the planned steps (dpt_sampler_steps_for_epochs, the trainer's rule) must fit the
         * step counters: the trainer checks it too, but an algorithm may calibrate its noise
         * for that many steps before */
        uint64_t planned = 0;
        dpt_status ps = dpt_sampler_steps_for_epochs(cfg.sampler, train.n, (size_t)batch,
                                                     sample_rate_seen ? sample_rate : 0, (uint64_t)epochs, &planned);
        /* too many steps, or a --sample-rate (already in (0, 1]) below 2^-53; a --batch-size
         * outside [1, N] is left to the trainer's message */
        if (ps == DPT_ERANGE || (ps != DPT_OK && sample_rate_seen)) {
            exit_code = cli_error("%s: %s", ps == DPT_ERANGE ? "--epochs" : "--sample-rate", dpt_last_error());
            goto done;
        }
    }
    if (pf.allow_mismatch && !resume) {
        exit_code = cli_error("--allow-ledger-mismatch: only with --resume (a fresh run starts its own ledger)");
        goto done;
    }
    struct stat out_st;
    if (resume && stat(out, &out_st) != 0 && errno == ENOENT) {
        exit_code = cli_error("--resume: --out %s does not exist: there is no run to resume", out);
        goto done;
    }
    cfg.model_spec = model;
    cfg.freeze = freeze;
    cfg.no_feature_cache = no_feature_cache;
    cfg.batch_size = (size_t)batch;
    cfg.sample_rate = sample_rate;
    cfg.epochs = (uint64_t)epochs;
    cfg.seed = seed;
    cfg.threads = (int)threads;
    cfg.out_dir = out;
    cfg.secret_dir = secret_dir;
    cfg.max_steps = max_steps;
    cfg.physical_batch = (size_t)physical_batch;
    cfg.ema_decay = ema;
    cfg.ema_warmup = ema_warmup;
    cfg.aug_mult = (size_t)aug_mult;
    cfg.shards = (size_t)shards;
    cfg.overwrite = overwrite;
    ui.progress = !no_progress && !quiet && cli_stderr_is_tty();
    ui.quiet = quiet;
    ui.epochs = (uint64_t)epochs;
    ui.max_steps = max_steps;
    cfg.on_step = ui_on_step;
    cfg.on_epoch = ui_on_epoch;
    cfg.log = ui_log;
    cfg.user = &ui;
    cfg.run_json = run_json;
    if (validation) cfg.eval_split = "validation";
    ctx.train = &train;
    ctx.test = &test;
    if ((exit_code = cli_norm_prior(&norm, &prior)) != 0) goto done;
    if (fn.on && !resume && ((!prior && dpt_ledger_new(&prior) != DPT_OK) ||
                             feature_norm_events(&fn, pf.secure, model, prior) != DPT_OK)) {
        exit_code = cli_fail("--feature-norm");
        goto done;
    }
    ctx.prior = prior;
    if ((exit_code = A->make(&ctx, &algo)) != 0) goto done;
    /* the trainer creates its directory itself (one level: --out, or noisy-gd's --out/run1),
     * and removes it again when the run fails before writing anything into it */
    if (rank == 0 && cli_make_parents(cfg.out_dir) != 0) {
        exit_code = cli_error("--out %s: cannot create its parent directories: %s", out, strerror(errno));
        goto done; /* frees algo */
    }
    const dpt_algo *algo_view = algo; /* for --trace; owned by the trainer from here on */
    dpt_status ns = dpt_trainer_new(&cfg, &train, &test, algo, &t);
    if (ns != DPT_OK) {
        algo = NULL; /* owned (and freed) by dpt_trainer_new even on failure */
        exit_code = cli_fail("train");
        /* a setting refused before anything ran is a usage error, as a bad flag value is */
        if (ns == DPT_EINVAL) exit_code = 2;
        if (ifr.ck && !model_seen)
            fprintf(stderr, "dptrain: note: the model is --init-from %s's (%s)\n", init_from, model);
        goto done;
    }
    algo = NULL;
    if (!out_seen && !resume && rank == 0) cli_link_latest(out); /* the directory exists (locked) now */
    if (ifr.ck && (exit_code = cli_init_from_start(&ifr, t)) != 0) goto done;
    if (resume && (ns = dpt_trainer_resume(t)) != DPT_OK) {
        int sigma_changed = strstr(dpt_last_error(), "; sigma was") || strstr(dpt_last_error(), "says sigma was");
        exit_code = cli_refuse(ns, "--resume"); /* the run in --out cannot be continued so: nothing ran */
        /* the noise multiplier came from --target-epsilon, calibrated for this --epochs */
        if (sigma_changed && pf.target_eps_seen && !pf.sigma_seen)
            fprintf(stderr, "dptrain: note: sigma was not given: --target-epsilon calibrated it for --epochs %ld, and "
                            "a resumed run keeps its noise; give the run's --sigma (--target-epsilon then stops it at "
                            "the budget) or its original --epochs\n", epochs);
        goto done;
    }
    if (A->started && (exit_code = A->started(&ctx, t)) != 0) goto done;
    if (trace_path && rank == 0) {
        /* warns on stderr itself when the file holds what no epsilon covers */
        if ((exit_code = cli_trace_open(trace_path, resume, t, algo_view, &ui.trace)) != 0) goto done;
    }
    if ((exit_code = cli_norm_record(&norm, t, resume)) != 0) goto done;
    /* a preset's hyperparameter measured on the training data: said in the ledger and the output */
    if (validation && dopts.private_ && dpt_trainer_exclude_from_guarantee(t, VALIDATION_NOTE) != DPT_OK) {
        exit_code = cli_fail("--validation");
        goto done;
    }
    const char *preset_ex = cli_preset_excludes();
    if (preset_ex && dpt_trainer_exclude_from_guarantee(t, preset_ex) != DPT_OK) {
        exit_code = cli_fail("--preset");
        goto done;
    }
    /* a fresh run releases the feature statistics now, before any step; a resumed one
     * keeps its checkpoint's (the fbn layer's parameters) and its ledger the releases */
    if (fn.on && !resume && (ns = dpt_trainer_feature_norm(t, fn.sigma, fn.c1, fn.c2)) != DPT_OK) {
        exit_code = cli_refuse(ns, "--feature-norm");
        goto done;
    }
    if (!quiet) {
        dpt_model *m = dpt_trainer_model(t);
        fprintf(stderr, "dptrain train: %s (%zu train / %zu %s, loaded in %.1fs), model %s (%zu parameters)\n",
                dataset, train.n, test.n, g_eval, t_load, model, m->n_params);
        if (A->describe) A->describe(&ctx, stderr);
        if (ifr.ck) fprintf(stderr, "  initial parameters: %s\n", ifr.source);
        size_t trained = 0;
        const char *frozen = dpt_trainer_frozen(t, &trained);
        if (frozen[0])
            fprintf(stderr, "  frozen layers: %s (they keep their starting values); %zu of %zu parameters train\n",
                    frozen, trained, m->n_params);
        if (!strncmp(dataset, "csv:", 4) && !strchr(dataset, ','))
            fprintf(stderr, "  test set: the training set itself (csv:PATH without ,TEST): the test metrics below "
                            "measure fit to the training data, not generalization\n");
        fprintf(stderr, "  %s\n", norm.note);
        if (fn.on)
            fprintf(stderr, "  feature normalization: %s (clips %g and %g, noise multiplier %g; ledger events "
                            "\"dp-feature-norm-mean\" and \"dp-feature-norm-sq\", in the epsilon)\n",
                    resume ? "the DP statistics the checkpoint holds" : "fbn set from DP channel statistics of its input",
                    fn.c1, fn.c2, fn.sigma);
        if (dpt_comm_size() > 1)
            fprintf(stderr, "  data parallel: %d MPI ranks (%s), %zu shards%s, rank 0 writes %s\n",
                    dpt_comm_size(), dpt_comm_library(), dpt_trainer_shards(t),
                    A->uses_privacy_flags ? ", one noise draw per step" : "", out);
    }
    dpt_epoch_result r;
    const uint64_t step0 = dpt_trainer_step(t);
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    int sig_set = rank == 0 && sigaction(SIGINT, &sa, &old_sa) == 0;
    ui.t_start = dpt_now();
    ui.step_start = step0;
    dpt_status rs = dpt_trainer_run(t, &r);
    if (sig_set) sigaction(SIGINT, &old_sa, NULL);
    ui_clear_bar(&ui);
    if (ui.trace_failed) {
        exit_code = 1; /* cli_trace_step said why; the trainer stopped after saving the step */
        goto done;
    }
    if (rs != DPT_OK) {
        exit_code = cli_fail("train");
        goto done;
    }
    if (A->report && (exit_code = A->report(&ctx, t)) != 0) goto done;
    cli_norm_report(&norm, t);
    print_summary(t, &r, A, out, cfg.out_dir, epochs, dpt_trainer_step(t) - step0);
    /* a budget that refuses even the first step of a fresh run is an error, as in Python
     * (PrivacyError): a script must not take it for a trained model */
    if (dpt_trainer_stop_reason(t) == DPT_STOP_BUDGET && dpt_trainer_step(t) == 0) exit_code = 1;
    if (dpt_trainer_stop_reason(t) == DPT_STOP_CALLBACK && g_interrupted) {
        fprintf(stderr, "dptrain: interrupted after step %" PRIu64 ": the checkpoint, ledger and metrics are saved in "
                        "%s; continue with the same command and --resume\n", dpt_trainer_step(t), out);
        exit_code = 130;
    }
done:
    if (cli_trace_close(ui.trace) != 0 && !exit_code) exit_code = 1;
    if (algo && algo->free) algo->free(algo);
    dpt_trainer_free(t);
    dpt_dataset_free(&train);
    dpt_dataset_free(&test);
    dpt_ledger_free(prior);
    cli_init_from_close(&ifr);
    free(run_json);
    free(resume_run);
    return exit_code;
}

int dpt_cmd_train(int argc, char **argv) {
    int n = argc;
    char **v = argv, *storage = NULL;
    int rc = cli_preset_expand(argc, argv, &n, &v, &storage);
    if (rc) return rc;
    if (v != argv) {
        int quiet = 0;
        for (int i = 1; i < argc; i++) quiet |= !strcmp(argv[i], "--quiet") || !strcmp(argv[i], "--help") ||
                                                !strcmp(argv[i], "-h");
        if (!quiet) {
            fprintf(stderr, "dptrain: preset flags (the flags given after them override):");
            for (int i = 1; i < n - (argc - 1); i++) fprintf(stderr, " %s", v[i]);
            fprintf(stderr, "\n");
        }
    }
    rc = cmd_train(n, v);
    cli_preset_free(v, argv, storage);
    return rc;
}
