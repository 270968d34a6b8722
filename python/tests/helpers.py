"""Small data for the tests: Fashion-MNIST subsets (the Debian package dataset-fashion-mnist,
which the CLI also reads) and synthetic blobs."""
import os

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
