"""benchmarks/paired_stats.py, the statistics every benchmark reports: the median of paired
ratios with its seeded bootstrap interval, the sign test, the far-end rule for targets and
the alternating order of runs."""

from __future__ import annotations

import itertools
import math

import pytest

from tests.support.benchmark_scripts import load_benchmark

ps = load_benchmark("paired_stats")


def test_the_summary_of_paired_ratios_keeps_every_pair() -> None:
    ratios = [0.9, 0.95, 1.0, 1.05, 1.2]
    s = ps.summarize(ratios)
    assert s["pairs"] == 5
    assert (s["above_1"], s["below_1"]) == (2, 2)  # a tie is neither
    assert s["median"] == 1.0
    assert s["ratios"] == ratios
    low, high = s["median_95"]
    assert 0.9 <= low <= 1.0 <= high <= 1.2
    assert s["median_95"] == ps.summarize(ratios)["median_95"]  # seeded
    assert math.isclose(s["geometric_mean"], math.prod(ratios) ** 0.2)
    assert s["sign_test_p_above"] == s["sign_test_p_below"] == ps.sign_test(2, 4)
    for bad in ([], [1.0, 0.0], [1.0, math.nan], [-1.0]):
        with pytest.raises(ValueError, match=r"no pairs|positive"):
            ps.summarize(bad)


def test_pairs_are_taken_index_by_index() -> None:
    assert ps.paired_ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    with pytest.raises(ValueError, match="unpaired"):
        ps.paired_ratios([1.0], [1.0, 2.0])


def test_a_target_is_met_only_when_the_far_end_of_the_interval_meets_it() -> None:
    clear = ps.summarize([0.70, 0.72, 0.74, 0.71, 0.73, 0.75, 0.69, 0.72, 0.70, 0.74])
    assert ps.verdict(clear, at_most=0.8) == ps.MET
    straddle = ps.summarize([0.7, 0.75, 0.78, 0.79, 0.81, 0.85, 0.9, 0.76, 0.77, 0.95])
    assert straddle["median"] < 0.8 < straddle["median_95"][1]
    assert ps.verdict(straddle, at_most=0.8) == ps.NOT_SHOWN  # median below, interval across
    assert ps.verdict(clear, at_least=0.6) == ps.MET
    assert ps.verdict(clear, at_least=0.72) == ps.NOT_SHOWN
    with pytest.raises(ValueError, match="one target"):
        ps.verdict(clear)
    assert ps.describe(clear).startswith(f"{clear['median']:.3f}x (95% ")


def test_the_sign_test_is_the_exact_binomial_tail() -> None:
    assert ps.sign_test(5, 5) == 1 / 32
    assert ps.sign_test(0, 5) == 1.0
    assert math.isclose(ps.sign_test(22, 29), 0.004065, rel_tol=1e-3)
    with pytest.raises(ValueError, match="between 0 and n"):
        ps.sign_test(6, 5)


@pytest.mark.parametrize("n", [2, 3, 5, 18])
def test_each_two_runs_swap_order_equally_often(n: int) -> None:
    items = list(range(n))
    first = dict.fromkeys(itertools.combinations(items, 2), 0)
    for index in range(2 * n):
        order = ps.alternating(items, index)
        assert sorted(order) == items
        for a, b in first:
            first[(a, b)] += order.index(a) < order.index(b)
    assert set(first.values()) == {n}
    assert [ps.alternating("AB", i) for i in range(4)] == [["A", "B"], ["B", "A"], ["B", "A"], ["A", "B"]]
    assert ps.alternating([], 3) == []


def test_interleave_gives_each_run_one_sample_per_round() -> None:
    calls: list[str] = []

    def run(name: str, value: float):  # type: ignore[no-untyped-def]
        def f() -> float:
            calls.append(name)
            return value

        return f

    out = ps.interleave([run("a", 1.0), run("b", 2.0)], 4)
    assert out == [[1.0] * 4, [2.0] * 4]
    assert calls == ["a", "b", "b", "a", "b", "a", "a", "b"]
