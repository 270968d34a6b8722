#!/usr/bin/env bash
# libdptrain.so can neither end its caller's process nor print to its standard output:
# it imports none of the C library's exit functions, none of its stdout printers, and not
# the `stdout` stream itself (which any fprintf(stdout, ...) or fflush(stdout) would
# import). Errors go back as dpt_status + dpt_last_error(); under MPI, dpt_comm_abort
# (MPI_Abort, asked for by the caller) is the one way it stops a process.
# Usage: imports.sh path/to/libdptrain.so
set -u
LIB=$1
FORBIDDEN="exit _exit _Exit quick_exit printf vprintf puts putchar __printf_chk __vprintf_chk stdout"
imports=$(nm -D --undefined-only "$LIB" | awk '{ sub(/@.*/, "", $2); print $2 }') \
  || { echo "FAIL: nm -D --undefined-only $LIB failed"; exit 1; }
[ -n "$imports" ] || { echo "FAIL: nm found no imports in $LIB (not a shared library?)"; exit 1; }
fail=0
for s in $FORBIDDEN; do
  if grep -qx -- "$s" <<<"$imports"; then
    echo "FAIL: $LIB imports '$s' (library code must return a status instead of exiting or printing to stdout)"
    fail=$((fail+1))
  fi
done
echo "$(( $(wc -w <<<"$FORBIDDEN") - fail )) passed, $fail failed"
[ $fail -eq 0 ]
