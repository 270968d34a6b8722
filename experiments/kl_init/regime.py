#!/usr/bin/env python3
"""Does the network train, and does its per-step KL grow? (issue 23, docs/kl_privacy.md)

For every configuration of a run.sh output directory (OUT/runs/<init>_d<L>_w<m>_s<seed>),
averaged over its runs: the training loss after the first step and at epochs EARLY and
EPOCHS (full batch: one epoch is one step; ln 2 = 0.693 is the loss of a zero output on two
balanced classes), the KL increment of the first step and of the last step (the per-step
term (eta / 4 sigma^2) ||grad L(D) - grad L(D')||^2 of the worst neighbour) and their ratio.
A ratio near 1 means the gradient difference did not change along the run (lazy, linear
regime: KL ~ B T); a growing ratio means the run left it.

    regime.py OUT EPOCHS EARLY   -> OUT/regime.csv
"""
import csv
import glob
import json
import os
import re
import sys
from collections import defaultdict


def main():
    out, epochs, early = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    acc = defaultdict(list)
    for d in sorted(glob.glob(os.path.join(out, "runs", "*"))):
        m = re.match(r"(\w+)_d(\d+)_w(\d+)_s(\d+)$", os.path.basename(d))
        f = os.path.join(d, "metrics.jsonl")
        if not m or not os.path.exists(f):
            continue
        recs = {}
        for line in open(f):
            o = json.loads(line)
            recs[o["epoch"]] = o
        if epochs not in recs or 1 not in recs:
            continue
        kl = lambda e: recs[e]["kl_worst"] if e > 0 else 0.0
        acc[(m.group(1), int(m.group(2)), int(m.group(3)))].append({
            "loss1": recs[1]["train_loss"], "loss_early": recs[early]["train_loss"], "loss_end": recs[epochs]["train_loss"],
            "inc_first": kl(1), "inc_last": kl(epochs) - kl(epochs - 1),
            "kl_early": kl(early), "kl_end": kl(epochs)})
    # n and n_test per configuration, as aggregate.py (run.sh ran it first) wrote them
    size = {(r["init"], int(r["depth"]), int(r["width"])): (r["n"], r["n_test"])
            for r in csv.DictReader(open(os.path.join(out, "kl_all.csv")))}
    cols = ["init", "depth", "width", "n", "n_test", "runs", "train_loss_step1", "train_loss_epoch%d" % early,
            "train_loss_epoch%d" % epochs, "kl_increment_first", "kl_increment_last", "increment_ratio_last_first",
            "kl_epoch%d" % early, "kl_epoch%d" % epochs]
    with open(os.path.join(out, "regime.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        order = {"he": 0, "xavier": 1, "lecun": 2, "ntk": 3}
        for key in sorted(acc, key=lambda k: (order.get(k[0], 9), k[2], k[1])):
            rs = acc[key]
            mean = lambda k: sum(r[k] for r in rs) / len(rs)
            w.writerow(list(key) + list(size[key]) + [len(rs)] + ["%.4g" % mean(k) for k in ("loss1", "loss_early", "loss_end",
                                                                          "inc_first", "inc_last")] +
                       ["%.3g" % (mean("inc_last") / mean("inc_first")) if mean("inc_first") > 0 else "nan",
                        "%.4g" % mean("kl_early"), "%.4g" % mean("kl_end")])
    print(open(os.path.join(out, "regime.csv")).read())


if __name__ == "__main__":
    main()
