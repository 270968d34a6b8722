#!/usr/bin/env python3
"""DP-ULR Figure 3 (epsilon against epochs, delta 1e-5): what our accountants compute for
DP-SGD (Poisson sampling) and DP-ULR (Poisson sampling with rejection) at the paper's
sampling rates and noise levels. Pure accounting: every number comes from
`dptrain account` (JSON), nothing is typed in.

  figure3.py DPTRAIN OUT_DIR BATCHES SIGMAS EPOCHS N

Steps after epoch e are e * round(N / B), exactly what `dptrain train` takes (an epoch of
Poisson sampling is round(1/q) steps, q = B/N). Curves per (batch, sigma0):
  dpsgd        Poisson SGM, RDP (Balle and classic conversions) and PLD
  dpulr        DP-ULR at our default N_B (the largest N_B whose rejection term is at most
               1e-3 of the SGM term at alpha 1.1): what `dptrain train --algo dpulr` uses
  dpulr_nb_qn  DP-ULR with N_B = qN (no batch smaller than the expected size accepted),
               the threshold the paper's "slightly below qN" approaches
Writes OUT_DIR/figure3.csv.
"""
import csv
import json
import subprocess
import sys


def account(dptrain, *args):
    out = subprocess.run([dptrain, "account", "--json", *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    dptrain, out, batches, sigmas, epochs, n = sys.argv[1:7]
    batches = [int(b) for b in batches.split()]
    sigmas = [float(s) for s in sigmas.split()]
    epochs, n = int(epochs), int(n)
    rows = []
    for b in batches:
        q = b / n
        spe = max(1, round(n / b))
        for s in sigmas:
            for e in range(1, epochs + 1):
                steps = e * spe
                common = ["--batch-size", str(b), "--dataset-size", str(n), "--sigma", "%g" % s, "--steps", str(steps)]
                balle = account(dptrain, *common, "--accountant", "rdp")
                classic = account(dptrain, *common, "--conversion", "classic")
                pld = account(dptrain, *common, "--accountant", "pld")
                rows.append(dict(batch=b, q="%.10g" % q, sigma0="%g" % s, epoch=e, steps=steps, curve="dpsgd",
                                 min_batch="", epsilon_balle="%.6g" % balle["epsilon"],
                                 epsilon_classic="%.6g" % classic["epsilon"], epsilon_pld="%.6g" % pld["epsilon"],
                                 rejection_cost=""))
                for curve, extra in (("dpulr", []), ("dpulr_nb_qn", ["--min-batch", str(int(q * n + 1e-9))])):
                    u = account(dptrain, "--algo", "dpulr", *common, *extra)
                    rows.append(dict(batch=b, q="%.10g" % q, sigma0="%g" % s, epoch=e, steps=steps, curve=curve,
                                     min_batch=u["min_batch"], epsilon_balle="%.6g" % u["epsilon_balle"],
                                     epsilon_classic="%.6g" % u["epsilon_classic"], epsilon_pld="",
                                     rejection_cost="%.6g" % u["rejection_cost_at_best_order"]))
    with open("%s/figure3.csv" % out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
