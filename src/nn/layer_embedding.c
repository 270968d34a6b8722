/* Token embedding with an optional learned position embedding: the first layer of a
 * sequence model. B = batch, T = positions, V = vocabulary, D = embedding width,
 * P = V D (+ T D with positions).
 *   x_i [T]     token ids stored as floats (exact integers up to 2^24), each in [0, V)
 *   v_i [T, D]  v_i,t = E[id_i,t] + Pos[t]
 *   E   [V, D]  "embN.weight" (w: view into theta), then Pos [T, D] "embN.position"
 * Ids are floats so that a token sequence is an ordinary feature vector of T values: the
 * datasets, samplers, physical batches and checkpoints carry them unchanged. forward refuses
 * an id that is not an integer in [0, V) (DPT_EINVAL naming example, position and value).
 * Ids are discrete: backward_input writes zeros and jvp ignores the input tangent.
 * Padding ("pad<P>"): the forward also writes the model's mask [B, T], 1 where id == P,
 * which the attention and pooling layers read (docs/nn.md "Padding masks"); the layer's
 * own math is unchanged (a padded position's cotangent is 0, so its rows add nothing).
 * Per-example gradient (Li et al. 2022, "Large language models can be strong differentially
 * private learners", Section 4): g_i = (sum_t e_{id_t} dv_t^T, dV_i), so
 *   ||g_i||^2 = sum_{t, t' : id_t = id_t'} <dv_t, dv_t'> + ||dV_i||_F^2,
 * computed here by grouping equal ids (sort of T keys, then each group's sum of dv in
 * double): O(T log T + T D) per example against O(V D) to materialize the row. */
#include "nn_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== forward / backward_input / jvp ==== */

static size_t emb_T(const dpt_layer *L) { return L->in_shape[1]; }
static size_t emb_D(const dpt_layer *L) { return L->out_shape[2]; }
static size_t emb_V(const dpt_layer *L) { return L->k; }
static const float *emb_pos(const dpt_layer *L) { return L->has_bias ? L->w + emb_V(L) * emb_D(L) : NULL; }

static dpt_status emb_forward(const dpt_layer *L, const float *x, float *v, size_t B) {
    const size_t T = emb_T(L), D = emb_D(L), V = emb_V(L);
    const float *pos = emb_pos(L);
    for (size_t i = 0; i < B; i++)
        for (size_t t = 0; t < T; t++) {
            const float id = x[i * T + t];
            /* NaN fails every comparison */
            DPT_CHECK(id >= 0.0f && id < (float)V && id == floorf(id), DPT_EINVAL,
                      "%s: token id %g at example %zu, position %zu is not an integer in [0, %zu)", L->name,
                      (double)id, i, t, V);
            if (L->pad_mask) L->pad_mask[i * T + t] = L->has_pad && (size_t)id == L->pad_id;
            const float *e = L->w + (size_t)id * D;
            float *o = v + (i * T + t) * D;
            if (pos)
                for (size_t d = 0; d < D; d++) o[d] = e[d] + pos[t * D + d];
            else
                memcpy(o, e, D * sizeof *o);
        }
    return DPT_OK;
}

static dpt_status emb_backward_input(const dpt_layer *L, const float *x, const float *v, const float *dv,
                                     float *dx, size_t B) {
    memset(dx, 0, B * L->in_dim * sizeof *dx); /* discrete ids: no cotangent */
    return DPT_OK;
}

static dpt_status emb_jvp(const dpt_layer *L, const float *x, const float *v, const float *dx,
                          const float *dtheta, float *dv, size_t B) {
    /* dv_t = dE[id_t] + dPos[t]; the ids' tangent dx does not move them */
    const size_t T = emb_T(L), D = emb_D(L), V = emb_V(L);
    if (!dtheta) {
        memset(dv, 0, B * L->out_dim * sizeof *dv);
        return DPT_OK;
    }
    const float *dpos = L->has_bias ? dtheta + V * D : NULL;
    for (size_t i = 0; i < B; i++)
        for (size_t t = 0; t < T; t++) {
            const float *e = dtheta + (size_t)x[i * T + t] * D; /* ids checked by the forward */
            float *o = dv + (i * T + t) * D;
            for (size_t d = 0; d < D; d++) o[d] = e[d] + (dpos ? dpos[t * D + d] : 0.0f);
        }
    return DPT_OK;
}

/* ==== backward_params ==== */

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* ||g_i||^2 of one example: keys (id << 32 | t) sorted group equal ids; each group's
 * ||sum_t dv_t||^2 is the sum over its pairs of <dv_t, dv_t'> (Li et al. 2022). */
static double emb_sqnorm(const dpt_layer *L, const float *xi, const float *dvi, uint64_t *key, double *acc) {
    const size_t T = emb_T(L), D = emb_D(L);
    for (size_t t = 0; t < T; t++) key[t] = (uint64_t)xi[t] << 32 | (uint64_t)t;
    qsort(key, T, sizeof *key, cmp_u64);
    double s = 0.0;
    for (size_t a = 0; a < T;) {
        size_t b = a;
        memset(acc, 0, D * sizeof *acc);
        for (; b < T && key[b] >> 32 == key[a] >> 32; b++) {
            const float *r = dvi + (size_t)(key[b] & 0xffffffffu) * D;
            for (size_t d = 0; d < D; d++) acc[d] += r[d];
        }
        for (size_t d = 0; d < D; d++) s += acc[d] * acc[d];
        a = b;
    }
    if (L->has_bias) /* every position has its own row of Pos */
        for (size_t j = 0; j < T * D; j++) s += (double)dvi[j] * dvi[j];
    return s;
}

static dpt_status emb_backward_params(const dpt_layer *L, const float *x, const float *dv, size_t B,
                                      dpt_grad_mode mode, const float *weights, float *out, size_t ld,
                                      int accumulate) {
    const size_t T = emb_T(L), D = emb_D(L), V = emb_V(L), VD = V * D, P = L->n_params;
    DPT_CHECK(mode != DPT_GRAD_WEIGHTED || weights, DPT_EINVAL, "%s: weighted gradient needs weights", L->name);
    DPT_CHECK(mode != DPT_GRAD_DOT || weights, DPT_EINVAL, "%s: inner products need a vector", L->name);
    DPT_CHECK(mode != DPT_GRAD_PER_EXAMPLE || ld >= P, DPT_EINVAL, "%s: per-example row stride %zu < %zu parameters",
              L->name, ld, P);
    switch (mode) {
    case DPT_GRAD_SUM:
    case DPT_GRAD_WEIGHTED:
        /* dE[id_i,t] += w_i dv_i,t, dPos[t] += w_i dv_i,t (w_i = 1 for SUM), examples in order */
        if (!accumulate) memset(out, 0, P * sizeof *out);
        for (size_t i = 0; i < B; i++) {
            const float wi = mode == DPT_GRAD_WEIGHTED ? weights[i] : 1.0f;
            for (size_t t = 0; t < T; t++) {
                const float *r = dv + (i * T + t) * D;
                float *e = out + (size_t)x[i * T + t] * D, *p = out + VD + t * D;
                for (size_t d = 0; d < D; d++) e[d] += wi * r[d];
                if (L->has_bias)
                    for (size_t d = 0; d < D; d++) p[d] += wi * r[d];
            }
        }
        return DPT_OK;
    case DPT_GRAD_PER_EXAMPLE: {
        const long long nB = (long long)B;
#pragma omp parallel for num_threads(L->threads) if (B * P > DPT_NN_PAR_MIN)
        for (long long ii = 0; ii < nB; ii++) {
            const size_t i = (size_t)ii;
            float *o = out + i * ld;
            if (!accumulate) memset(o, 0, P * sizeof *o);
            for (size_t t = 0; t < T; t++) {
                const float *r = dv + (i * T + t) * D;
                float *e = o + (size_t)x[i * T + t] * D, *p = o + VD + t * D;
                for (size_t d = 0; d < D; d++) e[d] += r[d];
                if (L->has_bias)
                    for (size_t d = 0; d < D; d++) p[d] += r[d];
            }
        }
        return DPT_OK;
    }
    case DPT_GRAD_SQNORM: {
        uint64_t *key = (uint64_t *)L->scratch;  /* [T] */
        double *acc = (double *)(key + T);       /* [D] */
        for (size_t i = 0; i < B; i++) {
            const double n2 = emb_sqnorm(L, x + i * T, dv + i * T * D, key, acc);
            out[i] = accumulate ? (float)((double)out[i] + n2) : (float)n2;
        }
        return DPT_OK;
    }
    case DPT_GRAD_DOT:
        /* <g_i, (vE, vPos)> = sum_t dv_t . (vE[id_t] + vPos[t]) */
        for (size_t i = 0; i < B; i++) {
            double s = 0.0;
            for (size_t t = 0; t < T; t++) {
                const float *r = dv + (i * T + t) * D, *e = weights + (size_t)x[i * T + t] * D;
                const float *p = weights + VD + t * D;
                for (size_t d = 0; d < D; d++) s += (double)r[d] * ((double)e[d] + (L->has_bias ? p[d] : 0.0f));
            }
            out[i] = accumulate ? (float)((double)out[i] + s) : (float)s;
        }
        return DPT_OK;
    }
    return dpt_set_error(DPT_EINVAL, "%s: unknown gradient mode %d", L->name, (int)mode);
}

/* ==== tensor table ==== */

static size_t emb_n_tensors(const dpt_layer *L) { return L->has_bias ? 2 : 1; }

static void emb_tensor(const dpt_layer *L, size_t j, dpt_param_tensor *t) {
    memset(t, 0, sizeof *t);
    DPT_ASSERT(j < emb_n_tensors(L));
    const size_t D = emb_D(L);
    snprintf(t->name, sizeof t->name, "%s.%s", L->name, j == 0 ? "weight" : "position");
    t->ndim = 2;
    t->shape[0] = j == 0 ? emb_V(L) : emb_T(L);
    t->shape[1] = D;
    t->offset = L->param_offset + (j == 0 ? 0 : emb_V(L) * D);
    t->size = t->shape[0] * D;
    t->role = DPT_TENSOR_EMBEDDING;
}

static const dpt_layer_ops emb_ops = {
    emb_forward, emb_backward_input, emb_backward_params, emb_jvp, emb_n_tensors, emb_tensor, NULL, NULL, NULL,
};

dpt_status dpt_layer_embedding_setup(dpt_layer *L, const size_t in_shape[3], size_t V, size_t D, int positions) {
    DPT_CHECK(in_shape[0] == 1 && in_shape[2] == 1, DPT_EINVAL,
              "embedding: the input must be token ids of shape (1, T, 1) (a 'seq:<T>' model), got %zux%zux%zu",
              in_shape[0], in_shape[1], in_shape[2]);
    DPT_CHECK(V >= 1 && V <= ((size_t)1 << 24), DPT_EINVAL,
              "embedding: vocabulary %zu is not in 1..2^24 (ids are stored exactly as floats)", V);
    DPT_CHECK(D >= 1, DPT_EINVAL, "embedding: width must be >= 1");
    const size_t T = in_shape[1];
    size_t P;
    DPT_CHECK(!dpt_mul_overflow(V + (positions ? T : 0), D, &P) && P <= ((size_t)1 << 31), DPT_EINVAL,
              "embedding: %zu x %zu tables are too large", V + (positions ? T : 0), D);
    L->kind = DPT_LAYER_EMBEDDING;
    L->ops = &emb_ops;
    L->k = V;
    L->has_bias = positions; /* the position table plays the bias's part: optional, per output */
    memcpy(L->in_shape, in_shape, sizeof L->in_shape);
    L->out_shape[0] = 1;
    L->out_shape[1] = T;
    L->out_shape[2] = D;
    L->in_dim = T;
    L->out_dim = T * D;
    L->n_params = P;
    L->scratch_need = 2 * T + 2 * D; /* SQNORM: T uint64 keys, D doubles */
    return DPT_OK;
}

dpt_status dpt_layer_embedding_set_pad(dpt_layer *L, size_t pad_id) {
    DPT_ASSERT(L->kind == DPT_LAYER_EMBEDDING);
    DPT_CHECK(pad_id < L->k, DPT_EINVAL, "embedding: pad id %zu is not a token of the vocabulary [0, %zu)", pad_id,
              L->k);
    L->has_pad = 1;
    L->pad_id = pad_id;
    return DPT_OK;
}
