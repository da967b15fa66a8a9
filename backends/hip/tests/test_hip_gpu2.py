"""Two devices (issue 13), items 1-6, on the HIP double: device selection, peer access, IPC
across devices, virtual memory shared by two devices, managed memory between them, one
pool per device. Marked ``gpu2``.

Host mode emulates two devices, so these run on the CPU in CI; forward mode
(``run_forward.sh``) runs them on two NVIDIA GPUs through CUDA and skips them on a machine
with one ("needs 2 GPUs, this machine has 1"), or without a GPU with the forward mode's
reason. The HIP double launches no kernels: device 1 reaches device 0's memory through
copies made with device 1 current (``hipMemcpy``, ``hipMemcpyPeer``).
"""

from __future__ import annotations

import base64
import ctypes
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aml_hip
import pytest
from aml_hip import Access, HipFlags, HipMmapOptions
from hip_helpers import HipDouble

import aml_core
from aml_core.errors import AMLMemoryError, AMLValueError
from tests.support.gpu2 import check_managed_memory_moves, check_one_pool_per_device

pytestmark = pytest.mark.gpu2

CHILD = Path(__file__).resolve().parent / "hip_children.py"
CPU = -1


@pytest.fixture
def two(hip: HipDouble) -> HipDouble:
    """The double with two devices (emulated, or two GPUs), the caller on device 0."""
    hip.need_devices(2)
    aml_hip.get_runtime().set_device(0)
    return hip


def pattern(seed: int, n: int) -> bytes:
    return bytes((seed + 7 * i) % 251 for i in range(n))


def child(hip: HipDouble, name: str, request: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    env = hip.env(HIPDOUBLE_DEVICES="2") if hip.mode == "host" else hip.env()
    return hip.run_child([str(CHILD), name], request, env, **kwargs)


def read_on(device: int, ptr: int, n: int) -> bytes:
    """Bytes at ``ptr`` read by a copy made with ``device`` current (the caller's back after)."""
    rt = aml_hip.get_runtime()
    caller = rt.get_device()
    rt.set_device(device)
    out = (ctypes.c_char * n)()
    try:
        rt.memcpy(ctypes.addressof(out), ptr, n)
    finally:
        rt.set_device(caller)
    return bytes(out)


def write_on(device: int, ptr: int, data: bytes) -> None:
    rt = aml_hip.get_runtime()
    caller = rt.get_device()
    rt.set_device(device)
    src = ctypes.create_string_buffer(data, len(data))
    try:
        rt.memcpy(ptr, ctypes.addressof(src), len(data))
        rt.synchronize()
    finally:
        rt.set_device(caller)


# -- 1. device selection ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags",
    [HipFlags.DEFAULT, HipFlags.ALLOC_UNIFIED, HipFlags.ALLOC_HOST],
    ids=["device", "managed", "host"],
)
def test_an_area_of_device_1_allocates_there(
    two: HipDouble, areas: Callable[..., aml_hip.HipArea], flags: HipFlags
) -> None:
    rt = aml_hip.get_runtime()
    area = areas(1, flags)
    buf = area.mmap(1 << 16)
    assert buf.device == 1
    if flags != HipFlags.ALLOC_HOST:  # pinned host memory belongs to no device
        assert rt.pointer_attributes(buf.ptr).device == 1
    assert rt.get_device() == 0
    area.write(buf, b"on device 1")
    assert area.read(buf, 11) == b"on device 1"
    area.munmap(buf)
    assert rt.get_device() == 0


def test_the_registry_area_of_device_1(two: HipDouble) -> None:
    aml_core.registry.reset()
    try:
        with aml_core.area(kind="device", device=1, backend="hip") as area:
            buf = area.mmap(4096)
            assert buf.device == 1
            assert aml_hip.get_runtime().pointer_attributes(buf.ptr).device == 1
            assert aml_hip.get_runtime().get_device() == 0
            area.munmap(buf)
    finally:
        aml_core.registry.reset()


def test_the_callers_device_comes_back_after_a_failed_mmap(
    two: HipDouble, areas: Callable[..., aml_hip.HipArea]
) -> None:
    rt = aml_hip.get_runtime()
    area = areas(1)
    if two.mode == "host":
        two.inject("hipMalloc", 2)
        size = 4096
    else:
        size = 1 << 50  # more than any GPU has: hipErrorOutOfMemory from CUDA
    with pytest.raises(AMLMemoryError):
        area.mmap(size)
    assert rt.get_device() == 0
    with pytest.raises(AMLValueError):
        area.mmap(4096, HipMmapOptions(device=2))
    assert rt.get_device() == 0
    assert area.stats.live_mappings == 0


def test_a_negative_device_is_the_current_device(
    two: HipDouble, areas: Callable[..., aml_hip.HipArea]
) -> None:
    rt = aml_hip.get_runtime()
    rt.set_device(1)
    area = areas(-1)
    buf = area.mmap(4096)
    other = areas(0).mmap(4096, HipMmapOptions(device=-1))
    assert (buf.device, other.device) == (1, 1)
    assert rt.pointer_attributes(buf.ptr).device == rt.pointer_attributes(other.ptr).device == 1
    aml_core.registry.reset()
    try:
        with aml_core.area(kind="device", backend="hip") as current:  # device None: the current one
            assert current.device == -1
            mine = current.mmap(4096)
            assert mine.device == 1
            assert rt.pointer_attributes(mine.ptr).device == 1
            current.munmap(mine)
    finally:
        aml_core.registry.reset()
    area.munmap(buf)
    other.area.munmap(other)
    rt.set_device(0)


# -- 2. peer access -----------------------------------------------------------------------------
def test_peer_access_and_a_copy_made_on_device_1(
    two: HipDouble, areas: Callable[..., aml_hip.HipArea]
) -> None:
    assert aml_hip.can_access_peer(0, 1) == aml_hip.can_access_peer(1, 0)
    if not aml_hip.can_access_peer(1, 0):
        pytest.skip("these GPUs have no peer path")
    assert aml_hip.enable_peer_access(0, device=1) is True
    assert aml_hip.enable_peer_access(0, device=1) is False
    try:
        first, second = areas(0), areas(1)
        a, b = first.mmap(1 << 20), second.mmap(1 << 20)
        data = pattern(3, 1 << 20)
        first.write(a, data)
        aml_hip.copy_peer(b, a)  # device 0's buffer read into device 1's
        assert second.read(b) == data
        # device 1 current reads device 0's buffer directly (peer access)
        assert read_on(1, a.device_ptr, 4096) == data[:4096]
        aml_hip.copy_peer(a, b, 4096, src_offset=4096)
        assert first.read(a, 4096) == data[4096:8192]
        first.munmap(a)
        second.munmap(b)
    finally:
        assert aml_hip.disable_peer_access(0, device=1) is True
    assert aml_hip.disable_peer_access(0, device=1) is False
    assert aml_hip.get_runtime().get_device() == 0


# -- 3. IPC across devices ----------------------------------------------------------------------
def test_ipc_from_device_0_opened_on_device_1(two: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    area = areas(0)
    buf = area.mmap(1 << 16)
    area.write(buf, pattern(1, 1 << 16))
    handle = area.ipc_export(buf).handle
    assert handle.device == 0
    report = child(
        two,
        "ipc-devices",
        {
            "handle": base64.b64encode(pickle.dumps(handle)).decode(),
            "device": 1,
            "read": 4096,
            "write": pattern(2, 4096).hex(),
        },
    )
    assert bytes.fromhex(report["read"]) == pattern(1, 4096)
    assert report["same_buffer"] is True
    assert report["open_calls_one_device"] == 1  # the importer's cache, per device
    assert report["second_mapping"] is True  # opened again from device 0: its own mapping
    assert report["open_calls_two_devices"] == 2
    assert bytes.fromhex(report["read_other"]) == pattern(2, 4096)
    assert report["buffer_devices"] == [0, 0]  # the exporter's device
    assert report["current_after_close"] == 1
    assert report["closed"] is True
    assert report["close_calls"] == 2
    assert report["live_ipc"] == 0
    # the exporter's allocation is intact: the reply is there, the rest untouched, and it frees
    assert area.read(buf, 4096) == pattern(2, 4096)
    assert area.read(buf, 4096, 4096) == pattern(1, 1 << 16)[4096:8192]
    area.munmap(buf)


# -- 4. virtual memory on two devices ------------------------------------------------------------
def test_one_reservation_read_and_written_by_both_devices(two: HipDouble) -> None:
    with aml_hip.virtual_memory(0) as vm:
        g = vm.granularity()
        res = vm.reserve(2 * g)
        phys = vm.create(g, exportable=True)
        vm.map(res.ptr, g, phys)
        vm.set_access(res.ptr, g, {0: Access.READWRITE, 1: Access.READWRITE})
        assert vm.get_access(res.ptr, 0) is Access.READWRITE
        assert vm.get_access(res.ptr, 1) is Access.READWRITE
        assert vm.properties(phys).location_device == 0
        write_on(0, res.ptr, pattern(4, 8192))
        assert read_on(1, res.ptr, 8192) == pattern(4, 8192)
        write_on(1, res.ptr + 4096, pattern(5, 4096))
        assert read_on(0, res.ptr, 8192) == pattern(4, 4096) + pattern(5, 4096)
        # the fd of device 0's physical memory, imported by a process current on device 1
        fd = vm.export_fd(phys)
        try:
            report = child(
                two,
                "vmm",
                {"fd": fd, "size": g, "read": 8192, "device": 1, "write": pattern(6, 64).hex()},
                pass_fds=(fd,),
            )
        finally:
            os.close(fd)
        assert "error" not in report, report
        assert bytes.fromhex(report["read"]) == pattern(4, 4096) + pattern(5, 4096)
        assert report["properties"] == [1, 0]  # pinned, on device 0
        assert read_on(0, res.ptr, 64) == pattern(6, 64)
        vm.unmap(res.ptr, g)
        vm.release(phys)
        vm.address_free(res)
    assert aml_hip.get_runtime().get_device() == 0


# -- 5. managed memory --------------------------------------------------------------------------
def free_bytes(two: HipDouble, device: int) -> int:
    lib = two.ctl.lib
    rt = aml_hip.get_runtime()
    caller = rt.get_device()
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    rt.set_device(device)
    try:
        assert lib.hipMemGetInfo(ctypes.byref(free), ctypes.byref(total)) == 0
    finally:
        rt.set_device(caller)
    return free.value


def test_managed_memory_moves_between_the_devices(
    two: HipDouble, areas: Callable[..., aml_hip.HipArea]
) -> None:
    size = 4 << 20
    if min(free_bytes(two, 0), free_bytes(two, 1)) < 4 * size:
        pytest.skip("not enough free device memory for the managed buffer")
    rt = aml_hip.get_runtime()
    check_managed_memory_moves(areas(0, HipFlags.ALLOC_UNIFIED), size, rt.synchronize, rt)


# -- 6. one pool per device ---------------------------------------------------------------------
def test_a_block_freed_on_device_0_is_never_handed_out_for_device_1(
    two: HipDouble, areas: Callable[..., aml_hip.HipArea]
) -> None:
    check_one_pool_per_device(areas(0), areas(1), areas(-1), aml_hip.get_runtime())
