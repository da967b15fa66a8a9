"""Area's compiled bookkeeping (aml_core._buffer: AreaBase, BufferBase): thread safety
(every change to the live mappings is one atomic AreaBase method; the native calls run
outside them), the restore path, garbage collection and weak references."""

from __future__ import annotations

import enum
import gc
import itertools
import random
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from aml_core import Buffer
from aml_core.area import Area
from aml_core.errors import AMLBusyError, AMLDomainError, AMLFailure, AMLValueError
from aml_core.host import HostArea
from aml_core.specs import MAX_SIZE, Kind

STEP = 1 << 20  # fake pointers are this far apart; sizes stay below


class FakeArea(Area):
    """An area over fake pointers that records every allocation and free, and
    reports double frees and frees of unknown pointers."""

    def __init__(self) -> None:
        super().__init__(backend="fake", kind=Kind.DEVICE, device=0)
        self._ptrs = itertools.count(1 << 40, STEP)
        self.mu = threading.Lock()
        self.allocated: dict[int, int] = {}
        self.freed: set[int] = set()
        self.bad: list[str] = []
        self.fail_frees = 0

    def _allocate(self, size: int, options: Any) -> Buffer:
        ptr = next(self._ptrs)
        with self.mu:
            self.allocated[ptr] = size
        return self._new_buffer(ptr, size, host_accessible=False, dl_device=(2, 0), native=("fake", ptr))

    def _free(self, buffer: Buffer) -> None:
        with self.mu:
            if self.fail_frees:
                self.fail_frees -= 1
                raise AMLFailure("the native free failed")
            ptr = buffer.ptr
            if ptr not in self.allocated:
                self.bad.append(f"free of unknown 0x{ptr:x}")
            elif ptr in self.freed:
                self.bad.append(f"double free of 0x{ptr:x}")
            elif buffer.native != ("fake", ptr):
                self.bad.append(f"wrong native for 0x{ptr:x}")
            self.freed.add(ptr)


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads as often as possible, to interleave the areas' operations."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


# -- threads -----------------------------------------------------------------------------------
def test_threads_mmap_munmap_counters_exact(fast_switching: None) -> None:
    area = FakeArea()
    threads, rounds = 16, 400
    errors: list[BaseException] = []
    maps = [0] * threads
    max_bytes = [0] * threads

    def work(seed: int) -> None:
        rng = random.Random(seed)
        mine: list[Buffer] = []
        try:
            for _ in range(rounds):
                size = rng.randrange(1, STEP)
                mine.append(area.mmap(size))
                maps[seed] += 1
                max_bytes[seed] = max(max_bytes[seed], sum(b.size for b in mine))
                if rng.random() < 0.6:
                    buf = mine.pop(rng.randrange(len(mine)))
                    how = rng.randrange(3)
                    if how == 0:
                        area.munmap(buf)
                    elif how == 1:
                        area.munmap(buf.ptr, buf.size)
                    else:
                        buf.free()
            for buf in mine:
                area.munmap(buf)
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    def reader() -> None:  # stats and buffers, concurrently
        try:
            while not done.is_set():
                st = area.stats  # one atomic read: every change is seen whole or not at all
                assert st.live_mappings == st.total_maps - st.total_unmaps
                assert 0 <= st.bytes_in_use <= st.peak_bytes
                bufs = area.buffers()  # one atomic snapshot
                assert len({b.ptr for b in bufs}) == len(bufs)
        except BaseException as exc:
            errors.append(exc)

    done = threading.Event()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in workers + readers:
        t.start()
    for t in workers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert not errors, errors[0]
    assert not area.bad, area.bad[:5]
    st = area.stats
    total = sum(maps)
    assert (st.live_mappings, st.bytes_in_use) == (0, 0)
    assert st.total_maps == st.total_unmaps == total == threads * rounds
    assert max(max_bytes) <= st.peak_bytes <= sum(area.allocated.values())
    assert area.freed == set(area.allocated)
    area.close()


def _race_close(
    area: FakeArea, seed: int, go: threading.Barrier, done: list[int], errors: list[BaseException]
) -> None:
    """Map, unmap and double-unmap until the area is closed under us."""
    rng = random.Random(seed)
    go.wait()
    try:
        for _ in range(500):
            try:
                buf = area.mmap(rng.randrange(1, 1 << 16))
            except AMLValueError as exc:
                if "closed" not in str(exc):
                    raise
                continue
            done.append(1)  # list.append is atomic
            if rng.random() < 0.7:
                try:
                    area.munmap(buf if rng.random() < 0.5 else buf.ptr)
                except AMLValueError as exc:
                    if "closed" not in str(exc):
                        raise
                with pytest.raises(AMLValueError):  # twice: already unmapped, or closed
                    area.munmap(buf)
    except BaseException as exc:  # collected for the main thread
        errors.append(exc)


def test_threads_with_a_concurrent_close(fast_switching: None) -> None:
    """Workers map, unmap and double-unmap while the area closes: every allocation is
    freed exactly once, and the counters add up."""
    for attempt in range(5):
        area = FakeArea()
        errors: list[BaseException] = []
        done: list[int] = []
        go = threading.Barrier(9)
        workers = [
            threading.Thread(target=_race_close, args=(area, attempt * 100 + i, go, done, errors))
            for i in range(8)
        ]
        for t in workers:
            t.start()
        go.wait()
        time.sleep(0.002 * attempt)
        area.close()
        for t in workers:
            t.join()
        assert not errors, errors[0]
        assert not area.bad, area.bad[:5]
        assert area.freed == set(area.allocated)  # mmaps that lost the race were freed too
        st = area.stats
        assert (st.live_mappings, st.bytes_in_use) == (0, 0)
        assert st.total_maps == st.total_unmaps == len(done)
        assert area.closed
        assert area.buffers() == ()
        with pytest.raises(AMLValueError, match="closed"):
            area.mmap(1)


def test_threads_on_the_host_area(fast_switching: None) -> None:
    area = HostArea()
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(300):
                buf = area.mmap(4096 * (1 + (worker + i) % 4))
                memoryview(buf)[0] = worker
                if i % 3:
                    area.munmap(buf)
                else:
                    area.munmap(buf.ptr, buf.size)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors[0]
    st = area.stats
    assert (st.live_mappings, st.bytes_in_use, st.total_maps, st.total_unmaps) == (0, 0, 3600, 3600)
    area.close()


def test_native_calls_run_outside_the_bookkeeping() -> None:
    """While one thread is inside the backend's _free (or _allocate), the area stays
    usable from other threads: the native calls hold no lock of the area's."""
    area = FakeArea()
    buf = area.mmap(100)
    other = area.mmap(50)
    inside, release = threading.Event(), threading.Event()
    free = area._free

    def slow_free(buffer: Buffer) -> None:
        if buffer is buf:
            inside.set()
            assert release.wait(5)
        free(buffer)

    area._free = slow_free  # type: ignore[method-assign]
    t = threading.Thread(target=area.munmap, args=(buf,))
    t.start()
    assert inside.wait(5)
    # Detached before its native free: no longer live, counted, refused to a second munmap.
    assert buf.freed
    assert area.buffers() == (other,)
    assert (area.stats.live_mappings, area.stats.total_unmaps) == (1, 1)
    with pytest.raises(AMLValueError, match="already unmapped"):
        area.munmap(buf)
    new = area.mmap(200)  # the other threads go on meanwhile
    area.munmap(other)
    assert area.buffers() == (new,)
    release.set()
    t.join()
    assert buf.ptr in area.freed
    with area._lock, area._lock:  # _lock is a re-entrant lock for subclasses' own state
        area.munmap(area.mmap(10))
    area.close()
    assert not area.bad


def test_threads_unmap_the_same_buffer_exactly_once(fast_switching: None) -> None:
    area = FakeArea()
    for _ in range(200):
        buf = area.mmap(64)
        go = threading.Barrier(4)
        outcomes: list[str] = []

        def unmap(target: Buffer | int, go: threading.Barrier = go, outcomes: list[str] = outcomes) -> None:
            go.wait()
            try:
                area.munmap(target)
                outcomes.append("freed")
            except AMLValueError as exc:  # by the buffer or by its pointer, once unmapped
                known = "already unmapped" in str(exc) or "not mapped" in str(exc)
                outcomes.append("already" if known else str(exc))

        threads = [threading.Thread(target=unmap, args=(buf if i % 2 else buf.ptr,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["already", "already", "already", "freed"]
    st = area.stats
    assert (st.live_mappings, st.total_maps, st.total_unmaps) == (0, 200, 200)
    assert not area.bad
    area.close()


# -- the restore path ----------------------------------------------------------------------
@pytest.mark.parametrize("by", ["buffer", "ptr", "ptr_and_size", "slow"])
def test_a_failing_free_keeps_the_buffer_live(by: str) -> None:
    area = FakeArea()
    first = area.mmap(300)
    buf = area.mmap(500)
    last = area.mmap(700)
    before = area.stats
    area.fail_frees = 1
    target: Any = buf if by == "buffer" else buf.ptr
    size: Any = {"ptr_and_size": 500, "slow": _Size.FIVE_HUNDRED}.get(by)
    with pytest.raises(AMLFailure, match="native free failed"):
        area.munmap(target, size)
    assert not buf.freed
    assert area.stats == before
    assert area.buffers() == (first, last, buf)  # tracked again (as the last one)
    area.munmap(target, size)  # now it works
    assert buf.freed
    st = area.stats
    assert (st.live_mappings, st.bytes_in_use, st.total_unmaps) == (2, 1000, 1)
    assert st.peak_bytes == 1500
    area.close()
    assert not area.bad
    assert area.freed == set(area.allocated)


class _Size(enum.IntEnum):  # int subclasses: munmap takes the checked path
    FIVE_HUNDRED = 500
    PAGE = 4096


def test_a_failing_free_during_close_is_raised_and_kept_for_a_retry() -> None:
    """Nothing is marked freed that was not: the mapping whose free failed stays tracked
    by the closed area, and close() again frees it."""
    area = FakeArea()
    a, b = area.mmap(10), area.mmap(20)
    area.fail_frees = 1
    with pytest.raises(AMLFailure):
        area.close()
    assert area.closed
    assert not a.freed
    assert b.freed
    st = area.stats
    assert (st.live_mappings, st.bytes_in_use, st.total_unmaps) == (1, 10, 1)
    area.close()  # the retry
    assert a.freed
    st = area.stats
    assert (st.live_mappings, st.bytes_in_use, st.total_unmaps) == (0, 0, 2)
    assert area.freed == set(area.allocated)


# -- checked paths: the same errors as before ----------------------------------------------
def test_errors_of_the_checked_path() -> None:
    area, other = FakeArea(), FakeArea()
    buf = area.mmap(4096)
    foreign = other.mmap(4096)
    with pytest.raises(AMLValueError, match="inside the mapping"):
        area.munmap(buf.ptr + 8)
    with pytest.raises(AMLValueError, match="was not mapped by this area"):
        area.munmap(buf.ptr + STEP // 2)
    with pytest.raises(AMLValueError, match="was not mapped by this area"):
        area.munmap(foreign)
    with pytest.raises(AMLValueError, match="does not match"):
        area.munmap(buf, 4095)
    with pytest.raises(AMLValueError, match="> 0"):
        area.munmap(buf, 0)
    with pytest.raises(TypeError):
        area.munmap(buf, 4096.0)
    with pytest.raises(TypeError, match="Buffer or an int"):
        area.munmap(True)
    assert area.stats.live_mappings == 1
    area.munmap(buf.ptr, _Size.PAGE)
    with pytest.raises(AMLValueError, match="already unmapped"):
        area.munmap(buf)
    with pytest.raises(AMLValueError, match="was not mapped"):
        area.munmap(buf.ptr)
    area.close()
    other.close()


def test_a_viewed_buffer_is_busy_then_freed() -> None:
    with HostArea() as area:
        buf = area.mmap(4096)
        view = memoryview(buf)
        with pytest.raises(AMLBusyError):
            area.munmap(buf)
        with pytest.raises(AMLBusyError):
            area.munmap(buf.ptr)
        assert area.stats.live_mappings == 1
        assert not buf.freed
        view.release()
        area.munmap(buf.ptr)
        assert buf.freed
        assert area.stats.total_unmaps == 1


def test_a_subclass_lookup_sees_every_munmap() -> None:
    seen: list[object] = []

    class Watched(FakeArea):
        def _lookup(self, target: Buffer | int, size: int | None) -> Buffer:
            seen.append(target)
            return super()._lookup(target, size)

    area = Watched()
    buf = area.mmap(64)
    area.munmap(buf)
    assert seen == [buf]
    assert buf.freed
    area.close()


def test_counters_are_exact_up_to_the_address_space() -> None:
    """The counters are 64-bit: exact for any set of live mappings (disjoint ranges of a
    64-bit address space), and a mapping that would pass 2**64 - 1 live bytes (only fake
    pointers can) is given back and refused, never wrapped."""
    area = FakeArea()
    bufs = [area.mmap(MAX_SIZE), area.mmap(MAX_SIZE), area.mmap(1)]  # 2**64 - 1 bytes
    st = area.stats
    assert st.bytes_in_use == st.peak_bytes == 2 * MAX_SIZE + 1 == 2**64 - 1
    with pytest.raises(AMLDomainError, match="2\\*\\*64"):
        area.mmap(1)
    assert len(area.freed) == 1  # the refused mapping was freed
    assert area.stats == st
    for buf in bufs:
        area.munmap(buf)
    st = area.stats
    assert (st.bytes_in_use, st.peak_bytes, st.total_maps, st.total_unmaps) == (0, 2**64 - 1, 3, 3)
    area.close()
    assert not area.bad


# -- buffers: C attributes, GC, weak references --------------------------------------------
def test_new_buffer_binds_everything() -> None:
    area = FakeArea()
    buf = area._new_buffer(1 << 30, 10, host_accessible=True, dl_device=(1, 0))
    assert type(buf) is Buffer
    assert (buf.ptr, buf.size, buf.device_ptr, buf.device, buf.native) == (1 << 30, 10, 1 << 30, 0, None)
    assert buf.area is area
    assert buf.kind is Kind.DEVICE
    assert buf.host_accessible
    assert not buf.readonly
    assert buf.__dlpack_device__() == (1, 0)
    other = area._new_buffer(
        ptr=5, size=6, host_accessible=False, readonly=True, device_ptr=7, native="n", device=3
    )
    assert (other.ptr, other.size, other.device_ptr, other.native, other.device) == (5, 6, 7, "n", 3)
    assert other.readonly
    assert not other.host_accessible
    assert other.__dlpack_device__() == (0, 0)
    with pytest.raises(TypeError, match="host_accessible"):
        area._new_buffer(1, 2)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        area._new_buffer(1, 2, host_accessible=True, bogus=1)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="multiple values"):
        area._new_buffer(1, 2, host_accessible=True, size=3)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match=">= 0"):
        area._new_buffer(1, -2, host_accessible=True)
    with pytest.raises(TypeError, match="buffer_type"):
        area._new_buffer(1, 2, host_accessible=True, buffer_type=int)  # type: ignore[type-var]

    class Sub(Buffer):
        __slots__ = ()

    sub = area._new_buffer(8, 2, host_accessible=False, buffer_type=Sub)
    assert type(sub) is Sub
    assert (sub.area, sub.ptr, sub.size) == (area, 8, 2)
    # What a free depends on is read-only from Python (issue 9), and so is what it describes.
    for name in ("ptr", "size", "native", "area", "device_ptr", "kind", "device", "freed", "exports"):
        with pytest.raises(AttributeError):
            setattr(buf, name, 1)
    assert (buf.ptr, buf.size, buf.native) == (1 << 30, 10, None)
    area.close()


def test_abstract_areas_still_refuse_to_instantiate() -> None:
    with pytest.raises(TypeError, match="abstract"):
        Area(backend="x", kind=Kind.HOST)  # type: ignore[abstract]


def test_buffers_are_collected_through_cycles() -> None:
    area = FakeArea()
    holder: list[Any] = []
    buf = area._track(area._new_buffer(1 << 41, 64, host_accessible=False, native=holder))
    holder.append(buf)  # buffer <-> native
    ref = weakref.ref(buf)
    assert gc.is_tracked(buf)
    assert holder in gc.get_referents(buf)
    assert area in gc.get_referents(buf)
    area._free = lambda b: None  # type: ignore[method-assign]  # its native is no longer ("fake", ptr)
    area.close()
    assert buf.freed
    del buf, holder
    gc.collect()
    assert ref() is None


def test_an_unreachable_area_and_its_buffers_are_collected() -> None:
    """An area and its live buffers in a reference cycle: the collector frees every
    mapping (through the buffers' finalizers or the area's close()) and the area."""
    area = FakeArea()
    freed = area.freed
    bufs = [area.mmap(32) for _ in range(3)]
    ptrs = {b.ptr for b in bufs}
    cycle: list[Any] = [area, bufs]
    cycle.append(cycle)
    area_ref = weakref.ref(area)
    del area, bufs, cycle
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # "unclosed", if the area goes first
        gc.collect()
    assert area_ref() is None
    assert freed == ptrs


def test_an_area_whose_free_failed_is_closed_by_the_collector() -> None:
    """The area holds a buffer whose free failed (for a retry): dropped, the area and
    that buffer form a cycle; the collector frees it (the area's close() or the buffer's
    finalizer, whichever it runs first) and the area."""
    area = FakeArea()
    buf = area.mmap(32)
    ptr = buf.ptr
    area.fail_frees = 1
    with pytest.raises(AMLFailure):
        area.munmap(buf)
    freed = area.freed
    area_ref = weakref.ref(area)
    del area, buf
    assert area_ref() is not None  # held through the kept buffer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # "unclosed", if the area goes first
        gc.collect()
    assert area_ref() is None
    assert ptr in freed


def test_weak_references_to_buffers() -> None:
    class Sub(Buffer):
        __slots__ = ()

    class SubArea(FakeArea):
        buffer_type = Sub

    area = SubArea()
    buf = area.mmap(8)
    assert type(buf) is Sub
    refs = [weakref.ref(buf), weakref.ref(area.mmap(16))]
    assert refs[0]() is buf
    called: list[int] = []
    fin = weakref.finalize(buf, called.append, 1)
    area.munmap(buf)
    del buf
    assert refs[0]() is None
    assert called == [1]
    assert not fin.alive
    assert refs[1]() is None  # the area does not keep live buffers: dropped, it was freed
    assert area.stats.live_mappings == 0
    assert len(area.freed) == 2
    area.close()
    with pytest.raises(AttributeError):
        Sub.__new__(Sub).area  # noqa: B018  # unset attributes raise, as slots did


# -- helpers for subclasses that make their own buffers -------------------------------------
def test_track_and_resized() -> None:
    area = FakeArea()
    buf = area._track(area._allocate(100, None))
    assert area.buffers() == (buf,)
    assert area.stats.total_maps == 1
    buf._bind(buf.ptr, 300, 0, 2, 0)  # grown in place, as a growable buffer does
    area._resized(buf, 100)
    assert (area.stats.bytes_in_use, area.stats.peak_bytes) == (300, 300)
    area.munmap(buf)
    area._resized(buf, 300)  # no longer live: not counted
    assert (area.stats.bytes_in_use, area.stats.peak_bytes) == (0, 300)
    late = area._allocate(50, None)
    area.close()
    with pytest.raises(AMLValueError, match="closed during growable"):
        area._track(late, "growable")
    assert late.freed
    assert late.ptr in area.freed
    assert not area.bad
