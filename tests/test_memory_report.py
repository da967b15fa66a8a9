"""memory_summary() and memory_stats() (aml_core.memory) over host areas and pools: what
they report after known sequences of mmaps and munmaps, each byte of layered pools
counted once over the process, and the documented keys."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import pytest

import aml_core
from aml_core.errors import AMLTypeError, AMLValueError
from aml_core.memory import STAT_KEYS, STREAM_KEYS, pool_stats_summary
from aml_core.specs import format_size

from .support.memory_reports import check_pool_report, fresh_live_areas, row
from .support.streams import S1, S2, StreamedHost

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _only_this_test_s_areas(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh_live_areas(monkeypatch)


def test_the_keys_are_the_documented_ones() -> None:
    assert STAT_KEYS == (
        "requested_bytes.current",
        "requested_bytes.peak",
        "allocated_bytes.current",
        "reserved_bytes.current",
        "reserved_bytes.peak",
        "cached_bytes.current",
        "largest_free_block_bytes.current",
        "fragmentation.current",
        "segments.current",
        "buffers.current",
        "mmap_calls.total",
        "munmap_calls.total",
        "native_allocations.total",
        "native_frees.total",
        "pool_hits.total",
        "pool_misses.total",
        "pools.current",
        "areas.current",
    )
    assert_documented(f"`{key}`" for key in STAT_KEYS)


def assert_documented(keys: Iterable[str]) -> None:
    """Each of ``keys`` is in the user guide."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "user-guide.md").read_text()
    for key in keys:
        assert key in guide, key


def test_a_host_pool_after_known_mmaps_and_munmaps() -> None:
    with aml_core.area("host") as area, aml_core.pool(area) as pool:
        a, b, c = pool.mmap(1000), pool.mmap(3000), pool.mmap(3 * MiB)
        pool.munmap(a)
        stats = check_pool_report(pool)
        assert stats["requested_bytes.current"] == 3000 + 3 * MiB
        assert stats["requested_bytes.peak"] == 1000 + 3000 + 3 * MiB
        # the layout of aml_core.pool: sizes rounded up to the 512-byte granule, a 2 MiB
        # small slab and a 20 MiB medium slab, the 3 MiB block split off it
        assert stats["allocated_bytes.current"] == 3072 + 3 * MiB
        assert stats["reserved_bytes.current"] == 22 * MiB == area.stats.bytes_in_use
        assert stats["cached_bytes.current"] == 22 * MiB - stats["allocated_bytes.current"]
        assert stats["segments.current"] == 2 == area.stats.live_mappings
        assert stats["buffers.current"] == 2
        assert (stats["mmap_calls.total"], stats["munmap_calls.total"]) == (3, 1)
        assert stats["native_allocations.total"] == 2 == area.stats.total_maps
        assert stats["pool_hits.total"] + stats["pool_misses.total"] == 3
        summary = aml_core.memory_summary(pool)
        assert row(summary, "Requested memory") == ["3.0 MiB", "3.0 MiB"]
        assert row(summary, "Reserved memory") == ["22.0 MiB", "22.0 MiB"]
        assert row(summary, "mmap / munmap calls") == ["", "3 / 1"]
        ps = pool.pool_stats
        assert pool_stats_summary(ps) == (
            "3.0 MiB in use (peak 3.0 MiB, 3.0 MiB in blocks), 22.0 MiB reserved (peak 22.0 MiB), "
            f"19.0 MiB cached (largest free block {format_size(ps.largest_free_block)}, "
            f"fragmentation {ps.fragmentation:.1%}), 2 slabs, 2 native allocations / 0 frees, "
            f"{ps.pool_hits} hits / {ps.pool_misses} misses"
        )
        pool.munmap(b)
        pool.munmap(c)
        pool.trim()
        stats = check_pool_report(pool)
        assert stats["requested_bytes.current"] == stats["reserved_bytes.current"] == 0
        assert stats["requested_bytes.peak"] == 1000 + 3000 + 3 * MiB
        assert stats["reserved_bytes.peak"] == 22 * MiB
        assert stats["native_frees.total"] == 2 == area.stats.total_unmaps


def test_an_area_reports_its_own_mappings() -> None:
    with aml_core.area("host") as area:
        bufs = [area.mmap(4096), area.mmap(3 * MiB)]
        area.munmap(bufs.pop())
        stats = aml_core.memory_stats(area)
        assert stats["requested_bytes.current"] == stats["reserved_bytes.current"] == 4096
        assert stats["requested_bytes.peak"] == stats["reserved_bytes.peak"] == 4096 + 3 * MiB
        assert stats["cached_bytes.current"] == stats["pool_hits.total"] == 0
        assert (stats["native_allocations.total"], stats["native_frees.total"]) == (2, 1)
        assert (stats["pools.current"], stats["areas.current"]) == (0, 1)
        summary = aml_core.memory_summary(area)
        assert "HostArea (host memory)" in summary
        assert row(summary, "Reserved memory") == ["4.0 KiB", "3.0 MiB"]


def test_all_areas_and_pools_count_each_byte_once() -> None:
    with (
        aml_core.area("host") as base,
        aml_core.pool(base) as outer,
        aml_core.pool(outer) as inner,
    ):
        direct, x, y = base.mmap(8192), outer.mmap(5000), inner.mmap(700)
        inner.munmap(inner.mmap(100))
        stats = aml_core.memory_stats()
        assert stats["all.requested_bytes.current"] == 8192 + 5000 + 700
        assert stats["all.reserved_bytes.current"] == base.stats.bytes_in_use
        cached = outer.pool_stats.bytes_cached + inner.pool_stats.bytes_cached
        assert stats["all.cached_bytes.current"] == cached
        assert stats["all.allocated_bytes.current"] == base.stats.bytes_in_use - cached
        assert stats["all.buffers.current"] == 3
        assert stats["all.segments.current"] == base.stats.live_mappings
        assert stats["all.native_allocations.total"] == base.stats.total_maps
        assert (stats["all.mmap_calls.total"], stats["all.munmap_calls.total"]) == (4, 1)
        assert stats["all.pool_hits.total"] == outer.pool_stats.pool_hits + inner.pool_stats.pool_hits
        assert (stats["all.pools.current"], stats["all.areas.current"]) == (2, 1)
        # one group: its keys say what the totals say
        assert {k.removeprefix("host.host.-."): v for k, v in stats.items() if k.startswith("host.")} == {
            k.removeprefix("all."): v for k, v in stats.items() if k.startswith("all.")
        }
        summary = aml_core.memory_summary()
        assert "host memory: 2 pool(s), 1 area(s)" in summary
        assert "All:" not in summary  # one group: its table is the total
        assert row(summary, "Live buffers") == ["3", ""]
        for buf, holder in ((direct, base), (x, outer), (y, inner)):
            holder.munmap(buf)
    assert aml_core.memory_stats()["all.areas.current"] == 0  # closed ones are not reported


def test_groups_by_backend_kind_and_device() -> None:
    with (
        aml_core.area("host") as anywhere,
        aml_core.area("host", device=0) as node0,
        aml_core.pool(node0) as pool,
    ):
        kept = pool.mmap(MiB), anywhere.mmap(2 * MiB)  # a buffer dropped is freed
        stats = aml_core.memory_stats()
        assert stats["host.host.-.requested_bytes.current"] == 2 * MiB
        assert stats["host.host.0.requested_bytes.current"] == MiB
        for key in STAT_KEYS:
            parts = stats[f"host.host.-.{key}"], stats[f"host.host.0.{key}"]
            expected = max(parts) if key.startswith("largest_free_block") else sum(parts)
            if not key.startswith("fragmentation"):
                assert stats[f"all.{key}"] == expected, key
        summary = aml_core.memory_summary()
        assert "host memory: 0 pool(s), 1 area(s)" in summary
        assert "host host" not in summary  # the host backend's host memory, said once
        assert "host memory, device 0: 1 pool(s), 1 area(s)" in summary
        assert "All: 1 pool(s), 2 area(s)" in summary
        del kept


def test_anything_but_an_area_is_refused() -> None:
    for bad in ("pool", 0, object()):
        with pytest.raises(AMLTypeError, match="memory reports take an aml area or pool"):
            aml_core.memory_summary(bad)  # type: ignore[arg-type]
        with pytest.raises(AMLTypeError, match="memory reports take an aml area or pool"):
            aml_core.memory_stats(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 bytes"),
        (512, "512 bytes"),
        (4096, "4.0 KiB (4096 bytes)"),
        (8 << 30, "8.0 GiB (8589934592 bytes)"),
    ],
)
def test_sizes_in_error_messages_keep_the_exact_count(n: int, text: str) -> None:
    assert format_size(n, exact=True) == text


def test_an_area_s_error_gives_sizes_for_people(tmp_path: Path) -> None:
    file = tmp_path / "data"
    file.write_bytes(b"x" * 4096)
    expected = re.escape("the file is 4.0 KiB (4096 bytes): mapping 8.0 KiB (8192 bytes) at offset 0")
    with (
        aml_core.area("host") as area,
        open(file, "rb+") as f,
        pytest.raises(AMLValueError, match=expected),
    ):
        area.mmap(8192, {"fd": f.fileno()})


def _blocks(pool: aml_core.Pool, n: int) -> int:
    """The bytes of the block the pool gives for a request of ``n``: the granule's multiple."""
    granule = pool._kernel.granule
    return -(-n // granule) * granule


def test_a_pool_on_streams_reports_each_stream() -> None:
    with StreamedHost() as host, aml_core.pool(host) as pool:
        a, b, c = pool.mmap(1000, stream=S1), pool.mmap(5000, stream=S2), pool.mmap(100)
        d = pool.mmap(4096, stream=S1)
        pool.munmap(d)  # onto S1's free list: the stream it was allocated on
        pool.munmap(b, stream=S1)  # freed in S1's order: onto S1's list too, S2 has nothing left
        by_stream = {s.stream: s for s in pool.stream_stats}
        assert list(by_stream) == [None, S1]
        host_order, s1 = by_stream[None], by_stream[S1]
        assert (s1.bytes_in_use, s1.block_bytes, s1.live_blocks) == (1000, _blocks(pool, 1000), 1)
        assert (s1.bytes_cached, s1.cached_blocks) == (_blocks(pool, 4096) + _blocks(pool, 5000), 2)
        assert (host_order.bytes_in_use, host_order.block_bytes, host_order.live_blocks) == (
            100,
            _blocks(pool, 100),
            1,
        )
        ps = pool.pool_stats
        assert host_order.bytes_cached == ps.bytes_cached - s1.bytes_cached
        stats = check_pool_report(pool)  # the keys and rows say what stream_stats says
        assert stats["stream.0x1000.cached_bytes.current"] == s1.bytes_cached
        assert stats["stream.host.requested_bytes.current"] == 100
        assert "stream.0x2000.requested_bytes.current" not in stats
        summary = aml_core.memory_summary(pool)
        assert row(summary, "stream 0x1000") == [
            format_size(1000),
            format_size(1024),
            format_size(s1.bytes_cached),
        ]
        # a request on S2 is served from free memory in host order first: S1 keeps its list
        e = pool.mmap(4096, stream=S2)
        by_stream = {s.stream: s for s in pool.stream_stats}
        assert (by_stream[S2].bytes_in_use, by_stream[S2].live_blocks) == (4096, 1)
        assert by_stream[S1] == s1
        assert by_stream[None].bytes_cached == host_order.bytes_cached - 4096
        check_pool_report(pool)
        for buf in (a, c, e):
            pool.munmap(buf)
        pool.trim()  # streams reclaimed: their blocks back in host order, then released
        assert [s.stream for s in pool.stream_stats] == [None]
        assert not [k for k in aml_core.memory_stats(pool) if k.startswith("stream.")]
        check_pool_report(pool)


def test_a_hand_over_moves_the_block_from_one_stream_to_the_other() -> None:
    with StreamedHost() as host, aml_core.pool(host, small_slab=4096, small_max=4096) as pool:
        pool.munmap(pool.mmap(4096, stream=S1))  # the only free block, on S1's list
        s1 = {s.stream: s for s in pool.stream_stats}[S1]
        assert (s1.bytes_in_use, s1.bytes_cached, s1.live_blocks, s1.cached_blocks) == (0, 4096, 0, 1)
        b = pool.mmap(4096, stream=S2)  # S2 waits for S1's event and takes it
        assert host.allocs == 1
        by_stream = {s.stream: s for s in pool.stream_stats}
        assert list(by_stream) == [None, S2]
        assert (by_stream[S2].bytes_in_use, by_stream[S2].block_bytes, by_stream[S2].bytes_cached) == (
            4096,
            4096,
            0,
        )
        assert by_stream[None].bytes_cached == 0
        check_pool_report(pool)
        pool.munmap(b)


def test_the_process_adds_pools_up_by_stream() -> None:
    with StreamedHost() as h1, StreamedHost() as h2, aml_core.pool(h1) as p1, aml_core.pool(h2) as p2:
        kept = [p1.mmap(1000, stream=S1), p2.mmap(3000, stream=S1), p2.mmap(700, stream=S2)]
        plain = aml_core.pool(h1)  # no block on a stream: no stream of its own
        kept.append(plain.mmap(50))
        stats = aml_core.memory_stats()
        assert stats["all.stream.0x1000.requested_bytes.current"] == 4000
        assert stats["all.stream.0x1000.blocks.current"] == 2
        assert stats["all.stream.0x2000.requested_bytes.current"] == 700
        assert stats["all.stream.host.requested_bytes.current"] == 0
        # one group: its stream keys say what the totals say
        group = {
            k.removeprefix("host.host.-."): v for k, v in stats.items() if k.startswith("host.host.-.stream.")
        }
        assert group == {k.removeprefix("all."): v for k, v in stats.items() if k.startswith("all.stream.")}
        cached = p1.pool_stats.bytes_cached + p2.pool_stats.bytes_cached
        assert stats["all.stream.host.cached_bytes.current"] == cached
        summary = aml_core.memory_summary()
        assert row(summary, "stream 0x1000")[0] == format_size(4000)
        assert row(summary, "host order")[0] == "0 B"
        kept.pop().free()
        plain.close()
        for buf in kept:
            buf.free()


def test_the_stream_keys_are_the_documented_ones() -> None:
    assert STREAM_KEYS == (
        "requested_bytes.current",
        "allocated_bytes.current",
        "cached_bytes.current",
        "blocks.current",
        "cached_blocks.current",
    )
    assert_documented(f"`stream.<handle>.{key}`" for key in STREAM_KEYS)


@pytest.mark.parametrize("bad", [42, None, "stats", {"bytes_in_use": 0}, object()])
def test_pool_stats_summary_of_what_is_not_pool_stats_is_a_type_error(bad: object) -> None:
    """Issue 32, root cause 12: it used to be a bare AttributeError."""
    with pytest.raises(AMLTypeError, match="PoolStats"):
        pool_stats_summary(bad)  # type: ignore[arg-type]


def test_pytorchs_key_names_read_the_same_figures() -> None:
    """memory_stats() also answers PyTorch's names (torch.cuda.memory_stats()), for one
    pool and for the process's totals: each the value of the aml key it aliases."""
    from aml_core.memory import TORCH_ALIASES

    with aml_core.area("host") as base, aml_core.pool(base) as p:
        bufs = [p.mmap(5000), p.mmap(3 * MiB)]
        p.munmap(bufs.pop())
        one = aml_core.memory_stats(p)
        assert one["allocated_bytes.all.current"] == one["allocated_bytes.current"]
        assert one["requested_bytes.all.current"] == 5000
        assert one["reserved_bytes.all.peak"] == p.pool_stats.peak_bytes_reserved
        assert one["num_device_alloc"] == p.pool_stats.native_allocations
        assert one["segment.all.current"] == p.pool_stats.slabs
        assert one["allocation.all.current"] == 1
        every = aml_core.memory_stats()
        for torch_key, key in TORCH_ALIASES.items():
            assert one[torch_key] == one[key]
            assert every[torch_key] == every["all." + key]
