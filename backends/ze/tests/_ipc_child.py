"""The importing process of the IPC tests, run as ``python _ipc_child.py``.

Reads a JSON request on stdin: ``{"handle": <base64 pickle of an IpcHandle>, "opens": n,
"read": n, "write": <hex>, "inject": [function, ze_result_t]}`` and prints a JSON
report: what it read, the native calls the double saw, whether the importer cache
returned one buffer, and the error if the open failed. Uses the double named by ``AML_ZE_LIBRARY``.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import sys
from typing import Any


def main() -> int:
    import aml_ze
    from _ze_helpers import build

    from aml_core.errors import AMLError

    request = json.loads(sys.stdin.read())
    handle = pickle.loads(base64.b64decode(request["handle"]))
    ctl = build.DoubleControl(os.environ["AML_ZE_LIBRARY"])
    report: dict[str, Any] = {"pid": os.getpid()}
    if request.get("inject"):
        function, error = request["inject"]
        ctl.inject(function, int(error))
    try:
        bufs = [aml_ze.ipc_open(handle) for _ in range(int(request.get("opens", 1)))]
    except AMLError as exc:
        report["error"] = {
            "class": type(exc).__name__,
            "code": int(exc.code),
            "message": str(exc),
            "function": exc.native.function if exc.native else None,
            "native": exc.native.code if exc.native else None,
        }
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


if __name__ == "__main__":
    sys.exit(main())
