#!/usr/bin/env bash
# CLI: files dptrain did not make (issue 18). Devices, FIFOs and directories given as a
# ledger, a checkpoint or a dataset are refused at once with a message naming the file;
# before, `account --ledger /dev/zero` grew to 9 GB, `eval --checkpoint /dev/urandom` never
# ended and a FIFO as a dataset waited for a writer forever (timeout: fail, not hang).
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
mkfifo "$T/fifo"
expect_fail "/dev/zero: not a regular file" timeout 20 "$BIN" account --ledger /dev/zero
expect_fail "/dev/urandom: not a regular file" timeout 20 "$BIN" eval --checkpoint /dev/urandom
expect_fail "fifo: not a regular file" timeout 20 "$BIN" account --ledger "$T/fifo"
expect_fail "fifo: not a regular file" timeout 20 "$BIN" eval --checkpoint "$T/fifo"
expect_fail "fifo: not a regular file" timeout 20 "$BIN" train --dataset "csv:$T/fifo" --epochs 1 --out "$T/r"
expect_fail "not a regular file" timeout 20 "$BIN" account --ledger "$T"
# a ledger larger than any real one is refused before it is read
truncate -s 300M "$T/big.json"
expect_fail "more than the" timeout 20 "$BIN" account --ledger "$T/big.json"
harness_end
