#!/usr/bin/env bash
# CLI: where the commands' output goes (issue 38, items 12 and 16).
#  - predict --out writes through a character device or a FIFO instead of renaming a
#    regular file over it (as root it turned /dev/full into a file); a symbolic link is
#    followed and kept (its target replaced), a dangling link and a directory are refused;
#  - every command that prints fails (non-zero, a message on stderr) when stdout cannot be
#    written (>/dev/full), --help and --version included;
#  - audit creates its --out directory only when it has results: a refused command line
#    leaves nothing behind.
# Devices are made with mknod inside $T (root only; skipped otherwise), never in /dev.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 90
C=(--threads 1 --no-progress --quiet)
expect_ok "$BIN" train --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --epochs 1 --batch-size 10 --out "$T/run" "${C[@]}"
P=("$BIN" predict --checkpoint "$T/run" --input "$T/d.csv" --skip 1 --threads 1)
expect_ok "${P[@]}"
printf '%s\n' "$LAST_OUT" > "$T/want"

# -- predict --out: devices and FIFOs are written in place
if mknod "$T/null" c 1 3 2>/dev/null && mknod "$T/full" c 1 7 2>/dev/null; then
  expect_ok "${P[@]}" --out "$T/null"
  check '[ -c "$T/null" ]' "--out to a null device replaced it: $(ls -l "$T/null")"
  out=$("${P[@]}" --out "$T/full" 2>&1); rc=$?
  check '[ $rc -eq 1 ] && grep -q -- "--out $T/full: write failed: No space left on device" <<<"$out"' \
    "--out to a full device: rc $rc: $out"
  check '[ -c "$T/full" ]' "--out to a full device replaced it: $(ls -l "$T/full")"
else
  echo "note: mknod not permitted; the device cases are skipped"
fi
mkfifo "$T/fifo"
timeout 60 cat "$T/fifo" > "$T/from_fifo" &
reader=$!
out=$(timeout 60 "${P[@]}" --out "$T/fifo" 2>&1); rc=$?
wait $reader
check '[ $rc -eq 0 ] && [ -p "$T/fifo" ] && cmp -s "$T/from_fifo" "$T/want"' \
  "--out to a FIFO: rc $rc, $(ls -l "$T/fifo"), $out"
# a symbolic link is followed and stays a link
echo old > "$T/target"
ln -s "$T/target" "$T/link"
expect_ok "${P[@]}" --out "$T/link"
check '[ -L "$T/link" ] && cmp -s "$T/target" "$T/want"' "--out through a link: $(ls -l "$T/link"); $LAST_OUT"
# /dev/stdout-like: a link to this process's stdout writes to stdout
ln -s /proc/self/fd/1 "$T/stdout"
"${P[@]}" --out "$T/stdout" > "$T/via_stdout" 2>/dev/null
check '[ -L "$T/stdout" ] && cmp -s "$T/via_stdout" "$T/want"' "--out to a link to stdout: $(head -c 200 "$T/via_stdout")"
# /dev/stdout with stdout appended to a log: the log keeps what it held (no rename over it)
echo "earlier line" > "$T/log"
"${P[@]}" --out /dev/stdout >> "$T/log" 2>/dev/null
check '[ "$(head -n 1 "$T/log")" = "earlier line" ] && [ "$(tail -n +2 "$T/log")" = "$(cat "$T/want")" ]' \
  "--out /dev/stdout >> log replaced the log: $(head -c 200 "$T/log")"
# "-" is stdout
"${P[@]}" --out - > "$T/dash" 2>/dev/null
check 'cmp -s "$T/dash" "$T/want"' "--out - did not write to stdout"
ln -s "$T/nowhere" "$T/dangling"
expect_fail "symbolic link to a file that cannot be reached" "${P[@]}" --out "$T/dangling"
check '[ -L "$T/dangling" ] && [ ! -e "$T/nowhere" ]' "a dangling --out link was replaced or followed"
expect_fail "--out $T/run: is a directory" "${P[@]}" --out "$T/run"
# a new name and an existing file: written (atomically)
expect_ok "${P[@]}" --out "$T/new.csv"
check 'cmp -s "$T/new.csv" "$T/want"' "--out to a new file"

# -- stdout that cannot be written: non-zero and a message, for every command that prints
if [ -w /dev/full ]; then
  for args in "--help" "--version" "account --help" "account --sigma 1 --sample-rate 0.01 --steps 100" \
              "eval --checkpoint $T/run" "model --checkpoint $T/run" "model --model mlp:4-8-3:relu" \
              "predict --checkpoint $T/run --input $T/d.csv --skip 1 --threads 1" "eval --help" "audit --help" \
              "train --help" "predict --help"; do
    # shellcheck disable=SC2086
    err=$("$BIN" $args 2>&1 >/dev/full); rc=$?
    check '[ $rc -ne 0 ] && grep -q "No space left on device\|failed" <<<"$err"' "'dptrain $args >/dev/full': rc $rc, stderr: $err"
  done
else
  echo "note: no writable /dev/full; the stdout cases are skipped"
fi

# -- audit: a refused command line leaves no --out directory
A=(--dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --population 40 --epochs 1 --threads 1 --quiet --no-plot)
expect_fail "larger than the 20 members" "$BIN" audit "${A[@]}" --batch-size 500 --out "$T/aud/x"
check '[ ! -e "$T/aud" ]' "a refused audit left its --out: $(ls -R "$T/aud" 2>&1)"
expect_fail "takes 784 inputs" "$BIN" audit "${A[@]}" --model mlp:784-8-3:relu --batch-size 5 --out "$T/aud2"
check '[ ! -e "$T/aud2" ]' "a refused audit left its --out"
expect_fail "--out $T/d.csv: not a directory" "$BIN" audit "${A[@]}" --batch-size 5 --out "$T/d.csv"
expect_ok "$BIN" audit "${A[@]}" --batch-size 5 --out "$T/aud3/x"
check '[ -s "$T/aud3/x/audit.csv" ] && [ -s "$T/aud3/x/summary.json" ]' "audit did not write its files: $LAST_OUT"
harness_end
