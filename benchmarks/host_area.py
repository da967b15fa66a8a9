"""Host area benchmark: mmap+munmap latency through aml versus raw ``mmap.mmap``, and the
cost of ``import aml_core`` plus ``aml_core.backends()`` in a fresh process.

Usage: python benchmarks/host_area.py [--out DIR] [--quick]
(DIR: default $OUT, else a new run folder ``evidence/<date>-<machine>-host-area/``)

For each size from 4 KiB to 1 GiB it times, in the same run and interleaved:
  raw        mmap.mmap(-1, size, flags=MAP_PRIVATE) then close() (Python's default,
             MAP_SHARED, faults pages in more slowly: private is the fair peer)
  aml        area.mmap(size) then area.munmap(buf)
both untouched (the kernel only creates the mapping) and first-touched (one byte
written per page, so page faults are included). The figure is the median over
repetitions of the mean time of a batch; the ratio is aml / raw (target <= 1.2 from
64 KiB up). Import plus discovery is timed inside fresh interpreters (target <= 150 ms),
with the interpreter's own start-up reported separately.
"""

from __future__ import annotations

import argparse
import json
import mmap
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from machine_info import machine, out_dir

from aml_core import _os
from aml_core.host import HostArea

PAGE = mmap.PAGESIZE
SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30]


def batch_time(fn: Callable[[], None], batch: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(batch):
        fn()
    return (time.perf_counter_ns() - t) / batch / 1000.0


def measure(size: int, touch: bool, reps: int) -> dict[str, float]:
    area = HostArea()

    def raw() -> None:
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)  # the mapping aml makes by default
        if touch:
            _os.touch(_address(m), size, PAGE, 1)
        m.close()

    def aml() -> None:
        buf = area.mmap(size)
        if touch:
            _os.touch(buf.ptr, size, PAGE, 1)
        area.munmap(buf)

    per_batch = max(1, min(2000, int(2e8 // (size if touch else 1 << 20))))
    if touch and size >= 256 << 20:
        per_batch = 1
    raw_t: list[float] = []
    aml_t: list[float] = []
    for fn in (raw, aml):  # warm up
        batch_time(fn, per_batch)
    for _ in range(reps):
        raw_t.append(batch_time(raw, per_batch))
        aml_t.append(batch_time(aml, per_batch))
    area.close()
    r, a = statistics.median(raw_t), statistics.median(aml_t)
    return {"raw_us": r, "aml_us": a, "ratio": a / r, "batch": per_batch, "reps": reps}


def _address(m: mmap.mmap) -> int:
    from aml_core._buffer import address_of

    return address_of(m)[0]


CHILD = """
import time
t0 = time.perf_counter()
import aml_core
t1 = time.perf_counter()
aml_core.backends()
t2 = time.perf_counter()
print((t1 - t0) * 1e3, (t2 - t1) * 1e3)
"""


def import_cost(runs: int) -> dict[str, float]:
    imports, discovery, totals, bare = [], [], [], []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD], check=True, capture_output=True, text=True)
        totals.append((time.perf_counter() - t) * 1e3)
        i, d = map(float, out.stdout.split())
        imports.append(i)
        discovery.append(d)
    med = statistics.median
    return {
        "import_ms": med(imports),
        "backends_ms": med(discovery),
        "import_plus_backends_ms": med([i + d for i, d in zip(imports, discovery, strict=True)]),
        "process_total_ms": med(totals),
        "bare_interpreter_ms": med(bare),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, help="default: $OUT, else evidence/<date>-<machine>-host-area/")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--name", default="", help="machine name for the result files (default: hostname)")
    args = parser.parse_args()
    reps = 5 if args.quick else 21
    results: dict[str, object] = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "latency": {}}
    latency: dict[str, dict[str, dict[str, float]]] = {}
    for touch in (False, True):
        label = "touched" if touch else "untouched"
        latency[label] = {}
        for size in SIZES:
            latency[label][str(size)] = measure(size, touch, reps)
    results["latency"] = latency
    results["import"] = import_cost(5 if args.quick else 15)
    out = out_dir(args.out, "host-area")
    out.mkdir(parents=True, exist_ok=True)
    name = f"host_area_{args.name or results['machine']['hostname'] or 'machine'}"  # type: ignore[index]
    (out / f"{name}.json").write_text(json.dumps(results, indent=1))
    lines = [
        f"# Host area benchmark ({results['date']})",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in results["machine"].items()),  # type: ignore[attr-defined]
        "",
        "mmap+munmap latency, µs (median; ratio = aml / raw `mmap.mmap`, target ≤ 1.2 from 64 KiB):",
        "",
        "| size | untouched raw | untouched aml | ratio | touched raw | touched aml | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in SIZES:
        u, t = latency["untouched"][str(size)], latency["touched"][str(size)]
        lines.append(
            f"| {_fmt(size)} | {u['raw_us']:.2f} | {u['aml_us']:.2f} | {u['ratio']:.2f} "
            f"| {t['raw_us']:.1f} | {t['aml_us']:.1f} | {t['ratio']:.2f} |"
        )
    imp = results["import"]
    assert isinstance(imp, dict)
    lines += [
        "",
        "`import aml_core` + `aml_core.backends()` in a fresh process: "
        f"{imp['import_plus_backends_ms']:.1f} ms (import {imp['import_ms']:.1f} ms, "
        f"backends {imp['backends_ms']:.1f} ms; target ≤ 150 ms). Whole process "
        f"{imp['process_total_ms']:.0f} ms against {imp['bare_interpreter_ms']:.0f} ms "
        "for a bare interpreter.",
    ]
    text = "\n".join(lines) + "\n"
    (out / f"{name}.md").write_text(text)
    print(text)


def _fmt(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n >> shift} {unit}"
    return f"{n} B"


if __name__ == "__main__":
    main()
