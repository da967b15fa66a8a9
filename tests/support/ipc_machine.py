"""A hypothesis state machine over IPC between two processes on a driver double (issue 9),
written once for every backend whose device area exports IPC handles.

This process maps device buffers (mmap, munmap, close the area, each with an optional
injected native failure), exports them, and a long-lived :class:`~tests.support.ipc_peer.IpcPeer`
opens the handles, writes and reads through them and closes them, interleaved with the
exporter's own operations; it also opens tampered handles. The model holds every live
buffer's bytes and how many times the peer has each one open. Invariants after each step:

* the exporter: the area's stats and the double's live allocations equal the model;
* the importer: the peer's double has exactly one live IPC mapping per handle it holds
  open (a tampered open maps nothing), and its backend tracks nothing else;
* bytes: what the peer writes is what the exporter reads, and the other way round; after
  the peer closes, the exporter's buffer is still live with the bytes the model says.

The exporter never frees a buffer the peer still has open (importers close first: HIP
and CUDA call the other order undefined): munmap and close close the peer's opens first.
At the end of each example the peer closes everything and forgets its runtime, and both
doubles' live counters must be zero.

A backend's test subclasses :class:`IpcMachine` (its double class, live kinds, allocation
and free functions, a native error code, :meth:`~IpcMachine.make_area`) and calls
:meth:`IpcMachine.run` from a test with bounded settings; :mod:`tests.support.vm_machine`
adds virtual-memory rules to it (HIP, ze, HSA), and the HIP machine its managed memory.
"""

from __future__ import annotations

import copy
import gc
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, event
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from aml_core.buffer import Buffer
from aml_core.errors import AMLError, AMLTypeError, AMLValueError
from aml_core.ipc import IpcHandle

from .ipc_peer import IpcPeer

__all__ = ["TAMPERED", "IpcMachine", "bounded"]

#: Tampered handles every backend must refuse in the importer with an AML error, mapping
#: nothing: (field, value, error class). ``"peer"`` stands for the importer's own pid.
TAMPERED: dict[str, tuple[str, object, type[AMLError]]] = {
    "device=-5": ("device", -5, AMLValueError),
    "device=2**40": ("device", 2**40, AMLValueError),
    "device='x'": ("device", "x", AMLTypeError),
    "device=7 (absent)": ("device", 7, AMLValueError),
    "size=0": ("size", 0, AMLValueError),
    "size=-1": ("size", -1, AMLValueError),
    "size='big'": ("size", "big", AMLTypeError),
    "size=1 GiB (past the export)": ("size", 1 << 30, AMLValueError),
    "data=b''": ("data", b"", AMLValueError),
    "data=None": ("data", None, AMLTypeError),
    "backend=3": ("backend", 3, AMLTypeError),
    "backend='other'": ("backend", "other", AMLValueError),
    "pid=0": ("pid", 0, AMLValueError),
    "pid=the importer's": ("pid", "peer", AMLValueError),
}


def bounded() -> Settings:
    """The settings a backend's state machine runs with: ``$AML_STATE_MACHINE_EXAMPLES``
    examples (default 40) of 25 steps, no deadline (a step may start a process)."""
    return Settings(
        max_examples=int(os.environ.get("AML_STATE_MACHINE_EXAMPLES", "40")),
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def _pattern(seed: int, size: int) -> bytearray:
    return bytearray((seed * 31 + i) % 251 for i in range(size))


class IpcMachine(RuleBasedStateMachine):
    """The machine (see the module doc); subclasses fill in the class attributes."""

    #: The backend's DriverDouble class (the peer imports it by module and name).
    double_class: ClassVar[type[Any]]
    #: The double's live kind of an allocation of :meth:`make_area`'s area, and of an
    #: opened IPC mapping.
    ALLOC_KIND: ClassVar[str]
    IPC_KIND: ClassVar[str]
    #: The native functions that allocate and free the area's memory, and the code
    #: injected into them.
    ALLOC_FUNCTION: ClassVar[str]
    FREE_FUNCTION: ClassVar[str]
    FAIL_CODE: ClassVar[int]
    #: The tampered handles this backend refuses (default: every one of :data:`TAMPERED`).
    TAMPERED: ClassVar[Mapping[str, tuple[str, object, type[AMLError]]]] = TAMPERED

    # set by run() for the examples of one test
    peer: ClassVar[IpcPeer | None] = None
    library: ClassVar[Path | None] = None
    monkeypatch: ClassVar[pytest.MonkeyPatch | None] = None

    buffers = Bundle("buffers")

    def make_area(self) -> Any:
        """A device area of this process whose buffers export IPC handles
        (``ipc_export``)."""
        raise NotImplementedError

    def areas(self) -> list[Any]:
        """Everything closed at the end of an example (retried past a failure)."""
        return [self.area]

    @classmethod
    def run(cls, library: Path, settings: Settings | None = None) -> None:
        """Run the machine on the double at ``library`` with one peer for every example
        (default settings: :func:`bounded`).

        What the process held before the run is frozen for its length (``gc.freeze``): the
        drop rules' ``gc.collect()`` (:mod:`tests.support.dropped_machine`) then walks only
        the objects made since, the dropped ones among them, not every object of the test
        run so far (late in a whole suite, most of the machine's CPU time: 44 s against 7.5 s
        alone for HIP's, evidence/2026-12-02-debian12-epyc-2core-ci-time). The dropped
        objects are made after the freeze, so they are collected as before."""
        settings = bounded() if settings is None else settings
        patch = pytest.MonkeyPatch()
        double = cls.double_class(library)
        spec = f"{cls.double_class.__module__}:{cls.double_class.__qualname__}"
        try:
            with IpcPeer(spec, double.env()) as peer:
                cls.peer, cls.library, cls.monkeypatch = peer, library, patch
                gc.collect()
                gc.freeze()
                try:
                    # hypothesis types it from 6.1xx on; older releases leave it untyped
                    run_state_machine_as_test(cls, settings=settings)  # type: ignore[no-untyped-call,unused-ignore]
                finally:
                    gc.unfreeze()
        finally:
            cls.peer = cls.library = cls.monkeypatch = None
            patch.undo()

    def __init__(self) -> None:
        super().__init__()
        assert self.peer is not None
        assert self.library is not None
        assert self.monkeypatch is not None
        self.ipc = self.peer
        self.ipc.reset()  # whatever a failed example left there
        self.double = self.double_class(self.library)
        self.double.enter(self.monkeypatch)
        self.area = self.make_area()
        #: ptr -> the live buffer; its bytes; opens in the peer; the peer's reference
        self.model: dict[int, Buffer] = {}
        self.contents: dict[int, bytearray] = {}
        self.opens: dict[int, int] = {}
        self.refs: dict[int, int] = {}
        #: ptr -> the buffer's handle (exported once: the same handle is sent again)
        self.handles: dict[int, IpcHandle] = {}
        self.seed = 0

    # -- helpers --------------------------------------------------------------------------
    def _live(self, buf: Buffer | None) -> Buffer | None:
        if buf is None or self.model.get(buf.ptr) is not buf or buf.freed:
            return None
        return buf

    def _exportable(self) -> list[Buffer]:
        return [b for b in self.model.values() if b.area is self.area]

    def _pick(self, which: int, opened: bool) -> Buffer:
        choices = [self.model[p] for p in sorted(self.opens)] if opened else self._exportable()
        return choices[which % len(choices)]

    def _check_bytes(self, buf: Buffer) -> None:
        assert buf in self.area.buffers(), "the exporter's buffer is no longer live"
        assert self.double.read_memory(buf.ptr, buf.size) == self.contents[buf.ptr]

    def _close_in_peer(self, buf: Buffer) -> None:
        while self.opens.get(buf.ptr):
            unmapped = self.ipc.close(self.refs[buf.ptr])
            self.opens[buf.ptr] -= 1
            assert unmapped == (self.opens[buf.ptr] == 0)
        self.opens.pop(buf.ptr, None)
        self.refs.pop(buf.ptr, None)

    def _forget(self, buf: Buffer) -> None:
        self.model.pop(buf.ptr, None)
        self.contents.pop(buf.ptr, None)
        self.handles.pop(buf.ptr, None)

    def _handle(self, buf: Buffer) -> IpcHandle:
        handle = self.handles.get(buf.ptr)
        if handle is None:
            with self.area.ipc_export(buf) as export:
                handle = self.handles[buf.ptr] = export.handle
            assert (handle.size, handle.pid) == (buf.size, os.getpid())
        return handle

    # -- the exporter ---------------------------------------------------------------------
    @rule(target=buffers, size=st.integers(1, 3 * 4096), fail=st.booleans())
    def mmap(self, size: int, fail: bool) -> Buffer | None:
        if fail:
            self.double.inject(self.ALLOC_FUNCTION, self.FAIL_CODE)
        try:
            buf: Buffer = self.area.mmap(size)
        except AMLError as exc:
            assert fail
            assert exc.native is not None  # noqa: PT017
            assert exc.native.function == self.ALLOC_FUNCTION  # noqa: PT017
            return None
        assert not fail, f"{self.ALLOC_FUNCTION} failed and mmap returned {buf!r}"
        self.seed += 1
        self.contents[buf.ptr] = _pattern(self.seed, size)
        self.double.write_memory(buf.ptr, bytes(self.contents[buf.ptr]))
        self.model[buf.ptr] = buf
        return buf

    @rule(buf=buffers, fail=st.booleans())
    def munmap(self, buf: Buffer | None, fail: bool) -> None:
        buf = self._live(buf)
        if buf is None:
            return
        self._close_in_peer(buf)  # importers close first
        self.handles.pop(buf.ptr, None)  # munmap closes the exports, even when the free fails
        if fail:
            self.double.inject(self.FREE_FUNCTION, self.FAIL_CODE)
        try:
            buf.area.munmap(buf)
        except AMLError as exc:
            assert fail
            assert exc.native is not None  # noqa: PT017
            assert not buf.freed
            return
        assert not fail
        self._forget(buf)

    @precondition(lambda self: bool(self.opens))
    @rule()
    def close_area(self) -> None:
        """Close the exporting area while the peer has some of its buffers open (it closes
        them first) and make a new one."""
        for ptr in list(self.opens):
            self._close_in_peer(self.model[ptr])
        old = self.area
        old.close()
        assert old.stats.live_mappings == 0
        for buf in list(self.model.values()):
            if buf.area is old:
                assert buf.freed
                self._forget(buf)
        self.area = self.make_area()

    # -- the importer ---------------------------------------------------------------------
    @precondition(lambda self: bool(self._exportable()))
    @rule(which=st.integers(0, 255))
    def open_in_peer(self, which: int) -> None:
        buf = self._pick(which, opened=False)
        ref, opens = self.ipc.open(self._handle(buf))
        self.opens[buf.ptr] = self.opens.get(buf.ptr, 0) + 1
        assert opens == self.opens[buf.ptr], "the importer's cache counts opens of one handle"
        assert self.refs.setdefault(buf.ptr, ref) == ref, "a second open is the same mapping"
        assert self.ipc.read(ref, buf.size) == self.contents[buf.ptr]

    @precondition(lambda self: bool(self.opens))
    @rule(which=st.integers(0, 255), data=st.binary(min_size=1, max_size=64), at=st.integers(0, 1 << 16))
    def write_in_peer(self, which: int, data: bytes, at: int) -> None:
        buf = self._pick(which, opened=True)
        data = data[: buf.size]
        offset = at % (buf.size - len(data) + 1)
        self.ipc.write(self.refs[buf.ptr], data, offset)
        self.contents[buf.ptr][offset : offset + len(data)] = data
        self._check_bytes(buf)  # the exporter sees the importer's bytes

    @precondition(lambda self: bool(self.opens))
    @rule(which=st.integers(0, 255), data=st.binary(min_size=1, max_size=64), at=st.integers(0, 1 << 16))
    def write_in_exporter(self, which: int, data: bytes, at: int) -> None:
        buf = self._pick(which, opened=True)
        data = data[: buf.size]
        offset = at % (buf.size - len(data) + 1)
        self.double.write_memory(buf.ptr + offset, data)
        self.contents[buf.ptr][offset : offset + len(data)] = data
        assert self.ipc.read(self.refs[buf.ptr], buf.size) == self.contents[buf.ptr]

    @precondition(lambda self: bool(self.opens))
    @rule(which=st.integers(0, 255))
    def close_in_peer(self, which: int) -> None:
        buf = self._pick(which, opened=True)
        unmapped = self.ipc.close(self.refs[buf.ptr])
        self.opens[buf.ptr] -= 1
        assert unmapped == (self.opens[buf.ptr] == 0)
        if unmapped:
            del self.opens[buf.ptr], self.refs[buf.ptr]
        self._check_bytes(buf)  # the exporter's allocation is intact

    @precondition(lambda self: bool(self._exportable()))
    @rule(which=st.integers(0, 255), case=st.sampled_from(sorted(TAMPERED)))
    def open_tampered(self, which: int, case: str) -> None:
        if case not in self.TAMPERED:
            return
        buf = self._pick(which, opened=False)
        field, value, error = self.TAMPERED[case]
        handle = copy.copy(self._handle(buf))
        object.__setattr__(handle, field, self.ipc.pid if value == "peer" else value)  # a tampered pickle
        with pytest.raises(error):
            self.ipc.open(handle)
        event(f"tampered: {case}")
        self._check_bytes(buf)

    @precondition(lambda self: bool(self._exportable()))
    @rule(which=st.integers(0, 255))
    def open_every_tampered(self, which: int) -> None:
        """Every tampered case of :attr:`TAMPERED` on one buffer, in one step: each run
        that reaches this rule tries them all (one drawn at a time, most were drawn in no
        given run). Each is its error in the importer, mapping nothing."""
        buf = self._pick(which, opened=False)
        for case in sorted(self.TAMPERED):
            field, value, error = self.TAMPERED[case]
            handle = copy.copy(self._handle(buf))
            object.__setattr__(handle, field, self.ipc.pid if value == "peer" else value)
            with pytest.raises(error):
                self.ipc.open(handle)
        event("tampered: every case at once")
        self._check_bytes(buf)

    # -- invariants -----------------------------------------------------------------------
    @invariant()
    def exporter_matches(self) -> None:
        tracked = self.area.buffers()
        assert {b.ptr for b in tracked} == {p for p, b in self.model.items() if b.area is self.area}
        assert self.area.stats.live_mappings == len(tracked)
        assert self.area.stats.bytes_in_use == sum(b.size for b in tracked)
        assert self.double.live()[self.ALLOC_KIND] == len(tracked)

    @invariant()
    def importer_matches(self) -> None:
        live = self.ipc.live()
        assert live.get(self.IPC_KIND, 0) == len(self.opens), f"the peer's double: {live}"

    def teardown(self) -> None:
        try:
            for ptr in list(self.opens):
                self._close_in_peer(self.model[ptr])
            assert self.ipc.tracked() == {}, "the peer's backend still tracks objects"
            assert self.ipc.forget() == {}, "the peer's double has live objects after its last close"
            for area in self.areas():
                for _ in range(3):
                    try:
                        area.close()
                        break
                    except AMLError:
                        continue
                assert area.stats.live_mappings == 0
        finally:
            self.double.leave()
