"""aml-hip: AML's HIP areas (``aml_area_hip_*``), HIP managed memory, HIP IPC and
HIP virtual memory, over ``libamdhip64`` through ctypes.

Quick start::

    import aml_hip
    from aml_hip import HipFlags

    area = aml_hip.create(0, HipFlags.ALLOC_UNIFIED | HipFlags.ALLOC_GLOBAL)  # aml_area_hip_create
    buf = area.mmap(1 << 20)                       # hipMallocManaged(..., hipMemAttachGlobal)
    area.advise(buf, aml_hip.Advice.SET_READ_MOSTLY, 0)
    area.prefetch(buf, 0)
    area.munmap(buf)
    aml_hip.destroy(area)                          # aml_area_hip_destroy (= area.close())

Importing this package loads no native library: the library is loaded on first use
(``libamdhip64.so.7``, ``.so.6``, ``.so.5``; ``AML_HIP_LIBRARY`` names another file).
Everything but :func:`get_runtime` and :data:`BACKEND` is the same API as aml-cuda: the
area logic is :mod:`aml_core.gpu`, written once for both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.buffer import Buffer
from aml_core.descriptor import ProbeResult
from aml_core.errors import AMLNotSupported
from aml_core.gpu import (
    CPU,
    INVALID,
    Access,
    Advice,
    AttachFlags,
    CoherencyMode,
    GpuArea,
    GpuBackend,
    GpuFlags,
    GpuMmapOptions,
    IpcExport,
    IpcHandle,
    RangeAttribute,
    Stream,
    VirtualMemory,
)

if TYPE_CHECKING:
    from .runtime import HipRuntime

__version__ = "0.1.0"

__all__ = [
    "BACKEND",
    "CPU",
    "INVALID",
    "Access",
    "Advice",
    "AttachFlags",
    "CoherencyMode",
    "HipArea",
    "HipFlags",
    "HipMmapOptions",
    "IpcExport",
    "IpcHandle",
    "RangeAttribute",
    "Stream",
    "VirtualMemory",
    "create",
    "default_area",
    "destroy",
    "ipc_close",
    "ipc_open",
    "probe",
    "get_runtime",
    "stream",
    "unified_area",
    "virtual_memory",
]

#: ``AML_AREA_HIP_FLAG_*`` with AML's names and values: DEFAULT 0, ALLOC_HOST 1,
#: ALLOC_UNIFIED 2, ALLOC_MAPPED 4, ALLOC_GLOBAL 8 (the shared :class:`aml_core.gpu.GpuFlags`).
HipFlags = GpuFlags
#: A HIP area (``struct aml_area`` of ``aml_area_hip_create``).
HipArea = GpuArea
#: ``struct aml_area_hip_mmap_options``: ``device`` and ``ptr``.
HipMmapOptions = GpuMmapOptions


def _load_runtime() -> HipRuntime:
    from .library import load
    from .runtime import HipRuntime

    return HipRuntime(load())


#: The HIP backend (lazy: the library is loaded on first use; ``BACKEND.reset()``
#: forgets it, e.g. after changing ``AML_HIP_LIBRARY``).
BACKEND = GpuBackend("hip", _load_runtime, description="AMD GPUs through HIP (libamdhip64, ctypes)")


def create(device: int = -1, flags: int | GpuFlags = GpuFlags.DEFAULT) -> GpuArea:
    """``aml_area_hip_create(&area, device, flags)``: a new area; close it (or
    :func:`destroy` it) when done.

    ``device`` is a device index, or negative for the current device at mmap time.
    Errors (docs/aml-contract.md#hip-area): the device count cannot be read → FAILURE
    (:class:`~aml_core.errors.AMLFailure`); ``device`` >= the device count → EINVAL;
    unknown flag bits → EINVAL.
    """
    return BACKEND.create(device, flags)


def destroy(area: GpuArea) -> None:
    """``aml_area_hip_destroy``: frees whatever the area still holds. Idempotent."""
    area.close()


def default_area() -> GpuArea:
    """``aml_area_hip``: device memory on the current device, visible by a single
    device, not mapped on the host (shared; do not close it)."""
    return BACKEND.default_area()


def unified_area() -> GpuArea:
    """``aml_area_hip_unified``: managed memory on the current device (shared)."""
    return BACKEND.unified_area()


def ipc_open(handle: IpcHandle) -> Buffer:
    """Open an IPC handle exported by another process (``hipIpcOpenMemHandle``): maps the device
    memory with lazy peer access; opening the same handle again returns the same
    buffer (close it as many times). Close before the exporter frees."""
    buffer: Buffer = BACKEND.ipc_open(handle)
    return buffer


def ipc_close(buffer: Buffer) -> None:
    """Close one open of an imported buffer (``hipIpcCloseMemHandle`` on the last)."""
    BACKEND.ipc_close(buffer)


def virtual_memory(device: int = 0) -> VirtualMemory:
    """HIP virtual memory of a device (reserve, create, map, access, export/import a
    POSIX fd, retain, properties, granularity); close it when done."""
    return BACKEND.virtual_memory(device)


def stream(*, non_blocking: bool = False) -> Stream:
    """A new HIP stream (``hipStreamCreateWithFlags``); close it when done."""
    return BACKEND.stream(non_blocking=non_blocking)


def probe() -> ProbeResult:
    """Whether HIP is usable here, and why not (never raises)."""
    return BACKEND.probe()


def get_runtime() -> HipRuntime:
    """The loaded :class:`~aml_hip.runtime.HipRuntime` (loads the library)."""
    from .runtime import HipRuntime

    rt = BACKEND.runtime
    if not isinstance(rt, HipRuntime):  # pragma: no cover - by construction
        raise AMLNotSupported("the HIP backend's runtime is not a HipRuntime")
    return rt
