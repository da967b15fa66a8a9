"""A pool's run-time limit and out-of-memory callback over HIP areas on the driver double:
a fraction of the device's memory (hipDeviceTotalMem), hipMalloc out of memory (real,
past the double's device memory, and injected) reaching ``on_oom`` after the cache is
released, the ENOMEM message with the device's free memory (hipMemGetInfo) and the
native cause, and the expandable segment, whose reservation caps any limit."""

from __future__ import annotations

from collections.abc import Callable

import aml_hip
import pytest
from hip_helpers import HipDouble

import aml_core
from aml_core.errors import AMLMemoryError, AMLNotSupported
from aml_core.gpu import GpuFlags
from aml_core.pool import PoolStats
from aml_core.specs import format_size

MiB = 1 << 20
OUT_OF_MEMORY = 2  # hipErrorOutOfMemory


@pytest.fixture
def device(areas: Callable[..., aml_hip.HipArea]) -> aml_hip.HipArea:
    return areas(0, 0)


def test_a_fraction_of_the_devices_memory(hip: HipDouble, device: aml_hip.HipArea) -> None:
    total = aml_hip.get_runtime().device_info(0).total_memory
    assert total > 0
    assert device.total_memory() == total
    with aml_core.pool(device, limit=0.5) as p:
        assert p.limit == total // 2
        p.set_limit(fraction=0.25)
        assert p.limit == int(total * 0.25)
        p.set_limit(fraction=1.0)
        assert p.limit == total


def test_pinned_host_memory_is_no_fraction_of_the_device(hip: HipDouble) -> None:
    with aml_hip.create(0, GpuFlags.ALLOC_HOST) as pinned, aml_core.pool(pinned) as p:
        assert pinned.total_memory() is None
        with pytest.raises(AMLNotSupported, match="in bytes"):
            p.set_limit(fraction=0.5)
        p.set_limit(64 * MiB)
        assert p.limit == 64 * MiB


def test_real_out_of_memory_asks_on_oom_then_names_the_free_memory(
    hip: HipDouble, device: aml_hip.HipArea
) -> None:
    rt = aml_hip.get_runtime()
    total = rt.device_info(0).total_memory
    calls: list[tuple[int, PoolStats]] = []
    with aml_core.pool(device, on_oom=lambda n, s: bool(calls.append((n, s)))) as p:
        keep = p.mmap(4096)
        with pytest.raises(AMLMemoryError) as info:
            p.mmap(total)  # more than the double's device has: hipMalloc fails
        ((requested, stats),) = calls
        assert requested == total
        assert (stats.bytes_in_use, stats.bytes_reserved) == (4096, 2 * MiB)
        message = str(info.value)
        free = rt.free_memory(0)
        assert free is not None
        assert f"{format_size(free, exact=True)} free on the device" in message
        assert f"{format_size(total, exact=True)} more asked" in message
        assert f"{format_size(2 * MiB, exact=True)} reserved, 4.0 KiB (4096 bytes) in use" in message
        assert info.value.native is not None
        assert info.value.native.function == "hipMalloc"
        assert message.count("hipMalloc returned") == 1  # the native cause once, at the end
        assert isinstance(info.value.__cause__, AMLMemoryError)
        p.munmap(keep)


def test_on_oom_frees_a_slab_and_the_retry_succeeds(hip: HipDouble, device: aml_hip.HipArea) -> None:
    with aml_core.pool(device) as p:
        held = [p.mmap(3 * MiB)]  # a 20 MiB slab

        def on_oom(requested: int, stats: PoolStats) -> bool:
            assert stats.bytes_cached == 17 * MiB  # its free rest: not a whole slab, not released
            p.munmap(held.pop())
            assert p.trim() == 20 * MiB  # the whole slab back to HIP
            return True

        p.on_oom = on_oom
        hip.inject("hipMalloc", OUT_OF_MEMORY)
        got = p.mmap(30 * MiB)  # fails, nothing released; the callback; the retry
        assert (hip.calls("hipMalloc"), hip.calls("hipFree")) == (3, 1)
        assert held == []
        s = p.pool_stats
        assert (s.bytes_reserved, s.slabs, s.native_allocations, s.native_frees) == (30 * MiB, 1, 2, 1)
        p.munmap(got)


def test_on_oom_raising_keeps_the_native_cause(hip: HipDouble, device: aml_hip.HipArea) -> None:
    def on_oom(requested: int, stats: PoolStats) -> bool:
        raise LookupError("nothing to drop")

    with aml_core.pool(device, on_oom=on_oom) as p:
        hip.inject("hipMalloc", OUT_OF_MEMORY)
        with pytest.raises(AMLMemoryError) as info:
            p.mmap(4096)
        assert isinstance(info.value.__cause__, LookupError)
        assert info.value.native is not None
        assert info.value.native.function == "hipMalloc"
        p.munmap(p.mmap(4096))
        assert hip.calls("hipMalloc") == 2


def test_the_reservation_caps_an_expandable_pools_limit(hip: HipDouble) -> None:
    vm = aml_hip.virtual_memory(0)
    calls: list[int] = []
    try:
        with aml_core.pool(
            vm, expandable=True, capacity=8 * MiB, on_oom=lambda n, s: bool(calls.append(n))
        ) as p:
            p.set_limit(64 * MiB)  # above the reservation: accepted, the reservation still caps it
            a = p.mmap(6 * MiB)
            with pytest.raises(AMLMemoryError, match=r"reservation of 8\.0 MiB .* is full") as info:
                p.mmap(4 * MiB)
            assert calls == [4 * MiB]
            assert "free on the device" in str(info.value)
            p.set_limit(4 * MiB)  # below what is mapped: kept, growth refused
            assert p.pool_stats.bytes_reserved == 6 * MiB
            with pytest.raises(AMLMemoryError, match=r"limit of 4\.0 MiB"):
                p.mmap(2 * MiB)
            assert p.pool_stats.bytes_reserved == 6 * MiB
            p.munmap(a)
            b = p.mmap(2 * MiB)  # the free segment is reused: no growth
            assert b.ptr == a.ptr
            p.munmap(b)
            hip.inject("hipMemCreate", OUT_OF_MEMORY)
            p.set_limit(None)
            p.trim()
            with pytest.raises(AMLMemoryError, match="no memory to map") as info:
                p.mmap(MiB)
            assert info.value.native is not None
            assert info.value.native.function == "hipMemCreate"
    finally:
        vm.close()
