"""dptrain.PrivateGradients' virtual batches (accumulate, release()) and per-layer clipping
(clip_mode="per-layer", from_module): a batch released from micro-batches equals one release
of the same rows bit for bit (the C library adds the same clipped rows to one double sum in
the same order, and the same seed draws the same noise); a row count other than the sampled
one is refused and charges nothing; the accumulation holds one micro-batch in memory;
neighbouring logical batches are at most clip apart before noise; per-layer sums against a
naive numpy reference; the torch loop micro-batch by micro-batch.

Two mechanisms with the same seed draw the same batches and noise: the difference of a
release of real gradients and one of zeros is the clipped sum / (q n)."""
import tracemalloc

import numpy as np
import pytest

import dptrain


def twin(**kw):
    return dptrain.PrivateGradients(seed=99, **kw, secure=False), dptrain.PrivateGradients(seed=99, **kw, secure=False)


def rows(b, dim, seed):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(b, dim)) * rng.uniform(0.01, 1.0, size=(b, 1))).astype(np.float32)


def clipped_sum(g, C, sizes=None):
    """naive reference in float64: each row (per layer: each consecutive group of `sizes`
    values) scaled by min(1, C_l / its norm), C_l = C (flat) or C / sqrt(G), then summed"""
    g = np.asarray(g, dtype=np.float64)
    sizes = [g.shape[1]] if sizes is None else sizes
    C_l = C / np.sqrt(len(sizes))
    out, o = [], 0
    for k in sizes:
        part = g[:, o:o + k]
        nrm = np.linalg.norm(part, axis=1)
        out.append((part * np.where(nrm > C_l, C_l / np.maximum(nrm, 1e-300), 1.0)[:, None]).sum(axis=0))
        o += k
    return np.concatenate(out)


@pytest.mark.parametrize("sizes", [None, [1, 700, 43, 456]])
def test_micro_batches_equal_one_release(sizes):
    n, dim, q, C = 3000, 1200, 0.1, 0.5
    kw = dict(n=n, dim=dim, sample_rate=q, sigma=1.0, clip=C)
    if sizes:
        kw.update(clip_mode="per-layer", layer_sizes=sizes)
    whole, micro = twin(**kw)
    for step in range(2):
        idx = whole.sample()
        assert np.array_equal(idx, micro.sample()) and len(idx) > 100
        g = rows(len(idx), dim, step)
        ref = whole.release(g)
        parts = micro.micro_batches(idx, 64)
        assert [len(p) for p in parts[:-1]] == [64] * (len(parts) - 1) and np.array_equal(np.concatenate(parts), idx)
        k = 0
        for p in parts:
            micro.accumulate(g[k:k + len(p)])  # float32 rows, one micro-batch at a time
            k += len(p)
            assert micro.accumulated == k
        out = micro.release()
        assert np.array_equal(out, ref)  # bitwise
        assert micro.accumulated == 0
    assert whole.steps == micro.steps == 2 and whole.epsilon() == micro.epsilon()


def test_mismatched_rows_refused_nothing_charged(tmp_path):
    path = tmp_path / "ledger.json"
    pg = dptrain.PrivateGradients(500, 8, sample_rate=0.05, sigma=1.0, seed=5, ledger_path=path, secure=False)
    twin_ = dptrain.PrivateGradients(500, 8, sample_rate=0.05, sigma=1.0, seed=5, secure=False)
    with pytest.raises(ValueError, match="no batch is pending"):
        pg.accumulate(np.zeros((1, 8)))
    idx = pg.sample()
    assert np.array_equal(idx, twin_.sample()) and len(idx) >= 3
    g = rows(len(idx), 8, 1)
    ref = twin_.release(g)
    on_disk = path.read_bytes()
    pg.accumulate(g[:-1])
    with pytest.raises(dptrain.InvalidArgumentError, match="rows were accumulated, but the sampled batch has"):
        pg.release()  # one row short
    with pytest.raises(dptrain.InvalidArgumentError, match="nothing was added"):
        pg.accumulate(g[-1:].repeat(2, axis=0))  # one row too many
    with pytest.raises(dptrain.InvalidArgumentError, match="release_accumulated"):
        pg.release(g)  # the whole batch while an accumulation is under way
    bad = g[-1:].copy()
    bad[0, 2] = np.nan
    with pytest.raises(dptrain.OutOfRangeError, match="row %d" % (len(idx) - 1)):
        pg.accumulate(bad)
    with pytest.raises(ValueError, match="the mechanism's dim is 8"):
        pg.accumulate(np.zeros((1, 9)))
    assert pg.accumulated == len(idx) - 1
    assert pg.steps == 1 and pg.ledger.steps == 1 and path.read_bytes() == on_disk  # nothing charged
    pg.accumulate(g[-1:])  # the missing row: now it is the sampled batch
    assert np.array_equal(pg.release(), ref)
    with pytest.raises(ValueError, match="no batch is pending"):
        pg.release()
    assert pg.steps == 1 and dptrain.read_ledger(path).steps == 1
    pg.close()
    twin_.close()


def test_accumulation_memory_is_one_micro_batch():
    """The logical batch's gradients would take b * dim * 4 bytes (~16 MB here); accumulated
    64 rows at a time, Python's allocations stay near one micro-batch (~1 MB)."""
    n, dim, mb = 2000, 4000, 64
    pg = dptrain.PrivateGradients(n, dim, sample_rate=0.5, sigma=1.0, seed=3, secure=False)
    idx = pg.sample()
    whole = len(idx) * dim * 4
    assert whole > 15e6
    tracemalloc.start()
    try:
        for k, part in enumerate(pg.micro_batches(idx, mb)):
            pg.accumulate(rows(len(part), dim, k).astype(np.float64))  # a float32 copy is made per micro-batch
        out = pg.release()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.shape == (dim,)
    assert peak < 6 * mb * dim * 8, (peak, whole)  # a few micro-batches (float64 source and its copies)
    assert peak < whole / 3


@pytest.mark.parametrize("sizes", [None, [30, 5, 65]])
@pytest.mark.parametrize("C", [0.4, 2.5])
def test_neighbouring_logical_batches(sizes, C):
    """q = 1 (every example in the batch): D, and D with example k removed, which in the sum is
    a zero row (clipped to zero), released in micro-batches of 7 with the same seed: the pre-noise
    sums differ by the removed row's clip, exactly C (flat) or C / sqrt(G) per layer."""
    n, dim, k = 40, 100, 17
    kw = dict(n=n, dim=dim, sample_rate=1.0, sigma=1.0, clip=C, force=True)
    if sizes:
        kw.update(clip_mode="per-layer", layer_sizes=sizes)
    a, b = twin(**kw)
    idx = a.sample()
    assert np.array_equal(idx, b.sample()) and len(idx) == n
    g = rows(n, dim, 7) * 1e3
    h = g.copy()
    h[k] = 0
    for p in a.micro_batches(idx, 7):
        a.accumulate(g[p])
        b.accumulate(h[p])
    d = (a.release().astype(np.float64) - b.release()) * n  # q n = n
    tol = 1e-6 * np.sqrt(n) * (np.abs(g).sum(axis=0).max() / n + C)
    if sizes is None:
        assert abs(np.linalg.norm(d) - C) <= tol
    else:
        o = 0
        for s in sizes:
            assert abs(np.linalg.norm(d[o:o + s]) - C / np.sqrt(len(sizes))) <= tol
            o += s
        assert np.linalg.norm(d) <= C + tol


@pytest.mark.parametrize("C", [0.3, 3.0])
def test_per_layer_against_numpy(C):
    n, dim, q = 1000, 300, 0.08
    sizes = [10, 200, 1, 89]
    a, b = twin(n=n, dim=dim, sample_rate=q, sigma=0.5, clip=C, clip_mode="per-layer", layer_sizes=sizes)
    assert a.layer_sizes == tuple(sizes) and a.clip_mode == "per-layer"
    idx = a.sample()
    assert np.array_equal(idx, b.sample())
    g = rows(len(idx), dim, 11)
    g[:, 10:210] *= 30  # the big layer is cut, the others mostly kept
    out = a.release(g)
    noise = b.release(np.zeros_like(g))
    want = clipped_sum(g, C, sizes) / (q * n)
    got = out.astype(np.float64) - noise
    assert np.all(np.abs(got - want) <= 1.2e-7 * (np.abs(out) + np.abs(noise)) + 1e-12)
    flat = clipped_sum(g, C) / (q * n)
    assert np.max(np.abs(flat - want)) > 1e-3 * np.max(np.abs(want))  # per-layer is not flat here
    # a single row: each group's norm min(||g_l||, C / 2), the row's at most C
    a2, b2 = twin(n=1, dim=dim, sample_rate=1.0, sigma=1.0, clip=C, clip_mode="per-layer", layer_sizes=sizes,
                  force=True)
    a2.sample(), b2.sample()
    r = g[:1]
    s = (a2.release(r).astype(np.float64) - b2.release(np.zeros_like(r)))
    o = 0
    for k in sizes:
        assert np.linalg.norm(s[o:o + k]) == pytest.approx(min(np.linalg.norm(r[0, o:o + k]), C / 2), rel=1e-5)
        o += k
    assert np.linalg.norm(s) <= C * (1 + 1e-5)


def test_per_layer_refusals():
    with pytest.raises(dptrain.InvalidArgumentError, match="layer_sizes"):
        dptrain.PrivateGradients(100, 10, batch_size=5, sigma=1, clip_mode="per-layer")
    with pytest.raises(dptrain.InvalidArgumentError, match="hold 9 values, dim is 10"):
        dptrain.PrivateGradients(100, 10, batch_size=5, sigma=1, clip_mode="per-layer", layer_sizes=[4, 5])
    with pytest.raises(dptrain.InvalidArgumentError, match="clip_mode is DPT_CLIP_FLAT"):
        dptrain.PrivateGradients(100, 10, batch_size=5, sigma=1, layer_sizes=[4, 6])
    with pytest.raises(dptrain.InvalidArgumentError, match="clip_mode"):
        dptrain.PrivateGradients(100, 10, batch_size=5, sigma=1, clip_mode="layers")
    with pytest.raises(ValueError, match="size must be >= 1"):
        dptrain.PrivateGradients.micro_batches(np.arange(3), 0)
    assert dptrain.PrivateGradients.micro_batches(np.zeros(0, np.uint32), 4) == []


def test_torch_micro_batches_and_from_module():
    """The bring-your-own-gradients loop micro-batch by micro-batch (per_example_gradients,
    accumulate, release, set_gradients) gives the update of the whole batch at once, bit for
    bit; from_module finds dim and the layers (a module's own parameters, frozen ones left out)."""
    torch = pytest.importorskip("torch")
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    model[2].bias.requires_grad_(False)  # frozen: not in the flat gradient
    assert dptrain.parameter_layers(model) == [("0", 56), ("2", 64), ("4", 27)]
    n = 600
    x, y = torch.randn(n, 6), torch.randint(0, 3, (n,))
    kw = dict(batch_size=120, sigma=1.0, clip=0.5, seed=17, clip_mode="per-layer", secure=False)
    whole = dptrain.PrivateGradients.from_module(model, n, **kw)
    micro = dptrain.PrivateGradients.from_module(model, n, **kw)
    assert whole.dim == 147 and whole.layer_sizes == (56, 64, 27)
    assert dptrain.PrivateGradients.from_module(model, n, batch_size=120, sigma=1.0).layer_sizes is None
    with pytest.raises(TypeError, match="from the model"):
        dptrain.PrivateGradients.from_module(model, n, dim=3, batch_size=120, sigma=1.0)
    grads = dptrain.per_example_gradients(model, nn.functional.cross_entropy)
    for _ in range(2):
        idx = whole.sample()
        assert np.array_equal(idx, micro.sample())
        t = torch.from_numpy(idx.astype(np.int64))
        ref = whole.release(grads(x[t], y[t]))
        for part in micro.micro_batches(idx, 16):
            p = torch.from_numpy(part.astype(np.int64))
            micro.accumulate(grads(x[p], y[p]))
        update = micro.release()
        assert np.array_equal(update, ref)
        dptrain.set_gradients(model, update)
        with torch.no_grad():
            for _, prm in dptrain.trainable_parameters(model):
                prm -= 0.1 * prm.grad


def test_train_physical_batch(monkeypatch):
    """dptrain.train(physical_batch=M): the engine's virtual batches; the same run (seed) with
    one pass per batch and with passes of 8 examples gives the same parameters to float
    rounding, and the same epsilon; the trainer is given M (seen at dpt_trainer_new)."""
    import sys
    mod = sys.modules["dptrain.train"]
    seen = []

    class Spy:
        def __init__(self, real):
            self._real = real

        def __getattr__(self, name):
            f = getattr(self._real, name)
            if name != "dpt_trainer_new":
                return f

            def new(cfg, *args):
                seen.append(int(cfg.physical_batch))
                return f(cfg, *args)
            return new
    monkeypatch.setattr(mod, "lib", Spy(mod.lib))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    kw = dict(model="mlp:6-8-2:relu", algorithm=dptrain.DPSGD(sigma=1.0, clip=0.5), sampler="poisson",
              batch_size=100, seed=21, max_steps=3, epochs=1, threads=1, verbose=False)
    one = dptrain.train(x, y, **kw)
    many = dptrain.train(x, y, physical_batch=8, **kw)
    p1 = np.concatenate([np.ravel(v) for v in one.model.parameters().values()])
    p2 = np.concatenate([np.ravel(v) for v in many.model.parameters().values()])
    assert np.max(np.abs(p1 - p2)) <= 1e-6 and np.max(np.abs(p1)) > 0
    assert one.epsilon == many.epsilon
    assert seen == [0, 8]
    with pytest.raises(ValueError, match="physical_batch"):
        dptrain.train(x, y, physical_batch=-1, **kw)
