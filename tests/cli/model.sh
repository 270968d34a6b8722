#!/usr/bin/env bash
# CLI: dptrain model lists a model's layers: for mnist_cnn every layer with its name, kind,
# output shape, parameter count and tensors (the counts add up to the model's), the names
# --freeze takes, a residual connection; the same from a checkpoint (file or run directory)
# and as JSON; refused with exit 2: no model, both, a bad spec, a file that is not a checkpoint.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
expect_ok "$BIN" model --model mnist_cnn
check 'grep -qE "^ +0  conv1 +conv +16 x 14 x 14 +1,040  conv1.weight 16x1x8x8, conv1.bias 16$" <<<"$LAST_OUT"' \
  "no conv1 row: $LAST_OUT"
check 'grep -qE "^ +9  fc2 +linear +10 +330  fc2.weight 10x32, fc2.bias 10$" <<<"$LAST_OUT"' "no fc2 row: $LAST_OUT"
check 'grep -qF "26,010 parameters" <<<"$LAST_OUT"' "no parameter total: $LAST_OUT"
check 'grep -qF "dptrain train --freeze takes these names): conv1,conv2,fc1,fc2" <<<"$LAST_OUT"' "no freeze names"
sum=$(awk '$1 ~ /^[0-9]+$/ && $NF != "-" { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9,]+$/ && $(i + 1) ~ /\.weight$/) { gsub(",", "", $i); s += $i } } END { print s }' <<<"$LAST_OUT")
check '[ "$sum" = 26010 ]' "the layers' parameters add up to $sum, not 26010"
expect_ok "$BIN" model --model resnet5
check 'grep -qF "conv4.bias 32 (+ its input: a residual connection)" <<<"$LAST_OUT"' "no residual note: $LAST_OUT"
# JSON: the same numbers
expect_ok "$BIN" model --model mnist_cnn --json
check 'python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d[\"parameters\"] == 26010 == sum(l[\"parameters\"] for l in d[\"layers\"]); assert [l[\"name\"] for l in d[\"layers\"] if l[\"parameters\"]] == [\"conv1\", \"conv2\", \"fc1\", \"fc2\"]; assert d[\"layers\"][0][\"tensors\"][0] == {\"name\": \"conv1.weight\", \"shape\": [16, 1, 8, 8]}" "$LAST_OUT"' \
  "the JSON does not describe mnist_cnn: $LAST_OUT"
# from a checkpoint, a file or its run directory
blobs_csv "$T/d.csv" 90
expect_ok "$BIN" train --dataset "csv:$T/d.csv" --model mlp:4-6-3:relu --epochs 1 --batch-size 30 --quiet --no-progress --out "$T/run"
expect_ok "$BIN" model --checkpoint "$T/run"
check 'grep -qE "^ +0  fc1 +linear +6 +30  fc1.weight 6x4, fc1.bias 6$" <<<"$LAST_OUT"' "checkpoint directory: $LAST_OUT"
expect_ok "$BIN" model --checkpoint "$T/run/checkpoint.safetensors"
check 'grep -qF "model mlp:4-6-3:relu" <<<"$LAST_OUT"' "checkpoint file: $LAST_OUT"
# refused
for args in "" "--model mnist_cnn --checkpoint $T/run" "--model bogus" "--checkpoint $T/d.csv" "--checkpoint $T/none"; do
  # shellcheck disable=SC2086
  check '[ "$("$BIN" model $args >/dev/null 2>&1; echo $?)" = 2 ]' "dptrain model $args does not exit 2"
done
expect_fail "unknown model kind 'bogus'" "$BIN" model --model bogus
expect_fail "give --model SPEC or --checkpoint FILE" "$BIN" model
harness_end
