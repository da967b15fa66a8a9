"""Buffers dropped without munmap are freed when garbage collected (issue 12 §5), on a
real GPU: ``cudaMemGetInfo`` shows the device memory back and the area's stats agree, for
the compiled cudaMalloc path, the Python path, stream-ordered buffers, pools, and buffers
that CuPy or PyTorch viewed (freed once the last view is gone)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import aml_cuda
import pytest

import aml_core
from aml_core.gpu import GpuFlags

pytestmark = pytest.mark.gpu

BIG = 256 << 20  # far above the driver's allocation granularity
SLACK = 32 << 20  # what else the context may allocate or round (never BIG)


class Cycle:
    def __init__(self, *held: object) -> None:
        self.held = held
        self.me = self


def free_memory(rt: Any) -> int:
    rt.synchronize()  # stream-ordered frees return memory at a synchronization
    free, _total = rt.memory_info()
    return int(free)


@pytest.fixture
def device() -> Iterator[Any]:
    area = aml_cuda.create(0, GpuFlags.DEFAULT)
    yield area
    area.close()


def _dropped_memory_comes_back(rt: Any, area: Any, make: Any) -> None:
    before = free_memory(rt)
    buf = make()
    assert free_memory(rt) <= before - BIG + SLACK, "the allocation did not take device memory"
    stats = area.stats
    assert stats.live_mappings >= 1
    del buf
    gc.collect()
    assert free_memory(rt) >= before - SLACK, "the dropped buffer's device memory was not freed"


def test_a_dropped_buffer_is_freed(rt: Any, device: Any) -> None:
    assert device._native_allocator is not None  # the compiled cudaMalloc path
    _dropped_memory_comes_back(rt, device, lambda: device.mmap(BIG))
    st = device.stats
    assert (st.live_mappings, st.bytes_in_use, st.total_unmaps) == (0, 0, 1)


def test_a_dropped_python_path_buffer_is_freed(rt: Any, device: Any) -> None:
    _dropped_memory_comes_back(rt, device, lambda: device.mmap(BIG, {"device": 0}))
    assert device.stats.live_mappings == 0


def test_a_buffer_in_a_cycle_is_freed_by_the_collector(rt: Any, device: Any) -> None:
    _dropped_memory_comes_back(rt, device, lambda: Cycle(device.mmap(BIG)))
    assert device.stats.live_mappings == 0


def test_a_dropped_stream_ordered_buffer_is_freed_on_its_stream(rt: Any, device: Any) -> None:
    stream = aml_cuda.stream(non_blocking=True)
    try:
        _dropped_memory_comes_back(rt, device, lambda: device.mmap(BIG, stream=stream))
        assert device.stats.live_mappings == 0
    finally:
        stream.close()


def test_a_dropped_pooled_buffer_returns_its_slab(rt: Any, device: Any) -> None:
    with aml_core.pool(device, release_threshold=0) as pool:
        _dropped_memory_comes_back(rt, device, lambda: pool.mmap(BIG))
        assert pool.stats.live_mappings == 0
        assert device.stats.live_mappings == 0


def test_a_dropped_pinned_buffer_is_freed(device: Any) -> None:
    with aml_cuda.create(0, GpuFlags.ALLOC_HOST) as host:
        buf = host.mmap(1 << 20)
        memoryview(buf)[:4] = b"pins"
        del buf
        assert host.stats.live_mappings == 0
        assert host.stats.total_unmaps == 1


def test_cupy_keeps_a_dropped_buffer_until_its_array_goes(rt: Any, device: Any, cupy: Any) -> None:
    warm = device.mmap(4096)
    cupy.asarray(warm).fill(0)  # CuPy's context and kernels are loaded before measuring
    device.munmap(warm)
    before = free_memory(rt)
    buf = device.mmap(BIG)
    arr = cupy.asarray(buf)  # the CUDA Array Interface: CuPy keeps the Buffer referenced
    arr.fill(7)
    del buf
    gc.collect()
    assert device.stats.live_mappings == 1
    assert int(arr[:16].sum()) == 7 * 16
    del arr
    gc.collect()
    assert device.stats.live_mappings == 0
    assert free_memory(rt) >= before - SLACK


def test_torch_keeps_a_dropped_buffer_until_its_tensor_goes(rt: Any, device: Any, torch: Any) -> None:
    warm = device.mmap(4096)
    torch.from_dlpack(warm).fill_(0)  # PyTorch's CUDA state is set up before measuring
    gc.collect()
    device.munmap(warm)
    before = free_memory(rt)
    buf = device.mmap(BIG)
    tensor = torch.from_dlpack(buf)  # the DLPack consumer holds one export of it
    tensor.fill_(3)
    del buf
    gc.collect()
    assert device.stats.live_mappings == 1
    assert int(tensor[:16].sum()) == 3 * 16
    del tensor
    gc.collect()
    assert device.stats.live_mappings == 0
    assert free_memory(rt) >= before - SLACK
