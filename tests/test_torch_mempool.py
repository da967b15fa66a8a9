"""Scoped PyTorch pools (aml_core.gpu.torch_pool, issue 33 item 2) against the fake
``torch`` of aml_core.testing.hook_fakes: its MemPool, use_mem_pool and empty_cache model
what PyTorch's caching allocator does with a MemPool's allocator, and call aml's slot
entry points through their C addresses as PyTorch does. The memory underneath is a host
area that calls itself device memory, so every block is written and read back. Real
PyTorch on a GPU: backends/cuda/tests/test_cuda_torch_hook.py (not run without one)."""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Iterator
from typing import Any

import pytest

import aml_core
from aml_core import _hooks
from aml_core.errors import AMLBusyError, AMLMemoryError, AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.gpu import hooks, torch_pool
from aml_core.host import HostArea
from aml_core.pool import Pool
from aml_core.testing.hook_fakes import FakeDeviceArea, entry_points, faked

MiB = 1 << 20


@pytest.fixture
def torch() -> Iterator[Any]:
    with faked("torch") as fake:
        yield fake
    gc.collect()
    torch_pool._reclaim()
    assert torch_pool._bound == {}, "a test left an aml MemPool bound"


@pytest.fixture
def pool() -> Iterator[Pool]:
    with FakeDeviceArea() as area, aml_core.pool(area) as p:
        yield p


def _mp(pool: Pool, **kw: Any) -> torch_pool.TorchMemPool:
    return torch_pool.torch_mem_pool(pool, backend="cuda", **kw)


def test_a_mempool_at_any_time_serves_its_scope_and_gives_everything_back(torch: Any, pool: Pool) -> None:
    torch.state["initialized"] = True  # PyTorch has allocated: the process-wide hook is too late
    outside = torch.cuda.empty(MiB)
    mp = _mp(pool)
    assert mp.device == 0
    assert mp.mempool is not None
    with mp.use():
        x = torch.cuda.empty(3 * MiB)  # a new segment: from the aml pool
        ctypes.memset(x.data_ptr(), 0x5A, 3 * MiB)
        assert ctypes.string_at(x.data_ptr() + 3 * MiB - 4, 4) == b"\x5a" * 4
    assert outside == ("PyTorch's own memory", MiB)  # before the scope: PyTorch's
    assert torch.cuda.empty(MiB)[0] == "PyTorch's own memory"  # after it too
    assert (mp.live, pool.pool_stats.bytes_in_use) == (1, 4 * MiB)  # PyTorch's 2 MiB rounding
    assert "Allocated memory (blocks)     |            4.0 MiB" in aml_core.memory_summary(pool)
    del x  # PyTorch caches the segment in the MemPool: still aml's block in use
    assert pool.pool_stats.bytes_in_use == 4 * MiB
    mp.close()  # the MemPool goes: its cache comes back to aml
    assert mp.closed
    assert mp.mempool is None
    assert (mp.live, pool.pool_stats.bytes_in_use) == (0, 0)
    assert torch.state["pools"] == {}
    assert torch_pool._bound == {}
    assert mp.errors == []


def test_the_memory_shows_in_history_and_snapshots(torch: Any, pool: Pool) -> None:
    pool.record_history()
    with _mp(pool) as mp:
        with mp.use():
            x = torch.cuda.empty(MiB)
        ptr = x.data_ptr()
        used = [
            (b.address, b.requested) for s in pool.snapshot().segments for b in s.blocks if b.state == "used"
        ]
        assert used == [(ptr, 2 * MiB)]  # PyTorch's segment: one aml block
        del x
    actions = [(e.action, e.address) for e in pool.snapshot().history if e.action in ("alloc", "free")]
    assert actions == [("alloc", ptr), ("free", ptr)]


def test_tensors_that_outlive_the_mempool_come_back_after_them(torch: Any, pool: Pool) -> None:
    """pytorch#145168 with aml: a tensor alive at close keeps its segment; once it is
    freed, close() again (or torch.cuda.empty_cache()) returns it, and the slot goes."""
    mp = _mp(pool)
    with mp.use():
        kept = torch.cuda.empty(MiB)
        dropped = torch.cuda.empty(5 * MiB)
    del dropped
    mp.close()
    assert (mp.live, pool.pool_stats.bytes_in_use) == (1, 2 * MiB)  # only the live tensor's
    assert mp.slot in torch_pool._bound
    del kept  # back in PyTorch's cache of the dead pool: still out of aml
    assert pool.pool_stats.bytes_in_use == 2 * MiB
    mp.close()  # again: empty_cache, then the slot is unbound
    assert (mp.live, pool.pool_stats.bytes_in_use) == (0, 0)
    assert torch_pool._bound == {}


def test_several_mempools_at_once(torch: Any) -> None:
    with FakeDeviceArea() as a, FakeDeviceArea() as b, aml_core.pool(a) as pa, aml_core.pool(b) as pb:
        with _mp(pa) as first, _mp(pb) as second:
            assert first.slot != second.slot
            with first.use():
                x = torch.cuda.empty(MiB)
            with second.use():  # both alive, each scope its own pool's
                y = torch.cuda.empty(MiB)
            with first.use():
                z = torch.cuda.empty(3 * MiB)
            assert (pa.pool_stats.bytes_in_use, pb.pool_stats.bytes_in_use) == (6 * MiB, 2 * MiB)
            assert (first.live, second.live) == (2, 1)
            del x, y, z
        assert (pa.pool_stats.bytes_in_use, pb.pool_stats.bytes_in_use) == (0, 0)


def test_a_refusal_is_torchs_out_of_memory_and_the_error_is_kept(torch: Any) -> None:
    with FakeDeviceArea() as area, aml_core.pool(area, limit=4 * MiB) as pool, _mp(pool) as mp:
        with mp.use():
            x = torch.cuda.empty(MiB)
            with pytest.raises(torch.OutOfMemoryError):
                torch.cuda.empty(8 * MiB)  # NULL, PyTorch's retry, then its own error
            assert [type(e) for e in mp.errors] == [AMLMemoryError, AMLMemoryError]
            y = torch.cuda.empty(2 * MiB)  # within the limit: served
            assert y.data_ptr()
            assert pool.pool_stats.bytes_in_use == 4 * MiB
        del x, y


def test_a_scope_left_by_an_exception(torch: Any, pool: Pool) -> None:
    mp = _mp(pool)
    kept: list[Any] = []

    def work() -> None:
        with mp.use():
            kept.append(torch.cuda.empty(MiB))
            raise KeyError("in the scope")

    with pytest.raises(KeyError, match="in the scope"):
        work()
    assert mp.live == 1
    assert torch.state["active"][0] == []  # PyTorch's routing ended
    assert torch.cuda.empty(MiB)[0] == "PyTorch's own memory"
    assert mp._scopes == 0
    assert mp.mempool.use_count() == 1
    kept.clear()
    mp.close()
    assert (mp.live, pool.pool_stats.bytes_in_use) == (0, 0)


def test_close_in_a_scope_or_while_held_elsewhere_is_busy(torch: Any, pool: Pool) -> None:
    mp = _mp(pool)
    with mp.use(), pytest.raises(AMLBusyError, match="scope"):
        mp.close()
    held = mp.mempool
    with pytest.raises(AMLBusyError, match="referenced elsewhere"):
        mp.close()
    assert not mp.closed
    assert mp.mempool is held
    with torch.cuda.use_mem_pool(held), pytest.raises(AMLBusyError):
        mp.close()  # PyTorch's own scope holds it too
    del held
    mp.close()
    mp.close()  # again: nothing left, nothing raised
    with pytest.raises(AMLValueError, match="closed"), mp.use():
        pass


def test_bad_input(torch: Any, pool: Pool) -> None:
    with pytest.raises(AMLTypeError, match="takes an aml pool"):
        torch_pool.torch_mem_pool(FakeDeviceArea(), backend="cuda")  # type: ignore[arg-type]
    with (
        HostArea() as host,
        aml_core.pool(host) as host_pool,
        pytest.raises(AMLValueError, match="host memory"),
    ):
        _mp(host_pool)
    closed = aml_core.pool(FakeDeviceArea())
    closed.close()
    with pytest.raises(AMLValueError, match="closed"):
        _mp(closed)
    with pytest.raises(AMLValueError, match="device index"):
        _mp(pool, device=-1)
    assert torch_pool._bound == {}


def test_another_device(torch: Any) -> None:
    """A MemPool of another device than its pool's is refused at once; a call PyTorch
    makes on another device than the slot's is NULL with the error kept."""
    with FakeDeviceArea() as area, aml_core.pool(area) as pool:
        pool.device = 1  # a pool bound to device 1 (the fake area has none of its own)
        with pytest.raises(AMLValueError, match="MemPool of device 0 over a pool of device 1"):
            _mp(pool, device=0)
        with _mp(pool) as mp:
            assert mp.device == 1
            malloc, free = entry_points(*_hooks.slot_entry_points(mp.slot))
            assert malloc(MiB, 0, None) is None  # PyTorch raises its out of memory
            assert isinstance(mp.errors[-1], AMLValueError)
            assert "device 0" in str(mp.errors[-1])
            ptr = malloc(MiB, 1, None)
            assert ptr
            assert mp.live == 1
            free(ptr, MiB, 1, None)
            assert (mp.live, pool.pool_stats.bytes_in_use) == (0, 0)


def test_foreign_and_double_frees_through_a_slot(torch: Any, pool: Pool) -> None:
    with _mp(pool) as mp:
        malloc, free = entry_points(*_hooks.slot_entry_points(mp.slot))
        ptr = malloc(MiB, 0, None)
        free(0x1000, 16, 0, None)  # never handed out
        assert isinstance(mp.errors[-1], AMLValueError)
        free(ptr, MiB, 0, None)
        free(ptr, MiB, 0, None)  # a double free: kept, nothing freed twice
        assert [type(e) for e in mp.errors] == [AMLValueError, AMLValueError]
        assert (mp.live, pool.pool_stats.bytes_in_use) == (0, 0)
        assert malloc(0, 0, None) is None
        assert mp.errors[-1:] == mp.errors[1:]


def test_the_pool_closed_under_an_open_mempool(torch: Any) -> None:
    area = FakeDeviceArea()
    pool = aml_core.pool(area)
    mp = _mp(pool)
    with mp.use():
        x = torch.cuda.empty(MiB)
        pool.close()  # the segment PyTorch holds stays (the pool keeps a slab with a used block)
        with pytest.raises(torch.OutOfMemoryError):
            torch.cuda.empty(4 * MiB)
    assert isinstance(mp.errors[-1], AMLValueError)
    assert "closed" in str(mp.errors[-1])
    ctypes.memset(x.data_ptr(), 1, MiB)  # still PyTorch's memory
    del x
    mp.close()  # its segment goes back: the slab is released
    assert mp.live == 0
    area.close()
    assert area.stats.live_mappings == 0


def test_every_slot_bound_is_busy(torch: Any, pool: Pool) -> None:
    mps = [_mp(pool) for _ in range(_hooks.SLOTS)]
    with pytest.raises(AMLBusyError, match="bound already"):
        _mp(pool)
    mps.pop().close()
    mps.append(_mp(pool))  # a closed one's slot is free again
    for mp in mps:
        mp.close()
    assert torch_pool._bound == {}


def test_a_dropped_mempool_gives_its_slot_back(torch: Any, pool: Pool) -> None:
    """An aml MemPool never closed: PyTorch's ~MemPool empties its cache through the slot
    when it is collected, and the next torch_mem_pool reclaims the slot."""
    mp = _mp(pool)
    with mp.use():
        x = torch.cuda.empty(MiB)
    del x, mp
    gc.collect()
    assert pool.pool_stats.bytes_in_use == 0
    torch_pool._reclaim()
    assert torch_pool._bound == {}


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda t: setattr(t, "__version__", "2.7.1+cu126"), "PyTorch 2.8 or newer"),
        (
            lambda t: t.state.update(backend="cudaMallocAsync"),
            "cudaMallocAsync allocator backend has no MemPools",
        ),
    ],
    ids=["old-torch", "cudaMallocAsync"],
)
def test_unsupported_pytorch(torch: Any, pool: Pool, setup: Any, message: str) -> None:
    setup(torch)
    with pytest.raises(AMLNotSupported, match=message):
        _mp(pool)
    assert torch_pool._bound == {}
    assert torch.state["pools"] == {}


def test_not_with_the_process_wide_hook(torch: Any, pool: Pool) -> None:
    hooks.use_with_torch(pool, backend="cuda")
    with pytest.raises(AMLNotSupported, match="whole process already"):
        _mp(pool)
    assert torch_pool._bound == {}


def test_pytorch_without_a_gpu_is_refused_before_anything_is_made(pool: Pool) -> None:
    """The real PyTorch, where it has no GPU (its CPU wheel here): AMLNotSupported saying
    so, no slot bound, no MemPool made."""
    real = pytest.importorskip("torch")
    if real.cuda.is_available():
        pytest.skip("this PyTorch has a GPU: the refusal is for one without")
    with pytest.raises(AMLNotSupported, match=r"no usable GPU \(torch\.cuda\.is_available\(\) is False"):
        _mp(pool)
    assert torch_pool._bound == {}
