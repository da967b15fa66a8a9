"""The pool: an :class:`~aml_core.area.Area` over another area, made of its parts
(blocks and slabs, streams, the expandable segment, sharing and copies); see
aml_core.pool for what it does."""

from __future__ import annotations

import threading
from typing import Any

from .. import checks
from .._buffer import PoolCache
from ..area import Area, compiled_mmap
from ..buffer import Buffer, native_as
from ..errors import AMLError, AMLTypeError, AMLValueError
from ..protocols import AddressRange, CudaArrayInterfaceArea, GrowableMemory, PoolBinding, StreamOrdering
from ..specs import Capability
from ._blocks import Blocks
from ._expandable import Expandable
from ._layout import NO_STREAM, MiB, PoolOptions, PoolOptionsDict, PoolStats, _Block, _Heap, _round_up, _Slab
from ._sharing import Sharing
from ._streams import Streams

__all__ = ["Pool"]

#: Capabilities a pooled buffer does not have even if its area's buffers do: a block is
#: not a VMM mapping or a file mapping of its own (IPC: see Pool.ipc_export).
_NOT_POOLED = Capability.VIRTUAL_MEMORY | Capability.FILE_BACKED


class Pool(Blocks, Streams, Expandable, Sharing):
    """An area that caches the memory of another area (see :mod:`aml_core.pool`).
    Make one with :func:`~aml_core.pool.pool`."""

    options_type = PoolOptions

    def __init__(
        self,
        area: Area,
        *,
        limit: int | None = None,
        release_threshold: int | None = None,
        options: Any = None,
        granule: int = 512,
        small_max: int = 1 * MiB,
        small_slab: int = 2 * MiB,
        medium_slab: int = 20 * MiB,
        expandable: bool = False,
        capacity: int | None = None,
    ) -> None:
        """A pool over ``area`` (usually made with :func:`pool`).

        ``area`` — the area whose memory is cached (it stays open and owned by the caller);
        ``limit`` — the most bytes the pool may hold from the area (None: no limit); past it
        the pool releases its cache and retries, then raises ENOMEM; ``release_threshold`` —
        the most cached (free) bytes kept after a munmap (None: keep all); ``options`` — the
        mmap options passed to the area for every slab; ``granule`` — the block granularity
        (a power of two; sizes are rounded up to it); ``small_max`` — requests up to this
        size share ``small_slab``-byte slabs; ``medium_slab`` — the slab size for larger
        requests below half of it (bigger ones get a slab of their own);
        ``expandable`` — back the pool with one virtual-memory reservation of ``capacity``
        bytes that grows in place (the area must be a VirtualMemory area)."""
        if not isinstance(area, Area):
            raise AMLTypeError(f"pool takes an aml Area, not {type(area).__name__}")
        area._check_open()
        granule = checks.power_of_two(checks.size(granule, "granule"), "granule")
        small_max = checks.size(small_max, "small_max")
        small_slab = checks.size(small_slab, "small_slab")
        medium_slab = checks.size(medium_slab, "medium_slab")
        if small_max < granule or small_slab < small_max:
            raise AMLValueError(
                f"need granule <= small_max <= small_slab, got {granule}, {small_max}, {small_slab}"
            )
        if limit is not None:
            limit = checks.size(limit, "limit")
            if limit < granule:
                raise AMLValueError(f"limit {limit} is smaller than one block ({granule} bytes)")
        if release_threshold is not None:
            release_threshold = checks.size(release_threshold, "release_threshold", zero=True)
        # One device per pool: an area of the current device binds the pool to one device
        # (PoolBinding), so cached blocks never cross devices.
        if isinstance(area, PoolBinding):
            options, device = area._pool_binding(options)
        else:
            device = area.device
        super().__init__(
            backend=area.backend,
            kind=area.kind,
            device=device,
            capabilities=area.capabilities & ~_NOT_POOLED,
        )
        self._area = area
        self._options = options
        self._limit = limit
        self._release_threshold = release_threshold
        self._granule = granule
        self._mask = granule - 1
        self._small_max = small_max
        self._small_slab = _round_up(small_slab, granule)
        self._medium_slab = _round_up(medium_slab, granule)
        #: The state the compiled fast path shares (free stacks, counters) and the
        #: pool's one lock: ``with self._plock`` takes it (see "Threads").
        self._cache = PoolCache(area, granule, threading.RLock())
        self._plock = self._cache
        self._small = _Heap(granule)
        self._large = _Heap(small_max)
        self._slabs: list[_Slab] = []
        # counters (under _plock)
        self._reserved = 0
        self._peak_reserved = 0
        self._native_allocs = 0
        self._native_frees = 0
        self._misses = 0
        self._vm: GrowableMemory[Any] | None = None
        self._reservation: AddressRange | None = None
        self._segment: _Slab | None = None
        self._closing = False
        # Freed blocks by exact size, not coalesced yet (LIFO), are the cache's ``fast``:
        # the fast path of a repeated size. Unused when release_threshold is set and
        # after close.
        self._cache.keep_fast = release_threshold is None
        # Streams (see "Streams" in the module doc): blocks freed on a stream and not yet
        # known to be idle, by (stream, size); how many each stream holds; the stream of
        # the mmap/munmap in progress in this thread; the event and stream operations.
        self._sfast: dict[tuple[int, int], list[_Block]] = {}
        self._stream_held: dict[int, int] = {}
        self._any_stream = False
        self._tls = threading.local()
        self._stream_ops: StreamOrdering | None = None
        self._event: int | None = None
        if expandable:
            self._init_expandable(area, capacity)
            self.capabilities &= ~Capability.IPC
        elif capacity is not None:
            raise AMLValueError("capacity is for expandable pools (expandable=True)")
        # The compiled fast path (see "Fast path" in the module doc).
        self._set_pool(self._cache)
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
        return self._limit

    @property
    def release_threshold(self) -> int | None:
        return self._release_threshold

    # -- Area -----------------------------------------------------------------------------
    @compiled_mmap
    def mmap(self, size: int, options: PoolOptions | PoolOptionsDict | None = None) -> Buffer:
        """Take a block of ``size`` bytes (rounded up to the granule) from the pool: a
        cached block of that size, else a best fit from the cached slabs, else a new slab
        from the area (see the module doc). The buffer is at the block's own address.

        Options (:class:`PoolOptions`, or a :class:`PoolOptionsDict` of its keys):

        - ``stream``: GPU pools only: take the block in that stream's order (any stream
          object or an int handle; None, the default: host order); see "Streams" in the
          module doc.

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

    def _allocate(self, size: int, options: Any) -> Buffer:
        if self._area.closed:
            self._area._check_open()
        n = (size + self._mask) & ~self._mask
        stream = options.stream
        if stream is not None:
            stream = self._stream_handle(stream)
        with self._plock:
            stack = self._cache.fast.get(n) if stream is None else self._sfast.get((stream, n))
            if stack:  # a block of exactly this size, freed earlier: no search, no split
                blk = stack.pop()
                if stream is not None:
                    self._stream_held[stream] -= 1
                self._cache.hits += 1
                self._cache.blocks += n
            elif stream is None:
                blk = self._take(n)
            else:
                blk = self._take_on_stream(n, stream)
            blk.stream = stream
            req = self._cache.requested + size
            self._cache.requested = req
            if req > self._cache.peak_requested:
                self._cache.peak_requested = req
        slab = blk.slab
        try:
            return self._new_buffer(
                blk.addr,
                size,
                host_accessible=slab.host_accessible,
                readonly=slab.readonly,
                dl_device=slab.dl_device,
                device_ptr=slab.device_ptr + (blk.addr - slab.ptr),
                native=blk,
                device=slab.device,
            )
        except BaseException:
            with self._plock:
                self._cache.requested -= size
                self._give(blk)
            raise

    def _free(self, buffer: Buffer) -> None:
        blk = native_as(buffer, _Block)
        with self._plock:
            self._cache.requested -= buffer.size
            stream = blk.stream
            if self._any_stream:
                override = getattr(self._tls, "stream", None)
                if override is not None:
                    stream = override
                if stream is not None and self.closed and not self._closing:
                    # a buffer close() detached: its slab is released now, after its stream
                    self._streams().stream_synchronize(stream)
                    stream = blk.stream = None
            if stream is not None:  # reusable at once on this stream, elsewhere after an event
                size = blk.size
                self._cache.blocks -= size
                blk.stream = stream
                key = (stream, size)
                stack = self._sfast.get(key)
                if stack is None:
                    self._sfast[key] = [blk]
                else:
                    stack.append(blk)
                self._stream_held[stream] = self._stream_held.get(stream, 0) + 1
            elif self._cache.keep_fast:
                size = blk.size
                self._cache.blocks -= size
                stack = self._cache.fast.get(size)
                if stack is None:
                    self._cache.fast[size] = [blk]
                else:
                    stack.append(blk)
            else:
                self._give(blk)

    def _cuda_array_interface(self, buffer: Buffer) -> dict[str, Any] | None:
        area = self._area  # a CudaArrayInterfaceArea only where the area below is one
        return area._cuda_array_interface(buffer) if isinstance(area, CudaArrayInterfaceArea) else None

    def _dlpack_prepare(self, buffer: Buffer, stream: Any) -> None:
        self._area._dlpack_prepare(buffer, stream)

    # -- public API -----------------------------------------------------------------------
    def trim(self, keep: int = 0) -> int:
        """Return cached memory to the area until at most ``keep`` bytes are cached (only
        wholly free slabs, or free chunks at the end of an expandable segment, can go).
        Returns the bytes released."""
        self._check_open()
        keep = checks.size(keep, "keep", zero=True)
        with self._plock:
            return self._trim_locked(keep)

    def reset_peak(self) -> None:
        """Restart the peaks of :attr:`pool_stats` from the current values."""
        with self._plock:
            self._cache.peak_requested = self._cache.requested
            self._peak_reserved = self._reserved

    @property
    def pool_stats(self) -> PoolStats:
        with self._plock:
            if self._cache.fast:
                self._flush()
            cached = self._reserved - self._cache.blocks
            largest = max(self._small.largest(), self._large.largest())
            return PoolStats(
                bytes_in_use=self._cache.requested,
                peak_bytes_in_use=self._cache.peak_requested,
                block_bytes=self._cache.blocks,
                bytes_reserved=self._reserved,
                peak_bytes_reserved=self._peak_reserved,
                bytes_cached=cached,
                slabs=len(self._segment.chunks) if self._segment is not None else len(self._slabs),
                native_allocations=self._native_allocs,
                native_frees=self._native_frees,
                pool_hits=self._cache.hits,
                pool_misses=self._misses,
                largest_free_block=largest,
                fragmentation=1.0 - largest / cached if cached else 0.0,
            )

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
        blk = native_as(buf, _Block)
        return blk.slab.buf, blk.addr - blk.slab.ptr

    def close(self) -> None:
        """Free every live buffer, then return every slab to the area (which stays
        open; the area's own close() calls this first). Buffers still viewed are freed
        when their last view is gone, and their slabs with them. Idempotent; a second
        close retries destroying the pool's stream event if the first could not (the
        slabs a failed free kept are the area's to free)."""
        with self._lock:
            closed = self.closed
        if closed:
            with self._plock:
                self._destroy_event()
            return
        error: AMLError | None = None
        with self._plock:
            self._cache.keep_fast = False
            self._flush()
        self._closing = True  # the blocks freed by close() are released below, raising
        try:
            super().close()
        except AMLError as exc:  # pragma: no cover - _free never raises
            error = exc
        finally:
            self._closing = False
        with self._plock:
            try:
                self._trim_locked(0)
            except AMLError as exc:
                error = error or exc
            self._let_go()
            try:
                self._destroy_event()
            except AMLError as exc:
                error = error or exc
            if self._segment is not None and not self._segment.chunks and self._reservation is not None:
                res, self._reservation = self._reservation, None
                if not self._area.closed and not res.freed:
                    assert self._vm is not None
                    self._vm.address_free(res)
        if error is not None:
            raise error

    def _let_go(self) -> None:
        """What a closed pool still holds: only the slabs of its buffers detached while
        viewed (its ``_orphans``). Any other slab left (its free failed, or a block of it
        was lost) is the area's again: munmap or the area's close() frees it."""
        viewed = self._orphans
        for slab in self._slabs:
            end = slab.ptr + slab.size
            if slab.buf is not None and not any(slab.ptr <= p < end for p in viewed):
                self._area._hold(slab.buf, False)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self._stats()[2]} live"
        return (
            f"<aml Pool over {type(self._area).__name__} {self.backend}:{self.kind.value} {state}, "
            f"{self._reserved} bytes reserved>"
        )
