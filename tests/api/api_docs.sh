#!/usr/bin/env bash
# docs/api.md documents every function of the public headers (include/dptrain/*.h and
# the generated dptrain/version.h template): each needs a reference row
#   | `dpt_name(args)` | what it does |
# and every row names a function that exists (no stale entries). Every ```c block of the
# page is compiled (syntax and types, -Werror) against the headers, so the examples cannot
# drift from the API.
# Usage: api_docs.sh SOURCE_DIR [GENERATED_INCLUDE_DIR C_COMPILER]
#        api_docs.sh SOURCE_DIR --list   (prints the public functions found)
set -u
SRC=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
python3 - "$SRC" "${2:-}" "${3:-}" <<'PY'
import pathlib, re, subprocess, sys, tempfile

src = pathlib.Path(sys.argv[1])
headers = sorted(src.glob("include/dptrain/*.h")) + sorted(src.glob("cmake/version.h.in"))


def strip(text):
    """Text without comments, string literals and preprocessor lines (with continuations)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    out, cont = [], False
    for line in text.split("\n"):
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            continue
        out.append(line)
    return "\n".join(out)


# a declaration or definition: a type (identifier or '*') right before the name, not a call
# after `return`, not a function-pointer type "(*name)"
DECL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|\*)\s*\b(dpt_[a-z0-9_]+)\s*\(")
funcs = {}
for h in headers:
    for m in DECL.finditer(strip(h.read_text())):
        if m.group(1) in ("return", "sizeof"):
            continue
        funcs.setdefault(m.group(2), h.name)
if sys.argv[2] == "--list":
    for f, h in sorted(funcs.items(), key=lambda x: (x[1], x[0])):
        print(h, f)
    sys.exit(0)

doc = src / "docs" / "api.md"
if not doc.exists():
    print(f"FAIL: {doc} is missing")
    sys.exit(1)
rows = {}
for i, line in enumerate(doc.read_text().split("\n"), 1):
    m = re.match(r"\|\s*`(dpt_[a-z0-9_]+)\(", line)
    if m:
        rows.setdefault(m.group(1), i)
bad = 0
for f, h in sorted(funcs.items()):
    if f not in rows:
        print(f"FAIL: {f} ({h}) has no row in docs/api.md")
        bad += 1
for f, i in sorted(rows.items()):
    if f not in funcs:
        print(f"FAIL: docs/api.md:{i}: {f} is not declared in any public header")
        bad += 1
# the examples: each ```c block is a whole translation unit
gen, cc = sys.argv[2], sys.argv[3]
blocks = re.findall(r"^```c\n(.*?)^```", doc.read_text(), flags=re.S | re.M)
compiled = 0
if gen and cc:
    with tempfile.TemporaryDirectory(prefix="dpt_api_docs_") as tmp:
        for k, code in enumerate(blocks, 1):
            f = pathlib.Path(tmp) / f"example{k}.c"
            f.write_text(code)
            r = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                                f"-I{src / 'include'}", f"-I{gen}", str(f)], capture_output=True, text=True)
            compiled += 1
            if r.returncode != 0:
                print(f"FAIL: docs/api.md example {k} does not compile:\n{r.stderr}")
                bad += 1
else:
    print("note: no include dir and compiler given: the examples were not compiled")
print(f"{len(funcs)} public functions, {len(rows)} documented, {compiled} examples compiled, {bad} problems")
sys.exit(1 if bad or not funcs or (gen and cc and not blocks) else 0)
PY
