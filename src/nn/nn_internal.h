/* nn internals: layer constructors and small helpers shared by the nn source files.
 * Not installed; only the files in src/nn includes it. */
#ifndef DPTRAIN_NN_INTERNAL_H
#define DPTRAIN_NN_INTERNAL_H

#include <dptrain/nn.h>

#include "core/isa.h"

/* Element count above which an elementwise or per-example loop is split over threads
 * (below it, thread start-up costs more than it saves). */
#define DPT_NN_PAR_MIN 65536

/* Conv2d unfold cache (dpt_model_unfold_cache): cols holds cap examples' unfolds, chunk
 * by chunk as the layer forms them ([Dk, n T] for the n examples of each chunk, at float
 * offset lo Dk T for the chunk starting at example lo); valid for input x with batch B
 * unfolded in chunks of `chunk` examples (x NULL = nothing valid). */
struct dpt_unfold_cache {
    float *cols;
    size_t cap;
    const float *x;
    size_t B, chunk;
    /* a forward that computed directly (no unfold) records its input here; the first
     * backward_params with that input then unfolds it into the cache (layer_conv.c) */
    const float *pend;
    size_t pend_B;
};
/* Floats a Conv2d layer's unfold cache needs per example (0 for other layers). */
size_t dpt_layer_conv_unfold_floats(const dpt_layer *L);

/* C (+)= A B for small products, without packing (src/nn/small_gemm.c): M x N outputs
 * C(m, n) = sum_k A(m, k) B(k, n) with A(m, k) = a[m ars + k acs] (any strides), B's rows
 * contiguous (B(k, n) = b[k ldb + n]; nothing past column N is read) and C(m, n) stored at
 * c[m crs + n ccs]; accumulate = 1 adds to C. Sums run over k in order, in float. */
void dpt_small_gemm(size_t M, size_t N, size_t K, const float *a, size_t ars, size_t acs, const float *b,
                    size_t ldb, float *c, size_t crs, size_t ccs, int accumulate);

/* One example of a stride-1 convolution without unfolding (src/nn/small_gemm.c):
 * out [O, T] (+)= W [O, K] patches + bias, where patch row k of output position t =
 * oh Wo + ow is xp[koff[k] + oh Wp + ow .. + 7] for the 8 positions from t (xp: the
 * example zero-padded to width Wp; koff[k] = (c Hp + ki) Wp + kj). Needs Wo % 8 == 0 (so T
 * too). Sums run over k in order, in float; the bias is added as the GEMM path adds it. */
void dpt_conv_direct(size_t O, size_t K, size_t T, size_t Wo, size_t Wp, const float *w, const float *bias,
                     const size_t *koff, const float *xp, float *out, int accumulate);
/* One example's stride-1 convolution weight gradient without unfolding
 * (src/nn/small_gemm.c): g [O, Dk] (+)= dV U^T, g[o Dk + r] = sum_{oh, ow}
 * dv[o T + oh Wo + ow] xp[koff[r] + oh Wp + ow] over the T = Ho Wo positions, with dv
 * [O, T] the example's output cotangent, xp the example zero-padded to width Wp and
 * koff[r] the offset of patch row r = (c, ki, kj) in it ((c Hp + ki) Wp + kj). Needs
 * Wo % 8 == 0. Each sum runs as 8 partial sums over the positions (ow mod 8), in float,
 * added at the end in a fixed order: deterministic, not the bits of a sequential sum. */
void dpt_conv_pe_grad(size_t O, size_t Dk, size_t Ho, size_t Wo, size_t Wp, const size_t *koff, const float *xp,
                      const float *dv, float *g, int accumulate);
#if DPT_ISA_DISPATCH /* both builds by name (core/isa.h): the functions above call one */
void dpt_small_gemm_base(size_t M, size_t N, size_t K, const float *a, size_t ars, size_t acs, const float *b,
                         size_t ldb, float *c, size_t crs, size_t ccs, int accumulate);
void dpt_small_gemm_v3(size_t M, size_t N, size_t K, const float *a, size_t ars, size_t acs, const float *b,
                       size_t ldb, float *c, size_t crs, size_t ccs, int accumulate);
void dpt_conv_direct_base(size_t O, size_t K, size_t T, size_t Wo, size_t Wp, const float *w, const float *bias,
                          const size_t *koff, const float *xp, float *out, int accumulate);
void dpt_conv_direct_v3(size_t O, size_t K, size_t T, size_t Wo, size_t Wp, const float *w, const float *bias,
                        const size_t *koff, const float *xp, float *out, int accumulate);
void dpt_conv_pe_grad_base(size_t O, size_t Dk, size_t Ho, size_t Wo, size_t Wp, const size_t *koff,
                           const float *xp, const float *dv, float *g, int accumulate);
void dpt_conv_pe_grad_v3(size_t O, size_t Dk, size_t Ho, size_t Wo, size_t Wp, const size_t *koff,
                         const float *xp, const float *dv, float *g, int accumulate);
/* x86-64-v4 (AVX-512): 16-float vectors (small_gemm_v4.c); dpt_small_gemm_v4 is v3's code */
void dpt_small_gemm_v4(size_t M, size_t N, size_t K, const float *a, size_t ars, size_t acs, const float *b,
                       size_t ldb, float *c, size_t crs, size_t ccs, int accumulate);
void dpt_conv_direct_v4(size_t O, size_t K, size_t T, size_t Wo, size_t Wp, const float *w, const float *bias,
                        const size_t *koff, const float *xp, float *out, int accumulate);
void dpt_conv_pe_grad_v4(size_t O, size_t Dk, size_t Ho, size_t Wo, size_t Wp, const size_t *koff,
                         const float *xp, const float *dv, float *g, int accumulate);
#endif

/* Sets up L as a Linear layer D -> K (weights and scratch are attached by the model). */
void dpt_layer_linear_setup(dpt_layer *L, size_t D, size_t K, int has_bias);
/* Sets up L as an elementwise activation on n features; kind is not LINEAR. */
void dpt_layer_act_setup(dpt_layer *L, dpt_layer_kind kind, size_t n);
#if DPT_ISA_DISPATCH /* the kernels of the baseline or the x86-64-v3 build (core/isa.h) */
void dpt_layer_act_setup_base(dpt_layer *L, dpt_layer_kind kind, size_t n);
void dpt_layer_act_setup_v3(dpt_layer *L, dpt_layer_kind kind, size_t n);
dpt_status dpt_loss_base(dpt_loss_kind kind, const float *o, size_t B, size_t K, const int32_t *labels,
                         const float *targets, float *loss, float *dout);
dpt_status dpt_loss_v3(dpt_loss_kind kind, const float *o, size_t B, size_t K, const int32_t *labels,
                       const float *targets, float *loss, float *dout);
#endif
/* Spatial layers on a (C, H, W) input (shapes, parameter count and scratch_need set here;
 * weights and scratch are attached by the model). DPT_EINVAL when the shapes do not fit. */
dpt_status dpt_layer_conv_setup(dpt_layer *L, const size_t in_shape[3], size_t C_out, size_t k, size_t stride,
                                size_t pad, int has_bias, size_t max_batch);
/* Turns weight standardization on for a Conv2d layer just set up (L->wstd; grows its
 * scratch_need by 2 O Dk + O floats and turns the Gram-matrix SQNORM path off). */
void dpt_layer_conv_set_ws(dpt_layer *L);
/* Naive reference of the standardization's Jacobian (tests): out [O, Dk] = J g filter by
 * filter, J_o written out as a matrix, in double, at the layer's current weights. */
void dpt_conv_ws_jacobian_ref(const dpt_layer *L, const float *g, double *out);
dpt_status dpt_layer_pool_setup(dpt_layer *L, dpt_layer_kind kind, const size_t in_shape[3], size_t k,
                                size_t stride);
#if DPT_ISA_DISPATCH
dpt_status dpt_layer_pool_setup_base(dpt_layer *L, dpt_layer_kind kind, const size_t in_shape[3], size_t k,
                                     size_t stride);
dpt_status dpt_layer_pool_setup_v3(dpt_layer *L, dpt_layer_kind kind, const size_t in_shape[3], size_t k,
                                   size_t stride);
#endif
void dpt_layer_flatten_setup(dpt_layer *L, const size_t in_shape[3]);
dpt_status dpt_layer_groupnorm_setup(dpt_layer *L, const size_t in_shape[3], size_t groups);
/* Example i's parameter gradient gi [P] (double) into out by mode, as backward_params
 * defines the modes (sum, weighted sum, row i at stride ld, squared norm, dot with
 * weights [P]); the layers that form one example's gradient at a time share it. */
void dpt_grad_emit_row(dpt_grad_mode mode, const double *gi, size_t P, size_t i, const float *weights, float *out,
                       size_t ld, int accumulate);
/* fbn: v[c] = s_c x[c] + b_c per channel (frozen BatchNorm); parameters s [C], b [C] */
dpt_status dpt_layer_channel_affine_setup(dpt_layer *L, const size_t in_shape[3]);
/* Scattering transform (src/nn/layer_scatter.c): J scales (1..6), n_angles angles (1..16) on
 * a (C, H, W) input with H, W >= 2^J; output (C P, Hp / 2^J - 2, Wp / 2^J - 2) with P =
 * dpt_scatter_paths(J, n_angles) and Hp = dpt_scatter_padded(H, J). Shapes only: the filter
 * bank and FFT plans are built by the layer's attach op (dpt_model_new). */
dpt_status dpt_layer_scatter_setup(dpt_layer *L, const size_t in_shape[3], size_t J, size_t n_angles);
size_t dpt_scatter_paths(size_t J, size_t L);   /* 1 + J L + L^2 J (J - 1) / 2 */
size_t dpt_scatter_padded(size_t n, size_t J);  /* Kymatio's padded size of a side of n */
double dpt_scatter_angle(size_t t, size_t L);   /* angle of orientation t, radians */
/* The spectrum of a built layer's filter on level r (grid subsampled by 2^r): wavelet n
 * (= j L + t; levels 0..max(J - 1, 1) - 1) or the low-pass for n < 0 (levels 0..J - 1);
 * *hat [*h *w] real, FFTW's frequency order; a view valid until the model is freed. */
dpt_status dpt_scatter_filter(const dpt_layer *L, long n, size_t r, const double **hat, size_t *h, size_t *w);
/* Sequence layers on a (1, T, D) input (token ids: (1, T, 1)); DPT_EINVAL when the shape
 * does not fit. Embedding: V tokens of width D, with a learned position table when
 * positions != 0 (layer_embedding.c); LayerNorm/RMSNorm (kind) per position
 * (layer_seqnorm.c); position-wise Linear D -> K (layer_seqlinear.c); mean/CLS pooling
 * (kind, layer_seqpool.c). */
dpt_status dpt_layer_embedding_setup(dpt_layer *L, const size_t in_shape[3], size_t V, size_t D, int positions);
/* Gives an embedding just set up the pad token pad_id < V (DPT_EINVAL otherwise). */
dpt_status dpt_layer_embedding_set_pad(dpt_layer *L, size_t pad_id);
dpt_status dpt_layer_seqnorm_setup(dpt_layer *L, dpt_layer_kind kind, const size_t in_shape[3]);
dpt_status dpt_layer_seqlinear_setup(dpt_layer *L, const size_t in_shape[3], size_t K, int has_bias);
dpt_status dpt_layer_seqpool_setup(dpt_layer *L, dpt_layer_kind kind, const size_t in_shape[3]);
/* Multi-head attention core on (1, T, 3D) queries, keys, values (layer_attention.c). */
dpt_status dpt_layer_attention_setup(dpt_layer *L, const size_t in_shape[3], size_t heads, int causal);
/* The attention's row-by-row reference (dot products in double, P one row at a time) of its
 * forward and backward_input ops, which run as small GEMMs: the tests compare the two. */
dpt_status dpt_attention_forward_ref(const dpt_layer *L, const float *x, float *v, size_t B);
dpt_status dpt_attention_backward_input_ref(const dpt_layer *L, const float *x, const float *v, const float *dv,
                                            float *dx, size_t B);
/* (C, H, W) -> (1, [1 +] H W, C) with a learned CLS vector (cls) and positions (layer_toseq.c). */
dpt_status dpt_layer_toseq_setup(dpt_layer *L, const size_t in_shape[3], int cls, int positions);

/* ==== Model specs ==== */

#define DPT_SPEC_MAX_WIDTHS 65 /* at most 64 Linear layers */
#define DPT_SPEC_MAX_WIDTH ((size_t)1 << 24)
/* One item of a "cnn:" spec: a layer, with a residual group opening before it ('[') and
 * closing after it (']'). */
#define DPT_SPEC_MAX_ITEMS 64
typedef struct {
    dpt_layer_kind kind;
    size_t n;            /* conv: C_out; fc, plin: K; gn: groups; emb: V; scatter: L (angles) */
    size_t k, stride, pad; /* emb: k = D; scatter: k = J (scales) */
    int res_open, res_close;
    int nobias;          /* conv, fc, plin: "nobias" suffix (the layer has no bias) */
    int ws;              /* conv: "ws" suffix (weight standardization) */
    int nopos;           /* emb, toseq: "nopos" suffix (no position table) */
    int cls;             /* toseq: "cls" suffix (a learned CLS vector first) */
    int causal;          /* attn: "c" suffix (causal attention); n = heads */
    int has_pad;         /* emb: "pad<P>" suffix: token pad_id marks padded positions */
    size_t pad_id;
} dpt_spec_item;

typedef struct {
    int cnn;                             /* "cnn:" or "seq:" (items below), else mlp/ae (widths) */
    size_t in_shape[3];                  /* cnn: (C, H, W); seq: (1, T, D), (1, T, 1) for ids */
    size_t n_items;
    dpt_spec_item items[DPT_SPEC_MAX_ITEMS];
    int autoencoder;                     /* "ae:" (requires in == out) */
    size_t n_widths;                     /* >= 2 */
    size_t widths[DPT_SPEC_MAX_WIDTHS];  /* m_0 (input) .. m_L (output) */
    dpt_layer_kind act;                  /* between Linear layers; relu when not given */
    int has_bias;
} dpt_spec;
/* Parses "mlp:784-128-10:gelu[:nobias]", "cnn:..." and the named models (docs/nn.md);
 * DPT_EINVAL naming the bad part. */
dpt_status dpt_spec_parse(const char *spec, dpt_spec *out);
/* Parses one item ("plin64", "attn4c", "emb256x64nopos"; brackets are kept in res_open and
 * res_close); DPT_EINVAL naming the item, as in a spec. */
dpt_status dpt_spec_item_parse(const char *item, dpt_spec_item *it);
/* Writes one "cnn:" item in the form the parser reads ("[conv32k3p1", "maxpool2s1",
 * "fc10nobias]"), defaults left out: the builder's canonical spec. snprintf's return. */
int dpt_spec_item_format(const dpt_spec_item *it, char *buf, size_t cap);
/* Sets up L as the layer of item `it` on input shape in_shape (has_bias: the spec's
 * global bias setting, which an item's "nobias" turns off). Name and residual link are
 * the caller's. DPT_EINVAL with the layer's reason when the shapes do not fit. */
dpt_status dpt_spec_item_setup(dpt_layer *L, const dpt_spec_item *it, const size_t in_shape[3], int has_bias,
                               size_t max_batch);
/* The checks at the end of a residual group whose input has shape in_shape and whose last
 * layer is L: same shape out as in, and L not tanh/sigmoid (their backward reads their
 * output, which the residual add changes). DPT_EINVAL with the reason (no context). */
dpt_status dpt_spec_residual_check(const size_t in_shape[3], const dpt_layer *L);

#endif
