#!/usr/bin/env python3
"""Markdown tables of an experiments/kl_init run (for docs/kl_privacy.md).
usage: summarize.py OUT EPOCHS EARLY"""
import csv, sys
out, E, early = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = list(csv.DictReader(open(out + "/kl_all.csv")))
inits = [i for i in ("he", "xavier", "lecun") if any(r["init"] == i for r in rows)]
f1 = list(csv.DictReader(open(out + "/fig1.csv")))
def cell(r):
    return "%.3g ± %.2g" % (float(r["kl_mean"]), float(r["kl_std"]))
eps = [e for e in (0, 1, 2, 5, 10, 20, 30, 40, 50) if e <= E]
print("Figure 1 (KL vs epoch):\n")
print("| epoch | " + " | ".join(inits) + " |")
print("|---|" + "---|" * len(inits))
for e in eps:
    print("| %d | " % e + " | ".join(cell(next(r for r in f1 if r["init"] == i and int(r["epoch"]) == e)) for i in inits) + " |")
print("| B (Eq. 7) | " + " | ".join("%.4g" % float(next(r for r in f1 if r["init"] == i)["B"]) for i in inits) + " |")
f2 = list(csv.DictReader(open(out + "/fig2_depth.csv")))
for ep in (early, E):
    print("\nFigure 2%s (KL vs depth at %d epochs; B in brackets):\n" % ("a" if ep == early else "b", ep))
    print("| depth | " + " | ".join(inits) + " |")
    print("|---|" + "---|" * len(inits))
    for L in sorted({int(r["depth"]) for r in f2}):
        cells = []
        for i in inits:
            r = [x for x in f2 if x["init"] == i and int(x["depth"]) == L and int(x["epoch"]) == ep]
            cells.append("%s [%.3g]" % (cell(r[0]), float(r[0]["B"])) if r else "-")
        print("| %d | " % L + " | ".join(cells) + " |")
fw = list(csv.DictReader(open(out + "/fig2_width.csv")))
print("\nFigure 2c (KL vs width at %d epochs; B in brackets):\n" % E)
print("| width | " + " | ".join(inits) + " |")
print("|---|" + "---|" * len(inits))
for m in sorted({int(r["width"]) for r in fw}):
    cells = []
    for i in inits:
        r = [x for x in fw if x["init"] == i and int(x["width"]) == m]
        cells.append("%s [%.3g]" % (cell(r[0]), float(r[0]["B"])) if r else "-")
    print("| %d | " % m + " | ".join(cells) + " |")
