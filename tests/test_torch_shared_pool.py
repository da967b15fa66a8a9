"""One aml pool, every framework (issue 33 item 5), PyTorch's side: PyTorch (the
process-wide hook, or a scoped MemPool) and CuPy take their memory from one pool, whose
limit and ``on_oom`` govern both and whose ``memory_summary`` shows both; and a block of
an aml pool is a PyTorch tensor without a copy (DLPack, on PyTorch's CPU wheel here).

The frameworks are the fakes of aml_core.testing.hook_fakes (their entry points called
through their C addresses as PyTorch and CuPy call them) over host memory that calls
itself device memory; CuPy's and Numba's own side is in their tests. Not run: the GPU
(real PyTorch, CuPy and Numba in one process)."""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Iterator
from typing import Any

import pytest

import aml_core
from aml_core.errors import AMLMemoryError
from aml_core.gpu import hooks, torch_pool
from aml_core.host import HostArea
from aml_core.pool import PoolStats
from aml_core.testing.hook_fakes import FakeDeviceArea, faked, torch_entry_points

MiB = 1 << 20


@pytest.fixture
def both() -> Iterator[tuple[Any, Any]]:
    with faked("torch") as torch, faked("cupy") as cupy:
        yield torch, cupy
    gc.collect()
    torch_pool._reclaim()
    assert torch_pool._bound == {}


def test_the_hook_and_cupy_share_one_pools_limit_and_on_oom(both: tuple[Any, Any]) -> None:
    torch, cupy = both
    with FakeDeviceArea() as area, aml_core.pool(area, limit=8 * MiB) as pool:
        torch_hook = hooks.use_with_torch(pool, backend="cuda")
        cupy_hook = hooks.use_with_cupy(pool, backend="cuda")
        malloc, free = torch_entry_points(torch)
        tensor = malloc(3 * MiB, 0, None)
        arrays = [cupy.state["allocator"](4 * MiB)]
        ctypes.memset(tensor, 1, 3 * MiB)
        ctypes.memset(arrays[0].ptr, 2, 4 * MiB)
        assert pool.pool_stats.bytes_in_use == 7 * MiB  # one pool's figures for both
        assert "Requested memory              |            7.0 MiB" in aml_core.memory_summary(pool)
        with pytest.raises(RuntimeError, match="out of memory"):
            malloc(4 * MiB, 0, None)  # CuPy's array counts against PyTorch's request
        assert isinstance(torch_hook.errors[-1], AMLMemoryError)
        asked: list[int] = []

        def on_oom(requested: int, stats: PoolStats) -> bool:
            asked.append(requested)
            arrays.clear()  # CuPy lets its array go: the pool has room again
            return True

        pool.on_oom = on_oom
        again = malloc(4 * MiB, 0, None)  # the callback ran for PyTorch, freed CuPy's memory
        assert again
        assert asked == [4 * MiB]
        assert cupy_hook.live == 0
        assert ctypes.string_at(tensor, 1) == b"\x01"  # PyTorch's first tensor untouched
        free(tensor, 3 * MiB, 0, None)
        free(again, 4 * MiB, 0, None)
        cupy_hook.uninstall()
        assert pool.pool_stats.bytes_in_use == 0


def test_a_scoped_mempool_and_cupy_share_one_pool(both: tuple[Any, Any]) -> None:
    torch, cupy = both
    with FakeDeviceArea() as area, aml_core.pool(area, limit=8 * MiB) as pool:
        cupy_hook = hooks.use_with_cupy(pool, backend="cuda")
        array = cupy.state["allocator"](5 * MiB)
        with torch_pool.torch_mem_pool(pool, backend="cuda") as mp:
            with mp.use():
                x = torch.cuda.empty(MiB)  # a 2 MiB segment: 7 MiB of 8 in use
                with pytest.raises(torch.OutOfMemoryError):
                    torch.cuda.empty(2 * MiB)  # past the shared limit
            assert isinstance(mp.errors[-1], AMLMemoryError)
            assert pool.pool_stats.bytes_in_use == 7 * MiB
            del x
        del array
        assert (pool.pool_stats.bytes_in_use, cupy_hook.live) == (0, 0)
        cupy_hook.uninstall()


def test_a_pool_block_is_a_pytorch_tensor_without_a_copy() -> None:
    """PyTorch's CPU wheel: torch.from_dlpack of a pooled aml buffer shares its bytes."""
    torch = pytest.importorskip("torch")
    with HostArea() as area, aml_core.pool(area) as pool:
        buf = pool.mmap(4096)
        tensor = torch.from_dlpack(buf)
        assert tensor.data_ptr() == buf.ptr
        assert tensor.numel() == 4096
        tensor.fill_(0x3C)  # written by PyTorch, read through aml
        assert ctypes.string_at(buf.ptr + 4095, 1) == b"\x3c"
        ctypes.memset(buf.ptr, 0x11, 1)  # written through aml, read by PyTorch
        assert int(tensor[0]) == 0x11
        del tensor
        pool.munmap(buf)
        assert pool.pool_stats.bytes_in_use == 0
