"""Stream-ordered allocation (``area.mmap(size, stream=s)``, cudaMallocAsync/cudaFreeAsync):
the shared GpuArea logic over a recording CudaRuntime on any machine, and a round trip
on a real GPU (marked ``gpu``)."""

from __future__ import annotations

from typing import Any

import aml_cuda
import pytest

from aml_core.errors import AMLMemoryError, AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.gpu import GpuArea, GpuFlags, Group

rt_mod = pytest.importorskip("cuda.bindings.runtime")
E = rt_mod.cudaError_t


class _CudaStream:
    """A foreign stream object speaking ``__cuda_stream__`` (as cuda.core's do)."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def _recorder() -> Any:
    from aml_cuda.runtime import CudaRuntime

    class Recorder(CudaRuntime):
        """One device; device and stream-ordered allocation recorded, failures on demand."""

        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[Any, ...]] = []
            self.fail_malloc = 0
            self.fail_free = False
            self.next = 0x7000_0000

        def device_count(self) -> int:
            return 1

        def get_device(self) -> int:
            return 0

        def _set_device(self, device: int) -> None:
            pass

        def _malloc(self, size: int) -> int:
            self.calls.append(("malloc", size))
            self.next += 1 << 20
            return self.next

        def _free(self, ptr: int) -> None:
            self.calls.append(("free", ptr))

        def synchronize(self) -> None:
            self.calls.append(("synchronize",))

        def _malloc_async(self, size: int, stream: int) -> int:
            self.calls.append(("malloc_async", size, stream))
            if self.fail_malloc:
                self.fail_malloc -= 1
                raise self.errors.error("cudaMallocAsync", int(E.cudaErrorMemoryAllocation))
            self.next += 1 << 20
            return self.next

        def _stream_synchronize(self, stream: int) -> None:
            self.calls.append(("stream_synchronize", stream))

        def _free_async(self, ptr: int, stream: int) -> None:
            self.calls.append(("free_async", ptr, stream))
            if self.fail_free:
                raise self.errors.error("cudaFreeAsync", int(E.cudaErrorInvalidValue))

    return Recorder()


@pytest.fixture
def rec() -> Any:
    return _recorder()


@pytest.fixture
def area(rec: Any) -> Any:
    area = GpuArea(rec, 0, GpuFlags.DEFAULT)
    yield area
    area.close()


def test_runtime_has_the_group(rec: Any) -> None:
    assert Group.STREAM_ORDERED in rec.groups()
    assert rec.require(Group.STREAM_ORDERED) is rec


def test_mmap_on_a_stream_allocates_in_stream_order(area: Any, rec: Any) -> None:
    buf = area.mmap(4096, stream=0x5000)
    assert rec.calls == [("malloc_async", 4096, 0x5000)]
    assert buf.__dlpack_device__() == (2, 0)
    assert buf.__cuda_array_interface__["data"][0] == buf.ptr
    assert not buf.host_accessible
    area.munmap(buf)  # freed in order on the stream it was made on
    assert rec.calls[-1] == ("free_async", buf.ptr, 0x5000)
    assert buf.freed


def test_munmap_on_another_stream(area: Any, rec: Any) -> None:
    buf = area.mmap(4096, stream=_CudaStream(0x5000))
    area.munmap(buf, stream=_CudaStream(0x6000))
    assert rec.calls[-1] == ("free_async", buf.ptr, 0x6000)
    again = area.mmap(4096, stream=0)  # options work too; 0 is the default stream
    assert rec.calls[-1] == ("malloc_async", 4096, 0)
    area.munmap(again)
    assert rec.calls[-1] == ("free_async", again.ptr, 0)


def test_plain_buffers_wait_for_the_free_stream(area: Any, rec: Any) -> None:
    """Allocated with cudaMalloc: freed with cudaFree once the stream is synchronized (the
    call that lets the runtime refuse a handle it does not know: issue 20)."""
    buf = area.mmap(4096)
    assert rec.calls == [("malloc", 4096)]
    area.munmap(buf, stream=0x6000)
    assert rec.calls[-2:] == [("stream_synchronize", 0x6000), ("free", buf.ptr)]


def test_bad_streams_allocate_nothing(area: Any, rec: Any) -> None:
    with pytest.raises(AMLTypeError):
        area.mmap(4096, stream=object())
    with pytest.raises(AMLTypeError):
        area.mmap(4096, stream=True)
    with pytest.raises(AMLValueError):
        area.mmap(4096, stream=-1)
    assert rec.calls == []
    buf = area.mmap(4096, stream=1)
    with pytest.raises(AMLTypeError):
        area.munmap(buf, stream="s")
    assert not buf.freed
    area.munmap(buf)


def test_out_of_memory_waits_for_the_device_and_retries(area: Any, rec: Any) -> None:
    rec.fail_malloc = 1  # pending frees: the first try fails, the one after a sync succeeds
    buf = area.mmap(4096, stream=1)
    assert rec.calls == [("malloc_async", 4096, 1), ("synchronize",), ("malloc_async", 4096, 1)]
    area.munmap(buf)


def test_failures_are_translated_and_nothing_leaks(area: Any, rec: Any) -> None:
    rec.fail_malloc = 2
    with pytest.raises(AMLMemoryError) as info:
        area.mmap(4096, stream=1)
    assert info.value.native is not None
    assert info.value.native.name == "cudaErrorMemoryAllocation"
    assert area.stats.live_mappings == 0
    assert rec.calls.count(("synchronize",)) == 1
    buf = area.mmap(4096, stream=1)
    rec.fail_free = True
    with pytest.raises(AMLValueError):
        area.munmap(buf)
    assert not buf.freed  # the memory is still there: still tracked
    assert area.stats.live_mappings == 1
    rec.fail_free = False
    area.munmap(buf)
    assert area.stats.live_mappings == 0


def test_stream_ordered_is_device_memory_only(rec: Any) -> None:
    with GpuArea(rec, 0, GpuFlags.ALLOC_HOST) as host, pytest.raises(AMLNotSupported, match="device memory"):
        host.mmap(4096, stream=1)


@pytest.mark.gpu
def test_round_trip_on_a_gpu() -> None:
    area = aml_cuda.create(0)
    stream = aml_cuda.stream(non_blocking=True)
    try:
        buf = area.mmap(1 << 20, stream=stream)
        stream.synchronize()
        area.write(buf, b"\x5a" * (1 << 20))
        assert area.read(buf, 16) == b"\x5a" * 16
        area.munmap(buf, stream=stream)
        stream.synchronize()
        assert area.stats.live_mappings == 0
    finally:
        stream.close()
        area.close()


# -- garbage collection --------------------------------------------------------------------------
def test_a_dropped_stream_ordered_buffer_is_freed_on_its_stream(area: Any, rec: Any) -> None:
    """Dropped without munmap, a stream-ordered buffer is freed in stream order on the
    stream it was allocated on, as a plain munmap frees it."""
    buf = area.mmap(4096, stream=0x5000)
    ptr = buf.ptr
    del buf
    assert rec.calls[-1] == ("free_async", ptr, 0x5000)
    assert area.stats.live_mappings == 0


def test_a_collection_inside_munmap_on_keeps_each_buffer_on_its_stream(area: Any, rec: Any) -> None:
    """munmap_on frees on the stream it is given; a buffer the collector frees meanwhile
    (here: inside munmap_on, after it chose its stream, through the size's __index__) is
    freed on its own stream."""
    import gc

    class Cycle:
        def __init__(self, held: object) -> None:
            self.held = held
            self.me = self

    class CollectingSize:
        def __index__(self) -> int:
            gc.collect()
            return 4096

    dropped = area.mmap(4096, stream=0x5000)
    dropped_ptr = dropped.ptr
    Cycle(dropped)
    del dropped
    target = area.mmap(4096, stream=0x5000)
    area.munmap(target, CollectingSize(), stream=0x6000)
    assert ("free_async", target.ptr, 0x6000) in rec.calls
    assert ("free_async", dropped_ptr, 0x5000) in rec.calls, "the collected buffer took munmap_on's stream"
    assert area.stats.live_mappings == 0


def test_a_failed_free_of_a_dropped_buffer_is_reported_and_kept(area: Any, rec: Any) -> None:
    from aml_core.testing.lifetime import catch_unraisable

    buf = area.mmap(4096, stream=0x5000)
    ptr = buf.ptr
    rec.fail_free = True
    with catch_unraisable() as caught:
        del buf
    assert len(caught) == 1
    assert getattr(caught[0].exc, "native", None) is not None
    del caught
    assert area.stats.live_mappings == 1  # tracked, and held by the area
    rec.fail_free = False
    area.close()
    assert rec.calls[-1] == ("free_async", ptr, 0x5000)
    assert area.stats.live_mappings == 0
