"""Accounting: every wrapper returns exactly the C library's result (bit for bit), checked
against a direct cffi call of the same C function and against `dptrain account --json`
(cJSON prints doubles so that they read back exactly)."""
import json
import math
import subprocess

import numpy as np
import pytest

import dptrain
from dptrain import accounting as acc
from dptrain._lib import ffi, lib

GRID = [  # (sigma, q, steps, delta)
    (1.1, 256 / 60000, 4690, 1e-5),
    (0.8, 0.01, 1, 1e-6),
    (2.5, 1.0, 50, 1e-5),
    (0.6, 0.004, 12000, 1e-5),
]


def c_rdp_eps(q, sigma, steps, delta, conv=0):
    out = ffi.new("double *")
    assert lib.dpt_rdp_sgm_epsilon_ex(q, sigma, steps, delta, conv, ffi.NULL, 0, out, ffi.NULL, ffi.NULL) == 0
    return out[0]


def c_pld_eps(q, sigma, steps, delta):
    out = ffi.new("double *")
    assert lib.dpt_pld_sgm_epsilon(q, sigma, steps, delta, out) == 0
    return out[0]


def c_calibrate(q, steps, delta, target, acct=0, conv=0, tol=1e-4):
    out = ffi.new("double *")
    assert lib.dpt_calibrate_sigma(q, steps, delta, target, acct, conv, tol, out) == 0
    return out[0]


def cli_json(cli, *args):
    r = subprocess.run([cli, "account", "--json", *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("sigma,q,steps,delta", GRID)
def test_epsilon_rdp_equals_c(sigma, q, steps, delta):
    assert acc.epsilon(sigma, q, steps, delta, accountant="rdp") == c_rdp_eps(q, sigma, steps, delta)
    assert acc.epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=delta, conversion="classic") == \
        c_rdp_eps(q, sigma, steps, delta, lib.DPT_CONV_CLASSIC)


def test_epsilon_pld_equals_c():
    sigma, q, steps, delta = GRID[0]
    assert acc.epsilon(sigma, q, steps, delta, accountant="pld") == c_pld_eps(q, sigma, steps, delta)


def test_numpy_scalars_and_arrays():
    sigma, q, steps, delta = GRID[0]
    ref = c_rdp_eps(q, sigma, steps, delta)
    # numpy scalars: exactly the same doubles
    assert acc.epsilon(np.float64(sigma), np.float64(q), np.int64(steps), np.float64(delta), accountant="rdp") == ref
    assert acc.epsilon(sigma, q, np.uint32(steps), delta, accountant="rdp") == ref
    assert acc.epsilon(sigma, q, float(steps), delta, accountant="rdp") == ref  # an integral float is a count
    # float32 widens exactly: the result is the C function's at that double
    assert acc.epsilon(np.float32(sigma), q, steps, delta, accountant="rdp") == \
        c_rdp_eps(q, float(np.float32(sigma)), steps, delta)
    sig = np.array([[0.8, 1.1, 2.0]])
    st = np.array([[100], [1000]])
    e = acc.epsilon(sig, q, st, delta, accountant="rdp")
    assert e.shape == (2, 3) and e.dtype == np.float64
    for i in range(2):
        for j in range(3):
            assert e[i, j] == c_rdp_eps(q, float(sig[0, j]), int(st[i, 0]), delta)
    assert isinstance(acc.epsilon(sigma, q, steps, delta, accountant="rdp"), float)
    assert acc.epsilon([1.0, 2.0], q, steps, delta, accountant="rdp").shape == (2,)


@pytest.mark.parametrize("sigma,q,steps,delta", GRID[:3])
def test_epsilon_equals_cli(cli, sigma, q, steps, delta):
    j = cli_json(cli, "--accountant", "rdp", "--sample-rate", repr(q), "--sigma", repr(sigma), "--steps", steps,
                 "--delta", repr(delta))
    assert j["epsilon"] == acc.epsilon(sigma, q, steps, delta, accountant="rdp")
    # without --accountant / accountant=: both take the default (headline) accountant
    jd = cli_json(cli, "--sample-rate", repr(q), "--sigma", repr(sigma), "--steps", steps, "--delta", repr(delta))
    assert jd["epsilon"] == acc.epsilon(sigma, q, steps, delta)
    assert jd["epsilon"] == min(jd["epsilon_rdp"], jd["epsilon_pld"]) == min(
        acc.epsilon(sigma, q, steps, delta, accountant="rdp"), acc.epsilon(sigma, q, steps, delta, accountant="pld"))
    r = acc.rdp_epsilon(sigma, q, steps, delta)
    assert (j["order"], j["order_at_edge"]) == (r.order, r.at_edge)


def test_pld_equals_cli(cli):
    sigma, q, steps, delta = GRID[0]
    j = cli_json(cli, "--accountant", "pld", "--sample-rate", repr(q), "--sigma", repr(sigma), "--steps", steps,
                 "--delta", repr(delta))
    assert j["epsilon"] == acc.epsilon(sigma, q, steps, delta, accountant="pld")


@pytest.mark.parametrize("accountant", ["rdp", "pld", "default"])
def test_calibrate_equals_c_and_cli_and_never_overshoots(cli, accountant):
    q, delta, target, epochs = 256 / 60000, 1e-5, 3.0, 3
    steps = acc.steps_for_epochs(epochs, q)
    a = {"rdp": lib.DPT_ACCT_RDP, "pld": lib.DPT_ACCT_PLD, "default": lib.DPT_ACCT_DEFAULT}[accountant]
    s = acc.calibrate_sigma(target_epsilon=target, sample_rate=q, epochs=epochs, delta=delta, accountant=accountant)
    assert s == c_calibrate(q, steps, delta, target, a)
    assert s == acc.calibrate_sigma(target, q, delta, steps=steps, accountant=accountant)
    if accountant == "default":  # what calibrate_sigma and `dptrain account` do without accountant=
        assert s == acc.calibrate_sigma(target, q, delta, steps=steps)
        assert s < acc.calibrate_sigma(target, q, delta, steps=steps, accountant="rdp")
    flag = ["--accountant", accountant] if accountant != "default" else []
    j = cli_json(cli, *flag, "--sample-rate", repr(q), "--target-epsilon", target, "--epochs",
                 epochs, "--delta", delta)
    assert j["sigma"] == s and j["steps"] == steps
    # never overshooting: the target holds at sigma, and not at sigma - tol
    assert acc.epsilon(s, q, steps, delta, accountant=accountant) <= target
    assert acc.epsilon(s - 1e-4, q, steps, delta, accountant=accountant) > target


def test_calibrate_with_orders_reports_on_the_same_grid():
    # the calibration must use exactly the order grid that reports the epsilon (issue 18.7):
    # on a coarse grid the default grid's sigma would overshoot the target
    q, delta, target, steps = 0.01, 1e-5, 10.0, 1000
    grid = [1.25, 1.5, 2.0, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    s = acc.calibrate_sigma(target, q, delta, steps=steps, orders=grid)
    out = ffi.new("double *")
    g = np.asarray(grid, dtype=np.float64)
    assert lib.dpt_calibrate_sigma_ex(q, steps, delta, target, lib.DPT_ACCT_RDP, lib.DPT_CONV_BALLE,
                                      ffi.cast("const double *", ffi.from_buffer(g)), g.size, 1e-4, out) == 0
    assert s == out[0]
    assert acc.epsilon(s, q, steps, delta, orders=grid) <= target
    assert acc.epsilon(s - 1e-4, q, steps, delta, orders=grid) > target
    assert s != acc.calibrate_sigma(target, q, delta, steps=steps)
    with pytest.raises(ValueError, match="orders"):
        acc.calibrate_sigma(target, q, delta, steps=steps, accountant="pld", orders=grid)
    with pytest.raises(ValueError, match="orders"):
        acc.calibrate_sigma(target, q, delta, steps=steps, orders=[])


def test_calibrate_unreachable_is_value_error():
    with pytest.raises(ValueError, match="unreachable|range|target"):
        acc.calibrate_sigma(1e-9, 1.0, 1e-5, steps=10 ** 6)


def test_rdp_curve_and_orders():
    orders = acc.default_orders()
    n = ffi.new("size_t *")
    lib.dpt_rdp_default_orders(n)
    assert orders.size == n[0] and orders[0] > 1
    r = acc.rdp(1.1, 0.01, orders, steps=10)
    one = ffi.new("double *")
    for a, v in zip(orders[::17], r[::17]):
        assert lib.dpt_rdp_sgm(0.01, 1.1, float(a), one) == 0
        assert v == one[0] * 10
    assert isinstance(acc.rdp(1.1, 0.01, 8.0), float)
    # a custom grid reaches the C function
    e = acc.rdp_epsilon(1.1, 0.01, 1000, 1e-5, orders=[2.0, 4.0, 8.0, 16.0])
    assert e.order in (2.0, 4.0, 8.0, 16.0)
    arr = np.array([2.0, 4.0, 8.0, 16.0])
    out = ffi.new("double *")
    lib.dpt_rdp_sgm_epsilon_ex(0.01, 1.1, 1000, 1e-5, 0, ffi.cast("double *", ffi.from_buffer(arr)), 4, out, ffi.NULL,
                               ffi.NULL)
    assert e.epsilon == out[0]


def test_delta_pld():
    out = ffi.new("double *")
    assert lib.dpt_pld_sgm_delta(0.01, 1.0, 500, 2.0, out) == 0
    assert acc.delta_pld(1.0, 0.01, 500, 2.0) == out[0]


def test_dpulr_equals_c_and_cli(cli):
    q, s0, N, T, delta = 0.01, 1.5, 60000, 2000, 1e-5
    nb, ratio = acc.dpulr_default_min_batch(s0, q, N)
    pnb, pr = ffi.new("uint64_t *"), ffi.new("double *")
    assert lib.dpt_dpulr_default_min_batch(q, s0, N, 1e-3, pnb, pr) == 0
    assert (nb, ratio) == (pnb[0], pr[0])
    out = ffi.new("double *")
    assert lib.dpt_dpulr_epsilon(q, s0, N, nb, T, delta, 0, out, ffi.NULL) == 0
    e = acc.dpulr_epsilon(s0, q, N, nb, T, delta)
    assert e == out[0]
    j = cli_json(cli, "--algo", "dpulr", "--batch-size", 600, "--dataset-size", N, "--sigma", s0, "--steps", T,
                 "--delta", delta)
    assert j["epsilon"] == e and j["min_batch"] == nb
    g, r, s = acc.dpulr_rdp(s0, q, N, nb, 4.0)
    assert g == pytest.approx(r + s, rel=1e-15)
    assert r >= 0 and not hasattr(acc, "dpulr_rejection_term")  # withdrawn with the old bound (issue 38)
    # the bound, not the withdrawn ln(c0/c1) + SGM: the audit's counterexample
    assert acc.dpulr_epsilon(0.8, 0.1, 100, 10, 1, 1e-5) == pytest.approx(10.7078, abs=1e-3)


def test_ledger_composition_equals_c():
    L = acc.Ledger()
    L.add_sgm(0.01, 1.0, 300).add_sgm(0.02, 1.5, 100).add_gaussian(1.0, 4.0, "dp-pca")
    L.add_rdp_curve([2.0, 4.0, 8.0], [0.01, 0.02, 0.05], count=3, label="custom")
    # the same events through cffi directly
    pp = ffi.new("dpt_ledger **")
    assert lib.dpt_ledger_new(pp) == 0
    c = ffi.gc(pp[0], lib.dpt_ledger_free)
    lib.dpt_ledger_add_sgm(c, 0.01, 1.0, 300)
    lib.dpt_ledger_add_sgm(c, 0.02, 1.5, 100)
    lib.dpt_ledger_add_gaussian(c, 1.0, 4.0, b"dp-pca")
    o, r = np.array([2.0, 4.0, 8.0]), np.array([0.01, 0.02, 0.05])
    lib.dpt_ledger_add_rdp_curve(c, ffi.cast("double *", ffi.from_buffer(o)), ffi.cast("double *", ffi.from_buffer(r)),
                                 3, 3, b"custom")
    out = ffi.new("double *")
    assert lib.dpt_ledger_epsilon(c, 1e-5, 0, 0, out) == 0
    assert L.epsilon(1e-5) == out[0]
    assert L.steps == 400 and L.n_events == 4 and not L.pld_applies
    with pytest.raises(dptrain.UnsupportedError):
        L.epsilon(1e-5, accountant="pld")
    # heterogeneous SGM steps: PLD applies
    L2 = acc.Ledger().add_sgm(0.01, 1.0, 300).add_sgm(0.02, 1.5, 100)
    assert L2.pld_applies and L2.epsilon(1e-5, accountant="pld") <= L2.epsilon(1e-5) * 1.01
    # eps-delta events compose by basic composition
    L3 = acc.Ledger().add_eps_delta(0.5, 1e-6)
    assert L3.epsilon(1e-5) == pytest.approx(0.5)


def test_ledger_json_roundtrip_and_cli(cli, workdir):
    L = acc.Ledger().add_sgm(256 / 60000, 1.1, 4690).set_meta("note", "test")
    path = workdir + "/ledger.json"
    L.save(path)
    M = acc.read_ledger(workdir)  # a run directory works too
    assert M.to_json() == L.to_json() and M.get_meta("note") == "test" and M.meta["note"] == "test"
    j = cli_json(cli, "--ledger", path, "--delta", "1e-5")
    assert j["epsilon"] == M.epsilon(1e-5) and j["steps"] == 4690
    assert j["epsilon_pld"] == M.epsilon(1e-5, accountant="pld")
    # an edited ledger is refused with the library's message
    text = open(path).read().replace("4690", "469")
    with pytest.raises(dptrain.FormatError, match="checksum"):
        acc.Ledger.from_json(text)
    with pytest.raises(FileNotFoundError, match="missing.json: no such ledger file") as e:
        acc.read_ledger(workdir + "/missing.json")
    assert isinstance(e.value, dptrain.DptrainError)


@pytest.mark.parametrize("bad,exc,match", [
    (dict(noise_multiplier=0.0), ValueError, "sigma"),
    (dict(sample_rate=1.5), ValueError, "q must be in"),
    (dict(steps=0), ValueError, "steps"),
    (dict(steps=-3), ValueError, "steps"),
    (dict(steps=2.5), ValueError, "steps must be an integer"),
    (dict(delta=1.0), ValueError, "delta"),
    (dict(delta=float("nan")), ValueError, "delta"),
    (dict(noise_multiplier="1.0"), TypeError, "noise_multiplier"),
    (dict(accountant="gdp"), ValueError, "accountant"),
    (dict(conversion="x"), ValueError, "conversion"),
])
def test_bad_arguments(bad, exc, match):
    args = dict(noise_multiplier=1.0, sample_rate=0.01, steps=100, delta=1e-5)
    args.update(bad)
    with pytest.raises(exc, match=match):
        acc.epsilon(**args)


def test_errors_carry_library_message_and_status():
    with pytest.raises(dptrain.InvalidArgumentError) as ei:
        acc.epsilon(1.0, 0.0, 10, 1e-5)
    e = ei.value
    assert e.status == lib.DPT_EINVAL and e.status_name == ffi.string(lib.dpt_status_name(lib.DPT_EINVAL)).decode()
    assert "got 0" in str(e)
    assert math.isfinite(acc.epsilon(1.0, 0.01, 10, 1e-5))  # the error state does not stick
