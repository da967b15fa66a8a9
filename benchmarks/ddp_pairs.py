"""The DDP step's alternating pairs from several ``nccl_bench.py`` runs, pooled.

``nccl_bench.py`` times the data-parallel step on aml's hook and on PyTorch's allocator as
alternating pairs of processes (``--ddp-rounds``). Where a new pair of processes lands moves
its steps/s by more than the allocators differ, so one run of a few pairs can fall either
side of 1.0x. This script pools the pairs (each round's aml / PyTorch) of the runs it is
given and says what they show together: how many pairs aml won, their median with its
bootstrap 95% interval, their quartiles and geometric mean, and the exact one-sided sign
test (the chance of at least that many wins if neither allocator were faster), all
through ``paired_stats.py``, the statistics every benchmark shares.

Each argument is a run: its ``nccl_bench.json`` (the ``ddp.round_ratios`` it wrote), or a
log or markdown file of an older run, read from its last "each round's aml / PyTorch: ..."
line. ``--md`` and ``--json`` write the table and the figures.

    python benchmarks/ddp_pairs.py evidence/*/nccl*/nccl_bench.json --md pooled.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import paired_stats
from paired_stats import median_interval, sign_test

__all__ = ["median_interval", "report", "run_pairs", "sign_test", "summarize"]

#: What the benchmark's report says before the pairs' ratios.
PAIRS_LINE = re.compile(r"each round's aml / PyTorch: ([0-9., ]+)")


def run_pairs(path: Path) -> list[float]:
    """Each round's aml / PyTorch steps/s of the run in ``path``."""
    text = path.read_text()
    if path.suffix == ".json":
        ddp = json.loads(text).get("ddp") or {}
        pairs = ddp.get("round_ratios")
        if not pairs:
            raise ValueError(f"{path}: no DDP pairs (ddp.round_ratios) in this run")
        return [float(r) for r in pairs]
    found = PAIRS_LINE.findall(text)
    if not found:
        raise ValueError(f'{path}: no line with "each round\'s aml / PyTorch:"')
    return [float(r) for r in found[-1].replace(" ", "").strip(",.").split(",")]


def summarize(pairs: list[float]) -> dict[str, Any]:
    """The pooled figures of ``pairs`` (each aml / PyTorch): :func:`paired_stats.summarize`'s,
    with ``aml_faster`` (pairs above 1) and ``sign_test_p`` (for aml faster) named as this
    script has always written them."""
    if not pairs:
        raise ValueError("no pairs to pool")
    if any(not r > 0 for r in pairs):
        raise ValueError(f"a ratio of steps/s must be positive, got {pairs}")
    s = paired_stats.summarize(pairs)
    s["aml_faster"] = s["above_1"]
    s["sign_test_p"] = s["sign_test_p_above"]
    return s


def report(runs: dict[str, list[float]]) -> tuple[dict[str, Any], str]:
    """The figures of each run and of all the pairs pooled, and their markdown table."""
    per_run = {name: summarize(pairs) for name, pairs in runs.items()}
    pooled = summarize([r for pairs in runs.values() for r in pairs])
    lines = [
        "| run | pairs | aml faster | median of pairs | pairs |",
        "|---|---|---|---|---|",
    ]
    for name, pairs in runs.items():
        s = per_run[name]
        lines.append(
            f"| {name} | {s['pairs']} | {s['aml_faster']} | {s['median']:.3f} | "
            + ", ".join(f"{r:.3f}" for r in pairs)
            + " |"
        )
    low, high = pooled["median_95"]
    q1, _, q3 = pooled["quartiles"]
    lines += [
        "",
        f"Pooled: aml faster in {pooled['aml_faster']} of {pooled['pairs']} pairs (one-sided sign test "
        f"p = {pooled['sign_test_p']:.4f}); median {pooled['median']:.3f}x (bootstrap 95% interval "
        f"{low:.3f}-{high:.3f}), quartiles {q1:.3f} and {q3:.3f}, "
        f"geometric mean {pooled['geometric_mean']:.3f}x.",
    ]
    return {"runs": per_run, "pooled": pooled, "pairs": runs}, "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Exit status: 0 the figures were written; 2 bad arguments or a run without DDP pairs.",
    )
    parser.add_argument(
        "runs", nargs="+", type=Path, help="nccl_bench.json, or an older run's log or markdown"
    )
    parser.add_argument("--md", type=Path, help="write the table here too")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    try:
        runs = {str(path): run_pairs(path) for path in args.runs}
    except (OSError, ValueError) as err:
        parser.error(str(err))
    figures, table = report(runs)
    sys.stdout.write(table)
    if args.md:
        args.md.write_text(table)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
