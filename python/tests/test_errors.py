"""Bad input gives a Python exception with a clear message (the library's where it checks),
never a crash: dtypes, layouts, shapes, NaN, labels, options."""
import os

import numpy as np
import pytest

import dptrain
from dptrain._lib import HAVE_INFERENCE

from helpers import blobs

MODEL = "mlp:20-8-3:relu"


def fit(x, y, **kw):
    kw.setdefault("model", MODEL)
    kw.setdefault("epochs", 1)
    kw.setdefault("batch_size", 50)
    kw.setdefault("threads", 1)
    kw.setdefault("verbose", False)
    kw.setdefault("seed", 1)  # the runs compared must share their streams
    return dptrain.train(x, y, **kw)


def test_dtypes_are_converted_or_refused_clearly():
    x, y = blobs(n=200)
    ref = fit(x, y).model.parameters()["fc1.weight"]
    # float64 features and int64 labels are converted: the same run
    assert np.array_equal(fit(x.astype(np.float64), y.astype(np.int64)).model.parameters()["fc1.weight"], ref)
    # integral float labels are labels; bool features are numbers
    assert np.array_equal(fit(x, y.astype(np.float64)).model.parameters()["fc1.weight"], ref)
    fit((x > 0), y)
    with pytest.raises(TypeError, match="x: expected real numbers.*complex"):
        fit(x.astype(np.complex64), y)
    with pytest.raises(TypeError, match="x: expected real numbers"):
        fit(x.astype(object), y)
    with pytest.raises(TypeError, match="y: expected integer class labels"):
        fit(x, y.astype(str))
    with pytest.raises(ValueError, match=r"y\[3\] = 0.5 is not an integer class label"):
        yy = y.astype(np.float64)
        yy[3] = 0.5
        fit(x, yy)
    with pytest.raises(TypeError, match="x must be a numpy array"):
        fit(object(), y)


def test_non_contiguous_arrays_are_copied():
    x, y = blobs(n=200, d=40)
    xs = x[:, ::2]          # strided view
    assert not xs.flags["C_CONTIGUOUS"]
    a = fit(xs, y).model.parameters()["fc1.weight"]
    b = fit(np.ascontiguousarray(xs), y).model.parameters()["fc1.weight"]
    assert np.array_equal(a, b)
    xf = np.asfortranarray(x[:, :20])
    assert np.array_equal(fit(xf, y).model.parameters()["fc1.weight"], b * 0 + fit(x[:, :20].copy(), y).model
                          .parameters()["fc1.weight"])
    yr = np.repeat(y, 2)[::2]  # strided labels
    assert np.array_equal(fit(xs, yr).model.parameters()["fc1.weight"], a)


def test_nan_and_inf_are_refused_naming_the_element():
    x, y = blobs(n=200)
    x[17, 4] = np.nan
    with pytest.raises(ValueError, match=r"x\[344\].*example 17, feature 4"):
        fit(x, y)
    x[17, 4] = np.inf
    with pytest.raises(ValueError, match="example 17"):
        fit(x, y)
    # finite in float64 but not in float32: the range is the problem, said so
    x64 = blobs(n=200)[0].astype(np.float64)
    x64[5, 2] = 1e300
    with pytest.raises(ValueError, match=r"x\[102\] \(example 5, feature 2\) = 1e\+300 is outside the float32 range"):
        fit(x64, y)
    x, y = blobs(n=200)
    xt = x[:50].copy()
    xt[3, 0] = -np.inf
    with pytest.raises(ValueError, match="example 3"):
        fit(x, y, x_test=xt, y_test=y[:50])
    with pytest.raises(ValueError, match="example 3|x\\[60\\]|finite"):
        fit(x, y).model.predict(xt)


def test_wrong_shapes():
    x, y = blobs(n=200)
    with pytest.raises(ValueError, match=r"x must have shape \[n, features\]"):
        fit(x[:, 0], y)
    with pytest.raises(ValueError, match="y has 199 labels for 200 examples"):
        fit(x, y[:-1])
    with pytest.raises(ValueError, match="not one-hot"):
        fit(x, np.eye(3)[y])
    with pytest.raises(ValueError, match="x_test has 10 features per example, the model takes 20"):
        fit(x, y, x_test=x[:, :10], y_test=y)
    with pytest.raises(ValueError, match="x_test and y_test"):
        fit(x, y, x_test=x)
    with pytest.raises(ValueError, match="x has no examples"):
        fit(x[:0], y[:0])
    # the model's input size differs from the data's: the library says so
    with pytest.raises(ValueError, match="784|20"):
        fit(x, y, model="mlp:784-10:relu")
    m = fit(x, y).model
    with pytest.raises(ValueError, match="x has 19 features per example, the model takes 20"):
        m.predict(x[:, :19])
    with pytest.raises(ValueError, match="input_shape"):
        fit(x, y, input_shape=(3, 3, 3))
    # a 5-D x without input_shape: said what is expected, not an input_shape the caller never gave
    with pytest.raises(ValueError, match=r"x has shape \(200, 1, 1, 4, 5\): expected \[n, features\], "
                       r"\[n, H, W\] or \[n, C, H, W\]"):
        fit(x.reshape(200, 1, 1, 4, 5), y)


def test_labels_out_of_range():
    x, y = blobs(n=200)
    y = y.copy()
    y[42] = 7
    with pytest.raises(ValueError, match=r"y\[42\] = 7 is outside \[0, 3\)"):
        fit(x, y, n_classes=3)
    y[42] = -1
    with pytest.raises(ValueError, match=r"y\[42\] = -1: class labels must be >= 0"):
        fit(x, y)
    y[42] = 2 ** 40
    with pytest.raises(ValueError, match="does not fit in int32"):
        fit(x, y)
    x2, y2 = blobs(n=200)
    with pytest.raises(ValueError, match=r"y_test\[0\] = 5 is outside \[0, 3\): the number of classes comes "
                       r"from the training labels y \(largest 2\); pass n_classes="):
        fit(x2, y2, x_test=x2[:10], y_test=np.full(10, 5))
    # with n_classes given, the library checks the test labels against it
    with pytest.raises(ValueError, match=r"x_test, y_test.*y\[0\] = 5 is outside \[0, 4\)"):
        fit(x2, y2, x_test=x2[:10], y_test=np.full(10, 5), n_classes=4, model="mlp:20-8-4:relu")


def test_channels_last_images_warn():
    x, y = blobs(n=200, d=192)
    with pytest.warns(UserWarning, match=r"channels last \(\[n, H, W, C\]\) need x.transpose\(0, 3, 1, 2\)"):
        fit(x.reshape(200, 8, 8, 3), y, model="cnn:8x8x3:conv4k3p1,relu,fc3")


def test_checked_before_training(workdir):
    x, y = blobs(n=200)
    # a label 2 for a one-output bce model: refused up front, naming the classes (it failed at
    # the first batch holding it, naming its position in the batch)
    with pytest.raises(ValueError, match="loss bce: .* with 1 output takes labels 0..1, but the training set has 3"):
        fit(x, y, model="mlp:20-4-1:relu", loss="bce")
    try:
        import pandas  # noqa: F401
    except ImportError:
        # history="pandas" without pandas: said before training, not after it (the run was lost)
        with pytest.raises(ImportError, match="history='pandas' needs pandas"):
            fit(x, y, history="pandas", out_dir=workdir + "/hp")
        assert not os.path.exists(workdir + "/hp")
    # every exception class is importable from the package
    for name in ("DptrainFileNotFoundError", "DptrainMemoryError", "DptrainIOError", "BusyError"):
        assert issubclass(getattr(dptrain, name), dptrain.DptrainError)


def test_options_are_checked_like_the_cli():
    x, y = blobs(n=200)
    with pytest.raises(ValueError, match="unknown algorithm 'dpsdg'"):
        fit(x, y, algorithm="dpsdg")
    # an option of another algorithm as a flat keyword (sigma, z_steps, pca_dims below) is no
    # deprecated spelling, it is refused (no DeprecationWarning): the refusals stay tested here
    with pytest.raises(ValueError, match="sigma: algorithm 'sgd' is not a differentially private algorithm"):
        fit(x, y, sigma=1.0)
    with pytest.raises(ValueError, match="needs sigma= or target_epsilon="):
        fit(x, y, algorithm="dpsgd")
    with pytest.raises(ValueError, match="z_steps is an option of algorithm dpmac / mac, not of dpsgd"):
        fit(x, y, algorithm="dpsgd", sigma=1.0, z_steps=3)
    with pytest.raises(ValueError, match="sampler='poisson'"):
        fit(x, y, algorithm=dptrain.DPSGD(sigma=1.0), sampler="shuffle")
    with pytest.raises(ValueError, match="delta 0.01 >= 1/N"):
        fit(x, y, algorithm=dptrain.DPSGD(sigma=1.0, delta=1e-2))
    fit(x, y, algorithm=dptrain.DPSGD(sigma=1.0, delta=1e-2, force=True))
    with pytest.raises(ValueError, match="clip"):
        fit(x, y, algorithm=dptrain.DPSGD(sigma=1.0, clip=0))
    with pytest.raises(ValueError, match="lr"):
        fit(x, y, lr=-1.0)
    with pytest.raises(ValueError, match="lr_schedule"):
        fit(x, y, lr_schedule="cosine")
    with pytest.raises(TypeError, match="unexpected keyword argument.*learning_rate"):
        fit(x, y, learning_rate=0.1)
    with pytest.raises(ValueError, match="model spec"):
        fit(x, y, model="mlp:20-x-3")
    with pytest.raises(TypeError, match="model must be"):
        fit(x, y, model=42)
    with pytest.raises(ValueError, match="needs sigma0"):
        fit(x, y, algorithm="dpulr")
    with pytest.raises(ValueError, match="langevin_sigma"):
        fit(x, y, algorithm="noisy-gd")
    with pytest.raises(ValueError, match="eta"):
        fit(x, y, algorithm=dptrain.NoisyGD(langevin_sigma=0.1), lr=0.1)

    def dpmac(**options):
        return dptrain.DPMAC(sigma=1.0, delta=1e-3, **options)
    small = "mlp:5-4-3:relu"
    with pytest.raises(ValueError, match="pca_dims 5 needs pca_sigma"):
        fit(x, y, model=small, algorithm=dpmac(pca_dims=5))
    with pytest.raises(ValueError, match="needs both center_clip"):
        fit(x, y, model=small, algorithm=dpmac(pca_dims=5, pca_sigma=4.0, center_sigma=1.0))
    with pytest.raises(ValueError, match="pca_dims 30: the data have only 20 features"):
        fit(x, y, model=small, algorithm=dpmac(pca_dims=30, pca_sigma=4.0))
    with pytest.raises(ValueError, match="pca_dims is an option of algorithm dpmac"):
        fit(x, y, algorithm="dpsgd", sigma=1.0, pca_dims=5)
    run = fit(x, y, model=small, algorithm=dpmac(pca_dims=5, pca_sigma=4.0))  # the model takes the 5 projected features
    assert run.model.input_dim == 5 and run.ledger.events[0]["label"] == "dp-pca"
    run = fit(x, y, model=small, algorithm=dpmac(pca_dims=5, pca_sigma=4.0, center_clip=10.0, center_sigma=1.0),
              x_test=x[:50], y_test=y[:50])
    # new data goes through the same released centring and projection as training
    assert run.model.evaluate(run.preprocess(x[:50]), y[:50])[1] == run.last["test_accuracy"]
    with pytest.raises(ValueError, match="x_test has 5 features per example, the model takes 20"):
        fit(x, y, model=small, algorithm=dpmac(pca_dims=5, pca_sigma=4.0), x_test=x[:50, :5], y_test=y[:50])


def test_calibration_out_of_reach_is_an_error():
    x, y = blobs(n=200)
    with pytest.raises(ValueError, match="target_epsilon"):
        fit(x, y, algorithm=dptrain.DPSGD(target_epsilon=1e-9, delta=1e-5), epochs=50, batch_size=200)  # q = 1


def test_budget_refusal_is_a_privacy_error():
    x, y = blobs(n=200)
    # the very first step would exceed the budget: nothing is trained
    with pytest.raises(dptrain.PrivacyError, match="budget"):
        fit(x, y, algorithm=dptrain.DPSGD(sigma=0.3, target_epsilon=0.01, delta=1e-3))


def test_status_mapping():
    from dptrain.errors import error_for
    assert isinstance(error_for(-7, "would exceed", "privacy budget exceeded"), dptrain.PrivacyError)
    e = error_for(-3, "x.json: No such file or directory", "i/o error")
    assert isinstance(e, FileNotFoundError) and str(e) == "x.json: No such file or directory"
    assert isinstance(error_for(-4, "bad magic", "format"), ValueError)
    assert isinstance(error_for(-2, "too big", "oom"), MemoryError)


@pytest.mark.skipif(not HAVE_INFERENCE, reason="libdptrain without dptrain/inference.h")
def test_bad_checkpoint_files(workdir):
    # both the built-in class and the package's base class catch it
    with pytest.raises(FileNotFoundError, match="nope.safetensors: no such checkpoint") as e:
        dptrain.Model.load(workdir + "/nope.safetensors")
    assert isinstance(e.value, dptrain.DptrainError)
    p = workdir + "/bad.safetensors"
    with open(p, "wb") as f:
        f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(ValueError, match="bad.safetensors"):
        dptrain.Model.load(p)
    with open(p, "wb") as f:
        f.write(b"\x01")
    with pytest.raises((ValueError, OSError), match="bad.safetensors"):
        dptrain.Model.load(p)


def test_set_parameters_checks():
    x, y = blobs(n=200)
    m = fit(x, y).model
    with pytest.raises(KeyError, match="fc9.weight"):
        m.set_parameters({"fc9.weight": np.zeros((8, 20))})
    with pytest.raises(ValueError, match="shape"):
        m.set_parameters({"fc1.weight": np.zeros((20, 8))})
    with pytest.raises(ValueError, match="NaN"):
        m.set_parameters({"fc1.bias": np.full(8, np.nan)})
    m.set_parameters({"fc1.bias": np.ones(8)})
    assert np.all(m.parameters()["fc1.bias"] == 1)


def test_run_directory_refusals_carry_the_message(workdir):
    # the refusal comes from dpt_trainer_run on the training thread: its message (kept per
    # thread by the library) must still reach the exception
    x, y = blobs(n=200)
    fit(x, y, out_dir=workdir)
    with pytest.raises(ValueError, match="is not empty.*overwrite"):
        fit(x, y, out_dir=workdir)
    assert fit(x, y, out_dir=workdir, overwrite=True).steps == 4
    # a run directory in use by another trainer
    caught = []

    def on_epoch(r):
        try:
            fit(x, y, out_dir=workdir, overwrite=True)
        except Exception as e:
            caught.append(e)
        return True

    fit(x, y, out_dir=workdir, overwrite=True, epochs=3, on_epoch=on_epoch)
    assert len(caught) == 1 and isinstance(caught[0], dptrain.BusyError), caught
    assert workdir in str(caught[0]) and isinstance(caught[0], OSError)


def test_torch_dataset_is_refused_in_one_line():
    torch = pytest.importorskip("torch")
    x, y = blobs(n=50)
    ds = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    with pytest.raises(TypeError, match="x is a torch Dataset \\(TensorDataset\\): dptrain.train takes arrays"):
        fit(ds, y)
