#!/usr/bin/env bash
# CLI: nothing waits forever (issue 38, item 13). Every command runs under `timeout`, so a
# regression fails here instead of hanging the suite:
#  - --resume with a FIFO where the checkpoint should be: refused at once, naming it (the
#    run record was read with fopen first, which waits for a writer);
#  - --trace naming a FIFO is written in place once a reader opens it (its "is this a
#    trace?" check used to read it and wait for a writer);
#  - an address-space limit (ulimit -v 80..300 MB) below what OpenBLAS needs: refused at
#    once with the limit to set (OpenBLAS retried its allocation forever).
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 90
C=(--dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --batch-size 10 --threads 1 --no-progress --quiet)
TO=(timeout 60)

# -- a FIFO as the checkpoint of --resume
expect_ok "${TO[@]}" "$BIN" train "${C[@]}" --epochs 1 --out "$T/r"
mv "$T/r/checkpoint.safetensors" "$T/ck.bak"
mkfifo "$T/r/checkpoint.safetensors"
out=$("${TO[@]}" "$BIN" train "${C[@]}" --epochs 2 --out "$T/r" --resume 2>&1); rc=$?
check '[ $rc -eq 2 ] && grep -q "checkpoint.safetensors: not a regular file (a FIFO)" <<<"$out"' \
  "--resume with a FIFO checkpoint: rc $rc (124 = hung): $out"
check '[ -p "$T/r/checkpoint.safetensors" ]' "the FIFO was replaced"

# -- --trace into a FIFO: written once a reader is there
mkfifo "$T/trace.fifo"
"${TO[@]}" cat "$T/trace.fifo" > "$T/trace.txt" &
reader=$!
out=$("${TO[@]}" "$BIN" train "${C[@]}" --epochs 1 --out "$T/t" --trace "$T/trace.fifo" 2>&1); rc=$?
wait $reader
check '[ $rc -eq 0 ] && grep -q "per-step diagnostics" "$T/trace.txt" && [ -p "$T/trace.fifo" ]' \
  "--trace to a FIFO: rc $rc (124 = hung): $out; $(head -c 200 "$T/trace.txt")"

# -- an address-space limit (ulimit -v) OpenBLAS's buffers do not fit in: it retried its
#    allocation forever (before main, or in the first matrix product). Now dptrain refuses
#    at once, names the limit it needs, and runs under that limit.
# AddressSanitizer reserves terabytes of shadow memory at start, so a sanitized build cannot
# run under any such limit: these checks are for the real build (scripts/test.sh)
if [ -n "${DPT_SANITIZED:-}" ] || nm -D "$BIN" 2>/dev/null | grep -q __asan_init; then
  echo "note: the ulimit -v checks are skipped for a sanitized build (ASan needs its shadow memory)"
  harness_end
  exit $?
fi
for v in 80000 150000 300000; do
  out=$(bash -c "ulimit -v $v; exec ${TO[*]} \"\$0\" train \"\$@\" --epochs 1 --out \"$T/uv$v\"" "$BIN" "${C[@]}" 2>&1); rc=$?
  check '[ $rc -eq 1 ] && grep -q "address-space limit (ulimit -v)" <<<"$out"' "ulimit -v $v: rc $rc (124 = hung): $out"
  check '[ ! -e "$T/uv$v" ]' "ulimit -v $v: a refused run left its directory"
done
out=$(bash -c "ulimit -v 150000; exec ${TO[*]} \"\$0\" --version" "$BIN" 2>&1); rc=$?
check '[ $rc -eq 1 ] && grep -q "address-space limit" <<<"$out"' "--version under ulimit -v 150000: rc $rc: $out"
need=$(sed -n 's/.*Raise the limit (ulimit -v \([0-9]*\)).*/\1/p' <<<"$out")
check '[ -n "$need" ]' "no limit suggested: $out"
if [ -n "$need" ]; then
  out=$(bash -c "ulimit -v $need; exec ${TO[*]} \"\$0\" train \"\$@\" --epochs 1 --out \"$T/uvok\"" "$BIN" "${C[@]}" 2>&1); rc=$?
  check '[ $rc -eq 0 ] && [ -s "$T/uvok/checkpoint.safetensors" ]' "train under the suggested ulimit -v $need: rc $rc: $out"
fi
harness_end
