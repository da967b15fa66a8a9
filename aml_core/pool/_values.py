"""A pool's value objects: its statistics (:class:`PoolStats`) and mmap options
(:class:`PoolOptions`, :class:`PoolOptionsDict`). The blocks and slabs themselves live in
the allocator kernel (aml_core/_kernel.pyx)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import attrs

from ..statistics import counters_of, stat

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
    """A snapshot of a pool's counters (see aml_core.pool, "Statistics", for the formulas).
    Each field is declared once: its meaning, its words in the summary and the kernel's
    ``Counters`` field it is read from (:mod:`aml_core.statistics`)."""

    bytes_in_use: int = attrs.field(
        metadata=stat("bytes asked for by live buffers", "{} in use", counter="requested")
    )
    peak_bytes_in_use: int = attrs.field(
        metadata=stat(
            "the peak of bytes_in_use since creation or reset_peak()",
            "peak {}",
            part="aside",
            counter="peak_requested",
        )
    )
    block_bytes: int = attrs.field(
        metadata=stat(
            "bytes of live blocks (requests rounded up to the granule, unsplit tails included)",
            "{} in blocks",
            part="aside",
            counter="blocks",
        )
    )
    bytes_reserved: int = attrs.field(
        metadata=stat(
            "bytes held from the area (slabs, or mapped bytes of an expandable pool)",
            "{} reserved",
            counter="reserved",
        )
    )
    peak_bytes_reserved: int = attrs.field(
        metadata=stat(
            "the peak of bytes_reserved since creation or reset_peak()",
            "peak {}",
            part="aside",
            counter="peak_reserved",
        )
    )
    bytes_cached: int = attrs.field(
        metadata=stat("reserved bytes not in a live block (cached for reuse)", "{} cached", derived=True)
    )
    largest_free_block: int = attrs.field(
        metadata=stat("the largest free block", "largest free block {}", part="aside", counter="largest_free")
    )
    fragmentation: float = attrs.field(
        metadata=stat(
            "1 - largest_free_block / bytes_cached (0 when nothing is cached)",
            "fragmentation {}",
            unit="ratio",
            part="aside",
            derived=True,
        )
    )
    slabs: int = attrs.field(
        metadata=stat(
            "slabs (or mapped chunks of an expandable pool) held from the area",
            "{} slabs",
            unit="count",
            counter="slabs",
        )
    )
    native_allocations: int = attrs.field(
        metadata=stat(
            "native calls to the area for a slab (or chunk)",
            "{} native allocations",
            unit="count",
            counter="native_allocs",
        )
    )
    native_frees: int = attrs.field(
        metadata=stat(
            "slabs (or chunks) given back to the area",
            "{} frees",
            unit="count",
            part="pair",
            counter="native_frees",
        )
    )
    pool_hits: int = attrs.field(
        metadata=stat("mmap calls served from cached memory", "{} hits", unit="count", counter="hits")
    )
    pool_misses: int = attrs.field(
        metadata=stat(
            "mmap calls that needed a new slab", "{} misses", unit="count", part="pair", counter="misses"
        )
    )

    def __str__(self) -> str:
        from ..memory import pool_stats_summary  # here: aml_core.memory imports aml_core.pool

        return pool_stats_summary(self)


def pool_stats_of(counters: Mapping[str, int]) -> PoolStats:
    """The :class:`PoolStats` of the kernel's counters (``PoolKernel.stats()``: its
    ``Counters`` struct by field name), and the two figures derived from them."""
    fields: dict[str, Any] = {name: counters[c] for name, c in counters_of(PoolStats).items()}
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
