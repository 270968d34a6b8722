"""Adaptive clipping (Andrew et al. 2021) from Python: PrivateGradients(adaptive_quantile=..., secure=False)
and dptrain.DPSGD(adaptive_quantile=...). The clip (PrivateGradients.clip) follows the
quantile; the joint release's sensitivity (replace one row, same seed: updates at most
2 C_t / (q n) apart, the count 1 apart, read back from the next clip); the gradient noise's
std sigma_Delta C_t and the count noise's std sigma_b; convergence to the quantile of known
norms; the epsilon of T steps of SGM(q, sigma) with sigma the total; a resumed ledger_path
continues the clip; target_epsilon ends at or below the target; refusals."""
import math
import os

import numpy as np
import pytest

import dptrain
from helpers import blobs


def rows_of_norm(norms, dim, seed):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(len(norms), dim))
    return (g * (np.asarray(norms) / np.linalg.norm(g, axis=1))[:, None]).astype(np.float32)


def test_sigma_delta_and_clip_property():
    pg = dptrain.PrivateGradients(1000, 5, batch_size=50, sigma=1.0, clip=0.1, adaptive_quantile=0.5, seed=3,
                                  adaptive_sigma_b=1.0, secure=False)
    assert pg.sigma == pytest.approx((1 - 1 / 4) ** -0.5, rel=1e-15)
    assert pg.sigma_accounted == 1.0
    assert pg.clip == 0.1
    for _ in range(10):  # every row huge: clipped, so C grows
        idx = pg.sample()
        pg.release(np.full((len(idx), 5), 1e6, np.float32))
    assert pg.clip > 0.1 * math.exp(0.2 * 0.4 * 10)
    fixed = dptrain.PrivateGradients(1000, 5, batch_size=50, sigma=1.0, clip=0.7, seed=3, secure=False)
    assert fixed.clip == 0.7


def test_sensitivity_replace_one():
    """Same seed, same batch, row 0 below C (counted) in one and huge (not counted) in the
    other: the updates differ by at most 2 C / (q n), the counts by exactly 1."""
    kw = dict(batch_size=40, sigma=1.0, clip=0.5, adaptive_quantile=0.5, adaptive_sigma_b=2.0, seed=11, secure=False)
    a, b = dptrain.PrivateGradients(800, 30, **kw), dptrain.PrivateGradients(800, 30, **kw)
    ia, ib = a.sample(), b.sample()
    assert np.array_equal(ia, ib) and len(ia) > 1
    g = rows_of_norm(np.linspace(0.05, 1.0, len(ia)), 30, 1)
    g2 = g.copy()
    g2[0] = 1e8
    C0 = a.clip
    ua, ub = a.release(g), b.release(g2)
    assert np.linalg.norm(ua.astype(np.float64) - ub) <= 2 * C0 / 40 * (1 + 1e-5)
    # C_1 = C_0 exp(-lr (b~ - gamma)): the counts differ by 1, so b~ by 1 / (q n)
    assert math.log(a.clip / b.clip) == pytest.approx(-0.2 / 40, rel=1e-9)


def test_noise_std():
    q, n, dim, sigma, sb = 0.01, 1000, 200000, 1.3, 0.8
    pg = dptrain.PrivateGradients(n, dim, sample_rate=q, sigma=sigma, clip=0.7, adaptive_quantile=0.5,
                                  adaptive_sigma_b=sb, seed=5, secure=False)
    sd = (sigma ** -2 - (2 * sb) ** -2) ** -0.5
    idx = pg.sample()
    C = pg.clip
    e = pg.release(np.zeros((len(idx), dim), np.float32)).astype(np.float64) * q * n
    assert abs(e.std() - sd * C) <= 6 * sd * C / math.sqrt(2 * dim)
    # the count: half the rows 0, half huge, so the centred count is known; b~ from the clip
    n2, q2, sb2, lr = 2000, 0.05, 3.0, 0.1
    pg = dptrain.PrivateGradients(n2, 4, sample_rate=q2, sigma=1.0, clip=1.0, adaptive_quantile=0.5,
                                  adaptive_lr=lr, adaptive_sigma_b=sb2, seed=6, secure=False)
    noise = []
    for _ in range(2000):
        idx = pg.sample()
        huge = (idx % 2).astype(bool)
        g = np.where(huge[:, None], np.float32(1e20), np.float32(0)).astype(np.float32).reshape(len(idx), 1)
        g = np.repeat(g, 4, axis=1)
        cnt = 0.5 * (len(idx) - 2 * int(huge.sum()))
        C0 = pg.clip
        pg.release(g)
        f = 0.5 - math.log(pg.clip / C0) / lr
        if 0 < f < 1:
            noise.append((f - 0.5) * q2 * n2 - cnt)
    noise = np.asarray(noise)
    assert len(noise) > 1990
    assert abs(noise.std() - sb2) <= 6 * sb2 / math.sqrt(2 * len(noise))
    assert abs(noise.mean()) <= 6 * sb2 / math.sqrt(len(noise))


def test_converges_to_quantile():
    n, dim, gamma = 4000, 8, 0.7
    norms = 0.1 + 2.0 * np.arange(n) / n  # uniform on [0.1, 2.1]: the 0.7-quantile is 1.5
    pg = dptrain.PrivateGradients(n, dim, sample_rate=0.05, sigma=1.0, clip=5.0, adaptive_quantile=gamma,
                                  adaptive_sigma_b=1.0, seed=8, secure=False)
    g_all = rows_of_norm(norms, dim, 2)
    late = []
    for t in range(1500):
        idx = pg.sample()
        pg.release(g_all[idx])
        if t >= 1200:
            late.append(math.log(pg.clip))
    assert math.exp(np.mean(late)) == pytest.approx(0.1 + 2 * gamma, rel=0.05)


def test_epsilon_and_resume(tmp_path):
    path = tmp_path / "ledger.json"
    kw = dict(sample_rate=0.05, sigma=0.9, clip=1.0, adaptive_quantile=0.5, seed=4, ledger_path=path, secure=False)
    pg = dptrain.PrivateGradients(600, 20, **kw)
    for _ in range(30):
        idx = pg.sample()
        pg.release(np.full((len(idx), 20), 3.0, np.float32))
    for acct in ("rdp", "pld"):
        assert pg.epsilon(accountant=acct) == pytest.approx(
            dptrain.accounting.epsilon(0.9, 0.05, 30, 1e-5, accountant=acct), rel=1e-12)
    C = pg.clip
    pg.sample()  # the file records C with the step
    pg.close()
    pg = dptrain.PrivateGradients(600, 20, resume=True, **kw)
    assert pg.clip == C and pg.steps == 31
    pg.close()
    with pytest.raises(dptrain.DptrainError, match="adaptive clipping was"):
        dptrain.PrivateGradients(600, 20, resume=True, **dict(kw, adaptive_quantile=0.6))
    assert os.path.exists(path)


def test_refusals():
    with pytest.raises(dptrain.DptrainError, match="adaptive_sigma_b"):
        dptrain.PrivateGradients(1000, 5, batch_size=50, sigma=1.0, adaptive_quantile=0.5, adaptive_sigma_b=0.5, secure=False)
    with pytest.raises(dptrain.DptrainError, match="adaptive_quantile"):
        dptrain.PrivateGradients(1000, 5, batch_size=50, sigma=1.0, adaptive_quantile=1.0, secure=False)
    with pytest.raises(dptrain.DptrainError, match="adaptive_lr"):
        dptrain.PrivateGradients(1000, 5, batch_size=50, sigma=1.0, adaptive_quantile=0.5, adaptive_lr=-1, secure=False)
    with pytest.raises(ValueError, match="only with adaptive_quantile"):
        dptrain.PrivateGradients(1000, 5, batch_size=50, sigma=1.0, adaptive_sigma_b=3.0)
    x, y = blobs(600, 8)
    with pytest.raises(dptrain.DptrainError, match="adaptive_sigma_b"):
        dptrain.train(x, y, model="mlp:8-8-3:relu", epochs=1, seed=1, verbose=False,
                      algorithm=dptrain.DPSGD(sigma=1.0, adaptive_quantile=0.5, adaptive_sigma_b=0.4))
    with pytest.raises(ValueError, match="adaptive_quantile"):
        dptrain.train(x, y, model="mlp:8-8-3:relu", epochs=1, seed=1, verbose=False,
                      algorithm=dptrain.DPSGD(sigma=1.0, adaptive_quantile=1.5))


def test_train_target_epsilon_and_clip():
    x, y = blobs(3000, 8)
    run = dptrain.train(x, y, model="mlp:8-16-3:relu", epochs=2, batch_size=60, seed=2, verbose=False,
                        optimizer="sgd", lr=0.5,
                        algorithm=dptrain.DPSGD(target_epsilon=2.0, clip=0.05, adaptive_quantile=0.5))
    assert 0 < run.epsilon <= 2.0
    assert run.clip is not None and run.clip != 0.05
    fixed = dptrain.train(x, y, model="mlp:8-16-3:relu", epochs=1, batch_size=60, seed=2, verbose=False,
                          algorithm=dptrain.DPSGD(sigma=1.0))
    assert fixed.clip is None
