#!/usr/bin/env bash
# The symbols libdptrain.so exports change only on purpose: they must equal the reviewed
# list tests/abi/exported_symbols.txt (sorted, one per line), and every one must start
# with dpt_. After adding or removing a public function on purpose, regenerate the list
# with scripts/update-symbols.sh and commit it with the change.
# Usage: exports.sh path/to/libdptrain.so path/to/exported_symbols.txt
set -u
LIB=$1 LIST=$2
T=$(mktemp -d /tmp/dpt_abi_exports_XXXXXX)
trap 'rm -rf "$T"' EXIT
nm -D --defined-only "$LIB" > "$T/nm" || { echo "FAIL: nm -D --defined-only $LIB failed"; exit 1; }
awk '{ sub(/@.*/, "", $3); print $3 }' "$T/nm" | LC_ALL=C sort -u > "$T/actual"
fail=0
bad=$(grep -v '^dpt_' "$T/actual")
if [ -n "$bad" ]; then
  echo "FAIL: libdptrain.so exports symbols without the dpt_ prefix (every public name starts with dpt_):"
  sed 's/^/  /' <<<"$bad"
  fail=1
fi
if ! LC_ALL=C sort -c "$LIST" 2>/dev/null; then
  echo "FAIL: $LIST is not sorted (LC_ALL=C sort)"; fail=1
fi
if ! diff -q "$LIST" "$T/actual" >/dev/null; then
  echo "FAIL: the exported symbols of $LIB differ from $LIST"
  echo "  + exported now but not in the list (a new public function?)"
  echo "  - in the list but no longer exported (a removed or renamed one breaks callers)"
  diff -u "$LIST" "$T/actual" | tail -n +3 | grep '^[-+]' | sed 's/^/  /'
  echo "If the change is intended, regenerate the list and commit it:"
  echo "  scripts/update-symbols.sh $(dirname "$LIB")"
  fail=1
fi
[ $fail -eq 0 ] && echo "1 passed, 0 failed ($(wc -l < "$T/actual") exported symbols as listed)" || echo "0 passed, 1 failed"
exit $fail
