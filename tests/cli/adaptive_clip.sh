#!/usr/bin/env bash
# CLI: dptrain train --algo dpsgd --adaptive-clip (Andrew et al. 2021). Bad flags are refused
# naming the flag (a quantile outside (0, 1), a learning rate <= 0, a count noise too small for
# sigma, the settings without --adaptive-clip, --secure); a run prints sigma_Delta and the
# clip per epoch (metrics "clip"), --target-epsilon with adaptive clipping ends at or below the
# target, and --resume continues the clip from the checkpoint.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 3000
C=(--algo dpsgd --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --threads 1 --no-progress --optimizer sgd --lr 0.5
   --batch-size 60 --seed 5)

expect_fail "--adaptive-clip" "$BIN" train "${C[@]}" --sigma 1 --adaptive-clip 1.5 --out "$T/x"
expect_fail "--adaptive-clip" "$BIN" train "${C[@]}" --sigma 1 --adaptive-clip 0 --out "$T/x"
expect_fail "--adaptive-clip-lr" "$BIN" train "${C[@]}" --sigma 1 --adaptive-clip 0.5 --adaptive-clip-lr 0 --out "$T/x"
expect_fail "--adaptive-clip-sigma" "$BIN" train "${C[@]}" --sigma 1 --adaptive-clip 0.5 --adaptive-clip-sigma -1 --out "$T/x"
# 2 sigma_b <= sigma: no noise would be left for the gradient
expect_fail "--adaptive-clip-sigma 0.4" "$BIN" train "${C[@]}" --sigma 1 --adaptive-clip 0.5 --adaptive-clip-sigma 0.4 --out "$T/x"
out=$("$BIN" train "${C[@]}" --sigma 1 --adaptive-clip 0.5 --adaptive-clip-sigma 0.4 --out "$T/x" 2>&1)
check 'grep -q "sigma / 2 = 0.5" <<<"$out"' "the refusal does not say the bound: $out"
expect_fail "only with --adaptive-clip" "$BIN" train "${C[@]}" --sigma 1 --adaptive-clip-lr 0.3 --out "$T/x"
expect_fail "only with --adaptive-clip" "$BIN" train "${C[@]}" --sigma 1 --adaptive-clip-sigma 3 --out "$T/x"
expect_fail "--secure" "$BIN" train "${C[@]}" --sigma 1 --adaptive-clip 0.5 --secure --out "$T/x"
check '[ ! -e "$T/x/ledger.json" ]' "a refused run wrote a ledger"

# --target-epsilon calibrates the total sigma; the run ends at or below the target
expect_ok "$BIN" train "${C[@]}" --target-epsilon 2 --adaptive-clip 0.5 --clip 0.1 --epochs 2 --out "$T/run"
check 'grep -q "gradient noise multiplier sigma_Delta" <<<"$LAST_OUT"' "sigma_Delta not described"
check 'grep -q "final clip C" <<<"$LAST_OUT"' "final clip not printed"
check '[ "$(grep -c "\"clip\":" "$T/run/metrics.jsonl")" = 2 ]' "metrics lack the clip per epoch"
eps=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["epsilon"])' "$T/run/metrics.jsonl")
check 'python3 -c "import sys; sys.exit(not (0 < float(sys.argv[1]) <= 2.0))" "$eps"' "epsilon $eps above the target 2"
check 'grep -q "adaptive_clipping" "$T/run/ledger.json"' "the ledger does not say what its events cover"
# resume: one epoch, then a second from the checkpoint = the two-epoch run (same clip)
expect_ok "$BIN" train "${C[@]}" --sigma 1.1 --adaptive-clip 0.5 --clip 0.1 --epochs 1 --out "$T/r"
expect_ok "$BIN" train "${C[@]}" --sigma 1.1 --adaptive-clip 0.5 --clip 0.1 --epochs 2 --out "$T/r" --resume
expect_ok "$BIN" train "${C[@]}" --sigma 1.1 --adaptive-clip 0.5 --clip 0.1 --epochs 2 --out "$T/w"
clip_of() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["clip"])' "$1/metrics.jsonl"; }
check '[ "$(clip_of "$T/r")" = "$(clip_of "$T/w")" ]' "resumed clip $(clip_of "$T/r") differs from $(clip_of "$T/w")"
check '[ "$(clip_of "$T/r")" != 0.1 ]' "the clip did not move"
expect_fail "algorithm settings" "$BIN" train "${C[@]}" --sigma 1.1 --adaptive-clip 0.6 --clip 0.1 --epochs 3 --out "$T/r" --resume
harness_end
