#!/usr/bin/env bash
# CLI: --normalize affine:SHIFT:SCALE maps x to (x - SHIFT) / SCALE with fixed constants (no
# statistics of the data). A run on data in [-1, 1] with affine:-1:2 gives the same test
# loss as a run on the same data already mapped to [0, 1] with --normalize none (values
# chosen so the map is exact in float); `dptrain eval` rebuilds that test split from the
# checkpoint and reports the same loss; affine:0:1 (identity) differs from affine:-1:2;
# malformed specs are errors naming --normalize.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
python3 - "$T" <<'PY'
import random, sys
random.seed(3)
d = sys.argv[1]
rows = [[random.randint(-4, 4) / 4.0 for _ in range(6)] for _ in range(400)]
for name, f in (("raw", lambda v: v), ("unit", lambda v: (v + 1) / 2)):
    with open("%s/%s.csv" % (d, name), "w") as out:
        out.write("label," + ",".join("f%d" % j for j in range(6)) + "\n")
        for i, r in enumerate(rows):
            out.write("%d,%s\n" % (i % 2, ",".join(repr(f(v)) for v in r)))
PY
C=(--model ae:6-4-6:relu --loss mse --algo sgd --optimizer adam --lr 0.01 --epochs 2 --batch-size 50
   --threads 1 --no-progress --seed 5)
loss_of() { grep -o "test loss [0-9.]*" <<<"$1" | tail -1 | awk '{print $3}'; }

expect_ok "$BIN" train --dataset "csv:$T/raw.csv" --normalize affine:-1:2 "${C[@]}" --out "$T/a"
la=$(loss_of "$LAST_OUT")
expect_ok "$BIN" train --dataset "csv:$T/unit.csv" --normalize none "${C[@]}" --out "$T/b"
lb=$(loss_of "$LAST_OUT")
expect_ok "$BIN" train --dataset "csv:$T/raw.csv" --normalize affine:0:1 "${C[@]}" --out "$T/c"
lc=$(loss_of "$LAST_OUT")
expect_ok "$BIN" train --dataset "csv:$T/raw.csv" --normalize none "${C[@]}" --out "$T/d"
ld=$(loss_of "$LAST_OUT")
check '[ -n "$la" ] && [ "$la" = "$lb" ]' "affine:-1:2 on [-1,1] data ($la) != none on the same data in [0,1] ($lb)"
check '[ -n "$lc" ] && [ "$lc" = "$ld" ]' "affine:0:1 ($lc) != none ($ld) on the same data"
check '[ "$la" != "$lc" ]' "affine:-1:2 and affine:0:1 gave the same loss ($la): the map was not applied"
expect_ok "$BIN" eval --checkpoint "$T/a/checkpoint.safetensors" --loss mse --json
le=$(python3 -c "import json,sys; print('%.4f' % json.loads(sys.argv[1])['test_loss'])" "$LAST_OUT")
check '[ "$le" = "$la" ]' "eval of the affine run reports loss $le, training reported $la"

for bad in affine: affine:1 affine:1:0 affine:1:-2 affine:x:2 affine:1:2:3 affine:nan:1 affine:0:inf; do
  expect_fail "--normalize" "$BIN" train --dataset "csv:$T/raw.csv" --normalize "$bad" "${C[@]}" --out "$T/x"
done
harness_end
