"""Child processes of the aml-hip tests: run as ``python hip_children.py
ipc|ipc-devices|vmm`` with a JSON request on stdin; each prints one JSON line
(docs/aml-contract.md#hip-ipc)."""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any


def _control() -> Any:
    from hip_helpers import SUITE

    return SUITE.build.DoubleControl(os.environ["AML_HIP_LIBRARY"])


def ipc() -> int:
    """The importer of the IPC tests: reads ``{"handle": base64 pickle, "opens": n, "read": n,
    "write": hex, "drop": bool}`` on stdin, opens, reads and writes through the double,
    closes (or, with ``drop``, drops the buffer and lets the collector unmap it), and
    prints a JSON report with the double's calls and live counters."""
    import aml_hip

    from aml_core.errors import AMLError
    from tests.support.child import error_report, unpickled

    request = json.loads(sys.stdin.read())
    handle = unpickled(request["handle"])
    ctl = _control()
    report: dict[str, Any] = {"pid": os.getpid()}
    try:
        bufs = [aml_hip.ipc_open(handle) for _ in range(int(request.get("opens", 1)))]
    except AMLError as exc:
        report["error"] = error_report(exc)
        report["open_calls"] = ctl.calls("hipIpcOpenMemHandle")
        report["live_ipc"] = ctl.live("ipc")  # a failed open leaves no mapping behind
        print(json.dumps(report))
        return 0
    buf = bufs[0]
    rt = aml_hip.get_runtime()
    report["same_buffer"] = all(b is buf for b in bufs)
    report["size"] = buf.size
    report["open_calls"] = ctl.calls("hipIpcOpenMemHandle")
    report["open_args"] = list(ctl.last_args("hipIpcOpenMemHandle"))
    n = int(request.get("read", 0))
    if n:
        out = (ctypes.c_char * n)()
        rt.memcpy(ctypes.addressof(out), buf.device_ptr, n)
        report["read"] = bytes(out).hex()
    if request.get("write"):
        data = bytes.fromhex(request["write"])
        src = ctypes.create_string_buffer(data, len(data))
        rt.memcpy(buf.device_ptr, ctypes.addressof(src), len(data))
        rt.synchronize()
    if request.get("drop"):
        # Dropped without ipc_close: the garbage collector unmaps it (every open of it).
        imports = buf.area
        del bufs, buf
        import gc

        gc.collect()
        report["dropped_live_mappings"] = imports.stats.live_mappings
        report["dropped_live_ipc"] = ctl.live("ipc")
        report["close_calls"] = ctl.calls("hipIpcCloseMemHandle")
        aml_hip.BACKEND.reset()
        report["live_ipc"] = ctl.live("ipc")
        print(json.dumps(report))
        return 0
    for b in bufs:
        aml_hip.ipc_close(b)
    report["closed"] = buf.freed
    report["close_calls"] = ctl.calls("hipIpcCloseMemHandle")
    aml_hip.BACKEND.reset()
    report["live_ipc"] = ctl.live("ipc")
    print(json.dumps(report))
    return 0


def _read(rt: Any, ptr: int, n: int) -> str:
    out = (ctypes.c_char * n)()
    rt.memcpy(ctypes.addressof(out), ptr, n)
    return bytes(out).hex()


def _write(rt: Any, ptr: int, data: bytes) -> None:
    src = ctypes.create_string_buffer(data, len(data))
    rt.memcpy(ptr, ctypes.addressof(src), len(data))
    rt.synchronize()


def ipc_devices() -> int:
    """The importer of the IPC-across-devices test: reads ``{"handle": base64 pickle,
    "device": d, "read": n, "write": hex}`` on stdin. With ``d`` current it opens the
    handle twice (one mapping: the cache), reads the exporter's bytes and writes a reply;
    then, current on the other device, opens it again (a second mapping, in that device's
    context) and reads the reply through it; closes everything from device ``d`` (each
    mapping closed with its own device selected) and reports the double's counts."""
    import aml_hip

    from tests.support.child import unpickled

    request = json.loads(sys.stdin.read())
    handle = unpickled(request["handle"])
    device, n = int(request["device"]), int(request["read"])
    other = 1 - device
    ctl = _control()
    rt = aml_hip.get_runtime()
    report: dict[str, Any] = {"pid": os.getpid()}
    rt.set_device(device)
    buf = aml_hip.ipc_open(handle)
    report["same_buffer"] = aml_hip.ipc_open(handle) is buf
    report["open_calls_one_device"] = ctl.calls("hipIpcOpenMemHandle")
    report["read"] = _read(rt, buf.device_ptr, n)
    _write(rt, buf.device_ptr, bytes.fromhex(request["write"]))
    rt.set_device(other)
    again = aml_hip.ipc_open(handle)
    report["second_mapping"] = again is not buf and again.ptr != buf.ptr
    report["open_calls_two_devices"] = ctl.calls("hipIpcOpenMemHandle")
    report["read_other"] = _read(rt, again.device_ptr, n)
    report["buffer_devices"] = [buf.device, again.device]
    rt.set_device(device)
    for b in (buf, buf, again):
        aml_hip.ipc_close(b)
    report["current_after_close"] = rt.get_device()
    report["closed"] = buf.freed and again.freed
    report["close_calls"] = ctl.calls("hipIpcCloseMemHandle")
    aml_hip.BACKEND.reset()
    report["live_ipc"] = ctl.live("ipc")
    print(json.dumps(report))
    return 0


def vmm() -> int:
    """The importer of the VMM sharing tests: reads ``{"fd": n, "size": bytes, "read": n,
    "device": d, "write": hex}`` on stdin (the fd is inherited; ``device`` default 0,
    ``write`` optional), imports the physical allocation into device ``d``'s virtual memory
    with ``d`` current, maps it, grants ``d`` read-write access, reads ``read`` bytes,
    writes ``write`` and prints a JSON report."""
    import aml_hip

    from aml_core.errors import AMLError

    request = json.loads(sys.stdin.read())
    fd, size, n = int(request["fd"]), int(request["size"]), int(request["read"])
    device = int(request.get("device", 0))
    report: dict[str, object] = {"pid": os.getpid()}
    rt = aml_hip.get_runtime()
    rt.set_device(device)
    vm = aml_hip.virtual_memory(device)
    try:
        phys = vm.import_fd(fd, size)
        res = vm.reserve(size)
        vm.map(res.ptr, size, phys)
        vm.set_access(res.ptr, size, {device: aml_hip.Access.READWRITE})
        report["read"] = _read(rt, res.ptr, n)
        if request.get("write"):
            _write(rt, res.ptr, bytes.fromhex(request["write"]))
        report["properties"] = [vm.properties(phys).type, vm.properties(phys).location_device]
        vm.unmap(res.ptr, size)
        vm.release(phys)
        vm.address_free(res)
    except AMLError as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        vm.close()
        os.close(fd)
    print(json.dumps(report))
    return 0


CHILDREN = {"ipc": ipc, "ipc-devices": ipc_devices, "vmm": vmm}

if __name__ == "__main__":
    sys.exit(CHILDREN[sys.argv[1]]())
