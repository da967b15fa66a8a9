"""aml-cuda: aml's backend for NVIDIA GPUs (AML's CUDA area, after ``aml_area_cuda``).

Quick start::

    import aml_cuda
    from aml_cuda import CudaFlags

    with aml_cuda.create(0, CudaFlags.ALLOC_UNIFIED | CudaFlags.ALLOC_GLOBAL) as area:
        buf = area.mmap(1 << 20)
        area.prefetch(buf, 0)                 # managed memory to device 0
        ...
        area.munmap(buf)

Public API: ``create(device, flags)``, ``CudaFlags`` (DEFAULT, ALLOC_HOST,
ALLOC_UNIFIED, ALLOC_MAPPED, ALLOC_GLOBAL), ``default_area()``, ``unified_area()``,
``ipc_open(handle)`` / ``ipc_close(buffer)``, ``virtual_memory(device)``, ``stream()``,
``probe()``, ``pointer_attributes(ptr)``, ``get_runtime()``, ``BACKEND`` and the
managed-memory, IPC and virtual-memory types of :mod:`aml_core.gpu`.

Importing this package is cheap: the API (and aml_core.gpu) is loaded on first use,
cuda-bindings only when the runtime is first needed, so that the registry can import
the plugin on machines without CUDA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ._api import (
        BACKEND,
        CPU,
        INVALID,
        MIN_BINDINGS,
        Access,
        Advice,
        AllocationProperties,
        AttachFlags,
        CudaArea,
        CudaFlags,
        CudaMmapOptions,
        GrowableBuffer,
        IpcExport,
        IpcHandle,
        LocationType,
        Physical,
        PointerAttributes,
        RangeAttribute,
        Reservation,
        Stream,
        VirtualMemory,
        create,
        default_area,
        get_runtime,
        ipc_close,
        ipc_open,
        load_runtime,
        pointer_attributes,
        probe,
        stream,
        unified_area,
        virtual_memory,
    )

__all__ = [
    "BACKEND",
    "CPU",
    "INVALID",
    "MIN_BINDINGS",
    "Access",
    "Advice",
    "AllocationProperties",
    "AttachFlags",
    "CudaArea",
    "CudaFlags",
    "CudaMmapOptions",
    "GrowableBuffer",
    "IpcExport",
    "IpcHandle",
    "LocationType",
    "Physical",
    "PointerAttributes",
    "RangeAttribute",
    "Reservation",
    "Stream",
    "VirtualMemory",
    "__version__",
    "create",
    "default_area",
    "get_runtime",
    "ipc_close",
    "ipc_open",
    "load_runtime",
    "pointer_attributes",
    "probe",
    "stream",
    "unified_area",
    "virtual_memory",
]

_LAZY = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import _api

        value = getattr(_api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'aml_cuda' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
