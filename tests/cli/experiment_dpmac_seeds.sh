#!/usr/bin/env bash
# The smoke configuration of experiments/dpmac/seeds.sh (the authors' presets, tiny sizes:
# a USPS autoencoder row and a second-order MNIST row, two seeds each): one CSV line per
# run with finite epsilons and metrics, summary.csv whose mean and sample std equal those
# recomputed here from results.csv, both plots; a second call adds nothing (runs are reused);
# summarize_seeds.py's row filter keeps only the rows it matches; splice_tables.py copies
# the tables into a document between their markers; cells_usps_table1b.md holds both
# columns of Table 1b with the epsilon-inf cells.
set -u
BIN=$1
NEED_DATASETS="mnist usps"
source "$(dirname "$0")/lib/experiment_shared.sh"
ROOT=$SRC DATA=$D
if ! DPTRAIN=$BIN DATA_DIR=$DATA bash "$ROOT/experiments/dpmac/seeds.sh" --smoke "$T/out" > "$T/log" 2>&1; then
  cat "$T/log"; echo "FAIL: seeds.sh --smoke failed"; exit 1
fi
python3 - "$T/out" <<'PY' || exit 1
import csv, math, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(out + "/results.csv")))
assert [(r["row"], r["seed"]) for r in rows] == [("smoke-usps", "1"), ("smoke-usps", "2"),
                                                   ("smoke-order2", "1"), ("smoke-order2", "2")], rows
for r in rows:
    assert math.isfinite(float(r["value"])) and 0 < float(r["eps_rdp"]) < 20, r
    assert float(r["eps_pld"]) <= float(r["eps_rdp"]) + 1e-9, r
summ = {s["row"]: s for s in csv.DictReader(open(out + "/summary.csv"))}
for name in ("smoke-usps", "smoke-order2"):
    v = [float(r["value"]) for r in rows if r["row"] == name]
    s = summ[name]
    assert abs(float(s["value_mean"]) - statistics.mean(v)) < 1e-4, (s, v)
    assert abs(float(s["value_std"]) - statistics.stdev(v)) < 1e-4, (s, v)
print("ok")
PY
for f in mnist.png usps.png; do
  [ -s "$T/out/$f" ] || { echo "FAIL: $f missing"; exit 1; }
done
# a row filter (full match) keeps only the rows it names: smoke-usps, not smoke-order2
mkdir -p "$T/filt"
python3 "$ROOT/experiments/dpmac/summarize_seeds.py" "$T/out/results.csv,$T/out/results.csv" "$T/filt" 'smoke-u.*' || exit 1
python3 - "$T/filt/summary.csv" <<'PY' || { echo "FAIL: the row filter of summarize_seeds.py"; exit 1; }
import csv, sys
s = list(csv.DictReader(open(sys.argv[1])))
assert [r["row"] for r in s] == ["smoke-usps"] and s[0]["seeds"] == "1 2 1 2", s
PY
# cells_mnist.md, cells_usps.md (Tables 1a / 1b cell by cell) from a hand-made results.csv:
# mean +- sample std, the difference in points, the verdicts, rows not run
mkdir -p "$T/cells"
python3 - "$T/cells" <<'PY' || { echo "FAIL: results.csv for cells"; exit 1; }
import sys
d = sys.argv[1]
hdr = "row,seed,task,paper_eps,paper_value,metric,sigma,eps_rdp,eps_pld,eps_paper_accounting,value,best_epoch_value,seconds,command"
rows = [("mnist-calib-eps8", 1, "mnist", 8, "0.97", "accuracy", 0.8, 8, 7.2, 10, 0.962, 0.962),
        ("mnist-calib-eps8", 2, "mnist", 8, "0.97", "accuracy", 0.8, 8, 7.2, 10, 0.966, 0.966),
        ("mnist-center-eps8", 1, "mnist", 8, "0.97", "accuracy", 0.8, 8, 7.2, 10, 0.968, 0.968),
        ("mnist-calib-eps2", 1, "mnist", 2, "0.95", "accuracy", 1.7, 2, 1.8, 3, 0.9440, 0.9440),
        ("usps-preset-eps8", 1, "usps", 8, "8.4", "mse", 1.8, 6.9, 6.4, "", 7.0, 7.0),
        ("usps-preset-eps8", 2, "usps", 8, "8.4", "mse", 1.8, 6.9, 6.4, "", 7.5, 7.5),
        ("usps-preset-eps1", 1, "usps", 1, "12.7", "mse", 7.8, 0.8, 0.7, "", 12.9, 12.9),
        ("usps-dpsgd-eps8", 1, "usps", 8, "6.4", "mse", 2.4, 7.0, 6.5, "", 7.3, 7.2),
        ("usps-mac-nonprivate", 1, "usps", "inf", "4.4", "mse", "", "", "", "", 5.0, 5.0)]
with open(d + "/results.csv", "w") as fh:
    fh.write(hdr + "\n" + "".join(",".join(map(str, r)) + ",1,x\n" for r in rows))
PY
python3 "$ROOT/experiments/dpmac/summarize_seeds.py" "$T/cells/results.csv" "$T/cells" || exit 1
python3 - "$T/cells" <<'PY' || { echo "FAIL: cells_*.md content"; cat "$T"/cells/cells_*.md; exit 1; }
import sys
m, u = (open(sys.argv[1] + "/cells_%s.md" % k).read() for k in ("mnist", "usps"))
assert "Table 1a" in m and "Table 1b" in u, (m, u)
t = m + u
for want in ("| epsilon 8 | 0.97 | 0.9640 +- 0.0028 (2 seeds; eps 8 RDP, 7.2 PLD) | -0.60 | 0.9680 (1 seed; eps 8 RDP, 7.2 PLD) | -0.20 | with centring only |",
             "| epsilon 2 | 0.95 | 0.9440 (1 seed; eps 2 RDP, 1.8 PLD) | -0.60 | not run | - | no |",
             "| epsilon 0.5 | - | not run | - | not run | - | no |",
             "| epsilon 8 | 8.4 | 7.2500 +- 0.3536 (2 seeds) | 6.9 (6.4) | -1.15 | yes |",
             "| epsilon 4 | 9.6 | not run | - | - | - |",
             "| epsilon 1 | 12.7 | 12.9000 (1 seed) | 0.8 (0.7) | +0.20 | no |"):
    assert want in t, (want, t)
# both columns of Table 1b with the epsilon-inf cells (DP-SGD and non-private rows present)
b = open(sys.argv[1] + "/cells_usps_table1b.md").read()
for want in ("| usps (zip) | epsilon 8 | 8.4 | 7.2500 +- 0.3536 (2 seeds; eps 6.9) | -1.15 | 6.4 | 7.3000 (1 seed; eps 7) | +0.90 |",
             "| usps (zip) | epsilon 4 | 9.6 | not run | - | 7.9 | not run | - |",
             "| usps (zip) | epsilon inf | 4.4 | 5.0000 (1 seed) | +0.60 | 3.6 | not run | - |"):
    assert want in b, (want, b)
PY
# splice_tables.py copies summary.md and cells_usps.md between their markers, keeps the text
# around them, and refuses a marker whose file is missing (leaving the document as it was)
printf 'intro\n<!-- begin out/summary.md (x) -->\nstale\n<!-- end out/summary.md -->\nmiddle\n<!-- begin out/cells_usps.md -->\n<!-- end out/cells_usps.md -->\ntail\n' > "$T/doc.md"
python3 "$ROOT/experiments/dpmac/splice_tables.py" "$T/doc.md" "$T" 2>/dev/null || { echo "FAIL: splice_tables.py"; exit 1; }
python3 - "$T" <<'PY' || { echo "FAIL: splice_tables.py output"; exit 1; }
import sys
t = sys.argv[1]
doc, summ, cells = (open(t + f).read() for f in ("/doc.md", "/out/summary.md", "/out/cells_usps.md"))
assert "stale" not in doc and "smoke-order2" in summ, doc
want = ("intro\n<!-- begin out/summary.md (x) -->\n" + summ.rstrip("\n") + "\n<!-- end out/summary.md -->\nmiddle\n"
        "<!-- begin out/cells_usps.md -->\n" + (cells.rstrip("\n") + "\n" if cells.strip() else "") + "<!-- end out/cells_usps.md -->\ntail\n")
assert doc == want, (doc, want)
PY
cp "$T/doc.md" "$T/doc0.md"; printf '<!-- begin out/none.md -->\n<!-- end out/none.md -->\n' >> "$T/doc.md"; cp "$T/doc.md" "$T/doc1.md"
if python3 "$ROOT/experiments/dpmac/splice_tables.py" "$T/doc.md" "$T" 2> "$T/err"; then echo "FAIL: a missing table file was accepted"; exit 1; fi
grep -q "out/none.md.*does not exist" "$T/err" && cmp -s "$T/doc.md" "$T/doc1.md" || { echo "FAIL: missing-file error"; cat "$T/err"; exit 1; }
grep -q "second order" "$T/out/runs/smoke-order2-s1.log" || { echo "FAIL: the order-2 row did not run second order"; exit 1; }
DPTRAIN=$BIN DATA_DIR=$DATA bash "$ROOT/experiments/dpmac/seeds.sh" --smoke "$T/out" > "$T/log2" 2>&1 || { cat "$T/log2"; exit 1; }
if grep -q "^== " "$T/log2"; then echo "FAIL: a second call reran finished runs"; cat "$T/log2"; exit 1; fi
[ "$(wc -l < "$T/out/results.csv")" = 5 ] || { echo "FAIL: a second call added CSV lines"; exit 1; }
echo "1 passed, 0 failed"
