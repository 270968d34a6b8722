#!/usr/bin/env bash
# experiments/cifar10_resnet5/run.sh --smoke end to end (checks in tests/cli/lib/experiment_cnn.sh).
# The smoke runs DP-SGD and one DP-ULR row (DP-ULR on convolutions); the other DP-ULR rows
# differ from it only in q and sigma0.
# First, plot_results.sh draws the committed comparison plot from the committed CSVs alone.
P=$(mktemp -d)
bash "${DPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/experiments/cifar10_resnet5/plot_results.sh" "$P/dpulr.png" \
  > "$P/out.txt" 2>&1 && [ -s "$P/dpulr.png" ] \
  || { echo "FAIL: plot_results.sh did not draw the plot"; cat "$P/out.txt"; rm -rf "$P"; exit 1; }
rm -rf "$P"
BIN=$1 NAME=cifar10_resnet5 EXPECT_RUNS="dpsgd dpulr-q50-s5" CHECK_COLLECT=1 CHECK_RESUME=dpsgd
source "$(dirname "$0")/lib/experiment_cnn.sh"
