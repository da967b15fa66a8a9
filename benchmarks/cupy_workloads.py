"""CuPy workloads on aml's hook (``aml_cuda.use_with_cupy(pool)``) against CuPy's own
``MemoryPool`` and RMM's (``rmm.allocators.cupy.rmm_cupy_allocator`` over an RMM pool),
each (allocator, workload) pair in its own process (issue 19, item 6).

Usage on the GPU machine (writes cupy_workloads.json, .md, .log and _<workload>.png to
--out, default $OUT, else a new run folder ``evidence/<date>-<machine>-cupy-workloads/``;
prints the summary last; about 1.5 minutes, at most ``--budget`` (100 s) plus one
``--child-timeout`` (45 s); ``--quick``: one short process per allocator, well under a
minute)::

    PYTHONUNBUFFERED=1 python benchmarks/cupy_workloads.py --out $OUT

RMM is imported as ``rmm`` (carried to the GPU machine as wheels); without it that
allocator is skipped, with the reason.

Allocators (:data:`ALLOCATORS`): ``cupy`` (CuPy's default ``MemoryPool``, the base of the
ratios), ``aml`` (``use_with_cupy(aml_core.pool(aml_cuda.create(0)))``), ``aml-expandable``
(over ``aml_core.pool(aml_cuda.virtual_memory(0), expandable=True)``), ``rmm``. Workloads:
``elementwise`` (a loop of elementwise expressions whose temporaries are 4 KiB..16 MiB,
sizes seeded: iterations per second) and ``fft`` (forward and inverse FFTs of 1 K..256 K
complex64 points, sizes seeded: iterations per second). The mechanics (processes,
interleaving, budget, output) are ``workload_driver.py``'s.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

from workload_driver import (
    PEAK_RESERVED,
    Installed,
    Metric,
    Skip,
    Suite,
    Workload,
    device_used,
    import_or_skip,
    versions,
)
from workload_driver import main as driver_main

#: float32 elements of the elementwise loop's operands (4 KiB .. 16 MiB)
ELEMENTWISE_SIZES = (1 << 10, 1 << 13, 1 << 16, 1 << 18, 1 << 20, 1 << 22)
#: arrays each elementwise iteration allocates: x*1.5, +2.0, t*t, negation, exp, u*x, sum
ELEMENTWISE_TEMPORARIES = 7
#: complex64 points of the FFT loop's transforms
FFT_SIZES = (1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18)

ALLOCATORS = {
    "cupy": "CuPy's default `MemoryPool` (`cupy.get_default_memory_pool()`). Reserved: its `total_bytes()` "
    "at the end (it gives nothing back unasked, so that is its peak); in use: not tracked as a peak.",
    "aml": "`aml_cuda.use_with_cupy(aml_core.pool(aml_cuda.create(0)))`. Reserved: the pool's "
    "`pool_stats.peak_bytes_reserved`; in use: `peak_bytes_in_use`.",
    "aml-expandable": "`use_with_cupy` over `aml_core.pool(aml_cuda.virtual_memory(0), expandable=True, "
    "capacity=<GPU memory>)`: one segment grown in place. Same counters.",
    "rmm": "`cupy.cuda.set_allocator(rmm.allocators.cupy.rmm_cupy_allocator)` over "
    "`rmm.mr.PoolMemoryResource(CudaMemoryResource(), initial_pool_size=0)`. Reserved: `pool_size()` at the "
    "end (an RMM pool never shrinks); in use: not reported.",
}

_USED = device_used("CuPy's kernels and cuFFT plans' work areas")


def _rate(what: str) -> Metric:
    return Metric(
        "it_per_s",
        "iterations/s",
        "it/s",
        True,
        "rate",
        f"timed iterations / seconds ({what}), after warm-up iterations, the device synchronized "
        "at both ends.",
    )


ELEMENTWISE = Workload(
    "elementwise",
    "`t = x*1.5 + 2.0; u = exp(-(t*t)); (u*x).sum()` on float32 slices of 1 K..4 M elements "
    f"(sizes seeded): {ELEMENTWISE_TEMPORARIES} temporaries of mixed sizes per iteration",
    (_rate(f"{ELEMENTWISE_TEMPORARIES} allocations each"), PEAK_RESERVED, _USED),
)
FFT = Workload(
    "fft",
    "`z = ifft(fft(x) ** 2)` on complex64 slices of 1 K..256 K points (sizes seeded; cuFFT plans cached)",
    (_rate("an fft, a square and an ifft each"), PEAK_RESERVED, _USED),
)
SUITE = Suite(
    name="cupy_workloads",
    what="cupy-workloads",
    title="CuPy workloads on aml's hook and its peers",
    framework="CuPy",
    native="cupy",
    allocators=ALLOCATORS,
    workloads=(ELEMENTWISE, FFT),
    pairs=tuple((a, w.name) for w in (ELEMENTWISE, FFT) for a in ALLOCATORS),
    budget_s=100.0,
    quick_budget_s=40.0,
    child_timeout_s=45.0,
)


def install(allocator: str, args: argparse.Namespace) -> Installed:
    """Make ``allocator`` CuPy's device allocator (Skip where it cannot be)."""
    cupy = import_or_skip("cupy")
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        raise Skip(f"CuPy sees no CUDA device ({type(exc).__name__}: {exc})") from exc
    if count < 1:
        raise Skip("CuPy sees no CUDA device")
    inst = Installed(
        cupy,
        quick=bool(args.quick),
        seed=int(args.seed),
        sync=cupy.cuda.Device().synchronize,
        free_memory=lambda: int(cupy.cuda.runtime.memGetInfo()[0]),
    )
    if allocator == "cupy":
        pool = cupy.get_default_memory_pool()
        inst.peak_reserved = lambda: int(pool.total_bytes())
    elif allocator in ("aml", "aml-expandable"):
        inst.use_aml(expandable=allocator == "aml-expandable", hook="use_with_cupy")
    elif allocator == "rmm":
        inst.use_rmm("rmm.allocators.cupy", "rmm_cupy_allocator", cupy.cuda.set_allocator)
    else:
        raise Skip(f"unknown allocator {allocator!r}")
    return inst.start()


def _timed(inst: Installed, loop: Any, sizes: list[int], warm: int) -> tuple[float, Any]:
    """Seconds of ``loop(sizes[warm:])`` after ``loop(sizes[:warm])``, synchronized."""
    loop(sizes[:warm])
    inst.sync()
    t0 = time.perf_counter()
    last = loop(sizes[warm:])
    inst.sync()
    return time.perf_counter() - t0, last


def elementwise(inst: Installed) -> dict[str, Any]:
    """The elementwise loop: iterations per second."""
    cupy = inst.lib
    rng = random.Random(inst.seed)
    warm, iters = (100, 1000) if inst.quick else (500, 10000)
    sizes = [rng.choice(ELEMENTWISE_SIZES) for _ in range(warm + iters)]
    # RandomState and a float64 draw cast down: the same calls in every CuPy (and NumPy)
    base = cupy.random.RandomState(inst.seed).standard_normal(max(ELEMENTWISE_SIZES)).astype(cupy.float32)

    def loop(ns: list[int]) -> Any:
        acc = None
        for n in ns:
            x = base[:n]
            t = x * 1.5 + 2.0
            u = cupy.exp(-(t * t))
            acc = (u * x).sum()
        return acc

    dt, last = _timed(inst, loop, sizes, warm)
    check = float(last) if last is not None else math.nan
    if not math.isfinite(check):
        raise RuntimeError(f"the loop's last sum is not finite ({check})")
    return {"it_per_s": iters / dt, "iterations": iters, "seconds": dt, **inst.memory()}


def fft(inst: Installed) -> dict[str, Any]:
    """The FFT loop: iterations per second."""
    cupy = inst.lib
    rng = random.Random(inst.seed)
    warm, iters = (50, 300) if inst.quick else (200, 3000)
    sizes = [rng.choice(FFT_SIZES) for _ in range(warm + iters)]
    gen = cupy.random.RandomState(inst.seed)
    n_max = max(FFT_SIZES)
    base = (gen.standard_normal(n_max) + 1j * gen.standard_normal(n_max)).astype(cupy.complex64)
    base /= float(math.sqrt(n_max))

    def loop(ns: list[int]) -> Any:
        z = None
        for n in ns:
            y = cupy.fft.fft(base[:n])
            z = cupy.fft.ifft(y * y)
        return z

    dt, last = _timed(inst, loop, sizes, warm)
    check = float(abs(last[0])) if last is not None else math.nan
    if not math.isfinite(check):
        raise RuntimeError(f"the last transform is not finite ({check})")
    return {"it_per_s": iters / dt, "iterations": iters, "seconds": dt, **inst.memory()}


def describe(inst: Installed) -> dict[str, Any]:
    cupy = inst.lib
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props.get("name", b"?")
    env: dict[str, Any] = {
        "cupy": cupy.__version__,
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "device": name.decode(errors="replace") if isinstance(name, bytes) else str(name),
    }
    return {**env, **versions("aml_core", "aml_cuda", "rmm")}


if __name__ == "__main__":
    sys.exit(
        driver_main(
            SUITE, Path(__file__).resolve(), install, {"elementwise": elementwise, "fft": fft}, describe
        )
    )
