"""DP-SGD for a model of your own: you compute per-example gradients (e.g. with torch.func),
dptrain owns what the privacy guarantee rests on.

`PrivateGradients` is the C library's dpt_sgm (dptrain/mechanism.h): Poisson sampling of each
batch, clipping of every per-example gradient to L2 norm `clip`, Gaussian noise (or the
secure discrete Gaussian) on the clipped sum, and a privacy ledger that records each step,
and writes it to `ledger_path`, before `sample()` returns the batch:

    >>> pg = dptrain.PrivateGradients(n=len(X), dim=n_params, batch_size=256, sigma=1.1, clip=1.0)
    >>> idx = pg.sample()                       # the next batch (keep it secret)
    >>> g = per_example_grads(params, X[idx])   # [b, ...] one row per example, your code
    >>> params -= lr * pg.release(g)            # (clipped sum + noise) / (q n), float32 [dim]
    >>> pg.epsilon()

With PyTorch, dptrain.per_example_gradients(model, loss_fn) computes g ({name: [b, *shape]})
and dptrain.set_gradients(model, update) puts the update into .grad for a torch optimizer
(dptrain.torch_interop).

A large batch (virtual batches) is released from micro-batches, so memory holds one
micro-batch of gradients; the update is bit for bit that of one release of all the rows:

    >>> idx = pg.sample()
    >>> for part in pg.micro_batches(idx, 256):
    ...     pg.accumulate(per_example_grads(params, X[part]))
    >>> params -= lr * pg.release()             # no argument: the accumulated rows

The epsilon holds when each row is the gradient of ONE example's loss (no batch statistics
across examples), and when nobody learns the batch indices. See docs/python.md.
"""

from __future__ import annotations

from numpy.typing import ArrayLike

import functools
import os
import threading
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

from ._lib import check, cstr, ffi, lib
from .accounting import Ledger, _accountant, steps_for_epochs

__all__ = ["PrivateGradients", "PoissonBatchSampler"]

_SAMPLERS = {"table": 0, "cks": 1}
_ACCUMULATED = object()  # release()'s default: the rows given to accumulate()


def _locked(method):
    """One call into the mechanism at a time: the C handle is one thread's (its buffers and
    noise stream are not shared safely), and two threads releasing one batch would release
    it twice for one recorded step (cffi lets other threads run during the C call)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return call


def _as_rows(grads, b, dim, where="release"):
    """grads as a C-contiguous float32 array [b, dim]: a numpy array or torch tensor [b, ...]
    (flattened per row), or a dict / list / tuple of them (e.g. torch.func's per-parameter
    gradients), each [b, ...], joined in their order (a dict's insertion order). b None:
    the rows the grads hold (a micro-batch), the same for every part."""
    if grads is None:
        if b:
            raise ValueError("%s: grads is None, but the sampled batch has %d examples" % (where, b))
        return np.zeros((0, dim), dtype=np.float32)
    if isinstance(grads, dict):
        grads = list(grads.values())
    if isinstance(grads, (list, tuple)):
        parts = [_host(g) for g in grads]
        if b is None:
            b = parts[0].shape[0] if parts and parts[0].ndim >= 1 else 0
        for k, p in enumerate(parts):
            if p.ndim < 1 or p.shape[0] != b:
                raise ValueError("%s: grads[%d] has shape %s: its first dimension must be the batch size %d"
                                 % (where, k, p.shape, b))
        a = np.concatenate([_rows(p, b) for p in parts], axis=1) if parts else np.zeros((b, 0), np.float32)
    else:
        a = _host(grads)
        if b is None:
            if a.ndim < 1:
                raise ValueError("%s: grads has shape %s; give one row per example [rows, ...]" % (where, a.shape))
            b = a.shape[0]
        if a.ndim < 1 or a.shape[0] != b:
            raise ValueError("%s: grads has shape %s, but the sampled batch has %d examples (one row each)"
                             % (where, a.shape, b))
        a = _rows(a, b)
    if a.shape[1] != dim:
        raise ValueError("%s: each example's gradient has %d values, the mechanism's dim is %d"
                         % (where, a.shape[1], dim))
    if a.dtype.kind == "c":
        raise TypeError("%s: the gradients are complex (dtype %s); give real per-example gradients" % (where, a.dtype))
    if a.dtype.kind not in "fiub":
        raise TypeError("%s: the gradients must be real numbers, got dtype %s" % (where, a.dtype))
    if a.dtype.itemsize > 4 and a.dtype.kind == "f" and a.size:
        big = np.abs(a) > np.finfo(np.float32).max
        if big.any():  # finite here, infinite in float32: say so (the library would call it a NaN or inf)
            i, j = np.argwhere(big)[0]
            raise OverflowError("%s: grads row %d holds %r, beyond float32's range (the mechanism takes float32 "
                                "gradients): scale the loss down, or clip the rows yourself first" % (where, i, a[i, j]))
    return np.ascontiguousarray(a, dtype=np.float32)


def _rows(a, b):
    """a [b, ...] as [b, values per row] (also for b = 0, where reshape(b, -1) cannot infer)."""
    return a.reshape(b, int(np.prod(a.shape[1:], dtype=np.int64)))


def _host(x):
    """A numpy array from a numpy array, a torch tensor (any device; detached; dtypes numpy
    lacks, such as bfloat16, as float32) or a sequence."""
    if type(x).__module__.startswith("torch"):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if x.is_complex():
            raise TypeError("release: the gradients are complex (%s); give real per-example gradients" % x.dtype)
        import torch
        return x.numpy() if x.dtype in (torch.float32, torch.float64, torch.float16) else x.float().numpy()
    return np.asarray(x)


class PrivateGradients:
    """The sampled Gaussian mechanism over per-example gradients you compute (DP-SGD with a
    model dptrain does not build).

    Arguments (keywords; n and dim may be positional):
      n             examples in the private dataset (indices 0..n-1)
      dim           values in one example's gradient (all parameters, flattened)
      sample_rate   Poisson rate q, or batch_size = the expected batch q n (give one)
      sigma         noise multiplier (std / clip); or target_epsilon with epochs or steps to
                    calibrate it (the default accountant, min of PLD and RDP). target_epsilon with sigma: a budget, sample() then
                    raises PrivacyError before the step that would exceed it (also when
                    calibrated)
      epochs/steps  the planned length (epochs: whole epochs of max(1, round(1/q)) steps,
                    accounting.steps_for_epochs), for the calibration
      clip=1.0      L2 norm C every example's gradient is clipped to
      delta=1e-5    of epsilon(), the budget and the calibration; < 1/n unless force=True
      seed=None     seeds the batches and the noise (None or 0: drawn from the OS by the
                    library, never exposed, not reproducible); anyone who knows it can
                    recompute both
      secure=True   OS-keyed streams and the discrete Gaussian lattice mechanism, as
                    dptrain.train(..., secure=True) (secure_sampler "table" or "cks"): the
                    default, because release() returns the noisy sum itself, in which a
                    floating-point Gaussian sampler's artefacts can tell whether an example
                    was in (Mironov 2012). secure=False (needed for seed= and
                    adaptive_quantile=): floating-point noise, labelled in the ledger
                    ("noise_float", dptrain.Ledger.label: [float noise])
      ledger_path   a file the ledger is written to (atomically) before each batch is returned;
                    resume=True continues it (same n, dim, q, sigma, clip, secure), else an
                    existing file is refused
      threads=0     threads of release() (0: all cores)
      clip_mode="flat"  or "per-layer": each example's gradient is cut into consecutive
                    groups of layer_sizes values (a model's parameter layers, in the order
                    of its flat gradient) and each group is clipped to clip / sqrt(G), as
                    dptrain.train(clip_mode="per-layer") does: the whole row's norm stays
                    <= clip, so the noise and epsilon are flat clipping's.
                    PrivateGradients.from_module(model, ...) finds the layers of a torch model
      layer_sizes   with clip_mode="per-layer": values per layer, summing to dim
      adaptive_quantile=None  adaptive clipping (Andrew et al. 2021; docs/dpsgd.md): clip is
                    the starting C, which then follows this quantile of the gradient norms
                    (0.5: the median): each release also releases the count of unclipped
                    rows with noise std adaptive_sigma_b (None: q n / 20, must exceed
                    sigma / 2) and moves C by exp(-adaptive_lr (unclipped fraction -
                    quantile)). sigma is the step's total multiplier (one SGM event per
                    step); the gradient gets (sigma^-2 - (2 sigma_b)^-2)^-1/2 (.sigma).
                    .clip is the current C; a resumed ledger_path continues it
      adaptive_lr=0.2, adaptive_sigma_b=None  its learning rate and count noise

    Use it as a context manager, or call close(). One call at a time: the methods hold a
    lock, so threads may share it (each sampled batch is released once); one mechanism per
    ledger_path at a time (another one, in this process or another, raises BusyError).

    Virtual batches: accumulate(grads) adds a micro-batch of the sampled batch's rows (in
    sample()'s order), release() without an argument releases them, once all the sampled
    rows are in (another count is refused, nothing released); micro_batches(idx, size) cuts
    the indices. Memory then holds one micro-batch, and the update is bit for bit that of
    release(all the rows)."""

    def __init__(self, n: int, dim: int, *, sample_rate: Optional[float] = None, batch_size: Optional[float] = None,
                 sigma: Optional[float] = None, target_epsilon: Optional[float] = None, epochs: Optional[int] = None,
                 steps: Optional[int] = None, clip: float = 1.0, delta: float = 1e-5, seed: Optional[int] = None,
                 secure: bool = True, secure_sampler: str = "table",
                 ledger_path: Optional[Union[str, os.PathLike]] = None, resume: bool = False, force: bool = False,
                 threads: int = 0, clip_mode: str = "flat",
                 layer_sizes: Optional[Sequence[int]] = None, adaptive_quantile: Optional[float] = None,
                 adaptive_lr: float = 0.2, adaptive_sigma_b: Optional[float] = None) -> None:
        self._p = None
        self._lock = threading.Lock()
        n, dim = _count(n, "n"), _count(dim, "dim")
        if n < 1:  # before batch_size / n: a ZeroDivisionError named nothing
            raise ValueError("PrivateGradients: n (examples in the dataset) must be >= 1, got 0")
        threads = _count(threads, "threads")
        if threads > 1024:
            raise ValueError("PrivateGradients: threads must be in [0, 1024] (0: all cores), got %d" % threads)
        if seed is not None:
            seed = _count(seed, "seed")  # a negative seed was reduced mod 2^64 in silence
            if seed >= 2 ** 64:
                raise ValueError("PrivateGradients: seed must be in [0, 2^64 - 1], got %d" % seed)
        if (sample_rate is None) == (batch_size is None):
            raise ValueError("PrivateGradients: give exactly one of sample_rate= and batch_size= (= q n)")
        q = float(sample_rate) if sample_rate is not None else float(batch_size) / n
        if epochs is not None and steps is not None:
            raise ValueError("PrivateGradients: give at most one of epochs= and steps=")
        if sigma is None and target_epsilon is None:
            raise ValueError("PrivateGradients: give sigma= (the noise multiplier), or target_epsilon= with epochs= "
                             "or steps= to calibrate it")
        if epochs is not None:
            steps = steps_for_epochs(epochs, q)
        if sigma is None and steps is None:
            raise ValueError("PrivateGradients: target_epsilon= without sigma= calibrates sigma, which needs the "
                             "planned epochs= or steps=")
        if secure_sampler not in _SAMPLERS:
            raise ValueError("secure_sampler must be 'table' or 'cks', got %r" % (secure_sampler,))
        if secure and seed:
            raise ValueError("PrivateGradients: seed= makes the batches and the noise reproducible, which the secure "
                             "mode (the default) never is: pass secure=False with it (floating-point noise, labelled "
                             "in the ledger)")
        if secure and adaptive_quantile is not None:
            raise ValueError("PrivateGradients: adaptive_quantile= (adaptive clipping) runs on floating-point noise "
                             "only: pass secure=False with it (labelled in the ledger)")
        if seed is None:
            seed = 0  # the library draws it from the OS
        mode = ffi.new("dpt_clip_mode *")
        check(lib.dpt_clip_mode_parse(cstr(clip_mode, "clip_mode"), mode), "PrivateGradients: clip_mode")
        sizes = None
        if layer_sizes is not None:
            sizes = [_count(v, "layer_sizes[%d]" % k) for k, v in enumerate(layer_sizes)]
        c = lib.dpt_sgm_config_defaults()
        c.n, c.dim, c.sample_rate = n, dim, q
        c.sigma = 0.0 if sigma is None else float(sigma)
        c.target_epsilon = 0.0 if target_epsilon is None else float(target_epsilon)
        c.steps = 0 if steps is None else _count(steps, "steps")
        c.clip, c.delta = float(clip), float(delta)
        c.seed = int(seed) % 2 ** 64
        c.secure, c.secure_sampler = int(bool(secure)), _SAMPLERS[secure_sampler]
        c.threads = int(threads)
        c.resume, c.force = int(bool(resume)), int(bool(force))
        c.clip_mode = mode[0]
        if adaptive_quantile is not None:
            c.adaptive_quantile = float(adaptive_quantile)
            c.adaptive_lr = float(adaptive_lr)
            c.adaptive_sigma_b = 0.0 if adaptive_sigma_b is None else float(adaptive_sigma_b)
        elif adaptive_sigma_b is not None or adaptive_lr != 0.2:
            raise ValueError("PrivateGradients: adaptive_lr / adaptive_sigma_b only with adaptive_quantile= "
                             "(adaptive clipping)")
        layers = ffi.new("size_t[]", sizes) if sizes else ffi.NULL  # copied by dpt_sgm_new
        c.layer_sizes, c.n_layers = layers, 0 if sizes is None else len(sizes)
        path = None if ledger_path is None else ffi.new("char[]", cstr(os.fspath(ledger_path), "ledger_path"))
        c.ledger_path = ffi.NULL if path is None else path  # copied by dpt_sgm_new
        out = ffi.new("dpt_sgm **")
        check(lib.dpt_sgm_new(ffi.new("dpt_sgm_config *", c), out), "PrivateGradients")
        self._p = ffi.gc(out[0], lib.dpt_sgm_free)
        self.n, self.dim, self.sample_rate, self.delta = n, dim, q, float(delta)
        self.adaptive_quantile = None if adaptive_quantile is None else float(adaptive_quantile)
        self.secure = bool(secure)
        self.clip_mode = clip_mode
        self.layer_sizes = None if sizes is None else tuple(sizes)
        self.ledger_path = None if ledger_path is None else os.fspath(ledger_path)
        self._cap = int(lib.dpt_sgm_batch_cap(self._p))
        self._idx = np.empty(self._cap, dtype=np.uint32)
        self._b = None  # size of the pending batch (None: none pending)
        self._acc = 0   # rows of it accumulated (virtual batches)

    @classmethod
    def from_module(cls, model: Any, n: int, **kwargs: Any) -> "PrivateGradients":
        """A PrivateGradients for the trainable parameters of a torch model (requires_grad, in
        dptrain.trainable_parameters order, the order of per_example_gradients' rows and of
        set_gradients): dim is their count, and with clip_mode="per-layer" each module's own
        parameters (a Linear's weight and bias) are one layer, as dptrain.parameter_layers
        lists them. Other keywords as the constructor's."""
        from .torch_interop import parameter_layers
        layers = parameter_layers(model)
        if "dim" in kwargs or "layer_sizes" in kwargs:
            raise TypeError("PrivateGradients.from_module: dim and layer_sizes come from the model; do not give them")
        if not layers:
            raise ValueError("PrivateGradients.from_module: the model has no trainable parameters (requires_grad)")
        sizes = [k for _, k in layers]
        per_layer = kwargs.get("clip_mode", "flat") == "per-layer"
        return cls(n, sum(sizes), layer_sizes=sizes if per_layer else None, **kwargs)

    @staticmethod
    def micro_batches(idx: np.ndarray, size: int) -> List[np.ndarray]:
        """idx (sample()'s indices) cut into consecutive parts of at most size (views, in
        order; none for an empty batch): accumulate each part's gradients in this order."""
        size = _count(size, "size")
        if size < 1:
            raise ValueError("micro_batches: size must be >= 1, got 0")
        return [idx[k:k + size] for k in range(0, len(idx), size)]

    def _h(self):
        if self._p is None:
            raise ValueError("PrivateGradients: closed")
        return self._p

    # -- the two steps --
    @_locked
    def sample(self) -> np.ndarray:
        """The next Poisson batch: a uint32 array of indices into the dataset (ascending;
        possibly empty). The step is in the ledger (and its file) when this returns, whether
        or not you release it. Keep the indices secret: use them to pick the examples only.
        Raises PrivacyError (nothing drawn) when the step would exceed target_epsilon."""
        h = self._h()
        b = ffi.new("size_t *")
        idx = self._idx
        st = lib.dpt_sgm_sample(h, ffi.cast("uint32_t *", ffi.from_buffer(idx)), self._cap, b)
        if st == lib.DPT_ERANGE and b[0] > self._cap:  # a batch above mean + 6 sd: read it whole
            idx = np.empty(b[0], dtype=np.uint32)
            st = lib.dpt_sgm_batch(h, ffi.cast("uint32_t *", ffi.from_buffer(idx)), idx.size, b)
        check(st, "PrivateGradients.sample")
        self._b = int(b[0])
        self._acc = 0  # an unreleased accumulation is dropped with its (spent) batch
        return idx[:self._b].copy()

    @_locked
    def accumulate(self, grads: Any) -> None:
        """Add a micro-batch of the sampled batch: grads [rows, ...] (as release takes them) of
        the next rows of sample()'s indices, in order, clipped and added to the batch's sum.
        The mechanism keeps no reference to grads. Refused, with nothing added, past the
        sampled batch's size (InvalidArgumentError) or for a NaN / infinite row
        (OutOfRangeError). Then release() with no argument."""
        h = self._h()
        if self._b is None:
            raise ValueError("PrivateGradients.accumulate: no batch is pending: call sample() first (each sampled "
                             "batch is released once)")
        a = _as_rows(grads, None, self.dim, "accumulate")
        check(lib.dpt_sgm_accumulate(h, ffi.cast("const float *", ffi.from_buffer(a)) if a.size else ffi.NULL,
                                     a.shape[0]), "PrivateGradients.accumulate")
        self._acc += a.shape[0]

    @property
    def accumulated(self) -> int:
        """Rows of the pending batch accumulated so far (0 when none is pending)."""
        return self._acc if self._b is not None else 0

    @_locked
    def release(self, grads: Any = _ACCUMULATED) -> np.ndarray:
        """The noisy update of the last sampled batch: float32 [dim] = (sum of the rows
        clipped to norm clip + N(0, sigma^2 clip^2)) / (q n). grads: [b, ...] per-example
        gradients in the order of sample()'s indices (numpy or torch, any float dtype; each
        row flattened), or a dict / list of such arrays (joined per row in their order: the
        dict of dptrain.per_example_gradients is in trainable_parameters() order, the order
        set_gradients splits the update in); None for an empty batch. No argument: the rows
        given to accumulate(), which must be the whole sampled batch (InvalidArgumentError
        otherwise, nothing released, the rows kept: accumulate the missing ones). Once per
        sample()."""
        h = self._h()
        if self._b is None:
            raise ValueError("PrivateGradients.release: no batch is pending: call sample() first (each sampled "
                             "batch is released once)")
        out = np.empty(self.dim, dtype=np.float32)
        if grads is _ACCUMULATED:
            check(lib.dpt_sgm_release_accumulated(h, ffi.cast("float *", ffi.from_buffer(out))),
                  "PrivateGradients.release")
        else:
            a = _as_rows(grads, self._b, self.dim)
            check(lib.dpt_sgm_release(h, ffi.cast("const float *", ffi.from_buffer(a)) if a.size else ffi.NULL,
                                      a.shape[0], ffi.cast("float *", ffi.from_buffer(out))),
                  "PrivateGradients.release")
        self._b = None
        self._acc = 0
        return out

    # -- the privacy spent --
    @_locked
    def epsilon(self, delta: Optional[float] = None, accountant: str = "default") -> float:
        """epsilon of every step sampled so far at delta (default: the constructor's);
        accountant "default" (what target_epsilon calibrates with and the budget stops at:
        the smaller of the PLD and RDP bounds, PLD in practice), "pld" or "rdp"."""
        out = ffi.new("double *")
        check(lib.dpt_sgm_epsilon(self._h(), 0.0 if delta is None else float(delta), _accountant(accountant), out),
              "PrivateGradients.epsilon")
        return out[0]

    @property
    @_locked
    def steps(self) -> int:
        """Steps recorded (sampled), a resumed ledger's included."""
        return int(lib.dpt_sgm_steps(self._h()))

    @property
    def sigma(self) -> float:
        """The noise multiplier in use (given or calibrated): noise std / clip; with
        adaptive_quantile the gradient's share sigma_Delta (sigma_accounted: the total)."""
        return float(lib.dpt_sgm_sigma(self._h()))

    @property
    @_locked
    def clip(self) -> float:
        """The clipping norm C of the next release: the one given, or with adaptive_quantile
        the current adaptive C_t (a function of released counts: it may be published)."""
        return float(lib.dpt_sgm_clip(self._h()))

    @property
    def sigma_accounted(self) -> float:
        """The multiplier the ledger records (secure: the lattice mechanism's effective one)."""
        return float(lib.dpt_sgm_sigma_accounted(self._h()))

    @property
    def batch_size(self) -> float:
        """The expected batch size q n (the divisor of release())."""
        return self.sample_rate * self.n

    @property
    @_locked
    def ledger(self) -> Ledger:
        """A copy of the ledger (dptrain.Ledger) as it is now."""
        return Ledger._copy_of(lib.dpt_sgm_ledger(self._h()))

    # -- lifetime --
    @_locked
    def close(self) -> None:
        if self._p is not None:
            p, self._p = self._p, None
            ffi.gc(p, None)  # detach the destructor, then free now
            lib.dpt_sgm_free(p)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        if self._p is None:
            return "PrivateGradients(closed)"
        return "PrivateGradients(n=%d, dim=%d, q=%g, sigma=%g, clip=%g, steps=%d%s)" % (
            self.n, self.dim, self.sample_rate, self.sigma, self.clip, self.steps, ", secure" if self.secure else "")



class PoissonBatchSampler:
    """A batch sampler for torch's DataLoader whose batches are PrivateGradients' Poisson
    batches: each iteration step calls pg.sample() and yields its indices as a list, so
    the examples your loop trains on are exactly the ones the accounting sampled.

        sampler = dptrain.PoissonBatchSampler(pg, dataset=ds)   # one epoch per iteration
        loader = DataLoader(ds, batch_sampler=sampler, collate_fn=sampler.collate_fn)
        for xb, yb in loader:                        # variable size, possibly 0
            update = pg.release(grads(xb, yb))       # then set_gradients, opt.step()

    steps: batches per iteration over the sampler (len()); default one epoch,
    accounting.steps_for_epochs(1, q) = max(1, round(1 / q)). A Poisson batch may be empty:
    torch's default collate cannot stack nothing, so collate_fn (default_collate for a
    non-empty batch) turns an empty one into the tensors of dataset[0] cut to 0 rows, which
    per_example_gradients and release() take; give dataset= for that (an empty batch is
    refused without it). Release every batch before the next is drawn: the sampler refuses
    to draw while a batch is pending, so DataLoader's prefetching (num_workers > 0), which
    would draw ahead of your release(), is refused; use num_workers=0. Like the indices of
    sample(), the batches are secret: do not log them or their sizes."""

    def __init__(self, pg: PrivateGradients, steps: Optional[int] = None, *, dataset: Optional[Any] = None) -> None:
        if not isinstance(pg, PrivateGradients):
            raise TypeError("PoissonBatchSampler: pg must be a dptrain.PrivateGradients, got %r" % (pg,))
        self.pg = pg
        self.steps = steps_for_epochs(1, pg.sample_rate) if steps is None else _count(steps, "steps")
        if dataset is not None and hasattr(dataset, "__len__") and len(dataset) != pg.n:
            raise ValueError("PoissonBatchSampler: dataset has %d examples, the mechanism samples from n = %d"
                             % (len(dataset), pg.n))
        self.dataset = dataset

    def __iter__(self) -> Iterator[List[int]]:
        for _ in range(self.steps):
            if self.pg._b is not None:
                raise RuntimeError("PoissonBatchSampler: the previous batch has not been released: call "
                                   "pg.release() for each batch before the next is drawn (a DataLoader with "
                                   "num_workers > 0 draws batches ahead: use num_workers=0)")
            yield self.pg.sample().tolist()

    def __len__(self) -> int:
        return self.steps

    def collate_fn(self, batch: List[Any]) -> Any:
        """torch's default_collate of a batch; for an empty batch, dataset[0] collated and
        cut to 0 rows (every tensor in it), so the loop runs unchanged."""
        try:
            from torch.utils.data import default_collate
        except ImportError:  # torch < 1.11
            from torch.utils.data.dataloader import default_collate
        if len(batch):
            return default_collate(batch)
        if self.dataset is None:
            raise ValueError("PoissonBatchSampler: an empty Poisson batch: give dataset= to the sampler so that "
                             "collate_fn can make empty tensors of the right shapes")
        return _cut_to_empty(default_collate([self.dataset[0]]))


def _cut_to_empty(b: Any) -> Any:
    """Every tensor of a collated batch (nested tuples, lists, dicts) cut to 0 rows."""
    if hasattr(b, "shape") and hasattr(b, "__getitem__") and len(getattr(b, "shape", ())) > 0:
        return b[:0]
    if isinstance(b, dict):
        return {k: _cut_to_empty(v) for k, v in b.items()}
    if isinstance(b, tuple) and hasattr(b, "_fields"):  # a namedtuple
        return type(b)(*(_cut_to_empty(v) for v in b))
    if isinstance(b, (list, tuple)):
        return type(b)(_cut_to_empty(v) for v in b)
    return b

def _count(x, name):
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        if isinstance(x, (float, np.floating)) and float(x).is_integer():
            x = int(x)
        else:
            raise TypeError("%s must be an integer, got %r" % (name, x))
    if x < 0:
        raise ValueError("%s must be >= 0, got %d" % (name, x))
    return int(x)
