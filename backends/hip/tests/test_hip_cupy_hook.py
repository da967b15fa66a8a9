"""aml_hip.use_with_cupy: the shared CuPy hook (:mod:`aml_core.gpu.hooks`) bound to aml-hip.

Against a stand-in ``cupy`` module over the HIP double's areas and pools (allocation through
the area, lifetime, one hook at a time whatever its backend, areas of another backend
refused), and with real CuPy where the double forwards to CUDA on an NVIDIA GPU
(``AML_HIP_TEST_DOUBLE=forward``, ``run_forward.sh``): there a HIP device pointer is a CUDA
pointer, so CuPy's CUDA build computes in memory aml-hip allocated, as CuPy's ROCm build does
on an AMD GPU."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from typing import Any

import aml_hip
import pytest
from aml_hip import HipFlags
from hip_helpers import HipDouble

import aml_core
from aml_core.errors import AMLBusyError, AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.gpu import hooks
from aml_core.testing.hook_fakes import FakeDeviceArea, faked


@pytest.fixture
def cupy() -> Iterator[Any]:
    with faked("cupy") as fake:
        yield fake


def test_aml_hip_exports_the_shared_hooks() -> None:
    assert set(hooks.__all__) <= set(aml_hip.__all__)
    assert set(hooks.__all__) <= set(dir(aml_hip))
    for name in ("use_with_cupy", "use_with_torch", "torch_mem_pool"):
        assert getattr(aml_hip, name) == getattr(aml_hip.BACKEND, name), name
    assert aml_hip.CupyHook is hooks.CupyHook
    assert aml_hip.TorchHook is hooks.TorchHook


def test_cupy_allocates_from_a_hip_area(hip: HipDouble, cupy: Any) -> None:
    with aml_hip.create(0, 0) as area, aml_hip.use_with_cupy(area) as hook:
        assert cupy.state["allocator"] == hook.malloc
        assert "(hip)" in repr(hook)
        ptr = cupy.state["allocator"](4096)
        buf = ptr.mem.owner.buf
        assert (ptr.ptr, ptr.mem.size, ptr.mem.device_id) == (buf.ptr, 4096, 0)
        assert hip.last("hipMalloc")[1] == 4096  # type: ignore[index]
        assert (hook.live, area.stats.live_mappings) == (1, 1)
        del ptr
        gc.collect()
        assert buf.freed
        assert hip.calls("hipFree") == 1
        assert hook.live == 0
    assert cupy.state["allocator"] is cupy.defaults[0]


def test_a_hip_pool_behind_cupy(hip: HipDouble, cupy: Any) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool, aml_hip.use_with_cupy(pool) as hook:
        first = hook.malloc(1000)
        addr = first.ptr
        del first
        gc.collect()
        second = hook.malloc(1000)
        assert second.ptr == addr  # the pool's block again
        assert hip.calls("hipMalloc") == 1
        del second
        gc.collect()
    assert hip.calls("hipFree") == 1


def test_pinned_memory_from_a_hip_host_area(hip: HipDouble, cupy: Any) -> None:
    with (
        aml_hip.create(0, 0) as area,
        aml_hip.create(0, HipFlags.ALLOC_HOST) as host,
        aml_hip.use_with_cupy(area, pinned=host),
    ):
        p = cupy.state["pinned"](100)
        assert p.size == 100
        assert host.stats.live_mappings == 1
        assert hip.calls(aml_hip.get_runtime().lib.host_alloc) == 1
        del p
        gc.collect()
        assert host.stats.live_mappings == 0
    assert cupy.state["pinned"] is cupy.defaults[1]


def test_one_cupy_hook_whatever_its_backend(cupy: Any) -> None:
    """CuPy has one allocator: a hook of another backend installed first makes aml-hip's
    busy, and aml-hip's makes the other's busy."""
    area = FakeDeviceArea()
    other = hooks.use_with_cupy(area, backend="cuda")
    with pytest.raises(AMLBusyError, match="installed already"):
        aml_hip.use_with_cupy(area)
    other.uninstall()
    mine = aml_hip.use_with_cupy(area)
    with pytest.raises(AMLBusyError, match=r"CupyHook \(hip\)"):
        hooks.use_with_cupy(area, backend="cuda")
    mine.uninstall()
    area.close()


def test_areas_of_another_backend_are_refused(hip: HipDouble, cupy: Any) -> None:
    """aml_cuda.use_with_cupy (the shared hook bound to ``cuda``) refuses a HIP area and a
    pool over one, naming the hook that takes them; nothing is installed."""
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        for target in (area, pool):
            with pytest.raises(AMLValueError, match=r"is a hip area \(use aml_hip.use_with_cupy\)"):
                hooks.use_with_cupy(target, backend="cuda")
        with pytest.raises(AMLValueError, match="hip area"):
            hooks.use_with_torch(area, backend="cuda")
    assert cupy.state["allocator"] is cupy.defaults[0]


def test_bad_input(hip: HipDouble, cupy: Any) -> None:
    with pytest.raises(AMLTypeError):
        aml_hip.use_with_cupy(object())  # type: ignore[arg-type]
    with aml_hip.create(0, HipFlags.ALLOC_HOST) as host, aml_hip.create(0, 0) as device:
        with pytest.raises(AMLValueError, match="device or managed"):
            aml_hip.use_with_cupy(host)
        with pytest.raises(AMLValueError, match="host area"):
            aml_hip.use_with_cupy(device, pinned=device)
    closed = aml_hip.create(0, 0)
    closed.close()
    with pytest.raises(AMLValueError, match="closed"):
        aml_hip.use_with_cupy(closed)
    assert cupy.state["allocator"] is cupy.defaults[0]


@pytest.mark.gpu
def test_real_cupy_on_a_hip_pool(hip: HipDouble) -> None:
    """CuPy's arrays in a pool over an aml_hip area, on the double forwarding to CUDA."""
    if hip.mode != "forward":
        pytest.skip("needs the HIP double forwarding to CUDA on an NVIDIA GPU (run_forward.sh)")
    real = pytest.importorskip("cupy")
    under = aml_hip.create(0)
    pool = aml_core.pool(under)
    try:
        with aml_hip.use_with_cupy(pool) as hook:
            x = real.arange(1 << 20, dtype=real.float32)
            assert float(x.sum()) == float((1 << 20) * ((1 << 20) - 1) / 2)
            assert pool.stats.live_mappings == 0  # blocks of the kernel: no Buffer is made
            assert pool.pool_stats.bytes_in_use >= 4 << 20
            assert hook.live >= 1
            assert hip.calls("hipMalloc") >= 1  # the memory came through aml-hip
            y = x * 2  # CuPy kernels write into the pool too
            assert float(y[-1]) == float(2 * ((1 << 20) - 1))
            del x, y
            real.cuda.Device(0).synchronize()
            gc.collect()
            assert hook.live == 0
        assert pool.pool_stats.bytes_in_use == 0
    finally:
        pool.close()
        under.close()


def test_without_cupy_installed_the_hook_is_not_supported(
    hip: HipDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sys.modules["cupy"] = None: ``import cupy`` fails as it does where CuPy is not installed.
    monkeypatch.setitem(sys.modules, "cupy", None)
    with aml_hip.create(0, 0) as area:
        with pytest.raises(AMLNotSupported, match=r"needs CuPy \(the 'cupy' package\)") as info:
            aml_hip.use_with_cupy(area)
        assert isinstance(info.value.__cause__, ModuleNotFoundError)
        assert hooks._installed is None
        assert area.stats.live_mappings == 0
