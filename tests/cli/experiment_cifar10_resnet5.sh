#!/usr/bin/env bash
# experiments/cifar10_resnet5/run.sh --smoke end to end (checks in tests/cli/lib/experiment_cnn.sh).
# The smoke runs DP-SGD and one DP-ULR row (DP-ULR on convolutions); the other DP-ULR rows
# differ from it only in q and sigma0.
# First, plot_results.sh draws the committed comparison plot from the committed CSVs alone.
SRC_DIR=${DPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
P=$(mktemp -d)
export DPTRAIN_SECRETS_DIR="$P/secrets"  # the runs' secret files: under $P (removed below), not in the home directory
bash "$SRC_DIR/experiments/cifar10_resnet5/plot_results.sh" "$P/dpulr.png" \
  > "$P/out.txt" 2>&1 && [ -s "$P/dpulr.png" ] \
  || { echo "FAIL: plot_results.sh did not draw the plot"; cat "$P/out.txt"; rm -rf "$P"; exit 1; }
# NOISE=baseline: the explicit mode with the baseline alone (no antithetic pairs), labelled so
# in results.csv; an unknown NOISE is an error before anything runs
if [ -f "${DPT_SHARED_DATASETS:-/nonexistent}/cifar10/data_batch_1.bin.gz" ] || [ -f "${DPT_SHARED_DATASETS:-/nonexistent}/cifar10/data_batch_1.bin" ]; then
  NOISE=baseline DATA_DIR=$DPT_SHARED_DATASETS DPTRAIN=$1 OUT=$P bash "$SRC_DIR/experiments/cifar10_resnet5/run.sh" \
    --smoke --rows dpulr-q50-s5+base > "$P/out.txt" 2>&1 \
    && grep -q -- "--baseline" "$P/command.txt" && ! grep -q -- "--antithetic" "$P/command.txt" \
    && grep -q "^dpulr-q50-s5+base,1,.*,baseline,1$" "$P/results.csv" \
    || { echo "FAIL: NOISE=baseline did not run the explicit mode with the baseline alone"; cat "$P/out.txt" "$P/command.txt" "$P/results.csv"; rm -rf "$P"; exit 1; }
  if NOISE=bogus DATA_DIR=$DPT_SHARED_DATASETS DPTRAIN=$1 OUT=$P/bogus bash "$SRC_DIR/experiments/cifar10_resnet5/run.sh" \
       --smoke > "$P/bogus.txt" 2>&1 || ! grep -q "NOISE must be" "$P/bogus.txt"; then
    echo "FAIL: NOISE=bogus was not refused"; cat "$P/bogus.txt"; rm -rf "$P"; exit 1
  fi
fi
rm -rf "$P"
BIN=$1 NAME=cifar10_resnet5 EXPECT_RUNS="dpsgd dpulr-q50-s5" CHECK_COLLECT=1 CHECK_RESUME=dpsgd
source "$(dirname "$0")/lib/experiment_cnn.sh"
