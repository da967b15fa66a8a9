"""The exact-size pinned pool on a KV-cache-offload-like trace (issue 33, item 6).

Usage: python benchmarks/pinned_pool_bench.py [--backend hip|cuda] [--steps N] [--peak-mib M]
[--seed S] [--node N] [--out FILE] [--torch] [--bandwidth]

The trace: requests arrive and offload their KV cache to pinned host memory as blocks of
mixed sizes: fixed-size KV blocks of several layer groups (16 tokens of full attention,
sliding-window and MLA-like latent layers: 96 KiB, 160 KiB, 288 KiB, 1,040 KiB; none a
power of two) and one variable-size block per request (its prompt's tail, a page multiple
between 4 KiB and 8 MiB); finished requests free all their blocks; the live total follows
load waves up to about ``--peak-mib``. Deterministic for a seed.

Measured, in one run:

``aml``    ``aml_<backend>.pinned_pool(node)`` replaying the trace: the most host memory it
           held (``peak_bytes_reserved``) over the most bytes live (``peak_bytes_requested``),
           and the largest reserved/requested ratio at any step (target: <= 1.05), with
           registrations, cache hits and misses and the mean time of mmap+munmap.
           On the CPU (``--backend hip`` over the HIP driver double, built here: its
           ``hipHostRegister`` checks and records but pins nothing) the bytes are the
           pool's own accounting of real mappings, placed and populated on the node (the
           figure is the same on a GPU: the pool holds what it maps); the times are not a
           GPU's.
``torch``  (``--torch``, a GPU with a CUDA build of PyTorch) the same trace through
           PyTorch's pinned allocator (``torch.empty(n, dtype=uint8, pin_memory=True)``),
           whose reserved bytes ``torch.cuda.host_memory_stats()`` reports. Without a GPU,
           ``power_of_two_bound`` is computed from the trace instead (each live block
           rounded up to a power of two, as PyTorch rounds them): a lower bound of what
           PyTorch would hold, stated as computed, not measured.
``bandwidth`` (``--bandwidth``, a GPU) host-to-device copies of 64 MiB from a pinned-pool
           block and from ``cudaHostAlloc`` memory (a PyTorch pinned tensor), CUDA-event
           timed, medians of 20 (target: equal within noise), and ``non_blocking``
           overlap: the copy returns before it completes.

The JSON result goes to stdout and to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KiB, MiB = 1 << 10, 1 << 20
#: The fixed KV block sizes of the layer groups (16 tokens each; none a power of two).
BLOCKS = (96 * KiB, 160 * KiB, 288 * KiB, 1040 * KiB)


def trace(steps: int, peak: int, seed: int) -> list[tuple[str, int, int]]:
    """``(op, request, size)`` events: ``("alloc", r, n)`` and ``("free", r, 0)`` (every
    block of request ``r``)."""
    rng = random.Random(seed)
    events: list[tuple[str, int, int]] = []
    live: dict[int, int] = {}
    total = 0
    for step in range(steps):
        # Load waves: the target live total swings between a third of the peak and the peak.
        wave = 1 - abs(2 * (step % 400) / 400 - 1)  # a triangle wave in [0, 1]
        target = peak * (0.33 + 0.67 * wave)
        if total < target or not live:
            r = step
            sizes = [rng.choice(BLOCKS) for _ in range(rng.randint(2, 24))]
            sizes.append(rng.randint(1, 2048) * 4 * KiB)
            for n in sizes:
                events.append(("alloc", r, n))
            live[r] = sum(sizes)
            total += live[r]
        else:
            r = rng.choice(list(live))
            events.append(("free", r, 0))
            total -= live.pop(r)
    for r in list(live):
        events.append(("free", r, 0))
    return events


def power_of_two_bound(events: list[tuple[str, int, int]]) -> dict[str, Any]:
    """Computed, not measured: the peak of the live blocks each rounded up to a power of two,
    as PyTorch's pinned allocator rounds them (pytorch#150517). PyTorch holds at least this
    (it also keeps freed blocks cached), so it is a lower bound of its reserved bytes."""
    held: dict[int, list[tuple[int, int]]] = {}
    live = rounded = peak_live = peak_rounded = 0
    for op, r, n in events:
        if op == "alloc":
            p2 = 1 << (n - 1).bit_length()
            held.setdefault(r, []).append((n, p2))
            live, rounded = live + n, rounded + p2
            peak_live, peak_rounded = max(peak_live, live), max(peak_rounded, rounded)
        else:
            for size, p2 in held.pop(r):
                live, rounded = live - size, rounded - p2
    return {
        "computed": "each live block rounded up to a power of two; a lower bound of PyTorch's, not a run",
        "peak_bytes_requested": peak_live,
        "peak_bytes_rounded": peak_rounded,
        "peak_ratio": peak_rounded / peak_live,
    }


def replay_aml(pool: Any, events: list[tuple[str, int, int]]) -> dict[str, Any]:
    held: dict[int, list[Any]] = {}
    worst = 1.0
    spent = 0.0
    calls = 0
    for op, r, n in events:
        t0 = time.perf_counter()
        if op == "alloc":
            held.setdefault(r, []).append(pool.mmap(n))
            calls += 1
        else:
            for buf in held.pop(r):
                pool.munmap(buf)
                calls += 1
        spent += time.perf_counter() - t0
        s = pool.pinned_stats
        if s.bytes_requested:
            worst = max(worst, s.bytes_reserved / s.bytes_requested)
    s = pool.pinned_stats
    return {
        "peak_bytes_requested": s.peak_bytes_requested,
        "peak_bytes_reserved": s.peak_bytes_reserved,
        "peak_ratio": s.peak_bytes_reserved / s.peak_bytes_requested,
        "worst_step_ratio": worst,
        "registrations": s.registrations,
        "unregistrations": s.unregistrations,
        "hits": s.hits,
        "misses": s.misses,
        "mean_call_us": spent / calls * 1e6,
        "calls": calls,
    }


def replay_torch(torch: Any, events: list[tuple[str, int, int]]) -> dict[str, Any]:
    """The trace through PyTorch's pinned allocator (CachingHostAllocator). GPU only."""
    torch.cuda.init()
    held: dict[int, list[Any]] = {}
    requested = peak_requested = 0
    for op, r, n in events:
        if op == "alloc":
            held.setdefault(r, []).append(torch.empty(n, dtype=torch.uint8, pin_memory=True))
            requested += n
            peak_requested = max(peak_requested, requested)
        else:
            for t in held.pop(r):
                requested -= t.numel()
            # the tensors are dropped here: PyTorch caches their blocks
    stats = torch.cuda.host_memory_stats()
    key, peak_reserved = held_peak(stats)
    return {
        "peak_bytes_requested": peak_requested,
        "peak_bytes_reserved": peak_reserved,
        "peak_reserved_key": key,
        "peak_ratio": peak_reserved / peak_requested if peak_requested else None,
        "host_memory_stats": {k: v for k, v in stats.items() if "bytes" in k},
        "torch": torch.__version__,
    }


def held_peak(stats: dict[str, Any]) -> tuple[str, int]:
    """(key, value) of the peak of pinned bytes PyTorch held (cached blocks included), from
    ``torch.cuda.host_memory_stats()``. Older releases count them as ``reserved_bytes``
    (``allocated_bytes`` there are the bytes handed out); PyTorch 2.11's host allocator
    has no ``reserved_bytes`` and counts the blocks it owns, active and cached, as
    ``allocated_bytes`` (those handed out are ``active_bytes``)."""
    if "reserved_bytes.peak" in stats:
        return "reserved_bytes.peak", int(stats["reserved_bytes.peak"])
    if "allocated_bytes.peak" in stats and "active_bytes.peak" in stats:
        return "allocated_bytes.peak", int(stats["allocated_bytes.peak"])
    raise KeyError(f"host_memory_stats() has no peak of the pinned bytes held: {sorted(stats)}")


def bandwidth(torch: Any, pool: Any, size: int = 64 * MiB, reps: int = 20) -> dict[str, Any]:
    """H2D GB/s from a pinned-pool block against a PyTorch pinned tensor. GPU only."""
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    buf = pool.mmap(size)
    sources = {
        "aml_pinned_pool": torch.from_dlpack(buf),
        "cudaHostAlloc": torch.empty(size, dtype=torch.uint8).pin_memory(),
    }
    out: dict[str, Any] = {}
    for name, src in sources.items():
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dev.copy_(src, non_blocking=True)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        t0 = time.perf_counter()
        dev.copy_(src, non_blocking=True)
        returned = time.perf_counter() - t0
        torch.cuda.synchronize()
        out[name] = {
            "gb_s": size / statistics.median(times) / 1e9,
            "is_pinned": bool(src.is_pinned()),
            "non_blocking_return_s": returned,
            "median_copy_s": statistics.median(times),
        }
    del sources
    pool.munmap(buf)
    return out


def _double() -> str:
    """Build the HIP driver double (host mode) and point aml_hip at it."""
    sys.path.insert(0, str(ROOT))
    import importlib.util

    path = ROOT / "backends/hip/tests/native/hip_double.py"
    spec = importlib.util.spec_from_file_location("hip_double", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    library = str(module.build_double("host"))
    os.environ["AML_HIP_LIBRARY"] = library
    return library


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("hip", "cuda"), default="hip")
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--peak-mib", type=int, default=192)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--node", type=int, default=0)
    parser.add_argument("--max-cached", type=float, default=0.05, help="the pool's cache bound (fraction)")
    parser.add_argument("--torch", action="store_true", help="also PyTorch's pinned allocator (GPU)")
    parser.add_argument("--bandwidth", action="store_true", help="also H2D bandwidth (GPU)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    result: dict[str, Any] = {
        "machine": platform.node(),
        "python": platform.python_version(),
        "backend": args.backend,
        "trace": {"steps": args.steps, "peak_mib": args.peak_mib, "seed": args.seed, "blocks": BLOCKS},
    }
    if args.backend == "hip":
        result["hip_library"] = _double()
        result["registration"] = (
            "HIP driver double (host mode): hipHostRegister checked and recorded, nothing pinned"
        )
    import importlib

    backend = importlib.import_module(f"aml_{args.backend}")
    events = trace(args.steps, args.peak_mib * MiB, args.seed)
    result["trace"]["events"] = len(events)
    result["trace"]["bytes_asked"] = sum(n for op, _, n in events if op == "alloc")
    result["power_of_two_bound"] = power_of_two_bound(events)
    with backend.pinned_pool(args.node, max_cached=args.max_cached) as pool:
        result["aml"] = replay_aml(pool, events)
        result["aml"]["granule"] = pool.granule
        result["aml"]["max_cached"] = pool.max_cached
        if args.torch or args.bandwidth:
            import torch

            if args.torch:
                try:
                    result["torch"] = replay_torch(torch, events)
                except KeyError as exc:  # a PyTorch whose statistics hold neither layout
                    result["torch"] = {"error": str(exc), "torch": torch.__version__}
            if args.bandwidth:
                result["bandwidth"] = bandwidth(torch, pool)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
