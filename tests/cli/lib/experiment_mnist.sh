# Sourced by the MNIST experiment smoke tests (tests/cli/experiment_dpulr_*.sh) after
# `set -u` and BIN=$1: sets SRC (the source tree) and D (the shared datasets), skips (exit
# 77) without the shared MNIST, and makes $T (removed on exit).
SRC=${DPT_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}
D=${DPT_SHARED_DATASETS:-}
if [ -z "$D" ] || [ ! -e "$D/mnist" ]; then echo "SKIP: no shared MNIST (DPT_SHARED_DATASETS)"; exit 77; fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
