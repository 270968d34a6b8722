/* Flag parsing and help shared by the dptrain commands. */
#include "cli_util.h"

#include <dptrain/comm.h>

#include <dptrain/core.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* "dptrain: " or, under mpirun with several ranks, "dptrain (rank R): " */
static void prefix(void) {
    if (dpt_comm_size() > 1) fprintf(stderr, "dptrain (rank %d): ", dpt_comm_rank());
    else fputs("dptrain: ", stderr);
}

int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    prefix();
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int cli_fail(const char *context) {
    prefix();
    fprintf(stderr, "%s: %s\n", context, dpt_last_error());
    return 1;
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
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += (*p == ',');
    double *v = calloc(cap, sizeof *v);
    if (!v) return cli_error("%s: out of memory", flag);
    char *copy = strdup(s);
    if (!copy) { free(v); return cli_error("%s: out of memory", flag); }
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
