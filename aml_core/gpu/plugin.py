"""What a GPU backend's plugin module needs: its kinds, its capabilities and a descriptor
whose probe, area factory and IPC opener load the backend lazily.

Cheap to import (no runtime, no area code): a plugin module is imported by every
``aml_core.backends()`` call, GPU or not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..descriptor import BackendDescriptor, ProbeResult
from ..specs import Capability, Kind

if TYPE_CHECKING:
    from .backend import GpuBackend

__all__ = ["GPU_CAPABILITIES", "GPU_KINDS", "GPU_PRIORITY", "lazy_descriptor"]

#: Above the host backend (0): on a node with a GPU, device, pinned, managed and mapped
#: memory come from the GPU backend.
GPU_PRIORITY = 100

GPU_KINDS = frozenset({Kind.DEVICE, Kind.HOST, Kind.MANAGED, Kind.MAPPED})

#: What any GPU backend offers; each device's probe adds what depends on the device
#: (concurrent managed access, pageable access).
GPU_CAPABILITIES = (
    Capability.MANAGED
    | Capability.VIRTUAL_MEMORY
    | Capability.IPC
    | Capability.PINNED
    | Capability.MAPPED
    | Capability.BUFFER_PROTOCOL
    | Capability.DLPACK
    | Capability.CUDA_ARRAY_INTERFACE
)


def lazy_descriptor(
    name: str,
    description: str,
    backend: Callable[[], GpuBackend],
    *,
    priority: int = GPU_PRIORITY,
    capabilities: Capability = GPU_CAPABILITIES,
) -> BackendDescriptor:
    """A descriptor whose callables import the backend (``backend()``) only when the
    registry probes it, builds an area or opens an IPC handle."""

    def probe() -> ProbeResult:
        return backend().probe()

    def create_area(kind: Kind, device: int | None = None, **options: Any) -> Any:
        return backend().create_area(kind, device, **options)

    def ipc_open(handle: Any) -> Any:
        return backend().ipc_open(handle)

    return BackendDescriptor(
        name=name,
        priority=priority,
        kinds=GPU_KINDS,
        probe=probe,
        create_area=create_area,
        capabilities=capabilities,
        description=description,
        ipc_open=ipc_open,
    )
