#!/usr/bin/env bash
# Sets up (installs Debian packages, builds in build/) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j2

# The Python package (python/, docs/python.md) on this build's libdptrain.so, with Debian's
# Python (the one scripts/setup.sh installs python3-cffi, numpy, pytest and torch for).
if [ -x /usr/bin/python3 ]; then
  echo "test.sh: Python package tests (python/tests)"
  /usr/bin/python3 python/build_ffi.py --build-dir build >/dev/null
  DPTRAIN_BUILD_DIR="$PWD/build" PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=2 \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests
else
  echo "test.sh: SKIPPED the Python package tests: /usr/bin/python3 (Debian's python3) is missing"
fi
