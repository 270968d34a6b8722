#!/usr/bin/env bash
# CLI: dptrain train --algo dpmac on CSV data made here. Bad settings are errors naming the
# flag; a classifier run (bce, sigmoid outputs) with DP-PCA prints an epsilon that covers
# PCA + training (ledger: one Gaussian event + T SGM steps; larger than training alone) and
# the paper's accounting beside it; --target-epsilon calibrates sigma with the PCA included
# and the spent epsilon is within the target; an autoencoder run (ae:, mse) works;
# --resume continues the ledger without recording the PCA twice; centring by a DP mean
# (--center-clip/--center-sigma) adds its own Gaussian event and is in the calibration.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
python3 - "$T/d.csv" <<'PY'
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as f:
    f.write("label," + ",".join("f%d" % j for j in range(8)) + "\n")
    for i in range(3000):
        c = i % 3
        f.write("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(0, 0.5) + (2.0 if j % 3 == c else 0.0)) for j in range(8))))
PY
C=(--algo dpmac --dataset "csv:$T/d.csv" --normalize none --threads 1 --no-progress --loss bce --lr 0.03 --clip 0.3
   --batch-size 100 --z-steps 10 --z-lr 0.01)

expect_fail "--clip" "$BIN" train "${C[@]}" --model mlp:8-16-3:relu --sigma 1 --clip 0 --out "$T/x"
expect_fail "--sigma" "$BIN" train "${C[@]}" --model mlp:8-16-3:relu --sigma 0 --out "$T/x"
expect_fail "--sigma or --target-epsilon" "$BIN" train "${C[@]}" --model mlp:8-16-3:relu --out "$T/x"
expect_fail "--z-steps" "$BIN" train "${C[@]}" --model mlp:8-16-3:relu --sigma 1 --z-steps -1 --out "$T/x"
expect_fail "--z-lr" "$BIN" train "${C[@]}" --model mlp:8-16-3:relu --sigma 1 --z-lr 0 --out "$T/x"
expect_fail "--pca-sigma" "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1 --pca-dims 4 --out "$T/x"
expect_fail "--pca-dims" "$BIN" train "${C[@]}" --model mlp:8-16-3:relu --sigma 1 --pca-sigma 4 --out "$T/x"
expect_fail "--pca-sigma" "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1 --pca-dims 4 --pca-sigma 0 --out "$T/x"
expect_fail "--pca-dims" "$BIN" train "${C[@]}" --model mlp:9-16-3:relu --sigma 1 --pca-dims 9 --pca-sigma 4 --out "$T/x"
expect_fail "--sampler poisson" "$BIN" train "${C[@]}" --model mlp:8-16-3:relu --sigma 1 --sampler shuffle --out "$T/x"
expect_fail "--clip-mode" "$BIN" train "${C[@]}" --model mlp:8-16-3:relu --sigma 1 --clip-mode per-layer --out "$T/x"
expect_fail "--z-steps is an option of --algo dpmac" "$BIN" train --algo dpsgd --dataset "csv:$T/d.csv" --sigma 1 --z-steps 3 --out "$T/x"
expect_fail "autoencoder" "$BIN" train "${C[@]}" --model mlp:8-16-3:relu --loss mse --sigma 1 --epochs 1 --out "$T/x"
expect_fail "the releases before training alone, DP-PCA (--pca-sigma 1), spend epsilon" "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --target-epsilon 0.05 --pca-dims 4 --pca-sigma 1 --out "$T/x"

# classifier with DP-PCA: ledger = PCA + training
expect_ok "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1.1 --pca-dims 4 --pca-sigma 8 --epochs 2 --out "$T/run"
check 'grep -q "DP-PCA to 4 dimensions" <<<"$LAST_OUT"' "DP-PCA notice missing"
check 'grep -q "paper.s accounting" <<<"$LAST_OUT"' "paper's accounting line missing"
check 'grep -q "\[DP-MAC\]" <<<"$LAST_OUT"' "DP-MAC tag missing"
EPS=$(grep -o "privacy: epsilon [0-9.e+-]*" <<<"$LAST_OUT" | awk '{print $3}')
ACC=$(grep -o "test accuracy [0-9.]*" <<<"$LAST_OUT" | awk '{print $3}')
# eval maps the test split through the run's released DP-PCA (recorded in the checkpoint) and
# gets the run's own last accuracy; without the record it says why it cannot
expect_ok "$BIN" eval --checkpoint "$T/run/checkpoint.safetensors" --json
check 'python3 -c "
import json,sys
e=json.loads(sys.argv[1]); m=[json.loads(l) for l in open(\"$T/run/metrics.jsonl\")][-1]
assert e[\"test_accuracy\"]==m[\"test_accuracy\"] and e[\"test_loss\"]==m[\"test_loss\"], (e, m)
" "$LAST_OUT"' "eval of a DP-PCA run differs from the run's last result: $LAST_OUT"
check 'python3 -c "
import json
l=json.load(open(\"$T/run/ledger.json\"))
assert l[\"total_sgm_steps\"]==60, l[\"total_sgm_steps\"]
s=json.dumps(l); assert \"dp-pca\" in s, s[:400]
"' "ledger lacks the 60 SGM steps or the dp-pca event"
check "\"$BIN\" account --sigma 1.1 --sample-rate 0.03333333333333333 --steps 60 --delta 1e-5 2>&1 | python3 -c \"
import re,sys
t=sys.stdin.read(); e=float(re.search(r'epsilon[^0-9]*([0-9.]+)', t).group(1))
assert $EPS > e, ($EPS, e)
\"" "epsilon with PCA ($EPS) should exceed training alone"
check "python3 -c 'assert float(\"$ACC\") > 70, \"$ACC\"'" "DP-MAC with PCA did not learn: $ACC%"

EPS_PCA=$EPS

# centring by a DP mean before DP-PCA: its own Gaussian event, epsilon above PCA + training
expect_fail "--pca-dims" "$BIN" train "${C[@]}" --model mlp:8-16-3:relu --sigma 1 --center-clip 6 --center-sigma 10 --out "$T/x"
expect_fail "--center-sigma" "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1 --pca-dims 4 --pca-sigma 8 --center-clip 6 --out "$T/x"
expect_fail "--center-clip" "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1 --pca-dims 4 --pca-sigma 8 --center-sigma 10 --out "$T/x"
expect_fail "--center-clip must be > 0" "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1 --pca-dims 4 --pca-sigma 8 --center-clip 0 --center-sigma 10 --out "$T/x"
expect_fail "--center-sigma must be > 0" "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1 --pca-dims 4 --pca-sigma 8 --center-clip 6 --center-sigma -1 --out "$T/x"
expect_fail "--center-clip is an option of --algo dpmac" "$BIN" train --algo dpsgd --dataset "csv:$T/d.csv" --sigma 1 --center-clip 3 --out "$T/x"
expect_ok "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1.1 --pca-dims 4 --pca-sigma 8 --center-clip 6 --center-sigma 10 --epochs 2 --out "$T/cen"
check 'grep -q "centred train and test by a DP mean" <<<"$LAST_OUT" && grep -q "covers the DP mean" <<<"$LAST_OUT"' "DP mean notice or privacy line missing"
CEN_OUT=$LAST_OUT
# eval of a centred DP-PCA run: the recorded DP mean too
expect_ok "$BIN" eval --checkpoint "$T/cen/checkpoint.safetensors" --json
check 'python3 -c "
import json,sys
e=json.loads(sys.argv[1]); m=[json.loads(l) for l in open(\"$T/cen/metrics.jsonl\")][-1]
assert e[\"test_accuracy\"]==m[\"test_accuracy\"] and e[\"test_loss\"]==m[\"test_loss\"], (e, m)
" "$LAST_OUT"' "eval of a centred DP-PCA run differs from the run's last result: $LAST_OUT"
# audit --checkpoint attacks it on the same centred, projected inputs (it was refused: 8 features, model 4)
expect_ok "$BIN" audit --checkpoint "$T/cen/checkpoint.safetensors" --shadows 0 --bootstrap 10 --no-plot \
  --threads 1 --quiet --out "$T/cen_audit"
check 'grep -q "^loss " <<<"$LAST_OUT" && [ -s "$T/cen_audit/audit.csv" ]' "audit of a DP-PCA run: $LAST_OUT"
LAST_OUT=$CEN_OUT
EPS=$(grep -o "privacy: epsilon [0-9.e+-]*" <<<"$LAST_OUT" | awk '{print $3}')
ACC=$(grep -o "test accuracy [0-9.]*" <<<"$LAST_OUT" | awk '{print $3}')
check "python3 -c 'assert float(\"$EPS\") > float(\"$EPS_PCA\"), (\"$EPS\", \"$EPS_PCA\")'" "epsilon with the DP mean ($EPS) should exceed PCA + training ($EPS_PCA)"
check "python3 -c 'assert float(\"$ACC\") > 70, \"$ACC\"'" "DP-MAC with centring did not learn: $ACC%"
check 'python3 -c "
import json
ev=json.load(open(\"$T/cen/ledger.json\"))[\"events\"]
g=[(e[\"label\"], e[\"sensitivity\"], e[\"sigma\"]) for e in ev if e[\"type\"]==\"gaussian\"]
assert g==[(\"dp-mean\",1,10),(\"dp-pca\",1,8)], g
"' "ledger: want the dp-mean (multiplier 10) and dp-pca (8) Gaussian events"
expect_ok "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --target-epsilon 3 --pca-dims 4 --pca-sigma 8 --center-clip 6 --center-sigma 10 --epochs 2 --out "$T/cencal"
check 'grep -q "calibrated sigma .* DP mean and DP-PCA included" <<<"$LAST_OUT"' "calibration notice (DP mean) missing"
EPS=$(grep -o "privacy: epsilon [0-9.e+-]*" <<<"$LAST_OUT" | awk '{print $3}')
check "python3 -c 'e=float(\"$EPS\"); assert 2.95 < e <= 3.0005, e'" "calibrated centred run spent $EPS, want ~3"

# resume: the ledger continues, the PCA is not recorded twice
expect_ok "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1.1 --pca-dims 4 --pca-sigma 8 --epochs 3 --resume --out "$T/run"
check 'python3 -c "
import json
l=json.load(open(\"$T/run/ledger.json\"))
assert l[\"total_sgm_steps\"]==90, l[\"total_sgm_steps\"]
assert json.dumps(l).count(\"dp-pca\")==1
"' "resumed ledger: want 90 steps and one dp-pca event"
# a resumed run keeps its algorithm's settings (sigma: the ledger; the rest: the checkpoint)
expect_fail "algorithm settings was clip 0.3, z_steps 10, .* now clip 0.3, z_steps 5," \
  "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1.1 --pca-dims 4 --pca-sigma 8 --z-steps 5 --epochs 4 --resume --out "$T/run"

# resume of a centred run: the checkpoint's DP mean and DP-PCA are applied again, never
# released again (a second release with fresh noise, or the same noise on other data, would
# publish their difference: the adversarial review found 2 mean_2 - mean_1 equal to the
# noiseless mean); other noise settings than the ones they were released with are refused
pca_of() { python3 -c "
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
print(json.dumps(json.loads(json.loads(b[8:8 + n])['__metadata__']['state'])['run']['pca'], sort_keys=True))
" "$1"; }
PCA1=$(pca_of "$T/cen/checkpoint.safetensors")
expect_fail "--center-sigma 2: the checkpoint's DP mean was released with --center-sigma 10" \
  "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1.1 --pca-dims 4 --pca-sigma 8 --center-clip 6 --center-sigma 2 --epochs 3 --resume --allow-ledger-mismatch --out "$T/cen"
expect_ok "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1.1 --pca-dims 4 --pca-sigma 8 --center-clip 6 --center-sigma 10 --epochs 3 --resume --out "$T/cen"
check 'grep -q "resumed with the checkpoint.s DP mean and DP-PCA to 4 dimensions (no new release)" <<<"$LAST_OUT"' "resume did not reuse the DP mean and DP-PCA"
PCA2=$(pca_of "$T/cen/checkpoint.safetensors")
check '[ -n "$PCA1" ] && [ "$PCA1" = "$PCA2" ]' "the resumed run published another DP mean or DP-PCA"
check 'python3 -c "
import json
ev=json.load(open(\"$T/cen/ledger.json\"))[\"events\"]
g=[e[\"label\"] for e in ev if e[\"type\"]==\"gaussian\"]
assert g==[\"dp-mean\",\"dp-pca\"], g
"' "resumed centred ledger: want one dp-mean and one dp-pca event"

# calibration with PCA included
expect_ok "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --target-epsilon 3 --pca-dims 4 --pca-sigma 8 --epochs 2 --out "$T/cal"
check 'grep -q "calibrated sigma .* DP-PCA included" <<<"$LAST_OUT"' "calibration notice missing"
EPS=$(grep -o "privacy: epsilon [0-9.e+-]*" <<<"$LAST_OUT" | awk '{print $3}')
check "python3 -c 'e=float(\"$EPS\"); assert 2.95 < e <= 3.0005, e'" "calibrated run spent $EPS, want ~3"

# secure mode: works with --sigma (effective multipliers in the ledger), refuses calibration
expect_ok "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --sigma 1.1 --pca-dims 4 --pca-sigma 8 --epochs 1 --secure --out "$T/sec"
check 'grep -q "secure mode" <<<"$LAST_OUT" && grep -q "privacy: epsilon" <<<"$LAST_OUT"' "secure run: notice or epsilon missing"
expect_fail "--secure with --target-epsilon" "$BIN" train "${C[@]}" --model mlp:4-16-3:relu --target-epsilon 3 --secure --out "$T/x"

# autoencoder with squared error
expect_ok "$BIN" train --algo dpmac --dataset "csv:$T/d.csv" --normalize none --threads 1 --no-progress --loss mse \
  --model ae:8-12-4-12-8:relu --sigma 1 --clip 0.1 --batch-size 100 --epochs 2 --lr 0.01 --out "$T/ae"
check 'grep -q "test loss" <<<"$LAST_OUT"' "autoencoder run printed no test loss"

# --algo mac: the non-private baseline (no privacy flags, labelled non-private, no epsilon)
M=(--algo mac --dataset "csv:$T/d.csv" --normalize none --threads 1 --no-progress --batch-size 100 --z-steps 10 --z-lr 0.01)
expect_fail "not a differentially private algorithm" "$BIN" train "${M[@]}" --loss bce --model mlp:8-16-3:relu --sigma 1 --out "$T/x"
expect_fail "--pca-dims is an option of --algo dpmac" "$BIN" train "${M[@]}" --loss bce --model mlp:8-16-3:relu --pca-dims 4 --out "$T/x"
expect_fail "--z-lr" "$BIN" train "${M[@]}" --loss bce --model mlp:8-16-3:relu --z-lr 0 --out "$T/x"
expect_ok "$BIN" train "${M[@]}" --loss bce --model mlp:8-16-3:relu --lr 0.03 --epochs 2 --out "$T/mac"
check 'grep -q "algorithm mac (non-private" <<<"$LAST_OUT" && grep -q "\[non-private MAC\]" <<<"$LAST_OUT"' "mac run not labelled non-private"
check '! grep -q "epsilon" <<<"$LAST_OUT"' "a non-private run printed an epsilon"
check 'grep -q "\"privacy\":\"non-private" "$T/mac/metrics.jsonl" && ! grep -q epsilon "$T/mac/metrics.jsonl"' "mac metrics not labelled non-private"
ACC=$(grep -o "test accuracy [0-9.]*" <<<"$LAST_OUT" | awk '{print $3}')
check "python3 -c 'assert float(\"$ACC\") > 80, \"$ACC\"'" "mac did not learn: $ACC%"
expect_ok "$BIN" train "${M[@]}" --loss mse --model ae:8-12-4-12-8:relu --lr 0.01 --epochs 2 --out "$T/macae"
check 'grep -q "test loss" <<<"$LAST_OUT"' "mac autoencoder printed no test loss"

harness_end
