#!/usr/bin/env bash
# The DP-ULR Table 1 / Figure 2 experiment in its smoke configuration: the CSVs have one
# row per run (DP-ULR accounted with an epsilon, DP-ULR shuffled with "none", DP-SGD) and
# the Figure 2 grid, and the PNGs exist. Skips (77) without the shared MNIST.
set -u
BIN=$1
SRC=${DPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
D=${DPT_SHARED_DATASETS:-}
if [ -z "$D" ] || [ ! -e "$D/mnist" ]; then echo "SKIP: no shared MNIST (DPT_SHARED_DATASETS)"; exit 77; fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if ! DPTRAIN=$BIN DATA_DIR=$D THREADS=1 "$SRC/experiments/dpulr_table1/run.sh" --smoke "$T/out" > "$T/log" 2>&1; then
  cat "$T/log"; echo "FAIL: run.sh --smoke"; exit 1
fi
python3 - "$T/out" <<'PY' || exit 1
import csv, os, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "table1.csv"))))
assert len(rows) == 3, rows
acc = {(r["algorithm"], r["sampling"]): r for r in rows}
r = acc[("dpulr", "poisson_reject")]
assert float(r["epsilon_balle"]) > 0 and float(r["epsilon_classic"]) > float(r["epsilon_balle"]) and int(r["min_batch"]) >= 1, r
assert acc[("dpulr", "shuffle")]["epsilon_balle"] == "none", acc[("dpulr", "shuffle")]
assert float(acc[("dpsgd", "poisson")]["epsilon_balle"]) > 0
assert all(r["paper_acc"] for r in rows)
fig = list(csv.DictReader(open(os.path.join(out, "figure2.csv"))))
assert len(fig) == 9 and all(float(f["ratio"]) >= 0 for f in fig), fig
# the ratio grows with N_B at fixed N and is tiny for a large N with N_B well below qN
big = [f for f in fig if f["N"] == "10000000"]
assert float(big[0]["ratio"]) < 1e-3 < float(big[-1]["ratio"]), big
for p in ("table1.png", "figure2.png"):
    assert os.path.getsize(os.path.join(out, p)) > 1000, p
print("experiment smoke ok")
PY
