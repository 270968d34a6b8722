#!/usr/bin/env bash
# CLI: --validation N holds out the last N training examples and evaluates on them instead of
# the test split (for choosing hyperparameters without looking at the test set). Checked:
# the training set and the sampling rate the accountant uses are the N fewer examples; the
# held-out rows are the evaluation set (a model that memorizes nothing cannot tell: the
# rows are made so that only they carry label 2); the test split is never read (a missing
# test file does not stop the run); a private run's epsilon line, metrics and ledger say
# that it does not cover the validation metrics; metrics.jsonl names the split; a resume
# holds out the same rows; impossible values are refused by name.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 1000
# the last 200 rows: every one of class 2 (the first 800 keep their labels)
python3 - "$T/d.csv" <<'PY'
import sys
rows = open(sys.argv[1]).read().splitlines()
out = [rows[0]] + rows[1:801] + ["2," + r.split(",", 1)[1] for r in rows[801:]]
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
D=(--dataset "csv:$T/d.csv,$T/absent.csv" --model mlp:4-3 --threads 1 --no-progress --optimizer sgd --lr 0.1
   --batch-size 40 --epochs 1)
meta() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["meta"].get(sys.argv[2], ""))' "$1" "$2"; }

# without --validation the missing test file is an error: the flag is what avoids reading it
expect_fail "absent.csv" "$BIN" train --algo sgd "${D[@]}" --out "$T/plain"
expect_ok "$BIN" train --algo dpsgd --sigma 1 "${D[@]}" --validation 200 --out "$T/dp"
check 'grep -q "800 train / 200 validation" <<<"$LAST_OUT"' "the header does not say 800 train / 200 validation: $LAST_OUT"
check 'grep -q "^validation accuracy" <<<"$LAST_OUT"' "the summary does not say validation accuracy"
check '! grep -q "test acc" <<<"$LAST_OUT"' "a validation run still prints test accuracy"
check 'grep -q "does NOT cover: the validation metrics" <<<"$LAST_OUT"' "the epsilon line does not exclude the validation metrics"
check 'python3 -c "import sys; sys.exit(abs(float(sys.argv[1]) - 40 / 800) > 1e-12)" "$(meta "$T/dp/ledger.json" q)"' "the ledger's q is not 40/800"
check 'meta "$T/dp/ledger.json" epsilon_excludes | grep -q "validation metrics"' "the ledger does not exclude the validation metrics"
check 'python3 -c "
import json, sys
o = json.loads(open(sys.argv[1]).read().splitlines()[-1])
sys.exit(not (o[\"eval_split\"] == \"validation\" and \"validation\" in o[\"privacy_excludes\"]))" "$T/dp/metrics.jsonl"' \
  "metrics.jsonl does not name the validation split and its exclusion"
# the evaluation set is the held-out rows: all of class 2. A linear model trained without
# noise on the first 800 rows (classes 0, 1, 2 in turn) gets them right at some rate; the
# same model evaluated on a constant class would be at 0% or 100% only by chance. The
# check: a non-private run's validation accuracy equals its accuracy on those rows,
# recomputed from its predictions.
expect_ok "$BIN" train --algo sgd "${D[@]}" --validation 200 --out "$T/sgd"
acc=$(sed -n 's/^validation accuracy \([0-9.]*\)%.*/\1/p' <<<"$LAST_OUT")
tail -n 200 "$T/d.csv" > "$T/held.csv"
expect_ok "$BIN" predict --checkpoint "$T/sgd/checkpoint.safetensors" --input "$T/held.csv" --skip 1 --out "$T/pred.csv"
check 'python3 -c "
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
acc = 100.0 * sum(r[\"prediction\"] == \"2\" for r in rows) / len(rows)
sys.exit(abs(acc - float(sys.argv[2])) > 0.01)" "$T/pred.csv" "$acc"' "the validation accuracy $acc% is not the accuracy on the last 200 rows"
# a non-private run states no guarantee: nothing to exclude, but the split is named
check '! grep -q "does NOT cover" <<<"$LAST_OUT"' "a non-private run prints an exclusion"
# a resume holds out the same rows (the training data's HMAC would differ otherwise)
expect_ok "$BIN" train --algo dpsgd --sigma 1 "${D[@]}" --validation 200 --epochs 2 --out "$T/dp" --resume
expect_fail "held out 200 examples (--validation 200); resume with the same" "$BIN" train --algo dpsgd --sigma 1 "${D[@]}" --validation 100 --epochs 3 --out "$T/dp" --resume
# refusals
expect_fail "--validation 1000: the training split" "$BIN" train --algo sgd "${D[@]}" --validation 1000 --out "$T/r1"
expect_fail "--validation must be >= 0" "$BIN" train --algo sgd "${D[@]}" --validation -1 --out "$T/r2"
expect_fail "--max-test: not with --validation" "$BIN" train --algo sgd "${D[@]}" --validation 10 --max-test 5 --out "$T/r3"
P=(--algo dpsgd --sigma 1 --dataset "csv:$T/d.csv" --model mlp:4-3 --threads 1 --no-progress --out "$T/plain2")
expect_ok "$BIN" train "${P[@]}" --epochs 1
expect_fail "evaluated on the test split (no --validation)" "$BIN" train "${P[@]}" --epochs 2 --validation 10 --resume
harness_end
