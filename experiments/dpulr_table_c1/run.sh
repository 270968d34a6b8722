#!/usr/bin/env bash
# DP-ULR Table C1 ("Forward Learning with Differential Privacy", ICML, Appendix C.1): MLPs of
# three sizes on MNIST at sigma0 = 8 and batches 64 / 128 / 256, DP-ULR against DP-SGD, all
# other settings as Table 1 (experiments/dpulr_table1). The paper gives only the parameter
# ratios (medium ~2.5x, large ~5x small); the widths are ours (grid.py MODELS):
#   small  784-128-64-32-10 (111146 parameters, Table 1's), medium 784-288-144-72-10 (2.51x),
#   large  784-512-256-128-10 (5.11x), GELU.
#
#   experiments/dpulr_table_c1/run.sh [--smoke] [--summary-only] [OUT_DIR]   (default OUT_DIR: out/)
#
# Writes OUT_DIR/runs.csv and summary.csv (as experiments/dpulr_table1/grid.py describes,
# the paper's Table C1 beside ours) and OUT_DIR/table_c1.png. Runs already in runs.csv are
# skipped (several processes may share OUT_DIR). --summary-only runs nothing: it rebuilds
# summary.csv and the plot from OUT_DIR/runs.csv (results/ was written so from the runs').
# Environment: DPTRAIN, DATA_DIR, THREADS (1), CONFIGS ("dpulr_explicit dpulr_baseline dpsgd
# dpsgd_lr0.02": DP-ULR with antithetic pairs and the baseline, DP-ULR with the baseline alone
# (Table 1's best), the paper's DP-SGD protocol, DP-SGD at the lr scaled to the noise; grid.py
# names them), MODELS ("small medium large"), BATCHES ("64 128 256"), SIGMAS (8), SEEDS ("1 2 3"),
# EPOCHS (25), K (32), MAX_TRAIN / MAX_TEST (0 = all).
# --smoke: 1000 / 300 examples, models small and medium, batch 128, 1 seed, 1 epoch, K 4.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$(cd "$HERE/.." && pwd)/dpulr_table1/args.sh"
ALLOW_SUMMARY_ONLY=1 dpulr_args 2,19 "$HERE/out" "$@"
if [ "$SMOKE" = 1 ]; then
  CONFIGS=${CONFIGS:-"dpulr_explicit dpsgd"}; MODELS=${MODELS:-"small medium"}; BATCHES=${BATCHES:-128}
  SIGMAS=${SIGMAS:-8}; SEEDS=${SEEDS:-1}; EPOCHS=${EPOCHS:-1}; K=${K:-4}; MAX_TRAIN=${MAX_TRAIN:-1000}; MAX_TEST=${MAX_TEST:-300}
else
  CONFIGS=${CONFIGS:-"dpulr_explicit dpulr_baseline dpsgd dpsgd_lr0.02"}; MODELS=${MODELS:-"small medium large"}
  BATCHES=${BATCHES:-"64 128 256"}; SIGMAS=${SIGMAS:-8}; SEEDS=${SEEDS:-"1 2 3"}; EPOCHS=${EPOCHS:-25}; K=${K:-32}
  MAX_TRAIN=${MAX_TRAIN:-0}; MAX_TEST=${MAX_TEST:-0}
fi
THREADS=${THREADS:-1}
GRID=$ROOT/experiments/dpulr_table1/grid.py
if [ "$SUMMARY_ONLY" = 1 ]; then
  [ -s "$OUT/runs.csv" ] || { echo "run.sh: --summary-only: no $OUT/runs.csv to summarize" >&2; exit 2; }
else
  [ -x "$DPTRAIN" ] || { echo "run.sh: $DPTRAIN not built (set DPTRAIN)" >&2; exit 2; }
  [ -e "$DATA_DIR/mnist" ] || { echo "run.sh: no MNIST under $DATA_DIR (set DATA_DIR)" >&2; exit 2; }
  mkdir -p "$OUT"
  python3 "$GRID" run --dptrain "$DPTRAIN" --data-dir "$DATA_DIR" --out "$OUT" --configs "$CONFIGS" --models "$MODELS" \
    --batches "$BATCHES" --sigmas "$SIGMAS" --seeds "$SEEDS" --epochs "$EPOCHS" --copies "$K" \
    --max-train "$MAX_TRAIN" --max-test "$MAX_TEST" --threads "$THREADS"
fi
python3 "$GRID" summary --out "$OUT" --table c1
command -v gnuplot >/dev/null || { echo "wrote $OUT/summary.csv (no gnuplot: no plot)"; exit 0; }
# one panel per batch: each configuration of CONFIGS against the model size (final epoch, mean
# +- std over seeds), the paper's DP-ULR and DP-SGD (paper.csv) dashed in the colour of ours
python3 - "$OUT/summary.csv" "$ROOT/experiments/dpulr_table1/paper.csv" "$OUT/table_c1.dat" "$CONFIGS" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
paper = {(r["algorithm"], r["model"], r["batch"]): r["valid_acc"]
         for r in csv.DictReader(l for l in open(sys.argv[2]) if not l.startswith("#")) if r["table"] == "c1"}
configs = sys.argv[4].split()
names = {"dpulr_explicit": "DP-ULR explicit", "dpulr_baseline": "DP-ULR baseline only", "dpsgd": "DP-SGD lr 0.1 (the paper's)", "dpsgd_lr0.02": "DP-SGD lr 0.02"}
order = {"small": 1, "medium": 2, "large": 3}
cell = {(r["config"], r["model"], r["batch"]): r for r in rows}
with open(sys.argv[3], "w") as f:
    for b in sorted({r["batch"] for r in rows}, key=int):
        # the block's header line names the columns (gnuplot's columnheader)
        f.write('"model" %s "paper DP-ULR" "paper DP-SGD"\n' % " ".join('"%s" "std"' % names.get(c, c) for c in configs))
        for m, x in sorted(order.items(), key=lambda kv: kv[1]):
            vals = []
            for c in configs:
                r = cell.get((c, m, b))
                vals += [r["final_mean"], r["final_std"] or "0"] if r else ["NaN", "NaN"]
            f.write("%d %s %s %s\n" % (x, " ".join(vals), paper.get(("dpulr", m, b), "NaN"), paper.get(("dpsgd", m, b), "NaN")))
        f.write("\n\n")
PY
batches=$(python3 -c 'import csv,sys; print(" ".join(sorted({r["batch"] for r in csv.DictReader(open(sys.argv[1]))}, key=int)))' "$OUT/summary.csv")
nb=$(echo "$batches" | wc -w)
nc=$(echo "$CONFIGS" | wc -w)
# the paper's lines take the colour of our first configuration of the same algorithm
lt_of() { local i=0 c; for c in $CONFIGS; do i=$((i + 1)); case $c in $1*) echo $i; return;; esac; done; echo $((nc + $2)); }
ulr_lt=$(lt_of dpulr 1); sgd_lt=$(lt_of dpsgd 2)
gnuplot <<GP
set terminal pngcairo size $((330 * nb + 250)),520 noenhanced
set output "$OUT/table_c1.png"
set multiplot layout 1,$nb title "Table C1: MNIST, sigma0 8, final-epoch test accuracy (mean +- std over seeds; dashed: the paper)"
set xtics ("small" 1, "medium" 2, "large" 3); set xrange [0.7:3.3]; set yrange [0:100]
set datafile missing "NaN"; set grid ytics
batches = "$batches"
do for [p=1:$nb] {
  set title "batch ".word(batches, p)
  if (p == 1) { set ylabel "accuracy (%)" } else { unset ylabel }
  if (p == $nb) { set key bottom right } else { unset key }  # the largest batch leaves the bottom free
  plot for [c=1:$nc] "$OUT/table_c1.dat" index p-1 using 1:(column(2*c)):(column(2*c+1)) with yerrorlines lt c lw 2 title columnheader(2*c), \
       "" index p-1 using 1:(column(2*$nc+2)) with lines lt $ulr_lt dt 2 title columnheader(2*$nc+2), \
       "" index p-1 using 1:(column(2*$nc+3)) with lines lt $sgd_lt dt 2 title columnheader(2*$nc+3)
}
unset multiplot
GP
rm -f "$OUT/table_c1.dat" "$OUT/summary.dat"
echo "wrote $OUT/runs.csv, $OUT/summary.csv, $OUT/table_c1.png"
