"""A hypothesis state machine over an area's operations (mmap, munmap, memoryview views
and their release, failing native frees, close and its retry), on the fake-pointer area and
on a real host area. Invariants: the area's stats equal the model, every buffer the model
holds live is live in the area, and (fake area) the native allocations match; at the end,
close() (retried past injected failures) frees everything."""

from __future__ import annotations

import os

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from aml_core import Buffer
from aml_core.area import Area
from aml_core.errors import AMLBusyError, AMLError, AMLValueError
from aml_core.host import HostArea

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
