#!/usr/bin/env bash
# Tramer & Boneh 2021, "Differentially Private Learning Needs Better Features (or Much More
# Data)", Table 1 at (epsilon 3, delta 1e-5): the recipes of their code's README as the
# presets `dptrain train --preset tb-*` (cli/presets.c: hyperparameters from the paper's
# code, none tuned here, none chosen on the test set), each run with several seeds. Writes
#   OUT/runs.csv     one row per run: preset, dataset, model, seed, epsilon (the default
#                    accountant's, as printed), accountant, epsilon_rdp, sigma, steps,
#                    test_accuracy (final epoch, never the best one), seconds (training)
#   OUT/summary.csv  dataset, model, epsilon, delta, seeds, test_accuracy_mean,
#                    test_accuracy_std, seconds_per_run, paper_accuracy
#   OUT/accuracy.png ours (mean +- std) beside the paper's number (gnuplot)
# usage: run.sh [--smoke] [--seeds "1 2 3"] [--only "PRESET ..."] [--summary-only] [OUT]
#   --summary-only: no training; the summary and the plot from the runs in OUT/runs.csv
#   (e.g. of an invocation stopped part way: every finished run has its row)
#   env: DPTRAIN (binary), DATA_DIR (holding mnist/; Fashion-MNIST from the Debian package
#   when absent there), THREADS (default 2)
#   --smoke: 2000 training / 500 test examples, expected batch 256, 2 epochs, one seed,
#            scatter-linear only (a ctest runs it)
# Presets (default): tb-cnn-mnist tb-cnn-fmnist tb-scatter-linear-fmnist tb-scatter-cnn-fmnist;
# with --only also tb-scatter-{linear,cnn}-{mnist,cifar10} (their features normalized with DP
# channel statistics, the `fbn` layer; the CIFAR-10 ones take about an hour each here) and
# tb-cnn-cifar10 (the end-to-end CIFAR-10 CNN: many hours per run here, docs/cnn.md).
case "${1:-}" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
DATA_DIR=${DATA_DIR:-${DPT_SHARED_DATASETS:-/work/shared/datasets}}
THREADS=${THREADS:-2}
SEEDS="1 2 3"
ONLY="tb-cnn-mnist tb-cnn-fmnist tb-scatter-linear-fmnist tb-scatter-cnn-fmnist"
SMOKE=0 SUMMARY_ONLY=0
OUT=$HERE/results
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) SMOKE=1 ;;
    --seeds) SEEDS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --summary-only) SUMMARY_ONLY=1 ;;
    -*) echo "run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) OUT=$1 ;;
  esac
  shift
done
EXTRA=()
if [ "$SMOKE" = 1 ]; then
  SEEDS=1 ONLY=tb-scatter-linear-fmnist
  EXTRA=(--max-train 2000 --max-test 500 --batch-size 256 --epochs 2)
fi
# the paper's Table 1 (their README), for the summary's last column
paper() {
  case $1 in
    tb-cnn-mnist) echo 98.1 ;; tb-cnn-fmnist) echo 86.0 ;;
    tb-scatter-linear-fmnist) echo 89.7 ;; tb-scatter-cnn-fmnist) echo 89.0 ;;
    tb-scatter-linear-mnist) echo 98.7 ;; tb-scatter-cnn-mnist) echo 98.7 ;;
    tb-scatter-linear-cifar10) echo 67.0 ;; tb-scatter-cnn-cifar10) echo 69.3 ;; tb-cnn-cifar10) echo 59.2 ;;
    *) echo "" ;;
  esac
}
mkdir -p "$OUT"
RUNS=$OUT/runs.csv
if [ "$SUMMARY_ONLY" = 1 ]; then
  [ -s "$RUNS" ] || { echo "run.sh: --summary-only: no $RUNS" >&2; exit 2; }
  ONLY=$(python3 -c 'import csv, sys; print(" ".join(dict.fromkeys(r["preset"] for r in csv.DictReader(open(sys.argv[1])))))' "$RUNS")
  SEEDS=""
else
  echo "preset,dataset,model,seed,epsilon,accountant,epsilon_rdp,delta,sigma,steps,test_accuracy,seconds,build" > "$RUNS"
fi
build=$("$DPTRAIN" --version | sed -n 's/^build: //p')
for p in $ONLY; do
  for s in $SEEDS; do
    dir=$OUT/runs/$p-seed$s
    dd=$DATA_DIR
    case $p in
      *fmnist) [ -d "$dd/fashion-mnist" ] || dd=/usr/share/datasets ;;
      *mnist) [ -d "$dd/mnist" ] || { echo "SKIP: $p: MNIST not found under $DATA_DIR/mnist" >&2; continue; } ;;
    esac
    cmd=("$DPTRAIN" train --preset "$p" --data-dir "$dd" --seed "$s" --threads "$THREADS" --no-progress
         --overwrite --out "$dir" "${EXTRA[@]}")
    echo "== ${cmd[*]}" >&2
    log=$("${cmd[@]}" 2>&1) || { echo "$log" >&2; exit 1; }
    grep -E "^(epoch [0-9]+/|privacy:|test accuracy)" <<<"$log" | tail -3 >&2
    python3 - "$dir/metrics.jsonl" "$dir/ledger.json" "$p" "$s" "$log" "$build" >> "$RUNS" <<'PY'
import csv, json, re, sys
metrics, ledger, preset, seed, log, build = sys.argv[1:7]
last = [json.loads(l) for l in open(metrics) if l.strip()][-1]
g = lambda pat: re.search(pat, log).group(1)
model = g(r"model (\S+) \(")
dataset = g(r"dptrain train: (\S+) \(")
sigma = g(r"algorithm dpsgd \(sigma ([0-9.e+-]+)")
csv.writer(sys.stdout, lineterminator="\n").writerow([  # the model spec holds commas: quoted
    preset, dataset, model, seed, "%.6f" % last["epsilon"], last["accountant"], "%.6f" % last["epsilon_rdp"],
    "%g" % last["delta"], sigma, last["step"], "%.4f" % (100 * last["test_accuracy"]), "%.1f" % last["wall_s"], build])
PY
  done
done
python3 - "$RUNS" "$OUT/summary.csv" "$(for p in $ONLY; do echo "$p=$(paper "$p")"; done)" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
paper = dict(kv.split("=") for kv in sys.argv[3].split())
with open(sys.argv[2], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["dataset", "model", "epsilon", "delta", "seeds", "test_accuracy_mean", "test_accuracy_std",
                "seconds_per_run", "paper_accuracy", "preset"])
    for p in dict.fromkeys(r["preset"] for r in rows):
        rs = [r for r in rows if r["preset"] == p]
        acc = [float(r["test_accuracy"]) for r in rs]
        w.writerow([rs[0]["dataset"], rs[0]["model"], "%.4f" % max(float(r["epsilon"]) for r in rs), rs[0]["delta"],
                    len(rs), "%.2f" % statistics.mean(acc), "%.2f" % (statistics.stdev(acc) if len(acc) > 1 else 0.0),
                    "%.0f" % statistics.mean(float(r["seconds"]) for r in rs), paper.get(p, ""), p])
# for gnuplot (the model spec's commas would split a CSV column): preset mean std paper
with open(sys.argv[2][:-4] + ".dat", "w") as f:
    for r in csv.DictReader(open(sys.argv[2])):
        f.write("%s %s %s %s\n" % (r["preset"], r["test_accuracy_mean"], r["test_accuracy_std"], r["paper_accuracy"] or "nan"))
PY
cat "$OUT/summary.csv" >&2
command -v gnuplot >/dev/null || { echo "gnuplot missing: no plot" >&2; exit 0; }
gnuplot <<GP
set terminal pngcairo size 900,500 noenhanced
set output "$OUT/accuracy.png"
set style data histogram
set style histogram errorbars gap 2 lw 1
set style fill solid 0.6 border -1
set ylabel "test accuracy (%), epsilon 3, delta 1e-5"
set yrange [50:100]
set key top left
set xtics rotate by -20
set title "Tramer & Boneh 2021 recipes: dptrain (mean +- std over seeds, final epoch) vs the paper"
plot "$OUT/summary.dat" using 2:3:xtic(1) title "dptrain", \
     "" using 4:(0) title "paper (Table 1)"
GP
echo "wrote $RUNS, $OUT/summary.csv, $OUT/accuracy.png" >&2
