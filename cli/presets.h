/* `dptrain train --preset NAME`: named flag sets (a paper's settings) inserted before the
 * user's flags, so explicit flags override them. Memory: the expanded argv and its
 * storage belong to the caller, freed with cli_preset_free. Not thread-safe (the names
 * list and the expansion in use are static). */
#ifndef DPT_CLI_PRESETS_H
#define DPT_CLI_PRESETS_H
#include <stddef.h>

/* "a | b | ..." of every preset name (static storage). */
const char *cli_preset_names(void);
/* Without --preset: *out_argv = argv. With --preset NAME (or --preset=NAME): argv[0], the
 * preset's flags (its --sigma left out when --target-epsilon is given), then argv[1..].
 * Returns 0, or the CLI error status for an unknown or missing name. */
int cli_preset_expand(int argc, char **argv, int *out_argc, char ***out_argv, char **storage);
void cli_preset_free(char **argv_expanded, char **argv_orig, char *storage);

/* For messages about a flag the user may not have typed, between cli_preset_expand and
 * cli_preset_free: the expanded preset's name when its flags set `flag` (one that takes a
 * value), with that value in *value and in *typed whether the command line gives the flag
 * too (its value then wins); NULL without --preset, or when the preset does not set it.
 * value and typed may be NULL. */
const char *cli_preset_setting(const char *flag, const char **value, int *typed);
/* The preset's flags as inserted, without `flag` and its value, space-separated in out[n]
 * (cut to n - 1 bytes; "" without --preset). */
void cli_preset_flags_except(const char *flag, char *out, size_t n);
/* What the expanded preset's epsilon does not cover, for the run's ledger
 * (dpt_trainer_exclude_from_guarantee), or NULL: its --feature-norm-clip values were measured
 * on the dataset's training split (NULL when the command line gives --feature-norm-clip or
 * --feature-norm none, or without --preset). */
const char *cli_preset_excludes(void);
#endif
