"""Level Zero virtual memory behind aml's virtual-memory API (the VIRTUAL_MEMORY group):
the conformance kit and the growable buffer on the double, plus what is Level Zero's own
(reference counting of physical memory in aml-ze, one access per range, no fd export)."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

import aml_ze
import pytest
from aml_ze import Access
from aml_ze import abi as C
from ze_helpers import ZeDouble

from aml_core.errors import AMLFailure, AMLMemoryError, AMLNotSupported, AMLValueError
from aml_core.testing import VirtualMemoryConformance


class TestVirtualMemory(VirtualMemoryConformance):
    @pytest.fixture
    def vm(self, ze: ZeDouble) -> Iterator[aml_ze.VirtualMemory]:
        with aml_ze.virtual_memory(0) as vm:
            yield vm


@pytest.fixture
def vm(ze: ZeDouble) -> Iterator[aml_ze.VirtualMemory]:
    with aml_ze.virtual_memory(0) as vm:
        yield vm


def test_granularity_is_the_page_size(ze: ZeDouble, vm: aml_ze.VirtualMemory) -> None:
    if ze.mode == "host":
        assert vm.granularity() == 1 << 16
        assert vm.granularity(recommended=True) == 1 << 21
    assert ze.calls("zeVirtualMemQueryPageSize") >= 1


def test_physical_memory_lives_while_mapped(ze: ZeDouble, vm: aml_ze.VirtualMemory) -> None:
    """CUDA semantics over Level Zero: release while mapped defers zePhysicalMemDestroy."""
    g = vm.granularity()
    res = vm.reserve(g)
    phys = vm.create(g)
    vm.map(res.ptr, g, phys)
    vm.release(phys)
    assert ze.calls("zePhysicalMemDestroy") == 0
    assert ze.live()["physical"] == 1
    vm.unmap(res.ptr, g)
    assert ze.calls("zePhysicalMemDestroy") == 1
    assert ze.live()["physical"] == 0
    vm.address_free(res)


def test_access_is_enforced(ze: ZeDouble, vm: aml_ze.VirtualMemory) -> None:
    """Host mode maps the physical memory with the access attribute's protection."""
    g = vm.granularity()
    res = vm.reserve(g)
    phys = vm.create(g)
    vm.map(res.ptr, g, phys)
    assert vm.get_access(res.ptr) is Access.NONE  # mapped with ZE_MEMORY_ACCESS_ATTRIBUTE_NONE
    vm.set_access(res.ptr, g, Access.READWRITE)
    assert vm.get_access(res.ptr) is Access.READWRITE
    if ze.mode == "host":
        ctypes.memmove(res.ptr, b"vmm!", 4)
        assert ctypes.string_at(res.ptr, 4) == b"vmm!"
    vm.set_access(res.ptr, g, Access.READ)
    assert vm.get_access(res.ptr) is Access.READ
    vm.unmap(res.ptr, g)
    vm.release(phys)
    vm.address_free(res)


def test_one_access_for_every_device(ze: ZeDouble) -> None:
    ze.need_devices(2)
    with aml_ze.virtual_memory(0) as vm:
        buf = vm.mmap(vm.granularity())
        with pytest.raises(AMLNotSupported, match="one access attribute"):
            vm.set_access(buf.ptr, vm.granularity(), {0: Access.READWRITE, 1: Access.READ})
        vm.set_access(buf.ptr, vm.granularity(), {0: Access.READWRITE, 1: Access.READWRITE})
        vm.munmap(buf)


def test_export_is_not_supported(vm: aml_ze.VirtualMemory) -> None:
    phys = vm.create(vm.granularity(), exportable=True)
    with pytest.raises(AMLNotSupported, match=r"Level Zero 1\.4 cannot share a physical allocation"):
        vm.export_fd(phys)
    vm.release(phys)


def test_growable_buffer_grows_in_place(ze: ZeDouble, vm: aml_ze.VirtualMemory) -> None:
    g = vm.granularity()
    buf = vm.growable(16 * g)
    ptr = buf.ptr
    for size in (g + 1, 5 * g, 16 * g):
        buf.grow(size)
        assert buf.ptr == ptr
    assert buf.mapped == 16 * g
    assert ze.live()["mapping"] >= 3
    if ze.mode == "host":
        ctypes.memset(ptr, 0xAB, 16 * g)  # every chunk is mapped read-write
    vm.munmap(buf)
    assert ze.live()["mapping"] == 0


@pytest.mark.host_double
def test_device_out_of_memory(ze: ZeDouble) -> None:
    ze.need_devices(1, 1 << 20)
    with aml_ze.virtual_memory(0) as vm, pytest.raises(AMLMemoryError) as info:
        vm.create(2 << 20)
    assert info.value.native is not None
    assert info.value.native.function == "zePhysicalMemCreate"


@pytest.mark.parametrize(
    ("function", "native", "cls"),
    [
        ("zeVirtualMemReserve", C.ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, AMLMemoryError),
        ("zePhysicalMemCreate", C.ZE_RESULT_ERROR_UNSUPPORTED_SIZE, AMLNotSupported),
        ("zeVirtualMemMap", C.ZE_RESULT_ERROR_INVALID_ENUMERATION, AMLValueError),
        ("zeVirtualMemSetAccessAttribute", C.ZE_RESULT_ERROR_DEVICE_LOST, AMLFailure),
    ],
)
def test_mmap_failures_undo_everything(
    ze: ZeDouble, vm: aml_ze.VirtualMemory, function: str, native: int, cls: type[Exception]
) -> None:
    ze.inject(function, native)
    with pytest.raises(cls):
        vm.mmap(vm.granularity())
    live = ze.live()
    assert (live["reservation"], live["physical"], live["mapping"]) == (0, 0, 0)


def test_unmap_failure_keeps_the_mapping(ze: ZeDouble, vm: aml_ze.VirtualMemory) -> None:
    g = vm.granularity()
    res = vm.reserve(g)
    phys = vm.create(g)
    vm.map(res.ptr, g, phys)
    ze.inject("zeVirtualMemUnmap", C.ZE_RESULT_ERROR_DEVICE_LOST)
    with pytest.raises(AMLFailure):
        vm.unmap(res.ptr, g)
    vm.unmap(res.ptr, g)
    vm.release(phys)
    vm.address_free(res)


def test_reserve_success_without_a_pointer(ze: ZeDouble, vm: aml_ze.VirtualMemory) -> None:
    """Level Zero's null driver answers SUCCESS and leaves the pointer unset."""
    ze.inject("zeVirtualMemReserve", 0)
    with pytest.raises(AMLFailure, match="NULL pointer"):
        vm.reserve(vm.granularity())


def test_unmap_whose_destroy_fails(ze: ZeDouble, vm: aml_ze.VirtualMemory) -> None:
    """Unmapping the last use of a physical allocation destroys it; when that destroy
    fails, the range is unmapped but the buffer stays tracked with the native error, and
    munmap again destroys it without unmapping twice."""
    buf = vm.mmap(vm.granularity())
    ze.inject("zePhysicalMemDestroy", C.ZE_RESULT_ERROR_DEVICE_LOST)
    with pytest.raises(AMLFailure) as info:
        vm.munmap(buf)
    assert info.value.native is not None
    assert info.value.native.function == "zePhysicalMemDestroy"
    assert vm.buffers() == (buf,)
    assert ze.live()["physical"] == 1
    assert ze.live()["mapping"] == 0
    unmaps = ze.calls("zeVirtualMemUnmap")
    vm.munmap(buf)
    assert ze.calls("zeVirtualMemUnmap") == unmaps
    assert (ze.live()["physical"], ze.live()["reservation"]) == (0, 0)
