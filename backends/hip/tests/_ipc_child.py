"""The importing process of the IPC tests (docs/aml-contract.md#hip-ipc), run as ``python _ipc_child.py``.

Reads a JSON request on stdin: ``{"handle": <base64 pickle of an IpcHandle>, "opens": n,
"write": <hex bytes to write at offset 0>, "read": n}`` and prints a JSON report: what
it read, the native calls the double saw (count and the lazy-peer flag), the cache
behaviour, and the error if the open failed. Uses the double named by
``AML_HIP_LIBRARY`` (its emulated version comes from ``HIPDOUBLE_VERSION``).
"""

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


def main() -> int:
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
    for b in bufs:
        aml_hip.ipc_close(b)
    report["closed"] = buf.freed
    report["close_calls"] = ctl.calls("hipIpcCloseMemHandle")
    aml_hip.BACKEND.reset()
    report["live_ipc"] = ctl.live("ipc")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
