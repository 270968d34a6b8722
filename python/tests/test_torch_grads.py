"""dptrain.per_example_gradients and dptrain.set_gradients (DP-SGD on your own PyTorch model):
each row against torch.autograd.grad of that example's loss alone (vmap and loop paths), the
BatchNorm refusal, the update's slices in .grad and one torch.optim.SGD step, the order
release() joins the dict in against the order set_gradients splits in, and 30 private steps
with Adam.

Tolerance: the rows and the reference come from the same float32 ops batched differently
(vmap, or a forward over the whole batch), so they agree to float32 rounding, about 1e-7 of
values of order 1; 1e-5 + 1e-5 |ref| leaves room, while a wrong row (another example's, the
batch mean, a missing tied use) is off by O(0.1)."""
import numpy as np
import pytest

import dptrain
from dptrain import accounting

torch = pytest.importorskip("torch")
nn = torch.nn
F = nn.functional

HAVE_VMAP = dptrain.torch_interop._vmap_grad() is not None
PATHS = [pytest.param(True, marks=pytest.mark.skipif(not HAVE_VMAP, reason="no torch.func / functorch")), False]


class TwoInputs(nn.Module):
    """out = head(tanh(lin(x) + emb(c)) + out2(tanh(lin(x)))), out2's weight tied to head's;
    a frozen scale. No buffers, no batch statistics. Its modules are registered out of
    alphabetical order (z before a), so a sorted join would differ from named_parameters'."""

    def __init__(self, d=5, k=3):
        super().__init__()
        self.z = nn.Linear(d, 8)
        self.emb = nn.Embedding(4, 8)
        self.a = nn.Linear(8, k)
        self.out2 = nn.Linear(8, k, bias=False)
        self.out2.weight = self.a.weight  # tied: one trainable parameter, used twice
        self.scale = nn.Parameter(torch.tensor(1.5), requires_grad=False)

    def forward(self, x, c):
        h = torch.tanh(self.z(x))
        return self.a(torch.tanh(h + self.emb(c))) + self.scale * self.out2(h)


def data(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g)
    c = torch.randint(0, 4, (n,), generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return x, c, y


def reference(model, x, c, y):
    """{name: [b, *shape]}: row i = torch.autograd.grad of example i's loss alone, taken from one
    forward pass over the whole batch with reduction='none' (valid: no batch statistics)."""
    names = [k for k, p in model.named_parameters() if p.requires_grad]
    params = [dict(model.named_parameters())[k] for k in names]
    losses = F.cross_entropy(model(x, c), y, reduction="none")
    rows = [torch.autograd.grad(losses[i], params, retain_graph=True) for i in range(len(x))]
    return {k: torch.stack([r[j] for r in rows]) for j, k in enumerate(names)}


def assert_close(got, want):
    assert list(got) == list(want), (list(got), list(want))
    for k in want:
        assert got[k].shape == want[k].shape, (k, got[k].shape, want[k].shape)
        err = (got[k] - want[k]).abs() - (1e-5 + 1e-5 * want[k].abs())
        assert float(err.max()) <= 0, (k, float((got[k] - want[k]).abs().max()))


@pytest.mark.parametrize("vectorized", PATHS)
def test_rows_are_each_examples_own_gradient(vectorized):
    torch.manual_seed(0)
    model = TwoInputs()
    x, c, y = data()
    fn = dptrain.per_example_gradients(model, F.cross_entropy, vectorized=vectorized)
    g = fn((x, c), y)
    want = reference(model, x, c, y)
    assert list(g) == ["z.weight", "z.bias", "emb.weight", "a.weight", "a.bias"]  # no "scale": frozen
    assert_close(g, want)
    assert float((g["z.weight"][0] - g["z.weight"][1]).abs().max()) > 1e-3  # rows differ: not a batch mean
    # the CURRENT parameters: change them in place, as an optimizer does, and call again
    with torch.no_grad():
        model.z.weight.mul_(-2.0)
    assert_close(fn((x, c), y), reference(model, x, c, y))
    # an empty batch: zero rows of the right shapes
    e = fn((x[:0], c[:0]), y[:0])
    assert [tuple(v.shape) for v in e.values()] == [(0,) + tuple(v.shape[1:]) for v in g.values()]


def test_path_choice_and_refusals(monkeypatch):
    torch.manual_seed(0)
    model = TwoInputs()
    x, c, y = data(4)
    with pytest.raises(ValueError, match="target has shape"):
        dptrain.per_example_gradients(model, F.cross_entropy)((x, c), y[:3])
    with pytest.raises(ValueError, match="one value per example"):
        dptrain.per_example_gradients(model, lambda o, t: F.cross_entropy(o, t, reduction="none").repeat(2),
                                      vectorized=False)((x, c), y)
    # without vmap: None falls back to the loop, True refuses
    monkeypatch.setattr(dptrain.torch_interop, "_vmap_grad", lambda: None)
    assert_close(dptrain.per_example_gradients(model, F.cross_entropy)((x, c), y), reference(model, x, c, y))
    with pytest.raises(ImportError, match="vectorized=True"):
        dptrain.per_example_gradients(model, F.cross_entropy, vectorized=True)


def bn_model():
    torch.manual_seed(1)
    m = nn.Sequential()
    m.add_module("body", nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU()))
    m.add_module("head", nn.Linear(6, 3))
    with torch.no_grad():  # running statistics away from (0, 1), so eval mode uses them visibly
        m.body[1].running_mean.uniform_(-1, 1)
        m.body[1].running_var.uniform_(0.5, 2)
    return m


@pytest.mark.parametrize("vectorized", PATHS)
def test_batchnorm_refused_in_training_mode(vectorized):
    m = bn_model()
    x, _, y = data()
    fn = dptrain.per_example_gradients(m, F.cross_entropy, vectorized=vectorized)
    with pytest.raises(dptrain.UnsupportedError, match=r"body\.1 \(BatchNorm1d\) is in training mode"):
        fn(x, y)
    stats = m.body[1].running_mean.clone()
    m.eval()  # fixed running statistics: each example's loss is its own
    g = fn(x, y)
    assert torch.equal(m.body[1].running_mean, stats)  # buffers passed through, not updated
    names = [k for k, _ in m.named_parameters()]
    losses = F.cross_entropy(m(x), y, reduction="none")
    for i in (0, 5, 11):
        want = torch.autograd.grad(losses[i], list(m.parameters()), retain_graph=True)
        assert_close({k: g[k][i] for k in names}, dict(zip(names, want)))
    m.body[1].track_running_stats, m.body[1].running_mean, m.body[1].running_var = False, None, None
    with pytest.raises(dptrain.UnsupportedError, match=r"body\.1 \(BatchNorm1d\) has no running statistics"):
        fn(x, y)


@pytest.mark.parametrize("vectorized", PATHS)
def test_instancenorm_with_running_stats_refused_in_training_mode(vectorized):
    """InstanceNorm normalizes each example alone, but with track_running_stats in training
    mode it would write the private data's statistics into its buffers without noise."""
    torch.manual_seed(2)
    m = nn.Sequential(nn.Conv1d(1, 2, 3), nn.InstanceNorm1d(2, track_running_stats=True), nn.Flatten(),
                      nn.Linear(6, 3))
    x, y = torch.randn(8, 1, 5), torch.randint(0, 3, (8,))
    fn = dptrain.per_example_gradients(m, F.cross_entropy, vectorized=vectorized)
    with pytest.raises(dptrain.UnsupportedError, match=r"1 \(InstanceNorm1d\) is in training mode"):
        fn(x, y)
    assert torch.equal(m[1].running_mean, torch.zeros(2))  # refused before anything ran


def test_set_gradients():
    torch.manual_seed(0)
    model = TwoInputs()
    names = [k for k, _ in dptrain.trainable_parameters(model)]
    assert names == ["z.weight", "z.bias", "emb.weight", "a.weight", "a.bias"]
    params = dict(model.named_parameters())
    dim = sum(params[k].numel() for k in names)
    update = np.arange(dim, dtype=np.float64) * 0.01 - 1.0  # every value distinct: a shuffled slice shows
    model.z.weight.grad = torch.ones_like(model.z.weight)     # replaced, not accumulated
    dptrain.set_gradients(model, update)
    k = 0
    for name in names:
        p = params[name]
        want = torch.from_numpy(update[k:k + p.numel()]).float().view_as(p)
        assert p.grad.dtype == p.dtype and torch.equal(p.grad, want), name
        k += p.numel()
    assert model.scale.grad is None  # frozen: skipped
    update[0] = 99.0
    assert float(model.z.weight.grad.flatten()[0]) != 99.0  # a copy, not a view of the caller's array
    for bad in (np.zeros(dim + 1), np.zeros(dim - 1), torch.zeros(dim + model.scale.numel()), np.zeros((1, dim))):
        with pytest.raises(dptrain.InvalidArgumentError, match="trainable parameters %d values" % dim):
            dptrain.set_gradients(model, bad)
    # one torch.optim.SGD step: params - lr * update
    u = torch.randn(dim)
    before = torch.cat([params[k].detach().flatten() for k in names])
    scale = model.scale.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    opt.zero_grad()
    dptrain.set_gradients(model, u)
    opt.step()
    after = torch.cat([params[k].detach().flatten() for k in names])
    assert torch.allclose(after, before - 0.3 * u, rtol=0, atol=1e-6), float((after - before + 0.3 * u).abs().max())
    assert torch.equal(model.scale, scale)


def test_release_joins_in_set_gradients_order():
    """release() of per_example_gradients' dict, then set_gradients: each .grad is that
    parameter's rows summed / (q n) (clip above every row's norm: nothing clipped; the noise,
    std sigma clip / (q n) = 0.5, isolated by a twin mechanism releasing zeros: both outputs
    round to float32, about 3e-8 at 0.5)."""
    torch.manual_seed(0)
    model = TwoInputs()
    x, c, y = data(200)
    dim = sum(p.numel() for _, p in dptrain.trainable_parameters(model))
    fn = dptrain.per_example_gradients(model, F.cross_entropy)
    kw = dict(n=200, dim=dim, sample_rate=0.1, sigma=1.0, clip=10.0, seed=7, secure=False)
    with dptrain.PrivateGradients(**kw) as pg, dptrain.PrivateGradients(**kw) as twin:
        idx = torch.from_numpy(pg.sample().astype(np.int64))
        twin.sample()
        g = fn((x[idx], c[idx]), y[idx])
        norms = torch.cat([v.reshape(len(idx), -1) for v in g.values()], 1).norm(dim=1)
        assert len(idx) > 5 and float(norms.max()) < 10.0
        upd = pg.release(g)
        noise = twin.release(np.zeros((len(idx), dim), np.float32))
    dptrain.set_gradients(model, upd.astype(np.float64) - noise)
    for name, p in dptrain.trainable_parameters(model):
        want = g[name].double().sum(0) / 20.0
        assert torch.allclose(p.grad.double(), want, rtol=0, atol=1e-5), (name, float((p.grad - want).abs().max()))


def test_private_training_with_adam():
    torch.manual_seed(0)
    n, q, sigma, T, delta = 600, 0.05, 1.0, 30, 1e-5
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 5, generator=g)
    c = torch.randint(0, 4, (n,), generator=g)
    y = ((x[:, 0] > 0).long() + (c >= 2).long())  # 3 classes from both inputs
    model = TwoInputs()
    dim = sum(p.numel() for _, p in dptrain.trainable_parameters(model))
    fn = dptrain.per_example_gradients(model, F.cross_entropy)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)

    def loss():
        with torch.no_grad():
            return float(F.cross_entropy(model(x, c), y))
    before = loss()
    with dptrain.PrivateGradients(n, dim, sample_rate=q, sigma=sigma, clip=1.0, delta=delta, seed=11, secure=False) as pg:
        for _ in range(T):
            idx = torch.from_numpy(pg.sample().astype(np.int64))
            update = pg.release(fn((x[idx], c[idx]), y[idx]))
            opt.zero_grad()
            dptrain.set_gradients(model, update)
            opt.step()
        assert pg.steps == T
        assert pg.epsilon() == pytest.approx(accounting.epsilon(sigma, q, T, delta), rel=1e-13)
    after = loss()
    assert after < before - 0.2, (before, after)


class TinyLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 6, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def test_recurrent_models_take_the_loop_and_vmap_is_refused_in_one_line():
    """nn.LSTM through vmap failed with a broadcast-shape error; now the default path takes
    the per-example loop (rows equal autograd of each example's loss), and vectorized=True
    names the module."""
    torch.manual_seed(0)
    m = TinyLSTM()
    x, y = torch.randn(5, 7, 4), torch.tensor([0, 2, 1, 1, 0])
    rows = dptrain.per_example_gradients(m, lambda o, t: F.cross_entropy(o, t))(x, y)
    for i in range(5):
        m.zero_grad()
        F.cross_entropy(m(x[i:i + 1]), y[i:i + 1]).backward()
        for name, p in m.named_parameters():
            assert torch.allclose(rows[name][i], p.grad, atol=1e-5, rtol=1e-5), (name, i)
    with pytest.raises(RuntimeError, match="rnn is a recurrent module .*vectorized=None or False"):
        dptrain.per_example_gradients(m, lambda o, t: F.cross_entropy(o, t), vectorized=True)(x, y)


def test_replace_batchnorm_by_groupnorm(capsys):
    net = nn.Sequential(nn.Conv2d(3, 12, 3), nn.BatchNorm2d(12), nn.ReLU(),
                        nn.Sequential(nn.Conv2d(12, 10, 3), nn.BatchNorm2d(10)), nn.Flatten())
    changes = dptrain.replace_batchnorm(net)
    assert [c.split(":")[0] for c in changes] == ["1", "3.1"]
    assert isinstance(net[1], nn.GroupNorm) and net[1].num_groups == 4 and net[1].num_channels == 12
    assert isinstance(net[3][1], nn.GroupNorm) and net[3][1].num_groups == 2
    assert "1: BatchNorm2d(12" in capsys.readouterr().out
    assert not any(isinstance(mod, nn.modules.batchnorm._BatchNorm) for mod in net.modules())
    # the fixed model passes per_example_gradients' check in training mode
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
    x = torch.randn(3, 3, 6, 6)
    with pytest.raises(Exception, match="BatchNorm2d"):
        dptrain.per_example_gradients(net, lambda o: o.sum())(x)
    assert dptrain.replace_batchnorm(net, verbose=False) == ["1: BatchNorm2d(4, eps=1e-05, momentum=0.1, "
                                                            "affine=True, track_running_stats=True) -> "
                                                            "GroupNorm(4, 4, eps=1e-05, affine=True)"]
    g = dptrain.per_example_gradients(net, lambda o: o.sum())(x)
    assert g["1.weight"].shape == (3, 4)
    with pytest.raises(ValueError, match="num_groups 3 does not divide the 4 channels of 1"):
        dptrain.replace_batchnorm(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(4)), num_groups=3)
