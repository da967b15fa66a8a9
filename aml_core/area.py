"""Area: allocates one kind of memory on one place and keeps track of every mapping.

``area.mmap(size, options=None)`` returns a :class:`~aml_core.buffer.Buffer`;
``area.munmap(buffer_or_ptr, size=None)`` frees it. The area knows every live mapping
it made, so that wrong input is an error and never a crash:

==========================================  =========================================
input                                       error
==========================================  =========================================
size not an integer (float, str, bool)      :class:`AMLTypeError` (EINVAL, TypeError)
size 0 or negative                          :class:`AMLValueError` (EINVAL)
size above 2**63 - 1 (the address space)    :class:`AMLDomainError` (EDOM)
size the system cannot provide              :class:`AMLMemoryError` (ENOMEM)
options of the wrong type or unknown keys   :class:`AMLTypeError` (EINVAL)
munmap of a pointer this area did not map   :class:`AMLValueError` (EINVAL)
munmap of a pointer inside a mapping        :class:`AMLValueError` (EINVAL)
munmap twice, or of a freed buffer          :class:`AMLValueError` (EINVAL)
munmap with a size other than the mapping's :class:`AMLValueError` (EINVAL)
munmap of a buffer another area made        :class:`AMLValueError` (EINVAL)
munmap of a buffer still viewed             :class:`AMLBusyError` (EBUSY)
any use of a closed area                    :class:`AMLValueError` (EINVAL)
a native allocation that "succeeds" with    :class:`AMLFailure` (FAILURE), no buffer
NULL or an address already live here
a native free that fails (munmap, close)    the backend's error with its native cause;
                                            the mapping stays tracked (a closed area
                                            reports it live) and munmap or close()
                                            again frees it
==========================================  =========================================

``close()`` (or leaving a ``with`` block) frees every mapping still live. A buffer that
is still viewed (a memoryview, a NumPy array, a DLPack consumer) cannot be freed
safely: close() detaches it instead, and its memory is released when the last view
and the buffer object itself are gone. Leaving a buffer's ``with`` block does the same
for that one buffer (:meth:`Area._detach_viewed`). Areas are thread-safe.

The bookkeeping (live mappings, counters, the closed flag), mmap and munmap live in the
compiled base class :class:`~aml_core._buffer.AreaBase`, with one rule: every change to
an area's live mappings happens inside one of AreaBase's bookkeeping methods, each of
which runs under the GIL without releasing it, so each change is atomic; the backend's
native ``_allocate`` and ``_free`` run outside them. No lock guards the bookkeeping.
``_lock`` is a re-entrant lock for subclasses' own state only.

An area may also install a compiled allocator (``_set_native``: C function pointers of
its runtime's allocation calls, aml_core._buffer.NativeAllocator); ``mmap(size)`` without
options and ``munmap`` of the buffers it made then run in C, under the same rule.

Writing a backend means subclassing :class:`Area` and implementing ``_allocate`` and
``_free`` (see docs/backend-authoring.md).
"""

from __future__ import annotations

import abc
import contextlib
import threading
import warnings
import weakref
from collections.abc import Mapping
from typing import Any, ClassVar, Self

import attrs

from ._buffer import AreaBase
from .buffer import Buffer
from .errors import AMLError, AMLTypeError
from .specs import AreaStats, Capability, Kind, format_size

__all__ = ["Area", "NoOptions"]


@attrs.frozen
class NoOptions:
    """The options of an area whose mmap takes none."""


_NO_OPTIONS = NoOptions()  # frozen and empty: one instance serves every mmap


class Area(AreaBase, abc.ABC):
    """Base class of every area.

    Subclasses set :attr:`options_type` (an attrs class; ``mmap`` accepts an instance,
    a mapping of its fields, or None) and implement :meth:`_allocate` and :meth:`_free`.
    ``kind``, ``device``, :meth:`mmap`, :meth:`munmap`, the bookkeeping (:meth:`_track`,
    :meth:`_restore`, :meth:`_resized`, :meth:`buffers`, :attr:`closed`),
    :meth:`_lookup` and :meth:`_new_buffer` come from the compiled base class.
    """

    #: The attrs class of mmap options.
    options_type: ClassVar[type[Any]] = NoOptions
    #: The Buffer subclass this area returns.
    buffer_type: ClassVar[type[Buffer]] = Buffer

    def __init__(
        self,
        *,
        backend: str,
        kind: Kind,
        device: int | None = None,
        capabilities: Capability = Capability.NONE,
    ) -> None:
        """Set what every area states (a subclass's ``__init__`` calls this last, once
        its own checks passed).

        ``backend``: the registered name of the backend (``"host"``, ``"cuda"``...);
        ``kind``: the :class:`~aml_core.specs.Kind` of memory it maps; ``device``: the
        device index (a NUMA node for host memory), or None; ``capabilities``: the
        :class:`~aml_core.specs.Capability` flags this area's buffers have.
        """
        self.backend = backend
        self.kind = kind
        self.device = device
        self.capabilities = capabilities
        #: For subclasses' own state; the bookkeeping needs no lock (see the module doc).
        self._lock = threading.RLock()
        #: Mappings detached by close() while still viewed: ptr -> (native, size).
        self._orphans: dict[int, tuple[Any, int]] = {}

    # -- to implement --------------------------------------------------------------
    @abc.abstractmethod
    def _allocate(self, size: int, options: Any) -> Buffer:
        """Allocate ``size`` bytes and return a buffer made by :meth:`_new_buffer`.
        Raise an :class:`AMLError` on failure, having freed anything partial."""

    @abc.abstractmethod
    def _free(self, buffer: Buffer) -> None:
        """Release the native memory of ``buffer``. Raise an :class:`AMLError` if the
        native call fails (the buffer then stays live)."""

    def _cuda_array_interface(self, buffer: Buffer) -> dict[str, Any] | None:
        """The ``__cuda_array_interface__`` of a buffer, or None if this area has none."""
        return None

    def _dlpack_prepare(self, buffer: Buffer, stream: Any) -> None:
        """Make the buffer's pending work visible to a DLPack consumer's stream."""

    def _pool_binding(self, options: Any) -> tuple[Any, int | None]:
        """The mmap options a pool over this area passes for every slab, and the device
        the pool's memory is on (:class:`aml_core.pool.Pool`). By default ``options`` and
        this area's device; an area whose device is chosen at mmap time binds the pool to
        one device here (GPU areas of the current device do)."""
        return options, self.device

    # -- helpers for subclasses ---------------------------------------------------------
    def _coerce_options(self, options: Any) -> Any:
        cls = self.options_type
        if options is None:
            return _NO_OPTIONS if cls is NoOptions else cls()
        if isinstance(options, cls):
            return options
        if isinstance(options, Mapping):
            try:
                return cls(**options)
            except TypeError as exc:
                allowed = ", ".join(a.name for a in attrs.fields(cls)) or "none"
                raise AMLTypeError(
                    f"bad mmap options {dict(options)!r} for {type(self).__name__}: {exc}; "
                    f"allowed keys: {allowed}"
                ) from None
        raise AMLTypeError(
            f"mmap options must be None, a mapping or {cls.__name__}, not {type(options).__name__}"
        )

    # -- public API ---------------------------------------------------------------------
    @property
    def stats(self) -> AreaStats:
        """Bytes in use, peak bytes, live mappings, total maps and unmaps."""
        nbytes, peak, live, maps, unmaps = self._stats()
        return AreaStats(
            bytes_in_use=nbytes, peak_bytes=peak, live_mappings=live, total_maps=maps, total_unmaps=unmaps
        )

    def close(self) -> None:
        """Free every live mapping and refuse further use. Buffers still viewed are
        detached and freed when their last view is gone. A mapping whose native free
        fails stays tracked (live in :attr:`stats`) and the first such error is raised with
        its native cause; calling close() again retries those frees. Otherwise idempotent."""
        live = self._drain()  # closed from now on; the buffers are counted as unmapped
        if live is None:  # already closed
            return
        errors: list[AMLError] = []
        for buf in live:
            if buf._release():
                try:
                    self._free(buf)
                except AMLError as exc:
                    # The memory is still there: keep tracking it (the closed area reports
                    # it live), so that close() again retries the native free.
                    self._restore(buf)
                    errors.append(exc)
            else:
                warnings.warn(
                    f"{buf!r} is still viewed while its area closes; it is freed when its last view is gone",
                    ResourceWarning,
                    stacklevel=2,
                )
                self._orphan(buf)
        if errors:
            for other in errors[1:]:
                errors[0].add_note(f"freeing another mapping failed too: {other}")
            raise errors[0]

    def _orphan(self, buf: Buffer) -> None:
        """Free an untracked, still viewed buffer's memory once the Buffer object is gone
        (its views hold it, so: when the last view is gone)."""
        self._orphans[buf.ptr] = buf.native, buf.size
        weakref.finalize(buf, self._free_orphan_at, buf.ptr)

    def _detach_viewed(self, buf: Buffer) -> bool:
        """Detach one live buffer of this open area that is still viewed, as close()
        detaches every viewed buffer: it is untracked and counted as unmapped now, and its
        memory is freed when its last view is gone. Return False (nothing done) if the
        buffer is not live here. What leaving a buffer's ``with`` block does."""
        self._check_open()
        if not self._untrack_viewed(buf):
            return False
        self._orphan(buf)
        return True

    def _free_orphan_at(self, ptr: int) -> None:
        """Free a mapping detached by close() once its Buffer object is gone: a
        released stand-in buffer carries what :meth:`_free` needs."""
        native, size = self._orphans.pop(ptr)
        ghost = self._new_buffer(ptr, size, host_accessible=False, native=native)
        ghost._release()
        try:
            self._free(ghost)
        except Exception as exc:  # called by a finalizer: it must not raise
            # Still there: track it in the (closed) area, so that close() again frees it.
            with contextlib.suppress(Exception):
                self._restore(ghost)
            warnings.warn(
                f"could not free the detached mapping at 0x{ptr:x}: {exc}; close() the area again to retry",
                ResourceWarning,
                stacklevel=1,
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if self._live:  # open with mappings, or closed with mappings whose free failed
            warnings.warn(f"unclosed {self!r}", ResourceWarning, stacklevel=2)
            with contextlib.suppress(Exception):  # never raise from a finalizer
                self.close()

    def __repr__(self) -> str:
        dev = "" if self.device is None else f" device={self.device}"
        state = "closed" if self.closed else f"{len(self._live)} live, {format_size(self.stats.bytes_in_use)}"
        return f"<aml {type(self).__name__} {self.backend}:{self.kind.value}{dev} {state}>"
