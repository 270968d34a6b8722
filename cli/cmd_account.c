/* dptrain account: epsilon of DP-SGD (Poisson-sampled Gaussian) under the RDP or PLD
 * accountant, noise calibration for a target epsilon, or the report of a saved ledger. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "dptrain/accounting.h"
#include "dptrain/inference.h"
#include "dptrain/train.h"

static const char *USAGE =
    "usage: dptrain account --sample-rate Q | --batch-size B --dataset-size N\n"
    "                       (--sigma S | --target-epsilon E) (--steps T | --epochs E) [options]\n"
    "       dptrain account --algo dpulr --batch-size B --dataset-size N --sigma S (--steps T | --epochs E)\n"
    "                       [--min-batch N_B]\n"
    "       dptrain account --ledger FILE [--delta D] [--json]\n"
    "       dptrain account --kl-bound --init I --input-dim d --outputs o --width m --depth L [...]\n"
    "                       (KL closed forms of noisy GD; see dptrain account --kl-bound --help)\n\n"
    "Privacy spent by DP-SGD with Poisson sampling at rate q and Gaussian noise multiplier\n"
    "sigma (add/remove adjacency), or the smallest sigma that meets a target epsilon.\n"
    "With --epochs E, steps = E x max(1, round(1/q)), the steps `dptrain train --epochs E` takes\n"
    "(q = B/N; an epoch is a whole number of steps, docs/accounting.md).\n"
    "--algo dpulr: DP-ULR's Poisson sampling with rejection of batches smaller than N_B\n"
    "(per step: the rejection bound of docs/dpulr.md, at least the SGM RDP of sigma = sigma0; RDP accountant only).";

typedef struct {
    double q, sigma, delta, target, eps, order;
    uint64_t steps;
    int at_edge;
} acct_result;

static int parse_pos_double(const char *flag, const char *s, double *out) {
    if (cli_parse_double(flag, s, out)) return 2;
    if (!(*out > 0)) return cli_error("%s: must be > 0, got '%s'", flag, s);
    return 0;
}

static int parse_pos_u64(const char *flag, const char *s, uint64_t *out) {
    if (cli_parse_u64(flag, s, out)) return 2;
    if (*out < 1) return cli_error("%s: must be >= 1, got '%s'", flag, s);
    return 0;
}

/* Prints o as one line and frees it: 0, or exit status 1 when it cannot be printed (out
 * of memory), rather than printing nothing and succeeding. */
static int print_json(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) return cli_failf("--json: out of memory");
    printf("%s\n", s);
    cJSON_free(s);
    return 0;
}

/* ==== --ledger ==== */

/* The ledger inside a checkpoint (a run's checkpoint, or Model.save's file), as an owned copy. */
static int checkpoint_ledger(const char *path, dpt_ledger **out) {
    dpt_checkpoint *ck = NULL;
    dpt_status st = dpt_checkpoint_open(path, 1, &ck);
    if (st != DPT_OK) return cli_refuse(st, "--ledger");
    const dpt_ledger *v = dpt_checkpoint_ledger(ck);
    int rc = !v ? cli_error("--ledger %s: a checkpoint of a non-private run (%s): it has no privacy ledger", path,
                            dpt_checkpoint_algorithm(ck)[0] ? dpt_checkpoint_algorithm(ck) : "no algorithm recorded")
             : dpt_ledger_copy(v, out) != DPT_OK ? cli_fail("--ledger") : 0;
    dpt_checkpoint_close(ck);
    return rc;
}

/* a text of the ledger's metadata on the terminal, as cli_text_clean makes it (a ledger
 * file may hold anything; the JSON output escapes it instead) */
static void print_text(const char *label, const char *s) {
    char *t = strdup(s);
    if (t) cli_text_clean(t);
    printf("%s%s\n", label, t ? t : "(out of memory)");
    free(t);
}

static int report_ledger(const char *path, double delta, dpt_conversion conv, const double *orders,
                         size_t n_orders, const char *acct_name, int json) {
    dpt_ledger *l = NULL;
    size_t plen = strlen(path);
    const int in_ck = plen >= 12 && !strcmp(path + plen - 12, ".safetensors");
    dpt_status ls;
    if (in_ck) {
        int rc = checkpoint_ledger(path, &l);
        if (rc) return rc;
    } else if ((ls = dpt_ledger_load(path, &l)) != DPT_OK) {
        return cli_refuse(ls, "--ledger");
    }
    /* a checkpoint beside the ledger must be of the same run (the run id in both) */
    const char *slash = strrchr(path, '/');
    char ck[1200];
    snprintf(ck, sizeof ck, "%.*scheckpoint.safetensors", slash ? (int)(slash - path + 1) : 0, path);
    dpt_status chk = !in_ck && access(ck, F_OK) == 0 ? dpt_run_check_ledger(ck, path) : DPT_OK;
    if (chk == DPT_EMISMATCH) { /* another run's ledger, or one that lost steps */
        dpt_ledger_free(l);
        return cli_refuse(chk, "--ledger");
    }
    if (chk != DPT_OK) /* an unreadable checkpoint does not make the (checksummed) ledger wrong */
        fprintf(stderr, "dptrain: warning: could not check that %s belongs to the checkpoint beside it (%s); the "
                        "ledger's own checksum holds: reporting it alone\n", path, dpt_last_error());
    double e_rdp = NAN, e_pld = NAN, order = 0;
    int edge = 0;
    if (dpt_ledger_epsilon_rdp(l, delta, conv, orders, n_orders, &e_rdp, &order, &edge) != DPT_OK) {
        dpt_ledger_free(l);
        return cli_fail("RDP accountant");
    }
    int pld = dpt_ledger_pld_applies(l);
    if (pld && dpt_ledger_epsilon(l, delta, DPT_ACCT_PLD, conv, &e_pld) != DPT_OK) {
        dpt_ledger_free(l);
        return cli_fail("PLD accountant");
    }
    /* the headline: the accountant asked for, else the default one (what training reported) */
    int want_pld = acct_name ? !strcmp(acct_name, "pld") : pld && !(e_rdp < e_pld);
    if (want_pld && !pld) {
        dpt_ledger_free(l);
        return cli_error("--accountant pld: this ledger has events the PLD accountant cannot compose "
                         "(RDP curves or (eps, delta) events); use --accountant rdp");
    }
    uint64_t steps = dpt_ledger_steps(l);
    const char *run = dpt_ledger_get_meta(l, "run_id");
    /* a use of the data outside these events (dpt_trainer_exclude_from_guarantee) */
    const char *excl = dpt_ledger_get_meta(l, "epsilon_excludes");
    /* given starting parameters (dpt_trainer_set_initial_params): the epsilon assumes they
     * do not depend on the training data */
    const char *init = dpt_ledger_get_meta(l, "initial_params");
    /* layers that kept their starting values (dpt_train_config.freeze) */
    const char *frozen = dpt_ledger_get_meta(l, "frozen_layers");
    /* "caller": the run's seed was chosen, so whoever knows it can regenerate the noise */
    const char *seed_src = dpt_ledger_get_meta(l, "seed_source");
    /* the labels train and eval print beside this epsilon (dpt_ledger_label) */
    char label[640];
    dpt_ledger_label(l, 1, label, sizeof label);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "ledger", path);
        cJSON_AddStringToObject(o, "accountant", want_pld ? "pld" : "rdp");
        cli_json_number(o, "epsilon", want_pld ? e_pld : e_rdp);
        cli_json_number(o, "delta", delta);
        cJSON_AddNullToObject(o, "sigma");       /* per event in a ledger */
        cJSON_AddNullToObject(o, "sample_rate"); /* per event in a ledger */
        cli_json_number(o, "steps", (double)steps);
        cli_json_number(o, "events", (double)dpt_ledger_n_events(l));
        cli_json_number(o, "epsilon_rdp", e_rdp);
        cJSON_AddStringToObject(o, "conversion", conv == DPT_CONV_BALLE ? "balle" : "classic");
        cli_json_number(o, "order", order);
        cJSON_AddBoolToObject(o, "order_at_edge", edge);
        if (excl) cJSON_AddStringToObject(o, "epsilon_excludes", excl);
        if (init) cJSON_AddStringToObject(o, "initial_params", init);
        if (frozen) cJSON_AddStringToObject(o, "frozen_layers", frozen);
        if (seed_src) cJSON_AddStringToObject(o, "seed_source", seed_src);
        if (label[0]) cJSON_AddStringToObject(o, "privacy_label", label + 2); /* without the leading spaces */
        if (pld)
            cli_json_number(o, "epsilon_pld", e_pld);
        else
            cJSON_AddNullToObject(o, "epsilon_pld");
        int jrc = print_json(o);
        if (jrc) {
            dpt_ledger_free(l);
            return jrc;
        }
    } else {
        printf("ledger          %s\n", path);
        if (run) printf("run id          %s\n", run);
        printf("events          %zu (%llu sampled-Gaussian steps)\n", dpt_ledger_n_events(l),
               (unsigned long long)steps);
        printf("delta           %g\n", delta);
        printf("epsilon         %.4f   (%s%s)\n", want_pld ? e_pld : e_rdp, want_pld ? "PLD" : "RDP",
               acct_name ? "" : ", the default accountant: the one training reports and calibrates with");
        printf("epsilon (RDP)   %.4f   (%s conversion, best order %g)\n", e_rdp,
               conv == DPT_CONV_BALLE ? "Balle et al. 2020" : "classic", order);
        if (pld)
            printf("epsilon (PLD)   %.4f\n", e_pld);
        else
            printf("epsilon (PLD)   n/a (ledger has RDP-curve or (eps, delta) events)\n");
        if (excl) print_text("NOT covered     ", excl);
        if (seed_src && !strcmp(seed_src, "caller"))
            printf("seed            chosen by the caller: whoever knows it can regenerate the batches and the noise; "
                   "the epsilon holds only while it stays secret\n");
        else if (seed_src)
            printf("seed            drawn from the OS (kept in the run's secret file)\n");
        if (init) {
            print_text("started from    ", init);
            printf("                (the epsilon assumes these parameters do not depend on the training data)\n");
        }
        if (frozen) print_text("frozen layers   ", frozen);
        if (label[0]) print_text("labels          ", label + 2);
        if (edge)
            printf("note: the best RDP order %g is at an edge of the order grid; widen it with --orders\n", order);
    }
    dpt_ledger_free(l);
    return 0;
}

/* ==== --algo dpulr ==== */

static int account_dpulr(const acct_result *r, uint64_t N, const char *s_nb, dpt_conversion conv, int json) {
    uint64_t nb = 0;
    double ratio = 0;
    dpt_status st;
    if (s_nb) {
        if (parse_pos_u64("--min-batch", s_nb, &nb)) return 2;
    } else if ((st = dpt_dpulr_default_min_batch(r->q, r->sigma, N, 1e-3, &nb, &ratio)) != DPT_OK) {
        return cli_refuse(st, "--min-batch");
    }
    double rej = 0, eb = 0, ec = 0, ob = 0, oc = 0, sgm = 0;
    /* refuses an N_B outside [1, qN]: a bad --min-batch, as train says */
    if ((st = dpt_dpulr_check(r->q, N, nb)) != DPT_OK) return cli_refuse(st, "account");
    if (dpt_dpulr_epsilon(r->q, r->sigma, N, nb, r->steps, r->delta, DPT_CONV_BALLE, &eb, &ob) != DPT_OK ||
        dpt_dpulr_epsilon(r->q, r->sigma, N, nb, r->steps, r->delta, DPT_CONV_CLASSIC, &ec, &oc) != DPT_OK)
        return cli_fail("DP-ULR accountant");
    double best = conv == DPT_CONV_BALLE ? ob : oc;
    /* the rejection's cost over plain Poisson sampling at the best order (issue 38 bound) */
    if (dpt_dpulr_rdp(r->q, r->sigma, N, nb, best, NULL, &rej, &sgm) != DPT_OK) return cli_fail("DP-ULR accountant");
    double r11 = 0, s11 = 0;
    if (dpt_dpulr_rdp(r->q, r->sigma, N, nb, DPT_DPULR_RATIO_ALPHA, NULL, &r11, &s11) != DPT_OK)
        return cli_fail("DP-ULR accountant");
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "algo", "dpulr");
        cJSON_AddStringToObject(o, "accountant", "rdp");
        cli_json_number(o, "epsilon", conv == DPT_CONV_BALLE ? eb : ec);
        cli_json_number(o, "epsilon_balle", eb);
        cli_json_number(o, "epsilon_classic", ec);
        cli_json_number(o, "delta", r->delta);
        cli_json_number(o, "sigma0", r->sigma);
        cli_json_number(o, "sample_rate", r->q);
        cli_json_number(o, "dataset_size", (double)N);
        cli_json_number(o, "min_batch", (double)nb);
        cli_json_number(o, "steps", (double)r->steps);
        cli_json_number(o, "rejection_cost_at_best_order", rej);
        cli_json_number(o, "sgm_term_at_best_order", sgm);
        cli_json_number(o, "order", best);
        cli_json_number(o, "ratio_at_order_1_1", r11 / s11);
        return print_json(o);
    }
    printf("accountant      DP-ULR: Poisson sampling with rejection + sampled Gaussian (RDP)\n");
    printf("sample rate q   %.6g   (dataset size N %llu, expected batch %.1f)\n", r->q, (unsigned long long)N,
           r->q * (double)N);
    printf("min batch N_B   %llu%s\n", (unsigned long long)nb,
           s_nb ? "" : "   (default: rejection cost <= 1e-3 x SGM term at order 1.1)");
    printf("steps           %llu\n", (unsigned long long)r->steps);
    printf("sigma0          %.6g\n", r->sigma);
    printf("delta           %g\n", r->delta);
    printf("SGM term        %.4g per step at order %g\n", sgm, best);
    printf("rejection cost  %.4g per step at order %g (bound of docs/dpulr.md minus the SGM term)\n", rej, best);
    printf("ratio at a=1.1  %.4g%s\n", r11 / s11, r11 / s11 > 1e-3 ? "   (not negligible: a smaller N_B costs less)" : "");
    printf("epsilon         %.4f   (Balle et al. 2020 conversion, best order %g)\n", eb, ob);
    printf("epsilon         %.4f   (classic conversion, as in the paper, best order %g)\n", ec, oc);
    return 0;
}

/* ==== main ==== */

int dpt_cmd_account(int argc, char **argv) {
    for (int i = 1; i < argc; i++) /* the KL closed forms have their own flags (cli/account_kl.c) */
        if (!strcmp(argv[i], "--kl-bound")) return dpt_cmd_account_kl(argc, argv);
    const char *s_q = NULL, *s_b = NULL, *s_n = NULL, *s_sigma = NULL, *s_steps = NULL,
               *s_epochs = NULL, *s_target = NULL, *s_orders = NULL, *ledger = NULL, *s_nb = NULL;
    const char *algo = "dpsgd";
    const char *acct_name = NULL, *conv_name = "balle";
    int conv_seen = 0;
    double delta = 1e-5, tol = 1e-4;
    int json = 0, tol_seen = 0;
    const cli_option opts[] = {
        {"--sample-rate", CLI_STR, &s_q, "Q", "Poisson sampling rate q in (0, 1]", NULL},
        {"--batch-size", CLI_STR, &s_b, "B", "expected batch size (with --dataset-size: q = B/N)", NULL},
        {"--dataset-size", CLI_STR, &s_n, "N", "number of training examples", NULL},
        {"--sigma", CLI_STR, &s_sigma, "S", "noise multiplier (noise std / clipping norm), > 0", NULL},
        {"--steps", CLI_STR, &s_steps, "T", "number of noisy steps, >= 1", NULL},
        {"--epochs", CLI_STR, &s_epochs, "E", "whole epochs instead of steps: steps = E x max(1, round(1/q)), as training runs them", NULL},
        {"--delta", CLI_DOUBLE, &delta, "D", "target delta in (0, 1)", NULL},
        {"--accountant", CLI_STR, &acct_name, "pld|rdp",
         "accountant (default: the one training uses: the smaller of PLD and RDP, PLD in practice; RDP with "
         "--orders, --conversion or --algo dpulr)", NULL},
        {"--conversion", CLI_STR, &conv_name, "balle|classic",
         "RDP to (eps, delta): Balle et al. 2020 Thm. 21, or classic eps = rdp - log(delta)/(alpha-1)", &conv_seen},
        {"--orders", CLI_STR, &s_orders, "LIST",
         "comma-separated RDP orders > 1 (default: 1.1..10.9 step 0.1, 11..64, then up to 1024)", NULL},
        {"--target-epsilon", CLI_STR, &s_target, "E", "calibrate: smallest sigma with epsilon <= E", NULL},
        {"--tolerance", CLI_DOUBLE, &tol, "X", "calibration tolerance on sigma (with --target-epsilon)", &tol_seen},
        {"--ledger", CLI_STR, &ledger, "FILE", "report a ledger saved by a training run (both accountants): ledger.json, or a checkpoint (*.safetensors) holding one", NULL},
        {"--json", CLI_FLAG, &json, NULL, "print one JSON object instead of a table", NULL},
        {"--algo", CLI_STR, &algo, "NAME", "dpsgd (Poisson sampling) | dpulr (Poisson sampling with rejection)", NULL},
        {"--min-batch", CLI_STR, &s_nb, "N_B", "dpulr: rejection threshold in [1, qN] (default: the 1e-3 rule)", NULL},
        {NULL, CLI_FLAG, NULL, NULL, NULL, NULL}};
    int rc = cli_parse(argc, argv, 1, opts, USAGE);
    if (rc < 0) return 0;
    if (rc) return rc;

    if (!(delta > 0 && delta < 1)) return cli_error("--delta: must be in (0, 1), got %g", delta);
    dpt_accountant acct;
    if (!acct_name) acct = s_orders || conv_seen || !strcmp(algo, "dpulr") ? DPT_ACCT_RDP : DPT_ACCT_DEFAULT;
    else if (!strcmp(acct_name, "rdp")) acct = DPT_ACCT_RDP;
    else if (!strcmp(acct_name, "pld")) acct = DPT_ACCT_PLD;
    else return cli_error("--accountant: expected pld or rdp, got '%s'", acct_name);
    dpt_conversion conv;
    if (!strcmp(conv_name, "balle")) conv = DPT_CONV_BALLE;
    else if (!strcmp(conv_name, "classic")) conv = DPT_CONV_CLASSIC;
    else return cli_error("--conversion: expected balle or classic, got '%s'", conv_name);
    if (conv_seen && acct == DPT_ACCT_PLD && !ledger)
        return cli_error("--conversion: converts RDP to (epsilon, delta); --accountant pld gives epsilon directly (it "
                         "would be ignored)");
    if (!(tol > 0)) return cli_error("--tolerance: must be > 0, got %g", tol);
    if (tol_seen && !s_target) return cli_error("--tolerance: only used with --target-epsilon (it would be ignored)");

    double *orders = NULL;
    size_t n_orders = 0;
    if (s_orders) {
        if ((rc = cli_parse_double_list("--orders", s_orders, &orders, &n_orders)) != 0) return rc;
        for (size_t i = 0; i < n_orders; i++)
            if (!(orders[i] > 1)) {
                double bad = orders[i];
                free(orders);
                return cli_error("--orders: every order must be > 1, got %g", bad);
            }
    }
    int dpulr = !strcmp(algo, "dpulr");
    if (!dpulr && strcmp(algo, "dpsgd")) {
        free(orders);
        return cli_error("--algo: expected dpsgd or dpulr, got '%s'", algo);
    }
    if (s_nb && !dpulr) {
        free(orders);
        return cli_error("--min-batch: only with --algo dpulr");
    }
    if (dpulr && (ledger || s_target || acct == DPT_ACCT_PLD || s_orders)) {
        free(orders);
        return cli_error("--algo dpulr: takes --batch-size/--dataset-size (or --sample-rate with --dataset-size), "
                         "--sigma, --steps/--epochs, --min-batch; not %s", ledger ? "--ledger (report a ledger "
                         "without --algo)" : s_target ? "--target-epsilon" : s_orders ? "--orders" : "--accountant pld");
    }
    if (ledger) {
        if (s_q || s_b || s_n || s_sigma || s_steps || s_epochs || s_target) {
            free(orders);
            return cli_error("--ledger: cannot be combined with --sample-rate, --batch-size, --dataset-size, "
                             "--sigma, --steps, --epochs or --target-epsilon");
        }
        rc = report_ledger(ledger, delta, conv, orders, n_orders, acct_name, json);
        free(orders);
        return rc;
    }

    acct_result r = {.delta = delta};
    rc = 0;
    /* sampling rate */
    if (s_q && (s_b || (s_n && !dpulr))) rc = cli_error("--sample-rate: give either --sample-rate or --batch-size with --dataset-size");
    else if (s_q) {
        if (cli_parse_double("--sample-rate", s_q, &r.q)) rc = 2;
        else if (!(r.q > 0 && r.q <= 1)) rc = cli_error("--sample-rate: must be in (0, 1], got '%s'", s_q);
    } else if (s_b || (s_n && !dpulr)) {
        uint64_t b = 0, n = 0;
        if (!s_b) rc = cli_error("--batch-size: required with --dataset-size");
        else if (!s_n) rc = cli_error("--dataset-size: required with --batch-size");
        else if (parse_pos_u64("--batch-size", s_b, &b) || parse_pos_u64("--dataset-size", s_n, &n)) rc = 2;
        else if (b > n) rc = cli_error("--batch-size: %llu exceeds --dataset-size %llu", (unsigned long long)b,
                                       (unsigned long long)n);
        else r.q = (double)b / (double)n;
    } else {
        rc = cli_error("--sample-rate: required (or --batch-size with --dataset-size)");
    }
    /* steps */
    if (!rc) {
        if (s_steps && s_epochs) rc = cli_error("--steps: give either --steps or --epochs, not both");
        else if (s_steps) rc = parse_pos_u64("--steps", s_steps, &r.steps);
        else if (s_epochs) {
            /* the trainer's rule (dpt_sampler_steps_for_epochs): whole epochs of round(1/q) steps */
            uint64_t e = 0;
            char *end = NULL;
            const double ed = strtod(s_epochs, &end);
            if (end != s_epochs && !*end && isfinite(ed) && ed > 0 && ed != floor(ed))
                rc = cli_error("--epochs: %s is not a whole number: training runs whole epochs of max(1, round(1/q)) "
                               "steps; give --steps for a part of one", s_epochs);
            else if (parse_pos_u64("--epochs", s_epochs, &e)) rc = 2;
            else {
                dpt_status es = dpt_sampler_steps_for_epochs(dpulr ? DPT_SAMPLER_POISSON_REJECT : DPT_SAMPLER_POISSON,
                                                             0, 0, r.q, e, &r.steps);
                if (es != DPT_OK) rc = cli_error("--epochs: %s", dpt_last_error());
            }
        } else {
            rc = cli_error("--steps: required (or --epochs)");
        }
    }
    /* sigma or target */
    if (!rc) {
        if (s_sigma && s_target) rc = cli_error("--target-epsilon: calibrates sigma, so it cannot be combined with --sigma");
        else if (s_target) rc = parse_pos_double("--target-epsilon", s_target, &r.target);
        else if (s_sigma) rc = parse_pos_double("--sigma", s_sigma, &r.sigma);
        else rc = cli_error("--sigma: required (or --target-epsilon to calibrate it)");
    }
    if (!rc && acct == DPT_ACCT_PLD && s_orders) rc = cli_error("--orders: only used by the RDP accountant");
    if (!rc && dpulr) {
        uint64_t n = 0;
        if (!s_n) rc = cli_error("--dataset-size: --algo dpulr needs the dataset size N (the rejection bound depends on it)");
        else if (parse_pos_u64("--dataset-size", s_n, &n)) rc = 2;
        else if (!(r.q < 1)) rc = cli_error("--sample-rate: --algo dpulr needs q < 1, got %g", r.q);
        else {
            free(orders);
            return account_dpulr(&r, n, s_nb, conv, json);
        }
    }
    if (rc) {
        free(orders);
        return rc;
    }

    dpt_status st = DPT_OK;
    if (s_target) {
        /* the same accountant, conversion and order grid as the report below */
        st = dpt_calibrate_sigma_ex(r.q, r.steps, r.delta, r.target, acct, conv, orders, n_orders, tol, &r.sigma);
        if (st != DPT_OK) {
            free(orders);
            return cli_refuse(st, "calibration"); /* an unreachable --target-epsilon, as train says */
        }
    }
    double e_rdp = NAN, e_pld = NAN; /* DPT_ACCT_DEFAULT: both, the smaller is the headline */
    if (acct != DPT_ACCT_PLD)
        st = dpt_rdp_sgm_epsilon_ex(r.q, r.sigma, r.steps, r.delta, conv, orders, n_orders, &e_rdp, &r.order,
                                    &r.at_edge);
    if (st == DPT_OK && acct != DPT_ACCT_RDP) st = dpt_pld_sgm_epsilon(r.q, r.sigma, r.steps, r.delta, &e_pld);
    free(orders);
    if (st != DPT_OK) return cli_fail(acct == DPT_ACCT_RDP ? "RDP accountant" : "PLD accountant");
    const int is_default = acct == DPT_ACCT_DEFAULT;
    if (is_default) acct = !(e_rdp < e_pld) ? DPT_ACCT_PLD : DPT_ACCT_RDP;
    r.eps = acct == DPT_ACCT_PLD ? e_pld : e_rdp;

    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "accountant", acct == DPT_ACCT_RDP ? "rdp" : "pld");
        cli_json_number(o, "epsilon", r.eps);
        cli_json_number(o, "delta", r.delta);
        cli_json_number(o, "sigma", r.sigma);
        cli_json_number(o, "sample_rate", r.q);
        cli_json_number(o, "steps", (double)r.steps);
        if (is_default) { /* both parts of the default accountant's minimum */
            cJSON_AddStringToObject(o, "accountant_rule", "default: min(pld, rdp)");
            cli_json_number(o, "epsilon_rdp", e_rdp);
            cli_json_number(o, "epsilon_pld", e_pld);
        }
        if (acct == DPT_ACCT_RDP || is_default) {
            cJSON_AddStringToObject(o, "conversion", conv == DPT_CONV_BALLE ? "balle" : "classic");
            cli_json_number(o, "order", r.order);
            cJSON_AddBoolToObject(o, "order_at_edge", r.at_edge);
        }
        if (s_target) {
            cli_json_number(o, "target_epsilon", r.target);
            cli_json_number(o, "tolerance", tol);
        }
        return print_json(o);
    }
    printf("accountant      %s\n", acct == DPT_ACCT_RDP
                                       ? (conv == DPT_CONV_BALLE ? "RDP (Balle et al. 2020 conversion)"
                                                                 : "RDP (classic conversion)")
                                       : "PLD (pessimistic, FFT composition)");
    if (is_default)
        printf("                (the default: the smaller of PLD and RDP, as training reports; --accountant picks one)\n");
    printf("sample rate q   %.6g\n", r.q);
    printf("steps           %llu%s\n", (unsigned long long)r.steps, s_epochs ? " (epochs x round(1/q), as training runs)" : "");
    if (s_target)
        printf("sigma           %.6g   (calibrated for epsilon <= %g, tolerance %g)\n", r.sigma, r.target, tol);
    else
        printf("sigma           %.6g\n", r.sigma);
    printf("delta           %g\n", r.delta);
    printf("epsilon         %.4f\n", r.eps);
    if (is_default && acct == DPT_ACCT_PLD) printf("epsilon (RDP)   %.4f   (cross-check, Balle et al. 2020 conversion)\n", e_rdp);
    if (is_default && acct == DPT_ACCT_RDP) printf("epsilon (PLD)   %.4f   (cross-check)\n", e_pld);
    if (!isfinite(r.eps)) {
        /* the PLD grid puts every loss beyond its range at +infinity (a pessimistic
         * discretization): over many steps that mass alone can exceed delta, while the
         * RDP bound stays finite */
        if (acct == DPT_ACCT_PLD)
            printf("note: no finite epsilon from the PLD accountant: over %llu steps the probability of a privacy "
                   "loss beyond its grid (counted as infinite) exceeds delta %g; --accountant rdp gives a finite, "
                   "looser bound\n", (unsigned long long)r.steps, r.delta);
        else
            printf("note: no finite epsilon: sigma %g is too small for a guarantee\n", r.sigma);
        return 0;
    }
    if (acct == DPT_ACCT_RDP || is_default) printf("best order      %g%s\n", r.order, acct == DPT_ACCT_RDP ? "" : " (RDP)");
    if (r.at_edge)
        printf("note: the best RDP order %g is at an edge of the order grid; widen it with --orders\n", r.order);
    return 0;
}
