"""Bad input, table-driven: each row is the documented AML error, raised before any native
call where aml can tell, with no crash and no leak (the ``ze`` fixture checks the double's
live counters are back to zero)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import aml_ze
import pytest
from aml_ze import IpcHandle, ZeFlags
from aml_ze.runtime import IPC_HANDLE_SIZE, IPC_MAGIC
from ze_helpers import ZeDouble

from aml_core.errors import AMLDomainError, AMLError, AMLTypeError, AMLValueError, ErrorCode
from aml_core.specs import Kind

#: Stands for the machine's device count (one past the last device) in the rows below: 1 on
#: the double in host mode, the number of GPUs when it forwards to CUDA.
PAST_COUNT = object()

#: (arguments of device_area, the AML error class)
DEVICE_AREA_ROWS: list[tuple[dict[str, Any], type[AMLError]]] = [
    ({"device": PAST_COUNT}, AMLValueError),  # the device count: one past the last device
    ({"device": 8}, AMLValueError),
    ({"device": -1}, AMLValueError),
    ({"device": 1 << 40}, AMLValueError),
    ({"device": "0"}, AMLTypeError),
    ({"device": True}, AMLTypeError),
    ({"ordinal": 1}, AMLValueError),  # past the device's memory count (1)
    ({"ordinal": -1}, AMLValueError),
    ({"ordinal": 0.0}, AMLTypeError),
    ({"alignment": 0}, AMLValueError),
    ({"alignment": 3}, AMLValueError),
    ({"alignment": 48}, AMLValueError),
    ({"alignment": -64}, AMLValueError),
    ({"alignment": 1 << 64}, AMLValueError),
    ({"alignment": None}, AMLTypeError),
    ({"device_flags": 0x8}, AMLValueError),  # unknown ze_device_mem_alloc_flag_t bits
    ({"device_flags": 0x80}, AMLValueError),
    ({"device_flags": -1}, AMLValueError),
    ({"device_flags": 1 << 32}, AMLValueError),
    ({"flags": 0}, AMLValueError),  # neither DEVICE (1) nor SHARED (2)
    ({"flags": 3}, AMLValueError),
    ({"flags": 4}, AMLValueError),
]
HOST_AREA_ROWS: list[tuple[dict[str, Any], type[AMLError]]] = [
    ({"host_flags": 0x10}, AMLValueError),  # MEM_READ_ONLY is 1.17's, not 1.4's
    ({"host_flags": 0x80}, AMLValueError),
    ({"host_flags": -1}, AMLValueError),
    ({"host_flags": "1"}, AMLTypeError),
    ({"alignment": 0}, AMLValueError),
    ({"alignment": 12}, AMLValueError),
    ({"alignment": 1.5}, AMLTypeError),
]


@pytest.mark.parametrize(("arguments", "cls"), DEVICE_AREA_ROWS, ids=repr)
def test_device_area(ze: ZeDouble, arguments: dict[str, Any], cls: type[AMLError]) -> None:
    count = aml_ze.get_runtime().device_count()
    arguments = {key: count if value is PAST_COUNT else value for key, value in arguments.items()}
    with pytest.raises(cls) as info:
        aml_ze.device_area(**arguments)
    assert info.value.code in (ErrorCode.EINVAL,)
    assert info.value.native is None
    assert ze.calls("zeContextCreate") == 0


@pytest.mark.parametrize(("arguments", "cls"), HOST_AREA_ROWS, ids=repr)
def test_host_area(ze: ZeDouble, arguments: dict[str, Any], cls: type[AMLError]) -> None:
    with pytest.raises(cls) as info:
        aml_ze.host_area(**arguments)
    assert info.value.code is ErrorCode.EINVAL
    assert ze.calls("zeContextCreate") == 0


@pytest.mark.parametrize("kind", ["device", "shared", "host"])
@pytest.mark.parametrize(
    ("size", "cls"),
    [
        (0, AMLValueError),
        (-1, AMLValueError),
        (1 << 64, AMLDomainError),
        ("1", AMLTypeError),
        (1.0, AMLTypeError),
    ],
)
def test_mmap_sizes(
    ze: ZeDouble, areas: Callable[..., aml_ze.ZeArea], kind: str, size: Any, cls: type[AMLError]
) -> None:
    area = areas(kind)
    with pytest.raises(cls):
        area.mmap(size)
    assert sum(ze.calls(f) for f in ("zeMemAllocDevice", "zeMemAllocShared", "zeMemAllocHost")) == 0


@pytest.mark.host_double
def test_device_memory_budget_is_enomem(ze: ZeDouble, areas: Callable[..., aml_ze.ZeArea]) -> None:
    ze.need_devices(1, 1 << 20)
    area = areas("device")
    buf = area.mmap(1 << 19)
    with pytest.raises(MemoryError) as info:
        area.mmap(1 << 20)
    assert isinstance(info.value, AMLError)
    assert info.value.code is ErrorCode.ENOMEM
    area.munmap(buf)


@pytest.mark.parametrize(
    ("kind", "options"),
    [("device", {"host_flags": 1}), ("host", {"ordinal": 0}), ("device", {"color": 1})],
)
def test_registry_options(ze: ZeDouble, kind: str, options: dict[str, Any]) -> None:
    with pytest.raises(AMLTypeError):
        aml_ze.BACKEND.create_area(Kind(kind), None, **options)


# -- IPC -----------------------------------------------------------------------------------------
def _handle(data: bytes, **fields: Any) -> IpcHandle:
    values: dict[str, Any] = {"backend": "ze", "device": 0, "size": 4096, "data": data, "pid": os.getppid()}
    values.update(fields)
    return IpcHandle(**values)


def _ze_bytes(
    fd: int = 0, magic: bytes = IPC_MAGIC, pid: int | None = None, reserved: int = 0, device: int = 0
) -> bytes:
    import struct

    head = fd.to_bytes(4, "little", signed=True).ljust(64, b"\0")
    return head + struct.pack("<4sIII", magic, os.getppid() if pid is None else pid, device, reserved)


def _devices() -> int:
    return len(aml_ze.get_runtime().devices)


@pytest.mark.parametrize(
    ("handle", "match"),
    [
        (lambda: _handle(_ze_bytes(), backend="hip"), "exported by 'hip'"),
        (lambda: _handle(b"\0" * 64), "80 bytes"),  # a CUDA/HIP-sized handle
        (lambda: _handle(_ze_bytes(magic=b"CUDA")), "bad magic"),
        (lambda: _handle(_ze_bytes(reserved=7)), "bad magic"),
        (lambda: _handle(_ze_bytes(fd=-5)), "tampered"),
        (lambda: _handle(_ze_bytes(pid=0)), "tampered"),
        (lambda: _handle(_ze_bytes(), pid=os.getpid()), "process that exported"),
        (lambda: _handle(_ze_bytes(fd=987654, pid=os.getppid())), "no descriptor|ptrace"),
        (lambda: _handle(_ze_bytes(pid=(1 << 22) + 12345)), "gone"),
        # the exporter's device index past this process's devices: refused, not opened on
        # device 0 (it used to be), before the descriptor is duplicated
        (lambda: _handle(_ze_bytes(device=_devices())), "names device .*; this process has"),
        (lambda: _handle(_ze_bytes(device=0xFFFFFFFF)), "names device 4294967295"),
    ],
)
def test_ipc_handles(ze: ZeDouble, handle: Callable[[], IpcHandle], match: str) -> None:
    with pytest.raises(AMLError, match=match) as info:
        aml_ze.ipc_open(handle())
    assert info.value.code in (ErrorCode.EINVAL, ErrorCode.ENOTSUP)
    assert ze.calls("zeMemOpenIpcHandle") == 0
    assert IPC_HANDLE_SIZE == 80


def test_ipc_export_needs_device_memory(areas: Callable[..., aml_ze.ZeArea]) -> None:
    for kind in ("shared", "host"):
        area = areas(kind)
        buf = area.mmap(64)
        with pytest.raises(NotImplementedError):
            area.ipc_export(buf)
        area.munmap(buf)
    area = areas("device")
    with pytest.raises(AMLValueError):
        area.ipc_export(0x1000)


# -- virtual memory ---------------------------------------------------------------------------
def test_vmm_map_outside_the_reservation(ze: ZeDouble) -> None:
    with aml_ze.virtual_memory(0) as vm:
        g = vm.granularity()
        res = vm.reserve(2 * g)
        phys = vm.create(g)
        for ptr, size in ((res.ptr + 2 * g, g), (res.ptr - g, g), (res.ptr + g, 2 * g), (0x1000, g)):
            with pytest.raises(AMLValueError):
                vm.map(ptr, size, phys)
        assert ze.calls("zeVirtualMemMap") == 0
        rt = aml_ze.get_runtime()
        with pytest.raises(AMLError) as info:  # below aml's checks: the driver refuses
            rt.vmm_map(res.ptr + 4 * g, g, phys.handle, 0)
        assert info.value.native is not None
        assert info.value.native.function == "zeVirtualMemMap"
        vm.release(phys)
        vm.address_free(res)


@pytest.mark.parametrize(
    ("call", "cls"),
    [
        (lambda vm, g: vm.reserve(g + 1), AMLValueError),
        (lambda vm, g: vm.reserve(0), AMLValueError),
        (lambda vm, g: vm.create(-g), AMLValueError),
        (lambda vm, g: vm.reserve(g, alignment=3), AMLValueError),
        (lambda vm, g: vm.get_access(0x1000), AMLValueError),
        (lambda vm, g: vm.set_access(0x1000, g, 3), AMLValueError),
        (lambda vm, g: vm.release("handle"), AMLTypeError),
        (lambda vm, g: vm.import_fd(-1, g), AMLValueError),
    ],
)
def test_vmm_rows(ze: ZeDouble, call: Callable[[Any, int], Any], cls: type[AMLError]) -> None:
    with aml_ze.virtual_memory(0) as vm, pytest.raises(cls):
        call(vm, vm.granularity())


def test_virtual_memory_device_past_the_count(ze: ZeDouble) -> None:
    with pytest.raises(AMLValueError):
        aml_ze.virtual_memory(aml_ze.get_runtime().device_count())
    with pytest.raises(AMLValueError):
        aml_ze.device_area(0, flags=ZeFlags.SHARED, ordinal=3)
