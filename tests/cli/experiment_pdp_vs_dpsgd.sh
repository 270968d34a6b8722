#!/usr/bin/env bash
# The pdp_vs_dpsgd experiment in its smoke configuration: it runs, writes its CSV with a
# row per method and its plot, and never reports an epsilon for a non-DP method.
set -u
BIN=$1
SRC=${DPT_SOURCE_DIR:-$(dirname "$0")/../..}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export DPTRAIN_SECRETS_DIR="$T/secrets"  # the runs' secret files: under $T, not in the home directory
if ! bash "$SRC/experiments/pdp_vs_dpsgd/run.sh" --smoke "$BIN" "$T" > "$T/log" 2>&1; then cat "$T/log"; exit 1; fi
fail=0
[ "$(wc -l < "$T/results.csv")" -eq 7 ] || { echo "FAIL: results.csv rows"; cat "$T/results.csv"; fail=1; }
awk -F, 'NR>1 && $1!="dpsgd" && $10!="none"{bad=1} END{exit bad}' "$T/results.csv" || { echo "FAIL: epsilon for a non-DP method"; fail=1; }
awk -F, 'NR>1 && $1=="dpsgd" && !($10>0){bad=1} END{exit bad}' "$T/results.csv" || { echo "FAIL: dpsgd row lacks epsilon"; fail=1; }
if command -v gnuplot >/dev/null; then [ -s "$T/tradeoff.png" ] || { echo "FAIL: no plot"; fail=1; }; fi
echo "experiment smoke: fail=$fail"
exit $fail
