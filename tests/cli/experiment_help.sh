#!/usr/bin/env bash
# Every experiment script (shell and Python) answers --help with its header comment and does nothing else: exit
# 0 within seconds, text on stdout, no file written (kl_init/run.sh used to start its full
# experiment; plot_results.sh wrote a PNG named "--help").
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
for f in "$SRC"/experiments/*/*.sh; do
  name=${f#"$SRC"/}
  [ "$(head -c 2 "$f")" = "#!" ] || continue # sourced by the others (args.sh)
  mkdir -p "$T/cwd" && rm -rf "$T/cwd"/* "$T/cwd"/.[!.]* 2>/dev/null
  out=$(cd "$T/cwd" && BIN=/nonexistent DPTRAIN=/nonexistent OUT="$T/cwd/out" timeout 10 bash "$f" --help 2>&1)
  rc=$?
  check '[ $rc -eq 0 ]' "$name --help exited $rc: $(head -3 <<<"$out")"
  check '[ "$(wc -l <<<"$out")" -ge 3 ]' "$name --help printed too little: $out"
  check '[ -z "$(ls -A "$T/cwd")" ]' "$name --help wrote $(ls -A "$T/cwd" | head -3 | tr '\n' ' ')"
done
# the Python scripts (Debian's python3, which has numpy; they import dptrain after parsing)
PY=/usr/bin/python3
for f in "$SRC"/experiments/*/*.py; do
  [ -x "$PY" ] || break
  name=${f#"$SRC"/}
  grep -q "argparse" "$f" || continue # helpers imported by the scripts
  mkdir -p "$T/cwd" && rm -rf "$T/cwd"/* "$T/cwd"/.[!.]* 2>/dev/null
  out=$(cd "$T/cwd" && PYTHONPATH=/nonexistent timeout 10 "$PY" "$f" --help 2>&1)
  rc=$?
  check '[ $rc -eq 0 ]' "$name --help exited $rc: $(head -3 <<<"$out")"
  check '[ "$(wc -l <<<"$out")" -ge 3 ]' "$name --help printed too little: $out"
  check '[ -z "$(ls -A "$T/cwd")" ]' "$name --help wrote $(ls -A "$T/cwd" | head -3 | tr '\n' ' ')"
done
harness_end
