"""Fine-tuning: dptrain.train starts from given parameters (model=<a dptrain.Model>, or
init_params as {name: array} or a flat array) and from nothing else of theirs; the ledger
and checkpoints record where they came from with the SHA-256 of exactly the values used;
every misuse is refused before training, naming the option."""
import hashlib
import warnings

import numpy as np
import pytest

import dptrain
from dptrain._lib import HAVE_INFERENCE

from helpers import blobs

SPEC = "mlp:20-8-3:relu"


@pytest.fixture(scope="module")
def data():
    return blobs(n=600, d=20, k=3, seed=0)


@pytest.fixture(scope="module")
def public(data):
    x, y = data
    return dptrain.train(x, y, model=SPEC, epochs=2, optimizer="sgd", lr=0.5, verbose=False, progress=False, seed=1)


def flat(model):
    return np.concatenate([v.ravel() for v in model.parameters().values()])


def quiet(x, y, **kw):
    kw.setdefault("seed", 1)  # the runs compared must share their streams
    return dptrain.train(x, y, verbose=False, progress=False, **kw)


def test_starts_from_the_models_parameters(data, public):
    x, y = data
    # one step of lr 1e-12 stays where it started; the seed's random initialization is far away
    r = quiet(x, y, model=public.model, optimizer="sgd", lr=1e-12, max_steps=1)
    assert np.allclose(flat(r.model), flat(public.model), rtol=0, atol=1e-7)
    r0 = quiet(x, y, model=SPEC, optimizer="sgd", lr=1e-12, max_steps=1)
    assert np.abs(flat(r0.model) - flat(public.model)).max() > 0.1


def test_three_ways_give_one_run_and_the_ledger_names_the_values(data, public):
    x, y = data
    kw = dict(algorithm=dptrain.DPSGD(sigma=1.0), epochs=1, optimizer="sgd", lr=0.1)
    a = quiet(x, y, model=public.model, **kw)
    b = quiet(x, y, model=SPEC, init_params=public.model.parameters(), **kw)
    c = quiet(x, y, model=SPEC, init_params=flat(public.model), init_source="my public model", **kw)
    assert np.array_equal(flat(a.model), flat(b.model)) and np.array_equal(flat(a.model), flat(c.model))
    sha = hashlib.sha256(flat(public.model).astype(np.float32).tobytes()).hexdigest()
    assert a.ledger.meta["initial_params"] == \
        "the result of dptrain.train (sgd, %d steps) (SHA-256 of the float32 values: %s)" % (public.steps, sha)
    assert b.ledger.meta["initial_params"] == "parameters given to dptrain.train (SHA-256 of the float32 values: %s)" \
        % sha
    assert c.ledger.meta["initial_params"] == "my public model (SHA-256 of the float32 values: %s)" % sha
    plain = quiet(x, y, model=SPEC, **kw)
    assert "initial_params" not in plain.ledger.meta
    assert not np.array_equal(flat(plain.model), flat(a.model))


@pytest.mark.skipif(not HAVE_INFERENCE, reason="libdptrain without dptrain/inference.h")
def test_a_loaded_checkpoint_is_named_by_its_path(data, public, tmp_path):
    x, y = data
    quiet(x, y, model=SPEC, epochs=1, out_dir=str(tmp_path / "pub"))
    m = dptrain.Model.load(str(tmp_path / "pub"))
    assert m.source == "checkpoint %s (sgd run, step 3)" % (tmp_path / "pub" / "checkpoint.safetensors")
    r = quiet(x, y, model=m, algorithm=dptrain.DPSGD(sigma=1.0), epochs=1, out_dir=str(tmp_path / "ft"))
    assert r.ledger.meta["initial_params"].startswith(m.source + " (SHA-256 of the float32 values: ")
    # the run's own checkpoint says so too, and a private source gets a warning
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        quiet(x, y, model=dptrain.Model.load(str(tmp_path / "ft")), algorithm=dptrain.DPSGD(sigma=1.0), epochs=1)
    assert any("comes from a private run" in str(e.message) for e in w)
    st = dptrain.Model.load(str(tmp_path / "ft"))
    assert r.ledger.meta["initial_params"] in open(tmp_path / "ft" / "checkpoint.safetensors", "rb").read() \
        .decode("latin-1")
    assert st.ledger.meta["initial_params"] == r.ledger.meta["initial_params"]


def test_from_torch_then_train(data):
    torch = pytest.importorskip("torch")
    x, y = data
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(20, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    m = dptrain.from_torch(net, (20,))
    r = quiet(x, y, model=m, optimizer="sgd", lr=1e-12, max_steps=1)
    with torch.no_grad():
        want = net(torch.from_numpy(x[:50])).numpy()
    assert np.allclose(r.model.predict(x[:50]), want, rtol=1e-4, atol=1e-5)
    assert r.model.source == "the result of dptrain.train (sgd, 1 steps)"


@pytest.mark.parametrize("kw,err,msg", [
    (dict(init_params={"fc1.weight": np.zeros((8, 20))}), ValueError, "missing: fc1.bias, fc2.weight, fc2.bias"),
    (dict(init_params={"0.weight": np.zeros((8, 20))}), ValueError, "unknown: 0.weight (a PyTorch module converts"),
    (dict(init_params=np.zeros(5)), ValueError, "a flat array of the model's 195 parameters"),
    (dict(init_params=np.full(195, np.nan)), ValueError, "init_params[0] = nan is not finite"),
    (dict(init_params=np.array(["a"] * 195)), TypeError, "expected a dict of arrays"),
    (dict(init_source="x"), ValueError, "init_source: only with starting parameters"),
    (dict(init_params=np.zeros(195), init_source=3), TypeError, "init_source must be a str"),
    (dict(init_params=np.zeros(195), resume=True), ValueError, "a resumed run continues from its checkpoint"),
    (dict(init_params=np.zeros(195), algorithm=dptrain.NoisyGD(langevin_sigma=0.1)), ValueError, "not for noisy-gd"),
])
def test_refused(data, kw, err, msg):
    x, y = data
    args = dict(model=SPEC, epochs=1)
    args.update(kw)
    with pytest.raises(err) as e:
        quiet(x, y, **args)
    assert msg in str(e.value)


def test_a_model_and_init_params_together_are_refused(data, public):
    x, y = data
    with pytest.raises(ValueError, match="brings its own parameters"):
        quiet(x, y, model=public.model, init_params=flat(public.model))
    with pytest.raises(ValueError, match="set_parameters: fc2.bias has shape"):
        quiet(x, y, model=SPEC, init_params=dict(public.model.parameters(), **{"fc2.bias": np.zeros(4)}))


@pytest.mark.skipif(not HAVE_INFERENCE, reason="libdptrain without dptrain/inference.h")
def test_save_round_trip_keeps_the_ledger(data, tmp_path):
    x, y = data
    r = quiet(x, y, model=SPEC, algorithm=dptrain.DPSGD(sigma=1.0, delta=1e-4), epochs=2)
    p = tmp_path / "m.safetensors"
    r.model.save(p)
    m = dptrain.Model.load(p)
    assert m.spec == SPEC and np.array_equal(flat(m), flat(r.model))
    assert (m.algorithm, m.steps, m.loss, m.delta) == ("dpsgd", r.steps, "ce", 1e-4)
    assert m.epsilon() == r.epsilon and m.ledger.to_json() == r.ledger.to_json()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        r.model.save(p)
    before = p.read_bytes()
    with pytest.raises(IsADirectoryError):
        r.model.save(tmp_path)
    assert p.read_bytes() == before
    public = quiet(x, y, model=SPEC, epochs=1)
    public.model.save(p, overwrite=True)
    assert dptrain.Model.load(p).ledger is None and np.array_equal(flat(dptrain.Model.load(p)), flat(public.model))


@pytest.mark.skipif(not HAVE_INFERENCE, reason="libdptrain without dptrain/inference.h")
def test_a_pytorch_model_saved_fine_tunes_in_the_cli(data, tmp_path, cli):
    torch = pytest.importorskip("torch")
    import subprocess
    x, y = data
    net = torch.nn.Sequential(torch.nn.Linear(20, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    m = dptrain.from_torch(net, (20,))
    m.save(tmp_path / "torch.safetensors")
    np.savetxt(tmp_path / "d.csv", np.column_stack([y, x]), delimiter=",", fmt="%.6g")
    out = tmp_path / "run"
    r = subprocess.run([cli, "train", "--dataset", "csv:%s" % (tmp_path / "d.csv"), "--init-from",
                        str(tmp_path / "torch.safetensors"), "--optimizer", "sgd", "--lr", "1e-12", "--max-steps", "1",
                        "--threads", "1", "--quiet", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ft = dptrain.Model.load(out)
    assert ft.spec == m.spec and np.allclose(flat(ft), flat(m), rtol=0, atol=1e-7)


def test_source_text(data, public):
    x, y = data
    with pytest.raises(ValueError, match="init_source is longer than 200 bytes"):
        quiet(x, y, model=public.model, init_source="s" * 201)
    with pytest.raises(ValueError, match="one line of text"):
        quiet(x, y, model=public.model, init_source="two\nlines")
    r = quiet(x, y, model=public.model, init_source="é" * 100,  # 200 bytes
              algorithm=dptrain.DPSGD(sigma=1.0), epochs=1)
    assert r.ledger.meta["initial_params"].startswith("é" * 100 + " (SHA-256")
    # a default source naming a long path is cut to its tail at a character boundary
    public.model.source = "checkpoint /" + "é" * 150 + "/checkpoint.safetensors"
    try:
        r = quiet(x, y, model=public.model, algorithm=dptrain.DPSGD(sigma=1.0), epochs=1)
    finally:
        public.model.source = "the result of dptrain.train (sgd, %d steps)" % public.steps
    got = r.ledger.meta["initial_params"]
    assert got.startswith("...") and got.split(" (SHA-256")[0].endswith("é/checkpoint.safetensors")


@pytest.mark.skipif(not HAVE_INFERENCE, reason="libdptrain without dptrain/inference.h")
def test_provenance_survives_save_and_load(data, public, tmp_path):
    x, y = data
    r = quiet(x, y, model=public.model, epochs=1)  # non-private: no ledger to carry it
    assert r.model.initial_params.startswith("the result of dptrain.train (sgd, ")
    r.model.save(tmp_path / "m.safetensors")
    assert dptrain.Model.load(tmp_path / "m.safetensors").initial_params == r.model.initial_params
    quiet(x, y, model=public.model, epochs=1, out_dir=str(tmp_path / "run"))
    assert dptrain.Model.load(tmp_path / "run").initial_params == r.model.initial_params
    assert quiet(x, y, model=SPEC, epochs=1).model.initial_params is None


@pytest.mark.skipif(not HAVE_INFERENCE, reason="libdptrain without dptrain/inference.h")
def test_overwriting_the_source_directory_is_refused(data, tmp_path):
    x, y = data
    d = tmp_path / "priv"
    quiet(x, y, model=SPEC, algorithm=dptrain.DPSGD(sigma=1.0), epochs=1, out_dir=str(d))
    before = (d / "ledger.json").read_bytes()
    with pytest.raises(ValueError, match="which overwrite=True would empty"):
        quiet(x, y, model=dptrain.Model.load(d), algorithm=dptrain.DPSGD(sigma=1.0), epochs=1, out_dir=str(d),
              overwrite=True)
    assert (d / "ledger.json").read_bytes() == before


@pytest.mark.skipif(not HAVE_INFERENCE, reason="libdptrain without dptrain/inference.h")
def test_save_refusals(data, public, tmp_path):
    import os
    x, y = data
    with pytest.raises(ValueError, match="empty path"):
        public.model.save("")
    os.symlink(tmp_path / "nowhere", tmp_path / "link")
    with pytest.raises(FileExistsError):
        public.model.save(tmp_path / "link")
    bad = quiet(x, y, model=SPEC, epochs=1).model
    bad._m.theta[bad.n_params - 2] = float("nan")  # fc2.bias[1], the last tensor
    with pytest.raises(ValueError, match="fc2.bias holds NaN"):
        bad.save(tmp_path / "nan.safetensors")
    assert not (tmp_path / "nan.safetensors").exists()
    with pytest.raises(TypeError, match="complex"):
        quiet(x, y, model=SPEC, init_params={k: v.astype(np.complex64) for k, v in public.model.parameters().items()})


def test_predict_at_a_layer_equals_pytorch(data):
    """Model.predict(x, layer=...) is that layer's output (a residual group's last layer with the
    group's input added), against the to_torch() module's own submodules"""
    torch = pytest.importorskip("torch")
    m = dptrain.Model._from_spec("cnn:1x8x8:conv4k3p1,relu,[conv4k3p1,relu],gn2,maxpool2,flatten,fc16,gelu,fc3")
    rng = np.random.default_rng(0)
    m.set_parameters({k: (0.5 * rng.normal(size=v.shape)).astype(np.float32) for k, v in m.parameters().items()})
    x = rng.normal(size=(5, 64)).astype(np.float32)
    net = m.to_torch()
    seen = {}
    for name, _, _ in net._plan:
        getattr(net, name).register_forward_hook(lambda mod, i, o, name=name: seen.__setitem__(name, (i[0], o)))
    with torch.no_grad():
        net(torch.from_numpy(x))
    infos = m.layers()
    for i, info in enumerate(infos):
        want = seen[info["name"]][1]
        if info["residual_from"]:  # act[i + 1] = layer(act[i]) + act[s], s = residual_from - 1
            s = info["residual_from"] - 1
            want = want + (seen[infos[s]["name"]][0] if s < len(infos) else 0)
        want = want.reshape(5, -1).numpy()
        for key in (info["name"], i, i - len(infos)):
            got = m.predict(x, layer=key)
            assert got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5), (info["name"], key)
    assert np.array_equal(m.predict(x, layer=-1), m.predict(x))
    with pytest.raises(ValueError, match="has no layer 'fc9'"):
        m.predict(x, layer="fc9")
    with pytest.raises(ValueError, match="outside the model's 10 layers"):
        m.predict(x, layer=10)
    with pytest.raises(TypeError):
        m.predict(x, layer=1.5)


def test_a_dp_linear_probe_on_a_public_trunk(data, public):
    """features of a (public) trunk, then DP-SGD on a linear head: the documented recipe runs"""
    x, y = data
    f = public.model.predict(x, layer="relu1")
    assert f.shape == (len(x), 8)
    r = quiet(f, y, model="mlp:8-3", algorithm=dptrain.DPSGD(sigma=1.0), epochs=2, optimizer="sgd", lr=0.5)
    assert r.epsilon is not None and r.model.evaluate(f, y)[1] > 0.5


@pytest.mark.skipif(not HAVE_INFERENCE, reason="libdptrain without dptrain/inference.h")
def test_account_prints_ledger_text_without_control_characters(data, tmp_path, cli):
    """a ledger file may hold any metadata text: account --ledger shows it on one line"""
    import subprocess
    x, y = data
    r = quiet(x, y, model=SPEC, algorithm=dptrain.DPSGD(sigma=1.0), epochs=1)
    r.ledger.set_meta("initial_params", "two\nlines \u0085 ok \u00e9").save(str(tmp_path / "ledger.json"))
    out = subprocess.run([cli, "account", "--ledger", str(tmp_path / "ledger.json")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "started from    two?lines ?? ok \u00e9\n" in out.stdout
