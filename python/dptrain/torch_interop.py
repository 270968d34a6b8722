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
"""

import numpy as np

from ._lib import lib

__all__ = ["to_torch", "state_dict", "DptrainNet"]


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("dptrain.to_torch needs PyTorch (Debian: apt-get install python3-torch)") from e
    return torch


def _modules(nn, info):
    k = info["kind"]
    C_in, H, W = info["in_shape"]
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

        def __init__(self, layers, input_shape, spec=""):
            super().__init__()
            self.spec = spec
            self.input_shape = tuple(input_shape)
            self._plan = []     # (name, flatten input first, residual source index or -1)
            self._keep = set()  # activation indices used as residual sources
            for i, info in enumerate(layers):
                self.add_module(info["name"], _modules(nn, info))
                flat = info["kind"] == lib.DPT_LAYER_LINEAR
                src = info["residual_from"] - 1 if info["residual_from"] else -1
                if src >= 0:
                    self._keep.add(src)
                self._plan.append((info["name"], flat, src))

        def forward(self, x):
            C, H, W = self.input_shape
            if (C, H) != (1, 1) and x.dim() == 2:
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


def state_dict(model):
    """{name: torch.Tensor} (float32 copies) of a dptrain.Model's parameters."""
    torch = _torch()
    return {k: torch.from_numpy(v) for k, v in model.parameters().items()}


def to_torch(model):
    """A torch.nn.Module equivalent to `model` (eval mode) with its parameters loaded strictly."""
    Net = _net_class()
    net = Net(model.layers(), model.input_shape, model.spec)
    net.load_state_dict(state_dict(model), strict=True)
    return net.eval()


def __getattr__(name):  # dptrain.torch_interop.DptrainNet, created on first use (imports torch)
    if name == "DptrainNet":
        return _net_class()
    raise AttributeError(name)
