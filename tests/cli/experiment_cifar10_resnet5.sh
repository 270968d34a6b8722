#!/usr/bin/env bash
# experiments/cifar10_resnet5/run.sh --smoke end to end (checks in tests/cli/lib/experiment_cnn.sh).
# Every row runs: DP-SGD and the three DP-ULR captions (on convolutions).
BIN=$1 NAME=cifar10_resnet5 EXPECT_RUNS="dpsgd dpulr-q50-s5 dpulr-q25-s8 dpulr-q25-s4"
source "$(dirname "$0")/lib/experiment_cnn.sh"
