"""Regression: dptrain.train(regression=True) trains on real-valued targets y [n] or [n, k]
with the squared error. Full-batch SGD on a linear model reaches numpy's least-squares
solution; a DP-SGD run reports the test mean squared error (history, Model.evaluate, a
loaded checkpoint, Model.save) that numpy computes from the model's predictions; bad
targets and settings are refused before anything is trained, naming the argument."""
import numpy as np
import pytest

import dptrain


def linear_data(n, d=4, k=2, noise=0.1, seed=0):
    r = np.random.default_rng(seed)
    x = r.uniform(-1, 1, (n, d)).astype(np.float32)
    w = r.normal(0, 1, (d, k))
    t = x @ w + np.linspace(-0.5, 0.5, k) + r.normal(0, noise, (n, k))
    return x, t


def quiet(x, y, **kw):
    return dptrain.train(x, y, verbose=False, progress=False, history="list", regression=True, **kw)


def test_least_squares():
    x, t = linear_data(400, noise=0.3, seed=1)
    run = quiet(x, t, model="mlp:4-2", sampler="full", optimizer="sgd", lr=0.5, epochs=400)
    p = run.model.parameters()
    a = np.c_[x.astype(np.float64), np.ones(len(x))]
    sol = np.linalg.lstsq(a, t, rcond=None)[0]  # [d + 1, k]
    np.testing.assert_allclose(p["fc1.weight"], sol[:-1].T, atol=1e-4)
    np.testing.assert_allclose(p["fc1.bias"], sol[-1], atol=1e-4)


def test_dpsgd_reports_mse(tmp_path):
    x, t = linear_data(3000, seed=2)
    xs, ts = x[2500:], t[2500:]
    run = quiet(x[:2500], t[:2500], x_test=xs, y_test=ts, model="mlp:4-16-2:tanh",
                algorithm=dptrain.DPSGD(target_epsilon=2), epochs=4, batch_size=250, optimizer="sgd", lr=0.5,
                out_dir=tmp_path / "run")
    last = run.history[-1]
    assert "test_accuracy" not in last and run.epsilon == pytest.approx(2, abs=1e-3)
    want = float(np.mean((run.model.predict(xs).astype(np.float64) - ts) ** 2))
    assert last["test_mse"] == pytest.approx(want, rel=1e-5)
    assert run.model.targets == 2
    assert run.model.evaluate(xs, ts)[1] == pytest.approx(want, rel=1e-5)
    loaded = dptrain.Model.load(tmp_path / "run")
    assert loaded.targets == 2 and loaded.evaluate(xs, ts)[1] == pytest.approx(want, rel=1e-5)
    loaded.save(tmp_path / "saved.safetensors")
    again = dptrain.Model.load(tmp_path / "saved.safetensors")
    assert again.targets == 2 and again.evaluate(xs, ts)[1] == pytest.approx(want, rel=1e-5)


def test_one_target_as_vector():
    x, t = linear_data(500, k=1, seed=3)
    run = quiet(x, t[:, 0], x_test=x[:100], y_test=t[:100, 0], model="mlp:4-1", optimizer="sgd", lr=0.5, epochs=30)
    assert run.history[-1]["test_mse"] < 0.02  # the noise variance is 0.01


@pytest.mark.parametrize("kw,match", [
    (dict(loss="ce"), "loss 'ce': regression=True trains with the squared error"),
    (dict(n_classes=3), "n_classes: not with regression=True"),
    (dict(algorithm=dptrain.DPULR(sigma0=5)), "regression=True: not with algorithm 'dpulr'"),
    (dict(model="mlp:4-3"), "has 3 outputs but the data have 2 regression targets"),
    (dict(x_test=np.zeros((5, 4), np.float32), y_test=np.zeros((5, 3))), "y_test has 3 targets per example"),
    (dict(x_test=np.zeros((5, 4), np.float32), y_test=np.zeros((4, 2))), "y_test has 4 rows of targets for 5"),
])
def test_refusals(kw, match, tmp_path):
    x, t = linear_data(50)
    kw.setdefault("model", "mlp:4-2")
    with pytest.raises(ValueError, match=match):
        quiet(x, t, out_dir=tmp_path / "no", batch_size=10, **kw)
    assert not any(tmp_path.iterdir())  # nothing written


def test_bad_targets():
    x, t = linear_data(50)
    t[7, 1] = np.nan
    with pytest.raises(ValueError, match=r"t\[15\] = nan \(example 7, target 1\) is not finite"):
        quiet(x, t, model="mlp:4-2")
    with pytest.raises(TypeError, match="real-valued regression targets"):
        quiet(x, np.array(["a"] * 50), model="mlp:4-1")
