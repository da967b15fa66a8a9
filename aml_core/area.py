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
==========================================  =========================================

``close()`` (or leaving a ``with`` block) frees every mapping still live. A buffer that
is still viewed (a memoryview, a NumPy array, a DLPack consumer) cannot be freed
safely: close() detaches it instead, and its memory is released when the last view
and the buffer object itself are gone. Areas are thread-safe.

The bookkeeping is a :class:`~aml_core._buffer.LiveTable` (C): each of its methods is
atomic under the GIL, so the common mmap and munmap take no Python lock. ``_lock`` is
still a re-entrant lock for the rare paths and for subclasses: while a thread holds it,
the table is pinned, the lock-free paths step aside and wait for the lock, so holding
``_lock`` excludes every change to the live mappings, as it always did.

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
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

import attrs

from ._buffer import AreaBase, LiveTable
from .buffer import Buffer
from .errors import AMLBusyError, AMLError, AMLTypeError, AMLValueError
from .specs import MAX_SIZE, AreaStats, Capability, Kind, as_size

__all__ = ["Area", "NoOptions"]

_B = TypeVar("_B", bound=Buffer)


@attrs.frozen
class NoOptions:
    """The options of an area whose mmap takes none."""


_NO_OPTIONS = NoOptions()  # frozen and empty: one instance serves every mmap


class _TableLock:
    """``Area._lock``: a re-entrant lock that also pins the area's live table while held,
    so that the lock-free fast paths of mmap and munmap wait for it (an RLock's API)."""

    __slots__ = ("_rlock", "_table")

    def __init__(self, table: LiveTable) -> None:
        self._rlock = threading.RLock()
        self._table = table

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._rlock.acquire(blocking, timeout):
            return False
        self._table.pin()
        return True

    def release(self) -> None:
        self._rlock.release()  # raises (and keeps the pin count) if not held
        self._table.unpin()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class Area(AreaBase, abc.ABC):
    """Base class of every area.

    Subclasses set :attr:`options_type` (an attrs class; ``mmap`` accepts an instance,
    a mapping of its fields, or None) and implement :meth:`_allocate` and :meth:`_free`.
    ``kind``, ``device`` and :meth:`_new_buffer` come from the C base class.
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
        self.backend = backend
        self.kind = kind
        self.device = device
        self.capabilities = capabilities
        #: The live mappings (base pointer -> Buffer, oldest first) and the counters.
        #: munmap's fast path checks what Area._lookup checks: a subclass that redefines
        #: _lookup has every munmap go through it.
        self._live = LiveTable(fast=type(self)._lookup is Area._lookup)
        self._lock = _TableLock(self._live)
        self._closed = False
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

    # -- helpers for subclasses ---------------------------------------------------------
    if TYPE_CHECKING:  # implemented in C (AreaBase): backends call it on every mmap

        def _new_buffer(
            self,
            ptr: int,
            size: int,
            *,
            host_accessible: bool,
            readonly: bool = False,
            dl_device: tuple[int, int] = (0, 0),
            device_ptr: int | None = None,
            native: Any = None,
            device: int | None = None,
        ) -> Buffer:
            """A new :attr:`buffer_type` bound to the memory and to this area;
            ``device_ptr`` defaults to ``ptr`` and ``device`` to the area's."""

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
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise AMLValueError(f"this {self.backend} {self.kind.value} area is closed")

    def mmap(self, size: int, options: Any = None) -> Buffer:
        """Allocate ``size`` bytes; see the module documentation for errors."""
        # The common case (a plain positive int) skips the full validation.
        n = size if type(size) is int and 0 < size <= MAX_SIZE else as_size(size)
        if self._closed:
            self._check_open()
        buf = self._allocate(n, self._coerce_options(options))
        if self._live.add(buf):
            return buf
        return self._track(buf)

    def _track(self, buf: _B, during: str = "mmap") -> _B:
        """Track a new buffer (made by a subclass outside mmap, or one the table refused
        without the lock): if the area was closed meanwhile, give the memory back and raise."""
        with self._lock:
            if self._live.add(buf, True):
                return buf
        buf._release()
        self._free(buf)
        raise AMLValueError(f"this {self.backend} {self.kind.value} area was closed during {during}")

    def _resized(self, buf: Buffer, old_size: int) -> None:
        """Count the new size of a buffer a subclass re-bound (a growable buffer), if it
        is still live."""
        self._live.resized(buf, old_size)

    def _lookup(self, target: Buffer | int, size: int | None) -> Buffer:
        if isinstance(target, Buffer):
            if target.area is not self:
                raise AMLValueError(f"{target!r} was not mapped by this area")
            if target.freed:
                raise AMLValueError(f"{target!r} was already unmapped")
            buf = self._live.get(target.ptr)
            if buf is not target:
                raise AMLValueError(f"{target!r} is not live in this area")
        elif isinstance(target, int) and not isinstance(target, bool):
            found = self._live.get(target)
            if found is None:
                for live in self._live.buffers():
                    base = live.ptr
                    if base < target < base + live.size:
                        raise AMLValueError(
                            f"0x{target:x} is inside the mapping at 0x{base:x} (offset "
                            f"{target - base}); munmap takes the mapping's base pointer"
                        )
                raise AMLValueError(
                    f"0x{target:x} was not mapped by this area (a foreign pointer, or already unmapped)"
                )
            buf = found
        else:
            raise AMLTypeError(f"munmap takes a Buffer or an int pointer, not {type(target).__name__}")
        if size is not None:
            n = as_size(size)
            if n != buf.size:
                raise AMLValueError(f"munmap size {n} does not match the mapping's size {buf.size}")
        return buf

    def munmap(self, buffer: Buffer | int, size: int | None = None) -> None:
        """Free a mapping made by this area, given as the Buffer or its base pointer."""
        # The common case (a live, unviewed buffer or its exact pointer) in one atomic
        # call; anything else, under the lock, says precisely what is wrong.
        buf = self._live.take(self, buffer, size)
        if buf is None:
            with self._lock:
                self._check_open()
                buf = self._lookup(buffer, size)
                if not buf._release():
                    raise AMLBusyError(
                        f"{buf!r} is still viewed ({buf.exports} memoryview/NumPy/DLPack exports); "
                        "release the views first"
                    )
                self._live.remove(buf)
        try:
            self._free(buf)
        except BaseException:
            with self._lock:  # the memory is still there: keep tracking it
                self._live.restore(buf)
            raise

    @property
    def stats(self) -> AreaStats:
        """Bytes in use, peak bytes, live mappings, total maps and unmaps."""
        nbytes, peak, live, maps, unmaps = self._live.stats()
        return AreaStats(
            bytes_in_use=nbytes, peak_bytes=peak, live_mappings=live, total_maps=maps, total_unmaps=unmaps
        )

    def buffers(self) -> tuple[Buffer, ...]:
        """The live buffers, oldest first."""
        return self._live.buffers()

    def close(self) -> None:
        """Free every live mapping and refuse further use. Buffers still viewed are
        detached and freed when their last view is gone. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live = self._live.drain()  # counted as unmapped
        errors: list[AMLError] = []
        for buf in live:
            if buf._release():
                try:
                    self._free(buf)
                except AMLError as exc:
                    errors.append(exc)
            else:
                warnings.warn(
                    f"{buf!r} is still viewed while its area closes; it is freed when its last view is gone",
                    ResourceWarning,
                    stacklevel=2,
                )
                self._orphans[buf.ptr] = buf.native, buf.size
                weakref.finalize(buf, self._free_orphan_at, buf.ptr)
        if errors:
            raise errors[0]

    def _free_orphan_at(self, ptr: int) -> None:
        """Free a mapping detached by close() once its Buffer object is gone: a
        released stand-in buffer carries what :meth:`_free` needs."""
        native, size = self._orphans.pop(ptr)
        ghost = self._new_buffer(ptr, size, host_accessible=False, native=native)
        ghost._release()
        try:
            self._free(ghost)
        except Exception as exc:  # called by a finalizer: it must not raise
            warnings.warn(
                f"could not free the detached mapping at 0x{ptr:x}: {exc}", ResourceWarning, stacklevel=1
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and self._live:
            warnings.warn(f"unclosed {self!r}", ResourceWarning, stacklevel=2)
            with contextlib.suppress(Exception):  # never raise from a finalizer
                self.close()

    def __repr__(self) -> str:
        dev = "" if self.device is None else f" device={self.device}"
        state = "closed" if self._closed else f"{len(self._live)} live"
        return f"<aml {type(self).__name__} {self.backend}:{self.kind.value}{dev} {state}>"
