"""A dptrain.Model shared by threads (issue 38, item 15). The C model holds one set of
scratch buffers (the activations of a batch); predict and evaluate run with the GIL
released, so two threads at once overwrote each other's activations: rows off by up to
4.2, evaluate returning a different answer on each call, without an error. The Model now
serializes its calls: every thread must get exactly the single-threaded results."""
import threading

import numpy as np

import dptrain

SPEC = "mlp:32-256-256-5:relu"


def shared_model():
    m = dptrain.Model.from_spec(SPEC, threads=1)
    rng = np.random.default_rng(3)
    m.set_parameters({k: rng.normal(0, 0.3, v.shape).astype(np.float32) for k, v in m.parameters().items()})
    return m


def run_threads(fn, n_threads):
    errors, barrier = [], threading.Barrier(n_threads)

    def body(t):
        try:
            barrier.wait()
            fn(t)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    ts = [threading.Thread(target=body, args=(t,)) for t in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_predict_and_evaluate_shared_by_threads():
    m = shared_model()
    rng = np.random.default_rng(7)
    xs = [rng.normal(size=(300, 32)).astype(np.float32) for _ in range(4)]
    ys = [rng.integers(0, 5, size=300) for _ in range(4)]
    want_p = [m.predict(x) for x in xs]
    want_e = [m.evaluate(x, y) for x, y in zip(xs, ys)]
    bad = []

    def work(t):
        for it in range(40):
            p = m.predict(xs[t])
            if not np.array_equal(p, want_p[t]):
                rows = int((np.abs(p - want_p[t]) > 0).any(axis=1).sum())
                bad.append("thread %d predict %d: %d rows differ (max %g)"
                           % (t, it, rows, float(np.abs(p - want_p[t]).max())))
            e = m.evaluate(xs[t], ys[t])
            if e != want_e[t]:
                bad.append("thread %d evaluate %d: %r, alone %r" % (t, it, e, want_e[t]))
    run_threads(work, 4)
    assert not bad, "%d wrong results, e.g. %s" % (len(bad), bad[:3])


def test_set_parameters_is_not_seen_half_done():
    """A predict concurrent with set_parameters sees the old or the new parameters, never a
    mix of both."""
    m = shared_model()
    old = m.parameters()
    new = {k: -v for k, v in old.items()}
    x = np.random.default_rng(1).normal(size=(64, 32)).astype(np.float32)
    p_old = m.predict(x)
    m.set_parameters(new)
    p_new = m.predict(x)
    m.set_parameters(old)
    bad = []

    def work(t):
        for it in range(60):
            if t == 0:
                m.set_parameters(new if it % 2 == 0 else old)
            else:
                p = m.predict(x)
                if not (np.array_equal(p, p_old) or np.array_equal(p, p_new)):
                    bad.append(it)
    run_threads(work, 3)
    assert not bad, "%d predictions mixed old and new parameters" % len(bad)
