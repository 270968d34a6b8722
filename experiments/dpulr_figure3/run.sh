#!/usr/bin/env bash
# DP-ULR Figure 3 ("Forward Learning with Differential Privacy", ICML): epsilon (delta 1e-5)
# against epochs for DP-SGD and DP-ULR on MNIST (N = 60000) at the paper's batches 64 / 200 /
# 500 (q = B/N: the paper rounds 64/60000 to 1e-3) and sigma0 = 1 / 4 / 8, 25 epochs.
# Pure accounting (`dptrain account`, seconds per panel): see figure3.py for the curves.
#
#   experiments/dpulr_figure3/run.sh [--smoke] [OUT_DIR]      (default OUT_DIR: results/)
#
# Writes OUT_DIR/figure3.csv and OUT_DIR/figure3.png (gnuplot; 3 x 3 panels, classic
# conversion as the paper converts, DP-SGD's PLD epsilon dotted).
# Environment: DPTRAIN (default build/dptrain), BATCHES ("64 200 500"), SIGMAS ("1 4 8"),
# EPOCHS (25). --smoke: batch 500, sigma0 4, 2 epochs.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$(cd "$HERE/.." && pwd)/dpulr_table1/args.sh"
dpulr_args 2,12 "$HERE/results" "$@"
if [ "$SMOKE" = 1 ]; then BATCHES=${BATCHES:-500}; SIGMAS=${SIGMAS:-4}; EPOCHS=${EPOCHS:-2}
else BATCHES=${BATCHES:-"64 200 500"}; SIGMAS=${SIGMAS:-"1 4 8"}; EPOCHS=${EPOCHS:-25}; fi
[ -x "$DPTRAIN" ] || { echo "run.sh: $DPTRAIN not built (set DPTRAIN)" >&2; exit 2; }
mkdir -p "$OUT"
python3 "$HERE/figure3.py" "$DPTRAIN" "$OUT" "$BATCHES" "$SIGMAS" "$EPOCHS" 60000
command -v gnuplot >/dev/null || { echo "wrote $OUT/figure3.csv (no gnuplot: no plot)"; exit 0; }
# one data block per (batch, sigma0, curve): epoch eps_classic eps_pld
python3 - "$OUT/figure3.csv" "$OUT/figure3.dat" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keys = []
for r in rows:
    k = (int(r["batch"]), float(r["sigma0"]), r["curve"])
    if k not in keys: keys.append(k)
with open(sys.argv[2], "w") as f:
    for k in keys:
        f.write("# batch %d sigma0 %g %s\n" % k)
        for r in rows:
            if (int(r["batch"]), float(r["sigma0"]), r["curve"]) == k:
                f.write("%s %s %s\n" % (r["epoch"], r["epsilon_classic"], r["epsilon_pld"] or "NaN"))
        f.write("\n\n")
PY
read -r -a BA <<<"$BATCHES"
read -r -a SA <<<"$SIGMAS"
{
  echo "set terminal pngcairo size $((380 * ${#SA[@]})),$((300 * ${#BA[@]})) noenhanced font ',9'"
  echo "set output '$OUT/figure3.png'"
  echo "set datafile missing 'NaN'"
  echo "set multiplot layout ${#BA[@]},${#SA[@]} title 'Figure 3: epsilon (delta 1e-5) vs epochs, MNIST N = 60000 (classic RDP conversion as the paper; DP-SGD PLD dotted)'"
  echo "set key top left; set xlabel 'epoch'; set ylabel 'epsilon'"
  blk=0
  for B in "${BA[@]}"; do
    for S in "${SA[@]}"; do
      echo "set title 'batch $B (q = $B/60000), sigma0 $S'"
      echo "plot '$OUT/figure3.dat' index $blk using 1:2 with lines lw 2 title 'DP-SGD (RDP)', \\"
      echo "     '' index $blk using 1:3 with lines dt 3 lc rgb 'black' title 'DP-SGD (PLD)', \\"
      echo "     '' index $((blk + 1)) using 1:2 with lines dt 2 lw 2 title 'DP-ULR, default N_B', \\"
      echo "     '' index $((blk + 2)) using 1:2 with lines lw 1 title 'DP-ULR, N_B = qN'"
      blk=$((blk + 3))
    done
  done
  echo "unset multiplot"
} | gnuplot
echo "wrote $OUT/figure3.csv and $OUT/figure3.png"
