#!/usr/bin/env bash
# Test hooks are compiled into the test builds only (issue 38 item 17): the fault injection
# DPTRAIN_FAULT (src/train/loop.c, DPT_FAULT_INJECTION) could SIGKILL any program that
# links libdptrain. The files given first (libdptrain.so, libdptrain.a, bin/dptrain: what
# is installed and packaged) must not hold its name; those after --hooked (the tests' build)
# must, which shows that the search finds it.
# Usage: test_hooks.sh FILE... [--hooked FILE...]
set -u
fail=0 checked=0 hooked=0
for f in "$@"; do
  if [ "$f" = --hooked ]; then hooked=1; continue; fi
  checked=$((checked+1))
  [ -s "$f" ] || { echo "FAIL: $f: no such file"; fail=$((fail+1)); continue; }
  if strings -a "$f" | grep -q DPTRAIN_FAULT; then
    [ $hooked = 1 ] || { echo "FAIL: $f holds the test hook DPTRAIN_FAULT"; fail=$((fail+1)); }
  else
    [ $hooked = 0 ] || { echo "FAIL: $f (a test build) lacks DPTRAIN_FAULT: the check cannot see the hook"; fail=$((fail+1)); }
  fi
done
echo "$((checked - fail)) passed, $fail failed"
[ $fail -eq 0 ]
