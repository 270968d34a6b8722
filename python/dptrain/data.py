"""Arrays in, library datasets out: dtype and layout checks and conversions.

Features: any real numeric array [n, D] or [n, C, H, W] (image data), converted to C-contiguous
float32 (a copy only when needed); complex, object and string arrays are refused. NaN and
infinite values are refused by the library, which names the first one. Labels: integer
array [n] (integral floats and bools are accepted and converted), stored as int32.
Regression targets: a real array [n] or [n, k], stored as float32 [n, k].
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union
from numpy.typing import ArrayLike

import numpy as np

from ._lib import check, ffi, lib

__all__ = ["as_features", "as_labels", "as_targets", "Dataset", "load_idx"]


def as_features(x: ArrayLike, name: str = "x", dim: Optional[int] = None) -> np.ndarray:
    """x as a C-contiguous float32 [n, D] array; dim (if given) must equal D."""
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        if hasattr(x, "__array__"):
            x = np.asarray(x)
        else:
            raise TypeError("%s must be a numpy array, got %s" % (name, type(x).__name__))
    if x.dtype.kind not in "fiub":
        raise TypeError("%s: expected real numbers (float32 preferred), got dtype %s" % (name, x.dtype))
    if x.ndim < 2:
        raise ValueError("%s must have shape [n, features] or [n, C, H, W], got shape %s" % (name, x.shape))
    if x.shape[0] == 0:
        raise ValueError("%s has no examples (shape %s)" % (name, x.shape))
    x = x.reshape(x.shape[0], -1)
    if x.shape[1] == 0:
        raise ValueError("%s has no features (shape %s)" % (name, x.shape))
    if dim is not None and x.shape[1] != dim:
        raise ValueError("%s has %d features per example, the model takes %d" % (name, x.shape[1], dim))
    if x.dtype.kind == "f" and x.dtype.itemsize > 4:
        # finite here but infinite as float32: say so, not "x[i] = inf is not finite"
        big = np.isfinite(x) & (np.abs(x) > np.finfo(np.float32).max)
        if big.any():
            i = int(np.flatnonzero(big.ravel())[0])
            raise ValueError("%s[%d] (example %d, feature %d) = %r is outside the float32 range (|x| <= %.4g)"
                             % (name, i, i // x.shape[1], i % x.shape[1], x.ravel()[i],
                                float(np.finfo(np.float32).max)))
    return np.ascontiguousarray(x, dtype=np.float32)


def as_labels(y: ArrayLike, name: str = "y", n: Optional[int] = None) -> np.ndarray:
    """y as a C-contiguous int32 [n] array."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError("%s must have shape [n] (class indices, not one-hot), got shape %s" % (name, y.shape))
    if n is not None and y.shape[0] != n:
        raise ValueError("%s has %d labels for %d examples" % (name, y.shape[0], n))
    if y.dtype.kind == "b":
        y = y.astype(np.int32)
    elif y.dtype.kind == "f":
        bad = ~np.isfinite(y) | (y != np.round(y))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError("%s[%d] = %r is not an integer class label" % (name, i, y[i]))
    elif y.dtype.kind not in "iu":
        raise TypeError("%s: expected integer class labels, got dtype %s" % (name, y.dtype))
    if y.size and y.min() < 0:
        i = int(np.argmax(y < 0))
        raise ValueError("%s[%d] = %s: class labels must be >= 0" % (name, i, y[i]))
    if y.size and y.max() >= 2 ** 31:
        i = int(np.argmax(y >= 2 ** 31))
        raise ValueError("%s[%d] = %d does not fit in int32" % (name, i, y[i]))
    return np.ascontiguousarray(y, dtype=np.int32)


def as_targets(t: ArrayLike, name: str = "y", n: Optional[int] = None, k: Optional[int] = None) -> np.ndarray:
    """Regression targets t [n] or [n, k] as a C-contiguous float32 [n, k] array; k (if
    given) must match. NaN and infinite values are refused by the library."""
    t = np.asarray(t)
    if t.dtype.kind not in "fiu":
        raise TypeError("%s: expected real-valued regression targets, got dtype %s" % (name, t.dtype))
    if t.ndim == 1:
        t = t[:, None]
    if t.ndim != 2 or t.shape[1] == 0:
        raise ValueError("%s must have shape [n] or [n, targets] (regression), got shape %s" % (name, t.shape))
    if n is not None and t.shape[0] != n:
        raise ValueError("%s has %d rows of targets for %d examples" % (name, t.shape[0], n))
    if k is not None and t.shape[1] != k:
        raise ValueError("%s has %d targets per example, the training targets have %d" % (name, t.shape[1], k))
    if t.dtype.kind == "f" and t.dtype.itemsize > 4:
        big = np.isfinite(t) & (np.abs(t) > np.finfo(np.float32).max)
        if big.any():
            i = int(np.flatnonzero(big.ravel())[0])
            raise ValueError("%s[%d] (example %d, target %d) = %r is outside the float32 range"
                             % (name, i, i // t.shape[1], i % t.shape[1], t.ravel()[i]))
    return np.ascontiguousarray(t, dtype=np.float32)


class Dataset:
    """A library dataset (dpt_dataset) holding a copy of (x, y); `ptr` for C calls."""

    def __init__(self, x: ArrayLike, y: ArrayLike, n_classes: int = 0, shape: Optional[Sequence[int]] = None,
                 name: str = "x, y") -> None:
        """x: C-contiguous float32 [n, D], y: C-contiguous int32 [n] (as_features, as_labels)
        or, for regression, float32 [n, k] targets (as_targets); the library copies and
        validates them (NaN, labels outside [0, n_classes)); `name` prefixes its messages
        ("x_test, y_test: dpt_dataset_from_arrays: y[3] = 5 ...")."""
        self._freed = True
        self.ptr = ffi.new("dpt_dataset *")
        if y.dtype == np.float32:
            if not hasattr(lib, "dpt_dataset_from_targets"):
                raise NotImplementedError("this libdptrain has no regression targets (dpt_dataset_from_targets)")
            check(lib.dpt_dataset_from_targets(ffi.cast("const float *", ffi.from_buffer(x)),
                                               ffi.cast("const float *", ffi.from_buffer(y)), x.shape[0], x.shape[1],
                                               y.shape[1], self.ptr), name)
        else:
            check(lib.dpt_dataset_from_arrays(ffi.cast("const float *", ffi.from_buffer(x)),
                                              ffi.cast("const int32_t *", ffi.from_buffer(y)), x.shape[0],
                                              x.shape[1], int(n_classes), self.ptr), name)
        self._freed = False
        if shape is not None and len(shape) == 3:
            check(lib.dpt_dataset_set_shape(self.ptr, *[int(s) for s in shape]), "input_shape")

    @property
    def n(self) -> int:
        return int(self.ptr.n)

    @property
    def n_classes(self) -> int:
        return int(self.ptr.n_classes)

    def free(self) -> None:
        if not self._freed:
            lib.dpt_dataset_free(self.ptr)
            self._freed = True

    def __del__(self):
        try:
            self.free()
        except Exception:  # interpreter shutdown
            pass


def load_idx(images_path: Union[str, os.PathLike], labels_path: Union[str, os.PathLike]
             ) -> Tuple[np.ndarray, np.ndarray]:
    """(x float32 [n, rows, cols] in [0, 1], y int64 [n]) from IDX files (.gz or raw), as the
    library's loader reads them (pixel / 255 in float32). Pure numpy: an example of what a
    user's own loading code looks like (docs/python.md)."""
    import gzip

    def read(path):
        with open(path, "rb") as f:
            head = f.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(path, "rb") as f:
            return f.read()

    img, lab = read(images_path), read(labels_path)
    if len(img) < 16 or int.from_bytes(img[:4], "big") != 0x803:
        raise ValueError("%s: not an IDX image file (magic 0x00000803)" % images_path)
    if len(lab) < 8 or int.from_bytes(lab[:4], "big") != 0x801:
        raise ValueError("%s: not an IDX label file (magic 0x00000801)" % labels_path)
    n, rows, cols = (int.from_bytes(img[4 + 4 * i:8 + 4 * i], "big") for i in range(3))
    if len(img) != 16 + n * rows * cols:
        raise ValueError("%s: %d bytes of pixels, expected %d" % (images_path, len(img) - 16, n * rows * cols))
    if int.from_bytes(lab[4:8], "big") != n or len(lab) != 8 + n:
        raise ValueError("%s: label count does not match the %d images" % (labels_path, n))
    x = np.frombuffer(img, dtype=np.uint8, offset=16).reshape(n, rows, cols).astype(np.float32) / np.float32(255)
    y = np.frombuffer(lab, dtype=np.uint8, offset=8).astype(np.int64)
    return x, y
