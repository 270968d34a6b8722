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
python3 - "$T/out" <<'PY' || exit 1
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
# same q, sigma and steps: the same epsilon for DP-ULR (rejection term ~0) and DP-SGD
assert abs(float(ulr[0]["epsilon_balle"]) - float(runs[1]["epsilon_balle"])) < 1e-3, runs
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
print("experiment smoke ok")
PY
