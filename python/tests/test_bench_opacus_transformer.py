"""bench/opacus_transformer.py (issue 39 item 6) where Opacus is absent, as in CI (Opacus is not
a dependency of dptrain): --quick prints the skip message and exits 0 without writing a CSV;
--quick --without-opacus times plain PyTorch (to_torch() of the spec) and the engine
(dptrain.train, DP-SGD, the token LM loss for gpt_tiny) on tiny gpt_tiny / bert_tiny for a few
steps and writes their rows. A package named opacus whose import fails stands in front of
sys.path, so the tests behave the same on a machine where Opacus is installed."""
import csv
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "opacus_transformer.py")


def run(tmp_path, *args):
    fake = tmp_path / "no_opacus" / "opacus"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('opacus hidden by test_bench_opacus_transformer')\n")
    env = dict(os.environ, PYTHONPATH=str(fake.parent))
    return subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True, timeout=600)


def test_help():
    p = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "--quick" in p.stdout and "--without-opacus" in p.stdout and "--out" in p.stdout


def test_quick_without_opacus_skips(tmp_path):
    out = tmp_path / "o.csv"
    p = run(tmp_path, "--quick", "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "opacus_transformer: skipped: Opacus is not importable" in p.stdout, p.stdout
    assert "opacus hidden by test_bench_opacus_transformer" in p.stdout, p.stdout
    assert not out.exists()


def test_quick_without_opacus_times_the_others(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "o.csv"
    p = run(tmp_path, "--quick", "--without-opacus", "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    with open(out) as f:
        rows = list(csv.DictReader(f))
    got = sorted((r["model"], r["contender"]) for r in rows)
    assert got == sorted((m, c) for m in ("gpt_tiny", "bert_tiny") for c in ("torch", "engine")), got
    for r in rows:
        assert float(r["median_ms_per_step"]) > 0, r
        assert r["speedup_vs_opacus"] == "", r  # no Opacus, no ratio
        assert float(r["cost_vs_torch"]) > 0, r
        assert r["threads"] == "1" and r["steps_per_round"] == "2" and r["rounds"] == "2", r
    assert {r["spec"] for r in rows} == {"gpt_tiny:t8:v16", "bert_tiny:t8:v16"}
    assert [float(r["cost_vs_torch"]) for r in rows if r["contender"] == "torch"] == [1.0, 1.0]
    assert "| model | batch |" in p.stdout  # the Markdown table for the docs


def test_bad_model(tmp_path):
    p = subprocess.run([sys.executable, SCRIPT, "--models", "gpt_huge"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown model 'gpt_huge'" in p.stderr, p.stderr
