#!/usr/bin/env bash
# CLI: dptrain train --algo dpsgd on a CSV made here. Impossible settings are errors naming
# the flag; a run writes epsilon/epsilon_pld/delta per epoch and ledger.json; --resume
# continues the ledger and refuses a different sigma/q unless allowed (then recorded);
# --target-epsilon calibrates or stops; and SIGKILL at random points never leaves a
# ledger on disk with fewer steps than the checkpoint's parameters reflect.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
python3 - "$T/d.csv" <<'PY'
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as f:
    f.write("label,a,b,c,d\n")
    for i in range(3000):
        c = i % 3
        f.write("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(0, 0.5) + (2.0 if j % 3 == c else 0.0)) for j in range(4))))
PY
C=(--algo dpsgd --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --threads 1 --no-progress --optimizer sgd --lr 0.5)

expect_fail "--clip" "$BIN" train "${C[@]}" --sigma 1 --clip 0 --out "$T/x"
expect_fail "--sigma" "$BIN" train "${C[@]}" --sigma 0 --out "$T/x"
expect_fail "--clip" "$BIN" train "${C[@]}" --sigma 1 --clip -2 --out "$T/x"
expect_fail "--sigma" "$BIN" train "${C[@]}" --sigma -0.5 --out "$T/x"
expect_fail "--sample-rate" "$BIN" train "${C[@]}" --sigma 1 --sample-rate 1.5 --out "$T/x"
expect_fail "--sample-rate" "$BIN" train "${C[@]}" --sigma 1 --sample-rate 0 --out "$T/x"
expect_fail "--batch-size" "$BIN" train "${C[@]}" --sigma 1 --batch-size 5000 --out "$T/x"
expect_fail "--force" "$BIN" train "${C[@]}" --sigma 1 --delta 0.001 --out "$T/x"
expect_fail "--sigma or --target-epsilon" "$BIN" train "${C[@]}" --out "$T/x"
expect_fail "--sampler poisson" "$BIN" train "${C[@]}" --sigma 1 --sampler full --out "$T/x"
# --sampler shuffle: the paper-reproduction mode, said NOT accounted, with no ledger or epsilon
expect_fail "--sampler shuffle" "$BIN" train "${C[@]}" --target-epsilon 1 --sampler shuffle --out "$T/x"
expect_fail "--sampler shuffle" "$BIN" train "${C[@]}" --sigma 1 --sampler shuffle --adaptive-clip 0.5 --out "$T/x"
expect_ok "$BIN" train "${C[@]}" --sigma 1 --sampler shuffle --batch-size 60 --epochs 1 --out "$T/shuf"
check 'grep -q "NOT ACCOUNTED" <<<"$LAST_OUT" && ! grep -q "epsilon [0-9]" <<<"$LAST_OUT"' "shuffle run not labelled: $LAST_OUT"
check '[ ! -e "$T/shuf/ledger.json" ] && grep -q "non-accounted" "$T/shuf/metrics.jsonl" && ! grep -q "\"epsilon" "$T/shuf/metrics.jsonl"' "shuffle run has a ledger or an epsilon"
expect_fail "--clip-mode" "$BIN" train "${C[@]}" --sigma 1 --clip-mode layer --out "$T/x"

# a run: notice, epsilon per epoch, ledger sidecar
expect_ok "$BIN" train "${C[@]}" --sigma 1.2 --batch-size 60 --epochs 2 --out "$T/run"
# a classifier's epoch lines give the test accuracy (a merge once printed a perplexity there)
check '[ "$(grep -Ec "^epoch [12]/2 .* test loss [0-9.]+  test acc [0-9.]+%  epsilon" <<<"$LAST_OUT")" = 2 ] &&
       ! grep -q perplexity <<<"$LAST_OUT"' "epoch lines without the test accuracy: $LAST_OUT"
check 'grep -q "seed drawn from the OS" <<<"$LAST_OUT"' "OS-seed notice missing"
check '! grep -q "SEEDED" <<<"$LAST_OUT"' "an OS-seeded run called seeded"
check '[ "$(stat -c %a "$(secret_of "$T/run")")" = 600 ] && ! grep -q "\"seed\"" "$T/run/checkpoint.safetensors" "$T/run/ledger.json" "$T/run/metrics.jsonl"' "the seed is outside the secret file"
# the secret lives outside the run directory (which can then be shared), and the run says where
check '[ ! -e "$T/run/dptrain.secret" ] && grep -q "^secret: $(secret_of "$T/run")  (--resume needs it" <<<"$LAST_OUT"' \
  "the run directory holds its secret, or the run does not say where it is: $LAST_OUT"
# a chosen seed is labelled: the start, the final privacy line, the ledger (account), metrics
expect_ok "$BIN" train "${C[@]}" --sigma 1.2 --batch-size 60 --epochs 1 --seed 77 --out "$T/seeded"
check 'grep -q "SEEDED run (--seed 77)" <<<"$LAST_OUT" && grep -q "privacy: .*SEEDED run" <<<"$LAST_OUT"' "seeded run not labelled in the output"
check 'grep -q "\"seed_source\":\"caller\"" "$T/seeded/metrics.jsonl"' "seeded run not labelled in metrics"
# nothing in the published directory holds the seed; the secret file does
expect_ok "$BIN" train "${C[@]}" --sigma 1.2 --batch-size 60 --epochs 1 --seed 90817263544 --out "$T/seeded2"
check '! grep -rq "90817263544" "$T/seeded2" && ! grep -rq "sampler_rng" "$T/seeded2" && [ ! -e "$T/seeded2/dptrain.secret" ] &&
       grep -q "\"seed\":\"90817263544\"" "$(secret_of "$T/seeded2")"' \
  "a seeded run's directory holds the seed or the streams' state (or its secret file does not hold the seed)"
expect_ok "$BIN" account --ledger "$T/seeded/ledger.json"
check 'grep -q "chosen by the caller" <<<"$LAST_OUT"' "account --ledger does not label a seeded run"
expect_ok "$BIN" account --ledger "$T/run/ledger.json" --json
check 'grep -q "\"seed_source\":[ ]*\"os\"" <<<"$LAST_OUT"' "account --json lacks seed_source"
check 'grep -q "epsilon" <<<"$LAST_OUT"' "epsilon not printed"
check 'python3 -c "
import json,sys
ls=[json.loads(l) for l in open(\"$T/run/metrics.jsonl\")]
assert len(ls)==2 and all(\"epsilon\" in l and \"epsilon_pld\" in l and l[\"delta\"]==1e-5 for l in ls)
assert ls[1][\"epsilon\"]>ls[0][\"epsilon\"]>0
l=json.load(open(\"$T/run/ledger.json\")); assert l[\"total_sgm_steps\"]==100, l[\"total_sgm_steps\"]
"' "metrics epsilon keys or ledger steps wrong"
# eval reads the checkpoint's ledger: the run's last epsilon at the same delta
expect_ok "$BIN" eval --checkpoint "$T/run/checkpoint.safetensors" --json
check 'python3 -c "
import json,sys
e=json.loads(sys.argv[1]); m=[json.loads(l) for l in open(\"$T/run/metrics.jsonl\")][-1]
assert e[\"steps\"]==100 and e[\"delta\"]==1e-5 and e[\"epsilon\"]==m[\"epsilon\"], (e, m)
assert e[\"accountant\"] == m[\"accountant\"] == \"pld\", (e, m)
" "$LAST_OUT"' "eval epsilon differs from the run's (bit for bit), or names no accountant"
# a checkpoint path with a quote and a backslash: still one valid JSON object naming it
q="$T/we\"ird\\dir"
mkdir -p "$q" && cp "$T/run/"* "$q/"
expect_ok "$BIN" eval --checkpoint "$q/checkpoint.safetensors" --json
check 'python3 -c "
import json,sys
e=json.loads(sys.argv[1]); assert e[\"checkpoint\"]==sys.argv[2], e
" "$LAST_OUT" "$q/checkpoint.safetensors"' "eval --json of a quoted path is not valid JSON naming it: $LAST_OUT"
expect_fail "--delta must be in (0, 1)" "$BIN" eval --checkpoint "$T/run/checkpoint.safetensors" --delta 0
# a damaged checkpoint beside an intact ledger: the ledger is still reported, with a warning
mkdir -p "$T/corrupt" && cp "$T/run/ledger.json" "$T/run/checkpoint.safetensors" "$T/corrupt/"
python3 -c "
import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-5]^=0xff; open(p,'wb').write(b)" "$T/corrupt/checkpoint.safetensors"
expect_ok "$BIN" account --ledger "$T/corrupt/ledger.json"
check 'grep -q "warning: could not check that .*ledger.json belongs to the checkpoint" <<<"$LAST_OUT" &&
  grep -q "^epsilon" <<<"$LAST_OUT"' "a damaged checkpoint hid its intact ledger: $LAST_OUT"
# resume continues the ledger; mismatch refused, then allowed and recorded
expect_ok "$BIN" train "${C[@]}" --sigma 1.2 --batch-size 60 --epochs 3 --out "$T/run" --resume
check 'python3 -c "import json; assert json.load(open(\"$T/run/ledger.json\"))[\"total_sgm_steps\"]==150"' "ledger did not continue"
expect_fail "--allow-ledger-mismatch\|allow_ledger_mismatch" "$BIN" train "${C[@]}" --sigma 2 --batch-size 60 --epochs 4 --out "$T/run" --resume
expect_fail "--sample-rate\|sample_rate" "$BIN" train "${C[@]}" --sigma 1.2 --batch-size 30 --epochs 4 --out "$T/run" --resume
expect_ok "$BIN" train "${C[@]}" --sigma 2 --batch-size 60 --epochs 4 --out "$T/run" --resume --allow-ledger-mismatch
check 'python3 -c "
import json; l=json.load(open(\"$T/run/ledger.json\"))
assert l[\"total_sgm_steps\"]==200 and \"sigma was 1.2\" in l[\"meta\"][\"mismatch_allowed_at_step_150\"], l
"' "allowed mismatch not recorded"
# budgets
expect_ok "$BIN" train "${C[@]}" --target-epsilon 2 --batch-size 60 --epochs 3 --out "$T/cal"
check 'grep -q "calibrated sigma" <<<"$LAST_OUT" && python3 -c "
import json; l=[json.loads(x) for x in open(\"$T/cal/metrics.jsonl\")]; assert len(l)==3 and l[-1][\"epsilon\"]<=2.0, l[-1]"' "calibration"
# sigma 1.5: one step costs 0.46, 50 epochs 3.5: the budget stops the run part-way
expect_ok "$BIN" train "${C[@]}" --sigma 1.5 --target-epsilon 1 --batch-size 60 --epochs 50 --out "$T/stop"
check 'grep -q "stopping before step" <<<"$LAST_OUT" && python3 -c "
import json; l=[json.loads(x) for x in open(\"$T/stop/metrics.jsonl\")]; assert l and l[-1][\"epsilon\"]<=1.0, l[-1:]"' \
  "budget stop not announced, or no epoch before it: $LAST_OUT"

# "epochs" means one thing (issue 38.7): N = 1000, B = 385, 10 epochs is 10 round(1/q) = 30
# steps for `account --epochs` as for training (account said ceil(10 / 0.385) = 26 steps,
# epsilon 15.08, while the run took 30, 16.23), with the same epsilon bit for bit; and
# --target-epsilon calibrates the sigma `account --target-epsilon --epochs` prints
E=(--batch-size 385 --max-train 1000 --epochs 10)
expect_ok "$BIN" train "${C[@]}" "${E[@]}" --sigma 1 --out "$T/ep"
acct=$("$BIN" account --batch-size 385 --dataset-size 1000 --sigma 1 --epochs 10 --json)
check 'python3 -c "
import json, sys
a = json.loads(sys.argv[1]); m = [json.loads(l) for l in open(\"$T/ep/metrics.jsonl\")][-1]
l = json.load(open(\"$T/ep/ledger.json\"))
assert a[\"steps\"] == 30 == m[\"step\"] == l[\"total_sgm_steps\"], (a, m[\"step\"], l[\"total_sgm_steps\"])
assert a[\"epsilon\"] == m[\"epsilon\"], (a, m)
" "$acct"' "account --epochs 10 and a 10-epoch run disagree on steps or epsilon: $acct"
expect_ok "$BIN" train "${C[@]}" "${E[@]}" --target-epsilon 8 --out "$T/ep_cal"
acct=$("$BIN" account --batch-size 385 --dataset-size 1000 --target-epsilon 8 --epochs 10 --json)
check 'python3 -c "
import json, re, sys
a = json.loads(sys.argv[1]); s = re.search(r\"calibrated sigma (\\S+) .* of 3 steps\", sys.argv[2]).group(1)
assert s == \"%.6g\" % a[\"sigma\"] and a[\"steps\"] == 30, (s, a)
assert json.load(open(\"$T/ep_cal/ledger.json\"))[\"total_sgm_steps\"] == 30
" "$acct" "$LAST_OUT"' "train --target-epsilon and account --target-epsilon calibrate differently: $acct"
expect_fail "--epochs: 2.5 is not a whole number" "$BIN" account --batch-size 385 --dataset-size 1000 --sigma 1 --epochs 2.5

# SIGKILL at random points: the ledger on disk never records fewer steps than the
# checkpoint's parameters reflect (the sidecar is written before the checkpoint)
K=(--algo dpsgd --dataset "csv:$T/d.csv" --model mlp:4-64-64-3:relu --threads 1 --no-progress --sigma 1 --batch-size 3 --epochs 40 --out "$T/kill")
for i in $(seq 1 8); do
  "$BIN" train "${K[@]}" $([ -f "$T/kill/checkpoint.safetensors" ] && echo --resume) >/dev/null 2>&1 &
  pid=$!
  sleep 0.$((RANDOM % 9 + 1))
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  if [ -f "$T/kill/checkpoint.safetensors" ]; then
    check 'python3 - "$T/kill" <<PY
import json, re, struct, sys
d = sys.argv[1]
raw = open(d + "/checkpoint.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = raw[8:8 + n].decode()
step = int(re.search(r"\\\\\"step\\\\\":\\\\\"(\d+)", hdr).group(1))
led = json.load(open(d + "/ledger.json"))["total_sgm_steps"]
assert led >= step, (led, step)
PY' "kill $i: ledger.json records fewer steps than the checkpoint"
  fi
done

# --secure: OS-seeded noise and batches, lattice noise accounted with the rounding's
# sensitivity; a secure run resumes (fresh OS streams) and continues its ledger
expect_ok "$BIN" train "${C[@]}" --sigma 1.2 --batch-size 60 --epochs 1 --secure --out "$T/sec"
check 'grep -q "secure mode: OS-seeded" <<<"$LAST_OUT"' "secure-mode notice missing"
check 'grep -q "accounted as sigma 1.1" <<<"$LAST_OUT"' "secure run does not report the accounted sigma"
check '! grep -q "NOT the secure mode" <<<"$LAST_OUT"' "secure run claims to be reproducible"
expect_ok "$BIN" train "${C[@]}" --sigma 1.2 --batch-size 60 --epochs 2 --secure --resume --out "$T/sec"
check 'python3 -c "
import json
l=json.load(open(\"$T/sec/ledger.json\")); assert l[\"total_sgm_steps\"]==100, l[\"total_sgm_steps\"]
"' "secure resume did not continue the ledger to 100 steps"
expect_ok "$BIN" train "${C[@]}" --target-epsilon 2 --batch-size 60 --epochs 1 --secure --out "$T/sec2"
check 'grep -q "lattice rounding raises the sensitivity" <<<"$LAST_OUT"' "secure calibration does not explain the sigma"
check 'grep -Eq "privacy: epsilon (2|1\.99)[0-9]* \(PLD; RDP" <<<"$LAST_OUT"' "secure calibration misses the target epsilon 2 (default accountant)"

harness_end
