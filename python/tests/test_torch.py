"""PyTorch interop: the state dict (checkpoint names) loads strictly into hand-written
PyTorch models of the same architecture, and PyTorch's predictions equal dptrain's.

Tolerance: |torch - dptrain| <= 1e-5 + 1e-4 |dptrain|. Both compute in float32 but sum in
different orders (OpenBLAS GEMMs and our im2col vs PyTorch's kernels), each of K terms
contributing rounding of order K * 2^-24 relative to the sum of |terms|; dptrain's GELU
and tanh are vectorised approximations with ~1e-6 relative error. 1e-4 relative leaves a
margin over both for these layer sizes, while a wrong layout, a missing bias or a
skipped layer changes outputs by O(1)."""
import numpy as np
import pytest

import dptrain

from helpers import blobs, fashion

torch = pytest.importorskip("torch")
nn = torch.nn


def close(a, b):
    return np.all(np.abs(a - b) <= 1e-5 + 1e-4 * np.abs(b)), float(np.max(np.abs(a - b)))


class OpacusMnistCnn(nn.Module):
    """Opacus' MNIST example SampleConvNet, with dptrain's layer names (mnist_cnn)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 8, 2, padding=3)
        self.conv2 = nn.Conv2d(16, 32, 4, 2)
        self.fc1 = nn.Linear(32 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = x.reshape(-1, 1, 28, 28)
        x = torch.relu(self.conv1(x))
        x = nn.functional.max_pool2d(x, 2, 1)
        x = torch.relu(self.conv2(x))
        x = nn.functional.max_pool2d(x, 2, 1)
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 32)
        self.fc3 = nn.Linear(32, 10)

    def forward(self, x):
        g = nn.functional.gelu
        return self.fc3(g(self.fc2(g(self.fc1(x)))))


def test_mlp_predictions_equal():
    x, y, xt, yt = fashion(1000, 300)
    run = dptrain.train(x, y, model="mlp:784-64-32-10:gelu", algorithm=dptrain.DPSGD(sigma=1.0, delta=1e-4),
                        epochs=1, batch_size=100, threads=2, verbose=False)
    ref = Mlp()
    ref.load_state_dict(run.model.state_dict(), strict=True)  # a hand-written model: names and shapes agree
    net = run.model.to_torch()
    with torch.no_grad():
        a = ref(torch.from_numpy(xt.reshape(len(xt), -1))).numpy()
        b = net(torch.from_numpy(xt.reshape(len(xt), -1))).numpy()
    p = run.model.predict(xt)
    assert close(a, p)[0], close(a, p)
    assert np.array_equal(a, b)  # the generated module computes the same thing as the hand-written one
    assert np.mean(a.argmax(1) == p.argmax(1)) == 1.0


def test_cnn_predictions_equal():
    x, y, xt, yt = fashion(500, 200)
    run = dptrain.train(x, y, model="mnist_cnn", epochs=1, batch_size=50, threads=2, verbose=False)
    ref = OpacusMnistCnn()
    ref.load_state_dict(run.model.state_dict(), strict=True)
    with torch.no_grad():
        a = ref(torch.from_numpy(xt)).numpy()
        b = run.model.to_torch()(torch.from_numpy(xt.reshape(len(xt), -1))).numpy()
    p = run.model.predict(xt)
    assert close(a, p)[0], close(a, p)
    assert close(b, p)[0], close(b, p)


def test_groupnorm_residual_pools_tanh_sigmoid():
    spec = ("cnn:3x8x8:conv4k3p1,tanh,gn2,maxpool2,[conv4k3p1nobias,relu,conv4k3p1],sigmoid,avgpool2s1,flatten,"
            "fc6,gelu,fc5")
    m = dptrain.Model._from_spec(spec)
    rng = np.random.default_rng(0)
    m.set_parameters({k: (rng.normal(size=v.shape) * 0.5).astype(np.float32) for k, v in m.parameters().items()})
    x = rng.normal(size=(9, 192)).astype(np.float32)
    net = m.to_torch()
    assert set(net.state_dict()) == set(m.parameters())
    with torch.no_grad():
        a = net(torch.from_numpy(x)).numpy()
        a4 = net(torch.from_numpy(x.reshape(9, 3, 8, 8))).numpy()
    p = m.predict(x)
    assert close(a, p)[0], close(a, p)
    assert np.array_equal(a, a4)
    # the residual connection matters: without it the outputs differ
    net._plan = [(n, f, -1) for n, f, _ in net._plan]
    with torch.no_grad():
        assert not close(net(torch.from_numpy(x)).numpy(), p)[0]


def test_state_dict_is_strict():
    x, y = blobs(n=200)
    m = dptrain.train(x, y, model="mlp:20-8-3:relu", epochs=1, batch_size=50, threads=1, verbose=False).model
    sd = m.state_dict()
    assert list(sd) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert tuple(sd["fc1.weight"].shape) == (8, 20) and sd["fc1.weight"].dtype == torch.float32
    wrong = nn.Sequential(nn.Linear(20, 8), nn.ReLU(), nn.Linear(8, 3))  # names 0.weight, ...: refused
    with pytest.raises(RuntimeError):
        wrong.load_state_dict(sd, strict=True)
