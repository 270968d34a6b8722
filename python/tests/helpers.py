"""Small data for the tests: Fashion-MNIST subsets (the Debian package dataset-fashion-mnist,
which the CLI also reads), synthetic blobs, and the smoke run of an experiment script."""
import os
import subprocess
import sys

import numpy as np
import pytest

import dptrain

FASHION = "/usr/share/datasets/fashion-mnist"
_cache = {}


def fashion(n_train=1000, n_test=200):
    if not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")):
        pytest.skip("Fashion-MNIST not installed in %s (scripts/setup.sh installs dataset-fashion-mnist)" % FASHION)
    if "f" not in _cache:
        x, y = dptrain.load_idx(FASHION + "/train-images-idx3-ubyte.gz", FASHION + "/train-labels-idx1-ubyte.gz")
        xt, yt = dptrain.load_idx(FASHION + "/t10k-images-idx3-ubyte.gz", FASHION + "/t10k-labels-idx1-ubyte.gz")
        _cache["f"] = (x, y, xt, yt)
    x, y, xt, yt = _cache["f"]
    return x[:n_train], y[:n_train], xt[:n_test], yt[:n_test]


def blobs(n=600, d=20, k=3, seed=0):
    """k Gaussian clusters in d dimensions: easy to learn, so accuracy tests are meaningful."""
    centers = np.random.default_rng(12345).normal(size=(k, d)) * 3  # the same clusters for every seed
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, size=n)
    x = (centers[y] + rng.normal(size=(n, d))).astype(np.float32)
    return x, y


def run_experiment_smoke(name, out):
    """Runs experiments/NAME/run.py --smoke --out OUT with this tree's dptrain package on
    PYTHONPATH (conftest.py put it on sys.path of this process only); fails the test, with the
    script's output, unless it exits 0."""
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, "..", "..", "experiments", name, "run.py")
    pypath = os.pathsep.join(p for p in (os.path.join(here, ".."), os.environ.get("PYTHONPATH")) if p)
    p = subprocess.run([sys.executable, script, "--smoke", "--out", str(out)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=pypath), timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    return p
