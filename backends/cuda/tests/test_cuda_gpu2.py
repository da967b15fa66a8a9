"""Two GPUs (issue 13), items 1-6, on real CUDA: device selection, peer access, IPC across
devices, virtual memory shared by two devices, managed memory between them, one pool per
device. Marked ``gpu2``: without a GPU they skip with the probe's reason, on one GPU with
"needs 2 GPUs, this machine has 1" (conftest.py).

Kernels come from CuPy (``cupy.RawKernel`` on raw addresses, so CuPy neither checks nor
enables peer access behind aml's back); where CuPy is missing, those parts skip and the
copies (``cudaMemcpy`` with a device current, ``cudaMemcpyPeer``) still run.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import aml_cuda
import pytest
from aml_cuda import Access, CudaFlags
from cuda_children import pattern, read_device, write_device
from cuda_helpers import HERE, child_env

import aml_core
from aml_core.errors import AMLMemoryError, AMLValueError
from tests.support.gpu2 import check_managed_memory_moves, check_one_pool_per_device

pytestmark = pytest.mark.gpu2

CHILD = os.path.join(HERE, "cuda_children.py")
CPU = -1
_ADD_ONE = r"""
extern "C" __global__ void add_one(const unsigned char* src, unsigned char* dst, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = (unsigned char)(src[i] + 1);
}
"""


@pytest.fixture
def rt() -> Iterator[Any]:
    """The CUDA runtime, the caller on device 0 (and back on it after the test)."""
    runtime = aml_cuda.get_runtime()
    runtime.set_device(0)
    yield runtime
    runtime.set_device(0)


def add_one_on(cupy: Any, device: int, src: int, dst: int, n: int) -> None:
    """A kernel on ``device``: ``dst[i] = src[i] + 1`` over raw addresses, waited for."""
    import numpy as np

    with cupy.cuda.Device(device):
        kernel = cupy.RawKernel(_ADD_ONE, "add_one")
        kernel(((n + 255) // 256,), (256,), (np.uint64(src), np.uint64(dst), np.uint64(n)))
        cupy.cuda.Device(device).synchronize()


def plus_one(data: bytes) -> bytes:
    return bytes((b + 1) & 0xFF for b in data)


def on_device(rt: Any, device: int, fn: Any, *args: Any) -> Any:
    caller = rt.get_device()
    rt.set_device(device)
    try:
        return fn(rt, *args)
    finally:
        rt.set_device(caller)


def run_child(*args: str, pass_fds: tuple[int, ...] = ()) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, CHILD, *args],
        check=False,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
        pass_fds=pass_fds,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- 1. device selection ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags",
    [CudaFlags.DEFAULT, CudaFlags.ALLOC_UNIFIED, CudaFlags.ALLOC_HOST],
    ids=["device", "managed", "host"],
)
def test_an_area_of_device_1_allocates_there(rt: Any, flags: CudaFlags) -> None:
    with aml_cuda.create(1, flags) as area:
        buf = area.mmap(1 << 20)
        assert buf.device == 1
        if flags == CudaFlags.DEFAULT:
            assert rt.pointer_attributes(buf.ptr).device == 1
            assert buf.__dlpack_device__() == (2, 1)
        assert rt.get_device() == 0
        area.write(buf, pattern(1, 1 << 20))
        assert area.read(buf) == pattern(1, 1 << 20)
        area.munmap(buf)
        assert rt.get_device() == 0


def test_the_registry_area_of_device_1(rt: Any) -> None:
    aml_core.registry.reset()
    with aml_core.area(kind="device", device=1, backend="cuda") as area:
        buf = area.mmap(4096)
        assert buf.device == 1
        assert rt.pointer_attributes(buf.ptr).device == 1
        assert rt.get_device() == 0
        area.munmap(buf)


def test_the_callers_device_comes_back_after_a_failed_mmap(rt: Any) -> None:
    rt.set_device(1)
    _free, total = rt.memory_info()
    rt.set_device(0)
    with aml_cuda.create(1) as area:
        with pytest.raises(AMLMemoryError) as info:
            area.mmap(2 * total)
        assert info.value.native is not None
        assert info.value.native.function == "cudaMalloc"
        assert rt.get_device() == 0
        with pytest.raises(AMLValueError):
            area.mmap(4096, {"device": rt.device_count()})
        assert rt.get_device() == 0
        buf = area.mmap(4096)  # the runtime's error state was cleared
        assert buf.device == 1
        area.munmap(buf)


def test_a_negative_device_is_the_current_device(rt: Any) -> None:
    rt.set_device(1)
    with aml_cuda.create(-1) as area, aml_cuda.create(0) as fixed:
        buf = area.mmap(4096)
        other = fixed.mmap(4096, {"device": -1})
        assert (buf.device, other.device) == (1, 1)
        assert rt.pointer_attributes(buf.ptr).device == 1
        assert rt.pointer_attributes(other.ptr).device == 1
        area.munmap(buf)
        fixed.munmap(other)
    aml_core.registry.reset()
    with aml_core.area(kind="device", backend="cuda") as current:
        assert current.device == -1
        mine = current.mmap(4096)
        assert mine.device == 1
        assert rt.pointer_attributes(mine.ptr).device == 1
        current.munmap(mine)
    assert rt.get_device() == 1


# -- 2. peer access -----------------------------------------------------------------------------
@pytest.fixture
def peers(rt: Any) -> Iterator[None]:
    """Peer access 1 -> 0 and 0 -> 1 possible; disabled again after the test."""
    if not (aml_cuda.can_access_peer(0, 1) and aml_cuda.can_access_peer(1, 0)):
        pytest.skip("these GPUs have no peer path")
    yield
    for device, peer in ((0, 1), (1, 0)):
        aml_cuda.disable_peer_access(peer, device)


def test_enable_and_disable_are_idempotent(rt: Any, peers: None) -> None:
    aml_cuda.disable_peer_access(0, device=1)  # whatever an earlier user left
    assert aml_cuda.enable_peer_access(0, device=1) is True
    assert aml_cuda.enable_peer_access(0, device=1) is False  # already: an answer, no error
    assert rt.get_device() == 0
    from cuda.bindings import runtime as rt_

    (err,) = rt_.cudaGetLastError()
    assert int(err) == 0  # the "already enabled" error was cleared
    assert aml_cuda.disable_peer_access(0, device=1) is True
    assert aml_cuda.disable_peer_access(0, device=1) is False
    rt.set_device(1)
    assert aml_cuda.enable_peer_access(0) is True  # the current device, 1
    assert rt.get_device() == 1


def test_a_kernel_on_gpu_1_reads_gpu_0(rt: Any, peers: None, cupy: Any) -> None:
    n = 1 << 20
    with aml_cuda.create(0) as first, aml_cuda.create(1) as second:
        a, b = first.mmap(n), second.mmap(n)
        first.write(a, pattern(2, n))
        assert aml_cuda.enable_peer_access(0, device=1) is True
        add_one_on(cupy, 1, a.ptr, b.ptr, n)  # GPU 1 reads GPU 0's buffer directly
        assert second.read(b) == plus_one(pattern(2, n))
        first.munmap(a)
        second.munmap(b)


def test_copy_peer_and_the_raw_call(rt: Any) -> None:
    """cudaMemcpyPeer needs no peer access (CUDA stages it): aml's copy_peer and the raw
    call move the same bytes."""
    from cuda.bindings import runtime as rt_

    n = (4 << 20) + 100
    with aml_cuda.create(0) as first, aml_cuda.create(1) as second:
        a, b = first.mmap(n), second.mmap(n)
        first.write(a, pattern(3, n))
        aml_cuda.copy_peer(b, a)
        assert second.read(b) == pattern(3, n)
        second.write(b, pattern(4, 4096), 100)
        aml_cuda.copy_peer(a, b, 4096, dst_offset=8, src_offset=100)
        assert first.read(a, 4096, 8) == pattern(4, 4096)
        (err,) = rt_.cudaMemcpyPeer(b.ptr, 1, a.ptr, 0, n)
        assert int(err) == 0
        (err,) = rt_.cudaDeviceSynchronize()
        assert second.read(b, 4096, 8) == pattern(4, 4096)
        assert rt.get_device() == 0
        first.munmap(a)
        second.munmap(b)


# -- 3. IPC across devices ----------------------------------------------------------------------
def test_ipc_from_gpu_0_opened_on_gpu_1(rt: Any) -> None:
    size = (2 << 20) + 100
    with aml_cuda.create(0) as area:
        buf = area.mmap(size)
        area.write(buf, pattern(5, size))
        handle = area.ipc_export(buf).handle
        assert handle.device == 0
        got = run_child("ipc-devices", pickle.dumps(handle).hex(), "1", "5", "6")
        assert got["ok"], "the importer on GPU 1 did not read GPU 0's bytes"
        assert got["same_buffer"], "a second open on the same device was not cached"
        assert got["second_mapping"], "opening on GPU 0 too should map it in GPU 0's context"
        assert got["reply_through_second"]
        assert got["devices"] == [0, 0]
        assert got["current_after_close"] == 1
        assert got["closed"]
        n = min(size, 1 << 20)
        assert area.read(buf, n) == pattern(6, n), "the exporter does not see the reply"
        assert area.read(buf, size - n, n) == pattern(5, size)[n:], "bytes past the reply changed"
        area.munmap(buf)  # the allocation is intact: it frees normally


# -- 4. virtual memory on two devices ------------------------------------------------------------
def test_one_reservation_used_by_both_gpus(rt: Any, cupy: Any) -> None:
    with aml_cuda.virtual_memory(0) as vm:
        g = vm.granularity()
        res = vm.reserve(2 * g)
        phys = vm.create(g, exportable=True)
        vm.map(res.ptr, g, phys)
        vm.set_access(res.ptr, g, {0: Access.READWRITE, 1: Access.READWRITE})
        assert vm.get_access(res.ptr, 0) is Access.READWRITE
        assert vm.get_access(res.ptr, 1) is Access.READWRITE
        half = g // 2
        write_device(rt, res.ptr, pattern(7, half))
        add_one_on(cupy, 1, res.ptr, res.ptr + half, half)  # GPU 1 reads and writes it
        add_one_on(cupy, 0, res.ptr + half, res.ptr, half)  # GPU 0 reads GPU 1's result
        assert read_device(rt, res.ptr, half) == plus_one(plus_one(pattern(7, half)))
        assert on_device(rt, 1, read_device, res.ptr + half, 64) == plus_one(pattern(7, 64))
        vm.unmap(res.ptr, g)
        vm.release(phys)
        vm.address_free(res)


def test_an_fd_of_gpu_0_memory_imported_on_gpu_1(rt: Any) -> None:
    with aml_cuda.virtual_memory(0) as vm:
        g = vm.granularity()
        phys = vm.create(g, exportable=True)
        res = vm.reserve(g)
        vm.map(res.ptr, g, phys)
        vm.set_access(res.ptr, g, Access.READWRITE)
        write_device(rt, res.ptr, pattern(8, g))
        fd = vm.export_fd(phys)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = subprocess.Popen(
                [sys.executable, CHILD, "vmm", str(child.fileno())],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
                pass_fds=(child.fileno(),),
            )
            child.close()
            msg = json.dumps({"size": g, "seed": 8, "reply_seed": 9, "device": 1}).encode()
            socket.send_fds(parent, [msg], [fd])
            os.close(fd)
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err[-4000:]
            assert parent.recv(16) == b"done"
        finally:
            parent.close()
        got = json.loads(out.strip().splitlines()[-1])
        assert got["ok"], "the process on GPU 1 did not read GPU 0's bytes"
        assert got["location_device"] == 0
        assert read_device(rt, res.ptr, g) == pattern(9, g), "GPU 0 does not see the reply"
        vm.unmap(res.ptr, g)
        vm.release(phys)
        vm.address_free(res)


# -- 5. managed memory --------------------------------------------------------------------------
def test_managed_memory_moves_between_the_gpus(rt: Any) -> None:
    size = 64 << 20
    for device in (0, 1):
        free, _total = on_device(rt, device, lambda r: r.memory_info())
        if free < 4 * size:
            pytest.skip(f"GPU {device} has {free} bytes free, not enough for {size} of managed memory")
    with aml_cuda.create(0, CudaFlags.ALLOC_UNIFIED) as area:

        def synchronize() -> None:
            on_device(rt, 0, lambda r: r.synchronize())
            on_device(rt, 1, lambda r: r.synchronize())

        check_managed_memory_moves(area, size, synchronize, rt)


# -- 6. one pool per device ---------------------------------------------------------------------
def test_a_block_freed_on_gpu_0_is_never_handed_out_for_gpu_1(rt: Any) -> None:
    with aml_cuda.create(0) as area0, aml_cuda.create(1) as area1:
        check_one_pool_per_device(area0, area1, aml_cuda.default_area(), rt)
