#!/usr/bin/env bash
# CLI: --loss token-ce trains a causal language model on next-token ids given as --targets
# T (csv: files, the T next tokens before the T input tokens): DP-SGD reports the test loss
# per token and its perplexity (epoch lines, summary, metrics.jsonl with test_perplexity
# and no mse or accuracy), eval rebuilds the split and prints the same (text and --json).
# Refused: token-ce without --targets, and a model without V logits per target position.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
# sequences of 6 ids in 0..4, next = current + 2 mod 5; columns: 6 targets, then 6 inputs
python3 - "$T" <<'PY'
import random, sys
random.seed(4)
for name, n in (("train", 300), ("test", 60)):
    with open("%s/%s.csv" % (sys.argv[1], name), "w") as f:
        for _ in range(n):
            s = [random.randrange(5)]
            for _ in range(6):
                s.append((s[-1] + 2) % 5)
            f.write(",".join(str(v) for v in s[1:] + s[:6]) + "\n")
PY
M="seq:6:emb5x8,[ln,plin24,attn2c,plin8],[ln,plin32,gelu,plin8],ln,plin5"
D=(--dataset "csv:$T/train.csv,$T/test.csv" --targets 6 --loss token-ce --threads 1 --no-progress --normalize none)

expect_ok "$BIN" train "${D[@]}" --model "$M" --algo dpsgd --sigma 1 --batch-size 30 --lr 0.02 --epochs 2 --seed 5 \
  --out "$T/lm"
check 'grep -q "^epoch 2/2  step [0-9]*  test loss [0-9.]*  (perplexity [0-9.e+]*)  epsilon" <<<"$LAST_OUT"' \
  "the epoch line does not report the test loss and perplexity: $LAST_OUT"
check 'grep -q "^test loss [0-9.]*  (perplexity [0-9.e+]*)  after 2 epochs" <<<"$LAST_OUT"' \
  "the summary does not report the test loss and perplexity: $LAST_OUT"
check '! grep -q "acc\|mse" <<<"$LAST_OUT"' "a language-model run reports an accuracy or mse: $LAST_OUT"
check 'tail -1 "$T/lm/metrics.jsonl" | grep -q "\"test_perplexity\"" && ! grep -q "test_mse\|test_accuracy" "$T/lm/metrics.jsonl"' \
  "metrics.jsonl: $(tail -1 "$T/lm/metrics.jsonl")"
loss=$(tail -1 "$T/lm/metrics.jsonl" | python3 -c 'import json, sys; print("%.4f" % json.load(sys.stdin)["test_loss"])')
expect_ok "$BIN" eval --checkpoint "$T/lm/checkpoint.safetensors"
check 'grep -qF "60 test examples: loss $loss per token, perplexity" <<<"$LAST_OUT"' \
  "eval does not print the run's loss $loss per token: $LAST_OUT"
expect_ok "$BIN" eval --checkpoint "$T/lm/checkpoint.safetensors" --json
check '[ "$(python3 -c "import json, sys; d = json.loads(sys.argv[1]); print(\"test_perplexity\" in d, \"test_mse\" in d)" "$LAST_OUT")" = "True False" ]' \
  "eval --json: $LAST_OUT"

expect_fail "--loss token-ce: needs the next tokens as --targets" "$BIN" train --dataset "csv:$T/train.csv" \
  --loss token-ce --model "$M" --threads 1 --out "$T/no1"
expect_fail "not V logits for each of the 6 target tokens" "$BIN" train "${D[@]}" --model "seq:6:emb5x4,meanpool,fc7" \
  --out "$T/no2"
harness_end
