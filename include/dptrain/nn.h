/* nn: layers with per-example semantics, models (an ordered list of blocks over one flat
 * parameter buffer), losses and initializers. Implements the layer contract of DESIGN.md:
 * forward, backward_input, and backward_params in four modes (batch sum, per-example
 * gradients, per-example squared norms without materializing them, weighted sum).
 * Memory: a dpt_model owns theta, grad and all activation/cotangent buffers, allocated once
 * for max_batch in dpt_model_new; nothing allocates in forward/backward. Pointers returned
 * by accessors are views valid until dpt_model_free.
 * Thread safety: a model is used by one caller at a time; it uses `threads` threads inside.
 * Errors: DPT_EINVAL naming the bad part of a spec or the parameter (batch larger than
 * max_batch, unknown tensor name, ...), DPT_ENOMEM.
 *
 * Letters: B = batch, D = per-example input size, K = per-example output size,
 * P = number of parameters (of a layer or of the model). */
#ifndef DPTRAIN_NN_H
#define DPTRAIN_NN_H

#include <dptrain/core.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

/* ==== Layer contract ==== */

typedef enum {
    DPT_LAYER_LINEAR = 0,
    DPT_LAYER_RELU,
    DPT_LAYER_GELU, /* exact erf form: x * Phi(x) */
    DPT_LAYER_TANH,
    DPT_LAYER_SIGMOID,
    DPT_LAYER_IDENTITY,
    DPT_LAYER_CONV2D,    /* 2-d convolution, any kernel k x k, stride, zero padding */
    DPT_LAYER_MAXPOOL,   /* k x k windows with stride s, no padding */
    DPT_LAYER_AVGPOOL,   /* k x k windows with stride s, no padding */
    DPT_LAYER_FLATTEN,   /* (C, H, W) -> (1, 1, C*H*W): the values are unchanged */
    DPT_LAYER_GROUPNORM, /* per example and group of channels; gamma, beta per channel */
    DPT_LAYER_SCATTER,   /* 2-d scattering transform (Morlet wavelets, order 2): fixed, no
                          * parameters, first layer only (docs/nn.md) */
    /* Sequence layers: a sequence is the shape (1, T, D), T positions of D features, row-major
     * [T, D] per example; token ids are the shape (1, T, 1) (docs/nn.md "Sequence layers"). */
    DPT_LAYER_EMBEDDING, /* token ids (floats) -> E[id_t] + Pos[t]: (1, T, 1) -> (1, T, D) */
    DPT_LAYER_LAYERNORM, /* per position over its D features; gamma, beta [D] */
    DPT_LAYER_RMSNORM,   /* per position x / rms(x) over its D features; gamma [D] */
    DPT_LAYER_SEQLINEAR, /* the same Linear D -> K at every position: (1, T, D) -> (1, T, K) */
    DPT_LAYER_MEANPOOL,  /* mean over the T positions: (1, T, D) -> (1, 1, D) */
    DPT_LAYER_CLSPOOL,   /* position 0 (a CLS token): (1, T, D) -> (1, 1, D) */
    DPT_LAYER_ATTENTION, /* multi-head softmax(Q K^T / sqrt(dh)) V, bidirectional or causal,
                          * no parameters: (1, T, 3D) [q, k, v] -> (1, T, D) */
    DPT_LAYER_CHANNEL_AFFINE, /* "fbn", frozen BatchNorm: v[c] = scale_c x[c] + shift_c per channel,
                               * the same for every example; scale, shift [C] (identity at init),
                               * set from DP channel statistics by dpt_trainer_feature_norm */
    DPT_LAYER_TOSEQ      /* (C, H, W) -> (1, [1 +] H W, C): the H W positions as a sequence (ViT
                          * patch tokens after a stride = kernel convolution), an optional
                          * learned CLS vector first, learned positions added */
} dpt_layer_kind;
/* "linear", "relu", "gelu", "tanh", "sigmoid", "identity", "conv", "maxpool", "avgpool",
 * "flatten", "groupnorm", "scatter", "embedding", "layernorm", "rmsnorm", "plinear", "meanpool",
 * "clspool", "attention", "fbn", "toseq" ("?" for a value outside the enum): the names of model specs and of the
 * layers' default names ("relu1"). */
const char *dpt_layer_kind_name(dpt_layer_kind kind);

typedef enum {
    DPT_GRAD_SUM = 0,     /* out[P_l]      (+)= sum_i g_i                               */
    DPT_GRAD_PER_EXAMPLE, /* out[i*ld + j] (+)= (g_i)_j,  j < P_l, i < B              */
    DPT_GRAD_SQNORM,      /* out[i]        (+)= ||g_i||^2 (never materializes g_i)     */
    DPT_GRAD_WEIGHTED,    /* out[P_l]      (+)= sum_i w_i g_i (one GEMM for a Linear)   */
    DPT_GRAD_DOT          /* out[i]        (+)= <g_i, v>, v = `weights` [P_l] (the layer's
                           * slice of a parameter-shaped vector); never materializes g_i
                           * (Linear: dv_i . (V x_i + v_b), one GEMM)                   */
} dpt_grad_mode;

/* A named parameter tensor: a slice of theta ("fc1.weight" {K, D}, "fc1.bias" {K}). */
typedef enum { DPT_TENSOR_WEIGHT = 0, DPT_TENSOR_BIAS, DPT_TENSOR_SCALE, DPT_TENSOR_EMBEDDING } dpt_tensor_role;
typedef struct dpt_param_tensor {
    char name[48];
    int ndim;
    size_t shape[4];
    size_t offset, size; /* into theta */
    dpt_tensor_role role; /* weights take the init scheme's variance, biases bias_var;
                           * fan_in = size / shape[0], fan_out = shape[0]; scales
                           * (GroupNorm's gamma) start at 1 */
} dpt_param_tensor;

typedef struct dpt_layer dpt_layer;

typedef struct {
    /* v[B, K] = layer(x[B, D]) */
    dpt_status (*forward)(const dpt_layer *L, const float *x, float *v, size_t B);
    /* dx[B, D] = (dv/dx)^T dv[B, K]; x and v are the forward's input and output */
    dpt_status (*backward_input)(const dpt_layer *L, const float *x, const float *v,
                                 const float *dv, float *dx, size_t B);
    /* Parameter gradient for output cotangent dv (see dpt_grad_mode). g_i is example i's
     * gradient d<dv_i, v_i>/d theta_l. `weights` [B] for WEIGHTED, [P_l] for DOT. `ld` is the row
     * stride of PER_EXAMPLE output. accumulate = 0 overwrites, 1 adds. NULL for layers
     * without parameters. */
    dpt_status (*backward_params)(const dpt_layer *L, const float *x, const float *dv, size_t B,
                                  dpt_grad_mode mode, const float *weights, float *out,
                                  size_t ld, int accumulate);
    /* Forward-mode tangent: dv[B, K] = (dv/dx) dx + (dv/dtheta) dtheta, with dx [B, D]
     * (NULL = 0) and dtheta the layer's parameter tangent [P_l] (NULL = 0). */
    dpt_status (*jvp)(const dpt_layer *L, const float *x, const float *v, const float *dx,
                      const float *dtheta, float *dv, size_t B);
    /* The layer's parameter tensors: how many (0 without parameters), and tensor j with
     * its name, shape, role and offset into theta (absolute: param_offset + ...). */
    size_t (*n_tensors)(const dpt_layer *L);
    void (*tensor)(const dpt_layer *L, size_t j, dpt_param_tensor *t);
    /* Optional (NULL = not available): out[i * k + j] += <g_i, h_j> for the B examples of
     * (x, dv) and k other examples (xz [k, D], dvz [k, K]) at the same parameters, neither
     * gradient formed (Linear: (dv_i . dvz_j)(x_i . xz_j + 1 with a bias)), in double. */
    dpt_status (*cross)(const dpt_layer *L, const float *x, const float *dv, size_t B, const float *xz,
                        const float *dvz, size_t k, double *out);
    /* Optional (NULL = none): builds the layer's fixed internal state (`state`: a scattering
     * layer's filter bank and FFT plans) once dpt_model_new has attached scratch and threads,
     * and frees it (accepts a layer whose attach never ran or failed). */
    dpt_status (*attach)(dpt_layer *L);
    void (*detach)(dpt_layer *L);
} dpt_layer_ops;

struct dpt_unfold_cache; /* Conv2d unfold cache (opaque) */

struct dpt_layer {
    dpt_layer_kind kind;
    const dpt_layer_ops *ops;
    char name[32];            /* "fc1", "gelu1": names checkpoint tensors ("fc1.weight") */
    size_t in_dim, out_dim;   /* per-example sizes D and K (flattened) */
    size_t in_shape[3], out_shape[3]; /* (C, H, W); (1, 1, n) for vectors */
    size_t n_params;          /* P_l */
    size_t param_offset;      /* slice [param_offset, param_offset + P_l) of theta */
    int has_bias;
    float *w;                 /* Linear: [K, D] view into theta */
    float *b;                 /* Linear: [K] view into theta (NULL without bias) */
    float *scratch;           /* [max(max_batch * max(D, K), scratch_need)] owned by the model */
    int threads;
    /* Spatial layers (Conv2d: k, stride, pad; pooling: k, stride; GroupNorm: groups). */
    size_t k, stride, pad, groups;
    size_t chunk;             /* Conv2d: examples unfolded at once (im2col of [chunk] fits) */
    size_t scratch_need;      /* floats of scratch the layer needs beyond max_batch * max(D, K) */
    int ghost;                /* Conv2d, position-wise Linear SQNORM: 1 = Gram matrices (~T^2),
                               * 0 = materialized */
    /* Conv2d: the unfolded input of the last forward, kept for backward_params and jvp
     * (NULL = every call unfolds again); owned by the model (dpt_model_unfold_cache). */
    struct dpt_unfold_cache *ucache;
    /* Residual connection (a model-level skip): 0 = none; s + 1 = the model adds act[s] to
     * this layer's output (act[l + 1] = layer(act[l]) + act[s]), and dpt_model_backward adds
     * this output's cotangent to dact[s]. The layer's own ops never see it. */
    size_t residual_from;
    void *state;              /* owned by the layer's attach/detach ops; NULL for most layers */
    /* Conv2d: 1 = weight standardization (spec suffix "ws"): each filter of w is
     * standardized over its fan-in before use (layer_conv.c, docs/nn.md); theta keeps the
     * raw weights, and every parameter gradient is with respect to them. */
    int wstd;
    /* Padding mask (docs/nn.md "Padding masks"). Embedding: has_pad = 1 when token pad_id
     * marks padded positions; its forward writes pad_mask[i T + t] = (id_i,t == pad_id).
     * Attention, meanpool and clspool of such a model read pad_mask (1 = padded) of the last
     * forward from the embedding. NULL = no mask. The buffer [max_batch, T] is the model's. */
    int has_pad;
    size_t pad_id;
    unsigned char *pad_mask;
};

/* ==== Models ==== */

typedef enum {
    DPT_INIT_DEFAULT = 0, /* He for ReLU/GELU nets, Xavier for tanh/sigmoid; biases 0 */
    DPT_INIT_LECUN,       /* N(0, 1/m_{l-1}) */
    DPT_INIT_HE,          /* N(0, 2/m_{l-1}) */
    DPT_INIT_XAVIER,      /* N(0, 2/(m_{l-1} + m_l)) */
    DPT_INIT_NTK,         /* N(0, 2/m_l) for l < L, N(0, 1/o) for the last layer */
    DPT_INIT_EXPLICIT,    /* N(0, beta_l) from a per-layer variance list */
    DPT_INIT_TORCH        /* PyTorch's nn.Linear / nn.Conv2d default: weight and bias
                           * U(-1/sqrt(m_{l-1}), 1/sqrt(m_{l-1})) (weight variance
                           * 1/(3 m_{l-1})); not Gaussian, so it has no beta_l */
} dpt_init_scheme;

/* Longest model spec string a model accepts (and checkpoints store). */
#define DPT_MODEL_SPEC_MAX 255

typedef struct {
    char spec[DPT_MODEL_SPEC_MAX + 1];
    size_t n_layers;
    dpt_layer *layers;
    size_t n_params;   /* P */
    float *theta;      /* [P] all parameters, layer slices in order */
    float *grad;       /* [P] gradient buffer */
    size_t max_batch;
    size_t in_dim, out_dim;
    float **act;       /* act[l]: [max_batch, dim_l]; act[0] input, act[n_layers] output */
    float **dact;      /* dact[l]: cotangent of act[l] (filled by dpt_model_backward) */
    int threads;
    float *tangent[2]; /* [max_batch * max dim_l] each: ping-pong buffers of dpt_model_jvp */
    float **tangent_keep; /* [n_layers + 1]: non-NULL for residual sources (jvp keeps them) */
    float *scratch;    /* [max_batch * max_l max(D_l, K_l)]: the layers' shared scratch */
    /* Padding (an embedding with a pad id, docs/nn.md "Padding masks"): pad_mask [max_batch,
     * pad_T], 1 = padded position, written by the embedding's forward (NULL: no pad id);
     * pad_out = 1 when the output is a sequence of those positions (its padded rows are 0). */
    unsigned char *pad_mask;
    size_t pad_T;
    int pad_out;
} dpt_model;

/* Builds a model from a spec string:
 *   "mlp:784-128-64-32-10:gelu"    Linear layers with the activation between them (none
 *                                  after the last); activations relu|gelu|tanh|sigmoid
 *   "ae:256-300-100-20-100-300-256:relu"  same shape rules (an autoencoder: linear output)
 *   suffix ":nobias" removes biases ("mlp:3072-1024-1:relu:nobias")
 *   "cnn:1x28x28:conv16k8s2p3,relu,maxpool2s1,conv32k4s2,relu,maxpool2s1,fc32,relu,fc10"
 *                                  layers in order on a (C, H, W) input:
 *                                  conv<C>k<k>[s<s>][p<p>][ws][nobias], maxpool<k>[s<s>],
 *                                  avgpool<k>[s<s>], gn<groups>, flatten, fc<K>[nobias],
 *                                  scatter[j<J>][l<L>] (a fixed scattering transform,
 *                                  first item only: docs/nn.md),
 *                                  activations; "[...]" adds the group's input to its
 *                                  output (a residual connection, same shape in and out);
 *                                  ":nobias" at the end removes every bias; see docs/nn.md
 *   "seq:16:emb100x32,ln,plin32,gelu,meanpool,fc2"
 *                                  a sequence model on 16 token ids (stored as floats; "seq:16x8"
 *                                  for 16 positions of 8 floats), the same items plus
 *                                  emb<V>x<D>[nopos][pad<P>], ln, rms, plin<K>[nobias], attn<H>[c],
 *                                  meanpool, clspool, toseq[cls][nopos]
 *                                  on sequences (1, T, D); see docs/nn.md "Sequence layers"
 *   named models: "mnist_cnn" (Opacus MNIST example), "mnist_cnn_tanh" (Tramer & Boneh
 *                                  2021's MNIST CNN: tanh, conv1 padding 2), "cifar_cnn_tanh"
 *                                  (their CIFAR-10 CNN: 6 tanh 3x3 convolutions), "resnet5"
 *                                  (DP-ULR Section 4.3, CIFAR-10); transformers
 *                                  "gpt_tiny[:t<T>][:v<V>][:p<P>]", "bert_tiny[:t<T>][:v<V>][:c<C>][:p<P>]",
 *                                  "vit_mnist[:c<C>]", "vit_cifar[:c<C>]" (docs/nn.md)
 * Allocates every buffer for batches up to max_batch (threads in [0, 1024], 0 = all
 * cores). Unknown or malformed specs are
 * DPT_EINVAL naming the offending part. Parameters start at zero: call dpt_model_init. */
dpt_status dpt_model_new(const char *spec, size_t max_batch, int threads, dpt_model **out);
void dpt_model_free(dpt_model *m); /* accepts NULL */
/* Accessors for callers that would rather not depend on dpt_model's layout (bindings):
 * the spec string (owned by m), P, a view of theta [P] (writable; valid until
 * dpt_model_free), the per-example input and output sizes and max_batch. */
const char *dpt_model_spec(const dpt_model *m);
size_t dpt_model_n_params(const dpt_model *m);
float *dpt_model_params(dpt_model *m);
size_t dpt_model_in_dim(const dpt_model *m);
size_t dpt_model_out_dim(const dpt_model *m);
size_t dpt_model_max_batch(const dpt_model *m);
/* 1 when the model masks padding (its embedding has a pad id, "emb<V>x<D>pad<P>" or the named
 * models' p<P>: docs/nn.md "Padding masks"), then *pad_id (may be NULL) = P; else 0. */
int dpt_model_pad_id(const dpt_model *m, size_t *pad_id);

/* ==== Building a model layer by layer ====
 * A builder assembles the same spec string one layer per call, for callers that would
 * rather not write the spec language: every call sets the layer up on the current output
 * shape exactly as dpt_model_new will, so a layer that does not fit (a kernel or pooling
 * window larger than the input, groups that do not divide the channels, a residual group
 * whose output shape differs from its input, ...) is refused by the call that adds it,
 * with DPT_EINVAL naming the function, the parameter and the layer position; the builder
 * is then unchanged and can be used further. The result is the canonical spec string
 * (dpt_model_builder_spec), which is what dpt_model_new parses, dpt_train_config.model_spec
 * takes and checkpoints store, so a model built here is self-describing like any other:
 *   "mlp:D-K1-...-KL:<act>[:nobias]"  a flat input (1, 1, D) with Linear layers and one
 *                                     activation kind between them (none after the last)
 *   "cnn:CxHxW:<item>,...[:nobias]"   anything else (grammar in docs/nn.md); ":nobias"
 *                                     when no weight layer has a bias, else the items
 *                                     without one carry the suffix "nobias"
 * Memory: the builder is an opaque handle (dpt_model_builder_free); the spec string it
 * returns is owned by the builder. Thread safety: one builder per thread. */
typedef struct dpt_model_builder dpt_model_builder;
/* A builder for inputs of shape (c, h, w); a flat input of D features is (1, 1, D).
 * c, h, w >= 1 and c h w <= 2^24, else DPT_EINVAL. */
dpt_status dpt_model_builder_new(size_t c, size_t h, size_t w, dpt_model_builder **out);
void dpt_model_builder_free(dpt_model_builder *b); /* accepts NULL */
/* Linear layer to out_features outputs (on any input shape: it reads the C*H*W values),
 * with a bias when bias != 0. Output shape (1, 1, out_features). */
dpt_status dpt_model_builder_linear(dpt_model_builder *b, size_t out_features, int bias);
/* Elementwise activation: DPT_LAYER_RELU, _GELU, _TANH, _SIGMOID or _IDENTITY. */
dpt_status dpt_model_builder_activation(dpt_model_builder *b, dpt_layer_kind kind);
/* 2-d convolution to out_channels channels, k x k kernel (k <= 64), stride >= 1, zero
 * padding pad < k on each side; a per-channel bias when bias != 0. Output (out_channels,
 * (H + 2 pad - k) / stride + 1, likewise for W). */
dpt_status dpt_model_builder_conv2d(dpt_model_builder *b, size_t out_channels, size_t k, size_t stride, size_t pad,
                                    int bias);
/* k x k max / average pooling with the given stride (0 = k), no padding; k must not
 * exceed the input's height or width. */
dpt_status dpt_model_builder_maxpool(dpt_model_builder *b, size_t k, size_t stride);
dpt_status dpt_model_builder_avgpool(dpt_model_builder *b, size_t k, size_t stride);
/* GroupNorm over `groups` groups of channels (groups must divide the channel count),
 * per-channel scale and shift. */
dpt_status dpt_model_builder_groupnorm(dpt_model_builder *b, size_t groups);
/* (C, H, W) -> (1, 1, C*H*W); the values are unchanged. */
dpt_status dpt_model_builder_flatten(dpt_model_builder *b);
/* Any one item of the spec grammar (docs/nn.md), e.g. "emb256x64", "ln", "rms", "plin192",
 * "attn4c", "meanpool", "clspool", "toseqcls", "conv16k3p1", "fc10nobias": the layers that
 * have no call of their own. DPT_EINVAL for an item that does not parse (the spec parser's
 * message), brackets (use _residual_begin/_end) or a layer that does not fit the shape. The
 * spec is "seq:T:..." (token ids) or "seq:TxD:..." when the input is (1, T, D) and its first
 * layer other than activations is a sequence layer (not toseq). */
dpt_status dpt_model_builder_item(dpt_model_builder *b, const char *item);
/* A residual group: the layers added between _begin and _end form a block whose input is
 * added to its output. Groups are not nested (DPT_EINVAL at the second _begin); _end
 * refuses an empty group, a group whose output shape differs from its input shape and a
 * group ending with tanh or sigmoid (put the activation after the group). */
dpt_status dpt_model_builder_residual_begin(dpt_model_builder *b);
dpt_status dpt_model_builder_residual_end(dpt_model_builder *b);
/* The current output shape (C, H, W) of the layers added so far (the input shape before
 * the first layer). */
dpt_status dpt_model_builder_shape(const dpt_model_builder *b, size_t shape[3]);
/* The canonical spec of the layers so far, at most DPT_MODEL_SPEC_MAX characters; owned
 * by b, valid until the next call on b. NULL (with an error message) when there are no
 * layers or a residual group is still open. */
const char *dpt_model_builder_spec(const dpt_model_builder *b);
/* dpt_model_new(dpt_model_builder_spec(b), max_batch, threads, out). */
dpt_status dpt_model_builder_build(const dpt_model_builder *b, size_t max_batch, int threads, dpt_model **out);

/* Conv2d unfold cache: each Conv2d layer keeps the im2col of its input from the last
 * forward ([max_batch, C_in k^2, T] floats, T output positions), so backward_params (SUM,
 * WEIGHTED, SQNORM, PER_EXAMPLE) and jvp on the same batch do not unfold it again. The
 * cache is used only when called with the same input pointer and batch size as that
 * forward (the model's act[l]); a caller that writes act[l] in place must run
 * dpt_model_forward_from(m, l, B) before asking for gradients. Layers get a cache in order
 * while the total stays within max_bytes; 0 frees every cache. dpt_model_new sets
 * DPT_UNFOLD_CACHE_DEFAULT. DPT_ENOMEM leaves the model without caches (still correct). */
#define DPT_UNFOLD_CACHE_DEFAULT ((size_t)512 << 20)
dpt_status dpt_model_unfold_cache(dpt_model *m, size_t max_bytes);
/* Bytes the unfold caches of m hold now. */
size_t dpt_model_unfold_cache_bytes(const dpt_model *m);

/* Initializes weights with the scheme (explicit: variances[l] for the l-th weight layer,
 * Linear or Conv2d; fan-in of a convolution is C_in k^2, fan-out C_out); GroupNorm scales
 * start at 1,
 * and biases with N(0, bias_var) (0 = zeros), drawing from `rng` (stream INIT). The torch
 * scheme draws the bias of a weight layer from its own uniform (bias_var must be 0) and
 * leaves the normalization layers' biases at 0, as PyTorch does. */
dpt_status dpt_model_init(dpt_model *m, dpt_init_scheme scheme, const double *variances,
                          size_t n_variances, double bias_var, dpt_rng *rng);
/* Per-layer weight variances beta_l the scheme gives for this model (n_linear entries);
 * DPT_EINVAL for the explicit and torch schemes. */
dpt_status dpt_model_init_variances(const dpt_model *m, dpt_init_scheme scheme, double *beta,
                                    size_t n);
size_t dpt_model_n_linear(const dpt_model *m); /* weight layers: Linear, Conv2d, position-wise Linear */
/* Checks a list of layers to freeze ("conv1,conv2": comma-separated names of layers with
 * parameters, spaces around names ignored; "" = none) against the model: DPT_EINVAL for an
 * unknown name (the message lists the layers with parameters), a layer without parameters,
 * a name given twice, an empty item, or every layer frozen. frozen [n_layers] (may be NULL)
 * receives 1 for the frozen layers; *trained (may be NULL) the parameters that still train.
 * dpt_train_config.freeze takes the same list. */
dpt_status dpt_model_freeze_parse(const dpt_model *m, const char *spec, unsigned char *frozen, size_t *trained);
/* The model's layers as text, one line each after a line of input / output sizes and a
 * header: index, name (the prefix of its tensors' names), kind, output shape (C x H x W),
 * parameters and tensors ("fc1.weight 10x784, fc1.bias 10"), and residual connections.
 * Written like snprintf: at most n bytes into buf (NUL-terminated when n > 0; buf may be
 * NULL with n 0); returns the length of the whole text, so a caller can size buf from a
 * first call. `dptrain model` and Python's Model.summary() print it. */
size_t dpt_model_summary(const dpt_model *m, char *buf, size_t n);

/* act[0] = x [B, in_dim]; runs every layer; the output is act[n_layers] [B, out_dim].
 * B <= max_batch (larger batches are the caller's to chunk). */
dpt_status dpt_model_forward(dpt_model *m, const float *x, size_t B);
/* Runs layers [first, n_layers) starting from act[first], which the caller has filled
 * (DP-ULR restarts from a noisy module output). */
dpt_status dpt_model_forward_from(dpt_model *m, size_t first, size_t B);
/* Runs layers [first, end) only, from a filled act[first]: act[end] holds their output
 * (a frozen trunk's features, computed once). first <= end <= n_layers, else DPT_EINVAL. */
dpt_status dpt_model_forward_range(dpt_model *m, size_t first, size_t end, size_t B);
static inline const float *dpt_model_output(const dpt_model *m) { return m->act[m->n_layers]; }

/* Chain rule from dout [B, out_dim] down to layer 0's output: fills dact[l] for
 * l = 1..n_layers (dact[0], the input cotangent, is not computed). Needs the forward of
 * the same batch. */
dpt_status dpt_model_backward(dpt_model *m, const float *dout, size_t B);
/* The same chain rule stopped early: fills dact[l] for l = max(stop, 1)..n_layers only, so
 * layers below `stop` run no backward pass (a frozen trunk: dact[l + 1] is all that layer
 * l's parameter gradient needs, so stop = the lowest trained layer + 1). dact[l] for
 * l < stop keep whatever they held. stop <= n_layers (DPT_EINVAL otherwise). */
dpt_status dpt_model_backward_to(dpt_model *m, const float *dout, size_t B, size_t stop);
/* Forward-mode tangent of the output: dout [B, out_dim] = (d out/d theta) dtheta +
 * (d out/d x) dx, with dtheta [P] and dx [B, in_dim] (either NULL = 0), at the point of the
 * last forward of this batch (Noisy GD / KL estimation on linearized networks). */
dpt_status dpt_model_jvp(dpt_model *m, const float *dtheta, const float *dx, size_t B,
                         float *dout);
/* Linearized network (Eq. 3 of Ye et al., "Initialization Matters"): out [B, out_dim] =
 * f(theta0, x) + J(theta0, x) (theta - theta0) for the model's current theta, by one forward
 * at theta0 and one Jacobian-vector product (no Jacobian is formed). work [P] is scratch.
 * theta is restored before return; the stored activations are then those at theta0. */
dpt_status dpt_model_linearized_forward(dpt_model *m, const float *theta0, const float *x, size_t B,
                                        float *out, float *work);
/* Parameter gradients from the stored activations and cotangents, for every layer:
 *   SUM:          out[P] (+)= sum_i g_i
 *   PER_EXAMPLE:  out[i*ld + j] (+)= (g_i)_j   (ld >= P)
 *   SQNORM:       out[i] (+)= ||g_i||^2 over all parameters
 *   WEIGHTED:     out[P] (+)= sum_i weights[i] g_i
 *   DOT:          out[i] (+)= <g_i, weights> with weights [P] (a parameter-shaped vector) */
dpt_status dpt_model_param_grad(dpt_model *m, size_t B, dpt_grad_mode mode,
                                const float *weights, float *out, size_t ld, int accumulate);
/* The same from the caller's copies of the stored activations: xs[l] and dvs[l] ([B, D_l]
 * and [B, K_l]) stand for act[l] and dact[l + 1] of every layer l with parameters (the
 * entries of other layers are not read; both arrays have n_layers entries). For callers
 * that keep several chunks' activations (the KL estimator of noisy GD). */
dpt_status dpt_model_param_grad_from(dpt_model *m, const float *const *xs, const float *const *dvs, size_t B,
                                     dpt_grad_mode mode, const float *weights, float *out, size_t ld,
                                     int accumulate);
/* Inner products between per-example gradients, none formed where a layer has a `cross`
 * op: out[i * k + j] = <g_i, h_j> (double) for the B examples of the stored batch (xs/dvs
 * as in dpt_model_param_grad_from, or both NULL for act/dact) and k other examples at the
 * same parameters, given per layer as zxs[l] [k, D_l], zdvs[l] [k, K_l] (their act and
 * dact copies) and, for layers without a cross op, as materialized gradients hz [k, ldz]
 * (ldz >= P; DOT against their slices; hz may be NULL when dpt_model_has_cross). */
/* 1 when every layer with parameters has a cross op (then param_cross needs no hz). */
int dpt_model_has_cross(const dpt_model *m);
dpt_status dpt_model_param_cross(dpt_model *m, const float *const *xs, const float *const *dvs, size_t B, size_t k,
                                 const float *const *zxs, const float *const *zdvs, const float *hz, size_t ldz,
                                 double *out);
/* Per-layer squared norms: out[g * B + i] = ||g_i restricted to parameter layer g||^2,
 * g over layers with parameters in order (for per-layer clipping). */
dpt_status dpt_model_layer_sqnorms(dpt_model *m, size_t B, float *out);
/* Number of layers that have parameters, and the index of the k-th of them (n_layers
 * when k >= dpt_model_n_param_layers). */
size_t dpt_model_n_param_layers(const dpt_model *m);
size_t dpt_model_param_layer(const dpt_model *m, size_t k);

/* Named tensors of theta, in order (one table drives views, sizes and checkpoint names):
 * "fc1.weight" {K, D}, "fc1.bias" {K}, ... (dpt_param_tensor is defined above the layer
 * contract). */
size_t dpt_model_n_tensors(const dpt_model *m);
/* Entry i < dpt_model_n_tensors(m) of the table; DPT_EINVAL (t zeroed) otherwise. */
dpt_status dpt_model_tensor(const dpt_model *m, size_t i, dpt_param_tensor *t);
/* The tensor called `name` ("conv1.weight"): *t (may be NULL) receives its table entry and
 * the return value is a view of its t.size values in m->theta (row-major in t.shape; the
 * caller may read or write them; do not free; valid until dpt_model_free). NULL with
 * DPT_EINVAL listing the model's tensor names when there is no such tensor. */
float *dpt_model_tensor_by_name(dpt_model *m, const char *name, dpt_param_tensor *t);

/* ==== Losses ==== */

typedef enum {
    DPT_LOSS_SOFTMAX_CE = 0, /* -log softmax(o)_y                                      */
    DPT_LOSS_SIGMOID_BCE,    /* sum_k BCE(sigmoid(o_k), [y == k]); K = 1: label in {0,1} */
    DPT_LOSS_SQUARED,        /* 0.5 * ||o - t||^2 with float targets t [B, K]           */
    DPT_LOSS_TOKEN_CE        /* per-token LM loss: (1/T) sum_t -log softmax(o_t)_{y_t} over the
                              * T positions, o [B, T V] (position t's V logits at t V), token
                              * ids y [B, T] as floats (regression targets): dpt_loss_tokens */
} dpt_loss_kind;

/* Per-example losses loss[B] (NULL to skip) and their gradients dout[B, K] = d loss_i /
 * d o_i (NULL to skip; NOT divided by B). labels [B] for CE/BCE, targets [B, K] for
 * squared error. Numerically stable (log-sum-exp). Labels out of range: DPT_EINVAL. */
dpt_status dpt_loss(dpt_loss_kind kind, const float *o, size_t B, size_t K,
                    const int32_t *labels, const float *targets, float *loss, float *dout);
/* Per-token cross-entropy (DPT_LOSS_TOKEN_CE): o [B, T V] logits of V tokens at each of T
 * positions, targets [B, T] token ids stored as floats (the next tokens of a language model:
 * a dataset's regression targets). loss[i] = (1/T) sum_t (logsumexp(o_i,t) - o_i,t,y_t) (NULL to
 * skip), dout[i, t V + v] = (softmax(o_i,t)_v - [v = y_t]) / T (NULL to skip; not divided by
 * B): one example's loss is the mean over its positions, so a clipped per-example gradient is
 * one sequence's. DPT_EINVAL for a target that is not an integer in [0, V) (naming example
 * and position) or T or V 0. dpt_loss(DPT_LOSS_TOKEN_CE, ...) refuses (it has no T). */
dpt_status dpt_loss_tokens(const float *o, size_t B, size_t T, size_t V, const float *targets, float *loss,
                           float *dout);
/* The same with padding: targets equal to pad_id (pad_id < 0: none) are ignored, loss[i] is
 * the mean over example i's other positions (0 when it has none) and dout is 0 at ignored
 * positions, i.e. the padded positions of a model that masks pad_id (dpt_model_pad_id). */
dpt_status dpt_loss_tokens_pad(const float *o, size_t B, size_t T, size_t V, const float *targets, long long pad_id,
                               float *loss, float *dout);
/* Parses "ce" | "bce" | "mse" | "token-ce" (also the long names). */
dpt_status dpt_loss_parse(const char *s, dpt_loss_kind *out);
dpt_status dpt_init_parse(const char *s, dpt_init_scheme *out);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
