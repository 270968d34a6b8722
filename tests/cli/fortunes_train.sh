#!/usr/bin/env bash
# CLI on the real fortunes corpus (Debian package `fortunes`; skipped, exit 77, without it):
# an MLP on the byte ids as floats (a smoke test: no sequence layers) trains one epoch of
# fortunes-topic, non-private and with DP-SGD, and prints a test accuracy; the sizes are
# those docs/data.md states (8601 training / 2101 test entries).
set -u
BIN=$1
[ -d /usr/share/games/fortunes ] || { echo "SKIP: /usr/share/games/fortunes missing (apt-get install fortunes)"; exit 77; }
source "$(dirname "$0")/lib/harness.sh"
C=(train --dataset fortunes-topic --data-dir "$T" --threads 2 --no-progress --epochs 1 --model mlp:256-32-20)
expect_ok "$BIN" "${C[@]}" --normalize affine:0:256 --out "$T/sgd"
check 'grep -q "^dptrain train: fortunes-topic (8601 train / 2101 test" <<<"$LAST_OUT"' "sizes: $LAST_OUT"
check 'grep -q "^test accuracy [0-9.]*%" <<<"$LAST_OUT"' "no test accuracy: $LAST_OUT"
expect_ok "$BIN" "${C[@]}" --algo dpsgd --sigma 1 --batch-size 256 --out "$T/dp"
check 'grep -q "^test accuracy .*\[DP-SGD\]" <<<"$LAST_OUT"' "DP-SGD did not train: $LAST_OUT"
harness_end
