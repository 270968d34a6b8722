#!/usr/bin/env bash
# Regenerates tests/abi/exported_symbols.txt, the reviewed list of what libdptrain.so
# exports (checked by the ctest abi_exports), from a build. Run it after adding or removing
# a public function on purpose and commit the list with the change; the diff shows what
# the ABI gained or lost. Usage: scripts/update-symbols.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
cmake --build "$BUILD" --target dptrain >/dev/null
LIB=$(ls "$BUILD"/libdptrain.so.*.*.* 2>/dev/null | head -n 1)
[ -n "$LIB" ] || { echo "update-symbols.sh: no $BUILD/libdptrain.so.X.Y.Z (configure and build first)" >&2; exit 1; }
LIST=tests/abi/exported_symbols.txt
nm -D --defined-only "$LIB" | awk '{ sub(/@.*/, "", $3); print $3 }' | LC_ALL=C sort -u > "$LIST.new"
if grep -v '^dpt_' "$LIST.new"; then
  echo "update-symbols.sh: the symbols above do not start with dpt_; rename them or hide them" >&2
  rm -f "$LIST.new"
  exit 1
fi
if [ -e "$LIST" ]; then diff -u "$LIST" "$LIST.new" | tail -n +3 | grep '^[-+]' || true; fi
mv "$LIST.new" "$LIST"
echo "update-symbols.sh: $LIST: $(wc -l < "$LIST") symbols"
