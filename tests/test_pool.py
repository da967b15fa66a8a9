"""Pools over the host area: reuse, splitting and coalescing, size classes, the limit,
trimming, statistics, errors injected into the pooled area, and threads."""

from __future__ import annotations

import gc
import itertools
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aml_core
from aml_core import Buffer, Pool
from aml_core.errors import AMLFailure, AMLMemoryError, AMLTypeError, AMLValueError, ErrorCode
from aml_core.host import HostArea
from aml_core.testing import AreaConformance

MiB = 1 << 20


class FaultyArea(HostArea):
    """A host area whose allocations or frees fail on demand (injected errors)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_allocs = 0
        self.fail_frees = 0
        self.allocs = 0
        self.frees = 0

    def _allocate(self, size: int, options: Any) -> Buffer:
        if self.fail_allocs:
            self.fail_allocs -= 1
            raise AMLMemoryError(f"injected: no memory for {size} bytes")
        self.allocs += 1
        return super()._allocate(size, options)

    def _free(self, buffer: Buffer) -> None:
        if self.fail_frees:
            self.fail_frees -= 1
            raise AMLFailure("injected: munmap failed")
        self.frees += 1
        super()._free(buffer)


@pytest.fixture
def host() -> Iterator[FaultyArea]:
    area = FaultyArea()
    yield area
    area.close()


@pytest.fixture
def pool(host: FaultyArea) -> Iterator[Pool]:
    p = aml_core.pool(host)
    yield p
    p.close()


def _fill(buf: Buffer, byte: int) -> None:
    with memoryview(buf) as view:
        view[:] = bytes([byte]) * buf.size


def _holds(buf: Buffer, byte: int) -> bool:
    with memoryview(buf) as view:
        return bytes(view) == bytes([byte]) * buf.size


# -- the conformance kit ---------------------------------------------------------------------


class TestPoolOverHost(AreaConformance):
    @pytest.fixture
    def area(self) -> Iterator[Pool]:
        host = HostArea()
        p = aml_core.pool(host)
        yield p
        p.close()
        assert host.stats.live_mappings == 0
        host.close()


class TestPoolOverHostTight(AreaConformance):
    """Small slabs, a release threshold of 0 and a limit: every path that returns memory."""

    @pytest.fixture
    def area(self) -> Iterator[Pool]:
        host = HostArea()
        p = aml_core.pool(host, limit=64 * MiB, release_threshold=0, small_max=4096, small_slab=16384)
        yield p
        p.close()
        assert host.stats.live_mappings == 0
        host.close()


# -- blocks --------------------------------------------------------------------------------


def test_exact_size_stacks_are_coalesced_when_nothing_fits(pool: Pool, host: FaultyArea) -> None:
    bufs = [pool.mmap(256 * 1024) for _ in range(8)]  # the whole 2 MiB small slab
    for b in bufs:
        pool.munmap(b)  # onto the 256 KiB stack, not merged yet
    big = pool.mmap(MiB)  # no 1 MiB block anywhere: the stack is coalesced, no new slab
    assert big.ptr == bufs[0].ptr
    assert host.allocs == 1
    pool.munmap(big)


def test_freed_block_is_reused_without_a_native_call(pool: Pool, host: FaultyArea) -> None:
    a = pool.mmap(1000)
    ptr = a.ptr
    pool.munmap(a)
    b = pool.mmap(1000)
    assert b.ptr == ptr
    s = pool.pool_stats
    assert s.native_allocations == 1 == host.allocs
    assert (s.pool_hits, s.pool_misses) == (1, 1)
    pool.munmap(b)


def test_small_blocks_share_one_slab(pool: Pool, host: FaultyArea) -> None:
    bufs = [pool.mmap(700) for _ in range(100)]
    assert host.allocs == 1
    assert {pool.slab_of(b)[0] for b in bufs} == {pool.slab_of(bufs[0])[0]}
    assert [b.ptr for b in bufs] == [bufs[0].ptr + 1024 * i for i in range(100)]  # 700 -> 2 granules
    assert pool.pool_stats.block_bytes == 100 * 1024
    for b in bufs:
        pool.munmap(b)


def test_two_blocks_of_one_slab_are_never_confused(pool: Pool) -> None:
    """CuPy issue 9436: a pooled block is addressed by its own pointer, not its slab's."""
    np = pytest.importorskip("numpy")
    a = pool.mmap(4096)
    b = pool.mmap(4096)
    slab_a, off_a = pool.slab_of(a)
    slab_b, off_b = pool.slab_of(b)
    assert slab_a is slab_b
    assert slab_a is not None
    assert (off_a, off_b) == (0, 4096)
    assert b.ptr == slab_a.ptr + 4096 != a.ptr
    _fill(a, 0xAA)
    _fill(b, 0xBB)
    # every protocol hands out the block's address
    assert np.frombuffer(a, np.uint8).ctypes.data == a.ptr
    from_dl = np.from_dlpack(b)
    assert from_dl.ctypes.data == b.ptr
    assert int(from_dl[0]) == 0xBB
    del from_dl
    # an address inside b is not a mapping; b's own address is, and freeing it keeps a
    with pytest.raises(AMLValueError, match="inside the mapping"):
        pool.munmap(b.ptr + 8)
    pool.munmap(b.ptr, 4096)
    assert b.freed
    assert not a.freed
    assert _holds(a, 0xAA)
    c = pool.mmap(4096)  # b's block again: a new buffer, a's bytes still untouched
    assert c.ptr == b.ptr
    _fill(c, 0xCC)
    assert _holds(a, 0xAA)
    pool.munmap(a)
    assert _holds(c, 0xCC)
    pool.munmap(c)


def test_coalescing_rebuilds_the_slab(pool: Pool) -> None:
    bufs = [pool.mmap(64 * 1024) for _ in range(8)]
    for b in bufs[::2]:  # free every other block: 4 holes of 64 KiB
        pool.munmap(b)
    s = pool.pool_stats
    assert s.largest_free_block == 2 * MiB - 8 * 64 * 1024  # the slab's tail
    assert s.fragmentation > 0
    for b in bufs[1::2]:
        pool.munmap(b)
    s = pool.pool_stats
    assert s.largest_free_block == 2 * MiB == s.bytes_cached
    assert s.fragmentation == 0.0


def test_best_fit_takes_the_smallest_hole(pool: Pool) -> None:
    small, keep1, big, keep2 = (pool.mmap(n) for n in (4096, 512, 64 * 1024, 512))
    small_ptr, big_ptr = small.ptr, big.ptr
    pool.munmap(big)
    pool.munmap(small)
    assert pool.pool_stats.largest_free_block > 64 * 1024  # reading the stats coalesces the stacks
    got = pool.mmap(3000)  # fits both holes; the 4 KiB one is the best fit
    assert got.ptr == small_ptr
    got2 = pool.mmap(50_000)
    assert got2.ptr == big_ptr
    for b in (got, got2, keep1, keep2):
        pool.munmap(b)


def test_large_requests_use_their_own_slabs(pool: Pool, host: FaultyArea) -> None:
    small = pool.mmap(1000)
    big = pool.mmap(64 * MiB)
    assert pool.slab_of(big)[0] is not pool.slab_of(small)[0]
    assert pool.slab_of(big)[0].size == 64 * MiB  # type: ignore[union-attr]
    mid = pool.mmap(3 * MiB)  # a 20 MiB slab, split: the next medium request shares it
    mid2 = pool.mmap(3 * MiB)
    assert pool.slab_of(mid)[0] is pool.slab_of(mid2)[0]
    assert mid2.ptr == mid.ptr + 3 * MiB
    assert host.allocs == 3
    _fill(big, 0x5A)
    assert _holds(big, 0x5A)
    for b in (small, big, mid, mid2):
        pool.munmap(b)


def test_large_blocks_keep_short_tails(pool: Pool) -> None:
    a = pool.mmap(19 * MiB + 4096)  # a 20 MiB slab; the tail is below small_max: not split
    assert pool.pool_stats.block_bytes == 20 * MiB
    assert pool.stats.bytes_in_use == 19 * MiB + 4096
    pool.munmap(a)
    assert pool.pool_stats.block_bytes == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 3 * MiB), st.integers(0, 1000)), max_size=60))
def test_random_traces_keep_blocks_apart(ops: list[tuple[bool, int, int]]) -> None:
    with HostArea() as host, aml_core.pool(host, small_slab=MiB // 4, small_max=MiB // 8) as p:
        live: list[tuple[Buffer, int]] = []
        for n, (alloc, size, pick) in enumerate(ops):
            if alloc or not live:
                buf = p.mmap(size)
                with memoryview(buf) as view:
                    view[0] = view[-1] = n % 251
                live.append((buf, n % 251))
            else:
                p.munmap(live.pop(pick % len(live))[0])
            spans = sorted((b.ptr, b.ptr + b.size) for b, _ in live)
            assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
            s = p.pool_stats
            assert s.bytes_in_use == sum(b.size for b, _ in live) == p.stats.bytes_in_use
            assert s.block_bytes + s.bytes_cached == s.bytes_reserved
        for buf, mark in live:
            with memoryview(buf) as view:
                assert view[0] == view[-1] == mark
        for buf, _ in live:
            p.munmap(buf)
        s = p.pool_stats
        assert s.block_bytes == 0
        assert s.slabs > 1 or s.fragmentation == 0.0
        # everything coalesced: every slab is one free block, so trim returns it all
        assert p.trim() == s.bytes_reserved
        assert host.stats.live_mappings == 0


# -- limit, trim and release ---------------------------------------------------------------


def test_limit_below_one_block_is_an_error(host: FaultyArea) -> None:
    with pytest.raises(AMLValueError, match="smaller than one block"):
        aml_core.pool(host, limit=100)
    with pytest.raises(AMLValueError):
        aml_core.pool(host, limit=0)
    with pytest.raises(AMLValueError, match=r"fraction must be in \(0, 1\]"):
        aml_core.pool(host, limit=1.5)  # a float is a fraction of the nodes' memory
    with pytest.raises(AMLTypeError):
        aml_core.pool(host, limit="1 GiB")  # type: ignore[arg-type]


def test_limit_is_enomem_after_trimming(host: FaultyArea) -> None:
    with aml_core.pool(host, limit=4 * MiB) as p:
        a = p.mmap(MiB)  # a 2 MiB small slab
        p.munmap(a)
        assert p.pool_stats.bytes_reserved == 2 * MiB
        b = p.mmap(3 * MiB)  # 2 MiB cached + a 20 MiB slab > limit: trim, then just 3 MiB
        s = p.pool_stats
        assert s.bytes_reserved == 3 * MiB
        assert s.native_frees == 1
        with pytest.raises(AMLMemoryError) as info:
            p.mmap(2 * MiB)
        assert info.value.code is ErrorCode.ENOMEM
        assert isinstance(info.value, MemoryError)
        assert p.stats.live_mappings == 1
        small = p.mmap(512 * 1024)  # the small slab (2 MiB) no longer fits: a slab of the request
        assert p.pool_stats.bytes_reserved == 3 * MiB + 512 * 1024
        p.munmap(b)
        p.munmap(small)
        c = p.mmap(4 * MiB)  # both cached slabs go back first
        assert p.pool_stats.bytes_reserved == 4 * MiB
        p.munmap(c)


def test_area_enomem_trims_and_retries(pool: Pool, host: FaultyArea) -> None:
    a = pool.mmap(MiB)
    pool.munmap(a)  # one cached slab
    host.fail_allocs = 1
    b = pool.mmap(5 * MiB)  # the area fails once: the pool trims its cache and retries
    s = pool.pool_stats
    assert s.native_frees == 1
    assert s.bytes_reserved == 20 * MiB
    pool.munmap(b)


def test_area_enomem_with_nothing_cached_is_raised(pool: Pool, host: FaultyArea) -> None:
    host.fail_allocs = 1
    with pytest.raises(AMLMemoryError, match="injected"):
        pool.mmap(4096)
    assert pool.stats.live_mappings == 0
    assert pool.pool_stats.bytes_reserved == 0
    buf = pool.mmap(4096)  # the pool is unharmed
    pool.munmap(buf)


def test_trim_keeps_what_is_asked(pool: Pool, host: FaultyArea) -> None:
    bufs = [pool.mmap(n) for n in (64 * MiB, 32 * MiB, 1000)]
    live = pool.mmap(1000)  # keeps the small slab busy
    for b in bufs:
        pool.munmap(b)
    assert pool.pool_stats.bytes_reserved == 96 * MiB + 2 * MiB
    assert pool.trim(keep=40 * MiB) == 64 * MiB  # the largest slab first
    assert pool.trim() == 32 * MiB  # the small slab is in use: it stays
    s = pool.pool_stats
    assert s.bytes_reserved == 2 * MiB
    assert s.slabs == 1
    assert host.stats.live_mappings == 1
    pool.munmap(live)
    with pytest.raises(AMLValueError):
        pool.trim(keep=-1)


def test_release_threshold_returns_free_slabs(host: FaultyArea) -> None:
    with aml_core.pool(host, release_threshold=8 * MiB) as p:
        a = p.mmap(16 * MiB)  # slabs of their own size: nothing cached
        b = p.mmap(64 * MiB)
        c = p.mmap(4096)
        p.munmap(c)  # 2 MiB cached: under the threshold, kept
        assert p.pool_stats.slabs == 3
        p.munmap(b)  # over the threshold: the 64 MiB slab goes back
        assert p.pool_stats.slabs == 2
        p.munmap(a)
        s = p.pool_stats
        assert s.bytes_cached == 2 * MiB
        assert s.native_frees == 2


def test_failed_release_stays_cached(pool: Pool, host: FaultyArea) -> None:
    a = pool.mmap(64 * MiB)
    pool.munmap(a)
    host.fail_frees = 1
    with pytest.raises(AMLFailure, match="injected"):
        pool.trim()
    s = pool.pool_stats
    assert s.bytes_reserved == 64 * MiB
    assert s.native_frees == 0
    assert host.stats.live_mappings == 1
    assert pool.trim() == 64 * MiB  # tried again, it works
    assert host.stats.live_mappings == 0


def test_failed_threshold_release_warns(host: FaultyArea) -> None:
    with aml_core.pool(host, release_threshold=0) as p:
        a = p.mmap(4096)
        host.fail_frees = 1
        with pytest.warns(ResourceWarning, match="injected"):
            p.munmap(a)
        assert a.freed
        assert p.pool_stats.bytes_reserved == 2 * MiB  # still held, still counted
        b = p.mmap(4096)  # and reused
        p.munmap(b)
        assert p.pool_stats.bytes_reserved == 0


def test_failed_release_at_close_is_raised(host: FaultyArea) -> None:
    p = aml_core.pool(host)
    p.mmap(4096)
    host.fail_frees = 1
    with pytest.raises(AMLFailure, match="injected"):
        p.close()
    assert p.closed
    assert host.stats.live_mappings == 1  # the area still holds it: its own close frees it


# -- statistics --------------------------------------------------------------------------------


def test_stats_and_reset_peak(pool: Pool) -> None:
    a = pool.mmap(3000)
    b = pool.mmap(5 * MiB)
    s = pool.pool_stats
    assert (s.bytes_in_use, s.block_bytes) == (3000 + 5 * MiB, 3072 + 5 * MiB)
    assert s.bytes_reserved == 22 * MiB == s.peak_bytes_reserved
    assert s.bytes_cached == 22 * MiB - s.block_bytes
    pool.munmap(b)
    pool.trim()
    s = pool.pool_stats
    assert s.peak_bytes_in_use == 3000 + 5 * MiB
    assert s.peak_bytes_reserved == 22 * MiB
    pool.reset_peak()
    s = pool.pool_stats
    assert (s.peak_bytes_in_use, s.peak_bytes_reserved) == (3000, 2 * MiB)
    assert s.largest_free_block == 2 * MiB - 3072
    assert s.fragmentation == 0.0  # all the free memory is one block
    pool.munmap(a)


# -- lifetime and bad input ------------------------------------------------------------------


def test_pool_over_a_closed_area(host: FaultyArea) -> None:
    host.close()
    with pytest.raises(AMLValueError, match="closed"):
        aml_core.pool(host)


def test_area_closed_under_the_pool(host: FaultyArea) -> None:
    p = aml_core.pool(host)
    a = p.mmap(4096)
    p.munmap(a)
    host.close()
    with pytest.raises(AMLValueError, match="closed") as info:
        p.mmap(4096)  # even though a cached block would fit: its slab is gone
    assert info.value.code is ErrorCode.EINVAL
    p.close()


def test_pool_of_something_else() -> None:
    with pytest.raises(AMLTypeError):
        aml_core.pool(object())  # type: ignore[arg-type]


def test_close_frees_every_slab_and_keeps_the_area(host: FaultyArea) -> None:
    p = aml_core.pool(host)
    bufs = [p.mmap(n) for n in (100, 5000, 3 * MiB, 40 * MiB)]
    p.munmap(bufs[0])
    p.close()
    assert all(b.freed for b in bufs)
    assert host.stats.live_mappings == 0
    assert not host.closed
    assert p.pool_stats.bytes_reserved == 0
    with pytest.raises(AMLValueError, match="closed"):
        p.trim()


def test_viewed_buffer_outlives_close(host: FaultyArea) -> None:
    p = aml_core.pool(host)
    a = p.mmap(4096)
    b = p.mmap(4096)
    view = memoryview(a)
    view[:4] = b"live"
    with pytest.warns(ResourceWarning, match="still viewed"):
        p.close()
    assert b.freed
    assert host.stats.live_mappings == 1  # a's slab stays while a is viewed
    assert bytes(view[:4]) == b"live"
    view.release()
    del a
    gc.collect()
    assert host.stats.live_mappings == 0


def test_foreign_buffers_are_einval(pool: Pool, host: FaultyArea) -> None:
    direct = host.mmap(4096)
    with aml_core.pool(host) as other:
        theirs = other.mmap(4096)
        for foreign in (direct, theirs):
            with pytest.raises(AMLValueError) as info:
                pool.munmap(foreign)
            assert info.value.code is ErrorCode.EINVAL
        with pytest.raises(AMLValueError):
            pool.munmap(theirs.ptr)
        with pytest.raises(AMLValueError):
            host.munmap(theirs)  # nor can the area free a pooled block
        other.munmap(theirs)
    host.munmap(direct)


def test_bad_layouts() -> None:
    with HostArea() as host:
        with pytest.raises(AMLValueError, match="power of two"):
            aml_core.pool(host, granule=1000)
        with pytest.raises(AMLValueError):
            aml_core.pool(host, small_max=4 * MiB)  # larger than the small slab
        with pytest.raises(AMLValueError, match="expandable"):
            aml_core.pool(host, capacity=MiB)
        with pytest.raises(aml_core.AMLNotSupported, match="VirtualMemory"):
            aml_core.pool(host, expandable=True)


def test_slab_options_reach_the_area() -> None:
    with HostArea() as host, aml_core.pool(host, options={"alignment": 1 << 21}) as p:
        buf = p.mmap(100)
        slab, _ = p.slab_of(buf)
        assert slab is not None
        assert slab.ptr % (1 << 21) == 0
        p.munmap(buf)


def test_write_read_need_an_area_that_has_them(pool: Pool) -> None:
    buf = pool.mmap(64)
    with pytest.raises(aml_core.AMLNotSupported):
        pool.write(buf, b"x")
    pool.munmap(buf)


def test_pool_of_a_pool(host: FaultyArea) -> None:
    with aml_core.pool(host) as outer, aml_core.pool(outer, small_slab=64 * 1024, small_max=4096) as inner:
        bufs = [inner.mmap(100) for _ in range(10)]
        assert outer.stats.live_mappings == 1  # one 64 KiB slab from the outer pool
        for i, b in enumerate(bufs):
            _fill(b, i)
        assert all(_holds(b, i) for i, b in enumerate(bufs))
        for b in bufs:
            inner.munmap(b)


def test_repr(pool: Pool) -> None:
    assert "Pool over FaultyArea" in repr(pool)


# -- threads -----------------------------------------------------------------------------


def test_threads_mixed_sizes(pool: Pool) -> None:
    errors: list[BaseException] = []
    sizes = (64, 512, 4000, 65536, MiB, 3 * MiB)

    def work(seed: int) -> None:
        try:
            mine: list[Buffer] = []
            for i in range(200):
                if i % 3 == 2 and mine:
                    buf = mine.pop(0)
                    assert _holds(buf, (seed * 7 + buf.size) % 256)
                    pool.munmap(buf)
                    continue
                buf = pool.mmap(sizes[(seed + i) % len(sizes)])
                _fill(buf, (seed * 7 + buf.size) % 256)
                mine.append(buf)
            for buf in mine:
                assert _holds(buf, (seed * 7 + buf.size) % 256)
                pool.munmap(buf)
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    s = pool.pool_stats
    assert s.bytes_in_use == 0
    assert s.block_bytes == 0
    assert s.pool_hits + s.pool_misses == pool.stats.total_maps
    assert s.fragmentation == 0.0 or s.slabs > 1


def test_a_free_from_inside_the_pool_does_not_deadlock(pool: Pool) -> None:
    """A finalizer (a collected CuPy array, say) may free a block in a thread that holds
    the pool's lock already: the lock is re-entrant and the free completes."""
    bufs = [pool.mmap(4096) for _ in range(3)]
    done = threading.Event()

    def free_while_locked() -> None:
        with pool._kernel:
            pool.munmap(bufs[0])
            extra = pool.mmap(4096)  # and allocate, as a finalizer's code might
            pool.munmap(extra)
        done.set()

    worker = threading.Thread(target=free_while_locked)
    worker.start()
    worker.join(timeout=30)
    assert done.is_set()
    assert bufs[0].freed
    assert pool.stats.live_mappings == 2
    for b in bufs[1:]:
        pool.munmap(b)


def test_no_warning_on_normal_use(host: FaultyArea) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with aml_core.pool(host, release_threshold=MiB) as p:
            for n in (1, 10, 100, 10_000, MiB, 30 * MiB):
                with p.mmap(n) as buf:
                    _fill(buf, 1)


def test_errors_are_aml_errors(pool: Pool) -> None:
    with pytest.raises(AMLValueError):  # a pointer the pool did not map: EINVAL, as munmap says
        pool.munmap(12345)
