"""Native objects dropped without close() and collected, as state-machine rules (issue 20),
written once for every backend's :class:`~tests.support.vm_machine.VmMachine` (aml-hip,
aml-ze, aml-hsa).

:class:`DroppedMachine` adds to the virtual-memory machine, interleaved with its mmaps,
IPC opens, faults and virtual-memory steps:

* ``drop_area``: a new area of :meth:`~tests.support.ipc_machine.IpcMachine.make_area`
  (on Level Zero: with its own context), given 0 to 2 buffers with bytes written,
  dropped without close, then ``gc.collect()``;
* ``drop_vm``: a new virtual-memory area, empty or holding one of each thing (a mapped
  reservation, an empty one, an unmapped physical allocation, a buffer:
  :func:`~tests.support.dropped.hold_everything`), dropped the same way;
* ``drop_buffers_first``: the same area with its buffers dropped before it (a buffer
  holds its area: the area goes with the last one);
* the backend's own drops (:meth:`DroppedMachine.dropped_objects`: HIP's streams, and a
  pool over an area with blocks freed on a stream, its events).

After each drop: the double's live counters are what they were before the dropped
objects were made (what the machine's remaining live objects account for, which the
machine's invariants check against its model), a dropped object warns only with
ResourceWarning and no finalizer raises, and every live buffer of the machine is still
mapped: it reads back what the model holds and is still writable (no reachable freed
memory).
"""

from __future__ import annotations

import gc
import sys
import warnings
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import rule

from aml_core.buffer import Buffer

from .dropped import hold_everything
from .vm_machine import VmMachine

__all__ = ["DroppedMachine"]


class DroppedMachine(VmMachine):
    """The virtual-memory machine plus dropped native objects (see the module doc)."""

    #: The drops :meth:`dropped_objects` knows (a backend's machine adds its own).
    DROPS: tuple[str, ...] = ()

    def dropped_objects(self, what: str) -> list[Any]:
        """The objects of the backend's drop ``what`` (one of :attr:`DROPS`), used and
        referenced only by the returned list."""
        raise NotImplementedError(what)

    def _drop(self, make: Any) -> None:
        """Make objects (``make()`` returns the list that holds them), drop them unclosed,
        collect, and check that nothing they held outlives them."""
        before = self.double.live()
        raised: list[BaseException | None] = []
        hook = sys.unraisablehook
        sys.unraisablehook = lambda info: raised.append(info.exc_value)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no warning but the documented one:
                warnings.simplefilter("ignore", ResourceWarning)  # "unclosed ..."
                objects = make()
                assert objects
                objects.clear()
                gc.collect()
        finally:
            sys.unraisablehook = hook
        assert raised == [], f"a finalizer raised: {raised}"
        after = self.double.live()
        assert after == before, f"dropped objects outlive their collection: {before} -> {after}"
        self._memory_is_live()

    def _memory_is_live(self) -> None:
        """Every buffer the model holds live reads back its bytes and takes new ones."""
        for ptr, buf in self.model.items():
            assert not buf.freed
            size = min(buf.size, 256)
            if ptr in self.contents:
                assert self.double.read_memory(ptr, buf.size) == self.contents[ptr]
            self.seed += 1
            data = bytes((self.seed + i) % 251 for i in range(size))
            self.double.write_memory(ptr, data)
            assert self.double.read_memory(ptr, size) == data
            if ptr in self.contents:
                self.contents[ptr][:size] = data

    # -- the rules ------------------------------------------------------------------------
    @rule(count=st.integers(0, 2))
    def drop_area(self, count: int) -> None:
        def make() -> list[Any]:
            area = self.make_area()
            held: list[Any] = [area]
            for i in range(count):
                buf: Buffer = area.mmap(4096 * (i + 1))
                self.double.write_memory(buf.ptr, b"dropped" * 16)
                held.append(buf)
            return held

        self._drop(make)

    @rule(hold=st.booleans())
    def drop_vm(self, hold: bool) -> None:
        def make() -> list[Any]:
            vm = self.make_vm()
            return [vm, *hold_everything(vm)] if hold else [vm]

        self._drop(make)

    @rule()
    def drop_buffers_first(self) -> None:
        def make() -> list[Any]:
            area = self.make_area()
            bufs = [area.mmap(4096), area.mmap(100)]
            del area
            return bufs

        self._drop(make)

    @rule(data=st.data())
    def drop_backend_objects(self, data: st.DataObject) -> None:
        if not self.DROPS:
            return
        what = data.draw(st.sampled_from(self.DROPS), label="what")
        self._drop(lambda: self.dropped_objects(what))
