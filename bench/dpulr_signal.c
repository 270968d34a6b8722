/* How much of the true gradient a clipped DP-ULR estimate carries, against DP-SGD's clipped
 * per-example gradients (docs/dpulr.md, Section 4.3 "Why DP-ULR trails DP-SGD here").
 *
 * On one fixed batch (the first B training examples) and one set of parameters (the
 * model's LeCun init from seed 1, or a checkpoint's), with g the batch's mean loss gradient
 * (backprop) and u its unit vector, prints for each direction d the released update
 * WITHOUT privacy noise (the clipped sum divided by B):
 *   proj = d . u   the mean over examples of (clipped per-example estimate) . u: what one
 *                  example adds along the true gradient per unit of clipping budget C
 *   cos  = cos(d, g)
 *   |d|
 * for DP-SGD (flat clipping at C) and for DP-ULR in explicit mode with the baseline alone
 * (s, per-module clipping C / sqrt(#modules)) at each K, over R draws of the perturbations;
 * and for DP-ULR without clipping (the non-private estimator, mean over the batch).
 * With the same q and sigma, both methods' privacy noise along u has the same std sigma C /
 * (q N) per step, so proj_ULR / proj_SGD is the ratio of their signal-to-noise along the
 * gradient per step, and (proj_SGD / proj_ULR)^2 roughly how many more steps DP-ULR needs
 * for the same progress (docs/dpulr.md says how far that reading goes).
 *
 * usage: dpulr_signal DATASET DATA_DIR MODEL [B=1000] [K=4,16,64] [R=2] [C=1] [s=0.1]
 *        [CHECKPOINT|-] [threads=1]
 *   DATASET as dptrain's --dataset (cifar10, mnist, csv:PATH, ...); the published
 *   normalization constants where the dataset has them (--normalize public), else none.
 * Prints one CSV line per direction and draw on stdout:
 *   method,K,draw,proj,cos,norm */
#include <dptrain/data.h>
#include <dptrain/io.h>
#include <dptrain/train.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const dpt_dataset *d;
    const char *spec, *ckpt;
    size_t B;
    int threads;
    const float *theta; /* the parameters every direction is taken at (NULL: the first run sets them) */
} probe;

/* The update direction algorithm `a` releases on the batch (a is freed). seed drives the
 * algorithm's randomness (DP-ULR's perturbations); the parameters are p->theta. */
static int direction(probe *p, dpt_algo *a, uint64_t seed, float *out, float **theta_out) {
    dpt_train_config c = dpt_train_config_defaults();
    c.model_spec = p->spec;
    c.init = DPT_INIT_LECUN;
    c.seed = seed;
    c.threads = p->threads;
    c.epochs = 1;
    /* the sampler is never run (the batch is given below); DP-SGD's trainer takes Poisson only */
    c.sampler = strcmp(a->name, "dpsgd") ? DPT_SAMPLER_SHUFFLE : DPT_SAMPLER_POISSON;
    c.batch_size = p->B;
    c.sample_rate = (double)p->B / (double)p->d->n; /* DP-SGD divides by qN = B */
    c.optim = dpt_optim_defaults(DPT_OPT_SGD);
    dpt_trainer *t = NULL;
    if (dpt_trainer_new(&c, p->d, NULL, a, &t) != DPT_OK) return 1;
    dpt_model *m = dpt_trainer_model(t);
    const size_t P = dpt_model_n_params(m), mb = dpt_model_max_batch(m), D = p->d->dim;
    if (p->theta) {
        memcpy(dpt_model_params(m), p->theta, P * sizeof(float));
    } else if (p->ckpt && dpt_checkpoint_load(p->ckpt, m, NULL, NULL) != DPT_OK) {
        dpt_trainer_free(t);
        return 1;
    }
    double loss = 0.0;
    int rc = a->begin(a, t, p->B) != DPT_OK;
    for (size_t lo = 0; !rc && lo < p->B; lo += mb) {
        const size_t n = p->B - lo < mb ? p->B - lo : mb;
        double l = 0.0;
        rc = a->accumulate(a, t, p->d->x + lo * D, p->d->y + lo, n, &l) != DPT_OK;
        loss += l;
    }
    if (!rc) rc = a->finish(a, t, p->B) != DPT_OK;
    if (!rc) memcpy(out, m->grad, P * sizeof(float));
    if (!rc && theta_out) {
        *theta_out = malloc(P * sizeof(float));
        if (*theta_out) memcpy(*theta_out, dpt_model_params(m), P * sizeof(float));
        rc = !*theta_out;
    }
    dpt_trainer_free(t);
    return rc;
}

static void report(const char *method, size_t K, int draw, const float *d, const float *g, size_t P) {
    double dg = 0.0, dd = 0.0, gg = 0.0;
    for (size_t i = 0; i < P; i++) dg += (double)d[i] * g[i], dd += (double)d[i] * d[i], gg += (double)g[i] * g[i];
    printf("%s,%zu,%d,%.6g,%.6g,%.6g\n", method, K, draw, dg / sqrt(gg), dd > 0 ? dg / sqrt(dd * gg) : 0.0, sqrt(dd));
    fflush(stdout);
}

static dpt_algo *ulr(size_t K, double C, double s, int private_) {
    dpt_dpulr_config u = dpt_dpulr_config_defaults();
    u.private_ = private_;
    u.copies = K;
    u.clip = C;
    u.noise = DPT_ULR_EXPLICIT;
    u.perturb_std = s;
    u.baseline = 1;
    u.antithetic = 0;
    u.accounted = 0;      /* fixed batch, divided by B: no sampling here */
    u.sigma0 = 1e-30;     /* the clipped sum alone: noise of std 1e-30 C changes no float */
    dpt_algo *a = NULL;
    return dpt_algo_dpulr_new(&u, &a) == DPT_OK ? a : NULL;
}

int main(int argc, char **argv) {
    if (argc < 4 || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: dpulr_signal DATASET DATA_DIR MODEL [B=1000] [K=4,16,64] [R=2] [C=1] [s=0.1] "
                        "[CHECKPOINT|-] [threads=1]\n");
        return 2;
    }
    probe p = {0};
    p.spec = argv[3];
    p.B = argc > 4 ? strtoull(argv[4], NULL, 10) : 1000;
    const char *Ks = argc > 5 ? argv[5] : "4,16,64";
    const int R = argc > 6 ? atoi(argv[6]) : 2;
    const double C = argc > 7 ? atof(argv[7]) : 1.0, s = argc > 8 ? atof(argv[8]) : 0.1;
    p.ckpt = argc > 9 && strcmp(argv[9], "-") ? argv[9] : NULL;
    p.threads = argc > 10 ? atoi(argv[10]) : 1;
    dpt_dataset d;
    if (dpt_data_load(argv[1], argv[2], DPT_SPLIT_TRAIN, &d) != DPT_OK) {
        fprintf(stderr, "dpulr_signal: %s\n", dpt_last_error());
        return 1;
    }
    dpt_normalizer nz = {0};
    if (dpt_normalizer_public(argv[1], d.dim, &nz) == DPT_OK && dpt_normalizer_apply(&nz, &d) != DPT_OK) {
        fprintf(stderr, "dpulr_signal: %s\n", dpt_last_error());
        return 1;
    }
    dpt_normalizer_free(&nz);
    if (p.B < 1 || p.B > d.n || R < 1 || !(C > 0) || !(s > 0)) {
        fprintf(stderr, "dpulr_signal: need 1 <= B <= %zu examples, R >= 1, C > 0, s > 0\n", d.n);
        return 2;
    }
    p.d = &d;
    dpt_algo *a = NULL;
    float *theta = NULL, *g = NULL, *v = NULL;
    size_t P = 0;
    int rc = 1;
    {   /* the true gradient, and the parameters every other direction is taken at */
        dpt_model *m = NULL;
        if (dpt_model_new(p.spec, 1, 1, &m) != DPT_OK) goto out;
        P = dpt_model_n_params(m);
        dpt_model_free(m);
        g = malloc(P * sizeof(float)), v = malloc(P * sizeof(float));
        if (!g || !v || dpt_algo_sgd_new(&a) != DPT_OK || direction(&p, a, 1, g, &theta)) goto out;
        p.theta = theta;
    }
    printf("method,K,draw,proj,cos,norm\n");
    report("gradient", 0, 0, g, g, P);
    dpt_dpsgd_config sc = {.sigma = 1e-30, .clip = C}; /* the clipped sum alone, as below */
    if (dpt_algo_dpsgd_new(&sc, &a) != DPT_OK || direction(&p, a, 1, v, NULL)) goto out;
    report("dpsgd", 0, 0, v, g, P);
    for (const char *k = Ks; *k;) {
        char *end;
        const size_t K = strtoull(k, &end, 10);
        if (end == k || K < 1) {
            fprintf(stderr, "dpulr_signal: K is a comma-separated list of integers >= 1, not '%s'\n", Ks);
            rc = 2;
            goto out;
        }
        for (int r = 0; r < R; r++) {
            if (!(a = ulr(K, C, s, 1)) || direction(&p, a, 100 + (uint64_t)r, v, NULL)) goto out;
            report("dpulr", K, r, v, g, P);
            if (!(a = ulr(K, C, s, 0)) || direction(&p, a, 100 + (uint64_t)r, v, NULL)) goto out;
            report("ulr_unclipped", K, r, v, g, P);
        }
        k = *end == ',' ? end + 1 : end;
    }
    rc = 0;
out:
    if (rc == 1) fprintf(stderr, "dpulr_signal: %s\n", dpt_last_error());
    free(theta);
    free(g);
    free(v);
    dpt_dataset_free(&d);
    return rc;
}
