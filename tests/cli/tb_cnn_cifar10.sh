#!/usr/bin/env bash
# CLI: the preset tb-cnn-cifar10 (Tramer & Boneh's end-to-end CIFAR-10 CNN, cli/presets.c)
# runs a few steps on CIFAR-10-shaped data made here (binary batches of the loader's format:
# 5 training files of 100 records, a test file of 200; a class-dependent bright block), with
# the preset's model, schedule and calibration; and experiments/tramer_boneh/run.sh puts
# the paper's 59.2 beside it in the summary. Needs no dataset on disk.
set -u
BIN=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$(dirname "$0")/lib/harness.sh"
python3 - "$T/data/cifar10" <<'PY'
import os, random, sys
random.seed(1)
d = sys.argv[1]
os.makedirs(d)
def record(c):
    px = bytearray(random.randrange(60, 120) for _ in range(3072))
    for y in range((c // 4) * 8, (c // 4) * 8 + 8):
        for x in range((c % 4) * 8, (c % 4) * 8 + 8):
            px[y * 32 + x] = 230
    return bytes([c]) + bytes(px)
for name, n in [("data_batch_%d.bin" % i, 100) for i in range(1, 6)] + [("test_batch.bin", 200)]:
    with open(os.path.join(d, name), "wb") as f:
        f.write(b"".join(record(i % 10) for i in range(n)))
PY
# the preset's batch (1024) exceeds this data: a smaller one; 3 steps only
expect_ok "$BIN" train --preset tb-cnn-cifar10 --data-dir "$T/data" --max-train 400 --max-test 100 --batch-size 32 \
  --max-steps 3 --threads 1 --no-progress --out "$T/run"
check 'grep -q "preset flags.*--epochs 30 --dataset cifar10 --normalize public --model cifar_cnn_tanh --batch-size 1024 --lr 1" <<<"$LAST_OUT"' \
  "the preset's flags are not the recipe's: $LAST_OUT"
check 'grep -q "model cifar_cnn_tanh (550570 parameters)" <<<"$LAST_OUT"' "model or parameter count differs"
check 'grep -q "calibrated sigma [0-9.]* for epsilon 3 at delta 1e-05 after 30 epochs" <<<"$LAST_OUT"' \
  "sigma not calibrated for the preset's 30 epochs"
check 'grep -q "C 0.1, flat clipping" <<<"$LAST_OUT" && grep -q "sgd lr 1," <<<"$LAST_OUT"' "clip or lr differ"
check 'python3 -c "
import json, math
m = [json.loads(l) for l in open(\"$T/run/metrics.jsonl\") if l.strip()][-1]
assert m[\"step\"] == 3 and 0 < m[\"epsilon\"] <= 3.0 and math.isfinite(m[\"test_loss\"]), m"' "metrics after 3 steps"

# run.sh: the preset is known (the paper's 59.2 in the summary, named in --help)
mkdir -p "$T/out"
printf '%s\n' "preset,dataset,model,seed,epsilon,accountant,epsilon_rdp,delta,sigma,steps,test_accuracy,seconds,build" \
  "tb-cnn-cifar10,cifar10,cifar_cnn_tanh,1,3.0,pld,3.28,1e-05,1.32,1470,50.0,1.0,x" > "$T/out/runs.csv"
expect_ok env DPTRAIN="$BIN" bash "$SRC/experiments/tramer_boneh/run.sh" --summary-only "$T/out"
check 'python3 -c "
import csv; r = list(csv.DictReader(open(\"$T/out/summary.csv\")))
assert [(x[\"preset\"], x[\"dataset\"], x[\"paper_accuracy\"]) for x in r] == [(\"tb-cnn-cifar10\", \"cifar10\", \"59.2\")], r"' \
  "summary lacks the paper's 59.2"
expect_ok bash "$SRC/experiments/tramer_boneh/run.sh" --help
check 'grep -q "tb-cnn-cifar10" <<<"$LAST_OUT"' "run.sh --help does not name tb-cnn-cifar10"
harness_end
