"""Copies between host bytes and an area's buffers: ``write`` and ``read`` of the GPU
areas (:class:`~aml_core.gpu.area.GpuArea`, :class:`~aml_core.gpu.ipc.IpcImportArea`),
written once over the runtime's ``memcpy`` (the :class:`~aml_core.protocols.DeviceCopies`
a pool calls)."""

from __future__ import annotations

import abc

from .. import checks
from .._buffer import address_of
from ..area import Area
from ..buffer import Buffer

__all__ = ["CopyingArea"]


class CopyingArea(Area):
    """An area whose buffers (any kind of memory) are written and read through
    :meth:`_memcpy` (the runtime's, which reaches device memory too)."""

    def write(self, buffer: Buffer, data: bytes | bytearray | memoryview, offset: int = 0) -> None:
        """Copy host bytes into a buffer of this area (any kind)."""
        self._lookup(buffer, None)
        offset, n = checks.span(offset, checks.host_bytes(data), buffer.size)
        src, _, _ = address_of(data)
        if n:
            self._memcpy(buffer.device_ptr + offset, src, n)
            self._written()

    def read(self, buffer: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        """Copy bytes out of a buffer of this area (any kind)."""
        self._lookup(buffer, None)
        offset, n = checks.span(offset, size, buffer.size)
        out = bytearray(n)
        if n:
            dst, _, _ = address_of(out)
            self._memcpy(dst, buffer.device_ptr + offset, n)
        return bytes(out)

    @abc.abstractmethod
    def _memcpy(self, dst: int, src: int, size: int) -> None:
        """Copy ``size`` bytes (the runtime's memcpy: host and device addresses alike)."""

    def _written(self) -> None:
        """After :meth:`write`'s copy (default: nothing; the import area waits for it)."""
