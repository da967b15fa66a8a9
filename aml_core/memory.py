"""Memory reports: :func:`memory_summary` (a table for people, like PyTorch's
``torch.cuda.memory_summary()``) and :func:`memory_stats` (a flat dict with stable keys,
like ``torch.cuda.memory_stats()``), for one area or pool, or for every live area and
pool of the process.

Both read only the public statistics: a pool's :attr:`~aml_core.pool.Pool.pool_stats`
and every area's :attr:`~aml_core.area.Area.stats`. The keys are documented in
docs/user-guide.md ("Memory statistics"); :data:`STAT_KEYS` lists them.

Counting every area and pool at once
    A pool's slabs are buffers of the area below it, so that area's statistics count
    them again. Summed over the process, each holder (an area or a pool) counts only
    what it gave to its users itself: its figures less the bytes reserved by the pools
    drawing from it. So ``allocated`` is memory in buffers that users hold, ``cached``
    memory pools keep for reuse, and ``reserved = allocated + cached`` (the whole of what
    this process holds from the backends, over all groups). Each holder's part is
    counted in its own group (backend, kind, device): a pool bound to device 0 over an
    area of "the current device" counts its memory under device 0.

    A peak over several holders is the sum of their peaks: an upper bound of the real
    joint peak (they need not peak together). A holder that a pool draws from adds its
    current own part instead (its users' peak cannot be told apart from the pool's
    slabs). A single area's or pool's peaks are exact.

Per stream
    A pool with blocks on streams (live blocks allocated on a stream, or blocks cached
    on a stream's free list) reports each stream's part too
    (:attr:`~aml_core.pool.Pool.stream_stats`): bytes in use, block bytes and cached
    bytes by stream handle, and "host order" for the rest (blocks allocated without a
    stream, free blocks on no stream's list). Over the process, the pools of a group
    add up by stream handle. A pool with no block on a stream reports no stream.

    Areas and pools are tracked weakly from their creation
    (:data:`aml_core.area.LIVE_AREAS`); a closed one is not reported.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from collections.abc import Iterable

import attrs

from .area import LIVE_AREAS, Area
from .errors import AMLTypeError
from .pool import Pool, PoolStats, StreamStats
from .specs import format_size
from .statistics import figure, figure_of, format_value, record_summary

__all__ = [
    "STAT_KEYS",
    "STREAM_KEYS",
    "TORCH_ALIASES",
    "memory_stats",
    "memory_summary",
    "pool_stats_summary",
]

#: PyTorch's names (``torch.cuda.memory_stats()``) for the figures that mean the same
#: here, added by :func:`memory_stats` as aliases of aml's keys (for one area or pool,
#: and for the process's totals), so code written for PyTorch's statistics reads aml's.
TORCH_ALIASES: dict[str, str] = {
    "allocated_bytes.all.current": "allocated_bytes.current",
    "reserved_bytes.all.current": "reserved_bytes.current",
    "reserved_bytes.all.peak": "reserved_bytes.peak",
    "requested_bytes.all.current": "requested_bytes.current",
    "requested_bytes.all.peak": "requested_bytes.peak",
    "segment.all.current": "segments.current",
    "allocation.all.current": "buffers.current",
    "num_device_alloc": "native_allocations.total",
    "num_device_free": "native_frees.total",
}

#: The keys of each stream's part in :func:`memory_stats`, prefixed with
#: ``stream.<0x handle>.`` (``stream.host.`` for host order), after those of
#: :data:`STAT_KEYS` (docs/user-guide.md, "Memory statistics").
STREAM_KEYS: tuple[str, ...] = (
    "requested_bytes.current",
    "allocated_bytes.current",
    "cached_bytes.current",
    "blocks.current",
    "cached_blocks.current",
)

#: A stream's figures (in the order of :data:`STREAM_KEYS`), by stream name ("host" for
#: host order, else its handle in hexadecimal), host order first.
_Streams = dict[str, tuple[int, ...]]


def _streams(area: Area) -> _Streams:
    """A pool's figures by stream; none when no block of it is on a stream (and for an
    area)."""
    if not isinstance(area, Pool):
        return {}
    by_stream = area.stream_stats
    if all(s.stream is None for s in by_stream):
        return {}
    return {_stream_name(s): _stream_figures(s) for s in by_stream}


def _stream_name(s: StreamStats) -> str:
    return "host" if s.stream is None else f"0x{s.stream:x}"


def _stream_figures(s: StreamStats) -> tuple[int, ...]:
    return (s.bytes_in_use, s.block_bytes, s.bytes_cached, s.live_blocks, s.cached_blocks)


def _add_streams(a: _Streams, b: _Streams) -> _Streams:
    """Two holders' streams added up by stream name (host order first, then by handle)."""
    out = dict(a)
    for name, figures in b.items():
        out[name] = tuple(x + y for x, y in zip(out.get(name, (0,) * len(figures)), figures, strict=True))
    return dict(sorted(out.items(), key=lambda item: (item[0] != "host", len(item[0]), item[0])))


def _total_streams(groups: dict[tuple[str, str, str], _Streams]) -> _Streams:
    """The groups' streams added up by stream name."""
    empty: _Streams = {}
    return functools.reduce(_add_streams, groups.values(), empty)


def _stream_stats(streams: _Streams, prefix: str = "") -> dict[str, int | float]:
    return {
        f"{prefix}stream.{name}.{key}": value
        for name, figures in streams.items()
        for key, value in zip(STREAM_KEYS, figures, strict=True)
    }


def _fragmentation(f: _Figures) -> float:
    """1 - largest free block / cached bytes (0 when nothing is cached), as
    :class:`~aml_core.pool.PoolStats` defines it."""
    return 1.0 - f.largest_free_block / f.cached if f.cached else 0.0


@attrs.frozen
class _Figures:
    """What one holder (an area or a pool), or a sum of them, reports: each figure
    declared once (:func:`aml_core.statistics.figure`), with its key, meaning, row in the
    summary and the record fields it is read from; :data:`STAT_KEYS`, :meth:`as_stats`,
    :func:`_figures` and :func:`_rows` derive from these declarations."""

    requested: int = attrs.field(
        default=0,
        metadata=figure(
            "requested_bytes.current",
            "bytes asked for by live buffers",
            pool="pool_stats.bytes_in_use",
            area="stats.bytes_in_use",
            row="Requested memory",
        ),
    )
    requested_peak: int = attrs.field(
        default=0,
        metadata=figure(
            "requested_bytes.peak",
            "the peak of requested bytes",
            pool="pool_stats.peak_bytes_in_use",
            area="stats.peak_bytes",
            row="Requested memory",
            column="total",
        ),
    )
    allocated: int = attrs.field(
        default=0,
        metadata=figure(
            "allocated_bytes.current",
            "bytes of live blocks (an area: of live mappings)",
            pool="pool_stats.block_bytes",
            area="stats.bytes_in_use",
            row="Allocated memory (blocks)",
        ),
    )
    reserved: int = attrs.field(
        default=0,
        metadata=figure(
            "reserved_bytes.current",
            "bytes held from the area below (an area: of live mappings)",
            pool="pool_stats.bytes_reserved",
            area="stats.bytes_in_use",
            row="Reserved memory",
        ),
    )
    reserved_peak: int = attrs.field(
        default=0,
        metadata=figure(
            "reserved_bytes.peak",
            "the peak of reserved bytes",
            pool="pool_stats.peak_bytes_reserved",
            area="stats.peak_bytes",
            row="Reserved memory",
            column="total",
        ),
    )
    cached: int = attrs.field(
        default=0,
        metadata=figure(
            "cached_bytes.current",
            "reserved bytes in no live block",
            pool="pool_stats.bytes_cached",
            area=0,
            row="Cached memory (free blocks)",
        ),
    )
    largest_free_block: int = attrs.field(
        default=0,
        metadata=figure(
            "largest_free_block_bytes.current",
            "the largest free block (over holders: the largest of any)",
            pool="pool_stats.largest_free_block",
            area=0,
            row="Largest free block",
            add="max",
        ),
    )
    fragmentation: float = attrs.field(
        init=False,
        default=attrs.Factory(_fragmentation, takes_self=True),
        metadata=figure(
            "fragmentation.current",
            "1 - largest free block / cached bytes, 0 when nothing is cached",
            pool=None,
            area=None,
            row="Fragmentation",
            unit="ratio",
        ),
    )
    segments: int = attrs.field(
        default=0,
        metadata=figure(
            "segments.current",
            "slabs (or mapped chunks) held from the area (an area: live mappings)",
            pool="pool_stats.slabs",
            area="stats.live_mappings",
            row="Segments (slabs, mappings)",
            unit="count",
        ),
    )
    buffers: int = attrs.field(
        default=0,
        metadata=figure(
            "buffers.current",
            "live buffers",
            pool="stats.live_mappings",
            area="stats.live_mappings",
            row="Live buffers",
            unit="count",
        ),
    )
    mmaps: int = attrs.field(
        default=0,
        metadata=figure(
            "mmap_calls.total",
            "mmap calls",
            pool="stats.total_maps",
            area="stats.total_maps",
            row="mmap / munmap calls",
            column="total",
            unit="count",
        ),
    )
    munmaps: int = attrs.field(
        default=0,
        metadata=figure(
            "munmap_calls.total",
            "munmap calls and frees",
            pool="stats.total_unmaps",
            area="stats.total_unmaps",
            row="mmap / munmap calls",
            column="total",
            unit="count",
        ),
    )
    native_allocations: int = attrs.field(
        default=0,
        metadata=figure(
            "native_allocations.total",
            "calls to the area for a slab (an area: every mmap)",
            pool="pool_stats.native_allocations",
            area="stats.total_maps",
            row="Native allocations / frees",
            column="total",
            unit="count",
        ),
    )
    native_frees: int = attrs.field(
        default=0,
        metadata=figure(
            "native_frees.total",
            "slabs given back to the area (an area: every munmap)",
            pool="pool_stats.native_frees",
            area="stats.total_unmaps",
            row="Native allocations / frees",
            column="total",
            unit="count",
        ),
    )
    hits: int = attrs.field(
        default=0,
        metadata=figure(
            "pool_hits.total",
            "mmaps served from cached memory",
            pool="pool_stats.pool_hits",
            area=0,
            row="Pool hits / misses",
            column="total",
            unit="count",
        ),
    )
    misses: int = attrs.field(
        default=0,
        metadata=figure(
            "pool_misses.total",
            "mmaps that needed a new slab",
            pool="pool_stats.pool_misses",
            area=0,
            row="Pool hits / misses",
            column="total",
            unit="count",
        ),
    )
    pools: int = attrs.field(
        default=0, metadata=figure("pools.current", "pools", pool=1, area=0, unit="count")
    )
    areas: int = attrs.field(
        default=0, metadata=figure("areas.current", "areas", pool=0, area=1, unit="count")
    )

    def __add__(self, other: _Figures) -> _Figures:
        values: dict[str, int] = {}
        for f in attrs.fields(_Figures):
            if f.init:
                add = max if figure_of(f).add == "max" else operator.add
                values[f.name] = add(getattr(self, f.name), getattr(other, f.name))
        return _Figures(**values)

    def as_stats(self, prefix: str = "") -> dict[str, int | float]:
        return {prefix + figure_of(f).key: getattr(self, f.name) for f in attrs.fields(_Figures)}


#: The keys of :func:`memory_stats` for one area or pool, and of its totals (``all.``)
#: and per-group parts (``<backend>.<kind>.<device>.``) for the whole process; each is
#: ``<figure>.<current|peak|total>`` (docs/user-guide.md, "Memory statistics").
STAT_KEYS: tuple[str, ...] = tuple(figure_of(f).key for f in attrs.fields(_Figures))


def _figures(area: Area) -> _Figures:
    """An area's or pool's own statistics, exact: each figure read where its
    declaration says."""
    records: dict[str, object] = {"stats": area.stats}
    if isinstance(area, Pool):
        records["pool_stats"] = area.pool_stats
    values: dict[str, int] = {}
    for f in attrs.fields(_Figures):
        d = figure_of(f)
        source = d.of_pool if isinstance(area, Pool) else d.of_area
        if isinstance(source, int):
            values[f.name] = source
        elif source is not None:
            record, _, name = source.partition(".")
            values[f.name] = getattr(records[record], name)
    return _Figures(**values)


def _own(f: _Figures, drawn: _Figures | None) -> _Figures:
    """A holder's part of a sum over holders (see the module doc): ``f`` less what the
    pools over it drew from it (``drawn``, the sum of their figures; None when no pool
    draws from it). A pool's segments and native calls are calls into the holder below
    it, counted there: its part keeps none; a holder that a pool draws from adds its own
    current bytes as its peak."""
    pool = bool(f.pools)
    less = drawn or _Figures()
    requested = max(0, f.requested - less.reserved)
    allocated = max(0, f.allocated - less.reserved)
    reserved = allocated + f.cached
    return attrs.evolve(
        f,
        requested=requested,
        requested_peak=f.requested_peak if drawn is None else requested,
        allocated=allocated,
        reserved=reserved,
        reserved_peak=f.reserved_peak if drawn is None else reserved,
        segments=0 if pool else f.segments,
        buffers=max(0, f.buffers - less.segments),
        mmaps=max(0, f.mmaps - less.native_allocations),
        munmaps=max(0, f.munmaps - less.native_frees),
        native_allocations=0 if pool else f.native_allocations,
        native_frees=0 if pool else f.native_frees,
    )


def live_areas() -> list[Area]:
    """The process's open areas and pools, sorted by backend, kind and device (areas
    before pools) for a stable report."""
    for _ in range(10):  # another thread may create an area while the set is copied
        with contextlib.suppress(RuntimeError):
            found = list(LIVE_AREAS)
            break
    else:  # pragma: no cover - ten collisions in a row
        found = []
    return sorted((a for a in found if not a.closed), key=lambda a: (_group(a), isinstance(a, Pool), id(a)))


def _group(area: Area) -> tuple[str, str, str]:
    return (area.backend, area.kind.value, "-" if area.device is None else str(area.device))


def _grouped(areas: Iterable[Area]) -> dict[tuple[str, str, str], _Figures]:
    """Each group's part (see the module doc), in order."""
    figures = {id(area): (area, _figures(area)) for area in areas}
    drawn: dict[int, _Figures] = {}
    for area, f in figures.values():
        if isinstance(area, Pool):
            below = id(area.area)
            drawn[below] = drawn.get(below, _Figures()) + f
    groups: dict[tuple[str, str, str], _Figures] = {}
    for area, f in figures.values():
        key = _group(area)
        groups[key] = groups.get(key, _Figures()) + _own(f, drawn.get(id(area)))
    return groups


def _grouped_streams(areas: Iterable[Area]) -> dict[tuple[str, str, str], _Streams]:
    """Each group's pools' figures by stream (the groups with a stream only)."""
    groups: dict[tuple[str, str, str], _Streams] = {}
    for area in areas:
        streams = _streams(area)
        if streams:
            groups[_group(area)] = _add_streams(groups.get(_group(area), {}), streams)
    return groups


def _check(area_or_pool: Area | None) -> None:
    if area_or_pool is not None and not isinstance(area_or_pool, Area):
        raise AMLTypeError(
            f"memory reports take an aml area or pool (or None for all), not {type(area_or_pool).__name__}"
        )


def memory_stats(area_or_pool: Area | Pool | None = None) -> dict[str, int | float]:
    """A flat dict of memory statistics with stable keys (documented in
    docs/user-guide.md, "Memory statistics"), sizes in bytes.

    For one area or pool: the keys of :data:`STAT_KEYS` (``"allocated_bytes.current"``,
    ``"pool_hits.total"``...). For None, every open area and pool of the process:
    the same keys prefixed with ``"all."`` for the totals and with
    ``"<backend>.<kind>.<device>."`` for each group (``"cuda.device.0."``,
    ``"host.host.-."`` for an area without a device), each holder counting only what it
    gave out itself (see :mod:`aml_core.memory`).

    A pool with blocks on streams adds, after those, the keys of :data:`STREAM_KEYS`
    for each stream, prefixed with ``"stream.<0x handle>."`` (``"stream.0x7f3a10.
    cached_bytes.current"``), and for host order with ``"stream.host."``; over the
    process, each group's and the totals' (``"all.stream.host.blocks.current"``), the
    pools' added up by stream.

    PyTorch's key names (:data:`TORCH_ALIASES`: ``"allocated_bytes.all.current"``,
    ``"reserved_bytes.all.peak"``, ``"num_device_alloc"``...) come last, with the value
    of the aml key each names (for None: the process's totals)."""
    _check(area_or_pool)
    if area_or_pool is not None:
        own = _figures(area_or_pool).as_stats()
        return own | _stream_stats(_streams(area_or_pool)) | _torch_aliases(own)
    areas = live_areas()
    groups = _grouped(areas)
    streams = _grouped_streams(areas)
    total = sum(groups.values(), _Figures())
    totals = total.as_stats()
    out = total.as_stats("all.")
    out.update(_stream_stats(_total_streams(streams), "all."))
    for group, figures in groups.items():
        prefix = ".".join(group) + "."
        out.update(figures.as_stats(prefix))
        out.update(_stream_stats(streams.get(group, {}), prefix))
    out.update(_torch_aliases(totals))
    return out


def _torch_aliases(stats: dict[str, int | float]) -> dict[str, int | float]:
    return {torch_key: stats[key] for torch_key, key in TORCH_ALIASES.items()}


def pool_stats_summary(stats: PoolStats) -> str:
    """A pool's statistics in one line for people, as ``AreaStats`` prints itself:
    ``"3.0 MiB in use (peak 3.0 MiB, 3.0 MiB in blocks), 22.0 MiB reserved (peak 22.0 MiB),
    19.0 MiB cached (largest free block 17.0 MiB, fragmentation 10.4%), 2 slabs,
    2 native allocations / 0 frees, 7 hits / 2 misses"``. Anything but a
    :class:`~aml_core.pool.PoolStats` is :class:`~aml_core.errors.AMLTypeError`."""
    if not isinstance(stats, PoolStats):
        raise AMLTypeError(
            f"pool_stats_summary takes a pool's PoolStats (pool.pool_stats), not {type(stats).__name__}"
        )
    return record_summary(stats)


# -- the table ------------------------------------------------------------------------------
_WIDTH = 75


def _rows(f: _Figures) -> list[tuple[str, str, str]]:
    """(metric, current, peak or total) rows of a table, in the figures' order: the
    figures of one row and column written ``a / b``."""
    cells: dict[str, dict[str, list[str]]] = {}
    for field in attrs.fields(_Figures):
        d = figure_of(field)
        if d.row is not None:
            row = cells.setdefault(d.row, {"current": [], "total": []})
            row[d.column].append(format_value(d.unit, getattr(f, field.name)))
    return [(name, " / ".join(c["current"]), " / ".join(c["total"])) for name, c in cells.items()]


def _table(title: str, f: _Figures, streams: _Streams) -> list[str]:
    rule = "|" + "-" * (_WIDTH - 2) + "|"
    out = [rule, f"| {title:<{_WIDTH - 4}} |", rule]
    out.append(f"| {'Metric':<29} | {'Current':>18} | {'Peak / total':>18} |")
    out.append(rule)
    out.extend(f"| {name:<29} | {cur:>18} | {peak:>18} |" for name, cur, peak in _rows(f))
    if streams:
        out += [rule, f"| {'Stream':<29} | {'In use':>10} | {'Blocks':>10} | {'Cached':>10} |", rule]
        for name, (requested, blocks, cached, *_counts) in streams.items():
            label = "host order" if name == "host" else f"stream {name}"
            size = format_size
            out.append(f"| {label:<29} | {size(requested):>10} | {size(blocks):>10} | {size(cached):>10} |")
    return out


def _memory_of(backend: str, kind: str) -> str:
    """``"cuda device memory"``, ``"cuda host memory"``; the host backend's host memory is
    ``"host memory"`` (it used to read "host host memory")."""
    return f"{kind} memory" if backend == kind else f"{backend} {kind} memory"


def _describe(area: Area) -> str:
    device = "" if area.device is None else f", device {area.device}"
    what = _memory_of(area.backend, area.kind.value)
    if isinstance(area, Pool):
        cap = "" if area.limit is None else f", limit {format_size(area.limit)}"
        return f"Pool over {type(area.area).__name__} ({what}{device}{cap})"
    return f"{type(area).__name__} ({what}{device})"


def memory_summary(area_or_pool: Area | Pool | None = None) -> str:
    """A readable table of memory statistics, like ``torch.cuda.memory_summary()``:
    requested, allocated, reserved and cached memory with their peaks, the largest free
    block and fragmentation, segments and live buffers, mmap/munmap calls, native
    allocations and frees against pool hits and misses. Sizes in binary units
    (:func:`aml_core.specs.format_size`); :func:`memory_stats` gives the exact numbers.

    ``area_or_pool``: one area or pool; None (the default) summarizes every open area
    and pool of the process: a table per backend, kind and device, and the totals when
    there are several (see
    :mod:`aml_core.memory` for how layered pools are counted once). A pool with blocks
    on streams adds a row per stream (``stream 0x...``, and ``host order``): bytes in
    use, block bytes and bytes cached on that stream's free list; over the process,
    each group's pools added up by stream."""
    _check(area_or_pool)
    eq = "|" + "=" * (_WIDTH - 2) + "|"
    out = [eq, f"| {'aml memory summary':^{_WIDTH - 4}} |"]
    if area_or_pool is not None:
        out += _table(_describe(area_or_pool), _figures(area_or_pool), _streams(area_or_pool))
    else:
        areas = live_areas()
        groups = _grouped(areas)
        streams = _grouped_streams(areas)
        for group, figures in groups.items():
            backend, kind, device = group
            where = "" if device == "-" else f", device {device}"
            out += _table(
                f"{_memory_of(backend, kind)}{where}: {figures.pools} pool(s), {figures.areas} area(s)",
                figures,
                streams.get(group, {}),
            )
        total = sum(groups.values(), _Figures())
        if len(groups) != 1:  # with one group, its table is the total
            title = f"All: {total.pools} pool(s), {total.areas} area(s)"
            out += _table(title, total, _total_streams(streams))
    out.append(eq)
    return "\n".join(out) + "\n"
