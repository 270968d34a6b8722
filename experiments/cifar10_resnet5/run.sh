#!/usr/bin/env bash
# CIFAR-10 ResNet-5 (model "resnet5", DP-ULR Section 4.3): DP-SGD (the paper's baseline)
# and DP-ULR (the paper's three captions), delta 1e-5, per-channel normalization with
# CIFAR-10's published constants (--normalize public: no statistic of the private training
# split; the committed results/ were run before issue 24 with --normalize channel, fitted
# statistics that no epsilon covered and that agree with the constants to 0.002), LeCun
# init, C = 1, seed 1, one thread per run.
# Rows (--rows, comma-separated; default all):
#   dpsgd          batch 64 (Poisson q = 64/50000 = 0.00128), noise multiplier 1, SGD lr 0.1
#                  (the paper gives no C, optimizer or lr; lr 0.5 stalled at 25-31%)
#   dpulr-q50-s5   DP-ULR q = 1/50, sigma0 5
#   dpulr-q25-s8   DP-ULR q = 1/25, sigma0 8
#   dpulr-q25-s4   DP-ULR q = 1/25, sigma0 4
# DP-ULR rows: Poisson sampling with rejection (the accounted sampler; default N_B), the
# modules are resnet5's five parameter layers (four Conv2d, one Linear), K = $COPIES
# (default 4: the K noisy passes are the cost, see docs/cnn.md), noise $NOISE (default
# explicit: the mode the standard analysis covers, with antithetic pairs and the clean-loss
# baseline, --ulr-std 0.1, Adam lr 0.001 as in our MNIST run; NOISE=baseline is the explicit
# mode with the baseline alone, K independent perturbations, Table 1's dpulr_baseline;
# NOISE=controller runs the paper's controller with the same optimizer and no tricks).
# Writes out/<row>/ (the run), out/results.csv (run,epoch,step,train_loss,test_accuracy,
# epsilon_rdp,epsilon_pld,delta,wall_s,noise,seed; epsilon_pld is empty for DP-ULR: the
# rejection sampler has no PLD accountant; wall_s is the run's training time so far, so
# its differences are the seconds per epoch) and out/cifar10_resnet5.png. Every curve in
# the plot, DP-SGD's included, is read from results.csv, i.e. from the runs' metrics.
# A row name may carry a suffix after "+" to keep runs of other settings apart in one OUT
# (e.g. NOISE=controller ... --rows dpulr-q50-s5+ctrl writes out/dpulr-q50-s5+ctrl/).
# LR (default 0.001) is the DP-ULR rows' Adam learning rate.
# --collect writes results.csv rows and the plot from the runs already in OUT (for example
# runs stopped with Ctrl-C, which saves them where they stopped), with the same env as the
# runs (NOISE, SEED, LR), and trains nothing. --resume continues the runs in OUT from their
# checkpoints (dptrain --resume, same settings) until E epochs in all: DP-ULR takes minutes
# per epoch, so its runs go on over several sittings. A row of a run stopped inside an
# epoch is kept only while it is the run's last (a resumed run supersedes it).
#   usage: run.sh [--smoke] [--epochs E] [--rows LIST] [--collect | --resume] [--help]
#   env: DPTRAIN, DATA_DIR, OUT, THREADS, COPIES, NOISE, SEED, LR
#   --smoke: 1000 training / 300 test examples, 1 epoch (unless --epochs), rows dpsgd and dpulr-q50-s5 unless
#            --rows is given, q = 0.1 (DP-SGD) / 5 q (DP-ULR) with K = 2; a ctest runs it
# The shared CIFAR-10 copy was rebuilt from JPEG (quality 75) copies of the images (see
# its SOURCES.md): pixels differ slightly from the official release.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
DATA_DIR=${DATA_DIR:-${DPT_SHARED_DATASETS:-/work/shared/datasets}}
OUT=${OUT:-$HERE/out}
THREADS=${THREADS:-1}
COPIES=${COPIES:-4}
NOISE=${NOISE:-explicit}
SEED=${SEED:-1}
LR=${LR:-0.001}
EPOCHS=20
COLLECT=0
RESUME=0
ROWS=
SIZE=()
SMOKE=${SMOKE:-0}
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) SMOKE=1 ;;
    --epochs) EPOCHS=$2; EPOCHS_SET=1; shift ;;
    --rows) ROWS=$2; shift ;;
    --collect) COLLECT=1 ;;
    --resume) RESUME=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (expected --smoke, --epochs E, --rows LIST, --collect, --resume or --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$SMOKE" = 1 ]; then [ -n "${EPOCHS_SET:-}" ] || EPOCHS=1; COPIES=2; SIZE=(--max-train 1000 --max-test 300); ROWS=${ROWS:-dpsgd,dpulr-q50-s5}; fi
ROWS=${ROWS:-dpsgd,dpulr-q50-s5,dpulr-q25-s8,dpulr-q25-s4}
if [ ! -f "$DATA_DIR/cifar10/data_batch_1.bin.gz" ] && [ ! -f "$DATA_DIR/cifar10/data_batch_1.bin" ]; then
  echo "SKIP: CIFAR-10 not found under $DATA_DIR/cifar10 (set DATA_DIR)"; exit 77
fi
case $NOISE in
  explicit) ULR_NOISE=(--ulr-noise explicit --ulr-std 0.1 --antithetic --baseline) ;;
  baseline) ULR_NOISE=(--ulr-noise explicit --ulr-std 0.1 --baseline) ;;
  controller) ULR_NOISE=(--ulr-noise controller) ;;
  *) echo "run.sh: NOISE must be explicit, baseline or controller, got '$NOISE'" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
touch "$OUT/command.txt"
[ -s "$OUT/results.csv" ] || echo "run,epoch,step,train_loss,test_accuracy,epsilon_rdp,epsilon_pld,delta,wall_s,noise,seed" > "$OUT/results.csv"
COMMON=(--dataset cifar10 --data-dir "$DATA_DIR" --normalize public --model resnet5 --init lecun --clip 1.0
        --delta 1e-5 --epochs "$EPOCHS" --threads "$THREADS" --seed "$SEED" --no-progress)
IFS=, read -r -a ROW_LIST <<< "$ROWS"
for row in "${ROW_LIST[@]}"; do
  case ${row%%+*} in
    dpsgd) Q=0.00128; [ "$SMOKE" = 1 ] && Q=0.1
           ARGS=(--algo dpsgd --optimizer sgd --lr 0.1 --sample-rate "$Q" --sigma 1.0) ;;
    dpulr-q50-s5|dpulr-q25-s8|dpulr-q25-s4)
           case ${row%%+*} in
             dpulr-q50-s5) Q=0.02; S0=5 ;;
             dpulr-q25-s8) Q=0.04; S0=8 ;;
             *) Q=0.04; S0=4 ;;
           esac
           [ "$SMOKE" = 1 ] && Q=$(awk -v q="$Q" 'BEGIN { print q * 5 }')
           ARGS=(--algo dpulr --optimizer adam --lr "$LR" --sample-rate "$Q" --sigma0 "$S0" --copies "$COPIES"
                 --sampler poisson-reject "${ULR_NOISE[@]}") ;;
    *) echo "run.sh: unknown row '$row' (dpsgd, dpulr-q50-s5, dpulr-q25-s8, dpulr-q25-s4)" >&2; exit 2 ;;
  esac
  START=--overwrite
  if [ "$RESUME" = 1 ]; then
    START=--resume
    [ -s "$OUT/$row/checkpoint.safetensors" ] || { echo "run.sh: --resume: no run in $OUT/$row" >&2; exit 2; }
  fi
  CMD=("$DPTRAIN" train "${ARGS[@]}" "${COMMON[@]}" --out "$OUT/$row" "$START" "${SIZE[@]}")
  if [ "$COLLECT" = 1 ]; then
    [ -s "$OUT/$row/metrics.jsonl" ] || { echo "run.sh: --collect: no $OUT/$row/metrics.jsonl" >&2; exit 2; }
  else
    # the command and, as a shell comment, the source revision of the library that ran it
    echo "$row: ${CMD[*]}  # build $("$DPTRAIN" --version | sed -n 's/^build: //p')" >> "$OUT/command.txt"
    "${CMD[@]}" | tee "$OUT/$row.log"
  fi
  noise=$([ "${row%%+*}" = dpsgd ] && echo dpsgd || echo "$NOISE")
  grep -v "^$row," "$OUT/results.csv" > "$OUT/results.csv.tmp" || true  # a re-run replaces its rows
  # a partial epoch's row ("partial":true) is held back until the next line shows whether
  # the run went on past it
  awk -v run="$row" -v noise="$noise" -v seed="$SEED" 'function num(k,  m) { if (match($0, "\"" k "\":[-0-9.eE+]+")) { m = substr($0, RSTART, RLENGTH); sub(/^"[^"]*":/, "", m); return m } return "" }
     # the RDP epsilon: "epsilon_rdp"; metrics written before issue 42 had it as "epsilon"
     function rdp(  r) { r = num("epsilon_rdp"); return r != "" ? r : num("epsilon") }
       { line = run "," num("epoch") "," num("step") "," num("train_loss") "," num("test_accuracy") "," rdp() "," num("epsilon_pld") "," num("delta") "," num("wall_s") "," noise "," seed
         held = ""
         if ($0 ~ /"partial":true/) held = line; else print line }
       END { if (held != "") print held }' \
    "$OUT/$row/metrics.jsonl" >> "$OUT/results.csv.tmp"
  mv "$OUT/results.csv.tmp" "$OUT/results.csv"
done
RESULTS=$OUT CSVS=results.csv \
  TITLE="CIFAR-10 ResNet-5: DP-SGD (q 0.00128, sigma 1) and DP-ULR (K $COPIES, $NOISE), C 1, curves from results.csv" \
  bash "$HERE/plot_results.sh" "$OUT/cifar10_resnet5.png" > /dev/null
echo "wrote $OUT/results.csv and $OUT/cifar10_resnet5.png"
