#!/usr/bin/env bash
# experiments/mnist_cnn/run.sh --smoke end to end (checks in tests/cli/lib/experiment_cnn.sh).
BIN=$1 NAME=mnist_cnn
source "$(dirname "$0")/lib/experiment_cnn.sh"
