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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self, TypeVar

from ._buffer import BufferBase
from .errors import AMLValueError
from .specs import Kind

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


if TYPE_CHECKING:

    class Buffer(BufferBase):
        """A mapping returned by ``area.mmap()`` (the compiled ``aml_core._buffer.Buffer``,
        ``aml_core/_buffer_public.pxi``: its docstrings; this is its typed interface)."""

        @property
        def area(self) -> Area: ...
        @property
        def kind(self) -> Kind: ...
        def free(self) -> None: ...
        def __enter__(self) -> Self: ...
        def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None: ...
        def __len__(self) -> int: ...
        def __dlpack__(
            self,
            *,
            stream: int | Any | None = None,
            max_version: tuple[int, int] | None = None,
            dl_device: tuple[int, int] | None = None,
            copy: bool | None = None,
        ) -> Any: ...
        @property
        def __cuda_array_interface__(self) -> dict[str, Any]: ...

else:
    # Compiled (a free list, no Python subclass to allocate and finalize): an area's
    # mmap makes it in C (docs/kernel.md, "The buffer module's files").
    from ._buffer import Buffer


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
