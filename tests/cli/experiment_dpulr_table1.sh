#!/usr/bin/env bash
# The DP-ULR Table 1 / Figure 2 experiment in its smoke configuration: runs.csv has one row
# per (configuration, seed) with final and best accuracy and the ledger's epsilon, the
# summary has mean +- std over the two seeds, the Figure 2 grid is there, and the PNGs
# exist. Skips (77) without the shared MNIST.
set -u
BIN=$1
source "$(dirname "$0")/lib/experiment_shared.sh"
if ! DPTRAIN=$BIN DATA_DIR=$D THREADS=1 "$SRC/experiments/dpulr_table1/run.sh" --smoke "$T/out" > "$T/log" 2>&1; then
  cat "$T/log"; echo "FAIL: run.sh --smoke"; exit 1
fi
SRC=$SRC python3 - "$T/out" <<'PY' || exit 1
import csv, math, os, statistics, sys
out = sys.argv[1]
runs = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
assert len(runs) == 4, runs
for r in runs:
    assert 0 <= float(r["final_acc"]) <= float(r["best_acc"]) <= 100, r
    assert 1 <= int(r["best_epoch"]) <= int(r["epochs"]) == 2, r
    assert float(r["epsilon_balle"]) > 0 and float(r["epsilon_classic"]) > float(r["epsilon_balle"]), r
    assert r["command"].startswith("dptrain train ") and "--seed %s" % r["seed"] in r["command"], r
ulr = [r for r in runs if r["config"] == "dpulr_explicit"]
assert all(int(r["min_batch"]) >= 1 for r in ulr), ulr
# same q, sigma and steps: DP-ULR's rejection sampling costs more than DP-SGD's plain Poisson
# batches (docs/dpulr.md, "The accountant"), never less
assert float(ulr[0]["epsilon_balle"]) > float(runs[1]["epsilon_balle"]), runs
summ = {r["config"]: r for r in csv.DictReader(open(os.path.join(out, "summary.csv")))}
assert set(summ) == {"dpulr_explicit", "dpsgd"}, summ
for c, s in summ.items():
    accs = [float(r["final_acc"]) for r in runs if r["config"] == c]
    assert s["seeds"] == "2", s
    assert abs(float(s["final_mean"]) - statistics.mean(accs)) < 0.006, (s, accs)
    assert abs(float(s["final_std"]) - statistics.stdev(accs)) < 0.006, (s, accs)
fig = list(csv.DictReader(open(os.path.join(out, "figure2.csv"))))
assert len(fig) == 9 and all(float(f["ratio"]) >= 0 for f in fig), fig
# the ratio grows with N_B at fixed N and is tiny for a large N with N_B well below qN
big = [f for f in fig if f["N"] == "10000000"]
assert float(big[0]["ratio"]) < 1e-3 < float(big[-1]["ratio"]), big
for p in ("table1.png", "figure2.png"):
    assert os.path.getsize(os.path.join(out, p)) > 1000, p
# a grid finished out of order (two processes): the summary keeps the (configuration,
# model, batch) groups in the order first reached and sorts sigma0 within each
made = os.path.join(out, "made")
os.mkdir(made)
cols = list(runs[0])
with open(os.path.join(made, "runs.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=cols)
    w.writeheader()
    for cfg, b, s, acc in [("dpsgd", "500", "2", 80), ("dpsgd", "64", "8", 50), ("dpsgd", "500", "0.5", 90),
                           ("dpsgd", "500", "2", 82), ("dpsgd", "64", "1", 70), ("dpsgd", "500", "1", 85)]:
        r = dict(runs[0], config=cfg, batch=b, sigma0=s, final_acc=acc, best_acc=acc, epochs="25")
        w.writerow(r)
import subprocess
subprocess.run([sys.executable, os.path.join(os.environ["SRC"], "experiments/dpulr_table1/grid.py"),
                "summary", "--out", made], check=True, stderr=subprocess.DEVNULL)
got = [(r["batch"], r["sigma0"], r["seeds"], r["final_mean"])
       for r in csv.DictReader(open(os.path.join(made, "summary.csv")))]
assert got == [("500", "0.5", "1", "90.00"), ("500", "1", "1", "85.00"), ("500", "2", "2", "81.00"),
               ("64", "1", "1", "70.00"), ("64", "8", "1", "50.00")], got
print("experiment smoke ok")
PY
