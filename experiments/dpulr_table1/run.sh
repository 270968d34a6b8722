#!/usr/bin/env bash
# DP-ULR Table 1 (MNIST, MLP 784-128-64-32-10 GELU) and Figure 2 of "Forward Learning with
# Differential Privacy" (ICML version), with our numbers beside the paper's.
#
#   experiments/dpulr_table1/run.sh [--smoke] [OUT_DIR]
#
# Writes OUT_DIR/table1.csv (one row per run: algorithm, sampling, batch, sigma0, K,
# epochs, N_B, test accuracy, the epsilon the run's ledger really spent under both
# conversions or "none" when not accounted, the paper's accuracy), OUT_DIR/figure2.csv
# (ratio of the rejection term to the SGM term at alpha 1.1, sigma0 4, from our
# accountant) and the PNGs table1.png and figure2.png (gnuplot).
# Environment (full defaults = the paper's grid; each run is single-threaded, one at a time):
#   DPTRAIN   binary (default build/dptrain)       DATA_DIR  datasets (default $DPT_SHARED_DATASETS)
#   BATCHES   "64 200 500"   SIGMAS "0.5 1 2 4 8"  EPOCHS 25   K 32
#   MODES     "reject shuffle dpsgd" (DP-ULR accounted / DP-ULR shuffled, NOT accounted / DP-SGD;
#             MODES="" computes Figure 2 only)
#   MAX_TRAIN 0 (all 60000)  THREADS 1   NOISE controller|explicit
#   ULR_OPT   "--optimizer adam --lr 0.01 --lr-schedule step:0.85:10" (the paper's DP-ULR optimizer)
#   ULR_EXTRA extra DP-ULR flags, e.g. "--antithetic --baseline" (explicit mode only)
# --smoke (or SMOKE=1): 1000 examples, batch 64, sigma0 1, 1 epoch, K 4, a 3 x 3 Figure 2.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SMOKE=${SMOKE:-0}
OUT=""
for a in "$@"; do
  case $a in
    --smoke) SMOKE=1 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) OUT=$a ;;
  esac
done
OUT=${OUT:-$HERE/out}
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
DATA_DIR=${DATA_DIR:-${DPT_SHARED_DATASETS:-/usr/share/datasets}}
if [ "$SMOKE" = 1 ]; then
  BATCHES=${BATCHES:-64}; SIGMAS=${SIGMAS:-1}; EPOCHS=${EPOCHS:-1}; K=${K:-4}; MAX_TRAIN=${MAX_TRAIN:-1000}
  FIG_N=${FIG_N:-"1000 100000 10000000"}; FIG_F=${FIG_F:-"0.5 0.8 1.0"}
else
  BATCHES=${BATCHES-"64 200 500"}; SIGMAS=${SIGMAS-"0.5 1 2 4 8"}; EPOCHS=${EPOCHS:-25}; K=${K:-32}
  MAX_TRAIN=${MAX_TRAIN:-0}
  FIG_N=${FIG_N:-"100 300 1000 3000 10000 30000 100000 300000 1000000"}
  FIG_F=${FIG_F:-"0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.85 0.9 0.95 1.0"}
fi
MODES=${MODES-"reject shuffle dpsgd"}  # MODES="" : Figure 2 only
THREADS=${THREADS:-1}
NOISE=${NOISE:-controller}
ULR_OPT=${ULR_OPT:-"--optimizer adam --lr 0.01 --lr-schedule step:0.85:10"}
ULR_EXTRA=${ULR_EXTRA:-}
read -r -a ULR_OPT_A <<<"$ULR_OPT"
read -r -a ULR_EXTRA_A <<<"$ULR_EXTRA"
[ -x "$DPTRAIN" ] || { echo "run.sh: $DPTRAIN not built (set DPTRAIN)" >&2; exit 2; }
[ -e "$DATA_DIR/mnist" ] || { echo "run.sh: no MNIST under $DATA_DIR (set DATA_DIR)" >&2; exit 2; }
mkdir -p "$OUT/runs"

# the paper's validation accuracy (Table 1), by algorithm, batch and sigma0
paper() { # paper ALGO BATCH SIGMA
  local key="$1:$2:$3"
  case $key in
    dpulr:500:0.5) echo 94.19;; dpulr:500:1) echo 92.04;; dpulr:500:2) echo 90.31;; dpulr:500:4) echo 87.63;; dpulr:500:8) echo 84.53;;
    dpulr:200:0.5) echo 91.98;; dpulr:200:1) echo 90.11;; dpulr:200:2) echo 87.11;; dpulr:200:4) echo 84.45;; dpulr:200:8) echo 80.05;;
    dpulr:64:0.5) echo 86.12;; dpulr:64:1) echo 82.73;; dpulr:64:2) echo 78.80;; dpulr:64:4) echo 72.14;; dpulr:64:8) echo 58.65;;
    dpsgd:64:0.5) echo 94.14;; dpsgd:64:1) echo 91.20;; dpsgd:64:2) echo 78.32;; dpsgd:64:4) echo 68.73;; dpsgd:64:8) echo 32.07;;
    dpsgd:200:0.5) echo 90.68;; dpsgd:200:1) echo 90.77;; dpsgd:200:2) echo 90.95;; dpsgd:200:4) echo 89.63;; dpsgd:200:8) echo 79.14;;
    dpsgd:500:0.5) echo 87.98;; dpsgd:500:1) echo 87.98;; dpsgd:500:2) echo 88.00;; dpsgd:500:4) echo 87.97;; dpsgd:500:8) echo 88.16;;
    *) echo "";;
  esac
}

CSV=$OUT/table1.csv
[ -s "$CSV" ] || echo "algorithm,sampling,batch,sigma0,K,epochs,min_batch,test_acc,epsilon_balle,epsilon_classic,paper_acc,wall_s,settings" > "$CSV"
COMMON=(--dataset mnist --data-dir "$DATA_DIR" --model mlp:784-128-64-32-10:gelu --loss ce --threads "$THREADS"
        --no-progress --quiet --epochs "$EPOCHS" --max-train "$MAX_TRAIN" --delta 1e-5 --clip 1)
for B in $BATCHES; do
  for S in $SIGMAS; do
    for M in $MODES; do
      name="$M-b$B-s$S"
      dir=$OUT/runs/$name
      if grep -q "^$([ "$M" = dpsgd ] && echo dpsgd || echo dpulr),$([ "$M" = shuffle ] && echo shuffle || echo poisson[a-z_]*),$B,$S,.*,$EPOCHS," "$CSV"; then
        echo "skip $name (in $CSV)"; continue
      fi
      case $M in
        reject)  args=(--algo dpulr --sigma0 "$S" --copies "$K" --ulr-noise "$NOISE" --sampler poisson-reject
                       "${ULR_OPT_A[@]}" "${ULR_EXTRA_A[@]}") ;;
        shuffle) args=(--algo dpulr --sigma0 "$S" --copies "$K" --ulr-noise "$NOISE" --sampler shuffle
                       "${ULR_OPT_A[@]}" "${ULR_EXTRA_A[@]}") ;;
        dpsgd)   args=(--algo dpsgd --sigma "$S" --optimizer sgd --lr 0.1) ;;
      esac
      [ "$MAX_TRAIN" != 0 ] && args+=(--force)  # delta 1e-5 >= 1/N on a subset
      rm -rf "$dir"
      echo "run $name ..." >&2
      t0=$(date +%s.%N)
      log=$("$DPTRAIN" train "${COMMON[@]}" "${args[@]}" --batch-size "$B" --out "$dir" 2>&1) || { echo "$log" >&2; exit 1; }
      t1=$(date +%s.%N)
      acc=$(python3 -c "import json,sys; print('%.2f' % (100*json.loads(open(sys.argv[1]).readlines()[-1])['test_accuracy']))" "$dir/metrics.jsonl")
      nb=""; eb=none; ec=none
      if [ -e "$dir/ledger.json" ]; then
        eb=$("$DPTRAIN" account --ledger "$dir/ledger.json" --json | python3 -c "import json,sys; print('%.4f' % json.load(sys.stdin)['epsilon_rdp'])")
        ec=$("$DPTRAIN" account --ledger "$dir/ledger.json" --conversion classic --json | python3 -c "import json,sys; print('%.4f' % json.load(sys.stdin)['epsilon_rdp'])")
        nb=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['meta'].get('min_batch',''))" "$dir/ledger.json")
      fi
      algo=$([ "$M" = dpsgd ] && echo dpsgd || echo dpulr)
      samp=$([ "$M" = shuffle ] && echo shuffle || ([ "$M" = dpsgd ] && echo poisson || echo poisson_reject))
      kk=$([ "$M" = dpsgd ] && echo "" || echo "$K")
      st=$([ "$M" = dpsgd ] && echo "sgd lr 0.1" || echo "$NOISE $ULR_OPT $ULR_EXTRA")
      echo "$algo,$samp,$B,$S,$kk,$EPOCHS,$nb,$acc,$eb,$ec,$(paper "$algo" "$B" "$S"),$(python3 -c "print('%.1f' % ($t1-$t0))"),${st//,/;}" >> "$CSV"
      tail -1 "$CSV" >&2
    done
  done
done

# Figure 2: rejection term / SGM term at alpha 1.1, sigma0 4, q = 0.01, over N and N_B / qN
FIG=$OUT/figure2.csv
if [ -s "$FIG" ] && [ "${REDO_FIG:-0}" != 1 ]; then
  echo "reusing $FIG (REDO_FIG=1 recomputes it)" >&2
  FIG_N=""
else
  echo "N,nb_fraction,min_batch,ratio" > "$FIG"
fi
for N in $FIG_N; do
  for F in $FIG_F; do
    NB=$(python3 -c "import math; print(max(1, math.floor($F*0.01*$N + 1e-9)))")
    r=$("$DPTRAIN" account --algo dpulr --sample-rate 0.01 --dataset-size "$N" --sigma 4 --steps 1 --min-batch "$NB" --json \
        | python3 -c "import json,sys; print('%.6g' % json.load(sys.stdin)['ratio_at_order_1_1'])")
    echo "$N,$F,$NB,$r" >> "$FIG"
  done
done

if command -v gnuplot >/dev/null; then
  python3 - "$CSV" "$OUT/table1.dat" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w") as f:
    for algo, samp in (("dpulr", "poisson_reject"), ("dpulr", "shuffle"), ("dpsgd", "poisson")):
        for b in sorted({int(r["batch"]) for r in rows}):
            sel = sorted((float(r["sigma0"]), r) for r in rows if r["algorithm"] == algo and r["sampling"] == samp and int(r["batch"]) == b)
            if not sel: continue
            # the block's first line is its title (gnuplot's columnheader), not a data point
            f.write('"%s %s batch %d" acc paper\n' % (algo, samp, b))
            for s, r in sel:
                f.write("%g %s %s\n" % (s, r["test_acc"], r["paper_acc"] or "NaN"))
            f.write("\n\n")
PY
  nblk=$(grep -c '^"' "$OUT/table1.dat" || true)
  [ "$nblk" -gt 0 ] && gnuplot <<GP
set terminal pngcairo size 900,600 noenhanced
set output "$OUT/table1.png"
set title "MNIST MLP 784-128-64-32-10: test accuracy vs sigma0 (points: ours, dashed: paper)"
set xlabel "sigma0"; set ylabel "accuracy (%)"; set logscale x; set xrange [0.4:10]; set key bottom left
set datafile missing "NaN"
plot for [i=0:$((nblk > 0 ? nblk - 1 : 0))] "$OUT/table1.dat" index i using 1:2 with linespoints lt i+1 title columnheader(1), \
     for [i=0:$((nblk > 0 ? nblk - 1 : 0))] "$OUT/table1.dat" index i using 1:3 with lines lt i+1 dt 2 notitle
GP
  python3 - "$FIG" "$OUT/figure2.dat" <<'PY'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w") as f:
    last = None
    for r in rows:
        if last is not None and r["N"] != last: f.write("\n")
        last = r["N"]
        v = float(r["ratio"])
        f.write("%s %s %g\n" % (r["N"], r["nb_fraction"], math.log10(v) if v > 0 else -300))
PY
  gnuplot <<GP
set terminal pngcairo size 800,600 noenhanced
set output "$OUT/figure2.png"
set title "log10(rejection term / SGM term), alpha 1.1, sigma0 4, q 0.01 (our accountant)"
set xlabel "dataset size N"; set ylabel "N_B / qN"; set logscale x
set cbrange [-12:2]; set palette rgbformulae 33,13,10
set view map
splot "$OUT/figure2.dat" using 1:2:(\$3 < -12 ? -12 : \$3) with pm3d notitle
GP
fi
echo "wrote $CSV, $FIG$(command -v gnuplot >/dev/null && echo ", $OUT/table1.png, $OUT/figure2.png")"
