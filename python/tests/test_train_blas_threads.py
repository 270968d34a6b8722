"""dptrain.train runs the trainer on a worker thread; OpenBLAS (its OpenMP build) reads its
thread count from the OpenMP state of the thread that calls it, which the trainer used to set
only on the thread that created it (Python's main thread). The worker kept the default (all
cores), and at threads=1 a DP-SGD step of mlp:784-128-64-32-10 took 114 ms instead of 13 ms
on a 2-core machine (bench/opacus_compare.py found it). The on_epoch callback runs on the
training thread, so it can read that thread's OpenMP thread count."""
import ctypes
import ctypes.util
import threading

import numpy as np
import pytest

import dptrain


def _omp():
    name = ctypes.util.find_library("gomp")
    if not name:
        pytest.skip("libgomp not found (the library is built without OpenMP here)")
    lib = ctypes.CDLL(name)
    lib.omp_get_max_threads.restype = ctypes.c_int
    return lib


def _fresh_thread_default(omp):
    out = []
    t = threading.Thread(target=lambda: out.append(omp.omp_get_max_threads()))
    t.start()
    t.join()
    return out[0]


@pytest.mark.parametrize("algorithm", ["sgd", "dpsgd"])
def test_training_thread_uses_the_requested_blas_threads(algorithm):
    omp = _omp()
    if _fresh_thread_default(omp) == 1:
        pytest.skip("a new thread's OpenMP default is already 1 (OMP_NUM_THREADS=1 or one core): cannot tell")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 16)).astype(np.float32)
    y = rng.integers(0, 3, 256)
    seen = []

    def on_epoch(_):
        seen.append((threading.current_thread() is not threading.main_thread(), omp.omp_get_max_threads()))
    algo = dptrain.DPSGD(sigma=1.0) if algorithm == "dpsgd" else algorithm
    dptrain.train(x, y, model="mlp:16-8-3:relu", algorithm=algo, epochs=2, batch_size=64, threads=1, seed=1,
                  verbose=False, progress=False, on_epoch=on_epoch)
    assert seen and all(worker for worker, _ in seen), "on_epoch did not run on the training thread: %r" % seen
    assert [n for _, n in seen] == [1] * len(seen), "OpenMP threads on the training thread: %r, want 1" % seen
