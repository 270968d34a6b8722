#!/usr/bin/env bash
# The public headers as a third party sees them: each one compiles on its own in C11 and
# in C++ (extern "C", no C-only constructs), wraps its declarations in the visibility
# pragmas (so libdptrain.so exports them; a header without them has its functions hidden),
# and the umbrella dptrain/dptrain.h includes every one of them.
# Usage: headers.sh SOURCE_DIR GENERATED_INCLUDE_DIR C_COMPILER
set -u
SRC=$1 GEN=$2 CC=$3
T=$(mktemp -d /tmp/dpt_abi_headers_XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0; checks=0
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
CXX=$(command -v c++ || command -v g++ || true)

headers=()
for h in "$SRC"/include/dptrain/*.h "$GEN"/dptrain/version.h; do headers+=("$h"); done
for h in "${headers[@]}"; do
  name=$(basename "$h")
  checks=$((checks+1))
  [ "$name" = dptrain.h ] && continue   # the umbrella declares nothing itself
  push=$(grep -c '^#pragma GCC visibility push(default)$' "$h")
  pop=$(grep -c '^#pragma GCC visibility pop$' "$h")
  [ "$push" = 1 ] && [ "$pop" = 1 ] || bad "$name: needs one '#pragma GCC visibility push(default)' and one 'pop' around its declarations (has $push and $pop)"
  checks=$((checks+1))
  grep -q "^#include <dptrain/$name>" "$SRC/include/dptrain/dptrain.h" \
    || bad "dptrain/dptrain.h does not include <dptrain/$name>"
done
for h in "${headers[@]}"; do
  name=$(basename "$h")
  printf '#include <dptrain/%s>\n#include <dptrain/%s>\nint dpt_header_test_(void);\n' "$name" "$name" > "$T/t.c"
  checks=$((checks+1))
  "$CC" -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$SRC/include" -I"$GEN" "$T/t.c" > "$T/err" 2>&1 \
    || { bad "<dptrain/$name> does not compile alone as C11:"; cat "$T/err"; }
  if [ -n "$CXX" ]; then
    cp "$T/t.c" "$T/t.cpp"
    checks=$((checks+1))
    "$CXX" -std=c++11 -Wall -Wextra -Werror -fsyntax-only -I"$SRC/include" -I"$GEN" "$T/t.cpp" > "$T/err" 2>&1 \
      || { bad "<dptrain/$name> does not compile alone as C++11:"; cat "$T/err"; }
  fi
done
[ -n "$CXX" ] || echo "note: no C++ compiler found, the C++ checks were skipped"
echo "$((checks - fail)) passed, $fail failed"
[ $fail -eq 0 ]
