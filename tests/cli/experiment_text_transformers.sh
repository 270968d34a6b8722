#!/usr/bin/env bash
# experiments/text_transformers/run.sh --smoke end to end (issue 39 item 5): the learning-rate
# search on the validation files, the final runs with the chosen rates (the lowest validation
# loss at each level), runs.csv rows whose private epsilons are at most the target and whose
# perplexity is exp(test loss), the ViT row with its EMA accuracy (when CIFAR-10 is there),
# the summary, the plot, and --summary-only rebuilding the same summary from the rows.
# Exits 77 without the Debian package fortunes.
set -u
BIN=$1
[ -d /usr/share/games/fortunes ] || { echo "SKIP: /usr/share/games/fortunes missing (apt-get install fortunes)"; exit 77; }
# the data preparation tokenizes through the Python package, which loads the build's library
# into the Python interpreter: an ASan build's cannot be (its runtime must come first); the
# plain build's run of this test covers the script
if [ -n "${DPT_SANITIZED:-}" ] || nm -D "$BIN" 2>/dev/null | grep -q __asan_init; then
    echo "SKIP: a sanitizer build (the experiment loads the library into Python)"; exit 77
fi
source "$(dirname "$0")/lib/harness.sh"
SRC=${DPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
DATA_DIR=${DPT_SHARED_DATASETS:-/nonexistent}
expect_ok env DPTRAIN="$BIN" DATA_DIR="$DATA_DIR" THREADS=1 bash "$SRC/experiments/text_transformers/run.sh" --smoke "$T/out"
[ $fail -eq 0 ] || { harness_end; exit 1; }
VIT=0; [ -d "$DATA_DIR/cifar10" ] && VIT=1
python3 - "$T/out" "$VIT" <<'PY' || fail=$((fail+1))
import csv, math, os, sys
out, vit = sys.argv[1], sys.argv[2] == "1"
runs = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
search = list(csv.DictReader(open(os.path.join(out, "search.csv"))))
keys = [(r["task"], r["privacy"]) for r in runs]
want = [("topic", "nonprivate"), ("topic", "eps3"), ("lm", "nonprivate"), ("lm", "eps3")] + ([("vit", "eps3")] if vit else [])
assert keys == want, keys
assert len(search) == 8 and all(r["phase"] == "search" for r in search), search
assert all("val.csv" in r["dataset"] for r in search), [r["dataset"] for r in search]
for r in runs:
    assert r["phase"] == "final" and float(r["cpu_seconds"]) > 0 and int(r["steps"]) > 0, r
    if r["privacy"] == "eps3":
        assert 2.5 < float(r["epsilon"]) <= 3.0 and float(r["sigma"]) > 0, r
    else:
        assert r["epsilon"] == "" and r["sigma"] == "", r
    if r["task"] == "lm":
        assert abs(float(r["test_perplexity"]) - math.exp(float(r["test_loss"]))) <= 1e-3 * float(r["test_perplexity"]), r
        assert r["test_accuracy"] == "" and r["dataset"] == "lm_train.csv+lm_test.csv", r
    else:
        assert 0.0 <= float(r["test_accuracy"]) <= 100.0 and r["test_perplexity"] == "", r
    # the final run's lr is the search's lowest validation loss at its level
    lvl = "nonprivate" if r["privacy"] == "nonprivate" else "eps3"
    cand = [s for s in search if s["task"] == r["task"] and s["privacy"] == lvl]
    if cand:
        assert r["lr"] == min(cand, key=lambda s: float(s["test_loss"]))["lr"], (r, cand)
if vit:
    v = [r for r in runs if r["task"] == "vit"][0]
    assert 0.0 <= float(v["test_accuracy_ema"]) <= 100.0 and v["model"] == "vit_cifar", v
s = list(csv.DictReader(open(os.path.join(out, "summary.csv"))))
assert [(r["task"], r["privacy"]) for r in s] == want, s
assert all(r["seeds"] == "1" for r in s) and s[2]["metric"] == "test_perplexity", s
print("ok: %d runs, %d search runs" % (len(runs), len(search)))
PY
cp "$T/out/summary.csv" "$T/first.csv"
expect_ok env DPTRAIN="$BIN" bash "$SRC/experiments/text_transformers/run.sh" --smoke --summary-only "$T/out"
check 'cmp -s "$T/first.csv" "$T/out/summary.csv"' "--summary-only changed summary.csv: $(diff "$T/first.csv" "$T/out/summary.csv")"
if command -v gnuplot >/dev/null; then
  check '[ -s "$T/out/text_transformers.png" ]' "no plot"
fi
harness_end
