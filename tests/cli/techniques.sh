#!/usr/bin/env bash
# CLI: --ema, --ema-warmup, --augment and --aug-mult (issue 42 item 4) on 1x5x5 "images"
# from a CSV. A DP-SGD run with all of them prints the EMA's test accuracy beside the raw
# one and writes test_accuracy_ema to metrics.jsonl; `dptrain eval` of the checkpoint
# reports the EMA's test loss (the checkpoint's model is the average); a resume with
# another --ema is refused. Bad values are refused with the flag's name (exit 2).
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
python3 - "$T/img.csv" <<'PY'
import random, sys
random.seed(2)
with open(sys.argv[1], "w") as f:
    f.write("label," + ",".join("p%d" % j for j in range(25)) + "\n")
    for i in range(300):
        c = i % 3
        f.write("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(0, 0.5) + (2.0 if j // 5 == c else 0.0)) for j in range(25))))
PY
D=(--dataset "csv:$T/img.csv" --threads 1 --no-progress --optimizer sgd --lr 0.2 --algo dpsgd --sigma 1 --clip 1
   --sampler poisson --batch-size 30 --seed 3 --model "cnn:1x5x5:conv4k3p1ws,relu,flatten,fc3")
expect_ok "$BIN" train "${D[@]}" --epochs 2 --ema 0.9 --ema-warmup --augment crop-flip --aug-mult 3 --out "$T/r"
check 'grep -q "test acc ema" <<<"$LAST_OUT"' "no EMA accuracy in the epoch lines: $LAST_OUT"
check 'grep -q "parameter average" <<<"$LAST_OUT"' "no EMA line in the summary: $LAST_OUT"
last=$(tail -1 "$T/r/metrics.jsonl")
check 'grep -q "\"test_accuracy_ema\"" <<<"$last"' "metrics line without test_accuracy_ema: $last"
ema_loss=$(python3 -c 'import json,sys; print("%.4f" % json.loads(sys.argv[1])["test_loss_ema"])' "$last")
expect_ok "$BIN" eval --checkpoint "$T/r"
check 'grep -q "loss $ema_loss" <<<"$LAST_OUT"' "eval does not read the EMA (want loss $ema_loss): $LAST_OUT"
expect_fail "parameter averaging" "$BIN" train "${D[@]}" --epochs 3 --ema 0.5 --ema-warmup --augment crop-flip \
  --aug-mult 3 --out "$T/r" --resume
expect_ok "$BIN" train "${D[@]}" --epochs 3 --ema 0.9 --ema-warmup --augment crop-flip --aug-mult 3 --out "$T/r" --resume
expect_fail "--aug-mult" "$BIN" train "${D[@]}" --aug-mult 2 --out "$T/x1"
expect_fail "--augment" "$BIN" train "${D[@]}" --augment rotate --out "$T/x2"
expect_fail "--aug-mult" "$BIN" train "${D[@]}" --augment crop --aug-mult 0 --out "$T/x3"
expect_fail "--ema" "$BIN" train "${D[@]}" --ema 1.5 --out "$T/x4"
expect_fail "--ema-warmup" "$BIN" train "${D[@]}" --ema-warmup --out "$T/x5"
expect_fail "5x5" "$BIN" train "${D[@]}" --augment crop --model mlp:25-8-3 --out "$T/x6"
expect_fail "dpsgd" "$BIN" train --dataset "csv:$T/img.csv" --threads 1 --no-progress --model "cnn:1x5x5:conv4k3p1,relu,flatten,fc3" \
  --augment crop --algo sgd --out "$T/x7"
harness_end
