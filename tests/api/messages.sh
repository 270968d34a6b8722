#!/usr/bin/env bash
# Library messages speak of C parameters and config fields, never of command-line flags:
# no string literal in src/ may contain a --flag (comments may: they explain the CLI's
# use of the code). The CLI maps parameter names back to its flags (cli/cli_util.c).
# Usage: messages.sh SOURCE_DIR
set -u
SRC=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
python3 - "$SRC" <<'PY'
import pathlib, re, sys

src = pathlib.Path(sys.argv[1])
# Files converted by another change still in flight, with the reason; remove the line
# when it lands (the test then covers the file).
EXEMPT = {}
FLAG = re.compile(r"(?<![A-Za-z0-9_-])--[a-z][a-z0-9-]*")


def literals(text):
    """(line, contents) of every string literal, adjacent literals joined."""
    out, i, n, line = [], 0, len(text), 1
    joined, start, last_end = None, 0, -1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            i = j
            continue
        if c in "\"'":
            j, buf = i + 1, []
            while j < n and text[j] != c:
                if text[j] == "\\" and j + 1 < n:
                    buf.append(text[j:j + 2])
                    j += 2
                    continue
                buf.append(text[j])
                j += 1
            if c == '"':
                s = "".join(buf)
                if joined is not None and text[last_end:i].strip() == "":
                    joined += s
                else:
                    if joined is not None:
                        out.append((start, joined))
                    joined, start = s, line
                last_end = j + 1
            line += text.count("\n", i, j)
            i = j + 1
            continue
        i += 1
    if joined is not None:
        out.append((start, joined))
    return out


bad = checked = 0
for path in sorted(src.glob("src/**/*.[ch]")):
    rel = path.relative_to(src).as_posix()
    if rel in EXEMPT:
        print(f"note: {rel} not checked: {EXEMPT[rel]}")
        continue
    checked += 1
    for line, s in literals(path.read_text()):
        for m in FLAG.finditer(s):
            print(f"FAIL: {rel}:{line}: library message names the flag {m.group(0)}: \"{s}\"")
            bad += 1
print(f"{checked} files checked, {bad} flags in library messages")
sys.exit(1 if bad or checked == 0 else 0)
PY
