#!/usr/bin/env bash
# CLI: dptrain train --algo noisy-gd --runs R. R = 3 runs with --seed 5 must be exactly the
# single runs with --seed 5, 6, 7 (written to OUT/run1..3), and OUT/metrics.jsonl must carry
# per epoch the mean and sample standard deviation over those three single runs of each
# run's worst-case KL per neighbour kind, computed here independently from the single runs'
# own metrics; the last epoch's worst_of_mean from their kl_candidates.csv.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
python3 - "$T/d.csv" "$T/t.csv" <<'PY'
import random, sys
random.seed(3)
for path, n in ((sys.argv[1], 40), (sys.argv[2], 12)):
    with open(path, "w") as f:
        f.write("label,a,b,c,d\n")
        for i in range(n):
            c = i % 2
            f.write("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(0, 0.5) + (1.0 if j % 2 == c else 0.0)) for j in range(4))))
PY
C=(--dataset "csv:$T/d.csv,$T/t.csv" --normalize none --model mlp:4-8-8-2:relu:nobias --init lecun --threads 1
   --no-progress --algo noisy-gd --eta 0.05 --langevin-sigma 0.05 --epochs 3 --replace-candidates 2)
expect_ok "$BIN" train "${C[@]}" --runs 3 --seed 5 --out "$T/agg"
out3=$LAST_OUT
check 'grep -q "over 3 runs (seeds 5..7)" <<<"$out3"' "no summary line over 3 runs: $out3"
check 'grep -q "NOT an (epsilon, delta) guarantee" <<<"$out3"' "the per-run KL report lost its label: $out3"
check '! grep -qi "epsilon [0-9]" <<<"$out3"' "an epsilon value was printed: $out3"
check 'grep -q "checkpoint: $T/agg/run1/checkpoint.safetensors" <<<"$out3"' "checkpoint path is not run 1's: $out3"
for s in 5 6 7; do expect_ok "$BIN" train "${C[@]}" --seed $s --out "$T/s$s"; done
checks=$((checks+1))
python3 - "$T" <<'PY' || { echo "FAIL: aggregate differs from the single runs"; fail=$((fail+1)); }
import csv, json, math, sys
T = sys.argv[1]
load = lambda p: [json.loads(l) for l in open(p) if l.strip()]
single = [load("%s/s%d/metrics.jsonl" % (T, s)) for s in (5, 6, 7)]
agg = load(T + "/agg/metrics.jsonl")
assert len(agg) == 3 and all(len(r) == 3 for r in single), (len(agg), [len(r) for r in single])
kinds = ("kl_worst", "kl_remove", "kl_add", "kl_replace", "test_accuracy", "train_loss")
# run k of the aggregate run is the single run with seed 5 + k - 1, bit for bit
for k, s in enumerate((5, 6, 7)):
    rk = load("%s/agg/run%d/metrics.jsonl" % (T, k + 1))
    for a, b in zip(rk, single[k]):
        for key in kinds:
            assert a[key] == b[key], (k, key, a[key], b[key])
def close(a, b):
    return abs(a - b) <= 1e-12 + 1e-12 * abs(b)
for e in range(3):
    o = agg[e]
    assert o["epoch"] == e + 1 and o["runs"] == 3 and o["seed_first"] == "5", o
    assert "epsilon" not in o and "not an (epsilon, delta) guarantee" in o["kl_note"], o
    for key in kinds:
        v = [r[e][key] for r in single]
        mean = sum(v) / 3
        sd = math.sqrt(sum((x - mean) ** 2 for x in v) / 2)     # sample std, R - 1
        assert close(o[key + "_mean"], mean), (e, key, o[key + "_mean"], mean)
        assert close(o[key + "_std"], sd), (e, key, o[key + "_std"], sd)
    # the three runs differ (fresh init and noise), so the std is not trivially 0
    assert o["kl_worst_std"] > 0, o
# worst_of_mean: max over candidates of the mean over runs (last epoch only)
for kind, key in (("remove", "record"), ("add", "heldout")):
    sums = {}
    for s in (5, 6, 7):
        for r in csv.DictReader(open("%s/s%d/kl_candidates.csv" % (T, s))):
            if r["kind"] == kind:
                sums[int(r[key])] = sums.get(int(r[key]), 0.0) + float(r["kl"]) / 3
    arg = max(sums, key=lambda i: sums[i])
    name = "kl_" + kind + "_worst_of_mean"
    assert abs(agg[-1][name] - sums[arg]) <= 1e-7 * sums[arg], (kind, agg[-1][name], sums[arg])
    assert agg[-1][name + ("_record" if kind == "remove" else "_heldout_record")] == arg, (kind, arg, agg[-1])
    assert name not in agg[0]
    # the mean of the per-run worst is never below the worst of the mean
    assert agg[-1][name] <= agg[-1]["kl_" + kind + "_mean"] * (1 + 1e-7)
PY
# without the estimator: only the loss/accuracy aggregate, no kl keys
expect_ok "$BIN" train "${C[@]}" --runs 2 --neighbours none --out "$T/none"
checks=$((checks+1))
python3 - "$T/none/metrics.jsonl" <<'PY' || { echo "FAIL: --neighbours none aggregate"; fail=$((fail+1)); }
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3 and all("test_accuracy_mean" in o and not any(k.startswith("kl_") for k in o) for o in rows), rows
PY
expect_fail "--runs: must be in" "$BIN" train "${C[@]}" --runs 0 --out "$T/x"
expect_fail "does not checkpoint" "$BIN" train "${C[@]}" --runs 2 --resume --out "$T/agg"
expect_fail "option of --algo noisy-gd" "$BIN" train --algo sgd --dataset "csv:$T/d.csv,$T/t.csv" --runs 2 --out "$T/x"
# --overwrite with one run removes the run<k> directories, and their runs' secret files
# (outside them), not the secrets of other runs
sec2=$(secret_of "$T/agg/run2"); sec3=$(secret_of "$T/agg/run3"); sec5=$(secret_of "$T/s5")
check '[ -f "$sec2" ] && [ -f "$sec3" ]' "run 2 and 3 have no secret files"
expect_ok "$BIN" train "${C[@]}" --out "$T/agg" --overwrite
check '[ ! -e "$T/agg/run2" ] && [ ! -e "$sec2" ] && [ ! -e "$sec3" ] && [ -f "$sec5" ]' \
  "--overwrite left run 2's or run 3's secret file, or removed another run's: $LAST_OUT"
harness_end
