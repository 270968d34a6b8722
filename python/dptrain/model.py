"""A trained model: its spec, parameters (named as in the checkpoint), predictions,
evaluation, privacy ledger, and export to and import from PyTorch.

A Model owns a C model (dpt_model) with its own copy of the parameters: copied out of a
finished trainer (dptrain.train returns one), read from a checkpoint file (Model.load,
through the library's verified checkpoint reader) or from a PyTorch module
(Model.from_torch).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union
from numpy.typing import ArrayLike

import json
import math
import os
import threading

import numpy as np

from ._lib import HAVE_INFERENCE, check, cstr, ffi, lib
from .accounting import Ledger
from .data import as_features, as_labels
from .errors import file_not_found
from . import torch_interop  # imports torch only when a conversion runs

__all__ = ["Model", "from_torch"]

_LOSSES = {"ce": lib.DPT_LOSS_SOFTMAX_CE, "bce": lib.DPT_LOSS_SIGMOID_BCE, "mse": lib.DPT_LOSS_SQUARED,
           "token-ce": lib.DPT_LOSS_TOKEN_CE}
_LOSS_NAMES = {v: k for k, v in _LOSSES.items()}
_PREDICT_BATCH = 256


def _run_delta(ck):
    """The delta the run reported its epsilon at (its last published record in the
    checkpoint's state, or the "delta" that Model.save stores), or None when the checkpoint
    holds neither."""
    try:
        state = json.loads(ffi.string(lib.dpt_checkpoint_state(ck)).decode())
        rec = state.get("record")
        d = json.loads(rec).get("delta") if isinstance(rec, str) else state.get("delta")  # Model.save's
    except (ValueError, AttributeError):
        return None
    return float(d) if isinstance(d, (int, float)) and 0 < d < 1 else None


class Model:
    """Use Model.load(path) or the .model of dptrain.train's result."""

    def __init__(self, _model: Any, _owner: Any, loss: str = "ce", ledger: Optional[Ledger] = None,
                 algorithm: Optional[str] = None, delta: Optional[float] = None, steps: Optional[int] = None,
                 source: Optional[str] = None, initial_params: Optional[str] = None,
                 path: Union[str, os.PathLike] = None) -> None:
        self._m = _model          # dpt_model *
        self._owner = _owner      # keeps the C object alive (gc'd cdata)
        # The C model is one set of scratch buffers (activations of max_batch examples):
        # two threads in predict/evaluate at once overwrote each other's rows and returned
        # wrong numbers silently. Every call that runs the model or touches its parameters
        # holds this lock (reentrant: predict_classes calls predict), so threads may share
        # a Model; they take turns.
        self._lock = threading.RLock()
        self.loss = loss
        self.ledger = ledger
        self.algorithm = algorithm
        self.delta = delta
        self.steps = steps
        # where the parameters came from: recorded in the ledger and checkpoints of a run
        # that starts from them (dptrain.train(model=this Model))
        self.source = source or "a dptrain.Model"
        # what the run that made these parameters recorded about its own given starting
        # parameters ("" or None: it started from a random initialization)
        self.initial_params = initial_params or None
        self.path = path  # the checkpoint file it was loaded from (absolute), or None
        self._blank = False  # Model.from_spec: all parameters 0 until set_parameters
        self.targets = 0  # regression: the targets per example it was trained on (0: class labels)

    # ---- construction ----
    @classmethod
    def _from_spec(cls, spec, theta=None, threads=0, **kw):
        pp = ffi.new("dpt_model **")
        check(lib.dpt_model_new(cstr(spec, "model spec"), _PREDICT_BATCH, int(threads), pp))
        m = ffi.gc(pp[0], lib.dpt_model_free)
        if theta is not None:
            ffi.memmove(m.theta, theta, m.n_params * 4)
        return cls(m, m, **kw)

    @classmethod
    def from_torch(cls, module: Any, input_shape: Optional[Sequence[int]] = None, threads: int = 0) -> Model:
        """A Model equivalent to a PyTorch module (an nn.Sequential of supported layers, or
        to_torch()'s module) with its parameters copied: see dptrain.from_torch."""
        return torch_interop.module_to_model(cls, module, input_shape, threads=threads)

    @classmethod
    def load(cls, path: Union[str, os.PathLike], threads: int = 0) -> Model:
        """Opens a checkpoint (checkpoint.safetensors, or a run directory holding one): the
        whole file is verified (format, sizes, SHA-256) by the library."""
        if not HAVE_INFERENCE:
            raise NotImplementedError("this libdptrain has no checkpoint inference API (dptrain/inference.h)")
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, "checkpoint.safetensors")
        if not os.path.exists(path):
            raise file_not_found(path, "no such checkpoint")
        pp = ffi.new("dpt_checkpoint **")
        check(lib.dpt_checkpoint_open(cstr(path, "path"), int(threads), pp))
        ck = ffi.gc(pp[0], lib.dpt_checkpoint_close)
        lp = lib.dpt_checkpoint_ledger(ck)
        ledger = Ledger._copy_of(lp) if lp != ffi.NULL else None
        algo = ffi.string(lib.dpt_checkpoint_algorithm(ck)).decode() or None
        source = "checkpoint %s (%s run, step %d)" % (os.path.realpath(path), algo or "unknown",
                                                       int(lib.dpt_checkpoint_step(ck)))
        init, targets = None, 0
        try:
            state = json.loads(ffi.string(lib.dpt_checkpoint_state(ck)).decode())
            init = state.get("initial_params")
            run = state.get("run")
            targets = run.get("targets", 0) if isinstance(run, dict) else state.get("targets", 0)  # Model.save's
        except (ValueError, AttributeError, UnicodeDecodeError):
            pass
        m = cls(lib.dpt_checkpoint_model(ck), ck, loss=_LOSS_NAMES.get(lib.dpt_checkpoint_loss(ck), "ce"),
                ledger=ledger, algorithm=algo, delta=_run_delta(ck) if ledger is not None else None,
                steps=int(lib.dpt_checkpoint_step(ck)), source=source,
                initial_params=init if isinstance(init, str) else None, path=os.path.realpath(path))
        ok = isinstance(targets, int) and targets > 0 and (
            targets == m.output_dim or m.loss == "token-ce" and m.output_dim % targets == 0)
        m.targets = targets if ok else 0
        return m

    def save(self, path: Union[str, os.PathLike], overwrite: bool = False) -> None:
        """Writes the model as a dptrain checkpoint (safetensors, written atomically and
        sealed by its SHA-256): the parameters, the loss, and for a model of a private run its
        privacy ledger and delta, so Model.load and `dptrain train --init-from` read it and
        still know what it cost. No optimizer or sampler state and no record of the data: a
        run continues from its out_dir's checkpoint (resume=True), not from this file, and
        `dptrain eval` needs a run's checkpoint.
        An existing file is replaced only with overwrite=True."""
        if not HAVE_INFERENCE or not hasattr(lib, "dpt_checkpoint_save"):
            raise NotImplementedError("this libdptrain has no checkpoint API (dptrain/inference.h)")
        path = os.fspath(path)
        if not path:
            raise ValueError("save: empty path")
        if os.path.isdir(path):
            raise IsADirectoryError("save: %s is a directory (give a file name, e.g. %s)" % (
                path, os.path.join(path, "checkpoint.safetensors")))
        if os.path.lexists(path) and not overwrite:  # a dangling link too
            raise FileExistsError("save: %s exists (overwrite=True replaces it)" % path)
        with self._lock:
            self._save_locked(path)

    def _save_locked(self, path):
        theta = np.frombuffer(ffi.buffer(self._m.theta, self.n_params * 4), dtype=np.float32)
        if not np.all(np.isfinite(theta)):
            bad = [k for k, v in self.parameters().items() if not np.all(np.isfinite(v))]
            raise ValueError("save: %s hold%s NaN or infinite values" % (", ".join(bad), "s" if len(bad) == 1 else ""))
        state = {"algorithm": self.algorithm or "", "step": str(int(self.steps or 0)),
                 "config": {"loss": int(_LOSSES[self.loss])}, "saved_by": "dptrain.Model.save"}
        if self.initial_params:
            state["initial_params"] = self.initial_params
        if self.targets:
            state["targets"] = int(self.targets)
        if self.ledger is not None:
            state["ledger"] = self.ledger.to_json()
            if self.delta is not None:
                state["delta"] = float(self.delta)
        check(lib.dpt_checkpoint_save(cstr(path, "path"), self._m, ffi.NULL, cstr(json.dumps(state), "state")),
              "save")

    # ---- description ----
    @property
    def spec(self) -> str:
        """The canonical model spec string (what checkpoints store)."""
        return ffi.string(self._m.spec).decode()

    @property
    def n_params(self) -> int:
        return int(self._m.n_params)

    @property
    def input_dim(self) -> int:
        return int(self._m.in_dim)

    @property
    def output_dim(self) -> int:
        return int(self._m.out_dim)

    @property
    def input_shape(self) -> Tuple[int, int, int]:
        """(C, H, W) of one input example ((1, 1, D) for flat inputs)."""
        L = self._m.layers[0]
        return tuple(int(L.in_shape[i]) for i in range(3))

    def layers(self) -> List[Dict[str, Any]]:
        """[(name, kind, info dict)] of the C model, in order (used by to_torch)."""
        out = []
        for i in range(int(self._m.n_layers)):
            L = self._m.layers[i]
            out.append(dict(name=ffi.string(L.name).decode(), kind=int(L.kind), has_bias=bool(L.has_bias),
                            in_shape=tuple(int(L.in_shape[j]) for j in range(3)),
                            out_shape=tuple(int(L.out_shape[j]) for j in range(3)), k=int(L.k),
                            stride=int(L.stride), pad=int(L.pad), groups=int(L.groups),
                            residual_from=int(L.residual_from)))
        return out

    def _tensors(self):
        t = ffi.new("dpt_param_tensor *")
        for i in range(int(lib.dpt_model_n_tensors(self._m))):
            check(lib.dpt_model_tensor(self._m, i, t))
            yield ffi.string(t.name).decode(), tuple(int(t.shape[j]) for j in range(t.ndim)), int(t.offset), \
                int(t.size)

    def parameters(self) -> Dict[str, np.ndarray]:
        """{name: float32 ndarray} named as in the checkpoint ("fc1.weight" [K, D], ...);
        copies (changing them does not change the model; use set_parameters)."""
        theta = np.frombuffer(ffi.buffer(self._m.theta, self.n_params * 4), dtype=np.float32)
        with self._lock:
            return {name: theta[off:off + size].reshape(shape).copy() for name, shape, off, size in self._tensors()}

    def set_parameters(self, params: Dict[str, ArrayLike]) -> None:
        """Replaces parameters by name (every name must exist with the same shape)."""
        theta = np.frombuffer(ffi.buffer(self._m.theta, self.n_params * 4), dtype=np.float32)
        table = {name: (shape, off, size) for name, shape, off, size in self._tensors()}
        staged = []
        for name, value in params.items():
            if name not in table:
                raise KeyError("set_parameters: no tensor %r (the model has %s)" % (name, ", ".join(table)))
            shape, off, size = table[name]
            if np.iscomplexobj(value):
                raise TypeError("set_parameters: %s is complex; real values are expected" % name)
            a = np.asarray(value, dtype=np.float32)
            if a.shape != shape:
                raise ValueError("set_parameters: %s has shape %s, expected %s" % (name, a.shape, shape))
            if not np.all(np.isfinite(a)):
                raise ValueError("set_parameters: %s has NaN or infinite values" % name)
            staged.append((off, size, a))
        with self._lock:
            for off, size, a in staged:
                theta[off:off + size] = a.ravel()
            self._blank = False

    # ---- inference ----
    def _layer_index(self, layer):
        """The index of a layer given by name ("fc1", "relu2", as layers() lists them) or
        position (negative from the end)."""
        names = [ffi.string(self._m.layers[i].name).decode() for i in range(int(self._m.n_layers))]
        if isinstance(layer, str):
            if layer not in names:
                raise ValueError("layer: the model %s has no layer %r (its layers: %s)" % (
                    self.spec, layer, ", ".join(names)))
            return names.index(layer)
        import operator
        try:
            i = operator.index(layer)
        except TypeError:
            raise TypeError("layer must be a layer name or an int, got %r" % (layer,)) from None
        if not -len(names) <= i < len(names):
            raise ValueError("layer: %d is outside the model's %d layers" % (i, len(names)))
        return i % len(names)

    def predict(self, x: ArrayLike, layer: Optional[Union[int, str]] = None) -> np.ndarray:
        """Raw model outputs (logits) [n, output_dim] as float32 for features x [n, ...]; with
        `layer` (a name from layers(), e.g. "flatten1", or an index) the output of that layer
        instead, flattened per example [n, C*H*W] (a residual group's last layer: with the
        group's input added): features of a trained trunk, e.g. for a DP linear probe."""
        li = int(self._m.n_layers) - 1 if layer is None else self._layer_index(layer)
        x = as_features(x, "x", self.input_dim)
        finite = np.isfinite(x)
        if not finite.all():
            i = int(np.argmin(finite.ravel()))
            raise ValueError("predict: x[%d] (example %d, feature %d) is %r: inputs must be finite"
                             % (i, i // x.shape[1], i % x.shape[1], float(x.ravel()[i])))
        n = x.shape[0]
        K = int(self._m.layers[li].out_dim)
        out = np.empty((n, K), dtype=np.float32)
        B = int(self._m.max_batch)
        with self._lock:  # the forward pass and the read of its activations, as one
            for s in range(0, n, B):
                b = min(B, n - s)
                check(lib.dpt_model_forward(self._m, ffi.cast("const float *", ffi.from_buffer(x[s:s + b])), b))
                src = self._m.act[li + 1]
                out[s:s + b] = np.frombuffer(ffi.buffer(src, b * K * 4), dtype=np.float32).reshape(b, K)
        return out

    def predict_classes(self, x: ArrayLike) -> np.ndarray:
        """Predicted labels: argmax of the outputs (one output: output > 0)."""
        o = self.predict(x)
        return (o[:, 0] > 0).astype(np.int64) if o.shape[1] == 1 else o.argmax(axis=1)

    def _dataset(self, x, y):
        """A library dataset (data.Dataset; the caller frees it) of features x and labels y
        for this model (targets for a regression model): what evaluate and
        dptrain.audit.scores pass to the library."""
        from .data import Dataset, as_targets
        x = as_features(x, "x", self.input_dim)
        if self.targets:
            y = as_targets(y, "y", x.shape[0], self.targets)  # token-ce: T ids; mse: output_dim values
            return Dataset(x, y, name="x, y")
        y = as_labels(y, "y", x.shape[0])
        return Dataset(x, y, n_classes=self.output_dim if self.output_dim > 1 else 2, name="x, y")

    def evaluate(self, x: ArrayLike, y: ArrayLike) -> Tuple[float, float]:
        """(mean loss, accuracy) with the training loss, computed by the library; for a model
        trained on regression targets (self.targets > 0), y are targets [n] or [n, k] and the
        result is (mean loss, mean squared error per target); for a language model (loss
        "token-ce") y are the next token ids [n, T] and the result is (mean loss per token,
        perplexity exp(loss))."""
        ds = self._dataset(x, y)
        loss, acc = ffi.new("double *"), ffi.new("double *")
        try:
            with self._lock:
                check(lib.dpt_evaluate(self._m, _LOSSES[self.loss], ds.ptr, loss, acc), "evaluate")
        finally:
            ds.free()
        if self.loss == "token-ce":
            return loss[0], math.exp(loss[0])
        if self.targets:
            return loss[0], 2.0 * loss[0] / self.output_dim
        return loss[0], acc[0]

    def epsilon(self, delta: Optional[float] = None, accountant: Optional[str] = None) -> Optional[float]:
        """epsilon of the model's privacy ledger at delta (default: the run's delta);
        None for a non-private model. What it assumes: epsilon_excludes and seed_source."""
        if self.ledger is None:
            return None
        d = self.delta if delta is None else delta
        if d is None:
            raise ValueError("epsilon: give delta")
        return self.ledger.epsilon(d, accountant=accountant)

    @property
    def epsilon_excludes(self) -> Optional[str]:
        """What the epsilon does NOT cover (the ledger's "epsilon_excludes", as Run.epsilon_excludes:
        e.g. statistics fitted without noise, a preset's data-measured clip bounds); None when it
        carries no such qualification or the model has no ledger."""
        return None if self.ledger is None else self.ledger.get_meta("epsilon_excludes")

    @property
    def seed_source(self) -> Optional[str]:
        """"os" or "caller" (a chosen seed: the epsilon holds only while it stays secret), as
        Run.seed_source; None without a ledger."""
        return None if self.ledger is None else self.ledger.get_meta("seed_source")

    # ---- PyTorch ----
    def to_torch(self) -> Any:
        """A torch.nn.Module equivalent to this model, with these parameters loaded
        (load_state_dict strict): see dptrain.torch_interop."""
        return torch_interop.to_torch(self)

    def state_dict(self) -> Dict[str, Any]:
        """The parameters as torch tensors, keyed like the checkpoint and to_torch()'s module."""
        return torch_interop.state_dict(self)

    def __repr__(self):
        return "Model(%r, %d parameters)" % (self.spec, self.n_params)

    @classmethod
    def from_spec(cls, spec: str, threads: int = 0) -> Model:
        """A Model of `spec` ("mnist_cnn", "mlp:784-128-10:relu", ...) with all parameters 0:
        to look at its layers (summary(), layers(), parameters() names) before training, or
        to fill with set_parameters. dptrain.train(model=spec) initializes its own."""
        if not isinstance(spec, str):
            raise TypeError("spec must be a str, got %r" % (spec,))
        m = cls._from_spec(spec, threads=threads, source="Model.from_spec(%r) with set_parameters" % spec)
        m._blank = True
        return m

    def summary(self) -> str:
        """The layers as a table (str): index, name (what train(freeze=) takes and the prefix
        of the parameter names), kind, output shape, parameters and tensors; the library's
        dpt_model_summary, as the CLI's `dptrain model` prints it."""
        need = int(lib.dpt_model_summary(self._m, ffi.NULL, 0))
        buf = ffi.new("char[]", need + 1)
        lib.dpt_model_summary(self._m, buf, need + 1)
        trained = [L["name"] for i, L in enumerate(self.layers()) if int(self._m.layers[i].n_params)]
        return "model %s\n%s\nlayers with parameters (train(freeze=...) takes these names): %s" % (
            self.spec, ffi.string(buf).decode(), ", ".join(trained))


def from_torch(module: Any, input_shape: Optional[Sequence[int]] = None, threads: int = 0) -> Model:
    """A dptrain.Model equivalent to the PyTorch `module`, with its parameters (float32 copies).

    module: an nn.Sequential of supported modules (see dptrain.torch_interop.SUPPORTED;
    nested Sequentials are flattened), or a DptrainNet (to_torch()'s module, residual
    groups included).
    input_shape: (C, H, W) of one example for image inputs ([n, C, H, W] in PyTorch), (D,)
    or D for flat ones ([n, D]); optional for a DptrainNet (its own input shape).
    threads: the Model's inference threads (0 = all cores).

    The spec is built with the library's model builder, so m.spec is canonical; a DptrainNet
    whose .spec describes the same layers keeps that spec ("mnist_cnn" stays "mnist_cnn"), so
    Model -> to_torch -> from_torch gives back the same spec and parameters bit for bit.
    Raises UnsupportedError (a ValueError) for a module or setting dptrain cannot represent,
    InvalidArgumentError for a size that does not fit the shape reaching it (both name the
    submodule's path), TypeError when `module` is not an nn.Module."""
    return Model.from_torch(module, input_shape, threads=threads)
