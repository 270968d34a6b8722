"""experiments/finetune_freeze/run.py in its smoke configuration (seconds): it runs, writes a
row per variant with the ledger's epsilon at the target (never above it) and the trained
parameter count of the frozen layers, a summary row per variant, and a plot when gnuplot is
installed."""
import csv
import os
import pathlib
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "experiments", "finetune_freeze", "run.py")


def test_smoke(workdir):
    out = pathlib.Path(workdir) / "out"
    # the script imports dptrain: this tree's package (conftest.py put it on sys.path only here)
    pypath = os.pathsep.join(p for p in (os.path.join(HERE, ".."), os.environ.get("PYTHONPATH")) if p)
    p = subprocess.run([sys.executable, SCRIPT, "--smoke", "--out", str(out)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=pypath), timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [r["variant"] for r in rows] == ["random", "public", "fc1"]
    for r in rows:
        assert 1.99 < float(r["epsilon"]) <= 2.0  # calibrated to the target, the ledger's value
        assert 0 < float(r["final_accuracy"]) <= 100
    # mlp:20-16-8-3: fc1 has 16 x 20 + 16 = 336 of the 499 parameters
    assert [int(r["trained_params"]) for r in rows] == [499, 499, 163]
    summary = list(csv.DictReader(open(out / "summary.csv")))
    assert [s["variant"] for s in summary] == ["random", "public", "fc1"]
    if shutil.which("gnuplot"):
        assert (out / "accuracy.png").stat().st_size > 0
