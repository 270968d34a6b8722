#!/usr/bin/env bash
# CLI: --feature-norm dp (DP channel statistics for the fbn layer, Tramer & Boneh's frozen
# BatchNorm on ScatterNet features). Bad flags are refused by name; a target the two
# releases alone exceed is refused before anything is computed or written; the calibrated
# sigma includes them (larger than without); a run's ledger holds both releases and its
# epsilon stays at the target; eval of the checkpoint reproduces the run's accuracy; a
# --resume keeps the checkpoint's statistics bit for bit and releases nothing new; each
# tb-scatter-* preset trains on a small subset.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
D=${DPT_SHARED_DATASETS:-/nonexistent}
[ -f "$D/mnist/train-images-idx3-ubyte.gz" ] || D=/work/shared/datasets
[ -f "$D/mnist/train-images-idx3-ubyte.gz" ] || { echo "SKIP: no MNIST"; exit 77; }
S=(--data-dir "$D" --max-train 2000 --max-test 500 --threads 2 --no-progress)
M=(--dataset mnist --normalize none --model cnn:1x28x28:scatter,fbn,fc10 --freeze fbn1 --algo dpsgd
   --optimizer sgd --momentum 0.9 --clip 0.1 --lr 8 --batch-size 256)
FN=(--feature-norm dp --feature-norm-sigma 8 --feature-norm-clip 0.17,0.053)

expect_fail "--feature-norm-sigma: only with --feature-norm dp" "$BIN" train "${S[@]}" "${M[@]}" --feature-norm-sigma 8 --sigma 1 --out "$T/x"
expect_fail "needs --feature-norm-sigma" "$BIN" train "${S[@]}" "${M[@]}" --feature-norm dp --sigma 1 --out "$T/x"
expect_fail "needs --feature-norm-clip" "$BIN" train "${S[@]}" "${M[@]}" --feature-norm dp --feature-norm-sigma 8 --sigma 1 --out "$T/x"
expect_fail "--feature-norm-clip: expected C or C,C2" "$BIN" train "${S[@]}" "${M[@]}" "${FN[@]/0.17,0.053/0.1,x}" --sigma 1 --out "$T/x"
expect_fail "--feature-norm: expected none or dp" "$BIN" train "${S[@]}" "${M[@]}" --feature-norm yes --sigma 1 --out "$T/x"
expect_fail "not a differentially private algorithm" "$BIN" train "${S[@]}" --algo sgd --feature-norm dp --out "$T/x"
expect_fail "is not frozen" "$BIN" train "${S[@]}" "${M[@]/fbn1/fc1}" "${FN[@]}" --sigma 1 --epochs 1 --out "$T/x"

# two Gaussian(8) releases spend epsilon ~0.63 at 1e-5: a target of 0.5 is refused up front
expect_fail "the feature normalization's two releases" "$BIN" train "${S[@]}" "${M[@]}" "${FN[@]}" --target-epsilon 0.5 --epochs 1 --out "$T/refused"
check '[ ! -e "$T/refused/ledger.json" ]' "a refused run wrote a ledger"

# the calibration includes the releases
expect_ok "$BIN" train "${S[@]}" "${M[@]}" "${FN[@]}" --target-epsilon 3 --epochs 2 --out "$T/fn"
s1=$(grep -o "calibrated sigma [0-9.]*" <<<"$LAST_OUT" | awk '{print $3}')
acc=$(grep -o "^test accuracy [0-9.]*%" <<<"$LAST_OUT" | awk '{print $3}')
check 'grep -q "feature normalization: fbn set from DP channel statistics" <<<"$LAST_OUT"' "no feature normalization line"
check 'python3 -c "
import json; l=json.load(open(\"$T/fn/ledger.json\"))
ev=[e for e in l[\"events\"] if e.get(\"label\",\"\").startswith(\"dp-feature-norm\")]
assert len(ev)==2 and all(e[\"type\"]==\"gaussian\" and e[\"sigma\"]==8 for e in ev), ev"' "ledger lacks the two releases"
G=("${M[@]/scatter,fbn,/scatter,gn27,}")
expect_ok "$BIN" train "${S[@]}" "${G[@]/fbn1/gn1}" --target-epsilon 3 --epochs 2 --out "$T/gn"
s0=$(grep -o "calibrated sigma [0-9.]*" <<<"$LAST_OUT" | awk '{print $3}')
check 'python3 -c "assert float(\"$s1\") > float(\"$s0\") * 1.01, (\"$s1\", \"$s0\")"' "calibrated sigma $s1 (with the releases) not above $s0"
expect_ok "$BIN" account --ledger "$T/fn/ledger.json" --json
check 'python3 -c "
import json,sys; r=json.loads(sys.argv[1]); assert r[\"epsilon\"] <= 3.0 + 1e-9, r" "$LAST_OUT"' "epsilon above the target"

# checkpoint round trip: eval gives the run's accuracy
expect_ok "$BIN" eval --checkpoint "$T/fn" --data-dir "$D"
check 'grep -q "accuracy $acc" <<<"$LAST_OUT"' "eval accuracy differs from the run's $acc: $LAST_OUT"

# resume: the checkpoint's statistics, no new release
fbn() { python3 - "$1" <<'PY'
import json, struct, sys, hashlib
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
print(hashlib.sha256(b"".join(b[8 + n + h[k]["data_offsets"][0]:8 + n + h[k]["data_offsets"][1]] for k in ("fbn1.weight", "fbn1.bias"))).hexdigest())
PY
}
expect_ok "$BIN" train "${S[@]}" "${M[@]}" "${FN[@]}" --sigma 2 --epochs 1 --out "$T/res"
before=$(fbn "$T/res/checkpoint.safetensors")
expect_ok "$BIN" train "${S[@]}" "${M[@]}" "${FN[@]}" --sigma 2 --epochs 2 --out "$T/res" --resume
check 'grep -q "the DP statistics the checkpoint holds" <<<"$LAST_OUT"' "resume did not say it keeps the statistics"
check '[ "$before" = "$(fbn "$T/res/checkpoint.safetensors")" ]' "resume changed the fbn statistics"
check 'python3 -c "
import json; l=json.load(open(\"$T/res/ledger.json\"))
assert sum(e.get(\"label\",\"\").startswith(\"dp-feature-norm\") for e in l[\"events\"])==2"' "resume released again"

# the presets train on a small subset
for p in tb-scatter-linear-mnist tb-scatter-cnn-mnist tb-scatter-linear-cifar10 tb-scatter-cnn-cifar10; do
  case $p in *cifar10) [ -f "$D/cifar10/data_batch_1.bin.gz" ] || [ -f "$D/cifar10/data_batch_1.bin" ] || continue;; esac
  expect_ok "$BIN" train --preset $p "${S[@]}" --batch-size 256 --epochs 1 --out "$T/$p"
  a=$(grep -o "^test accuracy [0-9.]*" <<<"$LAST_OUT" | awk '{print $3}')
  check 'python3 -c "assert float(\"$a\") > 15.0, \"$a\""' "$p: accuracy $a% (chance 10%)"
  check 'grep -q "fbn set from DP channel statistics" <<<"$LAST_OUT"' "$p: no feature normalization"
  # the preset's clip bounds were measured on the training split: the ledger and the output say so
  check 'grep -q "this epsilon does NOT cover: the feature normalization.s clip bounds" <<<"$LAST_OUT" &&
         python3 -c "
import json; l=json.load(open(\"$T/$p/ledger.json\")); assert \"clip bounds\" in l[\"meta\"][\"epsilon_excludes\"], l[\"meta\"]"' \
    "$p: the data-measured clip bounds are not labelled"
done
# clip bounds given on the command line: nothing to label
expect_ok "$BIN" train --preset tb-scatter-linear-mnist "${S[@]}" --batch-size 256 --epochs 1 --feature-norm-clip 0.2,0.1 \
  --out "$T/own-clip"
check '! grep -q "this epsilon does NOT cover" <<<"$LAST_OUT"' "own --feature-norm-clip still labelled: $LAST_OUT"
harness_end
