"""PyTorch import (dptrain.from_torch / Model.from_torch): PyTorch modules with random
weights give dptrain models whose predictions equal PyTorch's; Model -> to_torch ->
from_torch gives back the same spec and parameters bit for bit; every construct dptrain
cannot represent is refused with the submodule's path and the attribute.

Tolerance as in test_torch.py (reasons there): |dptrain - torch| <= 1e-5 + 1e-4 |torch|;
a transposed weight, a wrong flatten order or a dropped layer changes outputs by O(1)."""
from collections import OrderedDict

import numpy as np
import pytest

import dptrain

from helpers import blobs

torch = pytest.importorskip("torch")
nn = torch.nn


def close(a, b):
    return np.all(np.abs(a - b) <= 1e-5 + 1e-4 * np.abs(b)), float(np.max(np.abs(a - b)))


def randomize(module, seed=0):
    """Every parameter (GroupNorm's gamma and beta too) ~ N(0, 0.5^2), so none keeps a
    default that would hide a parameter that was not copied."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return module.eval()


def torch_out(module, x):
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def test_mlp_predictions_equal():
    net = randomize(nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 8), nn.GELU(), nn.Linear(8, 3)))
    x = np.random.default_rng(1).normal(size=(50, 20)).astype(np.float32)
    for m in (dptrain.from_torch(net, (20,)), dptrain.Model.from_torch(net, 20)):
        assert m.spec == "cnn:1x1x20:fc16,relu,fc8,gelu,fc3"
        assert close(m.predict(x), torch_out(net, x))[0], close(m.predict(x), torch_out(net, x))
    # one activation kind, no biases: the builder's "mlp:" form; weights copied bit for bit
    net = randomize(nn.Sequential(nn.Linear(20, 8, bias=False), nn.Tanh(), nn.Linear(8, 3, bias=False)))
    m = dptrain.from_torch(net, (20,))
    assert m.spec == "mlp:20-8-3:tanh:nobias"
    assert np.array_equal(m.parameters()["fc1.weight"], net[0].weight.detach().numpy())
    assert close(m.predict(x), torch_out(net, x))[0], close(m.predict(x), torch_out(net, x))


def cnn():
    """Every supported kind, tuple and string arguments, a nested Sequential, a conv
    without bias, and a Linear after a Flatten of a 6x2x2 conv output."""
    return randomize(nn.Sequential(
        nn.Conv2d(3, 8, (3, 3), padding="same"), nn.ReLU(), nn.GroupNorm(2, 8),
        nn.MaxPool2d(2),
        nn.Sequential(nn.Conv2d(8, 6, 3, stride=(2, 2), padding=0, bias=False), nn.Tanh(),
                      nn.Sequential(nn.Identity())),
        nn.AvgPool2d((2, 2), stride=1), nn.Sigmoid(), nn.Flatten(),
        nn.Linear(6 * 2 * 2, 7), nn.GELU(), nn.Linear(7, 4)))


def test_cnn_predictions_equal():
    net = cnn()
    m = dptrain.from_torch(net, (3, 14, 14))
    assert m.spec == ("cnn:3x14x14:conv8k3p1,relu,gn2,maxpool2,conv6k3s2nobias,tanh,identity,avgpool2s1,sigmoid,"
                      "flatten,fc7,gelu,fc4")
    x = np.random.default_rng(2).normal(size=(20, 3, 14, 14)).astype(np.float32)
    a, p = torch_out(net, x), m.predict(x)
    assert close(p, a)[0], close(p, a)
    assert close(m.predict(x.reshape(20, -1)), a)[0]
    sd = net.state_dict()
    want = {"conv1.weight": "0.weight", "conv1.bias": "0.bias", "gn1.weight": "2.weight", "gn1.bias": "2.bias",
            "conv2.weight": "4.0.weight", "fc1.weight": "8.weight", "fc1.bias": "8.bias",
            "fc2.weight": "10.weight", "fc2.bias": "10.bias"}
    got = m.parameters()
    assert list(got) == list(want)
    for ours, theirs in want.items():
        assert got[ours].dtype == np.float32 and np.array_equal(got[ours], sd[theirs].numpy()), ours


def test_flatten_is_channel_major():
    # a 1x1 conv making channels (x, -2x, 3x) of a 1x2x3 input, flattened into an identity
    # Linear: the output is the conv output in PyTorch's (C, H, W) order, value for value
    conv = nn.Conv2d(1, 3, 1, bias=False)
    fc = nn.Linear(18, 18, bias=False)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([1.0, -2.0, 3.0]).reshape(3, 1, 1, 1))
        fc.weight.copy_(torch.eye(18))
    net = nn.Sequential(conv, nn.Flatten(), fc)
    x = np.arange(1, 7, dtype=np.float32).reshape(1, 1, 2, 3)
    p = dptrain.from_torch(net, (1, 2, 3)).predict(x)
    assert np.array_equal(p[0], np.concatenate([x.ravel(), -2 * x.ravel(), 3 * x.ravel()]))
    assert np.array_equal(p, torch_out(net, x))


ROUND_TRIP = [
    "cnn:3x8x8:conv4k3p1,tanh,gn2,maxpool2,[conv4k3p1nobias,relu,conv4k3p1],sigmoid,avgpool2s1,flatten,fc6,gelu,fc5",
    "cnn:4x6x6:gn4,[conv4k3p1,gelu,gn2],relu,[conv4k1nobias],maxpool2s1,fc3:nobias",
    "resnet5",     # named: the spec stays "resnet5", not the builder's "cnn:..." form
    "mnist_cnn",
    "ae:20-10-20:relu",
]


@pytest.mark.parametrize("spec", ROUND_TRIP)
def test_round_trip_is_exact(spec):
    m = dptrain.Model._from_spec(spec)
    rng = np.random.default_rng(3)
    m.set_parameters({k: rng.normal(size=v.shape).astype(np.float32) for k, v in m.parameters().items()})
    back = dptrain.from_torch(m.to_torch())
    assert back.spec == spec
    assert back.layers() == m.layers()
    a, b = m.parameters(), back.parameters()
    assert list(a) == list(b)
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    x = rng.normal(size=(4, m.input_dim)).astype(np.float32)
    assert np.array_equal(back.predict(x), m.predict(x))


def test_round_trip_follows_the_module_not_its_spec():
    # a DptrainNet whose residual connection was removed is converted as it now computes
    m = dptrain.Model._from_spec("cnn:2x4x4:[conv2k3p1,relu],flatten,fc3")
    net = m.to_torch()
    net._plan = [(n, f, -1) for n, f, _ in net._plan]
    back = dptrain.from_torch(net)
    assert back.spec == "cnn:2x4x4:conv2k3p1,relu,flatten,fc3"
    x = np.random.default_rng(4).normal(size=(3, 32)).astype(np.float32)
    assert close(back.predict(x), torch_out(net, x))[0]
    with pytest.raises(dptrain.InvalidArgumentError, match=r"input_shape \(32,\) differs from the module's own"):
        dptrain.from_torch(m.to_torch(), (32,))


class OwnForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x) * 2


class SequentialWithForward(nn.Sequential):
    def forward(self, x):
        return super().forward(x) + 1


# (module, input_shape, the message's start, a phrase of it)
UNSUPPORTED = [
    (nn.Sequential(nn.Conv2d(1, 2, 3), nn.Sequential(nn.ReLU(), nn.Conv2d(2, 2, 1), nn.BatchNorm2d(2))),
     (1, 8, 8), "1.2 (BatchNorm2d): not supported by dptrain; supported: nn.Sequential", ""),
    (nn.Sequential(nn.Conv2d(1, 2, 3, dilation=2)), (1, 8, 8), "0 (Conv2d): dilation 2 is not supported", ""),
    (nn.Sequential(nn.Conv2d(2, 2, 3, groups=2)), (2, 8, 8), "0 (Conv2d): groups 2 is not supported", ""),
    (nn.Sequential(nn.Conv2d(1, 2, (3, 5))), (1, 8, 8), "0 (Conv2d): kernel_size (3, 5) is not supported", "square"),
    (nn.Sequential(nn.Conv2d(1, 2, 3, stride=(1, 2))), (1, 8, 8), "0 (Conv2d): stride (1, 2) is not supported", ""),
    (nn.Sequential(nn.Conv2d(1, 2, 3, padding=(1, 0))), (1, 8, 8), "0 (Conv2d): padding (1, 0) is not supported",
     ""),
    (nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect")), (1, 8, 8),
     "0 (Conv2d): padding_mode 'reflect' is not supported", ""),
    (nn.Sequential(nn.Conv2d(1, 2, 4, padding="same")), (1, 8, 8), "0 (Conv2d): padding 'same' with the even",
     "unevenly"),
    (nn.Sequential(nn.MaxPool2d(2, padding=1)), (1, 8, 8), "0 (MaxPool2d): padding 1 is not supported", ""),
    (nn.Sequential(nn.MaxPool2d(3, ceil_mode=True)), (1, 8, 8), "0 (MaxPool2d): ceil_mode=True is not supported",
     ""),
    (nn.Sequential(nn.MaxPool2d(2, dilation=2)), (1, 8, 8), "0 (MaxPool2d): dilation 2 is not supported", ""),
    (nn.Sequential(nn.MaxPool2d(2, return_indices=True)), (1, 8, 8), "0 (MaxPool2d): return_indices=True", ""),
    (nn.Sequential(nn.AvgPool2d(2, padding=1)), (1, 8, 8), "0 (AvgPool2d): padding 1 is not supported", ""),
    (nn.Sequential(nn.AvgPool2d(2, divisor_override=3)), (1, 8, 8), "0 (AvgPool2d): divisor_override 3", ""),
    (nn.Sequential(nn.AvgPool2d((2, 3))), (1, 8, 8), "0 (AvgPool2d): kernel_size (2, 3) is not supported", ""),
    (nn.Sequential(nn.GroupNorm(2, 4, eps=1e-3)), (4, 3, 3), "0 (GroupNorm): eps 0.001 is not supported", "1e-5"),
    (nn.Sequential(nn.GroupNorm(2, 4, affine=False)), (4, 3, 3), "0 (GroupNorm): affine=False is not supported",
     ""),
    (nn.Sequential(nn.Linear(4, 4), nn.GELU(approximate="tanh")), (4,),
     "1 (GELU): approximate='tanh' is not supported", "erf"),
    (nn.Sequential(nn.Flatten(0)), (4,), "0 (Flatten): start_dim 0, end_dim -1 is not supported", ""),
    (nn.Sequential(nn.Linear(4, 4), nn.Dropout()), (4,), "1 (Dropout): not supported by dptrain", ""),
    (nn.Sequential(nn.LeakyReLU()), (4,), "0 (LeakyReLU): not supported by dptrain", ""),
    (nn.Sequential(nn.Conv2d(2, 2, 1), nn.Linear(3, 3)), (2, 3, 3), "1 (Linear): on a 2x3x3 input nn.Linear acts",
     "nn.Flatten()"),
    (nn.Sequential(nn.Flatten(), nn.Conv2d(1, 2, 1)), (1, 3, 3), "1 (Conv2d): needs an image input",
     "[n, 9]"),
    (nn.Sequential(nn.MaxPool2d(2)), (16,), "0 (MaxPool2d): needs an image input", "input_shape=(C, H, W)"),
    (nn.Sequential(nn.Linear(4, 4), SequentialWithForward(nn.ReLU())), (4,),
     "1 (SequentialWithForward): not supported by dptrain", ""),
    (OwnForward(), (4,), "module (OwnForward): a module with its own forward() cannot be converted", ""),
]


@pytest.mark.parametrize("module, shape, start, phrase", UNSUPPORTED, ids=[u[2].split(":")[0] + ": " +
                                                                          u[2].split(": ")[1][:30]
                                                                          for u in UNSUPPORTED])
def test_unsupported_is_refused_by_name(module, shape, start, phrase):
    with pytest.raises(dptrain.UnsupportedError) as e:
        dptrain.from_torch(module, shape)
    assert str(e.value).startswith(start), str(e.value)
    assert phrase in str(e.value)
    assert isinstance(e.value, ValueError) and e.value.status_name


def test_sizes_that_do_not_fit_name_the_submodule():
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Sequential(nn.Flatten(), nn.Linear(100, 10)))
    with pytest.raises(dptrain.InvalidArgumentError,
                       match=r"^2\.1 \(Linear\): in_features 100 does not match the 144 values reaching it"):
        dptrain.from_torch(net, (1, 8, 8))
    net = dptrain.Model._from_spec("cnn:1x8x8:conv4k3,fc10").to_torch()  # a DptrainNet's Linear reads C*H*W
    net.fc1 = nn.Linear(100, 10)
    with pytest.raises(dptrain.InvalidArgumentError,
                       match=r"^fc1 \(Linear\): in_features 100 does not match the 144 values \(4x6x6\) reaching"):
        dptrain.from_torch(net)
    with pytest.raises(dptrain.InvalidArgumentError, match=r"^0 \(Conv2d\): in_channels 3 does not match the 1 "):
        dptrain.from_torch(nn.Sequential(nn.Conv2d(3, 4, 3)), (1, 8, 8))
    with pytest.raises(dptrain.InvalidArgumentError, match=r"^1 \(GroupNorm\): num_channels 8 does not match the 4 "):
        dptrain.from_torch(nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 8)), (1, 8, 8))
    # what only the library's builder checks: its message, after the submodule's path
    with pytest.raises(dptrain.InvalidArgumentError,
                       match=r"^features\.1 \(MaxPool2d\): dpt_model_builder_maxpool: layer 2 on a 4x2x2 input"):
        dptrain.from_torch(nn.Sequential(OrderedDict(features=nn.Sequential(nn.Conv2d(1, 4, 3), nn.MaxPool2d(3)))),
                           (1, 4, 4))
    # a residual group that changes the shape: refused when the group closes, both ends named
    m = dptrain.Model._from_spec("cnn:2x4x4:[conv2k3p1,relu],flatten,fc3")
    net = m.to_torch()
    net.conv1 = nn.Conv2d(2, 2, 3, padding=0)
    with pytest.raises(dptrain.InvalidArgumentError, match=r"^residual group conv1\.\.relu1: "):
        dptrain.from_torch(net)


def test_arguments_and_parameters_are_checked():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        dptrain.from_torch("mlp:4-2", (4,))
    with pytest.raises(TypeError, match="give input_shape"):
        dptrain.from_torch(nn.Sequential(nn.Linear(4, 2)))
    with pytest.raises(ValueError, match="input_shape must be"):
        dptrain.from_torch(nn.Sequential(nn.Linear(4, 2)), (2, 2, 2, 2))  # (2, 2) is a sequence (T, D) now
    with pytest.raises(dptrain.InvalidArgumentError, match="has no layers"):
        dptrain.from_torch(nn.Sequential(), (4,))
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    with torch.no_grad():
        net[2].bias[1] = float("nan")
    with pytest.raises(dptrain.InvalidArgumentError, match=r"^2 \(Linear\): bias has NaN or infinite values"):
        dptrain.from_torch(net, (4,))


def test_float64_module_and_training_on_the_spec():
    net = randomize(nn.Sequential(nn.Linear(20, 8), nn.ReLU(), nn.Linear(8, 3))).double()
    m = dptrain.from_torch(net, (20,))
    assert m.parameters()["fc1.weight"].dtype == np.float32
    assert np.array_equal(m.parameters()["fc1.weight"], net[0].weight.detach().float().numpy())
    x, y = blobs(n=200)
    assert close(m.predict(x), torch_out(net, x.astype(np.float64)).astype(np.float32))[0]
    run = dptrain.train(x, y, model=m.spec, epochs=1, batch_size=50, threads=1, verbose=False)
    assert run.model.spec == m.spec == "mlp:20-8-3:relu"
