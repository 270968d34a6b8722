#!/usr/bin/env python3
"""Markdown tables for docs/dpulr.md from the summary.csv files grid.py writes (so the
numbers in the docs are copied by a program, not by hand):

  md_tables.py SUMMARY_CSV [CONFIG ...]

One row per cell: configuration, batch, sigma0, seeds, final-epoch accuracy mean +- std,
best-epoch accuracy mean +- std (the best epochs), epsilon (RDP Balle / classic) and the
paper's valid accuracy +- std."""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
want = sys.argv[2:]
print("| configuration | model | batch | sigma0 | seeds | final epoch | best epoch (which) | epsilon (Balle / classic) | paper |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if want and r["config"] not in want:
        continue
    pm = lambda m, s: m + (" +- " + s if s else "")
    eps = "not accounted" if r["epsilon_balle"] == "none" else "%s / %s" % (r["epsilon_balle"], r["epsilon_classic"])
    paper = pm(r["paper_valid_acc"], r["paper_std"]) if r["paper_valid_acc"] else ""
    print("| %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s |" % (
        r["config"], r["model"], r["batch"], r["sigma0"], r["seeds"], pm(r["final_mean"], r["final_std"]),
        pm(r["best_mean"], r["best_std"]), r["best_epochs"], eps, paper))
