#!/usr/bin/env bash
# CLI: dptrain train / eval on a tiny CSV made here. Good runs succeed and write their
# files; bad flags, missing files and corrupted checkpoints exit non-zero with one clear
# line naming the flag or file.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
# 3 classes, 4 features, separable
python3 - "$T/d.csv" <<'PY'
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as f:
    f.write("label,a,b,c,d\n")
    for i in range(300):
        c = i % 3
        f.write("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(0, 0.5) + (2.0 if j % 3 == c else 0.0)) for j in range(4))))
PY
printf 'label,a,b,c,d\n0,1,2,nan,4\n' > "$T/nan.csv"

expect_ok "$BIN" --help
expect_ok "$BIN" train --help
checks=$((checks+1))
if ! "$BIN" train --help | grep -q -- "--batch-size B.*(default: 256)"; then echo "FAIL: help lacks --batch-size default"; fail=$((fail+1)); fi
COMMON=(--dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --batch-size 16 --lr 0.01 --threads 1 --no-progress)
expect_ok "$BIN" train "${COMMON[@]}" --epochs 2 --out "$T/run"
check 'grep -q "test set: the training set itself" <<<"$LAST_OUT"' "csv:PATH without TEST does not say its test set is the training set"
checks=$((checks+1))
[ "$(wc -l < "$T/run/metrics.jsonl")" -eq 2 ] || { echo "FAIL: metrics.jsonl should have 2 lines"; fail=$((fail+1)); }
checks=$((checks+1))
python3 -c '
import json,sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    assert {"epoch","step","train_loss","test_loss","test_accuracy","wall_s"} <= o.keys(), o
    assert 0 <= o["test_accuracy"] <= 1
' "$T/run/metrics.jsonl" || { echo "FAIL: metrics keys"; fail=$((fail+1)); }
expect_ok "$BIN" eval --checkpoint "$T/run/checkpoint.safetensors" --json
check 'python3 -c "
import json,sys
e=json.loads(sys.argv[1]); m=[json.loads(l) for l in open(\"$T/run/metrics.jsonl\")][-1]
assert \"epsilon\" not in e and abs(e[\"test_accuracy\"]-m[\"test_accuracy\"])<1e-6, (e, m)
" "$LAST_OUT"' "eval of a non-private run: accuracy differs from the run's, or an epsilon"
expect_ok "$BIN" train "${COMMON[@]}" --epochs 3 --out "$T/run" --resume

expect_fail "--lr" "$BIN" train "${COMMON[@]}" --lr -1 --out "$T/x"
expect_fail "--lr" "$BIN" train "${COMMON[@]}" --lr abc --out "$T/x"
expect_fail "not a layer width" "$BIN" train "${COMMON[@]}" --model mlp:4-x-3 --out "$T/x"
expect_fail "unknown activation" "$BIN" train "${COMMON[@]}" --model mlp:4-8-3:swishy --out "$T/x"
# the --algo registry: unknown algorithms list the known ones; privacy flags need a private algorithm
expect_fail "available: sgd, dpsgd" "$BIN" train "${COMMON[@]}" --algo nosuch --out "$T/x"
expect_fail "--sigma: --algo sgd is not a differentially private" "$BIN" train "${COMMON[@]}" --sigma 1 --out "$T/x"
expect_fail "--target-epsilon: --algo sgd is not" "$BIN" train "${COMMON[@]}" --target-epsilon=2 --out "$T/x"
checks=$((checks+1)); if ! "$BIN" train --help | grep -q "Privacy options"; then echo "FAIL: --help lacks the privacy options"; fail=$((fail+1)); fi
expect_fail "has 4 features" "$BIN" train --dataset "csv:$T/d.csv" --model mlp:5-3 --out "$T/x"
expect_fail "nosuch.csv" "$BIN" train --dataset "csv:$T/nosuch.csv" --out "$T/x"
expect_fail "nan.csv" "$BIN" train --dataset "csv:$T/nan.csv" --model mlp:4-3 --out "$T/x"
expect_fail "--epochs" "$BIN" train "${COMMON[@]}" --epochs 0 --out "$T/x"
expect_fail "--batch-size" "$BIN" train "${COMMON[@]}" --batch-size 0 --out "$T/x"
expect_fail "--bogus" "$BIN" train --bogus
expect_fail "unknown command" "$BIN" frobnicate
expect_fail "--checkpoint" "$BIN" eval
# a run on a relative CSV path is evaluated from another directory (the checkpoint records it absolute)
out=$(cd "$T" && "$BIN" train --dataset csv:d.csv --model mlp:4-8-3:relu --epochs 1 --threads 1 --quiet --no-progress \
  --out rel 2>&1) || echo "FAIL: train on a relative csv path: $out"
out=$(cd / && "$BIN" eval --checkpoint "$T/rel/checkpoint.safetensors" 2>&1); rc=$?
check "[ $rc -eq 0 ] && grep -q '300 test examples' <<<\"\$out\"" "eval from another directory of a relative-csv run: $out"
expect_fail "nope.safetensors" "$BIN" eval --checkpoint "$T/nope.safetensors"
head -c 200 "$T/run/checkpoint.safetensors" > "$T/trunc.safetensors"
expect_fail "truncated" "$BIN" eval --checkpoint "$T/trunc.safetensors"
cp "$T/run/checkpoint.safetensors" "$T/flip.safetensors"
printf '\x55' | dd of="$T/flip.safetensors" bs=1 seek=$(( $(stat -c %s "$T/flip.safetensors") - 10 )) conv=notrunc 2>/dev/null
expect_fail "flip.safetensors" "$BIN" eval --checkpoint "$T/flip.safetensors"
expect_fail "seed was drawn from the OS, now 9" "$BIN" train "${COMMON[@]}" --epochs 4 --out "$T/run" --resume --seed 9
# resumed without --seed, the run continues with its own (OS) seed
expect_ok "$BIN" train "${COMMON[@]}" --epochs 4 --out "$T/run" --resume
# a changed learning rate on resume is used, and said so
expect_ok "$BIN" train "${COMMON[@]}" --epochs 4 --out "$T/run" --resume --lr 0.02
check 'grep -q "note: resuming with learning rate 0.02 (the checkpoint.s run used 0.01)" <<<"$LAST_OUT"' "no note for a changed --lr on resume"

# without --out the same command runs again: each run gets runs/<time>-<hex>, runs/latest
# names the newest, and --resume without --out continues it
mkdir "$T/cwd"
expect_ok bash -c "cd '$T/cwd' && '$BIN' train ${COMMON[*]} --epochs 1"
first=$(readlink "$T/cwd/runs/latest")
expect_ok bash -c "cd '$T/cwd' && '$BIN' train ${COMMON[*]} --epochs 1"
second=$(readlink "$T/cwd/runs/latest")
check '[ -n "$first" ] && [ -n "$second" ] && [ "$first" != "$second" ] && [ -f "$T/cwd/runs/$first/checkpoint.safetensors" ] && [[ $second =~ ^[0-9]{8}-[0-9]{6}-[0-9a-f]{4}$ ]]' \
  "two runs without --out: runs/latest was '$first' then '$second'"
check 'grep -q "run dir runs/$second" <<<"$LAST_OUT"' "the run did not name its directory: $LAST_OUT"
expect_ok bash -c "cd '$T/cwd' && '$BIN' train ${COMMON[*]} --epochs 2 --resume"
check '[ "$(wc -l < "$T/cwd/runs/$second/metrics.jsonl")" -eq 2 ] && [ "$(wc -l < "$T/cwd/runs/$first/metrics.jsonl")" -eq 1 ]' \
  "--resume without --out did not continue runs/latest"
# an older dptrain's real runs/latest directory is left alone
mkdir -p "$T/cwd2/runs/latest"
expect_ok bash -c "cd '$T/cwd2' && '$BIN' train ${COMMON[*]} --epochs 1"
check '[ -d "$T/cwd2/runs/latest" ] && [ ! -L "$T/cwd2/runs/latest" ] && grep -q "not a symbolic link" <<<"$LAST_OUT"' \
  "a real runs/latest directory was replaced or not reported: $LAST_OUT"

harness_end
