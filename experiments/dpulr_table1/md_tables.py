#!/usr/bin/env python3
"""Markdown tables for docs/dpulr.md from the CSVs the experiment scripts write (so the
numbers in the docs are copied by a program, not by hand):

  md_tables.py summary SUMMARY_CSV [CONFIG ...]   grid.py's summary.csv (Table 1, Table C1)
  md_tables.py grid table1|c1 SUMMARY_CSV CONFIG ...
                                                   every cell of the paper's table (paper.csv) for
                                                   each configuration: ours from summary.csv, or
                                                   "not run" where no run wrote a row
  md_tables.py figure3 FIGURE3_CSV                 epsilon after the last epoch per panel
  md_tables.py dpsgd DPSGD_B64_CSV                 diagnose.sh dpsgd, epochs 1, 2, 5, 10
  md_tables.py controller CONTROLLER_CSV STEP ...  diagnose.sh controller at the given steps
  md_tables.py cifar RESULTS_CSV                   cifar10_resnet5/run.sh results.csv
"""
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def summary(path, want):
    rows = list(csv.DictReader(open(path)))
    print("| configuration | model | batch | sigma0 | seeds | final epoch | best epoch (which) "
          "| epsilon (Balle / classic) | paper | s/epoch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    pm = lambda m, s: m + (" +- " + s if s else "")
    for r in rows:
        if want and r["config"] not in want:
            continue
        eps = "not accounted" if r["epsilon_balle"] == "none" else "%s / %s" % (r["epsilon_balle"], r["epsilon_classic"])
        paper = pm(r["paper_valid_acc"], r["paper_std"]) if r["paper_valid_acc"] else ""
        print("| %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s |" % (
            r["config"], r["model"], r["batch"], r["sigma0"], r["seeds"], pm(r["final_mean"], r["final_std"]),
            pm(r["best_mean"], r["best_std"]), r["best_epochs"], eps, paper, r["s_per_epoch"]))


def grid(table, path, configs):
    paper = {}
    for r in csv.DictReader(l for l in open(os.path.join(HERE, "paper.csv")) if not l.startswith("#")):
        if r["table"] == table:
            paper[(r["algorithm"], r["model"], r["batch"], r["sigma0"])] = r
    ours = {(r["config"], r["model"], r["batch"], r["sigma0"]): r for r in csv.DictReader(open(path))}
    # the paper's cells in its own order of models, batches and noise levels
    cells = []
    for (_, model, batch, sigma) in paper:
        if (model, batch, sigma) not in cells:
            cells.append((model, batch, sigma))
    pm = lambda m, s: m + (" +- " + s if s else "")
    print("| configuration | model | batch | sigma0 | seeds | final epoch | best epoch (which) "
          "| epsilon (Balle / classic) | paper | s/epoch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cfg in configs:
        algo = "dpulr" if cfg.startswith("dpulr") else "dpsgd"
        for model, batch, sigma in cells:
            p = paper.get((algo, model, batch, sigma))
            pp = pm(p["valid_acc"], p["valid_std"]) if p else ""
            r = ours.get((cfg, model, batch, sigma))
            if r is None:
                print("| %s | %s | %s | %s | 0 | not run | | | %s | |" % (cfg, model, batch, sigma, pp))
                continue
            eps = "not accounted" if r["epsilon_balle"] == "none" else "%s / %s" % (r["epsilon_balle"],
                                                                                     r["epsilon_classic"])
            print("| %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s |" % (
                cfg, model, batch, sigma, r["seeds"], pm(r["final_mean"], r["final_std"]),
                pm(r["best_mean"], r["best_std"]), r["best_epochs"], eps, pp, r["s_per_epoch"]))


def figure3(path):
    rows = list(csv.DictReader(open(path)))
    last = max(int(r["epoch"]) for r in rows)
    cells = {}
    for r in rows:
        if int(r["epoch"]) == last:
            cells.setdefault((int(r["batch"]), r["sigma0"]), {})[r["curve"]] = r
    print("| batch | sigma0 | steps | DP-SGD RDP (Balle / classic) | DP-SGD PLD | DP-ULR default N_B (N_B) | DP-ULR N_B = qN |")
    print("|---|---|---|---|---|---|---|")
    for (b, s), c in sorted(cells.items(), key=lambda kv: (kv[0][0], float(kv[0][1]))):
        g, u, w = c["dpsgd"], c["dpulr"], c["dpulr_nb_qn"]
        print("| %d | %s | %s | %s / %s | %s | %s (%s) | %s (%s) |" % (
            b, s, g["steps"], g["epsilon_balle"], g["epsilon_classic"], g["epsilon_pld"], u["epsilon_classic"],
            u["min_batch"], w["epsilon_classic"], w["min_batch"]))


def dpsgd(path):
    rows = list(csv.DictReader(open(path)))
    print("| run | epoch | test acc | test loss | update norm per step | direction norm | parameter norm |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["epoch"] in ("1", "2", "5", "10"):
            print("| %s | %s | %s | %s | %s | %s | %s |" % (r["run"], r["epoch"], r["test_acc"], r["test_loss"],
                                                           r["update_norm_mean"], r["direction_norm_mean"],
                                                           r["param_norm"]))


def controller(path, steps):
    rows = list(csv.DictReader(open(path)))
    nm = sum(1 for k in rows[0] if k.endswith("_s_median"))
    print("| run | step | epoch | test acc | parameter norm | update norm | s_l median (modules 0-%d) "
          "| fraction clipped (modules 0-%d) |" % (nm - 1, nm - 1))
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["step_last"] in steps:
            print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["run"], r["step_last"], r["epoch"], r["test_acc"], r["param_norm"], r["update_norm_mean"],
                " / ".join(r["m%d_s_median" % m] for m in range(nm)),
                " / ".join(r["m%d_clipped_frac" % m] for m in range(nm))))


def cifar(path):
    rows = list(csv.DictReader(open(path)))
    print("| run | noise | epoch | steps | test acc | epsilon RDP | epsilon PLD | s/epoch |")
    print("|---|---|---|---|---|---|---|---|")
    prev = {}
    for r in rows:
        w = float(r["wall_s"]) if r.get("wall_s") else float("nan")
        dt = w - prev.get(r["run"], 0.0)
        prev[r["run"]] = w
        print("| %s | %s | %s | %s | %.2f%% | %.4g | %s | %.0f |" % (
            r["run"], r.get("noise", ""), r["epoch"], r["step"], 100 * float(r["test_accuracy"]),
            float(r["epsilon_rdp"]), ("%.4g" % float(r["epsilon_pld"])) if r["epsilon_pld"] else "", dt))


if __name__ == "__main__":
    kind, path = sys.argv[1], sys.argv[2]
    if kind == "summary":
        summary(path, sys.argv[3:])
    elif kind == "grid":
        grid(path, sys.argv[3], sys.argv[4:])
    elif kind == "figure3":
        figure3(path)
    elif kind == "dpsgd":
        dpsgd(path)
    elif kind == "controller":
        controller(path, sys.argv[3:])
    elif kind == "cifar":
        cifar(path)
    else:
        sys.exit("md_tables.py: unknown table '%s'" % kind)
