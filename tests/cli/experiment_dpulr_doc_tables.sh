#!/usr/bin/env bash
# Every results table of docs/dpulr.md that follows a marker <!-- md_tables.py KIND ARGS --> is
# what experiments/dpulr_table1/md_tables.py prints from the committed CSVs now (no number in
# it typed by hand), the check notices a changed number in the doc or in a CSV, `write` puts
# the CSVs' numbers back, and bad input names the doc line and the problem. Needs neither the
# binary nor the datasets; about a second.
set -u
TOOL=experiments/dpulr_table1/md_tables.py
source "$(dirname "$0")/lib/py_tool.sh"

# the doc's marked tables are what the CSVs give, and there are as many as we put there
run 0 check "$SRC/docs/dpulr.md"
n=$(grep -c '^<!-- md_tables\.py ' "$SRC/docs/dpulr.md")
[ "$n" -ge 9 ] || fail "docs/dpulr.md has $n marked tables, expected at least 9"

# a number changed in (a copy of) the doc: exit 1, a diff naming the doc line; write repairs it
sed 's/^| 19 (best) | 14839 | \*\*48.40%\*\* |/| 19 (best) | 14839 | **48.41%** |/' "$SRC/docs/dpulr.md" > "$T/doc.md"
cmp -s "$T/doc.md" "$SRC/docs/dpulr.md" && fail "the sed did not change the doc copy"
run 1 check "$T/doc.md"
has out "-| 19 (best) | 14839 | **48.41%** |"
has out "+| 19 (best) | 14839 | **48.40%** |"
has out "--- $T/doc.md line "
has err "differs from what its command prints from the CSVs"
run 0 write "$T/doc.md"
cmp -s "$T/doc.md" "$SRC/docs/dpulr.md" || fail "write did not restore the doc"
# a row dropped from a table is noticed too
awk '!/^\| dpsgd \| small \| 500 \| 8 \| 3 \|/ || done++' "$SRC/docs/dpulr.md" > "$T/doc.md"
run 1 check "$T/doc.md"
has out "+| dpsgd | small | 500 | 8 | 3 |"

# a changed CSV reaches the table: a copy of the CIFAR results with seed 2's best epoch raised
R=$SRC/experiments/cifar10_resnet5/results/results.csv
sed 's/^\(dpsgd+seed2,25,[0-9]*,,\)0.4879,/\10.4979,/' "$R" > "$T/r.csv"
cmp -s "$T/r.csv" "$R" && fail "the sed did not change the CSV copy"
run 0 cifar_seeds "$R" 25 dpsgd dpsgd+seed2 dpsgd+seed3
printf '# x\n\n<!-- md_tables.py cifar_seeds %s 25 dpsgd dpsgd+seed2 dpsgd+seed3 -->\n' "$T/r.csv" > "$T/d.md"
cat "$T/out" >> "$T/d.md"
run 1 check "$T/d.md"
has out "+| 2 | 25 | 25 (49.79%) | 49.79% | 1.0777 / 0.8888 |"
has out "+| mean +- std | | 48.71 +- 0.96% | 48.26 +- 1.33% | |"   # by hand: best 48.40 49.79 47.95, epoch 25 47.55 49.79 47.44

# each generator against numbers known by hand: a made-up run of 3 epochs of 10 steps, the
# last one stopped after 4 steps
cat > "$T/c.csv" <<'CSV'
run,epoch,step,train_loss,test_accuracy,epsilon_rdp,epsilon_pld,delta,wall_s,noise,seed
a,1,10,,0.10,0.5,0.25,1e-05,10.4,x,7
a,2,20,,0.30,0.75,0.5,1e-05,30.0,x,7
a,3,24,,0.20,0.8,,1e-05,35.0,x,7
b,1,10,,0.40,0.5,,1e-05,5,y,8
b,2,20,,0.35,0.75,,1e-05,9,y,8
CSV
run 0 cifar_run "$T/c.csv" a 1
has out "| 1 | 10 | 10.00% | 0.5000 | 0.2500 | 10 |"
has out "| 2 (best) | 20 | **30.00%** | 0.7500 | 0.5000 | 20 |"
run 0 cifar_seeds "$T/c.csv" 2 a b
has out "| 7 | 3 | 2 (30.00%) | 30.00% | 0.7500 / 0.5000 |"
has out "| 8 | 2 | 1 (40.00%) | 35.00% | 0.7500 / - |"
has out "| mean +- std | | 35.00 +- 7.07% | 32.50 +- 3.54% | |"
# upto:N: the best epoch among epochs 1..N only (a's best, epoch 2, is past N = 1)
run 0 cifar_seeds "$T/c.csv" upto:1 a b
has out "| seed | epochs | best epoch up to 1 (test acc) | epoch 1 |"
has out "| 7 | 3 | 1 (10.00%) | 10.00% | 0.5000 / 0.2500 |"
has out "| mean +- std | | 25.00 +- 21.21% | 25.00 +- 21.21% | |"
run 2 cifar_seeds "$T/c.csv" upto:x a b
has err "the epoch is an integer or upto:INTEGER, not 'upto:x'"
run 0 cifar_curves "$T/c.csv" 10 1 "a=A" "b=B"
has out "| epoch | A | B | epsilon RDP (Balle) |"
has out "| 1 | 10.00% | **40.00%** (its best) | 0.5000 |"
has out "| 2 | **30.00%** (its best) | 35.00% | 0.7500 |"
has out "| 3 | 20.00% (4 of 10 steps; stopped) |  | 0.8000 (after 24 steps) |"
# only:LIST: those epochs alone (b's best, epoch 1, is among them and marked; a's best, 2, is not)
run 0 cifar_curves "$T/c.csv" 10 only:1 "a=A" "b=B"
has out "| 1 | 10.00% | **40.00%** (its best) | 0.5000 |"
[ "$(grep -c "^| [0-9]" "$T/out")" = 1 ] || fail "only:1 printed rows other than epoch 1"
# runs from a second CSV (named among the runs, before them); one of another q or sigma0
# (epsilon differs at an epoch both have whole) cannot share the epsilon column
cat > "$T/c2.csv" <<'CSV'
run,epoch,step,train_loss,test_accuracy,epsilon_rdp,epsilon_pld,delta,wall_s,noise,seed
d,1,10,,0.25,0.5,,1e-05,6,z,9
d,2,20,,0.45,0.75,,1e-05,12,z,9
e,1,10,,0.25,0.6,,1e-05,6,z,9
CSV
run 0 cifar_curves "$T/c.csv" 10 1,2 "a=A" "$T/c2.csv" "d=D"
has out "| epoch | A | D | epsilon RDP (Balle) |"
has out "| 1 | 10.00% | 25.00% | 0.5000 |"
has out "| 2 | **30.00%** (its best) | **45.00%** (its best) | 0.7500 |"
run 2 cifar_curves "$T/c.csv" 10 1 "a=A" "$T/c2.csv" "e=E"
has err "c2.csv: run 'E' has epsilon 0.6 at epoch 1 where 'A' has 0.5"
run 2 cifar_curves "$T/c.csv" 10 1 "a=A" "$T/c2.csv" "a=A2"
has err "c2.csv has no run 'a' (its runs: d, e)"
run 2 cifar_curves "$T/c.csv" 10 1 "$T/c2.csv" "d=D"
has err "name the runs as RUN=LABEL"
run 2 cifar_curves "$T/c.csv" 10 1 "a=A" "$T/c2.csv"
has err "name the runs as RUN=LABEL"
# cifar_plateau, the rule over 20 epochs (last 5 against the 5 twenty before, best 20 or more
# back), on made-up runs at 10 steps per epoch, by hand:
# - p: 25 whole epochs (just enough), 30% but 50% at epoch 3; its partial epoch 26 (90%) is left
#   out. Best 3, 22 back; rise mean(21-25) - mean(1-5) = 30 - 34 = -4: stopped.
# - q: 30% for 25 epochs but 31% at the last: rise +0.20, but its best is its last epoch: rising
#   (by the rise alone it would have stopped).
# - s: 30% for 26 epochs but 31% at epoch 11: rise 0, best 15 back: rising (stopped over 10).
# - t: 40% at epoch 1, 20% at 2-6, 30% from 7 to 26: best 25 back, but rise mean(22-26) -
#   mean(2-6) = +10: rising (over 10, mean(12-16) = 30, it had stopped).
# - r: 24 epochs, one too few for a rise.
{ echo "run,epoch,step,train_loss,test_accuracy,epsilon_rdp,epsilon_pld,delta,wall_s,noise,seed"
  for e in $(seq 1 26); do
    pa=0.30; [ "$e" = 3 ] && pa=0.50
    qa=0.30; [ "$e" = 25 ] && qa=0.31
    sa=0.30; [ "$e" = 11 ] && sa=0.31
    ta=0.30; [ "$e" -le 6 ] && ta=0.20; [ "$e" = 1 ] && ta=0.40
    [ "$e" -le 25 ] && echo "p,$e,$((10 * e)),,$pa,0.5,,1e-05,$e,x,1"
    [ "$e" -le 25 ] && echo "q,$e,$((10 * e)),,$qa,0.5,,1e-05,$e,x,1"
    echo "s,$e,$((10 * e)),,$sa,0.5,,1e-05,$e,x,1"
    echo "t,$e,$((10 * e)),,$ta,0.5,,1e-05,$e,x,1"
    [ "$e" -le 24 ] && echo "r,$e,$((10 * e)),,0.20,0.5,,1e-05,$e,x,1"
  done
  echo "p,26,254,,0.90,0.5,,1e-05,26,x,1"; } > "$T/pl.csv"
run 0 cifar_plateau "$T/pl.csv" 10 "p=P" "q=Q" "s=S" "t=T" "r=R"
has out "| run | whole epochs | best epoch (test acc) | last epoch | 20-epoch rise (last 5 against 5 20 before) |"
has out "| P | 25 | 3 (50.00%) | 30.00% | -4.00 | 22 | yes |"
has out "| Q | 25 | 25 (31.00%) | 31.00% | +0.20 | 0 | no |"
has out "| S | 26 | 11 (31.00%) | 30.00% | +0.00 | 15 | no |"
has out "| T | 26 | 1 (40.00%) | 30.00% | +10.00 | 25 | no |"
has out "| R | 24 | 1 (20.00%) | 20.00% | (fewer than 25 epochs) | 23 | no |"
run 2 cifar_plateau "$T/pl.csv" 7 "p=P"
has err "run p has no whole epoch of 7 steps"
run 2 cifar_plateau "$T/pl.csv" 10 p
has err "name the runs as RUN=LABEL"
# signal: signal.sh's summary (the gradient's own row is left out; one draw has no +-)
cat > "$T/sig.csv" <<'CSV'
point,method,K,draws,proj_mean,proj_std,cos_mean,dpsgd_over_dpulr
p0,gradient,0,1,2.5,0,1,
p0,dpsgd,0,1,0.08,0,0.9,
p0,dpulr,4,3,0.02,0.005,0.5,4
p0,ulr_unclipped,4,3,1.25,0.25,0.3,
CSV
run 0 signal "$T/sig.csv"
has out "| p0 | DP-SGD (clipped) |  | 1 | 0.08 | 0.900 |  |"
has out "| p0 | DP-ULR (clipped) | 4 | 3 | 0.02 +- 0.005 | 0.500 | 4.00 |"
has out "| p0 | ULR (not clipped) | 4 | 3 | 1.25 +- 0.25 | 0.300 |  |"
[ "$(grep -c "^| p0 |" "$T/out")" = 3 ] || fail "signal did not print exactly the three directions of p0"
sed 's/^p0,ulr_unclipped,/p0,other,/' "$T/sig.csv" > "$T/sig2.csv"
run 2 signal "$T/sig2.csv"
has err "unknown method 'other'"
# diagnose.sh vr's table: accuracy per epoch, the last epoch's norm, s_l and clip fractions
cat > "$T/v.csv" <<'CSV'
run,step_first,step_last,epoch,test_acc,test_loss,update_norm_mean,direction_norm_mean,m0_s_median,m0_clipped_frac,m1_s_median,m1_clipped_frac
u,1,3,1,10.00,2.3,0.1,5.5,0.2,1.000,0.3,0.900
u,4,6,2,12.50,2.2,0.1,5.25,0.25,0.950,0.35,0.850
w,1,3,1,20.00,2.3,0.1,4.5,0.1,1.000,0.1,1.000
w,4,6,2,30.00,2.1,0.1,4.75,0.1,0.990,0.1,0.980
CSV
run 0 vr "$T/v.csv" 1,2
has out "| run | epoch 1 | epoch 2 | released direction norm | s_l median (modules 0-1) | fraction clipped (modules 0-1) |"
has out "| u | 10.00 | 12.50 | 5.25 | 0.25 / 0.35 | 0.950 / 0.850 |"
has out "| w | 20.00 | 30.00 | 4.75 | 0.1 / 0.1 | 0.990 / 0.980 |"
run 2 vr "$T/v.csv" 1,3
has err "$T/v.csv: run u has no epoch 3"

# bad input names the doc line, the file and the problem
printf '# x\n\n<!-- md_tables.py cifar_run %s nosuchrun 1 -->\n| old |\n' "$T/c.csv" > "$T/d.md"
run 2 check "$T/d.md"
has err "$T/d.md line 3: $T/c.csv has no run 'nosuchrun' (its runs: a, b)"
printf '<!-- md_tables.py cifar_run %s a 1,9 -->\n' "$T/c.csv" > "$T/d.md"
run 2 check "$T/d.md"
has err "run a has no epoch 9 (it has 1-3)"
printf '<!-- md_tables.py median %s -->\n' "$T/c.csv" > "$T/d.md"
run 2 check "$T/d.md"
has err "unknown table 'median'"
printf '<!-- md_tables.py figure3 %s/nope.csv -->\n' "$T" > "$T/d.md"
run 2 check "$T/d.md"
has err "cannot read $T/nope.csv"
printf '<!-- md_tables.py cifar_seeds %s 2 -->\n' "$T/c.csv" > "$T/d.md"
run 2 check "$T/d.md"
has err "'cifar_seeds' takes 3 or more arguments, got 2"
sed 's/^a,2,20,,0.30,/a,2,20,,nan,/' "$T/c.csv" > "$T/cnan.csv"
run 2 cifar_run "$T/cnan.csv" a 1
has err "$T/cnan.csv: test_accuracy is 'nan', not a finite number (run a, epoch 2)"
cut -d, -f1-4 "$T/c.csv" > "$T/c4.csv"
run 2 cifar_run "$T/c4.csv" a 1
has err "$T/c4.csv has no column test_accuracy"
printf '# nothing here\n' > "$T/d.md"
run 2 check "$T/d.md"
has err "has no line '<!-- md_tables.py KIND ARGS -->' marking a table"
run 2 check "$T/nope.md"
has err "cannot read the doc $T/nope.md"
echo "doc tables ok"
