"""The importer side of the soak scripts' IPC: one long-lived child process that opens
each handle it is sent with ``<backend>.ipc_open``, reads the first 16 bytes of the
buffer, closes it and answers in one JSON line (``size``, ``head`` in hex, ``closed``; or
``error``, the AML error's class; or ``bare``, anything else it raised)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from typing import Any

CHILD = r"""
import importlib, json, pickle, sys
backend = importlib.import_module(sys.argv[1])
from aml_core.errors import AMLError
rt = backend.get_runtime(); rt.set_device(0); rt.synchronize()
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if request.get("quit"):
        break
    handle = pickle.loads(bytes.fromhex(request["handle"]))
    reply = {}
    try:
        buf = backend.ipc_open(handle)
        reply["size"] = buf.size
        reply["head"] = buf.area.read(buf, min(16, buf.size)).hex()
        backend.ipc_close(buf)
        reply["closed"] = buf.freed
    except AMLError as exc:
        reply["error"] = type(exc).__name__
    except BaseException as exc:
        reply["bare"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(reply), flush=True)
backend.BACKEND.reset()
"""


class Importer:
    """The child process, started with the backend package's name (``"aml_cuda"``)."""

    def __init__(self, package: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, package],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        json.loads(self.proc.stdout.readline())

    def open(self, handle: Any) -> dict[str, Any]:
        """Send a handle (any picklable object, tampered ones too); the child's answer."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"handle": pickle.dumps(handle).hex()}) + "\n")
        self.proc.stdin.flush()
        reply: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return reply

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=60)
