"""The ``aml.backends`` entry point of aml-cuda: the hook implementation only.

Cheap to import: neither cuda-bindings nor :mod:`aml_core.gpu` is imported here; the
probe and the area factory load them when the registry calls them.
"""

from __future__ import annotations

from typing import Any

from aml_core.descriptor import BackendDescriptor, ProbeResult
from aml_core.hookspecs import hookimpl
from aml_core.specs import Capability, Kind

__all__ = ["CAPABILITIES", "PRIORITY", "aml_backends"]

#: Above the host backend (0): on a node with an NVIDIA GPU, device, pinned, managed
#: and mapped memory come from here.
PRIORITY = 100

#: What any CUDA device offers through this backend; the probe adds what depends on
#: the device (concurrent managed access, pageable access).
CAPABILITIES = (
    Capability.MANAGED
    | Capability.VIRTUAL_MEMORY
    | Capability.IPC
    | Capability.PINNED
    | Capability.MAPPED
    | Capability.BUFFER_PROTOCOL
    | Capability.DLPACK
    | Capability.CUDA_ARRAY_INTERFACE
)

KINDS = frozenset({Kind.DEVICE, Kind.HOST, Kind.MANAGED, Kind.MAPPED})


def _probe() -> ProbeResult:
    from ._api import BACKEND

    return BACKEND.probe()


def _create_area(kind: Kind, device: int | None = None, **options: Any) -> Any:
    from ._api import BACKEND

    return BACKEND.create_area(kind, device, **options)


def _ipc_open(handle: Any) -> Any:
    from ._api import BACKEND

    return BACKEND.ipc_open(handle)


@hookimpl
def aml_backends() -> list[BackendDescriptor]:
    return [
        BackendDescriptor(
            name="cuda",
            priority=PRIORITY,
            kinds=KINDS,
            probe=_probe,
            create_area=_create_area,
            capabilities=CAPABILITIES,
            description="NVIDIA GPUs through cuda-bindings: device, pinned, managed and mapped memory, "
            "managed advice and prefetch, IPC, virtual memory",
            ipc_open=_ipc_open,
        )
    ]
