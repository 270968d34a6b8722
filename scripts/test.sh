#!/usr/bin/env bash
# Sets up (installs Debian packages, builds in build/) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j2
