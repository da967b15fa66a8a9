"""AML's Level Zero error table, row by row: the double makes each native call fail with
each ze_result_t, and aml raises the documented AML error with the native cause; every
"success" with an impossible result is FAILURE; a failed free keeps the buffer tracked.
Every other ze* call failing, during every operation that makes it, is the generated table
of ``ze_faults.py`` (``test_ze_faults.py``)."""

from __future__ import annotations

from collections.abc import Callable

import aml_ze
import pytest
from aml_ze import abi as C
from aml_ze.errors import ERRORS, ZE_ERROR_CODES, result_name
from ze_helpers import ZeDouble

from aml_core.errors import (
    AMLError,
    AMLFailure,
    AMLMemoryError,
    AMLNotSupported,
    AMLValueError,
    ErrorCode,
)

#: The area's documented table (docs/aml-contract.md#level-zero-area), plus codes it does
#: not list, which are FAILURE.
TABLE = [
    (C.ZE_RESULT_ERROR_UNINITIALIZED, ErrorCode.FAILURE, AMLFailure),
    (C.ZE_RESULT_ERROR_DEVICE_LOST, ErrorCode.FAILURE, AMLFailure),
    (C.ZE_RESULT_ERROR_INVALID_NULL_HANDLE, ErrorCode.EINVAL, AMLValueError),
    (C.ZE_RESULT_ERROR_INVALID_NULL_POINTER, ErrorCode.EINVAL, AMLValueError),
    (C.ZE_RESULT_ERROR_INVALID_ENUMERATION, ErrorCode.EINVAL, AMLValueError),
    (C.ZE_RESULT_ERROR_UNSUPPORTED_SIZE, ErrorCode.ENOTSUP, AMLNotSupported),
    (C.ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT, ErrorCode.ENOTSUP, AMLNotSupported),
    (C.ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, ErrorCode.ENOMEM, AMLMemoryError),
    (C.ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, ErrorCode.ENOMEM, AMLMemoryError),
    (C.ZE_RESULT_ERROR_INVALID_ARGUMENT, ErrorCode.FAILURE, AMLFailure),
    (C.ZE_RESULT_ERROR_OVERLAPPING_REGIONS, ErrorCode.FAILURE, AMLFailure),
    (C.ZE_RESULT_ERROR_NOT_AVAILABLE, ErrorCode.FAILURE, AMLFailure),
    (C.ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE, ErrorCode.FAILURE, AMLFailure),
    (C.ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, ErrorCode.FAILURE, AMLFailure),
    (C.ZE_RESULT_NOT_READY, ErrorCode.FAILURE, AMLFailure),
    (C.ZE_RESULT_ERROR_UNKNOWN, ErrorCode.FAILURE, AMLFailure),
    (0x12345678, ErrorCode.FAILURE, AMLFailure),
]
ROWS = [pytest.param(*row, id=result_name(row[0])) for row in TABLE]
ALLOCS = {"device": "zeMemAllocDevice", "shared": "zeMemAllocShared", "host": "zeMemAllocHost"}


def test_the_table_is_aml_s() -> None:
    assert {k: v for k, v, _ in TABLE if v is not ErrorCode.FAILURE} == {
        k: v for k, v in ZE_ERROR_CODES.items() if v is not ErrorCode.FAILURE
    }
    assert all(ERRORS.translate(code) is aml for code, aml, _ in TABLE)
    assert result_name(0x70000003) == "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY"
    assert result_name(0x12345678) == "ze_result_t 0x12345678"


def _check(exc: AMLError, function: str, native: int, code: ErrorCode, cls: type[AMLError]) -> None:
    assert type(exc) is cls
    assert exc.code is code
    assert exc.native is not None
    assert (exc.native.backend, exc.native.function, exc.native.code) == ("ze", function, native)
    assert exc.native.name == result_name(native)


@pytest.mark.parametrize("kind", ["device", "shared", "host"])
@pytest.mark.parametrize(("native", "code", "cls"), ROWS)
def test_mmap(
    ze: ZeDouble,
    areas: Callable[..., aml_ze.ZeArea],
    kind: str,
    native: int,
    code: ErrorCode,
    cls: type[AMLError],
) -> None:
    area = areas(kind)
    ze.inject(ALLOCS[kind], native)
    with pytest.raises(cls) as info:
        area.mmap(4096)
    _check(info.value, ALLOCS[kind], native, code, cls)
    assert area.stats.live_mappings == 0
    area.munmap(area.mmap(4096))  # the injection was used up: the area still works


@pytest.mark.parametrize(("native", "code", "cls"), ROWS)
def test_munmap_keeps_the_buffer(
    ze: ZeDouble, areas: Callable[..., aml_ze.ZeArea], native: int, code: ErrorCode, cls: type[AMLError]
) -> None:
    area = areas("device")
    buf = area.mmap(100)
    ze.inject("zeMemFree", native)
    with pytest.raises(cls) as info:
        area.munmap(buf)
    _check(info.value, "zeMemFree", native, code, cls)
    assert not buf.freed
    assert area.buffers() == (buf,)
    area.munmap(buf)
    assert ze.live()["device"] == 0


@pytest.mark.parametrize(("native", "code", "cls"), ROWS)
def test_context_creation(ze: ZeDouble, native: int, code: ErrorCode, cls: type[AMLError]) -> None:
    ze.inject("zeContextCreate", native)
    with pytest.raises(cls) as info:
        aml_ze.host_area()
    _check(info.value, "zeContextCreate", native, code, cls)
    assert ze.live()["context"] == 0


def test_context_destroy_failure_keeps_the_context(ze: ZeDouble) -> None:
    area = aml_ze.device_area()
    ze.inject("zeContextDestroy", C.ZE_RESULT_ERROR_DEVICE_LOST)
    with pytest.raises(AMLFailure) as info:
        area.close()
    assert info.value.native is not None
    assert info.value.native.function == "zeContextDestroy"
    assert area.context != 0
    assert ze.live()["context"] == 1
    area.close()  # retried
    assert ze.live()["context"] == 0


@pytest.mark.parametrize(
    ("function", "action"),
    [
        ("zeMemAllocDevice", lambda: aml_ze.device_area().mmap(8)),
        ("zeMemAllocShared", lambda: aml_ze.device_area(flags=aml_ze.ZeFlags.SHARED).mmap(8)),
        ("zeMemAllocHost", lambda: aml_ze.host_area().mmap(8)),
        ("zeContextCreate", aml_ze.host_area),
        ("zeVirtualMemQueryPageSize", lambda: aml_ze.virtual_memory(0)),
    ],
)
def test_success_with_an_impossible_result_is_failure(
    ze: ZeDouble, function: str, action: Callable[[], object]
) -> None:
    ze.inject(function, 0)  # SUCCESS, and the out-parameter untouched
    with pytest.raises(AMLFailure, match=f"{function} returned SUCCESS"):
        action()
    aml_ze.BACKEND.reset()
    ze.ctl.reset()  # the areas of the lambdas were never returned: the double frees them


@pytest.mark.parametrize(("native", "code", "cls"), ROWS[:9])
def test_probe_calls(ze: ZeDouble, native: int, code: ErrorCode, cls: type[AMLError]) -> None:
    """A failing driver or device query makes the backend unavailable, saying which call."""
    aml_ze.BACKEND.reset()  # forward mode loaded the runtime already
    ze.inject("zeDeviceGet", native)
    result = aml_ze.probe()
    assert not result.available
    assert "zeDeviceGet" in result.reason
    assert result_name(native) in result.reason
