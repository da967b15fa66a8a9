"""Paths and file errors, written once (docs/reliability.md, "Files and parsers"): the
one check of a path argument and the one errno → AML table for what the file system
answers. Every file aml reads or writes for a caller (a snapshot's pickle, an allocation
log, the plot tool's input and output) goes through them, so a bad path is an AML error
with its errno as the native cause, never a bare ``OSError``.

* :func:`path`: a ``str`` or an ``os.PathLike`` of one (``bytes`` too); anything else,
  an int (a file descriptor is not a path: aml never writes into or closes a caller's
  descriptor) or None included, is :class:`~aml_core.errors.AMLTypeError`; an empty path
  or one holding a NUL byte is :class:`~aml_core.errors.AMLValueError`.
* :func:`error`: the AML error for an ``OSError`` of the file system, by
  :data:`FILE_ERRORS`.
"""

from __future__ import annotations

import errno
import os

from .errors import AMLError, AMLTypeError, AMLValueError, ErrorCode, ErrorTable

__all__ = ["FILE_ERRORS", "error", "path"]

#: errno → AML code for the file system's answers (open, write, rename, read).
FILE_ERRORS = ErrorTable(
    backend="file",
    mapping={
        # The path names nothing usable: a wrong argument.
        errno.ENOENT: ErrorCode.EINVAL,
        errno.ENOTDIR: ErrorCode.EINVAL,
        errno.EISDIR: ErrorCode.EINVAL,
        errno.ENAMETOOLONG: ErrorCode.EINVAL,
        errno.ELOOP: ErrorCode.EINVAL,
        errno.EINVAL: ErrorCode.EINVAL,
        errno.EEXIST: ErrorCode.EINVAL,
        errno.ENXIO: ErrorCode.EINVAL,
        errno.EBADF: ErrorCode.EINVAL,
        # Not this user's to read or write.
        errno.EACCES: ErrorCode.EPERM,
        errno.EPERM: ErrorCode.EPERM,
        errno.EROFS: ErrorCode.EPERM,
        # No room: the disk, the quota, the file size limit, memory.
        errno.ENOSPC: ErrorCode.ENOMEM,
        errno.EDQUOT: ErrorCode.ENOMEM,
        errno.EFBIG: ErrorCode.ENOMEM,
        errno.ENOMEM: ErrorCode.ENOMEM,
        errno.EMFILE: ErrorCode.ENOMEM,
        errno.ENFILE: ErrorCode.ENOMEM,
        # In use.
        errno.EBUSY: ErrorCode.EBUSY,
        errno.ETXTBSY: ErrorCode.EBUSY,
        errno.EAGAIN: ErrorCode.EBUSY,
        # The file system cannot.
        errno.EOPNOTSUPP: ErrorCode.ENOTSUP,
        # Anything else (EIO...): FAILURE, the table's default.
    },
    name=lambda code: errno.errorcode.get(code, f"errno {code}"),
)


def path(value: object, what: str = "path") -> str | bytes | os.PathLike[str] | os.PathLike[bytes]:
    """``value`` if it is a path (``str``, ``bytes`` or ``os.PathLike``), else
    AMLTypeError; an empty path or one with a NUL byte is AMLValueError."""
    if isinstance(value, bool) or not isinstance(value, str | bytes | os.PathLike):
        raise AMLTypeError(f"{what} must be a path (str or os.PathLike), not {type(value).__name__}")
    try:
        text = os.fspath(value)
    except TypeError as exc:  # a PathLike whose __fspath__ gives a non-path
        raise AMLTypeError(f"{what}: {exc}") from None
    if not isinstance(text, str | bytes):  # pragma: no cover - os.fspath checks it
        raise AMLTypeError(f"{what} must be a path, not {type(text).__name__}")
    if not text:
        raise AMLValueError(f"{what} is empty")
    if ("\0" if isinstance(text, str) else b"\0") in text:  # type: ignore[operator]
        raise AMLValueError(f"{what} holds a NUL byte")
    return value


def error(exc: OSError, what: str) -> AMLError:
    """The AML error for the file system's ``exc`` while doing ``what`` (a phrase:
    ``"writing the snapshot /x/y"``); its errno is the native cause."""
    code = exc.errno or 0
    reason = exc.strerror or str(exc)
    return FILE_ERRORS.error("file", code, f"{what}: {reason}")
