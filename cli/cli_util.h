/* cli_util: flag parsing shared by every `dptrain <command>`. Each parser names the flag
 * in its error ("--lr: expected a number, got 'abc'"), prints one line to stderr and
 * returns non-zero; commands then exit with status 2. Not thread-safe (CLI only). */
#ifndef DPT_CLI_UTIL_H
#define DPT_CLI_UTIL_H
#include <stddef.h>
#include <stdint.h>

#include <dptrain/core.h>

/* Library messages name C parameters and config fields ("dpt_dpsgd_config.clip",
 * "sample_rate"); the CLI's users set flags. cli_flag_names copies msg into out[n] with
 * every such name that the CLI's table maps (cli_util.c) replaced by its flag ("--clip").
 * cli_error and cli_fail apply it to everything they print. */
void cli_flag_names(const char *msg, char *out, size_t n);

/* Prints "dptrain: <message>\n" to stderr (printf format). Returns 2 (usage error). */
int cli_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* Prints "dptrain: <context>: <dpt_last_error()>" and returns 1 (runtime failure). */
int cli_fail(const char *context);
/* Prints as cli_error and returns 1: a failure of the CLI's own work (an output it cannot
 * write, out of memory). */
int cli_failf(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* The same message, returning 2: for a library refusal (status st) of what the command line
 * gave (a value, or a file it names) before the command's work began (README, "Exit
 * status"). DPT_ENOMEM returns 1 instead: running out of memory refuses nothing the
 * command line gave. */
int cli_refuse(dpt_status st, const char *context);

/* Strict number parsers: whole string must parse, finite, else error naming `flag`. */
int cli_parse_double(const char *flag, const char *s, double *out);
int cli_parse_long(const char *flag, const char *s, long *out);
int cli_parse_u64(const char *flag, const char *s, uint64_t *out);
/* Comma-separated doubles ("1.5,2,32"); *out allocated with malloc (caller frees). Returns
 * 2 for a malformed list, 1 when out of memory (cli_failf). */
int cli_parse_double_list(const char *flag, const char *s, double **out, size_t *n);

/* Option table driving both parsing and --help, so help always lists every option
 * with its real default. */
/* CLI_SECTION is not an option: a heading in --help (its `help` is the heading text). */
typedef enum { CLI_FLAG, CLI_STR, CLI_DOUBLE, CLI_LONG, CLI_U64, CLI_SECTION } cli_kind;
typedef struct {
    const char *name;  /* "--lr" */
    cli_kind kind;
    void *dest;        /* int* for CLI_FLAG (set to 1), const char** for CLI_STR, ... */
    const char *meta;  /* "X" shown in help, NULL for flags */
    const char *help;  /* one line; the default is appended from the dest's initial value */
    int *seen;         /* optional: set to 1 when the option appears */
} cli_option;

/* Parses argv[first..argc) against opts (terminated by name == NULL). "--x=v" and "--x v"
 * both work. "--help"/"-h" prints usage + options and returns -1 (caller exits 0).
 * Unknown options and missing values are errors (return 2). */
int cli_parse(int argc, char **argv, int first, const cli_option *opts, const char *usage);
void cli_print_help(const cli_option *opts, const char *usage);
/* Name of the first option of `opts` that appears in argv[first..argc), or NULL. */
const char *cli_given(int argc, char **argv, int first, const cli_option *opts);

/* The checkpoint file a flag names: `path` itself, or path/checkpoint.safetensors for a run
 * directory, into out[n]: 0, or exit status 2 after a message naming `flag` (a path that
 * does not exist, a directory without a checkpoint, a path too long). */
int cli_checkpoint_file(const char *flag, const char *path, char *out, size_t n);
/* s as one line of UTF-8 text, in place: every byte outside a well-formed, printable
 * character (dpt_text_char_len) becomes '?' (a path or a file may hold any bytes); the
 * length is kept. */
void cli_text_clean(char *s);
/* 1 when stdout / stderr is a terminal (progress bars only there). */
int cli_stderr_is_tty(void);
/* Writes n bytes to the output file a flag names, exit status style (0, or 1 after a
 * message naming `flag`):
 *   - a regular file or a new name: replaced atomically (dpt_write_file_atomic);
 *   - a character or block device, a FIFO or a socket: written through in place, never
 *     renamed over (/dev/null, /dev/tty, a named pipe); a FIFO waits for its reader;
 *   - a symbolic link: resolved, then the same rules for what it points to; the link stays
 *     and a regular target is replaced atomically (--out /dev/stdout writes to stdout).
 *     A dangling link and a directory are refused. */
int cli_write_output(const char *flag, const char *path, const void *data, size_t n);
/* Points PARENT/latest (a symbolic link) at the run directory PARENT/NAME; notes on stderr
 * when it cannot, and leaves a real directory named latest alone. */
void cli_link_latest(const char *run_dir);
/* mkdir -p: creates path and its missing parents (mode 0755). 0 when that succeeds or they
 * exist already (path may be a file then: callers check), else -1 with errno set by mkdir
 * (-1 too for a path of 1024 bytes or more, errno then untouched). */
int cli_make_dirs(const char *path);
/* Whether cli_make_dirs(path) would give a directory this process can write into,
 * without creating anything: path is such a directory, or its nearest existing ancestor
 * is. 0, or exit status 2 after a message naming `flag`. Commands check their output
 * directory with it before their work and create it only when they have results. */
int cli_check_out_dir(const char *flag, const char *path);
/* mkdir -p of path's parent directories (not of path itself): -1 with errno on failure. */
int cli_make_parents(const char *path);
/* Runs argv[0] (looked up in PATH) with the arguments argv[1..] in directory dir, without a
 * shell, and waits: its exit status, or -1 when it could not be started or was killed.
 * quiet_stderr: its stderr goes to /dev/null. */
int cli_run_in_dir(const char *dir, const char *const argv[], int quiet_stderr);
/* Adds `key`: v to a JSON object as a number that reads back bit for bit (NaN/inf: null);
 * the machine-readable outputs (--json, run records) must equal the library's values. */
struct cJSON;
void cli_json_number(struct cJSON *o, const char *key, double v);
#endif
