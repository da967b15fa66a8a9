"""The pool: an :class:`~aml_core.area.Area` over another area, an adapter over the
allocator kernel (aml_core/_kernel.pyx), which holds its blocks and decides everything;
see aml_core.pool for what it does. Here: the arguments checked and converted, a Buffer
made around a block when Python asks for one, the statistics formatted, and the
protocols of the area below (streams, virtual memory) handed to the kernel."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Unpack

from .. import checks
from .._buffer import PoolKernel
from ..area import Area, compiled_mmap
from ..buffer import Buffer, area_cuda_array_interface
from ..errors import AMLError, AMLNotSupported, AMLTypeError, AMLValueError
from ..protocols import (
    AddressRange,
    GrowableMemory,
    MemoryCapacity,
    PoolBinding,
    StreamOrderedArea,
)
from ..specs import Capability, format_size
from ..stream import StreamLike, native_streams
from . import _callbacks
from ._config import PoolConfig, PoolConfigFields
from ._history import Recording
from ._releases import Releases
from ._sharing import Sharing
from ._values import (
    NO_STREAM,
    PoolOptions,
    PoolOptionsDict,
    PoolStats,
    StreamStats,
    pool_stats_of,
    stream_stats_of,
)

__all__ = ["OnOom", "Pool"]

#: A pool's out-of-memory callback: ``on_oom(requested, stats) -> bool`` (see the module
#: doc, "Limit and release").
OnOom = Callable[[int, PoolStats], bool]

#: set_limit's "not given".
_UNSET: Any = object()

#: Capabilities a pooled buffer does not have even if its area's buffers do: a block is
#: not a VMM mapping or a file mapping of its own (IPC: see Pool.ipc_export).
_NOT_POOLED = Capability.VIRTUAL_MEMORY | Capability.FILE_BACKED


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def _limit_bytes(
    area: Area, device: int | None, granule: int, limit: int | float | None, fraction: float | None
) -> int:
    """A pool's limit in bytes, checked: ``limit`` (an int: bytes; a float: a fraction) or
    ``fraction`` of the area's :meth:`~aml_core.protocols.MemoryCapacity.total_memory`."""
    if isinstance(limit, float):
        fraction = limit
    elif limit is not None:
        limit = checks.size(limit, "limit")
    if fraction is not None:
        if not 0.0 < fraction <= 1.0:
            raise AMLValueError(
                f"a limit's fraction must be in (0, 1], got {fraction!r} (a limit in bytes is an int)"
            )
        total = area.total_memory(device) if isinstance(area, MemoryCapacity) else None
        if not total:
            raise AMLNotSupported(
                f"the pooled {type(area).__name__} cannot tell its memory's size: give the limit in bytes"
            )
        limit = int(total * fraction)
    assert isinstance(limit, int)
    if limit < granule:
        raise AMLValueError(
            f"limit {format_size(limit, exact=True)} is smaller than one block "
            f"({format_size(granule, exact=True)})"
        )
    return limit


class Pool(Recording, Sharing, Releases):
    """An area that caches the memory of another area (see :mod:`aml_core.pool`).
    Make one with :func:`~aml_core.pool.pool`."""

    options_type = PoolOptions

    def __init__(
        self,
        area: Area,
        config: PoolConfig | None = None,
        *,
        on_oom: OnOom | None = None,
        options: object = None,
        **fields: Unpack[PoolConfigFields],
    ) -> None:
        """A pool over ``area`` (usually made with :func:`pool`).

        ``area`` — the area whose memory is cached (it stays open and owned by the caller);
        ``config`` — a :class:`PoolConfig` (its fields: the limit, the release threshold,
        the layout, ``max_split_size``, ``initial_size``, an expandable segment); the
        keywords ``fields`` replace its fields (``Pool(area, limit=1 << 30)``), checked
        once, when the config is made; ``on_oom`` — called before the pool raises ENOMEM
        (see :attr:`on_oom`); ``options`` — the mmap options passed to the area for every
        slab."""
        if not isinstance(area, Area):
            raise AMLTypeError(f"pool takes an aml Area, not {type(area).__name__}")
        area._check_open()
        self.config = config = PoolConfig.of(config, dict(fields))
        granule = config.granule
        limit: int | float | None = config.limit
        capacity = config.capacity
        expandable = config.expandable
        if on_oom is not None and not callable(on_oom):
            raise AMLTypeError(f"on_oom must be a callable or None, not {type(on_oom).__name__}")
        if expandable and not isinstance(area, GrowableMemory):
            raise AMLNotSupported(
                f"an expandable pool maps physical memory on demand: it needs a VirtualMemory "
                f"area, not {type(area).__name__}"
            )
        # One device per pool: an area of the current device binds the pool to one device
        # (PoolBinding), so cached blocks never cross devices.
        if isinstance(area, PoolBinding):
            options, device = area._pool_binding(options)
        else:
            device = area.device
        if limit is not None:
            limit = _limit_bytes(area, device, granule, limit, None)
        super().__init__(
            backend=area.backend,
            kind=area.kind,
            device=device,
            capabilities=area.capabilities & ~_NOT_POOLED,
        )
        self._area = area
        self._options = options
        self._release_threshold = config.release_threshold
        self._mask = granule - 1
        #: The pool's policy and state (its blocks, slabs, streams and counters) and its
        #: mutex: ``with pool._kernel`` holds it (see "Threads" in the module doc).
        self._kernel = kernel = PoolKernel(area, config, limit=limit, options=options)
        # The stream operations, from the start: a framework hook's first request on a
        # stream (before Python ever gave the pool one) finds them (issue 32, cause 1).
        self._no_stream_reason: str | None = None
        if isinstance(area, StreamOrderedArea):
            try:
                kernel.set_streams(native_streams(area.stream_ordering()))
                self._take_streams()
            except AMLNotSupported as exc:
                self._no_stream_reason = str(exc)
        if isinstance(area, MemoryCapacity):  # for the ENOMEM message
            kernel.free_memory = functools.partial(area.free_memory, device)
        self.on_oom = on_oom
        self._vm: GrowableMemory[Any] | None = None
        self._reservation: AddressRange | None = None
        self._closing = False
        if expandable:
            assert isinstance(area, GrowableMemory)
            g = area.granularity()
            if capacity is None:
                capacity = limit if limit is not None else 1 << 40
            cap = _round_up(checks.size(capacity, "capacity"), g)
            self._vm = area
            self._reservation = res = area.reserve(cap)
            kernel.set_segment(area, res.ptr, res.size, g, area.dlpack_device(), area.device)
            self.capabilities &= ~Capability.IPC
        # The compiled fast path (see "Fast path" in the module doc).
        self._set_pool(kernel)
        if config.initial_size:  # RMM's initial pool: reserved now, cached from the start
            try:
                kernel.reserve(config.initial_size)
            except BaseException:
                self.close()  # an expandable pool's reservation goes back
                raise
        # A GC-driven free of a pooled buffer may release a slab: it waits while someone
        # is inside the area too (see aml_core.area, "Garbage collection").
        self._set_below(area)
        # The area's close() closes this pool first (its slabs are the area's buffers).
        area._pools.add(self)

    # -- the area being pooled --------------------------------------------------------------
    @property
    def area(self) -> Area:
        """The area the pool takes its slabs from (the pool never closes it)."""
        return self._area

    @property
    def limit(self) -> int | None:
        """The most bytes the pool may hold from the area (None: no limit); setting it is
        :meth:`set_limit` (bytes, or a float fraction)."""
        limit: int | None = self._kernel.limit
        return limit

    @limit.setter
    def limit(self, value: int | float | None) -> None:
        self.set_limit(value)

    def set_limit(self, limit: int | float | None = _UNSET, *, fraction: float | None = None) -> None:
        """Change the limit now: ``set_limit(bytes)``, ``set_limit(fraction=f)`` (``f`` in
        (0, 1]: that share of the device's memory, or of the NUMA nodes' for a host
        pool: :class:`~aml_core.protocols.MemoryCapacity`; a float ``limit`` is the
        same), ``set_limit(None)``: no limit. Lowering it below what the pool reserves
        keeps that memory and refuses growth (after releasing the cache) until the pool
        is under it. An expandable pool's reservation caps it whatever the limit.

        Errors: AMLTypeError for a limit that is not an int, float or None;
        AMLValueError for both or neither given, a fraction outside (0, 1], a limit
        smaller than one granule; AMLNotSupported for a fraction over an area that cannot
        tell its memory's size."""
        if limit is _UNSET and fraction is None:
            raise AMLValueError("set_limit takes a limit in bytes (or None) or fraction=, not neither")
        if limit is not _UNSET and fraction is not None:
            raise AMLValueError("set_limit takes a limit in bytes or fraction=, not both")
        self._check_open()
        if limit is _UNSET:
            if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
                raise AMLTypeError(f"fraction must be a float in (0, 1], not {type(fraction).__name__}")
            value = _limit_bytes(self._area, self.device, self._kernel.granule, None, fraction)
        elif limit is None:
            value = None
        else:
            value = _limit_bytes(self._area, self.device, self._kernel.granule, limit, None)
        self._kernel.set_limit(value)

    @property
    def on_oom(self) -> OnOom | None:
        """Called as ``on_oom(requested, stats)`` when the pool is out of memory (its limit,
        or the area's ENOMEM), after it released its cache and before it raises ENOMEM:
        ``requested`` is the bytes it needs (the request rounded up to the granule),
        ``stats`` its :class:`PoolStats`. A true result retries once (a block freed
        meanwhile, else new memory); false raises ENOMEM; an exception of the callback
        raises ENOMEM from it. It runs in the thread that allocates, with the pool's
        mutex held: it may free this pool's buffers (munmap, a framework's tensors), not
        close the pool; an allocation it makes from the pool does not call it again.
        None: no callback."""
        callback: OnOom | None = self._kernel.on_oom
        return getattr(callback, "__wrapped__", callback)

    @on_oom.setter
    def on_oom(self, callback: OnOom | None) -> None:
        if callback is not None and not callable(callback):
            raise AMLTypeError(f"on_oom must be a callable or None, not {type(callback).__name__}")
        self._kernel.on_oom = None if callback is None else _callbacks.guard(callback)

    def set_on_oom(self, callback: OnOom | None) -> None:
        """Set :attr:`on_oom` (None removes it)."""
        self.on_oom = callback

    @property
    def release_threshold(self) -> int | None:
        return self._release_threshold

    @property
    def expandable(self) -> bool:
        return self._vm is not None

    # -- Area -----------------------------------------------------------------------------
    @compiled_mmap
    def mmap(
        self, size: int, options: PoolOptions | PoolOptionsDict | None = None, *, stream: StreamLike = None
    ) -> Buffer:
        """Take a block of ``size`` bytes (rounded up to the granule) from the pool: a
        cached block of that size, else a best fit from the cached slabs, else a new slab
        from the area (see the module doc). The buffer is at the block's own address.

        ``stream``: GPU pools only: take the block in that stream's order (any stream
        object or an int handle; None, the default: host order); see "Streams" in the
        module doc.

        Options (:class:`PoolOptions`, deprecated: a pool takes none):

        - ``stream``: deprecated, removed in the next minor version: ``mmap(size,
          stream=s)``.

        Errors of pools: :class:`~aml_core.errors.AMLMemoryError` when a new slab would
        pass ``limit`` even after the cached slabs are released, or the area has no more
        memory; :class:`~aml_core.errors.AMLValueError` when the area below is closed;
        :class:`~aml_core.errors.AMLNotSupported` for ``stream`` over an area that does not
        order work on streams (:class:`~aml_core.protocols.StreamOrderedArea`); any error
        of the area's own mmap when it allocates a slab."""
        return super().mmap(size, options)

    def _coerce_options(self, options: Any) -> Any:
        if options is None:
            return NO_STREAM
        return super()._coerce_options(options)

    def _no_streams(self) -> None:
        raise AMLNotSupported(
            self._no_stream_reason
            or f"streams need a GPU area; the pooled {type(self._area).__name__} has no runtime "
            "that orders work on streams"
        )

    def _allocate(self, size: int, options: Any, stream: int | None = None) -> Buffer:
        addr = self._take(size, stream)
        kernel = self._kernel
        try:
            device_ptr, flags, dl_device, device, _slab, _offset, _n = kernel.block(addr)
            return self._new_buffer(
                addr,
                size,
                host_accessible=bool(flags & 1),
                readonly=bool(flags & 2),
                dl_device=dl_device,
                device_ptr=device_ptr,
                native=None,
                device=device,
            )
        except BaseException:
            with kernel:
                kernel.free(addr, None)
            raise

    def _free(self, buffer: Buffer, stream: int | None = None) -> None:
        # stream None: the block's own (the kernel recorded it)
        with self._kernel:
            self._kernel.free(buffer.ptr, stream)
        _callbacks.after_free(buffer)

    def _restore(self, buf: Buffer) -> None:
        if _callbacks.was_freed(buf):
            return  # freed: a callback's interrupt came after (aml_core.pool._callbacks)
        super()._restore(buf)

    def _cuda_array_interface(self, buffer: Buffer) -> dict[str, Any] | None:
        return area_cuda_array_interface(self._area, buffer)  # None unless the area below has one

    def _dlpack_prepare(self, buffer: Buffer, stream: Any) -> None:
        self._area._dlpack_prepare(buffer, stream)

    # -- the framework hooks' slow path (aml_core/_hooks.pyx: a hit never gets here) ------
    def _take(self, size: int, stream: int | None) -> int:
        """The kernel's slow path for a checked ``size`` in the order of ``stream`` (a
        handle; None: host order): the address of a live block; the pool's errors (a
        closed area below raises as its own mmap would)."""
        if self._area.closed:
            self._area._check_open()
        kernel = self._kernel
        try:
            with kernel:
                addr = int(kernel.alloc(size, stream))
        except BaseException:
            _callbacks.deliver()  # an on_oom interrupted: its interrupt, not the ENOMEM it caused
            raise
        return _callbacks.after_take(addr, self._give_block_back)

    def _give_block_back(self, addr: int) -> None:
        with self._kernel:
            self._kernel.free(addr, None)

    def _hook_alloc(self, size: int, stream: int | None) -> int:
        """A block for a framework hook (no Buffer; ``stream`` a native handle, the
        framework's): its address; the pool's errors."""
        self._check_open()
        if stream is not None and not self._ordered:
            self._no_streams()
        return self._take(checks.size(size), stream)

    def _hook_free(self, ptr: int, stream: int | None) -> None:
        """A framework hook's free of a block it took (also after close()); EINVAL for a
        pointer the kernel did not hand out. A pool without stream operations frees in
        host order."""
        with self._kernel:
            self._kernel.free(ptr, stream)
        _callbacks.deliver()  # the free is done

    # -- public API -----------------------------------------------------------------------
    def trim(self, keep: int = 0) -> int:
        """Return cached memory to the area until at most ``keep`` bytes are cached (only
        wholly free slabs, or free chunks at the end of an expandable segment, can go).
        Returns the bytes released."""
        self._check_open()
        keep = checks.size(keep, "keep", zero=True)
        with self._kernel:
            released = int(self._kernel.trim(keep))
        _callbacks.deliver()  # the trim is done
        return released

    def reset_peak(self) -> None:
        """Restart the peaks of :attr:`pool_stats` from the current values."""
        with self._kernel:
            self._kernel.reset_peak()

    @property
    def pool_stats(self) -> PoolStats:
        with self._kernel:
            return pool_stats_of(self._kernel.stats())

    @property
    def stream_stats(self) -> tuple[StreamStats, ...]:
        """The pool's memory by stream, read at one moment: host order first (``stream``
        None: blocks allocated without a stream, and the free blocks on no stream's
        list), then each stream that has a live block allocated on it or a block cached
        on its free list, by handle. Their ``bytes_in_use`` and ``block_bytes`` add up
        to :attr:`pool_stats`' ``bytes_in_use`` and ``block_bytes``, their
        ``bytes_cached`` to its ``bytes_cached``."""
        with self._kernel:
            return stream_stats_of(self._kernel.stream_stats())

    def slab_of(self, buffer: Buffer) -> tuple[Buffer | None, int]:
        """The area's buffer a pooled buffer was carved from (None for an expandable
        pool, whose segment is no buffer) and the buffer's offset in it.

        The slab is the pool's while it holds it: the area refuses to free it
        (``area.munmap(slab)``, ``slab.free()``, a ``with`` block: EINVAL), so the Buffer
        serves to read its address, size and device, to copy through or share it, never
        to free it; the pool gives it back in :meth:`trim` and :meth:`close`."""
        with self._lock:
            self._check_open()
            buf = self._lookup(buffer, None)
        _dptr, _flags, _dl, _device, slab, offset, _n = self._kernel.block(buf.ptr)
        return slab, offset

    def close(self) -> None:
        """Free every live buffer, then return every slab to the area (which stays
        open; the area's own close() calls this first). Buffers still viewed are freed
        when their last view is gone, and their slabs with them. Idempotent; a second
        close retries destroying the pool's stream event if the first could not, the
        frees of buffers freed after close that failed (kept live; the slabs a failed free
        in close kept are the area's to free), and an expandable pool's unmaps that failed
        (the chunks stay the pool's; its reservation is freed once none is left)."""
        kernel = self._kernel
        with self._lock:
            closed = self.closed
        if closed:
            error: AMLError | None = None
            try:
                super().close()  # retries the frees that failed after close (kept live)
            except AMLError as exc:
                error = exc
            with kernel:
                if self._reservation is not None:  # an unmap that failed: the chunk stayed
                    try:
                        kernel.trim(0)
                    except AMLError as exc:
                        error = error or exc
                    self._free_reservation()
                try:
                    kernel.destroy_event()
                except AMLError as exc:
                    error = error or exc
            if error is not None:
                raise error
            return
        # RDMA registrations deregister first: no registration outlives the memory
        # under it (aml_core.rdma); a failure is the close's error, the close goes on.
        error = self._close_listeners()
        with kernel:
            kernel.close_stacks()
        self._closing = kernel.closing = True  # blocks freed by close() are released below
        try:
            super().close()
        except AMLError as exc:  # pragma: no cover - _free never raises
            error = exc
        finally:
            self._closing = kernel.closing = False
        with kernel:
            try:
                kernel.trim(0)
            except AMLError as exc:
                error = error or exc
            # What a closed pool still holds: only the slabs of its buffers detached while
            # viewed. Any other slab left (its free failed) is the area's again.
            kernel.let_go(list(self._orphans))
            try:
                kernel.destroy_event()
            except AMLError as exc:
                error = error or exc
            self._free_reservation()
        if self._log is not None:
            self.log_to(None)  # the last events written, the file closed
        if error is not None:
            raise error
        _callbacks.deliver()  # the close is done

    def _free_reservation(self) -> None:
        """Free an expandable pool's reservation once no chunk is mapped in it (close;
        close again after an unmap failed, the kernel mutex held)."""
        if self._kernel.segment_empty() and self._reservation is not None:
            res, self._reservation = self._reservation, None
            if not self._area.closed and not res.freed:
                assert self._vm is not None
                self._vm.address_free(res)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self._stats()[2]} live"
        return (
            f"<aml Pool over {type(self._area).__name__} {self.backend}:{self.kind.value} {state}, "
            f"{format_size(self._kernel.reserved)} reserved>"
        )
