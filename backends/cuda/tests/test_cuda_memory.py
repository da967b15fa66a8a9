"""Every flag combination on a real GPU: what the runtime says of the pointer, data
written on one side and read on the other, zero-copy interop with NumPy, CuPy and
PyTorch, and the error paths (device OOM, invalid device, foreign pointers)."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import aml_cuda
import pytest
from cuda_flagsets import ALL_FLAGS, KIND_OF_MODE, flag_name, make_area, mode
from cuda_helpers import child_env

import aml_core
from aml_core.errors import AMLMemoryError, AMLNotSupported, AMLTypeError, AMLValueError, ErrorCode
from aml_core.gpu import GpuFlags

pytestmark = pytest.mark.gpu

SIZE = (1 << 20) + 12  # not a multiple of anything


@pytest.fixture(params=ALL_FLAGS, ids=flag_name)
def flags(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def area(flags: int) -> Iterator[Any]:
    area = make_area(flags)
    yield area
    area.close()


# -- pointer attributes -------------------------------------------------------------------------
def test_pointer_attributes(flags: int, area: Any, rt: Any) -> None:
    buf = area.mmap(SIZE)
    m = mode(flags)
    assert buf.kind is KIND_OF_MODE[m]
    attrs = rt.pointer_attributes(buf.ptr)
    assert attrs == aml_cuda.pointer_attributes(buf)
    if m == "device":
        assert attrs.memory_type == "device"
        assert attrs.device == 0
        assert not attrs.is_managed
        assert attrs.device_pointer == buf.ptr
        assert not buf.host_accessible
        assert buf.__dlpack_device__() == (2, 0)
    elif m == "managed":
        assert attrs.memory_type == "managed"
        assert attrs.is_managed
        assert attrs.device_pointer == buf.ptr
        assert buf.host_accessible
        assert buf.__dlpack_device__() == (13, 0)
    else:  # pinned, mapped or registered host memory
        assert attrs.memory_type == "host"
        assert not attrs.is_managed
        assert attrs.host_pointer == buf.ptr
        assert buf.host_accessible
        assert buf.__dlpack_device__() == (3, 0)
        if m in ("host_mapped", "registered"):
            # The device pointer of mapped memory is what cudaHostGetDevicePointer gave.
            assert buf.device_ptr == rt.host_device_pointer(buf.ptr)
            assert attrs.device_pointer == buf.device_ptr
    assert buf.__cuda_array_interface__["data"] == (buf.device_ptr, False)
    area.munmap(buf)


def test_registered_memory_is_the_callers(rt: Any) -> None:
    """ALLOC_MAPPED without ALLOC_HOST maps options.ptr: the caller's bytes."""
    host = bytearray(os.urandom(1 << 16))
    with aml_cuda.create(0, GpuFlags.ALLOC_MAPPED) as area:
        buf = area.mmap(len(host), {"ptr": host})
        addr = ctypes.addressof((ctypes.c_char * len(host)).from_buffer(host))
        assert buf.ptr == addr
        assert rt.pointer_attributes(buf.ptr).memory_type == "host"
        assert area.read(buf) == bytes(host)
        with pytest.raises(AMLValueError, match=r"options\.ptr"):
            area.mmap(4096)
        with pytest.raises(AMLValueError, match="fewer"):
            area.mmap(len(host) + 1, {"ptr": bytearray(16)})
        with pytest.raises(AMLValueError, match="read-only"):
            area.mmap(4, {"ptr": b"abcd"})
        area.munmap(buf)


# -- data both ways -------------------------------------------------------------------------------
def _pattern(n: int) -> bytes:
    block = os.urandom(4096)
    return (block * -(-n // 4096))[:n]


def test_host_writes_device_reads_and_back(flags: int, area: Any, cupy: Any) -> None:
    """Host writes (memoryview/NumPy, or cudaMemcpy for device memory), a CuPy kernel
    reads; a CuPy kernel writes, the host reads."""
    np = pytest.importorskip("numpy")
    buf = area.mmap(SIZE)
    data = _pattern(SIZE)
    if buf.host_accessible:
        host = np.frombuffer(buf, dtype=np.uint8)
        host[:] = np.frombuffer(data, dtype=np.uint8)
    else:
        area.write(buf, data)
    dev = cupy.asarray(buf)  # __cuda_array_interface__: no copy
    assert dev.data.ptr == buf.device_ptr
    expected = np.frombuffer(data, dtype=np.uint8)
    # A kernel reads every byte: sum and checksum against the host's.
    assert int(dev.astype(cupy.uint64).sum()) == int(expected.astype(np.uint64).sum())
    assert np.array_equal(cupy.asnumpy(dev), expected)
    # A kernel writes every byte; the host reads them.
    dev[:] = (cupy.arange(SIZE, dtype=cupy.uint64) * 7 % 251).astype(cupy.uint8)
    cupy.cuda.runtime.deviceSynchronize()
    want = (np.arange(SIZE, dtype=np.uint64) * 7 % 251).astype(np.uint8)
    if buf.host_accessible:
        assert np.array_equal(host, want)
        del host
    assert area.read(buf) == want.tobytes()
    del dev
    area.munmap(buf)


def test_copies_between_areas(rt: Any) -> None:
    """cudaMemcpy between every pair of kinds, through buffers' device pointers."""
    sizes = 3 << 20
    areas = [make_area(f) for f in (0, 1, 2, 5, 4)]
    try:
        bufs = [a.mmap(sizes) for a in areas]
        data = _pattern(sizes)
        areas[0].write(bufs[0], data)
        for src, dst in zip(bufs, bufs[1:] + bufs[:1], strict=True):
            rt.memcpy(dst.device_ptr, src.device_ptr, sizes)
        assert areas[0].read(bufs[0]) == data
        for a, b in zip(areas, bufs, strict=True):
            assert a.read(b) == data
    finally:
        for a in areas:
            a.close()


# -- zero-copy interop -----------------------------------------------------------------------------
def test_cupy_from_dlpack(flags: int, area: Any, cupy: Any) -> None:
    buf = area.mmap(SIZE)
    kind = buf.__dlpack_device__()[0]
    try:
        arr = cupy.from_dlpack(buf)
    except Exception as exc:
        area.munmap(buf)
        if kind == 3:
            pytest.skip(f"CuPy does not import kDLCUDAHost DLPack tensors: {exc}")
        raise
    assert arr.data.ptr == buf.device_ptr
    assert arr.shape == (SIZE,)
    arr[:16] = 9
    cupy.cuda.runtime.deviceSynchronize()
    assert area.read(buf, 16) == b"\x09" * 16
    assert buf.exports >= 1
    del arr
    area.munmap(buf)


def test_torch_from_dlpack(flags: int, area: Any, torch: Any) -> None:
    buf = area.mmap(SIZE)
    kind = buf.__dlpack_device__()[0]
    refused = ""
    try:
        t = torch.from_dlpack(buf)
    except (BufferError, RuntimeError) as exc:
        if kind == 2:
            raise
        refused = str(exc)
    if refused:
        # PyTorch 2.11 imports kDLCUDA (2) only; the refused capsule (kept alive by
        # the traceback until now) must give the buffer back.
        gc.collect()
        assert buf.exports == 0
        area.munmap(buf)
        pytest.skip(f"PyTorch does not import DLPack device type {kind}: {refused}")
    assert t.data_ptr() == buf.device_ptr
    assert t.numel() == SIZE
    t[:8] = 5
    torch.cuda.synchronize()
    assert area.read(buf, 8) == b"\x05" * 8
    area.write(buf, b"\x07" * 8)
    assert t[:8].tolist() == [7] * 8
    del t
    area.munmap(buf)


def test_numpy_zero_copy(flags: int, area: Any) -> None:
    np = pytest.importorskip("numpy")
    buf = area.mmap(SIZE)
    if not buf.host_accessible:
        with pytest.raises((BufferError, TypeError)):
            memoryview(buf)
        area.munmap(buf)
        return
    a = np.frombuffer(buf, dtype=np.uint8)
    b = np.from_dlpack(buf)
    assert a.ctypes.data == b.ctypes.data == buf.ptr
    a[:4] = [1, 2, 3, 4]
    assert bytes(b[:4]) == b"\x01\x02\x03\x04"
    assert area.read(buf, 4) == b"\x01\x02\x03\x04"
    del a, b
    area.munmap(buf)


# -- error paths ---------------------------------------------------------------------------------
def test_device_oom_is_memory_error_and_device_is_restored(rt: Any) -> None:
    """Ask for more device memory than the card has (device memory only: managed
    memory is never over-subscribed)."""
    _free, total = rt.memory_info()
    before = rt.get_device()
    with aml_cuda.create(0, GpuFlags.DEFAULT) as area:
        with pytest.raises(AMLMemoryError) as info:
            area.mmap(2 * total)
        assert isinstance(info.value, MemoryError)
        assert info.value.code is ErrorCode.ENOMEM
        assert info.value.native is not None
        assert info.value.native.function == "cudaMalloc"
        assert info.value.native.name == "cudaErrorMemoryAllocation"
        assert rt.get_device() == before
        assert area.stats.live_mappings == 0
        # With the device given per mmap, the same.
        with pytest.raises(MemoryError):
            area.mmap(2 * total, {"device": 0})
        assert rt.get_device() == before
        # The runtime's error state was cleared: the next allocation works.
        buf = area.mmap(4096)
        area.munmap(buf)


def test_invalid_device_is_einval(rt: Any) -> None:
    count = rt.device_count()
    with pytest.raises(AMLValueError) as info:
        aml_cuda.create(count, 0)
    assert info.value.code is ErrorCode.EINVAL
    with aml_cuda.create(0, 0) as area:
        with pytest.raises(AMLValueError):
            area.mmap(4096, {"device": count})
        with pytest.raises(AMLTypeError):
            area.mmap(4096, {"device": "0"})
    with pytest.raises(AMLValueError):
        aml_cuda.virtual_memory(count)
    with pytest.raises(AMLValueError) as native:
        rt.set_device(count + 5)
    assert native.value.native is not None
    assert native.value.native.name == "cudaErrorInvalidDevice"


def test_foreign_pointers(area: Any, rt: Any) -> None:
    np = pytest.importorskip("numpy")
    plain = np.zeros(4096, dtype=np.uint8)
    assert rt.pointer_attributes(plain.ctypes.data).memory_type == "unregistered"
    with pytest.raises(AMLValueError):
        area.munmap(plain.ctypes.data)
    other = make_area(0)
    try:
        buf = other.mmap(4096)
        with pytest.raises(AMLValueError):
            area.munmap(buf)
        with pytest.raises(AMLValueError):
            area.munmap(buf.ptr)
        other.munmap(buf)
    finally:
        other.close()


def test_default_and_unified_areas(rt: Any) -> None:
    d = aml_cuda.default_area()
    assert d is aml_cuda.default_area()
    buf = d.mmap(4096)
    assert rt.pointer_attributes(buf.ptr).memory_type == "device"
    d.munmap(buf)
    u = aml_cuda.unified_area()
    buf = u.mmap(4096)
    assert rt.pointer_attributes(buf.ptr).is_managed
    u.munmap(buf)
    with pytest.raises(AMLNotSupported):
        d.prefetch(buf, 0)


@pytest.mark.parametrize("kind", ["device", "host", "managed", "mapped"])
def test_registry_chooses_cuda(kind: str, rt: Any) -> None:
    aml_core.registry.reset()
    assert aml_core.choose(kind).backend == "cuda"
    with aml_core.area(kind=kind, device=0) as area:
        buf = area.mmap(4096)
        assert area.backend == "cuda"
        attrs = rt.pointer_attributes(buf.ptr)
        want = {"device": "device", "host": "host", "managed": "managed", "mapped": "host"}[kind]
        assert attrs.memory_type == want
        area.munmap(buf)


def test_probe_on_gpu() -> None:
    result = aml_cuda.probe()
    assert result.available
    dev = result.devices[0]
    assert dev.name
    assert dev.total_memory > 1 << 30
    assert dev.details["compute_capability"]
    assert dev.details["pci_bus_id"]
    assert aml_core.Capability.MANAGED in dev.capabilities
    assert aml_core.Capability.VIRTUAL_MEMORY in dev.capabilities
    assert aml_core.Capability.IPC in dev.capabilities


def test_free_memory_follows_allocations(rt: Any) -> None:
    """The probe's free memory (NVML, by PCI bus id) agrees with cudaMemGetInfo and drops
    by what this process allocates."""
    rt.set_device(0)
    rt.synchronize()
    before = rt.free_memory(0)
    if before is None:
        from aml_cuda import nvml

        pytest.fail(f"NVML gave no free memory: {nvml.unavailable_reason()}")
    free, total = rt.memory_info()
    assert 0 < before <= total
    assert abs(before - free) < 256 << 20, (before, free)
    with aml_cuda.create(0, GpuFlags.DEFAULT) as area:
        buf = area.mmap(1 << 30)
        during = rt.free_memory(0)
        assert during is not None
        assert before - during >= (1 << 30) - (64 << 20), (before, during)
        area.munmap(buf)
    assert rt.device_info(0).free_memory is not None


def test_probe_reports_free_memory_without_a_context() -> None:
    """In a fresh process: the probe gives each device's free memory and leaves every
    primary context inactive (nothing allocated on the device to answer)."""
    code = (
        "import json, aml_cuda\n"
        "from cuda.bindings import driver as d\n"
        "r = aml_cuda.probe()\n"
        "states = [d.cuDevicePrimaryCtxGetState(d.cuDeviceGet(i)[1]) for i in range(len(r.devices))]\n"
        "print(json.dumps({'free': [x.free_memory for x in r.devices],\n"
        "                  'total': [x.total_memory for x in r.devices],\n"
        "                  'active': [int(s[2]) for s in states]}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=child_env()
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["active"] == [0] * len(data["free"]), data
    for free, total in zip(data["free"], data["total"], strict=True):
        assert free is not None, data
        assert 0 < free <= total, data
