"""The soaks' memory verdict (``soak_cuda.py``, ``soak_pool.py``): is free device memory
back to its baseline, *within a stated tolerance on both sides*?

A one-sided check ("not below the baseline") passes whenever the baseline itself held
memory that the run frees later (an area's cache, a second process's context): a leak
smaller than that would hide. So the baseline is read before any area, pool, stream or
child process of the run exists (after a priming pass that made and closed one of each,
so that the CUDA context's own first-use memory is in the baseline), and the verdict is
two-sided: ``|baseline - final| <= tolerance``. Free memory that ends *above* the baseline
by more than the tolerance fails too: it means the baseline was not clean, and the check
could not have seen a leak of that size.

The driver may report a process's memory as free a moment after the process exits:
:func:`settle` reads again, a few times, until the reading is within the tolerance or the
wait is over (a leak never settles).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

MiB = 1 << 20
#: the default tolerance: the driver's own bookkeeping pages move free memory by less
DEFAULT_TOLERANCE = 2 * MiB


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every soak takes for its check: ``--slack`` (the tolerance) and
    ``--leak`` (a deliberate leak, the check's own test)."""
    parser.add_argument(
        "--slack",
        type=int,
        default=DEFAULT_TOLERANCE,
        help="the tolerance, in bytes, on either side of the baseline (default 2 MiB)",
    )
    parser.add_argument(
        "--leak", type=int, default=0, help="leak this many bytes on purpose (the check's own test)"
    )


def verdict(baseline: int, now: int, tolerance: int = DEFAULT_TOLERANCE) -> dict[str, Any]:
    """The two-sided verdict of one reading against the baseline: ``leaked_bytes``
    (baseline - now: positive is memory not given back), ``ok`` and what it means."""
    if tolerance < 0:
        raise ValueError(f"the tolerance must be at least 0, got {tolerance}")
    leaked = baseline - now
    if abs(leaked) <= tolerance:
        meaning = f"back to the baseline within {tolerance} bytes"
    elif leaked > 0:
        meaning = f"{leaked} bytes fewer free than at the baseline: a leak (tolerance {tolerance})"
    else:
        meaning = (
            f"{-leaked} bytes more free than at the baseline: the baseline held memory freed later, so a "
            f"leak smaller than that could hide (tolerance {tolerance})"
        )
    return {
        "baseline_free": baseline,
        "free": now,
        "leaked_bytes": leaked,
        "tolerance": tolerance,
        "ok": abs(leaked) <= tolerance,
        "meaning": meaning,
    }


def settle(
    read: Callable[[], int],
    baseline: int,
    tolerance: int = DEFAULT_TOLERANCE,
    wait: float = 3.0,
    every: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, int]:
    """``read()`` until it is within ``tolerance`` of ``baseline`` or ``wait`` seconds have
    passed; returns (the last reading, how many readings were taken)."""
    end = clock() + wait
    reads = 1
    now = read()
    while abs(baseline - now) > tolerance and clock() < end:
        sleep(every)
        now = read()
        reads += 1
    return now, reads
