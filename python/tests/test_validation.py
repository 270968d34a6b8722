"""validation=N (the CLI's --validation): the last N rows of x, y are held out, never trained
on, and evaluated instead of a test split; a private run's epsilon excludes their metrics,
the epoch results say eval_split="validation", and the run equals training on the first
rows with the held-out rows given as x_test (same arrays, same seed: the same parameters)."""
import numpy as np
import pytest

import dptrain


def blobs(n, seed=0):
    r = np.random.default_rng(seed)
    y = np.arange(n) % 3
    x = r.normal(0, 0.5, (n, 4)).astype(np.float32)
    x[np.arange(n), y] += 2.0
    return x, y


def test_validation_is_the_last_rows(tmp_path, capsys):
    x, y = blobs(600)
    kw = dict(model="mlp:4-3", algorithm=dptrain.DPSGD(sigma=1.0, delta=1e-4), epochs=2, batch_size=50,
              optimizer="sgd", lr=0.5, seed=3, threads=1, verbose=True, secret_dir=tmp_path / "s")
    run = dptrain.train(x, y, validation=100, out_dir=tmp_path / "v", **kw)
    ref = dptrain.train(x[:500], y[:500], x_test=x[500:], y_test=y[500:], out_dir=tmp_path / "r", **kw)
    pa, pb = run.model.parameters(), ref.model.parameters()
    assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)
    h = run.history if isinstance(run.history, list) else run.history.to_dict("records")
    hr = ref.history if isinstance(ref.history, list) else ref.history.to_dict("records")
    assert [e["test_accuracy"] for e in h] == [e["test_accuracy"] for e in hr]
    assert all(e["eval_split"] == "validation" for e in h)
    assert all("validation metrics" in e["privacy_label"] for e in h)
    assert not any("validation" in e.get("privacy_label", "") for e in hr)
    assert run.sample_rate == pytest.approx(50 / 500)
    err = capsys.readouterr().err
    assert "validation acc" in err
    assert "validation metrics" in (tmp_path / "v" / "ledger.json").read_text()


def test_refused():
    x, y = blobs(60)
    with pytest.raises(ValueError, match="validation=60: x has only 60 rows"):
        dptrain.train(x, y, model="mlp:4-3", validation=60, verbose=False)
    with pytest.raises(ValueError, match="not with x_test"):
        dptrain.train(x, y, model="mlp:4-3", validation=10, x_test=x, y_test=y, verbose=False)
    with pytest.raises(ValueError, match="validation must be in"):
        dptrain.train(x, y, model="mlp:4-3", validation=-1, verbose=False)
    with pytest.raises(TypeError, match="validation must be a number of rows"):
        dptrain.train(x, y, model="mlp:4-3", validation=True, verbose=False)
    with pytest.raises(TypeError, match="validation must be an integer"):
        dptrain.train(x, y, model="mlp:4-3", validation=2.5, verbose=False)
