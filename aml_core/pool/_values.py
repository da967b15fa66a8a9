"""A pool's value objects: its statistics (:class:`PoolStats`) and mmap options
(:class:`PoolOptions`, :class:`PoolOptionsDict`). The blocks and slabs themselves live in
the allocator kernel (aml_core/_kernel.pyx)."""

from __future__ import annotations

from typing import Any, TypedDict

import attrs

__all__ = [
    "NO_STREAM",
    "KiB",
    "MiB",
    "PoolOptions",
    "PoolOptionsDict",
    "PoolStats",
    "StreamStats",
    "pool_stats_of",
    "stream_stats_of",
]

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

    def __str__(self) -> str:
        from ..memory import pool_stats_summary  # here: aml_core.memory imports aml_core.pool

        return pool_stats_summary(self)


#: Each PoolStats field read from the kernel's ``Counters`` struct (_kernel.pxd), by name.
_FROM_COUNTERS = {
    "bytes_in_use": "requested",
    "peak_bytes_in_use": "peak_requested",
    "block_bytes": "blocks",
    "bytes_reserved": "reserved",
    "peak_bytes_reserved": "peak_reserved",
    "slabs": "slabs",
    "native_allocations": "native_allocs",
    "native_frees": "native_frees",
    "pool_hits": "hits",
    "pool_misses": "misses",
    "largest_free_block": "largest_free",
}


def pool_stats_of(counters: dict[str, int]) -> PoolStats:
    """The :class:`PoolStats` of the kernel's counters (``PoolKernel.stats()``: its
    ``Counters`` struct by field name), and the two figures derived from them."""
    fields: dict[str, Any] = {name: counters[c] for name, c in _FROM_COUNTERS.items()}
    cached = counters["reserved"] - counters["blocks"]
    fields["bytes_cached"] = cached
    fields["fragmentation"] = 1.0 - counters["largest_free"] / cached if cached else 0.0
    return PoolStats(**fields)


@attrs.frozen
class StreamStats:
    """A pool's memory on one stream (:attr:`~aml_core.pool.Pool.stream_stats`): its live
    blocks (allocated on that stream) and the blocks cached on its free list (freed on
    it, waiting for reuse on it or a hand-over). ``stream`` None is host order: blocks
    allocated without a stream, and every other cached block (the pool's heaps)."""

    #: The stream's handle (an int), None for host order.
    stream: int | None
    #: Bytes asked for by the live blocks allocated on it.
    bytes_in_use: int
    #: Bytes of those blocks (requests rounded up to the granule).
    block_bytes: int
    #: Bytes of the free blocks on its free list (host order: every other free byte).
    bytes_cached: int
    #: Live blocks, and cached blocks.
    live_blocks: int
    cached_blocks: int


def stream_stats_of(by_stream: dict[int | None, tuple[int, int, int, int, int]]) -> tuple[StreamStats, ...]:
    """The :class:`StreamStats` of the kernel's ``stream_stats()``: host order first,
    then the streams by handle."""
    order = sorted(by_stream, key=lambda s: -1 if s is None else s)
    return tuple(StreamStats(s, *by_stream[s]) for s in order)


@attrs.frozen
class PoolOptions:
    """Deprecated (removed in the next minor version): a pool's mmap takes no option;
    ``stream`` is mmap's argument (``pool.mmap(n, stream=s)``)."""

    stream: object = None


class PoolOptionsDict(TypedDict, total=False):
    """Deprecated: :class:`PoolOptions` as a mapping (``{"stream": s}``)."""

    stream: object


#: The options of an mmap without options: frozen, so one instance serves every mmap.
NO_STREAM = PoolOptions()
