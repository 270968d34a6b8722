"""Exceptions raised by dptrain, mapped from the C library's dpt_status codes.

Every exception carries the library's own message (dpt_last_error(), which names the
function parameter or file and the problem) and the status: `err.status` (the negative
code) and `err.status_name` ("invalid argument", ...). Each class also derives from the
built-in exception a Python caller would expect, so `except ValueError` works as usual.
"""


class DptrainError(Exception):
    """Base class of every error reported by the dptrain C library."""

    status = None
    status_name = None

    def __init__(self, message, status=None, status_name=None):
        super().__init__(message)
        self.status = status
        self.status_name = status_name


class InvalidArgumentError(DptrainError, ValueError):
    """DPT_EINVAL: an argument or hyperparameter is out of range."""


class FormatError(DptrainError, ValueError):
    """DPT_EFORMAT: a file's content is malformed (wrong magic, truncated, bad checksum)."""


class OutOfRangeError(DptrainError, ValueError):
    """DPT_ERANGE: a numeric result is out of range (e.g. an unreachable target epsilon)."""


class UnsupportedError(DptrainError, ValueError):
    """DPT_ENOTSUP: the combination asked for is not supported (e.g. PLD on RDP curves)."""


class MismatchError(DptrainError, ValueError):
    """DPT_EMISMATCH: a resumed run or ledger does not match the settings given."""


class DptrainIOError(DptrainError, OSError):
    """DPT_EIO: a file could not be opened, read or written."""


class DptrainFileNotFoundError(DptrainIOError, FileNotFoundError):
    """DPT_EIO for a file that does not exist."""


class DptrainMemoryError(DptrainError, MemoryError):
    """DPT_ENOMEM: an allocation failed or a size overflowed."""


class PrivacyError(DptrainError):
    """DPT_EBUDGET: the privacy budget would be exceeded (the release was refused)."""


class CryptoError(DptrainError, RuntimeError):
    """DPT_ECRYPTO: the cryptographic random source (libcrypto) failed."""


class BusyError(DptrainError, OSError):
    """DPT_EBUSY: the run directory is locked by another trainer, or a ledger file by another
    PrivateGradients (in any process)."""


# dpt_status -> class (values from include/dptrain/core.h)
BY_STATUS = {
    -1: InvalidArgumentError,
    -2: DptrainMemoryError,
    -3: DptrainIOError,
    -4: FormatError,
    -5: OutOfRangeError,
    -6: UnsupportedError,
    -7: PrivacyError,
    -8: CryptoError,
    -9: MismatchError,
    -10: BusyError,
}


def error_for(status, message, status_name):
    """The exception for a failed call (status < 0) with the library's message."""
    cls = BY_STATUS.get(status)
    if cls is None:
        cls = DptrainError
    if cls is DptrainIOError and ("No such file" in message or "does not exist" in message):
        cls = DptrainFileNotFoundError
    err = cls(message, status, status_name)
    if isinstance(err, OSError):
        # OSError's constructor does not keep our message as args[0]: set what str() shows
        err.args = (message,)
        err.strerror = message
    return err


def file_not_found(path, what):
    """DptrainFileNotFoundError for a missing file the package checked for itself before
    calling the library (so `except dptrain.DptrainError` catches it too)."""
    message = "%s: %s" % (path, what)
    err = DptrainFileNotFoundError(message)
    err.args = (message,)
    err.strerror = message
    err.errno = 2
    err.filename = path
    return err
