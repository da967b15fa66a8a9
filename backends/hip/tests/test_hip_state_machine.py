"""A hypothesis state machine over the HIP double (issue 9): the shared IPC machine
(:mod:`tests.support.ipc_machine`: mmap / munmap / close of a device area, its buffers
opened, written, read and closed in a long-lived second process, tampered handles) plus a
managed area with an optional injected native failure, and the shared virtual-memory rules
(:mod:`tests.support.vm_machine`); invariants are the areas' stats against the model and
both processes' double live counters against the objects aml tracks. At the
end everything is closed (retried past failures) and the counters are zero.

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
INVALID_VALUE, OUT_OF_MEMORY = 1, 2


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
            buf = area.mmap(4096, {"stream": s1})
            area.munmap_on(buf, s1)
            return [s1, area]
        # a pool holding blocks freed on two streams, each reused on its own stream (a
        # hand-over's event outlives a dropped pool: test_hip_pool's strict xfail)
        s2 = aml_hip.BACKEND.stream(non_blocking=True)
        pool = aml_core.pool(area, small_slab=4096, small_max=4096)
        a, b = pool.mmap(4096, {"stream": s1}), pool.mmap(4096, {"stream": s2})
        pool.munmap_on(a, s1)
        pool.munmap_on(b, s2)
        kept = pool.mmap(4096, {"stream": s2})  # s2's own block
        return [s1, s2, area, pool, kept]

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
