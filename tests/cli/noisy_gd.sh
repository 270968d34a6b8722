#!/usr/bin/env bash
# CLI: dptrain train --algo noisy-gd (KL estimate, labelled as such, never an epsilon) and
# dptrain account --kl-bound (closed forms) on a tiny CSV made here; every bad flag is one
# clear line naming it.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
python3 - "$T/d.csv" "$T/t.csv" <<'PY'
import random, sys
random.seed(2)
for path, n in ((sys.argv[1], 60), (sys.argv[2], 15)):
    with open(path, "w") as f:
        f.write("label,a,b,c,d\n")
        for i in range(n):
            c = i % 2
            f.write("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(0, 0.5) + (1.0 if j % 2 == c else 0.0)) for j in range(4))))
PY
C=(--dataset "csv:$T/d.csv,$T/t.csv" --normalize none --model mlp:4-8-8-2:relu:nobias --init lecun --threads 1 --no-progress --seed 1)
checks=$((checks+1))
out=$("$BIN" train --algo noisy-gd "${C[@]}" --eta 0.05 --langevin-sigma 0.05 --epochs 4 --out "$T/r" 2>&1)
rc=$?
if [ $rc -ne 0 ] || ! grep -q "NOT an (epsilon, delta) guarantee" <<<"$out" || ! grep -q "no DP guarantee" <<<"$out"; then
  echo "FAIL: noisy-gd run rc=$rc: $out"; fail=$((fail+1)); fi
checks=$((checks+1))
if grep -qi "epsilon [0-9]" <<<"$out"; then echo "FAIL: an epsilon value was printed: $out"; fail=$((fail+1)); fi
checks=$((checks+1))
python3 - "$T/r/metrics.jsonl" "$T/r/kl_candidates.csv" <<'PY' || { echo "FAIL: metrics/candidates"; fail=$((fail+1)); }
import json, sys, csv
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 4, rows
prev = 0
for o in rows:
    assert "epsilon" not in o and "delta" not in o, o
    assert "not an (epsilon, delta) guarantee" in o["kl_note"], o
    for k in ("kl_worst", "kl_remove", "kl_add", "kl_replace", "kl_c", "tv_pinsker_of_estimate"):
        assert k in o, (k, o)
    assert o["kl_worst"] >= prev and o["kl_worst"] == max(o["kl_remove"], o["kl_add"], o["kl_replace"]), o
    prev = o["kl_worst"]
    assert abs(o["kl_c"] - 0.05 / (4 * 0.05 ** 2)) < 1e-12
    assert o["kl_records"] == 60 and o["kl_heldout_records"] == 15, o  # the sizes the estimate is for
cand = list(csv.DictReader(open(sys.argv[2])))
rm = [float(r["kl"]) for r in cand if r["kind"] == "remove"]
ad = [float(r["kl"]) for r in cand if r["kind"] == "add"]
assert len(rm) == 60 and len(ad) == 15, (len(rm), len(ad))
assert abs(max(rm) - rows[-1]["kl_remove"]) <= 1e-6 * rows[-1]["kl_remove"]
PY
# the paper's constant doubles the estimate on the same trajectory
checks=$((checks+1))
"$BIN" train --algo noisy-gd "${C[@]}" --eta 0.05 --langevin-sigma 0.05 --epochs 4 --kl-constant paper --out "$T/p" >/dev/null 2>&1
python3 - "$T/r/metrics.jsonl" "$T/p/metrics.jsonl" <<'PY' || { echo "FAIL: paper constant is not 2x"; fail=$((fail+1)); }
import json, sys
a = json.loads(open(sys.argv[1]).readlines()[-1]); b = json.loads(open(sys.argv[2]).readlines()[-1])
assert abs(b["kl_worst"] - 2 * a["kl_worst"]) <= 1e-9 * b["kl_worst"], (a, b)
PY
# linearized network and a single neighbour kind
checks=$((checks+1))
out=$("$BIN" train --algo noisy-gd "${C[@]}" --eta 0.05 --langevin-sigma 0.05 --epochs 2 --linearized --neighbours remove --out "$T/l" 2>&1)
if [ $? -ne 0 ] || ! grep -q "remove one training record" <<<"$out" || grep -q "add one test record" <<<"$out"; then
  echo "FAIL: linearized remove-only run: $out"; fail=$((fail+1)); fi
# bad flags
expect_fail "needs --langevin-sigma" "$BIN" train --algo noisy-gd "${C[@]}" --out "$T/x"
expect_fail "--langevin-sigma: must be > 0" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0 --out "$T/x"
expect_fail "--langevin-sigma: must be > 0" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma -1 --out "$T/x"
expect_fail "--eta: the step size must be > 0" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0.1 --eta 0 --out "$T/x"
expect_fail "--sampler shuffle" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0.1 --sampler shuffle --out "$T/x"
expect_fail "takes its step size from --eta" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0.1 --lr 0.5 --out "$T/x"
expect_fail "plain gradient descent" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0.1 --optimizer sgd --momentum 0.9 --out "$T/x"
expect_fail "constant step size" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0.1 --lr-schedule exp:0.9 --out "$T/x"
expect_fail "--neighbours: expected" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0.1 --neighbours remove,some --out "$T/x"
expect_fail "--kl-constant: expected" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0.1 --kl-constant half --out "$T/x"
expect_fail "--replace-candidates" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0.1 --replace-candidates 0 --out "$T/x"
expect_fail "does not checkpoint" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0.1 --resume --out "$T/r"
expect_fail "not a differentially private" "$BIN" train --algo noisy-gd "${C[@]}" --langevin-sigma 0.1 --sigma 1 --out "$T/x"
expect_fail "option of --algo noisy-gd" "$BIN" train --algo sgd "${C[@]}" --langevin-sigma 0.1 --out "$T/x"

# account --kl-bound
checks=$((checks+1))
python3 - "$("$BIN" account --kl-bound --init he --input-dim 3072 --outputs 2 --width 1024 --depth 10 --steps 50 --eta 0.01 --sigma 0.01 --dataset-size 10000 --json)" <<'PY' || { echo "FAIL: kl-bound json"; fail=$((fail+1)); }
import json, sys
o = json.loads(sys.argv[1])
assert abs(o["B"] - 2 * 1024 * (9 + 3072 / 1024)) < 1e-6, o       # Table 1, He: o m (L - 1 + d/m)
T = 0.5
assert abs(o["kl_bound_paper"] - 2 * o["B"] * T / (1e8 * 1e-4)) < 1e-9, o
assert abs(o["kl_bound"] - 2 * o["B"] * T / (1e8 * 1e-4)) < 1e-9, o  # r = 2 with the exact constant
assert "not an (epsilon, delta) guarantee" in o["note"] and "epsilon" not in o
PY
checks=$((checks+1))
out=$("$BIN" account --kl-bound --init lecun --input-dim 10 --outputs 1 --width 10 --depth 3)
grep -q "B (Eq. 7)       7.5" <<<"$out" || { echo "FAIL: lecun B: $out"; fail=$((fail+1)); }  # 1*10*(2+1)/4
expect_fail "--depth: must be >= 2" "$BIN" account --kl-bound --init he --input-dim 10 --outputs 1 --width 10 --depth 1
expect_fail "--init: required" "$BIN" account --kl-bound --input-dim 10 --outputs 1 --width 10 --depth 3
expect_fail "unknown initialization" "$BIN" account --kl-bound --init orthogonal --input-dim 10 --outputs 1 --width 10 --depth 3
expect_fail "--width: required" "$BIN" account --kl-bound --init he --input-dim 10 --outputs 1 --depth 3
expect_fail "give all four" "$BIN" account --kl-bound --init he --input-dim 10 --outputs 1 --width 10 --depth 3 --steps 5
expect_fail "--sigma: must be > 0" "$BIN" account --kl-bound --init he --input-dim 10 --outputs 1 --width 10 --depth 3 --steps 5 --eta 0.1 --sigma 0 --dataset-size 9
expect_fail "--eta: must be > 0" "$BIN" account --kl-bound --init he --input-dim 10 --outputs 1 --width 10 --depth 3 --steps 5 --eta -1 --sigma 1 --dataset-size 9
harness_end
