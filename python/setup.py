# The cffi extension (API mode) is built by build_ffi.py against libdptrain: see its
# docstring for where the library and headers are looked up (DPTRAIN_BUILD_DIR,
# DPTRAIN_PREFIX, pkg-config dptrain, ../build). The package version is the library's
# (DPT_VERSION_STRING of the dptrain/version.h built against).
#
# Built from a cmake build directory, the package carries its own libdptrain.so.X.Y beside
# the extension (whose run path is $ORIGIN), so deleting or moving the clone does not break
# the installed package. Built against an installed library (DPTRAIN_PREFIX, pkg-config), it
# uses that library where it is.
import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_ffi  # noqa: E402


def library_version():
    include_dirs, _, how = build_ffi.locate()
    for d in include_dirs:
        p = os.path.join(d, "dptrain", "version.h")
        if os.path.exists(p):
            m = re.search(r'#define\s+DPT_VERSION_STRING\s+"([^"]+)"', open(p).read())
            if m:
                return m.group(1)
    sys.exit("setup.py: dptrain/version.h not found (%s)" % how)


def dynamic_section(path):
    """{tag: value} of SONAME, RPATH and RUNPATH in an ELF file's dynamic section (readelf -d)."""
    try:
        out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("setup.py: `readelf -d %s` failed (%s): binutils is needed to build the package" % (path, e))
    return dict(re.findall(r"\((SONAME|RPATH|RUNPATH)\)\s+Library \w+: \[(.*)\]", out))


def library_to_bundle(build):
    """(file, SONAME) of the build directory's libdptrain.so. Refuses a library whose run path would
    reach into the clone or the current directory once it sits in the installed package."""
    lib = os.path.join(build, "libdptrain.so")
    real = os.path.realpath(lib)
    if not os.path.isfile(real):
        sys.exit("setup.py: %s not found: build the library first (cmake --build %s)" % (lib, build))
    dyn = dynamic_section(real)
    soname = dyn.get("SONAME")
    if not soname:
        sys.exit("setup.py: %s has no SONAME" % real)
    trees = [os.path.realpath(build) + os.sep, os.path.realpath(build_ffi._source_dir_of(build)) + os.sep]
    bad = [p for tag in ("RPATH", "RUNPATH") for p in dyn.get(tag, "").split(":") if tag in dyn and (
        not p.startswith("/") or any((os.path.realpath(p) + os.sep).startswith(t) for t in trees))]
    if bad:
        sys.exit("setup.py: %s: its run path has %s (empty or relative entries mean the current directory, others "
                 "are in the build or source tree): the installed package would load libraries from there; "
                 "reconfigure and rebuild with this tree's CMakeLists.txt, which gives the library its install "
                 "run path" % (real, ", ".join(repr(p) for p in bad)))
    return real, soname


class BuildExtBundlingLibrary(build_ext):
    """build_ext that also copies libdptrain (built from a cmake build directory) beside the extension."""

    def _bundle(self):
        build = build_ffi.bundled_build_dir()
        if build is None:
            return None
        src, soname = library_to_bundle(build)
        dest = os.path.join(os.path.dirname(self.get_ext_fullpath("dptrain._dptrain_cffi")), soname)
        return src, dest

    def run(self):
        super().run()
        plan = self._bundle()
        if plan:
            os.makedirs(os.path.dirname(plan[1]), exist_ok=True)
            shutil.copy2(*plan)

    def get_outputs(self):
        plan = self._bundle()
        return super().get_outputs() + ([plan[1]] if plan else [])


setup(version=library_version(), cffi_modules=["build_ffi.py:ffibuilder"],
      cmdclass={"build_ext": BuildExtBundlingLibrary})
