#!/usr/bin/env bash
# CLI: what a run directory (--out) guarantees. A non-empty --out is refused unless
# --resume or --overwrite (the issue's scenario: a non-private run into a DP run's
# directory); the ledger is bound to its checkpoint by a run id, checked by eval and
# account --ledger; one run per directory (a second fails at once naming the holder's
# pid); Ctrl-C stops after the current step with everything saved; a crash injected
# between saving and publishing (DPTRAIN_FAULT, --secure) never loses or repeats a metrics
# record; --max-steps inside an epoch publishes that partial epoch; the budget stop
# reports the ledger's step count; settings that a resume cannot honour are errors; a
# private run's progress bar shows no loss and its metrics no train_loss.
set -u
BIN=$1
# the same CLI built with the test hooks (DPTRAIN_FAULT); the installed one has none
FBIN=${DPT_CLI_FAULTS:?DPT_CLI_FAULTS: the dptrain-faults binary (set by ctest)}
source "$(dirname "$0")/lib/harness.sh"
blobs_csv "$T/d.csv" 3000
D=(--dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --threads 1 --no-progress --optimizer sgd --lr 0.5 --batch-size 60)
DP=(--algo dpsgd "${D[@]}" --sigma 1)
steps_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total_sgm_steps"])' "$1"; }
ckpt_step() { python3 - "$1" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
print(json.loads(json.loads(b[8:8 + n])["__metadata__"]["state"])["step"])
PY
}
# metrics.jsonl as "epoch:step[p]" words (p = partial)
records() { python3 -c '
import json, sys
print(" ".join("%d:%d%s" % (o["epoch"], o["step"], "p" if o.get("partial") else "") for o in map(json.loads, open(sys.argv[1]))))' "$1"; }

# -- the issue's scenario: a non-private run into a DP run's directory
expect_ok "$BIN" train "${DP[@]}" --epochs 2 --out "$T/run"
expect_fail "--out $T/run is not empty" "$BIN" train "${D[@]}" --epochs 1 --out "$T/run"
check '[ "$(steps_of "$T/run/ledger.json")" = 100 ] && [ "$(records "$T/run/metrics.jsonl")" = "1:50 2:100" ]' "the refused run touched the DP run's files"
expect_ok "$BIN" account --ledger "$T/run/ledger.json"
expect_ok "$BIN" eval --checkpoint "$T/run/checkpoint.safetensors"
cp "$T/run/ledger.json" "$T/dp_ledger.json"
expect_ok "$BIN" train "${D[@]}" --epochs 1 --out "$T/run" --overwrite
check '[ ! -e "$T/run/ledger.json" ] && [ "$(records "$T/run/metrics.jsonl")" = "1:50" ]' "--overwrite left the old run's files"
check 'grep -q "removed the previous run.s" <<<"$LAST_OUT"' "--overwrite does not say what it removed"
# a refused --overwrite run (its DP-ULR module list is checked at the first step, after the
# directory check) leaves the previous run's files as they were, and a --resume that finds
# no run leaves no directory behind
expect_ok "$BIN" train "${DP[@]}" --epochs 1 --out "$T/keep"
sum_before=$(cd "$T/keep" && sha256sum checkpoint.safetensors ledger.json metrics.jsonl "$(secret_of "$T/keep")")
expect_fail "--modules 'x'" "$BIN" train --algo dpulr "${D[@]}" --optimizer adam --lr 0.001 --sigma0 1 --modules x \
  --epochs 1 --out "$T/keep" --overwrite
check '[ "$(cd "$T/keep" && sha256sum checkpoint.safetensors ledger.json metrics.jsonl "$(secret_of "$T/keep")")" = "$sum_before" ]' \
  "a refused --overwrite run removed or changed the previous run's files"
check '! grep -q "removed the previous run" <<<"$LAST_OUT"' "a refused --overwrite run says it removed the previous run"
expect_fail "--out $T/never does not exist: there is no run to resume" "$BIN" train "${DP[@]}" --epochs 1 \
  --out "$T/never" --resume
check '[ ! -e "$T/never" ]' "a --resume that found no run left $T/never behind"
mkdir "$T/empty"
expect_fail "checkpoint.safetensors: cannot open" "$BIN" train "${DP[@]}" --epochs 1 --out "$T/empty" --resume
check '[ -d "$T/empty" ]' "a --resume in an existing empty directory removed it"
# the old files put back beside the non-private checkpoint: eval and account refuse them
cp "$T/dp_ledger.json" "$T/run/ledger.json"
expect_fail "non-private run" "$BIN" account --ledger "$T/run/ledger.json"
expect_fail "is not the ledger of" "$BIN" eval --checkpoint "$T/run/checkpoint.safetensors"
expect_fail "beside a privacy ledger" "$BIN" train "${D[@]}" --epochs 2 --out "$T/run" --resume
# a ledger of another DP run beside a DP checkpoint
expect_ok "$BIN" train "${DP[@]}" --epochs 1 --out "$T/dp2"
cp "$T/dp_ledger.json" "$T/dp2/ledger.json"
expect_fail "the ledger is of run" "$BIN" account --ledger "$T/dp2/ledger.json"
expect_fail "belongs to run" "$BIN" train "${DP[@]}" --epochs 2 --out "$T/dp2" --resume
expect_fail "exclude each other" "$BIN" train "${D[@]}" --out "$T/dp2" --resume --overwrite

# -- one run per directory; Ctrl-C stops gracefully, a resume continues
"$BIN" train "${DP[@]}" --epochs 100000 --out "$T/long" >"$T/long.out" 2>"$T/long.err" &
pid=$!
for _ in $(seq 1 200); do
  [ -s "$T/long/dptrain.lock" ] && [ -s "$T/long/metrics.jsonl" ] && break
  sleep 0.05
done
expect_fail "in use by another run (process $pid holds its lock)" "$BIN" train "${DP[@]}" --epochs 2 --out "$T/long" --resume
kill -INT $pid
wait $pid
rc=$?
check '[ $rc -eq 130 ]' "interrupted run exited with $rc, want 130"
check 'grep -q "interrupted after step [0-9]*: the checkpoint, ledger and metrics are saved" "$T/long.err" && grep -q -- "--resume" "$T/long.err"' "no graceful-stop message: $(cat "$T/long.err")"
s_ck=$(ckpt_step "$T/long/checkpoint.safetensors"); s_led=$(steps_of "$T/long/ledger.json")
s_met=$(records "$T/long/metrics.jsonl" | tr ' ' '\n' | tail -1 | sed 's/.*://; s/p//')
check '[ "$s_ck" = "$s_led" ] && [ "$s_ck" = "$s_met" ]' "after Ctrl-C: checkpoint $s_ck, ledger $s_led, metrics $s_met steps"
expect_ok "$BIN" train "${DP[@]}" --epochs 100000 --max-steps $((s_ck + 5)) --out "$T/long" --resume
check '[ "$(steps_of "$T/long/ledger.json")" = $((s_ck + 5)) ]' "resume after Ctrl-C did not continue the ledger"

# -- a crash between saving and publishing (--secure: a re-run would draw fresh noise)
S=("${DP[@]}" --secure --epochs 3 --out "$T/sec")
(DPTRAIN_FAULT=after-checkpoint:2:kill "$FBIN" train "${S[@]}" >"$T/f.out" 2>"$T/f.err"; exit $?) 2>/dev/null
rc=$?
check '[ $rc -eq 137 ] && [ "$(records "$T/sec/metrics.jsonl")" = "1:50" ]' "crash after the 2nd checkpoint: rc $rc, metrics $(records "$T/sec/metrics.jsonl")"
check '! grep -q "epoch 2/" "$T/f.err"' "epoch 2 was shown before it was published"
expect_ok "$BIN" train "${S[@]}" --resume
check '[ "$(records "$T/sec/metrics.jsonl")" = "1:50 2:100 3:150" ] && [ "$(steps_of "$T/sec/ledger.json")" = 150 ]' \
      "resume after the crash: metrics $(records "$T/sec/metrics.jsonl"), ledger $(steps_of "$T/sec/ledger.json") (want 150: epoch 2 not re-run)"
check 'grep -q "epoch 2/3  step 100 .*published now" <<<"$LAST_OUT"' "the saved epoch 2 was not published from the checkpoint"
rm -rf "$T/sec"
(DPTRAIN_FAULT=after-ledger:2:kill "$FBIN" train "${S[@]}" >/dev/null 2>&1; exit $?) 2>/dev/null
expect_ok "$BIN" train "${S[@]}" --resume
check '[ "$(records "$T/sec/metrics.jsonl")" = "1:50 2:100 3:150" ] && [ "$(steps_of "$T/sec/ledger.json")" = 200 ]' \
      "crash after the 2nd ledger: metrics $(records "$T/sec/metrics.jsonl"), ledger $(steps_of "$T/sec/ledger.json") (want 200: the lost steps stay spent)"
(DPTRAIN_FAULT=after-metrics:1:kill "$FBIN" train "${DP[@]}" --epochs 2 --out "$T/am" >/dev/null 2>&1; exit $?) 2>/dev/null
expect_ok "$BIN" train "${DP[@]}" --epochs 2 --out "$T/am" --resume
check '[ "$(records "$T/am/metrics.jsonl")" = "1:50 2:100" ]' "crash after a metrics line: $(records "$T/am/metrics.jsonl")"

# -- --max-steps inside an epoch, the budget stop, nothing left
expect_ok "$BIN" train "${DP[@]}" --epochs 3 --max-steps 70 --out "$T/ms"
check '[ "$(records "$T/ms/metrics.jsonl")" = "1:50 2:70p" ]' "--max-steps 70: metrics $(records "$T/ms/metrics.jsonl")"
check '! grep -q "nothing left" <<<"$LAST_OUT" && grep -q "after 70 steps (stopped after 20 of the 50 steps of epoch 2," <<<"$LAST_OUT"' "--max-steps summary: $LAST_OUT"
expect_ok "$BIN" train "${DP[@]}" --epochs 3 --max-steps 70 --out "$T/ms" --resume
check '[ "$(steps_of "$T/ms/ledger.json")" = 70 ] && [ "$(records "$T/ms/metrics.jsonl")" = "1:50 2:70p" ]' "resume at --max-steps took a step"
expect_ok "$BIN" train "${DP[@]}" --epochs 3 --out "$T/ms" --resume
expect_ok "$BIN" train "${DP[@]}" --epochs 3 --out "$T/ms" --resume
check 'grep -q "nothing left to train" <<<"$LAST_OUT"' "a finished run does not say so"
expect_ok "$BIN" train "${DP[@]}" --epochs 1 --out "$T/ms" --resume
check 'grep -q "is at epoch 3 (150 steps), already at or past --epochs 1" <<<"$LAST_OUT"' "a resume with fewer --epochs: $LAST_OUT"
expect_ok "$BIN" train "${DP[@]}" --epochs 5 --max-steps 10 --out "$T/ms" --resume
check 'grep -q "is at step 150, already at or past --max-steps 10" <<<"$LAST_OUT"' "a resume past --max-steps is silent: $LAST_OUT"
expect_ok "$BIN" train "${DP[@]}" --sigma 1.2 --target-epsilon 1 --epochs 50 --out "$T/bud"
led=$(steps_of "$T/bud/ledger.json")
check 'grep -q "after $led steps (q" <<<"$LAST_OUT" && grep -q "accuracy .* after $led steps (stopped after" <<<"$LAST_OUT"' "budget stop: the summary's steps differ from the ledger's $led: $LAST_OUT"
check 'grep -q "> --target-epsilon 1 " <<<"$LAST_OUT"' "the budget stop names the config field, not the flag: $LAST_OUT"
# a budget that refuses the first step: an error saying why, not a success pointing at no file
out=$("$BIN" train "${DP[@]}" --sigma 0.5 --target-epsilon 0.01 --epochs 1 --out "$T/bud0" 2>&1); rc=$?
check '[ $rc -ne 0 ] && grep -q "its first step would raise epsilon to" <<<"$out"' "a budget refusing the first step: rc $rc: $out"
check '! grep -q "metrics.jsonl" <<<"$out" && [ ! -e "$T/bud0/metrics.jsonl" ]' "the refused run names a metrics file: $out"

# -- settings a resume cannot honour
expect_fail "--momentum applies to --optimizer sgd only" "$BIN" train "${D[@]}" --optimizer adam --lr 0.01 --momentum 0.9 --out "$T/x"
expect_fail "optim.kind was sgd, now adam" "$BIN" train "${DP[@]}" --optimizer adam --lr 0.01 --epochs 4 --out "$T/ms" --resume
expect_fail "optim.weight_decay was 0, now 0.1" "$BIN" train "${DP[@]}" --weight-decay 0.1 --epochs 4 --out "$T/ms" --resume
expect_fail "algorithm settings was C 1, clip mode flat, now C 0.5, clip mode flat" \
  "$BIN" train "${DP[@]}" --clip 0.5 --epochs 4 --out "$T/ms" --resume
expect_fail "algorithm settings was C 1, clip mode flat, now C 1, clip mode per-layer" \
  "$BIN" train "${DP[@]}" --clip-mode per-layer --epochs 4 --out "$T/ms" --resume
sec_out=$("$BIN" train "${DP[@]}" --secure --epochs 4 --out "$T/ms" --resume 2>&1)
check 'grep -q "secure was 0, now 1" <<<"$sec_out" && ! grep -q "sigma was" <<<"$sec_out"' "a changed --secure is not reported as such: $sec_out"
expect_ok "$BIN" train --algo dpsgd "${D[@]}" --target-epsilon 2 --epochs 1 --out "$T/cal"
expect_fail "calibrated it for --epochs 2, and a resumed run keeps its noise" "$BIN" train --algo dpsgd "${D[@]}" --target-epsilon 2 --epochs 2 --out "$T/cal" --resume
expect_fail "2^53" "$BIN" train "${D[@]}" --epochs 4611686018427387904 --out "$T/x"
expect_fail "--epochs" "$BIN" train "${D[@]}" --epochs 9223372036854775808 --out "$T/x"
expect_fail "--sample-rate: sampling rate q = 1e-300 is below 2^-53" "$BIN" train "${DP[@]}" --sample-rate 1e-300 --epochs 1000 --out "$T/x"

# -- --overwrite also removes what noisy-gd wrote beside its trainer's files (run<k>/)
NG=(--algo noisy-gd --dataset "csv:$T/d.csv" --normalize none --model mlp:4-8-3:relu --init lecun --threads 1
    --no-progress --eta 0.05 --langevin-sigma 0.05 --epochs 2 --neighbours remove --max-train 300 --max-test 100)
expect_ok "$BIN" train "${NG[@]}" --runs 2 --out "$T/ng"
check '[ -f "$T/ng/run2/kl_candidates.csv" ] && [ -f "$T/ng/run1/checkpoint.safetensors" ]' "noisy-gd --runs 2 wrote no run<k>/"
expect_fail "is not empty" "$BIN" train "${NG[@]}" --out "$T/ng"
expect_ok "$BIN" train "${NG[@]}" --out "$T/ng" --overwrite
check '[ ! -e "$T/ng/run1" ] && [ ! -e "$T/ng/run2" ] && [ -f "$T/ng/kl_candidates.csv" ] && [ "$(records "$T/ng/metrics.jsonl")" = "1:1 2:2" ]' \
      "--overwrite after --runs 2: $(ls "$T/ng") / $(records "$T/ng/metrics.jsonl")"

# -- what a private run shows: no train loss in metrics, no loss on its progress bar
check '! grep -q train_loss "$T/ms/metrics.jsonl" && grep -q train_loss "$T/run/metrics.jsonl"' "train_loss: private runs must not publish it, others must"
# the bar is drawn only on a terminal: run under script(1)
PB=(train --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --threads 1 --optimizer sgd --lr 0.5 --batch-size 60 --epochs 1)
script -qec "$(printf '%q ' "$BIN" "${PB[@]}" --algo dpsgd --sigma 1 --out "$T/bar")" /dev/null >"$T/bar.txt" 2>&1
check 'grep -q "] step 50/50  [0-9.]* steps/s  ETA" "$T/bar.txt" && ! grep -q "] step [0-9]*/[0-9]*  loss" "$T/bar.txt"' \
      "private progress bar: $(tr '\r' '\n' <"$T/bar.txt" | grep step | head -3)"
script -qec "$(printf '%q ' "$BIN" "${PB[@]}" --out "$T/bar2")" /dev/null >"$T/bar2.txt" 2>&1
check 'grep -q "] step 50/50  loss [0-9.]*  [0-9]* ex/s  ETA" "$T/bar2.txt"' "non-private progress bar: $(tr '\r' '\n' <"$T/bar2.txt" | grep step | head -3)"

# -- the run's secret file lives outside the run directory (docs/checkpoints.md, "The run
# directory"): --secret-dir puts it elsewhere, a resume finds it there (and refuses without
# it, naming where it looked); a secret directory others can enter is refused; an older
# run's dptrain.secret in its directory resumes and is moved; --overwrite removes the
# replaced run's secret and no other
S1="$T/elsewhere/secrets"
expect_ok "$BIN" train "${DP[@]}" --epochs 1 --out "$T/sx" --secret-dir "$S1"
sx=$(DPTRAIN_SECRETS_DIR=$S1 secret_of "$T/sx")
check '[ -f "$sx" ] && [ "$(stat -c %a "$S1")" = 700 ] && [ "$(stat -c %a "$sx")" = 600 ] && [ ! -e "$T/sx/dptrain.secret" ] &&
       [ ! -e "$(secret_of "$T/sx")" ]' "--secret-dir: the secret is not (only) in $S1: $(ls -la "$S1" "$T/sx")"
check 'grep -q "^secret: $sx " <<<"$LAST_OUT"' "the run does not name its secret file: $LAST_OUT"
expect_fail "the run's secret file is missing (looked for $DPTRAIN_SECRETS_DIR/" "$BIN" train "${DP[@]}" --epochs 2 --out "$T/sx" --resume
expect_ok "$BIN" train "${DP[@]}" --epochs 2 --out "$T/sx" --resume --secret-dir "$S1"
check '[ "$(ckpt_step "$T/sx/checkpoint.safetensors")" = 100 ]' "--resume --secret-dir did not continue the run"
mkdir -m 755 "$T/open"
expect_fail "is open to other users (mode 0755)" "$BIN" train "${DP[@]}" --epochs 1 --out "$T/so" --secret-dir "$T/open"
check '[ ! -e "$T/so" ] && [ -z "$(ls -A "$T/open")" ]' "a refused secret directory left files"
expect_fail "--secret-dir: empty" "$BIN" train "${DP[@]}" --epochs 1 --out "$T/so" --secret-dir ""
# the secret directory inside the run directory (or the same): the secret would be published
# with the run (the adversarial review of 2026-12-07 found it accepted)
expect_fail "is inside the run directory" "$BIN" train "${DP[@]}" --epochs 1 --out "$T/sin" --secret-dir "$T/sin/secrets"
mkdir -p -m 700 "$T/sin2"
expect_fail "is inside the run directory" "$BIN" train "${DP[@]}" --epochs 1 --out "$T/sin2" --secret-dir "$T/sin2"
check '[ -z "$(find "$T/sin" "$T/sin2" -name "*.secret")" ]' "a secret was written inside the run directory: $(find "$T/sin" "$T/sin2")"
# an older run: its secret in the run directory
expect_ok "$BIN" train "${DP[@]}" --epochs 1 --out "$T/old"
old_secret=$(secret_of "$T/old")
mv "$old_secret" "$T/old/dptrain.secret"
expect_ok "$BIN" train "${DP[@]}" --epochs 2 --out "$T/old" --resume
check 'grep -q "moved the run.s secret from $T/old/dptrain.secret to $old_secret" <<<"$LAST_OUT" && [ ! -e "$T/old/dptrain.secret" ] &&
       [ -f "$old_secret" ] && [ "$(ckpt_step "$T/old/checkpoint.safetensors")" = 100 ]' "an older run's secret was not resumed and moved: $LAST_OUT"
# --overwrite: the replaced run's secret goes, another run's stays
other_secret=$(secret_of "$T/keep")
expect_ok "$BIN" train "${DP[@]}" --epochs 1 --out "$T/old" --overwrite
check '[ ! -e "$old_secret" ] && [ -f "$other_secret" ] && [ -f "$(secret_of "$T/old")" ] &&
       grep -q "the previous run.s secret: removed $old_secret" <<<"$LAST_OUT"' "--overwrite did not remove exactly the old run's secret: $LAST_OUT"

harness_end
