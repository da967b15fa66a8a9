"""memory_summary() and memory_stats() over device pools on the HIP driver double: a
pool over a device area and an expandable pool, what they report after known mmaps and
munmaps, and the process-wide totals that count each byte once."""

from __future__ import annotations

from collections.abc import Callable

import aml_hip
import pytest
from hip_helpers import HipDouble

import aml_core
from aml_core.gpu import Stream
from tests.support.memory_reports import check_pool_report, fresh_live_areas, row

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _only_this_test_s_areas(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh_live_areas(monkeypatch)


def test_a_device_pool_after_known_mmaps_and_munmaps(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as device, aml_core.pool(device) as pool:
        a, b, c = pool.mmap(4096), pool.mmap(4096), pool.mmap(5 * MiB)
        pool.munmap(a)
        stats = check_pool_report(pool)
        assert stats["requested_bytes.current"] == 4096 + 5 * MiB
        assert stats["requested_bytes.peak"] == 8192 + 5 * MiB
        assert stats["reserved_bytes.current"] == 22 * MiB == device.stats.bytes_in_use
        assert stats["native_allocations.total"] == hip.calls("hipMalloc") == 2
        assert (stats["mmap_calls.total"], stats["munmap_calls.total"]) == (3, 1)
        summary = aml_core.memory_summary(pool)
        assert f"(hip device memory, device {device.device})" in summary
        assert row(summary, "Reserved memory") == ["22.0 MiB", "22.0 MiB"]
        whole = aml_core.memory_stats()
        assert whole["all.reserved_bytes.current"] == 22 * MiB
        assert whole["all.requested_bytes.current"] == 4096 + 5 * MiB
        assert whole["all.segments.current"] == 2
        assert whole["all.native_allocations.total"] == 2
        assert f"hip device memory, device {device.device}: 1 pool(s), 1 area(s)" in aml_core.memory_summary()
        for buf in (b, c):
            pool.munmap(buf)
        pool.trim()
        stats = check_pool_report(pool)
        assert stats["reserved_bytes.current"] == 0
        assert stats["native_frees.total"] == hip.calls("hipFree") == 2


def test_an_expandable_pool(hip: HipDouble) -> None:
    with aml_hip.virtual_memory(0) as vm, aml_core.pool(vm, expandable=True, capacity=64 * MiB) as pool:
        a, b = pool.mmap(MiB), pool.mmap(3 * MiB)
        stats = check_pool_report(pool)
        assert stats["requested_bytes.current"] == 4 * MiB
        assert stats["reserved_bytes.current"] == 4 * MiB  # two 2 MiB chunks of the double
        assert stats["segments.current"] == 2
        whole = aml_core.memory_stats()
        assert whole["all.requested_bytes.current"] == 4 * MiB
        assert whole["all.reserved_bytes.current"] == 4 * MiB
        assert whole["all.allocated_bytes.current"] + whole["all.cached_bytes.current"] == 4 * MiB
        pool.munmap(a)
        pool.munmap(b)


def test_a_device_pool_on_two_streams(hip: HipDouble, streams: Callable[[], Stream]) -> None:
    s1, s2 = streams(), streams()
    with aml_hip.create(0, 0) as device, aml_core.pool(device) as pool:
        a, b = pool.mmap(4096, stream=s1), pool.mmap(8192, stream=s2)
        kept = pool.mmap(1000)
        pool.munmap(b, stream=s1)  # freed in s1's order: onto s1's free list
        by_stream = {s.stream: s for s in pool.stream_stats}
        assert list(by_stream) == [None, s1.handle]
        assert (by_stream[s1.handle].bytes_in_use, by_stream[s1.handle].bytes_cached) == (4096, 8192)
        assert (by_stream[s1.handle].live_blocks, by_stream[s1.handle].cached_blocks) == (1, 1)
        assert by_stream[None].bytes_in_use == 1000
        stats = check_pool_report(pool)  # the stream keys and rows say what stream_stats says
        assert stats[f"stream.0x{s1.handle:x}.cached_bytes.current"] == 8192
        whole = aml_core.memory_stats()
        assert whole[f"hip.device.{device.device}.stream.0x{s1.handle:x}.requested_bytes.current"] == 4096
        assert row(aml_core.memory_summary(), f"stream 0x{s1.handle:x}")[0] == "4.0 KiB"
        for buf in (a, kept):
            pool.munmap(buf)
        pool.trim()  # s1 synchronized, its blocks back in host order, then released
        assert [s.stream for s in pool.stream_stats] == [None]
        check_pool_report(pool)
