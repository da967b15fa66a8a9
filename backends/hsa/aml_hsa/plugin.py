"""The ``aml.backends`` entry point of aml-hsa: the hook implementation and the cheap
probe only.

Importing this module loads no native library: the descriptor's probe loads
``libhsa-runtime64`` and calls ``hsa_init`` (through :mod:`aml_hsa.api`) when the registry
probes. Without an AMD GPU, ``hsa_init`` fails with OUT_OF_RESOURCES and the probe says
"no AMD GPU / KFD".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.descriptor import BackendDescriptor
from aml_core.gpu.groups import Group, capabilities
from aml_core.gpu.plugin import lazy_descriptor
from aml_core.hookspecs import hookimpl
from aml_core.specs import Capability, Kind

if TYPE_CHECKING:
    from .api import HsaBackend

__all__ = ["CAPABILITIES", "DESCRIPTION", "KINDS", "NAME", "PRIORITY", "aml_backends", "precheck"]

NAME = "hsa"
DESCRIPTION = (
    "AMD GPUs through HSA/ROCr (libhsa-runtime64, ctypes): agents and memory pools, device and "
    "host pool memory, hsa_amd_vmem_* virtual memory (ROCm 6.0+), IPC"
)
#: Below aml-hip (100): on an AMD node with both installed, device memory comes from HIP
#: unless ``backend="hsa"`` is asked for.
PRIORITY = 90
KINDS = frozenset({Kind.DEVICE, Kind.HOST})
#: What the backend may provide before it is probed (the probe says what this library has).
CAPABILITIES = capabilities({Group.IPC, Group.VIRTUAL_MEMORY}, Capability.DLPACK) | Capability.BUFFER_PROTOCOL
#: No cheaper test than loading the library and calling hsa_init.
precheck = None


def _backend() -> HsaBackend:
    from .api import BACKEND

    return BACKEND


@hookimpl
def aml_backends() -> list[BackendDescriptor]:
    return [
        lazy_descriptor(
            NAME,
            DESCRIPTION,
            _backend,
            priority=PRIORITY,
            capabilities=CAPABILITIES,
            kinds=KINDS,
            area_options=(),  # hsa areas take no options (HsaBackend.create_area)
        )
    ]
