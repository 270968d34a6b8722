#!/usr/bin/env bash
# experiments/cifar10_resnet5/run.sh --smoke end to end (checks in tests/cli/lib/experiment_cnn.sh).
# The smoke runs DP-SGD and one DP-ULR row (DP-ULR on convolutions); the other DP-ULR rows
# differ from it only in q and sigma0.
BIN=$1 NAME=cifar10_resnet5 EXPECT_RUNS="dpsgd dpulr-q50-s5"
source "$(dirname "$0")/lib/experiment_cnn.sh"
