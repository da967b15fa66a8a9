"""The ``aml.backends`` entry point of aml-hip: hook implementation only.

Cheap to import: no native library is loaded here or when the hook runs; the
descriptor's probe loads ``libamdhip64`` when the registry probes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.descriptor import BackendDescriptor
from aml_core.gpu.plugin import GPU_CAPABILITIES, GPU_PRIORITY, lazy_descriptor
from aml_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from aml_core.gpu.backend import GpuBackend

__all__ = ["CAPABILITIES", "PRIORITY", "aml_backends"]

PRIORITY = GPU_PRIORITY
CAPABILITIES = GPU_CAPABILITIES


def _backend() -> GpuBackend:
    from . import BACKEND

    return BACKEND


@hookimpl
def aml_backends() -> list[BackendDescriptor]:
    return [
        lazy_descriptor(
            "hip",
            "AMD GPUs through HIP (libamdhip64 5.2-7.x, ctypes): device, pinned, managed and "
            "mapped memory, managed advice and prefetch, IPC, virtual memory",
            _backend,
        )
    ]
