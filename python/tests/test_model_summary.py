"""Model.from_spec and Model.summary: the layer table the CLI's `dptrain model` prints (the
same rows), the names freeze= takes; a from_spec Model holds zeros and is refused as a
starting point until set_parameters fills it."""
import subprocess

import numpy as np
import pytest

import dptrain

from helpers import blobs


@pytest.mark.parametrize("spec", ["mnist_cnn", "resnet5", "mlp:20-16-3:relu"])
def test_summary_rows_are_the_clis(spec, cli):
    m = dptrain.Model.from_spec(spec)
    ours = m.summary().splitlines()
    theirs = subprocess.run([cli, "model", "--model", spec], capture_output=True, text=True, check=True).stdout
    theirs = theirs.splitlines()
    # the same table; the last line names the option of each interface
    assert ours[:-1] == theirs[:-1]
    layers = list(dict.fromkeys(n.split(".")[0] for n in m.parameters()))  # in model order
    assert ours[-1] == "layers with parameters (train(freeze=...) takes these names): " + ", ".join(layers)


def test_from_spec_is_zero_and_refused_until_filled():
    x, y = blobs(n=300, d=20, k=3, seed=3)
    m = dptrain.Model.from_spec("mlp:20-16-3:relu")
    assert all(not v.any() for v in m.parameters().values())
    with pytest.raises(ValueError, match="has all parameters 0"):
        dptrain.train(x, y, model=m, epochs=1, verbose=False, progress=False)
    m.set_parameters({k: np.full(v.shape, 0.01, np.float32) for k, v in m.parameters().items()})
    r = dptrain.train(x, y, model=m, epochs=1, max_steps=1, lr=1e-9, verbose=False, progress=False)
    assert r.model.parameters()["fc1.weight"][0, 0] == pytest.approx(0.01, abs=1e-6)
    with pytest.raises(TypeError, match="spec must be a str"):
        dptrain.Model.from_spec(3)
