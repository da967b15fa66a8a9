"""Shared GPU logic: AML's area flags, managed memory, IPC, virtual memory and streams,
written once over a :class:`~aml_core.gpu.runtime.Runtime` and its capability groups, which each GPU backend
(aml-cuda, aml-hip) implements.

Names are imported from their submodules on first use, so that a plugin module can
import :mod:`aml_core.gpu.plugin` without loading the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .area import GpuAllocation, GpuArea, GpuMmapOptions, GpuMmapOptionsDict
    from .backend import GpuBackend
    from .flags import AllocMode, GpuFlags, check_flags, flags_for_kind, kind_of_flags, mode_of_flags
    from .ipc import IpcExport, IpcHandle, IpcImportArea
    from .managed import CPU, INVALID, Advice, AttachFlags, CoherencyMode, LocationType, RangeAttribute
    from .runtime import (
        AllocationOps,
        AllocationProperties,
        Group,
        IpcOps,
        ManagedOps,
        PeerOps,
        PointerAttributes,
        Runtime,
        RuntimeTraits,
        StreamOps,
        StreamOrderedOps,
        VirtualMemoryOps,
        capabilities,
        device_capabilities,
    )
    from .stream import Stream, as_stream_handle
    from .vmm import Access, GrowableBuffer, Physical, Reservation, VirtualMemory

_WHERE = {
    "GpuAllocation": "area",
    "GpuArea": "area",
    "GpuMmapOptions": "area",
    "GpuMmapOptionsDict": "area",
    "GpuBackend": "backend",
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
    "AllocationOps": "runtime",
    "Group": "groups",
    "IpcOps": "runtime",
    "ManagedOps": "runtime",
    "PeerOps": "runtime",
    "Runtime": "runtime",
    "StreamOps": "runtime",
    "StreamOrderedOps": "runtime",
    "VirtualMemoryOps": "runtime",
    "capabilities": "groups",
    "device_capabilities": "runtime",
    "AllocMode": "flags",
    "mode_of_flags": "flags",
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
    "GpuMmapOptionsDict",
    "Runtime",
    "Group",
    "AllocationOps",
    "ManagedOps",
    "PeerOps",
    "StreamOps",
    "StreamOrderedOps",
    "IpcOps",
    "VirtualMemoryOps",
    "capabilities",
    "AllocMode",
    "mode_of_flags",
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


__getattr__, __dir__ = lazy_exports(__name__, {name: f".{module}" for name, module in _WHERE.items()})
