"""What a pool's history and log cost on its hot path (issue 22): mmap(4096) + munmap of
a cached block on aml_core.pool over a do-nothing area (area_overhead.py's NoOpArea: no
native call, so what is timed is the kernel and the Buffer), with

  off       nothing recorded (the default: one flag test in the kernel)
  history   pool.record_history(): each event appended to the kernel's C ring
  stacks    pool.record_history(stacks="python"): each event through the Python path, with
            its stack
  log       pool.log_to(callback) (a callback that keeps nothing): each event through the
            Python path, then handed to the callback

The modes are interleaved repetition by repetition (one pool each), so a slower period
of the machine hits them all; per operation: the median over repetitions of a batch's
mean, in microseconds. Usage: python benchmarks/pool_history.py [--out DIR] [--name NAME]
[--quick]; the result goes to ``DIR/pool_history_NAME.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from area_overhead import SIZE, NoOpArea
from machine_info import machine, out_dir

import aml_core
from aml_core.pool import Pool

MODES: dict[str, Callable[[Pool], None]] = {
    "off": lambda p: None,
    "history": lambda p: p.record_history(),
    "stacks": lambda p: p.record_history(stacks="python"),
    "log": lambda p: p.log_to(lambda record: None),
}


def measure(batch: int, reps: int) -> dict[str, float]:
    area = NoOpArea()
    pools = {}
    for name, setup in MODES.items():
        pools[name] = p = aml_core.pool(area)
        setup(p)
        p.munmap(p.mmap(SIZE))  # the block cached: every later pair is a hit
    times: dict[str, list[float]] = {name: [] for name in MODES}
    clock = time.perf_counter_ns
    for _ in range(reps):
        for name, p in pools.items():
            mmap, munmap = p.mmap, p.munmap
            t = clock()
            for _ in range(batch):
                munmap(mmap(SIZE))
            times[name].append((clock() - t) / batch / 1000.0)
    for p in pools.values():
        p.close()
    area.close()
    return {f"{name}_pair_us": statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, help="default: $OUT, else evidence/<date>-<machine>-pool-history/"
    )
    parser.add_argument("--name", default=platform.node() or "machine", help="machine name for the file")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args()
    batch, reps = (2000, 5) if args.quick else (20000, 21)
    per_op = measure(batch, reps)
    result = {
        "machine": {"name": args.name, **machine()},
        "date": time.strftime("%Y-%m-%d"),
        "size": SIZE,
        "batch": batch,
        "reps": reps,
        "per_op": per_op,
        "history_cost_us": per_op["history_pair_us"] - per_op["off_pair_us"],
    }
    out = out_dir(args.out, "pool-history")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"pool_history_{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
