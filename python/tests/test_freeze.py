"""Frozen layers: dptrain.train(freeze=...) keeps the named layers' parameters at their
starting values (bit for bit, also with weight decay) while the others train, records them
in the ledger and on the Run, resumes only with the same list, and refuses bad lists and
algorithms that cannot freeze before anything is trained, naming freeze."""
import numpy as np
import pytest

import dptrain

from helpers import blobs

SPEC = "mlp:20-16-8-3:relu"  # fc1 [16x20 + 16], fc2 [8x16 + 8], fc3 [3x8 + 3]


@pytest.fixture(scope="module")
def data():
    return blobs(n=600, d=20, k=3, seed=1)


@pytest.fixture(scope="module")
def public(data):
    x, y = data
    return dptrain.train(x, y, model=SPEC, epochs=2, optimizer="sgd", lr=0.5, verbose=False, progress=False, seed=1)


def quiet(x, y, **kw):
    kw.setdefault("seed", 1)  # the runs compared must share their streams
    return dptrain.train(x, y, verbose=False, progress=False, **kw)


@pytest.mark.parametrize("algorithm", ["sgd", "dpsgd"])
def test_frozen_layers_keep_their_values(data, public, algorithm):
    x, y = data
    algo = dptrain.DPSGD(sigma=1.0) if algorithm == "dpsgd" else algorithm
    r = quiet(x, y, model=public.model, algorithm=algo, freeze=["fc2", "fc1"], epochs=2, weight_decay=0.1)
    before, after = public.model.parameters(), r.model.parameters()
    for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
        assert np.array_equal(before[name], after[name]), name
    assert np.abs(after["fc3.weight"] - before["fc3.weight"]).max() > 1e-3
    assert r.frozen == ["fc1", "fc2"]  # model order
    if algorithm == "dpsgd":
        assert r.ledger.meta["frozen_layers"] == "fc1,fc2"
        # the epsilon is the ledger's: the same q, sigma and steps as without freezing
        plain = quiet(x, y, model=public.model, algorithm=dptrain.DPSGD(sigma=1.0), epochs=2)
        assert r.epsilon == plain.epsilon


def test_str_and_list_are_one_run(data, public):
    x, y = data
    a = quiet(x, y, model=public.model, algorithm=dptrain.DPSGD(sigma=1.0), epochs=1, freeze="fc1, fc2")
    b = quiet(x, y, model=public.model, algorithm=dptrain.DPSGD(sigma=1.0), epochs=1, freeze=("fc1", "fc2"))
    for k, v in a.model.parameters().items():
        assert np.array_equal(v, b.model.parameters()[k]), k


def test_resume_needs_the_same_layers(data, tmp_path):
    x, y = data
    out = tmp_path / "run"
    quiet(x, y, model=SPEC, algorithm=dptrain.DPSGD(sigma=1.0), epochs=2, max_steps=3, freeze=["fc1"], out_dir=out)
    with pytest.raises(dptrain.DptrainError, match=r"frozen layers \(freeze\) was fc1, now \(none\)"):
        quiet(x, y, model=SPEC, algorithm=dptrain.DPSGD(sigma=1.0), epochs=2, resume=True, out_dir=out)
    r = quiet(x, y, model=SPEC, algorithm=dptrain.DPSGD(sigma=1.0), epochs=2, resume=True, out_dir=out, freeze="fc1")
    assert r.steps > 3 and r.frozen == ["fc1"]


@pytest.mark.parametrize("freeze, message", [
    ("fc9", r'model mlp:20-16-8-3:relu has no layer "fc9" \(its layers with parameters: fc1, fc2, fc3\)'),
    ("relu1", r'no layer "relu1" with parameters'),
    ("fc1,fc1", r"layer fc1 is named twice"),
    (["fc1", "fc2", "fc3"], r"every layer with parameters is frozen"),
    ("", r"freeze: an empty list of layers"),
    ([], r"freeze: an empty list of layers"),
])
def test_bad_lists_are_refused_before_training(data, freeze, message):
    x, y = data
    with pytest.raises(ValueError, match=message) as e:  # the library's InvalidArgumentError is one
        quiet(x, y, model=SPEC, freeze=freeze, epochs=1)
    assert "freeze" in str(e.value)


def test_bad_types_and_algorithms(data):
    x, y = data
    with pytest.raises(TypeError, match="freeze must be a str or a list of layer names"):
        quiet(x, y, model=SPEC, freeze=3)
    with pytest.raises(ValueError, match="an empty layer name"):
        quiet(x, y, model=SPEC, freeze=[""])
    with pytest.raises(ValueError, match="holds a comma"):
        quiet(x, y, model=SPEC, freeze=["fc1,fc2"])
    with pytest.raises(ValueError, match="freeze is an option of algorithm sgd / dpsgd, not of dpulr"):
        quiet(x, y, model=SPEC, algorithm=dptrain.DPULR(sigma0=5), freeze="fc1")


def test_feature_cache_is_the_same_training(data, public):
    """The frozen trunk's output is computed once and kept (the default) or run at every step
    (no_feature_cache=True): the runs agree up to float rounding; without freeze the switch is
    refused."""
    x, y = data
    kw = dict(model=public.model, algorithm=dptrain.DPSGD(sigma=1.0), epochs=2, freeze="fc1")
    a = quiet(x, y, **kw)
    b = quiet(x, y, no_feature_cache=True, **kw)
    for k, v in a.model.parameters().items():
        np.testing.assert_allclose(v, b.model.parameters()[k], rtol=0, atol=1e-5, err_msg=k)
    with pytest.raises(ValueError, match="no_feature_cache: only with freeze"):
        quiet(x, y, model=SPEC, no_feature_cache=True, epochs=1)
