"""dptrain: differentially private training, privacy accounting and membership-inference
auditing, in Python.

A thin layer over the C library libdptrain (cffi, API mode): accounting
(`dptrain.accounting`), training from numpy arrays (`dptrain.train`), trained models with
their parameters, predictions, privacy ledger and PyTorch export and import
(`dptrain.Model`, `dptrain.from_torch`), and auditing (`dptrain.audit`: attack statistics
and epsilon lower bounds from scores, the membership scores of a Model, and the whole
audit of `dptrain audit` in memory, `dptrain.audit.run`), and DP-SGD for a model of your
own from its per-example gradients (`dptrain.PrivateGradients`; for PyTorch,
`dptrain.per_example_gradients` computes them and `dptrain.set_gradients` hands the
private update to a torch optimizer).
See docs/python.md.
"""

import os as _os


def _extend_path():
    """In-tree use: let `from . import _dptrain_cffi` find the module built into
    <build>/python/dptrain by python/build_ffi.py."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if any(f.startswith("_dptrain_cffi") and f.endswith(".so") for f in _os.listdir(here)):
        return  # installed (or built in place): nothing to add
    build = _os.environ.get("DPTRAIN_BUILD_DIR") or _os.path.join(_os.path.dirname(_os.path.dirname(here)), "build")
    cand = _os.path.join(_os.path.abspath(build), "python", "dptrain")
    if _os.path.isdir(cand):
        __path__.append(cand)  # noqa: F821 - the package's own __path__


_extend_path()

from ._lib import ffi as _ffi, lib as _clib  # noqa: E402
from .errors import (  # noqa: E402,F401
    DptrainError, InvalidArgumentError, FormatError, OutOfRangeError, UnsupportedError, MismatchError,
    DptrainIOError, DptrainFileNotFoundError, DptrainMemoryError, PrivacyError, CryptoError, BusyError)
from . import accounting  # noqa: E402,F401
from .accounting import Ledger, read_ledger  # noqa: E402,F401
from . import layers  # noqa: E402,F401
from .model import Model, from_torch  # noqa: E402,F401 - from_torch imports torch only when called
from .train import train, Run, ALGORITHMS  # noqa: E402,F401
from . import algorithms  # noqa: E402,F401
from .algorithms import (  # noqa: E402,F401
    Algorithm, SGD, DPSGD, PDPSGD, ProportionalNoise, DPULR, ULR, DPMAC, MAC, NoisyGD)
from .data import load_idx  # noqa: E402,F401
from . import audit  # noqa: E402,F401
from .mechanism import PrivateGradients, PoissonBatchSampler  # noqa: E402,F401
from .torch_interop import per_example_gradients, replace_batchnorm, set_gradients, trainable_parameters  # noqa: E402,F401 - torch on call
from .torch_interop import parameter_layers  # noqa: E402,F401 - PrivateGradients' per-layer clipping

__version__ = _ffi.string(_clib.dpt_version()).decode()
# the source revision the loaded libdptrain.so was built from (git describe, or "unknown")
__build__ = _ffi.string(_clib.dpt_build_id()).decode()


def library_path() -> "str | None":
    """Path of the libdptrain.so this process uses."""
    with open("/proc/self/maps") as f:
        for line in f:
            if "libdptrain.so" in line:
                return line.split()[-1]
    return None


__all__ = [
    "accounting", "audit", "layers", "algorithms", "train", "Run", "ALGORITHMS", "Algorithm", "SGD", "DPSGD", "PDPSGD",
    "ProportionalNoise", "DPULR", "ULR", "DPMAC", "MAC", "NoisyGD", "Model", "from_torch", "Ledger", "read_ledger",
    "PrivateGradients", "PoissonBatchSampler", "per_example_gradients", "replace_batchnorm", "set_gradients",
    "trainable_parameters", "parameter_layers",
    "load_idx", "library_path", "DptrainError", "InvalidArgumentError", "FormatError", "OutOfRangeError",
    "UnsupportedError", "MismatchError", "DptrainIOError", "PrivacyError", "CryptoError", "BusyError", "__version__",
    "__build__",
]
