#!/usr/bin/env bash
# CIFAR-10 ResNet-5 (model "resnet5", DP-ULR Section 4.3) trained with DP-SGD as the
# DP-ULR paper's baseline: batch 64 (Poisson rate q = 64/50000), noise multiplier 1,
# delta 1e-5. The paper does not state C, the optimizer or the epochs: we use C = 1,
# SGD lr 0.1 (LeCun init; lr 0.5 stalled at 25-31% over its first 3 epochs), per-channel normalization with training-split statistics.
# Writes out/results.csv (one row per epoch: test accuracy, RDP and PLD epsilon) and
# out/cifar10_resnet5.png. The DP-ULR runs of the same figure are not here (DP-ULR is
# another issue's algorithm).
#   usage: run.sh [--smoke] [--epochs E]      env: DPTRAIN (binary), DATA_DIR, OUT, THREADS
#   --smoke: 1000 training / 300 test examples, q = 0.1, 1 epoch (a ctest runs it)
# The shared CIFAR-10 copy was rebuilt from JPEG (quality 75) copies of the images (see
# its SOURCES.md): pixels differ slightly from the official release.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
DATA_DIR=${DATA_DIR:-${DPT_SHARED_DATASETS:-/work/shared/datasets}}
OUT=${OUT:-$HERE/out}
THREADS=${THREADS:-1}
EPOCHS=20
Q=0.00128
SIZE=()
SMOKE=${SMOKE:-0}
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) SMOKE=1 ;;
    --epochs) EPOCHS=$2; shift ;;
    *) echo "run.sh: unknown argument '$1' (expected --smoke or --epochs E)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$SMOKE" = 1 ]; then EPOCHS=1; Q=0.1; SIZE=(--max-train 1000 --max-test 300); fi
if [ ! -f "$DATA_DIR/cifar10/data_batch_1.bin.gz" ] && [ ! -f "$DATA_DIR/cifar10/data_batch_1.bin" ]; then
  echo "SKIP: CIFAR-10 not found under $DATA_DIR/cifar10 (set DATA_DIR)"; exit 77
fi
mkdir -p "$OUT"
CMD=("$DPTRAIN" train --algo dpsgd --dataset cifar10 --data-dir "$DATA_DIR" --normalize channel --model resnet5
     --init lecun --optimizer sgd --lr 0.1 --sample-rate "$Q" --sigma 1.0 --clip 1.0 --delta 1e-5
     --epochs "$EPOCHS" --threads "$THREADS" --seed 1 --no-progress --out "$OUT/run" "${SIZE[@]}")
echo "${CMD[*]}" > "$OUT/command.txt"
"${CMD[@]}" | tee "$OUT/log.txt"
awk 'function num(k,  m) { if (match($0, "\"" k "\":[-0-9.eE+]+")) { m = substr($0, RSTART, RLENGTH); sub(/^"[^"]*":/, "", m); return m } return "" }
     BEGIN { print "epoch,step,train_loss,test_accuracy,epsilon_rdp,epsilon_pld,delta" }
     { print num("epoch") "," num("step") "," num("train_loss") "," num("test_accuracy") "," num("epsilon") "," num("epsilon_pld") "," num("delta") }' \
  "$OUT/run/metrics.jsonl" > "$OUT/results.csv"
gnuplot <<GP
set terminal pngcairo size 800,500 noenhanced
set output "$OUT/cifar10_resnet5.png"
set datafile separator ","
set key bottom right
set xlabel "epoch"
set ylabel "test accuracy (%)"
set y2label "epsilon (delta 1e-5)"
set y2tics
set ytics nomirror
set title "CIFAR-10 ResNet-5 (resnet5), DP-SGD q $Q, sigma 1, C 1, SGD lr 0.1"
plot "$OUT/results.csv" using 1:(100*\$4) skip 1 with linespoints title "test accuracy", \
     "" using 1:5 skip 1 axes x1y2 with lines title "epsilon (RDP)", \
     "" using 1:6 skip 1 axes x1y2 with lines dashtype 2 title "epsilon (PLD)"
GP
echo "wrote $OUT/results.csv and $OUT/cifar10_resnet5.png"
