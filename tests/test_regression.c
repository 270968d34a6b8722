/* data + train: regression targets (dpt_dataset.t). Datasets from arrays and CSV files
 * (copies, the first bad value named, hashes that tell targets apart, gathers, the class
 * operations refused); full-batch SGD on a linear model reaches the least-squares solution
 * of the normal equations (solved here in double); evaluation against a naive loop; DP-SGD's
 * pre-noise clipped sum against per-example gradients written out by hand for a linear
 * model (r x^T and r, r = W x + b - t, clipped in double), on the fast and reference paths,
 * flat and per-layer; neighbouring batches differ by C; the noise has std sigma C; the
 * algorithms and losses that cannot train on targets are refused; a resume with other
 * targets is refused. */
#include <dptrain/audit.h>
#include <dptrain/train.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testalgo.h"
#include "testutil.h"
#include "train/train_internal.h"

/* n examples of D features in [-1, 1] and T targets t = A x + c + e (e uniform in
 * [-noise, noise]); xs, ts malloc'd. */
static void make_data(size_t n, size_t D, size_t T, double noise, uint64_t seed, float **xs, float **ts) {
    dpt_rng r;
    CHECK_OK(dpt_rng_init(&r, seed, DPT_STREAM_DATA));
    float *x = malloc(n * D * sizeof *x), *t = malloc(n * T * sizeof *t);
    for (size_t i = 0; i < n * D; i++) x[i] = (float)(2 * dpt_rng_uniform(&r) - 1);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < T; k++) {
            double v = 0.5 * (double)k - 0.3;
            for (size_t j = 0; j < D; j++) v += (0.2 + 0.1 * (double)j - 0.4 * (double)k) * x[i * D + j];
            t[i * T + k] = (float)(v + noise * (2 * dpt_rng_uniform(&r) - 1));
        }
    dpt_rng_free(&r);
    *xs = x, *ts = t;
}

static void test_dataset(void) {
    const size_t n = 6, D = 3, T = 2;
    float *x, *t;
    make_data(n, D, T, 0.1, 1, &x, &t);
    dpt_dataset d;
    CHECK_OK(dpt_dataset_from_targets(x, t, n, D, T, &d));
    CHECK(d.t && d.t != t && d.t_dim == T && !d.y && d.n_classes == 0 && d.n == n && d.dim == D);
    CHECK(!memcmp(d.t, t, n * T * sizeof *t) && !memcmp(d.x, x, n * D * sizeof *x));
    CHECK_OK(dpt_dataset_validate(&d));
    const uint32_t idx[3] = {4, 0, 4};
    float tb[6] = {0}, xb[9];
    int32_t yb[3] = {7, 7, 7};
    dpt_dataset_gather(&d, idx, 3, xb, yb);
    dpt_dataset_gather_targets(&d, idx, 3, tb);
    CHECK(yb[0] == 7 && yb[2] == 7); /* no labels: y_out untouched */
    CHECK(tb[0] == t[8] && tb[1] == t[9] && tb[2] == t[0] && tb[5] == t[9]);
    CHECK(!memcmp(xb + 3, x, D * sizeof *x));
    CHECK_STATUS(dpt_dataset_set_n_classes(&d, 3), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "regression") != NULL);
    const int cls[2] = {0, 1};
    CHECK_STATUS(dpt_dataset_filter_classes(&d, cls, 2), DPT_EINVAL);
    /* the hash covers the targets, and a classification dataset with the same x differs */
    uint8_t h1[32], h2[32], h3[32];
    CHECK_OK(dpt_dataset_hash(&d, h1));
    d.t[5] = nextafterf(d.t[5], 10.0f);
    CHECK_OK(dpt_dataset_hash(&d, h2));
    CHECK(memcmp(h1, h2, 32) != 0);
    int32_t y[6] = {0, 0, 0, 0, 0, 0};
    dpt_dataset c;
    CHECK_OK(dpt_dataset_from_arrays(x, y, n, D, 1, &c));
    CHECK_OK(dpt_dataset_hash(&c, h3));
    CHECK(memcmp(h1, h3, 32) != 0);
    dpt_dataset_free(&c);
    /* validation of a hand-made struct: labels and targets together are refused */
    d.y = y;
    CHECK_STATUS(dpt_dataset_validate(&d), DPT_EFORMAT);
    d.y = NULL;
    d.t[3] = NAN;
    CHECK_STATUS(dpt_dataset_validate(&d), DPT_EFORMAT);
    CHECK(strstr(dpt_last_error(), "example 1 (target 1)") != NULL);
    CHECK_OK(dpt_dataset_take(&d, 2));
    dpt_dataset_free(&d);
    /* refusals name the argument and the first bad value; *out stays zeroed */
    t[7] = INFINITY;
    memset(&d, 0xab, sizeof d);
    CHECK_STATUS(dpt_dataset_from_targets(x, t, n, D, T, &d), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "t[7]") && strstr(dpt_last_error(), "example 3, target 1"));
    CHECK(!d.x && !d.t && d.n == 0);
    CHECK_STATUS(dpt_dataset_from_targets(x, t, n, D, 0, &d), DPT_EINVAL);
    CHECK_STATUS(dpt_dataset_from_targets(x, NULL, n, D, T, &d), DPT_EINVAL);
    CHECK_STATUS(dpt_dataset_from_targets(NULL, t, n, D, T, &d), DPT_EINVAL);
    free(x), free(t);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_csv(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/reg.csv", tu_tmpdir());
    write_file(p, "price,tax,a,b,c\r\n1.5,-2,0.1,0.2,0.3\r\n\n-0.25,3e2,1,2,3\n");
    dpt_dataset d;
    CHECK_OK(dpt_data_load_csv_targets(p, 2, &d));
    CHECK(d.n == 2 && d.dim == 3 && d.t_dim == 2 && !d.y && d.n_classes == 0);
    if (d.t) CHECK(d.t[0] == 1.5f && d.t[1] == -2.0f && d.t[2] == -0.25f && d.t[3] == 300.0f);
    if (d.x) CHECK(d.x[0] == 0.1f && d.x[5] == 3.0f);
    dpt_dataset_free(&d);
    /* the same file through a dataset name; classification names refuse targets */
    char name[700];
    snprintf(name, sizeof name, "csv:%s", p);
    CHECK_OK(dpt_data_load_targets(name, NULL, DPT_SPLIT_TEST, 1, &d));
    CHECK(d.t_dim == 1 && d.dim == 4);
    dpt_dataset_free(&d);
    CHECK_STATUS(dpt_data_load_targets("mnist", NULL, DPT_SPLIT_TRAIN, 1, &d), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "class labels") != NULL);
    /* too few columns, a non-numeric target (named by line and column), t_dim 0 */
    CHECK_STATUS(dpt_data_load_csv_targets(p, 5, &d), DPT_EFORMAT);
    CHECK(strstr(dpt_last_error(), "need 5 target column(s)") != NULL);
    write_file(p, "1,2,3\n4,x,6\n");
    CHECK_STATUS(dpt_data_load_csv_targets(p, 2, &d), DPT_EFORMAT);
    CHECK(strstr(dpt_last_error(), "reg.csv:2:2") != NULL);
    CHECK(!d.x && !d.t);
    CHECK_STATUS(dpt_data_load_csv_targets(p, 0, &d), DPT_EINVAL);
    /* features alone (unlabelled, for prediction): the skipped columns are not read, and
     * training, evaluation and the audit refuse such data */
    write_file(p, "label,a,b\ncat,1,2\ndog,3,4.5\n");
    CHECK_OK(dpt_data_load_csv_features(p, 1, &d));
    CHECK(d.n == 2 && d.dim == 2 && !d.y && !d.t && d.n_classes == 0 && d.x && d.x[3] == 4.5f);
    CHECK_OK(dpt_dataset_validate(&d));
    CHECK_STATUS(dpt_dataset_set_n_classes(&d, 2), DPT_EINVAL);
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = "mlp:2-2";
    c.batch_size = 1;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_STATUS(dpt_trainer_new(&c, &d, NULL, a, &t), DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "the training set has neither labels nor regression targets") != NULL);
    dpt_model *m = NULL;
    double l, acc, loss[2], phi[2];
    CHECK_OK(dpt_model_new("mlp:2-2", 4, 1, &m));
    CHECK_STATUS(dpt_evaluate(m, DPT_LOSS_SOFTMAX_CE, &d, &l, &acc), DPT_EINVAL);
    CHECK_STATUS(dpt_audit_scores(m, &d, NULL, 2, loss, phi), DPT_EINVAL);
    dpt_model_free(m);
    dpt_dataset_free(&d);
    CHECK_STATUS(dpt_data_load_csv_features(p, 3, &d), DPT_EFORMAT); /* nothing left after the skipped columns */
    CHECK(strstr(dpt_last_error(), "need at least one feature after the 3 skipped") != NULL);
    /* the header is told by the first field that is read: skipped columns hold text in
     * every row (ids, names) without making the first row a header, and a header whose
     * skipped field looks like a number is still a header */
    write_file(p, "id0,1,2\nid1,3,4\nid2,5,6\n");
    CHECK_OK(dpt_data_load_csv_features(p, 1, &d));
    CHECK(d.n == 3 && d.dim == 2 && d.x[0] == 1.0f && d.x[5] == 6.0f);
    dpt_dataset_free(&d);
    write_file(p, "7,x1,x2\nid,3,4\n");
    CHECK_OK(dpt_data_load_csv_features(p, 1, &d));
    CHECK(d.n == 1 && d.dim == 2 && d.x[0] == 3.0f);
    dpt_dataset_free(&d);
    remove(p);
}

static dpt_train_config cfg_for(const char *spec) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = spec;
    c.loss = DPT_LOSS_SQUARED;
    c.sampler = DPT_SAMPLER_POISSON;
    c.sample_rate = 0.2;
    c.epochs = 1;
    c.seed = 3;
    c.threads = 1;
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    c.optim.lr = 0.1;
    return c;
}

/* Solves the normal equations of least squares with an intercept for target k: the
 * (D+1) x (D+1) system by Gaussian elimination with partial pivoting, in double. */
static void least_squares(const float *x, const float *t, size_t n, size_t D, size_t T, size_t k, double *w) {
    const size_t M = D + 1;
    double A[8][9] = {{0}};
    for (size_t i = 0; i < n; i++) {
        double z[8];
        for (size_t j = 0; j < D; j++) z[j] = x[i * D + j];
        z[D] = 1;
        for (size_t a = 0; a < M; a++) {
            for (size_t b = 0; b < M; b++) A[a][b] += z[a] * z[b];
            A[a][M] += z[a] * t[i * T + k];
        }
    }
    for (size_t c = 0; c < M; c++) {
        size_t p = c;
        for (size_t r = c + 1; r < M; r++)
            if (fabs(A[r][c]) > fabs(A[p][c])) p = r;
        for (size_t b = 0; b <= M; b++) {
            double s = A[c][b];
            A[c][b] = A[p][b], A[p][b] = s;
        }
        for (size_t r = 0; r < M; r++)
            if (r != c) {
                double f = A[r][c] / A[c][c];
                for (size_t b = c; b <= M; b++) A[r][b] -= f * A[c][b];
            }
    }
    for (size_t a = 0; a < M; a++) w[a] = A[a][M] / A[a][a];
}

/* Full-batch SGD on a linear model: the fitted weights are the least-squares solution and
 * the test loss / MSE are the naive loop's; also data parallel over 3 shards (each shard
 * gathers its own examples' targets, and the evaluation is split by shards). */
static void test_least_squares(size_t shards) {
    const size_t n = 300, D = 3, T = 2;
    float *x, *t;
    make_data(n, D, T, 0.3, 2, &x, &t);
    dpt_dataset tr, te;
    CHECK_OK(dpt_dataset_from_targets(x, t, n, D, T, &tr));
    CHECK_OK(dpt_dataset_from_targets(x, t, 100, D, T, &te));
    dpt_train_config c = cfg_for("mlp:3-2");
    c.sampler = DPT_SAMPLER_FULL;
    c.shards = shards;
    c.epochs = 400;
    c.optim.lr = 0.5;
    dpt_algo *a = NULL;
    dpt_trainer *tn = NULL;
    CHECK_OK(dpt_algo_sgd_new(&a));
    CHECK_OK(dpt_trainer_new(&c, &tr, &te, a, &tn));
    dpt_epoch_result last;
    CHECK_OK(dpt_trainer_run(tn, &last));
    if (!tn) goto out;
    const dpt_model *m = tn->model; /* fc1: weights [T, D] then bias [T] */
    for (size_t k = 0; k < T; k++) {
        double w[4];
        least_squares(x, t, n, D, T, k, w);
        for (size_t j = 0; j < D; j++) CHECK_CLOSE(m->theta[k * D + j], w[j], 1e-4, 1e-4);
        CHECK_CLOSE(m->theta[T * D + k], w[D], 1e-4, 1e-4);
    }
    /* evaluation against a naive loop over the test set */
    double lsum = 0;
    for (size_t i = 0; i < 100; i++)
        for (size_t k = 0; k < T; k++) {
            double o = m->theta[T * D + k];
            for (size_t j = 0; j < D; j++) o += (double)m->theta[k * D + j] * x[i * D + j];
            lsum += 0.5 * (o - t[i * T + k]) * (o - t[i * T + k]);
        }
    CHECK_CLOSE(last.test_loss, lsum / 100, 1e-6, 1e-5);
    CHECK_CLOSE(last.test_mse, 2 * lsum / 100 / T, 1e-6, 1e-5);
    CHECK(isnan(last.test_accuracy));
    /* the noise level of the data: the fit is about as good as the truth (e ~ U(-0.3, 0.3)) */
    CHECK(last.test_mse > 0.02 && last.test_mse < 0.035);
    double ml, acc;
    CHECK_OK(dpt_evaluate(tn->model, DPT_LOSS_SQUARED, &te, &ml, &acc));
    CHECK(ml == last.test_loss && isnan(acc));
    CHECK_STATUS(dpt_evaluate(tn->model, DPT_LOSS_SOFTMAX_CE, &te, &ml, &acc), DPT_EINVAL);
out:
    dpt_trainer_free(tn);
    dpt_dataset_free(&tr), dpt_dataset_free(&te);
    free(x), free(t);
}

static dpt_trainer *dp_trainer(const dpt_train_config *c, const dpt_dataset *tr, double sigma, double C,
                               dpt_clip_mode mode, int reference, dpt_algo **algo) {
    dpt_dpsgd_config d = dpt_dpsgd_config_defaults();
    d.sigma = sigma, d.clip = C, d.clip_mode = mode, d.reference = reference, d.ref_chunk = 7;
    dpt_algo *a = NULL;
    dpt_trainer *t = NULL;
    CHECK_OK(dpt_algo_dpsgd_new(&d, &a));
    CHECK_OK(dpt_trainer_new(c, tr, NULL, a, &t));
    if (algo) *algo = a;
    return t;
}

/* The algorithm's hooks on the first b examples: their targets go where the loop gathers
 * them (dpt_trainer_batch_targets), then tu_algo_grad. */
static void grad_of(dpt_trainer *t, dpt_algo *a, const dpt_dataset *d, size_t b, int finish, float *out) {
    CHECK(b <= t->max_batch);
    memcpy(t->tb, d->t, b * d->t_dim * sizeof *d->t);
    tu_algo_grad(t, a, d->x, NULL, b, finish, out);
}

/* sum_i clip(g_i) for a linear model theta = (W [T, D], b [T]) written out by hand:
 * g_i = (r_i x_i^T, r_i), r_i = W x_i + b - t_i; flat clipping scales the whole g_i to
 * norm <= C, per-layer clipping is the same here (one layer). */
static void reference_linear(const float *theta, const dpt_dataset *d, size_t b, double C, double *out) {
    const size_t D = d->dim, T = d->t_dim, P = T * D + T;
    memset(out, 0, P * sizeof *out);
    double *g = malloc(P * sizeof *g);
    for (size_t i = 0; i < b; i++) {
        const float *xi = d->x + i * D;
        double nn = 0;
        for (size_t k = 0; k < T; k++) {
            double r = theta[T * D + k] - d->t[i * T + k];
            for (size_t j = 0; j < D; j++) r += (double)theta[k * D + j] * xi[j];
            for (size_t j = 0; j < D; j++) g[k * D + j] = r * xi[j];
            g[T * D + k] = r;
        }
        for (size_t j = 0; j < P; j++) nn += g[j] * g[j];
        const double f = fmin(1.0, C / sqrt(nn));
        for (size_t j = 0; j < P; j++) out[j] += f * g[j];
    }
    free(g);
}

/* The step of algorithm a on the first b examples (begin + accumulate, and finish when
 * `finish`) equals scale x reference_linear(C), to relative norm `tol`; the reference's
 * norm is at least `min_norm` (the comparison is not of zeros). */
static void check_against_reference(dpt_trainer *t, dpt_algo *a, const dpt_dataset *tr, size_t b, int finish, double C,
                                    double scale, double min_norm, double tol) {
    const size_t P = t->model->n_params;
    float *got = malloc(P * sizeof *got);
    double *want = malloc(P * sizeof *want), nw = 0, nd = 0;
    grad_of(t, a, tr, b, finish, got);
    reference_linear(t->model->theta, tr, b, C, want);
    for (size_t j = 0; j < P; j++) {
        want[j] *= scale;
        nw += want[j] * want[j], nd += (got[j] - want[j]) * (got[j] - want[j]);
    }
    CHECK(sqrt(nw) > min_norm);
    CHECK_CLOSE(sqrt(nd), 0.0, tol * sqrt(nw), 0);
    free(got), free(want);
}

static void test_dpsgd_sum(const dpt_dataset *tr) {
    dpt_train_config c = cfg_for("mlp:3-2");
    for (int mode = 0; mode < 2; mode++)
        for (int reference = 0; reference < 2; reference++) {
            dpt_algo *a = NULL;
            dpt_trainer *t = dp_trainer(&c, tr, 1.0, 0.8, mode ? DPT_CLIP_PER_LAYER : DPT_CLIP_FLAT, reference, &a);
            if (!t) return;
            const size_t b = 37;
            check_against_reference(t, a, tr, b, 0, 0.8, 1.0, 1.0, 2e-6);
            dpt_trainer_free(t);
        }
}

/* The non-private algorithms that take targets: the step direction of sgd and of pdp-sgd and
 * proportional-noise without regularization is the mean of the hand-written per-example
 * gradients (no clipping: C = infinity in reference_linear). */
static void test_nonprivate_grad(const dpt_dataset *tr) {
    dpt_train_config c = cfg_for("mlp:3-2");
    for (int k = 0; k < 3; k++) {
        dpt_algo *a = NULL;
        dpt_trainer *t = NULL;
        const dpt_pdp_config pdp = {0.0, 0.0, 0.0};
        const dpt_propnoise_config pn = {0.5, 0.0};
        if (k == 0) CHECK_OK(dpt_algo_sgd_new(&a));
        if (k == 1) CHECK_OK(dpt_algo_pdpsgd_new(&pdp, &a));
        if (k == 2) CHECK_OK(dpt_algo_propnoise_new(&pn, &a));
        CHECK_OK(dpt_trainer_new(&c, tr, NULL, a, &t));
        if (!t) continue;
        check_against_reference(t, a, tr, 23, 1, INFINITY, 1.0 / 23, 0.1, 1e-5);
        dpt_trainer_free(t);
    }
}

/* Neighbouring batches (the last example removed) differ by that example's clipped
 * gradient: norm C when its gradient is larger than C. */
static void test_sensitivity(const dpt_dataset *tr) {
    dpt_train_config c = cfg_for("mlp:3-8-2:tanh");
    const double C = 0.01;
    dpt_algo *a = NULL;
    dpt_trainer *t = dp_trainer(&c, tr, 1.0, C, DPT_CLIP_FLAT, 0, &a);
    if (!t) return;
    const size_t P = t->model->n_params;
    float *s1 = malloc(P * sizeof *s1), *s2 = malloc(P * sizeof *s2);
    grad_of(t, a, tr, 30, 0, s1);
    grad_of(t, a, tr, 29, 0, s2);
    double d = 0;
    for (size_t j = 0; j < P; j++) d += ((double)s1[j] - s2[j]) * ((double)s1[j] - s2[j]);
    CHECK_CLOSE(sqrt(d), C, 0, 1e-4);
    free(s1), free(s2);
    dpt_trainer_free(t);
}

/* Zero inputs and targets and zero parameters: every residual and gradient is 0, so the
 * released update is the noise alone, N(0, (sigma C)^2) / qN per coordinate. */
static void test_noise(void) {
    const size_t n = 200, D = 4, T = 3;
    float *x = calloc(n * D, sizeof *x), *tg = calloc(n * T, sizeof *tg);
    dpt_dataset z;
    CHECK_OK(dpt_dataset_from_targets(x, tg, n, D, T, &z));
    dpt_train_config c = cfg_for("mlp:4-64-3:relu");
    const double sigma = 1.7, C = 0.4, qN = 0.2 * (double)n;
    dpt_algo *a = NULL;
    dpt_trainer *t = dp_trainer(&c, &z, sigma, C, DPT_CLIP_FLAT, 0, &a);
    if (t) {
        const size_t P = t->model->n_params;
        memset(t->model->theta, 0, P * sizeof(float));
        float *u = malloc(P * sizeof *u);
        double s1 = 0, s2 = 0;
        size_t cnt = 0;
        for (int rep = 0; rep < 20; rep++) {
            grad_of(t, a, &z, 30, 1, u);
            for (size_t j = 0; j < P; j++) s1 += u[j] * qN, s2 += (u[j] * qN) * (u[j] * qN);
            cnt += P;
        }
        const double mean = s1 / (double)cnt, sd = sqrt(s2 / (double)cnt - mean * mean), want = sigma * C;
        CHECK_CLOSE(mean, 0.0, 5 * want / sqrt((double)cnt), 0);
        CHECK_CLOSE(sd, want, 5 * want / sqrt(2.0 * (double)cnt), 0);
        free(u);
    }
    dpt_trainer_free(t);
    dpt_dataset_free(&z);
    free(x), free(tg);
}

static void expect_refused(const dpt_train_config *c, const dpt_dataset *tr, const dpt_dataset *te, dpt_algo *a,
                           dpt_status st, const char *msg) {
    dpt_trainer *t = NULL;
    CHECK_STATUS(dpt_trainer_new(c, tr, te, a, &t), st);
    if (!strstr(dpt_last_error(), msg)) {
        fprintf(stderr, "expected '%s' in: %s\n", msg, dpt_last_error());
        CHECK(0);
    }
    CHECK(t == NULL);
}

static void test_refusals(const dpt_dataset *tr) {
    dpt_train_config c = cfg_for("mlp:3-2");
    dpt_algo *a = NULL;
    /* algorithms without regression support */
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    CHECK_OK(dpt_algo_dpulr_new(&u, &a));
    expect_refused(&c, tr, NULL, a, DPT_ENOTSUP, "does not train on regression data");
    dpt_noisy_gd_config g = dpt_noisy_gd_config_defaults();
    CHECK_OK(dpt_algo_noisy_gd_new(&g, &a));
    c.sampler = DPT_SAMPLER_FULL;
    expect_refused(&c, tr, NULL, a, DPT_ENOTSUP, "does not train on regression data");
    c.sampler = DPT_SAMPLER_POISSON;
    /* another loss, another width, a classification test set */
    c.loss = DPT_LOSS_SOFTMAX_CE;
    CHECK_OK(dpt_algo_sgd_new(&a));
    expect_refused(&c, tr, NULL, a, DPT_EINVAL, "need the squared-error loss");
    c.loss = DPT_LOSS_SQUARED;
    c.model_spec = "mlp:3-3";
    CHECK_OK(dpt_algo_sgd_new(&a));
    expect_refused(&c, tr, NULL, a, DPT_EINVAL, "has 3 outputs but the data have 2 regression targets");
    c.model_spec = "mlp:3-2";
    int32_t y[4] = {0, 1, 1, 0};
    dpt_dataset cl;
    CHECK_OK(dpt_dataset_from_arrays(tr->x, y, 4, 3, 2, &cl));
    CHECK_OK(dpt_algo_sgd_new(&a));
    expect_refused(&c, tr, &cl, a, DPT_EINVAL, "the test set has class labels");
    CHECK_OK(dpt_algo_sgd_new(&a));
    c.loss = DPT_LOSS_SOFTMAX_CE;
    expect_refused(&c, &cl, tr, a, DPT_EINVAL, "the test set has regression targets");
    dpt_dataset_free(&cl);
    /* the membership-inference audit scores classifiers only */
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("mlp:3-2", 8, 1, &m));
    double loss[4], phi[4];
    CHECK_STATUS(dpt_audit_scores(m, tr, NULL, 4, loss, phi), DPT_ENOTSUP);
    dpt_model_free(m);
}

/* A resume with other targets (one changed by one ulp) is refused: the data differ. */
static void test_resume(const dpt_dataset *tr) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/reg_run", tu_tmpdir());
    dpt_train_config c = cfg_for("mlp:3-2");
    c.out_dir = dir;
    c.max_steps = 2;
    dpt_trainer *t = dp_trainer(&c, tr, 1.0, 1.0, DPT_CLIP_FLAT, 0, NULL);
    CHECK_OK(dpt_trainer_run(t, NULL));
    dpt_trainer_free(t);
    dpt_dataset other;
    CHECK_OK(dpt_dataset_from_targets(tr->x, tr->t, tr->n, tr->dim, tr->t_dim, &other));
    other.t[11] = nextafterf(other.t[11], 100.0f);
    c.max_steps = 4;
    t = dp_trainer(&c, &other, 1.0, 1.0, DPT_CLIP_FLAT, 0, NULL);
    CHECK_STATUS(dpt_trainer_resume(t), DPT_EMISMATCH);
    dpt_trainer_free(t);
    t = dp_trainer(&c, tr, 1.0, 1.0, DPT_CLIP_FLAT, 0, NULL);
    CHECK_OK(dpt_trainer_resume(t));
    CHECK_OK(dpt_trainer_run(t, NULL));
    if (t) CHECK(dpt_trainer_step(t) == 4);
    dpt_trainer_free(t);
    dpt_dataset_free(&other);
}

int main(void) {
    test_dataset();
    test_csv();
    test_least_squares(0);
    test_least_squares(3);
    float *x, *t;
    make_data(200, 3, 2, 0.5, 7, &x, &t);
    dpt_dataset tr;
    CHECK_OK(dpt_dataset_from_targets(x, t, 200, 3, 2, &tr));
    test_dpsgd_sum(&tr);
    test_nonprivate_grad(&tr);
    test_sensitivity(&tr);
    test_noise();
    test_refusals(&tr);
    test_resume(&tr);
    dpt_dataset_free(&tr);
    free(x), free(t);
    TEST_MAIN_END();
}
