"""dptrain.PrivateGradients (the C library's dpt_sgm): the noise's standard deviation, the
scaling by q n against a naive reference, the ledger's epsilon against dptrain.accounting,
calibration, the budget, the ledger file and resume, the refusals; and DP-SGD with PyTorch
per-example gradients (torch.func) of a model from_torch cannot convert.

Two mechanisms with the same seed draw the same batches and the same noise: releasing the
real gradients on one and zeros on the other isolates the noise (the zeros' release) and
the clipped sum / (q n) (the difference), so both are checked exactly, not statistically."""
import os

import numpy as np
import pytest

import dptrain
from dptrain import accounting


def clipped_sum(g, C):
    """naive reference: sum_i g_i min(1, C / ||g_i||) in float64"""
    g = np.asarray(g, dtype=np.float64).reshape(len(g), -1)
    norms = np.linalg.norm(g, axis=1)
    f = np.where(norms > C, C / np.maximum(norms, 1e-300), 1.0)
    return (g * f[:, None]).sum(axis=0)


def twin(**kw):
    return dptrain.PrivateGradients(seed=1234, **kw, secure=False), dptrain.PrivateGradients(seed=1234, **kw, secure=False)


def test_noise_std_and_scaling():
    n, dim, q, sigma, C = 400, 50000, 0.05, 1.3, 0.7
    a, b = twin(n=n, dim=dim, sample_rate=q, sigma=sigma, clip=C)
    rng = np.random.default_rng(0)
    for step in range(2):
        ia, ib = a.sample(), b.sample()
        assert ia.dtype == np.uint32 and np.array_equal(ia, ib)
        g = (rng.normal(size=(len(ia), dim)) * rng.uniform(0.001, 0.01, size=(len(ia), 1))).astype(np.float32)
        g[0] *= 1e6  # one huge row: clipped to C
        out = a.release(g)
        noise = b.release(np.zeros_like(g))
        assert out.dtype == np.float32 and out.shape == (dim,)
        # the noise: std sigma C per coordinate of the sum (standard error 0.3% at 5e4 values)
        e = noise.astype(np.float64) * q * n
        assert abs(e.std() / (sigma * C) - 1) < 0.02, e.std()
        assert abs(e.mean()) < 6 * sigma * C / np.sqrt(dim)
        # the scaling: out - noise = clipped sum / (q n), to float rounding of both outputs
        want = clipped_sum(g, C) / (q * n)
        got = out.astype(np.float64) - noise.astype(np.float64)
        tol = 1.2e-7 * (np.abs(out) + np.abs(noise)) + 1e-12
        assert np.all(np.abs(got - want) <= tol), np.max(np.abs(got - want) / tol)
    assert a.steps == 2 and a.epsilon() > 0


def test_ledger_epsilon_matches_accounting():
    n, q, sigma, T = 1000, 0.02, 1.1, 30
    with dptrain.PrivateGradients(n, 8, batch_size=q * n, sigma=sigma, seed=5, secure=False) as pg:
        for _ in range(T):
            idx = pg.sample()
            pg.release(np.ones((len(idx), 8), np.float32))
        assert pg.steps == T and pg.ledger.steps == T
        want = accounting.epsilon(sigma, q, T, 1e-5)
        assert pg.epsilon() == pytest.approx(want, rel=1e-13)
        assert pg.epsilon(1e-6) == pytest.approx(accounting.epsilon(sigma, q, T, 1e-6), rel=1e-13)
        assert pg.epsilon(accountant="pld") == pytest.approx(accounting.Ledger().add_sgm(q, sigma, T).epsilon(
            1e-5, accountant="pld"), rel=1e-13)
        pg.sample()  # sampled, never released: counted all the same
        assert pg.steps == T + 1
    # secure (exact CKS sampler): SGM at the lattice mechanism's effective multiplier
    with dptrain.PrivateGradients(n, 8, sample_rate=q, sigma=sigma, secure=True, secure_sampler="cks") as pg:
        for _ in range(5):
            pg.release(np.zeros((len(pg.sample()), 8)))
        assert pg.sigma == sigma and pg.sigma_accounted < sigma
        assert pg.epsilon() == pytest.approx(accounting.Ledger().add_sgm(q, pg.sigma_accounted, 5).epsilon(1e-5),
                                             rel=1e-13)
    # secure with the table sampler (the default): its distance from the exact sampler too
    mu, tv = accounting.secure_distance("table")
    assert accounting.secure_distance("cks") == (0.0, 0.0) and mu > 0
    with dptrain.PrivateGradients(n, 8, sample_rate=q, sigma=sigma, secure=True) as pg:
        for _ in range(5):
            pg.release(np.zeros((len(pg.sample()), 8)))
        want = accounting.Ledger().add_sgm_dgauss(q, pg.sigma_accounted, 8, mu, tv, 5).epsilon(1e-5)
        assert pg.epsilon() == pytest.approx(want, rel=1e-13)
        assert want > accounting.Ledger().add_sgm(q, pg.sigma_accounted, 5).epsilon(1e-5)


def test_calibration_and_budget():
    n, q = 2000, 0.05
    with dptrain.PrivateGradients(n, 4, sample_rate=q, target_epsilon=1.0, epochs=1, secure=False) as pg:
        assert pg.sigma == accounting.calibrate_sigma(1.0, q, 1e-5, epochs=1)
        T = 0
        with pytest.raises(dptrain.PrivacyError, match="target_epsilon"):
            while T < 10000:
                pg.sample()
                T += 1
        assert T >= accounting.steps_for_epochs(1, q)  # the planned steps fit
        assert pg.steps == T and pg.epsilon() <= 1.0
        assert accounting.epsilon(pg.sigma, q, T + 1, 1e-5) > 1.0  # the refused one would not


def test_ledger_file_and_resume(tmp_path):
    path = tmp_path / "ledger.json"
    kw = dict(n=300, dim=6, sample_rate=0.1, sigma=1.0, seed=9, ledger_path=path, secure=False)
    with dptrain.PrivateGradients(**kw) as pg:
        assert dptrain.Ledger.load(path).steps == 0
        for t in range(3):
            idx = pg.sample()
            assert dptrain.Ledger.load(path).steps == t + 1  # on disk before release
            pg.release(np.zeros((len(idx), 6)))
    with pytest.raises(dptrain.InvalidArgumentError, match="exists"):
        dptrain.PrivateGradients(**kw)
    with dptrain.PrivateGradients(resume=True, **kw) as pg:
        assert pg.steps == 3
        pg.sample()
        assert dptrain.Ledger.load(path).steps == 4
    with pytest.raises(dptrain.MismatchError, match="clip was 1, now 2"):
        dptrain.PrivateGradients(resume=True, **dict(kw, clip=2.0))
    assert dptrain.Ledger.load(path).get_meta("algorithm") == "dpt_sgm"
    # one mechanism per ledger file: a second resume while the first is open is refused
    with dptrain.PrivateGradients(resume=True, **kw) as pg:
        with pytest.raises(dptrain.BusyError, match="in use by another dpt_sgm"):
            dptrain.PrivateGradients(resume=True, **kw)
        assert pg.steps == 4


def test_threads_release_a_batch_once():
    """Threads sharing one mechanism: each sampled batch is released once (the methods hold a
    lock; cffi lets other threads run during the C call)."""
    import threading
    pg = dptrain.PrivateGradients(200, 400000, sample_rate=0.05, sigma=1.0, delta=1e-3)
    idx = pg.sample()
    g = np.full((len(idx), 400000), 1e-4, np.float32)
    results = []

    def rel():
        try:
            results.append(pg.release(g))
        except ValueError as e:
            results.append(e)
    ts = [threading.Thread(target=rel) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sum(isinstance(r, np.ndarray) for r in results) == 1 and pg.steps == 1
    assert all("no batch is pending" in str(r) for r in results if not isinstance(r, np.ndarray))
    pg.close()


def test_seed_none_draws_from_the_os():
    kw = dict(n=64, dim=4, sample_rate=0.5, sigma=1.0, delta=1e-3)
    with dptrain.PrivateGradients(**kw) as a, dptrain.PrivateGradients(**kw) as b:
        ia, ib = a.sample(), b.sample()
        assert not np.array_equal(ia, ib) or not np.array_equal(a.release(np.zeros((len(ia), 4))),
                                                                b.release(np.zeros((len(ib), 4))))


def test_refusals_of_counts():
    """n = 0 raised ZeroDivisionError (batch_size / n); threads=-5 and seed=-1 were accepted
    (the seed reduced mod 2^64): each is a ValueError naming the argument (issue 38)."""
    with pytest.raises(ValueError, match="n .*must be >= 1, got 0"):
        dptrain.PrivateGradients(0, 3, batch_size=1, sigma=1)
    with pytest.raises(ValueError, match="n .*must be >= 1, got 0"):
        dptrain.PrivateGradients(n=0, dim=3, sample_rate=0.1, sigma=1)
    with pytest.raises(ValueError, match="threads must be >= 0, got -5"):
        dptrain.PrivateGradients(10, 3, sample_rate=0.1, sigma=1, delta=1e-3, threads=-5)
    with pytest.raises(ValueError, match=r"threads must be in \[0, 1024\]"):
        dptrain.PrivateGradients(10, 3, sample_rate=0.1, sigma=1, delta=1e-3, threads=5000)
    with pytest.raises(TypeError, match="threads must be an integer"):
        dptrain.PrivateGradients(10, 3, sample_rate=0.1, sigma=1, delta=1e-3, threads=1.5)
    with pytest.raises(ValueError, match="seed must be >= 0, got -1"):
        dptrain.PrivateGradients(10, 3, sample_rate=0.1, sigma=1, delta=1e-3, seed=-1, secure=False)
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\^64 - 1\]"):
        dptrain.PrivateGradients(10, 3, sample_rate=0.1, sigma=1, delta=1e-3, seed=2 ** 64, secure=False)
    with pytest.raises(TypeError, match="seed must be an integer"):
        dptrain.PrivateGradients(10, 3, sample_rate=0.1, sigma=1, delta=1e-3, seed="1", secure=False)
    dptrain.PrivateGradients(10, 3, sample_rate=0.1, sigma=1, delta=1e-3, seed=2 ** 64 - 1, threads=2, secure=False).close()


def test_refusals():
    with pytest.raises(ValueError, match="sample_rate= and batch_size="):
        dptrain.PrivateGradients(10, 3, sigma=1)
    with pytest.raises(ValueError, match="sigma="):
        dptrain.PrivateGradients(10, 3, sample_rate=0.1)
    with pytest.raises(ValueError, match="epochs= or steps="):
        dptrain.PrivateGradients(10, 3, sample_rate=0.1, target_epsilon=1)
    with pytest.raises(dptrain.InvalidArgumentError, match="dpt_sgm_config.clip"):
        dptrain.PrivateGradients(10, 3, sample_rate=0.1, sigma=1, clip=0, delta=1e-3)
    with pytest.raises(dptrain.InvalidArgumentError, match="1/n"):
        dptrain.PrivateGradients(10, 3, sample_rate=0.1, sigma=1, delta=0.2)
    dptrain.PrivateGradients(10, 3, sample_rate=0.1, sigma=1, delta=0.2, force=True).close()
    pg = dptrain.PrivateGradients(100, 3, sample_rate=0.2, sigma=1, delta=1e-3)
    with pytest.raises(ValueError, match="no batch is pending"):
        pg.release(np.zeros((0, 3)))
    idx = pg.sample()
    while len(idx) < 2:
        pg.release(np.zeros((len(idx), 3)))
        idx = pg.sample()
    with pytest.raises(ValueError, match="examples"):
        pg.release(np.zeros((len(idx) + 1, 3)))
    with pytest.raises(ValueError, match="dim is 3"):
        pg.release(np.zeros((len(idx), 4)))
    bad = np.zeros((len(idx), 3))
    bad[1, 2] = np.nan
    with pytest.raises(dptrain.OutOfRangeError, match="row 1"):
        pg.release(bad)
    with pytest.raises(OverflowError, match="beyond float32's range"):
        pg.release(np.full((len(idx), 3), 1e300))
    with pytest.raises(TypeError, match="complex"):
        pg.release(np.zeros((len(idx), 3), np.complex64))
    assert pg.release(np.zeros((len(idx), 1, 3))).shape == (3,)  # still pending after the errors; rows flattened
    # an empty batch, as [0, ...] arrays of any shape, releases pure noise
    with dptrain.PrivateGradients(100, 3, sample_rate=0.005, sigma=1, delta=1e-3) as pe:  # q n = 0.5
        idx = pe.sample()
        while len(idx):
            pe.release(np.zeros((len(idx), 3)))
            idx = pe.sample()
        assert pe.release({"w": np.zeros((0, 1, 3))}).shape == (3,)
    with pytest.raises(ValueError, match="no batch is pending"):
        pg.release(np.zeros((len(idx), 3)))
    pg.close()
    with pytest.raises(ValueError, match="closed"):
        pg.sample()


def model_call(torch, model, params, args):
    try:
        from torch.func import functional_call
    except ImportError:  # torch < 2.0
        from torch.nn.utils.stateless import functional_call
    return functional_call(model, params, args)


def vmap_grad():
    """(vmap, grad) of torch.func (torch >= 2.0) or functorch (torch 1.13, Debian 12's), or None"""
    from dptrain.torch_interop import _vmap_grad
    return _vmap_grad()


def per_example_grads(torch, model, vectorized=True):
    """(params, x, c, y) -> {name: [b, *shape]}, the gradient of each example's loss:
    vmap(grad) when available and vectorized, else one backward pass per example."""
    loss = torch.nn.functional.cross_entropy

    def loss_one(p, xi, ci, yi):
        return loss(model_call(torch, model, p, (xi[None], ci[None])), yi[None])
    if vectorized and vmap_grad():
        vmap, grad = vmap_grad()
        return vmap(grad(loss_one), in_dims=(None, 0, 0, 0))

    def loop(p, x, c, y):
        names = list(p)
        q = {k: v.detach().requires_grad_() for k, v in p.items()}
        rows = [torch.autograd.grad(loss_one(q, x[i], c[i], y[i]), [q[k] for k in names]) for i in range(len(x))]
        return {k: (torch.stack([r[j] for r in rows]) if rows else torch.zeros((0,) + p[k].shape))
                for j, k in enumerate(names)}
    return loop


def test_torch_own_model():
    """A model from_torch cannot convert (an embedding and two branches added in a custom
    forward), trained with per-example gradients from vmap(grad) (torch.func, or functorch
    on torch 1.13; equal to one backward pass per example): the loss improves, and the
    released update is the clipped sum / (q n) plus the noise."""
    torch = pytest.importorskip("torch")
    from torch import nn

    class TwoBranch(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(4, 16)
            self.lin = nn.Linear(6, 16)
            self.skip = nn.Linear(6, 16)
            self.head = nn.Linear(16, 3)

        def forward(self, x, c):
            return self.head(torch.relu(self.lin(x)) + self.skip(x) + self.emb(c))

    torch.manual_seed(0)
    n = 2000
    x = torch.randn(n, 6)
    c = torch.randint(0, 4, (n,))
    y = ((x[:, 0] > 0).long() + (c >= 2).long()).clamp(max=2)
    model = TwoBranch()
    with pytest.raises(Exception):
        dptrain.from_torch(model, (6,))
    params = {k: v.detach() for k, v in model.named_parameters()}
    dim = sum(p.numel() for p in params.values())

    per_example = per_example_grads(torch, model)

    def full_loss():
        with torch.no_grad():
            return float(nn.functional.cross_entropy(model_call(torch, model, params, (x, c)), y))

    C, q, lr = 1.0, 0.05, 0.5
    pg, twin_ = twin(n=n, dim=dim, sample_rate=q, sigma=0.8, clip=C)
    before = full_loss()
    for step in range(40):
        idx = torch.from_numpy(pg.sample().astype(np.int64))
        assert torch.equal(idx, torch.from_numpy(twin_.sample().astype(np.int64)))
        g = per_example(params, x[idx], c[idx], y[idx])  # dict name -> [b, *shape]
        upd = pg.release(g)
        noise = twin_.release(None if len(idx) == 0 else np.zeros((len(idx), dim), np.float32))
        if step < 3:  # the update is the clipped per-example sum / (q n) plus the noise
            flat = torch.cat([v.reshape(len(idx), -1) for v in g.values()], 1).numpy()
            if vmap_grad() and len(idx):  # the vectorized gradients are the per-example backward passes'
                ref = per_example_grads(torch, model, vectorized=False)(params, x[idx], c[idx], y[idx])
                ref = torch.cat([ref[k].reshape(len(idx), -1) for k in g], 1).numpy()
                assert np.allclose(flat, ref, rtol=1e-4, atol=1e-6)
            want = clipped_sum(flat, C) / (q * n)
            got = upd.astype(np.float64) - noise
            assert np.all(np.abs(got - want) <= 1.2e-7 * (np.abs(upd) + np.abs(noise)) + 1e-12)
        u = torch.from_numpy(upd)
        k = 0
        for name, p in params.items():
            params[name] = p - lr * u[k:k + p.numel()].view_as(p)
            k += p.numel()
    after = full_loss()
    assert after < before - 0.1, (before, after)
    assert 0 < pg.epsilon() < 10 and pg.steps == 40
