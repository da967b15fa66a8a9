"""Buffers dropped without munmap are freed when garbage collected (issue 12 §5), on the
HIP driver double: the double's live counters go back for every kind of area (the compiled
hipMalloc path and the Python one), pools, virtual memory and IPC imports; a hipFree that
fails during a GC-driven free is reported, the buffer stays tracked and close() frees it.
The ``hip`` fixture checks after each test that nothing native leaked."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import aml_hip
import pytest
from aml_hip import HipFlags
from hip_helpers import HipDouble

import aml_core
from aml_core.errors import AMLError
from aml_core.testing.lifetime import catch_unraisable, collect, collect_often, drop_hammer
from tests.support.child import pickled

CHILD = Path(__file__).resolve().parent / "hip_children.py"
INVALID_VALUE = 1  # hipErrorInvalidValue

#: (flags, the double's live kind) of the areas that allocate by themselves.
KINDS = {
    "device": (HipFlags.DEFAULT, "device"),
    "managed": (HipFlags.ALLOC_UNIFIED, "managed"),
    "host": (HipFlags.ALLOC_HOST, "host"),
    "host-mapped": (HipFlags.ALLOC_HOST | HipFlags.ALLOC_MAPPED, "host"),
}


class Cycle:
    def __init__(self, *held: object) -> None:
        self.held = held
        self.me = self


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_dropped_buffer_is_freed(hip: HipDouble, kind: str) -> None:
    flags, live = KINDS[kind]
    area = aml_hip.create(0, flags)
    try:
        buf = area.mmap(4096)
        area.write(buf, b"dropped")
        assert hip.live()[live] == 1
        del buf
        assert hip.live()[live] == 0
        assert area.stats.live_mappings == 0
        Cycle(area.mmap(8192), area.mmap(100))
        assert hip.live()[live] == 2
        collect()
        assert hip.live()[live] == 0
        st = area.stats
        assert (st.live_mappings, st.bytes_in_use, st.total_unmaps) == (0, 0, 3)
    finally:
        area.close()


def test_the_python_path_and_the_compiled_path(hip: HipDouble) -> None:
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        assert area._native_allocator is not None
        compiled = area.mmap(4096)
        python = area.mmap(4096, {"device": 0})  # options: the Python path
        assert hip.live()["device"] == 2
        frees = hip.calls("hipFree")
        del compiled, python
        assert hip.live()["device"] == 0
        assert hip.calls("hipFree") == frees + 2
    finally:
        area.close()


def test_registered_memory_is_unregistered_when_dropped(hip: HipDouble) -> None:
    host = bytearray(1 << 16)
    area = aml_hip.create(0, HipFlags.ALLOC_MAPPED)
    try:
        buf = area.mmap(len(host), {"ptr": host})
        assert hip.live()["registered"] == 1
        del buf
        assert hip.live()["registered"] == 0
        host.append(0)  # the area released its view of the caller's memory: it can resize
    finally:
        area.close()


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_a_failed_hipfree_of_a_dropped_buffer_keeps_it_for_close(hip: HipDouble, path: str) -> None:
    area = aml_hip.create(0, HipFlags.DEFAULT)
    buf = area.mmap(4096) if path == "compiled" else area.mmap(4096, {"device": 0})
    ptr = buf.ptr
    hip.inject("hipFree", INVALID_VALUE)
    with catch_unraisable() as caught:
        del buf
        collect()
    assert len(caught) == 1, caught
    exc = caught[0].exc
    assert isinstance(exc, AMLError)
    assert exc.native is not None
    assert exc.native.function == "hipFree"
    assert "close() retries" in caught[0].text
    del caught, exc
    collect()
    # Still tracked, held by the area, and still allocated in the driver.
    assert [b.ptr for b in area.buffers()] == [ptr]
    assert area.stats.live_mappings == 1
    assert hip.live()["device"] == 1
    area.close()
    assert area.stats.live_mappings == 0
    assert hip.live()["device"] == 0


def test_a_failed_hiphostfree_of_a_dropped_buffer_keeps_it_for_close(hip: HipDouble) -> None:
    area = aml_hip.create(0, HipFlags.ALLOC_HOST)
    buf = area.mmap(4096)
    hip.inject(area.runtime.lib.host_free, INVALID_VALUE)  # hipHostFree, or hipFreeHost from 6.3
    with catch_unraisable() as caught:
        del buf
    assert len(caught) == 1, caught
    del caught
    assert hip.live()["host"] == 1
    assert area.stats.live_mappings == 1
    area.close()
    assert hip.live()["host"] == 0


def test_dropping_from_many_threads(hip: HipDouble) -> None:
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        drop_hammer(area, threads=8, rounds=60)
        drop_hammer(area, threads=4, rounds=30, unit=4096)
        assert hip.live()["device"] == 0
    finally:
        area.close()


def test_the_collector_inside_area_operations(hip: HipDouble) -> None:
    area = aml_hip.create(0, HipFlags.ALLOC_UNIFIED)
    try:
        with collect_often(1):
            for i in range(60):
                buf = area.mmap(4096 + i, {"device": 0} if i % 2 else None)
                if i % 3 == 0:
                    Cycle(buf)
                elif i % 3 == 1:
                    area.munmap(buf)
                del buf
        collect()
        assert hip.live()["managed"] == 0
        assert area.stats.live_mappings == 0
    finally:
        area.close()


# -- pools -------------------------------------------------------------------------------
def test_dropped_pooled_buffers(hip: HipDouble) -> None:
    device = aml_hip.create(0, HipFlags.DEFAULT)
    pool = aml_core.pool(device)
    try:
        bufs = [pool.mmap(4096) for _ in range(4)]
        assert hip.live()["device"] == 1  # one slab
        del bufs
        assert pool.stats.live_mappings == 0
        assert pool.pool_stats.bytes_in_use == 0
        assert hip.live()["device"] == 1  # cached by the pool
        pool.trim()
        assert hip.live()["device"] == 0
    finally:
        pool.close()
        device.close()


def test_a_dropped_buffer_of_a_releasing_pool_returns_its_slab(hip: HipDouble) -> None:
    device = aml_hip.create(0, HipFlags.DEFAULT)
    pool = aml_core.pool(device, release_threshold=0)
    try:
        buf = pool.mmap(1 << 20)
        assert hip.live()["device"] == 1
        del buf
        assert hip.live()["device"] == 0
        assert device.stats.live_mappings == 0
    finally:
        pool.close()
        device.close()


def test_a_dropped_buffer_of_a_dropped_pool(hip: HipDouble) -> None:
    """Dropping the buffers and the pool (unclosed) returns every slab to the area."""
    device = aml_hip.create(0, HipFlags.DEFAULT)
    pool = aml_core.pool(device)
    bufs = [pool.mmap(4096), pool.mmap(3 << 20)]
    ref = weakref.ref(pool)
    del pool, bufs
    collect()
    assert ref() is None
    assert device.stats.live_mappings == 0
    assert hip.live()["device"] == 0
    device.close()


# -- virtual memory -----------------------------------------------------------------------
def test_dropped_virtual_memory_buffers(hip: HipDouble) -> None:
    vm = aml_hip.virtual_memory(0)
    try:
        g = vm.granularity()
        buf = vm.mmap(g)
        grow = vm.growable(4 * g, g)
        grow.grow(3 * g)
        live = hip.live()
        assert (live["vmm_mapping"], live["vmm_reservation"]) == (1 + 2, 2)  # growable: 2 chunks
        del buf, grow
        live = hip.live()
        assert (live["vmm_mapping"], live["vmm_reservation"], live["vmm_handle"]) == (0, 0, 0)
    finally:
        vm.close()


# -- IPC -----------------------------------------------------------------------------------
def _child(hip: HipDouble, handle: Any, **request: Any) -> dict[str, Any]:
    return hip.run_child([str(CHILD), "ipc"], {**request, "handle": pickled(handle)})


def test_a_dropped_ipc_import_is_unmapped(hip: HipDouble) -> None:
    """The importer opens a handle three times (one Buffer) and drops it unclosed: the
    collector unmaps it once."""
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        buf = area.mmap(8192)
        export = area.ipc_export(buf)
        report = _child(hip, export.handle, opens=3, drop=True)
        assert report.get("error") is None, report
        assert report["open_calls"] == 1
        assert report["dropped_live_mappings"] == 0
        assert report["dropped_live_ipc"] == 0
        assert report["close_calls"] == 1
        area.munmap(buf)
    finally:
        area.close()


def test_dropped_imports_of_pooled_blocks_share_one_mapping(hip: HipDouble) -> None:
    device = aml_hip.create(0, HipFlags.DEFAULT)
    pool = aml_core.pool(device)
    try:
        a, b = pool.mmap(4096), pool.mmap(4096)
        for blk in (a, b):
            report = _child(hip, pool.ipc_export(blk).handle, drop=True)
            assert report.get("error") is None, report
            assert report["dropped_live_ipc"] == 0
        pool.munmap(a)
        pool.munmap(b)
    finally:
        pool.close()
        device.close()


def test_an_exported_buffer_lives_while_its_export_does(hip: HipDouble) -> None:
    """The area remembers exports weakly: a buffer dropped with its export is freed; one
    whose export is kept is not."""
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        kept = area.ipc_export(area.mmap(4096))
        area.ipc_export(area.mmap(4096))  # dropped with its export
        assert hip.live()["device"] == 1
        assert not kept.closed
        assert kept.buffer.area is area
        buf = kept.buffer
        del kept
        assert hip.live()["device"] == 1  # buf still references it
        del buf
        assert hip.live()["device"] == 0
    finally:
        area.close()
