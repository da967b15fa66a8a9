"""HipRuntime and the library loader on the driver double: bad Python input is refused
before any native call, the library is picked and its ABI chosen by version, the
probe describes the devices, and the error table and names follow aml_area_hip_mmap's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aml_hip
import pytest
from aml_hip import abi as C
from aml_hip import native as library
from aml_hip.abi import hip_version
from aml_hip.errors import HIP_ERROR_CODES, HipErrorNames, make_error_table
from hip_helpers import HipDouble, child_env

from aml_core.errors import (
    AMLBusyError,
    AMLDomainError,
    AMLError,
    AMLFailure,
    AMLMemoryError,
    AMLNotSupported,
    AMLTypeError,
    AMLValueError,
    ErrorCode,
)
from aml_core.specs import Capability

V52 = hip_version(5, 2, 21153)


# -- the error table (no library needed) -----------------------------------------------------
@pytest.mark.parametrize(
    ("code", "aml"),
    [
        (35, ErrorCode.ENOTSUP),
        (100, ErrorCode.ENOTSUP),
        (2, ErrorCode.ENOMEM),
        (1, ErrorCode.EINVAL),
        (101, ErrorCode.EINVAL),
        (216, ErrorCode.EBUSY),
        (3, ErrorCode.FAILURE),
        (801, ErrorCode.ENOTSUP),
        (712, ErrorCode.EBUSY),
        (4, ErrorCode.FAILURE),
        (17, ErrorCode.FAILURE),
        (201, ErrorCode.FAILURE),
        (999, ErrorCode.FAILURE),
        (1054, ErrorCode.FAILURE),
        (-1, ErrorCode.FAILURE),
        (1 << 40, ErrorCode.FAILURE),
    ],
)
def test_error_table(code: int, aml: ErrorCode) -> None:
    table = make_error_table(HipErrorNames())
    assert table.translate(code) is aml
    err = table.error("hipMalloc", code)
    assert err.code is aml
    assert err.native is not None
    assert err.native.backend == "hip"


def test_no_native_code_means_success() -> None:
    assert ErrorCode.SUCCESS not in HIP_ERROR_CODES.values()
    assert 0 not in HIP_ERROR_CODES


def test_names_never_raise() -> None:
    names = HipErrorNames()
    assert names(100) == "hipErrorNoDevice"
    assert names(4242) == "hipError 4242"
    assert names("x") == "hipError 'x'"  # type: ignore[arg-type]

    def broken(code: int) -> bytes | None:
        raise RuntimeError("boom")

    names.bind(broken)
    assert names(216) == "hipErrorContextAlreadyInUse"
    names.bind(lambda code: b"hipErrorUnknown")
    assert names(999) == "hipErrorUnknown"
    assert "4242" in names(4242)
    assert names(1 << 40) == f"hipError {1 << 40}"


def test_names_come_from_the_library(hip: HipDouble) -> None:
    hip.inject("hipMalloc", 205)
    with pytest.raises(AMLFailure) as info:
        aml_hip.get_runtime().malloc(4096)
    assert info.value.native is not None
    assert info.value.native.name == "hipErrorMapFailed"
    assert "hipMalloc returned hipErrorMapFailed (205)" in str(info.value)


# -- validation before the native call ---------------------------------------------------------------
BAD_CALLS: list[tuple[str, Callable[[Any], object], type[AMLError]]] = [
    ("hipMalloc", lambda rt: rt.malloc("4096"), AMLTypeError),
    ("hipMalloc", lambda rt: rt.malloc(-1), AMLValueError),
    ("hipMalloc", lambda rt: rt.malloc(1 << 64), AMLDomainError),
    ("hipMalloc", lambda rt: rt.malloc(True), AMLTypeError),
    ("hipFree", lambda rt: rt.free(0), AMLValueError),
    ("hipFree", lambda rt: rt.free(-4096), AMLValueError),
    ("hipFree", lambda rt: rt.free(1 << 64), AMLValueError),
    ("hipFree", lambda rt: rt.free(1.5), AMLTypeError),
    ("hipSetDevice", lambda rt: rt.set_device(1 << 40), AMLValueError),
    ("hipSetDevice", lambda rt: rt.set_device(-1), AMLValueError),
    ("hipHostMalloc", lambda rt: rt.host_alloc(None, portable=False, mapped=False), AMLTypeError),
    ("hipHostRegister", lambda rt: rt.host_register(0, 4096, portable=False, mapped=True), AMLValueError),
    ("hipMemcpy", lambda rt: rt.memcpy(0, 4096, 16), AMLValueError),
    ("hipMemcpy", lambda rt: rt.memcpy(4096, 8192, -1), AMLValueError),
    ("hipMemset", lambda rt: rt.memset(4096, 256, 1), AMLValueError),
    ("hipMemAdvise", lambda rt: rt.mem_advise(4096, 4096, 7, 0), AMLValueError),
    ("hipMemAdvise", lambda rt: rt.mem_advise(4096, 4096, 1, -2), AMLValueError),
    ("hipMemPrefetchAsync", lambda rt: rt.mem_prefetch(4096, 4096, 0, -1), AMLValueError),
    ("hipMemRangeGetAttribute", lambda rt: rt.mem_range_attributes(4096, 4096, [(5, 1)]), AMLValueError),
    ("hipMemRangeGetAttribute", lambda rt: rt.mem_range_attributes(4096, 4096, [(1, 0)]), AMLValueError),
    ("hipMemRangeGetAttributes", lambda rt: rt.mem_range_attributes(4096, 4096, []), AMLValueError),
    ("hipStreamAttachMemAsync", lambda rt: rt.stream_attach(0, 4096, 0, 3), AMLValueError),
    ("hipStreamDestroy", lambda rt: rt.stream_destroy(0), AMLValueError),
    ("hipIpcOpenMemHandle", lambda rt: rt.ipc_open_handle(b"\0" * 63, 4096), AMLValueError),
    ("hipIpcOpenMemHandle", lambda rt: rt.ipc_open_handle(None, 4096), AMLTypeError),
    ("hipIpcCloseMemHandle", lambda rt: rt.ipc_close_handle(0), AMLValueError),
    ("hipMemAddressReserve", lambda rt: rt.vmm_reserve(0, 0, 0), AMLValueError),
    ("hipMemCreate", lambda rt: rt.vmm_create(2 << 20, -1, False), AMLValueError),
    ("hipMemRelease", lambda rt: rt.vmm_release(0), AMLValueError),
    ("hipMemSetAccess", lambda rt: rt.vmm_set_access(1 << 30, 2 << 20, []), AMLValueError),
    ("hipMemSetAccess", lambda rt: rt.vmm_set_access(1 << 30, 2 << 20, [(0, 2)]), AMLValueError),
    ("hipMemImportFromShareableHandle", lambda rt: rt.vmm_import_fd(-1), AMLValueError),
    ("hipMemImportFromShareableHandle", lambda rt: rt.vmm_import_fd(1 << 40), AMLValueError),
    ("hipDeviceGetAttribute", lambda rt: rt.attribute(1 << 33, 0), AMLValueError),
]


@pytest.mark.parametrize(
    ("function", "call", "cls"), BAD_CALLS, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD_CALLS)]
)
def test_bad_input_never_reaches_the_library(
    hip: HipDouble, function: str, call: Callable[[Any], object], cls: type[AMLError]
) -> None:
    rt = aml_hip.get_runtime()
    with pytest.raises(cls):
        call(rt)
    assert hip.calls(function) == 0


# -- the library and its version ---------------------------------------------------------------------
def test_candidates_and_override() -> None:
    assert library.CANDIDATES == ("libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5")
    assert library.ENV == "AML_HIP_LIBRARY"


def test_missing_library_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AML_HIP_LIBRARY", str(tmp_path / "libamdhip64.so.6"))
    aml_hip.BACKEND.reset()
    try:
        result = aml_hip.probe()
        assert not result.available
        assert "AML_HIP_LIBRARY" in result.reason
        with pytest.raises(AMLNotSupported):
            aml_hip.create(0)
    finally:
        aml_hip.BACKEND.reset()


def test_search_order_prefers_newer_sonames(double_library: Path, tmp_path: Path) -> None:
    """Without AML_HIP_LIBRARY, .so.7 then .so.6 then .so.5 are tried: a .so.6 found on the
    library path wins over Debian's .so.5."""
    (tmp_path / "libamdhip64.so.6").symlink_to(double_library)
    code = textwrap.dedent(
        """
        import aml_hip
        rt = aml_hip.get_runtime()
        print(rt.lib.path, rt.abi.label)
        """
    )
    env = child_env(LD_LIBRARY_PATH=str(tmp_path), HIPDOUBLE_VERSION=str(hip_version(6, 1)))
    env.pop("AML_HIP_LIBRARY", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["libamdhip64.so.6", "6.0/6.1"]


def test_library_built_as_5_2(hip_built: Callable[[int | None], HipDouble]) -> None:
    """A 5.2 library (named .so.5, without hipExtHostAlloc, as Debian's)."""
    double = hip_built(V52)
    assert double.path.name == "libamdhip64.so.5"
    rt = aml_hip.get_runtime()
    assert (rt.version, rt.abi.label) == (V52, "5.2")
    assert (rt.lib.host_alloc, rt.lib.host_free) == ("hipHostMalloc", "hipHostFree")
    assert not rt.lib.has("hipExtHostAlloc")
    area = aml_hip.create(0, aml_hip.HipFlags.ALLOC_HOST)
    area.mmap(100)
    assert double.calls("hipHostMalloc") == 1
    area.close()
    assert "HIP 5.2.21153" in rt.traits.version


def test_library_built_as_6_3_uses_new_host_calls(hip_built: Callable[[int | None], HipDouble]) -> None:
    double = hip_built(hip_version(6, 3))
    rt = aml_hip.get_runtime()
    assert (rt.lib.host_alloc, rt.lib.host_free) == ("hipExtHostAlloc", "hipFreeHost")
    area = aml_hip.create(0, aml_hip.HipFlags.ALLOC_HOST)
    area.mmap(100)
    area.close()
    assert (double.calls("hipExtHostAlloc"), double.calls("hipFreeHost")) == (1, 1)


def test_newer_major_uses_the_newest_known_abi(hip: HipDouble) -> None:
    hip.use_version(hip_version(8, 1))
    rt = aml_hip.get_runtime()
    assert rt.abi.label == "7.x"
    assert "assumed" in rt.traits.version


@pytest.mark.parametrize("error", [1, 3, 999])
def test_unreadable_version_is_unavailable(hip: HipDouble, error: int) -> None:
    hip.inject("hipRuntimeGetVersion", error)
    aml_hip.BACKEND.reset()  # the version is read when the runtime loads (forward mode loaded it)
    result = aml_hip.probe()
    assert not result.available
    assert "hipRuntimeGetVersion" in result.reason


# -- probe and device info -----------------------------------------------------------------------------
def test_probe(hip: HipDouble) -> None:
    result = aml_hip.probe()
    assert result.available, result.reason
    assert len(result.devices) == aml_hip.get_runtime().device_count()
    dev = result.devices[0]
    assert dev.total_memory > 0
    assert Capability.MANAGED in dev.capabilities
    assert dev.details["abi"] == aml_hip.get_runtime().abi.label
    assert not result.reason
    assert result.detail == f"{len(result.devices)} device(s)"
    assert any(key.startswith("HIP") for key in result.versions), result.versions
    assert hip.calls("hipMalloc") == 0  # the probe allocates nothing


@pytest.mark.host_double
def test_probe_host_double_devices(hip: HipDouble) -> None:
    hip.need_devices(3, 1 << 28)
    result = aml_hip.probe()
    assert [d.name for d in result.devices] == [f"HIP double device {i}" for i in range(3)]
    assert all(d.total_memory == 1 << 28 for d in result.devices)
    assert result.devices[1].details["pci_bus_id"] == "0000:11:00.0"  # as sysfs names it


@pytest.mark.host_double
def test_probe_reports_free_memory_per_device(hip: HipDouble) -> None:
    """hipMemGetInfo answers for the current device: each device is selected in turn and
    the caller's current device comes back; an allocation shows on its device only."""
    hip.need_devices(2, 1 << 28)
    rt = aml_hip.get_runtime()
    rt.set_device(1)
    area = aml_hip.create(0)
    buf = area.mmap(1 << 20)
    result = aml_hip.probe()
    assert [d.free_memory for d in result.devices] == [(1 << 28) - (1 << 20), 1 << 28]
    assert rt.get_device() == 1
    area.munmap(buf)
    assert rt.free_memory(0) == 1 << 28
    area.close()


@pytest.mark.host_double
@pytest.mark.parametrize("function", ["hipMemGetInfo", "hipSetDevice"])
def test_failed_free_memory_query_is_not_known(hip: HipDouble, function: str) -> None:
    """A failed query is "not known" (None), never a failed probe, and the current
    device is restored (the first hipSetDevice is the one that fails)."""
    hip.need_devices(2, 1 << 28)
    rt = aml_hip.get_runtime()
    rt.set_device(0)
    hip.inject(function, 1)
    assert rt.free_memory(1) is None
    assert rt.get_device() == 0
    hip.inject("hipMemGetInfo", 1, times=-1)
    result = aml_hip.probe()
    assert result.available
    assert all(d.free_memory is None for d in result.devices)
    assert all(d.total_memory == 1 << 28 for d in result.devices)


@pytest.mark.host_double
@pytest.mark.parametrize(("error", "text"), [(100, "no HIP device"), (35, "driver")])
def test_probe_without_devices(hip: HipDouble, error: int, text: str) -> None:
    hip.inject("hipGetDeviceCount", error, times=-1)
    result = aml_hip.probe()
    assert not result.available
    assert text in result.reason


@pytest.mark.host_double
def test_out_of_device_memory(hip: HipDouble) -> None:
    hip.need_devices(1, 1 << 20)
    area = aml_hip.create(0)
    with pytest.raises(AMLMemoryError) as info:
        area.mmap(2 << 20)
    assert info.value.native is not None
    assert info.value.native.name == "hipErrorOutOfMemory"
    area.close()


def test_pointer_attributes_per_version(hip: HipDouble) -> None:
    for version, unknown in ((V52, AMLValueError), (hip_version(6, 2), None)):
        hip.use_version(version)
        rt = aml_hip.get_runtime()
        dev, host = rt.malloc(4096), rt.host_alloc(4096, portable=False, mapped=True)
        assert rt.pointer_attributes(dev).memory_type == "device"
        assert rt.pointer_attributes(host).memory_type == "host"
        local = bytearray(64)
        import ctypes

        addr = ctypes.addressof(ctypes.c_char.from_buffer(local))
        if unknown is None:
            assert rt.pointer_attributes(addr).memory_type == "unregistered"
        else:
            with pytest.raises(unknown):
                rt.pointer_attributes(addr)
        rt.free(dev)
        rt.free_host(host)


def test_busy_is_ebusy(hip: HipDouble) -> None:
    hip.inject("hipSetDevice", 216)
    with pytest.raises(AMLBusyError):
        aml_hip.get_runtime().set_device(0)


@pytest.mark.gpu
def test_forward_mode_runs_on_a_gpu(hip: HipDouble) -> None:
    """Only with AML_HIP_TEST_DOUBLE=forward: the hip* calls reach CUDA on a real GPU."""
    if hip.mode != "forward":
        pytest.skip("runs with AML_HIP_TEST_DOUBLE=forward on an NVIDIA GPU")
    assert hip.ctl.mode == "forward"
    result = aml_hip.probe()
    assert result.available, result.reason
    assert not result.devices[0].name.startswith("HIP double")
    area = aml_hip.create(0)
    buf = area.mmap(1 << 20)
    area.write(buf, b"on the GPU")
    assert area.read(buf, 10) == b"on the GPU"
    assert aml_hip.get_runtime().pointer_attributes(buf.ptr).memory_type == "device"
    area.close()


def test_streams(hip: HipDouble) -> None:
    with aml_hip.stream() as s:
        assert hip.last("hipStreamCreateWithFlags")[1] == 0  # type: ignore[index]
        s.synchronize()
        assert hip.last("hipStreamSynchronize") == (s.handle,)
        assert hip.live()["stream"] == 1
    assert hip.live()["stream"] == 0


@pytest.mark.host_double
@pytest.mark.parametrize(
    ("error", "answered"),
    [
        (C.hipErrorInvalidValue, True),  # an attribute this HIP does not know: the default
        (C.hipErrorNotSupported, True),
        (C.hipErrorInvalidDevice, False),  # EINVAL too, but a failing query: raised
        (C.hipErrorOutOfMemory, False),
        (C.hipErrorUnknown, False),
    ],
)
def test_a_failing_attribute_query_is_not_read_as_a_default(
    hip: HipDouble, error: int, answered: bool
) -> None:
    """Issue 32: ``_attribute_or`` took any EINVAL as "not known" and answered its default
    (VMM support: 1) for a query that failed."""
    hip.need_devices(1, 1 << 28)
    rt = aml_hip.get_runtime()
    hip.inject("hipDeviceGetAttribute", error, times=-1)
    if answered:
        assert rt._attribute_or(C.hipDeviceAttributeManagedMemory, 0, 7) == 7
    else:
        with pytest.raises(AMLError) as info:
            rt._attribute_or(C.hipDeviceAttributeManagedMemory, 0, 7)
        assert info.value.native is not None
        assert info.value.native.code == error
