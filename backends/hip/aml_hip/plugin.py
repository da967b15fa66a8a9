"""The ``aml.backends`` entry point of aml-hip: the hook implementation and the cheap
probe only.

Importing this module loads no native library: the descriptor's probe loads
``libamdhip64`` (through :mod:`aml_hip.api`) when the registry probes. aml-hip has no
precheck cheaper than loading the library: ``dlopen`` is how it finds one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.descriptor import BackendDescriptor
from aml_core.gpu.plugin import lazy_descriptor
from aml_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from aml_core.gpu.backend import GpuBackend

    from .runtime import HipRuntime

__all__ = ["DESCRIPTION", "NAME", "aml_backends", "precheck"]

NAME = "hip"
DESCRIPTION = (
    "AMD GPUs through HIP (libamdhip64 5.2-7.x, ctypes): device, pinned, managed and "
    "mapped memory, managed advice and prefetch, IPC, virtual memory"
)
#: No cheaper test than loading the library (see the module doc).
precheck = None


def _backend() -> GpuBackend[HipRuntime]:
    from .api import BACKEND

    return BACKEND


@hookimpl
def aml_backends() -> list[BackendDescriptor]:
    return [lazy_descriptor(NAME, DESCRIPTION, _backend)]
