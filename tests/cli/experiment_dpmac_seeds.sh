#!/usr/bin/env bash
# The smoke configuration of experiments/dpmac/seeds.sh (the authors' presets, tiny sizes:
# a USPS autoencoder row and a second-order MNIST row, two seeds each): one CSV line per
# run with finite epsilons and metrics, summary.csv whose mean and sample std equal those
# recomputed here from results.csv, both plots; a second call adds nothing (runs are reused);
# summarize_seeds.py's row filter keeps only the rows it matches.
set -u
BIN=$1
NEED_DATASETS="mnist usps"
source "$(dirname "$0")/lib/experiment_shared.sh"
ROOT=$SRC DATA=$D
if ! DPTRAIN=$BIN DATA_DIR=$DATA bash "$ROOT/experiments/dpmac/seeds.sh" --smoke "$T/out" > "$T/log" 2>&1; then
  cat "$T/log"; echo "FAIL: seeds.sh --smoke failed"; exit 1
fi
python3 - "$T/out" <<'PY' || exit 1
import csv, math, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(out + "/results.csv")))
assert [(r["row"], r["seed"]) for r in rows] == [("smoke-usps", "1"), ("smoke-usps", "2"),
                                                   ("smoke-order2", "1"), ("smoke-order2", "2")], rows
for r in rows:
    assert math.isfinite(float(r["value"])) and 0 < float(r["eps_rdp"]) < 20, r
    assert float(r["eps_pld"]) <= float(r["eps_rdp"]) + 1e-9, r
summ = {s["row"]: s for s in csv.DictReader(open(out + "/summary.csv"))}
for name in ("smoke-usps", "smoke-order2"):
    v = [float(r["value"]) for r in rows if r["row"] == name]
    s = summ[name]
    assert abs(float(s["value_mean"]) - statistics.mean(v)) < 1e-4, (s, v)
    assert abs(float(s["value_std"]) - statistics.stdev(v)) < 1e-4, (s, v)
print("ok")
PY
for f in mnist.png usps.png; do
  [ -s "$T/out/$f" ] || { echo "FAIL: $f missing"; exit 1; }
done
# a row filter (full match) keeps only the rows it names: smoke-usps, not smoke-order2
mkdir -p "$T/filt"
python3 "$ROOT/experiments/dpmac/summarize_seeds.py" "$T/out/results.csv,$T/out/results.csv" "$T/filt" 'smoke-u.*' || exit 1
python3 - "$T/filt/summary.csv" <<'PY' || { echo "FAIL: the row filter of summarize_seeds.py"; exit 1; }
import csv, sys
s = list(csv.DictReader(open(sys.argv[1])))
assert [r["row"] for r in s] == ["smoke-usps"] and s[0]["seeds"] == "1 2 1 2", s
PY
grep -q "second order" "$T/out/runs/smoke-order2-s1.log" || { echo "FAIL: the order-2 row did not run second order"; exit 1; }
DPTRAIN=$BIN DATA_DIR=$DATA bash "$ROOT/experiments/dpmac/seeds.sh" --smoke "$T/out" > "$T/log2" 2>&1 || { cat "$T/log2"; exit 1; }
if grep -q "^== " "$T/log2"; then echo "FAIL: a second call reran finished runs"; cat "$T/log2"; exit 1; fi
[ "$(wc -l < "$T/out/results.csv")" = 5 ] || { echo "FAIL: a second call added CSV lines"; exit 1; }
echo "1 passed, 0 failed"
