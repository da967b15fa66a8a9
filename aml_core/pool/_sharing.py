"""What a pool offers of its area's extras (see aml_core.pool, "What the area offers"):
IPC and dma-buf export of pooled blocks (:class:`~aml_core.protocols.IpcExporter`,
:class:`~aml_core.protocols.DmabufExporter`) and copies into and
out of them (:class:`~aml_core.protocols.DeviceCopies`, or the expandable segment's
:class:`~aml_core.protocols.GrowableMemory`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .. import checks
from .._buffer import address_of
from ..area import Area
from ..buffer import Buffer
from ..dmabuf import DmabufHandle
from ..errors import AMLNotSupported
from ..ipc import IpcExport
from ..protocols import DeviceCopies, DmabufExporter, GrowableMemory, IpcExporter

__all__ = ["Sharing"]


class Sharing(Area):
    """IPC export, write and read of pooled buffers."""

    #: Set by the Pool: the area below, and an expandable pool's virtual memory.
    _area: Area
    _vm: GrowableMemory[Any] | None

    if TYPE_CHECKING:

        def slab_of(self, buffer: Buffer) -> tuple[Buffer | None, int]: ...

    def ipc_export(self, buffer: Buffer | int) -> IpcExport:
        """Share a pooled device buffer with another process: its slab's IPC handle with
        the block's offset and size (``aml_core.ipc_open`` maps the slab once per process
        and returns a buffer at the block's address)."""
        area, buf, slab, offset = self._slab_to_export(buffer, IpcExporter, "shared by IPC handle")
        assert isinstance(area, IpcExporter)
        handle = area.ipc_export(slab).handle
        return IpcExport(buf, attrs.evolve(handle, size=buf.size, offset=offset))

    def export_dmabuf(self, buffer: Buffer | int) -> DmabufHandle:
        """Export a pooled device buffer as a dma-buf (docs/dmabuf.md): its slab's, from
        the area, with the block's offset in the slab added and the block's size; the
        handle keeps the block alive. AMLNotSupported for an expandable pool (its segment
        is no buffer of the area) and over an area without dma-buf export."""
        area, buf, slab, offset = self._slab_to_export(buffer, DmabufExporter, "exported as a dma-buf")
        assert isinstance(area, DmabufExporter)
        whole = area.export_dmabuf(slab)
        return attrs.evolve(whole, offset=whole.offset + offset, size=buf.size, buffer=buf)

    def _slab_to_export(
        self, buffer: Buffer | int, protocol: type, how: str
    ) -> tuple[Area, Buffer, Buffer, int]:
        """What an export of a pooled block starts from: the area (which must implement
        ``protocol``; an expandable pool's segment is no buffer of it), the live buffer,
        its slab and its offset there."""
        area = self._area
        if not isinstance(area, protocol) or self._vm is not None:
            raise AMLNotSupported(
                f"this pool's memory cannot be {how} ({type(area).__name__}"
                f"{', expandable' if self._vm is not None else ''})"
            )
        with self._lock:
            self._check_open()
            buf = self._lookup(buffer, None)
        slab, offset = self.slab_of(buf)
        assert slab is not None
        return area, buf, slab, offset

    def write(self, buffer: Buffer, data: bytes | bytearray | memoryview, offset: int = 0) -> None:
        """Copy host bytes into a pooled buffer: through the area's ``write`` (an area with
        DeviceCopies, as GPU areas) or, in an expandable pool, the area's copy."""
        copies, slab, base = self._slab_io(buffer)
        offset, n = checks.span(offset, checks.host_bytes(data), buffer.size)
        if copies is not None:
            assert slab is not None
            copies.write(slab, data, base + offset)
        elif n:
            assert self._vm is not None
            src, _, _ = address_of(data)
            self._vm.copy(buffer.device_ptr + offset, src, n)

    def read(self, buffer: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        """Copy bytes out of a pooled buffer (see :meth:`write`)."""
        copies, slab, base = self._slab_io(buffer)
        offset, n = checks.span(offset, size, buffer.size)
        if copies is not None:
            assert slab is not None
            return copies.read(slab, n, base + offset)
        out = bytearray(n)
        if n:
            assert self._vm is not None
            dst, _, _ = address_of(out)
            self._vm.copy(dst, buffer.device_ptr + offset, n)
        return bytes(out)

    def _slab_io(self, buffer: Buffer) -> tuple[DeviceCopies | None, Buffer | None, int]:
        """The area's copies (None in an expandable pool, which copies through its
        GrowableMemory), the buffer's slab and its offset there."""
        area = self._area
        if self._vm is not None:
            copies = None
        elif isinstance(area, DeviceCopies):
            copies = area
        else:
            raise AMLNotSupported(f"the pooled {type(area).__name__} has no write() or read()")
        return (copies, *self.slab_of(buffer))
