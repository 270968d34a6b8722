#!/usr/bin/env bash
# Installs every Debian package dptrain needs (idempotent), then configures and builds
# in build/. Run as root, or as a user with sudo. Usage: scripts/setup.sh [cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config   # compiler, build system
  libopenblas-openmp-dev             # GEMM (OpenBLAS on OpenMP: one thread pool with ours)
  liblapacke-dev                     # symmetric eigensolver (LAPACKE)
  zlib1g-dev                         # gzip-compressed datasets
  libssl-dev                         # ChaCha20 keystream and OS randomness (libcrypto)
  libcjson-dev                       # JSON: checkpoint headers, ledger, metrics
  libfftw3-dev                       # FFT for the PLD accountant
  gnuplot-nox                        # plots written by experiments and the CLI
  help2man                           # the man page dptrain(1), generated from --help
  libopenmpi-dev openmpi-bin         # data-parallel training with mpirun (docs/distributed.md)
  iproute2                           # the two-host MPI test (network namespaces + veth)
  valgrind                           # the secure sampler's constant-time test (memcheck, tests/test_ct_dgauss.c)
  qemu-user                          # runs the build on an emulated CPU without AVX2 (tests/abi/baseline_cpu.sh)
  dataset-fashion-mnist              # default training data
  fortunes                           # text data: --dataset fortunes-topic | fortunes-chars (docs/data.md)
  clang libclang-rt-dev libomp-dev   # libFuzzer harnesses (scripts/fuzz.sh, docs/fuzzing.md)
  python3-dev python3-cffi           # the Python package: cffi extension (API mode) over libdptrain.so
  python3-numpy python3-pytest       #   arrays; its tests (scripts/test.sh)
  python3-setuptools python3-wheel   #   offline build backend: pip install --no-build-isolation ./python
  python3-pip python3-venv           #   installing it (docs/python.md)
  python3-torch                      #   to_torch() and its tests (optional for users)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "setup.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
