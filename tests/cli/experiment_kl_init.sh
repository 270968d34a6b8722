#!/usr/bin/env bash
# experiments/kl_init/run.sh --smoke: tiny CIFAR-10 plane/car subset, every init, two depths
# and widths; checks the CSVs (one row per configuration and epoch, KL >= 0 and
# non-decreasing in the epoch, B > 0) and the PNGs. Skips (77) without CIFAR-10.
set -u
BIN=$1
SRC=${DPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
DATA=${DPT_SHARED_DATASETS:-$SRC/../shared/datasets}/cifar10
[ -d "$DATA" ] || { echo "SKIP: CIFAR-10 not found at $DATA"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export DPTRAIN_SECRETS_DIR="$T/secrets"  # the runs' secret files: under $T, not in the home directory
if ! BIN=$BIN OUT=$T DATA=$DATA "$SRC/experiments/kl_init/run.sh" --smoke > "$T/log" 2>&1; then
  echo "FAIL: run.sh --smoke"; cat "$T/log"; exit 1
fi
for f in fig1.csv fig2_depth.csv fig2_width.csv kl_all.csv fig1.png fig2.png; do
  [ -s "$T/$f" ] || { echo "FAIL: $f missing"; exit 1; }
done
python3 - "$T" <<'PY' || exit 1
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/kl_all.csv")))
assert len(rows) == 9 * 5, len(rows)       # 3 inits x 3 (depth, width) configurations x epochs 0..4
by = {}
for r in rows:
    by.setdefault((r["init"], r["depth"], r["width"]), []).append((int(r["epoch"]), float(r["kl_mean"])))
    assert float(r["B"]) > 0 and float(r["kl_mean"]) >= 0 and int(r["runs"]) == 2
for k, v in by.items():
    v.sort()
    assert v[0] == (0, 0.0), (k, v)
    assert all(b[1] >= a[1] for a, b in zip(v, v[1:])), (k, v)   # a sum of non-negative terms
print("experiment kl_init smoke: ok")
PY
