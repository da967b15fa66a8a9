"""The importer of the Numba IPC test (test_hip_numba.py): reads ``{"handle": base64 pickle
of an aml Numba IpcHandle, "read": n}`` on stdin, opens the handle as Numba's callers do
(``handle.open(context)``), reads ``n`` bytes through the HIP double, opens it again (the
error is reported), closes it twice (the second error too) and prints one JSON report."""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class _Context:
    """What Numba passes as the context (only a weak proxy of it is kept)."""


def main() -> int:
    import aml_hip
    from hip_helpers import SUITE

    from aml_core.errors import AMLError
    from tests.support.child import error_report, unpickled

    request = json.loads(sys.stdin.read())
    handle = unpickled(request["handle"])
    ctl = SUITE.build.DoubleControl(os.environ["AML_HIP_LIBRARY"])
    context = _Context()
    report: dict[str, Any] = {"type": type(handle).__name__, "size": handle.size}
    mem = handle.open(context)
    out = (ctypes.c_char * int(request["read"]))()
    aml_hip.get_runtime().memcpy(ctypes.addressof(out), int(mem.device_pointer), len(out))
    report["read"] = bytes(out).hex()
    try:
        handle.open(context)
    except AMLError as exc:
        report["second_open"] = error_report(exc)
        report["second_open_is_value_error"] = isinstance(exc, ValueError)
    report["open_calls"] = ctl.calls("hipIpcOpenMemHandle")
    handle.close()
    try:
        handle.close()
    except AMLError as exc:
        report["second_close"] = error_report(exc)
    report["live_ipc"] = ctl.live("ipc")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
