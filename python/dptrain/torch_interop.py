"""PyTorch export: a torch.nn.Module equivalent to a dptrain model, whose state dict has
the checkpoint's tensor names ("conv1.weight", "fc1.bias", "gn1.weight", ...), so
`module.load_state_dict(model.state_dict(), strict=True)` works.

The module is built from the C model's own layer table (kind, shapes, kernel, stride,
padding, groups, residual sources), not by re-parsing the spec: Linear -> nn.Linear,
Conv2d -> nn.Conv2d, max/avg pooling -> nn.MaxPool2d / nn.AvgPool2d (no padding), GroupNorm
-> nn.GroupNorm(eps=1e-5), Flatten -> nn.Flatten, activations -> nn.ReLU / nn.GELU (exact
erf form) / nn.Tanh / nn.Sigmoid / nn.Identity. A residual group adds its input to the
output of its last layer, as the C model does (act[l+1] = layer(act[l]) + act[s]). Inputs
may be flat [n, C*H*W] (as dptrain takes them) or [n, C, H, W]; the output is [n, outputs].
Layouts agree: Linear weights are [out, in] and Conv2d weights [out, in, k, k] on both sides.

PyTorch import (dptrain.from_torch, made here by module_to_model): the reverse, for an
nn.Sequential of those modules (nested Sequentials flattened) or a DptrainNet. Each
submodule is checked against what the C layer computes (square kernels, no dilation or
padding in pools, GroupNorm eps 1e-5 and affine, exact GELU, ...) and added through the
library's model builder (the dptrain.layers objects), which checks it against the shape
reaching it; parameters are copied as float32. Errors name the submodule by its PyTorch
path ("features.3 (BatchNorm2d): ...").

DP-SGD on your own PyTorch model (with dptrain.PrivateGradients): per_example_gradients(model,
loss_fn) makes a function (inputs, target) -> {name: [b, *shape]}, each row the gradient of
one example's own loss at the model's current parameters (vmap(grad) of torch.func or
functorch, else one backward pass per example; a BatchNorm in training mode is refused);
set_gradients(model, update) writes the released flat update into the parameters' .grad, so
a torch optimizer steps with it (post-processing). Both use trainable_parameters(model), the
requires_grad parameters in named_parameters() order, as the order of the flat gradient.

Sequence models (docs/nn.md "Sequence layers"): the token + position embedding ->
TokenEmbedding (an nn.Module with `weight` {V, D}, used as nn.Embedding's, and `position`
{T, D}, added; ids may come as floats, as dptrain stores them), the embedding without
positions -> nn.Embedding, LayerNorm -> nn.LayerNorm(D, eps=1e-5), RMSNorm -> RMSNorm
(eps 1e-6), the position-wise Linear -> nn.Linear on [n, T, D], the attention core ->
AttentionCore (softmax(Q K^T / sqrt(dh)) V on the packed [q, k, v] rows), mean / CLS
pooling -> MeanPool / ClsPool, toseq -> ToSeq (`cls` {D}, `position` {T, D}). from_torch
also takes, in an nn.Sequential: nn.TransformerEncoderLayer (norm_first=True, batch_first=True,
GELU or ReLU, dropout 0 or eval mode; bidirectional) -> its two residual groups
[ln,plin<3D>,attn<H>,plin<D>],[ln,plin<F>,gelu,plin<D>], EncoderLayer(layer, causal=True)
for the same with a causal mask, and SelfAttention(mha, causal=...) around an
nn.MultiheadAttention (batch_first=True, kdim = vdim = embed_dim, no bias_k/bias_v, no
zero attention) -> plin<3D>,attn<H>[c],plin<D>: in_proj_weight {3D, D} (q, k, v rows in that
order) is plin<3D>'s weight exactly, out_proj plin<D>'s. For token inputs give
input_shape=(T,) with an embedding first; for float sequences input_shape=(T, D).
Padding masks (key_padding_mask) are refused: dptrain's attention has none.

This module does not import dptrain.model (which imports it for Model.to_torch and
Model.from_torch): module_to_model is given the class to build.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union
from numpy.typing import ArrayLike

import numpy as np

from ._lib import check, ffi, lib
from .errors import DptrainError, InvalidArgumentError, UnsupportedError
from . import layers as _L

__all__ = ["to_torch", "state_dict", "module_to_model", "DptrainNet", "per_example_gradients", "set_gradients",
           "trainable_parameters",
           "parameter_layers", "TokenEmbedding", "RMSNorm", "AttentionCore", "SelfAttention", "EncoderLayer",
           "MeanPool", "ClsPool", "ToSeq"]

_SEQ_KINDS = ("DPT_LAYER_EMBEDDING", "DPT_LAYER_LAYERNORM", "DPT_LAYER_RMSNORM", "DPT_LAYER_SEQLINEAR",
              "DPT_LAYER_ATTENTION", "DPT_LAYER_MEANPOOL", "DPT_LAYER_CLSPOOL")


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("dptrain.to_torch, from_torch, per_example_gradients and set_gradients need PyTorch "
                          "(Debian: apt-get install python3-torch)") from e
    return torch


def _make_seq_classes():
    """The PyTorch modules of dptrain's sequence layers (created on first use: imports torch)."""
    torch = _torch()
    nn = torch.nn
    F = nn.functional

    def causal_mask(T, device):  # True = not allowed: key j > query t
        return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), 1)

    class TokenEmbedding(nn.Module):
        """emb<V>x<D>: token ids [n, T] (or [n, T, 1]; integers, or floats holding integers, as
        dptrain stores them) -> weight[id_t] + position[t], [n, T, D]. weight is nn.Embedding's
        table {V, D}; position {T, D} a learned table added at every position (GPT-2's wpe as
        a parameter). Both start N(0, 1), like dptrain's."""

        def __init__(self, num_embeddings: int, embedding_dim: int, positions: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))
            self.position = nn.Parameter(torch.randn(positions, embedding_dim))

        def forward(self, x: Any) -> Any:
            ids = x.reshape(x.shape[0], -1)
            if ids.is_floating_point():
                if not bool(torch.all(ids == ids.round())):
                    raise ValueError("TokenEmbedding: token ids must be integers")
                ids = ids.long()
            return F.embedding(ids, self.weight) + self.position

    class RMSNorm(nn.Module):
        """rms: x / sqrt(mean(x^2) + eps) * weight over the last axis (eps 1e-6, dptrain's)."""

        def __init__(self, dim: int, eps: float = 1e-6) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))
            self.eps = eps

        def forward(self, x: Any) -> Any:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    class AttentionCore(nn.Module):
        """attn<H>[c]: [n, T, 3D] rows [q, k, v] (nn.MultiheadAttention's in_proj order) ->
        per head softmax(Q K^T / sqrt(dh) (+ causal mask)) V, [n, T, D]; no parameters."""

        def __init__(self, num_heads: int, causal: bool = False) -> None:
            super().__init__()
            self.num_heads = int(num_heads)
            self.causal = bool(causal)

        def forward(self, x: Any) -> Any:
            n, T, D3 = x.shape
            D, H = D3 // 3, self.num_heads
            q, k, v = (t.reshape(n, T, H, D // H).transpose(1, 2) for t in x.split(D, -1))
            s = q @ k.transpose(-1, -2) / math.sqrt(D // H)
            if self.causal:
                s = s.masked_fill(causal_mask(T, x.device), float("-inf"))
            return (s.softmax(-1) @ v).transpose(1, 2).reshape(n, T, D)

        def extra_repr(self) -> str:
            return "num_heads=%d, causal=%s" % (self.num_heads, self.causal)

    class SelfAttention(nn.Module):
        """mha(x, x, x) of an nn.MultiheadAttention (batch_first=True), with a causal mask
        when causal: the self-attention an nn.Sequential can hold (from_torch maps it to
        plin<3D>,attn<H>[c],plin<D>). No key_padding_mask: dptrain's attention has none."""

        def __init__(self, mha: Any, causal: bool = False) -> None:
            super().__init__()
            self.mha = mha
            self.causal = bool(causal)

        def forward(self, x: Any, key_padding_mask: Any = None) -> Any:
            if key_padding_mask is not None:
                raise _unsupported("SelfAttention", "key_padding_mask is not supported (dptrain's attention has "
                                   "no padding mask: every position counts)")
            mask = causal_mask(x.shape[1], x.device) if self.causal else None
            return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]

    class EncoderLayer(nn.Module):
        """layer(x, src_mask=causal mask) of an nn.TransformerEncoderLayer: a causal (GPT-style)
        pre-LN block an nn.Sequential can hold; causal=False is the layer itself."""

        def __init__(self, layer: Any, causal: bool = True) -> None:
            super().__init__()
            self.layer = layer
            self.causal = bool(causal)

        def forward(self, x: Any) -> Any:
            return self.layer(x, src_mask=causal_mask(x.shape[1], x.device) if self.causal else None)

    class MeanPool(nn.Module):
        """meanpool: [n, T, D] -> the mean over positions [n, D]."""

        def forward(self, x: Any) -> Any:
            return x.mean(1)

    class ClsPool(nn.Module):
        """clspool: [n, T, D] -> position 0 [n, D]."""

        def forward(self, x: Any) -> Any:
            return x[:, 0]

    class ToSeq(nn.Module):
        """toseq[cls][nopos]: [n, C, H, W] -> [n, (1 +) H W, C]: the H W positions, a learned
        `cls` vector {C} first (cls=True), a learned `position` table {T, C} added (positions=True):
        ViT's patch tokens after a stride = kernel nn.Conv2d."""

        def __init__(self, channels: int, patches: int, cls: bool = True, positions: bool = True) -> None:
            super().__init__()
            T = patches + (1 if cls else 0)
            self.cls = nn.Parameter(torch.randn(channels)) if cls else None
            self.position = nn.Parameter(torch.randn(T, channels)) if positions else None

        def forward(self, x: Any) -> Any:
            h = x.flatten(2).transpose(1, 2)
            if self.cls is not None:
                h = torch.cat([self.cls.expand(h.shape[0], 1, -1), h], 1)
            return h + self.position if self.position is not None else h

    return dict(TokenEmbedding=TokenEmbedding, RMSNorm=RMSNorm, AttentionCore=AttentionCore,
                SelfAttention=SelfAttention, EncoderLayer=EncoderLayer, MeanPool=MeanPool, ClsPool=ClsPool,
                ToSeq=ToSeq)


_SEQ = None


def _seq(name=None):
    global _SEQ
    if _SEQ is None:
        _SEQ = _make_seq_classes()
    return _SEQ if name is None else _SEQ[name]


def _modules(nn, info):
    k = info["kind"]
    C_in, H, W = info["in_shape"]
    S = _seq()
    if k == lib.DPT_LAYER_EMBEDDING:
        V, D = info["k"], info["out_shape"][2]
        return S["TokenEmbedding"](V, D, H) if info["has_bias"] else nn.Embedding(V, D)
    if k == lib.DPT_LAYER_LAYERNORM:
        return nn.LayerNorm(W, eps=1e-5)
    if k == lib.DPT_LAYER_RMSNORM:
        return S["RMSNorm"](W)
    if k == lib.DPT_LAYER_SEQLINEAR:
        return nn.Linear(W, info["out_shape"][2], bias=info["has_bias"])
    if k == lib.DPT_LAYER_ATTENTION:
        return S["AttentionCore"](info["groups"], causal=bool(info["k"]))
    if k == lib.DPT_LAYER_MEANPOOL:
        return S["MeanPool"]()
    if k == lib.DPT_LAYER_CLSPOOL:
        return S["ClsPool"]()
    if k == lib.DPT_LAYER_TOSEQ:
        return S["ToSeq"](C_in, H * W, cls=bool(info["k"]), positions=info["has_bias"])
    if k == lib.DPT_LAYER_LINEAR:
        return nn.Linear(C_in * H * W, int(np.prod(info["out_shape"])), bias=info["has_bias"])
    if k == lib.DPT_LAYER_CONV2D:
        return nn.Conv2d(C_in, info["out_shape"][0], info["k"], stride=info["stride"], padding=info["pad"],
                         bias=info["has_bias"])
    if k == lib.DPT_LAYER_MAXPOOL:
        return nn.MaxPool2d(info["k"], stride=info["stride"])
    if k == lib.DPT_LAYER_AVGPOOL:
        return nn.AvgPool2d(info["k"], stride=info["stride"])
    if k == lib.DPT_LAYER_GROUPNORM:
        return nn.GroupNorm(info["groups"], C_in, eps=1e-5, affine=True)
    if k == lib.DPT_LAYER_FLATTEN:
        return nn.Flatten()
    acts = {lib.DPT_LAYER_RELU: nn.ReLU, lib.DPT_LAYER_GELU: nn.GELU, lib.DPT_LAYER_TANH: nn.Tanh,
            lib.DPT_LAYER_SIGMOID: nn.Sigmoid, lib.DPT_LAYER_IDENTITY: nn.Identity}
    if k in acts:
        return acts[k]()
    raise NotImplementedError("to_torch: layer %s of kind %d has no PyTorch equivalent here" % (info["name"], k))


def _make_class():
    torch = _torch()
    nn = torch.nn

    class DptrainNet(nn.Module):
        """A dptrain model as a PyTorch module (see dptrain.torch_interop)."""

        def __init__(self, layers: Any, input_shape: Sequence[int], spec: str = "") -> None:
            super().__init__()
            self.spec = spec
            self.input_shape = tuple(input_shape)
            self._plan = []     # (name, flatten input first, residual source index or -1)
            self._keep = set()  # activation indices used as residual sources
            acts = (lib.DPT_LAYER_RELU, lib.DPT_LAYER_GELU, lib.DPT_LAYER_TANH, lib.DPT_LAYER_SIGMOID,
                    lib.DPT_LAYER_IDENTITY)
            first = next((info["kind"] for info in layers if info["kind"] not in acts), None)
            # a sequence layer reads the input: [n, T, D] (token ids [n, T, 1]), not [n, C, H, W]
            self._seq_input = first in tuple(getattr(lib, k) for k in _SEQ_KINDS)
            self._ids = first == lib.DPT_LAYER_EMBEDDING  # token ids [n, T], as floats or integers
            for i, info in enumerate(layers):
                self.add_module(info["name"], _modules(nn, info))
                flat = info["kind"] == lib.DPT_LAYER_LINEAR
                src = info["residual_from"] - 1 if info["residual_from"] else -1
                if src >= 0:
                    self._keep.add(src)
                self._plan.append((info["name"], flat, src))

        def forward(self, x: Any) -> Any:
            C, H, W = self.input_shape
            if self._ids:
                x = x.reshape(x.shape[0], H)
                if x.is_floating_point():  # dptrain's ids are floats; nn.Embedding takes integers
                    if not bool(torch.all(x == x.round())):
                        raise ValueError("DptrainNet: token ids must be integers")
                    x = x.long()
            elif self._seq_input and x.dim() == 2:
                x = x.reshape(x.shape[0], H, W)
            elif (C, H) != (1, 1) and x.dim() == 2 and not self._seq_input:
                x = x.reshape(x.shape[0], C, H, W)
            kept = {}
            for i, (name, flat, src) in enumerate(self._plan):
                if i in self._keep:
                    kept[i] = x
                if flat and x.dim() > 2:
                    x = x.flatten(1)
                y = getattr(self, name)(x)
                if src >= 0:
                    y = y + kept[src]
                x = y
            return x.flatten(1) if x.dim() > 2 else x

    return DptrainNet


_CLASS = None


def _net_class():
    global _CLASS
    if _CLASS is None:
        _CLASS = _make_class()
    return _CLASS


def state_dict(model: Any) -> Dict[str, Any]:
    """{name: torch.Tensor} (float32 copies) of a dptrain.Model's parameters."""
    torch = _torch()
    return {k: torch.from_numpy(v) for k, v in model.parameters().items()}


def to_torch(model: Any) -> Any:
    """A torch.nn.Module equivalent to `model` (eval mode) with its parameters loaded strictly."""
    Net = _net_class()
    net = Net(model.layers(), model.input_shape, model.spec)
    net.load_state_dict(state_dict(model), strict=True)
    return net.eval()


# ==== PyTorch import ====

SUPPORTED = ("nn.Sequential (nested ones are flattened), nn.Linear, nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d, "
             "nn.GroupNorm, nn.Flatten, nn.ReLU, nn.GELU, nn.Tanh, nn.Sigmoid, nn.Identity, nn.Embedding, "
             "nn.LayerNorm, nn.TransformerEncoderLayer, dptrain.torch_interop's TokenEmbedding, RMSNorm, "
             "SelfAttention (around nn.MultiheadAttention), EncoderLayer, AttentionCore, MeanPool, ClsPool, ToSeq, "
             "and the DptrainNet that to_torch() makes")


def _unsupported(where, what):
    return UnsupportedError("%s: %s" % (where, what), int(lib.DPT_ENOTSUP),
                            ffi.string(lib.dpt_status_name(lib.DPT_ENOTSUP)).decode())


def _invalid(where, what):
    return InvalidArgumentError("%s: %s" % (where, what), int(lib.DPT_EINVAL),
                                ffi.string(lib.dpt_status_name(lib.DPT_EINVAL)).decode())


def _square(where, name, v, what="dptrain's windows are square"):
    """An int from an int or a tuple of equal ints (PyTorch's (kH, kW) style arguments)."""
    if isinstance(v, (tuple, list)):
        if len(v) == 0 or any(x != v[0] for x in v):
            raise _unsupported(where, "%s %s is not supported (%s)" % (name, tuple(v), what))
        v = v[0]
    return int(v)


def _leaves(nn, module, path):
    """[(path, module)] of the modules an nn.Sequential applies in order, nested
    Sequentials flattened (paths as in module.named_modules(): "features.3")."""
    out = []
    for name, child in module.named_children():
        p = "%s.%s" % (path, name) if path else name
        if isinstance(child, nn.Sequential) and type(child).forward is nn.Sequential.forward:
            out.extend(_leaves(nn, child, p))
        else:
            out.append((p, child))
    return out


class _Item(_L.Layer):
    """One spec item ("plin64", "attn4c", ...) added by dpt_model_builder_item."""

    def __init__(self, text):
        self.text = text

    def _add(self, b):
        check(lib.dpt_model_builder_item(b, self.text.encode()))


def _own(mod, *attrs):
    """{C tensor suffix: torch parameter} for a module whose parameters have the C names."""
    return {a: getattr(mod, a, None) for a in attrs}


def _check_eval_dropout(where, mod, ps):
    if mod.training and any(p > 0 for p in ps):
        raise _unsupported(where, "dropout %g in training mode is not supported (dptrain has no dropout): build it "
                           "with dropout=0.0 or call .eval()" % max(ps))


def _mha_entries(nn, where, mha, D, causal):
    """plin<3D>,attn<H>[c],plin<D> of an nn.MultiheadAttention used as self-attention."""
    if not mha.batch_first:
        raise _unsupported(where, "batch_first=False is not supported (dptrain's sequences are [n, T, D]: build it "
                           "with batch_first=True)")
    if mha.embed_dim != D:
        raise _invalid(where, "embed_dim %d does not match the %d features reaching it" % (mha.embed_dim, D))
    if not mha._qkv_same_embed_dim:
        raise _unsupported(where, "kdim %s / vdim %s differ from embed_dim %d (dptrain's attention projects one "
                           "input: kdim = vdim = embed_dim)" % (mha.kdim, mha.vdim, mha.embed_dim))
    if mha.bias_k is not None or mha.bias_v is not None:
        raise _unsupported(where, "add_bias_kv=True is not supported")
    if mha.add_zero_attn:
        raise _unsupported(where, "add_zero_attn=True is not supported")
    _check_eval_dropout(where, mha, [mha.dropout])
    qkv = "plin%d%s" % (3 * D, "" if mha.in_proj_bias is not None else "nobias")
    out = "plin%d%s" % (D, "" if mha.out_proj.bias is not None else "nobias")
    return [(_Item(qkv), {"weight": mha.in_proj_weight, "bias": mha.in_proj_bias}, None),
            (_Item("attn%d%s" % (mha.num_heads, "c" if causal else "")), {}, None),
            (_Item(out), _own(mha.out_proj, "weight", "bias"), None)]


def _block_entries(nn, where, layer, D, causal):
    """[ln,plin<3D>,attn<H>[c],plin<D>],[ln,plin<F>,act,plin<D>] of a pre-LN
    nn.TransformerEncoderLayer."""
    if not layer.norm_first:
        raise _unsupported(where, "norm_first=False (post-LN) is not supported (dptrain's blocks are pre-LN: "
                           "build it with norm_first=True)")
    act = layer.activation
    F = nn.functional
    if act is F.gelu or (isinstance(act, nn.GELU) and getattr(act, "approximate", "none") == "none"):
        act_item = "gelu"
    elif act is F.relu or isinstance(act, nn.ReLU):
        act_item = "relu"
    else:
        raise _unsupported(where, "activation %r is not supported (dptrain's blocks take exact GELU or ReLU)" % (act,))
    for name in ("norm1", "norm2"):
        n = getattr(layer, name)
        if tuple(n.normalized_shape) != (D,) or n.eps != 1e-5 or not n.elementwise_affine or n.bias is None:
            raise _unsupported(where, "%s: only LayerNorm(%d, eps=1e-5) with weight and bias is supported" % (name, D))
    _check_eval_dropout(where, layer, [layer.dropout.p, layer.dropout1.p, layer.dropout2.p])
    F_w = layer.linear1.out_features
    e = [(_Item("ln"), _own(layer.norm1, "weight", "bias"), "begin")]
    e += _mha_entries(nn, where + ".self_attn", layer.self_attn, D, causal)
    e[-1] = e[-1][:2] + ("end",)
    e += [(_Item("ln"), _own(layer.norm2, "weight", "bias"), "begin"),
          (_Item("plin%d%s" % (F_w, "" if layer.linear1.bias is not None else "nobias")),
           _own(layer.linear1, "weight", "bias"), None),
          (_Item(act_item), {}, None),
          (_Item("plin%d%s" % (D, "" if layer.linear2.bias is not None else "nobias")),
           _own(layer.linear2, "weight", "bias"), "end")]
    return e


def _layer(nn, where, mod, shape, form, native_fc):
    """The entries equivalent to `mod` on an input of shape (C, H, W), and the form of the
    PyTorch tensor after it. An entry is (dptrain.layers object, {C tensor suffix ("weight",
    "bias", "position", "cls"): torch parameter}, residual mark None | "begin" | "end"), one
    per C layer. `form`: the PyTorch tensor reaching it is "flat" [n, D], "image"
    [n, C, H, W], "seq" [n, T, D] or "ids" (token ids [n, T]). native_fc: None outside a
    DptrainNet; inside one, whether this leaf is the C model's Linear (the net flattens
    before it) rather than a position-wise Linear."""
    C, H, W = shape
    t = type(mod)
    S = _seq()
    native = native_fc is not None

    def one(layer, params=None, new_form=None):
        return [(layer, params or {}, None)], form if new_form is None else new_form

    def image_input():
        if form != "image" and not native:
            raise _unsupported(where, "needs an image input [n, C, H, W] but receives %s (give input_shape=(C, H, W), "
                               "and no nn.Flatten before it)" % (
                                   "flat features [n, %d]" % (C * H * W) if form == "flat" else
                                   "a sequence [n, %d, %d]" % (H, W)))

    def seq_input(what="a sequence [n, T, D]"):
        if form not in ("seq", "flat") and not native:
            raise _unsupported(where, "needs %s but receives %s" % (what, {
                "image": "an image [n, %d, %d, %d]" % shape, "ids": "token ids (put an embedding first)"}[form]))

    if t is nn.Linear:
        if native_fc is False or (not native and form == "seq"):  # position-wise: the last axis
            if mod.in_features != W:
                raise _invalid(where, "in_features %d does not match the %d features at each of the %d positions "
                               "reaching it" % (mod.in_features, W, H))
            return one(_Item("plin%d%s" % (mod.out_features, "" if mod.bias is not None else "nobias")),
                       _own(mod, "weight", "bias"))
        if form == "ids":
            raise _unsupported(where, "receives token ids: put an embedding (nn.Embedding, TokenEmbedding) first")
        if not native and form == "image" and (C, H) != (1, 1):
            raise _unsupported(where, "on a %dx%dx%d input nn.Linear acts on the last axis only, dptrain's Linear "
                               "on all C*H*W values: put nn.Flatten() before it" % shape)
        if mod.in_features != C * H * W:
            raise _invalid(where, "in_features %d does not match the %d values%s reaching it" % (
                mod.in_features, C * H * W, "" if (C, H) == (1, 1) else " (%dx%dx%d)" % shape))
        return one(_L.Linear(mod.out_features, bias=mod.bias is not None), _own(mod, "weight", "bias"),
                   "flat" if form == "seq" else form)
    if t is nn.Conv2d:
        image_input()
        if mod.in_channels != C:
            raise _invalid(where, "in_channels %d does not match the %d channels (%dx%dx%d input) reaching it"
                           % (mod.in_channels, C, C, H, W))
        k = _square(where, "kernel_size", mod.kernel_size, "dptrain's kernels are square")
        stride = _square(where, "stride", mod.stride, "dptrain's strides are equal in both directions")
        dilation = _square(where, "dilation", mod.dilation, "dptrain's convolutions have dilation 1")
        if dilation != 1:
            raise _unsupported(where, "dilation %d is not supported (dptrain's convolutions have dilation 1)"
                               % dilation)
        if mod.groups != 1:
            raise _unsupported(where, "groups %d is not supported (dptrain's convolutions have groups 1)" % mod.groups)
        if mod.padding_mode != "zeros":
            raise _unsupported(where, "padding_mode %r is not supported (dptrain pads with zeros)" % mod.padding_mode)
        pad = mod.padding
        if pad == "valid":
            pad = 0
        elif pad == "same":  # stride 1 (PyTorch's rule); symmetric only for odd k
            if k % 2 == 0:
                raise _unsupported(where, "padding 'same' with the even kernel_size %d pads unevenly, which "
                                   "dptrain does not support" % k)
            pad = (k - 1) // 2
        else:
            pad = _square(where, "padding", pad, "dptrain pads equally on every side")
        return one(_L.Conv2d(mod.out_channels, k, stride=stride, padding=pad, bias=mod.bias is not None),
                   _own(mod, "weight", "bias"))
    if t in (nn.MaxPool2d, nn.AvgPool2d):
        image_input()
        k = _square(where, "kernel_size", mod.kernel_size)
        stride = _square(where, "stride", mod.stride if mod.stride is not None and mod.stride != [] else k)
        pad = _square(where, "padding", mod.padding, "dptrain's pooling has no padding")
        if pad != 0:
            raise _unsupported(where, "padding %d is not supported (dptrain's pooling has no padding)" % pad)
        if mod.ceil_mode:
            raise _unsupported(where, "ceil_mode=True is not supported (dptrain rounds the output size down)")
        if t is nn.MaxPool2d:
            dilation = _square(where, "dilation", mod.dilation, "dptrain's pooling has dilation 1")
            if dilation != 1:
                raise _unsupported(where, "dilation %d is not supported (dptrain's pooling has dilation 1)" % dilation)
            if mod.return_indices:
                raise _unsupported(where, "return_indices=True is not supported")
            return one(_L.MaxPool2d(k, stride))
        if mod.divisor_override is not None:
            raise _unsupported(where, "divisor_override %r is not supported (dptrain divides by k*k)"
                               % (mod.divisor_override,))
        return one(_L.AvgPool2d(k, stride))
    if t is nn.GroupNorm:
        image_input()
        if mod.num_channels != C:
            raise _invalid(where, "num_channels %d does not match the %d channels (%dx%dx%d input) reaching it"
                           % (mod.num_channels, C, C, H, W))
        if mod.eps != 1e-5:
            raise _unsupported(where, "eps %g is not supported (dptrain's GroupNorm uses eps 1e-5)" % mod.eps)
        if not mod.affine:
            raise _unsupported(where, "affine=False is not supported (dptrain's GroupNorm has a per-channel "
                               "scale and shift)")
        return one(_L.GroupNorm(mod.num_groups), _own(mod, "weight", "bias"))
    if t is nn.Flatten:
        if (mod.start_dim, mod.end_dim) != (1, -1):
            raise _unsupported(where, "start_dim %d, end_dim %d is not supported (only nn.Flatten(1, -1), which "
                               "flattens each example)" % (mod.start_dim, mod.end_dim))
        return one(_L.Flatten(), None, "flat")
    if t is nn.GELU:
        if getattr(mod, "approximate", "none") != "none":
            raise _unsupported(where, "approximate=%r is not supported (dptrain's GELU is the exact erf form: use "
                               "nn.GELU())" % mod.approximate)
        return one(_L.GELU())
    acts = {nn.ReLU: _L.ReLU, nn.Tanh: _L.Tanh, nn.Sigmoid: _L.Sigmoid, nn.Identity: _L.Identity}
    if t in acts:
        return one(acts[t]())
    # ---- sequence modules
    if t is nn.Embedding or t is S["TokenEmbedding"]:
        if form != "ids" and not native:
            raise _unsupported(where, "an embedding needs token ids as the model input: put it first and give "
                               "input_shape=(T,) (T token ids per example)")
        V, D = mod.weight.shape
        if t is nn.Embedding:
            if mod.padding_idx is not None:
                raise _unsupported(where, "padding_idx %d is not supported (dptrain trains every row of the table "
                                   "and has no padding mask)" % mod.padding_idx)
            if mod.max_norm is not None:
                raise _unsupported(where, "max_norm %g is not supported (it rescales rows in the forward)"
                                   % mod.max_norm)
            if mod.scale_grad_by_freq:
                raise _unsupported(where, "scale_grad_by_freq=True is not supported")
            return one(_Item("emb%dx%dnopos" % (V, D)), _own(mod, "weight"), "seq")
        if mod.position.shape[0] != H:
            raise _invalid(where, "position has %d rows but %d token ids reach it" % (mod.position.shape[0], H))
        return one(_Item("emb%dx%d" % (V, D)), _own(mod, "weight", "position"), "seq")
    if t is nn.LayerNorm:
        seq_input()
        if tuple(mod.normalized_shape) != (W,):
            raise _unsupported(where, "normalized_shape %s is not supported (dptrain normalizes the %d features of "
                               "each position: (%d,))" % (tuple(mod.normalized_shape), W, W))
        if mod.eps != 1e-5:
            raise _unsupported(where, "eps %g is not supported (dptrain's LayerNorm uses eps 1e-5)" % mod.eps)
        if not mod.elementwise_affine or getattr(mod, "bias", 0) is None:
            raise _unsupported(where, "a LayerNorm without weight and bias is not supported")
        return one(_Item("ln"), _own(mod, "weight", "bias"))
    if t is S["RMSNorm"] or t is getattr(nn, "RMSNorm", None):  # torch >= 2.4 has nn.RMSNorm
        seq_input()
        if getattr(mod, "weight", None) is None or tuple(mod.weight.shape) != (W,):
            raise _unsupported(where, "only an RMSNorm with a weight of the %d features of each position is "
                               "supported" % W)
        if mod.eps != 1e-6:
            raise _unsupported(where, "eps %r is not supported (dptrain's RMSNorm uses eps 1e-6: pass eps=1e-6)"
                               % (mod.eps,))
        return one(_Item("rms"), _own(mod, "weight"))
    if t is nn.MultiheadAttention:
        raise _unsupported(where, "nn.MultiheadAttention takes (query, key, value) and returns a tuple, so an "
                           "nn.Sequential cannot call it: wrap it as dptrain.torch_interop.SelfAttention(mha, "
                           "causal=...)")
    if t is S["SelfAttention"]:
        seq_input()
        return _mha_entries(nn, where, mod.mha, W, mod.causal), form
    if t is nn.TransformerEncoderLayer or t is S["EncoderLayer"]:
        seq_input()
        layer, causal = (mod, False) if t is nn.TransformerEncoderLayer else (mod.layer, mod.causal)
        if type(layer) is not nn.TransformerEncoderLayer:
            raise _unsupported(where, "EncoderLayer must wrap an nn.TransformerEncoderLayer, got %s"
                               % type(layer).__name__)
        if not layer.self_attn.batch_first:
            raise _unsupported(where, "batch_first=False is not supported (dptrain's sequences are [n, T, D]: build "
                               "it with batch_first=True)")
        return _block_entries(nn, where, layer, W, causal), form
    if t is S["AttentionCore"]:
        seq_input()
        return one(_Item("attn%d%s" % (mod.num_heads, "c" if mod.causal else "")))
    if t in (S["MeanPool"], S["ClsPool"]):
        seq_input()
        return one(_Item("meanpool" if t is S["MeanPool"] else "clspool"), None, "flat")
    if t is S["ToSeq"]:
        image_input()
        cls, pos = mod.cls is not None, mod.position is not None
        if pos and mod.position.shape != (H * W + cls, C):
            raise _invalid(where, "position has shape %s, the %dx%dx%d input needs (%d, %d)"
                           % (tuple(mod.position.shape), C, H, W, H * W + cls, C))
        if cls and mod.cls.shape != (C,):
            raise _invalid(where, "cls has shape %s, the %d channels need (%d,)" % (tuple(mod.cls.shape), C, C))
        return one(_Item("toseq%s%s" % ("cls" if cls else "", "" if pos else "nopos")), _own(mod, "cls", "position"),
                   "seq")
    if t is _net_class():
        raise _unsupported(where, "a DptrainNet is only converted as the whole module, not inside another one")
    raise _unsupported(where, "not supported by dptrain; supported: %s" % SUPPORTED)


def _params(torch, where, sources, names):
    """{checkpoint tensor name: float32 ndarray} for the C layer's tensors `names`
    ({"weight": "fc1.weight", ...}) from `sources` ({"weight": torch parameter, ...})."""
    out = {}
    for attr, cname in names.items():
        p = sources.get(attr)
        if p is None:
            raise _invalid(where, "has no %s, which dptrain's layer has" % attr)
        a = p.detach().to(device="cpu", dtype=torch.float32).numpy().copy()
        if not np.all(np.isfinite(a)):
            raise _invalid(where, "%s has NaN or infinite values" % attr)
        out[cname] = a
    return out


def module_to_model(model_cls: Any, module: Any, input_shape: Optional[Sequence[int]] = None, threads: int = 0) -> Any:
    """dptrain.from_torch and Model.from_torch (documented there): the `model_cls`
    (dptrain.Model, or a subclass) equivalent to the PyTorch `module`."""
    torch = _torch()
    nn = torch.nn
    if not isinstance(module, nn.Module):
        raise TypeError("from_torch: module must be a torch.nn.Module, got %s" % type(module).__name__)
    Net = _net_class()
    S = _seq()
    native = isinstance(module, Net)
    groups = {}  # index of a residual group's first leaf -> index of its last
    if native:
        leaves = [(name, getattr(module, name)) for name, _, _ in module._plan]
        fcs = [fc for _, fc, _ in module._plan]
        if input_shape is None:
            input_shape = module.input_shape
        ends = sorted((src, i) for i, (_, _, src) in enumerate(module._plan) if src >= 0)
        last = -1
        for s, e in ends:
            if s > e or s <= last:
                raise _unsupported("module (DptrainNet)", "residual groups %s overlap or are nested" % ends)
            groups[s], last = e, e
        form = "image"
        if module._seq_input:
            form = "ids" if module.input_shape[2] == 1 and any(
                isinstance(mod, (nn.Embedding, S["TokenEmbedding"])) for _, mod in leaves[:1]) else "seq"
    elif isinstance(module, nn.Sequential) and type(module).forward is nn.Sequential.forward:
        leaves = _leaves(nn, module, "")
        fcs = [None] * len(leaves)
        if input_shape is None:
            raise TypeError("from_torch: give input_shape, (C, H, W), (D,), (T, D) for sequences or (T,) for token "
                            "ids, for an nn.Sequential")
        n_dims = 1 if np.ndim(input_shape) == 0 else len(input_shape)
        tokens = bool(leaves) and isinstance(leaves[0][1], (nn.Embedding, S["TokenEmbedding"]))
        if n_dims == 2:  # (T, D): float sequences [n, T, D]
            input_shape = (1,) + tuple(int(v) for v in input_shape)
            form = "seq"
        elif tokens and n_dims == 1:  # (T,): T token ids [n, T]
            input_shape = (1, int(input_shape if np.ndim(input_shape) == 0 else input_shape[0]), 1)
            form = "ids"
        else:
            _L._input_shape(input_shape)  # checked before len() below
            form = "flat" if np.ndim(input_shape) == 0 or len(input_shape) == 1 else "image"
    else:
        raise _unsupported("module (%s)" % type(module).__name__,
                           "a module with its own forward() cannot be converted (dptrain cannot see what it "
                           "computes); supported: %s" % SUPPORTED)
    if not leaves:
        raise _invalid("module (%s)" % type(module).__name__, "has no layers")
    shape = _L._input_shape(input_shape)
    if native and tuple(module.input_shape) != shape:
        raise _invalid("module (DptrainNet)", "input_shape %r differs from the module's own %r"
                       % (input_shape, tuple(module.input_shape)))
    b = _L._builder(shape)
    starts = {e: s for s, e in groups.items()}  # last leaf of a group -> its first
    sources = []  # (where, {suffix: torch parameter}) per C layer, in order
    for i, (path, mod) in enumerate(leaves):
        where = "%s (%s)" % (path, type(mod).__name__)
        if i in groups:
            check(lib.dpt_model_builder_residual_begin(b))  # groups are disjoint (checked above)
        entries, form = _layer(nn, where, mod, _L._builder_shape(b), form, fcs[i])
        for layer, params, res in entries:
            try:
                if res == "begin":
                    check(lib.dpt_model_builder_residual_begin(b))
                layer._add(b)
                if res == "end":
                    check(lib.dpt_model_builder_residual_end(b))
            except DptrainError as e:
                raise type(e)("%s: %s" % (where, e), e.status, e.status_name) from None
            sources.append((where, params))
        if i in starts:
            try:
                check(lib.dpt_model_builder_residual_end(b))
            except DptrainError as e:
                raise type(e)("residual group %s..%s: %s" % (leaves[starts[i]][0], path, e), e.status,
                              e.status_name) from None
    spec = _L._builder_spec(b)
    m = model_cls._from_spec(spec, threads=threads)
    if native and isinstance(module.spec, str) and module.spec and module.spec != spec:
        try:
            own = model_cls._from_spec(module.spec, threads=threads)
        except DptrainError:
            own = None
        if own is not None and own.layers() == m.layers():
            m = own
    # parameters: the C layers correspond one to one to the entries, in order
    infos = m.layers()
    if len(infos) != len(sources):  # an invariant of the builder, not user input
        raise RuntimeError("from_torch: %d layers built from %d entries" % (len(infos), len(sources)))
    tensors = {}
    for name in m.parameters():
        layer, attr = name.rsplit(".", 1)
        tensors.setdefault(layer, {})[attr] = name
    params = {}
    for (where, src), info in zip(sources, infos):
        if info["name"] in tensors:
            params.update(_params(torch, where, src, tensors[info["name"]]))
    if set(params) != set(m.parameters()):  # an invariant: every C tensor belongs to one entry
        raise RuntimeError("from_torch: parameters %s were not copied" % sorted(set(m.parameters()) - set(params)))
    m.set_parameters(params)
    m.source = "PyTorch module %s" % type(module).__name__
    return m


# ==== Per-example gradients and the optimizer step (DP-SGD on your own model) ====

def trainable_parameters(model: Any) -> List[Tuple[str, Any]]:
    """[(name, parameter)] of `model`'s parameters with requires_grad, in
    model.named_parameters() order (a tied parameter once, under its first name). The one
    order of the flat gradient: per_example_gradients' dict, hence PrivateGradients.release's
    join of it, and set_gradients' slices all follow it; the sum of the numels is the dim
    of PrivateGradients."""
    return [(k, p) for k, p in model.named_parameters() if p.requires_grad]


def parameter_layers(model: Any) -> List[Tuple[str, int]]:
    """[(module path, values)] of `model`'s trainable parameters grouped by the module that owns
    them (a Linear's weight and bias are one layer; "" for the root's own), in
    trainable_parameters() order: the layers of PrivateGradients' per-layer clipping
    (PrivateGradients.from_module(model, clip_mode="per-layer")), consecutive slices of the
    flat gradient whose values sum to its dim."""
    layers = []
    for name, p in trainable_parameters(model):
        owner = name.rpartition(".")[0]
        if layers and layers[-1][0] == owner:
            layers[-1][1] += p.numel()
        else:
            layers.append([owner, p.numel()])
    return [(owner, int(k)) for owner, k in layers]


def _fixed_tensors(model, trainable):
    """{name: tensor} of what functional_call must see besides the trainable parameters:
    the frozen parameters and the buffers (detached), and every other name of a tied
    trainable parameter mapped to its first name ({alias: first})."""
    ids = {id(p): k for k, p in trainable}
    fixed, alias = {}, {}
    for mpath, mod in model.named_modules(remove_duplicate=False):
        for attr, t in list(mod._parameters.items()) + list(mod._buffers.items()):
            if t is None:
                continue
            name = "%s.%s" % (mpath, attr) if mpath else attr
            if id(t) in ids:
                if ids[id(t)] != name:
                    alias[name] = ids[id(t)]
            else:
                fixed[name] = t.detach()
    return fixed, alias


def _functional_call(torch):
    try:
        from torch.func import functional_call  # torch >= 2.0
    except ImportError:
        from torch.nn.utils.stateless import functional_call  # torch 1.12, 1.13
    return functional_call


def _vmap_grad():
    """(vmap, grad) of torch.func (torch >= 2.0) or functorch (torch 1.13), or None."""
    try:
        from torch.func import grad, vmap
    except ImportError:
        try:
            from functorch import grad, vmap
        except ImportError:
            return None
    return vmap, grad


def _check_per_example(nn, model):
    """Refuse a BatchNorm that normalizes with the statistics of the batch it is given, and a
    normalization (InstanceNorm) that would write private running statistics into the model."""
    for path, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            where = "%s (%s)" % (path or "the model", type(mod).__name__)
            if mod.training:
                raise _unsupported("per_example_gradients", "%s is in training mode: it normalizes with the "
                                   "statistics of its batch, which mix the examples, and updates its running "
                                   "statistics from the private data without noise; call model.eval() (running "
                                   "statistics from public data) or use GroupNorm / LayerNorm" % where)
            if mod.running_mean is None:
                raise _unsupported("per_example_gradients", "%s has no running statistics "
                                   "(track_running_stats=False), so it normalizes with the batch's even in eval "
                                   "mode; use GroupNorm / LayerNorm" % where)
        elif isinstance(mod, nn.modules.batchnorm._NormBase) and mod.training and mod.track_running_stats:
            # InstanceNorm: per example, but it would copy private statistics into its buffers
            raise _unsupported("per_example_gradients", "%s (%s) is in training mode with track_running_stats: it "
                               "updates its running statistics from the private data without noise; call "
                               "model.eval() or build it with track_running_stats=False"
                               % (path or "the model", type(mod).__name__))


def per_example_gradients(model: Any, loss_fn: Callable[..., Any], *, vectorized: Optional[bool] = None
                          ) -> Callable[..., Dict[str, Any]]:
    """A function grads(inputs, target=None) -> {name: tensor [b, *shape]}: for every example
    i the gradient of its own loss, loss_fn(model(*inputs_i), target_i) with inputs_i the
    i-th rows (kept as a batch of one, x[i:i+1]), with respect to each trainable parameter
    (requires_grad; trainable_parameters() order, which PrivateGradients.release joins and
    set_gradients splits in) at the model's parameters when grads is called. Detached.

      inputs   a tensor [b, ...] or a tuple / list of tensors, each [b, ...] (several model
               inputs: grads((x, c), y) calls model(x[i:i+1], c[i:i+1]))
      target   a tensor [b, ...] (loss_fn(output, target[i:i+1])) or None (loss_fn(output))
      loss_fn  returns one value for one example (a mean over a batch of one is that loss)
      vectorized  None: vmap(grad) of torch.func (torch >= 2.0) or functorch (torch 1.13)
               when importable, else one backward pass per example; True: vmap(grad) or an
               ImportError; False: the loop (for a model vmap cannot batch)

    The epsilon of DP-SGD assumes each row is ONE example's gradient, which holds when the
    model computes example by example: a BatchNorm in training mode (or one without running
    statistics) is refused, naming its module path, as its batch statistics mix the examples
    and it updates its running statistics from the private data without noise; in eval mode
    it normalizes with fixed statistics and is accepted (those should not come from the
    private data). Buffers (running statistics, ...) and frozen parameters are passed
    through unchanged. Dropout draws per example (vmap randomness "different"; functorch on
    torch 1.13 cannot do it under grad: vectorized=False there). vmap holds the activations
    of the whole batch at once."""
    torch = _torch()
    vg = _vmap_grad()
    if vectorized and vg is None:
        raise ImportError("per_example_gradients(vectorized=True) needs vmap and grad from torch.func (torch >= 2.0) "
                          "or functorch (torch 1.13; Debian: python3-torch provides it): neither imports; "
                          "vectorized=None uses one backward pass per example instead")
    use_vmap = vg is not None and vectorized is not False
    fcall = _functional_call(torch)

    def scalar(loss):
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError("per_example_gradients: loss_fn must return one value per example, got %s"
                             % (tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__))
        return loss.reshape(())

    def grads(inputs, target=None):
        _check_per_example(torch.nn, model)
        xs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        if not xs or not all(isinstance(t, torch.Tensor) for t in xs):
            raise TypeError("per_example_gradients: inputs must be a tensor [b, ...] or a tuple of them")
        b = xs[0].shape[0] if xs[0].dim() else -1
        for k, t in enumerate(xs + (() if target is None else (target,))):
            if t.dim() == 0 or t.shape[0] != b:
                raise ValueError("per_example_gradients: %s has shape %s; every input and the target need the "
                                 "same first dimension (the batch, %d)" % (
                                     "inputs[%d]" % k if k < len(xs) else "target", tuple(t.shape), b))
        trainable = trainable_parameters(model)
        if b == 0:
            return {k: torch.zeros((0,) + tuple(p.shape), dtype=p.dtype, device=p.device) for k, p in trainable}
        rnn = next((path or "the model" for path, mod in model.named_modules()
                    if isinstance(mod, torch.nn.RNNBase)), None)
        if rnn is not None and vectorized:
            raise RuntimeError("per_example_gradients(vectorized=True): %s is a recurrent module (LSTM/GRU/RNN), "
                               "which vmap cannot batch; give vectorized=None or False (one backward pass per "
                               "example)" % rnn)
        if use_vmap and rnn is None:
            vmap, grad = vg
            fixed, alias = _fixed_tensors(model, trainable)

            def loss_one(p, xi, ti):
                tensors = dict(fixed)
                tensors.update(p)
                tensors.update({a: p[k] for a, k in alias.items()})
                out = fcall(model, tensors, tuple(v.unsqueeze(0) for v in xi))
                return scalar(loss_fn(out) if ti is None else loss_fn(out, ti.unsqueeze(0)))
            params = {k: p.detach() for k, p in trainable}
            try:
                g = vmap(grad(loss_one), in_dims=(None, 0, None if target is None else 0),
                         randomness="different")(params, xs, target)
            except RuntimeError as e:
                if "randomness" not in str(e):
                    raise RuntimeError("per_example_gradients: vmap could not batch this model (%s); if the model "
                                       "runs on single examples, give vectorized=False (one backward pass per "
                                       "example)" % str(e).splitlines()[0]) from e
                raise RuntimeError("per_example_gradients: vmap cannot draw the model's randomness per example "
                                   "here (functorch on torch 1.13 fails on dropout in training mode under grad): "
                                   "give vectorized=False (one backward pass per example)") from e
            return {k: g[k].detach() for k, _ in trainable}
        ps = [p for _, p in trainable]
        rows = []
        for i in range(b):
            out = model(*(t[i:i + 1] for t in xs))
            loss = scalar(loss_fn(out) if target is None else loss_fn(out, target[i:i + 1]))
            gi = torch.autograd.grad(loss, ps, allow_unused=True)
            rows.append([torch.zeros_like(p) if v is None else v.detach() for v, p in zip(gi, ps)])
        return {k: torch.stack([r[j] for r in rows]) for j, (k, _) in enumerate(trainable)}

    return grads


def replace_batchnorm(module: Any, num_groups: Optional[int] = None, *, verbose: bool = True) -> List[str]:
    """Replace every BatchNorm1d/2d/3d of `module` (in place) by a GroupNorm over the same
    channels, as DP training needs (a BatchNorm's batch statistics mix the examples, and its
    running statistics are the private data's, unnoised), and return the list of changes as
    (module path, old, new) strings; verbose=True also prints them. num_groups: groups per
    layer (None: the largest of 32, 16, 8, 4, 2, 1 that divides its channels). The affine
    weights start anew (GroupNorm's ones and zeros): fine-tune after replacing. Like
    Opacus's ModuleValidator.fix for BatchNorm."""
    torch = _torch()
    nn = torch.nn
    changes = []
    for path, parent in list(module.named_modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.modules.batchnorm._BatchNorm):
                continue
            c = child.num_features
            g = num_groups if num_groups is not None else next(k for k in (32, 16, 8, 4, 2, 1) if c % k == 0)
            if c % g:
                raise ValueError("replace_batchnorm: num_groups %d does not divide the %d channels of %s"
                                 % (g, c, ".".join(x for x in (path, name) if x)))
            new = nn.GroupNorm(g, c, eps=child.eps, affine=child.affine)
            new.train(child.training)
            setattr(parent, name, new)
            changes.append("%s: %s -> %s" % (".".join(x for x in (path, name) if x), child, new))
    if verbose:
        print("replace_batchnorm: %s" % ("; ".join(changes) if changes else "no BatchNorm found, nothing changed"))
    return changes


def set_gradients(model: Any, update: ArrayLike) -> None:
    """Write a flat update [dim] (numpy or torch; PrivateGradients.release's noisy mean
    gradient) into the .grad of each trainable parameter (requires_grad), sliced in
    trainable_parameters() order and copied to the parameter's dtype and device; .grad is
    replaced, not accumulated, and frozen parameters are left alone. Then any torch
    optimizer steps with it (SGD with momentum, Adam, weight decay, gradient clipping):
    computed from the released update and the parameters only, that is post-processing and
    costs no privacy. Raises InvalidArgumentError (a ValueError) when the length differs
    from the trainable parameter count."""
    torch = _torch()
    trainable = trainable_parameters(model)
    u = update.detach() if isinstance(update, torch.Tensor) else torch.from_numpy(np.asarray(update))
    dim = sum(p.numel() for _, p in trainable)
    if u.dim() != 1 or u.numel() != dim:
        raise _invalid("set_gradients", "the update has shape %s, the model's trainable parameters %d values "
                       "(requires_grad only, in named_parameters() order): give the flat [%d] update of "
                       "PrivateGradients.release" % (tuple(u.shape), dim, dim))
    k = 0
    for _, p in trainable:
        p.grad = u[k:k + p.numel()].to(device=p.device, dtype=p.dtype, copy=True).view_as(p)
        k += p.numel()


def __getattr__(name):  # dptrain.torch_interop.DptrainNet, ..., created on first use (imports torch)
    if name == "DptrainNet":
        return _net_class()
    if name in ("TokenEmbedding", "RMSNorm", "AttentionCore", "SelfAttention", "EncoderLayer", "MeanPool", "ClsPool",
                "ToSeq"):
        return _seq(name)
    raise AttributeError(name)
