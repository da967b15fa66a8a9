"""The ``aml.backends`` entry point of aml-cuda: the hook implementation and the cheap
probe only.

Importing this module loads no native library and no GPU code: the descriptor's probe,
area factory and IPC opener import :mod:`aml_cuda.api` when the registry calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.descriptor import BackendDescriptor
from aml_core.gpu.plugin import lazy_descriptor
from aml_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from aml_core.gpu.backend import GpuBackend

    from .runtime import CudaRuntime

__all__ = ["DESCRIPTION", "NAME", "aml_backends", "precheck"]

NAME = "cuda"
DESCRIPTION = (
    "NVIDIA GPUs through cuda-bindings: device, pinned, managed and mapped memory, "
    "managed advice and prefetch, IPC, virtual memory (cuMem*)"
)


def precheck() -> str | None:
    """Why CUDA cannot work here before cuda-bindings is even imported (about 50 ms saved
    on every machine without an NVIDIA driver), or None. The CUDA runtime looks for the
    driver exactly so: ``dlopen("libcuda.so.1")``."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return f"no NVIDIA driver: libcuda.so.1 cannot be loaded ({exc})"
    return None


def _backend() -> GpuBackend[CudaRuntime]:
    from .api import BACKEND

    return BACKEND


@hookimpl
def aml_backends() -> list[BackendDescriptor]:
    return [lazy_descriptor(NAME, DESCRIPTION, _backend)]
