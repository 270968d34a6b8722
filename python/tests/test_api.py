"""The public Python API as editors and help() see it (issue 41 items 2, 1 and 5): every
public callable annotated, train()'s options explicit keyword-only parameters, the
per-algorithm configuration classes equal to the deprecated flat keywords bit for bit,
runs_dir= giving each run a new directory with runs_dir/latest, and PoissonBatchSampler
feeding a DataLoader exactly PrivateGradients' batches."""
import inspect
import os
import pydoc
import types
import warnings

import numpy as np
import pytest

import dptrain
from helpers import blobs

PKG_DIR = os.path.dirname(os.path.abspath(dptrain.__file__))


# ==== annotations and signatures ====

def _public_callables():
    """(name, callable) of every public function and method reachable from dptrain.__all__
    (modules listed there: their __all__), classes' methods and properties included."""
    seen, out = set(), []

    def add(name, obj):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, types.ModuleType):
            for n in getattr(obj, "__all__", []):
                add("%s.%s" % (name, n), getattr(obj, n))
        elif inspect.isclass(obj):
            if issubclass(obj, BaseException) or not getattr(obj, "__module__", "").startswith("dptrain"):
                return
            for n, v in vars(obj).items():
                if n.startswith("_") and n != "__init__":
                    continue
                if isinstance(v, property):
                    out.append(("%s.%s" % (name, n), v.fget))
                elif isinstance(v, (classmethod, staticmethod)):
                    out.append(("%s.%s" % (name, n), v.__func__))
                elif inspect.isfunction(v):
                    out.append(("%s.%s" % (name, n), v))
        elif inspect.isfunction(obj) and obj.__module__.startswith("dptrain"):
            out.append((name, obj))

    for n in dptrain.__all__:
        add("dptrain." + n, getattr(dptrain, n))
    add("dptrain.data", dptrain.data)
    add("dptrain.torch_interop", dptrain.torch_interop)
    return out


def test_every_public_callable_is_annotated():
    found = _public_callables()
    names = {n for n, _ in found}
    for must in ("dptrain.train", "dptrain.PrivateGradients.release", "dptrain.Model.predict",
                 "dptrain.accounting.epsilon", "dptrain.audit.run", "dptrain.load_idx",
                 "dptrain.per_example_gradients", "dptrain.PoissonBatchSampler.__init__", "dptrain.Run.epsilon"):
        assert must in names, "%s not among the public callables walked" % must
    missing = []
    for name, fn in found:
        fn = inspect.unwrap(fn)
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.name in ("self", "cls"):
                continue
            if p.annotation is inspect.Parameter.empty:
                missing.append("%s: parameter %s" % (name, p.name))
        if sig.return_annotation is inspect.Signature.empty:
            missing.append("%s: return" % name)
    assert not missing, "not annotated:\n" + "\n".join(missing)


def test_py_typed_is_shipped():
    assert os.path.exists(os.path.join(os.path.dirname(PKG_DIR), "dptrain", "py.typed")) or \
        os.path.exists(os.path.join(PKG_DIR, "py.typed"))
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert "py.typed" in open(os.path.join(here, "pyproject.toml")).read()


def test_train_signature_lists_the_options():
    sig = inspect.signature(dptrain.train)
    params = sig.parameters
    assert list(params)[:2] == ["x", "y"]
    for name in ("model", "algorithm", "epochs", "batch_size", "lr", "out_dir", "runs_dir", "resume", "seed"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
    assert params["epochs"].default == 5 and params["batch_size"].default == 256
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    text = pydoc.render_doc(dptrain.train, renderer=pydoc.plaintext)
    for name in ("algorithm: ", "batch_size: 'int' = 256", "epochs: 'int' = 5", "runs_dir", "-> 'Run'"):
        assert name in text, "help(dptrain.train) lacks %r" % name
    # the algorithms' options are in their classes
    assert list(inspect.signature(dptrain.DPSGD).parameters)[:2] == ["sigma", "clip"]
    assert "sigma0" in inspect.signature(dptrain.DPULR).parameters


# ==== configuration classes = flat keywords ====

def _params(run):
    return np.concatenate([np.ravel(v) for v in run.model.parameters().values()])


@pytest.mark.parametrize("cfg, flat", [
    (dptrain.DPSGD(sigma=1.0, clip=0.5, delta=1e-3), dict(algorithm="dpsgd", sigma=1.0, clip=0.5, delta=1e-3)),
    (dptrain.PDPSGD(kappa=1e-4, lambda_=1e-3), dict(algorithm="pdp-sgd", kappa=1e-4, lambda_=1e-3)),
    (dptrain.SGD(), dict(algorithm="sgd")),
])
def test_config_equals_flat_keywords(cfg, flat):
    """The one test of the deprecated path (the algorithm's options as flat keywords; every
    other test writes algorithm=dptrain.DPSGD(...) etc., and python/pyproject.toml makes
    dptrain's DeprecationWarnings errors): the same run as the configuration class, and one
    DeprecationWarning, attributed to the caller's line, that names the class to write."""
    x, y = blobs(n=300)
    common = dict(model="mlp:20-8-3:relu", batch_size=30, epochs=1, seed=7, threads=1, verbose=False,
                  history="list")
    a = dptrain.train(x, y, algorithm=cfg, **common)
    if len(flat) > 1:
        want = (r"dptrain\.train\(\.\.\., .*\): the algorithm's options as keywords are deprecated; write "
                r"algorithm=dptrain\.%s\(" % type(cfg).__name__)
        with pytest.warns(DeprecationWarning, match=want) as w:
            b = dptrain.train(x, y, **common, **flat)
        dep = [e for e in w if issubclass(e.category, DeprecationWarning)]
        assert len(dep) == 1 and dep[0].filename == __file__, [(str(e.message), e.filename) for e in dep]
    else:  # a name without options is the current API: no warning
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            b = dptrain.train(x, y, **common, **flat)
    assert np.array_equal(_params(a), _params(b))
    assert a.steps == b.steps and a.sigma == b.sigma and a.epsilon == b.epsilon


def test_old_keywords_say_what_to_write():
    x, y = blobs(n=300)
    with pytest.raises(TypeError, match=r"sigma: an option of the algorithm: give it in its configuration, "
                                        r"algorithm=dptrain\.DPSGD\(\.\.\., sigma=\.\.\.\)"):
        dptrain.train(x, y, algorithm=dptrain.DPSGD(clip=1.0), sigma=1.0)
    with pytest.raises(TypeError, match=r"kappa is not an option of dptrain\.DPSGD \(it is one of dptrain\.PDPSGD\)"):
        dptrain.train(x, y, algorithm=dptrain.DPSGD(sigma=1.0), kappa=1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument.*learning_rate"):
        dptrain.train(x, y, learning_rate=0.1)
    with pytest.raises(TypeError, match=r"algorithm=dptrain\.DPSGD: give an instance"):
        dptrain.train(x, y, algorithm=dptrain.DPSGD)
    with pytest.raises(ValueError, match="needs sigma= or target_epsilon="):
        dptrain.train(x, y, model="mlp:20-8-3:relu", algorithm=dptrain.DPSGD(), batch_size=30)
    with pytest.raises(dataclasses_frozen_error()):
        dptrain.DPSGD(sigma=1.0).sigma = 2.0


def dataclasses_frozen_error():
    import dataclasses
    return dataclasses.FrozenInstanceError


# ==== runs_dir: a new directory per run, runs_dir/latest ====

@pytest.mark.skipif(not hasattr(dptrain._clib, "dpt_run_dir_new_name"), reason="libdptrain without "
                    "dpt_run_dir_new_name")
def test_runs_dir_new_directory_per_run_and_latest(workdir):
    x, y = blobs(n=300)
    runs = os.path.join(workdir, "runs")
    kw = dict(model="mlp:20-8-3:relu", algorithm=dptrain.DPSGD(sigma=1.0, delta=1e-3), batch_size=30, threads=1,
              verbose=False, runs_dir=runs)
    a = dptrain.train(x, y, epochs=1, **kw)
    b = dptrain.train(x, y, epochs=1, **kw)  # the same call again: a new directory, not a refusal
    assert a.out_dir != b.out_dir
    for r in (a, b):
        assert os.path.dirname(r.out_dir) == runs
        base = os.path.basename(r.out_dir)
        assert len(base) == 20 and base[8] == "-" and base[15] == "-" and base[:8].isdigit(), base
        assert os.path.exists(os.path.join(r.out_dir, "checkpoint.safetensors"))
    assert os.readlink(os.path.join(runs, "latest")) == os.path.basename(b.out_dir)
    # resume continues runs_dir/latest (the second run)
    c = dptrain.train(x, y, epochs=2, resume=True, **kw)
    assert c.steps == 2 * b.steps and os.path.realpath(c.out_dir) == os.path.realpath(b.out_dir)
    assert dptrain.read_ledger(b.out_dir).steps == c.steps
    assert dptrain.read_ledger(a.out_dir).steps == a.steps  # the first run is untouched
    with pytest.raises(ValueError, match="runs_dir and out_dir: give one"):
        dptrain.train(x, y, out_dir=os.path.join(workdir, "o"), **kw)
    with pytest.raises(ValueError, match="has no run to continue"):
        dptrain.train(x, y, resume=True, **dict(kw, runs_dir=os.path.join(workdir, "none")))
    # an explicit out_dir keeps the refusal of a non-empty directory
    with pytest.raises(ValueError, match="is not empty"):
        dptrain.train(x, y, epochs=1, **dict(kw, runs_dir=None, out_dir=a.out_dir))


# ==== PoissonBatchSampler: a DataLoader of PrivateGradients' batches ====

def test_poisson_batch_sampler_yields_the_mechanism_batches():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    n = 40
    ds = TensorDataset(torch.arange(n, dtype=torch.float32).reshape(n, 1), torch.arange(n))
    # the same seed twice: the sampler's batches must be pg's sample() sequence
    kw = dict(n=n, dim=1, sample_rate=0.05, sigma=1.0, seed=11, secure=False)
    with dptrain.PrivateGradients(**kw) as ref:
        want = [ref.sample().tolist() for _ in range(60)]
    with dptrain.PrivateGradients(**kw) as pg:
        sampler = dptrain.PoissonBatchSampler(pg, steps=60, dataset=ds)
        assert len(sampler) == 60
        loader = DataLoader(ds, batch_sampler=sampler, collate_fn=sampler.collate_fn)
        got = []
        for xb, yb in loader:
            got.append(yb.tolist())
            assert xb.shape == (len(yb), 1) and xb.dtype == torch.float32
            pg.release(xb.numpy())
        assert pg.steps == 60
    assert got == want
    assert any(len(b) == 0 for b in got), "q n = 2: some of 60 batches should be empty"
    # default steps: one epoch of round(1 / q) batches
    with dptrain.PrivateGradients(**kw) as pg:
        assert len(dptrain.PoissonBatchSampler(pg)) == 20


def test_poisson_batch_sampler_refuses_drawing_ahead():
    torch = pytest.importorskip("torch")
    from torch.utils.data import TensorDataset
    ds = TensorDataset(torch.zeros(40, 1))
    with dptrain.PrivateGradients(n=40, dim=1, sample_rate=0.5, sigma=1.0) as pg:
        it = iter(dptrain.PoissonBatchSampler(pg, steps=3, dataset=ds))
        next(it)
        with pytest.raises(RuntimeError, match="has not been released.*num_workers=0"):
            next(it)
        with pytest.raises(ValueError, match="dataset has 39 examples"):
            dptrain.PoissonBatchSampler(pg, dataset=TensorDataset(torch.zeros(39, 1)))
        with pytest.raises(ValueError, match="give dataset="):
            dptrain.PoissonBatchSampler(pg).collate_fn([])


def test_poisson_batch_sampler_trains_a_module():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    x, y = blobs(n=600)
    ds = TensorDataset(torch.from_numpy(x), torch.from_numpy(y.astype(np.int64)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    dim = sum(p.numel() for _, p in dptrain.trainable_parameters(model))
    grads = dptrain.per_example_gradients(model, torch.nn.functional.cross_entropy)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with dptrain.PrivateGradients(n=len(ds), dim=dim, batch_size=60, sigma=0.8, clip=1.0, seed=3, secure=False) as pg:
        sampler = dptrain.PoissonBatchSampler(pg, steps=100, dataset=ds)
        for xb, yb in DataLoader(ds, batch_sampler=sampler, collate_fn=sampler.collate_fn):
            update = pg.release(grads(xb, yb))
            opt.zero_grad()
            dptrain.set_gradients(model, update)
            opt.step()
        assert pg.steps == 100 and pg.epsilon(1e-5) > 0
    with torch.no_grad():
        acc = (model(torch.from_numpy(x)).argmax(1).numpy() == y).mean()
    assert acc > 0.9, acc

