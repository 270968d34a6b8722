#!/usr/bin/env bash
# KL privacy of noisy GD against initialization, width and depth ("Initialization Matters",
# Figures 1 and 2): CIFAR-10 plane/car images, full-batch noisy GD (sigma 0.01, eta 0.01),
# KL estimated over removing any training record or adding any test record, worst case per
# run, mean and std over runs; the closed-form B (Eq. 7) beside every configuration.
# Writes OUT/kl_all.csv, OUT/fig1.csv, OUT/fig2_depth.csv, OUT/fig2_width.csv and
# OUT/fig1.png, OUT/fig2.png.
#   experiments/kl_init/run.sh [--smoke]     (SMOKE=1 also works)
# Settings (environment): BIN (dptrain binary), OUT, DATA (CIFAR-10 directory), N_TRAIN,
# N_TEST, RUNS, EPOCHS, EARLY (the 'early' epoch of Figure 2a), WIDTH (Figure 1 and the
# depth sweep), DEPTH (Figure 1 and the width sweep), DEPTHS, WIDTHS, INITS, THREADS,
# ETA, SIGMA, CONSTANT (exact | paper).
case "${1:-}" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
[ "${1:-}" = "--smoke" ] && SMOKE=1
SMOKE=${SMOKE:-0}
BIN=${BIN:-$ROOT/build/dptrain}
if [ -z "${DATA:-}" ]; then
  DATA=$ROOT/../shared/datasets/cifar10
  [ -n "${DPT_SHARED_DATASETS:-}" ] && [ -d "$DPT_SHARED_DATASETS/cifar10" ] && DATA=$DPT_SHARED_DATASETS/cifar10
fi
if [ "$SMOKE" = 1 ]; then
  : "${OUT:=$ROOT/experiments/kl_init/out-smoke}" "${N_TRAIN:=40}" "${N_TEST:=10}" "${RUNS:=2}" "${EPOCHS:=4}"
  : "${EARLY:=2}" "${WIDTH:=16}" "${DEPTH:=3}" "${DEPTHS:=2 3}" "${WIDTHS:=8 16}"
else
  : "${OUT:=$ROOT/experiments/kl_init/out}" "${N_TRAIN:=500}" "${N_TEST:=200}" "${RUNS:=3}" "${EPOCHS:=50}"
  : "${EARLY:=20}" "${WIDTH:=256}" "${DEPTH:=10}" "${DEPTHS:=2 4 6 8 10 12}" "${WIDTHS:=64 128 256 512}"
fi
INITS=${INITS:-he xavier lecun}
THREADS=${THREADS:-1}
ETA=${ETA:-0.01}
SIGMA=${SIGMA:-0.01}
CONSTANT=${CONSTANT:-exact}
[ -x "$BIN" ] || { echo "run.sh: $BIN is not built (cmake --build build)" >&2; exit 2; }
[ -d "$DATA" ] || { echo "run.sh: CIFAR-10 directory $DATA not found (set DATA)" >&2; exit 77; }
mkdir -p "$OUT/runs"
TR=$OUT/train_${N_TRAIN}.csv TE=$OUT/test_${N_TEST}.csv
[ -s "$TR" ] && [ -s "$TE" ] || python3 "$HERE/prep.py" "$DATA" "$N_TRAIN" "$N_TEST" "$TR" "$TE"

configs=() # "init depth width"; the initializations innermost, so that a partial run covers all three
for L in $DEPTHS; do for init in $INITS; do configs+=("$init $L $WIDTH"); done; done
for m in $WIDTHS; do
  [ "$m" = "$WIDTH" ] && [[ " $DEPTHS " == *" $DEPTH "* ]] && continue
  for init in $INITS; do configs+=("$init $DEPTH $m"); done
done
echo "init,depth,width,B" > "$OUT/B.csv"
total=$(( ${#configs[@]} * RUNS )); k=0; t0=$(date +%s)
for cfg in "${configs[@]}"; do
  read -r init L m <<<"$cfg"
  B=$("$BIN" account --kl-bound --init "$init" --input-dim 3072 --outputs 2 --width "$m" --depth "$L" --json |
      python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["B"]))')
  echo "$init,$L,$m,$B" >> "$OUT/B.csv"
  spec="mlp:3072"; for ((l = 1; l < L; l++)); do spec+="-$m"; done; spec+="-2:relu:nobias"
  for ((s = 1; s <= RUNS; s++)); do
    k=$((k + 1))
    dir=$OUT/runs/${init}_d${L}_w${m}_s${s}
    if [ ! -s "$dir/kl_candidates.csv" ]; then
      "$BIN" train --algo noisy-gd --dataset "csv:$TR,$TE" --normalize none --model "$spec" --init "$init" \
        --eta "$ETA" --langevin-sigma "$SIGMA" --kl-constant "$CONSTANT" --neighbours remove,add \
        --epochs "$EPOCHS" --seed "$s" --threads "$THREADS" --quiet --out "$dir" > "$dir.log" 2>&1 ||
        { echo "run.sh: run $dir failed:" >&2; cat "$dir.log" >&2; exit 1; }
    fi
    echo "[$k/$total] $init depth $L width $m seed $s  ($(( $(date +%s) - t0 ))s)" >&2
  done
done
python3 "$HERE/aggregate.py" "$OUT" "$EPOCHS" "$EARLY"
# the three views of the paper's figures
python3 - "$OUT" "$EPOCHS" "$EARLY" "$WIDTH" "$DEPTH" <<'PY'
import csv, sys
out, E, early, W, D = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = list(csv.DictReader(open(out + "/kl_all.csv")))
def dump(name, keep, cols):
    with open(out + "/" + name, "w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            if keep(r):
                f.write(",".join(str(r[c]) for c in cols) + "\n")
dump("fig1.csv", lambda r: int(r["depth"]) == D and int(r["width"]) == W,
     ["init", "epoch", "kl_mean", "kl_std", "runs", "n", "n_test", "B"])
dump("fig2_depth.csv", lambda r: int(r["width"]) == W and int(r["epoch"]) in (early, E),
     ["init", "epoch", "depth", "kl_mean", "kl_std", "worst_of_mean", "runs", "n", "n_test", "B"])
dump("fig2_width.csv", lambda r: int(r["depth"]) == D and int(r["epoch"]) == E,
     ["init", "width", "kl_mean", "kl_std", "worst_of_mean", "runs", "n", "n_test", "B"])
PY
GP=$OUT/plot.gp
{
  echo "set datafile separator ','; set terminal pngcairo size 900,600 noenhanced; set key top left"
  echo "set output '$OUT/fig1.png'; set title 'KL estimate vs epochs (width $WIDTH, depth $DEPTH, mean +- std of $RUNS runs, $N_TRAIN images)'"
  echo "set xlabel 'epoch'; set ylabel 'KL (worst neighbour, $CONSTANT constant; log scale)'; set logscale y"
  printf "plot "
  for init in $INITS; do printf "'< grep ^%s, %s' using 2:3:4 with yerrorlines title '%s', " "$init" "$OUT/fig1.csv" "$init"; done
  echo "1/0 notitle"
  echo "set terminal pngcairo size 1500,450 noenhanced; set output '$OUT/fig2.png'; set multiplot layout 1,3"
  echo "set ylabel 'KL (worst neighbour, $CONSTANT constant; log scale)'"
  for ep in "$EARLY" "$EPOCHS"; do
    echo "set title 'KL vs depth at $ep epochs (width $WIDTH)'; set xlabel 'depth'"
    printf "plot "
    for init in $INITS; do printf "'< grep ^%s,%s, %s' using 3:4:5 with yerrorlines title '%s', " "$init" "$ep" "$OUT/fig2_depth.csv" "$init"; done
    echo "1/0 notitle"
  done
  echo "set title 'KL vs width at $EPOCHS epochs (depth $DEPTH)'; set xlabel 'width'"
  printf "plot "
  for init in $INITS; do printf "'< grep ^%s, %s' using 2:3:4 with yerrorlines title '%s', " "$init" "$OUT/fig2_width.csv" "$init"; done
  echo "1/0 notitle"
  echo "unset multiplot"
} > "$GP"
gnuplot "$GP"
echo "run.sh: $OUT/fig1.csv fig2_depth.csv fig2_width.csv fig1.png fig2.png ($(( $(date +%s) - t0 ))s)"
