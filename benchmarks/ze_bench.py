"""aml-ze allocation benchmark: mmap+munmap through AML's Level Zero areas versus the same
``zeMemAlloc*`` / ``zeMemFree`` calls made directly through ctypes, on whatever Level Zero
library is loaded.

Usage::

    ZE_ENABLE_ALT_DRIVERS=/path/libze_null.so.1 python benchmarks/ze_bench.py [--machine NAME] [--out DIR]
    AML_ZE_LIBRARY=/path/to/forward/double/libze_loader.so.1 python benchmarks/ze_bench.py ...

On a CPU the null driver (Level Zero's own, built from Debian's level-zero source: see
backends/ze/README.md) is the cheapest real loader path: its allocations are ``malloc``,
so the figure is the Python and loader overhead. With the forward double on an NVIDIA GPU
the native call is CUDA's. Each row is the median over repetitions of the mean of a batch,
aml and direct interleaved; the ratio is aml / direct.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from ctypes import byref, c_void_p
from pathlib import Path

import aml_ze
from aml_ze import abi as C

SIZES = [64, 4 << 10, 1 << 20, 16 << 20]
KINDS = ("device", "shared", "host")


def batch_time(fn: Callable[[], None], batch: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(batch):
        fn()
    return (time.perf_counter_ns() - t) / batch / 1000.0


def direct(area: aml_ze.ZeArea, kind: str, size: int) -> Callable[[], None]:
    """The same native calls as the area's mmap+munmap, made directly (descriptors built
    once, as the area does)."""
    rt = aml_ze.get_runtime()
    lib = rt.lib.native
    alloc_dev, alloc_shared = lib.function("zeMemAllocDevice"), lib.function("zeMemAllocShared")
    alloc_host, free = lib.function("zeMemAllocHost"), lib.function("zeMemFree")
    ctx = c_void_p(rt.create_context())
    dev = c_void_p(rt.devices[0])
    ddesc = C.ze_device_mem_alloc_desc_t(C.ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, None, 1, 0)
    hdesc = C.ze_host_mem_alloc_desc_t(C.ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, None, 1)
    out = c_void_p()
    align = area.alignment

    def run() -> None:
        if kind == "device":
            rc = alloc_dev(ctx, byref(ddesc), size, align, dev, byref(out))
        elif kind == "shared":
            rc = alloc_shared(ctx, byref(ddesc), byref(hdesc), size, align, dev, byref(out))
        else:
            rc = alloc_host(ctx, byref(hdesc), size, align, byref(out))
        if rc or free(ctx, out) != 0:
            raise RuntimeError(f"native call failed: {rc:#x}")

    run.context = ctx  # type: ignore[attr-defined]
    return run


def measure(batch: int, reps: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    rt = aml_ze.get_runtime()
    for kind in KINDS:
        if kind == "host":
            area = aml_ze.host_area(aml_ze.ZeHostFlags.BIAS_CACHED, 64)
        else:
            flags = aml_ze.ZeFlags.SHARED if kind == "shared" else aml_ze.ZeFlags.DEVICE
            area = aml_ze.device_area(0, 0, aml_ze.ZeDeviceFlags.BIAS_CACHED, 64, flags)
        for size in SIZES:
            raw = direct(area, kind, size)

            def through_aml(area: aml_ze.ZeArea = area, size: int = size) -> None:
                area.munmap(area.mmap(size))

            a: list[float] = []
            d: list[float] = []
            for _ in range(reps):
                d.append(batch_time(raw, batch))
                a.append(batch_time(through_aml, batch))
            rt.destroy_context(raw.context.value)  # type: ignore[attr-defined]
            ma, md = statistics.median(a), statistics.median(d)
            rows.append({"kind": kind, "size": size, "direct_us": md, "aml_us": ma, "ratio": ma / md})
        area.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machine", default=platform.node(), help="the machine, as the result names it")
    parser.add_argument("--out", type=Path, help="write <out>/ze_bench_<machine>.json and .md")
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    probe = aml_ze.probe()
    if not probe.available:
        raise SystemExit(f"aml-ze is unavailable here: {probe.reason}")
    rows = measure(args.batch, args.reps)
    meta = {
        "machine": args.machine,
        "cpu": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "?",
        ),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "library": aml_ze.get_runtime().traits.version,
        "device": probe.devices[0].name,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("ZE_", "AML_ZE"))},
    }
    lines = [
        f"# aml-ze allocation benchmark ({time.strftime('%Y-%m-%d')})",
        "",
        f"Machine: {meta['machine']}; cpu {meta['cpu']}, {meta['cores']} cores, python {meta['python']}",
        f"Library: {meta['library']}; device: {meta['device']}; environment: {meta['env']}",
        "",
        "mmap+munmap, µs (median of means; ratio = aml / direct ctypes calls):",
        "",
        "| kind | size | direct | aml | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['size']} | {r['direct_us']:.2f} | {r['aml_us']:.2f} | {r['ratio']:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = "ze_bench_" + "".join(c if c.isalnum() or c in "-_." else "-" for c in args.machine)
        (args.out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
        (args.out / f"{stem}.md").write_text(text)
    aml_ze.BACKEND.reset()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
