"""Training from numpy arrays: every algorithm runs, a Python run equals the CLI's run on the
same data bit for bit, model objects equal spec strings, history and epsilon are reported,
and the C library runs with the GIL released."""
import json
import math
import os
import subprocess
import threading

import numpy as np
import pytest

import dptrain
from dptrain import layers as L
from dptrain._lib import HAVE_CALLBACKS, HAVE_INFERENCE

from helpers import blobs, fashion

needs_inference = pytest.mark.skipif(not HAVE_INFERENCE, reason="libdptrain without dptrain/inference.h")


def cli_train(cli, out, *args):
    cmd = [cli, "train", "--dataset", "fashion-mnist", "--data-dir", "/usr/share/datasets", "--max-train", "1000",
           "--max-test", "200", "--normalize", "none", "--threads", "2", "--out", out, "--quiet", "--seed", "1",
           *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


@needs_inference
@pytest.mark.parametrize("algo,args,cfg,kw", [
    ("sgd", ["--model", "mlp:784-32-10:relu", "--epochs", "2", "--batch-size", "64"],
     dptrain.SGD(), dict(model="mlp:784-32-10:relu", epochs=2, batch_size=64)),
    ("dpsgd", ["--model", "mlp:784-32-10:gelu", "--epochs", "2", "--batch-size", "100", "--target-epsilon", "4",
               "--delta", "1e-4", "--clip", "0.5"],
     dptrain.DPSGD(target_epsilon=4.0, delta=1e-4, clip=0.5), dict(model="mlp:784-32-10:gelu", epochs=2,
                                                                   batch_size=100)),
    ("dpmac", ["--model", "mlp:20-16-10:relu", "--epochs", "1", "--batch-size", "100", "--target-epsilon", "6",
               "--delta", "1e-4", "--z-steps", "3", "--pca-dims", "20", "--pca-sigma", "4", "--center-clip", "12",
               "--center-sigma", "2"],
     dptrain.DPMAC(target_epsilon=6.0, delta=1e-4, z_steps=3, pca_dims=20, pca_sigma=4.0, center_clip=12.0,
                   center_sigma=2.0), dict(model="mlp:20-16-10:relu", epochs=1, batch_size=100)),
    # the defaults of both (explicit noise, s 0.1, the clean-loss baseline) must be the same
    ("dpulr", ["--model", "mlp:784-16-10:gelu", "--epochs", "1", "--batch-size", "100", "--sigma0", "2",
               "--copies", "4", "--delta", "1e-4"],
     dptrain.DPULR(sigma0=2.0, copies=4, delta=1e-4), dict(model="mlp:784-16-10:gelu", epochs=1, batch_size=100)),
])
def test_python_run_equals_cli_run(cli, workdir, algo, args, cfg, kw):
    x, y, xt, yt = fashion()
    out_cli = os.path.join(workdir, "cli")
    cli_train(cli, out_cli, "--algo", algo, *args)
    assert cfg.name == algo
    run = dptrain.train(x, y, algorithm=cfg, x_test=xt, y_test=yt, threads=2, verbose=False,
                        out_dir=os.path.join(workdir, "py"), seed=1, **kw)
    ref = dptrain.Model.load(out_cli)
    p, q = run.model.parameters(), ref.parameters()
    assert p.keys() == q.keys()
    for k in p:  # same data, seed and threads: bit-identical parameters
        assert np.array_equal(p[k], q[k]), k
    assert run.steps == ref.steps
    if algo != "sgd":
        assert run.epsilon == ref.ledger.epsilon(1e-4)
        assert run.epsilon <= (getattr(cfg, "target_epsilon", None) or math.inf)
        assert run.ledger.events == ref.ledger.events and run.ledger.steps == ref.ledger.steps
    if algo == "dpmac":  # the DP mean and DP-PCA releases are in the ledger, before the steps
        assert [e["label"] for e in run.ledger.events[:2]] == ["dp-mean", "dp-pca"]
    # the Python run's directory holds the same kind of checkpoint and ledger
    assert dptrain.Model.load(os.path.join(workdir, "py")).parameters()["fc1.weight"].tobytes() == \
        p["fc1.weight"].tobytes()


ALGOS = [
    ("sgd", dptrain.SGD()),
    ("dpsgd", dptrain.DPSGD(sigma=1.0)),
    ("pdp-sgd", dptrain.PDPSGD(kappa=1e-3, lambda_=1e-4)),
    ("proportional-noise", dptrain.ProportionalNoise(prop_sigma=0.1)),
    ("dpulr", dptrain.DPULR(sigma0=1.0, copies=4, ulr_noise="explicit")),
    ("ulr", dptrain.ULR(copies=4)),
    ("dpmac", dptrain.DPMAC(sigma=1.0, z_steps=3)),
    ("mac", dptrain.MAC(z_steps=3)),
    ("noisy-gd", dptrain.NoisyGD(langevin_sigma=0.01, eta=0.1, neighbours="remove")),
]


@pytest.mark.parametrize("algo,cfg", ALGOS, ids=[a for a, _ in ALGOS])
def test_every_algorithm_trains(algo, cfg):
    x, y = blobs(n=400)
    xt, yt = blobs(n=100, seed=1)
    run = dptrain.train(x, y, x_test=xt, y_test=yt, model="mlp:20-16-3:relu", algorithm=cfg, epochs=2,
                        batch_size=50, threads=1, verbose=False, history="list")
    assert run.algorithm == algo and run.steps > 0 and run.stop_reason == "done"
    assert np.all(np.isfinite(run.model.predict(xt)))
    private = algo in ("dpsgd", "dpulr", "dpmac")
    assert (run.epsilon is not None) == private
    assert (run.ledger is not None) == private
    if private:
        assert run.epsilon > 0 and run.ledger.steps == run.steps
    if algo == "noisy-gd":
        assert run.kl is not None and run.kl["steps"] == run.steps and run.kl["remove"] > 0
    if HAVE_CALLBACKS:
        assert [h["epoch"] for h in run.history] == [1, 2]
        assert run.history[-1]["step"] == run.steps
        assert math.isnan(run.history[-1]["train_loss"]) == private
        if private:
            assert run.history[-1]["epsilon"] == pytest.approx(run.epsilon)


def test_pdp_sigma_is_the_papers_sgd_kappa_and_labels_adam():
    # plain SGD, constant lr: pdp_sigma S trains exactly as kappa = (lr S)^2 given directly;
    # with Adam the same formula is our mapping, and a warning says so
    import warnings as w
    x, y = blobs(n=200)
    common = dict(model="mlp:20-8-3:relu", epochs=2, batch_size=50, threads=1, verbose=False, seed=3,
                  optimizer="sgd", lr=0.1)
    with w.catch_warnings():
        w.simplefilter("error", UserWarning)  # no warning for the paper's form
        a = dptrain.train(x, y, algorithm=dptrain.PDPSGD(pdp_sigma=3.0), **common)
    b = dptrain.train(x, y, algorithm=dptrain.PDPSGD(kappa=(0.1 * 3.0) ** 2), **common)
    for k, v in a.model.parameters().items():
        assert np.allclose(v, b.model.parameters()[k], rtol=1e-6, atol=1e-7), k
    common.update(optimizer="adam", lr=1e-3)
    with pytest.warns(UserWarning, match="our mapping of its lr; the paper derives kappa"):
        dptrain.train(x, y, algorithm=dptrain.PDPSGD(pdp_sigma=3.0), **common)


def test_dpulr_defaults_are_explicit_with_the_baseline(caplog):
    x, y = blobs(n=300)
    common = dict(model="mlp:20-8-3:relu", epochs=1, batch_size=50, threads=1, verbose=False, seed=1)

    def run(**kw):
        return dptrain.train(x, y, algorithm=dptrain.DPULR(sigma0=1.0, copies=4, **kw), **common)

    def params(**kw):
        return run(**kw).model.parameters()

    with caplog.at_level("WARNING", logger="dptrain"):
        d, spelled = params(), params(ulr_noise="explicit", ulr_std=0.1, baseline=True)
    assert "Gaussian approximation" not in caplog.text
    assert all(np.array_equal(d[k], spelled[k]) for k in d)
    nobase = params(baseline=False)
    assert not all(np.array_equal(d[k], nobase[k]) for k in d)
    # the controller: no baseline unless asked for, and then refused
    # issue 38: the Run says its epsilon does not cover the controller; explicit mode has no such note
    ctrl = run(ulr_noise="controller")
    assert "--ulr-noise controller" in ctrl.epsilon_excludes and ctrl.epsilon is not None
    assert run().epsilon_excludes is None
    with caplog.at_level("WARNING", logger="dptrain"):
        c, c0 = params(ulr_noise="controller"), params(ulr_noise="controller", baseline=False)
    assert "Gaussian approximation" in caplog.text  # its epsilon rests on it, and the run says so
    assert all(np.array_equal(c[k], c0[k]) for k in c)
    with pytest.raises(ValueError, match="baseline breaks the privacy controller"):
        params(ulr_noise="controller", baseline=True)


def test_accuracy_on_easy_data():
    x, y = blobs(n=600)
    xt, yt = blobs(n=200, seed=2)
    run = dptrain.train(x, y, x_test=xt, y_test=yt, model=[L.Linear(16), L.ReLU(), L.Linear(3)], epochs=3,
                        batch_size=32, lr=0.01, verbose=False)
    loss, acc = run.model.evaluate(xt, yt)
    assert acc > 0.9 and acc == run.last["test_accuracy"]
    assert np.mean(run.model.predict_classes(xt) == yt) == pytest.approx(acc)


def test_layer_objects_give_the_canonical_spec():
    cnn = [L.Conv2d(16, 8, stride=2, padding=3), L.ReLU(), L.MaxPool2d(2, 1), L.Conv2d(32, 4, stride=2), L.ReLU(),
           L.MaxPool2d(2, 1), L.Flatten(), L.Linear(32), L.ReLU(), L.Linear(10)]
    spec = L.build_spec(cnn, (1, 28, 28))
    assert spec == "cnn:1x28x28:conv16k8s2p3,relu,maxpool2s1,conv32k4s2,relu,maxpool2s1,flatten,fc32,relu,fc10"
    assert L.build_spec([L.Linear(128), L.GELU(), L.Linear(10)], (784,)) == "mlp:784-128-10:gelu"
    res = [L.Conv2d(4, 3, padding=1), L.ReLU(), L.Residual([L.Conv2d(4, 3, padding=1), L.GroupNorm(2)]), L.ReLU(),
           L.AvgPool2d(2), L.Flatten(), L.Linear(3, bias=False)]
    s = L.build_spec(res, (2, 6, 6))
    assert s.startswith("cnn:2x6x6:") and "[" in s and "gn2" in s
    # a layer that does not fit is refused by the library, naming it
    with pytest.raises(ValueError, match="kernel|larger|exceed"):
        L.build_spec([L.Conv2d(4, 9)], (1, 5, 5))
    with pytest.raises(TypeError, match="layer object"):
        L.build_spec([L.Linear(3), "relu"], (4,))


def test_cnn_from_layer_objects_equals_spec_string():
    x, y = blobs(n=200, d=64, k=3)
    x = x.reshape(-1, 1, 8, 8)
    layers = [L.Conv2d(4, 3, padding=1), L.ReLU(), L.MaxPool2d(2), L.Flatten(), L.Linear(3)]
    a = dptrain.train(x, y, model=layers, epochs=1, batch_size=50, threads=1, verbose=False, seed=1)
    b = dptrain.train(x, y, model=a.model.spec, epochs=1, batch_size=50, threads=1, verbose=False, seed=1)
    assert a.model.spec == "cnn:1x8x8:conv4k3p1,relu,maxpool2,flatten,fc3"
    pa, pb = a.model.parameters(), b.model.parameters()
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)


def test_target_epsilon_calibrates_and_is_not_exceeded():
    x, y = blobs(n=1000)
    run = dptrain.train(x, y, model="mlp:20-8-3:relu", algorithm=dptrain.DPSGD(target_epsilon=2.0, delta=1e-4),
                        epochs=2, batch_size=100, threads=1, verbose=False)
    steps = 2 * round(1 / 0.1)
    assert run.sigma == dptrain.accounting.calibrate_sigma(2.0, 0.1, 1e-4, steps=steps)
    assert run.epsilon <= 2.0 and run.ledger.steps == run.steps == steps
    # sigma and a budget: the run stops before the step that would exceed it
    run2 = dptrain.train(x, y, model="mlp:20-8-3:relu",
                         algorithm=dptrain.DPSGD(sigma=1.5, target_epsilon=2.0, delta=1e-4), epochs=5,
                         batch_size=100, threads=1, verbose=False)
    assert run2.stop_reason == "budget" and 0 < run2.steps < 50 and run2.epsilon <= 2.0
    assert dptrain.accounting.epsilon(1.5, 0.1, run2.steps + 1, 1e-4) > 2.0


def test_epochs_mean_the_same_steps_in_accounting_and_training(cli):
    # issue 38.7: N = 1000, B = 385, 10 epochs: steps_for_epochs and `dptrain account --epochs`
    # said ceil(10 / 0.385) = 26 steps (epsilon 15.08) while training took 10 round(1/q) = 30
    # (16.23); all three now use dpt_sampler_steps_for_epochs
    x, y = blobs(n=1000)
    q, delta = 385 / 1000, 1e-5
    assert dptrain.accounting.steps_for_epochs(10, q) == 30
    run = dptrain.train(x, y, model="mlp:20-8-3:relu", algorithm=dptrain.DPSGD(sigma=1.0, delta=delta), epochs=10,
                        batch_size=385, threads=1, verbose=False)
    assert run.steps == run.ledger.steps == dptrain.accounting.steps_for_epochs(10, q)
    assert run.epsilon == dptrain.accounting.epsilon(1.0, q, 30, delta)
    j = json.loads(subprocess.run([cli, "account", "--batch-size", "385", "--dataset-size", "1000", "--sigma", "1",
                                   "--epochs", "10", "--json"], capture_output=True, text=True, check=True).stdout)
    assert (j["steps"], j["epsilon"]) == (run.steps, run.epsilon)
    # the calibration plans the same steps: the sigma of calibrate_sigma(epochs=10) and of
    # `dptrain account --target-epsilon --epochs 10`
    cal = dptrain.train(x, y, model="mlp:20-8-3:relu", algorithm=dptrain.DPSGD(target_epsilon=8.0, delta=delta),
                        epochs=10, batch_size=385, threads=1, verbose=False)
    assert cal.sigma == dptrain.accounting.calibrate_sigma(8.0, q, delta, epochs=10)
    assert cal.steps == 30 and cal.epsilon <= 8.0
    j = json.loads(subprocess.run([cli, "account", "--batch-size", "385", "--dataset-size", "1000", "--target-epsilon",
                                   "8", "--epochs", "10", "--json"], capture_output=True, text=True,
                                  check=True).stdout)
    assert j["sigma"] == cal.sigma and j["steps"] == 30
    with pytest.raises(ValueError, match="whole number"):
        dptrain.accounting.steps_for_epochs(2.5, q)


@pytest.mark.skipif(not HAVE_CALLBACKS, reason="libdptrain without trainer callbacks")
def test_history_forms_and_on_epoch_stop():
    x, y = blobs(n=300)
    seen = []
    run = dptrain.train(x, y, model="mlp:20-8-3:relu", epochs=5, batch_size=50, threads=1, verbose=False,
                        history="list", on_epoch=lambda r: seen.append(r["epoch"]) or r["epoch"] >= 2)
    assert seen == [1, 2] and run.stop_reason == "callback" and len(run.history) == 2
    assert set(run.history[0]) >= {"epoch", "step", "train_loss", "test_loss", "test_accuracy", "lr", "wall_s",
                                   "epsilon", "delta"}
    try:
        import pandas  # noqa: F401
    except ImportError:
        r = dptrain.train(x, y, model="mlp:20-8-3:relu", epochs=1, threads=1, verbose=False)
        assert isinstance(r.history, list)  # "auto" without pandas
        with pytest.raises(ImportError):
            dptrain.train(x, y, model="mlp:20-8-3:relu", epochs=1, threads=1, verbose=False, history="pandas")
    else:
        r = dptrain.train(x, y, model="mlp:20-8-3:relu", epochs=1, threads=1, verbose=False)
        assert list(r.history["epoch"]) == [1]


def test_training_releases_the_gil():
    import time
    x, y = blobs(n=4000, d=64)
    count = [0]
    stop = threading.Event()

    def spin():  # wakes up every millisecond; each wake-up needs the GIL
        while not stop.is_set():
            time.sleep(0.001)
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        # train until at least 0.3 s have passed, whatever the machine's speed, so that the
        # count below measures something (a held GIL would keep it near zero throughout)
        t0 = time.perf_counter()
        wall = 0.0
        while wall < 0.3:
            dptrain.train(x, y, model="mlp:64-256-256-3:relu", epochs=3, batch_size=64, threads=1, verbose=False)
            wall = time.perf_counter() - t0
    finally:
        stop.set()
        t.join()
    # with the GIL held by the C call, the thread could not wake up during the run; released,
    # it wakes about every millisecond (a loaded machine: at least every 10 ms)
    assert count[0] > 100 * wall, (count[0], wall)


def test_progress_bar_on_a_terminal(capsys):
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True
    if not HAVE_CALLBACKS:
        pytest.skip("libdptrain without trainer callbacks")
    import sys
    old = sys.stderr
    sys.stderr = tty = Tty()
    try:
        x, y = blobs(n=300)
        dptrain.train(x, y, model="mlp:20-8-3:relu", epochs=2, batch_size=30, threads=1)
    finally:
        sys.stderr = old
    out = tty.getvalue()
    assert "\r" in out and "epoch 2/2 |" in out and "epoch 2  step 20" in out
    # not a terminal: epoch lines only, no bar
    x, y = blobs(n=300)
    dptrain.train(x, y, model="mlp:20-8-3:relu", epochs=2, batch_size=30, threads=1)
    err = capsys.readouterr().err
    assert "\r" not in err and "|" not in err and "epoch 1  step 10" in err


@needs_inference
def test_run_directory_and_resume(workdir):
    x, y = blobs(n=300)
    kw = dict(model="mlp:20-8-3:relu", algorithm=dptrain.DPSGD(sigma=1.0, delta=1e-3), batch_size=30, threads=1,
              verbose=False, out_dir=workdir)
    a = dptrain.train(x, y, epochs=1, **kw)
    b = dptrain.train(x, y, epochs=2, resume=True, **kw)
    assert b.steps == 2 * a.steps and b.ledger.steps == b.steps
    led = dptrain.read_ledger(workdir)
    assert led.to_json() == b.ledger.to_json()
    m = dptrain.Model.load(os.path.join(workdir, "checkpoint.safetensors"))
    assert m.steps == b.steps and m.epsilon(1e-3) == b.epsilon
    # a loaded model knows the run's delta, as run.model does
    assert m.delta == 1e-3 and m.epsilon() == b.epsilon
    # what the epsilon assumes travels with the loaded model, as with the Run (default seed: "os")
    assert m.seed_source == b.seed_source == "os" and m.epsilon_excludes is None
    lines = [json.loads(s) for s in open(os.path.join(workdir, "metrics.jsonl"))]
    assert [ln["epoch"] for ln in lines] == [1, 2]


@needs_inference
def test_loaded_model_says_what_its_epsilon_excludes(workdir):
    # Model.epsilon() is a bare number: the loaded model carries the ledger's qualifications
    x, y = blobs(n=300)
    run = dptrain.train(x, y, model="mlp:20-8-3:relu",
                        algorithm=dptrain.DPULR(sigma0=1.0, copies=4, ulr_noise="controller"), epochs=1,
                        batch_size=50, threads=1, verbose=False, seed=1, out_dir=workdir)
    m = dptrain.Model.load(workdir)
    assert m.epsilon() == run.epsilon
    assert m.epsilon_excludes == run.epsilon_excludes and "--ulr-noise controller" in m.epsilon_excludes
    assert m.seed_source == "caller"
