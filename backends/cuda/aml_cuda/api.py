"""The public API of aml-cuda (imported on first use by :mod:`aml_cuda`).

:data:`BACKEND` is the shared GPU logic of :mod:`aml_core.gpu` over
:class:`aml_cuda.runtime.CudaRuntime`; the functions are its bound methods: AML's CUDA
area API (``aml_area_cuda_create``, ``aml_area_cuda_destroy``, ``aml_area_cuda``,
``aml_area_cuda_unified``) plus IPC, virtual memory and streams.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from aml_core.errors import AMLNotSupported
from aml_core.gpu import GpuArea, GpuBackend, GpuFlags, GpuMmapOptions

from . import plugin
from .native import MIN_BINDINGS

if TYPE_CHECKING:
    from .runtime import CudaRuntime

__all__ = [
    "BACKEND",
    "MIN_BINDINGS",
    "CudaArea",
    "CudaFlags",
    "CudaMmapOptions",
    "create",
    "default_area",
    "destroy",
    "get_runtime",
    "ipc_close",
    "ipc_open",
    "load_runtime",
    "pointer_attributes",
    "probe",
    "stream",
    "unified_area",
    "virtual_memory",
]

#: AML's CUDA area flags (``AML_AREA_CUDA_FLAG_*``): DEFAULT 0, ALLOC_HOST 1,
#: ALLOC_UNIFIED 2, ALLOC_MAPPED 4, ALLOC_GLOBAL 8 (the same class as HIP's).
CudaFlags = GpuFlags
#: The area ``create()`` returns.
CudaArea = GpuArea
#: ``struct aml_area_cuda_mmap_options``: ``device`` and ``ptr``.
CudaMmapOptions = GpuMmapOptions


def load_runtime() -> CudaRuntime:
    """Import cuda-bindings and build the runtime; ENOTSUP (with the reason) when
    cuda-bindings is missing, too old or broken. Touches no device."""
    try:
        from . import native
    except AMLNotSupported:
        raise
    except Exception as exc:
        raise AMLNotSupported(f"cuda-bindings could not be loaded: {type(exc).__name__}: {exc}") from exc
    native.bindings()  # checked at each load: the installed binding may have changed
    try:
        from .runtime import CudaRuntime
    except AMLNotSupported:
        raise
    except Exception as exc:
        raise AMLNotSupported(
            f"cuda-bindings {native.bindings_version()} could not be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    return CudaRuntime()


BACKEND = GpuBackend(plugin.NAME, load_runtime, precheck=plugin.precheck, description=plugin.DESCRIPTION)


def get_runtime() -> CudaRuntime:
    """The loaded :class:`~aml_cuda.runtime.CudaRuntime` (ENOTSUP without cuda-bindings)."""
    return cast("CudaRuntime", BACKEND.runtime)


create = BACKEND.create
destroy = BACKEND.destroy
default_area = BACKEND.default_area
unified_area = BACKEND.unified_area
ipc_open = BACKEND.ipc_open
ipc_close = BACKEND.ipc_close
virtual_memory = BACKEND.virtual_memory
stream = BACKEND.stream
probe = BACKEND.probe
pointer_attributes = BACKEND.pointer_attributes
