#!/usr/bin/env bash
# CLI: dptrain predict writes a trained model's predictions for the rows of a CSV file, with
# the checkpoint's normalization applied as in training. A classifier trained on
# standardized features (--normalize scalar): the predicted classes agree with the labels
# exactly as often as eval's accuracy says, every row's probabilities sum to 1; a
# regression model (--targets 2): the mean squared error of its predictions against the
# file's targets is eval's mse; a --classes run names the kept labels; 50 outputs for one
# row; --out writes the same text atomically; refused (exit 2,
# naming the flag and file): a row width the model does not take, a non-numeric field
# (file:line:column), a missing file, no --input; a run directory works as --checkpoint.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 600
C=(--threads 1 --no-progress --quiet)

# -- a classifier on standardized features
expect_ok "$BIN" train --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --normalize scalar --epochs 3 --out "$T/cls" "${C[@]}"
expect_ok "$BIN" eval --checkpoint "$T/cls/checkpoint.safetensors" --json
acc=$(python3 -c 'import json, sys; print("%.6f" % json.loads(sys.argv[1])["test_accuracy"])' "$LAST_OUT")
expect_ok "$BIN" predict --checkpoint "$T/cls" --input "$T/d.csv" --skip 1
printf '%s\n' "$LAST_OUT" > "$T/cls.pred"
check '[ "$(head -1 "$T/cls.pred")" = "prediction,p_0,p_1,p_2" ] && [ "$(wc -l < "$T/cls.pred")" = 601 ]' \
  "predict's header or row count: $(head -2 "$T/cls.pred")"
got=$(python3 - "$T/d.csv" "$T/cls.pred" <<'PY'
import sys
labels = [int(l.split(",")[0]) for l in open(sys.argv[1]).read().split("\n")[1:] if l]
rows = [l.split(",") for l in open(sys.argv[2]).read().split("\n")[1:] if l]
assert all(abs(sum(float(p) for p in r[1:]) - 1) < 1e-5 for r in rows), "probabilities do not sum to 1"
assert all(int(r[0]) == max(range(3), key=lambda k: float(r[1 + k])) for r in rows), "the class is not the argmax"
print("%.6f" % (sum(int(r[0]) == y for r, y in zip(rows, labels)) / len(labels)))
PY
)
check '[ -n "$acc" ] && [ "$got" = "$acc" ]' "predict's accuracy '$got' differs from eval's '$acc'"

# -- regression: the same mse as eval
python3 - "$T" <<'PY'
import random, sys
random.seed(5)
with open(sys.argv[1] + "/r.csv", "w") as f:
    f.write("t1,t2,a,b,c\n")
    for _ in range(300):
        a, b, c = (random.uniform(-1, 1) for _ in range(3))
        f.write("%.6f,%.6f,%.6f,%.6f,%.6f\n" % (a - 2 * b + 0.1 * random.gauss(0, 1), c + 1, a, b, c))
PY
expect_ok "$BIN" train --dataset "csv:$T/r.csv" --targets 2 --model mlp:3-2 --optimizer sgd --lr 0.5 --epochs 5 \
  --batch-size 30 --out "$T/reg" "${C[@]}"
expect_ok "$BIN" eval --checkpoint "$T/reg/checkpoint.safetensors" --json
mse=$(python3 -c 'import json, sys; print("%.5g" % json.loads(sys.argv[1])["test_mse"])' "$LAST_OUT")
expect_ok "$BIN" predict --checkpoint "$T/reg/checkpoint.safetensors" --input "$T/r.csv" --skip 2 --out "$T/reg.pred"
check 'grep -qF "300 predictions written to $T/reg.pred" <<<"$LAST_OUT"' "predict --out did not say where: $LAST_OUT"
got=$(python3 - "$T/r.csv" "$T/reg.pred" <<'PY'
import sys
t = [[float(v) for v in l.split(",")[:2]] for l in open(sys.argv[1]).read().split("\n")[1:] if l]
lines = open(sys.argv[2]).read().split("\n")
assert lines[0] == "prediction_0,prediction_1", lines[0]
p = [[float(v) for v in l.split(",")] for l in lines[1:] if l]
print("%.5g" % (sum((a - b) ** 2 for r, q in zip(t, p) for a, b in zip(r, q)) / (2 * len(t))))
PY
)
check '[ -n "$mse" ] && [ "$got" = "$mse" ]' "predict's mse '$got' differs from eval's '$mse'"

# -- a run with --classes: the classes are the kept labels (2 and 0 here, in that order),
# with per-feature normalization; a wrong --skip is the input's fault, not the checkpoint's
expect_ok "$BIN" train --dataset "csv:$T/d.csv" --classes 2,0 --model mlp:4-8-2:relu --normalize feature --epochs 3 \
  --out "$T/two" "${C[@]}"
expect_ok "$BIN" eval --checkpoint "$T/two" --json
acc=$(python3 -c 'import json, sys; print("%.6f" % json.loads(sys.argv[1])["test_accuracy"])' "$LAST_OUT")
expect_ok "$BIN" predict --checkpoint "$T/two" --input "$T/d.csv" --skip 1
printf '%s\n' "$LAST_OUT" > "$T/two.pred"
got=$(python3 - "$T/d.csv" "$T/two.pred" <<'PY'
import sys
labels = [int(l.split(",")[0]) for l in open(sys.argv[1]).read().split("\n")[1:] if l]
lines = open(sys.argv[2]).read().split("\n")
assert lines[0] == "prediction,p_2,p_0", lines[0]
rows = [l.split(",") for l in lines[1:] if l]
assert {r[0] for r in rows} <= {"2", "0"}, "a prediction is not a kept label"
kept = [(r, y) for r, y in zip(rows, labels) if y in (2, 0)]
print("%.6f" % (sum(int(r[0]) == y for r, y in kept) / len(kept)))
PY
)
check '[ -n "$acc" ] && [ "$got" = "$acc" ]' "predict's accuracy over the kept labels '$got' differs from eval's '$acc'"
expect_fail "--input $T/d.csv: 3 features per row after --skip, but the model" \
  "$BIN" predict --checkpoint "$T/two" --input "$T/d.csv" --skip 2

# -- many outputs for one row: the text grows with the outputs (a fixed estimate overflowed)
python3 - "$T" <<'PY'
import random, sys
random.seed(7)
with open(sys.argv[1] + "/wide.csv", "w") as f:
    for _ in range(40):
        x = [random.uniform(-1, 1) for _ in range(5)]
        f.write(",".join("%.6f" % v for v in [-1.2345678e-05 * (k + 1) * x[k % 5] for k in range(50)] + x) + "\n")
with open(sys.argv[1] + "/one.csv", "w") as f:
    f.write("0.1,-0.2,0.3,-0.4,0.5\n")
PY
expect_ok "$BIN" train --dataset "csv:$T/wide.csv" --targets 50 --model mlp:5-50 --algo sgd --epochs 1 --batch-size 8 \
  --out "$T/wide" "${C[@]}"
expect_ok "$BIN" predict --checkpoint "$T/wide" --input "$T/one.csv"
check '[ "$(printf "%s\n" "$LAST_OUT" | wc -l)" = 2 ] && [ "$(printf "%s\n" "$LAST_OUT" | head -1 | tr , "\n" | wc -l)" = 50 ] &&
  [ "$(printf "%s\n" "$LAST_OUT" | tail -1 | tr , "\n" | wc -l)" = 50 ]' "predict with 50 outputs: $(printf "%s" "$LAST_OUT" | head -c 300)"

# -- refusals: exit 2, naming the flag and the file
expect_fail "--input $T/d.csv: 5 features per row, but the model of $T/cls/checkpoint.safetensors takes 4" \
  "$BIN" predict --checkpoint "$T/cls" --input "$T/d.csv"
printf 'a,b,c,d\n1,2,3,4\n1,x,3,4\n' > "$T/bad.csv"
expect_fail "bad.csv:3:2" "$BIN" predict --checkpoint "$T/cls" --input "$T/bad.csv"
expect_fail "no-such.csv" "$BIN" predict --checkpoint "$T/cls" --input "$T/no-such.csv"
expect_fail "--input: required" "$BIN" predict --checkpoint "$T/cls"
expect_fail "--skip must be in" "$BIN" predict --checkpoint "$T/cls" --input "$T/d.csv" --skip -1
for a in "--input $T/d.csv" "--input $T/bad.csv" "--input $T/no-such.csv" ""; do
  # shellcheck disable=SC2086
  check '[ "$("$BIN" predict --checkpoint "$T/cls" $a >/dev/null 2>&1; echo $?)" = 2 ]' "predict --checkpoint ... $a: not exit 2"
done
harness_end
