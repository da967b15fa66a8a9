"""aml_hip.cupy_scope and aml_hip.use_pinned_with_cupy (:mod:`aml_core.gpu.cupy_scope`) over
the HIP double's areas and pools, against the stand-in ``cupy`` module of
:mod:`aml_core.testing.hook_fakes`, whose ``using_allocator`` keeps its allocator per thread
as CuPy's does (cupy/cuda/__init__.py: ``memory._set_thread_local_allocator``). With real
CuPy: tests/test_frameworks_gpu.py (GPU only)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import aml_hip
import pytest
from hip_helpers import HipDouble

import aml_core
import aml_core.gpu.cupy_scope
from aml_core.errors import AMLBusyError, AMLMemoryError, AMLNotSupported, AMLValueError
from aml_core.testing.hook_fakes import faked


@pytest.fixture
def cupy() -> Iterator[Any]:
    with faked("cupy") as fake:
        yield fake


def test_the_scope_allocates_from_the_pool_in_its_block_only(hip: HipDouble, cupy: Any) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        scope = aml_hip.cupy_scope(pool)
        outside = cupy.cuda.get_allocator()
        with scope as entered:
            assert entered is scope
            assert scope.active
            ptr = cupy.cuda.get_allocator()(4096)
            assert pool.pool_stats.bytes_in_use == 4096
            assert scope.live == 1
        assert not scope.active
        assert cupy.cuda.get_allocator() is outside
        assert ptr.mem.size == 4096  # the array outlives the scope...
        del ptr
        gc.collect()
        assert (scope.live, pool.pool_stats.bytes_in_use) == (0, 0)  # ...then goes back
        with scope:  # reusable
            again = cupy.cuda.get_allocator()(4096)
        assert hip.calls("hipMalloc") == 1  # the pool's cached slab, served again
        del again
        gc.collect()


def test_scopes_nest_and_any_number_exist(hip: HipDouble, cupy: Any) -> None:
    with (
        aml_hip.create(0, 0) as area,
        aml_core.pool(area) as outer_pool,
        aml_core.pool(area) as inner_pool,
    ):
        outer, inner = aml_hip.cupy_scope(outer_pool), aml_hip.cupy_scope(inner_pool)
        with outer:
            a = cupy.cuda.get_allocator()(1000)
            with inner:
                b = cupy.cuda.get_allocator()(1000)
            c = cupy.cuda.get_allocator()(1000)
        assert (outer.live, inner.live) == (2, 1)
        assert (outer_pool.pool_stats.bytes_in_use, inner_pool.pool_stats.bytes_in_use) == (2000, 1000)
        del a, b, c
        gc.collect()
        assert (outer.live, inner.live) == (0, 0)


def test_the_scope_is_per_thread(hip: HipDouble, cupy: Any) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        scope = aml_hip.cupy_scope(pool)
        seen: dict[str, Any] = {}
        inside = threading.Event()
        leave = threading.Event()

        def worker() -> None:
            with scope:
                seen["worker"] = cupy.cuda.get_allocator()
                inside.set()
                leave.wait(10)

        t = threading.Thread(target=worker)
        t.start()
        inside.wait(10)
        seen["main"] = cupy.cuda.get_allocator()  # the main thread is outside the scope
        assert not scope.active
        leave.set()
        t.join()
        assert seen["worker"] == scope.allocator
        assert seen["main"] is cupy.state["allocator"]


def test_a_scope_left_by_an_exception(hip: HipDouble, cupy: Any) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        scope = aml_hip.cupy_scope(pool)
        outside = cupy.cuda.get_allocator()
        held: list[Any] = []

        def body() -> None:
            with scope:
                held.append(cupy.cuda.get_allocator()(2048))
                raise KeyError("inside")

        with pytest.raises(KeyError, match="inside"):
            body()
        assert held[0].mem.size == 2048
        assert cupy.cuda.get_allocator() is outside
        assert not scope.active
        held.clear()
        gc.collect()
        assert (scope.live, pool.pool_stats.bytes_in_use) == (0, 0)


def test_a_refusal_raises_in_cupy_and_the_next_allocation_works(hip: HipDouble, cupy: Any) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area, limit=4 << 20) as pool:
        scope = aml_hip.cupy_scope(pool)
        with scope:
            with pytest.raises(AMLMemoryError, match="limit"):
                cupy.cuda.get_allocator()(8 << 20)
            ok = cupy.cuda.get_allocator()(1 << 20)
            assert ok.ptr != 0
        assert scope.live == 1
        del ok
        gc.collect()
        assert scope.live == 0


def test_a_scope_over_a_plain_area(hip: HipDouble, cupy: Any) -> None:
    with aml_hip.create(0, 0) as area:
        scope = aml_hip.cupy_scope(area)
        with scope:
            ptr = cupy.cuda.get_allocator()(4096)
        assert ptr.mem.owner.buf.area is area
        assert area.stats.live_mappings == 1
        del ptr
        gc.collect()
        assert area.stats.live_mappings == 0


def test_scope_bad_input(hip: HipDouble, cupy: Any) -> None:
    with aml_hip.create(0, 0) as area:
        pool = aml_core.pool(area)
        pool.close()
        with pytest.raises(AMLValueError):
            aml_hip.cupy_scope(pool)  # a closed pool
        with aml_hip.create(0, 1) as host, pytest.raises(AMLValueError, match="device or managed"):
            aml_hip.cupy_scope(host)
        scope = aml_hip.cupy_scope(area)
        with pytest.raises(AMLValueError, match="not entered"):
            scope.__exit__(None, None, None)
    with pytest.raises(AMLValueError):  # the area closed since the scope was made
        scope.__enter__()
    with aml_hip.create(0, 0) as hip_area, pytest.raises(AMLValueError, match="aml_hip"):
        aml_core.gpu.cupy_scope.cupy_scope(hip_area, backend="cuda")  # a HIP area for aml_cuda


def test_without_cupy_installed(hip: HipDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)
    with aml_hip.create(0, 0) as area, pytest.raises(AMLNotSupported, match="CuPy"):
        aml_hip.cupy_scope(area)


def test_cupy_pinned_memory_from_a_pinned_pool(hip: HipDouble, cupy: Any) -> None:
    with aml_hip.pinned_pool(0) as pinned:
        hook = aml_hip.use_pinned_with_cupy(pinned)
        assert cupy.state["pinned"] == hook.malloc
        ptr = cupy.state["pinned"](10_000)
        assert ptr.size == 10_000
        assert pinned.pinned_stats.bytes_reserved == 12_288  # 3 pages, nothing more
        assert hip.last("hipHostRegister")[0] == ptr.ptr  # type: ignore[index]
        with pytest.raises(AMLBusyError):
            aml_hip.use_pinned_with_cupy(pinned)  # one at a time
        with pytest.raises(AMLBusyError, match="holds 1"):
            hook.uninstall()
        del ptr
        gc.collect()
        assert hook.live == 0
        hook.uninstall()
        assert cupy.state["pinned"] is cupy.defaults[1]
        with pytest.raises(AMLValueError, match="not installed"):
            hook.uninstall()


def test_cupy_pinned_bad_input(hip: HipDouble, cupy: Any) -> None:
    with aml_hip.create(0, 0) as device, pytest.raises(AMLValueError, match="host area"):
        aml_hip.use_pinned_with_cupy(device)
    with (
        aml_hip.create(0, 0) as device,
        aml_hip.pinned_pool(0) as pinned,
        aml_hip.use_with_cupy(device, pinned=pinned),
        pytest.raises(AMLBusyError),
    ):
        aml_hip.use_pinned_with_cupy(pinned)  # the process-wide hook gives pinned memory already


def test_a_foreign_pointer_and_a_double_free_are_kept_not_raised(hip: HipDouble, cupy: Any) -> None:
    # CuPy frees from a deallocator, where nothing may raise: the scope keeps the error.
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        scope = aml_hip.cupy_scope(pool)
        state = scope._hook._state
        assert state is not None
        state.cupy_free(0xDEAD000, 0)  # never handed out
        assert len(scope.errors) == 1
        assert isinstance(scope.errors[0], AMLValueError)
        addr = state.cupy_malloc(4096, 0)
        state.cupy_free(addr, 0)
        state.cupy_free(addr, 0)  # twice
        assert len(scope.errors) == 2
        assert isinstance(scope.errors[1], AMLValueError)
        assert (scope.live, pool.pool_stats.bytes_in_use) == (0, 0)
