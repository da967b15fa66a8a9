"""Child process of test_ze_loader.py: runs one scenario against the real Level Zero
loader (the environment selects the null driver and validation layer: the loader reads it
once per process) and prints a JSON report as its last line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def _error(call: Callable[[], Any]) -> dict[str, Any] | None:
    from aml_core.errors import AMLError

    try:
        call()
    except AMLError as exc:
        return {
            "class": type(exc).__name__,
            "code": int(exc.code),
            "message": str(exc),
            "function": exc.native.function if exc.native else None,
            "native": exc.native.code if exc.native else None,
        }
    return None


def probe() -> dict[str, Any]:
    import aml_ze

    result = aml_ze.probe()
    return {
        "available": result.available,
        "reason": result.reason,
        "devices": [{"name": d.name, "memory": d.total_memory, **dict(d.details)} for d in result.devices],
    }


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


if __name__ == "__main__":
    scenario = {"probe": probe, "null": null_driver, "validation": validation}[sys.argv[1]]
    print(json.dumps(scenario()))
