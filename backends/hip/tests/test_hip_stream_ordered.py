"""Stream-ordered allocation on HIP (the STREAM_ORDERED group: hipMallocAsync, hipFreeAsync
and the events) on the driver double: the area's ``mmap(n, {"stream": s})``, ``munmap`` and
``munmap_on``, the wait-and-retry before ENOMEM, the events' semantics, every native failure
translated, the group missing from a library without the calls, and pools handing blocks
between streams through an event.

In host mode the double models what a GPU does with stream-ordered work (see "Streams and
events" in native/README.md): a hipFreeAsync is queued on its stream and its memory comes
back only when the stream runs it; an event is done once its stream ran what was queued
before it was recorded. In forward mode the same calls reach CUDA; the tests that depend on
the host model (queued work, emulated budgets) are marked ``host_double``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import aml_hip
import pytest
from aml_hip.abi import hip_version
from hip_helpers import UNKNOWN_STREAM, HipDouble

import aml_core
from aml_core.errors import (
    AMLError,
    AMLFailure,
    AMLMemoryError,
    AMLNotSupported,
    AMLTypeError,
    AMLValueError,
    ErrorCode,
)
from aml_core.gpu import Group, Stream

MiB = 1 << 20
DISABLE_TIMING = 0x2  # hipEventDisableTiming (docs/native-abi.md#hip-stream-ordered-allocation)


@pytest.fixture
def area(hip: HipDouble) -> Iterator[aml_hip.HipArea]:
    area = aml_hip.create(0, 0)
    yield area
    area.close()


def _pending(hip: HipDouble) -> int:
    return int(hip.ctl.live("free_pending"))


# -- the group -----------------------------------------------------------------------------
def test_the_runtime_provides_the_group(hip: HipDouble) -> None:
    rt = aml_hip.get_runtime()
    assert Group.STREAM_ORDERED in rt.groups()
    assert rt.why_missing(Group.STREAM_ORDERED) is None
    assert rt.require(Group.STREAM_ORDERED) is rt


def test_a_library_without_the_calls_lacks_the_group(hip_built: Callable[[int | None], HipDouble]) -> None:
    """A library older than 5.1 (a double built for 5.0 exports no hipMallocAsync /
    hipFreeAsync): the group is missing with the reason, a stream-ordered mmap says so and
    allocates nothing; everything else still works."""
    double = hip_built(hip_version(5, 0))
    rt = aml_hip.get_runtime()
    why = rt.why_missing(Group.STREAM_ORDERED)
    assert why is not None
    assert "hipMallocAsync, hipFreeAsync" in why
    assert "HIP 5.0.0" in why
    assert Group.STREAM_ORDERED not in rt.groups()
    with aml_hip.create(0, 0) as area:
        with pytest.raises(AMLNotSupported, match="hipMallocAsync"):
            area.mmap(4096, stream=0)
        assert area.stats.live_mappings == 0
        area.munmap(area.mmap(4096))  # plain hipMalloc is unaffected
    assert double.calls("hipMalloc") == 1


def test_the_5_2_library_has_the_group(hip_built: Callable[[int | None], HipDouble]) -> None:
    """Debian's 5.2 library exports hipMallocAsync (symbol version hip_5.1): so does a
    double built for 5.2, and the group is there."""
    hip_built(hip_version(5, 2, 21153))
    assert Group.STREAM_ORDERED in aml_hip.get_runtime().groups()


# -- the area ------------------------------------------------------------------------------
def test_mmap_on_a_stream_allocates_in_stream_order(
    hip: HipDouble, streams: Callable[[], Stream], area: aml_hip.HipArea
) -> None:
    s = streams()
    buf = area.mmap(MiB, stream=s)
    assert hip.last("hipMallocAsync")[1:] == (MiB, s.handle)  # type: ignore[index]
    assert hip.calls("hipMalloc") == 0
    assert buf.__dlpack_device__() == (10, 0)  # kDLROCM, device 0
    assert not buf.host_accessible
    s.synchronize()
    area.write(buf, b"\x5a" * MiB)
    assert area.read(buf, 16) == b"\x5a" * 16
    assert aml_hip.pointer_attributes(buf.ptr).memory_type == "device"
    assert hip.ctl.live("async") == 1
    area.munmap(buf)  # hipFreeAsync on the stream it was allocated on
    assert hip.last("hipFreeAsync") == (buf.ptr, s.handle)
    assert buf.freed
    assert area.stats.live_mappings == 0
    assert hip.ctl.live("async") == 0
    s.synchronize()
    assert _pending(hip) == 0


@pytest.mark.host_double
def test_a_queued_free_runs_with_its_stream(
    hip: HipDouble, streams: Callable[[], Stream], area: aml_hip.HipArea
) -> None:
    s = streams()
    buf = area.mmap(4096, stream=s)
    area.munmap(buf)
    assert (hip.live()["device"], _pending(hip)) == (0, 1)  # freed for aml, queued on s
    s.synchronize()
    assert _pending(hip) == 0


def test_munmap_on_another_stream(
    hip: HipDouble, streams: Callable[[], Stream], area: aml_hip.HipArea
) -> None:
    s1, s2 = streams(), streams()
    buf = area.mmap(4096, stream=s1)
    area.munmap(buf, stream=s2)
    assert hip.last("hipFreeAsync") == (buf.ptr, s2.handle)
    default = area.mmap(4096, stream=0)  # 0: the default stream (NULL)
    assert hip.last("hipMallocAsync")[2] == 0  # type: ignore[index]
    area.munmap(default)
    assert hip.last("hipFreeAsync") == (default.ptr, 0)
    plain = area.mmap(4096)
    area.munmap(plain, stream=s2)  # allocated with hipMalloc: freed with hipFree at once
    assert hip.calls("hipFree") == 1
    assert hip.calls("hipFreeAsync") == 2
    aml_hip.get_runtime().synchronize()
    assert _pending(hip) == 0


def test_bad_streams_reach_no_native_call(hip: HipDouble, area: aml_hip.HipArea) -> None:
    for bad, error in ((object(), AMLTypeError), (True, AMLTypeError), (-1, AMLValueError)):
        with pytest.raises(error):
            area.mmap(4096, stream=bad)
    assert hip.calls("hipMallocAsync") == 0
    buf = area.mmap(4096, stream=0)
    with pytest.raises(AMLTypeError):
        area.munmap(buf, stream="s")
    assert not buf.freed
    area.munmap(buf)
    aml_hip.get_runtime().synchronize()


class _Ptr:
    """A CuPy-like stream whose ``ptr`` is out of range."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __repr__(self) -> str:
        return f"ptr={self.ptr}"


class _CudaStream:
    def __init__(self, handle: object) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, object]:
        return (0, self.handle)

    def __repr__(self) -> str:
        return f"__cuda_stream__={self.handle}"


OUT_OF_RANGE_STREAMS = [2**64, 2**70, -1, -5, _Ptr(-5), _Ptr(2**64), _CudaStream(2**70), _CudaStream(-5)]


@pytest.mark.parametrize("bad", OUT_OF_RANGE_STREAMS, ids=repr)
def test_a_stream_handle_past_64_bits_or_negative_is_einval_everywhere(
    hip: HipDouble, area: aml_hip.HipArea, bad: object
) -> None:
    # One check (aml_core.gpu.stream.as_stream_handle) for every stream argument: the
    # area's options and munmap_on, a pool's; nothing reaches a native call truncated.
    with pytest.raises(AMLValueError, match="64-bit address") as info:
        area.mmap(4096, stream=bad)
    assert info.value.code is ErrorCode.EINVAL
    buf = area.mmap(4096, stream=0)
    with pytest.raises(AMLValueError, match="64-bit address"):
        area.munmap(buf, stream=bad)
    assert not buf.freed
    area.munmap(buf)
    with aml_core.pool(area) as pool:
        with pytest.raises(AMLValueError, match="64-bit address"):
            pool.mmap(4096, stream=bad)
        block = pool.mmap(4096)
        with pytest.raises(AMLValueError, match="64-bit address"):
            pool.munmap(block, stream=bad)
        assert not block.freed
        pool.munmap(block)
    assert hip.calls("hipMallocAsync") == 1  # the stream-0 allocation only
    assert hip.calls("hipFreeAsync") == 1
    aml_hip.get_runtime().synchronize()


def test_an_unknown_stream_handle_is_refused_by_the_runtime(hip: HipDouble, area: aml_hip.HipArea) -> None:
    # In range but not a stream: the runtime, which knows its streams, refuses it.
    with pytest.raises(AMLValueError):
        area.mmap(4096, stream=0xBAD0)
    assert area.stats.live_mappings == 0


@pytest.mark.parametrize("flags", [0, aml_hip.HipFlags.ALLOC_UNIFIED, aml_hip.HipFlags.ALLOC_HOST], ids=repr)
def test_munmap_on_an_unknown_stream_is_refused_for_every_buffer(
    hip: HipDouble, streams: Callable[[], Stream], flags: int
) -> None:
    """Issue 20, item 7: a buffer freed at once (hipFree, hipHostFree) by ``munmap_on``
    waits for the stream first, and the runtime refuses a handle it does not know there,
    as hipFreeAsync does for a stream-ordered buffer (it used to be freed, the stream never
    looked at). Refused, the buffer stays live and tracked; a known stream frees it."""
    s = streams()
    with aml_hip.create(0, flags) as area:
        buf = area.mmap(4096)
        area.write(buf, b"kept")
        with pytest.raises(AMLError, match="hipStreamSynchronize") as info:
            area.munmap(buf, stream=UNKNOWN_STREAM)
        assert info.value.native is not None
        assert info.value.native.name == "hipErrorInvalidHandle"
        assert not buf.freed
        assert area.stats.live_mappings == 1
        assert area.read(buf, 4) == b"kept"
        synchronized = hip.calls("hipStreamSynchronize")
        area.munmap(buf, stream=s)  # s's work on it done first, then freed at once
        assert hip.calls("hipStreamSynchronize") == synchronized + 1
        assert hip.last("hipStreamSynchronize") == (s.handle,)
        assert buf.freed
        assert area.stats.live_mappings == 0
    if flags == 0:  # a stream-ordered buffer: hipFreeAsync refuses the handle
        with aml_hip.create(0, 0) as area:
            buf = area.mmap(4096, stream=s)
            with pytest.raises(AMLValueError, match="hipFreeAsync"):
                area.munmap(buf, stream=UNKNOWN_STREAM)
            assert not buf.freed
            assert area.stats.live_mappings == 1
            area.munmap(buf, stream=s)
            assert buf.freed
    aml_hip.get_runtime().synchronize()
    assert {k: v for k, v in hip.live().items() if v} == {"stream": 1}  # s, the fixture's


def test_stream_ordered_is_device_memory_only(hip: HipDouble) -> None:
    with (
        aml_hip.create(0, aml_hip.HipFlags.ALLOC_HOST) as host,
        pytest.raises(AMLNotSupported, match="device memory"),
    ):
        host.mmap(4096, stream=0)
    assert hip.calls("hipMallocAsync") == 0


@pytest.mark.host_double
def test_enomem_waits_for_queued_frees_and_retries(hip: HipDouble, streams: Callable[[], Stream]) -> None:
    """A 4 MiB device: 3 MiB freed on s1 but still queued there leave no room for 3 MiB on
    s2; the area synchronizes the device (the queued free runs) and tries once more."""
    hip.need_devices(1, 4 * MiB)
    s1, s2 = streams(), streams()
    with aml_hip.create(0, 0) as area:
        a = area.mmap(3 * MiB, stream=s1)
        area.munmap(a)
        assert _pending(hip) == 1
        b = area.mmap(3 * MiB, stream=s2)
        assert hip.calls("hipMallocAsync") == 3  # a, b refused, b again
        assert hip.calls("hipDeviceSynchronize") == 1
        assert _pending(hip) == 0
        area.munmap(b)
        # The same stream reuses what it freed without waiting (stream order guarantees it).
        c = area.mmap(3 * MiB, stream=s2)
        assert hip.calls("hipDeviceSynchronize") == 1
        area.munmap(c)
        with pytest.raises(AMLMemoryError) as info:  # more than the device has: ENOMEM
            area.mmap(5 * MiB, stream=s1)
        assert info.value.native is not None
        assert info.value.native.name == "hipErrorOutOfMemory"
        assert "hipMallocAsync of 5242880 bytes" in str(info.value)
        assert hip.calls("hipDeviceSynchronize") == 2  # waited once more before giving up
        assert area.stats.live_mappings == 0


def test_injected_failures_are_translated_and_nothing_leaks(
    hip: HipDouble, streams: Callable[[], Stream], area: aml_hip.HipArea
) -> None:
    s = streams()
    hip.inject("hipMallocAsync", 2, times=2)  # hipErrorOutOfMemory, also after the wait
    with pytest.raises(AMLMemoryError):
        area.mmap(4096, stream=s)
    assert hip.calls("hipDeviceSynchronize") == 1
    assert area.stats.live_mappings == 0
    hip.inject("hipMallocAsync", 1)  # hipErrorInvalidValue: no retry
    with pytest.raises(AMLValueError) as info:
        area.mmap(4096, stream=s)
    assert info.value.native is not None
    assert info.value.native.function == "hipMallocAsync"
    assert hip.calls("hipDeviceSynchronize") == 1
    buf = area.mmap(4096, stream=s)
    hip.inject("hipFreeAsync", 1)
    with pytest.raises(AMLValueError) as info:
        area.munmap(buf)
    assert info.value.native is not None
    assert info.value.native.function == "hipFreeAsync"
    assert not buf.freed  # the memory is still there: still tracked
    assert area.stats.live_mappings == 1
    area.munmap(buf)
    assert buf.freed
    s.synchronize()


# -- events --------------------------------------------------------------------------------
def test_events_are_created_without_timing_and_destroyed(hip: HipDouble) -> None:
    rt = aml_hip.get_runtime()
    event = rt.event_create()
    assert hip.last("hipEventCreateWithFlags")[1] == DISABLE_TIMING  # type: ignore[index]
    assert hip.live()["event"] == 1
    assert rt.event_query(event)  # never recorded: nothing to wait for
    rt.event_record(event, 0)
    rt.event_synchronize(event)
    assert rt.event_query(event)
    rt.event_destroy(event)
    assert hip.live()["event"] == 0


@pytest.mark.host_double
def test_an_event_orders_another_stream_after_queued_work(
    hip: HipDouble, streams: Callable[[], Stream], area: aml_hip.HipArea
) -> None:
    """An event recorded after work queued on s1 is not done (hipErrorNotReady is False,
    not an error) until s1 runs it; s2 waiting for the event runs s1's work when s2 is
    synchronized."""
    rt = aml_hip.get_runtime()
    s1, s2 = streams(), streams()
    area.munmap(area.mmap(4096, stream=s1))  # a free queued on s1
    event = rt.event_create()
    rt.event_record(event, s1.handle)
    assert hip.last("hipEventRecord") == (event, s1.handle)
    assert rt.event_query(event) is False
    rt.stream_wait_event(s2.handle, event)
    assert hip.last("hipStreamWaitEvent") == (s2.handle, event, 0)
    assert (rt.event_query(event), _pending(hip)) == (False, 1)  # no host wait
    s2.synchronize()
    assert (rt.event_query(event), _pending(hip)) == (True, 0)
    rt.event_record(event, s1.handle)  # s1 idle now: done at once
    assert rt.event_query(event)
    area.munmap(area.mmap(4096, stream=s1))
    rt.event_record(event, s1.handle)
    rt.event_synchronize(event)  # waits for s1 up to the event
    assert (rt.event_query(event), _pending(hip)) == (True, 0)
    rt.event_destroy(event)


@pytest.mark.parametrize(
    ("function", "call"),
    [
        ("hipEventCreateWithFlags", lambda rt, e, s: rt.event_create()),
        ("hipEventRecord", lambda rt, e, s: rt.event_record(e, s)),
        ("hipEventQuery", lambda rt, e, s: rt.event_query(e)),
        ("hipEventSynchronize", lambda rt, e, s: rt.event_synchronize(e)),
        ("hipStreamWaitEvent", lambda rt, e, s: rt.stream_wait_event(s, e)),
        ("hipEventDestroy", lambda rt, e, s: rt.event_destroy(e)),
    ],
)
@pytest.mark.parametrize(
    ("error", "aml"), [(1, ErrorCode.EINVAL), (400, ErrorCode.FAILURE), (709, ErrorCode.FAILURE)]
)
def test_event_failures_are_translated(
    hip: HipDouble, streams: Callable[[], Stream], function: str, call: Any, error: int, aml: ErrorCode
) -> None:
    """Every event call's failure is the HIP table's error with the call as its cause; a
    failed destroy leaves the event alive (destroyed again below)."""
    rt = aml_hip.get_runtime()
    s = streams()
    event = rt.event_create()
    hip.inject(function, error)
    with pytest.raises(AMLError) as info:
        call(rt, event, s.handle)
    assert info.value.code is aml
    assert info.value.native is not None
    assert info.value.native.function == function
    assert hip.live()["event"] == 1
    rt.event_destroy(event)


def test_not_ready_is_a_state_and_other_query_codes_are_errors(hip: HipDouble) -> None:
    rt = aml_hip.get_runtime()
    event = rt.event_create()
    hip.inject("hipEventQuery", 600)  # hipErrorNotReady
    assert rt.event_query(event) is False
    hip.inject("hipEventQuery", 999)
    with pytest.raises(AMLFailure) as info:
        rt.event_query(event)
    assert info.value.native is not None
    assert info.value.native.name == "hipErrorUnknown"
    rt.event_destroy(event)


def test_bad_event_handles_reach_no_native_call(hip: HipDouble) -> None:
    rt = aml_hip.get_runtime()
    for bad in (0, -1, True, "e", 1 << 64):
        with pytest.raises((AMLTypeError, AMLValueError)):
            rt.event_destroy(bad)  # type: ignore[arg-type]
        with pytest.raises((AMLTypeError, AMLValueError)):
            rt.event_query(bad)  # type: ignore[arg-type]
    assert hip.calls("hipEventDestroy") == hip.calls("hipEventQuery") == 0


# -- pools -------------------------------------------------------------------------------
@pytest.fixture
def pool(area: aml_hip.HipArea) -> Iterator[aml_core.Pool]:
    p = aml_core.pool(area, small_slab=4096, small_max=4096)  # slabs of one 4 KiB block
    yield p
    p.close()


def test_pool_reuses_a_block_on_the_stream_that_freed_it(
    hip: HipDouble, streams: Callable[[], Stream], pool: aml_core.Pool
) -> None:
    s1 = streams()
    a = pool.mmap(4096, stream=s1)
    ptr = a.ptr
    pool.munmap(a)
    b = pool.mmap(4096, stream=s1)
    assert b.ptr == ptr
    assert hip.calls("hipEventCreateWithFlags") == 0  # same stream: no event
    pool.munmap(b)
    assert hip.calls("hipStreamSynchronize") == 0
    c = pool.mmap(4096)  # host order: s1 may still use the block: its event is queried first
    assert c.ptr == ptr
    assert hip.last("hipEventRecord")[1:] == (s1.handle,)
    assert hip.calls("hipEventQuery") == 1
    assert hip.calls("hipStreamSynchronize") == 0  # s1 was idle: no host wait
    assert hip.calls("hipMalloc") == 1
    pool.munmap(c)


def test_a_plain_request_waits_for_a_busy_stream(
    hip: HipDouble, streams: Callable[[], Stream], pool: aml_core.Pool
) -> None:
    """The event says s1 still runs (hipErrorNotReady): the host waits for s1, then takes
    its block (issue 31: a query first, a synchronize only when the work is not done)."""
    s1 = streams()
    a = pool.mmap(4096, stream=s1)
    ptr = a.ptr
    pool.munmap(a)
    hip.inject("hipEventQuery", 600)  # hipErrorNotReady (docs/native-abi.md)
    c = pool.mmap(4096)
    assert c.ptr == ptr
    assert hip.last("hipStreamSynchronize") == (s1.handle,)
    assert hip.calls("hipMalloc") == 1
    pool.munmap(c)


def test_pool_hands_a_block_to_another_stream_through_an_event(
    hip: HipDouble, streams: Callable[[], Stream], pool: aml_core.Pool
) -> None:
    s1, s2 = streams(), streams()
    a = pool.mmap(4096, stream=s1)
    ptr = a.ptr
    pool.munmap(a)
    b = pool.mmap(4096, stream=s2)  # the only free block was freed on s1
    assert b.ptr == ptr
    assert hip.calls("hipMalloc") == 1
    event = hip.last("hipEventCreateWithFlags")
    assert event is not None
    assert event[1] == DISABLE_TIMING
    recorded = hip.last("hipEventRecord")
    assert recorded is not None
    assert recorded[1] == s1.handle
    assert hip.last("hipStreamWaitEvent") == (s2.handle, recorded[0], 0)
    assert hip.calls("hipStreamSynchronize") == 0  # the host does not wait
    pool.munmap(b, stream=s2)
    c = pool.mmap(4096, stream=s2)  # s2's block now: no new event
    assert c.ptr == ptr
    assert (hip.calls("hipEventRecord"), hip.calls("hipEventCreateWithFlags")) == (1, 1)
    pool.munmap(c)
    assert hip.live()["event"] == 1
    pool.close()
    assert hip.live()["event"] == 0  # destroyed with the pool


@pytest.mark.host_double
def test_the_pool_event_orders_the_new_stream_after_the_old_ones_work(
    hip: HipDouble, streams: Callable[[], Stream], area: aml_hip.HipArea, pool: aml_core.Pool
) -> None:
    """With work queued on s1 (a stream-ordered free), the pool's hand-over event is not
    done; s2, which waits for it, runs s1's work when it is synchronized."""
    rt = aml_hip.get_runtime()
    s1, s2 = streams(), streams()
    area.munmap(area.mmap(4096, stream=s1))  # queued on s1
    pool.munmap(pool.mmap(4096, stream=s1))
    b = pool.mmap(4096, stream=s2)
    recorded = hip.last("hipEventRecord")
    assert recorded is not None
    event = recorded[0]
    assert rt.event_query(event) is False
    s2.synchronize()
    assert rt.event_query(event) is True
    assert _pending(hip) == 0
    pool.munmap(b)


def test_pool_reclaims_streams_before_it_grows(
    hip: HipDouble, streams: Callable[[], Stream], area: aml_hip.HipArea
) -> None:
    s1 = streams()
    with aml_core.pool(area) as p:
        bufs = [p.mmap(512 * 1024, stream=s1) for _ in range(4)]  # the whole 2 MiB small slab
        for b in bufs:
            p.munmap(b)
        assert hip.calls("hipMalloc") == 1
        big = p.mmap(MiB)  # nothing free in host order: s1's event queried (idle), its blocks coalesce
        assert hip.last("hipEventRecord")[1:] == (s1.handle,)
        assert hip.calls("hipStreamSynchronize") == 0
        assert hip.calls("hipMalloc") == 1
        p.munmap(big)


def test_pool_stream_failures_are_translated(
    hip: HipDouble, streams: Callable[[], Stream], pool: aml_core.Pool
) -> None:
    s1, s2 = streams(), streams()
    pool.munmap(pool.mmap(4096, stream=s1))
    hip.inject("hipStreamWaitEvent", 1)
    with pytest.raises(AMLValueError) as info:
        pool.mmap(4096, stream=s2)
    assert info.value.native is not None
    assert info.value.native.function == "hipStreamWaitEvent"
    b = pool.mmap(4096, stream=s2)  # the block is still there for the retry
    pool.munmap(b)
    hip.inject("hipEventDestroy", 1)
    with pytest.raises(AMLValueError):
        pool.close()
    assert hip.live()["event"] == 1
    pool.close()  # the retry destroys it
    assert hip.live()["event"] == 0
