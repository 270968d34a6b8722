#!/usr/bin/env bash
# CLI: the exit status rule of README.md ("Exit status") in every command: 0 success, 1 a
# failure once the work began, 2 the command line refused before that: a flag or value,
# including one the library refuses, or a file or directory it names (missing, malformed,
# of another run). The cases marked "was 1" / "was 2" exited otherwise before the rule was
# written down; the others guard it.
set -u
BIN=$1
source "$(dirname "$0")/lib/harness.sh"
status() { # WANT NEEDLE cmd...: exits WANT and prints NEEDLE
  local want=$1 needle=$2; shift 2
  checks=$((checks+1))
  local out; out=$(timeout 120 "$@" 2>&1); local rc=$?
  if [ $rc -ne "$want" ] || ! grep -q -- "$needle" <<<"$out"; then
    echo "FAIL: '$*' exited $rc, want $want and a message containing '$needle'; got: $(tail -3 <<<"$out")"
    fail=$((fail+1))
  fi
}
blobs_csv "$T/d.csv" 300
cp "$T/d.csv" "$T/gone.csv"
touch "$T/afile"
TR=(train --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --epochs 1 --threads 1 --no-progress --quiet)
DP=(--algo dpsgd --batch-size 30 --max-steps 1)

status 0 "Commands:" "$BIN" --help
for c in train eval account audit model; do status 0 "usage: dptrain $c" "$BIN" $c --help; done
status 2 "unknown command 'bogus'" "$BIN" bogus
status 2 "unknown option '--bogus'" "$BIN" train --bogus
status 2 "--lr: expected a number, got 'abc'" "$BIN" "${TR[@]}" --out "$T/r0" --lr abc

# train: values and files refused before the first step
status 2 "--model: model spec 'mlp:bad'" "$BIN" "${TR[@]}" "${DP[@]}" --sigma 1 --secure --model mlp:bad --out "$T/r1" # was 1
status 2 "--target-epsilon: target epsilon 1e-09 needs sigma" "$BIN" "${TR[@]}" "${DP[@]}" --target-epsilon 1e-9 \
  --out "$T/r2" # was 1
status 2 "--out: --out $T/afile/x: cannot read the directory" "$BIN" "${TR[@]}" --out "$T/afile/x" # was 1
status 2 "--dataset: $T/none.csv: no such file" "$BIN" train --dataset "csv:$T/none.csv" --out "$T/r3"
status 2 "--out $T/afile/x/y: cannot create its parent directories" "$BIN" "${TR[@]}" --overwrite --out "$T/afile/x/y"
expect_ok "$BIN" "${TR[@]}" "${DP[@]}" --sigma 1 --out "$T/a"
expect_ok "$BIN" "${TR[@]}" "${DP[@]}" --sigma 1 --out "$T/b"
status 2 "--resume: " "$BIN" "${TR[@]}" "${DP[@]}" --sigma 2 --max-steps 2 --out "$T/a" --resume # was 1
# train: failures once training ran
status 1 "diverged" "$BIN" "${TR[@]}" --algo dpsgd --sigma 1 --batch-size 30 --optimizer sgd --lr 1e30 --out "$T/r4"
# noisy-gd writes kl_candidates.csv, and with --runs the aggregate OUT/metrics.jsonl, after
# training: a file it cannot write then is the work's failure. The test runs as root, where
# chmod stops nothing, and --out must be empty: the file size limit (ulimit -f, in KiB,
# SIGXFSZ ignored so that write() fails with EFBIG) is what refuses the write. The limit
# lies between what the runs write (checkpoint 2.2 KiB, metrics.jsonl 0.5 and 2.5 KiB) and
# the failing file (kl_candidates.csv 8 KiB: 300 records; the aggregate 8 KiB: 16 epochs).
FSIZE4=(bash -c 'trap "" XFSZ; ulimit -f 4; exec "$0" "$@"')
NG=(--algo noisy-gd --langevin-sigma 0.05)
status 1 "$T/n1/kl_candidates.csv: write failed" "${FSIZE4[@]}" "$BIN" "${TR[@]}" "${NG[@]}" --neighbours remove \
  --out "$T/n1" # was 2
status 1 "$T/n2/metrics.jsonl: write failed" "${FSIZE4[@]}" "$BIN" "${TR[@]}" "${NG[@]}" --neighbours none --runs 2 \
  --epochs 16 --out "$T/n2" # was 2
check '[ -s "$T/n2/run2/metrics.jsonl" ] && [ "$(wc -l <"$T/n2/run2/metrics.jsonl")" -eq 16 ]' \
  "noisy-gd --runs 2 under ulimit -f 4: run 2 did not train to the end, so the failure tested was not the aggregate's"
# out of memory refuses nothing the command line gave: 1, also where the library's status
# passes through cli_refuse. --secure builds the model before the trainer (the accounted
# multiplier depends on its parameter count); its 2^48 parameters (1.1 PB of floats) are
# more than any machine's memory: dpt_model_new refuses it before allocating (ASan is
# told to return NULL should an allocation be tried anyway)
status 1 "--model: .*needs at least 2.25e+06 GB" env ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1" \
  "$BIN" "${TR[@]}" "${DP[@]}" --sigma 1 --secure --model mlp:4-16777216-16777216-3 --out "$T/r5" # was 2

# eval: the checkpoint, the ledger beside it, the test data it records
status 2 "--checkpoint $T/none: No such file or directory" "$BIN" eval --checkpoint "$T/none" # was 1
status 2 "--checkpoint: $T/d.csv: " "$BIN" eval --checkpoint "$T/d.csv" # was 1
expect_ok "$BIN" train --dataset "csv:$T/gone.csv" --model mlp:4-8-3:relu --epochs 1 --threads 1 --no-progress \
  --quiet --max-steps 1 --out "$T/g"
rm "$T/gone.csv"
status 2 "test data: " "$BIN" eval --checkpoint "$T/g/checkpoint.safetensors" # was 1
mkdir "$T/mix" && cp "$T/a/checkpoint.safetensors" "$T/b/ledger.json" "$T/mix/"
status 2 "is not the ledger of" "$BIN" eval --checkpoint "$T/mix/checkpoint.safetensors" # was 1

# account: a ledger that cannot be used, values the accountants refuse
A=(account --sample-rate 0.01 --steps 10)
status 2 "--ledger: ledger: $T/none: cannot open" "$BIN" account --ledger "$T/none" # was 1
status 2 "--ledger: ledger $T/d.csv: invalid" "$BIN" account --ledger "$T/d.csv" # was 1
status 2 "--ledger: $T/mix/ledger.json is not the ledger of" "$BIN" account --ledger "$T/mix/ledger.json" # was 1
status 2 "calibration: target epsilon 1e-09 needs sigma" "$BIN" "${A[@]}" --target-epsilon 1e-9 --accountant rdp # was 1
status 2 "calibration: target epsilon 1e-09 needs sigma" "$BIN" account --sample-rate 1 --steps 1000000 --target-epsilon 1e-9 # the default accountant (PLD)
status 2 "--min-batch N_B = 50 must be in \[1, qN\]" "$BIN" account --algo dpulr --batch-size 10 --dataset-size 100 \
  --sigma 1 --steps 10 --min-batch 50 # was 1
status 0 "epsilon" "$BIN" "${A[@]}" --sigma 1

# audit: values the library refuses, the checkpoint; outputs it cannot write after the work
AU=(audit --dataset "csv:$T/d.csv" --population 100 --max-test 50 --model mlp:4-8-3:relu --batch-size 10 --epochs 1
    --shadows 0 --bootstrap 10 --no-plot --threads 1 --quiet)
status 2 "audit: dpt_audit_run: target model: model spec 'mlp:bad'" "$BIN" "${AU[@]}" --model mlp:bad --out "$T/u1" # was 1
status 2 "--checkpoint: $T/none: cannot open" "$BIN" "${AU[@]}" --checkpoint "$T/none" --out "$T/u2" # was 1
status 2 "--checkpoint: $T/d.csv: " "$BIN" "${AU[@]}" --checkpoint "$T/d.csv" --out "$T/u3" # was 1
# a canary is a test example given another class's label: one class has none (was an abort)
sed '2,$ s/^[0-9]*,/0,/' "$T/d.csv" >"$T/one.csv"
status 2 "audit: dpt_audit_run: --canaries 10: a canary is mislabelled, and the data have 1 class" "$BIN" "${AU[@]}" \
  --dataset "csv:$T/one.csv" --canaries 10 --out "$T/u5" # was 134 (SIGABRT)
mkdir -p "$T/u4/audit.csv"
status 1 "--out $T/u4: cannot write audit.csv" "$BIN" "${AU[@]}" --out "$T/u4" # was 2
harness_end
