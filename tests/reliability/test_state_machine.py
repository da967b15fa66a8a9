"""A hypothesis state machine over an area's operations (mmap, munmap, memoryview views
and their release, failing native frees, close and its retry), on the fake-pointer area and
on a real host area. Invariants: the area's stats equal the model, every buffer the model
holds live is live in the area, and (fake area) the native allocations match; at the end,
close() (retried past injected failures) frees everything. A third machine runs a pool
beside its host area (PoolBesideAreaMachine)."""

from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

import aml_core
from aml_core import Buffer
from aml_core.area import Area
from aml_core.errors import AMLBusyError, AMLError, AMLValueError, ErrorCode
from aml_core.host import HostArea
from tests.support.pool_ownership import FREEING

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
        try:
            self.area.munmap(buf)
        except AMLBusyError:
            assert self.views.get(buf.ptr)
        except AMLValueError:
            assert self.live.get(buf.ptr) is not buf
        except AMLError:
            assert faulty
            assert not buf.freed
        else:
            assert self.live.pop(buf.ptr) is buf
            self.unmaps += 1
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

    def __init__(self) -> None:
        super().__init__()
        self.area = HostArea()
        self.pool = aml_core.pool(self.area, small_slab=64 * 1024, small_max=16 * 1024)
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

    @rule(buf=pooled)
    def pool_munmap(self, buf: Buffer) -> None:
        try:
            self.pool.munmap(buf)
        except AMLError as exc:
            error = exc
        else:
            del self.stamps[id(buf)]
            return
        self._refused(error, buf, self.pool)

    @rule(buf=direct)
    def area_munmap(self, buf: Buffer) -> None:
        try:
            self.area.munmap(buf)
        except AMLError as exc:
            error = exc
        else:
            return
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
