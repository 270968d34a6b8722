#!/usr/bin/env bash
# CLI: number flags are parsed strictly (issue 18: unsigned flags took " -1" as 2^64 - 1,
# since strtoull skips white space and accepts a sign). Unsigned values must start with a
# digit; integers and numbers may carry a sign but no leading white space.
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
harness_end
