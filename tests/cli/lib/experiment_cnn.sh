# Shared by tests/cli/experiment_{mnist_cnn,cifar10_resnet5}.sh: experiments/$NAME/run.sh --smoke
# runs end to end: a CSV with one row per epoch (accuracy in [0, 1], a positive epsilon that
# grows), $NAME.png and command.txt. Exits 77 without the shared datasets. Needs NAME and BIN;
# CHECK_COLLECT=1 also checks run.sh --collect, CHECK_RESUME=ROW run.sh --resume.
set -u
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export DPTRAIN_SECRETS_DIR="$T/secrets"  # the runs' secret files: under $T, not in the home directory
SRC=${DPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
DATA_DIR=${DPT_SHARED_DATASETS:-/nonexistent} DPTRAIN=$BIN OUT=$T bash "$SRC/experiments/$NAME/run.sh" --smoke > "$T/out.txt" 2>&1
rc=$?
if [ $rc -eq 77 ]; then cat "$T/out.txt"; exit 77; fi
if [ $rc -ne 0 ]; then echo "FAIL: run.sh --smoke exited $rc"; cat "$T/out.txt"; exit 1; fi
fail=0
rows=$(tail -n +2 "$T/results.csv" | wc -l)
[ "$rows" -ge 1 ] || { echo "FAIL: results.csv has no rows"; fail=1; }
# an optional first column "run" (several runs in one file: epsilon grows within each run)
awk -F, 'NR == 1 { o = ($1 == "run") ? 1 : 0; next }
         { if (o && $1 != run) { prev = 0; run = $1 }
           if (!($(4 + o) >= 0 && $(4 + o) <= 1) || !($(5 + o) > 0) || $(5 + o) < prev) bad = 1; prev = $(5 + o) }
         END { exit bad }' "$T/results.csv" \
  || { echo "FAIL: results.csv has an accuracy outside [0, 1] or a non-increasing epsilon:"; cat "$T/results.csv"; fail=1; }
for r in ${EXPECT_RUNS:-}; do # runs (first column) that must have rows
  grep -q "^$r," "$T/results.csv" || { echo "FAIL: results.csv has no row of run $r"; cat "$T/results.csv"; fail=1; }
done
[ -s "$T/$NAME.png" ] || { echo "FAIL: no $NAME.png"; fail=1; }
grep -q -- "--model" "$T/command.txt" || { echo "FAIL: command.txt does not hold the command"; fail=1; }
# CHECK_COLLECT=1: run.sh --collect rebuilds the same results.csv from the runs' metrics
if [ "${CHECK_COLLECT:-0}" = 1 ]; then
  cp "$T/results.csv" "$T/first.csv"
  DATA_DIR=${DPT_SHARED_DATASETS:-/nonexistent} DPTRAIN=$BIN OUT=$T bash "$SRC/experiments/$NAME/run.sh" --smoke --collect \
    > "$T/collect.txt" 2>&1 && cmp -s "$T/first.csv" "$T/results.csv" \
    || { echo "FAIL: run.sh --collect did not rebuild the same results.csv"; cat "$T/collect.txt"; diff "$T/first.csv" "$T/results.csv"; fail=1; }
fi
# CHECK_RESUME=ROW: run.sh --resume --epochs 2 continues that run to a second epoch; its
# first epoch's row (wall time included) is the one the first run wrote, not a re-run's
if [ -n "${CHECK_RESUME:-}" ]; then
  first=$(grep "^$CHECK_RESUME,1," "$T/results.csv")
  DATA_DIR=${DPT_SHARED_DATASETS:-/nonexistent} DPTRAIN=$BIN OUT=$T bash "$SRC/experiments/$NAME/run.sh" --smoke --resume \
    --epochs 2 --rows "$CHECK_RESUME" > "$T/resume.txt" 2>&1 && grep -q "^$CHECK_RESUME,2," "$T/results.csv" \
    && [ "$(grep "^$CHECK_RESUME,1," "$T/results.csv")" = "$first" ] \
    || { echo "FAIL: run.sh --resume did not continue $CHECK_RESUME to epoch 2"; echo "first run: $first"; cat "$T/resume.txt" "$T/results.csv"; fail=1; }
fi
[ $fail -eq 0 ] && echo "ok: $rows epochs"
exit $fail
