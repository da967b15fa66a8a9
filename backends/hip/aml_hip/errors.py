"""hipError_t -> AML error codes (docs/aml-contract.md#hip-area), and native error names.

=====================================================  =========  ==========================
hipError_t                                             AML        source
=====================================================  =========  ==========================
hipErrorInsufficientDriver (35), hipErrorNoDevice      ENOTSUP    aml_area_hip_mmap
(100)
hipErrorOutOfMemory = hipErrorMemoryAllocation (2)     ENOMEM     aml_area_hip_mmap
hipErrorInvalidValue (1), hipErrorInvalidDevice (101)  EINVAL     aml_area_hip_mmap ("target
                                                                  device id is not valid or
                                                                  provided arguments are not
                                                                  compatible")
hipErrorContextAlreadyInUse (216)                      EBUSY      aml_area_hip_mmap ("device
                                                                  ... in already use")
hipErrorNotInitialized = hipErrorInitializationError   FAILURE    aml_area_hip_mmap
(3)
hipErrorNotSupported (801)                             ENOTSUP    documented extension
hipErrorPeerAccessUnsupported (217)                    ENOTSUP    documented extension (no
                                                                  peer path between the
                                                                  devices)
hipErrorHostMemoryAlreadyRegistered (712)              EBUSY      documented extension (as
                                                                  AML's C hip area)
anything else                                          FAILURE    never success
=====================================================  =========  ==========================

The peer calls' ``hipErrorPeerAccessAlreadyEnabled`` (704) and
``hipErrorPeerAccessNotEnabled`` (705) are answers of the idempotent
``enable_peer_access`` / ``disable_peer_access``, never raised
(docs/aml-contract.md#peer-access).

Names come from ``hipGetErrorName`` of the loaded library; the lookup never raises and
falls back to a built-in name (or ``hipError <n>``) when no library is loaded or the
call fails.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Final

from aml_core.errors import ErrorCode, ErrorTable

from . import abi as C

__all__ = ["HIP_ERROR_CODES", "HipErrorNames", "make_error_table"]

#: The translation table (native code -> AML code); anything missing is FAILURE.
HIP_ERROR_CODES: Final[dict[int, ErrorCode]] = {
    C.hipErrorInsufficientDriver: ErrorCode.ENOTSUP,
    C.hipErrorNoDevice: ErrorCode.ENOTSUP,
    C.hipErrorOutOfMemory: ErrorCode.ENOMEM,
    C.hipErrorInvalidValue: ErrorCode.EINVAL,
    C.hipErrorInvalidDevice: ErrorCode.EINVAL,
    C.hipErrorContextAlreadyInUse: ErrorCode.EBUSY,
    C.hipErrorInitializationError: ErrorCode.FAILURE,
    C.hipErrorNotSupported: ErrorCode.ENOTSUP,
    C.hipErrorPeerAccessUnsupported: ErrorCode.ENOTSUP,
    C.hipErrorHostMemoryAlreadyRegistered: ErrorCode.EBUSY,
}

_KNOWN_NAMES: Final[dict[int, str]] = {
    C.hipSuccess: "hipSuccess",
    C.hipErrorInvalidValue: "hipErrorInvalidValue",
    C.hipErrorOutOfMemory: "hipErrorOutOfMemory",
    C.hipErrorNotInitialized: "hipErrorNotInitialized",
    C.hipErrorInsufficientDriver: "hipErrorInsufficientDriver",
    C.hipErrorNoDevice: "hipErrorNoDevice",
    C.hipErrorInvalidDevice: "hipErrorInvalidDevice",
    C.hipErrorContextAlreadyInUse: "hipErrorContextAlreadyInUse",
    C.hipErrorPeerAccessUnsupported: "hipErrorPeerAccessUnsupported",
    C.hipErrorPeerAccessAlreadyEnabled: "hipErrorPeerAccessAlreadyEnabled",
    C.hipErrorPeerAccessNotEnabled: "hipErrorPeerAccessNotEnabled",
    C.hipErrorHostMemoryAlreadyRegistered: "hipErrorHostMemoryAlreadyRegistered",
    C.hipErrorNotSupported: "hipErrorNotSupported",
    C.hipErrorUnknown: "hipErrorUnknown",
}

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


class HipErrorNames:
    """``hipGetErrorName`` as a never-raising ``int -> str``; bound to a library once
    it is loaded (the error table exists before the library does)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fn: Callable[[int], bytes | None] | None = None

    def bind(self, get_error_name: Callable[[int], bytes | None] | None) -> None:
        """Use this ``hipGetErrorName`` (restype ``c_char_p``), or none."""
        with self._lock:
            self._fn = get_error_name

    def __call__(self, code: int) -> str:
        try:
            value = int(code)
        except (TypeError, ValueError, OverflowError):
            return f"hipError {code!r}"
        fn = self._fn
        if fn is not None and _INT_MIN <= value <= _INT_MAX:
            try:
                raw = fn(value)
            except Exception:  # never let a name lookup hide the real error
                raw = None
            if raw:
                name = raw.decode("ascii", "replace")
                # The real library names every unknown code "hipErrorUnknown": keep the number visible.
                if name == "hipErrorUnknown" and value != C.hipErrorUnknown:
                    return f"hipError {value} (unknown to this library)"
                return name
        return _KNOWN_NAMES.get(value, f"hipError {value}")


def make_error_table(names: Callable[[int], str]) -> ErrorTable:
    """The HIP :class:`~aml_core.errors.ErrorTable` with the given name lookup."""
    return ErrorTable(backend="hip", mapping=HIP_ERROR_CODES, name=names, success=C.hipSuccess)


def c_char_p_function(fn: object) -> Callable[[int], bytes | None]:
    """Adapt a ctypes function (restype ``c_char_p``) to the :class:`HipErrorNames` type."""

    def call(code: int) -> bytes | None:
        result = fn(ctypes.c_int(code))  # type: ignore[operator]
        return result if isinstance(result, bytes) else None

    return call
