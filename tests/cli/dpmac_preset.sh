#!/usr/bin/env bash
# CLI: `dptrain train --preset` (the DP-MAC authors' flag sets) and the flags added with it
# (--pca-project, --z-mu, --taylor-order/--clip2/--w-steps, exp:GAMMA:DECAYS). A preset's
# flags go first and the flags given override them (model, data, epochs here); with
# --target-epsilon the preset's --sigma is dropped and sigma is calibrated; the expansion is
# printed; a second-order run prints its settings and records one SGM event per step; bad
# values are errors naming the flag.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 1200
P=(--dataset "csv:$T/d.csv" --normalize none --threads 1 --no-progress)

expect_fail "unknown preset 'nope'" "$BIN" train --preset nope --out "$T/x"
expect_fail "dpmac-mnist-eps8" "$BIN" train --preset nope --out "$T/x"   # the list of names
expect_fail "--preset: missing value" "$BIN" train --out "$T/x" --preset
expect_ok "$BIN" train --help
check 'grep -q -- "--preset NAME" <<<"$LAST_OUT" && grep -q "dpmac-usps-eps1" <<<"$LAST_OUT"' "--help lacks --preset"

# the USPS preset with this CSV as data and a model that fits it: explicit flags win
expect_ok "$BIN" train --preset dpmac-usps-eps8 "${P[@]}" --model ae:4-6-2-6-4:relu --epochs 2 --batch-size 100 \
  --z-steps 3 --out "$T/ae"
check 'grep -q "preset flags (the flags given after them override): --algo dpmac" <<<"$LAST_OUT"' "expansion not printed"
check 'grep -q "algorithm dpmac (sigma 1.8, Theta 0.001, 3 z-steps at lr 0.001" <<<"$LAST_OUT"' "preset sigma/Theta/z-lr not applied or --z-steps not overriding"
check 'grep -q "2 epochs" <<<"$LAST_OUT"' "--epochs did not override the preset's 50"
check 'python3 -c "
import json; l=json.load(open(\"$T/ae/ledger.json\")); assert l[\"total_sgm_steps\"]==24, l[\"total_sgm_steps\"]"' \
  "ledger: 2 epochs of 12 steps expected"

# --target-epsilon replaces the preset's sigma
expect_ok "$BIN" train --preset dpmac-usps-eps8 "${P[@]}" --model ae:4-6-2-6-4:relu --epochs 1 --batch-size 100 \
  --z-steps 2 --target-epsilon 3 --out "$T/cal"
check 'grep -q "calibrated sigma" <<<"$LAST_OUT"' "no calibration with --target-epsilon under a preset"
check '! grep -q "preset flags.*--sigma" <<<"$LAST_OUT"' "the preset's --sigma was kept next to --target-epsilon"

# second order: header, one SGM event per step, learns something
C=(--algo dpmac "${P[@]}" --model mlp:4-8-3:tanh --loss bce --sigma 1.0 --clip 0.3 --batch-size 100 --z-steps 3 --lr 0.03)
expect_ok "$BIN" train "${C[@]}" --taylor-order 2 --clip2 0.3 --w-steps 3 --epochs 2 --out "$T/o2"
check 'grep -q "second order: Theta2 0.3, 3 W-steps per batch" <<<"$LAST_OUT"' "second-order header missing"
check 'python3 -c "
import json; l=json.load(open(\"$T/o2/ledger.json\")); assert l[\"total_sgm_steps\"]==24, l[\"total_sgm_steps\"]"' \
  "second order: one SGM event per step expected"
expect_ok "$BIN" train "${C[@]}" --z-mu 2 --lr-schedule exp:0.5:1 --epochs 3 --out "$T/mu"
check 'grep -q "mu 2," <<<"$LAST_OUT"' "--z-mu not in the header"
check 'python3 -c "
import json; lr=[json.loads(l)[\"lr\"] for l in open(\"$T/mu/metrics.jsonl\")]; assert lr==[0.03,0.015,0.015], lr"' \
  "exp:0.5:1 should hold the lr after one decay"
expect_ok "$BIN" train "${C[@]}" --model mlp:2-8-3:relu --pca-dims 2 --pca-sigma 8 --pca-project rows --epochs 1 --out "$T/raw"
check 'grep -q "rows as they are projected" <<<"$LAST_OUT"' "--pca-project rows not reported"
RAW_OUT=$LAST_OUT
expect_ok "$BIN" eval --checkpoint "$T/raw/checkpoint.safetensors" --json
check 'python3 -c "
import json,sys
e=json.loads(sys.argv[1]); m=[json.loads(l) for l in open(\"$T/raw/metrics.jsonl\")][-1]
assert e[\"test_loss\"]==m[\"test_loss\"], (e, m)
" "$LAST_OUT"' "eval of a --pca-project rows run differs from the run's last result: $LAST_OUT"
LAST_OUT=$RAW_OUT

expect_fail "--taylor-order must be 1 or 2" "$BIN" train "${C[@]}" --taylor-order 3 --out "$T/x"
expect_fail "--taylor-order 2 needs --clip2" "$BIN" train "${C[@]}" --taylor-order 2 --out "$T/x"
expect_fail "--clip2 applies to --taylor-order 2 only" "$BIN" train "${C[@]}" --clip2 0.3 --out "$T/x"
expect_fail "--clip2 must be > 0" "$BIN" train "${C[@]}" --taylor-order 2 --clip2 0 --out "$T/x"
expect_fail "--w-steps 2 needs --taylor-order 2" "$BIN" train "${C[@]}" --w-steps 2 --out "$T/x"
expect_fail "--w-steps must be in" "$BIN" train "${C[@]}" --taylor-order 2 --clip2 1 --w-steps 0 --out "$T/x"
expect_fail "--taylor-order 2 is not implemented with --secure" "$BIN" train "${C[@]}" --taylor-order 2 --clip2 1 --secure --out "$T/x"
expect_fail "separable" "$BIN" train "${C[@]}" --loss ce --taylor-order 2 --clip2 1 --out "$T/x"
expect_fail "--z-mu must be > 0" "$BIN" train "${C[@]}" --z-mu 0 --out "$T/x"
expect_fail "--pca-project: expected unit or rows" "$BIN" train "${C[@]}" --pca-project raw --out "$T/x"
expect_fail "DECAYS must be >= 1" "$BIN" train "${C[@]}" --lr-schedule exp:0.9:0 --out "$T/x"
harness_end
