#!/usr/bin/env python3
"""Markdown tables for docs/dpulr.md from the CSVs the experiment scripts write, so that no
number of our runs in the doc's tables is typed by hand:

  md_tables.py summary SUMMARY_CSV [CONFIG ...]   grid.py's summary.csv (Table 1, Table C1)
  md_tables.py grid table1|c1 SUMMARY_CSV CONFIG ...
                                                   every cell of the paper's table (paper.csv) for
                                                   each configuration: ours from summary.csv, or
                                                   "not run" where no run wrote a row
  md_tables.py figure3 FIGURE3_CSV                 epsilon after the last epoch per panel
  md_tables.py dpsgd DPSGD_B64_CSV                 diagnose.sh dpsgd, epochs 1, 2, 5, 10
  md_tables.py controller CONTROLLER_CSV STEP ...  diagnose.sh controller at the given steps
  md_tables.py vr VR_CSV EPOCHS                    diagnose.sh vr: each run's test accuracy at the epochs
                                                   EPOCHS (comma-separated), and at the last of them
                                                   its direction norm, s_l and fraction clipped
  md_tables.py cifar RESULTS_CSV                   cifar10_resnet5/run.sh results.csv, every row
  md_tables.py cifar_run CSV RUN EPOCHS            one run of such a CSV at the epochs EPOCHS
                                                   (comma-separated) and its best epoch
  md_tables.py cifar_seeds CSV EPOCH RUN ...       best epoch and epoch EPOCH of several runs (one
                                                   per seed) with mean +- sample std; EPOCH as
                                                   upto:N: the best among epochs 1..N
  md_tables.py cifar_curves CSV STEPS_PER_EPOCH EPOCHS RUN=LABEL ... [CSV2 RUN=LABEL ...]
                                                   test accuracy of several runs side by side at the
                                                   epochs EPOCHS, each run's best epoch and its last
                                                   (a partial epoch says how many steps it had); a
                                                   further CSV among the runs holds the runs after it;
                                                   EPOCHS as only:LIST: those rows alone
  md_tables.py signal SIGNAL_SUMMARY_CSV          cifar10_resnet5/signal.sh: DP-SGD's and DP-ULR's
                                                   clipped directions along the true gradient
  md_tables.py cifar_plateau CSV STEPS_PER_EPOCH RUN=LABEL ... [CSV2 RUN=LABEL ...]
                                                   whether each run has stopped rising: its 20-epoch
                                                   rise (mean of the last 5 whole epochs minus the 5
                                                   20 before) below 0.25 points and its best 20 or
                                                   more epochs back

  md_tables.py axes table1|c1 BASE_RUNS_CSV AXES_RUNS_CSV SEED CONFIG ...
                                                   one seed's final (best) test accuracy per cell of
                                                   AXES_RUNS_CSV: the base DP-SGD run (config dpsgd in
                                                   BASE_RUNS_CSV), each CONFIG and its difference from
                                                   the base, the paper beside (issue 40's one-axis runs)
  md_tables.py beside table1|c1 SUMMARY_A CONFIG_A SUMMARY_B CONFIG_B
                                                   every cell of CONFIG_B in SUMMARY_B beside the same
                                                   cell of CONFIG_A in SUMMARY_A and the paper: final
                                                   and best epoch (mean +- std), B - A, B - paper

  md_tables.py check DOC    every table in DOC that follows a marker line
                            <!-- md_tables.py KIND ARGS --> (paths relative to the source tree)
                            must equal what that command prints now; exit 1 with a diff if not
  md_tables.py write DOC    rewrite those tables in DOC from the CSVs

Exit status: 0 done (check: every marked table equal); 1 check found a difference; 2 bad
input (an unknown table or argument, a missing file or column, a doc without markers).
"""
import csv
import difflib
import math
import os
import re
import shlex
import sys

from grid import mean_std  # the summaries' mean and sample std (grid.py, this directory)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MARKER = re.compile(r"^<!-- md_tables\.py (.*) -->$")


class TableError(Exception):
    pass


def rows_of(path, columns):
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(l for l in f if not l.startswith("#"))
            rows = list(reader)
            fields = reader.fieldnames or []
    except OSError as e:
        raise TableError("cannot read %s: %s" % (path, e.strerror))
    missing = [c for c in columns if c not in fields]
    if missing:
        raise TableError("%s has no column %s" % (path, ", ".join(missing)))
    return rows


def num(r, col, path):
    try:
        x = float(r[col])
    except (TypeError, ValueError):
        x = float("nan")
    if not math.isfinite(x):  # a NaN would print as "nan%" in the doc
        raise TableError("%s: %s is '%s', not a finite number (run %s, epoch %s)" % (
            path, col, r.get(col), r.get("run", "?"), r.get("epoch", "?")))
    return x


pm = lambda m, s: m + (" +- " + s if s else "")

SUMMARY_HEAD = ["| configuration | model | batch | sigma0 | seeds | final epoch | best epoch (which) "
                "| epsilon (Balle / classic) | paper | s/epoch |", "|---|---|---|---|---|---|---|---|---|---|"]
SUMMARY_COLS = ["config", "model", "batch", "sigma0", "seeds", "final_mean", "final_std", "best_mean", "best_std",
                "best_epochs", "epsilon_balle", "epsilon_classic", "s_per_epoch"]


def summary_row(r, paper):
    eps = "not accounted" if r["epsilon_balle"] == "none" else "%s / %s" % (r["epsilon_balle"], r["epsilon_classic"])
    return "| %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s |" % (
        r["config"], r["model"], r["batch"], r["sigma0"], r["seeds"], pm(r["final_mean"], r["final_std"]),
        pm(r["best_mean"], r["best_std"]), r["best_epochs"], eps, paper, r["s_per_epoch"])


def summary(path, want):
    out = list(SUMMARY_HEAD)
    for r in rows_of(path, SUMMARY_COLS + ["paper_valid_acc", "paper_std"]):
        if want and r["config"] not in want:
            continue
        out.append(summary_row(r, pm(r["paper_valid_acc"], r["paper_std"]) if r["paper_valid_acc"] else ""))
    return out


def grid(table, path, configs):
    if table not in ("table1", "c1"):
        raise TableError("grid: the table is table1 or c1, not '%s'" % table)
    if not configs:
        raise TableError("grid: name at least one configuration")
    paper = {}
    for r in rows_of(os.path.join(HERE, "paper.csv"), ["table", "algorithm", "model", "batch", "sigma0",
                                                       "valid_acc", "valid_std"]):
        if r["table"] == table:
            paper[(r["algorithm"], r["model"], r["batch"], r["sigma0"])] = r
    ours = {(r["config"], r["model"], r["batch"], r["sigma0"]): r for r in rows_of(path, SUMMARY_COLS)}
    # the paper's cells in its own order of models, batches and noise levels
    cells = []
    for (_, model, batch, sigma) in paper:
        if (model, batch, sigma) not in cells:
            cells.append((model, batch, sigma))
    out = list(SUMMARY_HEAD)
    for cfg in configs:
        algo = "dpulr" if cfg.startswith("dpulr") else "dpsgd"
        for model, batch, sigma in cells:
            p = paper.get((algo, model, batch, sigma))
            pp = pm(p["valid_acc"], p["valid_std"]) if p else ""
            r = ours.get((cfg, model, batch, sigma))
            if r is None:
                out.append("| %s | %s | %s | %s | 0 | not run | | | %s | |" % (cfg, model, batch, sigma, pp))
            else:
                out.append(summary_row(r, pp))
    return out


def figure3(path):
    rows = rows_of(path, ["epoch", "batch", "sigma0", "curve", "steps", "epsilon_balle", "epsilon_classic",
                          "epsilon_pld", "min_batch"])
    if not rows:
        raise TableError("%s has no rows" % path)
    last = max(int(r["epoch"]) for r in rows)
    cells = {}
    for r in rows:
        if int(r["epoch"]) == last:
            cells.setdefault((int(r["batch"]), r["sigma0"]), {})[r["curve"]] = r
    out = ["| batch | sigma0 | steps | DP-SGD RDP (Balle / classic) | DP-SGD PLD | DP-ULR default N_B (N_B) "
           "| DP-ULR N_B = qN |", "|---|---|---|---|---|---|---|"]
    for (b, s), c in sorted(cells.items(), key=lambda kv: (kv[0][0], float(kv[0][1]))):
        if any(k not in c for k in ("dpsgd", "dpulr", "dpulr_nb_qn")):
            raise TableError("%s: batch %d sigma0 %s lacks one of the curves dpsgd, dpulr, dpulr_nb_qn" % (path, b, s))
        g, u, w = c["dpsgd"], c["dpulr"], c["dpulr_nb_qn"]
        out.append("| %d | %s | %s | %s / %s | %s | %s (%s) | %s (%s) |" % (
            b, s, g["steps"], g["epsilon_balle"], g["epsilon_classic"], g["epsilon_pld"], u["epsilon_classic"],
            u["min_batch"], w["epsilon_classic"], w["min_batch"]))
    return out


def dpsgd(path):
    out = ["| run | epoch | test acc | test loss | update norm per step | direction norm | parameter norm |",
           "|---|---|---|---|---|---|---|"]
    for r in rows_of(path, ["run", "epoch", "test_acc", "test_loss", "update_norm_mean", "direction_norm_mean",
                            "param_norm"]):
        if r["epoch"] in ("1", "2", "5", "10"):
            out.append("| %s | %s | %s | %s | %s | %s | %s |" % (r["run"], r["epoch"], r["test_acc"], r["test_loss"],
                                                                r["update_norm_mean"], r["direction_norm_mean"],
                                                                r["param_norm"]))
    return out


def controller(path, steps):
    rows = rows_of(path, ["run", "step_last", "epoch", "test_acc", "param_norm", "update_norm_mean"])
    if not rows:
        raise TableError("%s has no rows" % path)
    nm = sum(1 for k in rows[0] if k.endswith("_s_median"))
    out = ["| run | step | epoch | test acc | parameter norm | update norm | s_l median (modules 0-%d) "
           "| fraction clipped (modules 0-%d) |" % (nm - 1, nm - 1), "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["step_last"] in steps:
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["run"], r["step_last"], r["epoch"], r["test_acc"], r["param_norm"], r["update_norm_mean"],
                " / ".join(r["m%d_s_median" % m] for m in range(nm)),
                " / ".join(r["m%d_clipped_frac" % m] for m in range(nm))))
    return out


def vr(path, epochs):
    """One row per run of diagnose.sh vr: test accuracy at each epoch named, and at the last of them the
    released direction's mean norm, s_l's median and the fraction clipped per module."""
    rows = rows_of(path, ["run", "epoch", "test_acc", "direction_norm_mean"])
    if not rows:
        raise TableError("%s has no rows" % path)
    eps = epoch_list(epochs)
    nm = sum(1 for k in rows[0] if k.endswith("_s_median"))
    runs = []
    for r in rows:
        if r["run"] not in runs:
            runs.append(r["run"])
    out = ["| run | %s | released direction norm | s_l median (modules 0-%d) | fraction clipped (modules 0-%d) |"
           % (" | ".join("epoch %d" % e for e in eps), nm - 1, nm - 1),
           "|---|" + "---|" * (len(eps) + 3)]
    for run in runs:
        by = run_rows(path, rows, run)
        missing = [e for e in eps if e not in by]
        if missing:
            raise TableError("%s: run %s has no epoch %s" % (path, run, ", ".join(map(str, missing))))
        last = by[eps[-1]]
        out.append("| %s | %s | %s | %s | %s |" % (
            run, " | ".join("%.2f" % num(by[e], "test_acc", path) for e in eps), last["direction_norm_mean"],
            " / ".join(last["m%d_s_median" % m] for m in range(nm)),
            " / ".join(last["m%d_clipped_frac" % m] for m in range(nm))))
    return out


CIFAR_COLS = ["run", "epoch", "step", "test_accuracy", "epsilon_rdp", "epsilon_pld", "wall_s"]


def cifar(path):
    out = ["| run | noise | epoch | steps | test acc | epsilon RDP | epsilon PLD | s/epoch |",
           "|---|---|---|---|---|---|---|---|"]
    prev = {}
    for r in rows_of(path, CIFAR_COLS):
        w = num(r, "wall_s", path) if r["wall_s"] else float("nan")
        dt = w - prev.get(r["run"], 0.0)
        prev[r["run"]] = w
        out.append("| %s | %s | %s | %s | %.2f%% | %.4g | %s | %.0f |" % (
            r["run"], r.get("noise", ""), r["epoch"], r["step"], 100 * num(r, "test_accuracy", path),
            num(r, "epsilon_rdp", path), ("%.4g" % num(r, "epsilon_pld", path)) if r["epsilon_pld"] else "", dt))
    return out


def run_rows(path, rows, run):
    """The rows of one run, by epoch (ints), in order."""
    by = {}
    for r in rows:
        if r["run"] == run:
            try:
                by[int(r["epoch"])] = r
            except ValueError:
                raise TableError("%s: run %s has epoch '%s', not an integer" % (path, run, r["epoch"]))
    if not by:
        raise TableError("%s has no run '%s' (its runs: %s)" % (path, run, ", ".join(sorted({r["run"] for r in rows}))))
    return by


def best_epoch(path, by):
    return max(sorted(by), key=lambda e: num(by[e], "test_accuracy", path))  # the first of equal maxima


def epoch_list(s):
    try:
        return [int(e) for e in s.split(",") if e]
    except ValueError:
        raise TableError("the epochs are integers separated by commas, not '%s'" % s)


def cifar_run(path, run, epochs):
    """One run at the given epochs and its best epoch: steps, accuracy, epsilon, seconds for that epoch."""
    by = run_rows(path, rows_of(path, CIFAR_COLS), run)
    best = best_epoch(path, by)
    out = ["| epoch | steps | test acc | epsilon RDP | epsilon PLD | s/epoch |", "|---|---|---|---|---|---|"]
    for e in sorted(set(epoch_list(epochs)) | {best}):
        if e not in by:
            raise TableError("%s: run %s has no epoch %d (it has %d-%d)" % (path, run, e, min(by), max(by)))
        r = by[e]
        acc = "%.2f%%" % (100 * num(r, "test_accuracy", path))
        secs = num(r, "wall_s", path) - (num(by[e - 1], "wall_s", path) if e - 1 in by else 0.0)
        pld = "%.4f" % num(r, "epsilon_pld", path) if r["epsilon_pld"] else ""
        out.append("| %s | %s | %s | %.4f | %s | %.0f |" % (
            "%d (best)" % e if e == best else e, r["step"], "**%s**" % acc if e == best else acc,
            num(r, "epsilon_rdp", path), pld, secs))
    return out


def cifar_seeds(path, epoch, runs):
    """Several runs of one setting (one per seed): best epoch, epoch EPOCH, mean +- sample std.
    EPOCH written upto:N takes the best epoch among epochs 1..N only: runs that ran for
    different lengths and still rise are then compared over the same epochs."""
    upto = epoch.startswith("upto:")
    try:
        ep = int(epoch[5:] if upto else epoch)
    except ValueError:
        raise TableError("cifar_seeds: the epoch is an integer or upto:INTEGER, not '%s'" % epoch)
    if not runs:
        raise TableError("cifar_seeds: name at least one run")
    rows = rows_of(path, CIFAR_COLS + ["seed"])
    out = ["| seed | epochs | best epoch%s (test acc) | epoch %d | epsilon after %d epochs (RDP / PLD) |" % (
        " up to %d" % ep if upto else "", ep, ep), "|---|---|---|---|---|"]
    bests, ats = [], []
    for run in runs:
        by = run_rows(path, rows, run)
        if ep not in by:
            raise TableError("%s: run %s has no epoch %d" % (path, run, ep))
        b = best_epoch(path, {e: r for e, r in by.items() if e <= ep} if upto else by)
        bests.append(100 * num(by[b], "test_accuracy", path))
        ats.append(100 * num(by[ep], "test_accuracy", path))
        pld = "%.4f" % num(by[ep], "epsilon_pld", path) if by[ep]["epsilon_pld"] else "-"
        out.append("| %s | %d | %d (%.2f%%) | %.2f%% | %.4f / %s |" % (
            by[ep]["seed"], max(by), b, bests[-1], ats[-1], num(by[ep], "epsilon_rdp", path), pld))
    if len(runs) > 1:
        (bm, bs), (am, as_) = mean_std(bests), mean_std(ats)
        out.append("| mean +- std | | %.2f +- %.2f%% | %.2f +- %.2f%% | |" % (bm, bs, am, as_))
    return out


def labelled_runs(kind, path, runs):
    """[(csv path, label, run, {epoch: row})] of each RUN=LABEL among RUNS, looked up in the last
    CSV named before it (PATH before any)."""
    if not runs or runs[0].endswith(".csv") or runs[-1].endswith(".csv") or any(
            "=" not in r and not r.endswith(".csv") for r in runs):
        raise TableError("%s: name the runs as RUN=LABEL (a further CSV before the runs it holds)" % kind)
    out, rows = [], None
    for spec in runs:
        if spec.endswith(".csv"):
            path, rows = spec, None
            continue
        if rows is None:
            rows = rows_of(path, CIFAR_COLS)
        run, label = spec.split("=", 1)
        out.append((path, label, run, run_rows(path, rows, run)))
    return out


def cifar_curves(path, steps_per_epoch, epochs, runs):
    """Test accuracy of several runs side by side. Rows: EPOCHS, every run's best epoch and last
    row. A run's best is bold; a last row with fewer than STEPS_PER_EPOCH steps in its epoch (a
    run stopped with Ctrl-C) says so. The epsilon column is that of the first run (in the order
    given) with a whole epoch there: runs of equal q and sigma0 spend the same per step, and
    runs whose whole epochs disagree on epsilon are an error (a table of one column of
    epsilon cannot hold them). A RUN=LABEL is looked up in the last CSV named before it.
    EPOCHS written only:LIST gives those rows alone (no rows added for bests and lasts; a best
    or last among them is still marked)."""
    try:
        spe = int(steps_per_epoch)
    except ValueError:
        raise TableError("cifar_curves: the steps per epoch are an integer, not '%s'" % steps_per_epoch)
    cols = []
    for path, label, run, by in labelled_runs("cifar_curves", path, runs):
        last = max(by)
        partial = int(by[last]["step"]) - spe * (last - 1)
        cols.append((label, by, best_epoch(path, by), last, partial if partial < spe else None, path))
    only = epochs.startswith("only:")
    want = set(epoch_list(epochs[5:] if only else epochs))
    if not only:
        for _, by, best, last, _, _ in cols:
            want |= {best, last}
    out = ["| epoch | %s | epsilon RDP (Balle) |" % " | ".join(c[0] for c in cols),
           "|---|%s---|" % ("---|" * len(cols))]
    for e in sorted(want):
        cells, eps = [], None
        for label, by, best, last, partial, path in cols:
            r = by.get(e)
            if r is None:
                cells.append("")
                continue
            acc = "%.2f%%" % (100 * num(r, "test_accuracy", path))
            if e == best:
                acc = "**%s** (its best)" % acc
            if e == last and partial is not None:
                acc += " (%d of %d steps; stopped)" % (partial, spe)
            elif eps is None:
                eps, first = num(r, "epsilon_rdp", path), label
            elif abs(num(r, "epsilon_rdp", path) - eps) > 1e-9 * eps:
                raise TableError("%s: run '%s' has epsilon %s at epoch %d where '%s' has %.6g: not the same "
                                 "q and sigma0, so one epsilon column cannot hold them" % (
                                     path, label, r["epsilon_rdp"], e, first, eps))
            cells.append(acc)
        if eps is not None:
            eps = "%.4f" % eps
        else:  # only partial epochs here: the first run's epsilon after its steps
            c = next(c for c in cols if e in c[1])
            eps = "%.4f (after %s steps)" % (num(c[1][e], "epsilon_rdp", c[5]), c[1][e]["step"])
        out.append("| %d | %s | %s |" % (e, " | ".join(cells), eps))
    return out


SIGNAL_COLS = ["point", "method", "K", "draws", "proj_mean", "proj_std", "cos_mean", "dpsgd_over_dpulr"]
SIGNAL_NAMES = {"dpsgd": "DP-SGD (clipped)", "dpulr": "DP-ULR (clipped)", "ulr_unclipped": "ULR (not clipped)"}


def signal(path):
    """cifar10_resnet5/signal.sh's signal_summary.csv: per point, DP-SGD's clipped direction and
    DP-ULR's (clipped, and the estimator unclipped) at each K, along the true gradient (mean
    +- sample std over the draws), their cosine with it, and DP-SGD's proj over DP-ULR's."""
    out = ["| point | direction | K | draws | along the true gradient | cos with it | DP-SGD / DP-ULR |",
           "|---|---|---|---|---|---|---|"]
    for r in rows_of(path, SIGNAL_COLS):
        if r["method"] == "gradient":
            continue
        name = SIGNAL_NAMES.get(r["method"])
        if name is None:
            raise TableError("%s: unknown method '%s' (known: gradient, %s)" % (path, r["method"], ", ".join(SIGNAL_NAMES)))
        draws = int(num(r, "draws", path))
        proj = "%.4g" % num(r, "proj_mean", path)
        if draws > 1:
            proj += " +- %.2g" % num(r, "proj_std", path)
        ratio = "%.2f" % num(r, "dpsgd_over_dpulr", path) if r["method"] == "dpulr" else ""
        out.append("| %s | %s | %s | %d | %s | %.3f | %s |" % (
            r["point"], name, r["K"] if r["method"] != "dpsgd" else "", draws, proj, num(r, "cos_mean", path), ratio))
    return out


PLATEAU_RISE = 0.25  # points: a 5-epoch mean moved less than this in PLATEAU_WINDOW epochs ...
# ... and no new best for PLATEAU_WINDOW epochs: "stopped rising". It was 10 until the CIFAR-10
# runs of session 34: two of them met the rule at 10 and found new bests 10 epochs later
# (docs/dpulr.md, Section 4.3); these curves are too noisy and slow for 10.
PLATEAU_WINDOW = 20
PLATEAU_MEAN = 5  # epochs in each mean


def plateau(acc, window=PLATEAU_WINDOW):
    """The plateau rule on {epoch: accuracy in %} of whole epochs: (the rise over `window` epochs
    of the mean of the last PLATEAU_MEAN epochs, None when the last window + PLATEAU_MEAN epochs
    are not all there; the best epoch, the first of equal ones; whether the run has stopped
    rising: a rise below PLATEAU_RISE and the best `window` or more epochs back). `window` is
    PLATEAU_WINDOW but for the history of the rule (prose.py)."""
    last = max(acc)
    best = min(acc, key=lambda e: (-acc[e], e))
    if not all(e in acc for e in range(last - window - PLATEAU_MEAN + 1, last + 1)):
        return None, best, False
    mean = lambda end: sum(acc[e] for e in range(end - PLATEAU_MEAN + 1, end + 1)) / PLATEAU_MEAN
    rise = mean(last) - mean(last - window)
    return rise, best, rise < PLATEAU_RISE and last - best >= window


def cifar_plateau(path, steps_per_epoch, runs):
    """Whether each run has stopped rising, over its whole epochs (a partial last epoch is left
    out): its last epoch, best epoch, the mean accuracy of its last PLATEAU_MEAN epochs minus
    that of the PLATEAU_MEAN epochs PLATEAU_WINDOW before ("20-epoch rise"), and the epochs since
    its best. A run has stopped rising when that rise is below PLATEAU_RISE points and its best
    is PLATEAU_WINDOW or more epochs back. RUN=LABEL and further CSVs as in cifar_curves."""
    try:
        spe = int(steps_per_epoch)
    except ValueError:
        raise TableError("cifar_plateau: the steps per epoch are an integer, not '%s'" % steps_per_epoch)
    w, m = PLATEAU_WINDOW, PLATEAU_MEAN
    out = ["| run | whole epochs | best epoch (test acc) | last epoch | %d-epoch rise (last %d against %d %d before) "
           "| epochs since best | stopped rising? |" % (w, m, m, w), "|---|---|---|---|---|---|---|"]
    for path, label, run, all_rows in labelled_runs("cifar_plateau", path, runs):
        by = {e: r for e, r in all_rows.items() if int(r["step"]) == spe * e}
        if not by:
            raise TableError("%s: run %s has no whole epoch of %d steps" % (path, run, spe))
        acc = {e: 100 * num(r, "test_accuracy", path) for e, r in by.items()}
        last = max(acc)
        rise, best, stopped = plateau(acc)
        out.append("| %s | %d | %d (%.2f%%) | %.2f%% | %s | %d | %s |" % (
            label, last, best, acc[best], acc[last], "(fewer than %d epochs)" % (w + m) if rise is None else "%+.2f" % rise,
            last - best, "yes" if stopped else "no"))
    return out


def paper_of(table):
    if table not in ("table1", "c1"):
        raise TableError("the table is table1 or c1, not '%s'" % table)
    return {(r["algorithm"], r["model"], r["batch"], r["sigma0"]): r
            for r in rows_of(os.path.join(HERE, "paper.csv"), ["table", "algorithm", "model", "batch", "sigma0",
                                                              "valid_acc", "valid_std"]) if r["table"] == table}


def sig(x):
    return "%g" % float(x)


def axes(table, base_path, path, seed, configs):
    """issue 40: one seed's DP-SGD run per protocol axis, beside the base run and the paper"""
    paper = paper_of(table)
    cols = ["config", "model", "batch", "sigma0", "seed", "final_acc", "best_acc"]
    key = lambda r: (r["config"], r["model"], r["batch"], sig(r["sigma0"]))
    base = {key(r): r for r in rows_of(base_path, cols) if r["seed"] == seed}
    runs = {key(r): r for r in rows_of(path, cols) if r["seed"] == seed}
    cells = []
    for r in rows_of(path, cols):
        c = (r["model"], r["batch"], sig(r["sigma0"]))
        if r["seed"] == seed and c not in cells:
            cells.append(c)
    out = ["| model | batch | sigma | paper | dpsgd (Poisson, ours) | " + " | ".join(configs) + " |",
           "|---|---|---|---|---|" + "---|" * len(configs)]
    for m, b, sg in cells:
        p = paper.get(("dpsgd", m, b, sg))
        r0 = base.get(("dpsgd", m, b, sg))
        row = "| %s | %s | %s | %s | %s |" % (m, b, sg, pm(p["valid_acc"], p["valid_std"]) if p else "",
                                              "%s (%s)" % (r0["final_acc"], r0["best_acc"]) if r0 else "not run")
        for cfg in configs:
            r = runs.get((cfg, m, b, sg))
            if r is None:
                row += " not run |"
            elif r0 is None:
                row += " %s (%s) |" % (r["final_acc"], r["best_acc"])
            else:
                row += " %s (%s), %+.2f (%+.2f) |" % (r["final_acc"], r["best_acc"],
                                                      float(r["final_acc"]) - float(r0["final_acc"]),
                                                      float(r["best_acc"]) - float(r0["best_acc"]))
        out.append(row)
    return out


def beside(table, path_a, cfg_a, path_b, cfg_b):
    """issue 40: a configuration's cells (mean +- std over seeds) beside another's and the paper"""
    paper = paper_of(table)
    cols = ["config", "model", "batch", "sigma0", "seeds", "final_mean", "final_std", "best_mean", "best_std"]
    a = {(r["model"], r["batch"], sig(r["sigma0"])): r for r in rows_of(path_a, cols) if r["config"] == cfg_a}
    out = ["| model | batch | sigma | paper | %s: final (best) | seeds | %s: final (best) | seeds "
           "| final B - A | final B - paper | best B - paper |" % (cfg_a, cfg_b), "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows_of(path_b, cols):
        if r["config"] != cfg_b:
            continue
        c = (r["model"], r["batch"], sig(r["sigma0"]))
        p = paper.get(("dpsgd" if cfg_b.startswith("dpsgd") else "dpulr",) + c)
        ra = a.get(c)
        fa = "%s (%s)" % (pm(ra["final_mean"], ra["final_std"]), pm(ra["best_mean"], ra["best_std"])) if ra else "not run"
        d_a = "%+.2f" % (float(r["final_mean"]) - float(ra["final_mean"])) if ra else ""
        d_p = "%+.2f" % (float(r["final_mean"]) - float(p["valid_acc"])) if p else ""
        d_pb = "%+.2f" % (float(r["best_mean"]) - float(p["valid_acc"])) if p else ""
        out.append("| %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s | %s |" % (
            c + (pm(p["valid_acc"], p["valid_std"]) if p else "", fa, ra["seeds"] if ra else "0",
                 pm(r["final_mean"], r["final_std"]), pm(r["best_mean"], r["best_std"]), r["seeds"], d_a, d_p, d_pb)))
    return out


def table(args):
    """The table that `md_tables.py ARGS` prints, as a list of lines."""
    if not args:
        raise TableError("name a table (see --help)")
    kind, a = args[0], args[1:]
    if kind not in KINDS:
        raise TableError("unknown table '%s' (known: %s)" % (kind, ", ".join(KINDS)))
    lo, hi, make = KINDS[kind]
    if len(a) < lo or (hi is not None and len(a) > hi):
        raise TableError("'%s' takes %s arguments, got %d (see --help)" % (
            kind, lo if lo == hi else "%d or more" % lo if hi is None else "%d-%d" % (lo, hi), len(a)))
    return make(a)


# kind: (fewest arguments, most (None: no limit), the generator on them)
KINDS = {
    "summary": (1, None, lambda a: summary(a[0], a[1:])),
    "grid": (3, None, lambda a: grid(a[0], a[1], a[2:])),
    "figure3": (1, 1, lambda a: figure3(a[0])),
    "dpsgd": (1, 1, lambda a: dpsgd(a[0])),
    "controller": (2, None, lambda a: controller(a[0], a[1:])),
    "vr": (2, 2, lambda a: vr(*a)),
    "cifar": (1, 1, lambda a: cifar(a[0])),
    "cifar_run": (3, 3, lambda a: cifar_run(*a)),
    "cifar_seeds": (3, None, lambda a: cifar_seeds(a[0], a[1], a[2:])),
    "cifar_curves": (4, None, lambda a: cifar_curves(a[0], a[1], a[2], a[3:])),
    "cifar_plateau": (3, None, lambda a: cifar_plateau(a[0], a[1], a[2:])),
    "signal": (1, 1, lambda a: signal(a[0])),
    "axes": (5, None, lambda a: axes(a[0], a[1], a[2], a[3], a[4:])),
    "beside": (5, 5, lambda a: beside(*a)),
}


def from_root(args):
    """A marker's arguments with its CSV paths (relative to the source tree) made absolute."""
    out = [args[0]]
    for x in args[1:]:
        out.append(os.path.join(ROOT, x) if x.endswith(".csv") and not os.path.isabs(x) else x)
    return out


def sync(doc, write):
    """Check (or rewrite) every marked table of DOC. Returns the exit status."""
    try:
        with open(doc) as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise TableError("cannot read the doc %s: %s" % (doc, e.strerror))
    out, diffs, marks, i = [], [], 0, 0
    while i < len(lines):
        out.append(lines[i])
        m = MARKER.match(lines[i])
        i += 1
        if not m:
            continue
        marks += 1
        try:
            want = table(from_root(shlex.split(m.group(1))))
        except (TableError, ValueError) as e:
            raise TableError("%s line %d: %s" % (doc, i, e))
        j = i
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        have = lines[i:j]
        if have != want:
            diffs += list(difflib.unified_diff(have, want, "%s line %d" % (doc, i + 1), m.group(1), lineterm=""))
        out.extend(want)
        i = j
    if not marks:
        raise TableError("%s has no line '<!-- md_tables.py KIND ARGS -->' marking a table" % doc)
    if write:
        if diffs:
            with open(doc, "w") as f:
                f.write("\n".join(out))
        print("md_tables.py: %d marked tables in %s, %s" % (marks, doc, "rewritten" if diffs else "all up to date"))
        return 0
    if diffs:
        print("\n".join(diffs))
        print("md_tables.py: a marked table of %s differs from what its command prints from the CSVs now "
              "(run experiments/dpulr_table1/md_tables.py write %s)" % (doc, doc), file=sys.stderr)
        return 1
    return 0


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    try:
        if argv[0] in ("check", "write"):
            if len(argv) != 2:
                raise TableError("%s takes one argument, the doc" % argv[0])
            return sync(argv[1], argv[0] == "write")
        print("\n".join(table(argv)))
        return 0
    except TableError as e:
        print("md_tables.py: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
