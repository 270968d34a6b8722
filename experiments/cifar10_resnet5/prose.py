#!/usr/bin/env python3
"""docs/dpulr.md's Section 4.3 text on the DP-ULR runs of sessions 31-37 on CIFAR-10, filled in
from the CSVs the runs and the probe wrote, so that no number of our runs in it is typed by hand.
Five parts of the doc (PARTS), each from the line starting with its first words up to the line
starting with the next marker (blank lines before it stay); their prose and md_tables.py markers
are rendered here, the tables under the markers are md_tables.py's (--write refills them, --check
leaves them to `md_tables.py check`):

  "**The baseline alone, sessions"     the baseline alone over three seeds, antithetic pairs of
                                       the same seeds, whether each run has stopped rising
  "**More perturbations per example"   K = 16 against K = 4
  "**Why DP-ULR trails DP-SGD here"    the gradient-signal probe (signal.sh) and what it implies
                                       per epoch and at equal epsilon
  "**The paper's other captions"       q 1/25 with sigma0 8 and 4
  "- Section 4.3: DP-ULR to its plateau"  the item of "Not run (compute)"

Read from results/: dpulr_base.csv, dpulr_q25.csv (run.sh --collect of sessions 31-36),
dpulr_long.csv (session 28), dpulr_results.csv (issue 10), results.csv (DP-SGD),
signal_summary.csv (signal.sh) and trace20_explicit.csv (the traced steps). Fixed text here is
what the CSVs do not hold: which build ran which steps, the run settings, and the runs' history.

Without --check or --write it prints the parts.
"""
import argparse
import difflib
import os
import math
import statistics as st
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, os.path.join(HERE, "..", "dpulr_table1"))
import md_tables  # noqa: E402  (the tables inside the block are md_tables.py's)

STEPS = 50  # steps per epoch at q 1/50
ANTI = "dpulr-q50-s5"
SEEDS = ["dpulr-q50-s5+base", "dpulr-q50-s5+base+seed2", "dpulr-q50-s5+base+seed3"]
ANTI2 = "dpulr-q50-s5+seed2"
K16 = "dpulr-q50-s5+base+k16"
Q25 = ["dpulr-q25-s8+base", "dpulr-q25-s4+base"]
Q25_OLD = ["dpulr-q25-s8", "dpulr-q25-s4"]  # issue 10's runs (dpulr_results.csv)
DPSGD = ["dpsgd", "dpsgd+seed2", "dpsgd+seed3"]
# the step of each baseline seed from which the f4a3ac4 build ran it, and from which sessions 33,
# 34, 35 and 36 ran it (the command file has each resume; None: not resumed in that session);
# K16_S34: the K = 16 run's step at session 34
F4_FROM = [1924, 1933, 251]
S33_FROM = [3450, 3500, 1800]
S34_FROM = [5000, 5050, 3350]
S35_FROM = [7050, 6850, None]
S36_FROM = [8050, 7850, None]
# where session 37 resumed the runs (seeds 1-3, antithetic seed 2, K = 16, q 1/25 sigma0 8 and 4;
# None: not resumed); the machine was shut down before they were collected again and their
# checkpoints were lost, so nothing after the collected epochs exists
S37_FROM = [8650, 8450, None, 4000, 2400, 1925, 1950]
K16_S34 = 500
# the settings of run.sh's rows (not results): DP-SGD q and sigma, DP-ULR q and sigma0
Q_SGD, SIGMA_SGD, Q_ULR, SIGMA0 = 0.00128, 1.0, 0.02, 5.0
# the doc's parts: (first words of the first line, first words of the line after the part;
# None: the part is a list item, up to its last continuation line)
PARTS = [("**The baseline alone, sessions", "![DP-SGD and DP-ULR on CIFAR-10]"),
         ("**More perturbations per example", "**Why DP-ULR trails DP-SGD here"),
         ("**Why DP-ULR trails DP-SGD here", "![Clipped estimates along the true gradient]"),
         ("**The paper's other captions", "![DP-ULR at q 1/25 on CIFAR-10]"),
         ("- Section 4.3: DP-ULR to its plateau", None)]
CURVE_EPOCHS = "1,2,5,10,15,20,25,30,40,50"
PLATEAU_RISE, PLATEAU_WINDOW, PLATEAU_MEAN = md_tables.PLATEAU_RISE, md_tables.PLATEAU_WINDOW, md_tables.PLATEAU_MEAN
OLD_WINDOW = 10  # the plateau rule's window until after session 34 (its history, in the text)


class ProseError(Exception):
    pass


def load(path, run, need=("epoch", "step", "test_accuracy", "epsilon_rdp", "wall_s"), steps=STEPS):
    """{epoch: row} of RUN's whole epochs (step = steps x epoch; every row when steps is None)"""
    out = {}
    try:
        for e, r in md_tables.run_rows(path, md_tables.rows_of(path, ["run"] + list(need)), run).items():
            if steps is None or int(r["step"]) == steps * e:
                out[e] = {"acc": float(r["test_accuracy"]) * 100, "step": int(r["step"]),
                          "eps": float(r["epsilon_rdp"]), "wall": float(r.get("wall_s") or "nan")}
    except ValueError as e:
        raise ProseError("%s, run %s: %s" % (path, run, e))
    if not out:
        raise ProseError("%s: the run %s has no whole epoch" % (path, run))
    return out


def best(b):
    """(accuracy, epoch) of the best epoch, the first of equal ones (as md_tables.py)"""
    e = min(b, key=lambda e: (-b[e]["acc"], e))
    return b[e]["acc"], e


def stopped(b):
    """the plateau rule (md_tables.py cifar_plateau's)"""
    return md_tables.plateau({e: v["acc"] for e, v in b.items()})[2]


def old_rule_miss(b):
    """(n, e, a, f, e_max, a_max) when the rule over OLD_WINDOW epochs said b had stopped rising
    and b found a new best after: n the first epoch of the last such stretch of epochs, e and a its
    best epoch and accuracy then, f the first epoch after n above a, e_max and a_max b's best
    after n; None when that never happened"""
    acc = {e: v["acc"] for e, v in b.items()}
    upto = lambda n: {e: x for e, x in acc.items() if e <= n}
    held = [n for n in sorted(acc) if md_tables.plateau(upto(n), OLD_WINDOW)[2]]
    out = None
    for i, n in enumerate(held):
        if i and held[i - 1] == n - 1:
            continue  # within a stretch: its first epoch said so first
        e = md_tables.plateau(upto(n), OLD_WINDOW)[1]
        later = [f for f in sorted(acc) if f > n and acc[f] > acc[e]]
        if later:
            e_max = min(later, key=lambda f: (-acc[f], f))
            out = (n, e, acc[e], later[0], e_max, acc[e_max])
    return out


def misses_text(runs):
    """what the rule over OLD_WINDOW epochs got wrong about runs [(b, name)]"""
    out = []
    for b, name in runs:
        m = old_rule_miss(b)
        if m:
            n, e, a, f, e_max, a_max = m
            later = "%d epoch%s later" % (f - n, "" if f - n == 1 else "s")
            first = "a new best " + later if f == e_max else "new bests from %s on" % later
            out.append("%s had stopped at epoch %d (best %.2f%% at %d) and then reached %.2f%% at %d (%+.2f points, %s)"
                       % (name, n, a, e, a_max, e_max, a_max - a, first))
    return out


def seconds_per_epoch(b, first_step, last_step=None):
    """wall seconds of each epoch that started at or after first_step and ended at or before
    last_step (None: any end); wall_s is the run's training time so far"""
    prev = lambda e: (0.0, 0) if e == 1 else (b[e - 1]["wall"], b[e - 1]["step"]) if e - 1 in b else (None, -1)
    return [b[e]["wall"] - prev(e)[0] for e in sorted(b) if prev(e)[0] is not None and prev(e)[1] >= first_step
            and (last_step is None or b[e]["step"] <= last_step)]


def ahead(x, y):
    """epochs both runs have, and x's accuracy minus y's in each"""
    common = [e for e in sorted(x) if e in y]
    return common, [x[e]["acc"] - y[e]["acc"] for e in common]


def counted(d):
    """'in 12 of 15 epochs, by -0.50 to +2.10'"""
    return "in %d of %d epochs, by %+.2f to %+.2f" % (sum(v > 0 for v in d), len(d), min(d), max(d))


def at_epsilon(b, eps):
    """the last whole epoch of b whose epsilon is at most eps, or None"""
    es = [e for e in sorted(b) if b[e]["eps"] <= eps * (1 + 1e-12)]
    return es[-1] if es else None


def read_summary(path):
    """{(point, method, K): proj_mean} and {(point, method + ":cos", K): cos_mean} of signal_summary.csv"""
    out = {}
    try:
        for r in md_tables.rows_of(path, md_tables.SIGNAL_COLS):
            out[(r["point"], r["method"], int(r["K"]))] = float(r["proj_mean"])
            out[(r["point"], r["method"] + ":cos", int(r["K"]))] = float(r["cos_mean"])
    except ValueError as e:
        raise ProseError("%s: %s" % (path, e))
    return out


def render(results):
    R = lambda f: os.path.join(results, f)
    base = R("dpulr_base.csv")
    ex = load(R("dpulr_long.csv"), ANTI)
    S = [load(base, r) for r in SEEDS]
    A2, K = load(base, ANTI2), load(base, K16)
    Q = [load(R("dpulr_q25.csv"), r, steps=25) for r in Q25]
    QO = [load(R("dpulr_results.csv"), r, need=("epoch", "step", "test_accuracy", "epsilon_rdp"), steps=25)
          for r in Q25_OLD]
    D = [load(R("results.csv"), r, steps=None) for r in DPSGD]
    s1, s2, _ = S
    n1, n2, n3 = (max(b) for b in S)
    E = min(n1, n2, n3)
    c1, d1 = ahead(s1, ex)
    c2, d2 = ahead(s2, A2)
    if len(c1) < 8 or len(c2) < 3:
        raise ProseError("the baseline seeds share too few epochs with the antithetic runs")
    best_ex = best(ex)[0]
    at_E = [b[E]["acc"] for b in S]
    sec32 = sorted(x for b, f, l in zip(S, F4_FROM, S33_FROM) for x in seconds_per_epoch(b, f, l))
    sec33 = sorted(x for b, f, l in zip(S, S33_FROM, S34_FROM) for x in seconds_per_epoch(b, f, l))
    sec34 = sorted(x for b, f, l in zip(S, S34_FROM, S35_FROM) for x in seconds_per_epoch(b, f, l))
    sec35 = sorted(x for b, f, l in zip(S, S35_FROM, S36_FROM) if f is not None for x in seconds_per_epoch(b, f, l))
    sec36 = sorted(x for b, f in zip(S, S36_FROM) if f is not None for x in seconds_per_epoch(b, f))
    sec_k = sorted(seconds_per_epoch(K, 0, K16_S34))
    if not sec32 or not sec33 or not sec_k:
        raise ProseError("no whole epoch of session 32 or 33 in %s" % base)
    s34 = (f" and median {st.median(sec34):.0f} s ({sec34[0]:.0f}-{sec34[-1]:.0f} s over {len(sec34)} epochs) in session 34,"
           " where the three seeds ran at a higher priority than four other runs (autogroup nice 10"
           " against 19; seeds 2 and 3 back at the lower one from 04:08 UTC and seed 1 from 04:23,"
           f" when the rule below, then over {OLD_WINDOW} epochs, said they had stopped rising)" if sec34 else "")
    s35 = (f"; median {st.median(sec35):.0f} s ({sec35[0]:.0f}-{sec35[-1]:.0f} s over {len(sec35)} epochs) in session 35,"
           " seeds 1 and 2 with four other runs, all at the lowest priority, while the session's builds, tests and"
           " helper agents took the cores much of the time" if sec35 else "")
    s35 += (f"; median {st.median(sec36):.0f} s ({sec36[0]:.0f}-{sec36[-1]:.0f} s over {len(sec36)} epochs) in session 36,"
            " the same six runs (K = 16 at a higher priority, autogroup nice 5, from about 08:25 UTC) beside the session's"
            " builds, test runs, a fine-tuning experiment and a helper" if sec36 else "")
    unresumed = [i + 1 for i, f in enumerate(S35_FROM) if f is None and S36_FROM[i] is None]
    if unresumed:
        u = S[unresumed[0] - 1]
        (ua, ue), un = best(u), max(u)
        s35 += (f"; seed {unresumed[0]} was not resumed in sessions 35 and 36: at epoch {un} it had stopped rising by the"
                f" rule below with either window ({OLD_WINDOW} or {PLATEAU_WINDOW} epochs; best {ua:.2f}% at epoch"
                f" {ue}, {un - ue} epochs back)" if stopped(u) and
                md_tables.plateau({e: v["acc"] for e, v in u.items()}, OLD_WINDOW)[2] else "")
    d_best = [best(b) for b in D]
    d_eps = [b[e]["eps"] for b, (_, e) in zip(D, d_best)]
    d_acc = [a for a, _ in d_best]
    runs5 = [(ex, "antithetic pairs, seed 1 (stopped after epoch 50)"), (s1, "the baseline alone, seed 1"),
             (s2, "the baseline alone, seed 2"), (S[2], "the baseline alone, seed 3"), (A2, "antithetic pairs, seed 2")]
    done = [name for b, name in runs5 if stopped(b)]
    rising = [name for b, name in runs5 if not stopped(b)]
    misses = misses_text(runs5)
    history = (f"\n  Until after session 34 the window was {OLD_WINDOW} epochs (the {PLATEAU_MEAN} epochs {OLD_WINDOW} before, the "
               f"best {OLD_WINDOW} back)" + ("; by it " + "; ".join(misses) + f": for curves this noisy and slow, "
                                             f"{OLD_WINDOW} epochs were too short" if misses else "") + ".")
    # the three seeds at their best epochs, once every one of them has stopped rising
    if all(stopped(b) for b in S):
        bests = [best(b) for b in S]
        b_acc = [a for a, _ in bests]
        plateau = ("\n- **All three seeds of the baseline alone have stopped rising** by that rule: best epochs "
                   + ", ".join("%.2f%% (seed %d, epoch %d, epsilon %.2f)" % (a, i + 1, e, b[e]["eps"])
                               for i, ((a, e), b) in enumerate(zip(bests, S)))
                   + ": %.2f +- %.2f%%, against DP-SGD's %.2f +- %.2f%% and the paper's \"comparable\"; %.1f points "
                     "below." % (st.mean(b_acc), st.stdev(b_acc), st.mean(d_acc), st.stdev(d_acc),
                                st.mean(d_acc) - st.mean(b_acc)))
    else:
        plateau = ""
    B = "experiments/cifar10_resnet5/results/"
    parts = []

    parts.append(f"""**The baseline alone, sessions 31-36** (`results/dpulr_base.csv`, written by `run.sh
--collect` from the runs' metrics; commands and the build of every start and resume in
`results/dpulr_base_command.txt`; the text of this part and of the three after it is filled in
from the CSVs by `experiments/cifar10_resnet5/prose.py`, checked in CI): Table 1's
`dpulr_baseline` on CIFAR-10, i.e. `dpulr-q50-s5` above with `--baseline` and without
`--antithetic` (K = 4 independent perturbations instead of 2 antithetic pairs; same q 1/50,
sigma0 5, Adam lr 0.001, same epsilon), `NOISE=baseline SEED=s run.sh --epochs 200 --rows
dpulr-q50-s5+base` (seed 1; rows `+base+seed2`, `+base+seed3` for seeds 2 and 3), one thread
each at the lowest priority. Builds: 657d91e (session 31, and up to steps 1798 / 1806 / 124
of seeds 1 / 2 / 3), then 2e76a65 (the padded unfold of `docs/cnn.md` "Session 32":
bit-identical, checked by resuming a copy of seed 2's checkpoint at step 1750 for 4 steps
with both builds: the same parameters and ledger) up to steps {F4_FROM[0]} / {F4_FROM[1]} / {F4_FROM[2]}, then f4a3ac4 (its
direct forward: the same computation up to float rounding, about 1.55x faster per step).
From those last steps on, one build alone would not reproduce the curves bit for bit; the
sampling, the privacy noise and so the epsilons do not depend on the build. Session 33
added an antithetic-pairs run of seed 2 (`NOISE=explicit SEED=2 ... --rows {ANTI2}`,
started afresh on f4a3ac4; the 175 steps run under that name in sessions 31-32 were set
aside, not in the CSV). Time per epoch with f4a3ac4: median {st.median(sec32):.0f} s ({sec32[0]:.0f}-{sec32[-1]:.0f} s over {len(sec32)} epochs) with three
runs on the 2 cores (session 32; the long ones while CI runs shared the cores), median
{st.median(sec33):.0f} s ({sec33[0]:.0f}-{sec33[-1]:.0f} s over {len(sec33)} epochs) with seven runs on them (session 33; CI and the probe below part of the time){s34}{s35}; 128-205 s in
session 31 with two runs and the first build. The tables are of the epochs collected when
this was written ({n1}, {n2} and {n3}; antithetic seed 2: {max(A2)}), and they are final: session 37 resumed
the runs (seeds 1 and 2 from steps {S37_FROM[0]} and {S37_FROM[1]}, antithetic seed 2 from {S37_FROM[3]}, K = 16 from {S37_FROM[4]}, the
q 1/25 captions from {S37_FROM[5]} and {S37_FROM[6]}: the checkpoints were a little past the collected epochs)
and the machine running them was shut down before anything more was collected. Their
checkpoints were in run.sh's OUT, a scratch directory outside the repository that did not
survive, so there is nothing left for `run.sh --resume` to continue; going on would mean
rerunning each from step 0 (for seed 1, {n1} epochs at the times per epoch above).

<!-- md_tables.py cifar_curves {B}dpulr_long.csv {STEPS} {CURVE_EPOCHS} '{ANTI}=antithetic pairs + baseline, seed 1 (session 28)' {B}dpulr_base.csv '{SEEDS[0]}=baseline alone, seed 1' '{SEEDS[1]}=baseline alone, seed 2' '{SEEDS[2]}=baseline alone, seed 3' '{ANTI2}=antithetic pairs + baseline, seed 2' -->

The three seeds of the baseline alone up to the last epoch all of them reached:

<!-- md_tables.py cifar_seeds {B}dpulr_base.csv upto:{E} {SEEDS[0]} {SEEDS[1]} {SEEDS[2]} -->

- **With the same seed (so the same initialization), the baseline alone is ahead of
  antithetic pairs** for seed 1 {counted(d1)} points (at epoch 1:
  {s1[1]["acc"]:.2f}% against {ex[1]["acc"]:.2f}%), and for seed 2 {counted(d2)}. Seed 1's
  {s1[n1]["acc"]:.2f}% at epoch {n1} is {"above" if s1[n1]["acc"] > best_ex else "below"} the best antithetic pairs reached in {max(ex)} epochs ({best_ex:.2f}%).
- Over the three seeds at epoch {E}: {st.mean(at_E):.2f} +- {st.stdev(at_E):.2f}% ({("the antithetic seed-1 run: %.2f%%" % ex[E]["acc"]) if E in ex else "the antithetic seed-1 run stopped after epoch %d" % max(ex)}).
- **Has accuracy stopped rising?** The rule (`md_tables.py cifar_plateau`): the mean accuracy of
  the last {PLATEAU_MEAN} whole epochs is less than {PLATEAU_RISE} points above that of the {PLATEAU_MEAN} epochs {PLATEAU_WINDOW} before, and the
  best epoch is {PLATEAU_WINDOW} or more epochs back. {("Stopped by it: " + "; ".join(done) + ". Still rising: " + "; ".join(rising)) if done else "None of the runs has stopped rising by it (" + "; ".join(rising) + ")"}.{history}
  All stay far below DP-SGD's {st.mean(d_acc):.2f} +- {st.stdev(d_acc):.2f}% (best epoch, 3 seeds) at a similar
  epsilon ({s1[n1]["eps"]:.2f} here after {n1} epochs against DP-SGD's {min(d_eps):.2f}-{max(d_eps):.2f} at its best epochs,
  {min(e for _, e in d_best)}-{max(e for _, e in d_best)}).{plateau}

<!-- md_tables.py cifar_plateau {B}dpulr_long.csv {STEPS} '{ANTI}=antithetic pairs, seed 1' {B}dpulr_base.csv '{SEEDS[0]}=baseline alone, seed 1' '{SEEDS[1]}=baseline alone, seed 2' '{SEEDS[2]}=baseline alone, seed 3' '{ANTI2}=antithetic pairs, seed 2' '{K16}=baseline alone, K 16, seed 1' -->
""")

    ck, dk = ahead(K, s1)
    top3 = [K[e]["acc"] - max(b[e]["acc"] for b in S) for e in ck if all(e in b for b in S)]
    sec_s1 = sorted(seconds_per_epoch(s1, S33_FROM[0], S34_FROM[0]))
    parts.append(f"""**More perturbations per example (K = 16), sessions 33-36** (`COPIES=16 NOISE=baseline SEED=1
run.sh --epochs 200 --rows {K16}`, rows in `results/dpulr_base.csv`): the baseline alone
as above with K = 16 instead of 4, seed 1 (so the same initialization as the K = 4 seed 1),
same q, sigma0 and so the same epsilon per epoch; each step runs the rest of the network
forward on 4 times as many perturbed rows. Collected to epoch {max(K)}:

<!-- md_tables.py cifar_curves {B}dpulr_base.csv {STEPS} only:{",".join(str(e) for e in sorted(K))} '{SEEDS[0]}=K 4, seed 1' '{SEEDS[1]}=K 4, seed 2' '{SEEDS[2]}=K 4, seed 3' '{K16}=K 16, seed 1' -->

- K = 16 against K = 4 of the same seed: ahead {counted(dk)} points; against the best of
  the three K = 4 seeds at each epoch: ahead {counted(top3) if top3 else "(no common epoch)"}.
- Time per epoch in session 33 (seven runs sharing the 2 cores): K = 16 median {st.median(sec_k):.0f} s, K = 4
  (seed 1) median {st.median(sec_s1):.0f} s, {st.median(sec_k) / st.median(sec_s1):.1f}x.
""")

    sig = read_summary(R("signal_summary.csv"))
    try:
        fr = [float(v) for r in md_tables.rows_of(R("trace20_explicit.csv"), []) for c, v in r.items()
              if c.endswith("_clipped_frac")]
    except ValueError as e:
        raise ProseError("%s: %s" % (R("trace20_explicit.csv"), e))
    if not fr:
        raise ProseError("%s has no clipped fraction" % R("trace20_explicit.csv"))
    clip_lo, clip_hi = min(fr), max(fr)
    pts = sorted({p for p, _, _ in sig}, key=lambda p: p != "init")
    ks = sorted({k for p, m, k in sig if m == "dpulr"})
    if len(pts) < 2 or len(ks) < 2 or not all((p, "dpsgd", 0) in sig and (p, "dpulr", k) in sig for p in pts for k in ks):
        raise ProseError("%s: need DP-SGD and DP-ULR at every K for the init and a trained point" % R("signal_summary.csv"))
    k0, k1 = ks[0], ks[-1]
    ratio = lambda p, k: sig[(p, "dpsgd", 0)] / sig[(p, "dpulr", k)]
    growth = lambda p: sig[(p, "dpulr", k1)] / sig[(p, "dpulr", k0)]
    expo = lambda p: math.log(growth(p)) / math.log(k1 / k0)
    # per epoch, privacy noise of std sigma C per step along u on a sum over qN examples: over 1/q
    # steps the signal-to-noise along a fixed u is sqrt(q) N proj / sigma
    per_epoch = lambda p, k: (math.sqrt(Q_SGD) * sig[(p, "dpsgd", 0)] / SIGMA_SGD) / (
        math.sqrt(Q_ULR) * sig[(p, "dpulr", k)] / SIGMA0)
    e_sgd = best(D[0])[1]
    eps_sgd = D[0][e_sgd]["eps"]
    e_ulr = at_epsilon(s1, eps_sgd)
    if e_ulr is None:
        raise ProseError("the baseline seed 1 has no epoch at epsilon <= %g" % eps_sgd)
    eq = lambda p, k: per_epoch(p, k) * math.sqrt(e_sgd / e_ulr)
    p0, p1 = pts[0], pts[1]
    parts.append(f"""**Why DP-ULR trails DP-SGD here: how much of the gradient a clipped estimate carries**
(session 33; `experiments/cifar10_resnet5/signal.sh` running `bench/dpulr_signal`;
`results/signal.csv`, `signal_summary.csv`, command in `results/signal_command.txt`). Both
methods clip what each example adds to norm C and add Gaussian noise to the sum, so what an
example adds along the true gradient, per unit of C, decides how much of a step is signal.
On one batch (the first 1000 training examples), at the LeCun init (seed 1, point `{p0}`)
and at the parameters of the baseline-alone run of seed 1 after epoch 74 (`{p1}`), the
probe takes g, the batch's mean loss gradient by backpropagation, and without privacy noise
DP-SGD's mean clipped per-example gradient and DP-ULR's mean clipped estimate (explicit mode,
baseline, s 0.1, each of the 5 modules clipped to C / sqrt(5)) at K = {", ".join(map(str, ks))}, over several
draws of the perturbations; "along the true gradient" is that mean's component along g / |g|:

<!-- md_tables.py signal {B}signal_summary.csv -->

- **At our K = {k0} a DP-SGD example moves the update along g {ratio(p0, k0):.1f} times as far as a DP-ULR
  example** at the init and {ratio(p1, k0):.1f} times after 74 epochs. The estimator itself points the right
  way on average: its unclipped batch mean's cos with g rises with K ({", ".join("%.2f" % sig[(p0, "ulr_unclipped:cos", k)] for k in ks)} at
  K = {", ".join(map(str, ks))}, init). The loss is in clipping: every example's estimate is clipped ({clip_lo:.3f}-{clip_hi:.3f} of
  them in every module over the 20 traced steps of explicit mode above), and most of each is the estimator's own
  noise, which clipping keeps in proportion, so little of the C budget points along g.
- **More perturbations help, slowly**: from K = {k0} to {k1} the DP-ULR component grows {growth(p0):.2f}x
  at the init and {growth(p1):.2f}x after 74 epochs, about K^{expo(p0):.2f} and K^{expo(p1):.2f} (sqrt(K) would be K^0.50);
  DP-SGD's lead falls to {ratio(p0, k1):.1f}x and {ratio(p1, k1):.1f}x at K = {k1}.
- **What it means per epoch and at equal epsilon** (a rough reading: it holds g fixed over
  an epoch and ignores Adam against SGD). The privacy noise along g has std sigma C per step on a
  sum over qN examples; over the 1/q steps of an epoch the signal-to-noise along g grows as
  sqrt(q) N proj / sigma. With our settings (DP-SGD q {Q_SGD}, sigma {SIGMA_SGD:g}; DP-ULR q {Q_ULR}, sigma0 {SIGMA0:g})
  DP-SGD has {per_epoch(p0, k0):.1f}x (init) and {per_epoch(p1, k0):.1f}x (epoch 74) DP-ULR's signal-to-noise per epoch at
  K = {k0}. DP-ULR spends less epsilon per epoch: DP-SGD's best epoch of seed 1, {e_sgd} (epsilon
  {eps_sgd:.3f}), costs what {e_ulr} epochs of DP-ULR cost, which gives back sqrt({e_ulr}/{e_sgd}): at equal
  epsilon DP-SGD keeps {eq(p0, k0):.1f}x / {eq(p1, k0):.1f}x the signal-to-noise at K = {k0} and {eq(p0, k1):.1f}x / {eq(p1, k1):.1f}x at K = {k1}. The
  authors' public code used 100 copies for a CIFAR ResNet (`../shared/PAPERS.md`): a large K,
  not the mechanism, is what could make DP-ULR "comparable" here, at K times the cost of the
  forward passes per step (the K = 16 run above measures it in training).
""")

    eps_q4 = Q[1][max(Q[1])]["eps"]
    n8 = max(Q[0])
    eps8 = Q[0][n8]["eps"]
    cmp_at = []
    for name, b in (("q 1/50, sigma0 5 (seed 1, baseline alone)", s1), ("q 1/25, sigma0 8", Q[0])):
        e, n = at_epsilon(b, eps_q4), max(b)
        if b[n]["eps"] < eps_q4:  # not run that far: its last epoch, said so
            cmp_at.append("%s has not reached it (%.2f%% at its last epoch, %d, epsilon %.3f)" % (
                name, b[n]["acc"], n, b[n]["eps"]))
        else:
            cmp_at.append("%s %.2f%% (epoch %d, epsilon %.3f)" % (name, b[e]["acc"], e, b[e]["eps"]))
    old = [[(e, b[e]["acc"] - o[e]["acc"]) for e in sorted(o) if e in b] for b, o in zip(Q, QO)]
    eps_list = lambda b: ",".join(str(e) for e in sorted(b) if e in (1, 2, 4) or e % 5 == 0 or e == max(b))
    parts.append(f"""**The paper's other captions (q 1/25, sigma0 8 and 4), sessions 33-36** (`NOISE=baseline SEED=1
run.sh --epochs 200 --rows {Q25[0]},{Q25[1]}`, two runs; `results/dpulr_q25.csv`, commands
in `results/dpulr_q25_command.txt`; 25 steps of expected batch 2000 per epoch, the baseline
alone, K = 4, Adam lr 0.001, seed 1, f4a3ac4, seven runs sharing the 2 cores, these two at the lowest
priority in session 34; six runs at the lowest priority in sessions 35 and 36). Issue 10 ran
these captions 4 epochs each with antithetic pairs and fitted normalization
(`dpulr_results.csv`); these runs are ahead of them in {sum(d > 0 for o in old for _, d in o)} of {sum(len(o) for o in old)} of those epochs
({min(d for o in old for _, d in o):+.2f} to {max(d for o in old for _, d in o):+.2f} points).

sigma0 8 (epsilon after {n8} epochs {eps8:.3f}, {"below" if eps8 < s1[n8]["eps"] else "not below"} q 1/50's {s1[n8]["eps"]:.3f}):

<!-- md_tables.py cifar_run {B}dpulr_q25.csv {Q25[0]} {eps_list(Q[0])} -->

sigma0 4:

<!-- md_tables.py cifar_run {B}dpulr_q25.csv {Q25[1]} {eps_list(Q[1])} -->

- At the epsilon sigma0 4 reached in its last collected epoch, {max(Q[1])} ({eps_q4:.3f}: {Q[1][max(Q[1])]["acc"]:.2f}%), the other
  captions had: {"; ".join(cmp_at)}.
""")

    parts.append(f"""- Section 4.3: DP-ULR to its plateau by the rule above (stopped: {"; ".join(done) if done else "none"};
  still rising: {"; ".join(rising)}), antithetic pairs over a third seed (two seeds, to
  {max(ex)} and {max(A2)} epochs), K = 16 beyond {max(K)} epochs and K > 16 (signal above), and the q 1/25
  captions beyond {max(Q[0])} and {max(Q[1])} epochs; the controller ran 8 epochs and did not learn (above).
  DP-SGD has 3 seeds (one of {max(D[0])} epochs, two of {max(D[1])}). These runs cannot be continued:
  their checkpoints were lost when the machine running them was shut down after session 37
  (above).""")
    return [p.rstrip("\n").split("\n") for p in parts]


def spans(lines, path):
    """[(first, end)] of each part of PARTS in the doc's lines"""
    out = []
    for start, stop in PARTS:
        starts = [i for i, l in enumerate(lines) if l.startswith(start)]
        if len(starts) != 1:
            raise ProseError("%s has %d lines starting with '%s', not 1" % (path, len(starts), start))
        end = starts[0] + 1
        if stop is None:
            while end < len(lines) and lines[end].startswith("  "):  # the item's continuation lines
                end += 1
        else:
            while end < len(lines) and not lines[end].startswith(stop):
                end += 1
            if end == len(lines):
                raise ProseError("%s: no line starting with '%s' after '%s'" % (path, stop, start))
            while end > starts[0] + 1 and not lines[end - 1].strip():  # the blank lines before it stay
                end -= 1
        out.append((starts[0], end))
    return out


def without_tables(lines):
    """the lines without the table rows that follow an md_tables.py marker (md_tables.py checks those)"""
    out, in_table = [], False
    for l in lines:
        if l.startswith("<!-- md_tables.py "):
            in_table = True
        elif in_table and not l.startswith("|"):
            in_table = False
        if not (in_table and l.startswith("|")):
            out.append(l)
    return out


def main():
    ap = argparse.ArgumentParser(
        formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__,
        epilog="exit status: 0 printed or written, or --check found the doc equal to the rendered text;\n"
               "  1 --check found a difference (it prints a unified diff);\n"
               "  2 bad input (a missing file, column or run, a doc without the block).")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", metavar="DOC", help="compare the block and the bullet in DOC (docs/dpulr.md) "
                      "with the rendered ones (tables excepted: md_tables.py check does those)")
    mode.add_argument("--write", metavar="DOC", help="replace them in DOC and refill its tables (md_tables.py write)")
    ap.add_argument("--results", default=RESULTS, help="directory of the CSVs; default: %(default)s")
    args = ap.parse_args()
    try:
        parts = render(args.results)
        if not args.check and not args.write:
            print("\n\n".join("\n".join(p) for p in parts))
            return 0
        doc = args.check or args.write
        try:
            with open(doc) as f:
                lines = f.read().split("\n")
        except OSError as e:
            raise ProseError("cannot read the doc %s: %s" % (doc, e.strerror))
        where = spans(lines, doc)
        if args.write:
            for (a, b), part in reversed(list(zip(where, parts))):
                lines[a:b] = part
            with open(doc, "w") as f:
                f.write("\n".join(lines))
            return md_tables.sync(doc, True)  # the markers' paths are relative to the source tree
    except (ProseError, md_tables.TableError) as e:
        print("prose.py: %s" % e, file=sys.stderr)
        return 2
    diff = []
    for (a, b), want in zip(where, parts):
        have = without_tables(lines[a:b])
        if have != want:
            diff += difflib.unified_diff(have, want, doc, "prose.py (from the CSVs)", lineterm="")
    if not diff:
        return 0
    print("\n".join(diff))
    print("prose.py: the Section 4.3 text in %s differs from the CSVs (run experiments/cifar10_resnet5/prose.py "
          "--write %s)" % (doc, doc), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
