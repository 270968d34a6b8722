#!/usr/bin/env bash
# PDP-SGD vs DP-SGD vs non-private training, measured by membership inference, over seeds.
# Same network, data split and seeds for every method; for each run: test accuracy, loss
# attack and LiRA (online) AUC / TPR at low FPR, the canary epsilon lower bounds, the
# accountant's epsilon (DP-SGD only), training time per epoch and peak memory.
# Blocks (BLOCKS, default "adam sgd tuned"):
#   adam   the original cells (Adam lr 1e-3): sgd, l2, pdp-sgd kappa grid, DP-SGD at
#          epsilon 1/2/4/8, pdp-sgd with kappa = (adam lr * sigma_eps)^2 (OUR mapping of
#          Adam's lr, method "pdp-sgd-adammap"), proportional noise.
#   sgd    the paper's form (plain SGD, lr 0.1): pdp-sgd --pdp-sigma sigma_eps (kappa =
#          (eta sigma)^2 as the paper derives it), proportional noise of the same sigma,
#          DP-SGD with the same sigma and optimizer.
#   tuned  DP-SGD at equal utility: for each target in TARGETS, sigma is tuned by bisection
#          (log scale, TUNE_ITERS steps) until DP-SGD's validation accuracy (mean over SEEDS)
#          is closest to the target's; validation = training examples outside the audit's
#          population (never the test split); then audited like the others. A target
#          OPT:METHOD:PARAM is tuned with DP-SGD under the same optimizer, TARGET@OPT2 under OPT2.
#          The closest sigma may still miss the target: compare the two accuracies in tuning.csv.
# Writes OUT/results.csv (one row per run), OUT/summary.csv and OUT/summary.md (mean, std
# over seeds per cell), OUT/tuning.csv (every sigma tried), OUT/tradeoff.png (gnuplot).
# A run whose row file exists is not redone (rerun the same command to finish a grid).
#   usage: run.sh [--smoke] [BIN] [OUT]
#   env: SEEDS (default "7 8 9"), BLOCKS, TARGETS, EPSS_SGD (epsilons of the sgd block, default
#   "1 8"), TUNE_ITERS (default 7), TUNE_LO (smallest
#   sigma tried, default 0.05), PAR (parallel seeds, default 1; results do not depend on it)
#   --smoke (or SMOKE=1): a synthetic CSV, tiny models, 4 shadows, 2 seeds, a reduced grid.
#   Full: MNIST (DPT_SHARED_DATASETS or /work/shared/datasets): population = training images
#   0-999, validation = training images 1000-1999, test = test images 0-999, 16 shadows.
case "${1:-}" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
set -eu
SMOKE=${SMOKE:-0}
if [ "${1:-}" = "--smoke" ]; then SMOKE=1; shift; fi
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$HERE/../../build/dptrain}
OUT=${2:-$HERE/out$([ "$SMOKE" = 1 ] && echo _smoke)}
mkdir -p "$OUT/data" "$OUT/runs" "$OUT/tune"
PAR=${PAR:-1}
TUNE_LO=${TUNE_LO:-0.05}   # the bisection's smallest sigma (epsilon about 8000 in the full run)
BLOCKS=${BLOCKS:-adam sgd tuned}
if [ "$SMOKE" = 1 ]; then
  python3 - "$OUT/data" <<'PY'
import random, sys
random.seed(3)
rows = []
for i in range(600):
    c = i % 4
    rows.append("%d,%s\n" % (c, ",".join("%.4f" % (random.gauss(0, 1.5) + (1.0 if j % 4 == c else 0.0)) for j in range(8))))
for name, lo in (("pop", 0), ("val", 200), ("test", 400)):
    open("%s/%s.csv" % (sys.argv[1], name), "w").writelines(rows[lo:lo + 200])
PY
  POP=200; NORM=none
  MODEL=mlp:8-32-4:relu; EPOCHS=6; SHADOWS=4; CAN=(--canaries 20 --canary-runs 1); BATCH=20
  SEEDS=${SEEDS:-1 2}; TUNE_ITERS=${TUNE_ITERS:-2}
  EPSS_ADAM="4"; KAPPAS="0.1"; PROPS="10"; EPSS_SGD="4"; L2=""; TARGETS=${TARGETS:-adam:pdp-sgd:kappa=0.1}
else
  DD=${DPT_SHARED_DATASETS:-/work/shared/datasets}
  [ -s "$OUT/data/test.csv" ] || python3 - "$DD" "$OUT/data" <<'PY'
# MNIST as CSV (label, pixels / 255): pop = training images 0-999 (the audit's population),
# val = training images 1000-1999 (tuning only), test = test images 0-999.
import gzip, struct, sys
dd, out = sys.argv[1], sys.argv[2]
def load(stem):
    with gzip.open("%s/mnist/%s-images-idx3-ubyte.gz" % (dd, stem)) as f:
        _, n, r, c = struct.unpack(">IIII", f.read(16)); x = f.read()
    with gzip.open("%s/mnist/%s-labels-idx1-ubyte.gz" % (dd, stem)) as f:
        f.read(8); y = f.read()
    return x, y, r * c
def write(name, data, lo, hi):
    x, y, d = data
    with open("%s/%s.csv" % (out, name), "w") as f:
        for i in range(lo, hi):
            f.write("%d,%s\n" % (y[i], ",".join("0" if v == 0 else "%.6g" % (v / 255.0) for v in x[i * d:(i + 1) * d])))
tr = load("train"); write("pop", tr, 0, 1000); write("val", tr, 1000, 2000); write("test", load("t10k"), 0, 1000)
PY
  POP=1000; NORM=affine:0.1307:0.3081   # MNIST's published constants (docs/data.md), every method
  MODEL=mlp:784-128-10:relu; EPOCHS=20; SHADOWS=16; CAN=(--canaries 100 --canary-runs 1); BATCH=50
  SEEDS=${SEEDS:-7 8 9}; TUNE_ITERS=${TUNE_ITERS:-7}
  EPSS_ADAM="1 2 4 8"; KAPPAS="1e-3 1e-2 1e-1 1"; PROPS="10 100"; EPSS_SGD=${EPSS_SGD:-1 8}; L2="1e-3"
  TARGETS=${TARGETS:-adam:pdp-sgd:kappa=0.1 adam:pdp-sgd:kappa=1 sgd:pdp-sgd:sigma-eps1 sgd:pdp-sgd:sigma-eps8 sgd:pdp-sgd:sigma-eps8@adam}
fi
D=$OUT/data
TEST=(--dataset "csv:$D/pop.csv,$D/test.csv" --population "$POP" --max-test "$POP")
VAL=(--dataset "csv:$D/pop.csv,$D/val.csv" --population "$POP" --max-test "$POP")
COMMON=(--normalize "$NORM" --model "$MODEL" --epochs "$EPOCHS" --batch-size "$BATCH" --threads 1 --quiet --no-plot)
AUDIT=(--shadows "$SHADOWS" --bootstrap 100 "${CAN[@]}")
Q=$(python3 -c "print($BATCH / ($POP // 2))")
STEPS=$(python3 -c "print($EPOCHS * max(1, round(1 / $Q)))")
sigma_of() { # DP-SGD noise multiplier for epsilon $1 (delta 1e-5) over exactly the steps run
  "$BIN" account --sample-rate "$Q" --steps "$STEPS" --target-epsilon "$1" --delta 1e-5 --json |
    python3 -c "import json,sys; print('%.6g' % json.load(sys.stdin)['sigma'])"
}
opt_flags() { # OPT -> optimizer flags
  case $1 in adam) echo "--optimizer adam --lr 1e-3" ;; sgd) echo "--optimizer sgd --lr 0.1" ;; esac
}
HDR="method,param,optimizer,lr,seed,test_accuracy,loss_auc,lira_online_auc,lira_tpr_0.1pct,lira_tpr_1pct,canary_eps_lb,one_run_eps_lb,epsilon,train_s_per_epoch,max_rss_kb"
audit_one() { # audit_one NAME PARAM OPT SEED flags... -> runs/NAME_PARAM_OPT_sSEED/row.csv
  local name=$1 param=$2 opt=$3 seed=$4; shift 4
  local dir="$OUT/runs/${name}_${param}_${opt}_s${seed}"
  [ -s "$dir/row.csv" ] && return 0
  rm -rf "$dir"
  # shellcheck disable=SC2046
  if ! /usr/bin/time -f "%M" -o "$dir.rss" "$BIN" audit "${TEST[@]}" "${COMMON[@]}" "${AUDIT[@]}" $(opt_flags "$opt") \
       --seed "$seed" "$@" --out "$dir" > "$dir.log" 2>&1; then cat "$dir.log" >&2; return 1; fi
  python3 - "$dir/summary.json" "$dir.rss" "$name" "$param" "$opt" "$seed" "$EPOCHS" "$(opt_flags "$opt")" > "$dir/row.tmp" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); rss = open(sys.argv[2]).read().split()[-1]
g = lambda k: s.get(k, float("nan"))
lr = sys.argv[8].split()[-1]
print("%s,%s,%s,%s,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%s,%.4f,%s" % (sys.argv[3], sys.argv[4], sys.argv[5], lr,
      sys.argv[6], g("test_accuracy"), g("loss_auc"), g("lira-online_auc"), g("lira-online_tpr_0.1%"),
      g("lira-online_tpr_1%"), g("canary_epsilon_lower_bound"), g("one_run_epsilon_lower_bound"),
      ("%.4f" % s["epsilon"]) if "epsilon" in s else "none", g("target_train_loop_s") / float(sys.argv[7]), rss))
PY
  mv "$dir/row.tmp" "$dir/row.csv"
}
val_acc() { # val_acc OPT SEED flags... -> validation accuracy of the target model (no attack)
  local opt=$1 seed=$2; shift 2
  local dir; dir=$(mktemp -d "$OUT/tune/v.XXXXXX")
  # shellcheck disable=SC2046
  "$BIN" audit "${VAL[@]}" "${COMMON[@]}" --shadows 0 --bootstrap 0 $(opt_flags "$opt") --seed "$seed" "$@" \
    --out "$dir" > "$dir.log" 2>&1 || { cat "$dir.log" >&2; return 1; }
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['test_accuracy'])" "$dir/summary.json"
  rm -rf "$dir" "$dir.log"
}
val_mean() { # val_mean OPT flags... -> "mean std" over SEEDS
  local opt=$1; shift
  local accs=""
  for s in $SEEDS; do accs="$accs $(val_acc "$opt" "$s" "$@")"; done
  python3 -c "import statistics as st, sys; a = [float(v) for v in sys.argv[1:]]; \
print('%.4f %.4f' % (st.mean(a), st.stdev(a) if len(a) > 1 else 0.0))" $accs
}
for_seeds() { # for_seeds NAME PARAM OPT flags...: one audit per seed, PAR at a time
  local name=$1 param=$2 opt=$3; shift 3
  local n=0
  for s in $SEEDS; do
    echo "== $name $param $opt seed $s" >&2
    audit_one "$name" "$param" "$opt" "$s" "$@" &
    n=$((n + 1)); if [ "$n" -ge "$PAR" ]; then wait -n || exit 1; n=$((n - 1)); fi
  done
  while [ "$n" -gt 0 ]; do wait -n || exit 1; n=$((n - 1)); done
}
declare -A SIG
for e in $EPSS_ADAM $EPSS_SGD; do SIG[$e]=$(sigma_of "$e"); done
target_flags() { # OPT:METHOD:PARAM -> the flags of that cell
  local p=${1##*:}
  case $p in
    kappa=*) echo "--algo pdp-sgd --kappa ${p#kappa=}" ;;
    sigma-eps*) echo "--algo pdp-sgd --pdp-sigma ${SIG[${p#sigma-eps}]}" ;;
  esac
}
if [[ " $BLOCKS " == *" adam "* ]]; then
  for_seeds sgd 0 adam --algo sgd
  for l in $L2; do for_seeds l2 "lambda=$l" adam --algo pdp-sgd --kappa 0 --lambda "$l"; done
  for k in $KAPPAS; do for_seeds pdp-sgd "kappa=$k" adam --algo pdp-sgd --kappa "$k"; done
  for e in $EPSS_ADAM; do
    S=${SIG[$e]}
    # kappa = (adam lr * sigma)^2: OUR mapping of Adam's lr (the paper's form is plain SGD)
    for_seeds pdp-sgd-adammap "sigma-eps$e" adam --algo pdp-sgd --pdp-sigma "$S"
    for_seeds dpsgd "eps$e" adam --algo dpsgd --sigma "$S" --clip 1 --delta 1e-5
  done
  for p in $PROPS; do for_seeds proportional-noise "prop-sigma=$p" adam --algo proportional-noise --prop-sigma "$p"; done
fi
if [[ " $BLOCKS " == *" sgd "* ]]; then
  for_seeds sgd 0 sgd --algo sgd
  for e in $EPSS_SGD; do
    S=${SIG[$e]}
    for_seeds pdp-sgd "sigma-eps$e" sgd --algo pdp-sgd --pdp-sigma "$S"   # kappa = (0.1 S)^2, the paper's
    for_seeds proportional-noise "sigma-eps$e" sgd --algo proportional-noise --prop-sigma "$S"
    for_seeds dpsgd "eps$e" sgd --algo dpsgd --sigma "$S" --clip 1 --delta 1e-5
  done
fi
if [[ " $BLOCKS " == *" tuned "* ]]; then
  [ -s "$OUT/tuning.csv" ] || echo "target,optimizer,target_val_acc,target_val_std,sigma,dpsgd_val_acc,dpsgd_val_std,chosen" > "$OUT/tuning.csv"
  for tg in $TARGETS; do
    opt=${tg%%:*}; tp=${tg##*:}; tp=${tp%@*}
    dopt=$opt; [[ $tg == *@* ]] && dopt=${tg##*@}   # TARGET@OPT: DP-SGD tuned with optimizer OPT
    if [ -s "$OUT/tune/$tg.chosen" ]; then S=$(cat "$OUT/tune/$tg.chosen"); else
      # shellcheck disable=SC2046
      read -r tmean tstd <<<"$(val_mean "$opt" $(target_flags "${tg%@*}"))"
      lo=$TUNE_LO; hi=8; best=""; bestd=9; rows=""
      for _ in $(seq "$TUNE_ITERS"); do
        mid=$(python3 -c "import math; print('%.4g' % math.sqrt($lo * $hi))")
        read -r m sd <<<"$(val_mean "$dopt" --algo dpsgd --sigma "$mid" --clip 1 --delta 1e-5)"
        echo "   tune $tg: target val $tmean, dpsgd sigma $mid val $m" >&2
        rows="$rows$tg,$dopt,$tmean,$tstd,$mid,$m,$sd"$'\n'
        d=$(python3 -c "print(abs($m - $tmean))")
        if python3 -c "import sys; sys.exit(0 if $d < $bestd else 1)"; then best=$mid; bestd=$d; fi
        # more accuracy than the target: DP-SGD can afford more noise
        if python3 -c "import sys; sys.exit(0 if $m >= $tmean else 1)"; then lo=$mid; else hi=$mid; fi
      done
      printf '%s' "$rows" | awk -F, -v b="$best" 'BEGIN{OFS=","} {print $0, ($5==b ? "yes" : "no")}' >> "$OUT/tuning.csv"
      S=$best; echo "$S" > "$OUT/tune/$tg.chosen"
    fi
    for_seeds dpsgd-tuned "match-$opt-$tp" "$dopt" --algo dpsgd --sigma "$S" --clip 1 --delta 1e-5
  done
fi
echo "$HDR" > "$OUT/results.csv"
find "$OUT/runs" -name row.csv | sort | xargs cat >> "$OUT/results.csv"
python3 - "$OUT" <<'PY'
# mean and sample std over seeds per (method, param, optimizer) cell
import csv, statistics as st, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(out + "/results.csv")))
cells = {}
for r in rows:
    cells.setdefault((r["optimizer"], r["method"], r["param"]), []).append(r)
keys = ["test_accuracy", "loss_auc", "lira_online_auc", "lira_tpr_0.1pct", "lira_tpr_1pct", "canary_eps_lb",
        "one_run_eps_lb", "epsilon", "train_s_per_epoch"]
order = {"sgd": 0, "l2": 1, "pdp-sgd": 2, "pdp-sgd-adammap": 3, "dpsgd": 4, "dpsgd-tuned": 5, "proportional-noise": 6}
with open(out + "/summary.csv", "w") as f, open(out + "/summary.md", "w") as md:
    f.write("optimizer,method,param,lr,seeds," + ",".join("%s_mean,%s_std" % (k, k) for k in keys) + "\n")
    md.write("| optimizer (lr) | method | setting | seeds | test acc. % | loss AUC | LiRA AUC | LiRA TPR@0.1% | "
             "LiRA TPR@1% | canary CP bound* | one-run bound | accountant epsilon |\n" + "|---" * 12 + "|\n")
    for (opt, m, p), rs in sorted(cells.items(), key=lambda kv: (kv[0][0] != "adam", order.get(kv[0][1], 9), kv[0][2])):
        stats = []
        for k in keys:
            v = [float(r[k]) for r in rs if r[k] != "none"]
            stats.append((st.mean(v), st.stdev(v) if len(v) > 1 else 0.0) if v else None)
        f.write("%s,%s,%s,%s,%d,%s\n" % (opt, m, p, rs[0]["lr"], len(rs), ",".join(
            "%.4f,%.4f" % s if s else "none,none" for s in stats)))
        fmt = lambda s, scale=1.0, d=3: "none" if s is None else "%.*f +- %.*f" % (d, s[0] * scale, d, s[1] * scale)
        md.write("| %s (%s) | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n" % (
            opt, rs[0]["lr"], m, p, len(rs), fmt(stats[0], 100, 1), fmt(stats[1]), fmt(stats[2]), fmt(stats[3]),
            fmt(stats[4]), fmt(stats[5], d=2), fmt(stats[6], d=2), fmt(stats[7], d=2)))
PY
cat > "$OUT/tradeoff.gp" <<GP
set terminal pngcairo size 1300,560
set output '$OUT/tradeoff.png'
set datafile separator ','
set key outside bottom center horizontal maxrows 2
set multiplot layout 1,2 title 'PDP-SGD vs DP-SGD: mean +- std over seeds (summary.csv); circles: Adam lr 1e-3, squares: plain SGD lr 0.1'
M = "sgd l2 pdp-sgd pdp-sgd-adammap dpsgd dpsgd-tuned proportional-noise"
set xlabel 'LiRA (online) TPR at 1% FPR'; set ylabel 'test accuracy'
plot for [i=1:words(M)] '$OUT/summary.csv' using (strcol(2) eq word(M,i) && strcol(1) eq 'adam' ? \$14 : NaN):6:15:7 \
       with xyerrorbars lc i pt 7 ps 1.2 title word(M,i), \
     for [i=1:words(M)] '$OUT/summary.csv' using (strcol(2) eq word(M,i) && strcol(1) eq 'sgd' ? \$14 : NaN):6:15:7 \
       with xyerrorbars lc i pt 5 ps 1.2 notitle
set xlabel 'one-run canary epsilon lower bound (95%)'
plot for [i=1:words(M)] '$OUT/summary.csv' using (strcol(2) eq word(M,i) && strcol(1) eq 'adam' ? \$18 : NaN):6:19:7 \
       with xyerrorbars lc i pt 7 ps 1.2 title word(M,i), \
     for [i=1:words(M)] '$OUT/summary.csv' using (strcol(2) eq word(M,i) && strcol(1) eq 'sgd' ? \$18 : NaN):6:19:7 \
       with xyerrorbars lc i pt 5 ps 1.2 notitle
unset multiplot
GP
gnuplot "$OUT/tradeoff.gp" 2>/dev/null || { sed -i 's/pngcairo/png/' "$OUT/tradeoff.gp"; gnuplot "$OUT/tradeoff.gp"; }
cat "$OUT/summary.md"
echo "wrote $OUT/results.csv, $OUT/summary.csv, $OUT/summary.md, $OUT/tuning.csv and $OUT/tradeoff.png"
