"""Capability groups (aml_core.gpu.runtime) and the checks written once (aml_core.checks).

A runtime here is a small recording class over host memory: each test states what the
group's public method lets through to the native operation, and what it refuses before.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

from aml_core import checks
from aml_core.buffer import DLDeviceType
from aml_core.errors import AMLDomainError, AMLNotSupported, AMLTypeError, AMLValueError, ErrorTable
from aml_core.gpu import GpuArea, GpuFlags, Group, VirtualMemory
from aml_core.gpu.plugin import GPU_CAPABILITIES, GPU_INTERFACES
from aml_core.gpu.runtime import (
    AllocationOps,
    AllocationProperties,
    IpcOps,
    PointerAttributes,
    Runtime,
    RuntimeTraits,
    VirtualMemoryOps,
    capabilities,
    device_capabilities,
)
from aml_core.specs import Capability, DeviceInfo, Kind

TRAITS = RuntimeTraits(
    name="fake", dl_device=DLDeviceType.CUDA, dl_host=DLDeviceType.CUDA_HOST, dl_managed=DLDeviceType.CUDA
)


class HostAllocation(Runtime, AllocationOps):
    """Devices and the ALLOCATION group over ctypes host memory, recording native calls."""

    def __init__(self) -> None:
        self.traits = TRAITS
        self.errors = ErrorTable("fake", {})
        self.calls: list[str] = []
        self._blocks: dict[int, ctypes.Array[ctypes.c_char]] = {}

    def device_count(self) -> int:
        return 1

    def get_device(self) -> int:
        return 0

    def synchronize(self) -> None:
        self.calls.append("synchronize")

    def _set_device(self, device: int) -> None:
        self.calls.append("set_device")

    def _device_info(self, device: int) -> DeviceInfo:
        return DeviceInfo(
            index=device, name="fake", capabilities=capabilities(self.groups(), TRAITS.interfaces)
        )

    def _alloc(self, size: int) -> int:
        block = ctypes.create_string_buffer(size)
        ptr = ctypes.addressof(block)
        self._blocks[ptr] = block
        return ptr

    def _malloc(self, size: int) -> int:
        self.calls.append("malloc")
        return self._alloc(size)

    def _free(self, ptr: int) -> None:
        self.calls.append("free")
        del self._blocks[ptr]

    def _host_alloc(self, size: int, portable: bool, mapped: bool) -> int:
        self.calls.append("host_alloc")
        return self._alloc(size)

    def _free_host(self, ptr: int) -> None:
        self.calls.append("free_host")
        del self._blocks[ptr]

    def _host_register(self, ptr: int, size: int, portable: bool, mapped: bool) -> None:
        self.calls.append("host_register")

    def _host_unregister(self, ptr: int) -> None:
        self.calls.append("host_unregister")

    def _host_device_pointer(self, ptr: int) -> int:
        return ptr

    def _pointer_attributes(self, ptr: int) -> PointerAttributes:
        return PointerAttributes("host", 0, ptr, ptr, False)

    def _memcpy(self, dst: int, src: int, size: int) -> None:
        self.calls.append("memcpy")
        ctypes.memmove(dst, src, size)

    def _memset(self, ptr: int, value: int, size: int) -> None:
        ctypes.memset(ptr, value, size)


class WithoutVmmLibrary(HostAllocation, VirtualMemoryOps):
    """A runtime whose class has the VIRTUAL_MEMORY group but whose library does not."""

    def missing_groups(self) -> Mapping[Group, str]:
        return {Group.VIRTUAL_MEMORY: "libfake.so.1 does not export fakeMemCreate"}

    def _never(self, *args: Any) -> Any:
        raise AssertionError("a missing group's operation was called")

    _vmm_granularity = _vmm_reserve = _vmm_address_free = _vmm_create = _vmm_release = _never  # type: ignore[assignment]
    _vmm_map = _vmm_unmap = _vmm_set_access = _vmm_get_access = _vmm_export_fd = _never  # type: ignore[assignment]
    _vmm_import_fd = _vmm_retain = _never  # type: ignore[assignment]

    def _vmm_properties(self, handle: int) -> AllocationProperties:
        return self._never(handle)  # type: ignore[no-any-return]


# -- groups ----------------------------------------------------------------------------------------
def test_groups_follow_the_classes_a_runtime_derives_from() -> None:
    rt = HostAllocation()
    assert rt.groups() == frozenset({Group.ALLOCATION})
    assert rt.require(Group.ALLOCATION) is rt
    with pytest.raises(AMLNotSupported, match="fake has no ipc operations"):
        rt.require(Group.IPC)
    assert rt.why_missing(Group.MANAGED) == "fake has no managed operations"


def test_a_group_is_provided_wholly_or_not_at_all() -> None:
    class HalfIpc(HostAllocation, IpcOps):
        def _ipc_get_handle(self, ptr: int, size: int) -> bytes:
            return b"\0" * 64

    with pytest.raises(TypeError, match="_ipc_close_handle"):
        HalfIpc()  # type: ignore[abstract]


def test_a_group_the_library_lacks_is_absent_with_the_reason() -> None:
    rt = WithoutVmmLibrary()
    assert Group.VIRTUAL_MEMORY not in rt.groups()
    with pytest.raises(AMLNotSupported, match="does not export fakeMemCreate"):
        rt.require(Group.VIRTUAL_MEMORY)
    with pytest.raises(AMLNotSupported, match="does not export fakeMemCreate"):
        VirtualMemory(rt, 0)
    assert Capability.VIRTUAL_MEMORY not in rt.device_info(0).capabilities


def test_capabilities_are_derived_from_groups() -> None:
    assert capabilities([], GPU_INTERFACES) == GPU_INTERFACES
    assert capabilities([Group.ALLOCATION], Capability.DLPACK) == (
        Capability.DLPACK | Capability.PINNED | Capability.MAPPED | Capability.BUFFER_PROTOCOL
    )
    assert capabilities(Group, GPU_INTERFACES) == GPU_CAPABILITIES
    assert Capability.IPC in GPU_CAPABILITIES
    assert Capability.VIRTUAL_MEMORY in GPU_CAPABILITIES


def test_device_capabilities_narrow_the_groups() -> None:
    rt = HostAllocation()
    caps = device_capabilities(rt, managed=True, concurrent=True, pageable=True, vmm=True)
    # The runtime has no MANAGED group: a device that says it could cannot add it.
    assert Capability.MANAGED not in caps
    assert Capability.CONCURRENT_MANAGED_ACCESS not in caps
    assert Capability.PAGEABLE_ACCESS in caps
    assert Capability.PINNED in caps


# -- the group fronts check before the native operation --------------------------------------------
BAD: list[tuple[Callable[[HostAllocation], object], type[Exception]]] = [
    (lambda rt: rt.malloc(0), AMLValueError),
    (lambda rt: rt.malloc(-1), AMLValueError),
    (lambda rt: rt.malloc(1 << 63), AMLDomainError),  # the one size rule: past 2**63 - 1 is EDOM
    (lambda rt: rt.malloc(1 << 64), AMLDomainError),
    (lambda rt: rt.malloc("16"), AMLTypeError),  # type: ignore[arg-type]
    (lambda rt: rt.malloc(True), AMLTypeError),
    (lambda rt: rt.free(0), AMLValueError),
    (lambda rt: rt.free(-8), AMLValueError),
    (lambda rt: rt.free(1.5), AMLTypeError),  # type: ignore[arg-type]
    (lambda rt: rt.memset(4096, 256, 1), AMLValueError),
    (lambda rt: rt.memcpy(0, 4096, 1), AMLValueError),
    (lambda rt: rt.set_device(-1), AMLValueError),
    (lambda rt: rt.set_device(1 << 40), AMLValueError),
    (lambda rt: rt.device_info(-1), AMLValueError),
]


@pytest.mark.parametrize(("call", "error"), BAD)
def test_bad_values_never_reach_the_native_operation(
    call: Callable[[HostAllocation], object], error: type[Exception]
) -> None:
    rt = HostAllocation()
    with pytest.raises(error):
        call(rt)
    assert rt.calls == []


def test_numpy_integers_are_ints() -> None:
    rt = HostAllocation()
    ptr = rt.malloc(np.int64(64))  # type: ignore[arg-type]
    rt.memset(ptr, np.uint8(7), 64)  # type: ignore[arg-type]
    assert ctypes.string_at(ptr, 4) == b"\7" * 4
    rt.free(ptr)
    assert rt.calls == ["malloc", "free"]


def test_gpu_area_over_a_runtime_with_allocation_only() -> None:
    rt = HostAllocation()
    with GpuArea(rt, 0, GpuFlags.DEFAULT) as area:
        assert area.kind is Kind.DEVICE
        assert Capability.IPC not in area.capabilities  # the runtime has no IPC group
        buf = area.mmap(64)
        area.write(buf, b"aml!")
        assert area.read(buf, 4) == b"aml!"
        area.munmap(buf)
    assert rt.calls.count("malloc") == rt.calls.count("free") == 1
    with pytest.raises(AMLNotSupported, match="fake has no managed operations"):
        GpuArea(rt, 0, GpuFlags.ALLOC_UNIFIED)
    with GpuArea(rt, 0, GpuFlags.ALLOC_HOST) as host:
        buf = host.mmap(16)
        memoryview(buf)[:2] = b"ok"
        assert host.read(buf, 2) == b"ok"


# -- aml_core.checks ---------------------------------------------------------------------------
class Index:
    def __init__(self, value: object) -> None:
        self.value = value

    def __index__(self) -> int:
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (True, AMLTypeError),
        (1.0, AMLTypeError),
        ("1", AMLTypeError),
        (None, AMLTypeError),
        (Index(RuntimeError("boom")), AMLTypeError),
        (Index("1"), AMLTypeError),
    ],
)
def test_integer_refuses_what_is_not_an_int(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        checks.integer(value, "x")


def test_integer_takes_index_objects() -> None:
    assert checks.integer(Index(5), "x") == 5
    assert checks.integer(np.uint16(9), "x") == 9


@pytest.mark.parametrize(
    ("call", "ok"),
    [
        (lambda: checks.c_int(2**31 - 1, "x"), True),
        (lambda: checks.c_int(2**31, "x"), False),
        (lambda: checks.c_int(-(2**31), "x"), True),
        (lambda: checks.pointer(0, null=True), True),
        (lambda: checks.pointer(0), False),
        (lambda: checks.pointer(2**64 - 1), True),
        (lambda: checks.pointer(2**64), False),
        (lambda: checks.size(0, zero=True), True),
        (lambda: checks.size(0), False),
        (lambda: checks.device(-1, host=-1), True),
        (lambda: checks.device(-2, host=-1), False),
        (lambda: checks.device(-1), False),
        (lambda: checks.fd(0), True),
        (lambda: checks.fd(-1), False),
        (lambda: checks.fd(2**40), False),
        (lambda: checks.byte(255), True),
        (lambda: checks.byte(256), False),
        (lambda: checks.member(3, {1, 3}, "access"), True),
        (lambda: checks.member(2, {1, 3}, "access"), False),
        (lambda: checks.handle_bytes(b"x" * 64, 64), True),
        (lambda: checks.handle_bytes(bytearray(63), 64), False),
    ],
)
def test_ranges(call: Callable[[], object], ok: bool) -> None:
    if ok:
        call()
    else:
        with pytest.raises(AMLValueError):
            call()


def test_handle_bytes_type() -> None:
    with pytest.raises(AMLTypeError, match="64 bytes, not str"):
        checks.handle_bytes("x" * 64, 64)
    assert checks.handle_bytes(memoryview(b"y" * 8), 8) == b"y" * 8


class _Ranges:
    """Just what IpcOps.ipc_mapped_size reads: a name and the native range query."""

    def __init__(self, answer: tuple[int, int] | None) -> None:
        self.answer = answer
        self.traits = type("Traits", (), {"name": "fake"})()

    def _ipc_address_range(self, ptr: int) -> tuple[int, int] | None:
        return self.answer


@pytest.mark.parametrize(
    ("answer", "expected"),
    [(None, None), ((0x1000, 0x4000), 0x4000)],
    ids=["unknown", "at-the-base"],
)
def test_ipc_mapped_size_from_the_range(answer: tuple[int, int] | None, expected: int | None) -> None:
    from aml_core.gpu.runtime import IpcOps

    assert IpcOps.ipc_mapped_size(_Ranges(answer), 0x1000) == expected  # type: ignore[arg-type]
    if answer is not None:  # a block inside the allocation: the bytes to its end
        assert IpcOps.ipc_mapped_size(_Ranges(answer), 0x2000) == 0x3000  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "answer",
    [(0, 0x4000), (0x2000, 0x4000), (0x1000, 0), (0x800, 0x800)],
    ids=["null-base", "base-past-ptr", "empty", "ends-before-ptr"],
)
def test_an_impossible_range_is_a_failure(answer: tuple[int, int]) -> None:
    from aml_core.errors import AMLFailure
    from aml_core.gpu.runtime import IpcOps

    with pytest.raises(AMLFailure, match="fake: the address range query reported success"):
        IpcOps.ipc_mapped_size(_Ranges(answer), 0x1000)  # type: ignore[arg-type]
