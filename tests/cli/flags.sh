#!/usr/bin/env bash
# CLI: number flags are parsed strictly (issue 18: unsigned flags took " -1" as 2^64 - 1,
# since strtoull skips white space and accepts a sign). Unsigned values must start with a
# digit; integers and numbers may carry a sign but no leading white space. Lists with empty
# items, a --classes that leaves nothing to learn and settings that would be ignored are refused.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
A=(account --sample-rate 0.01 --sigma 1)
for v in " -1" "-1" " 5" "+5" "	5" "0x10" "1e3" "5 " "18446744073709551616"; do
  expect_fail "--steps: expected a non-negative integer, got '$v'" "$BIN" "${A[@]}" --steps "$v"
  expect_fail "--seed: expected a non-negative integer" "$BIN" audit --seed "$v"
done
expect_ok "$BIN" "${A[@]}" --steps 5
for v in " -1" " 3" "1.5" "3x" ""; do
  expect_fail "--epochs: expected an integer" "$BIN" audit --epochs "$v"
done
expect_fail "--epochs must be >= 1, got -1" "$BIN" audit --epochs -1
for v in " 0.01" "0.01x" "--" "inf"; do
  expect_fail "--sample-rate: expected" "$BIN" account --sample-rate "$v" --sigma 1 --steps 3
done
expect_ok "$BIN" account --sample-rate .01 --sigma 1 --steps 3
expect_ok "$BIN" account --sample-rate 1e-2 --sigma +1 --steps 3
# lists with empty items, settings that would be ignored, classes that leave nothing to learn:
# refused with the flag named (they were accepted silently)
for v in "2,,3" "2," ",2"; do
  expect_fail "--orders '$v': expected a comma-separated list of numbers, with no empty item" "$BIN" "${A[@]}" --steps 5 --orders "$v"
done
expect_fail "--conversion: converts RDP to (epsilon, delta)" "$BIN" "${A[@]}" --steps 5 --accountant pld --conversion classic
blobs_csv "$T/d.csv" 300
TR=(train --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --epochs 1 --threads 1 --no-progress --out "$T/r")
for v in "" "0,1," "1" "1,1"; do
  expect_fail "--classes" "$BIN" "${TR[@]}" --classes "$v"
done
expect_ok "$BIN" "${TR[@]}" --classes 0,2 --batch-size 20 --max-steps 1
# a value the library refuses before anything runs is a usage error (status 2), as a bad flag is
"$BIN" "${TR[@]}" --batch-size 500 >/dev/null 2>&1; rc=$?
check "[ $rc -eq 2 ]" "--batch-size above the training set size exited $rc, want 2"
expect_fail "--allow-ledger-mismatch: only with --resume" "$BIN" "${TR[@]}" --algo dpsgd --sigma 1 --allow-ledger-mismatch --out "$T/r2"
expect_fail "--batch-size: the full-batch sampler uses every training example" "$BIN" "${TR[@]}" --sampler full --batch-size 10 --out "$T/r3"
# --physical-batch: a negative value is refused; a positive one trains (batches accumulated over passes)
expect_fail "--physical-batch must be >= 0" "$BIN" "${TR[@]}" --algo dpsgd --sigma 1 --sampler poisson --physical-batch -3 --out "$T/r4"
expect_ok "$BIN" "${TR[@]}" --algo dpsgd --sigma 1 --sampler poisson --batch-size 40 --physical-batch 8 --max-steps 2 --out "$T/r5"
harness_end
