"""Two-device checks that aml-cuda and aml-hip run alike (on two GPUs; aml-hip also on its
double emulating two devices)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aml_core
from aml_core.area import Area
from aml_core.gpu.managed import CPU, Advice, RangeAttribute


def check_one_pool_per_device(area0: Area, area1: Area, current: Area, rt: Any) -> None:
    """A pool is bound to its area's device: a block freed on device 0 is never handed out
    for device 1, and a pool over the current device's area (``current``) is bound to the
    device that was current when the pool was made. ``rt`` is the backend's runtime, the
    caller on device 0."""
    with aml_core.pool(area0) as pool0, aml_core.pool(area1) as pool1:
        assert (pool0.device, pool1.device) == (0, 1)
        block = pool0.mmap(4096)
        freed = block.ptr
        pool0.munmap(block)
        mine = pool1.mmap(4096)
        assert mine.device == 1
        assert mine.ptr != freed
        assert rt.pointer_attributes(mine.ptr).device == 1
        again = pool0.mmap(4096)
        assert (again.ptr, again.device) == (freed, 0)
        pool1.munmap(mine)
        pool0.munmap(again)
    with aml_core.pool(current) as bound:
        assert bound.device == 0
        rt.set_device(1)
        try:
            block = bound.mmap(4096)
            assert block.device == 0
            assert rt.pointer_attributes(block.ptr).device == 0
            bound.munmap(block)
            with aml_core.pool(current) as other:
                assert other.device == 1
                there = other.mmap(4096)
                assert there.device == 1
                assert rt.pointer_attributes(there.ptr).device == 1
                other.munmap(there)
        finally:
            rt.set_device(0)


def check_managed_memory_moves(area: Any, size: int, synchronize: Callable[[], None], rt: Any) -> None:
    """Managed memory of ``area`` (a managed GPU area on device 0) prefetched to device 1,
    back to 0 and to the host, each move read back through the last-prefetch attribute;
    advice across the two devices read back; the bytes and the caller's device unchanged.
    ``synchronize`` waits for both devices."""
    buf = area.mmap(size)
    memoryview(buf)[:8] = b"managed!"
    last = RangeAttribute.LAST_PREFETCH_LOCATION
    for where, expected in ((1, 1), (0, 0), ("host", CPU)):
        area.prefetch(buf, where)
        synchronize()
        assert area.range_attribute(buf, last) == expected, where
    area.advise(buf, Advice.SET_PREFERRED_LOCATION, 1)
    area.advise(buf, Advice.SET_ACCESSED_BY, 0)
    got = area.range_attributes(buf, [RangeAttribute.PREFERRED_LOCATION, RangeAttribute.ACCESSED_BY])
    assert got[RangeAttribute.PREFERRED_LOCATION] == 1
    assert 0 in got[RangeAttribute.ACCESSED_BY]
    assert bytes(memoryview(buf)[:8]) == b"managed!"
    assert rt.get_device() == 0
    area.munmap(buf)
