/* DP-ULR and the non-private ULR baseline as a strategy of the training loop (see the
 * comment above dpt_dpulr_config in train.h and docs/dpulr.md).
 *
 * Per chunk of the batch: one clean forward pass (kept in `cache`: every layer's
 * activation and the clean losses L0), then for each module l (Linear layer at index a,
 * output v = act[a+1] of width Kl, input x = act[a] of width Dl):
 *   rows (i, k), i < bc, k < K, go through the rest of the model in passes of max_batch
 *   rows: act[a+1] = v_i + z_ik, forward_from(a+1), loss -> L_ik;
 *   c_i = (1/(K s^2)) sum_k (L_ik - [baseline] L0_i) z_ik           [Kl]
 *   g_i = c_i xt_i^T,  ||g_i|| = ||c_i|| sqrt(||x_i||^2 + has_bias)
 *   grad_l += sum_i w_i g_i,  w_i = min(1, C_l / ||g_i||)  (one weighted GEMM: WEIGHTED)
 * finish adds the noise (controller top-up along A_l's eigenvectors, or explicit
 * N(0, sigma0^2 C^2)) and divides by N_B.
 * Conv2d modules (dpulr_conv.c): v = the conv output [C_out, T], c_i as above over all its
 * elements, ||g_i|| from the layer's SQNORM path, the controller's A_l summed over the
 * unfolded patches; W [C_out, C_in k^2] and b [C_out] have the Linear layout, so the
 * top-up is shared.
 *
 * The z of a module and chunk come from one noise substream: the task holding examples
 * [i0, i1) (noisy_passes; tasks are fixed by K and the row budget, not by the batch) fills
 * its z [example][copy][Kl] itself from its own whole RNG chunks of that substream
 * (dpt_rng_gauss_fill_at), just before its passes read them: the draws of the first
 * examples do not depend on the later ones, so neighbouring batches that differ in their
 * last example share all other draws (the coupling the sensitivity test uses).
 *
 * Threads: the z and the noise come from chunked fills (the same numbers for any thread
 * count) and every sum here runs in a fixed order. The controller's GEMMs and LAPACK calls
 * (dsyevr, dpotrf, dpotrs) and the top-up's GEMMs run on one OpenBLAS thread
 * (blas_serial_begin): threaded, OpenBLAS rounds them differently for another thread count,
 * and s_l, hence every z, would follow. The noisy passes of MLP tails run as tasks fixed by
 * K alone, in parallel over examples, each GEMM on one OpenBLAS thread (noisy_passes). The
 * clean pass and the weighted sums keep OpenBLAS's threads, as in DP-SGD (docs/dpulr.md,
 * "Threads"). */
#include <dptrain/train.h>

#include <dptrain/accounting.h>
#include <dptrain/privacy.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpulr_conv.h"
#include "dpulr_ctrl.h"
#include "train_internal.h"

#define REL_RANK_TOL 1e-6 /* eigenvalues below this fraction of lambda_max count as 0 */
#define ULR_TASK_ROWS 256  /* rows (i, k) per noisy-pass task (whole examples when K fits) */

/* The controller's top-up N = sigma0 C E + (E U) diag(coef) U^T (see topup_noise). When s_l is
 * not raised by --ulr-std, every kept direction has t_j = 0 (coef_j = -sigma0 C) and N is
 * sigma0 C E projected onto A_l's null space: no eigenvectors are needed, only whether A_l
 * has full rank (PROJ_NONE: A_l is n x n of rank n, no top-up) or, for b < n rows of full
 * rank b, the projector onto the rows' span, P = Y^T (Y Y^T)^-1 Y (PROJ_GRAM). */
enum { PROJ_EIG, PROJ_NONE, PROJ_GRAM };
typedef struct {
    size_t first, end;  /* layers [first, end); layer `first` is its Linear or Conv2d layer */
    size_t Dl, Kl, n;   /* input width, output width, n = Dl + has_bias (conv: Dl = C_in k^2,
                         * Kl = C_out: the rows of W [Kl, Dl] and b [Kl] either way) */
    size_t vdim;        /* perturbed output size (Linear: Kl; conv: C_out T) */
    int has_bias;
    int conv;           /* Conv2d module (dpulr_conv.c) */
    double *A;          /* conv controller: [n, n] matrix accumulated over the batch */
    double C_l;
    /* controller state of the current step */
    double s;           /* perturbation std */
    double lmin, lmax;
    size_t rank;        /* eigenvectors in U (directions with their own top-up) */
    int proj;           /* how the top-up is made, see PROJ_* */
    float *U;           /* PROJ_EIG: [n, n] columns = eigenvectors (first `rank` used) */
    float *coef;        /* PROJ_EIG: [n] sqrt(t_j) - sigma0 C */
    double *Lc;         /* PROJ_GRAM: [b, b] Cholesky factor of the Gram matrix Y Y^T */
    size_t lc_cap;      /* entries Lc holds */
    size_t clipped, examples;
} ulr_module;

/* A worker thread's buffers for the noisy passes of reentrant tails (noisy_passes):
 * act[j] [ULR_TASK_ROWS, dims[j]] for j = 1..n_layers (act[0] unused), and its task's z
 * [max(ULR_TASK_ROWS, K), maxv]. */
typedef struct {
    float **act;
    float *z;
    float *lrow;
    int32_t *yrep;
} ulr_worker;

typedef struct {
    dpt_dpulr_config cfg;
    char modules_spec[256];
    char settings[384]; /* dpt_algo.settings: what a resumed run must keep */
    size_t L;            /* modules */
    ulr_module *mod;
    size_t cap;          /* chunk buffers sized for this many examples */
    size_t n_layers;
    float **cache;       /* cache[j]: [cap, dim_j] clean activations, j = 1..n_layers */
    size_t *dims;        /* [n_layers + 1] */
    float *L0;           /* [cap] clean losses */
    float *z;            /* [max(cap, K) * maxv] perturbations of a task (model-buffer route) */
    float *lrow;         /* [max_batch] losses of one pass */
    int32_t *yrep;       /* [max_batch] labels of one pass */
    float *cvec;         /* [cap * maxKl] per-example LR cotangents */
    float *w;            /* [cap] clipping factors */
    float *Y;            /* controller: [ycap, maxn] rows |L0_i| xt_i */
    size_t ycap, maxn, maxKl;
    size_t maxv;         /* largest perturbed output (vdim) */
    float *cwork;        /* conv controller workspace [cworkn] */
    size_t cworkn;
    size_t yrows;        /* rows of Y filled this step */
    int ctrl_ready;      /* controller solved for this step */
    double *A, *wev, *Z; /* eigen workspaces [maxn^2], [maxn], [maxn^2] */
    float *Gf;           /* [maxn^2] the GEMM result, then the scaled kept eigenvectors */
    float *E, *M;        /* noise workspaces [maxKl * maxn], [maxKl * maxn] */
    double *Md;          /* [maxKl * maxn] the PROJ_GRAM solve */
    size_t batch;        /* examples seen this step */
    ulr_worker *workers; /* [n_workers] (one per trainer thread) */
    size_t n_workers;
    /* controller mode: the module whose controller costs most (largest n) is solved, and
     * its top-up noise drawn into Ebig [maxKl, maxn], while the other modules' noisy passes
     * run (ulr_accumulate); big_noise: Ebig is to be added in finish */
    size_t big;
    float *Ebig;
    int big_noise;
} ulr_state;

void dpt_dpulr_config_resolve(dpt_dpulr_config *cfg) {
    const int ctrl = cfg->private_ && cfg->noise == DPT_ULR_CONTROLLER;
    if (cfg->baseline == DPT_ULR_AUTO) cfg->baseline = !ctrl;
    if (!ctrl && cfg->perturb_std == 0) cfg->perturb_std = DPT_ULR_DEFAULT_STD;
}

dpt_dpulr_config dpt_dpulr_config_defaults(void) {
    dpt_dpulr_config c;
    memset(&c, 0, sizeof c);
    c.private_ = 1;
    c.copies = 32;
    c.sigma0 = 1.0;
    c.clip = 1.0;
    c.noise = DPT_ULR_EXPLICIT;
    c.perturb_std = 0.0; /* the mode's default: 0.1 (explicit, non-private), no floor (controller) */
    c.baseline = DPT_ULR_AUTO;
    c.accounted = 1;
    return c;
}


/* OpenBLAS on one thread for the calls whose rounding must not depend on the thread count
 * (see the top of the file); returns the count to restore with blas_serial_end. */
static int blas_serial_begin(void) {
    int prev = dpt_threads_get_blas();
    if (prev != 1) dpt_threads_set_blas(1);
    return prev;
}
static void blas_serial_end(int prev) {
    if (prev != 1) dpt_threads_set_blas(prev);
}

/* ==== Modules ==== */

static dpt_status parse_modules(ulr_state *s, const dpt_model *m) {
    size_t starts[256], ns = 0;
    const char *spec = s->modules_spec;
    /* the noisy passes run K copies of each example from a module's output, but a padding
     * mask belongs to the rows of the token ids (docs/nn.md "Padding masks") */
    DPT_CHECK(!dpt_model_pad_id(m, NULL), DPT_ENOTSUP,
              "DP-ULR: model %s masks padding (its embedding has a pad id), which DP-ULR's restarted passes do not "
              "carry: use DP-SGD, or a model without pad<P>", m->spec);
    if (!spec[0] || !strcmp(spec, "auto")) {
        for (size_t j = 0; j < m->n_layers; j++)
            if (m->layers[j].n_params) starts[ns++] = j;
        DPT_CHECK(ns >= 1, DPT_EINVAL, "dpt_dpulr_config.modules: the model has no layer with parameters");
    } else {
        const char *p = spec;
        while (*p) {
            char *end;
            long v = strtol(p, &end, 10);
            DPT_CHECK(end != p && v >= 0 && (size_t)v < m->n_layers && ns < 256, DPT_EINVAL,
                      "dpt_dpulr_config.modules '%s': expected comma-separated layer indices in [0, %zu)", spec,
                      m->n_layers);
            DPT_CHECK(ns == 0 || (size_t)v > starts[ns - 1], DPT_EINVAL,
                      "dpt_dpulr_config.modules '%s': start layers must increase", spec);
            starts[ns++] = (size_t)v;
            p = end;
            if (*p == ',') p++;
            else DPT_CHECK(*p == 0, DPT_EINVAL, "dpt_dpulr_config.modules '%s': unexpected '%c'", spec, *p);
        }
        DPT_CHECK(ns >= 1, DPT_EINVAL, "dpt_dpulr_config.modules: empty spec");
    }
    for (size_t j = 0; j < starts[0]; j++)
        DPT_CHECK(!m->layers[j].n_params, DPT_EINVAL,
                  "dpt_dpulr_config.modules '%s': layer %zu (%s) has parameters but belongs to no module", spec, j,
                  m->layers[j].name);
    s->mod = calloc(ns, sizeof *s->mod);
    DPT_CHECK(s->mod, DPT_ENOMEM, "dpulr: out of memory");
    s->L = ns;
    for (size_t k = 0; k < ns; k++) {
        ulr_module *u = &s->mod[k];
        u->first = starts[k];
        u->end = k + 1 < ns ? starts[k + 1] : m->n_layers;
        const dpt_layer *L = &m->layers[u->first];
        /* the controller's eigenproblem and the estimate are those of a Linear or Conv2d
         * layer whose output is perturbed */
        DPT_CHECK(L->kind == DPT_LAYER_LINEAR || L->kind == DPT_LAYER_CONV2D, DPT_ENOTSUP,
                  "dpt_dpulr_config.modules: module %zu starts at layer %zu (%s), which is neither a Linear nor a "
                  "Conv2d layer: a module is one Linear or Conv2d layer followed by parameter-free layers",
                  k + 1, u->first, L->name);
        for (size_t j = u->first + 1; j < u->end; j++)
            DPT_CHECK(!m->layers[j].n_params, DPT_ENOTSUP,
                      "dpt_dpulr_config.modules: module %zu (layers %zu..%zu) holds a second layer with parameters "
                      "(%s): only one Linear or Conv2d layer per module is supported", k + 1, u->first, u->end - 1,
                      m->layers[j].name);
        /* its estimate and noise are those of a layer linear in its weights; a standardized
         * convolution is linear in W^, not in W */
        DPT_CHECK(!L->wstd, DPT_ENOTSUP,
                  "dpt_dpulr_config.modules: module %zu starts at %s, a weight-standardized convolution (ws): DP-ULR "
                  "needs layers linear in their weights; use the layer without ws", k + 1, L->name);
        u->conv = L->kind == DPT_LAYER_CONV2D;
        u->Dl = u->conv ? L->in_shape[0] * L->k * L->k : L->in_dim;
        u->Kl = u->conv ? L->out_shape[0] : L->out_dim;
        u->vdim = L->out_dim;
        u->has_bias = L->has_bias;
        u->n = u->Dl + (u->has_bias ? 1 : 0);
    }
    return DPT_OK;
}

static void free_modules(ulr_state *s) {
    for (size_t k = 0; s->mod && k < s->L; k++) {
        dpt_free(s->mod[k].U);
        dpt_free(s->mod[k].coef);
        dpt_free(s->mod[k].A);
        dpt_free(s->mod[k].Lc);
    }
    free(s->mod);
    s->mod = NULL;
    s->L = 0;
}

/* Can module u's noisy passes run on worker threads with their own activation buffers?
 * Only when every later layer is a Linear layer or an elementwise activation (their
 * forward reads nothing but its arguments and the parameters) and no residual connection
 * enters: Conv2d and pooling layers keep per-layer scratch and unfold caches, so those
 * models run the passes through the model's own buffers, one after another. */
static int reentrant_tail(const dpt_model *m, size_t a) {
    for (size_t l = a + 1; l < m->n_layers; l++) {
        const dpt_layer *L = &m->layers[l];
        if (L->residual_from) return 0;
        switch (L->kind) {
        case DPT_LAYER_LINEAR:
        case DPT_LAYER_RELU:
        case DPT_LAYER_GELU:
        case DPT_LAYER_TANH:
        case DPT_LAYER_SIGMOID:
        case DPT_LAYER_IDENTITY: break;
        default: return 0;
        }
    }
    return 1;
}

static void free_workers(ulr_state *s) {
    for (size_t k = 0; s->workers && k < s->n_workers; k++) {
        ulr_worker *w = &s->workers[k];
        for (size_t j = 0; w->act && j <= s->n_layers; j++) dpt_free(w->act[j]);
        free(w->act);
        dpt_free(w->lrow);
        dpt_free(w->yrep);
        dpt_free(w->z);
    }
    free(s->workers);
    s->workers = NULL;
    s->n_workers = 0;
}

static dpt_status alloc_workers(ulr_state *s, int threads) {
    size_t nw = (size_t)dpt_threads_resolve(threads);
    s->workers = calloc(nw, sizeof *s->workers);
    if (!s->workers) return dpt_set_error(DPT_ENOMEM, "dpulr: out of memory");
    s->n_workers = nw;
    for (size_t k = 0; k < nw; k++) {
        ulr_worker *w = &s->workers[k];
        w->act = calloc(s->n_layers + 1, sizeof *w->act);
        if (!w->act) return dpt_set_error(DPT_ENOMEM, "dpulr: out of memory");
        for (size_t j = 1; j <= s->n_layers; j++) {
            w->act[j] = dpt_alloc2(ULR_TASK_ROWS, s->dims[j], sizeof(float), "dpulr worker activations");
            if (!w->act[j]) return DPT_ENOMEM;
        }
        size_t zrows = s->cfg.copies > ULR_TASK_ROWS ? s->cfg.copies : ULR_TASK_ROWS;
        w->lrow = dpt_alloc(ULR_TASK_ROWS, sizeof(float), "dpulr worker losses");
        w->yrep = dpt_alloc(ULR_TASK_ROWS, sizeof(int32_t), "dpulr worker labels");
        w->z = dpt_alloc2(zrows, s->maxv, sizeof(float), "dpulr worker perturbations");
        if (!w->lrow || !w->yrep || !w->z) return DPT_ENOMEM;
    }
    return DPT_OK;
}

static void free_buffers(ulr_state *s) {
    free_workers(s);
    for (size_t j = 0; s->cache && j <= s->n_layers; j++) dpt_free(s->cache[j]);
    free(s->cache);
    free(s->dims);
    s->cache = NULL;
    s->dims = NULL;
    dpt_free(s->L0);
    dpt_free(s->z);
    dpt_free(s->lrow);
    dpt_free(s->yrep);
    dpt_free(s->cvec);
    dpt_free(s->w);
    dpt_free(s->Y);
    dpt_free(s->A);
    dpt_free(s->wev);
    dpt_free(s->Z);
    dpt_free(s->Gf);
    dpt_free(s->E);
    dpt_free(s->M);
    dpt_free(s->Md);
    dpt_free(s->Ebig);
    s->Md = NULL;
    s->Ebig = NULL;
    s->L0 = s->z = s->lrow = s->cvec = s->w = s->Y = s->E = s->M = NULL;
    s->yrep = NULL;
    s->A = s->wev = s->Z = NULL;
    s->Gf = NULL;
    s->cap = s->ycap = 0;
}

static dpt_status setup(ulr_state *s, dpt_trainer *t) {
    dpt_model *m = t->model;
    if (!s->mod) {
        dpt_status st = parse_modules(s, m);
        if (st != DPT_OK) { /* never keep a half-checked module list for a later step */
            free_modules(s);
            return st;
        }
        double Cl = s->cfg.clip / sqrt((double)s->L);
        s->maxn = s->maxKl = s->maxv = 0;
        s->big = 0;
        for (size_t k = 1; k < s->L; k++)
            if (s->mod[k].n > s->mod[s->big].n) s->big = k;
        for (size_t k = 0; k < s->L; k++) {
            ulr_module *u = &s->mod[k];
            u->C_l = Cl;
            if (u->n > s->maxn) s->maxn = u->n;
            if (u->Kl > s->maxKl) s->maxKl = u->Kl;
            if (u->vdim > s->maxv) s->maxv = u->vdim;
            u->s = s->cfg.perturb_std;
            if (s->cfg.private_ && s->cfg.noise == DPT_ULR_CONTROLLER) {
                u->U = dpt_alloc2(u->n, u->n, sizeof(float), "dpulr eigenvectors");
                u->coef = dpt_alloc(u->n, sizeof(float), "dpulr top-up");
                if (!u->U || !u->coef) return DPT_ENOMEM;
                if (u->conv) {
                    const dpt_layer *L = &m->layers[u->first];
                    size_t wn = dpt_ulr_conv_ctrl_work(L);
                    u->A = dpt_alloc2(u->n, u->n, sizeof(double), "dpulr conv controller matrix");
                    if (!u->A) return DPT_ENOMEM;
                    if (wn > s->cworkn) {
                        dpt_free(s->cwork);
                        s->cwork = dpt_alloc(wn, sizeof(float), "dpulr conv controller workspace");
                        if (!s->cwork) return DPT_ENOMEM;
                        s->cworkn = wn;
                    }
                }
            }
        }
    }
    if (s->cap >= m->max_batch) return DPT_OK;
    free_buffers(s);
    size_t cap = m->max_batch, K = s->cfg.copies;
    s->n_layers = m->n_layers;
    s->cache = calloc(m->n_layers + 1, sizeof *s->cache);
    s->dims = calloc(m->n_layers + 1, sizeof *s->dims);
    if (!s->cache || !s->dims) return dpt_set_error(DPT_ENOMEM, "dpulr: out of memory");
    s->dims[0] = m->in_dim;
    for (size_t j = 0; j < m->n_layers; j++) s->dims[j + 1] = m->layers[j].out_dim;
    for (size_t j = 1; j <= m->n_layers; j++) {
        s->cache[j] = dpt_alloc2(cap, s->dims[j], sizeof(float), "dpulr clean activations");
        if (!s->cache[j]) return DPT_ENOMEM;
    }
    s->L0 = dpt_alloc(cap, sizeof(float), "dpulr clean losses");
    s->z = dpt_alloc2((K > cap ? K : cap), s->maxv, sizeof(float), "dpulr perturbations");
    s->lrow = dpt_alloc(cap, sizeof(float), "dpulr pass losses");
    s->yrep = dpt_alloc(cap, sizeof(int32_t), "dpulr pass labels");
    s->cvec = dpt_alloc2(cap, s->maxv, sizeof(float), "dpulr cotangents");
    s->w = dpt_alloc(cap, sizeof(float), "dpulr clipping factors");
    if (!s->L0 || !s->z || !s->lrow || !s->yrep || !s->cvec || !s->w) return DPT_ENOMEM;
    if (s->cfg.private_ && s->cfg.noise == DPT_ULR_CONTROLLER) {
        size_t n = s->maxn;
        s->A = dpt_alloc2(n, n, sizeof(double), "dpulr controller matrix");
        s->wev = dpt_alloc(n, sizeof(double), "dpulr eigenvalues");
        s->Z = dpt_alloc2(n, n, sizeof(double), "dpulr eigenvectors");
        s->Gf = dpt_alloc2(n, n, sizeof(float), "dpulr controller matrix");
        s->E = dpt_alloc2(s->maxKl, n, sizeof(float), "dpulr noise");
        s->M = dpt_alloc2(s->maxKl, n, sizeof(float), "dpulr noise");
        s->Md = dpt_alloc2(s->maxKl, n, sizeof(double), "dpulr noise");
        s->Ebig = dpt_alloc2(s->maxKl, n, sizeof(float), "dpulr noise");
        if (!s->A || !s->wev || !s->Z || !s->Gf || !s->E || !s->M || !s->Md || !s->Ebig) return DPT_ENOMEM;
    }
    int any_reentrant = 0;
    for (size_t k = 0; k < s->L; k++) any_reentrant |= reentrant_tail(m, s->mod[k].first);
    if (any_reentrant) DPT_TRY(alloc_workers(s, t->threads));
    s->cap = cap;
    return DPT_OK;
}

/* ==== Controller (Eq. 7 and A.4) ==== */

/* Room for `rows` controller rows (each module's rows side by side: row i of module k at
 * Y + k * ycap * maxn + i * maxn). */
static dpt_status y_reserve(ulr_state *s, size_t rows) {
    if (rows <= s->ycap) return DPT_OK;
    /* at least a full chunk (a Poisson batch varies from step to step), then geometric */
    size_t cap = rows <= s->cap ? s->cap : rows + rows / 2;
    float *Y = dpt_alloc3(cap, s->maxn, s->L, sizeof(float), "dpulr controller rows");
    if (!Y) return DPT_ENOMEM;
    if (s->yrows) /* keep rows already added this step */
        for (size_t k = 0; k < s->L; k++)
            memcpy(Y + k * cap * s->maxn, s->Y + k * s->ycap * s->maxn, s->yrows * s->maxn * sizeof(float));
    dpt_free(s->Y);
    s->Y = Y;
    s->ycap = cap;
    return DPT_OK;
}

/* Adds rows |L0_i| xt_i of every module for a chunk whose clean pass is in the model. */
static dpt_status controller_add(ulr_state *s, const dpt_model *m, const float *L0, size_t bc) {
    DPT_TRY(y_reserve(s, s->yrows + bc));
    for (size_t k = 0; k < s->L; k++) {
        const ulr_module *u = &s->mod[k];
        const float *x = m->act[u->first];
        if (u->conv) { /* I_O (kron) sum_i L0_i^2 sum_p xt_p xt_p^T, accumulated directly */
            int prev = blas_serial_begin();
            dpt_ulr_conv_ctrl_add(&m->layers[u->first], x, L0, bc, u->A, s->cwork);
            blas_serial_end(prev);
            continue;
        }
        for (size_t i = 0; i < bc; i++) {
            float *row = s->Y + k * s->ycap * s->maxn + (s->yrows + i) * s->maxn;
            float a = fabsf(L0[i]);
            const float *xi = x + i * u->Dl;
#pragma omp simd
            for (size_t j = 0; j < u->Dl; j++) row[j] = a * xi[j];
            if (u->has_bias) row[u->Dl] = a;
        }
    }
    s->yrows += bc;
    return DPT_OK;
}

/* A conv module's controller: the eigen-decomposition of its n x n matrix A_l (summed over
 * the b T unfolded patches, which always outnumber n in practice, so there is no Gram
 * route), then Eq. 7 and the top-up coefficients exactly as for a Linear module: s from
 * lambda_min (full rank) or the smallest kept eigenvalue, never below --ulr-std. */
static dpt_status conv_solve(ulr_state *s, ulr_module *u) {
    const double K = (double)s->cfg.copies, floor2 = s->cfg.sigma0 * s->cfg.sigma0 * s->cfg.clip * s->cfg.clip;
    DPT_TRY(dpt_ulr_sym_eig(u->n, u->A, s->wev, s->Z, REL_RANK_TOL, u->U, u->coef, &u->rank, &u->lmin, &u->lmax));
    double lam = u->rank ? u->coef[0] : 0.0; /* = lambda_min when the rank is full */
    double s2 = lam > 0 ? lam / (K * floor2) : 0, fl = s->cfg.perturb_std;
    int floored = s2 < fl * fl;
    if (floored) s2 = fl * fl;
    if (!(s2 > 0)) s2 = 1.0; /* all L0 = 0: nothing is estimated; the top-up is all the noise */
    u->s = sqrt(s2);
    /* full rank and s from lambda_min itself: every t_j <= 0, no direction lacks noise (as
     * the Linear route's PROJ_NONE); otherwise the eigenvector route */
    u->proj = u->rank == u->n && lam > 0 && !floored ? PROJ_NONE : PROJ_EIG;
    const double sc = s->cfg.sigma0 * s->cfg.clip;
    for (size_t j = 0; j < u->rank; j++) {
        double tj = floor2 - (double)u->coef[j] / (K * s2); /* A.4 / Eq. 25 */
        u->coef[j] = (float)(sqrt(tj > 0 ? tj : 0) - sc);
    }
    return DPT_OK;
}

/* Eigenvalues of A_l = Y^T Y (n x n), or of the Gram matrix Y Y^T (b x b) when b < n: its
 * nonzero eigenvalues are A_l's. Sets s_l (Eq. 7), the diagnostics and the top-up: when no
 * kept direction needs its own top-up (s_l not raised by --ulr-std) and the matrix has full
 * rank, PROJ_NONE or PROJ_GRAM (the Cholesky factor of Y Y^T, no eigenvectors); otherwise
 * the eigenvectors (u_j = Y^T v_j / sqrt(lambda_j) from the Gram eigenvectors v_j when
 * b < n) with their top-up coefficients (PROJ_EIG). */
/* From the d ascending eigenvalues w of A_l (b >= n) or of the Gram matrix: rank, lambda_max,
 * lambda_min (0 unless A_l has full rank) and s_l. Eq. 7: s^2 = lambda / (K C^2 sigma0^2)
 * with lambda = lambda_min (full rank) or the smallest eigenvalue above the rank tolerance;
 * never below the floor --ulr-std. Returns s^2; *lam gets lambda and *floored whether the
 * floor raised s. */
static double eig_summary(const ulr_state *s, ulr_module *u, const double *w, size_t d, int b_ge_n, double *lam,
                          int *floored) {
    const double K = (double)s->cfg.copies, floor2 = s->cfg.sigma0 * s->cfg.sigma0 * s->cfg.clip * s->cfg.clip;
    double lmax = w[d - 1] > 0 ? w[d - 1] : 0, tol = REL_RANK_TOL * lmax, lmin_pos = 0;
    int full = b_ge_n && w[0] > tol;
    size_t r = 0;
    for (size_t j = 0; j < d; j++)
        if (w[j] > tol && lmax > 0) {
            if (!lmin_pos) lmin_pos = w[j];
            r++;
        }
    u->rank = r;
    u->lmax = lmax;
    u->lmin = full ? w[0] : 0.0;
    *lam = full ? w[0] : lmin_pos;
    double s2 = *lam > 0 ? *lam / (K * floor2) : 0, fl = s->cfg.perturb_std;
    *floored = s2 < fl * fl;
    if (*floored) s2 = fl * fl;
    if (!(s2 > 0)) s2 = 1.0; /* all L0 = 0: nothing is estimated; the top-up is all the noise */
    u->s = sqrt(s2);
    return s2;
}

/* The common case of solve_one without eigenvalues: the matrix (A_l, or the Gram matrix
 * when !b_ge_n) d x d in s->Z. Returns 1 when it set u (s_l from a certified lower bound on
 * lambda_min, not raised by --ulr-std, full rank: PROJ_NONE, or PROJ_GRAM with the factor in
 * u->Lc); 0 when the caller must take the eigenvalue route (u->Lc and s->A then scratch).
 * Every kept direction j has lambda_j >= lambda_min >= the bound, so t_j = floor2 -
 * lambda_j / (K s^2) <= 0: no direction lacks noise, as with the exact lambda_min; s_l is
 * only (at most DPT_ULR_CERT_SHIFT plus the rounding margin) smaller. */
static int fast_route(const ulr_state *s, ulr_module *u, size_t d, int b_ge_n) {
    const double K = (double)s->cfg.copies, floor2 = s->cfg.sigma0 * s->cfg.sigma0 * s->cfg.clip * s->cfg.clip;
    double lam, lmax;
    if (dpt_ulr_lmin_certified(d, s->Z, u->Lc, s->A, &lam, &lmax) != DPT_OK) {
        dpt_clear_error(); /* ENOMEM included: the eigenvalue route reports its own */
        return 0;
    }
    double s2 = lam / (K * floor2), fl = s->cfg.perturb_std;
    if (!(lam > REL_RANK_TOL * lmax) || s2 < fl * fl || !(s2 > 0) || !isfinite(s2)) return 0;
    u->rank = d;
    u->lmax = lmax;
    u->lmin = b_ge_n ? lam : 0.0;
    u->s = sqrt(s2);
    u->proj = b_ge_n ? PROJ_NONE : PROJ_GRAM;
    return 1;
}

/* The controller of module k (uses the shared eigen workspaces: one module at a time). */
static dpt_status solve_one(ulr_state *s, size_t k) {
    const double K = (double)s->cfg.copies, floor2 = s->cfg.sigma0 * s->cfg.sigma0 * s->cfg.clip * s->cfg.clip;
    size_t b = s->yrows;
    ulr_module *u = &s->mod[k];
    size_t n = u->n;
    const float *Y = s->Y + k * s->ycap * s->maxn; /* [b, maxn] */
    u->proj = PROJ_EIG;
    if (b == 0) {
        u->lmin = u->lmax = 0;
        u->rank = 0;
        u->s = s->cfg.perturb_std > 0 ? s->cfg.perturb_std : 1.0; /* nothing to perturb */
        return DPT_OK;
    }
    if (u->conv) /* A_l accumulated over the patches (controller_add) */
        return conv_solve(s, u);
    /* A = Y^T Y (b >= n) or the Gram matrix Y Y^T (b < n): one SYRK (float), then the
     * symmetric eigenvalues in double (the matrix kept in Z for the second stage) */
    size_t d = b >= n ? n : b;
    if (b >= n)
        dpt_ssyrk_gram(1, n, b, Y, s->maxn, s->Gf, d);
    else
        dpt_ssyrk_gram(0, b, n, Y, s->maxn, s->Gf, d);
    for (size_t i = 0; i < d * d; i++) s->Z[i] = s->Gf[i];
    if (u->lc_cap < d * d) {
        dpt_free(u->Lc);
        u->lc_cap = 0;
        u->Lc = dpt_alloc2(d, d, sizeof(double), "dpulr Gram factor");
        if (!u->Lc) return DPT_ENOMEM;
        u->lc_cap = d * d;
    }
    /* the common case without eigenvalues (dpulr_ctrl.c): a certified lower bound on
     * lambda_min and the Cholesky factor (in Lc: PROJ_GRAM's, scratch for PROJ_NONE) */
    if (fast_route(s, u, d, b >= n)) return DPT_OK;
    memcpy(s->A, s->Z, d * d * sizeof(double));
    DPT_TRY(dpt_syev(d, s->A, s->wev, NULL));
    double lam;
    int floored;
    double s2 = eig_summary(s, u, s->wev, d, b >= n, &lam, &floored);
    /* t_j = floor2 - lambda_j / (K s^2) <= 0 for every kept j unless s was floored */
    if (lam > 0 && !floored && u->rank == d) {
        if (b >= n) {
            u->proj = PROJ_NONE;
            return DPT_OK;
        }
        memcpy(u->Lc, s->Z, b * b * sizeof(double));
        dpt_status st = dpt_chol(b, u->Lc);
        if (st == DPT_OK) {
            u->proj = PROJ_GRAM;
            return DPT_OK;
        }
        if (st != DPT_ERANGE) return st;
        /* numerically not positive definite although every eigenvalue passed the rank
         * tolerance: take the eigenvector route below */
    }
    /* PROJ_EIG: the eigenvectors, again from the matrix kept in Z */
    memcpy(s->A, s->Z, d * d * sizeof(double));
    DPT_TRY(dpt_syev(d, s->A, s->wev, s->Z));
    s2 = eig_summary(s, u, s->wev, d, b >= n, &lam, &floored);
    double tol = REL_RANK_TOL * u->lmax;
    size_t r = 0;
    for (size_t j = 0; j < d; j++)
        if (s->wev[j] > tol && u->lmax > 0) u->coef[r++] = (float)s->wev[j]; /* eigenvalue for now */
    /* the kept eigenvectors of A as the first r columns of U [n, n]: directly (b >= n)
     * or u_j = Y^T v_j / sqrt(lambda_j) from the Gram eigenvectors v_j (one GEMM) */
    size_t c = 0;
    for (size_t j = 0; j < d; j++) {
        if (!(s->wev[j] > tol && u->lmax > 0)) continue;
        double sc = b >= n ? 1.0 : 1.0 / sqrt(s->wev[j]);
        for (size_t i = 0; i < d; i++) s->Gf[i * r + c] = (float)(s->Z[i * d + j] * sc);
        c++;
    }
    if (r) {
        if (b >= n)
            for (size_t e = 0; e < n; e++) memcpy(u->U + e * n, s->Gf + e * r, r * sizeof(float));
        else
            dpt_sgemm(1, 0, n, r, b, 1.0f, Y, s->maxn, s->Gf, r, 0.0f, u->U, n);
    }
    double sc = s->cfg.sigma0 * s->cfg.clip;
    for (size_t j = 0; j < r; j++) {
        double tj = floor2 - (double)u->coef[j] / (K * s2); /* A.4 / Eq. 25 */
        u->coef[j] = (float)(sqrt(tj > 0 ? tj : 0) - sc);
    }
    return DPT_OK;
}

static dpt_status topup_noise(ulr_state *s, const dpt_rng *r, uint64_t sub, const ulr_module *u, float *E, int threads,
                              int *add);

/* The controller of every module but the big one (OpenBLAS on one thread: see the top of
 * the file). */
static dpt_status controller_small(ulr_state *s) {
    int prev = blas_serial_begin();
    dpt_status st = DPT_OK;
    for (size_t k = 0; k < s->L && st == DPT_OK; k++)
        if (k != s->big) st = solve_one(s, k);
    blas_serial_end(prev);
    return st;
}

/* The big module's controller and its top-up noise from substream `sub` of the noise
 * stream (r may be a snapshot: only its key and reserved count are read), into Ebig. */
static dpt_status controller_big(ulr_state *s, const dpt_rng *r, uint64_t sub) {
    int prev = blas_serial_begin();
    dpt_status st = solve_one(s, s->big);
    if (st == DPT_OK) st = topup_noise(s, r, sub, &s->mod[s->big], s->Ebig, 1, &s->big_noise);
    blas_serial_end(prev);
    return st;
}

/* The whole controller, in the order the overlapped route of ulr_accumulate uses (the small
 * modules, a substream for the big one's top-up, the big one). */
static dpt_status controller_solve(ulr_state *s, dpt_trainer *t) {
    DPT_TRY(controller_small(s));
    uint64_t sub = dpt_rng_reserve_substreams(dpt_trainer_noise_rng(t), 1);
    DPT_TRY(controller_big(s, dpt_trainer_noise_rng(t), sub));
    s->ctrl_ready = 1;
    return DPT_OK;
}

/* begin: when the batch does not fit one chunk, the controller needs every example's L0
 * before the first noisy pass: one clean pass over the batch (t->idx) here. */
static dpt_status controller_prepass(ulr_state *s, dpt_trainer *t, size_t b) {
    dpt_model *m = t->model;
    for (size_t lo = 0; lo < b; lo += m->max_batch) {
        size_t bc = b - lo < m->max_batch ? b - lo : m->max_batch;
        dpt_dataset_gather(t->train, t->idx + lo, bc, t->xb, t->yb);
        DPT_TRY(dpt_model_forward(m, t->xb, bc));
        DPT_TRY(dpt_loss(t->cfg.loss, dpt_model_output(m), bc, m->out_dim, t->yb, NULL, s->L0, NULL));
        DPT_TRY(controller_add(s, m, s->L0, bc));
    }
    return controller_solve(s, t);
}

/* ==== The strategy ==== */

static int controller_on(const ulr_state *s) { return s->cfg.private_ && s->cfg.noise == DPT_ULR_CONTROLLER; }

/* The sampling each mode is for, checked when the trainer is made. */
static dpt_status ulr_bind(dpt_algo *a, dpt_trainer *t) {
    ulr_state *s = a->state;
    if (!s->cfg.private_) return DPT_OK;
    /* issue 38: the controller picks s_l and the top-up from the batch (and clipping breaks
     * its variance floor), so no accountant covers it: the run says so wherever its epsilon
     * is published (ledger "epsilon_excludes", every metrics line) */
    if (s->cfg.accounted && controller_on(s)) DPT_TRY(dpt_trainer_exclude_from_guarantee(t, DPT_ULR_CONTROLLER_NOTE));
    if (s->cfg.accounted)
        DPT_CHECK(t->cfg.sampler == DPT_SAMPLER_POISSON_REJECT && t->cfg.min_batch >= 1, DPT_EINVAL,
                  "dpulr: the accounted mode needs Poisson sampling with rejection (dpt_train_config.sampler = "
                  "DPT_SAMPLER_POISSON_REJECT with min_batch >= 1), not %s",
                  dpt_sampler_enum_name(t->cfg.sampler));
    else
        DPT_CHECK(t->cfg.sampler == DPT_SAMPLER_SHUFFLE, DPT_EINVAL,
                  "dpulr: the non-accounted mode is for shuffled fixed-size batches (dpt_train_config.sampler = "
                  "DPT_SAMPLER_SHUFFLE), not %s", dpt_sampler_enum_name(t->cfg.sampler));
    return DPT_OK;
}

static dpt_status ulr_begin(dpt_algo *a, dpt_trainer *t, size_t batch) {
    ulr_state *s = a->state;
    dpt_model *m = t->model;
    DPT_TRY(setup(s, t));
    memset(m->grad, 0, m->n_params * sizeof(float));
    s->yrows = 0;
    s->ctrl_ready = 0;
    s->big_noise = 0;
    s->batch = 0;
    for (size_t k = 0; k < s->L; k++) {
        ulr_module *u = &s->mod[k];
        u->clipped = u->examples = 0;
        if (u->A) memset(u->A, 0, u->n * u->n * sizeof(double));
    }
    if (controller_on(s) && batch > m->max_batch) DPT_TRY(controller_prepass(s, t, batch));
    if (controller_on(s) && batch == 0) DPT_TRY(controller_solve(s, t));
    return DPT_OK;
}

/* Rows (i, k) r0 .. r0 + nr of module u's noisy passes, all of whole examples unless one
 * example's K copies span several calls (then they are its consecutive copies), with their
 * perturbations z [nr, Kl]: act[a+1] = v_i + z_ik, the rest of the model forward, L_ik, and
 * c_i += f_ik z_ik (rows in (i, k) order, so c_i sums its copies in the order k = 0..K-1).
 * w: a worker's buffers (the reentrant route) or NULL (the model's buffers, with residual
 * sources refilled). */
static dpt_status noisy_rows(ulr_state *s, const dpt_trainer *t, const ulr_module *u, ulr_worker *w,
                             const float *x0, const int32_t *y, size_t r0, size_t nr, const float *z) {
    dpt_model *m = t->model;
    const size_t K = s->cfg.copies, Kl = u->vdim, a = u->first;
    const double s2 = u->s * u->s;
    float *const *act = w ? w->act : m->act;
    float *lrow = w ? w->lrow : s->lrow;
    int32_t *yrep = w ? w->yrep : s->yrep;
    const float *v = s->cache[a + 1];
    float *in = act[a + 1];
    for (size_t r = 0; r < nr; r++) {
        size_t i = (r0 + r) / K;
        const float *restrict vi = v + i * Kl, *restrict zr = z + r * Kl;
        float *restrict dst = in + r * Kl;
#pragma omp simd
        for (size_t e = 0; e < Kl; e++) dst[e] = vi[e] + zr[e];
        yrep[r] = y[i];
    }
    const float *out;
    if (w) {
        for (size_t l = a + 1; l < m->n_layers; l++) {
            const dpt_layer *L = &m->layers[l];
            DPT_TRY(L->ops->forward(L, act[l], act[l + 1], nr));
        }
        out = act[m->n_layers];
    } else {
        /* residual connections from before the perturbed output into the rest of the
         * model read the clean source of example i in every (i, k) row */
        for (size_t l = a + 1; l < m->n_layers; l++) {
            size_t src = m->layers[l].residual_from;
            if (!src || src - 1 > a) continue;
            const float *cs = src - 1 == 0 ? x0 : s->cache[src - 1];
            size_t dim = s->dims[src - 1];
            for (size_t r = 0; r < nr; r++)
                memcpy(m->act[src - 1] + r * dim, cs + ((r0 + r) / K) * dim, dim * sizeof(float));
        }
        DPT_TRY(dpt_model_forward_from(m, a + 1, nr));
        out = dpt_model_output(m);
    }
    DPT_TRY(dpt_loss(t->cfg.loss, out, nr, m->out_dim, yrep, NULL, lrow, NULL));
    for (size_t r = 0; r < nr; r++) {
        size_t i = (r0 + r) / K;
        double base = s->cfg.baseline ? (double)s->L0[i] : 0.0;
        float f = (float)(((double)lrow[r] - base) / ((double)K * s2));
        const float *restrict zr = z + r * Kl;
        float *restrict c = s->cvec + i * Kl;
#pragma omp simd
        for (size_t e = 0; e < Kl; e++) c[e] += f * zr[e];
    }
    return DPT_OK;
}

/* The perturbations z: where they come from depends on what they are.
 *   Controller mode: z IS the privacy noise (s_l is calibrated so that the LR estimate's
 *     own randomness supplies sigma0 C in every direction, Eq. 7): drawn from the noise
 *     stream's ChaCha20 keystream, like every privacy noise.
 *   Explicit mode and the non-private ULR: the privacy comes from the explicit noise added
 *     to the clipped sum alone (each clipped contribution has norm <= C_l whatever z is), so
 *     z is the estimator's own randomness: drawn from the fast AES-128-CTR stream
 *     (dpt_rng_gauss_fill_fast_at), reproducible per seed and thread count, keyed one way
 *     from the noise key. */
static dpt_status perturb_fill(const ulr_state *s, const dpt_rng *rng, uint64_t sub, uint64_t chunk0, float *z,
                               size_t n, float sd, int threads) {
    if ((s->cfg.private_ && s->cfg.noise == DPT_ULR_CONTROLLER) || s->cfg.perturb_noise_stream)
        return dpt_rng_gauss_fill_at(rng, sub, chunk0, z, n, sd, threads);
    return dpt_rng_gauss_fill_fast_at(rng, sub, chunk0, z, n, sd, threads);
}

/* One task of module u's noisy passes: examples [i0, i1) (or, when one example's copies
 * exceed a task, example i0 alone in passes of `rows` rows). Its z [i1 - i0][K][Kl] ~
 * N(0, s^2) go to zbuf from chunks chunk0, chunk0 + 1, ... of substream `sub`
 * (antithetic: K/2 draws per example, copy 2j+1 = -copy 2j). */
static dpt_status noisy_task(ulr_state *s, const dpt_trainer *t, const ulr_module *u, ulr_worker *w, const float *x0,
                             const int32_t *y, size_t i0, size_t i1, size_t rows, const dpt_rng *rng, uint64_t sub,
                             uint64_t chunk0, float *zbuf, int threads) {
    const size_t K = s->cfg.copies, Kl = u->vdim, ne = i1 - i0;
    if (s->cfg.antithetic) {
        size_t half = K / 2;
        DPT_TRY(perturb_fill(s, rng, sub, chunk0, zbuf, ne * half * Kl, (float)u->s, threads));
        for (size_t i = ne; i-- > 0;) /* spread in place, from the back */
            for (size_t j = half; j-- > 0;) {
                const float *src = zbuf + (i * half + j) * Kl;
                float *p = zbuf + (i * K + 2 * j) * Kl, *q = p + Kl;
                for (size_t e = Kl; e-- > 0;) {
                    float v = src[e];
                    q[e] = -v;
                    p[e] = v;
                }
            }
    } else {
        DPT_TRY(perturb_fill(s, rng, sub, chunk0, zbuf, ne * K * Kl, (float)u->s, threads));
    }
    for (size_t r0 = i0 * K; r0 < i1 * K; r0 += rows) {
        size_t nr = i1 * K - r0 < rows ? i1 * K - r0 : rows;
        DPT_TRY(noisy_rows(s, t, u, w, x0, y, r0, nr, zbuf + (r0 - i0 * K) * Kl));
    }
    return DPT_OK;
}

/* Module u's noisy passes over the chunk's bc examples, in tasks of whole examples fixed
 * by K and ULR_TASK_ROWS alone. Reentrant tails: the tasks run on the trainer's threads,
 * each with its own buffers, every GEMM on one OpenBLAS thread: each task makes the same
 * calls on the same data for every thread count, so the result does not depend on it.
 * Otherwise the tasks run in order through the model's buffers. */
static dpt_status noisy_passes(ulr_state *s, dpt_trainer *t, const ulr_module *u, const float *x0,
                               const int32_t *y, size_t bc) {
    const size_t K = s->cfg.copies, Kz = s->cfg.antithetic ? K / 2 : K;
    dpt_rng *rng = dpt_trainer_noise_rng(t);
    const uint64_t sub = dpt_rng_reserve_substreams(rng, 1);
    if (!reentrant_tail(t->model, u->first)) {
        const size_t R = t->model->max_batch, per = K >= R ? 1 : R / K;
        const uint64_t cpt = (per * Kz * u->vdim + DPT_RNG_CHUNK - 1) / DPT_RNG_CHUNK; /* chunks per task */
        for (size_t k = 0, i0 = 0; i0 < bc; k++, i0 += per)
            DPT_TRY(noisy_task(s, t, u, NULL, x0, y, i0, i0 + per < bc ? i0 + per : bc, R, rng, sub, k * cpt, s->z,
                                    t->threads));
        return DPT_OK;
    }
    const size_t per = K >= ULR_TASK_ROWS ? 1 : ULR_TASK_ROWS / K, n_tasks = (bc + per - 1) / per;
    const uint64_t cpt = (per * Kz * u->vdim + DPT_RNG_CHUNK - 1) / DPT_RNG_CHUNK;
    int nt = s->n_workers < n_tasks ? (int)s->n_workers : (int)n_tasks;
    if (nt < 1) nt = 1;
    int prev = blas_serial_begin();
    dpt_status st = DPT_OK;
    char why[1024] = "";
#pragma omp parallel num_threads(nt)
    {
        ulr_worker *w = &s->workers[omp_get_thread_num()];
#pragma omp for schedule(dynamic)
        for (size_t k = 0; k < n_tasks; k++) {
            size_t i0 = k * per, i1 = i0 + per < bc ? i0 + per : bc;
            dpt_status e = noisy_task(s, t, u, w, x0, y, i0, i1, ULR_TASK_ROWS, rng, sub, k * cpt, w->z, 1);
            if (e != DPT_OK) {
#pragma omp critical(dpulr_task_error)
                if (st == DPT_OK) { /* the first failure's message (errors are per thread) */
                    st = e;
                    snprintf(why, sizeof why, "%s", dpt_last_error());
                }
            }
        }
    }
    blas_serial_end(prev);
    if (st != DPT_OK) return dpt_set_error(st, "%s", why);
    return DPT_OK;
}

/* LR estimate of module u for the chunk whose clean pass is in s->cache; adds the clipped
 * (private) or plain sum into m->grad. */
static dpt_status module_estimate(ulr_state *s, dpt_trainer *t, ulr_module *u, const float *x0, const int32_t *y,
                                  size_t bc) {
    dpt_model *m = t->model;
    /* Kl here is the perturbed output's size (a conv module's C_out T) */
    const size_t Kl = u->vdim, a = u->first;
    memset(s->cvec, 0, bc * Kl * sizeof(float));
    DPT_TRY(noisy_passes(s, t, u, x0, y, bc));
    const float *x = a == 0 ? x0 : s->cache[a];
    const dpt_layer *L = &m->layers[a];
    u->examples += bc;
    if (!s->cfg.private_) {
        for (size_t i = 0; i < bc; i++) s->w[i] = 1.0f;
    } else {
        /* ||g_i||^2 into w: Linear g_i = c_i xt_i^T is rank one, ||c_i||^2 ||xt_i||^2; a conv
         * estimate is not, so the layer's per-example norm path (ghost or materialized) */
        if (u->conv) {
            DPT_TRY(L->ops->backward_params(L, x, s->cvec, bc, DPT_GRAD_SQNORM, NULL, s->w, 0, 0));
        } else {
            for (size_t i = 0; i < bc; i++) {
                const float *c = s->cvec + i * Kl;
                double cn = 0, xn = u->has_bias ? 1.0 : 0.0;
                const float *xi = x + i * u->Dl;
#pragma omp simd reduction(+ : cn)
                for (size_t e = 0; e < Kl; e++) cn += (double)c[e] * c[e];
#pragma omp simd reduction(+ : xn)
                for (size_t j = 0; j < u->Dl; j++) xn += (double)xi[j] * xi[j];
                s->w[i] = (float)(cn * xn);
            }
        }
        /* the factors min(1, C_l / ||g_i||) as DP-SGD computes them; a NaN/inf estimate (a
         * diverged model) is DPT_ERANGE there instead of entering the sum "unclipped" */
        dpt_status st = dpt_privacy_clip_factors(s->w, bc, u->C_l, s->w);
        if (st != DPT_OK) return dpt_error_context(st, "dpulr module %zu: LR estimate", (size_t)(u - s->mod));
        for (size_t i = 0; i < bc; i++) u->clipped += s->w[i] < 1.0f;
    }
    return L->ops->backward_params(L, x, s->cvec, bc, DPT_GRAD_WEIGHTED, s->w, m->grad + L->param_offset, 0, 1);
}

/* Controller mode: the noisy passes of every module but the big one, in module order. */
static dpt_status estimate_small(ulr_state *s, dpt_trainer *t, const float *x, const int32_t *y, size_t bc) {
    for (size_t k = 0; k < s->L; k++)
        if (k != s->big) DPT_TRY(module_estimate(s, t, &s->mod[k], x, y, bc));
    return DPT_OK;
}

/* Controller mode, batch in one chunk: the small modules' controllers, then the big
 * module's controller and top-up noise (about 5 of a step's ~26 ms for the MNIST MLP, all
 * of it serial: an eigen-solve and BLAS on one thread) on one thread while the other runs
 * the small modules' noisy passes, which do not need it. Each side makes the same calls in
 * the same order as the one-thread route (the top-up's substream is reserved before
 * either starts), so the result does not depend on the thread count. */
static dpt_status controller_overlapped(ulr_state *s, dpt_trainer *t, const float *x, const int32_t *y, size_t bc) {
    DPT_TRY(controller_small(s));
    dpt_rng *rng = dpt_trainer_noise_rng(t);
    uint64_t sub = dpt_rng_reserve_substreams(rng, 1);
    if (s->L < 2 || dpt_threads_resolve(t->threads) < 2) {
        DPT_TRY(controller_big(s, rng, sub));
        return estimate_small(s, t, x, y, bc);
    }
    /* side A reads a snapshot of the stream: side B reserves substreams meanwhile */
    const dpt_rng snap = *rng;
    dpt_status st_a = DPT_OK, st_b = DPT_OK;
    char why_a[1024] = "", why_b[1024] = "";
    int prev = blas_serial_begin();
#pragma omp parallel sections num_threads(2)
    {
#pragma omp section
        {
            st_a = controller_big(s, &snap, sub);
            if (st_a != DPT_OK) snprintf(why_a, sizeof why_a, "%s", dpt_last_error());
        }
#pragma omp section
        {
            st_b = estimate_small(s, t, x, y, bc);
            if (st_b != DPT_OK) snprintf(why_b, sizeof why_b, "%s", dpt_last_error());
        }
    }
    blas_serial_end(prev);
    if (st_a != DPT_OK) return dpt_set_error(st_a, "%s", why_a);
    if (st_b != DPT_OK) return dpt_set_error(st_b, "%s", why_b);
    return DPT_OK;
}

static dpt_status ulr_accumulate(dpt_algo *a, dpt_trainer *t, const float *x, const int32_t *y, size_t bc,
                                 double *loss_sum) {
    ulr_state *s = a->state;
    dpt_model *m = t->model;
    *loss_sum = 0;
    if (bc == 0) return DPT_OK;
    DPT_CHECK(bc <= s->cap, DPT_EINVAL, "dpulr: chunk of %zu examples exceeds the buffers (%zu)", bc, s->cap);
    /* clean pass: L0 and every activation */
    DPT_TRY(dpt_model_forward(m, x, bc));
    DPT_TRY(dpt_loss(t->cfg.loss, dpt_model_output(m), bc, m->out_dim, y, NULL, s->L0, NULL));
    double ls = 0;
    for (size_t i = 0; i < bc; i++) ls += s->L0[i];
    *loss_sum = ls;
    for (size_t j = 1; j <= m->n_layers; j++) memcpy(s->cache[j], m->act[j], bc * s->dims[j] * sizeof(float));
    if (!controller_on(s)) {
        for (size_t k = 0; k < s->L; k++) DPT_TRY(module_estimate(s, t, &s->mod[k], x, y, bc));
    } else if (s->ctrl_ready) { /* solved in begin (batches larger than a chunk) */
        DPT_TRY(estimate_small(s, t, x, y, bc));
        DPT_TRY(module_estimate(s, t, &s->mod[s->big], x, y, bc));
    } else { /* the whole batch is this chunk */
        DPT_TRY(controller_add(s, m, s->L0, bc));
        DPT_TRY(controller_overlapped(s, t, x, y, bc));
        s->ctrl_ready = 1;
        DPT_TRY(module_estimate(s, t, &s->mod[s->big], x, y, bc));
    }
    s->batch += bc;
    return DPT_OK;
}

/* Controller top-up noise of module u into E [Kl, n]: N = sigma0 C E + (E U) diag(coef) U^T,
 * E iid N(0, 1) from substream `sub` of the noise stream r (only its key and reserved count
 * are read): variance coef_j-corrected (= t_j) along the kept eigenvectors u_j and
 * sigma0^2 C^2 in their orthogonal complement (A_l's null space). *add = 0 when nothing is
 * to be added (PROJ_NONE). Uses s->M and s->Md. */
static dpt_status topup_noise(ulr_state *s, const dpt_rng *r, uint64_t sub, const ulr_module *u, float *E, int threads,
                              int *add) {
    size_t n = u->n, Kl = u->Kl, rk = u->rank;
    float sc = (float)(s->cfg.sigma0 * s->cfg.clip);
    *add = 0;
    /* drawn in every mode: the noise stream's position does not depend on the route */
    DPT_TRY(dpt_rng_gauss_fill_at(r, sub, 0, E, Kl * n, 1.0f, threads));
    if (u->proj == PROJ_NONE) return DPT_OK; /* A_l has full rank: no direction lacks noise */
    if (u->proj == PROJ_GRAM) {
        /* E' = sc (E - E P), P = Y^T G^-1 Y: M = E Y^T [Kl, b], M G^-1 in double with G's
         * Cholesky factor, then E - M Y. E' vanishes on the rows' span and is sc E on its
         * orthogonal complement (Y w = 0 gives E' w = sc E w exactly, whatever the accuracy
         * of G^-1: the floor in A_l's null space does not depend on it) */
        size_t b = s->yrows;
        const float *Y = s->Y + (size_t)(u - s->mod) * s->ycap * s->maxn;
        dpt_sgemm(0, 1, Kl, b, n, 1.0f, E, n, Y, s->maxn, 0.0f, s->M, b);
        for (size_t i = 0; i < Kl * b; i++) s->Md[i] = s->M[i];
        DPT_TRY(dpt_chol_solve(b, u->Lc, Kl, s->Md)); /* row i of M is right-hand side i */
        for (size_t i = 0; i < Kl * b; i++) s->M[i] = (float)s->Md[i];
        dpt_sgemm(0, 0, Kl, n, b, -1.0f, s->M, b, Y, s->maxn, 1.0f, E, n);
        for (size_t i = 0; i < Kl * n; i++) E[i] *= sc;
    } else if (rk) {
        /* M = E U_r [Kl, r], scaled by coef, then E' = sc E + M U_r^T */
        dpt_sgemm(0, 0, Kl, rk, n, 1.0f, E, n, u->U, n, 0.0f, s->M, rk);
        for (size_t i = 0; i < Kl; i++)
            for (size_t j = 0; j < rk; j++) s->M[i * rk + j] *= u->coef[j];
        for (size_t i = 0; i < Kl * n; i++) E[i] *= sc;
        dpt_sgemm(0, 1, Kl, n, rk, 1.0f, s->M, rk, u->U, n, 1.0f, E, n);
    } else {
        for (size_t i = 0; i < Kl * n; i++) E[i] *= sc;
    }
    *add = 1;
    return DPT_OK;
}

/* grad of module u's layer += the top-up noise E [Kl, n] (weights, then the bias column) */
static void topup_add(dpt_model *m, const ulr_module *u, const float *E) {
    const size_t n = u->n, Kl = u->Kl;
    const dpt_layer *L = &m->layers[u->first];
    float *gw = m->grad + L->param_offset, *gb = gw + Kl * u->Dl;
    for (size_t i = 0; i < Kl; i++) {
        for (size_t j = 0; j < u->Dl; j++) gw[i * u->Dl + j] += E[i * n + j];
        if (u->has_bias) gb[i] += E[i * n + u->Dl];
    }
}

static size_t divisor(const ulr_state *s, const dpt_trainer *t, size_t batch) {
    if (!s->cfg.private_) return batch;
    return s->cfg.accounted ? t->cfg.min_batch : t->cfg.batch_size;
}

static dpt_status ulr_finish(dpt_algo *a, dpt_trainer *t, size_t batch) {
    ulr_state *s = a->state;
    dpt_model *m = t->model;
    if (s->cfg.private_) {
        if (s->cfg.noise == DPT_ULR_CONTROLLER) {
            DPT_ASSERT(s->ctrl_ready);
            /* the small modules' top-ups (the big one's was drawn with its controller) */
            dpt_rng *rng = dpt_trainer_noise_rng(t);
            int prev = blas_serial_begin(); /* the top-up's GEMMs and dpotrs */
            dpt_status st = DPT_OK;
            for (size_t k = 0; k < s->L && st == DPT_OK; k++) {
                if (k == s->big) continue;
                int add = 0;
                st = topup_noise(s, rng, dpt_rng_reserve_substreams(rng, 1), &s->mod[k], s->E, t->threads, &add);
                if (st == DPT_OK && add) topup_add(m, &s->mod[k], s->E);
            }
            blas_serial_end(prev);
            DPT_TRY(st);
            if (s->big_noise) topup_add(m, &s->mod[s->big], s->Ebig);
        } else {
            DPT_TRY(dpt_privacy_noise_add(dpt_trainer_noise_rng(t), m->grad, m->n_params, s->cfg.sigma0, s->cfg.clip,
                                          t->threads));
        }
    }
    size_t d = divisor(s, t, batch);
    if (d == 0) return DPT_OK; /* non-private empty batch: the loop skips the update */
    float inv = (float)(1.0 / (double)d);
    for (size_t j = 0; j < m->n_params; j++) m->grad[j] *= inv;
    return DPT_OK;
}

static dpt_status ulr_add_events(dpt_algo *a, const dpt_trainer *t, dpt_ledger *l, uint64_t count) {
    ulr_state *s = a->state;
    return dpt_ledger_add_dpulr(l, t->cfg.sample_rate, s->cfg.sigma0, t->train->n, t->cfg.min_batch, count);
}

static dpt_status ulr_record(dpt_algo *a, dpt_trainer *t, size_t batch) {
    (void)batch;
    DPT_ASSERT(t->ledger);
    return ulr_add_events(a, t, t->ledger, 1);
}

static void ulr_free(dpt_algo *a) {
    if (!a) return;
    ulr_state *s = a->state;
    if (s) {
        free_buffers(s);
        free_modules(s);
        dpt_free(s->cwork);
        free(s);
    }
    free(a);
}

dpt_status dpt_algo_dpulr_new(const dpt_dpulr_config *cfg, dpt_algo **out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_algo_dpulr_new: out is NULL");
    *out = NULL;
    DPT_CHECK(cfg, DPT_EINVAL, "dpt_algo_dpulr_new: cfg is NULL");
    DPT_CHECK(cfg->copies >= 1 && cfg->copies <= 1000000, DPT_EINVAL,
              "dpt_dpulr_config.copies: K must be in [1, 10^6], got %zu", cfg->copies);
    DPT_CHECK(cfg->noise == DPT_ULR_CONTROLLER || cfg->noise == DPT_ULR_EXPLICIT, DPT_EINVAL,
              "dpt_dpulr_config.noise: unknown mode %d", (int)cfg->noise);
    DPT_CHECK(!cfg->antithetic || cfg->copies % 2 == 0, DPT_EINVAL,
              "dpt_dpulr_config.antithetic needs an even dpt_dpulr_config.copies (pairs z, -z), got %zu", cfg->copies);
    DPT_CHECK(isfinite(cfg->perturb_std) && cfg->perturb_std >= 0, DPT_EINVAL,
              "dpt_dpulr_config.perturb_std must be >= 0 and finite, got %g", cfg->perturb_std);
    DPT_CHECK(cfg->baseline == 0 || cfg->baseline == 1 || cfg->baseline == DPT_ULR_AUTO, DPT_EINVAL,
              "dpt_dpulr_config.baseline: expected 0, 1 or DPT_ULR_AUTO (-1), got %d", cfg->baseline);
    DPT_CHECK(!cfg->modules || strlen(cfg->modules) < 256, DPT_EINVAL, "dpt_dpulr_config.modules: spec too long");
    if (cfg->private_) {
        DPT_CHECK(isfinite(cfg->sigma0) && cfg->sigma0 > 0, DPT_EINVAL,
                  "dpt_dpulr_config.sigma0: the target noise multiplier must be > 0, got %g", cfg->sigma0);
        DPT_CHECK(isfinite(cfg->clip) && cfg->clip > 0, DPT_EINVAL,
                  "dpt_dpulr_config.clip: the clipping norm C must be > 0, got %g", cfg->clip);
        /* the controller's variance argument needs the L0^2 variance those tricks remove */
        DPT_CHECK(cfg->noise == DPT_ULR_EXPLICIT || (!cfg->antithetic && cfg->baseline != 1), DPT_EINVAL,
                  "dpt_dpulr_config.antithetic / dpt_dpulr_config.baseline break the privacy controller's variance "
                  "assumption: use them only with dpt_dpulr_config.noise = DPT_ULR_EXPLICIT or non-private "
                  "(private_ = 0)");
    }
    dpt_algo *a = calloc(1, sizeof *a);
    ulr_state *s = calloc(1, sizeof *s);
    if (!a || !s) {
        free(a);
        free(s);
        return dpt_set_error(DPT_ENOMEM, "dpulr: out of memory");
    }
    s->cfg = *cfg;
    /* the defaults resolved once: everything below sees the values the run uses */
    dpt_dpulr_config_resolve(&s->cfg);
    const int ctrl = cfg->private_ && cfg->noise == DPT_ULR_CONTROLLER;
    snprintf(s->modules_spec, sizeof s->modules_spec, "%s", cfg->modules ? cfg->modules : "auto");
    s->cfg.modules = s->modules_spec;
    /* sigma0 is checked against the ledger; the rest here (a run that continues in another
     * mode or with another estimator would mix two algorithms under one ledger) */
    if (cfg->private_)
        snprintf(s->settings, sizeof s->settings, "noise %s, C %.9g, ",
                 cfg->noise == DPT_ULR_CONTROLLER ? "controller" : "explicit", cfg->clip);
    size_t len = strlen(s->settings);
    snprintf(s->settings + len, sizeof s->settings - len, "K %zu, s %s%.9g, antithetic %d, baseline %d, modules %s",
             cfg->copies, ctrl ? "floor " : "", s->cfg.perturb_std, cfg->antithetic != 0, s->cfg.baseline,
             s->modules_spec);
    int accounted = cfg->private_ && cfg->accounted;
    a->name = !cfg->private_ ? "ulr" : accounted ? "dpulr" : "dpulr-unaccounted";
    a->is_private = accounted;
    a->dp_mechanism = cfg->private_ != 0; /* clipped and noised, accounted or not */
    a->sigma = cfg->sigma0;
    a->begin = ulr_begin;
    a->bind = ulr_bind;
    a->accumulate = ulr_accumulate;
    a->finish = ulr_finish;
    a->record = accounted ? ulr_record : NULL;
    a->add_events = accounted ? ulr_add_events : NULL;
    a->privacy_note = cfg->private_ && !accounted
                          ? "non-accounted: DP-ULR on shuffled fixed-size batches (no accountant covers this sampling)"
                          : NULL;
    a->free = ulr_free;
    a->state = s;
    a->settings = s->settings;
    *out = a;
    return DPT_OK;
}

/* The state of a DP-ULR / ULR algorithm, NULL for any other (whose state is not ours). */
static const ulr_state *ulr_state_of(const dpt_algo *a) {
    return a && a->free == ulr_free && a->state ? a->state : NULL;
}

size_t dpt_algo_dpulr_n_modules(const dpt_algo *a) {
    const ulr_state *s = ulr_state_of(a);
    return s ? s->L : 0;
}

dpt_status dpt_algo_dpulr_module_info(const dpt_algo *a, size_t l, dpt_dpulr_module_info *out) {
    const ulr_state *s = ulr_state_of(a);
    DPT_CHECK(a && out, DPT_EINVAL, "dpt_algo_dpulr_module_info: NULL %s", a ? "out" : "a");
    DPT_CHECK(s, DPT_EINVAL, "dpt_algo_dpulr_module_info: a is a '%s' algorithm, not dpulr or ulr",
              a->name ? a->name : "?");
    DPT_CHECK(s->L, DPT_EINVAL, "dpt_algo_dpulr_module_info: no modules yet (they are resolved against the model "
              "at the first step)");
    DPT_CHECK(l < s->L, DPT_EINVAL, "dpt_algo_dpulr_module_info: l = %zu is out of range [0, %zu)", l, s->L);
    const ulr_module *u = &s->mod[l];
    out->s = u->s;
    out->lambda_min = u->lmin;
    out->lambda_max = u->lmax;
    out->rank = u->rank;
    out->dim = u->n;
    out->clipped = u->clipped;
    out->examples = u->examples;
    return DPT_OK;
}
