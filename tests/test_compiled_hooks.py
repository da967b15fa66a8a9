"""The compiled framework hooks (aml_core/_hooks.pyx) over pools: PyTorch's and CuPy's
C entry points serve cached blocks from the pool's kernel with no Python object, route
everything else through the pool, and keep the rules of aml_core.gpu.hooks (errors
recorded and returned as NULL, one pool per device, nothing freed under the framework
when the pool is closed)."""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import aml_core
from aml_core import _hooks
from aml_core.errors import AMLBusyError, AMLMemoryError, AMLNotSupported, AMLValueError
from aml_core.gpu import hooks
from aml_core.specs import Kind
from aml_core.testing.hook_fakes import FakeDeviceArea, faked, torch_entry_points
from tests.support.streams import S1, S2, S3, StreamedHost


@pytest.fixture
def torch() -> Iterator[Any]:
    with faked("torch") as fake:
        yield fake


@pytest.fixture
def cupy() -> Iterator[Any]:
    with faked("cupy") as fake:
        yield fake


def test_pytorch_hits_run_in_c_and_misses_through_the_pool(torch: Any) -> None:
    with FakeDeviceArea() as area, aml_core.pool(area) as pool:
        hook = hooks.use_with_torch(pool, backend="cuda")
        malloc, free = torch_entry_points(torch)
        state = hook.states[None]
        first = malloc(4096, 0, None)  # a miss: a slab from the area
        assert first
        assert state.fast_allocs == 0
        ctypes.memset(first, 7, 4096)
        free(first, 4096, 0, None)  # a hit of the kernel: onto the stack
        assert (state.fast_frees, hook.live) == (1, 0)
        again = malloc(4000, 0, None)  # the same rounded size: a hit, in C
        assert (again, state.fast_allocs) == (first, 1)
        assert pool.pool_stats.bytes_in_use == 4000
        assert pool.stats.live_mappings == 0  # no Buffer was made for it
        free(again, 4000, 0, None)
        assert pool.pool_stats.bytes_in_use == 0
        assert hook.errors == []


def test_pytorch_refusals_raise_and_the_errors_are_kept(torch: Any) -> None:
    """Past the limit the entry point throws its C++ out_of_memory, which PyTorch's
    catch makes a RuntimeError naming aml's error (kept in hook.errors); the next
    allocation is served; a foreign free and a double free are recorded, never raised."""
    with FakeDeviceArea() as area, aml_core.pool(area, limit=1 << 20) as pool:
        hook = hooks.use_with_torch(pool, backend="cuda")
        malloc, free = torch_entry_points(torch)
        oom = r"^CUDA out of memory\. aml could not allocate 2097152 bytes on device 0 .*AMLMemoryError"
        with pytest.raises(RuntimeError, match=oom):
            malloc(2 << 20, 0, None)  # past the limit
        assert isinstance(hook.errors[-1], AMLMemoryError)
        assert hook.live == 0
        ptr = malloc(4096, 0, None)  # the process goes on: the next allocation is served
        assert ptr
        free(0x1000, 16, 0, None)  # never handed out
        assert isinstance(hook.errors[-1], AMLValueError)
        free(ptr, 4096, 0, None)
        errors = len(hook.errors)
        free(ptr, 4096, 0, None)  # a double free: recorded, nothing freed twice
        assert len(hook.errors) == errors + 1
        assert isinstance(hook.errors[-1], AMLValueError)
        assert malloc(-5, 0, None) is None  # a negative size: NULL, no error (PyTorch's rule)
        assert (hook.live, pool.pool_stats.bytes_in_use) == (0, 0)


def test_one_pool_per_device(torch: Any) -> None:
    with FakeDeviceArea() as a0, FakeDeviceArea() as a1:
        p0, p1 = aml_core.pool(a0), aml_core.pool(a1)
        hook = hooks.use_with_torch({0: p0, 1: p1}, backend="cuda")
        malloc, free = torch_entry_points(torch)
        x = malloc(1000, 0, None)
        y = malloc(1000, 1, None)
        assert p0.pool_stats.bytes_in_use == 1000
        assert p1.pool_stats.bytes_in_use == 1000
        with pytest.raises(RuntimeError, match="serves no pool for that device"):
            malloc(1000, 2, None)  # no pool for device 2
        assert "device 2" in str(hook.errors[-1])
        free(x, 1000, 0, None)
        free(y, 1000, 1, None)
        assert hook.live == 0
        p0.close()
        p1.close()


@pytest.mark.parametrize(
    ("areas", "message"),
    [
        ({}, "needs an area"),
        ({-1: None}, "device index"),
        ({"0": None}, "device index"),
        ({64: None}, "device index"),
    ],
)
def test_bad_device_maps_are_refused(torch: Any, areas: dict[Any, Any], message: str) -> None:
    with pytest.raises(AMLValueError, match=message):
        hooks.use_with_torch(areas, backend="cuda")


def test_threads_without_the_gil_keep_blocks_apart(torch: Any) -> None:
    """Eight threads calling the C entry points (the GIL released around each call, as
    PyTorch's threads hold none): no block is handed out twice, nothing is lost."""
    with FakeDeviceArea() as area, aml_core.pool(area) as pool:
        hook = hooks.use_with_torch(pool, backend="cuda")
        state = hook.states[None]
        seen: list[set[int]] = []
        errors: list[BaseException] = []

        def work(seed: int) -> None:
            mine: set[int] = set()
            try:
                for i in range(400):
                    size = 512 * (1 + (seed + i) % 7)
                    ptr = _hooks.call_torch_malloc(size, 0)
                    assert ptr
                    ctypes.memset(ptr, seed, size)
                    assert ctypes.string_at(ptr, size) == bytes([seed]) * size
                    mine.add(ptr)
                    _hooks.call_torch_free(ptr, size, 0)
            except BaseException as exc:
                errors.append(exc)
            seen.append(mine)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(1, 9)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert hook.errors == []
        assert hook.live == 0
        stats = pool.pool_stats
        assert (stats.bytes_in_use, stats.block_bytes) == (0, 0)
        assert state.fast_allocs > 0


def test_cupy_takes_the_compiled_allocator_of_a_pool(cupy: Any) -> None:
    with FakeDeviceArea() as area, aml_core.pool(area) as pool:
        hook = hooks.use_with_cupy(pool, backend="cuda")
        allocate = cupy.state["allocator"]
        assert allocate == hook.allocator
        assert allocate != hook.malloc
        ptr = allocate(1000)
        ctypes.memset(ptr.ptr, 1, 1000)
        addr = ptr.ptr
        assert (hook.live, pool.pool_stats.bytes_in_use, pool.stats.live_mappings) == (1, 1000, 0)
        with pytest.raises(AMLBusyError):
            hook.uninstall()
        del ptr
        gc.collect()
        assert hook.live == 0
        again = allocate(1000)
        assert again.ptr == addr  # the pool's block again, served in C
        del again
        gc.collect()
        hook.uninstall()


def test_cupy_errors_raise_from_malloc(cupy: Any) -> None:
    with FakeDeviceArea() as area, aml_core.pool(area, limit=1 << 20) as pool:
        hook = hooks.use_with_cupy(pool, backend="cuda")
        with pytest.raises(AMLMemoryError):
            hook.malloc(2 << 20)  # CuPy gets the pool's error, with its code
        assert hook.errors == []  # raised, not kept
        assert hook.live == 0
        hook.uninstall()


def test_closing_the_pool_under_cupy_keeps_the_memory_until_cupy_lets_go(cupy: Any) -> None:
    area = FakeDeviceArea()
    pool = aml_core.pool(area)
    hook = hooks.use_with_cupy(pool, backend="cuda")
    ptr = cupy.state["allocator"](4096)
    ctypes.memset(ptr.ptr, 3, 4096)
    pool.close()
    assert area.stats.live_mappings == 1  # the slab stays: CuPy still uses a block of it
    assert ctypes.string_at(ptr.ptr, 4096) == b"\x03" * 4096
    del ptr
    gc.collect()
    assert area.stats.live_mappings == 0  # CuPy let go: the slab went back
    assert hook.live == 0
    assert hook.errors == []
    hook.uninstall()
    area.close()


class _StreamedDevice(StreamedHost):
    """Host memory with a recording stream runtime that calls itself device memory: a
    GPU area's stand-in for the hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.kind = Kind.DEVICE


@pytest.mark.parametrize("first", ["alloc", "free"])
def test_a_hooks_first_stream_use_finds_the_stream_operations(torch: Any, first: str) -> None:
    """Issue 32, root cause 1: PyTorch's first request on a stream, before Python ever
    gave the pool a stream, hits the pool's cache in C (``alloc``), or a block allocated
    in host order is freed on a stream (``free``). The block lands on the stream's free
    list; trim, growth and close then reclaim that stream with the pool's stream
    operations (before the fix there were none: AttributeError, and the slab leaked)."""
    host = _StreamedDevice()
    pool = aml_core.pool(host, small_slab=4096, small_max=4096)  # slabs of one block
    hook = hooks.use_with_torch(pool, backend="cuda")
    malloc, free = torch_entry_points(torch)
    ptr = malloc(4096, 0, None)  # host order: a miss, the first slab
    if first == "alloc":
        free(ptr, 4096, 0, None)  # onto the host stack, in C
        again = malloc(4096, 0, S1)  # the first stream request: a hit, in C
        assert again == ptr
        assert hook.states[None].fast_allocs == 1
        free(again, 4096, 0, S1)  # onto S1's list, in C
    else:
        free(ptr, 4096, 0, S1)  # a host-order block freed on a stream first, in C
    assert pool._kernel.stream_cached() == {(S1, 4096): [ptr]}
    other = malloc(8192, 0, None)  # growth: S1 reclaimed first (no query: synchronized)
    assert ("stream_synchronize", S1) in host.runtime.calls
    assert pool._kernel.stream_cached() == {}
    free(other, 8192, 0, None)
    free(malloc(4096, 0, S2), 4096, 0, S2)
    reserved = pool.pool_stats.bytes_reserved
    assert pool.trim() == reserved  # the streams reclaimed, every slab back to the area
    free(malloc(4096, 0, S3), 4096, 0, S3)  # and one left on S3 for close
    pool.close()
    assert hook.errors == []
    assert ("stream_synchronize", S3) in host.runtime.calls
    assert host.allocs == host.frees  # no slab leaked
    host.close()
    assert host.stats.live_mappings == 0


def test_a_hook_request_on_a_stream_of_a_pool_without_streams_is_refused(torch: Any) -> None:
    """A pool whose area orders no work on streams: PyTorch's request on a stream is NULL
    with AMLNotSupported recorded (never a block on a stream nothing can reclaim); its
    free on a stream is a free in host order."""
    with FakeDeviceArea() as area, aml_core.pool(area) as pool:
        hook = hooks.use_with_torch(pool, backend="cuda")
        malloc, free = torch_entry_points(torch)
        with pytest.raises(RuntimeError, match="AMLNotSupported"):
            malloc(4096, 0, S1)
        assert isinstance(hook.errors[-1], AMLNotSupported)
        ptr = malloc(4096, 0, None)
        free(ptr, 4096, 0, S1)  # host order
        assert pool._kernel.stream_cached() == {}
        assert malloc(4096, 0, None) == ptr
        free(ptr, 4096, 0, None)
        assert pool.pool_stats.bytes_in_use == 0


def test_failed_pytorch_calls_leave_the_live_count(torch: Any) -> None:
    """``hook.live`` counts the allocations PyTorch holds: a malloc the pool refused (thrown)
    adds none, a free the pool refused (a pointer it never handed out) takes none away."""
    with FakeDeviceArea() as area, aml_core.pool(area, limit=1 << 20) as pool:
        hook = hooks.use_with_torch(pool, backend="cuda")
        malloc, free = torch_entry_points(torch)
        ptr = malloc(4096, 0, None)
        assert ptr
        assert hook.live == 1
        with pytest.raises(RuntimeError, match="out of memory"):
            malloc(2 << 20, 0, None)  # past the limit: refused, thrown as PyTorch sees it
        assert isinstance(hook.errors[-1], MemoryError)
        assert hook.live == 1
        free(0x1000, 16, 0, None)  # never handed out: refused
        assert isinstance(hook.errors[-1], AMLValueError)
        assert hook.live == 1
        free(ptr, 4096, 0, None)
        assert hook.live == 0
        assert pool.pool_stats.bytes_in_use == 0


_GIL_HOLDER_CHILD = """
import threading
import aml_core
from aml_core.gpu import hooks
from aml_core.testing.hook_fakes import FakeDeviceArea

class Hook:
    errors = []
    backend = "cuda"

pool = aml_core.pool(FakeDeviceArea(), small_slab=4096, small_max=4096)
state = hooks._hook_state(Hook, pool)
stop = False

def gil_holder():  # CuPy's compiled free runs with the GIL held: a hit in C
    while not stop:
        state.cupy_free(state.cupy_malloc(512, 0), 0)

def grower():  # misses and trims: Python under the kernel's mutex
    for i in range(400):
        bufs = [pool.mmap(8192 + 4096 * (i % 5)) for _ in range(4)]
        for b in bufs:
            pool.munmap(b)
        pool.trim()

threads = [threading.Thread(target=gil_holder) for _ in range(2)]
growers = [threading.Thread(target=grower) for _ in range(2)]
for t in threads + growers:
    t.start()
for g in growers:
    g.join()
stop = True
for t in threads:
    t.join()
assert state.live == 0 and Hook.errors == [], (state.live, Hook.errors)
print("ok")
"""


def test_a_hit_taken_with_the_gil_never_waits_for_a_holder_that_needs_it() -> None:
    """A framework calls its hook with the GIL held (CuPy's free, PyTorch freeing a
    tensor Python dropped) while another thread grows the pool, running Python under
    the kernel's mutex: the hit waits for the mutex with the GIL released (it used to
    block holding the GIL: a deadlock, about one run in two of this child). In a child,
    with a timeout: a deadlock fails it instead of hanging the run."""
    proc = subprocess.run(
        [sys.executable, "-c", _GIL_HOLDER_CHILD], capture_output=True, text=True, timeout=240, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok", proc.stdout
