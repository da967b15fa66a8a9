"""Shared GPU logic: AML's area flags, managed memory, IPC, virtual memory and streams,
written once over a :class:`~aml_core.gpu.runtime.GpuRuntime` that each GPU backend
(aml-cuda, aml-hip) implements.

Names are imported from their submodules on first use, so that a plugin module can
import :mod:`aml_core.gpu.plugin` without loading the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .area import GpuAllocation, GpuArea, GpuMmapOptions
    from .backend import GpuBackend, device_capabilities
    from .flags import GpuFlags, check_flags, flags_for_kind, kind_of_flags
    from .ipc import IpcExport, IpcHandle, IpcImportArea
    from .managed import CPU, INVALID, Advice, AttachFlags, CoherencyMode, LocationType, RangeAttribute
    from .runtime import AllocationProperties, GpuRuntime, PointerAttributes, RuntimeTraits
    from .stream import Stream, as_stream_handle
    from .vmm import Access, GrowableBuffer, Physical, Reservation, VirtualMemory

_WHERE = {
    "GpuAllocation": "area",
    "GpuArea": "area",
    "GpuMmapOptions": "area",
    "GpuBackend": "backend",
    "device_capabilities": "backend",
    "GpuFlags": "flags",
    "check_flags": "flags",
    "flags_for_kind": "flags",
    "kind_of_flags": "flags",
    "IpcExport": "ipc",
    "IpcHandle": "ipc",
    "IpcImportArea": "ipc",
    "CPU": "managed",
    "INVALID": "managed",
    "Advice": "managed",
    "AttachFlags": "managed",
    "CoherencyMode": "managed",
    "LocationType": "managed",
    "RangeAttribute": "managed",
    "AllocationProperties": "runtime",
    "GpuRuntime": "runtime",
    "PointerAttributes": "runtime",
    "RuntimeTraits": "runtime",
    "Stream": "stream",
    "as_stream_handle": "stream",
    "Access": "vmm",
    "GrowableBuffer": "vmm",
    "Physical": "vmm",
    "Reservation": "vmm",
    "VirtualMemory": "vmm",
}

__all__ = [
    "Access",
    "Advice",
    "AllocationProperties",
    "AttachFlags",
    "CPU",
    "CoherencyMode",
    "GpuAllocation",
    "GpuArea",
    "GpuBackend",
    "GpuFlags",
    "GpuMmapOptions",
    "GpuRuntime",
    "GrowableBuffer",
    "INVALID",
    "IpcExport",
    "IpcHandle",
    "IpcImportArea",
    "LocationType",
    "Physical",
    "PointerAttributes",
    "RangeAttribute",
    "Reservation",
    "RuntimeTraits",
    "Stream",
    "VirtualMemory",
    "as_stream_handle",
    "check_flags",
    "device_capabilities",
    "flags_for_kind",
    "kind_of_flags",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'aml_core.gpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
