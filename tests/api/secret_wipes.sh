#!/usr/bin/env bash
# Secrets (keys, keystreams, seeds, noise draws) are wiped with OPENSSL_cleanse, never with
# memset: gcc -O2 drops a memset of a buffer that is dead afterwards (a local array before
# return, a struct before free), so the secret stays in memory (issue 38 item 6). Flags a
# memset( in src/ whose destination is named like a secret or whose line says it wipes one.
# The behavioural test is tests/test_privacy_wipe.c (it reads the stack after the call).
# Usage: secret_wipes.sh SOURCE_DIR
set -u
SRC=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
bad=$(grep -rnE --include='*.c' --include='*.h' 'memset[[:space:]]*\(' "$SRC/src" |
  grep -iE 'memset[[:space:]]*\([^,]*(key|secret|stream|seed|nonce)|memset.*(key|secret|keystream|seed|nonce|noise|wipe)')
if [ -n "$bad" ]; then
  echo "memset of a secret (use OPENSSL_cleanse, which the compiler keeps):"
  echo "$bad"
  exit 1
fi
echo "secret_wipes: no memset of a secret in $SRC/src"
