"""Area: allocates one kind of memory on one place and keeps track of every mapping.

``area.mmap(size, options=None, *, stream=None)`` returns a :class:`~aml_core.buffer.Buffer`;
``area.munmap(buffer_or_ptr, size=None, *, stream=None)`` frees it. The area knows every
live mapping it made, so that wrong input is an error and never a crash:

==========================================  =========================================
input                                       error
==========================================  =========================================
size not an integer (float, str, bool)      :class:`AMLTypeError` (EINVAL, TypeError)
size 0 or negative                          :class:`AMLValueError` (EINVAL)
size above 2**63 - 1 (the address space)    :class:`AMLDomainError` (EDOM)
size the system cannot provide              :class:`AMLMemoryError` (ENOMEM)
options of the wrong type or unknown keys   :class:`AMLTypeError` (EINVAL)
a stream to an area that orders no work on  :class:`AMLNotSupported` (ENOTSUP)
streams (a host area, a pool over one)
a stream of a wrong type; a handle outside  :class:`AMLTypeError`, :class:`AMLValueError`
0..2**64 - 1; a closed aml Stream           (EINVAL)
munmap of a pointer this area did not map   :class:`AMLValueError` (EINVAL)
munmap of a pointer inside a mapping        :class:`AMLValueError` (EINVAL)
munmap twice, or of a freed buffer          :class:`AMLValueError` (EINVAL)
munmap with a size other than the mapping's :class:`AMLValueError` (EINVAL)
munmap of a buffer another area made        :class:`AMLValueError` (EINVAL)
munmap of a buffer still viewed             :class:`AMLBusyError` (EBUSY)
munmap of a slab a pool holds (its Buffer,  :class:`AMLValueError` (EINVAL)
its pointer, or a ``with`` block on it)
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

Pools: a slab that a pool (:mod:`aml_core.pool`) took from this area belongs to the pool
until the pool gives it back (``trim()``, ``close()``, ``release_threshold``): munmap of it,
by Buffer, pointer or ``(pointer, size)``, ``slab.free()`` and a ``with`` block on it are
EINVAL whether or not blocks of it are live (one rule, :meth:`AreaBase._hold`). ``close()``
first closes every pool over the area (their live buffers are freed or, if viewed,
detached), then frees the slabs; a slab still holding a viewed block is detached and freed
once the pool lets it go.

Garbage collection: an area does not keep its buffers alive. A buffer that becomes
unreachable without munmap (no reference, no view, no DLPack consumer) is freed when it
is garbage collected, as cuda.core's Buffer and RMM's DeviceBuffer are: through the path
munmap takes (the same ``_free``, statistics and pool cache). If nothing else
references it, ``area.mmap(n).ptr`` is freed at once: keep the Buffer while you use its
memory. A free that runs the backend's Python code never runs while someone is inside
the area (its ``_allocate`` or ``_free``, close(), a section under one of its
:class:`~aml_core._buffer.AreaLock` locks, a pool's lock): it waits, and the next thread
that leaves the area frees it (a compiled free, the pool cache's or a NativeAllocator's,
runs at once: it never re-enters or waits). A GC-driven free that
fails is reported through ``sys.unraisablehook`` (as an exception in ``__del__``) and
the mapping stays tracked, and held by the area, for munmap or close() to retry. At
interpreter exit dropped buffers are only untracked: the process's exit returns the
memory.

The bookkeeping (live mappings, counters, the closed flag), mmap and munmap live in the
compiled base class :class:`~aml_core._buffer.AreaBase`, with one rule: every change to
an area's live mappings happens inside one of AreaBase's bookkeeping methods, each of
which runs under the GIL without releasing it, so each change is atomic; the backend's
native ``_allocate`` and ``_free`` run outside them. No lock guards the bookkeeping.
``_lock`` is a re-entrant :class:`~aml_core._buffer.AreaLock` for subclasses' own state
only. Where exactly that (and the pool cache, the buffers' export counts, the deferred
frees) rests on the GIL, and what each such place needs without it, is listed in
docs/reliability.md, "Threads and the GIL".

An area may also install a compiled allocator (``_set_native``: C function pointers of
its runtime's allocation calls, aml_core._buffer.NativeAllocator); ``mmap(size)`` without
options and ``munmap`` of the buffers it made then run in C, under the same rule.

Streams: ``stream`` is an argument of mmap and munmap (any stream object or an int
handle, :func:`aml_core.stream.as_stream_handle`), converted once to a native handle in
the compiled core and passed down: to the fast path, then to ``_allocate(size, options,
stream=handle)`` and ``_free(buffer, stream=handle)``, which get the keyword only when
there is a stream (an area that orders no work on streams never does: it refuses one).
A buffer records the stream it was allocated on (:attr:`Buffer.stream`) and munmap
frees it there unless told another stream. ``mmap(n, {"stream": s})`` and
``munmap_on(buf, s)`` still work for one minor version, with a DeprecationWarning.

Writing a backend means subclassing :class:`Area` and implementing ``_allocate`` and
``_free`` (see docs/backend-authoring.md).
"""

from __future__ import annotations

import abc
import contextlib
import inspect
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self, TypedDict, TypeVar, cast

import attrs

from ._buffer import AreaBase, AreaLock, _mmap_function
from .buffer import Buffer
from .errors import AMLError, AMLTypeError
from .specs import AreaStats, Capability, Kind, format_size
from .stream import StreamLike

__all__ = ["Area", "NoOptions", "NoOptionsDict", "compiled_mmap"]

#: What every area's mmap raises (mmap's rows of the module doc's table): compiled_mmap
#: appends it to each area's own mmap docstring.
MMAP_ERRORS = """Errors (every area):

- :class:`~aml_core.errors.AMLTypeError` (EINVAL): ``size`` is not an integer (a float,
  str or bool), or ``options`` is of the wrong type, has an unknown key or a value of
  the wrong type.
- :class:`~aml_core.errors.AMLValueError` (EINVAL): ``size`` is 0 or negative, or the
  area is closed.
- :class:`~aml_core.errors.AMLDomainError` (EDOM): ``size`` is above 2**63 - 1.
- :class:`~aml_core.errors.AMLMemoryError` (ENOMEM): the system cannot provide ``size``
  bytes.
- :class:`~aml_core.errors.AMLFailure` (FAILURE): the native allocation "succeeded"
  with NULL or an address already live in this area (no buffer is returned)."""

_M = TypeVar("_M", bound=Callable[..., Buffer])


def compiled_mmap(documented: _M) -> _M:
    """Decorate an area's ``mmap`` (its signature and a docstring that lists its options
    and the errors its backend adds; the body calls ``AreaBase.mmap``): the class gets the
    compiled AreaBase.mmap under that signature and docstring, with :data:`MMAP_ERRORS`
    appended, so ``help()`` and ``inspect.signature`` show the area's own options and
    the hot path has no Python frame (the decorated body never runs)."""
    compiled = _mmap_function()
    # The signature comes from the annotations copied (a compiled function has a real
    # __code__ and defaults); __wrapped__ is not set: the documented body never runs.
    for name in ("__module__", "__name__", "__qualname__", "__annotations__"):
        setattr(compiled, name, getattr(documented, name))
    compiled.__doc__ = f"{inspect.cleandoc(documented.__doc__ or '')}\n\n{MMAP_ERRORS}"
    return cast(_M, compiled)


@attrs.frozen
class NoOptions:
    """The options of an area whose mmap takes none."""


class NoOptionsDict(TypedDict, total=False):
    """:class:`NoOptions` as a mapping: ``{}`` only (any key is a type error)."""


_NO_OPTIONS = NoOptions()  # frozen and empty: one instance serves every mmap

#: Every area and pool of this process that is still referenced (aml_core.memory reports them).
LIVE_AREAS: weakref.WeakSet[Area] = weakref.WeakSet()


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
        #: Its holders count as inside the area: GC-driven frees wait for them.
        self._lock = AreaLock(self, threading.RLock())
        #: A section without a lock that counts as inside the area (close(), or a
        #: subclass's code that a GC-driven _free must not interleave with).
        self._inside_area = AreaLock(self)
        #: Mappings detached by close() or a with block while still viewed: ptr -> size,
        #: until their finalizer frees them.
        self._orphans: dict[int, int] = {}
        #: The pools over this area (their slabs are its buffers): close() closes them first.
        self._pools: weakref.WeakSet[Area] = weakref.WeakSet()
        LIVE_AREAS.add(self)

    # -- to implement --------------------------------------------------------------
    @abc.abstractmethod
    def _allocate(self, size: int, options: Any) -> Buffer:
        """Allocate ``size`` bytes and return a buffer made by :meth:`_new_buffer`.
        Raise an :class:`AMLError` on failure, having freed anything partial. An area
        that orders work on streams (``self._take_streams()``) also takes ``stream``, a
        native handle, as a keyword, given only for a request on a stream."""

    @abc.abstractmethod
    def _free(self, buffer: Buffer) -> None:
        """Release the native memory of ``buffer``, in host order or on the stream it was
        allocated on (``buffer.stream``); an area that orders work on streams also takes
        ``stream``, a handle, as a keyword: munmap named that stream. Raise an
        :class:`AMLError` if the native call fails (the buffer then stays live). Also called by a buffer's
        finalizer when it becomes unreachable (see the module doc): never while this area
        is inside one of its own operations, but otherwise at any allocation point of any
        thread, so it must not wait for a lock that code outside the area's sections holds."""

    def _dlpack_prepare(self, buffer: Buffer, stream: Any) -> None:
        """Make the buffer's pending work visible to a DLPack consumer's stream."""

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
    @compiled_mmap
    def mmap(self, size: int, options: Any = None, *, stream: StreamLike = None) -> Buffer:
        """Map ``size`` bytes (an int > 0) and return a :class:`~aml_core.buffer.Buffer`
        of this area; free it with :meth:`munmap`, ``buf.free()`` or a ``with`` block.

        Options: ``options`` is None (every option's default), an instance of the area's
        :attr:`options_type` (an attrs class), or a mapping of its fields
        (``{"key": value}``); each area's ``mmap`` lists the keys it takes, an area
        without options (:class:`NoOptions`) takes None or ``{}``. ``stream``: allocate
        in that stream's order (areas that order work on streams; see the module doc)."""
        return AreaBase.mmap(self, size, options, stream=stream)

    def munmap_on(self, buffer: Buffer | int, stream: StreamLike, size: int | None = None) -> None:
        """Deprecated (to be removed in the next minor version): ``munmap(buffer, size,
        stream=stream)``."""
        warnings.warn(
            "munmap_on(buffer, stream) is deprecated: use munmap(buffer, stream=stream)",
            DeprecationWarning,
            stacklevel=2,
        )
        if stream is None:  # munmap_on's None was the default stream
            stream = 0
        self.munmap(buffer, size, stream=stream)

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
        its native cause; calling close() again retries those frees. Otherwise idempotent.

        The pools over this area are closed first (their live buffers freed, viewed ones
        detached); a slab a pool still holds (for a viewed block) is detached too and
        freed when the pool gives it back."""
        errors: list[AMLError] = []
        for pool in list(self._pools):
            try:
                pool.close()
            except AMLError as exc:
                errors.append(exc)
        live = self._drain()  # closed from now on; the buffers are counted as unmapped
        if live is None:  # already closed
            if errors:
                raise errors[0]
            return
        with self._inside_area:  # a finalizer meanwhile defers its free to the end
            for buf in live:
                if self._held(buf):
                    self._orphan(buf)  # its pool frees it: the buffer goes with the slab
                elif buf._release():
                    try:
                        self._free(buf)
                    except AMLError as exc:
                        # The memory is still there: keep tracking it (the closed area
                        # reports it live), so that close() again retries the native free.
                        self._restore(buf)
                        errors.append(exc)
                else:
                    warnings.warn(
                        f"{buf!r} is still viewed while its area closes; "
                        "it is freed when its last view is gone",
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
        (its views hold it, so: when the last view is gone): its finalizer calls
        :meth:`_free_orphan`."""
        self._orphans[buf.ptr] = buf.size
        self._set_orphan(buf)

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

    def _free_orphan(self, buf: Buffer) -> None:
        """Free a mapping detached by close() (or a with block) while it was viewed, once
        its Buffer object is gone: called by the buffer's finalizer, inside the area.
        Raise if the native free fails: the caller tracks the buffer again (the closed
        area reports it live, close() retries) and reports the error."""
        self._orphans.pop(buf.ptr, None)
        self._free(buf)

    def _give_back(self, buf: Buffer, exc: BaseException) -> None:
        """Free a buffer that :meth:`_allocate` made but cannot return, because a later
        step failed with ``exc``. If this native free fails too, say so on ``exc`` and keep
        the buffer tracked and held by the area, as a mapping whose munmap failed is: the
        memory is still there, and close() frees it."""
        buf._release()
        try:
            self._free(buf)
        except AMLError as failed:
            exc.add_note(
                f"giving the allocation back failed too: {failed}; the area keeps it: close() frees it"
            )
            buf._revive()
            self._track(buf, "mmap")  # the map is counted...
            self._untrack_viewed(buf)  # ...and an unmap, which _restore takes back:
            self._restore(buf)  # tracked, and held by the area until close() frees it

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if self._stats()[2]:  # open with mappings, or closed with mappings whose free failed
            warnings.warn(f"unclosed {self!r}", ResourceWarning, stacklevel=2)
            with contextlib.suppress(Exception):  # never raise from a finalizer
                self.close()

    def __repr__(self) -> str:
        dev = "" if self.device is None else f" device={self.device}"
        nbytes, _, live, _, _ = self._stats()
        state = "closed" if self.closed else f"{live} live, {format_size(nbytes)}"
        return f"<aml {type(self).__name__} {self.backend}:{self.kind.value}{dev} {state}>"
