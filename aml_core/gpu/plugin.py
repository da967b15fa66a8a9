"""What a GPU backend's plugin module needs: its kinds, its capabilities (derived from the
capability groups its runtime provides), the names its package exports, and a descriptor
whose probe, area factory and IPC opener load the backend lazily.

Cheap to import (no runtime, no area code): a plugin module is imported by every
``aml_core.backends()`` call, GPU or not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..descriptor import BackendDescriptor, ProbeResult
from ..specs import Capability, Kind
from .groups import Group, capabilities

if TYPE_CHECKING:
    from .backend import GpuBackend

__all__ = [
    "GPU_CAPABILITIES",
    "GPU_FUNCTIONS",
    "GPU_GROUPS",
    "GPU_HOOKS",
    "GPU_INTERFACES",
    "GPU_KINDS",
    "GPU_METHODS",
    "GPU_PEER_METHODS",
    "GPU_PRIORITY",
    "GPU_TYPES",
    "GPU_VMM_TYPES",
    "gpu_exports",
    "lazy_descriptor",
]

#: Above the host backend (0): on a node with a GPU, device, pinned, managed and mapped
#: memory come from the GPU backend.
GPU_PRIORITY = 100

GPU_KINDS = frozenset({Kind.DEVICE, Kind.HOST, Kind.MANAGED, Kind.MAPPED})

#: The groups the CUDA and HIP runtimes provide (a library may lack one: the probe says).
GPU_GROUPS = frozenset(Group)
#: The exchange protocols CUDA and HIP device memory speak.
GPU_INTERFACES = Capability.DLPACK | Capability.CUDA_ARRAY_INTERFACE
#: What a CUDA or HIP backend declares before it is probed; each device's probe says what
#: it really has (a missing group, concurrent managed access, pageable access).
GPU_CAPABILITIES = capabilities(GPU_GROUPS, GPU_INTERFACES)

#: The public names every GPU backend package (aml_cuda, aml_hip) exports for the same
#: things, typed once in ``aml_core/gpu/exports.pyi``: the types of :mod:`aml_core.gpu`,
#: its ``BACKEND`` (a :class:`~aml_core.gpu.backend.GpuBackend`) and that backend's bound
#: methods, AML's area API among them. Each package also exports ``get_runtime`` and
#: ``load_runtime`` (typed with its own runtime class) and AML's names for its area, flags
#: and options (``CudaArea``, ``HipFlags``...); aml_cuda alone exports ``MIN_BINDINGS``, the
#: oldest cuda-bindings it runs on (aml-hip loads its library through ctypes: no binding).
GPU_TYPES = (
    "CPU",
    "INVALID",
    "Access",
    "Advice",
    "AllocationProperties",
    "AttachFlags",
    "CoherencyMode",
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
)
#: Of :data:`GPU_TYPES`, those of the virtual-memory and IPC API that every GPU backend has,
#: Level Zero's and HSA's too (they have no managed advice or streams); typed once in
#: ``aml_core/gpu/vmm_exports.pyi`` for the packages that export these and not all of GPU_TYPES.
GPU_VMM_TYPES = (
    "Access",
    "AllocationProperties",
    "GrowableBuffer",
    "IpcExport",
    "IpcHandle",
    "Physical",
    "Reservation",
    "VirtualMemory",
)
#: Of :data:`GPU_METHODS`, those of the ``PEER`` group (several devices: peer access and
#: copies), which CUDA and HIP have and aml-ze does not.
GPU_PEER_METHODS = ("can_access_peer", "copy_peer", "disable_peer_access", "enable_peer_access")
#: The methods of ``BACKEND`` a GPU backend package exports as functions.
GPU_METHODS = (
    "can_access_peer",
    "copy_peer",
    "create",
    "default_area",
    "destroy",
    "disable_peer_access",
    "enable_peer_access",
    "ipc_close",
    "ipc_open",
    "pointer_attributes",
    "probe",
    "stream",
    "unified_area",
    "virtual_memory",
)
GPU_FUNCTIONS = ("BACKEND", "get_runtime", "load_runtime", *GPU_METHODS)
#: The allocator hooks of the backends whose device pointers CuPy and PyTorch use (aml_cuda,
#: aml_hip): each package's ``hooks`` module binds :mod:`aml_core.gpu.hooks` to its backend,
#: and the package exports these names from it (typed in its own ``__init__.py``).
GPU_HOOKS = ("CupyHook", "TorchHook", "use_with_cupy", "use_with_torch")


def gpu_exports(prefix: str) -> dict[str, str]:
    """The lazy-export table of a GPU backend package: :data:`GPU_TYPES` from
    :mod:`aml_core.gpu`, :data:`GPU_METHODS` from its ``api.BACKEND``, ``BACKEND``,
    ``get_runtime`` and ``load_runtime`` from its ``api`` module, and AML's
    names for the area, its flags and mmap options: ``<prefix>Area``, ``<prefix>Flags``
    and ``<prefix>MmapOptions`` (``HipFlags`` is :class:`~aml_core.gpu.GpuFlags`...)."""
    aliases = {f"{prefix}{what}": f"aml_core.gpu:Gpu{what}" for what in ("Area", "Flags", "MmapOptions")}
    return (
        dict.fromkeys(GPU_TYPES, "aml_core.gpu")
        | {name: f".api:BACKEND.{name}" for name in GPU_METHODS}
        | dict.fromkeys(("BACKEND", "get_runtime", "load_runtime"), ".api")
        | aliases
    )


def lazy_descriptor(
    name: str,
    description: str,
    backend: Callable[[], GpuBackend],
    *,
    priority: int = GPU_PRIORITY,
    capabilities: Capability = GPU_CAPABILITIES,
    kinds: frozenset[Kind] = GPU_KINDS,
) -> BackendDescriptor:
    """A descriptor whose callables import the backend (``backend()``) only when the
    registry probes it, builds an area or opens an IPC handle. ``kinds`` is what the
    backend provides: CUDA's and HIP's by default (aml-ze has no MAPPED memory; aml-hsa
    provides device and host memory only)."""

    def probe() -> ProbeResult:
        return backend().probe()

    def create_area(kind: Kind, device: int | None = None, **options: Any) -> Any:
        return backend().create_area(kind, device, **options)

    def ipc_open(handle: Any) -> Any:
        return backend().ipc_open(handle)

    return BackendDescriptor(
        name=name,
        priority=priority,
        kinds=kinds,
        probe=probe,
        create_area=create_area,
        capabilities=capabilities,
        description=description,
        ipc_open=ipc_open,
    )
