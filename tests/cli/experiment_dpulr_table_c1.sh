#!/usr/bin/env bash
# experiments/dpulr_table_c1/run.sh --smoke: DP-ULR and DP-SGD on two MLP sizes (tiny MNIST
# subset, 1 epoch): one run per (configuration, model), the models are the named widths, the
# summary has the paper's Table C1 number beside each cell, and the plot exists; --summary-only
# rebuilds the same summary without running. Skips (77) without the shared MNIST.
set -u
BIN=$1
source "$(dirname "$0")/lib/experiment_shared.sh"
if ! DPTRAIN=$BIN DATA_DIR=$D "$SRC/experiments/dpulr_table_c1/run.sh" --smoke "$T/out" > "$T/log" 2>&1; then
  cat "$T/log"; echo "FAIL: run.sh --smoke"; exit 1
fi
VERSION_OUT=$("$BIN" --version) python3 - "$T/out" <<'PY' || exit 1
import csv, os, sys
out = sys.argv[1]
runs = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
assert sorted((r["config"], r["model"]) for r in runs) == [("dpsgd", "medium"), ("dpsgd", "small"),
                                                          ("dpulr_explicit", "medium"), ("dpulr_explicit", "small")], runs
for r in runs:
    width = {"small": "784-128-64-32-10", "medium": "784-288-144-72-10"}[r["model"]]
    assert "--model mlp:%s:gelu" % width in r["command"] and "--sigma" in r["command"], r
    assert float(r["epsilon_balle"]) > 0, r
summ = list(csv.DictReader(open(os.path.join(out, "summary.csv"))))
paper = {("dpulr_explicit", "small"): "74.24", ("dpulr_explicit", "medium"): "69.00",
         ("dpsgd", "small"): "70.53", ("dpsgd", "medium"): "67.98"}  # Table C1, batch 128
for s in summ:
    assert s["paper_valid_acc"] == paper[(s["config"], s["model"])], s
assert os.path.getsize(os.path.join(out, "table_c1.png")) > 1000
build = [l.split(": ", 1)[1] for l in os.environ["VERSION_OUT"].splitlines() if l.startswith("build: ")]
assert build and all(r["build"] == build[0] for r in runs), (build, [r["build"] for r in runs])
print("experiment smoke ok")
PY
# a runs.csv written before the build column existed keeps its columns when a run is added
mkdir "$T/old"
cut -d, -f1-18 "$T/out/runs.csv" | head -n 4 > "$T/old/runs.csv"   # header + 3 of the 4 runs
if ! DPTRAIN=$BIN DATA_DIR=$D "$SRC/experiments/dpulr_table_c1/run.sh" --smoke "$T/old" > "$T/log" 2>&1; then
  cat "$T/log"; echo "FAIL: run.sh --smoke on an old runs.csv"; exit 1
fi
python3 - "$T/old/runs.csv" <<'PY' || exit 1
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
assert rows[0][-1] == "command" and len(rows) == 5, rows[0]
assert all(len(r) == len(rows[0]) for r in rows), [len(r) for r in rows]
PY
# --summary-only rebuilds the same summary (and the plot) from runs.csv without running anything
cp "$T/out/summary.csv" "$T/summary.before"
rm "$T/out/summary.csv" "$T/out/table_c1.png"
DPTRAIN=/nonexistent "$SRC/experiments/dpulr_table_c1/run.sh" --summary-only "$T/out" > "$T/log" 2>&1 \
  || { cat "$T/log"; echo "FAIL: run.sh --summary-only"; exit 1; }
cmp -s "$T/summary.before" "$T/out/summary.csv" || { echo "FAIL: --summary-only wrote another summary"; exit 1; }
[ -s "$T/out/table_c1.png" ] || { echo "FAIL: --summary-only drew no plot"; exit 1; }
mkdir "$T/empty"
if "$SRC/experiments/dpulr_table_c1/run.sh" --summary-only "$T/empty" > "$T/log" 2>&1; then
  echo "FAIL: --summary-only without runs.csv succeeded"; exit 1
fi
grep -q "no $T/empty/runs.csv to summarize" "$T/log" || { cat "$T/log"; echo "FAIL: message"; exit 1; }
# the scripts that do not take it say so instead of running
if "$SRC/experiments/dpulr_figure3/run.sh" --summary-only "$T/empty" > "$T/log" 2>&1; then
  echo "FAIL: figure3 run.sh accepted --summary-only"; exit 1
fi
grep -q "unknown option '--summary-only' (expected --smoke or OUT_DIR)" "$T/log" || { cat "$T/log"; echo "FAIL: message"; exit 1; }
echo "summary-only ok"
