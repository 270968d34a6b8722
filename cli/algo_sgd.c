/* --algo sgd: non-private minibatch training (no privacy guarantee). */
#include <inttypes.h>

#include "train_algos.h"

static int sgd_make(cli_algo_ctx *c, dpt_algo **out) {
    (void)c;
    return dpt_algo_sgd_new(out) == DPT_OK ? 0 : cli_fail("--algo sgd");
}

static void sgd_describe(const cli_algo_ctx *c, FILE *f) {
    fprintf(f, "  algorithm sgd (non-private: no privacy guarantee), %s lr %g, %s batches of %zu, %ld epochs, seed %s"
               ", %d threads, run dir %s%s\n",
            c->optimizer, c->cfg->optim.lr, c->sampler, c->cfg->batch_size, c->epochs, cli_seed_text(c->cfg),
            dpt_threads_resolve(c->cfg->threads), c->out, c->resume ? " (resumed)" : "");
}

const cli_algo CLI_ALGO_SGD = {
    .name = "sgd",
    .summary = "non-private minibatch training (no privacy guarantee)",
    .uses_privacy_flags = 0,
    .freezable = 1,
    .regression = 1,
    .opts = NULL,
    .check = NULL,
    .make = sgd_make,
    .describe = sgd_describe,
    .report = NULL,
    .tag = "non-private",
};
