"""docs/aml-contract.md#hip-ipc on the driver double: IPC between two real processes (the double shares
"device" memory through memfd in host mode, CUDA IPC in forward mode), the importer's
cache, the lazy-peer flag per HIP version, handles of freed and re-allocated memory,
and the error paths."""

from __future__ import annotations

import base64
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aml_hip
import pytest
from aml_hip import HipFlags, IpcHandle
from aml_hip.abi import hip_version
from hip_helpers import HipDouble

from aml_core.errors import AMLError, AMLFailure, AMLNotSupported, AMLTypeError, AMLValueError, ErrorCode
from tests.support.child import pickled

CHILD = Path(__file__).resolve().parent / "hip_children.py"
V52, V62, V70 = hip_version(5, 2, 21153), hip_version(6, 2), hip_version(7, 0)


def run_child(hip: HipDouble, handle: IpcHandle, **request: Any) -> dict[str, Any]:
    env = hip.env(**request.pop("env", {}))
    return hip.run_child([str(CHILD), "ipc"], {**request, "handle": pickled(handle)}, env)


@pytest.fixture
def device_area(areas: Callable[..., aml_hip.HipArea]) -> aml_hip.HipArea:
    return areas(0, HipFlags.DEFAULT)


@pytest.mark.parametrize(("version", "flag"), [(V52, 0), (hip_version(5, 7), 0), (V62, 1), (V70, 1)])
def test_share_between_processes(
    hip: HipDouble, device_area: aml_hip.HipArea, version: int, flag: int
) -> None:
    """hipIpcMemLazyEnablePeerAccess is 0 up to HIP 5.7 and 1 from 6.0 (native-abi.md#hip-flags-and-ids): the
    importer passes the value of the version it runs on."""
    hip.use_version(version)
    area = aml_hip.create(0, HipFlags.DEFAULT)
    try:
        buf = area.mmap(1 << 16)
        area.write(buf, b"exported by the parent")
        export = area.ipc_export(buf)
        assert hip.last("hipIpcGetMemHandle")[1] == buf.ptr  # type: ignore[index]
        handle = export.handle
        assert (handle.backend, handle.device, handle.size, handle.pid) == ("hip", 0, 1 << 16, os.getpid())
        assert pickle.loads(pickle.dumps(handle)) == handle
        report = run_child(hip, handle, read=22, write=b"written by the child".hex())
        assert "error" not in report, report
        assert bytes.fromhex(report["read"]) == b"exported by the parent"
        assert report["open_args"][2] == flag
        assert report["size"] == 1 << 16
        assert area.read(buf, 20) == b"written by the child"
        assert report["live_ipc"] == 0
        area.munmap(buf)
    finally:
        area.close()


def test_importer_cache(hip: HipDouble, device_area: aml_hip.HipArea) -> None:
    buf = device_area.mmap(4096)
    handle = device_area.ipc_export(buf).handle
    report = run_child(hip, handle, opens=3)
    assert report["same_buffer"] is True
    assert report["open_calls"] == 1  # opened once, cached
    assert report["close_calls"] == 1  # the last of three closes unmaps
    assert report["closed"] is True
    assert report["live_ipc"] == 0
    device_area.munmap(buf)


def test_freed_export_raises_and_reallocation_gets_a_new_handle(
    hip: HipDouble, device_area: aml_hip.HipArea
) -> None:
    buf = device_area.mmap(8192)
    export = device_area.ipc_export(buf)
    old = export.handle
    device_area.munmap(buf)
    assert export.closed
    with pytest.raises(AMLValueError):
        _ = export.handle
    again = device_area.mmap(8192)
    new = device_area.ipc_export(again).handle
    assert new.data != old.data
    report = run_child(hip, old)  # the stale handle of freed memory
    if hip.mode == "host":  # the double refuses it; what CUDA does is up to CUDA
        assert report["error"]["class"] == "AMLValueError"
        assert report["error"]["code"] == ErrorCode.EINVAL
    assert run_child(hip, new).get("error") is None
    device_area.munmap(again)


def test_export_closed(hip: HipDouble, device_area: aml_hip.HipArea) -> None:
    buf = device_area.mmap(4096)
    with device_area.ipc_export(buf) as export:
        assert export.handle.size == 4096
    with pytest.raises(AMLValueError, match="closed"):
        _ = export.handle
    device_area.munmap(buf)


def test_open_in_the_exporting_process_is_refused(hip: HipDouble, device_area: aml_hip.HipArea) -> None:
    buf = device_area.mmap(4096)
    handle = device_area.ipc_export(buf).handle
    with pytest.raises(AMLValueError, match="exported"):
        aml_hip.ipc_open(handle)
    assert hip.calls("hipIpcOpenMemHandle") == 0
    device_area.munmap(buf)


def test_export_only_device_buffers(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    for flags in (HipFlags.ALLOC_HOST, HipFlags.ALLOC_UNIFIED, HipFlags.ALLOC_MAPPED | HipFlags.ALLOC_HOST):
        area = areas(0, flags)
        buf = area.mmap(4096)
        with pytest.raises(AMLNotSupported):
            area.ipc_export(buf)
        area.munmap(buf)
    device = areas(0, HipFlags.DEFAULT)
    buf = device.mmap(8192)
    with pytest.raises(AMLValueError, match="inside the mapping"):
        device.ipc_export(buf.ptr + 4096)
    assert hip.calls("hipIpcGetMemHandle") == 0
    device.munmap(buf)


@pytest.mark.parametrize(("error", "cls"), [(1, AMLValueError), (801, AMLNotSupported), (999, AMLFailure)])
def test_get_handle_errors(
    hip: HipDouble, device_area: aml_hip.HipArea, error: int, cls: type[AMLError]
) -> None:
    buf = device_area.mmap(4096)
    hip.inject("hipIpcGetMemHandle", error)
    with pytest.raises(cls):
        device_area.ipc_export(buf)
    device_area.munmap(buf)


@pytest.mark.parametrize(
    ("error", "cls", "code"),
    [
        (1, "AMLValueError", 3),
        (205, "AMLFailure", 1),
        (217, "AMLNotSupported", 5),
        (2, "AMLMemoryError", 2),
        (101, "AMLValueError", 3),
        (12345, "AMLFailure", 1),
    ],
)
def test_open_errors_in_the_importer(
    hip: HipDouble, device_area: aml_hip.HipArea, error: int, cls: str, code: int
) -> None:
    """hipErrorMapFailed (205) is not in the HIP area's table: FAILURE;
    hipErrorPeerAccessUnsupported (217), no peer path between the exporter's device and the
    importer's, is ENOTSUP (an extension of the table, docs/aml-contract.md#peer-access)."""
    buf = device_area.mmap(4096)
    handle = device_area.ipc_export(buf).handle
    report = run_child(hip, handle, env={"HIPDOUBLE_FAULTS": f"hipIpcOpenMemHandle:{error}"})
    found = dict(report["error"])
    assert "hipIpcOpenMemHandle" in found.pop("message")
    assert found == {"class": cls, "code": code, "function": "hipIpcOpenMemHandle", "native": error}
    device_area.munmap(buf)


def test_handles_are_checked_before_the_call(hip: HipDouble) -> None:
    rt = aml_hip.get_runtime()
    for bad in (b"", b"x" * 63, b"x" * 65):
        with pytest.raises(AMLValueError):
            rt.ipc_open_handle(bad, 4096)
    with pytest.raises(AMLTypeError):  # a str is not bytes: the wrong type
        rt.ipc_open_handle("x" * 64, 4096)  # type: ignore[arg-type]
    with pytest.raises(AMLTypeError):  # not an IpcHandle
        aml_hip.ipc_open(object())  # type: ignore[arg-type]
    foreign = IpcHandle(backend="cuda", device=0, size=4096, data=b"\0" * 64, pid=1)
    with pytest.raises(AMLValueError, match="cuda"):
        aml_hip.ipc_open(foreign)
    assert hip.calls("hipIpcOpenMemHandle") == 0


def _pickled_as_aml_0_2(handle: IpcHandle, monkeypatch: pytest.MonkeyPatch) -> str:
    """``handle`` pickled as aml 0.2 pickled it: the class ``aml_core.gpu.ipc.IpcHandle``,
    a frozen slotted attrs record of five fields (no ``offset``), its state their dict."""
    import attrs

    import aml_core.gpu.ipc

    @attrs.frozen
    class IpcHandle02:
        backend: str
        device: int
        size: int
        data: bytes
        pid: int

    IpcHandle02.__module__, IpcHandle02.__qualname__ = "aml_core.gpu.ipc", "IpcHandle"
    with monkeypatch.context() as m:
        m.setattr(aml_core.gpu.ipc, "IpcHandle", IpcHandle02)
        old = IpcHandle02(handle.backend, handle.device, handle.size, handle.data, handle.pid)
        data = pickle.dumps(old, protocol=2)
    assert b"offset" not in data
    assert b"aml_core.gpu.ipc" in data
    return base64.b64encode(data).decode()


def test_a_handle_pickled_by_aml_0_2_is_read_with_offset_0(
    hip: HipDouble, device_area: aml_hip.HipArea, monkeypatch: pytest.MonkeyPatch
) -> None:
    # aml 0.2's handles named whole allocations: no offset field, read as offset 0.
    buf = device_area.mmap(1 << 16)
    device_area.write(buf, b"exported for aml 0.2")
    handle = device_area.ipc_export(buf).handle
    old = _pickled_as_aml_0_2(handle, monkeypatch)
    loaded = pickle.loads(base64.b64decode(old))
    assert loaded == handle
    assert loaded.offset == 0
    env = hip.env()
    report = hip.run_child([str(CHILD), "ipc"], {"handle": old, "read": 20}, env)
    assert "error" not in report, report
    assert bytes.fromhex(report["read"]) == b"exported for aml 0.2"
    device_area.munmap(buf)
