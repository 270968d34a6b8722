#!/usr/bin/env bash
# The pdp_vs_dpsgd experiment in its smoke configuration: it runs, writes one CSV row per
# run (2 seeds x 10 cells), a summary over seeds, the DP-SGD tuning trace with one chosen
# sigma per target, and its plot; it never reports an epsilon for a non-DP method.
set -u
BIN=$1
SRC=${DPT_SOURCE_DIR:-$(dirname "$0")/../..}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export DPTRAIN_SECRETS_DIR="$T/secrets"  # the runs' secret files: under $T, not in the home directory
if ! bash "$SRC/experiments/pdp_vs_dpsgd/run.sh" --smoke "$BIN" "$T" > "$T/log" 2>&1; then cat "$T/log"; exit 1; fi
fail=0
[ "$(wc -l < "$T/results.csv")" -eq 21 ] || { echo "FAIL: results.csv rows"; cat "$T/results.csv"; fail=1; }
awk -F, 'NR>1 && $1!~/^dpsgd/ && $13!="none"{bad=1} END{exit bad}' "$T/results.csv" || { echo "FAIL: epsilon for a non-DP method"; fail=1; }
awk -F, 'NR>1 && $1~/^dpsgd/ && !($13>0){bad=1} END{exit bad}' "$T/results.csv" || { echo "FAIL: dpsgd row lacks epsilon"; fail=1; }
# every cell has both seeds in the summary; Adam's kappa mapping is labelled as ours
awk -F, 'NR>1 && $5!=2{bad=1} END{exit bad || NR!=11}' "$T/summary.csv" || { echo "FAIL: summary.csv"; cat "$T/summary.csv"; fail=1; }
grep -q '^adam,pdp-sgd-adammap,' "$T/summary.csv" || { echo "FAIL: no pdp-sgd-adammap cell"; fail=1; }
[ "$(grep -c ',yes$' "$T/tuning.csv")" -eq 1 ] || { echo "FAIL: tuning.csv must choose one sigma"; cat "$T/tuning.csv"; fail=1; }
grep -q '^dpsgd-tuned,match-adam-kappa=0.1,adam,' "$T/results.csv" || { echo "FAIL: no tuned DP-SGD row"; fail=1; }
if command -v gnuplot >/dev/null; then [ -s "$T/tradeoff.png" ] || { echo "FAIL: no plot"; fail=1; }; fi
echo "experiment smoke: fail=$fail"
exit $fail
