"""Shared GPU logic: AML's area flags, managed memory, IPC, virtual memory and streams,
written once over a :class:`~aml_core.gpu.runtime.GpuRuntime` that each GPU backend
(aml-cuda, aml-hip) implements."""

from .area import GpuAllocation, GpuArea, GpuMmapOptions
from .backend import GpuBackend, device_capabilities
from .flags import GpuFlags, check_flags, flags_for_kind, kind_of_flags
from .ipc import IpcExport, IpcHandle, IpcImportArea
from .managed import CPU, INVALID, Advice, AttachFlags, CoherencyMode, LocationType, RangeAttribute
from .runtime import AllocationProperties, GpuRuntime, PointerAttributes, RuntimeTraits
from .stream import Stream, as_stream_handle
from .vmm import Access, GrowableBuffer, Physical, Reservation, VirtualMemory

__all__ = [
    "CPU",
    "INVALID",
    "Access",
    "Advice",
    "AllocationProperties",
    "AttachFlags",
    "CoherencyMode",
    "GpuAllocation",
    "GpuArea",
    "GpuBackend",
    "GpuFlags",
    "GpuMmapOptions",
    "GpuRuntime",
    "GrowableBuffer",
    "IpcExport",
    "IpcHandle",
    "IpcImportArea",
    "LocationType",
    "PointerAttributes",
    "RangeAttribute",
    "Reservation",
    "RuntimeTraits",
    "Stream",
    "Physical",
    "VirtualMemory",
    "as_stream_handle",
    "check_flags",
    "device_capabilities",
    "flags_for_kind",
    "kind_of_flags",
]
