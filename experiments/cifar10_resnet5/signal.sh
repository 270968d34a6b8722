#!/usr/bin/env bash
# How much of the true gradient a clipped DP-ULR estimate carries, against DP-SGD's clipped
# per-example gradients, at K perturbations per example (docs/dpulr.md, Section 4.3 "Why
# DP-ULR trails DP-SGD here"): runs build/bench/dpulr_signal on one fixed batch of B
# training examples at the model's LeCun init (seed 1) and at each checkpoint named in
# CHECKPOINTS, and writes
#   OUT/signal.csv          point,method,K,draw,proj,cos,norm: one line per direction and
#                           draw (proj = mean over examples of the clipped estimate along
#                           the unit true gradient; see bench/dpulr_signal.c)
#   OUT/signal_summary.csv  point,method,K,draws,proj_mean,proj_std,cos_mean,dpsgd_over_dpulr
#                           (DP-SGD's proj over this row's mean proj)
#   OUT/signal.png          proj against K, one curve per point, DP-SGD as a level line
# usage: signal.sh [--smoke | --help]
#   env: DPTRAIN_BUILD (default build/), DATA_DIR, OUT (default this directory's out/),
#        B (1000), KS (4,16,64), DRAWS (4), C (1), S (0.1), THREADS (1),
#        CHECKPOINTS ("label=path ..."; default none: the init only)
#   --smoke: a 300-example batch of a small synthetic CSV and an MLP, K 2,4, 1 draw, one
#            checkpoint trained for the purpose (seconds; a ctest runs it)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${DPTRAIN_BUILD:-$ROOT/build}
PROBE=$BUILD/bench/dpulr_signal
DATA_DIR=${DATA_DIR:-${DPT_SHARED_DATASETS:-/work/shared/datasets}}
OUT=${OUT:-$HERE/out}
B=${B:-1000}
KS=${KS:-4,16,64}
DRAWS=${DRAWS:-4}
C=${C:-1}
S=${S:-0.1}
THREADS=${THREADS:-1}
CHECKPOINTS=${CHECKPOINTS:-}
DATASET=cifar10
MODEL=resnet5
case ${1:-} in
  --smoke) SMOKE=1 ;;
  "") SMOKE=0 ;;
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "signal.sh: unknown argument '$1' (expected --smoke or nothing; see --help)" >&2; exit 2 ;;
esac
[ -x "$PROBE" ] || { echo "signal.sh: $PROBE not found (build the project first)" >&2; exit 2; }
mkdir -p "$OUT"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if [ "$SMOKE" = 1 ]; then
  B=300 KS=2,4 DRAWS=1
  DATASET=csv:$T/d.csv MODEL=mlp:6-16-3:tanh
  awk 'BEGIN { srand(5); for (i = 0; i < 600; i++) { c = i % 3; printf "%d", c
               for (j = 0; j < 6; j++) printf ",%.3f", 2 * rand() - 1 + (c == j); printf "\n" } }' > "$T/d.csv"
  "$BUILD/dptrain" train --dataset "$DATASET" --model "$MODEL" --epochs 2 --batch-size 50 --normalize none --quiet --no-progress \
    --out "$T/run" > /dev/null
  CHECKPOINTS="trained=$T/run/checkpoint.safetensors"
elif [ ! -f "$DATA_DIR/cifar10/data_batch_1.bin.gz" ] && [ ! -f "$DATA_DIR/cifar10/data_batch_1.bin" ]; then
  echo "SKIP: CIFAR-10 not found under $DATA_DIR/cifar10 (set DATA_DIR)"; exit 77
fi
echo "point,method,K,draw,proj,cos,norm" > "$OUT/signal.csv"
for spec in "init=-" $CHECKPOINTS; do
  label=${spec%%=*} ck=${spec#*=}
  [ "$ck" = - ] || [ -s "$ck" ] || { echo "signal.sh: checkpoint '$ck' of point '$label' not found" >&2; exit 2; }
  echo "signal.sh: $label: B $B, K $KS, $DRAWS draws" >&2
  "$PROBE" "$DATASET" "$DATA_DIR" "$MODEL" "$B" "$KS" "$DRAWS" "$C" "$S" "$ck" "$THREADS" > "$T/p.csv"
  tail -n +2 "$T/p.csv" | sed "s/^/$label,/" >> "$OUT/signal.csv"
done
# per point and method/K: mean and sample std of proj over the draws, mean cos, DP-SGD's proj over it
awk -F, -v OFS=, 'NR > 1 { k = $1 SUBSEP $2 SUBSEP $3; if (!(k in n)) order[++m] = k
                           n[k]++; s[k] += $5; ss[k] += $5 * $5; cs[k] += $6
                           if ($2 == "dpsgd") sgd[$1] = $5 }
  END { print "point,method,K,draws,proj_mean,proj_std,cos_mean,dpsgd_over_dpulr"
        for (i = 1; i <= m; i++) { k = order[i]; split(k, f, SUBSEP); mu = s[k] / n[k]
          sd = n[k] > 1 ? sqrt((ss[k] - n[k] * mu * mu) / (n[k] - 1)) : 0; if (sd != sd) sd = 0
          r = (f[2] == "dpulr" && mu != 0) ? sprintf("%.4g", sgd[f[1]] / mu) : ""
          printf "%s,%s,%s,%d,%.6g,%.4g,%.4g,%s\n", f[1], f[2], f[3], n[k], mu, sd, cs[k] / n[k], r } }' \
  "$OUT/signal.csv" > "$OUT/signal_summary.csv"
if command -v gnuplot > /dev/null; then
  PLOT=""
  for label in $(tail -n +2 "$OUT/signal_summary.csv" | cut -d, -f1 | awk '!seen[$0]++'); do
    awk -F, -v p="$label" '$1 == p && $2 == "dpulr"' "$OUT/signal_summary.csv" > "$T/u-$label.dat"
    sgd=$(awk -F, -v p="$label" '$1 == p && $2 == "dpsgd" { print $5 }' "$OUT/signal_summary.csv")
    PLOT="$PLOT${PLOT:+, }\"$T/u-$label.dat\" using 3:5:6 with yerrorlines title \"DP-ULR, $label\""
    PLOT="$PLOT, $sgd with lines dashtype 2 title \"DP-SGD, $label\""
  done
  gnuplot <<GP
set terminal pngcairo size 900,600 noenhanced
set output "$OUT/signal.png"
set datafile separator ","
set logscale x 2
set logscale y
set offsets graph 0.05, graph 0.05, 0, 0
set key bottom right
set xlabel "K (perturbations per example)"
set ylabel "clipped estimate along the true gradient (mean over examples, C = $C; log)"
set title "$DATASET $MODEL, batch of $B: DP-ULR (explicit, baseline, s $S) against DP-SGD, no privacy noise"
plot $PLOT
GP
else
  echo "signal.sh: gnuplot not found: no plot (scripts/setup.sh installs it)" >&2
fi
echo "signal.sh: wrote $OUT/signal.csv, $OUT/signal_summary.csv$([ -s "$OUT/signal.png" ] && echo ", $OUT/signal.png")"
