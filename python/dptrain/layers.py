"""Layer objects for describing a model without writing a spec string.

    model = [Conv2d(16, 8, stride=2, padding=3), ReLU(), MaxPool2d(2, 1),
             Conv2d(32, 4, stride=2), ReLU(), MaxPool2d(2, 1), Flatten(),
             Linear(32), ReLU(), Linear(10)]

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
           "Sigmoid", "Identity", "Residual", "build_spec"]


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
    """The canonical spec string of `layers` on inputs of shape (C, H, W) (or (D,))."""
    shape = _input_shape(input_shape)
    layers = list(layers)
    if not layers:
        raise ValueError("model: empty layer list")
    b = _builder(shape)
    for i, x in enumerate(layers):
        if not isinstance(x, Layer):
            raise TypeError("model[%d]: expected a layer object (dptrain.layers.*), got %r" % (i, x))
        x._add(b)
    return _builder_spec(b)
