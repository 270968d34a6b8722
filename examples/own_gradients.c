/* DP-SGD on a model of your own: the program computes each example's gradient itself
 * (here a softmax regression, its gradient written out by hand), and a dpt_sgm samples the
 * batches, clips every example's gradient, adds the noise and keeps the privacy ledger.
 *   cc own_gradients.c $(pkg-config --cflags --libs dptrain) -o own_gradients
 *   ./own_gradients [LEDGER.json]
 * With LEDGER.json the ledger is written there (atomically) before each batch is handed
 * out; `dptrain account --ledger LEDGER.json` reads it. */
#include <dptrain/dptrain.h>
#include <stdio.h>
#include <stdlib.h>

#include "synthetic.h"

#define P (SYN_CLASSES * (SYN_DIM + 1)) /* W [K, D] then b [K] */

static int fail(const char *what) {
    fprintf(stderr, "own_gradients: %s: %s\n", what, dpt_last_error());
    return 1;
}

/* the logits o [K] = W x + b; returns the predicted class (the largest) */
static int logits(const float *w, const float *x, float *o) {
    const float *b = w + SYN_CLASSES * SYN_DIM;
    int best = 0;
    for (int k = 0; k < SYN_CLASSES; k++) {
        float z = b[k];
        for (int j = 0; j < SYN_DIM; j++) z += w[k * SYN_DIM + j] * x[j];
        o[k] = z;
        best = z > o[best] ? k : best;
    }
    return best;
}

/* g [P]: the gradient of ONE example's cross-entropy loss: d = softmax(o) - onehot(y) from
 * the library's loss kernel, then d x^T for W and d for b (the chain rule, by hand) */
static dpt_status example_grad(const float *w, const float *x, int32_t y, float *g) {
    float o[SYN_CLASSES], d[SYN_CLASSES];
    logits(w, x, o);
    dpt_status s = dpt_loss(DPT_LOSS_SOFTMAX_CE, o, 1, SYN_CLASSES, &y, NULL, NULL, d);
    for (int k = 0; k < SYN_CLASSES; k++) {
        for (int j = 0; j < SYN_DIM; j++) g[k * SYN_DIM + j] = d[k] * x[j];
        g[SYN_CLASSES * SYN_DIM + k] = d[k];
    }
    return s;
}

static double accuracy(const float *w, const float *x, const int32_t *y, size_t n) {
    float o[SYN_CLASSES];
    size_t right = 0;
    for (size_t i = 0; i < n; i++) right += logits(w, x + i * SYN_DIM, o) == y[i];
    return (double)right / (double)n;
}

int main(int argc, char **argv) {
    const size_t n = 4000, n_test = 1000, epochs = 5;
    float *x = NULL, *xt = NULL;
    int32_t *y = NULL, *yt = NULL;
    if (synthetic_arrays(n, 1, &x, &y) != DPT_OK || synthetic_arrays(n_test, 2, &xt, &yt) != DPT_OK)
        return fail("making the data");

    dpt_sgm_config cfg = dpt_sgm_config_defaults();
    cfg.n = n;                       /* the private examples */
    cfg.dim = P;                     /* floats in one example's gradient */
    cfg.sample_rate = 0.05;          /* Poisson q: expected batch 200 */
    cfg.clip = 1.0;                  /* every example's gradient is scaled to norm <= C */
    cfg.target_epsilon = 1.0;        /* sigma calibrated so that `steps` steps reach it */
    cfg.steps = (uint64_t)(epochs / cfg.sample_rate);
    cfg.delta = 1e-5;
    cfg.ledger_path = argc > 1 ? argv[1] : NULL;
    dpt_sgm *m = NULL;
    if (dpt_sgm_new(&cfg, &m) != DPT_OK) return fail("mechanism");

    const size_t cap = dpt_sgm_batch_cap(m);
    uint32_t *idx = malloc(cap * sizeof *idx);
    float *g = malloc(cap * P * sizeof *g);
    float w[P] = {0}, update[P];
    if (!idx || !g) return fail("memory");
    const double lr = 0.5;
    for (size_t e = 1; e <= epochs; e++) {
        for (size_t s = 0; s < cfg.steps / epochs; s++) {
            size_t b = 0;
            /* the step is in the ledger (and its file) before the indices are handed out;
             * they pick the examples and are never published */
            if (dpt_sgm_sample(m, idx, cap, &b) != DPT_OK) return fail("sample");
            for (size_t i = 0; i < b; i++)
                if (example_grad(w, x + (size_t)idx[i] * SYN_DIM, y[idx[i]], g + i * P) != DPT_OK) return fail("loss");
            /* (clipped sum + N(0, sigma^2 C^2)) / (q n): the only thing that leaves */
            if (dpt_sgm_release(m, g, b, update) != DPT_OK) return fail("release");
            for (size_t j = 0; j < P; j++) w[j] -= (float)lr * update[j];
        }
        double eps = 0;
        if (dpt_sgm_epsilon(m, 0, DPT_ACCT_DEFAULT, &eps) != DPT_OK) return fail("epsilon");
        printf("epoch %zu: test accuracy %.2f%%, epsilon %.3f\n", e, 100 * accuracy(w, xt, yt, n_test), eps);
    }
    /* the default accountant (what calibrated sigma and what the budget uses), RDP beside it */
    double eps = 0, eps_rdp = 0;
    if (dpt_sgm_epsilon(m, 0, DPT_ACCT_DEFAULT, &eps) != DPT_OK || dpt_sgm_epsilon(m, 0, DPT_ACCT_RDP, &eps_rdp) != DPT_OK)
        return fail("epsilon");
    printf("privacy: epsilon %.3f (RDP %.3f) at delta 1e-05 (sigma %.4f, clip 1, %llu steps)\n", eps, eps_rdp,
           dpt_sgm_sigma(m), (unsigned long long)dpt_sgm_steps(m));
    dpt_sgm_free(m);
    free(idx), free(g), free(x), free(y), free(xt), free(yt);
    return 0;
}
