"""One definition of each statistic (aml_core.statistics): the records (AreaStats,
PoolStats), the kernel's Counters struct and the reports' figures (memory_stats,
memory_summary) agree, and a field added in one place only is caught."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

import aml_core
import aml_core.memory
from aml_core.memory import STAT_KEYS, pool_stats_summary
from aml_core.pool import PoolStats
from aml_core.specs import AreaStats
from aml_core.statistics import counters_of, figure_of, format_value, record_summary, stat, stat_of

from .support.memory_reports import fresh_live_areas, row

_FIGURES = aml_core.memory._Figures


@pytest.fixture(autouse=True)
def _only_this_test_s_areas(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh_live_areas(monkeypatch)


def kernel_counters() -> set[str]:
    """The fields of the kernel's Counters struct, as PoolKernel.stats() gives them."""
    with aml_core.area("host") as area, aml_core.pool(area) as pool:
        return set(pool._kernel.stats())


def disagreements(pool_type: type, area_type: type, figures_type: type, counters: set[str]) -> list[str]:
    """What the records, the kernel's counters and the reports' figures disagree on."""
    out: list[str] = []
    read = set(counters_of(pool_type).values())
    out += [f"the kernel's counter {c} is read by no PoolStats field" for c in sorted(counters - read)]
    out += [f"PoolStats reads {c}, which the kernel does not count" for c in sorted(read - counters)]
    records = {"pool_stats": pool_type, "stats": area_type}
    sources: set[str] = set()
    for f in attrs.fields(figures_type):
        d = figure_of(f)
        for source in (d.of_pool, d.of_area):
            if isinstance(source, str):
                record, _, name = source.partition(".")
                if name not in attrs.fields_dict(records[record]):
                    out.append(f"the figure {d.key} reads {source}, which is no field")
                sources.add(source)
    for record, record_type in records.items():
        for f in attrs.fields(record_type):
            if not stat_of(f).derived and f"{record}.{f.name}" not in sources:
                out.append(f"{record_type.__name__}.{f.name} is in no report")
    return out


def test_the_records_the_counters_and_the_figures_agree() -> None:
    assert disagreements(PoolStats, AreaStats, _FIGURES, kernel_counters()) == []


def test_a_counter_the_kernel_adds_alone_is_caught() -> None:
    assert disagreements(PoolStats, AreaStats, _FIGURES, kernel_counters() | {"splits"}) == [
        "the kernel's counter splits is read by no PoolStats field"
    ]


def test_a_record_field_added_alone_is_caught() -> None:
    @attrs.frozen
    class MoreAreaStats(AreaStats):
        faults: int = attrs.field(default=0, metadata=stat("page faults", "{} faults", unit="count"))

    @attrs.frozen
    class MorePoolStats(PoolStats):
        splits: int = attrs.field(default=0, metadata=stat("blocks split", "{} splits", counter="splits"))

    found = disagreements(MorePoolStats, MoreAreaStats, _FIGURES, kernel_counters())
    assert found == [
        "PoolStats reads splits, which the kernel does not count",
        "MorePoolStats.splits is in no report",
        "MoreAreaStats.faults is in no report",
    ]


def test_a_figure_reading_no_field_is_caught() -> None:
    @attrs.frozen
    class MoreFigures(_FIGURES):
        faults: int = attrs.field(
            default=0,
            metadata=aml_core.statistics.figure("faults.total", "faults", pool="stats.faults", area=0),
        )

    found = disagreements(PoolStats, AreaStats, MoreFigures, kernel_counters())
    assert found == ["the figure faults.total reads stats.faults, which is no field"]


def test_a_field_without_its_declaration_is_refused() -> None:
    @attrs.frozen
    class Bare:
        n: int = 0

    with pytest.raises(TypeError, match=r"the statistics field n is not declared with stat\(\)"):
        record_summary(Bare())


@pytest.mark.parametrize("record_type", [AreaStats, PoolStats])
def test_each_field_is_in_its_record_s_summary(record_type: type) -> None:
    """A record whose fields all differ: its summary says each, as the field's phrase."""
    fields = attrs.fields(record_type)
    values = {f.name: 0.125 if stat_of(f).unit == "ratio" else (i + 1) * 3000 for i, f in enumerate(fields)}
    record = record_type(**values)
    text = record_summary(record)
    for f in fields:
        s = stat_of(f)
        assert s.phrase.format(format_value(s.unit, values[f.name])) in text, f.name
    assert str(record) == text


def test_the_summaries_read_as_documented() -> None:
    assert str(AreaStats(64 << 20, 128 << 20, 2, 5, 3)) == (
        "64.0 MiB in use (peak 128.0 MiB), 2 live mappings, 5 maps, 3 unmaps"
    )
    stats = PoolStats(
        bytes_in_use=3 << 20,
        peak_bytes_in_use=3 << 20,
        block_bytes=3 << 20,
        bytes_reserved=22 << 20,
        peak_bytes_reserved=22 << 20,
        bytes_cached=19 << 20,
        largest_free_block=17 << 20,
        fragmentation=0.104,
        slabs=2,
        native_allocations=2,
        native_frees=0,
        pool_hits=7,
        pool_misses=2,
    )
    expected = (
        "3.0 MiB in use (peak 3.0 MiB, 3.0 MiB in blocks), 22.0 MiB reserved (peak 22.0 MiB), "
        "19.0 MiB cached (largest free block 17.0 MiB, fragmentation 10.4%), 2 slabs, "
        "2 native allocations / 0 frees, 7 hits / 2 misses"
    )
    assert pool_stats_summary(stats) == str(stats) == expected
    guide = (Path(__file__).resolve().parent.parent / "docs" / "user-guide.md").read_text()
    assert expected in re.sub(r"\s+", " ", guide)  # the guide's example is this summary


def test_each_figure_has_its_key_and_its_row() -> None:
    """memory_stats' keys and memory_summary's rows come from the figures' declarations:
    every figure with a row is in the table, written as its unit says."""
    assert tuple(figure_of(f).key for f in attrs.fields(_FIGURES)) == STAT_KEYS
    with aml_core.area("host") as area, aml_core.pool(area) as pool:
        kept = [pool.mmap(1000), pool.mmap(5000)]
        pool.munmap(kept.pop())
        figures = aml_core.memory._figures(pool)
        stats = aml_core.memory.memory_stats(pool)
        summary = aml_core.memory_summary(pool)
        for f in attrs.fields(_FIGURES):
            d = figure_of(f)
            assert stats[d.key] == getattr(figures, f.name)
            if d.row is not None:
                cells = row(summary, d.row)
                cell = cells[0] if d.column == "current" else cells[1]
                assert format_value(d.unit, getattr(figures, f.name)) in cell.split(" / "), d.key
