#!/usr/bin/env bash
# bench/dpulr_signal (the directions it compares are the ones the algorithms release) and
# experiments/cifar10_resnet5/signal.sh --smoke end to end. About a second.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
SRC_DIR=${DPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PROBE=$(dirname "$BIN")/bench/dpulr_signal
[ -x "$PROBE" ] || { echo "SKIP: $PROBE not built"; exit 77; }
blobs_csv "$T/d.csv" 600
# field F (1-based) of the line of METHOD and K (draw 0)
field() { awk -F, -v m="$1" -v k="$2" -v f="$3" '$1 == m && $2 == k && $3 == 0 { print $f }' "$T/p.csv"; }
# C far above every norm: nothing is clipped, so DP-SGD's direction is the gradient and
# DP-ULR's equals the unclipped estimator's; at large K the estimator approaches the gradient
expect_ok "$PROBE" "csv:$T/d.csv" "$T" mlp:4-16-3:tanh 500 4,1024 1 1000 0.01
printf '%s\n' "$LAST_OUT" > "$T/p.csv"
g=$(field gradient 0 4)
check '[ -n "$g" ] && [ "$g" = "$(field gradient 0 6)" ] && [ "$(field gradient 0 5)" = 1 ]' \
  "the gradient's proj $g is not its norm $(field gradient 0 6) (or its cos not 1)"
check '[ -n "$g" ] && awk -v a="$(field dpsgd 0 4)" -v g="$g" "BEGIN { exit !(a > 0 && (a - g)^2 < 1e-10 * g^2) }"' \
  "unclipped DP-SGD's proj $(field dpsgd 0 4) is not the gradient's norm $g"
check '[ "$(field dpsgd 0 5)" = 1 ]' "unclipped DP-SGD's cos is $(field dpsgd 0 5), not 1"
check '[ "$(field dpulr 4 4),$(field dpulr 4 6)" = "$(field ulr_unclipped 4 4),$(field ulr_unclipped 4 6)" ]' \
  "DP-ULR without clipping differs from the non-private estimator"
check 'awk -v c="$(field dpulr 1024 5)" -v d="$(field dpulr 4 5)" "BEGIN { exit !(c > 0.999 && c > d) }"' \
  "the estimate at K 1024 is not closer to the gradient (cos $(field dpulr 1024 5)) than at K 4 ($(field dpulr 4 5))"
# C = 1: every released direction is a mean of vectors of norm <= 1
expect_ok "$PROBE" "csv:$T/d.csv" "$T" mlp:4-16-3:tanh 500 4 1 1 0.1
printf '%s\n' "$LAST_OUT" > "$T/p.csv"
check 'awk -F, "NR > 1 && (\$2 == \"dpsgd\" || \$2 == \"dpulr\") && \$6 > 1.000001 { bad = 1 } END { exit bad }" "$T/p.csv"' \
  "a clipped direction has norm above C"
check 'awk -v a="$(field dpsgd 0 6)" "BEGIN { exit !(a < 0.99) }"' "DP-SGD at C 1 was not clipped (norm $(field dpsgd 0 6))"
expect_fail "K is a comma-separated list" "$PROBE" "csv:$T/d.csv" "$T" mlp:4-16-3:tanh 500 4,x
expect_fail "need 1 <= B <= 600" "$PROBE" "csv:$T/d.csv" "$T" mlp:4-16-3:tanh 601
for bad in "4 0 1 0.1" "4 1 -1 0.1" "4 1 nan 0.1" "4 1 1 0" "4 1 1 nan"; do  # K R C s: R 0, C <= 0 or NaN, s 0 or NaN
  expect_fail "R >= 1, C > 0, s > 0" "$PROBE" "csv:$T/d.csv" "$T" mlp:4-16-3:tanh 100 $bad
done
printf '0,1,2\n1,x,3\n' > "$T/bad.csv"
expect_fail "bad.csv" "$PROBE" "csv:$T/bad.csv" "$T" mlp:2-4-2:tanh 2
# the experiment's smoke configuration: its CSVs, summary and plot
expect_ok env DPTRAIN_BUILD="$(dirname "$BIN")" OUT="$T/out" bash "$SRC_DIR/experiments/cifar10_resnet5/signal.sh" --smoke
check '[ "$(grep -c "^init,dpulr,[24]," "$T/out/signal.csv")" = 2 ] && [ "$(grep -c "^trained," "$T/out/signal.csv")" = 6 ]' \
  "signal.csv does not hold the init and the trained point's 6 directions each"
check 'grep -q "^init,dpulr,4,1,.*,[0-9.]*$" "$T/out/signal_summary.csv" && grep -q "^trained,dpsgd,0,1," "$T/out/signal_summary.csv"' \
  "signal_summary.csv lacks a DP-ULR row with its ratio or the DP-SGD row"
if command -v gnuplot > /dev/null; then check '[ -s "$T/out/signal.png" ]' "no signal.png"; fi
expect_fail "unknown argument" bash "$SRC_DIR/experiments/cifar10_resnet5/signal.sh" --bogus
# --help prints the header (both scripts of the experiment)
for sh in signal.sh run.sh; do
  expect_ok bash "$SRC_DIR/experiments/cifar10_resnet5/$sh" --help
  check 'grep -q "usage: $sh" <<<"$LAST_OUT" && ! grep -q "^#" <<<"$LAST_OUT" && ! grep -q "set -euo" <<<"$LAST_OUT"' \
    "$sh --help does not print its header alone"
done
harness_end
