"""Ctrl-C during training: SIGINT sent to a Python process that trains with a run
directory. The trainer stops after the current step with the checkpoint and the ledger
saved (they agree on the number of steps), then KeyboardInterrupt ends the process
(on_interrupt="raise") or the partial run is returned (on_interrupt="return")."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import dptrain
from dptrain._lib import HAVE_CALLBACKS, HAVE_INFERENCE

pytestmark = pytest.mark.skipif(not (HAVE_CALLBACKS and HAVE_INFERENCE),
                                reason="libdptrain without trainer callbacks or checkpoint inference")

SCRIPT = r"""
import sys
import numpy as np
import dptrain
rng = np.random.default_rng(0)
x = rng.normal(size=(2000, 32)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int64)
def on_epoch(r):
    print("EPOCH", r["epoch"], flush=True)
run = dptrain.train(x, y, model="mlp:32-64-2:relu", algorithm=dptrain.DPSGD(sigma=1.0, delta=1e-4), epochs=100000,
                    batch_size=20, threads=1, out_dir=sys.argv[1], on_epoch=on_epoch, verbose=False,
                    on_interrupt=sys.argv[2])
print("RETURNED", run.stop_reason, run.steps, run.ledger.steps, flush=True)
"""


def interrupted_run(workdir, mode):
    out = os.path.join(workdir, "run")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(dptrain.__file__))] +
                                                      sys.path))
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, out, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        line = p.stdout.readline()  # the first epoch is saved and published
        assert line.startswith("EPOCH"), (line, p.stderr.read() if p.poll() is not None else "")
        time.sleep(0.2)             # inside a later epoch
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return out, p.returncode, stdout, stderr


def check_saved(out):
    ledger = dptrain.read_ledger(out)
    model = dptrain.Model.load(out)
    lines = [json.loads(s) for s in open(os.path.join(out, "metrics.jsonl"))]
    # the ledger holds exactly the steps the saved parameters reflect; the last metrics
    # line is the partial epoch the stop published
    assert ledger.steps == model.steps == lines[-1]["step"] > 0
    assert model.steps < 100000 * 100
    return model.steps


def test_sigint_raises_after_saving(workdir):
    out, rc, stdout, stderr = interrupted_run(workdir, "raise")
    assert rc != 0 and "KeyboardInterrupt" in stderr and "checkpoint and ledger saved" in stderr, (rc, stderr)
    assert "RETURNED" not in stdout
    check_saved(out)


def test_sigint_returns_the_partial_run(workdir):
    out, rc, stdout, stderr = interrupted_run(workdir, "return")
    assert rc == 0, stderr
    last = stdout.strip().splitlines()[-1].split()
    assert last[:2] == ["RETURNED", "interrupted"] and last[2] == last[3]
    assert int(last[2]) == check_saved(out)
