"""The Python overhead of aml_core.area.Area's hot path: mmap + munmap on an area whose
``_allocate`` only makes a buffer (``_new_buffer`` at a counter's next address) and whose
``_free`` does nothing, so what is timed is aml's own bookkeeping, not a native call.

Usage: python benchmarks/area_overhead.py [--out DIR] [--name NAME] [--label LABEL] [--quick]

It times, per operation (median over repetitions of the mean of a batch):
  pair_buffer   area.mmap(4096) then area.munmap(buf)
  pair_ptr      area.mmap(4096) then area.munmap(buf.ptr)
  allocate      area._allocate(4096, None) alone: the no-op backend's own cost
  loop          an empty loop iteration (subtracted from nothing; for scale)
``bookkeeping_us`` is pair_buffer - allocate: what Area.mmap + Area.munmap add to the
backend's calls (the issue's target: aml's device mmap+munmap within 1 µs of raw
cudaMalloc+cudaFree, so this must stay well under 1 µs). Results go to
``DIR/area_overhead_NAME[_LABEL].json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from aml_core.area import Area
from aml_core.buffer import Buffer
from aml_core.specs import Kind

SIZE = 4096


class NoOpArea(Area):
    """Allocates nothing: every buffer is a fresh address from a counter."""

    def __init__(self) -> None:
        super().__init__(backend="noop", kind=Kind.DEVICE, device=0)
        self._next = itertools.count(1 << 40, 1 << 20).__next__

    def _allocate(self, size: int, options: Any) -> Buffer:
        return self._new_buffer(self._next(), size, host_accessible=False, dl_device=(2, 0))

    def _free(self, buffer: Buffer) -> None:
        pass


def per_op_us(body: Any, batch: int, reps: int) -> float:
    body(batch)  # warm up
    times = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        body(batch)
        times.append((time.perf_counter_ns() - t) / batch / 1000.0)
    return statistics.median(times)


def machine() -> dict[str, str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def measure(batch: int, reps: int) -> dict[str, float]:
    area = NoOpArea()
    mmap, munmap, allocate = area.mmap, area.munmap, area._allocate

    def pair_buffer(n: int) -> None:
        for _ in range(n):
            munmap(mmap(SIZE))

    def pair_ptr(n: int) -> None:
        for _ in range(n):
            munmap(mmap(SIZE).ptr)

    def alloc(n: int) -> None:
        for _ in range(n):
            allocate(SIZE, None)

    def loop(n: int) -> None:
        for _ in range(n):
            pass

    out = {
        "pair_buffer_us": per_op_us(pair_buffer, batch, reps),
        "pair_ptr_us": per_op_us(pair_ptr, batch, reps),
        "allocate_us": per_op_us(alloc, batch, reps),
        "loop_us": per_op_us(loop, batch, reps),
    }
    out["bookkeeping_us"] = out["pair_buffer_us"] - out["allocate_us"]
    st = area.stats
    assert st.live_mappings == 0, st
    area.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--name", default=platform.node() or "machine", help="machine name for the file")
    parser.add_argument("--label", default="", help="what was measured (e.g. the build), for the file")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args()
    batch, reps = (2000, 5) if args.quick else (20000, 31)
    result = {
        "machine": {"name": args.name, **machine()},
        "date": time.strftime("%Y-%m-%d"),
        "label": args.label,
        "size": SIZE,
        "batch": batch,
        "reps": reps,
        "per_op": measure(batch, reps),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"area_overhead_{args.name}" + (f"_{args.label}" if args.label else "")
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
