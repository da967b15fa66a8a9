"""What an area may offer beyond mmap and munmap, as protocols the core calls.

:class:`~aml_core.pool.Pool` works over any :class:`~aml_core.area.Area`; where the area
offers more, the pool offers it too. It asks through these protocols (structural:
an area implements one by having its methods, as :class:`~aml_core.gpu.GpuArea`,
:class:`~aml_core.gpu.VirtualMemory` and the backends' areas do), never by testing for
GPU types or probing attributes:

==========================  ===================================================  =========================
protocol                    what the area offers                                 the pool's use
==========================  ===================================================  =========================
:class:`StreamOrderedArea`  the stream and event operations of its runtime       ``mmap(n, stream=s)``,
                                                                                 ``munmap(b, stream=s)``
:class:`DeviceCopies`       ``write`` / ``read``: host bytes in and out of a     ``Pool.write`` / ``read``
                            buffer of the area (any kind of memory)
:class:`IpcExporter`        ``ipc_export``: a buffer's handle for another        ``Pool.ipc_export``
                            process
:class:`DmabufExporter`     ``export_dmabuf``: a buffer as a dma-buf fd (for     ``Pool.export_dmabuf``
                            RDMA registration)
:class:`GrowableMemory`     a reserved address range, backed chunk by chunk      ``pool(area,
                            (virtual memory)                                     expandable=True)``
:class:`PoolBinding`        the options and device a pool's slabs use (an area   every pool
                            of "the current device" binds the pool to one)
:class:`MemoryCapacity`     the total and free bytes of the memory it maps       ``set_limit(fraction=)``,
                            (a device, the NUMA nodes of a host area)            the ENOMEM message
==========================  ===================================================  =========================

and a buffer asks its area through :class:`CudaArrayInterfaceArea` for its
``__cuda_array_interface__`` (a pool, for the area below it).

Each is ``runtime_checkable``: ``isinstance(area, DeviceCopies)`` says whether an area has
the methods (not what they accept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from .buffer import Buffer
    from .dmabuf import DmabufHandle
    from .ipc import IpcExport

__all__ = [
    "AddressRange",
    "CudaArrayInterfaceArea",
    "DeviceCopies",
    "DmabufExporter",
    "GrowableMemory",
    "IpcExporter",
    "MemoryCapacity",
    "PoolBinding",
    "StreamOrderedArea",
    "StreamOrdering",
]


class StreamOrdering(Protocol):
    """Stream and event operations on native handles (ints; 0 is the default stream).

    Optional, found by name (:func:`aml_core.stream.native_streams`):
    ``native_streams()``, the same calls as C function pointers (a
    :class:`~aml_core.stream.NativeStreams`, or None), which a pool's kernel then calls
    with no Python (a framework hook's hand-over needs no GIL); ``event_query(event) ->
    bool`` (True: the work recorded before it is done), with which a pool asks whether a
    stream is idle instead of synchronizing it."""

    def stream_synchronize(self, stream: int) -> None:
        """Wait until the work queued on ``stream`` is done."""

    def event_create(self) -> int:
        """A new event."""

    def event_destroy(self, event: int) -> None:
        """Destroy an event (on failure it stays: a retry destroys it)."""

    def event_record(self, event: int, stream: int) -> None:
        """Record ``event`` at the current end of ``stream``'s work."""

    def stream_wait_event(self, stream: int, event: int) -> None:
        """Make later work on ``stream`` wait for ``event`` (no host wait)."""


@runtime_checkable
class StreamOrderedArea(Protocol):
    """An area whose memory may be used in a stream's order (a GPU area)."""

    def stream_ordering(self) -> StreamOrdering:
        """The stream operations of the area's runtime;
        :class:`~aml_core.errors.AMLNotSupported` (with the reason) when it has none."""


@runtime_checkable
class DeviceCopies(Protocol):
    """An area that copies host bytes into and out of its buffers, whatever memory they
    are (device memory included)."""

    def write(self, buffer: Buffer, data: bytes | bytearray | memoryview, offset: int = 0) -> None:
        """Copy ``data`` into ``buffer`` at ``offset``."""

    def read(self, buffer: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        """``size`` bytes (default: to the end) of ``buffer`` from ``offset``."""


@runtime_checkable
class IpcExporter(Protocol):
    """An area whose buffers can be shared with another process
    (docs/backend-authoring.md#ipc)."""

    def ipc_export(self, buffer: Buffer | int) -> IpcExport:
        """Export a live buffer of the area (or its base pointer)."""


@runtime_checkable
class DmabufExporter(Protocol):
    """An area whose buffers can be exported as Linux dma-buf file descriptors
    (docs/dmabuf.md, :mod:`aml_core.dmabuf`)."""

    def export_dmabuf(self, buffer: Buffer | int) -> DmabufHandle:
        """Export a live buffer of the area (or its base pointer): a new fd, the caller's;
        :class:`~aml_core.errors.AMLNotSupported` with the reason where the area's memory,
        driver or device cannot."""


class AddressRange(Protocol):
    """A reserved range of addresses."""

    @property
    def ptr(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def freed(self) -> bool: ...


R = TypeVar("R", bound=AddressRange)


@runtime_checkable
class GrowableMemory(Protocol[R]):
    """Memory that grows in place: a reserved range of addresses into which memory is
    mapped chunk by chunk at the end, and unmapped again from the end (virtual memory)."""

    def granularity(self) -> int:
        """The size every reservation and chunk is a multiple of."""

    def reserve(self, size: int) -> R:
        """Reserve ``size`` bytes of addresses (no memory yet)."""

    def address_free(self, reservation: R) -> None:
        """Give a reservation with no chunk left back."""

    def commit(self, ptr: int, size: int) -> None:
        """Back ``[ptr, ptr + size)`` of a reservation with new memory, readable and
        writable by the area's device; on failure nothing stays mapped or allocated."""

    def unmap(self, ptr: int, size: int) -> None:
        """Give back a chunk :meth:`commit` mapped (its exact address and size)."""

    def copy(self, dst: int, src: int, size: int) -> None:
        """Copy ``size`` bytes between host memory and committed memory, by address."""

    def dlpack_device(self) -> tuple[int, int]:
        """The DLPack device (type, id) of the committed memory."""


@runtime_checkable
class PoolBinding(Protocol):
    """An area that decides the options and the device of a pool over it (by default
    a pool passes its ``options`` through and is on the area's device)."""

    def _pool_binding(self, options: Any) -> tuple[Any, int | None]:
        """The mmap options a pool passes for every slab, and the device its memory is on."""


@runtime_checkable
class MemoryCapacity(Protocol):
    """An area that can tell how much memory its buffers come from: a pool's limit as a
    fraction of the total (``Pool.set_limit(fraction=)``) and the free bytes its ENOMEM
    names. Both answer None where they cannot tell and never raise for that."""

    def total_memory(self, device: int | None = None) -> int | None:
        """The bytes of the memory the area maps on ``device`` (a pool's bound device;
        None: the area's own): a GPU's memory, the NUMA nodes' of a host area."""

    def free_memory(self, device: int | None = None) -> int | None:
        """The bytes of that memory free now (for every process, as the driver or the
        kernel counts them)."""


@runtime_checkable
class CudaArrayInterfaceArea(Protocol):
    """An area whose buffers may speak ``__cuda_array_interface__`` (CUDA and HIP memory:
    device, managed, pinned, mapped)."""

    def _cuda_array_interface(self, buffer: Buffer) -> dict[str, Any] | None:
        """The interface (version 3) of a buffer of the area, or None where it has none."""
