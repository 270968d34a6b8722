#!/usr/bin/env bash
# experiments/tramer_boneh/run.sh --smoke end to end: one preset run (ScatterNet + linear on a
# Fashion-MNIST subset) through --preset, a runs.csv row whose epsilon is the default
# accountant's and at most the target, the summary with the issue's columns, and the plot.
set -u
BIN=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export DPTRAIN_SECRETS_DIR="$T/secrets"  # the runs' secret files: under $T, not in the home directory
if ! DPTRAIN=$BIN THREADS=1 bash "$SRC/experiments/tramer_boneh/run.sh" --smoke "$T/out" > "$T/log" 2>&1; then
  cat "$T/log"; echo "FAIL: run.sh --smoke"; exit 1
fi
python3 - "$T/out" <<'PY' || exit 1
import csv, os, sys
out = sys.argv[1]
runs = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
assert len(runs) == 1, runs
r = runs[0]
assert r["preset"] == "tb-scatter-linear-fmnist" and r["model"] == "cnn:1x28x28:scatter,gn27,fc10", r
assert r["accountant"] == "pld" and float(r["epsilon"]) <= 3.0 and float(r["epsilon_rdp"]) > float(r["epsilon"]), r
assert 10.0 < float(r["test_accuracy"]) <= 100.0 and int(r["steps"]) > 0, r
s = list(csv.DictReader(open(os.path.join(out, "summary.csv"))))
assert len(s) == 1, s
for k in ("dataset", "model", "epsilon", "delta", "seeds", "test_accuracy_mean", "test_accuracy_std", "seconds_per_run"):
    assert k in s[0], (k, s[0])
assert s[0]["seeds"] == "1" and s[0]["paper_accuracy"] == "89.7", s
print("ok:", r["test_accuracy"], r["epsilon"])
PY
command -v gnuplot >/dev/null || { echo "gnuplot missing: plot not checked"; exit 0; }
[ -s "$T/out/accuracy.png" ] || { echo "FAIL: no plot"; exit 1; }
echo "experiment smoke ok"
