"""Level Zero IPC behind aml's IPC API, between two real processes: the exporter's
``zeMemGetIpcHandle`` handle carries a file descriptor, the importer duplicates it
(pidfd_getfd) and maps the same memory (memfd in the double's host mode, cuMem VMM fds in
forward mode); the importer cache; zeMemPutIpcHandle where the loader has it and life
without it; the error paths; and the conformance kit's IPC classes (a pooled block that is
not its slab's first, opened at its offset)."""

from __future__ import annotations

import base64
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aml_ze
import pytest
from aml_ze import IpcHandle
from aml_ze import abi as C
from ze_helpers import ZeDouble

from aml_core.area import Area
from aml_core.buffer import Buffer
from aml_core.testing import PooledIpcConformance
from tests.support.child import pickled

CHILD = Path(__file__).resolve().parent / "ze_children.py"


def run_child(ze: ZeDouble, handle: IpcHandle, **request: Any) -> dict[str, Any]:
    return ze.run_child([str(CHILD), "ipc"], {**request, "handle": pickled(handle)})


def test_share_between_processes(ze: ZeDouble, areas: Callable[..., aml_ze.ZeArea]) -> None:
    area = areas("device")
    buf = area.mmap(1 << 16)
    ze.ctl.write(buf.ptr, b"exported by the parent")
    export = area.ipc_export(buf)
    handle = export.handle
    assert (handle.backend, handle.device, handle.size, handle.pid) == ("ze", 0, 1 << 16, os.getpid())
    assert len(handle.data) == 80
    assert pickle.loads(pickle.dumps(handle)) == handle
    assert ze.live()["ipc_handle"] == 1
    report = run_child(ze, handle, read=22, write=b"written by the child".hex(), opens=3)
    assert "error" not in report, report
    assert bytes.fromhex(report["read"]) == b"exported by the parent"
    assert report["same_buffer"] is True  # the importer cache: one mapping for three opens
    assert report["open_calls"] == 1
    assert report["close_calls"] == 1
    assert report["closed"] is True
    assert report["dlpack"] == [14, 0]
    assert not any(report["live"].values()), report["live"]
    assert ze.ctl.read(buf.ptr, 20) == b"written by the child"
    area.munmap(buf)
    assert ze.calls("zeMemPutIpcHandle") == 1  # released with the memory
    assert export.closed


@pytest.mark.gpu2
def test_share_memory_of_the_second_device(ze: ZeDouble, areas: Callable[..., aml_ze.ZeArea]) -> None:
    """Device 1's memory shared with another process (issue 13). Level Zero has no current
    device, so aml-ze's importer maps a handle for the exporter's device
    (``zeMemOpenIpcHandle`` with that device's handle): the import is device 1's memory, and
    the forward double grants device 1 access to the CUDA allocation it made there."""
    ze.need_devices(2)
    area = areas("device", device=1)
    buf = area.mmap(1 << 16)
    ze.ctl.write(buf.ptr, b"on the second device")
    handle = area.ipc_export(buf).handle
    assert handle.device == 1
    request: dict[str, Any] = {"read": 20, "write": b"the importer's reply".hex(), "opens": 2}
    if ze.mode == "host":
        request["devices"] = 2
    report = run_child(ze, handle, **request)
    assert "error" not in report, report
    assert bytes.fromhex(report["read"]) == b"on the second device"
    assert (report["device"], report["dlpack"]) == (1, [14, 1])
    assert report["same_buffer"] is True
    assert report["open_calls"] == 1
    assert not any(report["live"].values()), report["live"]
    assert ze.ctl.read(buf.ptr, 20) == b"the importer's reply"
    area.munmap(buf)


def test_without_put(ze_noput: ZeDouble) -> None:
    """Debian's 1.8.12 loader has no zeMemPutIpcHandle: the handle lives until zeMemFree."""
    rt = aml_ze.get_runtime()
    assert not rt.lib.has("zeMemPutIpcHandle")
    with aml_ze.device_area() as area:
        buf = area.mmap(4096)
        ze_noput.ctl.write(buf.ptr, b"no put")
        handle = area.ipc_export(buf).handle
        report = run_child(ze_noput, handle, read=6)
        assert bytes.fromhex(report["read"]) == b"no put"
        assert ze_noput.live()["ipc_handle"] == 1
        area.munmap(buf)
        assert ze_noput.live()["ipc_handle"] == 0


def test_freed_export_raises(areas: Callable[..., aml_ze.ZeArea]) -> None:
    area = areas("device")
    buf = area.mmap(64)
    export = area.ipc_export(buf)
    area.munmap(buf)
    with pytest.raises(ValueError, match="freed"):
        _ = export.handle


def test_exporter_gone(ze: ZeDouble) -> None:
    """A handle whose exporter has exited: EINVAL in the importer, nothing opened."""
    code = (
        "import aml_ze, base64, pickle\n"
        "a = aml_ze.device_area(); b = a.mmap(4096)\n"
        "print(base64.b64encode(pickle.dumps(a.ipc_export(b).handle)).decode())\n"
        "a.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ze.env(), check=True, timeout=60
    ).stdout
    handle = pickle.loads(base64.b64decode(out.strip().splitlines()[-1]))
    report = run_child(ze, handle)
    assert report["error"]["class"] == "AMLValueError", report
    assert not any(report["live"].values())


@pytest.mark.parametrize(
    ("native", "cls"),
    [
        (C.ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "AMLValueError"),
        (C.ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, "AMLMemoryError"),
        (C.ZE_RESULT_ERROR_DEVICE_LOST, "AMLFailure"),
    ],
)
def test_open_failure_in_the_importer(
    ze: ZeDouble, areas: Callable[..., aml_ze.ZeArea], native: int, cls: str
) -> None:
    area = areas("device")
    buf = area.mmap(4096)
    handle = area.ipc_export(buf).handle
    report = run_child(ze, handle, inject=["zeMemOpenIpcHandle", native])
    assert report["error"]["class"] == cls
    assert report["error"]["function"] == "zeMemOpenIpcHandle"
    assert report["error"]["native"] == native
    assert not any(report["live"].values())
    area.munmap(buf)


def test_get_handle_failure(ze: ZeDouble, areas: Callable[..., aml_ze.ZeArea]) -> None:
    area = areas("device")
    buf = area.mmap(4096)
    ze.inject("zeMemGetIpcHandle", C.ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
    with pytest.raises(MemoryError):
        area.ipc_export(buf)
    assert ze.live()["ipc_handle"] == 0
    area.munmap(buf)


def test_a_handle_claiming_more_than_was_exported(ze: ZeDouble, areas: Callable[..., aml_ze.ZeArea]) -> None:
    """Issue 9's tampered handle on Level Zero: 1 GiB claimed for an 8 KiB export. The
    importer asks zeMemGetAddressRange after the open, refuses the handle (EINVAL) and
    closes what it opened; reading 1 GiB there would have run off the mapping."""
    import attrs

    area = areas("device")
    buf = area.mmap(8192)
    handle = attrs.evolve(area.ipc_export(buf).handle, size=1 << 30)
    report = run_child(ze, handle)
    assert report["error"]["class"] == "AMLValueError", report
    # the allocation's own size (8 KiB on the host double; forwarded to CUDA, the 2 MiB granule)
    assert "the exported allocation has " in report["error"]["message"], report
    assert "claims 1.0 GiB (1073741824 bytes)" in report["error"]["message"], report
    assert not any(report["live"].values()), report["live"]
    area.munmap(buf)


def test_a_failed_range_query_closes_the_mapping(ze: ZeDouble, areas: Callable[..., aml_ze.ZeArea]) -> None:
    area = areas("device")
    buf = area.mmap(4096)
    handle = area.ipc_export(buf).handle
    report = run_child(ze, handle, inject=["zeMemGetAddressRange", C.ZE_RESULT_ERROR_DEVICE_LOST])
    assert report["error"]["class"] == "AMLFailure", report
    assert report["error"]["function"] == "zeMemGetAddressRange"
    assert not any(report["live"].values()), report["live"]
    area.munmap(buf)


class TestIpcConformance(PooledIpcConformance):
    """The kit's IPC classes over the double: export a device buffer here, open it in a
    child process (the same double, through ze.env()), write there, read back here; a
    pooled block that is not its slab's first too (the handle's offset honoured by the
    import aml-ze shares with the other GPU backends, aml_core.gpu.ipc). aml-ze copies
    nothing: both processes reach device memory through the double."""

    child_memory = "ze_helpers:ZeDouble.in_child"

    @pytest.fixture
    def area(self, ze: ZeDouble) -> Iterator[Area]:
        self.double = ze
        with aml_ze.device_area() as area:
            yield area

    def child_env(self, area: Area) -> dict[str, str]:
        return self.double.env()

    def write(self, area: Area, buf: Buffer, data: bytes) -> None:
        self.double.write_memory(buf.ptr, data)

    def read(self, area: Area, buf: Buffer, size: int) -> bytes:
        return self.double.read_memory(buf.ptr, size)
