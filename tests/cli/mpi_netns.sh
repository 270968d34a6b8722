#!/usr/bin/env bash
# A real two-host run: two network namespaces ("hosts") joined by a veth pair, each with
# its own address (10.213.X.1 and .2, X from the PID so parallel runs do not collide) and
# loopback only. mpirun starts in host A; Open MPI's ssh launcher is replaced by a script
# that runs its daemon inside host B's namespace, so rank 1's daemon and both ranks talk
# over TCP across the veth (--mca btl tcp,self: no shared memory between the hosts). One
# short DP-SGD run must equal, bit for bit, the single-process run with the same
# --shards 2 (parameters, optimizer state, ledger). Skipped with a message where
# namespaces cannot be created (no root / no CAP_NET_ADMIN / no iproute2).
set -u
source "$(dirname "$0")/mpi_common.inc"
skip() { echo "SKIP: $*"; rm -rf "$T"; exit 77; }
command -v ip >/dev/null || skip "iproute2 ('ip') is not installed: cannot make the two hosts"
NA=dpt_mpi_a_$$; NB=dpt_mpi_b_$$
VA=dpa$$; VB=dpb$$
X=$(( $$ % 250 + 1 ))
IPA=10.213.$X.1; IPB=10.213.$X.2
cleanup() {
  ip netns del "$NA" 2>/dev/null; ip netns del "$NB" 2>/dev/null
  ip link del "$VA" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
if ! ip netns add "$NA" 2>"$T/ns.err"; then
  skip "cannot create network namespaces here ($(head -1 "$T/ns.err")); needs root or CAP_SYS_ADMIN+CAP_NET_ADMIN"
fi
ip netns add "$NB" && ip link add "$VA" type veth peer name "$VB" \
  && ip link set "$VA" netns "$NA" && ip link set "$VB" netns "$NB" \
  && ip -n "$NA" addr add "$IPA/24" dev "$VA" && ip -n "$NB" addr add "$IPB/24" dev "$VB" \
  && ip -n "$NA" link set "$VA" up && ip -n "$NB" link set "$VB" up \
  && ip -n "$NA" link set lo up && ip -n "$NB" link set lo up \
  || skip "could not set up the veth pair between the namespaces"

# the "ssh" of this cluster: agent HOST COMMAND... runs COMMAND in HOST's namespace
cat >"$T/agent.sh" <<AG
#!/bin/sh
host=\$1; shift
case \$host in
  $IPA) ns=$NA ;;
  $IPB) ns=$NB ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec \$ns sh -c "\$*"
AG
chmod +x "$T/agent.sh"

C=(train --algo dpsgd --dataset "csv:$T/d.csv" --model mlp:4-8-3:relu --threads 1 --no-progress
   --optimizer sgd --lr 0.5 --sigma 1.1 --clip 1 --batch-size 60 --epochs 2 --seed 11 --shards 2)
NET=(--host "$IPA,$IPB" -np 2 --mca plm_rsh_agent "$T/agent.sh" --mca oob_tcp_if_include "10.213.$X.0/24"
     --mca btl tcp,self --mca btl_tcp_if_include "10.213.$X.0/24" -x OMP_NUM_THREADS -x OMPI_MCA_mpi_yield_when_idle)
for v in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS OMPI_MCA_mca_base_component_disable_dlclose; do
  [ -n "${!v:-}" ] && NET+=(-x "$v")
done
# the command line is the one for a real cluster, with the agent instead of ssh
run_ok "$T/log_net" env -u OMPI_MCA_btl_tcp_if_include -u OMPI_MCA_oob_tcp_if_include \
  ip netns exec "$NA" "$MPIEXEC" "${NET[@]}" "$BIN" "${C[@]}" --out "$T/net"
run_ok "$T/log_one" "$BIN" "${C[@]}" --out "$T/one"
check "grep -q 'data parallel: 2 MPI ranks' $T/log_net" "the two-host run did not run data parallel: $(tail -3 $T/log_net)"
check "[ \"\$(params_hash $T/net/checkpoint.safetensors)\" = \"\$(params_hash $T/one/checkpoint.safetensors)\" ]" \
      "two hosts over TCP: parameters differ from the single-process run"
check "same_ledger $T/net/ledger.json $T/one/ledger.json" "two hosts over TCP: ledger differs from the single-process run"
# the ranks really were in different namespaces (rank 1 saw only host B's address)
run_ok "$T/log_where" env -u OMPI_MCA_btl_tcp_if_include -u OMPI_MCA_oob_tcp_if_include \
  ip netns exec "$NA" "$MPIEXEC" "${NET[@]}" sh -c 'echo "rank $OMPI_COMM_WORLD_RANK $(ip -o -4 addr show | grep -o "10\.213\.[0-9]*\.[0-9]*")"'
check "grep -q \"rank 1 $IPB\" $T/log_where && grep -q \"rank 0 $IPA\" $T/log_where" "ranks not placed one per host: $(cat $T/log_where)"
trap - EXIT
cleanup
echo "$checks checks, $fail failed"
[ $fail -eq 0 ]
