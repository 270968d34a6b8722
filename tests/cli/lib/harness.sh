# Shared by the CLI test scripts (tests/cli/*.sh; this directory is not globbed as a test).
# Source it after `set -u`; it makes $T (removed on exit) and counts checks and failures:
#   expect_fail NEEDLE cmd...  the command must fail and print NEEDLE
#   expect_ok cmd...           the command must succeed; its output is left in $LAST_OUT
#   check EXPR MESSAGE         EXPR (evaluated) must be true
#   harness_end                prints the tally and returns non-zero on any failure
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0; checks=0; LAST_OUT=
expect_fail() {
  local needle=$1; shift
  checks=$((checks+1))
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -eq 0 ] || ! grep -q -- "$needle" <<<"$out"; then
    echo "FAIL: '$*' rc=$rc, want non-zero and message containing '$needle'; got: $out"; fail=$((fail+1))
  fi
}
expect_ok() {
  checks=$((checks+1))
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: '$*' rc=$rc: $out"; fail=$((fail+1)); fi
  LAST_OUT=$out
}
check() { checks=$((checks+1)); if ! eval "$1"; then echo "FAIL: $2"; fail=$((fail+1)); fi; }
harness_end() { echo "$((checks - fail)) passed, $fail failed"; [ $fail -eq 0 ]; }
