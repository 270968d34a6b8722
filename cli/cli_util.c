/* Flag parsing and help shared by the dptrain commands. */
#include "cli_util.h"

#include <dptrain/comm.h>

#include <dptrain/core.h>
#include <dptrain/train.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* "dptrain: " or, under mpirun with several ranks, "dptrain (rank R): " */
static void prefix(void) {
    if (dpt_comm_size() > 1) fprintf(stderr, "dptrain (rank %d): ", dpt_comm_rank());
    else fputs("dptrain: ", stderr);
}

/* ==== Library parameter names -> flags ====
 * The library's messages name the C parameter or config field a caller set
 * ("dpt_dpsgd_config.clip: the clipping norm C must be > 0"); a command-line user set a
 * flag instead. This table says which flag sets which parameter; cli_error and cli_fail
 * replace every name of the table that stands as a whole word by its flag. Bare names are
 * listed only where they cannot be read as ordinary words (they contain an underscore);
 * a few enum values the messages name are spelled as the flags take them. */
static const struct {
    const char *param, *flag;
} PARAM_FLAGS[] = {
    /* dpt_train_config: dptrain train */
    {"dpt_train_config.model_spec", "--model"},
    {"model_spec", "--model"},
    {"dpt_train_config.loss", "--loss"},
    {"no_feature_cache", "--no-feature-cache"},
    {"ema_decay", "--ema"},
    {"ema_warmup", "--ema-warmup"},
    {"aug_mult", "--aug-mult"},
    {"dpt_train_config.init", "--init"},
    {"dpt_train_config.schedule", "--lr-schedule"},
    {"dpt_train_config.sampler", "--sampler"},
    {"dpt_train_config.batch_size", "--batch-size"},
    {"batch_size", "--batch-size"},
    {"dpt_train_config.sample_rate", "--sample-rate"},
    {"sample_rate", "--sample-rate"},
    {"dpt_train_config.min_batch", "--min-batch"},
    {"min_batch", "--min-batch"},
    {"dpt_train_config.epochs", "--epochs"},
    {"dpt_train_config.seed", "--seed"},
    {"dpt_train_config.threads", "--threads"},
    {"dpt_train_config.out_dir", "--out"},
    {"out_dir", "--out"},
    {"dpt_train_config.secret_dir", "--secret-dir"},
    {"secret_dir", "--secret-dir"},
    {"dpt_train_config.max_steps", "--max-steps"},
    {"max_steps", "--max-steps"},
    {"dpt_train_config.delta", "--delta"},
    {"dpt_train_config.target_epsilon", "--target-epsilon"},
    {"target_epsilon", "--target-epsilon"},
    {"dpt_train_config.allow_ledger_mismatch", "--allow-ledger-mismatch"},
    {"allow_ledger_mismatch", "--allow-ledger-mismatch"},
    {"dpt_train_config.secure", "--secure"},
    {"dpt_train_config.shards", "--shards"},
    /* dpt_optim_config (dpt_train_config.optim) */
    {"dpt_optim_config.kind", "--optimizer"},
    {"dpt_optim_config.lr", "--lr"},
    {"dpt_optim_config.momentum", "--momentum"},
    {"dpt_optim_config.weight_decay", "--weight-decay"},
    {"weight_decay", "--weight-decay"},
    /* algorithms */
    {"dpt_train_config.overwrite", "--overwrite"},
    {"dpt_algo_sgd_new", "--algo sgd"},
    {"dpt_clip_mode_parse", "--clip-mode"},
    {"dpt_dataset_filter_classes", "--classes"},
    {"dpt_dpsgd_config.sigma", "--sigma"},
    {"dpt_dpsgd_config.clip", "--clip"},
    {"dpt_dpsgd_config.clip_mode", "--clip-mode"},
    {"clip_mode", "--clip-mode"},
    {"dpt_dpsgd_config.secure", "--secure"},
    {"dpt_pdp_config.lambda", "--lambda"},
    {"dpt_pdp_config.kappa", "--kappa"},
    {"dpt_pdp_config.sigma", "--pdp-sigma"},
    {"dpt_propnoise_config.sigma", "--prop-sigma"},
    {"dpt_propnoise_config.lambda", "--lambda"},
    {"dpt_dpulr_config.copies", "--copies"},
    {"dpt_dpulr_config.sigma0", "--sigma0"},
    {"dpt_dpulr_config.clip", "--clip"},
    {"dpt_dpulr_config.noise", "--ulr-noise"},
    {"dpt_dpulr_config.perturb_std", "--ulr-std"},
    {"dpt_dpulr_config.antithetic", "--antithetic"},
    {"dpt_dpulr_config.baseline", "--baseline"},
    {"dpt_dpulr_config.modules", "--modules"},
    {"dpt_dpmac_config.sigma", "--sigma"},
    {"dpt_dpmac_config.clip", "--clip"},
    {"dpt_dpmac_config.z_steps", "--z-steps"},
    {"dpt_dpmac_config.z_lr", "--z-lr"},
    {"dpt_dpmac_config.secure", "--secure"},
    {"dpt_noisy_gd_config.eta", "--eta"},
    {"dpt_noisy_gd_config.sigma", "--langevin-sigma"},
    {"dpt_noisy_gd_config.kl", "--neighbours"},
    {"dpt_noisy_gd_config.constant", "--kl-constant"},
    {"dpt_noisy_gd_config.replace_candidates", "--replace-candidates"},
    {"dpt_noisy_gd_config.linearized", "--linearized"},
    /* dpt_audit_config: dptrain audit */
    {"dpt_audit_config.shadows", "--shadows"},
    {"dpt_audit_config.jobs", "--jobs"},
    {"dpt_audit_config.bootstrap", "--bootstrap"},
    {"dpt_audit_config.alpha", "--alpha"},
    {"dpt_audit_config.seed", "--seed"},
    {"dpt_audit_config.canaries", "--canaries"},
    {"dpt_audit_config.canary_runs", "--canary-runs"},
    {"dpt_audit_config.one_run_guesses", "--one-run-guesses"},
    {"dpt_audit_config.max_pairs", "--population"},
    /* function parameters */
    {"N_B", "--min-batch N_B"},
    {"data_dir", "--data-dir"},
    /* enum values the messages name, as the flags spell them */
    {"DPT_SAMPLER_SHUFFLE", "shuffle"},
    {"DPT_SAMPLER_POISSON", "poisson"},
    {"DPT_SAMPLER_POISSON_REJECT", "poisson-reject"},
    {"DPT_SAMPLER_FULL", "full"},
    {"DPT_ULR_EXPLICIT", "explicit"},
    {"DPT_ULR_CONTROLLER", "controller"},
    {"DPT_OPT_SGD", "sgd"},
    {"DPT_SCHED_CONSTANT", "constant"},
};

static int ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* msg with every parameter name of PARAM_FLAGS that stands as a whole word (not preceded
 * by an identifier character, '.', '-' or '/', not followed by an identifier character or
 * '/': never inside a path) replaced by its flag; the longest name wins. Truncated to fit
 * out[n]. */
void cli_flag_names(const char *msg, char *out, size_t n) {
    size_t w = 0;
    if (!n) return;
    for (const char *p = msg; *p && w + 1 < n;) {
        const char *flag = NULL;
        size_t len = 0;
        if (p == msg || !(ident_char(p[-1]) || p[-1] == '.' || p[-1] == '-' || p[-1] == '/'))
            for (size_t i = 0; i < sizeof PARAM_FLAGS / sizeof PARAM_FLAGS[0]; i++) {
                size_t l = strlen(PARAM_FLAGS[i].param);
                if (l > len && !strncmp(p, PARAM_FLAGS[i].param, l) && !ident_char(p[l]) && p[l] != '/')
                    flag = PARAM_FLAGS[i].flag, len = l;
            }
        if (flag) {
            for (const char *f = flag; *f && w + 1 < n;) out[w++] = *f++;
            p += len;
        } else {
            out[w++] = *p++;
        }
    }
    out[w] = 0;
}

static void print_error(const char *fmt, va_list ap) {
    char msg[2048], mapped[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    cli_flag_names(msg, mapped, sizeof mapped);
    prefix();
    fprintf(stderr, "%s\n", mapped);
}

int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error(fmt, ap);
    va_end(ap);
    return 2;
}

int cli_failf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error(fmt, ap);
    va_end(ap);
    return 1;
}

int cli_fail(const char *context) {
    char mapped[2048];
    cli_flag_names(dpt_last_error(), mapped, sizeof mapped);
    prefix();
    fprintf(stderr, "%s: %s\n", context, mapped);
    return 1;
}

int cli_refuse(dpt_status st, const char *context) {
    cli_fail(context);
    return st == DPT_ENOMEM ? 1 : 2;
}

/* strto* skip leading white space and strtoull accepts a sign: " -1" would be 2^64 - 1.
 * A value must start with a digit (or, where allowed, a sign then a digit or '.'). */
static int starts_like_number(const char *s, int sign_ok) {
    if (sign_ok && (*s == '-' || *s == '+')) s++;
    return (*s >= '0' && *s <= '9') || (sign_ok && *s == '.' && s[1] >= '0' && s[1] <= '9');
}

int cli_parse_double(const char *flag, const char *s, double *out) {
    char *end = NULL;
    if (!s || !*s) return cli_error("%s: expected a number, got an empty value", flag);
    if (!starts_like_number(s, 1) && strncasecmp(s, "inf", 3) && strncasecmp(s, "nan", 3) &&
        strncasecmp(s + (*s == '-' || *s == '+'), "inf", 3) && strncasecmp(s + (*s == '-' || *s == '+'), "nan", 3))
        return cli_error("%s: expected a number, got '%s'", flag, s);
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE) return cli_error("%s: expected a number, got '%s'", flag, s);
    if (!isfinite(v)) return cli_error("%s: expected a finite number, got '%s'", flag, s);
    *out = v;
    return 0;
}

int cli_parse_long(const char *flag, const char *s, long *out) {
    char *end = NULL;
    if (!s || !*s) return cli_error("%s: expected an integer, got an empty value", flag);
    if (!starts_like_number(s, 1) || strchr(s, '.')) return cli_error("%s: expected an integer, got '%s'", flag, s);
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno == ERANGE) return cli_error("%s: expected an integer, got '%s'", flag, s);
    *out = v;
    return 0;
}

int cli_parse_u64(const char *flag, const char *s, uint64_t *out) {
    char *end = NULL;
    if (!s || !starts_like_number(s, 0))
        return cli_error("%s: expected a non-negative integer, got '%s'", flag, s ? s : "");
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno == ERANGE) return cli_error("%s: expected a non-negative integer, got '%s'", flag, s);
    *out = (uint64_t)v;
    return 0;
}

int cli_parse_double_list(const char *flag, const char *s, double **out, size_t *n) {
    /* strtok_r below would skip empty items silently: "2,,3" and "2," are typos */
    size_t len = strlen(s);
    if (!len || s[0] == ',' || s[len - 1] == ',' || strstr(s, ",,"))
        return cli_error("%s '%s': expected a comma-separated list of numbers, with no empty item", flag, s);
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += (*p == ',');
    double *v = calloc(cap, sizeof *v);
    if (!v) return cli_failf("%s: out of memory", flag);
    char *copy = strdup(s);
    if (!copy) { free(v); return cli_failf("%s: out of memory", flag); }
    size_t k = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (cli_parse_double(flag, tok, &v[k])) { free(v); free(copy); return 2; }
        k++;
    }
    free(copy);
    if (k == 0) { free(v); return cli_error("%s: expected a comma-separated list of numbers", flag); }
    *out = v;
    *n = k;
    return 0;
}

static void default_text(const cli_option *o, char *buf, size_t n) {
    buf[0] = 0;
    /* no "(default: 0)" where the help already says the default, calls the option
     * required, or allows only values > 0 (0 there means "not given") */
    if (o->help && (strstr(o->help, "required") || strstr(o->help, "(default "))) return;
    int zero = (o->kind == CLI_DOUBLE && *(double *)o->dest == 0) || (o->kind == CLI_LONG && *(long *)o->dest == 0) ||
               (o->kind == CLI_U64 && *(uint64_t *)o->dest == 0);
    if (zero && o->help && strstr(o->help, "> 0")) return;
    switch (o->kind) {
    case CLI_FLAG:
    case CLI_SECTION: break;
    case CLI_STR: {
        const char *v = *(const char **)o->dest;
        if (v) snprintf(buf, n, " (default: %s)", v);
        break;
    }
    case CLI_DOUBLE: snprintf(buf, n, " (default: %g)", *(double *)o->dest); break;
    case CLI_LONG: snprintf(buf, n, " (default: %ld)", *(long *)o->dest); break;
    case CLI_U64: snprintf(buf, n, " (default: %llu)", (unsigned long long)*(uint64_t *)o->dest); break;
    }
}

void cli_print_help(const cli_option *opts, const char *usage) {
    printf("%s\n\nOptions:\n", usage);
    for (const cli_option *o = opts; o->name; o++) {
        if (o->kind == CLI_SECTION) {
            printf("\n%s:\n", o->help);
            continue;
        }
        char left[64], def[160];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->meta ? " " : "", o->meta ? o->meta : "");
        default_text(o, def, sizeof def);
        printf("  %-26s %s%s\n", left, o->help, def);
    }
    printf("  %-26s %s\n", "-h, --help", "show this help and exit");
}

int cli_parse(int argc, char **argv, int first, const cli_option *opts, const char *usage) {
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            cli_print_help(opts, usage);
            return -1;
        }
        if (strncmp(arg, "--", 2) != 0) return cli_error("unexpected argument '%s' (see --help)", arg);
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const cli_option *o = NULL;
        for (const cli_option *p = opts; p->name; p++)
            if (p->kind != CLI_SECTION && strlen(p->name) == len && !strncmp(p->name, arg, len)) { o = p; break; }
        if (!o) return cli_error("unknown option '%.*s' (see --help)", (int)len, arg);
        if (o->seen) *o->seen = 1;
        if (o->kind == CLI_FLAG) {
            if (eq) return cli_error("%s takes no value", o->name);
            *(int *)o->dest = 1;
            continue;
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) return cli_error("%s: missing value", o->name);
        int rc = 0;
        switch (o->kind) {
        case CLI_STR: *(const char **)o->dest = val; break;
        case CLI_DOUBLE: rc = cli_parse_double(o->name, val, (double *)o->dest); break;
        case CLI_LONG: rc = cli_parse_long(o->name, val, (long *)o->dest); break;
        case CLI_U64: rc = cli_parse_u64(o->name, val, (uint64_t *)o->dest); break;
        case CLI_FLAG:
        case CLI_SECTION: break;
        }
        if (rc) return rc;
    }
    return 0;
}

const char *cli_given(int argc, char **argv, int first, const cli_option *opts) {
    if (!opts) return NULL;
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0) continue;
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        for (const cli_option *p = opts; p->name; p++)
            if (p->kind != CLI_SECTION && strlen(p->name) == len && !strncmp(p->name, arg, len)) return p->name;
    }
    return NULL;
}

int cli_stderr_is_tty(void) { return isatty(STDERR_FILENO); }

int cli_checkpoint_file(const char *flag, const char *path, char *out, size_t n) {
    struct stat st;
    if (!*path) return cli_error("%s: empty path", flag);
    if (stat(path, &st) != 0) return cli_error("%s %s: %s", flag, path, strerror(errno));
    const int dir = S_ISDIR(st.st_mode);
    int w = snprintf(out, n, dir ? "%s/checkpoint.safetensors" : "%s", path);
    if (w < 0 || (size_t)w >= n) return cli_error("%s: path too long", flag);
    if (dir && stat(out, &st) != 0)
        return cli_error("%s %s: a directory without a checkpoint.safetensors (%s)", flag, path, strerror(errno));
    return 0;
}

void cli_text_clean(char *s) {
    for (size_t k; *s; s += k)
        if (!(k = dpt_text_char_len(s))) *s = '?', k = 1;
}

/* mkdir -p of path (last = 1) or of its parents only (last = 0) */
static int make_dirs(const char *path, int last) {
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return last && mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int cli_make_dirs(const char *path) { return make_dirs(path, 1); }

int cli_make_parents(const char *path) { return make_dirs(path, 0); }

int cli_check_out_dir(const char *flag, const char *path) {
    char buf[1024];
    if (!*path) return cli_error("%s: empty directory name", flag);
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return cli_error("%s: a path of %zu bytes; at most %zu", flag, strlen(path), sizeof buf - 1);
    struct stat sb;
    int exists = stat(buf, &sb) == 0;
    if (exists && !S_ISDIR(sb.st_mode)) return cli_error("%s %s: not a directory", flag, path);
    /* the nearest existing ancestor: the one mkdir -p would create the rest in */
    while (!exists) {
        if (errno != ENOENT) return cli_error("%s %s: %s", flag, path, strerror(errno));
        size_t n = strlen(buf);
        while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
        char *slash = strrchr(buf, '/');
        if (!slash) snprintf(buf, sizeof buf, ".");
        else if (slash == buf) buf[1] = 0;
        else *slash = 0;
        exists = stat(buf, &sb) == 0;
        if (exists && !S_ISDIR(sb.st_mode)) return cli_error("%s %s: %s is not a directory", flag, path, buf);
    }
    if (access(buf, W_OK | X_OK) != 0)
        return cli_error("%s %s: cannot write into %s: %s", flag, path, buf, strerror(errno));
    return 0;
}

/* ==== Output files ==== */

/* Writes through an existing non-regular file (a device, FIFO or socket): renaming a
 * temporary over it would replace /dev/null or a pipe by a regular file. */
static int write_through(const char *flag, const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return cli_failf("%s %s: cannot open it for writing: %s", flag, path, strerror(errno));
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            return cli_failf("%s %s: write failed: %s", flag, path, strerror(e));
        }
        p += w;
        n -= (size_t)w;
    }
    if (close(fd) != 0) return cli_failf("%s %s: write failed: %s", flag, path, strerror(errno));
    return 0;
}

int cli_write_output(const char *flag, const char *path, const void *data, size_t n) {
    struct stat l, t, so;
    /* "-", /dev/stdout, or any name of the file this process's stdout is (a log appended to
     * with >>): written through stdout, never renamed over (that would replace the log) */
    if (!strcmp(path, "-") || (fstat(STDOUT_FILENO, &so) == 0 && stat(path, &t) == 0 && so.st_dev == t.st_dev &&
                               so.st_ino == t.st_ino)) {
        if ((n && fwrite(data, 1, n, stdout) != n) || fflush(stdout) != 0)
            return cli_failf("%s %s: write failed: %s", flag, path, strerror(errno));
        return 0;
    }
    if (lstat(path, &l) != 0) {
        if (errno != ENOENT) return cli_failf("%s %s: cannot examine it: %s", flag, path, strerror(errno));
        if (dpt_write_file_atomic(path, data, n) != DPT_OK) return cli_fail(flag);
        return 0;
    }
    if (!S_ISLNK(l.st_mode)) t = l;
    else if (stat(path, &t) != 0)
        return cli_failf("%s %s: a symbolic link to a file that cannot be reached (%s); refusing to replace the link",
                         flag, path, strerror(errno));
    if (S_ISDIR(t.st_mode)) return cli_failf("%s %s: is a directory", flag, path);
    if (!S_ISREG(t.st_mode)) return write_through(flag, path, data, n);
    if (!S_ISLNK(l.st_mode)) return dpt_write_file_atomic(path, data, n) == DPT_OK ? 0 : cli_fail(flag);
    /* a link to a regular file: replace the file it names, keep the link */
    char *real = realpath(path, NULL);
    if (!real) return cli_failf("%s %s: cannot resolve the symbolic link: %s", flag, path, strerror(errno));
    int rc = dpt_write_file_atomic(real, data, n) == DPT_OK ? 0 : cli_fail(flag);
    free(real);
    return rc;
}

void cli_link_latest(const char *run_dir) {
    /* runs/latest -> the run's own name (dpt_run_dir_link_latest); a real directory of that
     * name (an older dptrain's default run) is kept */
    int linked = 0;
    if (dpt_run_dir_link_latest(run_dir, &linked) != DPT_OK)
        fprintf(stderr, "dptrain: note: %s\n", dpt_last_error());
    else if (!linked && strchr(run_dir, '/'))
        fprintf(stderr, "dptrain: note: %.*s/latest is not a symbolic link (a run directory of an older dptrain?): "
                        "left as it is; this run is in %s\n", (int)(strrchr(run_dir, '/') - run_dir), run_dir,
                run_dir);
}

int cli_run_in_dir(const char *dir, const char *const argv[], int quiet_stderr) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(127);
        if (quiet_stderr) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) dup2(fd, STDERR_FILENO);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void cli_json_number(cJSON *o, const char *key, double v) {
    char buf[DPT_DOUBLE_TEXT];
    dpt_format_double(v, buf);
    cJSON_AddRawToObject(o, key, buf);
}
