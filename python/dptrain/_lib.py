"""Loads the cffi extension module and libdptrain.so; `check` turns a dpt_status into an
exception carrying the library's message.

Which libdptrain.so is used: DPTRAIN_LIBRARY=<path> loads that file first (its SONAME then
satisfies the extension's dependency); otherwise the one its RUNPATH names: the copy inside
the installed package ($ORIGIN, when it was built from a cmake build directory), or the
directory it was built against (an installed library, or a build tree for in-tree use). Where the extension comes from: the installed package, or
for in-tree use <build>/python/dptrain/ (made by `python3 python/build_ffi.py --build-dir
build`), found through DPTRAIN_BUILD_DIR or a `build/` directory next to python/.
"""

import ctypes
import os

from .errors import error_for


def _preload():
    path = os.environ.get("DPTRAIN_LIBRARY")
    if path:
        if not os.path.exists(path):
            raise FileNotFoundError(2, "DPTRAIN_LIBRARY: no such file", path)
        ctypes.CDLL(os.path.abspath(path), mode=ctypes.RTLD_GLOBAL)


_preload()
try:
    from ._dptrain_cffi import ffi, lib  # noqa: E402
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "dptrain: the compiled module _dptrain_cffi was not found or did not load (%s). In a source tree, build "
        "it with `python3 python/build_ffi.py --build-dir build` (after `cmake --build build`), or set "
        "DPTRAIN_BUILD_DIR to that build directory; or install the package with `python3 -m pip install "
        "--no-build-isolation ./python`." % e) from e

HAVE_CALLBACKS = hasattr(lib, "dpt_trainer_stop_reason")
HAVE_INFERENCE = hasattr(lib, "dpt_checkpoint_open")


def last_error():
    return ffi.string(lib.dpt_last_error()).decode("utf-8", "replace")


def check(status, context=None):
    """Raises the exception for status < 0 with dpt_last_error()'s message."""
    if status < 0:
        raise make_error(status, context)
    return status


def make_error(status, context=None):
    msg = last_error()
    name = ffi.string(lib.dpt_status_name(status)).decode()
    if not msg:
        msg = name
    if context:
        msg = "%s: %s" % (context, msg)
    return error_for(int(status), msg, name)


def cstr(s, what):
    """A Python str as a C string (bytes), refusing embedded NULs."""
    if not isinstance(s, str):
        raise TypeError("%s must be a str, got %s" % (what, type(s).__name__))
    b = s.encode("utf-8")
    if b"\0" in b:
        raise ValueError("%s contains a NUL character" % what)
    return b
