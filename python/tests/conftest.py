"""Test setup: the in-tree extension module (built into <build>/python by build_ffi.py when
missing or older than libdptrain.so or a public header), the CLI binary, temp dirs."""
import atexit
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYDIR)
BUILD = os.path.abspath(os.environ.get("DPTRAIN_BUILD_DIR") or os.path.join(REPO, "build"))


def _ensure_extension():
    lib = os.path.join(BUILD, "libdptrain.so")
    if not os.path.exists(lib):
        pytest.exit("libdptrain.so not found in %s: build the library first (cmake --build build)" % BUILD, 2)
    mods = glob.glob(os.path.join(BUILD, "python", "dptrain", "_dptrain_cffi*.so"))
    inputs = [lib, os.path.join(PYDIR, "build_ffi.py")] + glob.glob(os.path.join(REPO, "include", "dptrain", "*.h"))
    newest = max(os.path.getmtime(p) for p in inputs)
    if not mods or os.path.getmtime(mods[0]) < newest:
        subprocess.run([sys.executable, os.path.join(PYDIR, "build_ffi.py"), "--build-dir", BUILD], check=True,
                       stdout=subprocess.DEVNULL)


os.environ["DPTRAIN_BUILD_DIR"] = BUILD
# The runs' secret files (docs/checkpoints.md) go into DPTRAIN_SECRETS_DIR, else under the
# home directory: the tests (and the CLIs they start) use a temporary one, removed at exit.
_SECRETS = tempfile.mkdtemp(prefix="dptrain-secrets-")
os.environ["DPTRAIN_SECRETS_DIR"] = _SECRETS
atexit.register(shutil.rmtree, _SECRETS, True)
os.environ.setdefault("OMP_NUM_THREADS", "2")
_ensure_extension()
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)


@pytest.fixture(scope="session")
def cli():
    """Path of the dptrain command-line binary of the same build."""
    p = os.path.join(BUILD, "dptrain")
    if not os.path.exists(p):
        pytest.skip("the dptrain CLI is not built in %s" % BUILD)
    return p


@pytest.fixture(scope="session")
def build_dir():
    return BUILD


@pytest.fixture(scope="session")
def repo_dir():
    return REPO


@pytest.fixture
def workdir():
    """A temporary directory removed after the test (pytest's tmp_path keeps its last runs)."""
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="dptrain-py-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
