#!/usr/bin/env bash
# experiments/cifar10_resnet5/run.sh --smoke end to end (checks in tests/cli/lib/experiment_cnn.sh).
BIN=$1 NAME=cifar10_resnet5
source "$(dirname "$0")/lib/experiment_cnn.sh"
