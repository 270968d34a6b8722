#!/usr/bin/env bash
# The README's install example cannot drift: installs the build into a temporary prefix,
# takes the first ```c block of README.md and the README's own `cc train.c ...` command
# line, builds the program with them against the prefix, runs it, and checks that it
# prints what the README shows (the epsilon exactly: it depends only on q, sigma and the
# steps; the accuracy by its format, as it may differ in the last digit across thread
# counts). Usage: readme.sh BUILD_DIR SOURCE_DIR SANITIZE(ON/OFF)
set -u
BUILD=$1 SRC=$2 SANITIZE=${3:-OFF}
. "$SRC/tests/install/lib.sh"
skip_if_sanitized "$SANITIZE" "a program built by the README's command"
. "$SRC/tests/cli/lib/harness.sh"   # $T (removed on exit), check, expect_ok, harness_end
README=$SRC/README.md
awk '/^```c$/ { on = 1; next } on && /^```$/ { exit } on { print }' "$README" > "$T/train.c"
check '[ "$(wc -l < "$T/train.c")" -ge 10 ]' "README.md has no \`\`\`c block with the example program"
cmd=$(sed -n 's/^    \(cc train\.c .*\)$/\1/p' "$README" | head -n 1)
check '[ -n "$cmd" ]' "README.md shows no '    cc train.c ...' command line"
shown=$(grep -A2 -F "    $cmd" "$README" | sed -n 's/^    \(test accuracy .*\)$/\1/p')
check '[ -n "$shown" ]' "README.md shows no output line under the command"

expect_ok cmake --install "$BUILD" --prefix "$T/prefix"
export PKG_CONFIG_PATH=$T/prefix/lib/pkgconfig LD_LIBRARY_PATH=$T/prefix/lib
expect_ok bash -c "cd '$T' && $cmd"
out=$(grep '^test accuracy' <<<"$LAST_OUT" | tail -n 1)
re='^test accuracy [0-9]+\.[0-9]%, epsilon [0-9]+\.[0-9]+ at delta [0-9e.-]+$'
check '[[ $out =~ $re ]]' "the README program printed '$out'"
check '[ "${out#*, }" = "${shown#*, }" ]' "the README program printed '$out', the README shows '$shown'"
acc=$(sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' <<<"$out")
check "awk -v a='$acc' 'BEGIN { exit !(a > 80) }'" "the README program trains to $acc% accuracy, want > 80%"
harness_end
