"""The statistics every benchmark reports (one module: the benchmarks import it, none
writes its own).

A figure that compares aml with a peer comes from *paired* samples: each pair is aml's
and the peer's measurement taken side by side (the same round, the same process slot),
with the order alternating between pairs, so that drift in the machine moves both sides of
a pair alike. The figure is the **median of the paired ratios** (aml / peer, each pair's
own), with a seeded **bootstrap 95% interval** of that median, the quartiles, the
geometric mean, the count of pairs on each side of 1 and the exact one-sided **sign
test**. Every pair's ratio goes into the JSON.

A target ("at most 1.0x", "at least 1.0x") is **met** only when the interval's far end
meets it: the whole interval on the right side. Otherwise the figure is reported as its
median with "not shown" (the data do not show the target met, whichever side the median
is on).

    from paired_stats import summarize, verdict
    s = summarize([a / b for a, b in zip(aml, peer)])
    verdict(s, at_most=1.0)  # "met" or "not shown"
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

#: bootstrap resamples and seed: the same figures from the same data every time
BOOTSTRAP, SEED = 20000, 0
#: the fewest repeats a workload (one process per measurement) is run with
MIN_WORKLOAD_REPEATS = 10
MET, NOT_SHOWN = "met", "not shown"

T = TypeVar("T")


def sign_test(wins: int, n: int) -> float:
    """The exact one-sided sign test: P(at least ``wins`` of ``n`` fair coin flips)."""
    if not 0 <= wins <= n:
        raise ValueError(f"wins must be between 0 and n, got {wins} of {n}")
    return float(sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n)


def median_interval(
    values: Sequence[float], level: float = 0.95, resamples: int = BOOTSTRAP
) -> tuple[float, float]:
    """The bootstrap percentile interval of the median (seeded: the same figures each time)."""
    if not values:
        raise ValueError("no values")
    rng = random.Random(SEED)
    vals = list(values)
    medians = sorted(statistics.median(rng.choices(vals, k=len(vals))) for _ in range(resamples))
    tail = (1 - level) / 2
    return medians[int(tail * resamples)], medians[int((1 - tail) * resamples) - 1]


def summarize(ratios: Sequence[float], resamples: int = BOOTSTRAP) -> dict[str, Any]:
    """The figures of paired ratios (each aml / peer of one pair): ``pairs``, ``above``
    and ``below`` 1 (ties are neither), ``median`` and its bootstrap ``median_95``,
    ``quartiles``, ``geometric_mean``, ``sign_test_p`` for "above 1" and for "below 1",
    and every ratio (``ratios``)."""
    if not ratios:
        raise ValueError("no pairs to summarize")
    if any(not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0) for r in ratios):
        raise ValueError(f"a ratio must be positive and finite, got {list(ratios)}")
    rs = [float(r) for r in ratios]
    above = sum(r > 1 for r in rs)
    below = sum(r < 1 for r in rs)
    low, high = median_interval(rs, resamples=resamples)
    quartiles = statistics.quantiles(rs, n=4) if len(rs) > 1 else rs * 3
    return {
        "statistic": "median of paired ratios, bootstrap 95% interval",
        "pairs": len(rs),
        "above_1": above,
        "below_1": below,
        "median": statistics.median(rs),
        "median_95": [low, high],
        "quartiles": quartiles,
        "geometric_mean": math.exp(statistics.fmean(map(math.log, rs))),
        "sign_test_p_above": sign_test(above, above + below) if above + below else 1.0,
        "sign_test_p_below": sign_test(below, above + below) if above + below else 1.0,
        "ratios": rs,
    }


def paired_ratios(mine: Sequence[float], theirs: Sequence[float]) -> list[float]:
    """``mine[i] / theirs[i]`` for each pair (the two lists are one pair per index)."""
    if len(mine) != len(theirs):
        raise ValueError(f"unpaired samples: {len(mine)} against {len(theirs)}")
    return [a / b for a, b in zip(mine, theirs, strict=True) if b]


def verdict(s: dict[str, Any], *, at_most: float | None = None, at_least: float | None = None) -> str:
    """ "met" when the interval's far end meets the target (its high end ``<= at_most``, or
    its low end ``>= at_least``), else "not shown"."""
    if (at_most is None) == (at_least is None):
        raise ValueError("give one target: at_most or at_least")
    low, high = s["median_95"]
    if at_most is not None:
        return MET if high <= at_most else NOT_SHOWN
    assert at_least is not None
    return MET if low >= at_least else NOT_SHOWN


def describe(s: dict[str, Any], digits: int = 3) -> str:
    """``1.023x (95% 0.998-1.041, 12 pairs, 9 above 1)``: the median and its interval."""
    low, high = s["median_95"]
    return (
        f"{s['median']:.{digits}f}x (95% {low:.{digits}f}-{high:.{digits}f}, {s['pairs']} pairs, "
        f"{s['above_1']} above 1)"
    )


def alternating(items: Sequence[T], index: int) -> list[T]:
    """The order of ``items`` in pair or round ``index``: rotated by ``index``, and the
    rotation reversed in every other cycle of ``len(items)`` rounds, so that over each
    ``2 * len(items)`` rounds every two items run in each order equally often (for two
    items: AB, BA, BA, AB, ...)."""
    n = len(items)
    if not n:
        return []
    k = index % n
    order = list(items[k:]) + list(items[:k])
    return order[::-1] if (index // n) % 2 else order


def interleave(runs: Sequence[Callable[[], float]], repeats: int) -> list[list[float]]:
    """Run each of ``runs`` ``repeats`` times in :func:`alternating` order; returns each
    run's samples, one per repeat (sample ``i`` of every run from the same round ``i``)."""
    out: list[list[float]] = [[] for _ in runs]
    idx = list(range(len(runs)))
    for rep in range(repeats):
        for i in alternating(idx, rep):
            out[i].append(runs[i]())
    return out
