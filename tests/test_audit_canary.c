/* Canary audit at a small scale: one out-of-distribution, mislabelled canary is included
 * in half of R independent training runs (different seeds); the loss attack's scores on
 * it give an epsilon lower bound (Clopper-Pearson, threshold chosen on half the runs).
 *  - non-private SGD memorizes the canary: its lower bound is ABOVE the DP-SGD
 *    accountant's epsilon below (so the check on DP-SGD can fail);
 *  - DP-SGD (sigma 8, q 0.25, 40 steps: RDP epsilon 0.81 at delta 1e-5) must give a lower
 *    bound at or below its accountant's epsilon: a test that our DP-SGD is not broken. */
#include <dptrain/audit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { NPOP = 64, DIM = 8, R = 120 };

static void make_pop(dpt_dataset *d) {
    memset(d, 0, sizeof *d);
    d->n = NPOP, d->dim = DIM, d->n_classes = 2;
    d->shape[0] = 1, d->shape[1] = 1, d->shape[2] = DIM;
    d->x = dpt_alloc(NPOP * DIM, sizeof(float), "x");
    d->y = dpt_alloc(NPOP, sizeof(int32_t), "y");
    dpt_rng r;
    dpt_rng_init(&r, 77, DPT_STREAM_AUX);
    for (int i = 0; i < NPOP - 1; i++) {
        int c = i % 2;
        d->y[i] = c;
        for (int j = 0; j < DIM; j++) d->x[i * DIM + j] = (float)(0.5 * dpt_rng_gauss_ref(&r) + (c ? 1.0 : -1.0));
    }
    /* the canary: far from both classes, labelled against the nearest one */
    for (int j = 0; j < DIM; j++) d->x[(NPOP - 1) * DIM + j] = j % 2 ? 4.0f : -4.0f;
    d->y[NPOP - 1] = 1;
    dpt_rng_free(&r);
}

static double audit(dpt_audit_job *job, const dpt_dataset *pop, double *eps_acct) {
    double in[R / 2], out[R / 2], loss[NPOP];
    uint8_t member[NPOP];
    memset(member, 1, sizeof member);
    size_t ni = 0, no = 0;
    *eps_acct = NAN;
    for (int r = 0; r < R; r++) {
        member[NPOP - 1] = (uint8_t)(r % 2 == 0);
        dpt_audit_run_info info;
        dpt_status s = dpt_audit_train_and_score(job, pop, member, NULL, 1000 + (uint64_t)r, loss, NULL, &info);
        CHECK_OK(s);
        if (s) return NAN;
        if (member[NPOP - 1]) in[ni++] = -loss[NPOP - 1];
        else out[no++] = -loss[NPOP - 1];
        if (member[NPOP - 1]) *eps_acct = info.epsilon; /* the run with the canary */
    }
    double e = NAN, thr;
    CHECK_OK(dpt_audit_eps_from_scores(in, ni, out, no, 1e-5, 0.05, &e, &thr));
    printf("%s: AUC %.3f, epsilon lower bound %.3f (accountant %.3f)\n", job->algo == DPT_AUDIT_SGD ? "sgd" : "dpsgd",
           dpt_audit_auc(in, ni, out, no), e, *eps_acct);
    return e;
}

int main(void) {
    dpt_dataset pop;
    make_pop(&pop);
    dpt_audit_job job;
    memset(&job, 0, sizeof job);
    job.cfg = dpt_train_config_defaults();
    job.cfg.model_spec = "mlp:8-16-2:relu";
    job.cfg.batch_size = 16;
    job.cfg.epochs = 10;
    job.cfg.optim.lr = 3e-2;
    job.cfg.threads = 1;
    job.cfg.delta = 1e-5;
    job.algo = DPT_AUDIT_SGD;
    double e_dummy;
    double lb_sgd = audit(&job, &pop, &e_dummy);

    job.algo = DPT_AUDIT_DPSGD;
    job.cfg.sampler = DPT_SAMPLER_POISSON;
    job.cfg.sample_rate = 0.25;
    job.dpsgd = dpt_dpsgd_config_defaults();
    job.dpsgd.sigma = 8.0;
    job.dpsgd.clip = 1.0;
    double eps_acct;
    double lb_dp = audit(&job, &pop, &eps_acct);
    /* the default accountant (PLD here): dptrain account --sample-rate 0.25 --sigma 8 --steps 40 */
    CHECK_CLOSE(eps_acct, 0.7387, 2e-3, 0);
    CHECK(lb_dp <= eps_acct);
    CHECK(lb_sgd > eps_acct); /* the audit is strong enough to catch a DP-SGD this leaky */
    dpt_dataset_free(&pop);
    TEST_MAIN_END();
}
