#!/usr/bin/env bash
# The build runs on an x86-64 CPU without AVX2 and FMA (issue 38 item 18: it died with
# SIGILL there): under QEMU's user-mode emulation of a Nehalem (x86-64-v2, no AVX), the
# nn kernels' test runs their baseline builds (and says the CPU lacks x86-64-v3), and the
# CLI trains a GELU network with DP-SGD (ziggurat noise) and with --secure (the discrete
# Gaussian table sampler and the secure batch sampler), then evaluates the model.
# Skipped (77) without qemu-x86_64 (Debian: qemu-user), on another architecture, and in the
# sanitizer build (not meant to run under QEMU; the Release build runs this test).
# Usage: baseline_cpu.sh DPTRAIN_CLI TEST_NN_ISA SOURCE_DIR [SANITIZE(ON/OFF)]
set -u
BIN=$1 NN_ISA=$2 SRC=$3 SANITIZE=${4:-OFF}
[ "$SANITIZE" = ON ] && { echo "SKIP: a sanitizer build"; exit 77; }
[ "$(uname -m)" = x86_64 ] || { echo "SKIP: not an x86-64 machine"; exit 77; }
command -v qemu-x86_64 >/dev/null || { echo "SKIP: qemu-x86_64 not installed (Debian: qemu-user)"; exit 77; }
source "$SRC/tests/cli/lib/harness.sh"
Q=(qemu-x86_64 -cpu Nehalem)
# the emulated CPU really lacks AVX: a program built for x86-64-v3 dies there
printf 'int main(void) { volatile float a = 1, b = 2, c = 3; return (int)__builtin_fmaf(a, b, c) != 5; }\n' > "$T/fma.c"
if cc -O2 -march=x86-64-v3 "$T/fma.c" -o "$T/fma" 2>/dev/null; then
  ("${Q[@]}" "$T/fma" >/dev/null 2>&1; exit $?) 2>/dev/null; rc=$?
  check '[ $rc -ne 0 ]' "a program built for x86-64-v3 ran under ${Q[*]}: the emulated CPU has AVX2/FMA, the test proves nothing"
fi
expect_ok "${Q[@]}" "$NN_ISA"
check 'grep -q "does not run x86-64-v3" <<<"$LAST_OUT"' "test_nn_isa under ${Q[*]}: $LAST_OUT"
blobs_csv "$T/d.csv" 600
D=(--dataset "csv:$T/d.csv" --model mlp:4-16-3:gelu --threads 1 --no-progress --optimizer sgd --lr 0.5
   --batch-size 60 --epochs 2 --algo dpsgd --sigma 1)
expect_ok "${Q[@]}" "$BIN" train "${D[@]}" --out "$T/plain"
check '[ -s "$T/plain/checkpoint.safetensors" ]' "DP-SGD under ${Q[*]} wrote no checkpoint: $LAST_OUT"
expect_ok "${Q[@]}" "$BIN" train "${D[@]}" --secure --out "$T/secure"
check '[ -s "$T/secure/checkpoint.safetensors" ]' "secure DP-SGD under ${Q[*]} wrote no checkpoint: $LAST_OUT"
expect_ok "${Q[@]}" "$BIN" eval --checkpoint "$T/secure" --threads 1
check 'grep -qi "accuracy" <<<"$LAST_OUT"' "eval under ${Q[*]}: $LAST_OUT"
harness_end
