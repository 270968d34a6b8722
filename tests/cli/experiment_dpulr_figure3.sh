#!/usr/bin/env bash
# experiments/dpulr_figure3/run.sh --smoke: one panel (batch 500, sigma0 4, 2 epochs) of
# pure accounting. Every epsilon equals a fresh `dptrain account` call for the same steps
# (e x round(N/B)), DP-ULR at the default N_B is never below DP-SGD (issue 38: no longer equal,
# the boundary batches cost), DP-ULR with N_B = qN costs more, epsilon grows with the epochs, and
# the plot exists.
set -u
BIN=$1
SRC=${DPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export DPTRAIN_SECRETS_DIR="$T/secrets"  # the runs' secret files: under $T, not in the home directory
if ! DPTRAIN=$BIN "$SRC/experiments/dpulr_figure3/run.sh" --smoke "$T/out" > "$T/log" 2>&1; then
  cat "$T/log"; echo "FAIL: run.sh --smoke"; exit 1
fi
python3 - "$T/out" "$BIN" <<'PY' || exit 1
import csv, json, os, subprocess, sys
out, dptrain = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(os.path.join(out, "figure3.csv"))))
assert len(rows) == 6, rows  # 2 epochs x 3 curves
by = {(r["epoch"], r["curve"]): r for r in rows}
for e in ("1", "2"):
    g, u, w = by[(e, "dpsgd")], by[(e, "dpulr")], by[(e, "dpulr_nb_qn")]
    assert int(g["steps"]) == int(e) * 120, g  # round(60000 / 500) steps per epoch
    ref = json.loads(subprocess.run([dptrain, "account", "--json", "--accountant", "rdp", "--batch-size", "500", "--dataset-size", "60000",
                                     "--sigma", "4", "--steps", g["steps"]], check=True, capture_output=True,
                                    text=True).stdout)["epsilon"]
    assert abs(float(g["epsilon_balle"]) - ref) <= 1e-5 * ref, (g, ref)
    # issue 38: the rejection bound is never below plain Poisson sampling's, and N_B = qN costs more
    assert float(u["epsilon_balle"]) >= float(g["epsilon_balle"]) * (1 - 1e-12), (u, g)
    assert float(w["epsilon_balle"]) > float(u["epsilon_balle"]) and w["min_batch"] == "500", w
    assert float(g["epsilon_pld"]) < float(g["epsilon_balle"]) < float(g["epsilon_classic"]), g
assert float(by[("2", "dpsgd")]["epsilon_balle"]) > float(by[("1", "dpsgd")]["epsilon_balle"])
assert os.path.getsize(os.path.join(out, "figure3.png")) > 1000
print("experiment smoke ok")
PY
