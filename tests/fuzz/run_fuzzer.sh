#!/usr/bin/env bash
# Runs one libFuzzer harness for a bounded time: usage run_fuzzer.sh BINARY SECONDS CORPUS_DIR.
# The harness first writes its own seed corpus (DPT_FUZZ_WRITE_SEEDS), then fuzzes from it.
# Fails (non-zero) on any crash, timeout, leak, out-of-memory or sanitizer report; the
# reproducer is left in CORPUS_DIR/../artifacts/. Longer runs: docs/fuzzing.md.
set -euo pipefail
bin=$1 secs=$2 corpus=$3
mkdir -p "$corpus" "$corpus/../artifacts"
DPT_FUZZ_WRITE_SEEDS="$corpus" "$bin"
# one thread: OpenBLAS (built on libgomp) and clang's libomp in one process spin on each other
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
log="$corpus/../$(basename "$bin").log"
if ! "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
     -artifact_prefix="$corpus/../artifacts/$(basename "$bin")-" "$corpus" > "$log" 2>&1; then
  tail -60 "$log"
  echo "FAIL: $(basename "$bin"): see $log and the reproducer in $corpus/../artifacts/"
  exit 1
fi
grep -E "^stat::number_of_executed_units|^#[0-9]+ *DONE" "$log" | tail -2 || true
echo "$(basename "$bin"): no crash in ${secs}s"
