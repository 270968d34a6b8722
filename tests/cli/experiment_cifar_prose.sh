#!/usr/bin/env bash
# docs/dpulr.md's Section 4.3 text on the baseline alone is what
# experiments/cifar10_resnet5/prose.py renders from the committed CSVs (no number in it typed by
# hand); prose.py notices a changed doc or CSV and names the file on bad input. Needs neither
# the binary nor the datasets; about a second.
set -u
TOOL=experiments/cifar10_resnet5/prose.py
source "$(dirname "$0")/lib/py_tool.sh"
R=$SRC/experiments/cifar10_resnet5/results

# the doc says exactly what the CSVs give; without a mode it prints every part
run 0 --check "$SRC/docs/dpulr.md"
run 0
for p in "**The baseline alone, sessions" "**More perturbations per example" "**Why DP-ULR trails DP-SGD here" \
         "**The paper's other captions" "- Section 4.3: DP-ULR to its plateau"; do has out "$p"; done
# the plateau rule is md_tables.py's (20 epochs), and its history says what the 10-epoch one missed
has out "less than 0.25 points above that of the 5 epochs 20 before, and the"
has out "best epoch is 20 or more epochs back."
has out "Until after session 34 the window was 10 epochs (the 5 epochs 10 before, the best 10 back); by it the baseline alone, seed 1 had stopped at epoch 129"

# a number changed in (a copy of) the doc: exit 1 and a diff showing the line
sed 's/^\(  antithetic pairs\*\* for seed 1 in \)[0-9]*/\1999/' "$SRC/docs/dpulr.md" > "$T/doc.md"
cmp -s "$T/doc.md" "$SRC/docs/dpulr.md" && fail "the sed did not change the doc copy"
run 1 --check "$T/doc.md"
has out "-  antithetic pairs** for seed 1 in 999 of "
has out "+  antithetic pairs** for seed 1 in "
has err "differs from the CSVs"
# so is a changed "Not run" bullet
sed 's/^- Section 4.3: DP-ULR to its plateau by the rule above/&X/' "$SRC/docs/dpulr.md" > "$T/doc2.md"
cmp -s "$T/doc2.md" "$SRC/docs/dpulr.md" && fail "the sed did not change the bullet"
run 1 --check "$T/doc2.md"
has out "-- Section 4.3: DP-ULR to its plateau by the rule aboveX"
# and a changed number in the signal part
sed 's/^\(  DP-SGD has \)[0-9.]*x (init)/\19.9x (init)/' "$SRC/docs/dpulr.md" > "$T/doc4.md"
cmp -s "$T/doc4.md" "$SRC/docs/dpulr.md" && fail "the sed did not change the signal part"
run 1 --check "$T/doc4.md"
has out "-  DP-SGD has 9.9x (init)"
# --write puts the CSVs' numbers back, tables included
grep -v '^| 5 |' "$T/doc.md" > "$T/doc3.md"
run 0 --write "$T/doc3.md"
cmp -s "$T/doc3.md" "$SRC/docs/dpulr.md" || fail "--write did not restore the doc"

# a changed CSV reaches the text: seed 3's accuracy at its last epoch moves the three-seed mean
mkdir "$T/r"
cp "$R"/{dpulr_base,dpulr_long,results,dpulr_q25,dpulr_results,signal_summary,trace20_explicit}.csv "$T/r/"
run 0 --check "$SRC/docs/dpulr.md" --results "$T/r"
last=$(awk -F, '$1 == "dpulr-q50-s5+base+seed3" { e = $2 } END { print e }' "$R/dpulr_base.csv")
awk -F, -v OFS=, -v e="$last" '$1 == "dpulr-q50-s5+base+seed3" && $2 == e { $5 = 0.9 } 1' "$R/dpulr_base.csv" \
  > "$T/r/dpulr_base.csv"
cmp -s "$T/r/dpulr_base.csv" "$R/dpulr_base.csv" && fail "the awk did not change the CSV copy"
run 1 --check "$SRC/docs/dpulr.md" --results "$T/r"
has out "+- Over the three seeds at epoch $last: "
# a seed that stopped sooner shortens the comparison: the last epoch of seed 3 dropped
awk -F, -v e="$last" '!($1 == "dpulr-q50-s5+base+seed3" && $2 == e)' "$R/dpulr_base.csv" > "$T/r/dpulr_base.csv"
run 1 --check "$SRC/docs/dpulr.md" --results "$T/r"
has out "+- Over the three seeds at epoch $((last - 1)): "
# DP-SGD's best epochs come from results.csv
awk -F, -v OFS=, '$1 == "dpsgd+seed2" && $2 == 25 { $5 = 0.60 } 1' "$R/results.csv" > "$T/r/results.csv"
cp "$R/dpulr_base.csv" "$T/r/"
run 1 --check "$SRC/docs/dpulr.md" --results "$T/r"
grep -q "^-.*DP-SGD's 48.38 +- 0.42%" "$T/out" || fail "the old DP-SGD mean is not in the diff"
grep -q "^+.*DP-SGD's 52.12 +- " "$T/out" || fail "the new DP-SGD mean (48.40, 60.00, 47.95) is not in the diff"

# bad input names the file and what is missing
cp "$R/results.csv" "$T/r/"
grep -v '^dpulr-q50-s5+base+seed2,' "$R/dpulr_base.csv" > "$T/r/dpulr_base.csv"
run 2 --results "$T/r"
has err "$T/r/dpulr_base.csv has no run 'dpulr-q50-s5+base+seed2'"
cut -d, -f1-4 "$R/dpulr_base.csv" > "$T/r/dpulr_base.csv"
run 2 --results "$T/r"
has err "$T/r/dpulr_base.csv has no column test_accuracy, epsilon_rdp, wall_s"
rm "$T/r/dpulr_long.csv"
cp "$R/dpulr_base.csv" "$T/r/"
run 2 --results "$T/r"
has err "cannot read $T/r/dpulr_long.csv"
sed 's/^\(dpulr-q50-s5+base,3,150,\),[^,]*,/\1,x,/' "$R/dpulr_base.csv" > "$T/r/dpulr_base.csv"
cp "$R/dpulr_long.csv" "$T/r/"
run 2 --results "$T/r"
has err "$T/r/dpulr_base.csv, run dpulr-q50-s5+base: could not convert string to float"
# the signal summary: DP-SGD's component at the init doubled doubles its lead at K 4
cp "$R/dpulr_base.csv" "$T/r/"
awk -F, -v OFS=, '$1 == "init" && $2 == "dpsgd" { $5 = 2 * $5 } 1' "$R/signal_summary.csv" > "$T/r/signal_summary.csv"
run 1 --check "$SRC/docs/dpulr.md" --results "$T/r"
want=$(awk -F, '$1 == "init" && $2 == "dpulr" && $3 == 4 { printf "%.1f", 2 * $8 }' "$R/signal_summary.csv")
has out "+- **At our K = 4 a DP-SGD example moves the update along g $want times"
cp "$R/signal_summary.csv" "$T/r/"
rm "$T/r/dpulr_q25.csv"
run 2 --results "$T/r"
has err "cannot read $T/r/dpulr_q25.csv"
cp "$R/dpulr_q25.csv" "$T/r/"
printf '# nothing here\n' > "$T/empty.md"
run 2 --check "$T/empty.md"
has err "$T/empty.md has 0 lines starting with '**The baseline alone, sessions', not 1"
run 2 --write "$T/empty.md"
has err "$T/empty.md has 0 lines starting with '**The baseline alone, sessions', not 1"

run 0 --help
has out "--check DOC"
echo "cifar prose ok"
