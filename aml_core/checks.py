"""Validation of values before they reach a native call, written once for every backend.

Each function takes what a user passed, returns the checked Python int (or bytes), and
raises :class:`~aml_core.errors.AMLTypeError` for the wrong type (a ``bool`` is never an
int here) or :class:`~aml_core.errors.AMLValueError` for a value the C type cannot hold
or the API does not allow. ``what`` names the argument in the message.

Sizes follow one rule, AML's (docs/aml-contract.md#rules-common-to-every-aml-area), at
every entry point (``area.mmap``, a pool's layout, virtual memory, an IPC handle, a
runtime's capability groups): :func:`size`. A size is an int (else EINVAL,
:class:`~aml_core.errors.AMLTypeError`), positive (or non-negative where zero is allowed;
else EINVAL), and at most :data:`MAX_SIZE`, 2**63 - 1, the largest object a process can
address (else EDOM, :class:`~aml_core.errors.AMLDomainError`). Offsets into memory are
sizes too.

The capability groups of :mod:`aml_core.gpu.runtime` call these in their public methods,
so a bad value never reaches ctypes or a binding; the areas call them for their options.
"""

from __future__ import annotations

import operator
from collections.abc import Collection

from .errors import AMLDomainError, AMLTypeError, AMLValueError

__all__ = [
    "C_INT_MAX",
    "C_INT_MIN",
    "MAX_SIZE",
    "U64_MAX",
    "byte",
    "c_int",
    "device",
    "fd",
    "flag_bits",
    "handle_bytes",
    "host_bytes",
    "integer",
    "member",
    "pointer",
    "power_of_two",
    "size",
    "span",
]

U64_MAX = (1 << 64) - 1
C_INT_MIN, C_INT_MAX = -(1 << 31), (1 << 31) - 1
#: The largest size aml accepts: the largest object a Python process can address
#: (``sys.maxsize``, 2**63 - 1 on 64-bit machines). Larger sizes are EDOM.
MAX_SIZE = (1 << 63) - 1


def integer(value: object, what: str) -> int:
    """An int (anything with ``__index__``, such as a NumPy integer), never a bool."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        raise AMLTypeError(f"{what} must be an int, not bool")
    try:
        result = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise AMLTypeError(f"{what} must be an int, not {type(value).__name__}") from None
    except Exception as exc:  # a user __index__ that raises something else
        raise AMLTypeError(f"{what} must be an int; its __index__ raised {exc!r}") from None
    if not isinstance(result, int):  # pragma: no cover - operator.index guarantees an int
        raise AMLTypeError(f"{what} must be an int, not {type(value).__name__}")
    return result


def c_int(value: object, what: str) -> int:
    """An int that fits a C ``int``."""
    v = integer(value, what)
    if not C_INT_MIN <= v <= C_INT_MAX:
        raise AMLValueError(f"{what} {v} does not fit in a C int")
    return v


def pointer(value: object, what: str = "ptr", *, null: bool = False) -> int:
    """A 64-bit address; NULL only where ``null`` allows it (a stream, a hint)."""
    v = integer(value, what)
    if v < 0 or v > U64_MAX or (v == 0 and not null):
        raise AMLValueError(f"{what} must be a {'' if null else 'non-NULL '}64-bit address, got {v:#x}")
    return v


def size(value: object, what: str = "size", *, zero: bool = False) -> int:
    """A byte count or offset: an int, positive (non-negative where ``zero`` allows it)
    and at most :data:`MAX_SIZE` (the module doc's one size rule: a wrong type is
    AMLTypeError, zero or negative AMLValueError, both EINVAL; past MAX_SIZE
    AMLDomainError, EDOM)."""
    v = integer(value, what)
    if v < 0 or (v == 0 and not zero):
        raise AMLValueError(f"{what} must be {'>= 0' if zero else '> 0'}, got {v}")
    if v > MAX_SIZE:
        raise AMLDomainError(f"{what} {v} is larger than the address space (at most {MAX_SIZE})")
    return v


def device(value: object, what: str = "device", *, host: int | None = None) -> int:
    """A device index (a C int >= 0), or ``host`` (the runtime's CPU id, -1) where allowed."""
    d = c_int(value, what)
    if d < 0 and not (host is not None and d == host):
        allowed = f"a device index or {host} (the host)" if host is not None else "a device index"
        raise AMLValueError(f"{what} must be {allowed}, got {d}")
    return d


def fd(value: object, what: str = "fd") -> int:
    """An open file descriptor number (a non-negative C int)."""
    v = c_int(value, what)
    if v < 0:
        raise AMLValueError(f"{what} must be an open file descriptor, got {v}")
    return v


def byte(value: object, what: str = "value") -> int:
    """A byte value, 0..255."""
    v = integer(value, what)
    if not 0 <= v <= 255:
        raise AMLValueError(f"{what} must be a byte (0..255), got {v}")
    return v


def member(value: object, allowed: Collection[int], what: str) -> int:
    """An int that is one of the values a native API documents."""
    v = c_int(value, what)
    if v not in allowed:
        raise AMLValueError(f"{what} {v} is not one of {sorted(allowed)}")
    return v


def power_of_two(value: object, what: str = "alignment") -> int:
    """A positive power of two that fits ``size_t`` (an alignment)."""
    v = integer(value, what)
    if v <= 0 or v > U64_MAX or v & (v - 1):
        raise AMLValueError(f"{what} must be a power of two, got {v}")
    return v


def flag_bits(value: object, mask: int, what: str) -> int:
    """A ``uint32`` bit field using only the bits of ``mask`` (the flags a native API
    defines); unknown bits are refused before the call."""
    v = integer(value, what)
    if v < 0 or v > 0xFFFFFFFF:
        raise AMLValueError(f"{what} {v} does not fit in 32 bits")
    if v & ~mask:
        raise AMLValueError(f"{what} {v:#x} has unknown bits {v & ~mask:#x} (allowed: {mask:#x})")
    return v


def handle_bytes(value: object, length: int, what: str = "an IPC handle") -> bytes:
    """An opaque native handle of exactly ``length`` bytes."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise AMLTypeError(f"{what} is {length} bytes, not {type(value).__name__}")
    data = bytes(value)
    if len(data) != length:
        raise AMLValueError(f"{what} is {length} bytes, got {len(data)}")
    return data


def host_bytes(value: object, what: str = "data") -> int:
    """The byte count of host data a copy reads (a C-contiguous bytes-like object: bytes,
    bytearray, a memoryview, an array); AMLTypeError for anything else (an int is not a
    count of zero bytes here), AMLValueError for a non-contiguous view."""
    try:
        view = memoryview(value)  # type: ignore[arg-type]
    except TypeError:
        raise AMLTypeError(f"{what} must be a bytes-like object, not {type(value).__name__}") from None
    with view:
        if not view.c_contiguous:
            raise AMLValueError(f"{what} must be C-contiguous")
        return view.nbytes


def span(offset: object, length: object | None, total: int, what: str = "the copy") -> tuple[int, int]:
    """``(offset, length)`` of a copy into or out of an object of ``total`` bytes (a
    buffer's ``write`` / ``read``): ints (AMLTypeError), not negative and inside the object
    (AMLValueError); ``length`` None: to the end."""
    off = integer(offset, f"{what}'s offset")
    n = total - off if length is None else integer(length, f"{what}'s size")
    if off < 0 or n < 0 or off + n > total:
        raise AMLValueError(f"{n} bytes at offset {off} are not inside {total}")
    return off, n
