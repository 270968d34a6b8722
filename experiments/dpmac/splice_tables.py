#!/usr/bin/env python3
"""Copy script-written markdown tables into a document, so no number in it is typed by hand.

    splice_tables.py DOC [ROOT]

Every block of DOC between a line `<!-- begin PATH ... -->` and the next line
`<!-- end PATH -->` is replaced by the content of the file PATH (relative to ROOT, by
default the repository root, two levels above this script); the marker lines stay. A
missing file, or a begin marker without its end, is an error naming the marker; DOC is then
left untouched. Used for docs/dpmac.md (the tables summarize_seeds.py writes).
"""
import os
import re
import sys

BEGIN = re.compile(r"^<!-- begin (\S+).*-->\s*$")


def splice(text, root):
    lines = text.split("\n")
    out, i, n = [], 0, 0
    while i < len(lines):
        out.append(lines[i])
        m = BEGIN.match(lines[i])
        i += 1
        if not m:
            continue
        path, end = m.group(1), "<!-- end %s -->" % m.group(1)
        j = i
        while j < len(lines) and lines[j].strip() != end:
            j += 1
        if j == len(lines):
            raise SystemExit("splice_tables.py: '%s' has no '%s' after it" % (lines[i - 1].strip(), end))
        src = os.path.join(root, path)
        if not os.path.isfile(src):
            raise SystemExit("splice_tables.py: %s (named by a begin marker) does not exist" % src)
        body = open(src).read().rstrip("\n")
        out.extend(body.split("\n") if body else [])
        out.append(lines[j])
        i, n = j + 1, n + 1
    return "\n".join(out), n


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    doc = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) == 3 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    text, n = splice(open(doc).read(), root)
    with open(doc, "w") as fh:
        fh.write(text)
    print("splice_tables.py: %d block(s) of %s rewritten" % (n, doc), file=sys.stderr)


if __name__ == "__main__":
    main()
