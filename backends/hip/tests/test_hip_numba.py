"""aml_hip.numba_manager: Numba's External Memory Management plugin (:mod:`aml_core.gpu.numba_emm`)
over the HIP double's areas and pools, with numba-cuda's own interface classes
(``numba.cuda.HostOnlyCUDAMemoryManager``, ``MemoryPointer``, ``PinnedMemory``,
``MappedMemory``, ``MemoryInfo``, ``IpcHandle``), which import without a GPU. Numba is
given the plugin as it takes one (``set_memory_manager`` checks the interface version), and
each method is called as Numba's context calls it, with a stand-in context object (a real
context needs a GPU: tests/test_frameworks_gpu.py)."""

from __future__ import annotations

import ctypes
import gc
import pickle
from pathlib import Path
from typing import Any

import aml_hip
import pytest
from hip_helpers import HipDouble

import aml_core
from aml_core.errors import AMLMemoryError, AMLNotSupported, AMLValueError
from tests.support.child import pickled

cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")

CHILD = Path(__file__).resolve().parent / "numba_child.py"


class Context:
    """What Numba passes as ``context`` (the plugin keeps a weak proxy of it)."""


def manager(area: Any, **kwargs: Any) -> Any:
    return aml_hip.numba_manager(area, **kwargs)(context=Context())


def test_numba_takes_the_plugin(hip: HipDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    from numba.cuda.cudadrv import driver

    monkeypatch.setattr(driver, "_memory_manager", driver._memory_manager)  # restored after
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        cls = aml_hip.use_with_numba(pool)
        assert driver._memory_manager is cls
        assert issubclass(cls, cuda.BaseCUDAMemoryManager)
        assert issubclass(cls, cuda.HostOnlyCUDAMemoryManager)
        assert cls(context=None).interface_version == 1
        assert cls.area is pool


def test_memalloc_takes_a_block_of_the_pool(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        mm = manager(pool)
        mm.initialize()
        mem = mm.memalloc(1000)
        assert isinstance(mem, cuda.MemoryPointer)
        assert mem.size == 1000
        assert pool.pool_stats.bytes_in_use == 1000
        ptr = int(mem.device_pointer)
        assert ptr == pool.buffers()[0].ptr
        assert mm.live == 1
        del mem
        gc.collect()
        assert (mm.live, pool.pool_stats.bytes_in_use) == (0, 0)
        again = mm.memalloc(1000)
        assert int(again.device_pointer) == ptr  # the pool's cached block
        assert hip.calls("hipMalloc") == 1
        del again


def test_the_pools_limit_governs_numba(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area, limit=4 << 20) as pool:
        mm = manager(pool)
        with pytest.raises(AMLMemoryError, match="limit") as info:
            mm.memalloc(8 << 20)
        assert isinstance(info.value, MemoryError)
        ok = mm.memalloc(1 << 20)  # the next one works
        assert int(ok.device_pointer) != 0
        del ok
        with pytest.raises(AMLValueError):
            mm.memalloc(0)


def test_memhostalloc_from_a_pinned_pool(hip: HipDouble) -> None:
    with (
        aml_hip.create(0, 0) as area,
        aml_hip.pinned_pool(0) as pinned,
        aml_hip.pinned_pool(0, mapped=True) as mapped_pool,
    ):
        mm = manager(area, pinned=pinned)
        host = mm.memhostalloc(5000, mapped=False, portable=True, wc=False)
        assert isinstance(host, cuda.PinnedMemory)
        assert (host.size, pinned.pinned_stats.bytes_reserved) == (5000, 8192)
        ctypes.memset(host.host_pointer, 7, 5000)
        del host
        gc.collect()
        assert pinned.pinned_stats.live_blocks == 0
        with pytest.raises(AMLValueError, match="mapped=True"):
            mm.memhostalloc(4096, mapped=True)
        with pytest.raises(AMLNotSupported, match="write-combined"):
            mm.memhostalloc(4096, wc=True)
        mapped = manager(area, pinned=mapped_pool).memhostalloc(4096, mapped=True)
        block = mapped_pool.buffers()[0]
        assert int(mapped.device_pointer) == aml_hip.get_runtime().host_device_pointer(block.ptr)
        del mapped, block
        gc.collect()
        assert mapped_pool.pinned_stats.live_blocks == 0


def test_mempin_registers_the_callers_memory(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as area:
        mm = manager(area)
        owner = ctypes.create_string_buffer(8192)
        addr = ctypes.addressof(owner)
        pinned = mm.mempin(owner, addr, 8192)
        assert isinstance(pinned, cuda.PinnedMemory)
        assert hip.last("hipHostRegister") == (addr, 8192, 0)
        assert hip.live()["registered"] == 1
        del pinned
        gc.collect()
        assert hip.live()["registered"] == 0
        mapped = mm.mempin(owner, addr, 8192, mapped=True)
        assert hip.last("hipHostRegister") == (addr, 8192, 2)
        assert int(mapped.device_pointer) == addr  # the double maps host memory at its address
        del mapped
        gc.collect()
        assert hip.live()["registered"] == 0


def test_get_memory_info(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area, limit=64 << 20) as pool:
        mm = manager(pool)
        info = mm.get_memory_info()
        assert isinstance(info, cuda.MemoryInfo)
        assert info == (64 << 20, 64 << 20)
        mem = mm.memalloc(1 << 20)
        free, total = mm.get_memory_info()
        assert total == 64 << 20
        assert free == (64 << 20) - pool.pool_stats.bytes_reserved + pool.pool_stats.bytes_cached
        del mem
        device = manager(area).get_memory_info()  # no limit: the device's own figures
        assert device.total == area.total_memory()
        assert 0 < device.free <= device.total


def test_reset_gives_the_pools_cache_back(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        mm = manager(pool)
        mem = mm.memalloc(1 << 20)
        del mem
        gc.collect()
        assert pool.pool_stats.bytes_reserved > 0
        mm.reset()
        assert pool.pool_stats.bytes_reserved == 0
        assert hip.calls("hipFree") == 1


def test_defer_cleanup_holds_frees_until_the_end(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        mm = manager(pool)
        mem = mm.memalloc(4096)
        with mm.defer_cleanup():
            with mm.defer_cleanup():
                del mem
                gc.collect()
            assert pool.pool_stats.bytes_in_use == 4096  # still waiting: the outer block
            assert mm.live == 1
        assert (pool.pool_stats.bytes_in_use, mm.live) == (0, 0)


def test_a_numba_ipc_handle_opened_twice(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        mm = manager(pool)
        mem = mm.memalloc(1 << 16)
        area.write(pool.slab_of(pool.buffers()[0])[0], b"numba block")  # type: ignore[arg-type]
        handle = mm.get_ipc_handle(mem)
        assert isinstance(handle, cuda.IpcHandle)
        assert handle.size == 1 << 16
        assert pickle.loads(pickle.dumps(handle)).handle == handle.handle
        report = hip.run_child([str(CHILD)], {"handle": pickled(handle), "read": 11})
        assert report["type"] == "AmlIpcHandle"
        assert bytes.fromhex(report["read"]) == b"numba block"
        assert report["open_calls"] == 1
        assert report["second_open"]["class"] == "AMLValueError"
        assert report["second_open_is_value_error"] is True  # Numba's own handle raises ValueError
        assert report["second_close"]["class"] == "AMLValueError"
        assert report["live_ipc"] == 0
        with pytest.raises(AMLValueError, match="not memory this Numba manager"):
            mm.get_ipc_handle(cuda.MemoryPointer(None, ctypes.c_void_p(0x1000), 16))
        del mem


def test_bad_input(hip: HipDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    with aml_hip.create(0, 1) as host, pytest.raises(AMLValueError, match="device or managed"):
        aml_hip.numba_manager(host)
    with aml_hip.create(0, 0) as area:
        with pytest.raises(AMLValueError, match="host area"):
            aml_hip.numba_manager(area, pinned=area)
        cls = aml_hip.numba_manager(area)
        mm = cls(context=Context())
    with pytest.raises(AMLValueError):
        mm.initialize()  # the area is closed
    with pytest.raises(AMLValueError):
        mm.memalloc(16)
    monkeypatch.setitem(sys.modules, "numba.cuda", None)
    with aml_hip.create(0, 0) as area, pytest.raises(AMLNotSupported, match="numba-cuda"):
        aml_hip.numba_manager(area)
