#!/usr/bin/env bash
# CLI: every line that shows an epsilon or a result carries the run's labels, not only the
# final privacy line: a seeded run ([SEEDED]), an epsilon that excludes something
# ([epsilon does NOT cover: ...]), DP-SGD on shuffled batches ([non-accounted: ...]) and
# PDP-SGD ([no formal DP guarantee]) say so on each epoch line (stderr), on the final result
# line, in a resumed run's republished line, and in `dptrain eval` of the checkpoint.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 600
C=(--dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --threads 1 --no-progress --optimizer sgd --lr 0.5 --batch-size 60 --epochs 2)
epoch_lines() { grep -E "^epoch [0-9]+/" <<<"$LAST_OUT"; }
every_epoch_line() { # every epoch line (there are $2) holds the fixed string $1
  [ "$(epoch_lines | grep -cF -- "$1")" = "$2" ] && [ "$(epoch_lines | wc -l)" = "$2" ]
}

# a seeded run whose test set is its training set: both labels on both epoch lines
expect_ok "$BIN" train --algo dpsgd "${C[@]}" --sigma 1.2 --seed 5 --out "$T/seeded"
check 'every_epoch_line "[SEEDED]" 2 && every_epoch_line "[epsilon does NOT cover: test metrics computed on the training data]" 2' \
  "epoch lines of a seeded run without its labels: $LAST_OUT"
check 'grep -qE "^test accuracy .*\[DP-SGD\]  \[epsilon does NOT cover: .*\]  \[SEEDED\]$" <<<"$LAST_OUT"' \
  "the final result line of a seeded run without its labels: $LAST_OUT"
check 'grep -q "^privacy: epsilon .*\[SEEDED run (a chosen seed): holds only while the seed stays secret and no other run uses it\]" <<<"$LAST_OUT"' \
  "the final privacy line lost its label: $LAST_OUT"
expect_ok "$BIN" eval --checkpoint "$T/seeded/checkpoint.safetensors" --threads 1
check 'grep -q "epsilon .*\[SEEDED run" <<<"$LAST_OUT"' "eval of a seeded run without its label: $LAST_OUT"
# resumed: the republished and the new epoch lines keep the label
expect_ok "$BIN" train --algo dpsgd "${C[@]}" --sigma 1.2 --epochs 3 --resume --out "$T/seeded"
check 'every_epoch_line "[SEEDED]" 1' "the resumed seeded run's epoch line without its label: $LAST_OUT"

# an OS-seeded run with its own test split: no label anywhere
head -n 401 "$T/d.csv" >"$T/tr.csv"; { head -n 1 "$T/d.csv"; tail -n 200 "$T/d.csv"; } >"$T/te.csv"
expect_ok "$BIN" train --algo dpsgd --dataset "csv:$T/tr.csv,$T/te.csv" "${C[@]:2}" --sigma 1.2 --out "$T/plain"
check '[ "$(epoch_lines | wc -l)" = 2 ] && ! epoch_lines | grep -q "\[" && ! grep -q "^test accuracy .*\]  \[" <<<"$LAST_OUT"' \
  "a default run labelled: $LAST_OUT"

# shuffled DP-SGD: no accountant; every epoch line, the result line and eval say so
expect_ok "$BIN" train --algo dpsgd "${C[@]}" --sigma 1.2 --sampler shuffle --out "$T/shuf"
check 'every_epoch_line "[non-accounted: DP-SGD on shuffled" 2 && grep -q "^test accuracy .*\[non-accounted" <<<"$LAST_OUT"' \
  "a non-accounted run's result lines without the label: $LAST_OUT"
check '! epoch_lines | grep -q "train loss"' "a non-accounted DP-SGD epoch line shows the train loss: $LAST_OUT"
expect_ok "$BIN" eval --checkpoint "$T/shuf/checkpoint.safetensors" --threads 1
check 'grep -q "accuracy .*\[non-accounted: DP-SGD" <<<"$LAST_OUT"' "eval of a non-accounted run without its label: $LAST_OUT"
expect_ok "$BIN" eval --checkpoint "$T/shuf/checkpoint.safetensors" --threads 1 --json
check 'grep -q "\"privacy_label\":\"\[non-accounted" <<<"$LAST_OUT"' "eval --json of a non-accounted run without its label: $LAST_OUT"
# ... and, still clipped and noised, it publishes no noiseless train loss (as accounted DP-SGD)
check '! grep -q train_loss "$T/shuf/metrics.jsonl" && [ "$(wc -l <"$T/shuf/metrics.jsonl")" = 2 ]' \
  "a non-accounted DP-SGD run published its noiseless train_loss: $(cat "$T/shuf/metrics.jsonl")"

# a delta >= 1/N accepted with --force (N = 400) and a resume over a mismatched ledger
# (--allow-ledger-mismatch, another sigma): both are recorded in the ledger and labelled on
# every epoch line, the privacy line, eval and account
expect_ok "$BIN" train --algo dpsgd --dataset "csv:$T/tr.csv,$T/te.csv" "${C[@]:2}" --sigma 1.2 --epochs 1 \
  --delta 0.01 --force --out "$T/forced"
check 'every_epoch_line "[delta >= 1/N (forced)]" 1 && grep -q "^privacy: epsilon .*\[delta 0.01 >= 1/N accepted (force)" <<<"$LAST_OUT"' \
  "a --force run without its delta label: $LAST_OUT"
expect_ok "$BIN" train --algo dpsgd --dataset "csv:$T/tr.csv,$T/te.csv" "${C[@]:2}" --sigma 1.5 --epochs 2 \
  --resume --allow-ledger-mismatch --out "$T/forced"
check 'every_epoch_line "[delta >= 1/N (forced)]  [ledger mismatch allowed]" 1' \
  "a resume over a mismatched ledger without its label: $LAST_OUT"
expect_ok "$BIN" eval --checkpoint "$T/forced/checkpoint.safetensors" --threads 1 --json
check 'grep -q "\"privacy_label\":\"\[delta 0.01 >= 1/N accepted (force).*\]  \[ledger mismatch allowed: " <<<"$LAST_OUT"' \
  "eval --json without the --force and mismatch labels: $LAST_OUT"
expect_ok "$BIN" account --ledger "$T/forced/ledger.json"
check 'grep -q "^labels  *\[delta 0.01 >= 1/N .*\[ledger mismatch allowed" <<<"$LAST_OUT"' "account --ledger without the labels: $LAST_OUT"

# PDP-SGD: no formal guarantee on every epoch line
expect_ok "$BIN" train --algo pdp-sgd "${C[@]}" --out "$T/pdp"
check 'every_epoch_line "[no formal DP guarantee]" 2' "PDP-SGD epoch lines without their label: $LAST_OUT"
# PDP-SGD has no clipping and claims no DP: its train loss stays published (dpt_algo.dp_mechanism 0)
check '[ "$(epoch_lines | grep -c "train loss")" = 2 ] && grep -q train_loss "$T/pdp/metrics.jsonl"' \
  "PDP-SGD lost its train loss: $LAST_OUT"

# nothing of a step leaves before the ledger on disk records it: a crash right after the
# ledger (or the checkpoint) of epoch 1 leaves a --trace file with no step line (at most its header), and the
# stderr without the epoch line (the CLI built with the test hooks, DPTRAIN_FAULT)
FBIN=${DPT_CLI_FAULTS:-}
if [ -n "$FBIN" ] && [ -x "$FBIN" ]; then
  for point in after-ledger after-checkpoint; do
    (DPTRAIN_FAULT=$point:1:kill "$FBIN" train --algo dpsgd "${C[@]}" --sigma 1.2 --trace "$T/$point.trace" \
       --out "$T/$point" >"$T/$point.out" 2>"$T/$point.err"; exit $?) 2>/dev/null
    rc=$?
    check '[ $rc -eq 137 ] && ! grep -q "\"step\":" "$T/$point.trace" && ! grep -q "^epoch 1/" "$T/$point.err"' \
      "killed $point: rc $rc, trace $(cat "$T/$point.trace") (want no step line), stderr $(cat "$T/$point.err")"
  done
  # and after the publication the trace holds every step of the epoch
  (DPTRAIN_FAULT=after-metrics:2:kill "$FBIN" train --algo dpsgd "${C[@]}" --sigma 1.2 --trace "$T/am.trace" \
     --out "$T/am" >/dev/null 2>&1; exit $?) 2>/dev/null
  check '[ "$(wc -l <"$T/am.trace")" = 11 ]' "the trace after epoch 1 was published: $(wc -l <"$T/am.trace") lines, want 1 + 10"
fi
harness_end
