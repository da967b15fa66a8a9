"""Helpers of the memory report tests (tests/test_memory_report.py and aml-hip's):
a fresh set of live areas, so that a test sees only the areas and pools it makes, and
the checks every report over one pool must pass."""

from __future__ import annotations

import importlib
import re
import weakref

import pytest

import aml_core
import aml_core.memory
from aml_core import Pool
from aml_core.specs import format_size


def fresh_live_areas(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now until the test ends, only the areas made from now on are live."""
    live: weakref.WeakSet[aml_core.Area] = weakref.WeakSet()
    # aml_core.area is also the function area(): the module is taken by name
    monkeypatch.setattr(importlib.import_module("aml_core.area"), "LIVE_AREAS", live)
    monkeypatch.setattr(aml_core.memory, "LIVE_AREAS", live)


def row(summary: str, metric: str) -> list[str]:
    """The cells after ``metric`` in the first table row that starts with it."""
    for line in summary.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == metric:
            return cells[1:]
    raise AssertionError(f"no row {metric!r} in\n{summary}")


def check_pool_report(pool: Pool) -> dict[str, int | float]:
    """memory_stats and memory_summary of ``pool`` say what its pool_stats and stats say."""
    ps, st = pool.pool_stats, pool.stats
    stats = aml_core.memory_stats(pool)
    keys = aml_core.memory.STAT_KEYS
    assert list(stats)[: len(keys)] == list(keys)
    check_stream_report(pool, stats)
    assert stats["requested_bytes.current"] == ps.bytes_in_use == st.bytes_in_use
    assert stats["requested_bytes.peak"] == ps.peak_bytes_in_use
    assert stats["allocated_bytes.current"] == ps.block_bytes
    assert stats["reserved_bytes.current"] == ps.bytes_reserved
    assert stats["reserved_bytes.peak"] == ps.peak_bytes_reserved
    assert stats["cached_bytes.current"] == ps.bytes_cached
    assert stats["largest_free_block_bytes.current"] == ps.largest_free_block
    assert stats["fragmentation.current"] == pytest.approx(ps.fragmentation)
    assert stats["segments.current"] == ps.slabs
    assert stats["buffers.current"] == st.live_mappings
    assert (stats["mmap_calls.total"], stats["munmap_calls.total"]) == (st.total_maps, st.total_unmaps)
    assert (stats["native_allocations.total"], stats["native_frees.total"]) == (
        ps.native_allocations,
        ps.native_frees,
    )
    assert (stats["pool_hits.total"], stats["pool_misses.total"]) == (ps.pool_hits, ps.pool_misses)
    assert (stats["pools.current"], stats["areas.current"]) == (1, 0)
    summary = aml_core.memory_summary(pool)
    assert f"Pool over {type(pool.area).__name__}" in summary
    size = format_size
    assert row(summary, "Requested memory") == [size(ps.bytes_in_use), size(ps.peak_bytes_in_use)]
    assert row(summary, "Reserved memory") == [size(ps.bytes_reserved), size(ps.peak_bytes_reserved)]
    assert row(summary, "Cached memory (free blocks)")[0] == format_size(ps.bytes_cached)
    assert row(summary, "Largest free block")[0] == format_size(ps.largest_free_block)
    assert row(summary, "Pool hits / misses")[1] == f"{ps.pool_hits} / {ps.pool_misses}"
    assert row(summary, "Native allocations / frees")[1] == f"{ps.native_allocations} / {ps.native_frees}"
    assert re.fullmatch(r"\d+\.\d%", row(summary, "Fragmentation")[0])
    return stats


def stream_name(stream: int | None) -> str:
    """The name of a stream in memory_stats' keys."""
    return "host" if stream is None else f"0x{stream:x}"


def check_stream_report(pool: Pool, stats: dict[str, int | float]) -> None:
    """The per-stream keys and rows of ``pool``'s reports say what its stream_stats
    says, which adds up to its pool_stats; none when no block is on a stream."""
    by_stream, ps = pool.stream_stats, pool.pool_stats
    assert sum(s.bytes_in_use for s in by_stream) == ps.bytes_in_use
    assert sum(s.block_bytes for s in by_stream) == ps.block_bytes
    assert sum(s.bytes_cached for s in by_stream) == ps.bytes_cached
    assert by_stream[0].stream is None
    summary = aml_core.memory_summary(pool)
    aliases = aml_core.memory.TORCH_ALIASES
    extra = {k: v for k, v in stats.items() if k not in aml_core.memory.STAT_KEYS and k not in aliases}
    if all(s.stream is None for s in by_stream):
        assert extra == {}
        assert "| Stream " not in summary
        return
    expected: dict[str, int | float] = {}
    for s in by_stream:
        figures = (s.bytes_in_use, s.block_bytes, s.bytes_cached, s.live_blocks, s.cached_blocks)
        for key, value in zip(aml_core.memory.STREAM_KEYS, figures, strict=True):
            expected[f"stream.{stream_name(s.stream)}.{key}"] = value
        label = "host order" if s.stream is None else f"stream 0x{s.stream:x}"
        size = format_size
        assert row(summary, label) == [size(s.bytes_in_use), size(s.block_bytes), size(s.bytes_cached)]
    assert extra == expected
