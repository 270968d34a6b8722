/* train, data parallel in one process (no MPI needed): cutting the data into S shards only
 * changes the order in which the per-shard sums are added, so after a few steps the
 * parameters with S = 1, 3, 4 agree to float rounding (no example dropped or counted
 * twice) for SGD (shuffle, uneven shards) and DP-SGD (Poisson); the sharded evaluation
 * equals the plain one; an algorithm's own per-step sums (dpt_algo.sums) are reduced over
 * the shards (a counting algorithm sees exactly the global batch size); an algorithm that
 * did not opt in is refused with S > 1; S > N is refused; and a sharded run resumed from
 * its checkpoint is bit-identical to an uninterrupted one. Multi-rank runs are in
 * tests/cli/mpi_*.sh. */
#include <dptrain/train.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testdata.h"
#include "testutil.h"
#include "train/train_internal.h"


static dpt_train_config cfg_for(size_t shards, int poisson) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:8-16-3:gelu";
    c.batch_size = 40;
    c.epochs = 2;
    c.seed = 9;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.1;
    c.threads = 1;
    c.shards = shards;
    if (poisson) {
        c.sampler = DPT_SAMPLER_POISSON;
        c.sample_rate = 0.08;
    }
    return c;
}

/* Trains and returns the parameters and the last epoch's results. */
static int train(const dpt_train_config *c, int dp, const dpt_dataset *tr, const dpt_dataset *te, float *theta,
                 dpt_epoch_result *r) {
    dpt_algo *a = NULL;
    if (dp) {
        dpt_dpsgd_config dc = dpt_dpsgd_config_defaults();
        dc.sigma = 0.8, dc.clip = 0.5;
        CHECK_OK(dpt_algo_dpsgd_new(&dc, &a));
    } else {
        CHECK_OK(dpt_algo_sgd_new(&a));
    }
    dpt_trainer *t = NULL;
    dpt_status s = dpt_trainer_new(c, tr, te, a, &t);
    CHECK_OK(s);
    if (s) return 1;
    CHECK(dpt_trainer_shards(t) == (c->shards ? c->shards : 1));
    CHECK_OK(dpt_trainer_run(t, r));
    memcpy(theta, t->model->theta, t->model->n_params * sizeof(float));
    dpt_trainer_free(t);
    return 0;
}

/* A test algorithm: counts the examples it sees in sums[0] (the loop reduces it over the
 * shards) and checks in finish that the total is the global batch size. */
typedef struct {
    double sum;
    size_t checked, wrong;
} count_state;
static dpt_status cnt_begin(dpt_algo *a, dpt_trainer *t, size_t b) {
    memset(t->model->grad, 0, t->model->n_params * sizeof(float));
    a->sums[0] = 0;
    return DPT_OK;
}
static dpt_status cnt_acc(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc, double *ls) {
    a->sums[0] += (double)bc;
    *ls = 0;
    return DPT_OK;
}
static dpt_status cnt_finish(dpt_algo *a, dpt_trainer *t, size_t b) {
    count_state *s = a->state;
    s->checked++;
    if (a->sums[0] != (double)b) s->wrong++;
    return DPT_OK;
}
static void cnt_free(dpt_algo *a) { (void)a; }

int main(void) {
    dpt_dataset tr, te;
    tu_make_blobs(&tr, 397, 1, 1.0f); /* 397 = not a multiple of 3 or 4: uneven shards */
    tu_make_blobs(&te, 203, 2, 1.0f);
    size_t P = 8 * 16 + 16 + 16 * 3 + 3;
    float th1[P], th3[P], th4[P];
    dpt_epoch_result r1, r3, r4;

    /* SGD, shuffled fixed batches (batch 40 straddles the shard borders) */
    dpt_train_config c1 = cfg_for(1, 0), c3 = cfg_for(3, 0), c4 = cfg_for(4, 0);
    train(&c1, 0, &tr, &te, th1, &r1);
    train(&c3, 0, &tr, &te, th3, &r3);
    train(&c4, 0, &tr, &te, th4, &r4);
    double d3 = 0, d4 = 0, nrm = 0;
    for (size_t j = 0; j < P; j++) {
        d3 = fmax(d3, fabs(th3[j] - th1[j]));
        d4 = fmax(d4, fabs(th4[j] - th1[j]));
        nrm = fmax(nrm, fabs(th1[j]));
    }
    CHECK(nrm > 0.1);
    CHECK(d3 <= 1e-4 * nrm);
    CHECK(d4 <= 1e-4 * nrm);
    CHECK_CLOSE(r3.test_loss, r1.test_loss, 0, 1e-4);
    CHECK_CLOSE(r4.train_loss, r1.train_loss, 0, 1e-4);
    CHECK_CLOSE(r4.test_accuracy, r1.test_accuracy, 0.01, 0);

    /* DP-SGD, Poisson: identical batches, noise drawn once; only the order of the sums differs */
    dpt_train_config p1 = cfg_for(1, 1), p4 = cfg_for(4, 1);
    train(&p1, 1, &tr, &te, th1, &r1);
    train(&p4, 1, &tr, &te, th4, &r4);
    d4 = 0, nrm = 0;
    for (size_t j = 0; j < P; j++) {
        d4 = fmax(d4, fabs(th4[j] - th1[j]));
        nrm = fmax(nrm, fabs(th1[j]));
    }
    CHECK(d4 <= 1e-4 * nrm);
    CHECK_CLOSE(r4.test_loss, r1.test_loss, 0, 1e-4);
    CHECK(isnan(r1.train_loss) && isnan(r4.train_loss)); /* never released by a private run */

    /* the sharded evaluation equals the plain one on the same model */
    {
        dpt_algo *a = NULL;
        dpt_trainer *t = NULL;
        dpt_train_config c = cfg_for(5, 0);
        CHECK_OK(dpt_algo_sgd_new(&a));
        CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &t));
        double l0, a0, l5, a5;
        CHECK_OK(dpt_evaluate(t->model, c.loss, &te, &l0, &a0));
        CHECK_OK(dpt_dist_evaluate(t, &te, &l5, &a5));
        CHECK_CLOSE(l5, l0, 0, 1e-6); /* chunks start at the shard borders: float rounding */
        CHECK(a5 == a0);
        dpt_trainer_free(t);
    }

    /* per-step sums of an algorithm are reduced over the shards */
    {
        static double sums[1];
        static count_state st;
        static dpt_algo a;
        a = (dpt_algo){.name = "count", .begin = cnt_begin, .accumulate = cnt_acc, .finish = cnt_finish,
                       .free = cnt_free, .state = &st, .distributable = 1, .n_sums = 1, .sums = sums};
        dpt_train_config c = cfg_for(4, 1);
        c.optim.lr = 1e-9; /* the gradient stays 0 anyway */
        dpt_trainer *t = NULL;
        CHECK_OK(dpt_trainer_new(&c, &tr, NULL, &a, &t));
        if (t) CHECK_OK(dpt_trainer_run(t, NULL));
        CHECK(st.checked == 2 * 13); /* round(1/0.08) = 13 steps per epoch */
        CHECK(st.wrong == 0);
        dpt_trainer_free(t);
        /* not opted in: refused with S > 1, naming the algorithm */
        a.distributable = 0;
        CHECK_STATUS(dpt_trainer_new(&c, &tr, NULL, &a, &t), DPT_EINVAL);
        CHECK_ERR_HAS("does not support data-parallel");
        c.shards = 1;
        CHECK_OK(dpt_trainer_new(&c, &tr, NULL, &a, &t));
        dpt_trainer_free(t);
    }

    /* more shards than examples */
    {
        dpt_algo *a = NULL;
        dpt_trainer *t = NULL;
        dpt_train_config c = cfg_for(398, 0);
        CHECK_OK(dpt_algo_sgd_new(&a));
        CHECK_STATUS(dpt_trainer_new(&c, &tr, NULL, a, &t), DPT_EINVAL);
        CHECK_ERR_HAS("dpt_train_config.shards must be in [1,");
    }

    /* a sharded run resumed from its checkpoint (shards taken from it) == uninterrupted */
    {
        const char *dir = tu_tmpdir();
        dpt_train_config c = cfg_for(3, 1);
        c.epochs = 4;
        train(&c, 1, &tr, &te, th1, &r1);
        c.out_dir = dir;
        c.epochs = 2;
        train(&c, 1, &tr, &te, th3, &r3);
        dpt_algo *a = NULL;
        dpt_dpsgd_config dc = dpt_dpsgd_config_defaults();
        dc.sigma = 0.8, dc.clip = 0.5;
        CHECK_OK(dpt_algo_dpsgd_new(&dc, &a));
        dpt_trainer *t = NULL;
        c.epochs = 4;
        c.shards = 0; /* from the checkpoint */
        CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &t));
        CHECK_OK(dpt_trainer_resume(t));
        CHECK(dpt_trainer_shards(t) == 3);
        CHECK_OK(dpt_trainer_run(t, NULL));
        CHECK(!memcmp(t->model->theta, th1, P * sizeof(float)));
        dpt_trainer_free(t);
        char p[600];
        snprintf(p, sizeof p, "%s/checkpoint.safetensors", dir), unlink(p);
        snprintf(p, sizeof p, "%s/ledger.json", dir), unlink(p);
        snprintf(p, sizeof p, "%s/metrics.jsonl", dir), unlink(p);
        rmdir(dir);
    }
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);
    TEST_MAIN_END();
}
