#!/usr/bin/env bash
# experiments/dpulr_table1/diagnose.sh --smoke, all three parts (one short traced run each on a
# 1000-example MNIST subset): the DP-SGD row's direction norm is the noise's
# sigma C sqrt(P) / B (sigma 8, batch 64, P = 111146: 41.67, the clipped signal adds < 1%)
# and its update norm lr times that (SGD); the controller rows have s_l > 0 and clip
# fractions in [0, 1] for the 4 modules; the vr part writes one row per epoch for its run,
# which ran the controller; the plots exist. Skips (77) without MNIST.
set -u
BIN=$1
source "$(dirname "$0")/lib/experiment_shared.sh"
for part in dpsgd controller vr; do
  if ! DPTRAIN=$BIN DATA_DIR=$D "$SRC/experiments/dpulr_table1/diagnose.sh" --smoke $part "$T/out" > "$T/log" 2>&1; then
    cat "$T/log"; echo "FAIL: diagnose.sh --smoke $part"; exit 1
  fi
done
python3 - "$T/out" <<'PY' || exit 1
import csv, math, os, sys
out = sys.argv[1]
g = list(csv.DictReader(open(os.path.join(out, "dpsgd_b64.csv"))))
assert len(g) == 1 and g[0]["run"] == "s8_base" and g[0]["epoch"] == "1" and g[0]["test_acc"], g
noise = 8 * math.sqrt(111146) / 64
assert abs(float(g[0]["direction_norm_mean"]) - noise) < 0.01 * noise, (g[0], noise)
assert abs(float(g[0]["update_norm_mean"]) - 0.1 * float(g[0]["direction_norm_mean"])) < 1e-3 * noise, g[0]
c = list(csv.DictReader(open(os.path.join(out, "controller.csv"))))
assert c and all(r["run"] == "c001" for r in c), c
for r in c:
    for m in range(4):
        assert float(r["m%d_s_median" % m]) > 0 and 0 <= float(r["m%d_clipped_frac" % m]) <= 1, r
        assert 0 <= float(r["m%d_rank_deficient_frac" % m]) <= 1, r
v = list(csv.DictReader(open(os.path.join(out, "vr.csv"))))
assert len(v) == 1 and v[0]["run"] == "ctrl" and v[0]["epoch"] == "1" and v[0]["test_acc"], v
assert float(v[0]["direction_norm_mean"]) > 0 and float(v[0]["m0_s_median"]) > 0, v
# the vr part's ctrl run is the controller (its run directory is named by run and cell)
import glob
logs = glob.glob(os.path.join(out, "ctrl-b*-s*.log"))
assert len(logs) == 1 and "controller noise" in open(logs[0]).read(), logs
for p in ("dpsgd_b64.png", "controller.png", "vr.png"):
    assert os.path.getsize(os.path.join(out, p)) > 1000, p
print("experiment smoke ok")
PY
