#!/usr/bin/env python3
"""The "What Table 1 shows" and "What Table C1 shows" lists of docs/dpulr.md, filled in from the CSVs
of these experiments so that no number of our runs or of the paper in them is typed by hand.

The text lives in prose/t1notes.md (--table table1, the default) and prose/c1notes.md (--table c1,
from experiments/dpulr_table_c1/results/summary.csv). A line that is just @@NAME@@ is replaced by
prose/name.md (the same rules apply inside it). Placeholders; CFG is a configuration of summary.csv,
ALGO dpulr|dpsgd of paper.csv, either with @MODEL for a model other than "small" (dpulr@large):

  {{CFG B S final}}, {{CFG B S best}}    our "mean +- std" over the seeds (the mean alone when the std is
                                         empty) for configuration CFG at batch B and sigma0 S (summary.csv)
  {{CFG B S FIELD}}                      any other summary.csv column (final_mean, best_epochs, seeds, ...)
  {{paper ALGO B S}}                     the paper's "valid_acc +- valid_std" in the chosen table (paper.csv)
  {{absmax CFG B S}}                     max |final_minus_paper| over the cells named; here CFG may name
                                         several models (dpulr_explicit@small,large) and B and S may be
                                         lists (64,128), %.2f
  {{diffrange CFG B S}}                  min and max final_minus_paper over such cells: "+2.99 to +7.53"
  {{vs CFG1 CFG2 B S}}                   min and max of CFG1's final_mean minus CFG2's over the cells B x S
                                         (lists as in absmax, models as @M on CFG1 and CFG2 alike): "-3.23 to -0.21"
  {{ahead CFG1 CFG2 B S}}                in how many of the cells B x S CFG1's final_mean is above CFG2's
                                         (CFG2 "paper": above the paper's number): "all 15", "14 of 15",
                                         "none of 15", so that "ahead in every cell" is computed, not typed
  {{paperdrop ALGO B1 B2 S}}             paper valid_acc at B1 minus at B2, %.2f
  {{ourdrop CFG B1 B2 S}}                our final_mean at B1 minus at B2, %.2f
  {{seeds CFG B1,B2,... S1,S2,...}}      the seed count of those cells ("3"; "2 or 3" when they differ;
                                         CFG may name several models as in absmax)
  {{earlier ALGO SAMPLING B S}}          test_acc of the single-seed grid before issue 22
                                         (results/table1_dpulr_explicit.csv; Table 1's small model only)
"""
import argparse
import csv
import difflib
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TABLES = {  # --table: the doc list's first words, the default summary and template
    "table1": ("What Table 1 shows (", os.path.join(HERE, "results", "summary.csv"),
               os.path.join(HERE, "prose", "t1notes.md")),
    "c1": ("What Table C1 shows (", os.path.join(HERE, "..", "dpulr_table_c1", "results", "summary.csv"),
           os.path.join(HERE, "prose", "c1notes.md")),
}
PLACEHOLDER = re.compile(r"\{\{([^{}\n]*)\}\}")
INCLUDE = re.compile(r"@@([A-Za-z0-9_]+)@@\n?")


class ProseError(Exception):
    pass


def read_csv(path, what, columns, comments=False):
    try:
        with open(path, newline="") as f:
            lines = [l for l in f if not (comments and l.startswith("#"))]
    except OSError as e:
        raise ProseError("cannot read the %s %s: %s" % (what, path, e.strerror))
    reader = csv.DictReader(lines)
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise ProseError("%s: the %s has no column %s" % (path, what, ", ".join(missing)))
    return list(reader)


def index(rows, key, path, what):
    out = {}
    for r in rows:
        k = tuple(r[c] for c in key)
        if k in out:
            raise ProseError("%s: two rows of the %s for %s" % (
                path, what, " ".join("%s=%s" % kv for kv in zip(key, k))))
        out[k] = r
    return out


def with_model(tok):
    """'cfg' -> ('cfg', 'small'); 'cfg@large' -> ('cfg', 'large')"""
    name, _, model = tok.partition("@")
    return name, model or "small"


class Data:
    def __init__(self, summary, paper, earlier, table="table1"):
        self.summary_path, self.paper_path, self.earlier_path, self.table = summary, paper, earlier, table
        rows = read_csv(summary, "summary CSV", ("config", "model", "batch", "sigma0", "seeds", "final_mean",
                                                 "final_std", "best_mean", "best_std", "final_minus_paper"))
        self.fields = rows[0].keys() if rows else ()
        self.ours = index(rows, ("config", "model", "batch", "sigma0"), summary, "summary CSV")
        rows = read_csv(paper, "paper CSV", ("table", "algorithm", "model", "batch", "sigma0", "valid_acc",
                                             "valid_std"), comments=True)
        self.paper = index([r for r in rows if r["table"] == table], ("algorithm", "model", "batch", "sigma0"),
                           paper, "paper CSV")
        self._earlier = None

    @staticmethod
    def _row(table, key, path, what, first):
        """table[key], or a ProseError naming the file and the missing row"""
        r = table.get(key)
        if r is None:
            raise ProseError("%s has no %srow for %s=%s model=%s batch=%s sigma0=%s" % ((path, what, first) + key))
        return r

    def cell(self, cfg, batch, sigma):
        """CFG may carry @MODEL"""
        return self._row(self.ours, with_model(cfg) + (batch, sigma), self.summary_path, "", "config")

    def paper_cell(self, algo, batch, sigma):
        return self._row(self.paper, with_model(algo) + (batch, sigma), self.paper_path, self.table + " ",
                         "algorithm")

    def cells(self, cfgs, batches, sigmas):
        """every cell of 'cfg@m1,m2' x 'b1,b2' x 's1,s2'"""
        name, _, models = cfgs.partition("@")
        return [self.cell("%s@%s" % (name, m), b, s) for m in (models or "small").split(",")
                for b in batches.split(",") for s in sigmas.split(",")]

    def earlier(self, algo, sampling, batch, sigma):
        if self._earlier is None:
            rows = read_csv(self.earlier_path, "earlier-grid CSV", ("algorithm", "sampling", "batch", "sigma0",
                                                                    "test_acc"))
            self._earlier = index(rows, ("algorithm", "sampling", "batch", "sigma0"), self.earlier_path,
                                  "earlier-grid CSV")
        r = self._earlier.get((algo, sampling, batch, sigma))
        if r is None:
            raise ProseError("%s has no row for algorithm=%s sampling=%s batch=%s sigma0=%s" % (
                self.earlier_path, algo, sampling, batch, sigma))
        return r["test_acc"]


def num(r, field, path):
    try:
        return float(r[field])
    except ValueError:
        raise ProseError("%s: %s is '%s', not a number (config=%s batch=%s sigma0=%s)" % (
            path, field, r[field], r.get("config", r.get("algorithm")), r["batch"], r["sigma0"]))


# keyword: (number of arguments after it, usage)
KEYWORDS = {
    "paper": (3, "paper ALGO B S"),
    "absmax": (3, "absmax CFG[@M1,M2,...] B1,B2,... S1,S2,..."),
    "diffrange": (3, "diffrange CFG[@M1,M2,...] B1,B2,... S1,S2,..."),
    "vs": (4, "vs CFG1[@M1,...] CFG2[@M1,...] B1,B2,... S1,S2,..."),
    "ahead": (4, "ahead CFG1[@M1,...] CFG2[@M1,...]|paper B1,B2,... S1,S2,..."),
    "paperdrop": (4, "paperdrop ALGO B1 B2 S"),
    "ourdrop": (4, "ourdrop CFG B1 B2 S"),
    "seeds": (3, "seeds CFG[@M1,M2,...] B1,B2,... S1,S2,..."),
    "earlier": (4, "earlier ALGO SAMPLING B S"),
}


def count_of(n, total):
    return "all %d" % total if n == total else "none of %d" % total if n == 0 else "%d of %d" % (n, total)


def fill(d, spec):
    a = spec.split()
    if a and a[0] in KEYWORDS:
        n, usage = KEYWORDS[a[0]]
        if len(a) != n + 1:
            raise ProseError("'%s' takes %d arguments: {{%s}}" % (a[0], n, usage))
        k = a[0]
        if k == "paper":
            p = d.paper_cell(*a[1:4])
            return "%s +- %s" % (p["valid_acc"], p["valid_std"])
        if k in ("absmax", "diffrange"):
            v = [num(r, "final_minus_paper", d.summary_path) for r in d.cells(a[1], a[2], a[3])]
            return "%.2f" % max(abs(x) for x in v) if k == "absmax" else "%+.2f to %+.2f" % (min(v), max(v))
        if k == "ahead" and a[2] == "paper":
            v = [num(r, "final_minus_paper", d.summary_path) for r in d.cells(a[1], a[3], a[4])]
            return count_of(sum(x > 0 for x in v), len(v))
        if k in ("vs", "ahead"):
            xs, ys = d.cells(a[1], a[3], a[4]), d.cells(a[2], a[3], a[4])
            if [x["model"] for x in xs] != [y["model"] for y in ys]:
                raise ProseError("'%s' compares the same models: '%s' and '%s' name different ones" % (k, a[1], a[2]))
            v = [num(x, "final_mean", d.summary_path) - num(y, "final_mean", d.summary_path) for x, y in zip(xs, ys)]
            return "%+.2f to %+.2f" % (min(v), max(v)) if k == "vs" else count_of(sum(x > 0 for x in v), len(v))
        if k == "paperdrop":
            hi, lo = d.paper_cell(a[1], a[2], a[4]), d.paper_cell(a[1], a[3], a[4])
            return "%.2f" % (num(hi, "valid_acc", d.paper_path) - num(lo, "valid_acc", d.paper_path))
        if k == "ourdrop":
            hi, lo = d.cell(a[1], a[2], a[4]), d.cell(a[1], a[3], a[4])
            return "%.2f" % (num(hi, "final_mean", d.summary_path) - num(lo, "final_mean", d.summary_path))
        if k == "seeds":
            got = sorted({r["seeds"] for r in d.cells(a[1], a[2], a[3])}, key=lambda x: (len(x), x))
            return " or ".join(got)
        return d.earlier(*a[1:5])
    if len(a) != 4:
        raise ProseError("unknown placeholder (want CFG B S FIELD or one of %s)" % ", ".join(sorted(KEYWORDS)))
    if with_model(a[0])[0] not in {k[0] for k in d.ours}:
        raise ProseError("unknown placeholder: '%s' is neither one of %s nor a configuration in %s" % (
            a[0], ", ".join(sorted(KEYWORDS)), d.summary_path))
    r = d.cell(*a[0:3])
    if a[3] in ("final", "best"):
        return r[a[3] + "_mean"] + (" +- " + r[a[3] + "_std"] if r[a[3] + "_std"] else "")
    if a[3] not in r:
        raise ProseError("%s has no column '%s' (its columns: %s)" % (d.summary_path, a[3], ", ".join(d.fields)))
    return r[a[3]]


def render(d, path, depth=0):
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise ProseError("cannot read the template %s: %s" % (path, e.strerror))
    out = []
    for no, line in enumerate(lines, 1):
        where = "%s:%d" % (path, no)
        m = INCLUDE.fullmatch(line)
        if m:
            if depth >= 8:
                raise ProseError("%s: includes nested more than 8 deep (a loop?)" % where)
            inc = os.path.join(os.path.dirname(path), m.group(1).lower() + ".md")
            if not os.path.isfile(inc):
                raise ProseError("%s: @@%s@@ names %s, which does not exist" % (where, m.group(1), inc))
            out.append(render(d, inc, depth + 1))
            continue

        def sub(m):
            try:
                return fill(d, m.group(1))
            except ProseError as e:
                raise ProseError("%s: {{%s}}: %s" % (where, m.group(1), e))
        line = PLACEHOLDER.sub(sub, line)
        for bad in ("{{", "}}", "@@"):
            if bad in line:
                raise ProseError("%s: '%s' left after filling in (an unclosed placeholder or an include that "
                                 "is not alone on its line): %s" % (where, bad, line.strip()))
        out.append(line)
    return "".join(out)


def list_span(lines, path, start):
    """(first, end) of the doc's list: from the line starting with START to the first empty
    line; or (None, why) when there is not exactly one such line."""
    starts = [i for i, l in enumerate(lines) if l.startswith(start)]
    if len(starts) != 1:
        return None, "%s has %d lines starting with '%s', not 1" % (path, len(starts), start)
    end = starts[0]
    while end < len(lines) and lines[end].strip():
        end += 1
    return starts[0], end


def read_doc(path):
    try:
        with open(path) as f:
            return f.read().split("\n")
    except OSError as e:
        raise ProseError("cannot read the doc %s: %s" % (path, e.strerror))


def doc_list(path, start):
    """The doc's list (lines with their newlines), or (None, why)."""
    lines = read_doc(path)
    first, end = list_span(lines, path, start)
    if first is None:
        return None, end
    return [l + "\n" for l in lines[first:end]], None


def main():
    ap = argparse.ArgumentParser(
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__ + "\nWithout --check it prints the list; paste it into docs/dpulr.md after the table.",
        epilog="exit status: 0 printed or written, or --check found the doc's list equal to the rendered one;\n"
               "  1 --check found a difference (it prints a unified diff of the doc's list against the\n"
               "    rendered one);\n"
               "  2 bad input (a missing file, an unknown placeholder, a cell missing from a CSV).")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", metavar="DOC", help="compare the list in DOC (docs/dpulr.md) with the rendered one")
    mode.add_argument("--write", metavar="DOC", help="replace the list in DOC (its first line must be there) with the "
                    "rendered one")
    ap.add_argument("--table", default="table1", choices=sorted(TABLES),
                    help="which list: Table 1's (default) or Table C1's; sets the defaults of --summary and --template")
    ap.add_argument("--summary", help="default: Table 1's results/summary.csv, or Table C1's")
    ap.add_argument("--paper", default=os.path.join(HERE, "paper.csv"), help="default: %(default)s")
    ap.add_argument("--earlier", default=os.path.join(HERE, "results", "table1_dpulr_explicit.csv"),
                    help="the grid before issue 22; default: %(default)s")
    ap.add_argument("--template", help="the list's text with placeholders; default: prose/t1notes.md or c1notes.md")
    args = ap.parse_args()
    start, summary, template = TABLES[args.table]
    try:
        text = render(Data(args.summary or summary, args.paper, args.earlier, args.table), args.template or template)
        if not args.check and not args.write:
            sys.stdout.write(text)
            return 0
        if not text.startswith(start):
            raise ProseError("the list must start with '%s' (the first words of %s)" % (start, args.template or template))
        if args.write:
            lines = read_doc(args.write)
            first, end = list_span(lines, args.write, start)
            if first is None:
                raise ProseError(end)
            lines[first:end] = text.rstrip("\n").split("\n")
            with open(args.write, "w") as f:
                f.write("\n".join(lines))
            return 0
        have, why = doc_list(args.check, start)
    except ProseError as e:
        print("prose.py: %s" % e, file=sys.stderr)
        return 2
    want = text.splitlines(keepends=True)
    if have == want:
        return 0
    if why:
        print("prose.py: %s" % why, file=sys.stderr)
    sys.stdout.writelines(difflib.unified_diff(have or [], want, args.check, "prose.py (from the CSVs)"))
    print("prose.py: the list in %s differs from the CSVs (run experiments/dpulr_table1/prose.py and paste its "
          "output, or fix the template under experiments/dpulr_table1/prose/)" % args.check, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
