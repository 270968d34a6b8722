#!/usr/bin/env python3
"""Mean and sample std over seeds of every row of experiments/dpmac/seeds.sh's results.csv.

    summarize_seeds.py RESULTS_CSV[,RESULTS_CSV...] OUTDIR [ROW_REGEX]

(several CSVs, e.g. of two seeds.sh output directories that ran side by side, are read as
one, in the order given; ROW_REGEX keeps only the rows whose name it matches in full, e.g.
'usps-preset-eps8|usps-init-.*' to put the search cells of out_search/ beside the preset's
row of out_paper/)

Writes OUTDIR/summary.csv and OUTDIR/summary.md (the same as a markdown table), OUTDIR/cells_mnist.md
and cells_usps.md (the paper's Tables 1a and 1b cell by cell, for the rows present;
cells_usps_table1b.md: both columns of Table 1b, epsilon inf included, when DP-SGD or
non-private USPS rows are present) (row, task, seeds, epsilon RDP / PLD / paper's accounting,
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


def cell(s):
    """'mean +- std (N seeds)' of a summary row; None when the row was not run."""
    if s is None:
        return None
    n = len(s["seeds"].split())
    return "%s%s (%d seed%s" % (s["value_mean"], " +- " + s["value_std"] if s["value_std"] else "",
                                 n, "" if n == 1 else "s")


def write_cells(summ, out):
    """OUTDIR/cells_mnist.md: the paper's Table 1a (calibrated rows, with and without DP-mean
    centring) and OUTDIR/cells_usps.md: Table 1b (the authors' settings), cell by cell; a
    file is empty when none of its rows is present."""
    by = {s["row"]: s for s in summ}
    lines = []
    if any(("mnist-calib-eps" + e) in by for e in ("8", "2", "0.5")):
        lines += ["| paper row (Table 1a) | paper | ours, calibrated to the paper's epsilon (epsilon ours) | "
                  "ours - paper (points) | ours, calibrated + DP-mean centring (epsilon ours) | ours - paper "
                  "(points) | within 0.5 point? |", "|---|---|---|---|---|---|---|"]
        for e in ("8", "2", "0.5"):
            c, m = by.get("mnist-calib-eps" + e), by.get("mnist-center-eps" + e)
            pv = float((c or m)["paper_value"]) if (c or m) else None
            txt, ok = [], []
            for r in (c, m):
                if r is None:
                    txt += ["not run", "-"]
                    ok.append(False)
                    continue
                d = float(r["value_mean"]) - pv
                txt += [cell(r) + "; eps %s RDP, %s PLD)" % (r["eps_rdp"], r["eps_pld"]), "%+.2f" % (100 * d)]
                ok.append(d >= -0.005)
            verdict = "yes" if ok[0] else ("with centring only" if ok[1] else "no")
            lines.append("| epsilon %s | %s | %s | %s | %s | %s | %s |" % (
                e, (c or m)["paper_value"] if (c or m) else "-", txt[0], txt[1], txt[2], txt[3], verdict))
    with open(os.path.join(out, "cells_mnist.md"), "w") as fh:
        fh.write("\n".join(lines))
    lines = []
    paper_usps = {"8": "8.4", "4": "9.6", "2": "10.9", "1": "12.7"}  # Table 1b, DP-MAC column
    if any(("usps-preset-eps" + e) in by for e in paper_usps):
        lines += ["| paper row (Table 1b, DP-MAC) | paper | ours, the authors' settings (mean +- std) | "
                  "epsilon ours, RDP (PLD) | ours - paper | at or below the paper? |", "|---|---|---|---|---|---|"]
        for e, pv in paper_usps.items():
            r = by.get("usps-preset-eps" + e)
            if r is None:
                lines.append("| epsilon %s | %s | not run | - | - | - |" % (e, pv))
                continue
            d = float(r["value_mean"]) - float(r["paper_value"])
            lines.append("| epsilon %s | %s | %s) | %s (%s) | %+.2f | %s |" % (
                e, r["paper_value"], cell(r), r["eps_rdp"], r["eps_pld"], d, "yes" if d <= 0 else "no"))
    with open(os.path.join(out, "cells_usps.md"), "w") as fh:
        fh.write("\n".join(lines))
    # Table 1b, both columns, epsilon inf included (issue 40: the rows of seeds.sh that run
    # DP-SGD and the non-private cells at the paper's settings); ROW_PREFIX selects a data
    # set's rows (e.g. "authors-" for the runs on the authors' usps_all.mat split)
    lines = []
    for prefix in sorted({s["row"][:s["row"].index("usps-")] for s in summ if "usps-dpsgd-" in s["row"]
                          or "usps-mac-nonprivate" in s["row"] or "usps-sgd-nonprivate" in s["row"]}):
        if not lines:
            lines += ["| data | paper row (Table 1b) | paper DP-MAC | ours DP-MAC (mean +- std; epsilon ours RDP) | "
                      "ours - paper | paper DP-SGD | ours DP-SGD (mean +- std; epsilon ours RDP) | ours - paper |",
                      "|---|---|---|---|---|---|---|---|"]
        for e, pm, pd in (("8", "8.4", "6.4"), ("4", "9.6", "7.9"), ("2", "10.9", "9.6"), ("1", "12.7", "11.8"),
                          ("inf", "4.4", "3.6")):
            mac = by.get(prefix + ("usps-mac-nonprivate" if e == "inf" else "usps-preset-eps" + e))
            sgd = by.get(prefix + ("usps-sgd-nonprivate" if e == "inf" else "usps-dpsgd-eps" + e))
            txt = []
            for r, pv in ((mac, pm), (sgd, pd)):
                if r is None:
                    txt += [pv, "not run", "-"]
                    continue
                eps = "" if r["eps_rdp"] == "nan" else "; eps %s" % r["eps_rdp"]
                txt += [pv, cell(r) + eps + ")", "%+.2f" % (float(r["value_mean"]) - float(pv))]
            lines.append("| %s | epsilon %s | %s |" % (prefix.rstrip("-") or "usps (zip)", e, " | ".join(txt)))
    with open(os.path.join(out, "cells_usps_table1b.md"), "w") as fh:
        fh.write("\n".join(lines))


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
    write_cells(summ, out)
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
