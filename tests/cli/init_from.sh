#!/usr/bin/env bash
# CLI: --init-from CKPT starts a fresh run from a checkpoint's parameters (fine-tuning).
# The run takes the checkpoint's model when --model is left out, starts from exactly its
# parameters (a step of lr 1e-12 leaves them where they were; a seed's random
# initialization is far away), and records where they came from with their SHA-256 (computed
# here from the checkpoint's tensors) in every checkpoint's state and in the ledger; a
# private source gets a note that this run's epsilon does not cover it; account --ledger
# shows the starting point. A named model (mnist_cnn) and its layers written out are the same
# model. Refused before anything is created: with --resume, a path that is missing, a
# directory without a checkpoint, a file that is not one or holds a NaN (named by tensor),
# another model, --algo noisy-gd, --init (a --preset's named as such), and --overwrite of
# the directory holding the source (it would delete the source and its ledger); a run the
# trainer refuses leaves no --out directory.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 600
D=(--dataset "csv:$T/d.csv" --threads 1 --no-progress --quiet --optimizer sgd --batch-size 60)
# tensors of a checkpoint (no optimizer state) in file order: SHA-256, or the values
ck_tool() { python3 - "$@" <<'PY'
import hashlib, json, struct, sys
b = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
ts = sorted((v["data_offsets"], k) for k, v in h.items() if k != "__metadata__" and not k.startswith("optim."))
data = b"".join(b[8 + n + o[0]:8 + n + o[1]] for o, _ in ts)
if sys.argv[1] == "sha":
    print(hashlib.sha256(data).hexdigest())
elif sys.argv[1] == "state":
    print(json.loads(h["__metadata__"]["state"]).get(sys.argv[3], ""))
else:  # close A B: largest |a - b| over the parameters of checkpoints A and B
    other = open(sys.argv[3], "rb").read()
    m = struct.unpack("<Q", other[:8])[0]
    g = json.loads(other[8:8 + m])
    d2 = b"".join(other[8 + m + g[k]["data_offsets"][0]:8 + m + g[k]["data_offsets"][1]] for _, k in ts)
    a, c = struct.unpack("<%df" % (len(data) // 4), data), struct.unpack("<%df" % (len(d2) // 4), d2)
    print(max(abs(x - y) for x, y in zip(a, c)))
PY
}

expect_ok "$BIN" train "${D[@]}" --model mlp:4-8-3:relu --lr 0.5 --epochs 2 --out "$T/pub"
sha=$(ck_tool sha "$T/pub/checkpoint.safetensors")
abs=$(cd "$T/pub" && pwd -P)/checkpoint.safetensors

# -- DP-SGD fine-tuning from it, the model taken from the checkpoint
expect_ok "$BIN" train "${D[@]}" --algo dpsgd --sigma 1 --lr 0.1 --epochs 1 --init-from "$T/pub" --out "$T/ft"
note=$(ck_tool state "$T/ft/checkpoint.safetensors" initial_params)
check '[ "$note" = "checkpoint $abs (sgd run, step 20) (SHA-256 of the float32 values: $sha)" ]' \
  "the checkpoint's state does not name the source and its SHA-256 $sha: '$note'"
led=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["meta"]["initial_params"])' "$T/ft/ledger.json")
check '[ -n "$led" ] && [ "$led" = "$note" ]' "ledger.json's initial_params '$led' is not the checkpoint's"
expect_ok "$BIN" account --ledger "$T/ft/ledger.json"
check 'grep -qF "started from    $note" <<<"$LAST_OUT"' "account --ledger does not say where the run started: $LAST_OUT"
# the ledger inside the checkpoint, as the private-source note suggests: the same report
ledger_out=$("$BIN" account --ledger "$T/ft/ledger.json" 2>&1 | grep -v "^ledger ")
expect_ok "$BIN" account --ledger "$T/ft/checkpoint.safetensors"
check '[ "$(grep -v "^ledger " <<<"$LAST_OUT")" = "$ledger_out" ]' "account --ledger of the checkpoint differs from its ledger.json"
expect_fail "a checkpoint of a non-private run (sgd)" "$BIN" account --ledger "$T/pub/checkpoint.safetensors"
expect_ok "$BIN" account --ledger "$T/ft/ledger.json" --json
check 'grep -qF "\"initial_params\":\"checkpoint $abs" <<<"$LAST_OUT"' "account --ledger --json has no initial_params"

# -- it starts from exactly those values: one step of lr 1e-12 stays there; the seed's
# random initialization (the same run without --init-from) is far away
expect_ok "$BIN" train "${D[@]}" --lr 1e-12 --max-steps 1 --init-from "$T/pub/checkpoint.safetensors" --out "$T/still"
check '[ "$(ck_tool close "$T/pub/checkpoint.safetensors" "$T/still/checkpoint.safetensors")" = 0.0 ]' \
  "a run from --init-from did not start from the checkpoint's parameters"
expect_ok "$BIN" train "${D[@]}" --model mlp:4-8-3:relu --lr 1e-12 --max-steps 1 --out "$T/rand"
check 'python3 -c "import sys; sys.exit(not float(sys.argv[1]) > 0.1)" "$(ck_tool close "$T/pub/checkpoint.safetensors" "$T/rand/checkpoint.safetensors")"' \
  "the random initialization is as close to the checkpoint as --init-from (the check cannot tell them apart)"

# -- a private source: this run's epsilon does not cover it
expect_ok "$BIN" train "${D[@]}" --algo dpsgd --sigma 1 --lr 0.1 --epochs 1 --init-from "$T/ft" --out "$T/ft2"
check 'grep -q "comes from a private run: this run.s epsilon covers this run only" <<<"$LAST_OUT"' \
  "no note that the private source is not covered: $LAST_OUT"

# -- refused, and nothing created
expect_fail "not with --resume" "$BIN" train "${D[@]}" --init-from "$T/pub" --out "$T/ft" --resume
expect_fail "--init-from $T/none: No such file" "$BIN" train "${D[@]}" --init-from "$T/none" --out "$T/x1"
mkdir "$T/empty"
expect_fail "a directory without a checkpoint.safetensors" "$BIN" train "${D[@]}" --init-from "$T/empty" --out "$T/x2"
echo junk > "$T/junk.safetensors"
expect_fail "--init-from: $T/junk.safetensors: truncated" "$BIN" train "${D[@]}" --init-from "$T/junk.safetensors" --out "$T/x3"
expect_fail "its model is mlp:4-8-3:relu, this run's is mlp:4-9-3:relu" \
  "$BIN" train "${D[@]}" --model mlp:4-9-3:relu --init-from "$T/pub" --out "$T/x4"
expect_fail "not with --algo noisy-gd" "$BIN" train --dataset "csv:$T/d.csv" --quiet --algo noisy-gd --langevin-sigma 0.1 --init-from "$T/pub" --out "$T/x5"
check '[ ! -e "$T/x1" ] && [ ! -e "$T/x2" ] && [ ! -e "$T/x3" ] && [ ! -e "$T/x4" ] && [ ! -e "$T/x5" ]' \
  "a refused --init-from left a run directory"

# -- --overwrite of the directory holding the source would delete it and its ledger
expect_fail "which --overwrite would empty" "$BIN" train "${D[@]}" --algo dpsgd --sigma 1 --init-from "$T/ft" \
  --out "$T/ft" --overwrite
check '[ "$(ck_tool sha "$T/ft/checkpoint.safetensors")" != "" ] && [ -e "$T/ft/ledger.json" ]' \
  "a refused --overwrite of the source's directory touched it"
expect_fail "not with --init-from" "$BIN" train "${D[@]}" --init he --init-from "$T/pub" --out "$T/x6"
# a --preset's --init (every preset sets one) is refused too, but the user never typed it:
# the message says whose it is and lists the preset's other flags to give instead (its
# --model among them, with the note that leaving it out takes the checkpoint's model);
# --target-epsilon drops the preset's --sigma there as it does from the expansion
out=$("$BIN" train --preset dpmac-usps-eps8 --target-epsilon 3 --init-from "$T/pub" --out "$T/x10" --quiet 2>&1)
rc=$?
check '[ $rc -eq 2 ]' "--preset with --init-from exited $rc, want 2: $out"
check 'grep -q -- "--init-from: --preset dpmac-usps-eps8 sets --init xavier, which a run from a checkpoint cannot take" <<<"$out"' \
  "--preset's --init: the message does not name the preset: $out"
check 'grep -q -- "instead of --preset dpmac-usps-eps8, give its other flags: --algo dpmac --dataset usps .*--loss mse --optimizer adam .*--batch-size 500 (leave out its --model ae:256-300-100-20-100-300-256:relu as well to take the checkpoint.s model)$" <<<"$out"' \
  "--preset's --init: the message does not list the preset's other flags: $out"
check '! grep -q -- "other flags: .*--init \|other flags: .*--sigma " <<<"$out"' \
  "--preset's --init: the flags listed hold --init or the dropped --sigma: $out"
expect_fail "--init: not with --init-from" "$BIN" train --preset dpmac-usps-eps8 --init he --init-from "$T/pub" \
  --out "$T/x10"
check '[ ! -e "$T/x10" ]' "a refused --preset with --init-from left its --out directory"

# -- a checkpoint holding a NaN (sealed again after the edit) is refused naming the tensor
python3 - "$T/pub/checkpoint.safetensors" "$T/nan.safetensors" <<'PY'
import hashlib, json, struct, sys
buf = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", buf[:8])[0]
h = json.loads(buf[8:8 + n])
o = 8 + n + h["fc2.bias"]["data_offsets"][0] + 4       # fc2.bias[1]
buf[o:o + 4] = struct.pack("<f", float("nan"))
mark = b'"checkpoint_sha256":"'
i = buf.index(mark) + len(mark)
buf[i:i + 64] = b"0" * 64
buf[i:i + 64] = hashlib.sha256(buf).hexdigest().encode()
open(sys.argv[2], "wb").write(buf)
PY
expect_fail "nan.safetensors: tensor fc2.bias holds nan at index 1" "$BIN" train "${D[@]}" --init-from "$T/nan.safetensors" --out "$T/x7"

# -- a named model and the same layers written out are the same model (both directions)
F=(--max-train 100 --max-test 50 --max-steps 1 --threads 1 --no-progress --quiet --batch-size 50)
CNN='cnn:1x28x28:conv16k8s2p3,relu,maxpool2s1,conv32k4s2,relu,maxpool2s1,flatten,fc32,relu,fc10'
expect_ok "$BIN" train "${F[@]}" --model mnist_cnn --out "$T/named"
expect_ok "$BIN" train "${F[@]}" --model "$CNN" --init-from "$T/named" --out "$T/spelled"
expect_ok "$BIN" train "${F[@]}" --model mnist_cnn --init-from "$T/spelled" --out "$T/named2"
expect_fail "its model is mnist_cnn, this run's is cnn:1x28x28:conv16k8s2p3" "$BIN" train "${F[@]}" \
  --model "${CNN/fc32/fc33}" --init-from "$T/named" --out "$T/x8"

# -- a run the trainer refuses leaves no --out behind (the trainer creates it, and removes
# it when nothing was written)
expect_fail "--batch-size must be in" "$BIN" train "${D[@]}" --batch-size 100000 --out "$T/x9"
check '[ ! -e "$T/x6" ] && [ ! -e "$T/x7" ] && [ ! -e "$T/x8" ] && [ ! -e "$T/x9" ]' \
  "a refused run left its --out directory"
harness_end
