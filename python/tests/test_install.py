"""The package installs offline with Debian's pip (--no-build-isolation: Debian's setuptools
and cffi build it) into a virtual environment that sees the Debian packages, and the
installed copy stands alone: built from a clone, it carries libdptrain.so and keeps working
once the clone is deleted; built against an installed library (pkg-config), it uses that one.
Built from copies, so the source tree is left as it was."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

# Run by the venv's python: import, accountant, a tiny DP-SGD run; then what the process
# mapped (shared libraries) and imported, to show nothing came from the source tree.
PROBE = r"""
import json, sys
import numpy as np
import dptrain
from dptrain import accounting as a
r = np.random.default_rng(0)
x = r.normal(size=(64, 4)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int64)
run = dptrain.train(x, y, model="mlp:4-2", algorithm=dptrain.DPSGD(sigma=1.0, clip=1.0), epochs=1, batch_size=16,
                    optimizer="sgd", lr=0.1, seed=1, verbose=False, progress=False)
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if l.split()[-1].startswith("/")})
print(json.dumps({"file": dptrain.__file__, "version": dptrain.__version__, "library": dptrain.library_path(),
                  "eps": a.epsilon(1.1, 0.01, 1000, 1e-5), "pred": list(run.model.predict(x[:3]).shape),
                  "run_eps": run.epsilon, "maps": maps,
                  "modules": sorted(m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None))}))
"""


def _need_pip_tools():
    import importlib.util
    if not all(importlib.util.find_spec(m) for m in ("venv", "pip", "setuptools", "wheel", "cffi")):
        pytest.skip("python3-venv / python3-pip / python3-setuptools / python3-wheel missing (scripts/setup.sh)")
    if not shutil.which("readelf"):
        pytest.skip("readelf (binutils) missing")


def _copy_python(repo_dir, dest):
    shutil.copytree(os.path.join(repo_dir, "python"), dest,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so", "*.so.*", "*.o",
                                                  "tests"))


def _install(workdir, src, **env_extra):
    """A venv (seeing the system's packages) with the package installed from src; its python and env
    (no DPTRAIN_* variables but env_extra, no network)."""
    venv = os.path.join(workdir, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True)
    py = os.path.join(venv, "bin", "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DPTRAIN_", "PKG_CONFIG")) and k != "PYTHONPATH"}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", "-q", src],
                       capture_output=True, text=True, env=dict(env, **env_extra), cwd=workdir)
    assert r.returncode == 0, r.stdout + r.stderr
    return venv, py, env


def _installed(py, env, cwd):
    """The files of the installed distribution (RECORD), relative to site-packages."""
    code = "import importlib.metadata as m, json; print(json.dumps([str(f) for f in m.files('dptrain')]))"
    r = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, check=True)
    files = json.loads(r.stdout)
    return files


def _dynamic(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return out, dict(re.findall(r"\((SONAME|RPATH|RUNPATH)\)\s+Library \w+: \[(.*)\]", out))


def _probe(py, env, cwd):
    r = subprocess.run([py, "-c", PROBE], capture_output=True, text=True, env=env, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def _inside(paths, *trees):
    """The paths that lie inside one of trees."""
    trees = [os.path.realpath(t) + os.sep for t in trees]
    return [p for p in paths if any((os.path.realpath(p) + os.sep).startswith(t) for t in trees)]


def test_installed_from_a_clone_survives_the_clone(workdir, build_dir, repo_dir):
    """pip install from a clone (DPTRAIN_BUILD_DIR), then the clone deleted: the package still imports
    and trains, with the libdptrain.so it carries (run path $ORIGIN, nothing pointing into the clone).
    The clone here is a copy of what the build reads: headers, python/, and of the build directory the
    library, its generated headers and the cache line naming the source tree."""
    _need_pip_tools()
    clone = os.path.join(workdir, "clone")
    shutil.copytree(os.path.join(repo_dir, "include"), os.path.join(clone, "include"))
    _copy_python(repo_dir, os.path.join(clone, "python"))
    build = os.path.join(clone, "build")
    shutil.copytree(os.path.join(build_dir, "include"), os.path.join(build, "include"))
    for f in glob.glob(os.path.join(build_dir, "libdptrain.so*")):
        shutil.copy2(f, build, follow_symlinks=False)
    with open(os.path.join(build, "CMakeCache.txt"), "w") as f:
        f.write("CMAKE_HOME_DIRECTORY:INTERNAL=%s\n" % clone)
    venv, py, env = _install(workdir, os.path.join(clone, "python"), DPTRAIN_BUILD_DIR=build)
    shutil.rmtree(clone)

    files = _installed(py, env, workdir)
    site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
    ext = [f for f in files if re.fullmatch(r"dptrain/_dptrain_cffi[^/]*\.so", f)]
    lib = [f for f in files if re.fullmatch(r"dptrain/libdptrain\.so\.[0-9.]+", f)]
    assert len(ext) == 1 and len(lib) == 1, files
    if os.path.exists(os.path.join(repo_dir, "python", "dptrain", "py.typed")):
        assert "dptrain/py.typed" in files
    ext, lib = os.path.join(site, ext[0]), os.path.join(site, lib[0])
    out, dyn = _dynamic(ext)
    assert dyn.get("RUNPATH", dyn.get("RPATH")) == "$ORIGIN", out
    assert "NEEDED" in out and "[%s]" % os.path.basename(lib) in out, out
    for f in (ext, lib):  # no run path into the clone, the source tree or the current directory
        out, dyn = _dynamic(f)
        entries = [p for t in ("RPATH", "RUNPATH") if t in dyn for p in dyn[t].split(":")]
        assert all(p == "$ORIGIN" or p.startswith("/") for p in entries), (f, entries)
        assert not _inside([p for p in entries if p.startswith("/")], clone, repo_dir, build_dir), (f, entries)
        assert clone not in out and repo_dir not in out, out
    ldd = subprocess.run(["ldd", ext], capture_output=True, text=True, check=True).stdout
    assert re.search(r"libdptrain\.so\S* => %s " % re.escape(lib), ldd), ldd

    p = _probe(py, env, workdir)
    assert p["file"].startswith(venv) and os.path.realpath(p["library"]) == os.path.realpath(lib), p
    assert not _inside(p["maps"] + p["modules"], repo_dir, build_dir), p
    import dptrain
    assert p["version"] == dptrain.__version__
    assert p["eps"] == dptrain.accounting.epsilon(1.1, 0.01, 1000, 1e-5)
    assert p["pred"] == [3, 2] and p["run_eps"] > 0


def test_installed_against_an_installed_library(workdir, build_dir, repo_dir):
    """`cmake --install` to a prefix, then the package built against it through pkg-config: it links
    that library where it is (run path = the prefix's lib), carries no copy, and works once its
    sources are deleted."""
    _need_pip_tools()
    if not shutil.which("pkg-config") or not shutil.which("cmake"):
        pytest.skip("pkg-config or cmake missing")
    if not os.path.exists(os.path.join(build_dir, "cmake_install.cmake")):
        pytest.skip("%s is not a complete cmake build directory" % build_dir)
    prefix = os.path.join(workdir, "prefix")
    r = subprocess.run(["cmake", "--install", build_dir, "--prefix", prefix], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    pc = glob.glob(os.path.join(prefix, "lib*", "pkgconfig", "dptrain.pc")) + \
        glob.glob(os.path.join(prefix, "lib", "*", "pkgconfig", "dptrain.pc"))
    assert len(pc) == 1, pc
    libdir = os.path.dirname(os.path.dirname(pc[0]))
    src = os.path.join(workdir, "src")
    _copy_python(repo_dir, src)
    venv, py, env = _install(workdir, src, PKG_CONFIG_PATH=os.path.dirname(pc[0]))
    shutil.rmtree(src)

    files = _installed(py, env, workdir)
    assert not [f for f in files if "libdptrain" in f], files
    site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
    ext = [os.path.join(site, f) for f in files if re.fullmatch(r"dptrain/_dptrain_cffi[^/]*\.so", f)]
    assert len(ext) == 1, files
    out, dyn = _dynamic(ext[0])
    assert dyn.get("RUNPATH", dyn.get("RPATH")) == libdir, out
    assert repo_dir not in out and build_dir not in out, out

    p = _probe(py, env, workdir)
    assert os.path.dirname(os.path.realpath(p["library"])) == os.path.realpath(libdir), p
    assert not _inside(p["maps"] + p["modules"], repo_dir, build_dir), p
    assert p["pred"] == [3, 2] and p["run_eps"] > 0


def test_version_and_build_are_the_cli_s(cli):
    """__version__ and __build__ are those of the library the CLI of this build reports."""
    import subprocess
    import dptrain
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "dptrain " + dptrain.__version__
    assert "build: " + dptrain.__build__ in out
    assert dptrain.__build__ and " " not in dptrain.__build__

