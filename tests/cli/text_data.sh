#!/usr/bin/env bash
# CLI: the text datasets on a small fortunes corpus written here (DIR/fortunes/ under
# --data-dir, so no package is needed): --help lists fortunes-topic, fortunes-chars and
# --seq-len; a non-private and a DP-SGD run train on them, the run records the dataset as
# NAME:T and eval rebuilds the same test rows; token ids are not normalized (auto = none),
# --normalize public is refused; --seq-len with another dataset, a bad NAME:T and a corpus
# missing a topic file exit 2 naming the problem. The real corpus: fortunes_train.sh.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
mkdir -p "$T/data/fortunes"
for f in art ascii-art computers cookie debian definitions disclaimer drugs education ethnic food fortunes goedel \
         humorists kids knghtbrd law linux linuxcookie literature love magic medicine men-women miscellaneous news \
         paradoxum people perl pets platitudes politics pratchett riddles science songs-poems sports startrek tao \
         translate-me wisdom work zippy; do
  for k in $(seq 1 30); do printf '%s says %d times:\n\tthe %s quote\n%%\n' "$f" "$k" "$f"; done > "$T/data/fortunes/$f"
done
C=(train --data-dir "$T/data" --threads 1 --no-progress --epochs 1 --batch-size 64)

# -- help
expect_ok "$BIN" train --help
check 'grep -q "fortunes-topic" <<<"$LAST_OUT" && grep -q "fortunes-chars" <<<"$LAST_OUT" && grep -q -- "--seq-len T" <<<"$LAST_OUT"' \
  "train --help does not list the text datasets and --seq-len"

# -- non-private: topic classification at T = 24, ids as they are
expect_ok "$BIN" "${C[@]}" --dataset fortunes-topic --seq-len 24 --model mlp:24-16-20 --out "$T/topic"
check 'grep -q "^dptrain train: fortunes-topic:24 (" <<<"$LAST_OUT"' "the run does not name fortunes-topic:24: $LAST_OUT"
check 'grep -q "normalization: none" <<<"$LAST_OUT"' "token ids were normalized: $LAST_OUT"
check 'grep -q "^test accuracy" <<<"$LAST_OUT"' "no test accuracy: $LAST_OUT"
n_test=$(grep -o "[0-9]* test" <<<"$LAST_OUT" | head -1 | awk '{print $1}')
expect_ok "$BIN" eval --checkpoint "$T/topic"
check 'grep -q "$n_test test examples" <<<"$LAST_OUT"' "eval did not rebuild the $n_test test rows: $LAST_OUT"

# -- DP-SGD: next-byte windows of 8
expect_ok "$BIN" "${C[@]}" --dataset fortunes-chars --seq-len 8 --algo dpsgd --sigma 1 --model mlp:8-258 \
  --out "$T/chars"
check 'grep -q "fortunes-chars:8" <<<"$LAST_OUT" && grep -q "epsilon" <<<"$LAST_OUT"' "DP-SGD on fortunes-chars: $LAST_OUT"
expect_ok "$BIN" eval --checkpoint "$T/chars"

# -- refused before training (exit 2)
expect_fail "--seq-len: only with --dataset fortunes-topic or fortunes-chars" "$BIN" "${C[@]}" --dataset mnist --seq-len 8 --out "$T/x1"
expect_fail "--seq-len must be in .1, 2.20., got 0" "$BIN" "${C[@]}" --dataset fortunes-topic --seq-len 0 --out "$T/x2"
expect_fail "expected fortunes-chars or fortunes-chars:T" "$BIN" "${C[@]}" --dataset fortunes-chars:abc --out "$T/x3"
expect_fail "token ids (--dataset fortunes-topic) have no published constants" "$BIN" "${C[@]}" --dataset fortunes-topic \
  --algo dpsgd --sigma 1 --normalize public --out "$T/x4"
rm "$T/data/fortunes/zippy"
expect_fail "$T/data/fortunes/zippy: no such file" "$BIN" "${C[@]}" --dataset fortunes-topic --out "$T/x5"
"$BIN" "${C[@]}" --dataset fortunes-topic --out "$T/x6" >/dev/null 2>&1
rc=$?
check '[ $rc -eq 2 ]' "a missing topic file exits $rc, not 2"
harness_end
