#!/usr/bin/env python3
"""Condenses a `dptrain train --trace` file (one JSON line per step) and the run's
metrics.jsonl into CSV rows, appended to OUT_CSV:

  trace_summary.py OUT_CSV RUN_NAME RUN_DIR TRACE [--every N]

One row per block of N steps (default: one block per epoch): run, first and last step of
the block, the epoch (completed epochs at the block's end), the test accuracy and loss of
that epoch when the block ends one, the mean update norm ||theta_t - theta_{t-1}||, the
mean norm of the direction handed to the optimizer, the parameter norm at the block's end
and per layer, and for DP-ULR per module: the median and maximum s_l over the block, the
fraction of blocks' steps with lambda_min = 0 (A_l rank deficient) and the fraction of the
block's examples whose estimate was clipped. Nothing is computed from anything but the
two files.
"""
import argparse
import csv
import json
import os
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_csv")
    ap.add_argument("run")
    ap.add_argument("run_dir")
    ap.add_argument("trace")
    ap.add_argument("--every", type=int, default=0, help="steps per row (0 = one row per epoch)")
    a = ap.parse_args()
    steps = []
    with open(a.trace) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:  # a line cut short by a stopped run
                continue
            if "step" in r:
                steps.append(r)
    metrics = {}
    mpath = os.path.join(a.run_dir, "metrics.jsonl")
    if os.path.exists(mpath):
        for line in open(mpath):
            m = json.loads(line)
            metrics[m["step"]] = m
    blocks, cur = [], []
    for r in steps:
        cur.append(r)
        end_of_epoch = r["step_in_epoch"] == r.get("steps_per_epoch", -1) or r["step"] in metrics
        if (a.every and len(cur) == a.every) or (not a.every and end_of_epoch):
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    nl = len(steps[0]["layers"]) if steps else 0
    nm = len(steps[0].get("dpulr", [])) if steps else 0
    fields = ["run", "step_first", "step_last", "epoch", "test_acc", "test_loss", "update_norm_mean",
              "direction_norm_mean", "param_norm"] + ["param_norm_layer%d" % i for i in range(nl)]
    for i in range(nm):
        fields += ["m%d_s_median" % i, "m%d_s_max" % i, "m%d_rank_deficient_frac" % i, "m%d_clipped_frac" % i]
    new = not os.path.exists(a.out_csv) or os.path.getsize(a.out_csv) == 0
    with open(a.out_csv, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        for b in blocks:
            last = b[-1]
            m = metrics.get(last["step"])
            row = dict(run=a.run, step_first=b[0]["step"], step_last=last["step"],
                       epoch=last["epoch"] + (1 if m else 0),
                       test_acc="%.2f" % (100 * m["test_accuracy"]) if m else "",
                       test_loss="%.4f" % m["test_loss"] if m else "",
                       update_norm_mean="%.5g" % statistics.mean(r["update_norm"] for r in b if "update_norm" in r),
                       direction_norm_mean="%.5g" % statistics.mean(r["direction_norm"] for r in b),
                       param_norm="%.5g" % last["param_norm"])
            for i, l in enumerate(last["layers"]):
                row["param_norm_layer%d" % i] = "%.5g" % l["param_norm"]
            for i in range(nm):
                ss = [r["dpulr"][i]["s"] for r in b]
                row["m%d_s_median" % i] = "%.4g" % statistics.median(ss)
                row["m%d_s_max" % i] = "%.4g" % max(ss)
                row["m%d_rank_deficient_frac" % i] = "%.3f" % (sum(r["dpulr"][i]["lambda_min"] == 0 for r in b) / len(b))
                ex = sum(r["dpulr"][i]["examples"] for r in b)
                row["m%d_clipped_frac" % i] = "%.3f" % (sum(r["dpulr"][i]["clipped"] for r in b) / ex if ex else 0)
            w.writerow(row)


if __name__ == "__main__":
    main()
