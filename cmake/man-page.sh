#!/bin/sh
# Generates the man page dptrain(1) with help2man from the real `dptrain --help`, plus a
# COMMANDS section holding the real --help of every command that `dptrain --help` lists,
# turned into roff ("  TERM  description" lines become tagged paragraphs, usage lines stay
# as printed, the rest is text). So the man page says what the binary says.
# Usage: man-page.sh path/to/dptrain OUT.1
set -eu
BIN=$1
OUT=$2
INC=$OUT.include
trap 'rm -f "$INC"' EXIT
roff() { # escape text for roff
  sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
}
cmds=$("$BIN" --help | awk '/^Commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }')
[ -n "$cmds" ] || { echo "man-page.sh: '$BIN --help' lists no commands" >&2; exit 1; }
{
  printf '%s\n' "[COMMANDS]" \
    'Each command prints its part below with \fBdptrain\fR \fIcommand\fR \fB\-\-help\fR.'
  for c in $cmds; do
    printf '.SS "dptrain %s"\n' "$c"
    "$BIN" "$c" --help | roff | awk '
      function item(line,   rest, cut) {
        rest = line; sub(/^ +/, "", rest)
        cut = index(rest, "  ")
        if (cut == 0) return 0
        term = substr(rest, 1, cut - 1); desc = substr(rest, cut); sub(/^ +/, "", desc)
        return 1
      }
      NR == 1 || (usage && /^ /) { if (!usage) print ".nf"; usage = 1; print; next }
      usage { print ".fi"; usage = 0 }
      /^$/ { print ".PP"; next }
      /^ / && item($0) { print ".TP"; print "\\fB" term "\\fR"; print desc; next }
      { sub(/^ +/, ""); print }
      END { if (usage) print ".fi" }'
  done
  printf '%s\n' "[SEE ALSO]" \
    "The user guide, the math behind each algorithm and accountant, and example programs" \
    "that link libdptrain: README.md, docs/ and examples/ in the documentation directory" \
    "(/usr/share/doc/dptrain after a package install)."
} > "$INC"
# the version line only (the rest of --version describes this build's MPI)
version=$("$BIN" --version | head -n 1)
help2man --no-info --section 1 --version-string "$version" \
  --name "differentially private training, privacy accounting and auditing" \
  --include "$INC" --output "$OUT" "$BIN"
