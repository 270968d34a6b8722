#!/usr/bin/env bash
# What a third party gets: installs the build into a temporary prefix, checks the layout,
# then builds every program in examples/ against it three ways and runs them:
#   1. pkg-config (shared; and static with --static for train_arrays),
#   2. find_package(dptrain) (dptrain::dptrain, and dptrain::dptrain_static),
#   3. the Debian package: cpack -G DEB, its Depends hold no -dev package, dpkg-deb -x into
#      a directory and build against that tree with pkg-config (its dptrain.pc is
#      relocatable), run its bin/dptrain; apt-get resolves its dependencies (simulated).
# Takes about 20 s on an idle 2-core machine (cpack and the CMake configures dominate).
# Usage: install.sh BUILD_DIR SOURCE_DIR C_COMPILER SANITIZE(ON/OFF)
set -u
BUILD=$1 SRC=$2 CC=$3 SANITIZE=${4:-OFF}
. "$SRC/tests/install/lib.sh"
skip_if_sanitized "$SANITIZE" "a program built the third-party way"
. "$SRC/tests/cli/lib/harness.sh"   # $T (removed on exit), check, expect_ok, harness_end
P=$T/prefix
EX=$SRC/examples
EXAMPLES="train_arrays calibrate_sigma evaluate_checkpoint finetune regression own_gradients"

expect_ok cmake --install "$BUILD" --prefix "$P"
for f in bin/dptrain lib/libdptrain.so lib/libdptrain.a include/dptrain/dptrain.h include/dptrain/version.h \
         lib/pkgconfig/dptrain.pc lib/cmake/dptrain/dptrainConfig.cmake lib/cmake/dptrain/dptrainConfigVersion.cmake \
         share/man/man1/dptrain.1 share/doc/dptrain/README.md share/doc/dptrain/examples/train_arrays.c; do
  check '[ -e "$P/$f" ]' "not installed: $f"
done
# no test hook in what is installed (DPTRAIN_FAULT lives in the tests' build only)
for f in bin/dptrain lib/libdptrain.so lib/libdptrain.a; do
  check '! strings -a "$P/$f" | grep -q DPTRAIN_FAULT' "installed $f holds the test hook DPTRAIN_FAULT"
done
soname=$(readelf -d "$P/lib/libdptrain.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
check '[ -n "$soname" ] && [ -e "$P/lib/$soname" ]' "libdptrain.so has no SONAME, or no file of that name ($soname)"
# the installed binary finds the installed library through its $ORIGIN RPATH
expect_ok env -u LD_LIBRARY_PATH "$P/bin/dptrain" --version
check 'grep -q "^dptrain [0-9]" <<<"$LAST_OUT"' "installed dptrain --version: $LAST_OUT"
check 'grep -q "^\.SH COMMANDS" "$P/share/man/man1/dptrain.1" && grep -q "dptrain train" "$P/share/man/man1/dptrain.1"' \
  "the man page has no COMMANDS section with the subcommands' --help"

# run_examples DIR LABEL [env...]: runs the built examples and checks what they print
run_examples() {
  local dir=$1 label=$2; shift 2
  expect_ok env "$@" "$dir/train_arrays" "$dir/run" 7
  check 'grep -q "^privacy: epsilon [0-9.]* at delta 1e-05$" <<<"$LAST_OUT"' "$label: train_arrays printed: $LAST_OUT"
  check '[ "$(grep -c "^epoch [1-5]: test accuracy [0-9.]*%, epsilon [0-9.]*$" <<<"$LAST_OUT")" = 5 ]' \
    "$label: train_arrays's epoch callback did not report 5 epochs: $LAST_OUT"
  local acc; acc=$(sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' <<<"$LAST_OUT")
  check "awk -v a='$acc' 'BEGIN { exit !(a > 70) }'" "$label: train_arrays test accuracy '$acc'%, want > 70%"
  grep -E '^(epoch [0-9]+:|test accuracy|privacy:) ' <<<"$LAST_OUT" > "$dir/train.out"
  local eps; eps=$(sed -n 's/^privacy: epsilon \([0-9.]*\) .*/\1/p' <<<"$LAST_OUT")
  expect_ok env "$@" "$dir/evaluate_checkpoint" "$dir/run"
  check 'grep -q "^privacy: epsilon $eps at delta 1e-05 after [1-9][0-9]* steps$" <<<"$LAST_OUT"' \
    "$label: evaluate_checkpoint does not report the training's epsilon $eps: $LAST_OUT"
  check 'grep -q "^accuracy [0-9.]*%, loss [0-9.]* on 1000 new examples$" <<<"$LAST_OUT"' "$label: evaluate_checkpoint printed: $LAST_OUT"
  expect_ok env "$@" "$dir/finetune" "$dir/run"
  check 'grep -q "^the starting model cost epsilon $eps at delta 1e-05 (its own data)$" <<<"$LAST_OUT"' \
    "$label: finetune does not report the starting model's epsilon $eps: $LAST_OUT"
  check 'grep -Eq "^started from: the model train_arrays saved \(SHA-256 of the float32 values: [0-9a-f]{64}\)$" <<<"$LAST_OUT"' \
    "$label: finetune does not say where it started: $LAST_OUT"
  check 'grep -Eq "^test accuracy [0-9.]+% before, [0-9.]+% after [1-9][0-9]* steps of DP-SGD$" <<<"$LAST_OUT" &&
         grep -Eq "^privacy: epsilon [0-9.]+ at delta 1e-05 \(this run\)$" <<<"$LAST_OUT"' "$label: finetune printed: $LAST_OUT"
  expect_ok env "$@" "$dir/calibrate_sigma" 2
  local spent; spent=$(sed -n 's/^spent: epsilon [0-9.]* (RDP), \([0-9.]*\) (PLD).*/\1/p' <<<"$LAST_OUT")
  check "awk -v e='$spent' 'BEGIN { exit !(e <= 2 && e > 1.99) }'" "$label: calibrate_sigma 2 spends PLD epsilon '$spent', want in (1.99, 2]"
  expect_ok env "$@" "$dir/regression"
  local mse; mse=$(sed -n 's/^test mean squared error \([0-9.]*\) .*/\1/p' <<<"$LAST_OUT")
  check "awk -v m='$mse' 'BEGIN { exit !(m > 0.009 && m < 0.012) }'" "$label: regression's test mse '$mse', want about 0.01"
  check 'grep -Eq "^privacy: epsilon 1\.000 at delta 1e-05 \(sigma [0-9.]+, clip 1, 500 steps\)$" <<<"$LAST_OUT"' \
    "$label: regression printed: $LAST_OUT"
  expect_ok env "$@" "$dir/own_gradients" "$dir/own_ledger.json"
  check '[ "$(grep -c "^epoch [1-5]: test accuracy [0-9.]*%, epsilon [0-9.]*$" <<<"$LAST_OUT")" = 5 ] &&
         grep -Eq "^privacy: epsilon 1\.000 \(RDP [1-9][0-9.]*\) at delta 1e-05 \(sigma [0-9.]+, clip 1, 100 steps\)$" <<<"$LAST_OUT"' \
    "$label: own_gradients printed: $LAST_OUT"
  acc=$(sed -n 's/^epoch 5: test accuracy \([0-9.]*\)%.*/\1/p' <<<"$LAST_OUT")
  check "awk -v a='$acc' 'BEGIN { exit !(a > 70) }'" "$label: own_gradients test accuracy '$acc'%, want > 70%"
  expect_ok env "$@" "$P/bin/dptrain" account --ledger "$dir/own_ledger.json"
  check 'grep -q "100 sampled-Gaussian steps" <<<"$LAST_OUT"' "$label: own_gradients' ledger file: $LAST_OUT"
  rm -f "$dir/own_ledger.json"
}

# ==== 1. pkg-config ====
pc() { PKG_CONFIG_PATH=$1 pkg-config "${@:2}"; }
build_pc() { # DIR PCDIR LIBDIR: every example, shared
  local dir=$1 pcdir=$2 libdir=$3; mkdir -p "$dir"
  for e in $EXAMPLES; do
    expect_ok "$CC" -std=c11 -Wall -Wextra -Werror "$EX/$e.c" $(pc "$pcdir" --cflags --libs dptrain) \
      -Wl,-rpath,"$libdir" -o "$dir/$e"
  done
}
build_pc "$T/pc" "$P/lib/pkgconfig" "$P/lib"
run_examples "$T/pc" pkg-config
# static: libdptrain.a and the Libs.private flags
mkdir -p "$T/pcs"
for e in $EXAMPLES; do
  expect_ok "$CC" -std=c11 "$EX/$e.c" $(pc "$P/lib/pkgconfig" --cflags dptrain) \
    $(pc "$P/lib/pkgconfig" --static --libs dptrain | sed 's/-ldptrain/-l:libdptrain.a/') -o "$T/pcs/$e"
done
check '! readelf -d "$T/pcs/train_arrays" | grep -q "NEEDED.*libdptrain"' "pkg-config --static: train_arrays still needs libdptrain.so"
run_examples "$T/pcs" "pkg-config --static"

# ==== 2. find_package ====
for kind in shared static; do
  st=OFF; [ $kind = static ] && st=ON
  expect_ok cmake -S "$EX" -B "$T/cm-$kind" -DCMAKE_PREFIX_PATH="$P" -DDPTRAIN_EXAMPLES_STATIC=$st -DCMAKE_BUILD_TYPE=Release
  expect_ok cmake --build "$T/cm-$kind"
  run_examples "$T/cm-$kind" "find_package ($kind)"
done
check '! readelf -d "$T/cm-static/train_arrays" | grep -q "NEEDED.*libdptrain"' "dptrain::dptrain_static: train_arrays still needs libdptrain.so"
check 'readelf -d "$T/cm-shared/train_arrays" | grep -q "NEEDED.*libdptrain"' "dptrain::dptrain: train_arrays does not need libdptrain.so"

# ==== 3. the Debian package ====
expect_ok cpack -G DEB -B "$T/deb" --config "$BUILD/CPackConfig.cmake"
deb=$(ls "$T"/deb/dptrain_*.deb 2>/dev/null | head -n 1)
check '[ -n "$deb" ]' "cpack -G DEB made no dptrain_*.deb: $LAST_OUT"
if [ -n "$deb" ]; then
  depends=$(dpkg-deb -f "$deb" Depends)
  check '[ -n "$depends" ]' "$deb has no Depends"
  check '! tr "," "\n" <<<"$depends" | grep -q -- "-dev\b"' "$deb depends on a -dev package: $depends"
  expect_ok dpkg-deb -x "$deb" "$T/root"
  R=$T/root/usr
  for f in bin/dptrain lib/libdptrain.so lib/libdptrain.a; do
    check '! strings -a "$R/$f" | grep -q DPTRAIN_FAULT' "the Debian package's $f holds the test hook DPTRAIN_FAULT"
  done
  # the package holds the code that was built and checked (baseline + run-time dispatch):
  # the same machine code as the build tree's library and CLI, and the same ISA check
  for f in lib/libdptrain.so:libdptrain.so bin/dptrain:dptrain; do
    objcopy -O binary --only-section=.text "$R/${f%%:*}" "$T/deb.text" 2>/dev/null
    objcopy -O binary --only-section=.text "$BUILD/${f#*:}" "$T/build.text" 2>/dev/null
    check 'cmp -s "$T/deb.text" "$T/build.text"' "the Debian package's ${f%%:*} holds other code than $BUILD/${f#*:}"
  done
  isa_out=$(bash "$SRC/tests/abi/isa.sh" "$R/lib/libdptrain.so" "$R/bin/dptrain" 2>&1); rc=$?
  check '[ $rc -eq 0 ] || [ $rc -eq 77 ]' "the Debian package's code needs more than the baseline CPU: $isa_out"
  expect_ok env -u LD_LIBRARY_PATH "$R/bin/dptrain" --version
  build_pc "$T/debpc" "$R/lib/pkgconfig" "$R/lib"
  run_examples "$T/debpc" "Debian package, pkg-config"
  if command -v apt-get >/dev/null; then
    # a machine whose apt lists were never fetched cannot resolve a dependency that is not
    # installed yet (libopenblas0 here): that says nothing about the package
    sim=$(apt-get install -s "$deb" 2>&1); rc=$?
    if [ $rc -ne 0 ] && grep -q "no installation candidate\|Unable to locate\|is not available" <<<"$sim"; then
      echo "note: apt-get cannot resolve every dependency without its package lists (apt-get update): $sim" | head -n 3
    else
      check '[ $rc -eq 0 ]' "apt-get install -s $deb failed: $sim"
    fi
  fi
fi
# every way trained the same model (the same chosen seed and thread count): the same output
for d in pcs cm-shared cm-static debpc; do
  [ -e "$T/$d/train.out" ] && check 'cmp -s "$T/pc/train.out" "$T/$d/train.out"' "train_arrays printed differently when built by $d"
done
harness_end
