/* The noise multiplier sigma that DP-SGD needs for a target epsilon, and the epsilon it
 * then spends by two accountants.
 *   cc calibrate_sigma.c $(pkg-config --cflags --libs dptrain) -o calibrate_sigma
 *   ./calibrate_sigma [TARGET_EPSILON]     (default 3) */
#include <dptrain/dptrain.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what) {
    fprintf(stderr, "calibrate_sigma: %s: %s\n", what, dpt_last_error());
    return 1;
}

int main(int argc, char **argv) {
    double target = argc > 1 ? strtod(argv[1], NULL) : 3.0;
    const double n = 60000, batch = 256, delta = 1e-5;
    const double q = batch / n;                       /* Poisson sampling rate */
    const uint64_t steps = 5 * (uint64_t)(1 / q + 0.5); /* 5 epochs of round(1/q) steps */

    double sigma = 0, eps_rdp = 0, eps_pld = 0;
    /* the default accountant: the one `dptrain train --target-epsilon` calibrates with */
    if (dpt_calibrate_sigma(q, steps, delta, target, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, 1e-4, &sigma) != DPT_OK)
        return fail("calibration");
    if (dpt_rdp_sgm_epsilon(q, sigma, steps, delta, DPT_CONV_BALLE, NULL, 0, &eps_rdp, NULL) != DPT_OK)
        return fail("RDP epsilon");
    if (dpt_pld_sgm_epsilon(q, sigma, steps, delta, &eps_pld) != DPT_OK) return fail("PLD epsilon");
    printf("sigma %.4f for epsilon %g at delta %g (q %.6f, %llu steps)\n", sigma, target, delta, q,
           (unsigned long long)steps);
    printf("spent: epsilon %.4f (RDP), %.4f (PLD)\n", eps_rdp, eps_pld);
    return 0;
}
