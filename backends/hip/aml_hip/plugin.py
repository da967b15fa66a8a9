"""The ``aml.backends`` entry point of aml-hip: hook implementation only.

Cheap to import: no native library is loaded here or when the hook runs; the
descriptor's probe loads ``libamdhip64`` when the registry probes.
"""

from __future__ import annotations

from aml_core.descriptor import BackendDescriptor
from aml_core.hookspecs import hookimpl
from aml_core.specs import Capability

__all__ = ["CAPABILITIES", "PRIORITY", "aml_backends"]

#: Above the host backend (0): a node with an AMD GPU gets HIP for device memory.
PRIORITY = 100
#: What the HIP backend can offer (each device's probe says what it really has).
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


@hookimpl
def aml_backends() -> list[BackendDescriptor]:
    from . import BACKEND

    return [BACKEND.descriptor(priority=PRIORITY, capabilities=CAPABILITIES)]
