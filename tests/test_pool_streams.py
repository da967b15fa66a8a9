"""Pools used with streams, over a host area with a recording stream runtime: blocks are
reused at once on the stream that freed them, handed to another stream through an event,
and returned to host order (after synchronizing their streams) before the pool grows,
trims or closes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import aml_core
from aml_core import Pool
from aml_core.errors import AMLFailure, AMLNotSupported, AMLTypeError
from aml_core.host import HostArea
from tests.support.streams import S1, S2, StreamedHost
from tests.support.streams import ForeignStream as Stream

MiB = 1 << 20


@pytest.fixture
def pool(host: StreamedHost) -> Iterator[Pool]:
    p = aml_core.pool(host)
    yield p
    p.close()


def test_same_stream_reuse_needs_no_event(pool: Pool, host: StreamedHost) -> None:
    a = pool.mmap(4096, stream=S1)
    ptr = a.ptr
    pool.munmap(a)  # freed in S1's order: the stream it was allocated on
    b = pool.mmap(4096, stream=Stream(S1))
    assert b.ptr == ptr
    assert host.runtime.calls == []
    pool.munmap(b)


def test_another_stream_waits_for_an_event(host: StreamedHost) -> None:
    pool = aml_core.pool(host, small_slab=4096, small_max=4096)  # slabs of one block
    a = pool.mmap(4096, stream=S1)
    ptr = a.ptr
    pool.munmap(a)
    b = pool.mmap(4096, stream=S2)  # the only free block was freed on S1
    assert b.ptr == ptr
    assert host.allocs == 1
    calls = host.runtime.calls
    assert calls[0] == ("event_create",)
    event = calls[1][1]
    assert calls[1:] == [("event_record", event, S1), ("stream_wait_event", S2, event)]
    pool.munmap(b, stream=S2)
    c = pool.mmap(4096, stream=S2)  # now S2's: no new event
    assert c.ptr == ptr
    assert len(host.runtime.calls) == 3
    pool.munmap(c)
    pool.close()
    assert host.runtime.events == 0  # the pool's event is destroyed with it


def test_munmap_on_another_stream(pool: Pool, host: StreamedHost) -> None:
    a = pool.mmap(4096, stream=S1)
    ptr = a.ptr
    pool.munmap(a, stream=S2)
    b = pool.mmap(4096, stream=S2)
    assert b.ptr == ptr
    assert host.runtime.calls == []
    pool.munmap(b)


def test_host_order_requests_do_not_take_stream_blocks(pool: Pool, host: StreamedHost) -> None:
    a = pool.mmap(4096, stream=S1)
    a_ptr = a.ptr
    pool.munmap(a)
    b = pool.mmap(4096)  # no stream: S1 may still use a's block, so another is taken
    assert b.ptr != a_ptr
    assert host.runtime.calls == []
    pool.munmap(b)


def test_streams_are_synchronized_before_the_pool_grows(pool: Pool, host: StreamedHost) -> None:
    bufs = [pool.mmap(512 * 1024, stream=S1) for _ in range(4)]  # the whole small slab
    for b in bufs:
        pool.munmap(b)
    assert host.allocs == 1
    big = pool.mmap(MiB)  # nothing free in host order: S1 is synchronized, its blocks coalesce
    assert host.runtime.calls == [("stream_synchronize", S1)]
    assert host.allocs == 1
    assert big.ptr == bufs[0].ptr
    pool.munmap(big)


def test_trim_and_close_synchronize_streams(pool: Pool, host: StreamedHost) -> None:
    a = pool.mmap(64 * MiB, stream=S1)
    pool.munmap(a)
    assert pool.trim() == 64 * MiB
    assert host.runtime.calls == [("stream_synchronize", S1)]
    b = pool.mmap(4096, stream=S2)
    pool.munmap(b)
    pool.close()
    assert host.runtime.calls[-1] == ("stream_synchronize", S2)
    assert host.stats.live_mappings == 0


def test_stats_count_stream_blocks_as_cached(pool: Pool) -> None:
    a = pool.mmap(4096, stream=S1)
    pool.munmap(a)
    s = pool.pool_stats
    assert s.block_bytes == 0
    assert s.bytes_cached == s.bytes_reserved == 2 * MiB


def test_streams_need_a_runtime() -> None:
    with HostArea() as plain, aml_core.pool(plain) as p:
        with pytest.raises(AMLNotSupported, match="no runtime"):
            p.mmap(4096, stream=S1)
        buf = p.mmap(4096)
        with pytest.raises(AMLNotSupported):
            p.munmap(buf, stream=S1)
        assert not buf.freed
        p.munmap(buf)


def test_bad_streams(pool: Pool) -> None:
    with pytest.raises(AMLTypeError):
        pool.mmap(4096, stream=object())
    assert pool.stats.live_mappings == 0


def test_close_retries_an_event_it_could_not_destroy(host: StreamedHost) -> None:
    """A failed event destroy keeps the event: the next close() destroys it (the caller's
    retry), instead of losing it to an idempotent no-op."""
    pool = aml_core.pool(host, small_slab=4096, small_max=4096)
    pool.munmap(pool.mmap(4096, stream=S1))
    pool.munmap(pool.mmap(4096, stream=S2))  # handed over: the pool made its event
    assert host.runtime.events == 1
    host.runtime.fail_destroy = True
    with pytest.raises(AMLFailure, match="injected"):
        pool.close()
    assert pool.closed
    assert host.runtime.events == 1
    host.runtime.fail_destroy = False
    pool.close()
    assert host.runtime.events == 0
    pool.close()  # idempotent once the event is gone
    assert [c[0] for c in host.runtime.calls].count("event_destroy") == 1


# -- garbage collection --------------------------------------------------------------------------
class _Cycle:
    def __init__(self, held: object) -> None:
        self.held = held
        self.me = self


def test_a_dropped_stream_block_is_freed_in_its_streams_order(pool: Pool, host: StreamedHost) -> None:
    """Dropped without munmap, a block taken on S1 goes on S1's free list, as a plain
    munmap puts it: reused at once on S1, never by host-order requests."""
    a = pool.mmap(4096, stream=S1)
    ptr = a.ptr
    del a
    assert pool.stats.live_mappings == 0
    b = pool.mmap(4096)  # host order: not the block S1 may still use
    assert b.ptr != ptr
    c = pool.mmap(4096, stream=S1)
    assert c.ptr == ptr
    assert host.runtime.calls == []  # no event, no synchronization
    pool.munmap(b)
    pool.munmap(c)


class _CollectingSize:
    """A size whose ``__index__`` runs the collector: inside munmap_on, after it chose its
    stream and before the free."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        gc.collect()
        return self.n


def test_a_collection_inside_munmap_on_keeps_each_block_on_its_stream(pool: Pool, host: StreamedHost) -> None:
    """A block the collector frees while munmap_on runs goes on its own stream's list,
    not on the stream munmap_on was given."""
    dropped = pool.mmap(4096, stream=S1)
    dropped_ptr = dropped.ptr
    _Cycle(dropped)
    del dropped
    target = pool.mmap(8192, stream=S1)
    pool.munmap(target, _CollectingSize(8192), stream=S2)
    assert pool.stats.live_mappings == 0
    held = pool._kernel.stream_cached()
    assert held[(S1, 4096)] == [dropped_ptr]
    assert held[(S2, 8192)] == [target.ptr]
