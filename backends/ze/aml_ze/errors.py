"""ze_result_t -> AML error codes: the table of AML's Level Zero area, written once.

AML's ``aml_area_ze_mmap_device`` / ``aml_area_ze_mmap_shared`` / ``aml_area_ze_munmap``
document this translation (docs/aml-contract.md#level-zero-area):

======================================================  =========
ze_result_t                                             AML
======================================================  =========
ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)              FAILURE
ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)                FAILURE
ZE_RESULT_ERROR_INVALID_NULL_HANDLE (0x78000005)        EINVAL
ZE_RESULT_ERROR_INVALID_NULL_POINTER (0x78000007)       EINVAL
ZE_RESULT_ERROR_INVALID_ENUMERATION (0x7800000C)        EINVAL
ZE_RESULT_ERROR_UNSUPPORTED_SIZE (0x78000009)           ENOTSUP
ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT (0x7800000A)      ENOTSUP
ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY (0x70000002)         ENOMEM
ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (0x70000003)       ENOMEM
every other ze_result_t                                 FAILURE
======================================================  =========

Every other code, including the ones AML's generic C translation would map elsewhere
(``OVERLAPPING_REGIONS``, ``NOT_AVAILABLE``...), is FAILURE with the native cause in
:attr:`~aml_core.errors.AMLError.native`: the area's documented table is narrower and is
the one aml-ze keeps, for every call. Names come from the 1.4 header
(:data:`aml_ze.abi.RESULT_NAMES`); an unknown value reads ``ze_result_t 0x...``.
"""

from __future__ import annotations

from typing import Final

from aml_core.errors import ErrorCode, ErrorTable

from . import abi as C

__all__ = ["ERRORS", "ZE_ERROR_CODES", "result_name"]

#: The translation table (native code -> AML code); anything missing is FAILURE.
ZE_ERROR_CODES: Final[dict[int, ErrorCode]] = {
    C.ZE_RESULT_ERROR_UNINITIALIZED: ErrorCode.FAILURE,
    C.ZE_RESULT_ERROR_DEVICE_LOST: ErrorCode.FAILURE,
    C.ZE_RESULT_ERROR_INVALID_NULL_HANDLE: ErrorCode.EINVAL,
    C.ZE_RESULT_ERROR_INVALID_NULL_POINTER: ErrorCode.EINVAL,
    C.ZE_RESULT_ERROR_INVALID_ENUMERATION: ErrorCode.EINVAL,
    C.ZE_RESULT_ERROR_UNSUPPORTED_SIZE: ErrorCode.ENOTSUP,
    C.ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT: ErrorCode.ENOTSUP,
    C.ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY: ErrorCode.ENOMEM,
    C.ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY: ErrorCode.ENOMEM,
}


def result_name(code: int) -> str:
    """The header's name of a ze_result_t (never raises)."""
    try:
        value = int(code) & 0xFFFFFFFF
    except (TypeError, ValueError, OverflowError):
        return f"ze_result_t {code!r}"
    return C.RESULT_NAMES.get(value, f"ze_result_t {value:#x}")


#: The Level Zero :class:`~aml_core.errors.ErrorTable`.
ERRORS: Final = ErrorTable(
    backend="ze", mapping=ZE_ERROR_CODES, name=result_name, success=C.ZE_RESULT_SUCCESS
)
