"""A hypothesis state machine over the HIP double (issue 9): mmap / munmap on a device and
a managed area, IPC export and its close, virtual memory reserve-create-map-unmap-release
and one-step vm.mmap, each with an optional injected native failure; invariants are the
areas' stats against the model and the double's live counters against the objects aml
tracks. At the end everything is closed (retried past failures) and the counters are zero.

Also the stress check: 16 threads on one HIP area for a bounded number of operations, the
stats consistent at the end and nothing left in the double."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import aml_hip
import pytest
from aml_hip import HipFlags
from hip_helpers import HipDouble, build_double
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from aml_core import Buffer
from aml_core.errors import AMLError
from aml_core.testing.stress import hammer

pytestmark = pytest.mark.host_double

EXAMPLES = int(os.environ.get("AML_STATE_MACHINE_EXAMPLES", "40"))
INVALID_VALUE = 1


class HipMachine(RuleBasedStateMachine):
    device_buffers = Bundle("device_buffers")
    mappings = Bundle("mappings")

    def __init__(self) -> None:
        super().__init__()
        self.double = HipDouble(build_double())
        self.double.enter(_PATCH)
        self.area = aml_hip.create(0, HipFlags.DEFAULT)
        self.managed = aml_hip.create(0, HipFlags.ALLOC_UNIFIED)
        self.vm = aml_hip.BACKEND.virtual_memory(0)
        self.g = self.vm.granularity()
        self.model: dict[int, Buffer] = {}
        self.steps: list[tuple[int, int, object, object]] = []  # (ptr, size, reservation, physical)

    # -- areas ----------------------------------------------------------------------------
    @rule(target=device_buffers, size=st.integers(1, 3 * 4096), managed=st.booleans(), fail=st.booleans())
    def mmap(self, size: int, managed: bool, fail: bool) -> Buffer | None:
        area = self.managed if managed else self.area
        if fail:
            self.double.inject("hipMallocManaged" if managed else "hipMalloc", 2)
        try:
            buf = area.mmap(size)
        except AMLError as exc:
            assert fail
            assert exc.native is not None  # noqa: PT017
            return None
        self.model[buf.ptr] = buf
        return buf

    @rule(buf=device_buffers, fail=st.booleans())
    def munmap(self, buf: Buffer | None, fail: bool) -> None:
        if buf is None or buf.ptr not in self.model or self.model[buf.ptr] is not buf:
            return
        if fail:
            self.double.inject("hipFree", INVALID_VALUE)
        try:
            buf.area.munmap(buf)
        except AMLError as exc:
            assert fail
            assert exc.native is not None  # noqa: PT017
            assert not buf.freed
            return
        del self.model[buf.ptr]

    @rule(buf=device_buffers)
    def ipc_export(self, buf: Buffer | None) -> None:
        if buf is None or buf.freed or buf.area is not self.area:
            return
        with self.area.ipc_export(buf) as export:
            assert export.handle.size == buf.size

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
        device = [b for b in self.area.buffers()]
        managed = [b for b in self.managed.buffers()]
        assert live["device"] == len(device)
        assert live["managed"] == len(managed)
        assert self.area.stats.bytes_in_use == sum(b.size for b in device)
        vm_buffers = self.vm.buffers()
        assert live["vmm_mapping"] == len(vm_buffers) + len(self.steps)
        assert live["vmm_reservation"] == len(vm_buffers) + len(self.steps)
        tracked = {b.ptr for b in device + managed + list(vm_buffers)}
        assert tracked == set(self.model)

    def teardown(self) -> None:
        try:
            for area in (self.area, self.managed, self.vm):
                for _ in range(2):
                    try:
                        area.close()
                        break
                    except AMLError:
                        continue
            assert all(a.stats.live_mappings == 0 for a in (self.area, self.managed, self.vm))
        finally:
            self.double.leave()


_PATCH = pytest.MonkeyPatch()


@pytest.fixture
def patched(double_library: Path) -> Iterator[None]:
    yield
    _PATCH.undo()


def test_state_machine(patched: None) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        HipMachine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_sixteen_threads_on_one_area(hip: object) -> None:
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        hammer(area, threads=16, rounds=300)
    finally:
        area.close()
