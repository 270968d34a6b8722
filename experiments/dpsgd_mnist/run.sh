#!/usr/bin/env bash
# DP-SGD on MNIST: test accuracy against epsilon (0.5, 1, 2, 4, 8 at delta 1e-5), each
# run calibrated by the default accountant (min of PLD and RDP, PLD in practice; RDP before
# issue 42) to its target over the same number of epochs, with
# Abadi et al. (2016, Fig. 5/Table: 90 / 95 / 97% at epsilon 0.5 / 2 / 8, with a 60-dim DP-PCA
# projection and 1000 hidden units) beside ours. Also Fashion-MNIST at epsilon 3.
# Writes OUT/results.csv and OUT/accuracy_vs_epsilon.png (gnuplot).
#
# usage: experiments/dpsgd_mnist/run.sh [--smoke] [--out DIR] [--bin PATH] [--data-dir DIR]
#   --smoke: 2000 training / 500 test examples, 1 epoch, epsilon 1 and 8 only (for CI);
#   EPSILONS="..." (environment) replaces the list of targets; FASHION=0 skips Fashion-MNIST.
#            Fashion-MNIST from the Debian package when MNIST is not in --data-dir.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN="$ROOT/build/dptrain"
OUT="$ROOT/experiments/dpsgd_mnist/out"
DATA_DIR="${DPT_SHARED_DATASETS:-$ROOT/../shared/datasets}"
SMOKE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) SMOKE=1 ;;
    --out) OUT=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --data-dir) DATA_DIR=$2; shift ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$BIN" ] || { echo "run.sh: $BIN not found: build first (scripts/setup.sh)" >&2; exit 2; }
mkdir -p "$OUT"

# Hyperparameters (chosen by the small sweep at epsilon 3 in docs/dpsgd.md; the same for
# every epsilon). JOBS=k runs k trainings at once (1 thread each).
MODEL=mlp:784-256-10:relu
COMMON=(--algo dpsgd --delta 1e-5 --clip 1 --optimizer sgd --lr 4 --batch-size 2048 --no-progress --quiet --threads 1)
EPOCHS=40
JOBS=${JOBS:-1}
EPSILONS="${EPSILONS:-0.5 1 2 3 4 8}"
DATASET=mnist
LIMITS=()
if [ $SMOKE -eq 1 ]; then
  EPOCHS=1; EPSILONS="1 8"; LIMITS=(--max-train 2000 --max-test 500)
  COMMON=(--algo dpsgd --delta 1e-5 --clip 1 --optimizer sgd --lr 0.5 --batch-size 64 --no-progress --quiet)
fi
if [ ! -f "$DATA_DIR/mnist/train-images-idx3-ubyte.gz" ] && [ ! -f "$DATA_DIR/mnist/train-images-idx3-ubyte" ]; then
  if [ $SMOKE -eq 1 ]; then
    echo "run.sh: MNIST not in $DATA_DIR: the smoke run uses Fashion-MNIST from the Debian package" >&2
    DATASET=fashion-mnist; DATA_DIR=/usr/share/datasets
  else
    echo "run.sh: MNIST not found in $DATA_DIR (see ../shared/datasets/SOURCES.md or --data-dir)" >&2; exit 2
  fi
fi

published() { case "$1" in 0.5) echo 90 ;; 2) echo 95 ;; 8) echo 97 ;; *) echo "" ;; esac; }
one() { # dataset eps tag -> CSV row
  local ds=$1 eps=$2 tag=$3 dir="$OUT/$1_eps$2" dd=$DATA_DIR
  local log
  # Fashion-MNIST: the Debian package's copy unless the data directory has one
  [ "$ds" = fashion-mnist ] && [ ! -d "$dd/fashion-mnist" ] && dd=/usr/share/datasets
  log=$("$BIN" train "${COMMON[@]}" "${LIMITS[@]}" --dataset "$ds" --data-dir "$dd" --model $MODEL \
        --target-epsilon "$eps" --epochs $EPOCHS --out "$dir" 2>&1) || { echo "$log" >&2; exit 1; }
  local acc eps_rdp eps_pld steps sigma
  acc=$(sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' <<<"$log")
  # "privacy: epsilon X (PLD; RDP Y) ...": the headline accountant first (docs/accounting.md)
  eps_rdp=$(sed -n -e 's/^privacy: epsilon \([0-9.e+-]*\) (RDP[;)].*/\1/p' -e 's/^privacy: epsilon [0-9.e+-]* (PLD; RDP \([0-9.e+-]*\)).*/\1/p' <<<"$log")
  eps_pld=$(sed -n -e 's/^privacy: epsilon \([0-9.e+-]*\) (PLD;.*/\1/p' -e 's/^privacy: epsilon [0-9.e+-]* (RDP; PLD \([0-9.e+-]*\)).*/\1/p' <<<"$log")
  steps=$(sed -n 's/^privacy: .* after \([0-9]*\) steps.*/\1/p' <<<"$log")
  sigma=$(sed -n 's/^privacy: .*sigma \([0-9.e+-]*\)).*/\1/p' <<<"$log")
  [ -n "$acc" ] && [ -n "$eps_rdp" ] || { echo "run.sh: could not parse the output of $ds eps $eps:" >&2; echo "$log" >&2; exit 1; }
  echo "$ds,$eps,$eps_rdp,$eps_pld,$sigma,$steps,$acc,$tag"
  echo "  $ds epsilon $eps: accuracy $acc% (epsilon $eps_rdp RDP / $eps_pld PLD, sigma $sigma, $steps steps)" >&2
}

CSV="$OUT/results.csv"
echo "dataset,target_epsilon,epsilon_rdp,epsilon_pld,sigma,steps,test_accuracy,abadi2016_accuracy" > "$CSV"
JOBLIST=()
for e in $EPSILONS; do JOBLIST+=("$DATASET $e"); done
[ $SMOKE -eq 0 ] && [ "${FASHION:-1}" = 1 ] && JOBLIST+=("fashion-mnist 3")
k=0; pids=()
for j in "${JOBLIST[@]}"; do
  set -- $j
  one "$1" "$2" "$(published "$2")" > "$OUT/row_$k.csv" &
  pids+=($!); k=$((k+1))
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
done
for p in "${pids[@]}"; do wait "$p" || { echo "run.sh: a training failed" >&2; exit 1; }; done
for ((i = 0; i < k; i++)); do cat "$OUT/row_$i.csv" >> "$CSV"; rm -f "$OUT/row_$i.csv"; done
echo "wrote $CSV" >&2

if command -v gnuplot >/dev/null; then
  grep "^$DATASET," "$CSV" | awk -F, '{print $3, $7}' > "$OUT/ours.dat"
  printf '0.5 90\n2 95\n8 97\n' > "$OUT/abadi.dat"
  gnuplot <<GP
set terminal pngcairo size 800,520 noenhanced
set output "$OUT/accuracy_vs_epsilon.png"
set title "DP-SGD on $DATASET (delta 1e-5, $MODEL, $EPOCHS epochs)"
set xlabel "target epsilon (delta 1e-5)"
set ylabel "test accuracy (%)"
set logscale x 2
set key bottom right
set grid
plot "$OUT/ours.dat" using 1:2 with linespoints pt 7 title "dptrain (measured)", \
     "$OUT/abadi.dat" using 1:2 with points pt 5 ps 1.5 title "Abadi et al. 2016 (PCA 60 + 1000 hidden)"
GP
  echo "wrote $OUT/accuracy_vs_epsilon.png" >&2
else
  echo "run.sh: gnuplot not installed: no plot (scripts/setup.sh installs gnuplot-nox)" >&2
fi
