#!/usr/bin/env bash
# experiments/dpulr_table_c1/run.sh --smoke: DP-ULR and DP-SGD on two MLP sizes (tiny MNIST
# subset, 1 epoch): one run per (configuration, model), the models are the named widths, the
# summary has the paper's Table C1 number beside each cell, and the plot exists. Skips (77)
# without the shared MNIST.
set -u
BIN=$1
source "$(dirname "$0")/lib/experiment_shared.sh"
if ! DPTRAIN=$BIN DATA_DIR=$D "$SRC/experiments/dpulr_table_c1/run.sh" --smoke "$T/out" > "$T/log" 2>&1; then
  cat "$T/log"; echo "FAIL: run.sh --smoke"; exit 1
fi
python3 - "$T/out" <<'PY' || exit 1
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
print("experiment smoke ok")
PY
