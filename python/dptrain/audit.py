"""Membership-inference auditing: what an accountant bounds from above, these attacks
measure from below (docs/audit.md). Thin checked wrappers over the C library's audit
module (dptrain/audit.h):

    from dptrain import audit
    audit.auc(inside, outside)                    # statistics of your own attack's scores
    audit.summarize(inside, outside)              # AUC, TPR at 0.1% / 1% FPR, bootstrap intervals
    audit.eps_from_scores(inside, outside, delta=1e-5)   # an epsilon lower bound
    loss, phi = audit.scores(model, x, y)         # per-example scores of a trained dptrain.Model
    r = audit.run(x, y, x_test=xt, y_test=yt, model="mlp:20-64-3:relu", epochs=20)  # the whole
    print(r)                                      # audit of `dptrain audit`, in memory

Convention (the library's): a HIGHER score means "more likely a member"; `inside` are the
scores of members (examples the model trained on), `outside` of non-members. Score arrays
are 1-D, real and finite; they are converted to float64 (a copy only when needed). Arguments
are checked here and refused with a ValueError or TypeError naming them; what the library
refuses raises the package's errors (dptrain.InvalidArgumentError, ...). An audit shows that
a model leaks; it never shows that it does not.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union
from numpy.typing import ArrayLike

import math
import sys
from collections import namedtuple
from dataclasses import dataclass, field

import numpy as np

from ._lib import check, cstr, ffi, lib, make_error
from .accounting import _f, _u64
from .data import Dataset, as_features, as_labels
from .model import Model
# train() and audit.run() take the same arguments: one set of checks (the package's
# `dptrain.train` attribute is the function, so the names are imported from the module)
from .train import (_ALIASES, _State, _call_interruptibly, _features, _init_scheme, _optim_config, _pdp_values,
                    _positive, _prop_sigma, _spec_of, _test_dataset)

__all__ = ["auc", "tpr_at_fpr", "roc", "summarize", "eps_from_scores", "eps_lower_bound", "one_run_eps",
           "one_run_guess", "scores", "run", "Summary", "Attack", "Canaries", "AuditResult", "Roc", "EpsBound",
           "Guesses", "Scores", "ALGORITHMS", "FPR_LEVELS"]

HAVE_AUDIT = hasattr(lib, "dpt_audit_summarize")
HAVE_AUDIT_RUN = hasattr(lib, "dpt_audit_run")

ALGORITHMS = ("sgd", "dpsgd", "pdp-sgd", "proportional-noise")  # what dpt_audit_run trains with
FPR_LEVELS = (0.001, 0.01)  # the false positive rates of Summary's TPRs (dpt_audit_summary.fpr_levels)

Roc = namedtuple("Roc", "fpr tpr")
EpsBound = namedtuple("EpsBound", "eps_lb threshold")
Guesses = namedtuple("Guesses", "r v")
Scores = namedtuple("Scores", "loss phi")


def _need(what="dptrain.audit"):
    if not HAVE_AUDIT:
        raise NotImplementedError("%s: this libdptrain has no auditing API (dptrain/audit.h); rebuild the package "
                                  "against a newer library" % what)


# ==== argument checks ====

def _scores(a, name, minimum=1):
    """A 1-D array of finite real scores as C-contiguous float64."""
    if a is None or isinstance(a, (str, bytes, dict, set)):
        raise TypeError("%s must be a 1-D array of scores, got %s" % (name, type(a).__name__))
    try:
        arr = np.asarray(a)
    except ValueError as e:  # ragged nested lists
        raise ValueError("%s must be a 1-D array of scores: %s" % (name, e)) from None
    if arr.dtype.kind not in "fiu":
        raise TypeError("%s: expected real-valued scores (float64), got dtype %s" % (name, arr.dtype))
    if arr.ndim != 1:
        raise ValueError("%s must be a 1-D array of scores [n], got shape %s" % (name, arr.shape))
    if arr.shape[0] < minimum:
        raise ValueError("%s has %d score%s; at least %d needed" % (name, arr.shape[0], "" if arr.shape[0] == 1
                                                                     else "s", minimum))
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    finite = np.isfinite(arr)
    if not finite.all():
        i = int(np.argmin(finite))
        raise ValueError("%s[%d] = %r: scores must be finite" % (name, i, float(arr[i])))
    return arr


def _dp(a):
    return ffi.cast("const double *", ffi.from_buffer(a))


def _real(v, name, lo, hi, lo_open, hi_open):
    """A C double in the interval (lo or [lo, hi) or hi] named by `name`."""
    x = _f(v, name)
    ok = (x > lo if lo_open else x >= lo) and (x < hi if hi_open else x <= hi)
    if not ok:  # NaN fails both comparisons
        raise ValueError("%s must be in %s%g, %g%s, got %r" % (name, "(" if lo_open else "[", lo, hi,
                                                                ")" if hi_open else "]", v))
    return x


def _alpha(v):
    return _real(v, "alpha", 0.0, 1.0, True, True)


def _delta(v):
    return _real(v, "delta", 0.0, 1.0, False, True)


def _count(v, name, minimum=0, maximum=None):
    """A non-negative integer (int, numpy integer or integral float) for a C size."""
    x = _u64(v, name, minimum)
    if maximum is not None and x > maximum:
        raise ValueError("%s must be at most %d, got %d" % (name, maximum, x))
    return x


# ==== statistics of the caller's scores ====

def auc(inside: ArrayLike, outside: ArrayLike) -> float:
    """ROC AUC of an attack: P(s_in > s_out) + P(s_in = s_out) / 2 over member scores `inside`
    and non-member scores `outside` (Mann-Whitney; 0.5 is chance)."""
    _need("auc")
    i, o = _scores(inside, "inside"), _scores(outside, "outside")
    r = lib.dpt_audit_auc(_dp(i), i.size, _dp(o), o.size)
    if math.isnan(r):  # the sets are not empty: only an allocation can fail
        raise make_error(lib.DPT_ENOMEM, "auc")
    return r


def tpr_at_fpr(inside: ArrayLike, outside: ArrayLike, max_fpr: float) -> float:
    """The largest true positive rate of the test "score >= t" over thresholds t whose false
    positive rate is at most max_fpr (in [0, 1])."""
    _need("tpr_at_fpr")
    i, o = _scores(inside, "inside"), _scores(outside, "outside")
    f = _real(max_fpr, "max_fpr", 0.0, 1.0, False, False)
    r = lib.dpt_audit_tpr_at_fpr(_dp(i), i.size, _dp(o), o.size, f)
    if math.isnan(r):
        raise make_error(lib.DPT_ENOMEM, "tpr_at_fpr")
    return r


def roc(inside: ArrayLike, outside: ArrayLike) -> Roc:
    """The ROC curve: Roc(fpr, tpr), float64 arrays from (0, 0) to (1, 1), one point per
    distinct score (the test "score >= t" at every threshold t, from the highest down)."""
    _need("roc")
    i, o = _scores(inside, "inside"), _scores(outside, "outside")
    cap = i.size + o.size + 1
    fpr, tpr = np.empty(cap, dtype=np.float64), np.empty(cap, dtype=np.float64)
    n = ffi.new("size_t *")
    check(lib.dpt_audit_roc(_dp(i), i.size, _dp(o), o.size, ffi.cast("double *", ffi.from_buffer(fpr)),
                            ffi.cast("double *", ffi.from_buffer(tpr)), n), "roc")
    return Roc(fpr[:n[0]].copy(), tpr[:n[0]].copy())


@dataclass(frozen=True)
class Summary:
    """AUC and the TPR at 0.1% and 1% FPR (FPR_LEVELS) of an attack, each with a
    percentile-bootstrap interval [lo, hi] at confidence 1 - alpha (equal to the value when
    there were fewer than 2 resamples)."""
    auc: float
    auc_lo: float
    auc_hi: float
    tpr_0_1pct: float       # TPR at 0.1% FPR
    tpr_0_1pct_lo: float
    tpr_0_1pct_hi: float
    tpr_1pct: float         # TPR at 1% FPR
    tpr_1pct_lo: float
    tpr_1pct_hi: float

    @classmethod
    def _of(cls, s):
        return cls(s.auc, s.auc_lo, s.auc_hi, s.tpr[0], s.tpr_lo[0], s.tpr_hi[0], s.tpr[1], s.tpr_lo[1], s.tpr_hi[1])

    def __str__(self):
        return "AUC %.3f [%.3f, %.3f], TPR at 0.1%% FPR %.4f [%.4f, %.4f], at 1%% FPR %.4f [%.4f, %.4f]" % (
            self.auc, self.auc_lo, self.auc_hi, self.tpr_0_1pct, self.tpr_0_1pct_lo, self.tpr_0_1pct_hi,
            self.tpr_1pct, self.tpr_1pct_lo, self.tpr_1pct_hi)


def summarize(inside: ArrayLike, outside: ArrayLike, n_boot: int = 1000, alpha: float = 0.05, seed: int = 1) -> Summary:
    """Summary of an attack: AUC and TPR at 0.1% / 1% FPR with percentile-bootstrap
    intervals at confidence 1 - alpha (n_boot resamples of each set with replacement, drawn
    from `seed`: the same seed gives the same intervals)."""
    _need("summarize")
    i, o = _scores(inside, "inside"), _scores(outside, "outside")
    nb = _count(n_boot, "n_boot")
    a = _alpha(alpha)
    sd = _count(seed, "seed")
    s = ffi.new("dpt_audit_summary *")
    check(lib.dpt_audit_summarize(_dp(i), i.size, _dp(o), o.size, nb, a, sd, s), "summarize")
    return Summary._of(s)


def eps_from_scores(inside: ArrayLike, outside: ArrayLike, delta: float, alpha: float = 0.05) -> EpsBound:
    """An epsilon lower bound from an attack's scores, at confidence 1 - alpha:
    EpsBound(eps_lb, threshold). The threshold is chosen on the even-indexed half of each
    set and the bound (eps_lower_bound) computed with it on the odd-indexed half, so the
    choice does not bias it; each score must be an independent trial (docs/audit.md).
    Needs at least 2 scores in each set; delta in [0, 1)."""
    _need("eps_from_scores")
    i, o = _scores(inside, "inside", 2), _scores(outside, "outside", 2)
    d, a = _delta(delta), _alpha(alpha)
    eps, thr = ffi.new("double *"), ffi.new("double *")
    check(lib.dpt_audit_eps_from_scores(_dp(i), i.size, _dp(o), o.size, d, a, eps, thr), "eps_from_scores")
    return EpsBound(eps[0], thr[0])


def eps_lower_bound(tp: int, fn: int, fp: int, tn: int, delta: float, alpha: float = 0.05) -> float:
    """The epsilon lower bound an attack's confusion counts prove at confidence 1 - alpha
    (tp, fn on member trials; fp, tn on non-member trials; independent trials):
    Clopper-Pearson intervals at alpha for each rate, then
    max(0, log((TPR_lo - delta) / FPR_hi), log((TNR_lo - delta) / FNR_hi))
    (Jagielski et al. 2020; Nasr et al. 2021)."""
    _need("eps_lower_bound")
    tp, fn, fp, tn = (_count(v, k) for v, k in ((tp, "tp"), (fn, "fn"), (fp, "fp"), (tn, "tn")))
    if tp + fn == 0:
        raise ValueError("tp + fn = 0: no member trials")
    if fp + tn == 0:
        raise ValueError("fp + tn = 0: no non-member trials")
    d, a = _delta(delta), _alpha(alpha)
    out = ffi.new("double *")
    check(lib.dpt_audit_eps_lower_bound(tp, fn, fp, tn, d, a, out), "eps_lower_bound")
    return out[0]


def one_run_eps(m: int, r: int, v: int, delta: float, alpha: float = 0.05) -> float:
    """The one-run audit's epsilon lower bound (Steinke, Nasr and Jagielski 2023): m canaries,
    each included independently with probability 1/2 in ONE training run, r guesses of which
    v are right (one_run_guess); the largest epsilon whose p-value is still below alpha
    (0 when epsilon 0 is not rejected). Needs v <= r <= m, m >= 1, delta in [0, 1)."""
    _need("one_run_eps")
    m, r, v = _count(m, "m", 1), _count(r, "r"), _count(v, "v")
    if r > m:
        raise ValueError("r = %d guesses for m = %d canaries: r must be at most m" % (r, m))
    if v > r:
        raise ValueError("v = %d right guesses of r = %d: v must be at most r" % (v, r))
    d, a = _delta(delta), _alpha(alpha)
    out = ffi.new("double *")
    check(lib.dpt_audit_one_run_eps(m, r, v, d, a, out), "one_run_eps")
    return out[0]


def one_run_guess(score: ArrayLike, is_member: ArrayLike, k: int) -> Guesses:
    """The one-run audit's guesses: "member" for the k highest scores, "non-member" for the k
    lowest (ties: the lower index ranks higher), against the truth is_member (bool, or 0/1)
    of each canary. Returns Guesses(r, v): r = 2k guesses, v of them right. Needs 2k <= n."""
    _need("one_run_guess")
    s = _scores(score, "score")
    mem = np.asarray(is_member)
    if mem.ndim != 1 or mem.shape[0] != s.shape[0]:
        raise ValueError("is_member must have shape [%d] like score, got %s" % (s.shape[0], mem.shape))
    if mem.dtype.kind == "b":
        mem = mem.astype(np.uint8)
    elif mem.dtype.kind in "iuf":
        bad = (mem != 0) & (mem != 1)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError("is_member[%d] = %r: expected True/False or 1/0" % (i, mem[i].item()))
        mem = mem.astype(np.uint8)
    else:
        raise TypeError("is_member: expected booleans (or 0/1), got dtype %s" % mem.dtype)
    mem = np.ascontiguousarray(mem)
    k = _count(k, "k", 1)
    if 2 * k > s.size:
        raise ValueError("k = %d guesses per side need at least %d canaries, score has %d" % (k, 2 * k, s.size))
    r, v = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    check(lib.dpt_audit_one_run_guess(_dp(s), ffi.cast("const uint8_t *", ffi.from_buffer(mem)), s.size, k, r, v),
          "one_run_guess")
    return Guesses(int(r[0]), int(v[0]))


# ==== scores of a trained model ====

def _check_classifier(model, name):
    """Refuses what the audit's scores are not defined for (regression, one output, other losses)."""
    if not isinstance(model, Model):
        raise TypeError("%s must be a dptrain.Model, got %s" % (name, type(model).__name__))
    if model.targets:
        raise ValueError("%s: a regression model (%d targets per example); the membership-inference audit scores "
                         "classifiers only" % (name, model.targets))
    if model.output_dim < 2:
        raise ValueError("%s: the model has one output; the audit's scores are those of a softmax classifier (>= 2 "
                         "outputs)" % name)
    if model.loss != "ce":
        raise ValueError("%s: the model was trained with loss %r; the audit's scores are those of a softmax "
                         "classifier (loss 'ce')" % (name, model.loss))


def scores(model: Any, x: ArrayLike, y: ArrayLike) -> Scores:
    """Per-example membership scores of a trained classifier (a dptrain.Model with >= 2
    outputs and the softmax cross-entropy loss) on features x [n, ...] and labels y [n]:
    Scores(loss, phi), float64 arrays [n]. loss = -log p_y (the loss attack's score is
    -loss: Yeom et al. 2018); phi = log p_y - log(sum_{k != y} p_k), LiRA's logit-scaled
    confidence (Carlini et al. 2022), computed stably from the logits by the library."""
    _need("scores")
    _check_classifier(model, "model")
    ds = model._dataset(x, y)
    try:
        n = ds.n
        loss, phi = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.float64)
        with model._lock:  # the model's scratch buffers (Model)
            check(lib.dpt_audit_scores(model._m, ds.ptr, ffi.NULL, n, ffi.cast("double *", ffi.from_buffer(loss)),
                                       ffi.cast("double *", ffi.from_buffer(phi))), "scores")
    finally:
        ds.free()
    return Scores(loss, phi)


# ==== the whole audit (dpt_audit_run) ====

@dataclass(frozen=True, eq=False)
class Attack:
    """One attack of an audit: its name ("loss", "lira-offline", "lira-online"), the scores of
    the members (inside) and non-members (outside) as float64 arrays (higher: more likely a
    member), and their Summary."""
    name: str
    inside: np.ndarray = field(repr=False)
    outside: np.ndarray = field(repr=False)
    summary: Summary


@dataclass(frozen=True)
class Canaries:
    """The canary audit: `canaries` mislabelled test examples, each in the training set with
    probability 1/2, over `runs` training runs; the loss attack on them (n_in included, n_out
    left out) with its AUC, the Clopper-Pearson epsilon lower bound eps_lb at delta (its
    threshold chosen on half the trials; a heuristic with several canaries per run, see
    docs/audit.md) and, for one run of >= 2 canaries, the one-run bound (Steinke et al. 2023)
    from one_run_correct of one_run_guesses guesses (None otherwise). run_epsilon: the
    accountant's epsilon of one canary run (dpsgd; else None)."""
    canaries: int
    runs: int
    n_in: int
    n_out: int
    auc: float
    eps_lb: float
    threshold: float
    delta: float
    run_epsilon: float = None
    one_run_guesses: int = None
    one_run_correct: int = None
    one_run_eps_lb: float = None


def _none_if_nan(v):
    return None if v is None or math.isnan(v) else float(v)


class AuditResult:
    """What dptrain.audit.run returns (the numbers `dptrain audit` prints and saves)."""

    def __init__(self) -> None:
        self.algorithm = None       # the training algorithm of every model
        self.population = 0         # examples audited (members + non-members)
        self.members = 0
        self.shadows = 0            # LiRA shadow models
        self.attacks = {}           # name -> Attack: "loss", and with shadows "lira-offline", "lira-online"
        self.test_accuracy = None   # the target's accuracy on x_test (None without)
        self.epsilon = None         # dpsgd: the accountant's RDP epsilon of the target run at delta; else None
        self.delta = None           # dpsgd: that delta; else None
        self.sigma = None           # dpsgd: the noise multiplier; else None
        self.sample_rate = None     # dpsgd: the Poisson rate of every run (batch_size / members); else None
        self.privacy_label = ""     # dpsgd: the labels of epsilon and of a canary run's epsilon, as train prints
        #                             them (every model is trained from `seed`: "[SEEDED run ...]"); "" for none
        self.canaries = None        # Canaries, or None without a canary audit
        self.target_s = None        # wall time of the target (training and scoring) in s
        self.target_loop_s = None   # its training loop alone
        self.shadow_s = None        # per shadow model
        self.alpha = None           # the intervals' confidence is 1 - alpha
        self.bootstrap = None       # bootstrap resamples behind each interval
        self.given_target = False   # True: the target was a given model (target=)

    @property
    def loss(self) -> Optional[Attack]:
        """The loss attack (Yeom et al. 2018)."""
        return self.attacks.get("loss")

    @property
    def lira_offline(self) -> Optional[Attack]:
        """LiRA offline (Carlini et al. 2022); None without shadows."""
        return self.attacks.get("lira-offline")

    @property
    def lira_online(self) -> Optional[Attack]:
        """LiRA online; None without shadows."""
        return self.attacks.get("lira-online")

    def __repr__(self):
        return "AuditResult(%s, %d members / %d non-members, %d shadows, %s)" % (
            self.algorithm, self.members, self.population - self.members, self.shadows,
            ", ".join("%s AUC %.3f" % (k, a.summary.auc) for k, a in self.attacks.items()))

    def _label(self) -> str:
        return "  " + self.privacy_label if self.privacy_label else ""

    def __str__(self):
        """The report `dptrain audit` prints."""
        A = list(self.attacks.values())
        n_out = self.population - self.members
        lines = []
        if self.bootstrap and self.bootstrap > 1:
            lines.append("membership inference: %d members / %d non-members, %d shadows, %.0f%% bootstrap intervals "
                         "(%d resamples)" % (self.members, n_out, self.shadows, 100 * (1 - self.alpha), self.bootstrap))
        else:
            lines.append("membership inference: %d members / %d non-members, %d shadows, no intervals (bootstrap 0)"
                         % (self.members, n_out, self.shadows))
        lines.append("%-14s %-24s %-28s %s" % ("attack", "AUC", "TPR at 0.1% FPR", "TPR at 1% FPR"))
        for a in A:
            s = a.summary
            lines.append("%-14s %.3f [%.3f, %.3f]     %.4f [%.4f, %.4f]     %.4f [%.4f, %.4f]" % (
                a.name, s.auc, s.auc_lo, s.auc_hi, s.tpr_0_1pct, s.tpr_0_1pct_lo, s.tpr_0_1pct_hi, s.tpr_1pct,
                s.tpr_1pct_lo, s.tpr_1pct_hi))
        if n_out < 1000:
            lines.append("note: %d non-members: TPR at 0.1%% FPR rests on fewer than one non-member's score (at least "
                         "1000 resolve it)" % n_out)
        acc = "target test accuracy %.2f%%; " % (100 * self.test_accuracy) if self.test_accuracy is not None else ""
        lines.append("%straining time target %.2fs%s" % (acc, self.target_s, ", shadows %.2fs per model" % self.shadow_s
                                                           if self.shadows else ""))
        if self.given_target:
            lines.append("target: a given model (its privacy statement, if any, is its own); shadows: algorithm %s"
                         % self.algorithm)
        elif self.epsilon is not None:
            lines.append("privacy (accountant): epsilon %.4g (default accountant: min of PLD, RDP) at delta %g for the "
                         "target run (q %g, sigma %g)%s"
                         % (self.epsilon, self.delta, self.sample_rate, self.sigma, self._label()))
        else:
            lines.append("privacy: no formal DP guarantee for algorithm %s (no accountant, no epsilon); the audit "
                         "above is what it leaks to these attacks" % self.algorithm)
        c = self.canaries
        if c is not None:
            lines.append("canary audit: %d canaries x %d runs (%d in, %d out), loss attack AUC %.3f: empirical epsilon "
                         "lower bound %.3f at %.0f%% confidence (delta %g)" % (
                             c.canaries, c.runs, c.n_in, c.n_out, c.auc, c.eps_lb, 100 * (1 - self.alpha), c.delta))
            if c.run_epsilon is not None:
                lines.append("  accountant epsilon of a canary run: %.4g (the lower bound must not exceed it)%s"
                             % (c.run_epsilon, self._label()))
            if c.canaries > 1:
                lines.append("  note: the %d canaries of one run are not independent trials; the bound above treats "
                             "them as such (a heuristic, see docs/audit.md)" % c.canaries)
            if c.one_run_eps_lb is not None:
                lines.append("  one-run audit (Steinke et al. 2023): %d of %d guesses right: epsilon lower bound %.3f "
                             "at %.0f%% confidence (delta %g)" % (c.one_run_correct, c.one_run_guesses,
                                                                 c.one_run_eps_lb, 100 * (1 - self.alpha), c.delta))
        return "\n".join(lines)


_STAGES = {}
if HAVE_AUDIT_RUN:
    _STAGES = {lib.DPT_AUDIT_STAGE_START: "start", lib.DPT_AUDIT_STAGE_TARGET: "target",
               lib.DPT_AUDIT_STAGE_SHADOW: "shadow", lib.DPT_AUDIT_STAGE_CANARY: "canary"}


class _NoBar:
    """The audit's trainers draw no progress bar (train's on_step callback calls step())."""

    def step(self, info):
        pass


class _AuditState(_State):
    """Shared by the audit's progress callback and its trainers' on_step callback (which
    returns interrupt.is_set(), so Ctrl-C or a failed callback stops every remaining model
    after one step)."""

    def __init__(self, on_progress, verbose, header):
        super().__init__(_NoBar(), None)
        self.on_progress = on_progress
        self.verbose = verbose
        self.header = header  # (model, algorithm, epochs, shadows) for the first line
        self.stream = sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.drawn = False

    def report(self, p):
        if self.verbose:
            self.print(p)
        if self.on_progress is not None:
            self.on_progress(dict(p))

    def print(self, p):
        w = self.stream
        if p["stage"] == "start":
            w.write("dptrain audit: %d examples (%d members), model %s, algorithm %s, %d epochs, %d shadows\n"
                    % ((p["population"], p["members"]) + self.header))
        elif p["stage"] == "target":
            acc = "test accuracy %.2f%% " % (100 * p["test_accuracy"]) if p["test_accuracy"] is not None else ""
            w.write("target: %s(%.1fs)\n" % (acc, p["elapsed_s"]))
        else:
            what = "shadow" if p["stage"] == "shadow" else "canary run"
            if self.tty:
                w.write("\r%s %d/%d (%.1fs)\x1b[K" % (what, p["done"], p["total"], p["elapsed_s"]))
                self.drawn = True
            if p["done"] == p["total"]:
                w.write("%s%d %s%s trained (%.1fs)\n" % ("\r\x1b[K" if self.tty else "", p["total"], what,
                                                         "" if p["total"] == 1 else "s", p["elapsed_s"]))
                self.drawn = False
        w.flush()


if HAVE_AUDIT_RUN:
    @ffi.def_extern()
    def _dpt_py_audit_progress(user, p):
        st = ffi.from_handle(user)
        if st.error is not None:
            return
        try:
            st.report(dict(stage=_STAGES.get(int(p.stage), str(int(p.stage))), done=int(p.done), total=int(p.total),
                           population=int(p.population), members=int(p.members),
                           test_accuracy=_none_if_nan(p.test_accuracy), elapsed_s=float(p.elapsed_s)))
        except BaseException as e:  # no way to raise through C: stop the remaining models, re-raise after
            st.error = e
            st.interrupt.set()


_ONLY = {  # keyword -> the algorithm it belongs to (refused with another: it would be ignored)
    "sigma": "dpsgd", "clip": "dpsgd", "clip_mode": "dpsgd", "delta": "dpsgd",
    "kappa": "pdp-sgd", "pdp_sigma": "pdp-sgd", "lambda_": "pdp-sgd", "prop_sigma": "proportional-noise",
}


def run(x: ArrayLike, y: ArrayLike, *, x_test: Optional[ArrayLike] = None, y_test: Optional[ArrayLike] = None,
        model: Any = None, algorithm: str = "sgd", target: Optional[Model] = None, max_pairs: int = 0,
        optimizer: str = "adam", lr: Optional[float] = None, momentum: float = 0.0, weight_decay: float = 0.0,
        lr_schedule: str = "constant", init: str = "default", batch_size: int = 64, epochs: int = 10, seed: int = 1,
        threads: int = 1, n_classes: int = 0, input_shape: Optional[Sequence[int]] = None,
        sigma: Optional[float] = None, clip: Optional[float] = None, clip_mode: Optional[str] = None,
        delta: float = None, kappa: Optional[float] = None, pdp_sigma: Optional[float] = None,
        lambda_: Optional[float] = None, prop_sigma: Optional[float] = None, shadows: int = 16, jobs: int = 1,
        bootstrap: int = 200, alpha: float = 0.05, canaries: int = 0, canary_runs: int = 1, one_run_guesses: int = 0,
        verbose: bool = True, on_progress: Optional[Callable[[Dict[str, Any]], Any]] = None) -> AuditResult:
    """The membership-inference audit of `dptrain audit`, in memory (the library's
    dpt_audit_run; docs/audit.md): returns an AuditResult.

    Population: features x [n, ...] and labels y [n]. Without `target`, x is split at random
    into n/2 members, on which a target model is trained, and n/2 non-members (n >= 8).
    With target= a trained dptrain.Model (a classifier), x, y is ITS training set: members
    are random examples of it, non-members as many random test examples (x_test, y_test,
    then required), at most max_pairs of each (0: as many as both sets allow).
    x_test, y_test: the target's test accuracy, the canaries' source, and with target the
    non-members.
    Training of every model (target, shadows, canary runs), with the defaults of `dptrain
    audit --help`: model (a spec or a list of dptrain.layers objects; default
    "mlp:784-128-10:relu", or with target its spec), algorithm ("sgd" | "dpsgd" | "pdp-sgd"
    | "proportional-noise"), optimizer="adam", lr (adam 1e-3, sgd the library's default
    0.1), momentum, weight_decay, lr_schedule, init, batch_size=64 (dpsgd: the expected
    Poisson batch, q = batch_size / members), epochs=10, seed=1 (the split, every model, the
    shadows' halves, the canaries), threads=1 per model (0: all cores), n_classes (0: the
    largest label of y + 1; with target its outputs), input_shape ((C, H, W) of flat x).
    dpsgd: sigma=1.0, clip=1.0, clip_mode="flat", delta=1e-5 (of the accountant's epsilon
    and of the canary bounds; < 1/members). pdp-sgd: kappa or pdp_sigma, lambda_.
    proportional-noise: prop_sigma (required). An option of another algorithm is refused.
    Attacks: shadows=16 LiRA shadow models (0: the loss attack only; else >= 2), jobs=1
    shadows trained at once (one thread each; results do not depend on it), bootstrap=200
    resamples and alpha=0.05 for the intervals. canaries=0 (M > 0: a canary audit with M
    mislabelled test examples over canary_runs=1 runs; M x runs >= 8; not with target),
    one_run_guesses (the one-run bound's guesses per side; 0: M/10).
    Output: nothing is written; verbose=True prints one line per stage on stderr (the
    library itself prints nothing); on_progress(dict) is called at each stage with stage
    ("start", "target", "shadow", "canary"), done, total, population, members,
    test_accuracy and elapsed_s (from the thread that finished the work, one call at a
    time; an exception stops the remaining models and is raised when the audit returns).
    Ctrl-C stops the remaining models after one step each and raises KeyboardInterrupt.
    """
    if not HAVE_AUDIT_RUN:
        raise NotImplementedError("run: this libdptrain has no dpt_audit_run (dptrain/audit.h) or no trainer "
                                  "callbacks; rebuild the package against a newer library")
    kw = dict(optimizer=optimizer, lr=lr, momentum=momentum, weight_decay=weight_decay, lr_schedule=lr_schedule,
              sigma=sigma, clip=clip, clip_mode=clip_mode, delta=delta, kappa=kappa, pdp_sigma=pdp_sigma,
              lambda_=lambda_, prop_sigma=prop_sigma)
    given = {k for k, v in kw.items() if v is not None}

    # ---- algorithm and its options ----
    if not isinstance(algorithm, str):
        raise TypeError("algorithm must be a str, got %r" % (algorithm,))
    algo = _ALIASES.get(algorithm, algorithm)
    if algo not in ALGORITHMS:
        raise ValueError("algorithm: the audit trains with %s, got %r" % (", ".join(ALGORITHMS), algorithm))
    for k in sorted(given):
        if k in _ONLY and _ONLY[k] != algo:
            raise ValueError("%s is an option of algorithm %s, not of %s (it would be ignored)" % (k, _ONLY[k], algo))
    if on_progress is not None and not callable(on_progress):
        raise TypeError("on_progress must be callable, got %r" % (on_progress,))

    # ---- the audit's own settings (the CLI's checks, named as here) ----
    n_shadows = _count(shadows, "shadows")
    if n_shadows == 1:
        raise ValueError("shadows must be 0 (the loss attack only) or >= 2, got 1")
    ac = ffi.new("dpt_audit_config *", lib.dpt_audit_config_defaults())
    ac.shadows = n_shadows
    ac.jobs = _count(jobs, "jobs", 1, 64)
    ac.bootstrap = _count(bootstrap, "bootstrap")
    ac.alpha = _alpha(alpha)
    ac.seed = _count(seed, "seed")
    ac.canaries = _count(canaries, "canaries")
    ac.canary_runs = _count(canary_runs, "canary_runs", 1)
    ac.one_run_guesses = _count(one_run_guesses, "one_run_guesses")
    if ac.canaries and ac.canaries * ac.canary_runs < 8:
        raise ValueError("canaries %d x canary_runs %d: a canary audit needs at least 8 canary trials"
                         % (ac.canaries, ac.canary_runs))
    if ac.one_run_guesses and not ac.canaries:
        raise ValueError("one_run_guesses: only with canaries > 0")
    if ac.one_run_guesses and (ac.canary_runs != 1 or 2 * ac.one_run_guesses > ac.canaries):
        raise ValueError("one_run_guesses %d: the one-run audit takes one run (canary_runs 1, got %d) and guesses on "
                         "both sides, so at most canaries / 2 = %d" % (ac.one_run_guesses, ac.canary_runs,
                                                                       ac.canaries // 2))

    # ---- data ----
    if target is not None:
        _check_classifier(target, "target")
        if ac.canaries:
            raise ValueError("canaries: a canary audit trains its own models; not with a given target")
        if x_test is None:
            raise ValueError("target: a given target needs x_test, y_test (its non-members)")
    elif max_pairs:
        raise ValueError("max_pairs: only with a given target (target=)")
    X, shape = _features(x, input_shape)
    Y = as_labels(y, "y", X.shape[0])
    if (x_test is None) != (y_test is None):
        raise ValueError("x_test and y_test: give both or neither")
    ncls = _count(n_classes, "n_classes")
    if target is not None:
        if X.shape[1] != target.input_dim:
            raise ValueError("x has %d features per example, the target takes %d" % (X.shape[1], target.input_dim))
        if ncls and ncls != target.output_dim:
            raise ValueError("n_classes %d: the target has %d outputs" % (ncls, target.output_dim))
        ncls = target.output_dim
        ac.max_pairs = _count(max_pairs, "max_pairs")
    if ac.canaries and x_test is None:
        raise ValueError("canaries: the canaries are test examples: give x_test, y_test")
    XT = None if x_test is None else as_features(x_test, "x_test", X.shape[1])

    # members, as the library will count them (its own checks would name C fields)
    n = X.shape[0]
    if target is None:
        if n < 8:
            raise ValueError("x: the audit needs at least 8 examples (half members, half non-members), got %d" % n)
        members, whence = n // 2, "half of the %d examples of x" % n
    else:
        nt = XT.shape[0]
        members = min(n, nt) if not ac.max_pairs else min(n, nt, ac.max_pairs)
        whence = "as many as x (%d), x_test (%d)%s allow" % (n, nt, " and max_pairs" if ac.max_pairs else "")
        if members < 4:
            raise ValueError("target: too few examples to audit: %d members and non-members (%s); need 4" % (
                members, whence))
    bs = _count(batch_size, "batch_size", 1)
    if bs > members:
        raise ValueError("batch_size %d is larger than the %d members (%s)" % (bs, members, whence))

    # ---- the training job (every model's) ----
    job = ac.job
    cfg = job.cfg
    _optim_config(cfg, kw, given)
    cfg.init = _init_scheme(init)
    cfg.loss = lib.DPT_LOSS_SOFTMAX_CE  # the audit's scores are a softmax classifier's
    cfg.batch_size = bs
    cfg.epochs = _count(epochs, "epochs", 1)
    cfg.threads = _count(threads, "threads", 0, 1024)
    keep = []
    if model is None:
        spec = target.spec if target is not None else "mlp:784-128-10:relu"
    elif isinstance(model, Model):
        raise TypeError("model: a dptrain.Model is audited with target=; model= is the architecture the audit "
                        "trains (a spec string or a list of dptrain.layers objects)")
    else:
        spec = _spec_of(model, shape)
    keep.append(ffi.new("char[]", cstr(spec, "model")))
    cfg.model_spec = keep[-1]
    # the model against the data, named as here (the trainer would name dpt_train_config fields)
    pp = ffi.new("dpt_model **")
    check(lib.dpt_model_new(cfg.model_spec, 1, 1, pp), "model")
    m_in, m_out = int(pp[0].in_dim), int(pp[0].out_dim)
    lib.dpt_model_free(pp[0])
    classes = ncls or int(Y.max()) + 1
    if m_in != X.shape[1]:
        raise ValueError("model %r takes %d inputs, x has %d features per example" % (spec, m_in, X.shape[1]))
    if m_out < 2:
        raise ValueError("model %r has one output; the audit scores softmax classifiers (>= 2 outputs)" % spec)
    if m_out < classes:
        raise ValueError("model %r has %d outputs, y has %d classes%s" % (
            spec, m_out, classes, " (n_classes)" if ncls else " (its largest label + 1)"))
    job.algo = {"sgd": lib.DPT_AUDIT_SGD, "dpsgd": lib.DPT_AUDIT_DPSGD, "pdp-sgd": lib.DPT_AUDIT_PDPSGD,
                "proportional-noise": lib.DPT_AUDIT_PROPNOISE}[algo]
    res_sigma = res_delta = None
    if algo == "dpsgd":
        job.dpsgd.sigma = res_sigma = _positive(1.0 if sigma is None else sigma, "sigma",
                                                "(the noise multiplier) must be > 0 (for training without noise use "
                                                "algorithm='sgd')")
        job.dpsgd.clip = _positive(1.0 if clip is None else clip, "clip", "(the clipping norm C) must be > 0")
        mode = ffi.new("dpt_clip_mode *")
        check(lib.dpt_clip_mode_parse(cstr("flat" if clip_mode is None else clip_mode, "clip_mode"), mode),
              "clip_mode")
        job.dpsgd.clip_mode = mode[0]
        d = _real(1e-5 if delta is None else delta, "delta", 0.0, 1.0, True, True)
        if d >= 1.0 / members:
            raise ValueError("delta %g >= 1/members = %g: such a delta allows releasing a whole example" % (
                d, 1.0 / members))
        cfg.delta = res_delta = d
    elif algo == "pdp-sgd":
        lam, job.pdp.kappa, job.pdp.sigma = _pdp_values(kw, given, cfg.optim)
        setattr(job.pdp, "lambda", lam)  # (a Python keyword)
    elif algo == "proportional-noise":
        job.prop.sigma = _prop_sigma(kw, given)
    if hasattr(lib, "dpt_algo_free"):  # the constructors' own checks before any data is copied, as the CLI's
        probe = ffi.new("dpt_algo **")
        st = {"sgd": lambda: lib.dpt_algo_sgd_new(probe),
              "dpsgd": lambda: lib.dpt_algo_dpsgd_new(ffi.addressof(job, "dpsgd"), probe),
              "pdp-sgd": lambda: lib.dpt_algo_pdpsgd_new(ffi.addressof(job, "pdp"), probe),
              "proportional-noise": lambda: lib.dpt_algo_propnoise_new(ffi.addressof(job, "prop"), probe)}[algo]()
        lib.dpt_algo_free(probe[0])
        check(st, "algorithm %s" % algo)

    pop_ds = Dataset(X, Y, ncls, shape, name="x, y")
    test_ds = None
    try:
        if ac.canaries and pop_ds.n_classes < 2:
            raise ValueError("canaries: a canary is a test example with another class's label, and y has %d class"
                             % pop_ds.n_classes)
        if x_test is not None:
            _, _, test_ds = _test_dataset(XT, y_test, X.shape[1], pop_ds, ncls, shape)
            if ac.canaries > test_ds.n:
                raise ValueError("canaries %d: only %d test examples (x_test) to make canaries from"
                                 % (ac.canaries, test_ds.n))
        if target is not None:
            ac.target = target._m
        state = _AuditState(on_progress, bool(verbose), (spec, algo, int(cfg.epochs), n_shadows))
        handle = ffi.new_handle(state)
        ac.progress = lib._dpt_py_audit_progress
        ac.user = handle
        cfg.on_step = lib._dpt_py_on_step
        cfg.log = lib._dpt_py_log
        cfg.user = handle
        res = ffi.new("dpt_audit_result *")

        def call():
            s = lib.dpt_audit_run(ac, pop_ds.ptr, test_ds.ptr if test_ds is not None else ffi.NULL, res)
            # the library's error message is per thread: read it on this one
            return s, make_error(s, "audit") if s != 0 else None

        if target is not None:  # the target model's scratch buffers, for the whole audit
            with target._lock:
                status, interrupted = _call_interruptibly(call, state.interrupt, "dptrain-audit")
        else:
            status, interrupted = _call_interruptibly(call, state.interrupt, "dptrain-audit")
        try:
            if state.drawn:
                state.stream.write("\r\x1b[K")
            if status is None:
                raise RuntimeError("dptrain: the audit thread ended without a result")
            if state.error is not None:
                raise state.error
            if interrupted:
                raise KeyboardInterrupt("dptrain: audit interrupted (its remaining models stopped after one step); "
                                        "no result")
            if status[0] != 0:
                raise status[1]
            out = _result(res)
        finally:
            lib.dpt_audit_result_free(res)
    finally:
        pop_ds.free()
        if test_ds is not None:
            test_ds.free()
    out.algorithm = algo
    out.sigma, out.delta = (res_sigma, res_delta) if out.epsilon is not None else (None, None)
    out.alpha, out.bootstrap = float(ac.alpha), int(ac.bootstrap)
    out.given_target = target is not None
    return out


def _array(p, n):
    return np.frombuffer(ffi.buffer(p, n * 8), dtype=np.float64).copy() if n else np.empty(0, dtype=np.float64)


def _result(res):
    """An AuditResult holding copies of everything in res (freed by the caller)."""
    r = AuditResult()
    r.population, r.members, r.shadows = int(res.population), int(res.members), int(res.shadows)
    for k in range(int(res.n_attacks)):
        a = res.attack[k]
        name = ffi.string(a.name).decode()
        r.attacks[name] = Attack(name, _array(getattr(a, "in"), int(a.n_in)), _array(a.out, int(a.n_out)),
                                 Summary._of(a.s))
    r.test_accuracy = _none_if_nan(res.test_accuracy)
    r.epsilon = _none_if_nan(res.epsilon)
    r.sample_rate = _none_if_nan(res.sample_rate)
    if hasattr(res, "epsilon_label"):  # the library's labels (dpt_ledger_label), "" for none
        r.privacy_label = ffi.string(res.epsilon_label).decode("utf-8", "replace").strip()
    r.target_s, r.target_loop_s, r.shadow_s = float(res.target_s), float(res.target_loop_s), float(res.shadow_s)
    if res.canaries:
        one = not math.isnan(res.one_run_eps_lb)
        r.canaries = Canaries(int(res.canaries), int(res.canary_runs), int(res.canary_in), int(res.canary_out),
                              float(res.canary_auc), float(res.canary_eps_lb), float(res.canary_threshold),
                              float(res.canary_delta), _none_if_nan(res.canary_run_epsilon),
                              int(res.one_run_guesses) if one else None, int(res.one_run_correct) if one else None,
                              float(res.one_run_eps_lb) if one else None)
    return r
