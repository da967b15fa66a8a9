"""dma-buf export: a buffer's memory as a Linux dma-buf file descriptor, the form RDMA NICs
(``ibv_reg_dmabuf_mr``), UCX and libfabric register (docs/dmabuf.md).

The contract, which every area that offers :class:`~aml_core.protocols.DmabufExporter`
keeps:

* ``area.export_dmabuf(buffer)`` takes a live buffer of the area (the Buffer or its base
  pointer) and returns a :class:`DmabufHandle`: ``fd``, a new dma-buf file descriptor,
  and the buffer's bytes at ``[offset, offset + size)`` of it (the driver exports whole
  pages, or a pooled block's whole slab, so ``offset`` may be non-zero and the dma-buf
  larger than ``size``).
* The fd is the caller's: close it (``os.close(handle.fd)``) when the dma-buf is no
  longer needed. Closing it never frees the memory, and the buffer stays usable.
* The handle keeps its buffer alive (as an :class:`~aml_core.ipc.IpcExport` does): a
  buffer dropped while its handle is kept is not freed by the garbage collector. The
  buffer may still be freed explicitly (``munmap``, a pool's ``free``): as with IPC,
  free only after every user of the dma-buf is done (the NIC's memory region
  deregistered, every importer's fd closed); aml does not refuse the free, and what a
  device still holding the dma-buf sees afterwards is its driver's matter.
* Areas that cannot export raise :class:`~aml_core.errors.AMLNotSupported` with the
  reason; :func:`export_dmabuf` says so for the areas without the method (host memory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from . import checks
from .buffer import Buffer
from .errors import AMLNotSupported, AMLTypeError
from .protocols import DmabufExporter
from .specs import Kind

if TYPE_CHECKING:
    from .area import Area

__all__ = ["DmabufHandle", "export_dmabuf", "export_from"]


def _fd(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    checks.fd(value, "the dma-buf fd")


def _offset(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    checks.size(value, "the dma-buf offset", zero=True)


def _size(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    checks.size(value, "the dma-buf size")


@attrs.frozen
class DmabufHandle:
    """A buffer exported as a dma-buf: the file descriptor (the caller's to close), and
    where the buffer's bytes are in it (``offset``, ``size``: what ``ibv_reg_dmabuf_mr``
    takes as its offset and length). ``buffer`` is the exported buffer, kept alive by the
    handle (a pooled block for a pool's export)."""

    fd: int = attrs.field(validator=_fd)
    offset: int = attrs.field(validator=_offset)
    size: int = attrs.field(validator=_size)
    buffer: Buffer = attrs.field(eq=False, repr=False)


def export_dmabuf(buffer: Buffer) -> DmabufHandle:
    """Export ``buffer`` as a dma-buf through its area (``buffer.area.export_dmabuf``);
    :class:`~aml_core.errors.AMLNotSupported` with the reason where its area cannot (host
    memory, a backend without dma-buf export)."""
    if not isinstance(buffer, Buffer):
        raise AMLTypeError(f"export_dmabuf takes an aml Buffer, not {type(buffer).__name__}")
    area = buffer.area
    if isinstance(area, DmabufExporter):
        return area.export_dmabuf(buffer)
    raise AMLNotSupported(
        f"{type(area).__name__} ({area.backend} backend, {area.kind.value} memory) cannot export a dma-buf: "
        "dma-bufs are made of GPU device memory (aml-cuda, aml-hsa, aml-ze with dmabuf=True)"
    )


#: A backend's native export: (ptr, size, device) -> (fd, offset of ptr in the dma-buf).
NativeExport = Callable[[int, int, int], tuple[int, int]]


def export_from(area: Area, buffer: Buffer | int, native: NativeExport) -> DmabufHandle:
    """``area.export_dmabuf(buffer)`` of a device area, written once: the area is open and
    of device memory, the buffer one of its live ones; ``native`` makes the fd (a runtime's
    :meth:`~aml_core.gpu.runtime.IpcOps.dmabuf_export`, which checks what the library
    answered)."""
    if area.kind is not Kind.DEVICE:
        raise AMLNotSupported(f"dma-buf export is of device memory; this is a {area.kind.value} area")
    with area._lock:  # as an IPC export: the buffer cannot be freed meanwhile
        area._check_open()
        buf = area._lookup(buffer, None)
        fd, offset = native(buf.ptr, buf.size, buf.device or 0)
    return DmabufHandle(fd, offset, buf.size, buf)
