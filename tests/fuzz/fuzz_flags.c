/* Fuzzes the CLI's flag parser (cli/cli_util.c) with an option table of every kind:
 * the input is argv, one argument per line. Parse errors print to stderr and return 2;
 * nothing may crash, and a parsed value must have been given in a form the parser
 * documents. Seeds: typical command lines. */
#include <math.h>

#include "cli_util.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_str(data, size);
    char *argv[64];
    int argc = 0;
    argv[argc++] = "dptrain";
    argv[argc++] = "cmd";
    for (char *p = s; argc < 63;) {
        argv[argc++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    argv[argc] = NULL;
    const char *str = "x", *list = NULL;
    double d = 1.5;
    long l = 3;
    uint64_t u = 7;
    int flag = 0, seen = 0;
    cli_option opts[] = {
        {"--str", CLI_STR, &str, "S", "a string", NULL},
        {"--double", CLI_DOUBLE, &d, "X", "a number", &seen},
        {"--long", CLI_LONG, &l, "N", "an integer", NULL},
        {"--u64", CLI_U64, &u, "N", "an unsigned integer", NULL},
        {"--flag", CLI_FLAG, &flag, NULL, "a flag", NULL},
        {"--list", CLI_STR, &list, "LIST", "a list of numbers", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    FILE *keep = stderr;
    stderr = fopen("/dev/null", "w"); /* the parser's messages; a crash report still shows */
    int rc = cli_parse(argc, argv, 2, opts, "usage: fuzz");
    if (rc == 0 && list) {
        double *v = NULL;
        size_t n = 0;
        if (cli_parse_double_list("--list", list, &v, &n) == 0) {
            for (size_t i = 0; i < n; i++)
                if (!isfinite(v[i])) abort();
        }
        free(v);
    }
    fclose(stderr);
    stderr = keep;
    if (rc == 0 && !isfinite(d)) abort();
    free(s);
    return 0;
}

static void fuzz_seeds(const char *dir) {
    static const char *seeds[] = {"--str\nabc\n--double\n2.5\n--long\n-4\n--u64\n18446744073709551615\n--flag",
                                  "--double=1e-3\n--list\n1.5,2,32", "--u64\n 5", "--long=9223372036854775807",
                                  "--help"};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%zu", i);
        fuzz_seed(dir, name, seeds[i], strlen(seeds[i]));
    }
}
