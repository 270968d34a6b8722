# The cffi extension (API mode) is built by build_ffi.py against libdptrain: see its
# docstring for where the library and headers are looked up (DPTRAIN_BUILD_DIR,
# DPTRAIN_PREFIX, pkg-config dptrain, ../build). The package version is the library's
# (DPT_VERSION_STRING of the dptrain/version.h built against).
import os
import re
import sys

from setuptools import setup

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


setup(version=library_version(), cffi_modules=["build_ffi.py:ffibuilder"])
