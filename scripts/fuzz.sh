#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang in build-fuzz/ (ASan + UBSan) and runs each for
# FUZZ_SECONDS seconds (default 8) from the seed corpus it writes itself; fails on any
# crash or sanitizer report. CI runs it (.ci/run). Longer runs: docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-fuzz}
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (scripts/setup.sh installs it)" >&2; exit 1; }
CC=clang cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Debug -DDPT_FUZZ=ON -DDPT_MPI=OFF \
  -DDPT_FUZZ_SECONDS="${FUZZ_SECONDS:-8}" >/dev/null
targets=$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')
cmake --build "$BUILD_DIR" -j "$(nproc)" --target $targets
ctest --test-dir "$BUILD_DIR" -R '^fuzz_' --output-on-failure -j 1
