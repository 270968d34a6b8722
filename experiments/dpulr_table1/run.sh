#!/usr/bin/env bash
# DP-ULR Table 1 (MNIST, MLP 784-128-64-32-10 GELU) and Figure 2 of "Forward Learning with
# Differential Privacy" (ICML version), several seeds, with the paper's numbers beside ours.
#
#   experiments/dpulr_table1/run.sh [--smoke] [OUT_DIR]          (default OUT_DIR: out/)
#
# Runs every (configuration, batch, sigma0, seed) through grid.py and writes
#   OUT_DIR/runs.csv     one row per run: final and best-epoch test accuracy, the best epoch,
#                        the epsilon the run's ledger holds (RDP, Balle and classic
#                        conversions; DP-SGD also PLD; "none" for the shuffled DP-ULR runs,
#                        which no accountant covers), N_B, seconds per epoch, the command
#   OUT_DIR/summary.csv  per cell: mean +- sample std over seeds of final and best accuracy,
#                        the best epochs, epsilon, the paper's valid accuracy +- std (paper.csv)
#   OUT_DIR/table1.png   accuracy vs sigma0 per configuration and batch (paper dashed)
#   OUT_DIR/figure2.csv, figure2.png   rejection term / SGM term (alpha 1.1, sigma0 4, q 0.01)
# A run already in runs.csv is skipped, so the script continues a grid cut short, and two
# copies may run at once on the same OUT_DIR (each run is claimed first).
# Environment (defaults = the paper's grid, our configurations; see grid.py CONFIGS):
#   DPTRAIN build/dptrain   DATA_DIR $DPT_SHARED_DATASETS   THREADS 1 (per run)
#   CONFIGS "dpulr_explicit dpsgd dpsgd_pixels01"   BATCHES "500 200 64"   SIGMAS "0.5 1 2 4 8"
#   SEEDS "1 2 3"   EPOCHS 25   K 32 (DP-ULR copies)   MAX_TRAIN 0 (all)   MAX_TEST 0 (all)
#   CONFIGS="" computes Figure 2 only.
# --smoke (or SMOKE=1): 1000 / 300 examples, batch 100, sigma0 1, seeds 1 2, 2 epochs, K 4,
#   configurations dpulr_explicit dpsgd, a 3 x 3 Figure 2.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$(cd "$HERE/.." && pwd)/dpulr_table1/args.sh"
dpulr_args 2,27 "$HERE/out" "$@"
if [ "$SMOKE" = 1 ]; then
  CONFIGS=${CONFIGS-"dpulr_explicit dpsgd"}; BATCHES=${BATCHES:-100}; SIGMAS=${SIGMAS:-1}
  SEEDS=${SEEDS:-"1 2"}; EPOCHS=${EPOCHS:-2}; K=${K:-4}; MAX_TRAIN=${MAX_TRAIN:-1000}; MAX_TEST=${MAX_TEST:-300}
  FIG_N=${FIG_N:-"1000 100000 10000000"}; FIG_F=${FIG_F:-"0.5 0.8 1.0"}
else
  CONFIGS=${CONFIGS-"dpulr_explicit dpsgd dpsgd_pixels01"}; BATCHES=${BATCHES:-"500 200 64"}
  SIGMAS=${SIGMAS:-"0.5 1 2 4 8"}; SEEDS=${SEEDS:-"1 2 3"}; EPOCHS=${EPOCHS:-25}; K=${K:-32}
  MAX_TRAIN=${MAX_TRAIN:-0}; MAX_TEST=${MAX_TEST:-0}
  FIG_N=${FIG_N:-"100 300 1000 3000 10000 30000 100000 300000 1000000"}
  FIG_F=${FIG_F:-"0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.85 0.9 0.95 1.0"}
fi
THREADS=${THREADS:-1}
[ -x "$DPTRAIN" ] || { echo "run.sh: $DPTRAIN not built (set DPTRAIN)" >&2; exit 2; }
mkdir -p "$OUT"
if [ -n "$CONFIGS" ]; then
  [ -e "$DATA_DIR/mnist" ] || { echo "run.sh: no MNIST under $DATA_DIR (set DATA_DIR)" >&2; exit 2; }
  python3 "$HERE/grid.py" run --dptrain "$DPTRAIN" --data-dir "$DATA_DIR" --out "$OUT" --configs "$CONFIGS" \
    --models small --batches "$BATCHES" --sigmas "$SIGMAS" --seeds "$SEEDS" --epochs "$EPOCHS" --copies "$K" \
    --max-train "$MAX_TRAIN" --max-test "$MAX_TEST" --threads "$THREADS"
fi
if [ -s "$OUT/runs.csv" ]; then python3 "$HERE/grid.py" summary --out "$OUT" --table table1; fi

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
  if [ -s "$OUT/summary.dat" ]; then
    # one panel per batch size, one colour per configuration in every panel, the paper's
    # DP-ULR and DP-SGD dashed (its "DP-ULR" is the controller on shuffled batches)
    python3 - "$OUT/summary.dat" "$OUT/table1.png" <<'PY' | gnuplot
import re, sys
dat, png = sys.argv[1], sys.argv[2]
blocks, rows = [], []  # (config, model, batch) per block; its number of sigma0 rows
for l in open(dat):
    if l.startswith('"'):
        blocks.append(re.match(r'"(\S+) (\S+) batch (\S+)"', l).groups())
        rows.append(0)
    elif l.strip():
        rows[-1] += 1
colour = {"dpulr_explicit": "#d62728", "dpulr_controller": "#ff7f0e", "dpulr_explicit_shuffle": "#8c564b",
          "dpsgd": "#1f77b4", "dpsgd_pixels01": "#17becf", "dpsgd_lr0.02": "#000000", "dpsgd_adam": "#7f7f7f"}
batches = []
for _, _, b in blocks:
    if b not in batches:
        batches.append(b)
batches.sort(key=lambda b: -int(b))
print('set terminal pngcairo size %d,560 noenhanced' % (430 * len(batches) + 40))
print('set output "%s"' % png)
print('set datafile missing "NaN"')
print('set multiplot layout 1,%d title "MNIST MLP 784-128-64-32-10: final-epoch test accuracy vs sigma0, '
      'mean +- std over seeds (dashed: the paper)"' % len(batches))
print('set xlabel "sigma0"; set ylabel "accuracy (%)"; set logscale x; set xrange [0.4:10]; set yrange [0:100]')
print('set key bottom left')
for b in batches:
    plots, paper = [], {}
    for i, (cfg, _, bb) in enumerate(blocks):
        if bb != b:
            continue
        plots.append('"%s" index %d using 1:2:3 with yerrorlines lc rgb "%s" pt 7 ps 0.6 title "%s"'
                     % (dat, i, colour.get(cfg, "#9467bd"), cfg))
        algo = "dpulr" if cfg.startswith("dpulr") else "dpsgd"
        if rows[i] > rows[paper.get(algo, i)] or algo not in paper:  # the block with most sigma0s
            paper[algo] = i
    for algo, i in sorted(paper.items(), reverse=True):
        plots.append('"%s" index %d using 1:5 with lines lc rgb "%s" dt 2 title "paper %s"'
                     % (dat, i, "#d62728" if algo == "dpulr" else "#1f77b4", "DP-ULR" if algo == "dpulr" else "DP-SGD"))
    print('set title "batch %s"' % b)
    print('plot ' + ", \\\n     ".join(plots))
print('unset multiplot')
PY
  fi
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
echo "wrote $OUT/runs.csv, $OUT/summary.csv, $OUT/figure2.csv$(command -v gnuplot >/dev/null && echo ", $OUT/table1.png, $OUT/figure2.png")"
