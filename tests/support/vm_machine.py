"""Virtual-memory rules for a backend's state machine (issue 20), written once for every
backend whose ``virtual_memory(device)`` is an :class:`aml_core.gpu.VirtualMemory` over a
driver double (aml-hip, aml-ze, aml-hsa).

:class:`VmMachine` adds to the shared :class:`~tests.support.ipc_machine.IpcMachine`:

* one-step ``vm.mmap`` / ``vm.munmap``, each with an optional injected native failure of
  one of the calls it makes (reserve, create, map, set access; unmap);
* the steps by hand: reserve, create physical memory, map, set access, then unmap (with
  an optional injected failure), release and address free;
* growable buffers: made, grown a granule at a time (with an optional injected failure
  of the map), freed by munmap;
* refusals: freeing a reservation that still holds a mapping, unmapping with the wrong
  size, mapping over a mapping, releasing a released physical allocation, munmap of a
  freed buffer, growing past the capacity, each a documented AML error that changes
  nothing.

Invariants after each step: the double's live reservations and mappings equal the model's
(one reservation and one mapping per one-step buffer and per hand-made step; one
reservation per growable buffer and one mapping per chunk); no physical allocation is
live without a mapping (or a failed release in ``vm.mmap``, kept until close); the area
tracks exactly the model's buffers and no freed buffer is reachable through it. A native
failure must surface as an AML error naming the injected function; a call that was to
fail and did not is an error. At the end of each example the area is closed and every VM
counter of the double is zero.

A backend's machine sets :attr:`VmMachine.VM_KINDS`, :attr:`VmMachine.VM_FUNCTIONS` and
:meth:`VmMachine.make_vm` (and :attr:`VmMachine.VM_RELEASE` where it applies); the
injected code is :attr:`IpcMachine.FAIL_CODE`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, invariant, precondition, rule

from aml_core.buffer import Buffer
from aml_core.errors import AMLBusyError, AMLError, AMLValueError
from aml_core.gpu import Access, GrowableBuffer

from .ipc_machine import IpcMachine

__all__ = ["VmMachine"]

#: The steps a backend names its native function for (:attr:`VmMachine.VM_FUNCTIONS`).
STEPS = ("reserve", "create", "map", "set_access", "unmap")


class VmMachine(IpcMachine):
    """The IPC machine plus virtual memory (see the module doc)."""

    #: The double's live kinds of a reservation, a physical allocation and a mapping.
    VM_KINDS: ClassVar[tuple[str, str, str]]
    #: The native function of each of :data:`STEPS`, in that order.
    VM_FUNCTIONS: ClassVar[tuple[str, str, str, str, str]]
    #: The native function that releases physical memory still mapped (mmap drops its
    #: creation reference): None where the backend destroys it only after the unmap
    #: (Level Zero).
    VM_RELEASE: ClassVar[str | None] = None

    mappings = Bundle("mappings")
    growables = Bundle("growables")

    def make_vm(self) -> Any:
        """The backend's ``virtual_memory(0)``."""
        raise NotImplementedError

    def areas(self) -> list[Any]:
        return [*super().areas(), self.vm]

    def __init__(self) -> None:
        super().__init__()
        self.vm = self.make_vm()
        self.g: int = self.vm.granularity()
        #: hand-made steps: (ptr, size, reservation, physical)
        self.steps: list[tuple[int, int, Any, Any]] = []
        #: growable buffer ptr -> its mapped chunks
        self.chunks: dict[int, int] = {}
        #: physical allocations whose release failed in vm.mmap (tracked until close)
        self.kept = 0

    def _fails(self, step: str | None) -> str | None:
        if step is None or (step == "release" and self.VM_RELEASE is None):
            return None
        functions = dict(zip(STEPS, self.VM_FUNCTIONS, strict=True))
        function = self.VM_RELEASE if step == "release" else functions[step]
        assert function is not None
        self.double.inject(function, self.FAIL_CODE)
        return function

    def _failed(self, exc: AMLError, function: str | None) -> None:
        assert function is not None, f"no failure was injected: {exc!r}"
        assert exc.native is not None, f"{exc!r} has no native cause"
        assert exc.native.function == function, f"{exc.native.function} failed, not {function}"

    def _vm_live(self, buf: Buffer | None) -> Buffer | None:
        if buf is None or self.model.get(buf.ptr) is not buf or buf.freed:
            return None
        return buf

    def _dropped(self, buf: Buffer) -> None:
        assert buf.freed
        del self.model[buf.ptr]
        self.chunks.pop(buf.ptr, None)

    # -- one step -------------------------------------------------------------------------
    @rule(target=mappings, fail=st.sampled_from([None, "reserve", "create", "map", "set_access", "release"]))
    def vm_mmap(self, fail: str | None) -> Buffer | None:
        function = self._fails(fail)
        try:
            buf: Buffer = self.vm.mmap(self.g)
        except AMLError as exc:
            self._failed(exc, function)
            self.kept += fail == "release"
            return None
        assert function is None, f"{function} failed and vm.mmap returned {buf!r}"
        self.model[buf.ptr] = buf
        return buf

    @rule(buf=st.one_of(mappings, growables), fail=st.booleans())
    def vm_munmap(self, buf: Buffer | None, fail: bool) -> None:
        if buf is None:
            return
        if self._vm_live(buf) is None:
            if buf.freed:  # a freed buffer is refused, and nothing changes
                with pytest.raises(AMLValueError):
                    self.vm.munmap(buf)
            return
        function = self._fails("unmap" if fail else None)
        try:
            self.vm.munmap(buf)
        except AMLError as exc:
            self._failed(exc, function)
            assert not buf.freed
            return
        assert function is None
        self._dropped(buf)

    # -- the steps by hand ----------------------------------------------------------------
    @precondition(lambda self: len(self.steps) < 4)
    @rule(fail=st.sampled_from([None, "map", "set_access"]))
    def vm_steps_map(self, fail: str | None) -> None:
        res = self.vm.reserve(2 * self.g)
        phys = self.vm.create(self.g)
        function = self._fails(fail)
        try:
            self.vm.map(res.ptr, self.g, phys)
            if fail != "map":
                self.vm.set_access(res.ptr, self.g, Access.READWRITE)
        except AMLError as exc:
            self._failed(exc, function)
            if fail == "set_access":
                self.vm.unmap(res.ptr, self.g)
            self.vm.release(phys)
            self.vm.address_free(res)
            return
        assert function is None
        self.steps.append((res.ptr, self.g, res, phys))

    @precondition(lambda self: bool(self.steps))
    @rule(fail=st.booleans())
    def vm_steps_unmap(self, fail: bool) -> None:
        ptr, size, res, phys = self.steps[-1]
        function = self._fails("unmap" if fail else None)
        try:
            self.vm.unmap(ptr, size)
        except AMLError as exc:
            self._failed(exc, function)
            return
        assert function is None
        self.vm.release(phys)
        self.vm.address_free(res)
        self.steps.pop()
        with pytest.raises(AMLValueError):  # released: refused
            self.vm.release(phys)
        with pytest.raises(AMLValueError):  # freed: refused
            self.vm.address_free(res)

    @precondition(lambda self: bool(self.steps))
    @rule(which=st.integers(0, 3), case=st.sampled_from(["busy", "size", "overlap"]))
    def vm_steps_refused(self, which: int, case: str) -> None:
        ptr, size, res, phys = self.steps[which % len(self.steps)]
        before = self.double.live()
        if case == "busy":
            with pytest.raises(AMLBusyError):
                self.vm.address_free(res)
        elif case == "size":
            with pytest.raises(AMLValueError):
                self.vm.unmap(ptr, 2 * size)
        else:
            with pytest.raises(AMLValueError):
                self.vm.map(ptr, size, phys)
        assert self.double.live() == before

    # -- growable buffers -----------------------------------------------------------------
    @precondition(lambda self: len(self.chunks) < 3)
    @rule(target=growables, fail=st.sampled_from([None, "reserve", "map"]))
    def vm_growable(self, fail: str | None) -> Buffer | None:
        function = self._fails(fail)
        try:
            buf: GrowableBuffer = self.vm.growable(3 * self.g)
        except AMLError as exc:
            self._failed(exc, function)
            return None
        assert function is None
        assert (buf.capacity, buf.mapped) == (3 * self.g, self.g)
        self.model[buf.ptr] = buf
        self.chunks[buf.ptr] = 1
        return buf

    @rule(buf=growables, fail=st.booleans())
    def vm_grow(self, buf: GrowableBuffer | None, fail: bool) -> None:
        live = self._vm_live(buf)
        if live is None or buf is None:
            return
        if buf.mapped == buf.capacity:
            before = self.double.live()
            with pytest.raises(AMLValueError):
                buf.grow(buf.capacity + 1)
            assert self.double.live() == before
            return
        function = self._fails("map" if fail else None)
        old = buf.size
        try:
            buf.grow(buf.mapped + self.g)
        except AMLError as exc:
            self._failed(exc, function)
            assert buf.size == old
            return
        assert function is None
        self.chunks[buf.ptr] += 1

    # -- invariants -----------------------------------------------------------------------
    @invariant()
    def vm_matches(self) -> None:
        live = self.double.live()
        reservations, physicals, mappings = (live[k] for k in self.VM_KINDS)
        tracked = self.vm.buffers()
        growable = sum(self.chunks.values())
        one_step = len(tracked) - len(self.chunks)
        assert reservations == one_step + len(self.chunks) + len(self.steps)
        assert mappings == one_step + growable + len(self.steps)
        assert physicals <= mappings + self.kept, "a physical allocation outlives its mappings"
        assert {b.ptr for b in tracked} == {p for p, b in self.model.items() if b.area is self.vm}
        assert self.vm.stats.live_mappings == len(tracked)
        assert not [b for b in tracked if b.freed], "a freed buffer is reachable"

    def teardown(self) -> None:
        try:
            for _ in range(3):
                try:
                    self.vm.close()
                    break
                except AMLError:
                    continue
            left = {k: v for k, v in self.double.live().items() if k in self.VM_KINDS and v}
            assert left == {}, f"the double's VM objects outlive the area: {left}"
        finally:
            super().teardown()
