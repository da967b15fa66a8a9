"""The Python overhead of aml_core.area.Area's hot path: mmap + munmap on an area whose
``_allocate`` only makes a buffer (``_new_buffer`` at a counter's next address) and whose
``_free`` does nothing, so what is timed is aml's own bookkeeping, not a native call.

Usage: python benchmarks/area_overhead.py [--out DIR] [--name NAME] [--label LABEL] [--quick]

It times, per operation (median over repetitions of the mean of a batch):
  pair_buffer   area.mmap(4096) then area.munmap(buf)
  pair_ptr      area.mmap(4096) then area.munmap(buf.ptr) (the buffer kept meanwhile: a
                dropped one is freed by its finalizer)
  drop          area.mmap(4096) dropped without munmap: freed by the buffer's finalizer
                (garbage collection) through the same path
  allocate      area._allocate(4096, None) alone: the no-op backend's own cost
  loop          an empty loop iteration (subtracted from nothing; for scale)
  pool_pair     the pair on aml_core.pool over the no-op area, with a block of the size
                cached: the pool's compiled fast path (the kernel, PoolKernel), or its Python path for
                an aml_core built before it
  pool_drop     the pool's mmap dropped without munmap (the finalizer's compiled path)
  pool_python_pair  the same pool with its compiled path uninstalled
                (``_set_pool(None)``): the Python ``_allocate``/``_free``
  gpu_python_pair  the pair on a GpuArea over a runtime whose Python methods do nothing
                (the Python path: GpuArea._allocate, _allocate_on, _free)
  native_pair   the pair on an area that installed a NativeAllocator
                (AreaBase._set_native) over aml_core's compiled do-nothing allocator: the
                compiled path, with no Python frame between mmap and the C calls
                (get_device, malloc; free), which cost nanoseconds
  gpu_native_pair  the pair on a GpuArea whose runtime offers that allocator as its
                table (what a CUDA or HIP device area runs, less the native calls)
The compiled cases are left out for an aml_core built before them (compare builds with
``--label``).
``bookkeeping_us`` is pair_buffer - allocate: what Area.mmap + Area.munmap add to the
backend's calls on the Python path; ``native_pair_us`` is what they add on the compiled
path (the issue's target: aml's device mmap+munmap within 1 µs of raw
cudaMalloc+cudaFree, so this must stay well under 1 µs). Results go to
``DIR/area_overhead_NAME[_LABEL].json``.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any, NoReturn

from machine_info import machine, out_dir

import aml_core
from aml_core import _buffer
from aml_core.area import Area
from aml_core.buffer import Buffer, DLDeviceType
from aml_core.errors import ErrorTable
from aml_core.gpu import GpuArea
from aml_core.gpu.runtime import AllocationOps, PointerAttributes, Runtime, RuntimeTraits
from aml_core.specs import DeviceInfo, Kind

#: False for an aml_core built before the compiled path (comparing builds with --label).
COMPILED = hasattr(_buffer, "NativeAllocator")
#: False for an aml_core built before buffers were freed by garbage collection: its areas
#: keep dropped buffers live until close(), so the drop cases are left out.
GC_FREE = hasattr(_buffer, "AreaLock")

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


class NativeNoOpArea(Area):
    """The compiled path over aml_core's do-nothing C allocator (fake addresses)."""

    def __init__(self) -> None:
        super().__init__(backend="noop", kind=Kind.DEVICE, device=0)
        self._native_free = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(_buffer._noop_functions()["free"])
        table = noop_table(self._fail)
        self._records: dict[int, tuple[str, int]] = {}
        self._set_native(
            table,
            "device",
            dl_device_type=2,
            host_accessible=False,
            records=self._records,
            record=self._record,
            slow_free={},
        )

    def _record(self, size: int) -> tuple[str, int]:
        """The native record of a size, kept (as GpuArea._record does)."""
        found = self._records[size] = ("noop", size)
        return found

    @staticmethod
    def _fail(function: str, code: int, *args: object) -> NoReturn:
        raise RuntimeError(f"{function} returned {code}")

    def _allocate(self, size: int, options: Any) -> Buffer:
        raise AssertionError("the compiled path allocates without _allocate")

    def _free(self, buffer: Buffer) -> None:  # close(): the same C free
        if self._native_free(buffer.ptr):
            raise RuntimeError("noop free failed")


def noop_table(fail: Any) -> Any:
    """A NativeAllocator over aml_core's compiled do-nothing allocator."""
    fn = _buffer._noop_functions()
    return _buffer.NativeAllocator(**fn, fail=fail, names={op: f"noop_{op}" for op in fn})


class NoOpRuntime(Runtime, AllocationOps):
    """A GPU runtime whose device calls and allocations do nothing (Python methods)."""

    traits = RuntimeTraits(
        name="noop", dl_device=DLDeviceType.CUDA, dl_host=DLDeviceType.CUDA_HOST, dl_managed=DLDeviceType.CUDA
    )
    errors = ErrorTable("noop", {})

    def __init__(self) -> None:
        self._next = itertools.count(1 << 40, 1 << 20).__next__

    def device_count(self) -> int:
        return 1

    def get_device(self) -> int:
        return 0

    def synchronize(self) -> None:
        pass

    def _set_device(self, device: int) -> None:
        pass

    def _device_info(self, device: int) -> DeviceInfo:
        return DeviceInfo(index=device, name="noop")

    def _malloc(self, size: int) -> int:
        return int(self._next())

    def _free(self, ptr: int) -> None:
        pass

    def _host_alloc(self, size: int, portable: bool, mapped: bool) -> int:
        return int(self._next())

    def _free_host(self, ptr: int) -> None:
        pass

    def _host_register(self, ptr: int, size: int, portable: bool, mapped: bool) -> None:
        pass

    def _host_unregister(self, ptr: int) -> None:
        pass

    def _host_device_pointer(self, ptr: int) -> int:
        return ptr

    def _pointer_attributes(self, ptr: int) -> PointerAttributes:
        return PointerAttributes("device", 0, ptr, ptr, False)

    def _memcpy(self, dst: int, src: int, size: int) -> None:
        pass

    def _memset(self, ptr: int, value: int, size: int) -> None:
        pass


class CompiledNoOpRuntime(NoOpRuntime):
    """The same, offering aml_core's compiled do-nothing allocator as its table."""

    def native_allocator(self) -> Any:
        return noop_table(self._fail)

    def _fail(self, function: str, code: int, *args: object) -> NoReturn:
        raise self.errors.error(function, code)


def per_op_us(body: Any, batch: int, reps: int) -> float:
    body(batch)  # warm up
    times = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        body(batch)
        times.append((time.perf_counter_ns() - t) / batch / 1000.0)
    return statistics.median(times)


def measure(batch: int, reps: int) -> dict[str, float]:
    area = NoOpArea()
    mmap, munmap, allocate = area.mmap, area.munmap, area._allocate

    def pair_buffer(n: int) -> None:
        for _ in range(n):
            munmap(mmap(SIZE))

    def pair_ptr(n: int) -> None:
        for _ in range(n):
            buf = mmap(SIZE)
            munmap(buf.ptr)

    def drop(n: int) -> None:
        for _ in range(n):
            mmap(SIZE)

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
    if GC_FREE:
        out["drop_us"] = per_op_us(drop, batch, reps)
    st = area.stats
    assert st.live_mappings == 0, st
    area.close()

    # The pool: aml_core.pool over a no-op area, one size cached (every mmap is a hit).
    slab_area = NoOpArea()
    pool = aml_core.pool(slab_area)
    pmmap, pmunmap = pool.mmap, pool.munmap
    pmunmap(pmmap(SIZE))

    def pool_pair(n: int) -> None:
        for _ in range(n):
            pmunmap(pmmap(SIZE))

    def pool_drop(n: int) -> None:
        for _ in range(n):
            pmmap(SIZE)

    out["pool_pair_us"] = per_op_us(pool_pair, batch, reps)
    if GC_FREE:
        out["pool_drop_us"] = per_op_us(pool_drop, batch, reps)
    cache = getattr(pool, "_pool_kernel", None)
    if cache is not None:  # the same pool with its compiled path uninstalled: Python only
        assert cache.fast_mmaps > 0
        pool._set_pool(None)
        out["pool_python_pair_us"] = per_op_us(pool_pair, batch, reps)
        pool._set_pool(cache)
    ps = pool.pool_stats
    assert (ps.bytes_in_use, ps.pool_misses) == (0, 1), ps
    pool.close()
    slab_area.close()

    gpu = GpuArea(NoOpRuntime(), 0, 0)
    gmmap, gmunmap = gpu.mmap, gpu.munmap

    def gpu_python_pair(n: int) -> None:
        for _ in range(n):
            gmunmap(gmmap(SIZE))

    out["gpu_python_pair_us"] = per_op_us(gpu_python_pair, batch, reps)
    gpu.close()
    if not COMPILED:
        return out

    live = _buffer._noop_control()
    native = NativeNoOpArea()
    nmmap, nmunmap = native.mmap, native.munmap

    def native_pair(n: int) -> None:
        for _ in range(n):
            nmunmap(nmmap(SIZE))

    out["native_pair_us"] = per_op_us(native_pair, batch, reps)
    assert native.stats.live_mappings == 0
    native.close()

    cgpu = GpuArea(CompiledNoOpRuntime(), 0, 0)
    assert cgpu._native_allocator is not None
    cmmap, cmunmap = cgpu.mmap, cgpu.munmap

    def gpu_native_pair(n: int) -> None:
        for _ in range(n):
            cmunmap(cmmap(SIZE))

    out["gpu_native_pair_us"] = per_op_us(gpu_native_pair, batch, reps)
    assert cgpu.stats.live_mappings == 0
    cgpu.close()
    assert _buffer._noop_control() == live
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, help="default: $OUT, else evidence/<date>-<machine>-area-overhead/"
    )
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
    out = out_dir(args.out, "area-overhead")
    out.mkdir(parents=True, exist_ok=True)
    stem = f"area_overhead_{args.name}" + (f"_{args.label}" if args.label else "")
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
