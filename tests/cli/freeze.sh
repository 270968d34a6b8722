#!/usr/bin/env bash
# CLI: --freeze LAYERS trains the other layers only. DP-SGD fine-tuning from a checkpoint
# with its first two layers frozen (and weight decay, which would move any parameter the
# optimizer touched) leaves those layers' tensors byte-identical to the checkpoint's and
# moves the last layer; the run says how many parameters train, and the ledger, its
# checkpoint's state and account --ledger name the frozen layers; the epsilon is the one of
# the same run without freezing. A resume gives the same list or is refused (exit 2);
# --secure calibrates on the trained parameters. Refused before the data are loaded (exit 2,
# no --out created): a layer the model does not have (the message lists the ones it has), a
# layer without parameters, every layer, an algorithm that cannot freeze.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 600
D=(--dataset "csv:$T/d.csv" --threads 1 --no-progress --optimizer sgd --batch-size 60)
# the named tensor's bytes (hex) of a checkpoint, or a key of its state
ck() { python3 - "$@" <<'PY'
import json, struct, sys
b = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
if sys.argv[1] == "tensor":
    o = h[sys.argv[3]]["data_offsets"]
    print(b[8 + n + o[0]:8 + n + o[1]].hex())
else:
    print(json.loads(h["__metadata__"]["state"]).get(sys.argv[3], ""))
PY
}

expect_ok "$BIN" train "${D[@]}" --quiet --model mlp:4-8-8-3:relu --lr 0.5 --epochs 2 --out "$T/pub"
P="$T/pub/checkpoint.safetensors"

# -- DP-SGD on the last layer only
expect_ok "$BIN" train "${D[@]}" --algo dpsgd --sigma 1 --lr 0.1 --weight-decay 0.1 --epochs 2 --init-from "$T/pub" \
  --freeze fc2,fc1 --out "$T/ft"
check 'grep -qF "frozen layers: fc1,fc2 (they keep their starting values); 27 of 139 parameters train" <<<"$LAST_OUT"' \
  "the run does not say what trains: $LAST_OUT"
F="$T/ft/checkpoint.safetensors"
for t in fc1.weight fc1.bias fc2.weight fc2.bias; do
  check '[ "$(ck tensor "$P" $t)" = "$(ck tensor "$F" $t)" ]' "frozen tensor $t changed"
done
check '[ "$(ck tensor "$P" fc3.weight)" != "$(ck tensor "$F" fc3.weight)" ]' "the trained layer fc3 did not move"
check 'grep -qF "frozen layers: their output for the 600 training examples is computed once and kept" <<<"$LAST_OUT"' \
  "the run does not say that the frozen layers' output is cached: $LAST_OUT"
check '[ "$(ck state "$F" frozen_layers)" = "fc1,fc2" ]' "the checkpoint's state does not name the frozen layers"
expect_ok "$BIN" account --ledger "$T/ft/ledger.json"
check 'grep -qF "frozen layers   fc1,fc2" <<<"$LAST_OUT"' "account --ledger does not name the frozen layers: $LAST_OUT"
eps_frozen=$(grep -o "epsilon (RDP)   [0-9.]*" <<<"$LAST_OUT")
expect_ok "$BIN" train "${D[@]}" --quiet --algo dpsgd --sigma 1 --lr 0.1 --epochs 2 --init-from "$T/pub" --out "$T/all"
expect_ok "$BIN" account --ledger "$T/all/ledger.json"
check '[ -n "$eps_frozen" ] && [ "$eps_frozen" = "$(grep -o "epsilon (RDP)   [0-9.]*" <<<"$LAST_OUT")" ]' \
  "freezing changed the epsilon ($eps_frozen)"

# -- resume: the same list, or refused
expect_fail "frozen layers (freeze) was fc1,fc2, now (none)" \
  "$BIN" train "${D[@]}" --algo dpsgd --sigma 1 --lr 0.1 --weight-decay 0.1 --epochs 3 --model mlp:4-8-8-3:relu \
  --out "$T/ft" --resume
check '[ "$("$BIN" train "${D[@]}" --quiet --algo dpsgd --sigma 1 --epochs 3 --model mlp:4-8-8-3:relu --out "$T/ft" --resume >/dev/null 2>&1; echo $?)" = 2 ]' \
  "a refused resume does not exit 2"
expect_ok "$BIN" train "${D[@]}" --quiet --algo dpsgd --sigma 1 --lr 0.1 --weight-decay 0.1 --epochs 3 \
  --model mlp:4-8-8-3:relu --freeze fc1,fc2 --out "$T/ft" --resume
check '[ "$(ck tensor "$P" fc1.weight)" = "$(ck tensor "$F" fc1.weight)" ]' "a resumed run moved a frozen layer"

# -- secure: calibrated on the 27 trained parameters
expect_ok "$BIN" train "${D[@]}" --algo dpsgd --secure --target-epsilon 2 --epochs 1 --model mlp:4-8-8-3:relu \
  --freeze fc1,fc2 --out "$T/sec"
check 'grep -qF "C + sqrt(27) h" <<<"$LAST_OUT"' "secure calibration not on the trained parameters: $LAST_OUT"

# -- refused before the data are loaded, nothing created
expect_fail "--freeze: model mlp:4-8-8-3:relu has no layer \"fc9\" (its layers with parameters: fc1, fc2, fc3)" \
  "$BIN" train "${D[@]}" --model mlp:4-8-8-3:relu --freeze fc9 --out "$T/x1"
expect_fail "no layer \"relu1\" with parameters" "$BIN" train "${D[@]}" --model mlp:4-8-8-3:relu --freeze relu1 --out "$T/x2"
expect_fail "--freeze: an empty list" "$BIN" train "${D[@]}" --model mlp:4-8-8-3:relu --freeze "" --out "$T/x6"
expect_fail "every layer with parameters is frozen" \
  "$BIN" train "${D[@]}" --model mlp:4-8-8-3:relu --freeze fc1,fc2,fc3 --out "$T/x3"
expect_fail "--freeze: not with --algo dpulr" \
  "$BIN" train "${D[@]}" --model mlp:4-8-8-3:relu --algo dpulr --sigma0 5 --freeze fc1 --out "$T/x4"
expect_fail "--no-feature-cache: only with --freeze" "$BIN" train "${D[@]}" --model mlp:4-8-8-3:relu --no-feature-cache \
  --out "$T/x6"
check '[ "$("$BIN" train "${D[@]}" --model mlp:4-8-8-3:relu --freeze fc9 --out "$T/x5" >/dev/null 2>&1; echo $?)" = 2 ]' \
  "a bad --freeze does not exit 2"
check '[ ! -e "$T/x1" ] && [ ! -e "$T/x2" ] && [ ! -e "$T/x3" ] && [ ! -e "$T/x4" ] && [ ! -e "$T/x5" ] && [ ! -e "$T/x6" ]' \
  "a refused --freeze left a run directory"
harness_end
