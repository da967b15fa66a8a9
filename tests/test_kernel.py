"""The allocator kernel (aml_core/_kernel.pyx, ``pool._kernel``) on the host: which
requests its compiled path serves (hits in host order and on a stream) and which take
the slow path (a miss, a hand-over between streams, the streams reclaimed), its
rounding and counters, its mutex (another thread waits; the holder's own frees are
deferred or slow, never lost), trim, the release threshold and close between fast
operations, threads and garbage collections inside fast operations, a seeded mix that
agrees with a model, and every native call it makes through the area failing in turn
(the slab's allocation and release, each stream operation): the documented error, the
block or slab kept where it was, nothing leaked after a retry or close.

The area is :class:`tests.support.streams.StreamedHost` (host memory with a recording,
fault-injecting stream runtime); the same transitions on the HIP double are in
backends/hip/tests/test_hip_kernel.py and its fault table."""

from __future__ import annotations

import gc
import itertools
import random
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import aml_core
from aml_core import Buffer, Pool
from aml_core._buffer import PoolKernel
from aml_core.errors import AMLError, AMLFailure, AMLMemoryError, AMLTypeError, AMLValueError, ErrorCode
from aml_core.pool import PoolConfig, PoolOptions
from aml_core.testing.lifetime import catch_unraisable
from tests.support.streams import S1, S2, S3, ForeignStream, StreamedHost

KiB = 1 << 10
MiB = 1 << 20


@pytest.fixture
def pool(host: StreamedHost) -> Iterator[Pool]:
    p = aml_core.pool(host)
    yield p
    p.close()
    assert host.stats.live_mappings == 0


@pytest.fixture
def one_block_slabs(host: StreamedHost) -> Iterator[Pool]:
    """A pool whose slabs hold one 4 KiB block: a block freed on a stream is the only
    one of its size, so another stream gets it only through the hand-over."""
    p = aml_core.pool(host, small_slab=4096, small_max=4096)
    yield p
    p.close()


def _kernel(pool: Pool) -> PoolKernel:
    kernel = pool._pool_kernel
    assert kernel is not None
    assert kernel is pool._kernel
    return kernel


def _fast(kernel: PoolKernel) -> tuple[int, int]:
    return (kernel.fast_mmaps, kernel.fast_munmaps)


def _describe(buf: Buffer) -> tuple[object, ...]:
    return (
        buf.ptr,
        buf.size,
        buf.device_ptr,
        buf.host_accessible,
        buf.readonly,
        buf.__dlpack_device__(),
        buf.device,
        buf.kind,
        type(buf),
        buf.area,
    )


def _consistent(pool: Pool, live: dict[int, Buffer] | None = None) -> None:
    """The statistics agree with each other (and with the live buffers, if given)."""
    s = pool.pool_stats
    assert s.bytes_reserved >= s.block_bytes >= s.bytes_in_use >= 0
    assert s.bytes_cached == s.bytes_reserved - s.block_bytes
    assert s.native_allocations - s.native_frees == s.slabs
    assert s.peak_bytes_in_use >= s.bytes_in_use
    if live is not None:  # nothing else runs: the area's own count agrees too
        assert s.bytes_in_use == pool.stats.bytes_in_use
        assert s.bytes_in_use == sum(b.size for b in live.values())
        assert _kernel(pool).live_blocks() == len(live)


# -- the compiled path: hits in host order ------------------------------------------------
def test_the_pool_installs_its_kernel(pool: Pool) -> None:
    kernel = _kernel(pool)
    assert kernel.granule == 512
    assert kernel.keep_fast
    assert not kernel.held
    assert pool._native_allocator is None
    assert (kernel.live_blocks(), kernel.stream_cached()) == (0, {})


def test_repeated_size_takes_the_fast_path(pool: Pool, host: StreamedHost) -> None:
    first = pool.mmap(4096)  # a miss: a slab, through the slow path
    slow = _describe(first)
    kernel = _kernel(pool)
    assert (kernel.misses, kernel.hits, _fast(kernel)) == (1, 0, (0, 0))
    pool.munmap(first)  # compiled: the block goes on its host-order stack
    assert _fast(kernel) == (0, 1)
    for i in range(1, 1001):
        buf = pool.mmap(4096)
        assert _describe(buf) == slow  # the same block, the same buffer fields
        memoryview(buf)[:4] = i.to_bytes(4, "little")
        pool.munmap(buf)
        assert buf.freed
    assert _fast(kernel) == (1000, 1001)
    assert kernel.slow_munmaps == 0
    s = pool.pool_stats
    assert (s.pool_hits, s.pool_misses) == (1000, 1)
    assert (s.native_allocations, s.native_frees) == (1, 0)
    assert host.stats.total_maps == host.allocs == 1  # one slab, whatever the number of mmaps
    assert (s.bytes_in_use, s.block_bytes, s.peak_bytes_in_use) == (0, 0, 4096)
    assert pool.stats.total_maps == pool.stats.total_unmaps == 1001
    assert pool.stats.live_mappings == 0
    assert host.runtime.calls == []


def test_fast_path_rounds_to_the_granule_and_counts_requested_bytes(pool: Pool) -> None:
    pool.munmap(pool.mmap(1024))
    kernel = _kernel(pool)
    a = pool.mmap(1000)  # rounded to 1024: the cached block
    b = pool.mmap(600)  # rounded to 1024: split off the slab's free rest, in C too
    assert _fast(kernel) == (2, 1)
    assert (a.size, b.size, b.ptr - a.ptr) == (1000, 600, 1024)
    assert (kernel.requested, kernel.blocks, kernel.live_blocks()) == (1600, 2048, 2)
    s = pool.pool_stats
    assert (s.bytes_in_use, s.block_bytes, s.peak_bytes_in_use) == (1600, 2048, 1600)
    assert pool.stats.bytes_in_use == 1600
    c = pool.mmap(513)  # two granules
    assert c.ptr - b.ptr == 1024
    assert pool.pool_stats.block_bytes == 3072
    for buf in (a, b, c):
        pool.munmap(buf)
    assert _fast(kernel) == (3, 4)
    s = pool.pool_stats
    assert (s.bytes_in_use, s.block_bytes, s.peak_bytes_in_use) == (0, 0, 2113)
    pool.reset_peak()
    assert pool.pool_stats.peak_bytes_in_use == 0


def test_a_munmap_by_pointer_takes_the_fast_path(pool: Pool) -> None:
    buf = pool.mmap(8192)
    pool.munmap(buf.ptr, 8192)
    again = pool.mmap(8192)
    assert again.ptr == buf.ptr
    pool.munmap(again.ptr)
    assert _fast(_kernel(pool)) == (1, 2)


def test_a_miss_takes_the_slow_path_and_other_sizes_are_best_fits_in_c(
    pool: Pool, host: StreamedHost
) -> None:
    kernel = _kernel(pool)
    pool.munmap(pool.mmap(4096))
    a = pool.mmap(8192)  # nothing of this size cached: the best fit in the slab, still in C
    assert (kernel.fast_mmaps, kernel.misses, host.allocs) == (1, 1, 1)
    b = pool.mmap(2 * MiB)  # a large block: the large heap is empty, a new slab (slow)
    assert (kernel.fast_mmaps, kernel.misses, host.allocs) == (1, 2, 2)
    c = pool.mmap(MiB)  # the rest of the medium slab: a best fit in C
    assert (kernel.fast_mmaps, kernel.misses, host.allocs) == (2, 2, 2)
    for buf in (a, b, c):
        pool.munmap(buf)
    s = pool.pool_stats  # reading the stats coalesces the stacks
    assert (s.pool_hits, s.pool_misses) == (2, 2)
    assert (s.bytes_in_use, s.block_bytes, s.largest_free_block) == (0, 0, 20 * MiB)  # a medium slab
    assert s.fragmentation == 1.0 - 20 * MiB / (22 * MiB)


def test_options_and_a_held_mutex_take_the_slow_path(pool: Pool) -> None:
    kernel = _kernel(pool)
    pool.munmap(pool.mmap(4096))
    buf = pool.mmap(4096, {})  # options the kernel does not serve: the Python path, a hit
    assert kernel.fast_mmaps == 0
    pool.munmap(buf)  # its free is the kernel's
    assert _fast(kernel) == (0, 2)
    with pool._kernel:  # the holder's own calls (a finalizer's) go through the slow path
        assert kernel.held
        with pool._kernel:  # re-entrant for its holder
            assert kernel.held
        buf = pool.mmap(4096)
        pool.munmap(buf)
    assert not pool._kernel.held
    assert _fast(kernel) == (0, 2)
    assert kernel.slow_munmaps == 1
    s = pool.pool_stats
    assert (s.pool_hits, s.pool_misses, s.bytes_in_use, s.block_bytes) == (2, 1, 0, 0)


# -- the mutex ----------------------------------------------------------------------------
def test_another_threads_mmap_and_munmap_wait_for_the_holder(pool: Pool) -> None:
    """A thread holding the mutex makes another thread's fast mmap and munmap wait
    (with the GIL released: the holder goes on running Python), not corrupt the state."""
    kernel = _kernel(pool)
    pool.munmap(pool.mmap(4096))
    victim = pool.mmap(8192)
    done = threading.Event()
    got: list[Buffer] = []
    errors: list[BaseException] = []

    def other() -> None:
        try:
            got.append(pool.mmap(4096))
            pool.munmap(victim)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    with pool._kernel:
        t = threading.Thread(target=other)
        t.start()
        assert not done.wait(0.3)  # it waits for the mutex, and the GIL is free meanwhile
        assert kernel.live_blocks() == 1
        assert _fast(kernel) == (1, 1)
        s = pool.pool_stats  # the holder's own work, under the mutex
        assert (s.bytes_in_use, s.block_bytes) == (8192, 8192)
    t.join(10)
    assert done.is_set()
    assert not errors, errors
    assert _fast(kernel) == (2, 2)  # both on the fast path once the mutex was free
    (buf,) = got
    assert kernel.live_blocks() == 1
    pool.munmap(buf)
    _consistent(pool, {})


def test_the_holders_finalizers_defer_their_frees(pool: Pool) -> None:
    """A pooled buffer dropped by the thread holding the mutex (its finalizer runs
    inside the kernel's slow path) is freed when the holder leaves: nothing lost."""
    kernel = _kernel(pool)
    bufs = [pool.mmap(n) for n in (4096, 4096, 100, 3 * MiB)]
    ptrs = {b.ptr for b in bufs}
    with pool._kernel:
        bufs.clear()  # the finalizers run now, inside: each free waits
        gc.collect()
        assert kernel.live_blocks() == 4
    assert kernel.live_blocks() == 0
    assert pool.stats.live_mappings == 0
    _consistent(pool, {})
    again = [pool.mmap(n) for n in (4096, 4096, 100, 3 * MiB)]
    assert {b.ptr for b in again} == ptrs  # the same blocks, served from the stacks
    for b in again:
        pool.munmap(b)


def test_another_threads_finalizer_defers_while_a_python_holder_has_the_mutex(pool: Pool) -> None:
    """A finalizer never waits for a holder that runs Python (it may be waiting for what
    the finalizer's thread holds): its free is deferred, and runs when the holder leaves."""
    kernel = _kernel(pool)
    box = [pool.mmap(4096)]
    done = threading.Event()

    def drop() -> None:
        box.clear()  # the finalizer defers its free: it does not wait
        done.set()

    with pool._kernel:
        t = threading.Thread(target=drop)
        t.start()
        assert done.wait(10)
        t.join(10)
        assert kernel.live_blocks() == 1  # deferred, not freed
    assert kernel.live_blocks() == 0  # freed when the holder left (the drain, in C)
    _consistent(pool, {})


# -- streams: frees on the fast path, reuse on the same stream, hand-over on another ------
def test_stream_frees_take_the_fast_path_onto_their_streams_stack(pool: Pool, host: StreamedHost) -> None:
    kernel = _kernel(pool)
    pool.munmap(pool.mmap(4096))  # one block on the host-order stack
    a = pool.mmap(4096)  # fast, host order
    pool.munmap(a, stream=S1)  # fast: onto S1's stack
    assert _fast(kernel) == (1, 2)
    assert kernel.stream_cached() == {(S1, 4096): [a.ptr]}
    b = pool.mmap(4096, stream=S1)  # reused at once on S1, in C
    assert b.ptr == a.ptr
    assert _fast(kernel) == (2, 2)
    assert kernel.stream_cached() == {}
    pool.munmap(b)  # a plain munmap frees on the stream it was allocated on
    assert kernel.stream_cached() == {(S1, 4096): [a.ptr]}
    c = pool.mmap(4096)  # host order: not a's block, which S1 may still use
    assert c.ptr != a.ptr
    pool.munmap(c)
    assert _fast(kernel) == (3, 4)
    assert kernel.slow_munmaps == 0
    assert host.runtime.calls == []  # no event, no synchronization
    s = pool.pool_stats
    assert s.bytes_cached == s.bytes_reserved  # blocks on a stream's stack are cached
    assert (s.pool_hits, s.pool_misses) == (3, 1)


@pytest.mark.parametrize(
    "spell",
    [
        lambda pool, s: pool.mmap(4096, stream=s),
        lambda pool, s: pool.mmap(4096, {"stream": s}),  # deprecated spellings, for one version
        lambda pool, s: pool.mmap(4096, PoolOptions(stream=s)),
    ],
    ids=["keyword", "dict", "PoolOptions"],
)
@pytest.mark.filterwarnings("ignore:the mmap option 'stream' is deprecated:DeprecationWarning")
def test_stream_requests_take_the_fast_path(pool: Pool, spell: Any) -> None:
    kernel = _kernel(pool)
    pool.munmap(spell(pool, S1))  # the first stream request: the slow path
    assert _fast(kernel) == (0, 1)
    buf = spell(pool, S1)
    assert buf.stream == S1
    assert _fast(kernel) == (1, 1)
    pool.munmap(buf)
    host_order = spell(pool, None)  # stream None: host order, in C
    assert kernel.fast_mmaps == 2
    assert host_order.ptr != buf.ptr
    pool.munmap(host_order)
    foreign = pool.mmap(4096, stream=ForeignStream(S1))  # any stream object: converted once, in C too
    assert foreign.ptr == buf.ptr  # the same stream's block
    assert foreign.stream == S1
    assert kernel.fast_mmaps == 3
    pool.munmap(foreign)
    _consistent(pool, {})


def test_a_stream_request_takes_a_host_order_block_at_once(pool: Pool, host: StreamedHost) -> None:
    kernel = _kernel(pool)
    pool.munmap(pool.mmap(8192, stream=S3))  # the first stream request takes the slow path
    buf = pool.mmap(4096)
    pool.munmap(buf)
    on_s1 = pool.mmap(4096, stream=S1)  # host-order memory is free for any stream
    assert on_s1.ptr == buf.ptr
    assert kernel.fast_mmaps == 2
    pool.munmap(on_s1, stream=S2)  # munmap_on another stream: onto S2's stack
    assert kernel.stream_cached()[(S2, 4096)] == [buf.ptr]
    on_s2 = pool.mmap(4096, stream=S2)
    assert on_s2.ptr == buf.ptr
    assert (kernel.fast_mmaps, host.runtime.calls) == (3, [])
    pool.munmap(on_s2)


def test_another_stream_gets_a_block_only_through_the_event(
    one_block_slabs: Pool, host: StreamedHost
) -> None:
    pool = one_block_slabs
    kernel = _kernel(pool)
    a = pool.mmap(4096, stream=S1)
    pool.munmap(a)  # fast, onto S1's stack
    fast = _fast(kernel)
    b = pool.mmap(4096, stream=S2)  # the only free block is S1's: the slow path
    assert b.ptr == a.ptr
    assert _fast(kernel) == fast
    event = kernel.event
    assert event is not None
    assert host.runtime.calls == [
        ("event_create",),
        ("event_record", event, S1),
        ("stream_wait_event", S2, event),
    ]
    assert (host.allocs, kernel.misses, kernel.hits) == (1, 1, 1)
    assert kernel.stream_cached() == {}
    pool.munmap(b, stream=S3)
    c = pool.mmap(4096, stream=S1)  # S3's now: a second hand-over, the same event
    assert c.ptr == a.ptr
    assert host.runtime.calls[3:] == [("event_record", event, S3), ("stream_wait_event", S1, event)]
    pool.munmap(c)
    pool.close()
    assert host.runtime.ops()[-1] == "event_destroy"
    assert host.runtime.events == 0


def test_a_host_order_miss_reclaims_the_streams(one_block_slabs: Pool, host: StreamedHost) -> None:
    """Host order never takes a block a stream may still use: it synchronizes the
    streams holding blocks first, then reuses them (no new slab)."""
    pool = one_block_slabs
    kernel = _kernel(pool)
    a = pool.mmap(4096, stream=S1)
    b = pool.mmap(4096, stream=S2)
    pool.munmap(a)
    pool.munmap(b)
    c = pool.mmap(4096)
    assert c.ptr in (a.ptr, b.ptr)
    assert sorted(host.runtime.calls) == [("stream_synchronize", S1), ("stream_synchronize", S2)]
    assert kernel.stream_cached() == {}
    assert host.allocs == 2
    d = pool.mmap(4096)  # the other one, now in host order: a hit in C
    assert {c.ptr, d.ptr} == {a.ptr, b.ptr}
    assert (kernel.fast_mmaps, host.allocs) == (1, 2)
    pool.munmap(c)
    pool.munmap(d)


def test_a_stream_miss_with_nothing_to_hand_over_reclaims_then_grows(pool: Pool, host: StreamedHost) -> None:
    kernel = _kernel(pool)
    blocks = [pool.mmap(512 * KiB, stream=S1) for _ in range(4)]  # the whole small slab
    for b in blocks:
        pool.munmap(b)
    big = pool.mmap(MiB, stream=S2)  # no 1 MiB block anywhere: S1 synchronized, coalesced
    assert host.runtime.calls == [("stream_synchronize", S1)]
    assert big.ptr == blocks[0].ptr
    assert host.allocs == 1
    huge = pool.mmap(4 * MiB, stream=S2)  # nothing held on a stream now: a new slab
    assert host.allocs == 2
    assert len(host.runtime.calls) == 1
    pool.munmap(big)
    pool.munmap(huge)
    assert kernel.stream_cached() == {(S2, MiB): [big.ptr], (S2, 4 * MiB): [huge.ptr]}
    assert pool.trim() == 2 * MiB + 20 * MiB  # S2 synchronized, every slab free
    assert host.runtime.calls[1:] == [("stream_synchronize", S2)]


@pytest.mark.parametrize(
    ("stream", "error"),
    [
        (-1, AMLValueError),
        (1 << 64, AMLValueError),
        ("s", AMLTypeError),
        (True, AMLTypeError),
        (1.0, AMLTypeError),
    ],
)
def test_bad_streams_are_refused_with_nothing_changed(
    pool: Pool, stream: object, error: type[AMLError]
) -> None:
    kernel = _kernel(pool)
    pool.munmap(pool.mmap(4096, stream=S1))  # the pool knows streams
    pool.munmap(pool.mmap(4096))
    before = (kernel.stream_cached(), kernel.hits, kernel.misses, kernel.blocks, kernel.requested)
    buf = pool.mmap(4096)
    with pytest.raises(error) as info:
        pool.mmap(4096, stream=stream)
    assert info.value.code is ErrorCode.EINVAL
    with pytest.raises(error):
        pool.munmap(buf, stream=stream)
    assert not buf.freed
    pool.munmap(buf)
    assert (kernel.stream_cached(), kernel.hits - 1, kernel.misses, kernel.blocks, kernel.requested) == before


# -- trim, release threshold, close ----------------------------------------------------------
def test_trim_in_between_fast_operations(pool: Pool, host: StreamedHost) -> None:
    kernel = _kernel(pool)
    for _ in range(3):
        pool.munmap(pool.mmap(4096))
        pool.munmap(pool.mmap(4096))  # fast
        assert pool.trim() == 2 * MiB  # flushes the stack, returns the slab
        assert host.stats.live_mappings == 0
    assert _fast(kernel) == (3, 6)
    s = pool.pool_stats
    assert (s.pool_hits, s.pool_misses, s.native_allocations, s.native_frees) == (3, 3, 3, 3)
    assert s.bytes_reserved == 0


def test_release_threshold_frees_through_the_slow_path(host: StreamedHost) -> None:
    with aml_core.pool(host, release_threshold=0) as p:
        kernel = _kernel(p)
        assert not kernel.keep_fast
        for _ in range(5):
            p.munmap(p.mmap(4096))
            assert host.stats.live_mappings == 0  # the slab went back at once
        assert _fast(kernel) == (0, 0)
        assert (kernel.slow_munmaps, p.pool_stats.native_frees) == (0, 5)


def test_a_release_threshold_keeps_the_cache_it_allows(host: StreamedHost) -> None:
    """Below the threshold nothing is released: mmaps are best fits in C, munmaps slow."""
    with aml_core.pool(host, release_threshold=2 * MiB) as p:
        kernel = _kernel(p)
        a = p.mmap(4096)
        p.munmap(a)
        assert host.stats.live_mappings == 1  # 2 MiB cached: within the threshold
        b = p.mmap(4096)
        assert b.ptr == a.ptr
        assert _fast(kernel) == (1, 0)
        big = p.mmap(3 * MiB)
        p.munmap(big)  # 20 MiB cached: past it, the medium slab goes
        assert host.stats.live_mappings == 1
        p.munmap(b)
        s = p.pool_stats
        assert (s.native_allocations, s.native_frees, s.bytes_reserved) == (2, 1, 2 * MiB)


def test_a_closed_area_is_refused_with_a_block_cached(pool: Pool, host: StreamedHost) -> None:
    buf = pool.mmap(4096)
    pool.munmap(buf)  # cached
    assert len(host.buffers()) == 1
    pool.close()
    host.close()
    with pytest.raises(AMLValueError, match="closed"):
        pool.mmap(4096)


def test_a_closed_pooled_area_is_refused_by_the_fast_path(host: StreamedHost) -> None:
    p = aml_core.pool(host)
    p.munmap(p.mmap(4096, stream=S1))
    p.munmap(p.mmap(4096))
    p.munmap(p.mmap(4096, stream=S1))
    fast = _fast(_kernel(p))
    host.close()  # closes the pool first: its slabs go with it
    with pytest.raises(AMLValueError, match="closed"):
        p.mmap(4096)
    with pytest.raises(AMLValueError, match="closed"):
        p.mmap(4096, stream=S1)
    assert _fast(_kernel(p)) == fast
    p.close()


def test_close_stops_the_fast_path(pool: Pool, host: StreamedHost) -> None:
    """close() turns the stacks off: a viewed buffer it leaves behind is freed, with its
    slab, through the slow path once the buffer is gone."""
    kernel = _kernel(pool)
    buf = pool.mmap(4096)
    on_stream = pool.mmap(4096, stream=S1)
    pool.munmap(pool.mmap(100))  # one on the host-order stack
    view = memoryview(buf)  # close() leaves a viewed buffer for its last view
    stream_view = memoryview(on_stream)
    fast = _fast(kernel)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        pool.close()
    assert not kernel.keep_fast
    assert kernel.live_blocks() == 2
    assert host.stats.live_mappings == 1  # the slab of the viewed blocks
    with pytest.raises(AMLValueError, match="closed"):
        pool.mmap(100)
    view.release()
    del view, buf
    gc.collect()
    assert host.stats.live_mappings == 1
    stream_view.release()
    del stream_view, on_stream
    gc.collect()
    assert kernel.live_blocks() == 0
    assert ("stream_synchronize", S1) in host.runtime.calls  # its slab goes after its stream
    assert host.stats.live_mappings == 0
    assert _fast(kernel) == fast


def test_a_failed_buffer_construction_leaves_the_block_cached(
    pool: Pool, host: StreamedHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel takes the block, then the buffer's construction fails: the block goes
    back where it was taken from, the counters are undone, and the error is raised."""

    class Exploding(Buffer):
        def __new__(cls, *args: Any, **kwargs: Any) -> Exploding:
            raise RuntimeError("no buffer (injected)")

    pool.munmap(pool.mmap(4096, stream=S1))  # a block on S1's stack
    host_order = pool.mmap(4096)
    pool.munmap(host_order)  # and one on the host-order stack
    kernel = _kernel(pool)
    before = (kernel.hits, kernel.misses, kernel.requested, kernel.blocks, kernel.fast_mmaps)
    cached = kernel.stream_cached()
    monkeypatch.setattr(Pool, "buffer_type", Exploding)
    for stream in (None, S1):
        with pytest.raises(RuntimeError, match="injected"):
            pool.mmap(4096, stream=stream)
        assert (kernel.hits, kernel.misses, kernel.requested, kernel.blocks, kernel.fast_mmaps) == before
        assert kernel.live_blocks() == 0
        assert kernel.stream_cached() == cached
    # S2 takes the host-order block; it goes back onto S2's stack, as if freed there
    with pytest.raises(RuntimeError, match="injected"):
        pool.mmap(4096, stream=S2)
    assert kernel.stream_cached() == {**cached, (S2, 4096): [host_order.ptr]}
    monkeypatch.undo()
    a, b = pool.mmap(4096, stream=S2), pool.mmap(4096, stream=S1)
    assert (a.ptr, [b.ptr]) == (host_order.ptr, cached[(S1, 4096)])
    assert kernel.misses == before[1]  # every block was still cached
    pool.munmap(a)
    pool.munmap(b)
    _consistent(pool, {})
    # The slow path (a stream object the kernel does not read; a miss that grows): the
    # block goes back as well, and the new slab stays cached.
    monkeypatch.setattr(Pool, "buffer_type", Exploding)
    with pytest.raises(RuntimeError, match="injected"):
        pool.mmap(3 * MiB, stream=ForeignStream(S1))
    monkeypatch.undo()
    assert (kernel.live_blocks(), kernel.requested, kernel.blocks) == (0, 0, 0)
    assert (kernel.reserved, host.allocs) == (22 * MiB, 2)
    big = pool.mmap(3 * MiB, stream=S1)  # its block, on S1's stack: no new slab
    assert host.allocs == 2
    pool.munmap(big)
    _consistent(pool, {})


# -- threads, garbage collection, a model -----------------------------------------------------
@pytest.mark.parametrize("streams", [False, True], ids=["host order", "streams"])
def test_threads_over_the_fast_path_keep_blocks_and_stats_apart(
    pool: Pool, host: StreamedHost, streams: bool
) -> None:
    """Threads allocate and free sizes that are mostly cached (the compiled path) and
    sometimes not (the slow path), on their own stream if ``streams`` (freeing some on
    another's: the hand-over), while one thread trims and reads the statistics; each
    thread stamps its buffers and checks the stamp before freeing: no block is ever
    handed to two live buffers."""
    sizes = [512, 1000, 4096, 4096, 4096, 8192, 64 * KiB, 3 * MiB]
    for b in [pool.mmap(n) for n in sizes]:  # warm the stacks: one block of each size
        pool.munmap(b)
    errors: list[BaseException] = []
    stop = threading.Event()
    rounds = 2000
    handles = [S1, S2, S3, 0x4000]

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        stream = handles[seed] if streams else None
        held: list[tuple[Buffer, bytes]] = []
        try:
            for i in range(rounds):
                if held and (len(held) > 6 or rng.random() < 0.5):
                    buf, stamp = held.pop(rng.randrange(len(held)))
                    assert bytes(memoryview(buf)[:8]) == stamp
                    if streams and rng.random() < 0.2:
                        pool.munmap(buf, stream=rng.choice(handles))
                    else:
                        pool.munmap(buf)
                else:
                    buf = pool.mmap(rng.choice(sizes), stream=stream)
                    stamp = seed.to_bytes(4, "little") + i.to_bytes(4, "little")
                    memoryview(buf)[:8] = stamp
                    held.append((buf, stamp))
            for buf, stamp in held:
                assert bytes(memoryview(buf)[:8]) == stamp
                pool.munmap(buf)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def trimmer() -> None:
        try:
            while not stop.is_set():
                _consistent(pool)
                pool.trim(4 * MiB)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    side = threading.Thread(target=trimmer)
    side.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    stop.set()
    side.join(timeout=120)
    assert not errors, errors
    kernel = _kernel(pool)
    assert kernel.fast_mmaps > 0
    assert kernel.fast_munmaps > 0
    assert not kernel.held
    _consistent(pool, {})
    s = pool.pool_stats
    assert (s.bytes_in_use, s.block_bytes) == (0, 0)
    assert pool.stats.live_mappings == 0
    assert s.pool_hits + s.pool_misses == pool.stats.total_maps == pool.stats.total_unmaps
    assert s.native_allocations - s.native_frees == host.stats.live_mappings == s.slabs
    if streams:
        assert any(c[0] == "stream_synchronize" for c in host.runtime.calls)
    pool.trim()
    assert host.stats.live_mappings == 0
    assert pool.pool_stats.bytes_reserved == 0
    assert kernel.stream_cached() == {}


@pytest.mark.parametrize("streams", [False, True], ids=["host order", "streams"])
def test_mixed_fast_and_slow_operations_agree_with_a_model(
    pool: Pool, host: StreamedHost, streams: bool
) -> None:
    """A seeded sequence of mmaps and munmaps of several sizes (on streams and freed on
    others if ``streams``), trims, stats reads and locked (slow-path) operations: the
    pool's counters follow a model of the live buffers, live buffers never overlap and
    keep what was written to them."""
    rng = random.Random(7)
    sizes = [512, 700, 4096, 4096, 12 * KiB, 1 * MiB, 2 * MiB, 11 * MiB]
    stream_choices: list[int | None] = [None, S1, S2] if streams else [None]
    live: dict[int, Buffer] = {}
    stamps: dict[int, int] = {}
    for step in range(2000):
        r = rng.random()
        if r < 0.45 or not live:
            stream = rng.choice(stream_choices)
            if rng.random() < 0.1:
                with pool._kernel:
                    buf = pool.mmap(rng.choice(sizes), stream=stream)
            else:
                buf = pool.mmap(rng.choice(sizes), stream=stream)
            assert buf.ptr not in live
            live[buf.ptr] = buf
            stamps[buf.ptr] = step % 251
            memoryview(buf)[buf.size - 1] = step % 251
        elif r < 0.9:
            buf = live.pop(rng.choice(list(live)))
            assert memoryview(buf)[buf.size - 1] == stamps.pop(buf.ptr)
            if streams and rng.random() < 0.3:
                pool.munmap(buf, stream=rng.choice([S1, S2]))
            else:
                pool.munmap(buf if rng.random() < 0.5 else buf.ptr)
        elif r < 0.95:
            pool.trim(rng.choice([0, 2 * MiB]))
        else:
            _consistent(pool, live)
        spans = sorted((b.ptr, b.ptr + b.size) for b in live.values())
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), step
    _consistent(pool, live)
    s = pool.pool_stats
    assert s.pool_hits + s.pool_misses == pool.stats.total_maps
    assert _kernel(pool).fast_mmaps > 100
    for buf in live.values():
        pool.munmap(buf)
    pool.trim()
    assert host.stats.live_mappings == 0
    s = pool.pool_stats
    assert (s.bytes_in_use, s.block_bytes, s.bytes_reserved) == (0, 0, 0)


def test_collections_inside_fast_operations_lose_no_block(pool: Pool, host: StreamedHost) -> None:
    """The garbage collector may run inside a fast operation (making a buffer is an
    allocation it tracks) and run code that frees pooled buffers (on a stream, too) or
    coalesces the stacks (a finalizer, here a gc callback): every block is still
    accounted for."""
    sizes = [512, 1536, 4096, 8192, 16 * KiB]
    pending: list[Buffer] = []
    rng = random.Random(3)
    calls = 0

    def callback(phase: str, info: dict[str, int]) -> None:
        nonlocal calls
        if phase != "start":
            return
        calls += 1
        if pending:
            buf = pending.pop()
            if calls % 3:
                pool.munmap(buf)
            else:
                pool.munmap(buf, stream=S2)
        if calls % 7 == 0 and not _kernel(pool).held:
            _ = pool.pool_stats  # coalesces the host-order stacks

    threshold = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    gc.callbacks.append(callback)
    try:
        for i in range(3000):
            buf = pool.mmap(rng.choice(sizes), stream=S1 if i % 4 == 0 else None)
            if rng.random() < 0.5:
                pending.append(buf)
            else:
                pool.munmap(buf)
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
    assert calls > 0
    assert _kernel(pool).fast_mmaps > 0
    for buf in pending:
        pool.munmap(buf)
    _consistent(pool, {})
    s = pool.pool_stats
    assert s.pool_hits + s.pool_misses == pool.stats.total_maps == pool.stats.total_unmaps
    assert pool.trim() == s.bytes_reserved  # every block came back: every slab is free
    assert host.stats.live_mappings == 0


# -- faults at every native call the kernel makes through the area -----------------------------
def test_enomem_releases_the_cache_and_retries_once(pool: Pool, host: StreamedHost) -> None:
    kernel = _kernel(pool)
    pool.munmap(pool.mmap(4096))  # a small slab, wholly free
    host.fail_allocs = 1
    big = pool.mmap(3 * MiB)  # ENOMEM: the free slab is released, the retry succeeds
    assert (host.allocs, host.frees) == (2, 1)
    s = pool.pool_stats
    assert (s.native_allocations, s.native_frees, s.slabs, s.bytes_reserved) == (2, 1, 1, 20 * MiB)
    assert (kernel.misses, kernel.live_blocks()) == (2, 1)
    host.fail_allocs = 2  # ENOMEM twice: released nothing more to give, the error is raised
    with pytest.raises(AMLMemoryError, match="injected"):
        pool.mmap(30 * MiB)
    assert host.fail_allocs == 1  # no retry: nothing was cached to release
    host.fail_allocs = 0
    assert pool.pool_stats == s
    pool.munmap(big)
    pool.munmap(pool.mmap(4096))
    host.fail_allocs = 2  # released the cache, failed again: raised, the cache stays released
    with pytest.raises(AMLMemoryError, match="injected"):
        pool.mmap(30 * MiB)
    assert host.fail_allocs == 0
    s = pool.pool_stats
    assert (s.bytes_reserved, s.slabs, kernel.live_blocks()) == (0, 0, 0)
    assert host.stats.live_mappings == 0


def test_enomem_stays_the_error_when_the_release_fails_too(pool: Pool, host: StreamedHost) -> None:
    """ENOMEM, then releasing the cache fails: ENOMEM is raised with the release's error
    as a note (the first failure's error, as everywhere); what could go went, and the
    retry ran if something did."""
    kernel = _kernel(pool)
    pool.munmap(pool.mmap(4096))  # a small slab
    host.fail_allocs, host.fail_frees = 1, 1
    with pytest.raises(AMLMemoryError, match="injected") as info:
        pool.mmap(3 * MiB)
    assert any("releasing the pool's cached memory failed" in n for n in info.value.__notes__)
    assert (host.fail_allocs, host.allocs, kernel.native_frees) == (0, 1, 0)
    assert pool.pool_stats.slabs == 1  # kept, still the pool's
    pool.munmap(pool.mmap(3 * MiB))  # a medium slab
    host.fail_allocs, host.fail_frees = 1, 1  # the medium slab's free fails, the small one's not
    big = pool.mmap(30 * MiB)  # something was released: the retry runs, and succeeds
    assert (host.allocs, kernel.native_frees) == (3, 1)
    pool.munmap(big)
    with aml_core.pool(host, limit=3 * MiB) as limited:
        limited.munmap(limited.mmap(4096))
        host.fail_frees = 1
        with pytest.raises(AMLMemoryError, match="limit") as info:
            limited.mmap(2 * MiB)
        assert any("releasing the pool's cached memory failed" in n for n in info.value.__notes__)
        assert limited.pool_stats.slabs == 1


def test_enomem_reclaims_the_streams_before_it_releases(pool: Pool, host: StreamedHost) -> None:
    pool.munmap(pool.mmap(4096, stream=S1))  # a free slab, its block on S1's stack
    host.fail_allocs = 1
    big = pool.mmap(3 * MiB)  # the host order has no 3 MiB: grows; ENOMEM releases the slab
    assert host.runtime.calls == [("stream_synchronize", S1)]
    assert (host.allocs, host.frees) == (2, 1)
    pool.munmap(big)


def test_the_limit_releases_the_cache_then_refuses(host: StreamedHost) -> None:
    with aml_core.pool(host, limit=4 * MiB) as p:
        kernel = _kernel(p)
        a = p.mmap(MiB)  # a small slab of 2 MiB
        p.munmap(p.mmap(1536 * KiB))  # a slab of its own (the small one has 1 MiB free)
        assert p.pool_stats.bytes_reserved == 2 * MiB + 1536 * KiB
        b = p.mmap(2 * MiB)  # past the limit: the free slab released, then a slab of just 2 MiB
        assert (host.frees, p.pool_stats.bytes_reserved) == (1, 4 * MiB)
        with pytest.raises(AMLMemoryError, match="limit") as info:
            p.mmap(MiB + 512)
        assert info.value.code is ErrorCode.ENOMEM
        small = p.mmap(MiB)  # what is left fits
        assert kernel.live_blocks() == 3
        for buf in (a, b, small):
            p.munmap(buf)
        _consistent(p, {})


def test_a_failed_slab_release_keeps_it_cached_and_a_retry_frees_it(pool: Pool, host: StreamedHost) -> None:
    pool.munmap(pool.mmap(4096))  # a small slab
    pool.munmap(pool.mmap(3 * MiB))  # a medium slab
    host.fail_frees = 1
    with pytest.raises(AMLFailure, match="injected"):
        pool.trim()  # the larger slab fails first; the other is still released
    s = pool.pool_stats
    assert (s.slabs, s.bytes_reserved, s.native_frees) == (1, 20 * MiB, 1)
    assert host.stats.live_mappings == 1
    (slab,) = host.buffers()
    assert host._held(slab)  # still the pool's
    big = pool.mmap(3 * MiB)  # and still served from
    assert host.allocs == 2
    pool.munmap(big)
    assert pool.trim() == 20 * MiB
    assert host.stats.live_mappings == 0
    _consistent(pool, {})


def test_a_failed_slab_release_in_close_is_the_areas_to_free(host: StreamedHost) -> None:
    p = aml_core.pool(host)
    buf = p.mmap(4096)
    host.fail_frees = 1
    with pytest.raises(AMLFailure, match="injected"):
        p.close()
    assert p.closed
    assert buf.freed
    (slab,) = host.buffers()
    assert not host._held(slab)  # the area's again
    p.close()  # idempotent: nothing left for the pool
    host.close()
    assert host.stats.live_mappings == 0
    assert host.frees == host.allocs == 1


@pytest.mark.parametrize("op", ["event_create", "event_record", "stream_wait_event"])
def test_a_failed_hand_over_keeps_the_block_on_its_stream(
    one_block_slabs: Pool, host: StreamedHost, op: str
) -> None:
    """Issue 20: a block taken from another stream's stack is popped only once the event
    ops succeeded; a failure leaves it there (counted cached), and the retry hands it over."""
    pool = one_block_slabs
    kernel = _kernel(pool)
    a = pool.mmap(4096, stream=S1)
    pool.munmap(a)
    before = (kernel.stream_cached(), kernel.blocks, kernel.requested, kernel.hits, kernel.misses)
    host.runtime.fail[op] = 1
    with pytest.raises(AMLFailure, match="injected"):
        pool.mmap(4096, stream=S2)
    assert host.runtime.calls[-1][0] == op + " failed"
    assert (kernel.stream_cached(), kernel.blocks, kernel.requested, kernel.hits, kernel.misses) == before
    assert kernel.live_blocks() == 0
    assert host.allocs == 1
    _consistent(pool, {})
    b = pool.mmap(4096, stream=S2)  # the retry: the same block, handed over
    assert b.ptr == a.ptr
    assert host.allocs == 1
    assert host.runtime.ops()[-2:] == ["event_record", "stream_wait_event"]
    assert host.runtime.ops().count("event_create") == 1  # one event, kept for the retry
    pool.munmap(b)
    pool.close()
    assert host.runtime.events == 0


def test_a_failed_synchronize_keeps_the_streams_blocks(one_block_slabs: Pool, host: StreamedHost) -> None:
    pool = one_block_slabs
    kernel = _kernel(pool)
    a = pool.mmap(4096, stream=S1)
    pool.munmap(a)
    cached = kernel.stream_cached()
    host.runtime.fail["stream_synchronize"] = 2
    with pytest.raises(AMLFailure, match="injected"):
        pool.mmap(4096)  # host order: S1 must be synchronized first
    with pytest.raises(AMLFailure, match="injected"):
        pool.trim()
    assert kernel.stream_cached() == cached
    assert (host.allocs, pool.pool_stats.bytes_reserved) == (1, 4096)
    _consistent(pool, {})
    b = pool.mmap(4096)  # the retry synchronizes S1 and reuses its block
    assert b.ptr == a.ptr
    assert kernel.stream_cached() == {}
    pool.munmap(b)


def test_a_stream_destroyed_while_it_holds_blocks(host: StreamedHost) -> None:
    """Issue 20: blocks freed on a stream that is then destroyed can never be shown idle
    (its synchronize fails): trim releases everything else and raises the runtime's
    error, and so does every request that must first reclaim the streams; close() raises
    it too, frees the live buffers and releases every other slab, and gives the slabs of
    the streams' blocks back to the area, which frees them; a second close has nothing
    left to do."""
    p = aml_core.pool(host, small_slab=4096, small_max=4096)
    kernel = _kernel(p)
    dead = p.mmap(4096, stream=S1)
    other = p.mmap(4096, stream=S2)
    live = p.mmap(4096)
    p.munmap(p.mmap(4096))  # a slab with nothing on a stream
    p.munmap(dead)
    p.munmap(other)
    host.runtime.dead.add(S1)
    with pytest.raises(AMLFailure, match="destroyed"):
        p.trim()
    assert host.frees == 1  # the free slab went all the same
    with pytest.raises(AMLFailure, match="destroyed"):
        p.mmap(4 * MiB, stream=S3)  # nothing to hand over: reclaim first, which fails
    on_s2 = p.mmap(4096, stream=S2)  # what needs no reclaim still works
    p.munmap(on_s2)
    assert (kernel.stream_cached(), host.allocs) == ({(S1, 4096): [dead.ptr], (S2, 4096): [other.ptr]}, 4)
    with pytest.raises(AMLFailure, match="destroyed"):
        p.close()
    assert p.closed
    assert live.freed
    assert host.frees == 2  # live's slab
    assert host.stats.live_mappings == 2  # the slabs of the streams' blocks: the area's now
    assert not any(host._held(b) for b in host.buffers())
    p.close()  # nothing more: the event was destroyed (none was made)
    host.close()
    assert host.stats.live_mappings == 0
    assert host.frees == host.allocs == 4


def test_a_viewed_stream_block_freed_after_close_survives_a_failed_synchronize(host: StreamedHost) -> None:
    """A buffer close() left for its last view is freed after its stream; if that
    synchronize fails, the block stays live (the closed pool reports it) and a second
    close frees it and its slab."""
    p = aml_core.pool(host)
    kernel = _kernel(p)
    buf = p.mmap(4096, stream=S1)
    view = memoryview(buf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        p.close()
    assert host.stats.live_mappings == 1
    host.runtime.dead.add(S1)
    view.release()
    with catch_unraisable() as caught:  # the finalizer cannot raise: it reports
        del view, buf
        gc.collect()
    assert [type(c.exc) for c in caught] == [AMLFailure]
    del caught
    assert kernel.live_blocks() == 1  # kept, not lost
    assert p.stats.live_mappings == 1
    host.runtime.dead.clear()
    p.close()  # retries the free
    assert kernel.live_blocks() == 0
    assert p.stats.live_mappings == 0
    assert host.stats.live_mappings == 0
    assert host.frees == host.allocs == 1


def test_bad_calls_of_the_kernel_are_refused(pool: Pool) -> None:
    kernel = _kernel(pool)
    with pytest.raises(TypeError, match="over an aml area"):
        PoolKernel(object(), PoolConfig())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a PoolConfig"):
        PoolKernel(pool.area, {"granule": 3})  # type: ignore[arg-type]
    with pool._kernel, pytest.raises(AMLValueError, match="not a live block"):
        kernel.free(0x1234)
    with pytest.raises(AMLValueError, match="not a live block"):
        kernel.block(0x1234)
    pool.munmap(pool.mmap(10))
    with pytest.raises(ValueError, match="memory already"):
        kernel.set_segment(None, 0, 0, 1, (1, 0), 0)
    with pytest.raises(AMLValueError):
        pool.trim(-1)
    _consistent(pool, {})


# -- the live blocks' table (LiveMap: open addressing, grown by doubling) -----------------
def test_thousands_of_live_blocks_freed_in_any_order_stay_found(pool: Pool) -> None:
    """The kernel finds each live block by its address while its table grows past its
    first 64 slots and entries are removed in a shuffled order (each removal shifts the
    entries whose probe passed it): every free takes the block its buffer names, by
    Buffer and by pointer, and a freed address is no longer live."""
    rng = random.Random(31)
    kernel = _kernel(pool)
    live = {b.ptr: b for b in (pool.mmap(rng.choice((512, 1024, 4096))) for _ in range(3000))}
    assert kernel.live_blocks() == 3000
    _consistent(pool, live)
    order = list(live)
    rng.shuffle(order)
    for i, ptr in enumerate(order):
        buf = live.pop(ptr)
        assert kernel.block(ptr)[-1] == (buf.size + 511) // 512 * 512
        pool.munmap(ptr if i % 2 else buf)
        with pytest.raises(AMLValueError, match="is not a live block of this pool"):
            kernel.block(ptr)
        if i % 500 == 0:
            _consistent(pool, live)
            again = pool.mmap(buf.size)  # a hit reuses a freed block and enters it again
            assert kernel.block(again.ptr)[-1] >= buf.size
            pool.munmap(again)
    assert kernel.live_blocks() == 0
    _consistent(pool, {})


def test_a_hit_waits_for_the_kernel_held_by_another_thread() -> None:
    """A hit with the GIL skips the mutex only while nobody holds it: a thread holding the
    kernel (``with pool._kernel:``, the GIL released inside) is waited for."""
    import time

    from aml_core.host import HostArea

    with HostArea() as host:
        pool = aml_core.pool(host)
        pool.munmap(pool.mmap(4096))  # a cached block: the next mmap is a hit
        order: list[str] = []
        inside = threading.Event()

        def hold() -> None:
            with pool._kernel:
                inside.set()
                time.sleep(0.2)  # the GIL released, the mutex held
                order.append("released")

        holder = threading.Thread(target=hold)
        holder.start()
        inside.wait()
        buf = pool.mmap(4096)
        order.append("hit")
        holder.join()
        assert order == ["released", "hit"]
        assert buf.size == 4096
        assert not buf.freed
        buf.free()
        pool.close()
