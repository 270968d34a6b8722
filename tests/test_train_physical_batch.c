/* train: dpt_train_config.physical_batch (virtual batches in the engine). A Poisson batch
 * larger than the physical batch is accumulated over several forward/backward passes: the
 * model's buffers are sized for one pass (memory bounded by it, not by the logical batch),
 * and a DP-SGD run with the same seed takes the same batches, the same single noise draw
 * and ledger step per batch, so its parameters equal the one-pass run's up to float
 * rounding (the clipped sum is added in another order), flat and per-layer, MLP and CNN. */
#include <dptrain/accounting.h>
#include <dptrain/optim.h>
#include <dptrain/privacy.h>
#include <dptrain/train.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testdata.h"
#include "testutil.h"

static dpt_trainer *run(const dpt_dataset *tr, const char *spec, dpt_clip_mode mode, size_t physical) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = 0.3; /* batches of ~180 of the 600 examples */
    c.epochs = 1;
    c.max_steps = 3;
    c.seed = 11;
    c.threads = 2;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.5;
    c.physical_batch = physical;
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = 0.7;
    d.clip = 0.2; /* most examples clipped */
    d.clip_mode = mode;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
    if (t) CHECK_OK(dpt_trainer_run(t, NULL));
    return t;
}

static void same_run(const dpt_dataset *tr, const char *spec, dpt_clip_mode mode, size_t physical) {
    dpt_trainer *one = run(tr, spec, mode, 0), *many = run(tr, spec, mode, physical);
    if (!one || !many) return;
    const dpt_model *m1 = dpt_trainer_model(one), *m2 = dpt_trainer_model(many);
    /* memory: the model's buffers hold one pass of `physical` examples, not the batch */
    CHECK(m1->max_batch > 150 && m2->max_batch == physical);
    CHECK(dpt_trainer_step(one) == 3 && dpt_trainer_step(many) == 3);
    CHECK(dpt_ledger_steps(dpt_trainer_ledger(one)) == 3 && dpt_ledger_steps(dpt_trainer_ledger(many)) == 3);
    double e1 = 0, e2 = 0;
    CHECK_OK(dpt_ledger_epsilon(dpt_trainer_ledger(one), 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e1));
    CHECK_OK(dpt_ledger_epsilon(dpt_trainer_ledger(many), 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e2));
    CHECK(e1 == e2 && e1 > 0);
    /* the parameters: each step's clipped sum of ~180 terms of norm <= 0.2 differs by float
     * rounding (a few ulp of the sum's magnitude, ~1e-6 relative), scaled by lr / (q N) and
     * carried through 3 steps; the noise (std 0.7 * 0.2 * 0.5 / 180 ~ 4e-4 per coordinate
     * and step) is the same draw, so a missing or doubled noise, or a lost pass, is far
     * outside 1e-6 (the runs differ by ~3e-8) */
    double worst = 0, moved = 0;
    for (size_t j = 0; j < m1->n_params; j++) {
        worst = fmax(worst, fabs((double)m1->theta[j] - m2->theta[j]));
        moved = fmax(moved, fabs((double)m1->theta[j]));
    }
    CHECK(worst <= 1e-6);
    if (!(worst <= 1e-6)) fprintf(stderr, "%s physical %zu: parameters differ by %g\n", spec, physical, worst);
    CHECK(moved > 0);
    dpt_trainer_free(one);
    dpt_trainer_free(many);
}

int main(void) {
    dpt_dataset tr;
    tu_make_blobs(&tr, 600, 1, 1.0f);
    same_run(&tr, "mlp:8-16-16-3:gelu", DPT_CLIP_FLAT, 16);
    same_run(&tr, "mlp:8-16-16-3:gelu", DPT_CLIP_PER_LAYER, 7);
    same_run(&tr, "mlp:8-16-16-3:gelu", DPT_CLIP_FLAT, 1);
    same_run(&tr, "cnn:2x2x2:conv3k2p1,relu,[conv16k3p1,gn2,relu,conv3k3p1],relu,maxpool2s1,fc3", DPT_CLIP_FLAT, 32);
    same_run(&tr, "cnn:2x2x2:conv3k2p1,relu,[conv16k3p1,gn2,relu,conv3k3p1],relu,maxpool2s1,fc3", DPT_CLIP_PER_LAYER,
             25);
    dpt_dataset_free(&tr);
    TEST_MAIN_END();
}
