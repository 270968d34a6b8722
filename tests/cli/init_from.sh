#!/usr/bin/env bash
# CLI: --init-from CKPT starts a fresh run from a checkpoint's parameters (fine-tuning).
# The run takes the checkpoint's model when --model is left out, starts from exactly its
# parameters (a step of lr 1e-12 leaves them where they were; a seed's random
# initialization is far away), and records where they came from with their SHA-256 (computed
# here from the checkpoint's tensors) in every checkpoint's state and in the ledger; a
# private source gets a note that this run's epsilon does not cover it; account --ledger
# shows the starting point. Refused before anything is created: with --resume, a path that
# is missing, a directory without a checkpoint, a file that is not one, another model,
# --algo noisy-gd.
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
expect_fail "its model is mlp:4-8-3:relu, this run's --model is mlp:4-9-3:relu" \
  "$BIN" train "${D[@]}" --model mlp:4-9-3:relu --init-from "$T/pub" --out "$T/x4"
expect_fail "not with --algo noisy-gd" "$BIN" train --dataset "csv:$T/d.csv" --quiet --algo noisy-gd --langevin-sigma 0.1 --init-from "$T/pub" --out "$T/x5"
check '[ ! -e "$T/x1" ] && [ ! -e "$T/x2" ] && [ ! -e "$T/x3" ] && [ ! -e "$T/x4" ] && [ ! -e "$T/x5" ]' \
  "a refused --init-from left a run directory"
harness_end
