"""The allocator kernel's size and release rules at their edges (docs/kernel.md's table):
a block splits when exactly the heap's split minimum remains (the granule in the small
heap, ``small_max`` in the large one), a request of 10 MiB gets its own slab and one
just below it a medium slab, a request of exactly ``small_max`` is small, trim stops as
soon as at most ``keep`` bytes are cached, a host-order miss waits only for streams
that hold freed blocks (one whose cached blocks were all taken again holds none), and a
framework's free that names no stream returns a block to the stream it was allocated on.

Each rule is read back through what a user sees: the pool's statistics, the slabs it
took from the area, and the stream calls it made (tests/support/streams.py records
them). These are the edges the compiled mutation check (tests/mutation/mutants.py)
found no test for."""

from __future__ import annotations

import pytest

import aml_core
from aml_core import Pool
from aml_core.gpu import hooks
from aml_core.specs import Kind
from aml_core.testing.hook_fakes import faked, torch_entry_points
from tests.support.streams import S1, StreamedHost

KiB = 1 << 10
MiB = 1 << 20


def _pool(host: StreamedHost, **config: int) -> Pool:
    return aml_core.pool(host, **config)


def test_a_small_block_splits_when_exactly_the_granule_remains(host: StreamedHost) -> None:
    pool = _pool(host, granule=512, small_max=8 * KiB, small_slab=8 * KiB)
    try:
        a = pool.mmap(8 * KiB - 512)  # a slab of 8 KiB: 512 bytes, one granule, remain
        stats = pool.pool_stats
        assert (stats.bytes_reserved, stats.block_bytes) == (8 * KiB, 8 * KiB - 512)
        b = pool.mmap(512)  # the split-off granule: no second slab
        assert b.ptr == a.ptr + 8 * KiB - 512
        assert (host.allocs, pool.pool_stats.bytes_reserved) == (1, 8 * KiB)
        pool.munmap(a)
        pool.munmap(b)
    finally:
        pool.close()


def test_a_large_block_splits_when_exactly_small_max_remains(host: StreamedHost) -> None:
    pool = _pool(host, small_max=MiB, medium_slab=20 * MiB)
    try:
        a = pool.mmap(19 * MiB)  # a medium slab of 20 MiB: small_max (1 MiB) remains
        stats = pool.pool_stats
        assert (stats.bytes_reserved, stats.block_bytes) == (20 * MiB, 19 * MiB)
        b = pool.mmap(MiB + 512)  # more than the rest: a slab of its own
        assert pool.pool_stats.block_bytes == 19 * MiB + MiB + 512
        pool.munmap(b)
        c = pool.mmap(19 * MiB - 512)  # a medium slab again, with more than small_max left
        assert pool.pool_stats.block_bytes == 19 * MiB + 19 * MiB - 512
        pool.munmap(a)
        pool.munmap(c)
    finally:
        pool.close()


@pytest.mark.parametrize(
    ("size", "slab"),
    [(10 * MiB, 10 * MiB), (10 * MiB - 512, 20 * MiB), (10 * MiB + 512, 12 * MiB)],
    ids=["10MiB", "just-below", "just-above"],
)
def test_a_request_of_10_mib_or_more_gets_its_own_slab(host: StreamedHost, size: int, slab: int) -> None:
    pool = _pool(host)
    try:
        buf = pool.mmap(size)
        assert pool.pool_stats.bytes_reserved == slab
        pool.munmap(buf)
    finally:
        pool.close()


def test_a_request_of_exactly_small_max_is_small(host: StreamedHost) -> None:
    pool = _pool(host, small_max=MiB, small_slab=2 * MiB, medium_slab=20 * MiB)
    try:
        a = pool.mmap(MiB)
        b = pool.mmap(MiB)  # both in one small slab
        assert (host.allocs, pool.pool_stats.bytes_reserved) == (1, 2 * MiB)
        pool.munmap(a)
        pool.munmap(b)
    finally:
        pool.close()


def test_trim_stops_once_at_most_keep_bytes_are_cached(host: StreamedHost) -> None:
    pool = _pool(host, small_max=2 * MiB, small_slab=2 * MiB)
    try:
        blocks = [pool.mmap(2 * MiB) for _ in range(3)]  # one small slab each
        for b in blocks:
            pool.munmap(b)
        assert pool.pool_stats.bytes_cached == 6 * MiB
        assert pool.trim(2 * MiB) == 4 * MiB  # two slabs go, one stays
        assert pool.pool_stats.bytes_cached == 2 * MiB
        assert pool.trim(2 * MiB) == 0  # at most keep cached already: nothing goes
        assert (pool.pool_stats.bytes_reserved, host.frees) == (2 * MiB, 2)
        assert pool.trim() == 2 * MiB
    finally:
        pool.close()


def test_a_host_order_miss_waits_for_no_stream_whose_blocks_were_taken_again(host: StreamedHost) -> None:
    """A stream's freed block taken again on that stream (a hit) leaves the stream
    holding nothing the pool could reclaim: a later miss in host order must not wait for
    it (a host wait on a stream busy with the live block's own work)."""
    pool = _pool(host, small_slab=4096, small_max=4096)
    try:
        a = pool.mmap(4096, stream=S1)
        pool.munmap(a)  # onto S1's stack
        b = pool.mmap(4096, stream=S1)  # S1's block again, in C
        assert b.ptr == a.ptr
        c = pool.mmap(4096)  # a miss in host order: nothing freed on a stream to wait for
        assert host.runtime.calls == [], "the pool waited for a stream that holds no freed block"
        assert host.allocs == 2
        pool.munmap(c)
        pool.munmap(b)
        d = pool.mmap(8192)  # a miss in host order: S1 now holds b's block, so it is waited for
        assert host.runtime.calls == [("stream_synchronize", S1)]
        pool.munmap(d)
    finally:
        pool.close()


class _StreamedDevice(StreamedHost):
    """StreamedHost calling itself device memory: what the framework hooks serve."""

    def __init__(self) -> None:
        super().__init__()
        self.kind = Kind.DEVICE


def test_a_block_freed_without_a_stream_goes_back_on_its_own_stream() -> None:
    """A framework's free that names no stream (CuPy's, PyTorch's on the null stream) of
    a block allocated on a stream puts it back on that stream's list, in C: a request in
    host order then waits for the stream before it reuses the block, never takes it while
    the stream's work may still use it."""
    host = _StreamedDevice()
    pool = aml_core.pool(host, small_slab=4096, small_max=4096)  # slabs of one block
    with faked("torch") as torch:
        hook = hooks.use_with_torch(pool, backend="cuda")
        malloc, free = torch_entry_points(torch)
        ptr = malloc(4096, 0, S1)  # on S1: a miss, the first slab
        free(ptr, 4096, 0, None)  # no stream named: back onto S1's list
        assert hook.states[None].fast_frees == 1
        assert pool._kernel.stream_cached() == {(S1, 4096): [ptr]}
        assert malloc(4096, 0, None) == ptr  # host order: S1 reclaimed first
        assert host.runtime.calls == [("stream_synchronize", S1)]
        free(ptr, 4096, 0, None)
        assert hook.errors == []
    pool.close()
    host.close()
    assert host.stats.live_mappings == 0
