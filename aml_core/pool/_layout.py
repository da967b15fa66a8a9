"""A pool's data: its value objects (:class:`PoolStats`, :class:`PoolOptions`), what it
carves (slabs: memory held from the area, or an expandable segment; the blocks of a slab,
an address-ordered list, each free or held by one buffer; the heaps that index free
blocks by exact size, see aml_core.pool, "Layout"), and :class:`PoolBase`, which declares
the state every part of a pool shares. Plain data structures: the pool's lock guards
them."""

from __future__ import annotations

import bisect
import threading
from typing import TYPE_CHECKING, Any, TypedDict

import attrs

from .._buffer import PoolCache
from ..area import Area
from ..protocols import AddressRange, GrowableMemory, StreamOrdering

if TYPE_CHECKING:
    from ..buffer import Buffer

__all__ = ["NO_STREAM", "KiB", "MiB", "PoolBase", "PoolOptions", "PoolOptionsDict", "PoolStats"]

KiB = 1 << 10
MiB = 1 << 20


@attrs.frozen
class PoolStats:
    """A snapshot of a pool's counters (see aml_core.pool, "Statistics", for the formulas)."""

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


@attrs.frozen
class PoolOptions:
    """mmap options of a pool: ``stream`` (GPU pools) takes the block in that stream's
    order (any stream object or int handle; see "Streams" in the module doc)."""

    stream: Any = None


class PoolOptionsDict(TypedDict, total=False):
    """:class:`PoolOptions` as a mapping (``pool.mmap(n, {"stream": s})``), typed."""

    #: Any stream object (aml's, cuda.core's, CuPy's, PyTorch's) or an int handle.
    stream: object


#: The options of an mmap without options: frozen, so one instance serves every mmap.
NO_STREAM = PoolOptions()


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


class PoolBase(Area):
    """The state every part of a :class:`~aml_core.pool.Pool` shares, set by its
    ``__init__`` (the parts: blocks and slabs, streams, the expandable segment, sharing
    and copies). Everything here is guarded by ``_plock`` (see aml_core.pool, "Threads")."""

    _area: Area
    _options: Any
    _limit: int | None
    _release_threshold: int | None
    _granule: int
    _mask: int
    _small_max: int
    _small_slab: int
    _medium_slab: int
    #: The state the compiled fast path shares (free stacks, counters) and the lock.
    _cache: PoolCache
    _plock: PoolCache
    _small: _Heap
    _large: _Heap
    _slabs: list[_Slab]
    _reserved: int
    _peak_reserved: int
    _native_allocs: int
    _native_frees: int
    _misses: int
    _closing: bool
    # the expandable segment (_expandable.py)
    _vm: GrowableMemory[Any] | None
    _reservation: AddressRange | None
    _segment: _Slab | None
    # streams (_streams.py)
    _sfast: dict[tuple[int, int], list[_Block]]
    _stream_held: dict[int, int]
    _any_stream: bool
    _tls: threading.local
    _stream_ops: StreamOrdering | None
    _event: int | None

    if TYPE_CHECKING:  # what one part calls of another

        def _take(self, n: int) -> _Block: ...
        def _flush(self) -> None: ...
        def _count_reserved(self, n: int) -> None: ...
        def _reclaim_streams(self) -> None: ...
        def _grow_segment(self, n: int) -> _Block: ...
        def _trim_segment(self, keep: int) -> int: ...
        def slab_of(self, buffer: Any) -> tuple[Any, int]: ...
