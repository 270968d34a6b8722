#!/usr/bin/env bash
# MNIST CNN (the Opacus example's SampleConvNet, model "mnist_cnn") trained with DP-SGD at
# the Opacus README's (3.01, 1e-5) setting: Poisson rate q = 0.004 (expected batch 240),
# sigma 1.1, C 1.0, SGD lr 0.15, 60 epochs, delta 1e-5. Writes out/results.csv (one row
# per epoch: test accuracy, RDP and PLD epsilon) and out/mnist_cnn.png.
#   usage: run.sh [--smoke] [--epochs E]      env: DPTRAIN (binary), DATA_DIR, OUT, THREADS
#   --smoke: 1000 training / 300 test examples, q = 0.1, 2 epochs (a ctest runs it; < 30 s)
# The init is LeCun (variance 1/fan-in), the closest of ours to PyTorch's default
# (variance 1/(3 fan-in)); with He init SGD at lr 0.1 diverged in our first epoch.
case "${1:-}" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
DATA_DIR=${DATA_DIR:-${DPT_SHARED_DATASETS:-/work/shared/datasets}}
OUT=${OUT:-$HERE/out}
THREADS=${THREADS:-1}
EPOCHS=60
Q=0.004
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
if [ "$SMOKE" = 1 ]; then EPOCHS=2; Q=0.1; SIZE=(--max-train 1000 --max-test 300); fi
if [ ! -f "$DATA_DIR/mnist/train-images-idx3-ubyte.gz" ] && [ ! -f "$DATA_DIR/mnist/train-images-idx3-ubyte" ]; then
  echo "SKIP: MNIST not found under $DATA_DIR/mnist (set DATA_DIR)"; exit 77
fi
mkdir -p "$OUT"
CMD=("$DPTRAIN" train --algo dpsgd --dataset mnist --data-dir "$DATA_DIR" --model mnist_cnn --init lecun
     --optimizer sgd --lr 0.15 --sample-rate "$Q" --sigma 1.1 --clip 1.0 --delta 1e-5 --epochs "$EPOCHS"
     --threads "$THREADS" --seed 1 --no-progress --out "$OUT/run" "${SIZE[@]}")
# the command and, as a shell comment, the source revision of the library that runs it
echo "${CMD[*]}  # build $("$DPTRAIN" --version | sed -n 's/^build: //p')" > "$OUT/command.txt"
"${CMD[@]}" | tee "$OUT/log.txt"
# metrics.jsonl -> CSV
awk 'function num(k,  m) { if (match($0, "\"" k "\":[-0-9.eE+]+")) { m = substr($0, RSTART, RLENGTH); sub(/^"[^"]*":/, "", m); return m } return "" }
     # the RDP epsilon: "epsilon_rdp"; metrics written before issue 42 had it as "epsilon"
     function rdp(  r) { r = num("epsilon_rdp"); return r != "" ? r : num("epsilon") }
     BEGIN { print "epoch,step,train_loss,test_accuracy,epsilon_rdp,epsilon_pld,delta" }
     { print num("epoch") "," num("step") "," num("train_loss") "," num("test_accuracy") "," rdp() "," num("epsilon_pld") "," num("delta") }' \
  "$OUT/run/metrics.jsonl" > "$OUT/results.csv"
gnuplot <<GP
set terminal pngcairo size 800,500 noenhanced
set output "$OUT/mnist_cnn.png"
set datafile separator ","
set key bottom right
set xlabel "epoch"
set ylabel "test accuracy (%)"
set y2label "epsilon (delta 1e-5)"
set y2tics
set ytics nomirror
set title "MNIST CNN (mnist_cnn), DP-SGD q $Q, sigma 1.1, C 1, SGD lr 0.15"
plot "$OUT/results.csv" using 1:(100*\$4) skip 1 with linespoints title "test accuracy", \
     "" using 1:5 skip 1 axes x1y2 with lines title "epsilon (RDP)", \
     "" using 1:6 skip 1 axes x1y2 with lines dashtype 2 title "epsilon (PLD)"
GP
echo "wrote $OUT/results.csv and $OUT/mnist_cnn.png"
