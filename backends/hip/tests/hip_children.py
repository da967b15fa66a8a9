"""Child processes of the aml-hip tests: run as ``python hip_children.py ipc|vmm`` with a
JSON request on stdin; each prints one JSON line (docs/aml-contract.md#hip-ipc)."""

from __future__ import annotations

import base64
import ctypes
import importlib.util
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any


def _control() -> Any:
    path = Path(__file__).resolve().parent / "native" / "hip_double.py"
    spec = importlib.util.spec_from_file_location("aml_hip_tests_double_build", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.DoubleControl(os.environ["AML_HIP_LIBRARY"])


def ipc() -> int:
    """The importer of the IPC tests: reads ``{"handle": base64 pickle, "opens": n, "read": n,
    "write": hex, "drop": bool}`` on stdin, opens, reads and writes through the double,
    closes (or, with ``drop``, drops the buffer and lets the collector unmap it), and
    prints a JSON report with the double's calls and live counters."""
    import aml_hip

    from aml_core.errors import AMLError

    request = json.loads(sys.stdin.read())
    handle = pickle.loads(base64.b64decode(request["handle"]))
    ctl = _control()
    report: dict[str, Any] = {"pid": os.getpid()}
    try:
        bufs = [aml_hip.ipc_open(handle) for _ in range(int(request.get("opens", 1)))]
    except AMLError as exc:
        report["error"] = {
            "class": type(exc).__name__,
            "code": int(exc.code),
            "function": exc.native.function if exc.native else None,
            "native": exc.native.code if exc.native else None,
        }
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


def vmm() -> int:
    """The importer of the VMM sharing test: reads ``{"fd": n, "size": bytes, "read": n}`` on
    stdin (the fd is inherited), imports the physical allocation, maps it, reads ``read`` bytes
    and prints a JSON report."""
    import aml_hip

    from aml_core.errors import AMLError

    request = json.loads(sys.stdin.read())
    fd, size, n = int(request["fd"]), int(request["size"]), int(request["read"])
    report: dict[str, object] = {"pid": os.getpid()}
    vm = aml_hip.virtual_memory(0)
    try:
        phys = vm.import_fd(fd, size)
        res = vm.reserve(size)
        vm.map(res.ptr, size, phys)
        vm.set_access(res.ptr, size, aml_hip.Access.READWRITE)
        out = (ctypes.c_char * n)()
        aml_hip.get_runtime().memcpy(ctypes.addressof(out), res.ptr, n)
        report["read"] = bytes(out).hex()
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


CHILDREN = {"ipc": ipc, "vmm": vmm}

if __name__ == "__main__":
    sys.exit(CHILDREN[sys.argv[1]]())
