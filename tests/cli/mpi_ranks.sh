#!/usr/bin/env bash
# Data-parallel training over MPI gives the same answer at any scale: with the same seed
# and --shards 4, DP-SGD run as one plain process and under mpirun with R = 1, 2 and 4
# ranks (oversubscribed) ends with bit-identical parameters, optimizer state, ledger and
# metrics; the ledger holds exactly one event per step whatever R is; non-private SGD
# likewise. The comparison can fail: --shards 1 (another summation order) differs. Ranks
# that disagree on the data or on the starting parameters (--init-from) are refused with a
# clear error, --init-from and --freeze on 2 ranks equal one process, ranks freezing
# different layers are refused, and --secure (OS-seeded noise
# per rank) still trains with one noise draw per step (rank 0's).
set -u
source "$(dirname "$0")/mpi_common.inc"
C=(train --algo dpsgd --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --threads 1 --no-progress
   --optimizer sgd --lr 0.5 --sigma 1.1 --clip 1 --batch-size 60 --epochs 2 --seed 7)

run_ok "$T/log0" "$BIN" "${C[@]}" --shards 4 --out "$T/r0"
for R in 1 2 4; do
  run_ok "$T/log$R" "${MPIRUN[@]}" -np $R "$BIN" "${C[@]}" --shards 4 --out "$T/r$R"
done
h0=$(params_hash "$T/r0/checkpoint.safetensors")
for R in 1 2 4; do
  check "[ \"\$(params_hash $T/r$R/checkpoint.safetensors)\" = \"$h0\" ]" "dpsgd: parameters with $R ranks differ from one process"
  check "same_ledger $T/r0/ledger.json $T/r$R/ledger.json" "dpsgd: ledger with $R ranks differs from one process"
  check "[ \"\$(metrics_norm $T/r0/metrics.jsonl)\" = \"\$(metrics_norm $T/r$R/metrics.jsonl)\" ]" \
        "dpsgd: metrics (test loss/accuracy, epsilon) with $R ranks differ"
  check "[ \"\$(ledger_steps $T/r$R/ledger.json)\" = 40 ]" "dpsgd: $R ranks: ledger records $(ledger_steps $T/r$R/ledger.json) events for 40 steps"
done
check "grep -q 'data parallel: 4 MPI ranks' $T/log4" "the 4-rank run does not say it is data parallel"
check "[ \$(grep -c 'test accuracy' $T/log4) = 1 ]" "only rank 0 should print the summary"

# sensitivity: another shard count adds the sums in another order (not bit-identical)
run_ok "$T/log_s1" "$BIN" "${C[@]}" --shards 1 --out "$T/s1"
check "[ \"\$(params_hash $T/s1/checkpoint.safetensors)\" != \"$h0\" ]" "--shards 1 and 4 gave identical bits: the comparison above proves nothing"

# non-private SGD: shuffle batches, 2 shards, 1 process vs 2 ranks
S=(train --algo sgd --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --threads 1 --no-progress --batch-size 50
   --epochs 1 --shards 2 --seed 3)
run_ok "$T/log_sgd1" "$BIN" "${S[@]}" --out "$T/g1"
run_ok "$T/log_sgd2" "${MPIRUN[@]}" -np 2 "$BIN" "${S[@]}" --out "$T/g2"
check "[ \"\$(params_hash $T/g1/checkpoint.safetensors)\" = \"\$(params_hash $T/g2/checkpoint.safetensors)\" ]" \
      "sgd: parameters with 2 ranks differ from one process"

# ranks reading different data are refused (MPMD: rank 1 gets --max-train 600)
checks=$((checks+1))
out=$(timeout 60 "${MPIRUN[@]}" -np 1 "$BIN" "${C[@]}" --out "$T/bad" : -np 1 "$BIN" "${C[@]}" --max-train 600 --out "$T/bad" 2>&1)
rc=$?
if [ $rc -eq 0 ] || ! grep -q "data differ from rank 0" <<<"$out"; then
  echo "FAIL: ranks with different data: rc=$rc, want an error naming the data; got: $out"; fail=$((fail+1))
fi

# --init-from: every rank starts from the checkpoint (2 ranks = one process, bit for bit); a
# rank given other starting parameters (here: only rank 0 has --init-from) is refused on
# every rank, before a step (it crashed: the values were broadcast in a collective that the
# other rank never entered)
run_ok "$T/log_ft0" "$BIN" train --algo sgd --dataset "csv:$T/d.csv" --threads 1 --no-progress --batch-size 60 \
  --epochs 1 --shards 2 --init-from "$T/r0" --seed 5 --out "$T/ft0"
run_ok "$T/log_ft2" "${MPIRUN[@]}" -np 2 "$BIN" train --algo sgd --dataset "csv:$T/d.csv" --threads 1 --no-progress \
  --batch-size 60 --epochs 1 --shards 2 --init-from "$T/r0" --seed 5 --out "$T/ft2"
check "[ \"\$(params_hash $T/ft0/checkpoint.safetensors)\" = \"\$(params_hash $T/ft2/checkpoint.safetensors)\" ]" \
      "--init-from: parameters with 2 ranks differ from one process"
# without --seed every rank uses rank 0's seed from the OS (the ranks' settings agree), and a
# resume on 2 ranks continues it from the secret file
run_ok "$T/log_os2" "${MPIRUN[@]}" -np 2 "$BIN" train --algo dpsgd --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu \
  --threads 1 --no-progress --optimizer sgd --lr 0.5 --sigma 1.1 --clip 1 --batch-size 60 --epochs 1 --out "$T/os2"
run_ok "$T/log_os2r" "${MPIRUN[@]}" -np 2 "$BIN" train --algo dpsgd --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu \
  --threads 1 --no-progress --optimizer sgd --lr 0.5 --sigma 1.1 --clip 1 --batch-size 60 --epochs 2 --out "$T/os2" --resume
checks=$((checks+1))
out=$(timeout 60 "${MPIRUN[@]}" -np 1 "$BIN" "${C[@]}" --init-from "$T/r0" --out "$T/bad2" : -np 1 "$BIN" "${C[@]}" \
      --out "$T/bad2" 2>&1)
rc=$?
if [ $rc -eq 0 ] || ! grep -q "starting parameters differ from rank 0" <<<"$out" || [ -e "$T/bad2/checkpoint.safetensors" ]; then
  echo "FAIL: ranks with different starting parameters: rc=$rc, want an error naming them and no checkpoint; got: $out"
  fail=$((fail+1))
fi

# --freeze: DP-SGD of fc2 alone on 2 ranks equals one process bit for bit; ranks that freeze
# different layers (rank 1 none) are refused on every rank, naming the frozen layers
run_ok "$T/log_fz0" "$BIN" "${C[@]}" --shards 2 --freeze fc1 --out "$T/fz0"
run_ok "$T/log_fz2" "${MPIRUN[@]}" -np 2 "$BIN" "${C[@]}" --shards 2 --freeze fc1 --out "$T/fz2"
check "[ \"\$(params_hash $T/fz0/checkpoint.safetensors)\" = \"\$(params_hash $T/fz2/checkpoint.safetensors)\" ]" \
      "--freeze: parameters with 2 ranks differ from one process"
check "[ \"\$(params_hash $T/fz0/checkpoint.safetensors)\" != \"\$(params_hash $T/r0/checkpoint.safetensors)\" ]" \
      "--freeze changed nothing (the comparison above proves nothing)"
checks=$((checks+1))
out=$(timeout 60 "${MPIRUN[@]}" -np 1 "$BIN" "${C[@]}" --freeze fc1 --out "$T/bad3" : -np 1 "$BIN" "${C[@]}" \
      --out "$T/bad3" 2>&1)
rc=$?
if [ $rc -eq 0 ] || ! grep -q 'frozen layers "fc1" vs ""\|frozen layers "" vs "fc1"' <<<"$out" || [ -e "$T/bad3/checkpoint.safetensors" ]; then
  echo "FAIL: ranks freezing different layers: rc=$rc, want an error naming them and no checkpoint; got: $out"
  fail=$((fail+1))
fi

# --targets: DP-SGD regression on 2 ranks equals one process bit for bit (that the shards
# gather the right targets is tested by test_regression's sharded least-squares fit); the
# targets are made from the label column and first feature of d.csv
python3 - "$T/d.csv" "$T/reg.csv" <<'PY'
import sys
rows = open(sys.argv[1]).read().split("\n")
with open(sys.argv[2], "w") as f:
    f.write(rows[0] + "\n")
    for r in rows[1:]:
        if r:
            v = r.split(",")
            f.write(",".join([str(float(v[0]) * 0.5 - float(v[1]))] + v[1:]) + "\n")
PY
G=(train --algo dpsgd --dataset "csv:$T/reg.csv" --targets 1 --model mlp:4-8-1:tanh --threads 1 --no-progress
   --optimizer sgd --lr 0.2 --sigma 1.1 --clip 1 --batch-size 60 --epochs 2 --seed 7 --shards 2)
run_ok "$T/log_rg0" "$BIN" "${G[@]}" --out "$T/rg0"
run_ok "$T/log_rg2" "${MPIRUN[@]}" -np 2 "$BIN" "${G[@]}" --out "$T/rg2"
check "[ \"\$(params_hash $T/rg0/checkpoint.safetensors)\" = \"\$(params_hash $T/rg2/checkpoint.safetensors)\" ]" \
      "--targets: parameters with 2 ranks differ from one process"
check "grep -q 'test mse' $T/log_rg2" "--targets with 2 ranks: no test mse reported"

# --secure: each rank's noise stream is OS-seeded; rank 0's single draw is applied everywhere
run_ok "$T/log_sec" "${MPIRUN[@]}" -np 2 "$BIN" "${C[@]}" --secure --out "$T/sec"
check "[ \"\$(ledger_steps $T/sec/ledger.json)\" = 40 ]" "--secure with 2 ranks: ledger should hold 40 events"
finish
