#!/usr/bin/env bash
# PDP-SGD vs DP-SGD vs non-private training, measured by membership inference.
# Same network, data split and seeds for every method; for each: target accuracy, loss
# attack and LiRA (online) AUC / TPR at low FPR, the canary epsilon lower bound, the
# accountant's epsilon (DP-SGD only), training time per epoch and peak memory.
# Writes OUT/results.csv and OUT/tradeoff.png (accuracy vs LiRA TPR at 1% FPR and vs the
# one-run canary lower bound). train_s_per_epoch is the training loop's time (no scoring).
#   usage: run.sh [--smoke] [BIN] [OUT]
#   --smoke (or SMOKE=1): a synthetic CSV, tiny models, 4 shadows: well under a minute.
#   Full: MNIST (DPT_SHARED_DATASETS or /work/shared/datasets), population 1000, 16 shadows.
case "${1:-}" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
set -eu
SMOKE=${SMOKE:-0}
if [ "${1:-}" = "--smoke" ]; then SMOKE=1; shift; fi
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$HERE/../../build/dptrain}
OUT=${2:-$HERE/out$([ "$SMOKE" = 1 ] && echo _smoke)}
mkdir -p "$OUT"
if [ "$SMOKE" = 1 ]; then
  python3 - "$OUT/d.csv" <<'PY'
import random, sys
random.seed(3)
with open(sys.argv[1], "w") as f:
    for i in range(600):
        c = i % 4
        f.write("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(0, 1.5) + (1.0 if j % 4 == c else 0.0)) for j in range(8))))
PY
  DATA=(--dataset "csv:$OUT/d.csv" --population 200 --max-test 200)
  MODEL=mlp:8-64-4:relu; EPOCHS=30; SHADOWS=4; CAN=(--canaries 20 --canary-runs 1); BATCH=20
  EPSS="4"; KAPPAS="0.1"; PROPS="10"
else
  DD=${DPT_SHARED_DATASETS:-/work/shared/datasets}
  DATA=(--dataset mnist --data-dir "$DD" --population 1000 --max-test 1000)
  MODEL=mlp:784-128-10:relu; EPOCHS=20; SHADOWS=16; CAN=(--canaries 100 --canary-runs 1); BATCH=50
  EPSS="1 2 4 8"; KAPPAS="1e-3 1e-2 1e-1 1"; PROPS="10 100"
fi
LR=1e-3
COMMON=("${DATA[@]}" --model "$MODEL" --epochs "$EPOCHS" --batch-size "$BATCH" --lr "$LR" --optimizer adam
        --shadows "$SHADOWS" --bootstrap 100 --threads 1 --seed 7 --quiet --no-plot "${CAN[@]}")
MEMBERS=$(( $(printf '%s\n' "${DATA[@]}" | grep -A1 -- --population | tail -1) / 2 ))
Q=$(python3 -c "print($BATCH / $MEMBERS)")
STEPS=$(python3 -c "print($EPOCHS * max(1, round(1 / $Q)))")
echo "method,param,test_accuracy,loss_auc,lira_online_auc,lira_tpr_0.1pct,lira_tpr_1pct,canary_eps_lb,one_run_eps_lb,epsilon,train_s_per_epoch,max_rss_kb" > "$OUT/results.csv"
run() { # run NAME PARAM flags...
  local name=$1 param=$2; shift 2
  local dir="$OUT/$name-$param"
  echo "== $name $param" >&2
  /usr/bin/time -f "%M" -o "$dir.rss" "$BIN" audit "${COMMON[@]}" "$@" --out "$dir" > "$dir.log" 2>&1 || { cat "$dir.log" >&2; exit 1; }
  python3 - "$dir/summary.json" "$dir.rss" "$name" "$param" "$EPOCHS" >> "$OUT/results.csv" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); rss = open(sys.argv[2]).read().split()[-1]
g = lambda k: s.get(k, float("nan"))
print("%s,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%s,%.4f,%s" % (sys.argv[3], sys.argv[4], g("test_accuracy"), g("loss_auc"),
      g("lira-online_auc"), g("lira-online_tpr_0.1%"), g("lira-online_tpr_1%"), g("canary_epsilon_lower_bound"),
      g("one_run_epsilon_lower_bound"), ("%.4f" % s["epsilon"]) if "epsilon" in s else "none",
      g("target_train_loop_s") / float(sys.argv[5]), rss))
PY
}
run sgd 0 --algo sgd
run l2 1e-3 --algo pdp-sgd --kappa 0 --lambda 1e-3
for k in $KAPPAS; do run pdp-sgd "$k" --algo pdp-sgd --kappa "$k"; done
for e in $EPSS; do
  S=$("$BIN" account --sample-rate "$Q" --steps "$STEPS" --target-epsilon "$e" --delta 1e-5 --json |
      python3 -c "import json,sys; print(json.load(sys.stdin)['sigma'])")
  run pdp-sgd "sigma$S" --algo pdp-sgd --pdp-sigma "$S"   # kappa = (lr sigma)^2 of DP-SGD's sigma
  run dpsgd "eps$e" --algo dpsgd --sigma "$S" --clip 1 --delta 1e-5
done
for p in $PROPS; do run proportional-noise "$p" --algo proportional-noise --prop-sigma "$p"; done
cat > "$OUT/tradeoff.gp" <<GP
set terminal pngcairo size 1200,500
set output '$OUT/tradeoff.png'
set datafile separator ','
set key outside bottom center horizontal
set multiplot layout 1,2
set xlabel 'LiRA (online) TPR at 1% FPR'; set ylabel 'test accuracy'
plot for [m in "sgd l2 pdp-sgd dpsgd proportional-noise"] '$OUT/results.csv' using (strcol(1) eq m ? \$7 : NaN):3 with points pt 7 ps 1.5 title m
set xlabel 'one-run canary epsilon lower bound (95%)'
plot for [m in "sgd l2 pdp-sgd dpsgd proportional-noise"] '$OUT/results.csv' using (strcol(1) eq m ? \$9 : NaN):3 with points pt 7 ps 1.5 title m
unset multiplot
GP
gnuplot "$OUT/tradeoff.gp" 2>/dev/null || { sed -i 's/pngcairo/png/' "$OUT/tradeoff.gp"; gnuplot "$OUT/tradeoff.gp"; }
column -s, -t < "$OUT/results.csv"
echo "wrote $OUT/results.csv and $OUT/tradeoff.png"
