"""The virtual-memory conformance class (docs/aml-contract.md#hsa-virtual-memory)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..errors import (
    AMLBusyError,
    AMLNotSupported,
    AMLValueError,
)
from .conformance_base import Cycle
from .lifetime import collect

__all__ = ["VirtualMemoryConformance"]


class VirtualMemoryConformance:
    """Virtual memory (docs/aml-contract.md#hsa-virtual-memory): needs a fixture ``vm`` yielding an open
    :class:`~aml_core.gpu.vmm.VirtualMemory` of device 0."""

    def test_granularity(self, vm: Any) -> None:
        g = vm.granularity()
        assert g > 0
        assert g & (g - 1) == 0
        assert vm.granularity(recommended=True) >= g

    def test_reserve_create_map_access(self, vm: Any) -> None:
        from ..gpu.vmm import Access

        g = vm.granularity()
        res = vm.reserve(4 * g)
        phys = vm.create(2 * g)
        vm.map(res.ptr + g, 2 * g, phys)
        vm.set_access(res.ptr + g, 2 * g, Access.READWRITE)
        assert vm.get_access(res.ptr + g) is Access.READWRITE
        props = vm.properties(phys)
        assert props.type == 1
        assert props.location_device == 0
        with pytest.raises(AMLBusyError):
            vm.address_free(res)
        vm.unmap(res.ptr + g, 2 * g)
        vm.release(phys)
        vm.address_free(res)

    def test_retain(self, vm: Any) -> None:
        g = vm.granularity()
        res = vm.reserve(g)
        phys = vm.create(g)
        vm.map(res.ptr, g, phys)
        again = vm.retain(res.ptr)
        assert again is phys
        vm.release(again)
        vm.unmap(res.ptr, g)
        vm.release(phys)
        vm.address_free(res)

    def test_bad_input(self, vm: Any) -> None:
        g = vm.granularity()
        with pytest.raises(AMLValueError, match="granularity"):
            vm.reserve(g + 1)
        with pytest.raises(AMLValueError):
            vm.create(0)
        res = vm.reserve(2 * g)
        phys = vm.create(g)
        with pytest.raises(AMLValueError, match="reservation"):
            vm.map(res.ptr + 2 * g, g, phys)
        vm.map(res.ptr, g, phys)
        with pytest.raises(AMLValueError, match="overlaps"):
            vm.map(res.ptr, g, phys)
        with pytest.raises(AMLValueError):
            vm.unmap(res.ptr + g, g)
        with pytest.raises(AMLValueError):
            vm.unmap(res.ptr, 2 * g)
        vm.unmap(res.ptr, g)
        vm.release(phys)
        with pytest.raises(AMLValueError):
            vm.release(phys)
        vm.address_free(res)
        with pytest.raises(AMLValueError):
            vm.address_free(res)

    def test_mmap_buffer(self, vm: Any) -> None:
        buf = vm.mmap(12345)
        assert buf.size == 12345
        assert buf.ptr % vm.granularity() == 0
        vm.munmap(buf)
        assert buf.freed

    def test_dropped_buffers_are_freed(self, vm: Any) -> None:
        """VMM buffers (mmap's and growable ones) dropped without munmap are unmapped and
        their reservations freed when garbage collected."""
        g = vm.granularity()
        before = vm.stats
        buf = vm.mmap(g)
        grow = vm.growable(4 * g, g)
        grow.grow(2 * g)
        Cycle(vm.mmap(2 * g))
        del buf, grow
        collect()
        after = vm.stats
        assert (after.live_mappings, after.bytes_in_use) == (before.live_mappings, before.bytes_in_use)
        assert after.total_unmaps - before.total_unmaps == 3

    def test_growable_keeps_address(self, vm: Any) -> None:
        g = vm.granularity()
        buf = vm.growable(8 * g, g)
        ptr = buf.ptr
        assert buf.capacity == 8 * g
        buf.grow(3 * g + 1)
        assert buf.ptr == ptr
        assert buf.size == 3 * g + 1
        assert buf.mapped == 4 * g
        with pytest.raises(AMLValueError):
            buf.grow(9 * g)
        with pytest.raises(AMLValueError):
            buf.grow(g)
        vm.munmap(buf)

    def test_export_import_in_process(self, vm: Any) -> None:
        g = vm.granularity()
        phys = vm.create(g, exportable=True)
        try:
            fd = vm.export_fd(phys)
        except AMLNotSupported as exc:
            vm.release(phys)
            pytest.skip(f"shareable handles are not supported here: {exc}")
        try:
            other = vm.import_fd(fd, g)
            vm.release(other)
        finally:
            os.close(fd)
        if not phys.released:
            vm.release(phys)
