/* Accountant timings: microseconds per RDP epsilon (default orders, T = 10000), ms per
 * noise calibration (RDP and PLD), ms per PLD epsilon for T = 1000 and T = 100000.
 * Setting: MNIST-like DP-SGD, q = 256/60000, sigma 1.1, delta 1e-5. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dptrain/accounting.h"

static int fail(const char *what) {
    fprintf(stderr, "accountant: %s: %s\n", what, dpt_last_error());
    return 1;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 1;
    if (reps < 1) reps = 1;
    const double q = 256.0 / 60000, sigma = 1.1, delta = 1e-5;
    double eps = 0, order = 0, t0, dt;

    /* RDP epsilon: per-step RDP at every default order + conversion */
    int n_rdp = 200 * reps;
    t0 = dpt_now();
    for (int i = 0; i < n_rdp; i++)
        if (dpt_rdp_sgm_epsilon(q, sigma, 10000, delta, DPT_CONV_BALLE, NULL, 0, &eps, &order)) return fail("rdp");
    dt = (dpt_now() - t0) / n_rdp;
    printf("rdp_epsilon        T=10000   %9.1f us   (eps %.4f at order %g, Balle)\n", dt * 1e6, eps, order);

    /* calibration */
    double s = 0;
    int n_cal = 20 * reps;
    t0 = dpt_now();
    for (int i = 0; i < n_cal; i++)
        if (dpt_calibrate_sigma(q, 14063, delta, 3.0, DPT_ACCT_RDP, DPT_CONV_BALLE, 1e-4, &s)) return fail("calibrate");
    dt = (dpt_now() - t0) / n_cal;
    printf("calibrate_rdp      T=14063   %9.3f ms   (sigma %.4f for eps <= 3, tol 1e-4)\n", dt * 1e3, s);
    t0 = dpt_now();
    for (int i = 0; i < reps; i++)
        if (dpt_calibrate_sigma(q, 14063, delta, 3.0, DPT_ACCT_PLD, DPT_CONV_BALLE, 1e-3, &s)) return fail("calibrate pld");
    dt = (dpt_now() - t0) / reps;
    printf("calibrate_pld      T=14063   %9.3f ms   (sigma %.4f for eps <= 3, tol 1e-3)\n", dt * 1e3, s);

    /* PLD epsilon */
    const uint64_t Ts[2] = {1000, 100000};
    for (int k = 0; k < 2; k++) {
        int n_pld = 5 * reps;
        t0 = dpt_now();
        for (int i = 0; i < n_pld; i++)
            if (dpt_pld_sgm_epsilon(q, sigma, Ts[k], delta, &eps)) return fail("pld");
        dt = (dpt_now() - t0) / n_pld;
        double er = 0;
        if (dpt_rdp_sgm_epsilon(q, sigma, Ts[k], delta, DPT_CONV_BALLE, NULL, 0, &er, NULL)) return fail("rdp");
        printf("pld_epsilon        T=%-7llu %9.3f ms   (eps %.4f; RDP %.4f)\n", (unsigned long long)Ts[k],
               dt * 1e3, eps, er);
    }
    return 0;
}
