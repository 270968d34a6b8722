"""DPSGD(feature_norm_sigma, feature_norm_clip): the fbn layer set from DP channel statistics
(dpt_trainer_feature_norm). The two releases are in the run's ledger, the calibration
includes them (a larger sigma than without, epsilon still at the target), the model holds
the statistics, and misuse is refused by name."""
import numpy as np
import pytest

import dptrain


def _data(n=400, seed=0):
    r = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = (r.normal(size=(n, 4, 2, 2)) * 2.0 + 3.0 + y[:, None, None, None]).astype(np.float32)
    return x.reshape(n, -1), y


def _run(**algo):
    x, y = _data()
    return dptrain.train(x, y, model="cnn:4x2x2:fbn,fc2", input_shape=(4, 2, 2), freeze="fbn1",
                         algorithm=dptrain.DPSGD(target_epsilon=3.0, clip=1.0, **algo), epochs=2, batch_size=40,
                         optimizer="sgd", lr=0.1, seed=5, verbose=False)


def test_ledger_and_calibration():
    run = _run(feature_norm_sigma=8.0, feature_norm_clip=(12.0, 100.0))
    labels = [e.get("label") for e in run.ledger.events]
    assert labels.count("dp-feature-norm-mean") == 1 and labels.count("dp-feature-norm-sq") == 1, labels
    assert run.ledger.epsilon(1e-5) <= 3.0 + 1e-9
    p = run.model.parameters()
    assert not np.allclose(p["fbn1.weight"], 1.0)  # set from the statistics, not the identity
    x, _ = _data()
    mu = x.reshape(-1, 4, 4).mean(axis=(0, 2))  # the features' channel means, nothing clipped here
    np.testing.assert_allclose(-p["fbn1.bias"] / p["fbn1.weight"], mu, atol=1.2)  # noise std 8 * 12 / 400 = 0.24
    base = dptrain.train(*_data(), model="cnn:4x2x2:fbn,fc2", input_shape=(4, 2, 2), freeze="fbn1",
                         algorithm=dptrain.DPSGD(target_epsilon=3.0, clip=1.0), epochs=2, batch_size=40,
                         optimizer="sgd", lr=0.1, seed=5, verbose=False)
    assert run.sigma > base.sigma * 1.01, (run.sigma, base.sigma)


def test_refusals():
    with pytest.raises(ValueError, match="feature_norm_clip"):
        _run(feature_norm_sigma=8.0)
    with pytest.raises(ValueError, match="feature_norm_clip: only with feature_norm_sigma"):
        _run(feature_norm_clip=1.0)
    # the two releases alone (epsilon ~0.63) exceed the target: refused before training
    with pytest.raises(dptrain.errors.OutOfRangeError, match="releases already in the ledger"):
        x, y = _data()
        dptrain.train(x, y, model="cnn:4x2x2:fbn,fc2", input_shape=(4, 2, 2), freeze="fbn1",
                      algorithm=dptrain.DPSGD(target_epsilon=0.5, clip=1.0, feature_norm_sigma=8.0,
                                              feature_norm_clip=1.0), epochs=1, batch_size=40, verbose=False)
