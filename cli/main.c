/* dptrain: command-line front end. Dispatches to one function per command. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <dptrain/comm.h>
#include <dptrain/version.h>

#include "cli_util.h"
#include "commands.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} COMMANDS[] = {
    {"train", dpt_cmd_train, "train a model (non-private or differentially private)"},
    {"eval", dpt_cmd_eval, "evaluate a checkpoint on a test split"},
    {"predict", dpt_cmd_predict, "a trained model's predictions for the rows of a CSV file"},
    {"account", dpt_cmd_account, "compute the privacy spent (epsilon) or calibrate noise"},
    {"audit", dpt_cmd_audit, "membership-inference audit: loss attack, LiRA, canary epsilon lower bound"},
    {"model", dpt_cmd_model, "list a model's layers, shapes and parameters (the names --freeze takes)"},
};
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    fprintf(f, "Usage: dptrain <command> [options]\n"
               "  or:  dptrain --version\n\n"
               "Differentially private training, privacy accounting and auditing.\n\n"
               "Commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\nRun 'dptrain <command> --help' for the options of a command.\n"
               "Exit status: 0 success, 1 failure once the work began, 2 command line refused before it\n"
               "(a flag, a value or a file it names), 130 train interrupted by Ctrl-C (README.md).\n");
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        /* the library's version: the one that runs (this binary's headers only if they differ) */
        printf("dptrain %s\n", dpt_version());
        if (strcmp(dpt_version(), DPT_VERSION_STRING))
            printf("(this dptrain was built against the %s headers)\n", DPT_VERSION_STRING);
        printf("build: %s\n", dpt_build_id());
        printf("mpi: %s\n", dpt_comm_compiled() ? dpt_comm_library() : "no (single-process build)");
        return 0;
    }
    if (dpt_comm_size() > 1 && strcmp(argv[1], "train"))
        return cli_error("only 'dptrain train' runs under mpirun with several ranks; run '%s' as one process",
                         argv[1]);
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "dptrain: unknown command '%s' (see dptrain --help)\n", argv[1]);
    return 2;
}

/* Under mpirun (several ranks) a rank that fails stops the whole job: the others would
 * otherwise wait forever in the next reduction. Rank 0 has written nothing partial: the
 * ledger and checkpoint files are replaced atomically. */
int main(int argc, char **argv) {
    if (dpt_comm_init(&argc, &argv) != DPT_OK) {
        fprintf(stderr, "dptrain: %s\n", dpt_last_error());
        return 1;
    }
    int rc = dispatch(argc, argv);
    /* One check for every command: output that could not be written (a full disk, a
     * closed pipe with SIGPIPE ignored, >/dev/full) is a failure, never exit status 0.
     * The stdio error flag also records a write that failed earlier, when a buffer filled.
     * A command that failed already said why (predict checks its own output). */
    errno = 0;
    int flush_failed = fflush(stdout) != 0;
    if (rc == 0 && (flush_failed || ferror(stdout))) {
        fprintf(stderr, "dptrain: cannot write to standard output%s%s\n", flush_failed && errno ? ": " : "",
                flush_failed && errno ? strerror(errno) : "");
        rc = 1;
    }
    if (rc != 0 && dpt_comm_size() > 1) {
        fprintf(stderr, "dptrain (rank %d): stopping every rank of the job (exit code %d)\n", dpt_comm_rank(), rc);
        fflush(stdout);
        dpt_comm_abort(rc); /* does not return under MPI */
    }
    dpt_comm_finalize();
    return rc;
}
