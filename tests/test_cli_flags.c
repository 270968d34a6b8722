/* The CLI's mapping from library parameter names to its flags (cli_flag_names in
 * cli/cli_util.c, compiled into this test): whole words only, the longest name wins,
 * never inside a path, and the text around is kept. */
#include "../cli/cli_util.c"

#include "testutil.h"

static void expect(const char *msg, const char *want) {
    char out[256];
    cli_flag_names(msg, out, sizeof out);
    CHECK(!strcmp(out, want));
    if (strcmp(out, want)) fprintf(stderr, "  '%s'\n  -> '%s'\n  want '%s'\n", msg, out, want);
}

int main(void) {
    expect("dpt_dpsgd_config.clip: the clipping norm C must be > 0, got 0",
           "--clip: the clipping norm C must be > 0, got 0");
    /* the qualified name wins over the bare one it contains */
    expect("dpt_train_config.sample_rate must be in (0, 1], got 0", "--sample-rate must be in (0, 1], got 0");
    expect("sample_rate must be in (0, 1]", "--sample-rate must be in (0, 1]");
    /* one field name, different flags per config */
    expect("dpt_propnoise_config.sigma and dpt_dpsgd_config.sigma and dpt_noisy_gd_config.sigma",
           "--prop-sigma and --sigma and --langevin-sigma");
    /* whole words only: prefixes, suffixes, other fields and flags stay */
    expect("sample_rates sample_rate_x xsample_rate --sample_rate dpt_x.sample_rate",
           "sample_rates sample_rate_x xsample_rate --sample_rate dpt_x.sample_rate");
    /* never inside a path */
    expect("/data/data_dir/mnist: no such file; set data_dir to a directory",
           "/data/data_dir/mnist: no such file; set --data-dir to a directory");
    expect("data_dir/x", "data_dir/x");
    /* enum values as the flags spell them */
    expect("needs dpt_train_config.sampler = DPT_SAMPLER_POISSON_REJECT, not DPT_SAMPLER_POISSON",
           "needs --sampler = poisson-reject, not poisson");
    expect("N_B = 61 must be in [1, qN]", "--min-batch N_B = 61 must be in [1, qN]");
    /* function names a message points the caller to */
    expect("(for training without noise use dpt_algo_sgd_new)", "(for training without noise use --algo sgd)");
    expect("or set overwrite (dpt_train_config.overwrite) to", "or set overwrite (--overwrite) to");
    expect("dpt_clip_mode_parse: expected flat or per-layer", "--clip-mode: expected flat or per-layer");
    /* the audit's config fields */
    expect("dpt_audit_run: dpt_audit_config.canaries x dpt_audit_config.canary_runs (2 x 3) must be at least 8",
           "dpt_audit_run: --canaries x --canary-runs (2 x 3) must be at least 8");
    expect("", "");
    /* truncation keeps a terminated string */
    char small[8];
    cli_flag_names("dpt_dpsgd_config.clip is bad", small, sizeof small);
    CHECK(!strcmp(small, "--clip "));
    TEST_MAIN_END();
}
