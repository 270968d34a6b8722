#!/usr/bin/env bash
# CLI: --targets K trains on real-valued regression targets (the first K columns of csv:
# files). Non-private full-batch SGD on noise-free linear targets fits them (test mse below
# 1e-5); DP-SGD reports the test mse (epoch lines, summary, metrics.jsonl without an
# accuracy), and eval rebuilds the regression test split from the checkpoint and prints the
# same mse (text and --json). A resume needs the same --targets. Refused before the data are
# loaded (exit 2, no --out created): targets from a labelled dataset, --classes, --loss ce,
# an algorithm that cannot train on targets; a non-numeric target names file:line:column;
# the audit refuses a regression checkpoint (exit 2).
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
# t1 = 2a - b + 0.5, t2 = a + b + c (exact), features uniform in [-1, 1]
python3 - "$T" <<'PY'
import random, sys
random.seed(3)
for name, n in (("train", 400), ("test", 100)):
    with open("%s/%s.csv" % (sys.argv[1], name), "w") as f:
        f.write("t1,t2,a,b,c\n")
        for _ in range(n):
            a, b, c = (random.uniform(-1, 1) for _ in range(3))
            f.write("%.6f,%.6f,%.6f,%.6f,%.6f\n" % (2 * a - b + 0.5, a + b + c, a, b, c))
PY
D=(--dataset "csv:$T/train.csv,$T/test.csv" --targets 2 --model mlp:3-2 --threads 1 --no-progress --optimizer sgd)

# -- non-private full-batch SGD fits exact linear targets
expect_ok "$BIN" train "${D[@]}" --sampler full --lr 0.5 --epochs 300 --quiet --out "$T/fit"
mse=$(grep -o "^test mse [0-9.e+-]*" <<<"$LAST_OUT" | awk '{print $3}')
check 'awk -v m="$mse" "BEGIN { exit !(m != \"\" && m < 1e-5) }"' "full-batch SGD did not fit exact linear targets: $LAST_OUT"

# -- DP-SGD: the mse in the epoch lines, the summary and metrics.jsonl; no accuracy anywhere
expect_ok "$BIN" train "${D[@]}" --algo dpsgd --sigma 1 --batch-size 40 --lr 0.5 --epochs 3 --out "$T/dp"
check 'grep -q "^epoch 3/3  step 30  test mse [0-9.e+-]*  (rmse [0-9.e+-]*)  epsilon" <<<"$LAST_OUT"' \
  "the epoch line does not report the test mse: $LAST_OUT"
check 'grep -q "^test mse .* after 3 epochs .*\[DP-SGD\]" <<<"$LAST_OUT"' "the summary does not report the test mse"
check '! grep -qE "accuracy|[a-z] acc " <<<"$LAST_OUT"' "a regression run reports an accuracy: $LAST_OUT"
check '[ "$(tail -1 "$T/dp/metrics.jsonl" | grep -c "\"test_mse\"")" = 1 ] && ! grep -q test_accuracy "$T/dp/metrics.jsonl"' \
  "metrics.jsonl: $(tail -1 "$T/dp/metrics.jsonl")"
last_mse=$(tail -1 "$T/dp/metrics.jsonl" | python3 -c 'import json, sys; print("%.5g" % json.load(sys.stdin)["test_mse"])')
expect_ok "$BIN" eval --checkpoint "$T/dp/checkpoint.safetensors"
check 'grep -qF "100 test examples: loss" <<<"$LAST_OUT" && grep -qF "mse $last_mse (rmse" <<<"$LAST_OUT"' \
  "eval does not print the run's mse $last_mse: $LAST_OUT"
expect_ok "$BIN" eval --checkpoint "$T/dp/checkpoint.safetensors" --json
check '[ "$(python3 -c "import json, sys; d = json.loads(sys.argv[1]); print(\"%.5g\" % d[\"test_mse\"], \"test_accuracy\" in d)" "$LAST_OUT")" = "$last_mse False" ]' \
  "eval --json: $LAST_OUT"
expect_fail "only mse applies" "$BIN" eval --checkpoint "$T/dp/checkpoint.safetensors" --loss ce

# -- resume: the same --targets
R=(--dataset "csv:$T/train.csv,$T/test.csv" --model mlp:3-2 --threads 1 --no-progress --optimizer sgd --algo dpsgd
   --sigma 1 --batch-size 40 --lr 0.5 --epochs 4 --out "$T/dp" --resume)
expect_fail "was trained with --targets 2; resume with the same" "$BIN" train "${R[@]}"
expect_fail "was trained with --targets 2" "$BIN" train "${R[@]}" --targets 1
expect_ok "$BIN" train "${R[@]}" --targets 2 --quiet
check 'grep -q "after 4 epochs (40 steps" <<<"$LAST_OUT"' "the resumed run did not continue: $LAST_OUT"

# -- refusals before the data are loaded: exit 2, no --out
refused() { # NEEDLE args...
  local needle=$1; shift
  expect_fail "$needle" "$BIN" train --threads 1 --out "$T/no" "$@"
  check '[ "$("$BIN" train --threads 1 --out "$T/no" "$@" >/dev/null 2>&1; echo $?)" = 2 ] && [ ! -e "$T/no" ]' \
    "not exit 2, or --out created: $*"
}
refused "dataset fashion-mnist has class labels" --targets 1
refused "--classes: not with --targets" "${D[@]}" --classes 0,1
refused "--loss ce: regression targets (--targets) train with --loss mse" "${D[@]}" --loss ce
refused "--targets: not with --algo dpulr" "${D[@]}" --algo dpulr --sigma0 5
refused "--targets must be in" "${D[@]}" --targets -1
refused "has 3 outputs but the data have 2 regression targets" "${D[@]}" --model mlp:3-3
printf 't,a\n1,2\nx,3\n' >"$T/bad.csv"
refused "bad.csv:3:1" --dataset "csv:$T/bad.csv" --targets 1 --model mlp:1-1

# -- the audit scores classifiers only
expect_fail "a regression run (--targets)" "$BIN" audit --checkpoint "$T/dp/checkpoint.safetensors"
check '[ "$("$BIN" audit --checkpoint "$T/dp/checkpoint.safetensors" >/dev/null 2>&1; echo $?)" = 2 ]' "audit: not exit 2"
harness_end
