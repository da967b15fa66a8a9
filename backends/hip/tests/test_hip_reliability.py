"""Faulty drivers and tampered handles on the HIP driver double (issue 9): nothing crashes,
nothing leaks (the ``hip`` fixture checks the double's live counters are back to zero
after every test), every error is an AML error with its native cause.

=====================================================  =====================================
fault                                                  what aml does
=====================================================  =====================================
an allocation call "succeeds" with NULL                AMLFailure, no buffer, nothing tracked
(hipMalloc, hipMallocManaged, hipHostMalloc)
an allocation "succeeds" with a live address           AMLFailure, the live buffer untouched
``close()`` while hipFree fails                        the native error; the mapping stays
                                                       tracked; close() again frees it
``Stream.close()`` while hipStreamDestroy fails        the native error; the stream stays open;
                                                       a retry destroys it; on GC: ResourceWarning
``vm.mmap`` while hipMemRelease fails                  the release's native error (not EBUSY);
                                                       nothing mapped or reserved stays; close()
                                                       releases the handle
a tampered IPC handle (device -5, 2**40, 'x')          AMLValueError/AMLTypeError in the
                                                       importer, no IPC mapping left
a tampered IPC handle of size (or offset) 2**64        AMLDomainError (EDOM), as every size
                                                       past 2**63 - 1; no IPC mapping left
a handle naming memory the importer has open, with     AMLValueError; the open mapping's count
another size                                           unchanged (closing it unmaps it)
=====================================================  =====================================
"""

from __future__ import annotations

import copy
import gc
import re
import warnings
from pathlib import Path
from typing import Any

import aml_hip
import pytest
from aml_hip import HipFlags
from hip_helpers import HipDouble

import aml_core
from aml_core.errors import AMLDomainError, AMLError, AMLFailure, AMLTypeError, AMLValueError, ErrorCode
from aml_core.gpu import Group
from tests.support.child import pickled
from tests.support.ipc_peer import IpcPeer

CHILD = Path(__file__).resolve().parent / "hip_children.py"
INVALID_VALUE = 1  # hipErrorInvalidValue


@pytest.mark.host_double
@pytest.mark.parametrize(
    ("flags", "function"),
    [
        (HipFlags.DEFAULT, "hipMalloc"),
        (HipFlags.ALLOC_UNIFIED, "hipMallocManaged"),
        (HipFlags.ALLOC_HOST, "hipHostMalloc"),
    ],
    ids=["device", "managed", "host"],
)
def test_success_with_null_is_a_failure(hip: HipDouble, flags: int, function: str) -> None:
    area = aml_hip.create(0, flags)
    try:
        hip.inject(function, 0)  # hipSuccess, doing nothing: the out-pointer stays NULL
        with pytest.raises(AMLFailure, match="returned NULL") as info:
            area.mmap(4096)
        assert info.value.code is ErrorCode.FAILURE
        assert hip.calls(function) == 1
        assert area.stats.live_mappings == 0
        buf = area.mmap(4096)  # the area still works
        area.munmap(buf)
    finally:
        area.close()


def test_success_with_a_live_address_is_a_failure(hip: HipDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    area = aml_hip.create(0, HipFlags.DEFAULT)
    # The Python path, whose native call the test replaces; the compiled path's buffers go
    # through the same AreaBase._add check (NULL_PTR / DUPLICATE) before they are tracked.
    area._set_native(None)
    try:
        live = area.mmap(4096)
        monkeypatch.setattr(area._alloc, "_malloc", lambda size: live.ptr)
        with pytest.raises(AMLFailure, match="already live"):
            area.mmap(4096)
        monkeypatch.undo()
        assert area.buffers() == (live,)
        assert not live.freed
        area.munmap(live)
        assert hip.live()["device"] == 0
    finally:
        area.close()


def test_close_while_free_fails_keeps_the_mapping_for_a_retry(hip: HipDouble) -> None:
    area = aml_hip.create(0, HipFlags.DEFAULT)
    buf = area.mmap(4096)
    hip.inject("hipFree", INVALID_VALUE)
    with pytest.raises(AMLError) as info:
        area.close()
    assert info.value.native is not None
    assert info.value.native.function == "hipFree"
    assert not buf.freed
    assert area.stats.live_mappings == 1
    assert hip.live()["device"] == 1
    area.close()  # the retry
    assert buf.freed
    assert area.stats.live_mappings == 0
    assert hip.live()["device"] == 0


def test_munmap_while_free_fails_then_close(hip: HipDouble) -> None:
    area = aml_hip.create(0, HipFlags.DEFAULT)
    buf = area.mmap(4096)
    hip.inject("hipFree", INVALID_VALUE)
    with pytest.raises(AMLError) as info:
        area.munmap(buf)
    assert info.value.native is not None
    assert info.value.native.function == "hipFree"
    assert not buf.freed
    assert area.buffers() == (buf,)
    area.close()
    assert hip.live()["device"] == 0


def test_stream_close_while_destroy_fails(hip: HipDouble) -> None:
    stream = aml_hip.BACKEND.stream()
    hip.inject("hipStreamDestroy", INVALID_VALUE)
    with pytest.raises(AMLError) as info:
        stream.close()
    assert info.value.native is not None
    assert info.value.native.function == "hipStreamDestroy"
    assert not stream.closed
    assert hip.live()["stream"] == 1
    stream.close()
    assert stream.closed
    assert hip.live()["stream"] == 0


def test_stream_leaked_on_gc_warns(hip: HipDouble) -> None:
    stream = aml_hip.BACKEND.stream()
    handle = stream.handle
    hip.inject("hipStreamDestroy", INVALID_VALUE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del stream
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) and "leaks" in str(w.message) for w in caught)
    aml_hip.get_runtime().stream_destroy(handle)  # what the warning asks for


def test_vm_mmap_while_release_fails(hip: HipDouble) -> None:
    vm = aml_hip.BACKEND.virtual_memory(0)
    try:
        hip.inject("hipMemRelease", INVALID_VALUE)
        with pytest.raises(AMLError) as info:
            vm.mmap(vm.granularity())
        assert info.value.code is not ErrorCode.EBUSY
        assert info.value.native is not None
        assert info.value.native.function == "hipMemRelease"
        live = hip.live()
        assert (live["vmm_mapping"], live["vmm_reservation"]) == (0, 0)
        assert live["vmm_handle"] == 1  # tracked: close() releases it
        assert vm.stats.live_mappings == 0
    finally:
        vm.close()
    assert hip.live()["vmm_handle"] == 0


def test_vm_close_while_unmap_fails_retries(hip: HipDouble) -> None:
    vm = aml_hip.BACKEND.virtual_memory(0)
    buf = vm.mmap(vm.granularity())  # kept: a dropped buffer would be unmapped at once
    hip.inject("hipMemUnmap", INVALID_VALUE)
    with pytest.raises(AMLError) as info:
        vm.close()
    assert info.value.native is not None
    assert info.value.native.function == "hipMemUnmap"
    # close() went on after the failure (its sweep of leftover mappings retried the unmap);
    # close() again finds the buffer still tracked and finishes.
    vm.close()
    assert buf.freed
    assert vm.stats.live_mappings == 0
    assert all(n == 0 for n in hip.live().values())


def test_vm_mmap_past_the_address_space_is_enomem(hip: HipDouble) -> None:
    vm = aml_hip.BACKEND.virtual_memory(0)
    try:
        with pytest.raises(AMLError) as info:
            vm.mmap(2**63 - 1)
        assert info.value.code is ErrorCode.ENOMEM
    finally:
        vm.close()


@pytest.mark.parametrize(
    "call",
    [
        lambda vm: vm.mmap(2**63),
        lambda vm: vm.reserve(2**64),
        lambda vm: vm.create(2**63),
        lambda vm: vm.growable(2**64),
        lambda vm: vm.runtime.require(Group.VIRTUAL_MEMORY).vmm_reserve(2**63, 0, 0),
        lambda vm: aml_core.pool(vm, expandable=True, capacity=2**64),
    ],
    ids=["mmap", "reserve", "create", "growable", "vmm_reserve", "pool-capacity"],
)
def test_vm_sizes_past_the_address_space_are_edom(hip: HipDouble, call: Any) -> None:
    """The one size rule (aml_core.checks.size) at the virtual-memory entry points: EDOM
    before any native call."""
    vm = aml_hip.BACKEND.virtual_memory(0)
    try:
        with pytest.raises(AMLDomainError) as info:
            call(vm)
        assert info.value.code is ErrorCode.EDOM
        assert hip.calls("hipMemAddressReserve") == hip.calls("hipMemCreate") == 0
    finally:
        vm.close()


@pytest.mark.parametrize("fd", [2**40, -1, 2**31], ids=["2**40", "-1", "2**31"])
def test_vm_import_fd_out_of_range(hip: HipDouble, fd: int) -> None:
    vm = aml_hip.BACKEND.virtual_memory(0)
    try:
        with pytest.raises(AMLValueError):
            vm.import_fd(fd, vm.granularity())
    finally:
        vm.close()


# -- tampered IPC handles ----------------------------------------------------------------------
def _open_in_child(hip: HipDouble, handle: Any) -> dict[str, Any]:
    return hip.run_child([str(CHILD), "ipc"], {"handle": pickled(handle)})


#: Stands for the device count (one past the last device): 1 on the double in host mode, the
#: number of GPUs when it forwards to CUDA.
PAST_COUNT = object()

TAMPERED: dict[str, tuple[str, object, str]] = {
    "device=-5": ("device", -5, "AMLValueError"),
    "device=2**40": ("device", 2**40, "AMLValueError"),
    "device=count (absent)": ("device", PAST_COUNT, "AMLValueError"),
    "device='x'": ("device", "x", "AMLTypeError"),
    "size=0": ("size", 0, "AMLValueError"),
    "size=-1": ("size", -1, "AMLValueError"),
    "size='big'": ("size", "big", "AMLTypeError"),
    # the one size rule (aml_core.checks.size): past 2**63 - 1 is EDOM, as at every entry point
    "size=2**63": ("size", 2**63, "AMLDomainError"),
    "size=2**64": ("size", 2**64, "AMLDomainError"),
    "offset=2**64": ("offset", 2**64, "AMLDomainError"),
    # more than the 8 KiB exported: hipMemGetAddressRange after the open says so, and the
    # importer closes the mapping again (reading 1 GiB from it would crash)
    "size=1 GiB": ("size", 1 << 30, "AMLValueError"),
    "data=b''": ("data", b"", "AMLValueError"),
    "data=None": ("data", None, "AMLTypeError"),
    "backend=3": ("backend", 3, "AMLTypeError"),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_tampered_ipc_handle(hip: HipDouble, case: str) -> None:
    field, value, error = TAMPERED[case]
    if value is PAST_COUNT:
        value = aml_hip.get_runtime().device_count()
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        buf = area.mmap(8192)
        handle = area.ipc_export(buf).handle
        object.__setattr__(handle, field, value)  # what a tampered pickle carries
        report = _open_in_child(hip, handle)
        assert report.get("error"), report
        assert report["error"]["class"] == error, report
        assert report["live_ipc"] == 0, "the failed open left an IPC mapping"
    finally:
        area.close()


def test_a_handle_resized_while_its_memory_is_open(hip: HipDouble) -> None:
    """The importer holds the genuine handle open; a copy claiming another size (smaller,
    so that the range check passes) names the same mapping: AMLValueError, not a second
    buffer at a live address, and the mapping's count untouched (closing the genuine open
    unmaps it)."""
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        buf = area.mmap(8192)
        area.write(buf, b"genuine")
        handle = area.ipc_export(buf).handle
        with IpcPeer("hip_helpers:HipDouble", hip.env()) as peer:
            ref, opens = peer.open(handle)
            assert opens == 1
            smaller = copy.copy(handle)
            object.__setattr__(smaller, "size", 4096)
            with pytest.raises(AMLValueError, match=re.escape("open here as 8.0 KiB (8192 bytes)")):
                peer.open(smaller)
            assert peer.live() == {"ipc": 1}
            assert peer.read(ref, 7) == b"genuine"
            assert peer.close(ref) is True
            assert peer.live() == {}
            assert peer.forget() == {}
        assert area.read(buf, 7) == b"genuine"
    finally:
        area.close()


def test_a_valid_handle_still_opens(hip: HipDouble) -> None:
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        buf = area.mmap(8192)
        report = _open_in_child(hip, area.ipc_export(buf).handle)
        assert report.get("error") is None, report
        assert report["size"] == 8192
        assert report["live_ipc"] == 0
    finally:
        area.close()


def test_error_classes_are_aml() -> None:
    assert issubclass(AMLTypeError, AMLError)
