"""HIP virtual memory on the driver double, across versions: the hipMemAllocationProp
layout of 5.2 and >= 5.3, shareable handles NotSupported on 6.0/6.1 (ENOTSUP), the fd
imported by pointer (5.x, 6.2/6.3) or by value (>= 7.0), sharing an allocation with
another process through a POSIX fd, and the error paths."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

import aml_hip
import pytest
from aml_hip import Access
from aml_hip.abi import abi_for, hip_version
from hip_helpers import HipDouble

from aml_core.errors import AMLError, AMLFailure, AMLMemoryError, AMLNotSupported, AMLValueError
from aml_core.gpu.vmm import VirtualMemory
from aml_core.specs import Capability
from aml_core.testing import VirtualMemoryConformance
from tests.support.dropped import check_dropped_vm_failure_is_kept, check_dropped_vm_gives_back

CHILD = Path(__file__).resolve().parent / "hip_children.py"
VERSIONS = {
    "5.2": hip_version(5, 2, 21153),
    "5.5": hip_version(5, 5),
    "6.0": hip_version(6, 0),
    "6.1": hip_version(6, 1),
    "6.2": hip_version(6, 2),
    "6.3": hip_version(6, 3),
    "7.0": hip_version(7, 0),
    "7.1": hip_version(7, 1),
}
SHAREABLE = {k: v for k, v in VERSIONS.items() if k not in ("6.0", "6.1")}


class TestVmmConformance(VirtualMemoryConformance):
    @pytest.fixture(params=list(VERSIONS.values()), ids=list(VERSIONS))
    def vm(self, request: pytest.FixtureRequest, hip: HipDouble) -> Iterator[VirtualMemory]:
        hip.use_version(request.param)
        vm = aml_hip.virtual_memory(0)
        yield vm
        vm.close()


@contextlib.contextmanager
def _vm() -> Iterator[VirtualMemory]:
    vm = aml_hip.virtual_memory(0)
    try:
        yield vm
    finally:
        vm.close()


@pytest.fixture
def vm(hip: HipDouble) -> Iterator[VirtualMemory]:
    vm = aml_hip.virtual_memory(0)
    yield vm
    vm.close()


@pytest.mark.parametrize("version", [VERSIONS["6.0"], VERSIONS["6.1"]], ids=["6.0", "6.1"])
def test_shareable_handles_not_supported_on_6_0_and_6_1(hip: HipDouble, version: int) -> None:
    hip.use_version(version)
    with _vm() as vm:
        phys = vm.create(vm.granularity(), exportable=True)
        with pytest.raises(AMLNotSupported, match=r"6\.0 and 6\.1"):
            vm.export_fd(phys)
        r, w = os.pipe()
        try:
            with pytest.raises(AMLNotSupported):
                vm.import_fd(r, vm.granularity())
        finally:
            os.close(r)
            os.close(w)
        vm.release(phys)
    assert hip.calls("hipMemExportToShareableHandle") == 0
    assert hip.calls("hipMemImportFromShareableHandle") == 0


@pytest.mark.parametrize("version", list(SHAREABLE.values()), ids=list(SHAREABLE))
def test_import_passes_the_fd_as_the_version_wants(hip: HipDouble, version: int) -> None:
    """docs/native-abi.md#hip-virtual-memory: HIP 6.2/6.3 dereference osHandle as int* (5.x assumed the same);
    HIP >= 7.0 takes the fd value cast to void*, like CUDA."""
    hip.use_version(version)
    with _vm() as vm:
        g = vm.granularity()
        phys = vm.create(g, exportable=True)
        fd = vm.export_fd(phys)
        assert hip.last("hipMemExportToShareableHandle")[2:] == (1, 0)  # type: ignore[index]
        try:
            other = vm.import_fd(fd, g)
            os_handle = hip.last("hipMemImportFromShareableHandle")[1]  # type: ignore[index]
            if abi_for(version).shareable == "value":
                assert os_handle == fd
            else:
                assert os_handle > 4096  # the address of an int holding the fd
                assert os_handle != fd
            if hip.mode == "host":  # CUDA reports no requested handle types on an imported handle
                assert vm.properties(other).handle_types == 1
            vm.release(other)
        finally:
            os.close(fd)
        vm.release(phys)


@pytest.mark.parametrize(
    "version", [VERSIONS["5.2"], VERSIONS["6.2"], VERSIONS["7.0"]], ids=["5.2", "6.2", "7.0"]
)
def test_allocation_properties_layout(hip: HipDouble, version: int) -> None:
    """The double reads hipMemAllocationProp in the emulated version's layout
    (docs/native-abi.md#hip-virtual-memory) and rejects a prop whose type is not Pinned: a wrong layout
    cannot pass."""
    hip.use_version(version)
    with _vm() as vm:
        g = vm.granularity()
        assert g == 2 << 20 or hip.mode == "forward"
        for exportable, types in ((False, 0), (True, 1)):
            phys = vm.create(g, exportable=exportable)
            props = vm.properties(phys)
            assert (props.type, props.location_device, props.handle_types) == (1, 0, types)
            vm.release(phys)


def test_a_wrong_layout_is_rejected(hip: HipDouble) -> None:
    """Evidence that the previous test checks the layout: the 6.x prop given to a 5.2
    library is refused (its allocation type lands on the wrong offset)."""
    hip.use_version(VERSIONS["5.2"])
    rt = aml_hip.get_runtime()
    rt.abi = abi_for(VERSIONS["6.2"])
    with pytest.raises(AMLValueError):
        rt.vmm_granularity(0, False)
    with pytest.raises(AMLValueError):
        rt.vmm_create(2 << 20, 0, False)
    aml_hip.BACKEND.reset()


@pytest.mark.parametrize("version", list(SHAREABLE.values()), ids=list(SHAREABLE))
def test_share_with_another_process(hip: HipDouble, version: int) -> None:
    hip.use_version(version)
    rt = aml_hip.get_runtime()
    with _vm() as vm:
        g = vm.granularity()
        res = vm.reserve(g)
        phys = vm.create(g, exportable=True)
        vm.map(res.ptr, g, phys)
        vm.set_access(res.ptr, g, Access.READWRITE)
        assert vm.get_access(res.ptr) is Access.READWRITE
        payload = b"shared through a POSIX fd"
        src = ctypes.create_string_buffer(payload, len(payload))
        rt.memcpy(res.ptr, ctypes.addressof(src), len(payload))
        fd = vm.export_fd(phys)
        try:
            report = hip.run_child(
                [str(CHILD), "vmm"], {"fd": fd, "size": g, "read": len(payload)}, pass_fds=(fd,)
            )
        finally:
            os.close(fd)
        assert "error" not in report, report
        assert bytes.fromhex(report["read"]) == payload
        assert report["properties"] == [1, 0]
        vm.unmap(res.ptr, g)
        vm.release(phys)
        vm.address_free(res)


def test_mmap_and_growable(hip: HipDouble, vm: VirtualMemory) -> None:
    g = vm.granularity()
    buf = vm.mmap(g + 1)
    assert hip.live()["vmm_mapping"] == 1
    vm.munmap(buf)
    grow = vm.growable(4 * g)
    grow.grow(3 * g)  # maps only the new 2 granules, in one more mapping
    assert hip.live()["vmm_mapping"] == 2
    assert grow.mapped == 3 * g
    vm.munmap(grow)
    assert hip.live()["vmm_mapping"] == 0


@pytest.mark.parametrize(
    ("function", "error", "cls"),
    [
        ("hipMemAddressReserve", 2, AMLMemoryError),
        ("hipMemCreate", 2, AMLMemoryError),
        ("hipMemCreate", 801, AMLNotSupported),
        ("hipMemMap", 1, AMLValueError),
        ("hipMemSetAccess", 999, AMLFailure),
    ],
)
def test_one_step_mmap_errors_leave_nothing(
    hip: HipDouble, vm: VirtualMemory, function: str, error: int, cls: type[AMLError]
) -> None:
    hip.inject(function, error)
    with pytest.raises(cls):
        vm.mmap(vm.granularity())
    assert hip.live()["vmm_mapping"] == 0
    assert hip.live()["vmm_reservation"] == 0
    assert hip.live()["vmm_handle"] == 0


@pytest.mark.parametrize(
    ("function", "call"),
    [
        ("hipMemGetAllocationGranularity", lambda rt: rt.vmm_granularity(0, True)),
        ("hipMemRetainAllocationHandle", lambda rt: rt.vmm_retain(1 << 30)),
        ("hipMemGetAccess", lambda rt: rt.vmm_get_access(1 << 30, 0)),
        ("hipMemGetAllocationPropertiesFromHandle", lambda rt: rt.vmm_properties(1 << 30)),
    ],
)
def test_query_errors(hip: HipDouble, function: str, call: object) -> None:
    hip.inject(function, 100)
    with pytest.raises(AMLNotSupported) as info:
        call(aml_hip.get_runtime())  # type: ignore[operator]
    assert info.value.native is not None
    assert info.value.native.function == function


def test_virtual_memory_device_checked(hip: HipDouble) -> None:
    n = aml_hip.get_runtime().device_count()
    for device in (n, -1):
        with pytest.raises(AMLValueError):
            aml_hip.virtual_memory(device)


@pytest.mark.parametrize(
    ("version", "attr_value", "expected"),
    [
        (VERSIONS["5.2"], None, True),  # no attribute in 5.2: the exported symbols decide
        (VERSIONS["6.2"], 1, True),
        (VERSIONS["6.2"], 0, False),  # hipDeviceAttributeVirtualMemoryManagementSupported = 0
    ],
)
def test_vmm_capability(hip: HipDouble, version: int, attr_value: int | None, expected: bool) -> None:
    hip.use_version(version)
    if attr_value is not None:
        hip.ctl.set_attribute(89, attr_value)
    info = aml_hip.get_runtime().device_info(0)
    assert (Capability.VIRTUAL_MEMORY in info.capabilities) is expected


def test_a_dropped_virtual_memory_gives_back_what_it_holds(hip: HipDouble) -> None:
    """Dropped without close() (issue 20): collected, it unmaps, releases and frees."""
    check_dropped_vm_gives_back(hip, lambda: aml_hip.virtual_memory(0))


def test_a_dropped_virtual_memory_whose_release_fails(
    hip: HipDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release failing while a dropped virtual-memory area is collected: reported through
    sys.unraisablehook, kept, and given back by the backend's reset()."""
    check_dropped_vm_failure_is_kept(
        hip, lambda: aml_hip.virtual_memory(0), monkeypatch, "hipMemAddressFree", 1, AMLValueError
    )
