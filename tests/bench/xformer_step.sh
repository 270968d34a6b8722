#!/bin/bash
# Smoke test of bench/xformer_step (issue 39 item 6): --quick runs tiny transformers (batch 4,
# 2 rounds of 1 step) in a second or two and writes its CSV: one row per model and step kind
# with positive times and memory, the non-private rows at ratio 1; a bad option exits 2.
# usage: xformer_step.sh <path to the xformer_step program>
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bin" --quick --out "$tmp/x.csv" >"$tmp/out.txt" 2>"$tmp/err.txt" || { cat "$tmp/out.txt" "$tmp/err.txt"; fail "xformer_step --quick exited $?"; }
[ -s "$tmp/x.csv" ] || fail "no CSV written"
head -1 "$tmp/x.csv" | grep -q '^model,.*,cpu_ms_median,.*,ratio_cpu_median,.*,peak_mb,model_mb,peak_ratio' || fail "CSV header: $(head -1 "$tmp/x.csv")"
rows=$(($(wc -l <"$tmp/x.csv") - 1))
[ "$rows" -eq 6 ] || fail "want 6 rows (3 models x 2 kinds), got $rows"
awk -F, 'NR > 1 {
    if (!($8 > 0) || !($11 > 0) || !($16 > 0) || !($17 > 0)) { print "bad row: " $0; bad = 1 }
    if ($7 == "non-private" && ($12 != "1.0000" || $18 != "1.0000")) { print "non-private ratio not 1: " $0; bad = 1 }
    if ($7 != "non-private" && $7 != "DP-SGD") { print "unknown step kind: " $0; bad = 1 }
} END { exit bad }' "$tmp/x.csv" || fail "CSV values"
[ "$(grep -c 'targets: time' "$tmp/out.txt")" -eq 3 ] || { cat "$tmp/out.txt"; fail "want a targets line per model"; }
grep -q 'gpt_tiny:t8:v16: .* parameters, plin ' "$tmp/out.txt" || fail "no per-model header with the norm paths"

"$bin" --batch 0 --out "$tmp/y.csv" >/dev/null 2>&1
[ $? -eq 2 ] || fail "--batch 0 should exit 2"
"$bin" --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "--bogus should exit 2"
echo "xformer_step smoke: ok"
