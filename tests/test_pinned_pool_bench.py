"""benchmarks/pinned_pool_bench.py's reading of PyTorch's pinned-memory statistics: the
peak of the pinned bytes PyTorch held comes from whichever layout its
``torch.cuda.host_memory_stats()`` has (the GPU run of issue 33 met PyTorch 2.11's, which
the script first missed and divided None by the bytes requested)."""

from __future__ import annotations

import pytest

from tests.support.benchmark_scripts import load_benchmark

pinned_pool_bench = load_benchmark("pinned_pool_bench")


def test_the_older_layout_counts_held_bytes_as_reserved() -> None:
    stats = {"allocated_bytes.peak": 10, "reserved_bytes.peak": 16, "segment.peak": 2}
    assert pinned_pool_bench.held_peak(stats) == ("reserved_bytes.peak", 16)


def test_the_newer_layout_counts_held_bytes_as_allocated_beside_active() -> None:
    stats = {"allocated_bytes.peak": 16, "active_bytes.peak": 10, "allocations.peak": 2}
    assert pinned_pool_bench.held_peak(stats) == ("allocated_bytes.peak", 16)


def test_neither_layout_is_an_error_naming_the_keys() -> None:
    with pytest.raises(KeyError, match="num_host_alloc"):
        pinned_pool_bench.held_peak({"allocated_bytes.peak": 16, "num_host_alloc": 3})
