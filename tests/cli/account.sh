#!/usr/bin/env bash
# dptrain account: valid runs parse, published values come out, every bad flag exits
# non-zero with the flag named, --json is one valid object with the documented keys,
# and a saved ledger is reported (and a damaged one refused).
set -u
BIN="$1"
fail=0
tmp=$(mktemp -d /tmp/dpt_cli_account_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DPTRAIN_SECRETS_DIR="$tmp/secrets"  # the runs' secret files: under $tmp, not in the home directory

check() { # description, command...
    local desc="$1"; shift
    if ! "$@"; then echo "FAIL: $desc"; fail=1; fi
}

# valid runs
check "table output" bash -c "'$BIN' account --sample-rate 0.004 --sigma 1.1 --steps 15000 | grep -q '^epsilon'"
check "help lists defaults" bash -c "'$BIN' account --help | grep -q 'default: 1e-05'"
check "help states how epochs become steps" bash -c "'$BIN' account --help | grep -q 'steps = E x max(1, round(1/q))'"

# TF Privacy MNIST tutorial: eps 3.01 (classic conversion, its steps = ceil(60 * 60000 / 256))
out=$("$BIN" account --batch-size 256 --dataset-size 60000 --sigma 1.1 --steps 14063 --conversion classic --json)
check "TF Privacy 3.01" python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["steps"] == 14063, d
assert abs(d["epsilon"] - 3.01) < 0.005, d
' "$out"
# --epochs: whole epochs of round(1/q) steps, as training runs them: 60 x round(234.375)
out=$("$BIN" account --batch-size 256 --dataset-size 60000 --sigma 1.1 --epochs 60 --conversion classic --json)
check "--epochs 60 at q = 256/60000 is 14040 steps" python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["steps"] == 14040, d
' "$out"

# --json: exactly one object with the keys
for acct in rdp pld; do
    out=$("$BIN" account --sample-rate 0.004 --sigma 1.1 --steps 15000 --accountant $acct --json)
    check "json keys ($acct)" python3 -c '
import json, sys
d = json.loads(sys.argv[1])
for k in ["accountant", "epsilon", "delta", "sigma", "sample_rate", "steps"]:
    assert k in d, k
assert d["accountant"] == sys.argv[2]
if sys.argv[2] == "rdp":
    assert "order" in d and d["order"] > 1
assert 0 < d["epsilon"] < 3
' "$out" $acct
done

# calibration: the reported sigma meets the target
out=$("$BIN" account --sample-rate 0.004 --epochs 60 --target-epsilon 3 --json)
check "calibration" python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["epsilon"] <= 3.0 and d["epsilon"] > 2.99, d
assert 0.9 < d["sigma"] < 1.1, d
' "$out"

# calibration with --orders uses that grid (issue 18: with TF Privacy's grid it calibrated
# on the default grid and then reported epsilon 10.04 > 10)
TF=1.25,1.5,1.75,2,2.25,2.5,3,3.5,4,4.5,$(seq -s, 5 63),128,256,512
for grid in "$TF" 2,4,8,16,32; do
  out=$("$BIN" account --batch-size 256 --dataset-size 60000 --epochs 60 --target-epsilon 10 --orders "$grid" --json)
  check "calibration on --orders $grid" python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["epsilon"] <= 10.0 and d["epsilon"] > 9.9, d
' "$out"
done

# edge of the order grid is reported
check "edge note" bash -c "'$BIN' account --sample-rate 0.5 --sigma 0.3 --steps 10 --orders 2,3,4 | grep -q 'edge'"

# bad input: exit code 2 and the flag named on one line
bad() { # expected flag, args...
    local flag="$1"; shift
    local err rc
    err=$("$BIN" account "$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 2 ]; then echo "FAIL: '$*' exited $rc, want 2"; fail=1; fi
    if ! printf '%s' "$err" | grep -q -- "$flag"; then echo "FAIL: '$*' error '$err' does not name $flag"; fail=1; fi
    if [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ]; then echo "FAIL: '$*' error is not one line: $err"; fail=1; fi
}
bad --sample-rate --sample-rate 0 --sigma 1 --steps 10
bad --sample-rate --sample-rate 1.5 --sigma 1 --steps 10
bad --sample-rate --sample-rate abc --sigma 1 --steps 10
bad --sigma --sample-rate 0.1 --sigma 0 --steps 10
bad --sigma --sample-rate 0.1 --sigma -2 --steps 10
bad --sigma --sample-rate 0.1 --steps 10
bad --steps --sample-rate 0.1 --sigma 1 --steps 0
bad --steps --sample-rate 0.1 --sigma 1 --steps 1.5
bad --epochs --sample-rate 0.1 --sigma 1 --epochs -3
bad --delta --sample-rate 0.1 --sigma 1 --steps 10 --delta 0
bad --delta --sample-rate 0.1 --sigma 1 --steps 10 --delta 1
bad --accountant --sample-rate 0.1 --sigma 1 --steps 10 --accountant prv
bad --conversion --sample-rate 0.1 --sigma 1 --steps 10 --conversion foo
bad --orders --sample-rate 0.1 --sigma 1 --steps 10 --orders 2,0.5
bad --target-epsilon --sample-rate 0.1 --steps 10 --target-epsilon -1
bad --tolerance --sample-rate 0.1 --sigma 1 --steps 10 --tolerance 0.01
bad --batch-size --batch-size 0 --dataset-size 100 --sigma 1 --steps 10
bad --dataset-size --batch-size 10 --sigma 1 --steps 10
bad --unknown --sample-rate 0.1 --sigma 1 --steps 10 --unknown 3

# damaged ledgers: a hand-edited file fails the checksum, a truncated one the parser;
# both errors name the file.
cat > "$tmp/edited.json" <<'JSON'
{"format": "dptrain-ledger", "version": 1, "adjacency": "add-remove", "total_sgm_steps": 10,
 "meta": {}, "events": [{"type": "sgm", "q": 0.01, "sigma": 1.0, "count": 10}],
 "checksum": "sha256:0000"}
JSON
err=$("$BIN" account --ledger "$tmp/edited.json" 2>&1 >/dev/null); rc=$?
check "edited ledger refused" test $rc -ne 0
check "error names the ledger file" bash -c "printf '%s' \"$err\" | grep -q edited.json"
check "error says checksum" bash -c "printf '%s' \"$err\" | grep -q checksum"
printf '{"format": "dptrain-ledger", "version": 1, "events": [' > "$tmp/truncated.json"
err=$("$BIN" account --ledger "$tmp/truncated.json" 2>&1 >/dev/null); rc=$?
check "truncated ledger refused" test $rc -ne 0
check "truncated error names file" bash -c "printf '%s' \"$err\" | grep -q truncated.json"

# a valid ledger, written here the way the library writes it (checksum = SHA-256 of the
# unformatted canonical JSON without the checksum field): both accountants are reported
# and agree with the direct computation for the same q, sigma and steps.
python3 - "$tmp/run.json" <<'PY'
import hashlib, json, sys
d = {"format": "dptrain-ledger", "version": 1, "adjacency": "add-remove", "total_sgm_steps": 15000,
     "meta": {"run_id": "cli-test"},
     "events": [{"type": "sgm", "q": 0.004, "sigma": 1.1, "count": 15000}]}
canon = json.dumps(d, separators=(",", ":"))
d["checksum"] = "sha256:" + hashlib.sha256(canon.encode()).hexdigest()
open(sys.argv[1], "w").write(json.dumps(d, indent=1) + "\n")
PY
out=$("$BIN" account --ledger "$tmp/run.json" --json); rc=$?
check "ledger accepted" test $rc -eq 0
direct=$("$BIN" account --sample-rate 0.004 --sigma 1.1 --steps 15000 --accountant rdp --json)
direct_pld=$("$BIN" account --sample-rate 0.004 --sigma 1.1 --steps 15000 --accountant pld --json)
direct_def=$("$BIN" account --sample-rate 0.004 --sigma 1.1 --steps 15000 --json)
# the headline is the default accountant's (the smaller bound: PLD here), as training reports
check "ledger report matches direct" python3 -c '
import json, sys
d, r, p, df = (json.loads(a) for a in sys.argv[1:5])
assert d["steps"] == 15000 and d["accountant"] == "pld" and d["epsilon"] == d["epsilon_pld"], d
assert abs(d["epsilon_rdp"] - r["epsilon"]) < 1e-12, (d, r)
assert abs(d["epsilon_pld"] - p["epsilon"]) < 1e-12, (d, p)
assert d["epsilon_pld"] < d["epsilon_rdp"]
assert df["accountant"] == "pld" and df["epsilon"] == p["epsilon"] and df["epsilon_rdp"] == r["epsilon"], df
' "$out" "$direct" "$direct_pld" "$direct_def"
out_rdp=$("$BIN" account --ledger "$tmp/run.json" --accountant rdp --json)
check "ledger report --accountant rdp" python3 -c '
import json, sys
d = json.loads(sys.argv[1]); assert d["accountant"] == "rdp" and d["epsilon"] == d["epsilon_rdp"], d
' "$out_rdp"
check "ledger table shows both" bash -c "'$BIN' account --ledger '$tmp/run.json' | grep -q 'epsilon (PLD)'"

# PLD over 10^12 steps: the loss mass beyond its grid exceeds delta, so no finite epsilon, and
# the note says why (it blamed sigma); RDP bounds the same run
check "PLD at 10^12 steps: inf with the PLD note" bash -c "'$BIN' account --sample-rate 0.01 --sigma 1 --steps 1000000000000 --accountant pld | grep -q 'no finite epsilon from the PLD accountant: over 1000000000000 steps'"
check "RDP at 10^12 steps: finite" bash -c "'$BIN' account --sample-rate 0.01 --sigma 1 --steps 1000000000000 --accountant rdp | grep -qE '^epsilon  *[0-9]'"

if [ $fail -ne 0 ]; then echo "account.sh: FAILED"; exit 1; fi
echo "account.sh: all checks passed"
