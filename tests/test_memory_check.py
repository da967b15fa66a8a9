"""benchmarks/memory_check.py, the soaks' verdict: free memory back to the baseline within
the tolerance on both sides (a reading above the baseline fails too: the baseline held
memory freed later, under which a leak could hide), and the settling re-reads."""

from __future__ import annotations

import pytest

from tests.support.benchmark_scripts import load_benchmark

memory_check = load_benchmark("memory_check")
MiB = 1 << 20


def test_back_within_the_tolerance_on_either_side_passes() -> None:
    for now in (1000 * MiB, 1000 * MiB - 2 * MiB, 1000 * MiB + 2 * MiB):
        v = memory_check.verdict(1000 * MiB, now, 2 * MiB)
        assert v["ok"], v
        assert v["leaked_bytes"] == 1000 * MiB - now


def test_a_small_leak_fails() -> None:
    v = memory_check.verdict(1000 * MiB, 1000 * MiB - 2 * MiB - 4096, 2 * MiB)
    assert not v["ok"]
    assert v["leaked_bytes"] == 2 * MiB + 4096
    assert "a leak" in v["meaning"]


def test_memory_above_the_baseline_fails_as_a_baseline_that_was_not_clean() -> None:
    # the earlier soaks' reading: 549 MiB above a baseline that held the child's context
    v = memory_check.verdict(1000 * MiB, 1549 * MiB, 2 * MiB)
    assert not v["ok"]
    assert "could hide" in v["meaning"]
    with pytest.raises(ValueError, match="at least 0"):
        memory_check.verdict(1, 1, -1)


def test_settle_rereads_until_back_and_a_leak_never_settles() -> None:
    readings = iter([900, 950, 1000, 1000])
    t = [0.0]

    def clock() -> float:
        return t[0]

    def sleep(dt: float) -> None:
        t[0] += dt

    assert memory_check.settle(lambda: next(readings), 1000, 0, wait=1.0, clock=clock, sleep=sleep) == (
        1000,
        3,
    )
    t[0] = 0.0
    now, reads = memory_check.settle(lambda: 900, 1000, 0, wait=1.0, every=0.25, clock=clock, sleep=sleep)
    assert now == 900
    assert reads == 5  # read at 0, 0.25, 0.5, 0.75 and 1.0 s, then given up
