"""python/examples/opacus_vs_dptrain.py (issue 41 item 9): its dptrain half (the
PrivateGradients loop written line for line against Opacus's) runs on a few synthetic
batches, with a package named opacus whose import fails standing in front of sys.path (as
where Opacus is absent, CI included): the script says it runs the dptrain half only, exits 0,
and reports the steps Opacus's loader would make (ceil(n / batch) per epoch) and the RDP
epsilon of those steps at q = 1 / ceil(n / batch), under the secure lattice mechanism (the default)."""
import os
import re
import subprocess
import sys

import pytest

from dptrain import accounting
from dptrain._lib import lib

pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "examples", "opacus_vs_dptrain.py")


def test_dptrain_half_runs(tmp_path):
    fake = tmp_path / "opacus"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('opacus hidden by the test')\n")
    pydir = os.path.dirname(HERE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), pydir]))
    p = subprocess.run([sys.executable, SCRIPT, "--synthetic", "--train-size", "500", "--test-size", "100",
                        "--batch-size", "64", "--epochs", "2", "--sigma", "1.3"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Opacus is not importable (opacus hidden by the test): the dptrain half only" in p.stdout, p.stdout
    m = re.search(r"^dptrain +(\d+) steps in [\d.]+ s, test accuracy ([\d.]+), epsilon ([\d.]+) \(RDP\) at delta "
                  r"1e-05$", p.stdout, re.M)
    assert m, p.stdout
    steps, acc, eps = int(m.group(1)), float(m.group(2)), float(m.group(3))
    assert steps == 2 * 8, steps  # ceil(500 / 64) = 8 steps per epoch, as len(DataLoader)
    assert 0.0 <= acc <= 1.0
    # PrivateGradients' default, the secure lattice mechanism: SGM at its effective multiplier
    # over the model's 26010 coordinates, plus the table sampler's distance
    assert "26010 parameters" in p.stdout, p.stdout
    mu, tv = accounting.secure_distance("table")
    eff = lib.dpt_privacy_secure_sigma_eff(1.3, 26010)
    assert eff < 1.3
    want = accounting.Ledger().add_sgm_dgauss(1 / 8, eff, 26010, mu, tv, 16).epsilon(1e-5, accountant="rdp")
    assert abs(eps - want) <= 1e-4 + 1e-4 * want, (eps, want)
    assert eps > accounting.epsilon(1.3, 1 / 8, 16, 1e-5, accountant="rdp") + 1e-3
