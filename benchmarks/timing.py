"""What the GPU benchmarks share: sizes for people and interleaved paired timing (the
raw call and aml's, alternating which runs first, medians in microseconds, and the pairs'
own figures through ``paired_stats.py``), the median of batched calls where one call is
too short to time alone, and ``ck``, the status check of the raw cuda-bindings calls."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import paired_stats

MiB = 1 << 20
GiB = 1 << 30


def ck(result: Any) -> Any:
    """A cuda-bindings call's answer, ``(status, *values)``, checked: RuntimeError naming the
    status when it is an error; else the one value, or the tuple of values (``()`` for none)."""
    err = result[0]
    if int(err):
        raise RuntimeError(f"CUDA call failed: {err!r}")
    return result[1] if len(result) == 2 else result[1:]


def human(n: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def paired(
    raw: Callable[[], None],
    aml: Callable[[], None],
    reps: int,
    warm: int,
    stats: dict[str, Any] | None = None,
) -> tuple[float, float]:
    """Median microseconds of raw() and aml(), interleaved (ABAB.. then BABA..). With
    ``stats``, ``stats["paired"]`` gets the pairs' figures (``paired_stats.summarize`` of
    each aml / raw pair: the median pair and its bootstrap 95% interval)."""
    for _ in range(warm):
        raw()
        aml()
    tr: list[int] = []
    ta: list[int] = []
    clock = time.perf_counter_ns
    for i in range(reps):
        order = ((raw, tr), (aml, ta)) if i % 2 == 0 else ((aml, ta), (raw, tr))
        for fn, sink in order:
            t0 = clock()
            fn()
            sink.append(clock() - t0)
    if stats is not None:
        ratios = [r for r in paired_stats.paired_ratios(ta, tr) if r > 0]  # a 0 ns sample: no pair
        stats["paired"] = paired_stats.summarize(ratios) if ratios else None
    return statistics.median(tr) / 1e3, statistics.median(ta) / 1e3


def batch_median_us(fn: Callable[[], object], per_round: int, rounds: int, warm: int) -> float:
    """The median over ``rounds`` rounds of the mean microseconds of ``per_round`` calls of
    ``fn``, after ``warm`` calls that are not timed."""
    for _ in range(warm):
        fn()
    means = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(per_round):
            fn()
        means.append((time.perf_counter_ns() - t0) / per_round)
    return statistics.median(means) / 1e3
