"""Child processes of the aml-ze tests, run as ``python ze_children.py SCENARIO``:

* ``ipc``: the importing process of the IPC tests (a JSON request on stdin), over the
  double named by ``AML_ZE_LIBRARY``;
* ``probe``, ``null``, ``validation``: one scenario against the real Level Zero loader (the
  environment selects the null driver and validation layer: the loader reads it once per
  process).

Each prints a JSON report as its last line.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any


def ipc() -> int:
    """The importer of the IPC tests: reads ``{"handle": <base64 pickle of an IpcHandle>,
    "opens": n, "read": n, "write": <hex>, "inject": [function, ze_result_t], "devices": n}``
    on stdin and prints a JSON report (what it read, the native calls the double saw,
    whether the importer cache returned one buffer, the error if the open failed).
    ``devices``: host mode, emulate that many devices (as the exporter does)."""
    import aml_ze
    from ze_helpers import build

    from aml_core.errors import AMLError
    from tests.support.child import error_report, unpickled

    request = json.loads(sys.stdin.read())
    handle = unpickled(request["handle"])
    ctl = build.DoubleControl(os.environ["AML_ZE_LIBRARY"])
    report: dict[str, Any] = {"pid": os.getpid()}
    if request.get("devices"):
        ctl.set_devices(int(request["devices"]), 1 << 30)
    if request.get("inject"):
        function, error = request["inject"]
        ctl.inject(function, int(error))
    try:
        bufs = [aml_ze.ipc_open(handle) for _ in range(int(request.get("opens", 1)))]
    except AMLError as exc:
        report["error"] = error_report(exc)
        aml_ze.BACKEND.reset()
        report["live"] = ctl.lives()
        print(json.dumps(report))
        return 0
    buf = bufs[0]
    report["same_buffer"] = all(b is buf for b in bufs)
    report["size"] = buf.size
    report["device"] = buf.device
    report["dlpack"] = list(buf.__dlpack_device__())
    report["open_calls"] = ctl.calls("zeMemOpenIpcHandle")
    report["fds"] = len(os.listdir("/proc/self/fd"))
    n = int(request.get("read", 0))
    if n:
        report["read"] = ctl.read(buf.ptr, n).hex()
    if request.get("write"):
        ctl.write(buf.ptr, bytes.fromhex(request["write"]))
    for b in bufs:
        aml_ze.ipc_close(b)
    report["closed"] = buf.freed
    report["close_calls"] = ctl.calls("zeMemCloseIpcHandle")
    aml_ze.BACKEND.reset()
    report["live"] = ctl.lives()
    print(json.dumps(report))
    return 0


def _error(call: Callable[[], Any]) -> dict[str, Any] | None:
    from aml_core.errors import AMLError
    from tests.support.child import error_report

    try:
        call()
    except AMLError as exc:
        return error_report(exc)
    return None


def probe() -> dict[str, Any]:
    import aml_ze

    result = aml_ze.probe()
    return {
        "available": result.available,
        "reason": result.reason,
        "devices": [
            {"name": d.name, "memory": d.total_memory, "free": d.free_memory, **dict(d.details)}
            for d in result.devices
        ],
    }


def _sysman() -> dict[str, Any]:
    """How aml-ze found Sysman, and what the driver answers for device 0's memory modules."""
    import ctypes

    import aml_ze

    rt = aml_ze.get_runtime()
    handle = rt.sysman.handle(0)
    report: dict[str, Any] = {
        "zesInit": rt.lib.has("zesInit"),
        "way": rt.sysman.way,
        "reason": rt.sysman.reason,
        "handle": handle is not None,
    }
    if handle is not None:
        count = ctypes.c_uint32(0)
        rc = rt.lib.raw("zesDeviceEnumMemoryModules", ctypes.c_void_p(handle), ctypes.byref(count), None)
        report["modules"] = [rc, count.value]
    return report


def null_driver() -> dict[str, Any]:
    import aml_ze

    report = probe()
    out: dict[str, Any] = {}
    for kind, area in (
        ("device", aml_ze.device_area()),
        ("shared", aml_ze.device_area(flags=aml_ze.ZeFlags.SHARED)),
        ("host", aml_ze.host_area()),
    ):
        buf = area.mmap(4096)
        if buf.host_accessible:
            with memoryview(buf) as view:
                view[:5] = b"hello"
                assert bytes(view[:5]) == b"hello"
        out[kind] = {"ptr": buf.ptr != 0, "properties": aml_ze.alloc_properties(buf).memory_type}
        if kind == "device":
            out["ipc_handle_bytes"] = len(area.ipc_export(buf).handle.data)
        area.munmap(buf)
        area.close()
    report["areas"] = out
    report["virtual_memory"] = _error(lambda: aml_ze.virtual_memory(0))
    rt = aml_ze.get_runtime()
    report["reserve"] = _error(lambda: rt.vmm_reserve(1 << 16, 0, 0))
    handle = rt.vmm_create(1 << 16, 0, False)
    rt.vmm_release(handle)
    report["physical"] = handle != 0
    report["put"] = rt.lib.has("zeMemPutIpcHandle")
    report["sysman"] = _sysman()
    aml_ze.BACKEND.reset()
    return report


def validation() -> dict[str, Any]:
    """Bypass aml's checks (the test hook ``_checked=False`` / ``_allocate``) so that the
    validation layer reports and aml's table translates; then the same with aml's checks."""
    import aml_ze

    area = aml_ze.device_area()
    host = aml_ze.host_area()
    report = {
        "size0": _error(lambda: area._allocate(0, None)),
        "alignment3": _error(lambda: aml_ze.device_area(alignment=3, _checked=False).mmap(64)),
        "device_flags": _error(lambda: aml_ze.device_area(device_flags=0x80, _checked=False).mmap(64)),
        "shared_flags": _error(
            lambda: aml_ze.device_area(device_flags=0x8, flags=aml_ze.ZeFlags.SHARED, _checked=False).mmap(64)
        ),
        "host_flags": _error(lambda: aml_ze.host_area(host_flags=0x40, _checked=False).mmap(64)),
        "host_size0": _error(lambda: host._allocate(0, None)),
        "checked_alignment3": _error(lambda: aml_ze.device_area(alignment=3)),
        "checked_device_flags": _error(lambda: aml_ze.device_area(device_flags=0x80)),
        "checked_size0": _error(lambda: area.mmap(0)),
    }
    buf = area.mmap(64)
    area.munmap(buf)
    report["valid_call"] = True
    return report


LOADER_SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "probe": probe,
    "null": null_driver,
    "validation": validation,
}

if __name__ == "__main__":
    if sys.argv[1] == "ipc":
        sys.exit(ipc())
    print(json.dumps(LOADER_SCENARIOS[sys.argv[1]]()))
