#!/usr/bin/env bash
# CLI: normalization and privacy (issue 24, docs/data.md). A private algorithm's checkpoint
# holds no statistic computed from its training data without a matching ledger record:
# a checker independent of the code reads each checkpoint's run record and ledger, fits
# the exact statistics of the training subset itself, and requires that stored statistics
# equal to an exact fit come with norm_unaccounted and the ledger's "epsilon_excludes",
# DP statistics with a "dp-normalize" Gaussian event of the recorded multiplier, public
# ones with the published constants, fixed ones with the given affine map. The default of
# private algorithms is public (none for CSV), of non-private ones scalar; fitted
# statistics with a private algorithm are refused unless --normalize-unaccounted, which
# the epsilon line, metrics.jsonl and the ledger then state; bad combinations are errors
# naming the flag; `dptrain eval` rebuilds the same test inputs for every kind; target
# calibration covers the DP release; a resumed DP run reuses its stored statistics.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
python3 - "$T" <<'PY'
import os, random, struct, sys
random.seed(4)
d = sys.argv[1]
# a named dataset in the MNIST layout (raw IDX): 600 / 200 images of 10 x 10 pixels with a
# class-dependent bright block, so the published constants apply and training learns
os.makedirs(d + "/data/mnist")
for prefix, n in (("train", 600), ("t10k", 200)):
    labels = [i % 10 for i in range(n)]
    with open("%s/data/mnist/%s-images-idx3-ubyte" % (d, prefix), "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 10, 10))
        for c in labels:
            f.write(bytes(min(255, int(random.random() * 60) + (180 if j // 10 == c else 0)) for j in range(100)))
    with open("%s/data/mnist/%s-labels-idx1-ubyte" % (d, prefix), "wb") as f:
        f.write(struct.pack(">II", 2049, n) + bytes(labels))
for name, n in (("tr", 600), ("te", 200)):
    with open("%s/%s.csv" % (d, name), "w") as f:
        f.write("label,a,b,c,d,e,f\n")
        for i in range(n):
            c = i % 3
            f.write("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(3.0, 2.0) + (4.0 if j % 3 == c else 0.0)) for j in range(6))))
PY
cat > "$T/check.py" <<'PY'
# check.py RUN_DIR PRIVATE DATA [AFFINE]: the run's checkpoint against its ledger
import json, math, struct, sys
run_dir, private, data = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
b = open(run_dir + "/checkpoint.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
state = json.loads(json.loads(b[8:8 + n])["__metadata__"]["state"])
run = state["run"]
ledger = json.loads(state["ledger"]) if "ledger" in state else None
def fail(msg):
    print("FAIL %s: %s" % (run_dir, msg)); sys.exit(1)
# the training subset, as the loaders return it
if data.startswith("csv:"):
    rows = [l.split(",") for l in open(data[4:]).read().split("\n")[1:] if l.strip()]
    X = [[float(v) for v in r[1:]] for r in rows][:run["train_examples"]]
else:
    raw = open(data, "rb").read()
    cnt, h, w = struct.unpack(">III", raw[4:16])
    m = run["train_examples"]
    X = [[raw[16 + i * h * w + j] / 255.0 for j in range(h * w)] for i in range(m)]
dim = len(X[0])
def fit(groups):  # population mean and std per contiguous group
    per = dim // groups
    out = []
    for g in range(groups):
        vals = [x[j] for x in X for j in range(g * per, (g + 1) * per)]
        mu = sum(vals) / len(vals)
        sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / len(vals))
        out.append((mu, sd if sd >= 1e-12 else 1.0))
    return out
def same(stored, ref):
    return len(stored) == len(ref) and all(abs(s - r) <= 1e-6 * max(1.0, abs(r)) for s, r in zip(stored, ref))
mean, std = run.get("norm_mean"), run.get("norm_std")
src = run.get("norm_source")
meta = ledger["meta"] if ledger else {}
events = ledger["events"] if ledger else []
exact = False
if mean is not None:
    for groups in (1, dim):
        f = fit(groups)
        if same(mean, [a for a, _ in f]) and same(std, [s for _, s in f]):
            exact = True
if private:
    if ledger is None: fail("a private run without a ledger")
    if exact and not (run.get("norm_unaccounted") is True and "normalization" in meta.get("epsilon_excludes", "")):
        fail("statistics fitted on the training data without a ledger record: %s" % run)
    if src == "dp":
        dp = run["norm_dp"]
        ev = [e for e in events if e["type"] == "gaussian" and e.get("label") == "dp-normalize"]
        if len(ev) != 1 or ev[0]["count"] != 1 or abs(ev[0]["sigma"] / ev[0]["sensitivity"] - dp["multiplier"]) > 1e-12:
            fail("DP statistics without their Gaussian event in the ledger: %s" % events)
        if exact: fail("DP statistics equal the exact fit")
    elif any(e.get("label") == "dp-normalize" for e in events):
        fail("a dp-normalize event without DP statistics")
    if src == "public":
        pub = {"mnist": (0.1307, 0.3081), "fashion-mnist": (0.2860, 0.3530)}[run["dataset"]]
        if not (same(mean, [pub[0]]) and same(std, [pub[1]])): fail("public constants %s %s" % (mean, std))
    if src == "fixed":
        a, s = (float(v) for v in sys.argv[4].split(":"))
        if not (same(mean, [a]) and same(std, [s])): fail("fixed constants %s %s" % (mean, std))
    if src == "none" and mean is not None: fail("statistics stored for none")
    if src == "training-data" and not run.get("norm_unaccounted"): fail("training-data without norm_unaccounted")
    if src not in ("none", "public", "fixed", "dp", "training-data"): fail("unknown source %s" % src)
else:
    if ledger is not None: fail("a non-private run with a ledger")
print("ok %s: %s (%s)" % (run_dir, run["normalize"], src))
PY
# a field of the checkpoint's run record
run_field() {
  $PY -c "import json,struct,sys; b=open(sys.argv[1] + '/checkpoint.safetensors','rb').read(); n=struct.unpack('<Q',b[:8])[0]; print(json.loads(json.loads(b[8:8+n])['__metadata__']['state'])['run'].get(sys.argv[2]))" "$1" "$2"
}
# eval of the checkpoint reports the test loss the run's last epoch reported: same inputs
eval_matches() {
  local dir=$1 want got
  want=$($PY -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['test_loss'])" "$dir/metrics.jsonl")
  got=$("$BIN" eval --checkpoint "$dir/checkpoint.safetensors" --threads 1 --json | $PY -c "import json,sys; print(json.load(sys.stdin)['test_loss'])")
  check "$PY -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 2e-6 * max(1, abs(a)))' '$want' '$got'" \
        "eval of $dir reports test loss $got, training reported $want"
}

CSV=(--dataset "csv:$T/tr.csv,$T/te.csv" --model mlp:6-8-3:relu --epochs 1 --batch-size 60 --threads 1 --no-progress)
DP=(--algo dpsgd --sigma 1.0 --optimizer sgd --lr 0.2 --delta 1e-4)

# ---- refusals, before any data is loaded ----
expect_fail "--normalize-unaccounted" "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize scalar --out "$T/x"
expect_fail "does not cover" "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize feature --out "$T/x"
expect_fail "--normalize-unaccounted" "$BIN" train --algo dpulr --sigma0 1 "${CSV[@]}" --normalize channel --out "$T/x"
expect_fail "--normalize-unaccounted" "$BIN" train --algo dpmac --sigma 1 --loss bce "${CSV[@]}" --normalize scalar --out "$T/x"
expect_fail "no published constants" "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize public --out "$T/x"
expect_fail "--normalize-sigma" "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize dp-scalar --out "$T/x"
expect_fail "--normalize-sigma must be > 0" "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize dp-scalar --normalize-sigma 0 --normalize-clip 5 --out "$T/x"
expect_fail "--normalize-clip" "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize dp-scalar --normalize-sigma 1 --out "$T/x"
expect_fail "--normalize-clip must be > 0" "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize dp-scalar --normalize-sigma 1 --normalize-clip -1 --out "$T/x"
expect_fail "only with --normalize dp-" "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize none --normalize-sigma 1 --out "$T/x"
expect_fail "private algorithms" "$BIN" train --algo sgd "${CSV[@]}" --normalize dp-scalar --normalize-sigma 1 --normalize-clip 9 --out "$T/x"
expect_fail "only for a private algorithm" "$BIN" train --algo sgd "${CSV[@]}" --normalize scalar --normalize-unaccounted --out "$T/x"
expect_fail "only with a fitted" "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize none --normalize-unaccounted --out "$T/x"
NGD=(--algo noisy-gd --eta 0.05 --langevin-sigma 0.05 --model mlp:6-8-3:relu:nobias --dataset "csv:$T/tr.csv,$T/te.csv" --epochs 1 --threads 1)
expect_fail "privacy statement does not cover" "$BIN" train "${NGD[@]}" --normalize scalar --out "$T/x"
expect_fail "no privacy ledger" "$BIN" train "${NGD[@]}" --normalize scalar --normalize-unaccounted --out "$T/x"
expect_fail "no privacy ledger" "$BIN" train "${NGD[@]}" --normalize dp-scalar --normalize-sigma 1 --normalize-clip 9 --out "$T/x"
expect_fail "does not cover" "$BIN" audit --algo dpsgd --dataset "csv:$T/tr.csv,$T/te.csv" --model mlp:6-3 --normalize scalar --population 100 --shadows 0 --out "$T/x"
check '[ ! -e "$T/x" ]' "a refused run created its run directory"

# ---- runs on CSV: private default none, DP with a clip, fitted only when unaccounted ----
expect_ok "$BIN" train "${DP[@]}" "${CSV[@]}" --out "$T/c_auto"
check 'grep -q "normalization: none" <<<"$LAST_OUT"' "a private CSV run's default is not none: $LAST_OUT"
expect_ok "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize dp-feature --normalize-sigma 2 --normalize-clip 60 --out "$T/c_dp"
check 'grep -q "includes the normalization statistics" <<<"$LAST_OUT"' "the DP run does not say its epsilon includes the statistics"
expect_ok "$BIN" train "${DP[@]}" "${CSV[@]}" --normalize scalar --normalize-unaccounted --out "$T/c_un"
check 'grep -q "privacy: epsilon .*this epsilon does NOT cover: normalization statistics" <<<"$LAST_OUT"' \
      "the epsilon line of an unaccounted run does not say what it excludes: $LAST_OUT"
check 'grep -q "\"privacy_excludes\":\"normalization statistics" "$T/c_un/metrics.jsonl"' "metrics.jsonl does not carry the exclusion"
check 'grep -q "\"epsilon_excludes\":.*normalization statistics" "$T/c_un/ledger.json"' "ledger.json does not carry the exclusion"
check '! grep -q "privacy_excludes" "$T/c_dp/metrics.jsonl"' "a DP run's metrics claim an exclusion"
expect_ok "$BIN" account --ledger "$T/c_un/ledger.json"
check 'grep -q "NOT covered     normalization statistics" <<<"$LAST_OUT"' "account --ledger does not say what the epsilon excludes: $LAST_OUT"
expect_ok "$BIN" account --ledger "$T/c_un/ledger.json" --json
check 'grep -q "\"epsilon_excludes\":" <<<"$LAST_OUT"' "account --ledger --json lacks epsilon_excludes: $LAST_OUT"
# eval prints the checkpoint's epsilon: with what it does not cover, in text and JSON
expect_ok "$BIN" eval --checkpoint "$T/c_un/checkpoint.safetensors" --threads 1
check 'grep -q "epsilon .*this epsilon does NOT cover: normalization statistics" <<<"$LAST_OUT"' \
      "eval prints the epsilon of an unaccounted run without what it excludes: $LAST_OUT"
expect_ok "$BIN" eval --checkpoint "$T/c_un/checkpoint.safetensors" --threads 1 --json
check '$PY -c "import json,sys; assert \"normalization statistics\" in json.loads(sys.argv[1])[\"epsilon_excludes\"]" "$LAST_OUT"' \
      "eval --json lacks epsilon_excludes: $LAST_OUT"
expect_ok "$BIN" eval --checkpoint "$T/c_dp/checkpoint.safetensors" --threads 1 --json
check '$PY -c "import json,sys; assert \"epsilon_excludes\" not in json.loads(sys.argv[1])" "$LAST_OUT"' \
      "eval --json of a DP run claims an exclusion: $LAST_OUT"
expect_ok "$BIN" account --ledger "$T/c_dp/ledger.json"
check '! grep -q "NOT covered" <<<"$LAST_OUT"' "account --ledger of a DP run claims an exclusion"
expect_ok "$BIN" train --algo sgd "${CSV[@]}" --out "$T/c_sgd"
check 'grep -q "normalization: scalar statistics of the training split" <<<"$LAST_OUT"' "the non-private default is not scalar"
for r in c_auto c_dp c_un c_sgd; do
  p=1; [ $r = c_sgd ] && p=0
  expect_ok $PY "$T/check.py" "$T/$r" $p "csv:$T/tr.csv"
  eval_matches "$T/$r"
done
# the checker fails a run whose fitted statistics have no ledger record: the non-private run
# checked as if it were private (its statistics are an exact fit and it has no ledger)
expect_fail "FAIL" $PY "$T/check.py" "$T/c_sgd" 1 "csv:$T/tr.csv"

# ---- target calibration covers the DP release ----
expect_ok "$BIN" train --algo dpsgd --target-epsilon 2 --optimizer sgd --lr 0.2 --delta 1e-4 "${CSV[@]}" --epochs 2 --out "$T/t_none"
s_none=$(grep -o "calibrated sigma [0-9.]*" <<<"$LAST_OUT" | awk '{print $3}')
expect_ok "$BIN" train --algo dpsgd --target-epsilon 2 --optimizer sgd --lr 0.2 --delta 1e-4 "${CSV[@]}" --epochs 2 \
  --normalize dp-scalar --normalize-sigma 4 --normalize-clip 60 --out "$T/t_dp"
s_dp=$(grep -o "calibrated sigma [0-9.]*" <<<"$LAST_OUT" | awk '{print $3}')
e_dp=$(grep -o "privacy: epsilon [0-9.]*" <<<"$LAST_OUT" | awk '{print $3}')
check "awk -v a='$s_dp' -v b='$s_none' 'BEGIN { exit !(a > b * 1.01) }'" "calibration ignored the DP release: sigma $s_dp vs $s_none without it"
check "awk -v e='$e_dp' 'BEGIN { exit !(e > 1.98 && e <= 2.0) }'" "calibrated run with the DP release spent epsilon $e_dp, target 2"

# ---- releases before training and --target-epsilon (issue 38.5) ----
# DP statistics at noise multiplier 1 alone spend 4.377 at delta 1e-5 (the default accountant; 4.729 under RDP): with --target-epsilon 3
# (a budget with --sigma, or a calibration without) the run is refused before they are
# computed, with the cost named, and writes nothing (it used to report epsilon 4.729 > 3
# after 0 steps and keep the statistics in a checkpoint)
NRM=(--normalize dp-scalar --normalize-sigma 1 --normalize-clip 60)
for how in "--sigma 1" ""; do
  expect_fail "--target-epsilon 3: the releases before training alone, DP normalization statistics (--normalize dp-scalar, --normalize-sigma 1), spend epsilon 4.377 at delta 1e-05: refused before computing them" \
    "$BIN" train --algo dpsgd $how --target-epsilon 3 --optimizer sgd --lr 0.2 "${CSV[@]}" "${NRM[@]}" --out "$T/pre"
  "$BIN" train --algo dpsgd $how --target-epsilon 3 --optimizer sgd --lr 0.2 "${CSV[@]}" "${NRM[@]}" --out "$T/pre" >/dev/null 2>&1
  rc=$?
  check "[ $rc -eq 2 ] && [ ! -e '$T/pre' ]" "a refused DP-normalized run ($how) exited $rc or left $T/pre: $(ls "$T/pre" 2>&1)"
done
# DP-PCA (dpmac) is a release before training too, and composes with the statistics
expect_fail "the releases before training alone, DP normalization statistics (--normalize dp-scalar, --normalize-sigma 4) and DP-PCA (--pca-sigma 1), spend epsilon" \
  "$BIN" train --algo dpmac --sigma 1 --target-epsilon 3 --pca-dims 3 --pca-sigma 1 "${CSV[@]}" --model mlp:3-8-3:relu \
  --normalize dp-scalar --normalize-sigma 4 --normalize-clip 60 --out "$T/pre"
check "[ ! -e '$T/pre' ]" "a refused DP-PCA run left $T/pre"
# within the target alone (2.78 at multiplier 1.6), but its first step would exceed it: the run
# takes no step and publishes nothing (no checkpoint holding the statistics, no ledger or metrics)
out=$("$BIN" train --algo dpsgd --sigma 0.3 --target-epsilon 3 --optimizer sgd --lr 0.2 "${CSV[@]}" \
  --normalize dp-scalar --normalize-sigma 1.6 --normalize-clip 60 --out "$T/pre0" 2>&1); rc=$?
check "[ $rc -eq 1 ] && [ ! -e '$T/pre0' ] && grep -q 'nothing written: the run took no step' <<<\"\$out\"" \
  "a DP-normalized run that took no step: rc $rc, files $(ls "$T/pre0" 2>&1): $out"

# ---- a named dataset (the MNIST layout made above) ----
IMG="$T/data/mnist/train-images-idx3-ubyte"
M=(--dataset mnist --data-dir "$T/data" --model mlp:100-10 --epochs 1 --batch-size 60 --threads 1 --no-progress)
i=0
while read -r priv kind extra; do
  i=$((i+1))
  if [ "$priv" = 1 ]; then A=("${DP[@]}"); else A=(--algo sgd); fi
  N=(); [ "$kind" != auto ] && N=(--normalize "$kind")
  # shellcheck disable=SC2206
  X=($extra)
  expect_ok "$BIN" train "${A[@]}" "${M[@]}" "${N[@]}" "${X[@]}" --out "$T/m$i"
  aff=; [[ $kind == affine:* ]] && aff=${kind#affine:}
  expect_ok $PY "$T/check.py" "$T/m$i" "$priv" "$IMG" $aff
  eval_matches "$T/m$i"
done <<'RUNS'
1 auto
1 none
1 affine:0.5:0.25
1 dp-scalar --normalize-sigma 2
1 dp-feature --normalize-sigma 2
1 scalar --normalize-unaccounted
1 feature --normalize-unaccounted
0 auto
0 channel
0 feature
0 public
RUNS
check '[ "$(run_field "$T/m1" normalize)" = public ] && [ "$(run_field "$T/m8" normalize)" = scalar ]' \
      "--normalize auto: private $(run_field "$T/m1" normalize), non-private $(run_field "$T/m8" normalize)"
# resume: a secure DP run continues with its stored statistics and one release in the ledger
S=(--algo dpsgd --sigma 1.0 --optimizer sgd --lr 0.2 --delta 1e-4 --secure "${M[@]}" --normalize dp-scalar --normalize-sigma 2)
expect_ok "$BIN" train "${S[@]}" --out "$T/rs"
run_field "$T/rs" norm_mean > "$T/rs_mean1"
expect_ok "$BIN" train "${S[@]}" --epochs 2 --resume --out "$T/rs"
run_field "$T/rs" norm_mean > "$T/rs_mean2"
check 'cmp -s "$T/rs_mean1" "$T/rs_mean2"' "the resumed secure DP run changed its statistics: $(cat "$T/rs_mean1") vs $(cat "$T/rs_mean2")"
check '[ "$(grep -c dp-normalize "$T/rs/ledger.json")" = 1 ]' "the resumed run's ledger does not hold exactly one dp-normalize release"
expect_ok $PY "$T/check.py" "$T/rs" 1 "$IMG"
expect_fail "the checkpoint's run used" "$BIN" train "${DP[@]}" "${M[@]}" --epochs 3 --resume --out "$T/rs"
harness_end
