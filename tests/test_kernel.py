"""The pool's compiled fast path (aml_core._buffer.PoolCache): that it is taken for a
cached block of the requested size and only then, that its buffers are the Python
path's, that it keeps the pool's statistics, and that it is safe under threads and mixed
with the slow path (other sizes, trim, release_threshold, a held lock)."""

from __future__ import annotations

import gc
import itertools
import random
import threading
from collections.abc import Iterator

import pytest

import aml_core
from aml_core import Buffer, Pool
from aml_core.errors import AMLValueError
from aml_core.host import HostArea

KiB = 1 << 10
MiB = 1 << 20


@pytest.fixture
def host() -> Iterator[HostArea]:
    area = HostArea()
    yield area
    area.close()


@pytest.fixture
def pool(host: HostArea) -> Iterator[Pool]:
    p = aml_core.pool(host)
    yield p
    p.close()
    assert host.stats.live_mappings == 0


def _cache(pool: Pool) -> aml_core._buffer.PoolCache:
    cache = pool._pool_kernel
    assert cache is not None
    return cache


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


def test_the_pool_installs_its_cache(pool: Pool) -> None:
    cache = _cache(pool)
    assert cache is pool._kernel
    assert cache.granule == 512
    assert cache.keep_fast
    assert pool._native_allocator is None


def test_repeated_size_takes_the_fast_path(pool: Pool, host: HostArea) -> None:
    first = pool.mmap(4096)  # a miss: a slab, through the Python path
    slow = _describe(first)
    block = first.native
    pool.munmap(first)  # compiled: the block goes on its stack
    cache = _cache(pool)
    assert (cache.fast_mmaps, cache.fast_munmaps) == (0, 1)
    assert cache.fast[4096] == [block]
    for i in range(1, 1001):
        buf = pool.mmap(4096)
        assert _describe(buf) == slow  # the same block, the same buffer fields
        assert buf.native is block
        memoryview(buf)[:4] = i.to_bytes(4, "little")
        pool.munmap(buf)
        assert buf.freed
    assert (cache.fast_mmaps, cache.fast_munmaps) == (1000, 1001)
    s = pool.pool_stats
    assert (s.pool_hits, s.pool_misses) == (1000, 1)
    assert (s.native_allocations, s.native_frees) == (1, 0)
    assert host.stats.total_maps == 1  # one slab, whatever the number of mmaps
    assert (s.bytes_in_use, s.block_bytes, s.peak_bytes_in_use) == (0, 0, 4096)
    assert pool.stats.total_maps == 1001
    assert pool.stats.total_unmaps == 1001
    assert pool.stats.live_mappings == 0


def test_fast_path_rounds_to_the_granule_and_counts_requested_bytes(pool: Pool) -> None:
    pool.munmap(pool.mmap(1024))
    cache = _cache(pool)
    a = pool.mmap(1000)  # rounded to 1024: the cached block
    b = pool.mmap(600)  # rounded to 1024: no block left, a split through Python
    assert cache.fast_mmaps == 1
    assert a.size == 1000
    s = pool.pool_stats
    assert (s.bytes_in_use, s.block_bytes, s.peak_bytes_in_use) == (1600, 2048, 1600)
    assert pool.stats.bytes_in_use == 1600
    pool.munmap(a)
    pool.munmap(b)
    assert cache.fast_munmaps == 3
    s = pool.pool_stats
    assert (s.bytes_in_use, s.block_bytes) == (0, 0)
    pool.reset_peak()
    assert pool.pool_stats.peak_bytes_in_use == 0


def test_a_munmap_by_pointer_takes_the_fast_path(pool: Pool) -> None:
    buf = pool.mmap(8192)
    pool.munmap(buf.ptr, 8192)
    again = pool.mmap(8192)
    assert again.ptr == buf.ptr
    pool.munmap(again.ptr)
    assert (_cache(pool).fast_mmaps, _cache(pool).fast_munmaps) == (1, 2)


def test_options_and_a_held_lock_take_the_python_path(pool: Pool) -> None:
    cache = _cache(pool)
    pool.munmap(pool.mmap(4096))
    buf = pool.mmap(4096, {})  # options: the Python path, still a hit on the stack
    assert cache.fast_mmaps == 0
    pool.munmap(buf)
    with pool._kernel:  # the holder's own calls (a finalizer's) go through Python
        assert cache.busy == 1
        buf = pool.mmap(4096)
        pool.munmap(buf)
    assert cache.busy == 0
    assert (cache.fast_mmaps, cache.fast_munmaps) == (0, 2)
    s = pool.pool_stats
    assert (s.pool_hits, s.pool_misses, s.bytes_in_use, s.block_bytes) == (2, 1, 0, 0)


def test_a_miss_and_other_sizes_take_the_python_path(pool: Pool) -> None:
    cache = _cache(pool)
    pool.munmap(pool.mmap(4096))
    a = pool.mmap(8192)  # nothing cached of this size: the Python path splits the slab
    assert cache.fast == {4096: [cache.fast[4096][0]]}
    b = pool.mmap(2 * MiB)  # a large block: a miss, which coalesces the stacks first
    assert cache.fast == {}
    assert cache.fast_mmaps == 0
    pool.munmap(a)
    pool.munmap(b)
    assert sorted(cache.fast) == [8192, 2 * MiB]
    s = pool.pool_stats  # reading the stats coalesces the stacks
    assert cache.fast == {}
    assert (s.pool_hits, s.pool_misses) == (1, 2)
    assert (s.bytes_in_use, s.block_bytes, s.largest_free_block) == (0, 0, 20 * MiB)  # a medium slab


def test_trim_in_between_fast_operations(pool: Pool, host: HostArea) -> None:
    cache = _cache(pool)
    for _ in range(3):
        pool.munmap(pool.mmap(4096))
        pool.munmap(pool.mmap(4096))  # fast
        assert pool.trim() == 2 * MiB  # flushes the stack, returns the slab
        assert cache.fast == {}
        assert host.stats.live_mappings == 0
    assert (cache.fast_mmaps, cache.fast_munmaps) == (3, 6)
    s = pool.pool_stats
    assert (s.pool_hits, s.pool_misses, s.native_allocations, s.native_frees) == (3, 3, 3, 3)
    assert s.bytes_reserved == 0


def test_release_threshold_frees_through_python(host: HostArea) -> None:
    with aml_core.pool(host, release_threshold=0) as p:
        cache = _cache(p)
        assert not cache.keep_fast
        for _ in range(5):
            p.munmap(p.mmap(4096))
            assert host.stats.live_mappings == 0  # the slab went back at once
        assert (cache.fast_mmaps, cache.fast_munmaps) == (0, 0)
        assert p.pool_stats.native_frees == 5


def test_a_closed_area_is_refused_with_a_block_cached(pool: Pool, host: HostArea) -> None:
    buf = pool.mmap(4096)
    pool.munmap(buf)  # cached
    bufs = [b for b in host.buffers()]
    assert len(bufs) == 1
    pool.close()
    host.close()
    with pytest.raises(AMLValueError, match="closed"):
        pool.mmap(4096)


def test_a_closed_pooled_area_is_refused_by_the_fast_path(host: HostArea) -> None:
    p = aml_core.pool(host)
    p.munmap(p.mmap(4096))
    host.close()  # the slabs are gone with it
    with pytest.raises(AMLValueError, match="closed"):
        p.mmap(4096)
    assert _cache(p).fast_mmaps == 0
    p.close()


def test_close_stops_the_fast_free(pool: Pool, host: HostArea) -> None:
    """close() turns the stacks off: a viewed buffer it leaves behind is freed, with its
    slab, through the Python path once the buffer is gone."""
    buf = pool.mmap(4096)
    view = memoryview(buf)  # close() leaves a viewed buffer for its last view
    pool.close()
    assert not _cache(pool).keep_fast
    assert _cache(pool).fast == {}
    assert host.stats.live_mappings == 1
    view.release()
    del view, buf
    gc.collect()
    assert host.stats.live_mappings == 0
    assert _cache(pool).fast_munmaps == 0


def test_a_failed_buffer_leaves_the_block_cached(pool: Pool, monkeypatch: pytest.MonkeyPatch) -> None:
    pool.munmap(pool.mmap(4096))
    cache = _cache(pool)
    before = (len(cache.fast[4096]), cache.hits, cache.requested, cache.blocks)
    monkeypatch.setattr(Pool, "buffer_type", int)  # not a Buffer class: making it fails
    with pytest.raises(TypeError, match="buffer_type"):
        pool.mmap(4096)
    monkeypatch.undo()
    assert (len(cache.fast[4096]), cache.hits, cache.requested, cache.blocks) == before
    assert cache.fast_mmaps == 0
    pool.munmap(pool.mmap(4096))
    assert cache.fast_mmaps == 1


def test_threads_over_the_fast_path_keep_blocks_and_stats_apart(pool: Pool, host: HostArea) -> None:
    """Threads allocate and free sizes that are mostly cached (the compiled path) and
    sometimes not (the Python path), while one thread trims and reads the statistics;
    each thread stamps its buffers and checks the stamp before freeing: no block is ever
    handed to two live buffers."""
    sizes = [512, 1000, 4096, 4096, 4096, 8192, 64 * KiB, 3 * MiB]
    # warm the stacks: one block of each size
    for b in [pool.mmap(n) for n in sizes]:
        pool.munmap(b)
    errors: list[BaseException] = []
    stop = threading.Event()
    rounds = 3000

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        held: list[tuple[Buffer, bytes]] = []
        try:
            for i in range(rounds):
                if held and (len(held) > 6 or rng.random() < 0.5):
                    buf, stamp = held.pop(rng.randrange(len(held)))
                    assert bytes(memoryview(buf)[:8]) == stamp
                    pool.munmap(buf)
                else:
                    buf = pool.mmap(rng.choice(sizes))
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
                s = pool.pool_stats
                assert s.block_bytes >= s.bytes_in_use >= 0
                assert s.bytes_reserved >= s.block_bytes
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
    cache = _cache(pool)
    assert cache.fast_mmaps > 0
    assert cache.fast_munmaps > 0
    assert cache.busy == 0
    s = pool.pool_stats
    assert (s.bytes_in_use, s.block_bytes) == (0, 0)
    assert pool.stats.live_mappings == 0
    assert s.pool_hits + s.pool_misses == pool.stats.total_maps
    assert pool.stats.total_maps == pool.stats.total_unmaps
    assert s.native_allocations - s.native_frees == host.stats.live_mappings == s.slabs
    pool.trim()
    assert host.stats.live_mappings == 0
    assert pool.pool_stats.bytes_reserved == 0


def test_mixed_fast_and_slow_operations_agree_with_a_model(pool: Pool, host: HostArea) -> None:
    """A seeded sequence of mmaps and munmaps of several sizes, trims, stats reads and
    locked (Python-path) operations: the pool's counters follow a model of the live
    buffers, and live buffers never overlap."""
    rng = random.Random(7)
    sizes = [512, 700, 4096, 4096, 12 * KiB, 1 * MiB, 2 * MiB, 11 * MiB]
    live: dict[int, Buffer] = {}
    for step in range(2000):
        r = rng.random()
        if r < 0.45 or not live:
            if rng.random() < 0.1:
                with pool._kernel:
                    buf = pool.mmap(rng.choice(sizes))
            else:
                buf = pool.mmap(rng.choice(sizes))
            assert buf.ptr not in live
            live[buf.ptr] = buf
        elif r < 0.9:
            buf = live.pop(rng.choice(list(live)))
            pool.munmap(buf if rng.random() < 0.5 else buf.ptr)
        elif r < 0.95:
            pool.trim(rng.choice([0, 2 * MiB]))
        else:
            s = pool.pool_stats
            assert s.bytes_in_use == sum(b.size for b in live.values())
        spans = sorted((b.ptr, b.ptr + b.size) for b in live.values())
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), step
    s = pool.pool_stats
    assert s.bytes_in_use == sum(b.size for b in live.values())
    assert s.pool_hits + s.pool_misses == pool.stats.total_maps
    assert _cache(pool).fast_mmaps > 100
    for buf in live.values():
        pool.munmap(buf)
    pool.trim()
    assert host.stats.live_mappings == 0
    s = pool.pool_stats
    assert (s.bytes_in_use, s.block_bytes, s.bytes_reserved) == (0, 0, 0)


def test_stream_frees_never_take_the_fast_path() -> None:
    """munmap_on and a plain munmap of a block taken on a stream keep the block on the
    stream's list (Python), so a host-order mmap, fast or not, never takes it."""
    from tests.test_pool_streams import S1, StreamedHost

    host = StreamedHost()
    p = aml_core.pool(host)
    cache = _cache(p)
    p.munmap(p.mmap(4096))  # one block on the host-order stack
    a = p.mmap(4096)  # fast
    assert cache.fast_mmaps == 1
    p.munmap_on(a, S1)  # freed in S1's order
    b = p.mmap(4096, {"stream": S1})  # reused at once on S1
    assert b.ptr == a.ptr
    p.munmap(b)  # on the stream it was allocated on
    assert cache.fast_munmaps == 1
    assert not any(cache.fast.values())  # a's block is S1's
    c = p.mmap(4096)  # host order: not a's block, which S1 may still use
    assert c.ptr != a.ptr
    assert host.runtime.calls == []
    p.munmap(c)
    assert cache.fast_munmaps == 2
    p.close()
    host.close()


def test_collections_inside_fast_operations_lose_no_block(pool: Pool, host: HostArea) -> None:
    """The garbage collector may run inside a fast operation (making a buffer or a stack
    list is an allocation it tracks) and run code that frees pooled buffers or flushes
    the stacks (a finalizer, here a gc callback): every block is still accounted for."""
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
            pool.munmap(pending.pop())
        if calls % 7 == 0 and not _cache(pool).busy:
            # flushes the stacks (a new cache.fast); a locked section (a collection in
            # the Python path) is re-entered only by frees, as the pool's doc says
            _ = pool.pool_stats

    threshold = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    gc.callbacks.append(callback)
    try:
        for _ in range(3000):
            buf = pool.mmap(rng.choice(sizes))
            if rng.random() < 0.5:
                pending.append(buf)
            else:
                pool.munmap(buf)
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
    assert calls > 0
    assert _cache(pool).fast_mmaps > 0
    for buf in pending:
        pool.munmap(buf)
    s = pool.pool_stats
    assert (s.bytes_in_use, s.block_bytes) == (0, 0)
    assert s.pool_hits + s.pool_misses == pool.stats.total_maps == pool.stats.total_unmaps
    assert pool.trim() == s.bytes_reserved  # every block came back: every slab is free
    assert host.stats.live_mappings == 0
