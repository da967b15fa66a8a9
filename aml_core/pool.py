"""Pools: an :class:`~aml_core.area.Area` that keeps freed memory for reuse.

``aml_core.pool(area)`` returns a :class:`Pool`, itself an area (same ``mmap``,
``munmap``, ``stats``, ``close`` and the same error table as :mod:`aml_core.area`), over
any other area: host NUMA, CUDA, HIP, even another pool. It asks the area for large
*slabs* and hands out *blocks* carved from them, so most ``mmap`` calls make no native
call at all::

    with aml_core.pool(area, limit=8 << 30) as pool:
        buf = pool.mmap(4096)          # a normal aml Buffer at the block's address
        ...
        pool.munmap(buf)               # back to the pool, not to the area
        pool.trim()                    # give cached slabs back to the area

Layout
    Sizes are rounded up to the *granule* (512 bytes; blocks are aligned to it). Requests
    of at most ``small_max`` (1 MiB) come from a small heap whose slabs are
    ``small_slab`` (2 MiB) and are split down to the granule; larger requests come from
    a large heap whose slabs are ``medium_slab`` (20 MiB) for requests under 10 MiB and
    the request rounded up to 2 MiB otherwise. A large block is split only when at least
    ``small_max`` would remain (smaller tails stay with the block: bounded waste, no
    slivers). Each heap indexes its free blocks by exact size (a bin per size: a
    repeated size is a dictionary hit) over a sorted list of the sizes present, searched
    with bisect for the best fit. A freed block first goes on a stack of its exact size
    (the next request of that size pops it: no search, no split); those stacks are
    coalesced into the heaps (deferred coalescing) when a request finds no fit, and
    before trimming or reading the statistics. A block that is coalesced merges with its
    free neighbours in the same slab (blocks of a slab form an address-ordered linked
    list). With ``release_threshold`` set, freed blocks coalesce at once.
    Every block remembers its slab: two blocks of one slab are different buffers, with
    their own addresses, sizes and lifetimes.

Expandable pools
    ``aml_core.pool(vm, expandable=True)`` over a
    :class:`~aml_core.gpu.vmm.VirtualMemory` area (any
    :class:`~aml_core.protocols.GrowableMemory`) reserves one large virtual range
    (``capacity``) and maps physical chunks at its end on demand, as PyTorch's
    expandable segments do with CUDA VMM: the single segment grows in place instead of
    adding slabs, so a freed large block and the new bytes after it merge into one
    block, and :meth:`Pool.trim` unmaps free chunks at the end.

Limit and release
    ``limit`` caps the bytes reserved from the area. A slab that would pass it first
    makes the pool release its cached (wholly free) slabs and retry; if it still does
    not fit, :class:`~aml_core.errors.AMLMemoryError` (ENOMEM). The same trim-and-retry
    happens when the area itself reports ENOMEM. A limit smaller than one granule is
    EINVAL at creation. ``release_threshold`` keeps at most that many cached bytes:
    a slab that becomes wholly free beyond it is returned to the area at once.
    :meth:`Pool.trim` returns cached slabs on demand.

Statistics
    :attr:`Pool.stats` is the area's :class:`~aml_core.specs.AreaStats` (requested
    bytes); :attr:`Pool.pool_stats` is a :class:`PoolStats` with block and reserved
    bytes, their peaks (:meth:`Pool.reset_peak`), native calls versus pool hits, the
    largest free block and ``fragmentation = 1 - largest_free_block / free_bytes``
    (0 when nothing is free): 0 when all cached memory is one block, near 1 when it is
    scattered in small pieces that a large request cannot use.

Errors
    A pool over a closed area is EINVAL at creation, and so is an ``mmap`` after its
    area was closed (close the pool first: the area's close frees the slabs). Freeing a
    buffer the pool did not make is EINVAL as on any area. A failure of the area while
    releasing a slab leaves the slab cached (and counted); :meth:`trim` and
    :meth:`close` raise it, a release triggered by ``release_threshold`` warns
    (ResourceWarning) instead, since the block was already returned.

Streams (GPU pools)
    ``pool.mmap(size, {"stream": s})`` takes a block in ``s``'s order and
    ``pool.munmap_on(buf, s)`` frees it in that order (a plain munmap: on the stream it
    was allocated on): the block may still be used by work queued on ``s``, so it goes
    on ``s``'s own free list
    and is reused at once only by later requests on ``s``. A request on another stream
    ``t`` takes host-free memory first, then a block of its exact size freed on another
    stream after making ``t`` wait for an event recorded on that stream (no host wait);
    before the pool would grow, trim or close, every stream holding freed blocks is
    synchronized and the blocks return to host order. Requests without a stream never
    take a block still held by a stream. This needs an area that orders work on streams
    (:class:`~aml_core.protocols.StreamOrderedArea`: a GPU area whose runtime provides the
    ``STREAMS`` and ``STREAM_ORDERED`` groups; AMLNotSupported otherwise); slabs are still
    allocated with the area's ordinary (synchronous) mmap.

What the area offers
    The pool asks its area for more than mmap and munmap only through the protocols of
    :mod:`aml_core.protocols` (stream ordering, device copies for :meth:`Pool.write` and
    :meth:`Pool.read`, IPC export, growable memory for expandable pools, the device a
    pool binds to), never by testing for GPU types.

Fast path
    The exact-size stacks and the counters the statistics need (hits, requested bytes
    and their peak, live block bytes) live in a compiled
    :class:`~aml_core._buffer.PoolCache`, which the pool installs in its area base
    class (``_set_pool``, an explicit ops table as a GPU area's NativeAllocator). Then
    ``pool.mmap(size)`` without options that finds a block of the rounded size on its
    stack, and ``pool.munmap`` of a block allocated in host order while the pool keeps
    stacks, run in C from end to end with no Python frame (a pair costs about a
    quarter of the Python path's: ``benchmarks/area_overhead.py``). Everything else (a
    miss, options, streams and ``munmap_on``, ``release_threshold``, a closed pool or
    area, a held lock) runs the Python code below, unchanged. :class:`PoolStats` reads
    the same counters either way.

Threads
    One re-entrant lock (``_plock``, the PoolCache: ``with pool._plock``) guards the
    heaps, slabs, stacks and counters; the area is called with it held (areas are
    thread-safe and never call back into the pool). The rule of the fast path: a fast
    operation runs only while no thread holds the lock, entirely under the GIL without
    releasing it or running Python code, so it is atomic with respect to other fast
    operations and to any locked section, exactly as if it held the lock. (The cache
    counts the lock's holder after acquiring and uncounts before releasing, so locked
    Python code never interleaves with a fast operation.) The buffer bookkeeping is the
    area base class's, with its own rules. So every public method may be called from
    any thread. Re-entrant, because code a finalizer runs may use the pool from a
    thread that is inside it already (a CuPy hook's munmap, run by the garbage collector
    at an allocation under the lock). A pooled buffer that is itself dropped is freed by
    its finalizer through munmap's path (see aml_core.area, "Garbage collection"): in C
    when nobody holds the lock, else it waits until the lock's last holder leaves, and
    so does one whose free would release a slab while someone is inside the area below.
    The fast path changes its state only after every read and check, and before it makes
    the buffer (an allocation that may run a finalizer that frees another block in C).
    What of this rests on the GIL, and what it needs without it: docs/reliability.md,
    "Threads and the GIL".

Garbage collection
    A pooled buffer dropped without munmap goes back to the pool when collected, as
    munmap would take it: onto its size's stack (compiled), a stream-ordered block onto
    its stream's free list, with ``release_threshold`` or after close its slab to the
    area. A pool dropped unclosed goes with its buffers, and its slabs (Buffers of the
    area) are freed by the area in turn.
"""

from __future__ import annotations

import bisect
import threading
import warnings
from typing import Any

import attrs

from . import checks
from ._buffer import PoolCache, address_of
from .area import Area
from .buffer import Buffer, native_as
from .errors import AMLError, AMLMemoryError, AMLNotSupported, AMLTypeError, AMLValueError
from .ipc import IpcExport
from .protocols import (
    AddressRange,
    DeviceCopies,
    GrowableMemory,
    IpcExporter,
    PoolBinding,
    StreamOrderedArea,
    StreamOrdering,
)
from .specs import Capability

__all__ = ["Pool", "PoolOptions", "PoolStats", "pool"]

KiB = 1 << 10
MiB = 1 << 20

#: Capabilities a pooled buffer does not have even if its area's buffers do: a block is
#: not a VMM mapping or a file mapping of its own (IPC: see Pool.ipc_export).
_NOT_POOLED = Capability.VIRTUAL_MEMORY | Capability.FILE_BACKED


@attrs.frozen
class PoolStats:
    """A snapshot of a pool's counters (see the module doc for the formulas)."""

    #: Bytes asked for by live buffers, and their peak since creation or reset_peak().
    bytes_in_use: int
    peak_bytes_in_use: int
    #: Bytes of live blocks (requests rounded up to the granule, unsplit tails included).
    block_bytes: int
    #: Bytes held from the area (slabs, or mapped bytes of an expandable pool), and peak.
    bytes_reserved: int
    peak_bytes_reserved: int
    #: Reserved bytes not in a live block (cached for reuse).
    bytes_cached: int
    #: Slabs (or mapped chunks of an expandable pool) held from the area.
    slabs: int
    #: Native calls to the area: slabs (or chunks) allocated and returned.
    native_allocations: int
    native_frees: int
    #: mmap calls served from cached memory, and those that needed a new slab.
    pool_hits: int
    pool_misses: int
    #: The largest free block, and 1 - largest_free_block / bytes_cached (0 if none).
    largest_free_block: int
    fragmentation: float


class _Slab:
    """Memory held from the area: a slab Buffer, or an expandable segment."""

    __slots__ = (
        "buf",
        "chunks",
        "cinfo",
        "device",
        "device_ptr",
        "dl_device",
        "first",
        "heap",
        "host_accessible",
        "last",
        "ptr",
        "readonly",
        "size",
    )

    def __init__(
        self,
        heap: _Heap,
        buf: Buffer | None,
        ptr: int,
        size: int,
        *,
        device_ptr: int,
        host_accessible: bool,
        readonly: bool,
        dl_device: tuple[int, int],
        device: int | None,
    ) -> None:
        self.heap = heap
        self.buf = buf
        self.ptr = ptr
        self.size = size
        self.device_ptr = device_ptr
        self.host_accessible = host_accessible
        self.readonly = readonly
        self.dl_device = dl_device
        self.device = device
        #: What the compiled fast path makes a block's buffer from: (ptr, device_ptr,
        #: flags (1: host-accessible, 2: read-only), DLPack device type and id, device).
        self.cinfo = (ptr, device_ptr, int(host_accessible) | 2 * int(readonly), *dl_device, device)
        #: Expandable segments: the mapped chunks (ptr, size), in address order.
        self.chunks: list[tuple[int, int]] = []
        self.first: _Block | None = None
        self.last: _Block | None = None

    def whole_free(self) -> bool:
        first = self.first
        return first is not None and first.free and first.next is None


class _Block:
    """A piece of a slab: free (in its heap's index) or held by one live buffer."""

    __slots__ = ("addr", "free", "next", "prev", "size", "slab", "stream")

    def __init__(self, slab: _Slab, addr: int, size: int, prev: _Block | None, next: _Block | None) -> None:
        self.slab = slab
        self.addr = addr
        self.size = size
        self.prev = prev
        self.next = next
        self.free = True
        #: The stream the block was last allocated or freed on (None: host order).
        self.stream: int | None = None

    def __repr__(self) -> str:
        state = "free" if self.free else "used"
        return f"<pool block 0x{self.addr:x}+{self.size} {state} of slab 0x{self.slab.ptr:x}>"


class _Heap:
    """Free blocks of one size class, indexed by exact size over a sorted size list."""

    __slots__ = ("bins", "free_bytes", "sizes", "split_min")

    def __init__(self, split_min: int) -> None:
        #: size -> {address: block}, insertion-ordered (popitem takes the newest).
        self.bins: dict[int, dict[int, _Block]] = {}
        #: The sizes that have a non-empty bin, ascending.
        self.sizes: list[int] = []
        self.free_bytes = 0
        #: Split a block only if at least this much would remain.
        self.split_min = split_min

    def insert(self, block: _Block) -> None:
        size = block.size
        found = self.bins.get(size)
        if found is None:
            self.bins[size] = {block.addr: block}
            bisect.insort(self.sizes, size)
        else:
            found[block.addr] = block
        self.free_bytes += size

    def remove(self, block: _Block) -> None:
        size = block.size
        found = self.bins[size]
        del found[block.addr]
        if not found:
            del self.bins[size]
            sizes = self.sizes
            del sizes[bisect.bisect_left(sizes, size)]
        self.free_bytes -= size

    def best_fit(self, size: int) -> _Block | None:
        """The newest free block of the smallest size >= ``size`` (not removed)."""
        found = self.bins.get(size)
        if found is None:
            sizes = self.sizes
            i = bisect.bisect_left(sizes, size)
            if i == len(sizes):
                return None
            found = self.bins[sizes[i]]
        return next(reversed(found.values()))

    def largest(self) -> int:
        return self.sizes[-1] if self.sizes else 0


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


@attrs.frozen
class PoolOptions:
    """mmap options of a pool: ``stream`` (GPU pools) takes the block in that stream's
    order (any stream object or int handle; see "Streams" in the module doc)."""

    stream: Any = None


_NO_STREAM = PoolOptions()


class Pool(Area):
    """An area that caches the memory of another area (see the module doc).
    Make one with :func:`pool`."""

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

    @property
    def expandable(self) -> bool:
        return self._segment is not None

    def _init_expandable(self, area: Area, capacity: int | None) -> None:
        if not isinstance(area, GrowableMemory):
            raise AMLNotSupported(
                f"an expandable pool maps physical memory on demand: it needs a VirtualMemory "
                f"area, not {type(area).__name__}"
            )
        g = area.granularity()
        if capacity is None:
            capacity = self._limit if self._limit is not None else 1 << 40
        cap = _round_up(checks.size(capacity, "capacity"), g)
        self._vm = area
        self._reservation = area.reserve(cap)
        seg = _Slab(
            self._large,
            None,
            self._reservation.ptr,
            0,
            device_ptr=self._reservation.ptr,
            host_accessible=False,
            readonly=False,
            dl_device=area.dlpack_device(),
            device=area.device,
        )
        self._segment = seg
        # One heap: every size comes from the one segment, split down to the granule.
        self._small = self._large = _Heap(self._granule)
        seg.heap = self._large
        self._small_slab = self._medium_slab = _round_up(2 * MiB, g)

    # -- Area -----------------------------------------------------------------------------
    # Streams go through the options (``mmap(n, {"stream": s})``) and munmap_on, not
    # keywords of overriding mmap/munmap: those would add a Python frame to every call.
    def munmap_on(self, buffer: Buffer | int, stream: Any, size: int | None = None) -> None:
        """Free a buffer in ``stream``'s order (GPU pools): its block is reused at once
        by requests on ``stream``, elsewhere after an event (see the module doc). A plain
        munmap frees a buffer on the stream it was allocated on, if any."""
        handle = self._stream_handle(stream)
        # Inside the area: a GC-driven free run meanwhile must not take this stream.
        with self._inside_area:
            self._tls.stream = handle
            try:
                self._munmap_slow(buffer, size)  # the compiled path knows no stream
            finally:
                self._tls.stream = None

    def _coerce_options(self, options: Any) -> Any:
        if options is None:
            return _NO_STREAM  # frozen: one instance serves every mmap
        return super()._coerce_options(options)

    def _streams(self) -> StreamOrdering:
        """The area's stream operations (set by the first stream used: _stream_handle)."""
        assert self._stream_ops is not None
        return self._stream_ops

    def _stream_handle(self, stream: Any) -> int:
        from .gpu.stream import as_stream_handle

        handle = as_stream_handle(stream)
        if self._stream_ops is None:
            area = self._area
            if not isinstance(area, StreamOrderedArea):
                raise AMLNotSupported(
                    f"streams need a GPU area; the pooled {type(area).__name__} has no runtime "
                    "that orders work on streams"
                )
            self._stream_ops = area.stream_ordering()
        self._any_stream = True
        return handle

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
        return self._area._cuda_array_interface(buffer)

    def _dlpack_prepare(self, buffer: Buffer, stream: Any) -> None:
        self._area._dlpack_prepare(buffer, stream)

    # -- streams --------------------------------------------------------------------------
    def _take_on_stream(self, n: int, stream: int) -> _Block:
        """A block for ``stream`` (under _plock): host-free memory first; then a block of
        this size freed on another stream, which ``stream`` waits for through an event;
        then, before growing, every stream holding blocks is synchronized and its blocks
        coalesced (:meth:`_reclaim_streams`)."""
        heap = self._small if n <= self._small_max else self._large
        stack: list[_Block] | None = self._cache.fast.get(n)
        if stack:
            self._cache.hits += 1
            self._cache.blocks += n
            return stack.pop()
        if heap.best_fit(n) is not None:
            return self._take(n)
        for (other, size), stack in self._sfast.items():
            if size == n and stack:
                blk = stack.pop()
                self._stream_held[other] -= 1
                ops = self._streams()
                if self._event is None:
                    self._event = ops.event_create()
                # The wait captures the event's state now: one event serves every hand-over.
                ops.event_record(self._event, other)
                ops.stream_wait_event(stream, self._event)
                self._cache.hits += 1
                self._cache.blocks += n
                return blk
        self._reclaim_streams()
        return self._take(n)

    def _reclaim_streams(self) -> None:
        """Wait for every stream that holds freed blocks, then return them to the host
        order (fast stacks), where they can be coalesced and reused anywhere."""
        if not any(self._stream_held.values()):
            return
        streams = self._streams()
        for stream, held in list(self._stream_held.items()):
            if held:
                streams.stream_synchronize(stream)
        sfast, self._sfast = self._sfast, {}
        self._stream_held = {}
        fast = self._cache.fast
        for (_stream, size), stack in sfast.items():
            for blk in stack:
                blk.stream = None
            fast.setdefault(size, []).extend(stack)

    # -- blocks ---------------------------------------------------------------------------
    def _take(self, n: int) -> _Block:
        """A live block of at least ``n`` bytes (under _plock)."""
        heap = self._small if n <= self._small_max else self._large
        blk = heap.best_fit(n)
        if blk is None and self._cache.fast:
            self._flush()
            blk = heap.best_fit(n)
        if blk is None and self._sfast:
            self._reclaim_streams()
            self._flush()
            blk = heap.best_fit(n)
        if blk is None:
            blk = self._grow(heap, n)
            self._misses += 1
        else:
            self._cache.hits += 1
        heap.remove(blk)
        rest = blk.size - n
        if rest >= heap.split_min:
            slab = blk.slab
            tail = _Block(slab, blk.addr + n, rest, blk, blk.next)
            if blk.next is None:
                slab.last = tail
            else:
                blk.next.prev = tail
            blk.next = tail
            blk.size = n
            heap.insert(tail)
        blk.free = False
        self._cache.blocks += blk.size
        return blk

    def _give(self, blk: _Block) -> None:
        """Return a live block to its heap now (under _plock)."""
        self._cache.blocks -= blk.size
        slab = self._coalesce(blk)
        if self.closed:
            if not self._closing:  # a buffer close() detached while viewed: its slab goes now
                self._auto_release(slab, 0)
        elif self._release_threshold is not None:
            self._auto_release(slab, self._release_threshold)

    def _coalesce(self, blk: _Block) -> _Slab:
        """Mark a block free, merge it with its free neighbours and index the result."""
        if blk.free:  # pragma: no cover - the base class never frees a buffer twice
            raise AMLValueError(f"{blk!r} is already free")
        slab = blk.slab
        heap = slab.heap
        blk.free = True
        prev = blk.prev
        if prev is not None and prev.free:
            heap.remove(prev)
            prev.size += blk.size
            prev.next = blk.next
            if blk.next is None:
                slab.last = prev
            else:
                blk.next.prev = prev
            blk = prev
        nxt = blk.next
        if nxt is not None and nxt.free:
            heap.remove(nxt)
            blk.size += nxt.size
            blk.next = nxt.next
            if nxt.next is None:
                slab.last = blk
            else:
                nxt.next.prev = blk
        heap.insert(blk)
        return slab

    def _flush(self) -> None:
        """Coalesce the blocks kept on the exact-size stacks into the heaps (deferred
        coalescing: done when a request finds no fit, and before trimming or stats)."""
        fast = self._cache.fast
        self._cache.fast = {}
        for stack in fast.values():
            for blk in stack:
                self._coalesce(blk)

    def _auto_release(self, slab: _Slab, keep: int) -> None:
        """Release what close() or release_threshold asks for once ``slab`` is wholly
        free; a failure leaves the slab cached and warns (the block was returned already:
        nothing may raise here)."""
        try:
            if self._segment is not None:
                self._trim_segment(keep)
            elif slab.whole_free() and self._reserved - self._cache.blocks > keep:
                self._release_slab(slab)
        except AMLError as exc:
            warnings.warn(f"the pool could not return cached memory: {exc}", ResourceWarning, stacklevel=3)

    # -- slabs ----------------------------------------------------------------------------
    def _slab_size(self, heap: _Heap, n: int) -> int:
        if heap is self._small and n <= self._small_max:
            return max(self._small_slab, n)
        if n < 10 * MiB:
            return max(self._medium_slab, _round_up(n, 2 * MiB))
        return _round_up(n, 2 * MiB)

    def _grow(self, heap: _Heap, n: int) -> _Block:
        """New memory from the area holding a free block of at least ``n`` bytes, indexed
        in ``heap`` (under _plock). Past the limit or on ENOMEM: trim, retry, then ENOMEM."""
        if self._segment is not None:
            return self._grow_segment(n)
        want = self._slab_size(heap, n)
        if self._limit is not None:
            if self._reserved + want > self._limit:
                self._trim_locked(0)
            if self._reserved + want > self._limit:
                want = n  # a slab of just the request may still fit
            if self._reserved + want > self._limit:
                raise AMLMemoryError(
                    f"the pool's limit of {self._limit} bytes is reached: {self._reserved} reserved "
                    f"({self._cache.blocks} in live blocks), {n} more asked"
                )
        if want > checks.MAX_SIZE:
            raise AMLMemoryError(f"{n} bytes rounded up to the pool's granule is more than can be mapped")
        try:
            buf = self._area.mmap(want, self._options)
        except AMLMemoryError:
            if not self._trim_locked(0):
                raise
            buf = self._area.mmap(want, self._options)
        slab = _Slab(
            heap,
            buf,
            buf.ptr,
            want,
            device_ptr=buf.device_ptr,
            host_accessible=buf.host_accessible,
            readonly=buf.readonly,
            dl_device=buf.__dlpack_device__(),
            device=buf.device,
        )
        blk = _Block(slab, buf.ptr, want, None, None)
        slab.first = slab.last = blk
        self._slabs.append(slab)
        self._count_reserved(want)
        heap.insert(blk)
        return blk

    def _count_reserved(self, n: int) -> None:
        self._native_allocs += 1
        self._reserved += n
        if self._reserved > self._peak_reserved:
            self._peak_reserved = self._reserved

    def _release_slab(self, slab: _Slab) -> None:
        """Give a wholly free slab back to the area (under _plock); on failure it stays."""
        blk = slab.first
        assert blk is not None
        assert blk.free
        assert blk.next is None
        assert slab.buf is not None
        if not self._area.closed:  # a closed area freed its slabs already
            self._area.munmap(slab.buf)
        slab.heap.remove(blk)
        self._slabs.remove(slab)
        self._reserved -= slab.size
        self._native_frees += 1

    def _trim_locked(self, keep: int) -> int:
        """Release cached memory until at most ``keep`` bytes are cached; returns the
        bytes released. Raises the first failure after trying every slab."""
        if self._sfast:
            self._reclaim_streams()
        if self._cache.fast:
            self._flush()
        if self._segment is not None:
            return self._trim_segment(keep)
        released = 0
        error: AMLError | None = None
        # Largest slabs first: fewest native calls for the bytes.
        for slab in sorted((s for s in self._slabs if s.whole_free()), key=lambda s: -s.size):
            if self._reserved - self._cache.blocks <= keep:
                break
            try:
                self._release_slab(slab)
            except AMLError as exc:
                error = error or exc
                continue
            released += slab.size
        if error is not None:
            raise error
        return released

    # -- expandable segment -------------------------------------------------------------------
    def _grow_segment(self, n: int) -> _Block:
        """Map chunks at the end of the segment until its free tail holds ``n`` bytes."""
        seg = self._segment
        vm = self._vm
        res = self._reservation
        assert seg is not None
        assert vm is not None
        assert res is not None
        tail = seg.last if seg.last is not None and seg.last.free else None
        have = tail.size if tail is not None else 0
        g = vm.granularity()
        need = _round_up(n - have, g)
        chunk = max(need, self._small_slab)
        if self._limit is not None:
            if self._reserved + chunk > self._limit:
                chunk = need
            if self._reserved + chunk > self._limit:
                self._trim_segment(0)
                tail = seg.last if seg.last is not None and seg.last.free else None
                have = tail.size if tail is not None else 0
                chunk = _round_up(n - have, g)
            if self._reserved + chunk > self._limit:
                raise AMLMemoryError(
                    f"the pool's limit of {self._limit} bytes is reached: {self._reserved} mapped "
                    f"({self._cache.blocks} in live blocks), {n} more asked"
                )
        end = seg.ptr + seg.size
        if end + chunk > res.ptr + res.size:
            raise AMLMemoryError(
                f"the expandable pool's reservation of {res.size} bytes is full "
                f"({seg.size} mapped, {chunk} more needed); make the pool with a larger capacity"
            )
        vm.commit(end, chunk)
        seg.size += chunk
        seg.chunks.append((end, chunk))
        self._count_reserved(chunk)
        if tail is not None:
            seg.heap.remove(tail)
            tail.size += chunk
        else:
            tail = _Block(seg, end, chunk, seg.last, None)
            if seg.last is None:
                seg.first = tail
            else:
                seg.last.next = tail
            seg.last = tail
        seg.heap.insert(tail)
        return tail

    def _trim_segment(self, keep: int) -> int:
        """Unmap chunks at the segment's end that lie wholly in its free tail."""
        seg = self._segment
        vm = self._vm
        assert seg is not None
        assert vm is not None
        released = 0
        while seg.chunks and self._reserved - self._cache.blocks > keep:
            tail = seg.last
            ptr, size = seg.chunks[-1]
            if tail is None or not tail.free or tail.addr > ptr:
                break
            if not self._area.closed:
                vm.unmap(ptr, size)
            seg.chunks.pop()
            seg.heap.remove(tail)
            tail.size -= size
            if tail.size:
                seg.heap.insert(tail)
            else:
                seg.last = tail.prev
                if tail.prev is None:
                    seg.first = None
                else:
                    tail.prev.next = None
            seg.size -= size
            self._reserved -= size
            self._native_frees += 1
            released += size
        return released

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
        pool, whose segment is no buffer) and the buffer's offset in it."""
        with self._lock:
            self._check_open()
            buf = self._lookup(buffer, None)
        blk = native_as(buf, _Block)
        return blk.slab.buf, blk.addr - blk.slab.ptr

    def ipc_export(self, buffer: Buffer | int) -> IpcExport:
        """Share a pooled device buffer with another process: its slab's IPC handle with
        the block's offset and size (``aml_core.ipc_open`` maps the slab once per process
        and returns a buffer at the block's address)."""
        area = self._area
        if not isinstance(area, IpcExporter) or self._segment is not None:
            raise AMLNotSupported(
                f"this pool's memory cannot be shared by IPC handle ({type(self._area).__name__}"
                f"{', expandable' if self._segment is not None else ''})"
            )
        with self._lock:
            self._check_open()
            buf = self._lookup(buffer, None)
        slab, offset = self.slab_of(buf)
        assert slab is not None
        handle = area.ipc_export(slab).handle
        return IpcExport(buf, attrs.evolve(handle, size=buf.size, offset=offset))

    def write(self, buffer: Buffer, data: bytes | bytearray | memoryview, offset: int = 0) -> None:
        """Copy host bytes into a pooled buffer: through the area's ``write`` (an area with
        DeviceCopies, as GPU areas) or, in an expandable pool, the area's copy."""
        copies, slab, base = self._slab_io(buffer)
        n = memoryview(data).nbytes
        if offset < 0 or offset + n > buffer.size:
            raise AMLValueError(f"{n} bytes at offset {offset} do not fit in {buffer.size}")
        if copies is not None:
            assert slab is not None
            copies.write(slab, data, base + offset)
        elif n:
            assert self._vm is not None
            src, _, _ = address_of(data)
            self._vm.copy(buffer.device_ptr + offset, src, n)

    def read(self, buffer: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        """Copy bytes out of a pooled buffer (see :meth:`write`)."""
        copies, slab, base = self._slab_io(buffer)
        n = buffer.size - offset if size is None else size
        if offset < 0 or n < 0 or offset + n > buffer.size:
            raise AMLValueError(f"{n} bytes at offset {offset} are not inside {buffer.size}")
        if copies is not None:
            assert slab is not None
            return copies.read(slab, n, base + offset)
        out = bytearray(n)
        if n:
            assert self._vm is not None
            dst, _, _ = address_of(out)
            self._vm.copy(dst, buffer.device_ptr + offset, n)
        return bytes(out)

    def _slab_io(self, buffer: Buffer) -> tuple[DeviceCopies | None, Buffer | None, int]:
        """The area's copies (None in an expandable pool, which copies through its
        GrowableMemory), the buffer's slab and its offset there."""
        area = self._area
        if self._segment is not None:
            copies = None
        elif isinstance(area, DeviceCopies):
            copies = area
        else:
            raise AMLNotSupported(f"the pooled {type(area).__name__} has no write() or read()")
        return (copies, *self.slab_of(buffer))

    def close(self) -> None:
        """Free every live buffer, then return every slab to the area (which stays
        open). Buffers still viewed are freed when their last view is gone, and their
        slabs with them. Idempotent; a second close retries destroying the pool's stream
        event if the first could not (the slabs a failed free kept are the area's to free)."""
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

    def _destroy_event(self) -> None:
        """Destroy the stream hand-over event, if any (under _plock); a failed destroy
        keeps it, for close() to retry."""
        if self._event is not None:
            self._streams().event_destroy(self._event)
            self._event = None

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self._stats()[2]} live"
        return (
            f"<aml Pool over {type(self._area).__name__} {self.backend}:{self.kind.value} {state}, "
            f"{self._reserved} bytes reserved>"
        )


def pool(
    area: Area,
    *,
    limit: int | None = None,
    release_threshold: int | None = None,
    expandable: bool = False,
    capacity: int | None = None,
    options: Any = None,
    granule: int = 512,
    small_max: int = 1 * MiB,
    small_slab: int = 2 * MiB,
    medium_slab: int = 20 * MiB,
) -> Pool:
    """A pool over ``area`` (see :mod:`aml_core.pool`): an area that keeps freed blocks.

    ``limit``: most bytes held from the area (ENOMEM past it, after releasing the cache);
    ``release_threshold``: most cached bytes kept; ``expandable``: one growing segment
    over a VirtualMemory area, reserving ``capacity`` bytes of addresses (default: the
    limit, or 1 TiB); ``options``: the area's mmap options for every slab; ``granule``,
    ``small_max``, ``small_slab``, ``medium_slab``: the layout.
    """
    return Pool(
        area,
        limit=limit,
        release_threshold=release_threshold,
        expandable=expandable,
        capacity=capacity,
        options=options,
        granule=granule,
        small_max=small_max,
        small_slab=small_slab,
        medium_slab=medium_slab,
    )
