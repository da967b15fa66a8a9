"""aml_cuda.use_with_cupy: the hook's logic against a stand-in ``cupy`` module on any
machine (allocation through the area, lifetime, installing twice, uninstalling while
CuPy holds memory, closing the area under CuPy), and with real CuPy on a GPU."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import aml_cuda
import pytest

import aml_core
from aml_core import Area, Buffer
from aml_core.errors import AMLBusyError, AMLTypeError, AMLValueError
from aml_core.host import HostArea
from aml_core.testing.hook_fakes import FakeDeviceArea, faked


@pytest.fixture
def cupy() -> Iterator[Any]:
    with faked("cupy") as fake:
        yield fake


@pytest.fixture
def area() -> Iterator[Area]:
    area = FakeDeviceArea()
    yield area
    area.close()


def test_cupy_allocates_from_the_area(cupy: Any, area: Area) -> None:
    with aml_cuda.use_with_cupy(area) as hook:
        alloc = cupy.state["allocator"]
        assert alloc == hook.malloc
        ptr = alloc(4096)
        buf: Buffer = ptr.mem.owner.buf
        assert ptr.ptr == buf.ptr
        assert ptr.mem.size == 4096
        assert area.stats.live_mappings == 1
        assert hook.live == 1
        with pytest.raises(AMLBusyError):  # CuPy holds it: the area will not free it
            area.munmap(buf)
        del ptr
        gc.collect()
        assert buf.freed
        assert hook.live == 0
        assert alloc(0).ptr == 0  # empty arrays take no memory
    assert cupy.state["allocator"] is cupy.defaults[0]


def test_a_pool_behind_cupy(cupy: Any, area: Area) -> None:
    with aml_core.pool(area) as pool, aml_cuda.use_with_cupy(pool) as hook:
        first = hook.malloc(1000)
        addr = first.ptr
        del first
        second = hook.malloc(1000)
        assert second.ptr == addr  # the pool's block again
        assert pool.pool_stats.native_allocations == 1
        del second


def test_installed_twice_is_busy(cupy: Any, area: Area) -> None:
    hook = aml_cuda.use_with_cupy(area)
    with pytest.raises(AMLBusyError, match="installed already"):
        aml_cuda.use_with_cupy(area)
    hook.uninstall()
    with pytest.raises(AMLValueError, match="not installed"):
        hook.uninstall()
    again = aml_cuda.use_with_cupy(area)
    again.uninstall()


def test_uninstall_while_cupy_holds_memory(cupy: Any, area: Area) -> None:
    hook = aml_cuda.use_with_cupy(area)
    held = hook.malloc(4096)
    with pytest.raises(AMLBusyError, match="still holds 1"):
        hook.uninstall()
    assert hook.installed
    assert cupy.state["allocator"] == hook.malloc
    hook.uninstall(force=True)
    assert cupy.state["allocator"] is cupy.defaults[0]
    buf = held.mem.owner.buf
    assert not buf.freed  # the array keeps its memory
    del held
    gc.collect()
    assert buf.freed


def test_closing_the_area_under_cupy(cupy: Any) -> None:
    area = FakeDeviceArea()
    hook = aml_cuda.use_with_cupy(area)
    held = hook.malloc(4096)
    buf = held.mem.owner.buf
    with memoryview(buf) as view:
        view[:2] = b"ok"
    with pytest.warns(ResourceWarning, match="still viewed"):
        area.close()
    with memoryview(buf) as view:  # detached, not freed: CuPy's memory is still there
        assert bytes(view[:2]) == b"ok"
    del held, buf, view
    gc.collect()
    assert hook.live == 0
    hook.uninstall()


def test_pinned_allocator(cupy: Any, area: Area) -> None:
    with HostArea() as host, aml_cuda.use_with_cupy(area, pinned=host):
        pinned = cupy.state["pinned"]
        p = pinned(100)
        assert p.size == 100
        assert host.stats.live_mappings == 1
        del p
        gc.collect()
        assert host.stats.live_mappings == 0
    assert cupy.state["pinned"] is cupy.defaults[1]


def test_bad_input(cupy: Any, area: Area) -> None:
    with pytest.raises(AMLTypeError):
        aml_cuda.use_with_cupy(object())  # type: ignore[arg-type]
    with HostArea() as host:
        with pytest.raises(AMLValueError, match="device or managed"):
            aml_cuda.use_with_cupy(host)
        with pytest.raises(AMLValueError, match="host area"):
            aml_cuda.use_with_cupy(area, pinned=area)
    closed = FakeDeviceArea()
    closed.close()
    with pytest.raises(AMLValueError, match="closed"):
        aml_cuda.use_with_cupy(closed)
    assert cupy.state["allocator"] is cupy.defaults[0]


@pytest.mark.gpu
def test_real_cupy_on_a_pool() -> None:
    real = pytest.importorskip("cupy")
    under = aml_cuda.create(0)
    pool = aml_core.pool(under)
    try:
        with aml_cuda.use_with_cupy(pool) as hook:
            x = real.arange(1 << 20, dtype=real.float32)
            assert float(x.sum()) == float((1 << 20) * ((1 << 20) - 1) / 2)
            assert hook.live >= 1  # blocks of the kernel: no Buffer is made
            assert pool.pool_stats.bytes_in_use >= 4 << 20
            assert pool.stats.live_mappings == 0
            del x
            gc.collect()
            assert hook.live == 0
            y = real.ones(1 << 20, dtype=real.float32)  # the freed block again, in C
            assert float(y.sum()) == float(1 << 20)
            del y
            with pytest.raises(MemoryError):  # more than the GPU has: the pool's error, raised to CuPy
                real.empty(1 << 50, dtype=real.uint8)
            assert float(real.arange(10).sum()) == 45.0  # CuPy goes on
        assert pool.pool_stats.bytes_in_use == 0
    finally:
        pool.close()
        under.close()
