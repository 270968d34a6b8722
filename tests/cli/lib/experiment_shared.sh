# Sourced by the experiment smoke tests on the shared datasets (tests/cli/experiment_dpulr_*.sh,
# experiment_dpmac*.sh) after `set -u` and BIN=$1: sets SRC (the source tree) and D (the
# shared datasets), skips (exit 77) unless D holds every dataset in NEED_DATASETS (default
# mnist), and makes $T (removed on exit).
SRC=${DPT_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}
D=${DPT_SHARED_DATASETS:-}
for need in ${NEED_DATASETS:-mnist}; do
  if [ -z "$D" ] || [ ! -e "$D/$need" ]; then echo "SKIP: no shared $need (DPT_SHARED_DATASETS)"; exit 77; fi
done
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export DPTRAIN_SECRETS_DIR="$T/secrets"  # the runs' secret files: under $T, not in the home directory
