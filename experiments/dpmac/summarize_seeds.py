#!/usr/bin/env python3
"""Mean and sample std over seeds of every row of experiments/dpmac/seeds.sh's results.csv.

    summarize_seeds.py RESULTS_CSV[,RESULTS_CSV...] OUTDIR [ROW_REGEX]

(several CSVs, e.g. of two seeds.sh output directories that ran side by side, are read as
one, in the order given; ROW_REGEX keeps only the rows whose name it matches in full, e.g.
'usps-preset-eps8|usps-init-.*' to put the search cells of out_search/ beside the preset's
row of out_paper/)

Writes OUTDIR/summary.csv and OUTDIR/summary.md (the same as a markdown table) (row, task, seeds, epsilon RDP / PLD / paper's accounting,
value mean and std, best-epoch value mean, the paper's value and stated epsilon, the
difference to the paper) and, when gnuplot exists, OUTDIR/mnist.png and OUTDIR/usps.png
(ours at the epsilon our accountant computed, with error bars, beside the paper's values at
its stated epsilon). Every number comes from results.csv.
"""
import csv
import math
import os
import re
import shutil
import subprocess
import sys


def mean_std(v):
    m = sum(v) / len(v)
    s = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else float("nan")
    return m, s


def main():
    src, out = sys.argv[1], sys.argv[2]
    keep = re.compile(sys.argv[3]) if len(sys.argv) > 3 else None
    rows = [r for path in src.split(",") for r in csv.DictReader(open(path))
            if keep is None or keep.fullmatch(r["row"])]
    order, by = [], {}
    for r in rows:
        if r["row"] not in by:
            order.append(r["row"])
            by[r["row"]] = []
        by[r["row"]].append(r)
    cols = ["row", "task", "metric", "seeds", "sigma", "eps_rdp", "eps_pld", "eps_paper_accounting",
            "value_mean", "value_std", "best_epoch_mean", "paper_eps", "paper_value", "ours_minus_paper"]
    summ = []
    for name in order:
        rs = by[name]
        f = lambda k: [float(r[k]) for r in rs if r[k] not in ("", "inf", "nan")]
        vm, vs = mean_std(f("value"))
        bm, _ = mean_std(f("best_epoch_value"))
        em = mean_std(f("eps_rdp"))[0] if f("eps_rdp") else float("nan")
        pm = mean_std(f("eps_pld"))[0] if f("eps_pld") else float("nan")
        am = mean_std(f("eps_paper_accounting"))[0] if f("eps_paper_accounting") else float("nan")
        sg = mean_std(f("sigma"))[0] if f("sigma") else float("nan")
        pv = float(rs[0]["paper_value"])
        summ.append({"row": name, "task": rs[0]["task"], "metric": rs[0]["metric"],
                     "seeds": " ".join(r["seed"] for r in rs), "sigma": "%.4g" % sg,
                     "eps_rdp": "%.4g" % em, "eps_pld": "%.4g" % pm, "eps_paper_accounting": "%.4g" % am,
                     "value_mean": "%.4f" % vm, "value_std": "%.4f" % vs if not math.isnan(vs) else "",
                     "best_epoch_mean": "%.4f" % bm, "paper_eps": rs[0]["paper_eps"],
                     "paper_value": rs[0]["paper_value"], "ours_minus_paper": "%+.4f" % (vm - pv)})
    with open(os.path.join(out, "summary.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(summ)
    with open(os.path.join(out, "summary.md"), "w") as fh:  # the table docs/dpmac.md shows
        fh.write("| row | seeds | sigma | epsilon ours, RDP (PLD) | paper's accounting | ours, mean +- std | "
                 "best epoch (mean) | paper (its stated epsilon) | ours - paper |\n|---|---|---|---|---|---|---|---|---|\n")
        for s in summ:
            fh.write("| %s | %s | %s | %s (%s) | %s | %s | %s | %s (%s) | %s |\n" % (
                s["row"], s["seeds"], s["sigma"], s["eps_rdp"], s["eps_pld"],
                s["eps_paper_accounting"] if s["eps_paper_accounting"] != "nan" else "-",
                s["value_mean"] + (" +- " + s["value_std"] if s["value_std"] else " (one seed)"),
                s["best_epoch_mean"], s["paper_value"], s["paper_eps"],
                s["ours_minus_paper"]))
    if not shutil.which("gnuplot"):
        return
    for task, ylabel in (("mnist", "test accuracy"), ("usps", "test MSE (half SSE per image, [0,1] pixels)")):
        ss = [s for s in summ if s["task"] == task and s["eps_rdp"] != "nan"]
        if not ss:
            continue
        dat = os.path.join(out, task + "_summary.dat")
        with open(dat, "w") as fh:
            for s in ss:
                fh.write("%s %s %s %s %s \"%s\"\n" % (s["eps_rdp"], s["value_mean"], s["value_std"] or 0,
                                                     s["paper_eps"], s["paper_value"], s["row"]))
        gp = """set terminal pngcairo size 900,550 noenhanced
set output '%s'
set logscale x
set key outside bottom center horizontal
set xlabel 'epsilon (delta 1e-5)'
set ylabel '%s'
set title 'DP-MAC %s: ours (mean +- std over seeds, at the epsilon our accountant computed) vs paper (its stated epsilon)'
plot '%s' using 1:2:3 with yerrorbars pt 7 title 'ours', '' using 1:2:6 with labels offset 0,1 font ',8' notitle, '' using 4:5 with points pt 6 ps 2 title 'paper'
""" % (os.path.join(out, task + ".png"), ylabel, task.upper(), dat)
        subprocess.run(["gnuplot"], input=gp.encode(), check=False)


if __name__ == "__main__":
    main()
