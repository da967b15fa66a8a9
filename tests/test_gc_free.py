"""Buffers dropped without munmap are freed when garbage collected (issue 12 §5), through
the area's munmap path: host areas, fake areas whose frees are recorded, pools (the
compiled kernel path and the Python one), while views keep them, inside the area's own
operations (deferred, never re-entered), from many threads, when the free fails (reported,
kept for close()), and at interpreter exit."""

from __future__ import annotations

import copy
import gc
import itertools
import mmap
import subprocess
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import aml_core
from aml_core import Buffer
from aml_core.area import Area
from aml_core.errors import AMLFailure, AMLValueError
from aml_core.host import HostArea
from aml_core.specs import Kind
from aml_core.testing.lifetime import catch_unraisable, collect, collect_often, drop_hammer

PAGE = mmap.PAGESIZE
STEP = 1 << 20


class RecordingArea(Area):
    """Fake pointers; records allocations and frees, and every time a ``_free`` starts
    while this thread is already inside ``_allocate`` or ``_free`` (a re-entered area).
    ``inside_hook`` runs inside both (to run the collector there); ``fail_frees`` frees
    fail first."""

    def __init__(self) -> None:
        super().__init__(backend="fake", kind=Kind.DEVICE, device=0)
        self._ptrs = itertools.count(1 << 40, STEP)
        self.allocated: dict[int, int] = {}
        self.freed: list[int] = []
        self.reentered: list[str] = []
        self.fail_frees = 0
        self.inside_hook: Callable[[], None] | None = None
        self._depth = threading.local()

    def _enter(self, what: str) -> None:
        depth = getattr(self._depth, "n", 0)
        if depth and what == "free":
            self.reentered.append(what)
        self._depth.n = depth + 1

    def _leave_op(self) -> None:
        self._depth.n -= 1

    def _allocate(self, size: int, options: Any) -> Buffer:
        self._enter("allocate")
        try:
            if self.inside_hook is not None:
                self.inside_hook()
            ptr = next(self._ptrs)
            self.allocated[ptr] = size
            return self._new_buffer(ptr, size, host_accessible=False, dl_device=(2, 0), native=("fake", ptr))
        finally:
            self._leave_op()

    def _free(self, buffer: Buffer) -> None:
        self._enter("free")
        try:
            if self.inside_hook is not None:
                self.inside_hook()
            if self.fail_frees:
                self.fail_frees -= 1
                raise AMLFailure("the native free failed")
            assert buffer.ptr in self.allocated
            assert buffer.ptr not in self.freed, "double free"
            self.freed.append(buffer.ptr)
        finally:
            self._leave_op()

    @property
    def live(self) -> int:
        return len(self.allocated) - len(self.freed)


class Cycle:
    """Holds a buffer in a reference cycle: only the collector frees it."""

    def __init__(self, *held: object) -> None:
        self.held = held
        self.me = self


@pytest.fixture
def area() -> Iterator[RecordingArea]:
    a = RecordingArea()
    yield a
    a.close()


# -- what is freed, and when -------------------------------------------------------------------
def test_a_dropped_buffer_is_freed_at_once(area: RecordingArea) -> None:
    buf = area.mmap(1000)
    ptr = buf.ptr
    ref = weakref.ref(buf)
    del buf
    assert ref() is None
    assert area.freed == [ptr]
    st = area.stats
    assert (st.live_mappings, st.bytes_in_use, st.total_maps, st.total_unmaps) == (0, 0, 1, 1)
    assert area.buffers() == ()


def test_the_pointer_alone_does_not_keep_the_memory(area: RecordingArea) -> None:
    ptr = area.mmap(64).ptr  # nothing keeps the Buffer: freed at once
    assert area.freed == [ptr]
    with pytest.raises(AMLValueError, match="not mapped"):
        area.munmap(ptr)


def test_a_host_buffer_is_unmapped_when_dropped() -> None:
    with HostArea() as area:
        buf = area.mmap(4 * PAGE)
        memoryview(buf)[:5] = b"hello"
        ptr = buf.ptr
        del buf
        assert area.stats.live_mappings == 0
        with open("/proc/self/maps") as f:
            maps = f.read()
        assert f"{ptr:x}-" not in maps, "the mapping is still in /proc/self/maps"


def test_views_keep_a_dropped_buffer_alive(area: RecordingArea) -> None:
    host = HostArea()
    buf = host.mmap(PAGE)
    view = memoryview(buf)
    arr = np.frombuffer(buf, np.uint8)
    del buf
    assert host.stats.live_mappings == 1
    view[0] = 9
    assert arr[0] == 9
    del view
    assert host.stats.live_mappings == 1  # the array still views it
    del arr
    assert host.stats.live_mappings == 0
    host.close()


def test_a_dlpack_consumer_keeps_a_dropped_buffer_alive() -> None:
    host = HostArea()
    buf = host.mmap(PAGE)
    memoryview(buf)[:3] = b"abc"
    arr = np.from_dlpack(buf)
    capsule = buf.__dlpack__()
    del buf
    assert host.stats.live_mappings == 1
    assert bytes(arr[:3]) == b"abc"
    del arr
    assert host.stats.live_mappings == 1  # the unconsumed capsule counts too
    del capsule
    assert host.stats.live_mappings == 0
    host.close()


def test_a_buffer_in_a_cycle_is_freed_by_the_collector(area: RecordingArea) -> None:
    buf = area.mmap(100)
    ptr = buf.ptr
    Cycle(buf)
    del buf
    assert area.stats.live_mappings == 1
    collect()
    assert area.freed == [ptr]
    assert area.stats.live_mappings == 0


def test_a_cycle_that_holds_the_buffer_and_its_view() -> None:
    """The collector finalizes a buffer while a view of it is still alive (both are
    garbage): the free waits for the view, then runs."""
    host = HostArea()
    buf = host.mmap(PAGE)
    Cycle(buf, memoryview(buf))
    del buf
    collect()
    assert host.stats.live_mappings == 0
    host.close()


def test_buffers_made_by_a_subclass_are_freed_too(area: RecordingArea) -> None:
    buf = area._track(area._allocate(64, None))
    ptr = buf.ptr
    del buf
    assert area.freed == [ptr]


def test_munmap_and_close_are_unchanged(area: RecordingArea) -> None:
    a, b, c = area.mmap(1), area.mmap(2), area.mmap(3)
    area.munmap(a)
    area.munmap(b.ptr)
    assert area.buffers() == (c,)
    area.close()
    assert a.freed
    assert b.freed
    assert c.freed
    assert sorted(area.freed) == sorted([a.ptr, b.ptr, c.ptr])
    del a, b, c  # freed already: their finalizers do nothing
    assert area.stats.total_unmaps == 3


def test_a_buffer_cannot_be_copied(area: RecordingArea) -> None:
    buf = area.mmap(8)
    with pytest.raises(TypeError):
        copy.copy(buf)  # a second handle to one mapping would free it twice


def test_a_buffer_class_must_not_override_del() -> None:
    class Bad(Buffer):
        __slots__ = ()

        def __del__(self) -> None:
            pass

    class BadArea(RecordingArea):
        buffer_type = Bad

    area = BadArea()
    with pytest.raises(TypeError, match="__del__"):
        area.mmap(8)
    area.close()


def test_a_buffer_class_changed_after_mmaps_is_checked_again() -> None:
    """mmap checks its class's buffer type once while neither class changes: a
    ``buffer_type`` set on the area's class, or a ``__del__`` given to the buffer class
    later, is seen by the next mmap (and a pool's hit) as if never cached."""

    class Good(Buffer):
        __slots__ = ()

    class Other(Buffer):
        __slots__ = ()

    class SomeArea(RecordingArea):
        buffer_type = Good

    class SomePool(aml_core.Pool):
        buffer_type = Good

    area = SomeArea()
    pool = SomePool(area)
    for _ in range(3):
        assert type(area.mmap(8)) is Good
        assert type(pool.mmap(8)) is Good
    SomeArea.buffer_type = Other
    SomePool.buffer_type = Other
    assert type(area.mmap(8)) is Other
    assert type(pool.mmap(8)) is Other  # a pool's hit (the kernel, in C) makes the pool's buffer type

    def __del__(self: Buffer) -> None:
        pass

    Other.__del__ = __del__  # type: ignore[method-assign]
    with pytest.raises(TypeError, match="__del__"):
        area.mmap(8)
    with pytest.raises(TypeError, match="__del__"):
        pool.mmap(8)
    assert pool.pool_stats.bytes_in_use == 0  # the refused request took no block (the others were dropped)
    SomeArea.buffer_type = Good
    assert type(area.mmap(8)) is Good
    pool.close()
    area.close()


# -- the collector inside the area's own operations ---------------------------------------------
def test_a_collection_inside_allocate_defers_the_free(area: RecordingArea) -> None:
    """A finalizer run inside _allocate does not re-enter the area: the free waits until
    mmap leaves the area, then runs."""
    victim = area.mmap(100)
    ptr = victim.ptr
    Cycle(victim)
    del victim
    seen: list[list[int]] = []

    def inside() -> None:
        area.inside_hook = None  # once: in this _allocate
        gc.collect()
        seen.append(list(area.freed))

    area.inside_hook = inside
    buf = area.mmap(200)
    assert seen == [[]]  # not freed while inside _allocate
    assert area.freed == [ptr]  # freed when mmap left the area
    assert area.reentered == []
    area.munmap(buf)


def test_a_collection_inside_free_defers_the_free(area: RecordingArea) -> None:
    victim = area.mmap(100)
    Cycle(victim)
    del victim
    other = area.mmap(50)
    area.inside_hook = gc.collect
    area.munmap(other)
    area.inside_hook = None
    assert area.reentered == []
    assert area.stats.live_mappings == 0
    assert len(area.freed) == 2


def test_a_drop_inside_a_locked_section_waits_for_it(area: RecordingArea) -> None:
    buf = area.mmap(10)
    with area._lock:
        del buf
        assert area.stats.live_mappings == 1  # held until the section ends
        assert area.freed == []
    assert area.stats.live_mappings == 0
    assert len(area.freed) == 1


def test_a_detached_buffer_dropped_inside_close_waits_for_it(area: RecordingArea) -> None:
    """A buffer detached while viewed (its with block) loses its last view while close()
    frees another: its free waits until close() leaves the area."""
    held = area.mmap(20)
    views = [held.__dlpack__()]
    with held:
        pass  # still viewed: detached, freed when its views and the object are gone
    held_ptr = held.ptr
    del held
    other = area.mmap(10)

    def inside() -> None:
        area.inside_hook = None
        views.clear()  # the detached buffer is now unreachable, inside close()'s free

    area.inside_hook = inside
    area.close()
    assert area.reentered == []
    assert area.live == 0
    assert held_ptr in area.freed
    assert other.freed


def test_frees_do_not_wait_for_another_thread_to_leave(area: RecordingArea) -> None:
    """A drop while another thread is inside the area waits (a finalizer never waits on
    the area's lock), but only until some thread that is outside leaves an operation of
    the area: a busy area does not pile up dropped buffers."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with area._lock:
            entered.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(60)
        buf = area.mmap(100)
        ptr = buf.ptr
        del buf  # the other thread is inside: held
        assert area.freed == []
        assert area.stats.live_mappings == 1
        area.munmap(area.mmap(10))  # this thread enters and leaves the area: it frees it
        assert ptr in area.freed
        assert area.stats.live_mappings == 0
    finally:
        release.set()
        holder.join()


def test_the_collector_running_at_every_allocation(area: RecordingArea) -> None:
    with collect_often(1):
        for i in range(200):
            buf = area.mmap(8 + i)
            if i % 3 == 0:
                Cycle(buf)
            elif i % 3 == 1:
                area.munmap(buf)
            del buf
    collect()
    assert area.reentered == []
    assert area.live == 0
    st = area.stats
    assert st.live_mappings == 0
    assert st.total_maps == st.total_unmaps == 200


def test_dropping_from_many_threads(area: RecordingArea) -> None:
    drop_hammer(area, threads=8, rounds=100)
    assert area.live == 0
    assert area.reentered == []


def test_dropping_from_many_threads_on_a_host_area() -> None:
    with HostArea() as host:
        drop_hammer(host, threads=8, rounds=100, unit=PAGE)


# -- failures -------------------------------------------------------------------------------------
def test_a_failed_gc_free_is_reported_and_kept_for_close(area: RecordingArea) -> None:
    buf = area.mmap(100)
    ptr = buf.ptr
    area.fail_frees = 1
    with catch_unraisable() as caught:
        del buf
    assert len(caught) == 1
    report = caught[0]
    assert isinstance(report.exc, AMLFailure)
    assert "close() retries" in report.text
    assert isinstance(report.obj, Buffer)
    assert report.obj.ptr == ptr
    del report, caught
    # Tracked and held by the area: nothing else references it, and it is not freed again.
    assert area.stats.live_mappings == 1
    (kept,) = area.buffers()
    assert kept.ptr == ptr
    assert not kept.freed
    del kept
    collect()
    assert area.stats.live_mappings == 1
    area.close()
    assert area.freed == [ptr]
    assert area.stats.live_mappings == 0


def test_a_failed_gc_free_can_be_retried_by_munmap(area: RecordingArea) -> None:
    buf = area.mmap(100)
    ptr = buf.ptr
    area.fail_frees = 1
    with catch_unraisable() as caught:
        del buf
    assert len(caught) == 1
    area.munmap(ptr)
    assert area.freed == [ptr]
    assert area.stats.live_mappings == 0


def test_a_failed_free_of_a_dropped_cycle_is_reported(area: RecordingArea) -> None:
    buf = area.mmap(100)
    Cycle(buf)
    del buf
    area.fail_frees = 1
    with catch_unraisable() as caught:
        collect()
    assert [type(r.exc) for r in caught] == [AMLFailure]
    del caught
    assert area.stats.live_mappings == 1
    area.close()
    assert area.live == 0


# -- pools -----------------------------------------------------------------------------------
def test_a_dropped_pooled_buffer_goes_back_through_the_compiled_cache() -> None:
    under = RecordingArea()
    pool = aml_core.pool(under)
    pool.munmap(pool.mmap(4096))  # a cached block of the size
    cache = pool._pool_kernel
    assert cache is not None
    before = cache.fast_munmaps
    buf = pool.mmap(4096)
    assert cache.fast_mmaps >= 1
    del buf
    assert cache.fast_munmaps == before + 1  # the compiled path, as munmap takes
    ps = pool.pool_stats
    assert (ps.bytes_in_use, ps.block_bytes, ps.native_allocations) == (0, 0, 1)
    assert pool.stats.live_mappings == 0
    assert under.freed == []  # kept by the pool for reuse
    pool.close()
    under.close()
    assert under.live == 0


def test_a_dropped_pooled_buffer_on_the_python_path() -> None:
    under = RecordingArea()
    pool = aml_core.pool(under, release_threshold=0)  # every free coalesces and releases
    buf = pool.mmap(4096)
    slab = pool.slab_of(buf)[0]
    assert slab is not None
    slab_ptr = slab.ptr
    del buf, slab
    assert pool.stats.live_mappings == 0
    assert under.freed == [slab_ptr]  # the slab went back to the area
    assert pool.pool_stats.native_frees == 1
    pool.close()
    under.close()


def test_a_drop_under_the_pools_lock_waits_for_it() -> None:
    under = RecordingArea()
    pool = aml_core.pool(under, release_threshold=0)
    buf = pool.mmap(4096)
    with pool._kernel:
        del buf
        assert pool.stats.live_mappings == 1
    assert pool.stats.live_mappings == 0
    assert under.live == 0
    pool.close()
    under.close()


def test_a_drop_while_inside_the_area_below_waits_for_it() -> None:
    """A Python-path free of a pooled buffer may release a slab into the area below:
    it waits while someone is inside that area, which drains the pool when it leaves."""
    under = RecordingArea()
    pool = aml_core.pool(under, release_threshold=0)
    buf = pool.mmap(4096)
    with under._lock:
        del buf
        assert pool.stats.live_mappings == 1
    assert pool.stats.live_mappings == 0
    assert under.live == 0
    pool.close()
    under.close()


def test_a_collection_inside_the_pools_slab_allocation() -> None:
    under = RecordingArea()
    pool = aml_core.pool(under, small_slab=4096, small_max=4096)  # a slab per block
    victim = pool.mmap(4096)
    Cycle(victim)
    del victim
    under.inside_hook = gc.collect  # runs while the pool holds its lock, growing
    buf = pool.mmap(4096)
    under.inside_hook = None
    assert pool.stats.live_mappings == 1
    assert under.reentered == []
    pool.munmap(buf)
    ps = pool.pool_stats
    assert ps.bytes_in_use == 0
    pool.close()
    under.close()
    assert under.live == 0


def test_pools_dropping_from_many_threads() -> None:
    under = RecordingArea()
    pool = aml_core.pool(under)
    drop_hammer(pool, threads=8, rounds=100)
    assert pool.pool_stats.bytes_in_use == 0
    pool.close()
    under.close()
    assert under.live == 0
    assert under.reentered == []


def test_a_pool_over_a_host_area_with_views() -> None:
    with HostArea() as host, aml_core.pool(host) as pool:
        buf = pool.mmap(1000)
        arr = np.frombuffer(buf, np.uint8)
        del buf
        assert pool.stats.live_mappings == 1
        arr[:] = 3
        del arr
        assert pool.stats.live_mappings == 0


# -- interpreter exit ---------------------------------------------------------------------------
_AT_EXIT = """
import aml_core, gc, threading
from aml_core.host import HostArea

class Cycle:
    def __init__(self, held):
        self.held = held
        self.me = self

host = HostArea()
pool = aml_core.pool(host)
live = [host.mmap(4096) for _ in range(3)] + [pool.mmap(1000) for _ in range(3)]
cycles = [Cycle(host.mmap(4096)), Cycle(pool.mmap(512)), Cycle(memoryview(host.mmap(64)))]
unclosed = HostArea()
kept = unclosed.mmap(4096)
gc.disable()  # the cycles are left for the interpreter's exit
print("ok")
"""


def test_interpreter_exit_is_quiet() -> None:
    out = subprocess.run(
        [sys.executable, "-X", "dev", "-c", _AT_EXIT],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert "Exception ignored" not in out.stderr, out.stderr
    assert "Traceback" not in out.stderr, out.stderr


def test_warnings_are_not_raised_for_dropped_buffers(area: RecordingArea) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        buf = area.mmap(10)
        del buf
    assert area.live == 0


# -- areas ---------------------------------------------------------------------------------------
def test_dropped_areas_are_freed() -> None:
    """An area with no live buffer goes when dropped; one whose buffers are dropped too
    goes with them (no reference cycle the collector cannot break: the area does not hold
    its buffers, its locks hold it weakly)."""
    host = HostArea()
    pool = aml_core.pool(host)
    bufs = [host.mmap(PAGE), pool.mmap(100)]
    refs = [weakref.ref(host), weakref.ref(pool)]
    del host, pool, bufs
    collect()
    assert [r() for r in refs] == [None, None]
    assert gc.collect() == 0


@pytest.mark.parametrize("pooled", [False, True], ids=["area", "pool"])
def test_a_buffer_object_reused_from_the_free_list_is_freed_when_dropped_live(pooled: bool) -> None:
    """Buffer objects come from a free list: one whose finalizer ran (freed, then dropped)
    and that comes back for a new mapping is finalized again when it is dropped while
    live, so its memory is freed and its area's table holds no stale entry."""
    with HostArea() as host:
        area: Any = aml_core.pool(host) if pooled else host
        seen: set[int] = set()
        reused = 0
        for _ in range(20):
            buf = area.mmap(4096)
            seen.add(id(buf))
            buf.free()
            del buf  # finalized (nothing to do), then back on the free list
            live = area.mmap(4096)
            reused += id(live) in seen
            seen.add(id(live))
            del live  # dropped while live: its finalizer frees it
            assert area.buffers() == ()
            assert area.stats.live_mappings == 0
        assert reused > 0  # the objects were reused
        if pooled:
            area.close()


def test_a_pooled_buffer_makes_its_address_when_asked() -> None:
    """A pool's hit makes no int for the address until something asks: then ``ptr`` and
    ``device_ptr`` are the block's address, the same int each time, and munmap by that
    address finds the buffer."""
    with HostArea() as host:
        pool = aml_core.pool(host)
        first = pool.mmap(4096)
        address = first.ptr
        first.free()
        buf = pool.mmap(4096)
        assert type(buf.ptr) is int
        assert buf.ptr == address == buf.device_ptr
        assert buf.ptr is buf.ptr
        assert pool._tracked(address) is buf
        pool.munmap(address)
        assert buf.freed
        pool.close()
