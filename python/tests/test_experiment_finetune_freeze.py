"""experiments/finetune_freeze/run.py in its smoke configuration (seconds): it runs, writes a
row per variant with the ledger's epsilon at the target (never above it) and the trained
parameter count of the frozen layers, a summary row per variant, and a plot when gnuplot is
installed."""
import csv
import pathlib
import shutil

from helpers import run_experiment_smoke


def test_smoke(workdir):
    out = pathlib.Path(workdir) / "out"
    run_experiment_smoke("finetune_freeze", out)
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
