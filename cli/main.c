/* dptrain: command-line front end. Dispatches to one function per command. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <dptrain/comm.h>
#include <dptrain/version.h>

#include "cli_util.h"
#include "commands.h"

/* ==== Address-space limit (runs before any library initializer) ==== */

/* OpenBLAS (Debian's openmp build) allocates a 128 MiB work buffer per thread when it
 * initializes and one more per concurrent BLAS call, and when an allocation fails it
 * retries forever instead of failing: under `ulimit -v` of 80..400 MB dptrain spun at 100%
 * CPU before main, or in its first matrix product. Its initializer runs before main, so
 * the check is a DT_PREINIT_ARRAY entry: the executable's, run before every shared
 * library's constructor. The estimate is measured, and conservative on purpose: per BLAS
 * thread its buffer and the thread's malloc arena, plus the buffer of the first product
 * and room for the run's own data (on this 2-core machine `--threads 1` hung at 300 MB and
 * ran at 350; 2 threads hung at 400 and ran at 500). Only the C library is used here
 * (stdio and getenv are not yet initialized): envp, open, read, write, _exit. */
#define BLAS_PER_THREAD_MIB 256
#define BLAS_FIXED_MIB 128

static long env_threads(char **envp) {
    static const char *const names[] = {"OPENBLAS_NUM_THREADS=", "GOTO_NUM_THREADS=", "OMP_NUM_THREADS="};
    for (int k = 0; k < 3; k++)
        for (char **e = envp; e && *e; e++)
            if (!strncmp(*e, names[k], strlen(names[k]))) {
                long v = strtol(*e + strlen(names[k]), NULL, 10);
                if (v >= 1) return v;
            }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? n : 1;
}

static void check_address_space(int argc, char **argv, char **envp) {
    (void)argc, (void)argv;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
    /* what is mapped now (the libraries): /proc/self/statm's first field, in pages */
    unsigned long long mapped = 0;
    char buf[64];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    ssize_t r = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    if (r > 0) {
        buf[r] = 0;
        mapped = strtoull(buf, NULL, 10) * (unsigned long long)sysconf(_SC_PAGESIZE);
    }
    long nb = env_threads(envp);
    if (nb > 1024) nb = 1024;
    unsigned long long need = mapped + (((unsigned long long)nb * BLAS_PER_THREAD_MIB + BLAS_FIXED_MIB) << 20);
    if ((unsigned long long)rl.rlim_cur >= need) return;
    char msg[640];
    int n = snprintf(msg, sizeof msg,
                     "dptrain: the address-space limit (ulimit -v) is %llu MiB, below the %llu MiB dptrain needs "
                     "with %ld BLAS thread%s: OpenBLAS reserves about %d MiB per thread (and waits forever, instead "
                     "of failing, when it cannot). Raise the limit (ulimit -v %llu)%s",
                     (unsigned long long)rl.rlim_cur >> 20, need >> 20, nb, nb == 1 ? "" : "s", BLAS_PER_THREAD_MIB,
                     (need >> 10) + 1, nb > 1 ? "" : ".\n");
    if (n > 0 && nb > 1 && (size_t)n < sizeof msg)
        n += snprintf(msg + n, sizeof msg - (size_t)n, " or use one thread (OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "
                      "needs %llu MiB).\n", (mapped >> 20) + BLAS_PER_THREAD_MIB + BLAS_FIXED_MIB + 1);
    if (n > 0) (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(1);
}

__attribute__((section(".preinit_array"), used)) static void (*const dpt_preinit)(int, char **, char **) =
    check_address_space;

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
        printf("blas: %s\n", dpt_blas_core());
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
