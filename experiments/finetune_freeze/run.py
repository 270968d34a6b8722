#!/usr/bin/env python3
"""DP fine-tuning from a public model, with and without frozen layers.

The first PUBLIC examples of Fashion-MNIST's training split stand in for public data: a
non-private model (mlp:784-128-64-32-10:gelu, Adam 1e-3, 20 epochs) is trained on them. Then
DP-SGD (the README main job's settings: SGD lr 0.5, expected batch 256, clip 1, 5 epochs,
delta 1e-5, sigma calibrated to each target epsilon) trains on the other examples, starting
  random   from a random initialization (no public data),
  public   from the public model, every layer training,
  fc1      from the public model with fc1 frozen (100,480 of 111,146 parameters),
  fc1-2    ... with fc1 and fc2 frozen (2,410 parameters train),
  fc1-3    ... with fc1, fc2 and fc3 frozen (the last layer alone, 330 parameters).
Every variant's epsilon is the ledger's (RDP) for exactly its sampling: freezing does not
change it. Writes OUT/results.csv (one row per seed and setting: final and best test
accuracy, epsilon, trained parameters, training seconds), OUT/summary.csv (mean and
standard deviation over the seeds) and OUT/accuracy.png (gnuplot: accuracy against epsilon
per variant, one panel per public set size).

    /usr/bin/python3 experiments/finetune_freeze/run.py [--smoke] [--out DIR] [--seeds 1,2,3]
        [--data DIR] [--public 2000,10000] [--epsilons 0.5,1,3]

--smoke: synthetic data made here, a tiny model, one seed: seconds (CI runs it). The full
run takes about 30 minutes on 2 cores. Needs the dptrain Python package (PYTHONPATH=python,
DPTRAIN_BUILD_DIR=build after python/build_ffi.py; docs/python.md).
"""
import argparse
import csv
import math
import os
import shutil
import subprocess
import sys

import numpy as np

SPEC = "mlp:784-128-64-32-10:gelu"
VARIANTS = [("random", None), ("public", []), ("fc1", ["fc1"]), ("fc1-2", ["fc1", "fc2"]),
            ("fc1-3", ["fc1", "fc2", "fc3"])]


def fashion_mnist(d):
    import dptrain
    x, y = dptrain.load_idx(os.path.join(d, "train-images-idx3-ubyte.gz"), os.path.join(d, "train-labels-idx1-ubyte.gz"))
    xt, yt = dptrain.load_idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"), os.path.join(d, "t10k-labels-idx1-ubyte.gz"))
    # Fashion-MNIST's published mean and std: no statistic of the private examples
    return (x.reshape(len(x), -1) - 0.286) / 0.353, y, (xt.reshape(len(xt), -1) - 0.286) / 0.353, yt


def blobs(n, d, k, seed):
    r = np.random.default_rng(seed)
    y = np.arange(n) % k
    x = r.normal(0, 1.0, (n, d)).astype(np.float32)
    x[np.arange(n), y] += 2.5
    return x, y.astype(np.int32)


def accuracies(run):
    h = run.history
    acc = [e["test_accuracy"] for e in h] if isinstance(h, list) else list(h["test_accuracy"])
    wall = h[-1]["wall_s"] if isinstance(h, list) else float(h["wall_s"].iloc[-1])
    return 100 * acc[-1], 100 * max(acc), wall


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--smoke", action="store_true", help="synthetic data, tiny model, one seed (seconds)")
    ap.add_argument("--out", default=None, help="output directory (default: experiments/finetune_freeze/out)")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="Fashion-MNIST's IDX files")
    ap.add_argument("--public", default="2000,10000", help="public set sizes (the first examples)")
    ap.add_argument("--epsilons", default="0.5,1,3", help="target epsilons of the private runs")
    a = ap.parse_args(argv)
    import dptrain

    here = os.path.dirname(os.path.abspath(__file__))
    out = a.out or os.path.join(here, "out_smoke" if a.smoke else "out")
    os.makedirs(out, exist_ok=True)
    seeds = [int(s) for s in a.seeds.split(",")]
    publics = [int(p) for p in a.public.split(",")]
    epsilons = [float(e) for e in a.epsilons.split(",")]
    spec, epochs, pre_epochs, variants = SPEC, 5, 20, VARIANTS
    if a.smoke:
        x, y = blobs(1500, 20, 3, 1)
        xt, yt = blobs(600, 20, 3, 2)
        spec, epochs, pre_epochs = "mlp:20-16-8-3:relu", 2, 5
        seeds, publics, epsilons = seeds[:1], [300], [2.0]
        variants = [("random", None), ("public", []), ("fc1", ["fc1"])]
    else:
        x, y, xt, yt = fashion_mnist(a.data)
    common = dict(x_test=xt, y_test=yt, verbose=False, progress=False)
    rows = []
    for seed in seeds:
        for n_pub in publics:
            pub = dptrain.train(x[:n_pub], y[:n_pub], model=spec, epochs=pre_epochs, seed=seed, **common)
            pub_acc = accuracies(pub)[0]
            for eps in epsilons:
                for name, freeze in variants:
                    model = spec if freeze is None else pub.model
                    r = dptrain.train(x[n_pub:], y[n_pub:], model=model,
                                      algorithm=dptrain.DPSGD(target_epsilon=eps, delta=1e-5), epochs=epochs, optimizer="sgd", lr=0.5, batch_size=256,
                                      freeze=freeze or None, seed=seed, **common)
                    final, best, wall = accuracies(r)
                    total = r.model.n_params
                    frozen = sum(v.size for k, v in r.model.parameters().items() if k.split(".")[0] in (freeze or []))
                    rows.append(dict(seed=seed, public_examples=n_pub, public_accuracy="%.2f" % pub_acc,
                                     target_epsilon=eps, epsilon="%.4f" % r.epsilon, variant=name,
                                     frozen="+".join(freeze or []) or "none", trained_params=total - frozen,
                                     final_accuracy="%.2f" % final, best_accuracy="%.2f" % best,
                                     train_seconds="%.1f" % wall))
                    print("seed %d public %d epsilon %.3f %-6s final %.2f%% best %.2f%%" % (
                        seed, n_pub, r.epsilon, name, final, best), flush=True)
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    summary = []
    for n_pub in publics:
        for eps in epsilons:
            for name, _ in variants:
                acc = [float(r["final_accuracy"]) for r in rows
                       if r["public_examples"] == n_pub and r["target_epsilon"] == eps and r["variant"] == name]
                best = [float(r["best_accuracy"]) for r in rows
                        if r["public_examples"] == n_pub and r["target_epsilon"] == eps and r["variant"] == name]
                sd = float(np.std(acc, ddof=1)) if len(acc) > 1 else float("nan")
                summary.append(dict(public_examples=n_pub, target_epsilon=eps, variant=name, seeds=len(acc),
                                    final_mean="%.2f" % np.mean(acc), final_sd="%.2f" % sd,
                                    best_mean="%.2f" % np.mean(best)))
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0]))
        w.writeheader()
        w.writerows(summary)
    plot(out, publics, variants)
    print("wrote %s/results.csv, summary.csv%s" % (out, ", accuracy.png" if shutil.which("gnuplot") else ""))


def plot(out, publics, variants):
    if not shutil.which("gnuplot"):
        print("gnuplot not found: no plot", file=sys.stderr)
        return
    # one data block per (public size, variant): epsilon, mean, sd, so each variant is a line
    with open(os.path.join(out, "summary.csv")) as f:
        summary = list(csv.DictReader(f))
    dat = os.path.join(out, "accuracy.dat")
    with open(dat, "w") as f:
        for n_pub in publics:
            for name, _ in variants:
                for r in summary:
                    if int(r["public_examples"]) == n_pub and r["variant"] == name:
                        f.write("%s %s %s\n" % (r["target_epsilon"], r["final_mean"],
                                                 "0" if r["final_sd"] == "nan" else r["final_sd"]))
                f.write("\n\n")
    gp = ["set terminal pngcairo size %d,450" % (520 * len(publics)), "set output '%s'" % os.path.join(out, "accuracy.png"),
          "set key bottom right", "set xlabel 'target epsilon (delta 1e-5)'",
          "set ylabel 'test accuracy (%), mean +- sd of the seeds'", "set logscale x", "set grid",
          "set multiplot layout 1,%d" % len(publics)]
    for i, n_pub in enumerate(publics):
        gp.append("set title 'DP-SGD fine-tuning from a model of %d public examples'" % n_pub)
        gp.append("plot " + ", ".join(
            "'%s' index %d using 1:2:3 with yerrorlines title '%s'"
            % (dat, i * len(variants) + k, name if name != "public" else "public (all layers)")
            for k, (name, _) in enumerate(variants)))
    gp.append("unset multiplot")
    path = os.path.join(out, "accuracy.gp")
    with open(path, "w") as f:
        f.write("\n".join(gp) + "\n")
    if subprocess.run(["gnuplot", path], stderr=subprocess.DEVNULL).returncode != 0:
        with open(path, "w") as f:
            f.write("\n".join(gp).replace("pngcairo", "png") + "\n")
        subprocess.run(["gnuplot", path], check=True)


if __name__ == "__main__":
    main(sys.argv[1:])
