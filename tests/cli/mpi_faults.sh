#!/usr/bin/env bash
# Faults under MPI: SIGKILL of rank 1 in the middle of a 2-rank DP-SGD run stops the whole
# job (non-zero exit, the launcher names the dead rank) and leaves rank 0's last checkpoint
# and ledger intact (readable, ledger steps >= checkpoint steps); the run then continues
# with --resume on ONE rank and, separately, a 2-rank run continues on 4 ranks; both end
# bit-identical to an uninterrupted run (the shards, not the ranks, fix the float order).
# Without the run's secret file a resume is refused on every rank.
set -u
source "$(dirname "$0")/mpi_common.inc"
C=(train --algo dpsgd --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --threads 1 --no-progress
   --optimizer sgd --lr 0.5 --sigma 1.1 --clip 1 --batch-size 60 --seed 5 --shards 2)
ckpt_step() { python3 - "$1" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.get("__metadata__", {})
st = json.loads(meta["training_state"]) if "training_state" in meta else None
if st is None:
    for v in meta.values():
        try:
            o = json.loads(v)
        except Exception:
            continue
        if isinstance(o, dict) and "step" in o:
            st = o
print(st["step"])
PY
}

# -- reference: uninterrupted 1-process run of 40 epochs (20 steps each)
run_ok "$T/log_ref" "$BIN" "${C[@]}" --epochs 40 --quiet --out "$T/ref"
href=$(params_hash "$T/ref/checkpoint.safetensors")

# -- kill rank 1 once a few checkpoints exist
"${MPIRUN[@]}" -np 2 "$BIN" "${C[@]}" --epochs 40 --quiet --out "$T/k" >"$T/log_k" 2>&1 &
launcher=$!
victim=""
for _ in $(seq 1 400); do
  if [ -z "$victim" ]; then
    for p in $(pgrep -P $launcher 2>/dev/null); do
      if tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=$p; fi
    done
  fi
  if [ -n "$victim" ] && [ -f "$T/k/metrics.jsonl" ] && [ "$(wc -l <"$T/k/metrics.jsonl")" -ge 3 ]; then break; fi
  sleep 0.05
done
checks=$((checks+1))
if [ -z "$victim" ]; then
  echo "FAIL: could not find rank 1 among the launcher's children"; fail=$((fail+1))
  kill $launcher 2>/dev/null
else
  kill -9 "$victim"
fi
# the job must stop by itself (no rank left waiting in a reduction)
rc=0
for _ in $(seq 1 300); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
if kill -0 $launcher 2>/dev/null; then
  echo "FAIL: the job did not stop within 30 s after rank 1 died"; fail=$((fail+1)); kill -9 $launcher
fi
wait $launcher; rc=$?
check "[ $rc -ne 0 ]" "mpirun exited 0 although rank 1 was killed"
check "grep -qi 'rank 1' $T/log_k && grep -qi 'signal 9\|killed' $T/log_k" "the job's error should name rank 1 and the signal: $(tail -5 $T/log_k)"
check "[ \$(wc -l < $T/k/metrics.jsonl) -lt 40 ]" "the run finished before the kill; nothing was tested"
# last checkpoint and ledger intact
cs=$(ckpt_step "$T/k/checkpoint.safetensors" 2>/dev/null || echo bad)
ls_=$(ledger_steps "$T/k/ledger.json" 2>/dev/null || echo bad)
check "[ \"$cs\" != bad ] && [ \"$ls_\" != bad ] && [ $ls_ -ge $cs ]" "after the kill: checkpoint step '$cs', ledger steps '$ls_' (want readable, ledger >= checkpoint)"
run_ok "$T/log_acct" "$BIN" account --ledger "$T/k/ledger.json" --delta 1e-5
# continue on one rank: same final bits as the uninterrupted run
run_ok "$T/log_res1" "${MPIRUN[@]}" -np 1 "$BIN" "${C[@]}" --epochs 40 --quiet --out "$T/k" --resume
check "[ \"\$(params_hash $T/k/checkpoint.safetensors)\" = \"$href\" ]" "killed, resumed on 1 rank: parameters differ from the uninterrupted run"
check "same_ledger $T/k/ledger.json $T/ref/ledger.json" "killed, resumed on 1 rank: ledger differs from the uninterrupted run"

# -- 2 ranks for 3 epochs, then continue on 4 ranks to 6 epochs; compare with 1 process
run_ok "$T/log_a" "$BIN" "${C[@]}" --epochs 6 --quiet --out "$T/ref6"
run_ok "$T/log_b" "${MPIRUN[@]}" -np 2 "$BIN" "${C[@]}" --epochs 3 --quiet --out "$T/m"
run_ok "$T/log_c" "${MPIRUN[@]}" -np 4 "$BIN" "${C[@]}" --epochs 6 --out "$T/m" --resume
check "[ \"\$(params_hash $T/m/checkpoint.safetensors)\" = \"\$(params_hash $T/ref6/checkpoint.safetensors)\" ]" \
      "2 ranks then --resume on 4 ranks: parameters differ from one uninterrupted process"
check "same_ledger $T/m/ledger.json $T/ref6/ledger.json" "2 then 4 ranks: ledger differs"
check "grep -q 'own no data' $T/log_c" "resuming a 2-shard run on 4 ranks should say ranks 2..3 idle"

# -- the run key: rank 0 sends it with the checkpoint (the 4-rank resume above needed it on
# every rank); without it every rank refuses the resume, and none waits for the others
mv "$(secret_of "$T/m")" "$T/m_key"
checks=$((checks+1))
out=$(timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" "${C[@]}" --epochs 8 --out "$T/m" --resume 2>&1)
rc=$?
# every rank refuses at once, so whichever rank stops the job first is the one heard: rank 0
# names where it looked, another rank that rank 0 sent it no secret (not its temporary copy)
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -Eq "the run's secret file is missing \((looked for $DPTRAIN_SECRETS_DIR/|rank 0 sent none with the checkpoint\))" <<<"$out" ||
   grep -q "secret file is missing (looked for [^)]*dptrain-resume-" <<<"$out"; then
  echo "FAIL: 2-rank resume without the key file: rc=$rc, want a refusal naming it; got: $out"; fail=$((fail+1))
fi
check "[ \"\$(ledger_steps $T/m/ledger.json)\" = 120 ]" "the refused resume changed the ledger"
finish
