"""Training from numpy arrays with every algorithm of `dptrain train`.

    run = dptrain.train(x, y, model="mlp:784-128-10:relu",
                        algorithm=dptrain.DPSGD(target_epsilon=3.0), epochs=5, x_test=xt, y_test=yt)
    run.model.predict(xt); run.epsilon; run.history

The keyword arguments are the CLI's flags (underscores for dashes; the per-algorithm ones
in the algorithm's configuration, dptrain.algorithms) with the CLI's defaults
and checks (cli/cmd_train.c, cli/algo_*.c): the same configuration gives the same run as
`dptrain train` on the same data, bit for bit (tested). The run goes on a background thread
inside the C library with the GIL released; a progress bar on stderr (a terminal only) and
the per-epoch history come from the trainer's callbacks. Ctrl-C asks the trainer to stop
after the current step: the checkpoint and the privacy ledger are saved first (with an
out_dir), then KeyboardInterrupt is raised (or the partial run returned, on_interrupt=
"return").
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, TypeVar, Union

import numpy as np

from ._lib import HAVE_CALLBACKS, check, cstr, ffi, lib, make_error
from .accounting import Ledger
from .algorithms import ALGORITHM_CLASSES, Algorithm, option_owners
from .data import Dataset, as_features, as_labels, as_targets
from .errors import OutOfRangeError, PrivacyError
from .layers import Layer, build_spec
from .model import Model

__all__ = ["train", "Run", "ALGORITHMS"]

log = logging.getLogger("dptrain")

ALGORITHMS = ("sgd", "dpsgd", "pdp-sgd", "proportional-noise", "dpulr", "ulr", "dpmac", "mac", "noisy-gd")
_ALIASES = {"pdp_sgd": "pdp-sgd", "pdpsgd": "pdp-sgd", "propnoise": "proportional-noise",
            "proportional_noise": "proportional-noise", "noisy_gd": "noisy-gd", "dp-sgd": "dpsgd",
            "dp_sgd": "dpsgd", "dp-ulr": "dpulr", "dp_ulr": "dpulr", "dp-mac": "dpmac", "dp_mac": "dpmac"}
_PRIVATE = {"dpsgd", "dpulr", "dpmac"}  # the CLI's uses_privacy_flags
_SAMPLERS = {"shuffle": lib.DPT_SAMPLER_SHUFFLE, "poisson": lib.DPT_SAMPLER_POISSON, "full": lib.DPT_SAMPLER_FULL,
             "poisson-reject": lib.DPT_SAMPLER_POISSON_REJECT}
_STOP = {0: "none", 1: "done", 2: "max_steps", 3: "budget", 4: "callback"}
_ALGO_OPTIONS = {  # keyword -> the algorithms that take it (the CLI's per-algorithm flags)
    "kappa": ("pdp-sgd",), "pdp_sigma": ("pdp-sgd",), "lambda_": ("pdp-sgd",), "prop_sigma": ("proportional-noise",),
    "sigma0": ("dpulr",), "min_batch": ("dpulr",), "ulr_noise": ("dpulr",), "copies": ("dpulr", "ulr"),
    "ulr_std": ("dpulr", "ulr"), "modules": ("dpulr", "ulr"), "antithetic": ("dpulr", "ulr"),
    "baseline": ("dpulr", "ulr"), "z_steps": ("dpmac", "mac"), "z_lr": ("dpmac", "mac"), "pca_dims": ("dpmac",),
    "pca_sigma": ("dpmac",), "center_clip": ("dpmac",), "center_sigma": ("dpmac",), "eta": ("noisy-gd",),
    "langevin_sigma": ("noisy-gd",), "linearized": ("noisy-gd",), "neighbours": ("noisy-gd",),
    "kl_constant": ("noisy-gd",), "replace_candidates": ("noisy-gd",),
    "freeze": ("sgd", "dpsgd"),
    "adaptive_quantile": ("dpsgd",), "adaptive_lr": ("dpsgd",), "adaptive_sigma_b": ("dpsgd",),
    "feature_norm_sigma": ("dpsgd",), "feature_norm_clip": ("dpsgd",),
}
_PRIVACY_OPTIONS = ("sigma", "clip", "clip_mode", "target_epsilon", "delta", "secure", "force",
                    "allow_ledger_mismatch")


def _calibrate(c, q, prior=None):
    """The noise multiplier for target_epsilon over the run's planned steps, on top of the
    releases in `prior` (a Ledger, or None): the library's dpt_sampler_steps_for_epochs and
    dpt_train_calibrate_sigma, which `dptrain train` calls too (cli/algo_dpsgd.c)."""
    if not hasattr(lib, "dpt_train_calibrate_sigma"):
        raise NotImplementedError("target_epsilon without sigma: this libdptrain has no dpt_train_calibrate_sigma "
                                  "(rebuild the package against a newer library)")
    kw = c.kw
    steps, out = ffi.new("uint64_t *"), ffi.new("double *")
    check(lib.dpt_sampler_steps_for_epochs(lib.DPT_SAMPLER_POISSON, c.N, c.cfg.batch_size, q, int(kw["epochs"]),
                                           steps), "epochs")
    check(lib.dpt_train_calibrate_sigma(ffi.NULL if prior is None else prior._p, q, steps[0], kw["delta"],
                                        float(kw["target_epsilon"]), out), "target_epsilon")
    return out[0]


def _positive(v, name, what="must be > 0"):
    if not (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)):
        raise TypeError("%s must be a number, got %r" % (name, v))
    v = float(v)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError("%s %s, got %r" % (name, what, v))
    return v


def _nonneg(v, name):
    v = float(v)
    if not (v >= 0 and math.isfinite(v)):
        raise ValueError("%s must be >= 0, got %r" % (name, v))
    return v


def _int(v, name, lo, hi=None):
    import operator
    try:
        v = operator.index(v)
    except TypeError:
        raise TypeError("%s must be an integer, got %r" % (name, v)) from None
    if v < lo or (hi is not None and v > hi):
        raise ValueError("%s must be in [%d, %s], got %d" % (name, lo, "inf" if hi is None else hi, v))
    return v


class Run:
    """The result of dptrain.train: the trained model, per-epoch history, privacy ledger."""

    def __init__(self) -> None:
        self.model: Optional[Model] = None  # dptrain.Model
        self.history: Any = []      # list of dicts (see history_frame); a DataFrame with history="pandas"
        self.ledger: Optional[Ledger] = None  # dptrain.Ledger (private runs), else None
        self.algorithm: Optional[str] = None
        self.sigma: Optional[float] = None  # noise multiplier used (given or calibrated; private algorithms)
        self.clip: Optional[float] = None  # dpsgd with adaptive_quantile: the final adaptive clip C_t
        self.sample_rate: Optional[float] = None  # q of Poisson sampling
        self.min_batch: Optional[int] = None  # DP-ULR's N_B
        self.delta: Optional[float] = None
        self.accounted = False      # True when an accountant covers this run (ledger + epsilon)
        self.stop_reason: Optional[str] = None  # "done" | "max_steps" | "budget" | "callback" | "interrupted"
        self.steps = 0
        self.out_dir: Optional[str] = None
        self.last: Optional[Dict[str, Any]] = None  # the last published epoch result (dict)
        self.kl: Optional[Dict[str, Any]] = None  # noisy-gd: the KL estimate report (dict)
        self.pca_mean: Optional[np.ndarray] = None  # dpmac with DP-PCA: the released centre [d] (center_sigma) or None
        self.pca_components: Optional[np.ndarray] = None  # dpmac with DP-PCA: the released components V [d, k]
        self.run_id: Optional[str] = None
        # the run's secret file (outside out_dir; resume needs it, never publish it), or None
        self.secret_path: Optional[str] = None
        self.frozen: List[str] = []  # the frozen layers (freeze=), in model order

    @property
    def epsilon(self) -> Optional[float]:
        """The run's epsilon at its delta, from the default accountant (the one target_epsilon
        calibrated with and the budget stopped at: the smaller of the PLD bound, where it
        applies, and the RDP bound; `accountant` says which); None when no accountant covers
        the run (non-private algorithms, DP-ULR on shuffled batches)."""
        if self.ledger is None or self.delta is None:
            return None
        return self.ledger.epsilon(self.delta)

    @property
    def accountant(self) -> Optional[str]:
        """'pld' or 'rdp': the accountant that gave `epsilon`; None without a ledger."""
        if self.ledger is None or self.delta is None:
            return None
        return self.ledger.headline(self.delta).accountant

    @property
    def epsilon_rdp(self) -> Optional[float]:
        """The RDP accountant's epsilon (Balle et al.'s conversion), the cross-check."""
        if self.ledger is None or self.delta is None:
            return None
        return self.ledger.epsilon(self.delta, accountant="rdp")

    @property
    def seed_source(self) -> Optional[str]:
        """Private runs: "os" (seed=0, the default: drawn from the OS and kept only in the run's
        secret file) or "caller" (a seed was given: whoever knows it can regenerate the batches
        and the noise, so the epsilon holds only while it stays secret); None otherwise."""
        return None if self.ledger is None else self.ledger.get_meta("seed_source")

    @property
    def epsilon_excludes(self) -> Optional[str]:
        """What the run's epsilon does NOT cover ("; "-joined, from the ledger metadata
        "epsilon_excludes"), e.g. DP-ULR's ulr_noise='controller', whose noise level is chosen
        from the batch (issue 38), or test metrics computed on the training data; None when the
        epsilon carries no such qualification or there is no ledger."""
        if self.ledger is None:
            return None
        return self.ledger.get_meta("epsilon_excludes")

    @property
    def epsilon_pld(self) -> Optional[float]:
        """PLD epsilon of the run's ledger at its delta, when the PLD accountant applies to
        all its events; else None."""
        if self.ledger is None or self.delta is None or not self.ledger.pld_applies:
            return None
        return self.ledger.epsilon(self.delta, accountant="pld")

    def preprocess(self, x: Any) -> np.ndarray:
        """The features the model takes for raw features x [n, d]: for dpmac with DP-PCA, x
        centred by the released DP mean (if any), rows scaled to unit norm and projected on
        the released components, as training did; otherwise x as float32."""
        x = as_features(x, "x")
        if self.pca_components is None:
            return x
        d, k = self.pca_components.shape
        if x.shape[1] != d:
            raise ValueError("x has %d features per example, the DP-PCA was fitted on %d" % (x.shape[1], d))
        if self.pca_mean is not None:
            x = x.copy()
            check(lib.dpt_dp_center(ffi.cast("float *", ffi.from_buffer(x)), x.shape[0], d,
                                    ffi.cast("const double *", ffi.from_buffer(self.pca_mean))))
        out = np.empty((x.shape[0], k), dtype=np.float32)
        check(lib.dpt_dp_pca_project(ffi.cast("const float *", ffi.from_buffer(x)), x.shape[0], d,
                                     ffi.cast("const double *", ffi.from_buffer(self.pca_components)), k,
                                     ffi.cast("float *", ffi.from_buffer(out))))
        return out

    def history_frame(self) -> Any:
        """The history as a pandas DataFrame (pandas must be installed)."""
        import pandas as pd
        return self.history if isinstance(self.history, pd.DataFrame) else pd.DataFrame(list(self.history))

    @property
    def privacy_label(self) -> str:
        """What weakens the run's privacy statement, as its epoch lines and the CLI's final
        line say it ("[SEEDED]", "[epsilon does NOT cover: ...]", "[non-accounted: ...]",
        "[no formal DP guarantee]"; two spaces apart), from its last published result; ""
        for none (or a library without the labels)."""
        return ((self.last or {}).get("privacy_label") or "").strip()

    def __repr__(self):
        eps = self.epsilon
        lab = self.privacy_label
        return "Run(%s, %d steps, stop %s%s%s)" % (self.algorithm, self.steps, self.stop_reason,
                                                   "" if eps is None else ", epsilon %.4g at delta %g" % (eps, self.delta),
                                                   "" if not lab else ", " + lab)


# ==== progress bar (stderr, a terminal only) ====

class _Progress:
    def __init__(self, stream, epochs, bar, verbose, split="test"):
        self.stream, self.epochs, self.bar, self.verbose, self.split = stream, epochs, bar, verbose, split
        self.last_draw = 0.0
        self.drawn = False

    def step(self, info):
        if not self.bar:
            return
        now = time.monotonic()
        done = info.step_in_epoch >= info.steps_per_epoch
        if now - self.last_draw < 0.1 and not done:
            return
        self.last_draw = now
        k, n = int(info.step_in_epoch), max(int(info.steps_per_epoch), 1)
        width = 24
        fill = min(width, k * width // n)
        rate = info.step / info.wall_s if info.wall_s > 0 else 0.0
        eta = (n - k) / rate if rate > 0 else 0.0
        loss = "" if math.isnan(info.loss) else "  loss %.4f" % info.loss
        line = "epoch %d/%d |%s%s| %d/%d  %.1f steps/s  eta %.0fs%s" % (
            int(info.epoch) + 1, self.epochs, "#" * fill, "." * (width - fill), k, n, rate, eta, loss)
        self.stream.write("\r" + line[:120] + "\x1b[K")
        self.stream.flush()
        self.drawn = True

    def epoch(self, r):
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.drawn = False
        if self.verbose:
            parts = ["epoch %d" % r["epoch"], "step %d" % r["step"]]
            if r.get("partial"):
                parts[0] += " (partial)"
            if not math.isnan(r["train_loss"]):
                parts.append("train loss %.4f" % r["train_loss"])
            if not math.isnan(r.get("test_accuracy", float("nan"))):
                parts.append("%s acc %.2f%%  %s loss %.4f" % (self.split, 100 * r["test_accuracy"], self.split,
                                                              r["test_loss"]))
                if not math.isnan(r.get("test_accuracy_ema", float("nan"))):  # ema=: the average's
                    parts.append("%s acc ema %.2f%%" % (self.split, 100 * r["test_accuracy_ema"]))
            elif not math.isnan(r.get("test_mse", float("nan"))):  # regression
                parts.append("%s mse %.5g  (rmse %.5g)" % (self.split, r["test_mse"], math.sqrt(r["test_mse"])))
            elif not math.isnan(r.get("test_loss", float("nan"))):  # token-ce
                parts.append("%s loss %.4f  (perplexity %.4g)" % (self.split, r["test_loss"],
                                                                  math.exp(r["test_loss"])))
            eps, pld, rdp = r.get("epsilon", float("nan")), r.get("epsilon_pld"), r.get("epsilon_rdp")
            if eps is not None and not math.isnan(eps):  # the headline accountant first, as the CLI
                if r.get("accountant") == "pld":
                    parts.append("epsilon %.4g (PLD; RDP %.4g) (delta %g)" % (eps, rdp, r["delta"]))
                elif pld is not None and not math.isnan(pld):
                    parts.append("epsilon %.4g (RDP; PLD %.4g) (delta %g)" % (eps, pld, r["delta"]))
                else:
                    parts.append("epsilon %.4g (RDP) (delta %g)" % (eps, r["delta"]))
            if r.get("privacy_label"):  # a seeded, non-accounted or qualified run, on every line
                parts.append(r["privacy_label"])
            parts.append("%.1fs" % r["wall_s"])
            self.stream.write("  ".join(parts) + "\n")
        self.stream.flush()


# ==== callbacks (run on the training thread; cffi takes the GIL for them) ====

class _State:
    def __init__(self, progress, user_callback, regression=False, eval_split=None):
        self.progress = progress
        self.eval_split = eval_split  # "validation": the epoch dicts say what their test_* values are
        self.user_callback = user_callback
        self.regression = regression  # epoch dicts carry test_mse instead of test_accuracy
        self.interrupt = threading.Event()
        self.history = []
        self.error = None


if HAVE_CALLBACKS:
    @ffi.def_extern()
    def _dpt_py_on_step(user, info):
        st = ffi.from_handle(user)
        try:
            st.progress.step(info)
        except Exception as e:  # a broken stderr must not kill the run silently
            st.error = st.error or e
            return 1
        return 1 if st.interrupt.is_set() else 0

    @ffi.def_extern()
    def _dpt_py_on_epoch(user, r):
        st = ffi.from_handle(user)
        try:
            d = _epoch_dict(r, st.regression)
            if st.eval_split:
                d["eval_split"] = st.eval_split
            st.history.append(d)
            st.progress.epoch(d)
            if st.user_callback is not None and st.user_callback(dict(d)):
                return 1
        except BaseException as e:  # stop the run; re-raised on the calling thread
            st.error = st.error or e
            return 1
        return 1 if st.interrupt.is_set() else 0

    @ffi.def_extern()
    def _dpt_py_log(user, level, msg):
        text = ffi.string(msg).decode("utf-8", "replace")
        log.log(logging.WARNING if level == lib.DPT_LOG_WARN else logging.INFO, "%s", text)


def _epoch_dict(r, regression=False):
    d = dict(epoch=int(r.epoch), step=int(r.step), train_loss=r.train_loss, test_loss=r.test_loss,
             test_accuracy=r.test_accuracy, lr=r.lr, wall_s=r.wall_s)
    if regression:  # the test set's mean squared error per target; no accuracy
        del d["test_accuracy"]
        d["test_mse"] = r.test_mse
    if hasattr(r, "test_accuracy_ema") and not math.isnan(r.test_loss_ema):  # ema=: the average's test results
        d["test_loss_ema"] = r.test_loss_ema
        if not regression:
            d["test_accuracy_ema"] = r.test_accuracy_ema
    if HAVE_CALLBACKS:
        d.update(epsilon=r.epsilon, epsilon_pld=r.epsilon_pld, delta=r.delta, partial=bool(r.partial),
                 epsilon_rdp=r.epsilon_rdp,
                 accountant={lib.DPT_ACCT_PLD: "pld", lib.DPT_ACCT_RDP: "rdp"}.get(r.accountant))
        if hasattr(r, "privacy_label"):  # the library's labels of this result ("" for none)
            d["privacy_label"] = ffi.string(r.privacy_label).decode("utf-8", "replace").strip()
    return d


# ==== the algorithms: the CLI's checks and construction, one function each ====

class _Ctx:
    """What the algorithm builders see and set (cf. cli_algo_ctx)."""

    def __init__(self, cfg, kw, given, n_train, test, spec, arrays):
        self.cfg, self.kw, self.given, self.N, self.test, self.spec = cfg, kw, given, n_train, test, spec
        self.arrays = arrays     # (X, XT or None): the features, for preprocessing (dpmac's DP-PCA)
        self.projected = None    # (X, XT): features the algorithm replaced (DP-PCA)
        self.releases = []       # (sensitivity, multiplier, label): recorded in a fresh run's ledger
        self.pca = None          # (mu [d] or None, V [d, k]): dpmac's released centre and components
        self.sampler = kw["sampler"]
        self.run = Run()
        self.algo = None         # dpt_algo * (owned by the trainer once created)
        self.n_noised = None     # parameters that train (and are noised) with freeze=, else None
        self.keep = []           # C strings that must outlive the trainer
        self.feature_norm = None  # (sigma, clip_mean, clip_sq): dpt_trainer_feature_norm in a fresh run


def _privacy_common(c, sampler_name, what):
    """dpsgd / dpmac: Poisson sampling and the shared privacy flags (cli dpsgd_check)."""
    kw, g = c.kw, c.given
    if "sampler" in g and kw["sampler"] != "poisson":
        raise ValueError("sampler=%r: %s needs sampler='poisson' (its epsilon is computed for Poisson sampling)"
                         % (kw["sampler"], what))
    c.sampler = "poisson"
    _positive(kw["clip"], "clip", "(the clipping norm C) must be > 0")
    if "sigma" in g:
        _positive(kw["sigma"], "sigma", "(the noise multiplier) must be > 0 (for training without noise use "
                  "algorithm='sgd')")
    if "sigma" not in g and "target_epsilon" not in g:
        raise ValueError("algorithm=%r needs sigma= or target_epsilon=" % what)
    if "target_epsilon" in g:
        _positive(kw["target_epsilon"], "target_epsilon")
    d = float(kw["delta"])
    if not (0 < d < 1):
        raise ValueError("delta must be in (0, 1), got %r" % d)


def _poisson_setup(c):
    """cli_poisson_privacy_setup: q from sample_rate or B/N, delta < 1/N unless force."""
    kw, cfg = c.kw, c.cfg
    q = float(kw["sample_rate"]) if "sample_rate" in c.given else cfg.batch_size / c.N
    if not (0 < q <= 1):
        raise ValueError("batch_size %d: the sampling rate q = B/N = %g is outside (0, 1] (N = %d)"
                         % (cfg.batch_size, q, c.N))
    if kw["delta"] >= 1.0 / c.N and not kw["force"]:
        raise ValueError("delta %g >= 1/N = %g: such a delta allows releasing a whole example; pass force=True to "
                         "accept it" % (kw["delta"], 1.0 / c.N))
    cfg.sample_rate = q
    cfg.delta = kw["delta"]
    cfg.secure = int(bool(kw["secure"]))
    cfg.allow_ledger_mismatch = int(bool(kw["allow_ledger_mismatch"]))
    cfg.target_epsilon = float(kw["target_epsilon"]) if ("sigma" in c.given and "target_epsilon" in c.given) else 0.0
    return q


def _n_params(spec):
    pp = ffi.new("dpt_model **")
    check(lib.dpt_model_new(cstr(spec, "model"), 1, 1, pp), "model")
    n = int(pp[0].n_params)
    lib.dpt_model_free(pp[0])
    return n


def _freeze_spec(freeze):
    """The C list ("conv1,conv2") of freeze= (a str, or a list / tuple of layer names)."""
    if isinstance(freeze, str):
        if not freeze.strip():
            raise ValueError("freeze: an empty list of layers (leave freeze out, or None, to train every layer)")
        return freeze
    if isinstance(freeze, (list, tuple)) and all(isinstance(f, str) for f in freeze):
        if not freeze:
            raise ValueError("freeze: an empty list of layers (leave freeze out, or None, to train every layer)")
        if any(not f.strip() for f in freeze):
            raise ValueError("freeze: an empty layer name in %r" % (list(freeze),))
        bad = [f for f in freeze if "," in f]
        if bad:
            raise ValueError("freeze: layer name %r holds a comma (give the names as a list, or one comma-separated "
                             "str)" % bad[0])
        return ",".join(freeze)
    raise TypeError("freeze must be a str or a list of layer names, got %r" % (freeze,))


def _n_trained(spec, freeze):
    """The parameters that train in a model of `spec` with the layers `freeze` (a C list)
    frozen; ValueError naming freeze for a list the model refuses."""
    pp = ffi.new("dpt_model **")
    check(lib.dpt_model_new(cstr(spec, "model"), 1, 1, pp), "model")
    n = ffi.new("size_t *")
    try:
        check(lib.dpt_model_freeze_parse(pp[0], cstr(freeze, "freeze"), ffi.NULL, n), "freeze")
    finally:
        lib.dpt_model_free(pp[0])
    return int(n[0])


def _make_sgd(c):
    out = ffi.new("dpt_algo **")
    check(lib.dpt_algo_sgd_new(out))
    return out[0]


def _feature_norm_setup(c):
    """DPSGD(feature_norm_sigma, feature_norm_clip): the fbn layer's DP channel statistics
    (the CLI's --feature-norm dp). Returns the Ledger of its two releases (the calibration's
    prior), or None without it; a fresh run makes them after the trainer exists."""
    kw, g = c.kw, c.given
    if "feature_norm_sigma" not in g:
        if "feature_norm_clip" in g:
            raise ValueError("feature_norm_clip: only with feature_norm_sigma (DP feature normalization)")
        return None
    fs = _positive(kw["feature_norm_sigma"], "feature_norm_sigma", "(the statistics' noise multiplier) must be > 0")
    clip = kw["feature_norm_clip"]
    if clip is None:
        raise ValueError("feature_norm_sigma needs feature_norm_clip: C (or (C, C2)), the L2 bound on each example's "
                         "vector of channel means (and of channel mean squares)")
    c1, c2 = (clip, clip) if not isinstance(clip, (tuple, list)) else tuple(clip)
    c1 = _positive(c1, "feature_norm_clip", "must be > 0")
    c2 = _positive(c2, "feature_norm_clip", "must be > 0")
    mult = fs
    if kw["secure"]:  # the multiplier the trainer records (lattice rounding on K coordinates)
        pp = ffi.new("dpt_model **")
        check(lib.dpt_model_new(cstr(c.spec, "model"), 1, 1, pp), "model")
        try:
            for l in range(int(pp[0].n_layers)):
                if pp[0].layers[l].kind == lib.DPT_LAYER_CHANNEL_AFFINE:
                    mult = lib.dpt_privacy_secure_sigma_eff(fs, int(pp[0].layers[l].in_shape[0]))
        finally:
            lib.dpt_model_free(pp[0])
    c.feature_norm = (fs, c1, c2)
    return Ledger().add_gaussian(1.0, mult, "dp-feature-norm-mean").add_gaussian(1.0, mult, "dp-feature-norm-sq")


def _make_dpsgd(c):
    kw, cfg = c.kw, c.cfg
    _privacy_common(c, "poisson", "dpsgd")
    mode = ffi.new("dpt_clip_mode *")
    check(lib.dpt_clip_mode_parse(cstr(kw["clip_mode"], "clip_mode"), mode), "clip_mode")
    c.sampler = "poisson"
    cfg.sampler = lib.DPT_SAMPLER_POISSON
    q = _poisson_setup(c)
    prior = _feature_norm_setup(c)
    sigma = float(kw["sigma"]) if "sigma" in c.given else None
    if sigma is None:
        sigma = _calibrate(c, q, prior)
        if kw["secure"]:
            out = ffi.new("double *")
            eff = sigma
            check(lib.dpt_privacy_secure_sigma_for(eff, c.n_noised or _n_params(c.spec), out), "target_epsilon")
            sigma = out[0]
    d = lib.dpt_dpsgd_config_defaults()
    d.sigma, d.clip, d.clip_mode, d.secure = sigma, float(kw["clip"]), mode[0], int(bool(kw["secure"]))
    if "adaptive_quantile" in c.given:  # adaptive clipping (Andrew et al. 2021): sigma is the total
        qv = float(kw["adaptive_quantile"])
        if not 0 < qv < 1:
            raise ValueError("adaptive_quantile must be in (0, 1) (0.5: the median norm), got %r" % (qv,))
        d.adaptive_quantile = qv
        d.adaptive_lr = _positive(kw["adaptive_lr"], "adaptive_lr")
        # the default q n / 20 written out, so the check names the option before training
        d.adaptive_sigma_b = _positive(kw["adaptive_sigma_b"], "adaptive_sigma_b") \
            if "adaptive_sigma_b" in c.given else q * c.N / 20
        sd = ffi.new("double *")
        check(lib.dpt_privacy_adaptive_sigma(sigma, d.adaptive_sigma_b, sd), "adaptive_sigma_b")
    elif "adaptive_sigma_b" in c.given or kw["adaptive_lr"] != 0.2:
        raise ValueError("adaptive_lr / adaptive_sigma_b: only with adaptive_quantile (adaptive clipping)")
    out = ffi.new("dpt_algo **")
    check(lib.dpt_algo_dpsgd_new(ffi.new("dpt_dpsgd_config *", d), out), "algorithm dpsgd")
    c.run.sigma = sigma if not kw["secure"] else \
        lib.dpt_privacy_secure_sigma_eff(sigma, c.n_noised or _n_params(c.spec))
    c.run.accounted = True
    return out[0]


def _make_pdpsgd(c):
    lam, kappa, sigma = _pdp_values(c.kw, c.given, c.cfg.optim)
    out = ffi.new("dpt_algo **")
    check(lib.dpt_algo_pdpsgd_new(ffi.new("dpt_pdp_config *", {"lambda": lam, "kappa": kappa, "sigma": sigma}), out),
          "algorithm pdp-sgd")
    return out[0]


def _make_propnoise(c):
    s = _prop_sigma(c.kw, c.given)
    out = ffi.new("dpt_algo **")
    check(lib.dpt_algo_propnoise_new(ffi.new("dpt_propnoise_config *", {"sigma": s, "lambda": 0.0}), out),
          "prop_sigma")
    return out[0]


def _ulr_shared(c):
    kw = c.kw
    _int(kw["copies"], "copies", 1)
    if "ulr_std" in c.given:
        _nonneg(kw["ulr_std"], "ulr_std")
    if kw["antithetic"] and kw["copies"] % 2:
        raise ValueError("antithetic=True needs an even copies (pairs z, -z), got %d" % kw["copies"])


def _ulr_config(c, std):
    kw = c.kw
    u = lib.dpt_dpulr_config_defaults()
    u.copies = int(kw["copies"])
    u.perturb_std = std
    u.antithetic = int(bool(kw["antithetic"]))
    # None: the library's DPT_ULR_AUTO (on, except with the controller, which refuses it)
    u.baseline = lib.DPT_ULR_AUTO if kw["baseline"] is None else int(bool(kw["baseline"]))
    mod = cstr(str(kw["modules"]), "modules")
    c.keep.append(ffi.new("char[]", mod))
    u.modules = c.keep[-1]
    return u


def _make_dpulr(c):
    kw, g, cfg = c.kw, c.given, c.cfg
    _ulr_shared(c)
    if "sampler" in g and kw["sampler"] not in ("poisson-reject", "shuffle"):
        raise ValueError("sampler=%r: dpulr takes sampler='poisson-reject' (accounted) or 'shuffle' (the paper's "
                         "fixed-size batches, NOT accounted)" % kw["sampler"])
    c.sampler = kw["sampler"] if "sampler" in g else "poisson-reject"
    accounted = c.sampler == "poisson-reject"
    if "sigma" in g:
        raise ValueError("sigma: dpulr takes its noise multiplier as sigma0=")
    if kw["clip_mode"] != "flat":
        raise ValueError("clip_mode: dpulr always clips module l to C_l = C / sqrt(modules)")
    if kw["secure"]:
        raise ValueError("secure=True is not implemented for dpulr (its perturbations and noise use the "
                         "reproducible float stream)")
    if "sigma0" not in g:
        raise ValueError("algorithm='dpulr' needs sigma0= (target noise multiplier)")
    sigma0 = _positive(kw["sigma0"], "sigma0")
    _positive(kw["clip"], "clip", "(the clipping norm C) must be > 0")
    if "target_epsilon" in g and not accounted:
        raise ValueError("target_epsilon: sampler='shuffle' has no accountant, so no budget can be enforced")
    if "target_epsilon" in g:
        _positive(kw["target_epsilon"], "target_epsilon")
    if not (0 < kw["delta"] < 1):
        raise ValueError("delta must be in (0, 1), got %r" % kw["delta"])
    if kw["ulr_noise"] not in ("controller", "explicit"):
        raise ValueError("ulr_noise: expected 'controller' or 'explicit', got %r" % (kw["ulr_noise"],))
    controller = kw["ulr_noise"] == "controller"
    if controller and (kw["antithetic"] or kw["baseline"]):
        raise ValueError("%s breaks the privacy controller's variance assumption: use ulr_noise='explicit' (or "
                         "algorithm='ulr')" % ("antithetic" if kw["antithetic"] else "baseline"))
    if not controller and "ulr_std" in g and not kw["ulr_std"] > 0:
        raise ValueError("ulr_std: ulr_noise='explicit' needs a perturbation std > 0")
    std = float(kw["ulr_std"]) if "ulr_std" in g else 0.0  # 0: the mode's default (dpt_dpulr_config_resolve)
    if "min_batch" in g and not accounted:
        raise ValueError("min_batch: only with sampler='poisson-reject'")
    if "min_batch" in g:
        _int(kw["min_batch"], "min_batch", 1)
    cfg.delta = kw["delta"]
    cfg.allow_ledger_mismatch = int(bool(kw["allow_ledger_mismatch"]))
    if accounted:
        N = c.N
        q = float(kw["sample_rate"]) if "sample_rate" in g else cfg.batch_size / N
        if not (0 < q < 1):
            raise ValueError("batch_size %d: the sampling rate q = B/N = %g is outside (0, 1) (N = %d)"
                             % (cfg.batch_size, q, N))
        if kw["delta"] >= 1.0 / N and not kw["force"]:
            raise ValueError("delta %g >= 1/N = %g: such a delta allows releasing a whole example; pass force=True "
                             "to accept it" % (kw["delta"], 1.0 / N))
        if "min_batch" in g:
            nb = int(kw["min_batch"])
            if nb > q * N * (1 + 1e-12):
                raise ValueError("min_batch %d exceeds qN = %.6g (q %g, N %d): the rejection theory needs 1 <= N_B "
                                 "<= qN" % (nb, q * N, q, N))
            g_, rej, sgm = ffi.new("double *"), ffi.new("double *"), ffi.new("double *")
            check(lib.dpt_dpulr_rdp(q, sigma0, N, nb, lib.DPT_DPULR_RATIO_ALPHA, g_, rej, sgm), "min_batch")
            if rej[0] / sgm[0] > 1e-3:
                log.warning("min_batch %d: the rejection cost %.3g is %.3g x the SGM term at order %g (> 0.001): it "
                            "adds noticeably to epsilon; a smaller N_B costs less", nb, rej[0], rej[0] / sgm[0],
                            lib.DPT_DPULR_RATIO_ALPHA)
        else:
            pnb, ratio = ffi.new("uint64_t *"), ffi.new("double *")
            check(lib.dpt_dpulr_default_min_batch(q, sigma0, N, 1e-3, pnb, ratio), "min_batch")
            nb = int(pnb[0])
        cfg.sample_rate = q
        cfg.min_batch = nb
        cfg.sampler = lib.DPT_SAMPLER_POISSON_REJECT
        cfg.target_epsilon = float(kw["target_epsilon"]) if "target_epsilon" in g else 0.0
        c.run.min_batch = nb
        c.run.accounted = True
    else:
        log.warning("dpulr: NOT ACCOUNTED: sampler='shuffle' (fixed-size batches, as in the paper's experiments) is "
                    "not covered by the DP-ULR analysis: no epsilon will be reported")
    if controller:  # as the CLI says it: the epsilon holds only under the paper's approximation
        log.warning("dpulr: ulr_noise='controller': the noise level rests on the paper's Gaussian approximation "
                    "(CLT over K) and on s_l chosen from the batch, not on a standard DP proof; ulr_noise='explicit' "
                    "(the default) is the mode a standard analysis covers (docs/dpulr.md)")
    u = _ulr_config(c, std)
    u.private_ = 1
    u.sigma0 = sigma0
    u.clip = float(kw["clip"])
    u.noise = lib.DPT_ULR_CONTROLLER if controller else lib.DPT_ULR_EXPLICIT
    u.accounted = int(accounted)
    out = ffi.new("dpt_algo **")
    check(lib.dpt_algo_dpulr_new(ffi.new("dpt_dpulr_config *", u), out), "algorithm dpulr")
    c.run.sigma = sigma0
    return out[0]


def _make_ulr(c):
    _ulr_shared(c)
    kw = c.kw
    if "ulr_std" in c.given and not kw["ulr_std"] > 0:
        raise ValueError("ulr_std: the perturbation std must be > 0, got %r" % kw["ulr_std"])
    u = _ulr_config(c, float(kw["ulr_std"]) if "ulr_std" in c.given else 0.0)
    u.private_ = 0
    out = ffi.new("dpt_algo **")
    check(lib.dpt_algo_dpulr_new(ffi.new("dpt_dpulr_config *", u), out), "algorithm ulr")
    return out[0]


def _mac_check(kw):
    _int(kw["z_steps"], "z_steps", 0, 100000)
    _positive(kw["z_lr"], "z_lr")


def _make_dpmac(c):
    kw, g, cfg = c.kw, c.given, c.cfg
    _privacy_common(c, "poisson", "dpmac")
    if kw["clip_mode"] != "flat":
        raise ValueError("clip_mode=%r: dpmac clips every layer's coefficient to Theta (clip); clip_mode does not "
                         "apply" % kw["clip_mode"])
    _mac_check(kw)
    if kw["secure"] and "sigma" not in g:
        raise ValueError("secure=True with target_epsilon: calibration for the secure mechanisms of dpmac is not "
                         "implemented; give sigma=")
    k = _int(kw["pca_dims"], "pca_dims", 0)
    center = "center_sigma" in g
    if k > 0 and "pca_sigma" not in g:
        raise ValueError("pca_dims %d needs pca_sigma= (the DP-PCA noise std; the paper uses 4 / 8 / 16)" % k)
    if "pca_sigma" in g and k == 0:
        raise ValueError("pca_sigma needs pca_dims > 0")
    if k > 0:
        _positive(kw["pca_sigma"], "pca_sigma", "must be > 0 (DP-PCA without noise is not private)")
    if ("center_clip" in g or center) and k == 0:
        raise ValueError("center_clip/center_sigma centre the data before DP-PCA: they need pca_dims > 0")
    if ("center_clip" in g) != center:
        raise ValueError("%s: the DP mean needs both center_clip (row norm bound) and center_sigma (noise multiplier)"
                         % ("center_clip" if "center_clip" in g else "center_sigma"))
    if center:
        _positive(kw["center_clip"], "center_clip")
        _positive(kw["center_sigma"], "center_sigma", "must be > 0 (a mean without noise is not private)")
    if k > 0 and kw["resume"] and kw["secure"]:
        raise ValueError("resume with pca_dims in secure mode would release a second, different DP-PCA (its noise "
                         "cannot be regenerated); start a new run")
    if k > 0 and kw["resume"] and kw["allow_ledger_mismatch"]:
        # a resume recomputes the DP mean and DP-PCA from the run's secret seed: the same release
        # on the same data; with a mismatch allowed the data or the seed (a lost secret) may
        # differ, and two published releases would then reveal their difference
        raise ValueError("resume with pca_dims and allow_ledger_mismatch: the DP mean and DP-PCA would be computed "
                         "again on other data or with other noise, a release the ledger does not hold; start a new "
                         "run (or resume without allow_ledger_mismatch)")
    cfg.sampler = lib.DPT_SAMPLER_POISSON
    q = _poisson_setup(c)
    if "sigma" in g:
        sigma = float(kw["sigma"])
    else:
        # [DP mean +] [DP-PCA +] the planned steps, as the CLI calibrates (cli/algo_dpmac.c)
        pre = Ledger()
        if k > 0 and center:
            pre.add_gaussian(1.0, float(kw["center_sigma"]), "dp-mean")
        if k > 0:
            pre.add_gaussian(1.0, float(kw["pca_sigma"]), "dp-pca")
        try:
            sigma = _calibrate(c, q, pre)
        except OutOfRangeError as e:
            raise OutOfRangeError("%s (the releases before training alone may exceed it; raise pca_sigma or "
                                  "center_sigma)" % (e,), e.status, e.status_name) from None
    if k > 0:
        _dp_pca(c, k, center)
    d = lib.dpt_dpmac_config_defaults()
    d.sigma, d.clip, d.z_steps, d.z_lr, d.secure = sigma, float(kw["clip"]), int(kw["z_steps"]), \
        float(kw["z_lr"]), int(bool(kw["secure"]))
    out = ffi.new("dpt_algo **")
    check(lib.dpt_algo_dpmac_new(ffi.new("dpt_dpmac_config *", d), out), "algorithm dpmac")
    c.run.sigma = sigma
    c.run.accounted = True
    return out[0]


def _noise_rng(c, seed_fn):
    """A noise stream of its own for a pre-training release (the CLI's seeds)."""
    r = ffi.new("dpt_rng *")
    if c.kw["secure"]:
        check(lib.dpt_rng_init_secure(r, lib.DPT_STREAM_NOISE))
    else:
        check(lib.dpt_rng_init(r, seed_fn(c.cfg.seed), lib.DPT_STREAM_NOISE))
    return ffi.gc(r, lib.dpt_rng_free)


def _dp_pca(c, k, center):
    """dpmac's preprocessing (cli/algo_dpmac.c run_pca): [a DP mean of the training rows,
    both splits centred by it,] DP-PCA of the training rows to k dimensions, both splits
    projected. Each release goes into the run's ledger (c.releases) before training."""
    kw, X, XT = c.kw, c.arrays[0], c.arrays[1]
    n, d = X.shape
    if k > d:
        raise ValueError("pca_dims %d: the data have only %d features" % (k, d))
    threads, secure = int(c.cfg.threads), int(bool(kw["secure"]))

    def fp(a):
        return ffi.cast("float *", ffi.from_buffer(a))

    def dp(a):
        return ffi.cast("double *", ffi.from_buffer(a))
    if center:
        X, XT = X.copy(), None if XT is None else XT.copy()  # centred in place
        mu = np.empty(d, dtype=np.float64)
        check(lib.dpt_dp_mean(fp(X), n, d, float(kw["center_clip"]), float(kw["center_sigma"]),
                              _noise_rng(c, lib.dpt_dp_mean_seed), secure, threads, dp(mu), ffi.NULL),
              "center_clip/center_sigma")
        check(lib.dpt_dp_center(fp(X), n, d, dp(mu)))
        if XT is not None:
            check(lib.dpt_dp_center(fp(XT), XT.shape[0], d, dp(mu)))
        mult = lib.dpt_privacy_secure_sigma_eff(float(kw["center_sigma"]), d) if secure else float(kw["center_sigma"])
        c.releases.append((1.0, mult, "dp-mean"))
    V = np.empty((d, k), dtype=np.float64)
    check(lib.dpt_dp_pca_fit(fp(X), n, d, k, float(kw["pca_sigma"]), _noise_rng(c, lib.dpt_dp_pca_seed), secure,
                             threads, dp(V), ffi.NULL), "pca_dims")
    P = np.empty((n, k), dtype=np.float32)
    check(lib.dpt_dp_pca_project(fp(X), n, d, dp(V), k, fp(P)), "pca_dims")
    PT = None
    if XT is not None:
        PT = np.empty((XT.shape[0], k), dtype=np.float32)
        check(lib.dpt_dp_pca_project(fp(XT), XT.shape[0], d, dp(V), k, fp(PT)), "pca_dims")
    mult = lib.dpt_privacy_secure_sigma_eff(float(kw["pca_sigma"]), d * (d + 1) // 2) if secure \
        else float(kw["pca_sigma"])
    c.releases.append((1.0, mult, "dp-pca"))
    c.projected = (P, PT)
    c.pca = (mu if center else None, V)


def _make_mac(c):
    _mac_check(c.kw)
    d = lib.dpt_dpmac_config_defaults()
    d.private_ = 0
    d.z_steps, d.z_lr = int(c.kw["z_steps"]), float(c.kw["z_lr"])
    out = ffi.new("dpt_algo **")
    check(lib.dpt_algo_dpmac_new(ffi.new("dpt_dpmac_config *", d), out), "algorithm mac")
    return out[0]


def _make_noisy_gd(c):
    kw, g, cfg = c.kw, c.given, c.cfg
    if "sampler" in g and kw["sampler"] != "full":
        raise ValueError("sampler=%r: noisy-gd is full-batch gradient descent (sampler='full')" % kw["sampler"])
    c.sampler = "full"
    cfg.sampler = lib.DPT_SAMPLER_FULL
    if kw["resume"]:
        raise ValueError("resume: noisy-gd does not checkpoint its KL sums and W0; start a fresh run")
    eta = _positive(kw["eta"], "eta", "(the step size) must be > 0")
    if "langevin_sigma" not in g:
        raise ValueError("algorithm='noisy-gd' needs langevin_sigma= (the noise scale sigma > 0)")
    ls = _positive(kw["langevin_sigma"], "langevin_sigma", "must be > 0 (for noiseless training use "
                   "algorithm='sgd')")
    nb = kw["neighbours"]
    if nb == "all":
        kl = lib.DPT_KL_ALL
    elif nb == "none":
        kl = 0
    else:
        kl = 0
        bits = {"remove": lib.DPT_KL_REMOVE, "add": lib.DPT_KL_ADD, "replace": lib.DPT_KL_REPLACE}
        for part in (nb.split(",") if isinstance(nb, str) else list(nb)):
            if part not in bits:
                raise ValueError("neighbours: expected 'all', 'none' or a list of remove, add, replace, got %r"
                                 % (nb,))
            kl |= bits[part]
    if kw["kl_constant"] not in ("exact", "paper"):
        raise ValueError("kl_constant: expected 'exact' or 'paper', got %r" % (kw["kl_constant"],))
    _int(kw["replace_candidates"], "replace_candidates", 1)
    if "lr" in g:
        raise ValueError("lr: noisy-gd takes its step size from eta= (got lr=%r)" % kw["lr"])
    if kw["momentum"] != 0 or kw["weight_decay"] != 0:
        raise ValueError("momentum/weight_decay: noisy-gd is plain gradient descent (Eq. 4)")
    if kw["lr_schedule"] != "constant":
        raise ValueError("lr_schedule: noisy-gd uses a constant step size")
    cfg.optim = lib.dpt_optim_defaults(lib.DPT_OPT_SGD)
    cfg.optim.lr = eta
    if (kl & (lib.DPT_KL_ADD | lib.DPT_KL_REPLACE)) and c.test is None:
        raise ValueError("neighbours=%r: the add/replace neighbours are test records (x_test, y_test), and there is "
                         "no test set" % (nb,))
    n = lib.dpt_noisy_gd_config_defaults()
    n.eta, n.sigma, n.linearized, n.kl = eta, ls, int(bool(kw["linearized"])), kl
    n.constant = lib.DPT_KL_EXACT if kw["kl_constant"] == "exact" else lib.DPT_KL_PAPER
    n.heldout = c.test.ptr if c.test is not None else ffi.NULL
    n.replace_candidates = int(kw["replace_candidates"])
    out = ffi.new("dpt_algo **")
    check(lib.dpt_algo_noisy_gd_new(ffi.new("dpt_noisy_gd_config *", n), out), "algorithm noisy-gd")
    return out[0]


# what a private run's epsilon does not cover with validation=N (the CLI's text)
_VALIDATION_NOTE = b"the validation metrics (--validation): noiseless statistics of examples held out of the " \
                   b"private training split"

# the algorithms that train on regression targets (dpt_algo.regression)
_REGRESSION = ("sgd", "dpsgd", "pdp-sgd", "proportional-noise")

_MAKERS = {"sgd": _make_sgd, "dpsgd": _make_dpsgd, "pdp-sgd": _make_pdpsgd, "proportional-noise": _make_propnoise,
           "dpulr": _make_dpulr, "ulr": _make_ulr, "dpmac": _make_dpmac, "mac": _make_mac,
           "noisy-gd": _make_noisy_gd}

# the CLI's defaults (cli/cmd_train.c, cli/algo_*.c)
_DEFAULTS = dict(
    model="mlp:784-128-64-32-10:gelu", algorithm="sgd", x_test=None, y_test=None, validation=0, n_classes=0,
    input_shape=None,
    loss="ce", init="default", optimizer="adam", lr=None, momentum=0.0, weight_decay=0.0, lr_schedule="constant",
    sampler="shuffle", batch_size=256, sample_rate=None, epochs=5, max_steps=0, seed=0, threads=0, shards=0,
    out_dir=None, runs_dir=None, resume=False, overwrite=False, init_params=None, init_source=None, freeze=None,
    regression=False,
    secret_dir=None,
    no_feature_cache=False,
    physical_batch=0,
    ema=0.0, ema_warmup=False, augment="none", aug_mult=1,
    sigma=None, clip=1.0, clip_mode="flat", target_epsilon=None, delta=1e-5, secure=False, force=False,
    allow_ledger_mismatch=False,
    adaptive_quantile=None, adaptive_lr=0.2, adaptive_sigma_b=None,
    feature_norm_sigma=None, feature_norm_clip=None,
    kappa=0.0, pdp_sigma=0.0, lambda_=0.0, prop_sigma=0.0,
    sigma0=None, min_batch=None, ulr_noise="explicit", copies=32, ulr_std=0.0, modules="auto", antithetic=False,
    baseline=None, z_steps=30, z_lr=0.003, pca_dims=0, pca_sigma=None, center_clip=None, center_sigma=None,
    eta=0.01, langevin_sigma=None, linearized=False, neighbours="all", kl_constant="exact", replace_candidates=1,
    progress=None, verbose=True, history="auto", on_epoch=None, on_interrupt="raise",
)


# ==== arguments shared with dptrain.audit.run (the same names, checks and messages) ====

def _refuse_dataset_object(x):
    """A torch Dataset (or any indexable of (example, label) pairs) is not an array: numpy
    would turn it into an object array with a FutureWarning and then fail on its ragged
    shape. Refused in one line that says what to pass instead."""
    if isinstance(x, np.ndarray) or not hasattr(x, "__getitem__") or not hasattr(x, "__len__"):
        return
    if type(x).__module__.startswith("torch.utils.data") or any(
            c.__name__ == "Dataset" and c.__module__.startswith("torch.utils.data") for c in type(x).__mro__):
        raise TypeError("x is a torch Dataset (%s): dptrain.train takes arrays; pass x and y as arrays, e.g. "
                        "x, y = map(np.stack, zip(*((np.asarray(a), b) for a, b in dataset))), or train your "
                        "own loop with PrivateGradients and a DataLoader (docs/python.md)" % type(x).__name__)


def _user_stacklevel():
    """warnings.warn's stacklevel for a warning raised by the function that calls this one,
    such that it names the first frame outside the dptrain package (the user's line)."""
    here = os.path.dirname(os.path.abspath(__file__))
    f, level = sys._getframe(1), 1
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == here:
        f, level = f.f_back, level + 1
    return level


def _features(x, input_shape, stacklevel=None):
    """(X, (C, H, W)): features x as C-contiguous float32 [n, D] (as_features) and the shape
    of one example, from input_shape or inferred from a 3- or 4-dimensional x (a warning
    for an x that looks channels-last, reported at the user's line)."""
    _refuse_dataset_object(x)
    xa = np.asarray(x) if not isinstance(x, np.ndarray) else x
    shape = input_shape
    if shape is None and getattr(xa, "ndim", 0) >= 3:
        shape = xa.shape[1:] if xa.ndim == 4 else (1,) + tuple(xa.shape[1:])
        if xa.ndim == 4 and xa.shape[3] in (1, 3, 4) and xa.shape[1] not in (1, 3, 4):
            warnings.warn("x has shape %s: read as [n, C, H, W] (channels first), so C = %d; images stored "
                          "channels last ([n, H, W, C]) need x.transpose(0, 3, 1, 2)" % (tuple(xa.shape), xa.shape[1]),
                          stacklevel=_user_stacklevel() if stacklevel is None else stacklevel)
    X = as_features(x, "x")
    if shape is None:
        shape = (1, 1, X.shape[1])
    shape = tuple(int(s) for s in shape)
    if len(shape) == 1:
        shape = (1, 1) + shape
    if len(shape) != 3 or int(np.prod(shape)) != X.shape[1]:
        if input_shape is None:
            raise ValueError("x has shape %s: expected [n, features], [n, H, W] or [n, C, H, W] (or pass "
                             "input_shape=(C, H, W))" % (tuple(xa.shape),))
        raise ValueError("input_shape %r does not match the %d features per example" % (input_shape, X.shape[1]))
    return X, shape


def _spec_of(model, shape, also=""):
    """The spec string of model= given as a spec or a list of dptrain.layers objects (built
    by the library's model builder for inputs of `shape`); `also` names what else the
    caller takes, for the TypeError."""
    if isinstance(model, str):
        return model
    if isinstance(model, (list, tuple)) and all(isinstance(m, Layer) for m in model):
        return build_spec(model, shape)
    if isinstance(model, Layer):
        return build_spec([model], shape)
    raise TypeError("model must be a spec string%s a list of dptrain.layers objects%s, got %r"
                    % ("," if also else " or", (" or " + also) if also else "", model))


def _optim_config(cfg, kw, given):
    """cfg.optim and cfg.schedule from optimizer, lr (default: the optimizer's), momentum,
    weight_decay and lr_schedule, checked by the library."""
    opt = kw["optimizer"]
    if opt not in ("sgd", "adam"):
        raise ValueError("optimizer: expected 'sgd' or 'adam', got %r" % (opt,))
    cfg.optim = lib.dpt_optim_defaults(lib.DPT_OPT_SGD if opt == "sgd" else lib.DPT_OPT_ADAM)
    if "lr" in given:
        cfg.optim.lr = _positive(kw["lr"], "lr")
    cfg.optim.momentum = float(kw["momentum"])
    cfg.optim.weight_decay = float(kw["weight_decay"])
    check(lib.dpt_optim_validate(ffi.addressof(cfg, "optim")), "lr/momentum/weight_decay")
    check(lib.dpt_schedule_parse(cstr(kw["lr_schedule"], "lr_schedule"), ffi.addressof(cfg, "schedule")),
          "lr_schedule")


def _init_scheme(name):
    init = ffi.new("dpt_init_scheme *")
    check(lib.dpt_init_parse(cstr(name, "init"), init), "init")
    return init[0]


def _pdp_values(kw, given, optim):
    """(lambda, kappa, sigma) of pdp-sgd from kappa, or pdp_sigma (the library derives
    kappa_t = (eta_t pdp_sigma)^2 each step), and lambda_. The paper's form is for plain SGD;
    with Adam or momentum it is our mapping of that lr, and a warning says so."""
    if "kappa" in given and "pdp_sigma" in given:
        raise ValueError("kappa and pdp_sigma: give one of them, not both")
    kappa = _nonneg(kw["kappa"], "kappa") if "kappa" in given else 0.0
    sigma = 0.0
    if "pdp_sigma" in given:
        sigma = _nonneg(kw["pdp_sigma"], "pdp_sigma")
        if optim.kind != lib.DPT_OPT_SGD or optim.momentum != 0:
            warnings.warn("pdp_sigma with Adam or momentum: kappa = (lr pdp_sigma)^2 is our mapping of its lr; the "
                          "paper derives kappa = (eta sigma)^2 for plain SGD only (docs/pdpsgd.md)", stacklevel=3)
    return _nonneg(kw["lambda_"], "lambda_"), kappa, sigma


def _prop_sigma(kw, given):
    if "prop_sigma" not in given:
        raise ValueError("algorithm='proportional-noise' needs prop_sigma=")
    return _positive(kw["prop_sigma"], "prop_sigma")


def _test_dataset(x_test, y_test, dim, train_ds, n_classes_given, shape, targets=0):
    """(XT, YT, Dataset) of the test split for a training set train_ds with dim features:
    labels (targets=0) within the training set's classes, or `targets` regression targets."""
    XT = as_features(x_test, "x_test", dim)
    if targets:
        YT = as_targets(y_test, "y_test", XT.shape[0], targets)
    else:
        YT = as_labels(y_test, "y_test", XT.shape[0])
    if not targets and not n_classes_given and YT.size and YT.max() >= train_ds.n_classes:
        i = int(np.argmax(YT >= train_ds.n_classes))
        raise ValueError("y_test[%d] = %d is outside [0, %d): the number of classes comes from the training "
                         "labels y (largest %d); pass n_classes= when a split lacks a class"
                         % (i, YT[i], train_ds.n_classes, train_ds.n_classes - 1))
    return XT, YT, Dataset(XT, YT, train_ds.n_classes, shape, name="x_test, y_test")


def _call_interruptibly(call, interrupt, name):
    """Runs call() -- a long C call (cffi releases the GIL) whose callbacks return
    interrupt.is_set() to stop it -- on a background thread; Ctrl-C meanwhile sets
    `interrupt` and the call is awaited. Returns (call's result, whether Ctrl-C came)."""
    result = [None]
    done = threading.Event()

    def work():
        try:
            result[0] = call()
        finally:
            done.set()

    th = threading.Thread(target=work, name=name, daemon=True)
    interrupted = [False]

    def on_sigint(signum, frame):  # the next callback returns 1: the C side stops cleanly
        interrupted[0] = True
        interrupt.set()

    # Ctrl-C while the C call runs: a handler of our own that only sets the flag. Catching
    # the KeyboardInterrupt the default handler raises left windows: Python raises it at any
    # bytecode boundary of this thread, also outside the try around the wait (the loop test,
    # its back-edge). A fresh-clone test run under load lost a Ctrl-C twice that way, we
    # believe (the training thread ran on); with the handler no such window is left. Only
    # the main thread can install one; signal handlers run nowhere else.
    own = HAVE_CALLBACKS and threading.current_thread() is threading.main_thread()
    prev = signal.signal(signal.SIGINT, on_sigint) if own else None
    try:
        th.start()
        # Poll an Event, not Thread.join: a KeyboardInterrupt inside join(timeout) can leave
        # the Thread believing it has ended while it still runs (CPython issue 90882).
        while not done.wait(0.05):
            pass
    finally:
        if own:  # prev may be None (a handler set from C): SIG_DFL is the closest
            signal.signal(signal.SIGINT, prev if prev is not None else signal.SIG_DFL)
    th.join()
    return result[0], interrupted[0]


def _initial_params(start, spec, source, algo_name):
    """(flat float32 array, source text, option name) of the starting parameters `start` (a
    Model, {name: array} with every tensor, or a flat array of all parameters) for a model of
    `spec`, checked before anything is created; the source defaults to where they came from."""
    if not hasattr(lib, "dpt_trainer_set_initial_params"):
        raise NotImplementedError("this libdptrain cannot start a run from given parameters (it has no "
                                  "dpt_trainer_set_initial_params)")
    if isinstance(start, Model):
        what, src = "model", start.source
        with start._lock:  # not torn by a set_parameters on another thread
            flat = np.frombuffer(ffi.buffer(start._m.theta, start.n_params * 4), dtype=np.float32).copy()
        if start.ledger is not None and algo_name in _PRIVATE:
            warnings.warn("model: the dptrain.Model comes from a private run (%s): this run's epsilon covers this "
                          "run only; if both runs used the same data, their spends compose (at worst the epsilons "
                          "and deltas add up)" % start.source, stacklevel=_user_stacklevel())
    else:
        what, src = "init_params", "parameters given to dptrain.train"
        tmp = Model._from_spec(spec, threads=1)
        if isinstance(start, dict):
            names = list(tmp.parameters())
            missing = [k for k in names if k not in start]
            extra = [k for k in start if k not in names]
            if missing or extra:
                raise ValueError("init_params: the model %s has the tensors %s; %s%s (a PyTorch module converts "
                                 "with dptrain.from_torch(module, input_shape), then pass it as model=)" % (
                                     spec, ", ".join(names), "missing: %s" % ", ".join(missing) if missing else "",
                                     ("; " if missing else "") + "unknown: %s" % ", ".join(map(str, extra))
                                     if extra else ""))

            def host(v):  # torch tensors (a state_dict) without importing torch
                return v.detach().cpu().numpy() if hasattr(v, "detach") else v
            try:
                tmp.set_parameters({k: host(v) for k, v in start.items()})
            except (KeyError, ValueError) as e:
                raise ValueError("init_params: %s" % (e.args[0] if e.args else e)) from None
            flat = np.frombuffer(ffi.buffer(tmp._m.theta, tmp.n_params * 4), dtype=np.float32).copy()
        else:
            a = start.detach().cpu().numpy() if hasattr(start, "detach") else np.asarray(start)
            if a.dtype.kind not in "fiu":
                raise TypeError("init_params: expected a dict of arrays, a flat real array or (as model=) a "
                                "dptrain.Model, got %s" % (a.dtype,))
            if a.ndim != 1 or a.shape[0] != tmp.n_params:
                raise ValueError("init_params: a flat array of the model's %d parameters (model %s) is expected, "
                                 "got shape %s" % (tmp.n_params, spec, a.shape))
            flat = np.ascontiguousarray(a, dtype=np.float32)
            bad = np.flatnonzero(~np.isfinite(flat))
            if bad.size:
                raise ValueError("init_params[%d] = %r is not finite" % (bad[0], float(flat[bad[0]])))
    if source is None:  # ours, naming a path: one line of text, a long one cut to its tail
        src = "".join("?" if ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0 or 0xd800 <= ord(ch) < 0xe000 else ch
                      for ch in src)
        if len(src.encode()) > lib.DPT_INIT_SOURCE_MAX:
            src = "..." + src.encode()[-(lib.DPT_INIT_SOURCE_MAX - 3):].decode(errors="ignore")
    else:  # the caller's text, as the library takes it
        src = source
        if not isinstance(src, str):
            raise TypeError("init_source must be a str, got %r" % (src,))
        if len(src.encode("utf-8", "surrogatepass")) > lib.DPT_INIT_SOURCE_MAX:
            raise ValueError("init_source is longer than %d bytes (UTF-8)" % lib.DPT_INIT_SOURCE_MAX)
        if any(ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0 or 0xd800 <= ord(ch) < 0xe000 for ch in src):
            raise ValueError("init_source must be one line of text without control characters")
    return flat, src, what


_F = TypeVar("_F", bound=Callable[..., Any])


def _flat_keywords(fn: _F) -> _F:
    """The deprecated path of train(): the algorithm's options given as flat keywords
    (train(x, y, algorithm="dpsgd", sigma=1.0)), as before the configuration classes. The
    signature editors and help() show is fn's (functools.wraps: __wrapped__)."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        old = {k: kwargs.pop(k) for k in list(kwargs) if k not in sig.parameters}
        if not old:
            return fn(*args, **kwargs)
        unknown = sorted(k for k in old if k not in _DEFAULTS)
        if unknown:
            raise TypeError("train() got unexpected keyword argument(s): %s" % ", ".join(unknown))
        algo = kwargs.get("algorithm", "sgd")
        if isinstance(algo, Algorithm):
            k = sorted(old)[0]
            if k in {f.name for f in dataclasses.fields(algo)}:
                raise TypeError("%s: an option of the algorithm: give it in its configuration, algorithm=dptrain.%s("
                                "..., %s=...)" % (k, type(algo).__name__, k))
            raise TypeError("%s is not an option of dptrain.%s (it is one of %s)" % (
                k, type(algo).__name__, ", ".join("dptrain." + c for c in option_owners(k))))
        cls = ALGORITHM_CLASSES.get(_ALIASES.get(algo, algo)) if isinstance(algo, str) else None
        if cls is not None and all(k in {f.name for f in dataclasses.fields(cls)} for k in old):
            warnings.warn("dptrain.train(..., %s): the algorithm's options as keywords are deprecated; write "
                          "algorithm=dptrain.%s(%s)" % (", ".join("%s=..." % k for k in sorted(old)), cls.__name__,
                                                        ", ".join("%s=..." % k for k in sorted(old))),
                          DeprecationWarning, stacklevel=2)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        flat = dict(bound.arguments)
        x, y = flat.pop("x"), flat.pop("y")
        flat.update(old)
        return _train_flat(x, y, flat)
    return call  # type: ignore[return-value]


PathLike = Union[str, "os.PathLike[str]"]


@_flat_keywords
def train(
    x: Any,
    y: Any,
    *,
    model: Union[str, Model, Layer, Sequence[Layer]] = _DEFAULTS["model"],
    algorithm: Union[str, Algorithm] = "sgd",
    x_test: Optional[Any] = None,
    y_test: Optional[Any] = None,
    validation: int = 0,
    epochs: int = 5,
    batch_size: int = 256,
    sample_rate: Optional[float] = None,
    max_steps: int = 0,
    physical_batch: int = 0,
    ema: float = 0.0,
    ema_warmup: bool = False,
    augment: Literal["none", "crop", "crop-flip"] = "none",
    aug_mult: int = 1,
    optimizer: Literal["adam", "sgd"] = "adam",
    lr: Optional[float] = None,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    lr_schedule: str = "constant",
    sampler: Optional[Literal["shuffle", "poisson", "full", "poisson-reject"]] = None,
    loss: Optional[str] = None,
    init: str = "default",
    regression: bool = False,
    n_classes: Optional[int] = None,
    input_shape: Optional[Sequence[int]] = None,
    init_params: Optional[Any] = None,
    init_source: Optional[str] = None,
    freeze: Optional[Union[str, Sequence[str]]] = None,
    no_feature_cache: bool = False,
    seed: int = 0,
    threads: int = 0,
    shards: int = 0,
    out_dir: Optional[PathLike] = None,
    runs_dir: Optional[PathLike] = None,
    resume: bool = False,
    overwrite: bool = False,
    secret_dir: Optional[PathLike] = None,
    progress: Optional[bool] = None,
    verbose: bool = True,
    history: Literal["auto", "list", "pandas"] = "auto",
    on_epoch: Optional[Callable[[Dict[str, Any]], Any]] = None,
    on_interrupt: Literal["raise", "return"] = "raise",
) -> Run:
    """Trains a model on features x [n, D] (or [n, C, H, W]) and labels y [n] (regression=True:
    real-valued targets y [n] or [n, k]); returns a Run.

        run = dptrain.train(x, y, model="mlp:784-128-10:relu",
                            algorithm=dptrain.DPSGD(target_epsilon=3.0), epochs=5,
                            x_test=xt, y_test=yt)

    The options are the CLI's flags of `dptrain train` (underscores for dashes) with its
    defaults and checks: the same configuration gives the same run, bit for bit.

    algorithm: a name ("sgd", "dpsgd", "pdp-sgd", "proportional-noise", "dpulr", "ulr",
      "dpmac", "mac", "noisy-gd") or its configuration with the algorithm's own options:
      dptrain.SGD(), DPSGD(sigma, clip, clip_mode, target_epsilon, delta, secure, force,
      allow_ledger_mismatch), PDPSGD, ProportionalNoise, DPULR, ULR, DPMAC, MAC, NoisyGD
      (dptrain.algorithms; help(dptrain.DPSGD)). The options as flat keywords of train()
      (sigma=..., clip=...) still work but are deprecated (a DeprecationWarning).
    model: a spec string ("mlp:784-128-10:relu", "cnn:1x28x28:conv16k5,relu,fc10"), a list
      of dptrain.layers objects, or a dptrain.Model (Model.load, from_torch, a Run's .model):
      the run then starts from its parameters (fine-tuning).
    init_params: starting parameters for a model given as a spec or layers: {name: array}
      with every tensor (as Model.parameters() names them), or a flat array of all of them;
      None: the random initialization `init`. init_source: text recorded with them in the
      ledger and checkpoints.
    freeze: layers that keep their starting values (["conv1", "conv2"] or "conv1,conv2";
      sgd and dpsgd, which then clips and noises the trained layers only); the frozen
      trunk's output is computed once and kept unless no_feature_cache=True.
    x_test, y_test: a test split, evaluated after every epoch (give both or neither).
    validation: N > 0 holds out the last N rows of x, y (never trained on) and evaluates on
      them instead of a test split (not with x_test), to choose hyperparameters without the
      test set; the epoch results keep their test_* names and say eval_split="validation".
      Those rows are private data: a private run's epsilon says it does not cover their
      metrics (the CLI's --validation; docs/dpsgd.md).
    epochs, batch_size, sample_rate (Poisson q; None: batch_size / n), max_steps (0: no
      limit), physical_batch (examples per forward/backward pass, 0 = the whole batch: a
      larger batch is accumulated over passes and noised once, so memory is bounded by it;
      docs/dpsgd.md). ema: parameter averaging, e <- e + (1 - ema)(theta - e) after every
      step (0 = off; ema_warmup=True: decay min(ema, (1 + t)/(10 + t))); each epoch also
      reports test_accuracy_ema, and the checkpoint's model is the average (post-processing,
      no privacy cost). augment: "none" | "crop" | "crop-flip" (random crop after 4-pixel
      reflect padding, and a horizontal flip), aug_mult: K copies of each example averaged
      before clipping (dpsgd on image models; same epsilon). optimizer "adam" | "sgd", lr (None: adam 1e-3, sgd 0.1), momentum,
      weight_decay, lr_schedule ("constant" | "step:GAMMA:EVERY" | "exp:GAMMA").
    sampler: None = the algorithm's ("shuffle"; dpsgd and dpmac "poisson", dpulr
      "poisson-reject", noisy-gd "full"). loss: None = "ce" ("bce"; "mse" with
      regression=True or for autoencoders). init: the initialization scheme ("default" | "lecun" |
      "he" | "xavier" | "ntk" | "torch": PyTorch's nn.Linear / nn.Conv2d default).
    regression: y and y_test are real-valued targets trained with the squared error (sgd,
      dpsgd, pdp-sgd, proportional-noise); the history reports test_mse. With
      loss="token-ce": y [n, T] are next-token ids (floats holding integers) for a model with
      V logits at each of T positions (gpt_tiny), the loss the mean over positions of each
      example's cross-entropy; the history reports test_loss (perplexity exp(test_loss)).
    n_classes: None = the largest label + 1. input_shape: (C, H, W) of flat x.
    seed: 0 = drawn from the OS and kept in the run's secret file (secret_dir); a seed S > 0 makes the
      run reproducible, and whoever knows S can regenerate its batches and noise
      (Run.seed_source). threads: 0 = all cores. shards: data-parallel shards (0: one).
    out_dir: the run directory (checkpoint, ledger.json, metrics.jsonl: files that can be
      shared); a non-empty one is refused unless resume=True (continue the run in it) or
      overwrite=True (replace it, and remove that run's secret file). None (and no
      runs_dir): no files.
    secret_dir: where the run's secret file goes (its key, seed and random streams: resume
      needs it, never publish it): secret_dir/<run id>.secret, mode 0600, outside out_dir
      (Run.secret_path). None: $DPTRAIN_SECRETS_DIR, else $XDG_STATE_HOME/dptrain/secrets,
      else ~/.local/state/dptrain/secrets. The directory is made mode 0700; one others can
      enter is refused. To resume a run moved to another machine, copy its secret file
      there too and give its directory. Older runs kept it in out_dir (dptrain.secret):
      resume reads it there and moves it.
    runs_dir: instead of out_dir, a parent directory (e.g. "runs"): each run gets a new
      directory runs_dir/YYYYMMDD-HHMMSS-XXXX and runs_dir/latest points to the newest, so
      the same call can run again (the CLI without --out); with resume=True the run in
      runs_dir/latest is continued.
    progress: None = a bar on stderr when it is a terminal. verbose: epoch lines on stderr.
    history: "auto" (a pandas DataFrame when pandas is installed, else a list of dicts),
      "list" or "pandas". on_epoch: called with each epoch's dict; a true return stops the
      run. on_interrupt: Ctrl-C saves the checkpoint and ledger (with a run directory) and
      then raises KeyboardInterrupt ("raise") or returns the partial Run ("return").
    """
    flat: Dict[str, Any] = dict(
        model=model, x_test=x_test, y_test=y_test, validation=validation, epochs=epochs, batch_size=batch_size, sample_rate=sample_rate,
        max_steps=max_steps, physical_batch=physical_batch, ema=ema, ema_warmup=ema_warmup, augment=augment,
        aug_mult=aug_mult, optimizer=optimizer, lr=lr, momentum=momentum, weight_decay=weight_decay,
        lr_schedule=lr_schedule, sampler=sampler, loss=loss, init=init, regression=regression, n_classes=n_classes,
        input_shape=input_shape, init_params=init_params, init_source=init_source, freeze=freeze,
        no_feature_cache=no_feature_cache, seed=seed, threads=threads, shards=shards, out_dir=out_dir,
        runs_dir=runs_dir, resume=resume, overwrite=overwrite, secret_dir=secret_dir, progress=progress,
        verbose=verbose, history=history,
        on_epoch=on_epoch, on_interrupt=on_interrupt)
    if isinstance(algorithm, Algorithm):
        flat["algorithm"] = algorithm.name
        flat.update(algorithm.options())
    elif isinstance(algorithm, type) and issubclass(algorithm, Algorithm):
        raise TypeError("algorithm=dptrain.%s: give an instance with its options, algorithm=dptrain.%s(...)"
                        % (algorithm.__name__, algorithm.__name__))
    elif isinstance(algorithm, str):
        flat["algorithm"] = algorithm
    else:
        raise TypeError("algorithm must be a str (a name) or an algorithm configuration (dptrain.DPSGD(...), ...), "
                        "got %r" % (algorithm,))
    return _train_flat(x, y, flat)


def _train_flat(x, y, kwargs):
    """train() with every option as one flat keyword (the CLI's flags, underscores for
    dashes): the checks and the run. A keyword left out or None is "not given"."""
    unknown = sorted(set(kwargs) - set(_DEFAULTS))
    if unknown:
        raise TypeError("train() got unexpected keyword argument(s): %s" % ", ".join(unknown))
    given = {k for k, v in kwargs.items() if v is not None}
    kw = dict(_DEFAULTS)
    kw.update({k: v for k, v in kwargs.items() if v is not None})

    algo_name = kw["algorithm"]
    if not isinstance(algo_name, str):
        raise TypeError("algorithm must be a str, got %r" % (algo_name,))
    algo_name = _ALIASES.get(algo_name, algo_name)
    if algo_name not in _MAKERS:
        raise ValueError("algorithm: unknown algorithm %r (available: %s)" % (kw["algorithm"], ", ".join(ALGORITHMS)))
    for k in given:
        if k in _ALGO_OPTIONS and algo_name not in _ALGO_OPTIONS[k]:
            raise ValueError("%s is an option of algorithm %s, not of %s" % (k, " / ".join(_ALGO_OPTIONS[k]),
                                                                           algo_name))
        if k in _PRIVACY_OPTIONS and algo_name not in _PRIVATE:
            raise ValueError("%s: algorithm %r is not a differentially private algorithm (those are dpsgd, dpulr, "
                             "dpmac)" % (k, algo_name))
    if kw["on_interrupt"] not in ("raise", "return"):
        raise ValueError("on_interrupt must be 'raise' or 'return', got %r" % (kw["on_interrupt"],))
    if kw["history"] not in ("auto", "list", "pandas"):
        raise ValueError("history must be 'auto', 'list' or 'pandas', got %r" % (kw["history"],))
    if kw["history"] == "pandas":  # before training, not after it (the Run would be lost)
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise ImportError("history='pandas' needs pandas, which is not installed (use history='list' or "
                              "'auto')") from None

    # ---- data ----
    X, shape = _features(x, kw["input_shape"])
    regression = bool(kw["regression"])
    if regression:  # real-valued targets, trained with the squared error (dpt_dataset_from_targets)
        if "n_classes" in given:
            raise ValueError("n_classes: not with regression=True (regression targets have no classes)")
        token = "loss" in given and kw["loss"] in ("token-ce", "token_ce")
        if "loss" in given and not token and kw["loss"] not in ("mse", "squared", "squared-error", "squared_error"):
            raise ValueError("loss %r: regression=True trains with the squared error, loss='mse' (the default then), "
                             "or with loss='token-ce' on next-token ids" % (kw["loss"],))
        if algo_name not in _REGRESSION:
            raise ValueError("regression=True: not with algorithm %r (%s train on regression targets)"
                             % (algo_name, ", ".join(_REGRESSION)))
        kw["loss"] = "token-ce" if token else "mse"
        Y = as_targets(y, "y", X.shape[0])
    else:
        Y = as_labels(y, "y", X.shape[0])
    if (kw["x_test"] is None) != (kw["y_test"] is None):
        raise ValueError("x_test and y_test: give both or neither")
    _int(kw["n_classes"], "n_classes", 0)
    if isinstance(kw["validation"], bool):  # True is not a row count
        raise TypeError("validation must be a number of rows (an int), got %r" % (kw["validation"],))
    held = _int(kw["validation"], "validation", 0)
    if held:  # the last rows are the evaluation set (the CLI's --validation)
        if kw["x_test"] is not None:
            raise ValueError("validation=%d: not with x_test, y_test (the held-out rows are the evaluation set)" % held)
        if held >= X.shape[0]:
            raise ValueError("validation=%d: x has only %d rows; hold out fewer, so that some remain to train on"
                             % (held, X.shape[0]))
        kw["x_test"], kw["y_test"] = X[-held:], Y[-held:]
        X, Y = X[:-held], Y[:-held]

    # ---- model ----
    model = kw["model"]
    start = None  # the starting parameters' source (Model or init_params), for a fresh run
    if isinstance(model, Model):
        if getattr(model, "_blank", False):
            raise ValueError("model: a Model.from_spec(%r) has all parameters 0 (it is for looking at the layers): "
                             "give its spec, model=%r, to train from a random initialization, or set_parameters "
                             "first" % (model.spec, model.spec))
        spec, start = model.spec, model
    else:
        spec = _spec_of(model, shape, also="a dptrain.Model")
    if "init_params" in given:
        if start is not None:
            raise ValueError("init_params: model is a dptrain.Model, which brings its own parameters (give its spec, "
                             "model.spec, to start from init_params instead)")
        start = kw["init_params"]
    if start is not None and kw["resume"]:
        raise ValueError("%s: a resumed run continues from its checkpoint's parameters (give the model as a spec "
                         "string to resume)" % ("init_params" if "init_params" in given else "model=dptrain.Model"))
    if start is not None and algo_name == "noisy-gd":
        raise ValueError("%s: not for noisy-gd (its KL estimate is a statement about its random initialization, "
                         "init)" % ("init_params" if "init_params" in given else "model=dptrain.Model"))
    if "init_source" in given and start is None:
        raise ValueError("init_source: only with starting parameters (init_params or model=dptrain.Model)")
    if isinstance(start, Model) and start.path and kw["overwrite"] and kw["out_dir"] is not None and \
            os.path.realpath(os.path.dirname(start.path)) == os.path.realpath(os.fspath(kw["out_dir"])):
        raise ValueError("model: the dptrain.Model was loaded from %s, in out_dir, which overwrite=True would empty "
                         "(the checkpoint and its ledger would be lost): write the new run to another out_dir"
                         % start.path)
    if start is not None:
        start = _initial_params(start, spec, kw["init_source"], algo_name)
    freeze = None
    if "freeze" in given:
        if not hasattr(lib, "dpt_model_freeze_parse"):
            raise NotImplementedError("this libdptrain cannot freeze layers (rebuild the package against a newer "
                                      "library)")
        freeze = _freeze_spec(kw["freeze"])
    n_noised = _n_trained(spec, freeze) if freeze else None  # checked before the C dataset is built

    # ---- run configuration (cmd_train.c) ----
    cfg = ffi.new("dpt_train_config *", lib.dpt_train_config_defaults())
    keep = []

    def cs(s, what):
        b = ffi.new("char[]", cstr(s, what))
        keep.append(b)
        return b

    _optim_config(cfg, kw, given)
    loss = ffi.new("dpt_loss_kind *")
    check(lib.dpt_loss_parse(cstr(kw["loss"], "loss"), loss), "loss")
    cfg.loss = loss[0]
    cfg.init = _init_scheme(kw["init"])
    sampler = kw["sampler"]
    if sampler not in _SAMPLERS or (sampler == "poisson-reject" and algo_name != "dpulr"):
        raise ValueError("sampler: expected 'shuffle', 'poisson' or 'full' (dpulr: 'poisson-reject'), got %r"
                         % (sampler,))
    cfg.batch_size = _int(kw["batch_size"], "batch_size", 1)
    cfg.epochs = _int(kw["epochs"], "epochs", 1)
    cfg.threads = _int(kw["threads"], "threads", 0, 1024)
    cfg.shards = _int(kw["shards"], "shards", 0, 65536)
    cfg.seed = _int(kw["seed"], "seed", 0, 2 ** 64 - 1)
    cfg.max_steps = _int(kw["max_steps"], "max_steps", 0, 2 ** 64 - 1)
    if kw["physical_batch"]:  # examples per forward/backward pass: memory bounded by it
        cfg.physical_batch = _int(kw["physical_batch"], "physical_batch", 0, 2 ** 64 - 1)
    if kw["ema"] or kw["ema_warmup"] or kw["augment"] != "none" or kw["aug_mult"] != 1:  # issue 42 item 4
        if not hasattr(cfg, "ema_decay"):
            raise ValueError("ema, augment and aug_mult need a libdptrain with them (rebuild the library)")
        ema_d = float(kw["ema"])
        if not (0 <= ema_d < 1):
            raise ValueError("ema must be in [0, 1) (0 = no parameter averaging), got %r" % (kw["ema"],))
        if kw["ema_warmup"] and not ema_d:
            raise ValueError("ema_warmup: only with ema=DECAY")
        kinds = {"none": lib.DPT_AUGMENT_NONE, "crop": lib.DPT_AUGMENT_CROP, "crop-flip": lib.DPT_AUGMENT_CROP_FLIP}
        if kw["augment"] not in kinds:
            raise ValueError("augment: expected 'none', 'crop' or 'crop-flip', got %r" % (kw["augment"],))
        cfg.ema_decay = ema_d
        cfg.ema_warmup = 1 if kw["ema_warmup"] else 0
        cfg.augment = kinds[kw["augment"]]
        cfg.aug_mult = _int(kw["aug_mult"], "aug_mult", 1, 64)
    if "sample_rate" in given:
        q = float(kw["sample_rate"])
        if not (0 < q <= 1):
            raise ValueError("sample_rate must be in (0, 1], got %r" % q)
        cfg.sample_rate = q
    cfg.model_spec = cs(spec, "model")
    if freeze:
        cfg.freeze = cs(freeze, "freeze")
    if kw["no_feature_cache"]:
        if not freeze:
            raise ValueError("no_feature_cache: only with freeze (without frozen layers there is nothing to cache)")
        if not hasattr(cfg, "no_feature_cache"):
            raise NotImplementedError("this libdptrain has no feature cache to turn off (no_feature_cache)")
        cfg.no_feature_cache = 1
    out_dir = kw["out_dir"]
    new_run = False  # out_dir is a new directory under runs_dir: runs_dir/latest follows it
    if kw["runs_dir"] is not None:
        out_dir, new_run = _run_dir_in(kw["runs_dir"], out_dir, kw["resume"], kw["overwrite"]), not kw["resume"]
    if out_dir is not None:
        out_dir = os.fspath(out_dir)
        if not out_dir:
            raise ValueError("out_dir: empty directory name")
        # its parents only: the trainer creates out_dir and removes it again when it refuses the run
        os.makedirs(os.path.dirname(os.path.abspath(out_dir)), exist_ok=True)
        cfg.out_dir = cs(out_dir, "out_dir")
    if hasattr(cfg, "overwrite"):  # (a library from before run-directory locking always overwrote)
        cfg.overwrite = int(bool(kw["overwrite"]))
    secret_dir = ffi.NULL
    if kw["secret_dir"] is not None:
        if not hasattr(cfg, "secret_dir"):
            raise NotImplementedError("this libdptrain keeps the run's secret in out_dir (no secret_dir)")
        if not os.fspath(kw["secret_dir"]):
            raise ValueError("secret_dir: empty directory name (None for the default)")
        secret_dir = cs(os.fspath(kw["secret_dir"]), "secret_dir")
        cfg.secret_dir = secret_dir
    if hasattr(cfg, "quiet"):  # a library from before the callbacks printed its epoch lines
        cfg.quiet, cfg.progress = 1, 0
    # Seed 0 (the default): drawn from the OS here, so the releases made before the trainer
    # (DP mean, DP-PCA) and the training share one secret seed; a resume takes the run's from
    # its secret file, so those releases are regenerated, never drawn anew (the CLI's rule).
    if cfg.seed == 0:
        seed, fo = ffi.new("uint64_t *"), ffi.new("int *")
        od = ffi.NULL if out_dir is None else cs(out_dir, "out_dir")
        if hasattr(lib, "dpt_run_seed_resolve_at"):
            check(lib.dpt_run_seed_resolve_at(od, secret_dir, int(bool(kw["resume"])), seed, fo),
                  "resume" if kw["resume"] else "seed")
        else:
            check(lib.dpt_run_seed_resolve(od, int(bool(kw["resume"])), seed, fo), "resume" if kw["resume"] else "seed")
        cfg.seed, cfg.seed_from_os = seed[0], fo[0]
    rj = {"source": "python", "dptrain_python": sys.version.split()[0]}
    if regression:  # as the CLI records --targets: Model.load knows the model predicts targets
        rj["targets"] = int(Y.shape[1])
    eval_split = None
    if held:
        rj["validation"] = held
        eval_split = cfg.eval_split = cs("validation", "eval_split")  # kept alive until the run ends
    cfg.run_json = cs(json.dumps(rj), "run_json")

    train_ds = Dataset(X, Y, kw["n_classes"], shape, name="x, y")
    test_ds = XT = YT = None
    if kw["x_test"] is not None:
        XT, YT, test_ds = _test_dataset(kw["x_test"], kw["y_test"], X.shape[1], train_ds, kw["n_classes"], shape,
                                        targets=int(Y.shape[1]) if regression else 0)
    if algo_name not in ("dpsgd", "dpmac", "dpulr", "noisy-gd"):
        cfg.sampler = _SAMPLERS[sampler]

    c = _Ctx(cfg, kw, given, train_ds.n, test_ds, spec, (X, XT))
    c.keep = keep
    c.n_noised = n_noised  # secure noise: the trained coordinates (None: every parameter)
    algo = _MAKERS[algo_name](c)
    if c.projected is not None:  # DP-PCA: the model trains on the projected features
        P, PT = c.projected
        k = P.shape[1]
        train_ds.free()
        train_ds = Dataset(P, Y, train_ds.n_classes, (1, 1, k), name="x, y (projected)")
        if test_ds is not None:
            test_ds.free()
            test_ds = Dataset(PT, YT, train_ds.n_classes, (1, 1, k), name="x_test, y_test (projected)")
    run = c.run
    if c.pca is not None:
        run.pca_mean, run.pca_components = c.pca
    run.algorithm = algo_name
    run.out_dir = out_dir
    if algo_name in _PRIVATE and run.accounted:
        run.sample_rate = cfg.sample_rate
        run.delta = cfg.delta

    # ---- callbacks and the run ----
    stream = sys.stderr
    bar = kw["progress"] if "progress" in given else bool(getattr(stream, "isatty", lambda: False)())
    state = _State(_Progress(stream, int(cfg.epochs), bool(bar), bool(kw["verbose"]), "validation" if held else "test"),
                   kw["on_epoch"], regression, "validation" if held else None)
    handle = ffi.new_handle(state)
    if HAVE_CALLBACKS:
        cfg.on_step = lib._dpt_py_on_step
        cfg.on_epoch = lib._dpt_py_on_epoch
        cfg.log = lib._dpt_py_log
        cfg.user = handle
    tp = ffi.new("dpt_trainer **")
    st = lib.dpt_trainer_new(cfg, train_ds.ptr, test_ds.ptr if test_ds else ffi.NULL, algo, tp)
    if st != 0:  # the algorithm is owned (and freed) by dpt_trainer_new even on failure
        raise make_error(st, "train")
    trainer = tp[0]
    if new_run:  # the trainer holds the directory now: runs_dir/latest names it (as the CLI does)
        linked = ffi.new("int *")
        st = lib.dpt_run_dir_link_latest(cs(out_dir, "out_dir"), linked)
        if st != 0:
            log.warning("runs_dir: %s; this run is in %s", make_error(st, "runs_dir"), out_dir)
        elif not linked[0]:
            log.warning("runs_dir: %s is not a symbolic link (a run directory of an older dptrain?): left as it is; "
                        "this run is in %s", os.path.join(os.path.dirname(out_dir), "latest"), out_dir)
    if freeze:
        run.frozen = ffi.string(lib.dpt_trainer_frozen(trainer, ffi.NULL)).decode().split(",")
    try:
        if held and (algo_name in _PRIVATE or algo_name == "noisy-gd"):  # as the CLI: a stated guarantee
            # the held-out rows' metrics are statistics of private data
            check(lib.dpt_trainer_exclude_from_guarantee(trainer, _VALIDATION_NOTE), "validation")
        if start is not None:
            flat, src, what = start
            check(lib.dpt_trainer_set_initial_params(trainer, ffi.cast("const float *", ffi.from_buffer(flat)),
                                                     flat.shape[0], cstr(src, "init_source")), what)
        if kw["resume"]:
            check(lib.dpt_trainer_resume(trainer), "resume")
        else:  # pre-training releases (DP mean, DP-PCA) go into the fresh run's ledger
            for sens, mult, label in c.releases:
                check(lib.dpt_trainer_add_gaussian_release(trainer, sens, mult, cstr(label, "label")), label)
            if c.feature_norm is not None:  # DP channel statistics for the fbn layer, in the ledger first
                check(lib.dpt_trainer_feature_norm(trainer, *c.feature_norm), "feature_norm_sigma")
        last = ffi.new("dpt_epoch_result *")
        steps_before = int(lib.dpt_trainer_step(trainer))

        def call():
            st = lib.dpt_trainer_run(trainer, last)
            # the library's error message is per thread: read it on this one
            return st, make_error(st, "train") if st != 0 else None

        # Ctrl-C: the next on_step returns 1; the trainer saves and stops
        status, interrupted = _call_interruptibly(call, state.interrupt, "dptrain-train")
        if state.progress.drawn:
            stream.write("\r\x1b[K")
        if status is None:
            raise RuntimeError("dptrain: the training thread ended without a result")
        if status[0] != 0:
            raise status[1]
        if state.error is not None and not isinstance(state.error, KeyboardInterrupt):
            raise state.error
        # ---- results ----
        m = lib.dpt_trainer_model(trainer)
        lp = lib.dpt_trainer_ledger(trainer)
        if lp != ffi.NULL and run.accounted:
            run.ledger = Ledger._copy_of(lp)
        run.model = Model._from_spec(ffi.string(m.spec).decode(), m.theta, threads=int(cfg.threads),
                                     loss=kw["loss"], ledger=run.ledger, algorithm=algo_name, delta=run.delta,
                                     steps=int(lib.dpt_trainer_step(trainer)),
                                     source="the result of dptrain.train (%s, %d steps)" % (
                                         algo_name, int(lib.dpt_trainer_step(trainer))),
                                     initial_params=ffi.string(lib.dpt_trainer_initial_params(trainer)).decode()
                                     if hasattr(lib, "dpt_trainer_initial_params") else None)
        run.steps = int(lib.dpt_trainer_step(trainer))
        run.last = _epoch_dict(last, regression)
        run.model.targets = int(Y.shape[1]) if regression else 0
        if HAVE_CALLBACKS:
            run.stop_reason = _STOP.get(int(lib.dpt_trainer_stop_reason(trainer)), "none")
            run.run_id = ffi.string(lib.dpt_trainer_run_id(trainer)).decode()
        else:
            run.stop_reason = "budget" if lib.dpt_trainer_budget_stopped(trainer, ffi.NULL) else "done"
        if out_dir is not None and hasattr(lib, "dpt_run_secret_path"):
            sp, found = ffi.new("char[1100]"), ffi.new("int *")
            if lib.dpt_run_secret_path(cs(out_dir, "out_dir"), secret_dir, sp, 1100, found) == 0 and found[0]:
                run.secret_path = ffi.string(sp).decode()
        if interrupted or isinstance(state.error, KeyboardInterrupt):
            run.stop_reason = "interrupted"
        eps_next = ffi.new("double *")
        if lib.dpt_trainer_budget_stopped(trainer, eps_next) and run.steps == steps_before:
            raise PrivacyError("target_epsilon %g: the privacy budget refuses the first step: it would reach "
                               "epsilon %.4g (%s)" % (cfg.target_epsilon, eps_next[0],
                                                      "nothing was trained" if steps_before == 0 else
                                                      "the resumed run has spent its budget"),
                               lib.DPT_EBUDGET, ffi.string(lib.dpt_status_name(lib.DPT_EBUDGET)).decode())
        if algo_name == "dpsgd" and "adaptive_quantile" in given:
            run.clip = float(lib.dpt_algo_dpsgd_clip(algo))
        if algo_name == "noisy-gd":
            r = ffi.new("dpt_kl_report *")
            if lib.dpt_noisy_gd_kl(algo, r) == 0:
                run.kl = dict(steps=int(r.steps), c=r.c, remove=r.remove, add=r.add, replace=r.replace, worst=r.worst)
        run.history = _history(state.history, kw["history"])
    finally:
        lib.dpt_trainer_free(trainer)
        train_ds.free()
        if test_ds is not None:
            test_ds.free()
    if run.stop_reason == "interrupted" and kw["on_interrupt"] == "raise":
        e = KeyboardInterrupt("dptrain: training interrupted after %d steps%s" % (
            run.steps, "; checkpoint and ledger saved in %s" % out_dir if out_dir else ""))
        e.run = run
        raise e
    return run


def _run_dir_in(runs_dir, out_dir, resume, overwrite):
    """out_dir for runs_dir=: a new directory runs_dir/YYYYMMDD-HHMMSS-XXXX (the library's
    dpt_run_dir_new_name, which the CLI uses without --out), or with resume the run that
    runs_dir/latest names."""
    if out_dir is not None:
        raise ValueError("runs_dir and out_dir: give one of them (runs_dir: a new directory under it for each run, "
                         "runs_dir/latest naming the newest; out_dir: the run's own directory)")
    if overwrite:
        raise ValueError("overwrite: not with runs_dir (each run gets a new, empty directory)")
    parent = os.fspath(runs_dir)
    if not isinstance(parent, str) or not parent:
        raise ValueError("runs_dir: empty directory name")
    if resume:
        latest = os.path.join(parent, "latest")
        if not os.path.isdir(latest):
            raise ValueError("resume: runs_dir %s has no run to continue (%s does not exist); pass out_dir= the "
                             "run's directory" % (parent, latest))
        return latest
    if not hasattr(lib, "dpt_run_dir_new_name"):
        raise NotImplementedError("runs_dir: this libdptrain has no dpt_run_dir_new_name (rebuild the package "
                                  "against a newer library)")
    buf = ffi.new("char[]", 4096)
    check(lib.dpt_run_dir_new_name(cstr(parent, "runs_dir"), buf, len(buf)), "runs_dir")
    return ffi.string(buf).decode()


def _history(rows, mode):
    if mode == "list":
        return rows
    try:
        import pandas as pd
    except ImportError:
        if mode == "pandas":
            raise
        return rows
    return pd.DataFrame(rows)
