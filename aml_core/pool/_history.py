"""A pool's history, snapshots and allocation log (see aml_core.pool, "History"):
:meth:`Recording.record_history` turns on the kernel's ring of events,
:meth:`Recording.snapshot` reads the kernel's slabs and blocks with that history into a
:class:`Snapshot` (``dump`` writes the pickle PyTorch's ``torch.cuda._memory_viz`` reads),
and :meth:`Recording.log_to` writes each event as a CSV row of RMM's logging adaptor or
hands it to a callback. The events are recorded in C by the kernel (aml_core/_kernel.pyx);
here they are converted and written."""

from __future__ import annotations

import contextlib
import csv
import os
import pickle
import threading
import warnings
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, Literal

import attrs

from .. import checks, files
from .._buffer import PoolKernel
from ..area import Area
from ..errors import AMLDomainError, AMLError, AMLMemoryError, AMLValueError
from . import _callbacks

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "LOG_COLUMNS",
    "AllocationLog",
    "HistoryEvent",
    "LogRecord",
    "Recording",
    "Snapshot",
    "SnapshotBlock",
    "SnapshotSegment",
    "to_torch_frames",
]

if TYPE_CHECKING:
    from .._kernel import KernelEvent

#: The ring's size when ``record_history`` is not given ``max_entries``.
DEFAULT_MAX_ENTRIES = 100_000
#: The ring a log uses while the history is off (every event is drained at once).
LOG_RING = 65_536
#: The most Python frames kept per event (``stacks="python"``).
DEFAULT_MAX_FRAMES = 32
#: The largest ring ``record_history`` makes: 2**24 events of 64 bytes, 1 GiB (a ring
#: is allocated and zeroed whole; past this, AMLDomainError, before any allocation).
MAX_ENTRIES = 1 << 24
#: The most frames ``max_frames`` may ask (the kernel's C int).
MAX_FRAMES = (1 << 31) - 1
#: The columns of a CSV log: RMM's ``logging_resource_adaptor``'s.
LOG_COLUMNS = ("Thread", "Time", "Action", "Pointer", "Size", "Stream")

#: A Python frame of a stack: (filename, line, function).
Frame = tuple[str, int, str]


@attrs.frozen
class HistoryEvent:
    """One recorded event. ``action``: ``alloc``, ``free``, ``segment_alloc``,
    ``segment_free`` (a slab taken from or given back to the area), ``segment_map``,
    ``segment_unmap`` (a chunk of an expandable pool); ``size``: the block's (or slab's)
    bytes, ``requested``: the bytes asked for; ``stream``: the stream's handle or None
    (host order); ``time_ns``: wall-clock nanoseconds since the epoch; ``thread``: the
    thread's ident (``threading.get_ident()``); ``frames``: the Python stack, innermost
    first (``stacks="python"``), else ()."""

    action: str
    address: int
    size: int
    requested: int
    stream: int | None
    time_ns: int
    thread: int
    frames: tuple[Frame, ...] = ()

    @classmethod
    def _from_kernel(cls, e: KernelEvent) -> HistoryEvent:
        action, addr, size, requested, stream, time_ns, thread, frames = e
        return cls(action, addr, size, requested, stream, time_ns, thread, frames or ())


@attrs.frozen
class SnapshotBlock:
    """A piece of a segment: ``state`` ``used`` (handed out), ``free`` (in its heap),
    ``cached`` (freed, on its size's stack, not yet merged with its neighbours) or
    ``stream`` (freed on ``stream``, reused at once on it); ``requested``: the bytes asked
    for while used (else 0); ``frames``: the stack of its allocation, if recorded."""

    address: int
    size: int
    requested: int
    state: str
    stream: int | None
    frames: tuple[Frame, ...] = ()


@attrs.frozen
class SnapshotSegment:
    """A slab (or an expandable pool's mapped segment) and its blocks, which tile it in
    address order. ``small``: a slab of the small heap."""

    address: int
    size: int
    small: bool
    blocks: tuple[SnapshotBlock, ...]

    @property
    def used(self) -> int:
        return sum(b.size for b in self.blocks if b.state == "used")


@attrs.frozen
class Snapshot:
    """What a pool holds now and what happened before (:meth:`Recording.snapshot`).
    ``history`` is empty unless recording; ``lost``: events the ring dropped (it keeps
    the newest ``max_entries``)."""

    device: int | None
    expandable: bool
    segments: tuple[SnapshotSegment, ...]
    history: tuple[HistoryEvent, ...]
    lost: int = 0

    def to_torch(self) -> dict[str, Any]:
        """The dict ``torch.cuda.memory._snapshot()`` returns, as ``torch.cuda._memory_viz``
        and PyTorch's memory viewer read it: ``segments`` (``device``, ``address``,
        ``total_size``, ``stream``, ``segment_type``, ``allocated_size``, ``active_size``,
        ``requested_size``, ``blocks`` of ``address``, ``size``, ``requested_size``,
        ``state`` — ``active_allocated`` or ``inactive`` — and ``frames``) and
        ``device_traces`` (one list per device index up to the pool's, the events as
        ``action``, ``addr``, ``size``, ``stream``, ``time_us``, ``frames``; a free is
        PyTorch's ``free_requested`` then ``free_completed``). Host pools use index 0."""
        dev = self.device if self.device is not None and self.device >= 0 else 0
        segments = []
        for s in self.segments:
            blocks = [
                {
                    "address": b.address,
                    "size": b.size,
                    "requested_size": b.requested if b.state == "used" else 0,
                    "state": "active_allocated" if b.state == "used" else "inactive",
                    "frames": to_torch_frames(b.frames),
                }
                for b in s.blocks
            ]
            used = s.used
            segments.append(
                {
                    "device": dev,
                    "address": s.address,
                    "total_size": s.size,
                    "stream": 0,
                    "segment_type": "small" if s.small else "large",
                    "allocated_size": used,
                    "active_size": used,
                    "requested_size": sum(b.requested for b in s.blocks if b.state == "used"),
                    "is_expandable": self.expandable,
                    "frames": [],
                    "blocks": blocks,
                }
            )
        trace: list[dict[str, Any]] = []
        for e in self.history:
            entry = {
                "addr": e.address,
                "size": e.size,
                "stream": e.stream or 0,
                "time_us": e.time_ns // 1000,
                "frames": to_torch_frames(e.frames),
            }
            if e.action == "free":
                trace.append({"action": "free_requested", **entry})
                trace.append({"action": "free_completed", **entry})
            else:
                trace.append({"action": e.action, **entry})
        traces: list[list[dict[str, Any]]] = [[] for _ in range(dev + 1)]
        traces[dev] = trace
        return {"segments": segments, "device_traces": traces}

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_torch` as a pickle: ``python -m torch.cuda._memory_viz
        trace_plot PATH -o out.html``, https://pytorch.org/memory_viz, or
        ``python -m aml_core.plot PATH -o out.png`` draw it. ``path`` is a path (a file
        descriptor is not: AMLTypeError, as for None); a file error is its AML error
        (docs/reliability.md, "Files and parsers")."""
        files.path(path, "the snapshot's path")
        data = pickle.dumps(self.to_torch())
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise files.error(exc, f"writing the snapshot {os.fsdecode(path)!r}") from None


def to_torch_frames(frames: tuple[Frame, ...]) -> list[dict[str, Any]]:
    return [{"filename": f, "line": line, "name": name} for f, line, name in frames]


@attrs.frozen
class LogRecord:
    """One row of an allocation log: RMM's columns. ``time``: seconds since the epoch;
    ``action``: ``allocate`` or ``free`` (and, with ``segments=True``, ``segment_alloc``,
    ``segment_free``, ``segment_map``, ``segment_unmap``); ``size``: the bytes asked for
    (a segment's bytes); ``stream``: the handle, 0 for host order."""

    thread: int
    time: float
    action: str
    pointer: int
    size: int
    stream: int

    def row(self) -> tuple[str, ...]:
        return (
            str(self.thread),
            f"{self.time:.6f}",
            self.action,
            hex(self.pointer),
            str(self.size),
            hex(self.stream),
        )


_LOG_ACTIONS = {"alloc": "allocate", "free": "free"}


class AllocationLog:
    """Drains a kernel's history into a CSV file or a callback, after each slow-path
    section of the pool (the kernel's ``sink``): with a log on, every event takes the slow
    path (the C hits decline), so no event waits in the ring."""

    def __init__(
        self,
        kernel: PoolKernel,
        target: str | os.PathLike[str] | Callable[[LogRecord], object],
        segments: bool,
    ) -> None:
        self._kernel = kernel
        self._next = kernel.recorded
        self._segments = segments
        self._lock = threading.Lock()
        self._owner = 0  # the thread draining now (a nested drain in it returns)
        self.lost = 0
        self._file: IO[str] | None = None
        self._callback: Callable[[LogRecord], object] | None = None
        if callable(target):
            self._callback = target
        else:
            try:
                self._file = open(target, "w", newline="")  # noqa: SIM115 - closed by close()
                self._writer = csv.writer(self._file)
                self._writer.writerow(LOG_COLUMNS)
                self._file.flush()
            except OSError as exc:
                if self._file is not None:
                    with contextlib.suppress(OSError):
                        self._file.close()
                raise files.error(exc, f"opening the allocation log {os.fsdecode(target)!r}") from None

    def __call__(self) -> None:
        """Write the events recorded since the last call. Never raises: an error of the
        callback or the file is a warning (the pool's operation succeeded)."""
        me = threading.get_ident()
        if not self._lock.acquire(blocking=False):
            if self._owner == me:
                return  # this thread is draining (a finalizer ran inside): it goes on
            self._lock.acquire()
        self._owner = me
        try:
            while True:
                first, dropped, events = self._kernel.events(self._next)
                self.lost += dropped
                if not events:
                    break
                self._next = first + len(events)
                self._write(events)
            if self._file is not None:
                self._file.flush()
        except _callbacks.Interrupted:
            pass  # held: the pool raises the interrupt once its operation is whole
        except Exception as exc:  # a callback's or the file's error: the pool's operation stands
            warnings.warn(f"the pool's allocation log failed: {exc!r}", RuntimeWarning, stacklevel=2)
        finally:
            self._owner = 0
            self._lock.release()

    def _write(self, events: list[KernelEvent]) -> None:
        for action, addr, _size, requested, stream, time_ns, thread, _frames in events:
            name = _LOG_ACTIONS.get(action)
            if name is None:
                if not self._segments:
                    continue
                name = action
            record = LogRecord(thread, time_ns / 1e9, name, addr, requested, stream or 0)
            if self._callback is not None:
                _callbacks.call(self._callback, record)
            else:
                self._writer.writerow(record.row())

    def close(self) -> None:
        self()
        if self._file is not None:
            self._file.close()
            self._file = None


class Recording(Area):
    """record_history, snapshot and log_to of a pool (its kernel records the events)."""

    #: Set by the Pool.
    _kernel: PoolKernel
    _history_entries: int = 0
    _history_frames: int = 0
    _log: AllocationLog | None = None

    if TYPE_CHECKING:

        @property
        def expandable(self) -> bool: ...

    def record_history(
        self,
        enabled: bool = True,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        stacks: Literal["python"] | None = None,
        max_frames: int = DEFAULT_MAX_FRAMES,
    ) -> None:
        """Record every allocation and free of the pool (size, address, stream, time,
        thread), and every slab taken from or given back to the area, in a ring of the
        newest ``max_entries`` events (a new size starts an empty history);
        ``enabled=False`` stops and forgets them. ``stacks="python"``: each event also
        keeps the Python stack that caused it (at most ``max_frames`` frames, aml's own
        left out); then every allocation and free, the framework hooks' too, takes the
        pool's Python path (slower: see docs/kernel.md, "History"). Without stacks the
        events are recorded in C, the hooks' hits too (they have no Python stack)."""
        if enabled:
            if stacks not in ("python", None):
                raise AMLValueError(f'stacks must be "python" or None, not {stacks!r}')
            entries = checks.size(max_entries, "max_entries")
            frames = checks.size(max_frames, "max_frames")
            if entries > MAX_ENTRIES:
                raise AMLDomainError(
                    f"max_entries {entries} is past the largest history ring, {MAX_ENTRIES} events"
                )
            if frames > MAX_FRAMES:
                raise AMLDomainError(f"max_frames {frames} is past {MAX_FRAMES}")
            wanted = (entries, frames if stacks else 0)
        else:
            wanted = (0, 0)
        old = (self._history_entries, self._history_frames)
        self._history_entries, self._history_frames = wanted
        try:
            self._set_trace()
        except (MemoryError, OverflowError, RuntimeError) as exc:  # the ring not allocated
            self._history_entries, self._history_frames = old  # a refused size is forgotten
            if isinstance(exc, AMLError):
                raise
            raise AMLMemoryError(
                f"the history ring of {wanted[0]} events cannot be allocated ({type(exc).__name__}: {exc})"
            ) from None

    def log_to(
        self,
        target: str | os.PathLike[str] | Callable[[LogRecord], object] | None,
        *,
        segments: bool = False,
    ) -> None:
        """Log every allocation and free: as CSV rows with RMM's logging adaptor's
        columns (Thread, Time, Action, Pointer, Size, Stream) to the file ``target``
        (created or truncated), or as a :class:`LogRecord` passed to the callable
        ``target``; ``segments=True`` logs the slabs taken and given back too. None stops
        (and closes the file). While a log is on, every event takes the pool's Python
        path, the framework hooks' too, and is written right after it; a callback's
        error is a warning."""
        log = None
        if target is not None:  # made first: a refused target changes nothing
            if not callable(target):
                files.path(target, "log_to's target (a path, a callable or None)")
            log = AllocationLog(self._kernel, target, segments)
        old, self._log = self._log, None
        if old is not None:
            self._kernel.sink = None
            old.close()
        if log is not None:
            log._next = self._kernel.recorded  # after what the old log wrote
            self._log = log
            self._kernel.sink = log
        self._set_trace()

    def _set_trace(self) -> None:
        entries = self._history_entries
        if self._log is not None:
            entries = entries or LOG_RING
        python = self._history_frames > 0 or self._log is not None
        with self._kernel:
            self._kernel.set_history(entries, python, self._history_frames)

    def snapshot(self) -> Snapshot:
        """The pool's segments and blocks now, with the recorded history (empty unless
        :meth:`record_history` is on); ``snapshot().dump(path)`` writes the file
        PyTorch's memory viewer opens."""
        kernel = self._kernel
        with kernel:  # one section: the history ends where the segments are
            raw = kernel.segments()
            _first, lost, events = kernel.events(0) if self._history_entries else (0, 0, [])
        history = tuple(HistoryEvent._from_kernel(e) for e in events)
        last_alloc = {e.address: e.frames for e in history if e.action == "alloc"}
        segments = tuple(
            SnapshotSegment(
                ptr,
                size,
                heap == 0,
                tuple(
                    SnapshotBlock(a, n, req, state, stream, last_alloc.get(a, ()) if state == "used" else ())
                    for a, n, req, state, stream in blocks
                ),
            )
            for ptr, size, heap, blocks in raw
        )
        return Snapshot(self.device, self.expandable, segments, history, lost)
