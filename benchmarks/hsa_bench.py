"""aml-hsa's virtual-memory cycle on the forward double against the same cycle made directly
with the CUDA driver (cuda-bindings), in one run on one NVIDIA GPU.

One cycle is reserve + create + map + set_access + unmap + release + free of one allocation:

* ``aml-hsa``: ``aml_hsa.address_reserve``, ``handle_create``, ``map``, ``set_access``,
  ``unmap``, ``handle_release``, ``address_free`` (checked and tracked in Python, through
  ctypes, into the HSA driver double in forward mode, which checks and tracks again and
  calls cuMemAddressReserve, cuMemCreate (POSIX-fd handle), cuMemMap, cuMemSetAccess,
  cuMemUnmap, cuMemRelease, cuMemAddressFree);
* ``aml VirtualMemory``: the shared API over the same runtime (``vm.munmap(vm.mmap(n))``:
  the same seven calls);
* ``raw cuMem*``: the seven driver calls through cuda-bindings, POSIX-fd handles too.

The figures are medians of interleaved repetitions after warm-up, for sizes of 1, 16 and
256 granules (2 MiB granules on current NVIDIA GPUs).

Usage on the GPU machine (the forward double built and named by AML_HSA_LIBRARY, as
``backends/hsa/tests/run_forward.sh`` does): ``python benchmarks/hsa_bench.py`` writes
hsa_bench.json and hsa_bench.md to --out (default $OUT, else
``evidence/<date>-<machine>-hsa-bench/``) and prints the table. ``--quick`` runs
fewer repetitions (a smoke test).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from machine_info import out_dir
from timing import ck


def median_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1e3


def interleaved(fns: dict[str, Callable[[], None]], reps: int, warm: int) -> dict[str, float]:
    """Median microseconds of each function, run in rotating order repetition by repetition."""
    for _ in range(warm):
        for fn in fns.values():
            fn()
    names = list(fns)
    times: dict[str, list[int]] = {n: [] for n in names}
    clock = time.perf_counter_ns
    for i in range(reps):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            t0 = clock()
            fns[name]()
            times[name].append(clock() - t0)
    return {n: median_us(t) for n, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="default: $OUT, else evidence/<date>-<machine>-hsa-bench/")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    reps, warm = (20, 3) if args.quick else (300, 20)

    import aml_hsa
    from aml_hsa import Permission
    from cuda.bindings import driver as drv

    probe = aml_hsa.probe()
    if not probe.available:
        raise SystemExit(f"aml-hsa is not usable here: {probe.reason}")
    rt = aml_hsa.get_runtime()
    pool = aml_hsa.device_pool(0)
    gpu = rt.gpus[0]
    g = pool.granule
    # The double retains device 0's primary context; the raw calls use it too.
    ck(drv.cuInit(0))
    ctx = ck(drv.cuDevicePrimaryCtxRetain(ck(drv.cuDeviceGet(0))))
    ck(drv.cuCtxSetCurrent(ctx))
    prop = drv.CUmemAllocationProp()
    prop.type = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = 0
    acc = drv.CUmemAccessDesc()
    acc.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    acc.location.id = 0
    acc.flags = drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    vm = aml_hsa.virtual_memory(0)

    rows: list[dict[str, Any]] = []
    for granules in (1, 16, 256):
        n = granules * g

        def hsa_cycle(n: int = n) -> None:
            va = aml_hsa.address_reserve(n)
            h = aml_hsa.handle_create(pool, n, aml_hsa.MemoryType.PINNED)
            aml_hsa.map(va, n, h)
            aml_hsa.set_access(va, n, [(gpu, Permission.RW)])
            aml_hsa.unmap(va, n)
            aml_hsa.handle_release(h)
            aml_hsa.address_free(va, n)

        def vm_cycle(n: int = n) -> None:
            vm.munmap(vm.mmap(n))

        def raw_cycle(n: int = n) -> None:
            ck(drv.cuCtxSetCurrent(ctx))
            va = ck(drv.cuMemAddressReserve(n, 0, 0, 0))
            h = ck(drv.cuMemCreate(n, prop, 0))
            ck(drv.cuMemMap(va, n, 0, h, 0))
            ck(drv.cuMemSetAccess(va, n, [acc], 1))
            ck(drv.cuMemUnmap(va, n))
            ck(drv.cuMemRelease(h))
            ck(drv.cuMemAddressFree(va, n))

        result = interleaved(
            {"aml-hsa": hsa_cycle, "aml VirtualMemory": vm_cycle, "raw cuMem*": raw_cycle}, reps, warm
        )
        rows.append({"bytes": n, "granules": granules, **{f"{k} us": v for k, v in result.items()}})
        print(rows[-1], flush=True)

    vm.close()
    ck(drv.cuDevicePrimaryCtxRelease(ck(drv.cuDeviceGet(0))))
    meta = {
        "date": datetime.date.today().isoformat(),
        "gpu": probe.devices[0].name,
        "granule": g,
        "recommended_granule": pool.rec_granule,
        "library": rt.lib.path,
        "python": platform.python_version(),
        "aml_hsa": aml_hsa.__version__,
        "repetitions": reps,
        "warm_up": warm,
    }
    out = out_dir(args.out, "hsa-bench")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "hsa_bench.json"), "w") as f:
        json.dump({"meta": meta, "cycle": rows}, f, indent=2)
    lines = [
        f"# aml-hsa virtual-memory cycle on the forward double, {meta['gpu']} ({meta['date']})",
        "",
        "reserve + create + map + set_access(RW) + unmap + release + free, median microseconds",
        "",
        "| size | aml-hsa (vendor names) | aml VirtualMemory mmap+munmap | raw cuMem* (cuda-bindings) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['granules']} x {g // 1024} KiB | {r['aml-hsa us']:.1f} | {r['aml VirtualMemory us']:.1f} "
            f"| {r['raw cuMem* us']:.1f} |"
        )
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "hsa_bench.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
