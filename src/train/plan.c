/* Planning a private run before it starts: the noise multiplier for a target epsilon on
 * top of the releases recorded before training (train.h, "Planning a private run"). The
 * number of steps comes from dpt_sampler_steps_for_epochs (data.h), the rule the trainer
 * runs. */
#include <dptrain/accounting.h>
#include <dptrain/train.h>

/* What a run reports and its budget stops at (compute_result and ledger_eps_after in
 * loop.c): the default accountant, PLD where it applies (RDP with Balle et al.'s conversion
 * on the default order grid otherwise); sigma to 1e-4. */
#define PLAN_TOL 1e-4

dpt_status dpt_train_calibrate_sigma(const dpt_ledger *prior, double q, uint64_t steps, double delta,
                                     double target_eps, double *sigma) {
    return dpt_ledger_calibrate_sgm(prior, q, steps, delta, target_eps, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, PLAN_TOL, sigma);
}
