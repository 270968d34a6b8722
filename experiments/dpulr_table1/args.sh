# Sourced by the DP-ULR experiment scripts (dpulr_table1, dpulr_table_c1, dpulr_figure3 run.sh):
# their shared command line  run.sh [--smoke] [--summary-only] [-h|--help] [OUT_DIR]  and defaults.
#   dpulr_args HELP_LINES DEFAULT_OUT "$@"
# prints lines HELP_LINES (sed range, e.g. 2,27) of the calling script for --help, and sets
# SMOKE (1 for --smoke or SMOKE=1 in the environment), SUMMARY_ONLY (1 for --summary-only: the
# script runs nothing and rebuilds its summary and plot from OUT_DIR/runs.csv; accepted only when
# the caller set ALLOW_SUMMARY_ONLY=1, and refused elsewhere), OUT (OUT_DIR or DEFAULT_OUT), ROOT
# (the source tree), DPTRAIN (default build/dptrain) and DATA_DIR (default
# $DPT_SHARED_DATASETS).
dpulr_args() {
  local help=$1 default_out=$2 a opts="--smoke"
  [ "${ALLOW_SUMMARY_ONLY:-0}" = 1 ] && opts="--smoke, --summary-only"
  shift 2
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  SMOKE=${SMOKE:-0}
  SUMMARY_ONLY=0
  OUT=""
  for a in "$@"; do
    case $a in
      --smoke) SMOKE=1 ;;
      --summary-only) [ "${ALLOW_SUMMARY_ONLY:-0}" = 1 ] || { echo "run.sh: unknown option '$a' (expected $opts or OUT_DIR)" >&2; exit 2; }
                      SUMMARY_ONLY=1 ;;
      -h|--help) sed -n "${help}p" "$0"; exit 0 ;;
      -*) echo "run.sh: unknown option '$a' (expected $opts or OUT_DIR)" >&2; exit 2 ;;
      *) OUT=$a ;;
    esac
  done
  OUT=${OUT:-$default_out}
  DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
  DATA_DIR=${DATA_DIR:-${DPT_SHARED_DATASETS:-/usr/share/datasets}}
}
