/* `dptrain train --preset NAME`: named flag sets (a paper's settings) inserted before the
 * user's flags, so explicit flags override them. Memory: the expanded argv and its
 * storage belong to the caller, freed with cli_preset_free. Not thread-safe (the names
 * list is a static buffer). */
#ifndef DPT_CLI_PRESETS_H
#define DPT_CLI_PRESETS_H

/* "a | b | ..." of every preset name (static storage). */
const char *cli_preset_names(void);
/* Without --preset: *out_argv = argv. With --preset NAME (or --preset=NAME): argv[0], the
 * preset's flags (its --sigma left out when --target-epsilon is given), then argv[1..].
 * Returns 0, or the CLI error status for an unknown or missing name. */
int cli_preset_expand(int argc, char **argv, int *out_argc, char ***out_argv, char **storage);
void cli_preset_free(char **argv_expanded, char **argv_orig, char *storage);
#endif
