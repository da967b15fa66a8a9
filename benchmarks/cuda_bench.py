"""aml-cuda against the raw cuda-bindings calls, in one run on one GPU.

Measures, each aml figure next to its raw reference taken in the same run (the two
interleaved repetition by repetition, medians after warm-up):

1. alloc+free latency of device, pinned host, managed and mapped memory, 256 B .. 1 GiB:
   ``area.munmap(area.mmap(n))`` against cudaMalloc/cudaFree, cudaHostAlloc/cudaFreeHost,
   cudaMallocManaged/cudaFree, cudaHostAlloc(Mapped)+cudaHostGetDevicePointer/cudaFreeHost;
2. H2D and D2H copy bandwidth (1 GiB, cudaMemcpy) of aml pinned and mapped buffers
   against raw cudaMallocHost memory (the pinned ceiling of this run);
3. managed prefetch bandwidth (1 GiB, host -> device and back): ``area.prefetch``
   against cudaMemPrefetchAsync;
4. growing a buffer from 1 GiB to 2 GiB: aml's growable VMM buffer (maps 1 GiB more at
   the same address) against cudaMalloc(2 GiB) + copy of 1 GiB + cudaFree, and against
   the raw driver calls of the same VMM grow (cuMemCreate + cuMemMap + cuMemSetAccess);
5. IPC open in a child process: the first open of the process, the cold open of a
   second handle and the cached re-open, against raw cudaIpcOpenMemHandle in a child.

Usage on the GPU machine: ``python benchmarks/cuda_bench.py`` (writes cuda_bench.json
and cuda_bench.md to --out, default $OUT, else ``evidence/<date>-<machine>-cuda-bench/``;
prints the table last). ``--quick`` runs fewer
repetitions (a smoke test).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from machine_info import out_dir
from timing import batch_median_us, ck, human, paired

GiB = 1 << 30
MiB = 1 << 20
SIZES = (256, 64 << 10, 1 << 20, 64 << 20, 1 << 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="default: $OUT, else evidence/<date>-<machine>-cuda-bench/")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    quick = args.quick

    import aml_cuda
    import cuda.bindings
    from aml_cuda import CudaFlags
    from cuda.bindings import driver as drv
    from cuda.bindings import runtime as rt

    probe = aml_cuda.probe()
    if not probe.available:
        raise SystemExit(f"no usable CUDA GPU: {probe.reason}")
    dev = probe.devices[0]
    ck(rt.cudaSetDevice(0))
    ck(rt.cudaFree(0))
    meta: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "gpu": dev.name,
        "gpu_memory_bytes": dev.total_memory,
        "compute_capability": dev.details.get("compute_capability"),
        "pci_bus_id": dev.details.get("pci_bus_id"),
        "driver": dev.details.get("driver_version"),
        "cuda_driver_api": dev.details.get("cuda_driver_api"),
        "cuda_runtime_in_bindings": dev.details.get("cuda_runtime"),
        "cuda_bindings": cuda.bindings.__version__,
        "python": platform.python_version(),
        "aml_cuda": aml_cuda.__version__,
        "machine": platform.machine(),
    }
    for mod in ("numpy", "cupy", "torch"):
        try:
            meta[mod] = __import__(mod).__version__
        except Exception as exc:
            meta[mod] = f"missing ({type(exc).__name__})"
    print(json.dumps(meta), flush=True)
    results: dict[str, Any] = {"meta": meta}

    # -- 1. alloc+free latency ------------------------------------------------------------------
    attach_host = int(rt.cudaMemAttachHost)
    mapped_flag = int(rt.cudaHostAllocMapped)
    kinds: dict[str, tuple[int, Callable[[int], Callable[[], None]]]] = {}

    def raw_device(n: int) -> Callable[[], None]:
        def f() -> None:
            err, p = rt.cudaMalloc(n)
            if err:
                raise RuntimeError(err)
            (err,) = rt.cudaFree(p)
            if err:
                raise RuntimeError(err)

        return f

    def raw_host(n: int) -> Callable[[], None]:
        def f() -> None:
            err, p = rt.cudaHostAlloc(n, 0)
            if err:
                raise RuntimeError(err)
            (err,) = rt.cudaFreeHost(p)
            if err:
                raise RuntimeError(err)

        return f

    def raw_managed(n: int) -> Callable[[], None]:
        def f() -> None:
            err, p = rt.cudaMallocManaged(n, attach_host)
            if err:
                raise RuntimeError(err)
            (err,) = rt.cudaFree(p)
            if err:
                raise RuntimeError(err)

        return f

    def raw_mapped(n: int) -> Callable[[], None]:
        def f() -> None:
            err, p = rt.cudaHostAlloc(n, mapped_flag)
            if err:
                raise RuntimeError(err)
            err, _d = rt.cudaHostGetDevicePointer(p, 0)
            if err:
                raise RuntimeError(err)
            (err,) = rt.cudaFreeHost(p)
            if err:
                raise RuntimeError(err)

        return f

    kinds = {
        "device": (CudaFlags.DEFAULT, raw_device),
        "host (pinned)": (CudaFlags.ALLOC_HOST, raw_host),
        "managed": (CudaFlags.ALLOC_UNIFIED, raw_managed),
        "mapped": (CudaFlags.ALLOC_MAPPED | CudaFlags.ALLOC_HOST, raw_mapped),
    }

    def reps_for(kind: str, n: int) -> int:
        if quick:
            return 5 if n >= 64 * MiB and kind in ("host (pinned)", "mapped") else 20
        if kind in ("host (pinned)", "mapped"):
            return {256: 150, 65536: 150, MiB: 100, 64 * MiB: 25, GiB: 9}[n]
        if kind == "device":  # the sizes the <= 1 us target names get tight medians
            return {256: 3000, 65536: 1000, MiB: 3000, 64 * MiB: 2000, GiB: 40}[n]
        return {256: 1000, 65536: 1000, MiB: 1000, 64 * MiB: 500, GiB: 200}[n]

    alloc_rows: list[dict[str, Any]] = []
    for kind, (flags, raw_of) in kinds.items():
        area = aml_cuda.create(0, flags)
        for n in SIZES:

            def aml_fn(area: Any = area, n: int = n) -> None:
                area.munmap(area.mmap(n))

            reps = reps_for(kind, n)
            pairs: dict[str, Any] = {}
            raw_us, aml_us = paired(raw_of(n), aml_fn, reps, warm=max(2, min(20, reps // 10)), stats=pairs)
            row = {
                "kind": kind,
                "size": n,
                "reps": reps,
                "raw_us": raw_us,
                "aml_us": aml_us,
                "overhead_us": aml_us - raw_us,
                "ratio": aml_us / raw_us,
                "paired": pairs["paired"],
            }
            alloc_rows.append(row)
            print(json.dumps(row), flush=True)
        area.close()
    results["alloc_free"] = alloc_rows

    # Where the Python time of aml's device hot path goes (cProfile, 3000 mmap+munmap of 256 B).
    import cProfile
    import io
    import pstats

    prof_area = aml_cuda.create(0)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(3000):
        prof_area.munmap(prof_area.mmap(256))
    profiler.disable()
    prof_area.close()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    results["hot_path_profile"] = text.getvalue().splitlines()
    results["hot_path_breakdown"] = hot_path_breakdown(rt)
    print("breakdown", json.dumps(results["hot_path_breakdown"]), flush=True)

    # -- 2. copy bandwidth (pinned, mapped) ---------------------------------------------------------
    N = GiB
    copy_reps = 3 if quick else 15
    h2d = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
    d2h = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
    dev_area = aml_cuda.create(0)
    host_area = aml_cuda.create(0, CudaFlags.ALLOC_HOST)
    mapped_area = aml_cuda.create(0, CudaFlags.ALLOC_MAPPED | CudaFlags.ALLOC_HOST)
    dbuf = dev_area.mmap(N)
    hbuf = host_area.mmap(N)
    mbuf = mapped_area.mmap(N)
    raw_h = ck(rt.cudaMallocHost(N))
    raw_d = ck(rt.cudaMalloc(N))
    for p in (raw_h, hbuf.ptr, mbuf.ptr):
        ctypes.memset(p, 0x3C, N)
    ck(rt.cudaMemset(raw_d, 1, N))
    ck(rt.cudaDeviceSynchronize())

    def copier(dst: int, src: int, kind: Any) -> Callable[[], None]:
        def f() -> None:
            (err,) = rt.cudaMemcpy(dst, src, N, kind)
            if err:
                raise RuntimeError(err)

        return f

    def gbps(us: float) -> float:
        return N / (us * 1e-6) / 1e9

    copy: dict[str, Any] = {}
    for name, direction in (("H2D", h2d), ("D2H", d2h)):
        for label, buf in (("pinned", hbuf), ("mapped", mbuf)):
            if direction is h2d:
                raw_fn = copier(raw_d, raw_h, h2d)
                aml_fn2 = copier(dbuf.ptr, buf.device_ptr, h2d)
            else:
                raw_fn = copier(raw_h, raw_d, d2h)
                aml_fn2 = copier(buf.device_ptr, dbuf.ptr, d2h)
            raw_us, aml_us = paired(raw_fn, aml_fn2, copy_reps, warm=2)
            row = {"raw_pinned_GBps": gbps(raw_us), "aml_GBps": gbps(aml_us), "ratio": raw_us / aml_us}
            copy[f"{name} {label}"] = row
            print(name, label, json.dumps(row), flush=True)
    results["copy_1GiB"] = copy
    ck(rt.cudaFreeHost(raw_h))
    ck(rt.cudaFree(raw_d))
    for a in (dev_area, host_area, mapped_area):
        a.close()

    # -- 3. managed prefetch bandwidth ----------------------------------------------------------------
    managed_area = aml_cuda.create(0, CudaFlags.ALLOC_UNIFIED | CudaFlags.ALLOC_GLOBAL)
    mbuf2 = managed_area.mmap(N)
    raw_m = ck(rt.cudaMallocManaged(N, rt.cudaMemAttachGlobal))
    ctypes.memset(mbuf2.ptr, 5, N)
    ctypes.memset(raw_m, 5, N)
    stream = aml_cuda.stream(non_blocking=True)
    s = stream.handle
    dev_loc = rt.cudaMemLocation()
    dev_loc.type = rt.cudaMemLocationType.cudaMemLocationTypeDevice
    dev_loc.id = 0
    host_loc = rt.cudaMemLocation()
    host_loc.type = rt.cudaMemLocationType.cudaMemLocationTypeHost
    host_loc.id = 0

    def raw_pf(loc: Any) -> None:
        ck(rt.cudaMemPrefetchAsync(raw_m, N, loc, 0, s))
        ck(rt.cudaStreamSynchronize(s))

    def aml_pf(where: int | str) -> None:
        managed_area.prefetch(mbuf2, where, stream=stream)
        stream.synchronize()

    pf_reps = 3 if quick else 9
    prefetch: dict[str, Any] = {}
    for name, (raw_to, raw_back, aml_to, aml_back) in {
        "host->device": (dev_loc, host_loc, 0, "host"),
        "device->host": (host_loc, dev_loc, "host", 0),
    }.items():
        tr: list[float] = []
        ta: list[float] = []
        for i in range(pf_reps + 1):
            raw_pf(raw_back)
            aml_pf(aml_back)
            pair = [
                ("raw", lambda raw_to=raw_to: raw_pf(raw_to)),
                ("aml", lambda aml_to=aml_to: aml_pf(aml_to)),
            ]
            if i % 2:
                pair.reverse()
            for who, fn in pair:
                t0 = time.perf_counter_ns()
                fn()
                dt = (time.perf_counter_ns() - t0) / 1e3
                if i:  # the first round is warm-up
                    (tr if who == "raw" else ta).append(dt)
        raw_us, aml_us = statistics.median(tr), statistics.median(ta)
        prefetch[name] = {"raw_GBps": gbps(raw_us), "aml_GBps": gbps(aml_us), "ratio": raw_us / aml_us}
        print("prefetch", name, json.dumps(prefetch[name]), flush=True)
    results["managed_prefetch_1GiB"] = prefetch
    ck(rt.cudaFree(raw_m))
    managed_area.close()
    stream.close()

    # -- 4. growable 1 GiB -> 2 GiB ---------------------------------------------------------------------
    grow_reps = 3 if quick else 7
    vm = aml_cuda.virtual_memory(0)
    t_aml: list[float] = []
    t_copy: list[float] = []
    t_vmm: list[float] = []
    t_vmm_rel: list[float] = []
    prop = drv.CUmemAllocationProp()
    prop.type = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = 0
    acc = drv.CUmemAccessDesc()
    acc.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    acc.location.id = 0
    acc.flags = drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    for i in range(grow_reps + 1):
        gbuf = vm.growable(4 * GiB, GiB)
        ptr = gbuf.ptr
        t0 = time.perf_counter_ns()
        gbuf.grow(2 * GiB)
        dt_aml = (time.perf_counter_ns() - t0) / 1e3
        assert gbuf.ptr == ptr
        vm.munmap(gbuf)
        old = ck(rt.cudaMalloc(GiB))
        ck(rt.cudaMemset(old, 7, GiB))
        ck(rt.cudaDeviceSynchronize())
        t0 = time.perf_counter_ns()
        new = ck(rt.cudaMalloc(2 * GiB))
        ck(rt.cudaMemcpy(new, old, GiB, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice))
        ck(rt.cudaFree(old))
        ck(rt.cudaDeviceSynchronize())
        dt_copy = (time.perf_counter_ns() - t0) / 1e3
        ck(rt.cudaFree(new))
        # The raw driver calls of the same grow: one more GiB mapped at the end.
        va = ck(drv.cuMemAddressReserve(4 * GiB, 0, 0, 0))
        h1 = ck(drv.cuMemCreate(GiB, prop, 0))
        ck(drv.cuMemMap(va, GiB, 0, h1, 0))
        ck(drv.cuMemSetAccess(va, GiB, [acc], 1))
        t0 = time.perf_counter_ns()
        h2 = ck(drv.cuMemCreate(GiB, prop, 0))
        ck(drv.cuMemMap(int(va) + GiB, GiB, 0, h2, 0))
        ck(drv.cuMemSetAccess(int(va) + GiB, GiB, [acc], 1))
        dt_vmm = (time.perf_counter_ns() - t0) / 1e3
        # Like aml: the creation reference is dropped once mapped (the mapping keeps it).
        t0 = time.perf_counter_ns()
        h3 = ck(drv.cuMemCreate(GiB, prop, 0))
        ck(drv.cuMemMap(int(va) + 2 * GiB, GiB, 0, h3, 0))
        ck(drv.cuMemSetAccess(int(va) + 2 * GiB, GiB, [acc], 1))
        ck(drv.cuMemRelease(h3))
        dt_vmm_rel = (time.perf_counter_ns() - t0) / 1e3
        for h, off in ((h1, 0), (h2, GiB)):
            ck(drv.cuMemUnmap(int(va) + off, GiB))
            ck(drv.cuMemRelease(h))
        ck(drv.cuMemUnmap(int(va) + 2 * GiB, GiB))
        ck(drv.cuMemAddressFree(va, 4 * GiB))
        if i:
            t_aml.append(dt_aml)
            t_copy.append(dt_copy)
            t_vmm.append(dt_vmm)
            t_vmm_rel.append(dt_vmm_rel)
    vm.close()
    grow = {
        "aml_grow_us": statistics.median(t_aml),
        "raw_vmm_grow_us": statistics.median(t_vmm),
        "raw_vmm_grow_and_release_us": statistics.median(t_vmm_rel),
        "malloc_copy_free_us": statistics.median(t_copy),
        "speedup_vs_malloc_copy": statistics.median(t_copy) / statistics.median(t_aml),
        "ratio_vs_raw_vmm": statistics.median(t_aml) / statistics.median(t_vmm_rel),
    }
    results["growable_1GiB_to_2GiB"] = grow
    print("grow", json.dumps(grow), flush=True)

    # -- 5. IPC open: cold vs cached ---------------------------------------------------------------------
    # Each child opens two handles exported by this process: A is the first open of the
    # process (it also builds aml's import area), B the first open of another handle
    # in a process already set up; then A again, cached. The raw child opens A and B
    # with cudaIpcOpenMemHandle. gc.collect() first, so no collection falls in a timing.
    child = r"""
import ctypes, gc, json, pickle, sys, time
import aml_cuda
from cuda.bindings import runtime as rt_
a, b = (pickle.loads(bytes.fromhex(x)) for x in sys.argv[1:3])
r = aml_cuda.get_runtime(); r.set_device(a.device); r.synchronize()
clock = time.perf_counter_ns
if sys.argv[3] == "raw":
    out, opened = {}, []
    for name, handle in (("a", a), ("b", b)):  # A stays open while B opens, as in aml
        raw = ctypes.create_string_buffer(handle.data, 64)
        h = rt_.cudaIpcMemHandle_t(_ptr=ctypes.addressof(raw))
        gc.collect()
        lazy = rt_.cudaIpcMemLazyEnablePeerAccess
        t0 = clock(); err, p = rt_.cudaIpcOpenMemHandle(h, lazy); dt = clock() - t0
        assert int(err) == 0, err
        out[name] = dt / 1e3
        opened.append(p)
    for p in opened:
        rt_.cudaIpcCloseMemHandle(p)
    print(json.dumps(out)); sys.exit()
native = []
real_open = r._ipc_open_handle
def timed_open(data, size):
    t = clock(); p = real_open(data, size); native.append(clock() - t); return p
r._ipc_open_handle = timed_open
open_ = aml_cuda.ipc_open
gc.collect()
t0 = clock(); buf_a = open_(a); dt_a = clock() - t0
gc.collect()
t0 = clock(); buf_b = open_(b); dt_b = clock() - t0
cached = []
for _ in range(200):
    t0 = clock(); again = open_(a); cached.append(clock() - t0)
    assert again is buf_a
for _ in range(201):
    aml_cuda.ipc_close(buf_a)
aml_cuda.ipc_close(buf_b)
assert buf_a.freed and buf_b.freed
cached.sort()
print(json.dumps({"a": dt_a / 1e3, "b": dt_b / 1e3, "cached": cached[len(cached) // 2] / 1e3,
                  "native_a": native[0] / 1e3, "native_b": native[1] / 1e3}))
"""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    ipc_area = aml_cuda.create(0)
    # The exports keep their buffers alive (a dropped buffer is freed by the collector).
    exports = [ipc_area.ipc_export(ipc_area.mmap(64 * MiB)) for _ in range(2)]
    hexes = [pickle.dumps(export.handle).hex() for export in exports]
    got_aml: list[dict[str, float]] = []
    got_raw: list[dict[str, float]] = []
    for _ in range(2 if quick else 8):
        for mode in ("aml", "raw"):
            out = subprocess.run(
                [sys.executable, "-c", child, *hexes, mode],
                check=False,
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            if out.returncode:
                raise RuntimeError(out.stderr[-3000:])
            (got_aml if mode == "aml" else got_raw).append(json.loads(out.stdout.strip().splitlines()[-1]))

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    ipc = {
        "aml_first_open_us": med(got_aml, "a"),
        "aml_first_open_native_us": med(got_aml, "native_a"),
        "raw_first_open_us": med(got_raw, "a"),
        "aml_cold_open_us": med(got_aml, "b"),
        "aml_cold_open_native_us": med(got_aml, "native_b"),
        "raw_cold_open_us": med(got_raw, "b"),
        "aml_cached_open_us": med(got_aml, "cached"),
        "cold_over_cached": med(got_aml, "b") / med(got_aml, "cached"),
        "aml_cold_over_raw_cold": med(got_aml, "b") / med(got_raw, "b"),
        "children": len(got_aml),
        "aml_children": got_aml,
        "raw_children": got_raw,
    }
    results["ipc_open"] = ipc
    print("ipc", json.dumps({k: v for k, v in ipc.items() if not k.endswith("children")}), flush=True)
    ipc_area.close()

    # -- output -----------------------------------------------------------------------------------------
    md = render(results)
    out = out_dir(args.out, "cuda-bench")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "cuda_bench.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out, "cuda_bench.md"), "w") as f:
        f.write(md)
    print()
    print(md, flush=True)


def _median_us(fn: Callable[[], None], n: int = 20000) -> float:
    return batch_median_us(fn, n // 10, rounds=10, warm=n // 10)


def hot_path_breakdown(rt: Any) -> dict[str, float]:
    """Where aml's extra microseconds on device alloc+free come from, on this CPU:
    the Python of aml_core.area.Area alone (a do-nothing area), GpuArea over a runtime
    that does nothing, and the one native call aml adds (cudaGetDevice)."""
    import itertools

    from aml_cuda.runtime import CudaRuntime

    from aml_core.area import Area
    from aml_core.gpu import GpuArea
    from aml_core.specs import Kind

    counter = itertools.count(1 << 40, 1 << 20)

    class Bare(Area):
        def _allocate(self, size: int, options: Any) -> Any:
            return self._new_buffer(next(counter), size, host_accessible=False, dl_device=(2, 0), device=0)

        def _free(self, buffer: Any) -> None:
            pass

    class NoOpRuntime(CudaRuntime):
        """CUDA's runtime with device selection and allocation doing nothing."""

        def device_count(self) -> int:
            return 1

        def get_device(self) -> int:
            return 0

        def _set_device(self, device: int) -> None:
            pass

        def _malloc(self, size: int) -> int:
            return next(counter)

        def _free(self, ptr: int) -> None:
            pass

    from aml_core._buffer import NativeAllocator, _noop_control, _noop_functions

    class CompiledNoOpRuntime(NoOpRuntime):
        """The same, with aml_core's compiled do-nothing allocator as its table: GpuArea's
        mmap/munmap then run compiled (AreaBase's C path), as over CUDA's real table."""

        def native_allocator(self) -> NativeAllocator:
            fn = _noop_functions()
            return NativeAllocator(**fn, fail=self._native_fail, names={op: f"noop_{op}" for op in fn})

    bare = Bare(backend="noop", kind=Kind.DEVICE)
    gpu = GpuArea(NoOpRuntime(), 0, 0)
    assert gpu._native_allocator is None  # NoOpRuntime replaces the methods CUDA's table stands for
    compiled = GpuArea(CompiledNoOpRuntime(), 0, 0)
    assert compiled._native_allocator is not None
    real = GpuArea(CudaRuntime(), 0, 0)
    assert real._native_allocator is not None, "this cuda-bindings offers no compiled allocator"
    noop = NoOpRuntime()
    live = _noop_control()

    def get_device() -> None:
        err, _dev = rt.cudaGetDevice()
        if err:
            raise RuntimeError(err)

    from cuda.bindings import driver as drv

    def ctx_current() -> None:
        err, _ctx = drv.cuCtxGetCurrent()
        if err:
            raise RuntimeError(err)

    out = {
        "cuCtxGetCurrent_us": _median_us(ctx_current),
        "python_call_pair_us": _median_us(lambda: noop._free(noop._malloc(256))),
        "area_base_mmap_munmap_us": _median_us(lambda: bare.munmap(bare.mmap(256))),
        "gpu_area_mmap_munmap_noop_runtime_us": _median_us(lambda: gpu.munmap(gpu.mmap(256))),
        "gpu_area_compiled_noop_allocator_us": _median_us(lambda: compiled.munmap(compiled.mmap(256))),
        "cudaGetDevice_us": _median_us(get_device),
        "compiled_cudaGetDevice_us": _median_us(real._native_allocator.get_device),
    }
    assert _noop_control() == live
    bare.close()
    gpu.close()
    compiled.close()
    real.close()
    return out


def render(r: dict[str, Any]) -> str:
    m = r["meta"]
    lines = [
        f"# aml-cuda benchmark, {m['date']}",
        "",
        f"{m['gpu']} ({human(m['gpu_memory_bytes'])}, sm {m['compute_capability']}, {m['pci_bus_id']}), "
        f"driver {m['driver']} (CUDA driver API {m['cuda_driver_api']}), cuda-bindings {m['cuda_bindings']} "
        f"(runtime {m['cuda_runtime_in_bindings']}), Python {m['python']}, aml-cuda {m['aml_cuda']}, "
        f"CuPy {m['cupy']}, PyTorch {m['torch']}, NumPy {m['numpy']}.",
        "",
        "Medians after warm-up; aml and raw interleaved repetition by repetition in the same run.",
        "",
        "## alloc+free latency (µs): `area.munmap(area.mmap(n))` vs the raw cuda-bindings calls",
        "",
        "| kind | size | raw µs | aml µs | aml - raw µs | aml / raw | reps |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in r["alloc_free"]:
        lines.append(
            f"| {row['kind']} | {human(row['size'])} | {row['raw_us']:.2f} | {row['aml_us']:.2f} | "
            f"{row['overhead_us']:+.2f} | {row['ratio']:.3f} | {row['reps']} |"
        )
    b = r.get("hot_path_breakdown")
    if b:
        lines += [
            "",
            "Where aml's extra time on device alloc+free goes (this CPU, no-op runtimes, "
            "µs per mmap+munmap): "
            f"aml_core Area base class {b['area_base_mmap_munmap_us']:.2f}, GpuArea over a no-op runtime "
            f"{b['gpu_area_mmap_munmap_noop_runtime_us']:.2f} (a bare Python malloc/free pair "
            f"{b['python_call_pair_us']:.2f}); GpuArea's compiled path over a no-op C allocator "
            f"{b['gpu_area_compiled_noop_allocator_us']:.2f} (what aml adds to the C calls); "
            f"plus the cudaGetDevice call aml makes to record and restore "
            f"the device {b['cudaGetDevice_us']:.2f} through cuda-bindings' Python, "
            f"{b['compiled_cudaGetDevice_us']:.2f} through the compiled table from Python "
            f"(cuCtxGetCurrent, which aml's VMM calls make, "
            f"{b['cuCtxGetCurrent_us']:.2f}). Hot loops: in the interleaved measurement above the "
            "Python runs with caches cooled by the driver's work, so it costs more there.",
        ]
    lines += [
        "",
        "## copy bandwidth, 1 GiB cudaMemcpy (GB/s): aml buffers vs raw cudaMallocHost memory (the ceiling)",
        "",
        "| copy | raw pinned GB/s | aml GB/s | aml / raw |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, row in r["copy_1GiB"].items():
        lines.append(
            f"| {name} | {row['raw_pinned_GBps']:.1f} | {row['aml_GBps']:.1f} | {row['ratio']:.3f} |"
        )
    lines += [
        "",
        "## managed prefetch, 1 GiB (GB/s): `area.prefetch` vs cudaMemPrefetchAsync",
        "",
        "| direction | raw GB/s | aml GB/s | aml / raw |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, row in r["managed_prefetch_1GiB"].items():
        lines.append(f"| {name} | {row['raw_GBps']:.1f} | {row['aml_GBps']:.1f} | {row['ratio']:.3f} |")
    g = r["growable_1GiB_to_2GiB"]
    lines += [
        "",
        "## growing a 1 GiB device buffer to 2 GiB (µs)",
        "",
        "| method | µs | |",
        "| --- | ---: | --- |",
        f"| aml growable `grow(2 GiB)` (address kept) | {g['aml_grow_us']:.0f} | |",
        f"| raw cuMemCreate+cuMemMap+cuMemSetAccess+cuMemRelease of 1 GiB (what aml does) | "
        f"{g['raw_vmm_grow_and_release_us']:.0f} | aml / raw {g['ratio_vs_raw_vmm']:.3f} |",
        f"| raw cuMemCreate+cuMemMap+cuMemSetAccess of 1 GiB (handle kept) | {g['raw_vmm_grow_us']:.0f} | |",
        f"| cudaMalloc(2 GiB) + copy 1 GiB + cudaFree | {g['malloc_copy_free_us']:.0f} | "
        f"aml is {g['speedup_vs_malloc_copy']:.1f}x faster |",
    ]
    i = r["ipc_open"]
    lines += [
        "",
        f"## IPC open in a child process (µs, medians of {i['children']} children each way)",
        "",
        "| open | aml µs | of which cudaIpcOpenMemHandle | raw µs | aml / raw |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| first open of the process (aml also builds its import area) | {i['aml_first_open_us']:.1f} | "
        f"{i['aml_first_open_native_us']:.1f} | {i['raw_first_open_us']:.1f} | "
        f"{i['aml_first_open_us'] / i['raw_first_open_us']:.2f} |",
        f"| cold open of a second handle | {i['aml_cold_open_us']:.1f} | "
        f"{i['aml_cold_open_native_us']:.1f} | "
        f"{i['raw_cold_open_us']:.1f} | {i['aml_cold_over_raw_cold']:.2f} |",
        f"| cached open (the same handle again) | {i['aml_cached_open_us']:.2f} | - | - | "
        f"cold / cached {i['cold_over_cached']:.0f}x |",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
