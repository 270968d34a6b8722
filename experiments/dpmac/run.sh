#!/usr/bin/env bash
# DP-MAC reproduction (issue 7; docs/dpmac.md): the MNIST classifier with DP-PCA and the
# USPS autoencoder of the paper, each row one `dptrain train` run, one at a time.
#   experiments/dpmac/run.sh [--smoke] [--only mnist|usps] [OUTDIR]
# Writes OUTDIR/results.csv (one line per run: our epsilon, the paper's, our metric, the
# paper's) and OUTDIR/mnist.png, OUTDIR/usps.png (gnuplot). Env: DPTRAIN (binary; default
# build/dptrain), DATA_DIR (default $DPT_SHARED_DATASETS or /work/shared/datasets),
# THREADS (default 1), SMOKE=1 (= --smoke: tiny sizes, finishes in seconds), ROWS_ONLY
# ("paper-eps8 calib-eps2 ..." to run only these rows), USPS_EPOCHS, USPS_ROWS, USPS_DPSGD,
# MNIST_CENTER (C:S: DP-mean centring before DP-PCA, e.g. 28:20). USPS_ROWS entries:
# EPS:SIGMA (DP-MAC), inf (non-private Adam), mac (non-private MAC, --algo mac).
# USPS_DATASET=usps-pooled: the pooled 5000 / 4298 split instead of zip.train's first 5000
# for training and zip.test for testing (the default, usps).
# USPS pixels are mapped to [0, 1] (--normalize affine:-1:2), the scale of the paper's MSEs.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${DPTRAIN:-$ROOT/build/dptrain}
DATA=${DATA_DIR:-${DPT_SHARED_DATASETS:-/work/shared/datasets}}
THREADS=${THREADS:-1}
SMOKE=${SMOKE:-0}
ONLY=all
OUT=
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) SMOKE=1 ;;
    --only) ONLY=$2; shift ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) OUT=$1 ;;
  esac
  shift
done
OUT=${OUT:-$HERE/out$([ "$SMOKE" = 1 ] && echo _smoke)}
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "run.sh: no dptrain binary at $BIN (set DPTRAIN)" >&2; exit 2; }
CSV=$OUT/results.csv
echo "task,row,algo,sigma,pca_sigma,epochs,batch,eps_target_paper,eps_rdp,eps_pld,eps_paper_accounting,metric,ours,paper,seconds,command" > "$CSV"

# one run: ROW ALGO PAPER_EPS PAPER_METRIC METRIC -- dptrain args...
run() {
  local task=$1 row=$2 algo=$3 peps=$4 pval=$5 metric=$6; shift 6
  if [ -n "${ROWS_ONLY:-}" ] && ! grep -qw -- "$row" <<<"$ROWS_ONLY"; then return 0; fi
  local dir=$OUT/runs/$task-$row
  rm -rf "$dir"
  local t0; t0=$(date +%s.%N)
  echo "== $task $row: dptrain train $*" >&2
  local log; log=$("$BIN" train "$@" --out "$dir" --threads "$THREADS" --no-progress 2>&1) || { echo "$log" >&2; exit 1; }
  echo "$log" | grep -E "^epoch|privacy|paper|test accuracy|calibrated" >&2 || true
  local t1; t1=$(date +%s.%N)
  local eps epld epap acc loss sig ours
  # "privacy: epsilon X (PLD; RDP Y) ...": the headline accountant first (docs/accounting.md)
  eps=$(sed -n -e 's/^privacy: epsilon \([0-9.e+-]*\) (RDP[;)].*/\1/p' -e 's/^privacy: epsilon [0-9.e+-]* (PLD; RDP \([0-9.e+-]*\)).*/\1/p' <<<"$log"); eps=${eps:-inf}
  epld=$(sed -n -e 's/^privacy: epsilon \([0-9.e+-]*\) (PLD;.*/\1/p' -e 's/^privacy: epsilon [0-9.e+-]* (RDP; PLD \([0-9.e+-]*\)).*/\1/p' <<<"$log"); epld=${epld:-}
  epap=$(grep -o "= [0-9.e+-]* at delta 1.1e-05" <<<"$log" | awk '{print $2}'); epap=${epap:-}
  acc=$(grep -o "test accuracy [0-9.]*" <<<"$log" | awk '{print $3}')
  loss=$(grep -o "test loss [0-9.]*" <<<"$log" | tail -1 | awk '{print $3}')
  sig=$(grep -o "calibrated sigma [0-9.e+-]*" <<<"$log" | awk '{print $3}')
  [ -n "$sig" ] || sig=$(sed -n 's/.*--sigma \([0-9.]*\).*/\1/p' <<<"$*")
  local psig; psig=$(sed -n 's/.*--pca-sigma \([0-9.]*\).*/\1/p' <<<"$*")
  local ep; ep=$(sed -n 's/.*--epochs \([0-9]*\).*/\1/p' <<<"$*")
  local bs; bs=$(sed -n 's/.*--batch-size \([0-9]*\).*/\1/p' <<<"$*")
  if [ "$metric" = accuracy ]; then ours=$(python3 -c "print(round($acc/100, 4))"); else ours=$loss; fi
  printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%.1f,"dptrain train %s"\n' "$task" "$row" "$algo" "${sig:-}" \
    "${psig:-}" "$ep" "$bs" "$peps" "$eps" "$epld" "$epap" "$metric" "$ours" "$pval" \
    "$(python3 -c "print($t1-$t0)")" "$*" >> "$CSV"
}

if [ "$SMOKE" = 1 ]; then
  MN=(--dataset mnist --data-dir "$DATA" --normalize none --max-train 2000 --max-test 500 --model mlp:20-50-10:relu
      --pca-dims 20 --z-steps 5)
  MNE=1; MNE_LOW=1
  US=(--dataset usps --data-dir "$DATA" --normalize affine:-1:2 --max-train 500 --max-test 300
      --model ae:256-30-10-4-10-30-256:relu)
  UZ=5
  CALIBRATED=0
  USPS_ROWS=${USPS_ROWS:-8:1.8:9.6 inf mac}
  USE=1; UB=100; UB_LOW=50; SGDB=100
else
  # the paper: DP-PCA to 60, 300 ReLU hidden, 10 sigmoid outputs, batch 1000, Theta 0.3
  MN=(--dataset mnist --data-dir "$DATA" --normalize none --model mlp:60-300-10:relu --pca-dims 60 --z-steps 30)
  # MNIST_CENTER=C:S: centre by a DP mean (rows clipped to C, noise multiplier S) before
  # DP-PCA; its cost is in every epsilon (and in the --target-epsilon calibration)
  MNE=30; MNE_LOW=10
  # the paper: 256-300-100-20-100-300-256, ReLU hidden, linear output; 5000 train (here: the
  # first 5000 of zip.train; test: zip.test, 2007 images). Pixels mapped from the file's
  # [-1, 1] to [0, 1] (affine:-1:2): the paper's MSEs are on that scale (docs/dpmac.md).
  US=(--dataset "${USPS_DATASET:-usps}" --data-dir "$DATA" --normalize affine:-1:2 --max-train 5000
      --model ae:256-300-100-20-100-300-256:relu)
  UZ=30
  USE=${USPS_EPOCHS:-50}; UB=500; UB_LOW=250; SGDB=500
fi
if [ -n "${MNIST_CENTER:-}" ]; then MN+=(--center-clip "${MNIST_CENTER%%:*}" --center-sigma "${MNIST_CENTER#*:}"); fi
MC=(--algo dpmac --loss bce --clip 0.3 --z-lr 0.003 --batch-size $([ "$SMOKE" = 1 ] && echo 200 || echo 1000))

if [ "$ONLY" = all ] || [ "$ONLY" = mnist ]; then
  # the paper's settings (sigma, sigma_pca, lr, decay): the epsilon they really spend
  run mnist paper-eps8 dpmac 8 0.97 accuracy "${MC[@]}" "${MN[@]}" --sigma 1.0 --pca-sigma 4 --lr 0.01 --lr-schedule exp:0.95 --epochs $MNE
  [ "$SMOKE" = 1 ] || run mnist paper-eps2 dpmac 2 0.95 accuracy "${MC[@]}" "${MN[@]}" --sigma 2.8 --pca-sigma 8 --lr 0.01 --lr-schedule exp:0.95 --epochs $MNE
  [ "$SMOKE" = 1 ] || run mnist paper-eps0.5 dpmac 0.5 0.90 accuracy "${MC[@]}" "${MN[@]}" --sigma 8.0 --pca-sigma 16 --lr 0.03 --lr-schedule exp:0.7 --epochs $MNE_LOW
  if [ "${CALIBRATED:-1}" = 1 ]; then
    # sigma calibrated so that PCA + training spend exactly the paper's stated epsilon
    run mnist calib-eps8 dpmac 8 0.97 accuracy "${MC[@]}" "${MN[@]}" --target-epsilon 8 --pca-sigma 4 --lr 0.01 --lr-schedule exp:0.95 --epochs $MNE
    run mnist calib-eps2 dpmac 2 0.95 accuracy "${MC[@]}" "${MN[@]}" --target-epsilon 2 --pca-sigma 8 --lr 0.01 --lr-schedule exp:0.95 --epochs $MNE
    run mnist calib-eps0.5 dpmac 0.5 0.90 accuracy "${MC[@]}" "${MN[@]}" --target-epsilon 0.5 --pca-sigma 16 --lr 0.03 --lr-schedule exp:0.7 --epochs $MNE_LOW
  fi
fi

if [ "$ONLY" = all ] || [ "$ONLY" = usps ]; then
  UC=(--loss mse --lr 0.003 --lr-schedule exp:0.97 --epochs $USE)
  IFS=' ' read -r -a ROWS <<<"${USPS_ROWS:-8:1.8:9.6 4:3.1:10.9 2:4.1:10.9 1:7.8:12.7 inf}"
  for r in "${ROWS[@]}"; do
    if [ "$r" = mac ]; then
      # the non-private MAC (--algo mac: no clipping, no noise), the paper's schedule, fixed-order batches
      run usps nonprivate-mac mac inf 4.4 mse "${US[@]}" "${UC[@]}" --algo mac --z-lr 0.001 --z-steps $UZ --batch-size $SGDB
      continue
    fi
    if [ "$r" = inf ]; then
      run usps nonprivate sgd inf 4.4 mse "${US[@]}" "${UC[@]}" --algo sgd --optimizer adam --batch-size $SGDB
      # the same model trained 10x longer (batch 50, 5000 steps): how far 500 steps are from converged
      [ "$SMOKE" = 1 ] || run usps nonprivate-long sgd inf 3.6 mse "${US[@]}" --loss mse --lr 0.001 --epochs 50 --algo sgd --optimizer adam --batch-size 50
      continue
    fi
    e=${r%%:*}; rest=${r#*:}; s=${rest%%:*}
    case $e in 8) p=8.4 ;; 4) p=9.6 ;; 2) p=10.9 ;; 1) p=12.7 ;; esac
    b=$UB; [ "$(python3 -c "print(1 if $e <= 2 else 0)")" = 1 ] && b=$UB_LOW
    run usps dpmac-eps$e dpmac "$e" "$p" mse "${US[@]}" "${UC[@]}" --algo dpmac --clip 0.001 --z-lr 0.001 --z-steps $UZ --sigma "$s" --batch-size $b
  done
  if [ -n "${USPS_DPSGD:-}" ] || [ "$SMOKE" = 1 ]; then
    # DP-SGD on the same autoencoder at the paper's stated epsilon (calibrated by our accountant)
    for e in ${USPS_DPSGD:-8}; do
      case $e in 8) p=6.4 ;; 4) p=7.9 ;; 2) p=9.6 ;; 1) p=11.8 ;; esac
      run usps dpsgd-eps$e dpsgd "$e" "$p" mse "${US[@]}" "${UC[@]}" --algo dpsgd --clip 1.0 --target-epsilon "$e" --batch-size $UB
    done
  fi
fi

# plots
if command -v gnuplot >/dev/null; then
  python3 - "$CSV" "$OUT" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
out = sys.argv[2]
for task in ("mnist", "usps"):
    rs = [r for r in rows if r["task"] == task and r["eps_rdp"] not in ("", "inf")]
    with open("%s/%s.dat" % (out, task), "w") as f:
        for r in rs:
            f.write("%s %s %s %s\n" % (r["eps_rdp"], r["ours"], r["eps_target_paper"] if r["eps_target_paper"] != "inf" else "nan", r["paper"]))
PY
  plot_task() { # plot_task NAME TITLE YLABEL KEYPOS
    [ -s "$OUT/$1.dat" ] || return 0
    gnuplot <<GP
set terminal png size 800,500
set datafile missing "nan"
set logscale x
set key $4
set output "$OUT/$1.png"
set title "$2"
set xlabel "epsilon (delta 1e-5)"; set ylabel "$3"
plot "$OUT/$1.dat" using 1:2 with points pt 7 ps 1.5 title "ours (epsilon our accountant computed)", \\
     "$OUT/$1.dat" using 3:4 with points pt 6 ps 1.5 title "paper (its stated epsilon)"
GP
  }
  plot_task mnist "DP-MAC, MNIST classifier (DP-PCA 60, 300 ReLU): test accuracy" "test accuracy" "left top"
  plot_task usps "USPS autoencoder 256-300-100-20-100-300-256: test MSE (half SSE per image)" "test MSE" "right top"
fi
echo "wrote $CSV" >&2
