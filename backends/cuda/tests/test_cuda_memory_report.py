"""memory_summary() and memory_stats() of a CUDA device pool on the GPU machine: what the
pool reports as reserved is what the driver's free memory lost (``cudaMemGetInfo`` and
NVML), and the summary is printed for the record (``pytest -s``)."""

from __future__ import annotations

from typing import Any

import pytest

import aml_core
from tests.support.memory_reports import check_pool_report, fresh_live_areas

MiB = 1 << 20
#: What the driver may take beside the pool's own bytes (page tables, its own rounding).
SLACK = 8 * MiB

pytestmark = pytest.mark.gpu


def test_the_pool_s_reserved_bytes_are_what_the_device_lost(rt: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import aml_cuda
    from aml_cuda import nvml

    fresh_live_areas(monkeypatch)
    rt.set_device(0)
    bus = str(dict(rt.device_info(0).details)["pci_bus_id"])
    with aml_cuda.create(0, 0) as device:
        device.munmap(device.mmap(MiB))  # the context exists before the first reading
        free_before, _ = rt.memory_info()
        nvml_before = nvml.free_memory(bus)
        with aml_core.pool(device) as pool:
            bufs = [pool.mmap(MiB) for _ in range(10)] + [pool.mmap(50 * MiB)]
            pool.munmap(bufs.pop(0))
            stats = check_pool_report(pool)
            free_after, _ = rt.memory_info()
            nvml_after = nvml.free_memory(bus)
            print("\n" + aml_core.memory_summary())
            reserved = stats["reserved_bytes.current"]
            assert reserved >= 59 * MiB
            lost = free_before - free_after
            print(f"cudaMemGetInfo: {lost} bytes taken, the pool reserved {reserved}")
            assert reserved <= lost <= reserved + SLACK
            if nvml_before is not None and nvml_after is not None:
                print(f"NVML: {nvml_before - nvml_after} bytes taken")
                assert reserved <= nvml_before - nvml_after <= reserved + SLACK
            whole = aml_core.memory_stats()
            assert whole["all.reserved_bytes.current"] == device.stats.bytes_in_use
            assert whole[f"cuda.device.{device.device}.requested_bytes.current"] == 9 * MiB + 50 * MiB
            del bufs
