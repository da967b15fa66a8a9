"""A hypothesis state machine over an area's operations (mmap, munmap, memoryview views
and their release, failing native frees, close and its retry), on the fake-pointer area and
on a real host area. Invariants: the area's stats equal the model, every buffer the model
holds live is live in the area, and (fake area) the native allocations match; at the end,
close() (retried past injected failures) frees everything. A third machine runs a pool
beside its host area (PoolBesideAreaMachine); a fourth the same with streams and faults
injected into the stream operations and slab allocations (StreamedPoolMachine)."""

from __future__ import annotations

import itertools
import os
import warnings

import hypothesis
import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    precondition,
    rule,
)

import aml_core
from aml_core import Buffer, Pool
from aml_core.area import Area
from aml_core.errors import AMLBusyError, AMLError, AMLFailure, AMLMemoryError, AMLValueError, ErrorCode
from aml_core.host import HostArea
from aml_core.pool import LogRecord
from aml_core.specs import Kind, format_size
from tests.support.pool_ownership import FREEING
from tests.support.streams import S1, S2, S3, StreamedHost

from .fake import FaultyArea

EXAMPLES = int(os.environ.get("AML_STATE_MACHINE_EXAMPLES", "150"))


class AreaMachine(RuleBasedStateMachine):
    buffers = Bundle("buffers")

    def make_area(self) -> Area:
        return FaultyArea()

    def __init__(self) -> None:
        super().__init__()
        self.area = self.make_area()
        self.live: dict[int, Buffer] = {}
        self.views: dict[int, list[memoryview]] = {}
        self.maps = 0
        self.unmaps = 0

    @precondition(lambda self: not self.area.closed)
    @rule(target=buffers, size=st.integers(1, 3 * 4096))
    def mmap(self, size: int) -> Buffer:
        buf = self.area.mmap(size)
        self.live[buf.ptr] = buf
        self.maps += 1
        return buf

    @precondition(lambda self: not self.area.closed)
    @rule(buf=buffers, fail=st.booleans())
    def munmap(self, buf: Buffer, fail: bool) -> None:
        faulty = isinstance(self.area, FaultyArea) and fail
        if faulty:
            self.area.fail_frees = 1  # type: ignore[attr-defined]
        viewed = any(v.obj is buf for v in self.views.get(buf.ptr, ()))
        try:
            self.area.munmap(buf)
        except AMLBusyError:
            assert viewed
            event("munmap: EBUSY, viewed")
        except AMLValueError:
            assert self.live.get(buf.ptr) is not buf
            event("munmap: EINVAL")
        except AMLError:
            assert faulty
            assert not buf.freed
            event("munmap: the free failed")
        else:
            assert not viewed, "munmap succeeded while a view of the buffer was live"
            assert self.live.pop(buf.ptr) is buf
            self.unmaps += 1
            event("munmap: freed")
        finally:
            if faulty:
                self.area.fail_frees = 0  # type: ignore[attr-defined]

    @rule(buf=buffers)
    def view(self, buf: Buffer) -> None:
        if not buf.host_accessible:
            return
        try:
            view = memoryview(buf)
        except (BufferError, AMLValueError):
            assert buf.freed
            return
        self.views.setdefault(buf.ptr, []).append(view)

    @rule()
    def release_views(self) -> None:
        for views in self.views.values():
            for v in views:
                v.release()
        self.views.clear()

    @rule(fail=st.integers(0, 2))
    def close(self, fail: int) -> None:
        if isinstance(self.area, FaultyArea):
            self.area.fail_frees = fail
        try:
            self.area.close()
        except AMLError:
            assert fail
        finally:
            if isinstance(self.area, FaultyArea):
                self.area.fail_frees = 0
        tracked = {b.ptr for b in self.area.buffers()}
        for ptr in list(self.live):
            if ptr not in tracked:
                del self.live[ptr]  # freed, or detached while viewed

    @invariant()
    def stats_match(self) -> None:
        st_ = self.area.stats
        tracked = self.area.buffers()
        assert st_.live_mappings == len(tracked)
        assert st_.bytes_in_use == sum(b.size for b in tracked)
        assert st_.total_maps == self.maps
        if not self.area.closed:
            assert {b.ptr for b in tracked} == set(self.live)
            assert st_.total_unmaps == self.unmaps
        for b in tracked:
            assert not b.freed
        if isinstance(self.area, FaultyArea):
            assert not self.area.bad
            assert set(self.area.native_live) >= {b.ptr for b in tracked}

    def teardown(self) -> None:
        self.release_views()
        for _ in range(3):
            try:
                self.area.close()
                break
            except AMLError:
                continue
        assert self.area.stats.live_mappings == 0
        if isinstance(self.area, FaultyArea):
            assert self.area.native_live == {}
            assert not self.area.bad


class HostMachine(AreaMachine):
    def make_area(self) -> Area:
        return HostArea()


TestFakeArea = AreaMachine.TestCase
TestFakeArea.settings = settings(max_examples=EXAMPLES, stateful_step_count=30, deadline=None)
TestHostArea = HostMachine.TestCase
TestHostArea.settings = settings(max_examples=max(EXAMPLES // 3, 10), stateful_step_count=25, deadline=None)


class PoolBesideAreaMachine(RuleBasedStateMachine):
    """A host area and a pool over it, used side by side (issue 20): the area's freeing
    operations are aimed at pooled pointers and at the pool's slabs too. Invariants: every
    refusal is a documented error (EINVAL, EBUSY for a viewed buffer), a slab with a live
    block is held and live in the area, every live pooled buffer reads back what was last
    written to it (no reachable freed memory), and closing the area closes the pool."""

    direct = Bundle("direct")
    pooled = Bundle("pooled")

    def make_area(self) -> HostArea:
        return HostArea()

    def make_pool(self, area: HostArea) -> Pool:
        return aml_core.pool(area, small_slab=64 * 1024, small_max=16 * 1024)

    def __init__(self) -> None:
        super().__init__()
        self.area = self.make_area()
        self.pool = self.make_pool(self.area)
        self.stamps: dict[int, tuple[Buffer, int]] = {}  # live pooled buffers: id -> (buf, byte)
        self.views: list[memoryview] = []
        self.next_stamp = 0

    def _open(self) -> bool:
        return not self.area.closed and not self.pool.closed

    def _stamp(self, buf: Buffer) -> None:
        self.next_stamp = (self.next_stamp + 1) % 251
        memoryview(buf)[buf.size - 1] = self.next_stamp
        self.stamps[id(buf)] = (buf, self.next_stamp)

    @precondition(_open)
    @rule(target=pooled, size=st.sampled_from([100, 512, 4096, 20_000, 70_000]))
    def pool_mmap(self, size: int) -> Buffer:
        buf = self.pool.mmap(size)
        self._stamp(buf)
        return buf

    @precondition(_open)
    @rule(target=direct, size=st.integers(1, 3 * 4096))
    def area_mmap(self, size: int) -> Buffer:
        return self.area.mmap(size)

    def _refused(self, error: AMLError, buf: Buffer, area: Area) -> None:
        """A refused munmap: EBUSY for a viewed buffer, else EINVAL (freed, or closed)."""
        if isinstance(error, AMLBusyError):
            assert error.code is ErrorCode.EBUSY
            assert buf.exports
        else:
            assert isinstance(error, AMLValueError)
            assert error.code is ErrorCode.EINVAL
            assert buf.freed or area.closed

    def _viewed(self, buf: Buffer) -> bool:
        return any(v.obj is buf for v in self.views)

    @rule(buf=pooled)
    def pool_munmap(self, buf: Buffer) -> None:
        viewed = self._viewed(buf)
        try:
            self.pool.munmap(buf)
        except AMLError as exc:
            error = exc
        else:
            assert not viewed, "a pool's munmap succeeded while a view of the buffer was live"
            event("pool munmap: freed")
            del self.stamps[id(buf)]
            return
        event(f"pool munmap: {type(error).__name__}")
        self._refused(error, buf, self.pool)

    @rule(buf=direct)
    def area_munmap(self, buf: Buffer) -> None:
        viewed = self._viewed(buf)
        try:
            self.area.munmap(buf)
        except AMLError as exc:
            error = exc
        else:
            assert not viewed, "the area's munmap succeeded while a view of the buffer was live"
            event("area munmap: freed")
            return
        event(f"area munmap: {type(error).__name__}")
        self._refused(error, buf, self.area)

    @rule(buf=pooled, how=st.sampled_from(["ptr", "ptr, size"]))
    def area_munmap_pooled_pointer(self, buf: Buffer, how: str) -> None:
        """The area never frees a pooled pointer: a block's address is a held slab's
        (its first block), inside one, or no longer anything the area mapped."""
        if buf.freed:
            return  # its address may be a new direct mapping's by now
        size = buf.size if how == "ptr, size" else None
        with pytest.raises(AMLValueError) as info:
            self.area.munmap(buf.ptr, size)
        assert info.value.code is ErrorCode.EINVAL

    @rule(buf=pooled, how=st.sampled_from(sorted(FREEING)))
    def area_frees_the_slab(self, buf: Buffer, how: str) -> None:
        if buf.freed or self.pool.closed:
            return
        slab = self.pool.slab_of(buf)[0]
        assert slab is not None
        with pytest.raises(AMLValueError, match=r"pool holds|closed") as info:
            FREEING[how](self.area, slab)
        assert info.value.code is ErrorCode.EINVAL

    @rule(buf=pooled)
    def write(self, buf: Buffer) -> None:
        if buf.freed:
            with pytest.raises(BufferError):
                memoryview(buf)
            return
        if not self.pool._is_live(buf):  # detached by a close while viewed: still mapped
            memoryview(buf)[0] = 7
            assert memoryview(buf)[0] == 7
            return
        self._stamp(buf)

    @rule(buf=st.one_of(pooled, direct))
    def view(self, buf: Buffer) -> None:
        if not buf.freed:
            self.views.append(memoryview(buf))

    @rule()
    def release_views(self) -> None:
        for v in self.views:
            v.release()
        self.views.clear()

    @precondition(_open)
    @rule()
    def trim(self) -> None:
        self.pool.trim()

    @rule(which=st.sampled_from(["pool", "area"]))
    def close(self, which: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # viewed buffers are detached
            (self.pool if which == "pool" else self.area).close()
        assert self.pool.closed
        self.stamps.clear()

    @invariant()
    def no_reachable_freed_memory(self) -> None:
        for buf, byte in self.stamps.values():
            assert not buf.freed
            assert self.pool._is_live(buf)
            slab = self.pool.slab_of(buf)[0]
            assert slab is not None
            assert self.area._is_live(slab)
            assert self.area._held(slab)
            assert memoryview(buf)[buf.size - 1] == byte

    @invariant()
    def the_area_counts_the_slabs(self) -> None:
        if self._open():
            held = [b for b in self.area.buffers() if self.area._held(b)]
            assert len(held) == self.pool.pool_stats.slabs

    def teardown(self) -> None:
        self.release_views()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            self.area.close()
        assert self.pool.closed
        assert self.area.stats.live_mappings == 0


TestPoolBesideHostArea = PoolBesideAreaMachine.TestCase
TestPoolBesideHostArea.settings = settings(
    max_examples=max(EXAMPLES // 3, 10), stateful_step_count=30, deadline=None
)


class StreamedPoolMachine(PoolBesideAreaMachine):
    """PoolBesideAreaMachine over an area with a stream runtime (issue 19, the allocator
    kernel): mmaps in host order and on three streams, munmap_on any stream (blocks reused
    at once on their stream, handed to another through the event, reclaimed by trim and
    before growth), and faults injected into the next stream operation or slab
    allocation. Invariants after each step: the pool's statistics agree with the live
    buffers (bytes_in_use is their sum, block_bytes <= bytes_reserved, cached = reserved -
    blocks), no two live buffers (pooled or direct) overlap, every live pooled buffer is
    writable and reads back what was written; the limit changed at run time (removed,
    lowered to what the pool holds, raised) releases nothing; a failure is always an
    injected one or the limit's ENOMEM, and changes nothing; after the pool's close the
    area holds only its direct buffers, and after the area's close nothing."""

    STREAMS = (S1, S2, S3)
    OPS = ("event_create", "event_record", "stream_wait_event", "stream_synchronize")

    def make_area(self) -> HostArea:
        return StreamedHost()

    def make_pool(self, area: HostArea) -> Pool:
        # small slabs of one 4 KiB block: a stream often finds its size only on another
        # stream's stack (the hand-over)
        return aml_core.pool(area, small_slab=4096, small_max=4096)

    def __init__(self) -> None:
        super().__init__()
        assert isinstance(self.area, StreamedHost)
        self.host: StreamedHost = self.area
        self.directs: list[Buffer] = []
        self.pooled_all: list[Buffer] = []
        self.close_failed = False
        self.viewed_at_close = False
        # the history (record_history, log_to): the state when it was turned on
        self.history_base: tuple[dict[int, int], dict[int, int]] | None = None
        self.logged: list[LogRecord] | None = None
        self.log_from = 0

    def _faults(self) -> tuple[int, int]:
        """What the injections consumed so far (a failure must consume one)."""
        failed = sum(1 for c in self.host.runtime.calls if c[0].endswith(" failed"))
        return (failed, -self.host.fail_allocs)

    def _injected(self, before: tuple[int, int], exc: AMLError) -> None:
        assert isinstance(exc, (AMLFailure, AMLMemoryError)), exc
        if isinstance(exc, AMLMemoryError) and "limit of" in str(exc) and self._faults() == before:
            limit = self.pool.limit  # the limit set by set_limit, not an injection
            assert limit is not None
            assert f"limit of {format_size(limit, exact=True)} is reached" in str(exc)
            return
        assert self._faults() != before, f"a failure nothing injected: {exc!r}"

    def _map(self, size: int, stream: int | None) -> Buffer | MultipleResults[Buffer]:
        before = self._faults()
        try:
            buf = self.pool.mmap(size, stream=stream)
        except AMLError as exc:
            self._injected(before, exc)
            return multiple()
        self._stamp(buf)
        self.pooled_all.append(buf)
        return buf

    @precondition(PoolBesideAreaMachine._open)
    @rule(target=PoolBesideAreaMachine.pooled, size=st.sampled_from([100, 512, 4096, 4096, 20_000, 70_000]))
    def pool_mmap(self, size: int) -> Buffer | MultipleResults[Buffer]:
        return self._map(size, None)

    @precondition(PoolBesideAreaMachine._open)
    @rule(
        target=PoolBesideAreaMachine.pooled,
        size=st.sampled_from([512, 4096, 4096, 4096, 20_000]),
        stream=st.sampled_from(STREAMS),
    )
    def stream_mmap(self, size: int, stream: int) -> Buffer | MultipleResults[Buffer]:
        return self._map(size, stream)

    @rule(buf=PoolBesideAreaMachine.pooled, stream=st.sampled_from(STREAMS))
    def pool_munmap_on(self, buf: Buffer, stream: int) -> None:
        viewed = self._viewed(buf)
        try:
            self.pool.munmap(buf, stream=stream)
        except AMLError as exc:
            event(f"munmap_on: {type(exc).__name__}")
            self._refused(exc, buf, self.pool)
        else:
            assert not viewed, "munmap_on succeeded while a view of the buffer was live"
            event("munmap_on: freed")
            del self.stamps[id(buf)]

    @precondition(PoolBesideAreaMachine._open)
    @rule(
        target=PoolBesideAreaMachine.pooled,
        pair=st.permutations(STREAMS).map(lambda s: s[:2]),
        fail=st.sampled_from([None, None, "event_create", "event_record", "stream_wait_event"]),
    )
    def hand_over(self, pair: tuple[int, int], fail: str | None) -> Buffer | MultipleResults[Buffer]:
        """A 4 KiB block freed on ``source``, then 4 KiB asked on ``to``: when ``to`` has
        none of its own and host order none free, the block is handed over (an event
        recorded on ``source``, waited on by ``to``); ``fail``: that call fails first."""
        source, to = pair
        first = self._map(4096, source)
        if not isinstance(first, Buffer):
            return multiple()
        self.pool.munmap_on(first, source)
        del self.stamps[id(first)]
        if fail is not None:
            self.host.runtime.fail[fail] = 1
        calls = len(self.host.runtime.calls)
        got = self._map(4096, to)
        waits = [c for c in self.host.runtime.calls[calls:] if c[0] == "stream_wait_event"]
        if waits:
            event("hand-over: done")
        elif any(c[0].endswith(" failed") for c in self.host.runtime.calls[calls:]):
            event("hand-over: a stream call failed")
        else:
            event("hand-over: served otherwise (a free block on the stream or in host order)")
        return got

    @invariant()
    def every_hand_over_waits_on_an_event_recorded_on_the_other_stream(self) -> None:
        """The order of a hand-over: the event recorded on the stream the block was freed
        on, then waited on by the stream that takes it; never a wait on an event not
        recorded since it was made, nor a block's own stream waiting on itself."""
        recorded: dict[int, int] = {}  # event -> the stream it was last recorded on
        for call in self.host.runtime.calls:
            if call[0] == "event_record":
                recorded[call[1]] = call[2]
            elif call[0] == "stream_wait_event":
                stream, ev = call[1], call[2]
                assert ev in recorded, f"stream 0x{stream:x} waited on event {ev} never recorded"
                assert recorded[ev] != stream, f"stream 0x{stream:x} waited on its own event"
            elif call[0] == "event_destroy":
                recorded.pop(call[1], None)

    @precondition(PoolBesideAreaMachine._open)
    @rule(target=PoolBesideAreaMachine.direct, size=st.integers(1, 3 * 4096))
    def area_mmap(self, size: int) -> Buffer | MultipleResults[Buffer]:
        before = self._faults()
        try:
            buf = self.area.mmap(size)
        except AMLError as exc:
            self._injected(before, exc)
            return multiple()
        self.directs.append(buf)
        return buf

    @precondition(PoolBesideAreaMachine._open)
    @rule(
        target=PoolBesideAreaMachine.pooled,
        what=st.sampled_from([*OPS, "slab"]),
        size=st.sampled_from([4096, 4096, 20_000]),
        stream=st.sampled_from([None, *STREAMS]),
    )
    def inject_then_mmap(self, what: str, size: int, stream: int | None) -> Buffer | MultipleResults[Buffer]:
        """The next call of ``what`` fails (this mmap's, if it makes one; else a later
        operation's)."""
        if what == "slab":
            self.host.fail_allocs = 1
        else:
            self.host.runtime.fail[what] = 1
        return self._map(size, stream)

    @precondition(PoolBesideAreaMachine._open)
    @rule()
    def trim(self) -> None:
        before = self._faults()
        try:
            self.pool.trim()
        except AMLError as exc:
            self._injected(before, exc)

    @precondition(PoolBesideAreaMachine._open)
    @rule(how=st.sampled_from(["none", "held", "held + 4 KiB", "1 GiB"]))
    def set_limit(self, how: str) -> None:
        """The limit at run time: removed, lowered to what the pool holds (growth refused,
        nothing released), a block above it, or far above it."""
        held = self.pool.pool_stats.bytes_reserved
        limit = {"none": None, "held": max(held, 512), "held + 4 KiB": held + 4096, "1 GiB": 1 << 30}[how]
        self.pool.set_limit(limit)
        assert self.pool.limit == limit
        assert self.pool.pool_stats.bytes_reserved == held

    @rule(mode=st.sampled_from(["off", "record", "stacks", "log"]))
    def history(self, mode: str) -> None:
        """Turn the history off, or on afresh in C, with Python stacks, or with a log
        (every event through the Python path)."""
        pool = self.pool
        pool.log_to(None)
        self.logged = None
        pool.record_history(False)
        self.history_base = None
        if mode == "off":
            return
        pool.record_history(max_entries=100_000, stacks="python" if mode == "stacks" else None)
        snap = pool.snapshot()
        self.history_base = (
            {seg.address: seg.size for seg in snap.segments},
            {b.address: b.size for seg in snap.segments for b in seg.blocks if b.state == "used"},
        )
        if mode == "log":
            self.logged = []
            pool.log_to(self.logged.append)

    @rule(which=st.sampled_from(["pool", "area"]))
    def close(self, which: str) -> None:
        if not self.pool.closed:
            self.viewed_at_close = any(_exporter_area(v) is self.pool for v in self.views)
        before = self._faults()
        try:
            super().close(which)
        except AMLError as exc:
            self._injected(before, exc)
            self.close_failed = True
            assert self.pool.closed
            self.stamps.clear()
        # no injection outlives the pool: a free after close (a view released) has none
        self.host.runtime.fail.clear()
        self.host.fail_allocs = 0

    @invariant()
    def the_stats_agree_with_the_live_buffers(self) -> None:
        if not self._open():
            return
        s = self.pool.pool_stats
        live = [buf for buf, _ in self.stamps.values()]
        assert s.bytes_in_use == sum(b.size for b in live)
        assert s.bytes_in_use <= s.block_bytes <= s.bytes_reserved
        assert s.bytes_cached == s.bytes_reserved - s.block_bytes
        assert s.native_allocations - s.native_frees == s.slabs
        assert self.pool._kernel.live_blocks() == len(live)
        for (stream, size), ptrs in self.pool._kernel.stream_cached().items():
            assert stream in self.STREAMS
            assert size % 512 == 0
            assert ptrs

    @invariant()
    def the_history_replays_to_the_snapshot(self) -> None:
        """Every block and slab event since the history began, on every path (C hits,
        the slow path, finalizers, failures undone), turns its state then into now's;
        a log wrote each allocation and free since it began, in order."""
        if not self._open() or self.history_base is None:
            return
        snap = self.pool.snapshot()
        segments, live = dict(self.history_base[0]), dict(self.history_base[1])
        for e in snap.history:
            if e.action == "segment_alloc":
                segments[e.address] = e.size
            elif e.action == "segment_free":
                assert segments.pop(e.address) == e.size
            elif e.action == "alloc":
                assert e.address not in live
                live[e.address] = e.size
            else:
                assert e.action == "free", e
                assert live.pop(e.address) == e.size
        assert segments == {seg.address: seg.size for seg in snap.segments}
        assert live == {b.address: b.size for seg in snap.segments for b in seg.blocks if b.state == "used"}
        assert snap.lost == 0
        if self.logged is not None:
            names = {"alloc": "allocate", "free": "free"}
            logged = [(e.action, e.address, e.requested) for e in snap.history if e.action in names]
            assert [(r.action, r.pointer, r.size) for r in self.logged] == [
                (names[a], addr, n) for a, addr, n in logged
            ]

    @invariant()
    def live_buffers_do_not_overlap_and_are_writable(self) -> None:
        live = [buf for buf, _ in self.stamps.values()]
        live += [d for d in self.directs if not d.freed and not self.area.closed]
        spans = sorted((b.ptr, b.ptr + b.size) for b in live)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), spans
        for buf, byte in self.stamps.values():
            view = memoryview(buf)
            view[0] = 0x5A
            assert view[0] == 0x5A
            assert view[buf.size - 1] == byte
            view.release()

    @invariant()
    def a_closed_pool_leaves_the_area_its_own(self) -> None:
        if not self.pool.closed or self.area.closed or self.close_failed or self.viewed_at_close:
            return
        assert not any(self.area._held(b) for b in self.area.buffers())
        assert self.area.stats.live_mappings == sum(1 for d in self.directs if not d.freed)

    def teardown(self) -> None:
        self.host.runtime.fail.clear()
        self.host.fail_allocs = 0
        super().teardown()
        assert self.host.runtime.events == 0
        # blocks still live: only those of buffers close() detached while viewed, freed
        # (with their slab) when the Buffer object goes
        assert self.pool._kernel.live_blocks() == sum(1 for b in self.pooled_all if not b.freed)


class HookStreamsMachine(RuleBasedStateMachine):
    """A framework hook over a pool on an area with a stream runtime (issue 32, root
    cause 1): PyTorch's entry points (the compiled hooks, called without the GIL) allocate
    and free in host order, on streams the pool has seen, and on a new stream first (a
    hit in C on a stream nobody gave the pool from Python, or a host-order block freed on
    a new stream), beside Python mmaps, trims and injected stream failures. Invariants:
    the pool's bytes in use are the hook's blocks and the Python buffers, every block on
    a stream's list is on a stream that was used, a refusal is an injected failure; at the
    end close() leaves no slab and nothing live in the area."""

    hooked = Bundle("hooked")

    def __init__(self) -> None:
        super().__init__()
        from aml_core import _hooks

        self.hooks = _hooks
        self.host = StreamedHost()
        self.host.kind = Kind.DEVICE
        self.pool = aml_core.pool(self.host, small_slab=4096, small_max=4096)
        self.errors: list[BaseException] = []
        pool = self.pool

        def slow_malloc(size: int, _device: int, stream: int | None) -> int:
            try:
                return pool._hook_alloc(size, stream)
            except BaseException as exc:
                self.errors.append(exc)
                return 0

        def slow_free(ptr: int, _device: int, stream: int | None) -> bool:
            try:
                pool._hook_free(ptr, stream)
            except BaseException as exc:
                self.errors.append(exc)
                return False
            return True

        self.state = _hooks.HookState(pool._kernel, slow_malloc, slow_free)
        self.used: list[int] = []  # streams used so far, oldest first
        self.next_stream = 0x10000
        self.live: dict[int, int] = {}  # hook blocks: address -> size
        self.buffers: list[Buffer] = []

    def _stream(self, which: str) -> int | None:
        if which == "host":
            return None
        if which == "new" or not self.used:
            self.next_stream += 0x100
            self.used.append(self.next_stream)
            return self.next_stream
        return self.used[-1] if which == "last" else self.used[0]

    def _failures(self) -> int:
        return sum(1 for c in self.host.runtime.calls if c[0].endswith(" failed"))

    @rule(
        target=hooked,
        size=st.sampled_from([512, 4096, 4096, 8192]),
        which=st.sampled_from(["host", "new", "new", "last", "first"]),
    )
    def hook_alloc(self, size: int, which: str) -> MultipleResults[tuple[int, int]]:
        stream = self._stream(which)
        if which == "new":
            hypothesis.event("a hook allocates on a new stream first")
        before = self._failures()
        ptr = self.hooks.call_hook_malloc(self.state, size, stream)
        if not ptr:
            assert self._failures() != before, self.errors[-1:]
            return multiple()
        assert ptr not in self.live
        self.live[ptr] = size
        return multiple((ptr, size))

    @rule(block=consumes(hooked), which=st.sampled_from(["host", "new", "new", "last", "first"]))
    def hook_free(self, block: tuple[int, int], which: str) -> None:
        ptr, _size = block
        stream = self._stream(which)
        if which == "new":
            hypothesis.event("a hook frees on a new stream first")
        n = len(self.errors)
        self.hooks.call_hook_free(self.state, ptr, stream)
        assert len(self.errors) == n, self.errors[-1:]  # a free never fails here
        del self.live[ptr]

    @rule(size=st.sampled_from([4096, 20_000]), which=st.sampled_from(["host", "last"]))
    def python_mmap(self, size: int, which: str) -> None:
        before = self._failures()
        try:
            self.buffers.append(self.pool.mmap(size, stream=self._stream(which)))
        except AMLError:
            assert self._failures() != before

    @precondition(lambda self: self.buffers)
    @rule()
    def python_munmap(self) -> None:
        self.pool.munmap(self.buffers.pop(0))

    @rule(what=st.sampled_from(["event_create", "event_record", "stream_wait_event", "stream_synchronize"]))
    def inject(self, what: str) -> None:
        self.host.runtime.fail[what] = 1

    @rule()
    def trim(self) -> None:
        hypothesis.event("trim with streams in use" if self.pool._kernel.stream_cached() else "trim")
        before = self._failures()
        try:
            self.pool.trim()
        except AMLError:
            assert self._failures() != before

    @invariant()
    def the_pool_counts_the_hooks_blocks_and_the_buffers(self) -> None:
        s = self.pool.pool_stats
        assert s.bytes_in_use == sum(self.live.values()) + sum(b.size for b in self.buffers)
        assert self.pool._kernel.live_blocks() == len(self.live) + len(self.buffers)
        for stream, _size in self.pool._kernel.stream_cached():
            assert stream in self.used

    def teardown(self) -> None:
        self.host.runtime.fail.clear()
        for ptr in list(self.live):
            self.hooks.call_hook_free(self.state, ptr, None)
        self.live.clear()
        self.pool.close()
        assert not any(isinstance(e, AttributeError) for e in self.errors), self.errors
        assert self.host.allocs == self.host.frees  # every slab given back
        self.host.close()
        assert self.host.stats.live_mappings == 0


TestHookStreams = HookStreamsMachine.TestCase
TestHookStreams.settings = settings(
    max_examples=max(EXAMPLES // 3, 10), stateful_step_count=30, deadline=None
)


def _exporter_area(view: memoryview) -> object:
    obj = view.obj
    return obj.area if isinstance(obj, Buffer) else None


TestStreamedPool = StreamedPoolMachine.TestCase
TestStreamedPool.settings = settings(
    max_examples=max(EXAMPLES // 3, 10), stateful_step_count=40, deadline=None
)
