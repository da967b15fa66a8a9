"""The IPC conformance class (docs/backend-authoring.md#ipc)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
from typing import Any, ClassVar

import pytest

from ..area import Area
from ..errors import (
    AMLTypeError,
    AMLValueError,
)
from ..specs import Capability
from .conformance_base import DataAccess, pattern

__all__ = ["IpcConformance"]

_IPC_CHILD = """
import base64, importlib, json, pickle, sys
request = json.loads(sys.stdin.read())
import aml_core
if request["plugin"]:
    aml_core.register(importlib.import_module(request["plugin"]), name=request["backend"])
handle = pickle.loads(base64.b64decode(request["handle"]))
buf = aml_core.ipc_open(handle)
n = len(bytes.fromhex(request["write"]))
if buf.host_accessible:
    with memoryview(buf) as view:
        seen = bytes(view[:n])
        view[:n] = bytes.fromhex(request["write"])
else:
    seen = buf.area.read(buf, n)
    buf.area.write(buf, bytes.fromhex(request["write"]))
report = {"seen": seen.hex(), "size": buf.size, "backend": buf.area.backend}
buf.area.munmap(buf)
report["closed"] = buf.freed
print(json.dumps(report))
"""


class IpcConformance(DataAccess):
    """The IPC contract (docs/backend-authoring.md#ipc), for any backend that declares
    :attr:`~aml_core.specs.Capability.IPC`: needs a fixture ``area`` yielding an open
    area with ``ipc_export``. A child process opens the handle with
    ``aml_core.ipc_open``, reads what the parent wrote and writes back.

    The child finds the backend by ``handle.backend`` in the registry: set
    :attr:`plugin` to the plugin module to register there when the backend is not
    installed as an entry point, and override :meth:`child_env` if the child needs
    another environment."""

    #: Bytes shared by the tests.
    size: ClassVar[int] = 1 << 16
    #: The plugin module the child registers (``aml_core.register``), or None when the
    #: backend is installed (found through its entry point).
    plugin: ClassVar[str | None] = None

    def child_env(self, area: Area) -> dict[str, str]:
        """The child process's environment (default: this process's)."""
        return dict(os.environ)

    def _area(self, area: Area) -> Any:
        if not area.capabilities & Capability.IPC or not hasattr(area, "ipc_export"):
            pytest.skip("the area does not declare IPC")
        return area

    def test_handle(self, area: Area) -> None:
        from ..ipc import IpcExport, IpcHandle

        ipc = self._area(area)
        buf = area.mmap(self.size)
        export = ipc.ipc_export(buf)
        assert isinstance(export, IpcExport)
        handle = export.handle
        assert isinstance(handle, IpcHandle)
        assert handle.backend == area.backend
        assert handle.size == buf.size
        assert handle.pid == os.getpid()
        assert pickle.loads(pickle.dumps(handle)) == handle
        area.munmap(buf)
        with pytest.raises(AMLValueError):
            export.handle  # noqa: B018 - the buffer was freed: the export says so

    def test_export_bad_input(self, area: Area) -> None:
        ipc = self._area(area)
        buf = area.mmap(4096)
        with pytest.raises(AMLValueError):
            ipc.ipc_export(buf.ptr + (1 << 40))
        area.munmap(buf)
        with pytest.raises(AMLValueError):
            ipc.ipc_export(buf)
        import aml_core

        with pytest.raises(AMLTypeError):
            aml_core.ipc_open(object())  # type: ignore[arg-type]

    def test_share_with_a_child_process(self, area: Area) -> None:
        ipc = self._area(area)
        buf = area.mmap(self.size)
        parent, child = pattern(64), pattern(64)
        self.write(area, buf, parent)
        handle = ipc.ipc_export(buf).handle
        request = {
            "handle": base64.b64encode(pickle.dumps(handle)).decode(),
            "plugin": self.plugin,
            "backend": area.backend,
            "write": child.hex(),
        }
        proc = subprocess.run(
            [sys.executable, "-c", _IPC_CHILD],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=self.child_env(area),
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        assert bytes.fromhex(report["seen"]) == parent, "the child did not see the parent's bytes"
        assert report["size"] == self.size
        assert report["backend"] == area.backend, "the imported buffer is not in the backend's import area"
        assert report["closed"], "buf.area.munmap(buf) did not close the imported buffer"
        assert self.read(area, buf, 64) == child, "the parent did not see the child's bytes"
        area.munmap(buf)
