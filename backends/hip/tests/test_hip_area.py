"""docs/aml-contract.md#hip-area on the driver double: the conformance kit for every flag combination, the
native call and flags each combination makes, device selection and its restoration,
and every error row of ``aml_area_hip_create`` / ``mmap`` / ``munmap``."""

from __future__ import annotations

import ctypes
import gc
import mmap
from collections.abc import Callable, Iterator
from typing import Any

import aml_hip
import pytest
from aml_hip import HipFlags, HipMmapOptions
from aml_hip.abi import hip_version
from hip_helpers import HipDouble

import aml_core
from aml_core.area import Area
from aml_core.buffer import Buffer
from aml_core.errors import (
    AMLBusyError,
    AMLError,
    AMLFailure,
    AMLMemoryError,
    AMLNotSupported,
    AMLTypeError,
    AMLValueError,
    ErrorCode,
)
from aml_core.specs import Capability, Kind
from aml_core.testing import AreaConformance, PooledIpcConformance
from tests.support.bad_copies import bad_copies, refused_before_any_copy

F = HipFlags


def _name(flags: int) -> str:
    names = [n.removeprefix("ALLOC_") for n, f in HipFlags.__members__.items() if f and flags & f]
    return "|".join(names) or "DEFAULT"


def _registers(flags: int) -> bool:
    """ALLOC_MAPPED without ALLOC_HOST (and without ALLOC_UNIFIED) maps the caller's memory."""
    return bool(flags & F.ALLOC_MAPPED) and not flags & (F.ALLOC_HOST | F.ALLOC_UNIFIED)


def expected_call(flags: int) -> tuple[str, int | None, str]:
    """AML's HIP area, read independently of the implementation: the allocation call, the
    native flags it gets (None: hipMalloc has none) and the call that frees."""
    portable = 0x1 if flags & F.ALLOC_GLOBAL else 0x0  # hipHostMallocPortable = hipHostRegisterPortable
    if flags & F.ALLOC_UNIFIED:  # ALLOC_HOST and ALLOC_MAPPED are ignored
        return "hipMallocManaged", 0x1 if flags & F.ALLOC_GLOBAL else 0x2, "hipFree"  # AttachGlobal / Host
    if flags & F.ALLOC_MAPPED:
        if flags & F.ALLOC_HOST:
            return "hipHostMalloc", 0x2 | portable, "hipHostFree"  # hipHostMallocMapped
        return "hipHostRegister", 0x2 | portable, "hipHostUnregister"  # hipHostRegisterMapped
    if flags & F.ALLOC_HOST:
        return "hipHostMalloc", 0x0 | portable, "hipHostFree"
    return "hipMalloc", None, "hipFree"


#: All 16 flag sets.
ALL_FLAGS = list(range(16))
#: The flag sets whose areas allocate by themselves (the others map the caller's memory).
COMBINATIONS: dict[str, int] = {_name(f): f for f in ALL_FLAGS if not _registers(f)}


class TestConformance(AreaConformance):
    """aml_core's conformance kit on every flag combination that allocates by itself
    (ALLOC_MAPPED without ALLOC_HOST maps the caller's memory: tested below)."""

    rounds = 20

    @pytest.fixture(params=list(COMBINATIONS.values()), ids=list(COMBINATIONS))
    def area(self, request: pytest.FixtureRequest, hip: HipDouble) -> Iterator[Area]:
        self.double = hip
        area = aml_hip.create(0, request.param)
        yield area
        area.close()

    def native_live(self, area: Area) -> int | None:
        """The double's own count of live allocations: the kit's leak check."""
        return sum(self.double.live().values())


class TestIpcConformance(PooledIpcConformance):
    """The kit's IPC classes over the double: export, open in a child process (the same
    double, through hip.env()), write there, read back here; a pooled block that is not
    its slab's first too (the handle's offset honoured by aml_hip's import)."""

    @pytest.fixture
    def area(self, hip: HipDouble) -> Iterator[Area]:
        self.double = hip
        area = aml_hip.create(0, F.DEFAULT)
        yield area
        area.close()

    def child_env(self, area: Area) -> dict[str, str]:
        return self.double.env()


class TestMappedConformance(AreaConformance):
    """ALLOC_MAPPED without ALLOC_HOST, with fresh host memory passed on every mmap (page
    aligned: CUDA, under the forward double, registers whole pages)."""

    sizes = (1, 4096, 65537)
    rounds = 10
    enomem_size = None  # the caller's memory is mapped: nothing to run out of

    class _Area(aml_hip.HipArea):
        def mmap(self, size: int, options: object = None) -> Buffer:
            if (
                options is None
                and isinstance(size, int)
                and not isinstance(size, bool)
                and 0 < size < 1 << 40
            ):
                options = HipMmapOptions(ptr=mmap.mmap(-1, size))
            return super().mmap(size, options)

    @pytest.fixture
    def area(self, hip: HipDouble) -> Iterator[Area]:
        area = self._Area(aml_hip.get_runtime(), 0, F.ALLOC_MAPPED)
        yield area
        area.close()


# -- flags -> native call and flags ------------------------------------------------------------------
@pytest.mark.parametrize("flags", ALL_FLAGS, ids=[_name(f) for f in ALL_FLAGS])
def test_flags_pick_the_native_call(
    hip: HipDouble, areas: Callable[..., aml_hip.HipArea], flags: int
) -> None:
    function, native_flags, free = expected_call(flags)
    area = areas(0, flags)
    host = mmap.mmap(-1, 8192) if _registers(flags) else None
    buf = area.mmap(5000, HipMmapOptions(ptr=host) if host is not None else None)
    allocators = {"hipMalloc", "hipHostMalloc", "hipMallocManaged", "hipHostRegister"}
    assert {f: hip.calls(f) for f in allocators} == {f: int(f == function) for f in allocators}
    args = hip.last(function)
    assert args is not None
    size = 8192 if function == "hipMallocManaged" else 5000  # managed: 4 KiB granules (hipMallocManaged)
    assert args[1] == size
    if native_flags is not None:
        assert args[2] == native_flags
    mapped = bool(flags & F.ALLOC_MAPPED) and not flags & F.ALLOC_UNIFIED
    assert hip.calls("hipHostGetDevicePointer") == int(mapped)
    if mapped:
        assert hip.last("hipHostGetDevicePointer")[1:] == (buf.ptr, 0)  # type: ignore[index]
        assert buf.device_ptr == buf.ptr  # unified addressing on the double
    assert buf.size == 5000
    kinds = {"hipMalloc": Kind.DEVICE, "hipMallocManaged": Kind.MANAGED}
    assert area.kind is kinds.get(function, Kind.MAPPED if mapped else Kind.HOST)
    area.munmap(buf)
    assert hip.calls(free) == 1
    assert hip.last(free) == (buf.ptr,)
    if host is not None:
        host.close()


def test_mapped_without_host_registers_the_callers_memory(
    hip: HipDouble, areas: Callable[..., aml_hip.HipArea]
) -> None:
    for flags, native in ((F.ALLOC_MAPPED, 0x2), (F.ALLOC_MAPPED | F.ALLOC_GLOBAL, 0x3)):
        area = areas(0, flags)
        host = bytearray(b"x" * 8192)
        buf = area.mmap(8192, HipMmapOptions(ptr=host))
        addr = ctypes.addressof(ctypes.c_char.from_buffer(host))
        assert buf.ptr == addr
        assert hip.last("hipHostRegister") == (addr, 8192, native)  # hipHostRegisterMapped (| Portable)
        assert hip.last("hipHostGetDevicePointer")[1:] == (addr, 0)  # type: ignore[index]
        assert hip.calls("hipHostMalloc") == 0
        with memoryview(buf) as view:
            assert bytes(view[:2]) == b"xx"
        area.munmap(buf)
        assert hip.last("hipHostUnregister") == (addr,)
        del host  # the buffer kept it alive while mapped


def test_mapped_without_host_takes_an_address(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    area = areas(0, F.ALLOC_MAPPED)
    with mmap.mmap(-1, 1 << 16) as raw:
        addr = ctypes.addressof(ctypes.c_char.from_buffer(raw))
        buf = area.mmap(1 << 16, HipMmapOptions(ptr=addr))
        assert buf.ptr == addr
        area.munmap(buf)


def test_mapped_without_host_needs_a_pointer(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    area = areas(0, F.ALLOC_MAPPED)
    with pytest.raises(AMLValueError) as info:
        area.mmap(4096)
    assert info.value.code is ErrorCode.EINVAL
    with pytest.raises(AMLValueError):
        area.mmap(4096, HipMmapOptions(ptr=bytearray(100)))  # too small
    with pytest.raises(AMLValueError):
        area.mmap(4096, HipMmapOptions(ptr=bytes(4096)))  # read-only
    with pytest.raises(AMLTypeError):
        area.mmap(4096, HipMmapOptions(ptr=object()))
    assert hip.calls("hipHostRegister") == 0


def test_mapped_registration_failure_releases(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    area = areas(0, F.ALLOC_MAPPED)
    host = bytearray(4096)
    hip.inject("hipHostGetDevicePointer", 1)
    with pytest.raises(AMLValueError):
        area.mmap(4096, HipMmapOptions(ptr=host))
    assert hip.calls("hipHostUnregister") == 1
    host.extend(b"1")  # no export left on it: resizable again


def test_registering_twice_is_busy(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    """hipErrorHostMemoryAlreadyRegistered is EBUSY (documented extension, as AML's C area)."""
    area = areas(0, F.ALLOC_MAPPED)
    host = bytearray(8192)
    buf = area.mmap(8192, HipMmapOptions(ptr=host))
    with pytest.raises(AMLBusyError) as info:
        area.mmap(4096, HipMmapOptions(ptr=host))
    assert info.value.native is not None
    assert info.value.native.name == "hipErrorHostMemoryAlreadyRegistered"
    area.munmap(buf)


def test_host_allocation_on_6_3_uses_hipExtHostAlloc(
    hip: HipDouble, areas: Callable[..., aml_hip.HipArea]
) -> None:
    hip.use_version(hip_version(6, 3))
    area = areas(0, F.ALLOC_HOST | F.ALLOC_GLOBAL)
    buf = area.mmap(4096)
    assert hip.calls("hipHostMalloc") == 0
    assert hip.last("hipExtHostAlloc")[1:] == (4096, 0x1)  # type: ignore[index]
    area.munmap(buf)
    assert hip.calls("hipHostFree") == 0
    assert hip.last("hipFreeHost") == (buf.ptr,)


# -- device selection ----------------------------------------------------------------------------
def test_area_device_is_selected_and_restored(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    hip.need_devices(2)
    rt = aml_hip.get_runtime()
    rt.set_device(0)
    area = areas(1, F.DEFAULT)
    buf = area.mmap(4096)
    assert buf.device == 1
    assert rt.pointer_attributes(buf.ptr).device == 1
    assert rt.get_device() == 0
    assert hip.last("hipSetDevice") == (0,)
    area.munmap(buf)


def test_options_device_overrides(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    hip.need_devices(2)
    rt = aml_hip.get_runtime()
    area = areas(0, F.ALLOC_UNIFIED)
    buf = area.mmap(4096, HipMmapOptions(device=1))
    assert buf.device == 1
    assert rt.pointer_attributes(buf.ptr).device == 1
    assert rt.get_device() == 0
    area.munmap(buf)
    rt.set_device(1)
    current = areas(-1, F.DEFAULT)  # negative: the current device at mmap time
    buf = current.mmap(4096)
    assert buf.device == 1
    calls = hip.calls("hipSetDevice")
    other = current.mmap(4096, HipMmapOptions(device=-1))
    assert other.device == 1
    assert hip.calls("hipSetDevice") == calls  # no selection needed
    current.munmap(buf)
    current.munmap(other)
    rt.set_device(0)


def test_options_device_out_of_range(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    area = areas(0, F.DEFAULT)
    n = aml_hip.get_runtime().device_count()
    with pytest.raises(AMLValueError):
        area.mmap(4096, HipMmapOptions(device=n))
    assert hip.calls("hipMalloc") == 0
    with pytest.raises(AMLTypeError):
        area.mmap(4096, HipMmapOptions(device="0"))


@pytest.mark.parametrize("flags", list(COMBINATIONS.values()), ids=list(COMBINATIONS))
def test_device_restored_when_the_allocation_fails(
    hip: HipDouble, areas: Callable[..., aml_hip.HipArea], flags: int
) -> None:
    hip.need_devices(2)
    rt = aml_hip.get_runtime()
    rt.set_device(0)
    area = areas(1, flags)
    function = expected_call(flags)[0]
    hip.inject(function, 2)  # hipErrorOutOfMemory
    with pytest.raises(AMLMemoryError):
        area.mmap(4096)
    assert rt.get_device() == 0
    assert hip.last("hipSetDevice") == (0,)
    assert area.stats.live_mappings == 0


def test_restore_failure_gives_the_memory_back(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    """The allocation succeeds but restoring the caller's device fails: AML's C area returns
    the pointer with aml_errno set; aml raises and frees the allocation (nothing leaks)."""
    hip.need_devices(2)
    rt = aml_hip.get_runtime()
    rt.set_device(0)
    area = areas(1, F.DEFAULT)
    hip.inject("hipSetDevice", 216, skip=1)  # select OK, restore fails: context in use
    with pytest.raises(AMLBusyError):
        area.mmap(4096)
    assert hip.calls("hipMalloc") == 1
    assert hip.calls("hipFree") == 1
    assert area.stats.live_mappings == 0


def test_restore_and_give_back_failing_keep_the_memory_for_close(
    hip: HipDouble, areas: Callable[..., aml_hip.HipArea]
) -> None:
    """Double fault (issue 20): the caller's device cannot be restored and giving the
    allocation back (hipFree) fails too. The allocation stays tracked, held by the area
    (live in its stats), and close() frees it."""
    hip.need_devices(2)
    rt = aml_hip.get_runtime()
    rt.set_device(0)
    area = areas(1, F.DEFAULT)
    hip.inject("hipSetDevice", 216, skip=1)  # select OK, restore fails: context in use
    hip.inject("hipFree", 1)  # and the give-back fails: hipErrorInvalidValue
    with pytest.raises(AMLBusyError) as info:
        area.mmap(4096)
    assert any("giving the allocation back failed too" in note for note in info.value.__notes__)
    gc.collect()
    assert area.stats.live_mappings == 1
    assert area.stats.total_maps == 1
    assert area.stats.total_unmaps == 0
    assert hip.live()["device"] == 1
    area.close()  # retries the free
    assert hip.calls("hipFree") == 2
    assert hip.live()["device"] == 0
    assert area.stats.live_mappings == 0
    assert area.stats.total_unmaps == 1


# -- error rows of aml_area_hip_* (docs/aml-contract.md#hip-area) --------------------------------
#: hipError_t -> AML exception class (aml_area_hip_mmap and the documented extensions).
ERRORS: dict[int, type[AMLError]] = {
    35: AMLNotSupported,  # hipErrorInsufficientDriver
    100: AMLNotSupported,  # hipErrorNoDevice
    2: AMLMemoryError,  # hipErrorMemoryAllocation / OutOfMemory
    1: AMLValueError,  # hipErrorInvalidValue
    101: AMLValueError,  # hipErrorInvalidDevice
    216: AMLBusyError,  # hipErrorContextAlreadyInUse
    3: AMLFailure,  # hipErrorInitializationError / NotInitialized
    801: AMLNotSupported,  # hipErrorNotSupported (extension)
    712: AMLBusyError,  # hipErrorHostMemoryAlreadyRegistered (extension)
    4: AMLFailure,  # hipErrorDeinitialized: not in the table
    999: AMLFailure,  # hipErrorUnknown
    12345: AMLFailure,  # a code no HIP version has: FAILURE, never success
}


@pytest.mark.parametrize("error", list(ERRORS), ids=[str(e) for e in ERRORS])
@pytest.mark.parametrize(
    ("flags", "function"),
    [
        (F.DEFAULT, "hipMalloc"),
        (F.ALLOC_HOST, "hipHostMalloc"),
        (F.ALLOC_UNIFIED, "hipMallocManaged"),
        (F.ALLOC_MAPPED | F.ALLOC_HOST, "hipHostMalloc"),
        (F.ALLOC_MAPPED | F.ALLOC_HOST, "hipHostGetDevicePointer"),
        (F.ALLOC_MAPPED, "hipHostRegister"),
        (F.ALLOC_MAPPED, "hipHostGetDevicePointer"),
        (F.DEFAULT, "hipGetDevice"),
    ],
)
def test_mmap_error_rows(
    hip: HipDouble, areas: Callable[..., aml_hip.HipArea], flags: int, function: str, error: int
) -> None:
    area = areas(0, flags)
    options = HipMmapOptions(ptr=bytearray(4096)) if flags == F.ALLOC_MAPPED else None
    hip.inject(function, error)
    with pytest.raises(ERRORS[error]) as info:
        area.mmap(4096, options)
    assert info.value.code is ERRORS[error].code
    assert info.value.native is not None
    assert (info.value.native.function, info.value.native.code) == (function, error)
    assert area.stats.live_mappings == 0


@pytest.mark.parametrize("error", [35, 100, 101, 216, 3, 999, 12345])
def test_device_selection_error_rows(
    hip: HipDouble, areas: Callable[..., aml_hip.HipArea], error: int
) -> None:
    hip.need_devices(2)
    aml_hip.get_runtime().set_device(0)
    area = areas(1, F.DEFAULT)
    hip.inject("hipSetDevice", error)
    with pytest.raises(ERRORS[error]) as info:
        area.mmap(4096)
    assert info.value.native is not None
    assert info.value.native.function == "hipSetDevice"
    assert hip.calls("hipMalloc") == 0


@pytest.mark.parametrize("error", [1, 2, 3, 101, 999])
def test_create_fails_when_devices_cannot_be_counted(hip: HipDouble, error: int) -> None:
    hip.inject("hipGetDeviceCount", error)
    with pytest.raises(AMLFailure) as info:
        aml_hip.create(0, F.DEFAULT)
    assert info.value.code is ErrorCode.FAILURE
    assert info.value.native is not None
    assert info.value.native.code == error


#: A missing driver or device: ENOTSUP in AML's own table (docs/aml-contract.md#hip-area);
#: hipErrorNotSupported is ENOTSUP in the same table, so counting devices raises the same.
NO_DEVICE = {100: "hipErrorNoDevice", 35: "hipErrorInsufficientDriver", 801: "hipErrorNotSupported"}


@pytest.mark.parametrize("error", list(NO_DEVICE), ids=list(NO_DEVICE.values()))
@pytest.mark.parametrize(
    "entry",
    [
        lambda: aml_hip.create(0, F.DEFAULT),
        lambda: aml_hip.create(-1, F.ALLOC_UNIFIED),
        aml_hip.default_area,
        aml_hip.unified_area,
        lambda: aml_hip.virtual_memory(0),
        aml_hip.stream,
    ],
    ids=["create", "create-unified", "default_area", "unified_area", "virtual_memory", "stream"],
)
def test_missing_driver_or_device_is_one_error_everywhere(
    hip: HipDouble, error: int, entry: Callable[[], object]
) -> None:
    """create, the default areas, virtual memory and streams: the same AMLNotSupported,
    the same words, the native cause attached (aml_core.area reports the probe's reason:
    test_hip_registry)."""
    aml_hip.BACKEND.reset()
    hip.inject("hipGetDeviceCount", error, times=-1)
    with pytest.raises(AMLNotSupported) as info:
        entry()
    assert info.value.code is ErrorCode.ENOTSUP
    assert "no usable hip device: " in str(info.value)
    assert NO_DEVICE[error] in str(info.value)
    assert hip.calls("hipMalloc") == 0
    assert hip.calls("hipStreamCreateWithFlags") == 0


def test_create_device_out_of_range(hip: HipDouble) -> None:
    n = aml_hip.get_runtime().device_count()
    with pytest.raises(AMLValueError) as info:
        aml_hip.create(n, F.DEFAULT)
    assert info.value.code is ErrorCode.EINVAL
    area = aml_hip.create(-7, F.DEFAULT)  # negative: the current device
    assert area.device is not None
    assert area.device < 0
    aml_hip.destroy(area)
    aml_hip.destroy(area)  # idempotent


@pytest.mark.host_double
def test_create_without_devices_is_not_supported(hip: HipDouble) -> None:
    """No device: ENOTSUP in AML's table (AML's C create says FAILURE: the contract's
    "aml differs" note)."""
    hip.need_devices(0)
    with pytest.raises(AMLNotSupported, match=r"^no usable hip device: ") as info:
        aml_hip.create(0, F.DEFAULT)
    assert info.value.code is ErrorCode.ENOTSUP


@pytest.mark.parametrize("flags", [-1, 16, 0x100, 1 << 40])
def test_create_unknown_flags(hip: HipDouble, flags: int) -> None:
    with pytest.raises(AMLValueError):
        aml_hip.create(0, flags)


def test_create_bad_types(hip: HipDouble) -> None:
    with pytest.raises(AMLTypeError):
        aml_hip.create("0", F.DEFAULT)  # type: ignore[arg-type]
    with pytest.raises(AMLTypeError):
        aml_hip.create(0, 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("flags", "function"),
    [
        (F.DEFAULT, "hipFree"),
        (F.ALLOC_UNIFIED, "hipFree"),
        (F.ALLOC_HOST, "hipHostFree"),
        (F.ALLOC_MAPPED, "hipHostUnregister"),
    ],
)
@pytest.mark.parametrize(("error", "cls"), [(1, AMLValueError), (999, AMLFailure), (12345, AMLFailure)])
def test_munmap_error_rows(
    hip: HipDouble,
    areas: Callable[..., aml_hip.HipArea],
    flags: int,
    function: str,
    error: int,
    cls: type[AMLError],
) -> None:
    """aml_area_hip_munmap: EINVAL if the free call returned hipErrorInvalidValue; any other failure
    is raised by the same table (never reported as success). The buffer stays live, and
    a second munmap frees it."""
    area = areas(0, flags)
    options = HipMmapOptions(ptr=bytearray(4096)) if flags == F.ALLOC_MAPPED else None
    buf = area.mmap(4096, options)
    hip.inject(function, error)
    with pytest.raises(cls):
        area.munmap(buf)
    assert not buf.freed
    area.munmap(buf)
    assert buf.freed


# -- default areas and the buffer protocols --------------------------------------------------
def test_default_and_unified_areas(hip: HipDouble) -> None:
    area = aml_hip.default_area()
    assert (area.kind, area.flags, area.device) == (Kind.DEVICE, F.DEFAULT, -1)
    assert aml_hip.default_area() is area
    unified = aml_hip.unified_area()
    assert (unified.kind, unified.flags) == (Kind.MANAGED, F.ALLOC_UNIFIED)
    buf = unified.mmap(100)
    assert hip.last("hipMallocManaged")[1:] == (4096, 0x2)  # type: ignore[index]
    unified.munmap(buf)
    dev = area.mmap(100)
    area.write(dev, b"abc")
    assert area.read(dev, 3) == b"abc"
    area.munmap(dev)


def test_dlpack_devices(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    expected = {F.DEFAULT: (10, 0), F.ALLOC_HOST: (11, 0), F.ALLOC_UNIFIED: (10, 0)}  # kDLROCM, kDLROCMHost
    for flags, device in expected.items():
        area = areas(0, flags)
        buf = area.mmap(64)
        assert buf.__dlpack_device__() == device
        area.munmap(buf)


def test_capabilities(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    assert Capability.IPC in areas(0, F.DEFAULT).capabilities
    assert Capability.MANAGED in areas(0, F.ALLOC_UNIFIED).capabilities
    assert Capability.MAPPED in areas(0, F.ALLOC_MAPPED | F.ALLOC_HOST).capabilities
    assert Capability.PINNED in areas(0, F.ALLOC_HOST).capabilities


def test_hipflags_are_amls() -> None:
    assert [(name, int(f)) for name, f in HipFlags.__members__.items()] == [
        ("DEFAULT", 0),
        ("ALLOC_HOST", 1),
        ("ALLOC_UNIFIED", 2),
        ("ALLOC_MAPPED", 4),
        ("ALLOC_GLOBAL", 8),
    ]


@bad_copies
@pytest.mark.parametrize("pooled", [False, True], ids=["area", "pool"])
def test_copies_with_wrong_types_are_aml_errors(
    hip: HipDouble, call: Callable[[Any, Any], object], error: type[Exception], pooled: bool
) -> None:
    # The copies of every GPU area and pool share one check (checks.span, checks.host_bytes).
    with aml_hip.create(0, 0) as area:
        target: Any = aml_core.pool(area) if pooled else area
        refused_before_any_copy(target, call, error, lambda: hip.calls("hipMemcpy"))
        if pooled:
            target.close()


@pytest.mark.parametrize("pooled", [False, True], ids=["area", "pool"])
def test_no_dma_buf_export(hip: HipDouble, pooled: bool) -> None:
    """HIP 5.2 has no hipMemGetHandleForAddressRange: ENOTSUP naming it and aml-hsa, for
    an area's buffer and a pooled block alike (docs/dmabuf.md)."""
    with aml_hip.create(0, F.DEFAULT) as area:
        target: Any = aml_core.pool(area) if pooled else area
        buf = target.mmap(4096)
        with pytest.raises(AMLNotSupported, match=r"hipMemGetHandleForAddressRange.*aml-hsa"):
            target.export_dmabuf(buf)
        with pytest.raises(AMLNotSupported, match="hipMemGetHandleForAddressRange"):
            aml_core.export_dmabuf(buf)
        assert not buf.freed
        target.munmap(buf)
        if pooled:
            target.close()


# -- host-area options go to the host backend -------------------------------------------------------
def test_host_area_options_pass_aml_hip_over_for_the_host_backend(hip: HipDouble) -> None:
    """aml_hip's host kind is pinned host memory, which has no NUMA placement: its descriptor
    declares only ``all_devices``, so the registry passes it over for a host area with the
    host backend's options (memspace=, nodes=, policy=) and the host backend makes the area;
    an option no backend honours is AMLTypeError, from the registry and from aml_hip's own
    factory. (The NUMA lab's guide examples failed when aml_hip was installed beside them.)"""
    assert aml_core.choose("host").backend == "hip"  # without options, hip serves host memory
    with pytest.raises(AMLTypeError, match="unknown hip area options"):
        aml_hip.BACKEND.create_area(Kind.DEVICE, colour="blue")
    with pytest.raises(AMLTypeError, match=r"unknown area option\(s\) \['colour'\] of device memory"):
        aml_core.area(kind="device", colour="blue")
    with pytest.raises(AMLTypeError, match=r"hip does not honour \['memspace'\]"):
        aml_core.area(kind="host", backend="hip", memspace="highest_capacity")
    with aml_core.area(kind="host", memspace="highest_capacity") as area:
        assert type(area).__name__ == "HostArea"
        assert area.memspace is not None
        buf = area.mmap(4096)
        with memoryview(buf) as view:
            view[:4] = b"host"
            assert bytes(view[:4]) == b"host"
        area.munmap(buf)
    with aml_core.area(kind="host", all_devices=True) as pinned:  # hip's own option: hip's area
        assert pinned.backend == "hip"
