#!/usr/bin/env python3
"""Aggregates the noisy-GD runs of run.sh into CSVs. Per run the worst case over the
neighbours (kl_worst in metrics.jsonl: max over removing any training record and adding any
test record) is taken at each epoch; across runs we report its mean and (sample) standard
deviation, as the paper's figures do. At the last epoch we also report worst_of_mean = max
over neighbours D' of the mean over runs of KL(D') (from kl_candidates.csv), which is the
estimator of max_D' E[KL] in the paper's definition. n (training records) and n_test (the
held-out "add" candidates) are in every row: KL scales like 1/n^2 at a fixed gradient scale.
usage: aggregate.py OUT EPOCHS EARLY (reads OUT/runs, OUT/B.csv; writes OUT/*.csv)"""
import csv, glob, json, math, os, re, sys
from collections import defaultdict

out, epochs, early = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
B = {}
for r in csv.DictReader(open(os.path.join(out, "B.csv"))):
    B[(r["init"], int(r["depth"]), int(r["width"]))] = float(r["B"])

runs = defaultdict(list)  # (init, depth, width) -> [run dir]
for d in sorted(glob.glob(os.path.join(out, "runs", "*"))):
    m = re.match(r"(\w+)_d(\d+)_w(\d+)_s(\d+)$", os.path.basename(d))
    if m and os.path.exists(os.path.join(d, "kl_candidates.csv")):
        runs[(m.group(1), int(m.group(2)), int(m.group(3)))].append(d)

def curve(d):
    v = [0.0] * (epochs + 1)
    for line in open(os.path.join(d, "metrics.jsonl")):
        o = json.loads(line)
        if o["epoch"] <= epochs:
            v[o["epoch"]] = o["kl_worst"]
    return v

def sizes(d):
    """(n, held-out candidates) the run's estimate is for, from its last metrics line"""
    o = {}
    for line in open(os.path.join(d, "metrics.jsonl")):
        o = json.loads(line)
    if "kl_records" not in o:  # a run from a binary before the key: the training file's name
        m = re.search(r"train_(\d+)\.csv,\S*test_(\d+)\.csv", open(d + ".log").read() if os.path.exists(d + ".log") else "")
        if not m:
            sys.exit("aggregate.py: %s/metrics.jsonl has no kl_records (rerun it with this build)" % d)
        return int(m.group(1)), int(m.group(2))
    return int(o["kl_records"]), int(o.get("kl_heldout_records", 0))

def stats(xs):
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, s

def worst_of_mean(dirs):
    acc = defaultdict(float)
    for d in dirs:
        for r in csv.DictReader(open(os.path.join(d, "kl_candidates.csv"))):
            acc[(r["kind"], r["record"], r["heldout"])] += float(r["kl"]) / len(dirs)
    return max(acc.values())

rows = []
for key, dirs in sorted(runs.items()):
    curves = [curve(d) for d in dirs]
    ns = {sizes(d) for d in dirs}
    if len(ns) != 1:  # KL scales like 1/n^2: runs of different sizes must not be averaged
        sys.exit("aggregate.py: the runs of %s_d%d_w%d were made with different (n, held-out) %s" % (key + (sorted(ns),)))
    n, n_test = ns.pop()
    for e in range(epochs + 1):
        m, s = stats([c[e] for c in curves])
        rows.append(dict(init=key[0], depth=key[1], width=key[2], n=n, n_test=n_test, epoch=e, runs=len(dirs),
                         kl_mean=m, kl_std=s,
                         worst_of_mean=worst_of_mean(dirs) if e == epochs else "", B=B.get(key, "")))
with open(os.path.join(out, "kl_all.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["init"])
    w.writeheader()
    w.writerows(rows)
print("aggregate.py: %d configurations, %d rows -> %s/kl_all.csv" % (len(runs), len(rows), out))
