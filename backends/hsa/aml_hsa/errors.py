"""hsa_status_t -> AML error codes: the one table of aml-hsa, and what each status means per call.

=============================================  =========  ==================================================
hsa_status_t                                   AML        why
=============================================  =========  ==================================================
HSA_STATUS_ERROR_INVALID_ARGUMENT (0x1001)     EINVAL     a size, address, offset or flag the call refuses
HSA_STATUS_ERROR_INVALID_ALLOCATION (0x1003)   EINVAL     an unknown or released handle, an unmapped range
HSA_STATUS_ERROR_INVALID_AGENT (0x1004)        EINVAL     an agent the runtime does not know
HSA_STATUS_ERROR_INVALID_REGION (0x1005)       EINVAL     (the region API's INVALID_ALLOCATION)
HSA_STATUS_ERROR_INVALID_INDEX (0x100E)        EINVAL
HSA_STATUS_ERROR_INVALID_MEMORY_POOL (40)      EINVAL     an unknown pool
HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008)     ENOMEM     no memory or address space (and hsa_init without
                                                          a GPU: the probe says ENOTSUP with the reason)
HSA_STATUS_ERROR_RESOURCE_FREE (0x100A)        EBUSY      address_free of a range that still holds a mapping
HSA_STATUS_ERROR_RESOURCE_BUSY (46, 6.2+)      EBUSY
HSA_STATUS_ERROR_NOT_SUPPORTED (47, 7.0)       ENOTSUP
HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION     EPERM      an access outside what was granted
(41), HSA_STATUS_ERROR_MEMORY_FAULT (43)
HSA_STATUS_ERROR_NOT_INITIALIZED (0x100B)      FAILURE    aml-hsa always initializes first: a runtime bug
HSA_STATUS_ERROR_REFCOUNT_OVERFLOW (0x100C)    FAILURE
HSA_STATUS_ERROR_INVALID_RUNTIME_STATE,        FAILURE
HSA_STATUS_ERROR_FATAL, HSA_STATUS_ERROR
anything else (HSA_STATUS_INFO_BREAK too)      FAILURE    never success
=============================================  =========  ==================================================

One call has its own rule (:meth:`aml_hsa.runtime.HsaRuntime.pool_allocate`):
``hsa_amd_memory_pool_allocate``'s INVALID_ALLOCATION, a size past what the pool can
allocate, is ENOMEM, as HIP and Level Zero say for the same request.

:data:`DOCUMENTED` lists, for every ``hsa_amd_vmem_*`` call, the statuses the vendor's
documentation gives it and their meaning there; the meaning becomes the error's message,
so ``address_free`` failing with RESOURCE_FREE says "the address range is still in use".

Names come from ``hsa_status_string`` of the loaded library when it has one; the lookup
never raises and falls back to the names below.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Final

from aml_core.errors import ErrorCode, ErrorTable

from . import abi as C

__all__ = ["DOCUMENTED", "HSA_ERROR_CODES", "NAMES", "HsaStatusNames", "make_error_table"]

#: The translation table (native status -> AML code); anything missing is FAILURE.
HSA_ERROR_CODES: Final[dict[int, ErrorCode]] = {
    C.HSA_STATUS_ERROR_INVALID_ARGUMENT: ErrorCode.EINVAL,
    C.HSA_STATUS_ERROR_INVALID_ALLOCATION: ErrorCode.EINVAL,
    C.HSA_STATUS_ERROR_INVALID_AGENT: ErrorCode.EINVAL,
    C.HSA_STATUS_ERROR_INVALID_REGION: ErrorCode.EINVAL,
    C.HSA_STATUS_ERROR_INVALID_INDEX: ErrorCode.EINVAL,
    C.HSA_STATUS_ERROR_INVALID_MEMORY_POOL: ErrorCode.EINVAL,
    C.HSA_STATUS_ERROR_OUT_OF_RESOURCES: ErrorCode.ENOMEM,
    C.HSA_STATUS_ERROR_RESOURCE_FREE: ErrorCode.EBUSY,
    C.HSA_STATUS_ERROR_RESOURCE_BUSY: ErrorCode.EBUSY,
    C.HSA_STATUS_ERROR_NOT_SUPPORTED: ErrorCode.ENOTSUP,
    C.HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: ErrorCode.EPERM,
    C.HSA_STATUS_ERROR_MEMORY_FAULT: ErrorCode.EPERM,
    C.HSA_STATUS_ERROR_NOT_INITIALIZED: ErrorCode.FAILURE,
    C.HSA_STATUS_ERROR_REFCOUNT_OVERFLOW: ErrorCode.FAILURE,
    C.HSA_STATUS_ERROR_INVALID_RUNTIME_STATE: ErrorCode.FAILURE,
    C.HSA_STATUS_ERROR_FATAL: ErrorCode.FAILURE,
    C.HSA_STATUS_ERROR: ErrorCode.FAILURE,
}

#: Built-in names (used when the library cannot name a status).
NAMES: Final[dict[int, str]] = {
    C.HSA_STATUS_SUCCESS: "HSA_STATUS_SUCCESS",
    C.HSA_STATUS_INFO_BREAK: "HSA_STATUS_INFO_BREAK",
    C.HSA_STATUS_ERROR: "HSA_STATUS_ERROR",
    C.HSA_STATUS_ERROR_INVALID_ARGUMENT: "HSA_STATUS_ERROR_INVALID_ARGUMENT",
    C.HSA_STATUS_ERROR_INVALID_ALLOCATION: "HSA_STATUS_ERROR_INVALID_ALLOCATION",
    C.HSA_STATUS_ERROR_INVALID_AGENT: "HSA_STATUS_ERROR_INVALID_AGENT",
    C.HSA_STATUS_ERROR_INVALID_REGION: "HSA_STATUS_ERROR_INVALID_REGION",
    C.HSA_STATUS_ERROR_OUT_OF_RESOURCES: "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
    C.HSA_STATUS_ERROR_RESOURCE_FREE: "HSA_STATUS_ERROR_RESOURCE_FREE",
    C.HSA_STATUS_ERROR_NOT_INITIALIZED: "HSA_STATUS_ERROR_NOT_INITIALIZED",
    C.HSA_STATUS_ERROR_REFCOUNT_OVERFLOW: "HSA_STATUS_ERROR_REFCOUNT_OVERFLOW",
    C.HSA_STATUS_ERROR_INVALID_INDEX: "HSA_STATUS_ERROR_INVALID_INDEX",
    C.HSA_STATUS_ERROR_INVALID_RUNTIME_STATE: "HSA_STATUS_ERROR_INVALID_RUNTIME_STATE",
    C.HSA_STATUS_ERROR_FATAL: "HSA_STATUS_ERROR_FATAL",
    C.HSA_STATUS_ERROR_INVALID_MEMORY_POOL: "HSA_STATUS_ERROR_INVALID_MEMORY_POOL",
    C.HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION",
    C.HSA_STATUS_ERROR_MEMORY_FAULT: "HSA_STATUS_ERROR_MEMORY_FAULT",
    C.HSA_STATUS_ERROR_RESOURCE_BUSY: "HSA_STATUS_ERROR_RESOURCE_BUSY",
    C.HSA_STATUS_ERROR_NOT_SUPPORTED: "HSA_STATUS_ERROR_NOT_SUPPORTED",
}

_ARG = C.HSA_STATUS_ERROR_INVALID_ARGUMENT
_ALLOC = C.HSA_STATUS_ERROR_INVALID_ALLOCATION
_OOR = C.HSA_STATUS_ERROR_OUT_OF_RESOURCES
_ERR = C.HSA_STATUS_ERROR
_NOINIT = C.HSA_STATUS_ERROR_NOT_INITIALIZED

#: For each hsa_amd_vmem_* call, its documented statuses and their meaning (the vendor's
#: return-value lists, interface 1.4/1.6).
DOCUMENTED: Final[dict[str, dict[int, str]]] = {
    "hsa_amd_vmem_address_reserve": {
        _NOINIT: "the HSA runtime has not been initialized",
        _OOR: "insufficient resources to reserve an address range of this size",
    },
    "hsa_amd_vmem_address_reserve_align": {
        _NOINIT: "the HSA runtime has not been initialized",
        _ARG: "invalid alignment (0 or a power of two >= the page size)",
        _OOR: "insufficient resources to reserve an address range of this size",
    },
    "hsa_amd_vmem_address_free": {
        _ALLOC: "invalid va (not a reserved address range)",
        _ARG: "invalid size (not the reserved size)",
        C.HSA_STATUS_ERROR_RESOURCE_FREE: "the address range is still in use (unmap it first)",
        _ERR: "unexpected internal error",
    },
    "hsa_amd_vmem_handle_create": {
        _NOINIT: "the HSA runtime has not been initialized",
        _ARG: "invalid arguments (size not a multiple of the pool's granule, type or flags)",
        _ALLOC: "this memory pool does not support allocations",
        _OOR: "insufficient resources to allocate this memory",
    },
    "hsa_amd_vmem_handle_release": {
        _ALLOC: "invalid memory handle (unknown or already released)",
    },
    "hsa_amd_vmem_map": {
        _ARG: "va, size or memory_handle are invalid",
        _OOR: "insufficient resources",
        _ERR: "unexpected internal error",
    },
    "hsa_amd_vmem_unmap": {
        _ALLOC: "invalid va (not mapped)",
        _ARG: "invalid size (not the mapped size)",
        _ERR: "unexpected internal error",
    },
    "hsa_amd_vmem_set_access": {
        _ARG: "va, size or memory_handle are invalid",
        _ALLOC: "invalid memory handle",
        _OOR: "insufficient resources",
        C.HSA_STATUS_ERROR_INVALID_AGENT: "invalid agent in desc",
        _ERR: "unexpected internal error",
    },
    "hsa_amd_vmem_get_access": {
        C.HSA_STATUS_ERROR_INVALID_AGENT: "invalid agent",
        _ALLOC: "va is not mapped or permissions were never set for this agent",
        _ERR: "unexpected internal error",
    },
    "hsa_amd_vmem_export_shareable_handle": {
        _ALLOC: "invalid memory handle",
        _OOR: "out of resources",
        _ERR: "unexpected internal error",
    },
    "hsa_amd_vmem_import_shareable_handle": {
        _ALLOC: "invalid shareable handle (not a dma-buf fd of an exported allocation)",
        _OOR: "out of resources",
        _ERR: "unexpected internal error",
    },
    "hsa_amd_vmem_retain_alloc_handle": {
        _ALLOC: "invalid address (nothing is mapped there)",
    },
    "hsa_amd_vmem_get_alloc_properties_from_handle": {
        _ALLOC: "invalid memory handle",
    },
}

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


class HsaStatusNames:
    """Names of statuses as a never-raising ``int -> str``: the built-in names first, then
    ``hsa_status_string`` of the loaded library (:attr:`lookup`, set once it is loaded)."""

    lookup: Callable[[int], bytes | None] | None = None

    def __call__(self, code: int) -> str:
        try:
            value = int(code)
        except (TypeError, ValueError, OverflowError):
            return f"hsa_status {code!r}"
        text = NAMES.get(value)
        if text is None and self.lookup is not None and _INT_MIN <= value <= _INT_MAX:
            try:  # never let a name lookup hide the real error
                raw = self.lookup(value)
            except Exception:
                raw = None
            text = f"hsa_status {value:#x} ({raw.decode('utf-8', 'replace')})" if raw else None
        return text or f"hsa_status {value:#x}"


def status_string_function(fn: object) -> Callable[[int], bytes | None]:
    """Adapt ``hsa_status_string(status, const char**)`` to :class:`HsaStatusNames`."""

    def call(code: int) -> bytes | None:
        out = ctypes.c_char_p()
        rc = fn(ctypes.c_int(code), ctypes.byref(out))  # type: ignore[operator]
        return out.value if rc == C.HSA_STATUS_SUCCESS and out.value else None

    return call


def make_error_table(names: Callable[[int], str]) -> ErrorTable:
    """The HSA :class:`~aml_core.errors.ErrorTable` with the given name lookup."""
    return ErrorTable(backend="hsa", mapping=HSA_ERROR_CODES, name=names, success=C.HSA_STATUS_SUCCESS)


def meaning(function: str, status: int) -> str | None:
    """The documented meaning of ``status`` for ``function`` (None when undocumented)."""
    return DOCUMENTED.get(function, {}).get(status)
