#!/usr/bin/env bash
# Smoke configuration of experiments/dpsgd_mnist: the script runs end to end with the
# built binary, every row reaches its target epsilon (the default accountant's: the smaller
# of the PLD and RDP columns, within calibration tolerance)
# and the plot is written.
set -u
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export DPTRAIN_SECRETS_DIR="$T/secrets"  # the runs' secret files: under $T, not in the home directory
if ! bash "$HERE/../../experiments/dpsgd_mnist/run.sh" --smoke --bin "$BIN" --out "$T" > "$T/log" 2>&1; then
  echo "FAIL: run.sh --smoke failed:"; cat "$T/log"; exit 1
fi
python3 - "$T/results.csv" <<'PY' || exit 1
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2, rows
for r in rows:
    t, e = float(r["target_epsilon"]), min(float(r["epsilon_rdp"]), float(r["epsilon_pld"]))
    assert 0.97 * t <= e <= t * 1.0001, (t, e)
    assert 0 <= float(r["test_accuracy"]) <= 100
print("ok:", [(r["target_epsilon"], r["test_accuracy"]) for r in rows])
PY
command -v gnuplot >/dev/null || { echo "gnuplot missing: plot not checked"; exit 0; }
[ -s "$T/accuracy_vs_epsilon.png" ] || { echo "FAIL: no plot"; exit 1; }
echo "experiment smoke ok"
