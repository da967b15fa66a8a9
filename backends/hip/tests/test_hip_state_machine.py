"""A hypothesis state machine over the HIP double (issue 9): the shared IPC machine
(:mod:`tests.support.ipc_machine`: mmap / munmap / close of a device area, its buffers
opened, written, read and closed in a long-lived second process, tampered handles) plus a
managed area with an optional injected native failure, a pool's stream hand-over with an
optional failure of each of its event calls, and the shared virtual-memory and drop rules
(:mod:`tests.support.vm_machine`, :mod:`tests.support.dropped_machine`); invariants are
the areas' stats against the model and both processes' double live counters against the
objects aml tracks. At the end everything is closed (retried past failures) and the
counters are zero.

Also the stress check: 16 threads on one HIP area for a bounded number of operations, the
stats consistent at the end and nothing left in the double."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aml_hip
import pytest
from aml_hip import HipFlags
from hip_helpers import HipDouble
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

import aml_core
from aml_core import Buffer
from aml_core.area import Area
from aml_core.errors import AMLError
from aml_core.gpu import VirtualMemory
from tests.support.dropped_machine import DroppedMachine
from tests.support.ipc_machine import IpcMachine
from tests.support.stress import hammer

pytestmark = pytest.mark.host_double
INVALID_VALUE, OUT_OF_MEMORY, UNKNOWN = 1, 2, 999
#: A pool's hand-over calls (None: none fails) and the codes injected into them.
HAND_OVER_CALLS = (None, "hipEventCreateWithFlags", "hipEventRecord", "hipStreamWaitEvent")
HAND_OVER_CODES = (INVALID_VALUE, OUT_OF_MEMORY, UNKNOWN)


class HipMachine(DroppedMachine):
    """The shared IPC machine (a device area, a peer importing from it) and virtual-memory
    rules, plus a managed area."""

    double_class = HipDouble
    ALLOC_KIND, IPC_KIND = "device", "ipc"
    ALLOC_FUNCTION, FREE_FUNCTION, FAIL_CODE = "hipMalloc", "hipFree", OUT_OF_MEMORY
    VM_KINDS = ("vmm_reservation", "vmm_handle", "vmm_mapping")
    VM_FUNCTIONS = ("hipMemAddressReserve", "hipMemCreate", "hipMemMap", "hipMemSetAccess", "hipMemUnmap")
    VM_RELEASE = "hipMemRelease"

    def make_area(self) -> Area:
        return aml_hip.create(0, HipFlags.DEFAULT)

    def areas(self) -> list[Any]:
        return [*super().areas(), self.managed]

    def __init__(self) -> None:
        super().__init__()
        self.managed = aml_hip.create(0, HipFlags.ALLOC_UNIFIED)

    def make_vm(self) -> VirtualMemory:
        return aml_hip.BACKEND.virtual_memory(0)

    # -- dropped streams and events (the shared drop rules check what outlives them) ------
    DROPS = ("stream", "stream, used", "pool, blocks freed on streams")

    def dropped_objects(self, what: str) -> list[Any]:
        s1 = aml_hip.BACKEND.stream(non_blocking=True)
        if what == "stream":
            return [s1]
        area = aml_hip.create(0, HipFlags.DEFAULT)
        if what == "stream, used":  # stream-ordered memory queued on it, freed on it
            buf = area.mmap(4096, stream=s1)
            area.munmap(buf, stream=s1)
            return [s1, area]
        # a pool holding blocks freed on two streams, one reused on its own stream, one
        # handed to the other stream through the pool's event (which the dropped pool's
        # deallocation destroys: test_hip_pool.py::test_a_dropped_pool_destroys_its_hand_over_event)
        s2 = aml_hip.BACKEND.stream(non_blocking=True)
        pool = aml_core.pool(area, small_slab=4096, small_max=4096)
        a, b = pool.mmap(4096, stream=s1), pool.mmap(4096, stream=s2)
        pool.munmap(a, stream=s1)
        pool.munmap(b, stream=s2)
        kept = pool.mmap(4096, stream=s2)  # s2's own block
        handed = pool.mmap(4096, stream=s2)  # s1's block, through the event
        assert self.double.live()["event"] == 1
        return [s1, s2, area, pool, kept, handed]

    # -- a pool's stream hand-over, each of its event calls failing ---------------------
    @rule(fail=st.sampled_from(HAND_OVER_CALLS), code=st.sampled_from(HAND_OVER_CODES), retry=st.booleans())
    def pool_hand_over(self, fail: str | None, code: int, retry: bool) -> None:
        """A pool over a new device area: a block freed on s1 and taken on s2 through the
        pool's event (hipEventCreateWithFlags once, hipEventRecord on s1,
        hipStreamWaitEvent on s2), with one of the three calls failing or none. A failure
        is the call's translated error and loses nothing: the block stays on s1's list,
        counted cached, and a retry (or close) finds it. After close the double's live
        counters, events included, are what they were before."""
        before = self.double.live()
        s1 = aml_hip.BACKEND.stream(non_blocking=True)
        s2 = aml_hip.BACKEND.stream(non_blocking=True)
        area = aml_hip.create(0, HipFlags.DEFAULT)
        pool = aml_core.pool(area, small_slab=4096, small_max=4096)  # slabs of one block
        try:
            a = pool.mmap(4096, stream=s1)
            addr = a.ptr
            self.double.write_memory(addr, b"handed over")
            pool.munmap(a, stream=s1)
            slabs = self.double.calls("hipMalloc")
            if fail is not None:
                self.double.inject(fail, code)
            try:
                b = pool.mmap(4096, stream=s2)
            except AMLError as exc:
                assert fail is not None, exc  # noqa: PT017
                assert exc.native is not None  # noqa: PT017
                assert exc.native.function == fail  # noqa: PT017
                assert pool._kernel.stream_cached() == {(s1.handle, 4096): [addr]}  # nothing lost
                assert pool.pool_stats.bytes_cached == 4096
                # no retry: close (below) releases the block's slab and any event made
                b = pool.mmap(4096, stream=s2) if retry else None
            else:
                assert fail is None
            if b is not None:
                assert b.ptr == addr  # s1's block, not a new slab
                assert self.double.calls("hipMalloc") == slabs
                assert self.double.live()["event"] == before["event"] + 1  # the pool's one event
                assert self.double.read_memory(addr, 11) == b"handed over"
                pool.munmap(b, stream=s2)
        finally:
            pool.close()
            area.close()
            s2.close()
            s1.close()
        assert self.double.live() == before
        self._memory_is_live()

    # -- managed memory (freed by the shared munmap rule: hipFree) ------------------------
    @rule(target=IpcMachine.buffers, size=st.integers(1, 3 * 4096), fail=st.booleans())
    def mmap_managed(self, size: int, fail: bool) -> Buffer | None:
        if fail:
            self.double.inject("hipMallocManaged", OUT_OF_MEMORY)
        try:
            buf = self.managed.mmap(size)
        except AMLError as exc:
            assert fail
            assert exc.native is not None  # noqa: PT017
            return None
        self.model[buf.ptr] = buf
        return buf

    # -- invariants -----------------------------------------------------------------------
    @invariant()
    def counters_match(self) -> None:
        live = self.double.live()
        managed = list(self.managed.buffers())
        assert live["managed"] == len(managed)
        tracked = {b.ptr for b in [*self.area.buffers(), *managed, *self.vm.buffers()]}
        assert tracked == set(self.model)


def test_state_machine(double_library: Path) -> None:
    HipMachine.run(double_library)


def test_sixteen_threads_on_one_area(hip: object) -> None:
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        hammer(area, threads=16, rounds=300)
    finally:
        area.close()
