"""The ``aml.backends`` entry point of aml-cuda: the hook implementation only.

Cheap to import: neither cuda-bindings nor the GPU area code is imported here; the
descriptor's probe, area factory and IPC opener load them when the registry calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.descriptor import BackendDescriptor
from aml_core.gpu.plugin import GPU_CAPABILITIES, GPU_KINDS, GPU_PRIORITY, lazy_descriptor
from aml_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from aml_core.gpu.backend import GpuBackend

__all__ = ["CAPABILITIES", "KINDS", "PRIORITY", "aml_backends"]

PRIORITY = GPU_PRIORITY
CAPABILITIES = GPU_CAPABILITIES
KINDS = GPU_KINDS


def _backend() -> GpuBackend:
    from ._api import BACKEND

    return BACKEND


@hookimpl
def aml_backends() -> list[BackendDescriptor]:
    return [
        lazy_descriptor(
            "cuda",
            "NVIDIA GPUs through cuda-bindings: device, pinned, managed and mapped memory, "
            "managed advice and prefetch, IPC, virtual memory",
            _backend,
        )
    ]
