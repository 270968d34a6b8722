#!/usr/bin/env bash
# CLI: dptrain train --trace FILE writes a header and one JSON line per step. DP-SGD: the
# update norm is ||theta_t - theta_{t-1}|| recomputed here from two checkpoints (max-steps
# 1 and 2, same seed), SGD's update is lr times the direction (no momentum), the per-layer
# norms add up to the total, no DP-ULR fields, no privacy warning. DP-ULR: one entry per
# module with s, lambda_min, rank, clip counts and the batch size, the header and a warning
# saying these statistics are not covered by the epsilon; in explicit mode s is --ulr-std.
# The warning is never skipped for a run that handles private data: DP-ULR on shuffled
# batches (unaccounted, algorithm "dpulr-unaccounted") and PDP-SGD (its gradient is unnoised,
# the noise goes onto the parameters) warn too; plain SGD says it is non-private.
# --resume appends to the file; an unwritable path is an error naming --trace; a file that is
# not a trace (a run's ledger) is neither overwritten nor appended to.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 600
S=(--dataset "csv:$T/d.csv" --model mlp:4-8-3:gelu --threads 1 --no-progress --seed 3)

expect_fail "--trace $T/nodir/t.jsonl: cannot open" "$BIN" train "${S[@]}" --algo dpsgd --sigma 1 --epochs 1 \
  --out "$T/x" --trace "$T/nodir/t.jsonl"
expect_ok "$BIN" train "${S[@]}" --algo dpsgd --sigma 1 --batch-size 60 --optimizer sgd --lr 0.5 --max-steps 1 \
  --epochs 1 --out "$T/g1" --trace "$T/g1.jsonl"
# a private run's lines reach the file only once its ledger on disk records their steps: a
# run that diverges at step 2 of its first epoch records none, and its trace holds none
out=$("$BIN" train "${S[@]}" --algo dpsgd --sigma 1 --batch-size 60 --optimizer sgd --lr 1e30 --epochs 1 \
  --out "$T/div" --trace "$T/div.jsonl" 2>&1); rc=$?
check "[ $rc -ne 0 ] && grep -q 'diverged' <<<\"\$out\"" "the diverging run did not fail: $out"
check "[ \$(wc -l < $T/div.jsonl) -eq 1 ] && grep -q 'the last 1 step(s) are not in it' <<<\"\$out\"" \
  "trace lines of steps no ledger recorded reached the file: $(cat $T/div.jsonl | cut -c1-80)"
# a file that is not a trace (here the run's own ledger) is never overwritten or appended to;
# an earlier trace is replaced
cp "$T/g1/ledger.json" "$T/ledger_copy.json"
expect_fail "--trace $T/g1/ledger.json: the file exists and is not a dptrain trace: refusing to overwrite it" \
  "$BIN" train "${S[@]}" --algo dpsgd --sigma 1 --batch-size 60 --max-steps 1 --epochs 1 --out "$T/g1b" \
  --trace "$T/g1/ledger.json"
check 'cmp -s "$T/g1/ledger.json" "$T/ledger_copy.json"' "--trace onto a ledger changed it"
expect_fail "refusing to append to it" "$BIN" train "${S[@]}" --algo dpsgd --sigma 1 --batch-size 60 --optimizer sgd \
  --lr 0.5 --max-steps 2 --epochs 1 --out "$T/g1" --resume --trace "$T/g1/ledger.json"
check 'cmp -s "$T/g1/ledger.json" "$T/ledger_copy.json"' "--trace --resume onto a ledger changed it"
expect_ok "$BIN" train "${S[@]}" --algo dpsgd --sigma 1 --batch-size 60 --optimizer sgd --lr 0.5 --max-steps 1 \
  --epochs 1 --out "$T/g1c" --trace "$T/g1.jsonl"
expect_ok "$BIN" train "${S[@]}" --algo dpsgd --sigma 1 --batch-size 60 --optimizer sgd --lr 0.5 --max-steps 2 \
  --epochs 1 --out "$T/g2" --trace "$T/g2.jsonl"
check '! grep -q "warning: --trace" <<<"$LAST_OUT"' "DP-SGD trace must not warn"
check 'python3 - "$T" <<PY
import json, math, struct, sys
t = sys.argv[1]
def theta(path):  # safetensors: 8-byte header length, JSON header, float32 data
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__" or v["dtype"] != "F32": continue
        s, e = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
    return out
a, b = theta(t + "/g1/checkpoint.safetensors"), theta(t + "/g2/checkpoint.safetensors")
keys = [k for k in a if k.startswith("theta") or "weight" in k or "bias" in k]
d = math.sqrt(sum((x - y) ** 2 for k in keys for x, y in zip(a[k], b[k])))
L = [json.loads(l) for l in open(t + "/g2.jsonl")]
assert L[0]["algorithm"] == "dpsgd" and "post-processing" in L[0]["privacy"], L[0]
assert [r["step"] for r in L[1:]] == [1, 2], L
r = L[2]
assert d > 0 and abs(r["update_norm"] - d) <= 1e-4 * d, (r["update_norm"], d, keys)
assert abs(r["update_norm"] - 0.5 * r["direction_norm"]) <= 1e-4 * r["update_norm"], r
assert abs(math.sqrt(sum(l["update_norm"] ** 2 for l in r["layers"])) - r["update_norm"]) <= 1e-5 * r["update_norm"], r
assert [l["layer"] for l in r["layers"]] == [0, 2] and "dpulr" not in r, r
assert r["lr"] == 0.5 and r["epoch"] == 0, r
PY' "DP-SGD trace does not match the checkpoints"

U=(--algo dpulr --sigma0 1 --copies 4 --batch-size 60 --epochs 1)
expect_ok "$BIN" train "${S[@]}" "${U[@]}" --ulr-noise controller --out "$T/u" --trace "$T/u.jsonl"
check 'grep -q "warning: --trace .*(algorithm dpulr) holds unnoised .* NO epsilon covers" <<<"$LAST_OUT"' \
  "DP-ULR trace must warn"
check 'python3 - "$T/u.jsonl" <<PY
import json, sys
L = [json.loads(l) for l in open(sys.argv[1])]
assert "NO epsilon covers" in L[0]["privacy"], L[0]
assert len(L) == 11, len(L)  # header + round(600/60) steps
for r in L[1:]:
    assert len(r["dpulr"]) == 2, r
    for m in r["dpulr"]:
        assert m["s"] > 0 and m["examples"] >= 1 and 0 <= m["clipped"] <= m["examples"] and 1 <= m["rank"] <= m["dim"], m
    assert r["dpulr"][0]["dim"] == 5 and r["dpulr"][1]["dim"] == 9, r  # d_in + 1 of each Linear layer
PY' "DP-ULR trace fields"
expect_ok "$BIN" train "${S[@]}" "${U[@]}" --ulr-noise explicit --ulr-std 0.25 --out "$T/e" --trace "$T/e.jsonl"
check 'python3 -c "
import json
L = [json.loads(l) for l in open(\"$T/e.jsonl\")][1:]
assert all(m[\"s\"] == 0.25 for r in L for m in r[\"dpulr\"]), L[0]
"' "explicit mode: s is --ulr-std"
# every other run on private data warns as well (fail-safe), a non-private one says so
expect_ok "$BIN" train "${S[@]}" --algo dpulr --sigma0 1 --copies 4 --batch-size 60 --sampler shuffle --max-steps 2 \
  --epochs 1 --out "$T/us" --trace "$T/us.jsonl"
check 'grep -q "warning: --trace .*(algorithm dpulr-unaccounted) holds unnoised" <<<"$LAST_OUT"' \
  "unaccounted DP-ULR trace must warn"
check 'grep -q "NO epsilon covers" "$T/us.jsonl" && grep -q "\"dpulr\":\[" "$T/us.jsonl"' \
  "unaccounted DP-ULR trace header must say what it holds"
expect_ok "$BIN" train "${S[@]}" --algo pdp-sgd --pdp-sigma 1 --max-steps 2 --epochs 1 --out "$T/p" --trace "$T/p.jsonl"
check 'grep -q "warning: --trace .*(algorithm pdp-sgd) holds norms that are NOT post-processing" <<<"$LAST_OUT"' \
  "PDP-SGD trace must warn"
expect_ok "$BIN" train "${S[@]}" --algo sgd --max-steps 2 --epochs 1 --out "$T/s" --trace "$T/s.jsonl"
check '! grep -q "warning: --trace" <<<"$LAST_OUT" && grep -q "non-private run" "$T/s.jsonl"' \
  "SGD trace: no warning, header says non-private"
# --resume appends: a second epoch adds its steps after the first run's lines
expect_ok "$BIN" train "${S[@]}" --algo dpulr --sigma0 1 --copies 4 --batch-size 60 --epochs 2 --ulr-noise controller --out "$T/u" --resume \
  --trace "$T/u.jsonl"
check 'python3 -c "
import json
L = [json.loads(l) for l in open(\"$T/u.jsonl\")]
steps = [r[\"step\"] for r in L if \"step\" in r]
assert steps == list(range(1, 21)) and sum(\"trace\" in r for r in L) == 2, steps
"' "--resume appends to the trace"
harness_end
