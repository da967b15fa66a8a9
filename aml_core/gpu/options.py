"""The options and records of a GPU area's mappings: :class:`GpuMmapOptions` (AML's
``struct aml_area_hip_mmap_options``; the stream is mmap's argument), its mapping form
:class:`GpuMmapOptionsDict`, the record :class:`GpuAllocation` a buffer is freed by, and
the caller's host memory an ALLOC_MAPPED area registers (:func:`host_memory`).
:mod:`aml_core.gpu.area` re-exports them."""

from __future__ import annotations

from typing import Any, TypedDict

import attrs

from .. import checks
from .._buffer import address_of
from ..errors import AMLTypeError, AMLValueError
from ..specs import format_size
from .flags import AllocMode

__all__ = ["GpuAllocation", "GpuMmapOptions", "GpuMmapOptionsDict", "StreamOrdered", "host_memory"]


def _opt_device(value: object) -> int | None:
    return None if value is None else checks.c_int(value, "options.device")


@attrs.frozen
class StreamOrdered:
    """The ``keep`` of a stream-ordered device allocation: the stream it was made on,
    which frees it unless munmap names another."""

    stream: int


@attrs.frozen
class GpuMmapOptions:
    """``struct aml_area_hip_mmap_options``: a device that overrides the area's
    (negative: the current device), and host memory to map (ALLOC_MAPPED without
    ALLOC_HOST): an int address or any writable buffer-protocol object (its size is
    checked and it is kept alive while mapped)."""

    device: int | None = attrs.field(default=None, converter=_opt_device)
    ptr: Any = None
    #: Deprecated (removed in the next minor version): ``mmap(size, stream=s)``.
    stream: object = None


class GpuMmapOptionsDict(TypedDict, total=False):
    """:class:`GpuMmapOptions` as a mapping (``area.mmap(n, {"device": 1})``), typed: an
    unknown key is a type error."""

    device: int | None
    ptr: object
    #: Deprecated (removed in the next minor version): ``mmap(size, stream=s)``.
    stream: object


@attrs.frozen
class GpuAllocation:
    """What a GPU buffer needs to be freed: how it was allocated, the native size,
    and (registered memory) the object kept alive."""

    mode: AllocMode
    alloc_size: int
    keep: Any = None

    @property
    def stream_ordered(self) -> bool:
        """Allocated in a stream's order (device memory whose ``keep`` names the stream):
        freed with cudaFreeAsync/hipFreeAsync."""
        return self.mode is AllocMode.DEVICE and self.keep is not None


def host_memory(ptr: object, size: int) -> tuple[int, Any]:
    """The address of the caller's host memory and what must stay alive while mapped."""
    if isinstance(ptr, bool):
        raise AMLTypeError("options.ptr must be an address or a writable buffer, not bool")
    if isinstance(ptr, int):
        if ptr <= 0:
            raise AMLValueError("options.ptr must be a non-NULL address")
        return ptr, None
    try:
        view = memoryview(ptr)  # type: ignore[arg-type]
    except TypeError:
        raise AMLTypeError(
            f"options.ptr must be an int address or a buffer-protocol object, not {type(ptr).__name__}"
        ) from None
    if view.readonly:
        view.release()
        raise AMLValueError("options.ptr is read-only memory; mapped memory must be writable")
    if not view.contiguous:
        view.release()
        raise AMLValueError("options.ptr must be contiguous memory")
    if view.nbytes < size:
        n = view.nbytes
        view.release()
        raise AMLValueError(
            f"options.ptr holds {format_size(n, exact=True)}, "
            f"fewer than the {format_size(size, exact=True)} to map"
        )
    addr, _, _ = address_of(view)
    return addr, view
