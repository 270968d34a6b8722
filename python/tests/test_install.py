"""The package installs offline with Debian's pip (--no-build-isolation: Debian's setuptools
and cffi build it) into a virtual environment that sees the Debian packages, and the
installed copy works from another directory. Built from a copy of python/, so the source
tree is left as it was."""
import os
import shutil
import subprocess
import sys

import pytest


def test_pip_install_into_a_venv(workdir, build_dir, repo_dir):
    import importlib.util
    if not all(importlib.util.find_spec(m) for m in ("venv", "pip", "setuptools", "wheel", "cffi")):
        pytest.skip("python3-venv / python3-pip / python3-setuptools / python3-wheel missing (scripts/setup.sh)")
    src = os.path.join(workdir, "src")
    shutil.copytree(os.path.join(repo_dir, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so", "*.o", "tests"))
    venv = os.path.join(workdir, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True)
    py = os.path.join(venv, "bin", "python")
    env = dict(os.environ, DPTRAIN_BUILD_DIR=build_dir, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", "-q", src],
                       capture_output=True, text=True, env=env, cwd=workdir)
    assert r.returncode == 0, r.stdout + r.stderr
    code = ("import dptrain, sys; from dptrain import accounting as a; "
            "print(dptrain.__file__); print(dptrain.__version__); print(repr(a.epsilon(1.1, 0.01, 1000, 1e-5)))")
    r = subprocess.run([py, "-c", code], capture_output=True, text=True, cwd=workdir,
                       env={k: v for k, v in env.items() if k != "DPTRAIN_BUILD_DIR"})
    assert r.returncode == 0, r.stderr
    path, version, eps = r.stdout.split()
    assert path.startswith(venv)
    import dptrain
    assert version == dptrain.__version__
    assert float(eps) == dptrain.accounting.epsilon(1.1, 0.01, 1000, 1e-5)


def test_version_and_build_are_the_cli_s(cli):
    """__version__ and __build__ are those of the library the CLI of this build reports."""
    import subprocess
    import dptrain
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "dptrain " + dptrain.__version__
    assert "build: " + dptrain.__build__ in out
    assert dptrain.__build__ and " " not in dptrain.__build__

