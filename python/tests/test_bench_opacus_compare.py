"""bench/opacus_compare.py (issue 41 item 9: MLPs and CNNs) and bench/opacus_transformer.py
(issue 39 item 6: the named transformers) where Opacus is absent, as in CI (Opacus is not a
dependency of dptrain): --quick prints the skip message and exits 0 without writing a CSV;
--quick --without-opacus times the other contenders (plain PyTorch, the engine through
dptrain.train, and for the CNN script the bring-your-own-gradients loop) for a few steps and
writes their rows. A package named opacus whose import fails stands in front of sys.path, so
the tests behave the same on a machine where Opacus is installed."""
import csv
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench")

# script -> what its --quick --without-opacus run must write and print
SCRIPTS = {
    "opacus_compare": dict(models=("mlp_small", "mnist_cnn"), contenders=("torch", "engine", "byog"), steps="3",
                           table="| model | threads |", specs=None),
    "opacus_transformer": dict(models=("gpt_tiny", "bert_tiny"), contenders=("torch", "engine"), steps="2",
                               table="| model | batch |", specs={"gpt_tiny:t8:v16", "bert_tiny:t8:v16"}),
}


def script(name):
    return os.path.join(BENCH, name + ".py")


def run(tmp_path, name, *args):
    fake = tmp_path / "no_opacus" / "opacus"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('opacus hidden by test_bench_opacus_compare')\n")
    env = dict(os.environ, PYTHONPATH=str(fake.parent))
    return subprocess.run([sys.executable, script(name), *args], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help(name):
    p = subprocess.run([sys.executable, script(name), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "--quick" in p.stdout and "--without-opacus" in p.stdout and "--out" in p.stdout


@pytest.mark.parametrize("name", SCRIPTS)
def test_quick_without_opacus_skips(tmp_path, name):
    out = tmp_path / "o.csv"
    p = run(tmp_path, name, "--quick", "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "%s: skipped: Opacus is not importable" % name in p.stdout, p.stdout
    assert "opacus hidden by test_bench_opacus_compare" in p.stdout, p.stdout
    assert not out.exists()


@pytest.mark.parametrize("name", SCRIPTS)
def test_quick_without_opacus_times_the_others(tmp_path, name):
    pytest.importorskip("torch")
    want = SCRIPTS[name]
    out = tmp_path / "o.csv"
    p = run(tmp_path, name, "--quick", "--without-opacus", "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    with open(out) as f:
        rows = list(csv.DictReader(f))
    got = sorted((r["model"], r["contender"]) for r in rows)
    assert got == sorted((m, c) for m in want["models"] for c in want["contenders"]), got
    for r in rows:
        assert float(r["median_ms_per_step"]) > 0, r
        assert r["speedup_vs_opacus"] == "", r  # no Opacus, no ratio
        assert float(r["cost_vs_torch"]) > 0, r
        assert r["threads"] == "1" and r["steps_per_round"] == want["steps"] and r["rounds"] == "2", r
    if want["specs"]:
        assert {r["spec"] for r in rows} == want["specs"]
    assert [float(r["cost_vs_torch"]) for r in rows if r["contender"] == "torch"] == [1.0, 1.0]
    assert want["table"] in p.stdout  # the Markdown table for the docs


def test_bad_model():
    p = subprocess.run([sys.executable, script("opacus_transformer"), "--models", "gpt_huge"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "unknown model 'gpt_huge'" in p.stderr, p.stderr
