#!/usr/bin/env bash
# Transformers with DP-SGD (issue 39 item 5), three tasks, each non-private and private:
#   topic  bert_tiny (padding mask) on fortunes-topic (20 topics), test accuracy;
#          non-private, epsilon 8 and epsilon 3
#   lm     gpt_tiny on fortunes-chars windows with every next byte as a target (token-ce),
#          test perplexity exp(mean loss per token); non-private, epsilon 8 and epsilon 3
#   vit    vit_cifar on a CIFAR-10 subset at epsilon 3 with the settings of docs/cnn.md's
#          resnet5 measurements ("Techniques beyond Tramer & Boneh", 5000 images)
# delta 1e-5; --target-epsilon calibrates sigma (PLD) to each epsilon after the run's epochs.
# The learning rates of topic and lm are chosen by this script on a validation split carved
# from the training data (prepare_data.py): Adam, lr in LRS, non-private and epsilon 3 each
# (epsilon 8 takes epsilon 3's), the lowest validation loss wins; the test set is read only
# by the final runs. Writes
#   OUT/search.csv   one row per search run (validation metrics) and the chosen lr
#   OUT/runs.csv     one row per final run: task, dataset, model, privacy, epsilon (PLD, as
#                    printed), epsilon_rdp, delta, sigma, lr, seed, steps, test_accuracy (%,
#                    final epoch) or test_loss and test_perplexity, ema accuracy (vit),
#                    seconds (training, wall), cpu_seconds (the whole process, user + sys)
#   OUT/summary.csv  task, privacy: mean and std over seeds, seconds per run
#   OUT/text_transformers.png   the three panels (gnuplot)
# usage: run.sh [--smoke] [--seeds "1 2 3"] [--only "topic lm vit"] [--phase search|final|all]
#               [--levels "nonprivate eps8 eps3"] [--summary-only] [OUT]
#   --only: the tasks to run; --phase: the search only, the final runs only (reading the
#     choice from OUT/search_TASK.csv), or both (default); --levels: the final runs' levels.
#     Rows go to OUT/search_TASK.csv and OUT/runs_TASK_LEVEL.csv, so that tasks and levels
#     may run as parallel invocations on one OUT (after the search); runs.csv merges them
#   --summary-only: no training; runs.csv, the summary and the plot from OUT/runs_*.csv
#   env: DPTRAIN (binary; its directory must hold libdptrain and the Python module, which
#     python/build_ffi.py --build-dir DIR builds when missing), DATA_DIR (cifar10/),
#     PYTHON (/usr/bin/python3), THREADS (default 1); the sizes below: TOPIC_T, TOPIC_EPOCHS,
#     LM_T, LM_EPOCHS, LM_TRAIN, LM_VAL, LM_TEST, VIT_TRAIN, VIT_EPOCHS (--smoke ignores them)
#   --smoke: tiny subsets, T = 16, one seed, non-private and epsilon 3, 1 epoch (ctest)
# Sizes (full mode; chosen for a CPU budget of about 20 minutes on the shared 2-core
# machine, docs/text.md): topic T = 32 bytes, all 8601 training entries, 2 epochs; lm T = 32,
# 8000 training windows (of 64232), 3000 test windows, 2 epochs; vit 5000 images, 5 epochs.
case "${1:-}" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
DATA_DIR=${DATA_DIR:-${DPT_SHARED_DATASETS:-/work/shared/datasets}}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-1}
SEEDS="1 2 3"
ONLY="topic lm vit"
PHASE=all LEVELS_ARG=""
SMOKE=0 SUMMARY_ONLY=0
OUT=$HERE/results
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) SMOKE=1 ;;
    --seeds) SEEDS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --phase) PHASE=$2; shift ;;
    --levels) LEVELS_ARG=$2; shift ;;
    --summary-only) SUMMARY_ONLY=1 ;;
    -*) echo "run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) OUT=$1 ;;
  esac
  shift
done
LRS="1e-3 3e-3" LEVELS="nonprivate eps8 eps3" BATCH=256 CLIP=1 DELTA=1e-5
# sizes: the environment may override them (docs/text.md, "What was not run")
TOPIC_T=${TOPIC_T:-32} TOPIC_EPOCHS=${TOPIC_EPOCHS:-2} TOPIC_SIZE=()
LM_T=${LM_T:-32} LM_EPOCHS=${LM_EPOCHS:-2} LM_TRAIN=${LM_TRAIN:-8000} LM_VAL=${LM_VAL:-2000} LM_TEST=${LM_TEST:-3000}
VIT_TRAIN=${VIT_TRAIN:-5000} VIT_EPOCHS=${VIT_EPOCHS:-5} VIT_SIZE=()
PREP=()
if [ "$SMOKE" = 1 ]; then
  SEEDS=1 LEVELS="nonprivate eps3" BATCH=64
  TOPIC_T=16 TOPIC_EPOCHS=1 TOPIC_SIZE=(--max-train 400 --max-test 200) PREP=(--topic-max 400)
  LM_T=16 LM_EPOCHS=1 LM_TRAIN=400 LM_VAL=100 LM_TEST=100
  VIT_TRAIN=256 VIT_EPOCHS=1 VIT_SIZE=(--max-test 100)
fi
[ -z "$LEVELS_ARG" ] || LEVELS=$LEVELS_ARG
case $PHASE in search|final|all) ;; *) echo "run.sh: --phase: search, final or all (got '$PHASE')" >&2; exit 2 ;; esac
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd) # the commands and checkpoints name the csv: files by absolute paths
DATA=$OUT/runs/data # runs/ is not committed (.gitignore)
BUILD_DIR=$(cd "$(dirname "$DPTRAIN")" && pwd)
cpu_time() { # cpu_time FILE CMD...: runs CMD, writes its user + sys CPU seconds to FILE
  if [ -x /usr/bin/time ]; then /usr/bin/time -f "%U %S" -o "$1" "${@:2}"
  else "${@:2}"; echo "" > "$1"; fi
}
# one run; prints its log; $1 = run dir, rest = dptrain train arguments
train() {
  local dir=$1; shift
  local cmd=("$DPTRAIN" train "$@" --threads "$THREADS" --no-progress --overwrite --out "$dir")
  echo "== ${cmd[*]}" >&2
  mkdir -p "$dir"
  echo "${cmd[*]}" > "$dir/command.txt"
  cpu_time "$dir/cpu.txt" "${cmd[@]}" > "$dir/log.txt" 2>&1 || { cat "$dir/log.txt" >&2; exit 1; }
  grep -E "^(privacy:|test )" "$dir/log.txt" | tail -2 >&2
}
privacy_args() { # privacy_args LEVEL EPOCHS
  case $1 in
    nonprivate) echo "--algo sgd --sampler shuffle --batch-size $BATCH --epochs $2" ;;
    eps*) echo "--algo dpsgd --sampler poisson --batch-size $BATCH --clip $CLIP --delta $DELTA --target-epsilon ${1#eps} --epochs $2" ;;
  esac
}
# one CSV row from a run directory (metrics.jsonl, log, cpu.txt)
row() { # row PHASE TASK LEVEL LR SEED DIR
  "$PYTHON" - "$@" "$build" <<'PY'
import csv, json, re, sys
phase, task, level, lr, seed, d, build = sys.argv[1:8]
last = [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()][-1]
log = open(d + "/log.txt").read()
cmd = open(d + "/command.txt").read()
cpu = open(d + "/cpu.txt").read().split()
m = re.search(r"algorithm dpsgd \(sigma ([0-9.e+-]+)", log)
f = lambda k, fmt: (fmt % last[k]) if last.get(k) is not None else ""
acc = "%.4f" % (100 * last["test_accuracy"]) if last.get("test_accuracy") is not None else ""
ema = "%.4f" % (100 * last["test_accuracy_ema"]) if last.get("test_accuracy_ema") is not None else ""
csv.writer(sys.stdout, lineterminator="\n").writerow([
    phase, task, "+".join(x.split("/")[-1] for x in re.search(r"--dataset (\S+)", cmd).group(1).split(",")), re.search(r"--model (\S+)", cmd).group(1),
    level, f("epsilon", "%.4f"), f("epsilon_rdp", "%.4f"), f("delta", "%g"), m.group(1) if m else "", lr, seed,
    last["step"], last["epoch"], acc, ema, f("test_loss", "%.5f"), f("test_perplexity", "%.4f"), "%.1f" % last["wall_s"],
    "%.1f" % (float(cpu[0]) + float(cpu[1])) if len(cpu) == 2 else "", build])
PY
}
HEADER="phase,task,dataset,model,privacy,epsilon,epsilon_rdp,delta,sigma,lr,seed,steps,epochs,test_accuracy,test_accuracy_ema,test_loss,test_perplexity,seconds,cpu_seconds,build"

if [ "$SUMMARY_ONLY" = 0 ]; then
  build=$("$DPTRAIN" --version | sed -n 's/^build: //p')
  case "$PHASE $ONLY " in search*" topic "*|search*" lm "*|all*" topic "*|all*" lm "*)
    if ! DPTRAIN_BUILD_DIR=$BUILD_DIR PYTHONPATH=$ROOT/python "$PYTHON" -c "import dptrain" 2>/dev/null; then
      echo "run.sh: building the Python module into $BUILD_DIR (python/build_ffi.py)" >&2
      "$PYTHON" "$ROOT/python/build_ffi.py" --build-dir "$BUILD_DIR" >/dev/null
    fi
    DPTRAIN_BUILD_DIR=$BUILD_DIR PYTHONPATH=$ROOT/python "$PYTHON" "$HERE/prepare_data.py" --out "$DATA" \
      --topic-len "$TOPIC_T" --lm-len "$LM_T" --lm-train "$LM_TRAIN" --lm-val "$LM_VAL" --lm-test "$LM_TEST" "${PREP[@]}" >&2 ;;
  esac
  for task in $ONLY; do
    case $task in
      topic) MODEL=bert_tiny:t$TOPIC_T:v258:c20:p256 EPOCHS=$TOPIC_EPOCHS
             VALDATA=(--dataset "csv:$DATA/topic_fit.csv,$DATA/topic_val.csv" --normalize none)
             TESTDATA=(--dataset fortunes-topic --seq-len "$TOPIC_T" "${TOPIC_SIZE[@]}") ;;
      lm)    MODEL=gpt_tiny:t$LM_T:v258 EPOCHS=$LM_EPOCHS
             VALDATA=(--dataset "csv:$DATA/lm_train.csv,$DATA/lm_val.csv" --targets "$LM_T" --loss token-ce --normalize none)
             TESTDATA=(--dataset "csv:$DATA/lm_train.csv,$DATA/lm_test.csv" --targets "$LM_T" --loss token-ce --normalize none) ;;
      vit)   continue ;;
      *) echo "run.sh: unknown task '$task' (topic, lm, vit)" >&2; exit 2 ;;
    esac
    # ---- search: Adam lr on the validation split, seed 1; nonprivate and eps3 ----
    [ "$PHASE" = final ] || echo "$HEADER" > "$OUT/search_$task.csv"
    for level in nonprivate eps3; do
      [ "$PHASE" = final ] && break
      for lr in $LRS; do
        dir=$OUT/runs/search-$task-$level-lr$lr
        # shellcheck disable=SC2046
        train "$dir" "${VALDATA[@]}" --model "$MODEL" --optimizer adam --lr "$lr" --seed 1 $(privacy_args "$level" "$EPOCHS")
        row search "$task" "$level" "$lr" 1 "$dir" >> "$OUT/search_$task.csv"
      done
    done
    [ "$PHASE" = search ] && continue
    [ -s "$OUT/search_$task.csv" ] || { echo "run.sh: no $OUT/search_$task.csv (run --phase search first)" >&2; exit 2; }
    for level in $LEVELS; do
      echo "$HEADER" > "$OUT/runs_${task}_$level.csv"
      key=$level; [ "$level" = nonprivate ] || key=eps3
      # the lowest validation loss (per token for lm) of the search runs at this level
      lr=$("$PYTHON" -c 'import csv, sys
rs = [r for r in csv.DictReader(open(sys.argv[1])) if r["privacy"] == sys.argv[2]]
print(min(rs, key=lambda r: float(r["test_loss"]))["lr"])' "$OUT/search_$task.csv" "$key")
      echo "chosen: $task $level lr $lr (validation, search at $key)" >&2
      for s in $SEEDS; do
        dir=$OUT/runs/$task-$level-seed$s
        # shellcheck disable=SC2046
        train "$dir" "${TESTDATA[@]}" --model "$MODEL" --optimizer adam --lr "$lr" --seed "$s" $(privacy_args "$level" "$EPOCHS")
        row final "$task" "$level" "$lr" "$s" "$dir" >> "$OUT/runs_${task}_$level.csv"
      done
    done
  done
  case "$PHASE $ONLY " in final*" vit "*|all*" vit "*)
    if [ ! -d "$DATA_DIR/cifar10" ]; then echo "SKIP: vit: CIFAR-10 not found under $DATA_DIR/cifar10" >&2
    else
      # docs/cnn.md's resnet5 recipe (SGD lr 0.5 momentum 0.9, C 1, expected batch 256, EMA
      # 0.999 with warm-up, 5 epochs, epsilon 3, public normalization), not tuned for the ViT
      echo "$HEADER" > "$OUT/runs_vit_eps3.csv"
      vb=256; [ "$SMOKE" = 1 ] && vb=64
      for s in $SEEDS; do
        dir=$OUT/runs/vit-eps3-seed$s
        train "$dir" --dataset cifar10 --data-dir "$DATA_DIR" --normalize public --model vit_cifar \
          --algo dpsgd --sampler poisson --batch-size "$vb" --clip 1 --delta "$DELTA" --target-epsilon 3 \
          --epochs "$VIT_EPOCHS" --max-train "$VIT_TRAIN" "${VIT_SIZE[@]}" --optimizer sgd --lr 0.5 --momentum 0.9 \
          --ema 0.999 --ema-warmup --seed "$s"
        row final vit eps3 0.5 "$s" "$dir" >> "$OUT/runs_vit_eps3.csv"
      done
    fi ;;
  esac
fi

# ---- merge, summary, plot ----
[ "$PHASE" != search ] || { echo "search done: $OUT/search_*.csv" >&2; exit 0; }
ls "$OUT"/runs_*.csv >/dev/null 2>&1 || { echo "run.sh: no $OUT/runs_*.csv" >&2; exit 2; }
"$PYTHON" - "$OUT" <<'PY'
import csv, glob, math, os, statistics, sys
out = sys.argv[1]
order = {"topic": 0, "lm": 1, "vit": 2, "nonprivate": 0, "eps8": 1, "eps3": 2}
def merged(prefix):
    rows, header = [], None
    for p in sorted(glob.glob(os.path.join(out, prefix + "_*.csv")), key=lambda p: [order.get(k, 9) for k in os.path.basename(p)[:-4].split("_")[1:]]):
        r = csv.DictReader(open(p))
        rows += list(r)
        header = header or r.fieldnames
    return rows, header
for prefix in ("runs", "search"):
    rows, header = merged(prefix)
    if header:
        with open(os.path.join(out, prefix + ".csv"), "w", newline="") as f:
            w = csv.DictWriter(f, header, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
rows, _ = merged("runs")
ms = lambda v: (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0)
with open(os.path.join(out, "summary.csv"), "w", newline="") as f, open(os.path.join(out, "summary.dat"), "w") as g:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["task", "dataset", "model", "privacy", "epsilon_max", "seeds", "lr", "metric", "mean", "std",
                "ema_mean", "ema_std", "seconds_per_run", "cpu_seconds_per_run"])
    for key in dict.fromkeys((r["task"], r["privacy"]) for r in rows):
        rs = [r for r in rows if (r["task"], r["privacy"]) == key]
        lm = rs[0]["test_perplexity"] != ""
        metric = "test_perplexity" if lm else "test_accuracy"
        m, s = ms([float(r[metric]) for r in rs])
        em, es = ms([float(r["test_accuracy_ema"]) for r in rs]) if rs[0]["test_accuracy_ema"] else (float("nan"),) * 2
        eps = max(float(r["epsilon"]) for r in rs) if rs[0]["epsilon"] else float("nan")
        cpu = [float(r["cpu_seconds"]) for r in rs if r["cpu_seconds"]]
        w.writerow([key[0], rs[0]["dataset"], rs[0]["model"], key[1], "" if math.isnan(eps) else "%.3f" % eps, len(rs),
                    rs[0]["lr"], metric, "%.2f" % m, "%.2f" % s, "" if math.isnan(em) else "%.2f" % em,
                    "" if math.isnan(es) else "%.2f" % es, "%.0f" % statistics.mean(float(r["seconds"]) for r in rs),
                    "%.0f" % statistics.mean(cpu) if cpu else ""])
        # gnuplot: task privacy mean std ema_mean ema_std
        g.write("%s %s %.4f %.4f %s %s\n" % (key[0], key[1], m, s, "nan" if math.isnan(em) else "%.4f" % em,
                                             "nan" if math.isnan(es) else "%.4f" % es))
PY
cat "$OUT/summary.csv" >&2
command -v gnuplot >/dev/null || { echo "gnuplot missing: no plot" >&2; exit 0; }
D=$OUT/summary.dat
# docs/cnn.md, resnet5 at 5000 (20000) training images, 5 epochs, epsilon 3, one seed: raw / EMA accuracy
case $VIT_TRAIN in 5000) CNN="33.59 37.38" ;; 20000) CNN="39.28 43.45" ;; *) CNN="" ;; esac
CNNPLOT="" # no CNN bars for other sizes
if [ -n "$CNN" ]; then
  printf 'resnet5_raw %s\nresnet5_ema %s\n' $CNN > "$OUT/cnn.dat"
  CNNPLOT=", \"$OUT/cnn.dat\" using (\$0 + 2):2:xtic(1) with boxes lc rgb \"#999999\""
fi
gnuplot <<GP
set terminal pngcairo size 1350,450 noenhanced
set output "$OUT/text_transformers.png"
set multiplot layout 1,3
set style fill solid 0.6 border -1
set boxwidth 0.6
set grid ytics
unset key
set xrange [-0.6:2.6]
set title "fortunes-topic, bert_tiny (T $TOPIC_T)"
set ylabel "test accuracy (%), mean +- std over seeds"
set yrange [0:*]
plot "< grep '^topic ' $D" using 0:3:xtic(2) with boxes lc rgb "#4477aa", "" using 0:3:4 with yerrorbars lc rgb "black" pt 0
set title "fortunes-chars, gpt_tiny (T $LM_T)"
set ylabel "test perplexity exp(mean loss per token)"
plot "< grep '^lm ' $D" using 0:3:xtic(2) with boxes lc rgb "#cc6677", "" using 0:3:4 with yerrorbars lc rgb "black" pt 0
set title "CIFAR-10 ($VIT_TRAIN images), epsilon 3"
set ylabel "test accuracy (%), final epoch (resnet5: docs/cnn.md)"
set yrange [0:70] # fixed: the smoke run may have no point here
set xtics rotate by -25
set xrange [-0.6:3.6]
plot "< grep '^vit ' $D | awk '{ print \"vit_cifar_raw\", \\\$3, \\\$4; print \"vit_cifar_ema\", \\\$5, \\\$6 }'" using 0:2:xtic(1) with boxes lc rgb "#228833", \
     "" using 0:2:3 with yerrorbars lc rgb "black" pt 0 $CNNPLOT
unset multiplot
GP
echo "wrote $OUT/runs.csv, $OUT/search.csv, $OUT/summary.csv, $OUT/text_transformers.png" >&2
