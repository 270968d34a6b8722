/* dptrain: command-line front end. Dispatches to one function per command. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} COMMANDS[] = {
    {"train", dpt_cmd_train, "train a model (non-private or differentially private)"},
    {"eval", dpt_cmd_eval, "evaluate a checkpoint on a test split"},
    {"account", dpt_cmd_account, "compute the privacy spent (epsilon) or calibrate noise"},
    {"audit", dpt_cmd_audit, "membership-inference audit: loss attack, LiRA, canary epsilon lower bound"},
};
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    fprintf(f, "usage: dptrain <command> [options]\n\n"
               "Differentially private training, privacy accounting and auditing.\n\n"
               "Commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\nRun 'dptrain <command> --help' for the options of a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("dptrain 0.1.0\n");
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "dptrain: unknown command '%s' (see dptrain --help)\n", argv[1]);
    return 2;
}
