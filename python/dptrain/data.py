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

from ._lib import check, cstr, ffi, lib

__all__ = ["as_features", "as_labels", "as_targets", "Dataset", "load_idx", "load_fortunes", "fortunes_topics",
           "fortunes_available", "save_tokens", "load_tokens"]


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


# ==== Text: token-id files and the fortunes corpus (docs/data.md, "Text") ====

FORTUNES_DIR = "/usr/share/games/fortunes"


def _dataset_arrays(ds) -> Tuple[np.ndarray, np.ndarray]:
    """Copies of a filled dpt_dataset's x [n, dim] (float32) and y [n] (int64)."""
    n, dim = int(ds.n), int(ds.dim)
    x = np.frombuffer(ffi.buffer(ds.x, n * dim * 4), dtype=np.float32).reshape(n, dim).copy()
    y = np.frombuffer(ffi.buffer(ds.y, n * 4), dtype=np.int32).astype(np.int64)
    return x, y


def _need_text():
    if not hasattr(lib, "dpt_data_load_fortunes"):
        raise NotImplementedError("this libdptrain has no text data (dpt_data_load_fortunes, dpt_tokens_load)")


def fortunes_topics() -> List[str]:
    """The topic of each fortunes-topic label: fortunes_topics()[k] is the file name of label k."""
    _need_text()
    return [ffi.string(lib.dpt_fortunes_topic(k)).decode() for k in range(lib.DPT_FORTUNES_N_TOPICS)]


def fortunes_available(data_dir: Optional[str] = None) -> bool:
    """True when the fortunes corpus can be read: data_dir/fortunes/ or, without it, the
    Debian package's /usr/share/games/fortunes (apt-get install fortunes)."""
    import os
    d = os.path.join(data_dir, "fortunes") if data_dir else None
    return bool(d and os.path.isdir(d)) or os.path.isdir(FORTUNES_DIR)


def load_fortunes(kind: str = "topic", split: str = "train", seq_len: Optional[int] = None,
                  data_dir: Optional[str] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(x float32 [n, T], y int64 [n]) of the fortunes corpus, exactly as `dptrain train
    --dataset fortunes-KIND --seq-len T` loads it: byte ids 0..255 stored as floats, 256 pads,
    257 ends an entry. kind "topic": one entry per row (truncated or padded to T, default
    256), y its topic (fortunes_topics()); "chars": windows of T bytes (default 64) at stride
    T, y the next byte (258 classes). split "train" | "test": a fixed rule on each entry's
    text (docs/data.md). data_dir: a directory holding fortunes/ (else the Debian package's
    files). Raises DptrainIOError (an OSError) naming the package when the files are absent.
    The byte vocabulary is data-independent: nothing here depends on the private text
    beyond the rows themselves."""
    _need_text()
    import os
    kinds = {"topic": lib.DPT_FORTUNES_TOPIC, "chars": lib.DPT_FORTUNES_CHARS}
    splits = {"train": lib.DPT_SPLIT_TRAIN, "test": lib.DPT_SPLIT_TEST}
    if kind not in kinds:
        raise ValueError("kind must be 'topic' or 'chars', got %r" % (kind,))
    if split not in splits:
        raise ValueError("split must be 'train' or 'test', got %r" % (split,))
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer))
                                or not 1 <= seq_len <= 2 ** 20):
        raise ValueError("seq_len must be an int in [1, 2^20], got %r" % (seq_len,))
    d = os.path.join(os.fspath(data_dir), "fortunes") if data_dir is not None else None
    directory = d if d and os.path.isdir(d) else FORTUNES_DIR
    ds = ffi.new("dpt_dataset *")
    check(lib.dpt_data_load_fortunes(kinds[kind], cstr(directory, "data_dir"), splits[split], int(seq_len or 0), ds),
          "load_fortunes")
    try:
        return _dataset_arrays(ds)
    finally:
        lib.dpt_dataset_free(ds)


def save_tokens(path: Union[str, "os.PathLike"], sequences: Sequence[ArrayLike], vocab: int,
                labels: Optional[ArrayLike] = None, n_classes: Optional[int] = None) -> None:
    """Writes token sequences as a token-id file (format "DPTK" version 1, docs/data.md):
    a 40-byte little-endian header, the sequence lengths, the labels (when given), then the
    ids as uint16 (vocab <= 65536) or uint32. Every id must be in [0, vocab), vocab <= 2^24;
    labels in [0, n_classes) (default max + 1). Pure numpy: the format's reference writer."""
    import os
    import struct
    vocab = int(vocab)
    if not 1 <= vocab <= 2 ** 24:
        raise ValueError("vocab must be in [1, 2^24] (ids above 2^24 are not exact in float32), got %d" % vocab)
    seqs = [np.asarray(s).reshape(-1) for s in sequences]
    if not seqs:
        raise ValueError("no sequences")
    for i, s in enumerate(seqs):
        if s.size and (s.dtype.kind not in "iu" or s.min() < 0 or s.max() >= vocab):
            raise ValueError("sequence %d: ids must be integers in [0, %d)" % (i, vocab))
        if s.size >= 2 ** 32:
            raise ValueError("sequence %d: more than 2^32 - 1 ids" % i)
    k = 0
    if labels is not None:
        lab = as_labels(labels, "labels", len(seqs))
        k = int(n_classes) if n_classes is not None else int(lab.max()) + 1
        if not 1 <= k < 2 ** 31 or lab.max() >= k:
            raise ValueError("labels must be in [0, n_classes) with n_classes in [1, 2^31), got n_classes %d" % k)
    width = 2 if vocab <= 65536 else 4
    ids = np.concatenate(seqs) if seqs else np.zeros(0)
    parts = [b"DPTK", struct.pack("<IIIIIQQ", 1, width, vocab, k, 0, len(seqs), ids.size),
             np.asarray([s.size for s in seqs], dtype="<u4").tobytes()]
    if k:
        parts.append(lab.astype("<u4").tobytes())
    parts.append(ids.astype("<u2" if width == 2 else "<u4").tobytes())
    with open(os.fspath(path), "wb") as f:
        f.write(b"".join(parts))


def load_tokens(path: Union[str, "os.PathLike"], seq_len: int, kind: str = "classification", pad_id: int = 0,
                stride: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(x float32 [n, T], y int64 [n]) from a token-id file (save_tokens; .gz too), read and
    checked by the library (malformed files raise FormatError naming the file). kind
    "classification": one row per labelled sequence, its first T ids then pad_id; "lm":
    windows of T ids at `stride` (default T) within each sequence, y the next id."""
    _need_text()
    import os
    if kind not in ("classification", "lm"):
        raise ValueError("kind must be 'classification' or 'lm', got %r" % (kind,))
    t = ffi.new("dpt_tokens *")
    check(lib.dpt_tokens_load(cstr(os.fspath(path), "path"), t), "load_tokens")
    ds = ffi.new("dpt_dataset *")
    try:
        if kind == "classification":
            check(lib.dpt_tokens_classification(t, int(seq_len), int(pad_id), ds), "load_tokens")
        else:
            check(lib.dpt_tokens_lm_windows(t, int(seq_len), int(stride if stride is not None else seq_len), ds),
                  "load_tokens")
        return _dataset_arrays(ds)
    finally:
        lib.dpt_tokens_free(t)
        lib.dpt_dataset_free(ds)
