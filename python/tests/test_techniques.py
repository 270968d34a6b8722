"""train(ema=, ema_warmup=, augment=, aug_mult=) (issue 42 item 4): the keywords reach the
engine (the history has test_accuracy_ema; the same seed gives the same run; aug_mult changes
the run), the checkpoint's model is the average, and bad values are refused."""
import numpy as np
import pytest

import dptrain


def _images(n, seed):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    x = rng.normal(0, 0.5, size=(n, 1, 6, 6)).astype(np.float32)
    for i in range(n):
        x[i, 0, 2 * y[i], :] += 2.0
    return x, y.astype(np.int32)


SPEC = "cnn:1x6x6:conv4k3p1ws,relu,flatten,fc3"


def _run(tmp_path, name, **kw):
    x, y = _images(120, 1)
    xt, yt = _images(60, 2)
    return dptrain.train(x, y, x_test=xt, y_test=yt, model=SPEC, algorithm=dptrain.DPSGD(sigma=1.0, clip=1.0),
                         optimizer="sgd", lr=0.2, batch_size=24, epochs=2, seed=5, threads=1, verbose=False,
                         history="list", out_dir=str(tmp_path / name), **kw)


def test_ema_and_augmentation(tmp_path):
    a = _run(tmp_path, "a", ema=0.9, ema_warmup=True, augment="crop-flip", aug_mult=2)
    b = _run(tmp_path, "b", ema=0.9, ema_warmup=True, augment="crop-flip", aug_mult=2)
    c = _run(tmp_path, "c", ema=0.9, ema_warmup=True, augment="crop-flip", aug_mult=3)
    h = a.history[-1]
    assert 0 <= h["test_accuracy_ema"] <= 1 and h["test_loss_ema"] > 0
    keys = ("test_loss", "test_accuracy", "test_loss_ema", "test_accuracy_ema")
    assert [[r[k] for k in keys] for r in a.history] == [[r[k] for k in keys] for r in b.history]
    assert [r["test_loss"] for r in a.history] != [r["test_loss"] for r in c.history]
    # the checkpoint's model is the average: its test loss is the history's EMA loss
    m = dptrain.Model.load(str(tmp_path / "a"))
    xt, yt = _images(60, 2)
    loss, acc = m.evaluate(xt.reshape(60, -1), yt)
    assert loss == pytest.approx(h["test_loss_ema"], rel=1e-6)
    assert acc == pytest.approx(h["test_accuracy_ema"])


def test_plain_run_has_no_ema(tmp_path):
    r = _run(tmp_path, "p")
    assert "test_accuracy_ema" not in r.history[-1]


@pytest.mark.parametrize("kw, msg", [
    (dict(ema=1.0), "ema"),
    (dict(ema_warmup=True), "ema_warmup"),
    (dict(augment="rotate"), "augment"),
    (dict(augment="crop", aug_mult=0), "aug_mult"),
    (dict(aug_mult=2), "aug_mult"),
])
def test_refusals(tmp_path, kw, msg):
    with pytest.raises(Exception, match=msg):
        _run(tmp_path, "bad", **kw)
