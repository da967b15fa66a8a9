"""aml_cuda.use_with_torch and torch_mem_pool: the C entry points called through their
addresses, as PyTorch's CUDAPluggableAllocator calls them, against a stand-in ``torch``
module on any machine; and real PyTorch on a GPU (marked ``gpu``, in a child process:
PyTorch takes one allocator per process)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import aml_cuda
import pytest

import aml_core
from aml_core import Area
from aml_core.errors import AMLBusyError, AMLNotSupported, AMLValueError
from aml_core.host import HostArea
from aml_core.testing.hook_fakes import FakeDeviceArea, faked, torch_entry_points


@pytest.fixture
def torch() -> Iterator[Any]:
    with faked("torch") as fake:
        yield fake


@pytest.fixture
def area() -> Iterator[Area]:
    area = FakeDeviceArea()
    yield area
    area.close()


def test_the_c_entry_points_allocate_from_a_pool(torch: Any, area: Area) -> None:
    with aml_core.pool(area) as pool:
        hook = aml_cuda.use_with_torch(pool)
        malloc, free = torch_entry_points(torch)
        ptr = malloc(4096, 0, None)
        assert ptr is not None
        assert hook.live == 1
        ctypes.memset(ptr, 0x42, 4096)  # host memory here: the pointer is usable as is
        assert ctypes.string_at(ptr, 4) == b"BBBB"
        free(ptr, 4096, 0, None)
        assert hook.live == 0
        again = malloc(4096, 0, None)
        assert again == ptr  # the pool's block again
        assert pool.pool_stats.native_allocations == 1
        free(again, 4096, 0, None)
        assert malloc(0, 0, None) is None
        assert hook.errors == []


def test_streams_reach_the_pool(torch: Any) -> None:
    class Streamed(FakeDeviceArea):
        def __init__(self) -> None:
            super().__init__()
            self.synced: list[int] = []

        def stream_ordering(self) -> Any:  # a StreamOrderedArea (aml_core.protocols), as GPU areas are
            return types.SimpleNamespace(stream_synchronize=self.synced.append)

    area = Streamed()
    with aml_core.pool(area) as pool:
        aml_cuda.use_with_torch(pool)
        malloc, free = torch_entry_points(torch)
        ptr = malloc(1000, 0, 0x1234)
        free(ptr, 1000, 0, 0x1234)
        again = malloc(1000, 0, 0x1234)  # reused at once on the stream that freed it
        assert again == ptr
        free(again, 1000, 0, 0x1234)
    assert area.synced == [0x1234]  # the pool's close waited for the stream
    area.close()


def test_failures_raise_in_pytorch_and_are_kept(torch: Any, area: Area) -> None:
    with aml_core.pool(area, limit=1 << 20) as pool:
        hook = aml_cuda.use_with_torch(pool)
        malloc, free = torch_entry_points(torch)
        with pytest.raises(RuntimeError, match=r"^CUDA out of memory"):
            malloc(2 << 20, 0, None)  # past the limit: thrown, PyTorch raises
        assert isinstance(hook.errors[-1], MemoryError)
        free(0x1000, 16, 0, None)  # not ours: reported, not raised into PyTorch
        assert isinstance(hook.errors[-1], AMLValueError)


def test_installed_once_and_never_removed(torch: Any, area: Area) -> None:
    hook = aml_cuda.use_with_torch(area)
    with pytest.raises(AMLBusyError, match="installed already"):
        aml_cuda.use_with_torch(area)
    with pytest.raises(AMLNotSupported):
        hook.uninstall()


def test_after_pytorch_allocated(torch: Any, area: Area) -> None:
    torch.state["initialized"] = True
    with pytest.raises(AMLBusyError, match="allocated CUDA memory already"):
        aml_cuda.use_with_torch(area)


def test_bad_areas(torch: Any) -> None:
    with HostArea() as host, pytest.raises(AMLValueError, match="device or managed"):
        aml_cuda.use_with_torch(host)
    closed = FakeDeviceArea()
    closed.close()
    with pytest.raises(AMLValueError, match="closed"):
        aml_cuda.use_with_torch(closed)


_TORCH_CHILD = """
import aml_core, aml_cuda, torch
pool = aml_core.pool(aml_cuda.create(0))
hook = aml_cuda.use_with_torch(pool)
x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
assert float(x.sum()) == float((1 << 20) * ((1 << 20) - 1) / 2)
# compiled entry points: blocks of the kernel, no Buffer
assert hook.live >= 1, hook.live
assert pool.pool_stats.bytes_in_use >= 4 << 20, pool.pool_stats
assert pool.stats.live_mappings == 0, pool.stats
del x
torch.cuda.synchronize()
assert hook.live == 0, hook.live
y = torch.ones(1 << 20, device="cuda")  # the freed block again, served in C
assert hook.states[0].fast_allocs >= 1, hook.states
del y
print("ok", hook.live, pool.pool_stats.native_allocations, hook.errors)
"""

_TORCH_OOM_CHILD = """
import aml_core, aml_cuda, torch
pool = aml_core.pool(aml_cuda.create(0), limit=64 << 20)
hook = aml_cuda.use_with_torch(pool)
x = torch.ones(1 << 20, device="cuda")
for attempt in range(3):  # each refusal raises; none leaves a tensor behind
    try:
        y = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    except RuntimeError as exc:
        assert str(exc).startswith("CUDA out of memory."), str(exc)
        assert "AMLMemoryError" in str(exc), str(exc)
    else:
        raise AssertionError(f"no error: a tensor at {y.data_ptr():#x}")
print("refused", type(hook.errors[-1]).__name__, len(hook.errors), flush=True)
assert float(x.sum()) == float(1 << 20)
z = torch.ones(1 << 20, device="cuda")  # the pool goes on
assert float(z.sum()) == float(1 << 20)
print("ok", flush=True)
# x and z are freed by PyTorch after the interpreter is torn down: served in C
"""


@pytest.mark.gpu
def test_real_pytorch_on_a_pool() -> None:
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-c", _TORCH_CHILD], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok"), proc.stdout


@pytest.mark.gpu
def test_real_pytorch_out_of_the_pools_memory() -> None:
    """Past the pool's limit the entry point throws its C++ out_of_memory, which PyTorch
    raises as a RuntimeError naming aml's error (kept in hook.errors), never a tensor at
    address 0; the process goes on, the next allocation is served, and tensors alive at
    exit are freed without a crash."""
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-c", _TORCH_OOM_CHILD], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused AMLMemoryError 3" in proc.stdout, proc.stdout
    assert proc.stdout.rstrip().endswith("ok"), proc.stdout


# -- scoped pools: torch.cuda.MemPool over an aml pool (aml_core.gpu.torch_pool) --------------

_MEMPOOL_CHILD = """
import aml_core, aml_cuda, torch
from aml_core.errors import AMLMemoryError
before = torch.ones(1 << 20, device="cuda")  # PyTorch has allocated: the MemPool comes after
pool = aml_core.pool(aml_cuda.create(0), limit=512 << 20)
other = aml_core.pool(aml_cuda.create(0))
mp, mp2 = aml_cuda.torch_mem_pool(pool), aml_cuda.torch_mem_pool(other)
with mp.use():
    x = torch.arange(1 << 24, device="cuda", dtype=torch.float32)   # 64 MiB from the aml pool
with torch.cuda.use_mem_pool(mp2.mempool):                         # two alive at once
    y = torch.ones(1 << 20, device="cuda")
with mp.use():
    try:
        torch.empty(1 << 30, dtype=torch.uint8, device="cuda")     # past the aml limit
    except torch.OutOfMemoryError:
        pass
    else:
        raise AssertionError("no torch.OutOfMemoryError")
    z = torch.ones(1 << 20, device="cuda")                         # the next one is served
outside = torch.ones(1 << 20, device="cuda")                       # PyTorch's own pool again
assert isinstance(mp.errors[-1], AMLMemoryError), mp.errors
assert float(x[-1]) == float((1 << 24) - 1) and float(y.sum() + z.sum()) == float(2 << 20)
assert pool.pool_stats.bytes_in_use >= 64 << 20 and other.pool_stats.bytes_in_use > 0
assert "aml memory summary" in aml_core.memory_summary(pool)
try:
    with mp.use():
        w = torch.ones(1 << 20, device="cuda")
        raise KeyError("left by an exception")
except KeyError:
    pass
del x, y, z, w
torch.cuda.synchronize()
mp.close()
mp2.close()
print("back", pool.pool_stats.bytes_in_use, other.pool_stats.bytes_in_use, mp.live, mp2.live, flush=True)
assert (pool.pool_stats.bytes_in_use, other.pool_stats.bytes_in_use) == (0, 0)
print("ok", torch.__version__, flush=True)
"""

_MEMPOOL_ASYNC_CHILD = """
import aml_core, aml_cuda, torch
from aml_core.errors import AMLNotSupported
pool = aml_core.pool(aml_cuda.create(0))
try:
    aml_cuda.torch_mem_pool(pool)
except AMLNotSupported as exc:
    print("refused", exc, flush=True)
"""


@pytest.mark.gpu
def test_real_pytorch_mempool_over_an_aml_pool() -> None:
    """Issue 33 item 2 on a GPU: a MemPool over an aml pool after PyTorch allocated, two
    at once, torch.OutOfMemoryError past the aml limit with the next allocation served, a
    scope left by an exception, and every segment back in the aml pools after close()."""
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-c", _MEMPOOL_CHILD], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "back 0 0 0 0" in proc.stdout, proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("ok"), proc.stdout


@pytest.mark.gpu
def test_real_pytorch_mempool_under_cuda_malloc_async_is_refused() -> None:
    """pytorch#192464: PyTorch's cudaMallocAsync backend has no MemPools; aml says so."""
    pytest.importorskip("torch")
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    proc = subprocess.run(
        [sys.executable, "-c", _MEMPOOL_ASYNC_CHILD],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused PyTorch's cudaMallocAsync allocator backend has no MemPools" in proc.stdout, proc.stdout
