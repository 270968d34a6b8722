#!/usr/bin/env bash
# Test accuracy against epoch, one curve per run (first column) of each CSV in $CSVS
# (columns run,epoch,step,train_loss,test_accuracy,epsilon_rdp,...), and epsilon (RDP) on
# the right axis, one dashed curve per group of runs with the same epsilon after epoch 1
# (the same q, sigma and sampler spend the same per step; the group's longest run is drawn,
# and the title names the group's first run and how many more it holds). By default it
# draws the committed comparison plot results/dpulr.png (docs/cnn.md, docs/dpulr.md Section
# 4.3) from the committed CSVs only:
# DP-SGD from results/results.csv, DP-ULR from results/dpulr_long.csv (session 28's long
# runs; issue 10's short ones are in results/dpulr_results.csv) and results/dpulr_base.csv
# (session 31: the baseline alone); run.sh calls it for the plot of its own OUT.
#   usage: plot_results.sh [OUT_PNG]
#   env: RESULTS (default: this directory's results/), CSVS (default "results.csv
#        dpulr_long.csv dpulr_base.csv"), TITLE
case "${1:-}" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${RESULTS:-$HERE/results}
PNG=${1:-$RESULTS/dpulr.png}
CSVS=${CSVS:-results.csv dpulr_long.csv dpulr_base.csv}
TITLE=${TITLE:-CIFAR-10 ResNet-5, C 1: DP-SGD (q 0.00128, sigma 1, SGD 0.1) and DP-ULR (q 0.02, sigma0 5, K 4, Adam)}
for f in $CSVS; do
  [ -s "$RESULTS/$f" ] || { echo "plot_results.sh: $RESULTS/$f is missing or empty" >&2; exit 2; }
done
command -v gnuplot > /dev/null || { echo "plot_results.sh: gnuplot not found (scripts/setup.sh installs it)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PLOT=""
declare -A EPS_DAT EPS_LEN EPS_FIRST EPS_MORE # by epsilon after epoch 1: the longest run's data, its length,
                                              # the first run's name, how many more runs
EPS_KEYS=()
i=0
for csv in $CSVS; do
  i=$((i + 1))
  mapfile -t ROWS < <(tail -n +2 "$RESULTS/$csv" | cut -d, -f1 | awk '!seen[$0]++')
  for row in "${ROWS[@]}"; do
    dat="$T/$i-$row.dat" # the same run name may appear in two CSVs
    awk -F, -v r="$row" 'NR > 1 && $1 == r' "$RESULTS/$csv" > "$dat"
    PLOT="$PLOT${PLOT:+, }\"$dat\" using 2:(100*\$5) with linespoints title \"$row\""
    key=$(awk -F, '$2 == 1 { print $6; exit }' "$dat")
    [ -n "$key" ] || key="$row (no epoch 1)"
    n=$(wc -l < "$dat")
    if [ -z "${EPS_DAT[$key]+x}" ]; then
      EPS_KEYS+=("$key"); EPS_FIRST[$key]=$row; EPS_DAT[$key]=$dat; EPS_LEN[$key]=$n; EPS_MORE[$key]=0
    else
      EPS_MORE[$key]=$((EPS_MORE[$key] + 1))
      [ "$n" -le "${EPS_LEN[$key]}" ] || { EPS_DAT[$key]=$dat; EPS_LEN[$key]=$n; }
    fi
  done
done
[ -n "$PLOT" ] || { echo "plot_results.sh: no rows in $RESULTS/*.csv" >&2; exit 2; }
for key in "${EPS_KEYS[@]}"; do
  more=""; [ "${EPS_MORE[$key]}" = 0 ] || more=" and ${EPS_MORE[$key]} more run(s) of its q and sigma"
  PLOT="$PLOT, \"${EPS_DAT[$key]}\" using 2:6 axes x1y2 with lines dashtype 2 title \"epsilon (RDP) of ${EPS_FIRST[$key]}$more\""
done
gnuplot <<GP
set terminal pngcairo size 1000,720 noenhanced
set output "$PNG"
set datafile separator ","
set key below maxrows 5
set xlabel "epoch"
set ylabel "test accuracy (%)"
set y2label "epsilon (RDP, delta 1e-5)"
set y2tics
set ytics nomirror
set title "$TITLE"
plot $PLOT
GP
echo "wrote $PNG"
