/* train/dpulr: a run's results do not depend on the thread count. A few DP-ULR steps with
 * 1 and with 2 threads on small data made here must give bit-identical parameters, s_l,
 * lambda_min/max, rank and clipping counts, for Linear modules (controller: Gram and
 * full-rank routes, the eigenvector top-up with an --ulr-std floor; explicit mode with the
 * variance tricks) and a model with a conv module. The models are small enough that the
 * model's own GEMMs stay below OpenBLAS's threading threshold (larger ones round
 * differently with another thread count in every algorithm, DP-SGD included: see
 * docs/dpulr.md, "Threads"); the controller's LAPACK calls (dsyevr) round differently for
 * 2 OpenBLAS threads at any size, so this fails if they are not kept on one thread.
 * Also: explicit mode's perturbations come from the fast stream, the controller's from the
 * noise stream. */
#include <dptrain/train.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testdata.h"
#include "testutil.h"

/* n examples of dim features: class c shifts the features j = c (mod classes) */
static void make_data(dpt_dataset *d, size_t n, size_t C, size_t H, size_t W, int classes, uint64_t seed) {
    tu_make_clusters(d, n, C, H, W, (size_t)classes, seed, 0.7, 1.0, 1.0f);
}

typedef struct {
    float *theta;
    size_t P;
    double s[4], lmin[4], lmax[4];
    size_t rank[4], clipped[4], L;
    double train_loss;
} run_result;

static void run(const char *spec, const dpt_dataset *d, const dpt_dpulr_config *u, int threads, run_result *out) {
    memset(out, 0, sizeof *out);
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.sampler = DPT_SAMPLER_POISSON_REJECT;
    c.sample_rate = 0.2;
    c.min_batch = 20;
    c.epochs = 1;
    c.max_steps = 4;
    c.seed = 11;
    c.threads = threads;
    c.optim = dpt_optim_defaults(DPT_OPT_ADAM);
    c.optim.lr = 0.01;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpulr_new(u, &a));
    if (!a) return;
    CHECK_OK(dpt_trainer_new(&c, d, NULL, a, &t));
    if (!t) return;
    dpt_model *m = dpt_trainer_model(t);
    float *init = malloc(m->n_params * sizeof *init);
    memcpy(init, m->theta, m->n_params * sizeof *init);
    dpt_epoch_result r;
    CHECK_OK(dpt_trainer_run(t, &r));
    /* the controller's one-thread sections give OpenBLAS its thread count back */
    CHECK(dpt_threads_get_blas() == threads);
    out->P = m->n_params;
    out->theta = malloc(out->P * sizeof *out->theta);
    memcpy(out->theta, m->theta, out->P * sizeof *out->theta);
    CHECK(dpt_all_finite(out->theta, out->P));
    CHECK(memcmp(init, out->theta, out->P * sizeof *init) != 0); /* it trained */
    out->train_loss = r.train_loss;
    out->L = dpt_algo_dpulr_n_modules(a);
    CHECK(out->L >= 2 && out->L <= 4);
    for (size_t l = 0; l < out->L && l < 4; l++) {
        dpt_dpulr_module_info mi;
        CHECK_OK(dpt_algo_dpulr_module_info(a, l, &mi));
        out->s[l] = mi.s;
        out->lmin[l] = mi.lambda_min;
        out->lmax[l] = mi.lambda_max;
        out->rank[l] = mi.rank;
        out->clipped[l] = mi.clipped;
    }
    free(init);
    dpt_trainer_free(t);
}

static void compare(const char *spec, const dpt_dataset *d, const dpt_dpulr_config *u, const char *what) {
    run_result a, b;
    run(spec, d, u, 1, &a);
    run(spec, d, u, 2, &b);
    int same = a.theta && b.theta && a.P == b.P && !memcmp(a.theta, b.theta, a.P * sizeof *a.theta);
    if (!same && a.theta && b.theta && a.P == b.P) {
        double mx = 0;
        for (size_t j = 0; j < a.P; j++) mx = fmax(mx, fabs((double)a.theta[j] - b.theta[j]));
        fprintf(stderr, "%s (%s): parameters differ between 1 and 2 threads (max |diff| %g)\n", what, spec, mx);
    }
    CHECK(same);
    CHECK(a.train_loss == b.train_loss || (isnan(a.train_loss) && isnan(b.train_loss)));
    CHECK(a.L == b.L);
    for (size_t l = 0; l < a.L && l < 4; l++) {
        CHECK(a.s[l] == b.s[l]);
        CHECK(a.lmin[l] == b.lmin[l]);
        CHECK(a.lmax[l] == b.lmax[l]);
        CHECK(a.rank[l] == b.rank[l]);
        CHECK(a.clipped[l] == b.clipped[l]);
    }
    free(a.theta);
    free(b.theta);
}

int main(void) {
    dpt_dataset lin, img;
    /* Linear: module 1 has n = 41 against batches of ~40 (Gram route or full rank),
     * module 2 n = 17 (full rank, no top-up) */
    make_data(&lin, 200, 1, 1, 40, 3, 3);
    /* conv module (n = 10) then a Linear module on 3 x 6 x 6 = 108 features (Gram route) */
    make_data(&img, 200, 1, 6, 6, 3, 4);
    const char *mlp = "mlp:40-16-3:gelu", *cnn = "cnn:1x6x6:conv3k3p1,relu,flatten,fc3";

    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.noise = DPT_ULR_CONTROLLER; /* not the default */
    u.copies = 4;
    u.clip = 0.5;
    compare(mlp, &lin, &u, "controller");
    compare(cnn, &img, &u, "controller");
    /* a floor that raises s_l: the eigenvector top-up (PROJ_EIG; Gram eigenvectors for
     * the first Linear module, the conv module's own, whose s_l is ~47 here) */
    u.perturb_std = 0.3;
    compare(mlp, &lin, &u, "controller with --ulr-std floor");
    u.perturb_std = 60;
    compare(cnn, &img, &u, "controller with --ulr-std floor");
    dpt_dpulr_config e = dpt_dpulr_config_defaults();
    e.copies = 4;
    e.clip = 0.5;
    e.noise = DPT_ULR_EXPLICIT;
    e.perturb_std = 0.1;
    e.antithetic = 1;
    e.baseline = 1;
    compare(mlp, &lin, &e, "explicit");
    compare(cnn, &img, &e, "explicit");
    /* where z comes from: explicit mode draws it from the fast stream (the old noise-stream
     * path, perturb_noise_stream, gives other parameters); the controller draws it from the
     * noise stream whatever that flag says (there z is the privacy noise) */
    e.perturb_noise_stream = 1;
    compare(mlp, &lin, &e, "explicit, z from the noise stream");
    run_result f, g;
    e.perturb_noise_stream = 0;
    run(mlp, &lin, &e, 1, &f);
    e.perturb_noise_stream = 1;
    run(mlp, &lin, &e, 1, &g);
    CHECK(f.theta && g.theta && memcmp(f.theta, g.theta, f.P * sizeof *f.theta) != 0);
    free(f.theta);
    free(g.theta);
    u.perturb_std = 0;
    u.perturb_noise_stream = 0;
    run(mlp, &lin, &u, 1, &f);
    u.perturb_noise_stream = 1;
    run(mlp, &lin, &u, 1, &g);
    CHECK(f.theta && g.theta && memcmp(f.theta, g.theta, f.P * sizeof *f.theta) == 0);
    free(f.theta);
    free(g.theta);
    dpt_dataset_free(&lin);
    dpt_dataset_free(&img);
    TEST_MAIN_END();
}
