#!/usr/bin/env bash
# CLI: dptrain audit end to end on a tiny CSV made here (loss attack, LiRA with 4 shadows,
# canary audit; CSV + ROC PNG), the PDP-SGD / proportional-noise training commands (no
# epsilon, "no formal DP guarantee"), and clear errors for bad flags.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
# 4 classes, 6 noisy features: a wide net overfits it, so members are visible
python3 - "$T/d.csv" <<'PY'
import random, sys
random.seed(2)
with open(sys.argv[1], "w") as f:
    for i in range(400):
        c = i % 4
        f.write("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(0, 1.5) + (1.0 if j % 4 == c else 0.0)) for j in range(6))))
PY
A=(--dataset "csv:$T/d.csv" --population 200 --max-test 100 --model mlp:6-64-4:relu --batch-size 20 --lr 0.01 --threads 1 --quiet)
out=$("$BIN" audit "${A[@]}" --epochs 60 --shadows 4 --bootstrap 50 --canaries 20 --canary-runs 2 --out "$T/a" 2>&1); rc=$?
check "[ $rc -eq 0 ]" "audit sgd failed: $out"
check "grep -q '^loss ' <<<\"\$out\"" "no loss attack line: $out"
check "grep -q '^lira-online ' <<<\"\$out\"" "no lira-online line: $out"
check "grep -q 'no formal DP guarantee' <<<\"\$out\"" "sgd audit lacks the no-guarantee statement"
check "grep -q 'epsilon lower bound' <<<\"\$out\"" "no canary bound: $out"
check "[ -s $T/a/audit.csv ] && [ -s $T/a/roc.csv ] && [ -s $T/a/summary.json ]" "audit files missing"
check "[ \$(wc -l < $T/a/audit.csv) -eq 4 ]" "audit.csv should have a header and 3 attacks"
if command -v gnuplot >/dev/null; then check "[ -s $T/a/roc.png ]" "roc.png missing"; fi
# an --out with shell and gnuplot syntax in it is only ever a path (gnuplot used to run
# through system() with the path in quotes: this name ran `touch INJECTED`)
q="$T/q'; touch INJECTED; echo '\$(touch INJECTED2)"
out=$(cd "$T" && "$BIN" audit "${A[@]}" --epochs 2 --shadows 0 --bootstrap 10 --out "$q" 2>&1); rc=$?
check "[ $rc -eq 0 ] && [ -s \"\$q/audit.csv\" ]" "audit into a quoted path failed: $out"
check "[ ! -e $T/INJECTED ] && [ ! -e $T/INJECTED2 ] && [ ! -e INJECTED ]" "the --out path was run as a command"
if command -v gnuplot >/dev/null; then
  check "[ -s \"\$q/roc.png\" ] && grep -qF \"\$q/roc.png\" <<<\"\$out\"" "roc.png missing in the quoted path: $out"
fi
# an overfit model leaks: loss-attack AUC clearly above chance
auc=$(awk -F, '$1=="loss"{print $4}' "$T/a/audit.csv")
check "python3 -c 'import sys; sys.exit(0 if float(\"$auc\") > 0.6 else 1)'" "loss AUC $auc not above 0.6 for an overfit model"
# one-run canary audit (one run, 40 canaries); shadows in parallel give the same numbers
out=$("$BIN" audit "${A[@]}" --epochs 60 --shadows 4 --jobs 2 --bootstrap 50 --canaries 40 --out "$T/j2" --no-plot 2>&1); rc=$?
check "[ $rc -eq 0 ] && grep -q 'one-run audit (Steinke et al. 2023): [0-9]* of 8 guesses right' <<<\"\$out\"" "one-run audit: $out"
"$BIN" audit "${A[@]}" --epochs 60 --shadows 4 --jobs 1 --bootstrap 50 --canaries 40 --out "$T/j1" --no-plot > /dev/null 2>&1
check "cmp -s $T/j1/audit.csv $T/j2/audit.csv" "--jobs 2 changed the results"
# DP-SGD: the accountant's epsilon is printed; PDP: never an epsilon
out=$("$BIN" audit "${A[@]}" --epochs 2 --shadows 0 --bootstrap 0 --algo dpsgd --sigma 1 --clip 1 --out "$T/b" --no-plot 2>&1); rc=$?
check "[ $rc -eq 0 ] && grep -q 'epsilon .* (default accountant: min of PLD, RDP)' <<<\"\$out\"" "dpsgd audit: $out"
# --bootstrap 0: no intervals printed or written (they were zero-width: [x, x])
check "grep -q 'no intervals (--bootstrap 0)' <<<\"\$out\" && ! grep -v '^privacy' <<<\"\$out\" | grep -q '\\['" \
  "--bootstrap 0 prints intervals: $out"
# every model of an audit is trained from --seed (default 1): the epsilon carries the run's
# [SEEDED] label, as train prints it, in the text and in summary.json
check "grep -q '^privacy (accountant): epsilon .*(q [0-9.e-]*, sigma 1)  \\[SEEDED run (a chosen seed): holds only while the seed stays secret and no other run uses it\\]\$' <<<\"\$out\"" \
  "the audit's epsilon without its [SEEDED] label: $out"
check "grep -q '\"epsilon\": .*\"privacy_label\": \"\\[SEEDED run (a chosen seed)' $T/b/summary.json" \
  "summary.json's epsilon without its label: $(cat $T/b/summary.json)"
out=$("$BIN" audit "${A[@]}" --epochs 2 --shadows 0 --bootstrap 0 --algo dpsgd --sigma 1 --clip 1 --canaries 20 \
  --out "$T/bc" --no-plot 2>&1); rc=$?
check "[ $rc -eq 0 ] && grep -q '^  accountant epsilon of a canary run: .*  \\[SEEDED run' <<<\"\$out\"" \
  "the canary run's epsilon without its [SEEDED] label: $out"
check "awk -F, 'NR>1 && (\$5!=\"\" || \$6!=\"\") {bad=1} END {exit bad}' $T/b/audit.csv" "--bootstrap 0 writes interval bounds"
out=$("$BIN" audit "${A[@]}" --epochs 2 --shadows 0 --bootstrap 0 --algo pdp-sgd --pdp-sigma 3 --out "$T/c" --no-plot 2>&1); rc=$?
check "[ $rc -eq 0 ] && grep -q 'no formal DP guarantee' <<<\"\$out\" && ! grep -qi 'epsilon [0-9]' <<<\"\$out\"" "pdp audit: $out"
# --checkpoint: audit a model trained by dptrain train (separate train and test files)
head -200 "$T/d.csv" > "$T/tr.csv"; tail -200 "$T/d.csv" > "$T/te.csv"
"$BIN" train --dataset "csv:$T/tr.csv,$T/te.csv" --model mlp:6-64-4:relu --batch-size 20 --lr 0.01 --epochs 60 \
  --threads 1 --quiet --no-progress --out "$T/run" > /dev/null 2>&1
out=$("$BIN" audit --checkpoint "$T/run/checkpoint.safetensors" --batch-size 20 --lr 0.01 --epochs 60 --threads 1 \
  --shadows 4 --bootstrap 20 --quiet --no-plot --out "$T/k" 2>&1); rc=$?
check "[ $rc -eq 0 ] && grep -q '200 members / 200 non-members' <<<\"\$out\" && grep -q 'checkpoint' <<<\"\$out\"" "checkpoint audit: $out"
auc=$(awk -F, '$1=="loss"{print $4}' "$T/k/audit.csv")
check "python3 -c 'import sys; sys.exit(0 if float(\"$auc\") > 0.6 else 1)'" "checkpoint loss AUC $auc not above 0.6"
expect_fail "not with --checkpoint" "$BIN" audit --checkpoint "$T/run/checkpoint.safetensors" --canaries 10
expect_fail "nope.safetensors" "$BIN" audit --checkpoint "$T/nope.safetensors"
# training with the two non-DP algorithms
TR=(--dataset "csv:$T/d.csv" --model mlp:6-16-4:relu --batch-size 20 --lr 0.01 --threads 1 --no-progress --epochs 1)
for al in "pdp-sgd --kappa 0.01 --lambda 0.001" "pdp-sgd --pdp-sigma 2" "proportional-noise --prop-sigma 1"; do
  out=$("$BIN" train "${TR[@]}" --algo $al --out "$T/t" 2>&1); rc=$?
  check "[ $rc -eq 0 ] && grep -q 'no formal DP guarantee' <<<\"\$out\" && ! grep -qi 'epsilon [0-9]' <<<\"\$out\"" "train --algo $al: $out"
  check "grep -q '\"privacy\":\"no formal DP guarantee\"' $T/t/metrics.jsonl" "metrics of --algo $al lack the statement"
  rm -rf "$T/t"
done
# --pdp-sigma: the paper's kappa = (eta sigma)^2 is for plain SGD; with Adam it is labelled ours
out=$("$BIN" train "${TR[@]}" --algo pdp-sgd --pdp-sigma 2 --optimizer sgd --lr 0.1 --out "$T/t" 2>&1); rc=$?
check "[ $rc -eq 0 ] && grep -q \"kappa 0.04 = (eta_t\\*pdp-sigma)^2 .*the paper's plain-SGD form\" <<<\"\$out\" && ! grep -q 'OUR mapping' <<<\"\$out\"" "pdp-sigma with sgd: $out"
rm -rf "$T/t"
out=$("$BIN" train "${TR[@]}" --algo pdp-sgd --pdp-sigma 2 --optimizer adam --out "$T/t" 2>&1); rc=$?
check "[ $rc -eq 0 ] && grep -q 'OUR mapping of its lr; the paper derives kappa = (eta sigma)^2 for plain SGD only' <<<\"\$out\" && grep -q 'our mapping (the paper' <<<\"\$out\"" "pdp-sigma with adam unlabelled: $out"
rm -rf "$T/t"
out=$("$BIN" audit "${A[@]}" --epochs 1 --shadows 0 --bootstrap 0 --algo pdp-sgd --pdp-sigma 3 --out "$T/c2" --no-plot 2>&1)
check "grep -q 'OUR mapping of its lr' <<<\"\$out\"" "audit pdp-sigma with adam unlabelled: $out"
expect_fail "--pdp-sigma must be >= 0" "$BIN" train "${TR[@]}" --algo pdp-sgd --pdp-sigma -1 --out "$T/t"
expect_fail "--kappa" "$BIN" train "${TR[@]}" --algo pdp-sgd --kappa -1 --out "$T/t"
expect_fail "give one of them" "$BIN" train "${TR[@]}" --algo pdp-sgd --kappa 1 --pdp-sigma 1 --out "$T/t"
expect_fail "--prop-sigma" "$BIN" train "${TR[@]}" --algo proportional-noise --out "$T/t"
expect_fail "not a differentially private" "$BIN" train "${TR[@]}" --algo pdp-sgd --sigma 1 --out "$T/t"
expect_fail "--kappa is an option of --algo pdp-sgd" "$BIN" train "${TR[@]}" --algo sgd --kappa 1 --out "$T/t"
expect_fail "--population" "$BIN" audit "${A[@]}" --population 3
expect_fail "--algo" "$BIN" audit "${A[@]}" --algo magic
expect_fail "--shadows" "$BIN" audit "${A[@]}" --shadows 1
expect_fail "--sigma" "$BIN" audit "${A[@]}" --algo dpsgd --sigma 0
expect_fail "--prop-sigma" "$BIN" audit "${A[@]}" --algo proportional-noise
expect_fail "options of --algo pdp-sgd" "$BIN" audit "${A[@]}" --kappa 1
expect_fail "d.csvx" "$BIN" audit --dataset "csv:$T/d.csvx"
# refused before any model is trained (they used to fail after all of them)
touch "$T/afile"
out=$(timeout 20 "$BIN" audit "${A[@]}" --epochs 2000 --shadows 8 --out "$T/afile" 2>&1); rc=$?
check "[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- '--out $T/afile: not a directory' <<<\"\$out\"" "--out a file: rc $rc: $out"
out=$(timeout 20 "$BIN" audit "${A[@]}" --epochs 2000 --canaries 10 --one-run-guesses 1000 --out "$T/g" 2>&1); rc=$?
check "[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- '--one-run-guesses 1000: the one-run audit takes one run' <<<\"\$out\"" \
  "--one-run-guesses above canaries / 2: rc $rc: $out"
# issue 18: sizes whose products wrap are refused (they overflowed the heap), values that
# would be ignored are errors, and parallel DP-SGD shadows (each running the PLD
# accountant) neither crash nor change the results
expect_fail "size overflow" "$BIN" audit "${A[@]}" --population 64 --shadows 288230376151711744 --out "$T/o1"
expect_fail "size overflow" "$BIN" audit "${A[@]}" --epochs 1 --shadows 0 --bootstrap 2305843009213693952 --out "$T/o2"
expect_fail "--sigma is an option of --algo dpsgd" "$BIN" audit "${A[@]}" --sigma -1
expect_fail "--delta is an option of --algo dpsgd" "$BIN" audit "${A[@]}" --algo pdp-sgd --pdp-sigma 1 --delta 1e-6
expect_fail "--batch-size 150 is larger than the 100 members" "$BIN" audit "${A[@]}" --batch-size 150
DP=(--epochs 2 --algo dpsgd --shadows 4 --bootstrap 20 --canaries 10 --canary-runs 2 --no-plot)
expect_ok "$BIN" audit "${A[@]}" "${DP[@]}" --jobs 2 --out "$T/p2"
expect_ok "$BIN" audit "${A[@]}" "${DP[@]}" --jobs 1 --out "$T/p1"
check "cmp -s $T/p1/audit.csv $T/p2/audit.csv" "dpsgd: --jobs 2 changed the results"
harness_end
