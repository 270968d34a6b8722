#!/usr/bin/env bash
# --shards without MPI: bad values are errors naming the flag; a sharded single-process
# run says nothing about MPI and records its shards in the checkpoint, and --resume keeps
# them; --version says whether this build has MPI.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
python3 - "$T/d.csv" <<'PY'
import random, sys
random.seed(2)
with open(sys.argv[1], "w") as f:
    f.write("label,a,b\n")
    for i in range(300):
        f.write("%d,%.3f,%.3f\n" % (i % 2, random.gauss(i % 2, 0.5), random.gauss(0, 1)))
PY
C=(train --dataset "csv:$T/d.csv" --model mlp:2-4-2:relu --threads 1 --no-progress --epochs 1 --batch-size 30)
expect_fail "--shards" "$BIN" "${C[@]}" --shards -1 --out "$T/x"
expect_fail "--shards" "$BIN" "${C[@]}" --shards 100000 --out "$T/x"
expect_fail "--shards" "$BIN" "${C[@]}" --shards 301 --out "$T/x"   # 300 training examples
check "\"$BIN\" --version | grep -q '^mpi: '" "--version should say whether MPI is built in"
checks=$((checks+1))
if ! out=$("$BIN" "${C[@]}" --shards 3 --out "$T/r" 2>&1); then echo "FAIL: sharded run: $out"; fail=$((fail+1)); fi
check "! grep -q 'data parallel' <<<\"\$out\"" "a single process should not print the MPI line"
check "grep -aqE 'shards[^0-9]{1,8}3[^0-9]' $T/r/checkpoint.safetensors" "checkpoint does not record shards 3"
checks=$((checks+1))
if ! out=$("$BIN" "${C[@]}" --epochs 2 --out "$T/r" --resume 2>&1); then echo "FAIL: resume: $out"; fail=$((fail+1)); fi
check "grep -aqE 'shards[^0-9]{1,8}3[^0-9]' $T/r/checkpoint.safetensors" "resume should keep shards 3"
harness_end
