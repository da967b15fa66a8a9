"""A hypothesis state machine over the HIP double (issue 9): the shared IPC machine
(:mod:`tests.support.ipc_machine`: mmap / munmap / close of a device area, its buffers
opened, written, read and closed in a long-lived second process, tampered handles) plus a
managed area and virtual memory reserve-create-map-unmap-release and one-step vm.mmap, each
with an optional injected native failure; invariants are the areas' stats against the
model and both processes' double live counters against the objects aml tracks. At the
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
from hypothesis.stateful import Bundle, invariant, precondition, rule

from aml_core import Buffer
from aml_core.area import Area
from aml_core.errors import AMLError
from tests.support.ipc_machine import IpcMachine
from tests.support.stress import hammer

pytestmark = pytest.mark.host_double
INVALID_VALUE, OUT_OF_MEMORY = 1, 2


class HipMachine(IpcMachine):
    """The shared IPC machine (a device area, a peer importing from it) plus a managed
    area and virtual memory."""

    double_class = HipDouble
    ALLOC_KIND, IPC_KIND = "device", "ipc"
    ALLOC_FUNCTION, FREE_FUNCTION, FAIL_CODE = "hipMalloc", "hipFree", OUT_OF_MEMORY
    mappings = Bundle("mappings")

    def make_area(self) -> Area:
        return aml_hip.create(0, HipFlags.DEFAULT)

    def areas(self) -> list[Any]:
        return [self.area, self.managed, self.vm]

    def __init__(self) -> None:
        super().__init__()
        self.managed = aml_hip.create(0, HipFlags.ALLOC_UNIFIED)
        self.vm = aml_hip.BACKEND.virtual_memory(0)
        self.g = self.vm.granularity()
        self.steps: list[tuple[int, int, object, object]] = []  # (ptr, size, reservation, physical)

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

    # -- virtual memory -------------------------------------------------------------------
    @rule(target=mappings, fail=st.sampled_from([None, "hipMemMap", "hipMemSetAccess", "hipMemRelease"]))
    def vm_mmap(self, fail: str | None) -> Buffer | None:
        if fail:
            self.double.inject(fail, INVALID_VALUE)
        try:
            buf = self.vm.mmap(self.g)
        except AMLError as exc:
            assert fail
            assert exc.native is not None  # noqa: PT017
            assert exc.native.function == fail  # noqa: PT017
            return None
        self.model[buf.ptr] = buf
        return buf

    @rule(buf=mappings, fail=st.booleans())
    def vm_munmap(self, buf: Buffer | None, fail: bool) -> None:
        if buf is None or self.model.get(buf.ptr) is not buf:
            return
        if fail:
            self.double.inject("hipMemUnmap", INVALID_VALUE)
        try:
            self.vm.munmap(buf)
        except AMLError:
            assert fail
            return
        del self.model[buf.ptr]

    @precondition(lambda self: len(self.steps) < 4)
    @rule()
    def vm_steps_map(self) -> None:
        res = self.vm.reserve(self.g)
        phys = self.vm.create(self.g)
        self.vm.map(res.ptr, self.g, phys)
        self.steps.append((res.ptr, self.g, res, phys))

    @precondition(lambda self: bool(self.steps))
    @rule(fail=st.booleans())
    def vm_steps_unmap(self, fail: bool) -> None:
        ptr, size, res, phys = self.steps[-1]
        if fail:
            self.double.inject("hipMemUnmap", INVALID_VALUE)
        try:
            self.vm.unmap(ptr, size)
        except AMLError:
            assert fail
            return
        self.vm.release(phys)  # type: ignore[arg-type]
        self.vm.address_free(res)  # type: ignore[arg-type]
        self.steps.pop()

    # -- invariants -----------------------------------------------------------------------
    @invariant()
    def counters_match(self) -> None:
        live = self.double.live()
        managed = list(self.managed.buffers())
        assert live["managed"] == len(managed)
        vm_buffers = self.vm.buffers()
        assert live["vmm_mapping"] == len(vm_buffers) + len(self.steps)
        assert live["vmm_reservation"] == len(vm_buffers) + len(self.steps)
        tracked = {b.ptr for b in [*self.area.buffers(), *managed, *vm_buffers]}
        assert tracked == set(self.model)


def test_state_machine(double_library: Path) -> None:
    HipMachine.run(double_library)


def test_sixteen_threads_on_one_area(hip: object) -> None:
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        hammer(area, threads=16, rounds=300)
    finally:
        area.close()
