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

__all__ = ["IpcConformance", "PooledIpcConformance"]

_IPC_CHILD = """
import base64, importlib, json, pickle, sys
request = json.loads(sys.stdin.read())
import aml_core
if request["plugin"]:
    aml_core.register(importlib.import_module(request["plugin"]), name=request["backend"])
memory = None
if request["memory"]:
    module, _, factory = request["memory"].partition(":")
    found = importlib.import_module(module)
    for name in factory.split("."):
        found = getattr(found, name)
    memory = found()
handle = pickle.loads(base64.b64decode(request["handle"]))
buf = aml_core.ipc_open(handle)
n = len(bytes.fromhex(request["write"]))
if buf.host_accessible:
    with memoryview(buf) as view:
        seen = bytes(view[:n])
        view[:n] = bytes.fromhex(request["write"])
elif memory is not None:
    seen = memory.read_memory(buf.ptr, n)
    memory.write_memory(buf.ptr, bytes.fromhex(request["write"]))
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
    another environment. The child reads and writes the imported buffer through the
    buffer protocol when it is host-accessible, else through its area's ``read`` and
    ``write``, or, for a backend that copies nothing (its tests read device memory
    through a driver double), through :attr:`child_memory`."""

    #: Bytes shared by the tests.
    size: ClassVar[int] = 1 << 16
    #: The plugin module the child registers (``aml_core.register``), or None when the
    #: backend is installed (found through its entry point).
    plugin: ClassVar[str | None] = None
    #: ``"module:factory"`` (the factory may be dotted, ``Class.method``): the child
    #: imports the module (on its ``PYTHONPATH``, see :meth:`child_env`) and calls the
    #: factory for an object with
    #: ``read_memory(ptr, size) -> bytes`` and ``write_memory(ptr, data)`` (a driver
    #: double's, as tests/support/double_fixtures.py gives), used for an imported buffer
    #: that is not host-accessible; None: the imported buffer's area reads and writes.
    child_memory: ClassVar[str | None] = None

    def child_env(self, area: Area) -> dict[str, str]:
        """The child process's environment (default: this process's)."""
        return dict(os.environ)

    def _open_in_a_child(self, area: Area, handle: Any, write: bytes) -> dict[str, Any]:
        """Open ``handle`` in a child process, which reads what is there and writes
        ``write``: its report (what it saw, the buffer's size and backend, whether its
        munmap closed it)."""
        request = {
            "handle": base64.b64encode(pickle.dumps(handle)).decode(),
            "plugin": self.plugin,
            "backend": area.backend,
            "write": write.hex(),
            "memory": self.child_memory,
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
        report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return report

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
        report = self._open_in_a_child(area, handle, child)
        assert bytes.fromhex(report["seen"]) == parent, "the child did not see the parent's bytes"
        assert report["size"] == self.size
        assert report["backend"] == area.backend, "the imported buffer is not in the backend's import area"
        assert report["closed"], "buf.area.munmap(buf) did not close the imported buffer"
        assert self.read(area, buf, 64) == child, "the parent did not see the child's bytes"
        area.munmap(buf)


class PooledIpcConformance(IpcConformance):
    """The IPC contract under a pool (docs/backend-authoring.md#ipc, "A pooled block"):
    ``pool.ipc_export(block)`` sends the slab's handle with the block's ``offset`` in it
    and the block's ``size``, and the backend's ``ipc_open`` must map ``size`` bytes at
    ``offset`` of the memory the handle names. Checked with a block that is not its
    slab's first: the child must see that block's bytes (not the slab's first block's,
    which a backend that maps from offset 0 shows), and what it writes lands there, the
    neighbours untouched. Same fixture and hooks as :class:`IpcConformance`."""

    #: The blocks' size: several share one slab of the pool, the second at an offset that
    #: is not a multiple of the page size (an import that maps from the page below must
    #: add the rest to its pointer).
    block: ClassVar[int] = 3 * 512

    def test_a_pooled_block_is_opened_at_its_offset(self, area: Area) -> None:
        from ..pool import pool as make_pool

        self._area(area)
        pool = make_pool(area)
        try:
            blocks = [pool.mmap(self.block) for _ in range(3)]
            slabs = [pool.slab_of(b) for b in blocks]
            assert len({s.ptr if s is not None else None for s, _ in slabs}) == 1, (
                "three small blocks did not share one slab"
            )
            first, target, after = blocks
            offset = slabs[1][1]
            assert offset > 0, "the second block is at the slab's start"
            fill = {id(b): pattern(self.block) for b in blocks}
            for b in blocks:
                self.write(pool, b, fill[id(b)])
            handle = pool.ipc_export(target).handle
            assert (handle.offset, handle.size) == (offset, self.block)
            child = pattern(64)
            report = self._open_in_a_child(area, handle, child)
            seen = bytes.fromhex(report["seen"])
            assert seen != fill[id(first)][:64], (
                "the child read the slab's first block: the backend's ipc_open ignored "
                f"handle.offset ({offset})"
            )
            assert seen == fill[id(target)][:64], "the child did not see the pooled block's bytes"
            assert report["size"] == self.block
            assert self.read(pool, target, 64) == child, "the child's bytes did not land in the block"
            assert self.read(pool, first, self.block) == fill[id(first)], "the child wrote the first block"
            assert self.read(pool, after, self.block) == fill[id(after)], "the child wrote the next block"
            for b in blocks:
                pool.munmap(b)
        finally:
            pool.close()
