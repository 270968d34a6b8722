"""experiments/dp_regression/run.py in its smoke configuration (seconds): it runs, writes a
row per method with the ledger's epsilon at the target (never above it), the least-squares
optimum on the linear task at about the noise floor, and a plot when gnuplot is installed."""
import csv
import pathlib
import shutil

from helpers import run_experiment_smoke


def test_smoke(workdir):
    out = pathlib.Path(workdir) / "out"
    run_experiment_smoke("dp_regression", out)
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [(r["task"], r["method"]) for r in rows] == [("linear", "least-squares"), ("linear", "sgd"),
                                                        ("linear", "dpsgd"), ("nonlinear", "sgd"),
                                                        ("nonlinear", "dpsgd")]
    for r in rows:
        if r["method"] == "dpsgd":
            assert 0.99 < float(r["epsilon"]) <= 1.0  # calibrated to the target, the ledger's value
        assert float(r["final_mse"]) > 0
    assert 0.008 < float(rows[0]["final_mse"]) < 0.012  # least squares: the noise floor 0.01
    summary = list(csv.DictReader(open(out / "summary.csv")))
    assert len(summary) == 5
    if shutil.which("gnuplot"):
        assert (out / "mse.png").stat().st_size > 0
