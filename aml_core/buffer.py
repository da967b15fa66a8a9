"""Buffer: one live mapping made by an :class:`~aml_core.area.Area`.

A buffer knows its address (``ptr``), ``size``, memory ``kind``, ``device`` and owning
``area``. It is a context manager (leaving the block unmaps it, or, if a view outlives
the block, detaches it: its memory is released when the last view and the buffer object
are gone) and speaks the zero-copy protocols its memory allows:

* host-accessible memory: the buffer protocol (``memoryview(buf)``,
  ``numpy.frombuffer(buf, ...)``) and DLPack on the host;
* device and managed memory: DLPack with the device the area names and, on CUDA and
  HIP, ``__cuda_array_interface__``.

Every view and DLPack consumer is counted (:attr:`Buffer.exports`); the area refuses to
unmap a buffer that is still viewed (:class:`~aml_core.errors.AMLBusyError`), so freed
memory is never reachable from Python.

A buffer dropped without munmap is freed when it is garbage collected (its views keep it
alive), through its area's munmap path: see :mod:`aml_core.area`, "Garbage collection".
Keep the Buffer while its address is in use. A Buffer class must not define ``__del__``,
and buffers cannot be copied (one mapping, one handle).
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self, TypeVar

from ._buffer import BufferBase
from .errors import AMLBusyError, AMLError, AMLValueError
from .specs import Kind, format_size

if TYPE_CHECKING:
    from .area import Area

__all__ = ["Buffer", "DLDeviceType", "native_as"]


class DLDeviceType(enum.IntEnum):
    """DLPack device types (``dlpack.h``)."""

    CPU = 1
    CUDA = 2
    CUDA_HOST = 3
    OPENCL = 4
    VULKAN = 7
    METAL = 8
    VPI = 9
    ROCM = 10
    ROCM_HOST = 11
    EXT_DEV = 12
    CUDA_MANAGED = 13
    ONEAPI = 14


class Buffer(BufferBase):
    """A mapping returned by ``area.mmap()``.

    Attributes (read-only: the area sets them when it makes the buffer, and frees the
    memory from them):

    ``ptr``
        address of the first byte (for MAPPED memory: the host address).
    ``device_ptr``
        the address devices use (differs from ``ptr`` only for mapped host memory on
        systems without unified addressing).
    ``size``
        size in bytes, as asked.
    ``kind``, ``device``, ``area``
        what the area allocated and where.
    ``exports``
        live buffer-protocol views and DLPack consumers.
    ``freed``
        True once unmapped.
    ``native``
        backend-specific data the area needs to free the mapping (a handle, a
        reference that keeps registered host memory alive...).
    """

    # The attributes and weak references live in BufferBase's C struct.
    __slots__ = ()

    if TYPE_CHECKING:  # BufferBase's read-only area and kind, with their precise types

        @property
        def area(self) -> Area: ...
        @property
        def kind(self) -> Kind: ...

    def free(self) -> None:
        """Unmap this buffer (``self.area.munmap(self)``)."""
        self.area.munmap(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        """Unmap the buffer; if it is still viewed (``np.frombuffer(buf)`` kept past the
        block), detach it as the area's close() does: it leaves the area's live mappings
        now and its memory is released when its last view (and this object) is gone. Never raises because
        of a live view, and never masks an exception raised inside the block."""
        if self.freed:
            return
        area = self.area
        try:
            if area.closed:  # close() already freed or detached it
                return
            if self.exports:
                area._detach_viewed(self)
                return
            try:
                area.munmap(self)
            except AMLBusyError:  # a view appeared since the test above
                area._detach_viewed(self)
        except AMLError as error:
            if exc_type is None:
                raise
            warnings.warn(
                f"could not unmap {self!r} while leaving its with block on {exc_type.__name__}: {error}",
                ResourceWarning,
                stacklevel=2,
            )

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        state = "freed" if self.freed else f"{self.exports} exports"
        dev = "" if self.device is None else f" device={self.device}"
        return (
            f"<aml Buffer {self.area.backend}:{self.kind.value}{dev} ptr=0x{self.ptr:x} "
            f"size={format_size(self.size)} {state}>"
        )

    # -- DLPack ------------------------------------------------------------------
    def __dlpack__(
        self,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule of the bytes (``uint8[size]``), never a copy.

        ``copy=True`` and a ``dl_device`` other than :meth:`__dlpack_device__` raise
        :class:`BufferError` (aml does not copy behind your back). ``stream`` is the
        consumer's stream: the area makes pending work visible to it first.
        """
        if copy:
            raise BufferError("aml buffers are exported without a copy; copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(
                f"this buffer lives on DLPack device {self.__dlpack_device__()}, not {tuple(dl_device)}"
            )
        self.area._dlpack_prepare(self, stream)
        versioned = max_version is not None and int(max_version[0]) >= 1
        return self._dlpack_capsule(versioned, False)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA Array Interface (version 3) of the bytes, for CUDA/HIP device,
        managed, pinned and mapped memory. Absent (AttributeError) elsewhere."""
        if self.freed:
            raise AMLValueError("this aml buffer was freed")
        cai = area_cuda_array_interface(self.area, self)
        if cai is None:
            raise AttributeError("__cuda_array_interface__")
        return cai


def area_cuda_array_interface(area: object, buffer: Buffer) -> dict[str, Any] | None:
    """The interface an area (a :class:`~aml_core.protocols.CudaArrayInterfaceArea`) gives
    ``buffer``, or None where the area has none. A method lookup, not ``isinstance`` against
    the runtime-checkable protocol: that costs microseconds, and consumers probe every buffer
    they are given (ucxx does, per message, with ``getattr(obj, "__cuda_array_interface__",
    None)``), so host buffers must answer "absent" cheaply."""
    method: Callable[[Buffer], dict[str, Any] | None] | None = getattr(area, "_cuda_array_interface", None)
    return method(buffer) if method is not None else None


_N = TypeVar("_N")


def native_as(buffer: BufferBase, cls: type[_N]) -> _N:
    """A buffer's :attr:`~Buffer.native` record, checked to be the type its area made
    (``cls``): an area reads its own records through this, typed, and a record of another
    kind is an AML error, never an attribute error deep in a free."""
    native = buffer.native
    if not isinstance(native, cls):
        raise AMLValueError(
            f"this buffer's native record is a {type(native).__name__}, not the {cls.__name__} its area makes"
        )
    return native
