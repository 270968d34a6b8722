#!/usr/bin/env python3
"""Groups a perf profile of a DP-ULR run by phase (docs/dpulr.md, "Where the time goes in
explicit mode now"): reads the output of

    perf report -i perf.data --no-children --sort dso,symbol --stdio

on standard input and prints a Markdown table of the phases' shares of the samples. A
function that no phase names counts as "other" (listed with --other). The phases name
dptrain's own functions and the libraries they call; a renamed function lands in "other",
which is printed so that it shows.
"""
import re
import sys

# (phase, test on (dso, symbol)); the first that matches takes the line
PHASES = [
    ("the copies' GEMMs (OpenBLAS)", lambda d, s: "openblas" in d),
    ("GELU (`act_forward`)", lambda d, s: s.startswith("act_forward")),
    ("random numbers: z and the privacy noise (`fill_chunk`, `zig_slow`, libcrypto's keystreams)",
     lambda d, s: s in ("fill_chunk", "zig_slow", "chunk_word") or "libcrypto" in d),
    ("the copies' inputs, cotangents and weighted sums (`noisy_task`, `module_estimate`, `ulr_finish`)",
     lambda d, s: s in ("noisy_task", "module_estimate", "ulr_finish")),
    ("the copies' losses (`dpt_loss`, libm's `log1p`, `exp`)",
     lambda d, s: s == "dpt_loss" or ("libm" in d and ("log1p" in s or "exp" in s))),
    ("the optimizer, row copies, the kernel, OpenMP",
     lambda d, s: s.startswith("dpt_optim_step") or "memmove" in s or "kernel" in d or "libgomp" in d),
]
LINE = re.compile(r"^\s+([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(\S+)")


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    shares = [0.0] * len(PHASES)
    other, total, seen = {}, 0.0, 0
    for line in sys.stdin:
        m = LINE.match(line)
        if not m:
            continue
        seen += 1
        p, dso, sym = float(m.group(1)), m.group(2), m.group(3)
        total += p
        for i, (_, test) in enumerate(PHASES):
            if test(dso, sym):
                shares[i] += p
                break
        else:
            other[sym] = other.get(sym, 0.0) + p
    if not seen:
        print("perf_phases.py: no profile lines on standard input (expected `perf report --no-children "
              "--sort dso,symbol --stdio`)", file=sys.stderr)
        return 2
    print("| phase | share of the samples |")
    print("|---|---|")
    for (name, _), s in zip(PHASES, shares):
        print("| %s | %.1f%% |" % (name, s))
    print("| other | %.1f%% |" % sum(other.values()))
    print("| (not itemized by perf report) | %.1f%% |" % max(0.0, 100.0 - total))
    if "--other" in argv:
        for sym, p in sorted(other.items(), key=lambda kv: -kv[1]):
            print("  other: %-40s %.2f%%" % (sym, p), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
