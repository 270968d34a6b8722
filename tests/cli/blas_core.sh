#!/usr/bin/env bash
# OpenBLAS's kernels (src/core/blas.c blas_core_fix): where OpenBLAS falls back to its SSE3
# "Prescott" kernels on a CPU with AVX2 and FMA, libdptrain switches it when it loads, and
# `dptrain --version` says which kernels run; OPENBLAS_CORETYPE and DPTRAIN_BLAS_CORE=keep
# are left alone. A training run gives the same result either way up to float rounding.
set -u
BIN="$1"
fail=0
tmp=$(mktemp -d /tmp/dpt_cli_blas_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DPTRAIN_SECRETS_DIR="$tmp/secrets"  # the runs' secret files: under $tmp, not in the home directory
blas() { "$@" --version | sed -n 's/^blas: //p'; }

kept=$(DPTRAIN_BLAS_CORE=keep blas env -u OPENBLAS_CORETYPE "$BIN")
auto=$(env -u OPENBLAS_CORETYPE -u DPTRAIN_BLAS_CORE "$BIN" --version | sed -n 's/^blas: //p')
echo "OpenBLAS's own choice: $kept; dptrain's: $auto"
case "$kept" in
OpenBLAS*) ;;
*) echo "SKIP: the BLAS is not OpenBLAS ($kept)"; exit 77 ;;
esac
has() { grep -qw "$1" /proc/cpuinfo; }
if [ "$kept" = "OpenBLAS Prescott" ] && has avx2 && has fma; then
    want=Haswell
    if has avx512f && has avx512bw && has avx512dq && has avx512vl && has avx512cd; then want=SkylakeX; fi
    case "$auto" in
    "OpenBLAS $want (switched by dptrain from OpenBLAS's Prescott fallback"*) ;;
    *) echo "FAIL: the Prescott fallback on a CPU with AVX2 was not switched to $want: $auto"; fail=1 ;;
    esac
else
    [ "$auto" = "$kept" ] || { echo "FAIL: OpenBLAS's own choice $kept was changed: $auto"; fail=1; }
fi
typo=$(env -u OPENBLAS_CORETYPE DPTRAIN_BLAS_CORE=off "$BIN" --version | sed -n 's/^blas: //p')
case "$typo" in
"$kept (DPTRAIN_BLAS_CORE=off is neither keep nor auto: OpenBLAS's own choice kept)") ;;
*) echo "FAIL: DPTRAIN_BLAS_CORE=off (not a known value) should keep OpenBLAS's choice and say so: $typo"; fail=1 ;;
esac
forced=$(OPENBLAS_CORETYPE=Prescott "$BIN" --version | sed -n 's/^blas: //p')
[ "$forced" = "OpenBLAS Prescott" ] || { echo "FAIL: OPENBLAS_CORETYPE=Prescott was not respected: $forced"; fail=1; }

# the same short run with OpenBLAS's choice and with dptrain's: the same model up to rounding
data=/usr/share/datasets/fashion-mnist
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    for mode in keep auto; do
        DPTRAIN_BLAS_CORE=$mode "$BIN" train --algo sgd --dataset fashion-mnist --model mlp:784-64-10 --epochs 1 \
            --max-train 2048 --max-test 512 --batch-size 128 --seed 5 --threads 1 --out "$tmp/$mode" >"$tmp/$mode.log" 2>&1 ||
            { echo "FAIL: training with DPTRAIN_BLAS_CORE=$mode"; cat "$tmp/$mode.log"; fail=1; }
    done
    python3 - "$tmp/keep/metrics.jsonl" "$tmp/auto/metrics.jsonl" <<'PY' || fail=1
import json, sys
a, b = ([json.loads(l) for l in open(p) if l.strip()][-1] for p in sys.argv[1:3])
if abs(a["test_loss"] - b["test_loss"]) > 1e-3 * max(1.0, abs(a["test_loss"])):
    sys.exit(f"FAIL: test loss {a['test_loss']} with OpenBLAS's kernels, {b['test_loss']} with dptrain's")
PY
fi
exit $fail
