#!/usr/bin/env bash
# dptrain --version prints the version set in CMakeLists.txt's project() (the one place it
# is set), as the library reports it at run time, and the source revision it was built from;
# --help lists --version.
set -u
BIN="$1"
SRC=${DPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$(dirname "$0")/lib/harness.sh"
want=$(sed -n 's/^project(dptrain VERSION \([0-9][0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
check '[ -n "$want" ]' "no 'project(dptrain VERSION x.y.z' line in $SRC/CMakeLists.txt"
expect_ok "$BIN" --version
check '[ "$(head -n 1 <<<"$LAST_OUT")" = "dptrain $want" ]' "first line of --version is '$(head -n 1 <<<"$LAST_OUT")', want 'dptrain $want'"
check 'grep -q "^mpi: " <<<"$LAST_OUT"' "--version does not say whether MPI is built in: $LAST_OUT"
# the source revision: a git describe (a commit, perhaps with -dirty) or "unknown"
check 'grep -Eq "^build: ([0-9a-f]{7,}(-dirty)?|[A-Za-z0-9._+-]+-g[0-9a-f]{7,}(-dirty)?|unknown)$" <<<"$LAST_OUT"' "--version has no 'build: REVISION' line: $LAST_OUT"
expect_ok "$BIN" --help
check 'grep -q -- "--version" <<<"$LAST_OUT"' "--help does not list --version"
harness_end
