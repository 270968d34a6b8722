#!/usr/bin/env bash
# The built code runs on every x86-64 CPU (issue 38 item 18): outside the kernels built for
# x86-64-v3 or x86-64-v4 and chosen at run time (src/core/isa.h), no instruction needs more
# than the baseline. Disassembles each ELF file given (objdump -d) and finds every instruction of a
# later level: VEX/EVEX-encoded (AVX, AVX2, FMA: mnemonics v*, %ymm/%zmm registers), BMI1/2,
# LZCNT, MOVBE, POPCNT and the SSSE3/SSE4 ones GCC emits. Each must lie in a function of a
# *_v3.c or *_v4.c file (its FILE symbol in .symtab) or one named *_v3 / *_v4 (src/core/rng.c's
# helper). The v3 entry points must hold AVX instructions and the v4 convolution kernels
# 512-bit ones (else the search is blind and would pass anything). Non-x86-64 files: nothing to check (exit 77 = skipped, when all are such).
# Usage: isa.sh ELF_FILE...
set -u
python3 - "$@" <<'PY'
import bisect, re, subprocess, sys

LATER = re.compile(r"^(v(?!err\b|erw\b)[a-z0-9]+|andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|"
                   r"lzcnt|movbe|popcnt|pshufb|palignr|phadd[dw]|pmaddubsw|pmulhrsw|psign[bdw]|pabs[bdw]|"
                   r"round[sp][sd]|blendv?p[sd]|pblend(vb|w)|ptest|pmin[su][bdw]|pmax[su][bdw]|pmulld|pmuldq|"
                   r"pinsr[bdq]|pextr[bdq]|insertps|extractps|dpp[sd]|pcmpeqq|pcmpgtq|packusdw|pmov[sz]x\w+|crc32\w*)$")
ALLOWED_FILE = re.compile(r"_v[34]\.c$")
ALLOWED_NAME = re.compile(r"_v[34]($|\.)")
MUST_HAVE = ["dpt_small_gemm_v3", "dg_group_v3"]
MUST_HAVE_ZMM = ["dpt_conv_direct_v4", "dpt_conv_pe_grad_v4"]  # the x86-64-v4 (AVX-512) kernels

def functions(path):
    """[(start, end, name, file)] of the FUNC symbols in .symtab, with the FILE symbol before them."""
    out, cur = [], "?"
    for line in subprocess.run(["readelf", "-sW", path], capture_output=True, text=True, check=True).stdout.splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].endswith(":"):
            if "Symbol table '.dynsym'" in line:
                cur = "?"
            continue
        typ, name = f[3], f[7]
        if typ == "FILE":
            cur = name
        elif typ == "FUNC" and f[6] != "UND" and int(f[2], 0) > 0:
            start = int(f[1], 16)
            out.append((start, start + int(f[2], 0), name, cur if f[4] == "LOCAL" else "(global)"))
    return sorted(set(out))

fail = skipped = 0
for path in sys.argv[1:]:
    hdr = subprocess.run(["readelf", "-h", path], capture_output=True, text=True).stdout
    if "X86-64" not in hdr:
        print(f"{path}: not an x86-64 ELF file, nothing to check")
        skipped += 1
        continue
    funcs = functions(path)
    starts = [f[0] for f in funcs]
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True, check=True).stdout
    bad, seen_v3, seen_zmm = {}, set(), set()
    for line in dis.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s+(\S+)", line)
        if not m:
            continue
        mnem = m.group(2)
        if mnem in ("rep", "repz", "repnz", "lock", "notrack", "bnd", "data16", "cs", "ds") :
            parts = line.split("\t")
            mnem = parts[-1].split()[1] if len(parts[-1].split()) > 1 else mnem
        if not (LATER.match(mnem) or "%ymm" in line or "%zmm" in line):
            continue
        addr = int(m.group(1), 16)
        i = bisect.bisect_right(starts, addr) - 1
        fn = funcs[i] if i >= 0 and funcs[i][0] <= addr < funcs[i][1] else (0, 0, "?", "?")
        name, file = fn[2], fn[3]
        if ALLOWED_NAME.search(name) or ALLOWED_FILE.search(file):
            seen_v3.add(name)
            if "%zmm" in line:
                seen_zmm.add(name)
            continue
        bad.setdefault((name, file), []).append(line.strip())
    for (name, file), lines in sorted(bad.items()):
        print(f"FAIL: {path}: {name} ({file}) uses instructions beyond x86-64: {len(lines)}, e.g. {lines[0]}")
        fail += 1
    names = {f[2] for f in funcs}
    for want in MUST_HAVE:
        if want in names and want not in seen_v3:
            print(f"FAIL: {path}: {want} holds no AVX instruction: the search cannot see them")
            fail += 1
    for want in MUST_HAVE_ZMM:
        if want in names and want not in seen_zmm:
            print(f"FAIL: {path}: {want} holds no 512-bit (zmm) instruction: its AVX-512 path is not built")
            fail += 1
    print(f"{path}: {len(seen_v3)} functions of the x86-64-v3/v4 builds use AVX; {len(bad)} others do")
if skipped == len(sys.argv) - 1:
    sys.exit(77)
sys.exit(1 if fail else 0)
PY
