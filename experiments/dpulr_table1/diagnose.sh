#!/usr/bin/env bash
# Diagnostic runs behind docs/dpulr.md "Results": why DP-SGD at batch 64 collapses for
# sigma 4 and 8, why the controller diverges at the paper's Adam lr 0.01, and what the
# variance reduction the controller cannot use is worth to the explicit mode. Every run
# writes a per-step trace (dptrain train --trace); trace_summary.py condenses it with the
# run's metrics into CSV rows, and gnuplot draws them. MNIST, MLP 784-128-64-32-10 GELU,
# C = 1, delta 1e-5, seed 1, one thread per run.
#
#   experiments/dpulr_table1/diagnose.sh [--smoke] PART [OUT_DIR]   (default OUT_DIR: diag/)
#
# PART dpsgd: DP-SGD, batch 64, SGD, 10 epochs (no schedule: it starts after epoch 10):
#   s8_base   sigma 8, lr 0.1, standardized pixels (our --normalize public)
#   s8_none   sigma 8, lr 0.1, pixels in [0, 1] (--normalize none)
#   s8_lecun  sigma 8, lr 0.1, LeCun init instead of our default He init
#   s8_lr02   sigma 8, lr 0.02
#   s4_base   sigma 4, lr 0.1;   s4_none  sigma 4, lr 0.1, pixels in [0, 1]
#   -> OUT_DIR/dpsgd_b64.csv (one row per epoch), dpsgd_b64.png
# PART controller: DP-ULR, batch 500, sigma0 1, K 32, Adam, lr x0.85 every 10 epochs:
#   c001   controller, lr 0.01 (the paper's), 14 epochs
#   e001   explicit noise, s = 0.1, no variance reduction, lr 0.01, 4 epochs
#   c0001  controller, lr 0.001, 2 epochs
#   -> OUT_DIR/controller.csv (one row per 30 steps), controller.png
# PART vr: DP-ULR, batch 200, sigma0 8, K 32, Adam lr 0.001, lr x0.85 every 10 epochs, 5 epochs
#   (a Table 1 cell where the controller falls far below the paper and the explicit mode):
#   ctrl   the controller (Eq. 7 rests on the L0^2 variance: no antithetic pairs, no baseline)
#   plain  explicit noise, s = 0.1, no variance reduction
#   anti   explicit, antithetic pairs (z, -z);   base  explicit, the clean-loss baseline L - L0
#   both   explicit, both (Table 1's dpulr_explicit)
#   -> OUT_DIR/vr.csv (one row per epoch), vr.png; the runs in OUT_DIR/RUN-bBATCH-sSIGMA0
#   VR_BATCH and VR_SIGMA (env) move it to another cell (its runs are kept apart by their
#   directory names, never reused for another cell); VR_RUNS picks runs (default all five)
# A run whose directory already holds its trace and all its epochs is not run again; one
# with fewer epochs is continued (--resume, the trace appended).
# --smoke: 1000 / 300 examples, 1 epoch, one run per part (s8_base; c001 and vr's ctrl with K 4).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SMOKE=${SMOKE:-0}
PART=""; OUT=""
for a in "$@"; do
  case $a in
    --smoke) SMOKE=1 ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    dpsgd|controller|vr) PART=$a ;;
    -*) echo "diagnose.sh: unknown option '$a'" >&2; exit 2 ;;
    *) OUT=$a ;;
  esac
done
[ -n "$PART" ] || { echo "diagnose.sh: give the part: dpsgd, controller or vr" >&2; exit 2; }
OUT=${OUT:-$HERE/diag}
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
DATA_DIR=${DATA_DIR:-${DPT_SHARED_DATASETS:-/usr/share/datasets}}
[ -x "$DPTRAIN" ] || { echo "diagnose.sh: $DPTRAIN not built (set DPTRAIN)" >&2; exit 2; }
[ -e "$DATA_DIR/mnist" ] || { echo "diagnose.sh: no MNIST under $DATA_DIR (set DATA_DIR)" >&2; exit 2; }
mkdir -p "$OUT"
COMMON=(--dataset mnist --data-dir "$DATA_DIR" --model mlp:784-128-64-32-10:gelu --loss ce --threads 1 --no-progress
        --delta 1e-5 --clip 1 --seed 1)
K=32
if [ "$SMOKE" = 1 ]; then COMMON+=(--max-train 1000 --max-test 300 --force); K=4; fi

# run NAME EPOCHS ARGS...: trains unless OUT/NAME holds EPOCHS epochs and its trace
run() {
  local name=$1 ep=$2; shift 2
  [ "$SMOKE" = 1 ] && ep=1
  local done=0
  if [ -s "$OUT/$name.trace" ] && [ -s "$OUT/$name/metrics.jsonl" ]; then
    done=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['epoch'])" "$OUT/$name/metrics.jsonl")
  fi
  if [ "$done" -ge "$ep" ]; then echo "reusing $OUT/$name ($done epochs)" >&2; return; fi
  # a shorter run is continued (its trace too), anything else replaced
  local mode=--overwrite
  [ "$done" -gt 0 ] && mode=--resume
  echo "run $name ($mode) ..." >&2
  "$DPTRAIN" train "${COMMON[@]}" "$@" --epochs "$ep" --out "$OUT/$name" $mode --trace "$OUT/$name.trace" \
    >> "$OUT/$name.log" 2>&1 || { cat "$OUT/$name.log" >&2; exit 1; }
}

if [ "$PART" = dpsgd ]; then
  G=(--algo dpsgd --batch-size 64 --optimizer sgd)
  RUNS="s8_base s8_none s8_lecun s8_lr02 s4_base s4_none"; [ "$SMOKE" = 1 ] && RUNS=s8_base
  for r in $RUNS; do
    case $r in
      s8_base) run $r 10 "${G[@]}" --sigma 8 --lr 0.1 ;;
      s8_none) run $r 10 "${G[@]}" --sigma 8 --lr 0.1 --normalize none ;;
      s8_lecun) run $r 10 "${G[@]}" --sigma 8 --lr 0.1 --init lecun ;;
      s8_lr02) run $r 10 "${G[@]}" --sigma 8 --lr 0.02 ;;
      s4_base) run $r 10 "${G[@]}" --sigma 4 --lr 0.1 ;;
      s4_none) run $r 10 "${G[@]}" --sigma 4 --lr 0.1 --normalize none ;;
    esac
  done
  CSV=$OUT/dpsgd_b64.csv; rm -f "$CSV"
  for r in $RUNS; do python3 "$HERE/trace_summary.py" "$CSV" "$r" "$OUT/$r" "$OUT/$r.trace"; done
  if command -v gnuplot >/dev/null; then
    PA=""; PB=""
    for r in $RUNS; do
      PA="$PA${PA:+, }'$CSV' using (stringcolumn(1) eq '$r' ? \$4 : NaN):5 with linespoints title '$r'"
      PB="$PB${PB:+, }'$CSV' using (stringcolumn(1) eq '$r' ? \$4 : NaN):9 with linespoints title '$r'"
    done
    gnuplot <<GP
set terminal pngcairo size 1100,450 noenhanced
set output "$OUT/dpsgd_b64.png"
set datafile separator ","
set multiplot layout 1,2 title "DP-SGD, MNIST MLP, batch 64 (q 64/60000), C 1, seed 1"
set key top right; set xlabel "epoch"; set ylabel "test accuracy (%)"; set yrange [0:100]
plot $PA
set ylabel "parameter norm"; set yrange [0:*]; set key top left
plot $PB
unset multiplot
GP
  fi
  echo "wrote $CSV"
elif [ "$PART" = vr ]; then
  VB=${VR_BATCH:-200}; VS=${VR_SIGMA:-8}
  U=(--algo dpulr --batch-size "$VB" --sigma0 "$VS" --copies "$K" --optimizer adam --lr 0.001
     --lr-schedule step:0.85:10 --sampler poisson-reject)
  RUNS=${VR_RUNS:-"ctrl plain anti base both"}; [ "$SMOKE" = 1 ] && RUNS=ctrl
  EX=(--ulr-noise explicit --ulr-std 0.1)
  for r in $RUNS; do
    case $r in
      ctrl) M=(--ulr-noise controller) ;;
      plain) M=("${EX[@]}" --no-baseline) ;;
      anti) M=("${EX[@]}" --antithetic --no-baseline) ;;
      base) M=("${EX[@]}" --baseline) ;;
      both) M=("${EX[@]}" --antithetic --baseline) ;;
      *) echo "diagnose.sh: VR_RUNS names '$r', not one of ctrl plain anti base both" >&2; exit 2 ;;
    esac
    run "$r-b$VB-s$VS" 5 "${U[@]}" "${M[@]}"
  done
  CSV=$OUT/vr.csv; rm -f "$CSV"
  for r in $RUNS; do python3 "$HERE/trace_summary.py" "$CSV" "$r" "$OUT/$r-b$VB-s$VS" "$OUT/$r-b$VB-s$VS.trace"; done
  if command -v gnuplot >/dev/null; then
    gnuplot <<GP
set terminal pngcairo size 1100,450 noenhanced
set output "$OUT/vr.png"
set datafile separator ","
set multiplot layout 1,2 title "DP-ULR, MNIST MLP, batch $VB, sigma0 $VS, K $K, Adam lr 0.001: the controller and the explicit mode with and without variance reduction"
set xlabel "epoch"; set key top left
set ylabel "test accuracy (%)"; set yrange [0:100]
plot for [r in "$RUNS"] '$CSV' using (stringcolumn(1) eq r ? \$4 : NaN):5 with linespoints title r
set ylabel "mean norm of the released direction"; set yrange [0:*]
plot for [r in "$RUNS"] '$CSV' using (stringcolumn(1) eq r ? \$4 : NaN):8 with linespoints title r
unset multiplot
GP
  fi
  echo "wrote $CSV"
else
  U=(--algo dpulr --batch-size 500 --sigma0 1 --copies "$K" --optimizer adam --lr-schedule step:0.85:10)
  RUNS="c001 e001 c0001"; [ "$SMOKE" = 1 ] && RUNS=c001
  for r in $RUNS; do
    case $r in
      c001) run $r 14 "${U[@]}" --ulr-noise controller --lr 0.01 ;;
      e001) run $r 4 "${U[@]}" --ulr-noise explicit --ulr-std 0.1 --no-baseline --lr 0.01 ;;
      c0001) run $r 2 "${U[@]}" --ulr-noise controller --lr 0.001 ;;
    esac
  done
  CSV=$OUT/controller.csv; rm -f "$CSV"
  EVERY=30; [ "$SMOKE" = 1 ] && EVERY=2
  for r in $RUNS; do python3 "$HERE/trace_summary.py" "$CSV" "$r" "$OUT/$r" "$OUT/$r.trace" --every $EVERY; done
  if command -v gnuplot >/dev/null; then
    gnuplot <<GP
set terminal pngcairo size 1200,800 noenhanced
set output "$OUT/controller.png"
set datafile separator ","
set datafile missing ""
set multiplot layout 2,2 title "DP-ULR, MNIST MLP, batch 500, sigma0 1, K $K, Adam (c001: controller lr 0.01, e001: explicit s 0.1 lr 0.01, c0001: controller lr 0.001)"
set xlabel "step"; set key top left
set ylabel "median s_l over 30 steps"; set logscale y
plot for [m=0:3] '$CSV' using (stringcolumn(1) eq 'c001' ? \$3 : NaN):(column(14 + 4*m)) with lines lw 2 title sprintf('c001 module %d', m), \
     for [m=0:3] '$CSV' using (stringcolumn(1) eq 'c0001' ? \$3 : NaN):(column(14 + 4*m)) with lines dt 2 title sprintf('c0001 module %d', m)
unset logscale y
set ylabel "test accuracy (%)"; set yrange [0:100]
plot for [r in "c001 e001 c0001"] '$CSV' using (stringcolumn(1) eq r ? \$3 : NaN):5 with linespoints title r
set ylabel "parameter norm"; set yrange [0:*]
plot for [r in "c001 e001 c0001"] '$CSV' using (stringcolumn(1) eq r ? \$3 : NaN):9 with lines lw 2 title r
set ylabel "fraction of estimates clipped"; set yrange [0:1.05]
plot for [m=0:3] '$CSV' using (stringcolumn(1) eq 'c001' ? \$3 : NaN):(column(17 + 4*m)) with lines title sprintf('c001 module %d', m), \
     for [m=0:3] '$CSV' using (stringcolumn(1) eq 'e001' ? \$3 : NaN):(column(17 + 4*m)) with lines dt 2 title sprintf('e001 module %d', m)
unset multiplot
GP
  fi
  echo "wrote $CSV"
fi
