"""Layer objects for describing a model without writing a spec string.

    model = [Conv2d(16, 8, stride=2, padding=3), ReLU(), MaxPool2d(2, 1),
             Conv2d(32, 4, stride=2), ReLU(), MaxPool2d(2, 1), Flatten(),
             Linear(32), ReLU(), Linear(10)]

Sequence models the same way (gpt_tiny:t64:v256, a causal LM on 64 token ids):

    model = [Embedding(256, 64), TransformerBlock(64, 4, 256, causal=True),
             TransformerBlock(64, 4, 256, causal=True), LayerNorm(), SeqLinear(256)]

Each object adds itself to the library's model builder (dpt_model_builder_*), which checks
it against the current shape (a kernel larger than the input, groups that do not divide
the channels, ... are refused by the layer that does not fit, with the library's message)
and yields the canonical spec string that checkpoints store. Sizes are output sizes only:
the input size comes from the data (or `input_shape`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from ._lib import check, ffi, lib

__all__ = ["Layer", "Linear", "Conv2d", "MaxPool2d", "AvgPool2d", "GroupNorm", "Flatten", "ReLU", "GELU", "Tanh",
           "Sigmoid", "Identity", "Residual", "build_spec",
           # sequence layers (docs/nn.md "Sequence layers")
           "Embedding", "LayerNorm", "RMSNorm", "SeqLinear", "Attention", "MultiheadSelfAttention", "TransformerMLP",
           "TransformerBlock", "MeanPool", "ClsPool", "ToSequence", "PatchEmbedding"]


def _count(x, name, minimum=1):
    import operator
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError("%s must be an integer, got %r" % (name, x)) from None
    if v < minimum:
        raise ValueError("%s must be >= %d, got %d" % (name, minimum, v))
    return v


class Layer:
    """Base class: `_add(builder)` appends the layer to a dpt_model_builder."""

    def _add(self, b):  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join("%s=%r" % kv for kv in vars(self).items())
        return "%s(%s)" % (type(self).__name__, args)

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)


class Linear(Layer):
    """Fully connected layer to `out_features` outputs (reads all C*H*W input values)."""

    def __init__(self, out_features: int, bias: bool = True) -> None:
        self.out_features = _count(out_features, "Linear.out_features")
        self.bias = bool(bias)

    def _add(self, b):
        check(lib.dpt_model_builder_linear(b, self.out_features, int(self.bias)))


class Conv2d(Layer):
    """k x k convolution to `out_channels` channels, stride, zero padding < k."""

    def __init__(self, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0, bias: bool = True
                 ) -> None:
        self.out_channels = _count(out_channels, "Conv2d.out_channels")
        self.kernel_size = _count(kernel_size, "Conv2d.kernel_size")
        self.stride = _count(stride, "Conv2d.stride")
        self.padding = _count(padding, "Conv2d.padding", 0)
        self.bias = bool(bias)

    def _add(self, b):
        check(lib.dpt_model_builder_conv2d(b, self.out_channels, self.kernel_size, self.stride, self.padding,
                                           int(self.bias)))


class MaxPool2d(Layer):
    """k x k max pooling with the given stride (None = k), no padding."""

    def __init__(self, kernel_size: int, stride: Optional[int] = None) -> None:
        self.kernel_size = _count(kernel_size, "MaxPool2d.kernel_size")
        self.stride = None if stride is None else _count(stride, "MaxPool2d.stride")

    def _add(self, b):
        check(lib.dpt_model_builder_maxpool(b, self.kernel_size, self.stride or 0))


class AvgPool2d(MaxPool2d):
    """k x k average pooling with the given stride (None = k), no padding."""

    def _add(self, b):
        check(lib.dpt_model_builder_avgpool(b, self.kernel_size, self.stride or 0))


class GroupNorm(Layer):
    """GroupNorm over `groups` groups of channels (eps 1e-5), per-channel scale and shift."""

    def __init__(self, groups: int) -> None:
        self.groups = _count(groups, "GroupNorm.groups")

    def _add(self, b):
        check(lib.dpt_model_builder_groupnorm(b, self.groups))


class Flatten(Layer):
    """(C, H, W) -> C*H*W features."""

    def _add(self, b):
        check(lib.dpt_model_builder_flatten(b))


class _Activation(Layer):
    _kind = None

    def _add(self, b):
        check(lib.dpt_model_builder_activation(b, getattr(lib, self._kind)))


class ReLU(_Activation):
    _kind = "DPT_LAYER_RELU"


class GELU(_Activation):
    """GELU, exact (erf) form."""
    _kind = "DPT_LAYER_GELU"


class Tanh(_Activation):
    _kind = "DPT_LAYER_TANH"


class Sigmoid(_Activation):
    _kind = "DPT_LAYER_SIGMOID"


class Identity(_Activation):
    _kind = "DPT_LAYER_IDENTITY"


class Residual(Layer):
    """A block whose input is added to its output: Residual([Conv2d(32, 3, padding=1)]).
    The block must keep the shape; blocks do not nest."""

    def __init__(self, layers: Sequence[Layer]) -> None:
        self.layers = list(layers)
        if not self.layers:
            raise ValueError("Residual: empty block")
        for x in self.layers:
            if not isinstance(x, Layer):
                raise TypeError("Residual: expected layer objects, got %r" % (x,))

    def _add(self, b):
        check(lib.dpt_model_builder_residual_begin(b))
        for x in self.layers:
            x._add(b)
        check(lib.dpt_model_builder_residual_end(b))


# ==== Sequence layers (docs/nn.md "Sequence layers") ====
# A sequence is the shape (1, T, D): T positions of D features; token ids are (1, T, 1). Each
# class adds spec items through dpt_model_builder_item, so a model built from these objects
# is the model of the equivalent spec string, layer for layer (same names, tensors, order).


class _Item(Layer):
    """A layer given by one item of the spec grammar (subclasses set `_item()`)."""

    def _item(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _add(self, b):
        check(lib.dpt_model_builder_item(b, self._item().encode()))


class Embedding(_Item):
    """Token embedding E [V, D] plus a learned position table Pos [T, D] (`positions`), the
    first layer of a token model: ids (1, T, 1) -> (1, T, D), v_t = E[id_t] + Pos[t]
    (spec item emb<V>x<D>[nopos][pad<P>]; tensors embN.weight, embN.position).

    pad_id: the token that pads short sequences (None: no padding). Then every attention
    leaves padded keys out, MeanPool averages over the valid positions, ClsPool and
    per-position outputs give 0 at padded positions, and the token cross-entropy ignores pad
    targets (docs/nn.md "Padding masks"); pad_id must be < num_embeddings."""

    def __init__(self, num_embeddings: int, embedding_dim: int, positions: bool = True,
                 pad_id: Optional[int] = None) -> None:
        self.num_embeddings = _count(num_embeddings, "Embedding.num_embeddings")
        self.embedding_dim = _count(embedding_dim, "Embedding.embedding_dim")
        self.positions = bool(positions)
        self.pad_id = None if pad_id is None else _count(pad_id, "Embedding.pad_id", 0)

    def _item(self) -> str:
        return "emb%dx%d%s%s" % (self.num_embeddings, self.embedding_dim, "" if self.positions else "nopos",
                                 "" if self.pad_id is None else "pad%d" % self.pad_id)


class LayerNorm(_Item):
    """LayerNorm over each position's D features (eps 1e-5; torch's nn.LayerNorm(D)):
    gamma, beta [D] (spec item ln)."""

    def _item(self) -> str:
        return "ln"


class RMSNorm(_Item):
    """RMSNorm over each position's D features, x / sqrt(mean(x^2) + 1e-6) * gamma (spec
    item rms)."""

    def _item(self) -> str:
        return "rms"


class SeqLinear(_Item):
    """The same Linear D -> out_features at every position, (1, T, D) -> (1, T, K) (torch's
    nn.Linear on a [B, T, D] tensor; spec item plin<K>[nobias])."""

    def __init__(self, out_features: int, bias: bool = True) -> None:
        self.out_features = _count(out_features, "SeqLinear.out_features")
        self.bias = bool(bias)

    def _item(self) -> str:
        return "plin%d%s" % (self.out_features, "" if self.bias else "nobias")


class Attention(_Item):
    """The parameter-free multi-head attention core: (1, T, 3D) rows [q, k, v] -> (1, T, D),
    per head softmax(Q K^T / sqrt(D / heads)) V over every key or, with `causal`, the keys
    j <= t (spec item attn<H>[c]). Put SeqLinear(3 D) before it and SeqLinear(D) after it,
    or use MultiheadSelfAttention."""

    def __init__(self, heads: int, causal: bool = False) -> None:
        self.heads = _count(heads, "Attention.heads")
        self.causal = bool(causal)

    def _item(self) -> str:
        return "attn%d%s" % (self.heads, "c" if self.causal else "")


class MultiheadSelfAttention(Layer):
    """torch's nn.MultiheadAttention(dim, heads) on q = k = v = x: SeqLinear(3 dim) (the QKV
    projection, in_proj_weight), Attention(heads, causal), SeqLinear(dim) (out_proj): three
    layers plinN, attnN, plinN+1 (items plin<3D>[nobias],attn<H>[c],plin<D>[nobias])."""

    def __init__(self, dim: int, heads: int, causal: bool = False, bias: bool = True) -> None:
        self.dim = _count(dim, "MultiheadSelfAttention.dim")
        self.heads = _count(heads, "MultiheadSelfAttention.heads")
        self.causal = bool(causal)
        self.bias = bool(bias)

    def _layers(self) -> List[Layer]:
        return [SeqLinear(3 * self.dim, self.bias), Attention(self.heads, self.causal), SeqLinear(self.dim, self.bias)]

    def _add(self, b):
        for x in self._layers():
            x._add(b)


class TransformerMLP(Layer):
    """The transformer's position-wise MLP: SeqLinear(hidden), GELU, SeqLinear(dim)."""

    def __init__(self, dim: int, hidden: int, bias: bool = True) -> None:
        self.dim = _count(dim, "TransformerMLP.dim")
        self.hidden = _count(hidden, "TransformerMLP.hidden")
        self.bias = bool(bias)

    def _add(self, b):
        for x in (SeqLinear(self.hidden, self.bias), GELU(), SeqLinear(self.dim, self.bias)):
            x._add(b)


class TransformerBlock(Layer):
    """A pre-LN transformer block (torch's nn.TransformerEncoderLayer(dim, heads, mlp_dim,
    dropout=0, activation="gelu", batch_first=True, norm_first=True)): two residual groups,

        [ln, plin<3D>, attn<H>[c], plin<D>], [ln, plin<F>, gelu, plin<D>]

    (x + Attn(LN(x)), then x + MLP(LN(x))). It opens residual groups itself, so it cannot be
    put inside a Residual."""

    def __init__(self, dim: int, heads: int, mlp_dim: Optional[int] = None, causal: bool = False) -> None:
        self.dim = _count(dim, "TransformerBlock.dim")
        self.heads = _count(heads, "TransformerBlock.heads")
        self.mlp_dim = 4 * self.dim if mlp_dim is None else _count(mlp_dim, "TransformerBlock.mlp_dim")
        self.causal = bool(causal)

    def _add(self, b):
        Residual([LayerNorm(), MultiheadSelfAttention(self.dim, self.heads, self.causal)])._add(b)
        Residual([LayerNorm(), TransformerMLP(self.dim, self.mlp_dim)])._add(b)


class MeanPool(_Item):
    """Mean over the positions, (1, T, D) -> D features (over the valid positions only when
    the Embedding has a pad_id; spec item meanpool)."""

    def _item(self) -> str:
        return "meanpool"


class ClsPool(_Item):
    """Position 0 (a CLS token), (1, T, D) -> D features (spec item clspool)."""

    def _item(self) -> str:
        return "clspool"


class ToSequence(_Item):
    """(C, H, W) -> the sequence of its H W positions (1, [1 +] H W, C): ViT's patch tokens
    after a stride = kernel convolution, with a learned CLS vector first (`cls`) and a learned
    position table added (`positions`) (spec item toseq[cls][nopos])."""

    def __init__(self, cls: bool = False, positions: bool = True) -> None:
        self.cls = bool(cls)
        self.positions = bool(positions)

    def _item(self) -> str:
        return "toseq%s%s" % ("cls" if self.cls else "", "" if self.positions else "nopos")


class PatchEmbedding(Layer):
    """ViT's patch embedding (Dosovitskiy et al. 2021, Eq. 1): Conv2d(dim, patch,
    stride=patch) (the Linear map of each patch x patch patch, with the convolution's
    per-example gradients), then ToSequence(cls, positions). Not a layer of its own: two
    layers, convN and toseqN (docs/nn.md)."""

    def __init__(self, dim: int, patch: int, cls: bool = True, positions: bool = True) -> None:
        self.dim = _count(dim, "PatchEmbedding.dim")
        self.patch = _count(patch, "PatchEmbedding.patch")
        self.cls = bool(cls)
        self.positions = bool(positions)

    def _add(self, b):
        Conv2d(self.dim, self.patch, stride=self.patch)._add(b)
        ToSequence(self.cls, self.positions)._add(b)


def _input_shape(input_shape):
    """(C, H, W) of an input shape given as (C, H, W), (D,) or an int D (-> (1, 1, D))."""
    import operator
    try:
        shape = (operator.index(input_shape),)
    except TypeError:
        shape = tuple(int(s) for s in input_shape)
    if len(shape) == 1:
        shape = (1, 1) + shape
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError("input_shape must be (D,) or (C, H, W) with positive sizes, got %r" % (input_shape,))
    return shape


def _builder(shape):
    """A dpt_model_builder (garbage-collected) for inputs of shape (C, H, W)."""
    pp = ffi.new("dpt_model_builder **")
    check(lib.dpt_model_builder_new(shape[0], shape[1], shape[2], pp))
    return ffi.gc(pp[0], lib.dpt_model_builder_free)


def _builder_shape(b):
    """The builder's current output shape (C, H, W)."""
    s = ffi.new("size_t[3]")
    check(lib.dpt_model_builder_shape(b, s))
    return (int(s[0]), int(s[1]), int(s[2]))


def _builder_spec(b):
    p = lib.dpt_model_builder_spec(b)
    if p == ffi.NULL:
        from ._lib import make_error
        raise make_error(lib.DPT_EINVAL, "model")
    return ffi.string(p).decode()


def build_spec(layers: Sequence[Layer], input_shape: Union[int, Sequence[int]]) -> str:
    """The canonical spec string of `layers` on inputs of shape (C, H, W) (or (D,)). A model
    that starts with an Embedding reads T token ids per example: input_shape T (or (T,),
    (1, T, 1)); a float sequence of T positions of D features is (1, T, D)."""
    shape = _input_shape(input_shape)
    layers = list(layers)
    if not layers:
        raise ValueError("model: empty layer list")
    if isinstance(layers[0], Embedding) and shape[0] == 1 and shape[1] == 1:
        shape = (1, shape[2], 1)  # token ids: T features per example are the sequence (1, T, 1)
    b = _builder(shape)
    for i, x in enumerate(layers):
        if not isinstance(x, Layer):
            raise TypeError("model[%d]: expected a layer object (dptrain.layers.*), got %r" % (i, x))
        x._add(b)
    return _builder_spec(b)
