"""The allocator kernel (aml_core/_kernel.pyx) over a HIP device area on the driver
double: hits in host order and on a stream make no driver call (the native call counts
stay flat) and are counted as pool hits; a block it hands out is shared by IPC like any
pooled block; and each native call it makes fails in a focused case: hipMalloc out of
memory (the cache released, one retry), hipFree (the slab kept, trim and close retried),
the hand-over's event calls (the block stays on its stream), hipStreamSynchronize (a
stream destroyed while the pool holds blocks freed on it). Every call failing in turn,
with each code, is the fault table's ``pool-kernel`` and ``pool-expandable`` operations
(hip_faults.py). The ``hip`` fixture checks that the double's live counters are back to
zero after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import aml_hip
import pytest
from hip_helpers import HipDouble

import aml_core
from aml_core import Pool
from aml_core.errors import AMLError, AMLFailure, AMLMemoryError, AMLValueError
from aml_core.gpu import Stream

MiB = 1 << 20
OUT_OF_MEMORY = 2  # hipErrorOutOfMemory
INVALID_VALUE = 1  # hipErrorInvalidValue
UNKNOWN = 999  # hipErrorUnknown
NOT_READY = 600  # hipErrorNotReady: hipEventQuery's "still running" (docs/native-abi.md)


@pytest.fixture
def device(hip: HipDouble) -> Iterator[aml_hip.HipArea]:
    area = aml_hip.create(0, 0)
    yield area
    area.close()


def test_repeated_size_makes_no_driver_call(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as device, aml_core.pool(device) as p:
        cache = p._pool_kernel
        assert cache is not None
        p.munmap(p.mmap(4096))  # the slab: one hipMalloc
        mallocs, frees = hip.calls("hipMalloc"), hip.calls("hipFree")
        assert (mallocs, frees) == (1, 0)
        first = None
        for _ in range(500):
            buf = p.mmap(4096)
            first = first or buf.ptr
            assert buf.ptr == first
            assert buf.__cuda_array_interface__["data"][0] == buf.ptr
            p.munmap(buf)
        assert (hip.calls("hipMalloc"), hip.calls("hipFree")) == (mallocs, frees)
        assert (cache.fast_mmaps, cache.fast_munmaps) == (500, 501)
        s = p.pool_stats
        assert (s.pool_hits, s.pool_misses, s.native_allocations) == (500, 1, 1)
        assert p.trim() == 2 << 20
        assert hip.calls("hipFree") == 1


def test_a_fast_path_block_is_exported_with_its_offset(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as device, aml_core.pool(device) as p:
        keep = p.mmap(4096)
        p.munmap(p.mmap(1000))  # the block at offset 4096 goes on its stack
        cache = p._pool_kernel
        assert cache is not None
        b = p.mmap(1000)  # fast: from its stack
        assert b.ptr == keep.ptr + 4096
        assert (cache.fast_mmaps, cache.misses) == (2, 1)
        export = p.ipc_export(b)
        h = export.handle
        assert (h.offset, h.size) == (4096, 1000)
        assert h.data == p.ipc_export(keep).handle.data  # one slab, one native handle
        slab, offset = p.slab_of(b)
        assert slab is not None
        assert offset == 4096
        p.munmap(b)
        p.munmap(keep)


def test_a_destroyed_stream_is_refused_with_a_block_cached(hip: HipDouble) -> None:
    """mmap on a closed aml Stream is EINVAL (the stream's own check) on the compiled
    path too: with a block of the size cached it used to be handed out on the dead
    handle, freed onto its stack, and every later reclaim failed (hipStreamSynchronize:
    hipErrorInvalidHandle), so the pool could not trim or grow (found by the pool soak)."""
    with aml_hip.create(0, 0) as device, aml_core.pool(device) as p:
        live = aml_hip.stream(non_blocking=True)
        try:
            _refuse_a_dead_stream(p, live)
        finally:
            live.close()


def _refuse_a_dead_stream(p: Pool, live: Stream) -> None:
    p.munmap(p.mmap(4096, stream=live))  # the pool knows streams; a block on live's stack
    p.munmap(p.mmap(4096))  # and one on the host-order stack
    dead = aml_hip.stream(non_blocking=True)
    dead.close()
    cache = p._pool_kernel
    assert cache is not None
    before = (cache.fast_mmaps, cache.hits, cache.misses)
    with pytest.raises(AMLValueError, match="closed"):
        p.mmap(4096, stream=dead)
    with pytest.raises(AMLValueError, match="closed"):
        p.mmap(4096, stream=dead)
    assert (cache.fast_mmaps, cache.hits, cache.misses) == before
    assert cache.live_blocks() == 0
    assert p.trim() == 2 << 20  # live is synchronized; nothing is on a dead stream


def test_stream_hits_make_no_driver_call(
    hip: HipDouble, streams: Callable[[], Stream], device: aml_hip.HipArea
) -> None:
    s1, s2 = streams(), streams()
    with aml_core.pool(device) as p:
        kernel = p._pool_kernel
        assert kernel is not None
        p.munmap(p.mmap(4096, stream=s1))  # the slab; the block on s1's stack
        counts = {f: hip.calls(f) for f in ("hipMalloc", "hipStreamSynchronize", "hipEventRecord")}
        assert counts == {"hipMalloc": 1, "hipStreamSynchronize": 0, "hipEventRecord": 0}
        first = p.mmap(4096, stream=s1)
        for _ in range(200):
            p.munmap(first)
            buf = p.mmap(4096, stream=s1)  # reused at once on s1, in C
            assert buf.ptr == first.ptr
            first = buf
        p.munmap(first, stream=s2)  # freed in s2's order, in C
        again = p.mmap(4096, stream=s2)
        assert again.ptr == first.ptr
        p.munmap(again)
        assert {f: hip.calls(f) for f in counts} == counts
        assert (kernel.fast_mmaps, kernel.fast_munmaps) == (202, 203)
        assert kernel.stream_cached() == {(s2.handle, 4096): [first.ptr]}
        assert p.trim() == 2 * MiB  # s2's event queried (idle), the slab freed
        assert hip.last("hipEventRecord")[1:] == (s2.handle,)


def test_out_of_memory_releases_the_cache_and_retries(hip: HipDouble, device: aml_hip.HipArea) -> None:
    with aml_core.pool(device) as p:
        p.munmap(p.mmap(4096))  # a small slab, wholly free
        hip.inject("hipMalloc", OUT_OF_MEMORY)
        big = p.mmap(3 * MiB)  # hipMalloc fails: the free slab is released, the retry succeeds
        assert (hip.calls("hipMalloc"), hip.calls("hipFree")) == (3, 1)
        s = p.pool_stats
        assert (s.slabs, s.native_allocations, s.native_frees) == (1, 2, 1)
        hip.inject("hipMalloc", OUT_OF_MEMORY)  # nothing cached to release: ENOMEM
        with pytest.raises(AMLMemoryError) as info:
            p.mmap(30 * MiB)
        assert info.value.native is not None
        assert info.value.native.function == "hipMalloc"
        assert hip.calls("hipFree") == 1
        assert p.pool_stats == s
        p.munmap(big)


def test_out_of_memory_stays_the_error_when_hipfree_fails_too(
    hip: HipDouble, device: aml_hip.HipArea
) -> None:
    with aml_core.pool(device) as p:
        p.munmap(p.mmap(4096))
        hip.inject("hipMalloc", OUT_OF_MEMORY)
        hip.inject("hipFree", UNKNOWN)
        with pytest.raises(AMLMemoryError) as info:
            p.mmap(3 * MiB)
        assert info.value.native is not None
        assert info.value.native.function == "hipMalloc"
        assert any("hipFree" in note for note in info.value.__notes__)
        assert p.pool_stats.slabs == 1
        assert hip.live()["device"] == 1
        p.munmap(p.mmap(3 * MiB))


def test_other_malloc_failures_release_nothing(hip: HipDouble, device: aml_hip.HipArea) -> None:
    with aml_core.pool(device) as p:
        p.munmap(p.mmap(4096))
        hip.inject("hipMalloc", INVALID_VALUE)
        with pytest.raises(AMLValueError) as info:
            p.mmap(3 * MiB)
        assert info.value.native is not None
        assert info.value.native.function == "hipMalloc"
        assert hip.calls("hipFree") == 0  # no release, no retry
        assert p.pool_stats.slabs == 1
        p.munmap(p.mmap(3 * MiB))


def test_a_failed_hipfree_keeps_the_slab_and_trim_retries(hip: HipDouble, device: aml_hip.HipArea) -> None:
    with aml_core.pool(device) as p:
        p.munmap(p.mmap(4096))
        p.munmap(p.mmap(3 * MiB))
        hip.inject("hipFree", UNKNOWN)  # the larger slab, released first
        with pytest.raises(AMLFailure) as info:
            p.trim()
        assert info.value.native is not None
        assert info.value.native.function == "hipFree"
        s = p.pool_stats
        assert (s.slabs, s.bytes_reserved) == (1, 20 * MiB)  # the small one went
        assert hip.live()["device"] == 1
        p.munmap(p.mmap(3 * MiB))  # still served from
        assert hip.calls("hipMalloc") == 2
        assert p.trim() == 20 * MiB
        assert hip.live()["device"] == 0


def test_a_failed_hipfree_in_close_is_the_areas_to_free(hip: HipDouble) -> None:
    device = aml_hip.create(0, 0)
    p = aml_core.pool(device)
    buf = p.mmap(4096)
    hip.inject("hipFree", UNKNOWN)
    with pytest.raises(AMLFailure):
        p.close()
    assert p.closed
    assert buf.freed
    assert hip.live()["device"] == 1
    p.close()  # nothing left for the pool
    device.close()  # frees the slab the pool gave back
    assert hip.live()["device"] == 0


@pytest.mark.parametrize("function", ["hipEventCreateWithFlags", "hipEventRecord", "hipStreamWaitEvent"])
def test_a_failed_hand_over_keeps_the_block_on_its_stream(
    hip: HipDouble, streams: Callable[[], Stream], device: aml_hip.HipArea, function: str
) -> None:
    """Issue 20: the block another stream freed is taken off its stack only after the
    event calls succeeded: a failure leaves it there, and the retry hands it over."""
    s1, s2 = streams(), streams()
    p = aml_core.pool(device, small_slab=4096, small_max=4096)  # slabs of one block
    try:
        kernel = p._pool_kernel
        assert kernel is not None
        a = p.mmap(4096, stream=s1)
        p.munmap(a)
        cached = kernel.stream_cached()
        assert cached == {(s1.handle, 4096): [a.ptr]}
        hip.inject(function, INVALID_VALUE)
        with pytest.raises(AMLValueError) as info:
            p.mmap(4096, stream=s2)
        assert info.value.native is not None
        assert info.value.native.function == function
        assert kernel.stream_cached() == cached
        assert (kernel.live_blocks(), kernel.blocks, p.pool_stats.bytes_cached) == (0, 0, 4096)
        b = p.mmap(4096, stream=s2)  # the retry: the same block, no new slab
        assert b.ptr == a.ptr
        assert hip.calls("hipMalloc") == 1
        assert hip.last("hipStreamWaitEvent") is not None
        p.munmap(b)
    finally:
        p.close()
    assert hip.live()["event"] == 0


def test_a_failed_synchronize_keeps_the_blocks_on_their_stream(
    hip: HipDouble, streams: Callable[[], Stream], device: aml_hip.HipArea
) -> None:
    s1 = streams()
    with aml_core.pool(device, small_slab=4096, small_max=4096) as p:
        a = p.mmap(4096, stream=s1)
        p.munmap(a)
        hip.inject("hipEventQuery", NOT_READY)  # s1 still runs: the host waits for it
        hip.inject("hipStreamSynchronize", UNKNOWN)
        with pytest.raises(AMLFailure) as info:
            p.mmap(4096)  # host order: s1 must be idle first
        assert info.value.native is not None
        assert info.value.native.function == "hipStreamSynchronize"
        b = p.mmap(4096)  # the retry waits for s1 and reuses the block
        assert b.ptr == a.ptr
        assert hip.calls("hipMalloc") == 1
        p.munmap(b)


def test_a_stream_destroyed_while_the_pool_holds_its_blocks(hip: HipDouble, device: aml_hip.HipArea) -> None:
    """Issue 20: blocks freed on a stream that is then destroyed cannot be shown idle
    again (hipEventRecord on it, the first call that asks: invalid handle): trim raises,
    and so does every request that must reclaim the streams; close() raises it, frees
    the rest and gives the slab of the stream's block back to the area, whose close
    frees it: every live counter back to zero."""
    p = aml_core.pool(device, small_slab=4096, small_max=4096)
    s1 = aml_hip.stream(non_blocking=True)
    a = p.mmap(4096, stream=s1)
    live = p.mmap(4096)
    p.munmap(a)  # on s1's stack
    s1.close()
    assert hip.live()["stream"] == 0
    with pytest.raises(AMLError) as info:
        p.trim()
    assert info.value.native is not None
    assert info.value.native.function == "hipEventRecord"
    with pytest.raises(AMLError):
        p.mmap(4096)  # host order needs s1 idle: the same error
    with pytest.raises(AMLError):
        p.close()
    assert p.closed
    assert live.freed
    assert hip.live()["device"] == 1  # live's slab went; the stream's block's is the area's now
    p.close()  # nothing left for the pool
    device.close()
    assert not any(hip.live().values())


def test_expandable_segment_failures_leave_it_usable(hip: HipDouble) -> None:
    vm = aml_hip.virtual_memory(0)
    try:
        with aml_core.pool(vm, expandable=True, capacity=64 * MiB) as p:
            a = p.mmap(MiB)
            b = p.mmap(5 * MiB)
            p.munmap(b)
            hip.inject("hipMemUnmap", UNKNOWN)
            with pytest.raises(AMLFailure):
                p.trim()
            s = p.pool_stats
            assert s.bytes_reserved == 6 * MiB
            assert p.trim() == 4 * MiB  # the retry unmaps the free end
            hip.inject("hipMemCreate", OUT_OF_MEMORY)
            with pytest.raises(AMLMemoryError):
                p.mmap(5 * MiB)
            assert p.pool_stats.bytes_reserved == 2 * MiB
            c = p.mmap(5 * MiB)  # grows in place again
            assert c.ptr == a.ptr + MiB
            p.munmap(c)
            p.munmap(a)
    finally:
        vm.close()


def test_expandable_limit_keeps_enomem_when_the_unmap_fails_too(hip: HipDouble) -> None:
    """Issue 20 (double faults): past its limit an expandable pool unmaps its free end
    before it gives up; when that hipMemUnmap fails too, the error is still the limit's
    ENOMEM (the first failure), the unmap's a note on it (it used to replace it), and the
    chunk stays the pool's, mapped and counted, so trim or close unmaps it again."""
    vm = aml_hip.virtual_memory(0)
    try:
        with aml_core.pool(vm, expandable=True, limit=8 * MiB) as p:
            a = p.mmap(MiB)  # a 2 MiB chunk
            p.munmap(p.mmap(5 * MiB))  # 4 MiB more, then a free end of 5 MiB
            assert p.pool_stats.bytes_reserved == 6 * MiB
            hip.inject("hipMemUnmap", UNKNOWN)
            with pytest.raises(AMLMemoryError, match=r"limit of 8\.0 MiB") as info:
                p.mmap(8 * MiB)  # 10 MiB even with the free end unmapped: ENOMEM
            assert info.value.native is None  # the pool's own refusal, not the driver's
            notes = getattr(info.value, "__notes__", [])
            assert any("releasing the pool's cached memory failed" in n and "hipMemUnmap" in n for n in notes)
            assert p.pool_stats.bytes_reserved == 6 * MiB  # the chunk is still the pool's
            assert hip.live()["vmm_mapping"] == 2
            b = p.mmap(5 * MiB)  # still served from the free end
            assert b.ptr == a.ptr + MiB
            p.munmap(b)
            assert p.trim() == 4 * MiB  # the retry unmaps it
            p.munmap(a)
    finally:
        vm.close()


def test_expandable_close_again_unmaps_what_a_failed_unmap_kept(hip: HipDouble) -> None:
    """A close whose hipMemUnmap fails raises it and keeps the chunk (and so the
    reservation) the pool's: close again unmaps it and frees the reservation (the second
    close used to do nothing for the segment: only the area's close freed it)."""
    with aml_hip.virtual_memory(0) as vm:
        p = aml_core.pool(vm, expandable=True, capacity=64 * MiB)
        p.munmap(p.mmap(MiB))
        hip.inject("hipMemUnmap", UNKNOWN)
        with pytest.raises(AMLFailure, match="hipMemUnmap"):
            p.close()
        assert p.closed
        assert p.pool_stats.bytes_reserved == 2 * MiB
        assert (hip.live()["vmm_mapping"], hip.live()["vmm_reservation"]) == (1, 1)
        p.close()
        assert p.pool_stats.bytes_reserved == 0
        assert (hip.live()["vmm_mapping"], hip.live()["vmm_reservation"]) == (0, 0)
        p.close()  # nothing left


# -- the kernel's stream calls through the runtime's C function pointers (issue 31) ----------
def test_the_kernel_calls_the_runtimes_stream_functions_in_c(hip: HipDouble, device: aml_hip.HipArea) -> None:
    """A pool over a HIP area has hipEvent*/hipStream* as C function pointers from its
    creation (NativeStreams), not Python trampolines."""
    with aml_core.pool(device) as p:
        streams = p._kernel.streams
        assert streams is not None
        assert not streams.needs_gil
        assert streams.queries
        assert "hipEventQuery" in streams.names


HAND_OVER_CALLS = ("hipEventCreateWithFlags", "hipEventRecord", "hipStreamWaitEvent")


@pytest.mark.parametrize("function", [*HAND_OVER_CALLS, "hipEventQuery", "hipStreamSynchronize"])
@pytest.mark.parametrize(("code", "error"), [(UNKNOWN, AMLFailure), (INVALID_VALUE, AMLValueError)])
def test_each_stream_call_of_the_kernel_fails_with_its_translated_error(
    hip: HipDouble,
    streams: Callable[[], Stream],
    device: aml_hip.HipArea,
    function: str,
    code: int,
    error: type[AMLError],
) -> None:
    """Each stream call the kernel makes through the C pointers, failing: the backend's
    translated error with the native call as its cause, the block left on its stream's
    list, and a retry serves it."""
    s1, s2 = streams(), streams()
    with aml_core.pool(device, small_slab=4096, small_max=4096) as p:
        a = p.mmap(4096, stream=s1)
        ptr = a.ptr
        p.munmap(a)
        if function == "hipStreamSynchronize":
            hip.inject("hipEventQuery", NOT_READY)  # s1 still runs: the host must wait
        hip.inject(function, code)
        on = s2 if function in HAND_OVER_CALLS else None  # a hand-over, or host order (reclaim)
        with pytest.raises(error) as info:
            p.mmap(4096, stream=on)
        assert info.value.native is not None
        assert info.value.native.function == function
        assert p._kernel.stream_cached() == {(s1.handle, 4096): [ptr]}  # nothing moved
        again = p.mmap(4096, stream=on)
        assert again.ptr == ptr
        assert hip.calls("hipMalloc") == 1
        p.munmap(again)


def test_a_failed_event_destroy_keeps_the_event_for_a_second_close(
    hip: HipDouble, streams: Callable[[], Stream], device: aml_hip.HipArea
) -> None:
    s1, s2 = streams(), streams()
    p = aml_core.pool(device, small_slab=4096, small_max=4096)
    p.munmap(p.mmap(4096, stream=s1))
    p.munmap(p.mmap(4096, stream=s2))  # through the event
    assert hip.live()["event"] == 1
    hip.inject("hipEventDestroy", UNKNOWN)
    with pytest.raises(AMLFailure) as info:
        p.close()
    assert info.value.native is not None
    assert info.value.native.function == "hipEventDestroy"
    assert hip.live()["event"] == 1
    p.close()  # retried
    assert hip.live()["event"] == 0


@pytest.mark.parametrize("function", HAND_OVER_CALLS)
def test_a_hooks_hand_over_fails_in_c_then_in_the_slow_path(
    hip: HipDouble, streams: Callable[[], Stream], device: aml_hip.HipArea, function: str
) -> None:
    """PyTorch's request on s2 for s1's block: the hand-over runs in C without the GIL; a
    failing call there sends the request to the slow path, which calls it again: failing
    twice, PyTorch gets NULL and the hook keeps the translated error; failing once, the
    slow path's call succeeds. The block never leaves s1 before the calls succeed."""
    from aml_core import _hooks

    s1, s2 = streams(), streams()
    with aml_core.pool(device, small_slab=4096, small_max=4096) as p:
        errors: list[BaseException] = []

        def slow_malloc(size: int, _device: int, stream: int | None) -> int:
            try:
                return p._hook_alloc(size, stream)
            except BaseException as exc:
                errors.append(exc)
                return 0

        def slow_free(ptr: int, _device: int, stream: int | None) -> bool:
            p._hook_free(ptr, stream)
            return True

        state = _hooks.HookState(p._kernel, slow_malloc, slow_free)
        ptr = _hooks.call_hook_malloc(state, 4096, s1.handle)
        _hooks.call_hook_free(state, ptr, s1.handle)  # on s1's list, in C
        hip.inject(function, UNKNOWN, times=2)
        assert _hooks.call_hook_malloc(state, 4096, s2.handle) == 0
        assert isinstance(errors[-1], AMLFailure)
        assert errors[-1].native.function == function
        assert p._kernel.stream_cached() == {(s1.handle, 4096): [ptr]}
        hip.inject(function, UNKNOWN, times=1)
        assert _hooks.call_hook_malloc(state, 4096, s2.handle) == ptr  # the slow path's retry
        assert len(errors) == 1
        _hooks.call_hook_free(state, ptr, s2.handle)
        assert _hooks.call_hook_malloc(state, 4096, s1.handle) == ptr  # s2 → s1, in C now
        assert state.fast_allocs == 1  # that hand-over ran in C, without the GIL
        _hooks.call_hook_free(state, ptr, s1.handle)
