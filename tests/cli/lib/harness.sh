# Shared by the CLI test scripts (tests/cli/*.sh; this directory is not globbed as a test).
# Source it after `set -u`; it makes $T (removed on exit; DPTRAIN_SECRETS_DIR=$T/secrets) and
# counts checks and failures:
#   expect_fail NEEDLE cmd...  the command must fail and print NEEDLE
#   expect_ok cmd...           the command must succeed; its output is left in $LAST_OUT
#   check EXPR MESSAGE         EXPR (evaluated) must be true
#   harness_end                prints the tally and returns non-zero on any failure
#   secret_of DIR              prints the path of the secret file of the run in DIR
#                              ($DPTRAIN_SECRETS_DIR/<its checkpoint's run id>.secret)
#   blobs_csv FILE N           writes a CSV of N rows: label (i mod 3), 4 features; class c
#                              is 2 higher in feature c (noise std 0.5, seed 1): separable
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# the runs' secret files (docs/checkpoints.md) go under $T too, never into the home directory
export DPTRAIN_SECRETS_DIR="$T/secrets"
fail=0; checks=0; LAST_OUT=
expect_fail() {
  local needle=$1; shift
  checks=$((checks+1))
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -eq 0 ] || ! grep -q -- "$needle" <<<"$out"; then
    echo "FAIL: '$*' rc=$rc, want non-zero and message containing '$needle'; got: $out"; fail=$((fail+1))
  fi
}
expect_ok() {
  checks=$((checks+1))
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: '$*' rc=$rc: $out"; fail=$((fail+1)); fi
  LAST_OUT=$out
}
check() { checks=$((checks+1)); if ! eval "$1"; then echo "FAIL: $2"; fail=$((fail+1)); fi; }
blobs_csv() { python3 - "$1" "$2" <<'PY'
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as f:
    f.write("label,a,b,c,d\n")
    for i in range(int(sys.argv[2])):
        c = i % 3
        f.write("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(0, 0.5) + (2.0 if j % 3 == c else 0.0)) for j in range(4))))
PY
}
secret_of() { python3 - "$1" "$DPTRAIN_SECRETS_DIR" <<'PY'
import json, struct, sys
b = open(sys.argv[1] + "/checkpoint.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
print(sys.argv[2] + "/" + json.loads(json.loads(b[8:8 + n])["__metadata__"]["state"])["run_id"] + ".secret")
PY
}
harness_end() { echo "$((checks - fail)) passed, $fail failed"; [ $fail -eq 0 ]; }
