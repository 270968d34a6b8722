"""Privacy accounting: epsilon of the Poisson-subsampled Gaussian mechanism (RDP and PLD
accountants), noise calibration, the DP-ULR accountant and a Ledger composing
heterogeneous events. Every result is the C library's (accounting.h), bit for bit: these
functions convert their arguments to C doubles / uint64 and call it.

Names follow what Opacus and dp_accounting users know:

    >>> from dptrain import accounting as acc
    >>> acc.epsilon(noise_multiplier=1.1, sample_rate=256/60000, steps=4690, delta=1e-5)
    >>> acc.calibrate_sigma(target_epsilon=3.0, sample_rate=256/60000, epochs=20, delta=1e-5)

Array arguments (numpy arrays, lists) broadcast against each other and give an ndarray of
results (one C call per element); scalars (Python or numpy) give a float.
Adjacency: add/remove one example, as in the library.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union
from numpy.typing import ArrayLike

import json
import math
import operator
import os
from collections import namedtuple

import numpy as np

from ._lib import check, cstr, ffi, lib
from .errors import file_not_found

__all__ = [
    "epsilon", "rdp_epsilon", "delta_pld", "rdp", "default_orders", "calibrate_sigma", "steps_for_epochs",
    "dpulr_epsilon", "dpulr_rdp", "dpulr_default_min_batch", "Ledger", "read_ledger",
    "RdpEpsilon", "Headline", "DPULR_RATIO_ALPHA", "secure_distance",
]

DPULR_RATIO_ALPHA = float(lib.DPT_DPULR_RATIO_ALPHA)
RdpEpsilon = namedtuple("RdpEpsilon", "epsilon order at_edge")
Headline = namedtuple("Headline", "epsilon accountant epsilon_rdp epsilon_pld")

# "default": the headline accountant of runs (DPT_ACCT_DEFAULT in accounting.h): the smaller of
# the PLD bound (where it applies) and the RDP bound, PLD in practice
_ACCOUNTANTS = {"rdp": lib.DPT_ACCT_RDP, "pld": lib.DPT_ACCT_PLD, "default": lib.DPT_ACCT_DEFAULT}
_CONVERSIONS = {"balle": lib.DPT_CONV_BALLE, "classic": lib.DPT_CONV_CLASSIC}
_U64_MAX = 2 ** 64 - 1


# ==== argument conversion ====

def _accountant(name, orders=None, conversion="balle"):
    """None: the default accountant, or RDP when an RDP order grid or conversion is given
    (as `dptrain account` without --accountant)."""
    if name is None:
        name = "rdp" if orders is not None or conversion != "balle" else "default"
    try:
        return _ACCOUNTANTS[name]
    except (KeyError, TypeError):
        raise ValueError("accountant must be 'default', 'pld' or 'rdp', got %r" % (name,)) from None


def _conversion(name):
    try:
        return _CONVERSIONS[name]
    except (KeyError, TypeError):
        raise ValueError("conversion must be 'balle' or 'classic', got %r" % (name,)) from None


def _f(x, name):
    """A C double from a Python or numpy real scalar (exact: float32 widens exactly)."""
    if type(x) is float:
        return x
    if isinstance(x, (bool, np.bool_)) or isinstance(x, (complex, np.complexfloating)) or isinstance(x, str):
        raise TypeError("%s must be a real number, got %r" % (name, x))
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TypeError("%s must be a real number, got %r" % (name, x)) from None


def _u64(x, name, minimum=1):
    """A uint64 count from an int, a numpy integer or an integral float; refuses the rest."""
    if type(x) is not int:
        if isinstance(x, (bool, np.bool_)):
            raise TypeError("%s must be an integer, got %r" % (name, x))
        try:
            x = operator.index(x)
        except TypeError:
            if isinstance(x, (float, np.floating)) and math.isfinite(x) and float(x).is_integer():
                x = int(x)
            else:
                raise (ValueError if isinstance(x, (float, np.floating)) else TypeError)(
                    "%s must be an integer, got %r" % (name, x)) from None
    if x < minimum or x > _U64_MAX:
        raise ValueError("%s must be in [%d, 2^64), got %d" % (name, minimum, x))
    return x


def _is_array(x):
    return isinstance(x, (np.ndarray, list, tuple))


def _orders(orders):
    """(keepalive, double *, n) for an order grid; (None, NULL, 0) for the default grid."""
    if orders is None:
        return None, ffi.NULL, 0
    a = np.ascontiguousarray(np.asarray(orders, dtype=np.float64).ravel())
    if a.size == 0:
        raise ValueError("orders: empty order grid")
    return a, ffi.cast("const double *", ffi.from_buffer(a)), a.size


def _vectorize(fn, args):
    """fn(*scalars) over the broadcast of the array arguments -> ndarray of float64."""
    arrays = [np.asarray(a) if _is_array(a) else a for a in args]
    shaped = [a for a in arrays if isinstance(a, np.ndarray)]
    shape = np.broadcast_shapes(*[a.shape for a in shaped])
    full = [np.broadcast_to(a, shape) if isinstance(a, np.ndarray) else a for a in arrays]
    out = np.empty(shape, dtype=np.float64)
    for idx in np.ndindex(*shape):
        out[idx] = fn(*[a[idx] if isinstance(a, np.ndarray) else a for a in full])
    return out


# ==== RDP / PLD epsilon of the sampled Gaussian mechanism ====

def _epsilon1(sigma, q, steps, delta, acct, conv, orders_c, pld_opt):
    out = ffi.new("double *")
    if acct == lib.DPT_ACCT_DEFAULT:  # the smaller of two upper bounds, as runs report
        return min(_epsilon1(sigma, q, steps, delta, lib.DPT_ACCT_RDP, conv, orders_c, None),
                   _epsilon1(sigma, q, steps, delta, lib.DPT_ACCT_PLD, conv, orders_c, pld_opt))
    if acct == lib.DPT_ACCT_RDP:
        check(lib.dpt_rdp_sgm_epsilon_ex(_f(q, "sample_rate"), _f(sigma, "noise_multiplier"), _u64(steps, "steps"),
                                         _f(delta, "delta"), conv, orders_c[1], orders_c[2], out, ffi.NULL, ffi.NULL))
    elif pld_opt is None:
        check(lib.dpt_pld_sgm_epsilon(_f(q, "sample_rate"), _f(sigma, "noise_multiplier"), _u64(steps, "steps"),
                                      _f(delta, "delta"), out))
    else:
        check(lib.dpt_pld_sgm_epsilon_ex(_f(q, "sample_rate"), _f(sigma, "noise_multiplier"), _u64(steps, "steps"),
                                         _f(delta, "delta"), pld_opt, out))
    return out[0]


def _pld_options(grid, max_points):
    if grid is None and max_points is None:
        return None
    opt = ffi.new("dpt_pld_options *")
    opt.grid = 1e-4 if grid is None else _f(grid, "grid")
    opt.max_points = 16384 if max_points is None else _u64(max_points, "max_points")
    return opt


def epsilon(noise_multiplier: ArrayLike, sample_rate: ArrayLike, steps: ArrayLike, delta: ArrayLike,
            accountant: Optional[str] = None, conversion: str = "balle", orders: Optional[ArrayLike] = None,
            grid: Optional[float] = None, max_points: Optional[int] = None) -> Union[float, np.ndarray]:
    """epsilon after `steps` steps of the Poisson-subsampled Gaussian mechanism.

    noise_multiplier: sigma (noise std / L2 sensitivity) > 0; sample_rate: q in (0, 1];
    delta in (0, 1). accountant None (the default: 'default', or 'rdp' when `orders` or a
    conversion other than 'balle' is given), 'default' (what training reports and calibrates
    with: the smaller of the two below, the PLD one in practice), 'rdp' (Renyi DP, minimized over `orders`, default grid of
    the library; conversion 'balle' (Balle et al. 2020) or 'classic' (Mironov 2017)) or
    'pld' (privacy loss distribution, an upper bound; `grid` in nats and `max_points` set
    its discretization, defaults 1e-4 and 16384). Arrays broadcast (ndarray result).
    """
    acct, conv = _accountant(accountant, orders, conversion), _conversion(conversion)
    if acct != lib.DPT_ACCT_RDP and orders is not None:
        raise ValueError("orders: only used by the RDP accountant (give accountant='rdp')")
    if acct != lib.DPT_ACCT_PLD and (grid is not None or max_points is not None):
        raise ValueError("grid/max_points: only used by the PLD accountant (give accountant='pld')")
    if acct == lib.DPT_ACCT_DEFAULT and conversion != "balle":
        raise ValueError("conversion: the default accountant uses 'balle' (give accountant='rdp')")
    oc = _orders(orders)
    opt = _pld_options(grid, max_points)
    if _is_array(noise_multiplier) or _is_array(sample_rate) or _is_array(steps) or _is_array(delta):
        return _vectorize(lambda s, q, t, d: _epsilon1(s, q, t, d, acct, conv, oc, opt),
                          (noise_multiplier, sample_rate, steps, delta))
    return _epsilon1(noise_multiplier, sample_rate, steps, delta, acct, conv, oc, opt)


def rdp_epsilon(noise_multiplier: ArrayLike, sample_rate: ArrayLike, steps: ArrayLike, delta: ArrayLike,
                conversion: str = "balle", orders: Optional[ArrayLike] = None) -> RdpEpsilon:
    """RDP epsilon with the order that attains it: RdpEpsilon(epsilon, order, at_edge);
    at_edge is True when the best order is the first or last of the grid (widen it)."""
    oc = _orders(orders)
    out, order, edge = ffi.new("double *"), ffi.new("double *"), ffi.new("int *")
    check(lib.dpt_rdp_sgm_epsilon_ex(_f(sample_rate, "sample_rate"), _f(noise_multiplier, "noise_multiplier"),
                                     _u64(steps, "steps"), _f(delta, "delta"), _conversion(conversion), oc[1], oc[2],
                                     out, order, edge))
    return RdpEpsilon(out[0], order[0], bool(edge[0]))


def delta_pld(noise_multiplier: ArrayLike, sample_rate: ArrayLike, steps: ArrayLike, epsilon: ArrayLike
              ) -> Union[float, np.ndarray]:
    """delta(epsilon) after `steps` steps, from the PLD accountant (an upper bound)."""
    def one(s, q, t, e):
        out = ffi.new("double *")
        check(lib.dpt_pld_sgm_delta(_f(q, "sample_rate"), _f(s, "noise_multiplier"), _u64(t, "steps"),
                                    _f(e, "epsilon"), out))
        return out[0]
    args = (noise_multiplier, sample_rate, steps, epsilon)
    if any(_is_array(a) for a in args):
        return _vectorize(one, args)
    return one(*args)


def default_orders() -> np.ndarray:
    """The library's default RDP order grid (a new float64 array)."""
    n = ffi.new("size_t *")
    p = lib.dpt_rdp_default_orders(n)
    return np.frombuffer(ffi.buffer(p, n[0] * 8), dtype=np.float64).copy()


def rdp(noise_multiplier: ArrayLike, sample_rate: ArrayLike, orders: Optional[ArrayLike] = None, steps: ArrayLike = 1
        ) -> np.ndarray:
    """RDP (nats) of `steps` steps of SGM(q, sigma) at each order (Opacus' compute_rdp):
    steps * dpt_rdp_sgm(q, sigma, alpha). Returns an ndarray like `orders` (default grid),
    or a float for a scalar order."""
    q, s, t = _f(sample_rate, "sample_rate"), _f(noise_multiplier, "noise_multiplier"), _u64(steps, "steps")
    r = ffi.new("double *")
    if orders is not None and not _is_array(orders):
        check(lib.dpt_rdp_sgm(q, s, _f(orders, "orders"), r))
        return r[0] * t
    a = default_orders() if orders is None else np.asarray(orders, dtype=np.float64)
    out = np.empty(a.shape, dtype=np.float64)
    for idx in np.ndindex(*a.shape):
        check(lib.dpt_rdp_sgm(q, s, float(a[idx]), r))
        out[idx] = r[0] * t
    return out


# ==== calibration ====

def _have_planning():
    if not hasattr(lib, "dpt_sampler_steps_for_epochs"):
        raise NotImplementedError("this libdptrain has no dpt_sampler_steps_for_epochs / dpt_train_calibrate_sigma "
                                  "(rebuild the package against a newer library)")


def steps_for_epochs(epochs: ArrayLike, sample_rate: ArrayLike) -> Union[int, np.ndarray]:
    """Steps of `epochs` whole epochs of Poisson sampling at rate q: epochs x max(1,
    round(1/q)), the steps dptrain.train(epochs=...) and `dptrain train --epochs` take and
    `dptrain account --epochs` counts (the library's dpt_sampler_steps_for_epochs; not
    ceil(epochs / q)). Example: q = 385/1000, 10 epochs: 30 steps."""
    _have_planning()
    q = _f(sample_rate, "sample_rate")
    if isinstance(epochs, (float, np.floating)) and math.isfinite(epochs) and epochs > 0 and epochs != math.floor(epochs):
        raise ValueError("epochs: %r is not a whole number: training runs whole epochs of max(1, round(1/q)) steps; "
                         "give steps= for a part of one" % (epochs,))
    e = _u64(epochs, "epochs")
    if not (q > 0 and q <= 1):
        raise ValueError("sample_rate must be in (0, 1], got %r" % (q,))
    out = ffi.new("uint64_t *")
    check(lib.dpt_sampler_steps_for_epochs(lib.DPT_SAMPLER_POISSON, 0, 0, q, e, out), "epochs")
    return int(out[0])


def calibrate_sigma(target_epsilon: ArrayLike, sample_rate: ArrayLike, delta: ArrayLike,
                    steps: Optional[ArrayLike] = None, epochs: Optional[ArrayLike] = None,
                    accountant: Optional[str] = None, conversion: str = "balle", tol: float = 1e-4,
                    orders: Optional[ArrayLike] = None) -> Union[float, np.ndarray]:
    """The smallest noise multiplier, to within `tol`, whose epsilon after `steps` steps (or
    `epochs` epochs: steps_for_epochs(epochs, q) steps) is at most target_epsilon: the result never
    overshoots the target, and sigma - tol does. accountant: None (the default: 'default', or
    'rdp' when `orders` or a conversion other than 'balle' is given), 'default' (the one
    training calibrates with, so the sigma equals train(target_epsilon=)'s), 'pld' or 'rdp'. `orders` (RDP only): the order grid of the
    epsilon that will be reported, the same as epsilon(..., orders=) takes (default: the
    library's grid). Raises OutOfRangeError (a ValueError) when the target cannot be
    reached for sigma in [0.05, 1e4]."""
    if (steps is None) == (epochs is None):
        raise ValueError("calibrate_sigma: give exactly one of steps= and epochs=")
    if steps is None:
        steps = steps_for_epochs(epochs, sample_rate)
    acct, conv = _accountant(accountant, orders, conversion), _conversion(conversion)
    if acct != lib.DPT_ACCT_RDP and orders is not None:
        raise ValueError("orders: only used by the RDP accountant (give accountant='rdp')")
    oc = _orders(orders)

    def one(e, q, d, t):
        out = ffi.new("double *")
        check(lib.dpt_calibrate_sigma_ex(_f(q, "sample_rate"), _u64(t, "steps"), _f(d, "delta"),
                                         _f(e, "target_epsilon"), acct, conv, oc[1], oc[2], _f(tol, "tol"), out))
        return out[0]
    args = (target_epsilon, sample_rate, delta, steps)
    if any(_is_array(a) for a in args):
        return _vectorize(one, args)
    return one(*args)


# ==== DP-ULR: Poisson sampling with rejection ====

def dpulr_rdp(noise_multiplier: ArrayLike, sample_rate: ArrayLike, dataset_size: ArrayLike, min_batch: ArrayLike,
              order: ArrayLike) -> Tuple[float, float, float]:
    """(gamma, rejection, sgm): the per-step RDP bound of DP-ULR at one order (docs/dpulr.md,
    issue 38), what the rejection costs over plain Poisson sampling (gamma - sgm) and the
    sampled Gaussian RDP at (q, sigma0)."""
    g, r, s = ffi.new("double *"), ffi.new("double *"), ffi.new("double *")
    check(lib.dpt_dpulr_rdp(_f(sample_rate, "sample_rate"), _f(noise_multiplier, "noise_multiplier"),
                            _u64(dataset_size, "dataset_size"), _u64(min_batch, "min_batch"), _f(order, "order"),
                            g, r, s))
    return g[0], r[0], s[0]


def dpulr_epsilon(noise_multiplier: ArrayLike, sample_rate: ArrayLike, dataset_size: ArrayLike, min_batch: ArrayLike,
                  steps: ArrayLike, delta: ArrayLike, conversion: str = "balle") -> Union[float, np.ndarray]:
    """epsilon of `steps` DP-ULR steps (Poisson sampling at q with batches smaller than
    min_batch = N_B redrawn, noise multiplier sigma0), RDP accountant."""
    conv = _conversion(conversion)

    def one(s, q, n, nb, t, d):
        out = ffi.new("double *")
        check(lib.dpt_dpulr_epsilon(_f(q, "sample_rate"), _f(s, "noise_multiplier"), _u64(n, "dataset_size"),
                                    _u64(nb, "min_batch"), _u64(t, "steps"), _f(d, "delta"), conv, out, ffi.NULL))
        return out[0]
    args = (noise_multiplier, sample_rate, dataset_size, min_batch, steps, delta)
    if any(_is_array(a) for a in args):
        return _vectorize(one, args)
    return one(*args)


def dpulr_default_min_batch(noise_multiplier: ArrayLike, sample_rate: ArrayLike, dataset_size: ArrayLike,
                            max_ratio: float = 1e-3) -> Tuple[int, float]:
    """(N_B, ratio): the largest N_B whose rejection cost is at most max_ratio times the SGM
    term at order DPULR_RATIO_ALPHA (what `dptrain train --algo dpulr` uses by default)."""
    nb, ratio = ffi.new("uint64_t *"), ffi.new("double *")
    check(lib.dpt_dpulr_default_min_batch(_f(sample_rate, "sample_rate"), _f(noise_multiplier, "noise_multiplier"),
                                          _u64(dataset_size, "dataset_size"), _f(max_ratio, "max_ratio"), nb, ratio))
    return int(nb[0]), ratio[0]


# ==== Ledger ====

def secure_distance(sampler: str = "table") -> Tuple[float, float]:
    """(mu, tv): the secure discrete Gaussian sampler's exact distance from the ideal one per
    coordinate and step, which the ledger accounts (Ledger.add_sgm_dgauss); (0, 0) for the
    exact "cks" sampler."""
    if not hasattr(lib, "dpt_privacy_secure_distance"):
        raise NotImplementedError("secure_distance: this libdptrain has no dpt_privacy_secure_distance")
    m = ffi.new("dpt_dgauss_method *")
    check(lib.dpt_dgauss_method_parse(cstr(sampler, "sampler"), m))
    mu, tv = ffi.new("double *"), ffi.new("double *")
    check(lib.dpt_privacy_secure_distance(m[0], mu, tv))
    return mu[0], tv[0]


def _json_of(ptr):
    pp = ffi.new("char **")
    check(lib.dpt_ledger_to_json(ptr, pp))
    try:
        return ffi.string(pp[0]).decode("utf-8")
    finally:
        lib.free(pp[0])


class Ledger:
    """An ordered list of privacy events (the C library's dpt_ledger), composed exactly as
    the trainer composes them. Events: add_sgm (DP-SGD steps), add_sgm_dgauss (secure
    DP-SGD with the table sampler), add_gaussian (one Gaussian
    release), add_dpulr, add_rdp_curve (any mechanism given by its RDP curve), add_eps_delta
    (basic composition). Ledgers saved by a run (ledger.json) load with Ledger.load."""

    __slots__ = ("_p",)

    def __init__(self, _ptr: Any = None) -> None:
        if _ptr is None:
            pp = ffi.new("dpt_ledger **")
            check(lib.dpt_ledger_new(pp))
            _ptr = pp[0]
        self._p = ffi.gc(_ptr, lib.dpt_ledger_free)

    # -- events --
    def add_sgm(self, sample_rate: float, noise_multiplier: float, steps: int = 1) -> Ledger:
        """`steps` steps of the Poisson-sampled Gaussian mechanism SGM(q, sigma)."""
        check(lib.dpt_ledger_add_sgm(self._p, _f(sample_rate, "sample_rate"), _f(noise_multiplier, "noise_multiplier"),
                                     _u64(steps, "steps")))
        return self

    def add_sgm_dgauss(self, sample_rate: float, noise_multiplier: float, coords: int, mu: float, tv: float,
                       steps: int = 1) -> Ledger:
        """`steps` steps of secure DP-SGD's lattice mechanism with the table sampler: SGM(q,
        sigma) (sigma the effective multiplier) plus the sampler's distance (mu, tv) from the
        ideal discrete Gaussian on each of `coords` coordinates (secure_distance("table"))."""
        if not hasattr(lib, "dpt_ledger_add_sgm_dgauss"):
            raise NotImplementedError("add_sgm_dgauss: this libdptrain has no dpt_ledger_add_sgm_dgauss")
        check(lib.dpt_ledger_add_sgm_dgauss(self._p, _f(sample_rate, "sample_rate"),
                                            _f(noise_multiplier, "noise_multiplier"), _u64(coords, "coords"),
                                            _f(mu, "mu"), _f(tv, "tv"), _u64(steps, "steps")))
        return self

    def add_gaussian(self, sensitivity: float, sigma: float, label: Optional[str] = None) -> Ledger:
        """One Gaussian mechanism release: L2 sensitivity, noise std sigma (multiplier sigma / sensitivity)."""
        check(lib.dpt_ledger_add_gaussian(self._p, _f(sensitivity, "sensitivity"), _f(sigma, "sigma"),
                                          ffi.NULL if label is None else cstr(label, "label")))
        return self

    def add_dpulr(self, sample_rate: float, noise_multiplier: float, dataset_size: int, min_batch: int, steps: int = 1
                  ) -> Ledger:
        """`steps` DP-ULR steps (Poisson with rejection below min_batch; RDP accountant only)."""
        check(lib.dpt_ledger_add_dpulr(self._p, _f(sample_rate, "sample_rate"), _f(noise_multiplier, "noise_multiplier"),
                                       _u64(dataset_size, "dataset_size"), _u64(min_batch, "min_batch"),
                                       _u64(steps, "steps")))
        return self

    def add_rdp_curve(self, orders: ArrayLike, rdp: ArrayLike, count: int = 1, label: Optional[str] = None) -> Ledger:
        """`count` repetitions of a mechanism with per-step RDP rdp[i] at orders[i]."""
        o = np.ascontiguousarray(np.asarray(orders, dtype=np.float64).ravel())
        r = np.ascontiguousarray(np.asarray(rdp, dtype=np.float64).ravel())
        if o.size != r.size:
            raise ValueError("add_rdp_curve: orders has %d values, rdp %d" % (o.size, r.size))
        if o.size == 0:
            raise ValueError("add_rdp_curve: empty curve")
        check(lib.dpt_ledger_add_rdp_curve(self._p, ffi.cast("const double *", ffi.from_buffer(o)),
                                           ffi.cast("const double *", ffi.from_buffer(r)), o.size,
                                           _u64(count, "count"), ffi.NULL if label is None else cstr(label, "label")))
        return self

    def add_eps_delta(self, eps: float, delta: float, label: Optional[str] = None) -> Ledger:
        """An (eps, delta)-DP release, composed by basic composition."""
        check(lib.dpt_ledger_add_eps_delta(self._p, _f(eps, "eps"), _f(delta, "delta"),
                                           ffi.NULL if label is None else cstr(label, "label")))
        return self

    # -- queries --
    def epsilon(self, delta: float, accountant: Optional[str] = None, conversion: str = "balle",
                orders: Optional[ArrayLike] = None) -> float:
        """epsilon of everything recorded at delta: accountant 'default' (what runs report and
        calibrate with: the smaller of the PLD bound, where it applies, and the RDP bound),
        'pld' (only for SGM / Gaussian events) or 'rdp'; None: 'default', or 'rdp' when `orders`
        or a conversion other than 'balle' is given."""
        out = ffi.new("double *")
        acct = _accountant(accountant, orders, conversion)
        if orders is not None:
            if acct != lib.DPT_ACCT_RDP:
                raise ValueError("orders: only used by the RDP accountant (give accountant='rdp')")
            oc = _orders(orders)
            check(lib.dpt_ledger_epsilon_rdp(self._p, _f(delta, "delta"), _conversion(conversion), oc[1], oc[2], out,
                                             ffi.NULL, ffi.NULL))
        else:
            check(lib.dpt_ledger_epsilon(self._p, _f(delta, "delta"), acct, _conversion(conversion), out))
        return out[0]

    def headline(self, delta: float) -> "Headline":
        """Headline(epsilon, accountant, epsilon_rdp, epsilon_pld): the epsilon runs report at delta
        (the default accountant: the smaller of the two bounds), which accountant gave it ('pld'
        or 'rdp') and both parts (epsilon_pld None when PLD does not apply)."""
        e, w, r, p = ffi.new("double *"), ffi.new("dpt_accountant *"), ffi.new("double *"), ffi.new("double *")
        check(lib.dpt_ledger_epsilon_default(self._p, _f(delta, "delta"), lib.DPT_CONV_BALLE, e, w, r, p))
        return Headline(e[0], "pld" if w[0] == lib.DPT_ACCT_PLD else "rdp", r[0], None if p[0] != p[0] else p[0])

    def rdp_epsilon(self, delta: float, conversion: str = "balle",
                    orders: Optional[ArrayLike] = None) -> "RdpEpsilon":
        """RdpEpsilon(epsilon, order, at_edge) of the ledger."""
        oc = _orders(orders)
        out, order, edge = ffi.new("double *"), ffi.new("double *"), ffi.new("int *")
        check(lib.dpt_ledger_epsilon_rdp(self._p, _f(delta, "delta"), _conversion(conversion), oc[1], oc[2], out,
                                         order, edge))
        return RdpEpsilon(out[0], order[0], bool(edge[0]))

    @property
    def steps(self) -> int:
        """Total SGM and DP-ULR steps recorded."""
        return int(lib.dpt_ledger_steps(self._p))

    @property
    def n_events(self) -> int:
        """Stored events (consecutive identical events are merged into one with a count)."""
        return int(lib.dpt_ledger_n_events(self._p))

    @property
    def pld_applies(self) -> bool:
        return bool(lib.dpt_ledger_pld_applies(self._p))

    @property
    def events(self) -> List[Dict[str, Any]]:
        """The events as dicts (from the ledger's JSON form)."""
        return json.loads(self.to_json())["events"]

    @property
    def meta(self) -> Dict[str, Any]:
        """The metadata as a dict (a copy; set entries with set_meta)."""
        return dict(json.loads(self.to_json()).get("meta", {}))

    def get_meta(self, key: str, default: Any = None) -> Any:
        p = lib.dpt_ledger_get_meta(self._p, cstr(key, "key"))
        return default if p == ffi.NULL else ffi.string(p).decode("utf-8")

    def set_meta(self, key: str, value: Any) -> None:
        check(lib.dpt_ledger_set_meta(self._p, cstr(key, "key"), cstr(value, "value")))
        return self

    # -- serialization --
    def to_json(self) -> str:
        """The versioned, checksummed JSON form (what ledger.json holds)."""
        return _json_of(self._p)

    @classmethod
    def _copy_of(cls, ptr):
        """A Ledger holding a copy of a ledger the library owns (a const dpt_ledger *)."""
        return cls.from_json(_json_of(ptr))

    @classmethod
    def from_json(cls, text: str) -> Ledger:
        """Parses and validates a ledger's JSON (FormatError on a malformed or edited one)."""
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        pp = ffi.new("dpt_ledger **")
        check(lib.dpt_ledger_from_json(cstr(text, "json"), pp))
        return cls(pp[0])

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the ledger atomically (temporary file, fsync, rename)."""
        check(lib.dpt_ledger_save(self._p, cstr(os.fspath(path), "path")))

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> Ledger:
        """A ledger file, or a run directory's ledger.json."""
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, "ledger.json")
        if not os.path.exists(path):
            raise file_not_found(path, "no such ledger file")
        pp = ffi.new("dpt_ledger **")
        check(lib.dpt_ledger_load(cstr(path, "path"), pp))
        return cls(pp[0])

    def copy(self) -> Ledger:
        return Ledger.from_json(self.to_json())

    def label(self, full: bool = True) -> str:
        """What qualifies this ledger's epsilon, as the CLI prints it after every epsilon
        (the library's dpt_ledger_label): "[this epsilon does NOT cover: ...]" (metadata
        epsilon_excludes) and "[SEEDED run ...]" (seed_source "caller"), two spaces apart;
        full=False the compact form of the epoch lines; "" when there is none."""
        if not hasattr(lib, "dpt_ledger_label"):
            raise NotImplementedError("Ledger.label: this libdptrain has no dpt_ledger_label (rebuild the package)")
        buf = ffi.new("char[]", 1024)
        lib.dpt_ledger_label(self._p, int(bool(full)), buf, len(buf))
        return ffi.string(buf).decode("utf-8", "replace").strip()

    def __repr__(self):
        return "Ledger(%d events, %d steps)" % (self.n_events, self.steps)


def read_ledger(path: Union[str, os.PathLike]) -> Ledger:
    """Ledger.load: a run's ledger.json (or the run directory holding it)."""
    return Ledger.load(path)
