#!/usr/bin/env python3
"""docs/dpulr.md's Section 4.3 text on "the baseline alone" (DP-ULR's clean-loss baseline without
antithetic pairs on CIFAR-10), filled in from the CSVs the runs wrote, so that no number of our
runs in it is typed by hand:

  the block from the line starting "**The baseline alone" to the plot below it (its prose and
  the md_tables.py markers of its two tables; the tables themselves are md_tables.py's), and
  the bullet "- Section 4.3: DP-ULR to its plateau" of "Not run (compute)".

Read: results/dpulr_base.csv (the three seeds of the baseline alone), results/dpulr_long.csv
(antithetic pairs, seed 1) and results/results.csv (DP-SGD's three seeds), all written by
run.sh --collect. What is fixed text here is history the CSVs do not hold: which build ran which
steps, and the antithetic seed-2 run stopped before any epoch was collected.

Without --check or --write it prints both parts.
"""
import argparse
import csv
import difflib
import os
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
DPSGD = ["dpsgd", "dpsgd+seed2", "dpsgd+seed3"]
# the step of each seed from which the f4a3ac4 build ran it (the command file has each resume)
F4_FROM = [1924, 1933, 251]
BLOCK = ("**The baseline alone", "![DP-SGD and DP-ULR on CIFAR-10]")
BULLET = "- Section 4.3: DP-ULR to its plateau"
CURVE_EPOCHS = "1,2,5,10,15,20,25,30,40,50"


class ProseError(Exception):
    pass


def load(path, run, need=("epoch", "step", "test_accuracy", "epsilon_rdp", "wall_s")):
    """{epoch: row} of RUN's whole epochs (step = STEPS x epoch for DP-ULR; every row for DP-SGD)"""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in need if c not in (reader.fieldnames or [])]
            if missing:
                raise ProseError("%s has no column %s" % (path, ", ".join(missing)))
            rows = [r for r in reader if r["run"] == run]
    except OSError as e:
        raise ProseError("cannot read %s: %s" % (path, e.strerror))
    if not rows:
        raise ProseError("%s has no row of the run %s" % (path, run))
    out = {}
    try:
        for r in rows:
            e = int(r["epoch"])
            out[e] = {"acc": float(r["test_accuracy"]) * 100, "step": int(r["step"]),
                      "eps": float(r["epsilon_rdp"]), "wall": float(r["wall_s"] or "nan")}
    except ValueError as e:
        raise ProseError("%s, run %s: %s" % (path, run, e))
    return out


def whole(b):
    return {e: v for e, v in b.items() if v["step"] == STEPS * e}


def rise5(b, n):
    """mean accuracy of epochs n-4..n minus that of n-14..n-10"""
    if any(e not in b for e in range(n - 14, n + 1)):
        raise ProseError("rise5 needs epochs %d..%d" % (n - 14, n))
    return st.mean(b[e]["acc"] for e in range(n - 4, n + 1)) - st.mean(b[e]["acc"] for e in range(n - 14, n - 9))


def best(b):
    return max((v["acc"], e) for e, v in b.items())


def seconds_per_epoch(b, first_step):
    """wall seconds of each epoch run wholly from FIRST_STEP on (wall_s is the run's training time)"""
    return [b[e]["wall"] - b[e - 1]["wall"] for e in sorted(b) if e - 1 in b and b[e - 1]["step"] >= first_step]


def render(results):
    base = os.path.join(results, "dpulr_base.csv")
    ex = whole(load(os.path.join(results, "dpulr_long.csv"), ANTI))
    S = [whole(load(base, r)) for r in SEEDS]
    D = [load(os.path.join(results, "results.csv"), r) for r in DPSGD]
    s1, s2, _ = S
    n1, n2, n3 = (max(b) for b in S)
    E = min(n1, n2, n3)

    def cmp(b):
        common = [e for e in sorted(b) if e in ex]
        return common, [b[e]["acc"] - ex[e]["acc"] for e in common]

    c1, d1 = cmp(s1)
    c2, d2 = cmp(s2)
    if len(c1) < 8 or len(c2) < 10:
        raise ProseError("the seeds share too few epochs with %s's run in dpulr_long.csv" % ANTI)
    late2 = [x for e, x in zip(c2, d2) if e >= 10]
    best_ex = best(ex)[0]
    ahead1 = ("every epoch from 2 to %d" % max(c1) if all(x > 0 for x in d1[1:])
              else "epochs 2-%d: %d of %d" % (max(c1), sum(x > 0 for x in d1[1:]), len(d1) - 1))
    at_E = [b[E]["acc"] for b in S]
    secs = sorted(x for b, f in zip(S, F4_FROM) for x in seconds_per_epoch(b, f))
    if not secs:
        raise ProseError("no whole epoch of the f4a3ac4 build in %s" % base)
    d_best = [best(b) for b in D]
    d_eps = [b[e]["eps"] for b, (_, e) in zip(D, d_best)]
    d_acc = [a for a, _ in d_best]
    n_lo = min(n1, n2)

    block = f"""**The baseline alone, sessions 31-33** (`results/dpulr_base.csv`, written by `run.sh
--collect` from the runs' metrics; commands and the build of every start and resume in
`results/dpulr_base_command.txt`; this text is filled in from the CSVs by
`experiments/cifar10_resnet5/prose.py`, checked in CI): Table 1's `dpulr_baseline` on CIFAR-10, i.e.
`dpulr-q50-s5` above with `--baseline` and without `--antithetic` (K = 4 independent
perturbations instead of 2 antithetic pairs; same q 1/50, sigma0 5, Adam lr 0.001, same
epsilon), `NOISE=baseline SEED=s run.sh --epochs 200 --rows dpulr-q50-s5+base` (seed 1;
rows `+base+seed2`, `+base+seed3` for seeds 2 and 3), one thread each at the lowest
priority. Builds: 657d91e (session 31, and up to steps 1798 / 1806 / 124 of seeds 1 / 2 /
3), then 2e76a65 (the padded unfold of `docs/cnn.md` "Session 32": bit-identical, checked by
resuming a copy of seed 2's checkpoint at step 1750 for 4 steps with both builds: the same
parameters and ledger) up to steps {F4_FROM[0]} / {F4_FROM[1]} / {F4_FROM[2]}, then f4a3ac4 (its direct forward:
the same computation up to float rounding, about 1.55x faster per step). From those last
steps on, one build alone would not reproduce the curves bit for bit; the sampling, the
privacy noise and so the epsilons do not depend on the build. Time per epoch with f4a3ac4
and three runs on the 2 cores: median {st.median(secs):.0f} s over {len(secs)} epochs, {secs[0]:.0f}-{secs[-1]:.0f} s (the long
ones while CI runs and benchmarks shared the cores); 128-205 s in session 31 with two runs
and the first build. The tables are of the epochs collected when this was written ({n1}, {n2}
and {n3}); the runs go on (`run.sh --resume`).

<!-- md_tables.py cifar_curves experiments/cifar10_resnet5/results/dpulr_long.csv {STEPS} {CURVE_EPOCHS} '{ANTI}=antithetic pairs + baseline, seed 1 (session 28)' experiments/cifar10_resnet5/results/dpulr_base.csv '{SEEDS[0]}=baseline alone, seed 1' '{SEEDS[1]}=baseline alone, seed 2' '{SEEDS[2]}=baseline alone, seed 3' -->

The three seeds of the baseline alone up to the last epoch all of them reached:

<!-- md_tables.py cifar_seeds experiments/cifar10_resnet5/results/dpulr_base.csv upto:{E} {SEEDS[0]} {SEEDS[1]} {SEEDS[2]} -->

- **With the same seed (so the same initialization), the baseline alone is ahead of
  antithetic pairs in {sum(x > 0 for x in d1)} of {len(d1)} epochs** ({ahead1}, by
  {min(d1[1:]):+.2f} to {max(d1[1:]):+.2f} points; at epoch 1: {s1[1]["acc"]:.2f}% against {ex[1]["acc"]:.2f}%); its
  {s1[n1]["acc"]:.2f}% at epoch {n1} is {"above" if s1[n1]["acc"] > best_ex else "below"} the best antithetic pairs reached in {max(ex)} epochs ({best_ex:.2f}%).
- Seed 2 has no antithetic-pairs run of its own (one was started, then stopped for the third
  seed of this setting: `dpulr-q50-s5+seed2`, 175 steps, not in the CSV). Against the seed-1
  antithetic curve it is ahead in epochs 1-7 by {min(d2[:7]):+.2f} to {max(d2[:7]):+.2f} (from a better start) and from epoch
  10 on ahead in {sum(x > 0 for x in late2)} of {len(late2)} epochs, by {min(late2):+.2f} to {max(late2):+.2f}. So the
  Table 1 finding carries over to CIFAR-10 for seed 1 and is not separable from seed noise
  for seed 2.
- Over the three seeds at epoch {E}: {st.mean(at_E):.2f} +- {st.stdev(at_E):.2f}% (the antithetic seed-1 run: {ex[E]["acc"] if E in ex else float("nan"):.2f}%{"" if E in ex else ", not run that long"}).
- Slowing, not yet at a plateau: the mean accuracy of the last 5 epochs against that of the
  5 epochs ten before moved {rise5(s1, n1):+.2f} points for seed 1 (best {best(s1)[0]:.2f}% at epoch {best(s1)[1]}) and {rise5(s2, n2):+.2f} for
  seed 2 (best {best(s2)[0]:.2f}% at epoch {best(s2)[1]}); the same measure at epoch {n1 - 20} gave {rise5(s1, n1 - 20):+.2f} and
  {rise5(s2, n2 - 20):+.2f}. All stay far below DP-SGD's {st.mean(d_acc):.2f} +- {st.stdev(d_acc):.2f}% (best epoch, 3 seeds) at
  a similar epsilon ({s1[n1]["eps"]:.2f} here after {n1} epochs against DP-SGD's {min(d_eps):.2f}-{max(d_eps):.2f} at its
  best epochs, {min(e for _, e in d_best)}-{max(e for _, e in d_best)}).
"""
    bullet = f"""- Section 4.3: DP-ULR to its plateau (the explicit run is still rising after {max(ex)} epochs, the
  baseline-alone runs after {n1}, {n2} and {n3}), over 3 seeds for antithetic pairs (one seed) and for
  the baseline alone beyond epoch {E} (three seeds to epoch {E}, two to {n_lo}), and the q 1/25 captions
  beyond issue 10's 4 epochs; the controller ran 8 epochs and did not learn (above). DP-SGD
  has 3 seeds (one of {max(D[0])} epochs, two of {max(D[1])})."""
    return block.split("\n"), bullet.split("\n")


def spans(lines, path):
    """[(first, end)] of the block and the bullet in the doc's lines"""
    out = []
    starts = [i for i, l in enumerate(lines) if l.startswith(BLOCK[0])]
    if len(starts) != 1:
        raise ProseError("%s has %d lines starting with '%s', not 1" % (path, len(starts), BLOCK[0]))
    ends = [i for i in range(starts[0], len(lines)) if lines[i].startswith(BLOCK[1])]
    if not ends:
        raise ProseError("%s: no line starting with '%s' after '%s'" % (path, BLOCK[1], BLOCK[0]))
    out.append((starts[0], ends[0]))
    starts = [i for i, l in enumerate(lines) if l.startswith(BULLET)]
    if len(starts) != 1:
        raise ProseError("%s has %d lines starting with '%s', not 1" % (path, len(starts), BULLET))
    end = starts[0] + 1
    while end < len(lines) and lines[end].startswith("  "):  # the bullet's continuation lines
        end += 1
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
            print("\n".join(parts[0] + parts[1]))
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
