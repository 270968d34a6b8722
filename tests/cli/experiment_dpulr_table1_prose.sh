#!/usr/bin/env bash
# docs/dpulr.md's "What Table 1 shows" and "What Table C1 shows" lists are what
# experiments/dpulr_table1/prose.py renders from the committed CSVs (no number in them typed by
# hand), and prose.py notices when the doc, the CSVs or its templates change, and names the
# file and placeholder on bad input. Needs neither the binary nor the datasets; about a second.
set -u
TOOL=experiments/dpulr_table1/prose.py
source "$(dirname "$0")/lib/py_tool.sh"

# the doc says exactly what the CSVs give, for Table 1 and for Table C1
run 0 --check "$SRC/docs/dpulr.md"
run 0 --table c1 --check "$SRC/docs/dpulr.md"
run 0 --table c1
has out "What Table C1 shows ("
run 0
has out "What Table 1 shows ("
grep -q '{{\|}}\|@@' "$T/out" && fail "a placeholder or include left in the output"

# a number changed in (a copy of) the doc: exit 1 and a diff showing the line
sed 's/at sigma0 8 it is -2.13 and/at sigma0 8 it is -2.14 and/' "$SRC/docs/dpulr.md" > "$T/doc.md"
cmp -s "$T/doc.md" "$SRC/docs/dpulr.md" && fail "the sed did not change the doc copy"
run 1 --check "$T/doc.md"
has out "-  200); at sigma0 8 it is -2.14 and"
has out "+  200); at sigma0 8 it is -2.13 and"
# --write puts the CSVs' numbers back
run 0 --write "$T/doc.md"
cmp -s "$T/doc.md" "$SRC/docs/dpulr.md" || fail "--write did not restore the doc"
# a doc without the list
printf '# nothing here\n' > "$T/empty.md"
run 1 --check "$T/empty.md"
has err "has 0 lines starting with 'What Table 1 shows ('"
run 2 --table c1 --write "$T/empty.md"
has err "has 0 lines starting with 'What Table C1 shows ('"

# a changed summary.csv reaches the text: dpsgd b500 sigma 8 final_mean 88.23 -> 88.24
S=$SRC/experiments/dpulr_table1/results/summary.csv
sed 's/^\(dpsgd,small,500,8,25,3,\)88.23,/\188.24,/' "$S" > "$T/summary.csv"
cmp -s "$T/summary.csv" "$S" && fail "the sed did not change the summary copy"
run 1 --check "$SRC/docs/dpulr.md" --summary "$T/summary.csv"
has out "+- **Our DP-SGD at batch 500 matches the paper at sigma 8 (88.24 +- 0.42 against"
has out "+  (92.03 / 91.07 / 88.24 against"

# bad input names the file and the placeholder
grep -v '^dpsgd_lr0.02,small,64,8,' "$S" > "$T/summary.csv"
run 2 --summary "$T/summary.csv"
has err "base.md:18: {{dpsgd_lr0.02 64 8 final}}: $T/summary.csv has no row for config=dpsgd_lr0.02"
run 2 --summary "$T/nope.csv"
has err "cannot read the summary CSV $T/nope.csv"
cut -d, -f1-6 "$S" > "$T/summary.csv"
run 2 --summary "$T/summary.csv"
has err "$T/summary.csv: the summary CSV has no column final_mean"
run 2 --paper "$T/nope.csv"
has err "cannot read the paper CSV $T/nope.csv"
grep -v '^table1,dpulr,small,500,8,' "$SRC/experiments/dpulr_table1/paper.csv" > "$T/paper.csv"
run 2 --paper "$T/paper.csv"
has err "t1notes.md:12: {{paper dpulr 500 8}}: $T/paper.csv has no table1 row for algorithm=dpulr model=small batch=500 sigma0=8"
mkdir "$T/prose"
cp "$SRC"/experiments/dpulr_table1/prose/*.md "$T/prose/"
printf 'x {{dpsgd 500 8 final}} {{dpsgd 500 8 finall}}\n' > "$T/prose/cmp64.md"
run 2 --template "$T/prose/t1notes.md"
has err "cmp64.md:1: {{dpsgd 500 8 finall}}: $S has no column 'finall'"
printf 'x {{median dpsgd 500 8}}\n' > "$T/prose/cmp64.md"
run 2 --template "$T/prose/t1notes.md"
has err "cmp64.md:1: {{median dpsgd 500 8}}: unknown placeholder"
printf 'x {{paper dpsgd 500}}\n' > "$T/prose/cmp64.md"
run 2 --template "$T/prose/t1notes.md"
has err "cmp64.md:1: {{paper dpsgd 500}}: 'paper' takes 3 arguments"
printf 'x {{dpsgd 500 8 final}\n' > "$T/prose/cmp64.md"
run 2 --template "$T/prose/t1notes.md"
has err "cmp64.md:1: '{{' left after filling in"
rm "$T/prose/cmp64.md"
run 2 --template "$T/prose/t1notes.md"
has err "@@CMP64@@ names $T/prose/cmp64.md, which does not exist"

# each placeholder on a made-up grid (numbers chosen so every result is known by hand)
cat > "$T/s.csv" <<'EOF'
config,model,batch,sigma0,seeds,final_mean,final_std,best_mean,best_std,best_epochs,final_minus_paper
a,small,10,1,3,50.00,1.50,51.00,0.50,4 5 5,-1.25
a,small,10,2,2,40.50,0.25,41.00,,3 3,2.75
a,small,20,2,3,45.00,,45.00,,5,0.50
a,large,10,1,3,11.00,1.00,12.00,1.00,1 1 1,9.00
b,small,10,1,3,47.25,1.00,48.00,1.00,2 2 2,
b,small,10,2,3,41.00,1.00,42.00,1.00,2 2 2,
EOF
cat > "$T/p.csv" <<'EOF'
# a comment line
table,algorithm,model,batch,sigma0,valid_acc,valid_std
table1,x,small,10,2,60.10,0.30
table1,x,small,20,2,70.00,0.20
tablec1,x,small,10,2,1.00,1.00
c1,x,large,10,1,20.00,2.00
EOF
printf 'algorithm,sampling,batch,sigma0,test_acc\nx,shuffle,10,2,33.30\n' > "$T/e.csv"
cat > "$T/t.md" <<'EOF'
{{a 10 1 final}}|{{a 20 2 final}}|{{a 10 2 best}}|{{a 10 1 best_epochs}}|{{paper x 10 2}}
{{absmax a 10 1,2}}|{{diffrange a 10 1,2}}|{{paperdrop x 20 10 2}}|{{ourdrop a 20 10 2}}
{{seeds a 10 1,2}}|{{seeds a 10,20 2}}|{{seeds a 20 2}}|{{earlier x shuffle 10 2}}
{{vs a b 10 1,2}}|{{vs b a 10 2}}
{{ahead a b 10 1}}|{{ahead b a 10 1}}|{{ahead a b 10 1,2}}|{{ahead a paper 10 1,2}}|{{ahead a paper 20 2}}
EOF
run 0 --summary "$T/s.csv" --paper "$T/p.csv" --earlier "$T/e.csv" --template "$T/t.md"
printf '%s\n' '50.00 +- 1.50|45.00|41.00|4 5 5|60.10 +- 0.30' '2.75|-1.25 to +2.75|9.90|4.50' \
  '2 or 3|2 or 3|3|33.30' '-0.50 to +2.75|+0.50 to +0.50' 'all 1|none of 1|1 of 2|1 of 2|all 1' > "$T/want"
diff "$T/want" "$T/out" || fail "placeholders on the made-up grid"
# other models (@MODEL), lists of models and batches, Table C1's paper rows
cat > "$T/t2.md" <<'EOF'
{{a@large 10 1 final}}|{{absmax a@small,large 10 1}}|{{diffrange a 10,20 2}}|{{diffrange a@small,large 10 1}}
{{paper x@large 10 1}}|{{seeds a@small,large 10 1}}
EOF
run 0 --table c1 --summary "$T/s.csv" --paper "$T/p.csv" --earlier "$T/e.csv" --template "$T/t2.md"
printf '%s\n' '11.00 +- 1.00|9.00|+0.50 to +2.75|-1.25 to +9.00' '20.00 +- 2.00|3' > "$T/want"
diff "$T/want" "$T/out" || fail "@MODEL placeholders on the made-up grid"
run 2 --summary "$T/s.csv" --paper "$T/p.csv" --earlier "$T/e.csv" --template "$T/t2.md"
has err "{{paper x@large 10 1}}: $T/p.csv has no table1 row for algorithm=x model=large batch=10 sigma0=1"
printf '{{a@medium 10 1 final}}\n' > "$T/t3.md"
run 2 --summary "$T/s.csv" --paper "$T/p.csv" --earlier "$T/e.csv" --template "$T/t3.md"
has err "$T/s.csv has no row for config=a model=medium batch=10 sigma0=1"
printf '{{vs a@large b 10 1}}\n' > "$T/t3.md"
run 2 --summary "$T/s.csv" --paper "$T/p.csv" --earlier "$T/e.csv" --template "$T/t3.md"
has err "'vs' compares the same models: 'a@large' and 'b' name different ones"
printf '{{ahead a@large b 10 1}}\n' > "$T/t3.md"
run 2 --summary "$T/s.csv" --paper "$T/p.csv" --earlier "$T/e.csv" --template "$T/t3.md"
has err "'ahead' compares the same models: 'a@large' and 'b' name different ones"
printf '{{vs a b 10,20 2}}\n' > "$T/t3.md"
run 2 --summary "$T/s.csv" --paper "$T/p.csv" --earlier "$T/e.csv" --template "$T/t3.md"
has err "$T/s.csv has no row for config=b model=small batch=20 sigma0=2"
# two rows for one cell is an error, not a silent pick
sed -n 3p "$T/s.csv" >> "$T/s.csv"
run 2 --summary "$T/s.csv" --paper "$T/p.csv" --earlier "$T/e.csv" --template "$T/t.md"
has err "two rows of the summary CSV for config=a model=small batch=10 sigma0=2"

run 0 --help
has out "--check DOC"
echo "prose ok"
