"""Allocator benchmark: aml's pool against the allocators a user would pick instead,
in one process and one run, interleaved.

Usage on the GPU machine (writes <name>.json, <name>.md and <name>_*.png to --out, default
$OUT, else a new run folder ``evidence/<date>-<machine>-alloc-bench/``; prints the summary
last)::

    PYTHONUNBUFFERED=1 python benchmarks/alloc_bench.py --out $OUT

and on any CPU, the host pool against the host area and raw ``mmap.mmap``::

    PYTHONUNBUFFERED=1 python benchmarks/alloc_bench.py --host   # evidence/<date>-<machine>-alloc-bench-host/

Peers (GPU): ``aml area`` (``aml_cuda.create(0)``: cudaMalloc per mmap), ``aml area,
stream-ordered`` (the same area's ``mmap(n, stream=s)``: cudaMallocAsync), ``aml pool``
(``aml_core.pool`` over it), ``aml pool, on a stream`` (the pool's per-stream lists:
``pool.mmap(n, stream=s)``), ``aml expandable pool`` (over ``aml_cuda.virtual_memory(0)``),
raw ``cudaMalloc``/``cudaFree`` and ``cudaMallocAsync``/``cudaFreeAsync`` (the device's
default memory pool) through cuda-bindings, CuPy's ``MemoryPool`` (plain and on a stream),
RMM's pool, PyTorch's caching allocator through its allocator entry
(``torch.cuda.caching_allocator_alloc``/``caching_allocator_delete``) and, labelled as a
whole tensor's creation, through ``torch.empty``, and cuda.core's
``DeviceMemoryResource``. A peer that is not installed (or fails to start) is skipped and
the reason is written down.

The harness rule (``call_shape.py``): every peer is timed through the callables its
library offers, bound (a bound method, a ``functools.partial`` of one,
``operator.methodcaller``, ``id`` as the free of a peer whose handle frees when dropped);
each peer's ``pays`` says what one call costs it, and the markdown lists every peer's
benchmark frames. cudaMalloc, cudaMallocAsync (error tuples to check) and RMM (the size
``deallocate`` needs back) pay one benchmark frame a call, and are compared only with an
aml control that pays the same (``aml ... (+1/+1 frames)``, :class:`Framed`); a ratio
between two shapes is refused.

Measures:

1. alloc+free of one size (256 B, 64 KiB, 1 MiB, 64 MiB, 1 GiB): each round times a
   batch of cycles of every peer, in ``paired_stats.alternating`` order; every round's
   batch mean is kept, and a peer's figure is their median;
2. a mixed-size trace (a training step's allocation sizes, see :func:`training_trace`),
   ``--repeats`` times (10) per peer in alternating order: time per operation and *peak
   reserved* memory, the fragmentation measure (for peers that report it; the ideal is the
   trace's peak of live bytes);
3. 16 threads allocating and freeing mixed sizes at once, ``--repeats`` times, each thread
   on its own stream where the peer has streams: time per operation (wall time x threads /
   operations).

The comparisons (:data:`COMPARISONS`) are the median of the paired ratios (aml / peer: two
peers' samples of one round, or of one repeat) with a bootstrap 95% interval
(``paired_stats.py``); issue 19's targets (the pool at most 0.8x CuPy's at every size, on a
stream at most 1.0x CuPy's on a stream, 16 threads on streams at most CuPy's) are "met"
only where the interval's high end meets them, "not shown" otherwise. Every sample is in the
JSON. Run time: about two minutes on an H200 machine (``--quick`` for a smoke test).
``--tests threads --peer NAME ...`` runs one measurement for some peers alone (their
controls follow): issue 31 asks for the threads test on streams in three separate runs.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import mmap
import operator
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import call_shape
import paired_stats
from machine_info import machine as shared_machine
from machine_info import out_dir
from timing import ck

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
SIZES = (256, 64 * KiB, MiB, 64 * MiB, GiB)
#: the measurements, in the order they run (``--tests`` picks some)
TESTS = ("alloc", "trace", "threads")


def human(n: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n:.0f} B"


# -- peers -------------------------------------------------------------------------------------------


class Peer:
    """An allocator: ``alloc(n)`` returns a handle that ``free(handle)`` releases.
    ``native`` peers make a system or driver call per allocation (fewer repetitions).

    The timing loops call what :meth:`calls` returns, in the thread that times them (after
    :meth:`thread_init` in the threads test): the harness rule (``call_shape.py``) is that
    these are the library's own callables, bound, wherever the library offers one."""

    name = "?"
    native = False
    #: what a call of this peer pays, for the markdown (filled by each peer)
    pays = ""

    def alloc(self, n: int) -> Any:
        raise NotImplementedError

    def free(self, h: Any) -> None:
        raise NotImplementedError

    def calls(self) -> tuple[Callable[[int], Any], Callable[[Any], Any]]:
        """(alloc, free) for the calling thread."""
        return self.alloc, self.free

    def shape(self) -> tuple[int, int]:
        """Benchmark frames per (alloc, free) call, as ``call_shape.shape`` counts them."""
        return call_shape.shape(*self.calls())

    def reserved(self) -> int | None:
        """Bytes currently held from the system/driver, if the peer reports it."""
        return None

    def peak_reserved(self) -> int | None:
        """The peak of reserved() since reset_peak(), if the peer tracks it itself."""
        return None

    def reset_peak(self) -> None:
        pass

    def release(self) -> None:
        """Give cached memory back (between measurements)."""

    def sync(self) -> None:
        pass

    def thread_init(self) -> None:
        """Called first in each thread of the threads test (a context to make current)."""

    def close(self) -> None:
        pass


class AmlArea(Peer):
    pays = "the area's bound `mmap` and `munmap`: no benchmark frame"

    def __init__(self, name: str, area: Any, native: bool) -> None:
        self.name = name
        self.area = area
        self.native = native
        if type(self).alloc is Peer.alloc:  # bound methods: no extra frame per call
            self.alloc = area.mmap  # type: ignore[method-assign]
            self.free = area.munmap  # type: ignore[method-assign]

    def close(self) -> None:
        self.area.close()


class AmlPool(AmlArea):
    pays = "the pool's bound `mmap` and `munmap`: no benchmark frame"

    def __init__(self, name: str, pool: Any, keep_area: bool = False) -> None:
        super().__init__(name, pool, native=False)
        self.keep_area = keep_area

    def reserved(self) -> int:
        return int(self.area.pool_stats.bytes_reserved)

    def peak_reserved(self) -> int:
        return int(self.area.pool_stats.peak_bytes_reserved)

    def reset_peak(self) -> None:
        self.area.reset_peak()

    def release(self) -> None:
        self.area.trim()

    def close(self) -> None:
        under = self.area.area
        self.area.close()
        if not self.keep_area:
            under.close()


class Framed(Peer):
    """The control of a comparison whose peer pays benchmark frames: ``peer`` called
    through ``frames`` (alloc, free) Python frames of the benchmark more than it pays
    itself, so that both sides of the ratio pay the same harness. It shares ``peer``'s
    allocator (closed with ``peer``)."""

    def __init__(self, peer: Peer, frames: tuple[int, int]) -> None:
        self.peer = peer
        self.extra = frames
        self.native = peer.native
        self.name = f"{peer.name} (+{frames[0]}/+{frames[1]} frames)"
        self.pays = f"{peer.name}'s calls through {frames[0]} and {frames[1]} Python frames of the benchmark"

    def calls(self) -> tuple[Callable[[int], Any], Callable[[Any], Any]]:
        alloc, free = self.peer.calls()
        return call_shape.framed(alloc, self.extra[0]), call_shape.framed(free, self.extra[1])

    def shape(self) -> tuple[int, int]:
        a, f = self.peer.shape()
        return a + self.extra[0], f + self.extra[1]

    def reserved(self) -> int | None:
        return self.peer.reserved()

    def peak_reserved(self) -> int | None:
        return self.peer.peak_reserved()

    def reset_peak(self) -> None:
        self.peer.reset_peak()

    def release(self) -> None:
        self.peer.release()

    def sync(self) -> None:
        self.peer.sync()

    def thread_init(self) -> None:
        self.peer.thread_init()


class RawMmap(Peer):
    """Python's mmap.mmap (private anonymous), the system call aml's host area makes."""

    name = "raw mmap"
    native = True
    pays = "one benchmark frame each for `mmap.mmap(...)` and `.close()`"

    def alloc(self, n: int) -> Any:
        return mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)

    def free(self, h: Any) -> None:
        h.close()


class Touched(Peer):
    """Another peer's allocations with one byte written per page (NumPy, strided): the
    page faults a fresh mapping pays and a reused pooled block does not."""

    def __init__(self, peer: Peer) -> None:
        import numpy as np

        self.peer = peer
        self.name = f"{peer.name}, touched"
        self.native = peer.native
        self.np = np
        self.pays = f"{peer.name}'s calls in one benchmark frame each, and the page touches"

    def alloc(self, n: int) -> Any:
        h = self.peer.alloc(n)
        arr = self.np.frombuffer(h, dtype=self.np.uint8)
        arr[:: mmap.PAGESIZE] = 1
        del arr
        return h

    def free(self, h: Any) -> None:
        self.peer.free(h)

    def shape(self) -> tuple[int, int]:
        a, f = self.peer.shape()  # this peer's frame, then the inner peer's calls
        return a + 1, f + 1

    def reserved(self) -> int | None:
        return self.peer.reserved()

    def peak_reserved(self) -> int | None:
        return self.peer.peak_reserved()

    def reset_peak(self) -> None:
        self.peer.reset_peak()

    def release(self) -> None:
        self.peer.release()


def host_peers(skipped: dict[str, str]) -> list[Peer]:
    import aml_core
    from aml_core.host import HostArea

    peers: list[Peer] = [
        RawMmap(),
        AmlArea("aml host area", HostArea(), native=True),
        AmlPool("aml pool", aml_core.pool(HostArea())),
    ]
    try:
        peers += [Touched(p) for p in peers]
    except ImportError as exc:
        skipped["touched peers"] = f"needs NumPy ({exc})"
    return peers


#: the peers' names, as the comparisons name them
CUPY, CUPY_STREAM = "CuPy MemoryPool", "CuPy MemoryPool, on a stream"
TORCH_ALLOC = "PyTorch caching allocator (caching_allocator_alloc)"
TORCH_EMPTY = "PyTorch torch.empty (a whole tensor)"
POOL, POOL_STREAM, POOL_ALTERNATE = (
    "aml pool",
    "aml pool, on a stream",
    "aml pool, plain and stream alternately",
)


def gpu_peers(skipped: dict[str, str], meta: dict[str, Any]) -> list[Peer]:
    """Every GPU peer that starts; the others go to ``skipped`` with the reason."""
    peers: list[Peer] = []

    def attempt(name: str, make: Callable[[], Peer]) -> None:
        try:
            peers.append(make())
        except Exception as exc:  # any failure: the peer is skipped, with why
            skipped[name] = f"{type(exc).__name__}: {exc}"
            print(f"skipped {name}: {skipped[name]}", flush=True)

    rt: Any = None
    try:
        from cuda.bindings import runtime as rt

        (err,) = rt.cudaFree(0)
        if int(err):
            raise RuntimeError(repr(err))
    except Exception as exc:
        skipped["cuda-bindings"] = f"{type(exc).__name__}: {exc}"
        rt = None

    # aml
    def aml_area() -> Peer:
        import aml_cuda

        return AmlArea("aml area", aml_cuda.create(0), native=True)

    def aml_pool() -> Peer:
        import aml_cuda

        import aml_core

        return AmlPool(POOL, aml_core.pool(aml_cuda.create(0)))

    def aml_expandable() -> Peer:
        import aml_cuda

        import aml_core

        total = int(meta.get("gpu_memory_bytes") or 80 * GiB)
        vm = aml_cuda.virtual_memory(0)
        return AmlPool("aml expandable pool", aml_core.pool(vm, expandable=True, capacity=total))

    def aml_stream_ordered() -> Peer:
        import aml_cuda

        area = aml_cuda.create(0)
        try:
            stream = aml_cuda.stream(non_blocking=True)
        except BaseException:
            area.close()
            raise

        class StreamOrderedArea(AmlArea):
            pays = "`functools.partial(area.mmap, stream=s)` and the bound `munmap`: no benchmark frame"

            def __init__(self) -> None:
                super().__init__("aml area, stream-ordered", area, native=False)
                self.alloc = functools.partial(area.mmap, stream=stream)  # type: ignore[method-assign]

            def sync(self) -> None:
                stream.synchronize()

            def close(self) -> None:
                stream.synchronize()
                area.close()
                stream.close()

        return StreamOrderedArea()

    def aml_pool_on_stream(alternate: bool = False) -> Peer:
        import aml_cuda

        import aml_core

        pool = aml_core.pool(aml_cuda.create(0))
        try:
            main = aml_cuda.stream(non_blocking=True)
        except BaseException:
            pool.area.close()
            pool.close()
            raise
        local = threading.local()
        made: list[Any] = [main]

        class PoolOnStream(AmlPool):
            """Each thread on a stream of its own (the main thread on ``main``), through
            ``functools.partial(pool.mmap, stream=its stream)`` and the bound
            ``munmap``; with ``alternate``, every other request is a plain (host-order)
            one, chosen in a Python frame of the benchmark (no peer is compared with it)."""

            flip = False

            def __init__(self, name: str, pool: Any) -> None:
                super().__init__(name, pool)
                self.pays = (
                    "one benchmark frame per alloc (the plain/stream choice) and the bound `munmap`"
                    if alternate
                    else "`functools.partial(pool.mmap, stream=s)` (its thread's stream) and "
                    "the bound `munmap`: no benchmark frame"
                )

            def _alternate(self, n: int) -> Any:
                self.flip = not self.flip
                if self.flip:
                    return pool.mmap(n)
                return pool.mmap(n, stream=getattr(local, "stream", main))

            def calls(self) -> tuple[Callable[[int], Any], Callable[[Any], Any]]:
                if alternate:
                    return self._alternate, pool.munmap
                return functools.partial(pool.mmap, stream=getattr(local, "stream", main)), pool.munmap

            def thread_init(self) -> None:
                local.stream = aml_cuda.stream(non_blocking=True)
                made.append(local.stream)

            def sync(self) -> None:
                for s in made:
                    s.synchronize()

            def close(self) -> None:
                self.sync()
                super().close()
                for s in made:
                    s.close()

        return PoolOnStream(POOL_ALTERNATE if alternate else POOL_STREAM, pool)

    attempt("aml area", aml_area)
    attempt("aml area, stream-ordered", aml_stream_ordered)
    attempt(POOL, aml_pool)
    attempt(POOL_STREAM, aml_pool_on_stream)
    attempt(POOL_ALTERNATE, lambda: aml_pool_on_stream(alternate=True))
    attempt("aml expandable pool", aml_expandable)

    if rt is not None:

        class RawMalloc(Peer):
            """cuda-bindings returns an (error, pointer) tuple: each call is checked in one
            benchmark frame, and aml is measured beside it through the same frames."""

            name = "cudaMalloc"
            native = True
            pays = "one benchmark frame each for `cudaMalloc` and `cudaFree` (their error checks)"

            def alloc(self, n: int) -> Any:
                err, p = rt.cudaMalloc(n)
                if err:
                    raise MemoryError(repr(err))
                return p

            def free(self, h: Any) -> None:
                (err,) = rt.cudaFree(h)
                if err:
                    raise RuntimeError(repr(err))

        class RawMallocAsync(Peer):
            """The device's default memory pool on one non-blocking stream per thread; each
            call is checked in one benchmark frame (cuda-bindings returns error tuples)."""

            name = "cudaMallocAsync"
            pays = "one benchmark frame each for `cudaMallocAsync` and `cudaFreeAsync` (their error checks)"

            def __init__(self) -> None:
                self.main = ck(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))
                self.streams = [self.main]
                self.local = threading.local()
                self.pool = ck(rt.cudaDeviceGetDefaultMemPool(0))
                self.high = rt.cudaMemPoolAttr.cudaMemPoolAttrReservedMemHigh
                self.current = rt.cudaMemPoolAttr.cudaMemPoolAttrReservedMemCurrent

            def alloc(self, n: int) -> Any:
                err, p = rt.cudaMallocAsync(n, getattr(self.local, "stream", self.main))
                if err:
                    raise MemoryError(repr(err))
                return p

            def free(self, h: Any) -> None:
                (err,) = rt.cudaFreeAsync(h, getattr(self.local, "stream", self.main))
                if err:
                    raise RuntimeError(repr(err))

            def thread_init(self) -> None:
                self.local.stream = ck(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))
                self.streams.append(self.local.stream)

            def _attr(self, attr: Any) -> int:
                return int(ck(rt.cudaMemPoolGetAttribute(self.pool, attr)))

            def reserved(self) -> int:
                return self._attr(self.current)

            def peak_reserved(self) -> int:
                return self._attr(self.high)

            def reset_peak(self) -> None:
                # cuuint64_t lives in the driver module; the runtime call takes it as is.
                from cuda.bindings import driver

                ck(rt.cudaMemPoolSetAttribute(self.pool, self.high, driver.cuuint64_t(0)))

            def sync(self) -> None:
                for s in self.streams:
                    ck(rt.cudaStreamSynchronize(s))

            def release(self) -> None:
                self.sync()
                ck(rt.cudaMemPoolTrimTo(self.pool, 0))

            def close(self) -> None:
                self.release()
                for s in self.streams:
                    ck(rt.cudaStreamDestroy(s))

        attempt("cudaMalloc", RawMalloc)
        attempt("cudaMallocAsync", RawMallocAsync)

    def cupy_pool() -> Peer:
        import cupy

        class CupyPool(Peer):
            """CuPy's pool: its bound ``malloc``; the block goes back when the
            ``MemoryPointer`` is dropped, so ``free`` is the builtin ``id`` (a C call that
            does nothing: the pointer is dropped as the loop goes on)."""

            name = CUPY
            pays = (
                "the pool's bound `malloc` and the builtin `id` as free (the drop frees): no benchmark frame"
            )

            def __init__(self) -> None:
                self.pool = cupy.cuda.MemoryPool()
                self.alloc = self.pool.malloc  # type: ignore[method-assign]
                self.free = id  # type: ignore[method-assign,assignment]

            def reserved(self) -> int:
                return int(self.pool.total_bytes())

            def release(self) -> None:
                self.pool.free_all_blocks()

        meta["cupy"] = cupy.__version__
        return CupyPool()

    def cupy_pool_on_stream() -> Peer:
        import cupy

        local = threading.local()

        class CupyPoolOnStream(Peer):
            """CuPy's pool with a non-blocking stream current (each thread its own): CuPy
            keeps a free list per stream and reads the current stream inside ``malloc``,
            so the calls are the bound ``malloc`` and ``id``, as for the plain pool."""

            name = CUPY_STREAM
            pays = "the pool's bound `malloc` (on the thread's current stream) and `id`: no benchmark frame"

            def __init__(self) -> None:
                self.pool = cupy.cuda.MemoryPool()
                self.alloc = self.pool.malloc  # type: ignore[method-assign]
                self.free = id  # type: ignore[method-assign,assignment]
                self.streams: list[Any] = []
                self.thread_init()

            def thread_init(self) -> None:
                cupy.cuda.Device(0).use()
                local.stream = cupy.cuda.Stream(non_blocking=True)
                local.stream.use()
                self.streams.append(local.stream)

            def sync(self) -> None:
                for s in self.streams:
                    s.synchronize()

            def reserved(self) -> int:
                return int(self.pool.total_bytes())

            def release(self) -> None:
                self.pool.free_all_blocks()

            def close(self) -> None:
                self.sync()
                cupy.cuda.Stream.null.use()

        return CupyPoolOnStream()

    def rmm_pool() -> Peer:
        import rmm

        class RmmPool(Peer):
            """RMM's pool (PoolMemoryResource over cudaMalloc), allocate/deallocate on the
            default stream, as rmm.allocators.cupy and .torch call it. ``deallocate``
            needs the size back: one benchmark frame on free (aml's control pays it too)."""

            name = "RMM pool"
            pays = (
                "one benchmark frame each: alloc keeps the size that `deallocate(ptr, size)` needs back, "
                "free passes it"
            )

            def __init__(self) -> None:
                self.mr = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=1 << 30)
                self.allocate = self.mr.allocate
                self.deallocate = self.mr.deallocate
                self.sizes: dict[int, int] = {}

            def calls(self) -> tuple[Callable[[int], Any], Callable[[Any], Any]]:
                sizes = self.sizes
                allocate, deallocate = self.allocate, self.deallocate

                def free(p: int) -> None:
                    deallocate(p, sizes.pop(p))

                def alloc(n: int) -> int:  # the size for free: one frame on alloc as well
                    p = allocate(n)
                    sizes[p] = n
                    return int(p)

                return alloc, free

        meta["rmm"] = rmm.__version__
        return RmmPool()

    def torch_peers() -> list[Peer]:
        import torch

        torch.cuda.init()

        class TorchCounters(Peer):
            def reserved(self) -> int:
                return int(torch.cuda.memory_reserved(0))

            def peak_reserved(self) -> int:
                return int(torch.cuda.max_memory_reserved(0))

            def reset_peak(self) -> None:
                torch.cuda.reset_peak_memory_stats(0)

            def release(self) -> None:
                torch.cuda.empty_cache()

        class TorchAllocator(TorchCounters):
            """PyTorch's caching allocator through its public allocator entry:
            ``torch.cuda.caching_allocator_alloc(n, device=0)`` (Python in torch: it finds
            the current stream, enters the device) and ``caching_allocator_delete``."""

            name = TORCH_ALLOC
            pays = (
                "`functools.partial(torch.cuda.caching_allocator_alloc, device=0)` and "
                "`torch.cuda.caching_allocator_delete`: no benchmark frame (torch's own Python frames)"
            )

            def __init__(self) -> None:
                self.alloc = functools.partial(torch.cuda.caching_allocator_alloc, device=0)  # type: ignore[method-assign]
                self.free = torch.cuda.caching_allocator_delete  # type: ignore[method-assign]

        class TorchEmpty(TorchCounters):
            """``torch.empty(n, dtype=uint8, device="cuda:0")``: a whole tensor's creation
            over the caching allocator (more than an allocator call); ``free`` is ``id``,
            the tensor returning its block when dropped."""

            name = TORCH_EMPTY
            pays = (
                "`functools.partial(torch.empty, dtype=torch.uint8, device=cuda:0)` and `id`: "
                "no benchmark frame"
            )

            def __init__(self) -> None:
                dev = torch.device("cuda", 0)
                self.alloc = functools.partial(torch.empty, dtype=torch.uint8, device=dev)  # type: ignore[method-assign]
                self.free = id  # type: ignore[method-assign,assignment]

        meta["torch"] = torch.__version__
        return [TorchAllocator(), TorchEmpty()]

    def cuda_core() -> Peer:
        try:
            from cuda.core import Device
        except ImportError:
            from cuda.core.experimental import Device
        import cuda.core

        class CudaCore(Peer):
            """cuda.core's ``DeviceMemoryResource`` (the device's memory pool) on a stream
            of the thread's own: ``partial(mr.allocate, stream=s)`` and
            ``operator.methodcaller("close", s)`` (the buffer's own close)."""

            name = "cuda.core DeviceMemoryResource"
            pays = (
                "`functools.partial(mr.allocate, stream=s)` and `operator.methodcaller('close', s)`: "
                "no benchmark frame"
            )

            def __init__(self) -> None:
                self.dev = Device(0)
                self.dev.set_current()
                self.mr = self.dev.memory_resource
                self.local = threading.local()
                self.main = self.dev.create_stream()
                self.streams = [self.main]

            def calls(self) -> tuple[Callable[[int], Any], Callable[[Any], Any]]:
                s = getattr(self.local, "stream", self.main)
                return functools.partial(self.mr.allocate, stream=s), operator.methodcaller("close", s)

            def sync(self) -> None:
                for s in self.streams:
                    s.sync()

            def thread_init(self) -> None:
                self.dev.set_current()
                self.local.stream = self.dev.create_stream()
                self.streams.append(self.local.stream)

        meta["cuda.core"] = getattr(cuda.core, "__version__", "?")
        return CudaCore()

    attempt(CUPY, cupy_pool)
    attempt(CUPY_STREAM, cupy_pool_on_stream)
    attempt("RMM pool", rmm_pool)
    try:
        peers.extend(torch_peers())
    except Exception as exc:
        skipped["PyTorch"] = f"{type(exc).__name__}: {exc}"
        print(f"skipped PyTorch: {skipped['PyTorch']}", flush=True)
    attempt("cuda.core DeviceMemoryResource", cuda_core)
    return peers


#: The ratios the benchmark reports, (aml's peer, the other, the target for mine / theirs
#: or None): each compares peers of one shape (call_shape), through a control where needed.
#: The targets are issue 19's: the pool at most 0.8x CuPy's at every size, on a stream at
#: most 1.0x CuPy's on a stream (and in the threads test).
COMPARISONS: tuple[tuple[str, str, float | None], ...] = (
    (POOL, CUPY, 0.8),
    (POOL_STREAM, CUPY_STREAM, 1.0),
    (POOL_STREAM, "cudaMallocAsync", None),
    (POOL_STREAM, "cuda.core DeviceMemoryResource", None),
    (POOL, "RMM pool", None),
    (POOL, TORCH_ALLOC, None),
    (POOL, TORCH_EMPTY, None),
    ("aml area", "cudaMalloc", None),
    ("aml area, stream-ordered", "cudaMallocAsync", None),
    ("aml expandable pool", CUPY, None),
    (POOL_STREAM, POOL, None),  # aml against itself: what a stream costs (never counted as a peer)
    # issue 31: a plain request after a stream request queries an event, no synchronize
    (POOL_ALTERNATE, POOL, 1.2),
    ("aml pool, touched", "raw mmap, touched", None),
    (POOL, "raw mmap", None),
    ("aml host area", "raw mmap", None),
)


def with_controls(
    peers: list[Peer], comparisons: tuple[tuple[str, str, float | None], ...] = COMPARISONS
) -> tuple[list[Peer], list[dict[str, Any]]]:
    """The peers plus a :class:`Framed` control wherever a comparison's other peer pays
    more benchmark frames than aml's, and the comparisons as run: each names the aml peer
    (or its control) and the other, both of one shape (``call_shape.check_pairs`` refuses
    any other). Where aml's side pays more frames than the other, only another aml peer
    (aml against itself, such as the alternating pool against the plain one) is given
    the control; a foreign peer is never made to pay aml's harness."""
    by = {p.name: p for p in peers}
    out = list(peers)
    shapes = {p.name: p.shape() for p in peers}
    resolved: list[dict[str, Any]] = []
    for mine, theirs, target in comparisons:
        if mine not in by or theirs not in by:
            continue
        a, b = shapes[mine], shapes[theirs]
        name, other = mine, theirs
        if a != b:
            extra = (b[0] - a[0], b[1] - a[1])
            framed, frames = mine, extra
            if min(extra) < 0:
                # aml against itself: the cheaper aml side pays the frames of the dearer
                if not theirs.startswith("aml ") or max(extra) > 0:
                    raise call_shape.ShapeMismatch(
                        f"{mine!r} pays {a} benchmark frames, more than {theirs!r} ({b}): "
                        "no control can fix that"
                    )
                framed, frames = theirs, (-extra[0], -extra[1])
            control = Framed(by[framed], frames)
            if control.name not in by:
                by[control.name] = control
                out.append(control)
                shapes[control.name] = control.shape()
            if framed == mine:
                name = control.name
            else:
                other = control.name
        resolved.append({"mine": name, "theirs": other, "target_at_most": target})
    call_shape.check_pairs([(c["mine"], c["theirs"]) for c in resolved], shapes)
    return out, resolved


# -- measurements ------------------------------------------------------------------------------------


def batch_for(peer: Peer, n: int, quick: bool) -> tuple[int, int]:
    """(rounds, cycles per batch) for one peer and size."""
    if peer.native:
        cycles = 1 if n >= 64 * MiB else 10
        rounds = {256: 60, 64 * KiB: 60, MiB: 60, 64 * MiB: 30, GiB: 9}[n]
    else:
        cycles, rounds = 200, 40
    if quick:
        rounds = max(3, rounds // 6)
    return rounds, cycles


def alloc_free(peers: list[Peer], quick: bool) -> list[dict[str, Any]]:
    """Each size: rounds of one batch of cycles of every peer, in
    :func:`paired_stats.alternating` order (each two peers swap order as often as not);
    every round's batch mean is kept (``samples``, index ``rounds_at``), so that two peers'
    samples of one round form a pair."""
    rows: list[dict[str, Any]] = []
    clock = time.perf_counter_ns
    for n in SIZES:
        plans = {p.name: batch_for(p, n, quick) for p in peers}
        rounds = max(r for r, _ in plans.values())
        samples: dict[str, list[float]] = {p.name: [] for p in peers}
        at: dict[str, list[int]] = {p.name: [] for p in peers}
        failed: dict[str, str] = {}
        for r in range(rounds + 1):  # round 0 is warm-up
            for peer in paired_stats.alternating(peers, r):
                want, cycles = plans[peer.name]
                if peer.name in failed or (r > want):
                    continue
                alloc, free = peer.calls()
                try:
                    t0 = clock()
                    for _ in range(cycles):
                        free(alloc(n))
                    dt = (clock() - t0) / cycles / 1e3
                    peer.sync()
                except Exception as exc:
                    failed[peer.name] = f"{type(exc).__name__}: {exc}"
                    continue
                if r:
                    samples[peer.name].append(dt)
                    at[peer.name].append(r)
        for peer in peers:
            s = samples[peer.name]
            row: dict[str, Any] = {"peer": peer.name, "size": n}
            if peer.name in failed:
                row["error"] = failed[peer.name]
            if s:
                row.update(
                    us=statistics.median(s),
                    rounds=len(s),
                    cycles=plans[peer.name][1],
                    samples=s,
                    rounds_at=at[peer.name],
                )
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("samples", "rounds_at")}), flush=True)
        for peer in peers:
            try:
                peer.release()
            except Exception as exc:
                print(f"{peer.name}: release failed: {exc}", flush=True)
    return rows


def training_trace(scale: int = 1, steps: int = 3) -> list[tuple[str, int, int]]:
    """A training step's allocations, replayed ``steps`` times: ``("a", id, size)``
    allocates, ``("f", id, 0)`` frees. A transformer of 12 layers, batch 8, hidden 2048,
    16 heads, bf16, with the sequence length changing every step (896, 1024, 960 ...)
    as padded batches do: parameters live throughout; the forward pass keeps activations
    (and frees its temporaries), the backward pass frees them in reverse while making
    gradients, the optimizer step frees the gradients. Sizes are divided by ``scale``."""
    ops: list[tuple[str, int, int]] = []
    ids = iter(range(1 << 30))
    hidden, heads, batch, layers, elt = 2048, 16, 8, 12, 2

    def a(n: int) -> int:
        i = next(ids)
        ops.append(("a", i, max(1, n // scale)))
        return i

    def f(i: int) -> None:
        ops.append(("f", i, 0))

    for _ in range(layers):  # parameters and their optimizer state: never freed
        for n in (4 * hidden * hidden, 8 * hidden * hidden, 2 * hidden, 4 * hidden):
            a(n * elt)
            a(n * 4)
            a(n * 4)
    for step in range(steps):
        seq = (896, 1024, 960, 1000)[step % 4]
        tokens = batch * seq
        saved: list[list[int]] = []
        for _ in range(layers):
            keep = [
                a(tokens * hidden * elt),  # layer input
                a(tokens * 3 * hidden * elt),  # qkv
                a(batch * heads * seq * seq * elt),  # attention probabilities
                a(tokens * 4 * hidden * elt),  # mlp hidden
                a(tokens * 4 * 4),  # layernorm statistics
            ]
            tmp = [a(batch * heads * seq * seq * 4), a(tokens * hidden * 4), a(256), a(4096)]
            for i in reversed(tmp):
                f(i)
            saved.append(keep)
        grads: list[int] = []
        for keep in reversed(saved):
            gin = a(tokens * hidden * elt)
            g_tmp = [a(tokens * 4 * hidden * elt), a(batch * heads * seq * seq * elt)]
            grads += [a(n * 4) for n in (4 * hidden * hidden, 8 * hidden * hidden, 2 * hidden, 4 * hidden)]
            for i in g_tmp:
                f(i)
            for i in reversed(keep):
                f(i)
            f(gin)
        for i in grads:
            f(i)
    return ops


def replay(peer: Peer, trace: list[tuple[str, int, int]]) -> dict[str, Any]:
    live: dict[int, Any] = {}
    own_peak = peer.peak_reserved() is not None
    peer.release()
    peer.reset_peak()
    peak = 0
    alloc, free = peer.calls()
    t0 = time.perf_counter_ns()
    for op, i, n in trace:
        if op == "a":
            live[i] = alloc(n)
            if not own_peak:
                r = peer.reserved()
                if r is not None and r > peak:
                    peak = r
        else:
            free(live.pop(i))
    peer.sync()
    dt = (time.perf_counter_ns() - t0) / 1e3
    for h in live.values():
        free(h)
    live.clear()
    peer.sync()
    out: dict[str, Any] = {"peer": peer.name, "us_per_op": dt / len(trace), "ops": len(trace)}
    if own_peak:
        out["peak_reserved"] = peer.peak_reserved()
    elif peer.reserved() is not None:
        out["peak_reserved"] = peak  # sampled after every allocation
    peer.release()
    return out


def ideal_peak(trace: list[tuple[str, int, int]]) -> int:
    live: dict[int, int] = {}
    cur = peak = 0
    for op, i, n in trace:
        if op == "a":
            live[i] = n
            cur += n
            peak = max(peak, cur)
        else:
            cur -= live.pop(i)
    return peak


def threads(peer: Peer, nthreads: int, per_thread: int) -> dict[str, Any]:
    sizes = (256, 4096, 64 * KiB, 512 * KiB, MiB)
    errors: list[BaseException] = []
    start = threading.Barrier(nthreads + 1, timeout=120)

    def work(seed: int) -> None:
        try:
            peer.thread_init()
        except BaseException as exc:
            errors.append(exc)
        start.wait()  # every thread reaches the barrier, failed or not
        if errors:
            return
        try:
            alloc, free = peer.calls()  # this thread's (its own stream, where the peer has one)
            held: list[Any] = []
            for i in range(per_thread):
                held.append(alloc(sizes[(seed + i) % len(sizes)]))
                if len(held) == 4:
                    for h in held:
                        free(h)
                    held.clear()
            for h in held:
                free(h)
        except BaseException as exc:
            errors.append(exc)

    ts = [threading.Thread(target=work, args=(s,)) for s in range(nthreads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter_ns()
    for t in ts:
        t.join()
    peer.sync()
    dt = (time.perf_counter_ns() - t0) / 1e3
    ops = nthreads * per_thread
    out: dict[str, Any] = {"peer": peer.name, "threads": nthreads, "ops": ops, "wall_us": dt}
    out["us_per_op"] = dt / ops  # wall time per allocation+free pair, all threads together
    if errors:
        out["error"] = f"{type(errors[0]).__name__}: {errors[0]}"
    peer.release()
    return out


# -- output -------------------------------------------------------------------------------------------


def repeated(peers: list[Peer], fn: Callable[[Peer], dict[str, Any]], repeats: int) -> list[dict[str, Any]]:
    """``fn(peer)`` for every peer, ``repeats`` times, in :func:`paired_stats.alternating`
    order; one row per peer with every repeat's row (``repeats``, each with its index) and
    the medians of ``us_per_op`` and ``peak_reserved`` over the repeats that ran."""
    got: dict[str, list[dict[str, Any]]] = {p.name: [] for p in peers}
    for rep in range(repeats):
        for peer in paired_stats.alternating(peers, rep):
            try:
                row = fn(peer)
            except Exception as exc:
                traceback.print_exc()
                row = {"peer": peer.name, "error": f"{type(exc).__name__}: {exc}", "ops": 0}
            row["repeat"] = rep
            got[peer.name].append(row)
    rows: list[dict[str, Any]] = []
    for peer in peers:
        reps = got[peer.name]
        ok = [r for r in reps if "error" not in r and "us_per_op" in r]
        row: dict[str, Any] = {"peer": peer.name, "repeats": reps, "ran": len(ok)}
        if ok:
            row["us_per_op"] = statistics.median(r["us_per_op"] for r in ok)
            row["ops"] = ok[0]["ops"]
            peaks = [r["peak_reserved"] for r in ok if r.get("peak_reserved")]
            if peaks:
                row["peak_reserved"] = statistics.median(peaks)
        errors = [r["error"] for r in reps if "error" in r]
        if errors:
            row["error"] = f"{len(errors)} of {len(reps)} repeats failed, first: {errors[0]}"
        print(json.dumps({k: v for k, v in row.items() if k != "repeats"}), flush=True)
        rows.append(row)
    return rows


#: the threads test's target (issue 19): 16 threads on streams at most CuPy's on streams
THREAD_TARGETS = {(POOL_STREAM, CUPY_STREAM): 1.0}


def _pairs_by_index(mine: dict[int, float], theirs: dict[int, float]) -> list[float]:
    return [mine[i] / theirs[i] for i in sorted(mine) if theirs.get(i)]


def compare(r: dict[str, Any], comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every comparison's figures: for alloc+free at each size (pairs: the rounds both ran),
    the trace (time and peak reserved) and the threads test (pairs: the repeats both
    ran), the median of the paired ratios (mine / theirs) with its bootstrap interval and,
    where there is a target, its verdict (``paired_stats.verdict``)."""
    out: list[dict[str, Any]] = []

    def add(c: dict[str, Any], test: str, ratios: list[float], target: float | None, **extra: Any) -> None:
        if not ratios:
            return
        s = paired_stats.summarize(ratios)
        row = {"test": test, "mine": c["mine"], "theirs": c["theirs"], **extra, "target_at_most": target}
        row["verdict"] = paired_stats.verdict(s, at_most=target) if target is not None else None
        row["stats"] = s
        out.append(row)

    af = {(row["peer"], row["size"]): row for row in r["alloc_free"]}
    for c in comparisons:
        for n in SIZES:
            a, b = af.get((c["mine"], n)), af.get((c["theirs"], n))
            if not a or not b or "samples" not in a or "samples" not in b:
                continue
            mine = dict(zip(a["rounds_at"], a["samples"], strict=True))
            theirs = dict(zip(b["rounds_at"], b["samples"], strict=True))
            add(c, "alloc+free", _pairs_by_index(mine, theirs), c["target_at_most"], size=n)
        for test, key in (
            ("trace", "us_per_op"),
            ("trace peak reserved", "peak_reserved"),
            ("threads", "us_per_op"),
        ):
            rows = r["trace" if test.startswith("trace") else "threads"]["rows"]
            by = {row["peer"]: row for row in rows}
            if c["mine"] not in by or c["theirs"] not in by:
                continue

            def values(row: dict[str, Any], key: str = key) -> dict[int, float]:
                return {x["repeat"]: float(x[key]) for x in row["repeats"] if "error" not in x and x.get(key)}

            target = THREAD_TARGETS.get((c["mine"], c["theirs"])) if test == "threads" else None
            add(c, test, _pairs_by_index(values(by[c["mine"]]), values(by[c["theirs"]])), target)
    return out


def render(r: dict[str, Any]) -> str:
    m = r["meta"]
    lines = [f"# aml allocator benchmark ({r['mode']}), {m['date']}", ""]
    lines.append(", ".join(f"{k} {v}" for k, v in m.items() if k != "date") + ".")
    lines += [
        "",
        "One process, one run. alloc+free: rounds of a batch of cycles of every peer, the peers' order "
        "alternating round by round (each two peers swap order as often as not); a peer's figure is the "
        f"median over rounds. The trace and the threads test ran {r['repeats']} times per peer, in the "
        "same alternating order. **Comparisons** are the median of the paired ratios (aml / peer: the two "
        "peers' samples of one round, or of one repeat) with a bootstrap 95% interval; a target is *met* "
        "only when the interval's high end is at or below it, otherwise *not shown*.",
    ]
    if r["mode"] == "host":
        lines += [
            "",
            "Host mode: untouched mappings cost only the system calls; *touched* peers write one "
            "byte per page after each allocation (the page faults a fresh mapping pays and a reused "
            "block does not); the two groups are timed separately. The trace is scaled down 16x.",
        ]
    if r["skipped"]:
        lines += ["", "Skipped peers: " + "; ".join(f"{k} ({v})" for k, v in r["skipped"].items()) + "."]
    lines += [
        "",
        "## How each peer is called (the harness rule: `benchmarks/call_shape.py`)",
        "",
        "| peer | benchmark frames (alloc, free) | what a call pays |",
        "| --- | --- | --- |",
    ]
    for p in r["peers"]:
        lines.append(f"| {p['name']} | {p['shape'][0]}, {p['shape'][1]} | {p['pays']} |")
    ran = r.get("tests", TESTS)
    if len(ran) < len(TESTS):
        lines += ["", f"Tests run: {', '.join(ran)} only (`--tests`)."]
    peers = list(dict.fromkeys(row["peer"] for row in r["alloc_free"]))
    by = {(row["peer"], row["size"]): row for row in r["alloc_free"]}
    lines += [
        "",
        "## alloc+free of one size (µs per pair, median over rounds)",
        "",
        "| peer | " + " | ".join(human(n) for n in SIZES) + " |",
        "| --- | " + " | ".join("---:" for _ in SIZES) + " |",
    ]
    for p in peers:
        cells = []
        for n in SIZES:
            row = by.get((p, n), {})
            cells.append(f"{row['us']:.3f}" if "us" in row else ("error" if "error" in row else "-"))
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    errors = [
        f"{row['peer']} at {human(row['size'])}: {row['error']}" for row in r["alloc_free"] if "error" in row
    ]
    if errors:
        lines += ["", "Errors: " + "; ".join(errors) + "."]
    lines += [
        "",
        "## Comparisons (median of paired ratios, aml / peer; below 1: aml faster or smaller)",
        "",
        "| test | size | aml | peer | median | 95% interval | pairs | below 1 | target | verdict |",
        "| --- | ---: | --- | --- | ---: | --- | ---: | ---: | --- | --- |",
    ]
    for c in r["comparisons"]:
        st = c["stats"]
        low, high = st["median_95"]
        size = human(c["size"]) if "size" in c else ""
        target = f"<= {c['target_at_most']}" if c["target_at_most"] is not None else ""
        lines.append(
            f"| {c['test']} | {size} | {c['mine']} | {c['theirs']} | {st['median']:.3f} | "
            f"{low:.3f}-{high:.3f} | "
            f"{st['pairs']} | {st['below_1']} | {target} | {c['verdict'] or ''} |"
        )
    t = r["trace"]
    lines += [
        "",
        f"## mixed-size trace ({t['ops']} operations: a training step's sizes, {t['steps']} steps; "
        f"ideal peak {human(t['ideal_peak'])} live; median of {r['repeats']} repeats)",
        "",
        "| peer | µs per op | peak reserved | peak / ideal |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in t["rows"]:
        pr = row.get("peak_reserved")
        peak = f"{human(pr)} | {pr / t['ideal_peak']:.3f}" if pr else "- | -"
        us = f"{row['us_per_op']:.3f}" if "us_per_op" in row else row.get("error", "-")
        lines.append(f"| {row['peer']} | {us} | {peak} |")
    th = r["threads"]
    lines += [
        "",
        f"## {th['threads']} threads at once (mixed sizes 256 B .. 1 MiB, µs of wall time per alloc+free; "
        f"median of {r['repeats']} repeats)",
        "",
        "| peer | ops | µs per op | repeats that ran |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in th["rows"]:
        us = f"{row['us_per_op']:.3f}" if "us_per_op" in row else row.get("error", "-")
        lines.append(f"| {row['peer']} | {row.get('ops', 0)} | {us} | {row['ran']} |")
        if "error" in row and "us_per_op" in row:
            lines[-1] += f" ({row['error']})"
    lines.append("")
    return "\n".join(lines)


def plots(r: dict[str, Any], out: Path, name: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        print(f"no plots: matplotlib is not usable ({exc})", flush=True)
        return []
    files: list[str] = []
    peers = list(dict.fromkeys(row["peer"] for row in r["alloc_free"]))
    if peers:  # none where --tests left alloc out
        fig, ax = plt.subplots(figsize=(8, 5))
        for p in peers:
            pts = [(row["size"], row["us"]) for row in r["alloc_free"] if row["peer"] == p and "us" in row]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=p)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(list(SIZES), [human(n) for n in SIZES])
        ax.set_xlabel("size")
        ax.set_ylabel("µs per alloc+free (median)")
        ax.set_title(f"alloc+free latency ({r['mode']})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{name}_latency.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path.name)

    t = r["trace"]
    rows = [row for row in t["rows"] if row.get("peak_reserved")]
    if rows:
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.barh([row["peer"] for row in rows], [row["peak_reserved"] / MiB for row in rows])
        ax.axvline(t["ideal_peak"] / MiB, color="k", linestyle="--", label="ideal (peak live bytes)")
        ax.set_xlabel("peak reserved (MiB)")
        ax.set_title("mixed-size trace: peak reserved memory")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{name}_trace.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path.name)

    rows = [row for row in r["threads"]["rows"] if "error" not in row]
    if rows:
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.barh([row["peer"] for row in rows], [row["us_per_op"] for row in rows])
        ax.set_xscale("log")
        ax.set_xlabel("µs of wall time per alloc+free")
        ax.set_title(f"{r['threads']['threads']} threads at once")
        fig.tight_layout()
        path = out / f"{name}_threads.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path.name)
    return files


def machine() -> dict[str, Any]:
    return {
        **shared_machine(),
        "date": datetime.date.today().isoformat(),
    }


def gpu_meta(meta: dict[str, Any]) -> None:
    try:
        import aml_cuda

        probe = aml_cuda.probe()
        meta["aml_cuda"] = aml_cuda.__version__
        if probe.available and probe.devices:
            dev = probe.devices[0]
            meta["gpu"] = dev.name
            meta["gpu_memory_bytes"] = dev.total_memory
            meta["driver"] = dev.details.get("driver_version")
        else:
            meta["gpu"] = f"none ({probe.reason})"
    except Exception as exc:
        meta["gpu"] = f"unknown ({type(exc).__name__}: {exc})"
    try:
        import cuda.bindings

        meta["cuda_bindings"] = cuda.bindings.__version__
    except Exception:
        meta["cuda_bindings"] = "missing"


def each(peers: list[Peer], fn: Callable[[Peer], dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for peer in peers:
        try:
            row = fn(peer)
        except Exception as exc:
            traceback.print_exc()
            row = {"peer": peer.name, "error": f"{type(exc).__name__}: {exc}", "ops": 0}
        print(json.dumps(row), flush=True)
        yield row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="default: $OUT, else evidence/<date>-<machine>-alloc-bench[-host]/")
    parser.add_argument("--host", action="store_true", help="the host pool against the host area")
    parser.add_argument("--name", default=None, help="file name prefix (default alloc_bench[_host])")
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke test")
    parser.add_argument(
        "--tests",
        default=",".join(TESTS),
        help=f"comma-separated subset of {','.join(TESTS)} (default all; e.g. threads alone, for another "
        "run of the threads test)",
    )
    parser.add_argument(
        "--peer",
        action="append",
        default=None,
        help="time only this peer (repeat the option; default every peer; controls follow their peer)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="repeats of the trace and the threads test (default 10; quick 2)",
    )
    args = parser.parse_args(argv)
    tests = [t for t in args.tests.split(",") if t]
    if not tests or set(tests) - set(TESTS):
        parser.error(f"--tests: a comma-separated subset of {','.join(TESTS)}, not {args.tests!r}")
    repeats = args.repeats or (2 if args.quick else 10)
    started = time.monotonic()
    meta = machine()
    skipped: dict[str, str] = {}
    if args.host:
        peers = host_peers(skipped)
        mode = "host"
    else:
        gpu_meta(meta)
        peers = gpu_peers(skipped, meta)
        mode = "gpu"
    if args.peer:
        unknown = set(args.peer) - {p.name for p in peers} - set(skipped)
        if unknown:
            raise SystemExit(f"--peer: no such peer {sorted(unknown)}; the peers: {[p.name for p in peers]}")
        for p in [p for p in peers if p.name not in args.peer]:
            p.close()
        peers = [p for p in peers if p.name in args.peer]
    if not peers:
        raise SystemExit(f"no peer could start: {skipped}")
    peers, comparisons = with_controls(peers)
    print(json.dumps(meta), flush=True)
    results: dict[str, Any] = {
        "mode": mode,
        "meta": meta,
        "skipped": skipped,
        "repeats": repeats,
        "tests": tests,
    }
    results["peers"] = [
        {"name": p.name, "shape": list(p.shape()), "pays": p.pays or "-", "native": p.native} for p in peers
    ]
    # Touched peers (host mode) run as their own group: their page faults and large
    # munmaps would otherwise cool the caches of the untouched peers' rounds.
    touched = [p for p in peers if isinstance(p.peer if isinstance(p, Framed) else p, Touched)]
    plain = [p for p in peers if p not in touched]
    results["alloc_free"] = (
        alloc_free(plain, args.quick) + (alloc_free(touched, args.quick) if touched else [])
        if "alloc" in tests
        else []
    )

    # The host trace is scaled down (its peers map untouched memory: only the count and
    # the layout of mappings matter); the GPU trace is full size (peaks of a few GiB).
    steps = 2 if args.quick else 3
    trace = training_trace(scale=16 if mode == "host" else 1, steps=steps)
    results["trace"] = {
        "steps": steps,
        "scale": 16 if mode == "host" else 1,
        "ops": len(trace),
        "ideal_peak": ideal_peak(trace),
        "rows": repeated(peers, lambda p: replay(p, trace), repeats) if "trace" in tests else [],
    }
    nthreads = 16
    per_thread = 200 if args.quick else 2000

    def run_threads(p: Peer) -> dict[str, Any]:
        return threads(p, nthreads, per_thread // 10 if p.native else per_thread)

    results["threads"] = {
        "threads": nthreads,
        "rows": repeated(peers, run_threads, repeats) if "threads" in tests else [],
    }
    results["comparisons"] = compare(results, comparisons)
    for peer in peers:
        if isinstance(peer, Framed):
            continue  # its peer closes the allocator they share
        try:
            peer.close()
        except Exception as exc:
            print(f"{peer.name}: close failed: {exc}", flush=True)
    results["seconds"] = time.monotonic() - started

    out = out_dir(args.out, "alloc-bench-host" if args.host else "alloc-bench")
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or ("alloc_bench_host" if args.host else "alloc_bench")
    (out / f"{name}.json").write_text(json.dumps(results, indent=1))
    try:
        results["plots"] = plots(results, out, name)
    except Exception as exc:  # the results are on disk already
        traceback.print_exc()
        results["plots"] = [f"failed: {type(exc).__name__}: {exc}"]
    md = render(results)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1))
    (out / f"{name}.md").write_text(md)
    print()
    print(md, flush=True)


if __name__ == "__main__":
    main()
