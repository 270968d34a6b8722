#!/usr/bin/env python3
"""Runs a grid of MNIST trainings for the DP-ULR paper's Table 1 / Table C1 and summarizes
them over seeds. Every number in the CSVs comes from a run's metrics.jsonl or ledger (read
back with `dptrain account --ledger`); the paper's numbers come from paper.csv, which holds
the paper's tables as printed.

  grid.py run     --out DIR --configs "A B" --models "small" --batches "500" --sigmas "1 8"
                  --seeds "1 2 3" [--epochs 25] [--copies 32] [--max-train 0] [--threads 1]
  grid.py summary --out DIR [--table table1|c1]

`run` appends one row per finished run to DIR/runs.csv (a run already there is skipped, so
several processes may share DIR: each claims a run with a lock directory first).
`summary` writes DIR/summary.csv (mean and sample standard deviation over seeds of the final-
and best-epoch test accuracy, the mean final test loss, the epsilon of the ledger, the paper's
number) and a gnuplot data file for the plot. Configurations (CONFIGS below) and models (MODELS) are named here so
that the CSVs say exactly what ran.
"""
import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Table C1's "small" MLP is Table 1's; the paper gives only the parameter ratios of the others
# (medium ~2.5x, large ~5x small): these widths give 2.51x and 5.11x (111146 parameters for small).
MODELS = {
    "small": "mlp:784-128-64-32-10:gelu",
    "medium": "mlp:784-288-144-72-10:gelu",
    "large": "mlp:784-512-256-128-10:gelu",
}

SCHED = ["--lr-schedule", "step:0.85:10"]  # the paper: lr x0.85 every 10 epochs, both algorithms
EXPLICIT = ["--ulr-noise", "explicit", "--ulr-std", "0.1"]


def dpulr(noise, sampler="poisson-reject", lr="0.001"):
    """a DP-ULR configuration: its noise flags, the sampler and Adam's learning rate, the paper's schedule"""
    return dict(algo="dpulr", args=["--algo", "dpulr"] + noise + ["--sampler", sampler, "--optimizer", "adam",
                                                                 "--lr", lr] + SCHED, copies=True)


CONFIGS = {
    # DP-ULR, sound explicit noise N(0, sigma0^2 C^2) with the authors' variance reduction, our Adam lr
    "dpulr_explicit": dpulr(EXPLICIT + ["--antithetic", "--baseline"]),
    # the same with the clean-loss baseline alone: 32 independent directions instead of 16 antithetic pairs
    # (ahead in every epoch of three 5-epoch cells, docs/dpulr.md "The controller without variance reduction")
    "dpulr_baseline": dpulr(EXPLICIT + ["--baseline"]),
    # the same on shuffled fixed-size batches (what the paper's experiments used): NOT accounted
    "dpulr_explicit_shuffle": dpulr(EXPLICIT + ["--antithetic", "--baseline"], sampler="shuffle"),
    # the paper's controller (Eq. 7 + top-up) at our Adam lr (stable) and at the paper's (diverges)
    "dpulr_controller": dpulr(["--ulr-noise", "controller"]),
    "dpulr_controller_lr0.01": dpulr(["--ulr-noise", "controller"], lr="0.01"),
    # DP-SGD as the paper states its baseline: SGD lr 0.1, x0.85 every 10 epochs, C = 1
    # (Poisson sampling: the only one with an epsilon; the paper ran fixed-size batches)
    "dpsgd": dict(algo="dpsgd", args=["--algo", "dpsgd", "--optimizer", "sgd", "--lr", "0.1"] + SCHED, copies=False),
    # the same on pixels in [0, 1] (no standardization), see docs/dpulr.md
    "dpsgd_pixels01": dict(algo="dpsgd", args=["--algo", "dpsgd", "--optimizer", "sgd", "--lr", "0.1",
                                               "--normalize", "none"] + SCHED, copies=False),
    # SGD at a learning rate scaled down for the noise (docs/dpulr.md: lr 0.1 random-walks the weights at batch 64)
    "dpsgd_lr0.02": dict(algo="dpsgd", args=["--algo", "dpsgd", "--optimizer", "sgd", "--lr", "0.02"] + SCHED,
                         copies=False),
    # issue 40: the paper's DP-SGD protocol one axis at a time (docs/dpulr.md "DP-SGD baselines with the
    # paper's protocol"): Opacus on shuffled fixed-size batches (--sampler shuffle: NOT accounted, no epsilon),
    # LeCun init (variance 1/fan_in, the nearest we have to PyTorch's default 1/(3 fan_in)), and their combinations
    "dpsgd_shuffle": dict(algo="dpsgd", args=["--algo", "dpsgd", "--sampler", "shuffle", "--optimizer", "sgd",
                                              "--lr", "0.1"] + SCHED, copies=False),
    "dpsgd_lecun": dict(algo="dpsgd", args=["--algo", "dpsgd", "--optimizer", "sgd", "--lr", "0.1",
                                            "--init", "lecun"] + SCHED, copies=False),
    "dpsgd_shuffle_pixels01": dict(algo="dpsgd", args=["--algo", "dpsgd", "--sampler", "shuffle", "--optimizer", "sgd",
                                                       "--lr", "0.1", "--normalize", "none"] + SCHED, copies=False),
    "dpsgd_pixels01_lecun": dict(algo="dpsgd", args=["--algo", "dpsgd", "--optimizer", "sgd", "--lr", "0.1",
                                                     "--normalize", "none", "--init", "lecun"] + SCHED, copies=False),
    # PyTorch's own nn.Linear default (--init torch: weight and bias U(+-1/sqrt(fan_in))), what an Opacus MLP
    # gets: alone, and with the two other axes of the paper's protocol (shuffled batches, pixels in [0, 1])
    "dpsgd_torch": dict(algo="dpsgd", args=["--algo", "dpsgd", "--optimizer", "sgd", "--lr", "0.1",
                                            "--init", "torch"] + SCHED, copies=False),
    "dpsgd_shuffle_pixels01_torch": dict(algo="dpsgd", args=["--algo", "dpsgd", "--sampler", "shuffle", "--optimizer",
                                                             "sgd", "--lr", "0.1", "--normalize", "none", "--init",
                                                             "torch"] + SCHED, copies=False),
    # the paper's other DP-SGD setting (it reports SGD as better): Adam lr 0.01
    "dpsgd_adam": dict(algo="dpsgd", args=["--algo", "dpsgd", "--optimizer", "adam", "--lr", "0.01"] + SCHED,
                       copies=False),
}

RUN_FIELDS = ["config", "model", "batch", "sigma0", "seed", "copies", "epochs", "epochs_done", "min_batch",
              "final_acc", "best_acc", "best_epoch", "final_test_loss", "epsilon_balle", "epsilon_classic",
              "epsilon_pld", "s_per_epoch", "command", "build"]


def account(dptrain, ledger, *extra):
    out = subprocess.run([dptrain, "account", "--ledger", ledger, "--json", *extra], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def done_keys(path):
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {(r["config"], r["model"], r["batch"], r["sigma0"], r["seed"], r["epochs"]) for r in csv.DictReader(f)}


def append_row(path, row):
    new = not os.path.exists(path)
    fields = RUN_FIELDS
    if not new:  # a runs.csv written before a column was added keeps its own columns
        with open(path, newline="") as f:
            fields = next(csv.reader(f), None) or RUN_FIELDS
    line_buf = []
    w = csv.DictWriter(_Lines(line_buf), fieldnames=fields, extrasaction="ignore")
    if new:
        w.writeheader()
    w.writerow(row)
    with open(path, "a") as f:  # one write per row: rows of concurrent processes do not interleave
        f.write("".join(line_buf))


class _Lines:
    def __init__(self, buf):
        self.buf = buf

    def write(self, s):
        self.buf.append(s)


def run_one(a, cfg_name, model, batch, sigma, seed):
    cfg = CONFIGS[cfg_name]
    name = "%s-%s-b%s-s%s-seed%s" % (cfg_name, model, batch, sigma, seed)
    rdir = os.path.join(a.out, "runs", name)
    lock = rdir + ".lock"
    try:
        os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
        os.mkdir(lock)  # claimed by this process
    except FileExistsError:
        print("skip %s (another process runs it)" % name, file=sys.stderr)
        return
    try:
        if os.path.exists(rdir):
            shutil.rmtree(rdir)
        cmd = [a.dptrain, "train", "--dataset", "mnist", "--data-dir", a.data_dir, "--model", MODELS[model],
               "--loss", "ce", "--threads", str(a.threads), "--no-progress", "--quiet", "--epochs", str(a.epochs),
               "--delta", "1e-5", "--clip", "1", "--batch-size", str(batch), "--seed", str(seed), "--out", rdir]
        cmd += cfg["args"]
        cmd += ["--sigma0" if cfg["algo"] == "dpulr" else "--sigma", str(sigma)]
        if cfg["copies"]:
            cmd += ["--copies", str(a.copies)]
        if a.max_train:
            cmd += ["--max-train", str(a.max_train), "--force"]  # delta 1e-5 >= 1/N on a subset
        if a.max_test:
            cmd += ["--max-test", str(a.max_test)]
        print("run %s ..." % name, file=sys.stderr, flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True)
        with open(rdir + ".log", "w") as f:
            f.write(p.stderr + p.stdout)
        if p.returncode != 0:
            sys.exit("grid.py: %s failed (exit %d):\n%s" % (name, p.returncode, p.stderr[-2000:]))
        ms = [json.loads(l) for l in open(os.path.join(rdir, "metrics.jsonl"))]
        accs = [m["test_accuracy"] for m in ms]
        best = max(range(len(accs)), key=lambda i: accs[i])
        row = dict(config=cfg_name, model=model, batch=batch, sigma0=sigma, seed=seed,
                   copies=a.copies if cfg["copies"] else "", epochs=a.epochs, epochs_done=ms[-1]["epoch"],
                   min_batch="", final_acc="%.2f" % (100 * accs[-1]), best_acc="%.2f" % (100 * accs[best]),
                   best_epoch=ms[best]["epoch"], final_test_loss="%.4f" % ms[-1]["test_loss"],
                   epsilon_balle="none", epsilon_classic="none", epsilon_pld="",
                   s_per_epoch="%.2f" % (ms[-1]["wall_s"] / ms[-1]["epoch"]),
                   command=" ".join("dptrain" if c == a.dptrain else c.replace(a.out, "$OUT") for c in cmd),
                   build=a.build)
        ledger = os.path.join(rdir, "ledger.json")
        if os.path.exists(ledger):
            e = account(a.dptrain, ledger)
            row["epsilon_balle"] = "%.4f" % e["epsilon_rdp"]
            row["epsilon_classic"] = "%.4f" % account(a.dptrain, ledger, "--conversion", "classic")["epsilon_rdp"]
            if e.get("epsilon_pld") is not None and isinstance(e.get("epsilon_pld"), (int, float)):
                row["epsilon_pld"] = "%.4f" % e["epsilon_pld"]
            with open(ledger) as f:
                row["min_batch"] = json.load(f).get("meta", {}).get("min_batch", "")
        append_row(os.path.join(a.out, "runs.csv"), row)
        print("  %s: final %s%% best %s%% (epoch %s) epsilon %s" % (name, row["final_acc"], row["best_acc"],
                                                                      row["best_epoch"], row["epsilon_balle"]),
              file=sys.stderr, flush=True)
    finally:
        os.rmdir(lock)


def build_of(dptrain):
    """The source revision of the library the binary runs with (`dptrain --version`'s build: line)."""
    out = subprocess.run([dptrain, "--version"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("build: "):
            return line[len("build: "):].strip()
    return "unknown"


def cmd_run(a):
    a.build = build_of(a.dptrain)
    done = done_keys(os.path.join(a.out, "runs.csv"))
    for cfg in a.configs.split():
        if cfg not in CONFIGS:
            sys.exit("grid.py: unknown config '%s' (known: %s)" % (cfg, ", ".join(CONFIGS)))
    for model in a.models.split():
        if model not in MODELS:
            sys.exit("grid.py: unknown model '%s' (known: %s)" % (model, ", ".join(MODELS)))
    # seeds outermost: a grid cut short has every cell at one seed before any at two
    for seed in a.seeds.split():
        for model in a.models.split():
            for batch in a.batches.split():
                for sigma in a.sigmas.split():
                    for cfg in a.configs.split():
                        key = (cfg, model, batch, sigma, seed, str(a.epochs))
                        if key in done:
                            continue
                        run_one(a, cfg, model, batch, sigma, seed)
                        done = done_keys(os.path.join(a.out, "runs.csv"))


def paper_numbers(table):
    """(algorithm, model, batch, sigma0) -> (valid acc, std) from paper.csv, as printed."""
    out = {}
    with open(os.path.join(HERE, "paper.csv")) as f:
        for r in csv.DictReader(l for l in f if not l.startswith("#")):
            if r["table"] == table:
                out[(r["algorithm"], r["model"], r["batch"], r["sigma0"])] = (r["valid_acc"], r["valid_std"])
    return out


def mean_std(xs):
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")
    return m, s


def fmt(x):
    return "" if x != x else "%.2f" % x


def cmd_summary(a):
    rows = list(csv.DictReader(open(os.path.join(a.out, "runs.csv"))))
    paper = paper_numbers(a.table)
    cells = []
    for r in rows:
        k = (r["config"], r["model"], r["batch"], r["sigma0"], r["epochs"])
        if k not in cells:
            cells.append(k)
    # groups (configuration, model, batch) in the order the runs first reached them, sigma0
    # ascending within each: two processes sharing the grid finish its cells out of order
    groups = []
    for k in cells:
        if k[:3] not in groups:
            groups.append(k[:3])
    cells.sort(key=lambda k: (groups.index(k[:3]), float(k[3]), k[4]))
    out = []
    for k in cells:
        rs = [r for r in rows if (r["config"], r["model"], r["batch"], r["sigma0"], r["epochs"]) == k]
        fm, fs = mean_std([float(r["final_acc"]) for r in rs])
        bm, bs = mean_std([float(r["best_acc"]) for r in rs])
        algo = CONFIGS[k[0]]["algo"] if k[0] in CONFIGS else k[0].split("_")[0]
        p = paper.get((algo, k[1], k[2], "%g" % float(k[3])), ("", ""))
        eb = sorted({r["epsilon_balle"] for r in rs})
        ec = sorted({r["epsilon_classic"] for r in rs})
        out.append(dict(config=k[0], model=k[1], batch=k[2], sigma0=k[3], epochs=k[4], seeds=len(rs),
                        final_mean=fmt(fm), final_std=fmt(fs), best_mean=fmt(bm), best_std=fmt(bs),
                        best_epochs=" ".join(r["best_epoch"] for r in rs),
                        epsilon_balle="/".join(eb), epsilon_classic="/".join(ec),
                        paper_valid_acc=p[0], paper_std=p[1],
                        final_minus_paper=fmt(fm - float(p[0])) if p[0] else "",
                        s_per_epoch=fmt(sum(float(r["s_per_epoch"]) for r in rs) / len(rs)),
                        final_loss_mean="%.4g" % mean_std([float(r["final_test_loss"]) for r in rs])[0]))
    with open(os.path.join(a.out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0]))
        w.writeheader()
        w.writerows(out)
    # gnuplot data: one block per (config, model, batch): sigma0 final_mean final_std best_mean paper
    with open(os.path.join(a.out, "summary.dat"), "w") as f:
        groups = []
        for r in out:
            g = (r["config"], r["model"], r["batch"])
            if g not in groups:
                groups.append(g)
        for g in groups:
            f.write('"%s %s batch %s" a b c d e\n' % g)
            sel = sorted((float(r["sigma0"]), r) for r in out if (r["config"], r["model"], r["batch"]) == g)
            for s, r in sel:
                f.write("%g %s %s %s %s\n" % (s, r["final_mean"], r["final_std"] or "0", r["best_mean"],
                                              r["paper_valid_acc"] or "NaN"))
            f.write("\n\n")
    print("wrote %s/summary.csv (%d cells)" % (a.out, len(out)), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--dptrain", default=os.path.join(HERE, "..", "..", "build", "dptrain"))
    r.add_argument("--data-dir", default=os.environ.get("DPT_SHARED_DATASETS", "/work/shared/datasets"))
    r.add_argument("--out", required=True)
    r.add_argument("--configs", required=True)
    r.add_argument("--models", default="small")
    r.add_argument("--batches", required=True)
    r.add_argument("--sigmas", required=True)
    r.add_argument("--seeds", default="1 2 3")
    r.add_argument("--epochs", type=int, default=25)
    r.add_argument("--copies", type=int, default=32)
    r.add_argument("--max-train", type=int, default=0)
    r.add_argument("--max-test", type=int, default=0)
    r.add_argument("--threads", type=int, default=1)
    s = sub.add_parser("summary")
    s.add_argument("--out", required=True)
    s.add_argument("--table", default="table1", choices=["table1", "c1"])
    a = ap.parse_args()
    if a.cmd == "run":
        a.dptrain = os.path.abspath(a.dptrain)
        cmd_run(a)
    else:
        cmd_summary(a)


if __name__ == "__main__":
    main()
