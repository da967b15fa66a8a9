"""What of issue 13 one GPU can check (marked ``gpu``): the peer helper's answers for a
device and itself and for devices that do not exist, copy_peer between two buffers of one
device, the caller's device after a failed mmap, a negative device meaning the current
one, and a pool over the current device's area bound to it. The two-GPU half is
test_cuda_gpu2.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aml_cuda
import pytest
from cuda_children import pattern

import aml_core
from aml_core.errors import AMLMemoryError, AMLValueError

pytestmark = pytest.mark.gpu


@pytest.fixture
def rt() -> Iterator[Any]:
    runtime = aml_cuda.get_runtime()
    runtime.set_device(0)
    yield runtime
    runtime.set_device(0)


def test_a_device_is_not_its_own_peer(rt: Any, record_property: Any) -> None:
    """aml answers False without asking CUDA; what CUDA itself answers for (0, 0), and for
    enabling a device's access to itself, is recorded in the report (docs/native-abi.md)."""
    from cuda.bindings import runtime as rt_

    assert aml_cuda.can_access_peer(0, 0) is False
    with pytest.raises(AMLValueError, match="not its own peer"):
        aml_cuda.enable_peer_access(0)
    with pytest.raises(AMLValueError, match="not its own peer"):
        aml_cuda.disable_peer_access(0, device=0)
    err, can = rt_.cudaDeviceCanAccessPeer(0, 0)
    record_property("cudaDeviceCanAccessPeer(0, 0)", f"{err.name}, {can}")
    (err,) = rt_.cudaDeviceEnablePeerAccess(0, 0)
    record_property("cudaDeviceEnablePeerAccess(0) on device 0", err.name)
    (err,) = rt_.cudaDeviceDisablePeerAccess(0)
    record_property("cudaDeviceDisablePeerAccess(0) on device 0", err.name)
    rt_.cudaGetLastError()
    assert rt.get_device() == 0


def test_devices_that_do_not_exist(rt: Any) -> None:
    n = rt.device_count()
    for call in (
        lambda: aml_cuda.can_access_peer(0, n),
        lambda: aml_cuda.can_access_peer(n, 0),
        lambda: aml_cuda.enable_peer_access(n),
        lambda: aml_cuda.enable_peer_access(0, device=n),
        lambda: aml_cuda.disable_peer_access(n),
    ):
        with pytest.raises(AMLValueError, match=f"not in 0..{n - 1}"):
            call()
    assert rt.get_device() == 0


def test_copy_peer_on_one_device(rt: Any) -> None:
    n = (1 << 20) + 3
    with aml_cuda.create(0) as area:
        src, dst = area.mmap(n), area.mmap(n)
        area.write(src, pattern(21, n))
        aml_cuda.copy_peer(dst, src)
        assert area.read(dst) == pattern(21, n)
        aml_cuda.copy_peer(dst, src, 100, dst_offset=5, src_offset=1000)
        assert area.read(dst, 100, 5) == pattern(21, n)[1000:1100]
        with pytest.raises(AMLValueError, match="not inside src"):
            aml_cuda.copy_peer(dst, src, n, src_offset=1)
        with aml_cuda.create(0, aml_cuda.CudaFlags.ALLOC_UNIFIED) as managed:
            m = managed.mmap(4096)
            with pytest.raises(AMLValueError, match="copies device memory"):
                aml_cuda.copy_peer(dst, m, 16)
            managed.munmap(m)
        area.munmap(src)
        area.munmap(dst)


def test_the_callers_device_after_a_failed_mmap(rt: Any) -> None:
    """One GPU selects nothing, but the rule holds: after a failing mmap (too large, or an
    invalid device in the options) the current device is the caller's."""
    _free, total = rt.memory_info()
    for device in (0, -1):
        with aml_cuda.create(device) as area:
            with pytest.raises(AMLMemoryError):
                area.mmap(2 * total)
            assert rt.get_device() == 0
            with pytest.raises(AMLValueError):
                area.mmap(4096, {"device": rt.device_count()})
            assert rt.get_device() == 0


def test_a_negative_device_is_the_current_device(rt: Any) -> None:
    with aml_cuda.create(-1) as area:
        assert area.device == -1
        buf = area.mmap(4096)
        assert buf.device == 0
        assert rt.pointer_attributes(buf.ptr).device == 0
        area.munmap(buf)
    aml_core.registry.reset()
    with aml_core.area(kind="device", backend="cuda") as current:
        assert current.device == -1
        buf = current.mmap(4096, {"device": -1})
        assert buf.device == 0
        assert rt.pointer_attributes(buf.ptr).device == 0
        current.munmap(buf)


def test_a_pool_over_the_current_device_is_bound_to_it(rt: Any) -> None:
    with aml_core.pool(aml_cuda.default_area()) as pool:
        assert pool.device == 0
        buf = pool.mmap(4096)
        assert buf.device == 0
        assert rt.pointer_attributes(buf.ptr).device == 0
        pool.munmap(buf)
