"""What a GPU backend's plugin module needs: its kinds, its capabilities (derived from the
capability groups its runtime provides) and a descriptor
whose probe, area factory and IPC opener load the backend lazily.

Cheap to import (no runtime, no area code): a plugin module is imported by every
``aml_core.backends()`` call, GPU or not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..descriptor import AreaOptions, BackendDescriptor, ProbeResult
from ..specs import Capability, Kind
from .groups import Group, capabilities

if TYPE_CHECKING:
    from .backend import BackendBase

__all__ = [
    "GPU_AREA_OPTIONS",
    "GPU_CAPABILITIES",
    "GPU_GROUPS",
    "GPU_INTERFACES",
    "GPU_KINDS",
    "GPU_PRIORITY",
    "lazy_descriptor",
]

#: Above the host backend (0): on a node with a GPU, device, pinned, managed and mapped
#: memory come from the GPU backend.
GPU_PRIORITY = 100

GPU_KINDS = frozenset({Kind.DEVICE, Kind.HOST, Kind.MANAGED, Kind.MAPPED})
#: The area options of CUDA's and HIP's ``aml_core.area(kind=...)``, of every kind
#: (``GpuBackend.create_area``): ``all_devices`` adds ALLOC_GLOBAL.
GPU_AREA_OPTIONS = frozenset({"all_devices"})

#: The groups the CUDA and HIP runtimes provide (a library may lack one: the probe says).
GPU_GROUPS = frozenset(Group)
#: The exchange protocols CUDA and HIP device memory speak.
GPU_INTERFACES = Capability.DLPACK | Capability.CUDA_ARRAY_INTERFACE
#: What a CUDA or HIP backend declares before it is probed; each device's probe says what
#: it really has (a missing group, concurrent managed access, pageable access).
GPU_CAPABILITIES = capabilities(GPU_GROUPS, GPU_INTERFACES)

#: The name tables this module had, deprecated in 0.3 (removed in 0.4): a backend package's
#: public names are declared in its ``__init__.pyi`` now; :func:`__getattr__` reads them
#: from the stubs shared by the GPU backends.
_DEPRECATED = ("GPU_TYPES", "GPU_VMM_TYPES", "GPU_METHODS", "GPU_PEER_METHODS", "GPU_FUNCTIONS", "GPU_HOOKS")


def __getattr__(name: str) -> Any:
    """The deprecated tables (and ``gpu_exports``), with a :class:`DeprecationWarning`."""
    if name not in (*_DEPRECATED, "gpu_exports"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    warnings.warn(
        f"aml_core.gpu.plugin.{name} is deprecated: a GPU backend package declares its names in "
        "its __init__.pyi (aml_core.lazy.lazy_stub); read them from the package's __all__",
        DeprecationWarning,
        stacklevel=2,
    )
    shared = _shared("exports")
    if name == "gpu_exports":
        own = dict.fromkeys(("get_runtime", "load_runtime"), ".api")
        return lambda prefix: (
            shared | own | {f"{prefix}{w}": f"aml_core.gpu:Gpu{w}" for w in ("Area", "Flags", "MmapOptions")}
        )
    methods = tuple(sorted(n for n, place in shared.items() if ":BACKEND." in place))
    from .hooks import __all__ as hooks

    return {
        "GPU_TYPES": tuple(sorted(set(shared) - {"BACKEND", *methods})),
        "GPU_VMM_TYPES": tuple(sorted(_shared("vmm_exports"))),
        "GPU_METHODS": methods,
        "GPU_PEER_METHODS": tuple(n for n in methods if "peer" in n),
        "GPU_FUNCTIONS": ("BACKEND", "get_runtime", "load_runtime", *methods),
        "GPU_HOOKS": tuple(hooks),
    }[name]


def _shared(stub: str) -> dict[str, str]:
    """The places of the names a shared stub of this package declares (``.api:BACKEND``
    for the including package's backend)."""
    import os

    from ..lazy import read_stub

    return read_stub(os.path.join(os.path.dirname(__file__), f"{stub}.pyi"), __name__, "")[0]


def lazy_descriptor(
    name: str,
    description: str,
    backend: Callable[[], BackendBase[Any, Any]],
    *,
    priority: int = GPU_PRIORITY,
    capabilities: Capability = GPU_CAPABILITIES,
    kinds: frozenset[Kind] = GPU_KINDS,
    area_options: AreaOptions = GPU_AREA_OPTIONS,
) -> BackendDescriptor:
    """A descriptor whose callables import the backend (``backend()``) only when the
    registry probes it, builds an area or opens an IPC handle. ``kinds`` is what the
    backend provides: CUDA's and HIP's by default (aml-ze has no MAPPED memory; aml-hsa
    provides device and host memory only); ``area_options`` the options its
    ``create_area`` honours (``BackendDescriptor.area_options``; CUDA's and HIP's by
    default)."""

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
        area_options=area_options,
    )
