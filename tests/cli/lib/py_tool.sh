# Sourced by the tests of the experiments' Python doc tools (experiment_dpulr_table1_prose.sh,
# experiment_dpulr_doc_tables.sh) after `set -u` and TOOL=<the tool, relative to the source
# tree>: sets SRC (the source tree), PY, T (removed on exit) and
#   fail MSG            prints FAIL: MSG and exits 1
#   run WANT ARGS...    runs the tool with ARGS and fails unless it exits WANT; its output is in
#                       $T/out, its messages in $T/err
#   has out|err TEXT    fails unless that file holds TEXT
SRC=${DPT_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}
PY=/usr/bin/python3                  # not the pyenv shim on PATH: it costs 0.4 s a call
[ -x "$PY" ] || PY=python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export DPTRAIN_SECRETS_DIR="$T/secrets"  # the runs' secret files: under $T, not in the home directory
fail() { echo "FAIL: $*"; exit 1; }
run() {
  local want=$1; shift
  "$PY" "$SRC/$TOOL" "$@" > "$T/out" 2> "$T/err"
  local rc=$?
  [ $rc -eq "$want" ] || { cat "$T/out" "$T/err"; fail "$(basename "$TOOL") $* exited $rc, want $want"; }
}
has() { grep -qF -- "$2" "$T/$1" || { cat "$T/out" "$T/err"; fail "no '$2' in $1"; }; }
