"""What the GPU benchmarks share: sizes for people and interleaved paired timing (the
raw call and aml's, alternating which runs first, medians in microseconds)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

MiB = 1 << 20
GiB = 1 << 30


def human(n: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def paired(raw: Callable[[], None], aml: Callable[[], None], reps: int, warm: int) -> tuple[float, float]:
    """Median microseconds of raw() and aml(), interleaved (ABAB.. then BABA..)."""
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
    return statistics.median(tr) / 1e3, statistics.median(ta) / 1e3
